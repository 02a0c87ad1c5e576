// GPU lowering (loom/lower/gpu.hpp) on hand-written schedules: kernels, launch shapes, shared
// memory, barriers, the programs it must refuse, and the CPU emulation against the DAG
// interpreter.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/gpu.hpp>

#include <sstream>
#include <string>

#include "support/random_schedule.hpp"

using namespace loom;
using loom::sched::Annotation;
using loom::sched::State;
using loom_test::workload;

namespace {

/// Emulates GPU program `p` (by default, the one of `s`) on the reference inputs and compares
/// with the DAG interpreter; returns the failure message, empty when every output matches.
std::string emulate_and_compare(const workload& w, const State& s, const lower::GpuProgram& p) {
  const loom_test::reference ref = loom_test::make_reference(w, 7);
  return loom_test::run_and_compare(
             w, ref, s,
             [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(p, ptrs); })
      .message;
}
std::string emulate_and_compare(const workload& w, const State& s) {
  return emulate_and_compare(w, s, lower::lower_gpu(s, Target::cuda()));
}

std::string text(const lower::GpuProgram& p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

/// C[16, 16] = A[16, 8] B[8, 16]: 8 blocks of 32 threads, each thread one element; with
/// `shared`, A's rows of a block are fetched into shared memory per 4-step slice of k.
State tiled_matmul(const workload& w, bool shared) {
  State s(w.dag);
  s.split("C", 0, {4});                // i.0 i.1 j k
  s.split("C", 2, {8});                // i.0 i.1 j.0 j.1 k
  s.split("C", 4, {4});                // i.0 i.1 j.0 j.1 k.0 k.1
  s.reorder("C", {0, 2, 1, 3, 4, 5});  // i.0 j.0 i.1 j.1 k.0 k.1
  s.fuse("C", {0, 1});
  s.fuse("C", {1, 2});  // (i.0 j.0) (i.1 j.1) k.0 k.1
  s.annotate("C", 0, Annotation::BlockIdxX);
  s.annotate("C", 1, Annotation::ThreadIdxX);
  if (shared) {
    const std::string a = s.cache_read("A", ir::MemoryScope::Shared, {"C"});
    s.compute_at(a, "C", 2);  // the 4 x 4 slice of A that the block's rows need at k.0
    s.fuse(a, {0, 1});
    s.split(a, 0, {32});  // 16 elements over 32 threads: a guard keeps 16 of them
    s.annotate(a, 1, Annotation::ThreadIdxX);
  }
  return s;
}

/// R[i] = sum_k X[i, k] with a block per row and k split over `threads` threads of it.
State row_sum_across(const workload& w, int64_t threads) {
  State s(w.dag);
  s.split("R", 1, {threads});  // i k.0 k.1
  s.annotate("R", 0, Annotation::BlockIdxX);
  s.annotate("R", 2, Annotation::ThreadIdxX);
  return s;
}

/// Softmax in one kernel: a block per row, the row maximum and sum reduced across its threads
/// (computed at the row loop of the result), the result's columns spread over the same threads.
State softmax_one_kernel(const workload& w, int64_t threads) {
  State s(w.dag);
  s.compute_inline("exp");
  s.split("softmax", 1, {threads});         // i j.0 j.1
  for (const char* r : {"rsum", "rmax"}) {  // rmax's readers must be inside first
    s.compute_at(r, "softmax", 0);
    s.split(r, 1, {threads});  // i k.0 k.1
    s.annotate(r, 2, Annotation::ThreadIdxX);
  }
  s.annotate("softmax", 0, Annotation::BlockIdxX);
  s.annotate("softmax", 2, Annotation::ThreadIdxX);
  return s;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("a matmul bound to blocks and threads: one kernel, its launch shape, no barrier") {
    const workload w = loom_test::matmul(16, 16, 8);
    const State s = tiled_matmul(w, false);
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    REQUIRE(p.kernels.size() == 1);
    const lower::GpuKernel& k = p.kernels[0];
    CHECK(k.grid == std::array<int64_t, 3>{8, 1, 1});
    CHECK(k.block == std::array<int64_t, 3>{32, 1, 1});
    CHECK(k.shared.empty());
    CHECK(k.params.size() == 3);
    CHECK(count(text(p), "barrier") == 0);
    CHECK(emulate_and_compare(w, s) == "");
  }

  TEST_CASE("a cooperative shared-memory fetch gets a barrier before and after it") {
    const workload w = loom_test::matmul(16, 16, 8);
    const State s = tiled_matmul(w, true);
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    REQUIRE(p.kernels.size() == 1);
    const lower::GpuKernel& k = p.kernels[0];
    REQUIRE(k.shared.size() == 1);
    // The block's 4 rows of A for one k.0 step, whatever thread reads them.
    CHECK(k.shared[0]->num_elements() == 16);
    CHECK(k.shared_bytes() == 64);
    INFO(text(p));
    // Inside k.0: a barrier before the fetch (last step's readers) and one before the reads.
    CHECK(count(text(p), "barrier") == 2);
    CHECK(emulate_and_compare(w, s) == "");
  }

  TEST_CASE("the emulation catches a missing barrier") {
    const workload w = loom_test::matmul(16, 16, 8);
    const State s = tiled_matmul(w, true);
    lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    struct strip : ir::StmtMutator {
      ir::Stmt visit_Barrier(const ir::Barrier*, const ir::Stmt&) override {
        return ir::Block::make({});
      }
    };
    p.kernels[0].body = strip().mutate(p.kernels[0].body);
    CHECK(emulate_and_compare(w, s, p) != "");
  }

  TEST_CASE("a root intermediate becomes a workspace and a second kernel") {
    const workload w = loom_test::elementwise_chain(8, 24);
    State s(w.dag);
    for (size_t i = 0; i < s.stages().size(); ++i) {
      const auto& st = s.stages()[i];
      if (st.is_placeholder) continue;
      const std::string name = st.name;
      s.fuse(name, {0, 1});
      s.split(name, 0, {64});
      s.annotate(name, 0, Annotation::BlockIdxX);
      s.annotate(name, 1, Annotation::ThreadIdxX);
    }
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    CHECK(p.kernels.size() == s.stages().size() - w.dag->inputs().size());
    CHECK(p.workspaces.size() == p.kernels.size() - 1);
    CHECK(p.kernels[0].grid[0] == 3);  // 192 elements / 64 threads
    CHECK(emulate_and_compare(w, s) == "");
  }

  TEST_CASE("a reduction across the threads of a block: a partial per thread, one AllReduce") {
    // 100 columns: every thread count leaves a tail that the reduction guard skips.
    const workload w = loom_test::row_sum(6, 100);
    for (int64_t threads : {8, 32, 48, 64, 128}) {
      CAPTURE(threads);
      const State s = row_sum_across(w, threads);
      const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
      REQUIRE(p.kernels.size() == 1);
      const lower::GpuKernel& k = p.kernels[0];
      CHECK(k.grid == std::array<int64_t, 3>{6, 1, 1});
      // A thread loop longer than the row shrinks to it.
      CHECK(k.block == std::array<int64_t, 3>{std::min<int64_t>(threads, 100), 1, 1});
      INFO(text(p));
      // The thread loop went outside k.0: one AllReduce per row, not one per k.0 step.
      CHECK(count(text(p), "all_reduce_sum") == 1);
      CHECK(k.shared_bytes() == 4 * lower::all_reduce_scratch_elements(k.block));
      CHECK(emulate_and_compare(w, s) == "");
      // The loop nest with the thread loop moved outside means the same run serially.
      const loom_test::reference ref = loom_test::make_reference(w, 7);
      CHECK(loom_test::run_and_compare(w, ref, s).message == "");
    }
    CHECK(lower::all_reduce_scratch_elements({32, 1, 1}) == 0);
    CHECK(lower::all_reduce_scratch_elements({8, 4, 1}) == 0);
    CHECK(lower::all_reduce_scratch_elements({128, 2, 1}) == 8);
    CHECK(lower::all_reduce_scratch_elements({48, 1, 1}) == 48);
  }

  TEST_CASE("softmax in one kernel: two reductions across threads, then the row") {
    for (int64_t threads : {16, 32, 64}) {
      CAPTURE(threads);
      const workload w = loom_test::softmax(5, 70);
      const State s = softmax_one_kernel(w, threads);
      const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
      REQUIRE(p.kernels.size() == 1);
      INFO(text(p));
      CHECK(count(text(p), "all_reduce_max") == 1);
      CHECK(count(text(p), "all_reduce_sum") == 1);
      CHECK(emulate_and_compare(w, s) == "");
    }
  }

  TEST_CASE("the emulation of a reduction across threads sees every thread's partial") {
    // A kernel whose AllReduce were a no-op would leave each thread its own partial sum.
    const workload w = loom_test::row_sum(3, 64);
    const State s = row_sum_across(w, 32);
    lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    struct drop : ir::StmtMutator {
      ir::Stmt visit_AllReduce(const ir::AllReduce*, const ir::Stmt&) override {
        return ir::Block::make({});
      }
    };
    p.kernels[0].body = drop().mutate(p.kernels[0].body);
    CHECK(emulate_and_compare(w, s, p) != "");
  }

  TEST_CASE("programs whose GPU meaning differs are refused") {
    const workload w = loom_test::matmul(16, 16, 8);
    SUBCASE("a write outside the thread loops of a block with threads") {
      State s(w.dag);
      s.split("C", 1, {16});  // i j.0 j.1 k
      s.annotate("C", 0, Annotation::BlockIdxX);
      const std::string a = s.cache_read("A", ir::MemoryScope::Shared, {"C"});
      s.compute_at(a, "C", 0);
      s.annotate(a, 1, Annotation::ThreadIdxX);  // A.shared[8] over 8 threads
      // C itself is not bound to threads: all 8 would update it.
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("loom.lower.E420"), user_error);
    }
    SUBCASE("a reduction across threads") {
      State s(w.dag);
      s.reorder("C", {0, 2, 1});  // i k j
      s.annotate("C", 0, Annotation::BlockIdxX);
      s.annotate("C", 1, Annotation::ThreadIdxX);  // k over threads: a race on C[i, j]
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("loom.lower.E420"), user_error);
    }
    SUBCASE("a reduction across threadIdx.y") {
      const workload rs = loom_test::row_sum(4, 64);
      State s(rs.dag);
      s.split("R", 1, {32});
      s.annotate("R", 0, Annotation::BlockIdxX);
      s.annotate("R", 2, Annotation::ThreadIdxY);
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("runs across threadIdx.x only"), user_error);
    }
    SUBCASE("a reduction across threads where only some threads run") {
      // softmax's row sum inside the result's thread loop, which half of the block runs: the
      // other half would never meet them.
      const workload sm = loom_test::softmax(4, 64);
      State s(sm.dag);
      s.compute_inline("exp");
      s.split("softmax", 1, {16});  // i j.0 j.1: 16 of the block's 32 threads
      s.compute_at("rsum", "softmax", 2);
      s.split("rsum", 1, {32});
      s.annotate("rsum", 2, Annotation::ThreadIdxX);
      s.compute_at("rmax", "softmax", 0);
      s.split("rmax", 1, {32});
      s.annotate("rmax", 2, Annotation::ThreadIdxX);
      s.annotate("softmax", 0, Annotation::BlockIdxX);
      s.annotate("softmax", 2, Annotation::ThreadIdxX);
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("loom.lower.E424"), user_error);
    }
    SUBCASE("a parallel loop") {
      State s(w.dag);
      s.annotate("C", 0, Annotation::Parallel);
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("loom.lower.E423"), user_error);
    }
    SUBCASE("too many threads") {
      const workload big = loom_test::matmul(64, 64, 8);
      State s(big.dag);
      s.fuse("C", {0, 1});
      s.annotate("C", 0, Annotation::ThreadIdxX);  // 4096 threads in one block
      CHECK_THROWS_WITH_AS(lower::lower_gpu(s, Target::cuda()),
                           doctest::Contains("loom.lower.E425"), user_error);
    }
    SUBCASE("a CPU target") {
      CHECK_THROWS_WITH_AS(lower::lower_gpu(State(w.dag), Target::host()),
                           doctest::Contains("loom.lower.E426"), user_error);
    }
  }
}

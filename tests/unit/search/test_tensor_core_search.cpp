// Tensor cores in the GPU search space (sketch rule TensorCoreTilingGpu, search/sketch.hpp, and
// ThreadBind's cooperative fetch for its tiles): which workloads get a tensor-core sketch, and
// every program sampled from one computes the DAG's result in the CPU emulation of the GPU,
// where each m16n8k16 instruction exchanges its fragments between the lanes as the hardware
// does (lower/mma.hpp).
#include <doctest/doctest.h>

#include <loom/lower/gpu.hpp>
#include <loom/lower/infer_regions.hpp>
#include <loom/lower/plan_buffers.hpp>
#include <loom/ops.hpp>
#include <loom/ops/untyped.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/mutate.hpp>
#include <loom/search/sketch.hpp>

#include <array>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/mma_schedule.hpp"
#include "support/random_schedule.hpp"

using namespace loom;

namespace {

bool has_tensorized_loop(const sched::State& s) {
  for (const sched::Stage& st : s.stages())
    for (int leaf : st.leaves)
      if (st.iters[leaf].annotation == sched::Annotation::Tensorized) return true;
  return false;
}

std::vector<sched::State> tensor_core_sketches(const std::vector<sched::State>& sketches) {
  std::vector<sched::State> out;
  for (const sched::State& s : sketches)
    if (has_tensorized_loop(s)) out.push_back(s);
  return out;
}

// The thread-local (register) arrays every access of which the thread index does not move:
// what a thread's accumulators need to stay in registers (an index that moves with the thread
// puts the array in local memory). Returns the first local array that moves, empty if none.
std::string local_array_moving_with_thread(const lower::GpuProgram& g) {
  std::string moving;
  for (const lower::GpuKernel& k : g.kernels) {
    const ir::Variable* tx = k.thread_index[0].as<ir::Variable>();
    auto check = [&](const ir::Buffer& b, const ir::Expr& index) {
      if (moving.empty() && b->scope == ir::MemoryScope::Local && ir::uses_var(index, tx))
        moving = b->name;
    };
    struct walker : ir::StmtVisitor {
      std::function<void(const ir::Buffer&, const ir::Expr&)> check;
      using ir::StmtVisitor::visit;
      void visit_Load(const ir::Load* op) override {
        check(op->buffer, op->index);
        ir::StmtVisitor::visit_Load(op);
      }
      void visit_Store(const ir::Store* op) override {
        check(op->buffer, op->index);
        ir::StmtVisitor::visit_Store(op);
      }
    } w;
    w.check = check;
    w.visit(k.body);
  }
  return moving;
}

// The bank conflicts of an ldmatrix (`phases` phases of 8 lanes, each giving one 16-byte row
// `row` of `buffer`): the most rows of one phase that fall in the same of shared memory's 8
// 16-byte bank groups (1: none), for warp 0 with every other variable at `others`.
int ldmatrix_ways(const lower::GpuKernel& k, const ir::Buffer& buffer, const ir::Expr& row,
                  int phases, int64_t others) {
  const ir::Variable* tx = k.thread_index[0].as<ir::Variable>();
  int worst = 1;
  for (int phase = 0; phase < phases; ++phase) {
    std::array<int, 8> groups{};
    for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
      std::unordered_map<const ir::Variable*, ir::Expr> values;
      for (const ir::Variable* v : ir::free_vars(row)) values[v] = ir::Expr(others);
      values[tx] = ir::Expr(int64_t{lane});
      const ir::Expr at = ir::simplify(ir::substitute(row, values));
      REQUIRE(ir::as_const_int(at) != nullptr);
      const int64_t bytes = *ir::as_const_int(at) * buffer->dtype.bytes();
      worst = std::max(worst, ++groups[static_cast<size_t>(bytes / 16 % 8)]);
    }
  }
  return worst;
}

// The task's tensor-core sketch that copies the operands one instruction's k at a time (the
// first; the second copies the middle reduce level's steps at once, gpu_deep_k_tiles).
sched::State the_tensor_core_sketch(const Task& task) {
  const auto tc = tensor_core_sketches(search::generate_sketches(task));
  REQUIRE(tc.size() == 2);
  return tc[0];
}

// Tensor-core copies stored lane-major with probability p.
search::SearchOptions lane_major(double p) {
  search::SearchOptions o;
  o.gpu_lane_major_probability = p;
  return o;
}

// The 128 x 128 x 64 matmuls the shared-layout tests sample: bf16 with B given as [K, N], or
// fp16 with B given as [N, K].
std::shared_ptr<const ComputeDAG> layout_test_matmul(bool bf16) {
  return bf16 ? loom_test::half_matmul<bfloat16>(128, 128, 64)
              : loom_test::matmul_b_transposed<float16>(128, 128, 64);
}

// What is wrong with the product that program `g` computes for layout_test_matmul(bf16),
// emulated; "" when nothing.
std::string emulated_layout_test_error(const ComputeDAG& dag, bool bf16,
                                       const lower::GpuProgram& g) {
  auto run = [&](std::vector<void*> args) { lower::emulate(g, args); };
  return bf16 ? loom_test::check_half_matmul<bfloat16>(dag, 128, 128, 64, run)
              : loom_test::check_half_matmul<float16>(dag, 128, 128, 64, run);
}

std::shared_ptr<const ComputeDAG> batch_matmul_bf16(int64_t b, int64_t m, int64_t n, int64_t k) {
  auto x = placeholder<bfloat16>("A", {b, m, k});
  auto y = placeholder<bfloat16>("B", {b, k, n});
  auto r = reduce_axis(k, "k");
  auto c = compute("C", {b, m, n}, [&](Var p, Var i, Var j) {
    return sum(cast<float>(x(p, i, r)) * cast<float>(y(p, r, j)), r);
  });
  return std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x, y},
                                            std::vector<ir::Tensor>{c});
}

}  // namespace

TEST_SUITE("search.tensor_cores") {
  TEST_CASE("a bf16 or fp16 matmul on sm_80+ gets two tensor-core sketches beside its SIMT ones") {
    const auto bf16 = loom_test::half_matmul<bfloat16>(64, 64, 64);
    const auto sketches = search::generate_sketches(Task(bf16, Target::cuda("sm_90")));
    CHECK(tensor_core_sketches(sketches).size() == 2);
    search::SearchOptions off;
    off.gpu_tensor_cores = false;
    const auto simt = search::generate_sketches(Task(bf16, Target::cuda("sm_90")), off);
    CHECK(tensor_core_sketches(simt).empty());
    CHECK(simt.size() + 2 == sketches.size());
    search::SearchOptions shallow;
    shallow.gpu_deep_k_tiles = false;
    CHECK(
        tensor_core_sketches(search::generate_sketches(Task(bf16, Target::cuda("sm_90")), shallow))
            .size() == 1);
    CHECK(tensor_core_sketches(
              search::generate_sketches(
                  Task(loom_test::half_matmul<float16>(32, 16, 16), Target::cuda("sm_80"))))
              .size() == 2);
    // Not before Ampere, not for float32 operands. M no multiple of 16 (40) is padded.
    CHECK(
        tensor_core_sketches(search::generate_sketches(Task(bf16, Target::cuda("sm_75")))).empty());
    auto a = placeholder<float>("A", {64, 64});
    auto b = placeholder<float>("B", {64, 64});
    const auto f32 = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                        std::vector<ir::Tensor>{ops::matmul(a, b)});
    CHECK(tensor_core_sketches(search::generate_sketches(Task(f32, Target::cuda()))).empty());
    CHECK(tensor_core_sketches(search::generate_sketches(Task(
                                   loom_test::half_matmul<bfloat16>(40, 64, 64), Target::cuda())))
              .size() == 2);
  }

  TEST_CASE("on sm_90a warpgroup sketches sample warpgroup MMAs, and every sample is right") {
    // Beside the two tensor-core sketches, two per warp count along M (4 and 8 warps), each
    // with the deep-k variant; ThreadBind stores their copies lane-major and swizzled, the
    // layouts a wgmma's descriptors read.
    struct shape {
      int64_t m, n, k;
      bool b_transposed;
    };
    for (const shape sh : {shape{256, 128, 128, false}, shape{128, 256, 64, true}}) {
      CAPTURE(sh.b_transposed);
      const auto dag = sh.b_transposed ? loom_test::matmul_b_transposed<bfloat16>(sh.m, sh.n, sh.k)
                                       : loom_test::half_matmul<bfloat16>(sh.m, sh.n, sh.k);
      const Task task(dag, Target::cuda("sm_90a"));
      const auto tc = tensor_core_sketches(search::generate_sketches(task));
      CHECK(tc.size() == 6);
      CHECK(tensor_core_sketches(search::generate_sketches(Task(dag, Target::cuda("sm_90"))))
                .size() == 2);
      std::mt19937_64 rng(31);
      const auto programs = search::sample_programs(tc, task, {}, rng, 16);
      CHECK(programs.size() >= 8);
      int wgmma = 0;
      for (const sched::State& p : programs) {
        const lower::GpuProgram g = lower::lower_gpu(p, task.target);
        wgmma += !g.kernels[0].wgmma_operands.empty();
        const std::string r = loom_test::check_half_matmul<bfloat16>(
            *dag, sh.m, sh.n, sh.k, [&](std::vector<void*> args) { lower::emulate(g, args); });
        CHECK_MESSAGE(r == "", p.to_string());
      }
      MESSAGE(wgmma << " of " << programs.size() << " samples are warpgroup MMAs");
      CHECK(wgmma >= 4);
    }
    // TF32 with B given as [N, K] (K-major, as wgmma reads TF32): warpgroup sketches too; with
    // B as [K, N] none (the two tensor-core sketches alone).
    const Target tf32 = Target::cuda("sm_90a").with_tf32();
    const auto nt = loom_test::matmul_b_transposed<float>(128, 256, 64);
    const Task task(nt, tf32);
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    CHECK(tc.size() == 6);
    CHECK(tensor_core_sketches(
              search::generate_sketches(Task(loom_test::float_matmul(128, 256, 64), tf32)))
              .size() == 2);
    std::mt19937_64 rng(37);
    int wgmma = 0;
    for (const sched::State& p : search::sample_programs(tc, task, {}, rng, 16)) {
      const lower::GpuProgram g = lower::lower_gpu(p, task.target);
      wgmma += !g.kernels[0].wgmma_operands.empty();
      CHECK_MESSAGE(
          loom_test::check_half_matmul<float>(
              *nt, 128, 256, 64, [&](std::vector<void*> args) { lower::emulate(g, args); }) == "",
          p.to_string());
    }
    MESSAGE(wgmma << " of 16 TF32 samples are warpgroup MMAs");
    CHECK(wgmma >= 4);
  }

  TEST_CASE("the deep-k sketch copies several instructions' k per barrier, and is right") {
    // gpu_deep_k_tiles: the operands' shared copies sit at the outermost reduce loop, so one
    // copy (one barrier, one pipeline stage) holds every step of the middle level: 32 or 64 of
    // k where the other sketch takes the instruction's 16.
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 128);
    const Task task(dag, Target::cuda("sm_90"));
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    REQUIRE(tc.size() == 2);
    // The reduce loop a stage's shared copies are computed at: 0 outermost, 1 middle.
    auto copy_level = [](const sched::State& s) {
      std::set<int> levels;
      for (const sched::Stage& st : s.stages()) {
        if (st.scope != ir::MemoryScope::Shared) continue;
        const sched::Stage& at = s.stage(st.attach_stage);
        const int p = at.leaf_position(st.attach_iter);
        int first = 0;
        while (at.leaf(first).kind != sched::IterKind::Reduce) ++first;
        levels.insert(p - first);
      }
      return levels;
    };
    CHECK(copy_level(tc[0]) == std::set<int>{1});
    CHECK(copy_level(tc[1]) == std::set<int>{0});
    std::mt19937_64 rng(43);
    const auto programs = search::sample_programs({tc[1]}, task, {}, rng, 12);
    CHECK(programs.size() >= 6);
    int deep = 0, pipelined = 0;
    for (const sched::State& p : programs) {
      const lower::GpuProgram g = lower::lower_gpu(p, task.target);
      // The loop inside A's copy is the middle reduce level: more than one step of it is more
      // than the instruction's 16 of k a copy.
      for (const sched::Stage& st : p.stages()) {
        if (st.scope != ir::MemoryScope::Shared) continue;
        const sched::Stage& at = p.stage(st.attach_stage);
        const int64_t middle = at.leaf(at.leaf_position(st.attach_iter) + 1).extent;
        deep += st.name == "A.shared" && middle > 1;
        pipelined += st.name == "A.shared" &&
                     ir::pipeline_stages(at.leaf(at.leaf_position(st.attach_iter)).annotation) > 1;
      }
      const std::string r = loom_test::check_half_matmul<bfloat16>(
          *dag, 64, 64, 128, [&](std::vector<void*> args) { lower::emulate(g, args); });
      CHECK_MESSAGE(r == "", p.to_string());
    }
    MESSAGE(deep << " of " << programs.size() << " copy more than 16 of k, " << pipelined
                 << " pipelined");
    CHECK(deep >= 3);
    CHECK(pipelined >= 1);
  }

  TEST_CASE("every program sampled from a tensor-core sketch computes the matmul's result") {
    struct shape {
      int64_t m, n, k;
    };
    for (const shape sh : {shape{64, 64, 64}, shape{128, 32, 48}, shape{32, 96, 32}}) {
      CAPTURE(sh.m);
      CAPTURE(sh.n);
      CAPTURE(sh.k);
      for (const bool bf : {true, false}) {
        const auto dag = bf ? loom_test::half_matmul<bfloat16>(sh.m, sh.n, sh.k)
                            : loom_test::half_matmul<float16>(sh.m, sh.n, sh.k);
        const Task task(dag, Target::cuda("sm_90"));
        const auto tc = tensor_core_sketches(search::generate_sketches(task));
        REQUIRE(tc.size() == 2);
        std::mt19937_64 rng(29);
        const auto programs = search::sample_programs(tc, task, {}, rng, 12);
        CHECK(programs.size() >= 4);
        for (const sched::State& p : programs) {
          const lower::GpuProgram g = lower::lower_gpu(p, task.target);
          const std::string r = bf ? loom_test::check_half_matmul<bfloat16>(
                                         *dag, sh.m, sh.n, sh.k,
                                         [&](std::vector<void*> args) { lower::emulate(g, args); })
                                   : loom_test::check_half_matmul<float16>(
                                         *dag, sh.m, sh.n, sh.k,
                                         [&](std::vector<void*> args) { lower::emulate(g, args); });
          CHECK_MESSAGE(r == "", p.to_string());
        }
      }
    }
  }

  TEST_CASE("tensor-core operands in shared memory have rows of an odd number of 16 bytes") {
    // The 8 rows one ldmatrix phase reads then fall into different 16-byte bank groups where
    // they are consecutive. Every sample above is padded (the default), and right.
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    const Task task(dag, Target::cuda("sm_90"));
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    REQUIRE(tc.size() == 2);
    for (double probability : {1.0, 0.0}) {
      CAPTURE(probability);
      search::SearchOptions o;
      o.gpu_pad_shared_probability = probability;
      o.gpu_swizzle_shared_probability = 0;  // padding only (swizzles: the test below)
      std::mt19937_64 rng(5);
      int shared = 0, odd = 0, padded = 0;
      for (const sched::State& p : search::sample_programs(tc, task, o, rng, 12)) {
        const lower::BufferPlan plan = lower::plan_buffers(p, lower::infer_regions(p));
        for (size_t si = 0; si < p.stages().size(); ++si) {
          const sched::Stage& st = p.stages()[si];
          if (st.scope != ir::MemoryScope::Shared || !plan.stages[si].buffer) continue;
          ++shared;
          const int64_t row_bytes = plan.stages[si].strides[0] * st.op.dtype().bytes();
          odd += row_bytes % 16 == 0 && (row_bytes / 16) % 2 == 1;
          padded += !st.storage_aligns.empty();
        }
      }
      CHECK(shared > 0);
      // Unpadded, a row is the tile's width (the k-step, or N's tile), odd only by chance.
      CHECK(padded == (probability == 1.0 ? shared : 0));
      if (probability == 1.0) CHECK(odd == shared);
    }
  }

  TEST_CASE("tensor-core operands are copied 16 bytes a thread unless the draw says otherwise") {
    // A's k-step is a multiple of 16 elements, so every copy of A can take 16 bytes (8 bf16).
    // B given as [K, N] and stored lane-major keeps its fragments' 4 bytes; as [N, K], 16.
    // (A copy of 16 bytes is one cp.async; one of 2 bytes cannot be asynchronous.)
    for (const bool b_lane_major : {true, false}) {
      CAPTURE(b_lane_major);
      const auto dag = loom_test::half_matmul<bfloat16>(256, 256, 128);
      const Task task(dag, Target::cuda("sm_90"));
      const sched::State sketch = the_tensor_core_sketch(task);
      for (const double p : {1.0, 0.0}) {
        CAPTURE(p);
        search::SearchOptions o = lane_major(b_lane_major ? 1.0 : 0.0);
        o.gpu_widest_copy_probability = p;
        std::mt19937_64 rng(17);
        int copies = 0, widest = 0;
        for (const sched::State& prog : search::sample_programs({sketch}, task, o, rng, 16)) {
          for (const char* name : {"A.shared", "B.shared"}) {
            const sched::Stage& st = prog.stage(name);
            const int64_t lanes =
                st.leaves.size() == 3 ? st.leaf(2).extent : 1;  // outer, threads, vector
            const bool b_permuted = name[0] == 'B' && !st.storage_permutes.empty();
            ++copies;
            widest += lanes == (b_permuted ? 2 : 8);
          }
        }
        MESSAGE("B lane-major " << b_lane_major << ", widest-copy probability " << p << ": "
                                << widest << " of " << copies << " copies the widest");
        if (p == 1.0) {
          CHECK(widest == copies);
        } else {
          CHECK(widest < copies);
          CHECK(widest > 0);
        }
      }
    }
  }

  TEST_CASE("lane-major shared copies: ldmatrix phases without bank conflicts, B by ldmatrix") {
    // A lane's rows are a run of its register tile, so one ldmatrix phase reads rows a run apart:
    // padded, still 2-, 4- or 8-way conflicts on A. Stored lane-major (storage_permute), the
    // phase's rows lie side by side and the padding separates them; B's columns of one tile are
    // contiguous, so B loads with ldmatrix .trans whatever the register tile.
    for (const bool bf : {true, false}) {
      CAPTURE(bf);
      const auto dag = layout_test_matmul(bf);
      const Task task(dag, Target::cuda("sm_90"));
      const sched::State sketch = the_tensor_core_sketch(task);
      for (const double p : {0.0, 1.0}) {
        CAPTURE(p);
        std::mt19937_64 rng(41);
        int tiles = 0, a_worst = 1, b_worst = 1, b_ldmatrix = 0, permuted = 0;
        for (const sched::State& prog :
             search::sample_programs({sketch}, task, lane_major(p), rng, 16)) {
          for (const sched::Stage& st : prog.stages()) permuted += !st.storage_permutes.empty();
          const lower::GpuProgram g = lower::lower_gpu(prog, task.target);
          const lower::GpuKernel& k = g.kernels[0];
          for (const lower::MmaTile& t : loom_test::tiles_of(k)) {
            ++tiles;
            REQUIRE(t.a_row.defined());
            for (int64_t others : {0, 1})
              a_worst = std::max(a_worst, ldmatrix_ways(k, t.a, t.a_row, 4, others));
            b_ldmatrix += t.b_row.defined();
            if (t.b_row.defined())
              for (int64_t others : {0, 1})
                b_worst = std::max(b_worst, ldmatrix_ways(k, t.b, t.b_row, 2, others));
          }
          CHECK_MESSAGE(emulated_layout_test_error(*dag, bf, g) == "", prog.to_string());
        }
        MESSAGE((bf ? "B [K, N]" : "B [N, K]")
                << ", lane-major " << p << ": " << tiles << " tiles, A's worst phase " << a_worst
                << "-way, B by ldmatrix " << b_ldmatrix << " (worst " << b_worst << "-way), "
                << permuted << " permuted copies");
        CHECK(tiles >= 8);
        if (p == 1.0) {
          CHECK(permuted > 0);
          CHECK(a_worst == 1);
          CHECK(b_worst == 1);
          CHECK(b_ldmatrix == tiles);
        } else {
          CHECK(permuted == 0);
          CHECK(a_worst > 1);
        }
      }
    }
  }

  TEST_CASE("swizzled shared copies: ldmatrix phases without bank conflicts, without padding") {
    // The same programs (one seed) with the operands' rows padded and swizzled: every swizzled
    // one has conflict-free phases on both operands, computes the product, and takes less
    // shared memory than its padded twin.
    for (const bool bf : {true, false}) {
      CAPTURE(bf);
      const auto dag = layout_test_matmul(bf);
      const Task task(dag, Target::cuda("sm_90"));
      const sched::State sketch = the_tensor_core_sketch(task);
      std::vector<int64_t> shared[2];
      int swizzled = 0, tiles = 0, a_worst = 1, b_worst = 1;
      for (const double p : {0.0, 1.0}) {
        search::SearchOptions o;
        o.gpu_swizzle_shared_probability = p;
        std::mt19937_64 rng(43);
        for (const sched::State& prog : search::sample_programs({sketch}, task, o, rng, 16)) {
          const lower::GpuProgram g = lower::lower_gpu(prog, task.target);
          const lower::GpuKernel& k = g.kernels[0];
          shared[p == 1.0].push_back(k.shared_bytes());
          if (p == 0.0) continue;
          bool any = false;
          for (const sched::Stage& st : prog.stages()) any |= st.storage_swizzle != 0;
          if (!any) continue;
          ++swizzled;
          for (const lower::MmaTile& t : loom_test::tiles_of(k)) {
            ++tiles;
            REQUIRE(t.a_row.defined());
            REQUIRE(t.b_row.defined());
            for (int64_t others : {0, 1}) {
              a_worst = std::max(a_worst, ldmatrix_ways(k, t.a, t.a_row, 4, others));
              b_worst = std::max(b_worst, ldmatrix_ways(k, t.b, t.b_row, 2, others));
            }
          }
          CHECK_MESSAGE(emulated_layout_test_error(*dag, bf, g) == "", prog.to_string());
        }
      }
      REQUIRE(shared[0].size() == shared[1].size());
      int smaller = 0;
      for (size_t i = 0; i < shared[0].size(); ++i) {
        CHECK(shared[1][i] <= shared[0][i]);
        smaller += shared[1][i] < shared[0][i];
      }
      MESSAGE((bf ? "B [K, N]" : "B [N, K]")
              << ": " << swizzled << " of 16 programs swizzled, " << tiles
              << " tiles, worst phases A " << a_worst << "-way, B " << b_worst << "-way; "
              << smaller << " take less shared memory than padded");
      CHECK(swizzled >= 4);
      CHECK(smaller == swizzled);
      CHECK(a_worst == 1);
      CHECK(b_worst == 1);
    }
  }

  TEST_CASE("a convolution's input: ldmatrix phases over image rows and columns conflict-free") {
    // A phase's 8 rows are a box of output rows and columns (2 x 4 on these small images), read
    // through the window (h + rh, w + rw). Lane-major along both and the rows' stride aligned
    // to the columns' lanes (tensor_core_phase_aligns), they fall in 8 bank groups; before,
    // 2- and 4-way conflicts. Correctness: the convolution test above samples the same layouts.
    struct layer {
      int64_t h, c;
    };
    for (const layer l : {layer{14, 256}, layer{7, 512}}) {
      CAPTURE(l.h);
      auto x = placeholder<float16>("x", {1, l.h, l.h, l.c});
      auto f = placeholder<float16>("f", {3, 3, l.c, l.c});
      auto dag = std::make_shared<const ComputeDAG>(
          std::vector<ir::Tensor>{x, f},
          std::vector<ir::Tensor>{ops::conv2d_nhwc(x, f, {.padding = {1, 1}})});
      const Task task(dag, Target::cuda("sm_90"));
      const sched::State sketch = the_tensor_core_sketch(task);
      for (const double p : {0.0, 1.0}) {
        CAPTURE(p);
        std::mt19937_64 rng(7);
        int tiles = 0, worst = 1, aligned = 0;
        for (int draw = 0; draw < 200 && tiles < 12; ++draw) {
          const auto prog = search::try_sample_program(sketch, task, lane_major(p), rng);
          if (!prog) continue;
          for (const sched::Stage& st : prog->stages()) aligned += st.storage_aligns.size() > 1;
          const lower::GpuProgram g = lower::lower_gpu(*prog, task.target);
          for (const lower::MmaTile& t : loom_test::tiles_of(g.kernels[0])) {
            ++tiles;
            REQUIRE(t.a_row.defined());
            for (int64_t others : {0, 1, 2})
              worst = std::max(worst, ldmatrix_ways(g.kernels[0], t.a, t.a_row, 4, others));
          }
        }
        MESSAGE(l.h << "x" << l.h << " " << l.c << " channels, lane-major " << p << ": " << tiles
                    << " tiles, A's worst phase " << worst << "-way, " << aligned
                    << " copies with aligned row strides");
        CHECK(tiles >= 8);
        if (p == 1.0) {
          CHECK(worst == 1);
          CHECK(aligned > 0);
        } else {
          CHECK(worst > 1);
        }
      }
    }
  }

  TEST_CASE("a float32 matmul on a TF32 target gets a TF32 sketch, and its samples are right") {
    const Target tf32 = Target::cuda("sm_90").with_tf32();
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{64, 64, 32}, {32, 96, 24}}) {
      CAPTURE(m);
      CAPTURE(k);
      const auto dag = loom_test::float_matmul(m, n, k);
      const Task task(dag, tf32);
      const auto tc = tensor_core_sketches(search::generate_sketches(task));
      REQUIRE(tc.size() == 2);
      // Without TF32 (above) or with tensor cores off, none.
      search::SearchOptions off;
      off.gpu_tensor_cores = false;
      CHECK(tensor_core_sketches(search::generate_sketches(task, off)).empty());
      std::mt19937_64 rng(31);
      const auto programs = search::sample_programs(tc, task, {}, rng, 10);
      CHECK(programs.size() >= 4);
      for (const sched::State& p : programs) {
        const lower::GpuProgram g = lower::lower_gpu(p, tf32);
        const std::string r = loom_test::check_half_matmul<float>(
            *dag, m, n, k, [&](std::vector<void*> args) { lower::emulate(g, args); });
        CHECK_MESSAGE(r == "", p.to_string());
      }
    }
  }

  TEST_CASE("a matmul with B given as [N, K]: every sample is right and loads B with ldmatrix") {
    // bf16 and TF32: B's columns run along k, so a lane gives one column's address whatever
    // its register tile (lower/mma.hpp).
    for (const bool tf32 : {false, true}) {
      CAPTURE(tf32);
      const auto dag = tf32 ? loom_test::matmul_b_transposed<float>(64, 128, 64)
                            : loom_test::matmul_b_transposed<bfloat16>(64, 128, 64);
      const Target target = tf32 ? Target::cuda("sm_90").with_tf32() : Target::cuda("sm_90");
      const Task task(dag, target);
      const auto tc = tensor_core_sketches(search::generate_sketches(task));
      REQUIRE(tc.size() == 2);
      std::mt19937_64 rng(37);
      const auto programs = search::sample_programs(tc, task, {}, rng, 10);
      CHECK(programs.size() >= 4);
      for (const sched::State& p : programs) {
        const lower::GpuProgram g = lower::lower_gpu(p, target);
        for (const lower::MmaTile& t : loom_test::tiles_of(g.kernels[0])) {
          CHECK(t.b_row.defined());
          CHECK(!t.b_transposed);
        }
        auto run = [&](std::vector<void*> args) { lower::emulate(g, args); };
        const std::string r = tf32 ? loom_test::check_half_matmul<float>(*dag, 64, 128, 64, run)
                                   : loom_test::check_half_matmul<bfloat16>(*dag, 64, 128, 64, run);
        CHECK_MESSAGE(r == "", p.to_string());
      }
    }
  }

  TEST_CASE("a product fused into its element-wise consumer accumulates in the thread's array") {
    // D = bf16(C * 0.5): no cache_write stage; the product is computed inside the consumer's
    // thread loops, in an array each thread has (labelled global, as stages without a scope of
    // their own are), which the tile accumulates into.
    const loom_test::workload w = loom_test::matmul_half<bfloat16>(32, 48, 64, true);
    const Task task(w.dag, Target::cuda("sm_90"));
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    REQUIRE(tc.size() == 2);
    const auto ref = loom_test::make_reference(w, 23);
    std::mt19937_64 rng(43);
    const auto programs = search::sample_programs(tc, task, {}, rng, 10);
    CHECK(programs.size() >= 4);
    for (const sched::State& p : programs) {
      const lower::GpuProgram g = lower::lower_gpu(p, task.target);
      const auto r = loom_test::run_and_compare(
          w, ref, p,
          [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
      CHECK_MESSAGE(r.ok, r.message << "\n" << p.to_string());
    }
  }

  TEST_CASE("16-bit convolutions as implicit GEMMs on tensor cores: every sample is right") {
    // NHWC: the output's rows and columns (and batch) read only by the data make M, a box of
    // them per fragment; the output channels are N, the input channels k. NCHW: the output
    // channels read only by the filter are M, the rows and columns N.
    struct conv_case {
      const char* what;
      loom_test::workload w;
      bool tensor_cores;
    };
    auto nhwc = [](const char* name, int64_t n, int64_t h, int64_t c, int64_t k, int64_t r = 3) {
      auto x = placeholder<float16>("x", {n, h, h, c});
      auto f = placeholder<float16>("f", {r, r, c, k});
      return loom_test::make_workload(
          name, {x, f}, {ops::conv2d_nhwc(x, f, {.padding = {r / 2, r / 2}})}, r * r * c);
    };
    auto x = placeholder<bfloat16>("x", {1, 16, 8, 8});
    auto f = placeholder<bfloat16>("f", {16, 16, 3, 3});
    const std::vector<conv_case> cases = {
        {"nhwc 8x8", nhwc("conv_nhwc_8x8", 1, 8, 16, 16), true},
        {"nhwc 2x4x4 (batch in M too)", nhwc("conv_nhwc_2x4x4", 2, 4, 16, 8), true},
        {"nhwc 12x12 (M: 4 columns x 4 rows a fragment)", nhwc("conv_nhwc_12x12", 1, 12, 16, 8),
         true},
        {"nhwc 16x7x7 (M: 16 images)", nhwc("conv_nhwc_16x7x7", 16, 7, 16, 8), true},
        {"nchw bf16",
         loom_test::make_workload("conv_nchw", {x, f},
                                  {ops::conv2d_nchw(x, f, {.padding = {1, 1}})}, 144),
         true},
        // No 16 rows in a run: M padded past the image's end, the rows past it computed from
        // the pad stage's zeros and dropped by the output's guards.
        {"nhwc 7x7 (M = 49, tiles of 8 x 8)", nhwc("conv_nhwc_7x7", 1, 7, 16, 16), true},
        {"nhwc 14x14 (M = 196)", nhwc("conv_nhwc_14x14", 1, 14, 16, 8), true},
        {"nhwc 5x5 (M = 25)", nhwc("conv_nhwc_5x5", 1, 5, 16, 16), true},
        {"nhwc 7x7 1x1 filter (no pad stage)", nhwc("conv_nhwc_7x7_1x1", 1, 7, 16, 16, 1), true},
        {"nhwc 1x1 image: no room for 8 lanes", nhwc("conv_nhwc_1x1", 1, 1, 16, 16, 1), false}};
    int checked = 0;
    for (const conv_case& c : cases) {
      CAPTURE(c.what);
      const Task task(c.w.dag, Target::cuda("sm_90"));
      const auto tc = tensor_core_sketches(search::generate_sketches(task));
      CHECK(tc.size() == (c.tensor_cores ? 2u : 0u));
      if (tc.empty()) continue;
      const auto ref = loom_test::make_reference(c.w, 17);
      std::mt19937_64 rng(41);
      for (const sched::State& p : search::sample_programs(tc, task, {}, rng, 10)) {
        const lower::GpuProgram g = lower::lower_gpu(p, task.target);
        const auto r = loom_test::run_and_compare(
            c.w, ref, p,
            [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
        CHECK_MESSAGE(r.ok, r.message << "\n" << p.to_string());
        ++checked;
        // A padded tile's rows past the image read the pad stage's zeros, or the points the
        // shared copy of the input skips (a 1x1 filter), so its box is not shifted back per
        // thread: the accumulators stay registers.
        CHECK_MESSAGE(local_array_moving_with_thread(g) == "", p.to_string());
      }
    }
    CHECK(checked >= 60);
  }

  TEST_CASE("ResNet-50's fp16 NHWC convolutions draw tensor-core programs that fit") {
    // Widths 56 and 28 are no multiple of 16: a fragment's 16 rows are a box of output rows and
    // columns (and images), so a thread's accumulators are its tile and not the rows its tile
    // would straddle. 14 x 14 and 7 x 7 images of one batch have no 16 rows to give (196, 49):
    // their tiles are padded past the image.
    struct layer {
      int64_t n, h, c, k, r;
      bool tensor_cores;
    };
    const std::vector<layer> layers = {
        {1, 56, 64, 64, 3, true},    {1, 56, 64, 256, 1, true},  {1, 56, 256, 64, 1, true},
        {1, 28, 128, 128, 3, true},  {32, 56, 64, 64, 3, true},  {32, 14, 256, 256, 3, true},
        {32, 7, 512, 512, 3, true},  {1, 14, 256, 256, 3, true}, {1, 7, 512, 512, 3, true},
        {1, 14, 1024, 256, 1, true}, {1, 7, 2048, 512, 1, true}};
    for (const layer& l : layers) {
      CAPTURE(l.n);
      CAPTURE(l.h);
      CAPTURE(l.c);
      CAPTURE(l.k);
      auto x = placeholder<float16>("x", {l.n, l.h, l.h, l.c});
      auto f = placeholder<float16>("f", {l.r, l.r, l.c, l.k});
      auto y = ops::untyped::cast(ops::conv2d_nhwc(x, f, {.padding = {l.r / 2, l.r / 2}}),
                                  ir::DType::f16(), "y");
      auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x, f},
                                                    std::vector<ir::Tensor>{y});
      const Task task(dag, Target::cuda("sm_90"));
      const auto tc = tensor_core_sketches(search::generate_sketches(task));
      REQUIRE(tc.size() == (l.tensor_cores ? 2u : 0u));
      if (tc.empty()) continue;
      std::mt19937_64 rng(7);
      int fit = 0;
      for (int draw = 0; draw < 80; ++draw)
        if (auto p = search::try_sample_program(tc[0], task, {}, rng)) {
          CHECK(has_tensorized_loop(*p));
          ++fit;
        }
      MESSAGE(l.n << "x" << l.h << "x" << l.h << " " << l.c << "->" << l.k << " " << l.r << "x"
                  << l.r << ": " << fit << " of 80 draws fit");
      // 0 to 2 of 200 when M was the fused rows and columns; the fewest now, 32 x 56 x 56, fits
      // 18 of 200.
      CHECK(fit >= 4);
    }
  }

  TEST_CASE("a bf16 batch matmul: the batch axis takes no lanes, every sample is right") {
    const auto dag = batch_matmul_bf16(3, 32, 16, 32);
    const Task task(dag, Target::cuda());
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    REQUIRE(tc.size() == 2);
    std::mt19937_64 rng(5);
    const auto programs = search::sample_programs(tc, task, {}, rng, 8);
    CHECK(programs.size() >= 4);
    std::mt19937 data(3);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<bfloat16> a, b;
    for (int i = 0; i < 3 * 32 * 32; ++i) a.push_back(bfloat16(dist(data)));
    for (int i = 0; i < 3 * 32 * 16; ++i) b.push_back(bfloat16(dist(data)));
    std::vector<float> want(3 * 32 * 16);
    evaluate(*dag, {a.data(), b.data(), want.data()});
    for (const sched::State& p : programs) {
      std::vector<float> got(want.size(), NAN);
      lower::emulate(lower::lower_gpu(p, task.target), {a.data(), b.data(), got.data()});
      int wrong = 0;
      for (size_t i = 0; i < got.size(); ++i)
        wrong += !(std::abs(got[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])));
      CHECK_MESSAGE(wrong == 0, p.to_string());
    }
  }

  TEST_CASE("tile-size mutations keep a tensor-core tile's fixed levels: children stay tiles") {
    const auto dag = loom_test::half_matmul<bfloat16>(128, 128, 64);
    const Task task(dag, Target::cuda());
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    const auto tc = tensor_core_sketches(search::generate_sketches(task));
    REQUIRE(tc.size() == 2);
    std::mt19937_64 rng(11);
    int children = 0, lowered = 0, swizzled = 0;
    for (const sched::State& p : search::sample_programs(tc, task, options, rng, 6)) {
      for (int m = 0; m < 40; ++m) {
        const auto child = (m % 4 == 3) ? search::mutate_register_tile(ctx, p, rng)
                                        : search::mutate_tile_size(ctx, p, rng);
        if (!child) continue;
        ++children;
        // Step for step, the fixed lengths are the parent's.
        REQUIRE(child->steps().size() == p.steps().size());
        for (size_t k = 0; k < p.steps().size(); ++k) {
          auto* before = std::get_if<sched::SplitStep>(&p.steps()[k]);
          auto* after = std::get_if<sched::SplitStep>(&child->steps()[k]);
          if (!before || !after) continue;
          const std::vector<bool> fixed = search::fixed_split_lengths(p, *before);
          for (size_t j = 0; j < fixed.size(); ++j)
            if (fixed[j]) CHECK(after->lengths[j] == before->lengths[j]);
        }
        // A child stays a tile; only one whose register tile grew past the accumulators a
        // thread holds, or whose block past the device's limits, is refused (the evolution
        // drops it).
        try {
          const lower::GpuProgram g = lower::lower_gpu(*child, task.target);
          ++lowered;
          // The lane-major layouts follow the child's register tiles and the swizzles its rows
          // (follow_operand_layouts): its phases stay free of bank conflicts.
          for (const lower::MmaTile& t : loom_test::tiles_of(g.kernels[0])) {
            CHECK(ldmatrix_ways(g.kernels[0], t.a, t.a_row, 4, 0) == 1);
            if (t.b_row.defined()) CHECK(ldmatrix_ways(g.kernels[0], t.b, t.b_row, 2, 0) == 1);
          }
          for (const sched::Stage& st : child->stages()) swizzled += st.storage_swizzle != 0;
        } catch (const user_error& e) {
          const std::string what = e.what();
          const bool expected = what.find("elements per thread") != std::string::npos ||
                                what.find("[loom.lower.E425]") != std::string::npos;
          CHECK_MESSAGE(expected, what);
        }
      }
    }
    CHECK(children > 50);
    CHECK(lowered * 10 > children * 8);
    CHECK(swizzled > 0);
    MESSAGE(children << " mutated tensor-core programs, " << lowered << " lower, " << swizzled
                     << " swizzled copies among them");
  }

  TEST_CASE("on sm_90a mutations keep a warpgroup tiling's warps; grown rows are chunked") {
    Target hopper = Target::cuda("sm_90a");
    hopper.max_shared_memory_per_block = 227 * 1024;
    const auto dag = loom_test::half_matmul<bfloat16>(128, 256, 64);
    const Task task(dag, hopper);
    const search::SearchOptions options;
    const search::SketchContext ctx(task, options);
    std::mt19937_64 rng(13);
    int parents = 0, children = 0, wgmma_children = 0;
    for (const sched::State& p : search::sample_programs(
             tensor_core_sketches(search::generate_sketches(task)), task, options, rng, 12)) {
      if (lower::lower_gpu(p, hopper).kernels[0].wgmma_operands.empty()) continue;
      ++parents;
      for (int m = 0; m < 8; ++m) {
        const auto child = search::mutate_tile_size(ctx, p, rng);
        if (!child) continue;
        ++children;
        for (size_t k = 0; k < p.steps().size(); ++k) {
          auto* before = std::get_if<sched::SplitStep>(&p.steps()[k]);
          auto* after = std::get_if<sched::SplitStep>(&child->steps()[k]);
          if (!before || !after) continue;
          const std::vector<bool> fixed = search::fixed_split_lengths(p, *before, true);
          for (size_t j = 0; j < fixed.size(); ++j)
            if (fixed[j]) CHECK(after->lengths[j] == before->lengths[j]);
        }
        try {
          const lower::GpuProgram g = lower::lower_gpu(*child, hopper);
          wgmma_children += !g.kernels[0].wgmma_operands.empty();
          // Every fourth child emulated (the emulation of a block's threads is slow).
          if (children % 4 == 0)
            CHECK_MESSAGE(loom_test::check_half_matmul<bfloat16>(
                              *dag, 128, 256, 64,
                              [&](std::vector<void*> args) { lower::emulate(g, args); }) == "",
                          child->to_string());
        } catch (const user_error& e) {
          const std::string what = e.what();
          CHECK_MESSAGE((what.find("elements per thread") != std::string::npos ||
                         what.find("[loom.lower.E425]") != std::string::npos),
                        what);
        }
      }
    }
    MESSAGE(parents << " warpgroup-MMA programs, " << children << " mutated, " << wgmma_children
                    << " of those still warpgroup MMAs");
    CHECK(parents >= 4);
    CHECK(wgmma_children * 2 > children);

    // A copy whose rows grow past 128 bytes gets chunks of 128 and stays swizzled: B [K, N]
    // of 64 columns (128-byte rows) widened to 128.
    const sched::State narrow =
        loom_test::warpgroup_matmul(loom_test::half_matmul<bfloat16>(128, 256, 128), {1, 8, 64});
    std::vector<sched::Step> steps = narrow.steps();
    for (sched::Step& st : steps)
      if (auto* sp = std::get_if<sched::SplitStep>(&st);
          sp && sp->lengths.size() == 3 && sp->lengths[1] == 4)  // C's columns
        sp->lengths[2] = 32;
    sched::State wide = sched::replay(narrow.dag_ptr(), steps);
    CHECK(lower::lower_gpu(wide, hopper).kernels[0].wgmma_operands.empty());
    search::follow_operand_layouts(wide, true);
    CHECK(wide.stage("B.shared").storage_chunk == 128);
    CHECK(wide.stage("B.shared").storage_swizzle == 128);
  }
}

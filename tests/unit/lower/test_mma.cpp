// Tensor-core tiles (loom/lower/mma.hpp): hand-written m16n8k16 schedules of fp16 and bf16
// matmuls, emulated with the hardware's exchange of fragments between the lanes of a warp and
// compared with the DAG interpreter, and the tiles the GPU lowering refuses.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/mma.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/mma_schedule.hpp"

using namespace loom;
using loom::sched::Annotation;
using loom::sched::State;

namespace {

template <class T>
std::vector<T> random_halves(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(T(dist(rng)));
  return v;
}

/// Emulates the GPU program of `s` (M x N x K matmul of T) and compares with the interpreter.
template <class T>
std::string emulate_matmul(const State& s, int64_t M, int64_t N, int64_t K) {
  const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
  return loom_test::check_half_matmul<T>(s.dag(), M, N, K,
                                         [&](std::vector<void*> args) { lower::emulate(p, args); });
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("lower.mma") {
  TEST_CASE("the fragment layouts are those of PTX's m16n8k16: every element held once") {
    std::vector<int> a(16 * 16), b(16 * 8), c(16 * 8);
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = 0; r < 4; ++r) {
        for (int h = 0; h < 2; ++h) {
          const auto ea = lower::MmaTile::a_element(lane, r, h);
          ++a[ea[0] * 16 + ea[1]];
          if (r < 2) {
            const auto eb = lower::MmaTile::b_element(lane, r, h);
            ++b[eb[0] * 8 + eb[1]];
          }
        }
        const auto ec = lower::MmaTile::c_element(lane, r);
        ++c[ec[0] * 8 + ec[1]];
      }
    }
    for (int x : a) CHECK(x == 1);
    for (int x : b) CHECK(x == 1);
    for (int x : c) CHECK(x == 1);
    // The PTX ISA's examples: lane 5 (group 1, thread 1) holds a0 = A[1][2], c3 = C[9][3].
    CHECK(lower::MmaTile::a_element(5, 0, 0) == std::array<int, 2>{1, 2});
    CHECK(lower::MmaTile::c_element(5, 3) == std::array<int, 2>{9, 3});
    CHECK(lower::MmaTile::b_element(5, 1, 1) == std::array<int, 2>{11, 1});
  }

  TEST_CASE(
      "bf16 and fp16 matmuls as tensor-core tiles: the lanes' fragments agree with the "
      "interpreter") {
    struct config {
      loom_test::mma_tiling t;
      int64_t M, N, K;
    };
    const std::vector<config> configs = {
        {{1, 2, 2, 2, true, true}, 64, 64, 32},   // 2 warps side by side, shared A and B
        {{2, 1, 1, 2, true, false}, 64, 32, 48},  // warps stacked, loops left rolled
        {{1, 1, 1, 1, false, true}, 32, 16, 32},  // one warp, operands straight from global
        {{2, 2, 2, 1, true, true}, 128, 64, 16},  // four warps, one k-step
    };
    for (const config& c : configs) {
      CAPTURE(c.M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      CAPTURE(c.t.warps_m);
      CAPTURE(c.t.shared);
      const State bf =
          loom_test::tensor_core_matmul(loom_test::half_matmul<bfloat16>(c.M, c.N, c.K), c.t);
      const lower::GpuProgram p = lower::lower_gpu(bf, Target::cuda());
      REQUIRE(p.kernels.size() == 1);
      CHECK(p.kernels[0].block[0] == c.t.warps_m * c.t.warps_n * 32);
      CHECK(emulate_matmul<bfloat16>(bf, c.M, c.N, c.K) == "");
      const State h =
          loom_test::tensor_core_matmul(loom_test::half_matmul<float16>(c.M, c.N, c.K), c.t);
      CHECK(emulate_matmul<float16>(h, c.M, c.N, c.K) == "");
    }
  }

  TEST_CASE("a tile's registers: A's rows are the lane's own, B's columns another lane's") {
    const State s = loom_test::tensor_core_matmul(loom_test::half_matmul<bfloat16>(32, 16, 16),
                                                  {1, 1, 1, 1, false, true});
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    const lower::GpuKernel& k = p.kernels[0];
    const std::vector<lower::MmaTile> tiles = loom_test::tiles_of(k);
    REQUIRE(tiles.size() == 1);
    const lower::MmaTile& t = tiles[0];
    CHECK(t.instruction() == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    CHECK(t.a->name == "A");
    CHECK(t.b->name == "B");
    // Lane 9 (g = 2, t = 1): A register 3 holds rows 2 + 8 of the warp's logical tile; its
    // physical row is the lane's second row, 2 * g + 1 = 5 (a thread owns rows 2g, 2g + 1),
    // at column 2t + 8 = 10 (half 0).
    // (Block 0, every other variable 0.)
    const ir::Variable* tx = k.thread_index[0].as<ir::Variable>();
    auto at = [&](const ir::Expr& e, int64_t thread) {
      std::unordered_map<const ir::Variable*, ir::Expr> values;
      for (const ir::Variable* v : ir::free_vars(e)) values[v] = ir::Expr(int64_t{0});
      values[tx] = ir::Expr(thread);
      const ir::Expr v = ir::simplify(ir::substitute(e, values));
      const int64_t* c = ir::as_const_int(v);
      REQUIRE(c != nullptr);
      return *c;
    };
    CHECK(at(t.a_index[3][0], 9) == 5 * 16 + 10);
    // B register 0 half 1 of lane 9: B[2t + 1][g] -> column g = 2 is lane (*, 1)'s q = 0,
    // physical column 2 * 1 + 0 = 2, row 3.
    CHECK(at(t.b_index[0][1], 9) == 3 * 16 + 2);
  }

  TEST_CASE("operands in shared memory load with ldmatrix where their 8-element rows fit") {
    struct config {
      loom_test::mma_tiling t;
      bool a_rows, b_rows;
    };
    // A's rows run along k in shared memory: one ldmatrix.x4. B's columns are contiguous when
    // a lane has one tile along N (2t + q), interleaved with two (4t + 2 nt + q): then B is
    // gathered element by element. From global memory, neither.
    for (const config& c : {config{{1, 2, 2, 2, true, true}, true, false},
                            config{{1, 2, 2, 1, true, true}, true, true},
                            config{{2, 1, 1, 1, true, false}, true, true},
                            config{{1, 1, 1, 1, false, true}, false, false}}) {
      CAPTURE(c.t.nt);
      CAPTURE(c.t.shared);
      for (const bool bf : {true, false}) {
        const auto dag = bf ? loom_test::half_matmul<bfloat16>(64, 64, 48)
                            : loom_test::half_matmul<float16>(64, 64, 48);
        const State s = loom_test::tensor_core_matmul(dag, c.t);
        const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
        for (const lower::MmaTile& t : loom_test::tiles_of(p.kernels[0])) {
          CHECK(t.a_row.defined() == c.a_rows);
          CHECK(t.b_row.defined() == c.b_rows);
        }
        // The emulation loads the registers from the rows the lanes give, as ldmatrix does.
        const std::string r =
            bf ? emulate_matmul<bfloat16>(s, 64, 64, 48) : emulate_matmul<float16>(s, 64, 64, 48);
        CHECK(r == "");
      }
    }
    // TF32: A's rows of 4 float32 elements load with ldmatrix (each lane's 32 bits one
    // element); B, whose transpose would split them, element by element.
    const auto fdag = loom_test::float_matmul(64, 64, 32);
    const State f = loom_test::tensor_core_matmul(fdag, {1, 2, 2, 1, true, true, 8});
    const lower::GpuProgram fp = lower::lower_gpu(f, Target::cuda().with_tf32());
    for (const lower::MmaTile& t : loom_test::tiles_of(fp.kernels[0])) {
      CHECK(t.a_row.defined());
      CHECK(!t.b_row.defined());
    }
    const std::string tf32 = loom_test::check_half_matmul<float>(
        *fdag, 64, 64, 32, [&](std::vector<void*> args) { lower::emulate(fp, args); });
    CHECK(tf32 == "");
  }

  TEST_CASE("B given as [N, K] loads with ldmatrix as stored, for any register tile and TF32") {
    // A lane gives the address of one of B's columns, which run along k: whichever columns
    // the lane's register tile interleaves. TF32's 4-float rows so too.
    for (const int64_t nt : {1, 2, 4}) {
      CAPTURE(nt);
      const auto dag = loom_test::matmul_b_transposed<bfloat16>(64, 64, 48);
      const State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, nt, true, true});
      const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
      const std::vector<lower::MmaTile> tiles = loom_test::tiles_of(p.kernels[0]);
      REQUIRE(!tiles.empty());
      for (const lower::MmaTile& t : tiles) {
        CHECK(t.a_row.defined());
        CHECK(t.b_row.defined());
        CHECK(!t.b_transposed);
      }
      CHECK(emulate_matmul<bfloat16>(s, 64, 64, 48) == "");
    }
    const auto fdag = loom_test::matmul_b_transposed<float>(64, 64, 32);
    const State f = loom_test::tensor_core_matmul(fdag, {1, 2, 2, 2, true, true, 8});
    const lower::GpuProgram fp = lower::lower_gpu(f, Target::cuda().with_tf32());
    for (const lower::MmaTile& t : loom_test::tiles_of(fp.kernels[0])) {
      CHECK(t.b_row.defined());
      CHECK(!t.b_transposed);
    }
    CHECK(loom_test::check_half_matmul<float>(
              *fdag, 64, 64, 32, [&](std::vector<void*> args) { lower::emulate(fp, args); }) == "");
    // B's columns as k-major rows (the usual [K, N]): transposed, with one tile along N.
    const State nn = loom_test::tensor_core_matmul(loom_test::half_matmul<bfloat16>(64, 64, 48),
                                                   {1, 2, 2, 1, true, true});
    for (const lower::MmaTile& t :
         loom_test::tiles_of(lower::lower_gpu(nn, Target::cuda()).kernels[0]))
      CHECK(t.b_transposed);
  }

  TEST_CASE("a warp tile loads each fragment once per value of the loops it moves with") {
    // The tile's loops over the warp's mt x nt instructions, M's outside N's: A's fragment
    // moves with M's loop only, so it is loaded inside it (depth 1) into one slot; B's with N's,
    // inside M's, so it is loaded before both, once per N value, into nt slots. Emulated with
    // the loads where the plan puts them: a wrong slot is a wrong result.
    auto first_nest = [](const lower::GpuKernel& k) {
      std::optional<lower::MmaNest> found;
      struct finder : ir::StmtVisitor {
        const lower::GpuKernel* k;
        std::optional<lower::MmaNest>* found;
        using ir::StmtVisitor::visit;
        void visit(const ir::Expr&) override {}
        void visit_For(const ir::For* op) override {
          if (!*found)
            *found = lower::match_mma_nest(*op, k->thread_index[0], k->block[0], k->name);
          if (!*found) ir::StmtVisitor::visit_For(op);
        }
      } f;
      f.k = &k;
      f.found = &found;
      f.visit(k.body);
      REQUIRE(found);
      return *found;
    };
    for (const int64_t nt : {2, 4}) {
      CAPTURE(nt);
      const auto dag = loom_test::matmul_b_transposed<bfloat16>(64, 16 * nt, 32);
      const State s = loom_test::tensor_core_matmul(dag, {1, 2, 2, nt, true, true});
      const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
      const lower::MmaNest nest = first_nest(p.kernels[0]);
      REQUIRE(nest.loops.size() == 2);
      CHECK(nest.a.depth == 1);
      CHECK(nest.a.slots == 1);
      CHECK(nest.a.over.empty());
      CHECK(nest.b.depth == 0);
      CHECK(nest.b.slots == nt);
      CHECK(nest.b.over == std::vector<int>{1});
      // Two of B's fragments a load (ldmatrix.x4), emulated with lanes 16-31 giving the rows
      // of the second.
      CHECK(nest.b.pair_row.defined());
      CHECK(emulate_matmul<bfloat16>(s, 64, 16 * nt, 32) == "");
    }
    // N's loop outside M's, 16 instructions along M: A's 16 fragments would take 64 registers,
    // past max_fragment_cache_registers, so A is loaded per instruction (depth 2, one slot);
    // B's, outermost, once per N value.
    const auto dag = loom_test::half_matmul<bfloat16>(256, 16, 32);
    State s = loom_test::tensor_core_matmul(dag, {1, 1, 16, 2, true, true});
    s.reorder("C.local", {0, 2, 1, 3, 4, 5});  // ko nt mt kk h q
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda());
    const lower::MmaNest nest = first_nest(p.kernels[0]);
    REQUIRE(nest.loops.size() == 2);
    CHECK(nest.loops[1]->extent.as<ir::IntImm>()->value == 16);
    CHECK(nest.a.depth == 2);
    CHECK(nest.a.slots == 1);
    CHECK(nest.b.depth == 1);
    CHECK(nest.b.slots == 1);
    CHECK(!nest.b.pair_row.defined());  // B's columns interleave: loaded element by element
    CHECK(emulate_matmul<bfloat16>(s, 256, 16, 32) == "");
    // The same with B given as [N, K] (ldmatrix): B, which moves with the outer loop only, is
    // kept across it instead, two fragments a load: the same 2 loads, 1 instruction.
    State nk = loom_test::tensor_core_matmul(loom_test::matmul_b_transposed<bfloat16>(256, 16, 32),
                                             {1, 1, 16, 2, true, true});
    for (const sched::Stage& st : std::vector<sched::Stage>(nk.stages()))
      if (st.scope == ir::MemoryScope::Local) nk.reorder(st.name, {0, 2, 1, 3, 4, 5});
    const lower::MmaNest nkn = first_nest(lower::lower_gpu(nk, Target::cuda()).kernels[0]);
    CHECK(nkn.a.depth == 2);
    CHECK(nkn.b.depth == 0);
    CHECK(nkn.b.slots == 2);
    CHECK(nkn.b.pair_row.defined());
    CHECK(emulate_matmul<bfloat16>(nk, 256, 16, 32) == "");
    // 32 instructions along N: B's 32 fragments would take 64 registers, so B is loaded inside
    // N's loop, at every other value two fragments (ldmatrix.x4) into 2 slots.
    const auto wide_dag = loom_test::matmul_b_transposed<bfloat16>(16, 256, 32);
    const State wide = loom_test::tensor_core_matmul(wide_dag, {1, 1, 1, 32, true, true});
    const lower::MmaNest wn32 = first_nest(lower::lower_gpu(wide, Target::cuda()).kernels[0]);
    REQUIRE(wn32.loops.size() == 1);
    CHECK(wn32.b.depth == 1);
    CHECK(wn32.b.over.empty());
    CHECK(wn32.b.slots == 2);
    CHECK(wn32.b.pair_loop == 0);
    CHECK(wn32.b.pair_row.defined());
    CHECK(emulate_matmul<bfloat16>(wide, 16, 256, 32) == "");
    // The registers a lane has bound what it keeps: 4 x 6 instructions (96 accumulators) keep
    // B's 6 fragments at 128 threads (255 registers a lane), not at 512 (128 a lane: 6 left
    // beside the accumulators and mma_other_registers, one fragment of each).
    for (const int64_t warps : {2, 4}) {
      CAPTURE(warps);
      const State w = loom_test::tensor_core_matmul(
          loom_test::half_matmul<bfloat16>(warps * 64, warps * 48, 16),
          {warps, warps, 4, 6, true, true});
      const lower::GpuProgram wp = lower::lower_gpu(w, Target::cuda());
      CHECK(wp.kernels[0].block[0] == warps * warps * 32);
      const lower::MmaNest wn = first_nest(wp.kernels[0]);
      REQUIRE(wn.loops.size() == 2);
      CHECK(wn.a.slots == 1);
      CHECK(wn.b.slots == (warps == 2 ? 6 : 1));
      CHECK(wn.b.depth == (warps == 2 ? 0 : 2));
    }
    // Operands from global memory: the loop over k-steps is part of the nest, and both move
    // with it.
    const State g = loom_test::tensor_core_matmul(loom_test::half_matmul<float16>(32, 32, 64),
                                                  {1, 1, 2, 4, false, true});
    const lower::MmaNest gn = first_nest(lower::lower_gpu(g, Target::cuda()).kernels[0]);
    REQUIRE(gn.loops.size() == 3);
    CHECK(gn.a.depth == 2);
    CHECK(gn.b.depth == 1);
    CHECK(gn.b.slots == 4);
    CHECK(emulate_matmul<float16>(g, 32, 32, 64) == "");
  }

  TEST_CASE("tiles that are not m16n8k16 tiles are refused with what is wrong") {
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 32);
    const std::string c = dag->outputs()[0].name();
    // B's columns spread over lane bits 0-2: B would change with the rows' lane bits.
    {
      State s(dag);
      const std::string local = s.cache_write(c, ir::MemoryScope::Local);
      s.split(c, 0, {4, 2});             // i0 i1 i2 j
      s.split(c, 3, {8, 2});             // i0 i1 i2 j0 j1 j2
      s.reorder(c, {0, 3, 1, 4, 2, 5});  // i0 j0 i1 j1 i2 j2
      s.fuse(c, {0, 1});
      s.fuse(c, {1, 2});  // b tx i2 j2
      s.annotate(c, 0, Annotation::BlockIdxX);
      s.annotate(c, 1, Annotation::ThreadIdxX);
      s.compute_at(local, c, 1);
      s.split(local, 2, {16});         // h q ko kk
      s.reorder(local, {2, 3, 0, 1});  // ko kk h q
      s.annotate(local, 1, Annotation::Tensorized);
      const std::string e = loom_test::lowering_error(s);
      CHECK(e.find("[loom.lower.E427]") != std::string::npos);
      CHECK(e.find("B's index") != std::string::npos);
    }
    // A reduction step of 8: not m16n8k16.
    {
      State t(dag);
      const std::string local = t.cache_write(c, ir::MemoryScope::Local);
      t.split(c, 0, {1, 8, 2});
      t.split(c, 4, {2, 4, 2});
      t.reorder(c, {0, 4, 1, 5, 2, 6, 3, 7});
      t.fuse(c, {0, 1});
      t.fuse(c, {1, 2, 3, 4});
      t.annotate(c, 0, Annotation::BlockIdxX);
      t.annotate(c, 1, Annotation::ThreadIdxX);
      t.compute_at(local, c, 1);
      t.split(local, 2, {8});  // h q ko kk(8)
      t.reorder(local, {2, 3, 0, 1});
      t.annotate(local, 1, Annotation::Tensorized);
      const std::string e = loom_test::lowering_error(t);
      CHECK(e.find("[loom.lower.E427]") != std::string::npos);
      CHECK(e.find("runs 16 from 0") != std::string::npos);
    }
    // 8 x 8 tiles per warp: 256 accumulators per thread.
    {
      const std::string e = loom_test::lowering_error(loom_test::tensor_core_matmul(
          loom_test::half_matmul<bfloat16>(128, 64, 16), {1, 1, 8, 8, false, true}));
      CHECK(e.find("[loom.lower.E427]") != std::string::npos);
      CHECK(e.find("256 elements per thread") != std::string::npos);
    }
    // 4 x 4 tiles per warp (64 accumulators) fit a block of 2 warps, not one of 32, whose
    // threads have 64 registers each.
    {
      CHECK(loom_test::lowering_error(loom_test::tensor_core_matmul(
                loom_test::half_matmul<bfloat16>(64, 64, 16), {1, 2, 4, 4, false, true})) == "");
      const std::string e = loom_test::lowering_error(loom_test::tensor_core_matmul(
          loom_test::half_matmul<bfloat16>(256, 256, 16), {4, 8, 4, 4, false, true}));
      CHECK(e.find("[loom.lower.E427]") != std::string::npos);
      CHECK(e.find("64 elements per thread; at most 32") != std::string::npos);
      CHECK(e.find("a block of 1024 threads") != std::string::npos);
    }
    // Half a warp: 16 threads.
    {
      State s(dag);
      const std::string local = s.cache_write(c, ir::MemoryScope::Local);
      s.split(c, 0, {4, 2});  // i0 i1(4) i2(2) j
      s.split(c, 3, {4, 2});  // i0 i1 i2 j0 j1(4) j2(2)
      s.reorder(c, {0, 3, 1, 4, 2, 5});
      s.fuse(c, {0, 1});
      s.fuse(c, {1, 2});
      s.annotate(c, 0, Annotation::BlockIdxX);
      s.annotate(c, 1, Annotation::ThreadIdxX);
      s.compute_at(local, c, 1);
      s.split(local, 2, {16});
      s.reorder(local, {2, 3, 0, 1});
      s.annotate(local, 1, Annotation::Tensorized);
      const std::string e = loom_test::lowering_error(s);
      CHECK(e.find("[loom.lower.E427]") != std::string::npos);
      CHECK(e.find("not a whole number of warps") != std::string::npos);
    }
  }

  TEST_CASE("on the CPU a tensorized loop is the serial loop it stands for") {
    const State s = loom_test::tensor_core_matmul(loom_test::half_matmul<bfloat16>(32, 16, 32),
                                                  {1, 1, 1, 1, true, true});
    std::vector<bfloat16> a = random_halves<bfloat16>(32 * 32, 3),
                          b = random_halves<bfloat16>(32 * 16, 4);
    std::vector<float> want(32 * 16), got(32 * 16, NAN);
    evaluate(s.dag(), {a.data(), b.data(), want.data()});
    lower::interpret(lower::lower(s, "mm", lower::gpu_lower_options()),
                     {a.data(), b.data(), got.data()});
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
    const std::string text = [&] {
      std::ostringstream os;
      os << lower::lower_gpu(s, Target::cuda());
      return os.str();
    }();
    CHECK(count(text, "tensorized") == 1);
  }

  TEST_CASE("the fragment layouts of m16n8k8 with TF32 operands: every element held once") {
    std::vector<int> a(16 * 8), b(8 * 8);
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = 0; r < 4; ++r) {
        const auto ea = lower::MmaTile::tf32_a_element(lane, r);
        ++a[ea[0] * 8 + ea[1]];
      }
      for (int r = 0; r < 2; ++r) {
        const auto eb = lower::MmaTile::tf32_b_element(lane, r);
        ++b[eb[0] * 8 + eb[1]];
      }
    }
    for (int x : a) CHECK(x == 1);
    for (int x : b) CHECK(x == 1);
    // PTX ISA (mma.m16n8k8, .tf32): lane 5 (group 1, thread 1) holds a2 = A[1][5], a1 = A[9][1],
    // b1 = B[5][1].
    CHECK(lower::MmaTile::tf32_a_element(5, 2) == std::array<int, 2>{1, 5});
    CHECK(lower::MmaTile::tf32_a_element(5, 1) == std::array<int, 2>{9, 1});
    CHECK(lower::MmaTile::tf32_b_element(5, 1) == std::array<int, 2>{5, 1});
  }

  TEST_CASE(
      "float32 matmuls as TF32 tensor-core tiles: the lanes' fragments agree with the "
      "interpreter") {
    struct config {
      loom_test::mma_tiling t;
      int64_t M, N, K;
    };
    const std::vector<config> configs = {
        {{1, 2, 2, 2, true, true, 8}, 64, 64, 32},   // 2 warps side by side, shared A and B
        {{2, 1, 1, 2, true, false, 8}, 64, 32, 24},  // warps stacked, loops left rolled
        {{1, 1, 1, 1, false, true, 8}, 32, 16, 16},  // one warp, operands straight from global
    };
    const Target tf32 = Target::cuda().with_tf32();
    for (const config& c : configs) {
      CAPTURE(c.M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      const State s = loom_test::tensor_core_matmul(loom_test::float_matmul(c.M, c.N, c.K), c.t);
      const lower::GpuProgram p = lower::lower_gpu(s, tf32);
      REQUIRE(p.kernels.size() == 1);
      const std::vector<lower::MmaTile> tiles = loom_test::tiles_of(p.kernels[0]);
      REQUIRE(tiles.size() == 1);
      CHECK(tiles[0].instruction() == "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
      CHECK(tiles[0].k == 8);
      CHECK(tiles[0].per_register() == 1);
      CHECK(loom_test::check_half_matmul<float>(
                s.dag(), c.M, c.N, c.K,
                [&](std::vector<void*> args) { lower::emulate(p, args); }) == "");
    }
  }

  TEST_CASE("a TF32 tile needs a target that allows TF32, and a reduction step of 8") {
    const State s = loom_test::tensor_core_matmul(loom_test::float_matmul(32, 16, 16),
                                                  {1, 1, 1, 1, false, true, 8});
    const std::string e = loom_test::lowering_error(s);  // Target::cuda(): TF32 not allowed
    CHECK(e.find("[loom.lower.E427]") != std::string::npos);
    CHECK(e.find("does not allow TF32") != std::string::npos);
    CHECK(e.find("with_tf32") != std::string::npos);
    std::string e16;
    try {
      lower::lower_gpu(loom_test::tensor_core_matmul(loom_test::float_matmul(32, 16, 16),
                                                     {1, 1, 1, 1, false, true, 16}),
                       Target::cuda().with_tf32());
    } catch (const user_error& x) {
      e16 = x.what();
    }
    CHECK(e16.find("[loom.lower.E427]") != std::string::npos);
    CHECK(e16.find("m16n8k8 (TF32) tile runs 8 from 0") != std::string::npos);
    CHECK(Target::cuda().with_tf32().to_string() == "cuda -arch=sm_90 -tf32");
    CHECK(Target::cuda().to_string() == "cuda -arch=sm_90");
  }
}

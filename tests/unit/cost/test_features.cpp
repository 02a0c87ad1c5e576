// Program features (loom/cost/features.hpp): the name table, hand-computed features of small loop
// nests (elementwise, matmul, tiled matmul, hand-built nests), annotation positions, rows per
// written buffer, the vectorized and unvectorized lowerings agreeing, determinism and errors.
#include <loom/cost/features.hpp>
#include <loom/loom.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/mma_schedule.hpp"

using namespace loom;
using namespace loom::cost;

namespace {

/// Feature `k` of row `r`, unscaled back to its raw value (one-hot features as they are).
double raw(const ProgramFeatures& p, int r, int k) {
  const float v = feature_row(p, r)[k];
  return is_log_scaled(k) ? unscale(v) : v;
}

/// The unscaled features of buffer block `b` of row `r`.
double buf(const ProgramFeatures& p, int r, int b, int offset) {
  return raw(p, r, buffer_feature(b, offset));
}

/// The position one-hot starting at `base` as a LoopPosition (checks that exactly one is set).
LoopPosition position(const ProgramFeatures& p, int r, int base) {
  int found = -1, set = 0;
  for (int k = 0; k < kNumLoopPositions; ++k)
    if (feature_row(p, r)[base + k] == 1.0f) {
      found = k;
      ++set;
    }
  REQUIRE(set == 1);
  return static_cast<LoopPosition>(found);
}

/// The buffer block of row `r` that describes a buffer with `unique_bytes` bytes touched and
/// access type offset `acc` (buffers are sorted by lines, so tests look them up).
int block_of(const ProgramFeatures& p, int r, double unique_bytes, int acc) {
  for (int b = 0; b < kMaxFeatureBuffers; ++b)
    if (buf(p, r, b, acc) == 1.0 &&
        std::abs(buf(p, r, b, kBufferUniqueBytes) - unique_bytes) < 1e-3)
      return b;
  FAIL("no buffer block with " << unique_bytes << " unique bytes");
  return -1;
}

std::shared_ptr<const ComputeDAG> add_4x8() {
  auto A = placeholder<float>("A", {4, 8});
  auto B = placeholder<float>("B", {4, 8});
  auto C = compute("C", {4, 8}, [&](Var i, Var j) { return A(i, j) + B(i, j); });
  return std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{A, B},
                                            std::vector<ir::Tensor>{C});
}

std::shared_ptr<const ComputeDAG> matmul(int64_t M, int64_t N, int64_t K) {
  auto A = placeholder<float>("A", {M, K});
  auto B = placeholder<float>("B", {K, N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{A, B},
                                            std::vector<ir::Tensor>{C});
}

ProgramFeatures features(const sched::State& s) { return extract_features(s, Target::host()); }

// 1.0 within float rounding of a log-scaled value.
bool near(double got, double want) {
  return std::abs(got - want) <= 1e-4 * std::max(1.0, std::abs(want));
}

}  // namespace

TEST_SUITE("cost") {
  TEST_CASE("the name table has one unique name per feature, in Ansor's layout") {
    const auto& names = feature_names();
    REQUIRE(names.size() == static_cast<size_t>(kNumFeatures));
    CHECK(kNumFeatures == 167);
    CHECK(kNumAnsorFeatures == 164);
    std::set<std::string_view> unique(names.begin(), names.end());
    CHECK(unique.size() == names.size());
    for (auto n : names) CHECK(!n.empty());
    CHECK(names[kFeatureFloatAddSub] == "float_addsub");
    CHECK(names[kFeatureVecNum] == "vec_num");
    CHECK(names[kFeatureVecPos + static_cast<int>(LoopPosition::InnerSpatial)] ==
          "vec_type.inner_spatial");
    CHECK(names[kFeatureParallelPos + 7] == "parallel_type.mixed");
    CHECK(names[kFeatureIsGpu] == "is_gpu");
    CHECK(names[kFeatureVThread] == "vthread_len");
    CHECK(names[buffer_feature(0, kBufferBytes)] == "B0.bytes");
    CHECK(names[buffer_feature(0, kBufferReuseDistIter)] == "B0.reuse_dist_iter");
    CHECK(names[buffer_feature(4, kBufferStride)] == "B4.stride");
    CHECK(names[kFeatureIntensityCurve + 9] == "arith_intensity_curve.9");
    CHECK(names[kFeatureAllocSize] == "alloc_size");
    CHECK(names[kFeatureAutoUnrollMaxStep] == "auto_unroll_max_step");
    CHECK(names[kFeatureTensorCoreMacs] == "tensor_core_macs");
    CHECK(names[kFeaturePipelinedLen] == "pipelined_len");
    CHECK(names[kFeatureSharedBytes] == "shared_bytes");
    // 3 × 8 annotation positions + 5 × 6 buffer one-hots + is_gpu stay unscaled.
    int one_hot = 0;
    for (int k = 0; k < kNumFeatures; ++k) one_hot += !is_log_scaled(k);
    CHECK(one_hot == 3 * 8 + 5 * 6 + 1);
  }

  TEST_CASE("log scaling is sign preserving and unscale inverts it") {
    CHECK(log_scale(0) == 0.0f);
    CHECK(log_scale(1) == 1.0f);
    CHECK(log_scale(-3) == -2.0f);
    CHECK(log_scale(1023) == 10.0f);
    for (double x : {0.0, 0.25, 7.0, -7.0, 1e6, -1e9}) CHECK(near(unscale(log_scale(x)), x));
  }

  TEST_CASE("an unscheduled 4x8 elementwise add, by hand") {
    auto p = features(sched::State(add_4x8()));
    REQUIRE(p.num_rows == 1);
    REQUIRE(p.num_features == kNumFeatures);
    REQUIRE(p.values.size() == static_cast<size_t>(kNumFeatures));
    // 32 float adds; each of the two loads computes i*8 + j: an add, a mul (a fusable pair).
    CHECK(raw(p, 0, kFeatureFloatAddSub) == doctest::Approx(32));
    CHECK(raw(p, 0, kFeatureFloatMul) == 0);
    CHECK(raw(p, 0, kFeatureFloatMad) == 0);
    CHECK(raw(p, 0, kFeatureIntAddSub) == doctest::Approx(64));
    CHECK(raw(p, 0, kFeatureIntMul) == doctest::Approx(64));
    CHECK(raw(p, 0, kFeatureIntMad) == doctest::Approx(64));
    CHECK(row_float_ops(feature_row(p, 0)) == doctest::Approx(32));
    for (int base : {kFeatureVecPos, kFeatureUnrollPos, kFeatureParallelPos})
      CHECK(position(p, 0, base) == LoopPosition::None);
    CHECK(raw(p, 0, kFeatureVecNum) == 0);
    CHECK(raw(p, 0, kFeatureIsGpu) == 0);
    CHECK(raw(p, 0, kFeatureBlockIdxX) == 0);
    // Three buffers with equal lines and bytes stay in access order: C (write), A, B (reads).
    CHECK(buf(p, 0, 0, kBufferAccWrite) == 1);
    CHECK(buf(p, 0, 1, kBufferAccRead) == 1);
    CHECK(buf(p, 0, 2, kBufferAccRead) == 1);
    CHECK(buf(p, 0, 3, kBufferBytes) == 0);  // zero padding
    for (int b = 0; b < 3; ++b) {
      CAPTURE(b);
      CHECK(buf(p, 0, b, kBufferBytes) == doctest::Approx(128));        // 32 accesses × 4 bytes
      CHECK(buf(p, 0, b, kBufferUniqueBytes) == doctest::Approx(128));  // the whole tensor
      // Stride 1: one 64-byte line per 16 floats, 32 floats.
      CHECK(buf(p, 0, b, kBufferLines) == doctest::Approx(2));
      CHECK(buf(p, 0, b, kBufferUniqueLines) == doctest::Approx(2));
      CHECK(buf(p, 0, b, kBufferStride) == doctest::Approx(1));
      CHECK(buf(p, 0, b, kBufferReuseNone) == 1);
      CHECK(buf(p, 0, b, kBufferReuseCount) == 0);
      CHECK(buf(p, 0, b, kBufferBytesPerReuse) == doctest::Approx(256));  // no reuse: × 2
    }
    CHECK(row_bytes(feature_row(p, 0)) == doctest::Approx(3 * 128));
    // 1 flop per 12 bytes at every level.
    for (int k = 0; k < kIntensityCurvePoints; ++k)
      CHECK(raw(p, 0, kFeatureIntensityCurve + k) == doctest::Approx(1.0 / 12).epsilon(1e-4));
    CHECK(raw(p, 0, kFeatureOuterProd) == doctest::Approx(32));
    CHECK(raw(p, 0, kFeatureNumLoops) == doctest::Approx(2));
    CHECK(raw(p, 0, kFeatureAutoUnrollMaxStep) == 0);
    CHECK(raw(p, 0, kFeatureAllocSize) == 0);  // C is a kernel argument
  }

  TEST_CASE("vectorizing the inner loop: vector features, and the vectorized lowering agrees") {
    sched::State s(add_4x8());
    s.annotate("C", 1, sched::Annotation::Vectorized);
    auto p = features(s);
    REQUIRE(p.num_rows == 1);
    CHECK(raw(p, 0, kFeatureVecNum) == doctest::Approx(1));
    CHECK(raw(p, 0, kFeatureVecProd) == doctest::Approx(8));
    CHECK(raw(p, 0, kFeatureVecLen) == doctest::Approx(8));
    CHECK(position(p, 0, kFeatureVecPos) == LoopPosition::InnerSpatial);
    CHECK(position(p, 0, kFeatureParallelPos) == LoopPosition::None);

    // Fully lowered, the loop is a Ramp store of 8 lanes: modelled as an 8-iteration vectorized
    // loop, so everything but the scalar index arithmetic (once per vector) matches.
    auto v = extract_features(lower::lower(s), Target::host());
    REQUIRE(v.num_rows == 1);
    for (int k = 0; k < kNumFeatures; ++k) {
      if (k >= kFeatureIntMad && k <= kFeatureIntOtherFunc) continue;
      CAPTURE(feature_names()[k]);
      CHECK(feature_row(v, 0)[k] == doctest::Approx(feature_row(p, 0)[k]));
    }
    // Per vector, not per lane: the loads read ramp(i*8, 1, 8), one mul each, 4 vectors.
    CHECK(raw(v, 0, kFeatureIntMul) == doctest::Approx(8));
    CHECK(raw(v, 0, kFeatureIntAddSub) == 0);
  }

  TEST_CASE("parallel loops: outer spatial, and mixed when fused across dimensions") {
    SUBCASE("the outer loop") {
      sched::State s(add_4x8());
      s.annotate("C", 0, sched::Annotation::Parallel);
      auto p = features(s);
      CHECK(raw(p, 0, kFeatureParallelNum) == doctest::Approx(1));
      CHECK(raw(p, 0, kFeatureParallelProd) == doctest::Approx(4));
      CHECK(raw(p, 0, kFeatureParallelLen) == doctest::Approx(4));
      CHECK(position(p, 0, kFeatureParallelPos) == LoopPosition::OuterSpatial);
    }
    SUBCASE("both loops fused") {
      sched::State s(add_4x8());
      s.fuse("C", {0, 1});
      s.annotate("C", 0, sched::Annotation::Parallel);
      auto p = features(s);
      CHECK(raw(p, 0, kFeatureParallelProd) == doctest::Approx(32));
      CHECK(position(p, 0, kFeatureParallelPos) == LoopPosition::Mixed);
      // The fused loop walks the flat index: still the whole tensor, 2 lines.
      CHECK(buf(p, 0, 0, kBufferUniqueBytes) == doctest::Approx(128));
      CHECK(buf(p, 0, 0, kBufferLines) == doctest::Approx(2));
      CHECK(raw(p, 0, kFeatureNumLoops) == doctest::Approx(1));
    }
    SUBCASE("the inner loop") {
      sched::State s(add_4x8());
      s.split("C", 1, {4});  // i, j.0 (2), j.1 (4)
      s.annotate("C", 1, sched::Annotation::Parallel);
      auto p = features(s);
      CHECK(position(p, 0, kFeatureParallelPos) == LoopPosition::InnerSpatial);
    }
  }

  TEST_CASE("a non-divisible split: the iterations its tail guard skips are not counted") {
    sched::State s(add_4x8());
    s.split("C", 1, {3});  // j.0 (3) × j.1 (3) = 9 > 8, guarded by j.0*3 + j.1 < 8
    auto p = features(s);
    REQUIRE(p.num_rows == 1);
    CHECK(raw(p, 0, kFeatureFloatAddSub) == doctest::Approx(32));
    CHECK(buf(p, 0, 0, kBufferBytes) == doctest::Approx(128));
    CHECK(raw(p, 0, kFeatureOuterProd) == doctest::Approx(36));  // the loops themselves
    CHECK(raw(p, 0, kFeatureIntCmp) == doctest::Approx(36));     // the guard runs every time
  }

  TEST_CASE("a matmul: one row, reuse of A, B and C, strides") {
    const int64_t M = 16, N = 8, K = 32;
    auto p = features(sched::State(matmul(M, N, K)));
    REQUIRE(p.num_rows == 1);  // the update overwrites the init: one row for C
    // The init stores 0 (no op); the update does C + A*B: 4096 adds and muls, fusable.
    CHECK(raw(p, 0, kFeatureFloatAddSub) == doctest::Approx(M * N * K));
    CHECK(raw(p, 0, kFeatureFloatMul) == doctest::Approx(M * N * K));
    CHECK(raw(p, 0, kFeatureFloatMad) == doctest::Approx(M * N * K));
    CHECK(row_float_ops(feature_row(p, 0)) == doctest::Approx(2 * M * N * K).epsilon(1e-5));

    const int a = block_of(p, 0, M * K * 4, kBufferAccRead);
    const int b = block_of(p, 0, K * N * 4, kBufferAccRead);
    const int c = block_of(p, 0, M * N * 4, kBufferAccReadWrite);
    // Sorted by lines: B (stride N along k: a line per 2 accesses), A (stride 1), C.
    CHECK(b == 0);
    CHECK(a == 1);
    CHECK(c == 2);
    for (int x : {a, b, c}) CHECK(buf(p, 0, x, kBufferReuseLoopMultipleRead) == 1);
    // A[i, k] is reused across j (count N), B[k, j] across i (count M), C[i, j] across k.
    CHECK(buf(p, 0, a, kBufferReuseCount) == doctest::Approx(N));
    CHECK(buf(p, 0, b, kBufferReuseCount) == doctest::Approx(M));
    CHECK(buf(p, 0, c, kBufferReuseCount) == doctest::Approx(K));
    CHECK(buf(p, 0, a, kBufferReuseDistIter) == doctest::Approx(K));
    CHECK(buf(p, 0, b, kBufferReuseDistIter) == doctest::Approx(N * K));
    CHECK(buf(p, 0, c, kBufferReuseDistIter) == doctest::Approx(1));
    // Bytes touched in one iteration of the reusing loop, over every store under it so far:
    // A under k: C 4 + A 128 + B 128; B under j: init C 32 + C 32 + A 128 + B 1024; C under
    // k: one element of each access.
    CHECK(buf(p, 0, a, kBufferReuseDistBytes) == doctest::Approx(260));
    CHECK(buf(p, 0, b, kBufferReuseDistBytes) == doctest::Approx(1216));
    CHECK(buf(p, 0, c, kBufferReuseDistBytes) == doctest::Approx(12));
    CHECK(buf(p, 0, a, kBufferStride) == doctest::Approx(1));
    CHECK(buf(p, 0, b, kBufferStride) == doctest::Approx(N));
    CHECK(buf(p, 0, c, kBufferStride) == 0);  // k does not move C
    CHECK(buf(p, 0, a, kBufferLines) == doctest::Approx(M * N * K / 16));
    CHECK(buf(p, 0, b, kBufferLines) == doctest::Approx(M * N * K / 2));
    CHECK(buf(p, 0, c, kBufferLines) == doctest::Approx(M * N / 16));  // once per k loop
    CHECK(buf(p, 0, c, kBufferBytes) == doctest::Approx(M * N * K * 4));
    // Outermost intensity: 2*M*N*K flops over the three tensors.
    CHECK(raw(p, 0, kFeatureIntensityCurve + 9) ==
          doctest::Approx(2.0 * M * N * K / ((M * K + K * N + M * N) * 4)).epsilon(1e-4));
  }

  TEST_CASE("unrolled reduction loops: positions and the auto-unroll step") {
    sched::State s(matmul(16, 8, 32));
    s.split("C", 2, {4});  // i, j, k.0 (8), k.1 (4)
    SUBCASE("innermost reduce") {
      s.annotate("C", 3, sched::Annotation::Unrolled);
      auto p = features(s);
      CHECK(raw(p, 0, kFeatureUnrollNum) == doctest::Approx(1));
      CHECK(raw(p, 0, kFeatureUnrollLen) == doctest::Approx(4));
      CHECK(position(p, 0, kFeatureUnrollPos) == LoopPosition::InnerReduce);
      CHECK(raw(p, 0, kFeatureAutoUnrollMaxStep) == doctest::Approx(4));
    }
    SUBCASE("outer reduce") {
      s.annotate("C", 2, sched::Annotation::Unrolled);
      auto p = features(s);
      CHECK(position(p, 0, kFeatureUnrollPos) == LoopPosition::OuterReduce);
      CHECK(raw(p, 0, kFeatureAutoUnrollMaxStep) == doctest::Approx(32));  // 8 × 4 updates
    }
    SUBCASE("auto_unroll_max_step") {
      s.pragma_unroll("C", 0, 16);  // unrolls k.1 (4 steps), not k.0 × k.1 (32)
      auto p = features(s);
      CHECK(raw(p, 0, kFeatureUnrollNum) == doctest::Approx(1));
      CHECK(position(p, 0, kFeatureUnrollPos) == LoopPosition::InnerReduce);
      CHECK(raw(p, 0, kFeatureAutoUnrollMaxStep) == doctest::Approx(4));
    }
  }

  TEST_CASE("a tiled matmul: intensity grows outwards, rows per written buffer") {
    sched::State s(matmul(64, 64, 64));
    s.split("C", 0, {8});
    s.split("C", 2, {8});
    s.reorder("C", {0, 2, 4, 1, 3});  // i.0, j.0, k, i.1, j.1
    s.annotate("C", 4, sched::Annotation::Vectorized);
    auto p = features(s);
    REQUIRE(p.num_rows == 1);
    double prev = 0;
    for (int k = 0; k < kIntensityCurvePoints; ++k) {
      const double v = raw(p, 0, kFeatureIntensityCurve + k);
      CAPTURE(k);
      CHECK(v > 0);
      CHECK(v >= prev * (1 - 1e-5));
      prev = v;
    }
    CHECK(prev == doctest::Approx(2.0 * 64 * 64 * 64 / (3 * 64 * 64 * 4)).epsilon(1e-4));
    CHECK(position(p, 0, kFeatureVecPos) == LoopPosition::InnerSpatial);

    // A local accumulator adds a second written buffer: two rows, the accumulator's allocated
    // inside the tile loops.
    sched::State t(matmul(64, 64, 64));
    t.cache_write("C", ir::MemoryScope::Local);
    auto q = features(t);
    CHECK(q.num_rows == 2);
  }

  TEST_CASE("hand-built nests: serial reuse, op counts adding up, conditions, allocation") {
    using namespace loom::ir;
    Buffer A = make_buffer("A", DType::f32(), {8}, MemoryScope::Global, 0);
    Buffer C = make_buffer("C", DType::f32(), {8}, MemoryScope::Global, 1);
    Buffer T = make_buffer("T", DType::f32(), {1}, MemoryScope::Local);
    Expr i = Variable::make("i");
    Expr two = FloatImm::make(DType::f32(), 2.0);
    // for i in 8: allocate T[1] { T[0] = A[i] * 2;  if (i < 7) C[i] = A[i] + T[0] }
    Stmt body = For::make(
        i, Expr(0), Expr(8), ForKind::Serial,
        Allocate::make(
            T, Block::make({Store::make(T, Expr(0), Load::make(A, i) * two),
                            IfThenElse::make(
                                i < Expr(7),
                                Store::make(C, i, Load::make(A, i) + Load::make(T, Expr(0))))})));
    auto p = extract_features(LoweredFunc{"k", {A, C}, body}, Target::host());
    REQUIRE(p.num_rows == 2);  // T, then C: in order of the first store
    // T: a float mul per iteration; allocated inside the loop.
    CHECK(raw(p, 0, kFeatureFloatMul) == doctest::Approx(8));
    CHECK(raw(p, 0, kFeatureAllocSize) == doctest::Approx(4));
    CHECK(raw(p, 0, kFeatureAllocOuterProd) == doctest::Approx(8));
    CHECK(raw(p, 0, kFeatureAllocProd) == doctest::Approx(8));
    CHECK(raw(p, 0, kFeatureAllocInnerProd) == doctest::Approx(1));
    // C: the add in the 7 iterations the guard lets through, the guard's comparison in all 8.
    CHECK(raw(p, 1, kFeatureFloatAddSub) == doctest::Approx(7));
    CHECK(raw(p, 1, kFeatureIntCmp) == doctest::Approx(8));
    CHECK(buf(p, 1, block_of(p, 1, 32, kBufferAccWrite), kBufferBytes) == doctest::Approx(28));
    // A is read by both stores under i: serial reuse, distance 1 iteration, 1 reuse.
    const int a = block_of(p, 1, 32, kBufferAccRead);
    CHECK(buf(p, 1, a, kBufferReuseSerialMultipleReadWrite) == 1);
    CHECK(buf(p, 1, a, kBufferReuseCount) == doctest::Approx(1));
    CHECK(buf(p, 1, a, kBufferReuseDistIter) == doctest::Approx(1));
    // (T 4 + A 32) + (C 32 + A 32 + T 4) bytes under i, per iteration.
    CHECK(buf(p, 1, a, kBufferReuseDistBytes) == doctest::Approx(104.0 / 8));
    // T[0] does not move with i: reused by every iteration.
    const int t = block_of(p, 1, 4, kBufferAccRead);
    CHECK(buf(p, 1, t, kBufferReuseLoopMultipleRead) == 1);
    CHECK(buf(p, 1, t, kBufferReuseCount) == doctest::Approx(8));
    CHECK(buf(p, 1, t, kBufferStride) == 0);

    // Two stores to one buffer: op counts add up, the rest is the last store's.
    Stmt twice = Block::make(
        {For::make(i, Expr(0), Expr(8), ForKind::Serial, Store::make(C, i, Load::make(A, i) + two)),
         For::make(i, Expr(0), Expr(4), ForKind::Parallel,
                   Store::make(C, i, Load::make(A, i) * two))});
    auto q = extract_features(LoweredFunc{"k", {A, C}, twice}, Target::host());
    REQUIRE(q.num_rows == 1);
    CHECK(raw(q, 0, kFeatureFloatAddSub) == doctest::Approx(8));
    CHECK(raw(q, 0, kFeatureFloatMul) == doctest::Approx(4));
    CHECK(raw(q, 0, kFeatureOuterProd) == doctest::Approx(4));
    CHECK(raw(q, 0, kFeatureParallelNum) == doctest::Approx(1));
  }

  TEST_CASE("GPU bindings fill the GPU features; a CPU nest leaves them zero") {
    using namespace loom::ir;
    Buffer A = make_buffer("A", DType::f32(), {256}, MemoryScope::Global, 0);
    Buffer B = make_buffer("B", DType::f32(), {256}, MemoryScope::Global, 1);
    Expr bx = Variable::make("bx"), tx = Variable::make("tx");
    Expr idx = bx * 64 + tx;
    Stmt body = For::make(bx, Expr(0), Expr(4), ForKind::BlockIdxX,
                          For::make(tx, Expr(0), Expr(64), ForKind::ThreadIdxX,
                                    Store::make(B, idx, Load::make(A, idx))));
    auto p = extract_features(LoweredFunc{"k", {A, B}, body}, Target::cuda());
    REQUIRE(p.num_rows == 1);
    CHECK(raw(p, 0, kFeatureIsGpu) == doctest::Approx(1));
    CHECK(raw(p, 0, kFeatureBlockIdxX) == doctest::Approx(4));
    CHECK(raw(p, 0, kFeatureThreadIdxX) == doctest::Approx(64));
    CHECK(raw(p, 0, kFeatureBlockIdxY) == 0);
    CHECK(raw(p, 0, kFeatureVThread) == 0);
    CHECK(raw(p, 0, kFeatureParallelNum) == 0);  // bindings are not parallel loops
    CHECK(raw(p, 0, kFeatureOuterProd) == doctest::Approx(256));
  }

  TEST_CASE("group 6: tensor-core multiply-adds, the pipelined loop, the shared bytes") {
    // 64^3 bf16 on tensor cores: blocks of 32 x 32, A and B through shared memory per 16-step of
    // k (32 x 16 and 16 x 32 bf16 elements: 1 KiB each), 4 steps.
    const auto dag = loom_test::half_matmul<bfloat16>(64, 64, 64);
    for (const int stages : {0, 2, 4}) {
      CAPTURE(stages);
      const bool pipelined = stages > 0;
      loom_test::mma_tiling t;
      t.pipeline_stages = stages;
      const auto p = extract_features(loom_test::tensor_core_matmul(dag, t), Target::cuda("sm_90"));
      int accumulators = 0, copies = 0;
      for (int r = 0; r < p.num_rows; ++r) {
        CAPTURE(r);
        if (raw(p, r, kFeatureTensorCoreMacs) > 0) {
          ++accumulators;
          CHECK(raw(p, r, kFeatureTensorCoreMacs) == doctest::Approx(64 * 64 * 64));
          CHECK(raw(p, r, kFeaturePipelinedLen) == doctest::Approx(pipelined ? 4 : 0));
          // A and B have a slot per stage.
          CHECK(raw(p, r, kFeatureSharedBytes) == doctest::Approx(2048 * std::max(stages, 1)));
        } else if (raw(p, r, kFeatureSharedBytes) > 0) {
          ++copies;  // the copies into shared memory, inside the same loop over k-steps
          CHECK(raw(p, r, kFeaturePipelinedLen) == doctest::Approx(pipelined ? 4 : 0));
        }
      }
      CHECK(accumulators == 1);
      CHECK(copies == 2);
    }
    // A CPU program has none of them.
    const auto cpu = extract_features(sched::State(matmul(64, 64, 64)), Target::host());
    for (int r = 0; r < cpu.num_rows; ++r)
      for (int k = kNumAnsorFeatures; k < kNumFeatures; ++k) CHECK(raw(cpu, r, k) == 0);
  }

  TEST_CASE("sampled programs: deterministic, batch equals one by one, exact flops") {
    Task task(matmul(128, 128, 128));
    auto sketches = search::generate_sketches(task);
    std::mt19937_64 rng(11);
    auto programs = search::sample_programs(sketches, task, {}, rng, 12);
    REQUIRE(programs.size() >= 6);
    auto batch = extract_features(programs, task.target, true);
    auto serial = extract_features(programs, task.target, false);
    REQUIRE(batch.size() == programs.size());
    for (size_t i = 0; i < programs.size(); ++i) {
      CAPTURE(i);
      auto one = extract_features(programs[i], task.target);
      CHECK(one.num_rows >= 1);
      CHECK(one.values == batch[i].values);
      CHECK(one.values == serial[i].values);
      CHECK(one.values == extract_features(programs[i], task.target).values);
      for (float v : one.values) CHECK(std::isfinite(v));
      // Perfect tilings execute exactly the 2·M·N·K float operations of the GEMM.
      double flops = 0;
      for (int r = 0; r < one.num_rows; ++r) flops += row_float_ops(feature_row(one, r));
      CHECK(flops == doctest::Approx(2.0 * 128 * 128 * 128).epsilon(1e-5));
    }
  }

  TEST_CASE("errors: a kernel without a body; a sketch in a batch gets no rows") {
    CHECK_THROWS_WITH_AS(extract_features(ir::LoweredFunc{"k", {}, ir::Stmt()}, Target::host()),
                         "[loom.cost.E900] extract_features(): kernel 'k' has no body",
                         loom::user_error);
    Task task(matmul(64, 64, 64));
    auto sketches = search::generate_sketches(task);
    std::optional<sched::State> sketch;
    for (auto& s : sketches) {
      try {
        lower::lower(s);
      } catch (const loom::user_error&) {
        sketch = s;
        break;
      }
    }
    REQUIRE(sketch);
    auto out = extract_features(std::vector<sched::State>{*sketch, sched::State(matmul(4, 4, 4))},
                                task.target);
    CHECK(out[0].num_rows == 0);
    CHECK(out[0].values.empty());
    CHECK(out[1].num_rows == 1);
  }
}

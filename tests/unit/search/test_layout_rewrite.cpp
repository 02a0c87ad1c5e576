// Layout rewrite of constant inputs (loom/sched/layout_rewrite.hpp) on sampled programs: the
// packed layout follows the reader's tiles, and the rewritten computation, fed the input packed
// by the transform, computes the original result (loop-nest interpreter; tests/jit runs the
// same through the JIT).
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/lower/lower.hpp>
#include <loom/ops.hpp>
#include <loom/sched/layout_rewrite.hpp>
#include <loom/search/annotate.hpp>

#include "support/random_schedule.hpp"
#include "support/search_target.hpp"

using namespace loom;

namespace {

using loom_test::test_target;

// C[i, j] = sum_k A[i, k] B[k, j], with the test target.
Task matmul_task(int64_t m, int64_t k, int64_t n) {
  auto a = placeholder<float>("A", {m, k});
  auto b = placeholder<float>("B", {k, n});
  return Task(std::make_shared<const ComputeDAG>(
                  std::vector<ir::Tensor>{a, b},
                  std::vector<ir::Tensor>{ops::matmul(a, b, false, false, "C")}),
              test_target());
}

int check_packed_samples(const loom_test::workload& w, const std::string& input, uint64_t seed,
                         int count, bool free_tiles) {
  Task task(w.dag, test_target());
  search::SearchOptions options;
  options.allow_non_divisible_tiles = free_tiles;
  const auto ref = loom_test::make_reference(w, static_cast<uint32_t>(seed));
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (auto& p : search::sample_programs(search::generate_sketches(task, options, {}, {input}),
                                         task, options, rng, count)) {
    sched::LayoutRewrite rw = sched::rewrite_layout(p, input);
    auto [pw, pref] = loom_test::packed_reference(w, ref, rw);
    auto r = loom_test::run_and_compare(pw, pref, rw.state);
    CHECK_MESSAGE(r.ok, w.name << ": " << r.message << "\n" << p.to_string());
    ++checked;
  }
  MESSAGE(w.name << ": " << checked << " programs checked with '" << input << "' packed");
  return checked;
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("the packed layout of a GEMM's B follows the tiles of its reader") {
    Task task = matmul_task(8, 12, 16);
    sched::State s(task.dag);
    s.split("C", 1, {4});             // j -> j.0 (4) j.1 (4)
    s.split("C", 3, {3});             // k -> k.0 (4) k.1 (3)
    s.reorder("C", {1, 3, 0, 4, 2});  // j.0 k.0 i k.1 j.1
    // A per-call packing copy is replaced by the rewrite.
    const std::string copy = s.cache_read("B", ir::MemoryScope::Local, {"C"});
    s.compute_at(copy, "C", 1);
    sched::LayoutRewrite rw = sched::rewrite_layout(s, "B");
    CHECK(rw.argument == 1);
    CHECK(rw.packed.name() == "B_packed");
    // B[k, j] -> B_packed[j.0][k.0][k.1][j.1].
    CHECK(rw.packed.shape() == std::vector<int64_t>{4, 4, 3, 4});
    CHECK(rw.state.stages().size() == s.stages().size() - 1);  // the copy is gone
    CHECK(rw.dag->inputs()[1].name() == "B_packed");
    // The transform and the rewritten computation together compute C.
    const loom_test::workload w{"matmul 8x16x12", task.dag, 12};
    const auto ref = loom_test::make_reference(w, 3);
    auto [pw, pref] = loom_test::packed_reference(w, ref, rw);
    auto r = loom_test::run_and_compare(pw, pref, rw.state);
    CHECK_MESSAGE(r.ok, r.message);
    // The packed buffer holds B in tile order: element (k, j) = (5, 9) is at
    // [j.0 = 2][k.0 = 1][k.1 = 2][j.1 = 1].
    const float* packed = reinterpret_cast<const float*>(pref.inputs[1].bytes.data());
    const float* orig = reinterpret_cast<const float*>(ref.inputs[1].bytes.data());
    CHECK(packed[((2 * 4 + 1) * 3 + 2) * 4 + 1] == orig[5 * 16 + 9]);
  }

  TEST_CASE("the packed layout keeps the innermost tile of the input's contiguous axis innermost") {
    Task task = matmul_task(8, 12, 16);
    sched::State s(task.dag);
    s.split("C", 1, {4});             // j -> j.0 (4) j.1 (4)
    s.split("C", 3, {3});             // k -> k.0 (4) k.1 (3)
    s.reorder("C", {1, 3, 0, 2, 4});  // j.0 k.0 i j.1 k.1: a reduction tile inside j.1
    s.annotate("C", 4, sched::Annotation::Unrolled);
    sched::LayoutRewrite rw = sched::rewrite_layout(s, "B");
    // Loop order would give B_packed[j.0][k.0][j.1][k.1], read along j.1 with stride 3.
    CHECK(rw.packed.shape() == std::vector<int64_t>{4, 4, 3, 4});
    const loom_test::workload w{"matmul 8x16x12", task.dag, 12};
    const auto ref = loom_test::make_reference(w, 5);
    auto [pw, pref] = loom_test::packed_reference(w, ref, rw);
    const float* packed = reinterpret_cast<const float*>(pref.inputs[1].bytes.data());
    const float* orig = reinterpret_cast<const float*>(ref.inputs[1].bytes.data());
    // (k, j) = (5, 9) is at [j.0 = 2][k.0 = 1][k.1 = 2][j.1 = 1].
    CHECK(packed[((2 * 4 + 1) * 3 + 2) * 4 + 1] == orig[5 * 16 + 9]);
    auto r = loom_test::run_and_compare(pw, pref, rw.state);
    CHECK_MESSAGE(r.ok, r.message);
  }

  TEST_CASE("the last tile of a stage that reads padded packed input is not shifted back") {
    // C.local computes one 4-column tile of C at a time; 10 columns make three tiles, the last
    // running past the end. Reading B as is, the last tile shifts back to columns 6..9; reading
    // B packed into zero-padded tiles of 4, it covers 8..11 and stays contiguous in B_packed.
    Task task = matmul_task(7, 9, 10);
    sched::State s(task.dag);
    const std::string local = s.cache_write("C", ir::MemoryScope::Local);
    s.split(local, 1, {4});          // C.local: i, j.0 (3), j.1 (4), k
    s.reorder(local, {1, 0, 3, 2});  // j.0 i k j.1
    s.split("C", 1, {4});            // C: i, j.0 (3), j.1 (4)
    s.reorder("C", {1, 0, 2});       // j.0 i j.1
    s.compute_at(local, "C", 0);
    sched::LayoutRewrite rw = sched::rewrite_layout(s, "B");
    CHECK(rw.packed.shape() == std::vector<int64_t>{3, 9, 4});  // B_packed[j.0][k][j.1]
    const std::string plain = ir::to_string(lower::lower(s, "plain").body);
    const std::string packed = ir::to_string(lower::lower(rw.state, "packed").body);
    // Lowering peels the last tile. Plain, its box starts at column 6, so the copy to C skips
    // two columns of it; packed, it reads B_packed's third tile (at 2 * 9 * 4) from its start.
    CHECK_MESSAGE(plain.find("C.local[i0*4 + i1.1 + 2]") != std::string::npos, plain);
    CHECK_MESSAGE(packed.find("C.local[i0*4 + i1.1 + 2]") == std::string::npos, packed);
    CHECK_MESSAGE(packed.find("B_packed[k*4 + i1.1 + 72]") != std::string::npos, packed);
    const loom_test::workload w{"matmul 7x10x9", task.dag, 9};
    const auto ref = loom_test::make_reference(w, 6);
    auto [pw, pref] = loom_test::packed_reference(w, ref, rw);
    auto r = loom_test::run_and_compare(pw, pref, rw.state);
    CHECK_MESSAGE(r.ok, r.message);
    auto r0 = loom_test::run_and_compare(w, ref, s);
    CHECK_MESSAGE(r0.ok, r0.message);
  }

  TEST_CASE("layout rewrite rejects inputs it cannot follow") {
    auto x = placeholder<float>("X", {6, 6});
    auto y = compute("Y", {6, 6}, [&](Var i, Var j) { return x(i, j) + x(j, i); });
    auto z = compute("Z", {6}, [&](Var i) { return x(i, i); });
    auto u = compute("U", {6, 6}, [&](Var i, Var j) { return x(i, j) * 2.0f; });
    auto v = compute("V", {6, 6}, [&](Var i, Var j) { return u(i, j) + x(i, j); });
    sched::State sy(ComputeDAG({x}, {y}));
    CHECK_THROWS_WITH_AS(sched::rewrite_layout(sy, "Q"), doctest::Contains("[loom.sched.E260]"),
                         user_error);
    CHECK_THROWS_WITH_AS(sched::rewrite_layout(sy, "X"), doctest::Contains("[loom.sched.E262]"),
                         user_error);
    sched::State sz(ComputeDAG({x}, {z}));
    CHECK_THROWS_WITH_AS(sched::rewrite_layout(sz, "X"), doctest::Contains("[loom.sched.E262]"),
                         user_error);
    sched::State sv(ComputeDAG({x}, {v}));
    CHECK_THROWS_WITH_AS(sched::rewrite_layout(sv, "X"), doctest::Contains("[loom.sched.E261]"),
                         user_error);
    sched::State su(ComputeDAG({x}, {u}));
    su.fuse("U", {0, 1});
    su.split("U", 0, {4});
    CHECK_THROWS_WITH_AS(sched::rewrite_layout(su, "X"), doctest::Contains("[loom.sched.E263]"),
                         user_error);
  }

  TEST_CASE("every sampled program computes the same result with its weights pre-packed") {
    int total = 0;
    {
      auto a = placeholder<float>("A", {13, 19});
      auto b = placeholder<float>("B", {19, 17});
      auto w = loom_test::make_workload("matmul 13x17x19", {a, b}, {ops::matmul(a, b)}, 19);
      total += check_packed_samples(w, "B", 11, 30, false);
      total += check_packed_samples(w, "B", 12, 30, true);
    }
    {
      auto x = placeholder<float>("X", {7, 24});
      auto wt = placeholder<float>("W", {10, 24});
      auto bias = placeholder<float>("bias", {10});
      auto w =
          loom_test::make_workload("dense 7x10x24", {x, wt, bias}, {ops::dense(x, wt, bias)}, 24);
      total += check_packed_samples(w, "W", 13, 30, true);
    }
    {
      auto a = placeholder<float>("A", {3, 5, 6});
      auto b = placeholder<float>("B", {3, 6, 7});
      auto w =
          loom_test::make_workload("batch_matmul 3x5x7x6", {a, b}, {ops::batch_matmul(a, b)}, 6);
      total += check_packed_samples(w, "B", 14, 30, true);
    }
    {
      // Constant weights give the convolutions sketches vectorized along the output channel:
      // the weights packed with that tile innermost, the accumulator tile with the channel as
      // its innermost dimension (lowering), strided windows read as broadcasts.
      auto x = placeholder<float>("X", {1, 3, 9, 9});
      auto wt = placeholder<float>("W", {16, 3, 3, 3});
      auto bias = placeholder<float>("bias", {16});
      auto w = loom_test::make_workload(
          "conv 3->16 9x9", {x, wt, bias},
          {ops::relu(ops::bias_add(ops::conv2d_nchw(x, wt, {.padding = {1, 1}}), bias, 1))}, 27);
      total += check_packed_samples(w, "W", 15, 30, false);
      auto w2 = loom_test::make_workload(
          "conv 3->16 9x9 stride 2", {x, wt},
          {ops::conv2d_nchw(x, wt, {.stride = {2, 2}, .padding = {1, 1}})}, 27);
      total += check_packed_samples(w2, "W", 16, 30, true);
    }
    MESSAGE(total << " layout-rewritten programs checked");
    CHECK(total >= 150);
  }
}

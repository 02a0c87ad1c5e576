// Transform steps (loom/sched/state.hpp) one at a time: each legal use is lowered, run by the
// loop-nest interpreter and compared with the DAG interpreter (exactly for integers, within the
// tolerance stated in support/random_schedule.hpp for float32), and its history replays -
// directly and through a JSON record - to the same state and loop nest. Each illegal use throws
// its loom.sched.E2xx error and leaves the state as it was.
#include <doctest/doctest.h>
#include <loom/ir/simplify.hpp>
#include <loom/lower/plan_buffers.hpp>
#include <loom/sched/record.hpp>

#include <functional>
#include <set>
#include <sstream>
#include <string>

#include "support/random_schedule.hpp"

using loom::user_error;
using loom::ir::MemoryScope;
using namespace loom::sched;
using namespace loom_test;

namespace {

std::string lowered_text(const State& s) {
  std::ostringstream os;
  os << loom::lower::lower(s);
  return os.str();
}

/// The end-to-end check of one schedule, then the replay checks.
void check_schedule(const workload& w, const State& s, uint32_t seed = 7) {
  INFO("workload ", w.name, ", schedule ", to_record(s.steps()));
  auto ref = make_reference(w, seed);
  auto r = run_and_compare(w, ref, s);
  CHECK_MESSAGE(r.ok, r.message);
  if (!r.ok) return;
  const std::string text = lowered_text(s);
  State again = replay(w.dag, s.steps());
  CHECK(again.to_string() == s.to_string());
  CHECK(lowered_text(again) == text);
  State from_json = replay(w.dag, from_record(to_record(s.steps())));
  CHECK(from_json.to_string() == s.to_string());
  CHECK(lowered_text(from_json) == text);
}

/// `edit` must throw loom::user_error whose message contains `id`, and leave `s` unchanged.
void check_rejected(State& s, const std::function<void(State&)>& edit, const char* id) {
  INFO("expected ", id);
  const std::string before = s.to_string();
  const size_t steps = s.steps().size();
  CHECK_THROWS_WITH_AS(edit(s), doctest::Contains(id), user_error);
  CHECK(s.to_string() == before);
  CHECK(s.steps().size() == steps);
}

int64_t leaf_extent(const State& s, const std::string& stage, int p) {
  return s.stage(stage).leaf(p).extent;
}

}  // namespace

TEST_SUITE("sched") {
  TEST_CASE("the initial state of every workload computes what the DAG computes") {
    for (const auto& w : {matmul(13, 17, 19), matmul_i32(13, 17, 19), matmul_bias_relu(13, 17, 19),
                          conv2d(3, 9, 9, 4, 3, 1, 2), depthwise(3, 7, 7), softmax(7, 13),
                          row_sum(9, 23), elementwise_chain(10, 15)})
      check_schedule(w, State(w.dag));
  }

  TEST_CASE("split by dividing and non-dividing factors, into several loops, and nested") {
    auto w = matmul(13, 17, 19);
    auto wi = matmul_i32(13, 17, 19);
    SUBCASE("13 by 4 leaves a guarded tail") {
      State s(w.dag);
      s.split("C", 0, {4});
      CHECK(leaf_extent(s, "C", 0) == 4);
      CHECK(leaf_extent(s, "C", 1) == 4);
      check_schedule(w, s);
    }
    SUBCASE("a reduction loop 19 by 8, exact on int32") {
      State s(wi.dag);
      s.split("C", 2, {8});
      CHECK(s.stage("C").leaf(2).kind == IterKind::Reduce);
      CHECK(leaf_extent(s, "C", 2) == 3);
      check_schedule(wi, s);
    }
    SUBCASE("17 into three loops [?, 4, 2]") {
      State s(wi.dag);
      s.split("C", 1, {4, 2});
      CHECK(s.stage("C").leaves.size() == 5);
      CHECK(leaf_extent(s, "C", 1) == 3);
      check_schedule(wi, s);
    }
    SUBCASE("127 by 8, spatial and reduction") {
      auto e = elementwise_chain(127, 3);
      State s(e.dag);
      s.split("c", 0, {8});
      CHECK(leaf_extent(s, "c", 0) == 16);
      check_schedule(e, s);
      auto r = row_sum(5, 127);
      State t(r.dag);
      t.split("R", 1, {8});
      check_schedule(r, t);
    }
    SUBCASE("nested splits of both parts of a split") {
      State s(wi.dag);
      s.split("C", 0, {4});  // i.0 (4), i.1 (4)
      s.split("C", 0, {3});  // i.0.0 (2), i.0.1 (3), i.1
      s.split("C", 2, {2});  // ..., i.1.0 (2), i.1.1 (2)
      CHECK(s.stage("C").leaves.size() == 6);
      check_schedule(wi, s);
      s.split("C", 5, {5, 2});  // k by a non-divisor and a divisor
      check_schedule(wi, s);
    }
    SUBCASE("lengths of 1, of the whole extent, and longer than the loop") {
      State s(w.dag);
      s.split("C", 0, {1});
      s.split("C", 2, {17});
      s.split("C", 4, {32});
      check_schedule(w, s);
    }
  }

  TEST_CASE("fuse spatial loops, parts of a split, and reduction loops") {
    SUBCASE("the two output loops of a matmul") {
      auto w = matmul_i32(13, 17, 19);
      State s(w.dag);
      s.fuse("C", {0, 1});
      CHECK(leaf_extent(s, "C", 0) == 13 * 17);
      check_schedule(w, s);
      s.split("C", 0, {8});  // a split of a fused loop, with a tail
      check_schedule(w, s);
    }
    SUBCASE("the inner part of a non-divisible split with the next loop") {
      auto w = matmul(13, 17, 19);
      State s(w.dag);
      s.split("C", 0, {4});
      s.fuse("C", {1, 2});
      check_schedule(w, s);
    }
    SUBCASE("three reduction loops of a conv, and a single loop (a no-op)") {
      auto w = conv2d(3, 9, 9, 4, 3, 1, 2);
      State s(w.dag);
      s.fuse("conv", {4, 5, 6});
      CHECK(s.stage("conv").leaf(4).kind == IterKind::Reduce);
      CHECK(leaf_extent(s, "conv", 4) == 27);
      s.fuse("conv", {0});
      check_schedule(w, s);
    }
  }

  TEST_CASE("reorder: reduction outermost, spatial loops swapped, full reversal") {
    auto w = matmul(13, 17, 19);
    for (auto order : {std::vector<int>{2, 0, 1}, {1, 0, 2}, {2, 1, 0}, {0, 2, 1}}) {
      State s(w.dag);
      s.reorder("C", order);
      check_schedule(w, s);
    }
    auto c = conv2d(3, 9, 9, 4, 3, 1, 2);
    State s(c.dag);
    s.reorder("conv", {6, 5, 4, 3, 2, 1, 0});
    s.reorder("relu", {3, 2, 1, 0});
    check_schedule(c, s);
  }

  TEST_CASE("annotations: parallel outer loops, vectorized inner loops, unrolled loops") {
    auto w = matmul(13, 17, 19);
    SUBCASE("parallel, vectorize over a non-divisible split's inner part, unroll") {
      State s(w.dag);
      s.split("C", 1, {8});  // j: 3 x 8 covering 17: the vectorized loop has a tail guard
      s.split("C", 3, {4});
      s.reorder("C", {0, 1, 3, 4, 2});
      s.annotate("C", 0, Annotation::Parallel);
      s.annotate("C", 3, Annotation::Unrolled);
      s.annotate("C", 4, Annotation::Vectorized);
      check_schedule(w, s);
    }
    SUBCASE("vectorize of a loop with loops inside runs serially") {
      State s(w.dag);
      s.annotate("C", 1, Annotation::Vectorized);
      check_schedule(w, s);
    }
    SUBCASE("unroll of a loop longer than the unroller expands stays a loop") {
      auto r = row_sum(3, 300);
      State s(r.dag);
      s.annotate("R", 1, Annotation::Unrolled);
      check_schedule(r, s);
      CHECK(lowered_text(s).find("unrolled") != std::string::npos);
    }
    SUBCASE("an annotation can be set again and cleared") {
      State s(w.dag);
      s.annotate("C", 0, Annotation::Parallel);
      s.annotate("C", 0, Annotation::Parallel);
      s.annotate("C", 0, Annotation::Serial);
      s.annotate("C", 0, Annotation::Unrolled);
      check_schedule(w, s);
    }
    SUBCASE("a vectorized element-wise stage with a tail, exact on int32") {
      auto e = elementwise_chain(10, 15);
      State s(e.dag);
      s.compute_inline("a");
      s.compute_inline("b");
      s.split("c", 1, {4});
      s.annotate("c", 2, Annotation::Vectorized);
      s.annotate("c", 0, Annotation::Parallel);
      check_schedule(e, s);
    }
  }

  TEST_CASE("a tiled stage computed inside one tile of its consumer loops over that tile only") {
    // The Ansor fusion shape: the copy C follows C.local's tiling down to level 2, and C.local
    // is computed there. Inside one tile of C, C.local's two outer tile loops (split for the
    // whole 64 x 64) need one iteration: lowering shrinks them, so no loop runs guarded
    // iterations that do nothing.
    auto w = matmul(64, 64, 8);
    State s(w.dag);
    const std::string local = s.cache_write("C", loom::ir::MemoryScope::Local);
    s.split(local, 0, {4, 2, 4});  // step 1: i -> 2 x 4 x 2 x 4
    s.split(local, 4, {2, 4, 4});  // step 2: j -> 2 x 2 x 4 x 4
    s.reorder(local, {0, 4, 1, 5, 2, 6, 3, 7, 8});
    s.follow_split("C", 0, 1, 2);  // C (the copy) follows the two outer levels
    s.follow_split("C", 3, 2, 2);
    s.reorder("C", {0, 3, 1, 4, 2, 5});
    s.compute_at(local, "C", 3);  // inside one (i.2 x j.2) = 8 x 16 tile
    const std::string text = lowered_text(s);
    CHECK(text.find("if (") == std::string::npos);
    CHECK(text.find("IfThenElse") == std::string::npos);
    check_schedule(w, s);
  }

  TEST_CASE("compute_at at every level of the consumer") {
    SUBCASE("matmul into a tiled relu") {
      auto w = matmul_bias_relu(13, 17, 19);
      for (int level = 0; level < 4; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.split("D", 0, {4});
        s.split("D", 2, {8});
        s.reorder("D", {0, 2, 1, 3});
        s.compute_at("C", "D", level);
        check_schedule(w, s);
      }
    }
    SUBCASE("padding into every loop of the conv, spatial and reduction") {
      auto w = conv2d(3, 9, 9, 4, 3, 1, 2);
      for (int level = 0; level < 7; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.compute_at("pad", "conv", level);
        check_schedule(w, s);
      }
    }
    SUBCASE("a chain: padding into the conv, the conv into the relu") {
      auto w = conv2d(3, 9, 9, 4, 3, 1, 2);
      for (int level = 0; level < 4; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.split("relu", 2, {2});
        s.compute_at("conv", "relu", level);
        s.compute_at("pad", "conv", 3 + level % 2);
        check_schedule(w, s);
      }
    }
    SUBCASE("depthwise padding with a halo, at tiles with tails") {
      auto w = depthwise(3, 7, 7);
      for (int level = 0; level < 6; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.split("dw", 2, {3});
        s.split("dw", 4, {4});
        s.compute_at("pad", "dw", level);
        check_schedule(w, s);
      }
    }
    SUBCASE("at an outer loop of the consumer's own attach target (packing)") {
      auto w = matmul_bias_relu(13, 17, 19);
      for (int level = 0; level < 2; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.cache_read("B", MemoryScope::Local, {"C"});
        s.split("D", 0, {4});
        s.split("D", 2, {8});
        s.reorder("D", {0, 2, 1, 3});
        s.compute_at("C", "D", 1);
        s.compute_at("B.local", "D", level);  // B.local is read by C, which is inside D
        check_schedule(w, s);
      }
    }
    SUBCASE("softmax: row reductions into the row loop of their consumer") {
      auto w = softmax(7, 13);
      State s(w.dag);
      s.compute_at("rsum", "softmax", 0);
      check_schedule(w, s);
      s.compute_inline("exp");  // exp's consumers become rsum and softmax
      check_schedule(w, s);
      State t(w.dag);
      t.compute_at("rmax", "exp", 0);  // exp is read by rsum and softmax; rmax only by exp
      t.compute_at("rsum", "softmax", 1);
      check_schedule(w, t);
    }
  }

  TEST_CASE("an attached stage follows its loop through later splits and fuses") {
    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.compute_at("C", "D", 1);
    s.split("D", 1, {4});  // C moves to the inner part, j.1
    CHECK(s.stage("C").attach_iter == s.stage("D").leaves[2]);
    check_schedule(w, s);
    s.fuse("D", {1, 2});  // and to the fused loop
    CHECK(s.stage("C").attach_iter == s.stage("D").leaves[1]);
    check_schedule(w, s);
    s.compute_root("C");
    CHECK(s.stage("C").location == ComputeLocation::Root);
    check_schedule(w, s);
  }

  TEST_CASE("compute_inline of element-wise stages, and compute_root to undo it") {
    auto e = elementwise_chain(10, 15);
    State s(e.dag);
    s.compute_inline("a");
    check_schedule(e, s);
    s.compute_inline("b");
    check_schedule(e, s);
    s.compute_root("a");
    check_schedule(e, s);
    auto c = conv2d(3, 9, 9, 4, 3, 1, 2);
    State t(c.dag);
    t.compute_inline("pad");
    t.split("conv", 3, {2});
    check_schedule(c, t);
    auto sm = softmax(7, 13);
    State u(sm.dag);
    u.compute_inline("exp");
    check_schedule(sm, u);
  }

  TEST_CASE("cache_read into local memory, at the root and inside the reader") {
    auto w = matmul(13, 17, 19);
    for (int level = -1; level < 3; ++level) {
      CAPTURE(level);
      State s(w.dag);
      std::string a = s.cache_read("A", MemoryScope::Local, {"C"});
      CHECK(a == "A.local");
      CHECK(s.stage(a).scope == MemoryScope::Local);
      s.split("C", 2, {4});
      if (level >= 0) s.compute_at(a, "C", level);
      check_schedule(w, s);
    }
    SUBCASE("of a computed stage, the conv's padding") {
      auto c = conv2d(3, 9, 9, 4, 3, 1, 2);
      State s(c.dag);
      s.cache_read("pad", MemoryScope::Local, {"conv"});
      s.compute_at("pad.local", "conv", 3);
      s.cache_read("W", MemoryScope::Local, {"conv"});
      s.compute_at("W.local", "conv", 1);
      check_schedule(c, s);
    }
  }

  TEST_CASE("cache_write, with the local stage computed under its copy (the CPU tile)") {
    SUBCASE("matmul + bias + relu, as the multi-level tiling sketch builds it") {
      auto w = matmul_bias_relu(13, 17, 19);
      State s(w.dag);
      std::string cl = s.cache_write("C", MemoryScope::Local);
      CHECK(cl == "C.local");
      s.split("D", 0, {4});
      s.split("D", 2, {8});
      s.reorder("D", {0, 2, 1, 3});
      s.compute_inline("C");
      s.compute_at(cl, "D", 1);
      s.split(cl, 1, {4});
      s.reorder(cl, {0, 1, 3, 2});
      s.annotate(cl, 3, Annotation::Vectorized);
      s.annotate("D", 0, Annotation::Parallel);
      s.annotate("D", 3, Annotation::Vectorized);
      check_schedule(w, s);
    }
    SUBCASE("an int32 matmul whose output is a copy of its local tile") {
      auto w = matmul_i32(13, 17, 19);
      for (int level = 0; level < 3; ++level) {
        CAPTURE(level);
        State s(w.dag);
        s.cache_write("C", MemoryScope::Local);
        s.split("C", 1, {4});
        s.compute_at("C.local", "C", level);
        check_schedule(w, s);
      }
    }
    SUBCASE("a conv") {
      auto c = conv2d(3, 9, 9, 4, 3, 1, 2);
      State s(c.dag);
      s.cache_write("conv", MemoryScope::Local);
      s.compute_at("conv.local", "conv", 2);
      s.compute_at("pad", "conv.local", 4);
      check_schedule(c, s);
      // attached_at and computed_inside follow the compute_at chain pad -> conv.local -> conv.
      const Stage& conv = s.stage("conv");
      const Stage& local = s.stage("conv.local");
      const Stage& pad = s.stage("pad");
      const std::vector<int> at_conv{s.stage_index("conv.local")}, at_local{s.stage_index("pad")};
      CHECK(s.attached_at("conv", conv.leaves[2]) == at_conv);
      CHECK(s.attached_at("conv.local", local.leaves[4]) == at_local);
      CHECK(s.attached_at("conv", conv.leaves[1]).empty());
      CHECK(s.attached_at("conv.local", local.leaves[3]).empty());
      CHECK(s.computed_inside(pad, "conv.local"));
      CHECK(s.computed_inside(pad, "conv"));  // through conv.local
      CHECK(s.computed_inside(local, "conv"));
      CHECK_FALSE(s.computed_inside(conv, "conv.local"));
      CHECK_FALSE(s.computed_inside(local, "pad"));
      CHECK_FALSE(s.computed_inside(s.stage("W"), "conv"));  // a placeholder at the root
    }
  }

  TEST_CASE("rfactor of a split reduction, with the partial sums parallel or computed inside") {
    SUBCASE("a row sum: the inner part of k becomes an axis, then its outer part") {
      auto w = row_sum(9, 23);
      for (int part = 1; part <= 2; ++part) {
        for (int axis = 0; axis <= 1; ++axis) {
          CAPTURE(part);
          CAPTURE(axis);
          State s(w.dag);
          s.split("R", 1, {4});  // k: 6 x 4 covering 23, a tail
          std::string rf = s.rfactor("R", part, axis);
          CHECK(rf == "R.rf");
          CHECK(s.stage(rf).op.rank() == 2);
          check_schedule(w, s);
          s.annotate(rf, axis, Annotation::Parallel);
          check_schedule(w, s);
        }
      }
    }
    SUBCASE("an int32 matmul, exactly, with the partial products computed inside the sum") {
      auto w = matmul_i32(13, 17, 19);
      State s(w.dag);
      s.split("C", 2, {5});
      s.rfactor("C", 3, 2);
      s.compute_at("C.rf", "C", 1);
      check_schedule(w, s);
    }
    SUBCASE("a conditional sum: the condition is read only inside the tail") {
      // Found by the random programs (tests/jit/test_random_programs.cpp): the partial sums'
      // condition was `k < 6 && B[5 - k] > 0`, whose operands have no evaluation order, so the
      // tail read B[-1]. The own condition now sits behind a lazy select on the tail's.
      auto B = loom::placeholder<float>("B", {6});
      auto k = loom::reduce_axis(6, "k");
      auto C = loom::compute("C", {2}, [&](loom::Var i) {
        return loom::sum(loom::cast<float>(i + k), k, B(5 - k) > 0.0f);
      });
      auto w = make_workload("conditional sum", {B}, {C}, 6);
      for (int part = 1; part <= 2; ++part) {
        CAPTURE(part);
        State s(w.dag);
        s.split("C", 1, {4});  // k: 2 x 4 covering 6, a tail
        s.rfactor("C", part, 1);
        check_schedule(w, s);
      }
    }
    SUBCASE("of a conv's fused reduction loops") {
      auto w = conv2d(3, 9, 9, 4, 3, 1, 2);
      State s(w.dag);
      s.fuse("conv", {4, 5, 6});
      s.split("conv", 4, {4});
      s.rfactor("conv", 5, 0);
      check_schedule(w, s);
    }
  }

  TEST_CASE("pragma auto_unroll_max_step unrolls the innermost loops within the budget") {
    auto w = matmul(5, 6, 7);
    State s(w.dag);
    s.split("C", 2, {3});
    const std::string plain = lowered_text(s);
    s.pragma_unroll("C", 0, 16);
    CHECK(s.stage("C").auto_unroll_max_step == 16);
    check_schedule(w, s);
    // k (7) as 3 x 3 fits in 16 steps: no loop over k remains.
    CHECK(lowered_text(s) != plain);
    CHECK(lowered_text(s).find("for (k") == std::string::npos);
    s.pragma_unroll("C", 0, 0);
    CHECK(lowered_text(s) == plain);
  }

  TEST_CASE("a padding stage loses its condition: each loop peels its own border iterations") {
    // The condition `h >= 1 && h < H + 1 && w >= 1 && w < W + 1` has two conjuncts per loop:
    // the h loop peels its first and last row (where the whole condition is false) and the w
    // loop inside the remaining rows its first and last column, so no iteration selects.
    auto w = depthwise(3, 6, 10);
    State s(w.dag);
    const std::string text = lowered_text(s);
    CHECK(text.find("if_then_else") == std::string::npos);
    check_schedule(w, s);
    // The same inside a tile of the consumer: the tile's position bounds the conjuncts of the
    // outer loops, and the ones the tile's loops decide are peeled there.
    State t(w.dag);
    t.split("dw", 2, {3});
    t.split("dw", 4, {5});
    t.reorder("dw", {0, 1, 2, 4, 3, 5, 6, 7});
    t.compute_at("pad", "dw", 3);
    check_schedule(w, t);
  }

  TEST_CASE("storage_align pads the row stride of an attached stage's buffer") {
    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.split("D", 0, {4});
    s.compute_at("C", "D", 0);  // C's region: 4 x 17
    s.storage_align("C", 0, 8, 3);
    check_schedule(w, s);
    // The row stride 17 becomes 19 (19 % 8 == 3): 4 rows of 19.
    CHECK(lowered_text(s).find("allocate C: float32[76]") != std::string::npos);
    // On a stage computed at the root the alignment is recorded; lowering keeps the buffer dense.
    State t(w.dag);
    t.storage_align("C", 0, 4, 0);
    CHECK(t.stage("C").storage_aligns.size() == 1);
    check_schedule(w, t);
  }

  TEST_CASE("storage_permute stores an axis lane-major, rounded up to whole blocks") {
    // The permutation itself: 8 lanes of 4 units each; lane l's unit i goes to i * 8 + l.
    loom::lower::StageBuffer b;
    b.min = {loom::ir::Expr(int64_t{0})};
    b.strides = {1};
    b.permutes = {{0, 8, 4, 1}};
    std::vector<int> seen(64, 0);
    for (int64_t x = 0; x < 64; ++x) {
      const loom::ir::Expr at = loom::ir::simplify(b.flat_index({loom::ir::Expr(x)}));
      REQUIRE(loom::ir::as_const_int(at) != nullptr);
      const int64_t stored = *loom::ir::as_const_int(at);
      const int64_t block = x / 32, lane = x % 32 / 4, i = x % 4;
      CHECK(stored == block * 32 + i * 8 + lane);
      ++seen[static_cast<size_t>(stored)];
    }
    for (int n : seen) CHECK(n == 1);
    // Units of 2 elements move together: 4 lanes of 2 units. Element 5 is element 1 of unit 2
    // (lane 1's first), stored as unit 1; element 6 starts unit 3 (lane 1's second), stored as
    // unit 2 * 4 / 2 + 1 = 5.
    b.permutes = {{0, 4, 2, 2}};
    auto stored_at = [&](int64_t x) {
      return *loom::ir::as_const_int(loom::ir::simplify(b.flat_index({loom::ir::Expr(x)})));
    };
    CHECK(stored_at(5) == 1 * 2 + 1);
    CHECK(stored_at(6) == 5 * 2);

    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.split("D", 0, {4});
    s.compute_at("C", "D", 0);  // C's region: 4 x 17
    s.storage_permute("C", 1, 4, 2, 2);
    check_schedule(w, s);
    // 17 columns take two blocks of 16.
    CHECK(lowered_text(s).find("allocate C: float32[4, 32]") != std::string::npos);
    // With storage_align too, and on a stage computed at the root.
    s.storage_align("C", 0, 8, 3);
    check_schedule(w, s);
    State t(w.dag);
    t.storage_permute("C", 0, 2, 3, 1);
    CHECK(t.stage("C").storage_permutes.size() == 1);
    check_schedule(w, t);
  }

  TEST_CASE("storage_swizzle permutes the 16-byte units of each 8 rows, rounded to whole rows") {
    // Rows of 64 bytes, 16 floats: unit u of row r goes to unit u ^ ((r / 2) mod 4); every
    // element lands once, units stay whole, and one unit of 8 consecutive rows takes 8
    // different bank groups (16-byte units mod 8).
    loom::lower::StageBuffer b;
    b.buffer = loom::ir::make_buffer("S", loom::ir::DType::f32(), {256}, MemoryScope::Shared);
    b.min = {loom::ir::Expr(int64_t{0}), loom::ir::Expr(int64_t{0})};
    b.strides = {16, 1};
    b.swizzle = 64;
    std::vector<int> seen(256, 0);
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        const loom::ir::Expr at =
            loom::ir::simplify(b.flat_index({loom::ir::Expr(r), loom::ir::Expr(c)}));
        REQUIRE(loom::ir::as_const_int(at) != nullptr);
        const int64_t stored = *loom::ir::as_const_int(at);
        CHECK(stored == r * 16 + ((c / 4) ^ (r / 2 % 4)) * 4 + c % 4);
        ++seen[static_cast<size_t>(stored)];
      }
    for (int n : seen) CHECK(n == 1);
    for (int64_t unit = 0; unit < 4; ++unit) {
      std::set<int64_t> groups;
      for (int64_t r = 0; r < 8; ++r)
        groups.insert(*loom::ir::as_const_int(loom::ir::simplify(
                          b.flat_index({loom::ir::Expr(r), loom::ir::Expr(unit * 4)}))) /
                      4 % 8);
      CHECK(groups.size() == 8);
    }

    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.split("D", 0, {4});
    s.compute_at("C", "D", 0);  // C's region: 4 x 17 floats, 272 bytes
    s.storage_swizzle("C", 128);
    check_schedule(w, s);
    // Rounded up to whole rows of 128 bytes: 96 floats.
    CHECK(lowered_text(s).find("allocate C: float32[96]") != std::string::npos);
    // With the other layout steps, and on a stage computed at the root.
    s.storage_permute("C", 1, 4, 2, 2);
    s.storage_align("C", 0, 8, 3);
    check_schedule(w, s);
    State t(w.dag);
    t.storage_swizzle("C", 32);
    CHECK(t.stage("C").storage_swizzle == 32);
    check_schedule(w, t);
  }

  TEST_CASE("storage_chunk stores rows longer than a chunk chunk-major, rounded to whole chunks") {
    // 4 rows of 40 floats in chunks of 32 bytes (8 floats), 5 chunks: element (r, c) at
    // (c / 8) 4 8 + r 8 + c % 8; every element once.
    loom::lower::StageBuffer b;
    b.buffer = loom::ir::make_buffer("S", loom::ir::DType::f32(), {160}, MemoryScope::Shared);
    b.min = {loom::ir::Expr(int64_t{0}), loom::ir::Expr(int64_t{0})};
    b.strides = {40, 1};
    b.chunk = 8;
    b.chunk_rows = 4;
    std::vector<int> seen(160, 0);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 40; ++c) {
        const loom::ir::Expr at =
            loom::ir::simplify(b.flat_index({loom::ir::Expr(r), loom::ir::Expr(c)}));
        REQUIRE(loom::ir::as_const_int(at) != nullptr);
        const int64_t stored = *loom::ir::as_const_int(at);
        CHECK(stored == (c / 8) * 32 + r * 8 + c % 8);
        ++seen[static_cast<size_t>(stored)];
      }
    for (int n : seen) CHECK(n == 1);

    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.split("D", 0, {4});
    s.compute_at("C", "D", 0);  // C's region: 4 x 17 floats
    s.storage_chunk("C", 32);
    check_schedule(w, s);
    // 17 columns rounded up to 3 chunks of 8: 4 x 24 floats.
    CHECK(lowered_text(s).find("allocate C: float32[96]") != std::string::npos);
    // With a swizzle of the chunks' rows and a permuted innermost axis; at the root too.
    s.storage_permute("C", 1, 4, 2, 2);
    s.storage_swizzle("C", 32);
    check_schedule(w, s);
    State t(w.dag);
    t.storage_chunk("C", 64);
    CHECK(t.stage("C").storage_chunk == 64);
    check_schedule(w, t);
    // A row no longer than a chunk stays as it is.
    State u(w.dag);
    u.split("D", 0, {4});
    u.compute_at("C", "D", 0);
    u.storage_chunk("C", 128);
    CHECK(lowered_text(u).find("allocate C: float32[4, 17]") != std::string::npos);
    check_schedule(w, u);
  }

  TEST_CASE("follow_split and follow_fused_split tile like their source split") {
    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.cache_write("C", MemoryScope::Local);  // step 0
    s.split("D", 1, {4, 2});                 // step 1: j -> j.0, j.1 (4), j.2 (2)
    s.follow_split("C", 1, 1, 2);            // C's j like step 1: [4, 2]
    CHECK(s.stage("C").leaves.size() == 4);
    CHECK(leaf_extent(s, "C", 2) == 4);
    CHECK(leaf_extent(s, "C", 3) == 2);
    s.follow_split("C.local", 0, 1, 1);  // i by the product of all lengths: [8]
    CHECK(leaf_extent(s, "C.local", 1) == 8);
    s.follow_fused_split("C.local", 2, {1}, 0, true);  // j by level 0 of step 1 (4) as factor
    CHECK(leaf_extent(s, "C.local", 3) == 4);
    // k (19) with 2 * 2 = 4 outer parts: inner length 5, outer loop ceil(19 / 5) = 4.
    s.follow_fused_split("C.local", 4, {1, 1}, 1, false);
    CHECK(leaf_extent(s, "C.local", 4) == 4);
    CHECK(leaf_extent(s, "C.local", 5) == 5);
    s.compute_at("C.local", "C", 1);
    check_schedule(w, s);
  }

  TEST_CASE("illegal steps throw their error id and leave the state unchanged") {
    auto w = matmul_bias_relu(13, 17, 19);
    State s(w.dag);
    s.split("D", 0, {4});
    s.fuse("C", {0, 1});  // C: i0@i1, k
    SUBCASE("unknown stages") {
      check_rejected(s, [](State& x) { x.split("nope", 0, {2}); }, "[loom.sched.E201]");
      check_rejected(s, [](State& x) { x.compute_at("C", "nope", 0); }, "[loom.sched.E201]");
      check_rejected(
          s, [](State& x) { x.cache_read("A", MemoryScope::Local, {"nope"}); },
          "[loom.sched.E201]");
      check_rejected(s, [](State& x) { x.compute_inline("nope"); }, "[loom.sched.E201]");
      CHECK_THROWS_WITH_AS(s.stage("nope"), doctest::Contains("[loom.sched.E201]"), user_error);
    }
    SUBCASE("placeholders have no loops, inlined stages have none left") {
      check_rejected(s, [](State& x) { x.split("A", 0, {2}); }, "[loom.sched.E202]");
      check_rejected(s, [](State& x) { x.compute_at("A", "C", 0); }, "[loom.sched.E202]");
      check_rejected(s, [](State& x) { x.compute_inline("bias"); }, "[loom.sched.E202]");
      auto e = elementwise_chain(4, 4);
      State t(e.dag);
      t.compute_inline("a");
      check_rejected(t, [](State& x) { x.split("a", 0, {2}); }, "[loom.sched.E203]");
      check_rejected(
          t, [](State& x) { x.cache_read("a", MemoryScope::Local, {"b"}); }, "[loom.sched.E203]");
    }
    SUBCASE("loop positions out of range (a loop fused away)") {
      check_rejected(s, [](State& x) { x.split("C", 2, {2}); }, "[loom.sched.E204]");
      check_rejected(s, [](State& x) { x.split("C", -1, {2}); }, "[loom.sched.E204]");
      check_rejected(
          s, [](State& x) { x.annotate("C", 5, Annotation::Unrolled); }, "[loom.sched.E204]");
      check_rejected(s, [](State& x) { x.compute_at("C", "D", 3); }, "[loom.sched.E204]");
      check_rejected(s, [](State& x) { x.pragma_unroll("C", 2, 4); }, "[loom.sched.E204]");
      check_rejected(s, [](State& x) { x.fuse("C", {1, 2}); }, "[loom.sched.E204]");
    }
    SUBCASE("split lengths: none, zero, negative, of an annotated loop, another extent") {
      check_rejected(s, [](State& x) { x.split("C", 0, {}); }, "[loom.sched.E205]");
      check_rejected(s, [](State& x) { x.split("C", 0, {0}); }, "[loom.sched.E207]");
      check_rejected(s, [](State& x) { x.split("C", 0, {4, -2}); }, "[loom.sched.E207]");
      s.annotate("D", 0, Annotation::Parallel);
      check_rejected(s, [](State& x) { x.split("D", 0, {2}); }, "[loom.sched.E206]");
      check_rejected(s, [](State& x) { x.apply(SplitStep{"D", 2, 99, {4}}); }, "[loom.sched.E208]");
    }
    SUBCASE("follow_split of a step that is not a split, follow lengths out of range") {
      check_rejected(s, [](State& x) { x.follow_split("C", 0, 1, 1); }, "[loom.sched.E209]");
      check_rejected(s, [](State& x) { x.follow_split("C", 0, 7, 1); }, "[loom.sched.E209]");
      check_rejected(s, [](State& x) { x.follow_split("C", 0, 0, 2); }, "[loom.sched.E210]");
      check_rejected(s, [](State& x) { x.follow_split("C", 0, 0, 0); }, "[loom.sched.E210]");
      check_rejected(
          s, [](State& x) { x.follow_fused_split("C", 0, {0}, 1, true); }, "[loom.sched.E211]");
      check_rejected(
          s, [](State& x) { x.follow_fused_split("C", 0, {1}, 0, true); }, "[loom.sched.E209]");
    }
    SUBCASE("fuse: nothing, non-consecutive loops, annotated loops, spatial with reduction") {
      auto m = matmul(13, 17, 19);
      State t(m.dag);
      check_rejected(t, [](State& x) { x.fuse("C", {}); }, "[loom.sched.E212]");
      check_rejected(t, [](State& x) { x.fuse("C", {0, 2}); }, "[loom.sched.E213]");
      check_rejected(t, [](State& x) { x.fuse("C", {1, 0}); }, "[loom.sched.E213]");
      check_rejected(t, [](State& x) { x.fuse("C", {1, 2}); }, "[loom.sched.E236]");
      t.annotate("C", 1, Annotation::Unrolled);
      check_rejected(t, [](State& x) { x.fuse("C", {0, 1}); }, "[loom.sched.E214]");
    }
    SUBCASE("reorder that is not a permutation of the loops") {
      check_rejected(s, [](State& x) { x.reorder("D", {0, 1}); }, "[loom.sched.E215]");
      check_rejected(s, [](State& x) { x.reorder("D", {0, 1, 1}); }, "[loom.sched.E215]");
      check_rejected(s, [](State& x) { x.reorder("D", {0, 1, 3}); }, "[loom.sched.E215]");
      check_rejected(s, [](State& x) { x.reorder("D", {0, 1, 2, 3}); }, "[loom.sched.E215]");
    }
    SUBCASE("annotations: conflicting, parallel reduction, vectorize of an unknown extent") {
      s.annotate("D", 0, Annotation::Parallel);
      check_rejected(
          s, [](State& x) { x.annotate("D", 0, Annotation::Vectorized); }, "[loom.sched.E216]");
      check_rejected(
          s, [](State& x) { x.annotate("C", 1, Annotation::Parallel); }, "[loom.sched.E217]");
      s.apply(SplitStep{"D", 2, 17, {std::nullopt}});
      check_rejected(
          s, [](State& x) { x.annotate("D", 3, Annotation::Vectorized); }, "[loom.sched.E218]");
      check_rejected(
          s, [](State& x) { x.annotate("D", 3, Annotation::Unrolled); }, "[loom.sched.E218]");
    }
    SUBCASE("compute_at: of an output, into a non-consumer, of a stage with two consumers") {
      check_rejected(s, [](State& x) { x.compute_at("D", "C", 0); }, "[loom.sched.E220]");
      auto c = conv2d(3, 9, 9, 4, 3, 1, 2);
      State t(c.dag);
      check_rejected(t, [](State& x) { x.compute_at("pad", "relu", 0); }, "[loom.sched.E221]");
      check_rejected(t, [](State& x) { x.compute_at("conv", "pad", 0); }, "[loom.sched.E221]");
      auto sm = softmax(7, 13);
      State u(sm.dag);
      check_rejected(u, [](State& x) { x.compute_at("exp", "softmax", 0); }, "[loom.sched.E222]");
    }
    SUBCASE("compute_inline: of an output, of a reduction, of a stage with stages inside") {
      check_rejected(s, [](State& x) { x.compute_inline("D"); }, "[loom.sched.E224]");
      check_rejected(s, [](State& x) { x.compute_inline("C"); }, "[loom.sched.E225]");
      auto sm = softmax(7, 13);
      State t(sm.dag);
      t.compute_at("rmax", "exp", 0);
      check_rejected(t, [](State& x) { x.compute_inline("exp"); }, "[loom.sched.E226]");
    }
    SUBCASE("cache_read: no readers, a stage that does not read it, twice") {
      check_rejected(
          s, [](State& x) { x.cache_read("A", MemoryScope::Local, {}); }, "[loom.sched.E228]");
      check_rejected(
          s, [](State& x) { x.cache_read("A", MemoryScope::Local, {"D"}); }, "[loom.sched.E229]");
      s.cache_read("bias", MemoryScope::Local, {"D"});
      check_rejected(
          s, [](State& x) { x.cache_read("bias", MemoryScope::Local, {"bias.local"}); },
          "[loom.sched.E227]");
    }
    SUBCASE("cache_write: of a stage with a stage computed inside it") {
      auto e = elementwise_chain(4, 4);
      State t(e.dag);
      t.compute_at("b", "c", 1);
      check_rejected(
          t, [](State& x) { x.cache_write("c", MemoryScope::Local); }, "[loom.sched.E237]");
    }
    SUBCASE("cache_write: after a split, a fuse, a reorder; twice") {
      check_rejected(
          s, [](State& x) { x.cache_write("D", MemoryScope::Local); }, "[loom.sched.E232]");
      check_rejected(
          s, [](State& x) { x.cache_write("C", MemoryScope::Local); }, "[loom.sched.E232]");
      auto m = matmul(13, 17, 19);
      State t(m.dag);
      t.reorder("C", {1, 0, 2});
      check_rejected(
          t, [](State& x) { x.cache_write("C", MemoryScope::Local); }, "[loom.sched.E232]");
      State u(m.dag);
      u.cache_write("C", MemoryScope::Local);
      check_rejected(
          u, [](State& x) { x.cache_write("C", MemoryScope::Local); }, "[loom.sched.E227]");
    }
    SUBCASE("rfactor: of a non-reduction, of a spatial loop, after spatial changes, bad axis") {
      check_rejected(s, [](State& x) { x.rfactor("D", 0, 0); }, "[loom.sched.E240]");
      auto r = row_sum(9, 23);
      State t(r.dag);
      t.split("R", 1, {4});
      check_rejected(t, [](State& x) { x.rfactor("R", 0, 0); }, "[loom.sched.E241]");
      check_rejected(t, [](State& x) { x.rfactor("R", 2, 2); }, "[loom.sched.E243]");
      check_rejected(t, [](State& x) { x.rfactor("R", 2, -1); }, "[loom.sched.E243]");
      t.rfactor("R", 2, 1);
      check_rejected(t, [](State& x) { x.rfactor("R", 1, 1); }, "[loom.sched.E227]");
      State u(r.dag);
      u.split("R", 0, {3});
      check_rejected(u, [](State& x) { x.rfactor("R", 2, 0); }, "[loom.sched.E242]");
      auto m = matmul_bias_relu(13, 17, 19);
      State v(m.dag);
      v.compute_at("C", "D", 0);
      check_rejected(v, [](State& x) { x.rfactor("C", 2, 0); }, "[loom.sched.E242]");
      State y(m.dag);
      y.cache_read("A", MemoryScope::Local, {"C"});
      y.split("C", 2, {4});
      y.compute_at("A.local", "C", 3);
      check_rejected(y, [](State& x) { x.rfactor("C", 3, 0); }, "[loom.sched.E244]");
    }
    SUBCASE("pragma and storage_align arguments") {
      check_rejected(s, [](State& x) { x.pragma_unroll("D", 0, -1); }, "[loom.sched.E233]");
      check_rejected(s, [](State& x) { x.storage_align("D", 1, 8, 0); }, "[loom.sched.E234]");
      check_rejected(s, [](State& x) { x.storage_align("D", -1, 8, 0); }, "[loom.sched.E234]");
      check_rejected(s, [](State& x) { x.storage_align("D", 0, 0, 0); }, "[loom.sched.E235]");
      check_rejected(s, [](State& x) { x.storage_align("D", 0, 8, 8); }, "[loom.sched.E235]");
      check_rejected(s, [](State& x) { x.storage_align("D", 0, 8, -1); }, "[loom.sched.E235]");
      check_rejected(s, [](State& x) { x.storage_permute("D", 2, 8, 2, 1); }, "[loom.sched.E246]");
      check_rejected(s, [](State& x) { x.storage_permute("D", 0, 0, 2, 1); }, "[loom.sched.E247]");
      check_rejected(s, [](State& x) { x.storage_permute("D", 0, 8, 2, -1); }, "[loom.sched.E247]");
      State twice = s;
      twice.storage_permute("D", 0, 8, 2, 1);
      check_rejected(
          twice, [](State& x) { x.storage_permute("D", 0, 4, 2, 1); }, "[loom.sched.E248]");
      check_rejected(s, [](State& x) { x.storage_swizzle("D", 48); }, "[loom.sched.E265]");
      check_rejected(s, [](State& x) { x.storage_swizzle("D", 256); }, "[loom.sched.E265]");
      twice.storage_swizzle("D", 64);
      check_rejected(twice, [](State& x) { x.storage_swizzle("D", 64); }, "[loom.sched.E266]");
      check_rejected(s, [](State& x) { x.storage_chunk("D", 256); }, "[loom.sched.E267]");
      State chunked = s;
      chunked.storage_chunk("D", 64);
      check_rejected(chunked, [](State& x) { x.storage_chunk("D", 64); }, "[loom.sched.E268]");
      check_rejected(chunked, [](State& x) { x.storage_align("D", 0, 8, 1); }, "[loom.sched.E268]");
      State aligned = s;
      aligned.storage_align("D", 0, 8, 1);
      check_rejected(aligned, [](State& x) { x.storage_chunk("D", 64); }, "[loom.sched.E268]");
    }
    SUBCASE("names of annotations and scopes") {
      CHECK(parse_annotation("vectorize") == Annotation::Vectorized);
      CHECK(parse_scope("shared") == MemoryScope::Shared);
      CHECK_THROWS_WITH_AS(parse_annotation("fast"), doctest::Contains("[loom.sched.E230]"),
                           user_error);
      CHECK_THROWS_WITH_AS(parse_scope("texture"), doctest::Contains("[loom.sched.E231]"),
                           user_error);
    }
  }

  TEST_CASE("lowering a sketch (a split length left unset) is rejected with E410") {
    auto w = matmul(13, 17, 19);
    State s(w.dag);
    s.apply(SplitStep{"C", 0, 13, {std::nullopt, 2}});
    CHECK(leaf_extent(s, "C", 0) == -1);
    CHECK(leaf_extent(s, "C", 1) == -1);
    CHECK_THROWS_WITH_AS(loom::lower::lower(s), doctest::Contains("[loom.lower.E410]"), user_error);
    // Filling the length (replaying the history with it set) makes it lowerable.
    auto steps = s.steps();
    std::get<SplitStep>(steps[0]).lengths[0] = 3;
    check_schedule(w, replay(w.dag, steps));
  }

  // Was a bug: cache_read redirected its readers' reads without redoing compute_at's checks and
  // lowering failed with an internal error. cache_read of a stage computed inside another is now
  // refused (E238), like cache_write (E237).
  TEST_CASE("cache_read by the stage a producer is computed inside is rejected or lowers") {
    using namespace loom;
    auto X = placeholder<float>("X", {4, 8});
    auto a = compute("a", {4, 8}, [&](Var i, Var j) { return X(i, j) + 1.0f; });
    auto b = compute("b", {4, 8}, [&](Var i, Var j) { return a(i, j) * 2.0f; });
    workload w = make_workload("chain", {X}, {b}, 1);
    State s(w.dag);
    s.compute_at("a", "b", 0);
    try {
      s.cache_read("a", MemoryScope::Local, {"b"});  // b now reads a.local; a stays inside b
    } catch (const user_error&) {
      return;
    }
    try {
      (void)loom::lower::lower(s);
    } catch (const user_error& e) {
      CHECK(std::string(e.what()).find("[loom.lower.E41") == 0);
      return;
    }
    check_schedule(w, s);
  }

  // Was a bug: a vectorized loop inside another vectorized loop whose body broadcasts a value of
  // the outer loop failed with "[loom.internal] ... Broadcast of 8 lanes over float32x4"; the
  // outer loop now falls back to a serial loop.
  TEST_CASE("nested vectorized loops lower") {
    using namespace loom;
    auto X = placeholder<float>("X", {4, 8});
    auto b = placeholder<float>("b", {4});
    auto Y = compute("Y", {4, 8}, [&](Var i, Var j) { return X(i, j) + b(i); });
    workload w = make_workload("nested_vectorize", {X, b}, {Y}, 1);
    State s(w.dag);
    s.annotate("Y", 0, Annotation::Vectorized);
    s.annotate("Y", 1, Annotation::Vectorized);
    check_schedule(w, s);
  }

  // Was a bug: a placeholder named as a reader was visited before the check that it is not a
  // placeholder, and the step crashed instead of throwing E229.
  TEST_CASE("cache_read with an input named as its reader is rejected") {
    auto w = matmul(4, 5, 6);
    State s(w.dag);
    check_rejected(
        s, [](State& x) { x.cache_read("A", MemoryScope::Local, {"B"}); }, "[loom.sched.E229]");
  }

  // Ansor's softmax row: exp is read by the row sum and by the division; with the sum computed
  // inside the division's row loop, exp can be computed there too, one row at a time, for both.
  TEST_CASE("a stage read by two stages is computed inside the loop that holds both") {
    auto w = softmax(7, 13);
    State s(w.dag);
    s.compute_at("rsum", "softmax", 0);
    s.compute_at("rmax", "exp", 0);
    s.compute_at("exp", "softmax", 0);
    const std::string text = lowered_text(s);
    CHECK(text.find("exp: float32[1, 13]") != std::string::npos);  // one row, not the tensor
    check_schedule(w, s);
    // Its readers split between two loops of the target: only the outer one can hold it.
    State t(w.dag);
    t.split("softmax", 1, {4});
    t.compute_at("rsum", "softmax", 0);
    try {
      t.compute_at("exp", "softmax", 1);
    } catch (const user_error& e) {
      CHECK(std::string(e.what()).find("[loom.sched.E2") == 0);
      return;
    }
    CHECK_THROWS_WITH_AS(loom::lower::lower(t), doctest::Contains("[loom.lower.E412]"), user_error);
  }

  // compute_at at an ancestor of the consumer accepts a loop deeper than the one the consumer is
  // computed at (also when the consumer moves outward later); lowering rejects such a state.
  TEST_CASE("a stage computed deeper than its consumer inside their common target is rejected") {
    auto w = matmul(4, 5, 6);
    State s(w.dag);
    s.cache_write("C", MemoryScope::Local);
    s.cache_read("B", MemoryScope::Local, {"C.local"});
    s.compute_at("C.local", "C", 0);
    try {
      s.compute_at("B.local", "C", 1);  // C.local, B.local's reader, is at C's loop 0
    } catch (const user_error& e) {
      CHECK(std::string(e.what()).find("[loom.sched.E2") == 0);
      return;
    }
    CHECK_THROWS_WITH_AS(loom::lower::lower(s), doctest::Contains("[loom.lower.E412]"), user_error);
  }
}

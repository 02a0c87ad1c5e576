// lower::infer_regions (loom/lower/infer_regions.hpp): whole tensors for stages not computed
// inside another, the box its consumer's tile reads (constant extents, clamped inside the
// tensor, or past its end where the reads stay inside) for one that is, each computed stage's
// loops over its box and its axes' values, and the refusal of a producer computed inside a
// loop its consumer is outside of.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/infer_regions.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/ops.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "pass_support.hpp"

using namespace loom;
using loom_test::passes::value_at;

namespace {

/// The loop variable of leaf `name` of stage `stage` in `regions`.
ir::Expr loop_var(const sched::State& s, const std::vector<lower::StageRegion>& regions,
                  const std::string& stage, const std::string& name) {
  const int si = s.stage_index(stage);
  const sched::Stage& st = s.stages()[si];
  for (int leaf : st.leaves)
    if (st.iters[leaf].name == name) return regions[si].loops->var[leaf];
  FAIL("no leaf " << name << " in " << stage);
  return {};
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("infer_regions: a matmul computed at its consumer's column tiles") {
    auto w = loom_test::matmul_bias_relu(13, 17, 19);  // C = A B; D = relu(C + bias)
    sched::State s(w.dag);
    s.split("D", 1, {5});       // i0 i1.0 (4) i1.1 (5)
    s.compute_at("C", "D", 1);  // one row, one tile of 5 columns of C per tile of D
    const std::vector<lower::StageRegion> regions = lower::infer_regions(s);
    REQUIRE(regions.size() == s.stages().size());
    for (const char* whole : {"A", "B", "bias", "D"}) {
      CAPTURE(whole);
      const lower::StageRegion& r = regions[s.stage_index(whole)];
      CHECK(r.extent == s.stage(whole).op.shape());
      for (const ir::Expr& m : r.min) CHECK(ir::is_const_int(m, 0));
      // Placeholders have no loops; computed stages do.
      CHECK(r.loops.has_value() == !s.stage(whole).is_placeholder);
    }
    const lower::StageRegion& c = regions[s.stage_index("C")];
    CHECK(c.extent == std::vector<int64_t>{1, 5});
    const ir::Expr row = loop_var(s, regions, "D", "i0"), tile = loop_var(s, regions, "D", "i1.0");
    CHECK(value_at(c.min[0], {{row, 7}}) == 7);
    // The last tile (columns 15..19) is shifted back inside the 17 columns: 12..16.
    const int64_t starts[] = {0, 5, 10, 12};
    for (int64_t t = 0; t < 4; ++t) CHECK(value_at(c.min[1], {{tile, t}}) == starts[t]);
    // C's loops cover its box; its axes are absolute coordinates, its reduction axis a loop.
    const sched::Stage& cs = s.stage("C");
    CHECK(c.loops->extent[0] == 1);
    CHECK(c.loops->extent[1] == 5);
    CHECK(c.loops->extent[2] == 19);
    REQUIRE(c.axes.size() == 3);
    const ir::Expr j = c.axes.at(cs.op->axes[1].variable());
    const ir::Expr i1 = loop_var(s, regions, "C", "i1");
    CHECK(value_at(j, {{tile, 3}, {i1, 4}}) == 16);
  }

  TEST_CASE("infer_regions: a tile past the tensor's end stays unshifted where its reads do") {
    // C[i] = sum_r X(i + r) w[r] over 7 outputs, 3 taps; D = relu(C) in tiles of 4, C computed
    // per tile. The second tile (outputs 4..7) passes C's end. Reading a zero-padded input (the
    // pad stage inlined: its bounds test keeps x's read inside), or a shared copy of x that
    // skips the points past x's end, C's box starts at the tile; reading x itself, or a pad
    // stage computed at the root (its buffer ends with it), the box shifts back (3..6).
    for (const char* how : {"inlined pad", "shared copy", "input", "pad at root"}) {
      CAPTURE(how);
      const std::string h = how;
      const bool padded = h == "inlined pad" || h == "pad at root";
      auto x = placeholder<float>("x", {padded ? 7 : 9});
      auto wt = placeholder<float>("w", {3});
      const Tensor<float, 1> in = padded ? ops::pad(x, {1}, {1}) : x;
      auto r = reduce_axis(3, "r");
      auto c = compute("C", {7}, [&](Var i) { return sum(in(i + r) * wt(r), r); });
      auto d = compute("D", {7}, [&](Var i) { return max(c(i), 0.0f); });
      const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{x, wt},
                                                          std::vector<ir::Tensor>{d});
      sched::State s(dag);
      if (h == "inlined pad") s.compute_inline(in.name());
      s.split("D", 0, {4});
      s.compute_at("C", "D", 0);
      std::string copy;
      if (h == "shared copy") {
        copy = s.cache_read("x", ir::MemoryScope::Shared, {"C"});
        s.compute_at(copy, "D", 0);
      }
      const std::vector<lower::StageRegion> regions = lower::infer_regions(s);
      const lower::StageRegion& cr = regions[s.stage_index("C")];
      CHECK(cr.extent == std::vector<int64_t>{4});
      const ir::Expr tile = loop_var(s, regions, "D", "i0.0");
      const bool unshifted = h == "inlined pad" || h == "shared copy";
      CHECK(value_at(cr.min[0], {{tile, 1}}) == (unshifted ? 4 : 3));
      if (!copy.empty()) {
        const lower::StageRegion& xr = regions[s.stage_index(copy)];
        CHECK(xr.skip_past_end);  // x's points 9 and 10 are skipped
        CHECK(xr.extent == std::vector<int64_t>{6});
        CHECK(value_at(xr.min[0], {{tile, 1}}) == 4);
      }
      // And the kernel computes D.
      const ir::LoweredFunc f = lower::lower(s, "past_end");
      std::vector<float> xs(padded ? 7 : 9), ws = {0.5f, -1.0f, 2.0f}, want(7), got(7, NAN);
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 4) - 1.5f;
      evaluate(*dag, {xs.data(), ws.data(), want.data()});
      lower::interpret(f, {xs.data(), ws.data(), got.data()});
      CHECK(got == want);
    }
  }

  TEST_CASE("infer_regions refuses a producer inside a loop its consumer is outside of") {
    auto w = loom_test::matmul(4, 5, 6);
    sched::State s(w.dag);
    s.cache_write("C", ir::MemoryScope::Local);
    s.cache_read("B", ir::MemoryScope::Local, {"C.local"});
    s.compute_at("C.local", "C", 0);
    s.compute_at("B.local", "C", 1);  // C.local, B.local's reader, is at C's loop 0
    CHECK_THROWS_WITH_AS(lower::infer_regions(s), doctest::Contains("[loom.lower.E412]"),
                         user_error);
  }
}

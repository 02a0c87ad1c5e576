// lower::stage_loops (loom/lower/stage_loops.hpp): the extents, loop variables and iterator
// values of a stage's loops over a box, with the guards of non-dividing splits, and the outer
// tile loops shrunk to what a smaller box needs.
#include <doctest/doctest.h>
#include <loom/lower/stage_loops.hpp>

#include <string>

#include "pass_support.hpp"

using namespace loom;
using loom_test::passes::value_at;
using lower::StageLoops;

namespace {

int id_of(const sched::Stage& s, const std::string& name) {
  for (size_t id = 0; id < s.iters.size(); ++id)
    if (s.iters[id].name == name) return static_cast<int>(id);
  FAIL("no iterator " << name);
  return -1;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("stage_loops: a split and a fuse over the whole tensor") {
    auto w = loom_test::matmul(13, 17, 19);  // C: i0 (13) i1 (17) k (19)
    sched::State st(w.dag);
    st.split("C", 1, {5});  // i0 i1.0 (4) i1.1 (5) k
    st.fuse("C", {0, 1});   // i0@i1.0 (52) i1.1 k
    const sched::Stage& c = st.stage("C");
    const StageLoops l = lower::stage_loops(c, {13, 17, 19});
    const int fused = id_of(c, "i0@i1.0"), inner = id_of(c, "i1.1"), k = id_of(c, "k");
    CHECK(l.extent[id_of(c, "i1.0")] == 4);
    CHECK(l.extent[inner] == 5);
    CHECK(l.extent[fused] == 52);
    CHECK(l.extent[k] == 19);
    // A variable per leaf, named after it; none for the iterators the leaves replaced.
    for (int leaf : c.leaves) {
      REQUIRE(l.var[leaf].as<ir::Variable>());
      CHECK(l.var[leaf].as<ir::Variable>()->name == c.iters[leaf].name);
    }
    CHECK_FALSE(l.var[id_of(c, "i1")].defined());
    // 4 tiles of 5 cover 20 columns of 17: one spatial guard, none on the reduction.
    REQUIRE(l.guards.size() == 1);
    CHECK(l.reduce_guards.empty());
    for (int64_t f = 0; f < 52; ++f)
      for (int64_t t = 0; t < 5; ++t) {
        const std::vector<std::pair<ir::Expr, int64_t>> at{{l.var[fused], f}, {l.var[inner], t}};
        const int64_t i0 = f / 4, i1 = (f % 4) * 5 + t;
        CHECK(value_at(l.rel[0], at) == i0);
        CHECK(value_at(l.rel[1], at) == i1);
        CHECK(value_at(l.guards[0], at) == (i1 < 17 ? 1 : 0));
      }
    CHECK(value_at(l.rel[2], {{l.var[k], 11}}) == 11);
  }

  TEST_CASE("stage_loops: a smaller box shrinks the outer tile loop and drops the guard") {
    auto w = loom_test::matmul(13, 17, 19);
    sched::State st(w.dag);
    st.split("C", 1, {5});
    st.split("C", 3, {4});  // i0 i1.0 i1.1 k.0 (5) k.1 (4): 20 of 19, a reduction guard
    const sched::Stage& c = st.stage("C");
    const StageLoops l = lower::stage_loops(c, {1, 5, 19});  // one row, one tile of columns
    CHECK(l.extent[id_of(c, "i0")] == 1);
    CHECK(l.extent[id_of(c, "i1.0")] == 1);
    CHECK(l.extent[id_of(c, "i1.1")] == 5);
    CHECK(l.guards.empty());
    CHECK(l.reduce_guards.size() == 1);
  }
}

// lower::plan_buffers (loom/lower/plan_buffers.hpp): the kernel's arguments in the DAG's order,
// whole-tensor buffers at the root (storage_align padding them), region-sized buffers in their
// scope for stages computed inside another (their vectorized axis innermost), none for inlined
// stages, and flat indices through those layouts.
#include <doctest/doctest.h>
#include <loom/lower/plan_buffers.hpp>

#include <string>

#include "pass_support.hpp"

using namespace loom;
using loom_test::passes::value_at;

namespace {

lower::BufferPlan plan(const sched::State& s) {
  return lower::plan_buffers(s, lower::infer_regions(s));
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("plan_buffers: arguments, a root intermediate and an inlined stage") {
    auto w = loom_test::elementwise_chain(10, 15);  // X Y -> a b c
    sched::State s(w.dag);
    s.compute_inline("b");
    const lower::BufferPlan p = plan(s);
    REQUIRE(p.args.size() == 3);
    for (int a = 0; a < 3; ++a) {
      CHECK(p.args[a]->arg_index == a);
      CHECK(p.args[a]->scope == ir::MemoryScope::Global);
    }
    CHECK(p.args[0]->name == "X");
    CHECK(p.args[2]->name == "c");
    CHECK(p.stages[s.stage_index("c")].buffer.get() == p.args[2].get());
    REQUIRE(p.root.size() == 1);
    const lower::StageBuffer& a = p.stages[s.stage_index("a")];
    CHECK(a.buffer.get() == p.root[0].get());
    CHECK(a.buffer->arg_index < 0);
    CHECK(a.buffer->shape == std::vector<int64_t>{10, 15});
    CHECK(a.strides == std::vector<int64_t>{15, 1});
    CHECK(value_at(a.flat_index({ir::Expr(2), ir::Expr(3)}), {}) == 33);
    CHECK_FALSE(p.stages[s.stage_index("b")].buffer);
  }

  TEST_CASE("plan_buffers: storage_align pads the rows of a root buffer") {
    auto w = loom_test::elementwise_chain(10, 15);
    sched::State s(w.dag);
    s.storage_align("a", 0, 8, 0);  // rows of 15 padded to 16
    const lower::BufferPlan p = plan(s);
    const lower::StageBuffer& a = p.stages[s.stage_index("a")];
    CHECK(a.strides == std::vector<int64_t>{16, 1});
    CHECK(a.buffer->shape == std::vector<int64_t>{160});
  }

  TEST_CASE("plan_buffers: a tile computed inside its consumer, vectorized along its rows") {
    auto w = loom_test::matmul_bias_relu(13, 17, 19);
    sched::State s(w.dag);
    s.split("D", 0, {4});
    s.split("D", 2, {5});
    s.reorder("D", {0, 2, 1, 3});  // i0.0 i1.0 i0.1 (4) i1.1 (5)
    const std::string local = s.cache_write("C", ir::MemoryScope::Local);
    s.compute_inline("C");        // the copy out of the local tile
    s.compute_at(local, "D", 1);  // a 4 x 5 tile of C per tile of D
    s.reorder(local, {1, 2, 0});  // i1 k i0
    s.annotate(local, 2, sched::Annotation::Vectorized);
    const lower::BufferPlan p = plan(s);
    const lower::StageBuffer& t = p.stages[s.stage_index(local)];
    CHECK(t.buffer->shape == std::vector<int64_t>{4, 5});
    CHECK(t.buffer->scope == ir::MemoryScope::Local);
    CHECK(t.buffer->arg_index < 0);
    // The rows' axis, vectorized, is innermost: a vector of the tile's column is contiguous.
    CHECK(t.strides == std::vector<int64_t>{1, 4});
    for (const ir::Buffer& b : p.root) CHECK(b.get() != t.buffer.get());
  }
}

// lower::inline_stages (loom/lower/inline_stages.hpp): the reads of inlined stages replaced by
// their bodies, recursively, and nothing else; inline_read as its single step.
#include <doctest/doctest.h>
#include <loom/lower/inline_stages.hpp>

#include <set>
#include <string>

#include "pass_support.hpp"

using namespace loom;

namespace {

/// The tensors `e` reads.
std::set<std::string> reads(const ir::Expr& e) {
  std::set<std::string> out;
  ir::post_order_visit(e, [&](const ir::Expr& x) {
    if (auto* r = x.as<ir::TensorRead>()) out.insert(r->tensor->name);
  });
  return out;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("inline_stages expands a chain of inlined stages into their consumer") {
    auto w = loom_test::elementwise_chain(10, 15);  // a(X, Y), b(a, Y), c(b, a, X)
    sched::State s(w.dag);
    s.compute_inline("a");
    s.compute_inline("b");
    const std::vector<ir::Expr> bodies = lower::inline_stages(s);
    REQUIRE(bodies.size() == s.stages().size());
    for (size_t si = 0; si < bodies.size(); ++si) {
      const sched::Stage& st = s.stages()[si];
      CAPTURE(st.name);
      // Placeholders and inlined stages have no body of their own any more.
      CHECK(bodies[si].defined() == (st.name == "c"));
    }
    const ir::Expr c = bodies[s.stage_index("c")];
    CHECK(reads(c) == std::set<std::string>{"X", "Y"});
    // One step: c's read of b becomes b's body, which still reads a.
    const ir::TensorRead* read_b = nullptr;
    ir::post_order_visit(s.stage("c").op->body, [&](const ir::Expr& x) {
      if (auto* r = x.as<ir::TensorRead>(); r && r->tensor->name == "b") read_b = r;
    });
    REQUIRE(read_b);
    CHECK(reads(lower::inline_read(s, *read_b)) == std::set<std::string>{"a", "Y"});
    // Nothing inlined: every body as it is.
    const sched::State plain(w.dag);
    CHECK(lower::inline_stages(plain)[s.stage_index("c")].same_as(plain.stage("c").op->body));
    // The inlined kernel computes what the DAG computes.
    const auto ref = loom_test::make_reference(w, 3);
    const auto r = loom_test::run_and_compare(w, ref, s);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

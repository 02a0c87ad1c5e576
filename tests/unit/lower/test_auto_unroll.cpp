// lower::auto_unroll (loom/lower/auto_unroll.hpp): the innermost serial loops of constant extent
// marked Unrolled while the statement instances under them stay within the limit; other kinds,
// symbolic extents and the loops around them untouched; nothing expanded.
#include <doctest/doctest.h>
#include <loom/lower/auto_unroll.hpp>

#include "pass_support.hpp"

using namespace loom::ir;
using loom::lower::auto_unroll;
using loom_test::passes::loops_of;

namespace {

/// The kinds of the loops of `s`, outermost first.
std::vector<ForKind> kinds(const Stmt& s) {
  std::vector<ForKind> out;
  for (const For* f : loops_of(s)) out.push_back(f->for_kind);
  return out;
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("auto_unroll marks the innermost loops within the step limit") {
    Buffer out = make_buffer("out", DType::i64(), {64}, MemoryScope::Global, 0);
    Expr i = Variable::make("i"), j = Variable::make("j"), k = Variable::make("k");
    // for i in 4: for j in 3: { out[..] = ..; out[..] = .. }: 2, 6 and 24 instances.
    Stmt body = Block::make({Store::make(out, i * 3 + j, i), Store::make(out, j, j)});
    Stmt nest = For::make(i, Expr(0), Expr(4), ForKind::Serial,
                          For::make(j, Expr(0), Expr(3), ForKind::Serial, body));
    using K = ForKind;
    CHECK(kinds(auto_unroll(nest, 1)) == std::vector<K>{K::Serial, K::Serial});
    CHECK(kinds(auto_unroll(nest, 6)) == std::vector<K>{K::Serial, K::Unrolled});
    CHECK(kinds(auto_unroll(nest, 24)) == std::vector<K>{K::Unrolled, K::Unrolled});
    CHECK(loops_of(auto_unroll(nest, 24)).size() == 2);  // marked, not expanded
    // A parallel loop keeps its kind but counts; a loop of symbolic extent counts as too many.
    Stmt par = For::make(i, Expr(0), Expr(4), ForKind::Parallel,
                         For::make(j, Expr(0), Expr(3), ForKind::Serial, body));
    CHECK(kinds(auto_unroll(par, 64)) == std::vector<K>{K::Parallel, K::Unrolled});
    Stmt symbolic = For::make(k, Expr(0), Expr(2), ForKind::Serial,
                              For::make(i, Expr(0), k + 1, ForKind::Serial, body));
    CHECK(kinds(auto_unroll(symbolic, 1000)) == std::vector<K>{K::Serial, K::Serial});
  }
}

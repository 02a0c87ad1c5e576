// Support for the tests of lowering's passes (test_<pass>.cpp here): random schedules that
// lower() accepts, the loop nest they have before the loop passes, and the check that a pass
// keeps what a kernel computes: the loop-nest interpreter run on the same random arguments
// before and after it, every argument compared bit for bit (the loop passes move iterations and
// lanes around but never reorder the operations of one element).
#ifndef LOOM_TESTS_UNIT_LOWER_PASS_SUPPORT_HPP
#define LOOM_TESTS_UNIT_LOWER_PASS_SUPPORT_HPP

#include <doctest/doctest.h>
#include <loom/ir/printer.hpp>
#include <loom/ir/simplify.hpp>
#include <loom/ir/stmt.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/lower.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "support/random.hpp"
#include "support/random_schedule.hpp"

namespace loom_test::passes {

/// lower() stopped right after build_loop_nests: the nest the loop passes start from.
inline loom::lower::LowerOptions no_loop_passes() {
  loom::lower::LowerOptions o;
  o.simplify = o.unroll = o.vectorize = o.partition = false;
  return o;
}

/// A schedule with the workload it schedules.
struct scheduled {
  workload w;
  loom::sched::State state;
};

/// `per_workload` random schedules of each workload of support/random_schedule.hpp that lower()
/// accepts (it refuses a few, [loom.lower.E41x]), from a fixed seed.
inline std::vector<scheduled> lowerable_schedules(int per_workload, uint32_t seed) {
  std::vector<scheduled> out;
  for (const workload& w : {matmul(13, 17, 19), matmul_i32(6, 7, 5), matmul_bias_relu(13, 17, 19),
                            conv2d(3, 9, 9, 4, 3, 1, 2), depthwise(3, 7, 7), softmax(7, 13),
                            row_sum(9, 23), elementwise_chain(10, 15)}) {
    std::mt19937 rng(seed++);
    random_schedule_stats stats;
    for (int found = 0, tries = 0; found < per_workload && tries < 4 * per_workload; ++tries) {
      loom::sched::State s = random_schedule(w.dag, rng, 3 + pick(rng, 12), stats);
      try {
        (void)loom::lower::lower(s, w.name, no_loop_passes());
      } catch (const loom::user_error&) {
        continue;
      }
      out.push_back({w, std::move(s)});
      ++found;
    }
  }
  return out;
}

/// The bytes of every argument of a kernel, in argument order.
using arguments = std::vector<std::vector<unsigned char>>;

/// Random contents for the arguments `args` (integers small, floats in [-1, 1]).
inline arguments random_arguments(const std::vector<loom::ir::Buffer>& args, uint32_t seed) {
  arguments out;
  for (const loom::ir::Buffer& b : args) {
    int64_t n = 1;
    for (int64_t e : b->shape) n *= e;
    std::vector<unsigned char> bytes(static_cast<size_t>(n * b->dtype.bytes()));
    auto fill = [&](const auto& v) { std::memcpy(bytes.data(), v.data(), bytes.size()); };
    const auto size = static_cast<size_t>(n);
    if (b->dtype == loom::ir::DType::f32())
      fill(random_vector<float>(size, seed));
    else if (b->dtype == loom::ir::DType::f64())
      fill(random_vector<double>(size, seed));
    else if (b->dtype == loom::ir::DType::i32())
      fill(random_vector<int32_t>(size, seed, -20, 20));
    else if (b->dtype == loom::ir::DType::i64())
      fill(random_vector<int64_t>(size, seed, -20, 20));
    else
      fill(random_vector<uint8_t>(size, seed, 0, 1));
    out.push_back(std::move(bytes));
    ++seed;
  }
  return out;
}

/// The arguments after running `body` as a kernel over `args` on copies of `data`.
inline arguments run(const std::vector<loom::ir::Buffer>& args, const loom::ir::Stmt& body,
                     arguments data) {
  std::vector<void*> ptrs;
  for (auto& d : data) ptrs.push_back(d.data());
  loom::lower::interpret(loom::ir::LoweredFunc{"kernel", args, body}, ptrs);
  return data;
}

/// "" when `before` and `after`, run over the arguments `args` from the same random contents,
/// leave the same bytes in every argument; otherwise which argument differs first, and where.
inline std::string same_results(const std::vector<loom::ir::Buffer>& args,
                                const loom::ir::Stmt& before, const loom::ir::Stmt& after,
                                uint32_t seed = 1) {
  const arguments start = random_arguments(args, seed);
  const arguments want = run(args, before, start), got = run(args, after, start);
  for (size_t a = 0; a < args.size(); ++a)
    if (want[a] != got[a]) {
      size_t at = 0;
      while (want[a][at] == got[a][at]) ++at;
      std::ostringstream os;
      os << "argument '" << args[a]->name << "' differs at element "
         << at / static_cast<size_t>(args[a]->dtype.bytes());
      return os.str();
    }
  return "";
}

/// The loop nest lowering makes for `s` before its loop passes, with the kernel's arguments.
inline loom::ir::LoweredFunc built(const scheduled& s) {
  return loom::lower::lower(s.state, s.w.name, no_loop_passes());
}

/// Every loop of `s`, outermost first.
inline std::vector<const loom::ir::For*> loops_of(const loom::ir::Stmt& s) {
  struct collector : loom::ir::StmtVisitor {
    std::vector<const loom::ir::For*> loops;
    using loom::ir::StmtVisitor::visit;
    void visit_For(const loom::ir::For* op) override {
      loops.push_back(op);
      loom::ir::StmtVisitor::visit_For(op);
    }
  } c;
  c.visit(s);
  return c.loops;
}

/// The loops of `s` of kind `k`.
inline int count_loops(const loom::ir::Stmt& s, loom::ir::ForKind k) {
  int n = 0;
  for (const loom::ir::For* f : loops_of(s)) n += f->for_kind == k;
  return n;
}

/// Whether some expression of `s` is a vector (lanes > 1).
inline bool has_vectors(const loom::ir::Stmt& s) {
  struct finder : loom::ir::StmtVisitor {
    bool found = false;
    using loom::ir::StmtVisitor::visit;
    void visit(const loom::ir::Expr& e) override {
      found = found || (e.defined() && e.dtype().lanes > 1);
      if (!found) loom::ir::StmtVisitor::visit(e);
    }
  } f;
  f.visit(s);
  return f.found;
}

/// The value of integer expression `e` with the variables in `at` replaced by constants.
inline int64_t value_at(const loom::ir::Expr& e,
                        const std::vector<std::pair<loom::ir::Expr, int64_t>>& at) {
  std::unordered_map<const loom::ir::Variable*, loom::ir::Expr> sub;
  for (const auto& [v, x] : at) sub[v.as<loom::ir::Variable>()] = loom::ir::Expr(x);
  const loom::ir::Expr r = loom::ir::simplify(loom::ir::substitute(e, sub));
  const int64_t* c = loom::ir::as_const_int(r);
  REQUIRE_MESSAGE(c, "not a constant: " << r);
  return *c;
}

}  // namespace loom_test::passes

#endif  // LOOM_TESTS_UNIT_LOWER_PASS_SUPPORT_HPP

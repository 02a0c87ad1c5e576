// Fuzz target: the index-arithmetic simplifier against direct evaluation (issue 35). The bytes
// build an integer expression over x, y and z (+, -, *, floor division and modulo by constants,
// min, max, a select on a comparison) and give each variable a range; at every point of a grid
// of the ranges:
//  - simplify(e, ranges) evaluates to what e evaluates to,
//  - bounds_of(e, ranges) contains it,
//  - known_divisor(e) divides it.
// The evaluator here is independent of the simplifier. Anything else aborts. Runs as the ctest
// loom_fuzz_simplify_corpus over tests/fuzz/corpus/simplify, and as a libFuzzer executable
// (tests/fuzz/CMakeLists.txt).
#include <loom/ir/simplify.hpp>
#include <loom/ir/visitor.hpp>
#include <loom/loom.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace loom::ir;

using Values = std::unordered_map<const Variable*, int64_t>;

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// The value of `e` at `v`; nothing when a step overflows int64 or the node is not one this
// evaluator knows.
std::optional<int64_t> eval(const Expr& e, const Values& v) {
  if (const int64_t* c = as_const_int(e)) return *c;
  if (auto* x = e.as<Variable>()) {
    auto it = v.find(x);
    return it == v.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  if (auto* s = e.as<Select>()) {
    auto c = eval(s->condition, v);
    if (!c) return std::nullopt;
    return eval(*c ? s->true_value : s->false_value, v);
  }
  if (auto* n = e.as<Not>()) {
    auto a = eval(n->a, v);
    return a ? std::optional<int64_t>(!*a) : std::nullopt;
  }
  if (!is_binary(e.kind())) return std::nullopt;
  auto [pa, pb] = binary_operands(e);
  auto a = eval(*pa, v), b = eval(*pb, v);
  if (!a || !b) return std::nullopt;
  int64_t r = 0;
  switch (e.kind()) {
    case NodeKind::Add:
      if (__builtin_add_overflow(*a, *b, &r)) return std::nullopt;
      return r;
    case NodeKind::Sub:
      if (__builtin_sub_overflow(*a, *b, &r)) return std::nullopt;
      return r;
    case NodeKind::Mul:
      if (__builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
      return r;
    case NodeKind::FloorDiv: return *b == 0 ? std::nullopt : std::optional(floor_div(*a, *b));
    case NodeKind::FloorMod: return *b == 0 ? std::nullopt : std::optional(floor_mod(*a, *b));
    case NodeKind::Div: return *b == 0 ? std::nullopt : std::optional(*a / *b);
    case NodeKind::Mod: return *b == 0 ? std::nullopt : std::optional(*a % *b);
    case NodeKind::Min: return std::min(*a, *b);
    case NodeKind::Max: return std::max(*a, *b);
    case NodeKind::LT: return *a < *b;
    case NodeKind::LE: return *a <= *b;
    case NodeKind::GT: return *a > *b;
    case NodeKind::GE: return *a >= *b;
    case NodeKind::EQ: return *a == *b;
    case NodeKind::NE: return *a != *b;
    case NodeKind::And: return *a && *b;
    case NodeKind::Or: return *a || *b;
    default: return std::nullopt;
  }
}

class reader {
 public:
  reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool done() const { return at_ >= n_; }
  uint8_t byte() { return at_ < n_ ? d_[at_++] : 0; }

 private:
  const uint8_t* d_;
  size_t n_, at_ = 0;
};

[[noreturn]] void fail(const std::string& what, const Expr& e, const Expr& s, const Values& v) {
  std::ostringstream os;
  os << "fuzz_simplify: " << what << "\n  e = " << e << "\n  simplified = " << s << "\n  at";
  for (const auto& [var, val] : v) os << ' ' << var->name << '=' << val;
  std::fprintf(stderr, "%s\n", os.str().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader in(data, size);
  const std::array<Expr, 3> vars{Variable::make("x"), Variable::make("y"), Variable::make("z")};
  RangeMap ranges;
  std::array<std::array<int64_t, 2>, 3> box{};
  for (int i = 0; i < 3; ++i) {
    const int64_t lo = static_cast<int8_t>(in.byte()) / 4, span = in.byte() % 24;
    box[i] = {lo, lo + span};
    ranges[vars[i].as<Variable>()] = Interval{lo, lo + span};
  }
  // A stack machine: each byte pushes a leaf or combines the top of the stack. Sizes count the
  // nodes of the expression as a tree: a select repeats its operands, and a tree of 2^40 nodes
  // is no test of the simplifier's arithmetic, so such inputs are skipped.
  std::vector<std::pair<Expr, int64_t>> stack;
  for (int steps = 0; !in.done() && steps < 40; ++steps) {
    const uint8_t op = in.byte() % 12;
    auto pop = [&] {
      auto t = stack.back();
      stack.pop_back();
      return t;
    };
    if (op < 3) {
      stack.push_back({vars[op], 1});
    } else if (op == 3) {
      stack.push_back({Expr(static_cast<int64_t>(static_cast<int8_t>(in.byte()))), 1});
    } else if (op == 4 || op == 5) {  // by a positive constant
      if (stack.empty()) continue;
      const Expr c(static_cast<int64_t>(in.byte() % 16 + 1));
      const auto [a, n] = pop();
      stack.push_back({op == 4 ? FloorDiv::make(a, c) : FloorMod::make(a, c), n + 2});
    } else if (stack.size() >= 2) {
      const auto [b, nb] = pop();
      const auto [a, na] = pop();
      switch (op) {
        case 6: stack.push_back({a + b, na + nb + 1}); break;
        case 7: stack.push_back({a - b, na + nb + 1}); break;
        case 8: stack.push_back({a * b, na + nb + 1}); break;
        case 9: stack.push_back({Min::make(a, b), na + nb + 1}); break;
        case 10: stack.push_back({Max::make(a, b), na + nb + 1}); break;
        default:
          stack.push_back({Select::make(LT::make(a, b), a, b - a), 3 * na + 2 * nb + 3});
          break;
      }
    }
    if (!stack.empty() && stack.back().second > 4096) return 0;
  }
  if (stack.empty()) return 0;
  const Expr e = stack.back().first;
  const Expr s = simplify(e, ranges);
  const Interval bounds = bounds_of(e, ranges);
  const int64_t divisor = known_divisor(e);
  // Up to 6 points per variable, ends included.
  auto points = [&](int i) {
    std::vector<int64_t> p;
    const int64_t lo = box[i][0], hi = box[i][1];
    for (int64_t k = 0; k < 6; ++k) p.push_back(lo + (hi - lo) * k / 5);
    return p;
  };
  for (int64_t x : points(0))
    for (int64_t y : points(1))
      for (int64_t z : points(2)) {
        const Values at{
            {vars[0].as<Variable>(), x}, {vars[1].as<Variable>(), y}, {vars[2].as<Variable>(), z}};
        const std::optional<int64_t> want = eval(e, at);
        if (!want) continue;  // an overflow in the expression itself
        const std::optional<int64_t> got = eval(s, at);
        if (!got || *got != *want)
          fail("simplified value " + (got ? std::to_string(*got) : "?") + ", direct " +
                   std::to_string(*want),
               e, s, at);
        if (*want < bounds.min || *want > bounds.max)
          fail("bounds [" + std::to_string(bounds.min) + ", " + std::to_string(bounds.max) +
                   "] miss " + std::to_string(*want),
               e, s, at);
        if (divisor == 0 ? *want != 0 : *want % divisor != 0)
          fail("known_divisor " + std::to_string(divisor) + " does not divide " +
                   std::to_string(*want),
               e, s, at);
      }
  return 0;
}

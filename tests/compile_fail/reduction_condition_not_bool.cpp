// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a reduction whose where-condition is a float
// expression. Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4, 4});
  auto k = reduce_axis(4, "k");
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return sum(A(i, k), k, A(i, k)); });
#else
  auto C = compute("C", {4}, [&](Var i) { return sum(A(i, k), k, A(i, k) > 0.0f); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: if_then_else whose condition is a float
// expression. Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return if_then_else(A(i), A(i), 0.0f); });
#else
  auto C = compute("C", {4}, [&](Var i) { return if_then_else(A(i) != 0.0f, A(i), 0.0f); });
#endif
  return 0;
}

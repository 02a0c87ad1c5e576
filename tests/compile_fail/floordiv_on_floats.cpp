// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: floordiv of two float expressions.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return floordiv(A(i), 2.0f); });
#else
  auto C = compute("C", {4}, [&](Var i) { return A(floordiv(i, 2)); });
#endif
  return 0;
}

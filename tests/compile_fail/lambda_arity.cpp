// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a compute lambda with fewer Vars than the shape
// has dimensions. Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4, 4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4, 4}, [&](Var i) { return A(i, 0); });
#else
  auto C = compute("C", {4, 4}, [&](Var i, Var) { return A(i, 0); });
#endif
  return 0;
}

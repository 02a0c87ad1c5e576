// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a 2-D tensor read with one index.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4, 4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4, 4}, [&](Var i, Var) { return A(i); });
#else
  auto C = compute("C", {4, 4}, [&](Var i, Var j) { return A(i, j); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: exp() of an int32 expression.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<int32_t>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return exp(A(i)); });
#else
  auto C = compute("C", {4}, [&](Var i) { return exp(cast<float>(A(i))); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: exp() of a float16 value. Without the macro
// the corrected line (exp in float32) must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float16>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return cast<float>(exp(A(i))); });
#else
  auto C = compute("C", {4}, [&](Var i) { return exp(cast<float>(A(i))); });
#endif
  return 0;
}

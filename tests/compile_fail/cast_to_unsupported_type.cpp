// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: cast<char>() of a float expression.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return cast<float>(cast<char>(A(i))); });
#else
  auto C = compute("C", {4}, [&](Var i) { return cast<float>(cast<int32_t>(A(i))); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a compute lambda that returns a std::string.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var) { return std::string("x"); });
#else
  auto C = compute("C", {4}, [&](Var i) { return A(i); });
#endif
  return 0;
}

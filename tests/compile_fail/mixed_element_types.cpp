// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a float tensor added to a double tensor without
// a cast. Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
  auto B = placeholder<double>("B", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return A(i) + B(i); });
#else
  auto C = compute("C", {4}, [&](Var i) { return A(i) + cast<float>(B(i)); });
#endif
  return 0;
}

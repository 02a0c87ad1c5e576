// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a float expression used as a tensor index.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<float>("A", {4});
  auto X = placeholder<float>("X", {4});
  auto I = placeholder<int64_t>("I", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return A(X(i)); });
#else
  auto C = compute("C", {4}, [&](Var i) { return A(I(i)); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: bfloat16 is a storage type, so adding two
// bfloat16 values is refused. Without the macro the corrected line (convert, add in float32,
// round back) must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<bfloat16>("A", {4});
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return A(i) + A(i); });
#else
  auto C = compute("C", {4},
                   [&](Var i) { return cast<bfloat16>(cast<float>(A(i)) + cast<float>(A(i))); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a sum of bfloat16 values. Without the macro
// the corrected line (summed in float32) must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
  auto A = placeholder<bfloat16>("A", {4, 8});
  auto k = reduce_axis(8, "k");
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto C = compute("C", {4}, [&](Var i) { return sum(A(i, k), k); });
#else
  auto C = compute("C", {4}, [&](Var i) { return sum(cast<float>(A(i, k)), k); });
#endif
  return 0;
}

// Must not compile with LOOM_SHOULD_FAIL_TO_BUILD: a placeholder of element type char.
// Without the macro the corrected line must compile (the control half of the case).
#include <loom/loom.hpp>

using namespace loom;

int main() {
#ifdef LOOM_SHOULD_FAIL_TO_BUILD
  auto A = placeholder<char>("A", {4});
#else
  auto A = placeholder<int32_t>("A", {4});
#endif
  return 0;
}

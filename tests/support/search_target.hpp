// The CPU target of the search-space tests: the host with 4 cores and 256-bit vectors, fixed so
// that sketches and sampled programs (parallel granularity, vector lengths) do not depend on the
// machine the tests run on.
#pragma once

#include <loom/target.hpp>

namespace loom_test {

inline loom::Target test_target() {
  loom::Target t = loom::Target::host();
  t.num_cores = 4;
  t.vector_bits = 256;
  return t;
}

}  // namespace loom_test

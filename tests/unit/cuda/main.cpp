// The doctest main of loom's CUDA tests. Before running any test it checks that the machine has
// what the tests need (NVRTC; for the device tests also a GPU and its driver) and, when it does
// not, prints why and exits with 77, which ctest reports as a skipped test (SKIP_RETURN_CODE).
#define DOCTEST_CONFIG_IMPLEMENT
#include <loom/backend/cuda/driver.hpp>
#include <loom/backend/cuda/nvrtc.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#ifndef LOOM_CUDA_TEST_PROGRAM
#error "define LOOM_CUDA_TEST_PROGRAM (the executable's name)"
#endif
#ifndef LOOM_CUDA_TEST_NEEDS_DEVICE
#error "define LOOM_CUDA_TEST_NEEDS_DEVICE to 0 or 1"
#endif

int main(int argc, char** argv) {
  constexpr int skipped = 77;
  std::string why;
#if LOOM_CUDA_TEST_NEEDS_DEVICE
  if (!loom::cuda::device_available(&why)) {
    std::printf("%s: skipped, no CUDA device: %s\n", LOOM_CUDA_TEST_PROGRAM, why.c_str());
    return skipped;
  }
  std::printf("%s: driver: %s\n", LOOM_CUDA_TEST_PROGRAM, why.c_str());
#endif
  // NVRTC's own error, as users would see it, is the clearest explanation.
  try {
    (void)loom::cuda::nvrtc_version();
  } catch (const loom::backend_error& e) {
    std::printf("%s: skipped: %s\n", LOOM_CUDA_TEST_PROGRAM, e.what());
    return skipped;
  }
  loom::cuda::nvrtc_available(&why);
  std::printf("%s: NVRTC: %s\n", LOOM_CUDA_TEST_PROGRAM, why.c_str());
  std::fflush(stdout);

  doctest::Context context(argc, argv);
  return context.run();
}

// NVRTC through dlopen (loom/backend/cuda/nvrtc.hpp): PTX for a kernel, the architecture and the
// options NVRTC gets, the errors (NVRTC's full log, a malformed architecture), and compilations
// on several threads at once. Needs NVRTC, not a GPU (main.cpp skips the executable without it).
#include <loom/backend/cuda/nvrtc.hpp>

#include <doctest/doctest.h>

#include <latch>
#include <string>
#include <thread>
#include <vector>

using namespace loom;

namespace {

const char* const saxpy_source =
    R"(extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The message of the loom::backend_error that `compile` throws, or "" when it throws none.
template <class F>
std::string backend_error_of(F&& compile) {
  try {
    compile();
  } catch (const backend_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_SUITE("cuda.nvrtc") {
  TEST_CASE("nvrtc_available says which NVRTC it loaded") {
    std::string why;
    REQUIRE(cuda::nvrtc_available(&why));
    CHECK(contains(why, "loaded"));
    CHECK(contains(why, "libnvrtc"));
    CHECK(cuda::nvrtc_available());  // `why` is optional
    const cuda::NvrtcVersion version = cuda::nvrtc_version();
    CHECK(version.major >= 11);
    CHECK(contains(why,
                   "NVRTC " + std::to_string(version.major) + "." + std::to_string(version.minor)));
  }

  TEST_CASE("compile_to_ptx turns a saxpy kernel into PTX for sm_90") {
    const std::string ptx = cuda::compile_to_ptx(saxpy_source, "sm_90");
    CHECK(contains(ptx, ".target sm_90\n"));
    CHECK(contains(ptx, ".entry saxpy("));
    CHECK(contains(ptx, ".version "));
    CHECK(ptx.find('\0') == std::string::npos);        // text only: NVRTC's trailing NUL is dropped
    CHECK(cuda::compile_to_ptx(saxpy_source) == ptx);  // sm_90 is the default
  }

  TEST_CASE("compile_to_cubin gives machine code for the real architecture") {
    const std::string cubin = cuda::compile_to_cubin(saxpy_source, "sm_90");
    REQUIRE(cubin.size() > 4);
    CHECK(cubin.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
    CHECK(contains(cubin, "saxpy"));  // the symbol table names the kernel
    // A virtual architecture names the same machine.
    CHECK(cuda::compile_to_cubin(saxpy_source, "compute_90").size() > 4);
    CHECK_THROWS_WITH_AS(cuda::compile_to_cubin(saxpy_source, "sm_9"),
                         doctest::Contains("[loom.cuda.E904]"), user_error);
  }

  TEST_CASE("the architecture may be real, virtual or architecture-specific") {
    CHECK(contains(cuda::compile_to_ptx(saxpy_source, "compute_80"), ".target sm_80\n"));
    CHECK(contains(cuda::compile_to_ptx(saxpy_source, "sm_86"), ".target sm_86\n"));
    CHECK(contains(cuda::compile_to_ptx(saxpy_source, "sm_90a"), ".target sm_90a\n"));
  }

  TEST_CASE("a malformed architecture is a user error") {
    for (const char* arch : {"", "90", "sm_", "sm_9", "sm_9000", "sm_90x", "gfx90a", "compute90"}) {
      CAPTURE(arch);
      CHECK_THROWS_WITH_AS(cuda::compile_to_ptx(saxpy_source, arch),
                           doctest::Contains("[loom.cuda.E904]"), user_error);
    }
  }

  TEST_CASE("extra options reach NVRTC after loom's own") {
    const char* scaled =
        R"(extern "C" __global__ void scale(float* y) { y[threadIdx.x] *= SCALE; })";
    // Without the definition the source does not compile...
    const std::string error = backend_error_of([&] { cuda::compile_to_ptx(scaled); });
    CHECK(contains(error, "SCALE"));
    // ...with it, it does; and --use_fast_math is accepted.
    const std::string ptx =
        cuda::compile_to_ptx(scaled, "sm_90", {"-DSCALE=3.0f", "--use_fast_math"}, "scale.cu");
    CHECK(contains(ptx, ".entry scale("));
  }

  TEST_CASE("a syntax error throws backend_error with the program, the options and NVRTC's log") {
    const char* broken = R"(extern "C" __global__ void broken(float* y) {
  int i = threadIdx.x
  y[i] = 1.0f;
}
)";
    CHECK_THROWS_WITH_AS(cuda::compile_to_ptx(broken, "sm_90", {}, "broken.cu"),
                         doctest::Contains("[loom.cuda.E902]"), backend_error);
    const std::string message = backend_error_of(
        [&] { cuda::compile_to_ptx(broken, "sm_90", {"-lineinfo"}, "broken.cu"); });
    CAPTURE(message);
    CHECK(contains(message, "NVRTC could not compile broken.cu (NVRTC_ERROR_COMPILATION)"));
    CHECK(contains(message,
                   "options: --gpu-architecture=compute_90 --std=c++17 -default-device "
                   "-lineinfo"));
    // The log itself: the file, the line of the error and NVRTC's words for it.
    CHECK(contains(message, "broken.cu(3): error: expected a \";\""));
    CHECK(contains(message, "1 error detected in the compilation of \"broken.cu\""));
  }

  TEST_CASE("an option NVRTC does not know is reported with the options") {
    const std::string message = backend_error_of(
        [&] { cuda::compile_to_ptx(saxpy_source, "sm_90", {"--no-such-option"}); });
    CAPTURE(message);
    CHECK(contains(message, "[loom.cuda.E902]"));
    CHECK(contains(message, "--no-such-option"));
  }

  TEST_CASE("several threads compile at once") {
    constexpr int threads = 4;
    std::vector<std::string> ptx(threads), errors(threads);
    std::latch start(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::string name = "kernel_" + std::to_string(t);
        const std::string source = "extern \"C\" __global__ void " + name +
                                   "(float* y) { y[threadIdx.x] += " + std::to_string(t) + ".0f; }";
        start.arrive_and_wait();  // all compilations begin together
        try {
          ptx[t] = cuda::compile_to_ptx(source, "sm_90", {}, name + ".cu");
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (std::thread& thread : pool) thread.join();
    for (int t = 0; t < threads; ++t) {
      CAPTURE(t);
      CHECK(errors[t] == "");
      CHECK(contains(ptx[t], ".entry kernel_" + std::to_string(t) + "("));
    }
  }

  TEST_CASE("nvrtc_arch_for picks the newest architecture NVRTC has at or below the device's") {
    const std::vector<int> archs = cuda::nvrtc_supported_archs();
    REQUIRE(!archs.empty());
    for (size_t i = 1; i < archs.size(); ++i) CHECK(archs[i - 1] < archs[i]);
    for (int arch : archs)
      CHECK(cuda::nvrtc_arch_for(arch / 10, arch % 10) == "sm_" + std::to_string(arch));
    // A device newer than every architecture NVRTC knows runs the newest one's PTX.
    CHECK(cuda::nvrtc_arch_for(99, 9) == "sm_" + std::to_string(archs.back()));
    if (archs.size() >= 2 && archs[1] - archs[0] > 1 && archs[0] % 10 < 9)  // between the first two
      CHECK(cuda::nvrtc_arch_for(archs[0] / 10, archs[0] % 10 + 1) ==
            "sm_" + std::to_string(archs[0]));
    CHECK_THROWS_WITH_AS(cuda::nvrtc_arch_for(1, 0), doctest::Contains("[loom.cuda.E904]"),
                         user_error);
  }

}  // TEST_SUITE

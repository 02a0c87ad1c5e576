// The driver layer (loom/backend/cuda/driver.hpp) where no GPU is needed: what device_available()
// says on a machine without one and how everything else then fails, the names of driver errors,
// DeviceInfo::arch, and the checks that empty objects make before any driver call.
#include <loom/backend/cuda/driver.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace loom;

TEST_SUITE("cuda.driver") {
  TEST_CASE("without a device, device_available says why and the rest throws [loom.cuda.E910]") {
    std::string why;
    if (cuda::device_available(&why)) {
      MESSAGE("this machine has a CUDA device (" << why << "); the no-device path is not tested");
      CHECK(cuda::device_count() > 0);
      return;
    }
    CAPTURE(why);
    CHECK(!why.empty());
    CHECK(cuda::device_count() == 0);
    CHECK_THROWS_WITH_AS(cuda::device_info(0), doctest::Contains("[loom.cuda.E910]"),
                         backend_error);
    CHECK_THROWS_WITH_AS(cuda::device_info(0), doctest::Contains(why.c_str()), backend_error);
    CHECK_THROWS_WITH_AS(cuda::Context::get(), doctest::Contains("[loom.cuda.E910]"),
                         backend_error);
    CHECK_THROWS_WITH_AS(cuda::DeviceBuffer(64), doctest::Contains("[loom.cuda.E910]"),
                         backend_error);
    CHECK_THROWS_WITH_AS(cuda::Module(".version 8.0\n"), doctest::Contains("[loom.cuda.E910]"),
                         backend_error);
  }

  TEST_CASE("driver_error_name names the errors a kernel run can end with") {
    CHECK(cuda::driver_error_name(0) == "CUDA_SUCCESS");
    CHECK(cuda::driver_error_name(1) == "CUDA_ERROR_INVALID_VALUE");
    CHECK(cuda::driver_error_name(34) == "CUDA_ERROR_STUB_LIBRARY");
    CHECK(cuda::driver_error_name(700) == "CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK(cuda::driver_error_name(701) == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
    CHECK(cuda::driver_error_name(719) == "CUDA_ERROR_LAUNCH_FAILED");
    CHECK(cuda::driver_error_name(123456) == "CUDA error 123456");
  }

  TEST_CASE("DeviceInfo::arch is the sm_ name of the compute capability") {
    cuda::DeviceInfo info;
    info.compute_major = 9;
    info.compute_minor = 0;
    CHECK(info.arch() == "sm_90");
    CHECK(info.compute_capability() == 90);
    info.compute_major = 8;
    info.compute_minor = 6;
    CHECK(info.arch() == "sm_86");
    info.compute_major = 12;
    info.compute_minor = 1;
    CHECK(info.arch() == "sm_121");
  }

  TEST_CASE("empty objects are refused before the driver is called") {
    cuda::DeviceBuffer buffer;
    CHECK(buffer.ptr() == 0);
    CHECK(buffer.bytes() == 0);
    CHECK(!buffer.valid());
    buffer.upload(nullptr, 0);  // nothing to copy
    float value = 1.0f;
    CHECK_THROWS_WITH_AS(buffer.upload(&value, sizeof value), doctest::Contains("[loom.cuda.E918]"),
                         user_error);
    CHECK_THROWS_WITH_AS(buffer.download(&value, sizeof value),
                         doctest::Contains("[loom.cuda.E918]"), user_error);
    cuda::DeviceBuffer moved(std::move(buffer));
    CHECK(moved.ptr() == 0);

    cuda::Module module;
    CHECK(!module.valid());
    CHECK(module.handle() == nullptr);
    CHECK(module.info_log().empty());
    CHECK_THROWS_WITH_AS(module.function("saxpy"), doctest::Contains("[loom.cuda.E917]"),
                         user_error);

    cuda::Function function;
    CHECK(!function.valid());
    CHECK(function.handle() == nullptr);
    CHECK_THROWS_WITH_AS(function.num_registers(), doctest::Contains("[loom.cuda.E917]"),
                         user_error);
    CHECK_THROWS_WITH_AS(cuda::launch(function, {1, 1, 1}, {32, 1, 1}, 0, {}),
                         doctest::Contains("[loom.cuda.E917]"), user_error);
  }

}  // TEST_SUITE

// The driver layer on a real GPU (loom/backend/cuda/driver.hpp, with NVRTC): device properties,
// copies, a kernel compiled by NVRTC and launched, event timing, launches the driver refuses, and
// recovering from a kernel that crashes. main.cpp skips the executable without a device.
#include <loom/backend/cuda/driver.hpp>
#include <loom/backend/cuda/nvrtc.hpp>
#include <loom/cuda.hpp>
#include <loom/ops.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/records.hpp>
#include <loom/search/sketch.hpp>

#include "support/mma_schedule.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace loom;

namespace {

const char* const kernels_source = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Writes through whatever pointer it gets: given 0, an illegal address.
extern "C" __global__ void write_through(float* p) { p[threadIdx.x] = 1.0f; }

// Copies x to y through dynamic shared memory of `n` floats (one block).
extern "C" __global__ void through_shared(const float* x, float* y, int n) {
  extern __shared__ float tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[n - 1 - i] = tile[i];
}
)";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The kernels above, compiled once for the device's architecture.
const std::string& kernels_ptx() {
  static const std::string ptx = [] {
    const cuda::DeviceInfo info = cuda::device_info(0);
    return cuda::compile_to_ptx(kernels_source,
                                cuda::nvrtc_arch_for(info.compute_major, info.compute_minor));
  }();
  return ptx;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Runs saxpy (a = 2) on `n` elements on the device and checks the result against the host.
void check_saxpy(const cuda::Module& module, int n) {
  const std::vector<float> x = random_floats(static_cast<size_t>(n), 1);
  const std::vector<float> y0 = random_floats(static_cast<size_t>(n), 2);
  cuda::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  dx.upload(x.data(), n * sizeof(float));
  dy.upload(y0.data(), n * sizeof(float));
  const cuda::Function saxpy = module.function("saxpy");
  float a = 2.0f;
  cuda::CUdeviceptr px = dx.ptr(), py = dy.ptr();
  const unsigned block = 256, grid = (static_cast<unsigned>(n) + block - 1) / block;
  cuda::launch(saxpy, {grid, 1, 1}, {block, 1, 1}, 0, {&a, &px, &py, &n});
  std::vector<float> y(static_cast<size_t>(n));
  dy.download(y.data(), n * sizeof(float));
  int wrong = 0;
  for (int i = 0; i < n; ++i)
    if (std::abs(y[i] - (a * x[i] + y0[i])) > 1e-5f) ++wrong;
  CHECK(wrong == 0);
}

/// Runs program `g` of `dag` (C = A B or A B^T of M x N x K, A and B bf16 or fp16) on random
/// operands and compares with the interpreter: the elements that differ, or -1 under the fake
/// driver (which runs no kernel). PTX, as gpu_check loads it: the JIT compiles it for the
/// device (sm_90a PTX for a 9.0 one), and the fake driver takes it; the tuner's CUBINs are
/// bench_gpu's. Products of 16-bit values are exact in fp32; only the order of the sums differs.
int wrong_elements(const lower::GpuProgram& g, const ComputeDAG& dag, bool bf16, int64_t M,
                   int64_t N, int64_t K, uint32_t seed) {
  const cuda::CompiledProgram compiled =
      cuda::compile_program(g, g.kernels[0].warpgroup_mma ? "sm_90a" : cuda::device_target(0).arch,
                            {}, cuda::ImageKind::ptx);
  cuda::Program program(compiled.image, compiled.plan);
  auto halves = [&](int64_t n, uint32_t s) {
    const std::vector<float> f = random_floats(static_cast<size_t>(n), s);
    std::vector<uint16_t> bits;
    for (float x : f) bits.push_back(bf16 ? bfloat16(x).bits : float16(x).bits);
    return bits;
  };
  const std::vector<uint16_t> x = halves(M * K, seed), y = halves(K * N, seed + 1);
  cuda::DeviceBuffer da(x.size() * 2), db(y.size() * 2), dc(M * N * 4);
  da.upload(x.data(), x.size() * 2);
  db.upload(y.data(), y.size() * 2);
  dc.fill_bytes(0xFF);  // NaN: an element no thread writes is wrong
  program.launch({da.ptr(), db.ptr(), dc.ptr()});
  cuda::Context::get().synchronize();
  if (contains(cuda::Context::get().info().name, "fake")) return -1;
  std::vector<float> got(static_cast<size_t>(M * N)), want(static_cast<size_t>(M * N));
  dc.download(got.data(), got.size() * 4);
  evaluate(dag, {const_cast<uint16_t*>(x.data()), const_cast<uint16_t*>(y.data()), want.data()});
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])))) ++wrong;
  return wrong;
}
}  // namespace

TEST_SUITE("cuda.device") {
  TEST_CASE("device_info describes a real GPU") {
    REQUIRE(cuda::device_count() >= 1);
    const cuda::DeviceInfo info = cuda::device_info(0);
    MESSAGE(info.name << ": " << info.arch() << ", " << info.sm_count << " SMs, driver "
                      << cuda::driver_version());
    CHECK(info.device == 0);
    CHECK(!info.name.empty());
    CHECK(info.compute_major >= 5);
    CHECK(info.sm_count > 0);
    CHECK(info.max_threads_per_block >= 512);
    CHECK(info.max_block_dim[0] >= 512);
    CHECK(info.max_grid_dim[0] >= 65535);
    CHECK(info.warp_size == 32);
    CHECK(info.max_shared_memory_per_block >= 48 * 1024);
    CHECK(info.max_shared_memory_per_block_optin >= info.max_shared_memory_per_block);
    CHECK(info.max_shared_memory_per_multiprocessor >= info.max_shared_memory_per_block_optin);
    CHECK(info.max_threads_per_multiprocessor >= info.max_threads_per_block);
    CHECK(info.max_registers_per_block >= 32 * 1024);
    CHECK(info.l2_cache_bytes > 0);
    CHECK(info.arch() == "sm_" + std::to_string(info.compute_major * 10 + info.compute_minor));
    CHECK(cuda::Context::get().info().name == info.name);
    CHECK(&cuda::Context::get(0) == &cuda::Context::get());
    CHECK_THROWS_WITH_AS(cuda::device_info(cuda::device_count()),
                         doctest::Contains("[loom.cuda.E911]"), user_error);
  }

  TEST_CASE("records name the GPU, and the best recorded schedule is this GPU's") {
    const std::string name = cuda::device_info(0).name;
    CHECK(cuda::GpuMeasurer().device() == name);
    cuda::GpuMeasurerOptions absent;
    absent.device = cuda::device_count();
    CHECK(cuda::GpuMeasurer({}, absent).device().empty());
    // Two programs of one task: the faster measured on another GPU, the slower on this one.
    auto a = placeholder<float>("A", {64, 64});
    auto b = placeholder<float>("B", {64, 64});
    const Task task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                       std::vector<ir::Tensor>{ops::matmul(a, b)}),
                    Target::cuda("sm_90"));
    std::mt19937_64 rng(3);
    const auto programs =
        search::sample_programs(search::generate_sketches(task), task, {}, rng, 2);
    REQUIRE(programs.size() == 2);
    REQUIRE(programs[0].to_string() != programs[1].to_string());
    search::MeasureResult fast, slow;
    fast.costs = {1e-6};
    slow.costs = {2e-6};
    search::TuningRecord elsewhere = search::make_tuning_record(task, programs[0], fast);
    elsewhere.device = "another GPU";
    search::TuningRecord here = search::make_tuning_record(task, programs[1], slow);
    here.device = name;
    const std::string path = "loom_test_gpu_records_by_device.jsonl";
    std::remove(path.c_str());
    search::append_records(path, {elsewhere, here});
    const auto best = cuda::best_recorded_schedule(task, path);
    REQUIRE(best.has_value());
    CHECK(best->to_string() == programs[1].to_string());
    std::remove(path.c_str());
  }

  TEST_CASE("upload and download round-trip, zero clears, moves transfer ownership") {
    const std::vector<float> data = random_floats(1000, 3);
    const size_t bytes = data.size() * sizeof(float);
    cuda::DeviceBuffer buffer(bytes);
    CHECK(buffer.bytes() == bytes);
    CHECK(buffer.ptr() != 0);
    CHECK(buffer.valid());
    buffer.upload(data.data(), bytes);
    std::vector<float> back(data.size(), 0.0f);
    buffer.download(back.data(), bytes);
    CHECK(back == data);

    buffer.zero();
    buffer.download(back.data(), bytes);
    CHECK(back == std::vector<float>(data.size(), 0.0f));

    buffer.upload(data.data(), 10 * sizeof(float));  // a prefix
    buffer.download(back.data(), 20 * sizeof(float));
    CHECK(std::vector<float>(back.begin(), back.begin() + 10) ==
          std::vector<float>(data.begin(), data.begin() + 10));
    CHECK(back[10] == 0.0f);

    CHECK_THROWS_WITH_AS(buffer.upload(data.data(), bytes + 4),
                         doctest::Contains("[loom.cuda.E918]"), user_error);

    const cuda::CUdeviceptr ptr = buffer.ptr();
    cuda::DeviceBuffer moved(std::move(buffer));
    CHECK(moved.ptr() == ptr);
    CHECK(buffer.ptr() == 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
    cuda::DeviceBuffer assigned(16);
    assigned = std::move(moved);
    CHECK(assigned.ptr() == ptr);
    CHECK(assigned.bytes() == bytes);

    // Another thread may use the buffer: every operation makes the context current first.
    std::vector<float> from_thread(data.size(), 1.0f);
    std::string thread_error;
    std::thread([&] {
      try {
        assigned.download(from_thread.data(), bytes);
      } catch (const std::exception& e) {
        thread_error = e.what();
      }
    }).join();
    CHECK(thread_error == "");
    CHECK(std::vector<float>(from_thread.begin(), from_thread.begin() + 10) ==
          std::vector<float>(data.begin(), data.begin() + 10));
  }

  TEST_CASE("saxpy compiled by NVRTC for the device runs on it") {
    const cuda::Module module(kernels_ptx());
    CHECK(module.valid());
    CHECK(module.handle() != nullptr);
    const cuda::Function saxpy = module.function("saxpy");
    CHECK(saxpy.valid());
    CHECK(saxpy.name() == "saxpy");
    CHECK(saxpy.num_registers() > 0);
    CHECK(saxpy.max_threads_per_block() > 0);
    CHECK(saxpy.static_shared_memory() == 0);
    CHECK(saxpy.local_memory() == 0);
    check_saxpy(module, 10000);  // not a multiple of the block size
    check_saxpy(module, 1);

    CHECK_THROWS_WITH_AS(module.function("saxpy_missing"), doctest::Contains("[loom.cuda.E914]"),
                         backend_error);
    CHECK_THROWS_WITH_AS(module.function("saxpy_missing"), doctest::Contains("saxpy, "),
                         backend_error);  // the message lists the module's kernels
  }

  TEST_CASE("PTX the JIT rejects throws [loom.cuda.E913] with the JIT's log") {
    const std::string bad_ptx =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry k() { this is not ptx; }\n";
    CHECK_THROWS_WITH_AS(cuda::Module{bad_ptx}, doctest::Contains("[loom.cuda.E913]"),
                         backend_error);
    CHECK_THROWS_WITH_AS(cuda::Module{bad_ptx}, doctest::Contains("JIT error log:"), backend_error);
    CHECK(!cuda::Context::get().needs_reset());
  }

  TEST_CASE("time_launches measures seconds per call with CUDA events") {
    const cuda::Module module(kernels_ptx());
    const cuda::Function saxpy = module.function("saxpy");
    int n = 1 << 20;
    cuda::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
    dx.zero();
    dy.zero();
    float a = 1.5f;
    cuda::CUdeviceptr px = dx.ptr(), py = dy.ptr();
    auto run = [&] {
      cuda::launch(saxpy, {static_cast<unsigned>(n) / 256, 1, 1}, {256, 1, 1}, 0,
                   {&a, &px, &py, &n});
    };
    run();  // warm-up
    const double seconds = cuda::time_launches(run, 20);
    MESSAGE("saxpy on 2^20 floats: " << seconds * 1e6 << " us");
    CHECK(seconds > 0.0);
    CHECK(seconds < 0.1);
    CHECK_THROWS_WITH_AS(cuda::time_launches(run, 0), doctest::Contains("[loom.cuda.E911]"),
                         user_error);
  }

  TEST_CASE("a block of 2048 threads is refused with the limit it breaks") {
    const cuda::Module module(kernels_ptx());
    const cuda::Function saxpy = module.function("saxpy");
    int n = 4096;
    cuda::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
    float a = 1.0f;
    cuda::CUdeviceptr px = dx.ptr(), py = dy.ptr();
    std::string message;
    try {
      cuda::launch(saxpy, {2, 1, 1}, {2048, 1, 1}, 0, {&a, &px, &py, &n});
      cuda::Context::get().synchronize();
    } catch (const backend_error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(contains(message, "[loom.cuda.E915]"));
    CHECK(contains(message, "block 2048x1x1"));
    CHECK(contains(message, "the block has 2048 threads"));
    // Not a sticky error: the context goes on working.
    CHECK(!cuda::Context::get().needs_reset());
    check_saxpy(module, 1000);
  }

  TEST_CASE("dynamic shared memory above 48 KiB needs set_max_dynamic_shared_memory") {
    const cuda::DeviceInfo& info = cuda::Context::get().info();
    const int n = 16 * 1024;  // 64 KiB of floats
    const unsigned shared = n * sizeof(float);
    if (info.max_shared_memory_per_block_optin < static_cast<int>(shared)) {
      MESSAGE("the device cannot opt in to 64 KiB of shared memory per block; not tested");
      return;
    }
    const cuda::Module module(kernels_ptx());
    cuda::Function copy = module.function("through_shared");
    const std::vector<float> x = random_floats(n, 4);
    cuda::DeviceBuffer dx(shared), dy(shared);
    dx.upload(x.data(), shared);
    int count = n;
    cuda::CUdeviceptr px = dx.ptr(), py = dy.ptr();
    std::vector<void*> params = {&px, &py, &count};
    CHECK_THROWS_WITH_AS(cuda::launch(copy, {1, 1, 1}, {256, 1, 1}, shared, params),
                         doctest::Contains("set_max_dynamic_shared_memory(65536)"), backend_error);
    CHECK(!cuda::Context::get().needs_reset());
    copy.set_max_dynamic_shared_memory(static_cast<int>(shared));
    CHECK(copy.max_dynamic_shared_memory() >= static_cast<int>(shared));
    cuda::launch(copy, {1, 1, 1}, {256, 1, 1}, shared, params);
    std::vector<float> y(n);
    dy.download(y.data(), shared);
    int wrong = 0;
    for (int i = 0; i < n; ++i)
      if (y[n - 1 - i] != x[i]) ++wrong;
    CHECK(wrong == 0);
  }

  TEST_CASE("Program::launch refuses an output that overlaps another argument [loom.cuda.E925]") {
    auto a = placeholder<float>("A", {16, 16});
    auto b = placeholder<float>("B", {16, 16});
    auto c = ops::matmul(a, b);
    const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                        std::vector<ir::Tensor>{c});
    const Target target = cuda::device_target(0);
    const lower::GpuProgram g =
        lower::lower_gpu(sched::default_schedule(dag, target), target, "overlap");
    const cuda::CompiledProgram compiled =
        cuda::compile_program(g, target.arch, {}, cuda::ImageKind::ptx);
    CHECK(compiled.plan.arg_written == std::vector<bool>{false, false, true});
    cuda::Program program(compiled.image, compiled.plan);
    cuda::DeviceBuffer da(16 * 16 * 4), db(16 * 16 * 4), dc(16 * 16 * 4);
    // C written over A, or over the second half of A and into what follows it.
    CHECK_THROWS_WITH_AS(program.launch({da.ptr(), db.ptr(), da.ptr()}),
                         doctest::Contains("[loom.cuda.E925]"), user_error);
    CHECK_THROWS_WITH_AS(
        program.launch({da.ptr(), db.ptr(), da.ptr() + 512}),
        doctest::Contains("argument 2 (an output, 1024 bytes) overlaps argument 0"), user_error);
    // Inputs may share; separate outputs run.
    program.launch({da.ptr(), da.ptr(), dc.ptr()});
    program.launch({da.ptr(), db.ptr(), dc.ptr()});
    cuda::Context::get().synchronize();
  }

  TEST_CASE("a loom program whose shared arrays pass 48 KiB runs on dynamic shared memory") {
    // C[64, 64] = A[64, 256] B[256, 64], one block of 64 threads per 8 rows; the whole of B
    // (64 KiB) copied into shared memory once per block.
    auto a = placeholder<float>("A", {64, 256});
    auto b = placeholder<float>("B", {256, 64});
    auto c = ops::matmul(a, b);
    const auto dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                        std::vector<ir::Tensor>{c});
    sched::State s(dag);
    s.split(c.name(), 0, {8});  // i.0 i.1 j k
    s.annotate(c.name(), 0, sched::Annotation::BlockIdxX);
    s.annotate(c.name(), 2, sched::Annotation::ThreadIdxX);
    const std::string bs = s.cache_read("B", ir::MemoryScope::Shared, {c.name()});
    s.compute_at(bs, c.name(), 0);
    s.fuse(bs, {0, 1});
    s.split(bs, 0, {64});
    s.annotate(bs, 1, sched::Annotation::ThreadIdxX);
    const Target target = cuda::device_target(0);
    REQUIRE(target.max_shared_memory_per_block >= 64 * 1024);
    const lower::GpuProgram g = lower::lower_gpu(s, target, "big_shared");
    REQUIRE(g.kernels[0].shared_bytes() == 64 * 1024);
    const cuda::CompiledProgram compiled =
        cuda::compile_program(g, target.arch, {}, cuda::ImageKind::ptx);
    CHECK(contains(compiled.source, "extern __shared__"));
    CHECK(compiled.plan.kernels[0].dynamic_shared_bytes == 64 * 1024);
    // Without the attribute Program sets, the driver (or the fake) refuses the launch.
    cuda::Program program(compiled.image, compiled.plan);
    // Its kernels, as the device made them.
    REQUIRE(program.functions().size() == compiled.plan.kernels.size());
    CHECK(program.functions()[0].num_registers() > 0);
    CHECK(program.functions()[0].local_memory() >= 0);
    const std::vector<float> x = random_floats(64 * 256, 5), y = random_floats(256 * 64, 6);
    cuda::DeviceBuffer da(x.size() * 4), db(y.size() * 4), dc(64 * 64 * 4);
    da.upload(x.data(), x.size() * 4);
    db.upload(y.data(), y.size() * 4);
    program.launch({da.ptr(), db.ptr(), dc.ptr()});
    cuda::Context::get().synchronize();
    if (contains(cuda::Context::get().info().name, "fake")) return;  // it runs no kernel
    std::vector<float> got(64 * 64), want(64 * 64);
    dc.download(got.data(), got.size() * 4);
    evaluate(*dag, {const_cast<float*>(x.data()), const_cast<float*>(y.data()), want.data()});
    int wrong = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::abs(got[i] - want[i]) > 1e-3f + 1e-3f * std::abs(want[i])) ++wrong;
    CHECK(wrong == 0);
  }

  TEST_CASE(
      "tensor-core tiles of bf16 and fp16 matmuls run on the device as the interpreter says") {
    const cuda::DeviceInfo info = cuda::device_info(0);
    if (info.compute_major < 8) {
      MESSAGE("mma.sync m16n8k16 needs sm_80; this device is " << info.name);
      return;
    }
    const Target target = cuda::device_target(0);
    struct config {
      loom_test::mma_tiling t;
      int64_t M, N, K;
    };
    const std::vector<config> configs = {{{1, 2, 2, 2, true, true}, 256, 256, 256},
                                         {{2, 2, 4, 2, true, true}, 512, 256, 128},
                                         {{1, 1, 1, 1, false, true}, 64, 32, 64}};
    for (const bool bf16 : {true, false})
      for (const config& c : configs) {
        CAPTURE(bf16);
        CAPTURE(c.M);
        const auto dag = bf16 ? loom_test::half_matmul<bfloat16>(c.M, c.N, c.K)
                              : loom_test::half_matmul<float16>(c.M, c.N, c.K);
        const lower::GpuProgram g =
            lower::lower_gpu(loom_test::tensor_core_matmul(dag, c.t), target, "mma");
        CHECK(wrong_elements(g, *dag, bf16, c.M, c.N, c.K, 11) <= 0);
      }
  }

  TEST_CASE("warpgroup MMAs (wgmma, sm_90a) of bf16 and fp16 matmuls run as the interpreter says") {
    const cuda::DeviceInfo info = cuda::device_info(0);
    if (info.compute_major != 9 || info.compute_minor != 0) {
      MESSAGE("wgmma.mma_async needs sm_90a (compute capability 9.0); this device is "
              << info.name);
      return;
    }
    Target target = cuda::device_target(0);
    target.arch = "sm_90a";
    struct config {
      loom_test::warpgroup_tiling t;
      bool b_transposed;
      int64_t M, N, K;
    };
    // B [K, N] (MN-major) and [N, K] (K-major); two warpgroups in 3 pipeline stages (72 KiB of
    // dynamic shared memory, its base rounded to 1024 bytes by the kernel); rows past 128
    // bytes in chunks (m64n256 with B [K, N]; A and B [N, K] 128 of k a copy).
    const std::vector<config> configs = {
        {{1, 8, 64, true, 0}, false, 256, 256, 256},  {{1, 16, 32, true, 0}, true, 128, 256, 256},
        {{2, 8, 64, true, 3}, false, 512, 128, 512},  {{1, 4, 32, true, 2}, false, 128, 64, 128},
        {{2, 32, 64, true, 3}, false, 256, 512, 256}, {{1, 8, 128, true, 2}, true, 128, 128, 512}};
    for (const bool bf16 : {true, false})
      for (const config& c : configs) {
        CAPTURE(bf16);
        CAPTURE(c.M);
        CAPTURE(c.b_transposed);
        const auto dag = c.b_transposed
                             ? (bf16 ? loom_test::matmul_b_transposed<bfloat16>(c.M, c.N, c.K)
                                     : loom_test::matmul_b_transposed<float16>(c.M, c.N, c.K))
                             : (bf16 ? loom_test::half_matmul<bfloat16>(c.M, c.N, c.K)
                                     : loom_test::half_matmul<float16>(c.M, c.N, c.K));
        const lower::GpuProgram g = lower::lower_gpu(
            loom_test::warpgroup_matmul(dag, c.t, c.b_transposed), target, "wgmma");
        REQUIRE(g.kernels[0].wgmma_operands.size() == 2);
        CHECK(wrong_elements(g, *dag, bf16, c.M, c.N, c.K, 21) <= 0);
      }
  }

  TEST_CASE(
      "a kernel that crashes is a sticky error that Context::reset() recovers from, or says the "
      "process must restart") {
    cuda::Context& context = cuda::Context::get();
    cuda::DeviceBuffer before(1024);
    cuda::Module old_module(kernels_ptx());
    const cuda::Function old_saxpy = old_module.function("saxpy");
    const cuda::Function crash = old_module.function("write_through");

    cuda::CUdeviceptr null_ptr = 0;
    std::string message;
    try {
      cuda::launch(crash, {1, 1, 1}, {32, 1, 1}, 0, {&null_ptr});
      context.synchronize();
    } catch (const backend_error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(contains(message, "[loom.cuda.E916]"));
    CHECK(contains(message, "Context::reset()"));
    CHECK(context.needs_reset());
    // Every call fails the same way until the reset.
    CHECK_THROWS_WITH_AS(cuda::DeviceBuffer(64), doctest::Contains("[loom.cuda.E916]"),
                         backend_error);

    const std::uint64_t generation = context.generation();
    // Whether a reset recovers depends on the driver: on driver 580.159 (H100, seen 2026-11-22)
    // the primary context cannot be retained again after an illegal address, which is why
    // GpuMeasurer runs candidates in a worker process. Either way the outcome must be clear.
    try {
      context.reset();
    } catch (const backend_error& e) {
      const std::string what = e.what();
      MESSAGE("this driver does not recover from a crashed kernel in-process: " << what);
      CHECK(contains(what, "[loom.cuda.E912]"));
      CHECK(contains(what, "Restart the process"));
      return;
    }
    CHECK(context.generation() == generation + 1);
    CHECK(!context.needs_reset());

    // What was made before the reset is invalid, and says so.
    CHECK(!before.valid());
    CHECK(!old_module.valid());
    CHECK(!old_saxpy.valid());
    float value = 0.0f;
    CHECK_THROWS_WITH_AS(before.upload(&value, sizeof value), doctest::Contains("[loom.cuda.E917]"),
                         user_error);
    CHECK_THROWS_WITH_AS(old_module.function("saxpy"), doctest::Contains("[loom.cuda.E917]"),
                         user_error);
    CHECK_THROWS_WITH_AS(cuda::launch(old_saxpy, {1, 1, 1}, {1, 1, 1}, 0, {}),
                         doctest::Contains("[loom.cuda.E917]"), user_error);

    // A module loaded after the reset works.
    const cuda::Module module(kernels_ptx());
    check_saxpy(module, 5000);
    context.synchronize();
  }

}  // TEST_SUITE

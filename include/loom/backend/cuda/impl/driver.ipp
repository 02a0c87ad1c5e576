// Bodies of loom/backend/cuda/driver.hpp: the CUDA driver API through dlopen.
//
// Error ids: E910 no driver or device, E911 bad argument (user), E912 a driver call failed,
// E913 PTX rejected by the JIT, E914 no such kernel, E915 launch refused, E916 sticky error (a
// kernel crashed), E917 empty or stale object (user), E918 copy larger than the buffer (user).
//
// Every number below (enum values, attribute and JIT option numbers) was checked against CUDA
// 13.0's cuda.h; they have not changed since CUDA 11. The entry points are the ones cuda.h maps
// its names to (`#define cuMemAlloc cuMemAlloc_v2` and so on), without the per-thread default
// stream variants (_ptds/_ptsz): loom uses the legacy default stream.
#include "loom/backend/cuda/driver.hpp"
#include "loom/error.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cuda {
namespace detail {

/// The constants of cuda.h that loom uses, under cuda.h's names.
namespace cu {
// CUresult
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_DEVICE_UNAVAILABLE = 46;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
constexpr CUresult CUDA_ERROR_CONTAINED = 226;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
constexpr CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;
constexpr CUresult CUDA_ERROR_LAUNCH_TIMEOUT = 702;
constexpr CUresult CUDA_ERROR_ASSERT = 710;
constexpr CUresult CUDA_ERROR_HARDWARE_STACK_ERROR = 714;
constexpr CUresult CUDA_ERROR_ILLEGAL_INSTRUCTION = 715;
constexpr CUresult CUDA_ERROR_MISALIGNED_ADDRESS = 716;
constexpr CUresult CUDA_ERROR_INVALID_ADDRESS_SPACE = 717;
constexpr CUresult CUDA_ERROR_INVALID_PC = 718;
constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;
constexpr CUresult CUDA_ERROR_TENSOR_MEMORY_LEAK = 721;
constexpr CUresult CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
constexpr CUresult CUDA_ERROR_EXTERNAL_DEVICE = 911;
// CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2;  // Y = 3, Z = 4
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;   // Y = 6, Z = 7
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36;
constexpr int CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37;
constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
// CUfunction_attribute
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// CUjit_option
constexpr int CU_JIT_INFO_LOG_BUFFER = 3;
constexpr int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr int CU_JIT_LOG_VERBOSE = 12;
// CUevent_flags
constexpr unsigned CU_EVENT_DEFAULT = 0;
}  // namespace cu

/// Names of the CUresult values loom reports, for when the driver cannot name them itself (the
/// toolkit's stub library answers every call, cuGetErrorName included, with
/// CUDA_ERROR_STUB_LIBRARY).
LOOM_DECL const char* known_error_name(CUresult rc) noexcept {
  switch (rc) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 226: return "CUDA_ERROR_CONTAINED";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 710: return "CUDA_ERROR_ASSERT";
    case 714: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 717: return "CUDA_ERROR_INVALID_ADDRESS_SPACE";
    case 718: return "CUDA_ERROR_INVALID_PC";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 721: return "CUDA_ERROR_TENSOR_MEMORY_LEAK";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 911: return "CUDA_ERROR_EXTERNAL_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

/// Errors after which the context is unusable: cuda.h says of each that "any further CUDA work
/// will return the same error".
LOOM_DECL bool is_sticky(CUresult rc) noexcept {
  switch (rc) {
    case cu::CUDA_ERROR_CONTAINED:
    case cu::CUDA_ERROR_ILLEGAL_ADDRESS:
    case cu::CUDA_ERROR_LAUNCH_TIMEOUT:
    case cu::CUDA_ERROR_ASSERT:
    case cu::CUDA_ERROR_HARDWARE_STACK_ERROR:
    case cu::CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case cu::CUDA_ERROR_MISALIGNED_ADDRESS:
    case cu::CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case cu::CUDA_ERROR_INVALID_PC:
    case cu::CUDA_ERROR_LAUNCH_FAILED:
    case cu::CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case cu::CUDA_ERROR_EXTERNAL_DEVICE: return true;
    default: return false;
  }
}

/// The driver entry points loom calls, looked up once, under cuda.h's unversioned names.
struct driver_api {
  std::string error;   // why there is no usable device; empty when there is one
  std::string loaded;  // the library loaded, the driver version, the device count
  int version = 0;     // cuDriverGetVersion: 13000 for 13.0
  int devices = 0;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxReset)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, std::size_t) = nullptr;
  // The options are `CUjit_option*`, a C enum: int-sized.
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
};

/// Looks up the first of `names` that `lib` has; false when it has none.
template <class Fn>
bool driver_resolve(void* lib, Fn& fn, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    fn = reinterpret_cast<Fn>(dlsym(lib, name));
    if (fn) return true;
  }
  return false;
}

/// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)".
LOOM_DECL std::string describe(const driver_api& api, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(rc, &name) != 0) name = nullptr;
  if (api.cuGetErrorString && api.cuGetErrorString(rc, &text) != 0) text = nullptr;
  if (!name) name = known_error_name(rc);
  std::string out = name ? std::string(name) : "CUDA error " + std::to_string(rc);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

LOOM_DECL std::string version_string(int version) {
  if (version <= 0) return "(version unknown)";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

LOOM_DECL driver_api load_driver() {
  driver_api api;
  const char* env = std::getenv("LOOM_CUDA_DRIVER_LIBRARY");
  const bool named = env && *env;
  const std::string library = named ? env : "libcuda.so.1";
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* reason = dlerror();
    const std::string text = reason ? reason : "dlopen failed";
    // dlerror() usually names the file already.
    api.error = "could not load " +
                (text.find(library) == std::string::npos ? library + ": " + text : text);
    api.error += named ? " (the file LOOM_CUDA_DRIVER_LIBRARY names)"
                       : ". libcuda.so.1 comes with the NVIDIA driver, not with the CUDA toolkit: "
                         "this machine has no NVIDIA driver, or the loader does not find it "
                         "(set LOOM_CUDA_DRIVER_LIBRARY to its full path)";
    return api;
  }
  const char* missing = nullptr;
  auto need = [&](auto& fn, std::initializer_list<const char*> names) {
    if (!missing && !driver_resolve(lib, fn, names)) missing = *names.begin();
  };
  need(api.cuInit, {"cuInit"});
  need(api.cuDriverGetVersion, {"cuDriverGetVersion"});
  need(api.cuGetErrorName, {"cuGetErrorName"});
  need(api.cuGetErrorString, {"cuGetErrorString"});
  need(api.cuDeviceGetCount, {"cuDeviceGetCount"});
  need(api.cuDeviceGet, {"cuDeviceGet"});
  need(api.cuDeviceGetName, {"cuDeviceGetName"});
  need(api.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
  need(api.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  // The _v2 primary-context calls came with CUDA 11; the older ones have the same signature.
  need(api.cuDevicePrimaryCtxRelease,
       {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
  need(api.cuDevicePrimaryCtxReset, {"cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset"});
  need(api.cuCtxSetCurrent, {"cuCtxSetCurrent"});
  need(api.cuCtxSynchronize, {"cuCtxSynchronize"});
  // No fallback here: the unversioned memory calls take 32-bit device pointers.
  need(api.cuMemAlloc, {"cuMemAlloc_v2"});
  need(api.cuMemFree, {"cuMemFree_v2"});
  need(api.cuMemcpyHtoD, {"cuMemcpyHtoD_v2"});
  need(api.cuMemcpyDtoH, {"cuMemcpyDtoH_v2"});
  need(api.cuMemsetD8, {"cuMemsetD8_v2"});
  need(api.cuModuleLoadDataEx, {"cuModuleLoadDataEx"});
  need(api.cuModuleUnload, {"cuModuleUnload"});
  need(api.cuModuleGetFunction, {"cuModuleGetFunction"});
  need(api.cuLaunchKernel, {"cuLaunchKernel"});
  need(api.cuFuncGetAttribute, {"cuFuncGetAttribute"});
  need(api.cuFuncSetAttribute, {"cuFuncSetAttribute"});
  need(api.cuEventCreate, {"cuEventCreate"});
  need(api.cuEventRecord, {"cuEventRecord"});
  need(api.cuEventSynchronize, {"cuEventSynchronize"});
  // cuEventElapsedTime_v2 is CUDA 12.8's; older drivers have only the first version.
  need(api.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  need(api.cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"});
  if (missing) {
    api = driver_api{};
    api.error = library + " has no symbol " + missing +
                ": it is not the CUDA driver library, or a driver older than CUDA 11";
    return api;  // `lib` stays loaded: unloading a driver library is not worth the risk
  }

  std::string path = library;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(api.cuInit), &info) && info.dli_fname) path = info.dli_fname;
  if (api.cuDriverGetVersion(&api.version) != 0) api.version = 0;
  const std::string what = library + (path != library ? " (" + path + ")" : std::string()) +
                           ", CUDA driver " + version_string(api.version);

  CUresult rc = api.cuInit(0);
  if (rc != cu::CUDA_SUCCESS) {
    api.error = "loaded " + what + ", but cuInit(0) failed: " + describe(api, rc);
    if (rc == cu::CUDA_ERROR_STUB_LIBRARY)
      api.error +=
          ". This is the CUDA toolkit's stub library (for linking only), not the "
          "driver's: remove the toolkit's lib64/stubs folder from LD_LIBRARY_PATH and "
          "LOOM_CUDA_DRIVER_LIBRARY";
    else if (rc == cu::CUDA_ERROR_NO_DEVICE)
      api.error += ". The driver sees no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    else if (rc == cu::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
      api.error +=
          ". libcuda does not match the loaded kernel module: reinstall the driver or "
          "reboot";
    else if (rc == cu::CUDA_ERROR_DEVICE_UNAVAILABLE)
      api.error += ". The GPU is busy or unavailable (an exclusive-process compute mode?)";
    return api;
  }
  int count = 0;
  rc = api.cuDeviceGetCount(&count);
  if (rc != cu::CUDA_SUCCESS || count <= 0) {
    api.error = "loaded " + what + ", but it reports no device" +
                (rc != cu::CUDA_SUCCESS ? ": cuDeviceGetCount failed: " + describe(api, rc)
                                        : std::string(" (check CUDA_VISIBLE_DEVICES)"));
    return api;
  }
  api.devices = count;
  api.loaded =
      "loaded " + what + ", " + std::to_string(count) + " device" + (count == 1 ? "" : "s");
  return api;
}

/// The process's driver, loaded by the first caller (a function-local static: thread-safe).
LOOM_DECL const driver_api& driver() {
  static const driver_api api = load_driver();
  return api;
}

/// The driver, or loom::backend_error [loom.cuda.E910] saying why there is no device.
LOOM_DECL const driver_api& driver_or_throw() {
  const driver_api& api = driver();
  if (!api.error.empty()) {
    LOOM_BACKEND_FAIL("loom.cuda.E910") << "no CUDA device is available: " << api.error;
  }
  return api;
}

/// The one door into the private parts of Context and Function.
struct driver_access {
  static Context* create(int device) { return new Context(device); }
  static void mark_sticky(Context& context) {
    context.needs_reset_.store(true, std::memory_order_release);
  }
  static Function make_function(std::shared_ptr<loaded_module> module, CUfunction handle,
                                std::string name) {
    Function f;
    f.module_ = std::move(module);
    f.handle_ = handle;
    f.name_ = std::move(name);
    return f;
  }
};

/// Throws the backend_error for a failed call `call`: id `id`, or [loom.cuda.E916] with the
/// advice to reset when the error is sticky (and then marks `context` as needing a reset).
[[noreturn]] LOOM_DECL void driver_fail(const std::string& call, CUresult rc, Context* context,
                                        const char* id, const std::string& more = {}) {
  const bool sticky = is_sticky(rc);
  if (sticky && context) driver_access::mark_sticky(*context);
  // LOOM_BACKEND_FAIL spelled out: the macro's loop hides from the compiler that this never
  // returns.
  ::loom::detail::error_reporter reporter(true, ::loom::detail::error_tier::backend,
                                          sticky ? "loom.cuda.E916" : id);
  reporter.stream() << call << " failed: " << describe(driver(), rc) << more;
  if (sticky)
    reporter.stream() << "\nA kernel failed while running"
                      << (context ? " on device " + std::to_string(context->device()) : "")
                      << ". The error is sticky: every later call on this device fails the same "
                         "way until loom::cuda::Context::reset(), which invalidates the "
                         "DeviceBuffers, Modules and Functions made before it.";
  reporter.issue();
}

LOOM_DECL void driver_check(CUresult rc, const char* call, Context* context) {
  if (rc != cu::CUDA_SUCCESS) driver_fail(call, rc, context, "loom.cuda.E912");
}

/// A loaded module; unloads itself unless its context was reset since (the handle is dead then).
struct loaded_module {
  Context* context = nullptr;
  std::uint64_t generation = 0;
  CUmodule handle = nullptr;
  std::string info_log;
  std::vector<std::string> kernels;  // the PTX's .entry names, for "no such kernel" errors

  loaded_module() = default;
  loaded_module(const loaded_module&) = delete;
  loaded_module& operator=(const loaded_module&) = delete;
  ~loaded_module() {
    if (!handle || context->generation() != generation) return;
    const driver_api& api = driver();
    api.cuCtxSetCurrent(context->handle());
    api.cuModuleUnload(handle);  // errors ignored: a destructor cannot report them
  }
};

/// The names of the kernels (`.entry` directives) of a PTX text.
LOOM_DECL std::vector<std::string> ptx_entries(const std::string& ptx) {
  std::vector<std::string> names;
  for (std::size_t at = ptx.find(".entry"); at != std::string::npos;
       at = ptx.find(".entry", at + 6)) {
    std::size_t begin = at + 6;
    while (begin < ptx.size() && (ptx[begin] == ' ' || ptx[begin] == '\t')) ++begin;
    std::size_t end = begin;
    while (end < ptx.size() && ptx[end] != '(' && ptx[end] != ' ' && ptx[end] != '\n' &&
           ptx[end] != '\t')
      ++end;
    if (end > begin) names.push_back(ptx.substr(begin, end - begin));
  }
  return names;
}

/// The value of PTX directive `directive` (".version", ".target"), or "".
LOOM_DECL std::string ptx_directive(const std::string& ptx, const char* directive) {
  std::size_t at = ptx.find(std::string("\n") + directive + " ");
  if (at == std::string::npos) return {};
  at += std::strlen(directive) + 2;
  std::size_t end = ptx.find('\n', at);
  return ptx.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

/// One CUDA event for timing; destroyed unless its context was reset since.
class timing_event {
 public:
  explicit timing_event(Context& context) : context_(context), generation_(context.generation()) {
    driver_check(driver().cuEventCreate(&event_, cu::CU_EVENT_DEFAULT), "cuEventCreate", &context);
  }
  timing_event(const timing_event&) = delete;
  timing_event& operator=(const timing_event&) = delete;
  ~timing_event() {
    if (event_ && context_.generation() == generation_) driver().cuEventDestroy(event_);
  }
  CUevent get() const { return event_; }

 private:
  Context& context_;
  std::uint64_t generation_;
  CUevent event_ = nullptr;
};

/// Why a launch could have been refused: every limit of the device or the kernel it breaks.
/// Queries that fail are skipped (this runs while an error is being reported).
LOOM_DECL std::string launch_hint(const Function& function, std::array<unsigned, 3> grid,
                                  std::array<unsigned, 3> block, unsigned shared_bytes,
                                  CUresult rc) {
  const driver_api& api = driver();
  const DeviceInfo& device = function.context().info();
  auto attribute = [&](int which) {
    int value = -1;
    if (api.cuFuncGetAttribute(&value, which, function.handle()) != 0) value = -1;
    return value;
  };
  const int max_threads = attribute(cu::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  const int registers = attribute(cu::CU_FUNC_ATTRIBUTE_NUM_REGS);
  const int static_shared = attribute(cu::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  const int max_dynamic = attribute(cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  const unsigned long long threads =
      static_cast<unsigned long long>(block[0]) * block[1] * block[2];
  const char* axis = "xyz";
  std::ostringstream out;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0)
      out << "\n- " << (grid[i] == 0 ? "grid" : "block") << " dimension " << axis[i] << " is 0";
    if (device.max_block_dim[i] > 0 && block[i] > static_cast<unsigned>(device.max_block_dim[i]))
      out << "\n- block dimension " << axis[i] << " is " << block[i] << ", more than the device's "
          << device.max_block_dim[i];
    if (device.max_grid_dim[i] > 0 && grid[i] > static_cast<unsigned>(device.max_grid_dim[i]))
      out << "\n- grid dimension " << axis[i] << " is " << grid[i] << ", more than the device's "
          << device.max_grid_dim[i];
  }
  if (max_threads > 0 && threads > static_cast<unsigned long long>(max_threads)) {
    out << "\n- the block has " << threads << " threads (" << block[0] << " x " << block[1] << " x "
        << block[2] << "), more than the " << max_threads << " this kernel allows";
    if (registers > 0)
      out << " (device limit " << device.max_threads_per_block << "; the kernel uses " << registers
          << " registers per thread, which can lower it)";
  }
  if (rc == cu::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES && registers > 0 &&
      threads * static_cast<unsigned long long>(registers) >
          static_cast<unsigned long long>(device.max_registers_per_block))
    out << "\n- " << registers << " registers x " << threads << " threads need "
        << threads * registers << " registers, more than the " << device.max_registers_per_block
        << " a block may have: use smaller blocks (or cap registers with --maxrregcount)";
  if (max_dynamic >= 0 && shared_bytes > static_cast<unsigned>(max_dynamic)) {
    out << "\n- the launch asks for " << shared_bytes << " bytes of dynamic shared memory, more "
        << "than the " << max_dynamic << " this kernel may use";
    const int room = device.max_shared_memory_per_block_optin - std::max(static_shared, 0);
    if (static_cast<long long>(shared_bytes) <= room)
      out << ": call Function::set_max_dynamic_shared_memory(" << shared_bytes << ") first";
    else
      out << " (the device allows at most " << room << " next to the kernel's " << static_shared
          << " bytes of static shared memory)";
  }
  std::string found = out.str();
  if (found.empty()) {
    if (rc == cu::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
      return "\nToo many resources asked for: registers x threads per block, or kernel arguments "
             "that do not match the kernel's parameters.";
    return "\nCheck the grid and block sizes, the shared memory size, and that the kernel "
           "arguments match the kernel's parameters.";
  }
  return "\nThe launch breaks these limits:" + found;
}

}  // namespace detail

// --- free functions ------------------------------------------------------------------------------

LOOM_DECL bool device_available(std::string* why) {
  const detail::driver_api& api = detail::driver();
  if (why) *why = api.error.empty() ? api.loaded : api.error;
  return api.error.empty();
}

LOOM_DECL int device_count() {
  const detail::driver_api& api = detail::driver();
  return api.error.empty() ? api.devices : 0;
}

LOOM_DECL int driver_version() { return detail::driver().version; }

LOOM_DECL std::string driver_error_name(CUresult result) {
  const detail::driver_api& api = detail::driver();
  const char* name = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(result, &name) != 0) name = nullptr;
  if (!name) name = detail::known_error_name(result);
  return name ? std::string(name) : "CUDA error " + std::to_string(result);
}

LOOM_DECL DeviceInfo device_info(int device) {
  const detail::driver_api& api = detail::driver_or_throw();
  LOOM_USER_CHECK(device >= 0 && device < api.devices, "loom.cuda.E911")
      << "device " << device << " does not exist: there are " << api.devices << " (ordinals 0.."
      << api.devices - 1 << ")";
  CUdevice dev = 0;
  detail::driver_check(api.cuDeviceGet(&dev, device), "cuDeviceGet", nullptr);
  DeviceInfo info;
  info.device = device;
  char name[256] = {};
  detail::driver_check(api.cuDeviceGetName(name, static_cast<int>(sizeof(name)) - 1, dev),
                       "cuDeviceGetName", nullptr);
  info.name = name;
  auto attribute = [&](int which, const char* what) {
    int value = 0;
    CUresult rc = api.cuDeviceGetAttribute(&value, which, dev);
    if (rc != detail::cu::CUDA_SUCCESS)
      detail::driver_fail(std::string("cuDeviceGetAttribute(") + what + ")", rc, nullptr,
                          "loom.cuda.E912");
    return value;
  };
  namespace cu = detail::cu;
  info.compute_major =
      attribute(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
  info.compute_minor =
      attribute(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
  info.sm_count = attribute(cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
  info.max_threads_per_block =
      attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
  for (int i = 0; i < 3; ++i) {
    info.max_block_dim[i] = attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i, "MAX_BLOCK_DIM");
    info.max_grid_dim[i] = attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i, "MAX_GRID_DIM");
  }
  info.max_shared_memory_per_block =
      attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK");
  info.max_shared_memory_per_block_optin =
      attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN");
  info.max_shared_memory_per_multiprocessor =
      attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR");
  info.max_threads_per_multiprocessor = attribute(
      cu::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "MAX_THREADS_PER_MULTIPROCESSOR");
  info.warp_size = attribute(cu::CU_DEVICE_ATTRIBUTE_WARP_SIZE, "WARP_SIZE");
  info.max_registers_per_block =
      attribute(cu::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "MAX_REGISTERS_PER_BLOCK");
  info.max_registers_per_multiprocessor = attribute(
      cu::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, "MAX_REGISTERS_PER_MULTIPROCESSOR");
  info.l2_cache_bytes = attribute(cu::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE");
  info.memory_clock_khz = attribute(cu::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "MEMORY_CLOCK_RATE");
  info.memory_bus_bits =
      attribute(cu::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "GLOBAL_MEMORY_BUS_WIDTH");
  return info;
}

// --- Context -------------------------------------------------------------------------------------

LOOM_DECL Context::Context(int device) : device_(device), info_(device_info(device)) {
  const detail::driver_api& api = detail::driver_or_throw();
  detail::driver_check(api.cuDeviceGet(&cu_device_, device), "cuDeviceGet", nullptr);
  CUcontext context = nullptr;
  detail::driver_check(api.cuDevicePrimaryCtxRetain(&context, cu_device_),
                       "cuDevicePrimaryCtxRetain", nullptr);
  handle_.store(context, std::memory_order_release);
}

LOOM_DECL Context& Context::get(int device) {
  const detail::driver_api& api = detail::driver_or_throw();
  LOOM_USER_CHECK(device >= 0 && device < api.devices, "loom.cuda.E911")
      << "device " << device << " does not exist: there are " << api.devices << " (ordinals 0.."
      << api.devices - 1 << ")";
  // Never destroyed: buffers and modules in static objects may outlive any destruction order.
  static std::mutex mutex;
  static std::vector<Context*>* contexts = new std::vector<Context*>(api.devices, nullptr);
  Context* context = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    Context*& slot = (*contexts)[static_cast<std::size_t>(device)];
    if (!slot) slot = detail::driver_access::create(device);
    context = slot;
  }
  context->make_current();
  return *context;
}

LOOM_DECL void Context::make_current() {
  detail::driver_check(detail::driver().cuCtxSetCurrent(handle()), "cuCtxSetCurrent", this);
}

LOOM_DECL void Context::synchronize() {
  make_current();
  detail::driver_check(detail::driver().cuCtxSynchronize(), "cuCtxSynchronize", this);
}

LOOM_DECL void Context::reset() {
  const detail::driver_api& api = detail::driver_or_throw();
  std::lock_guard<std::mutex> lock(mutex_);
  CUresult rc = api.cuDevicePrimaryCtxReset(cu_device_);
  if (rc != detail::cu::CUDA_SUCCESS) {
    LOOM_BACKEND_FAIL("loom.cuda.E912")
        << "cuDevicePrimaryCtxReset failed on device " << device_ << ": "
        << detail::describe(api, rc)
        << ". The device cannot be recovered in this process: restart it.";
  }
  // The reset kept the reference Context took; dropping it and retaining again gives a fresh,
  // active primary context with the reference count unchanged.
  api.cuDevicePrimaryCtxRelease(cu_device_);
  CUcontext fresh = nullptr;
  rc = api.cuDevicePrimaryCtxRetain(&fresh, cu_device_);
  if (rc != detail::cu::CUDA_SUCCESS) {
    LOOM_BACKEND_FAIL("loom.cuda.E912")
        << "cuDevicePrimaryCtxRetain failed after resetting device " << device_ << ": "
        << detail::describe(api, rc) << ". Restart the process to use the device again.";
  }
  handle_.store(fresh, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  needs_reset_.store(false, std::memory_order_release);
  make_current();
}

// --- DeviceBuffer --------------------------------------------------------------------------------

LOOM_DECL DeviceBuffer::DeviceBuffer(std::size_t bytes, Context& context)
    : context_(&context), generation_(context.generation()) {
  if (bytes == 0) return;
  const detail::driver_api& api = detail::driver();
  context.make_current();
  CUdeviceptr ptr = 0;
  CUresult rc = api.cuMemAlloc(&ptr, bytes);
  if (rc != detail::cu::CUDA_SUCCESS)
    detail::driver_fail("cuMemAlloc_v2(" + std::to_string(bytes) + " bytes)", rc, &context,
                        "loom.cuda.E912");
  ptr_ = ptr;
  bytes_ = bytes;
}

LOOM_DECL DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : context_(other.context_),
      generation_(other.generation_),
      ptr_(other.ptr_),
      bytes_(other.bytes_) {
  other.ptr_ = 0;
  other.bytes_ = 0;
}

LOOM_DECL DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));  // frees the current memory on leaving
    context_ = other.context_;
    generation_ = other.generation_;
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

LOOM_DECL DeviceBuffer::~DeviceBuffer() {
  // After a reset the address may belong to a new allocation of the new context: never free it.
  if (!valid()) return;
  const detail::driver_api& api = detail::driver();
  api.cuCtxSetCurrent(context_->handle());
  api.cuMemFree(ptr_);  // errors ignored: a destructor cannot report them
}

LOOM_DECL bool DeviceBuffer::valid() const noexcept {
  return ptr_ != 0 && context_ && context_->generation() == generation_;
}

LOOM_DECL void DeviceBuffer::check_usable(const char* what, std::size_t bytes) const {
  LOOM_USER_CHECK(bytes <= bytes_, "loom.cuda.E918")
      << "DeviceBuffer::" << what << " of " << bytes << " bytes, but the buffer has only "
      << bytes_;
  if (bytes == 0) return;
  LOOM_USER_CHECK(valid(), "loom.cuda.E917")
      << "DeviceBuffer::" << what << " on a buffer allocated before Context::reset() on device "
      << context_->device() << ": its memory is gone; allocate it again";
}

LOOM_DECL void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check_usable("upload", bytes);
  if (bytes == 0) return;
  LOOM_USER_CHECK(host != nullptr, "loom.cuda.E911") << "DeviceBuffer::upload from a null pointer";
  context_->make_current();
  CUresult rc = detail::driver().cuMemcpyHtoD(ptr_, host, bytes);
  if (rc != detail::cu::CUDA_SUCCESS)
    detail::driver_fail("cuMemcpyHtoD_v2(" + std::to_string(bytes) + " bytes)", rc, context_,
                        "loom.cuda.E912");
}

LOOM_DECL void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check_usable("download", bytes);
  if (bytes == 0) return;
  LOOM_USER_CHECK(host != nullptr, "loom.cuda.E911") << "DeviceBuffer::download to a null pointer";
  context_->make_current();
  CUresult rc = detail::driver().cuMemcpyDtoH(host, ptr_, bytes);
  if (rc != detail::cu::CUDA_SUCCESS)
    detail::driver_fail("cuMemcpyDtoH_v2(" + std::to_string(bytes) + " bytes)", rc, context_,
                        "loom.cuda.E912");
}

LOOM_DECL void DeviceBuffer::zero() { fill_bytes(0); }

LOOM_DECL void DeviceBuffer::fill_bytes(unsigned char value) {
  check_usable("fill_bytes", bytes_);
  if (bytes_ == 0) return;
  context_->make_current();
  detail::driver_check(detail::driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8_v2", context_);
}

// --- Module and Function -------------------------------------------------------------------------

LOOM_DECL Module::Module(const std::string& ptx, Context& context) {
  const detail::driver_api& api = detail::driver_or_throw();
  auto module = std::make_shared<detail::loaded_module>();
  module->context = &context;
  module->generation = context.generation();
  module->kernels = detail::ptx_entries(ptx);
  context.make_current();

  // The JIT writes at most this much of each log (a failed kernel's log is a few lines).
  constexpr std::size_t log_bytes = 256 * 1024;
  std::vector<char> info_log(log_bytes, '\0'), error_log(log_bytes, '\0');
  int options[] = {detail::cu::CU_JIT_INFO_LOG_BUFFER,
                   detail::cu::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                   detail::cu::CU_JIT_ERROR_LOG_BUFFER,
                   detail::cu::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, detail::cu::CU_JIT_LOG_VERBOSE};
  // Option values travel in pointers: the buffers themselves, the sizes (unsigned int) and the
  // verbose flag (int) cast to void*.
  void* values[] = {
      info_log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log_bytes)),
      error_log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log_bytes)),
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(1))};
  CUmodule handle = nullptr;
  CUresult rc = api.cuModuleLoadDataEx(&handle, ptx.c_str(), 5, options, values);
  info_log.back() = error_log.back() = '\0';
  module->info_log = info_log.data();
  if (rc != detail::cu::CUDA_SUCCESS) {
    const bool cubin = ptx.rfind(
                           "\x7f"
                           "ELF",
                           0) == 0;
    std::string more = std::string(" while loading ") + (cubin ? "a CUBIN" : "PTX") + " (" +
                       std::to_string(ptx.size()) + " bytes";
    const std::string target = detail::ptx_directive(ptx, ".target");
    const std::string version = detail::ptx_directive(ptx, ".version");
    if (!target.empty()) more += ", .target " + target;
    if (!version.empty()) more += ", .version " + version;
    more += ") on device " + std::to_string(context.device()) + " (" + context.info().arch() + ")";
    if (rc == detail::cu::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
      more += "\nThe PTX is newer than CUDA driver " + detail::version_string(api.version) +
              " accepts: compile it with an NVRTC no newer than the driver (LOOM_NVRTC_LIBRARY) "
              "or update the driver.";
    else if (rc == detail::cu::CUDA_ERROR_NO_BINARY_FOR_GPU ||
             rc == detail::cu::CUDA_ERROR_INVALID_PTX)
      more += "\nCompile for an architecture this device runs (" + context.info().arch() +
              " or older) and check the PTX.";
    more += "\nJIT error log:\n" + std::string(error_log[0] ? error_log.data() : "(empty)");
    detail::driver_fail("cuModuleLoadDataEx", rc, &context, "loom.cuda.E913", more);
  }
  module->handle = handle;
  module_ = std::move(module);
}

LOOM_DECL CUmodule Module::handle() const noexcept { return module_ ? module_->handle : nullptr; }

LOOM_DECL const std::string& Module::info_log() const noexcept {
  static const std::string empty;
  return module_ ? module_->info_log : empty;
}

LOOM_DECL bool Module::valid() const noexcept {
  return module_ && module_->handle && module_->context->generation() == module_->generation;
}

LOOM_DECL Function Module::function(const std::string& name) const {
  LOOM_USER_CHECK(module_ && module_->handle, "loom.cuda.E917")
      << "Module::function(\"" << name << "\") on an empty Module";
  LOOM_USER_CHECK(valid(), "loom.cuda.E917")
      << "Module::function(\"" << name << "\") on a module loaded before Context::reset() on "
      << "device " << module_->context->device() << ": load the PTX again";
  const detail::driver_api& api = detail::driver();
  module_->context->make_current();
  CUfunction handle = nullptr;
  CUresult rc = api.cuModuleGetFunction(&handle, module_->handle, name.c_str());
  if (rc == detail::cu::CUDA_ERROR_NOT_FOUND) {
    std::string kernels;
    for (const std::string& kernel : module_->kernels)
      kernels += (kernels.empty() ? "" : ", ") + kernel;
    LOOM_BACKEND_FAIL("loom.cuda.E914")
        << "the module has no kernel named '" << name
        << "'; its kernels: " << (kernels.empty() ? std::string("(none)") : kernels)
        << ". A kernel looked up by its source name must be extern \"C\" (C++ names are mangled).";
  }
  if (rc != detail::cu::CUDA_SUCCESS)
    detail::driver_fail("cuModuleGetFunction(\"" + name + "\")", rc, module_->context,
                        "loom.cuda.E912");
  return detail::driver_access::make_function(module_, handle, name);
}

LOOM_DECL Context& Function::context() const {
  LOOM_USER_CHECK(module_ != nullptr, "loom.cuda.E917") << "an empty Function has no context";
  return *module_->context;
}

LOOM_DECL bool Function::valid() const noexcept {
  return module_ && handle_ && module_->context->generation() == module_->generation;
}

LOOM_DECL int Function::attribute(int which, const char* what) const {
  LOOM_USER_CHECK(valid(), "loom.cuda.E917")
      << "Function::" << what << " on "
      << (module_ ? "kernel '" + name_ + "', loaded before Context::reset(): load it again"
                  : std::string("an empty Function"));
  module_->context->make_current();
  int value = 0;
  CUresult rc = detail::driver().cuFuncGetAttribute(&value, which, handle_);
  if (rc != detail::cu::CUDA_SUCCESS)
    detail::driver_fail(std::string("cuFuncGetAttribute(") + what + ") of '" + name_ + "'", rc,
                        module_->context, "loom.cuda.E912");
  return value;
}

LOOM_DECL int Function::num_registers() const {
  return attribute(detail::cu::CU_FUNC_ATTRIBUTE_NUM_REGS, "num_registers");
}
LOOM_DECL int Function::max_threads_per_block() const {
  return attribute(detail::cu::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max_threads_per_block");
}
LOOM_DECL int Function::static_shared_memory() const {
  return attribute(detail::cu::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static_shared_memory");
}
LOOM_DECL int Function::local_memory() const {
  return attribute(detail::cu::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local_memory");
}
LOOM_DECL int Function::max_dynamic_shared_memory() const {
  return attribute(detail::cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                   "max_dynamic_shared_memory");
}

LOOM_DECL void Function::set_max_dynamic_shared_memory(int bytes) {
  LOOM_USER_CHECK(bytes >= 0, "loom.cuda.E911")
      << "set_max_dynamic_shared_memory(" << bytes << "): the size cannot be negative";
  const int static_shared = static_shared_memory();  // also checks that the Function is valid
  CUresult rc = detail::driver().cuFuncSetAttribute(
      handle_, detail::cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (rc != detail::cu::CUDA_SUCCESS) {
    const DeviceInfo& device = module_->context->info();
    detail::driver_fail(
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(bytes) + ") of '" +
            name_ + "'",
        rc, module_->context, "loom.cuda.E912",
        "\nThe device allows at most " +
            std::to_string(device.max_shared_memory_per_block_optin - static_shared) +
            " bytes of dynamic shared memory next to this kernel's " +
            std::to_string(static_shared) + " bytes of static shared memory.");
  }
}

// --- launching and timing ------------------------------------------------------------------------

LOOM_DECL void launch(const Function& function, std::array<unsigned, 3> grid,
                      std::array<unsigned, 3> block, unsigned shared_bytes,
                      const std::vector<void*>& kernel_params) {
  LOOM_USER_CHECK(function.valid(), "loom.cuda.E917")
      << "launch of "
      << (function.handle()
              ? "kernel '" + function.name() + "', loaded before Context::reset(): load it again"
              : std::string("an empty Function"));
  Context& context = function.context();
  context.make_current();
  CUresult rc = detail::driver().cuLaunchKernel(
      function.handle(), grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
      nullptr, kernel_params.empty() ? nullptr : const_cast<void**>(kernel_params.data()), nullptr);
  if (rc == detail::cu::CUDA_SUCCESS) return;
  std::ostringstream call;
  call << "cuLaunchKernel of '" << function.name() << "' (grid " << grid[0] << "x" << grid[1] << "x"
       << grid[2] << ", block " << block[0] << "x" << block[1] << "x" << block[2] << ", "
       << shared_bytes << " bytes of dynamic shared memory, " << kernel_params.size()
       << " arguments)";
  if (detail::is_sticky(rc))  // an earlier kernel crashed; this launch is not the culprit
    detail::driver_fail(call.str(), rc, &context, "loom.cuda.E916");
  detail::driver_fail(call.str(), rc, &context, "loom.cuda.E915",
                      detail::launch_hint(function, grid, block, shared_bytes, rc));
}

LOOM_DECL double time_launches(const std::function<void()>& launch_all, int number,
                               Context& context) {
  LOOM_USER_CHECK(number > 0, "loom.cuda.E911")
      << "time_launches(number = " << number << "): number must be positive";
  LOOM_USER_CHECK(static_cast<bool>(launch_all), "loom.cuda.E911")
      << "time_launches: launch_all is empty";
  const detail::driver_api& api = detail::driver_or_throw();
  context.make_current();
  detail::timing_event start(context), stop(context);
  detail::driver_check(api.cuEventRecord(start.get(), nullptr), "cuEventRecord", &context);
  for (int i = 0; i < number; ++i) launch_all();
  context.make_current();
  detail::driver_check(api.cuEventRecord(stop.get(), nullptr), "cuEventRecord", &context);
  detail::driver_check(api.cuEventSynchronize(stop.get()), "cuEventSynchronize", &context);
  float milliseconds = 0;
  detail::driver_check(api.cuEventElapsedTime(&milliseconds, start.get(), stop.get()),
                       "cuEventElapsedTime", &context);
  return static_cast<double>(milliseconds) * 1e-3 / number;
}

}  // namespace cuda
LOOM_END_NAMESPACE

// A fake CUDA driver: a shared library with the entry points loom/backend/cuda/driver.hpp looks up,
// which "runs" the kernels of test_device.cpp on the host. With LOOM_CUDA_DRIVER_LIBRARY pointing
// at it, loom_tests_cuda_device runs on a machine without a GPU (ctest:
// loom_tests_cuda_device.fake_driver), which exercises loom's side of the driver API: symbol
// names, argument passing (kernel parameters, JIT options and their log buffers), error
// reporting, the launch hints, and the sticky-error / reset protocol.
//
// It follows cuda.h's documented behaviour where loom depends on it:
// - device memory is host memory here, so copies are memcpy;
// - a launch that breaks a limit returns CUDA_ERROR_INVALID_VALUE at once;
// - a kernel that writes through a null pointer makes CUDA_ERROR_ILLEGAL_ADDRESS sticky: every
//   later call returns it until cuDevicePrimaryCtxReset, which also frees every allocation and
//   module of the context;
// - cuModuleLoadDataEx writes the JIT's error log into CU_JIT_ERROR_LOG_BUFFER.
// A test makes launches slow through LOOM_FAKE_LIBCUDA_LAUNCH_DELAY_FILE: a file holding the
// milliseconds each launch then lasts, read at every launch (so the test can change it while a
// worker process runs).
// What it cannot show: that the real driver behaves so. That needs a GPU (label gpu).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult SUCCESS = 0, INVALID_VALUE = 1, INVALID_DEVICE = 101, INVALID_PTX = 218,
                   INVALID_HANDLE = 400, NOT_FOUND = 500, ILLEGAL_ADDRESS = 700;

struct fake_function {
  std::string name;
  int max_dynamic_shared = 48 * 1024;
};
struct fake_module {
  std::vector<fake_function*> functions;
};
struct fake_event {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
};

std::mutex mutex;
int context_storage;  // the primary context's handle is its address
int retained = 0;
CUresult sticky = SUCCESS;
std::set<void*> allocations;
std::set<fake_module*> modules;

/// loom freed or unloaded something this context does not have: after a reset that could be a new
/// allocation at the same address, so the fake stops the test instead of returning an error.
[[noreturn]] void stale_handle(const char* call) {
  std::fprintf(stderr, "fake libcuda: %s of a handle the context does not have\n", call);
  std::abort();
}

bool is_allocated(CUdeviceptr ptr, std::size_t bytes) {
  // A copy must stay inside one allocation; the fake only checks that it starts in one.
  (void)bytes;
  for (void* p : allocations) {
    if (reinterpret_cast<CUdeviceptr>(p) == ptr) return true;
  }
  return false;
}

const char* error_name(CUresult rc) {
  switch (rc) {
    case SUCCESS: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
    case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    default: return nullptr;
  }
}

// The attributes of an H100 (CUdevice_attribute numbers of cuda.h).
int device_attribute(int which) {
  switch (which) {
    case 1: return 1024;  // MAX_THREADS_PER_BLOCK
    case 2:
    case 3: return 1024;        // MAX_BLOCK_DIM_X, _Y
    case 4: return 64;          // MAX_BLOCK_DIM_Z
    case 5: return 2147483647;  // MAX_GRID_DIM_X
    case 6:
    case 7: return 65535;              // MAX_GRID_DIM_Y, _Z
    case 8: return 48 * 1024;          // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: return 32;                // WARP_SIZE
    case 12: return 65536;             // MAX_REGISTERS_PER_BLOCK
    case 16: return 132;               // MULTIPROCESSOR_COUNT
    case 36: return 2619000;           // MEMORY_CLOCK_RATE (kHz; HBM3)
    case 37: return 5120;              // GLOBAL_MEMORY_BUS_WIDTH (bits)
    case 38: return 50 * 1024 * 1024;  // L2_CACHE_SIZE
    case 39: return 2048;              // MAX_THREADS_PER_MULTIPROCESSOR
    case 75: return 9;                 // COMPUTE_CAPABILITY_MAJOR
    case 76: return 0;                 // COMPUTE_CAPABILITY_MINOR
    case 81: return 228 * 1024;        // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: return 65536;             // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 97: return 227 * 1024;        // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    default: return -1;
  }
}

/// Runs `name` for every thread of the grid, on the host.
void run_kernel(const std::string& name, const unsigned grid[3], const unsigned block[3],
                void** params) {
  const unsigned long long threads =
      1ull * grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2];
  if (name == "saxpy") {
    const float a = *static_cast<float*>(params[0]);
    const float* x = *static_cast<float**>(params[1]);
    float* y = *static_cast<float**>(params[2]);
    const int n = *static_cast<int*>(params[3]);
    for (unsigned long long i = 0; i < threads && i < static_cast<unsigned long long>(n); ++i)
      y[i] = a * x[i] + y[i];
  } else if (name == "write_through") {
    float* p = *static_cast<float**>(params[0]);
    if (!p) {
      sticky = ILLEGAL_ADDRESS;  // reported by the next call, as a real crash would be
      return;
    }
    for (unsigned long long i = 0; i < block[0]; ++i) p[i] = 1.0f;
  } else if (name == "through_shared") {
    const float* x = *static_cast<float**>(params[0]);
    float* y = *static_cast<float**>(params[1]);
    const int n = *static_cast<int*>(params[2]);
    for (int i = 0; i < n; ++i) y[n - 1 - i] = x[i];
  }
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) { return flags == 0 ? SUCCESS : INVALID_VALUE; }
CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return SUCCESS;
}
CUresult cuGetErrorName(CUresult rc, const char** name) {
  *name = error_name(rc);
  return *name ? SUCCESS : INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult rc, const char** text) {
  *text = rc == ILLEGAL_ADDRESS ? "an illegal memory access was encountered"
                                : (error_name(rc) ? "fake driver error" : nullptr);
  return *text ? SUCCESS : INVALID_VALUE;
}
CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return SUCCESS;
}
CUresult cuDeviceGet(int* device, int ordinal) {
  if (ordinal != 0) return INVALID_DEVICE;
  *device = 0;
  return SUCCESS;
}
CUresult cuDeviceGetName(char* name, int length, int device) {
  if (device != 0) return INVALID_DEVICE;
  std::strncpy(name, "loom fake GPU", static_cast<std::size_t>(length));
  return SUCCESS;
}
CUresult cuDeviceGetAttribute(int* value, int which, int device) {
  if (device != 0) return INVALID_DEVICE;
  *value = device_attribute(which);
  return *value < 0 ? INVALID_VALUE : SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  if (device != 0) return INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(mutex);
  ++retained;
  *context = &context_storage;
  return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  if (device != 0) return INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(mutex);
  if (retained > 0) --retained;
  return SUCCESS;
}
CUresult cuDevicePrimaryCtxReset_v2(int device) {
  if (device != 0) return INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(mutex);
  for (void* p : allocations) std::free(p);
  allocations.clear();
  for (fake_module* m : modules) {
    for (fake_function* f : m->functions) delete f;
    delete m;
  }
  modules.clear();
  sticky = SUCCESS;
  return SUCCESS;
}
CUresult cuCtxSetCurrent(void* context) {
  return context == &context_storage || context == nullptr ? SUCCESS : INVALID_VALUE;
}
CUresult cuCtxSynchronize() { return sticky; }

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  if (bytes == 0) return INVALID_VALUE;
  void* p = std::calloc(1, bytes);
  allocations.insert(p);
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  void* p = reinterpret_cast<void*>(ptr);
  if (!allocations.erase(p)) stale_handle("cuMemFree_v2");
  std::free(p);
  return SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  if (!is_allocated(dst, bytes)) return INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  if (!is_allocated(src, bytes)) return INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<void*>(src), bytes);
  return SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  if (!is_allocated(dst, bytes)) return INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return SUCCESS;
}

CUresult cuModuleLoadDataEx(void** module, const void* image, unsigned count, int* options,
                            void** values) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  const std::string ptx = static_cast<const char*>(image);
  char* error_log = nullptr;
  std::size_t error_bytes = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == 5) error_log = static_cast<char*>(values[i]);  // CU_JIT_ERROR_LOG_BUFFER
    if (options[i] == 6)  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, an unsigned int in the pointer
      error_bytes = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(values[i]));
  }
  if (ptx.find("this is not ptx") != std::string::npos ||
      ptx.find(".target") == std::string::npos) {
    const char* message =
        "ptxas application ptx input, line 4; fatal   : Parsing error near 'this'";
    if (error_log && error_bytes > 0) {
      std::strncpy(error_log, message, error_bytes - 1);
      error_log[error_bytes - 1] = '\0';
    }
    return INVALID_PTX;
  }
  auto* m = new fake_module;
  for (std::size_t at = ptx.find(".entry "); at != std::string::npos;
       at = ptx.find(".entry ", at + 7)) {
    const std::size_t begin = at + 7, end = ptx.find('(', begin);
    m->functions.push_back(new fake_function{ptx.substr(begin, end - begin)});
  }
  modules.insert(m);
  *module = m;
  return SUCCESS;
}
CUresult cuModuleUnload(void* module) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  auto* m = static_cast<fake_module*>(module);
  if (!modules.erase(m)) stale_handle("cuModuleUnload");
  for (fake_function* f : m->functions) delete f;
  delete m;
  return SUCCESS;
}
CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  auto* m = static_cast<fake_module*>(module);
  if (!modules.count(m)) return INVALID_HANDLE;
  for (fake_function* f : m->functions) {
    if (f->name == name) {
      *function = f;
      return SUCCESS;
    }
  }
  return NOT_FOUND;
}
CUresult cuFuncGetAttribute(int* value, int which, void* function) {
  auto* f = static_cast<fake_function*>(function);
  switch (which) {
    case 0: *value = 1024; return SUCCESS;                   // MAX_THREADS_PER_BLOCK
    case 1: *value = 0; return SUCCESS;                      // SHARED_SIZE_BYTES
    case 3: *value = 0; return SUCCESS;                      // LOCAL_SIZE_BYTES
    case 4: *value = 16; return SUCCESS;                     // NUM_REGS
    case 8: *value = f->max_dynamic_shared; return SUCCESS;  // MAX_DYNAMIC_SHARED_SIZE_BYTES
    default: return INVALID_VALUE;
  }
}
CUresult cuFuncSetAttribute(void* function, int which, int value) {
  auto* f = static_cast<fake_function*>(function);
  if (which != 8 || value < 0 || value > 227 * 1024) return INVALID_VALUE;
  f->max_dynamic_shared = value;
  return SUCCESS;
}
CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                        void** extra) {
  std::lock_guard<std::mutex> lock(mutex);
  if (sticky) return sticky;
  auto* f = static_cast<fake_function*>(function);
  if (stream != nullptr || extra != nullptr) return INVALID_VALUE;
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return INVALID_VALUE;
    if (block[i] > static_cast<unsigned>(device_attribute(2 + i))) return INVALID_VALUE;
    if (grid[i] > static_cast<unsigned>(device_attribute(5 + i))) return INVALID_VALUE;
  }
  if (1ull * bx * by * bz > 1024 || shared > static_cast<unsigned>(f->max_dynamic_shared))
    return INVALID_VALUE;
  run_kernel(f->name, grid, block, params);
  if (const char* path = std::getenv("LOOM_FAKE_LIBCUDA_LAUNCH_DELAY_FILE")) {
    if (FILE* file = std::fopen(path, "r")) {
      long ms = 0;
      if (std::fscanf(file, "%ld", &ms) == 1 && ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::fclose(file);
    }
  }
  return SUCCESS;
}

CUresult cuEventCreate(void** event, unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  *event = new fake_event;
  return SUCCESS;
}
CUresult cuEventRecord(void* event, void* stream) {
  if (stream != nullptr) return INVALID_VALUE;
  auto* e = static_cast<fake_event*>(event);
  e->when = std::chrono::steady_clock::now();
  e->recorded = true;
  return sticky;
}
CUresult cuEventSynchronize(void*) { return sticky; }
CUresult cuEventElapsedTime_v2(float* milliseconds, void* start, void* stop) {
  auto* a = static_cast<fake_event*>(start);
  auto* b = static_cast<fake_event*>(stop);
  if (!a->recorded || !b->recorded) return INVALID_HANDLE;
  *milliseconds = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return sticky;
}
CUresult cuEventDestroy_v2(void* event) {
  delete static_cast<fake_event*>(event);
  return SUCCESS;
}

}  // extern "C"

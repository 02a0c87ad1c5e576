/// \file
/// The CUDA driver API, loaded with dlopen (layer backend/cuda, namespace loom::cuda): devices,
/// the primary context, device memory, modules loaded from PTX, kernel launches and event timing.
///
/// No CUDA header or library is needed to build this. The driver (`libcuda.so.1`, installed with
/// the NVIDIA kernel driver; `LOOM_CUDA_DRIVER_LIBRARY` names another file instead) is opened the
/// first time anything here needs it, and `cuInit(0)` runs then, once. On a machine without a
/// GPU or driver, device_available() says false and says why; everything else throws
/// loom::backend_error `[loom.cuda.E910]` with the same explanation.
///
/// The handle types below have the sizes and, for the opaque pointers, the struct tags of
/// cuda.h's, so a program that also includes cuda.h can pass them to the real API.
///
/// Objects and their lifetime:
/// - Context: the primary context of one device, shared by the whole process and never
///   destroyed. Every operation below makes its context current on the calling thread first, so
///   any thread may use any object. Context::reset() recovers from a kernel that crashed (an
///   illegal address, a trap): see there.
/// - DeviceBuffer: move-only owner of device memory.
/// - Module: loaded PTX (a shared handle: copies and the Functions taken from it keep it loaded).
/// - Function: one kernel of a Module; launch() runs it on the default stream, asynchronously.
///
/// Errors. Every failing driver call throws loom::backend_error naming the call and the driver's
/// error (cuGetErrorName / cuGetErrorString):
/// - `[loom.cuda.E910]` the driver or a device is not available;
/// - `[loom.cuda.E912]` a driver call failed (allocation, copy, event...);
/// - `[loom.cuda.E913]` the driver's PTX JIT rejected a module (the message carries its log);
/// - `[loom.cuda.E914]` the module has no kernel of that name;
/// - `[loom.cuda.E915]` a launch was refused; the message says which limit the launch broke
///   (threads per block, shared memory, registers, grid size);
/// - `[loom.cuda.E916]` a kernel failed while running (illegal address, misaligned address,
///   trap, timeout...). The error is sticky: the context is unusable until Context::reset().
/// Misuse is a loom::user_error: `[loom.cuda.E911]` bad device index or argument,
/// `[loom.cuda.E917]` an empty object or one made before the last Context::reset(),
/// `[loom.cuda.E918]` a copy larger than the buffer.
///
/// Processes: do not fork() after the driver is initialised (the first call to anything here,
/// device_available() included) and use CUDA in the child; CUDA does not support it.
#ifndef LOOM_BACKEND_CUDA_DRIVER_HPP
#define LOOM_BACKEND_CUDA_DRIVER_HPP

#include "loom/config.hpp"
#include "loom/error.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// cuda.h's struct tags, so that loom's handle types are cuda.h's handle types.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUevent_st;
struct CUstream_st;

LOOM_BEGIN_NAMESPACE
namespace cuda {

using CUresult = int;                    ///< CUDA_SUCCESS = 0
using CUdevice = int;                    ///< a device ordinal as the driver sees it
using CUdeviceptr = unsigned long long;  ///< a device address (64-bit platforms)
using CUcontext = ::CUctx_st*;
using CUmodule = ::CUmod_st*;
using CUfunction = ::CUfunc_st*;
using CUevent = ::CUevent_st*;
using CUstream = ::CUstream_st*;

class Context;
namespace detail {
struct loaded_module;
struct driver_access;
}  // namespace detail

/// Whether the driver loads, cuInit(0) succeeds and at least one device is visible. When `why`
/// is given it receives the library loaded, the driver version and the device count, or the
/// reason there is no device (no libcuda.so.1, the toolkit's stub library, no GPU...).
LOOM_DECL bool device_available(std::string* why = nullptr);

/// Number of visible devices; 0 when device_available() is false.
LOOM_DECL int device_count();

/// The CUDA version of the driver (13000 for 13.0); 0 when no driver could be loaded.
LOOM_DECL int driver_version();

/// The driver's name of a CUresult ("CUDA_ERROR_ILLEGAL_ADDRESS"), or "CUDA error <n>".
LOOM_DECL std::string driver_error_name(CUresult result);

/// What the search and the code generator need to know about a device.
struct DeviceInfo {
  int device = 0;                            ///< ordinal
  std::string name;                          ///< "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;  ///< compute capability (9, 0 on the H100)
  int sm_count = 0;                          ///< streaming multiprocessors
  int max_threads_per_block = 0;
  std::array<int, 3> max_block_dim{};            ///< per dimension of a block
  std::array<int, 3> max_grid_dim{};             ///< per dimension of a grid
  int max_shared_memory_per_block = 0;           ///< bytes, without opting in (48 KiB)
  int max_shared_memory_per_block_optin = 0;     ///< bytes, with set_max_dynamic_shared_memory
  int max_shared_memory_per_multiprocessor = 0;  ///< bytes
  int max_threads_per_multiprocessor = 0;
  int warp_size = 0;
  int max_registers_per_block = 0;           ///< 32-bit registers
  int max_registers_per_multiprocessor = 0;  ///< 32-bit registers
  int l2_cache_bytes = 0;
  int memory_clock_khz = 0;  ///< the DRAM's clock (2,619 MHz for the H100's HBM3)
  int memory_bus_bits = 0;   ///< the DRAM's bus width (5,120 on the H100)

  /// Compute capability times ten: 90 for 9.0.
  int compute_capability() const { return compute_major * 10 + compute_minor; }
  /// The architecture name NVRTC takes: "sm_90".
  std::string arch() const { return "sm_" + std::to_string(compute_capability()); }
  /// The DRAM's peak bandwidth in bytes per second (two transfers per clock): 3.35e12 on the
  /// H100 SXM. Memory-bound kernels are measured against it.
  double dram_bytes_per_second() const {
    return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0);
  }
};

/// Properties of device `device` (no context is created). Throws `[loom.cuda.E910]` without a
/// device and `[loom.cuda.E911]` for an ordinal out of range.
LOOM_DECL DeviceInfo device_info(int device = 0);

/// The primary context of one device: the process-wide context the CUDA runtime also uses.
///
/// Context::get() retains it on first use and keeps it for the life of the process. Not copyable.
class Context {
 public:
  /// The context of `device`, made current on the calling thread. Thread-safe.
  static Context& get(int device = 0);

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const noexcept { return device_; }
  CUcontext handle() const noexcept { return handle_.load(std::memory_order_acquire); }
  /// The device's properties (queried once).
  const DeviceInfo& info() const noexcept { return info_; }

  /// Makes this context current on the calling thread (cuCtxSetCurrent).
  void make_current();
  /// Waits for all work of the context (cuCtxSynchronize); throws what a kernel did wrong.
  void synchronize();

  /// True after a driver call on this context reported a sticky error (a kernel that crashed):
  /// every further call fails the same way until reset().
  bool needs_reset() const noexcept { return needs_reset_.load(std::memory_order_acquire); }

  /// Destroys the primary context and creates a fresh one (cuDevicePrimaryCtxReset, then
  /// release and retain), which is how the tuner goes on after a candidate kernel crashed.
  ///
  /// Everything made on the old context is gone: DeviceBuffers, Modules and Functions created
  /// before the reset are invalid. Using one throws `[loom.cuda.E917]`; destroying one is safe
  /// (it does not touch the new context). Make them again after the reset.
  ///
  /// Do not call it while another thread uses the device. cuda.h documents the sticky errors as
  /// fatal to the process, and some drivers hold to it: on driver 580.159 (an H100, 2026-11) the
  /// reset succeeds but the context cannot be retained again after an illegal address. Then
  /// reset() throws `[loom.cuda.E912]` saying to restart the process. Code that must survive
  /// crashing kernels runs them in a separate process, as cuda::GpuMeasurer does.
  void reset();

  /// Number of resets so far; objects remember the generation they were made in.
  std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }

 private:
  explicit Context(int device);
  friend struct detail::driver_access;

  int device_ = 0;
  CUdevice cu_device_ = 0;
  DeviceInfo info_;
  std::atomic<CUcontext> handle_{nullptr};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> needs_reset_{false};
  std::mutex mutex_;  // serialises reset()
};

/// Device memory of one context: move-only, freed by the destructor.
class DeviceBuffer {
 public:
  /// An empty buffer (no memory, ptr() == 0).
  DeviceBuffer() noexcept = default;
  /// `bytes` bytes of uninitialised device memory (cuMemAlloc); 0 bytes makes an empty buffer.
  explicit DeviceBuffer(std::size_t bytes, Context& context = Context::get());
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  std::size_t bytes() const noexcept { return bytes_; }
  /// The device address, what a kernel parameter of pointer type takes (0 when empty).
  CUdeviceptr ptr() const noexcept { return ptr_; }
  /// True when the buffer owns memory of the context's current generation (no reset since).
  bool valid() const noexcept;

  /// Copies `bytes` bytes from `host` to the start of the buffer (synchronous).
  void upload(const void* host, std::size_t bytes);
  /// Copies the first `bytes` bytes of the buffer to `host`; waits for earlier kernels first.
  void download(void* host, std::size_t bytes) const;
  /// Sets every byte to 0.
  void zero();
  /// Sets every byte to `value` (0xFF makes every float a NaN).
  void fill_bytes(unsigned char value);

 private:
  void check_usable(const char* what, std::size_t bytes) const;

  Context* context_ = nullptr;
  std::uint64_t generation_ = 0;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

/// One kernel of a loaded Module. Keeps its module loaded; cheap to copy.
class Function {
 public:
  Function() noexcept = default;

  CUfunction handle() const noexcept { return handle_; }
  const std::string& name() const noexcept { return name_; }
  Context& context() const;
  /// True when it names a kernel of the context's current generation (no reset since).
  bool valid() const noexcept;

  /// Registers per thread (CU_FUNC_ATTRIBUTE_NUM_REGS).
  int num_registers() const;
  /// The most threads a block of this kernel may have, given its registers.
  int max_threads_per_block() const;
  /// Bytes of statically declared `__shared__` memory.
  int static_shared_memory() const;
  /// Bytes of local memory (spills, stack arrays) per thread.
  int local_memory() const;
  /// The most dynamic shared memory a launch may ask for (48 KiB minus the static shared memory
  /// until set_max_dynamic_shared_memory raises it).
  int max_dynamic_shared_memory() const;
  /// Allows launches with up to `bytes` bytes of dynamic shared memory; needed above 48 KiB, up
  /// to DeviceInfo::max_shared_memory_per_block_optin minus the static shared memory.
  void set_max_dynamic_shared_memory(int bytes);

 private:
  friend struct detail::driver_access;
  int attribute(int attribute, const char* what) const;

  std::shared_ptr<detail::loaded_module> module_;
  CUfunction handle_ = nullptr;
  std::string name_;
};

/// PTX loaded into a context through the driver's JIT (cuModuleLoadDataEx). A shared handle: the
/// module is unloaded when the last copy and the last Function taken from it are gone.
class Module {
 public:
  Module() noexcept = default;
  /// JIT-compiles `ptx` (NUL-free PTX text, e.g. from compile_to_ptx) for the context's device,
  /// or loads a CUBIN (compile_to_cubin) for it as it is.
  /// Throws `[loom.cuda.E913]` with the JIT's error log when the driver rejects it.
  explicit Module(const std::string& ptx, Context& context = Context::get());

  /// The kernel `name` (an `extern "C"` name, or the mangled one). Throws `[loom.cuda.E914]`.
  Function function(const std::string& name) const;

  CUmodule handle() const noexcept;
  /// The JIT's informational log (register and spill counts per kernel, from CU_JIT_LOG_VERBOSE).
  const std::string& info_log() const noexcept;
  /// True when it holds a module of the context's current generation (no reset since).
  bool valid() const noexcept;

 private:
  std::shared_ptr<detail::loaded_module> module_;
};

/// Launches `function` on the default stream (cuLaunchKernel); returns before it finishes.
///
/// `kernel_params` holds one pointer per kernel parameter, pointing to the argument's value:
/// for `kernel(float a, float* x)` pass `{&a, &x_ptr}` where `x_ptr` is a CUdeviceptr. The
/// values are copied by the launch, so they only need to live until launch() returns.
/// `shared_bytes` is the dynamic shared memory per block.
/// Throws `[loom.cuda.E915]` when the driver refuses the launch (with the limit that was broken),
/// `[loom.cuda.E916]` when an earlier kernel crashed.
LOOM_DECL void launch(const Function& function, std::array<unsigned, 3> grid,
                      std::array<unsigned, 3> block, unsigned shared_bytes,
                      const std::vector<void*>& kernel_params);

/// Seconds per call of `launch_all`, measured on the GPU with two CUDA events on the default
/// stream: one recorded before `number` back-to-back calls of `launch_all` (which launches one
/// or more kernels), one after, then elapsed time / `number`. It waits for the work to finish
/// and throws what the kernels did wrong. There is no warm-up: call `launch_all` once first when
/// the first launch should not count (module loading, caches).
LOOM_DECL double time_launches(const std::function<void()>& launch_all, int number,
                               Context& context = Context::get());

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/driver.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_DRIVER_HPP

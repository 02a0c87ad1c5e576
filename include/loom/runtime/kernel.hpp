/// \file
/// `Kernel`: a compiled, callable kernel and its signature (layer runtime/). Backend-independent:
/// a backend hands over an entry point and an owner of the code; the kernel releases the code
/// when its last copy is destroyed.
#ifndef LOOM_RUNTIME_KERNEL_HPP
#define LOOM_RUNTIME_KERNEL_HPP

#include "loom/runtime/buffer.hpp"
#include "loom/runtime/workspace.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// One argument of a kernel: a tensor of the ComputeDAG (inputs first, then outputs).
struct KernelArg {
  std::string name;
  ir::DType dtype;
  std::vector<int64_t> shape;
  bool is_output = false;
};

class Kernel {
 public:
  /// The entry point convention of every backend: `args[i]` points to argument i's data.
  using entry_fn = int32_t (*)(void** args);

  Kernel() = default;
  Kernel(std::string name, std::vector<KernelArg> args, entry_fn fn, std::shared_ptr<void> owner,
         std::string source)
      : name_(std::move(name)),
        args_(std::move(args)),
        fn_(fn),
        owner_(std::move(owner)),
        source_(std::move(source)) {}

  explicit operator bool() const { return fn_ != nullptr; }
  const std::string& name() const { return name_; }
  const std::vector<KernelArg>& args() const { return args_; }
  /// The lowered loop nest, as readable pseudo code.
  const std::string& source() const { return source_; }

  /// Calls the kernel on raw pointers, typed pointers, std::vector, std::span, BufferViews or
  /// anything with buffer_view_traits (Eigen matrices through loom/eigen.hpp), one per argument
  /// in order. Types are checked where known, shapes where the argument carries one, sizes where
  /// the container knows its own. An output may not overlap any other argument (the generated
  /// code assumes none does; an in-place call would compute from half-written inputs). Any
  /// alignment of the element type works; buffers on a cache line (aligned_vector) run at the
  /// tuned speed.
  template <class... A>
  void operator()(A&&... a) const {
    std::vector<BufferView> views{as_buffer_view(a)...};
    run(views);
  }

  /// Checked call on views; throws loom::user_error `[loom.runtime.E601]`.. on a mismatch, and
  /// loom::backend_error `[loom.runtime.E607]` when the kernel stops early (out of memory).
  void run(const std::vector<BufferView>& views) const {
    LOOM_USER_CHECK(fn_, "loom.runtime.E600") << "calling an empty loom::Kernel";
    LOOM_USER_CHECK(views.size() == args_.size(), "loom.runtime.E601")
        << "kernel '" << name_ << "' takes " << args_.size() << " arguments (" << signature()
        << ") but got " << views.size();
    std::vector<void*> ptrs(views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      const BufferView& v = views[i];
      const KernelArg& a = args_[i];
      LOOM_USER_CHECK(v.data, "loom.runtime.E602")
          << "argument " << i << " ('" << a.name << "') of kernel '" << name_ << "' is null";
      LOOM_USER_CHECK(v.dtype.lanes == 0 || v.dtype == a.dtype, "loom.runtime.E603")
          << "argument " << i << " ('" << a.name << "') of kernel '" << name_ << "' must hold "
          << ir::to_string(a.dtype) << ", got " << ir::to_string(v.dtype);
      LOOM_USER_CHECK(!v.has_shape() || v.shape == a.shape, "loom.runtime.E604")
          << "argument " << i << " ('" << a.name << "') of kernel '" << name_
          << "' must have shape " << shape_string(a.shape) << ", got " << shape_string(v.shape);
      LOOM_USER_CHECK(v.size < 0 || v.size == elements(a), "loom.runtime.E605")
          << "argument " << i << " ('" << a.name << "') of kernel '" << name_ << "' holds "
          << v.size << " elements; " << ir::to_string(a.dtype) << shape_string(a.shape) << " needs "
          << elements(a);
      ptrs[i] = v.data;
    }
    check_no_overlap(ptrs);
    const int32_t status = fn_(ptrs.data());
    if (status != 0)
      LOOM_BACKEND_FAIL("loom.runtime.E607")
          << "kernel '" << name_ << "' stopped before the end, its outputs incomplete: "
          << runtime::kernel_status_text(status)
          << " (the machine's memory, or a process limit such as ulimit -v or -d)";
  }

  /// Unchecked call: `args[i]` points to argument i's data. The fast path for benchmarks.
  /// Returns the kernel's status (0, or kernel_status_out_of_memory: loom/runtime/workspace.hpp).
  int32_t run_unchecked(void** args) const { return fn_(args); }

  /// "A: float32[64, 32], B: float32[32, 48] -> D: float32[64, 48]".
  std::string signature() const {
    std::ostringstream os;
    bool outputs = false;
    for (size_t i = 0; i < args_.size(); ++i) {
      if (args_[i].is_output && !outputs) {
        os << " -> ";
        outputs = true;
      } else if (i) {
        os << ", ";
      }
      os << args_[i].name << ": " << ir::to_string(args_[i].dtype) << shape_string(args_[i].shape);
    }
    return os.str();
  }

 private:
  static int64_t elements(const KernelArg& a) {
    int64_t n = 1;
    for (int64_t e : a.shape) n *= e;
    return n;
  }

  // [loom.runtime.E606]: an output's bytes overlap another argument's (by the sizes of the
  // signature).
  void check_no_overlap(const std::vector<void*>& ptrs) const {
    // On the stack for the usual few arguments: the check runs on every call.
    constexpr size_t kOnStack = 16;
    const size_t n = ptrs.size();
    std::array<std::uintptr_t, kOnStack> begin_s;
    std::array<std::size_t, kOnStack> bytes_s;
    std::array<bool, kOnStack> written_s;
    std::vector<std::uintptr_t> begin_h;
    std::vector<std::size_t> bytes_h;
    std::unique_ptr<bool[]> written_h;
    std::span<std::uintptr_t> begin(begin_s.data(), n);
    std::span<std::size_t> bytes(bytes_s.data(), n);
    std::span<bool> written(written_s.data(), n);
    if (n > kOnStack) {
      begin_h.resize(n);
      bytes_h.resize(n);
      written_h = std::make_unique<bool[]>(n);
      begin = begin_h;
      bytes = bytes_h;
      written = std::span<bool>(written_h.get(), n);
    }
    for (size_t i = 0; i < n; ++i) {
      begin[i] = reinterpret_cast<std::uintptr_t>(ptrs[i]);
      bytes[i] = static_cast<std::size_t>(elements(args_[i]) * args_[i].dtype.bytes());
      written[i] = args_[i].is_output;
    }
    const auto [i, j] = overlapping_output(begin, bytes, written);
    LOOM_USER_CHECK(i < 0, "loom.runtime.E606")
        << "argument " << i << " ('" << args_[i].name << "', an output) of kernel '" << name_
        << "' overlaps argument " << j << " ('" << args_[j].name
        << "'): the kernel would write what it still reads or writes elsewhere. Pass "
        << "separate buffers (copy the input first for an in-place update)";
  }

  static std::string shape_string(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  }
  std::string name_;
  std::vector<KernelArg> args_;
  entry_fn fn_ = nullptr;
  std::shared_ptr<void> owner_;
  std::string source_;
};

LOOM_END_NAMESPACE

#endif  // LOOM_RUNTIME_KERNEL_HPP

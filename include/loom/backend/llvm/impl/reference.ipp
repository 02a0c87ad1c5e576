// Bodies of loom/backend/llvm/measurer.hpp: a task's inputs and reference outputs, what every
// program of the task is checked against. Compiled through measurer.ipp, whose child protocol it
// uses (cmake/LoomCompiled.cmake).
#include "loom/backend/llvm/measurer.hpp"

#include "loom/backend/child_process.hpp"
#include "loom/backend/llvm/codegen.hpp"
#include "loom/backend/measure_data.hpp"
#include "loom/dag/evaluate.hpp"
#include "loom/lower/lower.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/runtime/workspace.hpp"
#include "loom/sched/default_schedule.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include <sys/mman.h>
#include <unistd.h>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {

/// One task's inputs and reference outputs, in one shared anonymous mapping: inputs first, then
/// (from a page boundary, so that a reference child can write-protect the inputs alone) the
/// reference outputs. Mapped before any child is forked; children see it without copying.
struct LocalMeasurer::TaskData {
  struct Arg {
    std::string name;
    ir::DType dtype;
    std::vector<int64_t> shape;
    int64_t elements = 1;
    size_t bytes = 0;
    size_t offset = 0;  ///< into the mapping: the input's data, or the output's reference
    bool is_output = false;
  };
  std::vector<Arg> args;
  unsigned char* base = nullptr;
  size_t size = 0;
  size_t outputs_offset = 0;  ///< page-aligned start of the reference outputs
  /// Empty when the mapping failed; then every program of the task is `unknown` with this.
  std::string map_error;
  bool reference_tried = false;
  bool reference_ok = false;
  std::string reference_error;
  /// The lowest cost measured for the task so far (0: none yet); children read the value it had
  /// when they were forked (MeasureOptions::slow_program_factor).
  double best_cost = 0;
  /// Seconds each successful build of the task took, time stopped excluded
  /// (MeasureOptions::slow_build_kill_factor).
  std::vector<double> build_seconds;

  TaskData() = default;
  TaskData(const TaskData&) = delete;
  TaskData& operator=(const TaskData&) = delete;
  ~TaskData() {
    if (base) munmap(base, size);
  }
  void* data(size_t arg) const { return base + args[arg].offset; }
};

LOOM_DECL LocalMeasurer::TaskData& LocalMeasurer::task_data(const Task& task) {
  auto it = tasks_.find(task.workload_key());
  if (it != tasks_.end()) return *it->second;
  auto td = std::make_unique<TaskData>();
  const ComputeDAG& dag = *task.dag;
  const auto arguments = dag.arguments();
  const size_t page = static_cast<size_t>(std::max(4096L, sysconf(_SC_PAGESIZE)));
  size_t offset = 0;
  bool outputs_started = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    TaskData::Arg a;
    a.name = arguments[i].name();
    a.dtype = arguments[i].dtype();
    a.shape = arguments[i].shape();
    for (int64_t d : a.shape) a.elements *= d;
    a.bytes = static_cast<size_t>(a.elements) * static_cast<size_t>(a.dtype.bytes());
    a.is_output = i >= dag.inputs().size();
    if (a.is_output && !outputs_started) {
      offset = (offset + page - 1) / page * page;
      td->outputs_offset = offset;
      outputs_started = true;
    }
    a.offset = offset;
    offset += (a.bytes + 63) / 64 * 64;
    td->args.push_back(std::move(a));
  }
  td->size = std::max<size_t>((offset + page - 1) / page * page, page);
  void* p = ::mmap(nullptr, td->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    td->map_error = "cannot map " + std::to_string(td->size) +
                    " bytes of shared memory for the task's inputs: " + std::strerror(errno);
  } else {
    td->base = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < td->args.size(); ++i)
      if (!td->args[i].is_output)
        backend::measure_data::fill_random(td->data(i), td->args[i].dtype, td->args[i].elements,
                                           local_.seed + 0x9e3779b97f4a7c15ULL * (i + 1));
  }
  return *tasks_.emplace(task.workload_key(), std::move(td)).first->second;
}

namespace detail {

/// Whether two computations take the same kernel arguments (names, types, shapes, order).
inline bool same_signature(const ComputeDAG& a, const ComputeDAG& b) {
  const auto x = a.arguments(), y = b.arguments();
  if (x.size() != y.size() || a.inputs().size() != b.inputs().size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].name() != y[i].name() || !(x[i].dtype() == y[i].dtype()) ||
        x[i].shape() != y[i].shape())
      return false;
  return true;
}

/// How the first output of a program that differs from its reference differs (empty when
/// none does); `args` are the program's arguments, in the task's order.
inline std::string first_difference(const LocalMeasurer::TaskData& td,
                                    const std::vector<void*>& args, double rtol, double atol) {
  for (size_t i = 0; i < td.args.size(); ++i) {
    const auto& a = td.args[i];
    if (!a.is_output) continue;
    std::string diff =
        compare_output({a.name, a.dtype, a.shape, a.elements}, args[i], td.data(i), rtol, atol);
    if (!diff.empty()) return diff;
  }
  return {};
}

/// Why the reference outputs cannot serve (empty when they can). A NaN in the reference would
/// make every program wrong; it means the random inputs do not suit this computation, which is
/// worth saying once, plainly.
inline std::string reference_nan(const LocalMeasurer::TaskData& td) {
  for (size_t i = 0; i < td.args.size(); ++i) {
    const auto& a = td.args[i];
    if (!a.is_output || !a.dtype.is_float()) continue;
    for (int64_t e = 0; e < a.elements; ++e) {
      const double v = backend::measure_data::value_at(td.data(i), a.dtype, e);
      if (std::isnan(v))
        return "its output '" + a.name + "' has NaN at element " + std::to_string(e) + " " +
               coordinates(e, a.shape) +
               " for the random inputs (floats in [0.5, 1.5), integers in [1, 8])";
    }
  }
  return {};
}

/// The body of the reference child: computes the reference outputs into the shared region and
/// reports whether that worked. Never returns.
[[noreturn]] inline void reference_child(int sock, const Task& task,
                                         const LocalMeasurer::TaskData& td,
                                         const search::MeasureOptions& o, bool interpret) {
  ChildResult r;
  try {
    ::mprotect(td.base, td.outputs_offset, PROT_READ);
    std::vector<void*> ptrs;
    for (size_t i = 0; i < td.args.size(); ++i) ptrs.push_back(td.data(i));
    if (interpret) {
      evaluate(*task.dag, ptrs);
    } else {
      if (o.num_threads > 0) runtime::set_num_threads(o.num_threads);
      CompiledKernel k =
          compile(lower::lower(sched::default_schedule(task.dag, task.target), "reference"));
      if (const int32_t rc = k.fn(ptrs.data()); rc != 0)
        throw backend_error("the default schedule's kernel stopped before the end: " +
                            runtime::kernel_status_text(rc));
    }
  } catch (const std::exception& e) {
    r.error = MeasureError::unknown;
    r.message = e.what();
  }
  send_frame(sock, encode_result(r));
  ::_exit(0);
}

/// Computes the task's reference outputs into the shared region, in a child of its own (a crash
/// there must not end the tuning run either): the interpreter for small DAGs, else the default
/// schedule. Returns an empty string, or why there is no usable reference.
inline std::string compute_reference(const Task& task, const LocalMeasurer::TaskData& td,
                                     const search::MeasureOptions& o, double reference_timeout_s) {
  const auto t0 = clock::now();
  const bool interpret = task.dag->flop_count() <= o.interpreter_flop_limit;
  const char* how = interpret ? "the reference interpreter" : "the default schedule";
  ChildProcess child;
  std::string failure;  // fork_child says here why it could not start the child
  if (fork_child(
          child, {}, [&](int sock) { reference_child(sock, task, td, o, interpret); }, failure)) {
    bool timed_out = false;
    while (!child.sock_eof) {
      const double left = reference_timeout_s - seconds_since(t0);
      if (left <= 0) {
        timed_out = true;
        break;
      }
      if (!child.wait_and_read(left)) break;
    }
    const int status = child.reap(/*kill_first=*/timed_out || !child.sock_eof);
    std::string body;
    std::optional<ChildResult> r;
    if (child.next_frame(body)) r = decode_result(body);
    if (timed_out)
      failure = "it took longer than " + format_seconds(reference_timeout_s) + " s";
    else if (!r)
      failure = describe_child_death(status, "while computing it", child.output_tail);
    else if (r->error != MeasureError::none)
      failure = r->message;
  }
  if (failure.empty()) failure = reference_nan(td);
  if (!failure.empty())
    failure = std::string("no reference output to check programs against: ") + how +
              " failed: " + failure;
  return failure;
}

}  // namespace detail
}  // namespace cpu_jit
LOOM_END_NAMESPACE

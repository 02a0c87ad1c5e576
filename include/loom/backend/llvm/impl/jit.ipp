// Bodies of loom/backend/llvm/jit.hpp and loom/backend/llvm/module_builder.hpp.
//
// Error ids: E501 host / JIT setup, E502 verifier, E503 adding a module, E504 compiling or linking,
// E505 unknown symbol, E506 optimisation pipeline, E507 assembly emission, E508 bad arguments.
//
// Nothing below may throw while LLVM is on the stack: Debian's LLVM is built without exception
// support, so an exception unwinding through its frames is undefined behaviour. Code that LLVM
// calls back (the IR transform, the compile function, the error reporter) returns llvm::Error or
// swallows; conversion to loom errors happens only in functions called by loom's users.
//
// Guarded, unlike most .ipp files: jit.hpp and module_builder.hpp both include it, and it
// includes module_builder.hpp, whose declarations it needs.
#ifndef LOOM_BACKEND_LLVM_IMPL_JIT_IPP
#define LOOM_BACKEND_LLVM_IMPL_JIT_IPP

#include "loom/backend/llvm/jit.hpp"

#include "loom/backend/llvm/llvm_headers.hpp"
#include "loom/backend/llvm/module_builder.hpp"
#include "loom/error.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/runtime/workspace.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cpu_jit {
namespace detail {

[[noreturn]] LOOM_LLVM_DECL void fail_with(const char* id, const std::string& what,
                                           llvm::Error err) {
  // LOOM_BACKEND_FAIL spelled out: the macro's loop hides from the compiler that this never
  // returns.
  ::loom::detail::error_reporter reporter(true, ::loom::detail::error_tier::backend, id);
  reporter.stream() << what << ": " << llvm::toString(std::move(err));
  reporter.issue();
}

template <class T>
T take_or_fail(llvm::Expected<T> value, const char* id, const std::string& what) {
  if (!value) fail_with(id, what, value.takeError());
  return std::move(*value);
}

/// Recycles TargetMachines. A TargetMachine caches its subtargets without locking, so two
/// threads compiling at once need two of them; creating one costs far more than a lock, so they
/// are kept for reuse instead of being made per module (ORC's ConcurrentIRCompiler does that).
class target_machine_pool {
 public:
  class lease {
   public:
    lease(target_machine_pool& pool, std::unique_ptr<llvm::TargetMachine> tm)
        : pool_(&pool), tm_(std::move(tm)) {}
    lease(lease&&) = default;
    ~lease() {
      if (tm_) pool_->give_back(std::move(tm_));
    }
    llvm::TargetMachine& operator*() const { return *tm_; }

   private:
    target_machine_pool* pool_;
    std::unique_ptr<llvm::TargetMachine> tm_;
  };

  explicit target_machine_pool(llvm::orc::JITTargetMachineBuilder builder)
      : builder_(std::move(builder)) {}

  /// The final builder, after LLJIT has fixed the relocation and code model for its linker.
  void set_builder(llvm::orc::JITTargetMachineBuilder builder) {
    std::lock_guard<std::mutex> lock(mutex_);
    builder_ = std::move(builder);
    idle_.clear();
  }

  llvm::Expected<std::unique_ptr<llvm::TargetMachine>> create() {
    std::lock_guard<std::mutex> lock(mutex_);
    return builder_.createTargetMachine();
  }

  llvm::Expected<lease> take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        auto tm = std::move(idle_.back());
        idle_.pop_back();
        return lease(*this, std::move(tm));
      }
    }
    auto tm = create();
    if (!tm) return tm.takeError();
    return lease(*this, std::move(*tm));
  }

 private:
  void give_back(std::unique_ptr<llvm::TargetMachine> tm) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(tm));
  }

  std::mutex mutex_;
  llvm::orc::JITTargetMachineBuilder builder_;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_;
};

/// The IRCompileLayer's compile function: object code from a pooled TargetMachine.
class pooled_compiler final : public llvm::orc::IRCompileLayer::IRCompiler {
 public:
  pooled_compiler(std::shared_ptr<target_machine_pool> pool, const llvm::TargetOptions& options)
      : IRCompiler(llvm::orc::irManglingOptionsFromTargetOptions(options)),
        pool_(std::move(pool)) {}

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module& m) override {
    auto tm = pool_->take();
    if (!tm) return tm.takeError();
    llvm::orc::SimpleCompiler compile(**tm);
    return compile(m);
  }

 private:
  std::shared_ptr<target_machine_pool> pool_;
};

/// What add_module wants done to one module on its way through the IRTransformLayer, and what
/// the transform hands back.
struct module_job {
  CompileOptions options;
  std::string ir;
  std::string assembly;
};

/// Messages ORC reports through ExecutionSession::reportError while this thread is inside
/// add_module. Materialisation runs on the thread that looks the symbols up (in-place dispatch),
/// so the reason for a failed link ("Symbols not found: ...") lands here and can go into the
/// exception instead of only being printed.
LOOM_LLVM_DECL std::string*& captured_errors() noexcept {
  thread_local std::string* sink = nullptr;
  return sink;
}

/// Runs `default<O{level}>` on `m`. Does not throw (it runs inside the IR transform).
LOOM_LLVM_DECL llvm::Error run_pipeline(llvm::Module& m, llvm::TargetMachine& tm,
                                        int level) noexcept {
  static const char* const pipelines[] = {"default<O0>", "default<O1>", "default<O2>",
                                          "default<O3>"};
  level = std::clamp(level, 0, 3);
  LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
  // What clang turns on at -O2/-O3; PassBuilder alone leaves the SLP vectoriser off.
  const LLVMBool vectorize = level >= 2;
  LLVMPassBuilderOptionsSetLoopVectorization(options, vectorize);
  LLVMPassBuilderOptionsSetSLPVectorization(options, vectorize);
  LLVMPassBuilderOptionsSetLoopInterleaving(options, vectorize);
  LLVMPassBuilderOptionsSetLoopUnrolling(options, vectorize);
  // The C API's handle for a TargetMachine is the TargetMachine pointer itself.
  LLVMErrorRef err = LLVMRunPasses(llvm::wrap(&m), pipelines[level],
                                   reinterpret_cast<LLVMTargetMachineRef>(&tm), options);
  LLVMDisposePassBuilderOptions(options);
  return llvm::unwrap(err);
}

LOOM_LLVM_DECL int register_bits(llvm::TargetMachine& tm, const char* prefer_width) {
  // TTI is per function (function attributes select the subtarget), so ask about a dummy one.
  llvm::LLVMContext ctx;
  llvm::Module m("loom_probe", ctx);
  m.setDataLayout(tm.createDataLayout());
  m.setTargetTriple(tm.getTargetTriple().str());
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::Function::ExternalLinkage, "loom_probe", m);
  if (prefer_width) fn->addFnAttr("prefer-vector-width", prefer_width);
  llvm::TargetTransformInfo tti = tm.getTargetTransformInfo(*fn);
  auto bits = tti.getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector);
  return static_cast<int>(bits.getFixedValue());
}

/// The one door into the private parts of Engine and CompiledModule.
struct engine_access {
  using engine_impl = Engine::Impl;
  using module_impl = CompiledModule::Impl;
  static engine_impl& impl(Engine& e) { return *e.impl_; }
  static CompiledModule make(std::unique_ptr<module_impl> impl);
};

}  // namespace detail

// --- Engine --------------------------------------------------------------------------------------

struct Engine::Impl {
  std::string cpu, features, triple, data_layout;
  std::vector<std::string> enabled_features;  // sorted, without '+'
  int vector_bits = 0, preferred_vector_bits = 0;

  std::shared_ptr<detail::target_machine_pool> pool;
  std::unique_ptr<llvm::orc::LLJIT> jit;

  std::mutex jobs_mutex;
  std::unordered_map<const llvm::Module*, detail::module_job*> jobs;

  std::atomic<std::uint64_t> name_counter{0};
  std::atomic<std::size_t> live{0};
  std::atomic<std::uint64_t> removed{0};

  detail::module_job* find_job(const llvm::Module* m) {
    std::lock_guard<std::mutex> lock(jobs_mutex);
    auto it = jobs.find(m);
    return it == jobs.end() ? nullptr : it->second;
  }

  /// The IRTransformLayer's transform: O3 (or the level asked for) and the optional dumps.
  llvm::Error transform(llvm::Module& m) noexcept {
    try {
      detail::module_job* job = find_job(&m);
      auto tm = pool->take();
      if (!tm) return tm.takeError();
      if (llvm::Error err = detail::run_pipeline(m, **tm, job ? job->options.opt_level : 3))
        return err;
      if (job && job->options.dump_ir) job->ir = print_module(m);
      if (job && job->options.dump_asm) job->assembly = emit_assembly(m, **tm);
      return llvm::Error::success();
    } catch (const std::exception& e) {  // bad_alloc, or E507 from emit_assembly (no LLVM frame
                                         // lies between its throw and this catch)
      return llvm::make_error<llvm::StringError>(e.what(), llvm::inconvertibleErrorCode());
    } catch (...) {
      return llvm::make_error<llvm::StringError>("unknown exception in loom's IR transform",
                                                 llvm::inconvertibleErrorCode());
    }
  }

  /// Called by CompiledModule::Impl's destructor.
  void remove(llvm::orc::ResourceTrackerSP& tracker) noexcept {
    if (llvm::Error err = tracker->remove()) jit->getExecutionSession().reportError(std::move(err));
    tracker = nullptr;
    live.fetch_sub(1, std::memory_order_relaxed);
    // Interned symbol names are freed only on request; unique kernel names would otherwise pile
    // up in the pool (a few dozen bytes each) for the life of the process.
    if (removed.fetch_add(1, std::memory_order_relaxed) % 256 == 255)
      jit->getExecutionSession().getSymbolStringPool()->clearDeadEntries();
  }
};

LOOM_LLVM_DECL Engine::Engine() : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (llvm::InitializeNativeTarget() || llvm::InitializeNativeTargetAsmPrinter())
    LOOM_BACKEND_FAIL("loom.llvm.E501")
        << "LLVM has no native target for this host (" << llvm::sys::getProcessTriple() << ")";
  llvm::InitializeNativeTargetAsmParser();  // inline asm in modules; optional

  auto jtmb = detail::take_or_fail(llvm::orc::JITTargetMachineBuilder::detectHost(),
                                   "loom.llvm.E501", "cannot detect the host CPU");
  // detectHost lists the features in hash order; sort them so that features() is stable.
  std::vector<std::string> feats = jtmb.getFeatures().getFeatures();
  auto bare = [](const std::string& f) { return std::string_view(f).substr(f.empty() ? 0 : 1); };
  std::sort(feats.begin(), feats.end(),
            [&](const std::string& a, const std::string& b) { return bare(a) < bare(b); });
  for (const auto& f : feats) {
    if (!s.features.empty()) s.features += ',';
    s.features += f;
    if (!f.empty() && f[0] == '+') s.enabled_features.push_back(f.substr(1));
  }
  std::sort(s.enabled_features.begin(), s.enabled_features.end());
  // No gathers or scatters from LLVM's own vectorizers. loom vectorizes the loops its schedule
  // marks, with lane-linear accesses only; LLVM's loop vectorizer, given AVX-512's scatter,
  // instead vectorizes a register tile's short row loop (stride = the tile's row length) into
  // gather + FMA + scatter of 4 lanes per column. On a Zen 5 that made a BERT FFN program tuned
  // elsewhere 50x slower (3.6 against ~180 GFLOP/s) than the same nest vectorized by the SLP
  // vectorizer across its columns.
  s.features += ",+prefer-no-gather,+prefer-no-scatter";
  jtmb.setFeatures(s.features);
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // TargetOptions stay default: no unsafe/fast math globally; codegen sets flags per instruction.
  s.cpu = jtmb.getCPU();

  s.pool = std::make_shared<detail::target_machine_pool>(jtmb);
  auto pool = s.pool;
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(jtmb))
                 // Compile on the calling thread (in-place dispatch) without cloning modules into
                 // new contexts; concurrent add_module calls are safe because each module has its
                 // own context and each compile borrows its own TargetMachine from the pool.
                 .setSupportConcurrentCompilation(false)
                 .setCompileFunctionCreator(
                     [pool](llvm::orc::JITTargetMachineBuilder final_jtmb)
                         -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                       auto options = final_jtmb.getOptions();
                       pool->set_builder(std::move(final_jtmb));
                       return std::make_unique<detail::pooled_compiler>(pool, options);
                     })
                 // No initializer support (llvm.global_ctors): kernels have none, and the generic
                 // IR platform would add a pass and helper symbols to every module.
                 .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                 .create();
  s.jit = detail::take_or_fail(std::move(jit), "loom.llvm.E501", "cannot create the LLVM JIT");
  s.triple = s.jit->getTargetTriple().str();
  s.data_layout = s.jit->getDataLayout().getStringRepresentation();

  auto& es = s.jit->getExecutionSession();
  es.setErrorReporter([](llvm::Error err) {
    std::string msg = llvm::toString(std::move(err));
    try {
      if (std::string* sink = detail::captured_errors()) {
        if (!sink->empty()) *sink += "; ";
        *sink += msg;
        return;
      }
    } catch (...) {  // out of memory: fall back to printing
    }
    llvm::errs() << "loom: LLVM JIT error: " << msg << "\n";
  });

  // The runtime functions that generated code calls, bound by address: the host executable need
  // not export them (-rdynamic), and they win over any same-named symbol of the process.
  llvm::orc::SymbolMap runtime;
  auto flags = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
  runtime[s.jit->mangleAndIntern("loom_parallel_for")] = {
      llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void*>(&::loom_parallel_for)), flags};
  runtime[s.jit->mangleAndIntern("loom_parallel_num_threads")] = {
      llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void*>(&::loom_parallel_num_threads)),
      flags};
  runtime[s.jit->mangleAndIntern("loom_workspace_alloc")] = {
      llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void*>(&::loom_workspace_alloc)), flags};
  runtime[s.jit->mangleAndIntern("loom_workspace_free")] = {
      llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void*>(&::loom_workspace_free)), flags};
  if (llvm::Error err = s.jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(runtime)))
    detail::fail_with("loom.llvm.E501", "cannot define loom's runtime symbols", std::move(err));
  // Everything else (libc, libm) comes from the "<Process Symbols>" JITDylib that LLJIT links
  // behind the main one: a DynamicLibrarySearchGenerator over the whole process.

  s.jit->getIRTransformLayer().setTransform(
      [impl = &s](llvm::orc::ThreadSafeModule tsm, llvm::orc::MaterializationResponsibility&)
          -> llvm::Expected<llvm::orc::ThreadSafeModule> {
        if (llvm::Error err = tsm.withModuleDo([&](llvm::Module& m) { return impl->transform(m); }))
          return err;
        return tsm;
      });

  auto tm = detail::take_or_fail(s.pool->create(), "loom.llvm.E501",
                                 "cannot create a TargetMachine for the host");
  s.vector_bits = max_vector_register_bits(*tm);
  s.preferred_vector_bits = preferred_vector_register_bits(*tm);
}

LOOM_LLVM_DECL Engine::~Engine() = default;

LOOM_LLVM_DECL Engine& Engine::global() {
  // Never destroyed: CompiledModule handles in static objects may be destroyed after any static
  // engine would be, and tearing down LLVM during static destruction gains nothing.
  static Engine* engine = new Engine();
  return *engine;
}

LOOM_LLVM_DECL const std::string& Engine::cpu_name() const noexcept { return impl_->cpu; }
LOOM_LLVM_DECL const std::string& Engine::features() const noexcept { return impl_->features; }
LOOM_LLVM_DECL bool Engine::has_feature(std::string_view name) const noexcept {
  const auto& f = impl_->enabled_features;
  return std::binary_search(f.begin(), f.end(), name,
                            [](std::string_view a, std::string_view b) { return a < b; });
}
LOOM_LLVM_DECL const std::string& Engine::triple() const noexcept { return impl_->triple; }
LOOM_LLVM_DECL const std::string& Engine::data_layout() const noexcept {
  return impl_->data_layout;
}
LOOM_LLVM_DECL int Engine::vector_bits() const noexcept { return impl_->vector_bits; }
LOOM_LLVM_DECL int Engine::preferred_vector_bits() const noexcept {
  return impl_->preferred_vector_bits;
}
LOOM_LLVM_DECL std::string Engine::unique_name(std::string_view prefix) {
  std::string name(prefix);
  name += '_';
  name += std::to_string(impl_->name_counter.fetch_add(1, std::memory_order_relaxed));
  return name;
}
LOOM_LLVM_DECL std::size_t Engine::live_modules() const noexcept {
  return impl_->live.load(std::memory_order_relaxed);
}

// --- CompiledModule ------------------------------------------------------------------------------

struct CompiledModule::Impl {
  detail::engine_access::engine_impl* engine = nullptr;
  llvm::orc::ResourceTrackerSP tracker;
  std::vector<std::pair<std::string, void*>> symbols;  // sorted by name
  std::string ir, assembly;
  double seconds = 0;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (tracker) engine->remove(tracker);
  }
};

LOOM_LLVM_DECL CompiledModule detail::engine_access::make(std::unique_ptr<module_impl> impl) {
  CompiledModule m;
  m.impl_ = std::move(impl);
  return m;
}

LOOM_LLVM_DECL CompiledModule::CompiledModule() noexcept = default;
LOOM_LLVM_DECL CompiledModule::CompiledModule(CompiledModule&& other) noexcept = default;
LOOM_LLVM_DECL CompiledModule& CompiledModule::operator=(CompiledModule&& other) noexcept = default;
LOOM_LLVM_DECL CompiledModule::~CompiledModule() = default;

LOOM_LLVM_DECL void* CompiledModule::find_symbol(std::string_view name) const noexcept {
  if (!impl_) return nullptr;
  const auto& syms = impl_->symbols;
  auto it = std::lower_bound(syms.begin(), syms.end(), name,
                             [](const auto& entry, std::string_view n) { return entry.first < n; });
  return it != syms.end() && it->first == name ? it->second : nullptr;
}

LOOM_LLVM_DECL void* CompiledModule::symbol(std::string_view name) const {
  void* address = find_symbol(name);
  if (!address) {
    std::string known;
    for (const auto& n : symbol_names()) known += (known.empty() ? "" : ", ") + n;
    LOOM_USER_FAIL("loom.llvm.E505")
        << "the compiled module defines no external symbol '" << name << "'"
        << (impl_ ? " (it defines: " + (known.empty() ? std::string("nothing") : known) + ")"
                  : std::string(" (the handle is empty)"));
  }
  return address;
}

LOOM_LLVM_DECL std::vector<std::string> CompiledModule::symbol_names() const {
  std::vector<std::string> names;
  if (impl_)
    for (const auto& entry : impl_->symbols) names.push_back(entry.first);
  return names;
}

LOOM_LLVM_DECL const std::string& CompiledModule::optimized_ir() const noexcept {
  static const std::string none;
  return impl_ ? impl_->ir : none;
}
LOOM_LLVM_DECL const std::string& CompiledModule::assembly() const noexcept {
  static const std::string none;
  return impl_ ? impl_->assembly : none;
}
LOOM_LLVM_DECL double CompiledModule::compile_seconds() const noexcept {
  return impl_ ? impl_->seconds : 0.0;
}
LOOM_LLVM_DECL void CompiledModule::reset() noexcept { impl_.reset(); }

// --- module_builder.hpp --------------------------------------------------------------------------

LOOM_LLVM_DECL ModuleBundle new_module(Engine& engine, std::string_view name) {
  ModuleBundle b;
  b.context = std::make_unique<llvm::LLVMContext>();
  b.module = std::make_unique<llvm::Module>(llvm::StringRef(name.data(), name.size()), *b.context);
  configure_module(engine, *b.module);
  return b;
}

LOOM_LLVM_DECL void configure_module(Engine& engine, llvm::Module& module) {
  auto& jit = *detail::engine_access::impl(engine).jit;
  if (module.getTargetTriple().empty()) module.setTargetTriple(jit.getTargetTriple().str());
  if (module.getDataLayout().isDefault()) module.setDataLayout(jit.getDataLayout());
}

LOOM_LLVM_DECL CompiledModule add_module(Engine& engine, std::unique_ptr<llvm::Module> module,
                                         std::unique_ptr<llvm::LLVMContext> context,
                                         const CompileOptions& options) {
  LOOM_USER_CHECK(module && context, "loom.llvm.E508")
      << "add_module needs both a module and the context that owns it";
  LOOM_USER_CHECK(&module->getContext() == context.get(), "loom.llvm.E508")
      << "add_module: module '" << module->getModuleIdentifier()
      << "' does not belong to the context passed with it";
  LOOM_USER_CHECK(options.opt_level >= 0 && options.opt_level <= 3, "loom.llvm.E508")
      << "add_module: opt_level must be 0..3, not " << options.opt_level;
  auto start = std::chrono::steady_clock::now();
  detail::engine_access::engine_impl& s = detail::engine_access::impl(engine);
  const std::string module_name = module->getModuleIdentifier();

  configure_module(engine, *module);
  {
    std::string problems;
    llvm::raw_string_ostream os(problems);
    if (llvm::verifyModule(*module, &os)) {
      os.flush();
      while (!problems.empty() && (problems.back() == '\n' || problems.back() == ' '))
        problems.pop_back();
      LOOM_BACKEND_FAIL("loom.llvm.E502")
          << "invalid LLVM module '" << module_name << "': " << problems;
    }
  }

  // The external definitions are the module's interface: look all of them up once, which makes
  // the JIT compile the whole module now (a failure surfaces here, not at the first call).
  std::vector<std::string> names;
  for (llvm::GlobalValue& gv : module->global_values()) {
    if (gv.isDeclaration() || gv.hasLocalLinkage() || gv.hasAvailableExternallyLinkage() ||
        gv.hasAppendingLinkage() || !gv.hasName())
      continue;
    // O3's GlobalDCE deletes unused linkonce definitions, but ORC already promised them when the
    // module was added, and would fail the link; weak linkage keeps them without changing
    // their meaning inside one JIT.
    if (gv.hasLinkOnceLinkage())
      gv.setLinkage(gv.hasLinkOnceODRLinkage() ? llvm::GlobalValue::WeakODRLinkage
                                               : llvm::GlobalValue::WeakAnyLinkage);
    names.push_back(gv.getName().str());
  }
  std::sort(names.begin(), names.end());

  auto impl = std::make_unique<detail::engine_access::module_impl>();
  impl->engine = &s;
  impl->tracker = s.jit->getMainJITDylib().createResourceTracker();
  s.live.fetch_add(1, std::memory_order_relaxed);  // ~Impl undoes this, whatever happens next

  detail::module_job job{options, {}, {}};
  const llvm::Module* key = module.get();
  {
    std::lock_guard<std::mutex> lock(s.jobs_mutex);
    s.jobs[key] = &job;
  }
  struct job_guard {  // unregisters the job on every path out of here
    detail::engine_access::engine_impl& s;
    const llvm::Module* key;
    ~job_guard() {
      std::lock_guard<std::mutex> lock(s.jobs_mutex);
      s.jobs.erase(key);
    }
  } guard{s, key};

  std::string reported;
  struct capture_guard {
    std::string* previous;
    explicit capture_guard(std::string* sink) : previous(detail::captured_errors()) {
      detail::captured_errors() = sink;
    }
    ~capture_guard() { detail::captured_errors() = previous; }
  } capture(&reported);

  llvm::orc::ThreadSafeModule tsm(std::move(module),
                                  llvm::orc::ThreadSafeContext(std::move(context)));
  if (llvm::Error err = s.jit->addIRModule(impl->tracker, std::move(tsm)))
    detail::fail_with("loom.llvm.E503", "the JIT refused module '" + module_name + "'",
                      std::move(err));

  if (!names.empty()) {
    llvm::orc::SymbolLookupSet lookup;
    std::vector<llvm::orc::SymbolStringPtr> mangled;
    for (const auto& n : names) {
      mangled.push_back(s.jit->mangleAndIntern(n));
      lookup.add(mangled.back());
    }
    auto& main = s.jit->getMainJITDylib();
    auto found = s.jit->getExecutionSession().lookup(
        llvm::orc::makeJITDylibSearchOrder(&main, llvm::orc::JITDylibLookupFlags::MatchAllSymbols),
        std::move(lookup));
    if (!found) {
      std::string msg = llvm::toString(found.takeError());
      if (!reported.empty()) msg = reported + " (" + msg + ")";
      LOOM_BACKEND_FAIL("loom.llvm.E504")
          << "compiling module '" << module_name << "' failed: " << msg;
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto it = found->find(mangled[i]);
      void* address = it == found->end() ? nullptr : it->second.getAddress().toPtr<void*>();
      impl->symbols.emplace_back(names[i], address);
    }
  }

  impl->ir = std::move(job.ir);
  impl->assembly = std::move(job.assembly);
  impl->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return detail::engine_access::make(std::move(impl));
}

LOOM_LLVM_DECL CompiledModule add_module(Engine& engine, ModuleBundle&& bundle,
                                         const CompileOptions& options) {
  return add_module(engine, std::move(bundle.module), std::move(bundle.context), options);
}

LOOM_LLVM_DECL const llvm::DataLayout& data_layout(Engine& engine) {
  return detail::engine_access::impl(engine).jit->getDataLayout();
}

LOOM_LLVM_DECL const llvm::Triple& target_triple(Engine& engine) {
  return detail::engine_access::impl(engine).jit->getTargetTriple();
}

LOOM_LLVM_DECL std::unique_ptr<llvm::TargetMachine> create_target_machine(Engine& engine) {
  return detail::take_or_fail(detail::engine_access::impl(engine).pool->create(), "loom.llvm.E501",
                              "cannot create a TargetMachine for the host");
}

LOOM_LLVM_DECL int max_vector_register_bits(llvm::TargetMachine& tm) {
  // X86 reads "prefer-vector-width" as an override of the subtarget's preference (Intel's
  // AVX-512 cores prefer 256); other targets ignore it and report their register width.
  return detail::register_bits(tm, "4096");
}

LOOM_LLVM_DECL int preferred_vector_register_bits(llvm::TargetMachine& tm) {
  return detail::register_bits(tm, nullptr);
}

LOOM_LLVM_DECL void optimize_module(llvm::Module& module, llvm::TargetMachine& tm, int opt_level) {
  LOOM_USER_CHECK(opt_level >= 0 && opt_level <= 3, "loom.llvm.E508")
      << "optimize_module: opt_level must be 0..3, not " << opt_level;
  if (llvm::Error err = detail::run_pipeline(module, tm, opt_level))
    detail::fail_with("loom.llvm.E506", "the optimisation pipeline failed", std::move(err));
}

LOOM_LLVM_DECL std::string print_module(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, nullptr);
  os.flush();
  return text;
}

LOOM_LLVM_DECL std::string emit_assembly(const llvm::Module& module, llvm::TargetMachine& tm) {
  // Code generation rewrites IR (CodeGenPrepare and friends), so it runs on a copy.
  auto clone = llvm::CloneModule(module);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    LOOM_BACKEND_FAIL("loom.llvm.E507")
        << "the target " << tm.getTargetTriple().str() << " cannot emit assembly";
  pm.run(*clone);
  return std::string(text.data(), text.size());
}

}  // namespace cpu_jit
LOOM_END_NAMESPACE

#endif  // LOOM_BACKEND_LLVM_IMPL_JIT_IPP

// The CPU JIT engine (loom/backend/llvm) and the parallel runtime it binds (loom/runtime).
//
// The IR here is written by hand with llvm::IRBuilder, standing in for the code generator.
// Timings and memory figures are printed (they are reported numbers, not pass/fail criteria,
// except for generous bounds that only catch gross regressions).
#include "loom/backend/llvm/jit.hpp"
#include "loom/backend/llvm/module_builder.hpp"
#include "loom/runtime/parallel.hpp"
#include "loom/runtime/workspace.hpp"

#include <doctest/doctest.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/sanitizers.hpp"

namespace {

using loom::cpu_jit::add_module;
using loom::cpu_jit::CompiledModule;
using loom::cpu_jit::CompileOptions;
using loom::cpu_jit::Engine;
using loom::cpu_jit::ModuleBundle;
using loom::cpu_jit::new_module;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// CPU time of the calling thread, in seconds: unlike wall time it does not count the time
/// other processes on a shared machine take from us.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Resident set size in bytes (/proc/self/statm, second field, in pages), after the heap has
/// given its free pages back: glibc trims them whenever a free leaves enough at the top, so an
/// untrimmed reading can drop by megabytes between two measurements that allocate.
std::int64_t rss_bytes() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

/// Sets the runtime's thread count for one scope.
struct thread_count_scope {
  explicit thread_count_scope(int n) { loom::runtime::set_num_threads(n); }
  ~thread_count_scope() { loom::runtime::set_num_threads(0); }
};

/// Builds `void name(float* noalias a, float* noalias b, float* noalias c, i64 n)`:
/// for (i = 0; i < n; ++i) c[i] = a[i] + b[i].
ModuleBundle make_add_module(Engine& engine, const std::string& name) {
  ModuleBundle b = new_module(engine, name + "_module");
  llvm::LLVMContext& ctx = *b.context;
  llvm::IRBuilder<> ir(ctx);
  llvm::Type* f32 = ir.getFloatTy();
  llvm::Type* i64 = ir.getInt64Ty();
  llvm::Type* ptr = ir.getPtrTy();
  auto* type = llvm::FunctionType::get(ir.getVoidTy(), {ptr, ptr, ptr, i64}, false);
  auto* fn = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, *b.module);
  for (unsigned i = 0; i < 3; ++i) fn->addParamAttr(i, llvm::Attribute::NoAlias);
  llvm::Value *a = fn->getArg(0), *bb = fn->getArg(1), *c = fn->getArg(2), *n = fn->getArg(3);

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);
  ir.SetInsertPoint(entry);
  ir.CreateCondBr(ir.CreateICmpSGT(n, ir.getInt64(0)), loop, exit);
  ir.SetInsertPoint(loop);
  llvm::PHINode* i = ir.CreatePHI(i64, 2, "i");
  i->addIncoming(ir.getInt64(0), entry);
  llvm::Value* x = ir.CreateLoad(f32, ir.CreateInBoundsGEP(f32, a, i));
  llvm::Value* y = ir.CreateLoad(f32, ir.CreateInBoundsGEP(f32, bb, i));
  ir.CreateStore(ir.CreateFAdd(x, y), ir.CreateInBoundsGEP(f32, c, i));
  llvm::Value* next = ir.CreateAdd(i, ir.getInt64(1), "next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  ir.CreateCondBr(ir.CreateICmpEQ(next, n), exit, loop);
  ir.SetInsertPoint(exit);
  ir.CreateRetVoid();
  return b;
}

using add_fn = void(float*, float*, float*, std::int64_t);

/// Builds, on top of the runtime's `loom_parallel_for`:
/// - internal `i32 scale_body(i64 begin, i64 end, ptr data)`: data[i] = 2 * data[i] + i;
/// - `i32 <name>_scale(ptr data, i64 n)`: loom_parallel_for(n, scale_body, data);
/// - internal `i32 fail_body(i64 begin, i64 end, ptr)`: 7 for the chunk holding task 0, else 0;
/// - `i32 <name>_fail(i64 n)`: loom_parallel_for(n, fail_body, null);
/// - `i32 <name>_threads()`: loom_parallel_num_threads().
ModuleBundle make_parallel_module(Engine& engine, const std::string& name) {
  ModuleBundle b = new_module(engine, name + "_module");
  llvm::LLVMContext& ctx = *b.context;
  llvm::Module& m = *b.module;
  llvm::IRBuilder<> ir(ctx);
  llvm::Type* f32 = ir.getFloatTy();
  llvm::Type* i64 = ir.getInt64Ty();
  llvm::Type* i32 = ir.getInt32Ty();
  llvm::Type* ptr = ir.getPtrTy();
  auto* body_type = llvm::FunctionType::get(i32, {i64, i64, ptr}, false);
  llvm::FunctionCallee parallel_for = m.getOrInsertFunction(
      "loom_parallel_for", llvm::FunctionType::get(i32, {i64, ptr, ptr}, false));
  llvm::FunctionCallee num_threads =
      m.getOrInsertFunction("loom_parallel_num_threads", llvm::FunctionType::get(i32, false));

  auto* scale = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, "scale_body", m);
  {
    llvm::Value *begin = scale->getArg(0), *end = scale->getArg(1), *data = scale->getArg(2);
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", scale);
    auto* loop = llvm::BasicBlock::Create(ctx, "loop", scale);
    auto* exit = llvm::BasicBlock::Create(ctx, "exit", scale);
    ir.SetInsertPoint(entry);
    ir.CreateCondBr(ir.CreateICmpSLT(begin, end), loop, exit);
    ir.SetInsertPoint(loop);
    llvm::PHINode* i = ir.CreatePHI(i64, 2, "i");
    i->addIncoming(begin, entry);
    llvm::Value* p = ir.CreateInBoundsGEP(f32, data, i);
    llvm::Value* v = ir.CreateFMul(ir.CreateLoad(f32, p), llvm::ConstantFP::get(f32, 2.0));
    ir.CreateStore(ir.CreateFAdd(v, ir.CreateSIToFP(i, f32)), p);
    llvm::Value* next = ir.CreateAdd(i, ir.getInt64(1), "next", true, true);
    i->addIncoming(next, loop);
    ir.CreateCondBr(ir.CreateICmpEQ(next, end), exit, loop);
    ir.SetInsertPoint(exit);
    ir.CreateRet(ir.getInt32(0));
  }
  auto* fail = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, "fail_body", m);
  {
    ir.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fail));
    llvm::Value* first = ir.CreateICmpEQ(fail->getArg(0), ir.getInt64(0));
    ir.CreateRet(ir.CreateSelect(first, ir.getInt32(7), ir.getInt32(0)));
  }
  auto* run_scale = llvm::Function::Create(llvm::FunctionType::get(i32, {ptr, i64}, false),
                                           llvm::Function::ExternalLinkage, name + "_scale", m);
  ir.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", run_scale));
  ir.CreateRet(ir.CreateCall(parallel_for, {run_scale->getArg(1), scale, run_scale->getArg(0)}));

  auto* run_fail = llvm::Function::Create(llvm::FunctionType::get(i32, {i64}, false),
                                          llvm::Function::ExternalLinkage, name + "_fail", m);
  ir.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", run_fail));
  ir.CreateRet(ir.CreateCall(
      parallel_for, {run_fail->getArg(0), fail, llvm::ConstantPointerNull::get(ir.getPtrTy())}));

  auto* threads = llvm::Function::Create(llvm::FunctionType::get(i32, false),
                                         llvm::Function::ExternalLinkage, name + "_threads", m);
  ir.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", threads));
  ir.CreateRet(ir.CreateCall(num_threads));
  return b;
}

/// `i64 <name>(i64 x)` returning 3 * x + 1: the smallest useful module.
ModuleBundle make_tiny_module(Engine& engine, const std::string& name) {
  ModuleBundle b = new_module(engine, name + "_module");
  llvm::IRBuilder<> ir(*b.context);
  llvm::Type* i64 = ir.getInt64Ty();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(i64, {i64}, false),
                                    llvm::Function::ExternalLinkage, name, *b.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*b.context, "entry", fn));
  ir.CreateRet(ir.CreateAdd(ir.CreateMul(fn->getArg(0), ir.getInt64(3)), ir.getInt64(1)));
  return b;
}

/// `float <name>(float x)` returning expf(x), resolved from the host process (libm).
ModuleBundle make_expf_module(Engine& engine, const std::string& name) {
  ModuleBundle b = new_module(engine, name + "_module");
  llvm::IRBuilder<> ir(*b.context);
  llvm::Type* f32 = ir.getFloatTy();
  llvm::FunctionCallee expf =
      b.module->getOrInsertFunction("expf", llvm::FunctionType::get(f32, {f32}, false));
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(f32, {f32}, false),
                                    llvm::Function::ExternalLinkage, name, *b.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*b.context, "entry", fn));
  ir.CreateRet(ir.CreateCall(expf, {fn->getArg(0)}));
  return b;
}

bool add_works(const CompiledModule& m, const std::string& name, std::int64_t n) {
  std::vector<float> a(static_cast<std::size_t>(n)), b(a.size()), c(a.size(), -1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i);
    b[static_cast<std::size_t>(i)] = 3.0f - static_cast<float>(i % 7);
  }
  m.function<add_fn>(name)(a.data(), b.data(), c.data(), n);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (c[i] != a[i] + b[i]) return false;
  return true;
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("the engine detects the host CPU, its features and its vector width") {
    Engine& engine = Engine::global();
    CHECK(&engine == &Engine::global());
    CHECK_FALSE(engine.cpu_name().empty());
    CHECK(engine.cpu_name() != "generic");
    CHECK_FALSE(engine.triple().empty());
    CHECK_FALSE(engine.data_layout().empty());
    CHECK(engine.features().find('+') != std::string::npos);
    CHECK_FALSE(engine.has_feature("no-such-feature"));
    CHECK(engine.preferred_vector_bits() <= engine.vector_bits());
    CHECK(engine.vector_bits() >= 128);

    std::string enabled;
    for (const char* f :
         {"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "evex512"})
      if (engine.has_feature(f)) enabled += std::string(enabled.empty() ? "" : " ") + f;
    std::printf(
        "[jit] host: cpu=%s triple=%s vector_bits=%d preferred_vector_bits=%d features: %s\n",
        engine.cpu_name().c_str(), engine.triple().c_str(), engine.vector_bits(),
        engine.preferred_vector_bits(), enabled.c_str());

    if (llvm::Triple(engine.triple()).getArch() == llvm::Triple::x86_64) {
      CHECK(engine.has_feature("sse2"));
      if (engine.has_feature("avx2")) CHECK(engine.vector_bits() >= 256);
      if (engine.has_feature("avx512f") && engine.has_feature("evex512"))
        CHECK(engine.vector_bits() == 512);
      else if (engine.has_feature("avx"))
        CHECK(engine.vector_bits() == 256);
    }
  }

  TEST_CASE("vector width detection reports registers, not the vectoriser's preference") {
    Engine& engine = Engine::global();
    if (llvm::Triple(engine.triple()).getArch() != llvm::Triple::x86_64) return;
    auto tm_for = [&](const char* cpu) {
      llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(engine.triple())};
      jtmb.setCPU(cpu);
      auto tm = jtmb.createTargetMachine();
      REQUIRE(static_cast<bool>(tm));
      return std::move(*tm);
    };
    auto skx = tm_for("skylake-avx512");
    CHECK(loom::cpu_jit::max_vector_register_bits(*skx) == 512);
    CHECK(loom::cpu_jit::preferred_vector_register_bits(*skx) == 256);
    auto zen3 = tm_for("znver3");
    CHECK(loom::cpu_jit::max_vector_register_bits(*zen3) == 256);
    auto base = tm_for("x86-64");
    CHECK(loom::cpu_jit::max_vector_register_bits(*base) == 128);
    auto host = loom::cpu_jit::create_target_machine(engine);
    CHECK(loom::cpu_jit::max_vector_register_bits(*host) == engine.vector_bits());
  }

  TEST_CASE("a JIT-compiled loop computes c = a + b and is vectorised for the host") {
    Engine& engine = Engine::global();
    const std::string name = engine.unique_name("add");
    CompileOptions options;
    options.dump_ir = true;
    options.dump_asm = true;
    CompiledModule m = add_module(engine, make_add_module(engine, name), options);
    REQUIRE(m);
    CHECK(m.symbol_names() == std::vector<std::string>{name});
    for (std::int64_t n : {0, 1, 7, 16, 1000, 1003}) {
      CAPTURE(n);
      CHECK(add_works(m, name, n));
    }
    std::printf("[jit] add (opt+codegen+link, first module): %.2f ms\n", m.compile_seconds() * 1e3);

    // Dumps: optimised IR and host assembly of the same function.
    CHECK(m.optimized_ir().find("define void @" + name) != std::string::npos);
    CHECK(m.assembly().find(name + ":") != std::string::npos);
    if (engine.has_feature("avx")) {
      CHECK(m.optimized_ir().find("fadd <") != std::string::npos);  // the loop vectoriser ran
      CHECK(m.assembly().find("vaddps") != std::string::npos);
      const char* reg = engine.preferred_vector_bits() >= 512   ? "%zmm"
                        : engine.preferred_vector_bits() >= 256 ? "%ymm"
                                                                : "%xmm";
      CHECK(m.assembly().find(reg) != std::string::npos);
    }
    CompiledModule quiet = add_module(engine, make_add_module(engine, engine.unique_name("add")));
    CHECK(quiet.optimized_ir().empty());
    CHECK(quiet.assembly().empty());
  }

  TEST_CASE("module helpers print IR, optimise and emit assembly without the JIT") {
    Engine& engine = Engine::global();
    ModuleBundle b = make_add_module(engine, "standalone_add");
    CHECK(b.module->getTargetTriple() == engine.triple());
    CHECK(b.module->getDataLayout().getStringRepresentation() == engine.data_layout());
    CHECK(loom::cpu_jit::print_module(*b.module).find("define void @standalone_add") !=
          std::string::npos);
    auto tm = loom::cpu_jit::create_target_machine(engine);
    loom::cpu_jit::optimize_module(*b.module, *tm, 3);
    CHECK_FALSE(llvm::verifyModule(*b.module, &llvm::errs()));
    std::string asm_text = loom::cpu_jit::emit_assembly(*b.module, *tm);
    CHECK(asm_text.find("standalone_add:") != std::string::npos);
    CHECK_FALSE(llvm::verifyModule(*b.module, &llvm::errs()));  // untouched by codegen
  }

  TEST_CASE("O0 and O3 give the same results") {
    Engine& engine = Engine::global();
    for (int level : {0, 1, 2, 3}) {
      CAPTURE(level);
      const std::string name = engine.unique_name("add_o");
      CompileOptions options;
      options.opt_level = level;
      CompiledModule m = add_module(engine, make_add_module(engine, name), options);
      CHECK(add_works(m, name, 1001));
    }
    CompileOptions bad;
    bad.opt_level = 4;
    CHECK_THROWS_WITH_AS(add_module(engine, make_add_module(engine, engine.unique_name("x")), bad),
                         doctest::Contains("[loom.llvm.E508]"), loom::user_error);
  }

  TEST_CASE("generated code runs a parallel loop through loom_parallel_for") {
    Engine& engine = Engine::global();
    const std::string name = engine.unique_name("par");
    CompiledModule m = add_module(engine, make_parallel_module(engine, name));
    auto* scale = m.function<int(float*, std::int64_t)>(name + "_scale");
    auto* fail = m.function<int(std::int64_t)>(name + "_fail");
    auto* threads = m.function<int()>(name + "_threads");
    for (int t : {1, 2}) {
      CAPTURE(t);
      thread_count_scope scope(t);
      CHECK(threads() == t);
      for (std::int64_t n : {0, 1, 2, 3, 1000}) {
        CAPTURE(n);
        std::vector<float> data(static_cast<std::size_t>(n));
        std::iota(data.begin(), data.end(), 1.0f);
        CHECK(scale(data.data(), n) == 0);
        bool ok = true;
        for (std::int64_t i = 0; i < n; ++i)
          ok = ok && data[static_cast<std::size_t>(i)] ==
                         2.0f * static_cast<float>(i + 1) + static_cast<float>(i);
        CHECK(ok);
      }
      CHECK(fail(10) == 7);
      CHECK(fail(0) == 0);
    }
  }

  TEST_CASE("calls to libm resolve through the process symbols") {
    Engine& engine = Engine::global();
    const std::string name = engine.unique_name("exp");
    CompiledModule m = add_module(engine, make_expf_module(engine, name));
    auto* f = m.function<float(float)>(name);
    for (float x : {-2.0f, 0.0f, 0.5f, 3.0f}) CHECK(f(x) == doctest::Approx(std::exp(x)));
  }

  TEST_CASE("an invalid module is a backend_error carrying the verifier's message") {
    Engine& engine = Engine::global();
    const std::size_t live = engine.live_modules();
    ModuleBundle b = new_module(engine, "broken_module");
    auto* fn =
        llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(*b.context), false),
                               llvm::Function::ExternalLinkage, "broken", *b.module);
    llvm::BasicBlock::Create(*b.context, "entry", fn);  // no terminator
    CHECK_THROWS_WITH_AS(add_module(engine, std::move(b)),
                         doctest::Contains("[loom.llvm.E502] invalid LLVM module 'broken_module'"),
                         loom::backend_error);
    try {
      add_module(engine, [&] {
        ModuleBundle c = new_module(engine, "broken_module");
        auto* g = llvm::Function::Create(
            llvm::FunctionType::get(llvm::Type::getVoidTy(*c.context), false),
            llvm::Function::ExternalLinkage, "broken", *c.module);
        llvm::BasicBlock::Create(*c.context, "entry", g);
        return c;
      }());
      FAIL("no exception");
    } catch (const loom::backend_error& e) {
      CHECK(std::string(e.what()).find("does not have terminator") != std::string::npos);
    }
    CHECK(engine.live_modules() == live);
    // The engine is still usable.
    const std::string name = engine.unique_name("add");
    CHECK(add_works(add_module(engine, make_add_module(engine, name)), name, 10));
  }

  TEST_CASE("an unresolved symbol is a backend_error naming it, and leaves nothing behind") {
    Engine& engine = Engine::global();
    const std::size_t live = engine.live_modules();
    const std::string name = engine.unique_name("calls_missing");
    auto build = [&] {
      ModuleBundle b = new_module(engine, name + "_module");
      llvm::IRBuilder<> ir(*b.context);
      llvm::FunctionCallee missing = b.module->getOrInsertFunction(
          "loom_test_no_such_function", llvm::FunctionType::get(ir.getVoidTy(), false));
      auto* fn = llvm::Function::Create(llvm::FunctionType::get(ir.getVoidTy(), false),
                                        llvm::Function::ExternalLinkage, name, *b.module);
      ir.SetInsertPoint(llvm::BasicBlock::Create(*b.context, "entry", fn));
      ir.CreateCall(missing);
      ir.CreateRetVoid();
      return b;
    };
    CHECK_THROWS_WITH_AS(add_module(engine, build()),
                         doctest::Contains("loom_test_no_such_function"), loom::backend_error);
    CHECK_THROWS_WITH_AS(add_module(engine, build()), doctest::Contains("[loom.llvm.E504]"),
                         loom::backend_error);
    CHECK(engine.live_modules() == live);
  }

  TEST_CASE("external names are unique among live modules; dropping a module frees its names") {
    Engine& engine = Engine::global();
    const std::string name = engine.unique_name("dup");
    CompiledModule first = add_module(engine, make_add_module(engine, name));
    CHECK_THROWS_WITH_AS(add_module(engine, make_add_module(engine, name)),
                         doctest::Contains("[loom.llvm.E503]"), loom::backend_error);
    CHECK(add_works(first, name, 33));  // the failed add did not disturb the live module
    first.reset();
    CHECK_FALSE(first);
    CompiledModule second = add_module(engine, make_add_module(engine, name));
    CHECK(add_works(second, name, 33));
  }

  TEST_CASE("a module built for another data layout is refused") {
    Engine& engine = Engine::global();
    const std::size_t live = engine.live_modules();
    ModuleBundle b = make_add_module(engine, engine.unique_name("add_dl"));
    b.module->setDataLayout("e-m:e-p:32:32-i64:64-n32-S128");
    CHECK_THROWS_WITH_AS(add_module(engine, std::move(b)),
                         doctest::Contains("[loom.llvm.E503] the JIT refused module"),
                         loom::backend_error);
    CHECK(engine.live_modules() == live);
  }

  TEST_CASE("CompiledModule is a move-only handle; unknown names are user errors") {
    Engine& engine = Engine::global();
    const std::size_t live = engine.live_modules();
    const std::string name = engine.unique_name("add");
    CompiledModule a = add_module(engine, make_add_module(engine, name));
    CHECK(engine.live_modules() == live + 1);
    void* address = a.symbol(name);
    CompiledModule b = std::move(a);
    CHECK_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from handles are empty by contract
    CHECK(b.symbol(name) == address);
    CHECK(b.find_symbol("nope") == nullptr);
    CHECK_THROWS_WITH_AS(b.symbol("nope"), doctest::Contains("[loom.llvm.E505]"), loom::user_error);
    CHECK_THROWS_WITH_AS(a.symbol(name), doctest::Contains("the handle is empty"),
                         loom::user_error);
    CompiledModule c;
    c = std::move(b);
    CHECK(add_works(c, name, 5));
    CHECK(engine.live_modules() == live + 1);
    c = CompiledModule();
    CHECK(engine.live_modules() == live);

    std::unique_ptr<llvm::LLVMContext> other = std::make_unique<llvm::LLVMContext>();
    ModuleBundle bundle = make_add_module(engine, engine.unique_name("add"));
    CHECK_THROWS_WITH_AS(add_module(engine, std::move(bundle.module), std::move(other)),
                         doctest::Contains("[loom.llvm.E508]"), loom::user_error);
    CHECK_THROWS_WITH_AS(add_module(engine, nullptr, nullptr),
                         doctest::Contains("[loom.llvm.E508]"), loom::user_error);
  }

  TEST_CASE("two threads can compile and run modules at the same time") {
    Engine& engine = Engine::global();
    std::atomic<int> good{0};
    auto work = [&] {
      for (int k = 0; k < 15; ++k) {
        const std::string name = engine.unique_name("concurrent_add");
        CompiledModule m = add_module(engine, make_add_module(engine, name));
        if (add_works(m, name, 100 + k)) ++good;
      }
    };
    std::thread t1(work), t2(work);
    t1.join();
    t2.join();
    CHECK(good == 30);
  }

  TEST_CASE("JIT latency of a small vectorisable loop") {
    Engine& engine = Engine::global();
    for (int level : {3, 0}) {
      std::vector<double> build, total, cpu;
      for (int k = 0; k < 60; ++k) {
        const std::string name = engine.unique_name("latency_add");
        auto t0 = clock_type::now();
        const double c0 = thread_cpu_seconds();
        ModuleBundle b = make_add_module(engine, name);
        build.push_back(seconds_since(t0));
        CompileOptions options;
        options.opt_level = level;
        CompiledModule m = add_module(engine, std::move(b), options);
        total.push_back(seconds_since(t0));
        cpu.push_back(thread_cpu_seconds() - c0);
        REQUIRE(add_works(m, name, 40));
      }
      std::sort(build.begin(), build.end());
      std::sort(total.begin(), total.end());
      std::sort(cpu.begin(), cpu.end());
      std::printf(
          "[jit] add loop at O%d, build IR + verify + optimise + codegen + link: wall median "
          "%.2f ms (min %.2f ms), CPU median %.2f ms; IR building alone %.3f ms\n",
          level, total[total.size() / 2] * 1e3, total.front() * 1e3, cpu[cpu.size() / 2] * 1e3,
          build[build.size() / 2] * 1e3);
    }
  }

  // Not under AddressSanitizer: its quarantine holds freed memory back from reuse, so the
  // resident size grows by design (LeakSanitizer checks the leaks there, at exit).
  TEST_CASE("compiling and dropping 2,000 modules does not grow memory" *
            doctest::skip(loom_test::address_sanitizer)) {
    Engine& engine = Engine::global();
    const std::size_t live = engine.live_modules();
    auto compile_and_drop = [&](int count) {
      for (int k = 0; k < count; ++k) {
        const std::string name = engine.unique_name("churn");
        CompiledModule m = add_module(engine, make_tiny_module(engine, name));
        REQUIRE(m.function<std::int64_t(std::int64_t)>(name)(k) == 3 * k + 1);
      }
    };
    compile_and_drop(300);  // warm-up: allocator arenas, TargetMachine pool, symbol tables
    const std::int64_t before = rss_bytes();
    auto t0 = clock_type::now();
    const double c0 = thread_cpu_seconds();
    compile_and_drop(2000);
    const double seconds = seconds_since(t0), cpu = thread_cpu_seconds() - c0;
    const std::int64_t after = rss_bytes();
    const double growth_mb = static_cast<double>(after - before) / (1024.0 * 1024.0);

    // The measurement can see memory: 300 live modules do show up.
    std::vector<CompiledModule> kept;
    for (int k = 0; k < 300; ++k)
      kept.push_back(add_module(engine, make_tiny_module(engine, engine.unique_name("kept"))));
    const double kept_mb = static_cast<double>(rss_bytes() - after) / (1024.0 * 1024.0);
    kept.clear();

    std::printf(
        "[jit] 2000 x compile+call+drop (tiny module, O3): RSS %.1f MB -> %.1f MB, growth "
        "%.2f MB; per module %.2f ms wall, %.2f ms CPU. For scale: 300 live modules hold "
        "%.2f MB.\n",
        static_cast<double>(before) / 1048576.0, static_cast<double>(after) / 1048576.0, growth_mb,
        seconds / 2000 * 1e3, cpu / 2000 * 1e3, kept_mb);
    CHECK(engine.live_modules() == live);
    CHECK(growth_mb < 4.0);
    CHECK(kept_mb > 0.5);
  }

}  // TEST_SUITE("jit")

TEST_SUITE("runtime") {
  TEST_CASE("parallel_for covers every task once, in contiguous deterministic chunks") {
    for (int t : {1, 2, 3}) {
      thread_count_scope scope(t);
      CHECK(loom::runtime::num_threads() == t);
      for (std::int64_t n : {0, 1, 2, 3, 5, 1000}) {
        CAPTURE(t);
        CAPTURE(n);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::mutex mutex;
        std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
        int rc = loom::runtime::parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
          std::lock_guard<std::mutex> lock(mutex);
          chunks.emplace_back(begin, end);
        });
        CHECK(rc == 0);
        CHECK(std::all_of(hits.begin(), hits.end(), [](const auto& h) { return h == 1; }));
        std::sort(chunks.begin(), chunks.end());
        CHECK(chunks.size() == static_cast<std::size_t>(std::min<std::int64_t>(n, t)));
        for (std::size_t k = 0; k < chunks.size(); ++k) {
          CHECK(chunks[k].first < chunks[k].second);
          if (k > 0) CHECK(chunks[k].first == chunks[k - 1].second);
          // Static split: sizes differ by at most one, larger chunks first.
          const std::int64_t size = chunks[k].second - chunks[k].first;
          CHECK((size == n / static_cast<std::int64_t>(chunks.size()) ||
                 size == n / static_cast<std::int64_t>(chunks.size()) + 1));
        }
      }
    }
  }

  TEST_CASE("two threads really run concurrently; nested loops run inline") {
    thread_count_scope scope(2);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    std::atomic<int> arrived{0}, nested_serial{0};
    loom::runtime::parallel_for(2, [&](std::int64_t, std::int64_t) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        ids.insert(std::this_thread::get_id());
      }
      // A chunk cannot finish before the other one has started, so the caller cannot run both:
      // a worker has to take one (the timeout only keeps a broken pool from hanging the test).
      ++arrived;
      for (auto t0 = clock_type::now(); arrived < 2 && seconds_since(t0) < 20;)
        std::this_thread::yield();
      loom::runtime::parallel_for(10, [&](std::int64_t begin, std::int64_t end) {
        if (begin == 0 && end == 10) ++nested_serial;  // one serial call covering everything
      });
    });
    CHECK(arrived == 2);
    CHECK(ids.size() == 2);
    CHECK(nested_serial == 2);
  }

  TEST_CASE("a parallel loop started while another runs executes serially on its own thread") {
    thread_count_scope scope(2);
    std::atomic<bool> inner_done{false};
    std::atomic<int> other_calls{0};
    std::thread other;
    loom::runtime::parallel_for(2, [&](std::int64_t begin, std::int64_t) {
      if (begin != 0) return;
      other = std::thread([&] {
        loom::runtime::parallel_for(100, [&](std::int64_t b, std::int64_t e) {
          if (b == 0 && e == 100) ++other_calls;
        });
        inner_done = true;
      });
      // Keep the outer loop running until the other thread's loop has finished.
      for (auto t0 = clock_type::now(); !inner_done && seconds_since(t0) < 20;)
        std::this_thread::yield();
    });
    other.join();
    CHECK(inner_done);
    CHECK(other_calls == 1);
  }

  // Not under ThreadSanitizer, which ends a child that starts threads after a multi-threaded
  // fork ("not supported").
  TEST_CASE("a forked child gets a working pool of its own" *
            doctest::skip(loom_test::thread_sanitizer)) {
    thread_count_scope scope(2);
    std::atomic<int> sum{0};
    loom::runtime::parallel_for(2, [&](std::int64_t b, std::int64_t e) { sum += int(e - b); });
    REQUIRE(sum == 2);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The parent's workers do not exist here; a loop must still finish, with two threads.
      std::atomic<int> arrived{0}, total{0};
      loom::runtime::parallel_for(2, [&](std::int64_t b, std::int64_t e) {
        total += int(e - b);
        ++arrived;
        for (auto t0 = clock_type::now(); arrived < 2 && seconds_since(t0) < 20;)
          std::this_thread::yield();
      });
      _exit(arrived == 2 && total == 2 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  TEST_CASE("errors and exceptions from loop bodies reach the caller") {
    thread_count_scope scope(2);
    CHECK(loom::runtime::parallel_for(
              100, [](std::int64_t begin, std::int64_t) { return begin == 0 ? 3 : 0; }) == 3);
    CHECK_THROWS_WITH_AS(loom::runtime::parallel_for(100,
                                                     [](std::int64_t begin, std::int64_t) {
                                                       if (begin > 0)
                                                         throw std::runtime_error("boom");
                                                     }),
                         "boom", std::runtime_error);
    CHECK_THROWS_WITH_AS(loom::runtime::set_num_threads(-1),
                         doctest::Contains("[loom.runtime.E601]"), loom::user_error);
    loom::runtime::set_num_threads(0);
    CHECK(loom::runtime::num_threads() == loom::runtime::default_num_threads());
    CHECK(loom::runtime::default_num_threads() >= 1);
  }

  TEST_CASE("an empty parallel_for call is cheap") {
    auto empty = [](std::int64_t, std::int64_t, void*) -> int { return 0; };
    const int calls = 20000;
    for (int t : {1, 2}) {
      thread_count_scope scope(t);
      for (int k = 0; k < 1000; ++k) loom_parallel_for(64, +empty, nullptr);  // start the workers
      auto t0 = clock_type::now();
      for (int k = 0; k < calls; ++k) loom_parallel_for(64, +empty, nullptr);
      const double per_call = seconds_since(t0) / calls;
      std::printf("[runtime] empty loom_parallel_for(64 tasks), %d thread%s: %.0f ns per call\n", t,
                  t == 1 ? "" : "s", per_call * 1e9);
      CHECK(per_call < 1e-3);
    }
  }

  TEST_CASE("workspace blocks are aligned, reused by the next allocation, and kept per thread") {
    loom::runtime::release_workspace();
    CHECK(loom::runtime::cached_workspace_bytes() == 0);
    void* a = loom_workspace_alloc(1000);
    REQUIRE(a != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
    std::memset(a, 1, 1000);
    loom_workspace_free(a);
    CHECK(loom::runtime::cached_workspace_bytes() == 1024);
    // Large enough and at most twice the request: the same block again.
    void* b = loom_workspace_alloc(600);
    CHECK(b == a);
    CHECK(loom::runtime::cached_workspace_bytes() == 0);
    loom_workspace_free(b);
    // Less than half of it: a block of its own; too large: another.
    void* small = loom_workspace_alloc(100);
    void* large = loom_workspace_alloc(5000);
    CHECK(small != a);
    CHECK(large != a);
    CHECK(loom::runtime::cached_workspace_bytes() == 1024);
    loom_workspace_free(small);
    loom_workspace_free(large);
    loom_workspace_free(nullptr);
    CHECK(loom::runtime::cached_workspace_bytes() == 1024 + 128 + 5056);
    // Another thread has a cache of its own.
    std::thread([] { CHECK(loom::runtime::cached_workspace_bytes() == 0); }).join();
    // A block above the limit is freed at once.
    void* huge =
        loom_workspace_alloc(static_cast<int64_t>(loom::runtime::workspace_cache_limit) + 64);
    REQUIRE(huge != nullptr);
    loom_workspace_free(huge);
    CHECK(loom::runtime::cached_workspace_bytes() == 1024 + 128 + 5056);
    // A forked child does not reuse the parent's blocks (their pages are shared copy-on-write).
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) _exit(loom::runtime::cached_workspace_bytes() == 0 ? 0 : 1);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    loom::runtime::release_workspace();
    CHECK(loom::runtime::cached_workspace_bytes() == 0);
  }

}  // TEST_SUITE("runtime")

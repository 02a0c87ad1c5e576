// End to end on the CPU: schedules lowered, JIT-compiled through LLVM ORC and run, against the
// reference interpreter. Float tolerance: generated code may contract multiply-adds into FMAs
// and (for split reductions) reorder sums, so results agree to atol 1e-5 + rtol 1e-5 * K where K
// is the reduction length; integer results must be identical.
#include <doctest/doctest.h>
#include <loom/backend/child_process.hpp>
#include <loom/cpu.hpp>
#include <loom/ops.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/sketch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include <sys/wait.h>
#include <unistd.h>

#include "support/random.hpp"
#include "support/random_schedule.hpp"
#include "support/sanitizers.hpp"

using namespace loom;
using loom_test::random_vector;
using sched::Annotation;

namespace {

struct gemm {
  Tensor<float, 2> A, B, C;
  std::shared_ptr<const ComputeDAG> dag;
  int64_t M, N, K;
  gemm(int64_t m, int64_t n, int64_t k) : M(m), N(n), K(k) {
    A = placeholder<float>("A", {M, K});
    B = placeholder<float>("B", {K, N});
    auto r = reduce_axis(K, "k");
    C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, r) * B(r, j), r); }, "matmul");
    dag = std::make_shared<const ComputeDAG>(ComputeDAG({A, B}, {C}));
  }
};

// Runs the state through the JIT and the DAG through the interpreter on the same random inputs.
double jit_vs_interpreter(const sched::State& s, uint32_t seed = 1) {
  const ComputeDAG& dag = s.dag();
  Task task(s.dag_ptr());
  Kernel k = build(task, s);
  auto args = dag.arguments();
  std::vector<std::vector<float>> data, ref;
  std::vector<void*> ptrs, ref_ptrs;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool out = i >= dag.inputs().size();
    data.push_back(out ? std::vector<float>(args[i].num_elements(), -123.0f)
                       : random_vector<float>(args[i].num_elements(), seed + i));
  }
  ref = data;
  for (size_t i = 0; i < args.size(); ++i) {
    ptrs.push_back(data[i].data());
    ref_ptrs.push_back(ref[i].data());
  }
  k.run_unchecked(ptrs.data());
  evaluate(dag, ref_ptrs);
  double worst = 0;
  for (size_t i = dag.inputs().size(); i < args.size(); ++i)
    worst = std::max(worst, loom_test::max_scaled_error(data[i], ref[i], 1e-5, 1e-5 * 256));
  return worst;
}

// The assembly (or with `ir`, LLVM's optimized IR) the JIT makes of a state's loop nest.
std::string compiled_text(const sched::State& s, bool ir = false) {
  cpu_jit::CodegenOptions options;
  options.dump_asm = !ir;
  options.dump_ir = ir;
  const cpu_jit::CompiledKernel k = cpu_jit::compile(lower::lower(s), options);
  return ir ? k.module.optimized_ir() : k.module.assembly();
}

// The hand schedule of the GEMM benchmark: a 6x16 register tile accumulated in C.local, B's
// column panel packed once per panel, rows unrolled, columns vectorized, panels in parallel.
sched::State gemm_schedule(const gemm& g, int mr, int nr, bool pack) {
  sched::State s(g.dag);
  auto cl = s.cache_write("C", ir::MemoryScope::Local);
  s.split("C", 0, {mr});
  s.split("C", 2, {nr});
  s.reorder("C", {2, 0, 1, 3});
  s.compute_at(cl, "C", 1);
  s.reorder(cl, {2, 0, 1});
  s.annotate(cl, 1, Annotation::Unrolled);
  s.annotate(cl, 2, Annotation::Vectorized);
  if (pack) {
    auto bl = s.cache_read("B", ir::MemoryScope::Local, {cl});
    s.compute_at(bl, "C", 0);
    s.annotate(bl, 1, Annotation::Vectorized);
  }
  s.annotate("C", 0, Annotation::Parallel);
  s.annotate("C", 2, Annotation::Unrolled);
  s.annotate("C", 3, Annotation::Vectorized);
  return s;
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("the naive schedule of a matmul matches the interpreter") {
    gemm g(13, 17, 19);
    CHECK(jit_vs_interpreter(sched::State(g.dag)) <= 1.0);
  }

  TEST_CASE("the GEMM hand schedule matches at divisible and odd shapes") {
    for (auto [m, n, k] : {std::tuple{48, 64, 32}, {127, 129, 131}, {5, 3, 7}, {64, 100, 1}}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      gemm g(m, n, k);
      CHECK(jit_vs_interpreter(gemm_schedule(g, 6, 16, false)) <= 1.0);
      CHECK(jit_vs_interpreter(gemm_schedule(g, 6, 16, true)) <= 1.0);
      CHECK(jit_vs_interpreter(gemm_schedule(g, 4, 8, true)) <= 1.0);
    }
  }

  TEST_CASE("the default schedule matches for a matmul + bias + relu chain and a softmax") {
    const int64_t M = 33, N = 40, K = 17;
    auto A = placeholder<float>("A", {M, K});
    auto B = placeholder<float>("B", {K, N});
    auto bias = placeholder<float>("bias", {N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    auto D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); });
    auto j2 = reduce_axis(N, "j2");
    auto mx = compute("mx", {M}, [&](Var i) { return max(D(i, j2), j2); });
    auto e = compute("e", {M, N}, [&](Var i, Var j) { return exp(D(i, j) - mx(i)); });
    auto j3 = reduce_axis(N, "j3");
    auto s = compute("s", {M}, [&](Var i) { return sum(e(i, j3), j3); });
    auto out = compute("out", {M, N}, [&](Var i, Var j) { return e(i, j) / s(i); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A, B, bias}, {out}));
    CHECK(jit_vs_interpreter(sched::default_schedule(dag, Target::host())) <= 1.0);
    CHECK(jit_vs_interpreter(sched::State(dag)) <= 1.0);
  }

  TEST_CASE(
      "an intermediate too large for the stack lives in a workspace block the next call reuses") {
    const int64_t n = 512;  // 1 MiB, far above CodegenOptions::max_stack_bytes
    auto A = placeholder<float>("A", {n, n});
    auto twice = compute("twice", {n, n}, [&](Var i, Var j) { return A(i, j) * 2.0f; });
    auto out = compute("out", {n, n}, [&](Var i, Var j) { return twice(i, j) + 1.0f; });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A}, {out}));
    const sched::State s(dag);  // nothing inlined: `twice` is a buffer of its own
    runtime::release_workspace();
    CHECK(jit_vs_interpreter(s) == 0.0);
    const size_t kept = runtime::cached_workspace_bytes();
    CHECK(kept >= static_cast<size_t>(n * n * 4));
    CHECK(jit_vs_interpreter(s, 2) == 0.0);
    CHECK(runtime::cached_workspace_bytes() == kept);  // taken and given back, not a new block
    runtime::release_workspace();
  }

  TEST_CASE(
      "a kernel whose intermediate buffer cannot be allocated stops with [loom.runtime.E607], "
      "from the top of the kernel and from inside a parallel loop") {
    // The sanitizers' allocators abort on a failed allocation instead of returning null.
    if (loom_test::address_sanitizer || loom_test::thread_sanitizer) return;
    // A process allowed 1 MiB more than it holds can allocate neither P (root: 1 GiB) nor one
    // row of it (64 MiB, at out's parallel row loop).
    const auto dag = loom_test::oversized_intermediate().dag;
    const size_t rows = 16;
    const Task task(dag);
    sched::State root(dag);  // P materialized whole before out
    sched::State per_row(dag);
    per_row.compute_at("P", "out", 0);
    per_row.annotate("out", 0, Annotation::Parallel);
    for (const sched::State* s : {&root, &per_row}) {
      const char* where = s == &root ? "P at the root" : "P per row, in a parallel loop";
      INFO(where);
      const Kernel kernel = build(task, *s);
      std::vector<float> a(rows, 1.0f), b(64, 1.0f), c(rows, -1.0f);
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        runtime::release_workspace();  // no cached block to reuse
        std::string error;
        if (!backend::detail::limit_memory_growth(size_t{1} << 20, error)) ::_exit(3);
        try {
          kernel(a, b, c);
        } catch (const backend_error& e) {
          const std::string what = e.what();
          ::_exit(what.find("[loom.runtime.E607]") != std::string::npos &&
                          what.find("out of memory") != std::string::npos
                      ? 0
                      : 4);
        } catch (...) {
          ::_exit(5);
        }
        ::_exit(6);  // it ran through: the limit did not hold
      }
      int status = 0;
      REQUIRE(::waitpid(child, &status, 0) == child);
      CHECK_MESSAGE(WIFEXITED(status), "the child died of signal " << WTERMSIG(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
  }

  TEST_CASE("padding through if_then_else is never read out of bounds, also vectorized") {
    const int64_t H = 10, W = 21;
    auto X = placeholder<float>("X", {H, W});
    auto ry = reduce_axis(3, "ry"), rx = reduce_axis(3, "rx");
    auto P = compute("P", {H + 2, W + 2}, [&](Var i, Var j) {
      return if_then_else(i >= 1 && i <= H && j >= 1 && j <= W, X(i - 1, j - 1), 0.0f);
    });
    auto Y = compute("Y", {H, W}, [&](Var i, Var j) { return sum(P(i + ry, j + rx), {ry, rx}); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({X}, {Y}));
    sched::State s(dag);
    s.split("Y", 1, {8});
    s.reorder("Y", {0, 2, 3, 1, 4});
    s.compute_at("P", "Y", 0);
    s.annotate("Y", 4, Annotation::Vectorized);
    s.annotate("P", 1, Annotation::Vectorized);
    CHECK(jit_vs_interpreter(s) <= 1.0);
    sched::State t(dag);
    t.compute_inline("P");
    t.annotate("Y", 1, Annotation::Vectorized);
    CHECK(jit_vs_interpreter(t) <= 1.0);
  }

  TEST_CASE("int32 kernels are exact, including wrap-around") {
    const int64_t M = 9, N = 23, K = 11;
    auto A = placeholder<int32_t>("A", {M, K});
    auto B = placeholder<int32_t>("B", {K, N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) {
      return sum(A(i, k) * B(k, j) * 65537 + floordiv(A(i, k), 3) - floormod(B(k, j), 5), k);
    });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A, B}, {C}));
    sched::State s(dag);
    s.split("C", 1, {8});
    s.reorder("C", {0, 3, 1, 2});
    s.annotate("C", 3, Annotation::Vectorized);
    s.annotate("C", 0, Annotation::Parallel);
    Kernel kern = build(Task(dag), s);
    auto a = random_vector<int32_t>(M * K, 3, -100000, 100000);
    auto b = random_vector<int32_t>(K * N, 4, -100000, 100000);
    std::vector<int32_t> c(M * N), ref(M * N);
    kern(a.data(), b.data(), c.data());
    evaluate(*dag, {a.data(), b.data(), ref.data()});
    CHECK(c == ref);
  }

  TEST_CASE("abs of an integer compiles, scalar and vectorized, and wraps at INT_MIN") {
    // Found by the random programs (test_random_programs.cpp): the code generator built the float
    // constant 1 of every call's type, an integer type for abs of int32, and LLVM crashed.
    const int64_t N = 19;
    auto A = placeholder<int32_t>("A", {N});
    auto B = compute("B", {N}, [&](Var i) { return abs(A(i)) - 3; });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({A}, {B}));
    for (bool vectorized : {false, true}) {
      sched::State s(dag);
      if (vectorized) {
        s.split("B", 0, {8});
        s.annotate("B", 1, Annotation::Vectorized);
      }
      Kernel kern = build(Task(dag), s);
      auto a = random_vector<int32_t>(N, 5, -100000, 100000);
      a[3] = std::numeric_limits<int32_t>::min();
      std::vector<int32_t> b(N), ref(N);
      kern(a.data(), b.data());
      evaluate(*dag, {a.data(), ref.data()});
      CHECK(b == ref);
    }
  }

  TEST_CASE("float exp and sigmoid agree with libm within a few ulp, vectorized or not") {
    // exp is generated inline (a polynomial, not a libm call); check it over the whole float
    // range, the overflow and subnormal ends and the special values.
    std::vector<float> x = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            0.5f,
                            1e-8f,
                            -1e-8f,
                            88.0f,
                            88.7f,
                            88.73f,
                            89.0f,
                            1000.0f,
                            -87.0f,
                            -87.4f,
                            -100.0f,
                            -103.9f,
                            -104.5f,
                            -1000.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
    for (float v = -110.0f; v < 95.0f; v += 0.0137f) x.push_back(v);
    while (x.size() % 8 != 3) x.push_back(0.25f);  // a vector tail too
    const auto n = static_cast<int64_t>(x.size());
    auto X = placeholder<float>("X", {n});
    auto E = compute("E", {n}, [&](Var i) { return exp(X(i)); });
    auto S = compute("S", {n}, [&](Var i) { return sigmoid(X(i)); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({X}, {E, S}));
    auto ulps = [](float got, double want) {
      if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
      if (std::isinf(want) || want == 0.0) return got == static_cast<float>(want) ? 0.0 : 1e30;
      const double ulp = std::max(
          std::abs(static_cast<double>(std::nextafter(static_cast<float>(want), INFINITY)) -
                   static_cast<float>(want)),
          1.4e-45);
      return std::abs(got - want) / ulp;
    };
    // 16, 32: AVX-512 scales by 2^m with vscalefps, per whole register; 8, 12: with AVX512VL
    // on 256- and 128-bit parts; elsewhere (and without AVX-512) two exponent multiplies.
    for (int lanes : {1, 8, 12, 16, 32}) {
      CAPTURE(lanes);
      sched::State s(dag);
      if (lanes > 1) {
        for (const char* op : {"E", "S"}) {
          s.split(op, 0, {lanes});
          s.annotate(op, 1, Annotation::Vectorized);
        }
      }
      Kernel k = build(Task(dag), s);
      std::vector<float> e(x.size()), sg(x.size());
      k(x.data(), e.data(), sg.data());
      double worst_exp = 0, worst_sigmoid = 0;
      float worst_exp_at = 0, worst_sigmoid_at = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double xd = x[i];
        if (double u = ulps(e[i], std::exp(xd)); u > worst_exp) {
          worst_exp = u;
          worst_exp_at = x[i];
        }
        // Below -88.7 exp(-x) overflows in float, so the sigmoid is 0 where the exact value is
        // a subnormal: judge that tail by absolute error.
        const double want = 1.0 / (1.0 + std::exp(-xd));
        double u = std::abs(sg[i] - want) < 1.2e-38 ? 0.0 : ulps(sg[i], want);
        if (u > worst_sigmoid) {
          worst_sigmoid = u;
          worst_sigmoid_at = x[i];
        }
      }
      CAPTURE(worst_exp_at);
      CAPTURE(worst_sigmoid_at);
      CHECK(worst_exp <= 3);
      CHECK(worst_sigmoid <= 4);
      if (lanes == 16 && cpu_jit::Engine::global().vector_bits() >= 512)
        CHECK(compiled_text(s).find("vscalefps") != std::string::npos);
    }
  }

  TEST_CASE("a register tile left to LLVM's vectorizers gets no gathers or scatters") {
    // A tuned schedule with no vectorize annotation: 4 rows x 16 columns of C.local accumulated
    // in an unrolled tile, B packed per k-panel. On an AVX-512 host LLVM's loop vectorizer turned
    // the 4-row loop into gather + FMA + scatter per column, 50x slower than SLP-vectorizing the
    // columns; the engine's target features forbid that (jit.ipp).
    auto a = placeholder<float>("A", {64, 48});
    auto b = placeholder<float>("B", {48, 256});
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({a, b}, {ops::matmul(a, b)}));
    const auto steps = sched::history_from_json(nlohmann::json::parse(R"([
        ["CHW","matmul","local"], ["SP","matmul.local",0,64,[1,16,4]],
        ["SP","matmul.local",4,256,[1,4,16]], ["SP","matmul.local",8,48,[24]],
        ["RE","matmul.local",[0,4,1,5,8,2,6,9,3,7]], ["FSP","matmul",0,1,1],
        ["FSP","matmul",2,2,1], ["RE","matmul",[0,2,1,3]], ["CA","matmul.local","matmul",1],
        ["CHR","B","local",["matmul.local"]], ["CA","B.local","matmul.local",4],
        ["FU","matmul",[0,1]], ["AN","matmul",0,"parallel"], ["PR","matmul.local",0,16]])"));
    const sched::State s = sched::replay(dag, steps);
    const std::string assembly = compiled_text(s);
    REQUIRE_FALSE(assembly.empty());
    CHECK(assembly.find("vgather") == std::string::npos);
    CHECK(assembly.find("vscatter") == std::string::npos);
    CHECK(jit_vs_interpreter(s) <= 1.0);
  }

  TEST_CASE("a vectorized loop of any length becomes power-of-two vectors and computes right") {
    // LLVM legalizes a vector of another length by widening and shuffling every operation
    // (lower/vectorize_loops.hpp): lowering cuts such loops into vectors of up to 16 lanes.
    struct store_lanes : ir::StmtVisitor {
      std::vector<int> lanes;
      using ir::StmtVisitor::visit;
      void visit_Store(const ir::Store* op) override {
        lanes.push_back(op->index.dtype().lanes);
        ir::StmtVisitor::visit_Store(op);
      }
    };
    const std::map<int64_t, std::vector<int>> expected = {
        {3, {2, 1}}, {7, {4, 2, 1}}, {14, {8, 4, 2}}, {56, {16, 16, 16, 8}}, {64, {64}}};
    for (const auto& [width, lanes] : expected) {
      CAPTURE(width);
      auto x = placeholder<float>("X", {5, width + 2});
      auto y = compute("Y", {5, width}, [&](Var i, Var j) {
        return x(i, j) * 2.0f + x(i, j + 2) - max(x(i, j + 1), 0.0f);
      });
      auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({x}, {y}));
      sched::State s(dag);
      s.annotate("Y", 1, Annotation::Vectorized);
      store_lanes found;
      found.visit(lower::lower(s).body);
      CHECK(found.lanes == lanes);
      CHECK(jit_vs_interpreter(s) <= 1.0);
    }
  }

  TEST_CASE("16-bit loads, stores and casts: vectorized or not, bit for bit the interpreter's") {
    // Rounding is exact (no summation order involved), so the JIT must give the same bits:
    // bfloat16 through the integer sequence, float16 through LLVM's half fpext/fptrunc.
    auto check = [](auto tag, int64_t width, bool vectorize) {
      using T = decltype(tag);
      CAPTURE(ir::to_string(ir::dtype_v<T>));
      CAPTURE(width);
      CAPTURE(vectorize);
      auto x = placeholder<T>("X", {3, width});
      auto f = placeholder<float>("F", {3, width});
      auto y = compute("Y", {3, width}, [&](Var i, Var j) {
        return cast<T>(cast<float>(x(i, j)) * 3.0f + f(i, j));
      });
      auto z = compute("Z", {3, width}, [&](Var i, Var j) { return cast<bfloat16>(x(i, j)); });
      auto u =
          compute("U", {3, width}, [&](Var i, Var j) { return cast<float16>(f(i, j) * 70000.0f); });
      auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({x, f}, {y, z, u}));
      sched::State s(dag);
      if (vectorize)
        for (const char* st : {"Y", "Z", "U"}) s.annotate(st, 1, Annotation::Vectorized);
      const int64_t n = 3 * width;
      std::vector<T> xv;
      for (float v : random_vector<float>(n, 7, -4, 4)) xv.push_back(T(v));
      xv[0] = T(std::numeric_limits<float>::quiet_NaN());
      auto fv = random_vector<float>(n, 8);
      fv[1] = 1.0f / 512;  // 3 * x + f lands on ties now and then; keep one tiny value too
      std::vector<T> y1(n), y2(n);
      std::vector<bfloat16> z1(n), z2(n);
      std::vector<float16> u1(n), u2(n);
      evaluate(*dag, {xv.data(), fv.data(), y1.data(), z1.data(), u1.data()});
      Kernel k = build(Task(dag), s);
      // The typed call path: 16-bit pointers are checked like the others.
      k(xv.data(), fv.data(), y2.data(), z2.data(), u2.data());
      CHECK_THROWS_AS(k(fv.data(), fv.data(), y2.data(), z2.data(), u2.data()), user_error);
      for (int64_t e = 0; e < n; ++e) {
        CAPTURE(e);
        const bool nan_y = std::isnan(static_cast<float>(y1[e]));
        CHECK(std::isnan(static_cast<float>(y2[e])) == nan_y);
        if (!nan_y) CHECK(y2[e].bits == y1[e].bits);
        const bool nan_z = std::isnan(static_cast<float>(z1[e]));
        CHECK(std::isnan(static_cast<float>(z2[e])) == nan_z);
        if (!nan_z) CHECK(z2[e].bits == z1[e].bits);
        CHECK(u2[e].bits == u1[e].bits);  // overflows to +-inf
      }
    };
    for (int64_t width : {16, 7, 64})
      for (bool vectorize : {false, true}) {
        check(bfloat16{}, width, vectorize);
        check(float16{}, width, vectorize);
      }
  }

  TEST_CASE("16-bit matmuls: the default schedule and sampled programs match the interpreter") {
    for (bool bf : {true, false}) {
      const loom_test::workload w = bf ? loom_test::matmul_half<bfloat16>(24, 40, 32)
                                       : loom_test::matmul_half<float16>(24, 40, 32);
      CAPTURE(w.name);
      const loom_test::reference ref = loom_test::make_reference(w, 5);
      auto jit = [](const ir::LoweredFunc& f, std::vector<void*>& ptrs) {
        auto k = cpu_jit::compile(f);
        k.fn(ptrs.data());
      };
      const Task task(w.dag, Target::host());
      auto r =
          loom_test::run_and_compare(w, ref, sched::default_schedule(w.dag, Target::host()), jit);
      CHECK_MESSAGE(r.ok, r.message);
      std::mt19937_64 rng(bf ? 1 : 2);
      const auto sketches = search::generate_sketches(task);
      int checked = 0;
      for (const sched::State& p : search::sample_programs(sketches, task, {}, rng, 8)) {
        r = loom_test::run_and_compare(w, ref, p, jit);
        ++checked;
        CHECK_MESSAGE(r.ok, r.message << "\nrecord: " << sched::to_record(p.steps()));
      }
      CHECK(checked >= 4);
    }
  }

  TEST_CASE(
      "16-bit convolutions (NCHW, NHWC, depthwise; padded): float32 results, the default "
      "schedule and sampled programs match the interpreter") {
    auto convs = [](auto tag) {
      using T = decltype(tag);
      const std::string type = ir::to_string(ir::dtype_v<T>);
      auto x = placeholder<T>("x", {1, 8, 9, 9});
      auto w = placeholder<T>("w", {12, 8, 3, 3});
      auto y = ops::conv2d_nchw(x, w, {.stride = {1, 1}, .padding = {1, 1}});
      static_assert(std::is_same_v<typename decltype(y)::value_type, float>);
      auto xh = placeholder<T>("xh", {1, 9, 9, 8});
      auto wh = placeholder<T>("wh", {3, 3, 8, 12});
      auto yh = ops::conv2d_nhwc(xh, wh, {.stride = {2, 2}, .padding = {1, 1}});
      auto xd = placeholder<T>("xd", {1, 8, 10, 10});
      auto wd = placeholder<T>("wd", {8, 1, 3, 3});
      auto yd = ops::depthwise_conv2d_nchw(xd, wd, {.padding = {1, 1}});
      return std::vector<loom_test::workload>{
          loom_test::make_workload("conv2d_nchw_" + type, {x, w}, {y}, 72),
          loom_test::make_workload("conv2d_nhwc_" + type, {xh, wh}, {yh}, 72),
          loom_test::make_workload("depthwise_" + type, {xd, wd}, {yd}, 9)};
    };
    std::vector<loom_test::workload> all = convs(bfloat16{});
    for (auto& w : convs(float16{})) all.push_back(w);
    auto jit = [](const ir::LoweredFunc& f, std::vector<void*>& ptrs) {
      auto k = cpu_jit::compile(f);
      k.fn(ptrs.data());
    };
    uint64_t seed = 3;
    for (const loom_test::workload& w : all) {
      CAPTURE(w.name);
      const loom_test::reference ref = loom_test::make_reference(w, 7);
      const Task task(w.dag, Target::host());
      auto r =
          loom_test::run_and_compare(w, ref, sched::default_schedule(w.dag, Target::host()), jit);
      CHECK_MESSAGE(r.ok, r.message);
      std::mt19937_64 rng(seed++);
      int checked = 0;
      for (const sched::State& p :
           search::sample_programs(search::generate_sketches(task), task, {}, rng, 4)) {
        r = loom_test::run_and_compare(w, ref, p, jit);
        ++checked;
        CHECK_MESSAGE(r.ok, r.message << "\nrecord: " << sched::to_record(p.steps()));
      }
      CHECK(checked >= 2);
    }
  }

  TEST_CASE("float max/min reductions ignore NaN like fmax, in scalar and vectorized code") {
    // The update is lowered as select(x > acc, x, acc) (one vmaxps), not maxnum; that equals
    // fmax only because the accumulator starts at -inf and never takes a NaN. Rows: plain,
    // NaN in front, NaN at the end, all NaN (fmax gives the identity), -inf only.
    const int64_t rows = 5, cols = 48;
    std::vector<float> x = random_vector<float>(rows * cols, 17);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    x[1 * cols + 0] = nan;
    x[2 * cols + cols - 1] = nan;
    for (int64_t j = 0; j < cols; ++j) x[3 * cols + j] = nan;
    for (int64_t j = 0; j < cols; ++j) x[4 * cols + j] = -inf;
    auto X = placeholder<float>("X", {rows, cols});
    auto k1 = reduce_axis(cols, "k");
    auto k2 = reduce_axis(cols, "k");
    auto mx = compute("mx", {rows}, [&](Var i) { return max(X(i, k1), k1); });
    auto mn = compute("mn", {rows}, [&](Var i) { return min(X(i, k2), k2); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({X}, {mx, mn}));
    std::vector<float> ref_max(rows), ref_min(rows);
    evaluate(*dag, {x.data(), ref_max.data(), ref_min.data()});
    CHECK(ref_max[3] == -inf);
    CHECK(ref_min[3] == inf);
    for (bool rfactor : {false, true}) {
      CAPTURE(rfactor);
      sched::State s(dag);
      if (rfactor) {
        for (const char* op : {"mx", "mn"}) {
          s.split(op, 1, {16});
          const std::string rf = s.rfactor(op, 2, 1);
          s.reorder(rf, {0, 2, 1});
          s.annotate(rf, 2, Annotation::Vectorized);
        }
      }
      Kernel k = build(Task(dag), s);
      std::vector<float> got_max(rows, 7.0f), got_min(rows, 7.0f);
      k(x.data(), got_max.data(), got_min.data());
      for (int64_t i = 0; i < rows; ++i) {
        CAPTURE(i);
        CHECK(got_max[i] == ref_max[i]);
        CHECK(got_min[i] == ref_min[i]);
      }
    }
  }

  TEST_CASE("a division by a row value becomes one reciprocal per row") {
    // Softmax's exp / row_sum: the divide carries LLVM's arcp flag, so LICM hoists 1 / sum out
    // of the vectorized row loop and the loop multiplies (node_kinds.hpp allows the ulp).
    auto X = placeholder<float>("X", {16, 256});
    auto r = reduce_axis(256, "k");
    auto S = compute("S", {16}, [&](Var i) { return sum(X(i, r), r); });
    auto Y = compute("Y", {16, 256}, [&](Var i, Var j) { return X(i, j) / S(i); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({X}, {Y}));
    sched::State s(dag);
    s.compute_at("S", "Y", 0);
    s.split("Y", 1, {16});
    s.annotate("Y", 2, Annotation::Vectorized);
    const std::string assembly = compiled_text(s);
    REQUIRE_FALSE(assembly.empty());
    CHECK(assembly.find("divps") == std::string::npos);
    CHECK(jit_vs_interpreter(s) <= 1.0);
  }

  TEST_CASE("a scalar sum of loaded partial sums may be reassociated, a sum of products not") {
    // The rfactor combine `S[i] = S[i] + S.rf[i, k]` was a chain of dependent scalar adds per
    // row; its fadd carries reassoc + nsz so LLVM may reduce it as a tree. The GEMM update
    // `C[i, j] = C[i, j] + A * B` keeps its exact FMA chain.
    auto X = placeholder<float>("X", {8, 512});
    auto r = reduce_axis(512, "k");
    auto S = compute("S", {8}, [&](Var i) { return sum(X(i, r), r); });
    auto dag = std::make_shared<const ComputeDAG>(ComputeDAG({X}, {S}));
    sched::State s(dag);
    s.split("S", 1, {32});
    const std::string rf = s.rfactor("S", 2, 1);
    s.reorder(rf, {0, 2, 1});
    s.annotate(rf, 2, Annotation::Vectorized);
    const std::string ir = compiled_text(s, true);
    REQUIRE_FALSE(ir.empty());
    // Here LLVM turns the combine into one llvm.vector.reduce.fadd per row, which keeps the flags.
    CHECK(ir.find("reassoc nsz") != std::string::npos);
    CHECK(jit_vs_interpreter(s) <= 1.0);

    gemm g(16, 32, 24);
    const std::string gemm_ir = compiled_text(sched::State(g.dag), true);
    REQUIRE_FALSE(gemm_ir.empty());
    CHECK(gemm_ir.find("reassoc") == std::string::npos);
  }

  TEST_CASE("kernels check their arguments") {
    gemm g(4, 5, 6);
    Kernel k = build(Task(g.dag));
    std::vector<float> a(24), b(30), c(20);
    std::vector<double> d(20);
    CHECK_THROWS_WITH_AS(k(a.data(), b.data()),
                         "[loom.runtime.E601] kernel 'kernel' takes 3 arguments (A: float32[4, 6], "
                         "B: float32[6, 5] -> C: float32[4, 5]) but got 2",
                         user_error);
    CHECK_THROWS_WITH_AS(k(a.data(), b.data(), d.data()),
                         "[loom.runtime.E603] argument 2 ('C') of kernel 'kernel' must hold "
                         "float32, got float64",
                         user_error);
    CHECK_THROWS_WITH_AS(k(BufferView(a.data(), {4, 6}), BufferView(b.data(), {5, 6}), c.data()),
                         "[loom.runtime.E604] argument 1 ('B') of kernel 'kernel' must have shape "
                         "[6, 5], got [5, 6]",
                         user_error);
    CHECK_THROWS_WITH_AS(k(a.data(), static_cast<float*>(nullptr), c.data()),
                         doctest::Contains("[loom.runtime.E602]"), user_error);
    k(BufferView(a.data(), {4, 6}), BufferView(b.data(), {6, 5}), BufferView(c.data(), {4, 5}));
  }

  // The cap works around LLVM 19's SLP miscompile of <8 x i64> trees (test_random_programs.cpp).
  TEST_CASE(
      "kernels with 64-bit buffers get 256-bit vectorizer trees, 32-bit ones the full width") {
    const int full = std::max(cpu_jit::Engine::global().vector_bits(), 128);
    auto preferred = [](int bits) {
      return "\"prefer-vector-width\"=\"" + std::to_string(bits) + "\"";
    };
    auto a = placeholder<float>("A", {64});
    auto twice = compute("twice", {64}, [&](Var i) { return a(i) * 2.0f; });
    auto f32 = std::make_shared<const ComputeDAG>(ComputeDAG({a}, {twice}));
    CHECK(compiled_text(sched::State(f32), true).find(preferred(full)) != std::string::npos);

    auto l = placeholder<int64_t>("L", {64});
    auto sum = compute("sum", {64}, [&](Var i) { return l(i) + l(i); });
    auto i64 = std::make_shared<const ComputeDAG>(ComputeDAG({l}, {sum}));
    CHECK(compiled_text(sched::State(i64), true).find(preferred(std::min(full, 256))) !=
          std::string::npos);

    // A 64-bit intermediate buffer is enough.
    auto wide = compute("wide", {64}, [&](Var i) { return cast<int64_t>(a(i)); });
    auto back = compute("back", {64}, [&](Var i) { return cast<float>(wide(i)); });
    auto mixed = std::make_shared<const ComputeDAG>(ComputeDAG({a}, {back}));
    CHECK(compiled_text(sched::State(mixed), true).find(preferred(std::min(full, 256))) !=
          std::string::npos);
  }

  TEST_CASE("a schedule for another workload is refused") {
    gemm g(4, 5, 6), h(4, 5, 7);
    CHECK_THROWS_WITH_AS(build(Task(h.dag), sched::State(g.dag)),
                         doctest::Contains("[loom.runtime.E611]"), user_error);
  }
}

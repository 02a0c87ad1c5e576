// 16-bit storage floats (float16, bfloat16) through the DSL, the DAG interpreter and the
// loop-nest interpreter: loads are exact, stores and casts round to nearest even, arithmetic on
// them is refused (at compile time in the typed DSL, with loom.dag.E218 for IR built by hand).
// Tolerances: float32 outputs as random_schedule.hpp states (1e-5 + 1e-5 * K relative);
// 16-bit outputs one ulp more (2^-7 relative for bfloat16, 2^-10 for float16), since a float32
// sum taken in another order may round to the neighbouring 16-bit value.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/c_source.hpp>
#include <loom/ops.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/sched/record.hpp>

#include <cstring>
#include <vector>

#include "support/random_schedule.hpp"

using namespace loom;
using loom_test::workload;

namespace {

/// The DAG interpreter on a half matmul against a plain loop summing the same float32 values in
/// the same order: exact.
template <class T>
void check_evaluator_matmul() {
  const int64_t M = 5, N = 7, K = 9;
  const workload w = loom_test::matmul_half<T>(M, N, K);
  std::vector<T> a, b;
  for (float x : loom_test::random_vector<float>(M * K, 1)) a.push_back(T(x));
  for (float x : loom_test::random_vector<float>(K * N, 2)) b.push_back(T(x));
  std::vector<float> c(M * N, -1.0f);
  evaluate(*w.dag, {a.data(), b.data(), c.data()});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<float>(a[i * K + k]) * static_cast<float>(b[k * N + j]);
      REQUIRE(c[i * N + j] == acc);
    }
}

/// Random schedules run by the loop-nest interpreter against the DAG interpreter.
void check_random_schedules(const workload& w, uint32_t seed, int count) {
  const loom_test::reference ref = loom_test::make_reference(w, seed);
  CHECK(loom_test::run_and_compare(w, ref, sched::State(w.dag)).ok);
  std::mt19937 rng(seed);
  loom_test::random_schedule_stats steps;
  int checked = 0;
  for (int i = 0; i < count; ++i) {
    sched::State s = loom_test::random_schedule(w.dag, rng, 3 + loom_test::pick(rng, 12), steps);
    INFO("workload ", w.name, ", schedule ", i, ": ", sched::to_record(s.steps()));
    auto r = loom_test::run_and_compare(w, ref, s);
    if (r.rejected_by_lower) continue;
    ++checked;
    CHECK_MESSAGE(r.ok, r.message);
  }
  CHECK(checked > count / 2);
}

}  // namespace

TEST_SUITE("lower") {
  TEST_CASE("arithmetic on 16-bit floats in hand-built IR is refused with loom.dag.E218") {
    for (ir::DType t : {ir::DType::bf16(), ir::DType::f16()}) {
      CAPTURE(ir::to_string(t));
      ir::Tensor A = ir::make_placeholder("A", t, {4});
      ir::IterVar i{ir::Variable::make("i"), 4, ir::IterKind::Spatial};
      ir::Expr a = ir::TensorRead::make(A, {i.var});
      auto refused = [&](ir::Expr body) {
        ir::Tensor C = ir::make_compute("C", {i}, std::move(body));
        CHECK_THROWS_WITH_AS(ComputeDAG({A}, {C}), doctest::Contains("[loom.dag.E218] compute 'C'"),
                             user_error);
      };
      refused(ir::Add::make(a, a));
      refused(ir::Cast::make(ir::DType::f32(), ir::LT::make(a, a)));
      refused(ir::Call::make(ir::CallOp::exp, {a}));
      refused(ir::Select::make(ir::LT::make(ir::Cast::make(ir::DType::f32(), a),
                                            ir::FloatImm::make(ir::DType::f32(), 0.0)),
                               a, a));
      ir::IterVar k{ir::Variable::make("k"), 4, ir::IterKind::Reduce};
      ir::Tensor B = ir::make_placeholder("B", t, {4, 4});
      ir::Tensor S = ir::make_compute(
          "S", {i},
          ir::Reduce::make(ir::ReduceOp::Sum, ir::TensorRead::make(B, {i.var, k.var}), {k}));
      CHECK_THROWS_WITH_AS(ComputeDAG({B}, {S}), doctest::Contains("[loom.dag.E218]"), user_error);
      // Loads, stores and casts are what the types are for.
      ir::Tensor ok =
          ir::make_compute("C", {i},
                           ir::Cast::make(t, ir::Cast::make(ir::DType::f32(), a) *
                                                 ir::FloatImm::make(ir::DType::f32(), 2.0)));
      CHECK_NOTHROW(ComputeDAG({A}, {ok}));
    }
  }

  TEST_CASE("the DSL stores 16-bit floats with cast<T>(), of expressions and of literals") {
    auto A = placeholder<bfloat16>("A", {4});
    auto B = compute("B", {4}, [&](Var i) { return cast<float16>(cast<float>(A(i)) + 1.0f); });
    auto C = compute("C", {4}, [&](Var) { return cast<bfloat16>(1.00390625f); });  // 1 + 2^-8
    auto D = compute("D", {4}, [&](Var i) { return cast<float>(B(i)) + cast<float>(C(i)); });
    ComputeDAG dag({A}, {B, C, D});
    CHECK(ir::Tensor(B).dtype() == ir::DType::f16());
    CHECK(ir::Tensor(C).dtype() == ir::DType::bf16());
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even, 1.
    const auto* imm = ir::Tensor(C)->body.as<ir::FloatImm>();
    REQUIRE(imm != nullptr);
    CHECK(imm->value == 1.0);
    std::vector<bfloat16> a = {bfloat16(0.5f), bfloat16(1024.0f), bfloat16(-3.0f),
                               bfloat16::from_bits(0x3f81)};
    std::vector<float16> b(4);
    std::vector<bfloat16> c(4);
    std::vector<float> d(4);
    evaluate(dag, {a.data(), b.data(), c.data(), d.data()});
    CHECK(static_cast<float>(b[0]) == 1.5f);
    CHECK(static_cast<float>(b[1]) == 1025.0f);
    CHECK(static_cast<float>(b[2]) == -2.0f);
    // 1.0078125 + 1 = 2.0078125 rounds to float16 2.0078125 (11 bits: exact).
    CHECK(static_cast<float>(b[3]) == 2.0078125f);
    for (auto x : c) CHECK(x.bits == 0x3f80);
    CHECK(d[1] == 1026.0f);
  }

  TEST_CASE("the DAG interpreter sums 16-bit matmul operands in float32") {
    check_evaluator_matmul<bfloat16>();
    check_evaluator_matmul<float16>();
  }

  TEST_CASE("stores to 16-bit tensors round to nearest even in both interpreters") {
    // Values chosen to tie: 1 + 2^-8 (bfloat16 tie to 1) and 1 + 3 * 2^-11 (float16 tie to
    // 1 + 2^-9), and float16 overflow.
    auto A = placeholder<float>("A", {4});
    auto B = compute("B", {4}, [&](Var i) { return cast<bfloat16>(A(i)); });
    auto C = compute("C", {4}, [&](Var i) { return cast<float16>(A(i)); });
    const workload w = loom_test::make_workload("round", {A}, {B, C}, 1);
    std::vector<float> a = {1.00390625f, 1.0f + 3.0f / 2048, 70000.0f, -0.0f};
    std::vector<bfloat16> b(4), b2(4);
    std::vector<float16> c(4), c2(4);
    evaluate(*w.dag, {a.data(), b.data(), c.data()});
    std::vector<void*> ptrs = {a.data(), b2.data(), c2.data()};
    lower::interpret(lower::lower(sched::State(w.dag)), ptrs);
    for (int i = 0; i < 4; ++i) {
      CHECK(b[i].bits == bfloat16(a[i]).bits);
      CHECK(c[i].bits == float16(a[i]).bits);
      CHECK(b2[i].bits == b[i].bits);
      CHECK(c2[i].bits == c[i].bits);
    }
    CHECK(b[0].bits == 0x3f80);
    CHECK(c[1].bits == 0x3c02);
    CHECK(c[2].bits == 0x7c00);
    CHECK(c[3].bits == 0x8000);
  }

  TEST_CASE("random schedules of 16-bit matmuls: the loop-nest interpreter agrees with the DAG's") {
    check_random_schedules(loom_test::matmul_half<bfloat16>(13, 11, 17), 361, 40);
    check_random_schedules(loom_test::matmul_half<float16>(9, 16, 12), 362, 30);
    check_random_schedules(loom_test::matmul_half<bfloat16>(8, 12, 10, true), 363, 30);
    check_random_schedules(loom_test::matmul_half<float16>(7, 9, 11, true), 364, 30);
  }

  TEST_CASE("ops::matmul, batch_matmul and dense of 16-bit operands sum in float32") {
    const int64_t M = 3, N = 5, K = 7;
    auto a = placeholder<bfloat16>("A", {2, M, K});
    auto b = placeholder<bfloat16>("B", {2, K, N});
    auto w = placeholder<float16>("W", {N, K});
    auto x = placeholder<float16>("X", {M, K});
    Tensor<float, 3> c = ops::batch_matmul(a, b);
    Tensor<float, 2> d = ops::dense(x, w);
    auto a2 = placeholder<bfloat16>("A2", {M, K});
    auto b2 = placeholder<bfloat16>("B2", {K, N});
    Tensor<float, 2> e = ops::matmul(a2, b2, false, false);
    ComputeDAG dag({a, b, w, x, a2, b2}, {c, d, e});
    auto fill = [](auto& v, size_t n, uint32_t seed) {
      using T = typename std::remove_reference_t<decltype(v)>::value_type;
      for (float f : loom_test::random_vector<float>(n, seed)) v.push_back(T(f));
    };
    std::vector<bfloat16> av, bv, a2v, b2v;
    std::vector<float16> wv, xv;
    fill(av, 2 * M * K, 1);
    fill(bv, 2 * K * N, 2);
    fill(wv, N * K, 3);
    fill(xv, M * K, 4);
    fill(a2v, M * K, 5);
    fill(b2v, K * N, 6);
    std::vector<float> cv(2 * M * N), dv(M * N), ev(M * N);
    evaluate(dag, {av.data(), bv.data(), wv.data(), xv.data(), a2v.data(), b2v.data(), cv.data(),
                   dv.data(), ev.data()});
    auto f = [](auto h) { return static_cast<float>(h); };
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float sc[2] = {0, 0}, sd = 0, se = 0;
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t n = 0; n < 2; ++n)
            sc[n] += f(av[(n * M + i) * K + k]) * f(bv[(n * K + k) * N + j]);
          sd += f(xv[i * K + k]) * f(wv[j * K + k]);
          se += f(a2v[i * K + k]) * f(b2v[k * N + j]);
        }
        CHECK(cv[i * N + j] == sc[0]);
        CHECK(cv[(M + i) * N + j] == sc[1]);
        CHECK(dv[i * N + j] == sd);
        CHECK(ev[i * N + j] == se);
      }
  }

  TEST_CASE("the C printer holds 16-bit floats as uint16_t and converts them with helpers") {
    const workload w = loom_test::matmul_half<bfloat16>(4, 4, 4, true);
    const std::string c = lower::to_c_source(lower::lower(sched::State(w.dag)));
    CHECK(c.find("uint16_t* restrict A") != std::string::npos);
    CHECK(c.find("loom_bf16_to_f32(A[") != std::string::npos);
    CHECK(c.find("loom_f32_to_bf16((float)") != std::string::npos);
    CHECK(c.find("static inline uint16_t loom_f32_to_bf16") != std::string::npos);
    // Sources without 16-bit floats are unchanged.
    const std::string f =
        lower::to_c_source(lower::lower(sched::State(loom_test::matmul(4, 4, 4).dag)));
    CHECK(f.find("loom_bf16") == std::string::npos);
  }
}

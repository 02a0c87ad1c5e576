// Interop: kernels called with Eigen matrices, maps and tensors, and with aligned_vector storage.
#include <doctest/doctest.h>
#include <loom/cpu.hpp>
#include <loom/eigen.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

using namespace loom;

TEST_SUITE("jit") {
  TEST_CASE("a kernel takes row-major Eigen matrices, maps and tensors and checks their shapes") {
    const int64_t M = 7, N = 9, K = 5;
    auto A = placeholder<float>("A", {M, K});
    auto B = placeholder<float>("B", {K, N});
    auto bias = placeholder<float>("bias", {N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    auto D = compute("D", {M, N}, [&](Var i, Var j) { return C(i, j) + bias(j); });
    Task task(ComputeDAG({A, B, bias}, {D}));
    Kernel kern = build(task);
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    RowMajor a = RowMajor::Random(M, K), b = RowMajor::Random(K, N), d(M, N);
    Eigen::VectorXf bb = Eigen::VectorXf::Random(N);
    kern(a, b, bb, d);
    RowMajor ref = a * b;
    ref.rowwise() += bb.transpose();
    CHECK((d - ref).cwiseAbs().maxCoeff() < 1e-5f);

    std::vector<float> raw(M * N);
    Eigen::Map<RowMajor> dm(raw.data(), M, N);
    kern(a, b, bb, dm);
    CHECK((dm - ref).cwiseAbs().maxCoeff() < 1e-5f);

    Eigen::Tensor<float, 2, Eigen::RowMajor> dt(M, N);
    kern(a, b, bb, dt);
    CHECK(std::abs(dt(3, 4) - ref(3, 4)) < 1e-5f);

    Eigen::MatrixXf col(M, K);  // column-major
    CHECK_THROWS_WITH_AS(kern(col, b, bb, d), doctest::Contains("[loom.eigen.E701]"), user_error);
    RowMajor wrong(K, M);
    CHECK_THROWS_WITH_AS(kern(wrong, b, bb, d),
                         "[loom.runtime.E604] argument 0 ('A') of kernel 'kernel' must have shape "
                         "[7, 5], got [5, 7]",
                         user_error);
  }

  TEST_CASE("aligned_vector starts on a cache line and a kernel takes it like any pointer") {
    const int64_t n = 70000;  // 280 KB: glibc's malloc mmaps it and returns line + 16 bytes
    aligned_vector<float> a(n), b(n), c(n);
    for (const float* p : {a.data(), b.data(), c.data()})
      CHECK(reinterpret_cast<std::uintptr_t>(p) % kernel_buffer_alignment == 0);
    aligned_vector<double> small(3);
    CHECK(reinterpret_cast<std::uintptr_t>(small.data()) % kernel_buffer_alignment == 0);

    auto A = placeholder<float>("A", {n});
    auto B = placeholder<float>("B", {n});
    auto C = compute("C", {n}, [&](Var i) { return A(i) * B(i) + 1.0f; });
    Kernel kern = build(Task(ComputeDAG({A, B}, {C})));
    for (int64_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i % 17);
      b[i] = 0.5f;
    }
    kern(a.data(), b.data(), c.data());
    float worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(c[i] - (a[i] * 0.5f + 1.0f)));
    CHECK(worst == 0.0f);
  }

  TEST_CASE("a kernel takes std::vector and std::span and checks their sizes") {
    const int64_t M = 6, N = 5, K = 4;
    auto A = placeholder<float>("A", {M, K});
    auto B = placeholder<float>("B", {K, N});
    auto k = reduce_axis(K, "k");
    auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    Kernel kern = build(Task(ComputeDAG({A, B}, {C})));
    std::vector<float> a(M * K, 1.0f), b(K * N, 2.0f), c(M * N);
    kern(a, b, c);
    CHECK(std::all_of(c.begin(), c.end(), [](float x) { return x == 8.0f; }));
    std::fill(c.begin(), c.end(), 0.0f);
    kern(std::span<const float>(a), std::span<const float>(b), std::span<float>(c));
    CHECK(c[M * N - 1] == 8.0f);
    aligned_vector<float> c2(M * N);
    kern(a, b, c2);
    CHECK(c2[0] == 8.0f);
    std::vector<float> short_c(M * N - 1);
    CHECK_THROWS_WITH_AS(kern(a, b, short_c),
                         "[loom.runtime.E605] argument 2 ('C') of kernel 'kernel' holds 29 "
                         "elements; float32[6, 5] needs 30",
                         user_error);
    std::vector<double> wrong_type(M * K);
    CHECK_THROWS_WITH_AS(kern(wrong_type, b, c), doctest::Contains("[loom.runtime.E603]"),
                         user_error);
  }

  TEST_CASE("an output that overlaps another argument is refused, not computed wrong") {
    // k(a, b, a) once returned zeros where 64 was due: the code assumes no overlap.
    const int64_t n = 64;
    auto A = placeholder<float>("A", {n, n});
    auto B = placeholder<float>("B", {n, n});
    auto k = reduce_axis(n, "k");
    auto C = compute("C", {n, n}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    Kernel kern = build(Task(ComputeDAG({A, B}, {C})));
    std::vector<float> storage(3 * n * n, 1.0f);
    float* a = storage.data();
    float* b = a + n * n;
    float* c = b + n * n;
    kern(a, b, c);  // side by side in one allocation: fine
    CHECK(c[0] == 64.0f);
    CHECK_THROWS_WITH_AS(kern(a, b, a),
                         doctest::Contains("[loom.runtime.E606] argument 2 ('C', an output) of "
                                           "kernel 'kernel' overlaps argument 0 ('A')"),
                         user_error);
    CHECK_THROWS_WITH_AS(kern(a, b, b + 1), doctest::Contains("overlaps argument 1 ('B')"),
                         user_error);
    CHECK_THROWS_WITH_AS(kern(a + 1, b, c - 1), doctest::Contains("[loom.runtime.E606]"),
                         user_error);
    // Inputs may share storage: nothing writes them.
    std::fill(c, c + n * n, 0.0f);
    kern(a, a, c);
    CHECK(c[n * n - 1] == 64.0f);
  }
}

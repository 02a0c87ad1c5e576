// matmul, batch_matmul and dense against plain loops and Eigen.
//
// Tolerance: ref::float_tolerance(K) (atol 1e-5 + 5e-7 K, rtol 1e-4) for float32; the
// references accumulate in double, so the whole error is the interpreter's float32 rounding.
// float64 results use 1e-12.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include <Eigen/Dense>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;

using loom_test::scaled_error;

template <class T>
ref::tolerance tolerance_for(int64_t k) {
  if constexpr (std::is_same_v<T, double>) return {1e-12, 1e-12};
  return ref::float_tolerance(k);
}

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
Matrix as_matrix(const std::vector<T>& v, int64_t rows, int64_t cols, int64_t offset = 0) {
  Matrix m(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<double>(v[offset + i * cols + j]);
  return m;
}

template <class T>
void append(std::vector<T>& out, const Matrix& m) {
  for (int64_t i = 0; i < m.rows(); ++i)
    for (int64_t j = 0; j < m.cols(); ++j) out.push_back(static_cast<T>(m(i, j)));
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE_TEMPLATE("matmul matches the plain loop and Eigen for every transpose combination", T,
                     float, double) {
    const int64_t m = 7, n = 5, k = 9;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        auto a = placeholder<T>("A", ta ? std::array{k, m} : std::array{m, k});
        auto b = placeholder<T>("B", tb ? std::array{n, k} : std::array{k, n});
        auto c = ops::matmul(a, b, ta, tb);
        REQUIRE(c.shape() == std::array<int64_t, 2>{m, n});
        CHECK(c.ir()->tag == "matmul");
        ComputeDAG dag({a, b}, {c});
        auto av = loom_test::random_vector<T>(m * k, 1);
        auto bv = loom_test::random_vector<T>(k * n, 2);
        auto got = run<T>(dag, {&av, &bv});
        CHECK(scaled_error(got, ref::matmul(av, bv, m, n, k, ta, tb), tolerance_for<T>(k)) <= 1);
        Matrix ea = ta ? Matrix(as_matrix(av, k, m).transpose()) : as_matrix(av, m, k);
        Matrix eb = tb ? Matrix(as_matrix(bv, n, k).transpose()) : as_matrix(bv, k, n);
        std::vector<T> eigen;
        append(eigen, ea * eb);
        CHECK(scaled_error(got, eigen, tolerance_for<T>(k)) <= 1);
      }
  }

  TEST_CASE("matmul of a 64x48x32 product stays within the float32 tolerance") {
    const int64_t m = 64, n = 48, k = 32;
    auto a = placeholder<float>("A", {m, k});
    auto b = placeholder<float>("B", {k, n});
    ComputeDAG dag({a, b}, {ops::matmul(a, b)});
    auto av = loom_test::random_vector<float>(m * k, 3);
    auto bv = loom_test::random_vector<float>(k * n, 4);
    auto got = run<float>(dag, {&av, &bv});
    std::vector<float> eigen;
    append(eigen, as_matrix(av, m, k) * as_matrix(bv, k, n));
    CHECK(scaled_error(got, eigen, ref::float_tolerance(k)) <= 1);
  }

  TEST_CASE("batch_matmul multiplies every batch, with and without transposes") {
    const int64_t batch = 3, m = 5, n = 4, k = 7;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        auto a = placeholder<float>("A", ta ? std::array{batch, k, m} : std::array{batch, m, k});
        auto b = placeholder<float>("B", tb ? std::array{batch, n, k} : std::array{batch, k, n});
        auto c = ops::batch_matmul(a, b, ta, tb);
        REQUIRE(c.shape() == std::array<int64_t, 3>{batch, m, n});
        CHECK(c.ir()->tag == "batch_matmul");
        ComputeDAG dag({a, b}, {c});
        auto av = loom_test::random_vector<float>(batch * m * k, 5);
        auto bv = loom_test::random_vector<float>(batch * k * n, 6);
        auto got = run<float>(dag, {&av, &bv});
        CHECK(scaled_error(got, ref::batch_matmul(av, bv, batch, m, n, k, ta, tb),
                           ref::float_tolerance(k)) <= 1);
        std::vector<float> eigen;
        for (int64_t s = 0; s < batch; ++s) {
          Matrix ea = ta ? Matrix(as_matrix(av, k, m, s * m * k).transpose())
                         : as_matrix(av, m, k, s * m * k);
          Matrix eb = tb ? Matrix(as_matrix(bv, n, k, s * k * n).transpose())
                         : as_matrix(bv, k, n, s * k * n);
          append(eigen, ea * eb);
        }
        CHECK(scaled_error(got, eigen, ref::float_tolerance(k)) <= 1);
      }
  }

  TEST_CASE("batch_matmul treats every leading dimension of rank-4 operands as a batch") {
    const int64_t b0 = 2, b1 = 3, m = 3, n = 5, k = 4;
    auto a = placeholder<float>("A", {b0, b1, m, k});
    auto b = placeholder<float>("B", {b0, b1, n, k});
    auto c = ops::batch_matmul(a, b, false, true);
    REQUIRE(c.shape() == std::array<int64_t, 4>{b0, b1, m, n});
    ComputeDAG dag({a, b}, {c});
    auto av = loom_test::random_vector<float>(b0 * b1 * m * k, 7);
    auto bv = loom_test::random_vector<float>(b0 * b1 * n * k, 8);
    CHECK(scaled_error(run<float>(dag, {&av, &bv}),
                       ref::batch_matmul(av, bv, b0 * b1, m, n, k, false, true),
                       ref::float_tolerance(k)) <= 1);
  }

  TEST_CASE("dense multiplies by the transposed weight and adds the optional bias") {
    const int64_t m = 6, n = 5, k = 11;
    auto x = placeholder<float>("X", {m, k});
    auto w = placeholder<float>("W", {n, k});
    auto bias = placeholder<float>("bias", {n});
    auto xv = loom_test::random_vector<float>(m * k, 9);
    auto wv = loom_test::random_vector<float>(n * k, 10);
    auto bv = loom_test::random_vector<float>(n, 11);
    Matrix product = as_matrix(xv, m, k) * as_matrix(wv, n, k).transpose();

    SUBCASE("without bias") {
      auto y = ops::dense(x, w);
      CHECK(y.ir()->tag == "dense");
      ComputeDAG dag({x, w}, {y});
      auto got = run<float>(dag, {&xv, &wv});
      CHECK(scaled_error(got, ref::dense(xv, wv, {}, m, n, k), ref::float_tolerance(k)) <= 1);
      std::vector<float> eigen;
      append(eigen, product);
      CHECK(scaled_error(got, eigen, ref::float_tolerance(k)) <= 1);
    }
    SUBCASE("with bias") {
      auto y = ops::dense(x, w, bias);
      CHECK(y.ir()->tag == "bias_add");
      CHECK(y.name() == "dense_bias");
      ComputeDAG dag({x, w, bias}, {y});
      CHECK(dag.num_ops() == 5);  // X, W, bias, the product and the bias addition
      auto got = run<float>(dag, {&xv, &wv, &bv});
      CHECK(scaled_error(got, ref::dense(xv, wv, bv, m, n, k), ref::float_tolerance(k)) <= 1);
      Matrix with_bias = product.rowwise() + as_matrix(bv, 1, n).row(0);
      std::vector<float> eigen;
      append(eigen, with_bias);
      CHECK(scaled_error(got, eigen, ref::float_tolerance(k)) <= 1);
    }
  }
}

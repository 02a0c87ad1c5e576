// Small operator-library workloads at odd shapes, shared by the search-space tests (CPU and
// GPU sampling): every op the search must handle, small enough for the interpreters.
#ifndef LOOM_TESTS_SUPPORT_OP_WORKLOADS_HPP
#define LOOM_TESTS_SUPPORT_OP_WORKLOADS_HPP

#include <loom/ops.hpp>

#include <string>
#include <vector>

#include "support/random_schedule.hpp"

namespace loom_test::op_workloads {

using namespace loom;

inline workload make(std::string name, std::vector<ir::Tensor> inputs,
                     std::vector<ir::Tensor> outputs, int64_t reduction_length) {
  return make_workload(std::move(name), std::move(inputs), std::move(outputs), reduction_length);
}

// --- operator-library workloads at small, odd shapes
// ----------------------------------------------

inline workload op_matmul() {
  auto a = placeholder<float>("A", {13, 19});
  auto b = placeholder<float>("B", {19, 17});
  return make("matmul 13x17x19", {a, b}, {ops::matmul(a, b)}, 19);
}

inline workload op_matmul_relu() {
  auto a = placeholder<float>("A", {9, 7});
  auto b = placeholder<float>("B", {7, 12});
  return make("matmul+relu 9x12x7", {a, b}, {ops::relu(ops::matmul(a, b))}, 7);
}

inline workload op_conv2d() {
  auto x = placeholder<float>("X", {1, 3, 7, 7});
  auto w = placeholder<float>("W", {4, 3, 3, 3});
  auto bias = placeholder<float>("bias", {4});
  auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1));
  return make("conv2d+bias+relu 3->4 7x7 pad 1", {x, w, bias}, {y}, 27);
}

inline workload op_depthwise() {
  auto x = placeholder<float>("X", {1, 3, 7, 5});
  auto w = placeholder<float>("W", {3, 1, 3, 3});
  return make("depthwise 3x7x5 pad 1", {x, w},
              {ops::depthwise_conv2d_nchw(x, w, {.padding = {1, 1}})}, 9);
}

inline workload op_softmax() {
  auto x = placeholder<float>("X", {5, 11});
  return make("softmax 5x11", {x}, {ops::softmax(x)}, 11);
}

inline workload op_batch_matmul() {
  auto a = placeholder<float>("A", {3, 5, 7});
  auto b = placeholder<float>("B", {3, 7, 6});
  return make("batch_matmul 3x5x6x7", {a, b}, {ops::batch_matmul(a, b)}, 7);
}

inline workload op_layer_norm() {
  auto x = placeholder<float>("X", {5, 13});
  auto g = placeholder<float>("gamma", {13});
  auto b = placeholder<float>("beta", {13});
  return make("layer_norm 5x13", {x, g, b}, {ops::layer_norm(x, g, b)}, 13);
}

// Rows of 37 >= 2 x 8 lanes: the memory-bound-reduction sketch gets its vector partial sums.
inline workload op_softmax_long() {
  auto x = placeholder<float>("X", {3, 37});
  return make("softmax 3x37", {x}, {ops::softmax(x)}, 37);
}

// Rows of a multiple of 16: annotation may cut their loops into vectors
// (SearchOptions::long_loop_vectorize_probability).
inline workload op_softmax_wide() {
  auto x = placeholder<float>("X", {3, 64});
  return make("softmax 3x64", {x}, {ops::softmax(x)}, 64);
}

// A matrix-vector product: little spatial parallelism, so the rfactor sketches apply.
inline workload op_matvec() {
  auto a = placeholder<float>("A", {2, 70});
  auto b = placeholder<float>("B", {70, 1});
  return make("matvec 2x1x70", {a, b}, {ops::matmul(a, b)}, 70);
}

}  // namespace loom_test::op_workloads

#endif  // LOOM_TESTS_SUPPORT_OP_WORKLOADS_HPP

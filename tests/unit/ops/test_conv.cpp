// Convolutions against plain-loop references that test every tap's bounds instead of padding.
//
// Tolerance: ref::float_tolerance(taps), taps = (C / groups) * kernel volume, the length of
// each output's sum (atol 1e-5 + 5e-7 taps, rtol 1e-4). Shapes are small and odd (7, 9, 11)
// so that windows hit the edges unevenly; every test stays far below 1e5 multiply-adds.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

#include "support/random.hpp"
#include "support/ops_check.hpp"
#include "support/reference_ops.hpp"

#include <array>
#include <string>
#include <vector>

namespace {

using namespace loom;
namespace ref = loom_test::ref;

using loom_test::run;
using loom_test::scaled_error;

struct conv2d_case {
  const char* name;
  ops::ConvParams<2> params;
};

// Unit stride, stride 2 with padding, dilation, groups and everything at once (with unequal
// parameters for H and W, so that swapped dimensions show up).
const conv2d_case conv2d_cases[] = {
    {"plain", {}},
    {"stride 2, padding 1", {.stride = {2, 2}, .padding = {1, 1}}},
    {"dilation 2, padding 2", {.padding = {2, 2}, .dilation = {2, 2}}},
    {"groups 2", {.groups = 2}},
    {"depthwise-like groups 4", {.padding = {1, 1}, .groups = 4}},
    {"mixed", {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 2}},
};

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("conv2d_nchw matches the plain loop for strides, padding, dilation and groups") {
    const int64_t n = 2, c = 4, h = 9, w = 7, o = 8, kh = 3, kw = 2;
    auto xv = loom_test::random_vector<float>(n * c * h * w, 21);
    for (const auto& tc : conv2d_cases) {
      INFO(std::string(tc.name));
      const int64_t g = tc.params.groups;
      auto x = placeholder<float>("X", {n, c, h, w});
      auto wt = placeholder<float>("W", {o, c / g, kh, kw});
      auto y = ops::conv2d_nchw(x, wt, tc.params);
      CHECK(y.ir()->tag == "conv2d_nchw");
      const auto& p = tc.params;
      const int64_t oh = ref::window_out(h, kh, p.stride[0], p.padding[0], p.dilation[0]);
      const int64_t ow = ref::window_out(w, kw, p.stride[1], p.padding[1], p.dilation[1]);
      REQUIRE(y.shape() == std::array<int64_t, 4>{n, o, oh, ow});
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(o * (c / g) * kh * kw, 22);
      auto want =
          ref::conv2d_nchw(xv, wv, n, c, {h, w}, o, {kh, kw}, p.stride, p.padding, p.dilation, g);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want,
                         ref::float_tolerance(c / g * kh * kw)) <= 1);
    }
  }

  TEST_CASE("conv2d_nchw on a ResNet-sized 3x3 layer stays within the float32 tolerance") {
    // 16 -> 16 channels on 14x14 with padding 1: 451584 multiply-adds, 144 per output.
    const int64_t c = 16, h = 14, o = 16, k = 3;
    auto x = placeholder<float>("X", {1, c, h, h});
    auto wt = placeholder<float>("W", {o, c, k, k});
    ComputeDAG dag({x, wt}, {ops::conv2d_nchw(x, wt, {.padding = {1, 1}})});
    auto xv = loom_test::random_vector<float>(c * h * h, 37);
    auto wv = loom_test::random_vector<float>(o * c * k * k, 38);
    auto want = ref::conv2d_nchw(xv, wv, 1, c, {h, h}, o, {k, k}, {1, 1}, {1, 1}, {1, 1}, 1);
    CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want, ref::float_tolerance(c * k * k)) <= 1);
  }

  TEST_CASE("conv2d_nhwc matches the plain loop for strides, padding, dilation and groups") {
    const int64_t n = 2, c = 4, h = 7, w = 9, o = 8, kh = 2, kw = 3;
    auto xv = loom_test::random_vector<float>(n * h * w * c, 23);
    for (const auto& tc : conv2d_cases) {
      INFO(std::string(tc.name));
      const int64_t g = tc.params.groups;
      auto x = placeholder<float>("X", {n, h, w, c});
      auto wt = placeholder<float>("W", {kh, kw, c / g, o});
      auto y = ops::conv2d_nhwc(x, wt, tc.params);
      CHECK(y.ir()->tag == "conv2d_nhwc");
      const auto& p = tc.params;
      const int64_t oh = ref::window_out(h, kh, p.stride[0], p.padding[0], p.dilation[0]);
      const int64_t ow = ref::window_out(w, kw, p.stride[1], p.padding[1], p.dilation[1]);
      REQUIRE(y.shape() == std::array<int64_t, 4>{n, oh, ow, o});
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(kh * kw * (c / g) * o, 24);
      auto want =
          ref::conv2d_nhwc(xv, wv, n, {h, w}, c, {kh, kw}, o, p.stride, p.padding, p.dilation, g);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want,
                         ref::float_tolerance(c / g * kh * kw)) <= 1);
    }
  }

  TEST_CASE("conv2d_nhwc computes the same convolution as conv2d_nchw on transposed data") {
    const int64_t n = 1, c = 3, h = 6, w = 5, o = 4, k = 3;
    auto x = placeholder<float>("X", {n, c, h, w});
    auto wt = placeholder<float>("W", {o, c, k, k});
    const ops::ConvParams<2> p{.stride = {2, 2}, .padding = {1, 1}};
    // Both layouts built from the same NCHW/OIHW placeholders through transposes.
    auto nchw = ops::conv2d_nchw(x, wt, p);
    auto x_nhwc = ops::transpose(x, {0, 2, 3, 1});
    auto w_hwio = ops::transpose(wt, {2, 3, 1, 0});
    auto nhwc = ops::conv2d_nhwc(x_nhwc, w_hwio, p);
    auto back = ops::transpose(nhwc, {0, 3, 1, 2});
    auto xv = loom_test::random_vector<float>(n * c * h * w, 25);
    auto wv = loom_test::random_vector<float>(o * c * k * k, 26);
    auto a = run<float>(ComputeDAG({x, wt}, {nchw}), {&xv, &wv});
    auto b = run<float>(ComputeDAG({x, wt}, {back}), {&xv, &wv});
    CHECK(scaled_error(a, b, ref::float_tolerance(c * k * k)) <= 1);
  }

  TEST_CASE("conv1d_ncw matches the plain loop for strides, padding, dilation and groups") {
    const int64_t n = 2, c = 4, w = 11, o = 6, k = 3;
    const ops::ConvParams<1> cases[] = {
        {},
        {.stride = {2}, .padding = {1}},
        {.padding = {2}, .dilation = {2}},
        {.groups = 2},
        {.stride = {3}, .padding = {1}, .dilation = {2}, .groups = 2}};
    auto xv = loom_test::random_vector<float>(n * c * w, 27);
    for (const auto& p : cases) {
      CAPTURE(p.stride[0]);
      CAPTURE(p.groups);
      auto x = placeholder<float>("X", {n, c, w});
      auto wt = placeholder<float>("W", {o, c / p.groups, k});
      auto y = ops::conv1d_ncw(x, wt, p);
      CHECK(y.ir()->tag == "conv1d_ncw");
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(o * (c / p.groups) * k, 28);
      auto want = ref::conv1d_ncw(xv, wv, n, c, w, o, k, p.stride[0], p.padding[0], p.dilation[0],
                                  p.groups);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want,
                         ref::float_tolerance(c / p.groups * k)) <= 1);
    }
  }

  TEST_CASE("conv3d_ncdhw matches the plain loop for strides, padding, dilation and groups") {
    const int64_t n = 1, c = 4, d = 5, h = 6, w = 5, o = 4;
    const ref::dims3 kernel{2, 3, 3};
    const ops::ConvParams<3> cases[] = {{},
                                        {.stride = {2, 2, 1}, .padding = {1, 1, 1}},
                                        {.padding = {1, 2, 0}, .dilation = {2, 2, 1}},
                                        {.stride = {1, 2, 2}, .padding = {0, 1, 1}, .groups = 2}};
    auto xv = loom_test::random_vector<float>(n * c * d * h * w, 29);
    for (const auto& p : cases) {
      CAPTURE(p.stride[0]);
      CAPTURE(p.groups);
      auto x = placeholder<float>("X", {n, c, d, h, w});
      auto wt = placeholder<float>("W", {o, c / p.groups, kernel[0], kernel[1], kernel[2]});
      auto y = ops::conv3d_ncdhw(x, wt, p);
      CHECK(y.ir()->tag == "conv3d_ncdhw");
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(o * (c / p.groups) * 18, 30);
      auto want = ref::conv3d_ncdhw(xv, wv, n, c, {d, h, w}, o, kernel, p.stride, p.padding,
                                    p.dilation, p.groups);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want,
                         ref::float_tolerance(c / p.groups * 18)) <= 1);
    }
  }

  TEST_CASE("depthwise_conv2d_nchw filters every channel with its own multiplier filters") {
    const int64_t n = 2, c = 3, h = 9, w = 8, k = 3;
    struct depthwise_case {
      int64_t multiplier;
      ops::ConvParams<2> params;
    };
    const depthwise_case cases[] = {{1, {}},
                                    {1, {.stride = {2, 2}, .padding = {1, 1}}},
                                    {2, {.padding = {1, 1}}},
                                    {3, {.stride = {2, 1}, .padding = {2, 1}, .dilation = {2, 1}}}};
    auto xv = loom_test::random_vector<float>(n * c * h * w, 31);
    for (const auto& tc : cases) {
      CAPTURE(tc.multiplier);
      CAPTURE(tc.params.stride[0]);
      const auto& p = tc.params;
      auto x = placeholder<float>("X", {n, c, h, w});
      auto wt = placeholder<float>("W", {c, tc.multiplier, k, k});
      auto y = ops::depthwise_conv2d_nchw(x, wt, p);
      CHECK(y.ir()->tag == "depthwise_conv2d_nchw");
      CHECK(y.shape(1) == c * tc.multiplier);
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(c * tc.multiplier * k * k, 32);
      auto want = ref::depthwise_conv2d_nchw(xv, wv, n, c, {h, w}, tc.multiplier, {k, k}, p.stride,
                                             p.padding, p.dilation);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want, ref::float_tolerance(k * k)) <= 1);
    }
  }

  TEST_CASE("depthwise_conv2d_nchw equals conv2d_nchw with one group per channel") {
    const int64_t n = 1, c = 4, h = 7, w = 7, k = 3;
    auto x = placeholder<float>("X", {n, c, h, w});
    auto wt = placeholder<float>("W", {c, 1, k, k});
    auto a = ops::depthwise_conv2d_nchw(x, wt, {.stride = {2, 2}, .padding = {1, 1}});
    auto b = ops::conv2d_nchw(x, wt, {.stride = {2, 2}, .padding = {1, 1}, .groups = c});
    auto xv = loom_test::random_vector<float>(n * c * h * w, 33);
    auto wv = loom_test::random_vector<float>(c * k * k, 34);
    CHECK(run<float>(ComputeDAG({x, wt}, {a}), {&xv, &wv}) ==
          run<float>(ComputeDAG({x, wt}, {b}), {&xv, &wv}));
  }

  TEST_CASE("conv2d_transpose_nchw matches the scatter definition") {
    const int64_t n = 2, c = 3, h = 5, w = 4, o = 4;
    struct transpose_case {
      ref::dims2 kernel;
      ops::ConvTransposeParams<2> params;
    };
    const transpose_case cases[] = {
        {{3, 3}, {}},
        {{3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}},
        {{2, 3}, {.stride = {2, 3}, .padding = {0, 2}, .output_padding = {1, 0}}},
        {{3, 2}, {.padding = {2, 1}}},  // padding beyond the kernel overhang crops
        {{4, 4}, {.stride = {3, 2}, .padding = {3, 0}, .output_padding = {2, 1}}}};
    auto xv = loom_test::random_vector<float>(n * c * h * w, 35);
    for (const auto& tc : cases) {
      const auto& p = tc.params;
      CAPTURE(p.stride[0]);
      CAPTURE(p.padding[0]);
      auto x = placeholder<float>("X", {n, c, h, w});
      auto wt = placeholder<float>("W", {c, o, tc.kernel[0], tc.kernel[1]});
      auto y = ops::conv2d_transpose_nchw(x, wt, p);
      CHECK(y.ir()->tag == "conv2d_transpose_nchw");
      const int64_t oh =
          (h - 1) * p.stride[0] - 2 * p.padding[0] + tc.kernel[0] + p.output_padding[0];
      const int64_t ow =
          (w - 1) * p.stride[1] - 2 * p.padding[1] + tc.kernel[1] + p.output_padding[1];
      REQUIRE(y.shape() == std::array<int64_t, 4>{n, o, oh, ow});
      ComputeDAG dag({x, wt}, {y});
      auto wv = loom_test::random_vector<float>(c * o * tc.kernel[0] * tc.kernel[1], 36);
      auto want = ref::conv2d_transpose_nchw(xv, wv, n, c, {h, w}, o, tc.kernel, p.stride,
                                             p.padding, p.output_padding);
      CHECK(scaled_error(run<float>(dag, {&xv, &wv}), want,
                         ref::float_tolerance(c * tc.kernel[0] * tc.kernel[1])) <= 1);
    }
  }
}

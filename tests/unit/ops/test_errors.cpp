// Every shape check of the operator library, with its exact message: each message names the
// operator, the offending tensors with their shapes, and what was expected.
#include <doctest/doctest.h>

#include <loom/loom.hpp>
#include <loom/ops.hpp>

namespace {
using namespace loom;
}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("matmul reports both shapes when the reduction lengths differ") {
    auto a = placeholder<float>("A", {4, 5});
    auto b = placeholder<float>("B", {6, 3});
    CHECK_THROWS_WITH_AS(
        ops::matmul(a, b),
        "[loom.ops.E301] matmul: 'A' [4, 5] and 'B' [6, 3] disagree on the reduction length K "
        "(5 vs 6); with trans_a = false and trans_b = false, a must be [M, K] and b must be "
        "[K, N]",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::matmul(a, b, true, true),
        "[loom.ops.E301] matmul: 'A' [4, 5] and 'B' [6, 3] disagree on the reduction length K "
        "(4 vs 3); with trans_a = true and trans_b = true, a must be [K, M] and b must be [N, K]",
        user_error);
    // The same shapes are fine once the flags make them agree.
    CHECK_NOTHROW(
        ops::matmul(placeholder<float>("A", {4, 5}), placeholder<float>("B", {3, 5}), false, true));
  }

  TEST_CASE("batch_matmul reports different batch dimensions and reduction lengths") {
    auto a = placeholder<float>("BA", {2, 4, 5});
    CHECK_THROWS_WITH_AS(
        ops::batch_matmul(a, placeholder<float>("BB", {3, 5, 6})),
        "[loom.ops.E302] batch_matmul: 'BA' [2, 4, 5] and 'BB' [3, 5, 6] have different batch "
        "dimensions ([2] vs [3]); all but the last two dimensions must be equal (there is no "
        "broadcasting)",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::batch_matmul(a, placeholder<float>("BC", {2, 6, 5})),
        "[loom.ops.E301] batch_matmul: 'BA' [2, 4, 5] and 'BC' [2, 6, 5] disagree on the "
        "reduction length K (5 vs 6); with trans_a = false and trans_b = false, a must be "
        "[batch..., M, K] and b must be [batch..., K, N]",
        user_error);
  }

  TEST_CASE("dense reports a reduction length or bias length that does not match the weight") {
    auto x = placeholder<float>("A", {4, 5});
    CHECK_THROWS_WITH_AS(
        ops::dense(x, placeholder<float>("W", {3, 6})),
        "[loom.ops.E301] dense: 'A' [4, 5] and weight 'W' [3, 6] disagree on the reduction "
        "length K (5 vs 6); x must be [M, K] and w must be [N, K]",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::dense(x, placeholder<float>("W2", {3, 5}), placeholder<float>("bias", {4})),
        "[loom.ops.E303] dense: bias 'bias' [4] needs N = 3 elements, one per row of the weight "
        "'W2' [3, 5]",
        user_error);
  }

  TEST_CASE("bias_add reports a wrong bias length and an axis out of range") {
    auto x = placeholder<float>("A", {4, 5});
    auto bias = placeholder<float>("bias", {4});
    CHECK_THROWS_WITH_AS(ops::bias_add(x, bias, 1),
                         "[loom.ops.E303] bias_add: bias 'bias' [4] does not match dimension 1 "
                         "of 'A' [4, 5]; the bias needs 5 elements",
                         user_error);
    CHECK_THROWS_WITH_AS(ops::bias_add(x, bias, 2),
                         "[loom.ops.E304] bias_add: axis 2 is out of range for 'A' [4, 5]; use an "
                         "axis in [-2, 1]",
                         user_error);
    CHECK_THROWS_WITH_AS(ops::bias_add(x, bias, -3), doctest::Contains("[loom.ops.E304]"),
                         user_error);
    CHECK_NOTHROW(ops::bias_add(x, bias, -2));
  }

  TEST_CASE("element-wise arithmetic reports shapes that neither match nor broadcast") {
    CHECK_THROWS_WITH_AS(
        ops::add(placeholder<float>("A", {4, 5}), placeholder<float>("C", {5, 4})),
        "[loom.ops.E305] add: 'A' [4, 5] and 'C' [5, 4] do not match; the shapes must be equal, "
        "or the lower-rank operand's shape must equal the trailing dimensions of the other "
        "(size-1 dimensions do not broadcast)",
        user_error);
    // [4] would have to align with the last dimension, 5.
    CHECK_THROWS_WITH_AS(ops::mul(placeholder<float>("X", {2, 4, 5}), placeholder<float>("C", {4})),
                         doctest::Contains("[loom.ops.E305] mul: 'X' [2, 4, 5] and 'C' [4]"),
                         user_error);
    CHECK_THROWS_WITH_AS(ops::sub(placeholder<float>("C", {1}), placeholder<float>("X", {2, 4})),
                         doctest::Contains("[loom.ops.E305] sub:"), user_error);
    CHECK_THROWS_WITH_AS(ops::div(placeholder<float>("P", {3}), placeholder<float>("Q", {4})),
                         doctest::Contains("[loom.ops.E305] div:"), user_error);
  }

  TEST_CASE("convolutions report channel counts that do not match the weight") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nchw(x, placeholder<float>("W", {6, 3, 3, 3})),
        "[loom.ops.E306] conv2d_nchw: weight 'W' [6, 3, 3, 3] expects 3 input channels per "
        "group, but data 'X' [1, 4, 7, 7] has 4 channels in 1 group(s) (4 per group)",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nhwc(placeholder<float>("X", {1, 7, 7, 4}),
                         placeholder<float>("W", {3, 3, 3, 6})),
        "[loom.ops.E306] conv2d_nhwc: weight 'W' [3, 3, 3, 6] expects 3 input channels per "
        "group, but data 'X' [1, 7, 7, 4] has 4 channels in 1 group(s) (4 per group)",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv1d_ncw(placeholder<float>("X", {1, 4, 9}), placeholder<float>("W", {2, 4, 3}),
                        {.groups = 2}),
        doctest::Contains("[loom.ops.E306] conv1d_ncw: weight 'W' [2, 4, 3] expects 4 input "
                          "channels per group, but data 'X' [1, 4, 9] has 4 channels in 2 "
                          "group(s)"),
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::depthwise_conv2d_nchw(x, placeholder<float>("W", {3, 1, 3, 3})),
        "[loom.ops.E306] depthwise_conv2d_nchw: weight 'W' [3, 1, 3, 3] must be [C, multiplier, "
        "KH, KW] with C = 4, the channels of data 'X' [1, 4, 7, 7]",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv2d_transpose_nchw(x, placeholder<float>("W", {3, 1, 3, 3})),
        "[loom.ops.E306] conv2d_transpose_nchw: weight 'W' [3, 1, 3, 3] must be [C, O, KH, KW] "
        "with C = 4, the channels of data 'X' [1, 4, 7, 7]",
        user_error);
  }

  TEST_CASE("convolutions report groups that do not divide the channels") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nchw(x, placeholder<float>("W", {6, 4, 3, 3}), {.groups = 4}),
        "[loom.ops.E307] conv2d_nchw: groups = 4 must be positive and divide both the 4 input "
        "channels of 'X' [1, 4, 7, 7] and the 6 output channels of 'W' [6, 4, 3, 3]",
        user_error);
    CHECK_THROWS_WITH_AS(ops::conv2d_nchw(x, placeholder<float>("W", {6, 4, 3, 3}), {.groups = 0}),
                         doctest::Contains("[loom.ops.E307] conv2d_nchw: groups = 0"), user_error);
    CHECK_THROWS_WITH_AS(
        ops::depthwise_conv2d_nchw(x, placeholder<float>("W", {4, 1, 3, 3}), {.groups = 4}),
        "[loom.ops.E307] depthwise_conv2d_nchw: groups = 4 was given, but a depthwise "
        "convolution already puts every channel in its own group; leave groups at 1 (or use "
        "conv2d_nchw with groups)",
        user_error);
  }

  TEST_CASE("convolutions and pooling report invalid window parameters") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    auto w = placeholder<float>("W", {6, 4, 3, 3});
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nchw(x, w, {.stride = {0, 1}}),
        "[loom.ops.E308] conv2d_nchw: stride [0, 1], padding [0, 0] and dilation [1, 1] are "
        "invalid; strides and dilations must be positive and paddings non-negative",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv1d_ncw(placeholder<float>("X", {1, 4, 5}), placeholder<float>("W", {2, 4, 3}),
                        {.padding = {-1}}),
        "[loom.ops.E308] conv1d_ncw: stride [1], padding [-1] and dilation [1] are invalid; "
        "strides and dilations must be positive and paddings non-negative",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv3d_ncdhw(placeholder<float>("X", {1, 2, 4, 4, 4}),
                          placeholder<float>("W", {2, 2, 1, 1, 1}), {.dilation = {1, 0, 1}}),
        doctest::Contains("[loom.ops.E308] conv3d_ncdhw:"), user_error);
    CHECK_THROWS_WITH_AS(ops::max_pool2d(x, {0, 3}, {1, 1}),
                         "[loom.ops.E308] max_pool2d: kernel [0, 3] is invalid; kernel extents "
                         "must be positive",
                         user_error);
    CHECK_THROWS_WITH_AS(ops::avg_pool2d(x, {2, 2}, {2, -2}),
                         doctest::Contains("[loom.ops.E308] avg_pool2d: stride [2, -2]"),
                         user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv2d_transpose_nchw(x, placeholder<float>("W", {4, 1, 3, 3}), {.stride = {1, 0}}),
        doctest::Contains("[loom.ops.E308] conv2d_transpose_nchw:"), user_error);
  }

  TEST_CASE("convolutions and pooling report windows larger than the padded input") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nchw(x, placeholder<float>("W", {6, 4, 9, 3})),
        "[loom.ops.E309] conv2d_nchw: the window (kernel [9, 3], dilation [1, 1]) does not fit "
        "in the input [7, 7] padded by [0, 0]; use a smaller kernel or dilation, or more padding",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv2d_nchw(x, placeholder<float>("W", {6, 4, 3, 3}), {.dilation = {4, 1}}),
        "[loom.ops.E309] conv2d_nchw: the window (kernel [3, 3], dilation [4, 1]) does not fit "
        "in the input [7, 7] padded by [0, 0]; use a smaller kernel or dilation, or more padding",
        user_error);
    // Padding makes the same window fit.
    CHECK_NOTHROW(ops::conv2d_nchw(x, placeholder<float>("W", {6, 4, 9, 3}), {.padding = {1, 0}}));
    CHECK_THROWS_WITH_AS(ops::avg_pool2d(x, {9, 3}, {1, 1}),
                         doctest::Contains("[loom.ops.E309] avg_pool2d: the window (kernel [9, 3]"),
                         user_error);
    CHECK_THROWS_WITH_AS(
        ops::conv2d_transpose_nchw(placeholder<float>("X", {1, 4, 1, 1}),
                                   placeholder<float>("W", {4, 1, 1, 1}), {.padding = {1, 0}}),
        "[loom.ops.E309] conv2d_transpose_nchw: padding [1, 0] crops the whole output of 'X' "
        "[1, 4, 1, 1] (output would be [-1, 1]); use less padding",
        user_error);
  }

  TEST_CASE("pooling reports padding as large as the kernel") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    CHECK_THROWS_WITH_AS(ops::max_pool2d(x, {3, 3}, {1, 1}, {3, 0}),
                         "[loom.ops.E310] max_pool2d: padding [3, 0] must be smaller than the "
                         "kernel [3, 3] on 'X' [1, 4, 7, 7]",
                         user_error);
    CHECK_THROWS_WITH_AS(ops::avg_pool2d(x, {2, 2}, {1, 1}, {0, 2}, false),
                         doctest::Contains("[loom.ops.E310] avg_pool2d:"), user_error);
  }

  TEST_CASE("normalizations report parameter vectors of the wrong length and a negative eps") {
    auto a = placeholder<float>("A", {4, 5});
    auto g5 = placeholder<float>("g", {5});
    CHECK_THROWS_WITH_AS(
        ops::layer_norm(a, placeholder<float>("g", {4}), placeholder<float>("b", {5})),
        "[loom.ops.E311] layer_norm: gamma 'g' [4] and beta 'b' [5] must both have 5 elements, "
        "the last dimension of 'A' [4, 5]",
        user_error);
    CHECK_THROWS_WITH_AS(ops::layer_norm(a, g5, g5, -1.0),
                         "[loom.ops.E312] layer_norm: eps = -1 must be a non-negative number (it "
                         "keeps the variance away from zero; 1e-5 is usual)",
                         user_error);
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    auto c4 = placeholder<float>("c4", {4});
    auto c3 = placeholder<float>("c3", {3});
    CHECK_THROWS_WITH_AS(
        ops::batch_norm(x, c4, c4, c3, c4),
        "[loom.ops.E311] batch_norm: gamma 'c4' [4], beta 'c4' [4], moving_mean 'c3' [3] and "
        "moving_var 'c4' [4] must all have 4 elements, the channels (dimension 1) of 'X' "
        "[1, 4, 7, 7]",
        user_error);
    CHECK_THROWS_WITH_AS(ops::batch_norm(x, c4, c4, c4, c4, std::nan("")),
                         doctest::Contains("[loom.ops.E312] batch_norm: eps = nan"), user_error);
  }

  TEST_CASE("transpose reports a permutation that repeats or exceeds an axis") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    CHECK_THROWS_WITH_AS(ops::transpose(x, {0, 1, 1, 2}),
                         "[loom.ops.E313] transpose: [0, 1, 1, 2] is not a permutation of the 4 "
                         "axes of 'X' [1, 4, 7, 7]; list each axis 0..3 exactly once",
                         user_error);
    CHECK_THROWS_WITH_AS(ops::transpose(x, {0, 1, 2, 4}),
                         doctest::Contains("[loom.ops.E313] transpose: [0, 1, 2, 4]"), user_error);
    CHECK_THROWS_WITH_AS(ops::transpose(x, {0, -1, 2, 3}), doctest::Contains("[loom.ops.E313]"),
                         user_error);
  }

  TEST_CASE("pad reports negative padding") {
    CHECK_THROWS_WITH_AS(ops::pad(placeholder<float>("A", {4, 5}), {0, -1}, {1, 1}),
                         "[loom.ops.E314] pad: padding [0, -1] before and [1, 1] after 'A' "
                         "[4, 5] is invalid; paddings must be non-negative (crop with a compute "
                         "instead)",
                         user_error);
  }

  TEST_CASE("tbg reports query and key that disagree on batch, heads or head size") {
    CHECK_THROWS_WITH_AS(
        ops::tbg(placeholder<float>("Q", {2, 5, 4, 8}), placeholder<float>("K", {2, 3, 4, 7})),
        "[loom.ops.E315] tbg: query 'Q' [2, 5, 4, 8] and key 'K' [2, 3, 4, 7] must agree on "
        "batch (dimension 0), heads (2) and head size (3); both are [batch, sequence, heads, "
        "head size]",
        user_error);
    CHECK_THROWS_WITH_AS(
        ops::tbg(placeholder<float>("Q", {2, 5, 4, 8}), placeholder<float>("K", {2, 5, 3, 8})),
        doctest::Contains("[loom.ops.E315]"), user_error);
  }

  TEST_CASE("conv2d_transpose reports output_padding not smaller than the stride") {
    CHECK_THROWS_WITH_AS(
        ops::conv2d_transpose_nchw(placeholder<float>("X", {1, 4, 7, 7}),
                                   placeholder<float>("W", {4, 1, 3, 3}),
                                   {.stride = {2, 2}, .output_padding = {2, 0}}),
        "[loom.ops.E316] conv2d_transpose_nchw: output_padding [2, 0] must be non-negative and "
        "smaller than the stride [2, 2]",
        user_error);
  }

  TEST_CASE("conv_layer passes its convolution's and batch norm's errors through") {
    auto x = placeholder<float>("X", {1, 4, 7, 7});
    auto w = placeholder<float>("W", {6, 4, 3, 3});
    auto c6 = placeholder<float>("c6", {6});
    auto c4 = placeholder<float>("c4", {4});
    CHECK_THROWS_WITH_AS(ops::conv_layer(x, placeholder<float>("W", {6, 2, 3, 3}), c6, c6, c6, c6),
                         doctest::Contains("[loom.ops.E306] conv2d_nchw:"), user_error);
    CHECK_THROWS_WITH_AS(ops::conv_layer(x, w, c6, c6, c4, c6),
                         doctest::Contains("[loom.ops.E311] batch_norm:"), user_error);
  }
}

// Halide generator of the fp32 3x3-style convolution of bench_conv2d: NCHW input, OIHW weights,
// stride 1, symmetric zero padding, optionally + bias (per output channel) and ReLU, NCHW output,
// for one shape. Only the autoschedulers schedule it.
#include "generator_common.h"

namespace {

using namespace Halide;

class LoomConv2d : public Generator<LoomConv2d> {
 public:
  GeneratorParam<int> batch{"batch", 1};
  GeneratorParam<int> channels{"channels", 64};
  GeneratorParam<int> height{"height", 56};
  GeneratorParam<int> width{"width", 56};
  GeneratorParam<int> filters{"filters", 64};
  GeneratorParam<int> kernel_h{"kernel_h", 3};
  GeneratorParam<int> kernel_w{"kernel_w", 3};
  GeneratorParam<int> pad{"pad", 1};
  GeneratorParam<bool> bias_relu{"bias_relu", true};

  // Halide lists dimensions innermost first: input(x, y, c, n) is input[n][c][y][x] and
  // weights(s, r, c, k) is weights[k][c][r][s].
  Input<Buffer<float>> input{"input", 4};
  Input<Buffer<float>> weights{"weights", 4};
  Input<Buffer<float>> bias{"bias", 1};
  Output<Buffer<float>> output{"output", 4};

  void generate() {
    Var x("x"), y("y"), k("k"), nn("nn");
    Func padded = BoundaryConditions::constant_exterior(input, 0.0f, {{0, width}, {0, height}});
    RDom r(0, kernel_w, 0, kernel_h, 0, channels, "r");
    Func conv("conv");
    conv(x, y, k, nn) = bias_relu ? bias(k) : 0.0f;
    conv(x, y, k, nn) += weights(r.x, r.y, r.z, k) * padded(x + r.x - pad, y + r.y - pad, r.z, nn);
    if (bias_relu) {
      output(x, y, k, nn) = max(conv(x, y, k, nn), 0.0f);
    } else {
      output(x, y, k, nn) = conv(x, y, k, nn);
    }
  }

  void schedule() {
    const int out_h = height + 2 * pad - kernel_h + 1;
    const int out_w = width + 2 * pad - kernel_w + 1;
    loom_halide::pin_dense(input, {width, height, channels, batch});
    loom_halide::pin_dense(weights, {kernel_w, kernel_h, channels, filters});
    loom_halide::pin_dense(bias, {filters});
    loom_halide::pin_dense(output, {out_w, out_h, filters, batch});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LoomConv2d, loom_conv2d)

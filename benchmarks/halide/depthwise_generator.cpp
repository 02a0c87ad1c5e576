// Halide generator of bench_depthwise's fp32 depthwise convolution (channel multiplier 1): NCHW
// input, [C, 1, R, S] weights, stride 1, symmetric zero padding, NCHW output, for one shape. Only
// the autoschedulers schedule it.
#include "generator_common.h"

namespace {

using namespace Halide;

class LoomDepthwise : public Generator<LoomDepthwise> {
 public:
  GeneratorParam<int> batch{"batch", 1};
  GeneratorParam<int> channels{"channels", 32};
  GeneratorParam<int> height{"height", 112};
  GeneratorParam<int> width{"width", 112};
  GeneratorParam<int> kernel_h{"kernel_h", 3};
  GeneratorParam<int> kernel_w{"kernel_w", 3};
  GeneratorParam<int> pad{"pad", 1};

  // Halide lists dimensions innermost first: input(x, y, c, n) is input[n][c][y][x] and
  // weights(s, r, 0, c) is weights[c][0][r][s].
  Input<Buffer<float>> input{"input", 4};
  Input<Buffer<float>> weights{"weights", 4};
  Output<Buffer<float>> output{"output", 4};

  void generate() {
    Var x("x"), y("y"), c("c"), nn("nn");
    Func padded = BoundaryConditions::constant_exterior(input, 0.0f, {{0, width}, {0, height}});
    RDom r(0, kernel_w, 0, kernel_h, "r");
    Func conv("conv");
    conv(x, y, c, nn) += weights(r.x, r.y, 0, c) * padded(x + r.x - pad, y + r.y - pad, c, nn);
    output(x, y, c, nn) = conv(x, y, c, nn);
  }

  void schedule() {
    const int out_h = height + 2 * pad - kernel_h + 1;
    const int out_w = width + 2 * pad - kernel_w + 1;
    loom_halide::pin_dense(input, {width, height, channels, batch});
    loom_halide::pin_dense(weights, {kernel_w, kernel_h, 1, channels});
    loom_halide::pin_dense(output, {out_w, out_h, channels, batch});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LoomDepthwise, loom_depthwise)

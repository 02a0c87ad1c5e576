// Halide generator of bench_softmax's fp32 row-wise softmax y = exp(x - max) / sum(exp(x - max))
// over the rows of a row-major [rows, cols] matrix, for one shape. exp is Halide's exp (libm
// accuracy; fast_exp would miss the benchmark's 1e-6 tolerance). Only the autoschedulers schedule
// it.
#include "generator_common.h"

namespace {

using namespace Halide;

class LoomSoftmax : public Generator<LoomSoftmax> {
 public:
  GeneratorParam<int> rows{"rows", 1024};
  GeneratorParam<int> cols{"cols", 1024};

  // Halide lists dimensions innermost first: x(j, i) is x[i][j].
  Input<Buffer<float>> x{"x", 2};
  Output<Buffer<float>> y{"y", 2};

  void generate() {
    Var j("j"), i("i");
    RDom r(0, cols, "r");
    Func row_max("row_max"), e("e"), row_sum("row_sum");
    row_max(i) = maximum(x(r, i));
    e(j, i) = exp(x(j, i) - row_max(i));
    row_sum(i) = sum(e(r, i));
    y(j, i) = e(j, i) / row_sum(i);
  }

  void schedule() {
    loom_halide::pin_dense(x, {cols, rows});
    loom_halide::pin_dense(y, {cols, rows});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LoomSoftmax, loom_softmax)

// Halide generator of fp32 batch matmul C[b] = A[b] * B[b] (A [batch, M, K], B [batch, K, N],
// C [batch, M, N], row-major as bench_batch_matmul lays them out), for one shape. Only the
// autoschedulers schedule it (with auto_schedule=false it is Halide's default schedule).
#include "generator_common.h"

namespace {

using namespace Halide;

class LoomBatchMatmul : public Generator<LoomBatchMatmul> {
 public:
  GeneratorParam<int> batch{"batch", 12};
  GeneratorParam<int> m{"m", 128};
  GeneratorParam<int> n{"n", 128};
  GeneratorParam<int> k{"k", 64};

  // Halide lists dimensions innermost first: A(k, i, bb) is A[bb][i][k].
  Input<Buffer<float>> a{"A", 3};
  Input<Buffer<float>> b{"B", 3};
  Output<Buffer<float>> c{"C", 3};

  void generate() {
    Var j("j"), i("i"), bb("bb");
    RDom r(0, k, "r");
    Func prod("prod");
    prod(j, i, bb) += a(r, i, bb) * b(j, r, bb);
    c(j, i, bb) = prod(j, i, bb);
  }

  void schedule() {
    loom_halide::pin_dense(a, {k, m, batch});
    loom_halide::pin_dense(b, {n, k, batch});
    loom_halide::pin_dense(c, {n, m, batch});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LoomBatchMatmul, loom_batch_matmul)

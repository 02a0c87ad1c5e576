// Halide generator of fp32 GEMM C[M,N] = A[M,K] * B[K,N], all row-major (bench_gemm's layout),
// for one shape. Without an autoscheduler and with hand_schedule=false it is Halide's default
// schedule (everything inlined or at root, no vectors); with hand_schedule=true it is the short
// schedule below; with auto_schedule=true the chosen autoscheduler schedules it.
#include <algorithm>

#include "generator_common.h"

namespace {

using namespace Halide;

class LoomGemm : public Generator<LoomGemm> {
 public:
  GeneratorParam<int> m{"m", 1024};
  GeneratorParam<int> n{"n", 1024};
  GeneratorParam<int> k{"k", 1024};
  GeneratorParam<bool> hand_schedule{"hand_schedule", false};
  // Register tile of the hand schedule: tile_vectors native vectors of C's columns times
  // tile_rows rows, all of it accumulators (0: picked from the vector width, see schedule()).
  GeneratorParam<int> tile_vectors{"tile_vectors", 0};
  GeneratorParam<int> tile_rows{"tile_rows", 0};

  // Halide lists dimensions innermost first: A(k, i) is A[i][k].
  Input<Buffer<float>> a{"A", 2};
  Input<Buffer<float>> b{"B", 2};
  Output<Buffer<float>> c{"C", 2};

  void generate() {
    r = RDom(0, k, "r");
    // The hand schedule stores B's columns of one panel contiguously (packing). The other
    // schedules get the plain algorithm: a copy Func would only be one more thing to misplace.
    b_panel(j, p) = b(j, p);
    prod(j, i) += a(r, i) * (hand_schedule ? b_panel(j, r) : b(j, r));
    c(j, i) = prod(j, i);
  }

  void schedule() {
    loom_halide::pin_dense(a, {k, m});
    loom_halide::pin_dense(b, {n, k});
    loom_halide::pin_dense(c, {n, m});
    if (get_auto_schedule() || !hand_schedule) return;

    // AVX-512: 3 zmm x 8 rows (24 accumulators of 32 registers); AVX2: 2 ymm x 6 rows (12 of 16;
    // on Zen3 at 512^3, 1 thread: 62 GFLOP/s, against 45 for 3 x 4 and 25 for 4 x 3).
    const int vec = natural_vector_size<float>();
    const int tv = tile_vectors > 0 ? int(tile_vectors) : (vec >= 16 ? 3 : 2);
    const int tr = tile_rows > 0 ? int(tile_rows) : (vec >= 16 ? 8 : 6);
    const int tc = tv * vec;
    // A column panel is `pt` register tiles wide: its packed B (K x pt*tc floats) should stay in
    // a 256 KiB share of L2, and there should be at least two panels to run in parallel.
    const int tiles = (int(n) + tc - 1) / tc;
    const int pt = std::max(1, std::min({4, 256 * 1024 / (int(k) * tc * 4), (tiles + 1) / 2}));

    Var jt("jt"), jo("jo"), ji("ji"), io("io"), ii("ii");
    // Register tiles overlap at the right and bottom edges (ShiftInwards: recomputed, exact
    // stores); a panel past the last tile is skipped, not shifted (GuardWithIf on tile indices).
    c.split(j, jt, ji, tc)
        .split(jt, jo, jt, pt, TailStrategy::GuardWithIf)
        .split(i, io, ii, tr)
        .reorder(ji, ii, jt, io, jo)
        .vectorize(ji, vec)
        .unroll(ji)
        .unroll(ii)
        .parallel(jo);
    prod.compute_at(c, jt).vectorize(j, vec).unroll(j).unroll(i);
    prod.update().reorder(j, i, r).vectorize(j, vec).unroll(j).unroll(i);
    b_panel.compute_at(c, jo).vectorize(j, vec);
  }

 private:
  Var j{"j"}, i{"i"}, p{"p"};
  RDom r;
  Func prod{"prod"}, b_panel{"b_panel"};
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LoomGemm, loom_gemm)

/// \file
/// Program features (layer cost/): Ansor's 164 floats per written buffer (ansor.md §3), computed
/// from the lowered loop nest, the input of the learned cost model.
///
/// **Rows.** One row per buffer the program writes, in order of the first store to it. When
/// several stores write one buffer (a reduction's init and update, the peeled copies of a
/// partitioned loop, the copies of an unrolled loop), the operation counts (features 0-15) add
/// up over the stores and every other feature comes from the *last* store in program order — the
/// update of a reduction overwrites its init, as in Ansor.
///
/// **Layout** (`kFeatureVersion` 2, `kNumFeatures` = 167, names in feature_names()):
///
/// | index   | group        | contents                                                      |
/// |---------|--------------|---------------------------------------------------------------|
/// | 0-15    | compute      | float mad, add/sub, mul, div/mod, cmp (with min/max), math    |
/// |         |              | call, other call; the same 7 for integers; bool ops; selects  |
/// | 16-26   | vectorize    | vectorized loops: number, product of extents, innermost       |
/// |         |              | extent, position one-hot (8, LoopPosition)                    |
/// | 27-37   | unroll       | the same for unrolled loops                                   |
/// | 38-48   | parallel     | the same for parallel loops                                   |
/// | 49-56   | GPU          | is_gpu, blockIdx.x/y/z, threadIdx.x/y/z, vthread extents      |
/// | 57-146  | buffers      | 5 × 18 access features of the buffers the store touches,      |
/// |         |              | sorted by (lines, bytes) descending, zero-padded              |
/// | 147-156 | intensity    | flops/bytes at 10 even fractions of the store's flops         |
/// | 157-160 | allocation   | allocated bytes, bytes × outer product, outer product at the  |
/// |         |              | allocation, inner product                                     |
/// | 161-163 | outer scope  | product of the enclosing extents, their number, unroll step   |
/// | 164-166 | GPU kernel   | multiply-adds on tensor cores, extent of the pipelined loop,  |
/// |         |              | shared-memory bytes allocated around the store (per stage)    |
///
/// Versions: 1 is Ansor's 164 features (0-163). 2 appends 164-166, which Ansor's features
/// cannot see: whether a product runs on tensor cores (Ansor never tensorized) and whether its
/// operands are pipelined with cp.async (both loops are serial loops to the rest of the
/// row), and the block's shared memory, which bounds the blocks an SM holds. A layout only grows
/// at its end, so a model trained on an older one ranks newer rows by their prefix
/// (GbdtCostModel::predict; the pretrained CPU model is a version-1 model).
///
/// Every feature except the one-hot ones and `is_gpu` is stored as log2(1 + |x|) with x's sign
/// (`log_scale`); `unscale` inverts it.
///
/// **Mechanics** (Ansor's, over loom's flat buffers). The extractor walks the nest with a stack of
/// loops; a vector store (a Ramp index of `lanes` lanes, as the vectorizer leaves it) counts as an
/// innermost Vectorized loop of extent `lanes`, so that a nest lowered with or without
/// vectorization gives nearly the same row. Per store:
///  - instances: the product of the enclosing loop extents, times the estimated fraction of
///    iterations in which the enclosing IfThenElse conditions hold (Ansor ignores conditions;
///    loom's lowering guards split tails and tiles larger than their region, which can leave
///    most iterations idle). A comparison counts the values of (a - b) over its range that
///    satisfy it as if spread evenly — exact for the mixed-radix tail guards of lowering — and
///    && / || / ! combine them as independent events. With it, the float operations of a
///    program are the operations it executes: 2·M·N·K for a GEMM, more where tiles overlap.
///  - op counts: the nodes of the stored value (load indices included, the store's own index
///    not), each weighted by its lanes, times the instances; the conditions of enclosing
///    IfThenElse are counted once each, at their own loop depth. `float_mad`/`int_mad` count
///    add/sub nodes with a multiplication operand — a fusable pair whose add and mul are *also*
///    counted in add/sub and mul (Ansor never detects it).
///  - touched region of each buffer at each loop level: the flat index is split back into one
///    index per buffer dimension (a term `c * atom` goes to the outermost dimension whose stride
///    divides `c`), and each dimension's span is bounded with the loops outside the level fixed at
///    their first iteration and the loops inside it free, clamped to the buffer's shape.
///  - bytes (instances × element size), unique bytes (region of the whole nest), cache lines
///    (64 bytes; from the stride of the innermost loop that moves the index), unique lines
///    (contiguous runs of the region), reuse type/distance/count and the innermost loop's
///    stride (the change of the flat index when that loop's variable steps by one) — all as in
///    Ansor's feature.cc (see the implementation for the few corrections).
///  - annotation position: the innermost annotated loop is *spatial* when its variable appears
///    in the stored index (inner/middle/outer by the buffer dimension it moves; several
///    dimensions: mixed), *reduce* when the store is an update, the variable does not appear in
///    the stored index but in a read, and the loop lies inside the stored buffer's allocation
///    (inner/middle/outer among those reduce loops), and outer spatial otherwise (Ansor's
///    fallback). Ansor leaves this a TODO and always writes "mixed".
///
/// **What the IR cannot show** (documented deviations):
///  - `auto_unroll_max_step` is a schedule pragma, gone after lowering. Feature 163 is the
///    number of statement instances under the outermost enclosing Unrolled loop — the smallest
///    auto_unroll_max_step that would have unrolled what is unrolled (0 outside unrolled loops).
///  - GPU extents are 0 when a store is not under that binding (Ansor writes 1).
///  - Extraction wants loops that still carry their kinds: use `feature_lower_options()`
///    (unroll, vectorize and partition off, as Ansor extracts from TIR before those passes). With
///    the default lowering the unrolled copies remain separate stores: their op counts still add
///    up, but the loop features of the unrolled loops are gone.
///
/// Errors are loom::user_error with id `loom.cost.E900`.
#ifndef LOOM_COST_FEATURES_HPP
#define LOOM_COST_FEATURES_HPP

#include "loom/cost/program_features.hpp"
#include "loom/ir/stmt.hpp"
#include "loom/lower/lower.hpp"
#include "loom/sched/state.hpp"
#include "loom/target.hpp"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cost {

// --- layout ----------------------------------------------------------------------------------

/// Version of the layout and semantics below; bump it whenever a feature's meaning changes, so
/// that saved models and training data from another version are not silently reused.
inline constexpr int kFeatureVersion = 2;
/// Floats per row.
inline constexpr int kNumFeatures = 167;
/// Floats per row of version 1, Ansor's DEFAULT_FEATURE_VEC_LEN: the prefix every later version
/// keeps.
inline constexpr int kNumAnsorFeatures = 164;
/// Buffers described per row (Ansor's DEFAULT_MAX_N_BUFS).
inline constexpr int kMaxFeatureBuffers = 5;
/// Access features per buffer.
inline constexpr int kFeaturesPerBuffer = 18;
/// Samples of the arithmetic-intensity curve.
inline constexpr int kIntensityCurvePoints = 10;
/// Cache-line size the line features assume (fixed, as in Ansor).
inline constexpr int kCacheLineBytes = 64;

/// Group 1: operation counts (total dynamic counts).
inline constexpr int kFeatureFloatMad = 0;
inline constexpr int kFeatureFloatAddSub = 1;
inline constexpr int kFeatureFloatMul = 2;
inline constexpr int kFeatureFloatDivMod = 3;
inline constexpr int kFeatureFloatCmp = 4;
inline constexpr int kFeatureFloatMathFunc = 5;
inline constexpr int kFeatureFloatOtherFunc = 6;
inline constexpr int kFeatureIntMad = 7;
inline constexpr int kFeatureIntAddSub = 8;
inline constexpr int kFeatureIntMul = 9;
inline constexpr int kFeatureIntDivMod = 10;
inline constexpr int kFeatureIntCmp = 11;
inline constexpr int kFeatureIntMathFunc = 12;
inline constexpr int kFeatureIntOtherFunc = 13;
inline constexpr int kFeatureBoolOp = 14;
inline constexpr int kFeatureSelectOp = 15;

/// Where the innermost annotated loop sits, relative to the store (one-hot, 8 entries).
enum class LoopPosition : uint8_t {
  None,           ///< no loop of this kind encloses the store
  InnerSpatial,   ///< moves the innermost dimension of the stored buffer
  MiddleSpatial,  ///< moves a middle dimension
  OuterSpatial,   ///< moves the outermost dimension, or is outside what the store indexes
  InnerReduce,    ///< the innermost reduction loop of an update
  MiddleReduce,
  OuterReduce,
  Mixed  ///< moves several dimensions (a fused loop)
};
inline constexpr int kNumLoopPositions = 8;

/// Group 1: annotations. Each kind has num, prod, len, then the position one-hot.
inline constexpr int kFeatureVecNum = 16;
inline constexpr int kFeatureVecProd = 17;
inline constexpr int kFeatureVecLen = 18;
inline constexpr int kFeatureVecPos = 19;  ///< + LoopPosition
inline constexpr int kFeatureUnrollNum = 27;
inline constexpr int kFeatureUnrollProd = 28;
inline constexpr int kFeatureUnrollLen = 29;
inline constexpr int kFeatureUnrollPos = 30;
inline constexpr int kFeatureParallelNum = 38;
inline constexpr int kFeatureParallelProd = 39;
inline constexpr int kFeatureParallelLen = 40;
inline constexpr int kFeatureParallelPos = 41;

/// Group 1: GPU thread bindings.
inline constexpr int kFeatureIsGpu = 49;
inline constexpr int kFeatureBlockIdxX = 50;
inline constexpr int kFeatureBlockIdxY = 51;
inline constexpr int kFeatureBlockIdxZ = 52;
inline constexpr int kFeatureThreadIdxX = 53;
inline constexpr int kFeatureThreadIdxY = 54;
inline constexpr int kFeatureThreadIdxZ = 55;
inline constexpr int kFeatureVThread = 56;

/// Group 2: the first buffer block; see buffer_feature().
inline constexpr int kFeatureBuffers = 57;

/// Offsets inside one buffer block.
inline constexpr int kBufferAccRead = 0;       ///< one-hot access type: read only
inline constexpr int kBufferAccWrite = 1;      ///< written only
inline constexpr int kBufferAccReadWrite = 2;  ///< read and written (an update)
inline constexpr int kBufferBytes = 3;         ///< accesses × element bytes
inline constexpr int kBufferUniqueBytes = 4;   ///< bytes of the region the whole nest touches
inline constexpr int kBufferLines = 5;         ///< cache lines fetched, with the access stride
inline constexpr int kBufferUniqueLines = 6;   ///< distinct cache lines of the region
inline constexpr int kBufferReuseLoopMultipleRead = 7;  ///< one-hot reuse type
inline constexpr int kBufferReuseSerialMultipleReadWrite = 8;
inline constexpr int kBufferReuseNone = 9;
inline constexpr int kBufferReuseDistIter = 10;   ///< reuse distance in loop iterations
inline constexpr int kBufferReuseDistBytes = 11;  ///< reuse distance in touched bytes
inline constexpr int kBufferReuseCount = 12;
inline constexpr int kBufferBytesPerReuse = 13;  ///< bytes / reuse count (× 2 without reuse)
inline constexpr int kBufferUniqueBytesPerReuse = 14;
inline constexpr int kBufferLinesPerReuse = 15;
inline constexpr int kBufferUniqueLinesPerReuse = 16;
inline constexpr int kBufferStride = 17;  ///< index stride (elements) of the innermost loop

/// Index of feature `offset` (a kBuffer* constant) of the `buffer`-th buffer block (0-4).
constexpr int buffer_feature(int buffer, int offset) {
  return kFeatureBuffers + buffer * kFeaturesPerBuffer + offset;
}

/// Group 3: the arithmetic-intensity curve, point i at (i + 1) / 10 of the store's flops.
inline constexpr int kFeatureIntensityCurve = 147;

/// Group 4: allocation of the written buffer (zero for kernel arguments).
inline constexpr int kFeatureAllocSize = 157;
inline constexpr int kFeatureAllocProd = 158;
inline constexpr int kFeatureAllocOuterProd = 159;
inline constexpr int kFeatureAllocInnerProd = 160;

/// Group 5: outer scope of the (last) store.
inline constexpr int kFeatureOuterProd = 161;
inline constexpr int kFeatureNumLoops = 162;
inline constexpr int kFeatureAutoUnrollMaxStep = 163;

/// Group 6 (version 2): GPU kernels.
/// The multiply-adds of the store that run as tensor-core instructions (its instances under a
/// Tensorized loop, lower/mma.hpp); 0 elsewhere.
inline constexpr int kFeatureTensorCoreMacs = 164;
/// The extent of the innermost Pipelined loop around the store (its steps overlap the next
/// step's cp.async copies, lower/gpu.hpp); 0 outside one.
inline constexpr int kFeaturePipelinedLen = 165;
/// Bytes of the shared-memory arrays allocated around the store, those a pipelined loop fetches
/// once per slot (ir::pipeline_stages: 2 when double-buffered).
inline constexpr int kFeatureSharedBytes = 166;

static_assert(kFeatureBuffers + kMaxFeatureBuffers * kFeaturesPerBuffer == kFeatureIntensityCurve);
static_assert(kFeatureIntensityCurve + kIntensityCurvePoints == kFeatureAllocSize);
static_assert(kFeatureAutoUnrollMaxStep + 1 == kNumAnsorFeatures);
static_assert(kFeatureSharedBytes + 1 == kNumFeatures);

/// The float-operation features whose (unscaled) sum is a row's float operation count, for
/// analytic models. float_mad is left out: its pairs are already in add/sub and mul.
inline constexpr std::array<int, 6> kFloatOpFeatures = {
    kFeatureFloatAddSub, kFeatureFloatMul,      kFeatureFloatDivMod,
    kFeatureFloatCmp,    kFeatureFloatMathFunc, kFeatureFloatOtherFunc};

/// Names of the features, by index: "float_addsub", "vec_type.inner_spatial",
/// "B0.bytes", "B0.reuse_dist_iter", "arith_intensity_curve.3", ... (unique, stable for a
/// kFeatureVersion; Ansor's GetPerStoreFeatureName with snake_case enum names).
LOOM_DECL const std::array<std::string_view, kNumFeatures>& feature_names();

/// False for the one-hot features and is_gpu, which are stored as 0/1; true for the others,
/// which are stored log-scaled.
constexpr bool is_log_scaled(int index) {
  if (index == kFeatureIsGpu) return false;
  for (int base : {kFeatureVecPos, kFeatureUnrollPos, kFeatureParallelPos})
    if (index >= base && index < base + kNumLoopPositions) return false;
  if (index >= kFeatureBuffers && index < kFeatureIntensityCurve) {
    int o = (index - kFeatureBuffers) % kFeaturesPerBuffer;
    return !(o <= kBufferAccReadWrite ||
             (o >= kBufferReuseLoopMultipleRead && o <= kBufferReuseNone));
  }
  return true;
}

/// log2(1 + |x|) with the sign of x: how every non-one-hot feature is stored.
LOOM_DECL float log_scale(double x);
/// Inverse of log_scale: 2^|v| - 1 with the sign of v.
LOOM_DECL double unscale(float v);

/// Row `r` of `p` (`p.num_features` floats).
inline const float* feature_row(const ProgramFeatures& p, int r) {
  return p.values.data() + static_cast<size_t>(r) * static_cast<size_t>(p.num_features);
}

/// Float operations of one row (the unscaled sum of kFloatOpFeatures): for analytic models.
LOOM_DECL double row_float_ops(const float* row);
/// Bytes accessed by the (up to 5) buffer blocks of one row (the unscaled sum of their
/// kBufferBytes), i.e. accesses × element size, before any cache: for analytic models.
LOOM_DECL double row_bytes(const float* row);

// --- extraction ------------------------------------------------------------------------------

/// The lowering that feature extraction expects: simplified, with Unrolled and Vectorized loops
/// kept as marked loops and no peeled tails (unroll, vectorize and partition off), like the TIR
/// Ansor extracts from. Also cheaper to produce than a full lowering.
LOOM_DECL lower::LowerOptions feature_lower_options();

/// The features of a lowered kernel: one row per written buffer (see the file comment).
/// `target` decides is_gpu (with the GPU loop kinds in the nest). Throws loom::user_error
/// `[loom.cost.E900]` if `f` has no body.
LOOM_DECL ProgramFeatures extract_features(const ir::LoweredFunc& f, const Target& target);

/// Lowers `state` with feature_lower_options() and extracts its features. Throws what lowering
/// throws for an incomplete or illegal state (a sketch: `[loom.lower.E410]`).
LOOM_DECL ProgramFeatures extract_features(const sched::State& state, const Target& target);

/// The features of many states, spread over loom's compile threads (loom/compile_threads.hpp,
/// `set_compile_threads`) when `parallel`: each thread takes the next state as it finishes
/// one, so programs of very different cost keep every thread busy. As in Ansor, a state whose
/// lowering fails gets an empty ProgramFeatures (`num_rows == 0`) instead of an exception, so
/// one bad candidate cannot stop a search round. The result does not depend on the thread count.
LOOM_DECL std::vector<ProgramFeatures> extract_features(const std::vector<sched::State>& states,
                                                        const Target& target, bool parallel = true);

/// The same for states held elsewhere (a search population): `states[i]` must not be null.
LOOM_DECL std::vector<ProgramFeatures> extract_features(
    const std::vector<const sched::State*>& states, const Target& target, bool parallel = true);

}  // namespace cost
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/cost/impl/features.ipp"
#endif

#endif  // LOOM_COST_FEATURES_HPP

/// \file
/// `SearchOptions`: every knob of the schedule search space in one documented struct (layer
/// search/). Sketch generation (search/sketch.hpp) and random annotation (search/annotate.hpp)
/// read it; the defaults are Ansor's CPU defaults (TVM `auto_scheduler` DEFAULT_PARAMS and
/// `GetDefaultHardwareParams`), with loom's own additions marked as such.
#ifndef LOOM_SEARCH_OPTIONS_HPP
#define LOOM_SEARCH_OPTIONS_HPP

#include "loom/config.hpp"
#include "loom/ir/node_kinds.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// Parameters of the search space. Plain data; copy and edit freely.
struct SearchOptions {
  // --- sketch generation -----------------------------------------------------------------------

  /// Multi-level tiling structure for CPU targets (Ansor `cpu_multi_level_tiling_structure`):
  /// one letter per tile level, `S` a level of every spatial loop, `R` a level of every
  /// reduction loop, outermost first. "SSRSRS" splits each spatial loop into 4 parts and each
  /// reduction loop into 2 and orders them S0 S1 R0 S2 R1 S3. The first two letters must be `S`
  /// for the fusion sketches (the consumer follows the tiling at level 1 or 2).
  std::string cpu_tiling_structure = "SSRSRS";
  /// Multi-level tiling structure for GPU targets (Ansor `gpu_multi_level_tiling_structure`):
  /// the first three spatial levels become blockIdx.x, vthread and threadIdx.x, so it must start
  /// with "SSS"; the spatial and reduction level counts must differ.
  std::string gpu_tiling_structure = "SSSRRSRS";
  /// GPU: also tile sums of products of fp16 / bf16 tensors for tensor cores (sketch rule
  /// TensorCoreTilingGpu, search/sketch.hpp), on sm_80 and later; and of float32 tensors, as
  /// TF32, when the target allows it (Target::tf32).
  bool gpu_tensor_cores = true;
  /// GPU (not in Ansor): the tensor-core sketches also copy the operands' tiles into shared
  /// memory for every step of the reduction's middle level at once (one copy, one barrier and
  /// one pipeline stage per middle-level tile of k rather than per instruction's 16), beside
  /// the sketches that copy one step at a time. Fast GEMMs take 32 or 64 of k per copy; one
  /// step of 16 leaves a barrier and a copy-group wait to every warp's few instructions.
  bool gpu_deep_k_tiles = true;
  /// GPU, sm_80 and later: how often the annotation rule DoubleBuffer (search/annotate.hpp)
  /// pipelines a loop that shared stages are computed at — their next tiles copied with cp.async
  /// while the current ones are used (lower/gpu.hpp, point 6). 0 never, 1 always.
  double gpu_double_buffer_probability = 0.5;
  /// GPU: the most stages (shared-memory slots per fetched array, 2 to ir::kMaxPipelineStages)
  /// of a loop DoubleBuffer pipelines; it draws the number uniformly from 2 to this. With s
  /// stages the copies of the next s - 1 iterations are in flight while one computes.
  int gpu_max_pipeline_stages = ir::kMaxPipelineStages;
  /// GPU: how often ThreadBind pads the rows of a shared stage that feeds a tensor-core tile
  /// (storage_align, so that a row's stride in 16-byte units is odd): the 8 rows an `ldmatrix`
  /// reads at once then fall in 8 different bank groups, where rows of 32 or 64 bytes share
  /// 4 or 2 of them (2- and 4-way bank conflicts). 0 never, 1 always.
  double gpu_pad_shared_probability = 1.0;
  /// GPU: of the tensor-core operands' shared copies drawn for padding, how often those whose
  /// rows are 32, 64 or 128 bytes and whose ldmatrix phases read consecutive rows are swizzled
  /// instead (storage_swizzle: the 16-byte units of 8 consecutive rows permuted, Hopper's
  /// layout): as free of bank conflicts without the padding's shared memory (a 64-byte row
  /// padded takes 80). 0 always pads, 1 swizzles wherever it can.
  double gpu_swizzle_shared_probability = 0.5;
  /// GPU: how often ThreadBind stores a tensor-core operand's shared copy lane-major
  /// (storage_permute, search/annotate.hpp): a lane's rows (columns) are a run of its register
  /// tile, so the 8 rows one `ldmatrix` phase reads are that run apart and share bank groups
  /// (2-, 4- or 8-way conflicts on A however padded), and B's columns of one instruction are
  /// not side by side (element-wise loads where a lane has several tiles along N). Stored
  /// lane-major, they are. The cost: a permuted innermost axis (B given as [K, N]) narrows the
  /// copy's vectors to the 4 bytes of a fragment's two columns. 0 never, 1 always.
  double gpu_lane_major_probability = 1.0;
  /// GPU: how often ThreadBind gives a shared-memory copy the widest vector its innermost
  /// extent and layout allow (16 bytes where they can), rather than one drawn uniformly from
  /// 1, 2, 4 and 8 lanes. A copy under 4 bytes cannot be asynchronous (cp.async copies 4, 8 or
  /// 16) and one of 4 takes four instructions where one of 16 takes one, so a uniform draw
  /// leaves most tensor-core programs with narrow or synchronous copies of one operand or
  /// both (8 of 10 sampled bf16 GEMMs). Ansor starts its copies at 1 lane and leaves the
  /// widths to mutation. 0 always draws uniformly, 1 always takes the widest.
  double gpu_widest_copy_probability = 0.9;
  /// GPU (not in Ansor): whether ThreadBind vectorizes the innermost loop of a stage that
  /// stores a thread's results (a tile's consumer): its run of consecutive outputs, 16 bytes
  /// at most, one vector store (the CUDA printer packs the values computed lane by lane).
  bool gpu_vector_stores = true;
  /// Whether to emit sketches with a `cache_write` (local accumulator) stage beside those
  /// without (Ansor rule AddCacheWrite). Off gives fewer, simpler sketches.
  bool enable_cache_write = true;
  /// Whether to emit rfactor sketches for reductions with more reduction than spatial
  /// parallelism (Ansor rule AddRfactor).
  bool enable_rfactor = true;
  /// loom addition: whether to emit the row-fused, vector-partial-sum sketch of memory-bound
  /// reductions (softmax, norms; rule MemoryBoundReduction).
  bool enable_memory_bound_reduction = true;
  /// loom addition: whether to emit sketches that pack the tile of a reused input into a
  /// contiguous buffer inside the tiled loop nest (rule PackReusedInput).
  bool enable_packing = true;

  // --- random annotation ---------------------------------------------------------------------

  /// Largest innermost split length FillTileSize may pick (Ansor `max_innermost_split_factor`).
  int max_innermost_split_factor = 64;
  /// Values for the `auto_unroll_max_step` pragma of stages with a reduction (Ansor CPU
  /// `cpu_auto_unroll_configs`); one is drawn uniformly per stage.
  std::vector<int> auto_unroll_candidates = {0, 16, 64, 512};
  /// The same for GPU targets (Ansor `gpu_auto_unroll_configs`).
  std::vector<int> gpu_auto_unroll_candidates = {0, 16, 64, 512, 1024};
  /// GPU: largest vthread extent of a multi-level-tiled stage (Ansor: warp size / 4).
  int max_vthread_extent = 8;
  /// GPU: threads per block drawn for stages that are not multi-level tiled (element-wise ops,
  /// row reductions), whose fused spatial loops are split into blockIdx.x and threadIdx.x.
  std::vector<int> gpu_thread_candidates = {32, 64, 128, 256, 512};
  /// Outer spatial loops of a root stage are fused and parallelized until their product exceeds
  /// `parallel_granularity * target.num_cores` (Ansor uses 16).
  int parallel_granularity = 16;
  /// Largest product of innermost spatial loops that is fused and vectorized (Ansor
  /// `max_vectorize_size`). 0 means the target's vector lanes for the stage's element type.
  int max_vectorize_size = 16;
  /// loom addition: the probability that the innermost loop of an untiled stage, when it is
  /// spatial and longer than `max_vectorize_size` (softmax's exp over a 1,024-long row), is split
  /// into an inner loop of 1, 2 or 4 times that size that is vectorized. Otherwise it stays
  /// scalar for LLVM's loop vectorizer, as in Ansor. Explicit vectors let the code generator use
  /// whole-register instructions, such as AVX-512's vscalefps in exp: the split took 25 % off a
  /// tuned softmax. 0 restores Ansor's rule.
  double long_loop_vectorize_probability = 0.75;
  /// loom addition: the probability that the innermost loop of a tiled stage, when it is
  /// spatial and longer than `max_vectorize_size` (up to lower::max_vectorized_extent), is
  /// vectorized whole; lowering cuts a length that is not a power of two into power-of-two
  /// vectors (lower::vectorize_loops). Otherwise it stays scalar for LLVM's loop vectorizer, as
  /// in Ansor. Such a tile (4 output channels x 56 columns of the
  /// NCHW conv) keeps its accumulators in registers across the reduction; the programs LLVM's
  /// vectorizer made of the scalar loop kept them in memory, and on the 2-thread Zen 4 VM the
  /// best of them ran at 0.77-0.79x oneDNN where a tuned program with such a tile ran at
  /// 0.92-0.95x (benchmarks/README.md, "The NCHW conv's register tile"). 0 restores Ansor's rule.
  double wide_vectorize_probability = 0.5;
  /// loom addition: let FillTileSize draw split lengths that do not divide the extent (lowering
  /// guards the tail). Ansor samples perfect tilings only; non-divisible lengths make prime and
  /// odd extents tileable.
  bool allow_non_divisible_tiles = false;
  /// With `allow_non_divisible_tiles`, the probability that one split is filled with free
  /// (possibly non-dividing) lengths instead of a perfect factorization.
  double non_divisible_probability = 0.25;
  /// loom addition: a split of an *awkward* extent (at least 16, with no multiple of 8 up to
  /// `max_innermost_split_factor` among its divisors, such as the primes 127 and 131 or
  /// 129 = 3 x 43) also draws free lengths with `non_divisible_probability` when
  /// `allow_non_divisible_tiles` is off. Perfect tilings of such an extent leave tiles of the
  /// whole extent or tiles that are no whole number of vectors; extents with such a divisor keep
  /// Ansor's perfect tilings.
  bool non_divisible_for_awkward_extents = true;
  /// The probability of free lengths for a split of an awkward extent (when
  /// `allow_non_divisible_tiles` is off). Higher than `non_divisible_probability`: the perfect
  /// tilings of a prime are the extent in one length, rarely the best. On GEMM 127x131x129,
  /// hand schedules with free tiles of 8 rows x 48 columns ran 15 % faster than the best of 500
  /// programs tuned at 0.25, which rarely drew such tiles.
  double awkward_free_probability = 0.75;
  /// Skip Ansor's ChangeComputeLocation init rule (Ansor `disable_change_compute_location`).
  bool disable_change_compute_location = false;
  /// How many random draws `sample_program` makes before it gives up on a sketch: a draw is
  /// rejected when a step is illegal in the state it meets.
  int max_sample_attempts = 16;
};

/// An extent perfect tilings serve badly (SearchOptions::non_divisible_for_awkward_extents): at
/// least 16, and no multiple of 8 up to `max_innermost_split_factor` divides it.
inline bool awkward_extent(int64_t extent, int max_innermost_split_factor) {
  if (extent < 16) return false;
  for (int64_t d = 8; d <= max_innermost_split_factor; d += 8)
    if (extent % d == 0) return false;
  return true;
}

/// Whether free split lengths waste at most an eighth of the work: the tiles of a split whose
/// inner lengths multiply to P cover ceil(extent / P) * P iterations (the last tile is clamped
/// or guarded, so its excess is computed or at least visited). Free draws are redrawn until
/// they pass (annotate.ipp, mutate.ipp): uniform lengths otherwise often cover nearly twice
/// the extent, e.g. 129 columns in two tiles of 128.
inline bool low_waste_tiling(int64_t extent, const std::vector<int64_t>& lengths) {
  int64_t product = 1;
  for (int64_t l : lengths) product *= std::max<int64_t>(l, 1);
  const int64_t covered = (extent + product - 1) / product * product;
  return covered * 8 <= extent * 9;
}

/// The largest free length the `j`-th of `lengths` may take: what the inner lengths (after `j`)
/// leave of the extent, and at most `max_innermost` for the innermost one, so the tiles cover
/// less than twice the extent and the tails stay short. Sampling (annotate.ipp) and mutation
/// (mutate.ipp) draw free lengths within it.
inline int64_t free_length_cap(int64_t extent, const std::vector<int64_t>& lengths, size_t j,
                               int64_t max_innermost) {
  int64_t rest = extent;
  for (size_t k = lengths.size(); k-- > j + 1;)
    rest = (rest + std::max<int64_t>(lengths[k], 1) - 1) / std::max<int64_t>(lengths[k], 1);
  return std::max<int64_t>(1, j + 1 == lengths.size() ? std::min(rest, max_innermost) : rest);
}

}  // namespace search
LOOM_END_NAMESPACE

#endif  // LOOM_SEARCH_OPTIONS_HPP

/// \file
/// Tensor-core tiles (layer lower/): a loop of a GPU kernel marked `ForKind::Tensorized`, with the
/// loops inside it, is one warp-wide `mma.sync` matrix multiply-accumulate with fp32
/// accumulation: PTX m16n8k16 for fp16 or bf16 operands, m16n8k8 for float32 operands, which
/// run as TF32 (rounded to 10 mantissa bits, `cvt.rna.tf32.f32`; only on a target that allows
/// it, Target::tf32).
///
/// loom keeps its per-thread meaning of a schedule: the tile is the loop nest each thread runs,
///
///     for k in 0..16 (tensorized):  for h in 0..2:  for q in 0..2:
///       C[c(h, q)] = C[c(h, q)] + float(A[a(h, k)]) * float(B[b(q, k)])
///
/// (k in 0..8 and A[a(h, k)] * B[b(q, k)] for float32 operands)
/// with the h and q loops in either order, where C is the thread's own fp32 array (C's index uses
/// neither k nor the thread index) and, within each warp of 32 consecutive threadIdx.x, A's index
/// depends on the lane only through its bits 2-4 (g, 8 values) and not on q, B's only through
/// bits 0-1 (t, 4 values) and not on h. These are exactly the conditions under which the 32
/// lanes' loop nests are one m16n8k16 (m16n8k8) product: logical row g + 8h is the row of A lane
/// (g, *) reads for its h, logical column 2t + q the column of B lane (*, t) reads for its q, and
/// the product element (g + 8h, 2t + q) is where the hardware leaves it: in lane (g, t), register
/// 2h + q. Which physical rows and columns these are is the schedule's choice; a thread's rows
/// and columns are usually contiguous (its register tile), so its accumulators stay a compact
/// array. The conditions are checked on the index expressions at sampled values of every variable,
/// so any schedule that meets them is accepted, however it got there.
///
/// The accumulator array may hold at most `mma_accumulator_limit(threads)` elements: a tile
/// whose accumulators spill to local memory runs slower than SIMT code, and a thread's registers
/// are 255 at most and the block's share of the 64 Ki-register file (mma_register_share: 64 at
/// 1024 threads, 128 at 448). ptxas compiling sampled ResNet convolution tiles for sm_90: 112
/// accumulators at 512 threads and 56 or 64 at 896 spilled; 56 at 128 threads took 80
/// registers; 112 at 448 threads, allowed by a share of 65536 / 448 before the share counted
/// the register file's quarters, put the accumulators in local memory (6.6 KB of spills).
///
/// The warp's 32 lanes must all run the tile: the block's x extent is a multiple of 32 and no
/// condition or loop bound around it depends on the thread index.
///
/// Operands in shared memory go to the registers with `ldmatrix` where its rows fit: a lane
/// gives the address of one row of 8 elements of an 8 x 8 matrix and receives, as the fragment
/// needs, elements of rows other lanes gave (A as stored; B transposed from its k-major rows,
/// or as stored when its columns run along k, B given as [N, K]). A lane's rows can be any
/// rows, so A and k-contiguous B load so for any register tile; B's columns must be 8
/// consecutive ones for the transposed load, which holds when a lane has one tile along N.
/// TF32 operands along k load so too, a 16-byte row being 4 float32 elements and each lane's 32
/// bits one element (rounded to TF32 after the load); TF32 B along its columns, whose
/// transpose would split elements, not.
/// The conditions are checked as the lane conditions, and the alignment proven
/// (ir::known_divisor). The emulation loads the registers the way ldmatrix does, from the rows
/// the lanes give, so a wrong row address is a wrong result there too.
///
/// The emulation (lower::emulate) does not round float32 operands to TF32: it checks which
/// elements meet, and a device's TF32 result differs from it (and from the interpreter) by the
/// operands' rounding, up to about 1e-3 relative per product.
///
/// Errors: `[loom.lower.E427]` a tensorized loop that is not such a tile (the message names the
/// condition that fails).
#ifndef LOOM_LOWER_MMA_HPP
#define LOOM_LOWER_MMA_HPP

#include "loom/ir/stmt.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

inline constexpr int64_t max_mma_accumulators = 128;

/// The registers a thread of a block of `threads_per_block` threads has: 255, or what the
/// register file leaves it in allocation units of 8. The file is four quarters of 16,384, one
/// per scheduler, and a block's warps are dealt out among them, so the quarter with the most
/// warps bounds every thread: ptxas (CUDA 13.0, sm_90, `__launch_bounds__(n, 1)`) caps 320 and
/// 384 threads at 168 registers, 448 and 512 at 128, 576 and 640 at 96, 704 and 768 at 80,
/// where the whole file shared out (65536 / n) would give 448 threads 144.
constexpr int64_t mma_register_share(int64_t threads_per_block) {
  if (threads_per_block <= 0) return 255;
  const int64_t warps = (threads_per_block + 31) / 32;
  const int64_t share = 16384 / (((warps + 3) / 4) * 32) / 8 * 8;
  return share < 255 ? share : 255;
}

/// The registers a lane running tiles needs beside its accumulators and fragments: addresses
/// and loop state.
inline constexpr int64_t mma_other_registers = 26;

/// The accumulators a thread of a block of `threads_per_block` threads may hold: its registers
/// less one A and one B fragment (6) and mma_other_registers, never above max_mma_accumulators.
constexpr int64_t mma_accumulator_limit(int64_t threads_per_block) {
  const int64_t limit = mma_register_share(threads_per_block) - 6 - mma_other_registers;
  return limit < max_mma_accumulators ? limit : max_mma_accumulators;
}

/// One tensorized loop, as the registers of the lane that runs it: every index below is an
/// expression in the kernel's thread index (and the loops around the tile).
struct MmaTile {
  /// The element type of A and B: float16 or bfloat16 (m16n8k16), or float32 (m16n8k8, TF32).
  ir::DType operand;
  /// The reduction length of the instruction: 16, or 8 for TF32.
  int k = 16;
  ir::Buffer a, b, c;
  /// The A elements lane holds: register r (0..3) packs two, index 0 in the low half (TF32: one
  /// each, index 0).
  std::array<std::array<ir::Expr, 2>, 4> a_index;
  /// The B elements: register r (0..1), two each (TF32: one).
  std::array<std::array<ir::Expr, 2>, 2> b_index;

  bool is_tf32() const { return operand == ir::DType::f32(); }
  /// Elements per A or B register: 2 (16-bit), 1 (TF32).
  int per_register() const { return is_tf32() ? 1 : 2; }
  /// The C elements of accumulator registers 0..3.
  std::array<ir::Expr, 4> c_index;
  /// `ldmatrix` (operands in shared memory, every logical 16-byte row of the tile's quarters
  /// contiguous and 16-byte aligned): the element whose address the lane gives. For A (`.x4`),
  /// lane l gives row l % 8 of quarter l / 8 (rows 8 (q % 2), columns w (q / 2) of the 16 x 16
  /// tile, w = 8; of the 16 x 8 TF32 tile, w = 4); for B, lane l gives row l % 8 of quarter
  /// (l / 8) % 2: with `b_transposed` (`.x2.trans`, 16-bit only, B stored along its columns) k
  /// row 8 q + l % 8, along the 8 columns, else (`.x2`, B stored along k, as a matmul with B
  /// transposed has it) column l % 8, along k from w q. Undefined where the operand is loaded
  /// element by element.
  ir::Expr a_row, b_row;
  bool b_transposed = false;

  /// The PTX instruction, e.g. "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32".
  std::string instruction() const;
  /// The element (row, column) of A (16 x 16), of B (16 x 8) or of C (16 x 8) that register
  /// `reg`, half `half` of lane `lane` holds (PTX ISA, "Matrix Fragments for mma.m16n8k16").
  static std::array<int, 2> a_element(int lane, int reg, int half);
  static std::array<int, 2> b_element(int lane, int reg, int half);
  static std::array<int, 2> c_element(int lane, int reg);
  /// The same for m16n8k8 with TF32 operands (A 16 x 8, B 8 x 8, one element a register; C as
  /// above).
  static std::array<int, 2> tf32_a_element(int lane, int reg);
  static std::array<int, 2> tf32_b_element(int lane, int reg);
};

/// The tile of `loop` (a Tensorized loop of a kernel body whose threadIdx.x is `thread_x`,
/// `block_x` threads wide). Throws loom::user_error `[loom.lower.E427]` when it is not one.
MmaTile match_mma(const ir::For& loop, const ir::Expr& thread_x, int64_t block_x,
                  const std::string& kernel);

/// The most registers a lane keeps one operand's fragments in across the loops of an MmaNest
/// (8 A fragments, 16 B fragments), and never more than its register share leaves beside its
/// accumulators and mma_other_registers: 127 at 128 accumulators and 256 threads, 6 (one
/// fragment each, nothing kept) at 96 and 512.
inline constexpr int64_t max_fragment_cache_registers = 32;

/// A tile with the loops around it that only it is inside (each loop's body is the next loop, the
/// last one's the Tensorized loop; constant bounds, serial or unrolled): a warp's register tile,
/// mt x nt instructions per k-step. An instruction's A fragment moves with only some of these
/// loops (M's, and k's where k is among them), B's with others, so a lane loads each fragment
/// once per value of the loops it moves with, not once per instruction, and keeps it in
/// registers while the loops it does not move with run: mt A and nt B fragments per k-step
/// rather than mt x nt of each, the shared-memory traffic of a warp tile (ldmatrix per
/// instruction, 768 bytes a 4096-flop instruction, is three times what an SM's shared memory
/// delivers while its tensor cores run).
///
/// An operand's fragments are loaded inside loops[0..depth), before loops[depth] (or before the
/// tile), once for each combination of the loops in `over` (those of loops[depth..] the
/// operand moves with) into `slots` slots; the tile reads slot `slot`. depth is the longest run
/// of outer loops the operand moves with (then every load is needed once), deeper where the
/// slots would take more registers than max_fragment_cache_registers allows (A's first).
struct MmaNest {
  struct Fragments {
    int depth = 0;
    std::vector<int> over;  ///< positions in `loops`, outermost first
    ir::Expr slot;          ///< in the variables of `over`: sum of (v - min) x stride
    int64_t slots = 1;
    /// B by ldmatrix two fragments a load (`.x4`) along loop v = loops[pair_loop] (an even
    /// number of values), loaded for v = min, min + 2, ...: the row lane l gives is fragment
    /// v + l / 16's row of lane l % 16 (of b_row), its registers 2 and 3 slot + 1's. v is the
    /// innermost loop of `over`, or, where keeping B across it would take too many registers,
    /// the loop B is loaded inside (then `slot` is (v - min) mod 2). Undefined: one fragment a
    /// load.
    ir::Expr pair_row;
    int pair_loop = -1;
  };
  std::vector<const ir::For*> loops;  ///< outermost first; empty when the head is the tile
  MmaTile tile;
  Fragments a, b;
};

/// The nest headed by `head` (the tile itself, or the outermost loop of a nest as above); none
/// when `head` heads no such nest. Throws as match_mma for a tile that is not one.
std::optional<MmaNest> match_mma_nest(const ir::For& head, const ir::Expr& thread_x,
                                      int64_t block_x, const std::string& kernel);

/// One operand of a warpgroup MMA as the instruction reads it from shared memory: a matrix
/// descriptor's layout (PTX ISA, "Matrix Descriptor Format" and the canonical layouts of
/// "Shared Memory Matrix Layout"; CUTLASS's GmmaDescriptor). Logical element (mn, k), mn the
/// row of A or the column of B and k along the reduction, of e bytes (2, or 4 for TF32), lies
/// at byte
///
///     swizzle(start + offset(mn, k))
///
/// of the buffer, where with T = 16 / e elements (16 bytes) and S = `swizzle` bytes:
///  - K-major, swizzled: (mn % 8) S + (mn / 8) sbo + e k (k < S / e: a row of S bytes);
///  - K-major, interleaved (S = 0): (mn % 8) 16 + (mn / 8) sbo + e (k % T) + (k / T) lbo;
///  - MN-major (16-bit only), swizzled: 2 (mn % (S / 2)) + (mn / (S / 2)) lbo + (k % 8) S +
///    (k / 8) sbo;
///  - MN-major, interleaved: 2 (mn % 8) + (mn / 8) sbo + (k % 8) 16 + (k / 8) lbo;
/// and swizzle(o) = o ^ (((o >> 7) mod (S / 16)) << 4), the address bits the hardware permutes
/// (sched::StorageSwizzleStep's layout), on the shared address itself: the buffer must start at
/// a multiple of 8 S bytes (1024 for S = 128), which the CUDA printer gives every buffer a
/// warpgroup MMA reads.
struct WgmmaOperand {
  ir::Buffer buffer;
  /// The element of `buffer` at logical (0, 0), in the variables around the instruction (the
  /// thread index only through its warpgroup, threadIdx.x / 128).
  ir::Expr start;
  int element_bytes = 2;     ///< 2 (fp16, bf16), or 4 (TF32, K-major only)
  bool mn_major = false;     ///< stored along M (N): B of a matmul given as [K, N] (transposed)
  int64_t swizzle = 0;       ///< 128, 64 or 32 bytes; 0 for interleaved core matrices
  int64_t lbo = 0, sbo = 0;  ///< the descriptor's leading and stride byte offsets

  /// offset(mn, k) above, in bytes (before the swizzle).
  int64_t offset(int64_t mn, int64_t k) const;
  /// The element of `buffer` that holds logical (mn, k), mn an expression (from `start`).
  ir::Expr element(const ir::Expr& mn, int64_t k) const;
  /// swizzle(o) above.
  int64_t swizzled(int64_t byte) const;
  ir::Expr swizzled(const ir::Expr& byte) const;
  /// The descriptor less its start address (bits 0-13, the shared address / 16): LBO / 16 in
  /// bits 16-29, SBO / 16 in bits 32-45, the layout type in bits 62-63 (1: 128-byte swizzle,
  /// 2: 64, 3: 32, 0: interleaved).
  uint64_t descriptor_bits() const;
  /// The layout a descriptor says (the inverse of descriptor_bits, `mn_major` as given): what
  /// the emulation reads the operand by.
  static WgmmaOperand from_descriptor(uint64_t bits, bool mn_major, int element_bytes = 2);
};

/// A warpgroup MMA (Hopper's `wgmma.mma_async`, sm_90a; Target::warpgroup_mma): the four
/// consecutive warps of a warpgroup (128 threads, threadIdx.x / 128) multiply a 64 x 16 tile
/// of A by a 16 x N tile of B (N = 8 ... 256, 16-bit operands, fp32 accumulators; 64 x 8 by
/// 8 x N for TF32, whose operands are K-major, B given as [N, K]), both read
/// from shared memory by descriptors, in one asynchronous instruction. loom finds it in an
/// MmaNest whose per-warp instructions are exactly such an instruction's: warp w of the
/// warpgroup computes logical rows 16 w ... 16 w + 15 of the 64, the nest's loop `n_loop`
/// steps along N by 8 columns (instruction j of the loop is columns 8 j ... 8 j + 7), the four
/// warps read the same columns, and A's and B's elements lie where a descriptor (WgmmaOperand)
/// says. Then the accumulators of thread (warp w, lane (g, t)) are the registers d[4 j + r] of
/// the instruction: row 16 w + g + 8 (r / 2), column 8 j + 2 t + r % 2, as the m16n8 C
/// fragments of the nest's instructions are. The other loops of the nest stay loops around
/// the instruction. Everything is checked on the index expressions at sampled values of every
/// variable, as match_mma checks a tile.
struct WgmmaNest {
  MmaNest nest;
  int n_loop = -1;  ///< position in nest.loops of the loop along N; -1: N = 8, no loop
  int64_t n = 8;
  WgmmaOperand a, b;
  /// C's index of register d[i], i = 0 ... n / 2 - 1, in the variables of the other loops.
  std::vector<ir::Expr> accumulators;

  /// The PTX instruction, e.g. "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16".
  std::string instruction() const;
};

/// The warpgroup MMA of `nest` (of a kernel whose block is `block_x` threads wide in x), or
/// none where its instructions are not one (its m16n8k16 instructions then run as they are).
std::optional<WgmmaNest> match_wgmma(const MmaNest& nest, const ir::Expr& thread_x,
                                     int64_t block_x);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/mma.ipp"
#endif

#endif  // LOOM_LOWER_MMA_HPP

/// \file
/// Layout rewrite of a constant input (layer sched/): Ansor's `RewriteLayout` with its
/// "rewrite for pre-transformed" option. A weight that never changes between calls is stored
/// once in the order in which a scheduled loop nest walks it, so the kernel streams through it
/// with unit stride instead of packing a tile on every call.
///
/// The new layout is read off the loop nest of the one stage that reads the input: every axis
/// of the input is indexed by one root loop of that stage (or a constant); each such loop was
/// split into tiles, and the packed tensor has one dimension per tile loop, in the stage's loop
/// order, except that the innermost tile (of extent > 1) of the input's last, contiguous axis
/// stays innermost unless the stage's innermost loop is vectorized and walks the input (an
/// NCHW convolution vectorized along the output channel: its OIHW weights end with that tile). For
/// C[i, j] = sum_k A[i, k] B[k, j] tiled as (j.0 k.0 j.1 k.1 j.2 ...), B becomes
/// B_packed[j.0][k.0][j.1][k.1][j.2], and C reads B_packed at the tile coordinates of (k, j); tiled
/// as (j.0 k.0 j.1 k.1), it becomes B_packed[j.0][k.0][k.1][j.1]. Tiles that do not divide the
/// extent are padded with zeros; lowering lets the last tile of a stage whose reads along that axis
/// are all of such padded inputs run past the end instead of shifting it back, so it reads one
/// whole packed tile.
///
/// The result is two computations: `transform` (input → packed input, run once per weight
/// value) and `dag`, the original computation with the packed input in the input's place among
/// the kernel arguments, and the schedule replayed on it. cpu::build_with_packed_input builds
/// both.
#ifndef LOOM_SCHED_LAYOUT_REWRITE_HPP
#define LOOM_SCHED_LAYOUT_REWRITE_HPP

#include "loom/sched/state.hpp"

#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

struct LayoutRewrite {
  /// Input → packed input: one placeholder (the original input), one output (the packed one).
  std::shared_ptr<const ComputeDAG> transform;
  /// The original computation reading the packed input; its arguments are the original ones
  /// with the packed input at the input's position.
  std::shared_ptr<const ComputeDAG> dag;
  /// The original schedule replayed on `dag` (without steps that concerned the input itself,
  /// such as a per-call packing cache_read, which the rewrite replaces).
  State state;
  /// The packed input's placeholder in `dag`; its name is the input's name + "_packed".
  ir::Tensor packed;
  /// Position of the input among the kernel arguments.
  int argument = -1;
};

/// Rewrites input `input` of `state`'s computation into the layout its reader's loop nest walks.
/// Throws loom::user_error `[loom.sched.E260]` if `input` is not an input of the computation,
/// `[loom.sched.E261]` if it is not read by exactly one computed stage (after removing a
/// per-call packing copy), `[loom.sched.E262]` if the reader indexes it with anything but its
/// own root loops and constants (each loop at most once), and `[loom.sched.E263]` if one of those
/// loops was fused and then split (a fused loop alone walks its parts in order, which is fine).
LayoutRewrite rewrite_layout(const State& state, const std::string& input);

}  // namespace sched
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/sched/impl/layout_rewrite.ipp"
#endif

#endif  // LOOM_SCHED_LAYOUT_REWRITE_HPP

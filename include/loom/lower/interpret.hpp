/// \file
/// The loop-nest interpreter (layer lower/): runs a lowered kernel (`ir::LoweredFunc`) on raw
/// buffers without any code generator. It is the second correctness oracle, beside the DAG
/// interpreter (dag/evaluate.hpp): lowering can be tested on machines without LLVM, and the loop
/// nest of a schedule can be checked independently of the backend that would compile it.
///
/// Semantics follow the IR contract (ir/node_kinds.hpp, ir/stmt.hpp) and the DAG interpreter:
/// - float32 arithmetic is rounded to float32 after every operation, float math calls the float
///   overloads, integers wrap at their width, and Select evaluates only the branch that is taken;
/// - `For` runs `var` over [min, min + extent), min and extent evaluated once on entry. Every
///   ForKind (Parallel, Vectorized, Unrolled, and the GPU bindings) runs serially, in order: that
///   is a legal schedule of a Parallel loop, whose iterations must be independent, but it cannot
///   reveal a race, and GPU code that relies on threads of a block running together (there is no
///   barrier in the IR) is beyond it;
/// - vector expressions (lanes > 1, built from Ramp and Broadcast) are evaluated lane by lane; a
///   vector Select is therefore lazy per lane, and a vector Store evaluates every lane's index and
///   value before it writes any of them (a vector store reads all its inputs first);
/// - `Allocate` makes an *uninitialised* buffer that lives for its body. The buffer is filled with
///   poison each time the Allocate is entered (quiet NaN for floats, bytes `interpret_poison_byte`
///   for integers and bools), so that code which reads an allocation before writing it produces
///   recognisably wrong results in tests instead of accidentally right ones;
/// - every Load and Store is bounds-checked against the buffer's element count.
///
/// The statement tree is compiled once into closures, with loop variables resolved to frame slots
/// and buffers to table slots, so the per-iteration cost is a few indirect calls per IR node.
///
/// Errors (loom::user_error):
/// - `[loom.lower.E401]` a Load or Store out of bounds; the message names the kernel, the buffer,
///   the flat index, the buffer's size, the lane of a vector access and the values of the
///   enclosing loop variables;
/// - `[loom.lower.E402]` an integer division or modulo by zero;
/// - `[loom.lower.E403]` the wrong number of argument pointers, or a null one;
/// - `[loom.lower.E404]` a malformed kernel: a variable used outside the loops that bind it, a
///   buffer that is neither an argument nor allocated around its use, arguments out of arg_index
///   order, or a node (TensorRead, Reduce) that lowering should have removed.
#ifndef LOOM_LOWER_INTERPRET_HPP
#define LOOM_LOWER_INTERPRET_HPP

#include "loom/ir/stmt.hpp"

#include <cstdint>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The byte that fills integer and bool allocations on entry to their Allocate (an int32 element
/// reads 0x5A5A5A5A). Float allocations hold quiet NaNs instead.
inline constexpr uint8_t interpret_poison_byte = 0x5A;

/// Runs the kernel `f`. `args` holds one pointer per entry of `f.args`, in that order (which must
/// be arg_index order 0, 1, ...); each points to the buffer's elements, dense and row-major, of the
/// buffer's element type (bool: one byte per element). The kernel runs on the calling thread.
void interpret(const ir::LoweredFunc& f, const std::vector<void*>& args);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/interpret.ipp"
#endif

#endif  // LOOM_LOWER_INTERPRET_HPP

// Schedule-testing support for tests/unit/sched: small workloads, the end-to-end check of one
// schedule (lower it, run the loop nest with lower::interpret, compare with loom::evaluate on the
// DAG), and a generator of random legal schedules.
//
// Tolerance. Integer workloads must match exactly. float32 results may differ from the DAG
// interpreter only where a schedule reassociates a reduction (a reorder or fuse of reduce loops
// changes the summation order); every other float operation is rounded to float32 in both
// interpreters in the same order. The bound is |got - want| <= 1e-5 + 1e-5 * L * |want|, with L
// the longest reduction of the workload: the rounding error of a reassociated sum of L terms grows
// at most linearly in L.
#ifndef LOOM_TESTS_SUPPORT_RANDOM_SCHEDULE_HPP
#define LOOM_TESTS_SUPPORT_RANDOM_SCHEDULE_HPP

#include <loom/loom.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/lower.hpp>
#include <loom/sched/layout_rewrite.hpp>
#include <loom/sched/state.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/random.hpp"

namespace loom_test {

/// A small computation to schedule, with what the float tolerance needs to know.
struct workload {
  std::string name;
  std::shared_ptr<const loom::ComputeDAG> dag;
  int64_t reduction_length = 1;  ///< longest reduction (1 when there is none)
};

inline workload make_workload(std::string name, std::vector<loom::ir::Tensor> inputs,
                              std::vector<loom::ir::Tensor> outputs, int64_t reduction_length) {
  return {std::move(name),
          std::make_shared<const loom::ComputeDAG>(std::move(inputs), std::move(outputs)),
          reduction_length};
}

// --- workloads -----------------------------------------------------------------------------------

/// C = A * B (float32), shapes M x K times K x N.
inline workload matmul(int64_t M, int64_t N, int64_t K) {
  using namespace loom;
  auto A = placeholder<float>("A", {M, K});
  auto B = placeholder<float>("B", {K, N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return make_workload("matmul", {A, B}, {C}, K);
}

/// C = A * B with A and B of a 16-bit storage type T (float16 or bfloat16), summed in float32:
/// `sum(cast<float>(A) * cast<float>(B))`; with `store_half`, D = cast<T>(C * 0.5) is the
/// output too (stored, rounded to nearest even).
template <class T>
inline workload matmul_half(int64_t M, int64_t N, int64_t K, bool store_half = false) {
  using namespace loom;
  auto A = placeholder<T>("A", {M, K});
  auto B = placeholder<T>("B", {K, N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) {
    return sum(cast<float>(A(i, k)) * cast<float>(B(k, j)), k);
  });
  if (!store_half) return make_workload("matmul_" + ir::to_string(ir::dtype_v<T>), {A, B}, {C}, K);
  auto D = compute("D", {M, N}, [&](Var i, Var j) { return cast<T>(C(i, j) * 0.5f); });
  return make_workload("matmul_store_" + ir::to_string(ir::dtype_v<T>), {A, B}, {D}, K);
}

/// out[r] = Σ_j P[r, j] with P[r, c] = A[r] + B[c mod 64]: 16 rows of 2^24 columns, so that P
/// takes 1 GiB at the root and 64 MiB per row, while the inputs and the output are tiny (the
/// out-of-memory tests: a process limited to less cannot allocate P, and no memory it already
/// holds is that large). With P inlined nothing is allocated.
inline workload oversized_intermediate() {
  using namespace loom;
  const int64_t rows = 16, cols = int64_t{1} << 24;
  auto A = placeholder<float>("A", {rows});
  auto B = placeholder<float>("B", {64});
  auto j = reduce_axis(cols, "j");
  auto P = compute("P", {rows, cols}, [&](Var r, Var c) { return A(r) + B(floormod(c, 64)); });
  auto out = compute("out", {rows}, [&](Var r) { return sum(P(r, j), j); });
  return make_workload("oversized_intermediate", {A, B}, {out}, cols);
}

/// C = A * B on int32 (exact comparisons; wrapping is the same in both interpreters).
inline workload matmul_i32(int64_t M, int64_t N, int64_t K) {
  using namespace loom;
  auto A = placeholder<int32_t>("A", {M, K});
  auto B = placeholder<int32_t>("B", {K, N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  return make_workload("matmul_i32", {A, B}, {C}, K);
}

/// D = relu(A * B + bias): a reduction feeding an element-wise consumer.
inline workload matmul_bias_relu(int64_t M, int64_t N, int64_t K) {
  using namespace loom;
  auto A = placeholder<float>("A", {M, K});
  auto B = placeholder<float>("B", {K, N});
  auto bias = placeholder<float>("bias", {N});
  auto k = reduce_axis(K, "k");
  auto C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
  auto D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); });
  return make_workload("matmul_bias_relu", {A, B, bias}, {D}, K);
}

/// NCHW conv2d with zero padding written as an if_then_else stage, then relu:
/// X 1 x C x H x W, weights F x C x R x R.
inline workload conv2d(int64_t C, int64_t H, int64_t W, int64_t F, int64_t R, int64_t pad,
                       int64_t stride) {
  using namespace loom;
  const int64_t OH = (H + 2 * pad - R) / stride + 1, OW = (W + 2 * pad - R) / stride + 1;
  auto X = placeholder<float>("X", {1, C, H, W});
  auto Wt = placeholder<float>("W", {F, C, R, R});
  auto P = compute("pad", {1, C, H + 2 * pad, W + 2 * pad}, [&](Var n, Var c, Var h, Var w) {
    return if_then_else(h >= pad && h < H + pad && w >= pad && w < W + pad,
                        X(n, c, h - pad, w - pad), 0.0f);
  });
  auto rc = reduce_axis(C, "rc"), ry = reduce_axis(R, "ry"), rx = reduce_axis(R, "rx");
  auto Y = compute("conv", {1, F, OH, OW}, [&](Var n, Var f, Var y, Var x) {
    return sum(P(n, rc, y * stride + ry, x * stride + rx) * Wt(f, rc, ry, rx), {rc, ry, rx});
  });
  auto Z = compute("relu", {1, F, OH, OW},
                   [&](Var n, Var f, Var y, Var x) { return max(Y(n, f, y, x), 0.0f); });
  return make_workload("conv2d", {X, Wt}, {Z}, C * R * R);
}

/// Depthwise conv (one 3x3 filter per channel) with padding 1.
inline workload depthwise(int64_t C, int64_t H, int64_t W) {
  using namespace loom;
  auto X = placeholder<float>("X", {1, C, H, W});
  auto Wt = placeholder<float>("W", {C, 3, 3});
  auto P = compute("pad", {1, C, H + 2, W + 2}, [&](Var n, Var c, Var h, Var w) {
    return if_then_else(h >= 1 && h < H + 1 && w >= 1 && w < W + 1, X(n, c, h - 1, w - 1), 0.0f);
  });
  auto ry = reduce_axis(3, "ry"), rx = reduce_axis(3, "rx");
  auto Y = compute("dw", {1, C, H, W}, [&](Var n, Var c, Var y, Var x) {
    return sum(P(n, c, y + ry, x + rx) * Wt(c, ry, rx), {ry, rx});
  });
  return make_workload("depthwise", {X, Wt}, {Y}, 9);
}

/// Row softmax as its four stages: row max, exp, row sum, divide.
inline workload softmax(int64_t M, int64_t N) {
  using namespace loom;
  auto X = placeholder<float>("X", {M, N});
  auto k = reduce_axis(N, "k");
  auto mx = compute("rmax", {M}, [&](Var i) { return max(X(i, k), k); });
  auto e = compute("exp", {M, N}, [&](Var i, Var j) { return exp(X(i, j) - mx(i)); });
  auto k2 = reduce_axis(N, "k2");
  auto s = compute("rsum", {M}, [&](Var i) { return sum(e(i, k2), k2); });
  auto out = compute("softmax", {M, N}, [&](Var i, Var j) { return e(i, j) / s(i); });
  return make_workload("softmax", {X}, {out}, N);
}

/// R(i) = sum_k X(i, k).
inline workload row_sum(int64_t M, int64_t N) {
  using namespace loom;
  auto X = placeholder<float>("X", {M, N});
  auto k = reduce_axis(N, "k");
  auto R = compute("R", {M}, [&](Var i) { return sum(X(i, k), k); });
  return make_workload("row_sum", {X}, {R}, N);
}

/// An element-wise chain of four stages on int32 (exact).
inline workload elementwise_chain(int64_t M, int64_t N) {
  using namespace loom;
  auto X = placeholder<int32_t>("X", {M, N});
  auto Y = placeholder<int32_t>("Y", {M, N});
  auto a = compute("a", {M, N}, [&](Var i, Var j) { return X(i, j) * 3 + Y(i, j); });
  auto b = compute("b", {M, N}, [&](Var i, Var j) { return max(a(i, j), 0) - Y(i, j); });
  auto c = compute("c", {M, N}, [&](Var i, Var j) { return b(i, j) * a(i, j) + X(i, j); });
  return make_workload("elementwise_chain", {X, Y}, {c}, 1);
}

// --- running a schedule --------------------------------------------------------------------------

/// The bytes of one kernel argument.
struct tensor_data {
  loom::ir::DType dtype;
  int64_t elements = 0;
  std::vector<unsigned char> bytes;
  void* data() { return bytes.data(); }
};

inline tensor_data random_tensor(const loom::ir::Tensor& t, uint32_t seed) {
  tensor_data d{t.dtype(), 1, {}};
  for (int64_t s : t.shape()) d.elements *= s;
  auto fill = [&](const auto& v) {
    d.bytes.resize(v.size() * sizeof(v[0]));
    std::memcpy(d.bytes.data(), v.data(), d.bytes.size());
  };
  const loom::ir::DType f32 = loom::ir::DType::f32(), f64 = loom::ir::DType::f64(),
                        i32 = loom::ir::DType::i32();
  if (d.dtype.is_16bit_float()) {  // random representable values: floats rounded
    std::vector<uint16_t> h;
    for (float x : random_vector<float>(d.elements, seed))
      h.push_back(d.dtype.is_bfloat() ? loom::bfloat16(x).bits : loom::float16(x).bits);
    fill(h);
  } else if (d.dtype == f32)
    fill(random_vector<float>(d.elements, seed));
  else if (d.dtype == f64)
    fill(random_vector<double>(d.elements, seed));
  else if (d.dtype == i32)
    fill(random_vector<int32_t>(d.elements, seed, -20, 20));
  else
    fill(random_vector<int64_t>(d.elements, seed, -20, 20));
  return d;
}

/// Inputs of a workload and the outputs the DAG interpreter computes from them.
struct reference {
  std::vector<tensor_data> inputs, outputs;
};

inline reference make_reference(const workload& w, uint32_t seed) {
  reference r;
  std::vector<void*> ptrs;
  for (size_t i = 0; i < w.dag->inputs().size(); ++i) {
    r.inputs.push_back(random_tensor(w.dag->inputs()[i], seed + static_cast<uint32_t>(i)));
    ptrs.push_back(r.inputs.back().data());
  }
  for (auto& t : w.dag->outputs()) {
    r.outputs.push_back(random_tensor(t, 0));
    std::fill(r.outputs.back().bytes.begin(), r.outputs.back().bytes.end(), 0);
  }
  for (auto& o : r.outputs) ptrs.push_back(o.data());
  loom::evaluate(*w.dag, ptrs);
  return r;
}

/// The outcome of one end-to-end check; `message` says what went wrong.
struct check_result {
  bool ok = true;
  /// lower() refused the state with a documented user_error ([loom.lower.E41x]: a sketch, or a
  /// stage computed where its consumer cannot see it); `ok` is false and `message` holds it.
  bool rejected_by_lower = false;
  std::string message;
};

template <class T>
bool compare_values(const tensor_data& got, const tensor_data& want, double tol_len,
                    std::string& message) {
  const T* g = reinterpret_cast<const T*>(got.bytes.data());
  const T* w = reinterpret_cast<const T*>(want.bytes.data());
  for (int64_t i = 0; i < want.elements; ++i) {
    bool ok;
    if constexpr (loom::is_half_v<T>) {
      // A float32 sum rounded to 16 bits: summed in another order, it may round to the
      // neighbouring value, an ulp away (2^-7 of the value for bfloat16, 2^-10 for float16).
      const double ulp = std::is_same_v<T, loom::bfloat16> ? 0x1p-7 : 0x1p-10;
      const double gv = static_cast<float>(g[i]), wv = static_cast<float>(w[i]);
      ok = std::abs(gv - wv) <= 1e-5 + (1e-5 * tol_len + ulp) * std::abs(wv);  // NaN fails
    } else if constexpr (std::is_floating_point_v<T>) {
      double d = std::abs(static_cast<double>(g[i]) - static_cast<double>(w[i]));
      ok = d <= 1e-5 + 1e-5 * tol_len * std::abs(static_cast<double>(w[i]));  // NaN fails
    } else {
      ok = g[i] == w[i];
    }
    if (!ok) {
      std::ostringstream os;
      if constexpr (loom::is_half_v<T>)
        os << "element " << i << ": got " << static_cast<float>(g[i]) << ", expected "
           << static_cast<float>(w[i]);
      else
        os << "element " << i << ": got " << g[i] << ", expected " << w[i];
      message = os.str();
      return false;
    }
  }
  return true;
}

/// Lowers `state`, runs it with the loop-nest interpreter on the reference inputs and compares
/// every output with the DAG interpreter's. Output buffers start as poison (NaN, 0x5A5A5A5A) so
/// that an element the kernel never writes is caught.
/// How a lowered kernel is run: the loop-nest interpreter by default, the JIT in tests/jit.
using kernel_runner = std::function<void(const loom::ir::LoweredFunc&, std::vector<void*>&)>;

inline void interpret_runner(const loom::ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  loom::lower::interpret(f, ptrs);
}

inline check_result run_and_compare(const workload& w, const reference& ref,
                                    const loom::sched::State& state,
                                    const kernel_runner& run = interpret_runner) {
  check_result res;
  std::vector<tensor_data> outs = ref.outputs;
  for (auto& o : outs) {
    if (o.dtype.is_16bit_float())
      for (int64_t i = 0; i < o.elements; ++i) reinterpret_cast<uint16_t*>(o.data())[i] = 0x7fff;
    else if (o.dtype.is_float() && o.dtype.bits == 32)
      for (int64_t i = 0; i < o.elements; ++i) reinterpret_cast<float*>(o.data())[i] = NAN;
    else if (o.dtype.is_float())
      for (int64_t i = 0; i < o.elements; ++i) reinterpret_cast<double*>(o.data())[i] = NAN;
    else
      std::fill(o.bytes.begin(), o.bytes.end(), 0x5A);
  }
  std::vector<void*> ptrs;
  std::vector<tensor_data> ins = ref.inputs;  // a broken kernel could write its inputs
  for (auto& i : ins) ptrs.push_back(i.data());
  for (auto& o : outs) ptrs.push_back(o.data());
  loom::ir::LoweredFunc f;
  try {
    f = loom::lower::lower(state, w.name);
  } catch (const loom::user_error& e) {
    res.ok = false;
    res.rejected_by_lower = std::string(e.what()).rfind("[loom.lower.E41", 0) == 0;
    res.message = std::string("lowering threw: ") + e.what();
    return res;
  } catch (const std::exception& e) {
    res.ok = false;
    res.message = std::string("lowering threw: ") + e.what();
    return res;
  }
  try {
    run(f, ptrs);
  } catch (const std::exception& e) {
    res.ok = false;
    res.message = std::string("running the loop nest threw: ") + e.what();
    return res;
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    std::string msg;
    const auto& dt = outs[o].dtype;
    bool ok = dt == loom::ir::DType::f32()
                  ? compare_values<float>(outs[o], ref.outputs[o],
                                          static_cast<double>(w.reduction_length), msg)
              : dt == loom::ir::DType::f64()
                  ? compare_values<double>(outs[o], ref.outputs[o],
                                           static_cast<double>(w.reduction_length), msg)
              : dt == loom::ir::DType::bf16()
                  ? compare_values<loom::bfloat16>(outs[o], ref.outputs[o],
                                                   static_cast<double>(w.reduction_length), msg)
              : dt == loom::ir::DType::f16()
                  ? compare_values<loom::float16>(outs[o], ref.outputs[o],
                                                  static_cast<double>(w.reduction_length), msg)
              : dt == loom::ir::DType::i32()
                  ? compare_values<int32_t>(outs[o], ref.outputs[o], 0, msg)
                  : compare_values<int64_t>(outs[o], ref.outputs[o], 0, msg);
    if (!ok) {
      res.ok = false;
      res.message = "output '" + w.dag->outputs()[o].name() + "' " + msg;
      return res;
    }
  }
  return res;
}

/// The workload and reference for a layout-rewritten schedule: the input at `rw.argument`
/// replaced by its packed form, computed from the reference input by the DAG interpreter
/// running `rw.transform`; the expected outputs stay the original ones.
inline std::pair<workload, reference> packed_reference(const workload& w, const reference& ref,
                                                       const loom::sched::LayoutRewrite& rw) {
  reference r = ref;
  tensor_data packed = random_tensor(rw.packed, 0);
  std::vector<void*> ptrs{r.inputs[rw.argument].data(), packed.data()};
  loom::evaluate(*rw.transform, ptrs);
  r.inputs[rw.argument] = std::move(packed);
  return {workload{w.name + " (packed " + rw.packed.name() + ")", rw.dag, w.reduction_length},
          std::move(r)};
}

// --- random legal schedules ----------------------------------------------------------------------

/// Counts of a random schedule's candidate steps.
struct random_schedule_stats {
  int applied = 0;   ///< steps the state accepted
  int rejected = 0;  ///< candidates that threw loom::user_error (illegal here)
};

/// A random integer in [0, n). mt19937's output is fixed by the standard, unlike the library's
/// distributions, so a seed means the same schedules on every platform.
inline int pick(std::mt19937& rng, int n) {
  return n <= 1 ? 0 : static_cast<int>(rng() % static_cast<uint32_t>(n));
}

/// A random split length for a loop of `extent`: small factors, non-divisors, the whole extent.
inline int64_t random_length(std::mt19937& rng, int64_t extent) {
  static const int64_t small[] = {1, 2, 3, 4, 5, 8};
  switch (pick(rng, 4)) {
    case 0: return extent;
    case 1: return 1 + pick(rng, static_cast<int>(std::max<int64_t>(extent, 1)));
    default: return small[pick(rng, 6)];
  }
}

/// What a random step is drawn for: a state and one of its computed stages.
struct random_step_context {
  const loom::sched::State& s;
  const loom::sched::Stage& st;
  std::vector<int> computed, all;  ///< stage indices: computed (not inlined), every stage
  int n;                           ///< st's leaf count
  int first_reduce;                ///< st's first reduce leaf, n when none
  loom::sched::IterKind kind_at(int p) const { return st.leaf(p).kind; }
};

/// One kind of random step: its weight (loop-structure steps are the most common, as in a real
/// search), the tag of the step it makes, and how it draws one (nothing when the stage has no
/// candidate; it may be illegal: the caller applies it and counts a loom::user_error as a
/// rejection).
struct random_step_kind {
  int weight;
  const char* tag;
  std::optional<loom::sched::Step> (*draw)(const random_step_context&, std::mt19937&);
};

/// The steps random_step draws and why the others are not drawn; a test checks that every step
/// of loom::sched::Step is in one list or the other.
inline const std::vector<random_step_kind>& random_step_kinds() {
  using namespace loom::sched;
  using context = random_step_context;
  using result = std::optional<Step>;
  static const std::vector<random_step_kind> kinds = {
      {5, SplitStep::tag,
       [](const context& c, std::mt19937& rng) -> result {  // one to three inner lengths
         if (c.n == 0) return std::nullopt;
         int p = pick(rng, c.n);
         int64_t extent = c.st.leaf(p).extent;
         std::vector<std::optional<int64_t>> lengths;
         int parts = 1 + (pick(rng, 4) == 0 ? 1 + pick(rng, 2) : 0);
         // Each length is drawn for what the outer lengths leave of the extent, so the loops
         // cover at most about twice the extent: independent draws could multiply to millions
         // of empty tail iterations and make one schedule take seconds to interpret.
         int64_t covered = 1;
         for (int i = 0; i < parts; ++i) {
           int64_t l = random_length(rng, (extent + covered - 1) / covered);
           covered *= l;
           lengths.emplace_back(l);
         }
         return SplitStep{c.st.name, p, extent, lengths};
       }},
      {2, ReorderStep::tag,
       [](const context& c, std::mt19937& rng) -> result {  // a permutation or one swap
         if (c.n < 2) return std::nullopt;
         std::vector<int> order(c.n);
         for (int i = 0; i < c.n; ++i) order[i] = i;
         if (pick(rng, 2)) {
           int p = pick(rng, c.n - 1);
           std::swap(order[p], order[p + 1]);
         } else {
           for (int i = c.n - 1; i > 0; --i) std::swap(order[i], order[pick(rng, i + 1)]);
         }
         return ReorderStep{c.st.name, order};
       }},
      {2, FuseStep::tag,
       [](const context& c, std::mt19937& rng) -> result {  // two or three adjacent loops
         if (c.n < 2) return std::nullopt;
         int cnt = std::min(c.n, 2 + pick(rng, 2));
         int p = pick(rng, c.n - cnt + 1);
         std::vector<int> iters;
         for (int i = 0; i < cnt; ++i) iters.push_back(p + i);
         return FuseStep{c.st.name, iters};
       }},
      {3, AnnotationStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         // parallel outer spatial, vectorize innermost spatial, unroll small
         if (c.n == 0) return std::nullopt;
         switch (pick(rng, 3)) {
           case 0:
             if (c.first_reduce == 0) return std::nullopt;
             return AnnotationStep{c.st.name, pick(rng, std::min(c.first_reduce, 2)),
                                   Annotation::Parallel};
           case 1:
             if (c.kind_at(c.n - 1) != IterKind::Spatial) return std::nullopt;
             return AnnotationStep{c.st.name, c.n - 1, Annotation::Vectorized};
           default: {
             int p = pick(rng, c.n);
             if (c.st.leaf(p).extent > 16) return std::nullopt;
             return AnnotationStep{c.st.name, p, Annotation::Unrolled};
           }
         }
       }},
      {3, ComputeAtStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         // a producer into its consumer, at a random level
         std::vector<int> cands;
         for (int i : c.computed)
           if (!c.s.stages()[i].is_output) cands.push_back(i);
         if (cands.empty()) return std::nullopt;
         int pi = cands[pick(rng, static_cast<int>(cands.size()))];
         auto cons = c.s.consumers(pi);
         if (cons.empty()) return std::nullopt;
         const Stage* t = &c.s.stages()[cons[pick(rng, static_cast<int>(cons.size()))]];
         // Sometimes a stage the consumer is computed inside (packing a tile once per outer
         // tile).
         while (t->location == ComputeLocation::At && pick(rng, 3) == 0)
           t = &c.s.stage(t->attach_stage);
         if (t->leaves.empty() || t->location == ComputeLocation::Inlined) return std::nullopt;
         return ComputeAtStep{c.s.stages()[pi].name, t->name,
                              pick(rng, static_cast<int>(t->leaves.size()))};
       }},
      {2, ComputeInlineStep::tag,
       [](const context& c, std::mt19937&) -> result {
         // legal for injective stages; reductions and outputs are rejected
         return ComputeInlineStep{c.st.name};
       }},
      {1, ComputeRootStep::tag,
       [](const context& c, std::mt19937&) -> result { return ComputeRootStep{c.st.name}; }},
      {1, CacheWriteStep::tag,
       [](const context& c, std::mt19937&) -> result {
         // legal only before the stage is transformed
         return CacheWriteStep{c.st.name, loom::ir::MemoryScope::Local};
       }},
      {1, CacheReadStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         // a tensor, by one stage that reads it directly
         const Stage& src = c.s.stages()[c.all[pick(rng, static_cast<int>(c.all.size()))]];
         if (!src.is_placeholder && src.location == ComputeLocation::Inlined) return std::nullopt;
         std::vector<std::string> readers;
         for (auto& o : c.s.stages()) {
           if (o.is_placeholder || o.location == ComputeLocation::Inlined) continue;
           bool reads = false;
           loom::ir::post_order_visit(o.op->body, [&](const loom::ir::Expr& e) {
             if (auto* tr = e.as<loom::ir::TensorRead>())
               reads = reads || c.s.stage_of(tr->tensor.get()) == c.s.stage_index(src.name);
           });
           if (reads) readers.push_back(o.name);
         }
         if (readers.empty()) return std::nullopt;
         return CacheReadStep{src.name,
                              loom::ir::MemoryScope::Local,
                              {readers[pick(rng, static_cast<int>(readers.size()))]}};
       }},
      {1, PragmaStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         static const int steps[] = {0, 4, 16, 64};
         return PragmaStep{c.st.name, 0, steps[pick(rng, 4)]};
       }},
      {1, StorageAlignStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         if (c.st.op.rank() < 2) return std::nullopt;
         int64_t factor = int64_t{1} << (1 + pick(rng, 3));
         return StorageAlignStep{c.st.name, pick(rng, c.st.op.rank() - 1), factor,
                                 pick(rng, static_cast<int>(factor))};
       }},
      {1, StoragePermuteStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         return StoragePermuteStep{c.st.name, pick(rng, c.st.op.rank()), int64_t{1} << pick(rng, 4),
                                   1 + pick(rng, 3), int64_t{1} << pick(rng, 2)};
       }},
      {1, StorageSwizzleStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         return StorageSwizzleStep{c.st.name, int64_t{32} << pick(rng, 3)};
       }},
      {1, StorageChunkStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         return StorageChunkStep{c.st.name, int64_t{32} << pick(rng, 3)};
       }},
      {1, RfactorStep::tag,
       [](const context& c, std::mt19937& rng) -> result {
         // a reduction loop (legal only before the spatial loops change)
         if (c.first_reduce == c.n) return std::nullopt;
         int p = c.first_reduce + pick(rng, c.n - c.first_reduce);
         return RfactorStep{c.st.name, p, pick(rng, c.st.num_spatial_axes + 1)};
       }},
  };
  return kinds;
}

/// Steps random_step never draws, each with the reason.
inline const std::vector<std::pair<std::string, std::string>>& steps_not_drawn() {
  static const std::vector<std::pair<std::string, std::string>> not_drawn = {
      {loom::sched::FollowSplitStep::tag,
       "follows an earlier split step's lengths; the sketch rules make it (tests/unit/search)"},
      {loom::sched::FollowFusedSplitStep::tag,
       "follows several earlier split steps (GPU cooperative fetch); the GPU sketch rules make it"},
  };
  return not_drawn;
}

/// One random candidate step for `s`, or nothing when the drawn kind has no candidate. It may be
/// illegal: the caller applies it and counts a loom::user_error as a rejection.
inline std::optional<loom::sched::Step> random_step(const loom::sched::State& s,
                                                    std::mt19937& rng) {
  using namespace loom::sched;
  std::vector<int> computed, all;
  for (size_t i = 0; i < s.stages().size(); ++i) {
    const Stage& st = s.stages()[i];
    all.push_back(static_cast<int>(i));
    if (!st.is_placeholder && st.location != ComputeLocation::Inlined)
      computed.push_back(static_cast<int>(i));
  }
  if (computed.empty()) return std::nullopt;
  const Stage& st = s.stages()[computed[pick(rng, static_cast<int>(computed.size()))]];
  const int n = static_cast<int>(st.leaves.size());
  int first_reduce = n;
  for (int p = n; p-- > 0;)
    if (st.leaf(p).kind == IterKind::Reduce) first_reduce = p;
  const random_step_context context{s, st, std::move(computed), std::move(all), n, first_reduce};
  const auto& kinds = random_step_kinds();
  int total = 0;
  for (const random_step_kind& k : kinds) total += k.weight;
  int r = pick(rng, total);
  size_t k = 0;
  while (r >= kinds[k].weight) r -= kinds[k++].weight;
  return kinds[k].draw(context, rng);
}

/// Whether stage `st` is computed inside stage `target`, directly or through other stages.
inline bool computed_inside(const loom::sched::State& s, const loom::sched::Stage& st,
                            const std::string& target) {
  const loom::sched::Stage* cur = &st;
  while (cur->location == loom::sched::ComputeLocation::At) {
    if (cur->attach_stage == target) return true;
    cur = &s.stage(cur->attach_stage);
  }
  return false;
}

/// Why a legal state cannot be checked end to end because of a known bug in sched/ or lower/,
/// or "" when it can. The bugs this used to list (cache_read by the stage a producer is computed
/// inside, nested vectorized loops) are fixed; it stays as the place to park the next one.
inline std::string known_bug(const loom::sched::State&) { return ""; }

/// A random schedule of `dag`: `num_candidates` random candidate steps, the illegal ones
/// rejected (the state is unchanged after a rejected step).
inline loom::sched::State random_schedule(const std::shared_ptr<const loom::ComputeDAG>& dag,
                                          std::mt19937& rng, int num_candidates,
                                          random_schedule_stats& stats) {
  loom::sched::State s(dag);
  for (int c = 0; c < num_candidates; ++c) {
    auto step = random_step(s, rng);
    if (!step) continue;
    try {
      s.apply(*step);
      ++stats.applied;
    } catch (const loom::user_error&) {
      ++stats.rejected;
    }
  }
  return s;
}

}  // namespace loom_test

#endif  // LOOM_TESTS_SUPPORT_RANDOM_SCHEDULE_HPP

// A hand-written tensor-core schedule of a matmul C[M, N] = sum_k float(A[M, K]) float(B[K, N])
// (A, B float16 or bfloat16; or float32, as TF32), the form lower/mma.hpp recognises: per warp,
// lane (g, t) owns a register tile of 2*mt rows (from row g of the warp's rows) and 2*nt
// columns, accumulated in a local array, one m16n8k16 instruction per (mt, nt, 16-step of k)
// (m16n8k8 and 8-steps for TF32).
#pragma once

#include <loom/loom.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/lower/mma.hpp>

#include "support/random_schedule.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace loom_test {

/// C = sum_k float(A) float(B) in float32, A and B of a 16-bit float type T (matmul_half's DAG).
template <class T>
std::shared_ptr<const loom::ComputeDAG> half_matmul(int64_t m, int64_t n, int64_t k) {
  return matmul_half<T>(m, n, k).dag;
}

/// C = sum_k A B in float32 (ops::matmul), for TF32 tiles.
inline std::shared_ptr<const loom::ComputeDAG> float_matmul(int64_t m, int64_t n, int64_t k) {
  auto a = loom::placeholder<float>("A", {m, k});
  auto b = loom::placeholder<float>("B", {k, n});
  return std::make_shared<const loom::ComputeDAG>(
      std::vector<loom::ir::Tensor>{a, b}, std::vector<loom::ir::Tensor>{loom::ops::matmul(a, b)});
}

/// C = A B^T with B given as [N, K] (ops::matmul with trans_b), of T (16-bit, or float for
/// TF32): B's columns run along k.
template <class T>
std::shared_ptr<const loom::ComputeDAG> matmul_b_transposed(int64_t m, int64_t n, int64_t k) {
  auto a = loom::placeholder<T>("A", {m, k});
  auto b = loom::placeholder<T>("B", {n, k});
  return std::make_shared<const loom::ComputeDAG>(
      std::vector<loom::ir::Tensor>{a, b},
      std::vector<loom::ir::Tensor>{loom::ops::matmul(a, b, false, true)});
}

/// Output `c` of `s` through a thread-local accumulator ("<c>.local", returned) tiled as the
/// m16n8 fragments want: rows by block, warps_m warps, g (8 lanes) and the lane's 2 mt rows;
/// columns by block, warps_n warps, t (4 lanes) and the lane's 2 nt columns; the warps and
/// lanes fused into threadIdx.x (lane = g * 4 + t), the accumulator computed per thread.
inline std::string lane_tiled_output(loom::sched::State& s, const std::string& c, int64_t warps_m,
                                     int64_t mt, int64_t warps_n, int64_t nt) {
  using loom::sched::Annotation;
  const std::string local = s.cache_write(c, loom::ir::MemoryScope::Local);
  s.split(c, 0, {warps_m, 8, 2 * mt});     // i0 i1 i2 i3 j
  s.split(c, 4, {warps_n, 4, 2 * nt});     // i0 i1 i2 i3 j0 j1 j2 j3
  s.reorder(c, {0, 4, 1, 5, 2, 6, 3, 7});  // i0 j0 i1 j1 i2 j2 i3 j3
  s.fuse(c, {0, 1});                       // b i1 j1 i2 j2 i3 j3
  s.fuse(c, {1, 2, 3, 4});                 // b tx i3 j3: lane = i2 * 4 + j2
  s.annotate(c, 0, Annotation::BlockIdxX);
  s.annotate(c, 1, Annotation::ThreadIdxX);
  s.compute_at(local, c, 1);
  return local;
}

struct mma_tiling {
  int64_t warps_m = 1, warps_n = 2;  ///< warps of a block along M and N
  int64_t mt = 2, nt = 2;            ///< m16n8k16 tiles per warp along M and N
  bool shared = true;                ///< A and B through shared memory, one k-step of 16
  bool unroll = true;                ///< the mt / nt loops unrolled (accumulators in registers)
  int64_t k_step = 16;               ///< the instruction's k: 16, 8 for TF32 (float32 operands)
  int pipeline_stages = 0;           ///< the loop over k-steps keeps A and B (shared) in this
                                     ///< many slots (ir::pipeline_stages); 0: not pipelined
};

/// The schedule of the matmul computed by `dag`'s only output. M must be a multiple of warps_m * 16
/// * mt, N of warps_n * 8 * nt, K of k_step.
inline loom::sched::State tensor_core_matmul(std::shared_ptr<const loom::ComputeDAG> dag,
                                             const mma_tiling& t = {}) {
  using loom::sched::Annotation;
  const std::string c = dag->outputs()[0].name();
  loom::sched::State s(std::move(dag));
  const std::string local = lane_tiled_output(s, c, t.warps_m, t.mt, t.warps_n, t.nt);
  // The lane's tile: i = mt * 2 + h, j = nt * 2 + q, k = ko * k_step + kk.
  s.split(local, 0, {2});                // mt h j k
  s.split(local, 2, {2});                // mt h nt q k
  s.split(local, 4, {t.k_step});         // mt h nt q ko kk
  s.reorder(local, {4, 0, 2, 5, 1, 3});  // ko mt nt kk h q
  s.annotate(local, 3, Annotation::Tensorized);
  if (t.unroll) {
    s.annotate(local, 1, Annotation::Unrolled);
    s.annotate(local, 2, Annotation::Unrolled);
  }
  if (t.shared) {
    const int64_t threads = t.warps_m * t.warps_n * 32;
    for (const char* operand : {"A", "B"}) {
      const std::string sh = s.cache_read(operand, loom::ir::MemoryScope::Shared, {local});
      s.compute_at(sh, local, 0);  // the block's rows (columns) for one k-step
      s.fuse(sh, {0, 1});
      s.split(sh, 0, {threads});
      s.annotate(sh, 1, Annotation::ThreadIdxX);
    }
    if (t.pipeline_stages > 0) s.annotate(local, 0, loom::ir::pipelined_kind(t.pipeline_stages));
  }
  return s;
}

/// Runs `program` (of a half_matmul<T>(m, n, k) DAG, or float_matmul for T = float) with
/// `run(args)` on random operands and compares with the DAG interpreter; returns the first
/// mismatch, empty when all agree. Products of 16-bit values are exact in float32, so only the
/// order of the sums may differ; float operands are multiples of 1/256, which TF32 holds exactly,
/// so a TF32 program differs in the same way only.
template <class T, class Run>
std::string check_half_matmul(const loom::ComputeDAG& dag, int64_t m, int64_t n, int64_t k,
                              Run&& run, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> a, b;
  auto value = [&] {
    const float v = dist(rng);
    if constexpr (std::is_same_v<T, float>)
      return std::round(v * 256.0f) / 256.0f;
    else
      return T(v);
  };
  for (int64_t i = 0; i < m * k; ++i) a.push_back(value());
  for (int64_t i = 0; i < k * n; ++i) b.push_back(value());
  std::vector<float> want(m * n, NAN), got(m * n, NAN);
  loom::evaluate(dag, {a.data(), b.data(), want.data()});
  run(std::vector<void*>{a.data(), b.data(), got.data()});
  for (int64_t i = 0; i < m * n; ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-5f * k * (1 + std::abs(want[i])))) {
      std::ostringstream os;
      os << "element " << i << " (row " << i / n << ", column " << i % n << "): got " << got[i]
         << ", expected " << want[i];
      return os.str();
    }
  return "";
}

/// The tiles of the tensorized loops of `k` (loom::lower::match_mma), in program order.
inline std::vector<loom::lower::MmaTile> tiles_of(const loom::lower::GpuKernel& k) {
  std::vector<loom::lower::MmaTile> tiles;
  std::function<void(const loom::ir::Stmt&)> walk = [&](const loom::ir::Stmt& st) {
    if (auto* f = st.as<loom::ir::For>(); f && f->for_kind == loom::ir::ForKind::Tensorized) {
      tiles.push_back(loom::lower::match_mma(*f, k.thread_index[0], k.block[0], k.name));
      return;
    }
    if (auto* b = st.as<loom::ir::Block>())
      for (const loom::ir::Stmt& x : b->stmts) walk(x);
    else if (auto* f = st.as<loom::ir::For>())
      walk(f->body);
    else if (auto* a = st.as<loom::ir::Allocate>())
      walk(a->body);
    else if (auto* i = st.as<loom::ir::IfThenElse>())
      walk(i->then_case);
  };
  walk(k.body);
  return tiles;
}

struct warpgroup_tiling {
  int64_t groups = 1;       ///< warpgroups of a block, along M (64 rows each)
  int64_t nt = 8;           ///< m16n8k16 instructions per warp along N: the wgmma's N is 8 nt
  int64_t k_tile = 64;      ///< k of one shared copy: 64 (128-byte rows of A), 32 or 16
  bool swizzle = true;      ///< rows swizzled (past 128 bytes in chunks of 128), else as they are
  int pipeline_stages = 0;  ///< as mma_tiling's
  int64_t k_step = 16;      ///< the instruction's k: 16, 8 for TF32 (float32 operands, B [N, K])
};

/// A matmul schedule whose per-warp m16n8k16 instructions are a warpgroup MMA
/// (lower::WgmmaNest): the warps of a block all along M, 16 rows each (a lane's two rows g and
/// g + 8 of them, by A's copy stored lane-major), one warp tile of nt instructions along N
/// (B's copy lane-major along N, a lane's columns 8 j + 2 t + q), k_tile of k a copy. With
/// B given as [K, N] its copy is MN-major (rows of 2 nt 16-bit columns), as [N, K] K-major.
inline loom::sched::State warpgroup_matmul(std::shared_ptr<const loom::ComputeDAG> dag,
                                           const warpgroup_tiling& t = {},
                                           bool b_transposed = false) {
  using loom::sched::Annotation;
  const std::string c = dag->outputs()[0].name();
  loom::sched::State s(std::move(dag));
  const int64_t warps = 4 * t.groups;
  const std::string local = lane_tiled_output(s, c, warps, 1, 1, t.nt);
  s.split(local, 0, {2});                              // mt h j k
  s.split(local, 2, {2});                              // mt h nt q k
  s.split(local, 4, {t.k_tile / t.k_step, t.k_step});  // mt h nt q ko km kk
  s.reorder(local, {4, 5, 0, 2, 6, 1, 3});             // ko km mt nt kk h q
  s.annotate(local, 4, Annotation::Tensorized);
  s.annotate(local, 2, Annotation::Unrolled);
  s.annotate(local, 3, Annotation::Unrolled);
  const int64_t threads = warps * 32;
  for (const char* operand : {"A", "B"}) {
    const std::string sh = s.cache_read(operand, loom::ir::MemoryScope::Shared, {local});
    s.compute_at(sh, local, 0);
    const bool is_a = operand[0] == 'A';
    // A's rows (axis 0): lanes of 8 with 2 rows each; B's columns (axis 1, or 0 as [N, K]):
    // lanes of 4 with nt pairs each.
    if (is_a)
      s.storage_permute(sh, 0, 8, 2, 1);
    else
      s.storage_permute(sh, b_transposed ? 0 : 1, 4, t.nt, 2);
    if (t.swizzle) {
      // Rows past 128 bytes in chunks of 128 (storage_chunk), as ThreadBind stores them.
      const int64_t e = t.k_step == 8 ? 4 : 2;  // element bytes
      int64_t row = is_a || b_transposed ? t.k_tile * e : 8 * t.nt * e;
      if (row > 128 && row % 128 == 0) {
        s.storage_chunk(sh, 128);
        row = 128;
      }
      if (row == 32 || row == 64 || row == 128) s.storage_swizzle(sh, row);
    }
    s.fuse(sh, {0, 1});
    s.split(sh, 0, {threads});
    s.annotate(sh, 1, Annotation::ThreadIdxX);
  }
  if (t.pipeline_stages > 0) s.annotate(local, 0, loom::ir::pipelined_kind(t.pipeline_stages));
  return s;
}

/// What loom::user_error lower::lower_gpu throws for `s` on `target`; empty when it lowers.
inline std::string lowering_error(const loom::sched::State& s,
                                  const loom::Target& target = loom::Target::cuda()) {
  try {
    loom::lower::lower_gpu(s, target);
  } catch (const loom::user_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace loom_test

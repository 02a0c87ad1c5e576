// Warpgroup MMAs (lower::WgmmaNest, loom/lower/mma.hpp): hand-written matmul schedules whose
// warps stack along M, found as wgmma.mma_async instructions on sm_90a with the descriptor
// layouts their shared copies have, emulated by reading the operands through the descriptors
// and compared with the DAG interpreter; and the schedules that stay m16n8k16 instructions.
#include <doctest/doctest.h>
#include <loom/loom.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/mma.hpp>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "support/mma_schedule.hpp"

using namespace loom;
using loom::sched::State;

namespace {

// An H100's: sm_90a, 227 KiB of shared memory a block (cuda::device_target's opt-in limit).
const Target hopper = [] {
  Target t = Target::cuda("sm_90a");
  t.max_shared_memory_per_block = 227 * 1024;
  return t;
}();

// The warpgroup MMAs of the program's only kernel, in program order.
std::vector<lower::WgmmaNest> wgmmas_of(const lower::GpuKernel& k) {
  std::vector<lower::WgmmaNest> out;
  std::function<void(const ir::Stmt&)> walk = [&](const ir::Stmt& st) {
    if (auto* f = st.as<ir::For>()) {
      if (auto w = lower::kernel_wgmma(k, *f)) {
        out.push_back(*w);
        return;
      }
      walk(f->body);
    } else if (auto* b = st.as<ir::Block>()) {
      for (const ir::Stmt& x : b->stmts) walk(x);
    } else if (auto* a = st.as<ir::Allocate>()) {
      walk(a->body);
    } else if (auto* i = st.as<ir::IfThenElse>()) {
      walk(i->then_case);
    }
  };
  walk(k.body);
  return out;
}

template <class T>
std::string emulate_matmul(const State& s, int64_t M, int64_t N, int64_t K,
                           const Target& target = hopper) {
  const lower::GpuProgram p = lower::lower_gpu(s, target);
  return loom_test::check_half_matmul<T>(s.dag(), M, N, K,
                                         [&](std::vector<void*> args) { lower::emulate(p, args); });
}

}  // namespace

TEST_SUITE("lower.wgmma") {
  TEST_CASE("a descriptor's bits are its layout's, as CUTLASS's GmmaDescriptor packs them") {
    lower::WgmmaOperand o;
    o.swizzle = 128;
    o.lbo = 16;
    o.sbo = 1024;
    // LBO / 16 in bits 16-29, SBO / 16 in bits 32-45, layout type 1 (128-byte swizzle) in 62-63.
    CHECK(o.descriptor_bits() ==
          ((uint64_t{1} << 16) | (uint64_t{64} << 32) | (uint64_t{1} << 62)));
    for (int64_t swizzle : {128, 64, 32, 0}) {
      o.swizzle = swizzle;
      o.sbo = 512;
      o.lbo = 2048;
      const lower::WgmmaOperand d = lower::WgmmaOperand::from_descriptor(o.descriptor_bits(), true);
      CHECK(d.swizzle == swizzle);
      CHECK(d.lbo == 2048);
      CHECK(d.sbo == 512);
      CHECK(d.mn_major);
    }
    o.swizzle = 64;
    CHECK((o.descriptor_bits() >> 62) == 2);
    o.swizzle = 32;
    CHECK((o.descriptor_bits() >> 62) == 3);
  }

  TEST_CASE("the canonical layouts: K-major rows of the swizzle's width, MN-major columns") {
    lower::WgmmaOperand k;  // A [64, 64] bf16 in 128-byte rows, swizzled
    k.swizzle = 128;
    k.sbo = 1024;
    k.lbo = 16;
    CHECK(k.offset(0, 0) == 0);
    CHECK(k.offset(1, 0) == 128);
    CHECK(k.offset(9, 3) == 1024 + 128 + 6);
    // The 16-byte unit of row 1 holding k = 0 ... 7 is the second of its row.
    CHECK(k.swizzled(k.offset(1, 0)) == 128 + 16);
    CHECK(k.swizzled(k.offset(8, 0)) == 1024);
    lower::WgmmaOperand m;  // B [64 (k), 64 (n)] bf16, MN-major
    m.mn_major = true;
    m.swizzle = 128;
    m.sbo = 1024;
    m.lbo = 16;
    CHECK(m.offset(5, 0) == 10);
    CHECK(m.offset(0, 3) == 3 * 128);
    CHECK(m.offset(0, 9) == 1024 + 128);
  }

  TEST_CASE("warps stacked along M are one wgmma per k-step, read through the descriptors") {
    struct config {
      loom_test::warpgroup_tiling t;
      bool b_transposed;
      int64_t a_swizzle, b_swizzle;
    };
    // B [K, N] is MN-major: its rows are the 8 nt columns (128 bytes at nt = 8); as [N, K] it
    // is K-major like A, its rows k_tile long. The first matmul has 2 x 2 blocks (the
    // descriptors' starts move with the block), the others one, so that the emulation, which
    // runs every thread's wgmma element by element, stays quick (under the sanitizers too).
    bool first = true;
    for (const config& c :
         {config{{1, 8, 64, true, 0}, false, 128, 128},
          config{{2, 8, 64, true, 0}, false, 128, 128}, config{{1, 4, 32, true, 0}, false, 64, 64},
          config{{1, 2, 16, true, 0}, false, 32, 32}, config{{1, 8, 64, true, 0}, true, 128, 128},
          config{{1, 16, 32, true, 0}, true, 64, 64}, config{{1, 8, 64, true, 2}, false, 128, 128},
          // Rows past 128 bytes in chunks of 128: B [K, N] 128 and 256 columns wide (m64n128,
          // m64n256), A 128 of k.
          config{{1, 16, 64, true, 0}, false, 128, 128},
          config{{2, 32, 16, true, 2}, false, 32, 128},
          config{{1, 8, 128, true, 0}, false, 128, 128},
          config{{1, 8, 128, true, 0}, true, 128, 128}}) {
      CAPTURE(c.t.groups);
      CAPTURE(c.t.nt);
      CAPTURE(c.t.k_tile);
      CAPTURE(c.b_transposed);
      CAPTURE(c.t.pipeline_stages);
      const int64_t blocks = first ? 2 : 1;
      first = false;
      const int64_t M = 64 * c.t.groups * blocks, N = 8 * c.t.nt * blocks,
                    K = std::max(2, c.t.pipeline_stages) * c.t.k_tile;
      // fp16 where the tile is small: the emulation of the big ones takes seconds each.
      for (const bool bf : {true, false}) {
        if (!bf && c.t.nt * c.t.groups > 8) continue;
        auto dag = c.b_transposed ? (bf ? loom_test::matmul_b_transposed<bfloat16>(M, N, K)
                                        : loom_test::matmul_b_transposed<float16>(M, N, K))
                                  : (bf ? loom_test::half_matmul<bfloat16>(M, N, K)
                                        : loom_test::half_matmul<float16>(M, N, K));
        const State s = loom_test::warpgroup_matmul(dag, c.t, c.b_transposed);
        const lower::GpuProgram p = lower::lower_gpu(s, hopper);
        const std::vector<lower::WgmmaNest> w = wgmmas_of(p.kernels[0]);
        REQUIRE(w.size() == 1);
        CHECK(w[0].n == 8 * c.t.nt);
        CHECK(w[0].instruction() == "wgmma.mma_async.sync.aligned.m64n" +
                                        std::to_string(8 * c.t.nt) + "k16.f32." +
                                        (bf ? "bf16.bf16" : "f16.f16"));
        CHECK_FALSE(w[0].a.mn_major);
        CHECK(w[0].b.mn_major == !c.b_transposed);
        CHECK(w[0].a.swizzle == c.a_swizzle);
        CHECK(w[0].b.swizzle == c.b_swizzle);
        CHECK(w[0].accumulators.size() == static_cast<size_t>(4 * c.t.nt));
        CHECK(p.kernels[0].wgmma_operands.size() == 2);
        const std::string r =
            bf ? emulate_matmul<bfloat16>(s, M, N, K) : emulate_matmul<float16>(s, M, N, K);
        CHECK(r == "");
      }
    }
  }

  TEST_CASE("TF32 (float32 operands, B given as [N, K]) is wgmma m64nNk8, K-major both") {
    Target tf32 = hopper.with_tf32();
    struct config {
      loom_test::warpgroup_tiling t;
      int64_t swizzle;
    };
    // k_tile 32: rows of 128 bytes; 16: 64 bytes; 64: 256 bytes, in chunks of 128.
    for (const config& c :
         {config{{1, 8, 32, true, 0, 8}, 128}, config{{2, 16, 16, true, 2, 8}, 64},
          config{{1, 8, 64, true, 3, 8}, 128}}) {
      CAPTURE(c.t.k_tile);
      const int64_t M = 64 * c.t.groups, N = 8 * c.t.nt,
                    K = std::max(2, c.t.pipeline_stages) * c.t.k_tile;
      const auto dag = loom_test::matmul_b_transposed<float>(M, N, K);
      const State s = loom_test::warpgroup_matmul(dag, c.t, true);
      const lower::GpuProgram p = lower::lower_gpu(s, tf32);
      const std::vector<lower::WgmmaNest> w = wgmmas_of(p.kernels[0]);
      REQUIRE(w.size() == 1);
      CHECK(w[0].instruction() ==
            "wgmma.mma_async.sync.aligned.m64n" + std::to_string(8 * c.t.nt) + "k8.f32.tf32.tf32");
      CHECK(w[0].a.element_bytes == 4);
      CHECK(w[0].a.swizzle == c.swizzle);
      CHECK_FALSE(w[0].b.mn_major);
      CHECK(loom_test::check_half_matmul<float>(
                s.dag(), M, N, K, [&](std::vector<void*> args) { lower::emulate(p, args); }) == "");
    }
    // B given as [K, N] would be MN-major, which TF32 cannot read: m16n8k8 instructions.
    const auto kn = loom_test::float_matmul(128, 64, 64);
    const State s = loom_test::warpgroup_matmul(kn, {1, 8, 32, true, 0, 8});
    const lower::GpuProgram p = lower::lower_gpu(s, tf32);
    CHECK(wgmmas_of(p.kernels[0]).empty());
    CHECK(loom_test::check_half_matmul<float>(s.dag(), 128, 64, 64, [&](std::vector<void*> args) {
            lower::emulate(p, args);
          }) == "");
  }

  TEST_CASE("a wrong descriptor is a wrong result in the emulation") {
    // The emulation reads the operands where the descriptor says: an SBO off by one 8-row
    // group reads other rows of A.
    const auto dag = loom_test::half_matmul<bfloat16>(128, 64, 128);
    const State s = loom_test::warpgroup_matmul(dag, {1, 8, 64, true, 0});
    lower::GpuProgram p = lower::lower_gpu(s, hopper);
    REQUIRE(wgmmas_of(p.kernels[0]).size() == 1);
    const std::string right = loom_test::check_half_matmul<bfloat16>(
        s.dag(), 128, 64, 128, [&](std::vector<void*> args) { lower::emulate(p, args); });
    CHECK(right == "");
    lower::WgmmaNest w = wgmmas_of(p.kernels[0])[0];
    const lower::WgmmaOperand good = w.a;
    lower::WgmmaOperand bad = good;
    bad.sbo += 1024;
    // The layout function is what the descriptor says; a different SBO puts row 8 elsewhere.
    CHECK(bad.swizzled(bad.offset(8, 0)) != good.swizzled(good.offset(8, 0)));
  }

  TEST_CASE("tiles a wgmma cannot read stay m16n8k16 instructions, and sm_90 runs none") {
    // Unswizzled 128-byte rows are no canonical layout (an interleaved core matrix's rows are
    // 16 bytes apart); B [K, N] with rows of 256 bytes neither, unless in chunks; warps side by
    // side along N are no warpgroup. Each still computes the matmul.
    const auto dag = loom_test::half_matmul<bfloat16>(64, 128, 128);
    const State unswizzled = loom_test::warpgroup_matmul(dag, {1, 8, 64, false, 0});
    CHECK(lower::lower_gpu(unswizzled, hopper).kernels[0].wgmma_operands.empty());
    CHECK(emulate_matmul<bfloat16>(unswizzled, 64, 128, 128) == "");
    State wide = loom_test::warpgroup_matmul(dag, {1, 16, 64, false, 0});
    wide.storage_swizzle("A.shared", 128);
    wide.storage_swizzle("B.shared", 128);
    CHECK(lower::lower_gpu(wide, hopper).kernels[0].wgmma_operands.empty());
    CHECK(emulate_matmul<bfloat16>(wide, 64, 128, 128) == "");
    const State side_by_side = loom_test::tensor_core_matmul(dag, {2, 2, 1, 2, true, true});
    CHECK(lower::lower_gpu(side_by_side, hopper).kernels[0].wgmma_operands.empty());
    CHECK(emulate_matmul<bfloat16>(side_by_side, 64, 128, 128) == "");
    // The same warpgroup schedule on sm_90 (no "a"): m16n8k16 instructions.
    const State s = loom_test::warpgroup_matmul(dag, {1, 8, 64, true, 0});
    const lower::GpuProgram p = lower::lower_gpu(s, Target::cuda("sm_90"));
    CHECK_FALSE(p.kernels[0].warpgroup_mma);
    CHECK(wgmmas_of(p.kernels[0]).empty());
    CHECK(emulate_matmul<bfloat16>(s, 64, 128, 128, Target::cuda("sm_90")) == "");
  }
}

// The GPU search space (loom/search/sketch.hpp GPU rules, loom/search/annotate.hpp GPU init
// rules): the sketches of common workloads, thread binding and cooperative fetching, and the
// property that every program sampled for a CUDA target computes what the DAG computes when its
// kernels run on the CPU emulation of the GPU (loom/lower/gpu.hpp).
#include <doctest/doctest.h>

#include <loom/cost/model.hpp>
#include <loom/lower/gpu.hpp>
#include <loom/ops.hpp>
#include <loom/sched/default_schedule.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/evolution.hpp>
#include <loom/search/mutate.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/op_workloads.hpp"
#include <sstream>

#include "support/random_schedule.hpp"

using namespace loom;
using namespace loom_test::op_workloads;

namespace {

loom_test::workload gpu_matmul() {
  auto a = placeholder<float>("A", {64, 48});
  auto b = placeholder<float>("B", {48, 96});
  return make("matmul 64x96x48", {a, b}, {ops::matmul(a, b)}, 48);
}

loom_test::workload gpu_conv2d() {
  auto x = placeholder<float>("X", {1, 8, 10, 10});
  auto w = placeholder<float>("W", {16, 8, 3, 3});
  auto bias = placeholder<float>("bias", {16});
  auto y = ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias, 1));
  return make("conv2d+bias+relu 8->16 10x10 pad 1", {x, w, bias}, {y}, 72);
}

// Rows longer than a warp, of a rank-3 tensor: CrossThreadReduction's sketches, with the
// statistics computed per (batch, position) row inside the result.
loom_test::workload gpu_layer_norm_rows() {
  auto x = placeholder<float>("X", {2, 3, 70});
  auto g = placeholder<float>("gamma", {70});
  auto b = placeholder<float>("beta", {70});
  return make("layer_norm 2x3x70", {x, g, b}, {ops::layer_norm(x, g, b)}, 70);
}

loom_test::workload gpu_softmax_rows() {
  auto x = placeholder<float>("X", {3, 200});
  return make("softmax 3x200", {x}, {ops::softmax(x)}, 200);
}

std::vector<loom_test::workload> gpu_property_workloads() {
  return {gpu_matmul(),      gpu_conv2d(),    op_matmul(),  op_matmul_relu(),
          op_conv2d(),       op_depthwise(),  op_softmax(), op_softmax_long(),
          op_batch_matmul(), op_layer_norm(), op_matvec(),  gpu_layer_norm_rows(),
          gpu_softmax_rows()};
}

const sched::Stage* find_stage(const sched::State& s, const std::string& name) {
  for (const sched::Stage& st : s.stages())
    if (st.name == name) return &st;
  return nullptr;
}

// The stages of the state's pipelined loop (the most of any), 0 when there is none.
int pipeline_stages_of(const sched::State& s) {
  int stages = 0;
  for (const sched::Stage& st : s.stages())
    for (int leaf : st.leaves)
      stages = std::max(stages, ir::pipeline_stages(st.iters[leaf].annotation));
  return stages;
}

bool has_pipelined_loop(const sched::State& s) { return pipeline_stages_of(s) > 0; }

struct gpu_sample_stats {
  int sketches = 0, programs = 0, wrong = 0, pipelined = 0;
  int deep = 0;         // pipelined in 3 or 4 stages
  int unpipelined = 0;  // with a loop DoubleBuffer could have pipelined but did not
};

gpu_sample_stats check_gpu_samples(const loom_test::workload& w, uint64_t seed, int count,
                                   const search::SearchOptions& options = {},
                                   const Target& target = Target::cuda()) {
  gpu_sample_stats st;
  const Task task(w.dag, target);
  const auto sketches = search::generate_sketches(task, options);
  st.sketches = static_cast<int>(sketches.size());
  const auto ref = loom_test::make_reference(w, static_cast<uint32_t>(seed));
  std::mt19937_64 rng(seed);
  for (const sched::State& p : search::sample_programs(sketches, task, options, rng, count)) {
    ++st.programs;
    CHECK(sched::replay(w.dag, p.steps()).to_string() == p.to_string());
    const lower::GpuProgram g = lower::lower_gpu(p, task.target);
    auto r = loom_test::run_and_compare(
        w, ref, p,
        [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
    if (!r.ok) ++st.wrong;
    st.pipelined += has_pipelined_loop(p);
    st.deep += pipeline_stages_of(p) > 2;
    st.unpipelined += !search::double_buffer_candidates(p).empty();
    CHECK_MESSAGE(r.ok, w.name << ": " << r.message << "\n" << p.to_string());
  }
  MESSAGE(w.name << ": " << st.sketches << " GPU sketches, " << st.programs
                 << " programs emulated (" << st.pipelined << " pipelined, " << st.deep
                 << " of them in 3 or 4 stages), " << st.wrong << " wrong");
  return st;
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("sampled GPU programs of 16-bit matmuls emulate to the interpreter's result") {
    // bfloat16 and float16 operands summed in float32, with a bfloat16/float16 output too
    // (random_schedule.hpp's tolerance: one ulp more for 16-bit outputs). Zero wrong.
    int wrong = 0;
    wrong += check_gpu_samples(loom_test::matmul_half<bfloat16>(32, 48, 40), 3601, 40).wrong;
    wrong += check_gpu_samples(loom_test::matmul_half<bfloat16>(24, 32, 20, true), 3602, 30).wrong;
    wrong += check_gpu_samples(loom_test::matmul_half<float16>(16, 40, 24, true), 3603, 30).wrong;
    CHECK(wrong == 0);
  }

  TEST_CASE("sampled GPU programs of 16-bit convolutions emulate to the interpreter's result") {
    // A bfloat16 NCHW conv and a float16 NHWC one, padded: the pad stage selects in float32 and
    // rounds back to 16 bits, the products are float32. Zero wrong.
    auto x = placeholder<bfloat16>("x", {1, 8, 10, 10});
    auto w = placeholder<bfloat16>("w", {16, 8, 3, 3});
    const auto nchw = loom_test::make_workload("conv2d_nchw_bf16", {x, w},
                                               {ops::conv2d_nchw(x, w, {.padding = {1, 1}})}, 72);
    auto xh = placeholder<float16>("xh", {1, 10, 10, 8});
    auto wh = placeholder<float16>("wh", {3, 3, 8, 16});
    const auto nhwc = loom_test::make_workload("conv2d_nhwc_f16", {xh, wh},
                                               {ops::conv2d_nhwc(xh, wh, {.padding = {1, 1}})}, 72);
    int wrong = 0, checked = 0;
    for (const auto& [wl, seed] : {std::pair{nchw, 3701}, std::pair{nhwc, 3702}}) {
      const gpu_sample_stats st = check_gpu_samples(wl, seed, 20);
      wrong += st.wrong;
      checked += st.programs;
    }
    CHECK(checked >= 20);
    CHECK(wrong == 0);
  }

  TEST_CASE("DoubleBuffer pipelines the k loops of shared copies on sm_80+; samples stay right") {
    search::SearchOptions always;
    always.gpu_double_buffer_probability = 1;
    search::SearchOptions never;
    never.gpu_double_buffer_probability = 0;
    int wrong = 0;
    for (const auto& [w, seed] : {std::pair{gpu_matmul(), 3801}, std::pair{gpu_conv2d(), 3802},
                                  std::pair{loom_test::matmul_half<bfloat16>(32, 48, 64), 3803}}) {
      CAPTURE(w.name);
      // Every loop that could be pipelined is (a reduction loop of two or more steps that
      // shared copies are computed at; where the tiling left one step, none is).
      const gpu_sample_stats on = check_gpu_samples(w, seed, 16, always);
      CHECK(on.unpipelined == 0);
      CHECK(on.pipelined * 3 >= on.programs);
      CHECK(on.deep >= 1);
      wrong += on.wrong;
      search::SearchOptions double_only = always;
      double_only.gpu_max_pipeline_stages = 2;
      const gpu_sample_stats two = check_gpu_samples(w, seed, 8, double_only);
      CHECK(two.pipelined >= 1);
      CHECK(two.deep == 0);
      wrong += two.wrong;
      CHECK(check_gpu_samples(w, seed, 8, never).pipelined == 0);
      CHECK(check_gpu_samples(w, seed, 8, always, Target::cuda("sm_75")).pipelined == 0);
    }
    CHECK(wrong == 0);
  }

  TEST_CASE("MutateDoubleBuffer switches a loop's double buffering on and off") {
    const loom_test::workload w = gpu_matmul();
    const Task task(w.dag, Target::cuda());
    search::SearchOptions never;
    never.gpu_double_buffer_probability = 0;
    never.gpu_max_pipeline_stages = 2;  // on or off, nothing else
    const search::SketchContext ctx(task, never);
    const auto ref = loom_test::make_reference(w, 7);
    std::mt19937_64 rng(3811);
    int on = 0, off = 0;
    for (const sched::State& p :
         search::sample_programs(search::generate_sketches(task, never), task, never, rng, 8)) {
      const auto child = search::mutate_double_buffer(ctx, p, rng);
      if (search::double_buffer_candidates(p).empty()) {
        CHECK(!child);
        continue;
      }
      REQUIRE(child);
      CHECK(has_pipelined_loop(*child));
      ++on;
      // The only loop the matmul sketch can pipeline (its k loop of the shared copies) goes back.
      const auto back = search::mutate_double_buffer(ctx, *child, rng);
      REQUIRE(back);
      CHECK(!has_pipelined_loop(*back));
      ++off;
      for (const sched::State* s : {&*child, &*back}) {
        const lower::GpuProgram g = lower::lower_gpu(*s, task.target);
        auto r = loom_test::run_and_compare(
            w, ref, *s,
            [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
        CHECK_MESSAGE(r.ok, r.message << "\n" << s->to_string());
      }
      CHECK(!search::mutate_double_buffer(
          search::SketchContext(Task(w.dag, Target::cuda("sm_75")), never), p, rng));
    }
    CHECK(on >= 4);
    CHECK(off == on);
    CHECK(search::gpu_mutation_rules().back().name == "MutateDoubleBuffer");
  }

  TEST_CASE("MutateDoubleBuffer moves a pipelined loop to another number of stages or to none") {
    const loom_test::workload w = loom_test::matmul_half<bfloat16>(32, 48, 64);
    const Task task(w.dag, Target::cuda());
    search::SearchOptions always;
    always.gpu_double_buffer_probability = 1;
    const search::SketchContext ctx(task, always);
    const auto ref = loom_test::make_reference(w, 9);
    std::mt19937_64 rng(3821);
    std::set<std::pair<int, int>> moves;  // (stages before, after)
    for (const sched::State& p :
         search::sample_programs(search::generate_sketches(task, always), task, always, rng, 16)) {
      const int before = pipeline_stages_of(p);
      if (before == 0) continue;
      for (int tries = 0; tries < 12; ++tries) {
        const auto child = search::mutate_double_buffer(ctx, p, rng);
        REQUIRE(child);
        const int after = pipeline_stages_of(*child);
        if (search::double_buffer_candidates(p).empty()) CHECK(after != before);
        moves.insert({before, after});
        const lower::GpuProgram g = lower::lower_gpu(*child, task.target);
        auto r = loom_test::run_and_compare(
            w, ref, *child,
            [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
        CHECK_MESSAGE(r.ok, r.message << "\n" << child->to_string());
      }
    }
    std::string seen;
    for (const auto& [from, to] : moves)
      seen += std::to_string(from) + "->" + std::to_string(to) + " ";
    INFO(seen);
    // Off, and to each other number of stages, from some starting point.
    for (const int after : {0, 2, 3, 4}) {
      CAPTURE(after);
      CHECK(std::any_of(moves.begin(), moves.end(),
                        [&](const auto& m) { return m.second == after && m.first != after; }));
    }
  }

  TEST_CASE("a GPU matmul sketch: shared copies of A and B, a local accumulator, SSSRRSRS") {
    const loom_test::workload w = gpu_matmul();
    const auto sketches = search::generate_sketches(Task(w.dag, Target::cuda()));
    REQUIRE(sketches.size() == 1);
    const sched::State& s = sketches[0];
    INFO(s.to_string());
    const sched::Stage* local = find_stage(s, "matmul.local");
    const sched::Stage* a = find_stage(s, "A.shared");
    const sched::Stage* b = find_stage(s, "B.shared");
    REQUIRE((local && a && b));
    CHECK(local->location == sched::ComputeLocation::At);
    CHECK(local->attach_stage == "matmul");
    CHECK(a->attach_stage == "matmul.local");
    CHECK(b->attach_stage == "matmul.local");
    CHECK(a->scope == ir::MemoryScope::Shared);
    // 5 spatial levels of i and j, 3 reduction levels of k; C follows the first three.
    CHECK(local->leaves.size() == 2 * 5 + 3);
    CHECK(s.stage("matmul").leaves.size() == 2 * 4);
  }

  TEST_CASE("a GPU conv sketch inlines the padding into its shared copy") {
    const loom_test::workload w = gpu_conv2d();
    const auto sketches = search::generate_sketches(Task(w.dag, Target::cuda()));
    REQUIRE(sketches.size() == 1);
    const sched::State& s = sketches[0];
    INFO(s.to_string());
    int shared = 0;
    for (const sched::Stage& st : s.stages()) {
      if (st.scope == ir::MemoryScope::Shared) ++shared;
      // Element-wise stages are inlined; the output is the root of the fused nest.
      if (!st.is_placeholder && !st.is_output && st.scope == ir::MemoryScope::Global &&
          st.location == sched::ComputeLocation::Root)
        FAIL("stage " << st.name << " stays at the root");
    }
    CHECK(shared == 2);  // the padded input and the weights
  }

  TEST_CASE("ThreadBind binds block, vthread and thread levels and spreads shared copies") {
    const loom_test::workload w = gpu_matmul();
    const Task task(w.dag, Target::cuda());
    const auto sketches = search::generate_sketches(task);
    std::mt19937_64 rng(5);
    const auto programs = search::sample_programs(sketches, task, {}, rng, 20);
    REQUIRE(programs.size() >= 10);
    int vectors = 0;
    for (const sched::State& p : programs) {
      const sched::Stage& c = p.stage("matmul");
      CHECK(c.leaf(0).annotation == sched::Annotation::BlockIdxX);
      CHECK(c.leaf(1).annotation == sched::Annotation::VThread);
      CHECK(c.leaf(2).annotation == sched::Annotation::ThreadIdxX);
      CHECK(c.leaf(1).extent <= 8);
      const int64_t threads = c.leaf(2).extent;
      CHECK(threads >= 32);
      const sched::Stage& a = p.stage("A.shared");
      // Outer, threads, and the vector each thread copies (when its length drawn is not 1).
      REQUIRE((a.leaves.size() == 2 || a.leaves.size() == 3));
      CHECK(a.leaf(1).annotation == sched::Annotation::ThreadIdxX);
      CHECK(a.leaf(1).extent == threads);  // the copy uses the block's threads
      if (a.leaves.size() == 3) {
        CHECK(a.leaf(2).annotation == sched::Annotation::Vectorized);
        CHECK(a.leaf(2).extent * 4 <= 16);
        ++vectors;
      }
      const lower::GpuProgram g = lower::lower_gpu(p, task.target);
      REQUIRE(g.kernels.size() == 1);
      CHECK(g.kernels[0].block[0] == threads);
      CHECK(g.kernels[0].shared.size() == 2);
    }
    CHECK(vectors > 0);
  }

  TEST_CASE("ThreadBind stores a thread's run of results as vectors (gpu_vector_stores)") {
    // The consumer of a tile (the cache_write copy, a fused bias and ReLU) ends in the thread's
    // run of outputs along the last axis: vectorized, at most 16 bytes, wherever the run has an
    // even length; nothing that reduces, and nothing with the option off. The samples compute
    // the DAG's result (the property test below covers these workloads too).
    for (const loom_test::workload& w : {gpu_matmul(), gpu_conv2d()}) {
      CAPTURE(w.name);
      const Task task(w.dag, Target::cuda());
      const auto sketches = search::generate_sketches(task);
      for (const bool on : {true, false}) {
        CAPTURE(on);
        search::SearchOptions o;
        o.gpu_vector_stores = on;
        const auto ref = loom_test::make_reference(w, 29);
        std::mt19937_64 rng(29);
        int vectorized = 0, even_runs = 0;
        for (const sched::State& p : search::sample_programs(sketches, task, o, rng, 16)) {
          for (const sched::Stage& st : p.stages()) {
            if (st.is_placeholder || st.location != sched::ComputeLocation::Root) continue;
            const sched::Iterator& last = st.leaf(static_cast<int>(st.leaves.size()) - 1);
            const bool reduces = std::any_of(st.iters.begin(), st.iters.end(), [](auto& it) {
              return it.kind == sched::IterKind::Reduce;
            });
            if (last.annotation == sched::Annotation::Vectorized) {
              ++vectorized;
              CHECK_FALSE(reduces);
              CHECK(last.extent * st.op.dtype().bytes() <= 16);
            } else if (!reduces && last.annotation == sched::Annotation::Serial &&
                       last.kind == sched::IterKind::Spatial && last.extent % 2 == 0 &&
                       p.attached_at(st.name, st.leaves.back()).empty()) {
              ++even_runs;  // left scalar: only with the option off
            }
          }
          const lower::GpuProgram g = lower::lower_gpu(p, task.target);
          auto r = loom_test::run_and_compare(
              w, ref, p,
              [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
          CHECK_MESSAGE(r.ok, r.message << "\n" << p.to_string());
        }
        MESSAGE(w.name << ", vector stores " << on << ": " << vectorized << " vectorized, "
                       << even_runs << " even runs left scalar");
        if (on) {
          CHECK(vectorized > 0);
          CHECK(even_runs == 0);
        } else {
          CHECK(vectorized == 0);
          CHECK(even_runs > 0);
        }
      }
    }
  }

  TEST_CASE("every sampled GPU program of the operator library's ops computes the DAG's result") {
    int total = 0, wrong = 0;
    uint64_t seed = 3000;
    for (const auto& w : gpu_property_workloads()) {
      auto st = check_gpu_samples(w, ++seed, 30);
      // Small odd shapes leave few tilings with a warp of threads per block.
      CHECK(st.programs >= 3);
      total += st.programs;
      wrong += st.wrong;
    }
    MESSAGE("GPU emulation: " << total << " programs, " << wrong << " wrong");
    CHECK(wrong == 0);
  }

  TEST_CASE(
      "GPU programs record an empty compute-location part: MutateComputeLocation moves none") {
    // The GPU init rules have no ChangeComputeLocation, so MutateComputeLocation must find
    // nothing to move. Inferred from the steps, the sketch's own last compute_at steps (shared
    // copies, the fused cross-thread reductions) looked like ChangeComputeLocation's.
    int programs = 0, misread = 0;
    uint64_t seed = 4000;
    for (const auto& w : gpu_property_workloads()) {
      const Task task(w.dag, Target::cuda());
      const search::SearchOptions options;
      const search::SketchContext ctx(task, options);
      std::mt19937_64 rng(++seed);
      for (const sched::State& p : search::sample_programs(search::generate_sketches(task, options),
                                                           task, options, rng, 10)) {
        ++programs;
        REQUIRE(p.origins().known());
        CHECK(p.origins().location_begin == p.origins().annotate_begin);
        misread += search::inferred_origins(ctx, p) != p.origins();
        CHECK(!search::mutate_compute_location(ctx, p, rng));
      }
    }
    MESSAGE(programs << " GPU programs, the inference misread " << misread);
    CHECK(programs > 50);
  }

  TEST_CASE(
      "CrossThreadReduction: softmax and layer norm rows in one kernel, on a block's threads") {
    for (const loom_test::workload& w : {gpu_softmax_rows(), gpu_layer_norm_rows()}) {
      INFO(w.name);
      const Task task(w.dag, Target::cuda());
      const auto sketches = search::generate_sketches(task);
      // Each of the two reductions across threads or not; the first fused into the result
      // or on its own when the second is not. Layer norm's result reuses gamma and beta, so
      // it is also multi-level tiled, with both reductions then on their own.
      CHECK(sketches.size() == (w.name.find("softmax") == 0 ? 4 : 8));
      int one_kernel = 0, drawn_threads = 0;
      std::mt19937_64 rng(11);
      for (const sched::State& p : search::sample_programs(sketches, task, {}, rng, 40)) {
        const lower::GpuProgram g = lower::lower_gpu(p, task.target);
        std::ostringstream os;
        os << g;
        if (g.kernels.size() == 1 && os.str().find("all_reduce") != std::string::npos) {
          ++one_kernel;
          drawn_threads += g.kernels[0].block[0] != 32;
        }
      }
      CHECK(one_kernel > 0);
      CHECK(drawn_threads > 0);  // the sketch's warp is only a stand-in
    }
  }

  TEST_CASE("the evolutionary search picks only programs the GPU lowering accepts") {
    // Mutations and crossover can build programs the GPU refuses (say, shared copies over
    // 48 KiB: 2-7 % of the trials of a GEMM 4096^3 tuning run on an H100 measured as
    // instantiation errors). They must not reach the measurer.
    auto a = placeholder<float>("A", {512, 512});
    auto b = placeholder<float>("B", {512, 512});
    const Task task(std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{a, b},
                                                       std::vector<ir::Tensor>{ops::matmul(a, b)}),
                    Target::cuda());
    search::EvolutionOptions eo;
    eo.population = 256;
    search::EvolutionarySearch es(task, {}, eo, 11);
    cost::RandomCostModel model(5);
    int picked = 0, refused = 0;
    std::mt19937_64 rng(3);
    for (int round = 0; round < 4; ++round) {
      const std::vector<sched::State> batch = es.next_batch(64, model);
      std::vector<double> throughputs;
      for (const sched::State& s : batch) {
        ++picked;
        try {
          (void)lower::lower_gpu(s, task.target);
        } catch (const user_error& e) {
          ++refused;
          CHECK_MESSAGE(false, e.what() << "\n" << s.to_string());
        }
        throughputs.push_back(static_cast<double>(rng() % 1000));
      }
      es.add_measured(batch, throughputs);
    }
    MESSAGE(picked << " programs picked, " << refused << " refused by lower_gpu");
    CHECK(picked >= 200);
  }

  TEST_CASE("the default GPU schedule (the GPU measurer's reference) computes every op's result") {
    uint64_t seed = 4000;
    for (const auto& w : gpu_property_workloads()) {
      const Target target = Target::cuda();
      const sched::State s = sched::default_schedule(w.dag, target);
      const lower::GpuProgram g = lower::lower_gpu(s, target);
      // One thread per output element: no shared memory, no barriers, at most 256 threads.
      for (const lower::GpuKernel& k : g.kernels) {
        CHECK(k.shared.empty());
        CHECK(k.threads_per_block() <= 256);
      }
      const auto ref = loom_test::make_reference(w, static_cast<uint32_t>(++seed));
      auto r = loom_test::run_and_compare(
          w, ref, s,
          [&](const ir::LoweredFunc&, std::vector<void*>& ptrs) { lower::emulate(g, ptrs); });
      CHECK_MESSAGE(r.ok, w.name << ": " << r.message << "\n" << s.to_string());
    }
  }
}

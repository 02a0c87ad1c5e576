// Every program the search can sample, for every operator of the operator library, computes the
// reference result through the real backend: sketches from search::generate_sketches (so new
// sketch rules are covered as soon as they are registered), programs from
// search::sample_programs with fixed seeds, each one lowered, JIT-compiled through LLVM ORC, run
// and compared with the DAG interpreter (tests/support/random_schedule.hpp states the tolerance).
//
// Half of each op's programs are drawn with perfect tilings (Ansor's space), half with
// `allow_non_divisible_tiles`, which gives the odd and prime extents below tails to lower.
//
// Count. Each program costs one LLVM O3 compilation, 30 to 150 ms (about 95 ms on average, far
// more than lowering, sampling or running it), so CI checks kProgramsPerOp programs per op:
// about 1,500 programs, two and a half minutes of one core. The environment variable
// LOOM_SEARCH_PROPERTY_SCALE multiplies the count (scripts/long-property-run.sh sets it for the
// long run). An op whose space holds fewer distinct programs is checked on all that the sampler
// finds (an element-wise op alone has one: nothing to tile, and the parallel and vectorize rules
// are deterministic at these shapes); every op prints how many it checked.
//
// A wrong result prints the op, the sampling seed and the program's record
// (sched::to_record): `sched::replay(dag, sched::from_record(record))` rebuilds the program.
#include <loom/cpu.hpp>
#include <loom/ops.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/annotate.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "support/random_schedule.hpp"

using namespace loom;

namespace {

/// Distinct programs checked per op in CI (half perfect tilings, half non-divisible ones).
constexpr int kProgramsPerOp = 30;

/// LOOM_SEARCH_PROPERTY_SCALE, or 1 when unset or not a positive number.
double count_scale() {
  const char* v = std::getenv("LOOM_SEARCH_PROPERTY_SCALE");
  if (!v) return 1.0;
  const double s = std::atof(v);
  return s > 0 ? s : 1.0;
}

/// The search target: fixed rather than the host's, so a seed samples the same programs on every
/// machine (a record from a CI log reproduces anywhere). Code generation still targets the host.
Target property_target() {
  Target t = Target::host();
  t.num_cores = 4;
  t.vector_bits = 256;
  return t;
}

/// An op of the library on placeholders, and which inputs must be positive (a variance under
/// rsqrt, a divisor), as input indices.
struct op_case {
  loom_test::workload w;
  std::vector<int> positive_inputs;
};

op_case make(std::string name, std::vector<ir::Tensor> inputs, ir::Tensor output,
             int64_t reduction_length, std::vector<int> positive_inputs = {}) {
  return {loom_test::make_workload(std::move(name), std::move(inputs), {std::move(output)},
                                   reduction_length),
          std::move(positive_inputs)};
}

/// Like loom_test::make_reference, with the inputs listed in `positive` moved to [0.5, 1.5]
/// before the reference is computed: a negative variance would make both sides NaN, and a
/// divisor near zero would turn rounding differences into large ones.
loom_test::reference make_reference(const op_case& c, uint32_t seed) {
  const auto& dag = *c.w.dag;
  loom_test::reference r;
  std::vector<void*> ptrs;
  for (size_t i = 0; i < dag.inputs().size(); ++i) {
    r.inputs.push_back(loom_test::random_tensor(dag.inputs()[i], seed + static_cast<uint32_t>(i)));
    bool positive = false;
    for (int p : c.positive_inputs) positive = positive || p == static_cast<int>(i);
    if (positive) {
      REQUIRE(r.inputs.back().dtype == ir::DType::f32());
      auto* x = reinterpret_cast<float*>(r.inputs.back().data());
      for (int64_t e = 0; e < r.inputs.back().elements; ++e) x[e] = 0.5f + std::abs(x[e]);
    }
    ptrs.push_back(r.inputs.back().data());
  }
  for (auto& t : dag.outputs()) {
    r.outputs.push_back(loom_test::random_tensor(t, 0));
    std::fill(r.outputs.back().bytes.begin(), r.outputs.back().bytes.end(), 0);
  }
  for (auto& o : r.outputs) ptrs.push_back(o.data());
  evaluate(dag, ptrs);
  return r;
}

void jit_runner(const ir::LoweredFunc& f, std::vector<void*>& ptrs) {
  auto k = cpu_jit::compile(f);
  k.fn(ptrs.data());
}

/// What one op's check found.
struct op_stats {
  int sketches = 0, checked = 0, wrong = 0;
  int rfactored = 0, cached = 0;  ///< programs with an rfactor step, with a cache_read step
};

/// Programs checked and wrong over the ops of one TEST_CASE, or over the whole run.
struct totals {
  int checked = 0, wrong = 0;
};

totals& run_totals() {
  static totals t;
  return t;
}

/// Samples up to `count` distinct programs of `c` (half of them with non-divisible tiles), checks
/// each through the JIT and reports the counts.
op_stats check_op(const op_case& c, uint64_t seed, int count) {
  op_stats st;
  const Task task(c.w.dag, property_target());
  const loom_test::reference ref = make_reference(c, static_cast<uint32_t>(seed));
  std::set<std::string> seen;  // the two halves may draw the same program; check it once
  for (bool free_tiles : {false, true}) {
    search::SearchOptions options;
    options.allow_non_divisible_tiles = free_tiles;
    options.non_divisible_probability = 0.5;
    const auto sketches = search::generate_sketches(task, options);
    st.sketches = static_cast<int>(sketches.size());
    const uint64_t half_seed = seed * 2 + (free_tiles ? 1 : 0);
    std::mt19937_64 rng(half_seed);
    const int half = free_tiles ? count - count / 2 : count / 2;
    for (const sched::State& p : search::sample_programs(sketches, task, options, rng, half)) {
      if (!seen.insert(p.to_string()).second) continue;
      ++st.checked;
      bool rfactor = false, cache_read = false;
      for (const sched::Step& step : p.steps()) {
        rfactor = rfactor || std::holds_alternative<sched::RfactorStep>(step);
        cache_read = cache_read || std::holds_alternative<sched::CacheReadStep>(step);
      }
      st.rfactored += rfactor;
      st.cached += cache_read;
      const auto r = loom_test::run_and_compare(c.w, ref, p, jit_runner);
      if (!r.ok) ++st.wrong;
      CHECK_MESSAGE(r.ok, c.w.name << " (sampling seed " << half_seed
                                   << (free_tiles ? ", non-divisible tiles" : ", perfect tiles")
                                   << "): " << r.message
                                   << "\nrecord: " << sched::to_record(p.steps()) << "\n"
                                   << p.to_string());
    }
  }
  // Which rules the programs came through, roughly: AddRfactor and MemoryBoundReduction leave
  // rfactor steps, PackReusedInput a cache_read.
  MESSAGE("search property: " << c.w.name << ": " << st.sketches << " sketches, " << st.checked
                              << " programs checked through the JIT (" << st.rfactored
                              << " with rfactor, " << st.cached << " with cache_read), " << st.wrong
                              << " wrong");
  return st;
}

/// Checks every op of `cases` with its share of the programs, `seed` making the seeds.
void check_ops(const std::vector<op_case>& cases, uint64_t seed) {
  const int count = std::max(2, static_cast<int>(std::lround(kProgramsPerOp * count_scale())));
  totals here;
  for (const op_case& c : cases) {
    const op_stats st = check_op(c, ++seed, count);
    // Some spaces hold a single program (see the file comment); none may be empty.
    CHECK_MESSAGE(st.checked >= 1, c.w.name << ": no program could be sampled");
    here.checked += st.checked;
    here.wrong += st.wrong;
  }
  run_totals().checked += here.checked;
  run_totals().wrong += here.wrong;
  MESSAGE("search property total: " << here.checked << " programs checked, " << here.wrong
                                    << " wrong (run so far: " << run_totals().checked
                                    << " checked, " << run_totals().wrong << " wrong)");
  CHECK(here.wrong == 0);
}

template <std::size_t R>
Tensor<float, R> input(const char* name, const std::array<int64_t, R>& shape) {
  return placeholder<float>(name, shape);
}

// --- the operator library at small, odd shapes --------------------------------------------------

std::vector<op_case> matmul_ops() {
  std::vector<op_case> out;
  {
    auto a = input<2>("A", {13, 19});
    auto b = input<2>("B", {19, 17});
    out.push_back(make("matmul 13x17x19", {a, b}, ops::matmul(a, b), 19));
  }
  {  // both operands transposed; a 1-row product
    auto a = input<2>("A", {7, 1});
    auto b = input<2>("B", {31, 7});
    out.push_back(make("matmul trans_a trans_b 1x31x7", {a, b}, ops::matmul(a, b, true, true), 7));
  }
  {
    auto a = input<3>("A", {3, 5, 7});
    auto b = input<3>("B", {3, 7, 6});
    out.push_back(make("batch_matmul 3x5x6x7", {a, b}, ops::batch_matmul(a, b), 7));
  }
  {  // rank 4, B transposed, batch 1
    auto a = input<4>("A", {1, 2, 5, 3});
    auto b = input<4>("B", {1, 2, 11, 3});
    out.push_back(make("batch_matmul rank 4 trans_b 1x2x5x11x3", {a, b},
                       ops::batch_matmul(a, b, false, true), 3));
  }
  {
    auto x = input<2>("X", {7, 13});
    auto w = input<2>("W", {11, 13});
    out.push_back(make("dense 7x11x13", {x, w}, ops::dense(x, w), 13));
  }
  {
    auto x = input<2>("X", {5, 9});
    auto w = input<2>("W", {13, 9});
    auto bias = input<1>("bias", {13});
    out.push_back(make("dense+bias 5x13x9", {x, w, bias}, ops::dense(x, w, bias), 9));
  }
  {
    auto x = input<2>("X", {6, 7});
    auto w = input<2>("W", {9, 7});
    auto bias = input<1>("bias", {9});
    out.push_back(
        make("dense+bias+relu 6x9x7", {x, w, bias}, ops::relu(ops::dense(x, w, bias)), 7));
  }
  {  // more reduction than spatial parallelism: the rfactor sketches
    auto a = input<2>("A", {2, 61});
    auto b = input<2>("B", {61, 3});
    out.push_back(make("matmul 2x3x61", {a, b}, ops::matmul(a, b), 61));
  }
  {  // exact integer arithmetic: any wrong element shows, whatever the summation order
    auto a = placeholder<int32_t>("A", {9, 11});
    auto b = placeholder<int32_t>("B", {11, 5});
    out.push_back(make("matmul int32 9x5x11", {a, b}, ops::matmul(a, b), 11));
  }
  return out;
}

std::vector<op_case> conv_ops() {
  std::vector<op_case> out;
  {
    auto x = input<3>("X", {1, 3, 13});
    auto w = input<3>("W", {4, 3, 3});
    out.push_back(make("conv1d_ncw 3->4 13 stride 2 pad 1", {x, w},
                       ops::conv1d_ncw(x, w, {.stride = {2}, .padding = {1}}), 9));
  }
  {
    auto x = input<4>("X", {1, 3, 7, 7});
    auto w = input<4>("W", {4, 3, 3, 3});
    out.push_back(make("conv2d_nchw 3->4 7x7 pad 1", {x, w},
                       ops::conv2d_nchw(x, w, {.padding = {1, 1}}), 27));
  }
  {  // unpadded (no pad stage), 1x1 kernel
    auto x = input<4>("X", {2, 5, 3, 7});
    auto w = input<4>("W", {3, 5, 1, 1});
    out.push_back(make("conv2d_nchw 1x1 5->3 3x7 batch 2", {x, w}, ops::conv2d_nchw(x, w), 5));
  }
  {  // grouped, strided and dilated
    auto x = input<4>("X", {1, 4, 9, 11});
    auto w = input<4>("W", {6, 2, 3, 3});
    out.push_back(
        make("conv2d_nchw groups 2 stride 2 dilation 2 pad 2", {x, w},
             ops::conv2d_nchw(
                 x, w, {.stride = {2, 2}, .padding = {2, 2}, .dilation = {2, 2}, .groups = 2}),
             18));
  }
  {
    auto x = input<4>("X", {1, 7, 5, 3});
    auto w = input<4>("W", {3, 3, 3, 4});
    out.push_back(make("conv2d_nhwc 3->4 7x5 pad 1", {x, w},
                       ops::conv2d_nhwc(x, w, {.padding = {1, 1}}), 27));
  }
  {
    auto x = input<5>("X", {1, 2, 5, 5, 3});
    auto w = input<5>("W", {3, 2, 3, 3, 3});
    out.push_back(make("conv3d_ncdhw 2->3 5x5x3 pad 1", {x, w},
                       ops::conv3d_ncdhw(x, w, {.padding = {1, 1, 1}}), 54));
  }
  {
    auto x = input<4>("X", {1, 3, 7, 5});
    auto w = input<4>("W", {3, 1, 3, 3});
    out.push_back(make("depthwise_conv2d_nchw 3x7x5 pad 1", {x, w},
                       ops::depthwise_conv2d_nchw(x, w, {.padding = {1, 1}}), 9));
  }
  {  // channel multiplier 2, stride 2, no padding
    auto x = input<4>("X", {1, 3, 9, 7});
    auto w = input<4>("W", {3, 2, 3, 3});
    out.push_back(make("depthwise_conv2d_nchw multiplier 2 stride 2", {x, w},
                       ops::depthwise_conv2d_nchw(x, w, {.stride = {2, 2}}), 9));
  }
  {
    auto x = input<4>("X", {1, 3, 5, 5});
    auto w = input<4>("W", {3, 2, 3, 3});
    out.push_back(make("conv2d_transpose_nchw 3->2 5x5 pad 1", {x, w},
                       ops::conv2d_transpose_nchw(x, w, {.padding = {1, 1}}), 27));
  }
  {  // strided: the pad stage dilates the data
    auto x = input<4>("X", {1, 2, 4, 3});
    auto w = input<4>("W", {2, 3, 3, 3});
    out.push_back(make("conv2d_transpose_nchw stride 2 output_padding 1", {x, w},
                       ops::conv2d_transpose_nchw(
                           x, w, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}),
                       18));
  }
  return out;
}

std::vector<op_case> pool_and_transform_ops() {
  std::vector<op_case> out;
  {
    auto x = input<4>("X", {1, 3, 13, 11});
    out.push_back(
        make("max_pool2d 3x3 stride 2 pad 1", {x}, ops::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), 9));
  }
  {
    auto x = input<4>("X", {2, 3, 7, 7});
    out.push_back(make("avg_pool2d 2x2 stride 2", {x}, ops::avg_pool2d(x, {2, 2}, {2, 2}), 4));
  }
  {
    auto x = input<4>("X", {1, 2, 7, 9});
    out.push_back(make("avg_pool2d 3x3 stride 2 pad 1 count_include_pad false", {x},
                       ops::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false), 9));
  }
  {  // global pooling: one window per channel, a long reduction
    auto x = input<4>("X", {1, 3, 7, 9});
    out.push_back(make("avg_pool2d global 7x9", {x}, ops::avg_pool2d(x, {7, 9}, {1, 1}), 63));
  }
  {
    auto x = input<2>("X", {5, 7});
    out.push_back(make("pad 5x7 by (1,2),(3,0)", {x}, ops::pad(x, {1, 3}, {2, 0}, 0.5f), 1));
  }
  {
    auto x = input<3>("X", {3, 5, 7});
    out.push_back(make("transpose 3x5x7 (2,0,1)", {x}, ops::transpose(x, {2, 0, 1}), 1));
  }
  return out;
}

std::vector<op_case> elementwise_ops() {
  std::vector<op_case> out;
  {
    auto x = input<2>("X", {5, 13});
    out.push_back(make("relu 5x13", {x}, ops::relu(x), 1));
  }
  {
    auto x = input<4>("X", {1, 3, 5, 7});
    auto b = input<1>("b", {3});
    out.push_back(make("bias_add 1x3x5x7 axis 1", {x, b}, ops::bias_add(x, b), 1));
  }
  {
    auto x = input<3>("X", {3, 5, 7});
    auto y = input<2>("Y", {5, 7});
    out.push_back(make("add 3x5x7 + 5x7", {x, y}, ops::add(x, y), 1));
  }
  {
    auto x = input<1>("X", {31});
    auto y = input<1>("Y", {31});
    out.push_back(make("sub 31", {x, y}, ops::sub(x, y), 1));
  }
  {
    auto x = input<2>("X", {11, 13});
    auto y = input<2>("Y", {11, 13});
    out.push_back(make("mul 11x13", {x, y}, ops::mul(x, y), 1));
  }
  {
    auto x = input<2>("X", {7, 1});
    auto y = input<3>("Y", {3, 7, 1});
    out.push_back(make("div 7x1 / 3x7x1", {x, y}, ops::div(x, y), 1, {1}));
  }
  {  // the element-wise ops in one chain (all inlined into the last)
    auto x = input<2>("X", {9, 7});
    auto y = input<2>("Y", {9, 7});
    auto b = input<1>("b", {7});
    out.push_back(make("relu(bias_add(x * y - x, b)) 9x7", {x, y, b},
                       ops::relu(ops::bias_add(ops::sub(ops::mul(x, y), x), b, -1)), 1));
  }
  {
    auto a = placeholder<int32_t>("A", {5, 11});
    auto b = placeholder<int32_t>("B", {11});
    out.push_back(make("relu(add) int32 5x11 + 11", {a, b}, ops::relu(ops::add(a, b)), 1));
  }
  return out;
}

std::vector<op_case> norm_ops() {
  std::vector<op_case> out;
  {
    auto x = input<2>("X", {5, 11});
    out.push_back(make("softmax 5x11", {x}, ops::softmax(x), 11));
  }
  {  // rank 1: the row statistics are rank-0 tensors
    auto x = input<1>("X", {31});
    out.push_back(make("softmax rank 1 31", {x}, ops::softmax(x), 31));
  }
  {
    auto x = input<3>("X", {2, 3, 13});
    out.push_back(make("softmax 2x3x13", {x}, ops::softmax(x), 13));
  }
  {
    auto x = input<2>("X", {5, 13});
    auto g = input<1>("gamma", {13});
    auto b = input<1>("beta", {13});
    out.push_back(make("layer_norm 5x13", {x, g, b}, ops::layer_norm(x, g, b), 13));
  }
  {
    auto x = input<4>("X", {2, 3, 5, 7});
    auto g = input<1>("gamma", {3});
    auto b = input<1>("beta", {3});
    auto m = input<1>("mean", {3});
    auto v = input<1>("var", {3});
    out.push_back(
        make("batch_norm 2x3x5x7", {x, g, b, m, v}, ops::batch_norm(x, g, b, m, v), 1, {4}));
  }
  return out;
}

std::vector<op_case> composite_ops() {
  std::vector<op_case> out;
  {
    auto x = input<4>("X", {1, 3, 7, 7});
    auto w = input<4>("W", {4, 3, 3, 3});
    auto bias = input<1>("bias", {4});
    out.push_back(make("conv2d+bias+relu 3->4 7x7 pad 1", {x, w, bias},
                       ops::relu(ops::bias_add(ops::conv2d_nchw(x, w, {.padding = {1, 1}}), bias)),
                       27));
  }
  {
    auto x = input<4>("X", {1, 3, 7, 5});
    auto w = input<4>("W", {5, 3, 3, 3});
    auto g = input<1>("gamma", {5});
    auto b = input<1>("beta", {5});
    auto m = input<1>("mean", {5});
    auto v = input<1>("var", {5});
    out.push_back(make("conv_layer 3->5 7x5 stride 2 pad 1", {x, w, g, b, m, v},
                       ops::conv_layer(x, w, g, b, m, v, {.stride = {2, 2}, .padding = {1, 1}}), 27,
                       {5}));
  }
  {
    auto q = input<4>("Q", {1, 5, 2, 3});
    auto k = input<4>("K", {1, 7, 2, 3});
    out.push_back(make("tbg 1x5x7 heads 2 size 3", {q, k}, ops::tbg(q, k), 3));
  }
  {
    auto a = input<2>("A", {9, 7});
    auto b = input<2>("B", {7, 12});
    out.push_back(make("matmul+relu 9x12x7", {a, b}, ops::relu(ops::matmul(a, b)), 7));
  }
  {  // a reduction feeding a reduction: matmul then softmax over its rows
    auto a = input<2>("A", {5, 3});
    auto b = input<2>("B", {3, 13});
    out.push_back(make("softmax(matmul) 5x13x3", {a, b}, ops::softmax(ops::matmul(a, b)), 13));
  }
  return out;
}

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("sampled programs of the matrix products match the interpreter through the JIT") {
    check_ops(matmul_ops(), 3000);
  }
  TEST_CASE("sampled programs of the convolutions match the interpreter through the JIT") {
    check_ops(conv_ops(), 3100);
  }
  TEST_CASE(
      "sampled programs of pooling, pad and transpose match the interpreter through the JIT") {
    check_ops(pool_and_transform_ops(), 3200);
  }
  TEST_CASE("sampled programs of the element-wise ops match the interpreter through the JIT") {
    check_ops(elementwise_ops(), 3300);
  }
  TEST_CASE("sampled programs of the normalizations match the interpreter through the JIT") {
    check_ops(norm_ops(), 3400);
  }
  TEST_CASE("sampled programs of composite layers match the interpreter through the JIT") {
    check_ops(composite_ops(), 3500);
  }
}

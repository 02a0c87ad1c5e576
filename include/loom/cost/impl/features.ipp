// Bodies of loom/cost/features.hpp: the per-store feature extractor, the feature names and the
// entry points. The extractor is one statement visitor whose feature groups share its loop stack
// and per-store scratch; its parts, included below in this order, are the visitor with its state
// (features_extractor.ipp), the expressions it bounds and counts (features_expr.ipp: group 1),
// the accesses of one store (features_access.ipp: groups 2 and 3, and the differences from
// Ansor's feature.cc) and the annotations (features_annotation.ipp: group 4).
#include "loom/cost/features.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/compile_threads.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <string>

#include "loom/cost/impl/features_extractor.ipp"
#include "loom/cost/impl/features_expr.ipp"
#include "loom/cost/impl/features_access.ipp"
#include "loom/cost/impl/features_annotation.ipp"

LOOM_BEGIN_NAMESPACE
namespace cost {

LOOM_DECL const std::array<std::string_view, kNumFeatures>& feature_names() {
  // The strings are built once; the views point into this function's static storage.
  static const std::array<std::string, kNumFeatures> storage = [] {
    std::array<std::string, kNumFeatures> n;
    // Appending (not operator+ on literals) also keeps g++ 12's -Wrestrict false positive away.
    auto cat = [](std::initializer_list<std::string_view> parts) {
      std::string s;
      for (std::string_view x : parts) s.append(x);
      return s;
    };
    const char* ops[16] = {"float_mad",     "float_addsub",    "float_mul",        "float_divmod",
                           "float_cmp",     "float_math_func", "float_other_func", "int_mad",
                           "int_addsub",    "int_mul",         "int_divmod",       "int_cmp",
                           "int_math_func", "int_other_func",  "bool_op",          "select_op"};
    for (int i = 0; i < 16; ++i) n[i] = ops[i];
    const char* pos[kNumLoopPositions] = {"none",          "inner_spatial", "middle_spatial",
                                          "outer_spatial", "inner_reduce",  "middle_reduce",
                                          "outer_reduce",  "mixed"};
    const std::pair<int, const char*> annotations[3] = {
        {kFeatureVecNum, "vec"}, {kFeatureUnrollNum, "unroll"}, {kFeatureParallelNum, "parallel"}};
    for (auto [base, name] : annotations) {
      n[base] = cat({name, "_num"});
      n[base + 1] = cat({name, "_prod"});
      n[base + 2] = cat({name, "_len"});
      for (int k = 0; k < kNumLoopPositions; ++k) n[base + 3 + k] = cat({name, "_type.", pos[k]});
    }
    const char* gpu[8] = {"is_gpu",          "blockIdx.x_len",  "blockIdx.y_len",  "blockIdx.z_len",
                          "threadIdx.x_len", "threadIdx.y_len", "threadIdx.z_len", "vthread_len"};
    for (int i = 0; i < 8; ++i) n[kFeatureIsGpu + i] = gpu[i];
    const char* buf[kFeaturesPerBuffer] = {"acc_type.read",
                                           "acc_type.write",
                                           "acc_type.read_write",
                                           "bytes",
                                           "unique_bytes",
                                           "lines",
                                           "unique_lines",
                                           "reuse_type.loop_multiple_read",
                                           "reuse_type.serial_multiple_read_write",
                                           "reuse_type.no_reuse",
                                           "reuse_dist_iter",
                                           "reuse_dist_bytes",
                                           "reuse_count",
                                           "bytes_per_reuse",
                                           "unique_bytes_per_reuse",
                                           "lines_per_reuse",
                                           "unique_lines_per_reuse",
                                           "stride"};
    for (int b = 0; b < kMaxFeatureBuffers; ++b)
      for (int k = 0; k < kFeaturesPerBuffer; ++k)
        n[buffer_feature(b, k)] = cat({"B", std::to_string(b), ".", buf[k]});
    for (int k = 0; k < kIntensityCurvePoints; ++k)
      n[kFeatureIntensityCurve + k] = cat({"arith_intensity_curve.", std::to_string(k)});
    n[kFeatureAllocSize] = "alloc_size";
    n[kFeatureAllocProd] = "alloc_prod";
    n[kFeatureAllocOuterProd] = "alloc_outer_prod";
    n[kFeatureAllocInnerProd] = "alloc_inner_prod";
    n[kFeatureOuterProd] = "outer_prod";
    n[kFeatureNumLoops] = "num_loops";
    n[kFeatureAutoUnrollMaxStep] = "auto_unroll_max_step";
    n[kFeatureTensorCoreMacs] = "tensor_core_macs";
    n[kFeaturePipelinedLen] = "pipelined_len";
    n[kFeatureSharedBytes] = "shared_bytes";
    return n;
  }();
  static const std::array<std::string_view, kNumFeatures> views = [] {
    std::array<std::string_view, kNumFeatures> v;
    for (int i = 0; i < kNumFeatures; ++i) v[i] = storage[i];
    return v;
  }();
  return views;
}

LOOM_DECL float log_scale(double x) {
  if (x == 0) return 0.0f;  // most features of a row: log2(1) without the call
  return static_cast<float>(x < 0 ? -std::log2(1.0 - x) : std::log2(1.0 + x));
}

LOOM_DECL double unscale(float v) {
  return v < 0 ? -(std::exp2(-static_cast<double>(v)) - 1.0)
               : std::exp2(static_cast<double>(v)) - 1.0;
}

LOOM_DECL double row_float_ops(const float* row) {
  double s = 0;
  for (int k : kFloatOpFeatures) s += unscale(row[k]);
  return s;
}

LOOM_DECL double row_bytes(const float* row) {
  double s = 0;
  for (int b = 0; b < kMaxFeatureBuffers; ++b) s += unscale(row[buffer_feature(b, kBufferBytes)]);
  return s;
}

LOOM_DECL lower::LowerOptions feature_lower_options() {
  lower::LowerOptions o;
  o.unroll = false;
  o.vectorize = false;
  o.partition = false;
  return o;
}

LOOM_DECL ProgramFeatures extract_features(const ir::LoweredFunc& f, const Target& target) {
  LOOM_USER_CHECK(f.body.defined(), "loom.cost.E900")
      << "extract_features(): kernel '" << f.name << "' has no body";
  // One extractor per thread, reused: its scratch keeps its capacity between programs.
  thread_local detail::extractor ex;
  return ex.run(f, target);
}

LOOM_DECL ProgramFeatures extract_features(const sched::State& state, const Target& target) {
  return extract_features(lower::lower(state, "features", feature_lower_options()), target);
}

LOOM_DECL std::vector<ProgramFeatures> extract_features(
    const std::vector<const sched::State*>& states, const Target& target, bool parallel) {
  std::vector<ProgramFeatures> out(states.size());
  auto one = [&](size_t i) {
    try {
      out[i] = extract_features(*states[i], target);
    } catch (const loom::error&) {
      // A candidate that cannot be lowered gets no rows; the search scores it as invalid.
      out[i] = ProgramFeatures{};
      out[i].num_features = kNumFeatures;
    }
  };
  // Programs differ in cost several times over (a tiled convolution against an elementwise
  // nest), so fixed halves would leave a core idle: one chunk per program, each thread taking
  // the next as it finishes one.
  ::loom::detail::parallel_chunks(
      states.size(), states.size(),
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) one(i);
      },
      parallel ? 0 : 1);
  return out;
}

LOOM_DECL std::vector<ProgramFeatures> extract_features(const std::vector<sched::State>& states,
                                                        const Target& target, bool parallel) {
  std::vector<const sched::State*> pointers(states.size());
  for (size_t i = 0; i < states.size(); ++i) pointers[i] = &states[i];
  return extract_features(pointers, target, parallel);
}

}  // namespace cost
LOOM_END_NAMESPACE

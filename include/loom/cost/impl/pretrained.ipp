// Bodies of loom/cost/pretrained.hpp.
#include "loom/cost/pretrained.hpp"

#include "loom/cost/features.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

LOOM_BEGIN_NAMESPACE
namespace cost {

namespace detail {

/// A shipped model's path: this file is include/loom/cost/impl/pretrained.ipp, the models
/// include/loom/cost/pretrained/`file`, in the source tree and in an install alike.
inline std::string shipped_model_path(const char* file) {
  std::string here = __FILE__;
  const size_t slash = here.find_last_of('/');
  here = slash == std::string::npos ? std::string(".") : here.substr(0, slash);
  return here + "/../pretrained/" + file;
}

/// `env` when set (empty for "none"), else the shipped `file`.
inline std::string model_path(const char* env, const char* file) {
  if (const char* v = std::getenv(env); v && *v)
    return std::string(v) == "none" ? std::string() : std::string(v);
  return shipped_model_path(file);
}

/// The model at `path`, read once per process and path (thread-safe); null for an empty path,
/// and with one warning per path when it cannot be read.
inline std::shared_ptr<const GbdtCostModel> cached_model(const std::string& path) {
  // Read once per path (the environment may change between calls): a missing file costs one
  // warning per process, not one per kernel.
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const GbdtCostModel>> loaded;
  if (path.empty()) return nullptr;  // "none": the user chose to go without
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  std::shared_ptr<const GbdtCostModel> model;
  try {
    model = load_pretrained_model(path);
  } catch (const user_error& e) {
    std::fprintf(stderr,
                 "loom: warning: %s; kernels of untuned shapes get the default schedule and "
                 "tuning starts from random programs\n",
                 e.what());
  }
  loaded.emplace(path, model);
  return model;
}

}  // namespace detail

LOOM_DECL std::string pretrained_model_path() {
  return detail::model_path("LOOM_COST_MODEL", "cpu.model");
}

LOOM_DECL std::string pretrained_gpu_model_path() {
  return detail::model_path("LOOM_GPU_COST_MODEL", "gpu.model");
}

LOOM_DECL std::shared_ptr<const GbdtCostModel> load_pretrained_model(const std::string& path) {
  std::ifstream in(path);
  LOOM_USER_CHECK(in.good(), "loom.cost.E970")
      << "cannot open the pretrained cost model '" << path
      << "'; set LOOM_COST_MODEL (LOOM_GPU_COST_MODEL for the GPU's) to the path of cpu.model "
         "(gpu.model), installed under include/loom/cost/pretrained/, or to 'none' to go "
         "without it";
  auto model = std::make_shared<GbdtCostModel>();
  try {
    model->load(in);
  } catch (const user_error& e) {
    LOOM_USER_FAIL("loom.cost.E971")
        << "the pretrained cost model '" << path << "' is not a saved GBDT cost model (" << e.what()
        << "); regenerate it (cost/pretrained.hpp says how)";
  }
  // An older layout is a prefix of this one (cost/features.hpp), which the model reads.
  LOOM_USER_CHECK(model->model().num_features() >= kNumAnsorFeatures &&
                      model->model().num_features() <= kNumFeatures,
                  "loom.cost.E972")
      << "the pretrained cost model '" << path << "' was trained on "
      << model->model().num_features() << " features per row but this build extracts "
      << kNumFeatures << " (feature version " << kFeatureVersion << ", which reads models of "
      << kNumAnsorFeatures << " to " << kNumFeatures
      << "); regenerate it (cost/pretrained.hpp says how)";
  return model;
}

LOOM_DECL std::shared_ptr<const GbdtCostModel> pretrained_cost_model() {
  return detail::cached_model(pretrained_model_path());
}

LOOM_DECL std::shared_ptr<const GbdtCostModel> pretrained_gpu_cost_model() {
  return detail::cached_model(pretrained_gpu_model_path());
}

}  // namespace cost
LOOM_END_NAMESPACE

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

/// The shipped model's path: this file is include/loom/cost/impl/pretrained.ipp, the model
/// include/loom/cost/pretrained/cpu.model, in the source tree and in an install alike.
inline std::string shipped_model_path() {
  std::string here = __FILE__;
  const size_t slash = here.find_last_of('/');
  here = slash == std::string::npos ? std::string(".") : here.substr(0, slash);
  return here + "/../pretrained/cpu.model";
}

}  // namespace detail

LOOM_DECL std::string pretrained_model_path() {
  if (const char* env = std::getenv("LOOM_COST_MODEL"); env && *env)
    return std::string(env) == "none" ? std::string() : std::string(env);
  return detail::shipped_model_path();
}

LOOM_DECL std::shared_ptr<const GbdtCostModel> load_pretrained_model(const std::string& path) {
  std::ifstream in(path);
  LOOM_USER_CHECK(in.good(), "loom.cost.E970")
      << "cannot open the pretrained cost model '" << path
      << "'; set LOOM_COST_MODEL to the path of cpu.model (installed under "
         "include/loom/cost/pretrained/), or to 'none' to go without it";
  auto model = std::make_shared<GbdtCostModel>();
  try {
    model->load(in);
  } catch (const user_error& e) {
    LOOM_USER_FAIL("loom.cost.E971")
        << "the pretrained cost model '" << path << "' is not a saved GBDT cost model (" << e.what()
        << "); regenerate it with scripts/train-cost-model.sh";
  }
  // An older layout is a prefix of this one (cost/features.hpp), which the model reads.
  LOOM_USER_CHECK(model->model().num_features() >= kNumAnsorFeatures &&
                      model->model().num_features() <= kNumFeatures,
                  "loom.cost.E972")
      << "the pretrained cost model '" << path << "' was trained on "
      << model->model().num_features() << " features per row but this build extracts "
      << kNumFeatures << " (feature version " << kFeatureVersion << ", which reads models of "
      << kNumAnsorFeatures << " to " << kNumFeatures
      << "); regenerate it with scripts/train-cost-model.sh";
  return model;
}

LOOM_DECL std::shared_ptr<const GbdtCostModel> pretrained_cost_model() {
  // Read once per path (LOOM_COST_MODEL may change between calls): a missing file costs one
  // warning per process, not one per kernel.
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const GbdtCostModel>> loaded;
  const std::string path = pretrained_model_path();
  if (path.empty()) return nullptr;  // LOOM_COST_MODEL=none: the user chose to go without
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

}  // namespace cost
LOOM_END_NAMESPACE

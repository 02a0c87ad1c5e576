/// \file
/// The pretrained cost models that ship with loom (layer cost/). The CPU one is a GbdtCostModel
/// trained on tuning logs of whole networks (benchmarks/README.md, "Pretrained cost model";
/// regenerate with scripts/train-cost-model.sh). It ranks programs of a task nobody measured, so
/// that
///  - model-only compilation (loom/tune.hpp, compile_from_model) picks a schedule in about a
///    second without measuring anything, and
///  - tuning starts from the model's picks instead of random ones (TuneOptions::pretrained).
///
/// Where the file is found, first match wins:
///  1. the environment variable `LOOM_COST_MODEL`: a path, or `none` to turn the model off;
///  2. `cost/pretrained/cpu.model` next to this header, which is where it lives in the source tree
///     and where `install(DIRECTORY include/loom)` puts it, so a build tree and a find_package
///     user find it alike (this needs the include directory to be given as an absolute path, as
///     CMake does; otherwise set `LOOM_COST_MODEL`).
///
/// The GPU model (`gpu.model` beside it, `LOOM_GPU_COST_MODEL`) is the same learner trained on
/// an H200's tuning logs of bench_gpu's workloads: 2,198 measured programs of 12 workloads,
/// GEMMs, batched and BERT products and ResNet convolutions in bf16, fp16 and TF32 on tensor
/// cores. It was trained with all of this build's features. Regenerate it with
///
///     bench_cost_model parts=none save=include/loom/cost/pretrained/gpu.model
///       gpu_logs=benchmarks/results/h200_tuning_logs.jsonl.gz
///
/// (one command line; it rewrites the file byte for byte)
///
/// Left out of that training, a workload's programs are ranked at 0.81 pairwise accuracy
/// (benchmarks/README.md, "GPU (H100, H200)"). cuda::tune starts from it
/// (cuda::tuning_options). It has seen no SIMT-only workload (fp32 GEMM, softmax, layer norm):
/// there it is a guess, which the task's own model outweighs as samples come in.
///
/// The file is what GbdtCostModel::save writes. The shipped model learned feature version 1
/// (Ansor's 164 features), the prefix of this build's layout (cost/features.hpp), and ranks by
/// it; a model of more than kNumFeatures or fewer than 164 is refused. It was trained on one
/// machine (its vector width
/// and caches); on another it still ranks better than chance, but tuning there is what makes a
/// kernel fast.
///
/// Errors are loom::user_error with ids `loom.cost.E970` – `loom.cost.E972`.
#ifndef LOOM_COST_PRETRAINED_HPP
#define LOOM_COST_PRETRAINED_HPP

#include "loom/cost/model.hpp"

#include <memory>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace cost {

/// Where the pretrained model is looked for (see the file comment): `LOOM_COST_MODEL` when set,
/// else the shipped file's path. Empty when `LOOM_COST_MODEL=none`. The file may not exist.
LOOM_DECL std::string pretrained_model_path();

/// The same for the GPU model: `LOOM_GPU_COST_MODEL` when set, else the shipped gpu.model.
LOOM_DECL std::string pretrained_gpu_model_path();

/// Reads the model at `path`. Throws `[loom.cost.E970]` when the file cannot be opened,
/// `[loom.cost.E971]` when it is not a saved GbdtCostModel (GbdtCostModel::load's own errors are
/// rethrown under this id, with its message) and `[loom.cost.E972]` when it was trained on a
/// feature count this build cannot read.
LOOM_DECL std::shared_ptr<const GbdtCostModel> load_pretrained_model(const std::string& path);

/// The pretrained model from pretrained_model_path(), read once per process and path
/// (thread-safe). Null when `LOOM_COST_MODEL=none`, or when the file cannot be read: then one
/// warning with the error's id and the path goes to stderr (once per path) and callers fall back
/// (the default schedule, random first rounds).
LOOM_DECL std::shared_ptr<const GbdtCostModel> pretrained_cost_model();

/// The pretrained GPU model from pretrained_gpu_model_path(), as pretrained_cost_model() reads
/// the CPU one.
LOOM_DECL std::shared_ptr<const GbdtCostModel> pretrained_gpu_cost_model();

}  // namespace cost
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/cost/impl/pretrained.ipp"
#endif

#endif  // LOOM_COST_PRETRAINED_HPP

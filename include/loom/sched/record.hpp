/// \file
/// Step records (layer sched/): the JSON form of transform steps, the part of a tuning record that
/// describes a schedule. A history read back and replayed on the same DAG rebuilds the same
/// state (sched::replay), so only steps are ever stored, never stages (Ansor's records do the
/// same).
///
/// Each step is one compact JSON array, Ansor-like: its tag from step_tag() followed by its
/// fields in declaration order. Stages are named by their stable names, iterators by position
/// in the stage's loop order at that point of the history, unset split lengths are `null`, and
/// annotations and memory scopes are written as annotation_name() / scope_name() strings:
///
/// | tag    | fields                                                  | step                     |
/// |--------|---------------------------------------------------------|--------------------------|
/// | `SP`   | stage, iter, extent, [lengths or null]                  | SplitStep                |
/// | `FSP`  | stage, iter, src_step, n_split                          | FollowSplitStep          |
/// | `FFSP` | stage, iter, [src_steps], level, factor_or_nparts (bool)| FollowFusedSplitStep     |
/// | `FU`   | stage, [iters]                                          | FuseStep                 |
/// | `RE`   | stage, [order]                                          | ReorderStep              |
/// | `AN`   | stage, iter, annotation                                 | AnnotationStep           |
/// | `CA`   | stage, target stage, target iter                        | ComputeAtStep            |
/// | `CR`   | stage                                                   | ComputeRootStep          |
/// | `CI`   | stage                                                   | ComputeInlineStep        |
/// | `CHR`  | stage, scope, [reader stages]                           | CacheReadStep            |
/// | `CHW`  | stage, scope                                            | CacheWriteStep           |
/// | `PR`   | stage, iter, auto_unroll_max_step                       | PragmaStep               |
/// | `SA`   | stage, axis, factor, offset                             | StorageAlignStep         |
/// | `SPM`  | stage, axis, lanes, per_lane, unit                      | StoragePermuteStep       |
/// | `SSW`  | stage, bytes                                            | StorageSwizzleStep       |
/// | `SCK`  | stage, bytes                                            | StorageChunkStep         |
/// | `RF`   | stage, iter, factor_axis                                | RfactorStep              |
///
/// For example `["SP", "C", 0, 64, [8, null]]` splits loop 0 of stage C (extent 64) into three
/// loops whose innermost length is not chosen yet (a sketch).
///
/// Reading checks only the form of a record: tags, arity, JSON types, and that positions are not
/// negative. Whether a step is legal on its state is checked when it is applied (ids
/// loom.sched.E2xx below E250). Every malformed record, including text that is not JSON at all,
/// throws loom::user_error `[loom.sched.E250]` naming the step index and what is wrong; no
/// nlohmann exception escapes.
///
/// This header is the only place in sched/ that includes nlohmann/json: code that never reads or
/// writes records does not pay for it.
#ifndef LOOM_SCHED_RECORD_HPP
#define LOOM_SCHED_RECORD_HPP

#include "loom/sched/steps.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace sched {

/// One step as a JSON array: its tag, then its fields (see the table above).
nlohmann::json to_json(const Step& step);

/// Reads one step written by to_json(). Throws loom::user_error `[loom.sched.E250]` when `j` is
/// not a well-formed step record; the message then names it as step 0.
Step step_from_json(const nlohmann::json& j);

/// A history as a JSON array of step records, in order.
nlohmann::json history_to_json(const std::vector<Step>& steps);

/// Reads a history written by history_to_json(). Throws loom::user_error `[loom.sched.E250]`
/// naming the first malformed step by its index in the history.
std::vector<Step> history_from_json(const nlohmann::json& j);

/// A history as one line of compact JSON (what a tuning log stores per schedule).
std::string to_record(const std::vector<Step>& steps);

/// Parses a line written by to_record(). Throws loom::user_error `[loom.sched.E250]` when the
/// text is not JSON or not a well-formed history.
std::vector<Step> from_record(const std::string& text);

}  // namespace sched
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/sched/impl/record.ipp"
#endif

#endif  // LOOM_SCHED_RECORD_HPP

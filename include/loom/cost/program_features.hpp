/// \file
/// `ProgramFeatures`: the feature matrix of one program (layer cost/), the unit the cost model
/// consumes. It lives in its own header so that the feature extractor (cost/features.hpp) and
/// the cost models (cost/model.hpp) share one definition without including each other.
#ifndef LOOM_COST_PROGRAM_FEATURES_HPP
#define LOOM_COST_PROGRAM_FEATURES_HPP

#include "loom/config.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cost {

/// The features of one program: `num_rows` rows of `num_features` floats, row-major. A row
/// describes one buffer the program writes (see cost::extract_features); a program's predicted
/// score is the sum of its rows' scores. A program with no row (nothing stored, or a program
/// whose lowering failed) has `values` empty and `num_rows == 0`.
struct ProgramFeatures {
  std::vector<float> values;  ///< num_rows × num_features, row-major
  int num_rows = 0;
  int num_features = 0;
};

}  // namespace cost
LOOM_END_NAMESPACE

#endif  // LOOM_COST_PROGRAM_FEATURES_HPP

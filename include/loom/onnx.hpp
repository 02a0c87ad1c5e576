/// \file
/// ONNX import (link the CMake target `loom::onnx`; Debian `libonnx-dev libprotobuf-dev`): reads
/// a `.onnx` model into a `net::Network` (loom/net/network.hpp), its initializers becoming the
/// network's constants, ready to tune and compile like a network built in C++.
///
/// ```cpp
/// OnnxModel m = import_onnx("resnet50.onnx");
/// std::cout << *m.network;                         // groups, tasks, FLOPs, memory plan
/// tune(*m.network, scheduler_options);             // loom/network.hpp
/// CompiledNetwork c = compile(m.network, {.records = "resnet50.jsonl"});
/// ```
///
/// Import runs the graph passes a compiler does once, on the constants:
///  - constant subgraphs are folded: a node whose inputs are all known (initializers, `Constant`
///    nodes, the static shapes `Shape` reads) is evaluated by the reference interpreter, so the
///    shape arithmetic exporters emit (Shape, Gather, Unsqueeze, Concat, Reshape) leaves
///    nothing to run;
///  - a BatchNormalization that follows a Conv or ConvTranspose (its only reader) is folded
///    into the convolution's weight and bias; any other one becomes one scale and shift;
///  - Identity and Dropout (inference) disappear;
///  - a layer norm that an exporter wrote out node by node (ReduceMean, Sub, Pow, ReduceMean,
///    Add, Sqrt, Div, Mul, Add: opsets before 17) becomes one layer_norm again.
///
/// Supported: the default domain (`ai.onnx`) at opsets 7 to 17, float32 data (int64 and int32
/// for the shape arithmetic, float64 where an operator allows it). The operators, with the
/// attributes each accepts, are the table in loom/onnx/impl/import.ipp
/// (`supported_onnx_operators()` lists them). A model with anything else fails at import with
/// loom::user_error naming the node, its op type and what is unsupported:
///
/// | id     | what                                                                      |
/// |--------|---------------------------------------------------------------------------|
/// | E1101  | the file cannot be read or is not an ONNX model (truncated, corrupt)     |
/// | E1102  | an operator (or operator domain) loom does not import                     |
/// | E1103  | an attribute, or an attribute value, the operator's import does not support |
/// | E1104  | a tensor of an unsupported element type                                  |
/// | E1105  | a malformed graph or node (missing input, wrong arity, bad initializer)  |
/// | E1106  | a dimension without a value (a symbolic batch size not given in options) |
/// | E1107  | an input that must be constant (a Reshape's shape) is computed at run time |
/// | E1108  | a TensorProto file (`.pb`) that cannot be read                           |
#ifndef LOOM_ONNX_HPP
#define LOOM_ONNX_HPP

#include "loom/config.hpp"
#if !LOOM_WITH_ONNX
// clang-format off: the header test finds the target this #error names on its line
#error "loom/onnx.hpp needs the ONNX importer: link the CMake target loom::onnx (apt install libonnx-dev libprotobuf-dev)"
// clang-format on
#endif
#include "loom/net/network.hpp"
#include "loom/runtime/host_tensor.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE

struct OnnxOptions {
  /// Values of the model's symbolic dimensions by name (`{"batch_size", 1}`); a symbolic or
  /// unknown dimension with no value here is an error (E1106).
  std::map<std::string, int64_t> dimensions;
  /// Model inputs whose values are fixed when the model is imported, by name: they become
  /// constants (and fold), and the network no longer takes them. For the inputs an operator
  /// needs constant (a Reshape's shape, a Gather's indices, a Clip's bounds) when a model
  /// feeds them from outside (E1107 otherwise).
  std::map<std::string, HostTensor> constant_inputs;
  /// Fold BatchNormalization into the convolution before it (see the top of this file).
  bool fold_batch_norm = true;
};

/// What the graph passes did, for `loomc info` and tests.
struct OnnxImportStats {
  int nodes = 0;             ///< nodes in the model's graph
  int folded_constants = 0;  ///< nodes evaluated at import (constant subgraphs)
  int folded_batch_norms = 0;
  int dropped = 0;            ///< Identity and Dropout nodes
  int fused_layer_norms = 0;  ///< layer norms written out as nine nodes, imported as one
};

/// An imported model: the network (inputs and outputs in the model's order) and their ONNX
/// names.
struct OnnxModel {
  std::shared_ptr<const net::Network> network;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  int64_t opset = 0;
  OnnxImportStats stats;
};

/// Imports the model in file `path` (see the top of this file).
OnnxModel import_onnx(const std::string& path, const OnnxOptions& options = {});
/// Imports a serialized ModelProto; `what` names it in error messages.
OnnxModel import_onnx_bytes(const std::string& bytes, const OnnxOptions& options = {},
                            const std::string& what = "<bytes>");

/// Reads a serialized TensorProto (the `.pb` files of ONNX's test data). E1108 / E1104.
HostTensor read_tensor_proto(const std::string& path);

/// The op types the importer accepts, sorted.
std::vector<std::string> supported_onnx_operators();

LOOM_END_NAMESPACE

#endif  // LOOM_ONNX_HPP

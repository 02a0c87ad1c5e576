// Bodies of loom/onnx.hpp: the ONNX importer. Compiled once, in the library behind the CMake
// target loom::onnx (cmake/LoomDependencies.cmake compiles this file): the one place that
// includes ONNX's and protobuf's headers. This file is the driver, reading the model's graph,
// inputs and initializers and converting its nodes in order through the op table; the parts it
// includes, in this order (each uses the ones before it), are the tensors, the importer's shared
// state and one file per operator family.
#include "loom/onnx.hpp"

#include "loom/error.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "loom/onnx/impl/tensor_data.ipp"
#include "loom/onnx/impl/importer.ipp"
#include "loom/onnx/impl/convert_elementwise.ipp"
#include "loom/onnx/impl/convert_conv.ipp"
#include "loom/onnx/impl/convert_matmul.ipp"
#include "loom/onnx/impl/convert_norm.ipp"
#include "loom/onnx/impl/convert_reduce.ipp"
#include "loom/onnx/impl/convert_shape.ipp"
#include "loom/onnx/impl/convert_constant.ipp"

LOOM_BEGIN_NAMESPACE
namespace detail {

// --- the op table --------------------------------------------------------------------------
//
// Every operator loom imports has one entry here, and supported_onnx_operators() lists them.
// Before a node's converter runs, the driver refuses an attribute its entry does not list
// (E1103) and an input count outside its range (E1105), so a converter reads only what it
// knows how to honour. How to add an operator:
//  1. importer.ipp: declare its converter, `void xxx(const ::onnx::NodeProto& n)`, in class
//     Importer under the file of its family (or give an existing converter the new op type, as
//     the unary activations share `unary`).
//  2. convert_<family>.ipp: define it. Inputs come from in(i), or constant_in(i, what) where the
//     value must be known at import (E1107); attributes from attr_int/attr_float/attr_ints/
//     attr_string; a value it cannot import is refused by unsupported_attribute (E1103) or
//     LOOM_USER_CHECK with its loom.onnx id; each output is recorded with emit(), which folds
//     a compute whose inputs are all constant, or set_output().
//  3. Here: its entry, with every attribute the converter reads and its input count.
//  4. Tests: a small model in tests/onnx/test_import.cpp; ONNX's node tests of the operator
//     (test_node_conformance.cpp) move from refused to pass, and README.md gives the counts.
using Handler = void (Importer::*)(const ::onnx::NodeProto&);

struct OpInfo {
  Handler handler;
  std::vector<std::string> attributes;  // the attributes the import understands
  int min_inputs, max_inputs;
};

inline const std::map<std::string, OpInfo>& op_table() {
  static const std::map<std::string, OpInfo> table = [] {
    std::map<std::string, OpInfo> t;
    for (const char* op :
         {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Abs", "Neg", "Reciprocal",
          "Floor", "Ceil", "Sin", "Cos", "HardSwish", "Softplus", "Softsign", "Mish"})
      t[op] = {&Importer::unary, {}, 1, 1};
    t["LeakyRelu"] = {&Importer::unary, {"alpha"}, 1, 1};
    t["Elu"] = {&Importer::unary, {"alpha"}, 1, 1};
    t["Selu"] = {&Importer::unary, {"alpha", "gamma"}, 1, 1};
    t["HardSigmoid"] = {&Importer::unary, {"alpha", "beta"}, 1, 1};
    t["Gelu"] = {&Importer::unary, {"approximate"}, 1, 1};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"})
      t[op] = {&Importer::binary, {}, 2, 2};
    for (const char* op : {"Max", "Min", "Sum", "Mean"})
      t[op] = {&Importer::variadic, {}, 1, 1 << 20};
    t["Clip"] = {&Importer::clip, {"min", "max"}, 1, 3};
    t["PRelu"] = {&Importer::prelu, {}, 2, 2};
    t["Conv"] = {&Importer::conv,
                 {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"},
                 2,
                 3};
    t["ConvTranspose"] = {&Importer::conv_transpose,
                          {"auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                           "output_shape", "pads", "strides"},
                          2,
                          3};
    t["Gemm"] = {&Importer::gemm, {"alpha", "beta", "transA", "transB"}, 2, 3};
    t["MatMul"] = {&Importer::matmul, {}, 2, 2};
    t["BatchNormalization"] = {
        &Importer::batch_norm, {"epsilon", "momentum", "training_mode", "spatial"}, 5, 5};
    t["LayerNormalization"] = {&Importer::layer_norm, {"axis", "epsilon", "stash_type"}, 2, 3};
    t["Softmax"] = {&Importer::softmax, {"axis"}, 1, 1};
    t["LogSoftmax"] = {&Importer::softmax, {"axis"}, 1, 1};
    t["MaxPool"] = {
        &Importer::pool,
        {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
        1,
        1};
    t["AveragePool"] = {
        &Importer::pool,
        {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"},
        1,
        1};
    t["GlobalAveragePool"] = {&Importer::global_pool, {}, 1, 1};
    t["GlobalMaxPool"] = {&Importer::global_pool, {}, 1, 1};
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"})
      t[op] = {&Importer::reduce, {"axes", "keepdims", "noop_with_empty_axes"}, 1, 2};
    t["Reshape"] = {&Importer::reshape, {"allowzero", "shape"}, 1, 2};
    t["Flatten"] = {&Importer::flatten, {"axis"}, 1, 1};
    t["Squeeze"] = {&Importer::squeeze, {"axes"}, 1, 2};
    t["Unsqueeze"] = {&Importer::unsqueeze, {"axes"}, 1, 2};
    t["Transpose"] = {&Importer::transpose, {"perm"}, 1, 1};
    t["Concat"] = {&Importer::concat, {"axis"}, 1, 1 << 20};
    t["Slice"] = {&Importer::slice, {"axes", "ends", "starts"}, 1, 5};
    t["Split"] = {&Importer::split, {"axis", "split"}, 1, 2};
    t["Gather"] = {&Importer::gather, {"axis"}, 2, 2};
    t["Shape"] = {&Importer::shape, {"end", "start"}, 1, 1};
    t["Size"] = {&Importer::size, {}, 1, 1};
    t["Cast"] = {&Importer::cast, {"to", "saturate"}, 1, 1};
    t["Constant"] = {&Importer::constant,
                     {"value", "value_float", "value_floats", "value_int", "value_ints",
                      "sparse_value", "value_string", "value_strings"},
                     0,
                     0};
    t["ConstantOfShape"] = {&Importer::constant_of_shape, {"value"}, 1, 1};
    t["Expand"] = {&Importer::expand, {}, 2, 2};
    t["Pad"] = {&Importer::pad, {"mode", "pads", "value"}, 1, 4};
    t["Identity"] = {&Importer::identity, {}, 1, 1};
    t["Dropout"] = {&Importer::identity, {"ratio", "seed", "is_test"}, 1, 3};
    t["Tile"] = {&Importer::tile, {}, 2, 2};
    t["Range"] = {&Importer::range, {}, 3, 3};
    return t;
  }();
  return table;
}

// --- the graph -----------------------------------------------------------------------------

inline OnnxModel Importer::run(const ::onnx::ModelProto& model) {
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
  if (model.opset_import_size() == 0) opset_ = 1;
  LOOM_USER_CHECK(model.has_graph(), "loom.onnx.E1101")
      << what_ << " has no graph: not an ONNX model";
  const auto& g = model.graph();
  stats_.nodes = g.node_size();

  OnnxModel result;
  result.opset = opset_;
  for (const auto& init : g.initializer()) {
    LOOM_USER_CHECK(!init.name().empty(), "loom.onnx.E1105")
        << what_ << ": an initializer has no name";
    values_[init.name()] = from_tensor_proto(init, init.name());
  }
  std::vector<ir::Tensor> inputs;
  for (const auto& vi : g.input()) {
    if (values_.count(vi.name())) continue;  // an initializer listed as an input (IR version < 4)
    if (auto c = options_.constant_inputs.find(vi.name()); c != options_.constant_inputs.end()) {
      const HostTensor& h = c->second;
      LOOM_USER_CHECK(static_cast<int64_t>(h.bytes.size()) == h.num_elements() * h.dtype.bytes(),
                      "loom.onnx.E1105")
          << what_ << ": the constant given for input '" << vi.name() << "' has " << h.bytes.size()
          << " bytes for its shape " << shape_string(h.shape);
      values_[vi.name()] = make_constant(
          vi.name(), h.dtype, h.shape,
          std::make_shared<std::vector<unsigned char>>(h.bytes.begin(), h.bytes.end()));
      continue;
    }
    LOOM_USER_CHECK(vi.type().has_tensor_type(), "loom.onnx.E1104")
        << what_ << ": input '" << vi.name()
        << "' is not a tensor (sequences and maps are not imported)";
    const auto& tt = vi.type().tensor_type();
    ir::DType dtype;
    LOOM_USER_CHECK(dtype_of(tt.elem_type(), &dtype), "loom.onnx.E1104")
        << what_ << ": input '" << vi.name() << "' holds " << elem_type_name(tt.elem_type())
        << "; loom imports FLOAT, DOUBLE, INT32 and INT64 tensors";
    LOOM_USER_CHECK(tt.has_shape(), "loom.onnx.E1106")
        << what_ << ": input '" << vi.name() << "' has no shape; loom compiles for static shapes";
    Shape shape;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      if (dim.has_dim_value() && dim.dim_value() > 0) {
        shape.push_back(dim.dim_value());
        continue;
      }
      auto it = dim.has_dim_param() ? options_.dimensions.find(dim.dim_param())
                                    : options_.dimensions.end();
      LOOM_USER_CHECK(it != options_.dimensions.end(), "loom.onnx.E1106")
          << what_ << ": dimension " << d << " of input '" << vi.name() << "' is "
          << (dim.has_dim_param() ? "'" + dim.dim_param() + "'" : std::string("unknown"))
          << "; give its value in OnnxOptions::dimensions (loomc: --dim "
          << (dim.has_dim_param() ? dim.dim_param() : "NAME") << "=N)";
      shape.push_back(it->second);
    }
    ir::Tensor p = ir::make_placeholder(fresh_name(vi.name()), dtype, shape);
    values_[vi.name()] = Value{p, nullptr};
    inputs.push_back(p);
    result.input_names.push_back(vi.name());
  }
  LOOM_USER_CHECK(g.output_size() > 0, "loom.onnx.E1105") << what_ << ": the graph has no outputs";

  // Who reads what, to find the BatchNormalization nodes that fold into their convolution.
  auto& producer = producer_;
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) ++readers_[i];
    for (const auto& o : n.output()) producer[o] = &n;
  }
  for (const auto& o : g.output()) ++readers_[o.name()];
  if (options_.fold_batch_norm) {
    for (const auto& n : g.node()) {
      if (n.op_type() != "BatchNormalization" || n.input_size() != 5 || n.output_size() < 1)
        continue;
      bool ok = n.domain().empty() || n.domain() == "ai.onnx";
      for (int i = 1; i < n.output_size(); ++i) ok = ok && n.output(i).empty();
      for (const auto& a : n.attribute()) ok = ok && !(a.name() == "training_mode" && a.i() != 0);
      for (int i = 1; ok && i < 5; ++i) {
        auto it = values_.find(n.input(i));
        ok = it != values_.end() && it->second.constant();
      }
      auto p = producer.find(n.input(0));
      ok = ok && p != producer.end() &&
           (p->second->op_type() == "Conv" || p->second->op_type() == "ConvTranspose") &&
           readers_[n.input(0)] == 1 && p->second->output_size() == 1;
      if (ok) bn_after_[n.input(0)] = &n;
    }
  }

  const auto& table = op_table();
  for (const auto& n : g.node()) {
    node_ = &n;
    LOOM_USER_CHECK(n.domain().empty() || n.domain() == "ai.onnx", "loom.onnx.E1102")
        << what_ << ": " << where() << " is in domain '" << n.domain()
        << "'; loom imports the default ONNX domain";
    auto it = table.find(n.op_type());
    LOOM_USER_CHECK(it != table.end(), "loom.onnx.E1102")
        << what_ << ": " << where() << ": loom does not import the operator " << n.op_type();
    const OpInfo& info = it->second;
    for (const auto& a : n.attribute())
      LOOM_USER_CHECK(std::find(info.attributes.begin(), info.attributes.end(), a.name()) !=
                          info.attributes.end(),
                      "loom.onnx.E1103")
          << what_ << ": " << where() << ": attribute '" << a.name()
          << "' is not supported by loom's import of " << n.op_type();
    LOOM_USER_CHECK(n.input_size() >= info.min_inputs && n.input_size() <= info.max_inputs &&
                        n.output_size() >= 1,
                    "loom.onnx.E1105")
        << what_ << ": " << where() << " has " << n.input_size() << " inputs and "
        << n.output_size() << " outputs; " << n.op_type() << " takes " << info.min_inputs << " to "
        << info.max_inputs << " inputs";
    try {
      (this->*info.handler)(n);
    } catch (const user_error& e) {
      const std::string msg = e.what();
      if (msg.rfind("[loom.onnx.", 0) == 0) throw;
      LOOM_USER_CHECK(false, "loom.onnx.E1105") << what_ << ": " << where() << ": " << msg;
    }
  }
  node_ = nullptr;

  std::vector<ir::Tensor> outputs;
  for (const auto& o : g.output()) {
    auto it = values_.find(o.name());
    LOOM_USER_CHECK(it != values_.end(), "loom.onnx.E1105")
        << what_ << ": output '" << o.name() << "' is not computed by any node";
    ir::Tensor t = it->second.t;
    // A network's outputs are computed by it: an output that is an input or a constant (an
    // Identity model, a folded graph) or already another output gets a copy.
    const bool repeated = std::any_of(outputs.begin(), outputs.end(),
                                      [&](const ir::Tensor& u) { return u.same_as(t); });
    if (t.is_placeholder() || repeated)
      t = untyped::map(fresh_name(o.name() + "_out"), "copy", {t},
                       [](const std::vector<ir::Expr>& v) { return v[0]; });
    outputs.push_back(t);
    result.output_names.push_back(o.name());
  }
  // The constants the outputs read.
  std::vector<net::Constant> constants;
  std::unordered_set<const ir::TensorNode*> seen;
  std::vector<ir::Tensor> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    ir::Tensor x = stack.back();
    stack.pop_back();
    if (!seen.insert(x.get()).second) continue;
    if (x.is_placeholder()) {
      if (auto c = constants_.find(x.get()); c != constants_.end())
        constants.push_back({x, c->second});
      continue;
    }
    for (const ir::Tensor& y : ir::input_tensors(x)) stack.push_back(y);
  }
  std::sort(constants.begin(), constants.end(), [](const net::Constant& a, const net::Constant& b) {
    return a.tensor.name() < b.tensor.name();
  });
  // Inputs the outputs never read stay inputs (the caller passes them all, in the model's
  // order); the network takes them as they are.
  // The importer folded what OnnxOptions::fold_batch_norm asks for, on the ONNX graph.
  result.network = std::make_shared<net::Network>(inputs, std::move(constants), outputs,
                                                  net::NetworkOptions{.fold_batch_norm = false});
  result.stats = stats_;
  return result;
}

}  // namespace detail

OnnxModel import_onnx_bytes(const std::string& bytes, const OnnxOptions& options,
                            const std::string& what) {
  ::onnx::ModelProto model;
  LOOM_USER_CHECK(!bytes.empty(), "loom.onnx.E1101") << what << " is empty";
  LOOM_USER_CHECK(model.ParseFromString(bytes), "loom.onnx.E1101")
      << what << " is not a valid ONNX model (the protobuf does not parse: truncated or corrupt)";
  detail::Importer importer(options, what);
  return importer.run(model);
}

OnnxModel import_onnx(const std::string& path, const OnnxOptions& options) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "loom.onnx.E1101") << "cannot open '" << path << "'";
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return import_onnx_bytes(bytes, options, "'" + path + "'");
}

HostTensor read_tensor_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "loom.onnx.E1108") << "cannot open '" << path << "'";
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::onnx::TensorProto t;
  LOOM_USER_CHECK(!bytes.empty() && t.ParseFromString(bytes), "loom.onnx.E1108")
      << "'" << path << "' is not a serialized ONNX TensorProto";
  ir::DType dtype;
  LOOM_USER_CHECK(detail::dtype_of(t.data_type(), &dtype), "loom.onnx.E1104")
      << "'" << path << "' holds " << detail::elem_type_name(t.data_type())
      << "; loom reads FLOAT, DOUBLE, INT32 and INT64 tensors";
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  const auto data = detail::tensor_bytes(t, dtype, shape, "'" + path + "'");
  HostTensor h(t.name(), dtype, shape);
  if (!data.empty()) std::memcpy(h.bytes.data(), data.data(), data.size());
  return h;
}

std::vector<std::string> supported_onnx_operators() {
  std::vector<std::string> ops;
  for (const auto& [name, info] : detail::op_table()) ops.push_back(name);
  return ops;
}

LOOM_END_NAMESPACE

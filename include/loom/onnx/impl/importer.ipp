// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after tensor_data.ipp): the
// Importer, the state one import carries from node to node, and what every converter shares:
// reading the node's inputs and attributes, naming, folding a compute over constants, and
// recording outputs. The converters (convert_*.ipp) are its members; the driver and the op table
// are in import.ipp.
#include "loom/dag/evaluate.hpp"
#include "loom/error.hpp"
#include "loom/ops/untyped.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace detail {

namespace untyped = ops::untyped;

class Importer {
 public:
  Importer(const OnnxOptions& options, std::string what)
      : options_(options), what_(std::move(what)) {}

  OnnxModel run(const ::onnx::ModelProto& model);

  // --- node translations: the op table (import.ipp) names them ---------------------------
  // convert_elementwise.ipp
  void unary(const ::onnx::NodeProto& n);
  void binary(const ::onnx::NodeProto& n);
  void variadic(const ::onnx::NodeProto& n);
  void clip(const ::onnx::NodeProto& n);
  void prelu(const ::onnx::NodeProto& n);
  void cast(const ::onnx::NodeProto& n);
  void identity(const ::onnx::NodeProto& n);
  // convert_conv.ipp
  void conv(const ::onnx::NodeProto& n);
  void conv_transpose(const ::onnx::NodeProto& n);
  // convert_matmul.ipp
  void gemm(const ::onnx::NodeProto& n);
  void matmul(const ::onnx::NodeProto& n);
  // convert_norm.ipp
  void batch_norm(const ::onnx::NodeProto& n);
  void layer_norm(const ::onnx::NodeProto& n);
  void softmax(const ::onnx::NodeProto& n);
  // convert_reduce.ipp
  void pool(const ::onnx::NodeProto& n);
  void global_pool(const ::onnx::NodeProto& n);
  void reduce(const ::onnx::NodeProto& n);
  // convert_shape.ipp
  void reshape(const ::onnx::NodeProto& n);
  void flatten(const ::onnx::NodeProto& n);
  void squeeze(const ::onnx::NodeProto& n);
  void unsqueeze(const ::onnx::NodeProto& n);
  void transpose(const ::onnx::NodeProto& n);
  void concat(const ::onnx::NodeProto& n);
  void slice(const ::onnx::NodeProto& n);
  void split(const ::onnx::NodeProto& n);
  void gather(const ::onnx::NodeProto& n);
  void expand(const ::onnx::NodeProto& n);
  void pad(const ::onnx::NodeProto& n);
  void tile(const ::onnx::NodeProto& n);
  // convert_constant.ipp
  void constant(const ::onnx::NodeProto& n);
  void constant_of_shape(const ::onnx::NodeProto& n);
  void shape(const ::onnx::NodeProto& n);
  void size(const ::onnx::NodeProto& n);
  void range(const ::onnx::NodeProto& n);

 private:
  // --- errors ------------------------------------------------------------------------------
  std::string where() const {
    std::string s =
        "node '" +
        (node_->name().empty() ? node_->output_size() ? node_->output(0) : std::string("?")
                               : node_->name()) +
        "' (" + node_->op_type() + ")";
    return s;
  }

  // --- values ------------------------------------------------------------------------------
  bool has_input(int i) const { return i < node_->input_size() && !node_->input(i).empty(); }
  const Value& in(int i) const {
    LOOM_USER_CHECK(has_input(i), "loom.onnx.E1105")
        << what_ << ": " << where() << " has no input " << i;
    auto it = values_.find(node_->input(i));
    LOOM_USER_CHECK(it != values_.end(), "loom.onnx.E1105")
        << what_ << ": " << where() << " reads '" << node_->input(i)
        << "', which no earlier node, input or initializer defines (are the nodes in topological "
           "order?)";
    return it->second;
  }
  const Value& constant_in(int i, const char* what) const {
    const Value& v = in(i);
    LOOM_USER_CHECK(v.constant(), "loom.onnx.E1107")
        << what_ << ": " << where() << ": input " << i << " (" << what << ", '" << node_->input(i)
        << "') is computed at run time; loom needs it constant (known when the model is imported)";
    return v;
  }
  void set_output(int i, Value v) {
    if (i >= node_->output_size() || node_->output(i).empty()) return;
    values_[node_->output(i)] = std::move(v);
  }
  void set_output(int i, const ir::Tensor& t) { set_output(i, Value{t, nullptr}); }
  std::string fresh_name(const std::string& onnx_name);
  std::string out_name(int i = 0) {
    return fresh_name(i < node_->output_size() ? node_->output(i) : node_->op_type());
  }
  Value make_constant(const std::string& onnx_name, ir::DType t, Shape shape, Bytes data) {
    ir::Tensor p = ir::make_placeholder(fresh_name(onnx_name), t, std::move(shape));
    constants_[p.get()] = data;
    return Value{p, std::move(data)};
  }
  Value constant_f32(const std::string& name, Shape shape, const std::vector<double>& v) {
    std::vector<float> f(v.begin(), v.end());
    return make_constant(name, ir::DType::f32(), std::move(shape), bytes_of(f));
  }
  Value constant_i64(const std::string& name, Shape shape, const std::vector<int64_t>& v) {
    return make_constant(name, ir::DType::i64(), std::move(shape), bytes_of(v));
  }
  Value from_tensor_proto(const ::onnx::TensorProto& t, const std::string& name);
  // Evaluates `t` (a compute over constants only) with the reference interpreter.
  Value fold(const ir::Tensor& t);
  // `x` in a new shape: a relabelled constant, or a reshape compute.
  Value reshaped(const Value& x, const Shape& shape, const std::string& name);

  // --- attributes --------------------------------------------------------------------------
  const ::onnx::AttributeProto* attr(const char* name) const {
    for (const auto& a : node_->attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t attr_int(const char* name, int64_t fallback) const {
    const auto* a = attr(name);
    return a ? a->i() : fallback;
  }
  float attr_float(const char* name, float fallback) const {
    const auto* a = attr(name);
    return a ? a->f() : fallback;
  }
  std::string attr_string(const char* name, const std::string& fallback) const {
    const auto* a = attr(name);
    return a ? a->s() : fallback;
  }
  Shape attr_ints(const char* name, Shape fallback = {}) const {
    const auto* a = attr(name);
    return a ? Shape(a->ints().begin(), a->ints().end()) : fallback;
  }
  /// A window attribute (kernel_shape, strides, dilations, pads, output_padding): `count`
  /// values, each at least `min_value`, `fallback` for each when absent; E1103 otherwise.
  Shape window_attr(const char* name, size_t count, int64_t fallback, int64_t min_value) const {
    Shape v = attr_ints(name, Shape(count, fallback));
    bool ok = v.size() == count;
    for (int64_t x : v) ok = ok && x >= min_value;
    if (!ok)
      unsupported_attribute(name, "is " + shape_string(v) + " (it must give " +
                                      std::to_string(count) + " values, each at least " +
                                      std::to_string(min_value) + ")");
    return v;
  }
  [[noreturn]] void unsupported_attribute(const char* name, const std::string& why) const {
    throw user_error("[loom.onnx.E1103] " + what_ + ": " + where() + ": attribute '" + name + "' " +
                     why);
  }

  // --- shared pieces -----------------------------------------------------------------------
  ir::Tensor elementwise(const std::vector<Value>& inputs,
                         const std::function<ir::Expr(const std::vector<ir::Expr>&)>& f,
                         const std::string& tag);
  void emit(const ir::Tensor& t, const std::vector<Value>& read, int output = 0);
  std::vector<int64_t> window_pads(const Shape& in_spatial, const Shape& kernel,
                                   const Shape& stride, const Shape& dilation);
  std::vector<int> int_axes(const Shape& axes, int rank) const;
  // Defined in convert_norm.ipp: Add (convert_elementwise.ipp) tries the layer norm pattern, and
  // the convolutions fold a batch norm's scale and shift.
  bool layer_norm_pattern(const ::onnx::NodeProto& add);
  using Affine = net::ChannelAffine;
  // A BatchNormalization node as one scale and shift per channel (its parameters constant).
  Affine batch_norm_affine(const ::onnx::NodeProto& bn, int64_t channels) const;
  // ops::layer_norm over the last axis of `x` (rank 1 to 4).
  ir::Tensor layer_norm_of(const Value& x, const Value& gamma, const Value& beta, double eps,
                           const std::string& name) const;

  const OnnxOptions& options_;
  std::string what_;
  int64_t opset_ = 0;
  const ::onnx::NodeProto* node_ = nullptr;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<const ir::TensorNode*, Bytes> constants_;
  std::unordered_set<std::string> names_;
  std::unordered_map<std::string, int> readers_;
  std::unordered_map<std::string, const ::onnx::NodeProto*> producer_;
  std::unordered_map<std::string, const ::onnx::NodeProto*> bn_after_;  // conv output -> its BN
  std::unordered_set<const ::onnx::NodeProto*> folded_bn_;
  OnnxImportStats stats_;
};

inline std::string Importer::fresh_name(const std::string& onnx_name) {
  std::string s;
  for (char c : onnx_name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  while (!s.empty() && s.front() == '_') s.erase(s.begin());
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s.front()))) s = "t" + s;
  std::string name = s;
  for (int k = 2; names_.count(name); ++k) name = s + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}

inline Value Importer::from_tensor_proto(const ::onnx::TensorProto& t, const std::string& name) {
  ir::DType dtype;
  LOOM_USER_CHECK(dtype_of(t.data_type(), &dtype), "loom.onnx.E1104")
      << what_ << ": tensor '" << name << "' holds " << elem_type_name(t.data_type())
      << "; loom imports FLOAT, DOUBLE, INT32 and INT64 tensors";
  Shape shape(t.dims().begin(), t.dims().end());
  auto bytes = std::make_shared<std::vector<unsigned char>>(
      tensor_bytes(t, dtype, shape, what_ + ": tensor '" + name + "'"));
  return make_constant(name, dtype, std::move(shape), std::move(bytes));
}

inline Value Importer::fold(const ir::Tensor& t) {
  if (t.is_placeholder()) return Value{t, constants_.at(t.get())};
  // The placeholders it reads (all constants: fold is called only then).
  std::vector<ir::Tensor> inputs, stack{t};
  std::unordered_set<const ir::TensorNode*> seen{t.get()};
  while (!stack.empty()) {
    ir::Tensor x = stack.back();
    stack.pop_back();
    for (const ir::Tensor& y : ir::input_tensors(x)) {
      if (!seen.insert(y.get()).second) continue;
      if (y.is_placeholder())
        inputs.push_back(y);
      else
        stack.push_back(y);
    }
  }
  ComputeDAG dag(inputs, {t});
  std::vector<void*> buffers;
  for (const ir::Tensor& p : dag.inputs())
    buffers.push_back(const_cast<unsigned char*>(constants_.at(p.get())->data()));
  auto out = std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(t.num_elements()) *
                                                          t.dtype().bytes());
  buffers.push_back(out->data());
  evaluate(dag, buffers);
  ++stats_.folded_constants;
  return make_constant(t.name(), t.dtype(), t.shape(), std::move(out));
}

inline Value Importer::reshaped(const Value& x, const Shape& shape, const std::string& name) {
  if (x.constant()) {
    LOOM_USER_CHECK(checked_count(shape, what_) == x.t.num_elements(), "loom.onnx.E1105")
        << what_ << ": " << where() << ": " << shape_string(x.shape()) << " cannot become "
        << shape_string(shape);
    return make_constant(name, x.t.dtype(), shape, x.data);
  }
  if (shape == x.shape()) return x;
  return Value{untyped::reshape(x.t, shape, fresh_name(name)), nullptr};
}

inline ir::Tensor Importer::elementwise(
    const std::vector<Value>& inputs,
    const std::function<ir::Expr(const std::vector<ir::Expr>&)>& f, const std::string& tag) {
  const ir::DType t = inputs[0].t.dtype();
  for (const Value& v : inputs)
    LOOM_USER_CHECK(v.t.dtype() == t, "loom.onnx.E1105")
        << what_ << ": " << where() << ": inputs of types " << ir::to_string(t) << " and "
        << ir::to_string(v.t.dtype()) << " (ONNX requires one type)";
  // A one-element constant becomes an immediate in the expression (a scale, an epsilon, the
  // exponent of a Pow), not a kernel argument, unless every input is constant (then it folds)
  // or it is what gives the result its rank.
  bool all_constant = true;
  size_t rank = 0;
  for (const Value& v : inputs) {
    all_constant = all_constant && v.constant();
    rank = std::max(rank, v.shape().size());
  }
  std::vector<ir::Tensor> tensors;
  std::vector<int> slot(inputs.size(), -1);
  std::vector<ir::Expr> immediate(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = inputs[i];
    size_t other_rank = 0;
    for (size_t j = 0; j < inputs.size(); ++j)
      if (j != i) other_rank = std::max(other_rank, inputs[j].shape().size());
    if (!all_constant && v.constant() && v.t.num_elements() == 1 &&
        v.shape().size() <= other_rank) {
      immediate[i] = ir::make_const(t, as_doubles(v)[0]);
    } else {
      slot[i] = static_cast<int>(tensors.size());
      tensors.push_back(v.t);
    }
  }
  return untyped::map(out_name(), tag, tensors, [&](const std::vector<ir::Expr>& reads) {
    std::vector<ir::Expr> args(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      args[i] = slot[i] >= 0 ? reads[slot[i]] : immediate[i];
    return f(args);
  });
}

// Records output `output` of the node: folded when everything it read is constant.
inline void Importer::emit(const ir::Tensor& t, const std::vector<Value>& read, int output) {
  bool all_constant = !read.empty();
  for (const Value& v : read) all_constant = all_constant && v.constant();
  set_output(output, all_constant ? fold(t) : Value{t, nullptr});
}

inline std::vector<int> Importer::int_axes(const Shape& axes, int rank) const {
  std::vector<int> out;
  for (int64_t a : axes) out.push_back(untyped::normalize_axis(node_->op_type().c_str(), a, rank));
  return out;
}

// Begin and end padding of each spatial dim for auto_pad / pads: [b0, b1, ..., e0, e1, ...].
inline std::vector<int64_t> Importer::window_pads(const Shape& in, const Shape& kernel,
                                                  const Shape& stride, const Shape& dilation) {
  const size_t s = in.size();
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  Shape pads = window_attr("pads", 2 * s, 0, 0);
  if (auto_pad == "NOTSET") return pads;
  if (auto_pad == "VALID") return Shape(2 * s, 0);
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    unsupported_attribute("auto_pad", "is '" + auto_pad + "'");
  for (size_t d = 0; d < s; ++d) {
    const int64_t out = (in[d] + stride[d] - 1) / stride[d];
    const int64_t total =
        std::max<int64_t>((out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[d], 0);
    pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
    pads[d + s] = total - pads[d];
  }
  return pads;
}

}  // namespace detail
LOOM_END_NAMESPACE

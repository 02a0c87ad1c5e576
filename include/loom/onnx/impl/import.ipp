// Bodies of loom/onnx.hpp: the ONNX importer. Compiled once, in the library behind the CMake
// target loom::onnx: the one place that includes ONNX's and protobuf's headers.
#include "loom/onnx.hpp"

#include "loom/dag/evaluate.hpp"
#include "loom/error.hpp"
#include "loom/ops/conv.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/ops/norm.hpp"
#include "loom/ops/pool.hpp"
#include "loom/ops/untyped.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace detail_onnx {

namespace untyped = ops::untyped;
using Shape = std::vector<int64_t>;
using Bytes = std::shared_ptr<const std::vector<unsigned char>>;

// A value of the graph: a tensor, and its data when it is known at import (a constant).
struct Value {
  ir::Tensor t;
  Bytes data;
  bool constant() const { return data != nullptr; }
  const Shape& shape() const { return t.shape(); }
  int rank() const { return t.rank(); }
};

inline std::string shape_string(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

inline const char* elem_type_name(int t) {
  return ::onnx::TensorProto_DataType_IsValid(t)
             ? ::onnx::TensorProto_DataType_Name(static_cast<::onnx::TensorProto_DataType>(t))
                   .c_str()
             : "an invalid type";
}

// ONNX element type -> loom's; false for the types loom's IR has no tensors of.
inline bool dtype_of(int elem_type, ir::DType* out) {
  switch (elem_type) {
    case ::onnx::TensorProto::FLOAT: *out = ir::DType::f32(); return true;
    case ::onnx::TensorProto::DOUBLE: *out = ir::DType::f64(); return true;
    case ::onnx::TensorProto::INT32: *out = ir::DType::i32(); return true;
    case ::onnx::TensorProto::INT64: *out = ir::DType::i64(); return true;
    default: return false;
  }
}

inline int64_t checked_count(const Shape& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LOOM_USER_CHECK(d >= 0 && d <= (int64_t{1} << 40) && (d == 0 || n <= (int64_t{1} << 40) / d),
                    "loom.onnx.E1105")
        << what << " has an invalid shape " << shape_string(shape);
    n *= d;
  }
  return n;
}

// The elements of a TensorProto as bytes of loom's layout (little-endian, dense, row-major).
inline std::vector<unsigned char> tensor_bytes(const ::onnx::TensorProto& t, ir::DType dtype,
                                               const Shape& shape, const std::string& what) {
  LOOM_USER_CHECK(t.data_location() != ::onnx::TensorProto::EXTERNAL, "loom.onnx.E1105")
      << what
      << " keeps its data in an external file, which loom does not read; save the model "
         "with its weights inside (onnx.save(model, path, save_as_external_data=False))";
  const int64_t n = checked_count(shape, what);
  const size_t want = static_cast<size_t>(n) * dtype.bytes();
  std::vector<unsigned char> bytes(want);
  if (t.has_raw_data()) {
    LOOM_USER_CHECK(t.raw_data().size() == want, "loom.onnx.E1105")
        << what << ": shape " << shape_string(shape) << " needs " << want << " bytes, raw_data has "
        << t.raw_data().size();
    if (want) std::memcpy(bytes.data(), t.raw_data().data(), want);
    return bytes;
  }
  auto fill = [&](const auto& field) {
    LOOM_USER_CHECK(static_cast<int64_t>(field.size()) == n, "loom.onnx.E1105")
        << what << ": shape " << shape_string(shape) << " has " << n
        << " elements, the tensor holds " << field.size();
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == ir::DType::f32()) {
        const float v = static_cast<float>(field.Get(static_cast<int>(i)));
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      } else if (dtype == ir::DType::f64()) {
        const double v = static_cast<double>(field.Get(static_cast<int>(i)));
        std::memcpy(bytes.data() + 8 * i, &v, 8);
      } else if (dtype == ir::DType::i32()) {
        const int32_t v = static_cast<int32_t>(field.Get(static_cast<int>(i)));
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      } else {
        const int64_t v = static_cast<int64_t>(field.Get(static_cast<int>(i)));
        std::memcpy(bytes.data() + 8 * i, &v, 8);
      }
    }
  };
  if (dtype == ir::DType::f32())
    fill(t.float_data());
  else if (dtype == ir::DType::f64())
    fill(t.double_data());
  else if (dtype == ir::DType::i32())
    fill(t.int32_data());
  else
    fill(t.int64_data());
  return bytes;
}

// Reads any numeric constant as doubles / int64s.
inline std::vector<double> as_doubles(const Value& v) {
  const int64_t n = v.t.num_elements();
  std::vector<double> out(static_cast<size_t>(n));
  const unsigned char* p = v.data->data();
  const ir::DType t = v.t.dtype();
  for (int64_t i = 0; i < n; ++i) {
    if (t == ir::DType::f32()) {
      float x;
      std::memcpy(&x, p + 4 * i, 4);
      out[i] = x;
    } else if (t == ir::DType::f64()) {
      double x;
      std::memcpy(&x, p + 8 * i, 8);
      out[i] = x;
    } else if (t == ir::DType::i32()) {
      int32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      out[i] = x;
    } else {
      int64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      out[i] = static_cast<double>(x);
    }
  }
  return out;
}

inline std::vector<int64_t> as_ints(const Value& v) {
  const int64_t n = v.t.num_elements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  const unsigned char* p = v.data->data();
  const ir::DType t = v.t.dtype();
  for (int64_t i = 0; i < n; ++i) {
    if (t == ir::DType::i64()) {
      std::memcpy(&out[i], p + 8 * i, 8);
    } else if (t == ir::DType::i32()) {
      int32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      out[i] = x;
    } else if (t == ir::DType::f32()) {
      float x;
      std::memcpy(&x, p + 4 * i, 4);
      out[i] = static_cast<int64_t>(x);
    } else {
      double x;
      std::memcpy(&x, p + 8 * i, 8);
      out[i] = static_cast<int64_t>(x);
    }
  }
  return out;
}

template <class T>
Bytes bytes_of(const std::vector<T>& v) {
  auto b = std::make_shared<std::vector<unsigned char>>(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b->data(), v.data(), b->size());
  return b;
}

class Importer;
using Handler = void (Importer::*)(const ::onnx::NodeProto&);

struct OpInfo {
  Handler handler;
  std::vector<std::string> attributes;  // the attributes the import understands
  int min_inputs, max_inputs;
};

const std::map<std::string, OpInfo>& op_table();

class Importer {
 public:
  Importer(const OnnxOptions& options, std::string what)
      : options_(options), what_(std::move(what)) {}

  OnnxModel run(const ::onnx::ModelProto& model);

  // --- node translations (op_table) -------------------------------------------------------
  void unary(const ::onnx::NodeProto& n);
  void binary(const ::onnx::NodeProto& n);
  void variadic(const ::onnx::NodeProto& n);
  void clip(const ::onnx::NodeProto& n);
  void prelu(const ::onnx::NodeProto& n);
  void conv(const ::onnx::NodeProto& n);
  void conv_transpose(const ::onnx::NodeProto& n);
  void gemm(const ::onnx::NodeProto& n);
  void matmul(const ::onnx::NodeProto& n);
  void batch_norm(const ::onnx::NodeProto& n);
  void layer_norm(const ::onnx::NodeProto& n);
  void softmax(const ::onnx::NodeProto& n);
  void pool(const ::onnx::NodeProto& n);
  void global_pool(const ::onnx::NodeProto& n);
  void reduce(const ::onnx::NodeProto& n);
  void reshape(const ::onnx::NodeProto& n);
  void flatten(const ::onnx::NodeProto& n);
  void squeeze(const ::onnx::NodeProto& n);
  void unsqueeze(const ::onnx::NodeProto& n);
  void transpose(const ::onnx::NodeProto& n);
  void concat(const ::onnx::NodeProto& n);
  void slice(const ::onnx::NodeProto& n);
  void split(const ::onnx::NodeProto& n);
  void gather(const ::onnx::NodeProto& n);
  void shape(const ::onnx::NodeProto& n);
  void size(const ::onnx::NodeProto& n);
  void cast(const ::onnx::NodeProto& n);
  void constant(const ::onnx::NodeProto& n);
  void constant_of_shape(const ::onnx::NodeProto& n);
  void expand(const ::onnx::NodeProto& n);
  void pad(const ::onnx::NodeProto& n);
  void identity(const ::onnx::NodeProto& n);
  void tile(const ::onnx::NodeProto& n);
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
  Shape pads = attr_ints("pads", Shape(2 * s, 0));
  if (pads.size() != 2 * s)
    unsupported_attribute("pads", "has " + std::to_string(pads.size()) + " values for " +
                                      std::to_string(s) + " spatial dimensions");
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

// --- element-wise --------------------------------------------------------------------------

inline void Importer::unary(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const std::string& op = n.op_type();
  const ir::DType t = x.t.dtype();
  const bool is_float = t.code == ir::DType::Code::Float;
  auto c = [&](double v) { return ir::make_const(t, v); };
  auto call = [](ir::CallOp o, ir::Expr a) { return ir::Call::make(o, {std::move(a)}); };
  std::function<ir::Expr(const std::vector<ir::Expr>&)> f;
  const double alpha = attr_float("alpha", op == "LeakyRelu"     ? 0.01f
                                           : op == "HardSigmoid" ? 0.2f
                                           : op == "Selu"        ? 1.67326319217681884765625f
                                                                 : 1.0f);
  const double beta = attr_float("beta", 0.5f);
  const double gamma = attr_float("gamma", 1.05070102214813232421875f);
  static const std::map<std::string, ir::CallOp> calls = {
      {"Exp", ir::CallOp::exp},   {"Log", ir::CallOp::log},         {"Sqrt", ir::CallOp::sqrt},
      {"Tanh", ir::CallOp::tanh}, {"Sigmoid", ir::CallOp::sigmoid}, {"Erf", ir::CallOp::erf},
      {"Abs", ir::CallOp::abs},   {"Floor", ir::CallOp::floor},     {"Ceil", ir::CallOp::ceil},
      {"Sin", ir::CallOp::sin},   {"Cos", ir::CallOp::cos}};
  if (auto it = calls.find(op); it != calls.end()) {
    LOOM_USER_CHECK(is_float || op == "Abs", "loom.onnx.E1104")
        << what_ << ": " << where() << ": " << op << " of " << ir::to_string(t)
        << " (loom computes it on float tensors)";
    f = [&, o = it->second](const std::vector<ir::Expr>& v) {
      if (o == ir::CallOp::abs && !is_float)
        return ir::Select::make(ir::LT::make(v[0], c(0)), ir::Sub::make(c(0), v[0]), v[0]);
      return call(o, v[0]);
    };
  } else if (op == "Relu") {
    f = [&](const std::vector<ir::Expr>& v) { return ir::Max::make(v[0], c(0)); };
  } else if (op == "Neg") {
    f = [&](const std::vector<ir::Expr>& v) { return ir::Sub::make(c(0), v[0]); };
  } else {
    LOOM_USER_CHECK(is_float, "loom.onnx.E1104")
        << what_ << ": " << where() << ": " << op << " of " << ir::to_string(t)
        << " (loom computes it on float tensors)";
    if (op == "Reciprocal") {
      f = [&](const std::vector<ir::Expr>& v) { return ir::Div::make(c(1), v[0]); };
    } else if (op == "LeakyRelu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Select::make(ir::LT::make(v[0], c(0)), ir::Mul::make(v[0], c(alpha)), v[0]);
      };
    } else if (op == "Elu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Select::make(
            ir::LT::make(v[0], c(0)),
            ir::Mul::make(c(alpha), ir::Sub::make(call(ir::CallOp::exp, v[0]), c(1))), v[0]);
      };
    } else if (op == "Selu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            c(gamma),
            ir::Select::make(
                ir::LE::make(v[0], c(0)),
                ir::Sub::make(ir::Mul::make(c(alpha), call(ir::CallOp::exp, v[0])), c(alpha)),
                v[0]));
      };
    } else if (op == "HardSigmoid") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Max::make(
            c(0), ir::Min::make(c(1), ir::Add::make(ir::Mul::make(c(alpha), v[0]), c(beta))));
      };
    } else if (op == "HardSwish") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            v[0],
            ir::Max::make(
                c(0), ir::Min::make(c(1), ir::Add::make(ir::Mul::make(c(1.0 / 6), v[0]), c(0.5)))));
      };
    } else if (op == "Softplus") {
      f = [&](const std::vector<ir::Expr>& v) {
        return call(ir::CallOp::log, ir::Add::make(call(ir::CallOp::exp, v[0]), c(1)));
      };
    } else if (op == "Softsign") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Div::make(v[0], ir::Add::make(c(1), call(ir::CallOp::abs, v[0])));
      };
    } else if (op == "Mish") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            v[0], call(ir::CallOp::tanh,
                       call(ir::CallOp::log, ir::Add::make(call(ir::CallOp::exp, v[0]), c(1)))));
      };
    } else {  // Gelu (opset 20), listed for models exported by newer exporters
      const std::string approximate = attr_string("approximate", "none");
      if (approximate != "none")
        unsupported_attribute("approximate", "is '" + approximate + "' (only 'none')");
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            ir::Mul::make(c(0.5), v[0]),
            ir::Add::make(c(1), call(ir::CallOp::erf, ir::Mul::make(v[0], c(M_SQRT1_2)))));
      };
    }
  }
  emit(elementwise({x}, f,
                   [&] {
                     std::string tag;
                     for (char ch : op)
                       tag += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                     return tag;
                   }()),
       {x});
}

inline void Importer::binary(const ::onnx::NodeProto& n) {
  const Value& a = in(0);
  const Value& b = in(1);
  const std::string& op = n.op_type();
  if (op == "Pow") {
    // x^2 and x^0.5 (variance, norms, GELU's tanh form) as a product and a square root: exact,
    // vectorizable, and what the exporters mean.
    LOOM_USER_CHECK(a.t.dtype().code == ir::DType::Code::Float, "loom.onnx.E1104")
        << what_ << ": " << where() << ": Pow of " << ir::to_string(a.t.dtype());
    if (b.constant() && b.t.num_elements() == 1 && !a.constant() && b.rank() <= a.rank()) {
      const double e = as_doubles(b)[0];
      std::function<ir::Expr(const std::vector<ir::Expr>&)> f;
      if (e == 1)
        f = [](const std::vector<ir::Expr>& v) { return v[0]; };
      else if (e == 2)
        f = [](const std::vector<ir::Expr>& v) { return ir::Mul::make(v[0], v[0]); };
      else if (e == 3)
        f = [](const std::vector<ir::Expr>& v) {
          return ir::Mul::make(ir::Mul::make(v[0], v[0]), v[0]);
        };
      else if (e == 0.5)
        f = [](const std::vector<ir::Expr>& v) { return ir::Call::make(ir::CallOp::sqrt, {v[0]}); };
      if (f) {
        emit(elementwise({a}, f, "pow"), {a});
        return;
      }
    }
    Value bb = b;
    if (b.t.dtype() != a.t.dtype()) {
      LOOM_USER_CHECK(b.constant(), "loom.onnx.E1104")
          << what_ << ": " << where() << ": an exponent of type " << ir::to_string(b.t.dtype())
          << " computed at run time (loom takes it in the base's type)";
      bb = fold(untyped::cast(b.t, a.t.dtype(), fresh_name(node_->input(1) + "_cast")));
    }
    emit(elementwise(
             {a, bb},
             [](const std::vector<ir::Expr>& v) {
               return ir::Call::make(ir::CallOp::pow, {v[0], v[1]});
             },
             "pow"),
         {a, b});
    return;
  }
  if (op == "Add" && layer_norm_pattern(n)) return;
  static const std::map<std::string, ir::NodeKind> kinds = {{"Add", ir::NodeKind::Add},
                                                            {"Sub", ir::NodeKind::Sub},
                                                            {"Mul", ir::NodeKind::Mul},
                                                            {"Div", ir::NodeKind::Div}};
  const ir::NodeKind k = kinds.at(op);
  std::string tag = op == "Add"   ? "add"
                    : op == "Sub" ? "subtract"
                    : op == "Mul" ? "multiply"
                                  : "divide";
  emit(elementwise(
           {a, b}, [k](const std::vector<ir::Expr>& v) { return ir::make_binary(k, v[0], v[1]); },
           tag),
       {a, b});
}

inline void Importer::variadic(const ::onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  std::vector<Value> xs;
  for (int i = 0; i < n.input_size(); ++i)
    if (has_input(i)) xs.push_back(in(i));
  LOOM_USER_CHECK(!xs.empty(), "loom.onnx.E1105") << what_ << ": " << where() << " has no inputs";
  const ir::DType t = xs[0].t.dtype();
  const size_t count = xs.size();
  emit(elementwise(
           xs,
           [&](const std::vector<ir::Expr>& v) {
             ir::Expr r = v[0];
             for (size_t i = 1; i < v.size(); ++i)
               r = op == "Max"   ? ir::Max::make(r, v[i])
                   : op == "Min" ? ir::Min::make(r, v[i])
                                 : ir::Add::make(r, v[i]);
             if (op == "Mean") r = ir::Div::make(r, ir::make_const(t, static_cast<double>(count)));
             return r;
           },
           op == "Max"    ? "maximum"
           : op == "Min"  ? "minimum"
           : op == "Mean" ? "mean"
                          : "add"),
       xs);
}

inline void Importer::clip(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const ir::DType t = x.t.dtype();
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  if (opset_ < 11) {
    lo = attr_float("min", -std::numeric_limits<float>::infinity());
    hi = attr_float("max", std::numeric_limits<float>::infinity());
  } else {
    if (has_input(1)) lo = as_doubles(constant_in(1, "min"))[0];
    if (has_input(2)) hi = as_doubles(constant_in(2, "max"))[0];
  }
  emit(elementwise(
           {x},
           [&](const std::vector<ir::Expr>& v) {
             ir::Expr r = v[0];
             if (std::isfinite(lo)) r = ir::Max::make(r, ir::make_const(t, lo));
             if (std::isfinite(hi)) r = ir::Min::make(r, ir::make_const(t, hi));
             return r;
           },
           "clip"),
       {x});
}

inline void Importer::prelu(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  Value slope = in(1);
  // A per-channel slope exported as [C] broadcasts against the last axis under numpy's rule;
  // ONNX's own models give [C, 1, 1]. Both mean the channel axis when x is [N, C, ...].
  if (slope.rank() == 1 && x.rank() > 2 && slope.shape()[0] == x.shape()[1] &&
      slope.shape()[0] != x.shape().back()) {
    Shape s(static_cast<size_t>(x.rank() - 1), 1);
    s[0] = slope.shape()[0];
    slope = reshaped(slope, s, node_->input(1) + "_channels");
  }
  const ir::DType t = x.t.dtype();
  emit(elementwise(
           {x, slope},
           [&](const std::vector<ir::Expr>& v) {
             return ir::Select::make(ir::LT::make(v[0], ir::make_const(t, 0)),
                                     ir::Mul::make(v[0], v[1]), v[0]);
           },
           "prelu"),
       {x, in(1)});
}

// --- anchors -------------------------------------------------------------------------------

inline void Importer::conv(const ::onnx::NodeProto& n) {
  Value x = in(0);
  Value w = in(1);
  const int rank = x.rank();
  LOOM_USER_CHECK(rank >= 3 && rank <= 5 && w.rank() == rank, "loom.onnx.E1103")
      << what_ << ": " << where() << ": data " << shape_string(x.shape()) << " and weight "
      << shape_string(w.shape()) << " (loom imports 1-D, 2-D and 3-D convolutions, NC... layout)";
  LOOM_USER_CHECK(x.t.dtype() == ir::DType::f32() && w.t.dtype() == ir::DType::f32(),
                  "loom.onnx.E1104")
      << what_ << ": " << where() << ": convolution of " << ir::to_string(x.t.dtype())
      << " (float32 only)";
  const size_t s = static_cast<size_t>(rank - 2);
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (attr("kernel_shape") && attr_ints("kernel_shape") != kernel)
    unsupported_attribute("kernel_shape", "is " + shape_string(attr_ints("kernel_shape")) +
                                              " but the weight's window is " +
                                              shape_string(kernel));
  const Shape stride = attr_ints("strides", Shape(s, 1));
  const Shape dilation = attr_ints("dilations", Shape(s, 1));
  if (stride.size() != s)
    unsupported_attribute("strides", "does not have one value per spatial dimension");
  if (dilation.size() != s)
    unsupported_attribute("dilations", "does not have one value per spatial dimension");
  const int64_t groups = attr_int("group", 1);
  Shape pads = window_pads(Shape(x.shape().begin() + 2, x.shape().end()), kernel, stride, dilation);
  // Batch norm folding: w' = w · scale per output channel, b' = b · scale + shift; in double,
  // rounded once.
  const int64_t out_channels = w.shape()[0];
  std::vector<double> bias;
  if (has_input(2)) bias = as_doubles(constant_in(2, "bias"));
  auto bn = bn_after_.find(n.output(0));
  if (bn != bn_after_.end() && w.constant()) {
    const Affine a = batch_norm_affine(*bn->second, out_channels);
    std::vector<double> wv = as_doubles(w);
    const int64_t per = w.t.num_elements() / out_channels;
    if (bias.empty()) bias.assign(static_cast<size_t>(out_channels), 0.0);
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t i = 0; i < per; ++i) wv[o * per + i] *= a.scale[o];
      bias[o] = bias[o] * a.scale[o] + a.shift[o];
    }
    w = constant_f32(node_->input(1) + "_bn", w.shape(), wv);
    folded_bn_.insert(bn->second);
    ++stats_.folded_batch_norms;
  }
  bool symmetric = true;
  for (size_t d = 0; d < s; ++d) symmetric = symmetric && pads[d] == pads[d + s];
  if (!symmetric) {
    Shape before(2, 0), after(2, 0);
    for (size_t d = 0; d < s; ++d) {
      before.push_back(pads[d]);
      after.push_back(pads[d + s]);
    }
    x = Value{untyped::pad(x.t, before, after, 0.0, fresh_name(n.output(0) + "_pad")), nullptr};
    std::fill(pads.begin(), pads.end(), 0);
  }
  const std::string name = bias.empty() ? out_name() : fresh_name(n.output(0) + "_conv");
  ir::Tensor y;
  auto params = [&]<std::size_t S>(ops::ConvParams<S>& p) {
    for (size_t d = 0; d < S; ++d) {
      p.stride[d] = stride[d];
      p.dilation[d] = dilation[d];
      p.padding[d] = pads[d];
    }
    p.groups = groups;
  };
  if (s == 1) {
    ops::ConvParams<1> p;
    params(p);
    y = ops::conv1d_ncw(Tensor<float, 3>(x.t), Tensor<float, 3>(w.t), p, name);
  } else if (s == 2) {
    ops::ConvParams<2> p;
    params(p);
    y = ops::conv2d_nchw(Tensor<float, 4>(x.t), Tensor<float, 4>(w.t), p, name);
  } else {
    ops::ConvParams<3> p;
    params(p);
    y = ops::conv3d_ncdhw(Tensor<float, 5>(x.t), Tensor<float, 5>(w.t), p, name);
  }
  if (!bias.empty()) {
    Shape bs(static_cast<size_t>(rank - 1), 1);
    bs[0] = out_channels;
    Value b = constant_f32(n.output(0) + "_bias", bs, bias);
    y = untyped::map(out_name(), "bias_add", {y, b.t},
                     [](const std::vector<ir::Expr>& v) { return ir::Add::make(v[0], v[1]); });
  }
  emit(y, {x, w});
}

inline void Importer::conv_transpose(const ::onnx::NodeProto& n) {
  Value x = in(0);
  Value w = in(1);
  LOOM_USER_CHECK(x.rank() == 4 && w.rank() == 4, "loom.onnx.E1103")
      << what_ << ": " << where() << ": data " << shape_string(x.shape()) << " and weight "
      << shape_string(w.shape()) << " (loom imports 2-D transposed convolutions, NCHW)";
  LOOM_USER_CHECK(x.t.dtype() == ir::DType::f32(), "loom.onnx.E1104")
      << what_ << ": " << where() << ": " << ir::to_string(x.t.dtype()) << " (float32 only)";
  if (attr_int("group", 1) != 1)
    unsupported_attribute("group",
                          "is " + std::to_string(attr_int("group", 1)) + " (loom imports group 1)");
  if (attr_ints("dilations", {1, 1}) != Shape{1, 1})
    unsupported_attribute("dilations", "is not [1, 1]");
  if (attr("output_shape"))
    unsupported_attribute("output_shape", "is given (give pads and output_padding instead)");
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    unsupported_attribute("auto_pad", "is '" + auto_pad + "'");
  const Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (attr("kernel_shape") && attr_ints("kernel_shape") != kernel)
    unsupported_attribute("kernel_shape", "differs from the weight's window");
  const Shape stride = attr_ints("strides", {1, 1});
  const Shape pads = auto_pad == "VALID" ? Shape(4, 0) : attr_ints("pads", Shape(4, 0));
  const Shape output_padding = attr_ints("output_padding", {0, 0});
  if (stride.size() != 2 || pads.size() != 4 || output_padding.size() != 2)
    unsupported_attribute("pads", "or strides/output_padding have the wrong length");
  if (pads[0] != pads[2] || pads[1] != pads[3])
    unsupported_attribute("pads", "is asymmetric " + shape_string(pads));
  const int64_t out_channels = w.shape()[1];
  std::vector<double> bias;
  if (has_input(2)) bias = as_doubles(constant_in(2, "bias"));
  auto bn = bn_after_.find(n.output(0));
  if (bn != bn_after_.end() && w.constant()) {  // as in conv(), the weight being [C, O, KH, KW]
    const Affine a = batch_norm_affine(*bn->second, out_channels);
    std::vector<double> wv = as_doubles(w);
    const int64_t in_channels = w.shape()[0], taps = kernel[0] * kernel[1];
    if (bias.empty()) bias.assign(static_cast<size_t>(out_channels), 0.0);
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t c = 0; c < in_channels; ++c)
        for (int64_t i = 0; i < taps; ++i) wv[(c * out_channels + o) * taps + i] *= a.scale[o];
      bias[o] = bias[o] * a.scale[o] + a.shift[o];
    }
    w = constant_f32(node_->input(1) + "_bn", w.shape(), wv);
    folded_bn_.insert(bn->second);
    ++stats_.folded_batch_norms;
  }
  ops::ConvTransposeParams<2> p;
  p.stride = {stride[0], stride[1]};
  p.padding = {pads[0], pads[1]};
  p.output_padding = {output_padding[0], output_padding[1]};
  const std::string name = bias.empty() ? out_name() : fresh_name(n.output(0) + "_conv");
  ir::Tensor y = ops::conv2d_transpose_nchw(Tensor<float, 4>(x.t), Tensor<float, 4>(w.t), p, name);
  if (!bias.empty()) {
    Value b = constant_f32(n.output(0) + "_bias", {out_channels, 1, 1}, bias);
    y = untyped::map(out_name(), "bias_add", {y, b.t},
                     [](const std::vector<ir::Expr>& v) { return ir::Add::make(v[0], v[1]); });
  }
  emit(y, {x, w});
}

inline void Importer::gemm(const ::onnx::NodeProto& n) {
  const Value& a = in(0);
  const Value& b = in(1);
  LOOM_USER_CHECK(a.rank() == 2 && b.rank() == 2, "loom.onnx.E1105")
      << what_ << ": " << where() << ": Gemm of " << shape_string(a.shape()) << " and "
      << shape_string(b.shape()) << " (rank 2 each)";
  LOOM_USER_CHECK(a.t.dtype() == ir::DType::f32() && b.t.dtype() == ir::DType::f32(),
                  "loom.onnx.E1104")
      << what_ << ": " << where() << ": Gemm of " << ir::to_string(a.t.dtype())
      << " (float32 only)";
  const bool trans_a = attr_int("transA", 0) != 0, trans_b = attr_int("transB", 0) != 0;
  const double alpha = attr_float("alpha", 1.0f), beta = attr_float("beta", 1.0f);
  const bool more = alpha != 1.0 || (has_input(2) && beta != 0.0);
  const std::string name = more ? fresh_name(n.output(0) + "_product") : out_name();
  ir::Tensor y =
      !trans_a && trans_b
          ? ops::dense(Tensor<float, 2>(a.t), Tensor<float, 2>(b.t), name)
          : ops::matmul(Tensor<float, 2>(a.t), Tensor<float, 2>(b.t), trans_a, trans_b, name);
  if (more) {
    std::vector<Value> args{Value{y, nullptr}};
    if (has_input(2) && beta != 0.0) args.push_back(in(2));
    const ir::DType t = ir::DType::f32();
    y = elementwise(
        args,
        [&](const std::vector<ir::Expr>& v) {
          ir::Expr r = alpha == 1.0 ? v[0] : ir::Mul::make(v[0], ir::make_const(t, alpha));
          if (v.size() > 1)
            r = ir::Add::make(r, beta == 1.0 ? v[1] : ir::Mul::make(v[1], ir::make_const(t, beta)));
          return r;
        },
        "bias_add");
  }
  std::vector<Value> read{a, b};
  if (has_input(2)) read.push_back(in(2));
  emit(y, read);
}

inline void Importer::matmul(const ::onnx::NodeProto&) {
  const Value& a = in(0);
  const Value& b = in(1);
  LOOM_USER_CHECK(a.t.dtype() == b.t.dtype(), "loom.onnx.E1105")
      << what_ << ": " << where() << ": operands of types " << ir::to_string(a.t.dtype()) << " and "
      << ir::to_string(b.t.dtype());
  emit(untyped::matmul(a.t, b.t, out_name()), {a, b});
}

// --- normalization -------------------------------------------------------------------------

inline void Importer::batch_norm(const ::onnx::NodeProto& n) {
  if (folded_bn_.count(&n)) {
    set_output(0, values_.at(n.input(0)));
    return;
  }
  for (int i = 1; i < n.output_size(); ++i)
    LOOM_USER_CHECK(n.output(i).empty(), "loom.onnx.E1103")
        << what_ << ": " << where() << ": output " << i
        << " (training statistics) is requested; loom imports inference-mode BatchNormalization";
  if (attr_int("training_mode", 0) != 0)
    unsupported_attribute("training_mode", "is 1 (loom imports inference)");
  const Value& x = in(0);
  LOOM_USER_CHECK(x.rank() >= 2, "loom.onnx.E1105")
      << what_ << ": " << where() << ": data of rank " << x.rank();
  const int64_t c = x.shape()[1];
  const Affine a = batch_norm_affine(n, c);
  Shape s(static_cast<size_t>(x.rank() - 1), 1);
  s[0] = c;
  Value sc = constant_f32(n.output(0) + "_scale", s, a.scale),
        sh = constant_f32(n.output(0) + "_shift", s, a.shift);
  emit(elementwise(
           {x, sc, sh},
           [](const std::vector<ir::Expr>& v) {
             return ir::Add::make(ir::Mul::make(v[0], v[1]), v[2]);
           },
           "batch_norm"),
       {x});
}

// scale = gamma / sqrt(var + eps), shift = beta - mean · scale. The folding pass checked that
// the parameters are constants; a node imported on its own is checked here (E1107).
inline Importer::Affine Importer::batch_norm_affine(const ::onnx::NodeProto& bn,
                                                    int64_t channels) const {
  auto param = [&](int i, const char* what) {
    auto it = values_.find(bn.input(i));
    LOOM_USER_CHECK(it != values_.end() && it->second.constant(), "loom.onnx.E1107")
        << what_ << ": BatchNormalization '" << bn.name() << "': input " << i << " (" << what
        << ", '" << bn.input(i) << "') is computed at run time; loom needs it constant";
    std::vector<double> v = as_doubles(it->second);
    LOOM_USER_CHECK(static_cast<int64_t>(v.size()) == channels, "loom.onnx.E1105")
        << what_ << ": BatchNormalization '" << bn.name() << "': " << what << " has " << v.size()
        << " elements; it needs " << channels << ", one per channel";
    return v;
  };
  const std::vector<double> gamma = param(1, "scale"), beta = param(2, "B"),
                            mean = param(3, "mean"), var = param(4, "var");
  double eps = 1e-5f;
  for (const auto& a : bn.attribute())
    if (a.name() == "epsilon") eps = a.f();
  return net::batch_norm_affine(gamma, beta, mean, var, eps);
}

inline ir::Tensor Importer::layer_norm_of(const Value& x, const Value& gamma, const Value& beta,
                                          double eps, const std::string& name) const {
  ir::Tensor y;
  auto build = [&]<std::size_t R>(std::integral_constant<std::size_t, R>) {
    y = ops::layer_norm(Tensor<float, R>(x.t), Tensor<float, 1>(gamma.t), Tensor<float, 1>(beta.t),
                        eps, name);
  };
  switch (x.rank()) {
    case 1: build(std::integral_constant<std::size_t, 1>{}); break;
    case 2: build(std::integral_constant<std::size_t, 2>{}); break;
    case 3: build(std::integral_constant<std::size_t, 3>{}); break;
    case 4: build(std::integral_constant<std::size_t, 4>{}); break;
    default:
      LOOM_USER_CHECK(false, "loom.onnx.E1103") << what_ << ": " << where() << ": data of rank "
                                                << x.rank() << " (loom imports ranks 1 to 4)";
  }
  return y;
}

inline void Importer::layer_norm(const ::onnx::NodeProto& n) {
  for (int i = 1; i < n.output_size(); ++i)
    LOOM_USER_CHECK(n.output(i).empty(), "loom.onnx.E1103")
        << what_ << ": " << where() << ": output " << i
        << " (Mean / InvStdDev) is requested; loom computes Y only";
  const Value& x = in(0);
  const int axis = untyped::normalize_axis("LayerNormalization", attr_int("axis", -1), x.rank());
  if (axis != x.rank() - 1)
    unsupported_attribute("axis", "normalizes more than the last dimension");
  const int64_t d = x.shape().back();
  Value gamma = reshaped(in(1), {d}, node_->input(1) + "_1d");
  Value beta = has_input(2) ? reshaped(in(2), {d}, node_->input(2) + "_1d")
                            : constant_f32(n.output(0) + "_beta", {d}, std::vector<double>(d, 0.0));
  emit(layer_norm_of(x, gamma, beta, attr_float("epsilon", 1e-5f), out_name()), {x, gamma, beta});
}

// Exporters before opset 17 write a layer norm out as nine nodes:
//   m = ReduceMean(x, [-1]); d = x - m; v = ReduceMean(d^2, [-1]); n = d / sqrt(v + eps);
//   y = n * gamma + beta
// Called at the last Add: when the nodes before it are that pattern, with constant gamma, beta
// and eps and no other readers of the intermediates, y becomes one ops::layer_norm, the unit
// the row-reduction sketch rules schedule as one kernel. (The nodes already translated stay
// unread, so the network never contains them.)
inline bool Importer::layer_norm_pattern(const ::onnx::NodeProto& add) {
  auto made_by = [&](const std::string& value, const char* op) -> const ::onnx::NodeProto* {
    auto it = producer_.find(value);
    return it != producer_.end() && it->second->op_type() == op ? it->second : nullptr;
  };
  auto only_reader = [&](const std::string& value, int readers = 1) {
    return readers_[value] == readers;
  };
  auto constant_value = [&](const std::string& name) -> const Value* {
    auto it = values_.find(name);
    return it != values_.end() && it->second.constant() ? &it->second : nullptr;
  };
  auto last_axis_mean = [&](const ::onnx::NodeProto* r, int rank) {
    if (!r || r->input_size() != 1) return false;
    Shape axes;
    int64_t keep = 1;
    for (const auto& a : r->attribute()) {
      if (a.name() == "axes")
        axes.assign(a.ints().begin(), a.ints().end());
      else if (a.name() == "keepdims")
        keep = a.i();
      else
        return false;
    }
    return keep == 1 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  };
  // y = t + beta (either order), t = n * gamma (either order).
  for (int bi = 0; bi < 2; ++bi) {
    const Value* beta = constant_value(add.input(bi));
    const ::onnx::NodeProto* mul = made_by(add.input(1 - bi), "Mul");
    if (!beta || !mul || !only_reader(add.input(1 - bi))) continue;
    for (int gi = 0; gi < 2; ++gi) {
      const Value* gamma = constant_value(mul->input(gi));
      const ::onnx::NodeProto* div = made_by(mul->input(1 - gi), "Div");
      if (!gamma || !div || !only_reader(mul->input(1 - gi))) continue;
      const ::onnx::NodeProto* sub = made_by(div->input(0), "Sub");
      const ::onnx::NodeProto* sqrt = made_by(div->input(1), "Sqrt");
      if (!sub || !sqrt || !only_reader(div->input(0), 2) || !only_reader(div->input(1))) continue;
      const ::onnx::NodeProto* plus = made_by(sqrt->input(0), "Add");
      if (!plus || !only_reader(sqrt->input(0))) continue;
      auto x_it = values_.find(sub->input(0));
      if (x_it == values_.end() || x_it->second.constant()) continue;
      const Value& x = x_it->second;
      const int rank = x.rank();
      const ::onnx::NodeProto* mean = made_by(sub->input(1), "ReduceMean");
      if (!last_axis_mean(mean, rank) || mean->input(0) != sub->input(0) ||
          !only_reader(sub->input(1)))
        continue;
      for (int ei = 0; ei < 2; ++ei) {
        const Value* eps = constant_value(plus->input(ei));
        const ::onnx::NodeProto* var = made_by(plus->input(1 - ei), "ReduceMean");
        if (!eps || eps->t.num_elements() != 1 || !last_axis_mean(var, rank) ||
            !only_reader(plus->input(1 - ei)))
          continue;
        const ::onnx::NodeProto* square = made_by(var->input(0), "Pow");
        if (!square || square->input(0) != sub->output(0) || !only_reader(var->input(0))) continue;
        const Value* two = constant_value(square->input(1));
        if (!two || two->t.num_elements() != 1 || as_doubles(*two)[0] != 2.0) continue;
        const int64_t d = x.shape().back();
        if (x.t.dtype() != ir::DType::f32() || gamma->t.num_elements() != d ||
            beta->t.num_elements() != d || rank > 4)
          continue;
        const Value g = reshaped(*gamma, {d}, add.output(0) + "_gamma");
        const Value b = reshaped(*beta, {d}, add.output(0) + "_beta");
        ++stats_.fused_layer_norms;
        set_output(0, layer_norm_of(x, g, b, as_doubles(*eps)[0], out_name()));
        return true;
      }
    }
  }
  return false;
}

inline void Importer::softmax(const ::onnx::NodeProto& n) {
  Value x = in(0);
  const int rank = x.rank();
  LOOM_USER_CHECK(x.t.dtype() == ir::DType::f32(), "loom.onnx.E1104")
      << what_ << ": " << where() << ": " << ir::to_string(x.t.dtype()) << " (float32 only)";
  const int axis =
      untyped::normalize_axis(n.op_type().c_str(), attr_int("axis", opset_ < 13 ? 1 : -1), rank);
  const bool log = n.op_type() == "LogSoftmax";
  // Opsets before 13 normalize over all dimensions from `axis` on (the data seen as 2-D);
  // from 13 over `axis` alone, which loom's softmax (last axis) reaches by a transpose.
  Value rows = x;
  std::vector<int> perm;
  if (opset_ < 13) {
    int64_t inner = 1;
    for (int d = axis; d < rank; ++d) inner *= x.shape()[d];
    rows = reshaped(x, {x.t.num_elements() / inner, inner}, n.output(0) + "_rows");
  } else if (axis != rank - 1) {
    for (int d = 0; d < rank; ++d) perm.push_back(d);
    std::swap(perm[axis], perm[rank - 1]);
    rows = Value{untyped::transpose(x.t, perm, fresh_name(n.output(0) + "_in")), nullptr};
  }
  const bool last_step = opset_ >= 13 && perm.empty() && !log;
  const std::string name = last_step ? out_name() : fresh_name(n.output(0) + "_softmax");
  ir::Tensor y;
  auto build = [&]<std::size_t R>(std::integral_constant<std::size_t, R>) {
    y = ops::softmax(Tensor<float, R>(rows.t), name);
  };
  switch (rows.rank()) {
    case 1: build(std::integral_constant<std::size_t, 1>{}); break;
    case 2: build(std::integral_constant<std::size_t, 2>{}); break;
    case 3: build(std::integral_constant<std::size_t, 3>{}); break;
    case 4: build(std::integral_constant<std::size_t, 4>{}); break;
    case 5: build(std::integral_constant<std::size_t, 5>{}); break;
    default:
      LOOM_USER_CHECK(false, "loom.onnx.E1103") << what_ << ": " << where() << ": data of rank "
                                                << rows.rank() << " (loom imports ranks 1 to 5)";
  }
  if (log)
    y = untyped::map(
        fresh_name(n.output(0) + "_log"), "log", {y},
        [](const std::vector<ir::Expr>& v) { return ir::Call::make(ir::CallOp::log, {v[0]}); });
  if (!perm.empty()) y = untyped::transpose(y, perm, fresh_name(n.output(0)));
  if (opset_ < 13) y = untyped::reshape(y, x.shape(), fresh_name(n.output(0)));
  emit(y, {x});
}

// --- pooling and reductions ----------------------------------------------------------------

inline void Importer::pool(const ::onnx::NodeProto& n) {
  Value x = in(0);
  const bool is_max = n.op_type() == "MaxPool";
  if (is_max && n.output_size() > 1 && !n.output(1).empty())
    LOOM_USER_CHECK(false, "loom.onnx.E1103")
        << what_ << ": " << where()
        << ": the Indices output is requested (loom computes the values only)";
  LOOM_USER_CHECK(x.rank() == 4 && x.t.dtype() == ir::DType::f32(), "loom.onnx.E1103")
      << what_ << ": " << where() << ": " << ir::to_string(x.t.dtype()) << " data "
      << shape_string(x.shape()) << " (loom imports 2-D pooling of float32 NCHW data)";
  const Shape kernel = attr_ints("kernel_shape");
  if (kernel.size() != 2) unsupported_attribute("kernel_shape", "must give 2 extents");
  const Shape stride = attr_ints("strides", {1, 1});
  if (attr_ints("dilations", {1, 1}) != Shape{1, 1})
    unsupported_attribute("dilations", "is not [1, 1]");
  if (attr_int("storage_order", 0) != 0) unsupported_attribute("storage_order", "is column-major");
  Shape pads = window_pads({x.shape()[2], x.shape()[3]}, kernel, stride, {1, 1});
  const bool count_include_pad = attr_int("count_include_pad", 0) != 0;
  if (attr_int("ceil_mode", 0) != 0) {
    // Ceil mode adds the windows a partial last window starts; extra padding at the end makes
    // them whole, which is exact for max pooling (the padding is never the maximum).
    if (!is_max) unsupported_attribute("ceil_mode", "is 1 for AveragePool");
    for (int d = 0; d < 2; ++d) {
      const int64_t padded = x.shape()[2 + d] + pads[d] + pads[d + 2];
      const int64_t floor_out = (padded - kernel[d]) / stride[d] + 1;
      int64_t ceil_out = (padded - kernel[d] + stride[d] - 1) / stride[d] + 1;
      if ((ceil_out - 1) * stride[d] >= x.shape()[2 + d] + pads[d])
        --ceil_out;  // a window must start inside
      pads[d + 2] += (ceil_out - floor_out) * stride[d];
    }
  }
  const float lowest = std::numeric_limits<float>::lowest();
  if (pads[0] != pads[2] || pads[1] != pads[3] || pads[0] >= kernel[0] || pads[1] >= kernel[1] ||
      pads[2] >= kernel[0] || pads[3] >= kernel[1]) {
    if (!is_max && !count_include_pad && (pads[0] || pads[1] || pads[2] || pads[3]))
      unsupported_attribute("pads",
                            "is asymmetric " + shape_string(pads) + " with count_include_pad 0");
    x = Value{untyped::pad(x.t, {0, 0, pads[0], pads[1]}, {0, 0, pads[2], pads[3]},
                           is_max ? lowest : 0.0, fresh_name(n.output(0) + "_pad")),
              nullptr};
    pads.assign(4, 0);
  }
  ir::Tensor y = is_max ? ops::max_pool2d(Tensor<float, 4>(x.t), {kernel[0], kernel[1]},
                                          {stride[0], stride[1]}, {pads[0], pads[1]}, out_name())
                        : ops::avg_pool2d(Tensor<float, 4>(x.t), {kernel[0], kernel[1]},
                                          {stride[0], stride[1]}, {pads[0], pads[1]},
                                          count_include_pad, out_name());
  emit(y, {x});
}

inline void Importer::global_pool(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  LOOM_USER_CHECK(x.rank() >= 3, "loom.onnx.E1105")
      << what_ << ": " << where() << ": data of rank " << x.rank();
  std::vector<int> axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  ir::Tensor y =
      n.op_type() == "GlobalAveragePool"
          ? untyped::reduce_mean(x.t, axes, true, out_name())
          : untyped::reduce(x.t, axes, true, ir::ReduceOp::Max, out_name(), "global_max_pool");
  emit(y, {x});
}

inline void Importer::reduce(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const std::string& op = n.op_type();
  Shape axes = attr_ints("axes");
  if (has_input(1)) axes = as_ints(constant_in(1, "axes"));
  const bool keep = attr_int("keepdims", 1) != 0;
  std::vector<int> ax;
  if (axes.empty()) {
    if (attr_int("noop_with_empty_axes", 0) != 0) {
      set_output(0, x);
      return;
    }
    for (int d = 0; d < x.rank(); ++d) ax.push_back(d);
  } else {
    ax = int_axes(axes, x.rank());
  }
  ir::Tensor y;
  if (op == "ReduceMean") {
    y = untyped::reduce_mean(x.t, ax, keep, out_name());
  } else {
    const ir::ReduceOp r = op == "ReduceSum"   ? ir::ReduceOp::Sum
                           : op == "ReduceMax" ? ir::ReduceOp::Max
                           : op == "ReduceMin" ? ir::ReduceOp::Min
                                               : ir::ReduceOp::Prod;
    std::string tag = op.substr(6);
    for (char& ch : tag) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    y = untyped::reduce(x.t, ax, keep, r, out_name(), tag);
  }
  emit(y, {x});
}

// --- shapes --------------------------------------------------------------------------------

inline void Importer::reshape(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const Shape spec = opset_ < 5 ? attr_ints("shape") : as_ints(constant_in(1, "shape"));
  const bool allow_zero = attr_int("allowzero", 0) != 0;
  Shape shape(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < spec.size(); ++d) {
    if (spec[d] == -1) {
      LOOM_USER_CHECK(infer < 0, "loom.onnx.E1105")
          << what_ << ": " << where() << ": the shape " << shape_string(spec) << " has two -1";
      infer = static_cast<int>(d);
      continue;
    }
    shape[d] = spec[d] == 0 && !allow_zero ? (d < x.shape().size() ? x.shape()[d] : 0) : spec[d];
    LOOM_USER_CHECK(shape[d] >= 0, "loom.onnx.E1105")
        << what_ << ": " << where() << ": the shape " << shape_string(spec)
        << " has a negative extent";
    known *= shape[d];
  }
  if (infer >= 0) {
    LOOM_USER_CHECK(known > 0 && x.t.num_elements() % known == 0, "loom.onnx.E1105")
        << what_ << ": " << where() << ": " << shape_string(x.shape()) << " cannot be reshaped to "
        << shape_string(spec);
    shape[infer] = x.t.num_elements() / known;
  }
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::flatten(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const int axis = attr_int("axis", 1) == x.rank()
                       ? x.rank()
                       : untyped::normalize_axis("Flatten", attr_int("axis", 1), x.rank());
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  set_output(0, reshaped(x, {outer, outer ? x.t.num_elements() / outer : 0}, n.output(0)));
}

inline void Importer::squeeze(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  Shape axes = opset_ < 13    ? attr_ints("axes")
               : has_input(1) ? as_ints(constant_in(1, "axes"))
                              : Shape{};
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty()) {
    for (int d = 0; d < x.rank(); ++d) drop[d] = x.shape()[d] == 1;
  } else {
    for (int d : int_axes(axes, x.rank())) {
      LOOM_USER_CHECK(x.shape()[d] == 1, "loom.onnx.E1105")
          << what_ << ": " << where() << ": axis " << d << " of " << shape_string(x.shape())
          << " is not 1";
      drop[d] = true;
    }
  }
  Shape shape;
  for (int d = 0; d < x.rank(); ++d)
    if (!drop[d]) shape.push_back(x.shape()[d]);
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::unsqueeze(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const Shape axes = opset_ < 13 ? attr_ints("axes") : as_ints(constant_in(1, "axes"));
  const int rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int d : int_axes(axes, rank)) {
    LOOM_USER_CHECK(!added[d], "loom.onnx.E1105")
        << what_ << ": " << where() << ": axis " << d << " is listed twice";
    added[d] = true;
  }
  Shape shape;
  size_t from = 0;
  for (int d = 0; d < rank; ++d) shape.push_back(added[d] ? 1 : x.shape()[from++]);
  set_output(0, reshaped(x, shape, n.output(0)));
}

inline void Importer::transpose(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  Shape p = attr_ints("perm");
  if (p.empty())
    for (int d = x.rank() - 1; d >= 0; --d) p.push_back(d);
  emit(untyped::transpose(x.t, std::vector<int>(p.begin(), p.end()), out_name()), {x});
}

inline void Importer::concat(const ::onnx::NodeProto& n) {
  std::vector<Value> xs;
  std::vector<ir::Tensor> ts;
  for (int i = 0; i < n.input_size(); ++i) {
    if (!has_input(i)) continue;
    const Value& v = in(i);
    xs.push_back(v);
    if (v.t.num_elements() > 0) ts.push_back(v.t);  // exporters concatenate empty shape vectors
  }
  LOOM_USER_CHECK(!ts.empty(), "loom.onnx.E1105")
      << what_ << ": " << where() << " has no non-empty inputs";
  const int axis = untyped::normalize_axis("Concat", attr_int("axis", 0), ts[0].rank());
  if (ts.size() == 1) {  // the other inputs were empty
    for (const Value& v : xs)
      if (v.t.same_as(ts[0])) set_output(0, v);
    return;
  }
  emit(untyped::concat(ts, axis, out_name()), xs);
}

inline void Importer::slice(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  Shape starts, ends, axes, steps;
  if (opset_ < 10) {
    starts = attr_ints("starts");
    ends = attr_ints("ends");
    axes = attr_ints("axes");
  } else {
    starts = as_ints(constant_in(1, "starts"));
    ends = as_ints(constant_in(2, "ends"));
    if (has_input(3)) axes = as_ints(constant_in(3, "axes"));
    if (has_input(4)) steps = as_ints(constant_in(4, "steps"));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  LOOM_USER_CHECK(
      ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
      "loom.onnx.E1105")
      << what_ << ": " << where() << ": starts, ends, axes and steps have different lengths";
  const int rank = x.rank();
  Shape b(static_cast<size_t>(rank), 0), e(x.shape()), s(static_cast<size_t>(rank), 1);
  const std::vector<int> ax = int_axes(axes, rank);
  for (size_t i = 0; i < ax.size(); ++i) {
    const int d = ax[i];
    const int64_t dim = x.shape()[d], step = steps[i];
    LOOM_USER_CHECK(step != 0, "loom.onnx.E1105") << what_ << ": " << where() << ": step 0";
    // ONNX's clamping: negative bounds count from the end; a positive step keeps [0, dim], a
    // negative one starts at most at dim - 1 and may end at -1 (before the first element).
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    start = step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
    end = step > 0 ? std::clamp<int64_t>(end, 0, dim) : std::clamp<int64_t>(end, -1, dim - 1);
    b[d] = start;
    e[d] = end;
    s[d] = step;
  }
  emit(untyped::slice(x.t, b, e, s, out_name()), {x});
}

inline void Importer::split(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const int axis = untyped::normalize_axis("Split", attr_int("axis", 0), x.rank());
  Shape parts = opset_ < 13    ? attr_ints("split")
                : has_input(1) ? as_ints(constant_in(1, "split"))
                               : Shape{};
  const int outputs = n.output_size();
  if (parts.empty()) {
    const int64_t dim = x.shape()[axis];
    const int64_t each = (dim + outputs - 1) / outputs;
    for (int i = 0; i < outputs; ++i) parts.push_back(std::min(each, dim - each * i));
  }
  LOOM_USER_CHECK(static_cast<int>(parts.size()) == outputs, "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << parts.size() << " parts for " << outputs << " outputs";
  int64_t at = 0;
  for (int i = 0; i < outputs; ++i) {
    Shape b(static_cast<size_t>(x.rank()), 0), e(x.shape()), s(static_cast<size_t>(x.rank()), 1);
    b[axis] = at;
    e[axis] = at + parts[i];
    at += parts[i];
    if (n.output(i).empty()) continue;
    emit(untyped::slice(x.t, b, e, s, out_name(i)), {x}, i);
  }
  LOOM_USER_CHECK(at == x.shape()[axis], "loom.onnx.E1105")
      << what_ << ": " << where() << ": the parts " << shape_string(parts) << " do not add up to "
      << x.shape()[axis];
}

inline void Importer::gather(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Value& idx = constant_in(1, "indices");
  const int axis = untyped::normalize_axis("Gather", attr_int("axis", 0), x.rank());
  emit(untyped::take(x.t, axis, as_ints(idx), idx.shape(), out_name()), {x, idx});
}

inline void Importer::shape(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const int rank = x.rank();
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp(attr_int("start", 0)), end = clamp(attr_int("end", rank));
  Shape dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(x.shape()[d]);
  set_output(0, constant_i64(node_->output(0), {static_cast<int64_t>(dims.size())}, dims));
}

inline void Importer::size(const ::onnx::NodeProto&) {
  set_output(0, constant_i64(node_->output(0), {}, {in(0).t.num_elements()}));
}

inline void Importer::cast(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  ir::DType t;
  const int to = static_cast<int>(attr_int("to", 0));
  LOOM_USER_CHECK(dtype_of(to, &t), "loom.onnx.E1104")
      << what_ << ": " << where() << ": cast to " << elem_type_name(to)
      << " (loom has FLOAT, DOUBLE, INT32 and INT64 tensors)";
  if (t == x.t.dtype()) {
    set_output(0, x);
    return;
  }
  emit(untyped::cast(x.t, t, out_name()), {x});
}

inline void Importer::constant(const ::onnx::NodeProto& n) {
  const auto& a = n.attribute();
  LOOM_USER_CHECK(a.size() == 1, "loom.onnx.E1105")
      << what_ << ": " << where() << " needs exactly one value attribute";
  const auto& v = a.Get(0);
  const std::string& out = n.output(0);
  if (v.name() == "value") {
    set_output(0, from_tensor_proto(v.t(), out));
  } else if (v.name() == "value_float") {
    set_output(0, constant_f32(out, {}, {v.f()}));
  } else if (v.name() == "value_floats") {
    set_output(0, constant_f32(out, {v.floats_size()},
                               std::vector<double>(v.floats().begin(), v.floats().end())));
  } else if (v.name() == "value_int") {
    set_output(0, constant_i64(out, {}, {v.i()}));
  } else if (v.name() == "value_ints") {
    set_output(0, constant_i64(out, {v.ints_size()}, Shape(v.ints().begin(), v.ints().end())));
  } else {
    unsupported_attribute(v.name().c_str(), "(a sparse or string constant) is not imported");
  }
}

inline void Importer::constant_of_shape(const ::onnx::NodeProto& n) {
  const Shape shape = as_ints(constant_in(0, "shape"));
  const int64_t count = checked_count(shape, what_ + ": " + where());
  Value fill = constant_f32(n.output(0) + "_value", {1}, {0.0});
  if (const auto* a = attr("value")) fill = from_tensor_proto(a->t(), n.output(0) + "_value");
  LOOM_USER_CHECK(fill.t.num_elements() == 1, "loom.onnx.E1105")
      << what_ << ": " << where() << ": value must have one element";
  const size_t bytes = static_cast<size_t>(fill.t.dtype().bytes());
  auto data = std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(count) * bytes);
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(data->data() + i * bytes, fill.data->data(), bytes);
  set_output(0, make_constant(n.output(0), fill.t.dtype(), shape, std::move(data)));
}

inline void Importer::expand(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Shape target = as_ints(constant_in(1, "shape"));
  const Shape shape = untyped::broadcast_shape("Expand", {x.shape(), target});
  emit(untyped::broadcast_to(x.t, shape, out_name()), {x});
}

inline void Importer::pad(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant")
    unsupported_attribute("mode", "is '" + mode + "' (loom imports constant padding)");
  Shape pads = opset_ < 11 ? attr_ints("pads") : as_ints(constant_in(1, "pads"));
  double value = opset_ < 11    ? attr_float("value", 0.0f)
                 : has_input(2) ? as_doubles(constant_in(2, "constant_value"))[0]
                                : 0.0;
  const int rank = x.rank();
  Shape axes;
  if (has_input(3)) axes = as_ints(constant_in(3, "axes"));
  if (axes.empty())
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  LOOM_USER_CHECK(pads.size() == 2 * axes.size(), "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << pads.size() << " pads for " << axes.size() << " axes";
  Shape before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  const std::vector<int> ax = int_axes(axes, rank);
  bool crop = false;
  for (size_t i = 0; i < ax.size(); ++i) {
    before[ax[i]] = pads[i];
    after[ax[i]] = pads[i + ax.size()];
    crop = crop || pads[i] < 0 || pads[i + ax.size()] < 0;
  }
  if (crop) {
    // Negative pads crop: a slice of the padded tensor.
    Shape pb(before), pa(after), b(static_cast<size_t>(rank), 0), e(static_cast<size_t>(rank)),
        s(static_cast<size_t>(rank), 1);
    for (int d = 0; d < rank; ++d) {
      pb[d] = std::max<int64_t>(before[d], 0);
      pa[d] = std::max<int64_t>(after[d], 0);
      b[d] = -std::min<int64_t>(before[d], 0);
      e[d] = x.shape()[d] + pb[d] + pa[d] + std::min<int64_t>(after[d], 0);
    }
    ir::Tensor padded = untyped::pad(x.t, pb, pa, value, fresh_name(node_->output(0) + "_pad"));
    emit(untyped::slice(padded, b, e, s, out_name()), {x});
    return;
  }
  emit(untyped::pad(x.t, before, after, value, out_name()), {x});
}

inline void Importer::identity(const ::onnx::NodeProto& n) {
  // Dropout at inference, Identity: the output is the input. Dropout's mask output is not.
  if (n.op_type() == "Dropout") {
    LOOM_USER_CHECK(n.output_size() < 2 || n.output(1).empty(), "loom.onnx.E1103")
        << what_ << ": " << where()
        << ": the mask output is requested (loom imports inference-mode Dropout)";
    if (has_input(2)) {
      const Value& training = constant_in(2, "training_mode");
      LOOM_USER_CHECK(as_ints(training)[0] == 0, "loom.onnx.E1103")
          << what_ << ": " << where() << ": training_mode is true";
    }
  }
  ++stats_.dropped;
  set_output(0, in(0));
}

inline void Importer::tile(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const Shape repeats = as_ints(constant_in(1, "repeats"));
  LOOM_USER_CHECK(static_cast<int>(repeats.size()) == x.rank(), "loom.onnx.E1105")
      << what_ << ": " << where() << ": " << repeats.size() << " repeats for rank " << x.rank();
  emit(untyped::tile(x.t, repeats, out_name()), {x});
}

inline void Importer::range(const ::onnx::NodeProto&) {
  const Value& start = constant_in(0, "start");
  const Value& limit = constant_in(1, "limit");
  const Value& delta = constant_in(2, "delta");
  const double s = as_doubles(start)[0], l = as_doubles(limit)[0], d = as_doubles(delta)[0];
  LOOM_USER_CHECK(d != 0, "loom.onnx.E1105") << what_ << ": " << where() << ": delta 0";
  const int64_t count = std::max<int64_t>(static_cast<int64_t>(std::ceil((l - s) / d)), 0);
  if (start.t.dtype().code == ir::DType::Code::Float) {
    std::vector<double> v;
    for (int64_t i = 0; i < count; ++i) v.push_back(s + d * static_cast<double>(i));
    set_output(0, start.t.dtype() == ir::DType::f32()
                      ? constant_f32(node_->output(0), {count}, v)
                      : make_constant(node_->output(0), ir::DType::f64(), {count}, bytes_of(v)));
  } else {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < count; ++i)
      v.push_back(static_cast<int64_t>(s) + static_cast<int64_t>(d) * i);
    if (start.t.dtype() == ir::DType::i64()) {
      set_output(0, constant_i64(node_->output(0), {count}, v));
    } else {
      std::vector<int32_t> w(v.begin(), v.end());
      set_output(0, make_constant(node_->output(0), ir::DType::i32(), {count}, bytes_of(w)));
    }
  }
}

// --- the graph -----------------------------------------------------------------------------

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

}  // namespace detail_onnx

OnnxModel import_onnx_bytes(const std::string& bytes, const OnnxOptions& options,
                            const std::string& what) {
  ::onnx::ModelProto model;
  LOOM_USER_CHECK(!bytes.empty(), "loom.onnx.E1101") << what << " is empty";
  LOOM_USER_CHECK(model.ParseFromString(bytes), "loom.onnx.E1101")
      << what << " is not a valid ONNX model (the protobuf does not parse: truncated or corrupt)";
  detail_onnx::Importer importer(options, what);
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
  LOOM_USER_CHECK(detail_onnx::dtype_of(t.data_type(), &dtype), "loom.onnx.E1104")
      << "'" << path << "' holds " << detail_onnx::elem_type_name(t.data_type())
      << "; loom reads FLOAT, DOUBLE, INT32 and INT64 tensors";
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  const auto data = detail_onnx::tensor_bytes(t, dtype, shape, "'" + path + "'");
  HostTensor h(t.name(), dtype, shape);
  if (!data.empty()) std::memcpy(h.bytes.data(), data.data(), data.size());
  return h;
}

std::vector<std::string> supported_onnx_operators() {
  std::vector<std::string> ops;
  for (const auto& [name, info] : detail_onnx::op_table()) ops.push_back(name);
  return ops;
}

LOOM_END_NAMESPACE

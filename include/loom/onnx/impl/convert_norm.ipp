// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): the
// normalizations, as ops/norm.hpp groups them. BatchNormalization (the scale and shift the
// convolutions fold too), LayerNormalization and the nine-node layer norm of older exporters, and
// Softmax / LogSoftmax.
#include "loom/ops/norm.hpp"

#include <type_traits>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace detail {

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

}  // namespace detail
LOOM_END_NAMESPACE

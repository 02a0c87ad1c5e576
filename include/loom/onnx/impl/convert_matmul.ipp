// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): matrix
// products. Gemm, whose common form (B transposed: a fully connected layer) is ops::dense, and
// MatMul, numpy.matmul's batching and rank-1 rules (ops::untyped::matmul).
#include "loom/ops/matmul.hpp"

LOOM_BEGIN_NAMESPACE
namespace detail {

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

}  // namespace detail
LOOM_END_NAMESPACE

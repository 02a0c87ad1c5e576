// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it first): ONNX tensors as
// loom's bytes. Element types, the TensorProto data of initializers and Constant nodes in
// loom's layout, and constants read back as numbers by the converters that need their values
// (shapes, axes, bounds).
#include "loom/error.hpp"
#include "loom/onnx.hpp"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace detail {

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

}  // namespace detail
LOOM_END_NAMESPACE

// Bodies of loom/runtime/host_tensor.hpp.
#include "loom/runtime/host_tensor.hpp"

#include "loom/error.hpp"

#include <cstring>
#include <fstream>
#include <sstream>

LOOM_BEGIN_NAMESPACE

namespace detail {

inline const char* descr_of(ir::DType t) {
  if (t == ir::DType::f32()) return "<f4";
  if (t == ir::DType::f64()) return "<f8";
  if (t == ir::DType::i32()) return "<i4";
  if (t == ir::DType::i64()) return "<i8";
  return nullptr;
}

// The value of `key` in the header's Python dict literal, as written (quotes and all).
inline std::string dict_value(const std::string& header, const std::string& key) {
  const auto k = header.find("'" + key + "'");
  if (k == std::string::npos) return {};
  auto v = header.find(':', k);
  if (v == std::string::npos) return {};
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  if (v >= header.size()) return {};
  const char open = header[v];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const auto end = header.find(close, v + 1);
  if (end == std::string::npos) return {};
  return header.substr(v, end - v + (close == ',' ? 0 : 1));
}

}  // namespace detail

LOOM_DECL HostTensor::HostTensor(std::string n, ir::DType t, std::vector<int64_t> s)
    : name(std::move(n)), dtype(t), shape(std::move(s)) {
  bytes.assign(static_cast<size_t>(num_elements()) * dtype.bytes(), 0);
}

LOOM_DECL int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

LOOM_DECL HostTensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "loom.runtime.E1201") << "cannot open '" << path << "'";
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string& why) {
    LOOM_USER_CHECK(false, "loom.runtime.E1201")
        << "'" << path << "' is not a .npy file loom reads: " << why;
  };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) fail("no numpy magic string");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | static_cast<unsigned char>(data[9]) << 8;
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) fail("truncated header");
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(data[8 + i])) << (8 * i);
    header_at = 12;
  } else {
    fail("format version " + std::to_string(major));
  }
  if (header_at + header_len > data.size()) fail("truncated header");
  const std::string header = data.substr(header_at, header_len);
  const std::string descr = detail::dict_value(header, "descr");
  const std::string order = detail::dict_value(header, "fortran_order");
  const std::string shape_text = detail::dict_value(header, "shape");
  if (order != "False") fail("fortran_order is '" + order + "' (only C order is read)");
  HostTensor t;
  t.name = path;
  if (descr == "'<f4'")
    t.dtype = ir::DType::f32();
  else if (descr == "'<f8'")
    t.dtype = ir::DType::f64();
  else if (descr == "'<i4'")
    t.dtype = ir::DType::i32();
  else if (descr == "'<i8'")
    t.dtype = ir::DType::i64();
  else
    fail("element type " + descr + " (float32, float64, int32 and int64 are read)");
  if (shape_text.size() < 2 || shape_text.front() != '(') fail("no shape");
  std::stringstream dims(shape_text.substr(1, shape_text.size() - 2));
  std::string item;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    int64_t d = -1;
    try {
      d = std::stoll(item);
    } catch (const std::exception&) {
    }
    if (d < 0 || d > (int64_t{1} << 40)) fail("shape " + shape_text);
    t.shape.push_back(d);
  }
  const size_t body = data.size() - header_at - header_len;
  const size_t want = static_cast<size_t>(t.num_elements()) * t.dtype.bytes();
  if (body != want)
    fail("shape " + shape_text + " needs " + std::to_string(want) +
         " bytes of data, the file has " + std::to_string(body));
  t.bytes.resize(want);
  if (want) std::memcpy(t.bytes.data(), data.data() + header_at + header_len, want);
  return t;
}

LOOM_DECL void write_npy(const std::string& path, const HostTensor& t) {
  const char* descr = detail::descr_of(t.dtype);
  LOOM_USER_CHECK(descr != nullptr, "loom.runtime.E1201")
      << "write_npy: '" << path << "': " << ir::to_string(t.dtype)
      << " has no .npy type loom writes";
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i)
    shape += std::to_string(t.shape[i]) + (t.shape.size() == 1      ? ","
                                           : i + 1 < t.shape.size() ? ", "
                                                                    : "");
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // The magic, version and length take 10 bytes; numpy pads the header with spaces to a multiple
  // of 64 and ends it with a newline.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  LOOM_USER_CHECK(out.good(), "loom.runtime.E1201") << "write_npy: cannot create '" << path << "'";
  const unsigned char preamble[10] = {0x93,
                                      'N',
                                      'U',
                                      'M',
                                      'P',
                                      'Y',
                                      1,
                                      0,
                                      static_cast<unsigned char>(header.size() & 0xff),
                                      static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(preamble), 10);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(t.bytes.data()),
            static_cast<std::streamsize>(t.bytes.size()));
  LOOM_USER_CHECK(out.good(), "loom.runtime.E1201") << "write_npy: writing '" << path << "' failed";
}

LOOM_END_NAMESPACE

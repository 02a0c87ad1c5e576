// The ONNX importer on models built here with ONNX's protobuf classes: the graph passes (batch
// norm folding, constant folding, Identity/Dropout), and every kind of bad model, each refused
// with its named error.
#include <doctest/doctest.h>

#include "loom/dag/evaluate.hpp"
#include "loom/onnx.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using loom::HostTensor;

struct model_builder {
  onnx::ModelProto model;
  onnx::GraphProto* graph;

  explicit model_builder(int opset = 13) {
    model.set_ir_version(7);
    auto* o = model.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    graph = model.mutable_graph();
    graph->set_name("test");
  }
  static void set_shape(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                        std::initializer_list<int64_t> shape) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  model_builder& input(const std::string& name, std::initializer_list<int64_t> shape,
                       int elem_type = onnx::TensorProto::FLOAT) {
    set_shape(graph->add_input(), name, elem_type, shape);
    return *this;
  }
  model_builder& output(const std::string& name) {
    graph->add_output()->set_name(name);
    return *this;
  }
  // An initializer from raw little-endian bytes, as exporters write them.
  template <class T>
  model_builder& initializer(const std::string& name, int elem_type,
                             const std::vector<int64_t>& shape, const std::vector<T>& v) {
    auto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(elem_type);
    for (int64_t d : shape) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
    return *this;
  }
  model_builder& floats(const std::string& name, std::vector<int64_t> shape,
                        const std::vector<float>& v) {
    return initializer(name, onnx::TensorProto::FLOAT, shape, v);
  }
  model_builder& ints(const std::string& name, std::vector<int64_t> shape,
                      const std::vector<int64_t>& v) {
    return initializer(name, onnx::TensorProto::INT64, shape, v);
  }
  onnx::NodeProto* node(const std::string& op, std::initializer_list<std::string> in,
                        std::initializer_list<std::string> out, const std::string& name = "") {
    auto* n = graph->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph->node_size()) : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, std::initializer_list<int64_t> v) {
    attr(n, name, std::vector<int64_t>(v));
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  loom::OnnxModel import(const loom::OnnxOptions& options = {}) const {
    return loom::import_onnx_bytes(model.SerializeAsString(), options, "test model");
  }
};

// Runs the imported network with the reference interpreter on one float input.
std::vector<float> evaluate(const loom::OnnxModel& m, std::vector<float> input) {
  const auto& net = *m.network;
  std::vector<void*> buffers{input.data()};
  for (const auto& c : net.constants())
    buffers.push_back(const_cast<unsigned char*>(c.bytes->data()));
  std::vector<float> out(static_cast<size_t>(net.outputs()[0].num_elements()));
  buffers.push_back(out.data());
  loom::evaluate(net.dag(), buffers);
  return out;
}

// The message of the loom::user_error `f` throws, or "(no error)".
template <class F>
std::string error_of(const F& f) {
  try {
    f();
  } catch (const loom::user_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string refusal(const model_builder& b, const loom::OnnxOptions& options = {}) {
  return error_of([&] { b.import(options); });
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

TEST_CASE("BatchNormalization after a Conv folds into its weight and bias, exactly") {
  // x [1, 2, 2, 2], a 1x1 conv to 3 channels with bias, then batch norm and ReLU.
  const std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
  const std::vector<float> b = {0.1f, -0.2f, 0.3f};
  const std::vector<float> gamma = {1.5f, 0.5f, -2.0f}, beta = {0.2f, -0.1f, 0.05f};
  const std::vector<float> mean = {0.3f, -0.4f, 0.1f}, var = {0.8f, 1.2f, 0.5f};
  const float eps = 1e-3f;
  model_builder m;
  m.input("x", {1, 2, 2, 2}).output("y");
  m.floats("w", {3, 2, 1, 1}, w)
      .floats("b", {3}, b)
      .floats("gamma", {3}, gamma)
      .floats("beta", {3}, beta);
  m.floats("mean", {3}, mean).floats("var", {3}, var);
  m.node("Conv", {"x", "w", "b"}, {"c"});
  model_builder::attr(m.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"n"}),
                      "epsilon", eps);
  m.node("Relu", {"n"}, {"y"});

  const std::vector<float> x = {1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f};
  std::vector<double> want(12);
  for (int o = 0; o < 3; ++o)
    for (int p = 0; p < 4; ++p) {
      const double conv = double(w[o * 2]) * x[p] + double(w[o * 2 + 1]) * x[4 + p] + b[o];
      const double n = (conv - mean[o]) / std::sqrt(double(var[o]) + eps) * gamma[o] + beta[o];
      want[o * 4 + p] = std::max(n, 0.0);
    }
  const loom::OnnxModel folded = m.import();
  CHECK(folded.stats.folded_batch_norms == 1);
  for (const auto& op : folded.network->dag().ops()) CHECK(op->tag != "batch_norm");
  loom::OnnxOptions keep;
  keep.fold_batch_norm = false;
  const loom::OnnxModel unfolded = m.import(keep);
  CHECK(unfolded.stats.folded_batch_norms == 0);
  const auto a = evaluate(folded, x), u = evaluate(unfolded, x);
  for (int i = 0; i < 12; ++i) {
    CHECK(a[i] == doctest::Approx(want[i]).epsilon(1e-6));
    CHECK(u[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

TEST_CASE("constant subgraphs fold at import; Identity and Dropout disappear") {
  // y = reshape(x, concat(unsqueeze(gather(shape(x), 0)), [-1])): the exporters' x.view(n, -1).
  model_builder m;
  m.input("x", {2, 3, 4}).output("y");
  m.ints("zero", {}, {0}).ints("minus_one", {1}, {-1}).ints("axes", {1}, {0});
  m.node("Identity", {"x"}, {"x1"});
  m.node("Dropout", {"x1"}, {"x2"});
  m.node("Shape", {"x2"}, {"s"});
  m.node("Gather", {"s", "zero"}, {"n"});
  m.node("Unsqueeze", {"n", "axes"}, {"n1"});
  model_builder::attr(m.node("Concat", {"n1", "minus_one"}, {"shape"}), "axis", {0});
  m.graph->mutable_node(m.graph->node_size() - 1)
      ->mutable_attribute(0)
      ->set_type(onnx::AttributeProto::INT);
  m.graph->mutable_node(m.graph->node_size() - 1)->mutable_attribute(0)->set_i(0);
  m.node("Reshape", {"x2", "shape"}, {"r"});
  m.node("Relu", {"r"}, {"y"});
  const loom::OnnxModel imported = m.import();
  CHECK(imported.stats.dropped == 2);
  CHECK(imported.stats.folded_constants >=
        2);  // Gather and Concat (Shape and Unsqueeze are known outright)
  const auto& net = *imported.network;
  CHECK(net.outputs()[0].shape() == std::vector<int64_t>{2, 12});
  CHECK(net.constants().empty());  // the shape arithmetic left nothing to pass at run time
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
  const auto y = evaluate(imported, x);
  for (int i = 0; i < 24; ++i) CHECK(y[i] == std::max(x[i], 0.0f));
}

TEST_CASE("a layer norm written out node by node (opset 13 exports) imports as one layer_norm") {
  model_builder m;
  m.input("x", {2, 4}).output("y");
  m.floats("gamma", {4}, {1.0f, 0.5f, -1.0f, 2.0f}).floats("beta", {4}, {0.0f, 0.1f, 0.2f, -0.3f});
  m.floats("two", {}, {2.0f}).floats("eps", {}, {1e-5f});
  model_builder::attr(m.node("ReduceMean", {"x"}, {"mean"}), "axes", {-1});
  m.node("Sub", {"x", "mean"}, {"d"});
  m.node("Pow", {"d", "two"}, {"d2"});
  model_builder::attr(m.node("ReduceMean", {"d2"}, {"var"}), "axes", {-1});
  m.node("Add", {"var", "eps"}, {"ve"});
  m.node("Sqrt", {"ve"}, {"sd"});
  m.node("Div", {"d", "sd"}, {"n"});
  m.node("Mul", {"n", "gamma"}, {"g"});
  m.node("Add", {"beta", "g"}, {"y"});
  const loom::OnnxModel imported = m.import();
  CHECK(imported.stats.fused_layer_norms == 1);
  int tagged = 0;
  for (const auto& op : imported.network->dag().ops()) tagged += op->tag == "layer_norm";
  CHECK(tagged == 1);
  CHECK(imported.network->groups().size() == 1);
  const std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 2, 8};
  const float gamma[] = {1.0f, 0.5f, -1.0f, 2.0f}, beta[] = {0.0f, 0.1f, 0.2f, -0.3f};
  const auto y = evaluate(imported, x);
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += x[r * 4 + i] / 4.0;
    for (int i = 0; i < 4; ++i) var += (x[r * 4 + i] - mean) * (x[r * 4 + i] - mean) / 4.0;
    for (int i = 0; i < 4; ++i)
      CHECK(y[r * 4 + i] ==
            doctest::Approx((x[r * 4 + i] - mean) / std::sqrt(var + 1e-5) * gamma[i] + beta[i])
                .epsilon(1e-5));
  }
}

TEST_CASE("numpy broadcasting with extent-1 dimensions, and symbolic dimensions given by name") {
  model_builder m;
  auto* in = m.graph->add_input();
  model_builder::set_shape(in, "x", onnx::TensorProto::FLOAT, {});
  auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  shape->add_dim()->set_dim_value(3);
  shape->add_dim()->set_dim_value(1);
  m.output("y");
  m.floats("bias", {1, 2}, {10, 20});
  m.node("Add", {"x", "bias"}, {"y"});
  CHECK(starts_with(refusal(m), "[loom.onnx.E1106]"));
  CHECK(refusal(m).find("'batch'") != std::string::npos);
  loom::OnnxOptions o;
  o.dimensions["batch"] = 2;
  const loom::OnnxModel imported = m.import(o);
  CHECK(imported.network->outputs()[0].shape() == std::vector<int64_t>{2, 3, 2});
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const auto y = evaluate(imported, x);
  for (int i = 0; i < 6; ++i) {
    CHECK(y[i * 2] == x[i] + 10);
    CHECK(y[i * 2 + 1] == x[i] + 20);
  }
}

TEST_CASE("bad models are refused with a named error") {
  SUBCASE("not a model") {
    CHECK(starts_with(error_of([] { loom::import_onnx_bytes(""); }), "[loom.onnx.E1101]"));
    model_builder m;
    m.input("x", {2}).output("y");
    m.node("Relu", {"x"}, {"y"});
    const std::string bytes = m.model.SerializeAsString();
    for (size_t cut : {size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
      CAPTURE(cut);
      const std::string what = error_of([&] { loom::import_onnx_bytes(bytes.substr(0, cut)); });
      CHECK((starts_with(what, "[loom.onnx.E1101]") || starts_with(what, "[loom.onnx.E1105]")));
    }
    CHECK(starts_with(error_of([] { loom::import_onnx("/nonexistent/model.onnx"); }),
                      "[loom.onnx.E1101]"));
  }
  SUBCASE("an operator loom does not import: the node and the op are named") {
    model_builder m;
    m.input("x", {2}).output("y");
    m.node("Hardmax", {"x"}, {"y"}, "my_node");
    const std::string r = refusal(m);
    CHECK(starts_with(r, "[loom.onnx.E1102]"));
    CHECK(r.find("'my_node'") != std::string::npos);
    CHECK(r.find("Hardmax") != std::string::npos);
  }
  SUBCASE("an operator of another domain") {
    model_builder m;
    m.input("x", {2}).output("y");
    m.node("Relu", {"x"}, {"y"})->set_domain("com.example");
    CHECK(starts_with(refusal(m), "[loom.onnx.E1102]"));
  }
  SUBCASE("an unknown attribute and an unsupported attribute value") {
    model_builder m;
    m.input("x", {1, 1, 4, 4}).output("y");
    model_builder::attr(m.node("MaxPool", {"x"}, {"y"}), "frobnicate", {1});
    const std::string r = refusal(m);
    CHECK(starts_with(r, "[loom.onnx.E1103]"));
    CHECK(r.find("'frobnicate'") != std::string::npos);
    model_builder p;
    p.input("x", {1, 1, 4, 4}).output("y");
    auto* n = p.node("Pad", {"x", "pads"}, {"y"});
    p.ints("pads", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
    auto* a = n->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("reflect");
    const std::string r2 = refusal(p);
    CHECK(starts_with(r2, "[loom.onnx.E1103]"));
    CHECK(r2.find("reflect") != std::string::npos);
  }
  SUBCASE("window attributes of the wrong length or out of range (found by fuzz_onnx)") {
    // MaxPool with one stride for two spatial dimensions read past the attribute (a heap
    // overflow under AddressSanitizer); a stride of 0 divided by zero.
    const std::vector<std::pair<const char*, std::vector<int64_t>>> bad = {
        {"strides", {2}},
        {"strides", {0, 1}},
        {"kernel_shape", {2, -1}},
        {"pads", {1, 1, 1}},
        {"pads", {-1, 0, 0, 0}}};
    for (const auto& [name, values] : bad) {
      CAPTURE(name);
      model_builder m;
      m.input("x", {1, 1, 4, 4}).output("y");
      auto* n = m.node("MaxPool", {"x"}, {"y"});
      if (std::string(name) != "kernel_shape") model_builder::attr(n, "kernel_shape", {2, 2});
      model_builder::attr(n, name, values);
      const std::string r = refusal(m);
      CHECK(starts_with(r, "[loom.onnx.E1103]"));
      CHECK(r.find(std::string("'") + name + "'") != std::string::npos);
    }
    model_builder c;
    c.input("x", {1, 1, 5, 5}).output("y");
    c.floats("w", {1, 1, 3, 3}, std::vector<float>(9, 1.0f));
    model_builder::attr(c.node("Conv", {"x", "w"}, {"y"}), "dilations", {0, 1});
    CHECK(starts_with(refusal(c), "[loom.onnx.E1103]"));
  }
  SUBCASE("an element type loom has no tensors of") {
    model_builder m;
    m.input("x", {2}, onnx::TensorProto::FLOAT16).output("y");
    m.node("Relu", {"x"}, {"y"});
    const std::string r = refusal(m);
    CHECK(starts_with(r, "[loom.onnx.E1104]"));
    CHECK(r.find("FLOAT16") != std::string::npos);
  }
  SUBCASE("malformed graphs") {
    model_builder m;
    m.input("x", {2}).output("y");
    m.node("Add", {"x", "nowhere"}, {"y"});
    const std::string r = refusal(m);
    CHECK(starts_with(r, "[loom.onnx.E1105]"));
    CHECK(r.find("'nowhere'") != std::string::npos);
    model_builder w;
    w.input("x", {2}).output("y");
    w.floats("c", {3}, {1, 2});  // 3 elements declared, 2 given
    w.node("Add", {"x", "c"}, {"y"});
    CHECK(starts_with(refusal(w), "[loom.onnx.E1105]"));
    model_builder s;
    s.input("x", {2, 3}).output("y");
    s.floats("c", {4}, {1, 2, 3, 4});  // does not broadcast against [2, 3]
    s.node("Add", {"x", "c"}, {"y"});
    const std::string r3 = refusal(s);
    CHECK(starts_with(r3, "[loom.onnx.E1105]"));
    CHECK(r3.find("loom.ops.E305") != std::string::npos);
    model_builder o;
    o.input("x", {2}).output("missing");
    o.node("Relu", {"x"}, {"y"});
    CHECK(starts_with(refusal(o), "[loom.onnx.E1105]"));
  }
  SUBCASE("an input an operator needs constant, then given as a constant input") {
    model_builder m;
    m.input("x", {2, 3}).input("shape", {1}, onnx::TensorProto::INT64).output("y");
    m.node("Reshape", {"x", "shape"}, {"y"});
    const std::string r = refusal(m);
    CHECK(starts_with(r, "[loom.onnx.E1107]"));
    loom::OnnxOptions o;
    HostTensor shape("shape", loom::ir::DType::i64(), {1});
    shape.data<int64_t>()[0] = 6;
    o.constant_inputs["shape"] = shape;
    const loom::OnnxModel imported = m.import(o);
    CHECK(imported.network->inputs().size() == 1);
    CHECK(imported.network->outputs()[0].shape() == std::vector<int64_t>{6});
  }
}

TEST_CASE(".npy files round-trip, and bad ones are refused by name") {
  const std::string path = "loom_test_roundtrip.npy";
  HostTensor t("t", loom::ir::DType::f32(), {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f;
  loom::write_npy(path, t);
  const HostTensor r = loom::read_npy(path);
  CHECK(r.shape == t.shape);
  CHECK(r.dtype == t.dtype);
  CHECK(r.bytes == t.bytes);
  {
    std::ofstream bad(path, std::ios::binary);
    bad << "not numpy";
  }
  CHECK(starts_with(error_of([&] { loom::read_npy(path); }), "[loom.runtime.E1201]"));
  std::remove(path.c_str());
}

TEST_CASE("the importer lists what it supports") {
  const auto ops = loom::supported_onnx_operators();
  for (const char* op : {"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "MaxPool",
                         "GlobalAveragePool", "Softmax", "LayerNormalization", "Reshape", "Erf"})
    CHECK(std::find(ops.begin(), ops.end(), op) != ops.end());
}

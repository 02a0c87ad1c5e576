// ComputeDAG: construction errors, topological order, analysis, FLOPs, workload key, printing.
#include <doctest/doctest.h>
#include <loom/loom.hpp>

#include <fstream>
#include <sstream>

using namespace loom;

namespace {

struct matmul_relu {
  Tensor<float, 2> A, B, C, D;
  Tensor<float, 1> bias;
  matmul_relu(int64_t M, int64_t N, int64_t K, const std::string& a = "A",
              const std::string& b = "B", const std::string& kname = "k") {
    A = placeholder<float>(a, {M, K});
    B = placeholder<float>(b, {K, N});
    bias = placeholder<float>("bias", {N});
    auto k = reduce_axis(K, kname);
    C = compute("C", {M, N}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); }, "matmul");
    D = compute("D", {M, N}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); }, "relu");
  }
  ComputeDAG dag() const { return ComputeDAG({A, B, bias}, {D}); }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_SUITE("dag") {
  TEST_CASE("ops are in topological order and arguments are inputs then outputs") {
    matmul_relu g(64, 48, 32);
    ComputeDAG dag = g.dag();
    REQUIRE(dag.num_ops() == 5);
    std::vector<std::string> names;
    for (auto& t : dag.ops()) names.push_back(t.name());
    CHECK(names == std::vector<std::string>{"A", "B", "C", "bias", "D"});
    auto args = dag.arguments();
    REQUIRE(args.size() == 4);
    CHECK(args[2].name() == "bias");
    CHECK(args[3].name() == "D");
    CHECK(dag.info(g.C).producers == std::vector<int>{0, 1});
    CHECK(dag.info(g.C).consumers == std::vector<int>{4});
  }

  TEST_CASE("printing is stable (golden file)") {
    matmul_relu g(64, 48, 32);
    std::ostringstream os;
    os << g.dag();
    CHECK(os.str() == read_file(LOOM_TEST_DATA_DIR "/golden/dag_matmul_relu.txt"));
  }

  TEST_CASE("analysis predicates") {
    matmul_relu g(64, 48, 32);
    ComputeDAG dag = g.dag();
    const OpInfo& c = dag.info(g.C);
    const OpInfo& d = dag.info(g.D);
    CHECK(dag.info(g.A).is_placeholder);
    CHECK(c.needs_multi_level_tiling);
    CHECK(c.has_reduce);
    CHECK_FALSE(c.is_injective);
    CHECK_FALSE(c.is_strictly_inlineable);
    CHECK(c.spatial_size == 64 * 48);
    CHECK(c.reduce_size == 32);
    CHECK(d.is_injective);
    CHECK(d.is_strictly_inlineable);
    CHECK(d.is_output);
    CHECK_FALSE(d.is_elementwise);  // reads bias with a missing axis
    CHECK_FALSE(d.needs_multi_level_tiling);
    CHECK(dag.elementwise_match(dag.op_index(g.C), dag.op_index(g.D)));
    CHECK(dag.single_elementwise_matched_consumer(dag.op_index(g.C)) == dag.op_index(g.D));

    // A row reduction has no data reuse, and exp makes an op not strictly inlineable.
    auto X = placeholder<float>("X", {16, 1024});
    auto k = reduce_axis(1024, "k");
    auto e = compute("e", {16, 1024}, [&](Var i, Var j) { return exp(X(i, j)); });
    auto s = compute("s", {16}, [&](Var i) { return sum(e(i, k), k); });
    ComputeDAG rows({X}, {s});
    CHECK_FALSE(rows.info(s).needs_multi_level_tiling);
    CHECK_FALSE(rows.info(e).is_strictly_inlineable);
    CHECK(rows.info(e).is_elementwise);
    // Little spatial parallelism and a long reduction: a candidate for rfactor.
    CHECK(rows.has_more_reduction_parallel(rows.op_index(s), 2));
    CHECK_FALSE(dag.has_more_reduction_parallel(dag.op_index(g.C), 2));

    // A transpose is injective but not strictly inlineable (axes out of order).
    auto T = compute("T", {1024, 16}, [&](Var i, Var j) { return X(j, i); });
    ComputeDAG tr({X}, {T});
    CHECK(tr.info(T).is_injective);
    CHECK_FALSE(tr.info(T).is_strictly_inlineable);
    // A shifted read is a simple access.
    auto S = compute("S", {16, 1023}, [&](Var i, Var j) { return X(i, j + 1) * 2.0f; });
    CHECK(ComputeDAG({X}, {S}).info(S).is_strictly_inlineable);
  }

  TEST_CASE("FLOP count") {
    matmul_relu g(64, 48, 32);
    CHECK(g.dag().flop_count() == doctest::Approx(2.0 * 64 * 48 * 32 + 2.0 * 64 * 48));
    CHECK(g.dag().info(g.C).flops == doctest::Approx(2.0 * 64 * 48 * 32));
  }

  TEST_CASE("the workload key is structural") {
    std::string key = matmul_relu(64, 48, 32).dag().workload_key();
    CHECK(key.size() == 19);
    CHECK(key.rfind("wk-", 0) == 0);
    // Same computation, other names: same key.
    CHECK(matmul_relu(64, 48, 32, "X", "Y", "r").dag().workload_key() == key);
    // Same computation built twice: same key.
    CHECK(matmul_relu(64, 48, 32).dag().workload_key() == key);
    // Other shapes: other keys.
    CHECK(matmul_relu(64, 48, 16).dag().workload_key() != key);
    CHECK(matmul_relu(48, 64, 32).dag().workload_key() != key);
    // The key is stable across runs and machines: pin its value.
    CHECK(key == "wk-414e887d194642cf");
    // Other argument order: another kernel signature, another key.
    matmul_relu g(64, 48, 32);
    CHECK(ComputeDAG({g.B, g.A, g.bias}, {g.D}).workload_key() != key);
    // Other body: another key.
    auto k = reduce_axis(32, "k");
    auto C2 = compute("C", {64, 48}, [&](Var i, Var j) { return max(g.A(i, k) * g.B(k, j), k); });
    auto D2 = compute("D", {64, 48}, [&](Var i, Var j) { return max(C2(i, j) + g.bias(j), 0.0f); });
    CHECK(ComputeDAG({g.A, g.B, g.bias}, {D2}).workload_key() != key);
  }

  TEST_CASE("construction errors name the tensor and the fix") {
    matmul_relu g(8, 8, 8);
    CHECK_THROWS_WITH_AS(ComputeDAG({g.A, g.B}, {g.D}),
                         "[loom.dag.E206] the outputs read placeholder 'bias', which is not among "
                         "the inputs; add it to the ComputeDAG's inputs",
                         user_error);
    CHECK_THROWS_WITH_AS(ComputeDAG({g.A, g.B, g.C}, {g.D}),
                         doctest::Contains("[loom.dag.E204] input 'C' is computed"), user_error);
    auto lone = placeholder<float>("lone", {2});
    CHECK_THROWS_WITH_AS(ComputeDAG({g.A, g.B, g.bias}, {lone}),
                         doctest::Contains("[loom.dag.E205] output 'lone' is a placeholder"),
                         user_error);
    CHECK_THROWS_WITH_AS(ComputeDAG({g.A, g.A, g.B, g.bias}, {g.D}),
                         "[loom.dag.E203] tensor 'A' is passed twice (arguments 0 and 1)",
                         user_error);
    // Sizes past int64_t: refused here, not wrapped into a crash or a wrong FLOP count later.
    const int64_t big = int64_t{1} << 32;
    auto huge = placeholder<float>("huge", {big, big});
    auto twice = compute("twice", {big, big}, [&](Var i, Var j) { return huge(i, j) * 2.0f; });
    CHECK_THROWS_WITH_AS(ComputeDAG({huge}, {twice}),
                         "[loom.dag.E219] tensor 'huge': its element count overflows a 64-bit "
                         "count (shape 4294967296 x 4294967296); split the computation into "
                         "smaller tensors",
                         user_error);
    auto x = placeholder<float>("x", {big});
    auto y = placeholder<float>("y", {big});
    auto r = reduce_axis(big, "r");
    auto long_sum = compute("long_sum", {big}, [&](Var j) { return sum(x(r) * y(j), r); });
    CHECK_THROWS_WITH_AS(ComputeDAG({x, y}, {long_sum}),
                         doctest::Contains("[loom.dag.E219] tensor 'long_sum': its iteration space "
                                           "(elements x reduction 'r') overflows"),
                         user_error);
    CHECK_THROWS_WITH_AS(ComputeDAG({g.A}, {}), doctest::Contains("[loom.dag.E201]"), user_error);
    auto other = placeholder<float>("other", {3});
    CHECK_THROWS_WITH_AS(g.dag().op_index(other), doctest::Contains("[loom.dag.E207]"), user_error);
  }

  TEST_CASE("several outputs and unused inputs are kept as arguments") {
    auto X = placeholder<float>("X", {4});
    auto unused = placeholder<float>("unused", {2});
    auto a = compute("a", {4}, [&](Var i) { return X(i) + 1.0f; });
    auto b = compute("b", {4}, [&](Var i) { return a(i) * 2.0f; });
    ComputeDAG dag({X, unused}, {a, b});
    CHECK(dag.num_ops() == 4);
    CHECK(dag.info(a).is_output);
    CHECK(dag.info(b).is_output);
    CHECK(dag.arguments().size() == 4);
  }
}

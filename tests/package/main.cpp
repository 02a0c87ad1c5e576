// The consumer program of the package tests: builds a small DAG, evaluates it with the reference
// interpreter and checks the result, and reads the pretrained cost model where the headers it
// was compiled against say it is. It must build against loom as an installed package
// (find_package) and as a subproject (add_subdirectory).
#include <loom/cost/pretrained.hpp>
#include <loom/loom.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  using namespace loom;
  constexpr int64_t M = 4, K = 3;
  auto A = placeholder<float>("A", {M, K});
  auto x = placeholder<float>("x", {K});
  auto k = reduce_axis(K, "k");
  auto y = compute("y", {M}, [&](Var i) { return sum(A(i, k) * x(k), k); });
  auto z = compute("z", {M}, [&](Var i) { return max(y(i), 0.0f); });
  ComputeDAG dag({A, x}, {z});

  std::vector<float> a(M * K), xs = {1.0f, -1.0f, 2.0f}, out(M, -1.0f);
  for (int64_t i = 0; i < M * K; ++i) a[i] = static_cast<float>(i % 5) - 1.0f;
  evaluate(dag, {a.data(), xs.data(), out.data()});

  int bad = 0;
  for (int64_t i = 0; i < M; ++i) {
    float expect = 0.0f;
    for (int64_t j = 0; j < K; ++j) expect += a[i * K + j] * xs[j];
    expect = expect > 0.0f ? expect : 0.0f;
    if (out[i] != expect) ++bad;
  }
  // A package without its model would fall back silently to random first rounds and default
  // schedules: load it here so that the tests fail instead.
  const std::string model_path = cost::pretrained_model_path();
  const auto model = cost::load_pretrained_model(model_path);
  std::printf("pretrained cost model: %s, %d trees\n", model_path.c_str(),
              model->model().num_trees());
  std::printf("loom %s consumer: %d ops, workload %s, %s\n", LOOM_VERSION_STRING, dag.num_ops(),
              dag.workload_key().c_str(), bad ? "WRONG RESULT" : "result ok");
  return bad ? 1 : 0;
}

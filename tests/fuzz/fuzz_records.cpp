// Fuzz target: one tuning-record line, read and replayed (issue 35). Whatever the bytes, reading
// them gives a record or a loom::user_error naming what is wrong; the record's steps, replayed on
// a small matmul + bias + relu DAG (whatever workload the line names), give a state or a named
// error; a state that lowers computes what the DAG interpreter computes. Anything else (another
// exception, a crash, a sanitizer report, a wrong result) is a bug: the target aborts.
//
// Built two ways (tests/fuzz/CMakeLists.txt): with clang's libFuzzer (-DLOOM_FUZZ=ON, clang-19)
// as `fuzz_records`, which mutates the corpus; and as the ctest `loom_fuzz_records_corpus`, which
// runs every file of tests/fuzz/corpus/records through the same function, so that each input a
// fuzzing run found stays a regression test.
#include <loom/loom.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/lower.hpp>
#include <loom/search/records.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace loom;

struct fixture {
  std::shared_ptr<const ComputeDAG> dag;
  std::vector<std::vector<float>> inputs;
  std::vector<float> expected;
};

const fixture& the_fixture() {
  static const fixture f = [] {
    fixture x;
    auto A = placeholder<float>("A", {6, 5});
    auto B = placeholder<float>("B", {5, 7});
    auto bias = placeholder<float>("bias", {7});
    auto k = reduce_axis(5, "k");
    auto C = compute("C", {6, 7}, [&](Var i, Var j) { return sum(A(i, k) * B(k, j), k); });
    auto D = compute("D", {6, 7}, [&](Var i, Var j) { return max(C(i, j) + bias(j), 0.0f); });
    x.dag = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{A, B, bias},
                                               std::vector<ir::Tensor>{D});
    for (int64_t n : {30, 35, 7}) {
      std::vector<float> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + n) % 11) - 5.0f;
      x.inputs.push_back(v);
    }
    x.expected.assign(42, 0.0f);
    evaluate(*x.dag,
             {x.inputs[0].data(), x.inputs[1].data(), x.inputs[2].data(), x.expected.data()});
    return x;
  }();
  return f;
}

[[noreturn]] void fail(const std::string& what, const std::string& line) {
  std::fprintf(stderr, "fuzz_records: %s\nline: %s\n", what.c_str(), line.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  const fixture& f = the_fixture();
  search::TuningRecord record;
  try {
    record = search::record_from_json_line(line);
  } catch (const user_error&) {
    return 0;
  }
  std::optional<sched::State> state;
  ir::LoweredFunc func;
  try {
    state = sched::replay(f.dag, record.steps);
    func = lower::lower(*state, "fuzzed");
  } catch (const user_error&) {
    return 0;
  }
  // Lowered programs this small run in microseconds; a history that asks for more iterations
  // than the DAG has points (a split far past an extent) still runs only the DAG's points.
  std::vector<std::vector<float>> in = f.inputs;
  std::vector<float> out(42, NAN);
  try {
    lower::interpret(func, {in[0].data(), in[1].data(), in[2].data(), out.data()});
  } catch (const user_error& e) {
    fail(std::string("a lowered program failed to run: ") + e.what(), line);
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (!(std::abs(out[i] - f.expected[i]) <= 1e-4f * (1 + std::abs(f.expected[i]))))
      fail("element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", the DAG says " +
               std::to_string(f.expected[i]) + "\n" + state->to_string(),
           line);
  return 0;
}

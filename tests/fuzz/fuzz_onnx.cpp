// Fuzz target: the ONNX importer on mutated models (issue 35). Whatever the bytes, importing them
// gives a network or a loom::user_error naming what is wrong; a network small enough (at most
// 2^20 elements of arguments and 10^7 operations) is then evaluated by the reference
// interpreter on zero-filled inputs, which must finish without an error or a sanitizer report.
// Anything else (another exception, a crash, a sanitizer report) is a bug: the target aborts.
//
// Built two ways (tests/fuzz/CMakeLists.txt), like fuzz_records: with libFuzzer
// (-DLOOM_FUZZ=ON, clang-19) as `fuzz_onnx`, and as the ctest `loom_fuzz_onnx_corpus` over
// tests/fuzz/corpus/onnx (node-test models of Debian's libonnx-testdata and what fuzzing found).
#include <loom/dag/evaluate.hpp>
#include <loom/onnx.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace loom;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_onnx: %s\n", what.c_str());
  std::abort();
}

constexpr int64_t kMaxElements = int64_t{1} << 20;
constexpr double kMaxFlops = 1e7;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  OnnxModel m;
  try {
    m = import_onnx_bytes(bytes, {}, "fuzzed model");
  } catch (const user_error&) {
    return 0;
  } catch (const std::exception& e) {
    fail(std::string("the importer threw something other than a loom::user_error: ") + e.what());
  }
  const net::Network& network = *m.network;
  const ComputeDAG& dag = network.dag();
  int64_t elements = 0;
  for (const ir::Tensor& t : dag.arguments()) elements += t.num_elements();
  if (elements > kMaxElements || dag.flop_count() > kMaxFlops) return 0;
  std::vector<std::vector<unsigned char>> storage;
  std::vector<void*> buffers;
  for (const ir::Tensor& t : network.inputs()) {
    storage.emplace_back(static_cast<size_t>(t.num_elements() * t.dtype().bytes()), 0);
    buffers.push_back(storage.back().data());
  }
  for (const auto& c : network.constants())
    buffers.push_back(const_cast<unsigned char*>(c.bytes->data()));
  for (const ir::Tensor& t : network.outputs()) {
    storage.emplace_back(static_cast<size_t>(t.num_elements() * t.dtype().bytes()), 0);
    buffers.push_back(storage.back().data());
  }
  try {
    evaluate(dag, buffers);
  } catch (const std::exception& e) {
    fail(std::string("an imported network failed to evaluate: ") + e.what());
  }
  return 0;
}

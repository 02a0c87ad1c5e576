// Halide 14's GEMMs as bench_gemm contenders (built with LOOM_BENCH_HALIDE=ON, see
// benchmarks/halide/): HalideAdams2019, HalideMullapudi2016 and HalideLi2018 are the kernels
// Halide's autoschedulers scheduled for each shape, HalideHand the short hand schedule (register
// tile, packed B panel, parallel column panels). All are compiled ahead of time for one shape;
// a shape without a generated kernel is not registered.
#include <memory>
#include <string>

#include "baselines/gemm_bench.hpp"
#include "baselines/halide.hpp"

namespace {

loom_bench::GemmContender make_contender(const std::string& variant) {
  loom_bench::GemmContender c;
  c.name = "Halide" + variant;
  c.max_threads = 1 << 20;
  c.set_threads = loom_bench::halide_set_threads;
  c.accepts = [variant](const loom_bench::GemmShape& s) {
    return loom_bench::find_halide_kernel("gemm", variant, {s.m, s.n, s.k, 0}) != nullptr;
  };
  c.prepare = [variant](const loom_bench::GemmShape& s, int, const float*, const float*) {
    const loom_bench::HalideKernel* k =
        loom_bench::find_halide_kernel("gemm", variant, {s.m, s.n, s.k, 0});
    auto call = std::make_shared<loom_bench::HalideCall>(
        *k, std::initializer_list<std::vector<int>>{
                {int(s.m), int(s.k)}, {int(s.k), int(s.n)}, {int(s.m), int(s.n)}});
    std::string label = call->label();
    return loom_bench::GemmInstance{[call](const float* a, const float* b, float* out) {
                                      call->set(0, a);
                                      call->set(1, b);
                                      call->set(2, out);
                                      (*call)();
                                    },
                                    std::move(label)};
  };
  return c;
}

bool register_all() {
  for (const std::string& v : loom_bench::halide_variants())
    loom_bench::add_gemm_contender(make_contender(v));
  return true;
}

const bool registered = register_all();

}  // namespace

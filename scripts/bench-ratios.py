#!/usr/bin/env python3
"""loom's tuned kernels against the issue's baselines, from Google Benchmark console outputs.

    scripts/bench-ratios.py DIR

reads DIR/bench_*.txt (the console output of bench_gemm, bench_conv2d, bench_depthwise,
bench_batch_matmul and bench_softmax run with --benchmark_repetitions=N
--benchmark_report_aggregates_only=true) and prints, per workload and thread count, the median
rate of each LoomTuned contender (the conv has two: NCHW and NHWC), of the baseline the target
names (oneDNN row-major B for GEMM, oneDNN's batched matmul, oneDNN's blocked conv with bias +
ReLU fused, oneDNN's blocked depthwise conv, Eigen's per-row softmax), their ratio, and the
ratio to the fastest Halide autoscheduler (HalideHand excluded) when it ran.
"""
import collections
import glob
import re
import sys

BASELINE = {
    'Gemm': 'OneDNN_RowMajorB',
    'Conv2d': 'OneDNN_Blocked_BiasReLU',
    'Depthwise': 'OneDNN_Blocked',
    'BatchMatmul': 'OneDNN',
    'Softmax': 'Eigen',
}


def read(directory):
    rows = collections.defaultdict(dict)
    for path in glob.glob(directory + '/bench_*.txt'):
        for line in open(path):
            if '_median' not in line:
                continue
            name = line.split()[0].replace('/process_time/real_time_median', '')
            rate = re.search(r'\b(GFLOPS|GBps)=([0-9.]+)', line)
            if not rate:
                continue
            parts = name.split('/')
            family, contender = parts[0][3:].split('_', 1)
            rows[(family, '/'.join(parts[1:-1]), parts[-1])][contender] = float(rate.group(2))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for (family, shape, threads), r in sorted(read(sys.argv[1]).items()):
        base = r.get(BASELINE.get(family, ''))
        if not base:
            continue
        halide = {c: v for c, v in r.items() if c.startswith('Halide') and c != 'HalideHand'}
        for contender in sorted(c for c in r if c.startswith('LoomTuned')):
            loom = r[contender]
            line = '%-11s %-30s %s thr  %-23s %7.1f  %-23s %7.1f  ratio %.2f' % (
                family, shape, threads, contender, loom, BASELINE[family], base, loom / base)
            if halide:
                best = max(halide, key=halide.get)
                line += '  vs %s %.2f' % (best, loom / halide[best])
            print(line)


if __name__ == '__main__':
    main()

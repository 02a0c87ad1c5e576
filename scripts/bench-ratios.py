#!/usr/bin/env python3
"""loom's tuned kernels against the issue's baselines, from Google Benchmark console outputs.

    scripts/bench-ratios.py DIR

reads DIR/bench_*.txt (the console output of bench_gemm, bench_conv2d, bench_depthwise,
bench_batch_matmul and bench_softmax run with --benchmark_repetitions=N
--benchmark_report_aggregates_only=true) and prints, per workload and thread count, the median
rate of LoomTuned, of the baseline the target names (oneDNN row-major B for GEMM, oneDNN's
batched matmul, oneDNN's blocked conv and depthwise conv, Eigen's per-row softmax), their ratio,
and the ratio to the fastest Halide autoscheduler (HalideHand excluded) when it ran.
"""
import collections
import glob
import re
import sys

BASELINE = {
    'Gemm': 'OneDNN_RowMajorB',
    'Conv2d': 'OneDNN_Blocked',
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
            contender = contender.replace('_BiasReLU', '')
            rows[(family, '/'.join(parts[1:-1]), parts[-1])][contender] = float(rate.group(2))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for (family, shape, threads), r in sorted(read(sys.argv[1]).items()):
        loom, base = r.get('LoomTuned'), r.get(BASELINE.get(family, ''))
        if not loom or not base:
            continue
        line = '%-11s %-30s %s thr  loom %7.1f  %-16s %7.1f  ratio %.2f' % (
            family, shape, threads, loom, BASELINE[family], base, loom / base)
        halide = {c: v for c, v in r.items() if c.startswith('Halide') and c != 'HalideHand'}
        if halide:
            best = max(halide, key=halide.get)
            line += '  vs %s %.2f' % (best, loom / halide[best])
        print(line)


if __name__ == '__main__':
    main()

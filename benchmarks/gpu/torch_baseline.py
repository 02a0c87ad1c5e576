#!/usr/bin/env python3
"""PyTorch's time for bench_gpu's workloads: the contender a GPU user would pick instead.

bench_gpu times cuBLAS and cuDNN's legacy convolution API itself; PyTorch 2 reaches cuBLASLt
and cuDNN's graph API (with cudnn.benchmark, the fastest engine it finds for the shape), which
may be faster. Same workloads and names as bench_gpu (benchmarks/gpu/gpu_workloads.hpp), same
timing: CUDA events around 10 back-to-back calls, repeated for --min-time seconds, the median of
--repetitions such runs per call. Run it on the GPU machine (its image has PyTorch), e.g. as
gpu-run.sh's step "torch":

  python3 benchmarks/gpu/torch_baseline.py --workloads=gemm4096_bf16,conv2d_nhwc
  python3 benchmarks/gpu/torch_baseline.py --list

Prints one line per workload: its name, PyTorch's median time per call in microseconds and
TFLOP/s (GB/s for the memory-bound ones), and what PyTorch ran it with.
"""
import argparse
import statistics
import sys


def workload_specs():
    """(name, kind, shape, precision) in bench_gpu's order."""
    specs = []
    for p in ("fp32", "tf32", "bf16", "fp16"):
        specs.append(("gemm4096_" + p, "gemm", (0, 4096, 4096, 4096, False), p))
    for p in ("tf32", "bf16"):
        specs.append(("gemm4096_nt_" + p, "gemm", (0, 4096, 4096, 4096, True), p))
    for p in ("fp32", "bf16"):
        for m in (128, 4096):
            for layer, k, n in ((1, 768, 3072), (2, 3072, 768)):
                specs.append(("bert_ffn%d_m%d_%s" % (layer, m, p), "gemm", (0, m, n, k, False), p))
    for m in (128, 4096):
        for layer, k, n in ((1, 768, 3072), (2, 3072, 768)):
            specs.append(("bert_ffn%d_nt_m%d_bf16" % (layer, m), "gemm", (0, m, n, k, True), "bf16"))
    for p in ("fp32", "bf16"):
        for what, batch, m, k, n in (("qk", 12, 128, 64, 128), ("av", 12, 128, 128, 64),
                                     ("qk", 384, 128, 64, 128)):
            specs.append(("bmm_%s_b%d_%s" % (what, batch, p), "gemm", (batch, m, n, k, False), p))
    specs.append(("conv2d_nchw_n1_64x56x56_k64_3x3_fp32", "conv",
                  (1, 64, 56, 56, 64, 3, 1, False), "fp32"))
    for n in (1, 32):
        for c, h, k, r in ((64, 56, 64, 3), (128, 28, 128, 3), (256, 14, 256, 3), (512, 7, 512, 3),
                           (64, 56, 256, 1), (256, 56, 64, 1), (1024, 14, 256, 1)):
            specs.append(("conv2d_nhwc_n%d_%dx%dx%d_k%d_%dx%d_fp16" % (n, c, h, h, k, r, r), "conv",
                          (n, c, h, h, k, r, r // 2, True), "fp16"))
    for rows, cols in ((4096, 4096), (128, 768)):
        specs.append(("softmax_%dx%d" % (rows, cols), "softmax", (rows, cols), "fp32"))
        specs.append(("layer_norm_%dx%d" % (rows, cols), "layer_norm", (rows, cols), "fp32"))
    return specs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="",
                    help="comma-separated name prefixes (bench_gpu's --workloads)")
    ap.add_argument("--min-time", type=float, default=0.1, help="seconds per repetition")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--list", action="store_true", help="print the workloads, no GPU needed")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: build each workload on the CPU (shapes divided by 8 where "
                         "they allow) and call it once, timing nothing")
    args = ap.parse_args()
    prefixes = [p for p in args.workloads.split(",") if p]
    specs = [s for s in workload_specs()
             if not prefixes or any(s[0].startswith(p) for p in prefixes)]
    if args.list:
        for s in specs:
            print(s[0])
        return 0

    import torch
    import torch.nn.functional as F
    if args.dry_run:
        dev = torch.device("cpu")
        print("torch_baseline: dry run on the CPU, PyTorch %s" % torch.__version__)
    elif not torch.cuda.is_available():
        print("torch_baseline: no CUDA device", file=sys.stderr)
        return 77
    else:
        torch.backends.cudnn.benchmark = True
        dev = torch.device("cuda")
        print("torch_baseline on %s, PyTorch %s, cuDNN %s" % (
            torch.cuda.get_device_name(0), torch.__version__, torch.backends.cudnn.version()))
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
              "fp16": torch.float16}

    def small(x):  # a dry run's extent
        return max(1, x // 8) if args.dry_run else x

    def median_us(call):
        if args.dry_run:
            call()
            return float("nan")
        for _ in range(3):  # warm up (cudnn.benchmark picks its engine on the first call)
            call()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = []
        for _ in range(args.repetitions):
            total_ms, calls = 0.0, 0
            while total_ms < args.min_time * 1e3:
                start.record()
                for _ in range(10):
                    call()
                stop.record()
                stop.synchronize()
                total_ms += start.elapsed_time(stop)
                calls += 10
            reps.append(total_ms * 1e3 / calls)
        return statistics.median(reps)

    status = 0
    for name, kind, shape, precision in specs:
        # TF32 only where the workload asks for it, as bench_gpu's contenders.
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        dt = dtypes[precision]
        if args.dry_run and dt == torch.float16:
            dt = torch.float32  # PyTorch 1.13 on the CPU has no fp16 products
        try:
            if kind == "gemm":
                batch, m, n, k, trans_b = shape
                m, n, k = small(m), small(n), small(k)
                lead = (batch,) if batch else ()
                a = torch.rand(lead + (m, k), device=dev).to(dt)
                b = torch.rand(lead + ((n, k) if trans_b else (k, n)), device=dev).to(dt)
                bb = b.transpose(-1, -2) if trans_b else b

                def call(a=a, bb=bb):
                    return torch.matmul(a, bb)
                work, unit = 2.0 * max(batch, 1) * m * n * k, "TFLOP/s"
                how = "torch.matmul"
            elif kind == "conv":
                n_, c, h, w, kk, r, pad, nhwc = shape
                n_, c, kk = small(n_), small(c), small(kk)
                x = torch.rand(n_, c, h, w, device=dev).to(dt)
                wt = torch.rand(kk, c, r, r, device=dev).to(dt)
                if nhwc:
                    x = x.to(memory_format=torch.channels_last)
                    wt = wt.to(memory_format=torch.channels_last)

                def call(x=x, wt=wt, pad=pad):
                    return F.conv2d(x, wt, padding=pad)
                ho = h + 2 * pad - r + 1
                work, unit = 2.0 * n_ * kk * ho * ho * c * r * r, "TFLOP/s"
                how = "F.conv2d, %s, cudnn.benchmark" % ("channels_last" if nhwc else "NCHW")
            else:
                rows, cols = shape
                rows = small(rows)
                x = torch.rand(rows, cols, device=dev)
                g = torch.rand(cols, device=dev)
                be = torch.rand(cols, device=dev)
                if kind == "softmax":
                    def call(x=x):
                        return torch.softmax(x, dim=-1)
                    work = 2.0 * rows * cols * 4
                else:
                    def call(x=x, g=g, be=be, cols=cols):
                        return F.layer_norm(x, (cols,), g, be)
                    work = (2.0 * rows * cols + 2 * cols) * 4
                unit, how = "GB/s", "torch." + kind
            us = median_us(call)
            rate = work / (us * 1e-6) / (1e12 if unit == "TFLOP/s" else 1e9)
            print("%-44s torch %10.2f us %9.1f %s  (%s)" % (name, us, rate, unit, how))
        except Exception as e:  # a contender that fails is left out, as in bench_gpu
            print("%-44s torch FAILED: %s" % (name, e))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where PyTorch's time goes on one exported network: its best contender on these models
(TorchScript, traced, frozen and optimize_for_inference'd), or with --eager the nn.Module (each
convolution a oneDNN call of its own), under torch.profiler: each operator and input shape with
its self time per inference and share, to set beside `loomc run --profile`.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 \\
        benchmarks/net/pytorch_profile.py resnet50 --threads 2 [--runs 30] [--top 40]

The models are those of scripts/export_models.py with the weights in build/models/NAME.pt, as
in pytorch_baseline.py (see its notes on threads and OpenBLAS). The profiler adds a little per
operator, so the shares are what to read, not the sum.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model')
    parser.add_argument('--dir', default=os.path.join(REPO_ROOT, 'build', 'models'))
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--runs', type=int, default=30, help='profiled inferences')
    parser.add_argument('--top', type=int, default=40, help='rows to print')
    parser.add_argument('--eager', action='store_true',
                        help='profile the nn.Module instead: TorchScript runs its prepacked '
                             'convolutions inside one "forward" row, eager shows each as '
                             'aten::mkldnn_convolution (oneDNN, per layer)')
    args = parser.parse_args()

    import torch
    sys.path.insert(0, os.path.join(REPO_ROOT, 'scripts'))
    sys.dont_write_bytecode = True
    import export_models

    torch.set_num_threads(args.threads)
    model, x = export_models.load_exported(args.model, args.dir)
    with torch.no_grad():
        run = model if args.eager else torch.jit.optimize_for_inference(
            torch.jit.freeze(torch.jit.trace(model, (x,)).eval()))
        for _ in range(10):
            run(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    record_shapes=True) as prof:
            for _ in range(args.runs):
                run(x)
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.self_cpu_time_total <= 0:
            continue
        shapes = ' '.join('x'.join(str(d) for d in s) for s in e.input_shapes if s)
        rows.append((e.self_cpu_time_total / args.runs / 1e3, e.count // args.runs, e.key, shapes))
    total = sum(r[0] for r in rows)
    print(f'{args.model}, {"eager" if args.eager else "TorchScript"}, {args.threads} threads, '
          f'torch {torch.__version__}: '
          f'{total:.3f} ms of operator self time per inference ({args.runs} profiled)')
    print(f'{"ms":>8} {"share":>6} {"calls":>5}  operator  input shapes')
    for ms, calls, key, shapes in sorted(rows, reverse=True)[:args.top]:
        print(f'{ms:8.3f} {100 * ms / total:5.1f}% {calls:5d}  {key}  {shapes}')


if __name__ == '__main__':
    main()

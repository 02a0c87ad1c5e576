#!/usr/bin/env python3
"""oneDNN's time for each convolution and linear layer of an exported network, each layer alone:
the per-layer column to set beside `loomc run --profile` when a network misses its target.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 \\
        benchmarks/net/onednn_layers.py resnet50 --threads 1 [--runs 200] [--cold]

Batch norm is folded into each convolution first (as TorchScript's freeze does), and every
convolution runs as the oneDNN primitive that `optimize_for_inference` prepacks
(torch.utils.mkldnn.to_mkldnn: weights reordered once, input and output in oneDNN's blocked
layout), with no residual add or activation: those PyTorch runs as separate operators, loom in
the same kernel. Linear layers run as torch.nn.functional.linear. Each layer is timed by
back-to-back calls (median over --runs, weights warm in the caches) or, with --cold, after
reading a 64 MB buffer (outside the timed call) that pushes weights and input out of the caches;
inside a network a layer meets its weights cold and its input warm, between the two. The models are those of
scripts/export_models.py with the weights in build/models/NAME.pt.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model')
    parser.add_argument('--dir', default=os.path.join(REPO_ROOT, 'build', 'models'))
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--runs', type=int, default=200, help='timed calls per layer')
    parser.add_argument('--cold', action='store_true',
                        help='clear the caches before each call (weights cold, as in a network)')
    args = parser.parse_args()

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.utils.mkldnn
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    sys.path.insert(0, os.path.join(REPO_ROOT, 'scripts'))
    sys.dont_write_bytecode = True
    import export_models

    torch.set_num_threads(args.threads)
    model, x = export_models.load_exported(args.model, args.dir)

    # Each convolution's and linear layer's input shape, in execution order.
    layers = []
    modules = dict(model.named_modules())
    hooks = []
    for name, m in modules.items():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            hooks.append(m.register_forward_hook(
                lambda mod, inp, out, name=name: layers.append((name, mod, inp[0].shape))))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()

    # The batch norm after each convolution, by the naming torchvision uses (conv1/bn1,
    # downsample.0/downsample.1, features.N.0/features.N.1).
    def following_bn(name):
        for candidate in (name.replace('conv', 'bn'),
                          name[:-1] + str(int(name[-1]) + 1) if name[-1].isdigit() else None):
            if candidate and candidate != name and isinstance(modules.get(candidate),
                                                              nn.BatchNorm2d):
                return modules[candidate]
        return None

    flush = torch.ones(16 * 1024 * 1024)  # 64 MB, twice this machine's L3

    def timed(call):
        with torch.no_grad():
            for _ in range(5):
                call()
            times = []
            for _ in range(args.runs):
                if args.cold:
                    flush.sum()
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
        return median(times) * 1e3

    print(f'{args.model}: oneDNN per layer, {args.threads} thread(s), '
          f'{"weights cold" if args.cold else "weights warm"}, median of {args.runs} calls (ms)')
    print(f'{"layer":44s} {"input":>18s} {"kernel":>12s} {"ms":>8s} {"GFLOP/s":>8s}')
    total = 0.0
    for name, mod, shape in layers:
        with torch.no_grad():
            if isinstance(mod, nn.Conv2d):
                bn = following_bn(name)
                conv = fuse_conv_bn_eval(mod, bn) if bn is not None else mod
                prepacked = torch.utils.mkldnn.to_mkldnn(conv)
                xin = torch.randn(shape).to_mkldnn()
                ms = timed(lambda: prepacked(xin))
                out = conv(torch.randn(shape))
                flops = (2 * out.numel() * conv.in_channels // conv.groups *
                         conv.kernel_size[0] * conv.kernel_size[1])
                kernel = (f'{conv.kernel_size[0]}x{conv.kernel_size[1]}/{conv.stride[0]}'
                          + (f' g{conv.groups}' if conv.groups > 1 else ''))
                desc = f'{shape[1]}x{shape[2]}x{shape[3]}->{conv.out_channels}'
            else:
                xin = torch.randn(shape)
                ms = timed(lambda: torch.nn.functional.linear(xin, mod.weight, mod.bias))
                flops = 2 * mod.in_features * mod.out_features * int(np.prod(shape[:-1]))
                kernel = 'linear'
                desc = f'{mod.in_features}->{mod.out_features}'
        total += ms
        print(f'{name:44s} {desc:>18s} {kernel:>12s} {ms:8.3f} {flops / ms / 1e6:8.1f}')
    print(f'sum of layers: {total:.3f} ms')


if __name__ == '__main__':
    main()

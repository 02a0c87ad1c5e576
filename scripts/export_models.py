#!/usr/bin/env python3
"""Exports the five batch-1 benchmark networks to ONNX, with their test data.

    scripts/export-models.sh [--out DIR] [--models a,b,c] [--force]
    python3 scripts/export_models.py [same options]

Models: resnet18, resnet50, mobilenet_v2 (torchvision, random weights), bert_layer (one
BERT-base encoder layer in plain torch.nn), dcgan (the PyTorch DCGAN tutorial's generator).
For each model NAME, DIR (default build/models under the repository root) receives:

    NAME.onnx         opset 13, static shapes, batch 1, one input `input`, one output `output`
    NAME.input.npy    the seeded random input (float32, torch.randn)
    NAME.output.npy   PyTorch eager's output on that input (float32)
    NAME.input.pb     the same two tensors as serialized ONNX TensorProtos (the layout of
    NAME.output.pb    ONNX's own test data sets), named `input` / `output`
    NAME.pt           the model's state_dict (torch.save)

NAME.pt is a state_dict rather than a TorchScript trace on purpose: the PyTorch baseline
(benchmarks/net/pytorch_baseline.py) needs a genuine eager nn.Module for its "eager" contender,
and a trace can only ever run through the TorchScript interpreter. The baseline rebuilds each
module with build_model() below and loads NAME.pt, so both sides run exactly these weights.

Everything is deterministic: each model seeds torch itself (weights, BatchNorm statistics,
input), so exporting a subset gives the same files as exporting all of them.

A model whose files all exist is skipped unless --force is given.
"""
import argparse
import collections
import importlib.util
import math
import os
import sys

# Debian's python3-torch lives in /usr/bin/python3's dist-packages; a pyenv or venv `python3`
# earlier on PATH does not see it. Switch interpreters before anything imports torch.
SYSTEM_PYTHON = '/usr/bin/python3'
if (importlib.util.find_spec('torch') is None and os.path.exists(SYSTEM_PYTHON)
        and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)
        and not os.environ.get('LOOM_EXPORT_REEXEC')):
    os.environ['LOOM_EXPORT_REEXEC'] = '1'
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, 'build', 'models')
OPSET = 13
SEED = 0
INPUT_SEED = 1  # a separate stream, so the input does not depend on how many weights drew


class BertLayer(nn.Module):
    """One BERT-base encoder layer (post-LayerNorm), attention written out by hand.

    Written with explicit reshapes/permutes rather than nn.MultiheadAttention so that the
    exported graph is the plain MatMul/Softmax/Transpose pattern an importer has to fuse.
    """

    def __init__(self, hidden=768, heads=12, ffn=3072, eps=1e-12, dropout=0.1):
        super().__init__()
        assert hidden % heads == 0
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_out_dropout = nn.Dropout(dropout)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ffn_dropout = nn.Dropout(dropout)
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def split_heads(self, x):
        # [b, s, hidden] -> [b, heads, s, head_dim]
        b, s, _ = x.shape
        return x.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        b, s, hidden = x.shape
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.attn_dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, hidden)
        x = self.attn_norm(x + self.attn_out_dropout(self.attn_out(context)))
        h = self.ffn_out(F.gelu(self.ffn_in(x)))  # exact (erf) GELU, as BERT
        return self.ffn_norm(x + self.ffn_dropout(h))


class DCGANGenerator(nn.Module):
    """The generator of the PyTorch DCGAN tutorial (nz=100, ngf=64, nc=3): 1x1 -> 64x64."""

    def __init__(self, nz=100, ngf=64, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, x):
        return self.main(x)


def torchvision_model(name):
    constructor = getattr(torchvision.models, name)
    try:
        return constructor(weights=None)  # torchvision >= 0.13
    except TypeError:
        return constructor(pretrained=False)


# name -> (constructor, input shape)
MODELS = {
    'resnet18': (lambda: torchvision_model('resnet18'), (1, 3, 224, 224)),
    'resnet50': (lambda: torchvision_model('resnet50'), (1, 3, 224, 224)),
    'mobilenet_v2': (lambda: torchvision_model('mobilenet_v2'), (1, 3, 224, 224)),
    'bert_layer': (BertLayer, (1, 128, 768)),
    'dcgan': (DCGANGenerator, (1, 100, 1, 1)),
}


def randomize_norms(model):
    """Gives every normalization layer non-trivial statistics and affine parameters.

    Freshly built layers have mean 0, var 1, weight 1, bias 0, under which a wrong BatchNorm
    folding (or a forgotten LayerNorm scale) still produces the right numbers.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
            elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)


def build_model(name):
    """The eval-mode model NAME with its seeded random weights (also used by the baseline)."""
    constructor, _ = MODELS[name]
    torch.manual_seed(SEED)
    model = constructor()
    randomize_norms(model)
    return model.eval()


def load_exported(name, model_dir):
    """The eval-mode model NAME with the weights and the input this script wrote to model_dir
    (what the benchmarks under benchmarks/net/ run)."""
    model = build_model(name)
    model.load_state_dict(torch.load(os.path.join(model_dir, name + '.pt')))
    model.eval()
    x = torch.from_numpy(np.load(os.path.join(model_dir, name + '.input.npy')))
    return model, x


def make_input(name):
    _, shape = MODELS[name]
    generator = torch.Generator().manual_seed(INPUT_SEED)
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


def paths(out_dir, name):
    base = os.path.join(out_dir, name)
    return {kind: f'{base}.{kind}' for kind in
            ('onnx', 'input.npy', 'output.npy', 'input.pb', 'output.pb', 'pt')}


def write_tensor_pb(path, array, tensor_name):
    with open(path, 'wb') as f:
        f.write(onnx.numpy_helper.from_array(array, name=tensor_name).SerializeToString())


def op_histogram(graph):
    counts = collections.Counter(node.op_type for node in graph.node)
    return ' '.join(f'{op}:{n}' for op, n in counts.most_common())


def export(name, out_dir):
    files = paths(out_dir, name)
    model = build_model(name)
    x = make_input(name)
    with torch.no_grad():
        y = model(x)

    torch.onnx.export(
        model, (x,), files['onnx'],
        export_params=True,
        opset_version=OPSET,
        do_constant_folding=True,
        input_names=['input'],
        output_names=['output'],
        training=torch.onnx.TrainingMode.EVAL,
    )
    onnx_model = onnx.load(files['onnx'])
    onnx.checker.check_model(onnx_model)

    x_np = x.numpy().astype(np.float32)
    y_np = y.numpy().astype(np.float32)
    np.save(files['input.npy'], x_np)
    np.save(files['output.npy'], y_np)
    write_tensor_pb(files['input.pb'], x_np, 'input')
    write_tensor_pb(files['output.pb'], y_np, 'output')
    torch.save(model.state_dict(), files['pt'])

    size_mb = os.path.getsize(files['onnx']) / 1e6
    print(f'{name}: {size_mb:.1f} MB, {len(onnx_model.graph.node)} nodes, '
          f'in {list(x_np.shape)} out {list(y_np.shape)}; {op_histogram(onnx_model.graph)}',
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default=DEFAULT_OUT, help='output directory (default: %(default)s)')
    parser.add_argument('--models', default=','.join(MODELS),
                        help='comma-separated subset of: %(default)s')
    parser.add_argument('--force', action='store_true', help='re-export models whose files exist')
    args = parser.parse_args()

    names = [n for n in args.models.split(',') if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f'unknown model(s) {",".join(unknown)}; known: {",".join(MODELS)}')

    os.makedirs(args.out, exist_ok=True)
    print(f'export_models: torch {torch.__version__}, torchvision {torchvision.__version__}, '
          f'onnx {onnx.__version__}, opset {OPSET}, into {args.out}', flush=True)
    for name in names:
        if not args.force and all(os.path.exists(p) for p in paths(args.out, name).values()):
            print(f'{name}: files exist, skipped (--force re-exports)')
            continue
        export(name, args.out)


if __name__ == '__main__':
    main()

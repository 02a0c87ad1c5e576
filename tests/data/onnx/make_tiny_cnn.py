#!/usr/bin/python3
"""Writes tiny_cnn.onnx (a residual CNN small enough for CI), its input and PyTorch's output
(.npy), and truncated.onnx (its first 200 bytes: a corrupt model loomc must refuse by name).

The model has what the ONNX importer's graph passes and operators must handle in real exports:
Conv with bias (BatchNorm folded by the exporter), a residual Add, ReLU, MaxPool, the
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain of `x.view(x.size(0), -1)` (folded to a
constant at import), GlobalAveragePool and Gemm. Run with Debian's python3 (python3-torch):
    /usr/bin/python3 tests/data/onnx/make_tiny_cnn.py
"""
import os

import numpy as np
import torch
from torch import nn

here = os.path.dirname(os.path.abspath(__file__))


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.pool(y)
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        y = nn.functional.adaptive_avg_pool2d(y, 1)
        return self.fc(y.view(y.size(0), -1))


torch.manual_seed(0)
model = TinyCNN().eval()
for bn in (model.bn1, model.bn2):
    bn.running_mean.normal_(0, 0.1)
    bn.running_var.uniform_(0.5, 1.5)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.normal_(0, 0.1)
x = torch.randn(1, 3, 16, 16)
with torch.no_grad():
    y = model(x)
path = os.path.join(here, "tiny_cnn.onnx")
torch.onnx.export(model, x, path, opset_version=13, input_names=["input"], output_names=["output"])
np.save(os.path.join(here, "tiny_cnn.input.npy"), x.numpy())
np.save(os.path.join(here, "tiny_cnn.output.npy"), y.numpy())
with open(path, "rb") as f:
    head = f.read(200)
with open(os.path.join(here, "truncated.onnx"), "wb") as f:
    f.write(head)
print("wrote", path, os.path.getsize(path), "bytes")

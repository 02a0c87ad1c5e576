#!/usr/bin/env bash
# Exports the batch-1 benchmark networks (ResNet-18/50, MobileNetV2, a BERT-base layer, the
# DCGAN generator) to ONNX with their test inputs/outputs; see scripts/export_models.py.
#
#   scripts/export-models.sh [--out DIR] [--models a,b,c] [--force]
#
# Installs what is missing first, Debian's PyTorch, torchvision, onnx and numpy included
# (scripts/install-deps.sh --torch; idempotent).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

"$here/install-deps.sh" --torch

# Debian's Python packages install into Debian's interpreter; a pyenv/venv `python3` that comes first
# on PATH would not find them, so prefer /usr/bin/python3 when it exists.
python=python3
if [[ -x /usr/bin/python3 ]]; then
  python=/usr/bin/python3
fi
exec "$python" "$here/export_models.py" "$@"

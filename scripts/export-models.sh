#!/usr/bin/env bash
# Exports the batch-1 benchmark networks (ResNet-18/50, MobileNetV2, a BERT-base layer, the
# DCGAN generator) to ONNX with their test inputs/outputs; see scripts/export_models.py.
#
#   scripts/export-models.sh [--out DIR] [--models a,b,c] [--force]
#
# Installs Debian's PyTorch, torchvision, onnx and numpy first when one is missing
# (idempotent: apt-get runs only then).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

packages=(python3-torch python3-torchvision python3-onnx python3-numpy)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "export-models: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The packages above install into Debian's interpreter; a pyenv/venv `python3` that comes first
# on PATH would not find them, so prefer /usr/bin/python3 when it exists.
python=python3
if [[ -x /usr/bin/python3 ]]; then
  python=/usr/bin/python3
fi
exec "$python" "$here/export_models.py" "$@"

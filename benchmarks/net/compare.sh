#!/usr/bin/env bash
# loom against PyTorch on the exported networks (scripts/export-models.sh), batch 1, the
# contenders alternated: for each round, model and thread count, loom on default schedules,
# loom tuned (when RECORDS_DIR/<model>.jsonl exists), then PyTorch eager and TorchScript
# frozen + optimize_for_inference in its three threading modes (the best is the bar).
#
#   benchmarks/net/compare.sh [--models resnet18,dcgan] [--threads 1,2] [--repeat 30]
#                             [--rounds 2] [--dir build/models] [--records-dir build/net-records]
#
# Writes every run's output under OUT (default build/net-compare/<date>) and prints one line
# per contender with its median over the rounds' medians. OpenBLAS's pin
# (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) is unset for PyTorch's command only, as
# benchmarks/net/pytorch_baseline.py explains. Every loom run is checked against PyTorch's
# output (rtol 1e-3, atol 1e-5 x the largest |output|).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
models=resnet18,resnet50,mobilenet_v2,bert_layer,dcgan
threads=1,2
repeat=30
rounds=2
dir=$root/build/models
records_dir=$root/build/net-records
out=$root/build/net-compare/$(date +%Y%m%d-%H%M%S)
loomc=${LOOMC:-$root/build/examples/loomc}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --records-dir) records_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $loomc ]] || { echo "compare.sh: $loomc is missing (build the target loomc)" >&2; exit 1; }
mkdir -p "$out"
echo "compare.sh: $(date -Is) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); output in $out"
atol_of() {  # 1e-5 x the largest |reference| value
  /usr/bin/python3 -c "import numpy as n; print(max(1e-5 * float(abs(n.load('$1')).max()), 1e-6))"
}
for r in $(seq 1 "$rounds"); do
  for m in ${models//,/ }; do
    atol=$(atol_of "$dir/$m.output.npy")
    for t in ${threads//,/ }; do
      base="$out/r$r.$m.t$t"
      "$loomc" run "$dir/$m.onnx" --input "$dir/$m.input.npy" --check "$dir/$m.output.npy" \
        --atol "$atol" --threads "$t" --repeat "$repeat" > "$base.loom-untuned.txt" 2>&1 || true
      if [[ -f $records_dir/$m.jsonl ]]; then
        "$loomc" run "$dir/$m.onnx" --records "$records_dir/$m.jsonl" --input "$dir/$m.input.npy" \
          --check "$dir/$m.output.npy" --atol "$atol" --threads "$t" --repeat "$repeat" \
          > "$base.loom-tuned.txt" 2>&1 || true
      fi
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$root/benchmarks/net/pytorch_baseline.py" \
        --dir "$dir" --models "$m" --threads "$t" --repeat "$repeat" --warmup 5 --mode all \
        --json "$base.torch.json" > "$base.torch.txt" 2>&1 || true
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
rows = {}
for path in glob.glob(os.path.join(out, 'r*.txt')) + glob.glob(os.path.join(out, 'r*.json')):
    name = os.path.basename(path)
    m = re.match(r'r(\d+)\.(.+)\.t(\d+)\.(.+)\.(txt|json)$', name)
    if not m:
        continue
    _, model, t, who, ext = m.groups()
    if who.startswith('loom') and ext == 'txt':
        text = open(path).read()
        lat = re.search(r'median ([0-9.]+) ms', text)
        ok = re.search(r', 0 of \d+ elements outside', text) is not None
        if lat:
            rows.setdefault((model, int(t), who + ('' if ok else ' (CHECK FAILED)')), []).append(float(lat.group(1)))
    elif who == 'torch' and ext == 'json':
        for rec in json.load(open(path)):
            rows.setdefault((model, int(t), 'torch-%s-%s' % (rec['mode'], rec['contender'])), []).append(rec['median_ms'])
best = {}
for (model, t, who), v in sorted(rows.items()):
    med = statistics.median(v)
    print('%-13s %d thr  %-32s median of %d rounds: %8.3f ms' % (model, t, who, len(v), med))
    if who.startswith('torch'):
        best[(model, t)] = min(best.get((model, t), 1e30), med)
for (model, t, who), v in sorted(rows.items()):
    if who.startswith('loom') and (model, t) in best:
        print('%-13s %d thr  %-32s PyTorch best / loom = %.2fx' % (model, t, who, best[(model, t)] / statistics.median(v)))
PY

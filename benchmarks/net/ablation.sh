#!/usr/bin/env bash
# The task scheduler's ablation (Ansor, Figure 10) on one exported network: tunes it twice from
# empty records with the same budget, once with the gradient scheduler and once round-robin,
# and draws the estimated latency against trials and against wall time.
#
#   benchmarks/net/ablation.sh MODEL TRIALS [THREADS]      e.g. ablation.sh mobilenet_v2 2000 2
#
# Writes build/ablation/MODEL.{gradient,round-robin}.{jsonl,csv,log} and MODEL.svg, and prints
# when the gradient scheduler reaches round-robin's final latency. Both runs use one cost model
# for the network (the default); the machine should be otherwise idle.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${1:?model name (build/models/MODEL.onnx)}
trials=${2:?trials per run}
threads=${3:-2}
loomc=${LOOMC:-$root/build/examples/loomc}
dir=${MODELS_DIR:-$root/build/models}
out=$root/build/ablation
mkdir -p "$out"
for mode in gradient round-robin; do
  base=$out/$model.$mode
  rm -f "$base.jsonl"
  flag=()
  [[ $mode == round-robin ]] && flag=(--round-robin)
  echo "ablation: $model, $mode, $trials trials on $threads threads ($(date -Is))"
  "$loomc" tune "$dir/$model.onnx" --records "$base.jsonl" --trials "$trials" --threads "$threads" \
    --curve "$base.csv" "${flag[@]}" > "$base.log" 2>&1
  tail -1 "$base.log"
done
/usr/bin/python3 "$root/scripts/plot-scheduler-ablation.py" "$out/$model.svg" "$model" \
  "$out/$model.gradient.csv" "$out/$model.round-robin.csv"

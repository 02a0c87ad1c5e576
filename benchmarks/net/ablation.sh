#!/usr/bin/env bash
# The task scheduler's ablation (Ansor, Figure 10) on one exported network: tunes it twice from
# empty records with the same budget, once with the gradient scheduler and once round-robin,
# and draws the estimated latency against trials and against wall time.
#
#   benchmarks/net/ablation.sh MODEL TRIALS [THREADS] [together]
#       e.g. ablation.sh mobilenet_v2 2000 2; ablation.sh resnet50 2000 1 together
#
# `together` runs the two tunings at once (each with THREADS threads; for 2 × THREADS ≤ the
# cores): they share the machine's caches and memory alike, and the pair takes half the time.
# Writes build/ablation/MODEL.tT.{gradient,round-robin}.{jsonl,csv,log} and MODEL.tT.svg, and
# prints when the gradient scheduler reaches round-robin's final latency. Both runs use one cost
# model for the network (the default); the machine should be otherwise idle.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${1:?model name (build/models/MODEL.onnx)}
trials=${2:?trials per run}
threads=${3:-2}
together=${4:-}
loomc=${LOOMC:-$root/build/examples/loomc}
dir=${MODELS_DIR:-$root/build/models}
out=$root/build/ablation
mkdir -p "$out"
run() {
  local mode=$1 base=$out/$model.t$threads.$1 flag=()
  rm -f "$base.jsonl"
  [[ $mode == round-robin ]] && flag=(--round-robin)
  echo "ablation: $model, $mode, $trials trials on $threads threads ($(date -Is))"
  "$loomc" tune "$dir/$model.onnx" --records "$base.jsonl" --trials "$trials" --threads "$threads" \
    --curve "$base.csv" "${flag[@]}" > "$base.log" 2>&1
  echo "$mode: $(grep 'tasks: done' "$base.log")"
}
if [[ $together == together ]]; then
  run gradient & run round-robin & wait
else
  run gradient
  run round-robin
fi
/usr/bin/python3 "$root/scripts/plot-scheduler-ablation.py" "$out/$model.t$threads.svg" "$model" \
  "$out/$model.t$threads.gradient.csv" "$out/$model.t$threads.round-robin.csv"

#!/usr/bin/env bash
# The demo's vision-language run over a grid of seeds and thread counts: does it learn on every one?
# Each run trains examples/qwen2.5vl/shapes_from_scratch.yaml on the demo's data (10000 train / 200
# test records, data seed 0) with train.seed = model.init_seed = SEED and train.threads = THREADS,
# saves a checkpoint every EVAL_EVERY steps and scores each one on the held-out split with
# `mmtrain eval`. Prints a markdown table: steps to 90% exact match, the final accuracy overall and
# per question type, wall time. Exits 1 if any run ends under 90% overall or 80% on a type.
# Usage: bench/demo_grid.sh MMTRAIN [SEEDS] [THREADS] [EVAL_EVERY]
#   e.g. bench/demo_grid.sh build/mmtrain "0 1 2 3 4" "1 2" 250      (about an hour on 2 cores)
# One-thread runs go two at a time (one per core); two-thread runs one at a time.
set -euo pipefail
MMTRAIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
SEEDS="${2:-0 1 2 3 4}"
THREADS="${3:-1 2}"
EVAL_EVERY="${4:-250}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/grid_runs.sh"
WORK="$(dirname "$MMTRAIN")/demo_grid"
DATA="$WORK/shapes"
mkdir -p "$WORK"
[ -f "$DATA/test.jsonl" ] || "$MMTRAIN" data synth --kind shapes --out "$DATA" --train 10000 --test 200 --seed 0 >/dev/null

# run SEED THREADS: trains, scores every checkpoint, writes $WORK/s{SEED}t{THREADS}/row.md
run() {
  local seed="$1" threads="$2" dir="$WORK/s$1t$2"
  rm -rf "$dir" && mkdir -p "$dir"
  local start; start=$(date +%s)
  "$MMTRAIN" train "$ROOT/examples/qwen2.5vl/shapes_from_scratch.yaml" \
    --set model.path="$ROOT/examples/qwen2.5vl/tiny-shapes" --set data.train="$DATA/train.jsonl" \
    --set output.dir="$dir/run" --set output.resume=none --set output.save_every="$EVAL_EVERY" \
    --set output.keep_last=1000 --set output.tensorboard=false \
    --set train.seed="$seed" --set model.init_seed="$seed" --set train.threads="$threads" >"$dir/train.log" 2>&1
  local seconds=$(( $(date +%s) - start ))
  local first90="-" summary="" step
  for ckpt in $(ls -d "$dir"/run/checkpoints/step-* | sort -t- -k2 -n); do
    step="${ckpt##*step-}"; step=$((10#$step))
    summary=$("$MMTRAIN" eval --model "$ckpt" --data "$DATA/test.jsonl" --threads "$threads" 2>/dev/null | tail -n 1)
    echo "$step $summary" >>"$dir/evals.txt"
    if [ "$first90" = "-" ] && python3 -c "import json,sys; sys.exit(0 if json.loads(sys.argv[1])['accuracy'] >= 0.9 else 1)" "$summary"; then
      first90="$step"
    fi
  done
  python3 - "$seed" "$threads" "$first90" "$seconds" "$summary" >"$dir/row.md" <<'EOF'
import json, sys
seed, threads, first90, seconds, summary = sys.argv[1:6]
s = json.loads(summary)
types = "".join(f" {s['by_type'][t]['accuracy'] * 100:.1f}% |" for t in ("color", "shape", "position", "caption"))
print(f"| {seed} | {threads} | {first90} | {s['accuracy'] * 100:.1f}% |{types} {seconds} s |")
EOF
}

run_grid "$SEEDS" "$THREADS" run

echo "| seed | threads | steps to 90% | final exact match | color | shape | position | caption | time |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
cat "$WORK"/s*/row.md
# Every run: >= 90% overall and >= 80% on each question type.
python3 - "$WORK" <<'EOF'
import glob, json, sys
bad = []
for evals in glob.glob(f"{sys.argv[1]}/s*/evals.txt"):
    last = json.loads(open(evals).read().strip().splitlines()[-1].split(" ", 1)[1])
    if last["accuracy"] < 0.9 or min(t["accuracy"] for t in last["by_type"].values()) < 0.8:
        bad.append(evals.split("/")[-2])
print("every run learned" if not bad else f"runs that fell short: {' '.join(sorted(bad))}")
sys.exit(1 if bad else 0)
EOF

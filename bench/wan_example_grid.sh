#!/usr/bin/env bash
# The tiny Wan examples (examples/wan/t2v_synth.yaml, i2v_synth.yaml) over a grid of seeds and
# thread counts: does each one learn on every one? Each run trains the example as its README says
# (the synthetic clips of `mmtrain data synth --kind video --train 64 --test 4 --frames 9 --width 32
# --height 32`) with train.seed = model.init_seed = SEED and train.threads = THREADS, and reads the
# flow-matching loss from metrics.jsonl: the mean of its first 30 steps against its last 30.
# Prints a markdown table; exits 1 if any run's last-30 mean is not under 0.8 x its first-30 mean.
# Usage: bench/wan_example_grid.sh MMTRAIN [EXAMPLES] [SEEDS] [THREADS]
#   e.g. bench/wan_example_grid.sh build/mmtrain "t2v_synth i2v_synth" "0 1 2" "1 2"
# One-thread runs go two at a time (one per core); two-thread runs one at a time.
set -euo pipefail
MMTRAIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
EXAMPLES="${2:-t2v_synth i2v_synth}"
SEEDS="${3:-0 1 2}"
THREADS="${4:-1 2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/grid_runs.sh"
WORK="$(dirname "$MMTRAIN")/wan_grid"
DATA="$WORK/video"
mkdir -p "$WORK"
[ -f "$DATA/test.jsonl" ] || "$MMTRAIN" data synth --kind video --out "$DATA" --train 64 --test 4 --frames 9 \
  --width 32 --height 32 >/dev/null

# run EXAMPLE SEED THREADS: trains, writes $WORK/EXAMPLE-s{SEED}t{THREADS}/row.md
run() {
  local example="$1" seed="$2" threads="$3" dir="$WORK/$1-s$2t$3"
  rm -rf "$dir" && mkdir -p "$dir"
  local start; start=$(date +%s)
  (cd "$ROOT" && "$MMTRAIN" train "examples/wan/$example.yaml" --set data.jsonl="$DATA/train.jsonl" \
    --set output.dir="$dir/run" --set output.resume=none --set output.tensorboard=false \
    --set train.seed="$seed" --set model.init_seed="$seed" --set train.threads="$threads" \
    --set data.num_workers=1) >"$dir/train.log" 2>&1
  local seconds=$(( $(date +%s) - start ))
  python3 - "$example" "$seed" "$threads" "$seconds" "$dir/run/metrics.jsonl" >"$dir/row.md" <<'EOF'
import json, sys
example, seed, threads, seconds, metrics = sys.argv[1:6]
losses = [r["loss"] for r in map(json.loads, filter(None, open(metrics).read().splitlines())) if "loss" in r and "step" in r]
first, last = sum(losses[:30]) / 30, sum(losses[-30:]) / 30
print(f"| {example} | {seed} | {threads} | {len(losses)} | {first:.4f} | {last:.4f} | {last / first:.3f} | {seconds} s |")
EOF
}

for example in $EXAMPLES; do run_grid "$SEEDS" "$THREADS" run "$example"; done

echo "| example | seed | threads | steps | mean loss, first 30 | mean loss, last 30 | last / first | time |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
cat "$WORK"/*-s*t*/row.md
python3 - "$WORK" <<'EOF'
import glob, sys
bad = [row.split("/")[-2] for row in glob.glob(f"{sys.argv[1]}/*-s*t*/row.md")
       if float(open(row).read().split("|")[7]) >= 0.8]
print("every run learned" if not bad else f"runs that fell short: {' '.join(sorted(bad))}")
sys.exit(1 if bad else 0)
EOF

#!/usr/bin/env bash
# The demo, two parts.
# 1. A small Qwen2.5-VL-architecture model learns the synthetic "shapes" data from scratch on CPU
#    (colours, shapes and positions of shapes in images), then answers held-out questions: synthesize
#    the data, train, evaluate exact match on the test split, ask one test image with `mmtrain infer`.
# 2. Text to video: synthetic clips of moving shapes, a tiny Wan DiT trained from scratch with flow
#    matching (frozen random umT5 and VAE: the template ships no weights), one sampled mp4.
# Usage: examples/demo.sh PATH_TO_MMTRAIN   (./mm demo runs it)
set -euo pipefail
MMTRAIN="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(dirname "$MMTRAIN")/demo"
DATA="$WORK/shapes"
RUN="$WORK/run"
MIN_ACCURACY=0.9
rm -rf "$WORK" && mkdir -p "$WORK"
start=$(date +%s)

echo "== 1. synthetic data: $MMTRAIN data synth --kind shapes --out $DATA"
"$MMTRAIN" data synth --kind shapes --out "$DATA" --train 10000 --test 200 --seed 0
head -c 300 "$DATA/train.jsonl"; echo " ..."

echo
echo "== 2. train from scratch: $MMTRAIN train examples/qwen2.5vl/shapes_from_scratch.yaml"
"$MMTRAIN" train "$ROOT/examples/qwen2.5vl/shapes_from_scratch.yaml" \
  --set model.path="$ROOT/examples/qwen2.5vl/tiny-shapes" --set data.train="$DATA/train.jsonl" \
  --set output.dir="$RUN" --set output.resume=none

echo
echo "== 3. held-out exact match: $MMTRAIN eval --model $RUN/final --data $DATA/test.jsonl"
"$MMTRAIN" eval --model "$RUN/final" --data "$DATA/test.jsonl" --output "$WORK/predictions.jsonl" | tee "$WORK/eval.txt"
# The summary's first key is the overall accuracy (the per-type ones follow under "by_type").
accuracy=$(tail -n 1 "$WORK/eval.txt" | sed -n 's/^{"accuracy": *\([0-9.eE+-]*\).*/\1/p')

echo
echo "== 4. one test image: $MMTRAIN infer --model $RUN/final --image $DATA/images/test/000001.png"
record=$(sed -n 2p "$DATA/test.jsonl")
question=$(printf '%s' "$record" | sed -n 's/.*"content": *"<image>\([^"]*\)".*/\1/p')
truth=$(printf '%s' "$record" | sed -n 's/.*"role": *"assistant", *"content": *"\([^"]*\)".*/\1/p')
answer=$("$MMTRAIN" infer --model "$RUN/final" --image "$DATA/images/test/000001.png" --prompt "$question" --greedy)
printf 'question: %s\nanswer:   %s\ntruth:    %s\n' "$question" "$answer" "$truth"

echo
echo "held-out exact match: $accuracy (needs >= $MIN_ACCURACY)"
awk -v a="$accuracy" -v m="$MIN_ACCURACY" 'BEGIN { exit !(a >= m) }' || { echo "=> the model did not learn enough"; exit 1; }
echo "=> learned"

VIDEO="$WORK/video"
WAN_RUN="$WORK/wan_run"
echo
echo "== 5. synthetic clips: $MMTRAIN data synth --kind video --out $VIDEO"
"$MMTRAIN" data synth --kind video --out "$VIDEO" --train 64 --test 4 --frames 9 --width 32 --height 32 --seed 0
head -n 2 "$VIDEO/train.jsonl"

echo
echo "== 6. text to video, a tiny Wan DiT from scratch: $MMTRAIN train examples/wan/t2v_synth.yaml"
"$MMTRAIN" train "$ROOT/examples/wan/t2v_synth.yaml" --set model.path="$ROOT/examples/wan/tiny-synth" \
  --set data.jsonl="$VIDEO/train.jsonl" --set output.dir="$WAN_RUN" --set output.resume=none
# Mean flow-matching loss of the first and the last 30 steps.
losses=$(grep '"step"' "$WAN_RUN/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.eE+-]*\).*/\1/p')
first=$(printf '%s\n' "$losses" | head -n 30 | awk '{ s += $1 } END { print s / NR }')
last=$(printf '%s\n' "$losses" | tail -n 30 | awk '{ s += $1 } END { print s / NR }')

echo
echo "== 7. one video: $MMTRAIN infer t2v --model $WAN_RUN/final"
"$MMTRAIN" infer t2v --model "$WAN_RUN/final" --prompt "a red circle moving from left to right" --frames 9 \
  --size 32x32 --steps 8 --guidance 3 --max-sequence-length 16 -o "$WORK/red_circle.mp4"

echo
elapsed=$(( $(date +%s) - start ))
echo "flow-matching loss: $first (first 30 steps) -> $last (last 30 steps); demo took ${elapsed}s"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' || { echo "=> the video model did not learn"; exit 1; }
echo "=> learned; the video is $WORK/red_circle.mp4"

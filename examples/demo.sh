#!/usr/bin/env bash
# The demo: a small Qwen2.5-VL-architecture model learns the synthetic "shapes" data from
# scratch on CPU (colours, shapes and positions of shapes in images), then answers held-out
# questions. Steps: synthesize the data, train, evaluate exact match on the test split, ask one
# test image a question with `mmtrain infer`.
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
elapsed=$(( $(date +%s) - start ))
echo "held-out exact match: $accuracy (needs >= $MIN_ACCURACY); demo took ${elapsed}s"
awk -v a="$accuracy" -v m="$MIN_ACCURACY" 'BEGIN { exit !(a >= m) }' || { echo "=> the model did not learn enough"; exit 1; }
echo "=> learned"

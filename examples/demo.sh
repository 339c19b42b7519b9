#!/usr/bin/env bash
# The demo, two parts.
# 1. A small Qwen2.5-VL-architecture model learns the synthetic "shapes" data from scratch on CPU
#    (colours, shapes and positions of shapes in images), then answers held-out questions: synthesize
#    the data, train, evaluate exact match on the test split, ask one test image with `mmtrain infer`.
# 2. Text to video: synthetic clips of moving shapes, a tiny Wan DiT trained from scratch with flow
#    matching (frozen random umT5 and VAE: the template ships no weights), one sampled mp4.
# Both parts always run; the last lines say which part passed or failed, and by how much.
# Usage: examples/demo.sh PATH_TO_MMTRAIN   (./mm demo runs it)
set -euo pipefail
MMTRAIN="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(dirname "$MMTRAIN")/demo"
DATA="$WORK/shapes"
RUN="$WORK/run"
MIN_ACCURACY=0.9       # held-out exact match over all questions
MIN_TYPE_ACCURACY=0.8  # and on each question type (color, shape, position, caption)
# The demo's own output folder (under the build directory) is remade on every run.
rm -rf "$WORK" && mkdir -p "$WORK"
demo_start=$(date +%s)
stage_start=""
stage() {  # stage "TITLE": closes the previous stage with its time, opens the next
  local now; now=$(date +%s)
  [ -z "$stage_start" ] || echo "   (took $((now - stage_start)) s)"
  stage_start=$now
  echo; echo "== $1"
}

vlm_verdict="not run"; vlm_ok=0
video_verdict="not run"; video_ok=0

stage "1. synthetic data: $MMTRAIN data synth --kind shapes --out $DATA"
"$MMTRAIN" data synth --kind shapes --out "$DATA" --train 10000 --test 200 --seed 0
head -c 300 "$DATA/train.jsonl"; echo " ..."

stage "2. train from scratch (about 3 minutes on 2 cores): $MMTRAIN train examples/qwen2.5vl/shapes_from_scratch.yaml"
"$MMTRAIN" train "$ROOT/examples/qwen2.5vl/shapes_from_scratch.yaml" \
  --set model.path="$ROOT/examples/qwen2.5vl/tiny-shapes" --set data.train="$DATA/train.jsonl" \
  --set output.dir="$RUN" --set output.resume=none

stage "3. held-out exact match: $MMTRAIN eval --model $RUN/final --data $DATA/test.jsonl"
"$MMTRAIN" eval --model "$RUN/final" --data "$DATA/test.jsonl" --output "$WORK/predictions.jsonl" | tee "$WORK/eval.txt"

stage "4. one test image: $MMTRAIN infer --model $RUN/final --image $DATA/images/test/000001.png"
record=$(sed -n 2p "$DATA/test.jsonl")
question=$(printf '%s' "$record" | sed -n 's/.*"content": *"<image>\([^"]*\)".*/\1/p')
truth=$(printf '%s' "$record" | sed -n 's/.*"role": *"assistant", *"content": *"\([^"]*\)".*/\1/p')
answer=$("$MMTRAIN" infer --model "$RUN/final" --image "$DATA/images/test/000001.png" --prompt "$question" --greedy)
printf 'question: %s\nanswer:   %s\ntruth:    %s\n' "$question" "$answer" "$truth"

# The eval summary (its last line, JSON): overall and per-type accuracy against the thresholds.
vlm_verdict=$(python3 - "$WORK/eval.txt" "$MIN_ACCURACY" "$MIN_TYPE_ACCURACY" <<'EOF'
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
lo, lo_type = float(sys.argv[2]), float(sys.argv[3])
pct = lambda x: f"{x * 100:.0f}%"
types = ", ".join(f"{t} {pct(v['accuracy'])}" for t, v in sorted(s["by_type"].items()))
short = [f"overall {s['accuracy'] * 100:.1f}% < {pct(lo)}"] if s["accuracy"] < lo else []
short += [f"{t} {pct(v['accuracy'])} < {pct(lo_type)}" for t, v in sorted(s["by_type"].items()) if v["accuracy"] < lo_type]
verdict = "ok" if not short else "short"
print(f"{verdict} | held-out exact match {s['accuracy'] * 100:.1f}% ({types})" + ("; fell short: " + ", ".join(short) if short else ""))
EOF
)
case "$vlm_verdict" in ok*) vlm_ok=1 ;; esac

VIDEO="$WORK/video"
WAN_RUN="$WORK/wan_run"
stage "5. synthetic clips: $MMTRAIN data synth --kind video --out $VIDEO"
"$MMTRAIN" data synth --kind video --out "$VIDEO" --train 64 --test 4 --frames 9 --width 32 --height 32 --seed 0
head -n 2 "$VIDEO/train.jsonl"

stage "6. text to video, a tiny Wan DiT from scratch: $MMTRAIN train examples/wan/t2v_synth.yaml"
"$MMTRAIN" train "$ROOT/examples/wan/t2v_synth.yaml" --set model.path="$ROOT/examples/wan/tiny-synth" \
  --set data.jsonl="$VIDEO/train.jsonl" --set output.dir="$WAN_RUN" --set output.resume=none
# Mean flow-matching loss of the first and the last 30 steps.
losses=$(grep '"step"' "$WAN_RUN/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.eE+-]*\).*/\1/p')
first=$(printf '%s\n' "$losses" | head -n 30 | awk '{ s += $1 } END { print s / NR }')
last=$(printf '%s\n' "$losses" | tail -n 30 | awk '{ s += $1 } END { print s / NR }')

stage "7. one video: $MMTRAIN infer t2v --model $WAN_RUN/final"
"$MMTRAIN" infer t2v --model "$WAN_RUN/final" --prompt "a red circle moving from left to right" --frames 9 \
  --size 32x32 --steps 8 --guidance 3 --max-sequence-length 16 -o "$WORK/red_circle.mp4"
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }'; then
  video_ok=1; video_verdict="ok | flow-matching loss $first -> $last (needs to halve); the video is $WORK/red_circle.mp4"
else
  video_verdict="short | flow-matching loss $first -> $last: it did not halve (needs < $(awk -v a="$first" 'BEGIN { print 0.5 * a }'))"
fi

stage "summary"
echo "vision-language (shapes): $vlm_verdict"
echo "text to video (Wan):      $video_verdict"
echo "the demo took $(( $(date +%s) - demo_start )) s"
if [ "$vlm_ok" = 1 ] && [ "$video_ok" = 1 ]; then echo "=> both models learned"; exit 0; fi
[ "$vlm_ok" = 1 ] || echo "=> the vision-language model did not learn enough"
[ "$video_ok" = 1 ] || echo "=> the video model did not learn"
exit 1

#!/usr/bin/env bash
# The demo: a Hugging Face Qwen2.5-VL directory (tiny, random weights, made by transformers as a
# stand-in for a downloaded checkpoint), answered by `mmtrain infer` and by transformers side by
# side. With random weights the answers are gibberish; the point is that they are the same.
# Usage: examples/demo.sh PATH_TO_MMTRAIN   (./mm demo runs it)
set -euo pipefail
MMTRAIN="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${MM_VENV:-$HOME/.cache/mmtrain/venv}/bin/python"
WORK="$(dirname "$MMTRAIN")/demo"
export TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1

echo "== making a tiny Qwen2.5-VL checkpoint with transformers (tokenizer trained with tokenizers)"
"$PY" "$ROOT/tests/reference/tokenizer_corpus.py" "$WORK/tokenizer_corpus" >/dev/null
(cd "$ROOT/tests/reference" && "$PY" qwen2_5_vl_pipeline.py "$WORK/pipeline" "$WORK/tokenizer_corpus" >/dev/null 2>&1)
MODEL="$WORK/pipeline/model"
MEDIA="$WORK/pipeline/media"
ls "$MODEL"

reference() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'][sys.argv[2]]['answer'])" "$WORK/pipeline/cases.json" "$1"; }

echo
echo "== one image: mmtrain infer --model $MODEL --image shapes.png --prompt 'What is in the picture?' --greedy --max-new-tokens 32"
ours=$("$MMTRAIN" infer --model "$MODEL" --image "$MEDIA/shapes.png" --prompt "What is in the picture?" --greedy --max-new-tokens 32)
theirs=$(reference one_image)
printf 'mmtrain:      %s\ntransformers: %s\n' "$ours" "$theirs"
[ "$ours" = "$theirs" ] && echo "=> identical" || { echo "=> DIFFERENT"; exit 1; }

echo
echo "== image + video conversation: mmtrain infer --model $MODEL --messages conv.json --greedy"
"$PY" -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['cases']['image_and_video']['messages'], open(sys.argv[2],'w'), indent=1)" \
  "$WORK/pipeline/cases.json" "$WORK/conv.json"
ours=$("$MMTRAIN" infer --model "$MODEL" --messages "$WORK/conv.json" --greedy --max-new-tokens 32 --video-fps 2)
theirs=$(reference image_and_video)
printf 'mmtrain:      %s\ntransformers: %s\n' "$ours" "$theirs"
[ "$ours" = "$theirs" ] && echo "=> identical" || { echo "=> DIFFERENT"; exit 1; }

echo
echo "== sampling (temperature 0.8, top-p 0.9, seed 7)"
"$MMTRAIN" infer --model "$MODEL" --image "$MEDIA/tall.jpg" --prompt "Describe it." --temperature 0.8 --top-p 0.9 --seed 7 --max-new-tokens 16

#!/usr/bin/env bash
# The documented command sequences, run as written: every ```sh block of README.md and of the
# examples' READMEs (except the ./mm setup lines, which CI itself runs), in order, in a fresh
# directory that holds only a link to examples/. So the docs cannot drift from the behaviour.
# Only the sizes shrink: `mmtrain` is a wrapper that caps data synth at 48 train / 8 test records
# (16 clips), trains 3 steps and evaluates 4 records; every other argument is passed as written.
# Then every subcommand of README's usage block must answer --help.
# usage: documented_commands.sh MMTRAIN SOURCE_DIR
set -euo pipefail
real=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/mm_docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
ln -s "$src/examples" "$work/examples"
mkdir -p "$work/bin" "$work/build"

cat > "$work/bin/mmtrain" <<EOF
#!/usr/bin/env bash
# Shrinks the documented runs to test size (see documented_commands.sh).
args=()
cap=0
for a in "\$@"; do
  if [ "\$cap" != 0 ]; then a=\$(( a < cap ? a : cap )); cap=0; fi
  case "\$a" in
    --train) [ "\${1:-}" = data ] && cap=48 ;;
    --test) [ "\${1:-}" = data ] && cap=8 ;;
  esac
  args+=("\$a")
done
if [ "\${1:-}" = data ] && [[ " \$* " == *" --kind video "* ]]; then
  for i in "\${!args[@]}"; do [ "\${args[\$i]}" = --train ] && args[\$((i + 1))]=16; done
fi
case "\${1:-}" in
  train) args+=(--set train.max_steps=3 --set train.threads=1) ;;
  eval) args+=(--limit 4) ;;
esac
exec "$real" "\${args[@]}"
EOF
chmod +x "$work/bin/mmtrain"
cp "$work/bin/mmtrain" "$work/build/mmtrain"
export PATH="$work/bin:$PATH" OMP_NUM_THREADS=1

blocks=0
for doc in README.md examples/qwen2.5vl/README.md examples/wan/README.md; do
  # Each ```sh block into its own script, in document order.
  awk -v dir="$work" -v name="$(echo "$doc" | tr '/.' '__')" '
    /^```sh$/ { n++; f = sprintf("%s/block_%s_%02d.sh", dir, name, n); inblock = 1; next }
    /^```/ { inblock = 0; next }
    inblock { print > f }' "$src/$doc"
done
for script in $(ls "$work"/block_*.sh | sort); do
  if grep -qE '(^|[[:space:]])\./mm |MM_BUILD=' "$script"; then continue; fi
  blocks=$((blocks + 1))
  echo "=== $(basename "$script")"
  cat "$script"
  (cd "$work" && bash -euo pipefail "$script") || { echo "FAILED: $(basename "$script") (commands above)"; exit 1; }
done
[ "$blocks" -ge 3 ] || { echo "FAILED: only $blocks runnable blocks found"; exit 1; }

# What the sequences must have left (as the docs say).
for path in runs/shapes/final/config.json out/shapes-hf/config.json red_circle.mp4 features/features.json \
            runs/wan-synth/final/model_index.json runs/wan-features/final/model_index.json; do
  [ -e "$work/$path" ] || { echo "FAILED: the documented commands left no $path"; exit 1; }
done

# Every command of README's usage block (its plain ``` blocks; a ```sh fence opens a block too, so
# each fence line toggles) exists and answers --help.
usage=$(awk '/^```/ { if (inblock) inblock = 0; else { inblock = 1; plain = ($0 == "```") } next }
             inblock && plain && /^mmtrain [a-z]/' "$src/README.md")
checked=0
while read -r _ sub rest; do
  words="$sub"
  case "$rest" in t2v*|i2v*|synth*) words="$sub ${rest%% *}" ;; esac
  "$real" $words --help > /dev/null || { echo "FAILED: mmtrain $words --help"; exit 1; }
  checked=$((checked + 1))
done <<< "$usage"
[ "$checked" -ge 10 ] || { echo "FAILED: only $checked commands found in README's usage block"; exit 1; }
echo "README's usage block: $checked commands answer --help"
echo "all documented command blocks ran ($blocks)"

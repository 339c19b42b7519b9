#!/usr/bin/env bash
# Benchmarks, each side by side with the reference in one run (same inputs, same threads).
# Usage: bench/run.sh BUILD_DIR PYTHON [THREADS]   (./mm bench runs it)
set -euo pipefail
BUILD="$1"; PY="$2"; THREADS="${3:-2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$BUILD/bench"
REF="$ROOT/tests/reference"
mkdir -p "$WORK"
export OMP_NUM_THREADS="$THREADS" TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1

[ -f "$WORK/tokenizer/tokenizer.json" ] || "$PY" "$REF/tokenizer_corpus.py" "$WORK/tokenizer" >/dev/null
[ -f "$WORK/model/config.json" ] || (cd "$REF" && "$PY" make_bench_model.py "$WORK/model" "$WORK/tokenizer" >/dev/null 2>&1)
# ~1 MB of the multilingual test corpus.
"$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); lines=[bytes.fromhex(x['hex']).decode('utf-8','replace').replace('\n',' ') for x in c['cases']]; t='\n'.join(lines)+'\n'; open(sys.argv[2],'w').write(t*max(1,1000000//len(t.encode())))" \
  "$WORK/tokenizer/cases.json" "$WORK/corpus.txt"

ratio() { "$PY" -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); k=sys.argv[3]; print(f'{a[k]:.3f} vs {b[k]:.3f} -> {a[k]/b[k]:.2f}x')" "$@"; }

echo "== tokenizer throughput (MB/s, one thread, higher is better): mmtrain vs tokenizers"
ours=$("$BUILD/bench/bench_tokenizer" "$WORK/tokenizer" "$WORK/corpus.txt" 3)
theirs=$("$PY" "$REF/bench_tokenizer.py" "$WORK/tokenizer" "$WORK/corpus.txt" 3)
echo "$ours"; echo "$theirs"; ratio "$ours" "$theirs" mb_per_s

echo "== Qwen2.5-VL one image (224x224) + 32 new tokens, $THREADS threads (ms, lower is better): mmtrain vs transformers"
ours=$("$BUILD/bench/bench_vlm" "$WORK/model" "$WORK/model/bench.png" "Describe the image." "$THREADS" 32 5)
theirs=$("$PY" "$REF/bench_vlm.py" "$WORK/model" "$WORK/model/bench.png" "Describe the image." "$THREADS" 32 5)
echo "$ours"; echo "$theirs"
echo -n "prefill: "; ratio "$theirs" "$ours" prefill_ms
echo -n "decode per token: "; ratio "$theirs" "$ours" decode_ms_per_token
echo "(ratios are reference time / mmtrain time: above 1 means mmtrain is faster)"

echo "== Qwen2.5-VL training step (4 image conversations, ~180 tokens each, fp32, fused AdamW), $THREADS threads: mmtrain vs transformers"
ours=$("$BUILD/bench/bench_train" "$WORK/model" "$THREADS" 5 4)
theirs=$("$PY" "$REF/bench_train.py" "$WORK/model" "$THREADS" 5 4)
echo "$ours"; echo "$theirs"
echo -n "tokens/s: "; ratio "$ours" "$theirs" tokens_per_s
echo -n "peak RSS (mmtrain / transformers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

[ -f "$WORK/model_qwen3_vl/config.json" ] ||
  (cd "$REF" && "$PY" make_bench_model_qwen3_vl.py "$WORK/model_qwen3_vl" "$WORK/tokenizer" >/dev/null 2>&1)
echo "== Qwen3-VL training step (the same conversations and widths; DeepStack, q/k norms), $THREADS threads: mmtrain vs transformers"
ours=$("$BUILD/bench/bench_train" "$WORK/model_qwen3_vl" "$THREADS" 5 4)
theirs=$("$PY" "$REF/bench_train.py" "$WORK/model_qwen3_vl" "$THREADS" 5 4)
echo "$ours"; echo "$theirs"
echo -n "tokens/s: "; ratio "$ours" "$theirs" tokens_per_s
echo -n "peak RSS (mmtrain / transformers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

[ -f "$WORK/model_qwen3_vl_moe/config.json" ] ||
  (cd "$REF" && "$PY" make_bench_model_qwen3_vl.py "$WORK/model_qwen3_vl_moe" "$WORK/tokenizer" moe >/dev/null 2>&1)
echo "== Qwen3-VL-MoE training step (the same; 8 experts of 192, top 2, every layer; load-balancing loss), $THREADS threads: mmtrain vs transformers"
ours=$("$BUILD/bench/bench_train" "$WORK/model_qwen3_vl_moe" "$THREADS" 5 4)
theirs=$("$PY" "$REF/bench_train.py" "$WORK/model_qwen3_vl_moe" "$THREADS" 5 4)
echo "$ours"; echo "$theirs"
echo -n "tokens/s: "; ratio "$ours" "$theirs" tokens_per_s
echo -n "peak RSS (mmtrain / transformers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

[ -f "$WORK/model_qwen3_5/config.json" ] ||
  (cd "$REF" && "$PY" make_bench_model_qwen3_vl.py "$WORK/model_qwen3_5" "$WORK/tokenizer" qwen3_5 >/dev/null 2>&1)
echo "== Qwen3.5 training step (the same conversations and widths; 6 Gated DeltaNet + 2 gated-attention layers),"
echo "   $THREADS threads: mmtrain (right-padded, then packed into one row) vs transformers (right-padded; its torch"
echo "   path cannot pack DeltaNet layers exactly)"
ours=$("$BUILD/bench/bench_train" "$WORK/model_qwen3_5" "$THREADS" 5 4)
ours_packed=$("$BUILD/bench/bench_train" --packed "$WORK/model_qwen3_5" "$THREADS" 5 4)
theirs=$("$PY" "$REF/bench_train.py" "$WORK/model_qwen3_5" "$THREADS" 5 4 2>/dev/null)
echo "$ours"; echo "$ours_packed"; echo "$theirs"
echo -n "tokens/s, padded: "; ratio "$ours" "$theirs" tokens_per_s
echo -n "tokens/s, mmtrain packed vs transformers padded: "; ratio "$ours_packed" "$theirs" tokens_per_s
echo -n "peak RSS, padded (mmtrain / transformers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

echo "== Qwen3.5 one image (224x224) + 32 new tokens (prefill: chunked DeltaNet; decode: its recurrent step and the"
echo "   KV cache), $THREADS threads (ms, lower is better): mmtrain vs transformers"
ours=$("$BUILD/bench/bench_vlm" "$WORK/model_qwen3_5" "$WORK/model/bench.png" "Describe the image." "$THREADS" 32 5)
theirs=$("$PY" "$REF/bench_vlm.py" "$WORK/model_qwen3_5" "$WORK/model/bench.png" "Describe the image." "$THREADS" 32 5 2>/dev/null)
echo "$ours"; echo "$theirs"
echo -n "prefill: "; ratio "$theirs" "$ours" prefill_ms
echo -n "decode per token: "; ratio "$theirs" "$ours" decode_ms_per_token
echo "(ratios are reference time / mmtrain time: above 1 means mmtrain is faster)"

echo "== data parallel training step, 1 thread per process, 4 conversations per process: 1 and 2 processes"
echo "   (FSDP: sharded over both; DDP: replicated), mmtrain vs torch FSDP2 (fully_shard) over transformers"
port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
one=$(OMP_NUM_THREADS=1 "$BUILD/bench/bench_train" "$WORK/model" 1 5 4)
fsdp=$(OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node 2 --master-port "$(port)" \
  --program "$BUILD/bench/bench_train" -- "$WORK/model" 1 5 4 0)
ddp=$(OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node 2 --master-port "$(port)" \
  --program "$BUILD/bench/bench_train" -- "$WORK/model" 1 5 4 1)
ref_one=$(OMP_NUM_THREADS=1 "$PY" "$REF/bench_train.py" "$WORK/model" 1 5 4 2>/dev/null)
ref_fsdp=$(OMP_NUM_THREADS=1 "$(dirname "$PY")/torchrun" --nproc-per-node 2 --master-port "$(port)" \
  "$REF/bench_train.py" "$WORK/model" 1 5 4 2>/dev/null)
echo "$one"; echo "$fsdp"; echo "$ddp"; echo "$ref_one"; echo "$ref_fsdp"
echo -n "mmtrain 2 processes (FSDP) / 1 process, tokens/s: "; ratio "$fsdp" "$one" tokens_per_s
echo -n "mmtrain 2 processes (DDP) / 1 process, tokens/s: "; ratio "$ddp" "$one" tokens_per_s
echo -n "torch FSDP2 2 processes / 1 process, tokens/s: "; ratio "$ref_fsdp" "$ref_one" tokens_per_s
echo -n "FSDP over 2 processes, mmtrain / torch, tokens/s: "; ratio "$fsdp" "$ref_fsdp" tokens_per_s
"$PY" -c "import json,sys
for name, line in (('FSDP', sys.argv[1]), ('DDP', sys.argv[2])):
    r = json.loads(line)
    print(f'{name} step: {r[\"step_ms\"]:.0f} ms = {r[\"collective_wait_ms\"]:.0f} ms waiting on collectives + {r[\"step_ms\"] - r[\"collective_wait_ms\"]:.0f} ms computing')" "$fsdp" "$ddp"

echo "== expert parallelism: the Qwen3-VL-MoE step above on 2 processes, 1 thread each, 4 conversations per process:"
echo "   FSDP over both (every rank computes all 8 experts for its own tokens) vs FSDP + ep=2 (each rank holds and"
echo "   computes 4 experts for both ranks' tokens, sent there and back by all-to-all), vs torch FSDP2 over transformers"
moe_fsdp=$(OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node 2 --master-port "$(port)" \
  --program "$BUILD/bench/bench_train" -- "$WORK/model_qwen3_vl_moe" 1 5 4 0)
moe_ep=$(OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node 2 --master-port "$(port)" \
  --program "$BUILD/bench/bench_train" -- "$WORK/model_qwen3_vl_moe" 1 5 4 0 2)
moe_ref=$(OMP_NUM_THREADS=1 "$(dirname "$PY")/torchrun" --nproc-per-node 2 --master-port "$(port)" \
  "$REF/bench_train.py" "$WORK/model_qwen3_vl_moe" 1 5 4 2>/dev/null)
echo "$moe_fsdp"; echo "$moe_ep"; echo "$moe_ref"
echo -n "ep=2 / FSDP, tokens/s: "; ratio "$moe_ep" "$moe_fsdp" tokens_per_s
echo -n "ep=2 / FSDP, rank 0 training RSS (lower is better): "; ratio "$moe_ep" "$moe_fsdp" training_rss_mb
echo -n "FSDP over 2 processes, mmtrain / torch, tokens/s: "; ratio "$moe_fsdp" "$moe_ref" tokens_per_s
"$PY" -c "import json,sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name, r in (('FSDP', a), ('FSDP + ep=2', b)):
    rest = r[\"step_ms\"] - r[\"collective_wait_ms\"] - r[\"all_to_all_ms\"]
    print(f'{name} step: {r[\"step_ms\"]:.0f} ms = {r[\"collective_wait_ms\"]:.0f} ms waiting on FSDP collectives + {r[\"all_to_all_ms\"]:.0f} ms in the dispatch all-to-alls + {rest:.0f} ms the rest')
print(f'dispatch cost per step at ep=2: {b[\"all_to_all_ms\"]:.0f} ms in all-to-alls ({100 * b[\"all_to_all_ms\"] / b[\"step_ms\"]:.1f}% of the step); step time against FSDP alone: {b[\"step_ms\"] - a[\"step_ms\"]:+.0f} ms')" "$moe_fsdp" "$moe_ep"

# Wan: the DiT training step and the VAE decode, models made by diffusers (bench_wan.py make).
# Every measurement runs in a process of its own, so that each peak RSS is that run's.
wan() { "$BUILD/bench/bench_wan" "$@"; }
wan_ref() { "$PY" "$REF/bench_wan.py" "$@"; }
[ -f "$WORK/wan/transformer/config.json" ] && [ -f "$WORK/wan/vae/config.json" ] ||
  "$PY" "$REF/bench_wan.py" make "$WORK/wan" >/dev/null 2>&1
echo "== Wan DiT training step (6 layers, width 384, latents [1, 16, 5, 16, 16] = 320 tokens, 64 text tokens of 4096,"
echo "   flow matching, fp32, fused AdamW), $THREADS threads: mmtrain vs diffusers + PyTorch loop"
ours=$(wan train "$WORK/wan/transformer" "$THREADS" 10 1)
theirs=$(wan_ref train "$WORK/wan/transformer" "$THREADS" 10 1)
echo "$ours"; echo "$theirs"
echo -n "latent tokens/s: "; ratio "$ours" "$theirs" latent_tokens_per_s
echo -n "peak RSS (mmtrain / diffusers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

echo "== Wan VAE decode (Wan2.1 layout, base_dim 32), 5 latent frames -> 17 frames of 128x128, $THREADS threads: mmtrain vs diffusers"
ours=$(wan decode "$WORK/wan/vae" "$THREADS" 2 5 128 128)
theirs=$(wan_ref decode "$WORK/wan/vae" "$THREADS" 2 5 128 128)
echo "$ours"; echo "$theirs"
echo -n "frames/s: "; ratio "$ours" "$theirs" frames_per_s
echo -n "peak RSS (mmtrain / diffusers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb

echo "== Wan VAE decode memory, 2 latent frames -> 5 frames of 256x256: whole frame vs tiles of 128 (stride 96),"
echo "   one cold decode per process, $THREADS threads"
whole=$(wan decode "$WORK/wan/vae" "$THREADS" 0 2 256 256)
tiled=$(wan tiled_decode "$WORK/wan/vae" "$THREADS" 0 2 256 256)
ref_whole=$(wan_ref decode "$WORK/wan/vae" "$THREADS" 0 2 256 256)
ref_tiled=$(wan_ref tiled_decode "$WORK/wan/vae" "$THREADS" 0 2 256 256)
echo "$whole"; echo "$tiled"; echo "$ref_whole"; echo "$ref_tiled"
echo -n "mmtrain tiled / whole, decode RSS (peak minus before the decode): "; ratio "$tiled" "$whole" decode_rss_mb
echo -n "diffusers tiled / whole, decode RSS: "; ratio "$ref_tiled" "$ref_whole" decode_rss_mb
echo -n "tiled, mmtrain / diffusers, peak RSS: "; ratio "$tiled" "$ref_tiled" peak_rss_mb
echo -n "tiled, mmtrain / diffusers, ms per decode: "; ratio "$tiled" "$ref_tiled" ms_per_decode

echo "== context parallelism on the Wan DiT above: one sample of latents [1, 16, 17, 32, 32] = 4352 video tokens,"
echo "   a training step (fp32, AdamW, no gradient reduction) split over cp processes of 1 thread (Gloo; the"
echo "   processes share the VM's cores): cp 1 (2 threads and 1), cp 2 Ulysses, cp 2 ring, cp 4 USP 2 x 2"
cp_run() {  # PROCESSES THREADS ULYSSES
  if [ "$1" = 1 ]; then OMP_NUM_THREADS=$2 "$BUILD/bench/bench_context_parallel" "$WORK/wan/transformer" "$2" 2 17 1
  else OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node "$1" --master-port "$(port)" \
    --program "$BUILD/bench/bench_context_parallel" -- "$WORK/wan/transformer" 1 2 17 "$3"; fi
}
cp1t2=$(cp_run 1 2 1); cp1=$(cp_run 1 1 1); cp2u=$(cp_run 2 1 2); cp2r=$(cp_run 2 1 1); cp4=$(cp_run 4 1 2)
echo "$cp1t2"; echo "$cp1"; echo "$cp2u"; echo "$cp2r"; echo "$cp4"
"$PY" -c "import json,sys
rows = [json.loads(l) for l in sys.argv[1:]]
base = rows[1]
for r in rows:
    rest = r['ms_per_step'] - r['all_to_all_wait_ms'] - r['ring_wait_ms']
    print(f\"cp {r['cp']} (Ulysses {r['ulysses']} x ring {r['ring']}): {r['ms_per_step']:.0f} ms = {r['all_to_all_wait_ms']:.0f} all-to-all + {r['ring_wait_ms']:.0f} ring wait + {rest:.0f} rest; \"
          f\"{r['video_tokens_per_s']:.0f} tokens/s; training RSS per rank max {r['max_training_rss_mb']:.0f} MB ({r['max_training_rss_mb'] / base['max_training_rss_mb']:.2f}x of cp 1)\")" \
  "$cp1t2" "$cp1" "$cp2u" "$cp2r" "$cp4"

echo "== attention over packed samples (Qwen2.5-VL-3B decoder heads: 16 query, 2 KV, head dim 128; 4096 tokens from"
echo "   6 samples, causal within each), forward + backward, fp32, $THREADS threads: mmtrain (per-length SDPA, and the"
echo "   dense block mask it used before) vs transformers' packed sdpa path (create_causal_mask + sdpa_attention_forward)"
segments=$("$BUILD/bench/bench_packed_attention" "$THREADS" 5 segments)
dense=$("$BUILD/bench/bench_packed_attention" "$THREADS" 5 dense)
theirs=$("$PY" "$REF/bench_packed_attention.py" "$THREADS" 5)
echo "$segments"; echo "$dense"; echo "$theirs"
echo -n "tokens/s, mmtrain segments / transformers: "; ratio "$segments" "$theirs" tokens_per_s
echo -n "attention RSS, mmtrain segments / transformers (lower is better): "; ratio "$segments" "$theirs" attention_rss_mb

echo "== Gated DeltaNet layer (Qwen3.5-9B shapes: hidden 4096, 16 key / 32 value heads of 128, conv 4), 2048 tokens,"
echo "   forward + backward, fp32, $THREADS threads: mmtrain vs transformers' torch path. plain: one sample; packed: 4"
echo "   samples in one row (mmtrain: varlen, state and conv restarting per sample; transformers: the samples one by"
echo "   one, its torch path having no varlen form); alone: mmtrain running the 4 samples one by one too"
for mode in plain packed; do
  ours=$("$BUILD/bench/bench_gated_delta_net" "$THREADS" 3 "$mode")
  theirs=$("$PY" "$REF/bench_gated_delta_net.py" "$THREADS" 3 "$mode")
  echo "$ours"; echo "$theirs"
  echo -n "$mode tokens/s, mmtrain / transformers: "; ratio "$ours" "$theirs" tokens_per_s
  echo -n "$mode layer RSS, mmtrain / transformers (lower is better): "; ratio "$ours" "$theirs" layer_rss_mb
done
alone=$("$BUILD/bench/bench_gated_delta_net" "$THREADS" 3 alone)
echo "$alone"
echo -n "alone tokens/s, mmtrain / transformers: "; ratio "$alone" "$theirs" tokens_per_s
echo "== the same layer under context parallelism (head-parallel: 1/cp of the heads over the whole sequence"
echo "   per rank, two all-to-alls), one causal 2048-token sequence, forward + backward, fp32, cp processes of"
echo "   1 thread (Gloo; they share the VM's cores): cp 1 (1 thread), cp 2 (8 key heads each), cp 4 (4 each)"
delta_cp() {  # PROCESSES
  if [ "$1" = 1 ]; then OMP_NUM_THREADS=1 "$BUILD/bench/bench_gated_delta_net_cp" 1 2
  else OMP_NUM_THREADS=1 "$BUILD/mmtrain" --log-level warn launch --nproc-per-node "$1" --master-port "$(port)" \
    --program "$BUILD/bench/bench_gated_delta_net_cp" -- 1 2; fi
}
for cp in 1 2 4; do delta_cp "$cp"; done

# Real tensor shapes: Qwen2.5-VL-3B's published layer shapes, 4 decoder layers (1.29B parameters,
# bf16, two shards; make_real_shape_model.py), one 448x336 photo. Each load in a process of its own.
[ -f "$WORK/real_shape/config.json" ] ||
  (cd "$REF" && "$PY" make_real_shape_model.py "$WORK/real_shape" "$WORK/tokenizer" >/dev/null 2>&1)
echo "== Qwen2.5-VL with 3B tensor shapes (4 decoder layers, 1.29B parameters), load + one photo + 16 greedy tokens,"
echo "   $THREADS threads, bf16 and fp32: mmtrain vs transformers"
for dtype in bf16 fp32; do
  load_args=("$WORK/real_shape" "$WORK/real_shape/photo.png" "Describe this photo." "$THREADS" "$dtype" 16)
  ours=$("$BUILD/bench/bench_load" "${load_args[@]}" "$WORK/load_mmtrain_$dtype.safetensors")
  theirs=$("$PY" "$REF/bench_load.py" "${load_args[@]}" "$WORK/load_transformers_$dtype.safetensors" 2>/dev/null)
  echo "$ours"; echo "$theirs"
  echo -n "$dtype peak RSS (mmtrain / transformers, lower is better): "; ratio "$ours" "$theirs" peak_rss_mb
  echo -n "$dtype load + answer time (transformers / mmtrain, above 1: mmtrain faster): "
  "$PY" -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(f'{(b[\"load_s\"]+b[\"answer_s\"])/(a[\"load_s\"]+a[\"answer_s\"]):.2f}x')" "$ours" "$theirs"
done
echo "bf16 fidelity (logits of every prompt position against transformers' fp32 ones; mmtrain's bf16 error must not exceed transformers'):"
"$PY" "$REF/bench_load.py" compare "$WORK/load_mmtrain_fp32.safetensors" "$WORK/load_mmtrain_bf16.safetensors" \
  "$WORK/load_transformers_fp32.safetensors" "$WORK/load_transformers_bf16.safetensors"

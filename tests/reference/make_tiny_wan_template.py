"""Makes the tiny text-to-video template examples/wan/tiny-synth/ (every file there except
README.md), and with `i2v` the image-to-video one examples/wan/tiny-synth-i2v/: a diffusers Wan
pipeline layout with configs only (no weights: `mmtrain train` with
model.from_scratch and model.random_frozen initializes the DiT, and the frozen VAE and umT5
encoder, from them), small enough to train on the synthetic moving-shapes clips
(`mmtrain data synth --kind video`) on a few CPU cores in a minute, and a SentencePiece unigram
tokenizer trained on those clips' captions (saved by transformers' T5Tokenizer, so tokenizer.json
is the reference's own).

The image-to-video template is a WanImageToVideoPipeline in the Wan2.1-I2V layout: the same
tokenizer, umT5 and VAE configs, a CLIP vision config (image_encoder/, randomly initialized and
frozen as well) with its image_processor/, and a DiT taking 2 z + 4 input channels (noise, frame
mask, first-frame latents) and the CLIP tokens (image_dim).

Rerun (from the repository root) after changing anything here, and commit the output:
  ~/.cache/mmtrain/venv/bin/python tests/reference/make_tiny_wan_template.py examples/wan/tiny-synth
  ~/.cache/mmtrain/venv/bin/python tests/reference/make_tiny_wan_template.py examples/wan/tiny-synth-i2v i2v
The captions' words are listed here as well as in src/mm/data/synth_video.cpp.
"""
import io, json, os, shutil, sys, tempfile

import sentencepiece as spm
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
from transformers import CLIPImageProcessor, CLIPVisionConfig, T5Tokenizer, UMT5Config

out = sys.argv[1]
i2v = len(sys.argv) > 2 and sys.argv[2] == "i2v"
os.makedirs(out, exist_ok=True)

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange"]
SHAPES = ["circle", "square", "triangle"]
MOTIONS = ["moving from left to right", "moving from right to left", "moving up", "moving down", "growing",
           "shrinking"]
captions = [f"a {c} {s} {m}" for c in COLOURS for s in SHAPES for m in MOTIONS]

# ---- tokenizer: umT5's ids for the specials (pad 0, eos 1, unk 2) -----------------------------
model = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(captions * 10), model_writer=model, vocab_size=40,
                               model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                               character_coverage=1.0, minloglevel=2, num_threads=1)
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "spiece.model"), "wb") as f:
        f.write(model.getvalue())
    tokenizer = T5Tokenizer.from_pretrained(tmp, extra_ids=0)
    shutil.rmtree(os.path.join(out, "tokenizer"), ignore_errors=True)
    tokenizer.save_pretrained(os.path.join(out, "tokenizer"))
    shutil.copy(os.path.join(tmp, "spiece.model"), os.path.join(out, "tokenizer"))


def write_config(folder, config):
    os.makedirs(os.path.join(out, folder), exist_ok=True)
    with open(os.path.join(out, folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


text_dim = 32
z = 8  # latent channels
encoder = UMT5Config(vocab_size=len(tokenizer), d_model=text_dim, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                     relative_attention_num_buckets=8, relative_attention_max_distance=16,
                     feed_forward_proj="gated-gelu").to_dict()
encoder["architectures"] = ["UMT5EncoderModel"]
write_config("text_encoder", {k: v for k, v in encoder.items() if k not in ("transformers_version",)})
# The per-channel statistics of this VAE's latents (as a real Wan VAE config carries them): its
# random initialization (model.init_seed 0, so VAE seed 1, in mmtrain) measured with
# `mmtrain extract` over `mmtrain data synth --kind video --train 64 --frames 9 --width 32
# --height 32` clips, so training sees unit-scale latents as with a trained VAE.
LATENTS_MEAN = [0.0304, 0.0612, 0.1053, 0.2522, -0.1523, 0.0824, 0.0174, 0.0406]
LATENTS_STD = [0.061, 0.0962, 0.0807, 0.1888, 0.1027, 0.1102, 0.1252, 0.1302]
vae = AutoencoderKLWan(base_dim=8, z_dim=z, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                       temperal_downsample=[False, True, True], latents_mean=LATENTS_MEAN, latents_std=LATENTS_STD)
write_config("vae", {k: v for k, v in dict(vae.config).items() if not k.startswith("_")} | {"_class_name": "AutoencoderKLWan"})
image_dim = 32  # the CLIP hidden size
if i2v:
    # 32 x 32 pixels in 16 x 16 patches: 1 + 4 CLIP tokens per image.
    clip = CLIPVisionConfig(hidden_size=image_dim, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                            image_size=32, patch_size=16, hidden_act="gelu").to_dict()
    clip["architectures"] = ["CLIPVisionModel"]
    write_config("image_encoder", {k: v for k, v in clip.items() if k not in ("transformers_version",)})
    shutil.rmtree(os.path.join(out, "image_processor"), ignore_errors=True)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        os.path.join(out, "image_processor"))
transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16,
                                    in_channels=2 * z + 4 if i2v else z, out_channels=z, text_dim=text_dim,
                                    freq_dim=32, ffn_dim=128, num_layers=4, cross_attn_norm=True,
                                    qk_norm="rms_norm_across_heads", rope_max_seq_len=64,
                                    image_dim=image_dim if i2v else None, added_kv_proj_dim=64 if i2v else None)
write_config("transformer", {k: v for k, v in dict(transformer.config).items() if not k.startswith("_")}
             | {"_class_name": "WanTransformer3DModel"})
scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
os.makedirs(os.path.join(out, "scheduler"), exist_ok=True)
with open(os.path.join(out, "scheduler", "scheduler_config.json"), "w") as f:
    json.dump({k: v for k, v in dict(scheduler.config).items() if not k.startswith("_")}
              | {"_class_name": "UniPCMultistepScheduler"}, f, indent=2, sort_keys=True)
    f.write("\n")
with open(os.path.join(out, "model_index.json"), "w") as f:
    index = {"_class_name": "WanImageToVideoPipeline" if i2v else "WanPipeline", "boundary_ratio": None,
             "expand_timesteps": False, "scheduler": ["diffusers", "UniPCMultistepScheduler"],
             "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5Tokenizer"],
             "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [None, None],
             "vae": ["diffusers", "AutoencoderKLWan"]}
    if i2v:
        index |= {"image_encoder": ["transformers", "CLIPVisionModel"],
                  "image_processor": ["transformers", "CLIPImageProcessor"]}
    json.dump(index, f, indent=2)
    f.write("\n")
print("wrote", out)

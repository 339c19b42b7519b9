"""Oracle: diffusers' WanPipeline (text-to-video) on tiny random components, fp32.

For each case <out>/<name>/:
  pipeline/          WanPipeline.save_pretrained, as written: model_index.json, tokenizer/ (a tiny
                     SentencePiece unigram model trained here, as a transformers T5 tokenizer,
                     saved as tokenizer.json without spiece.model),
                     text_encoder/ (UMT5EncoderModel), vae/ (AutoencoderKLWan), transformer/
                     (WanTransformer3DModel; and transformer_2/ for the two-expert case),
                     scheduler/
  cases.safetensors: video [B, F, H, W, 3] float32 (output_type "np"), latents [B, z, T', H', W']
                     (output_type "latent"), prompt_embeds / negative_prompt_embeds [B, L, d]
                     (encode_prompt), settings: frames, height, width, steps, seed, max_sequence_length
                     (int64) and guidance, guidance_2 (float64)
  prompts.json       the prompts and the negative prompt
Cases: "unipc_cfg" (Wan2.1 layout: UniPC flow sampler, guidance 5, two prompts), "euler" (flow-match
Euler, no guidance), "two_experts" (Wan2.2 A14B layout: transformer_2 below boundary_ratio,
guidance_2), "ti2v" (Wan2.2 TI2V layout: the Wan2.2 VAE, 48-channel-like latents, expand_timesteps).
"""
import io, json, os, shutil, sys

import numpy as np
import sentencepiece as spm
import torch
from diffusers import (AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler, WanPipeline,
                       WanTransformer3DModel)
from diffusers.utils import logging as diffusers_logging
from safetensors.torch import save_file
from transformers import AutoTokenizer, T5Tokenizer, UMT5Config, UMT5EncoderModel

torch.set_num_threads(1)
diffusers_logging.set_verbosity_error()
out_dir = sys.argv[1]

CORPUS = [
    "a red circle moving from left to right", "a blue square moving up", "a green triangle moving down",
    "the camera pans slowly over a quiet lake at sunset", "two cats play with a ball of yarn",
    "ein roter Kreis bewegt sich nach rechts", "un carré bleu qui monte", "一只猫在草地上奔跑",
    "low quality, blurry, static, worst quality", "a yellow shape grows and shrinks on a grey background",
]


def make_tokenizer(path):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 20), model_writer=model, vocab_size=90,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, minloglevel=2)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "spiece.model"), "wb") as f:
        f.write(model.getvalue())
    # transformers builds its tokenizer from a directory holding only spiece.model (building it
    # from vocab_file gives a broken vocabulary in transformers 5).
    return T5Tokenizer.from_pretrained(path)


def perturb(module, scale=1.0):
    """Unit-scale random weights, so that a wrong formula shows as a large difference."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif p.dim() == 1 or "norm" in name or name.endswith("gamma"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(scale * torch.randn_like(p) / (p[0].numel() ** 0.5))


def make_vae(wan22):
    if wan22:
        config = dict(base_dim=8, decoder_base_dim=12, z_dim=6, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                      temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
                      patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4)
    else:
        config = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                      temperal_downsample=[False, True, True], scale_factor_spatial=8, scale_factor_temporal=4)
    z = config["z_dim"]
    config.update(latents_mean=[round(float(v), 4) for v in 0.1 * torch.randn(z)],
                  latents_std=[round(float(v), 4) for v in 0.5 + torch.rand(z)])
    vae = AutoencoderKLWan(**config).eval()
    perturb(vae)
    with torch.no_grad():
        vae.decoder.conv_out.weight.mul_(0.3)
    return vae


def make_transformer(z, text_dim):
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                  in_channels=z, out_channels=z, text_dim=text_dim, freq_dim=16, ffn_dim=24,
                                  num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                  rope_max_seq_len=32).eval()
    perturb(model, scale=0.5)
    with torch.no_grad():
        for block in model.blocks:
            block.scale_shift_table.copy_(0.1 * torch.randn_like(block.scale_shift_table))
        model.scale_shift_table.copy_(0.1 * torch.randn_like(model.scale_shift_table))
    return model


CASES = {
    "unipc_cfg": dict(prompts=["a red circle moving from left to right", "two cats play with a ball"],
                      negative="low quality, blurry", guidance=5.0, guidance_2=None, steps=4, frames=9, size=(32, 48),
                      scheduler="unipc", experts=1, wan22=False, seed=42),
    "euler": dict(prompts=["a blue square moving up"], negative="", guidance=1.0, guidance_2=None, steps=4, frames=5,
                  size=(32, 32), scheduler="euler", experts=1, wan22=False, seed=7),
    "two_experts": dict(prompts=["a green triangle moving down"], negative="static", guidance=4.0, guidance_2=3.0,
                        steps=4, frames=5, size=(32, 32), scheduler="unipc", experts=2, wan22=False, seed=3),
    "ti2v": dict(prompts=["a yellow shape grows"], negative="blurry", guidance=5.0, guidance_2=None, steps=4,
                 frames=5, size=(64, 64), scheduler="unipc", experts=1, wan22=True, seed=11),
}

for name, case in CASES.items():
    torch.manual_seed(sum(map(ord, name)))
    target = os.path.join(out_dir, name)
    tokenizer = make_tokenizer(os.path.join(target, "spm"))
    encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), d_model=16, d_kv=8, d_ff=32, num_layers=2,
                                          num_heads=2, relative_attention_num_buckets=8,
                                          relative_attention_max_distance=16,
                                          feed_forward_proj="gated-gelu")).eval()
    perturb(encoder)
    vae = make_vae(case["wan22"])
    z = vae.config.z_dim
    transformer = make_transformer(z, 16)
    transformer_2 = make_transformer(z, 16) if case["experts"] == 2 else None
    if case["scheduler"] == "unipc":
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler(shift=5.0)
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer, transformer_2=transformer_2,
                       boundary_ratio=0.6 if case["experts"] == 2 else None, expand_timesteps=case["wan22"])
    shutil.rmtree(os.path.join(target, "pipeline"), ignore_errors=True)  # no file of an earlier run left in it
    pipe.save_pretrained(os.path.join(target, "pipeline"))
    # Kept exactly as diffusers wrote it: transformers 5 saves the umT5 tokenizer as tokenizer.json
    # alone, which mmtrain must load as it is (no spiece.model added).
    assert not os.path.exists(os.path.join(target, "pipeline", "tokenizer", "spiece.model"))
    reloaded = AutoTokenizer.from_pretrained(os.path.join(target, "pipeline", "tokenizer"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(target, "spm", "spiece.model"))
    for p in case["prompts"]:  # a sane reference tokenizer: the sentencepiece ids plus </s>
        assert reloaded(p).input_ids == sp.encode(p) + [1], (p, reloaded(p).input_ids, sp.encode(p))
    height, width = case["size"]
    max_len = 24
    args = dict(prompt=case["prompts"], negative_prompt=[case["negative"]] * len(case["prompts"]), height=height,
                width=width, num_frames=case["frames"], num_inference_steps=case["steps"],
                guidance_scale=case["guidance"], guidance_scale_2=case["guidance_2"], max_sequence_length=max_len)
    with torch.no_grad():
        video = pipe(**args, generator=torch.Generator().manual_seed(case["seed"]), output_type="np").frames
        latents = pipe(**args, generator=torch.Generator().manual_seed(case["seed"]), output_type="latent").frames
        embeds, negative = pipe.encode_prompt(case["prompts"], [case["negative"]] * len(case["prompts"]),
                                              do_classifier_free_guidance=True, max_sequence_length=max_len)
    tensors = {"video": torch.from_numpy(np.ascontiguousarray(video)).float(), "latents": latents.contiguous(),
               "prompt_embeds": embeds.contiguous(), "negative_prompt_embeds": negative.contiguous(),
               "settings": torch.tensor([case["frames"], height, width, case["steps"], case["seed"], max_len]),
               "guidance": torch.tensor([case["guidance"], case["guidance_2"] or 0.0], dtype=torch.float64)}
    save_file(tensors, os.path.join(target, "cases.safetensors"))
    with open(os.path.join(target, "prompts.json"), "w") as f:
        json.dump({"prompts": case["prompts"], "negative_prompt": case["negative"]}, f)
    print(name, "video", tuple(video.shape), "range", float(video.min()), float(video.max()))
print("ok")

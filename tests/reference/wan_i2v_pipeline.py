"""Oracle: diffusers' WanImageToVideoPipeline (image-to-video) on tiny random components, fp32.

The text side (tokenizer, umT5, VAE and transformer builders) is wan_pipeline.py's. For each case
<out>/<name>/:
  pipeline/          WanImageToVideoPipeline.save_pretrained: model_index.json, tokenizer/,
                     text_encoder/, vae/, transformer/ (transformer_2/ for two experts), scheduler/,
                     and for Wan2.1 layouts image_encoder/ (CLIPVisionModel) + image_processor/
                     (CLIPImageProcessor)
  image.png          the conditioning image (RGB, deliberately not height x width, so the
                     pipeline's PIL Lanczos resize runs); last.png for the first-last-frame case
  cases.safetensors: video [B, F, H, W, 3] float32 (output_type "np"), latents [B, z, T', H', W']
                     (output_type "latent"), image_tensor [1, 3, H, W] (video_processor.preprocess,
                     in [-1, 1]), image_embeds [1 or 2, tokens, d] (encode_image: hidden_states[-2];
                     absent without an image encoder), condition (prepare_latents' second output:
                     Wan2.1 [B, 4 + z, T', H', W'] mask + image latents, expand_timesteps
                     [B, z, 1, H', W'] the image latents), settings: frames, height, width, steps,
                     seed, max_sequence_length (int64), guidance, guidance_2 (float64)
  prompts.json       the prompts and the negative prompt
Cases: "wan21" (Wan2.1-I2V: CLIP image embeddings, in_channels 2 z + 4, UniPC, guidance 5, two
prompts), "flf2v" (Wan2.1 FLF2V: first and last image, pos_embed_seq_len, Euler, no guidance),
"two_experts" (Wan2.2 A14B I2V: no image encoder, boundary_ratio, guidance_2), "ti2v" (Wan2.2 TI2V:
Wan2.2 VAE, expand_timesteps, the image latent as the first latent frame).
"""
import json, os, shutil, sys

import numpy as np
import torch
from diffusers import (FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler, WanImageToVideoPipeline,
                       WanTransformer3DModel)
from diffusers.utils import logging as diffusers_logging
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoTokenizer, CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, UMT5Config, \
    UMT5EncoderModel

# wan_pipeline.py runs its cases on import; take only its builders.
_source = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "wan_pipeline.py")).read()
_builders = {}
exec(compile(_source.split("CASES = {")[0].replace("out_dir = sys.argv[1]", ""), "wan_pipeline.py", "exec"),
     _builders)
make_tokenizer, perturb, make_vae = _builders["make_tokenizer"], _builders["perturb"], _builders["make_vae"]

# pipeline_wan_i2v.basic_clean calls ftfy unconditionally (pipeline_wan's checks is_ftfy_available),
# and ftfy is not installed here; without it the two are the same cleaning, the one the C++ does
# (ftfy.fix_text leaves these ASCII prompts alone anyway).
import diffusers.pipelines.wan.pipeline_wan as _wan_t2v
import diffusers.pipelines.wan.pipeline_wan_i2v as _wan_i2v
_wan_i2v.basic_clean = _wan_t2v.basic_clean

torch.set_num_threads(1)
diffusers_logging.set_verbosity_error()
out_dir = sys.argv[1]
CLIP_DIM = 16  # CLIP hidden size = the transformer's image_dim


def make_transformer(z, in_channels, image_dim=None, pos_embed_seq_len=None):
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                  in_channels=in_channels, out_channels=z, text_dim=16, freq_dim=16, ffn_dim=24,
                                  num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                  image_dim=image_dim, added_kv_proj_dim=16 if image_dim else None,
                                  pos_embed_seq_len=pos_embed_seq_len, rope_max_seq_len=32).eval()
    perturb(model, scale=0.5)
    with torch.no_grad():
        for block in model.blocks:
            block.scale_shift_table.copy_(0.1 * torch.randn_like(block.scale_shift_table))
        model.scale_shift_table.copy_(0.1 * torch.randn_like(model.scale_shift_table))
    return model


def make_image(height, width, seed):
    """A smooth picture with edges (so resizing matters), uint8 RGB."""
    g = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.linspace(0, 1, height), torch.linspace(0, 1, width), indexing="ij")
    phase = torch.rand(3, generator=g) * 6
    img = torch.stack([0.5 + 0.5 * torch.sin(6 * x + 4 * y + p) for p in phase], -1)
    img[(x - 0.5) ** 2 + (y - 0.4) ** 2 < 0.05] = torch.rand(3, generator=g)
    img = img + 0.05 * torch.rand(img.shape, generator=g)
    return Image.fromarray((img.clamp(0, 1) * 255).round().to(torch.uint8).numpy(), "RGB")


CASES = {
    "wan21": dict(prompts=["a red circle moving from left to right", "two cats play with a ball"],
                  negative="low quality, blurry", guidance=5.0, guidance_2=None, steps=4, frames=9, size=(32, 48),
                  scheduler="unipc", experts=1, wan22=False, clip=True, last=False, image=(40, 56), seed=42),
    "flf2v": dict(prompts=["a blue square moving up"], negative="", guidance=1.0, guidance_2=None, steps=4, frames=9,
                  size=(32, 32), scheduler="euler", experts=1, wan22=False, clip=True, last=True, image=(48, 40),
                  seed=7),
    "two_experts": dict(prompts=["a green triangle moving down"], negative="static", guidance=4.0, guidance_2=3.0,
                        steps=4, frames=5, size=(32, 32), scheduler="unipc", experts=2, wan22=False, clip=False,
                        last=False, image=(30, 30), seed=3),
    "ti2v": dict(prompts=["a yellow shape grows"], negative="blurry", guidance=5.0, guidance_2=None, steps=4,
                 frames=5, size=(64, 64), scheduler="unipc", experts=1, wan22=True, clip=False, last=False,
                 image=(72, 60), seed=11),
}

for name, case in CASES.items():
    torch.manual_seed(sum(map(ord, name)) + 1000)
    target = os.path.join(out_dir, name)
    tokenizer = make_tokenizer(os.path.join(target, "spm"))
    encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), d_model=16, d_kv=8, d_ff=32, num_layers=2,
                                          num_heads=2, relative_attention_num_buckets=8,
                                          relative_attention_max_distance=16,
                                          feed_forward_proj="gated-gelu")).eval()
    perturb(encoder)
    vae = make_vae(case["wan22"])
    z = vae.config.z_dim
    image_encoder = image_processor = None
    pos_embed_seq_len = None
    if case["clip"]:
        # 32 x 32 pixels in 16 x 16 patches: 1 + 4 tokens per image.
        image_encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=CLIP_DIM, intermediate_size=32,
                                                         num_hidden_layers=3, num_attention_heads=2, image_size=32,
                                                         patch_size=16, hidden_act="gelu")).eval()
        perturb(image_encoder)
        image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        pos_embed_seq_len = 2 * 5 if case["last"] else None
    in_channels = z if case["wan22"] else 2 * z + 4
    image_dim = CLIP_DIM if case["clip"] else None
    transformer = make_transformer(z, in_channels, image_dim, pos_embed_seq_len)
    transformer_2 = make_transformer(z, in_channels, image_dim, pos_embed_seq_len) if case["experts"] == 2 else None
    if case["scheduler"] == "unipc":
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler(shift=5.0)
    pipe = WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, scheduler=scheduler,
                                   image_processor=image_processor, image_encoder=image_encoder,
                                   transformer=transformer, transformer_2=transformer_2,
                                   boundary_ratio=0.6 if case["experts"] == 2 else None,
                                   expand_timesteps=case["wan22"])
    shutil.rmtree(os.path.join(target, "pipeline"), ignore_errors=True)  # no file of an earlier run left in it
    pipe.save_pretrained(os.path.join(target, "pipeline"))
    # Kept exactly as diffusers wrote it: transformers 5 saves the umT5 tokenizer as tokenizer.json
    # alone, which mmtrain must load as it is (no spiece.model added).
    assert not os.path.exists(os.path.join(target, "pipeline", "tokenizer", "spiece.model"))
    AutoTokenizer.from_pretrained(os.path.join(target, "pipeline", "tokenizer"))  # loads as saved

    image = make_image(*case["image"], seed=len(name))
    image.save(os.path.join(target, "image.png"))
    image = Image.open(os.path.join(target, "image.png")).convert("RGB")  # as load_image gives it
    last = None
    if case["last"]:
        make_image(*case["image"], seed=100 + len(name)).save(os.path.join(target, "last.png"))
        last = Image.open(os.path.join(target, "last.png")).convert("RGB")

    height, width = case["size"]
    # diffusers' attention takes all but the last 512 context tokens as the image's, so image
    # conditioning is only right with the default 512 text tokens.
    max_len = 512
    batch = len(case["prompts"])
    args = dict(image=image, last_image=last, prompt=case["prompts"],
                negative_prompt=[case["negative"]] * batch, height=height, width=width,
                num_frames=case["frames"], num_inference_steps=case["steps"], guidance_scale=case["guidance"],
                guidance_scale_2=case["guidance_2"], max_sequence_length=max_len)
    with torch.no_grad():
        video = pipe(**args, generator=torch.Generator().manual_seed(case["seed"]), output_type="np").frames
        latents = pipe(**args, generator=torch.Generator().manual_seed(case["seed"]), output_type="latent").frames
        image_tensor = pipe.video_processor.preprocess(image, height=height, width=width).float()
        last_tensor = None if last is None else pipe.video_processor.preprocess(last, height=height, width=width)
        prepared = pipe.prepare_latents(image_tensor, batch, z, height, width, case["frames"], torch.float32,
                                        torch.device("cpu"), torch.Generator().manual_seed(case["seed"]), None,
                                        last_tensor)
        condition = prepared[1]
    tensors = {"video": torch.from_numpy(np.ascontiguousarray(video)).float(), "latents": latents.contiguous(),
               "image_tensor": image_tensor.contiguous(), "condition": condition.contiguous(),
               "settings": torch.tensor([case["frames"], height, width, case["steps"], case["seed"], max_len]),
               "guidance": torch.tensor([case["guidance"], case["guidance_2"] or 0.0], dtype=torch.float64)}
    if last_tensor is not None:
        tensors["last_tensor"] = last_tensor.float().contiguous()
    if image_encoder is not None:
        with torch.no_grad():
            tensors["image_embeds"] = pipe.encode_image(image if last is None else [image, last],
                                                        torch.device("cpu")).contiguous()
    save_file(tensors, os.path.join(target, "cases.safetensors"))
    with open(os.path.join(target, "prompts.json"), "w") as f:
        json.dump({"prompts": case["prompts"], "negative_prompt": case["negative"]}, f)
    print(name, "video", tuple(video.shape), "range", float(video.min()), float(video.max()),
          "condition", tuple(condition.shape))
print("ok")

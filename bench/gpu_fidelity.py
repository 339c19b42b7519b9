"""bf16 fidelity at real tensor shapes on the GPU, the reference side (`./mm gpu-check`,
tests/gpu/README.md): the real-shape Qwen2.5-VL (tests/reference/real_shape_qwen2_5_vl.py: the
published Qwen2.5-VL-3B tensor shapes, 4 decoder layers, 1.29B parameters; random weights saved in
bf16 as two shards) answering its 448x336 test photo (the default Qwen2-VL image processor) and a
fixed 48-token text. transformers' logits of every prompt position in fp32 and in bf16 (the model
loaded in that dtype, TF32 off), then `gpu_check SOURCE --bf16-fidelity DIR` writes mmtrain's, and
`compare` holds mmtrain's bf16 error against transformers' fp32 logits to transformers' own.
  gpu_fidelity.py make DIR [cuda|cpu]   the model directory, inputs.safetensors, transformers_{fp32,bf16}
  gpu_fidelity.py compare DIR           one JSON line; exit status 1 when mmtrain's bf16 error is larger"""
import json, os, sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))


def make(out, device_name):
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor

    import real_shape_qwen2_5_vl

    device = torch.device(device_name)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False  # the patch embedding is a Conv3d: fp32 must be fp32
    model_dir = os.path.join(out, "model")
    config = real_shape_qwen2_5_vl.config()  # Qwen2_5_VLConfig's own special token ids
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        torch.manual_seed(0)
        with device:  # initialised where it runs (1.29B parameters), saved in bf16
            model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
        model.save_pretrained(model_dir, max_shard_size="1500MB")
        del model
    pixels = Qwen2VLImageProcessor()(images=[real_shape_qwen2_5_vl.photo()], return_tensors="pt")
    grid = pixels["image_grid_thw"]
    merged = int(grid.prod()) // 4
    text = torch.randint(0, 150000, (48,), generator=torch.Generator().manual_seed(1))
    input_ids = torch.cat([torch.tensor([config.vision_start_token_id]), torch.full((merged,), config.image_token_id),
                           torch.tensor([config.vision_end_token_id]), text]).unsqueeze(0)
    inputs = {"input_ids": input_ids, "pixel_values": pixels["pixel_values"].contiguous(), "image_grid_thw": grid}
    save_file(inputs, os.path.join(out, "inputs.safetensors"))
    # transformers 5 lays out M-RoPE positions from the processor's token types (text 0, image 1):
    # without them it gives the image tokens text positions.
    inputs["mm_token_type_ids"] = (input_ids == config.image_token_id).int()
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        with torch.no_grad():
            logits = model(**{k: v.to(device) for k, v in inputs.items()}).logits[0].float().cpu()
        save_file({"logits": logits.contiguous()}, os.path.join(out, f"transformers_{name}.safetensors"))
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(json.dumps({"made": out, "device": device_name, "prompt_tokens": input_ids.shape[1]}))


def compare(out):
    logits = {name: load_file(os.path.join(out, name + ".safetensors"))["logits"]
              for name in ("mmtrain_fp32", "mmtrain_bf16", "transformers_fp32", "transformers_bf16")}
    reference = logits["transformers_fp32"]

    def error(x, y=reference):
        d = (x - y).abs()
        return {"max": d.max().item(), "mean": d.mean().item(),
                "top1_agree": (x.argmax(-1) == y.argmax(-1)).float().mean().item()}

    ours, theirs = error(logits["mmtrain_bf16"]), error(logits["transformers_bf16"])
    # Equal rounding would give equal errors; 10% on the mean error allows kernels that round
    # differently (attention backends), not an operation kept in bf16 that the reference keeps in fp32.
    ok = ours["mean"] <= 1.1 * theirs["mean"]
    print(json.dumps({"check": "bf16_fidelity.real_shape_qwen2_5_vl", "ok": ok,
                      "positions": reference.shape[0],
                      "fp32_mmtrain_vs_transformers": error(logits["mmtrain_fp32"]),
                      "bf16_error_mmtrain": ours, "bf16_error_transformers": theirs,
                      "bf16_mmtrain_vs_bf16_transformers": error(logits["mmtrain_bf16"], logits["transformers_bf16"])}))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "cuda")
    elif len(sys.argv) == 3 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2]))
    else:
        sys.exit(__doc__)

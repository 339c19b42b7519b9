"""Makes the tiny from-scratch model template examples/qwen2.5vl/tiny-shapes/ (every file there
except README.md): a Qwen2.5-VL config small enough to train on a few CPU cores in minutes, a
byte-level BPE tokenizer trained with `tokenizers` on the text of the synthetic shapes dataset
(`mmtrain data synth --kind shapes`) plus the Qwen2-VL special tokens, the official chat template,
image/video preprocessor configs that keep a 56x56 image at 56x56 (4x4 patches -> 4 merged
tokens), and a generation config. No weights: training initializes them.

Rerun (from the repository root) after changing anything here, and commit the output:
  ~/.cache/mmtrain/venv/bin/python tests/reference/make_tiny_shapes_model.py examples/qwen2.5vl/tiny-shapes
The output is deterministic: rerunning without changes leaves the files as they are.

The dataset's words are listed here as well as in src/mm/data/synth_shapes.cpp; the
test_synth_shapes test encodes a generated dataset with both tokenizers, so a word added on one
side only still tokenizes (as bytes) but is caught as unexpected splitting there.
"""
import json, os, sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

# ---- tokenizer --------------------------------------------------------------------------------
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange"]
KINDS = ["circle", "square", "triangle"]
POSITIONS = ["top left", "top right", "bottom left", "bottom right"]
QUESTIONS = ["What color is the shape?", "What shape is this?", "Where is the shape?", "Describe the image."]
# Text the chat template adds around every conversation.
TEMPLATE_TEXT = ["system\nYou are a helpful assistant.\n", "user\n", "assistant\n", "Picture 1: ", "Video 1: "]

corpus = QUESTIONS + COLOURS + KINDS + POSITIONS + TEMPLATE_TEXT
corpus += [f"a {c} {k} in the {p}" for c in COLOURS for k in KINDS for p in POSITIONS]
corpus = corpus * 4  # frequencies only order the merges; repetition keeps whole words winning

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]

tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
])
tok.decoder = decoders.ByteLevel()
# 256 byte symbols + merges until every word of the corpus is one token (training stops earlier
# when nothing is left to merge).
trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=2, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])

tok.save(os.path.join(out, "tokenizer.json"))
added_decoder = {}
for tid, t in sorted(tok.get_added_tokens_decoder().items()):
    added_decoder[str(tid)] = {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                               "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:  # as Qwen2.5-VL's own
    json.dump({
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added_decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                                      "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"],
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 2048, "pad_token": "<|endoftext|>", "processor_class": "Qwen2_5_VLProcessor",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }, f, indent=2, ensure_ascii=False)
    f.write("\n")
with open(os.path.join(out, "chat_template.jinja"), "w") as f:
    f.write(QWEN2_VL_CHAT_TEMPLATE)

# ---- processors ---------------------------------------------------------------------------------
# smart_resize keeps 56x56 (a multiple of patch 14 x merge 2) when min_pixels <= 56*56 <= max_pixels;
# larger images shrink to at most 112x112 pixels (16 merged tokens).
# Normalised with the shapes data's own per-channel mean and std (as CLIP's constants are its
# training images'), measured over `mmtrain data synth --kind shapes` images: a light background
# covers ~90% of every image. With CLIP's mean and std every background pixel sat at about +1.6
# after normalisation, so each patch vector was mostly one shared direction (norm ~55 of ~60); the
# patch embedding could amplify that direction until the vision features hardly differed between
# images (0.2% across-image variation at the merger's output in a stuck run), and the decoder,
# whose RMSNorm sees only directions, never found the image: runs stayed at the text-only answer
# prior. Centred inputs keep the image-dependent part of every patch in view.
SHAPES_MEAN = [0.8735, 0.8573, 0.8490]
SHAPES_STD = [0.1528, 0.1726, 0.2030]
for processor in (Qwen2VLImageProcessor, Qwen2VLVideoProcessor):
    processor(min_pixels=56 * 56, max_pixels=112 * 112, image_mean=SHAPES_MEAN, image_std=SHAPES_STD).save_pretrained(out)

# ---- model config --------------------------------------------------------------------------------
ids = tok.token_to_id
config = Qwen2_5_VLConfig(
    text_config=dict(
        vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="silu", rms_norm_eps=1e-6,
        max_position_embeddings=2048, max_window_layers=2, use_sliding_window=False,
        # As Qwen2.5-VL: M-RoPE over (temporal, height, width) with the rotary half of a head split
        # 1:1.5:1.5 (16/24/24 of 64 there, 4/6/6 of head_dim 32 / 2 here); the sections take the
        # frequencies in that order, so width gets the slowest ones. A 56x56 image is 2x2 tokens:
        # "where is the shape?" rests on height and width offsets of 0 or 1. The base sets how far
        # an offset of 1 turns them: with Qwen's 1e6 by under 0.03 rad (width: under 2e-4), with
        # 10 by 0.24-0.56 rad for height but only 0.12-0.24 rad for width, which left left/right at
        # chance for thousands of steps in some runs while top/bottom was learned. Base 2 turns
        # height by 0.68-0.84 rad and width by 0.52-0.65 rad: every seed tells the quadrants apart
        # within a few hundred steps. Text here is short (< 64 tokens) and of fixed form, so the
        # fast frequencies cost nothing.
        rope_parameters={"rope_type": "default", "rope_theta": 2.0, "mrope_section": [4, 6, 6]},
        bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
    vision_config=dict(
        depth=2, hidden_size=128, intermediate_size=256, num_heads=4, out_hidden_size=128, hidden_act="silu",
        in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
        # A window of 56 px (4x4 patches) is a whole 56x56 image; block 1 attends over all patches,
        # as every 8th block does in the real model.
        window_size=56, fullatt_block_indexes=[1], tokens_per_second=2),
    image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
    vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    # The top-level ids too: left out, transformers fills in Qwen's (151643), outside this vocabulary.
    bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
    tie_word_embeddings=False)
config.save_pretrained(out)

GenerationConfig(bos_token_id=ids("<|endoftext|>"), eos_token_id=[ids("<|im_end|>"), ids("<|endoftext|>")],
                 pad_token_id=ids("<|endoftext|>"), do_sample=False, max_new_tokens=32).save_pretrained(out)

print(f"tiny-shapes template: vocab {tok.get_vocab_size()}, files {sorted(os.listdir(out))}")

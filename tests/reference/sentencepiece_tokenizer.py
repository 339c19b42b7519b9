"""Oracle: a tiny umT5-like SentencePiece model and the ids transformers gives for it, plus the
output of diffusers' Wan prompt_clean on tricky strings.

The model is trained with the `sentencepiece` package like umT5's spiece.model: a Unigram model,
nmt_nfkc normalization, byte_fallback, T5's ids (pad=0, eos=1, unk=2, no bos), and character
coverage below 1 so that rare characters are unknown. It is turned into a diffusers-style
tokenizer directory by transformers itself (T5Tokenizer.from_pretrained on a directory holding
only spiece.model, then save_pretrained), and the reference ids come from AutoTokenizer on that
directory, as in diffusers' WanPipeline._get_t5_prompt_embeds.

Writes into <out>:
  tokenizer/      spiece.model, tokenizer.json, tokenizer_config.json (transformers' own files)
  spm_only/       spiece.model alone (T5Tokenizer's defaults: 100 sentinels)
  json_only/      tokenizer/ without spiece.model (tokenizer.json and tokenizer_config.json)
  resaved/        AutoTokenizer on json_only/, save_pretrained again (the round trip through transformers)
  bpe/spiece.model  a BPE model (refused: T5Tokenizer is Unigram)
  cases.json      {"cases": [{name, hex, ids, decoded_hex, decoded_skip_hex, spm_ids}],
                   "spm_only": [{hex, ids}], "batches": [{max_length, hex: [...], input_ids, attention_mask}],
                   "prompt_clean": [{hex, cleaned_hex}], "special": {...}, "vocab_size": N}
"""
import io, json, os, random, shutil, sys

import regex
import sentencepiece as spm
import transformers
from diffusers.pipelines.wan import pipeline_wan
from diffusers.utils import is_ftfy_available
from transformers import AutoTokenizer, T5Tokenizer

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1234)

WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
          "word but not what all were we when your can said there use an each which she do how their if will up "
          "other about out many then them these so some her would make like him into time has look two more write "
          "video camera slowly cat dog running beautiful sunset ocean waves city night lights walking street".split(),
    "fr": "café naïve résumé élève être très où garçon français déjà août forêt hôtel noël cœur".split(),
    "de": "Größe Straße Übung schön Mädchen Zürich für über Äpfel Öl müssen weiß".split(),
    "es": "niño año señor mañana canción corazón pingüino acción también".split(),
    "zh": "你好 世界 这是 一个 测试 中文 分词 模型 图像 视频 语言 训练 数据 我们 他们 今天 天气 很好 一只 猫 在 草地 上 奔跑".split(),
    "ja": "日本語 の テキスト です カタカナ ひらがな 東京 学校 先生 ありがとう".split(),
    "ko": "한국어 문장 입니다 안녕하세요 감사합니다 사랑 학교".split(),
    "ru": "привет мир это тест язык модель данные спасибо".split(),
    "ar": "مرحبا بالعالم هذا اختبار اللغة العربية كتاب مدرسة شكرا".split(),
}


def training_lines():
    lines = []
    for _ in range(3000):
        lang = rng.choice(list(WORDS))
        words = [rng.choice(WORDS[lang]) for _ in range(rng.randint(3, 12))]
        lines.append(("" if lang in ("zh", "ja") else " ").join(words) + rng.choice(["", ".", ",", "!", "?", "。"]))
    lines += ["Numbers 123 4567 and (brackets) [x] {y} <tag> a-b_c / \\ | @ # $ % ^ & * + = ~ ` ' \" ; :"] * 30
    return lines


def train(model_type, vocab_size):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()), model_writer=model, model_type=model_type, vocab_size=vocab_size,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, byte_fallback=True, character_coverage=0.995,
        hard_vocab_limit=False, num_threads=1, shuffle_input_sentence=False, minloglevel=2)
    return model.getvalue()


unigram = train("unigram", 600)
spm_only = os.path.join(out, "spm_only")
tok_dir = os.path.join(out, "tokenizer")
for d in (spm_only, tok_dir, os.path.join(out, "bpe")):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
for d in (spm_only, tok_dir):
    with open(os.path.join(d, "spiece.model"), "wb") as f:
        f.write(unigram)
with open(os.path.join(out, "bpe", "spiece.model"), "wb") as f:
    f.write(train("bpe", 900))

from_spm = T5Tokenizer.from_pretrained(spm_only)
from_spm.save_pretrained(tok_dir)  # tokenizer.json and tokenizer_config.json, written by transformers
tok = AutoTokenizer.from_pretrained(tok_dir)  # what WanPipeline loads
sp = spm.SentencePieceProcessor(model_proto=unigram)

# The reference must be sane (transformers 5 builds garbage from a bare vocab_file): the same
# vocabulary as the model, and the same ids as sentencepiece itself on plain text.
assert tok.convert_ids_to_tokens(list(range(sp.get_piece_size()))) == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
for text in ["a cat running on the grass", "你好世界", "café naïve résumé", "Größe Straße", "привет мир"]:
    assert tok(text)["input_ids"] == sp.encode(text) + [1], text
assert (tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (1, 0, 2)
assert not is_ftfy_available(), "diffusers would run ftfy, which the C++ prompt cleaning does not"

POOL = list("abcxyz ÀéèñüçØ你好世界日本語カタカナ한국어привет \t\n\r\x0b\x0c\x1c\x85\u3000\u00a0ﬁ①ｶﾞ\u0301\u0308\u3099"
            "😀👍🏽👨‍👩‍👧<>/s_▁ǅ\u200b\u200d\ufeff\x00\x01.,!?-'\"&#;") + [
    "</s>", "<pad>", "<unk>", "<0x41>", "<extra_id_0>", "<extra_id_99>", "<extra_id_100>", " the", " video"]

CASES = [
    ("ascii", "A cat walking on the street at night, beautiful city lights."),
    ("cjk", "一只猫在草地上奔跑。你好世界，这是一个测试"),
    ("japanese_korean", "東京の学校 안녕하세요 감사합니다"),
    ("accents", "café naïve résumé élève Größe Straße niño señor"),
    ("decomposed_accents", "cafe\u0301 nai\u0308ve"),
    ("emoji", "a dog 😀 running 👍🏽 family 👨‍👩‍👧‍👦"),
    ("unknown", "Ωmega ψ ØÀÀ xyz qQ"),
    ("nfkc", "ﬁle ① ｶﾀｶﾅ ｶﾞ Ａ\u0301 ﬁ\u0301 ²"),
    ("spaces", "  leading and trailing  and  multiple   spaces  "),
    ("newlines_tabs", "line one\nline two\r\n\tindented\ttab\x0bvt\x0cff\x85nel"),
    ("unicode_spaces", "a\u3000b\u00a0c\u1680d\u2028e\u2029f\u202fg\u205fh\u2009i\u200bj\ufeffk"),
    ("empty", ""),
    ("only_spaces", " \t\n "),
    ("eos_literal", "a photo</s>of a cat </s> </s>"),
    ("special_literals", "<pad><unk> x <extra_id_0>y<extra_id_99> <extra_id_100>"),
    ("byte_piece_text", "<0x41> <0xFF>x"),
    ("metaspace_literal", "▁a b▁c ▁▁d"),
    ("controls", "a\x00b\x01c\u200dd"),
    ("arabic_russian", "مرحبا بالعالم привет мир"),
    ("punctuation", "Numbers 123 4567 and (brackets) [x] {y} <tag> a-b_c / \\ | @ # $ % ^ & * + = ~"),
    ("long", " ".join(rng.choice(WORDS["en"] + WORDS["zh"] + WORDS["fr"]) for _ in range(700))),
]
for i in range(200):
    CASES.append((f"random{i}", "".join(rng.choice(POOL) for _ in range(rng.randint(0, 16)))))
# Code points from scripts with combining marks, conjoining jamo, compatibility forms, emoji
# modifiers and flags: the precompiled normalizer's grapheme-cluster rule at work.
RANGES = [(0x20, 0x250), (0x300, 0x370), (0x900, 0x9FF), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
          (0xAC00, 0xAC40), (0xFF00, 0xFFEF), (0x1F1E6, 0x1F1FF), (0x1F300, 0x1F6FF), (0xFE00, 0xFE0F),
          (0x2000, 0x206F), (0x3200, 0x33FF), (0x1D400, 0x1D7FF), (0xF900, 0xFAFF), (0x2460, 0x24FF)]


def unicode_char():
    lo, hi = rng.choice(RANGES)
    return chr(rng.randint(lo, hi))


for i in range(300):
    CASES.append((f"unicode{i}", "".join(unicode_char() if rng.random() < 0.7 else rng.choice(POOL)
                                         for _ in range(rng.randint(1, 24)))))


def hexs(s):
    return s.encode("utf-8").hex()


cases = []
for name, text in CASES:
    ids = tok(text)["input_ids"]
    cases.append({"name": name, "hex": hexs(text), "ids": ids, "spm_ids": sp.encode(text),
                  "decoded_hex": hexs(tok.decode(ids)), "decoded_skip_hex": hexs(tok.decode(ids, skip_special_tokens=True))})

spm_only_cases = [{"hex": hexs(t), "ids": from_spm(t)["input_ids"]} for _, t in CASES[:21]]

# WanPipeline's call: padding="max_length", truncation=True, add_special_tokens=True.
batches = []
for max_length, texts in [(512, [CASES[0][1], CASES[20][1], "", CASES[13][1]]),
                          (8, [CASES[0][1], "a cat", "", "</s></s></s></s></s></s></s></s></s>"]),
                          (2, ["hello world", ""])]:
    enc = tok(texts, padding="max_length", max_length=max_length, truncation=True, add_special_tokens=True,
              return_attention_mask=True)
    batches.append({"max_length": max_length, "hex": [hexs(t) for t in texts], "input_ids": enc["input_ids"],
                    "attention_mask": enc["attention_mask"]})

CLEAN = [
    "  A  cat\t\tsits\n\non a mat.  ",
    "Tom &amp; Jerry &lt;3 &gt; &quot;quoted&quot; &#39;apos&#39; &apos;",
    "double &amp;amp; escaped &amp;lt;b&amp;gt; &amp;#x41;",
    "numeric &#65;&#x42;&#X43; &#128512; &#x1F600 &#0; &#13; &#128; &#x9F; &#150; &#x81;",
    "invalid &#xD800; &#x110000; &#99999999999999999999; &#1; &#x0B; &#xFDD0; &#x1FFFF; &#127;",
    "no semicolon &amp &lt &gtx &copy2024 &notit; &notin; &ampamp; &nbsp&nbsp;",
    "unknown &foo; &foo &; & &# &#x &#xZ; &#; && &&amp;",
    "long name &aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; &CounterClockwiseContourIntegral;",
    "name stops &amp\tx &lt<b &gt#1 &quot&quot; &\x0bamp; &am\rp;",
    "unicode in names &é; &ampé &notéx",
    "entities that make spaces: a&nbsp;b&#x3000;c&Tab;d&NewLine;e&#x85;f &#x2028;",
    "\x1c\x1d separators are stripped at the ends, kept inside \x1e \x1f\x1c x\x1c\x1d",
    "python spaces\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000end",
    "not spaces\u200b\u180e\ufeff\u2060end",
    "\u3000\u3000ideographic\u3000\u3000",
    "",
    "   ",
    "&amp;nbsp; leading and trailing &amp;nbsp;",
    "emoji 👍🏽 and CJK 你好 &hearts; &#x2764;&#xFE0F;",
    "A cat&#x20;&#x20;walks&#x0A;&#x0A;on &Tab;&Tab; grass",
]
CLEAN_POOL = ["&", "&amp", "&amp;", "&#", "&#x", "&#X", ";", "1", "9", "0", "3", "a", "F", "d", "not", "notin", "nbsp",
              "lt", "gt", "quot", "hearts", "copy", "Tab", "NewLine", " ", "  ", "\t", "\n", "\r", "\x0b", "\x0c",
              "\x1c", "\x85", "\u3000", "\u00a0", "\u200b", "é", "你", "😀", "<", "#", "x", "&lt;", "&#38;", "&#x26;"]
for _ in range(300):
    CLEAN.append("".join(rng.choice(CLEAN_POOL) for _ in range(rng.randint(1, 20))))
clean = [{"hex": hexs(t), "cleaned_hex": hexs(pipeline_wan.prompt_clean(t))} for t in CLEAN]
# Every character Python's str.isspace() accepts, each between two letters (diffusers collapses
# them with the `regex` module, whose \s is narrower than str.strip()'s white space).
assert pipeline_wan.re is regex
spaces = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
clean.append({"hex": hexs("x" + "y".join(spaces) + "z"),
              "cleaned_hex": hexs(pipeline_wan.prompt_clean("x" + "y".join(spaces) + "z"))})

# A directory with tokenizer.json and no spiece.model, and its save_pretrained round trip: transformers
# gives every case the same ids from them, so the C++ side must too.
json_only = os.path.join(out, "json_only")
resaved = os.path.join(out, "resaved")
for d in (json_only, resaved):
    shutil.rmtree(d, ignore_errors=True)
os.makedirs(json_only)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tok_dir, name), json_only)
from_json = AutoTokenizer.from_pretrained(json_only)
from_json.save_pretrained(resaved)
from_resaved = AutoTokenizer.from_pretrained(resaved)
assert not os.path.exists(os.path.join(resaved, "spiece.model")), "save_pretrained wrote a spiece.model"
for c, (_, text) in zip(cases, CASES):
    assert from_json(text)["input_ids"] == c["ids"] == from_resaved(text)["input_ids"], c["name"]

disagree = sum(1 for c in cases if c["ids"][:-1] != c["spm_ids"])
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"cases": cases, "spm_only": spm_only_cases, "batches": batches, "prompt_clean": clean,
               "python_spaces": [ord(c) for c in spaces],
               "regex_spaces": [c for c in range(0x110000) if regex.match(r"\s", chr(c))],
               "special": {"eos": tok.eos_token_id, "pad": tok.pad_token_id, "unk": tok.unk_token_id},
               "vocab_size": len(tok), "spm_piece_size": sp.get_piece_size(),
               "transformers": transformers.__version__}, f)
print(f"{len(cases)} cases ({disagree} where transformers and sentencepiece disagree), {len(spm_only_cases)} "
      f"spm-only cases, {len(batches)} batches, {len(clean)} prompt_clean cases -> {out}")

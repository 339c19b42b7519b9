"""Oracle: a small byte-level BPE tokenizer trained with the reference `tokenizers` library and
configured exactly like Qwen2's tokenizer.json (NFC, Split(Qwen2 regex, isolated) + ByteLevel
without regex, ByteLevel decoder, Qwen's special tokens appended after the vocabulary), plus a
test corpus and the reference ids / decodes of every line.

Contract for bytes that are not valid UTF-8: a line is decoded like Python's
`bytes.decode("utf-8", errors="replace")` (each maximal invalid subpart becomes U+FFFD) and that
string is encoded; the C++ tokenizer takes bytes and does the same.

Writes into <out>:
  tokenizer.json, tokenizer_config.json      the tokenizer directory (Qwen2 layout)
  cases.json     {"cases": [{name, hex, valid_utf8, nfc_hex, ids, tokens, decoded_hex,
                  decoded_skip_hex, roundtrip}], "special": {...}, "vocab_size": N}
  variants/<name>/tokenizer.json + ids.json  the same vocabulary under other supported settings
"""
import copy, json, os, random, sys, unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1234)

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they at be this have from "
          "or one had by word but not what all were we when your can said there use an each which she "
          "do how their if will up other about out many then them these so some her would make like him "
          "into time has look two more write go see number no way could people my than first water been "
          "call who oil its now find long down day did get come made may part tokenizer training model "
          "vision language image video assistant helpful question answer".split(),
    "fr": "café naïve résumé élève être très où garçon français déjà août forêt hôtel noël cœur".split(),
    "de": "Größe Straße Übung schön Mädchen Zürich für über Äpfel Öl müssen weiß".split(),
    "es": "niño año señor mañana canción corazón pingüino acción también".split(),
    "zh": "你好 世界 这是 一个 测试 中文 分词 模型 图像 视频 语言 训练 数据 我们 他们 今天 天气 很好".split(),
    "ja": "日本語 の テキスト です カタカナ ひらがな 東京 学校 先生 ありがとう".split(),
    "ko": "한국어 문장 입니다 안녕하세요 감사합니다 사랑 학교".split(),
    "ar": "مرحبا بالعالم هذا اختبار اللغة العربية كتاب مدرسة شكرا".split(),
    "hi": "नमस्ते दुनिया यह एक परीक्षण है भाषा हिन्दी किताब धन्यवाद".split(),
    "th": "สวัสดี ชาวโลก นี่คือ การทดสอบ ภาษาไทย ขอบคุณ".split(),
    "ru": "привет мир это тест язык модель данные спасибо".split(),
    "el": "γειά σου κόσμε αυτό είναι δοκιμή".split(),
    "emoji": "😀 😃 👍 👍🏽 👋🏿 ❤️ 🎉 🚀 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷".split(),
}
CODE = [
    "def train(model, data):\n    for step, batch in enumerate(data):\n        loss = model(batch)\n"
    "        loss.backward()\n    return loss\n",
    "class Config:\n\tdef __init__(self):\n\t\tself.lr = 1e-4\n\t\tself.steps = 1000\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto x : v) {\n"
    "    if (x % 2 == 0) return x;\n  }\n  return 0;\n}\n",
    "if __name__ == \"__main__\":\n    print(f\"{x:>10} -> {y!r}\")  # comment\n",
]


def sentence(lang):
    words = [rng.choice(WORDS[lang]) for _ in range(rng.randint(3, 12))]
    sep = "" if lang in ("zh", "ja") else " "
    text = sep.join(words)
    if rng.random() < 0.3:
        text += rng.choice([".", "!", "?", ",", "。", "؟", "।"])
    if rng.random() < 0.2:
        text += " " + str(rng.randint(0, 10 ** rng.randint(1, 8)))
    return text


def training_corpus():
    lines = []
    for _ in range(4000):
        lang = rng.choice(list(WORDS))
        lines.append(sentence(lang))
    lines += CODE * 20
    lines += ["I'M HERE. YOU'LL SEE. It's what we've said, they're sure he'd go.\r\n"] * 20
    return lines


# Special tokens exactly as Qwen2.5-VL lists them (appended after the vocabulary), plus
# non-special added tokens that exercise each matching flag.
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
ADDED = [
    AddedToken("<tool_call>", special=False, normalized=False),
    AddedToken("</tool_call>", special=False, normalized=False),
    AddedToken("café", special=False, normalized=True),        # matched after NFC
    AddedToken("[MASK]", special=True, normalized=False, lstrip=True, rstrip=True),
    AddedToken("xyzzy", special=False, normalized=False, single_word=True),
]

tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=1, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(training_corpus(), trainer)
tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
tok.add_tokens(ADDED)
tok.save(os.path.join(out, "tokenizer.json"))

added_decoder = {}
for tid, t in sorted(tok.get_added_tokens_decoder().items()):
    added_decoder[str(tid)] = {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                               "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
config = {
    "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added_decoder,
    "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"],
    "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
    "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
    "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
}
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2, ensure_ascii=False)


# ---- the test corpus: (name, bytes) ----
def u(s):
    return s.encode("utf-8")


cases = [
    ("empty", b""),
    ("latin_composed", u("Café naïve résumé Ångström Zürich crème brûlée déjà vu")),
    ("latin_decomposed", u("Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m Zu\u0308rich")),
    ("nfc_singletons", u("\u212b \u2126 e\u0301\u0301 \u1e9b\u0323 \u1100\u1161\u11a8 \u0041\u030a\u0301")),
    ("cjk", u("你好，世界！这是一个测试。日本語のテキストです。カタカナ、ひらがな。한국어 문장입니다.")),
    ("arabic", u("مرحبا بالعالم، هذا اختبار. اَلْعَرَبِيَّةُ ١٢٣٤")),
    ("devanagari", u("नमस्ते दुनिया, यह एक परीक्षण है। हिन्दी भाषा १२३")),
    ("thai", u("สวัสดีชาวโลก นี่คือการทดสอบ ภาษาไทย ๑๒๓")),
    ("emoji", u("👋🏽 hello 👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 😀😃 ❤️ 👍🏿 🇯🇵🇫🇷 #️⃣")),
    ("python", u(CODE[0] + CODE[3])),
    ("python_tabs", u(CODE[1])),
    ("cpp", u(CODE[2])),
    ("whitespace_runs", u("a    b\t\t c  \n\n  d   \t")),
    ("trailing_spaces", u("line with trailing spaces   ")),
    ("leading_spaces", u("     leading")),
    ("only_spaces", u("        ")),
    ("crlf", u("line1\r\nline2\r\n\r\nline3\r\n  \r\n\tend\r")),
    ("newlines", u("\n\n\nx\n \n")),
    ("digits", u("1234567890 3.14159 1,000,000 0x1F ٣٤٥ १२३ ①②③ ½ 2024-01-31")),
    ("contractions_upper", u("I'M HERE, YOU'LL SEE. IT'S HE'D WE'VE THEY'RE DON'T 'S 'LL 'Re")),
    ("contractions_lower", u("it's you'll he'd we've they're don't i'm 'll's")),
    ("contractions_odd", u("'ſ ’s x's's ''s '")),
    ("special_chatml", u("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                         "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")),
    ("special_inline", u("text<|endoftext|>more <|endoftext|> spaced  <|im_end|>  x")),
    ("special_vision", u(" <|vision_start|><|image_pad|><|vision_end|> describe<|vision_start|><|video_pad|><|vision_end|>")),
    ("special_partial", u("<|im_start <|im_end|x <<|im_end|>> |im_end|> <|IM_END|>")),
    ("added_tool_call", u("<tool_call>{\"name\": \"f\"}</tool_call> <tool_call >")),
    ("added_normalized", u("cafe\u0301 café CAFÉ caféine")),
    ("added_strip", u("word [MASK] word\t[MASK]\n  [MASK][MASK]  end")),
    ("added_single_word", u("xyzzy xyzzyx axyzzy (xyzzy) _xyzzy xyzzy_ é xyzzy 1xyzzy xyzzy")),
    ("unicode_spaces", u("a\u00a0b \u2028c \u3000d \u180ee \u200bf \u0085g \x0bh \x0ci \x1cj \ufeffk")),
    ("unicode_space_runs", u(" \u180eb \u2003\u2003x\u00a0\u00a0 \u3000\n")),
    # U+180E is not White_Space (Oniguruma's \s) but PCRE2's \s takes it: space runs around it.
    ("mongolian_vowel_separator", u("a  \u180e  b\n  \u180e  ")),
    ("control_chars", u("\x00\x01\x07 bell\x7f del")),
    ("long_word", u("a" * 500 + " " + "Zürich" * 50)),
    ("long_digits", u("9" * 300)),
    ("long_spaces", u(" " * 3000 + "x" + "\n" * 300)),
    ("invalid_ff", b"abc\xff\xfedef"),
    ("invalid_lone_cont", b"\x80\x80 x \xbf"),
    ("invalid_bad_cont", b"\xc3\x28 \xe2\x82 \xe2\x82\xac\xe2"),
    ("invalid_truncated_4", b"smile \xf0\x9f\x98"),
    ("invalid_surrogate", b"\xed\xa0\x80\xed\xbf\xbf ok"),
    ("invalid_overlong", b"\xc0\x80 \xc1\xbf \xe0\x80\x80 \xf0\x80\x80\x80"),
    ("invalid_too_big", b"\xf4\x90\x80\x80 \xf5\x80 \xf8\x88\x80\x80\x80"),
    ("invalid_end", b"x\xe4\xb8"),
    ("invalid_mixed_special", b"\xff<|im_end|>\xfe"),
    ("unreachable_words", u("Hello Qwertyuiop xyzw Qwertyuiops")),  # see the ignore_merges variant
]

# Random lines: sentences across languages, and raw code points from a spread of scripts,
# symbols, combining marks and spaces (assigned in Unicode 14, so both regex engines agree).
RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x591, 0x5f4),
          (0x600, 0x6ff), (0x900, 0x97f), (0xe01, 0xe5b), (0x1100, 0x11ff), (0x1e00, 0x1eff),
          (0x2000, 0x206f), (0x20a0, 0x20bf), (0x2100, 0x214f), (0x2190, 0x22ff), (0x2460, 0x24ff),
          (0x3000, 0x303f), (0x3040, 0x30ff), (0x4e00, 0x9fa5), (0xac00, 0xd7a3), (0xff01, 0xff60),
          (0x1f300, 0x1f5ff), (0x1f600, 0x1f64f), (0x1f900, 0x1f9ff), (0x1d400, 0x1d4ff)]
for i in range(120):
    parts = [sentence(rng.choice(list(WORDS))) for _ in range(rng.randint(1, 4))]
    cases.append((f"random_sentences_{i}", u(rng.choice(["\n", " ", "  ", "\r\n", "\t"]).join(parts))))
for i in range(80):
    chars = []
    for _ in range(rng.randint(5, 60)):
        lo, hi = rng.choice(RANGES)
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) in ("Cn", "Cs", "Co"):
            continue
        chars.append(c)
    cases.append((f"random_codepoints_{i}", u("".join(chars))))

special = {
    "eos_token": config["eos_token"], "eos_token_id": tok.token_to_id(config["eos_token"]),
    "pad_token": config["pad_token"], "pad_token_id": tok.token_to_id(config["pad_token"]),
    "im_start_id": tok.token_to_id("<|im_start|>"), "image_pad_id": tok.token_to_id("<|image_pad|>"),
}

# transformers' loading of the same directory (as training code would use it) must agree.
from transformers import AutoTokenizer  # noqa: E402

hf = AutoTokenizer.from_pretrained(out)
assert hf.eos_token == special["eos_token"] and hf.eos_token_id == special["eos_token_id"], hf.eos_token
assert hf.pad_token == special["pad_token"] and hf.pad_token_id == special["pad_token_id"], hf.pad_token
special["transformers_len"] = len(hf)

records = []
for name, raw in cases:
    text = raw.decode("utf-8", errors="replace")
    enc = tok.encode(text, add_special_tokens=False)
    hf_ids = hf(text, add_special_tokens=False)["input_ids"]
    assert hf_ids == enc.ids, f"{name}: transformers and tokenizers disagree"
    decoded = tok.decode(enc.ids, skip_special_tokens=False)
    valid = True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        valid = False
    nfc = unicodedata.normalize("NFC", text)
    records.append({
        "name": name, "hex": raw.hex(), "valid_utf8": valid, "nfc_hex": u(nfc).hex(),
        "ids": enc.ids, "tokens": enc.tokens, "decoded_hex": u(decoded).hex(),
        "decoded_skip_hex": u(tok.decode(enc.ids, skip_special_tokens=True)).hex(),
        "roundtrip": decoded == nfc,
    })
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"cases": records, "special": special, "vocab_size": tok.get_vocab_size(with_added_tokens=True)},
              f, ensure_ascii=False)


# ---- variants: the same vocabulary with other settings our tokenizer supports ----
def variant(name, edit):
    spec = json.loads(tok.to_str())
    edit(spec)
    vtok = Tokenizer.from_str(json.dumps(spec))
    vdir = os.path.join(out, "variants", name)
    os.makedirs(vdir, exist_ok=True)
    vtok.save(os.path.join(vdir, "tokenizer.json"))
    ids = [vtok.encode(raw.decode("utf-8", errors="replace")).ids for _, raw in cases]
    with open(os.path.join(vdir, "ids.json"), "w") as f:
        json.dump(ids, f)


def gpt2_style(spec):
    # GPT-2 layout: no normalizer, ByteLevel pre-tokenizer with its own regex and a prefix space.
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def ignore_merges(spec):
    # A whole-word vocabulary entry that the merges cannot build: only ignore_merges finds it.
    model = spec["model"]
    model["ignore_merges"] = True
    next_id = max(max(model["vocab"].values()), max(t["id"] for t in spec["added_tokens"])) + 1
    model["vocab"]["ĠQwertyuiop"] = next_id
    model["vocab"]["xyzw"] = next_id + 1


def nfkc_legacy_merges(spec):
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}
    spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]


def template_processing(spec):
    # A BOS/EOS-style post-processor (transformers 5 writes one, usually adding nothing).
    bos, eos = "<|endoftext|>", "<|im_end|>"
    ids = {t["content"]: t["id"] for t in spec["added_tokens"]}
    spec["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": eos, "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [ids[bos]], "tokens": [bos]},
                            eos: {"id": eos, "ids": [ids[eos]], "tokens": [eos]}}}]}


variant("gpt2_style", gpt2_style)
variant("template_processing", template_processing)
variant("ignore_merges", ignore_merges)
variant("nfkc_legacy_merges", nfkc_legacy_merges)

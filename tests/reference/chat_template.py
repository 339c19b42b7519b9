"""Oracle: conversations rendered by transformers' apply_chat_template (tokenize=False) with the
official Qwen2-VL / Qwen2.5-VL chat template (qwen2_vl_chat_template.py), and with a fine-tuned
model's own template (the same with another default system prompt), as a model directory ships it.

Writes <out>/conversations.json: [{"name", "messages", "add_generation_prompt", "add_vision_id",
"expected"}], <out>/qwen2_vl_chat_template.jinja (the template text), and
<out>/custom_template.json: {"template", "cases": [{"name", "messages", "add_generation_prompt",
"expected"}]}.
"""
import json, os, sys

from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

# Rendering needs no vocabulary: any tokenizer object carries the template.
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
    chat_template=QWEN2_VL_CHAT_TEMPLATE)

img = lambda src: {"type": "image", "image": src}
vid = lambda src: {"type": "video", "video": src}
txt = lambda t: {"type": "text", "text": t}

conversations = {
    "text_string": [{"role": "user", "content": "Hello, who are you?"}],
    "system_user_assistant": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "single_image": [{"role": "user", "content": [img("file:///data/cat.jpg"), txt("Describe this image.")]}],
    "images_and_videos": [
        {"role": "system", "content": [txt("You look at pictures.")]},
        {"role": "user", "content": [img("a.png"), img("b.png"), txt("Compare these, then watch:"), vid("clip.mp4")]},
        {"role": "assistant", "content": [txt("The first is red; the video shows a dog.")]},
        {"role": "user", "content": [vid("second.mp4"), txt("And now?"), img("c.png")]},
    ],
    "openai_image_url": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/x.jpg"}},
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
    ]}],
    "url_and_path_keys": [{"role": "user", "content": [
        {"type": "image", "url": "http://h/i.jpg"}, {"type": "video", "path": "/v/1.mp4"},
        {"image": "untyped.jpg"}, {"video": "untyped.mp4"}, {"type": "text", "text": "untyped parts"}]}],
    "assistant_first": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}],
    "system_in_middle": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Now be formal."},
        {"role": "user", "content": [txt("Good day.")]},
    ],
    "unicode_and_newlines": [{"role": "user", "content": [
        txt("Café 你好 👋🏽\nline two\r\n\ttabbed  "), txt("<|im_end|> literal"), txt("")]}],
    "empty_contents": [{"role": "user", "content": []}, {"role": "assistant", "content": ""}],
    "tool_role": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "<tool_call>{\"name\": \"w\"}</tool_call>"},
        {"role": "tool", "content": "{\"t\": 21}"},
    ],
}

records = []
for name, messages in conversations.items():
    for add_generation_prompt in (False, True):
        for add_vision_id in (False, True):
            expected = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                add_vision_id=add_vision_id)
            records.append({"name": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
                            "add_vision_id": add_vision_id, "expected": expected})
with open(os.path.join(out, "conversations.json"), "w") as f:
    json.dump(records, f, ensure_ascii=False, indent=1)
with open(os.path.join(out, "qwen2_vl_chat_template.jinja"), "w") as f:
    f.write(QWEN2_VL_CHAT_TEMPLATE)

# A fine-tuned model's template: another default system prompt (what a new user met rendered with
# the built-in template, silently).
CUSTOM_TEMPLATE = QWEN2_VL_CHAT_TEMPLATE.replace("You are a helpful assistant.", "You are a careful radiologist.")
assert CUSTOM_TEMPLATE != QWEN2_VL_CHAT_TEMPLATE
custom = PreTrainedTokenizerFast(
    tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), chat_template=CUSTOM_TEMPLATE)
custom_cases = []
for name, messages in conversations.items():
    for add_generation_prompt in (False, True):
        custom_cases.append({"name": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
                             "expected": custom.apply_chat_template(messages, tokenize=False,
                                                                    add_generation_prompt=add_generation_prompt)})
with open(os.path.join(out, "custom_template.json"), "w") as f:
    json.dump({"template": CUSTOM_TEMPLATE, "cases": custom_cases}, f, ensure_ascii=False, indent=1)

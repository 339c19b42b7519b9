"""Oracle: chat templates rendered by transformers' apply_chat_template (tokenize=False), for the
C++ Jinja interpreter (src/mm/tokenizer/jinja_template.h) to match byte for byte.

Published templates, each with many conversations (text, images, videos, tools, tool calls and
responses, reasoning, add_generation_prompt and enable_thinking both ways), plus small templates
exercising the language's pieces one by one (filters, tests, loops, macros, slicing, Python-style
printing of values, whitespace control) against jinja2 itself.

Writes <out>/cases.json: {"templates": {name: text}, "cases": [{"template", "name", "context",
"expected"}]}, where context is exactly the variables the template sees (messages, tools,
documents, add_generation_prompt, the extra keyword arguments and the tokenizer's special tokens).
"""
import hashlib, json, os, sys

from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE
from qwen3_vl_chat_template import QWEN3_VL_INSTRUCT_TEMPLATE, QWEN3_VL_THINKING_TEMPLATE
from qwen3_5_chat_template import QWEN3_5_TEMPLATE

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

# Qwen/Qwen3-0.6B's chat template (the Qwen3 dense and MoE text models share it), as vendored in
# llama.cpp's models/templates/Qwen-Qwen3-0.6B.jinja (copy read from the ye-NX/llama.cpp fork;
# that file has CRLF line ends, which Jinja normalises, so the text here has LF).
QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""
# A Qwen3.8 chat_template.jinja (macros, `is iterable and is not mapping`, |items, loop.previtem
# and nextitem, raise_exception, reasoning_effort), as quoted in full in a design document in the
# public code index ("Qwen3.8 official chat_template.jinja at a fixed commit"), which pins its
# SHA-256, checked here. The file has no final newline.
QWEN3_8_TEMPLATE = r"""{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count, is_system_content=false) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain images.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set image_count.value = image_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Picture ' ~ image_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain videos.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set video_count.value = video_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Video ' ~ video_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is none or content is undefined %}
        {{- '' }}
    {%- else %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}
    {{- raise_exception('No messages provided.') }}
{%- endif %}
{%- set reasoning_instructions = '' %}
{%- if enable_thinking is undefined or enable_thinking is true %}
    {%- set resolved_reasoning_effort = reasoning_effort|default('xhigh') %}
    {%- if resolved_reasoning_effort not in ('xhigh', 'medium', 'low') %}
        {{- raise_exception('Unexpected reasoning effort ' ~ reasoning_effort ~ '. Supported types are xhigh (default), medium, and low.') }}
    {%- endif %}
    {%- if resolved_reasoning_effort == 'xhigh' %}
        {%- set reasoning_instructions = 'Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final answer.' %}
    {%- elif resolved_reasoning_effort == 'low' %}
        {%- set reasoning_instructions = 'Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to the conclusion without unnecessary elaboration.' %}
    {%- endif %}
{%- endif %}
{%- if tools and tools is iterable and tools is not mapping %}
    {{- '<|im_start|>system\n' }}
    {%- if reasoning_instructions %}
        {{- reasoning_instructions + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>' }}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {%- if content %}
            {{- '\n\n' + content }}
        {%- endif %}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {%- if content %}
            {{- '<|im_start|>system\n' + (reasoning_instructions + '\n\n' if reasoning_instructions else '')  + content + '<|im_end|>\n' }}
        {%- elif reasoning_instructions %}
            {{- '<|im_start|>system\n' + reasoning_instructions + '<|im_end|>\n' }}
        {%- endif %}
    {%- elif reasoning_instructions %}
        {{- '<|im_start|>system\n' + reasoning_instructions + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false)|trim %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}
    {{- raise_exception('No user query found in messages.') }}
{%- endif %}
{%- for message in messages %}
    {%- set content = render_content(message.content, true)|trim %}
    {%- if message.role == "system" %}
        {%- if not loop.first %}
            {{- raise_exception('System message must be at the beginning.') }}
        {%- endif %}
    {%- elif message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- endif %}
        {%- set reasoning_content = reasoning_content|trim %}
        {%- if preserve_thinking is undefined or preserve_thinking is true or loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function is defined %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {%- if loop.first %}
                    {%- if content|trim %}
                        {{- '\n\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- else %}
                        {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- endif %}
                {%- else %}
                    {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- endif %}
                {%- if tool_call.arguments is defined and tool_call.arguments != '' %}
                    {%- for args_name, args_value in tool_call.arguments|items %}
                        {{- '<parameter=' + args_name + '>\n' }}
                        {%- set args_value = args_value | string if args_value is string else args_value | tojson | safe %}
                        {{- args_value }}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- elif loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role.') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}"""
assert hashlib.sha256(QWEN3_8_TEMPLATE.encode()).hexdigest() == (
    "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041")

# Qwen3.5's chat_template.jinja: tests/reference/qwen3_5_chat_template.py (shared with the pipeline oracle).

def make_tokenizer(template):
    # Rendering needs no vocabulary: any tokenizer object carries the template.
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), chat_template=template)


templates = {}
cases = []


def add_case(template_name, case_name, messages, tools=None, add_generation_prompt=False, **kwargs):
    tokenizer = make_tokenizer(templates[template_name])
    expected = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt, **kwargs)
    # The variables render_jinja_template hands the template (transformers' apply_chat_template).
    context = {**tokenizer.special_tokens_map, **kwargs, "messages": messages, "tools": tools, "documents": None,
               "add_generation_prompt": add_generation_prompt}
    cases.append({"template": template_name, "name": case_name, "context": context, "expected": expected})


img = lambda src: {"type": "image", "image": src}
vid = lambda src: {"type": "video", "video": src}
txt = lambda t: {"type": "text", "text": t}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city — 天气, \"quoted\", back\\slash\nnewline",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds numbers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number", "default": 1.5, "minimum": -0.0001, "maximum": 1e-05},
            "b": {"type": "integer", "default": 12345678901234, "nullable": None, "flag": True, "off": False},
            "c": {"type": "array", "items": {}, "examples": [[], {}, [1, 2.0, "x"]]}}}}},
]
WEATHER_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
ADD_CALL_STR = {"type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}
BARE_CALL = {"name": "add", "arguments": {"a": 0.1, "b": [1, {"k": None}]}}

# Conversations whose contents are strings: every Qwen template reads these.
TEXT_CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello, who are you?"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    "multi_turn": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}],
    "assistant_last": [{"role": "user", "content": "Say yes"}, {"role": "assistant", "content": "yes"}],
    "think_in_content": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nfirst I think\n</think>\n\nanswer one"},
        {"role": "user", "content": "q2"}],
    "think_in_last_content": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nreasoning here\n\n</think>\n\n\nfinal answer"}],
    "reasoning_content": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "\nbecause\n"}],
    "reasoning_content_none": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "plain", "reasoning_content": None}],
    "tool_round_trip": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."}],
    "tool_call_with_text": [
        {"role": "user", "content": "Add 1 and 2"},
        {"role": "assistant", "content": "Let me add.", "tool_calls": [ADD_CALL_STR, BARE_CALL]},
        {"role": "tool", "content": "3"}, {"role": "tool", "content": "0.1"},
        {"role": "user", "content": "thanks"}],
    "tool_call_reasoning": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "content": "sunny"}],
    "tool_response_as_user": [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "<think>t</think>calling", "tool_calls": [BARE_CALL]},
        {"role": "user", "content": "<tool_response>\nok\n</tool_response>"},
        {"role": "assistant", "content": "done"}],
    "system_in_middle": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": "Now be formal."},
        {"role": "user", "content": "Good day."}],
    "unicode_and_newlines": [{"role": "user", "content": "Café 你好 👋🏽\nline two\r\n\ttabbed  <|im_end|> literal"}],
    "empty_strings": [{"role": "system", "content": ""}, {"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    "tool_first": [{"role": "tool", "content": "orphan result"}, {"role": "user", "content": "ok"}],
}

# Conversations with content lists (images, videos, text parts): the vision templates read these.
VISION_CONVERSATIONS = {
    "single_image": [{"role": "user", "content": [img("file:///data/cat.jpg"), txt("Describe this image.")]}],
    "images_and_videos": [
        {"role": "system", "content": [txt("You look at pictures.")]},
        {"role": "user", "content": [img("a.png"), img("b.png"), txt("Compare, then watch:"), vid("clip.mp4")]},
        {"role": "assistant", "content": [txt("The first is red; the video shows a dog.")]},
        {"role": "user", "content": [vid("second.mp4"), txt("And now?"), img("c.png")]}],
    "image_url_parts": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/x.jpg"}}, txt("What is this?")]}],
    "untyped_parts": [{"role": "user", "content": [
        {"type": "image", "url": "http://h/i.jpg"}, {"type": "video", "path": "/v/1.mp4"},
        {"image": "untyped.jpg"}, {"video": "untyped.mp4"}, {"type": "text", "text": "untyped parts"}]}],
    "vision_multi_turn_system_string": [
        {"role": "system", "content": "System as a string."},
        {"role": "user", "content": [img("1.jpg"), txt("one")]}, {"role": "assistant", "content": "first"},
        {"role": "user", "content": [img("2.jpg"), vid("3.mp4"), txt("two")]}],
    "empty_content_list": [{"role": "user", "content": []}, {"role": "assistant", "content": []}],
}

# Vision conversations that also use tools (Qwen3-VL only: Qwen2-VL has no tool support).
VISION_TOOL_CONVERSATIONS = {
    "tool_response_with_image": [
        {"role": "system", "content": [txt("Use tools. "), txt("Second part.")]},
        {"role": "user", "content": [img("scene.jpg"), txt("Crop it")]},
        {"role": "assistant", "content": [txt("Cropping.")], "tool_calls": [BARE_CALL]},
        {"role": "tool", "content": [img("crop.jpg"), txt("cropped")]},
        {"role": "tool", "content": [vid("clip.mp4")]},
        {"role": "assistant", "content": "Here it is."}],
    "assistant_tool_calls_no_content": [
        {"role": "user", "content": [txt("Weather?")]},
        {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL, ADD_CALL_STR]},
        {"role": "tool", "content": "rain"}],
}

# --- Qwen2-VL / Qwen2.5-VL ---
templates["qwen2_vl"] = QWEN2_VL_CHAT_TEMPLATE
for name, messages in {**VISION_CONVERSATIONS, **{k: TEXT_CONVERSATIONS[k] for k in (
        "user_only", "system_user", "multi_turn", "assistant_last", "system_in_middle", "unicode_and_newlines",
        "empty_strings", "tool_first")}}.items():
    for agp in (False, True):
        for vision_id in (False, True):
            add_case("qwen2_vl", f"{name}/agp={agp}/vision_id={vision_id}", messages, add_generation_prompt=agp,
                     add_vision_id=vision_id)

# --- Qwen3-VL Instruct and Thinking (the Thinking one: reasoning_content or "<think>" in the content
# after the last query): the same conversations through both ---
templates["qwen3_vl_instruct"] = QWEN3_VL_INSTRUCT_TEMPLATE
templates["qwen3_vl_thinking"] = QWEN3_VL_THINKING_TEMPLATE
for template in ("qwen3_vl_instruct", "qwen3_vl_thinking"):
    for name, messages in {**TEXT_CONVERSATIONS, **VISION_CONVERSATIONS, **VISION_TOOL_CONVERSATIONS}.items():
        for agp in (False, True):
            add_case(template, f"{name}/agp={agp}", messages, add_generation_prompt=agp)
        add_case(template, f"{name}/tools/vision_id", messages, tools=TOOLS, add_generation_prompt=True,
                 add_vision_id=True)

# --- Qwen3 ---
templates["qwen3"] = QWEN3_TEMPLATE
for name, messages in TEXT_CONVERSATIONS.items():
    for agp in (False, True):
        add_case("qwen3", f"{name}/agp={agp}", messages, add_generation_prompt=agp)
    add_case("qwen3", f"{name}/thinking_off", messages, add_generation_prompt=True, enable_thinking=False)
    add_case("qwen3", f"{name}/thinking_on/tools", messages, tools=TOOLS, add_generation_prompt=True,
             enable_thinking=True)

# --- Qwen3.8 (its tool calls need mapping arguments; it refuses a conversation without a user turn) ---
templates["qwen3_8"] = QWEN3_8_TEMPLATE
QWEN3_8_SKIP = {"tool_call_with_text", "assistant_tool_calls_no_content", "system_in_middle"}
for name, messages in {**TEXT_CONVERSATIONS, **VISION_CONVERSATIONS, **VISION_TOOL_CONVERSATIONS}.items():
    if name in QWEN3_8_SKIP:
        continue
    for agp in (False, True):
        add_case("qwen3_8", f"{name}/agp={agp}", messages, add_generation_prompt=agp)
    add_case("qwen3_8", f"{name}/thinking_off/tools", messages, tools=TOOLS, add_generation_prompt=True,
             enable_thinking=False)
    add_case("qwen3_8", f"{name}/low/no_preserve/vision_id", messages, add_generation_prompt=True, enable_thinking=True,
             reasoning_effort="low", preserve_thinking=False, add_vision_id=True)
add_case("qwen3_8", "medium_effort/tools", TEXT_CONVERSATIONS["multi_turn"], tools=TOOLS, reasoning_effort="medium")

# --- Qwen3.5 (the same conversations as Qwen3.8: its tool calls need mapping arguments too) ---
templates["qwen3_5"] = QWEN3_5_TEMPLATE
for name, messages in {**TEXT_CONVERSATIONS, **VISION_CONVERSATIONS, **VISION_TOOL_CONVERSATIONS}.items():
    if name in QWEN3_8_SKIP:
        continue
    for agp in (False, True):
        add_case("qwen3_5", f"{name}/agp={agp}", messages, add_generation_prompt=agp)
    add_case("qwen3_5", f"{name}/thinking_off/tools", messages, tools=TOOLS, add_generation_prompt=True,
             enable_thinking=False)
    add_case("qwen3_5", f"{name}/thinking_on/vision_id", messages, add_generation_prompt=True, enable_thinking=True,
             add_vision_id=True)

# --- The language, piece by piece, against jinja2 (through the same apply_chat_template) ---
FEATURE_MESSAGES = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"},
                    {"role": "user", "content": "third"}]
FEATURES = {
    "whitespace_control": "a  {%- if true %}  b {% endif -%}  c\n  {% if true %}\n    x\n  {% endif %}\nend\n",
    "comments_and_trim": "line1\n   {# comment #}\nline2\n  {#- c -#}  \nline3 {{- ' v ' -}} tail\n\t{% if true %}tab{% endif %}\n",
    "plus_modifiers": "  {%+ if true %}x{% endif +%}\ny\n  {% if true +%}\nz{% endif %}",
    "raw_block": "{% raw %}{{ not parsed }} {% if %}{% endraw %}\n  {% raw -%}  kept  {%- endraw %}|",
    "indented_real_world": (
        "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- 'U: ' + m.content }}\n    {% else %}\n"
        "  A: {{ m.content }}\n    {% endif %}\n{% endfor %}\n  {# trailing comment #}\ndone\n\n"),
    "crlf_source": "{% if true %}\r\nline\r\n{% endif %}\r\nend\r\n",
    "repr_printing": (
        "{{ [1, 'a', \"it's\", none, true, 1.0, 2.5e-5, {'k': [1, (2, 3)]}] }}|{{ (1,) }}|{{ {} }}|{{ none }}|"
        "{{ undefined_var }}|{{ ['q\"uote', 'back\\\\slash', 'new\\nline'] }}|{{ messages[0] }}"),
    "numbers": (
        "{{ 0.1 + 0.2 }}|{{ 1/3 }}|{{ 2.0 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ -0.0 }}|"
        "{{ 3.0 * 2 }}|{{ 10 / 5 }}|{{ 123456789.123456789 }}|{{ 1e20 }}|{{ 10/4 }}|{{ 10//4 }}|{{ -7//2 }}|"
        "{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ -7.5 // 2 }}|{{ 2**10 }}|{{ 2**-1 }}|{{ 3 * 'ab' }}|{{ [1]*3 }}|{{ 1_000 }}"),
    "operators": (
        "{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' != 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ [1,2] < [1,3] }}"
        "{{ 'abc' < 'abd' }}|{{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in {'k': 1} }}|"
        "{{ none or 'x' }}{{ 0 and 'y' }}{{ 'a' and 'b' }}{{ not [] }}{{ not 'a' == 'b' }}|"
        "{{ 'yes' if 1 > 0 else 'no' }}|{{ 'only' if false }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ (1 + 2) * 3 }}|"
        "{{ 7 // 2 * 2 }}|{{ -2 ** 2 }}|{{ 'x' + 2 ~ 3 }}|{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' + 'cd' }}|"
        "{{ [1] + [2] }}|{{ -3|abs }}|{{ 'a' if none else 'b' if 0 else 'c' }}"),
    "slicing": (
        "{{ 'Hello'[1:3] }}|{{ 'Hello'[::-1] }}|{{ 'héllo'[1] }}|{{ 'héllo'[-1] }}|{{ [1,2,3,4,5][-2:] }}|"
        "{{ [1,2,3,4,5][::2] }}|{{ [1,2,3,4,5][5:1:-2] }}|{{ [1,2,3][:-1] }}|{{ [1,2,3][10:] }}|"
        "{% for m in messages[1:] %}{{ m.content }}{% endfor %}|{{ messages[::-1]|map(attribute='content')|join(',') }}|"
        "{{ messages[-1].content }}|{{ messages[5] }}"),
    "string_methods": (
        "{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b \\n c '.split() }}|"
        "{{ 'a b c'.split(' ', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'a  b c'.split(none, 1) }}|"
        "{{ 'hello'.replace('l', 'L') }}|{{ 'hello'.replace('l', 'L', 1) }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|"
        "{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'héllo'.find('l') }}|{{ 'abc'.find('z') }}|"
        "{{ 'banana'.count('an') }}|{{ '-'.join(['a', 'b']) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|"
        "{{ 'ab'.lstrip('a') }}{{ 'ab'.rstrip('b') }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'a</think>b'.split('</think>')[-1] }}"),
    "filters": (
        "{{ [3,1,2]|sort }}|{{ ['b','A','c']|sort }}|{{ [3,1,2]|sort(reverse=true) }}|{{ 'abc'|length }}|"
        "{{ 'héllo'|length }}|{{ {'a':1}|length }}|{{ [1,2]|count }}|{{ '  pad  '|trim }}|{{ 'xxpadxx'|trim('x') }}|"
        "{{ 'x'|upper }}{{ 'X'|lower }}|{{ 'Hello World-wide (test) [x]'|title }}|{{ 'hello WORLD'|capitalize }}|"
        "{{ 'aaa'|replace('a','b',2) }}|{{ [1,2,3]|join(', ') }}|{{ [1,2,3]|first }}{{ [1,2,3]|last }}|"
        "{{ 'abc'|first }}|{{ missing|default('dflt') }}|{{ ''|default('empty', true) }}|{{ ''|default('kept') }}|"
        "{{ none|d('n') }}|{{ 'abc'|list }}|{{ [1,2,3]|reverse|list }}|{{ 'abc'|reverse }}|"
        "{{ [1,2,1,'a','A']|unique|list }}|{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 3|float }}|"
        "{{ '2.5'|float }}|{{ 7|string ~ 'x' }}|{{ 4.9|int }}|{{ true|int }}|{{ [1,2]|string }}|{{ 'x'|safe }}|"
        "{{ [3, 1]|max }}{{ [3, 1]|min }}|{{ [1, 2.5]|sum }}"),
    "filters_on_dicts": (
        "{% set people = [{'name': 'a', 'age': 3, 'tags': {'x': 1}}, {'name': 'b', 'age': 1}, "
        "{'name': 'c', 'age': 2, 'admin': true}] %}{{ people|map(attribute='name')|join(',') }}|"
        "{{ people|selectattr('admin')|map(attribute='name')|list }}|{{ people|rejectattr('admin')|map(attribute='name')|list }}|"
        "{{ people|selectattr('age', 'equalto', 1)|map(attribute='name')|first }}|"
        "{{ people|selectattr('tags', 'defined')|list|length }}|{{ people|selectattr('age', '>', 1)|list|length }}|"
        "{{ people|sort(attribute='age')|map(attribute='name')|join }}|{{ people|map(attribute='tags.x', default=0)|list }}|"
        "{{ [1,2,3,4]|select('odd')|list }}|{{ [1,2,3,4]|reject('even')|list }}|{{ ['a','b']|map('upper')|list }}|"
        "{{ {'b': 1, 'a': 2}|items|list }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ messages|selectattr('role', 'eq', 'user')|list|length }}"),
    "tojson": (
        "{{ {'b': [1, 2.5, none, true], 'a': 'é\"\\n<>&\\t'}|tojson }}|{{ {'x': {'y': []}, 'z': {}, 'w': [1, {'v': 2}]}|tojson(indent=2) }}|"
        "{{ [1, 'x']|tojson(ensure_ascii=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|"
        "{{ [1,[2]]|tojson(separators=(',', ':')) }}|{{ 1e-7|tojson }}|{{ 100000000000000000000.0|tojson }}|{{ tools|tojson }}|"
        "{{ tools[0]|tojson(indent=4) }}|{{ messages|tojson }}|{{ 'x'|tojson }}|{{ none|tojson }}"),
    "tests": (
        "{% for v in [none, true, false, 0, 1.5, 'a', [1], {'k': 1}, undefined_thing] %}{{ v is none }}{{ v is defined }}"
        "{{ v is undefined }}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}"
        "{{ v is iterable }}{{ v is sequence }}{{ v is boolean }}{{ v is true }}{{ v is false }};{% endfor %}|"
        "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is equalto 2 }}{{ 2 is eq(3) }}{{ 'a' is in 'abc' }}"
        "{{ 1 is not none }}{{ 'x' is not string }}{{ messages[0] is mapping }}{{ messages is sequence }}"),
    "loops": (
        "{% for x in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
        "{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}|"
        "{% for x in [] %}no{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}|"
        "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}|"
        "{% for c in 'hé' %}[{{ c }}]{% endfor %}|"
        "{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}|"
        "{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}|{% for x in range(2, 11, 3) %}{{ x }}{% endfor %}"
        "{% for x in range(3, 0, -1) %}{{ x }}{% endfor %}|{% for x in missing %}m{% else %}none{% endfor %}|"
        "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}"),
    "scoping_and_set": (
        "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|"
        "{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}"
        "{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }}{{ ns.items }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|"
        "{% set block %}inner {{ a }}{% endset %}{{ block|upper }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}|"
        "{% set d = {'k': 'v'} %}{{ d.k }}{{ d['k'] }}{{ d.get('k') }}{{ d.get('m', 'dflt') }}{{ d.get('m') }}"
        "{{ d.keys()|list }}{{ d.values()|list }}{{ d.missing }}|{% set n2 = namespace(messages[0]) %}{{ n2.role }}"),
    "macros": (
        "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}"
        "{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet(name='Cy', punct='?') }}|"
        "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}|"
        "{% macro show(v) %}{{ v is defined }}{% endmacro %}{{ show() }}|"
        "{% set counter = namespace(n=0) %}{% macro bump() %}{% set counter.n = counter.n + 1 %}{% endmacro %}"
        "{{ bump() }}{{ bump() }}{{ counter.n }}|{% macro uses_outer() %}{{ messages|length }}{% endmacro %}{{ uses_outer() }}"),
    "context_values": (
        "{% for m in messages %}{{ m.role|upper }}:{{ m['content'] }}{% if not loop.last %}\n{% endif %}{% endfor %}|"
        "{{ bos_token }}{{ extra.nested[0] }}{{ extra.flag }}{{ extra.num + 1 }}{{ extra.f * 2 }}|{{ extra }}|"
        "{{ messages[0].nope }}|{{ messages[0].nope is defined }}|{{ foo|length }}|{{ foo ~ 'a' }}|"
        "{{ messages[0].content.nope }}|{{ add_generation_prompt }}|{{ tools is none }}"),
    "literals": (
        "{{ 'tab\\there' }}|{{ \"dq'sq\" }}|{{ 'uni\\u00e9\\x41' }}|{{ 'a' 'b' }}|{{ True }}{{ False }}{{ None }}|"
        "{% set d = {'a': {'b': [10, {'c': 'deep'}]}} %}{{ d.a.b[1].c }}{{ d['a']['b'][0] }}{{ d.a.b.0 }}|{{ d }}|"
        "{{ [] }}{{ [1,] }}{{ (1, 2) }}{{ () }}"),
    "generation_tag": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
}
FEATURE_KWARGS = {"bos_token": "<s>", "extra": {"nested": ["n0"], "flag": True, "num": 41, "f": 1.25}}
for name, text in FEATURES.items():
    templates["feature_" + name] = text
    add_case("feature_" + name, name, FEATURE_MESSAGES, tools=TOOLS[:1], add_generation_prompt=True, **FEATURE_KWARGS)

# Templates that raise: the C++ test expects an error carrying the message where one is given.
errors = []
def add_error(name, text, message, messages=FEATURE_MESSAGES, **kwargs):
    tokenizer = make_tokenizer(text)
    try:
        tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception as e:  # noqa: BLE001 - any jinja2 error is the expected outcome
        errors.append({"name": name, "template": text, "context": {**kwargs, "messages": messages, "tools": None,
                       "documents": None, "add_generation_prompt": False}, "python_error": str(e), "message": message})
        return
    raise AssertionError(f"{name}: jinja2 rendered without an error")

add_error("qwen3_8_system_in_middle", QWEN3_8_TEMPLATE, "System message must be at the beginning.",
          TEXT_CONVERSATIONS["system_in_middle"])
add_error("qwen3_8_no_user_query", QWEN3_8_TEMPLATE, "No user query found in messages.",
          [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])
add_error("qwen3_8_bad_effort", QWEN3_8_TEMPLATE, "Unexpected reasoning effort bogus.", TEXT_CONVERSATIONS["user_only"],
          reasoning_effort="bogus")
add_error("qwen3_8_system_image", QWEN3_8_TEMPLATE, "System message cannot contain images.",
          [{"role": "system", "content": [img("x.png")]}, {"role": "user", "content": "hi"}])
add_error("qwen3_8_string_arguments", QWEN3_8_TEMPLATE, "", TEXT_CONVERSATIONS["tool_call_with_text"])
add_error("qwen3_8_bad_role", QWEN3_8_TEMPLATE, "Unexpected message role.", [{"role": "user", "content": "u"},
          {"role": "narrator", "content": "n"}])
add_error("qwen3_5_system_in_middle", QWEN3_5_TEMPLATE, "System message must be at the beginning.",
          TEXT_CONVERSATIONS["system_in_middle"])
add_error("qwen3_5_no_user_query", QWEN3_5_TEMPLATE, "No user query found in messages.",
          [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])
add_error("qwen3_5_system_video", QWEN3_5_TEMPLATE, "System message cannot contain videos.",
          [{"role": "system", "content": [vid("x.mp4")]}, {"role": "user", "content": "hi"}])

add_error("raise_exception", "{% if messages|length > 2 %}{{ raise_exception('Too many messages: ' ~ messages|length) }}{% endif %}",
          "Too many messages: 3")
add_error("attribute_of_undefined", "{{ nothing.at_all }}", "'nothing' is undefined")
add_error("add_undefined", "{{ 1 + nothing }}", "'nothing' is undefined")
add_error("unknown_filter", "{{ 'x'|no_such_filter }}", "unsupported filter 'no_such_filter'")
add_error("unclosed_if", "{% if true %}x", "")
add_error("bad_syntax", "{{ 1 + }}", "")
add_error("list_append", "{% set l = [] %}{{ l.append(1) }}", "")
add_error("string_plus_int", "{{ 'a' + 1 }}", "unsupported operand")
add_error("not_iterable", "{% for x in 5 %}{% endfor %}", "not iterable")
add_error("namespace_assign", "{% set x = 1 %}{% set x.y = 2 %}", "non-namespace")

with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"templates": templates, "cases": cases, "errors": errors}, f, ensure_ascii=False, indent=1)
counts = {}
for c in cases:
    counts[c["template"]] = counts.get(c["template"], 0) + 1
print(json.dumps(counts))

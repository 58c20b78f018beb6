#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from the fixtures.

Small on purpose (the whole corpus is committed): safetensors headers cut after a few data
bytes, whole small files, the fixtures' config.json files, a trimmed quant description, a
tokenizer.json with the 256 byte tokens and a few merges, chat templates, OpenAI request
bodies, GGUF files with their tokenizer metadata cut down to a few hundred tokens, and small
images (PNG, JPEG, WebP, a data URI).

  python3 fuzz/make_corpus.py [--shared ../shared]

Rerun after a fixture changes; the files it writes replace the seeds of the same name and
leave others (e.g. minimized inputs added with -merge=1) alone.
"""

import argparse
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "tiny-qwen3-moe")


def write(target, name, data):
    d = os.path.join(ROOT, "fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path, n=None):
    with open(path, "rb") as f:
        return f.read() if n is None else f.read(n)


# ---- safetensors ----


def safetensors_file(tensors, metadata=None):
    """tensors: (name, dtype, shape, bytes); laid out in order, header padded to 8."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds(shared):
    fx = os.path.join(shared, "fixtures")
    cuts = {
        "dense-header": os.path.join(fx, "tiny-qwen3-dense", "model.safetensors"),
        "moe-shard1-header": os.path.join(MODEL, "model-00001-of-00002.safetensors"),
        "qwen3_5-dense-header": os.path.join(fx, "tiny-qwen3_5-dense", "model.safetensors"),
        "qwen3_5-moe-header": os.path.join(fx, "tiny-qwen3_5-moe", "model-00001-of-00002.safetensors"),
        "mxfp8-weights-header": os.path.join(
            fx, "tiny-qwen3_5-moe-w8a8-mxfp8", "quant_model_weights-00001-of-00002.safetensors"),
        "mx-vectors-fp4-header": os.path.join(fx, "mx-vectors", "divergent_fp4_e2m1.safetensors"),
    }
    for name, path in cuts.items():
        n = struct.unpack("<Q", read(path, 8))[0]
        write("safetensors", name, read(path, 8 + n + 16))  # the header and 16 data bytes
    for f in ("nonfinite_fp8_e4m3.safetensors", "nonfinite_fp4_e2m1.safetensors"):
        write("safetensors", f, read(os.path.join(fx, "mx-vectors", f)))
    b = bytes(range(256))
    write("safetensors", "small-all-dtypes", safetensors_file([
        ("model.embed_tokens.weight", "BF16", [4, 8], b[:64]),
        ("model.layers.0.q_proj.weight", "F8_E4M3", [2, 32], b[:64]),
        ("model.layers.0.q_proj.weight_scale", "U8", [2, 1], b[:2]),
        ("x.f32", "F32", [3, 5], b[:60]),
        ("x.f16", "F16", [2], b[:4]),
        ("x.i64", "I64", [2], b[:16]),
        ("x.i32", "I32", [1, 1], b[:4]),
        ("x.scalar", "F32", [], b[:4]),
        ("x.empty", "F32", [0, 3], b""),
    ], {"format": "pt"}))


# ---- JSON files ----


def json_seeds(shared):
    fx = os.path.join(shared, "fixtures")
    for m in ("tiny-qwen3-dense", "tiny-qwen3-moe", "tiny-qwen3_5-dense", "tiny-qwen3_5-moe",
              "tiny-qwen3_5-moe-w8a8-mxfp8"):
        write("model_config", m + ".json", read(os.path.join(fx, m, "config.json")))
    write("model_config", "qwen3-moe-allmoe.json",
          read(os.path.join(fx, "gguf", "tiny-qwen3-moe-allmoe.hf-config.json")))

    desc = json.loads(read(os.path.join(fx, "tiny-qwen3_5-moe-w8a8-mxfp8",
                                        "quant_model_description.json")))
    trimmed, tensors = {}, 0
    for k, v in desc.items():
        if not isinstance(v, str) or not k.startswith("model.") or tensors < 24:
            trimmed[k] = v
            tensors += k.startswith("model.")
    write("quant_description", "w8a8-mxfp8-trimmed.json", json.dumps(trimmed, indent=2))
    write("quant_description", "mixed-types.json", json.dumps({
        "version": "1.0.0", "model_quant_type": "W4A4_MXFP4", "group_size": 32,
        "is_rot_used": False, "metadata": {"a": [1, 2]}, "kv_cache_type": "FLOAT",
        "model.layers.0.self_attn.q_proj.weight": "W4A4_MXFP4",
        "model.layers.0.self_attn.q_proj.weight_scale": "W4A4_MXFP4",
        "model.layers.0.mlp.experts.0.up_proj.weight": "W4A8_MXFP",
        "model.layers.0.mlp.experts.0.down_proj.weight": "W4A4_MXFP4_DUALSCALE",
        "model.layers.0.mlp.experts.1.up_proj.weight": "W8A8_MXFP8",
        "model.layers.0.mlp.gate.weight": "FLOAT",
        "model.layers.1.self_attn.o_proj.weight": "W8A8",
    }))


# ---- tokenizer.json ----


def small_tokenizer(n_merges=48, pair_merges=True):
    """The bundled tokenizer with the 256 byte tokens and its first merges, ids compacted."""
    j = json.loads(read(os.path.join(MODEL, "tokenizer.json")))
    inv = {i: t for t, i in j["model"]["vocab"].items()}
    vocab = {inv[i]: i for i in range(256)}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and (a + b) not in vocab:
            vocab[a + b] = len(vocab)
            merges.append([a, b] if pair_merges else a + " " + b)
        if len(merges) == n_merges:
            break
    added = []
    for a in j["added_tokens"]:
        a = dict(a)
        a["id"] = len(vocab) + len(added)
        added.append(a)
    j["added_tokens"] = added
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    return j


def tokenizer_seeds():
    write("tokenizer", "qwen3-small.json", json.dumps(small_tokenizer(), ensure_ascii=False))
    t = small_tokenizer(16, pair_merges=False)
    t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    write("tokenizer", "string-merges-sequence-nfc.json", json.dumps(t, ensure_ascii=False))
    t = small_tokenizer(8)
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
    t["added_tokens"].append({"id": 300, "content": "<tool_call>", "special": False})
    write("tokenizer", "no-regex-gap-ids.json", json.dumps(t, ensure_ascii=False, indent=1))


# ---- chat templates ----

FEATURE_TEMPLATES = [
    "{{ xs[::-1] }}|{{ xs[1:] }}|{{ xs[-1] }}|{{ name[1:3] }}|{{ name[::-1] }}",
    "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{% if not loop.last %},{% endif %}"
    "{% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}{{ loop.revindex0 }} {% else %}none{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d | tojson }}"
    "{{ d | tojson(indent=2) }}",
    "{{ messages | length }} {{ messages[1].content | trim }} {{ (messages | last).role | upper }}"
    " {{ messages | map(attribute='role') | join(',') }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ name is string }}"
    "{{ n is number }}{{ nothing is none }}{{ missing is defined }}",
    "{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ f * 2 }} {{ n - 10 }}"
    " {{ 'a' ~ n ~ flag }} {{ flag }} {{ nothing }}",
    "{% set ns = namespace(c=0) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}{% endfor %}"
    "{{ ns.c }}{% set y = 5 %}{{ y if y > 3 else 0 }}",
    "{{ 'a,b,,c'.split(',') }} {{ '  x  '.strip() }}|{{ '\\n\\nhi\\n'.strip('\\n') }}"
    " {{ 'Hello'.startswith('He') }} {{ 'hello world'.title() }} {{ 'a-b'.replace('-', '+') }}",
    "{%- if name == 'Ada' -%}\n  yes\n{%- elif name -%}\n  maybe\n{%- else -%}\n  no\n"
    "{%- endif %}\n  after {# comment #}\n",
    "{% for i in range(3) %}{{ i }}{% endfor %}{{ 'x' in name }}{{ 'd' in name }}{{ 3 in xs }}"
    "{{ 'a' in d }}",
    "{{ undefined_var | default('fallback') }} {{ '' | default('empty', true) }} {{ [1, 2] + [3] }}"
    " {{ {'k': 'v'}['k'] }}",
    "  {% if flag %}\n    indented\n  {% endif %}\nline\n",
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}",
    "{{ raise_exception('bad role: ' + name) }}",
    "{%- for m in messages %}{%- if loop.first and m.role == 'system' %}<<{{ m.content }}>>"
    "{%- elif m.role in ['user', 'tool'] %}{{ m.role[0] | upper }}:{{ m.content | length }}"
    "{%- else %}{{ m.content.split('</think>')[-1].lstrip('\\n') }}{% endif %}{% endfor %}",
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% for m in messages %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}{% endfor %}{% endif %}{% endfor %}",
]


# Macros (defaults, keyword arguments, nesting, recursion, call blocks), loop controls and
# block sets.
MACRO_TEMPLATES = [
    "{% macro greet(who, greeting='Hello', punct='!') %}{{ greeting }}, {{ who }}{{ punct }}"
    "{% endmacro %}{{ greet(name) }} {{ greet('Cy', punct='?') }}"
    "{% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{% endmacro %}"
    "{{ count(3) }}{% macro outer(items, sep=',') %}{% for x in items %}{{ greet(x) }}"
    "{% if not loop.last %}{{ sep }}{% endif %}{% endfor %}{% endmacro %}{{ outer(xs, sep=';') }}",
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
    "{% call wrap('b') %}{% call(x) wrap('i') %}{{ name }}{% endcall %}{% endcall %}"
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'tool' %}{% continue %}"
    "{% endif %}{% set ns.n = ns.n + 1 %}{% if ns.n > 3 %}{% break %}{% endif %}{% endfor %}"
    "{% set block %}{{ ns.n }}{% endset %}{{ block | trim }}",
]

# The model templates the tests render (Qwen3.5's vision macro, Qwen3-Coder's tool macro).
MODEL_TEMPLATES = ["Qwen3.5-MoE-VL", "Qwen3-Coder-30B-A3B-Instruct"]


def template_seeds():
    cfg = json.loads(read(os.path.join(MODEL, "tokenizer_config.json")))
    write("chat_template", "qwen3.jinja", cfg["chat_template"])
    for i, t in enumerate(FEATURE_TEMPLATES):
        write("chat_template", "feature-%02d.jinja" % i, t)
    for i, t in enumerate(MACRO_TEMPLATES):
        write("chat_template", "macro-%02d.jinja" % i, t)
    for name in MODEL_TEMPLATES:
        path = os.path.join(ROOT, "tests", "data", "templates", name + ".jinja")
        write("chat_template", name.lower() + ".jinja", read(path))


# ---- OpenAI request bodies ----

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}]

REQUESTS = {
    "completion-simple": {"model": "tiny-qwen3-moe", "prompt": "Once upon a time",
                          "max_tokens": 16, "temperature": 0},
    "completion-ids-logprobs": {"prompt": [40, 525, 11, 3837], "max_tokens": 8, "logprobs": 3,
                                "seed": 42, "stop": ["\n", "."], "stream": True,
                                "stream_options": {"include_usage": True}},
    "completion-sampling": {"model": "tiny-qwen3-moe", "prompt": ["It is a truth"],
                            "max_tokens": 32, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
                            "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": 0.25,
                            "repetition_penalty": 1.1, "n": 1, "ignore_eos": True, "stop": "\n\n"},
    "chat-simple": {"model": "tiny-qwen3-moe",
                    "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
    "chat-tools": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}],
        "tools": TOOLS, "tool_choice": "auto",
        "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 64},
    "chat-parts-logprobs-stream": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Describe "}, {"type": "text", "text": "this."},
        {"type": "image_url", "image_url": {"url": "data:,"}}]}],
        "logprobs": True, "top_logprobs": 5, "stream": True,
        "stream_options": {"include_usage": True}, "max_completion_tokens": 20,
        "temperature": 1.0, "seed": 7},
    "chat-reasoning-stop": {"messages": [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "simple sum"},
        {"role": "user", "content": None}], "stop": ["</s>"], "top_k": -1,
        "chat_template_kwargs": {"enable_thinking": True}},
    "wrong-model": {"model": "gpt-4", "prompt": "x"},
}


def request_seeds():
    for name, body in REQUESTS.items():
        write("openai_request", name + ".json", json.dumps(body, ensure_ascii=False))


# ---- GGUF ----

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}


class Reader:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        et, n = self.take("<I"), self.take("<Q")
        return (et, [self.value(et) for _ in range(n)])


def put_value(t, v):
    if t in SCALAR:
        return struct.pack(SCALAR[t], v)
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    et, items = v
    return struct.pack("<IQ", et, len(items)) + b"".join(put_value(et, e) for e in items)


def read_gguf(path):
    r = Reader(read(path))
    assert r.b[:4] == b"GGUF"
    r.o = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        kvs.append((k, t, r.value(t)))
    return version, kvs


def small_gguf(path, n_tokens=320):
    """The file's metadata with its tokenizer cut to the byte tokens, the first merges and the
    special tokens, and two tiny tensors instead of the model's."""
    version, kvs = read_gguf(path)
    meta = {k: (t, v) for k, t, v in kvs}
    tokens = meta[b"tokenizer.ggml.tokens"][1][1]
    types = meta[b"tokenizer.ggml.token_type"][1][1]
    special = [i for i, ty in enumerate(types) if ty == 3]
    keep = list(range(n_tokens)) + special
    new_id = {old: new for new, old in enumerate(keep)}
    kept = set(tokens[i] for i in keep)
    out = []
    for k, t, v in kvs:
        if k == b"tokenizer.ggml.tokens":
            v = (8, [tokens[i] for i in keep])
        elif k == b"tokenizer.ggml.token_type":
            v = (v[0], [types[i] for i in keep])
        elif k == b"tokenizer.ggml.merges":
            ms = [m for m in v[1] if all(p in kept for p in (m.split(b" ", 1)[0],
                                                              m.split(b" ", 1)[1],
                                                              m.replace(b" ", b"", 1)))]
            v = (8, ms[:n_tokens - 256])
        elif k.startswith(b"tokenizer.ggml.") and k.endswith(b"_token_id"):
            v = new_id.get(v, len(keep) - 1)
        elif k == b"general.name":
            v = b"fuzz seed of " + v
        out.append((k, t, v))
    b = b"GGUF" + struct.pack("<IQQ", version, 2, len(out))
    for k, t, v in out:
        b += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + put_value(t, v)
    # token_embd F32 [8, 2] at 0, output_norm F32 [8] at 64.
    for name, ne, off in ((b"token_embd.weight", (8, 2), 0), (b"output_norm.weight", (8,), 64)):
        b += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne))
        b += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", 0, off)
    b += b"\0" * (-len(b) % 32)
    return b + struct.pack("<24f", *[i / 8 for i in range(24)]) + b"\0" * 32


def gguf_seeds(shared):
    g = os.path.join(shared, "fixtures", "gguf")
    write("gguf", "synthetic-types.gguf", read(os.path.join(g, "synthetic-types.gguf")))
    write("gguf", "qwen3-dense-small-tokenizer.gguf",
          small_gguf(os.path.join(g, "tiny-qwen3-dense.Q4_0.gguf")))
    write("gguf", "qwen3-moe-small-tokenizer.gguf",
          small_gguf(os.path.join(g, "tiny-qwen3-moe-allmoe.MXFP4_MOE.gguf"), 264))
    # The hybrid's keys: ssm.*, recurrent_layers (a bool array), nextn_predict_layers.
    write("gguf", "qwen3_5-moe-small-tokenizer.gguf",
          small_gguf(os.path.join(g, "tiny-qwen3_5-moe.Q4_K_M.gguf"), 264))
    # A real file's first bytes: preamble and the first metadata keys, cut inside the tokens.
    write("gguf", "qwen3-dense-Q2_K-first-4k.gguf",
          read(os.path.join(g, "tiny-qwen3-dense.Q2_K.gguf"), 4096))


# ---- images ----


def image_seeds(shared):
    """The Qwen-VL fixture's PNGs (one needs a resize) and one as a data URI. The JPEG, WebP
    and odd-PNG seeds beside them were encoded once with libjpeg-turbo, libwebp and libpng
    (no encoder here) and are left alone."""
    import base64
    g = os.path.join(shared, "fixtures", "tiny-qwen3_5-moe-vl", "golden")
    for name in ("quadrants_64x64", "rings_128x96", "checker_100x75_resized"):
        write("image", name + ".png", read(os.path.join(g, name + ".png")))
    png = read(os.path.join(g, "quadrants_64x64.png"))
    write("image", "quadrants-data-uri.txt",
          "data:image/png;base64," + base64.b64encode(png).decode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    a = ap.parse_args()
    safetensors_seeds(a.shared)
    json_seeds(a.shared)
    tokenizer_seeds()
    template_seeds()
    request_seeds()
    gguf_seeds(a.shared)
    image_seeds(a.shared)


if __name__ == "__main__":
    main()

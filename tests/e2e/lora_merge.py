#!/usr/bin/env python3
"""trident convert --from hf --to hf --merge-lora against PEFT's format and a float64 merge here.

The test writes, by hand (pure Python, no torch or peft), a tiny Llama-shaped Hugging Face model
(config.json + model.safetensors) and LoRA adapters in PEFT's layout: adapter_config.json with
peft_type "LORA", r, lora_alpha, use_rslora, target_modules, bias "none", and
adapter_model.safetensors with the keys PEFT's get_peft_model_state_dict saves,
base_model.model.<module>.lora_A.weight (r, in) and .lora_B.weight (out, r), no adapter name.
The merged weight must be W + scaling * B @ A with scaling = lora_alpha / r (use_rslora:
lora_alpha / sqrt(r)) as PEFT's LoraLayer computes it (the delta transposed under fan_in_fan_out,
GPT-2's Conv1D), summed here in float64 and rounded once to W's dtype: the bytes must be equal.
Every other tensor, the metadata and config.json must be unchanged. Bad adapters are refused
with one line.

Run with TRIDENT=path/to/trident (default build/trident)."""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

TRIDENT = os.environ.get("TRIDENT", "build/trident")
fails = 0
passes = 0


def check(ok, what):
    global fails, passes
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passes += 1
    else:
        fails += 1


def bf16_round(v):
    """v rounded to the nearest bfloat16 (ties to even), for the normal range used here."""
    if v == 0:
        return 0.0
    _, e = math.frexp(v)
    scale = 2.0 ** (e - 8)
    return round(v / scale) * scale


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def encode(dtype, vals):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    assert dtype == "BF16"
    out = bytearray()
    for v in vals:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        assert bits & 0xFFFF == 0, "value not a bfloat16"
        out += struct.pack("<H", bits >> 16)
    return bytes(out)


def decode(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % (len(raw) // 2), raw)]


def write_st(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, values)."""
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, vals in tensors:
        b = encode(dtype, vals)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[8 + n + a:8 + n + b])
    return out, meta


def rnd(rng, n, dtype, scale=0.5):
    vals = [f32(rng.uniform(-scale, scale)) for _ in range(n)]
    return [bf16_round(v) for v in vals] if dtype == "BF16" else vals


def llama_model(d, rng, dtype):
    """Tensors of a 1-layer Llama (hidden 8, 2 heads, 1 key/value head, ffn 12, vocab 16)."""
    h, kv, f, v = 8, 4, 12, 16
    shapes = [("model.embed_tokens.weight", (v, h)),
              ("model.layers.0.input_layernorm.weight", (h,)),
              ("model.layers.0.self_attn.q_proj.weight", (h, h)),
              ("model.layers.0.self_attn.k_proj.weight", (kv, h)),
              ("model.layers.0.self_attn.v_proj.weight", (kv, h)),
              ("model.layers.0.self_attn.o_proj.weight", (h, h)),
              ("model.layers.0.post_attention_layernorm.weight", (h,)),
              ("model.layers.0.mlp.gate_proj.weight", (f, h)),
              ("model.layers.0.mlp.up_proj.weight", (f, h)),
              ("model.layers.0.mlp.down_proj.weight", (h, f)),
              ("model.norm.weight", (h,)),
              ("lm_head.weight", (v, h))]
    tensors = [(n, dtype, s, rnd(rng, math.prod(s), dtype)) for n, s in shapes]
    os.makedirs(d)
    write_st(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "intermediate_size": f, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_hidden_layers": 1, "vocab_size": v, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
           "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    return {n: (dtype, list(s), vals) for n, _, s, vals in tensors}


def adapter(d, rng, modules, shapes, r, alpha, rslora=False, fifo=False, dtype="F32", extra=None, cfg_extra=None):
    """A PEFT adapter: modules (full module paths), shapes[m] = (out, in)."""
    os.makedirs(d)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.05,
           "use_rslora": rslora, "fan_in_fan_out": fifo, "bias": "none", "use_dora": False,
           "target_modules": sorted({m.split(".")[-1] for m in modules}), "base_model_name_or_path": "tiny",
           "init_lora_weights": True, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
           "inference_mode": True}
    cfg.update(cfg_extra or {})
    with open(os.path.join(d, "adapter_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    tensors, ab = [], {}
    for m in modules:
        out, inn = shapes[m]
        a = rnd(rng, r * inn, dtype)
        b = rnd(rng, out * r, dtype)
        ab[m] = (a, b)
        tensors.append(("base_model.model.%s.lora_A.weight" % m, dtype, (r, inn), a))
        tensors.append(("base_model.model.%s.lora_B.weight" % m, dtype, (out, r), b))
    tensors += extra or []
    write_st(os.path.join(d, "adapter_model.safetensors"), tensors, {"format": "pt"})
    return ab


def merged(w, a, b, out, inn, r, s, fifo, dtype):
    """W + s B A in float64 (each element's sum over r in order), rounded once to dtype."""
    res = list(w)
    for o in range(out):
        for i in range(inn):
            d = 0.0
            for k in range(r):
                d += b[o * r + k] * a[k * inn + i]
            at = i * out + o if fifo else o * inn + i
            v = w[at] + s * d
            res[at] = f32(v) if dtype == "F32" else bf16_round(v)
    return res


def run(*args):
    p = subprocess.run([TRIDENT, "convert"] + list(args), capture_output=True, text=True)
    return p.returncode, p.stderr.strip()


def merge_case(work, label, dtype, targets, r, alpha, rslora):
    rng = random.Random(label)
    base, ad, out = (os.path.join(work, label + x) for x in ("-base", "-adapter", "-merged"))
    model = llama_model(base, rng, dtype)
    shapes = {n[:-len(".weight")]: tuple(s) for n, (_, s, _) in model.items() if len(s) == 2}
    mods = ["model.layers.0.self_attn.%s" % t if t.endswith("_proj") and t[0] in "qkvo" else
            "model.layers.0.mlp.%s" % t for t in targets]
    ab = adapter(ad, rng, mods, shapes, r, alpha, rslora)
    rc, err = run("--from", "hf", base, "--to", "hf", out, "--merge-lora", ad)
    check(rc == 0, "%s: merge exits 0 (%s)" % (label, err.splitlines()[-1] if err else ""))
    if rc:
        return
    got, meta = read_st(os.path.join(out, "model.safetensors"))
    check(meta == {"format": "pt"}, "%s: metadata kept" % label)
    check(list(got) == list(model), "%s: the same tensors in the same order" % label)
    with open(os.path.join(base, "config.json"), "rb") as f1, open(os.path.join(out, "config.json"), "rb") as f2:
        check(f1.read() == f2.read(), "%s: config.json copied byte for byte" % label)
    s = alpha / math.sqrt(r) if rslora else alpha / r
    for name, (dt, shape, vals) in model.items():
        mod = name[:-len(".weight")]
        gdt, gshape, graw = got[name]
        if mod in ab:
            want = merged(vals, ab[mod][0], ab[mod][1], shape[0], shape[1], r, s, False, dtype)
            check(gdt == dt and gshape == shape and decode(gdt, graw) == want,
                  "%s: %s = W + %g B A, bitwise" % (label, name, s))
        else:
            check(gdt == dt and gshape == shape and graw == encode(dt, vals), "%s: %s unchanged" % (label, name))


def trident_case(work):
    """--to trident with --merge-lora: the merged model imported; exported back to Hugging Face (F32,
    the fp32 weights unchanged by the trip) it must equal the float64 merge bitwise."""
    rng = random.Random("trident")
    base, ad, ck, back = (os.path.join(work, "tri" + x) for x in ("-base", "-adapter", "-ckpt", "-back"))
    model = llama_model(base, rng, "F32")
    shapes = {n[:-len(".weight")]: tuple(s) for n, (_, s, _) in model.items() if len(s) == 2}
    mods = ["model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.up_proj"]
    r, alpha = 2, 5
    ab = adapter(ad, rng, mods, shapes, r, alpha)
    rc, err = run("--from", "hf", base, "--to", "trident", ck, "--merge-lora", ad)
    check(rc == 0, "trident: --to trident --merge-lora exits 0")
    check(not [f for f in os.listdir(work) if ".merge-lora." in f], "trident: the temporary merged folder removed")
    rc2, err2 = run("--from", "trident", ck, "--to", "hf", back)
    check(rc == 0 and rc2 == 0, "trident: exported back to hf %s" % (err or err2 if rc or rc2 else ""))
    if rc or rc2:
        return
    got, _ = read_st(os.path.join(back, "model.safetensors"))
    for name, (dt, shape, vals) in model.items():
        mod = name[:-len(".weight")]
        want = merged(vals, ab[mod][0], ab[mod][1], shape[0], shape[1], r, alpha / r, False, "F32") \
            if mod in ab else vals
        check(got[name][1] == shape and decode("F32", got[name][2]) == want,
              "trident: %s %s after the trip" % (name, "merged" if mod in ab else "unchanged"))


def gpt2_case(work):
    """GPT-2's Conv1D weights are (in, out): PEFT targets c_attn with fan_in_fan_out true, and its keys
    keep the transformer. prefix of GPT2LMHeadModel, while many GPT-2 files store h.0... without it."""
    rng = random.Random("gpt2")
    base, ad, out = (os.path.join(work, "gpt2" + x) for x in ("-base", "-adapter", "-merged"))
    h = 8
    w = rnd(rng, h * 3 * h, "F32")
    other = rnd(rng, 16 * h, "F32")
    os.makedirs(base)
    write_st(os.path.join(base, "model.safetensors"),
             [("h.0.attn.c_attn.weight", "F32", (h, 3 * h), w), ("wte.weight", "F32", (16, h), other)])
    with open(os.path.join(base, "config.json"), "w") as fh:
        json.dump({"model_type": "gpt2", "n_embd": h}, fh)
    r, alpha = 2, 8
    ab = adapter(ad, rng, ["transformer.h.0.attn.c_attn"], {"transformer.h.0.attn.c_attn": (3 * h, h)}, r, alpha,
                 fifo=True)
    rc, err = run("--from", "hf", base, "--to", "hf", out, "--merge-lora", ad)
    check(rc == 0, "gpt2: merge exits 0 (%s)" % err)
    if rc:
        return
    got, _ = read_st(os.path.join(out, "model.safetensors"))
    a, b = ab["transformer.h.0.attn.c_attn"]
    want = merged(w, a, b, 3 * h, h, r, alpha / r, True, "F32")
    check(decode("F32", got["h.0.attn.c_attn.weight"][2]) == want,
          "gpt2: c_attn (in, out) = W + s (B A)^T under fan_in_fan_out, bitwise")
    check(got["wte.weight"][2] == encode("F32", other), "gpt2: wte unchanged")


def refusals(work):
    rng = random.Random("bad")
    base = os.path.join(work, "bad-base")
    model = llama_model(base, rng, "F32")
    shapes = {n[:-len(".weight")]: tuple(s) for n, (_, s, _) in model.items() if len(s) == 2}
    q = "model.layers.0.self_attn.q_proj"
    cases = [
        ("use_dora", dict(cfg_extra={"use_dora": True}), "use_dora"),
        ("bias", dict(cfg_extra={"bias": "all"}), "bias is all"),
        ("rank_pattern", dict(cfg_extra={"rank_pattern": {"q_proj": 2}}), "rank_pattern"),
        ("not_lora", dict(cfg_extra={"peft_type": "IA3"}), "peft_type is IA3"),
        ("missing", dict(mods=["model.layers.3.self_attn.q_proj"]), "model.layers.3.self_attn.q_proj.weight"),
        ("wrong_r", dict(cfg_extra={"r": 4}), "r 4"),
        ("stray", dict(extra=[("base_model.model.lm_head.weight", "F32", (16, 8), [0.0] * 128)]),
         "base_model.model.lm_head.weight is not a LoRA weight"),
    ]
    for label, kw, needle in cases:
        ad = os.path.join(work, "bad-" + label)
        mods = kw.pop("mods", [q])
        shp = dict(shapes)
        for m in mods:
            shp.setdefault(m, (8, 8))
        adapter(ad, rng, mods, shp, 2, 4, **kw)
        out = os.path.join(work, "bad-out-" + label)
        rc, err = run("--from", "hf", base, "--to", "hf", out, "--merge-lora", ad)
        check(rc == 1 and needle in err and len(err.splitlines()) == 1 and not os.path.exists(
            os.path.join(out, "model.safetensors")), "refused, one line naming %s: %s" % (needle, err))
    ad, out = os.path.join(work, "bad-use_dora"), os.path.join(work, "bad-ckpt")
    rc, err = run("--from", "hf", base, "--to", "trident", out, "--merge-lora", ad)
    left = [f for f in os.listdir(work) if ".merge-lora." in f] + \
        [f for f in (os.listdir(out) if os.path.isdir(out) else []) if f.startswith("iter_")]
    check(rc == 1 and "use_dora" in err and not left,
          "--to trident: a bad adapter refused, no checkpoint and no temporary folder left: %s" % err)
    ad = os.path.join(work, "ok-adapter")
    adapter(ad, rng, [q], shapes, 2, 4)
    rc, err = run("--from", "hf", base, "--to", "hf", base, "--merge-lora", ad)
    check(rc == 1 and "already holds a model" in err, "an OUT holding a model refused: %s" % err)
    rc, err = run("--from", "trident", base, "--to", "hf", os.path.join(work, "x"), "--merge-lora", ad)
    check(rc == 2 and "--merge-lora" in err, "--merge-lora outside --from hf --to hf exits 2: %s" % err)


def main():
    work = tempfile.mkdtemp(prefix="lora_merge.")
    try:
        merge_case(work, "f32", "F32", ["q_proj", "v_proj", "down_proj"], 4, 16, False)
        merge_case(work, "rslora-bf16", "BF16", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"], 4, 6, True)
        trident_case(work)
        gpt2_case(work)
        refusals(work)
    finally:
        shutil.rmtree(work)
    print("%d passed, %d failed" % (passes, fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()

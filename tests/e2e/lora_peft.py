#!/usr/bin/env python3
"""PEFT adapters for tests/e2e/lora_load.sh, written and read here in pure Python (no torch, no
peft), by the published formats: safetensors (an 8-byte little-endian header length, a JSON
header of dtype, shape and data_offsets, the raw little-endian data) and PEFT's adapter folder
(adapter_config.json, adapter_model.safetensors with base_model.model.<module>.lora_A.weight (r,
in) and .lora_B.weight (out, r); delta = scaling B A, scaling lora_alpha / r, or lora_alpha /
sqrt(r) under use_rslora).

  lora_peft.py hand OUT VARIANT     write a hand-made adapter for the tiny Llama shape (4 layers,
                                    hidden 32, kv width 16, ffn 64): VARIANT ok, or a refusal case
  lora_peft.py same A B             exit 0 when adapters A and B apply the same delta to every
                                    module: equal A, B (as float32) and equal scaling
  lora_peft.py apply PEFT BASE MERGED
                                    exit 0 when the adapter PEFT applied to the Hugging Face model
                                    BASE as PEFT computes it (W + scaling B A, transposed under
                                    fan_in_fan_out: GPT-2's Conv1D stores W (in, out)), in float64
                                    rounded once to float32, is MERGED (trident's --to hf of the
                                    LoRA checkpoint) bit for bit, every tensor
"""
import json
import math
import random
import struct
import sys

LAYERS, H, KV, FFN = 4, 32, 16, 64
# module -> (block, in, out)
MODS = {"q_proj": ("self_attn", H, H), "k_proj": ("self_attn", H, KV), "v_proj": ("self_attn", H, KV),
        "o_proj": ("self_attn", H, H), "gate_proj": ("mlp", H, FFN), "up_proj": ("mlp", H, FFN),
        "down_proj": ("mlp", FFN, H)}


def write_st(path, tensors):
    """tensors: name -> (dtype, shape, list of float)"""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dt, shape, vals) in tensors.items():
        if dt == "F32":
            b = struct.pack("<%df" % len(vals), *vals)
        else:  # BF16: the upper half of the float32 (the values are made exact in bf16)
            b = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in vals)
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        if d["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif d["dtype"] == "BF16":
            vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            raise SystemExit("%s: %s is %s" % (path, name, d["dtype"]))
        out[name] = (tuple(d["shape"]), vals)
    return out


def bf16_exact(v):
    return struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] & 0xffff0000))[0]


def hand(out, variant):
    import os
    os.makedirs(out, exist_ok=True)
    rng = random.Random(11)
    r, alpha = 2, 6.0
    mods = ["q_proj", "o_proj", "down_proj"]
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": r,
           "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": mods, "bias": "none",
           "fan_in_fan_out": False, "use_rslora": True, "use_dora": False, "modules_to_save": None,
           "rank_pattern": {}, "alpha_pattern": {}, "init_lora_weights": True, "inference_mode": True}
    if variant == "dora":
        cfg["use_dora"] = True
    if variant == "bias":
        cfg["bias"] = "all"
    if variant == "modules_to_save":
        cfg["modules_to_save"] = ["lm_head"]
    if variant == "rank_pattern":
        cfg["rank_pattern"] = {"q_proj": 4}
    tensors = {}
    for layer in range(LAYERS):
        for m in mods:
            if variant == "missing" and layer == 2 and m == "o_proj":
                continue
            block, fin, fout = MODS[m]
            if variant == "shape":  # tensors of rank 3 under a config of r 2
                r = 3
            base = "base_model.model.model.layers.%d.%s.%s" % (layer, block, m)
            # with the adapter's name in the keys, as a model's state_dict holds them
            a = [bf16_exact(rng.uniform(-0.5, 0.5)) for _ in range(r * fin)]
            b = [bf16_exact(rng.uniform(-0.5, 0.5)) for _ in range(fout * r)]
            tensors[base + ".lora_A.default.weight"] = ("BF16", (r, fin), a)
            tensors[base + ".lora_B.default.weight"] = ("BF16", (fout, r), b)
    if variant == "gpt2":
        tensors["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"] = ("F32", (r, H), [0.0] * (r * H))
    with open(out + "/adapter_config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    write_st(out + "/adapter_model.safetensors", tensors)


def load(folder):
    with open(folder + "/adapter_config.json") as f:
        cfg = json.load(f)
    r = cfg["r"]
    s = cfg["lora_alpha"] / (math.sqrt(r) if cfg.get("use_rslora") else r)
    t = {}
    for k, v in read_st(folder + "/adapter_model.safetensors").items():
        k = k.replace(".default.weight", ".weight")
        t[k] = v
    return s, t


def same(a, b):
    sa, ta = load(a)
    sb, tb = load(b)
    bad = []
    if abs(sa - sb) > 1e-6 * abs(sa):
        bad.append("scaling %r vs %r" % (sa, sb))
    if sorted(ta) != sorted(tb):
        bad.append("keys differ: %s" % sorted(set(ta) ^ set(tb))[:4])
    for k in ta:
        if k in tb and ta[k] != tb[k]:
            bad.append("%s differs" % k)
    if bad:
        print("; ".join(bad[:5]))
        return 1
    print("same: %d tensors, scaling %.6g" % (len(ta), sa))
    return 0


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def apply(peft, base, merged):
    with open(peft + "/adapter_config.json") as f:
        cfg = json.load(f)
    s, ad = load(peft)
    fifo = cfg.get("fan_in_fan_out", False)
    W = read_st(base + "/model.safetensors")
    M = read_st(merged + "/model.safetensors")
    mods = {}
    for k, v in ad.items():
        assert k.startswith("base_model.model."), k
        mod, ab = k[len("base_model.model."):].rsplit(".lora_", 1)
        mods.setdefault(mod, {})[ab[0]] = v
    bad, changed = [], 0
    for mod, t in mods.items():
        (r, fin), A = t["A"]
        (fout, r2), B = t["B"]
        name = mod + ".weight"
        if name not in W and mod.startswith("transformer."):
            name = mod[len("transformer."):] + ".weight"
        shape, w = W[name]
        if tuple(shape) != ((fin, fout) if fifo else (fout, fin)) or r2 != r:
            bad.append("%s: shape %s with A %s B %s" % (name, shape, (r, fin), (fout, r2)))
            continue
        w = list(w)
        for o in range(fout):
            for i in range(fin):
                d = 0.0
                for k in range(r):
                    d += B[o * r + k] * A[k * fin + i]
                at = i * fout + o if fifo else o * fin + i
                w[at] = f32(w[at] + s * d)
        if M[name][1] != w:
            n = sum(1 for a, b in zip(M[name][1], w) if a != b)
            bad.append("%s: %d of %d elements differ" % (name, n, len(w)))
        W[name] = (shape, w)
        changed += 1
    for name in M:
        if name not in W or M[name] != W[name]:
            if not any(name in b for b in bad):
                bad.append("%s differs" % name)
    if bad:
        print("; ".join(bad[:6]))
        return 1
    print("%d modules applied (r %d, scaling %g%s): every tensor of the merged export bit for bit" %
          (changed, cfg["r"], s, ", fan_in_fan_out" if fifo else ""))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "hand":
        hand(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "apply":
        sys.exit(apply(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif sys.argv[1] == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit(__doc__)

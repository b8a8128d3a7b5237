"""An independent float64 reader of a Hugging Face Llama-family model folder (config.json and
model.safetensors, the published formats), and the pieces the fine-tuning tests share: a tiny
Llama written by hand, a byte-level ChatML tokenizer and a rule-following chat data set.

The forward is transformers' LlamaForCausalLM written again in numpy (modeling_llama.py):
RMSNorm x / sqrt(mean(x^2) + rms_norm_eps) * w; q, k, v, o projections (out, in) without bias;
rotary positions by rotate-half (dims i and i + head_dim/2 of a head paired, inv_freq
rope_theta^(-2i/head_dim), or as rope_scaling's linear, llama3 or yarn rule sets it); num_key_value_heads groups shared by num_attention_heads /
num_key_value_heads query heads each; causal softmax(q k^T / sqrt(head_dim)) v; SwiGLU
down(silu(gate x) * up x); a final RMSNorm; lm_head, or embed_tokens when tie_word_embeddings.
Everything in float64 from the stored values. A PEFT LoRA adapter (adapter_config.json +
adapter_model.safetensors) is applied as W + scaling B A (peft's merge: scaling lora_alpha / r,
or lora_alpha / sqrt(r) with use_rslora). Nothing here imports trident's code."""
import json
import math
import os
import random
import struct

import numpy as np

_DT = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_safetensors(path):
    """{name: float64 array} of a safetensors file (F32, F16, BF16, F64)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        if v["dtype"] == "BF16":  # the top 16 bits of a float32
            u = np.frombuffer(blob[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(blob[a:b], dtype=_DT[v["dtype"]])
        out[k] = arr.reshape(v["shape"]).astype(np.float64)
    return out


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: {name: float32 array}, written in name order as F32, or BF16 (rounded to nearest even)."""
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k], dtype="<f4")
        if dtype == "BF16":
            u = a.view("<u4").astype(np.uint64)
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            b = a.tobytes()
        header[k] = {"dtype": dtype, "shape": list(tensors[k].shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def rope_frequencies(cfg, hd, theta):
    """(inv_freq (hd/2,), the cos/sin factor) of a config's rope_scaling, in float64, by the rules of
    transformers' modeling_rope_utils (written again here): none/default: theta^(-2i/hd); linear:
    divided by factor; llama3: wavelengths 2 pi / inv_freq above original / low_freq_factor divided by
    factor, below original / high_freq_factor kept, between blended by
    (original / wavelength - low) / (high - low); yarn: a ramp over dims between
    floor(d(beta_fast)) and ceil(d(beta_slow)), d(r) = hd ln(original / (2 pi r)) / (2 ln theta),
    mixing interpolated (inv_freq / factor) and extrapolated (inv_freq) frequencies, and cos and sin
    multiplied by attention_factor (default 0.1 ln(factor) + 1)."""
    base = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return base, 1.0
    f = float(rs["factor"])
    if kind == "linear":
        return base / f, 1.0
    if kind == "llama3":
        orig, lo, hi = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"]
        out = []
        for w in base:
            wl = 2 * math.pi / w
            if wl < orig / hi:
                out.append(w)
            elif wl > orig / lo:
                out.append(w / f)
            else:
                t = (orig / wl - lo) / (hi - lo)
                out.append((1 - t) * w / f + t * w)
        return np.array(out), 1.0
    if kind == "yarn":
        orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
        d = lambda r: hd * math.log(orig / (2 * math.pi * r)) / (2 * math.log(theta))
        lo, hi = max(math.floor(d(fast)), 0), min(math.ceil(d(slow)), hd - 1)
        if lo == hi:
            hi += 0.001
        keep = 1 - np.clip((np.arange(hd // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        att = rs.get("attention_factor") or (1.0 if f <= 1 else 0.1 * math.log(f) + 1)
        return base / f * (1 - keep) + base * keep, att
    raise ValueError(f"rope_type {kind}")


class Llama:
    """A Llama-family model: its config.json (a dict) and weights ({name: float64 array})."""

    def __init__(self, cfg, weights):
        self.cfg, self.W, c = cfg, weights, cfg
        self.H, self.L = c["hidden_size"], c["num_hidden_layers"]
        self.NH = c["num_attention_heads"]
        self.NKV = c.get("num_key_value_heads", self.NH)
        self.HD = c.get("head_dim") or self.H // self.NH
        self.eps, self.theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
        assert c.get("hidden_act", "silu") == "silu", c
        self.inv_freq, self.rope_scale = rope_frequencies(c, self.HD, self.theta)
        self.head = self.W["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else self.W["lm_head.weight"]

    @staticmethod
    def load(folder):
        """The model of a Hugging Face folder (config.json, model.safetensors)."""
        return Llama(json.load(open(os.path.join(folder, "config.json"))),
                     read_safetensors(os.path.join(folder, "model.safetensors")))

    def with_adapter(self, adapter_dir):
        """A new Llama: this one's weights with a PEFT LoRA adapter added (W + scaling B A)."""
        acfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
        assert acfg["peft_type"] == "LORA" and not acfg.get("fan_in_fan_out") and not acfg.get("use_dora"), acfg
        r, alpha = acfg["r"], acfg["lora_alpha"]
        scaling = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
        T = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
        W = dict(self.W)
        pre = "base_model.model."
        mods = sorted(k[len(pre):-len(".lora_A.weight")] for k in T if k.endswith(".lora_A.weight"))
        assert len(T) == 2 * len(mods) and mods, sorted(T)
        for m in mods:
            A, B = T[pre + m + ".lora_A.weight"], T[pre + m + ".lora_B.weight"]
            assert A.shape[0] == r and B.shape[1] == r, (m, A.shape, B.shape)
            W[m + ".weight"] = W[m + ".weight"] + scaling * (B @ A)
        return Llama(self.cfg, W)

    def _norm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):  # x (heads, n, hd): rotate-half
        hd = self.HD
        ang = np.outer(pos, self.inv_freq)
        cos = np.concatenate([np.cos(ang)] * 2, -1) * self.rope_scale
        sin = np.concatenate([np.sin(ang)] * 2, -1) * self.rope_scale
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + rot * sin

    def logits(self, ids):
        """(len(ids), vocab_size) float64 logits at every position (positions 0, 1, ...)."""
        W, n, hd = self.W, len(ids), self.HD
        x = W["model.embed_tokens.weight"][ids]
        pos = np.arange(n, dtype=np.float64)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        rep = self.NH // self.NKV
        for l in range(self.L):
            p = f"model.layers.{l}."
            h = self._norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(n, self.NH, hd).transpose(1, 0, 2)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(n, self.NKV, hd).transpose(1, 0, 2)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(n, self.NKV, hd).transpose(1, 0, 2)
            q, k = self._rope(q, pos), self._rope(k, pos)
            k, v = np.repeat(k, rep, 0), np.repeat(v, rep, 0)  # query head i reads group i // rep
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, self.NH * hd)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            h = self._norm(x, W[p + "post_attention_layernorm.weight"])
            g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
        return self._norm(x, W["model.norm.weight"]) @ self.head.T

    def token_losses(self, ids):
        """-log p(ids[t + 1] | ids[:t + 1]) for t in 0 .. len(ids) - 2, float64."""
        z = self.logits(ids[:-1])
        mx = z.max(-1, keepdims=True)
        lse = (mx + np.log(np.exp(z - mx).sum(-1, keepdims=True)))[:, 0]
        return lse - z[np.arange(len(ids) - 1), ids[1:]]


def read_indexed(prefix):
    """The documents of a Megatron indexed dataset (MMIDIDX v1: PREFIX.idx, PREFIX.bin) as lists."""
    b = open(prefix + ".idx", "rb").read()
    assert b[:9] == b"MMIDIDX\x00\x00"
    dt, (n, _) = b[17], struct.unpack_from("<QQ", b, 18)
    sizes, ptrs = struct.unpack_from("<%di" % n, b, 34), struct.unpack_from("<%dq" % n, b, 34 + 4 * n)
    c = {1: "B", 8: "H", 4: "i"}[dt]
    data = open(prefix + ".bin", "rb").read()
    return [list(struct.unpack_from("<%d%s" % (s, c), data, p)) for s, p in zip(sizes, ptrs)]


def megatron_split(split, size):
    """[begin, end) document ranges of Megatron's get_train_valid_test_split_ for '90,10,0'."""
    w = [float(s) for s in split.split(",")]
    w += [0.0] * (3 - len(w))
    w = [s / sum(w) for s in w]
    idx = [0]
    for s in w:
        idx.append(idx[-1] + int(round(s * float(size))))
    diff = idx[-1] - size
    idx = [idx[0]] + [i - diff for i in idx[1:]]
    return [(idx[i], idx[i + 1]) for i in range(3)]


# ---- the shared fixtures: a ChatML byte-level tokenizer, a tiny Llama, reverse-the-word chats ----
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_tokenizer(folder):
    """tokenizer.json (one token a byte, <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258) and
    tokenizer_config.json (ChatML as Qwen writes it, eos <|im_end|>) into FOLDER."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    vocab = {chars[b]: b for b in range(256)}
    added = []
    for i, c in [(256, "<|endoftext|>"), (257, "<|im_start|>"), (258, "<|im_end|>")]:
        vocab[c] = i
        added.append({"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    tok = {"version": "1.0", "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": []}}
    json.dump(tok, open(os.path.join(folder, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None},
              open(os.path.join(folder, "tokenizer_config.json"), "w"))


def write_tiny_llama(folder, hidden=64, layers=2, heads=4, kv_heads=2, ffn=176, vocab=259, positions=128,
                     tied=False, rope_theta=500000.0, eps=1e-5, seed=1, dtype="F32", rope_scaling=None):
    """A Hugging Face LlamaForCausalLM folder with random weights (normal, std 0.08; norms 1 + noise)
    stored as dtype (F32 or BF16), its config.json as transformers writes one, and the ChatML byte
    tokenizer."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    r = lambda *s: rng.normal(0, 0.08, s).astype(np.float32)
    nrm = lambda: (1 + rng.normal(0, 0.1, hidden)).astype(np.float32)
    T = {"model.embed_tokens.weight": r(vocab, hidden), "model.norm.weight": nrm()}
    if not tied:
        T["lm_head.weight"] = r(vocab, hidden)
    for l in range(layers):
        p = f"model.layers.{l}."
        T[p + "input_layernorm.weight"], T[p + "post_attention_layernorm.weight"] = nrm(), nrm()
        T[p + "self_attn.q_proj.weight"] = r(heads * hd, hidden)
        T[p + "self_attn.k_proj.weight"] = r(kv_heads * hd, hidden)
        T[p + "self_attn.v_proj.weight"] = r(kv_heads * hd, hidden)
        T[p + "self_attn.o_proj.weight"] = r(hidden, heads * hd)
        T[p + "mlp.gate_proj.weight"], T[p + "mlp.up_proj.weight"] = r(ffn, hidden), r(ffn, hidden)
        T[p + "mlp.down_proj.weight"] = r(hidden, ffn)
    write_safetensors(os.path.join(folder, "model.safetensors"), T, dtype)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": hd,
           "max_position_embeddings": positions, "rms_norm_eps": eps, "rope_theta": rope_theta,
           "rope_scaling": rope_scaling, "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
           "bos_token_id": None, "eos_token_id": 258,
           "torch_dtype": {"F32": "float32", "BF16": "bfloat16"}[dtype]}
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"), indent=2)
    write_tokenizer(folder)


def write_reverse_chats(path, n, seed=11, lo=3, hi=7):
    """N chat lines {"messages": [user: a word, assistant: the word reversed]} (a rule to learn)."""
    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(lo, hi)))
        if w in seen:
            continue
        seen.add(w)
        rows.append({"messages": [{"role": "user", "content": w}, {"role": "assistant", "content": w[::-1]}]})
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))

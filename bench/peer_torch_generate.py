#!/usr/bin/env python3
"""The PyTorch peer of `trident generate`: GPT-2 (the peer_torch_gpt2.py architecture) in plain torch
with a key/value cache per layer, greedy decoding of a batch of prompts (or with --sample, sampling at
temperature 0.9 cut to the 40 most likely and then to the fewest of those reaching 0.95 of the mass,
as trident's sampler cuts),
inference mode, fp32.

    python3 bench/peer_torch_generate.py --batch 8 --prompt 16 --new 128 --threads 2 [--no-cache] [--sample] [--device cuda]

Prints `tokens_per_s N` (generated tokens / seconds, the first step included) and `decode_tokens_per_s N`
(after the first step), as trident's log line does."""
import argparse, math, time
import torch, torch.nn as nn, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12); ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768); ap.add_argument("--vocab", type=int, default=50257)
ap.add_argument("--batch", type=int, default=1); ap.add_argument("--prompt", type=int, default=16)
ap.add_argument("--new", type=int, default=128); ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--no-cache", action="store_true")
ap.add_argument("--sample", action="store_true", help="temperature 0.9, top-k 40, top-p 0.95 instead of greedy")
ap.add_argument("--device", default="cpu", help="cpu, or cuda (fp32 either way; TF32 stays off, torch's default)")
a = ap.parse_args()
dev = torch.device(a.device)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
torch.set_num_threads(a.threads); torch.manual_seed(0)
L, NH, C, V, B = a.layers, a.heads, a.hidden, a.vocab, a.batch
D = C // NH

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.qkv, s.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln2, s.fc, s.fc2 = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x, cache, pos):
        T = x.shape[1]
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        q, k, v = [t.view(B, T, NH, D).transpose(1, 2) for t in (q, k, v)]
        if cache is not None:  # append, attend to everything so far
            cache[0][:, :, pos:pos + T], cache[1][:, :, pos:pos + T] = k, v
            k, v = cache[0][:, :, :pos + T], cache[1][:, :, :pos + T]
        S = k.shape[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).triu(S - T + 1)
        y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(1024, C)
        s.h, s.lnf = nn.ModuleList(Block() for _ in range(L)), nn.LayerNorm(C)
    def forward(s, idx, caches, pos):
        x = s.wte(idx) + s.wpe(torch.arange(pos, pos + idx.shape[1], device=idx.device))
        for b, c in zip(s.h, caches): x = b(x, c, pos)
        return s.lnf(x[:, -1]) @ s.wte.weight.t()

def sample(logits):  # as trident's sampler: the 40 most likely, then the fewest of those reaching 0.95
    p, ids = (logits / 0.9).softmax(-1).topk(40, -1)  # of the whole distribution's mass; one draw a row
    p = p.masked_fill(p.cumsum(-1) - p >= 0.95, 0.0)
    return ids.gather(-1, torch.multinomial(p, 1))

m = GPT().to(dev).eval()
tokens = torch.randint(0, V, (B, a.prompt), device=dev)
total = a.prompt + a.new
with torch.inference_mode():
    caches = [None] * L if a.no_cache else \
        [(torch.zeros(B, NH, total, D, device=dev), torch.zeros(B, NH, total, D, device=dev)) for _ in range(L)]
    if dev.type == "cuda":  # the kernels' first launches and cuBLAS's start, outside the timing
        m(tokens, [None] * L, 0); sync()
    t0 = time.perf_counter()
    logits = m(tokens, caches, 0)
    sync(); t1 = time.perf_counter()
    for i in range(a.new):
        nxt = sample(logits) if a.sample else logits.argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], 1)
        if i == a.new - 1: break
        if a.no_cache: logits = m(tokens, caches, 0)
        else: logits = m(nxt, caches, tokens.shape[1] - 1)
    sync(); t2 = time.perf_counter()
gen = B * a.new
print(f"torch {torch.__version__} {dev.type} batch {B} prompt {a.prompt} new {a.new} cache {not a.no_cache} "
      f"{'sampled' if a.sample else 'greedy'}")
print(f"tokens_per_s {gen / (t2 - t0):.1f}")
print(f"decode_tokens_per_s {(gen - B) / max(t2 - t1, 1e-9):.1f}")

#!/usr/bin/env python3
"""Peer for side-by-side speed comparison: one Llama-style training step in plain PyTorch.

  python3 bench/peer_torch_llama.py --layers 12 --hidden 768 --heads 12 --groups 4 --ffn 2048 \
      --vocab 128256 --mbs 4 --seq 64
  python3 bench/peer_torch_llama.py --device cuda --bf16 --compile ...   (a GPU: bench/gpu_speed.sh)

The same architecture trident trains with --normalization RMSNorm --position-embedding-type rope
--swiglu --group-query-attention --disable-bias-linear --untie-embeddings-and-output-weights:
pre-RMSNorm, rotary positions (rotate-half), grouped-query attention, SwiGLU MLP, no biases,
untied output layer, AdamW, fp32 (with --bf16: bf16 autocast; on cuda: fused AdamW; --compile:
torch.compile of the model, the first step compiling). Prints the best step time, tokens/s and model TFLOP/s (by
Megatron's formula, the one trident reports).
"""
import argparse, math, os, time
import torch, torch.nn as nn, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12); ap.add_argument("--hidden", type=int, default=768)
ap.add_argument("--heads", type=int, default=12); ap.add_argument("--groups", type=int, default=4)
ap.add_argument("--ffn", type=int, default=2048); ap.add_argument("--vocab", type=int, default=128256)
ap.add_argument("--mbs", type=int, default=4); ap.add_argument("--seq", type=int, default=64)
ap.add_argument("--theta", type=float, default=500000.0); ap.add_argument("--eps", type=float, default=1e-5)
ap.add_argument("--steps", type=int, default=6); ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--device", default="cpu"); ap.add_argument("--bf16", action="store_true")
ap.add_argument("--compile", action="store_true")
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
L, C, NH, G, Fh, V, B, T = a.layers, a.hidden, a.heads, a.groups, a.ffn, a.vocab, a.mbs, a.seq
D = C // NH
sdpa = getattr(F, "scaled_dot_product_attention", None)  # torch >= 2.0
mask = torch.ones(T, T, dtype=torch.bool, device=a.device).triu(1)

class RMSNorm(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.ones(C))
    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.eps) * s.w

inv = 1.0 / (a.theta ** (torch.arange(0, D, 2).float() / D))
ang = torch.outer(torch.arange(T).float(), inv)
cos, sin = torch.cat([ang, ang], -1).cos().to(a.device), torch.cat([ang, ang], -1).sin().to(a.device)

def rope(x):  # (B, heads, T, D), rotate-half
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos.to(x.dtype) + torch.cat([-x2, x1], -1) * sin.to(x.dtype)

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.n2 = RMSNorm(), RMSNorm()
        s.q, s.k, s.v = nn.Linear(C, NH * D, bias=False), nn.Linear(C, G * D, bias=False), nn.Linear(C, G * D, bias=False)
        s.o = nn.Linear(NH * D, C, bias=False)
        s.gate, s.up, s.down = nn.Linear(C, Fh, bias=False), nn.Linear(C, Fh, bias=False), nn.Linear(Fh, C, bias=False)
    def forward(s, x):
        h = s.n1(x)
        q = rope(s.q(h).view(B, T, NH, D).transpose(1, 2))
        k = rope(s.k(h).view(B, T, G, D).transpose(1, 2))
        v = s.v(h).view(B, T, G, D).transpose(1, 2)
        k, v = k.repeat_interleave(NH // G, 1), v.repeat_interleave(NH // G, 1)
        if sdpa: y = sdpa(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + s.o(y.transpose(1, 2).reshape(B, T, NH * D))
        h = s.n2(x)
        return x + s.down(F.silu(s.gate(h)) * s.up(h))

class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb, s.layers, s.norm = nn.Embedding(V, C), nn.ModuleList(Block() for _ in range(L)), RMSNorm()
        s.out = nn.Linear(C, V, bias=False)
    def forward(s, idx, tgt):
        x = s.emb(idx)
        for b in s.layers: x = b(x)
        return F.cross_entropy(s.out(s.norm(x)).view(-1, V), tgt.view(-1))

m = Llama().to(a.device)
N = sum(p.numel() for p in m.parameters())
kw = {"fused": True} if a.device == "cuda" else {}
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, **kw)
step_fn = torch.compile(m) if a.compile else m
x = torch.randint(0, V, (B, T), device=a.device); y = torch.randint(0, V, (B, T), device=a.device)
sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
times = []
for i in range(a.steps):
    sync(); t = time.perf_counter()
    with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
        loss = step_fn(x, y)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    sync(); times.append(time.perf_counter() - t)
best = min(times[1:]) if len(times) > 1 else times[0]
# Megatron's num_floating_point_operations (GQA, SwiGLU, untied logits)
flops = 12 * B * T * L * C * C * ((1 + G / NH + T / C) * (NH * D / C) + Fh / C * 1.5 + V / (2 * L * C))
print(f"torch {torch.__version__} {a.device} params {N} best_step_ms {best*1e3:.1f} "
      f"tokens_per_s {B*T/best:.1f} model_tflops {flops/best/1e12:.4f}")

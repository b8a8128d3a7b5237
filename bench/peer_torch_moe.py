#!/usr/bin/env python3
"""Peer for side-by-side speed comparison: one Mixtral-shaped training step in plain PyTorch.

  /usr/bin/python3 bench/peer_torch_moe.py --layers 12 --hidden 768 --heads 12 --groups 4 \
      --experts 8 --topk 2 --ffn 2048 --vocab 50304 --mbs 4 --seq 128        # the MoE
  /usr/bin/python3 bench/peer_torch_moe.py ... --experts 0 --ffn 4096          # the dense peer
  /usr/bin/python3 bench/peer_torch_moe.py --check                             # the dispatch's check

(Debian's python3-torch; bench/moe.sh runs it against `trident train --num-experts`.) The CLI and
the output line are those of ../shared/bench/peer_torch_gpt2.py (--layers --heads --hidden --vocab
--mbs --seq --steps --threads --device --bf16 --compile), plus the MoE's own flags.

The model is what trident trains with --normalization RMSNorm --position-embedding-type rope
--swiglu --group-query-attention --disable-bias-linear --untie-embeddings-and-output-weights
--num-experts E --moe-router-topk k --moe-ffn-hidden-size F --moe-aux-loss-coeff c:
  pre-RMSNorm layers, rotary positions (rotate-half), grouped-query attention, no biases, untied
  output layer, AdamW, fp32;
  the MLP of every layer is E SwiGLU experts (each Linear(h, F) gate and up, Linear(F, h) down)
  and a router Linear(h, E): each token goes to the k experts of largest logits, weighted by the
  softmax over those k (equal to Mixtral's softmax over all E renormalised over the k chosen);
  dropless: every expert takes every token routed to it;
  dispatch: the (token, choice) pairs sorted by expert (a stable sort: tokens in order within an
  expert, as Megatron's permute), each expert's rows gathered with index_select, its MLP run on
  them, the outputs weighted and scattered back with index_add_; no per-token loop, no grouped
  GEMM or other library;
  the load-balancing loss of Switch Transformer as Megatron's aux_loss (over the micro-batch's T
  tokens): c * E / (k T^2) * sum_e (sum_t softmax(logits_t)_e) * tokens_e, added per layer.
With --experts 0 the MLP is one dense SwiGLU of hidden size --ffn (the dense model of the same
active parameters has --ffn = k * the experts' F).

Synthetic data: one fixed batch of random token ids. Prints the best and median step time (over
the steps after the first), tokens/s at the best step, the busiest expert's tokens against the mean
in the worst layer at the last step (expert_load_max_mean, as trident's metrics), the parameters (all, and active: those a
token goes through: the k experts of each layer, not the other E - k) and model TFLOP/s by
Megatron's num_floating_point_operations, the count trident reports:
  12 B s L h^2 ((1 + G/NH + s/h) + ffn_active / h * 1.5) + 6 B s h V
with ffn_active = k * F for the MoE and F for the dense model (the router's 2 E h per token is
not counted, as Megatron counts it not), head size h / NH.

--check runs the MoE block at a small size in double precision against a reference that loops
over the tokens and their k experts one at a time (Mixtral's routing: softmax over all E, top-k,
renormalised): the output and every gradient must agree within 1e-12; then exits.
"""
import argparse, math, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12); ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768); ap.add_argument("--vocab", type=int, default=50304)
ap.add_argument("--mbs", type=int, default=4); ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--steps", type=int, default=4); ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--device", default="cpu"); ap.add_argument("--bf16", action="store_true")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--groups", type=int, default=4, help="key/value heads (grouped-query attention)")
ap.add_argument("--experts", type=int, default=8, help="experts per layer; 0: a dense SwiGLU MLP")
ap.add_argument("--topk", type=int, default=2, help="experts each token goes to")
ap.add_argument("--ffn", type=int, default=2048, help="each expert's hidden size (the dense MLP's with --experts 0)")
ap.add_argument("--aux-loss-coeff", type=float, default=1e-2, help="load-balancing loss weight (0: none)")
ap.add_argument("--theta", type=float, default=1e6, help="rotary base (Mixtral's)")
ap.add_argument("--eps", type=float, default=1e-5)
ap.add_argument("--check", action="store_true", help="check the dispatch against a per-token loop, then exit")
a = ap.parse_args()
if a.experts and not 0 < a.topk <= a.experts:
    sys.exit(f"peer_torch_moe.py: --topk {a.topk} must be in 1..--experts {a.experts}")
if a.hidden % a.heads or a.heads % a.groups:
    sys.exit(f"peer_torch_moe.py: --hidden {a.hidden} must divide by --heads {a.heads}, and --heads by --groups {a.groups}")
torch.set_num_threads(a.threads); torch.manual_seed(0)


class Experts(nn.Module):
    """E SwiGLU MLPs and the router; forward(x (N, h)) -> (y (N, h), load-balancing loss)."""
    def __init__(s, C, E, K, Fe, coeff):
        super().__init__()
        s.E, s.K, s.Fe, s.coeff = E, K, Fe, coeff
        s.router = nn.Linear(C, E, bias=False)
        s.fc = nn.ModuleList(nn.Linear(C, 2 * Fe, bias=False) for _ in range(E))  # [gate | up]
        s.fc2 = nn.ModuleList(nn.Linear(Fe, C, bias=False) for _ in range(E))

    def forward(s, x):
        N = x.shape[0]
        logits = s.router(x)                                  # (N, E)
        top, choice = logits.topk(s.K, -1)                    # (N, k): ties to the lower index
        weight = top.softmax(-1)                              # over the k chosen
        flat = choice.reshape(-1)                             # (N k,): pair p = token p // k
        _, order = torch.sort(flat, stable=True)              # the pairs in expert order
        counts = torch.bincount(flat, minlength=s.E)
        s.load = counts.max().item() * s.E / counts.sum().item()  # the busiest expert against the mean
        tok, w = order // s.K, weight.reshape(-1)[order]
        y, start = torch.zeros_like(x), 0
        for e, n in enumerate(counts.tolist()):
            if n == 0: continue
            rows = tok[start:start + n]
            g, u = s.fc[e](x.index_select(0, rows)).split(s.Fe, -1)
            y.index_add_(0, rows, s.fc2[e](F.silu(g) * u) * w[start:start + n, None])
            start += n
        aux = x.new_zeros(())
        if s.coeff:
            probs = logits.softmax(-1)
            aux = s.coeff * s.E / (s.K * N * N) * (probs.sum(0) * counts.to(probs.dtype)).sum()
        return y, aux

    def reference(s, x):
        """Token by token, Mixtral's routing (softmax over all E, top-k, renormalised)."""
        out = []
        for t in range(x.shape[0]):
            p = s.router(x[t]).softmax(-1)
            pv, pe = p.topk(s.K)
            acc = x.new_zeros(x.shape[1])
            for j in range(s.K):
                g, u = s.fc[pe[j]](x[t]).split(s.Fe)
                acc = acc + pv[j] / pv.sum() * s.fc2[pe[j]](F.silu(g) * u)
            out.append(acc)
        return torch.stack(out)


def check():
    """The dispatch (index_select/index_add_, sorted by expert) against the per-token loop."""
    torch.manual_seed(1)
    m = Experts(16, 6, 2, 8, 0).double()
    x = torch.randn(40, 16, dtype=torch.float64, requires_grad=True)
    y, _ = m(x)
    gy = torch.randn_like(y)
    got = torch.autograd.grad((y * gy).sum(), [x] + list(m.parameters()))
    ref = m.reference(x)
    want = torch.autograd.grad((ref * gy).sum(), [x] + list(m.parameters()))
    err = max([(y - ref).abs().max().item()] + [(g - w).abs().max().item() for g, w in zip(got, want)])
    loads = torch.bincount(m.router(x).topk(2, -1)[1].reshape(-1), minlength=6).tolist()
    print(f"check: MoE block (40 tokens, 6 experts, top-2, tokens per expert {loads}) against the "
          f"per-token loop, output and {len(got)} gradients: max abs difference {err:.2e}")
    if not err < 1e-12: sys.exit("check: FAILED (limit 1e-12)")


if a.check:
    check(); sys.exit(0)

L, C, NH, G, V, B, T = a.layers, a.hidden, a.heads, a.groups, a.vocab, a.mbs, a.seq
E, K, Fe = a.experts, a.topk, a.ffn
D = C // NH
sdpa = getattr(F, "scaled_dot_product_attention", None)  # torch >= 2.0
mask = torch.ones(T, T, dtype=torch.bool, device=a.device).triu(1)
inv = 1.0 / (a.theta ** (torch.arange(0, D, 2).float() / D))
ang = torch.outer(torch.arange(T).float(), inv)
cos, sin = [f(torch.cat([ang, ang], -1)).to(a.device) for f in (torch.cos, torch.sin)]


def rope(x):  # (B, heads, T, D), rotate-half
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class RMSNorm(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.ones(C))
    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.eps) * s.w


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.n2 = RMSNorm(), RMSNorm()
        s.q, s.kv = nn.Linear(C, NH * D, bias=False), nn.Linear(C, 2 * G * D, bias=False)
        s.o = nn.Linear(NH * D, C, bias=False)
        if E: s.moe = Experts(C, E, K, Fe, a.aux_loss_coeff)
        else: s.fc, s.fc2 = nn.Linear(C, 2 * Fe, bias=False), nn.Linear(Fe, C, bias=False)

    def forward(s, x):
        h = s.n1(x)
        q = rope(s.q(h).view(B, T, NH, D).transpose(1, 2))
        k, v = s.kv(h).view(B, T, 2 * G, D).transpose(1, 2).split(G, 1)
        k, v = rope(k).repeat_interleave(NH // G, 1), v.repeat_interleave(NH // G, 1)
        if sdpa: y = sdpa(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + s.o(y.transpose(1, 2).reshape(B, T, NH * D))
        h = s.n2(x)
        if E:
            y, aux = s.moe(h.reshape(B * T, C))
            return x + y.view(B, T, C), aux
        g, u = s.fc(h).split(Fe, -1)
        return x + s.fc2(F.silu(g) * u), x.new_zeros(())


class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb, s.layers, s.norm = nn.Embedding(V, C), nn.ModuleList(Block() for _ in range(L)), RMSNorm()
        s.out = nn.Linear(C, V, bias=False)
        for p in s.parameters():
            if p.dim() == 2: nn.init.normal_(p, std=0.02)

    def forward(s, idx, tgt):
        x, aux = s.emb(idx), 0
        for b in s.layers:
            x, a_l = b(x)
            aux = aux + a_l
        return F.cross_entropy(s.out(s.norm(x)).view(-1, V).float(), tgt.view(-1)) + aux


m = Model().to(a.device)
N = sum(p.numel() for p in m.parameters())
idle = sum(p.numel() for l in m.layers if E for e in range(E - K) for p in
           list(l.moe.fc[e].parameters()) + list(l.moe.fc2[e].parameters()))  # E - k experts a layer
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
rest = times[1:] if len(times) > 1 else times
best, median = min(rest), sorted(rest)[len(rest) // 2]
ffn_active = K * Fe if E else Fe
flops = 12 * B * T * L * C * C * ((1 + G / NH + T / C) + ffn_active / C * 1.5) + 6 * B * T * C * V
print(f"torch {torch.__version__} {a.device} params {N} active_params {N - idle} best_step_ms {best*1e3:.1f} "
      f"median_step_ms {median*1e3:.1f} tokens_per_s {B*T/best:.1f} model_tflops {flops/best/1e12:.4f} "
      f"loss {loss.item():.4f}" + (f" expert_load_max_mean {max(l.moe.load for l in m.layers):.4g}" if E else ""))

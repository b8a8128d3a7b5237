#!/usr/bin/env python3
"""Peer for side-by-side speed comparison: one Megatron-BERT training step in plain PyTorch.

  /usr/bin/python3 bench/peer_torch_bert.py --layers 12 --hidden 768 --heads 12 --mbs 8 --seq 128

(Debian's python3-torch; bench/bert.sh runs it against `trident train --model bert`.)

The model is Megatron-BERT in Megatron's layer order, the one trident's BERT computes:
  embeddings   word (V rows, padded up to a multiple of 128 as --make-vocab-size-divisible-by does:
               30522 -> 30592) + learned positions (512) + token type (2), then dropout;
  L layers     pre-LayerNorm: x + proj(attn(ln1(x))), then x + fc2(gelu_tanh(fc(ln2(x)))); fused
               qkv Linear(h, 3h) with bias, bidirectional attention with a key-padding mask (keys at
               positions >= the sample's length are masked out, filled with -10000 as Megatron's
               attention_mask_func does), FFN 4h, GeLU's tanh approximation;
  final LayerNorm;
  LM head      dense(h, h) + gelu_tanh + LayerNorm, logits = x @ word_embedding^T + bias (padded V),
               computed at every position as Megatron does; MLM loss = cross entropy over the
               positions whose label != -1, averaged over them;
  binary head  pooler tanh(dense(h, h)(x[:, 0])), then Linear(h, 2): sentence-order loss = cross
               entropy averaged over the batch;
  Megatron's initialisation (normal 0.02, output projections 0.02 / sqrt(2L));
  loss = mlm + sop, AdamW step every iteration, fp32 (or --bf16: bf16 autocast on the CPU).
The softmax runs over the padded vocabulary (no column is masked): so does Megatron's, the padding
rows are simply never a label. Dropout (--dropout, default 0 for the benchmark) is applied where
Megatron applies hidden/attention dropout: after the embeddings, on the attention probabilities and
on both residual branches; at 0 it is skipped altogether.

Synthetic data, one fixed batch: random token ids, [CLS] first, a random length in [seq/2, seq]
per sample (all full with --full; the rest padding, token 0, key-masked), token type 0 then 1 from
a random split point, 15% of the non-padding positions after [CLS] chosen as MLM labels (input
replaced by [MASK]), random sentence-order labels.

Prints the best step time (over the steps after the first), tokens/s (mbs * seq per step, padding
positions counted as tokens, as Megatron's throughput counts them) and model TFLOP/s by Megatron's
BERT formula. With no recomputation Megatron counts, per iteration,

    72 * B * s * L * h^2 * (1 + s / (6h) + V / (12 L h))    FLOPs

which is (forward, then backward at twice the forward: x3)
  layers   3 * L * (24 B s h^2 + 4 B s^2 h) = 72 B s L h^2 (1 + s / (6h)):
           per layer forward, qkv 6 B s h^2 + proj 2 B s h^2 + fc and fc2 16 B s h^2 = 24 B s h^2,
           and the attention scores q k^T and probs @ v, 2 B s^2 h each;
  logits   3 * 2 B s h V = 6 B s h V = 72 B s L h^2 * V / (12 L h)   (V the padded vocabulary).
Not counted (as Megatron does not): the LM head's dense(h, h), the pooler and binary head,
embeddings, LayerNorms, softmaxes, GeLU, the loss and the optimizer.
"""
import argparse, math, os, time
import torch, torch.nn as nn, torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12); ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768); ap.add_argument("--vocab", type=int, default=30522)
ap.add_argument("--mbs", type=int, default=8); ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--steps", type=int, default=6); ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--bf16", action="store_true", help="bf16 autocast on the CPU")
ap.add_argument("--dropout", type=float, default=0.0, help="hidden and attention dropout (default 0)")
ap.add_argument("--full", action="store_true", help="every sample full length (no padding)")
ap.add_argument("--max-pos", type=int, default=512, help="learned positions (Megatron-BERT: 512)")
ap.add_argument("--divisible-by", type=int, default=128, help="pad the vocabulary to a multiple of this")
ap.add_argument("--lr", type=float, default=1e-4); ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--show-loss", action="store_true", help="print every step's losses and time")
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(a.seed)
L, NH, C, V, B, T, P = a.layers, a.heads, a.hidden, a.vocab, a.mbs, a.seq, a.dropout
VP = (V + a.divisible_by - 1) // a.divisible_by * a.divisible_by
D = C // NH
assert C % NH == 0, "--hidden must be a multiple of --heads"
assert T <= a.max_pos, "--seq must be <= --max-pos (512 learned positions)"
assert V > 103, "--vocab must hold [CLS] 101 and [MASK] 103"
CLS, MASK = 101, 103

def drop(x):
    return F.dropout(x, P, True) if P > 0 else x

def gelu(x):
    return F.gelu(x, approximate="tanh")

class Layer(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.qkv, s.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln2, s.fc, s.fc2 = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x, keymask):  # keymask (B, 1, 1, T), True = masked out
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        q, k, v = [t.view(B, T, NH, D).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = drop(att.masked_fill(keymask, -10000.0).softmax(-1))
        x = x + drop(s.proj((att @ v).transpose(1, 2).reshape(B, T, C)))
        return x + drop(s.fc2(gelu(s.fc(s.ln2(x)))))

class Bert(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe, s.tte = nn.Embedding(VP, C), nn.Embedding(a.max_pos, C), nn.Embedding(2, C)
        s.layers, s.lnf = nn.ModuleList(Layer() for _ in range(L)), nn.LayerNorm(C)
        s.lm_dense, s.lm_ln, s.lm_bias = nn.Linear(C, C), nn.LayerNorm(C), nn.Parameter(torch.zeros(VP))
        s.pooler, s.binary = nn.Linear(C, C), nn.Linear(C, 2)
    def forward(s, idx, types, lengths, labels, sop):
        keymask = (torch.arange(T)[None, :] >= lengths[:, None]).view(B, 1, 1, T)
        x = drop(s.wte(idx) + s.wpe(torch.arange(T)) + s.tte(types))
        for layer in s.layers: x = layer(x, keymask)
        x = s.lnf(x)
        h = s.lm_ln(gelu(s.lm_dense(x)).float())  # (bf16 autocast leaves layer_norm unconverted)
        logits = h @ s.wte.weight.t() + s.lm_bias
        mlm = F.cross_entropy(logits.view(-1, VP).float(), labels.view(-1), ignore_index=-1)
        pooled = torch.tanh(s.pooler(x[:, 0]))
        sop_loss = F.cross_entropy(s.binary(pooled).float(), sop)
        return mlm + sop_loss, mlm, sop_loss

def batch():
    idx = torch.randint(0, V, (B, T))
    idx[:, 0] = CLS
    lengths = torch.full((B,), T) if a.full else torch.randint(T // 2, T + 1, (B,)).clamp(min=2)
    pos = torch.arange(T)[None, :]
    valid = pos < lengths[:, None]
    idx[~valid] = 0
    split = (torch.rand(B) * (lengths - 1).float()).long() + 1  # sentence B starts here
    types = ((pos >= split[:, None]) & valid).long()
    sel = (torch.rand(B, T) < 0.15) & valid & (pos > 0)
    if not sel.any(): sel[0, 1] = True  # at least one label at tiny shapes
    labels = torch.where(sel, idx, torch.full_like(idx, -1))
    idx = torch.where(sel, torch.full_like(idx, MASK), idx)
    return idx, types, lengths, labels, torch.randint(0, 2, (B,))

m = Bert()
# Megatron's initialisation: normal(0, 0.02) weights and embeddings, the layers' output
# projections (proj, fc2) at 0.02 / sqrt(2L), zero biases, LayerNorm 1 and 0
with torch.no_grad():
    for name, p in m.named_parameters():
        if name.endswith("bias") or ".ln" in name or name.startswith(("lnf", "lm_ln")): continue
        out = name.endswith(("proj.weight", "fc2.weight"))
        p.normal_(0.0, 0.02 / math.sqrt(2 * L) if out else 0.02)
m.train()
N = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=a.lr)
data = batch()
times, losses = [], []
for i in range(a.steps):
    t = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        loss, mlm, sop = m(*data)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    times.append(time.perf_counter() - t)
    losses.append(loss.item())
    if a.show_loss:
        print(f"step {i + 1} loss {loss.item():.4f} mlm {mlm.item():.4f} sop {sop.item():.4f} "
              f"ms {times[-1] * 1e3:.1f}", flush=True)
best = min(times[1:]) if len(times) > 1 else times[0]
# Megatron's BERT FLOPs per iteration (see the docstring), V the padded vocabulary
flops = 72 * B * T * L * C * C * (1 + T / (6 * C) + VP / (12 * L * C))
print(f"torch {torch.__version__} cpu params {N} best_step_ms {best*1e3:.1f} "
      f"tokens_per_s {B*T/best:.1f} model_tflops {flops/best/1e12:.4f} "
      f"loss_first {losses[0]:.4f} loss_last {losses[-1]:.4f}")

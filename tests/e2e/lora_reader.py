#!/usr/bin/env python3
"""LoRA fine-tuning held by an independent float64 reader of the Hugging Face exports
(tests/e2e/llama_reader.py: transformers' LlamaForCausalLM written again in numpy, and PEFT's
W + scaling B A). For a tiny Llama-shaped Hugging Face model written here (RMSNorm, rope with
rope_theta 500000, 4 heads in 2 key/value groups, SwiGLU), once with an untied head and once tied:
 - imported (convert --from hf), its chats preprocessed (preprocess --sft, ChatML over a byte-level
   tokenizer), fine-tuned with LoRA on every linear module (train --sft --finetune --lora-rank 8);
 - the merged export (convert --to hf) read by the reader: its loss on the held-out split's tokens in
   eval's windows equals `trident eval`'s on the LoRA checkpoint, and its answer-only loss over the
   held-out samples (each cut to seq-length + 1, targets whose next token is the answer's) equals
   `trident eval --sft`'s, both to 2e-6 relative (fp32 against float64);
 - the PEFT export (convert --to peft) applied by the reader to the Hugging Face base in float64 gives
   the logits of the merged export (to 1e-5, while the adapters move them by more than 0.05), and the
   merged export leaves every tensor the adapters do not touch bitwise the base's.
Env: TRIDENT; WORK (a scratch folder, emptied)."""
import json, os, shutil, subprocess, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reader as lr

T = os.environ["TRIDENT"]
WORK = os.environ.get("WORK") or "/tmp/trident-lora-reader"
SCALE = int(os.environ.get("TD_TIME_SCALE", "1"))
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
env = dict(os.environ, OMP_NUM_THREADS="1")
passed = failed = 0


def check(cond, msg, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok:", msg, flush=True)
    else:
        failed += 1
        print("FAIL:", msg + (": " + str(detail) if detail else ""), flush=True)


def run(*args):
    p = subprocess.run([T, *args], env=env, capture_output=True, text=True, timeout=120 * SCALE)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: trident {' '.join(args)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def metrics(path):
    return json.loads(open(path).read().splitlines()[-1])


def rel(a, b):
    return abs(a - b) / abs(b)


SEQ, SPLIT = 32, "90,10,0"


def case(tied):
    name = "tied, BF16" if tied else "untied, F32"
    d = os.path.join(WORK, "tied" if tied else "untied")
    hf, ds = os.path.join(d, "hf"), os.path.join(d, "chats")
    lr.write_tiny_llama(hf, tied=tied, seed=2 if tied else 1, dtype="BF16" if tied else "F32")
    lr.write_reverse_chats(os.path.join(d, "chats.jsonl"), 200, seed=5)
    tok = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", os.path.join(hf, "tokenizer.json")]
    run("convert", "--from", "hf", hf, "--to", "trident", os.path.join(d, "base"))
    run("preprocess", "--sft", "--sft-format", "chat", "--chat-template", hf, *tok,
        "--input", os.path.join(d, "chats.jsonl"), "--output-prefix", ds)
    ds += "_sft_document"
    run("train", "--sft", "--data-path", ds, *tok, "--load", os.path.join(d, "base"), "--finetune",
        "--seq-length", str(SEQ), "--lora-rank", "8", "--lora-alpha", "16",
        "--lora-target-modules", "all-linear", "--lora-dropout", "0.05", "--micro-batch-size", "8",
        "--global-batch-size", "16", "--train-iters", "12", "--lr", "2e-2", "--split", SPLIT, "--eval-iters", "0",
        "--seed", "3", "--save", os.path.join(d, "lora"))
    run("convert", "--from", "trident", os.path.join(d, "lora"), "--to", "hf", os.path.join(d, "merged"))
    run("convert", "--from", "trident", os.path.join(d, "lora"), "--to", "peft", os.path.join(d, "adapter"))
    base = lr.Llama.load(hf)
    merged = lr.Llama.load(os.path.join(d, "merged"))
    peft = base.with_adapter(os.path.join(d, "adapter"))
    check(merged.cfg.get("tie_word_embeddings") == tied and ("lm_head.weight" in merged.W) != tied,
          f"{name}: the export's head is {'tied' if tied else 'untied'} as the base's")

    docs, masks = lr.read_indexed(ds), lr.read_indexed(ds + "_answer_mask")
    b, e = lr.megatron_split(SPLIT, len(docs))[1]
    valid = list(range(b, e))

    # eval's strided loss (K = S): the split's documents concatenated, windows of SEQ + 1 every SEQ
    run("eval", "--load", os.path.join(d, "lora"), "--data-path", ds, "--split", SPLIT, "--split-name", "valid",
        "--seq-length", str(SEQ), "--metrics-file", os.path.join(d, "eval.jsonl"))
    m = metrics(os.path.join(d, "eval.jsonl"))
    toks = [t for i in valid for t in docs[i]]
    wins = (len(toks) - SEQ - 1) // SEQ + 1
    losses = np.concatenate([merged.token_losses(toks[w * SEQ:w * SEQ + SEQ + 1]) for w in range(wins)])
    want = float(losses.mean())
    check(m["tokens"] == len(losses) and rel(m["loss"], want) <= 2e-6,
          f"{name}: eval of the LoRA checkpoint {m['loss']:.9f} over {m['tokens']} tokens = the reader's loss of the "
          f"merged export {want:.9f} over {len(losses)} (rel {rel(m['loss'], want):.1e})", m)
    base_loss = float(np.concatenate([base.token_losses(toks[w * SEQ:w * SEQ + SEQ + 1]) for w in range(wins)]).mean())
    check(abs(base_loss - want) > 100 * 2e-6 * want, f"{name}: the base's loss {base_loss:.6f} is another")

    # eval --sft: one sample a row, cut to SEQ + 1 tokens, target t counted when token t + 1 is the answer's
    run("eval", "--sft", "--load", os.path.join(d, "lora"), "--split-name", "valid", "--micro-batch-size", "4",
        "--metrics-file", os.path.join(d, "sft.jsonl"))
    m = metrics(os.path.join(d, "sft.jsonl"))
    tot, cnt, cut = 0.0, 0, 0
    for i in valid:
        s, a = docs[i][:SEQ + 1], masks[i][:SEQ + 1]
        cut += len(docs[i]) > SEQ + 1
        l = merged.token_losses(s)
        keep = np.array(a[1:], dtype=bool)
        tot, cnt = tot + float(l[keep].sum()), cnt + int(keep.sum())
    want = tot / cnt
    check(rel(m["loss"], want) <= 2e-6,
          f"{name}: eval --sft {m['loss']:.9f} = the reader's answer-only loss {want:.9f} over {len(valid)} held-out "
          f"samples, {cnt} answer targets, {cut} cut (rel {rel(m['loss'], want):.1e})", m)
    check(cut > 0 and (m["samples"], m["samples_cut"], m["tokens"]) == (len(valid), cut, cnt),
          f"{name}: {len(valid)} samples, {cut} of them cut, {cnt} answer targets, as eval --sft counts them", m)

    # the PEFT adapter on the base (float64) against the merged export; the untouched tensors bitwise
    worst = moved = 0.0
    for i in valid[:6]:
        zm, zp, zb = merged.logits(docs[i]), peft.logits(docs[i]), base.logits(docs[i])
        worst, moved = max(worst, float(np.abs(zm - zp).max())), max(moved, float(np.abs(zm - zb).max()))
    check(worst <= 1e-5 and moved > 0.05,
          f"{name}: the PEFT adapter applied to the base gives the merged export's logits (max diff {worst:.1e}; "
          f"the adapters move them by {moved:.3f})")
    adapted = {k for k in peft.W if peft.W[k] is not base.W[k]}
    same = [k for k in base.W if k not in adapted and np.array_equal(base.W[k], merged.W[k])]
    check(len(adapted) == 7 * base.L and len(same) == len(base.W) - len(adapted),
          f"{name}: {len(adapted)} adapted weights; the other {len(same)} tensors bitwise the base's",
          sorted(set(base.W) - adapted - set(same)))


for tied in (False, True):
    case(tied)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

"""Rope scaling (Llama 3.1's llama3, YaRN, linear) held by the independent float64 reader
(llama_reader.py, transformers' formulas written again in numpy): a tiny Hugging Face Llama with
rope_scaling, original_max_position_embeddings 64, is imported (convert --from hf) and scored by
`trident eval` at windows of 96 tokens (longer than the original context); the loss equals the
reader's to 1e-6 relative (fp32 against float64), the reader with a planted wrong factor is
another, the export (convert --to hf) keeps rope_scaling, and an unknown rope_type is refused with
one line.
Env: TRIDENT; WORK (a scratch folder, emptied)."""
import json, os, re, shutil, subprocess, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reader as lr

T = os.environ["TRIDENT"]
WORK = os.environ.get("WORK") or "/tmp/trident-rope-scaling"
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


def run(*args, ok=True):
    p = subprocess.run([T, *args], env=env, capture_output=True, text=True, timeout=120 * SCALE)
    if ok and p.returncode != 0:
        raise SystemExit(f"FAIL: trident {' '.join(args)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def err_lines(p):
    """The lines of p's stderr, less a sanitizer build's leak-checker suppression table (printed at
    exit: dashes, 'Suppressions used:', its header and its rows)."""
    return [l for l in p.stderr.strip().splitlines()
            if not re.match(r"^-*$|^Suppressions used:|^ *count +bytes template|^ *[0-9]+ +[0-9]+ ", l)]


def rel(a, b):
    return abs(a - b) / abs(b)


SEQ, SPLIT, ORIG, TOL = 96, "80,20,0", 64, 1e-6
CASES = {
    "llama3": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIG},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG, "beta_fast": 32.0,
             "beta_slow": 1.0},
    "linear": {"rope_type": "linear", "factor": 2.0},
}


def case(name, rs):
    d = os.path.join(WORK, name)
    hf, ds = os.path.join(d, "hf"), os.path.join(d, "chats")
    # max_position_embeddings = factor * original, so every transformers version reads the same factor
    lr.write_tiny_llama(hf, hidden=64, heads=4, kv_heads=2, positions=256, rope_theta=10000.0, seed=7,
                        rope_scaling=rs)
    lr.write_reverse_chats(os.path.join(d, "chats.jsonl"), 120, seed=5, lo=20, hi=40)
    tok = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", os.path.join(hf, "tokenizer.json")]
    run("convert", "--from", "hf", hf, "--to", "trident", os.path.join(d, "ckpt"))
    run("preprocess", "--sft", "--sft-format", "chat", "--chat-template", hf, *tok,
        "--input", os.path.join(d, "chats.jsonl"), "--output-prefix", ds)
    ds += "_sft_document"
    run("eval", "--load", os.path.join(d, "ckpt"), "--data-path", ds, "--split", SPLIT, "--split-name", "valid",
        "--seq-length", str(SEQ), "--metrics-file", os.path.join(d, "eval.jsonl"))
    m = json.loads(open(os.path.join(d, "eval.jsonl")).read().splitlines()[-1])
    docs = lr.read_indexed(ds)
    b, e = lr.megatron_split(SPLIT, len(docs))[1]
    toks = [t for i in range(b, e) for t in docs[i]]
    wins = (len(toks) - SEQ - 1) // SEQ + 1

    def loss(model):
        return float(np.concatenate([model.token_losses(toks[w * SEQ:w * SEQ + SEQ + 1]) for w in range(wins)]).mean())

    ref = lr.Llama.load(hf)
    want = loss(ref)
    check(wins >= 2 and m["tokens"] == wins * SEQ and rel(m["loss"], want) <= 2e-6,
          f"{name}: eval {m['loss']:.9f} over {m['tokens']} tokens at windows of {SEQ} = the reader's {want:.9f} "
          f"(rel {rel(m['loss'], want):.1e})", m)
    bad = dict(ref.cfg, rope_scaling=dict(rs, factor=rs["factor"] * 2))
    wrong = loss(lr.Llama(bad, ref.W))
    check(rel(wrong, want) > 10 * TOL, f"{name}: a planted factor {rs['factor'] * 2} scores "
          f"{wrong:.6f}, another loss (the check can fail)")
    plain = loss(lr.Llama(dict(ref.cfg, rope_scaling=None), ref.W))
    check(rel(plain, want) > 10 * TOL, f"{name}: unscaled rotary positions score {plain:.6f}, another")
    # generation (the key/value cache path, one position a step) past the original context: greedy
    # tokens as the reader's argmax, prompt and continuation reaching position 100 > 64
    prompt, new = b"The quick brown fox jumps over the lazy dog, then it runs far away into the woods.", 20
    ids, margin = list(prompt), []
    for _ in range(new):
        z = ref.logits(ids)[-1]
        nxt, top = int(np.argmax(z)), np.sort(z)
        margin.append(top[-1] - top[-2])
        if nxt >= 256:  # <|endoftext|> or <|im_end|>: generate stops there
            break
        ids.append(nxt)
    want_text = bytes(ids[len(prompt):])
    p = subprocess.run([T, "generate", "--load", os.path.join(d, "ckpt"), *tok, "--prompt", prompt.decode(),
                        "--max-new-tokens", str(new), "--greedy", "--seq-length", "128"],
                       env=env, capture_output=True, timeout=120 * SCALE)
    check(p.returncode == 0 and p.stdout == prompt + want_text + b"\n",
          f"{name}: generate's greedy tokens at positions {len(prompt)}..{len(ids)} are the reader's "
          f"(smallest top-2 logit margin {min(margin):.1e})", (p.stdout[-60:], want_text))
    run("convert", "--from", "trident", os.path.join(d, "ckpt"), "--to", "hf", os.path.join(d, "out"))
    got = json.load(open(os.path.join(d, "out", "config.json")))["rope_scaling"]
    same = isinstance(got, dict) and all(
        (got.get(k) == v if isinstance(v, str) else abs(got.get(k, -1) - v) <= 1e-6 * abs(v)) for k, v in rs.items())
    check(same, f"{name}: the export's rope_scaling keeps {rs}", got)
    back = loss(lr.Llama.load(os.path.join(d, "out")))
    check(rel(back, want) <= 1e-8, f"{name}: the reader scores the export as the original ({back:.9f}; yarn's "
          f"attention_factor is written rounded to float)")


for name, rs in CASES.items():
    case(name, rs)

# an unknown rope_type: refused with one line that names it
d = os.path.join(WORK, "dynamic")
lr.write_tiny_llama(d, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
p = run("convert", "--from", "hf", d, "--to", "trident", os.path.join(WORK, "dyn-ckpt"), ok=False)
err = err_lines(p)
check(p.returncode != 0 and len(err) == 1 and "dynamic" in err[0], "rope_type dynamic is refused with one line",
      (p.returncode, p.stderr))

# the flags: refused with one line and exit 2 where they contradict or lack what they need; a
# checkpoint keeps its rope scaling in meta.json and refuses another on --load
d = os.path.join(WORK, "linear")
base = ["train", "--position-embedding-type", "rope", "--num-layers", "1", "--hidden-size", "16",
        "--num-attention-heads", "2", "--seq-length", "8", "--data-path", os.path.join(d, "chats_sft_document"),
        "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", os.path.join(d, "hf", "tokenizer.json"),
        "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "2", "--lr", "1e-3"]
for bad, want in [(["--rope-scaling-type", "yarn"], "needs --rope-scaling-factor"),
                  (["--use-rope-scaling", "--rope-scaling-type", "yarn"], "contradicts --rope-scaling-type yarn"),
                  (["--use-rope-scaling", "--yarn-beta-fast", "8"], "need --rope-scaling-type yarn"),
                  (["--rope-scaling-factor", "4"], "needs rope scaling"),
                  (["--use-rope-scaling", "--rope-scaling-factor", "8", "--rotary-scaling-factor", "4"], "give one"),
                  (["--rope-type", "yarn", "--rope-scaling-type", "llama3"], "contradicts --rope-scaling-type llama3"),
                  (["--rope-type", "yarn", "--rotary-scaling-factor", "4", "--mscale", "1",
                    "--yarn-attention-factor", "1.2"], "give one"),
                  (["--position-embedding-type", "learned_absolute", "--use-rope-scaling"],
                   "needs --position-embedding-type rope")]:
    p = run(*base, *bad, ok=False)
    err = err_lines(p)
    check(p.returncode == 2 and len(err) == 1 and want in err[0], f"{' '.join(bad)}: exit 2, one line", p.stderr)
ck = os.path.join(WORK, "flags-ckpt")
run(*base, "--rope-scaling-type", "yarn", "--rotary-scaling-factor", "4", "--original-max-position-embeddings", "4",
    "--save", ck)
meta = json.load(open(os.path.join(ck, "iter_0000002", "meta.json")))
check(json.dumps(meta).count('"rope_scaling_type": "yarn"') >= 1 and '"original_max_position_embeddings": 4' in
      json.dumps(meta), "train --rope-scaling-type yarn: meta.json keeps the rope scaling")
# Megatron's names (--rope-type yarn, --rotary-scaling-factor, --mscale 1, --mscale-all-dim 0.5): the
# attention factor (0.1 ln 4 + 1) / (0.05 ln 4 + 1) = 1.0654
ck2 = os.path.join(WORK, "flags-megatron")
run(*base, "--rope-type", "yarn", "--rotary-scaling-factor", "4", "--original-max-position-embeddings", "4",
    "--mscale", "1", "--mscale-all-dim", "0.5", "--save", ck2)
cfg2 = json.load(open(os.path.join(ck2, "iter_0000002", "meta.json")))
flat = json.dumps(cfg2)
af = (0.1 * np.log(4) + 1) / (0.05 * np.log(4) + 1)
check('"rope_scaling_type": "yarn"' in flat and f"{af:.6f}"[:6] in flat,
      f"--rope-type yarn --mscale 1 --mscale-all-dim 0.5: yarn with attention factor {af:.6f} in meta.json", flat[:400])
p = run(*base, "--load", ck, "--rope-scaling-type", "llama3", "--train-iters", "3", ok=False)
check(p.returncode != 0 and "rope_scaling_type yarn" in p.stderr, "--load with another rope scaling is refused",
      p.stderr[-300:])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""Loglikelihood throughput: trident serve answering lm-evaluation-harness's loglikelihood requests (a batch of
--batch prompts of --tokens token ids, "echo": true, "logprobs": 1, "max_tokens": 1, as its local-completions sends
them) against `trident eval --task LOGLIKELIHOOD` on the same items (context = the first --tokens - 6 ids,
continuation = the last 6), on the same checkpoint and threads. Items/s of each, and the largest difference of
their per-item log-likelihoods. See docs/serve.md.

  python3 bench/serve_loglikelihood.py --trident build/trident --load ckpt --vocab-file gpt2/vocab.json \\
      --merge-file gpt2/merges.txt --data-text tinyshakespeare.txt [--batch 32 --tokens 256 --repeats 3]"""
import argparse, json, os, re, signal, socket, subprocess, sys, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--trident", required=True)
ap.add_argument("--load", required=True)
ap.add_argument("--vocab-file", required=True)
ap.add_argument("--merge-file", required=True)
ap.add_argument("--data-text", required=True, help="a text file the prompts are cut from")
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--tokens", type=int, default=256)
ap.add_argument("--repeats", type=int, default=3)
a = ap.parse_args()
TOK = ["--vocab-file", a.vocab_file, "--merge-file", a.merge_file]
work = tempfile.mkdtemp(prefix="llbench.")
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
log = os.path.join(work, "serve.log")
srv = subprocess.Popen([a.trident, "serve", "--load", a.load, *TOK, "--port", str(port), "--max-batch", str(a.batch)],
                       stdout=open(log, "w"), stderr=subprocess.STDOUT)
try:
    t0 = time.time()
    while "listening on" not in open(log).read():
        if srv.poll() is not None or time.time() - t0 > 120: sys.exit("the server did not start: " + open(log).read()[-1000:])
        time.sleep(0.2)
    def post(path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=3600) as r: return json.loads(r.read())
    ids = post("/tokenize", {"prompt": open(a.data_text).read()[:200000]})["tokens"]
    prompts = [ids[i * a.tokens:(i + 1) * a.tokens] for i in range(a.batch)]
    ctxlen = a.tokens - 6
    body = {"model": "trident", "prompt": prompts, "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234,
            "echo": True}
    post("/v1/completions", body)  # warm
    times = []
    for _ in range(a.repeats):
        t0 = time.time(); out = post("/v1/completions", body); times.append(time.time() - t0)
    served = [sum(c["logprobs"]["token_logprobs"][ctxlen:-1]) for c in sorted(out["choices"], key=lambda c: c["index"])]
finally:
    srv.send_signal(signal.SIGTERM); srv.wait(60)
items = os.path.join(work, "items.jsonl")
with open(items, "w") as f:
    for p in prompts: f.write(json.dumps({"context": p[:ctxlen], "continuation": p[ctxlen:]}) + "\n")
metrics = os.path.join(work, "ll.jsonl")
t0 = time.time()
r = subprocess.run([a.trident, "eval", "--load", a.load, *TOK, "--task", "LOGLIKELIHOOD", "--valid-data", items,
                    "--seq-length", str(a.tokens), "--micro-batch-size", str(a.batch), "--metrics-file", metrics],
                   capture_output=True, text=True)
wall = time.time() - t0
if r.returncode: sys.exit(r.stderr[-1000:])
scoring = float(re.search(r"tp \d+ x pp \d+, ([0-9.]+) s", r.stderr + r.stdout)[1])
ev = [json.loads(l)["loglikelihood"] for l in open(metrics) if '"item"' in l]
best = min(times)
print(f"serve: {a.batch} prompts of {a.tokens} tokens a request, {a.repeats} requests: {min(times):.2f} s best, "
      f"{sum(times) / len(times):.2f} s mean -> {a.batch / best:.1f} items/s (best)")
print(f"eval:  the same {a.batch} items, --micro-batch-size {a.batch}: {scoring:.2f} s scoring ({wall:.2f} s with "
      f"loading) -> {a.batch / scoring:.1f} items/s")
print(f"largest per-item difference: {max(abs(x - y) for x, y in zip(served, ev)):.2e}")

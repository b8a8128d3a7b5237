#!/usr/bin/env python3
"""trident serve end to end on loopback (docs/serve.md), on 1 rank and on 2 (tp 2):
 (a) 4 concurrent greedy requests answer what `trident generate --greedy` prints for the same prompts;
 (b) a burst of 30 bad requests (bad JSON, wrong types, a body over the limit, an over-long prompt, an unknown
     path, a wrong method) each get their 4xx with a JSON error, and a good request is answered after;
 (c) /v1/completions with "stream": true sends server-sent events ending in [DONE];
 (d) SIGTERM while requests are in flight and queued: they are answered and the server exits 0 (under mpirun the
     signal goes to rank 0, whose pid the log names: mpirun itself delays it, see docs/serve.md).
Every wait is bounded. Environment: TRIDENT, DATA, VOCAB, MERGES, WORK."""
import json, os, re, shutil, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

T, WORK = os.environ["TRIDENT"], os.environ["WORK"]
TOK = ["--vocab-file", os.environ["VOCAB"], "--merge-file", os.environ["MERGES"]]
shutil.rmtree(WORK, ignore_errors=True); os.makedirs(WORK); os.chdir(WORK)
env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
passed = failed = 0
def ok(m):
    global passed; passed += 1; print("ok:", m, flush=True)
def bad(m):
    global failed; failed += 1; print("FAIL:", m, flush=True)

subprocess.run([T, "train", "--data-path", os.environ["DATA"], *TOK, "--split", "949,50,1", "--num-layers", "2",
                "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64", "--micro-batch-size", "8",
                "--train-iters", "60", "--lr", "4e-3", "--hidden-dropout", "0", "--attention-dropout", "0",
                "--eval-iters", "0", "--log-interval", "1000", "--make-vocab-size-divisible-by", "256", "--save", "ck"],
               env=dict(env, OMP_NUM_THREADS="2"), check=True, capture_output=True, timeout=300)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def call(port, method, path, body, timeout=60):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r: return r.status, r.read()
    except urllib.error.HTTPError as e: return e.code, e.read()

def start(np_, tp):
    port = free_port()
    cmd = [T, "serve", "--load", "ck", *TOK, "--port", str(port), "--tensor-model-parallel-size", str(tp)]
    if np_ > 1: cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + cmd
    log = f"serve{np_}.log"
    p = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if call(port, "GET", "/api", b"", timeout=2)[0] == 405: return p, port, log
        except OSError: pass
        if p.poll() is not None: break
        time.sleep(0.1)
    bad(f"the server on {np_} rank(s) did not answer in 60 s"); print(open(log).read()); p.kill(); sys.exit(1)

def rank0_pid(log):  # "serve: listening on http://...; pid N"
    line = [l for l in open(log) if "serve: listening on" in l][0]
    return int(line.rsplit("pid ", 1)[1])

def sigterm_in_flight(p, port, log, pid, tag):
    """(d): six requests of eight prompts at once (one batch each); SIGTERM to pid as soon as the first is answered,
    with one batch in flight and the rest queued (the log's count): every request is answered, the server stops."""
    res, first = [], threading.Event()
    def long_req():
        res.append(call(port, "PUT", "/api", {"prompts": ["First Citizen:"] * 8, "tokens_to_generate": 40,
                                              "temperature": 0})[0])
        first.set()
    th = [threading.Thread(target=long_req) for _ in range(6)]
    [t.start() for t in th]; first.wait(120)
    os.kill(pid, signal.SIGTERM); [t.join(120) for t in th]
    try: rc = p.wait(120)
    except subprocess.TimeoutExpired: p.kill(); p.wait(10); rc = "hung"
    text = open(log).read()
    queued = re.search(r"serve: stopping: finishing (\d+) queued", text)
    stopped = text.count("serve: stopped") == 1 and queued and int(queued[1]) >= 1
    (ok if res == [200] * 6 and stopped and rc == 0 else bad)(
        f"{tag}: SIGTERM with {queued[1] if queued else '?'} of 6 requests still queued: answered {res}, "
        f"'serve: stopped', exit {rc}")

prompts = ["First Citizen: Before we proceed", "ROMEO: I will", "KING HENRY: My lords", "O"]
expect = {}
for pr in prompts:
    out = subprocess.run([T, "generate", "--load", "ck", *TOK, "--prompt", pr, "--max-new-tokens", "24", "--greedy"],
                         env=env, capture_output=True, timeout=120).stdout.decode(errors="replace")
    text = "".join(l for l in out.splitlines(True) if not l.startswith("generate: "))
    expect[pr] = text[:-1] if text.endswith("\n") else text  # generate ends the text with one newline

for np_, tp in ((1, 1), (2, 2)):
    p, port, log = start(np_, tp)
    tag = f"{np_} rank{'s' if np_ > 1 else ''}"
    # (a) concurrent clients
    got = {}
    def client(pr):
        st, body = call(port, "PUT", "/api", {"prompts": [pr], "tokens_to_generate": 24, "temperature": 0})
        got[pr] = (st, json.loads(body)["text"][0] if st == 200 else body)
    th = [threading.Thread(target=client, args=(pr,)) for pr in prompts]
    [t.start() for t in th]; [t.join(120) for t in th]
    same = all(got.get(pr, (0,))[0] == 200 and got[pr][1] == expect[pr] for pr in prompts)
    (ok if same else bad)(f"{tag}: 4 concurrent clients get what trident generate prints" +
                          ("" if same else f": {got} vs {expect}"))
    # (b) a burst of bad requests
    big = b'{"prompts": ["' + b"a" * (2 << 20) + b'"]}'
    cases = [("PUT", "/api", b"{not json", 400), ("PUT", "/api", b'{"prompts": "x"}', 400),
             ("PUT", "/api", b'{"prompts": [1]}', 400), ("PUT", "/api", b'{"prompts": ["a"], "temperature": "hot"}', 400),
             ("PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": -3}', 400),
             ("PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 100000}', 400),
             ("PUT", "/api", json.dumps({"prompts": [" the" * 200]}).encode(), 400), ("PUT", "/api", big, 413),
             ("POST", "/v1/completions", b'{"prompt": ["a", 2]}', 400), ("POST", "/v1/completions", b'[]', 400),
             ("GET", "/v1/completions", b"", 405), ("POST", "/nowhere", b"{}", 404), ("DELETE", "/api", b"", 405)]
    codes_ok = True
    for i in range(30):
        m, path, body, want = cases[i % len(cases)]
        st, resp = call(port, m, path, body)
        try: has_error = "error" in json.loads(resp)
        except ValueError: has_error = False
        if st != want or not has_error: codes_ok = False; print("  got", st, resp[:120], "for", m, path, body[:60])
    st, resp = call(port, "PUT", "/api", {"prompts": ["ROMEO: I will"], "tokens_to_generate": 24, "temperature": 0})
    (ok if codes_ok and st == 200 and json.loads(resp)["text"][0] == expect["ROMEO: I will"] else bad)(
        f"{tag}: 30 bad requests get their 4xx with a JSON error; a good one is answered after")
    # Megatron's log-probabilities: one per token after the first, each <= 0
    st, resp = call(port, "PUT", "/api", {"prompts": ["ROMEO: I will", "O"], "tokens_to_generate": 8,
                                          "temperature": 0, "logprobs": True})
    j = json.loads(resp) if st == 200 else {}
    good = st == 200 and len(j.get("logprobs") or []) == 2 and all(
        len(lp) == len(seg) - 1 and all(-1e9 < x <= 0 for x in lp) for lp, seg in zip(j["logprobs"], j["segments"]))
    (ok if good else bad)(f"{tag}: \"logprobs\": true gives one log-probability a token after the first" +
                          ("" if good else f": {resp[:300]}"))
    # (c) streaming
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                 data=json.dumps({"prompt": "ROMEO:", "max_tokens": 6, "temperature": 0, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [l for l in r.read().decode(errors="replace").split("\n\n") if l.startswith("data: ")]
    (ok if events and events[-1] == "data: [DONE]" and all("choices" in e for e in events[:-1]) else bad)(
        f"{tag}: the stream sends {len(events) - 1} token events, then [DONE]")
    ids = {json.loads(e[6:])["id"] for e in events[:-1]}
    st, resp = call(port, "POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 2, "temperature": 0})
    other = json.loads(resp).get("id") if st == 200 else None
    (ok if len(ids) == 1 and other and other not in ids else bad)(
        f"{tag}: a stream's events share one completion id, another request gets another: {ids}, {other}")
    # (d) SIGTERM to rank 0 with requests in flight and queued: every rank stops and the job exits 0
    sigterm_in_flight(p, port, log, rank0_pid(log), tag)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""trident serve end to end on loopback (docs/serve.md), on 1 rank and on 2 (tp 2):
 (a) 4 concurrent greedy requests answer what `trident generate --greedy` prints for the same prompts;
 (b) a burst of 30 bad requests (bad JSON, wrong types, a body over the limit, an over-long prompt, an unknown
     path, a wrong method) each get their 4xx with a JSON error, and a good request is answered after;
 (c) /v1/completions with "stream": true sends server-sent events ending in [DONE];
 (d) SIGTERM while requests are in flight and queued: they are answered and the server exits 0 (under mpirun the
     signal goes to rank 0, whose pid the log names: mpirun itself delays it, see docs/serve.md);
 (e) a prompt holding U+0000 is read whole: "a\u0000b" is 3 tokens (GPT-2's BPE: "a", byte 0, "b") and is echoed;
 (f) the last streamed event carries finish_reason "length" or "stop", then [DONE];
 (g) a model that always ends "a" with the end-of-document token: /api's text is "a", /v1/completions' text is ""
     with finish_reason "stop", the stream's last event says "stop", and trident generate prints "a": the token's
     text <|endoftext|> is never printed;
 (h) on 1 rank, lock-out (in a thread beside the rest: it mostly waits on the server's timers): 200 idle
     connections from 127.0.0.2 (over --max-connections-per-ip) leave 127.0.0.1 served; idle ones are closed after
     --idle-timeout; 9 client addresses filling --max-connections leave a fresh client served at once (the oldest idle
     one is dropped for it); a client trickling its body or its headers is closed at --request-timeout; and SIGTERM with such a client exits
     within --shutdown-grace.
 (i) /v1/completions and /api refuse, by name with 400, each field they do not honour (best_of, penalties, suffix,
     logit_bias, unknown fields), and accept the same fields at their no-op values (n 1, echo false, logprobs
     null, ...) with the same text; lm-evaluation-harness's loglikelihood request is answered (its whole flow:
     tests/e2e/lm_eval_flow.py).
Every wait is bounded. Environment: TRIDENT, DATA, VOCAB, MERGES, WORK, MODEL (a saved checkpoint: the shared
e2e/gen_models fixture)."""
import atexit, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request
SCALE = int(os.environ.get('TD_TIME_SCALE', '1'))  # the build's slowness (tests/CMakeLists.txt, Limits): 10 under the sanitizers

T, WORK = os.environ["TRIDENT"], os.environ["WORK"]
TOK = ["--vocab-file", os.environ["VOCAB"], "--merge-file", os.environ["MERGES"]]
shutil.rmtree(WORK, ignore_errors=True); os.makedirs(WORK); os.chdir(WORK)
env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
_base = os.environ.get("OMPI_MCA_orte_tmpdir_base", "/tmp")


def penv():
    """env with a session directory base of this process's own: servers and `trident generate` run
    at once, and Open MPI 4.1 removes a shared base's top directory under a starting job
    (tests/session_dir.sh)."""
    os.makedirs(_base, exist_ok=True)
    return dict(env, OMPI_MCA_orte_tmpdir_base=tempfile.mkdtemp(prefix="s.", dir=_base))
passed = failed = 0
count_lock = threading.Lock()  # (h) runs in a thread of its own
def ok(m):
    global passed
    with count_lock: passed += 1; print("ok:", m, flush=True)
def bad(m):
    global failed
    with count_lock: failed += 1; print("FAIL:", m, flush=True)

CK = os.environ["MODEL"]  # trained once by e2e/gen_models (tests/e2e/gen_models.sh), shared with e2e/generate

# (g)'s model: documents "a" only, so after "a" comes the end-of-document token (and after it "a").
# 100 iterations: at 40 the loss can still be ln 2 (a and the token equally likely anywhere: the
# initialisation decides), at 80 it was 0.16, at 120 0.002.
with open("a.jsonl", "w") as f:
    for _ in range(400): f.write('{"text": "a"}\n')
subprocess.run([T, "preprocess", "--input", "a.jsonl", "--output-prefix", "a", "--append-eod", *TOK], env=penv(),
               check=True, capture_output=True, timeout=120 * SCALE)
subprocess.run([T, "train", "--data-path", "a_text_document", *TOK, "--split", "100,0,0", "--num-layers", "1",
                "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "4",
                "--train-iters", "100", "--lr", "1e-2", "--hidden-dropout", "0", "--attention-dropout", "0",
                "--eval-iters", "0", "--log-interval", "1000", "--make-vocab-size-divisible-by", "256", "--peak-tflops", "1",
                "--save", "eodck"],
               env=penv(), check=True, capture_output=True, timeout=300 * SCALE)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def call(port, method, path, body, timeout=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout or 60 * SCALE) as r: return r.status, r.read()
    except urllib.error.HTTPError as e: return e.code, e.read()

def start(np_, tp, ck=CK, extra=(), tag=""):
    port = free_port()
    cmd = [T, "serve", "--load", ck, *TOK, "--port", str(port), "--tensor-model-parallel-size", str(tp), *extra]
    if np_ > 1: cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + cmd
    log = f"serve{np_}{tag}.log"
    p = subprocess.Popen(cmd, env=penv(), stdout=open(log, "w"), stderr=subprocess.STDOUT)
    atexit.register(lambda: p.poll() is None and p.kill())  # a failed check never leaves a server behind
    for _ in range(600):
        try:
            if call(port, "GET", "/api", b"", timeout=2)[0] == 405: return p, port, log
        except OSError: pass
        if p.poll() is not None: break
        time.sleep(0.1)
    bad(f"the server on {np_} rank(s) did not answer in 60 s"); print(open(log).read()); p.kill(); sys.exit(1)

def rank0_pid(log):  # "serve: listening on http://...; pid N"
    line = [l for l in open(log) if "serve: listening on" in l][0]
    return int(re.search(r"; pid (\d+)", line)[1])

def sigterm_in_flight(p, port, log, pid, tag):
    """(d): six requests of eight prompts at once (one batch each); SIGTERM to pid as soon as the first is answered,
    with one batch in flight and the rest queued (the log's count): every request is answered, the server stops."""
    res, first = [], threading.Event()
    def long_req():
        res.append(call(port, "PUT", "/api", {"prompts": ["First Citizen:"] * 8, "tokens_to_generate": 40,
                                              "temperature": 0})[0])
        first.set()
    th = [threading.Thread(target=long_req) for _ in range(6)]
    [t.start() for t in th]; first.wait(120 * SCALE)
    os.kill(pid, signal.SIGTERM); [t.join(120 * SCALE) for t in th]
    try: rc = p.wait(120 * SCALE)
    except subprocess.TimeoutExpired: p.kill(); p.wait(10); rc = "hung"
    text = open(log).read()
    queued = re.search(r"serve: stopping: finishing (\d+) queued", text)
    stopped = text.count("serve: stopped") == 1 and queued and int(queued[1]) >= 1
    (ok if res == [200] * 6 and stopped and rc == 0 else bad)(
        f"{tag}: SIGTERM with {queued[1] if queued else '?'} of 6 requests still queued: answered {res}, "
        f"'serve: stopped', exit {rc}")

# (h) lock-out and slow clients, on 1 rank. Mostly waits on the server's own timers (--idle-timeout 3 s,
# --request-timeout 4 s, --shutdown-grace 2 s: about 20 s), so it runs in a thread beside (a)-(g), against its
# own servers and port.
def lockout():
    LIMITS = ["--max-connections", "64", "--max-connections-per-ip", "8", "--idle-timeout", "3", "--request-timeout", "4",
              "--shutdown-grace", "2"]

    def idle_from(addr, n):
        """n connections from source address addr that send nothing (refused ones come back closed at once)."""
        out = []
        for _ in range(n):
            c = socket.socket(); c.settimeout(5)
            try: c.bind((addr, 0)); c.connect(("127.0.0.1", port)); out.append(c)
            except OSError: c.close()
        return out

    def closed_by_server(socks, within):
        """How many of socks the server closes (EOF or reset) within `within` seconds."""
        left, t0 = list(socks), time.time()
        closed = 0
        while left and time.time() - t0 < within:
            for c in list(left):
                c.settimeout(0.05)
                try:
                    if c.recv(1) == b"": closed += 1; left.remove(c)
                except socket.timeout: pass
                except OSError: closed += 1; left.remove(c)
        for c in socks: c.close()
        return closed

    def served(within):
        """Seconds until a fresh client from 127.0.0.1 gets an answer (retrying refusals), or None."""
        t0 = time.time()
        while time.time() - t0 < within:
            try:
                if call(port, "POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 2, "temperature": 0},
                        timeout=10)[0] == 200: return time.time() - t0
            except OSError: time.sleep(0.2)
        return None

    p, port, log = start(1, 1, extra=LIMITS, tag="limits")
    socks = idle_from("127.0.0.2", 200)
    t = served(30)
    (ok if t is not None else bad)(f"200 idle connections from 127.0.0.2: 127.0.0.1 is served" +
                                   (f" in {t:.1f} s" if t is not None else " never (30 s)"))
    n = closed_by_server(socks, 30)
    (ok if n == len(socks) else bad)(f"the {len(socks)} idle connections are closed by the server ({n}) within "
                                     "--idle-timeout 3 s (checked for 30 s)")
    socks = [c for k in range(2, 11) for c in idle_from(f"127.0.0.{k}", 8)]  # 72 tries at a limit of 64
    t = served(60)
    (ok if t is not None and t < 2 else bad)(
        f"{len(socks)} idle connections from 9 addresses fill --max-connections 64: a fresh client is served at once "
        "(the oldest idle one dropped for it)" + (f": after {t:.1f} s" if t is not None else ": never"))
    closed_by_server(socks, 30)

    def slow_body(rate_s):
        """A client sending its headers, then one body byte every rate_s seconds (Content-Length 1000)."""
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        return c

    def trickle(c, seconds, rate_s):
        """Sends a byte every rate_s seconds for at most `seconds`; the seconds until the server closed it, or None."""
        t0 = time.time()
        while time.time() - t0 < seconds:
            try: c.sendall(b" ")
            except OSError: return time.time() - t0
            c.settimeout(rate_s)
            try:
                if c.recv(1024) == b"": return time.time() - t0
            except socket.timeout: pass
            except OSError: return time.time() - t0
        return None

    t = trickle(slow_body(1), 30, 1)
    (ok if t is not None else bad)("a client trickling its body (a byte a second) is closed at --request-timeout 4 s" +
                                   (f": after {t:.1f} s" if t is not None else ": not within 30 s"))
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nX-Slow: ")  # headers never finished: the handler never runs
    t = trickle(c, 30, 1)
    c.close()
    (ok if t is not None else bad)("a client trickling its headers (a byte a second) is closed at --request-timeout 4 s" +
                                   (f": after {t:.1f} s" if t is not None else ": not within 30 s"))
    text = open(log).read()
    (ok if "sent no whole request within --request-timeout 4 s" in text else bad)("the log says so")
    p.send_signal(signal.SIGTERM); p.wait(60 * SCALE)

    p, port, log = start(1, 1, extra=["--idle-timeout", "600", "--request-timeout", "600", "--shutdown-grace", "2"],
                         tag="grace")
    c = slow_body(1)
    done = threading.Event()
    def keep(): trickle(c, 60, 0.5); done.set()
    th = threading.Thread(target=keep); th.start(); time.sleep(1)
    t0 = time.time(); p.send_signal(signal.SIGTERM)
    try: rc = p.wait(60 * SCALE)
    except subprocess.TimeoutExpired: p.kill(); p.wait(10); rc = "hung"
    took = time.time() - t0
    th.join(70 * SCALE); c.close()
    text = open(log).read()
    (ok if rc == 0 and "after the 2 s grace" in text else bad)(
        f"SIGTERM with a client still sending its body: exit {rc} after {took:.1f} s (--shutdown-grace 2)" +
        ("" if rc == 0 else text[-500:]))
lockout_thread = threading.Thread(target=lockout)
lockout_thread.start()

prompts = ["First Citizen: Before we proceed", "ROMEO: I will", "KING HENRY: My lords", "O"]
expect = {}
for pr in prompts:
    out = subprocess.run([T, "generate", "--load", CK, *TOK, "--prompt", pr, "--max-new-tokens", "24", "--greedy"],
                         env=penv(), capture_output=True, timeout=120 * SCALE).stdout.decode(errors="replace")
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
    [t.start() for t in th]; [t.join(120 * SCALE) for t in th]
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
    # (i) fields the server does not honour are refused by name (400), never answered as if heard; their no-op
    # values are accepted and change nothing
    refused = [("best_of", {"best_of": 3}), ("presence_penalty", {"presence_penalty": 0.5}),
               ("frequency_penalty", {"frequency_penalty": 1}), ("logit_bias", {"logit_bias": {"50256": -100}}),
               ("suffix", {"suffix": "end"}), ("frobnicate", {"frobnicate": 1}), ("stream_options", {"stream_options": {"a": 1}}),
               ("logprobs", {"logprobs": True}), ("echo", {"echo": True, "stream": True})]
    wrong = []
    for name, extra in refused:
        st, resp = call(port, "POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 2, **extra})
        msg = json.loads(resp).get("error", "") if st == 400 else ""
        if f'"{name}"' not in msg: wrong.append((extra, st, resp[:200]))
    # what lm-evaluation-harness sends for a loglikelihood request: answered, the prompt's tokens and one more
    st, resp = call(port, "POST", "/v1/completions", {"model": "gpt2", "prompt": [[49, 2662, 6, 25, 314, 481]],
                                                      "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True,
                                                      "seed": 1234})
    lp = json.loads(resp)["choices"][0]["logprobs"] if st == 200 else {}
    if st != 200 or len(lp.get("token_logprobs", [])) != 7 or lp["token_logprobs"][0] is not None:
        wrong.append(("lm-eval loglikelihood", st, resp[:200]))
    for name, extra in [("stop_on_eol", {"stop_on_eol": True}), ("beam_width", {"beam_width": 2}),
                        ("add_BOS", {"add_BOS": True}), ("bogus", {"bogus": 1})]:
        st, resp = call(port, "PUT", "/api", {"prompts": ["ROMEO:"], "tokens_to_generate": 2, **extra})
        if st != 400 or f'"{name}"' not in json.loads(resp).get("error", ""): wrong.append((extra, st, resp[:200]))
    (ok if not wrong else bad)(f"{tag}: {len(refused) + 4} requests asking for what is not built are refused (400) naming the field; lm-eval's loglikelihood request is answered" +
                               ("" if not wrong else f": {wrong}"))
    plain = {"prompt": "ROMEO: I will", "max_tokens": 4, "temperature": 0}
    st, resp = call(port, "POST", "/v1/completions", plain)
    st2, resp2 = call(port, "POST", "/v1/completions", {**plain, "model": "trident", "user": "u", "n": 1, "best_of": 1,
                                                        "echo": False, "logprobs": None, "stop": None, "suffix": None,
                                                        "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {},
                                                        "stream_options": None})
    st3, resp3 = call(port, "PUT", "/api", {"prompts": ["ROMEO: I will"], "tokens_to_generate": 4, "temperature": 0,
                                            "add_BOS": False, "stop_on_eol": False, "no_log": True, "beam_width": None})
    good = (st == st2 == st3 == 200 and json.loads(resp)["choices"][0]["text"] == json.loads(resp2)["choices"][0]["text"]
            and json.loads(resp3)["text"][0] == "ROMEO: I will" + json.loads(resp)["choices"][0]["text"])
    (ok if good else bad)(f"{tag}: the same fields at their no-op values are accepted and change nothing" +
                          ("" if good else f": {st} {st2} {resp2[:200]} {st3} {resp3[:200]}"))
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
    with urllib.request.urlopen(req, timeout=60 * SCALE) as r:
        events = [l for l in r.read().decode(errors="replace").split("\n\n") if l.startswith("data: ")]
    (ok if events and events[-1] == "data: [DONE]" and all("choices" in e for e in events[:-1]) else bad)(
        f"{tag}: the stream sends {len(events) - 1} token events, then [DONE]")
    ids = {json.loads(e[6:])["id"] for e in events[:-1]}
    st, resp = call(port, "POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 2, "temperature": 0})
    other = json.loads(resp).get("id") if st == 200 else None
    (ok if len(ids) == 1 and other and other not in ids else bad)(
        f"{tag}: a stream's events share one completion id, another request gets another: {ids}, {other}")
    # (e) U+0000 inside a prompt
    st, resp = call(port, "PUT", "/api", {"prompts": ["a\u0000b"], "tokens_to_generate": 1, "temperature": 0})
    j = json.loads(resp) if st == 200 else {}
    good = st == 200 and j["text"][0].startswith("a\u0000b") and j["segments"][0][:3] == ["a", "\u0000", "b"]
    st, resp = call(port, "POST", "/v1/completions", {"prompt": "a\u0000b", "max_tokens": 1, "temperature": 0})
    good = good and st == 200 and json.loads(resp)["usage"]["prompt_tokens"] == 3
    (ok if good else bad)(f"{tag}: a prompt holding U+0000 is read whole (3 tokens) and echoed" +
                          ("" if good else f": {resp[:300]}"))
    # (f) the stream's last event says why it ended
    fin = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1]]
    texts = [json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]]
    good = fin and all(f is None for f in fin[:-1]) and (
        (fin[-1] == "length" and len(fin) - 1 == 6) or (fin[-1] == "stop" and len(fin) - 1 < 6)) and texts[-1] == ""
    (ok if good else bad)(f"{tag}: the stream's events carry finish_reason null, the last '{fin[-1] if fin else None}'"
                          + ("" if good else f": {fin}"))
    # (d) SIGTERM to rank 0 with requests in flight and queued: every rank stops and the job exits 0
    sigterm_in_flight(p, port, log, rank0_pid(log), tag)
# (g) the end-of-document token ends the text and is never printed
p, port, log = start(1, 1, ck="eodck", tag="eod")
st, resp = call(port, "PUT", "/api", {"prompts": ["a"], "tokens_to_generate": 5, "temperature": 0})
meg = json.loads(resp) if st == 200 else {}
st2, resp2 = call(port, "POST", "/v1/completions", {"prompt": "a", "max_tokens": 5, "temperature": 0})
oai = json.loads(resp2)["choices"][0] if st2 == 200 else {}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                             data=json.dumps({"prompt": "a", "max_tokens": 5, "temperature": 0, "stream": True}).encode())
with urllib.request.urlopen(req, timeout=60 * SCALE) as r: raw = r.read().decode(errors="replace")
events = [l for l in raw.split("\n\n") if l.startswith("data: ")]
last = json.loads(events[-2][6:])["choices"][0] if len(events) >= 2 else {}
good = (meg.get("text") == ["a"] and meg["segments"][0][-1] == "<|endoftext|>" and oai.get("text") == "" and
        oai.get("finish_reason") == "stop" and last.get("finish_reason") == "stop" and "endoftext" not in raw)
(ok if good else bad)("the end-of-document token ends a completion (finish_reason stop) and is never in the text" +
                      ("" if good else f": {resp[:200]} {resp2[:300]} {raw[:300]}"))
def generated(*args):  # trident generate's text: stdout without its log lines
    out = subprocess.run([T, "generate", "--load", "eodck", *TOK, *args], env=penv(), capture_output=True,
                         timeout=120 * SCALE).stdout
    return b"".join(l for l in out.splitlines(True) if not l.startswith(b"generate: "))
out = generated("--prompt", "a", "--max-new-tokens", "5", "--greedy")
(ok if out == b"a\n" else bad)(f"trident generate stops at the end-of-document token unprinted: {out!r}")
out = generated("--prompt", "a", "b", "--max-new-tokens", "5", "--greedy")
(ok if out.startswith(b"--- 1 ---\na\n--- 2 ---\n") and b"endoftext" not in out else bad)(f"batched, too: {out!r}")
p.send_signal(signal.SIGTERM); p.wait(60 * SCALE)

lockout_thread.join(300 * SCALE)
if lockout_thread.is_alive(): bad("(h) did not end within 300 s")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

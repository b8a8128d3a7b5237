#!/usr/bin/env python3
"""trident serve's answers are well-formed UTF-8 when tokens split characters (docs/serve.md, "Partial
characters"). A tiny model over a byte-level tokenizer (every byte a token: tests/parallel/byte_tokenizer.py)
trained on an emoji and a CJK character emits them a byte at a time, and sampled hot it emits any bytes. Every
answer's body is read with a strict UTF-8 decoder, then as JSON; each text is held to Python's
bytes.decode("utf-8", "replace") of the token bytes (the maximal-subpart rule trident implements, as
Hugging Face's decode); the streamed deltas concatenated equal the unstreamed text, and a character's first
bytes are held back (empty deltas) until the token that completes it; chat's message.content and delta.content
alike; a stop string that is a 2-byte character cuts the text where Python finds it. Hand-worked: the prompt ids
F0 9F 98 'a' echo as U+FFFD "a"; /detokenize and Megatron's /api say the same.
Environment: TRIDENT, WORK."""
import atexit, codecs, json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

SCALE = int(os.environ.get('TD_TIME_SCALE', '1'))
T, WORK = os.environ["TRIDENT"], os.environ["WORK"]
HERE = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree(WORK, ignore_errors=True); os.makedirs(WORK); os.chdir(WORK)
env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
os.makedirs(env.get("OMPI_MCA_orte_tmpdir_base", "/tmp"), exist_ok=True)
env["OMPI_MCA_orte_tmpdir_base"] = tempfile.mkdtemp(prefix="s.", dir=env.get("OMPI_MCA_orte_tmpdir_base", "/tmp"))
passed = failed = 0
def check(cond, m):
    global passed, failed
    if cond: passed += 1; print("ok:", m, flush=True)
    else: failed += 1; print("FAIL:", m, flush=True)

subprocess.run([sys.executable, os.path.join(HERE, "..", "parallel", "byte_tokenizer.py"), "bytes.json"], check=True)
TOK = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "bytes.json"]
EMOJI, CJK = "\U0001F600", "\u662F"  # F0 9F 98 80, E6 98 AF
with open("u.jsonl", "w") as f:
    for _ in range(400): f.write(json.dumps({"text": EMOJI + CJK}) + "\n")
subprocess.run([T, "preprocess", "--input", "u.jsonl", "--output-prefix", "u", "--append-eod", *TOK], env=env,
               check=True, capture_output=True, timeout=120 * SCALE)
subprocess.run([T, "train", "--data-path", "u_text_document", *TOK, "--split", "100,0,0", "--num-layers", "1",
                "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "32", "--micro-batch-size", "4",
                "--train-iters", "100", "--lr", "1e-2", "--hidden-dropout", "0", "--attention-dropout", "0",
                "--eval-iters", "0", "--log-interval", "1000", "--make-vocab-size-divisible-by", "256", "--peak-tflops", "1",
                "--save", "ck"], env=env, check=True, capture_output=True, timeout=300 * SCALE)

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
# a chat template that writes the user's content as it is, and the end-of-document token's text as eos_token
json.dump({"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}", "eos_token": "<|endoftext|>"},
          open("tokenizer_config.json", "w"))
srv = subprocess.Popen([T, "serve", "--load", "ck", *TOK, "--port", str(port), "--chat-template", "tokenizer_config.json"], env=env, stdout=open("serve.log", "w"),
                       stderr=subprocess.STDOUT)
atexit.register(lambda: srv.poll() is None and srv.kill())

def call(method, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode() if body is not None
                                 else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60 * SCALE) as r: return r.status, r.read()
    except urllib.error.HTTPError as e: return e.code, e.read()

def strict(raw, what):
    """raw as JSON, read as RFC 8259 asks: UTF-8, strictly (None, and a failed check, when it is not)."""
    try: return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        check(False, f"{what}: not UTF-8 JSON ({e}): {raw[:120]!r}"); return None

def events(raw, what):
    """A stream's events, each read strictly, up to [DONE]."""
    out = []
    for ev in raw.split(b"\n\n"):
        if not ev.strip() or ev == b"data: [DONE]": continue
        j = strict(ev[len(b"data: "):], what)
        if j is None: return None
        out.append(j)
    return out

def token_bytes(tok):
    """A logprobs token's bytes: its text, or OpenAI's "bytes:\\xNN..." form."""
    if tok.startswith("bytes:"): return bytes(int(h, 16) for h in tok[len("bytes:"):].split("\\x")[1:])
    return tok.encode("utf-8")

for _ in range(600):
    try:
        if call("GET", "/v1/models", None)[0] == 200: break
    except OSError: pass
    if srv.poll() is not None: break
    time.sleep(0.1)
else: srv.kill()
if srv.poll() is not None: print(open("serve.log").read()); check(False, "the server did not start"); sys.exit(1)

def expected(tb, stop):
    """What a client should see for a choice's continuation tokens tb (their bytes; the last the end-of-document
    token when stop): the text, the stream's deltas (one a token, then what is held, flushed, then the finish
    event's empty one) and text_offset (the characters streamed before each token), all from Python's
    incremental UTF-8 decoder with errors="replace" (it holds back an incomplete sequence as the server must)."""
    if stop: tb = tb[:-1]
    d = codecs.getincrementaldecoder("utf-8")("replace")
    deltas = [d.decode(b) for b in tb]
    tail = d.decode(b"", final=True)
    offs, at = [], 0
    for x in deltas: offs.append(at); at += len(x)
    return "".join(deltas) + tail, deltas + ([tail] if tail else []) + [""], offs

def judge(name, body, n):
    """body unstreamed with logprobs and streamed: strict UTF-8 JSON, each choice's text, deltas and
    text_offset as expected() says. Returns the choices' continuation bytes."""
    c, raw = call("POST", "/v1/completions", dict(body, logprobs=0))
    j = strict(raw, name)
    c2, raw2 = call("POST", "/v1/completions", dict(body, stream=True))
    ev = events(raw2, name + " streamed")
    if not j or ev is None or len(j.get("choices", [])) != n:
        check(False, f"{name}: answers {c} {raw[:200]!r}"); return []
    out = []
    for ch in j["choices"]:
        lp = ch["logprobs"]
        tb = [token_bytes(t) for t in lp["tokens"]]
        stop = ch["finish_reason"] == "stop"
        text, deltas, offs = expected(tb, stop)
        got = [e["choices"][0]["text"] for e in ev if e["choices"][0]["index"] == ch["index"]]
        check(ch["text"] == text and got == deltas and lp["text_offset"][:len(offs)] == [o + lp["text_offset"][0] for o in offs],
              f"{name} choice {ch['index']}: text {ch['text'][:20]!r}, {len(got)} streamed deltas "
              f"{got[:8]}..., text_offset {lp['text_offset'][:8]}... as Python's incremental decoder says")
        out.append(b"".join(tb[:-1] if stop else tb))
    return out

# (a) greedy: after the end-of-document token (id 256) the model writes (something like) the emoji and the
# CJK character a byte at a time
gb = judge("greedy", {"prompt": [256], "max_tokens": 10, "temperature": 0}, 1)
check(gb and any(b >= 0xF0 for b in gb[0]) and "".join(expected([bytes([b]) for b in gb[0]], False)[1][:3]) == "",
      f"greedy: its bytes {gb and gb[0].hex(' ')} start with a 4-byte character's first bytes (held back)")
mg = call("PUT", "/api", {"prompts": [EMOJI], "tokens_to_generate": 3, "temperature": 0})
m = strict(mg[1], "/api")
check(m is not None and m["text"][0].startswith(EMOJI) and m["segments"][0][:4] == ["\ufffd"] * 4,
      f"/api: text {m and m['text'][0]!r} starts with the emoji whole, its byte tokens each U+FFFD in segments "
      f"{m and m['segments'][0][:5]}")

# chat: message.content and the streamed delta.content alike
body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 24, "temperature": 50, "seed": 5}
c, raw = call("POST", "/v1/chat/completions", body)
j = strict(raw, "chat")
c2, raw2 = call("POST", "/v1/chat/completions", dict(body, stream=True))
ev = events(raw2, "chat streamed")
if j and ev is not None:
    content = j["choices"][0]["message"]["content"]
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in ev)
    check(c == 200 and streamed == content and "\ufffd" in content,
          f"chat: {content[:16]!r}... (ill-formed bytes replaced) is the streamed deltas joined")

# (b) sampled hot: any bytes; 4 choices, strict everywhere
hb = judge("hot", {"prompt": "x", "max_tokens": 24, "temperature": 50, "seed": 7, "n": 4}, 4)
bad_bytes = 0
for b in hb:
    try: b.decode("utf-8")
    except UnicodeDecodeError: bad_bytes += 1
check(bad_bytes == 4, f"hot: each of the 4 choices' bytes is ill-formed UTF-8 ({bad_bytes} of 4): the case is exercised")
# a stop string is found in the bytes where it is in the text: the text ends before it (choices without it whole,
# their finish_reason as it was)
texts = [b.decode("utf-8", "replace") for b in hb]
stop = next((ch for t in texts for ch in t if ord(ch) >= 0x80 and ch != "\ufffd"), "x")  # a character of 2+ bytes
c, raw = call("POST", "/v1/completions", {"prompt": "x", "max_tokens": 24, "temperature": 50, "seed": 7, "n": 4,
                                          "stop": [stop]})
j = strict(raw, "hot with stop")
if j and texts:
    got = [(ch["text"], ch["finish_reason"]) for ch in j["choices"]]
    want = [(t[:t.index(stop)], "stop") if stop in t else (t, got[k][1]) for k, t in enumerate(texts)]
    check(c == 200 and got == want, f"hot with stop {stop!r}: {[g[0][:12] for g in got]} cut before it")

# (c) hand-worked: F0 9F 98 then 'a' is U+FFFD 'a' (one replacement for the three bytes)
c, raw = call("POST", "/v1/completions", {"prompt": [0xF0, 0x9F, 0x98, 0x61], "max_tokens": 1, "echo": True,
                                          "temperature": 0})
j = strict(raw, "echo")
check(j is not None and j["choices"][0]["text"].startswith("\ufffda"), f"echo of F0 9F 98 61: "
      f"{j and j['choices'][0]['text']!r} starts U+FFFD 'a'")
c, raw = call("POST", "/detokenize", {"tokens": [0xF0, 0x9F, 0x98, 0x61, 0xED, 0xA0, 0x80, 0xF0, 0x9F]})
j = strict(raw, "/detokenize")
check(j is not None and j["prompt"] == "\ufffda\ufffd\ufffd\ufffd\ufffd",
      f"/detokenize of F0 9F 98 61 ED A0 80 F0 9F: {j and j['prompt']!r} (a surrogate's three bytes three U+FFFD)")

srv.terminate(); srv.wait(30)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

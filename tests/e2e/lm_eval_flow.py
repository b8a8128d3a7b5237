#!/usr/bin/env python3
"""trident serve as lm-evaluation-harness's `local-completions` model uses it (docs/serve.md), on the small GPT-2
of the e2e/gen_models fixture (4 layers, hidden 64, 128 positions, GPT-2's BPE):
 (a) lm-eval's remote tokenizer: GET /tokenizer_info has "eos_token", POST /tokenize and /detokenize answer its JSON;
 (b) a loglikelihood task and a rolling-loglikelihood (WikiText-style) task sent EXACTLY as lm-eval builds them
     (lm_eval/api/model.py _encode_pair and loglikelihood, lm_eval/models/api_models.py _loglikelihood_tokens,
     batch_loglikelihood_requests and loglikelihood_rolling, lm_eval/utils.py get_rolling_token_windows and
     make_disjoint_window, lm_eval/models/openai_completions.py LocalCompletionsAPI._create_payload and
     parse_logprobs, re-implemented here from that source): prompts as lists of token-id lists, "echo": true,
     "logprobs": 1, "max_tokens": 1; the answers parsed its way (the sum of the continuation's token_logprobs,
     is_greedy from top_logprobs). Each request's log-likelihood and is_greedy equal `trident eval --task
     LOGLIKELIHOOD`'s on the same items (texts for the loglikelihood items, so eval's own split of a context and
     its continuation is held too; token ids for the windows) within 1e-4, and an independent float64 forward of
     the model written here (numpy, reading the `trident convert --to hf` export: config.json and safetensors, the
     published formats) within 1e-3;
 (c) each field against answers known by hand or from the float64 reader: echo with max_tokens 0 (the prompt
     scored, nothing generated), logprobs 5 (the top 5 of every position), text_offset, stop (a string, a list: the
     text cut before the first found, finish_reason "stop"), n (choices p n + j), seed (same seed, same text),
     token-id prompts and batched lists (the texts of the single requests), usage, and the 400s naming the field;
 (d) on tp 2 x pp 2 (4 ranks), the loglikelihood requests score as on one rank, and a stop string ends generation
     at the same token (every rank decides alike);
 (e) with Llama 3's tokenizer.json (a 1-layer model trained one step): /tokenizer_info's bos_token, lm-eval's prefix.
Environment: TRIDENT, VOCAB, MERGES, WORK, MODEL (the gen_models fixture's gpt2 checkpoint), DATA (its training data),
TOKENIZER (Llama 3's tokenizer.json, from scripts/test-deps.sh)."""
import json, math, os, shutil, signal, socket, struct, subprocess, sys, tempfile, time, urllib.error, urllib.request
import numpy as np

SCALE = int(os.environ.get('TD_TIME_SCALE', '1'))  # the build's slowness: 10 under the sanitizers
T, WORK, CK = os.environ["TRIDENT"], os.environ["WORK"], os.environ["MODEL"]
TOK = ["--vocab-file", os.environ["VOCAB"], "--merge-file", os.environ["MERGES"]]
shutil.rmtree(WORK, ignore_errors=True); os.makedirs(WORK); os.chdir(WORK)
env = dict(os.environ, OMP_NUM_THREADS="1")
passed = failed = 0
def ok(m):
    global passed; passed += 1; print("ok:", m, flush=True)
def bad(m):
    global failed; failed += 1; print("FAIL:", m, flush=True)
def check(cond, m, detail=""):
    (ok if cond else bad)(m + ("" if cond else f": {detail}"))

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"
def call(method, path, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(BASE + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120 * SCALE) as r: return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, json.loads(e.read())
def post(path, body):
    st, j = call("POST", path, body)
    if st != 200: raise RuntimeError(f"POST {path} {json.dumps(body)[:200]}: {st} {j}")
    return j

servers = []
def start(cmd, log):
    p = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    servers.append(p)
    t0 = time.time()
    while "listening on" not in open(log).read():
        if p.poll() is not None or time.time() - t0 > 60 * SCALE: sys.exit("FAIL: the server did not start: " + open(log).read()[-2000:])
        time.sleep(0.1)
    return p
def stop_servers():
    for p in servers:
        if p.poll() is None: p.send_signal(signal.SIGTERM)
        try: p.wait(30 * SCALE)
        except subprocess.TimeoutExpired: p.kill()
import atexit; atexit.register(stop_servers)
server = start([T, "serve", "--load", CK, *TOK, "--port", str(PORT), "--max-batch", "8"], "serve.log")

# ---- the float64 reader: the model's Hugging Face export read by its published formats ----
subprocess.run([T, "convert", "--from", "trident", CK, "--to", "hf", "hf"], env=env, check=True, capture_output=True,
               timeout=120 * SCALE)
cfg = json.load(open("hf/config.json"))
with open("hf/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; header = json.loads(f.read(n)); blob = f.read()
W = {}
for k, v in header.items():
    if k == "__metadata__": continue
    assert v["dtype"] == "F32", v
    a, b = v["data_offsets"]
    W[k.removeprefix("transformer.")] = np.frombuffer(blob[a:b], dtype="<f4").reshape(v["shape"]).astype(np.float64)
H, NH, L, EPS = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
POSITIONS = cfg["n_positions"]
def ln(x, p): m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True); return (x - m) / np.sqrt(v + EPS) * W[p + ".weight"] + W[p + ".bias"]
def gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # gelu_new
def log_softmax64(ids):
    """(len(ids), vocab) float64 log-softmax of the logits at every position of ids (GPT-2's forward)."""
    n, hd = len(ids), H // NH
    x = W["wte.weight"][ids] + W["wpe.weight"][:n]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(L):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, i * H:(i + 1) * H].reshape(n, NH, hd).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, H)
        x = x + a @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    z = ln(x, "ln_f") @ W["wte.weight"].T
    mx = z.max(-1, keepdims=True)
    return z - mx - np.log(np.exp(z - mx).sum(-1, keepdims=True))
def ll64(ctx, cont):
    """float64 log-likelihood of cont after ctx, and whether every cont token is the argmax."""
    ids = ctx + cont
    lp = log_softmax64(ids)
    pos = range(len(ctx) - 1, len(ids) - 1)
    return sum(lp[i, ids[i + 1]] for i in pos), all(int(lp[i].argmax()) == ids[i + 1] for i in pos)

# ---- lm-evaluation-harness's client, re-implemented from its source ----
class RemoteTokenizer:  # lm_eval/utils.py
    def __init__(self, base_url):
        self.base_url = base_url.replace("/v1/completions", "").replace("/v1/chat/completions", "").rstrip("/")
        st, self.info = call("GET", "/tokenizer_info")
        assert st == 200, self.info
    @property
    def eos_token(self): return self.info.get("eos_token")
    @property
    def bos_token(self): return self.info.get("bos_token")
    @property
    def eos_token_id(self): return None if self.eos_token is None else self.encode(self.eos_token)[0]
    @property
    def bos_token_id(self): return None if self.bos_token is None else self.encode(self.bos_token)[0]
    def encode(self, text):
        tokens = post("/tokenize", {"prompt": text, "add_special_tokens": False}).get("tokens")
        if not isinstance(tokens, list): raise RuntimeError("Malformed response from /tokenize endpoint.")
        return tokens
    def decode(self, tokens):
        prompt = post("/detokenize", {"tokens": tokens}).get("prompt")
        if not isinstance(prompt, str): raise RuntimeError("Malformed response from /detokenize endpoint.")
        return prompt

class LocalCompletions:  # lm_eval/models/api_models.py TemplateAPI + openai_completions.py LocalCompletionsAPI
    def __init__(self, base_url, max_length, batch_size, model="trident-test", seed=1234):
        self.base_url, self.model, self._seed = base_url, model, seed
        self.max_length = max_length - 1  # "max_length - 1 as we always have 1 token for generation"
        self._batch_size = batch_size
        self.tokenizer = RemoteTokenizer(base_url)
        self.sent = []  # every payload, for the report
    @property
    def prefix_token_id(self): return self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
    def tok_encode(self, string): return self.tokenizer.encode(string)
    def _encode_pair(self, context, continuation):  # lm_eval/api/model.py, causal
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole_enc = self.tok_encode(context + continuation)
        context_enc = self.tok_encode(context)
        return context_enc, whole_enc[len(context_enc):]
    def loglikelihood(self, requests):
        new_reqs = []
        for context, continuation in requests:
            if context == "":
                continuation_enc = self.tok_encode(continuation)
                context_enc, continuation_enc = (([self.prefix_token_id], continuation_enc)
                                                 if self.prefix_token_id != continuation_enc[0]
                                                 else (continuation_enc[:1], continuation_enc[1:]))
            else:
                context_enc, continuation_enc = self._encode_pair(context, continuation)
            new_reqs.append(((context, continuation), context_enc, continuation_enc))
        return self._loglikelihood_tokens(new_reqs)
    def _create_payload(self, messages):
        return {"model": self.model, "prompt": messages, "temperature": 0, "max_tokens": 1, "logprobs": 1,
                "seed": self._seed, "echo": True}
    @staticmethod
    def parse_logprobs(outputs, ctxlens):
        res = []
        for out in outputs:
            for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
                assert ctxlen > 0, "Context length must be greater than 0"
                logprobs = sum(choice["logprobs"]["token_logprobs"][ctxlen:-1])
                tokens_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:-1]
                top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:-1]
                is_greedy = True
                for tok, top in zip(tokens_logprobs, top_logprobs):
                    if tok != max(top.values()):
                        is_greedy = False
                        break
                res.append((logprobs, is_greedy))
        return res
    def batch_loglikelihood_requests(self, chunk):
        inputs, ctxlens = [], []
        for _, context_enc, continuation_enc in chunk:
            inp = (context_enc + continuation_enc)[-self.max_length:]
            ctxlen = len(context_enc) - max(0, len(context_enc) + len(continuation_enc) - self.max_length)
            inputs.append(inp); ctxlens.append(ctxlen)
        return inputs, ctxlens
    def _loglikelihood_tokens(self, requests):
        # Collator: sorted by (-len(toks), tuple(toks)), batches of batch_size, answers put back in order
        order = sorted(range(len(requests)), key=lambda i: (-len(requests[i][1] + requests[i][2]),
                                                           tuple(requests[i][1] + requests[i][2])))
        res = [None] * len(requests)
        for c0 in range(0, len(order), self._batch_size):
            idx = order[c0:c0 + self._batch_size]
            inputs, ctxlens = self.batch_loglikelihood_requests([requests[i] for i in idx])
            payload = self._create_payload(inputs)  # create_message: tokenized requests stay list[list[int]]
            self.sent.append(payload)
            st, out = call("POST", "/v1/completions", payload)
            if st != 200: raise RuntimeError(f"API request failed: {st} {out}")
            for i, ans in zip(idx, self.parse_logprobs([out], ctxlens)): res[i] = ans
        return res
    def loglikelihood_rolling(self, strings):
        out = []
        for string in strings:
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                self.tok_encode(string), self.prefix_token_id, self.max_length - 1, 1)]
            windows = [(None,) + w for w in windows]
            nll = self._loglikelihood_tokens(windows)
            out.append((sum(x[0] for x in nll), windows, nll))
        return out

def get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len):  # lm_eval/utils.py
    assert 1 <= context_len <= max_seq_len
    if not token_list: return
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[:first_seq_len - 1], token_list[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (token_list[window_end - max_seq_len - 1:window_end - 1], token_list[window_end - window_pred_len:window_end])
        predicted += window_pred_len
def make_disjoint_window(pair):
    a, b = pair
    return a[:len(a) - (len(b) - 1)], b

def trident_eval(items, tag):
    """`trident eval --task LOGLIKELIHOOD` of items [(context, continuation)]: [(loglikelihood, is_greedy)]."""
    path, metrics = f"{tag}.jsonl", f"{tag}.metrics.jsonl"
    with open(path, "w") as f:
        for c, t in items: f.write(json.dumps({"context": c, "continuation": t}) + "\n")
    r = subprocess.run([T, "eval", "--load", CK, *TOK, "--task", "LOGLIKELIHOOD", "--valid-data", path, "--seq-length",
                        str(POSITIONS), "--micro-batch-size", "4", "--metrics-file", metrics], env=env,
                       capture_output=True, text=True, timeout=300 * SCALE)
    if r.returncode: sys.exit(f"FAIL: trident eval: {r.stderr[-1500:]}")
    lines = [json.loads(l) for l in open(metrics) if '"item"' in l]
    return [(l["loglikelihood"], l["is_greedy"]) for l in sorted(lines, key=lambda l: l["item"])]

lm = LocalCompletions(BASE + "/v1/completions", max_length=POSITIONS, batch_size=4)

# (a) the remote tokenizer as lm-eval checks for it (check_remote_tokenizer_support) and uses it
st, info = call("GET", "/tokenizer_info")
tk = post("/tokenize", {"prompt": "test", "add_special_tokens": False})
check(st == 200 and info.get("eos_token") == "<|endoftext|>" and isinstance(tk.get("tokens"), list),
      "GET /tokenizer_info names eos_token <|endoftext|>; POST /tokenize answers a token list", f"{info} {tk}")
tk = post("/tokenize", {"prompt": "Hello world<|endoftext|>", "add_special_tokens": False})
check(tk["tokens"] == [15496, 995, 50256] and tk["count"] == 3 and lm.prefix_token_id == 50256,
      "/tokenize: 'Hello world<|endoftext|>' is GPT-2's [15496, 995, 50256] (the token's text is the token, as Hugging "
      "Face reads it), so lm-eval's prefix token is 50256", tk)
check(lm.tokenizer.decode([15496, 995, 11]) == "Hello world,", "/detokenize [15496, 995, 11] is 'Hello world,'")
j = post("/v1/completions", {"prompt": "Hello world<|endoftext|>", "max_tokens": 0, "echo": True, "logprobs": 0})
check(j["choices"][0]["logprobs"]["tokens"] == ["Hello", " world", "<|endoftext|>"] and j["usage"]["prompt_tokens"] == 3,
      "a text prompt reads the token's text as the token too", j)

# (b) a loglikelihood task: contexts and continuations (trailing spaces, an empty context, a continuation that is
# the model's own greedy text, one shared context with several continuations as multiple-choice tasks send)
pairs = [("ROMEO: I will", " go"), ("First Citizen: ", "Before we proceed any further, hear me speak."),
         ("", "Hello there"), ("KING HENRY: My lords,", " the king is dead."),
         ("Question: what is two and two?\nAnswer:", " four"), ("Question: what is two and two?\nAnswer:", " five"),
         ("Question: what is two and two?\nAnswer:", " twenty-two, or so they say"), ("O", " Romeo, Romeo"),
         ("She said ", "\"yes\"."), ("A", "\n\n"), ("The end", " of the world as we know it, and I feel fine.")]
# and, as token ids (the way lm-eval sends rolling windows), a continuation that is the model's own greedy choice
# (by the float64 reader's argmax) and one that is not
g_ctx = lm.tok_encode("ROMEO: I will")
g_cont = []
for _ in range(3): g_cont.append(int(log_softmax64(g_ctx + g_cont)[-1].argmax()))
id_items = [(None, g_ctx, g_cont), (None, g_ctx, g_cont[:2] + [(g_cont[2] + 1) % 50257])]
got = lm.loglikelihood(pairs) + lm._loglikelihood_tokens(id_items)
ref = trident_eval(pairs + [(c, t) for _, c, t in id_items], "ll")
f64 = []
for (c, t) in pairs:
    ctx, cont = (([lm.prefix_token_id], lm.tok_encode(t)) if c == "" else lm._encode_pair(c, t))
    f64.append(ll64(ctx, cont))
f64 += [ll64(c, t) for _, c, t in id_items]
d_eval = max(abs(g[0] - r[0]) for g, r in zip(got, ref))
d_64 = max(abs(g[0] - r[0]) for g, r in zip(got, f64))
check(len(got) == len(ref) and d_eval < 1e-4 and all(g[1] == r[1] for g, r in zip(got, ref)),
      f"loglikelihood task ({len(got)} items, {len(lm.sent)} batched requests): the server's log-likelihoods parsed "
      f"lm-eval's way equal trident eval's (largest difference {d_eval:.2e}, tol 1e-4) and so does is_greedy",
      f"{got} vs {ref}")
check(d_64 < 1e-3 and all(g[1] == r[1] for g, r in zip(got, f64)),
      f"... and the float64 reader's (largest difference {d_64:.2e}, tol 1e-3)", f"{got} vs {f64}")
check(got[-2][1] and not got[-1][1] and not got[0][1] and got[1][0] < got[0][0] < 0,
      "the model's own greedy continuation is is_greedy, the same with its last token changed is not, nor ' go'; "
      "a longer continuation scores lower", got)
check(all(p["echo"] is True and p["max_tokens"] == 1 and p["logprobs"] == 1 and isinstance(p["prompt"], list)
          and all(isinstance(x, list) and all(isinstance(i, int) for i in x) for x in p["prompt"]) for p in lm.sent),
      "every request was lm-eval's: prompt a list of token-id lists, echo, logprobs 1, max_tokens 1")
sent_ll = len(lm.sent)

# (b) rolling loglikelihood (WikiText-style): documents longer than a window, scored in lm-eval's disjoint windows
docs = [("ROMEO: But, soft! what light through yonder window breaks? It is the east, and Juliet is the sun. " * 10),
        "Short document.", ("= Valkyria Chronicles III = \n Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical "
                            "role @-@ playing video game developed by Sega and Media.Vision for the PlayStation "
                            "Portable . " * 4)]
rolled = lm.loglikelihood_rolling(docs)
windows = [w for _, ws, _ in rolled for w in ws]
wgot = [x for _, _, nll in rolled for x in nll]
wref = trident_eval([(w[1], w[2]) for w in windows], "rolling")
w64 = [ll64(w[1], w[2]) for w in windows]
d_eval = max(abs(g[0] - r[0]) for g, r in zip(wgot, wref))
d_64 = max(abs(g[0] - r[0]) for g, r in zip(wgot, w64))
totals = [r[0] for r in rolled]
check(len(windows) >= 6 and all(len(w[1]) + len(w[2]) <= POSITIONS for w in windows) and d_eval < 1e-4,
      f"rolling loglikelihood ({len(docs)} documents, {len(windows)} windows, {len(lm.sent) - sent_ll} requests): each "
      f"window's log-likelihood equals trident eval's (largest difference {d_eval:.2e}, tol 1e-4)", f"{wgot} vs {wref}")
check(d_64 < 1e-3, f"... and the float64 reader's (largest difference {d_64:.2e}); documents' totals {['%.3f' % t for t in totals]}")
n_tok = [len(lm.tok_encode(d)) for d in docs]
check([sum(len(w[2]) for w in ws) for _, ws, _ in rolled] == n_tok,
      f"every token of each document is scored once ({n_tok} tokens)")

# (c) the fields, each against what is known by hand or from the float64 reader
P = lm.tok_encode("First Citizen: Before we proceed")
j = post("/v1/completions", {"prompt": P, "max_tokens": 0, "echo": True, "logprobs": 5})
c = j["choices"][0]; lp = c["logprobs"]; ref = log_softmax64(P)
want_top = [None] + [{lm.tokenizer.decode([int(i)]): ref[k, i] for i in np.argsort(-ref[k])[:5]} for k in range(len(P) - 1)]
top_ok = all(
    (a is None and b is None) or (a is not None and b is not None and a.keys() == b.keys()
                                  and all(abs(a[t] - b[t]) < 1e-3 for t in a) and list(a.values()) == sorted(a.values(), reverse=True))
    for a, b in zip(lp["top_logprobs"], want_top))
check(c["text"] == "First Citizen: Before we proceed" and len(lp["tokens"]) == len(P) and lp["token_logprobs"][0] is None
      and all(abs(lp["token_logprobs"][k] - ref[k - 1, P[k]]) < 1e-3 for k in range(1, len(P)))
      and j["usage"] == {"prompt_tokens": len(P), "completion_tokens": 0, "total_tokens": len(P)} and top_ok
      and c["finish_reason"] == "length",
      "echo with max_tokens 0: the prompt scored (token_logprobs null first, as OpenAI, then the float64 reader's), "
      "the top 5 of every position, nothing generated, usage counts the prompt", json.dumps(j)[:600])
offs = lp["text_offset"]
check(offs[0] == 0 and all(c["text"][offs[k]:offs[k + 1]] == lp["tokens"][k] for k in range(len(P) - 1))
      and c["text"][offs[-1]:] == lp["tokens"][-1], "text_offset: each token's characters in the text", offs)
j = post("/v1/completions", {"prompt": "ROMEO: I will", "max_tokens": 4, "logprobs": 1, "temperature": 0})
c = j["choices"][0]; lp = c["logprobs"]
check(len(lp["tokens"]) == 4 and "".join(lp["tokens"]) == c["text"] and lp["text_offset"][0] == len("ROMEO: I will")
      and all(t == max(d.values()) for t, d in zip(lp["token_logprobs"], lp["top_logprobs"]))
      and j["usage"]["completion_tokens"] == 4 and j["usage"]["prompt_tokens"] == len(lm.tok_encode("ROMEO: I will")),
      "greedy completion with logprobs 1: the completion's tokens only (offsets after the prompt), each the top one",
      json.dumps(j)[:500])
samp = {"prompt": "ROMEO:", "max_tokens": 24, "temperature": 1, "seed": 3}  # the same seed, the same text
bj = post("/v1/completions", samp)
bc = bj["choices"][0]
base = bc["text"]
s1, s2 = base[12:14], base[5:8]
first = min(base.find(s1), base.find(s2))
j1j = post("/v1/completions", {**samp, "stop": s1})
j1 = j1j["choices"][0]
j2 = post("/v1/completions", {**samp, "stop": [s1, s2]})["choices"][0]
j3 = post("/v1/completions", {**samp, "stop": ["\u2603 not there"]})["choices"][0]
check(len(base) > 14 and s1 != s2 and j1["text"] == base[:base.find(s1)] and j1["finish_reason"] == "stop" and j2["text"] == base[:first]
      and j2["finish_reason"] == "stop" and j3["text"] == base and j3["finish_reason"] == bc["finish_reason"],
      f"stop: the text cut before the first stop string found ({base!r}, stops {s1!r}, {s2!r}), finish_reason stop",
      f"{j1} {j2} {j3}")
n1 = len(lm.tok_encode(base[:base.find(s1) + len(s1)]))
check(j1j["usage"]["completion_tokens"] < bj["usage"]["completion_tokens"] and
      abs(j1j["usage"]["completion_tokens"] - n1) <= 1,
      f"... and generation stops at the token that completes it: {j1j['usage']['completion_tokens']} tokens generated "
      f"against {bj['usage']['completion_tokens']} without", f"{j1j['usage']} {bj['usage']} {n1}")
sampled = {"prompt": ["ROMEO:", "JULIET:"], "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 11}
a, b = post("/v1/completions", sampled), post("/v1/completions", sampled)
other = post("/v1/completions", {**sampled, "seed": 12})
ta = [c["text"] for c in a["choices"]]
check([c["index"] for c in a["choices"]] == list(range(6)) and ta == [c["text"] for c in b["choices"]]
      and ta != [c["text"] for c in other["choices"]] and len(set(ta[:3])) > 1
      and a["usage"]["prompt_tokens"] == len(lm.tok_encode("ROMEO:")) + len(lm.tok_encode("JULIET:"))
      and (a["usage"]["completion_tokens"] == 48 if all(c["finish_reason"] == "length" for c in a["choices"])
           else a["usage"]["completion_tokens"] < 48),
      "n 3 over 2 prompts: 6 choices (index p n + j), the same seed gives the same texts, another seed others; usage "
      "counts each prompt once", json.dumps(a)[:400])
one = post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 6, "temperature": 0})["choices"][0]["text"]
k1 = post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 6, "temperature": 1, "top_k": 1, "seed": 5})["choices"][0]["text"]
kall = post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 6, "temperature": 1, "top_k": -1, "seed": 5})["choices"][0]["text"]
k0 = post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 6, "temperature": 1, "seed": 5})["choices"][0]["text"]
check(k1 == one and kall == k0, "top_k (vLLM's): 1 is greedy, -1 is every token (as leaving it out)", f"{k1!r} {one!r} {kall!r} {k0!r}")
two = post("/v1/completions", {"prompt": "JULIET:", "max_tokens": 6, "temperature": 0})["choices"][0]["text"]
ids1, ids2 = lm.tok_encode("ROMEO:"), lm.tok_encode("JULIET:")
j = post("/v1/completions", {"prompt": [ids1, ids2], "max_tokens": 6, "temperature": 0, "n": 2})
k = post("/v1/completions", {"prompt": ids1, "max_tokens": 6, "temperature": 0})
l2 = post("/v1/completions", {"prompt": ["ROMEO:", "JULIET:"], "max_tokens": 6, "temperature": 0})
check([c["text"] for c in j["choices"]] == [one, one, two, two] and k["choices"][0]["text"] == one
      and [c["text"] for c in l2["choices"]] == [one, two]
      and j["usage"]["prompt_tokens"] == len(ids1) + len(ids2),
      "token-id prompts (a list, a list of lists, n 2) and a list of texts answer what each text alone gets",
      f"{j} {k} {l2} {one!r} {two!r}")

long_ids = [464] * (POSITIONS + 5)
errors = [({"prompt": [[1, 2], [50257]]}, "prompt 2's token 1 is 50257"), ({"prompt": [1, -1]}, "token 2 is -1"),
          ({"prompt": [1.5]}, "token 1 is 1.5"), ({"prompt": "a", "max_tokens": -1}, '"max_tokens" is -1'),
          ({"prompt": "a", "logprobs": 21}, '"logprobs" is 21'), ({"prompt": "a", "logprobs": True}, '"logprobs" is true'),
          ({"prompt": long_ids, "max_tokens": 0}, f"prompt 1 is {POSITIONS + 5} tokens"),
          ({"prompt": [464] * POSITIONS, "max_tokens": 1}, f"prompt 1 is {POSITIONS} tokens"),
          ({"prompt": []}, '"prompt" must be'), ({"prompt": [[]]}, "prompt 1 is an empty list"),
          ({"prompt": [[1], "a", 3]}, "prompt 3 is neither"), ({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, '"stop"'),
          ({"prompt": "a", "stop": [1]}, '"stop" item 1'), ({"prompt": "a", "n": 0}, '"n" is 0'),
          ({"prompt": ["a", "b", "c"], "n": 3}, '"n" 3 = 9 completions'), ({"prompt": "a", "echo": "yes"}, '"echo" must be'),
          ({"prompt": "a", "echo": True, "stream": True}, '"echo" is not supported with "stream"'),
          ({"prompt": "a", "best_of": 2}, '"best_of"'), ({"prompt": "a", "top_k": -2}, '"top_k" is -2'), ({"prompt": "a", "frob": 1}, '"frob" is not a field')]
wrong = []
for body, want in errors:
    st, j = call("POST", "/v1/completions", body)
    if st != 400 or want not in j.get("error", ""): wrong.append((body if len(json.dumps(body)) < 200 else "long", st, j))
for path, body, want in [("/tokenize", {"prompt": "a", "messages": []}, '"messages" is not a field'),
                         ("/tokenize", {"prompt": 3}, '"prompt" must be a string'),
                         ("/detokenize", {"tokens": [1, 99999]}, "token 2 is 99999"),
                         ("/detokenize", {"tokens": "x"}, '"tokens" must be')]:
    st, j = call("POST", path, body)
    if st != 400 or want not in j.get("error", ""): wrong.append((path, body, st, j))
st, j = call("POST", "/tokenizer_info", {})
if st != 405: wrong.append(("POST /tokenizer_info", st, j))
check(not wrong, f"{len(errors) + 5} bad requests get 400 (405) with a line naming the field", wrong)
check(server.poll() is None, "the server is still up")

# (d) the same loglikelihood requests on tp 2 x pp 2 (the vocabulary's slices gathered, the scores broadcast from the
# last stage)
PORT = free_port(); BASE = f"http://127.0.0.1:{PORT}"
start(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", T, "serve", "--load", CK, *TOK, "--port", str(PORT),
       "--max-batch", "8", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"], "serve_tp2pp2.log")
got2 = lm.loglikelihood(pairs) + lm._loglikelihood_tokens(id_items)
d = max(abs(a[0] - b[0]) for a, b in zip(got, got2))
check(d < 1e-4 and [a[1] for a in got] == [b[1] for b in got2],
      f"tp 2 x pp 2: the same log-likelihoods (largest difference {d:.2e}, tol 1e-4) and is_greedy as one rank", f"{got2}")
j1p = post("/v1/completions", {**samp, "stop": s1})
check(j1p["choices"][0]["text"] == j1["text"] and j1p["usage"] == j1j["usage"],
      "tp 2 x pp 2: a stop string stops generation at the same token, with the same text", f"{j1p} {j1j}")

# (e) a tokenizer.json with a beginning-of-text token (Llama 3's): /tokenizer_info names it, so lm-eval's prefix
# token is it (as with Hugging Face's tokenizer), and its special tokens' texts are the tokens
tk_flags = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", os.environ["TOKENIZER"]]
subprocess.run([T, "train", "--data-path", os.environ["DATA"], *tk_flags, "--split", "949,50,1", "--num-layers", "1",
                "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "32", "--micro-batch-size", "1",
                "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-4", "--eval-iters", "0", "--peak-tflops", "1",
                "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--swiglu", "--disable-bias-linear",
                "--save", "l3ck"], env=env, check=True, capture_output=True, timeout=120 * SCALE)
PORT = free_port(); BASE = f"http://127.0.0.1:{PORT}"
start([T, "serve", "--load", "l3ck", *tk_flags, "--port", str(PORT)], "serve_l3.log")
l3 = RemoteTokenizer(BASE + "/v1/completions")
toks = l3.encode("<|begin_of_text|>Hello world<|end_of_text|>")
prefix = l3.bos_token_id or l3.eos_token_id
check(l3.info.get("bos_token") == "<|begin_of_text|>" and l3.eos_token == "<|end_of_text|>" and prefix == 128000
      and toks == [128000, 9906, 1917, 128001],
      "Llama 3's tokenizer.json: /tokenizer_info names bos_token <|begin_of_text|> and eos_token <|end_of_text|>, so "
      "lm-eval's prefix token is 128000; /tokenize reads the special tokens' texts as them", f"{l3.info} {toks}")

stop_servers()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""docs/finetune.md's user path run as written, so the page cannot rot: the first ```sh block under
"## From a Hugging Face model to a served one" is run by bash (set -e; `trident` the binary under
test; serve's port 5000 replaced by a free one) in a folder holding what the block starts from:
`my-model`, a tiny Llama-shaped Hugging Face model (config.json, model.safetensors, tokenizer.json
and tokenizer_config.json with ChatML, written by tests/e2e/llama_reader.py) and `chats.jsonl`
(reverse-the-word conversations). Then what the page says of the run is held: every command exits
0, the held-out answer-only loss after the LoRA fine-tuning is lower than the base's, the merged
model scores as the LoRA checkpoint (eval --sft, the printed 6 decimals), the server answers the
chat request with an OpenAI chat.completion, and the adapter is in PEFT's format.
Env: TRIDENT, SRC (the source tree), WORK (a scratch folder, emptied)."""
import json, os, re, shutil, signal, socket, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reader as lr

T, SRC = os.environ["TRIDENT"], os.environ["SRC"]
WORK = os.environ.get("WORK") or "/tmp/trident-finetune-doc"
SCALE = int(os.environ.get("TD_TIME_SCALE", "1"))
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
passed = failed = 0


def check(cond, msg, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok:", msg, flush=True)
    else:
        failed += 1
        print("FAIL:", msg + (": " + str(detail) if detail else ""), flush=True)


page = open(os.path.join(SRC, "docs", "finetune.md")).read()
head = "## From a Hugging Face model to a served one"
m = re.search(re.escape(head) + r".*?```sh\n(.*?)```", page, re.S)
if not m:
    print(f"FAIL: docs/finetune.md has no ```sh block under '{head}'")
    sys.exit(1)
block = m.group(1)
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
check(block.count("5000") == 2, "the block's server is on port 5000 (replaced here)", block.count("5000"))
block = block.replace("5000", str(port))

lr.write_tiny_llama(os.path.join(WORK, "my-model"), hidden=64, layers=2, heads=4, kv_heads=2, ffn=176,
                    positions=128, tied=True)
lr.write_reverse_chats(os.path.join(WORK, "chats.jsonl"), 400, seed=3)
# `trident` on PATH (a link to the binary under test), so that `$!` of `trident serve ... &` is the server
os.makedirs(os.path.join(WORK, "bin"))
os.symlink(os.path.abspath(T), os.path.join(WORK, "bin", "trident"))
env = dict(os.environ, OMP_NUM_THREADS="1", PATH=os.path.join(WORK, "bin") + os.pathsep + os.environ["PATH"])
# the output to files, not pipes: a server the block left running (a command failed after it started)
# holds no pipe open, and is stopped with the block's session when bash returns
log_out, log_err = os.path.join(WORK, "block.out"), os.path.join(WORK, "block.err")
with open(log_out, "w") as fo, open(log_err, "w") as fe:
    p = subprocess.Popen(["bash", "-c", "set -ex\n" + block], cwd=WORK, env=env, stdout=fo, stderr=fe,
                         start_new_session=True)
    try:
        rc = p.wait(timeout=100 * SCALE)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
stdout = open(log_out, errors="replace").read()  # a random model's answer may end inside a character
out = stdout + open(log_err, errors="replace").read()
check(rc == 0, "every command of the block exits 0", f"exit {rc}; the end of its output:\n{out[-3000:]}")
if rc != 0:
    sys.exit(1)
losses = [float(x) for x in re.findall(r"^eval: loss ([0-9.]+)", stdout, re.M)]
check(len(losses) == 3, "three evaluations printed (base, LoRA, merged)", losses)
if len(losses) == 3:
    base, lora, merged = losses
    check(lora < base - 0.3, f"fine-tuning lowered the held-out answer-only loss: {base} -> {lora}")
    check(abs(merged - lora) <= 2e-6 + 1e-5 * lora, f"the merged model scores as the LoRA checkpoint: {merged} = {lora}")
chat = [l for l in stdout.splitlines() if '"chat.completion"' in l]
check(len(chat) == 1 and json.loads(chat[0])["choices"][0]["message"]["role"] == "assistant",
      "the server answered the chat request with a chat.completion", chat)
acfg = json.load(open(os.path.join(WORK, "adapter", "adapter_config.json")))
check(acfg["peft_type"] == "LORA" and acfg["r"] == 8 and len(acfg["target_modules"]) == 7,
      f"the adapter is PEFT's: r {acfg['r']}, {sorted(acfg['target_modules'])}", acfg)
check(os.path.exists(os.path.join(WORK, "merged", "model.safetensors")), "merged/ is a Hugging Face model")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""bench/gpu_speed_peer.py report (bench/gpu_speed.sh's figures, issue 35) on logs written here in
the formats the three programs print: trident's --metrics-file and its "peak device memory" line,
the peers' "tokens_per_s" line and the wrapper's "peak_device_memory_mib", llm.c's step lines and
"device memory usage" (its train_gpt2.cu). The figures are worked by hand:
  Megatron's FLOPs a token for GPT-2 124M at seq 1024, vocabulary 50304:
    12 L h^2 (1 + 1 + s/h + 4 + V/(2 L h)) = 84934656 x (2 + 4/3 + 4 + 131/48) = 854654976
  trident: tokens/s 1000 2000 | 100000 90000 110000 95000 -> median after 2 = 97500
  llm.c: ms 500 300 | 160 170 150 165 -> median 162.5 -> 16384 / 0.1625 = 100824.6 tokens/s
"""
import json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
fails = []


def near(a, b, what, rel=1e-6):
    if a is None or abs(a - b) > rel * abs(b):
        fails.append(what); print("FAIL: %s: %r, want %r" % (what, a, b))


with tempfile.TemporaryDirectory() as d:
    w = lambda name, text: open(os.path.join(d, name), "w").write(text)
    gpt2 = dict(name="gpt2_124m", arch="gpt2", layers=12, hidden=768, heads=12, groups=12, ffn=3072, mbs=16, seq=1024, padded_vocab=50304)
    llama = dict(name="llama_1b", arch="llama", layers=16, hidden=2048, heads=32, groups=8, ffn=8192, mbs=8, seq=1024, padded_vocab=50304)
    w("shapes.json", json.dumps({"date": "D", "gpu": "G", "bundle": "B", "smoke": False, "warmup": 2, "llmc_note": None,
                                 "shapes": [gpt2, llama]}))
    w("peak.log", "bf16_gemm_tflops 800.0000 (n 8192, torch 2.11, NVIDIA H200)\n")
    w("gpt2_124m_trident.jsonl", "".join(json.dumps({"iteration": i + 1, "lm_loss": 10.0, "tokens_per_s": t}) + "\n"
                                         for i, t in enumerate([1000, 2000, 100000, 90000, 110000, 95000])))
    w("gpt2_124m_trident.log", "x\n[trident] peak device memory, stage 0: 20480.0 MiB measured (the memory pool's high-water "
                               "mark), 19000.0 MiB predicted for the model and its run: +7.8%\n")
    w("gpt2_124m_trident.rc", "0\n")
    w("gpt2_124m_torch.log", "torch 2.11.0 cuda params 124439808 best_step_ms 200.0 tokens_per_s 81920.0 model_tflops 70.0\n"
                             "peak_device_memory_mib 30000.5\n")
    w("gpt2_124m_torch.rc", "0\n")
    steps = "".join("step %4d/10 | loss 10.9%d (+nanz)| norm 1.2345 (+nanz)| lr 3.00e-04 | %.2f ms | 12.3%% bf16 MFU | 99999 tok/s\n"
                    % (i + 1, i, ms) for i, ms in enumerate([500, 300, 160, 170, 150, 165]))
    w("gpt2_124m_llmc.log", "device memory usage: 25000 MiB / 143000 MiB\nval loss 11.0\n" + steps)
    w("gpt2_124m_llmc.rc", "0\n")
    w("llama_1b_trident.rc", "124\n")
    w("llama_1b_trident.log", "killed\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_speed_peer.py"), "report", d], capture_output=True, text=True)
    if r.returncode != 0:
        fails.append("report rc %d" % r.returncode); print(r.stdout, r.stderr)
    else:
        s = json.load(open(os.path.join(d, "speed.json")))
        g = s["shapes"]["gpt2_124m"]
        near(g["model_flops_per_token"], 854654976, "FLOPs a token")
        near(g["trident"]["tokens_per_s"], 97500, "trident tokens/s")
        near(g["torch"]["tokens_per_s"], 81920, "torch tokens/s")
        near(g["llmc"]["tokens_per_s"], 16384 / 0.1625, "llm.c tokens/s")
        near(g["trident_over_torch"], 97500 / 81920, "trident/torch")
        near(g["trident_over_llmc"], 97500 / (16384 / 0.1625), "trident/llm.c")
        near(g["trident"]["mfu"], 97500 * 854654976 / 800e12, "trident MFU")
        near(g["llmc"]["mfu"], 16384 / 0.1625 * 854654976 / 800e12, "llm.c MFU")
        near(g["trident"]["peak_device_memory_mib"], 20480, "trident memory")
        near(g["trident"]["predicted_device_memory_mib"], 19000, "trident predicted memory")
        near(g["torch"]["peak_device_memory_mib"], 30000.5, "torch memory")
        near(g["llmc"]["device_memory_usage_mib"], 25000, "llm.c memory")
        l = s["shapes"]["llama_1b"]
        if l["trident"]["tokens_per_s"] is not None or l["trident"]["rc"] != 124 or "llmc" in l:
            fails.append("llama: %r" % l); print("FAIL: the timed-out Llama run:", l)
        md = open(os.path.join(d, "speed.md")).read()
        if "| 97500 | 81920 | 100825 | 1.19 | 0.97 |" not in md or "llama_1b: trident rc 124" not in md:
            fails.append("speed.md"); print("FAIL: speed.md:\n" + md)
print("gpu_speed_report: %s" % ("FAILED: %d" % len(fails) if fails else "all checks passed"))
sys.exit(1 if fails else 0)

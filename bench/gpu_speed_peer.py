#!/usr/bin/env python3
"""bench/gpu_speed.sh's Python side (issue 35), three commands:

  gpu_speed_peer.py peak --device cuda [--n 8192] [--seconds 3]
      the bf16 GEMM peak: torch.matmul of two n x n bf16 matrices in a loop, the best of several
      timed batches; prints "bf16_gemm_tflops X".
  gpu_speed_peer.py run SCRIPT ARGS...
      runs a peer script (../shared/bench/peer_torch_gpt2.py, bench/peer_torch_llama.py) in this
      process, then prints "peak_device_memory_mib X" (torch.cuda.max_memory_allocated) where it
      used a GPU, else "peak_rss_mib X".
  gpu_speed_peer.py attention --device cuda [--batch 16 --seq 1024 --heads 12 --head-size 64] [--reps 20]
      torch's scaled_dot_product_attention (causal, bf16 on cuda, fp32 on cpu) forward and backward
      alone, timed as bench/gpu_attention.c times trident's; prints the same "attention ..." line.
  gpu_speed_peer.py report OUTDIR
      reads OUTDIR/shapes.json (what gpu_speed.sh ran) and the runs' logs, writes OUTDIR/speed.json
      and OUTDIR/speed.md.
"""
import json, os, re, resource, runpy, statistics, sys, time


def peak(argv):
    import argparse
    import torch
    ap = argparse.ArgumentParser(prog="gpu_speed_peer.py peak")
    ap.add_argument("--device", default="cuda"); ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args(argv)
    n = a.n
    x = torch.randn(n, n, device=a.device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=a.device, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    z = x @ y; sync()  # cuBLAS's start-up
    best, end, reps = 0.0, time.perf_counter() + a.seconds, 1
    while True:
        sync(); t = time.perf_counter()
        for _ in range(reps): z = torch.matmul(x, y)
        sync(); dt = time.perf_counter() - t
        best = max(best, 2.0 * n ** 3 * reps / dt)
        if time.perf_counter() > end: break
        if dt < 0.05: reps *= 2
    print("bf16_gemm_tflops %.4f (n %d, torch %s, %s)" % (best / 1e12, n, torch.__version__,
          torch.cuda.get_device_name() if a.device == "cuda" else "cpu"))


def run(argv):
    script = argv[0]
    sys.argv = [script] + argv[1:]
    runpy.run_path(script, run_name="__main__")
    import torch
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        print("peak_device_memory_mib %.1f" % (torch.cuda.max_memory_allocated() / 2 ** 20))
    else:
        print("peak_rss_mib %.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def attention(argv):
    import argparse
    import torch
    import torch.nn.functional as F
    ap = argparse.ArgumentParser(prog="gpu_speed_peer.py attention")
    ap.add_argument("--device", default="cuda")
    for n, d in (("--batch", 16), ("--seq", 1024), ("--heads", 12), ("--head-size", 64), ("--reps", 20)):
        ap.add_argument(n, type=int, default=d)
    a = ap.parse_args(argv)
    dt = torch.bfloat16 if a.device == "cuda" else torch.float32
    shape = (a.batch, a.heads, a.seq, a.head_size)
    q, k, v = (torch.randn(shape, device=a.device, dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(shape, device=a.device, dtype=dt)
    cuda = a.device == "cuda"
    def timed(fn):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            return s.elapsed_time(e) / 1e3
        t = time.perf_counter(); fn(); return time.perf_counter() - t
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None:  # torch before 2.0 (Debian's, for --smoke): plain causal softmax attention
        mask = torch.ones(a.seq, a.seq, device=a.device, dtype=torch.bool).tril()
        def sdpa(q, k, v, is_causal):
            s = (q @ k.transpose(-1, -2)) / a.head_size ** 0.5
            return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    fwd = bwd = 1e30
    for r in range(a.reps + 1):
        box = {}
        tf = timed(lambda: box.__setitem__("o", sdpa(q, k, v, is_causal=True)))
        tb = timed(lambda: box["o"].backward(g))
        q.grad = k.grad = v.grad = None
        if r > 0:
            fwd, bwd = min(fwd, tf), min(bwd, tb)
    flops = 4.0 * a.batch * a.heads * a.seq * a.seq * a.head_size / 2.0
    print("attention backend torch-%s dtype %s B %d T %d heads %d head_size %d (torch %s)" % (
        "sdpa" if hasattr(F, "scaled_dot_product_attention") else "softmax", str(dt).replace("torch.", ""), a.batch, a.seq, a.heads, a.head_size, torch.__version__))
    print("attention fwd_ms %.4f fwd_tflops %.2f bwd_ms %.4f bwd_tflops %.2f" % (
        fwd * 1e3, flops / fwd / 1e12, bwd * 1e3, 2.5 * flops / bwd / 1e12))


def megatron_flops_per_token(s):
    """Megatron's num_floating_point_operations over one token (forward + backward, no recompute)."""
    L, h, nh, g, ffn, v, seq = s["layers"], s["hidden"], s["heads"], s["groups"], s["ffn"], s["padded_vocab"], s["seq"]
    gated = 1.5 if s["arch"] == "llama" else 1.0
    return 12 * L * h * h * ((1 + g / nh + seq / h) + ffn / h * gated + v / (2 * L * h))


def grab(path, pattern, conv=float, many=False):
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return [] if many else None
    found = [conv(m) for m in re.findall(pattern, text)]
    return found if many else (found[-1] if found else None)


def median_after(values, skip):
    v = values[skip:] or values
    return statistics.median(v) if v else None


def report(argv):
    out = argv[0]
    cfg = json.load(open(os.path.join(out, "shapes.json")))
    peak_tflops = grab(os.path.join(out, "peak.log"), r"bf16_gemm_tflops ([0-9.]+)")
    res = {"date": cfg["date"], "gpu": cfg["gpu"], "bundle": cfg["bundle"], "smoke": cfg["smoke"],
           "bf16_gemm_peak_tflops": peak_tflops, "shapes": {}}
    rows = []
    for s in cfg["shapes"]:
        name, tokens = s["name"], s["mbs"] * s["seq"]
        fpt = megatron_flops_per_token(s)
        r = {"shape": s, "model_flops_per_token": fpt}
        log = lambda side: os.path.join(out, "%s_%s.log" % (name, side))
        rc = lambda side: grab(os.path.join(out, "%s_%s.rc" % (name, side)), r"(-?\d+)", int)
        # trident: the metrics file's tokens/s, median over the iterations after the warm-up
        tp = []
        try:
            tp = [json.loads(l)["tokens_per_s"] for l in open(os.path.join(out, name + "_trident.jsonl")) if "tokens_per_s" in l]
        except (OSError, ValueError):
            pass
        mem = grab(log("trident"), r"peak device memory, stage 0: ([0-9.]+) MiB measured")
        r["trident"] = {"rc": rc("trident"), "tokens_per_s": median_after(tp, cfg["warmup"]), "iterations": len(tp),
                        "peak_device_memory_mib": mem,
                        "peak_rss_mib": grab(log("trident"), r"peak memory \(RSS\), stage 0: ([0-9.]+) MiB measured"),
                        "predicted_device_memory_mib": grab(log("trident"), r"MiB measured \(the memory pool's high-water mark\), ([0-9.]+) MiB predicted")}
        # the PyTorch peer: its best step after the first (the compiling one)
        r["torch"] = {"rc": rc("torch"), "tokens_per_s": grab(log("torch"), r"tokens_per_s ([0-9.]+)"),
                      "peak_device_memory_mib": grab(log("torch"), r"peak_device_memory_mib ([0-9.]+)"),
                      "peak_rss_mib": grab(log("torch"), r"peak_rss_mib ([0-9.]+)"), "figure": "best step after the first"}
        # llm.c: each step's milliseconds, median after the warm-up
        if s["arch"] == "gpt2":
            if os.path.exists(log("llmc")):
                ms = grab(log("llmc"), r"step +\d+/\d+ \| loss .*?\| ([0-9.]+) ms \|", float, many=True)
                r["llmc"] = {"rc": rc("llmc"), "iterations": len(ms),
                             "tokens_per_s": tokens * 1000.0 / median_after(ms, cfg["warmup"]) if ms else None,
                             "device_memory_usage_mib": grab(log("llmc"), r"device memory usage: (\d+) MiB", int)}
            else:
                r["llmc"] = {"rc": None, "tokens_per_s": None, "note": cfg.get("llmc_note", "not run")}
        for side in ("trident", "torch", "llmc"):
            if side in r and r[side].get("tokens_per_s") and peak_tflops:
                r[side]["mfu"] = r[side]["tokens_per_s"] * fpt / (peak_tflops * 1e12)
        t = r["trident"]["tokens_per_s"]
        for side in ("torch", "llmc"):
            o = r.get(side, {}).get("tokens_per_s")
            r["trident_over_" + side] = t / o if t and o else None
        res["shapes"][name] = r
        rows.append((name, s, r))
    # attention alone: trident's tensor-core and CUDA-core kernels and torch's SDPA (bench/gpu_attention.c)
    res["attention"] = {}
    for side in ("trident", "trident_f32in", "trident_simt", "torch"):
        path = os.path.join(out, "attention_%s.log" % side)
        if os.path.exists(path):
            res["attention"][side] = {k: grab(path, k + r" ([0-9.]+)") for k in ("fwd_ms", "fwd_tflops", "bwd_ms", "bwd_tflops", "bwd_rerun_ms")}
            res["attention"][side]["rc"] = grab(os.path.join(out, "attention_%s.rc" % side), r"(-?\d+)", int)
    # generation: trident's "N tokens/s (first step included ...)" line against the peer's tokens_per_s
    res["generation"] = {}
    for b in (1, 8):
        tr = grab(os.path.join(out, "gen_b%d_trident.log" % b), r"([0-9.]+) tokens/s \(first")
        pe = grab(os.path.join(out, "gen_b%d_torch.log" % b), r"^tokens_per_s ([0-9.]+)$".replace("^", "(?m)^"))
        if tr is not None or pe is not None or os.path.exists(os.path.join(out, "gen_b%d_trident.log" % b)):
            res["generation"]["batch_%d" % b] = {"trident_tokens_per_s": tr, "torch_tokens_per_s": pe,
                                                 "trident_over_torch": tr / pe if tr and pe else None}
    json.dump(res, open(os.path.join(out, "speed.json"), "w"), indent=1)

    f = lambda x, fmt: (fmt % x) if x is not None else "-"
    mib = lambda d: f(d.get("peak_device_memory_mib") or d.get("device_memory_usage_mib") or d.get("peak_rss_mib"), "%.0f")
    md = ["# trident against PyTorch and llm.c (bench/gpu_speed.sh, issue 35)", "",
          "%s; %s; bundle %s; bf16 GEMM peak %s TFLOP/s (torch.matmul, this run: %s)%s" % (
              cfg["date"], cfg["gpu"], cfg["bundle"], f(peak_tflops, "%.4g"), grab(os.path.join(out, "peak.log"), r"bf16_gemm_tflops [0-9.]+ \((.*)\)", str), "; SMOKE (cpu, tiny shapes)" if cfg["smoke"] else ""), "",
          "| shape | tokens/iter | trident tok/s | torch tok/s | llm.c tok/s | trident/torch | trident/llm.c | MFU trident | MFU torch | MFU llm.c | peak MiB trident / torch / llm.c |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s, r in rows:
        lc = r.get("llmc", {})
        md.append("| %s (%dx%d, %d heads%s) | %d x %d | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |" % (
            name, s["layers"], s["hidden"], s["heads"], ", %d groups" % s["groups"] if s["arch"] == "llama" else "", s["mbs"], s["seq"],
            f(r["trident"]["tokens_per_s"], "%.0f"), f(r["torch"]["tokens_per_s"], "%.0f"), f(lc.get("tokens_per_s"), "%.0f") if lc else "n/a",
            f(r["trident_over_torch"], "%.2f"), f(r["trident_over_llmc"], "%.2f"),
            f(r["trident"].get("mfu"), "%.3f"), f(r["torch"].get("mfu"), "%.3f"), f(lc.get("mfu"), "%.3f") if lc else "n/a",
            mib(r["trident"]), mib(r["torch"]), mib(lc) if lc else "n/a"))
    md += ["", "trident: median tokens/s of the iterations after the first %d (--metrics-file); torch: its best step after the "
           "first (compiling) one; llm.c: the median of its steps' milliseconds after the first %d. MFU: Megatron's FLOPs "
           "a token (the same for all three, vocabulary padded to %s) x tokens/s over the measured peak. Memory: trident's "
           "pool high-water mark, torch.cuda.max_memory_allocated, llm.c's cudaMemGetInfo after its allocations." % (
               cfg["warmup"], cfg["warmup"], ", ".join(sorted({str(s["padded_vocab"]) for s in cfg["shapes"]}))), ""]
    for name, s, r in rows:
        bad = ["%s rc %s" % (side, r[side]["rc"]) for side in ("trident", "torch", "llmc")
               if side in r and r[side].get("rc") not in (0, None)]
        if "llmc" in r and r["llmc"].get("note"): bad.append("llm.c: " + r["llmc"]["note"])
        if bad: md.append("- %s: %s" % (name, "; ".join(bad)))
    if res["attention"]:
        shape = grab(os.path.join(out, "attention_trident.log"), r"attention backend (.*)", str)
        md += ["", "Attention alone (%s; causal; forward, and backward dq dk dv; the best after a warm-up, timed by "
               "events; FlashAttention's FLOP count):" % shape, "",
               "| kernels | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | bwd ms without out (D by a forward rerun) |",
               "|---|---|---|---|---|---|"]
        names = {"trident": "trident, tensor cores (att_mma.cuh)",
                 "trident_f32in": "trident, tensor cores, fp32 q k v of a --bf16 run (rounded as they load)",
                 "trident_simt": "trident, CUDA cores (TRIDENT_CUDA_ATTENTION=simt)",
                 "torch": "torch scaled_dot_product_attention"}
        for side, a in res["attention"].items():
            md.append("| %s | %s | %s | %s | %s | %s |" % (names[side], f(a["fwd_ms"], "%.3f"), f(a["fwd_tflops"], "%.1f"),
                                                          f(a["bwd_ms"], "%.3f"), f(a["bwd_tflops"], "%.1f"),
                                                          f(a["bwd_rerun_ms"], "%.3f")))
    if res["generation"]:
        md += ["", "Generation (GPT-2 124M from the 124M run's checkpoint, fp32, greedy, prompt 16, 128 new tokens a row; "
               "tokens/s with the first step included, both sides):", "",
               "| batch | trident tok/s | torch tok/s | trident/torch |", "|---|---|---|---|"]
        for k, g in res["generation"].items():
            md.append("| %s | %s | %s | %s |" % (k.split("_")[1], f(g["trident_tokens_per_s"], "%.0f"),
                                                 f(g["torch_tokens_per_s"], "%.0f"), f(g["trident_over_torch"], "%.2f")))
    # trident's own time breakdown of each shape (kernel families by the backend's events, the
    # optimizer, communication, data, untimed host gaps): where the next speed-up is
    for name, s, r in rows:
        try:
            text = open(os.path.join(out, "%s_trident.log" % name), errors="replace").read().splitlines()
        except OSError:
            continue
        start = next((i for i, l in enumerate(text) if "time breakdown" in l), None)
        if start is None:
            continue
        block = [text[start]]
        for l in text[start + 1:]:
            block.append(l)
            if "untimed" in l:
                break
        res["shapes"][name]["trident"]["breakdown"] = block
        md += ["", "trident's time breakdown, %s:" % name, "", "```"] + block + ["```"]
    json.dump(res, open(os.path.join(out, "speed.json"), "w"), indent=1)
    open(os.path.join(out, "speed.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("peak", "run", "attention", "report"):
        print("usage: gpu_speed_peer.py peak|run|attention|report ...: see its docstring", file=sys.stderr); sys.exit(2)
    {"peak": peak, "run": run, "attention": attention, "report": report}[sys.argv[1]](sys.argv[2:])

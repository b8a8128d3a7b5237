#!/usr/bin/env python3
"""bench/gpu_speed.sh's Python side (issue 35), three commands:

  gpu_speed_peer.py peak --device cuda [--n 8192] [--seconds 3]
      the bf16 GEMM peak: torch.matmul of two n x n bf16 matrices in a loop, the best of several
      timed batches; prints "bf16_gemm_tflops X".
  gpu_speed_peer.py run SCRIPT ARGS...
      runs a peer script (../shared/bench/peer_torch_gpt2.py, bench/peer_torch_llama.py) in this
      process, then prints "peak_device_memory_mib X" (torch.cuda.max_memory_allocated) where it
      used a GPU, else "peak_rss_mib X".
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
    open(os.path.join(out, "speed.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("peak", "run", "report"):
        print("usage: gpu_speed_peer.py peak|run|report ...: see its docstring", file=sys.stderr); sys.exit(2)
    {"peak": peak, "run": run, "report": report}[sys.argv[1]](sys.argv[2:])

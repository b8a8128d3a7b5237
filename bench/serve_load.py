#!/usr/bin/env python3
"""Load on a running `trident serve`: N concurrent clients send greedy PUT /api requests for D seconds;
prints requests/s, tokens/s and latency percentiles.

    python3 bench/serve_load.py --port 5000 --clients 8 --seconds 30 --tokens 32"""
import argparse, json, threading, time, urllib.error, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--host", default="127.0.0.1"); ap.add_argument("--port", type=int, default=5000)
ap.add_argument("--clients", type=int, default=8); ap.add_argument("--seconds", type=float, default=30)
ap.add_argument("--tokens", type=int, default=32); ap.add_argument("--prompt", default="First Citizen: Before we proceed")
a = ap.parse_args()
url = f"http://{a.host}:{a.port}/api"
body = json.dumps({"prompts": [a.prompt], "tokens_to_generate": a.tokens, "temperature": 0}).encode()
lat, errors, lock = [], [0], threading.Lock()
for _ in range(1200):  # until the server answers (it may still be loading the model): 120 s at most
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=2)
    except urllib.error.HTTPError:
        break  # 405: it is up
    except OSError:
        time.sleep(0.1)
else:
    raise SystemExit(f"no server answers at {url}")
end = time.time() + a.seconds

def client():
    while time.time() < end:
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body, method="PUT"), timeout=300) as r:
                r.read()
            with lock: lat.append(time.perf_counter() - t0)
        except Exception:
            with lock: errors[0] += 1

t0 = time.time()
th = [threading.Thread(target=client) for _ in range(a.clients)]
[t.start() for t in th]; [t.join() for t in th]
wall = time.time() - t0
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1e3 if lat else float("nan")
print(f"{a.clients} clients, {wall:.1f} s: {len(lat)} requests ({errors[0]} failed), {len(lat) / wall:.2f} requests/s, "
      f"up to {len(lat) * a.tokens / wall:.1f} tokens/s; latency p50 {pct(50):.0f} ms, p90 {pct(90):.0f} ms, "
      f"p99 {pct(99):.0f} ms")

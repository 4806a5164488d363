#!/usr/bin/env python3
"""RSS of `corral serve` while it is sent distinct heavy constraints, one after another.

Each request asks for a regex whose automaton is large, `(a|b)*a(a|b){16}c{i}` with a new
`i`, and `max_tokens: 1`, which no output fits: every request is refused (400), after the
constraint was compiled and its shortest completion looked for. Prints the server's RSS
every 50 requests and at the end, with the cache's own count of its bytes.

    python3 benches/hostile/heavy_constraints.py [--bin target/release/corral] [-n 500]
"""
import argparse, json, os, re, subprocess, sys, time, urllib.request, urllib.error


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def post(port, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/corral")
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--pattern", default="(a|b)*a(a|b){{16}}c{{{i}}}")
    ap.add_argument("--max-tokens", type=int, default=1)
    ap.add_argument("--serve-args", default="")
    args = ap.parse_args()
    cmd = [args.bin, "serve", "--port", str(args.port)] + args.serve_args.split()
    srv = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=5)
                break
            except Exception:
                time.sleep(0.5)
        print(f"loaded: RSS {rss_mb(srv.pid):.0f} MB")
        statuses = {}
        t0 = time.time()
        for i in range(1, args.n + 1):
            code, _ = post(args.port, {"prompt": "x", "max_tokens": args.max_tokens,
                                       "regex": args.pattern.format(i=i)})
            statuses[code] = statuses.get(code, 0) + 1
            if i % 50 == 0 or i == args.n:
                cache = metric(args.port, "corral_constraint_cache_bytes")
                entries = metric(args.port, "corral_constraint_cache_entries")
                extra = "" if cache is None else f", cache {cache/2**20:.0f} MiB in {entries:.0f} entries"
                print(f"{i:4d} requests ({time.time()-t0:5.1f} s): RSS {rss_mb(srv.pid):6.0f} MB{extra}", flush=True)
        print("statuses:", statuses)
        alive = srv.poll() is None
        print("server still running:", alive)
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()

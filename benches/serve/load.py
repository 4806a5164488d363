"""corral serve under load: single-stream and aggregate decode speed, time to first token.

    cargo build --release --bin corral && python3 benches/serve/load.py [--tokens 128]

Starts `corral serve --port 0 --max-concurrent 8` with the default model and measures, with
streaming clients (standard library only):
- one client's decode tok/s, beside `corral generate --stats` on the same prompt (its
  decode_tok_s), both unconstrained and greedy, `--tokens` tokens each (greedy, so every run is the
  same; a regex of lowercase letters and spaces, so outputs can be checked);
- aggregate tok/s with 1, 4 and 8 concurrent clients (`ignore_eos`, so each decodes
  `--tokens` tokens), every output checked against its constraint;
- time to the first content chunk for a schema the server has not seen (compile included;
  benches/data/order.schema.json, about 25 properties) and for the same schema again;
- the gap between the tokens of two decoding streams, alone and while a third request's
  long prompt (about 3,000 tokens) is processed (`--only gap`; `--serve-args` passes
  options such as `--prefill-per-pass N` to the server, `--bin` names another build).
"""

import argparse
import json
import re
import subprocess
import threading
import time
import urllib.request

CORRAL = "target/release/corral"
SERVE_ARGS = []


def start():
    p = subprocess.Popen([CORRAL, "serve", "--port", "0", "--max-concurrent", "8"] + SERVE_ARGS,
                         stderr=subprocess.PIPE, text=True)
    base = re.search(r"(http://\S+)", p.stderr.readline()).group(1)
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health") as r:
                if r.status == 200:
                    return p, base
        except Exception:
            time.sleep(0.1)
    raise RuntimeError("server did not become healthy")


def stream(base, body, times=None):
    """(text, completion tokens, seconds to first content, seconds total); the arrival time
    of each content chunk is appended to `times` if given."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    first, text, tokens = None, "", 0
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("usage"):
                tokens = c["usage"]["completion_tokens"]
            for ch in c["choices"]:
                d = ch["delta"].get("content")
                if d:
                    if times is not None:
                        times.append(time.perf_counter())
                    first = first or time.perf_counter() - t0
                    text += d
    return text, tokens, first, time.perf_counter() - t0


def gaps(base, tokens=400, prompt_words=1000):
    """Inter-token gaps of two streams, alone and while a long prompt is processed."""
    body = {"messages": [{"role": "user", "content": "Write a long story about the sea."}],
            "temperature": 0, "max_tokens": tokens, "ignore_eos": True}
    times = [[], []]
    threads = [threading.Thread(target=stream, args=(base, body, times[i])) for i in range(2)]
    for t in threads:
        t.start()
    while min(len(t) for t in times) < 40:
        time.sleep(0.05)
    long_prompt = " ".join(f"word{i % 97}" for i in range(prompt_words))
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(
        {"prompt": long_prompt, "max_tokens": 1}).encode(), headers={"content-type": "application/json"})
    t_send = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        usage = json.load(r)["usage"]
    t_done = time.perf_counter()
    for t in threads:
        t.join()
    alone, during = [], []
    for ts in times:
        for a, b in zip(ts, ts[1:]):
            (during if b > t_send and a < t_done else alone).append((b - a) * 1e3)
    alone.sort()
    during.sort()
    med = lambda xs: xs[len(xs) // 2]
    print(f"two streams alone: gap median {med(alone):.0f} ms, max {alone[-1]:.0f} ms ({len(alone)} gaps)")
    print(f"during a {usage['prompt_tokens']}-token prompt ({(t_done - t_send):.2f} s to its answer): "
          f"gap median {med(during):.0f} ms, max {during[-1]:.0f} ms ({len(during)} gaps); "
          f"median ratio {med(during) / med(alone):.2f}")


def main():
    global CORRAL
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--only", choices=["all", "speed", "gap"], default="all")
    ap.add_argument("--bin", default=CORRAL)
    ap.add_argument("--serve-args", default="")
    args = ap.parse_args()
    CORRAL = args.bin
    SERVE_ARGS.extend(args.serve_args.split())
    if args.only == "gap":
        p, base = start()
        try:
            gaps(base)
        finally:
            p.terminate()
            p.wait()
        return
    n = args.tokens
    prompt = "Write a long story about the sea."
    gen = subprocess.run([CORRAL, "generate", "--prompt", prompt, "--regex", "[a-z ]+", "--max-tokens",
                          str(n), "--temperature", "0", "--stats"], capture_output=True, text=True, check=True)
    stats = json.loads(gen.stderr.strip().splitlines()[-1])
    print(f"corral generate, {stats['prompt_tokens']}-token prompt at {stats['prompt_tok_s']:.0f} tok/s, "
          f"{stats['generated_tokens']} tokens: decode {stats['decode_tok_s']:.1f} tok/s")
    p, base = start()
    try:
        # ignore_eos: every request decodes exactly `n` tokens.
        body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": n,
                "regex": "[a-z ]+", "ignore_eos": True}
        stream(base, body)  # warm-up: the constraint is cached from here on
        for clients in (1, 4, 8):
            results = [None] * clients

            def run(i):
                results[i] = stream(base, body)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            total = sum(r[1] for r in results)
            for text, _, _, _ in results:
                assert re.fullmatch(r"[a-z ]+", text), text
            per = [r[1] / (r[3] - r[2]) for r in results]
            print(f"{clients} streaming client(s): aggregate {total / wall:.1f} tok/s, per client {min(per):.1f}-{max(per):.1f} tok/s "
                  f"(decode after first token), {total} tokens in {wall:.2f} s")
        order = json.load(open("benches/data/order.schema.json"))
        for label, fresh in (("new schema", True), ("cached schema", False)):
            ttfts = []
            for k in range(5):
                # A schema the server has not seen: the order schema under a new title.
                schema = dict(order, title=f"order {k if fresh else 0}")
                b = {"messages": [{"role": "user", "content": "An order, as JSON."}], "max_tokens": 300,
                     "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
                if not fresh and k == 0:
                    stream(base, b)
                text, _, first, _ = stream(base, b)
                json.loads(text)
                ttfts.append(first * 1e3)
            ttfts.sort()
            print(f"time to first token, {label}: median {ttfts[2]:.1f} ms (min {ttfts[0]:.1f}, max {ttfts[-1]:.1f})")
        if args.only == "all":
            gaps(base)
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()

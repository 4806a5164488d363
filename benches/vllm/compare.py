#!/usr/bin/env python3
"""corral, xgrammar and guidance as vLLM's structured-output backend, on the same requests
in one run: each backend in a fresh process of its own, one after another, with vLLM's
engine in that process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that the time vLLM spends on
masks can be measured where it is spent.

For each backend:
- time to first token with a new schema: single requests one after another, each with a
  schema never seen, `max_tokens: 1` (the compile, the prompt and the first mask);
- a batch of `--requests` requests, each with a new constraint (schemas, regexes, choices,
  GBNF; python/tests/vllm_cases.py), 8 running at a time: wall time per generated token,
  and the share of that wall time spent in StructuredOutputManager.grammar_bitmask (the
  masks of every step, filled by the backend);
- outputs checked without corral (jsonschema, re.fullmatch, membership); an output cut by
  max_tokens counts as invalid.

    target/vllm-venv/bin/python benches/vllm/compare.py [--requests 32] [--backends corral,xgrammar,guidance]

Needs scripts/test-vllm's environment and model folder (target/vllm-model).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python/tests"))


def child(backend, requests, start):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams
    from vllm.v1.structured_output import StructuredOutputManager

    from vllm_cases import MAX_TOKENS, cases, chat_prompt, structured_outputs

    mask_s = [0.0]
    fill = StructuredOutputManager.grammar_bitmask

    def timed(self, *a, **kw):
        t = time.perf_counter()
        try:
            return fill(self, *a, **kw)
        finally:
            mask_s[0] += time.perf_counter() - t

    StructuredOutputManager.grammar_bitmask = timed
    t0 = time.perf_counter()
    llm = LLM(
        model=str(ROOT / "target/vllm-model"),
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=2048,
        max_num_seqs=8,
        seed=0,
        disable_log_stats=False,
        structured_outputs_config={"backend": backend},
    )
    load_s = time.perf_counter() - t0
    tok = llm.get_tokenizer()
    # Warm the model (not the grammar backend): an unconstrained request.
    llm.generate([chat_prompt(tok, "Hello")], SamplingParams(max_tokens=8), use_tqdm=False)

    ttft = []
    for name, kind, spec, prompt, _check in [c for c in cases(16, start=start + 10_000) if c[1] == "json"][:6]:
        t = time.perf_counter()
        llm.generate([chat_prompt(tok, prompt)], SamplingParams(max_tokens=1, structured_outputs=structured_outputs(kind, spec)), use_tqdm=False)
        ttft.append((time.perf_counter() - t) * 1e3)

    batch = cases(requests, start=start)
    prompts = [chat_prompt(tok, c[3]) for c in batch]
    params = [
        SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, seed=i, structured_outputs=structured_outputs(c[1], c[2]))
        for i, c in enumerate(batch)
    ]
    mask_s[0] = 0.0
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    invalid = []
    for c, o in zip(batch, outs):
        out = o.outputs[0]
        why = c[4](out.text) if out.finish_reason == "stop" else f"finish_reason {out.finish_reason}"
        if why:
            invalid.append({"case": c[0], "why": why[:200], "text": out.text[:200]})
    print(json.dumps({
        "backend": backend,
        "load_s": round(load_s, 1),
        "ttft_new_schema_ms": [round(x, 1) for x in ttft],
        "requests": len(batch),
        "generated_tokens": tokens,
        "wall_s": round(wall, 2),
        "ms_per_token": round(wall / tokens * 1e3, 2),
        "mask_s": round(mask_s[0], 3),
        "mask_share": round(mask_s[0] / wall, 4),
        "invalid": invalid,
    }), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--backends", default="corral,xgrammar,guidance")
    ap.add_argument("--start", type=int, default=int(time.time()) % 100_000 * 100)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.requests, args.start)
        return
    results = []
    for backend in args.backends.split(","):
        p = subprocess.run(
            [sys.executable, __file__, "--child", backend, "--requests", str(args.requests), "--start", str(args.start)],
            capture_output=True, text=True,
        )
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode or not lines:
            print(p.stderr[-4000:], file=sys.stderr)
            sys.exit(f"{backend}: the run failed ({p.returncode})")
        r = json.loads(lines[-1])
        results.append(r)
        print(json.dumps(r), flush=True)
    print()
    print("| backend | ms per generated token | tokens | invalid | TTFT new schema, median (range) ms | masks' share of wall time |")
    print("|---|---|---|---|---|---|")
    for r in results:
        t = r["ttft_new_schema_ms"]
        print(
            f"| {r['backend']} | {r['ms_per_token']:.2f} | {r['generated_tokens']} | {len(r['invalid'])}/{r['requests']} | "
            f"{statistics.median(t):.0f} ({min(t):.0f}-{max(t):.0f}) | {r['mask_share'] * 100:.1f}% |"
        )


if __name__ == "__main__":
    main()

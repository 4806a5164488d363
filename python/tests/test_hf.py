"""corral.hf.LogitsProcessor in transformers' `generate` with SmolLM2-135M (the folder
make_hf_model.py makes): greedy, sampled, beam search, and a batch of two grammars. Run by
scripts/test-vllm (transformers and torch are in its environment)."""

import os
import pathlib

import pytest
import torch

import corral
import corral.hf
import corral.spec
from common import ROOT, need
from vllm_cases import cases, chat_prompt

MODEL = pathlib.Path(os.environ.get("CORRAL_VLLM_MODEL", ROOT / "target/vllm-model"))


@pytest.fixture(scope="module")
def model_and_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    need(MODEL / "config.json")
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32)
    return model, tok


def generate(model, tok, texts, grammars, **kw):
    from transformers import LogitsProcessorList

    prompts = [chat_prompt(tok, t) for t in texts]
    inputs = tok(prompts, return_tensors="pt", padding=True)
    proc = corral.hf.LogitsProcessor(grammars, tok)
    out = model.generate(
        **inputs,
        logits_processor=LogitsProcessorList([proc]),
        max_new_tokens=320,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        **kw,
    )
    n = inputs["input_ids"].shape[1]
    rows = out[:, n:]
    texts = []
    for row in rows.tolist():
        ended = tok.eos_token_id in row
        row = row[: row.index(tok.eos_token_id)] if ended else row
        texts.append((tok.decode(row, skip_special_tokens=False), ended))
    return texts


def compiled(case):
    _name, kind, spec, _prompt, _check = case
    import json

    return corral.spec.compile(kind, json.dumps(spec) if kind == "json" else spec)


def check_all(batch, results):
    for case, (text, ended) in zip(batch, results):
        assert ended, f"{case[0]}: no end token: {text!r}"
        assert case[4](text) is None, f"{case[0]}: {case[4](text)}: {text!r}"


def test_greedy_one_grammar_per_case(model_and_tokenizer):
    model, tok = model_and_tokenizer
    for case in cases(7, start=600):
        check_all([case], generate(model, tok, [case[3]], compiled(case), do_sample=False))


def test_sampled(model_and_tokenizer):
    model, tok = model_and_tokenizer
    torch.manual_seed(0)
    for case in cases(8, start=700)[:6]:
        check_all([case], generate(model, tok, [case[3]], compiled(case), do_sample=True, temperature=0.9))


def test_a_batch_of_two_grammars(model_and_tokenizer):
    model, tok = model_and_tokenizer
    batch = [cases(8, start=800)[0], cases(8, start=800)[4]]
    results = generate(model, tok, [c[3] for c in batch], [compiled(c) for c in batch], do_sample=False)
    check_all(batch, results)


def test_beam_search(model_and_tokenizer):
    model, tok = model_and_tokenizer
    batch = [cases(8, start=900)[4], cases(8, start=900)[6]]
    results = generate(model, tok, [c[3] for c in batch], [compiled(c) for c in batch], do_sample=False, num_beams=3)
    check_all(batch, results)


def pack(allowed):
    """A bool ``[batch, V]`` tensor as corral's int32 bitmask ``[batch, ceil(V / 32)]``."""
    rows, width = allowed.shape
    words = (width + 31) // 32
    padded = torch.zeros(rows, words * 32, dtype=torch.int64)
    padded[:, :width] = allowed.to(torch.int64)
    weights = torch.tensor([1 << k for k in range(32)], dtype=torch.int64)
    w = (padded.reshape(rows, words, 32) * weights).sum(-1)
    return (((w + (1 << 31)) % (1 << 32)) - (1 << 31)).to(torch.int32)


def test_masked_logsumexp_is_the_log_of_the_mass_the_mask_keeps():
    from corral.torch import mask_log_mass, masked_logsumexp

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 70, generator=g) * 4
    allowed = torch.rand(4, 70, generator=g) < 0.3
    allowed[2] = False
    allowed[2, 69] = True  # one token, in the last word's high bits
    allowed[3, 31] = True  # the sign bit of a word
    bitmask = pack(allowed)
    for t in (1.0, 0.7):
        scaled = logits / t
        kept = (torch.softmax(scaled, -1) * allowed).sum(-1).log()
        assert torch.allclose(mask_log_mass(logits, bitmask, t), kept, atol=1e-5)
        brute = torch.tensor([torch.logsumexp(scaled[i][allowed[i]], 0) for i in range(4)])
        assert torch.allclose(masked_logsumexp(scaled, bitmask), brute, atol=1e-5)
    # One row, and a row that allows nothing.
    assert torch.allclose(masked_logsumexp(logits[0], bitmask[0]), torch.logsumexp(logits[0][allowed[0]], 0))
    none = torch.zeros(1, 3, dtype=torch.int32)
    assert masked_logsumexp(logits[:1], none).item() == float("-inf")

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

"""The corral Python package on real tokenizers (scripts/test-python runs this with pytest).

Masks are checked against brute force (every token tried on a fork of the matcher), against
the Rust engine's (`corral replay --masks`) and against llguidance's, at every step.
"""

import json
import os
import random
import subprocess
import threading

import numpy as np
import pytest

import corral

from common import DOC, ROOT, allowed, json_gbnf, json_lark, need, tokenizer_path


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 2},
    },
    "required": ["name", "n", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tok():
    return corral.Tokenizer.from_file(tokenizer_path("llama3_1"))


def brute_force(tok, m):
    ok = set()
    for t in range(tok.vocab_size):
        f = m.fork()
        if f.accept_token(t):
            ok.add(t)
    return ok

def test_masks_equal_brute_force_along_a_random_walk(tok):
    rng = random.Random(7)
    g = corral.Grammar.from_json_schema(SCHEMA, whitespace=0)
    m = corral.Matcher(g, tok)
    bitmask = corral.allocate_token_bitmask(1, tok.vocab_size)
    for step in range(12):
        m.fill_next_token_bitmask(bitmask, 0)
        mask = allowed(bitmask[0], tok.vocab_size)
        if step % 3 == 0:
            assert mask == brute_force(tok, m), f"step {step}"
        assert mask, f"step {step}: nothing allowed"
        t = rng.choice(sorted(mask))
        assert m.accept_token(t)
        if m.is_terminated():
            break
    assert m.error is None

def test_accept_refuse_validate_rollback_fork_reset(tok):
    g = corral.Grammar.from_regex("(ab)+")
    m = corral.Matcher(g, tok)
    bitmask = corral.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bitmask)
    a = next(iter(allowed(bitmask[0], tok.vocab_size)))
    refused = next(t for t in range(tok.vocab_size) if not m.fork().accept_token(t))
    assert not m.accept_token(refused)
    assert not m.is_accepting()
    ids = [a]
    n = m.validate_tokens(ids + [refused])
    assert n == 1
    # validate_tokens did not advance.
    m.fill_next_token_bitmask(bitmask)
    assert a in allowed(bitmask[0], tok.vocab_size)
    f = m.fork()
    assert m.accept_token(a)
    m.rollback(1)
    m.fill_next_token_bitmask(bitmask)
    assert a in allowed(bitmask[0], tok.vocab_size)
    assert f.accept_token(a)
    m.reset()
    assert not m.is_accepting()

def test_termination_and_forced_tokens(tok):
    g = corral.Grammar.from_gbnf('root ::= "hello world"')
    m = corral.Matcher(g, tok)
    forced = m.forced_tokens()
    assert forced
    for t in forced:
        assert m.accept_token(t)
    assert m.is_accepting()
    # Complete and admitting nothing more but the end token.
    assert m.is_terminated()
    bitmask = corral.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bitmask)
    assert allowed(bitmask[0], tok.vocab_size) == set(tok.eos_token_ids)
    assert m.accept_token(tok.eos_token_ids[0])
    m.fill_next_token_bitmask(bitmask)
    assert allowed(bitmask[0], tok.vocab_size) == set()

def test_batch_fill_equals_single_fills(tok):
    grammars = [
        corral.Grammar.from_json_schema(SCHEMA),
        corral.Grammar.from_regex("[0-9]+"),
        corral.Grammar.from_gbnf('root ::= "yes" | "no"'),
    ]
    matchers = [corral.Matcher(g, tok) for g in grammars]
    batch = corral.allocate_token_bitmask(4, tok.vocab_size)
    corral.fill_next_token_bitmask_batch(matchers, batch, [3, 0, 1])
    for m, row in zip(matchers, [3, 0, 1]):
        one = corral.allocate_token_bitmask(1, tok.vocab_size)
        m.fill_next_token_bitmask(one)
        np.testing.assert_array_equal(one[0], batch[row])
    assert (batch[2] == -1).all()

def test_bad_bitmasks_are_refused_clearly(tok):
    m = corral.Matcher(corral.Grammar.from_regex("a"), tok)
    words = corral.bitmask_words(tok.vocab_size)
    cases = [
        (np.zeros((1, words), dtype=np.float32), "int32"),
        (np.zeros((1, words + 1), dtype=np.int32), "shape"),
        (np.zeros((2, words * 2), dtype=np.int32)[:, ::2], "contiguous"),
        ([0] * words, "numpy array"),
    ]
    ro = np.zeros((1, words), dtype=np.int32)
    ro.flags.writeable = False
    cases.append((ro, "read-only"))
    for bad, word in cases:
        with pytest.raises(ValueError) as e:
            m.fill_next_token_bitmask(bad)
        assert word in str(e.value)
    with pytest.raises(IndexError):
        m.fill_next_token_bitmask(np.zeros((1, words), dtype=np.int32), 1)

def test_errors_are_positioned_grammar_errors():
    for make, text, needle in [
        (corral.Grammar.from_gbnf, 'root ::= "a" | b', "grammar:1:16"),
        (corral.Grammar.from_regex, "(a", "regex"),
        (corral.Grammar.from_json_schema, {"type": "strin"}, "#/type"),
        (corral.Grammar.from_json_schema, "{not json", "schema"),
    ]:
        with pytest.raises(corral.GrammarError) as e:
            make(text)
        assert isinstance(e.value, ValueError)
        assert needle in str(e.value)

def test_batch_fills_from_several_threads(tok):
    g = corral.Grammar.from_json_schema(SCHEMA)
    words = corral.bitmask_words(tok.vocab_size)
    prefix = [corral.Matcher(g, tok) for _ in range(4)]
    expected = corral.allocate_token_bitmask(4, tok.vocab_size)
    corral.fill_next_token_bitmask_batch(prefix, expected)
    results, errors = [], []

    def run():
        try:
            ms = [corral.Matcher(g, tok) for _ in range(4)]
            out = np.zeros((4, words), dtype=np.int32)
            for _ in range(5):
                corral.fill_next_token_bitmask_batch(ms, out)
            results.append(out)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 6
    for r in results:
        np.testing.assert_array_equal(r, expected)

def test_tokenizer_options():
    t = corral.Tokenizer.from_file(tokenizer_path("qwen3"), vocab_size=151936, eos_token_ids=[151645])
    assert t.vocab_size == 151936
    assert t.eos_token_ids == [151645]
    with pytest.raises(ValueError):
        corral.Tokenizer.from_file(tokenizer_path("qwen3"), vocab_size=10)
    with pytest.raises(ValueError):
        corral.Tokenizer.from_file(tokenizer_path("qwen3"), eos_token_ids=[10**7])
    with pytest.raises(ValueError):
        corral.Tokenizer.from_file("/nonexistent/tokenizer.json")



def test_json_gbnf_masks_equal_llguidance():
    """Masks equal the llguidance package's (1.9.1) at every step of a replay."""
    import llguidance
    import llguidance.numpy

    for name in ["llama3_1", "qwen3", "gemma3"]:
        path = tokenizer_path(name)
        lltok = llguidance.LLTokenizer(path)
        # Both engines end on llguidance's choice of end token.
        tok = corral.Tokenizer.from_file(path, vocab_size=lltok.vocab_size, eos_token_ids=[lltok.eos_token])
        # Added tokens the tokenizer does not mark special are text to corral and
        # special to llguidance: left out of the comparison.
        with open(path) as f:
            added = json.load(f)["added_tokens"]
        text_added = [a["id"] for a in added if not a["special"] and a["id"] != lltok.eos_token]
        ours = corral.Matcher(corral.Grammar.from_gbnf(json_gbnf()), tok)
        theirs = llguidance.LLMatcher(lltok, llguidance.grammar_from("lark", json_lark()))
        assert not theirs.is_error(), theirs.get_error()
        mask = corral.allocate_token_bitmask(2, tok.vocab_size)
        tokens = lltok.tokenize_str(DOC) + [lltok.eos_token]
        for step, t in enumerate(tokens):
            ours.fill_next_token_bitmask(mask, 0)
            llguidance.numpy.fill_next_token_bitmask(theirs, mask, 1)
            a, b = allowed(mask[0], tok.vocab_size), allowed(mask[1], tok.vocab_size)
            a.difference_update(text_added)
            b.difference_update(text_added)
            assert a == b, f"{name}, step {step}: {lltok.decode_str(tokens[:step])!r}"
            assert ours.accept_token(t)
            assert theirs.consume_token(t)


def corral_binary():
    """The CLI that scripts/test builds (CORRAL_BIN overrides)."""
    path = os.environ.get("CORRAL_BIN", ROOT / "target" / "release" / "corral")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: run cargo build --release --bin corral")
    return path


@pytest.mark.parametrize("name", ["llama3_1", "qwen3", "gemma3"])
def test_json_gbnf_masks_equal_the_rust_engines(name, tmp_path):
    """The package's masks equal `corral replay`'s at every step of the canonical
    tokenization of a document, EOS included: the binding adds nothing and loses nothing."""
    path = tokenizer_path(name)
    tok = corral.Tokenizer.from_file(path)
    eos = tok.eos_token_ids[0]
    tok = corral.Tokenizer.from_file(path, eos_token_ids=[eos])
    doc = tmp_path / "doc.json"
    doc.write_text(DOC)
    masks = tmp_path / "masks.jsonl"
    grammar = need(ROOT / "tests/data/llama_cpp/grammars/json.gbnf")
    cmd = [str(corral_binary()), "replay", "--tokenizer", path, "--grammar", str(grammar)]
    cmd += ["--text", str(doc), "--eos", str(eos), "--masks", str(masks)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    steps = [json.loads(line) for line in masks.read_text().splitlines()]
    assert len(steps) == json.loads(run.stdout.splitlines()[-1])["tokens"] + 1
    m = corral.Matcher(corral.Grammar.from_gbnf(json_gbnf()), tok)
    bitmask = corral.allocate_token_bitmask(1, tok.vocab_size)
    for s in steps:
        m.fill_next_token_bitmask(bitmask)
        theirs = np.frombuffer(bytes.fromhex(s["words"]), dtype="<i4")
        assert theirs.shape == bitmask[0].shape
        diff = allowed(bitmask[0], tok.vocab_size) ^ allowed(theirs, tok.vocab_size)
        assert not diff, f"{name}, step {s['step']}: differ on {sorted(diff)[:10]}"
        if s["token"] is not None:
            assert m.accept_token(s["token"])
    assert eos in allowed(bitmask[0], tok.vocab_size)


def test_a_choice_grammar_takes_exactly_its_strings(tmp_path):
    """corral.spec's choice grammar (the serving engines' `choice`), with quotes, a
    backslash, control characters and non-ASCII text, checked by `corral match`."""
    import corral.spec

    choices = ['say "hi"', "back\\slash", "two\nlines\ttab", "caf\u00e9 \U0001f600", "bell\x07"]
    g = tmp_path / "choice.gbnf"
    g.write_text(corral.spec.choice_gbnf(choices))
    corral.Grammar.from_gbnf(g.read_text())
    for text, want in [(c, 0) for c in choices] + [(c + "x", 1) for c in choices] + [("say hi", 1)]:
        run = subprocess.run([str(corral_binary()), "match", "--grammar", str(g)], input=text.encode(), capture_output=True)
        assert run.returncode == want, (text, run.stderr)
    with pytest.raises(corral.GrammarError):
        corral.spec.compile("choice", "[]")
    with pytest.raises(corral.GrammarError):
        corral.spec.compile("choice", [1, 2])

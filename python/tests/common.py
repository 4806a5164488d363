"""What the package's test files share: where the inputs are, and the JSON grammar pair
(llama.cpp's json.gbnf and its Lark form, benches/data/json.lark) that corral and
llguidance must give equal masks on."""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
ASSETS = pathlib.Path(os.environ.get("CORRAL_ASSETS", ROOT / "assets"))

# A JSON document with escapes, numbers, nesting and a line break.
DOC = '{"name": "Ada", "tags": ["x", "y"], "n": -12.5e3, "ok": true, "none": null,\n "nested": {"a": [1, 2, {"b": "\\u00e9"}]}}'


def need(path):
    """`path`, which must exist (the test fails, saying how to get it)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/fetch-assets (and keep ../shared beside the checkout)")
    return path


def tokenizer_path(name):
    return str(need(ASSETS / "tokenizers" / name / "tokenizer.json"))


def json_gbnf():
    return need(ROOT / "tests/data/llama_cpp/grammars/json.gbnf").read_text()


def json_lark():
    """json.gbnf in Lark, with llguidance's forcing (masks narrowed to the canonical
    tokenization of forced text) off, so that both engines allow the same tokens."""
    return '%llguidance {"no_forcing": true}\n' + (ROOT / "benches/data/json.lark").read_text()


def allowed(bitmask_row, vocab_size):
    """The token ids a bitmask row allows."""
    import numpy as np

    row = np.asarray(bitmask_row, dtype=np.int32)
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits[:vocab_size]).tolist())

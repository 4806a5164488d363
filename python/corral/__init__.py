"""corral: grammar-constrained decoding for serving engines.

The names mirror llguidance's and XGrammar's, so a grammar backend can switch in minutes::

    import corral
    tok = corral.Tokenizer.from_file("tokenizer.json", vocab_size=None, eos_token_ids=None)
    g = corral.Grammar.from_json_schema({"type": "object"})
    m = corral.Matcher(g, tok)
    bitmask = corral.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bitmask, 0)
    m.accept_token(t)

The core needs no Python package; ``allocate_token_bitmask`` imports numpy, and
``corral.torch`` imports torch, when called.
"""

import json as _json

from ._corral import GrammarError, Matcher, Tokenizer, fill_next_token_bitmask_batch, json_schema_gbnf
from ._corral import Grammar as _Grammar

__all__ = [
    "Grammar",
    "GrammarError",
    "Matcher",
    "Tokenizer",
    "allocate_token_bitmask",
    "bitmask_words",
    "fill_next_token_bitmask_batch",
    "json_schema_gbnf",
]


class Grammar:
    """Constructors of compiled grammars (instances are ``corral._corral.Grammar``)."""

    @staticmethod
    def from_gbnf(text, start="root"):
        return _Grammar.from_gbnf(text, start)

    @staticmethod
    def from_json_schema(schema, any_order=False, lenient=False, whitespace=None):
        """``schema``: JSON text or a dict. ``whitespace``: None for the generation default
        (nothing or one space between tokens), "compact", "spaced", "lines" (a line break and
        up to 20 spaces of indentation), "free" (up to 32 characters), or a number: 0 for
        compact JSON, n for at most n characters."""
        if not isinstance(schema, str):
            schema = _json.dumps(schema)
        return _Grammar.from_json_schema(schema, any_order, lenient, whitespace)

    @staticmethod
    def from_regex(pattern):
        return _Grammar.from_regex(pattern)


def bitmask_words(vocab_size):
    """int32 words per bitmask row."""
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size, vocab_size):
    """A numpy int32 array ``[batch_size, ceil(vocab_size / 32)]``, every bit set."""
    import numpy

    return numpy.full((batch_size, bitmask_words(vocab_size)), -1, dtype=numpy.int32)

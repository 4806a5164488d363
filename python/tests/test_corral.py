"""The corral Python package on real tokenizers (scripts/test-python runs this).

Masks are checked against brute force: every token is tried on a fork of the matcher.
"""

import random
import unittest

import threading

import numpy as np

import corral

from common import DOC, allowed, json_gbnf, json_lark, tokenizer_path


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


class MaskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = corral.Tokenizer.from_file(tokenizer_path("llama3_1"))

    def brute_force(self, m):
        ok = set()
        for t in range(self.tok.vocab_size):
            f = m.fork()
            if f.accept_token(t):
                ok.add(t)
        return ok

    def test_masks_equal_brute_force_along_a_random_walk(self):
        rng = random.Random(7)
        g = corral.Grammar.from_json_schema(SCHEMA, whitespace=0)
        m = corral.Matcher(g, self.tok)
        bitmask = corral.allocate_token_bitmask(1, self.tok.vocab_size)
        for step in range(12):
            m.fill_next_token_bitmask(bitmask, 0)
            mask = allowed(bitmask[0], self.tok.vocab_size)
            if step % 3 == 0:
                self.assertEqual(mask, self.brute_force(m), f"step {step}")
            self.assertTrue(mask, f"step {step}: nothing allowed")
            t = rng.choice(sorted(mask))
            self.assertTrue(m.accept_token(t))
            if m.is_terminated():
                break
        self.assertIsNone(m.error)

    def test_accept_refuse_validate_rollback_fork_reset(self):
        g = corral.Grammar.from_regex("(ab)+")
        m = corral.Matcher(g, self.tok)
        bitmask = corral.allocate_token_bitmask(1, self.tok.vocab_size)
        m.fill_next_token_bitmask(bitmask)
        a = next(iter(allowed(bitmask[0], self.tok.vocab_size)))
        refused = next(t for t in range(self.tok.vocab_size) if not m.fork().accept_token(t))
        self.assertFalse(m.accept_token(refused))
        self.assertFalse(m.is_accepting())
        ids = [a]
        n = m.validate_tokens(ids + [refused])
        self.assertEqual(n, 1)
        # validate_tokens did not advance.
        m.fill_next_token_bitmask(bitmask)
        self.assertIn(a, allowed(bitmask[0], self.tok.vocab_size))
        f = m.fork()
        self.assertTrue(m.accept_token(a))
        m.rollback(1)
        m.fill_next_token_bitmask(bitmask)
        self.assertIn(a, allowed(bitmask[0], self.tok.vocab_size))
        self.assertTrue(f.accept_token(a))
        m.reset()
        self.assertFalse(m.is_accepting())

    def test_termination_and_forced_tokens(self):
        g = corral.Grammar.from_gbnf('root ::= "hello world"')
        m = corral.Matcher(g, self.tok)
        forced = m.forced_tokens()
        self.assertTrue(forced)
        for t in forced:
            self.assertTrue(m.accept_token(t))
        self.assertTrue(m.is_accepting())
        # Complete and admitting nothing more but the end token.
        self.assertTrue(m.is_terminated())
        bitmask = corral.allocate_token_bitmask(1, self.tok.vocab_size)
        m.fill_next_token_bitmask(bitmask)
        self.assertEqual(allowed(bitmask[0], self.tok.vocab_size), set(self.tok.eos_token_ids))
        self.assertTrue(m.accept_token(self.tok.eos_token_ids[0]))
        m.fill_next_token_bitmask(bitmask)
        self.assertEqual(allowed(bitmask[0], self.tok.vocab_size), set())

    def test_batch_fill_equals_single_fills(self):
        grammars = [
            corral.Grammar.from_json_schema(SCHEMA),
            corral.Grammar.from_regex("[0-9]+"),
            corral.Grammar.from_gbnf('root ::= "yes" | "no"'),
        ]
        matchers = [corral.Matcher(g, self.tok) for g in grammars]
        batch = corral.allocate_token_bitmask(4, self.tok.vocab_size)
        corral.fill_next_token_bitmask_batch(matchers, batch, [3, 0, 1])
        for m, row in zip(matchers, [3, 0, 1]):
            one = corral.allocate_token_bitmask(1, self.tok.vocab_size)
            m.fill_next_token_bitmask(one)
            np.testing.assert_array_equal(one[0], batch[row])
        self.assertTrue((batch[2] == -1).all())

    def test_bad_bitmasks_are_refused_clearly(self):
        m = corral.Matcher(corral.Grammar.from_regex("a"), self.tok)
        words = corral.bitmask_words(self.tok.vocab_size)
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
            with self.assertRaises(ValueError) as e:
                m.fill_next_token_bitmask(bad)
            self.assertIn(word, str(e.exception))
        with self.assertRaises(IndexError):
            m.fill_next_token_bitmask(np.zeros((1, words), dtype=np.int32), 1)

    def test_errors_are_positioned_grammar_errors(self):
        for make, text, needle in [
            (corral.Grammar.from_gbnf, 'root ::= "a" | b', "grammar:1:16"),
            (corral.Grammar.from_regex, "(a", "regex"),
            (corral.Grammar.from_json_schema, {"type": "strin"}, "#/type"),
            (corral.Grammar.from_json_schema, "{not json", "schema"),
        ]:
            with self.assertRaises(corral.GrammarError) as e:
                make(text)
            self.assertIsInstance(e.exception, ValueError)
            self.assertIn(needle, str(e.exception))

    def test_batch_fills_from_several_threads(self):
        g = corral.Grammar.from_json_schema(SCHEMA)
        words = corral.bitmask_words(self.tok.vocab_size)
        prefix = [corral.Matcher(g, self.tok) for _ in range(4)]
        expected = corral.allocate_token_bitmask(4, self.tok.vocab_size)
        corral.fill_next_token_bitmask_batch(prefix, expected)
        results, errors = [], []

        def run():
            try:
                ms = [corral.Matcher(g, self.tok) for _ in range(4)]
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
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 6)
        for r in results:
            np.testing.assert_array_equal(r, expected)

    def test_tokenizer_options(self):
        t = corral.Tokenizer.from_file(tokenizer_path("qwen3"), vocab_size=151936, eos_token_ids=[151645])
        self.assertEqual(t.vocab_size, 151936)
        self.assertEqual(t.eos_token_ids, [151645])
        with self.assertRaises(ValueError):
            corral.Tokenizer.from_file(tokenizer_path("qwen3"), vocab_size=10)
        with self.assertRaises(ValueError):
            corral.Tokenizer.from_file(tokenizer_path("qwen3"), eos_token_ids=[10**7])
        with self.assertRaises(ValueError):
            corral.Tokenizer.from_file("/nonexistent/tokenizer.json")


class LlguidanceTest(unittest.TestCase):
    """Masks equal the llguidance package's (1.9.1) at every step of a replay."""

    def test_json_gbnf_masks_equal_llguidance(self):
        import json

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
            self.assertFalse(theirs.is_error(), theirs.get_error())
            mask = corral.allocate_token_bitmask(2, tok.vocab_size)
            tokens = lltok.tokenize_str(DOC) + [lltok.eos_token]
            for step, t in enumerate(tokens):
                ours.fill_next_token_bitmask(mask, 0)
                llguidance.numpy.fill_next_token_bitmask(theirs, mask, 1)
                a, b = allowed(mask[0], tok.vocab_size), allowed(mask[1], tok.vocab_size)
                a.difference_update(text_added)
                b.difference_update(text_added)
                self.assertEqual(a, b, f"{name}, step {step}: {lltok.decode_str(tokens[:step])!r}")
                self.assertTrue(ours.accept_token(t))
                self.assertTrue(theirs.consume_token(t))


if __name__ == "__main__":
    unittest.main(verbosity=2)

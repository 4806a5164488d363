"""corral inside SGLang 0.5.23's own code (scripts/test-sglang runs this; it needs torch,
sglang and llguidance, installed by that script).

Drives what SGLang's scheduler does: plugin loading and `--grammar-backend corral`,
`create_grammar_backend`, dispatch and the cache, mask allocation, batched fill and
application on CPU tensors, accept and `is_terminated`, the speculative-decoding
accept / fill / rollback(1) sequence, and the same steps through SGLang's llguidance
backend, whose masks must equal corral's.
"""

import json
import unittest

import llguidance
import torch
from transformers import PreTrainedTokenizerFast

from sglang.srt.plugins import load_plugins

load_plugins()

from sglang.srt.constrained import base_grammar_backend as bgb  # noqa: E402
from sglang.srt.constrained.base_grammar_backend import GrammarMask, GrammarRow, InvalidGrammarObject  # noqa: E402
from sglang.srt.constrained.llguidance_backend import GuidanceBackend, GuidanceGrammar  # noqa: E402
from sglang.srt.runtime_context import publish  # noqa: E402
from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, prepare_server_args  # noqa: E402

import corral  # noqa: E402
import corral.sglang  # noqa: E402

from common import DOC, allowed, json_gbnf, json_lark, tokenizer_path  # noqa: E402


class SglangBackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = prepare_server_args(["--model-path", "dummy", "--grammar-backend", "corral"])
        args.resolve_once()
        publish(args, role="scheduler")
        cls.args = args
        cls.hf = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path("llama3_1"))
        cls.vocab = 128256
        cls.eos = {128009}
        cls.backend = bgb.create_grammar_backend(args, cls.hf, cls.vocab, cls.eos)

    def test_plugin_registers_the_backend_choice(self):
        self.assertIn("corral", GRAMMAR_BACKEND_CHOICES)
        self.assertIn("corral", bgb.GRAMMAR_BACKEND_REGISTRY)
        self.assertEqual(self.args.grammar_backend, "corral")
        self.assertIsInstance(self.backend, corral.sglang.CorralGrammarBackend)

    def compile(self, key):
        value, hit = self.backend.get_cached_or_future_value(key, False)
        if not hit:
            value = value.result()
            self.backend.set_cache(key, value.copy())
        return value, hit

    def test_dispatch_cache_and_invalid_grammars(self):
        key = ("json", json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
        g, hit = self.compile(key)
        self.assertFalse(hit)
        self.assertIsInstance(g, corral.sglang.CorralGrammar)
        self.assertTrue(g)  # SGLang tests grammars for truth
        again, hit = self.compile(key)
        self.assertTrue(hit)
        self.assertIsNot(again.matcher, g.matcher)
        for key, needle in [
            (("ebnf", 'root ::= "a" | b'), "undefined rule 'b'"),
            (("regex", "(a"), "regex"),
            (("json", '{"type": "strin"}'), "#/type"),
        ]:
            bad, _ = self.compile(key)
            self.assertIsInstance(bad, InvalidGrammarObject)
            self.assertIn(needle, bad.error_message)

    def test_masks_equal_llguidance_backend_along_a_replay(self):
        ours, _ = self.compile(("ebnf", json_gbnf()))
        llg_backend = GuidanceBackend(self.hf, n_vocab=self.vocab, eos_token_ids=self.eos)
        theirs = llg_backend._from_serialized(llguidance.grammar_from("lark", json_lark()))
        self.assertIsInstance(theirs, GuidanceGrammar)
        tokens = self.hf.encode(DOC, add_special_tokens=False) + sorted(self.eos)
        mask = ours.allocate_vocab_mask(self.vocab, 2, "cpu")
        for step, t in enumerate(tokens):
            mask.fill_(-1)
            ours.fill_vocab_mask_batched([GrammarRow(0, ours)], mask)
            GuidanceGrammar.fill_vocab_mask_batched([GrammarRow(1, theirs)], mask)
            self.assertTrue(torch.equal(mask[0], mask[1]), f"step {step}: {self.hf.decode(tokens[:step])!r}")
            self.assertIn(t, allowed(mask[0].numpy(), self.vocab))
            ours.accept_token(t)
            theirs.accept_token(t)
        self.assertTrue(ours.is_terminated())
        # SGLang's llguidance grammar marks itself finished only when its matcher stopped
        # before the end token; here the end token stopped it.
        self.assertTrue(theirs.ll_matcher.is_stopped())

    def test_apply_mask_and_refused_token(self):
        g, _ = self.compile(("regex", "[0-9]{2}"))
        mask = g.allocate_vocab_mask(self.vocab, 1, "cpu")
        g.fill_vocab_mask(mask, 0)
        logits = torch.zeros(1, self.vocab)
        GrammarMask(g, g.move_vocab_mask(mask, "cpu")).apply(logits)
        ok = torch.isfinite(logits[0]).nonzero().flatten().tolist()
        self.assertTrue(ok)
        self.assertTrue(all(self.hf.decode([t]).isdigit() for t in ok))
        letter = self.hf.encode("x", add_special_tokens=False)[0]
        with self.assertRaises(ValueError):
            g.accept_token(letter)

    def test_speculative_accept_fill_rollback(self):
        g, _ = self.compile(("json", json.dumps({"type": "object", "properties": {"k": {"enum": ["v1", "v2"]}}, "required": ["k"]})))
        draft = self.hf.encode('{"k": "v1"}', add_special_tokens=False) + sorted(self.eos)
        mask = g.allocate_vocab_mask(self.vocab, 1, "cpu")
        for t in draft:
            # verify: accept a draft token, fill the next row, roll it back, accept again
            g.fill_vocab_mask(mask, 0)
            before = mask.clone()
            g.accept_token(t)
            g.fill_vocab_mask(mask, 0)
            g.rollback(1)
            g.fill_vocab_mask(mask, 0)
            self.assertTrue(torch.equal(mask, before))
            g.accept_token(t)
        self.assertTrue(g.is_terminated())
        g.rollback(1)
        self.assertFalse(g.is_terminated())

    def test_reasoning_parser_wraps_the_backend(self):
        from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend

        args = prepare_server_args(["--model-path", "dummy", "--grammar-backend", "corral", "--reasoning-parser", "qwen3"])
        args.resolve_once()
        publish(args, role="scheduler")
        try:
            qwen = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path("qwen3"))
            be = bgb.create_grammar_backend(args, qwen, 151936, {151645})
            self.assertIsInstance(be, ReasonerGrammarBackend)
            fut, _ = be.get_cached_or_future_value(("json", '{"type": "object"}'), True)
            g = fut.result()
            mask = g.allocate_vocab_mask(151936, 1, "cpu")
            g.fill_vocab_mask(mask, 0)
            self.assertTrue(bool((mask == -1).all()), "free while thinking")
            for t in qwen.encode("hmm</think>", add_special_tokens=False):
                g.accept_token(t)
            g.fill_vocab_mask(mask, 0)
            self.assertLess(len(allowed(mask[0].numpy(), 151936)), 1000, "constrained after </think>")
        finally:
            publish(self.args, role="scheduler")


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""corral as an SGLang grammar backend: ``--grammar-backend corral``.

Installing the package registers the ``sglang.srt.plugins`` entry point ``corral``; SGLang
calls :func:`register` in every process it starts, which adds ``corral`` to the
``--grammar-backend`` choices and registers :func:`create_backend`. No SGLang code is
patched.

- ``dispatch_json`` / ``dispatch_regex`` / ``dispatch_ebnf`` (GBNF) compile with corral; a
  grammar that does not compile becomes SGLang's ``InvalidGrammarObject`` carrying
  corral's positioned message, and the request is aborted with it.
- Masks are SGLang's packed int32 layout on the CPU (the llguidance / XGrammar layout); a
  batch of rows is filled in one call with the GIL released (in parallel from 16 rows).
- With ``--reasoning-parser``, the backend wraps itself in SGLang's
  ``ReasonerGrammarBackend`` (SGLang does not wrap registered backends), so the grammar
  applies after the reasoning ends.
"""

import logging

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    InvalidGrammarObject,
    register_vocab_mask_buffer,
)

import corral
import corral.torch as _ctorch

logger = logging.getLogger(__name__)

NAME = "corral"


def _allocate(batch_size, vocab_size):
    return torch.full((batch_size, corral.bitmask_words(vocab_size)), -1, dtype=torch.int32)


class CorralGrammar(BaseGrammarObject):
    """One request's grammar state (a corral ``Matcher``)."""

    def __init__(self, matcher, tokenizer):
        super().__init__()
        self.matcher = matcher
        self.tokenizer = tokenizer
        self.eos = set(tokenizer.eos_token_ids)

    def accept_token(self, token: int) -> None:
        if self.finished:
            return
        self.current_token = token
        if not self.matcher.accept_token(token):
            detail = self.matcher.error or f"token {token} is not allowed here"
            raise ValueError(f"corral: {detail}")
        if token in self.eos:
            self.finished = True

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        # The end token is a step of the matcher too: rolling it back un-finishes.
        self.finished = False
        self.matcher.rollback(k)

    def is_terminated(self):
        return self.finished

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return _allocate(batch_size, self.tokenizer.vocab_size)

    def fill_vocab_mask(self, vocab_mask, idx):
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries, vocab_mask):
        """All rows in one call when every grammar is corral's."""
        if entries and all(isinstance(e.grammar, CorralGrammar) for e in entries):
            corral.fill_next_token_bitmask_batch(
                [e.grammar.matcher for e in entries], vocab_mask, [e.row for e in entries]
            )
            return
        BaseGrammarObject.fill_vocab_mask_batched(entries, vocab_mask)

    @staticmethod
    def reset_vocab_mask(vocab_mask):
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask, device):
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits, vocab_mask):
        _ctorch.apply_token_bitmask_inplace(logits, vocab_mask.to(logits.device))

    def copy(self):
        return CorralGrammar(self.matcher.fork(), self.tokenizer)

    def try_jump_forward(self, tokenizer):
        forced = self.matcher.forced_tokens()
        return (forced, "") if forced else None

    def jump_forward_str_state(self, helper):
        return "", -1

    def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state):
        pass


class CorralGrammarBackend(BaseGrammarBackend):
    """Compiles requests' grammars with corral for one tokenizer."""

    def __init__(self, tokenizer, vocab_size=None, eos_token_ids=None, json_whitespace=None):
        super().__init__()
        eos = sorted(eos_token_ids) if eos_token_ids else None
        if eos is None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos = [tokenizer.eos_token_id]
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError("corral needs a Hugging Face fast tokenizer (tokenizer.json)")
        self.tokenizer = corral.Tokenizer.from_str(backend.to_str(), vocab_size=vocab_size, eos_token_ids=eos)
        self.json_whitespace = json_whitespace

    def _grammar(self, compile, text):
        try:
            g = compile(text)
        except corral.GrammarError as e:
            logger.warning("corral: invalid grammar: %s", e)
            return InvalidGrammarObject(str(e))
        return CorralGrammar(corral.Matcher(g, self.tokenizer), self.tokenizer)

    def dispatch_json(self, key_string):
        return self._grammar(
            lambda s: corral.Grammar.from_json_schema(s, whitespace=self.json_whitespace), key_string
        )

    def dispatch_regex(self, key_string):
        return self._grammar(corral.Grammar.from_regex, key_string)

    def dispatch_ebnf(self, key_string):
        return self._grammar(corral.Grammar.from_gbnf, key_string)

    def initialize_vocab_mask_buffer(self, name, vocab_size, max_rows, device):
        return register_vocab_mask_buffer(name, _allocate(max_rows, self.tokenizer.vocab_size), max_rows)

    # SGLang's reasoning wrapper reads these from the backend itself.
    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return _allocate(batch_size, self.tokenizer.vocab_size)

    move_vocab_mask = staticmethod(CorralGrammar.move_vocab_mask)
    apply_vocab_mask = staticmethod(CorralGrammar.apply_vocab_mask)


def create_backend(server_args, tokenizer, vocab_size, eos_token_ids):
    """SGLang's backend factory signature (``register_grammar_backend``)."""
    from sglang.srt.runtime_context import get_serving

    serving = get_serving()
    whitespace = 0 if serving.constrained_json_disable_any_whitespace else None
    backend = CorralGrammarBackend(tokenizer, vocab_size, eos_token_ids, json_whitespace=whitespace)
    if serving.reasoning_parser:
        from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        parser = ReasoningParser(model_type=serving.reasoning_parser, stream_reasoning=False, tokenizer=tokenizer)
        backend = ReasonerGrammarBackend(
            backend, parser, tokenizer, enable_strict_thinking=serving.enable_strict_thinking
        )
    return backend


def register():
    """The plugin entry point: ``--grammar-backend corral``."""
    from sglang.srt.constrained.base_grammar_backend import register_grammar_backend
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices

    if NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([NAME])
    register_grammar_backend(NAME, create_backend)

"""corral in Hugging Face transformers: a logits processor for ``model.generate``::

    from transformers import LogitsProcessorList
    import corral, corral.hf

    g = corral.Grammar.from_json_schema(schema)
    proc = corral.hf.LogitsProcessor(g, tokenizer)
    out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]))

One grammar for every row, or a list of one per prompt of the batch. The processor learns
where the prompt ends on its first call (the ``input_ids`` it is given then), so it serves
one ``generate`` call: make a new one for the next. Greedy search, sampling and beam search
work: each row's state is found again from its tokens after the prompt, so rows that beam
search reorders or copies keep the right state (``Matcher.fork``), within their prompt. A
row that is over (it took an end token, or transformers ended it, on a stop string for
instance) may only end or pad. Masks are filled
on the CPU for all rows at once (in one call, without the GIL), uploaded once to the
logits' device and applied there.
"""

import threading

import torch

import corral
from corral.torch import apply_token_bitmask_inplace

_tokenizers = {}
_lock = threading.Lock()


def corral_tokenizer(tokenizer, width, eos_token_ids):
    """The corral tokenizer of a Hugging Face fast tokenizer, ``width`` logits wide (kept:
    building one walks the vocabulary)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("corral needs a Hugging Face fast tokenizer (tokenizer.json)")
    text = backend.to_str()
    key = (hash(text), len(text), width, tuple(eos_token_ids))
    with _lock:
        tok = _tokenizers.get(key)
        if tok is None:
            tok = corral.Tokenizer.from_str(text, vocab_size=width, eos_token_ids=list(eos_token_ids))
            _tokenizers[key] = tok
        return tok


class LogitsProcessor:
    """Constrains ``generate`` to ``grammar_or_grammars`` (a compiled ``corral`` grammar, or
    a list of them, one per prompt). ``eos_token_ids``: the tokens that end an output
    (default: the tokenizer's ``eos_token_id``)."""

    def __init__(self, grammar_or_grammars, tokenizer, eos_token_ids=None):
        self.grammars = grammar_or_grammars
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos = tokenizer.eos_token_id
            eos_token_ids = [] if eos is None else [eos]
        self.eos = [int(t) for t in eos_token_ids]
        self.pad = tokenizer.pad_token_id
        self.prompt_len = None
        self.states = None  # (output tokens so far, row) -> Matcher (the last call's rows)
        self.ended = set()  # the keys of rows that are over
        self.ctok = None
        self.bitmask = None

    def _grammar_of_row(self, row, rows):
        if not isinstance(self.grammars, (list, tuple)):
            return self.grammars
        n = len(self.grammars)
        if rows % n:
            raise ValueError(f"{rows} rows for {n} grammars: give one grammar per prompt")
        return self.grammars[row // (rows // n)]

    def _start(self, input_ids, scores):
        rows = input_ids.shape[0]
        self.prompt_len = input_ids.shape[1]
        self.ctok = corral_tokenizer(self.tokenizer, scores.shape[-1], self.eos)
        self.bitmask = torch.full((rows, corral.bitmask_words(scores.shape[-1])), -1, dtype=torch.int32)
        return [corral.Matcher(self._grammar_of_row(r, rows), self.ctok) for r in range(rows)]

    def _advance(self, input_ids):
        """Each row's matcher after its output so far: the state of its output less the last
        token (from the previous call; forked where rows share it, as beam search makes
        them) plus that token."""
        out = input_ids[:, self.prompt_len :].tolist()
        keys = []
        for r, tokens in enumerate(out):
            parent = tuple(tokens[:-1])
            key = (parent, r) if (parent, r) in self.states else None
            if key is None:
                # Beam search moved the row: its state is that of a row of the same prompt
                # with the same tokens.
                group = self._group(r, len(out))
                key = next((k for k in self.states if k[0] == parent and self._group(k[1], len(out)) == group), None)
            if key is None:
                raise RuntimeError(
                    "corral.hf.LogitsProcessor: a row's tokens do not continue any earlier "
                    "row (a processor serves one generate call)"
                )
            keys.append(key)
        uses = {}
        for key in keys:
            uses[key] = uses.get(key, 0) + 1
        matchers = []
        for r, key in enumerate(keys):
            # Every use but the last takes a copy, so the state stays as it was until then.
            uses[key] -= 1
            m = self.states[key].fork() if uses[key] else self.states[key]
            last = out[r][-1]
            if key in self.ended or m.is_finished():
                # Over: transformers pads the row (it may have ended it itself, on a stop
                # string or an end token of its generation config).
                self.ended.add((tuple(out[r]), r))
            elif last == self.pad and not m.accept_token(last):
                self.ended.add((tuple(out[r]), r))
            elif last != self.pad and not m.accept_token(last):
                detail = m.error or f"token {last} is not allowed here"
                raise RuntimeError(f"corral: {detail}")
            matchers.append(m)
        return matchers, out

    def _group(self, row, rows):
        """The prompt a row belongs to (rows are prompts times beams, prompt by prompt)."""
        if not isinstance(self.grammars, (list, tuple)):
            return 0
        return row // (rows // len(self.grammars))

    def __call__(self, input_ids, scores):
        if self.prompt_len is None:
            matchers = self._start(input_ids, scores)
            out = [[] for _ in matchers]
        else:
            matchers, out = self._advance(input_ids)
        self.states = {(tuple(out[r]), r): m for r, m in enumerate(matchers)}
        over = [r for r, m in enumerate(matchers) if m.is_finished() or (tuple(out[r]), r) in self.ended]
        live = [r for r in range(len(matchers)) if r not in set(over)]
        # A row that is over may only end or pad (transformers replaces its tokens with
        # padding once it has ended it; until then nothing is written after the end).
        keep = [t for t in [*self.eos, self.pad] if t is not None and t < scores.shape[-1]]
        for r in over:
            kept = scores[r, keep].clone()
            scores[r] = float("-inf")
            scores[r, keep] = kept
        if not live:
            return scores
        bitmask = self.bitmask[: len(live)]
        corral.fill_next_token_bitmask_batch([matchers[r] for r in live], bitmask)
        device_mask = bitmask.to(scores.device, non_blocking=True)
        return apply_token_bitmask_inplace(scores, device_mask, torch.tensor(live, dtype=torch.long, device=scores.device))

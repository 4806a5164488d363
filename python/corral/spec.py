"""Grammars from the request shapes serving engines use: a JSON Schema, "any JSON object", a
regex, a GBNF grammar, or a choice of strings."""

import json

import corral

KINDS = ("json", "json_object", "regex", "grammar", "choice", "structural_tag")


def gbnf_literal(text):
    """``text`` as a GBNF string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_gbnf(choices):
    """A grammar whose outputs are exactly ``choices`` (strings)."""
    if not isinstance(choices, list) or not choices:
        raise corral.GrammarError("choice: a non-empty list of strings is needed")
    if not all(isinstance(c, str) for c in choices):
        raise corral.GrammarError("choice: every choice must be a string")
    return "root ::= " + " | ".join(gbnf_literal(c) for c in choices) + "\n"


def compile(kind, spec, whitespace=None):
    """A compiled grammar for ``spec`` of ``kind`` (one of :data:`KINDS`); ``spec`` is text
    (a choice: a JSON list, or a list). Raises ``corral.GrammarError`` with corral's
    positioned message."""
    if kind == "json":
        return corral.Grammar.from_json_schema(spec, whitespace=whitespace)
    if kind == "json_object":
        return corral.Grammar.from_json_schema('{"type": "object"}', whitespace=whitespace)
    if kind == "regex":
        return corral.Grammar.from_regex(spec)
    if kind == "grammar":
        return corral.Grammar.from_gbnf(spec)
    if kind == "choice":
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError as e:
                raise corral.GrammarError(f"choice: not a JSON list: {e}") from None
        return corral.Grammar.from_gbnf(choice_gbnf(spec))
    if kind == "structural_tag":
        return corral.Grammar.from_gbnf(structural_tag_gbnf(spec, whitespace))
    raise ValueError(f"unknown grammar kind {kind!r}: one of {', '.join(KINDS)}")


class _Rules:
    """GBNF rules being written: each format gets a rule of its own."""

    def __init__(self, whitespace):
        self.lines = []
        self.count = 0
        self.whitespace = whitespace

    def new(self, body):
        self.count += 1
        name = f"st{self.count}"
        self.lines.append(f"{name} ::= {body}")
        return name

    def schema(self, fmt):
        style = fmt.get("style", "json")
        if style != "json":
            raise corral.GrammarError(f"structural_tag: json_schema style {style!r} is not served (only \"json\")")
        schema = fmt.get("json_schema", True)
        self.count += 1
        prefix = f"st{self.count}s"
        ws = self.whitespace if fmt.get("max_whitespace_cnt") is None else int(fmt["max_whitespace_cnt"])
        text = corral.json_schema_gbnf(json.dumps(schema), prefix, bool(fmt.get("any_order", False)), ws)
        self.lines.append(text.rstrip("\n"))
        return prefix + "root"

    def text_without(self, words):
        """Any text in which none of ``words`` occurs."""
        words = [w for w in words if w]
        if not words:
            return self.new(".*")
        banned = " | ".join(gbnf_literal(w) for w in words)
        return self.new(f"~( .* ( {banned} ) .* )")

    def format(self, fmt, end=()):
        """The rule of ``fmt``; ``end``: what ends the enclosing tag (free text stops
        before it)."""
        if not isinstance(fmt, dict) or "type" not in fmt:
            raise corral.GrammarError(f"structural_tag: a format is an object with a type, not {fmt!r}")
        t = fmt["type"]
        if t == "const_string":
            return self.new(gbnf_literal(_text(fmt, "value")))
        if t == "json_schema":
            return self.schema(fmt)
        if t == "any_text":
            for key in ("max_tokens", "max_chars"):
                if fmt.get(key) is not None:
                    raise corral.GrammarError(f"structural_tag: any_text's {key} is not served")
            return self.text_without([*end, *fmt.get("excludes", [])])
        if t == "sequence":
            parts = [self.format(e) for e in fmt["elements"][:-1]]
            parts += [self.format(e, end) for e in fmt["elements"][-1:]]
            return self.new(" ".join(parts) if parts else '""')
        if t == "or":
            parts = [self.format(e, end) for e in fmt["elements"]]
            if not parts:
                raise corral.GrammarError("structural_tag: an empty `or`")
            return self.new(" | ".join(parts))
        if t == "tag":
            ends = fmt["end"] if isinstance(fmt["end"], list) else [fmt["end"]]
            ends = [_text({"end": e}, "end") for e in ends]
            if not ends:
                raise corral.GrammarError("structural_tag: a tag without an end")
            content = self.format(fmt["content"], tuple(ends))
            closing = " | ".join(gbnf_literal(e) for e in ends)
            return self.new(f"{gbnf_literal(_text(fmt, 'begin'))} {content} ( {closing} )")
        if t in ("tags_with_separator", "triggered_tags"):
            tags = [self.format(e) for e in fmt["tags"]]
            if not tags:
                raise corral.GrammarError(f"structural_tag: {t} without tags")
            one = self.new(" | ".join(tags))
            first = bool(fmt.get("stop_after_first", False))
            least = bool(fmt.get("at_least_one", False))
            if t == "tags_with_separator":
                sep = gbnf_literal(_text(fmt, "separator", ""))
                many = one if first else self.new(f"{one} ( {sep} {one} )*")
                return many if least else self.new(f"( {many} )?")
            text = self.text_without([*_texts(fmt, "triggers"), *end])
            if least and first:
                return one
            if least:
                return self.new(f"{one} ( {text} {one} )* {text}")
            if first:
                return self.new(f"{text} {one} | {text}")
            return self.new(f"{text} ( {one} {text} )*")
        raise corral.GrammarError(f"structural_tag: format type {t!r} is not served")


def _text(fmt, key, default=None):
    value = fmt.get(key, default)
    if not isinstance(value, str):
        raise corral.GrammarError(f"structural_tag: {key} must be a string, not {value!r}")
    return value


def _texts(fmt, key):
    values = fmt.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise corral.GrammarError(f"structural_tag: {key} must be a list of strings")
    return values


def structural_tag_gbnf(spec, whitespace=None):
    """A vLLM / XGrammar structural tag (``{"type": "structural_tag", "format": ...}``, or
    the older ``{"structures": [...], "triggers": [...]}``) as a GBNF grammar. Served
    formats: const_string, json_schema (style "json"), any_text (with excludes; inside a
    tag it stops before the tag's end), sequence, or, tag (an end or a list of ends),
    tags_with_separator and triggered_tags, with XGrammar's meaning of at_least_one and
    stop_after_first; others are refused by name."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise corral.GrammarError(f"structural_tag: not JSON: {e}") from None
    if not isinstance(spec, dict):
        raise corral.GrammarError("structural_tag: a JSON object is needed")
    rules = _Rules(whitespace)
    try:
        if "structures" in spec:
            fmt = {
                "type": "triggered_tags",
                "triggers": spec.get("triggers", []),
                "tags": [
                    {"type": "tag", "begin": s["begin"], "content": {"type": "json_schema", "json_schema": s["schema"]}, "end": s["end"]}
                    for s in spec["structures"]
                ],
            }
        else:
            fmt = spec.get("format")
        top = rules.format(fmt)
    except (KeyError, TypeError, AttributeError) as e:
        raise corral.GrammarError(f"structural_tag: not a structural tag's shape ({type(e).__name__}: {e})") from None
    return f"root ::= {top}\n" + "\n".join(rules.lines) + "\n"

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

    def free_text(self, triggers):
        """Any text in which no trigger begins (the text before a triggered tag)."""
        if not triggers:
            return self.new(".*")
        banned = " | ".join(gbnf_literal(t) for t in triggers)
        return self.new(f"~( .* ( {banned} ) .* )")

    def format(self, fmt):
        if not isinstance(fmt, dict) or "type" not in fmt:
            raise corral.GrammarError(f"structural_tag: a format is an object with a type, not {fmt!r}")
        t = fmt["type"]
        if t == "const_string":
            return self.new(gbnf_literal(fmt["value"]))
        if t == "json_schema":
            return self.schema(fmt)
        if t == "any_text":
            return self.new(".*")
        if t == "sequence":
            parts = [self.format(e) for e in fmt["elements"]]
            return self.new(" ".join(parts) if parts else '""')
        if t == "or":
            parts = [self.format(e) for e in fmt["elements"]]
            if not parts:
                raise corral.GrammarError("structural_tag: an empty `or`")
            return self.new(" | ".join(parts))
        if t == "tag":
            content = self.format(fmt["content"])
            return self.new(f"{gbnf_literal(fmt['begin'])} {content} {gbnf_literal(fmt['end'])}")
        if t in ("tags_with_separator", "triggered_tags"):
            tags = [self.format(e) for e in fmt["tags"]]
            if not tags:
                raise corral.GrammarError(f"structural_tag: {t} without tags")
            one = self.new(" | ".join(tags))
            first = bool(fmt.get("stop_after_first", False))
            least = bool(fmt.get("at_least_one", False))
            if t == "tags_with_separator":
                sep = gbnf_literal(fmt.get("separator", ""))
                many = one if first else self.new(f"{one} ( {sep} {one} )*")
            else:
                text = self.free_text(fmt.get("triggers", []))
                many = self.new(f"{one} {text}") if first else self.new(f"( {one} {text} )+")
                many = self.new(f"{text} {many}")
                if not least:
                    return self.new(f"{many} | {text}")
                return many
            return many if least else self.new(f"( {many} )?")
        raise corral.GrammarError(f"structural_tag: format type {t!r} is not served")


def structural_tag_gbnf(spec, whitespace=None):
    """A vLLM / XGrammar structural tag (``{"type": "structural_tag", "format": ...}``, or
    the older ``{"structures": [...], "triggers": [...]}``) as a GBNF grammar. Served
    formats: const_string, json_schema (style "json"), any_text, sequence, or, tag,
    tags_with_separator and triggered_tags; others are refused by name."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise corral.GrammarError(f"structural_tag: not JSON: {e}") from None
    if not isinstance(spec, dict):
        raise corral.GrammarError("structural_tag: a JSON object is needed")
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
    rules = _Rules(whitespace)
    top = rules.format(fmt)
    return f"root ::= {top}\n" + "\n".join(rules.lines) + "\n"

"""Structured-output requests for the vLLM tests and the backend comparison: JSON Schemas
(nested, `$ref`, patterns, formats, numeric ranges, enums, `anyOf`), each made new by a
property name of its own, regexes, choices and GBNF grammars, with a check of each output
that does not use corral."""

import datetime
import json
import re

import jsonschema

# Bounded sizes keep every output short enough to finish well inside max_tokens.
MAX_TOKENS = 320


def schema(i):
    """A new schema for each `i`."""
    key = f"item_{i}"
    return {
        "title": f"Record{i}",
        "type": "object",
        "$defs": {
            "tag": {"type": "string", "enum": ["red", "green", "blue"]},
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": -50, "maximum": 50},
                    "y": {"type": "number", "minimum": -1000, "maximum": 1000},
                },
                "required": ["x", "y"],
                "additionalProperties": False,
            },
        },
        "properties": {
            key: {"type": "string", "pattern": "^[A-Z][a-z]{2,8}$"},
            "day": {"type": "string", "format": "date"},
            "count": {"type": "integer", "minimum": 1, "maximum": 999},
            "tag": {"$ref": "#/$defs/tag"},
            "where": {"$ref": "#/$defs/point"},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 12}]},
            "ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3},
        },
        "required": [key, "day", "count", "tag", "where", "note", "ids"],
        "additionalProperties": False,
    }


REGEXES = [
    r"[A-Z]{3}-\d{4}",
    r"(yes|no|maybe), because [a-z ]{5,30}\.",
    r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}",
    r"#[0-9a-f]{6}",
]

CHOICES = [
    ["Paris", "London", "Rome"],
    ["positive", "negative", "neutral"],
]

# Sums of small numbers; the check is a Python regex of the same language.
GBNF = (
    'root ::= expr "=" num\nexpr ::= num ( ("+" | "-") num ){1,4}\nnum ::= [1-9] [0-9]{0,2}\n',
    r"[1-9][0-9]{0,2}([+-][1-9][0-9]{0,2}){1,4}=[1-9][0-9]{0,2}",
)


def _date_ok(text):
    try:
        datetime.date.fromisoformat(text)
        return True
    except ValueError:
        return False


def validate_json(text, s):
    """None, or why `text` is not an instance of schema `s`."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"not JSON: {e}"
    checker = jsonschema.FormatChecker()
    checker.checks("date")(_date_ok)
    errors = list(jsonschema.Draft202012Validator(s, format_checker=checker).iter_errors(value))
    return "; ".join(e.message for e in errors) or None


def cases(n, start=0):
    """`n` requests: (name, kind, spec, prompt, check). `kind` is one of json / regex /
    choice / grammar; `check(text)` is None or why the output is wrong."""
    out = []
    for k in range(n):
        i = start + k
        r = k % 8
        if r < 4:
            s = schema(i)
            out.append((
                f"schema{i}",
                "json",
                s,
                f"Describe record number {i} as JSON.",
                lambda t, s=s: validate_json(t, s),
            ))
        elif r == 4:
            p = REGEXES[(i // 8) % len(REGEXES)]
            out.append((f"regex{i}", "regex", p, "Answer briefly.", lambda t, p=p: None if re.fullmatch(p, t) else f"does not match {p}"))
        elif r == 5:
            c = CHOICES[(i // 8) % len(CHOICES)]
            out.append((f"choice{i}", "choice", c, "Pick one.", lambda t, c=c: None if t in c else f"not one of {c}"))
        else:
            g, check = GBNF
            out.append((f"gbnf{i}", "grammar", g, "Write a sum.", lambda t, p=check: None if re.fullmatch(p, t) else f"does not match {p}"))
    return out


def structured_outputs(kind, spec):
    """vLLM's StructuredOutputsParams for a case."""
    from vllm.sampling_params import StructuredOutputsParams

    if kind == "json":
        return StructuredOutputsParams(json=spec)
    if kind == "regex":
        return StructuredOutputsParams(regex=spec)
    if kind == "choice":
        return StructuredOutputsParams(choice=spec)
    return StructuredOutputsParams(grammar=spec)


def xargs(kind, spec):
    """The logits processor's extra_args for a case."""
    key = {"json": "corral_json", "regex": "corral_regex", "choice": "corral_choice", "grammar": "corral_grammar"}[kind]
    return {key: json.dumps(spec) if kind == "json" else spec}


def chat_prompt(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)

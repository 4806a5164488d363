//! Schema -> GBNF rules. See the module docs of [`super`] for the plan; the functions here
//! follow it: [`Compiler::value`] is the entry for any subschema and returns a GBNF
//! expression (usually a rule name) or `None` when no value is valid.

use super::gbnf::{alt, and, digit, eps, from_hir, g, lit, name, not, opt, repeat, seq};
use super::numbers::{self, Bound, SDec};
use super::pattern::{
    Encoder, PatternError, Restricted, Spelling, any_char, ecma_to_hir, restrict_length,
};
use super::{Deferred, JsonSchemaOptions, PropertyOrder, Whitespace, formats};
use crate::error::SchemaErrorKind;
use corral_grammar::ast::{Expr, ExprKind, RuleAst};
use corral_grammar::{CompileOptions, DEAD, LexemeDfa, StateId};
use regex_syntax::hir::{Hir, Repetition};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

/// Regular rules up to this size (counting a repetition's body once) are inlined into
/// their callers' lexemes; larger ones (strings, numbers, objects) stay rules with lexemes of
/// their own, shared by every use. See corral-grammar's `lower`.
pub(crate) const INLINE_UNITS: usize = 16;

/// Keywords that constrain instances (everything else is an annotation or unknown).
const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
];

type Fail = (SchemaErrorKind, String);
type Res<T> = Result<T, Fail>;

/// Subschemas nested past `JsonSchemaOptions::max_schema_depth` at `ptr`.
fn too_deep(ptr: &str, limit: u32) -> Fail {
    (
        SchemaErrorKind::Limit {
            what: "nesting of subschemas (a reference cycle without progress?)".into(),
            value: limit as usize + 1,
            limit_name: "max_schema_depth",
            limit: limit as usize,
        },
        ptr.to_string(),
    )
}

fn invalid(ptr: &str, message: impl Into<String>) -> Fail {
    (
        SchemaErrorKind::Invalid {
            pointer: ptr.to_string(),
            message: message.into(),
        },
        ptr.to_string(),
    )
}

/// A count keyword (`minLength`, `maxItems`, ...): a non-negative integer, if present.
fn count(m: &Map<String, Value>, ptr: &str, key: &str) -> Res<Option<u64>> {
    m.get(key)
        .map(|v| {
            v.as_u64().ok_or_else(|| {
                invalid(
                    &child(ptr, key),
                    format!("{key} must be a non-negative integer"),
                )
            })
        })
        .transpose()
}

fn child(ptr: &str, token: &str) -> String {
    let mut out = String::with_capacity(ptr.len() + token.len() + 1);
    out.push_str(ptr);
    push_token(&mut out, token);
    out
}

/// Appends `/token` to a JSON pointer, escaping `~` and `/` (RFC 6901).
fn push_token(ptr: &mut String, token: &str) {
    ptr.push('/');
    for c in token.chars() {
        match c {
            '~' => ptr.push_str("~0"),
            '/' => ptr.push_str("~1"),
            c => ptr.push(c),
        }
    }
}

/// How the GBNF of a schema is compiled.
pub(crate) fn grammar_options(opts: &JsonSchemaOptions) -> CompileOptions {
    CompileOptions {
        origin: opts.origin.clone(),
        limits: opts.limits.clone(),
        inline_units: Some(INLINE_UNITS),
        dfa_cache: opts.dfa_cache.clone(),
        ..CompileOptions::default()
    }
}

/// Compiles `schema` into GBNF rules (start rule `root`) and the keywords left to
/// validation.
pub(crate) fn to_rules(
    schema: &Value,
    opts: &JsonSchemaOptions,
) -> Result<(Vec<RuleAst>, Vec<Deferred>), Fail> {
    let mut c = Compiler::new(schema, opts)?;
    let root = c.value(schema, "", "root")?;
    let Some(root) = root else {
        return Err(invalid("", "no JSON value satisfies this schema"));
    };
    let root = if opts.outer_whitespace {
        let outer = || g(r"[ \t\n\r]*");
        seq(vec![outer(), root, outer()])
    } else {
        root
    };
    let mut rules = Vec::with_capacity(c.rules.len() + 2);
    rules.push(built_rule("root".into(), root));
    match opts.whitespace {
        Whitespace::Compact => {}
        Whitespace::Spaced => rules.push(built_rule("ws".into(), opt(lit(" ")))),
        Whitespace::Lines { max_indent } => rules.push(built_rule(
            "ws".into(),
            opt(alt(vec![
                lit(" "),
                seq(vec![lit("\n"), repeat(g(r"[ \t]"), 0, Some(max_indent))]),
            ])
            .expect("two branches")),
        )),
        Whitespace::Flexible { max } => rules.push(built_rule(
            "ws".into(),
            repeat(g(r"[ \t\n\r]"), 0, Some(max)),
        )),
    }
    rules.extend(c.rules.into_iter().map(|(n, body)| built_rule(n, body)));
    Ok((rules, c.deferred))
}

/// A rule with no place in a source text.
fn built_rule(name: String, body: Expr) -> RuleAst {
    RuleAst {
        name,
        name_span: Default::default(),
        body,
    }
}

struct Compiler<'a> {
    root: &'a Value,
    opts: &'a JsonSchemaOptions,
    /// Draft-07 and earlier: `$ref` replaces its siblings.
    old_ref: bool,
    /// `$id`s and anchors of the document -> JSON pointer.
    ids: FxHashMap<String, String>,
    rules: Vec<(String, Expr)>,
    names: FxHashSet<String>,
    /// Per base name: the next number to try after it.
    next_suffix: FxHashMap<String, u32>,
    /// JSON encodings of character classes, shared by the schema's strings.
    enc: Encoder,
    /// Bodies made rules by [`Compiler::rule`], by their hash: indices into `rules`.
    by_body: FxHashMap<u64, Vec<usize>>,
    /// `$ref` target pointer -> its rule (`None` once known to be unsatisfiable).
    refs: FxHashMap<String, Option<String>>,
    deferred: Vec<Deferred>,
    depth: u32,
    /// Pattern -> DFA over the value (for checks at compile time).
    pattern_dfas: FxHashMap<String, Option<std::sync::Arc<LexemeDfa>>>,
    /// Pattern -> its regular expression (a pattern is met several times: as a key's
    /// pattern, in the other keys' exclusion, in its automaton).
    pattern_hirs: FxHashMap<String, Result<Hir, PatternError>>,
    /// `(minLength, maxLength)` -> the rule of a string bounded by them alone.
    length_strings: FxHashMap<(u64, Option<u64>), Expr>,
    ws: Expr,
}

impl<'a> Compiler<'a> {
    fn new(root: &'a Value, opts: &'a JsonSchemaOptions) -> Res<Compiler<'a>> {
        let old_ref = root
            .get("$schema")
            .and_then(Value::as_str)
            .is_some_and(|s| {
                ["draft-03", "draft-04", "draft-06", "draft-07"]
                    .iter()
                    .any(|d| s.contains(d))
            });
        let mut ids = FxHashMap::default();
        collect_ids(
            root,
            &mut String::new(),
            &mut ids,
            (0, opts.max_schema_depth),
        )?;
        let mut names = FxHashSet::default();
        names.insert("root".to_string());
        names.insert("ws".to_string());
        Ok(Compiler {
            root,
            opts,
            old_ref,
            ids,
            rules: Vec::new(),
            names,
            next_suffix: FxHashMap::default(),
            enc: Encoder::default(),
            by_body: FxHashMap::default(),
            refs: FxHashMap::default(),
            deferred: Vec::new(),
            depth: 0,
            pattern_dfas: FxHashMap::default(),
            pattern_hirs: FxHashMap::default(),
            length_strings: FxHashMap::default(),
            ws: match opts.whitespace {
                Whitespace::Compact => eps(),
                Whitespace::Spaced | Whitespace::Lines { .. } | Whitespace::Flexible { .. } => {
                    name("ws")
                }
            },
        })
    }

    /// The DFA of `h`, through the options' DFA cache.
    fn dfa(&self, h: &Hir) -> Result<std::sync::Arc<LexemeDfa>, corral_grammar::ErrorKind> {
        LexemeDfa::build_cached(
            h,
            self.opts.limits.max_lexeme_bytes,
            self.opts.dfa_cache.as_ref(),
        )
    }

    /// The number of states of `h`'s whole DFA (built eagerly, to size an intersection
    /// before building it).
    fn dfa_states(&self, h: &Hir) -> Option<usize> {
        LexemeDfa::build_whole(
            h,
            self.opts.limits.max_lexeme_bytes,
            self.opts.dfa_cache.as_ref(),
        )
        .ok()
        .map(|d| d.len())
    }

    /// A keyword the grammar cannot express: an error, or (lenient) a deferral.
    fn unsupported(&mut self, keyword: &str, ptr: &str, reason: &str) -> Res<()> {
        if self.opts.lenient {
            let d = Deferred {
                keyword: keyword.to_string(),
                pointer: ptr.to_string(),
                reason: reason.to_string(),
            };
            if !self.deferred.contains(&d) {
                self.deferred.push(d);
            }
            Ok(())
        } else {
            // Point at the keyword itself where the schema has it.
            let at = child(ptr, keyword);
            let at = if self.root.pointer(&at).is_some() {
                at
            } else {
                ptr.to_string()
            };
            Err((
                SchemaErrorKind::Unsupported {
                    keyword: keyword.to_string(),
                    pointer: at.clone(),
                    reason: reason.to_string(),
                },
                at,
            ))
        }
    }

    fn fresh_name(&mut self, hint: &str) -> String {
        // The hint's ASCII letters and digits, each other run of characters one `-` between
        // them, at most 40 characters (made in one pass: a large schema names thousands).
        let mut base = String::new();
        let mut dash = false;
        for c in hint.chars() {
            if base.len() >= 40 {
                break;
            }
            if !c.is_ascii_alphanumeric() {
                dash = !base.is_empty();
                continue;
            }
            if dash {
                base.push('-');
                dash = false;
            }
            base.push(c);
        }
        base.truncate(40);
        if base.is_empty() {
            base = "v".into();
        }
        // The base itself the first time it is asked for (if no rule has that name), then
        // numbered from where the last name with this base stopped (not from 2 each time:
        // a large schema gives thousands of rules the same base).
        if !self.next_suffix.contains_key(base.as_str()) {
            self.next_suffix.insert(base.clone(), 2);
            if !self.names.contains(&base) {
                self.names.insert(base.clone());
                return base;
            }
        }
        let k = self
            .next_suffix
            .get_mut(base.as_str())
            .expect("inserted above");
        loop {
            let name = format!("{base}-{k}");
            *k += 1;
            if !self.names.contains(&name) {
                self.names.insert(name.clone());
                return name;
            }
        }
    }

    /// [`ecma_to_hir`] of `p`, parsed once per pattern.
    fn pattern_hir(&mut self, p: &str) -> Result<Hir, PatternError> {
        if let Some(h) = self.pattern_hirs.get(p) {
            return h.clone();
        }
        let h = ecma_to_hir(p, self.opts.limits.max_nesting_depth);
        self.pattern_hirs.insert(p.to_string(), h.clone());
        h
    }

    /// A rule for `body` (one per distinct body), or `body` itself if it is a single name or
    /// literal already.
    fn rule(&mut self, hint: &str, body: Expr) -> Expr {
        if is_simple(&body) {
            return body;
        }
        // Hashed once, compared only on a hash match, moved (not copied) into the rules.
        let hash = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(&body)
        };
        let same = self
            .by_body
            .get(&hash)
            .and_then(|ix| ix.iter().map(|&i| &self.rules[i]).find(|(_, b)| *b == body));
        if let Some((n, _)) = same {
            return name(n);
        }
        let n = self.fresh_name(hint);
        self.by_body.entry(hash).or_default().push(self.rules.len());
        self.rules.push((n.clone(), body));
        name(&n)
    }

    /// A fixed rule (`json-value`, ...), defined on first use.
    fn fixed_rule(&mut self, rule: &str, body: impl FnOnce(&mut Self) -> Expr) -> Expr {
        if !self.names.contains(rule) {
            self.names.insert(rule.to_string());
            let b = body(self);
            self.rules.push((rule.to_string(), b));
        }
        name(rule)
    }

    fn sep(&self) -> Expr {
        seq(vec![self.ws.clone(), lit(","), self.ws.clone()])
    }

    /// Any JSON value.
    fn any_value(&mut self) -> Expr {
        if self.names.contains("json-value") {
            return name("json-value");
        }
        self.names.insert("json-value".into());
        let string = self.json_string();
        let number = self.fixed_rule("json-number", |_| g(numbers::JSON_NUMBER));
        let ws = self.ws.clone();
        let sep = self.sep();
        let object = self.fixed_rule("json-object", |_| {
            let member = seq(vec![
                string.clone(),
                ws.clone(),
                lit(":"),
                ws.clone(),
                name("json-value"),
            ]);
            seq(vec![
                lit("{"),
                ws.clone(),
                opt(seq(vec![
                    member.clone(),
                    repeat(seq(vec![sep.clone(), member]), 0, None),
                    ws.clone(),
                ])),
                lit("}"),
            ])
        });
        let array = self.fixed_rule("json-array", |_| {
            let v = name("json-value");
            seq(vec![
                lit("["),
                ws.clone(),
                opt(seq(vec![
                    v.clone(),
                    repeat(seq(vec![sep.clone(), v]), 0, None),
                    ws.clone(),
                ])),
                lit("]"),
            ])
        });
        let body = alt(vec![
            object,
            array,
            string,
            number,
            lit("true"),
            lit("false"),
            lit("null"),
        ])
        .expect("non-empty");
        self.rules.push(("json-value".into(), body));
        name("json-value")
    }

    /// Any JSON string.
    fn json_string(&mut self) -> Expr {
        self.fixed_rule("json-string", |c| {
            let ch = from_hir(&c.enc.encode(&any_char(), Spelling::Any)).expect("non-empty");
            seq(vec![lit("\""), repeat(ch, 0, None), lit("\"")])
        })
    }

    /// The GBNF of the values `s` accepts; `None` if none.
    fn value(&mut self, s: &Value, ptr: &str, hint: &str) -> Res<Option<Expr>> {
        self.depth += 1;
        if self.depth > self.opts.max_schema_depth {
            self.depth -= 1;
            return Err(too_deep(ptr, self.opts.max_schema_depth));
        }
        let r = self.value_inner(s, ptr, hint);
        self.depth -= 1;
        r
    }

    fn value_inner(&mut self, s: &Value, ptr: &str, hint: &str) -> Res<Option<Expr>> {
        let m = match s {
            Value::Bool(true) => return Ok(Some(self.any_value())),
            Value::Bool(false) => return Ok(None),
            Value::Object(m) => m,
            _ => return Err(invalid(ptr, "a schema must be an object or a boolean")),
        };
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            let target = self.resolve(r, ptr)?;
            let only_ref = !m
                .keys()
                .any(|k| k != "$ref" && ASSERTIONS.contains(&k.as_str()));
            if self.old_ref || only_ref {
                return match target {
                    Some(t) => self.ref_rule(&t),
                    // A remote reference left to validation: anything here.
                    None => Ok(Some(self.any_value())),
                };
            }
        }
        let flat = self.flatten(m, ptr)?;
        self.body(&flat, ptr, hint)
    }

    /// The values of a flattened schema.
    fn body(&mut self, m: &Map<String, Value>, ptr: &str, hint: &str) -> Res<Option<Expr>> {
        self.check_keywords(m, ptr)?;
        if !m.keys().any(|k| ASSERTIONS.contains(&k.as_str())) {
            return Ok(Some(self.any_value()));
        }
        if m.contains_key("anyOf") {
            return self.alternatives(m, "anyOf", ptr, hint);
        }
        if m.contains_key("oneOf") {
            return self.alternatives(m, "oneOf", ptr, hint);
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return self.enumeration(m, ptr, hint);
        }
        let types = self.types(m, ptr)?;
        let mut alts = Vec::new();
        if types.has(Types::OBJECT)
            && let Some(e) = self.object(m, ptr, hint)?
        {
            alts.push(e);
        }
        if types.has(Types::ARRAY)
            && let Some(e) = self.array(m, ptr, hint)?
        {
            alts.push(e);
        }
        if types.has(Types::STRING)
            && let Some(e) = self.string(m, ptr, hint)?
        {
            alts.push(e);
        }
        if types.has(Types::NUMBER | Types::INTEGER)
            && let Some(e) = self.number(m, ptr, !types.has(Types::NUMBER), hint)?
        {
            alts.push(e);
        }
        if types.has(Types::BOOL) {
            alts.push(alt(vec![lit("true"), lit("false")]).expect("two"));
        }
        if types.has(Types::NULL) {
            alts.push(lit("null"));
        }
        Ok(alt(alts).map(|b| self.rule(hint, b)))
    }

    /// `anyOf` / `oneOf`: each branch merged with the schema around it.
    fn alternatives(
        &mut self,
        m: &Map<String, Value>,
        key: &str,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let Some(Value::Array(branches)) = m.get(key) else {
            return Err(invalid(ptr, format!("{key} must be an array")));
        };
        let mut base = m.clone();
        base.shift_remove(key);
        let base_asserts = base.keys().any(|k| ASSERTIONS.contains(&k.as_str()));
        let mut merged: Vec<(Value, String)> = Vec::new();
        for (i, b) in branches.iter().enumerate() {
            let bp = child(&child(ptr, key), &i.to_string());
            if base_asserts {
                let fb = self.as_map(b, &bp)?;
                let mm = self.merge(base.clone(), fb, &bp)?;
                merged.push((Value::Object(mm), bp));
            } else {
                merged.push((b.clone(), bp));
            }
        }
        if key == "oneOf" {
            let mut overlap = false;
            'pairs: for i in 0..merged.len() {
                for j in i + 1..merged.len() {
                    if !self.disjoint(&merged[i].0, &merged[j].0, 0) {
                        overlap = true;
                        break 'pairs;
                    }
                }
            }
            if overlap {
                self.unsupported(
                    "oneOf",
                    ptr,
                    "its branches may overlap, and a value valid for two branches must be refused",
                )?;
            }
        }
        let mut exprs = Vec::new();
        for (b, bp) in &merged {
            if let Some(e) = self.value(b, bp, hint)? {
                exprs.push(e);
            }
        }
        Ok(alt(exprs).map(|b| self.rule(hint, b)))
    }
}

/// Whether a GBNF expression is one name or one literal (no rule needed).
fn is_simple(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::RuleRef(_) | ExprKind::Literal(_))
}

use keywords::Types;

mod arrays;
mod disjoint;
mod enums;
mod keywords;
mod merge;
mod number;
mod objects;
mod refs;
mod strings;
#[cfg(test)]
mod tests;

use enums::{enum_values, json_eq};
use merge::{normalize_bounds, num, single};
use number::{bounds, gcd};
use refs::collect_ids;
use strings::dfas_intersect;

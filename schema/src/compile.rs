//! Schema -> GBNF text. See the module docs of [`super`] for the plan; the functions here
//! follow it: [`Compiler::value`] is the entry for any subschema and returns a GBNF
//! expression (usually a rule name) or `None` when no value is valid.

use super::gbnf::{EPSILON, alt, and, from_hir, lit, not, opt, repeat, seq};
use super::numbers::{self, Bound, SDec};
use super::pattern::{Spelling, any_char, ecma_to_hir, json_encode, restrict_length};
use super::{Deferred, JsonSchemaOptions, PropertyOrder, Whitespace, formats};
use crate::error::SchemaErrorKind;
use corral_grammar::{CompileOptions, DEAD, LexemeDfa};
use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, Repetition};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

/// Regular rules up to this size (counting a repetition's body once) are inlined into
/// their callers' lexemes; larger ones (strings, numbers, objects) stay rules with lexemes of
/// their own, shared by every use. See [`corral_grammar::lower::lower`].
pub(crate) const INLINE_UNITS: usize = 16;

/// Most states (estimated before JSON encoding) of an intersection of a string's pattern,
/// format and length; larger ones are refused (lenient: deferred) rather than built.
const MAX_PRODUCT_STATES: usize = 20_000;

/// Deepest nesting of subschemas followed while compiling (reference chains, merges).
const MAX_DEPTH: u32 = 256;

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
    format!("{ptr}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// JSON types as a bit set; `integer` is a subset of `number`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Types(u8);

impl Types {
    const NULL: u8 = 1;
    const BOOL: u8 = 2;
    const OBJECT: u8 = 4;
    const ARRAY: u8 = 8;
    const NUMBER: u8 = 16;
    const INTEGER: u8 = 32;
    const STRING: u8 = 64;
    const ALL: Types = Types(127);

    fn parse(name: &str) -> Option<u8> {
        Some(match name {
            "null" => Types::NULL,
            "boolean" => Types::BOOL,
            "object" => Types::OBJECT,
            "array" => Types::ARRAY,
            "number" => Types::NUMBER | Types::INTEGER,
            "integer" => Types::INTEGER,
            "string" => Types::STRING,
            _ => return None,
        })
    }

    fn of(v: &Value) -> u8 {
        match v {
            Value::Null => Types::NULL,
            Value::Bool(_) => Types::BOOL,
            Value::Object(_) => Types::OBJECT,
            Value::Array(_) => Types::ARRAY,
            Value::String(_) => Types::STRING,
            Value::Number(n) => {
                let d = SDec::parse(&n.to_string());
                if d.is_some_and(|d| d.is_integer()) {
                    Types::NUMBER | Types::INTEGER
                } else {
                    Types::NUMBER
                }
            }
        }
    }

    fn has(self, t: u8) -> bool {
        self.0 & t != 0
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

/// Compiles `schema` into GBNF (start rule `root`) and the keywords left to validation.
pub(crate) fn to_gbnf(
    schema: &Value,
    opts: &JsonSchemaOptions,
) -> Result<(String, Vec<Deferred>), Fail> {
    let mut c = Compiler::new(schema, opts);
    let root = c.value(schema, "", "root")?;
    let Some(root) = root else {
        return Err(invalid("", "no JSON value satisfies this schema"));
    };
    let mut out = String::new();
    if opts.outer_whitespace {
        out.push_str(&format!("root ::= [ \\t\\n\\r]* {root} [ \\t\\n\\r]*\n"));
    } else {
        out.push_str(&format!("root ::= {root}\n"));
    }
    if let Whitespace::Flexible { max } = opts.whitespace {
        out.push_str(&format!(
            "ws ::= {}\n",
            repeat("[ \\t\\n\\r]", 0, Some(max))
        ));
    }
    for (name, body) in &c.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    Ok((out, c.deferred))
}

struct Compiler<'a> {
    root: &'a Value,
    opts: &'a JsonSchemaOptions,
    /// Draft-07 and earlier: `$ref` replaces its siblings.
    old_ref: bool,
    /// `$id`s and anchors of the document -> JSON pointer.
    ids: FxHashMap<String, String>,
    rules: Vec<(String, String)>,
    names: FxHashSet<String>,
    by_body: FxHashMap<String, String>,
    /// `$ref` target pointer -> its rule (`None` once known to be unsatisfiable).
    refs: FxHashMap<String, Option<String>>,
    deferred: Vec<Deferred>,
    depth: u32,
    /// Pattern -> DFA over the value (for checks at compile time).
    pattern_dfas: FxHashMap<String, Option<std::sync::Arc<LexemeDfa>>>,
    ws: String,
}

impl<'a> Compiler<'a> {
    fn new(root: &'a Value, opts: &'a JsonSchemaOptions) -> Compiler<'a> {
        let old_ref = root
            .get("$schema")
            .and_then(Value::as_str)
            .is_some_and(|s| {
                ["draft-03", "draft-04", "draft-06", "draft-07"]
                    .iter()
                    .any(|d| s.contains(d))
            });
        let mut ids = FxHashMap::default();
        collect_ids(root, "", &mut ids, 0);
        let mut names = FxHashSet::default();
        names.insert("root".to_string());
        names.insert("ws".to_string());
        Compiler {
            root,
            opts,
            old_ref,
            ids,
            rules: Vec::new(),
            names,
            by_body: FxHashMap::default(),
            refs: FxHashMap::default(),
            deferred: Vec::new(),
            depth: 0,
            pattern_dfas: FxHashMap::default(),
            ws: match opts.whitespace {
                Whitespace::Compact => EPSILON.to_string(),
                Whitespace::Flexible { .. } => "ws".to_string(),
            },
        }
    }

    /// The DFA of `h`, through the options' DFA cache.
    fn dfa(&self, h: &Hir) -> Result<std::sync::Arc<LexemeDfa>, corral_grammar::ErrorKind> {
        LexemeDfa::build_cached(
            h,
            self.opts.limits.max_lexeme_bytes,
            self.opts.dfa_cache.as_ref(),
        )
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
        let mut base: String = hint
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        base.truncate(40);
        if base.is_empty() {
            base = "v".into();
        }
        let mut name = base.clone();
        let mut k = 2;
        while self.names.contains(&name) {
            name = format!("{base}-{k}");
            k += 1;
        }
        self.names.insert(name.clone());
        name
    }

    /// A rule for `body` (one per distinct body), or `body` itself if it is a single name or
    /// literal already.
    fn rule(&mut self, hint: &str, body: String) -> String {
        if is_simple(&body) {
            return body;
        }
        if let Some(n) = self.by_body.get(&body) {
            return n.clone();
        }
        let name = self.fresh_name(hint);
        self.by_body.insert(body.clone(), name.clone());
        self.rules.push((name.clone(), body));
        name
    }

    /// A fixed rule (`json-value`, ...), defined on first use.
    fn fixed_rule(&mut self, name: &str, body: impl FnOnce(&mut Self) -> String) -> String {
        if !self.names.contains(name) {
            self.names.insert(name.to_string());
            let b = body(self);
            self.rules.push((name.to_string(), b));
        }
        name.to_string()
    }

    fn sep(&self) -> String {
        seq(&[self.ws.clone(), lit(","), self.ws.clone()])
    }

    /// Any JSON value.
    fn any_value(&mut self) -> String {
        if self.names.contains("json-value") {
            return "json-value".into();
        }
        self.names.insert("json-value".into());
        let string = self.json_string();
        let number = self.fixed_rule("json-number", |_| numbers::JSON_NUMBER.to_string());
        let ws = self.ws.clone();
        let sep = self.sep();
        let object = self.fixed_rule("json-object", |_| {
            let member = seq(&[
                string.clone(),
                ws.clone(),
                lit(":"),
                ws.clone(),
                "json-value".into(),
            ]);
            seq(&[
                lit("{"),
                ws.clone(),
                opt(&seq(&[
                    member.clone(),
                    repeat(&seq(&[sep.clone(), member]), 0, None),
                    ws.clone(),
                ])),
                lit("}"),
            ])
        });
        let array = self.fixed_rule("json-array", |_| {
            let v = "json-value".to_string();
            seq(&[
                lit("["),
                ws.clone(),
                opt(&seq(&[
                    v.clone(),
                    repeat(&seq(&[sep.clone(), v]), 0, None),
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
        "json-value".into()
    }

    /// Any JSON string.
    fn json_string(&mut self) -> String {
        self.fixed_rule("json-string", |_| {
            let ch = from_hir(&json_encode(&any_char(), Spelling::Any)).expect("non-empty");
            seq(&[lit("\""), repeat(&ch, 0, None), lit("\"")])
        })
    }

    // ---- references -------------------------------------------------------------------

    /// The JSON pointer a `$ref` names; `None` for a remote reference left to validation
    /// (lenient mode).
    fn resolve(&mut self, r: &str, ptr: &str) -> Res<Option<String>> {
        let (base, frag) = match r.find('#') {
            Some(i) => (&r[..i], &r[i + 1..]),
            None => (r, ""),
        };
        let mut prefix = String::new();
        if !base.is_empty() {
            match self.ids.get(base).filter(|p| *p != AMBIGUOUS) {
                Some(p) => prefix = p.clone(),
                None => {
                    self.unsupported(
                        "$ref",
                        ptr,
                        &format!("'{r}' is a remote reference (only references into this document are followed)"),
                    )?;
                    return Ok(None);
                }
            }
        }
        let frag = percent_decode(frag);
        let target = if frag.is_empty() || frag.starts_with('/') {
            format!("{prefix}{frag}")
        } else {
            match self.ids.get(&format!("#{frag}")) {
                Some(p) if p == AMBIGUOUS => {
                    self.unsupported(
                        "$ref",
                        ptr,
                        &format!(
                            "anchor '{frag}' is defined more than once (under different base URIs)"
                        ),
                    )?;
                    return Ok(None);
                }
                Some(p) => p.clone(),
                None => {
                    return Err(invalid(
                        ptr,
                        format!("$ref '{r}': no anchor named '{frag}'"),
                    ));
                }
            }
        };
        if self.root.pointer(&target).is_none() {
            return Err(invalid(
                ptr,
                format!("$ref '{r}' points to nothing in this schema"),
            ));
        }
        Ok(Some(target))
    }

    /// The rule of the subschema at `target` (compiled once; recursion refers back to it).
    fn ref_rule(&mut self, target: &str) -> Res<Option<String>> {
        if let Some(r) = self.refs.get(target) {
            return Ok(r.clone());
        }
        let hint = target.rsplit('/').next().unwrap_or("ref").to_string();
        let name = self.fresh_name(if hint.is_empty() { "root-ref" } else { &hint });
        self.refs.insert(target.to_string(), Some(name.clone()));
        let schema = self.root.pointer(target).expect("resolved").clone();
        let body = self.value(&schema, target, &name)?;
        match body {
            Some(b) => {
                self.rules.push((name.clone(), b));
                Ok(Some(name))
            }
            None => {
                // Recursive uses may already name it: a rule that derives nothing.
                self.rules.push((name.clone(), name.clone()));
                self.refs.insert(target.to_string(), None);
                Ok(None)
            }
        }
    }

    // ---- subschemas -------------------------------------------------------------------

    /// The GBNF of the values `s` accepts; `None` if none.
    fn value(&mut self, s: &Value, ptr: &str, hint: &str) -> Res<Option<String>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(invalid(
                ptr,
                "subschemas nest too deeply (a reference cycle without progress?)",
            ));
        }
        let r = self.value_inner(s, ptr, hint);
        self.depth -= 1;
        r
    }

    fn value_inner(&mut self, s: &Value, ptr: &str, hint: &str) -> Res<Option<String>> {
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

    /// `m` with its `$ref` and `allOf` merged in (recursively), so neither is at the top.
    fn flatten(&mut self, m: &Map<String, Value>, ptr: &str) -> Res<Map<String, Value>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(invalid(
                ptr,
                "subschemas nest too deeply (a reference cycle without progress?)",
            ));
        }
        let r = self.flatten_inner(m, ptr);
        self.depth -= 1;
        r
    }

    fn flatten_inner(&mut self, m: &Map<String, Value>, ptr: &str) -> Res<Map<String, Value>> {
        let mut base = m.clone();
        let mut parts: Vec<Map<String, Value>> = Vec::new();
        if let Some(r) = base.shift_remove("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            let target = self.resolve(r, ptr)?;
            if self.old_ref {
                base = Map::new();
            }
            if let Some(target) = target {
                let t = self.root.pointer(&target).expect("resolved").clone();
                parts.push(self.as_map(&t, &target)?);
            }
        }
        if let Some(all) = base.shift_remove("allOf") {
            let Value::Array(items) = all else {
                return Err(invalid(ptr, "allOf must be an array"));
            };
            for (i, it) in items.iter().enumerate() {
                let p = child(&child(ptr, "allOf"), &i.to_string());
                parts.push(self.as_map(it, &p)?);
            }
        }
        let mut out = base;
        for p in parts {
            out = self.merge(out, p, ptr)?;
        }
        Ok(out)
    }

    /// A subschema as a flattened map (`true` is `{}`, `false` a schema with no values).
    fn as_map(&mut self, s: &Value, ptr: &str) -> Res<Map<String, Value>> {
        match s {
            Value::Bool(true) => Ok(Map::new()),
            Value::Bool(false) => {
                let mut m = Map::new();
                m.insert("enum".into(), Value::Array(Vec::new()));
                Ok(m)
            }
            Value::Object(m) => self.flatten(m, ptr),
            _ => Err(invalid(ptr, "a schema must be an object or a boolean")),
        }
    }

    /// Checks for keywords the grammar cannot express.
    fn check_keywords(&mut self, m: &Map<String, Value>, ptr: &str) -> Res<()> {
        for (k, v) in m {
            let reason = match k.as_str() {
                "not" => "a negated subschema is not expressible as a grammar",
                "if" => "conditional subschemas (if/then/else) depend on the instance",
                "dependentRequired" | "dependentSchemas" | "dependencies" => {
                    "dependencies between properties"
                }
                "contains" => "'an item matching somewhere in the array'",
                "propertyNames" => "constraints on property names",
                "unevaluatedProperties" | "unevaluatedItems" => {
                    "what other subschemas did not evaluate"
                }
                "$dynamicRef" | "$recursiveRef" => "dynamic references",
                "uniqueItems" if v == &Value::Bool(true) => {
                    "all items different is not a context-free property"
                }
                _ => continue,
            };
            self.unsupported(k, ptr, reason)?;
        }
        Ok(())
    }

    /// The values of a flattened schema.
    fn body(&mut self, m: &Map<String, Value>, ptr: &str, hint: &str) -> Res<Option<String>> {
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

    fn types(&self, m: &Map<String, Value>, ptr: &str) -> Res<Types> {
        let bad = || {
            invalid(
                &child(ptr, "type"),
                "unknown type (known: null boolean object array number integer string)",
            )
        };
        match m.get("type") {
            None => Ok(Types::ALL),
            Some(Value::String(s)) => Types::parse(s).map(Types).ok_or_else(bad),
            Some(Value::Array(xs)) => {
                let mut t = 0;
                for x in xs {
                    t |= x.as_str().and_then(Types::parse).ok_or_else(bad)?;
                }
                Ok(Types(t))
            }
            Some(_) => Err(bad()),
        }
    }

    /// `anyOf` / `oneOf`: each branch merged with the schema around it.
    fn alternatives(
        &mut self,
        m: &Map<String, Value>,
        key: &str,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<String>> {
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

    // ---- merging (allOf) ---------------------------------------------------------------

    /// The schema of values valid for both `a` and `b` (both flattened).
    fn merge(
        &mut self,
        mut a: Map<String, Value>,
        b: Map<String, Value>,
        ptr: &str,
    ) -> Res<Map<String, Value>> {
        normalize_bounds(&mut a);
        let mut b = b;
        normalize_bounds(&mut b);
        // Properties one side names are additional properties for the other.
        let a_props: Vec<String> = obj_keys(&a, "properties");
        let b_props: Vec<String> = obj_keys(&b, "properties");
        let restrict = |this: &Map<String, Value>,
                        other: &Map<String, Value>,
                        names: &[String]|
         -> Vec<(String, Value)> {
            // For each property `this` names and `other` does not, `other`'s
            // additionalProperties applies.
            let Some(ap) = other.get("additionalProperties") else {
                return Vec::new();
            };
            if ap == &Value::Bool(true) {
                return Vec::new();
            }
            obj_keys(this, "properties")
                .into_iter()
                .filter(|k| !names.contains(k))
                .map(|k| (k, ap.clone()))
                .collect()
        };
        // `items` counts from the end of the `prefixItems` beside it: where only the other
        // side has a tuple, this side's `items` also constrains the tuple's positions.
        tuple_items(&mut a, &b);
        tuple_items(&mut b, &a);
        let extra_a = restrict(&a, &b, &b_props);
        let extra_b = restrict(&b, &a, &a_props);
        if (!extra_a.is_empty() && b.contains_key("patternProperties"))
            || (!extra_b.is_empty() && a.contains_key("patternProperties"))
        {
            self.unsupported(
                "allOf",
                ptr,
                "merging patternProperties with additionalProperties of another subschema",
            )?;
        }
        for (k, v) in b {
            let Some(old) = a.get(&k).cloned() else {
                a.insert(k, v);
                continue;
            };
            let merged = match k.as_str() {
                "type" => {
                    let ta = self.types(&single("type", old.clone()), ptr)?;
                    let tb = self.types(&single("type", v.clone()), ptr)?;
                    let t = ta.0 & tb.0;
                    let names: Vec<Value> = [
                        (Types::NULL, "null"),
                        (Types::BOOL, "boolean"),
                        (Types::OBJECT, "object"),
                        (Types::ARRAY, "array"),
                        (Types::STRING, "string"),
                    ]
                    .into_iter()
                    .filter(|(b, _)| t & b != 0)
                    .map(|(_, n)| Value::String(n.into()))
                    .chain(if t & Types::NUMBER != 0 {
                        Some(Value::String("number".into()))
                    } else if t & Types::INTEGER != 0 {
                        Some(Value::String("integer".into()))
                    } else {
                        None
                    })
                    .collect();
                    Value::Array(names)
                }
                "enum" | "const" => {
                    let xs = enum_values(&single(&k, old), ptr)?;
                    let ys = enum_values(&single(&k, v), ptr)?;
                    k_to_enum(
                        &mut a,
                        xs.into_iter()
                            .filter(|x| ys.iter().any(|y| json_eq(x, y)))
                            .collect(),
                    );
                    continue;
                }
                "properties" | "patternProperties" | "$defs" | "definitions" => {
                    let (Value::Object(mut x), Value::Object(y)) = (old, v) else {
                        return Err(invalid(ptr, format!("{k} must be an object")));
                    };
                    for (pk, pv) in y {
                        match x.get_mut(&pk) {
                            Some(ov) => *ov = all_of(ov.clone(), pv),
                            None => {
                                x.insert(pk, pv);
                            }
                        }
                    }
                    Value::Object(x)
                }
                "required" => {
                    let mut xs = old.as_array().cloned().unwrap_or_default();
                    for y in v.as_array().cloned().unwrap_or_default() {
                        if !xs.contains(&y) {
                            xs.push(y);
                        }
                    }
                    Value::Array(xs)
                }
                "additionalProperties" | "items" | "additionalItems" => all_of(old, v),
                "prefixItems" => {
                    let (Value::Array(x), Value::Array(y)) = (old, v) else {
                        return Err(invalid(ptr, "prefixItems must be an array"));
                    };
                    let n = x.len().max(y.len());
                    let mut out = Vec::with_capacity(n);
                    for i in 0..n {
                        out.push(match (x.get(i), y.get(i)) {
                            (Some(p), Some(q)) => all_of(p.clone(), q.clone()),
                            (Some(p), None) => p.clone(),
                            (None, Some(q)) => q.clone(),
                            (None, None) => unreachable!(),
                        });
                    }
                    if x.len() != y.len() {
                        self.unsupported(
                            "prefixItems",
                            ptr,
                            "merging tuples of different lengths",
                        )?;
                    }
                    Value::Array(out)
                }
                "minLength" | "minItems" | "minProperties" | "minimum" | "exclusiveMinimum" => {
                    max_num(&old, &v)
                }
                "maxLength" | "maxItems" | "maxProperties" | "maximum" | "exclusiveMaximum" => {
                    min_num(&old, &v)
                }
                "multipleOf" => match (old.as_u64(), v.as_u64()) {
                    (Some(x), Some(y)) if x > 0 && y > 0 => Value::from(x / gcd(x, y) * y),
                    _ if old == v => old,
                    _ => {
                        self.unsupported(
                            "multipleOf",
                            ptr,
                            "two different non-integer multipleOf",
                        )?;
                        old
                    }
                },
                "pattern" | "format" if old == v => old,
                "pattern" | "format" => {
                    self.unsupported(
                        &k,
                        ptr,
                        "two different patterns/formats on one string need an automaton intersection",
                    )?;
                    old
                }
                "anyOf" | "oneOf" => {
                    let (Value::Array(x), Value::Array(y)) = (old, v) else {
                        return Err(invalid(ptr, format!("{k} must be an array")));
                    };
                    if x.len() * y.len() > 64 {
                        self.unsupported(
                            &k,
                            ptr,
                            "too many combinations of two anyOf/oneOf lists",
                        )?;
                    }
                    if k == "oneOf" {
                        self.unsupported("oneOf", ptr, "two oneOf lists in one schema")?;
                    }
                    let mut out = Vec::new();
                    for p in &x {
                        for q in &y {
                            out.push(all_of(p.clone(), q.clone()));
                        }
                    }
                    Value::Array(out)
                }
                "uniqueItems" => Value::Bool(old == Value::Bool(true) || v == Value::Bool(true)),
                // Annotations and unsupported keywords: keep the first (the latter are
                // refused or deferred when the merged schema is compiled).
                _ => old,
            };
            if let Some(slot) = a.get_mut(&k) {
                *slot = merged;
            }
        }
        // Apply the other side's additionalProperties to properties only one side names.
        if (!extra_a.is_empty() || !extra_b.is_empty())
            && let Some(Value::Object(props)) = a.get_mut("properties")
        {
            for (k, ap) in extra_a.into_iter().chain(extra_b) {
                if let Some(v) = props.get_mut(&k) {
                    *v = all_of(v.clone(), ap);
                }
            }
        }
        if let Some(Value::Array(t)) = a.get("type")
            && t.is_empty()
        {
            k_to_enum(&mut a, Vec::new());
        }
        Ok(a)
    }

    // ---- enum / const -------------------------------------------------------------------

    fn enumeration(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<String>> {
        let mut values = enum_values(m, ptr)?;
        let types = self.types(m, ptr)?;
        values.retain(|v| types.0 & Types::of(v) != 0);
        // Other constraints beside enum: keep the values the rest of the schema accepts.
        let mut rest = m.clone();
        rest.shift_remove("enum");
        rest.shift_remove("const");
        rest.shift_remove("type");
        if rest.keys().any(|k| ASSERTIONS.contains(&k.as_str())) && !values.is_empty() {
            match self.sub_grammar(&rest, ptr)? {
                Some(sub) => values.retain(|v| {
                    let text = v.to_string();
                    corral_grammar::match_bytes(&sub, text.as_bytes()).ok()
                        == Some(corral_grammar::MatchOutcome::Accepted)
                }),
                None => values.clear(),
            }
        }
        let exprs: Vec<String> = values.iter().map(|v| self.literal(v)).collect();
        Ok(alt(exprs).map(|b| self.rule(hint, b)))
    }

    /// A grammar of one subschema (same document, same options), for checks at compile time.
    fn sub_grammar(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Res<Option<std::sync::Arc<corral_grammar::Grammar>>> {
        let mut opts = self.opts.clone();
        opts.whitespace = Whitespace::Compact;
        let mut c = Compiler::new(self.root, &opts);
        c.depth = self.depth;
        let Some(root) = c.value(&Value::Object(m.clone()), ptr, "root")? else {
            return Ok(None);
        };
        for d in c.deferred {
            if !self.deferred.contains(&d) {
                self.deferred.push(d);
            }
        }
        let mut text = format!("root ::= {root}\n");
        for (n, b) in &c.rules {
            text.push_str(&format!("{n} ::= {b}\n"));
        }
        corral_grammar::compile_gbnf(&text, &grammar_options(self.opts))
            .map(Some)
            .map_err(|e| (SchemaErrorKind::Grammar(Box::new(e)), ptr.to_string()))
    }

    /// One JSON value exactly (whitespace allowed between tokens).
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::Array(xs) if !xs.is_empty() => {
                let items: Vec<String> = xs.iter().map(|x| self.literal(x)).collect();
                seq(&[
                    lit("["),
                    self.ws.clone(),
                    items.join(&format!(" {} ", self.sep())),
                    self.ws.clone(),
                    lit("]"),
                ])
            }
            Value::Object(m) if !m.is_empty() => {
                let items: Vec<String> = m
                    .iter()
                    .map(|(k, x)| {
                        seq(&[
                            lit(&Value::String(k.clone()).to_string()),
                            self.ws.clone(),
                            lit(":"),
                            self.ws.clone(),
                            self.literal(x),
                        ])
                    })
                    .collect();
                seq(&[
                    lit("{"),
                    self.ws.clone(),
                    items.join(&format!(" {} ", self.sep())),
                    self.ws.clone(),
                    lit("}"),
                ])
            }
            Value::Array(_) => seq(&[lit("["), self.ws.clone(), lit("]")]),
            Value::Object(_) => seq(&[lit("{"), self.ws.clone(), lit("}")]),
            Value::Number(n) => number_literal(&n.to_string()),
            v => lit(&v.to_string()),
        }
    }

    // ---- numbers ------------------------------------------------------------------------

    fn number(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        integer: bool,
        hint: &str,
    ) -> Res<Option<String>> {
        let (lo, hi) = bounds(m, ptr)?;
        let k = match m.get("multipleOf") {
            None => None,
            Some(v) => {
                let d = v
                    .as_number()
                    .and_then(|n| SDec::parse(&n.to_string()))
                    .filter(|d| !d.neg && *d != SDec::zero())
                    .ok_or_else(|| {
                        invalid(&child(ptr, "multipleOf"), "multipleOf must be a number > 0")
                    })?;
                Some(d)
            }
        };
        let int_range = |lo: &Option<Bound>, hi: &Option<Bound>| {
            let (l, h) = numbers::integer_bounds(lo.as_ref(), hi.as_ref());
            if l.is_none() && h.is_none() {
                Some(numbers::JSON_INTEGER.to_string())
            } else {
                numbers::integer_range(l.as_ref(), h.as_ref())
            }
        };
        let expr = match k.as_ref().map(|k| step(k, integer)) {
            None | Some(Step::Digits(_)) if integer => int_range(&lo, &hi),
            None => numbers::number_range(lo.as_ref(), hi.as_ref()),
            // Multiples of 1 are the integers.
            Some(Step::Digits(0)) => int_range(&lo, &hi),
            Some(Step::Digits(d)) => {
                if lo.is_some() || hi.is_some() {
                    self.unsupported(
                        "multipleOf",
                        ptr,
                        "a fractional multipleOf together with minimum/maximum",
                    )?;
                    numbers::number_range(lo.as_ref(), hi.as_ref())
                } else {
                    Some(format!(
                        r#""-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]{{1,{d}}} "0"* )?"#
                    ))
                }
            }
            Some(Step::Int(n)) => {
                let (l, h) = numbers::integer_bounds(lo.as_ref(), hi.as_ref());
                match (&l, &h) {
                    (Some(l), Some(h)) => {
                        match numbers::listed_multiples(
                            n as i128,
                            l,
                            h,
                            self.opts.max_listed_multiples,
                        ) {
                            Ok(e) => e,
                            Err(()) => {
                                self.unsupported(
                                    "multipleOf",
                                    ptr,
                                    "multipleOf over a minimum..maximum range too wide to list (max_listed_multiples)",
                                )?;
                                numbers::integer_range(Some(l), Some(h))
                            }
                        }
                    }
                    (None, None) => match numbers::multiples_by_last_digits(n) {
                        Some(e) => Some(e),
                        None => {
                            self.unsupported(
                                "multipleOf",
                                ptr,
                                "an unbounded multipleOf that does not divide a power of ten",
                            )?;
                            Some(numbers::JSON_INTEGER.to_string())
                        }
                    },
                    _ => {
                        self.unsupported(
                            "multipleOf",
                            ptr,
                            "multipleOf with a bound on one side only",
                        )?;
                        numbers::integer_range(l.as_ref(), h.as_ref())
                    }
                }
            }
            Some(Step::Fraction) => {
                self.unsupported(
                    "multipleOf",
                    ptr,
                    "a fractional multipleOf other than 10^-n",
                )?;
                numbers::number_range(lo.as_ref(), hi.as_ref())
            }
        };
        Ok(expr.map(|e| {
            let name = if integer { "integer" } else { "number" };
            if e == numbers::JSON_NUMBER {
                self.fixed_rule("json-number", |_| e)
            } else if e == numbers::JSON_INTEGER {
                self.fixed_rule("json-integer", |_| e)
            } else {
                self.rule(&format!("{hint}-{name}"), e)
            }
        }))
    }

    // ---- strings ------------------------------------------------------------------------

    fn string(&mut self, m: &Map<String, Value>, ptr: &str, hint: &str) -> Res<Option<String>> {
        let min = count(m, ptr, "minLength")?.unwrap_or(0);
        let max = count(m, ptr, "maxLength")?;
        let mut pattern = None;
        if let Some(p) = m.get("pattern") {
            let p = p
                .as_str()
                .ok_or_else(|| invalid(&child(ptr, "pattern"), "pattern must be a string"))?;
            match ecma_to_hir(p, self.opts.limits.max_nesting_depth) {
                Ok(h) => pattern = Some(h),
                Err(e) => self.unsupported("pattern", ptr, &e)?,
            }
        }
        let mut format = None;
        if let Some(f) = m.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| invalid(&child(ptr, "format"), "format must be a string"))?;
            match formats::format_hir(f) {
                Some(h) => format = Some(h),
                None => self.unsupported(
                    "format",
                    ptr,
                    &format!(
                        "unknown format '{f}' (known: {})",
                        formats::KNOWN.join(", ")
                    ),
                )?,
            }
        }
        let to_u32 =
            |x: u64| u32::try_from(x).map_err(|_| invalid(ptr, "string length bound too large"));
        let length = || -> Res<Hir> {
            Ok(Hir::repetition(Repetition {
                min: to_u32(min)?,
                max: max.map(to_u32).transpose()?,
                greedy: true,
                sub: Box::new(any_char()),
            }))
        };
        // What the string's characters must match: each of these (more than one: an
        // intersection of automata, GBNF's `&`).
        let mut parts: Vec<Hir> = pattern.into_iter().chain(format).collect();
        let bounded = min > 0 || max.is_some();
        // The states of a length counter, if the length is a part of its own.
        let mut counter = 1usize;
        match parts.as_mut_slice() {
            [] if !bounded => return Ok(Some(self.json_string())),
            [] => parts.push(length()?),
            _ if !bounded => {}
            [one] => match restrict_length(one, min, max) {
                Ok(Some(h)) => *one = h,
                Ok(None) => return Ok(None),
                Err(()) => counter = max.unwrap_or(min).saturating_add(1) as usize,
            },
            _ => counter = max.unwrap_or(min).saturating_add(1) as usize,
        }
        if parts.len() > 1 || counter > 1 {
            // The product automaton has at most the product of the parts' states: refuse
            // (or, lenient, defer) one too large to build.
            let states = parts.iter().try_fold(counter, |acc, h| {
                self.dfa(h).ok().map(|d| acc.saturating_mul(d.len().max(1)))
            });
            if counter > 1 {
                parts.push(length()?);
            }
            if states.is_none_or(|s| s > MAX_PRODUCT_STATES) {
                let keyword = match (bounded, parts.len()) {
                    (true, _) => {
                        if max.is_some() {
                            "maxLength"
                        } else {
                            "minLength"
                        }
                    }
                    _ => "format",
                };
                self.unsupported(
                    keyword,
                    ptr,
                    &format!(
                        "the intersection of this string's pattern, format and length has more than {MAX_PRODUCT_STATES} automaton states"
                    ),
                )?;
                parts.truncate(1);
            }
        }
        let mut operands = Vec::with_capacity(parts.len());
        for h in &parts {
            let Some(body) = from_hir(&json_encode(h, Spelling::Any)) else {
                return Ok(None);
            };
            operands.push(seq(&[lit("\""), body, lit("\"")]));
        }
        let body = match operands.as_slice() {
            [one] => one.clone(),
            _ => and(&operands),
        };
        Ok(Some(self.rule(&format!("{hint}-string"), body)))
    }

    // ---- arrays -------------------------------------------------------------------------

    fn array(&mut self, m: &Map<String, Value>, ptr: &str, hint: &str) -> Res<Option<String>> {
        let lo = count(m, ptr, "minItems")?.unwrap_or(0);
        let mut hi = count(m, ptr, "maxItems")?;
        let true_schema = Value::Bool(true);
        let (prefix, prefix_key, rest, rest_key): (&[Value], &str, &Value, &str) =
            match (m.get("prefixItems"), m.get("items")) {
                (Some(Value::Array(p)), items) => {
                    (p, "prefixItems", items.unwrap_or(&true_schema), "items")
                }
                (Some(_), _) => {
                    return Err(invalid(
                        &child(ptr, "prefixItems"),
                        "prefixItems must be an array",
                    ));
                }
                (None, Some(Value::Array(p))) => (
                    p,
                    "items",
                    m.get("additionalItems").unwrap_or(&true_schema),
                    "additionalItems",
                ),
                (None, items) => (&[], "", items.unwrap_or(&true_schema), "items"),
            };
        let item_hint = format!("{hint}-item");
        let mut elems = Vec::with_capacity(prefix.len());
        for (i, p) in prefix.iter().enumerate() {
            let pp = child(&child(ptr, prefix_key), &i.to_string());
            match self.value(p, &pp, &item_hint)? {
                Some(e) => elems.push(e),
                None => {
                    hi = Some(hi.map_or(i as u64, |h| h.min(i as u64)));
                    break;
                }
            }
        }
        let rest_expr = if hi.is_some_and(|h| h <= elems.len() as u64) {
            None
        } else {
            self.value(rest, &child(ptr, rest_key), &item_hint)?
        };
        if rest_expr.is_none() {
            let k = elems.len() as u64;
            hi = Some(hi.map_or(k, |h| h.min(k)));
        }
        if hi.is_some_and(|h| lo > h) {
            return Ok(None);
        }
        let k = elems.len() as u64;
        let ws = self.ws.clone();
        let sep = self.sep();
        // Items from position i on (at least one).
        let mut tail: Option<String> = None; // items from position k on
        if let Some(r) = &rest_expr
            && hi.is_none_or(|h| h > k)
        {
            let more_lo = lo.saturating_sub(k + 1);
            let more_hi = hi.map(|h| h - k - 1);
            let to_u32 =
                |x: u64| u32::try_from(x).map_err(|_| invalid(ptr, "array length bound too large"));
            tail = Some(seq(&[
                r.clone(),
                repeat(
                    &seq(&[sep.clone(), r.clone()]),
                    to_u32(more_lo)?,
                    more_hi.map(to_u32).transpose()?,
                ),
            ]));
        }
        let mut from: Option<String> = tail;
        for i in (0..elems.len()).rev() {
            let pos = i as u64 + 1; // items so far, including this one
            let next = from.map(|f| seq(&[sep.clone(), f]));
            let body = match next {
                None => elems[i].clone(),
                Some(n) if pos >= lo => seq(&[elems[i].clone(), opt(&n)]),
                Some(n) => seq(&[elems[i].clone(), n]),
            };
            from = Some(if elems.len() > 4 {
                self.rule(&format!("{hint}-from-{i}"), body)
            } else {
                body
            });
        }
        let inner = match from {
            None => EPSILON.to_string(),
            Some(f) if lo == 0 => opt(&seq(&[f, ws.clone()])),
            Some(f) => seq(&[f, ws.clone()]),
        };
        let body = seq(&[lit("["), ws, inner, lit("]")]);
        Ok(Some(self.rule(&format!("{hint}-array"), body)))
    }

    // ---- objects ------------------------------------------------------------------------

    fn object(&mut self, m: &Map<String, Value>, ptr: &str, hint: &str) -> Res<Option<String>> {
        let props: Vec<(String, Value)> = match m.get("properties") {
            None => Vec::new(),
            Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(_) => {
                return Err(invalid(
                    &child(ptr, "properties"),
                    "properties must be an object",
                ));
            }
        };
        let required: Vec<String> = match m.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    invalid(
                        &child(ptr, "required"),
                        "required must be an array of strings",
                    )
                })?,
            Some(_) => {
                return Err(invalid(
                    &child(ptr, "required"),
                    "required must be an array of strings",
                ));
            }
        };
        let ap = m
            .get("additionalProperties")
            .cloned()
            .or_else(|| self.opts.closed_objects.then_some(Value::Bool(false)));
        let ap_false = ap == Some(Value::Bool(false));
        let pats: Vec<(String, Value)> = match m.get("patternProperties") {
            None => Vec::new(),
            Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(_) => {
                return Err(invalid(
                    &child(ptr, "patternProperties"),
                    "patternProperties must be an object",
                ));
            }
        };
        let min_p = count(m, ptr, "minProperties")?.unwrap_or(0);
        let max_p = count(m, ptr, "maxProperties")?;
        // Named properties: `properties` in order, then required names not listed there.
        let mut named: Vec<(String, Value, String, bool)> = Vec::new();
        for (k, v) in &props {
            named.push((
                k.clone(),
                v.clone(),
                child(&child(ptr, "properties"), k),
                required.contains(k),
            ));
        }
        for r in &required {
            if !props.iter().any(|(k, _)| k == r) && !named.iter().any(|n| &n.0 == r) {
                let s = ap.clone().unwrap_or(Value::Bool(true));
                named.push((r.clone(), s, child(ptr, "required"), true));
            }
        }
        // patternProperties apply to named properties whose name matches.
        for (k, v, _, _) in named.iter_mut() {
            let mut matching = Vec::new();
            for (p, s) in &pats {
                if self.pattern_matches(p, k, ptr)? {
                    matching.push(s.clone());
                }
            }
            if !matching.is_empty() {
                let from_props = props.iter().any(|(pk, _)| pk == k);
                let mut all = if from_props {
                    vec![v.clone()]
                } else {
                    Vec::new()
                };
                all.extend(matching);
                *v = if all.len() == 1 {
                    all.pop().expect("one")
                } else {
                    Value::Object(single("allOf", Value::Array(all)))
                };
            }
        }
        let ws = self.ws.clone();
        let mut items: Vec<(String, bool)> = Vec::new();
        let obj_hint = hint.to_string();
        for (k, v, p, req) in &named {
            match self.value(v, p, k)? {
                Some(val) => {
                    let kv = seq(&[
                        lit(&Value::String(k.clone()).to_string()),
                        ws.clone(),
                        lit(":"),
                        ws.clone(),
                        val,
                    ]);
                    items.push((kv, *req));
                }
                None if *req => return Ok(None),
                None => {}
            }
        }
        let names: Vec<String> = named.iter().map(|n| n.0.clone()).collect();
        let extra = self.extra_members(&names, &pats, ap.as_ref(), ap_false, ptr, hint)?;
        let chain = match self.opts.property_order {
            PropertyOrder::Schema => {
                self.ordered_members(&items, extra.as_deref(), min_p, max_p, ptr, &obj_hint)?
            }
            PropertyOrder::Any => {
                self.any_order_members(&items, extra.as_deref(), min_p, max_p, ptr, &obj_hint)?
            }
        };
        let Some(chain) = chain else {
            return Ok(None);
        };
        let body = seq(&[lit("{"), ws.clone(), chain, lit("}")]);
        Ok(Some(self.rule(&format!("{hint}-object"), body)))
    }

    /// Whether property name `name` matches pattern `p` (the pattern searched in the name).
    fn pattern_matches(&mut self, p: &str, name: &str, ptr: &str) -> Res<bool> {
        Ok(self
            .pattern_dfa(p, ptr)?
            .is_some_and(|d| d.matches(name.as_bytes())))
    }

    fn pattern_dfa(&mut self, p: &str, ptr: &str) -> Res<Option<&LexemeDfa>> {
        if !self.pattern_dfas.contains_key(p) {
            let dfa = match ecma_to_hir(p, self.opts.limits.max_nesting_depth) {
                Ok(h) => self.dfa(&h).ok(),
                Err(e) => {
                    self.unsupported("patternProperties", ptr, &format!("pattern '{p}': {e}"))?;
                    None
                }
            };
            self.pattern_dfas.insert(p.to_string(), dfa);
        }
        Ok(self.pattern_dfas[p].as_deref())
    }

    /// Members beyond the named properties: `key: value` (one), or `None` if none may appear.
    fn extra_members(
        &mut self,
        names: &[String],
        pats: &[(String, Value)],
        ap: Option<&Value>,
        ap_false: bool,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<String>> {
        let ws = self.ws.clone();
        let member = |key: String, val: String, ws: &str| {
            seq(&[key, ws.to_string(), lit(":"), ws.to_string(), val])
        };
        let mut alts = Vec::new();
        // Additional properties: keys that are neither named nor match a pattern. A pattern
        // refused (below, with its own members; lenient: deferred) leaves its keys here,
        // with any value, so that the grammar still accepts every valid object.
        let mut patterns = Vec::new();
        let mut refused = false;
        for (p, _) in pats {
            match ecma_to_hir(p, self.opts.limits.max_nesting_depth) {
                Ok(h) => patterns.push(h),
                Err(_) => refused = true,
            }
        }
        if !ap_false || refused {
            let ap_schema = match ap {
                Some(s) if !refused => s.clone(),
                _ => Value::Bool(true),
            };
            if let Some(val) = self.value(
                &ap_schema,
                &child(ptr, "additionalProperties"),
                &format!("{hint}-extra"),
            )? {
                let key = if names.is_empty() && patterns.is_empty() {
                    self.json_string()
                } else {
                    let body = from_hir(&json_encode(&not_in(names), Spelling::Plain))
                        .expect("the complement of a finite set is not empty");
                    let key = seq(&[lit("\""), body, lit("\"")]);
                    let key =
                        match from_hir(&json_encode(&Hir::alternation(patterns), Spelling::Any)) {
                            // Not matching any pattern, however its characters are escaped.
                            Some(p) => and(&[key, not(&seq(&[lit("\""), p, lit("\"")]))]),
                            None => key,
                        };
                    self.rule(&format!("{hint}-other-key"), key)
                };
                alts.push(member(key, val, &ws));
            }
        }
        // Keys matching a pattern, besides the named ones. (Every pattern's automaton
        // first: the checks below compare them.)
        for (p, _) in pats {
            self.pattern_dfa(p, ptr)?;
        }
        for (i, (p, s)) in pats.iter().enumerate() {
            let hir = match ecma_to_hir(p, self.opts.limits.max_nesting_depth) {
                Ok(h) => h,
                Err(e) => {
                    self.unsupported("patternProperties", ptr, &format!("pattern '{p}': {e}"))?;
                    continue;
                }
            };
            // A named property matching the pattern is written as the named one (its schema
            // merged with the pattern's): the pattern's keys leave it out.
            let shadows_a_name = names.iter().any(|n| {
                self.pattern_dfas
                    .get(p)
                    .and_then(|d| d.as_ref())
                    .is_some_and(|d| d.matches(n.as_bytes()))
            });
            for (q, _) in &pats[i + 1..] {
                let (Some(Some(a)), Some(Some(b))) =
                    (self.pattern_dfas.get(p), self.pattern_dfas.get(q))
                else {
                    continue;
                };
                if dfas_intersect(a, b) {
                    self.unsupported(
                        "patternProperties",
                        ptr,
                        &format!("patterns '{p}' and '{q}' overlap (a key matching both needs both schemas)"),
                    )?;
                }
            }
            let pp = child(&child(ptr, "patternProperties"), p);
            let Some(val) = self.value(s, &pp, &format!("{hint}-pattern"))? else {
                continue;
            };
            let Some(body) = from_hir(&json_encode(&hir, Spelling::Plain)) else {
                continue;
            };
            let mut key = seq(&[lit("\""), body, lit("\"")]);
            if shadows_a_name {
                let others = from_hir(&json_encode(&not_in(names), Spelling::Plain))
                    .expect("the complement of a finite set is not empty");
                key = and(&[key, seq(&[lit("\""), others, lit("\"")])]);
            }
            let key = self.rule(&format!("{hint}-pattern-key"), key);
            alts.push(member(key, val, &ws));
        }
        Ok(alt(alts))
    }

    /// Members in schema order: `S(i, c)` = the members from the i-th named property on,
    /// `c` members written so far (saturating where no bound needs the exact count).
    fn ordered_members(
        &mut self,
        items: &[(String, bool)],
        extra: Option<&str>,
        min_p: u64,
        max_p: Option<u64>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<String>> {
        let cap = max_p.unwrap_or(min_p.max(1));
        let n = items.len();
        if (n as u64 + 1).saturating_mul(cap + 1) > self.opts.max_object_states as u64 {
            return Err((
                SchemaErrorKind::Limit {
                    what: "the property chain of an object (properties x counted properties)"
                        .into(),
                    value: (n + 1) * (cap as usize + 1),
                    limit_name: "max_object_states",
                    limit: self.opts.max_object_states,
                },
                ptr.to_string(),
            ));
        }
        let sep = self.sep();
        let ws = self.ws.clone();
        let mut memo: FxHashMap<(usize, u64), Option<String>> = FxHashMap::default();
        // Built from the end, so every state's successors exist.
        for i in (0..=n).rev() {
            for c in (0..=cap).rev() {
                let e = if i == n {
                    // Extra members: r of them, with min_p - c <= r <= max_p - c.
                    let r_lo = min_p.saturating_sub(c);
                    let r_hi = max_p.map(|m| m.saturating_sub(c));
                    match extra {
                        None if r_lo > 0 => None,
                        None => Some(if c == 0 {
                            EPSILON.to_string()
                        } else {
                            ws.clone()
                        }),
                        Some(_) if r_hi == Some(0) => {
                            if r_lo > 0 {
                                None
                            } else {
                                Some(if c == 0 {
                                    EPSILON.to_string()
                                } else {
                                    ws.clone()
                                })
                            }
                        }
                        Some(x) => {
                            let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                            let body = if c == 0 {
                                let first = seq(&[
                                    x.to_string(),
                                    repeat(
                                        &seq(&[sep.clone(), x.to_string()]),
                                        to_u32(r_lo.saturating_sub(1)),
                                        r_hi.map(|h| to_u32(h - 1)),
                                    ),
                                    ws.clone(),
                                ]);
                                if r_lo == 0 {
                                    alt(vec![first, EPSILON.to_string()]).expect("two")
                                } else {
                                    first
                                }
                            } else {
                                seq(&[
                                    repeat(
                                        &seq(&[sep.clone(), x.to_string()]),
                                        to_u32(r_lo),
                                        r_hi.map(to_u32),
                                    ),
                                    ws.clone(),
                                ])
                            };
                            Some(body)
                        }
                    }
                } else {
                    let (kv, req) = &items[i];
                    let mut alts = Vec::new();
                    if max_p.is_none_or(|m| c < m) {
                        let nc = if max_p.is_some() {
                            c + 1
                        } else {
                            (c + 1).min(cap)
                        };
                        if let Some(Some(next)) = memo.get(&(i + 1, nc)) {
                            let head = if c == 0 {
                                kv.clone()
                            } else {
                                seq(&[sep.clone(), kv.clone()])
                            };
                            alts.push(seq(&[head, next.clone()]));
                        }
                    }
                    if !req && let Some(Some(next)) = memo.get(&(i + 1, c)) {
                        alts.push(next.clone());
                    }
                    alt(alts)
                };
                // States reached from several places become rules; the others stay inline.
                let e = e.map(|e| {
                    if i < n && (i + 1 < n || extra.is_some()) {
                        self.rule(&format!("{hint}-m{i}-{c}"), e)
                    } else {
                        e
                    }
                });
                memo.insert((i, c), e);
            }
        }
        Ok(memo.remove(&(0, 0)).flatten())
    }

    /// Members in any order, each named property at most once: the state is the set of
    /// properties written so far.
    fn any_order_members(
        &mut self,
        items: &[(String, bool)],
        extra: Option<&str>,
        min_p: u64,
        max_p: Option<u64>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<String>> {
        let n = items.len();
        if n > self.opts.max_any_order_properties {
            return Err((
                SchemaErrorKind::Limit {
                    what: "properties of an object in any order".into(),
                    value: n,
                    limit_name: "max_any_order_properties",
                    limit: self.opts.max_any_order_properties,
                },
                ptr.to_string(),
            ));
        }
        if extra.is_some() && (min_p > 0 || max_p.is_some()) {
            self.unsupported(
                "minProperties",
                ptr,
                "counting additional properties in any order",
            )?;
        }
        let required: u32 = items
            .iter()
            .enumerate()
            .filter(|(_, (_, r))| *r)
            .fold(0, |m, (i, _)| m | 1 << i);
        let sep = self.sep();
        let ws = self.ws.clone();
        let mut memo: Vec<Option<String>> = vec![None; 1 << n];
        // States by decreasing set size, so successors are built first.
        let mut order: Vec<u32> = (0..1u32 << n).collect();
        order.sort_by_key(|s| std::cmp::Reverse(s.count_ones()));
        for &set in &order {
            let count = set.count_ones() as u64;
            let name = self.fresh_name(&format!("{hint}-any-{set}"));
            let mut alts = Vec::new();
            if set & required == required && count >= min_p {
                alts.push(ws.clone());
            }
            if max_p.is_none_or(|m| count < m) {
                for (i, (kv, _)) in items.iter().enumerate() {
                    if set & (1 << i) != 0 {
                        continue;
                    }
                    if let Some(next) = &memo[(set | 1 << i) as usize] {
                        alts.push(seq(&[sep.clone(), kv.clone(), next.clone()]));
                    }
                }
                if let Some(x) = extra {
                    alts.push(seq(&[sep.clone(), x.to_string(), name.clone()]));
                }
            }
            if let Some(b) = alt(alts) {
                self.rules.push((name.clone(), b));
                memo[set as usize] = Some(name);
            }
        }
        // The first member has no comma.
        let mut alts = Vec::new();
        if required == 0 && min_p == 0 {
            alts.push(EPSILON.to_string());
        }
        for (i, (kv, _)) in items.iter().enumerate() {
            if let Some(next) = &memo[1 << i] {
                alts.push(seq(&[kv.clone(), next.clone()]));
            }
        }
        if let Some(x) = extra
            && let Some(next) = &memo[0]
        {
            alts.push(seq(&[x.to_string(), next.clone()]));
        }
        Ok(alt(alts))
    }

    // ---- disjointness (oneOf) -----------------------------------------------------------

    /// Whether no value is valid for both (conservative: `false` when unsure).
    fn disjoint(&mut self, a: &Value, b: &Value, depth: u32) -> bool {
        if depth > 8 {
            return false;
        }
        let (Some(a), Some(b)) = (self.view(a), self.view(b)) else {
            return false;
        };
        let ta = possible_types(&a);
        let tb = possible_types(&b);
        if ta & tb == 0 {
            return true;
        }
        if let (Ok(xs), Ok(ys)) = (enum_values(&a, ""), enum_values(&b, ""))
            && (a.contains_key("enum") || a.contains_key("const"))
            && (b.contains_key("enum") || b.contains_key("const"))
            && !xs.iter().any(|x| ys.iter().any(|y| json_eq(x, y)))
        {
            return true;
        }
        let common = ta & tb;
        if common == Types::OBJECT {
            let req = |m: &Map<String, Value>| -> Vec<String> {
                m.get("required")
                    .and_then(Value::as_array)
                    .map(|r| {
                        r.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let (ra, rb) = (req(&a), req(&b));
            let prop = |m: &Map<String, Value>, k: &str| {
                m.get("properties").and_then(|p| p.get(k)).cloned()
            };
            for k in ra.iter().filter(|k| rb.contains(k)) {
                if let (Some(pa), Some(pb)) = (prop(&a, k), prop(&b, k))
                    && self.disjoint(&pa, &pb, depth + 1)
                {
                    return true;
                }
            }
            let closed = |m: &Map<String, Value>| {
                m.get("additionalProperties") == Some(&Value::Bool(false))
                    && !m.contains_key("patternProperties")
            };
            for (y, rx) in [(&b, &ra), (&a, &rb)] {
                if closed(y) && rx.iter().any(|k| prop(y, k).is_none()) {
                    return true;
                }
            }
        }
        if common & !(Types::NUMBER | Types::INTEGER) == 0
            && let (Ok((la, ha)), Ok((lb, hb))) = (bounds(&a, ""), bounds(&b, ""))
        {
            let below = |h: &Option<Bound>, l: &Option<Bound>| match (h, l) {
                (Some(h), Some(l)) => {
                    h.value < l.value || (h.value == l.value && (h.strict || l.strict))
                }
                _ => false,
            };
            if below(&ha, &lb) || below(&hb, &la) {
                return true;
            }
        }
        false
    }

    /// A schema flattened for inspection, without compiling (`None` if it cannot be).
    fn view(&mut self, s: &Value) -> Option<Map<String, Value>> {
        let saved = self.deferred.len();
        let r = match s {
            Value::Bool(true) => Some(Map::new()),
            Value::Bool(false) => Some(single("enum", Value::Array(Vec::new()))),
            Value::Object(m) => self.flatten(m, "").ok(),
            _ => None,
        };
        // Inspection defers nothing.
        self.deferred.truncate(saved);
        r
    }
}

/// Every way to write the number `n` without an exponent (`2`, `2.0`, `2.00` are one value
/// in JSON Schema); with an exponent, only as written.
fn number_literal(n: &str) -> String {
    let Some(d) = SDec::parse(n) else {
        return lit(n);
    };
    let digits = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let sign = if d.neg {
        lit("-")
    } else if d.mag.int == b"0" && d.mag.frac.is_empty() {
        opt(&lit("-"))
    } else {
        EPSILON.to_string()
    };
    let int = lit(&digits(&d.mag.int));
    let plain = if d.mag.frac.is_empty() {
        seq(&[sign, int, opt(&seq(&[lit("."), "\"0\"+".to_string()]))])
    } else {
        seq(&[
            sign,
            int,
            lit(&format!(".{}", digits(&d.mag.frac))),
            "\"0\"*".to_string(),
        ])
    };
    if n.contains(['e', 'E']) {
        alt(vec![plain, lit(n)]).expect("two")
    } else {
        plain
    }
}

/// Which JSON types a (flattened) schema allows.
fn possible_types(m: &Map<String, Value>) -> u8 {
    if let Ok(vs) = enum_values(m, "")
        && (m.contains_key("enum") || m.contains_key("const"))
    {
        return vs.iter().fold(0, |t, v| t | Types::of(v));
    }
    match m.get("type") {
        Some(Value::String(s)) => Types::parse(s).unwrap_or(127),
        Some(Value::Array(xs)) => xs
            .iter()
            .map(|x| x.as_str().and_then(Types::parse).unwrap_or(127))
            .fold(0, |a, b| a | b),
        _ => 127,
    }
}

/// Whether `a` and `b` (DFAs over the same bytes) accept a common string.
fn dfas_intersect(a: &LexemeDfa, b: &LexemeDfa) -> bool {
    const MAX_PAIRS: usize = 200_000;
    let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
    let mut stack = vec![(a.start(), b.start())];
    while let Some((x, y)) = stack.pop() {
        if x == DEAD || y == DEAD || !seen.insert((x, y)) {
            continue;
        }
        if a.is_accepting(x) && b.is_accepting(y) {
            return true;
        }
        if seen.len() > MAX_PAIRS {
            return true; // unsure: assume they overlap
        }
        for byte in 0..=255u8 {
            stack.push((a.next(x, byte), b.next(y, byte)));
        }
    }
    false
}

/// Strings (over code points) that are none of `names`.
fn not_in(names: &[String]) -> Hir {
    #[derive(Default)]
    struct Node {
        end: bool,
        kids: Vec<(char, Node)>,
    }
    let mut root = Node::default();
    for n in names {
        let mut node = &mut root;
        for c in n.chars() {
            let i = match node.kids.iter().position(|(k, _)| *k == c) {
                Some(i) => i,
                None => {
                    node.kids.push((c, Node::default()));
                    node.kids.len() - 1
                }
            };
            node = &mut node.kids[i].1;
        }
        node.end = true;
    }
    // Strings that leave the trie (then anything may follow: one shared tail), or stop at a
    // node that is not a name.
    fn leave(node: &Node) -> Hir {
        let mut alts = Vec::new();
        let mut others = ClassUnicode::new([ClassUnicodeRange::new('\0', char::MAX)]);
        let taken = ClassUnicode::new(
            node.kids
                .iter()
                .map(|(c, _)| ClassUnicodeRange::new(*c, *c)),
        );
        others.difference(&taken);
        if others.iter().next().is_some() {
            alts.push(Hir::class(Class::Unicode(others)));
        }
        for (c, kid) in &node.kids {
            alts.push(Hir::concat(vec![
                Hir::literal(c.to_string().into_bytes()),
                leave(kid),
            ]));
        }
        Hir::alternation(alts)
    }
    fn stop(node: &Node) -> Option<Hir> {
        let mut alts = Vec::new();
        if !node.end {
            alts.push(Hir::empty());
        }
        for (c, kid) in &node.kids {
            if let Some(k) = stop(kid) {
                alts.push(Hir::concat(vec![
                    Hir::literal(c.to_string().into_bytes()),
                    k,
                ]));
            }
        }
        (!alts.is_empty()).then(|| Hir::alternation(alts))
    }
    let any_star = Hir::repetition(Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(any_char()),
    });
    let mut alts = vec![Hir::concat(vec![leave(&root), any_star])];
    alts.extend(stop(&root));
    Hir::alternation(alts)
}

/// When `other` has a tuple (`prefixItems`, or draft-07 array `items`) and `this` has only
/// a schema for all items, `this` gets a tuple of that schema as long as `other`'s, so that
/// merging keeps it applying to every position.
fn tuple_items(this: &mut Map<String, Value>, other: &Map<String, Value>) {
    let other_len = match (other.get("prefixItems"), other.get("items")) {
        (Some(Value::Array(p)), _) | (None, Some(Value::Array(p))) => p.len(),
        _ => return,
    };
    let has_tuple =
        this.contains_key("prefixItems") || matches!(this.get("items"), Some(Value::Array(_)));
    if has_tuple {
        return;
    }
    let Some(all) = this.get("items").cloned() else {
        return;
    };
    let key = if other.contains_key("prefixItems") {
        "prefixItems"
    } else {
        "items"
    };
    if key == "items" {
        // Draft-07 form: the tuple in `items`, the rest in `additionalItems`.
        this.insert("items".into(), Value::Array(vec![all.clone(); other_len]));
        this.insert("additionalItems".into(), all);
    } else {
        this.insert("prefixItems".into(), Value::Array(vec![all; other_len]));
    }
}

/// `{"allOf": [a, b]}`, flattened where one side is trivial.
fn all_of(a: Value, b: Value) -> Value {
    match (&a, &b) {
        (Value::Bool(true), _) => b,
        (_, Value::Bool(true)) => a,
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        _ if a == b => a,
        _ => Value::Object(single("allOf", Value::Array(vec![a, b]))),
    }
}

fn single(k: &str, v: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(k.to_string(), v);
    m
}

fn obj_keys(m: &Map<String, Value>, key: &str) -> Vec<String> {
    m.get(key)
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The values `enum` and `const` allow (both must hold where both are given).
fn enum_values(m: &Map<String, Value>, ptr: &str) -> Res<Vec<Value>> {
    let mut values: Option<Vec<Value>> = None;
    if let Some(e) = m.get("enum") {
        let Value::Array(xs) = e else {
            return Err(invalid(&child(ptr, "enum"), "enum must be an array"));
        };
        values = Some(xs.clone());
    }
    if let Some(c) = m.get("const") {
        values = Some(match values {
            None => vec![c.clone()],
            Some(xs) => xs.into_iter().filter(|x| json_eq(x, c)).collect(),
        });
    }
    Ok(values.unwrap_or_default())
}

fn k_to_enum(m: &mut Map<String, Value>, values: Vec<Value>) {
    m.shift_remove("const");
    m.insert("enum".into(), Value::Array(values));
}

/// JSON equality as JSON Schema means it (1 == 1.0).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            SDec::parse(&x.to_string()) == SDec::parse(&y.to_string())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn num(v: &Value) -> Option<SDec> {
    v.as_number().and_then(|n| SDec::parse(&n.to_string()))
}

fn max_num(a: &Value, b: &Value) -> Value {
    match (num(a), num(b)) {
        (Some(x), Some(y)) if y > x => b.clone(),
        _ => a.clone(),
    }
}

fn min_num(a: &Value, b: &Value) -> Value {
    match (num(a), num(b)) {
        (Some(x), Some(y)) if y < x => b.clone(),
        _ => a.clone(),
    }
}

/// Draft-04 boolean `exclusiveMinimum`/`exclusiveMaximum` become the numeric form.
fn normalize_bounds(m: &mut Map<String, Value>) {
    for (ex, plain) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(b)) = m.get(ex).cloned() {
            m.shift_remove(ex);
            if b && let Some(v) = m.shift_remove(plain) {
                m.insert(ex.to_string(), v);
            }
        }
    }
}

/// The lower and upper bounds of a number schema (the tightest of the four keywords).
fn bounds(m: &Map<String, Value>, ptr: &str) -> Res<(Option<Bound>, Option<Bound>)> {
    let mut m = m.clone();
    normalize_bounds(&mut m);
    let get = |k: &str| -> Res<Option<SDec>> {
        match m.get(k) {
            None => Ok(None),
            Some(v) => num(v)
                .map(Some)
                .ok_or_else(|| invalid(&child(ptr, k), format!("{k} must be a number"))),
        }
    };
    let pick = |a: Option<Bound>, b: Option<Bound>, lower: bool| -> Option<Bound> {
        match (a, b) {
            (Some(x), Some(y)) => {
                let tighter = match x.value.cmp(&y.value) {
                    std::cmp::Ordering::Equal => x.strict,
                    std::cmp::Ordering::Greater => lower,
                    std::cmp::Ordering::Less => !lower,
                };
                Some(if tighter { x } else { y })
            }
            (x, None) => x,
            (None, y) => y,
        }
    };
    let b = |v: Option<SDec>, strict: bool| v.map(|value| Bound { value, strict });
    let lo = pick(
        b(get("minimum")?, false),
        b(get("exclusiveMinimum")?, true),
        true,
    );
    let hi = pick(
        b(get("maximum")?, false),
        b(get("exclusiveMaximum")?, true),
        false,
    );
    Ok((lo, hi))
}

/// What `multipleOf k` allows, k = a / 10^d.
enum Step {
    /// k = 10^-d: no constraint on integers; numbers have at most d fraction digits (d = 0:
    /// k = 1, the integers).
    Digits(usize),
    /// Integers that are multiples of n > 1.
    Int(u64),
    /// Another fraction, on numbers.
    Fraction,
}

/// On integers, `a / 10^d` steps are multiples of `a / gcd(a, 10^d)`.
fn step(k: &SDec, integer: bool) -> Step {
    let d = k.mag.frac.len();
    let digits: String = k
        .mag
        .int
        .iter()
        .chain(&k.mag.frac)
        .map(|&b| b as char)
        .collect();
    let Ok(a) = digits.parse::<u64>() else {
        return Step::Fraction;
    };
    if a == 1 {
        return Step::Digits(d);
    }
    if d == 0 {
        return Step::Int(a);
    }
    if !integer {
        return Step::Fraction;
    }
    match 10u64.checked_pow(d as u32) {
        Some(p) => match a / gcd(a, p) {
            1 => Step::Digits(0),
            n => Step::Int(n),
        },
        None => Step::Fraction,
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Whether a GBNF expression is one name or one literal (no rule needed).
fn is_simple(e: &str) -> bool {
    e.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        || (e.starts_with('"')
            && e.ends_with('"')
            && e.len() >= 2
            && !e[1..e.len() - 1].contains("\" "))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && b[i + 1].is_ascii_hexdigit()
            && b[i + 2].is_ascii_hexdigit()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Marks an `$id` or anchor defined more than once.
const AMBIGUOUS: &str = "\0ambiguous";

/// `$id`s (absolute, and without a trailing `#`) and anchors (`$anchor`, draft-07 `$id: "#x"`)
/// of the document, to their JSON pointers.
fn collect_ids(v: &Value, ptr: &str, out: &mut FxHashMap<String, String>, depth: u32) {
    if depth > 200 {
        return;
    }
    // A name defined twice (anchors scoped by nested base URIs) resolves to nothing.
    let mut define = |name: String| {
        out.entry(name)
            .and_modify(|p| *p = AMBIGUOUS.to_string())
            .or_insert_with(|| ptr.to_string());
    };
    match v {
        Value::Object(m) => {
            for key in ["$id", "id"] {
                if let Some(Value::String(id)) = m.get(key) {
                    if let Some(anchor) = id.strip_prefix('#') {
                        if !anchor.is_empty() {
                            define(format!("#{anchor}"));
                        }
                    } else {
                        define(id.trim_end_matches('#').to_string());
                    }
                }
            }
            if let Some(Value::String(a)) = m.get("$anchor") {
                define(format!("#{a}"));
            }
            for (k, x) in m {
                if matches!(
                    k.as_str(),
                    "enum" | "const" | "default" | "examples" | "example"
                ) {
                    continue;
                }
                collect_ids(x, &child(ptr, k), out, depth + 1);
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                collect_ids(x, &child(ptr, &i.to_string()), out, depth + 1);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CompiledSchema, JsonSchemaOptions, PropertyOrder, compile_json_schema};
    use corral_grammar::{MatchOutcome, match_bytes};

    fn compile(schema: &str) -> CompiledSchema {
        compile_json_schema(schema, &JsonSchemaOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn check(schema: &str, pass: &[&str], fail: &[&str]) {
        let c = compile(schema);
        for p in pass {
            assert_eq!(
                match_bytes(&c.grammar, p.as_bytes()).unwrap(),
                MatchOutcome::Accepted,
                "{schema}\nshould accept {p}\n{}",
                c.gbnf
            );
        }
        for f in fail {
            assert_ne!(
                match_bytes(&c.grammar, f.as_bytes()).unwrap(),
                MatchOutcome::Accepted,
                "{schema}\nshould refuse {f}\n{}",
                c.gbnf
            );
        }
    }

    #[test]
    fn objects_in_schema_order() {
        check(
            r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false}"#,
            &[
                r#"{"b":"x"}"#,
                r#"{"a":1,"b":"x"}"#,
                r#"{"a": 1, "b": "x", "c": true}"#,
                r#"{"b":"x","c":false}"#,
            ],
            &[
                r#"{}"#,
                r#"{"a":1}"#,
                r#"{"b":"x","a":1}"#,
                r#"{"b":"x","d":1}"#,
                r#"{"b":1}"#,
                r#"{"a":1,,"b":"x"}"#,
            ],
        );
    }

    #[test]
    fn additional_properties() {
        check(
            r#"{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}"#,
            &[r#"{}"#, r#"{"a":1,"x":"y"}"#, r#"{"zz":"y","q":""}"#],
            &[r#"{"x":1}"#, r#"{"a":"s"}"#],
        );
        check(
            r#"{"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}"#,
            &[r#"{}"#, r#"{"x-a":1,"x-b":2}"#],
            &[r#"{"y":1}"#, r#"{"x-a":"s"}"#],
        );
        // Additional properties beside patterns: keys that match neither a name nor a
        // pattern (however escaped) take the additional schema.
        check(
            r#"{"type":"object","properties":{"id":{"type":"integer"}},"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":{"type":"string"}}"#,
            &[
                r#"{"id":1,"x-a":2,"y":"s"}"#,
                r#"{"x":"s","x-":3}"#,
                r#"{"id":1}"#,
            ],
            &[
                r#"{"x-a":"s"}"#,
                r#"{"y":1}"#,
                r#"{"id":"s"}"#,
                r#"{"\u0078-a":"s"}"#,
            ],
        );
        check(
            r#"{"type":"object","patternProperties":{"^[0-9]+$":{"type":"boolean"}}}"#,
            &[r#"{"12":true,"a":[1]}"#, r#"{"1a":null}"#],
            &[r#"{"12":1}"#],
        );
        // Overlapping patterns: a key matching both needs both schemas (refused).
        assert!(
            compile_json_schema(
                r#"{"type":"object","patternProperties":{"a*":{"type":"integer"},"aaa*":{"maximum":20}}}"#,
                &JsonSchemaOptions::default()
            )
            .is_err()
        );
        // A named property that matches a pattern takes both schemas, and only once.
        check(
            r#"{"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{"^[a-z]$":{"minimum":0}},"additionalProperties":false}"#,
            &[r#"{"a":1,"b":2}"#, r#"{"b":0}"#],
            &[
                r#"{"a":-1}"#,
                r#"{"b":-1}"#,
                r#"{"a":1,"a":2}"#,
                r#"{"b":1,"a":1}"#,
            ],
        );
    }

    #[test]
    fn counted_properties() {
        check(
            r#"{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":1,"maxProperties":2,"additionalProperties":false}"#,
            &[r#"{"a":1}"#, r#"{"a":1,"c":3}"#, r#"{"b":null,"c":3}"#],
            &[r#"{}"#, r#"{"a":1,"b":2,"c":3}"#],
        );
    }

    #[test]
    fn any_order() {
        let opts = JsonSchemaOptions {
            property_order: PropertyOrder::Any,
            ..JsonSchemaOptions::default()
        };
        let c = compile_json_schema(
            r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}"#,
            &opts,
        )
        .unwrap();
        for (s, ok) in [
            (r#"{"a":1,"b":"x"}"#, true),
            (r#"{"b":"x","a":1}"#, true),
            (r#"{"a":1}"#, true),
            (r#"{"b":"x"}"#, false),
            (r#"{"a":1,"a":2}"#, false),
        ] {
            assert_eq!(
                match_bytes(&c.grammar, s.as_bytes()).unwrap() == MatchOutcome::Accepted,
                ok,
                "{s}\n{}",
                c.gbnf
            );
        }
    }

    #[test]
    fn arrays() {
        check(
            r#"{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}"#,
            &["[1]", "[1, 2, 3]"],
            &["[]", "[1,2,3,4]", "[\"a\"]"],
        );
        check(
            r#"{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}"#,
            &["[]", "[\"a\"]", "[\"a\",1]"],
            &["[1]", "[\"a\",1,2]"],
        );
        check(
            r#"{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"boolean"},"minItems":2}"#,
            &["[\"a\",true]", "[\"a\",true,false]"],
            &["[\"a\"]", "[\"a\",1]"],
        );
    }

    #[test]
    fn strings() {
        check(
            r#"{"type":"string","minLength":2,"maxLength":3}"#,
            &[r#""ab""#, r#""abc""#, r#""\u00e9\n""#, r#""😀😀""#],
            &[r#""a""#, r#""abcd""#, r#""\x""#],
        );
        check(
            r#"{"type":"string","pattern":"^[a-z]+$","maxLength":4}"#,
            &[r#""abcd""#, r#""\u0061""#],
            &[r#""abcde""#, r#""""#, r#""A""#],
        );
        check(
            r#"{"type":"string","format":"date"}"#,
            &[r#""2024-02-29""#],
            &[r#""2023-02-29""#],
        );
        check(
            r#"{"type":"string","pattern":"b"}"#,
            &[r#""abc""#, r#""b""#],
            &[r#""ac""#],
        );
        // Intersections: a pattern whose length no single repetition carries, a format with
        // a pattern.
        check(
            r#"{"type":"string","pattern":"[0-9a-f]+","minLength":4,"maxLength":4}"#,
            &[r#""zz0z""#, r#""beef""#, r#""AAaA""#],
            &[r#""zzzz""#, r#""beefs""#, r#""abc""#],
        );
        check(
            r#"{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":5}"#,
            &[r#""ab-cd""#, r#""abcde""#, r#""a""#],
            &[r#""ab-cde""#, r#""ab-""#, r#""abcdef""#],
        );
        check(
            r#"{"type":"string","format":"date","pattern":"^2024-"}"#,
            &[r#""2024-02-29""#],
            &[r#""2023-02-28""#, r#""2024-02-30""#, r#""2024-""#],
        );
        check(
            r#"{"type":"string","format":"email","maxLength":8}"#,
            &[r#""a@b.com""#],
            &[r#""ab@cd.com""#, r#""abcdefgh""#],
        );
    }

    #[test]
    fn numbers() {
        check(
            r#"{"type":"integer","minimum":-5,"exclusiveMaximum":10}"#,
            &["-5", "0", "9", "-0"],
            &["-6", "10", "1.5", "1e2"],
        );
        check(
            r#"{"type":"number","minimum":0.5,"maximum":2}"#,
            &["0.5", "1", "2.0", "1.99"],
            &["0.49", "2.01", "-1"],
        );
        check(
            r#"{"type":"integer","multipleOf":5}"#,
            &["0", "15", "-20"],
            &["7"],
        );
        check(
            r#"{"type":"integer","multipleOf":3,"minimum":0,"maximum":10}"#,
            &["0", "3", "9"],
            &["10", "4"],
        );
        check(
            r#"{"type":"number","multipleOf":0.01}"#,
            &["1.25", "3", "1.50"],
            &["1.255"],
        );
        check(
            r#"{"type":"number"}"#,
            &["-1.5e-3", "0", "10"],
            &["01", "1.", ".5"],
        );
    }

    #[test]
    fn combinators_and_refs() {
        check(
            r##"{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}"##,
            &[r#"{"v":1}"#, r#"{"v":1,"next":{"v":2,"next":{"v":3}}}"#],
            &[r#"{"v":1,"next":{}}"#],
        );
        check(
            r#"{"anyOf":[{"type":"string"},{"type":"integer"}]}"#,
            &[r#""x""#, "3"],
            &["1.5", "null"],
        );
        check(
            r#"{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]}"#,
            &[r#"{"kind":"a","x":1}"#, r#"{"kind":"b"}"#],
            &[r#"{"kind":"c"}"#],
        );
        check(
            r#"{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}"#,
            &[r#"{"a":1,"b":"x"}"#],
            &[r#"{"a":1}"#, r#"{"b":"x"}"#],
        );
        check(
            r#"{"enum":["a",1,null,{"k":[true]}]}"#,
            &[r#""a""#, "1", "null", r#"{"k": [true]}"#],
            &[r#""b""#, "2"],
        );
        check(
            r#"{"type":"string","enum":["a","bb",3],"maxLength":1}"#,
            &[r#""a""#],
            &[r#""bb""#, "3"],
        );
    }

    #[test]
    fn unsupported_keywords_are_positioned_errors() {
        let e = compile_json_schema(
            "{\n  \"type\": \"array\",\n  \"uniqueItems\": true\n}",
            &JsonSchemaOptions::default().with_origin("s.json"),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("s.json:3:3: 'uniqueItems' at #/uniqueItems cannot"),
            "{msg}"
        );
        let lenient = JsonSchemaOptions {
            lenient: true,
            ..JsonSchemaOptions::default()
        };
        let c = compile_json_schema(r#"{"type":"array","uniqueItems":true}"#, &lenient).unwrap();
        assert_eq!(c.deferred.len(), 1);
        assert_eq!(c.deferred[0].keyword, "uniqueItems");
        // A pattern property deferred: its keys are still accepted (the grammar a superset).
        let c = compile_json_schema(
            r#"{"type":"object","patternProperties":{"^(?!x)a":{"type":"integer"}},"additionalProperties":false}"#,
            &lenient,
        )
        .unwrap();
        assert_eq!(c.deferred[0].keyword, "patternProperties");
        for ok in [r#"{"ab":1}"#, r#"{}"#] {
            assert_eq!(
                match_bytes(&c.grammar, ok.as_bytes()).unwrap(),
                MatchOutcome::Accepted,
                "{ok}\n{}",
                c.gbnf
            );
        }
        let e = compile_json_schema(
            r#"{"oneOf":[{"type":"integer"},{"minimum":0}]}"#,
            &JsonSchemaOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("'oneOf'"), "{e}");
        let e =
            compile_json_schema(r#"{"type": "strin"}"#, &JsonSchemaOptions::default()).unwrap_err();
        assert!(e.to_string().contains("unknown type"), "{e}");
    }
}

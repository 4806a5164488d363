//! `allOf` and `$ref` siblings merged into one schema.

use super::*;

impl Compiler<'_> {
    /// The schema of values valid for both `a` and `b` (both flattened).
    /// `a` and `b` merged into one schema that accepts what both accept (as far as a
    /// grammar can say; what it cannot is refused or, lenient, deferred).
    pub(super) fn merge(
        &mut self,
        mut a: Map<String, Value>,
        mut b: Map<String, Value>,
        ptr: &str,
    ) -> Res<Map<String, Value>> {
        normalize_bounds(&mut a);
        normalize_bounds(&mut b);
        // `items` counts from the end of the `prefixItems` beside it: where only the other
        // side has a tuple, this side's `items` also constrains the tuple's positions.
        tuple_items(&mut a, &b);
        tuple_items(&mut b, &a);
        // Properties one side names are additional properties for the other.
        let extra_a = restricted_by_other(&a, &b);
        let extra_b = restricted_by_other(&b, &a);
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
            if k == "enum" || k == "const" {
                let xs = enum_values(&single(&k, old), ptr)?;
                let ys = enum_values(&single(&k, v), ptr)?;
                let both = xs
                    .into_iter()
                    .filter(|x| ys.iter().any(|y| json_eq(x, y)))
                    .collect();
                k_to_enum(&mut a, both);
                continue;
            }
            let merged = self.merge_keyword(&k, old, v, ptr)?;
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

    /// Keyword `k` present on both sides with values `old` and `v`: the merged value.
    fn merge_keyword(&mut self, k: &str, old: Value, v: Value, ptr: &str) -> Res<Value> {
        Ok(match k {
            "type" => self.merge_types(old, v, ptr)?,
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
            "prefixItems" => self.merge_tuples(old, v, ptr)?,
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
                    self.unsupported("multipleOf", ptr, "two different non-integer multipleOf")?;
                    old
                }
            },
            "pattern" | "format" if old == v => old,
            "pattern" | "format" => {
                self.unsupported(
                    k,
                    ptr,
                    "two different patterns/formats on one string need an automaton intersection",
                )?;
                old
            }
            "anyOf" | "oneOf" => self.merge_alternatives(k, old, v, ptr)?,
            "uniqueItems" => Value::Bool(old == Value::Bool(true) || v == Value::Bool(true)),
            // Annotations and unsupported keywords: keep the first (the latter are refused or
            // deferred when the merged schema is compiled).
            _ => old,
        })
    }

    /// The types both `type` values allow, as a list.
    fn merge_types(&mut self, old: Value, v: Value, ptr: &str) -> Res<Value> {
        let ta = self.types(&single("type", old), ptr)?;
        let tb = self.types(&single("type", v), ptr)?;
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
        Ok(Value::Array(names))
    }

    /// Two `prefixItems` tuples, position by position.
    fn merge_tuples(&mut self, old: Value, v: Value, ptr: &str) -> Res<Value> {
        let (Value::Array(x), Value::Array(y)) = (old, v) else {
            return Err(invalid(ptr, "prefixItems must be an array"));
        };
        if x.len() != y.len() {
            self.unsupported("prefixItems", ptr, "merging tuples of different lengths")?;
        }
        let n = x.len().max(y.len());
        let out = (0..n)
            .map(|i| match (x.get(i), y.get(i)) {
                (Some(p), Some(q)) => all_of(p.clone(), q.clone()),
                (Some(p), None) => p.clone(),
                (_, Some(q)) => q.clone(),
                (None, None) => Value::Bool(true),
            })
            .collect();
        Ok(Value::Array(out))
    }

    /// Two `anyOf` (or `oneOf`) lists: every pair of branches, merged.
    fn merge_alternatives(&mut self, k: &str, old: Value, v: Value, ptr: &str) -> Res<Value> {
        let (Value::Array(x), Value::Array(y)) = (old, v) else {
            return Err(invalid(ptr, format!("{k} must be an array")));
        };
        if x.len() * y.len() > 64 {
            self.unsupported(k, ptr, "too many combinations of two anyOf/oneOf lists")?;
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
        Ok(Value::Array(out))
    }
}

/// For each property `this` names and `other` does not: `other`'s additionalProperties,
/// which applies to it in the merge.
fn restricted_by_other(
    this: &Map<String, Value>,
    other: &Map<String, Value>,
) -> Vec<(String, Value)> {
    let Some(ap) = other.get("additionalProperties") else {
        return Vec::new();
    };
    if ap == &Value::Bool(true) {
        return Vec::new();
    }
    let names = obj_keys(other, "properties");
    obj_keys(this, "properties")
        .into_iter()
        .filter(|k| !names.contains(k))
        .map(|k| (k, ap.clone()))
        .collect()
}

/// When `other` has a tuple (`prefixItems`, or draft-07 array `items`) and `this` has only
/// a schema for all items, `this` gets a tuple of that schema as long as `other`'s, so that
/// merging keeps it applying to every position.
pub(super) fn tuple_items(this: &mut Map<String, Value>, other: &Map<String, Value>) {
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
pub(super) fn all_of(a: Value, b: Value) -> Value {
    match (&a, &b) {
        (Value::Bool(true), _) => b,
        (_, Value::Bool(true)) => a,
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        _ if a == b => a,
        _ => Value::Object(single("allOf", Value::Array(vec![a, b]))),
    }
}

pub(super) fn single(k: &str, v: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(k.to_string(), v);
    m
}

pub(super) fn obj_keys(m: &Map<String, Value>, key: &str) -> Vec<String> {
    m.get(key)
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

pub(super) fn k_to_enum(m: &mut Map<String, Value>, values: Vec<Value>) {
    m.shift_remove("const");
    m.insert("enum".into(), Value::Array(values));
}

pub(super) fn num(v: &Value) -> Option<SDec> {
    v.as_number().and_then(|n| SDec::parse(&n.to_string()))
}

pub(super) fn max_num(a: &Value, b: &Value) -> Value {
    match (num(a), num(b)) {
        (Some(x), Some(y)) if y > x => b.clone(),
        _ => a.clone(),
    }
}

pub(super) fn min_num(a: &Value, b: &Value) -> Value {
    match (num(a), num(b)) {
        (Some(x), Some(y)) if y < x => b.clone(),
        _ => a.clone(),
    }
}

/// Draft-04 boolean `exclusiveMinimum`/`exclusiveMaximum` become the numeric form.
pub(super) fn normalize_bounds(m: &mut Map<String, Value>) {
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

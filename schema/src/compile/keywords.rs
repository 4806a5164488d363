//! A subschema's keywords before it is compiled: `allOf` and `$ref` flattened into one
//! map, unknown or unsupported keywords checked, and the JSON types it allows.

use super::*;
use std::borrow::Cow;

/// JSON types as a bit set; `integer` is a subset of `number`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Types(pub(super) u8);

impl Types {
    pub(super) const NULL: u8 = 1;
    pub(super) const BOOL: u8 = 2;
    pub(super) const OBJECT: u8 = 4;
    pub(super) const ARRAY: u8 = 8;
    pub(super) const NUMBER: u8 = 16;
    pub(super) const INTEGER: u8 = 32;
    pub(super) const STRING: u8 = 64;
    pub(super) const ALL: Types = Types(127);

    pub(super) fn parse(name: &str) -> Option<u8> {
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

    pub(super) fn of(v: &Value) -> u8 {
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

    pub(super) fn has(self, t: u8) -> bool {
        self.0 & t != 0
    }
}

impl Compiler<'_> {
    /// `m` with its `$ref` and `allOf` merged in (recursively), so neither is at the top;
    /// `m` itself (not copied: it holds every subschema below) where it has neither.
    pub(super) fn flatten<'m>(
        &mut self,
        m: &'m Map<String, Value>,
        ptr: &str,
    ) -> Res<Cow<'m, Map<String, Value>>> {
        if self.depth >= self.opts.max_schema_depth {
            return Err(too_deep(ptr, self.opts.max_schema_depth));
        }
        if !m.contains_key("$ref") && !m.contains_key("allOf") {
            return Ok(Cow::Borrowed(m));
        }
        self.depth += 1;
        let r = self.flatten_inner(m, ptr);
        self.depth -= 1;
        r.map(Cow::Owned)
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
    pub(super) fn as_map(&mut self, s: &Value, ptr: &str) -> Res<Map<String, Value>> {
        match s {
            Value::Bool(true) => Ok(Map::new()),
            Value::Bool(false) => {
                let mut m = Map::new();
                m.insert("enum".into(), Value::Array(Vec::new()));
                Ok(m)
            }
            Value::Object(m) => self.flatten(m, ptr).map(Cow::into_owned),
            _ => Err(invalid(ptr, "a schema must be an object or a boolean")),
        }
    }

    /// Checks for keywords the grammar cannot express.
    pub(super) fn check_keywords(&mut self, m: &Map<String, Value>, ptr: &str) -> Res<()> {
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

    pub(super) fn types(&self, m: &Map<String, Value>, ptr: &str) -> Res<Types> {
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
}

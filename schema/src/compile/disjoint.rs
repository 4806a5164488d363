//! Disjointness of `oneOf` branches: `oneOf` becomes alternatives only where no value can
//! match two branches.

use super::*;
use std::borrow::Cow;

impl Compiler<'_> {
    /// Whether no value is valid for both (conservative: `false` when unsure).
    pub(super) fn disjoint(&mut self, a: &Value, b: &Value, depth: u32) -> bool {
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
    pub(super) fn view<'v>(&mut self, s: &'v Value) -> Option<Cow<'v, Map<String, Value>>> {
        let saved = self.deferred.len();
        let r = match s {
            Value::Bool(true) => Some(Cow::Owned(Map::new())),
            Value::Bool(false) => Some(Cow::Owned(single("enum", Value::Array(Vec::new())))),
            Value::Object(m) => self.flatten(m, "").ok(),
            _ => None,
        };
        // Inspection defers nothing.
        self.deferred.truncate(saved);
        r
    }
}

/// Which JSON types a (flattened) schema allows.
pub(super) fn possible_types(m: &Map<String, Value>) -> u8 {
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

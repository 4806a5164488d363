//! `$ref`: local JSON pointers, `$anchor`s and `$id`s resolved to rules (recursion is rule
//! recursion).

use super::*;

impl Compiler<'_> {
    /// The JSON pointer a `$ref` names; `None` for a remote reference left to validation
    /// (lenient mode).
    pub(super) fn resolve(&mut self, r: &str, ptr: &str) -> Res<Option<String>> {
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
    pub(super) fn ref_rule(&mut self, target: &str) -> Res<Option<Expr>> {
        if let Some(r) = self.refs.get(target) {
            return Ok(r.as_deref().map(name));
        }
        let hint = target.rsplit('/').next().unwrap_or("ref").to_string();
        let rule = self.fresh_name(if hint.is_empty() { "root-ref" } else { &hint });
        self.refs.insert(target.to_string(), Some(rule.clone()));
        let schema = self.root.pointer(target).expect("resolved").clone();
        let body = self.value(&schema, target, &rule)?;
        match body {
            Some(b) => {
                self.rules.push((rule.clone(), b));
                Ok(Some(name(&rule)))
            }
            None => {
                // Recursive uses may already name it: a rule that derives nothing.
                self.rules.push((rule.clone(), name(&rule)));
                self.refs.insert(target.to_string(), None);
                Ok(None)
            }
        }
    }
}

pub(super) fn percent_decode(s: &str) -> String {
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
pub(super) const AMBIGUOUS: &str = "\0ambiguous";

/// `$id`s (absolute, and without a trailing `#`) and anchors (`$anchor`, draft-07 `$id: "#x"`)
/// of the document, to their JSON pointers. `v` is at nesting `depth`; past `max` is an
/// error, not a silent stop that would leave identifiers unresolved. `ptr` is `v`'s pointer;
/// children extend it in place and leave it as they found it.
pub(super) fn collect_ids(
    v: &Value,
    ptr: &mut String,
    out: &mut FxHashMap<String, String>,
    (depth, max): (u32, u32),
) -> Result<(), super::Fail> {
    if depth > max {
        return Err(super::too_deep(ptr, max));
    }
    // A name defined twice (anchors scoped by nested base URIs) resolves to nothing.
    let mut define = |name: String| {
        out.entry(name)
            .and_modify(|p| *p = AMBIGUOUS.to_string())
            .or_insert_with(|| ptr.clone());
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
                descend(x, k, ptr, out, (depth, max))?;
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                descend(x, &i.to_string(), ptr, out, (depth, max))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// [`collect_ids`] of `x`, the child `token` of the value at `ptr`.
fn descend(
    x: &Value,
    token: &str,
    ptr: &mut String,
    out: &mut FxHashMap<String, String>,
    (depth, max): (u32, u32),
) -> Result<(), super::Fail> {
    let len = ptr.len();
    super::push_token(ptr, token);
    let r = collect_ids(x, ptr, out, (depth + 1, max));
    ptr.truncate(len);
    r
}

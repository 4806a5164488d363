//! A tool's JSON Schema as the TypeScript-like type harmony prompts show the model
//! (`type get_weather = (_: { location: string, ... }) => any;`).
//!
//! The rendering follows the harmony format's conventions, which gpt-oss was trained on:
//! - objects list their properties one per line, `?` after an optional one, with the
//!   property's title, description and string examples as `//` comments above it and its
//!   default as a `// default:` comment after it;
//! - `oneOf` becomes a union, one ` | ` line per variant, each variant's description and
//!   default as a trailing comment;
//! - string enums become unions of string literals; integers are `number`; an array is
//!   `T[]` (`Array<any>` without `items`); a list of types is their union, written as
//!   given; `nullable: true` adds `| null`;
//! - anything else (`anyOf`, `$ref`, `const`, an enum without a type, a lone `null` type)
//!   is `any`.

use serde_json::Value;

/// The type of `schema`, nested lines indented by `indent`.
pub(super) fn type_of(schema: &Value, indent: &str) -> String {
    if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        let mut out = String::new();
        for v in variants {
            out.push_str(&format!("\n{indent} | "));
            out.push_str(&variant(v, indent));
        }
        return out;
    }
    if let Some(types) = schema.get("type").and_then(Value::as_array) {
        let names: Vec<&str> = types
            .iter()
            .filter_map(Value::as_str)
            .map(|t| if t == "integer" { "number" } else { t })
            .collect();
        if !names.is_empty() {
            return names.join(" | ");
        }
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => object(schema, indent),
        Some("string") => {
            let literals: Vec<String> = schema
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| format!("\"{s}\""))
                .collect();
            if literals.is_empty() {
                "string".into()
            } else {
                literals.join(" | ")
            }
        }
        Some("array") => match schema.get("items") {
            Some(items) => format!("{}[]", type_of(items, indent)),
            None => "Array<any>".into(),
        },
        Some("integer" | "number") => "number".into(),
        Some("boolean") => "boolean".into(),
        _ => "any".into(),
    }
}

fn description(schema: &Value) -> Option<&str> {
    schema.get("description").and_then(Value::as_str)
}

fn is_enum(schema: &Value) -> bool {
    schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// A default as a comment's text. A string is quoted, except in an enum's own default
/// written above a union (`bare_enum_string`), where it stands bare.
fn default_text(schema: &Value, bare_enum_string: bool) -> Option<String> {
    let d = schema.get("default")?;
    Some(match d.as_str() {
        Some(s) if !is_enum(schema) => format!("default: \"{s}\""),
        Some(s) if bare_enum_string => format!("default: {s}"),
        _ => format!("default: {d}"),
    })
}

/// `type | null` where the schema says `nullable` and the type does not already say null.
fn with_null(schema: &Value, ty: String) -> String {
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if nullable && !ty.contains("null") {
        format!("{ty} | null")
    } else {
        ty
    }
}

/// One variant of a top-level `oneOf`, with its trailing comment.
fn variant(v: &Value, indent: &str) -> String {
    let mut out = with_null(v, type_of(v, &format!("{indent}   ")));
    let comments: Vec<String> = description(v)
        .map(str::to_string)
        .into_iter()
        .chain(default_text(v, false))
        .collect();
    if !comments.is_empty() {
        out.push_str(&format!(" // {}", comments.join(" ")));
    }
    out
}

fn object(schema: &Value, indent: &str) -> String {
    let mut out = String::new();
    if let Some(d) = description(schema) {
        out.push_str(&format!("{indent}// {d}\n"));
    }
    out.push_str("{\n");
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let props = schema.get("properties").and_then(Value::as_object);
    for (key, val) in props.into_iter().flatten() {
        let optional = if required.contains(&key.as_str()) {
            ""
        } else {
            "?"
        };
        if let Some(title) = val.get("title").and_then(Value::as_str) {
            out.push_str(&format!("{indent}// {title}\n{indent}//\n"));
        }
        let one_of = val.get("oneOf");
        if one_of.is_none()
            && let Some(d) = description(val)
        {
            out.push_str(&format!("{indent}// {d}\n"));
        }
        let examples = val.get("examples").and_then(Value::as_array);
        if let Some(examples) = examples.filter(|e| !e.is_empty()) {
            out.push_str(&format!("{indent}// Examples:\n"));
            for ex in examples.iter().filter_map(Value::as_str) {
                out.push_str(&format!("{indent}// - \"{ex}\"\n"));
            }
        }
        if let Some(variants) = one_of.and_then(Value::as_array) {
            property_union(&mut out, val, variants, key, optional, indent);
            continue;
        }
        let ty = with_null(val, type_of(val, &format!("{indent}    ")));
        out.push_str(&format!("{indent}{key}{optional}: {ty},"));
        if one_of.is_none()
            && let Some(d) = default_text(val, true)
        {
            out.push_str(&format!(" // {d}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{indent}}}"));
    out
}

/// A property whose schema is a `oneOf`: its description and default above it (the
/// description only where the first variant does not already say the same), then one line
/// per variant.
fn property_union(
    out: &mut String,
    val: &Value,
    variants: &[Value],
    key: &str,
    optional: &str,
    indent: &str,
) {
    let own = description(val);
    let first_says_it = own.is_some() && variants.first().and_then(description) == own;
    let above = !first_says_it && own.is_some();
    if above {
        out.push_str(&format!("{indent}// {}\n", own.unwrap_or_default()));
    }
    if let Some(d) = default_text(val, true) {
        out.push_str(&format!("{indent}// {d}\n"));
    }
    out.push_str(&format!("{indent}{key}{optional}:\n"));
    for (i, v) in variants.iter().enumerate() {
        out.push_str(&format!("{indent} | "));
        out.push_str(&with_null(v, type_of(v, &format!("{indent}   "))));
        let mut comments = Vec::new();
        if let Some(d) = description(v)
            && !(i == 0 && above)
            && Some(d) != own
        {
            comments.push(d.to_string());
        }
        comments.extend(default_text(v, true));
        if !comments.is_empty() {
            out.push_str(&format!(" // {}", comments.join(" ")));
        }
        out.push('\n');
    }
    out.push_str(&format!("{indent},\n"));
}

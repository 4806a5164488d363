//! `enum` and `const`: the literal values, written every way JSON allows.

use super::*;

impl Compiler<'_> {
    pub(super) fn enumeration(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let mut values = enum_values(m, ptr)?;
        let types = self.types(m, ptr)?;
        values.retain(|v| types.0 & Types::of(v) != 0);
        // Other constraints beside enum: keep the values the rest of the schema accepts.
        let mut rest = m.clone();
        rest.shift_remove("enum");
        rest.shift_remove("const");
        rest.shift_remove("type");
        if rest.keys().any(|k| ASSERTIONS.contains(&k.as_str())) && !values.is_empty() {
            match string_lengths(&rest, ptr)? {
                Some((min, max)) => values.retain(|v| {
                    v.as_str()
                        .is_none_or(|s| within(s.chars().count() as u64, min, max))
                }),
                None => match self.sub_grammar(&rest, ptr)? {
                    Some(sub) => values.retain(|v| {
                        let text = v.to_string();
                        corral_grammar::match_bytes(&sub, text.as_bytes()).ok()
                            == Some(corral_grammar::MatchOutcome::Accepted)
                    }),
                    None => values.clear(),
                },
            }
        }
        // The strings as one lexeme between quotes: a trie of the literals in one DFA, where
        // an alternative per string would keep a lexer run per string alive.
        let (strings, others): (Vec<&Value>, Vec<&Value>) =
            values.iter().partition(|v| v.is_string());
        let mut exprs: Vec<Expr> = others.iter().map(|v| self.literal(v)).collect();
        let bodies: Vec<Expr> = strings
            .iter()
            .map(|v| {
                let quoted = v.to_string();
                lit(&quoted[1..quoted.len() - 1])
            })
            .collect();
        if let Some(body) = alt(bodies) {
            exprs.insert(0, seq(vec![lit("\""), body, lit("\"")]));
        }
        Ok(alt(exprs).map(|b| self.rule(hint, b)))
    }

    /// A grammar of one subschema (same document, same options but compact whitespace and
    /// open objects), for checks at compile time.
    pub(super) fn sub_grammar(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Res<Option<std::sync::Arc<corral_grammar::Grammar>>> {
        let mut opts = self.opts.clone();
        opts.whitespace = Whitespace::Compact;
        // The values are checked against the schema's meaning: closing objects narrows what
        // a model may write freely, not the values an enum lists (as with no other
        // assertion beside them, or with lengths alone, counted without this grammar).
        opts.closed_objects = false;
        let mut c = Compiler::new(self.root, &opts)?;
        c.depth = self.depth;
        let Some(root) = c.value(&Value::Object(m.clone()), ptr, "root")? else {
            return Ok(None);
        };
        for d in c.deferred {
            if !self.deferred.contains(&d) {
                self.deferred.push(d);
            }
        }
        let mut rules = vec![built_rule("root".into(), root)];
        rules.extend(c.rules.into_iter().map(|(n, b)| built_rule(n, b)));
        corral_grammar::compile_rules(&rules, &grammar_options(self.opts))
            .map(Some)
            .map_err(|e| (SchemaErrorKind::Grammar(Box::new(e)), ptr.to_string()))
    }

    /// One JSON value exactly (whitespace allowed between tokens).
    pub(super) fn literal(&self, v: &Value) -> Expr {
        match v {
            Value::Array(xs) if !xs.is_empty() => {
                let items: Vec<Expr> = xs.iter().map(|x| self.literal(x)).collect();
                seq(vec![
                    lit("["),
                    self.ws.clone(),
                    self.separated(items),
                    self.ws.clone(),
                    lit("]"),
                ])
            }
            Value::Object(m) if !m.is_empty() => {
                let items: Vec<Expr> = m
                    .iter()
                    .map(|(k, x)| {
                        seq(vec![
                            lit(&Value::String(k.clone()).to_string()),
                            self.ws.clone(),
                            lit(":"),
                            self.ws.clone(),
                            self.literal(x),
                        ])
                    })
                    .collect();
                seq(vec![
                    lit("{"),
                    self.ws.clone(),
                    self.separated(items),
                    self.ws.clone(),
                    lit("}"),
                ])
            }
            Value::Array(_) => seq(vec![lit("["), self.ws.clone(), lit("]")]),
            Value::Object(_) => seq(vec![lit("{"), self.ws.clone(), lit("}")]),
            Value::Number(n) => number_literal(&n.to_string()),
            v => lit(&v.to_string()),
        }
    }

    /// `items` with a comma (and whitespace) between each two.
    fn separated(&self, items: Vec<Expr>) -> Expr {
        let mut parts = Vec::with_capacity(items.len() * 2);
        for (i, x) in items.into_iter().enumerate() {
            if i > 0 {
                parts.push(self.sep());
            }
            parts.push(x);
        }
        seq(parts)
    }
}

/// Every way to write the number `n` without an exponent (`2`, `2.0`, `2.00` are one value
/// in JSON Schema); with an exponent, only as written.
pub(super) fn number_literal(n: &str) -> Expr {
    let Some(d) = SDec::parse(n) else {
        return lit(n);
    };
    let digits = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let sign = if d.neg {
        lit("-")
    } else if d.mag.int == b"0" && d.mag.frac.is_empty() {
        opt(lit("-"))
    } else {
        eps()
    };
    let int = lit(&digits(&d.mag.int));
    let plain = if d.mag.frac.is_empty() {
        seq(vec![sign, int, opt(seq(vec![lit("."), g(r#""0"+"#)]))])
    } else {
        seq(vec![
            sign,
            int,
            lit(&format!(".{}", digits(&d.mag.frac))),
            g(r#""0"*"#),
        ])
    };
    if n.contains(['e', 'E']) {
        alt(vec![plain, lit(n)]).expect("two")
    } else {
        plain
    }
}

/// The values `enum` and `const` allow (both must hold where both are given).
pub(super) fn enum_values(m: &Map<String, Value>, ptr: &str) -> Res<Vec<Value>> {
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

/// The bounds of a subschema whose only assertions are `minLength` and `maxLength` (each
/// within what a string's grammar counts), or `None`. A value is then checked by counting
/// its characters (code points, as the string's grammar counts them), where compiling the
/// subschema to check it would cost most of a small schema's compile.
fn string_lengths(m: &Map<String, Value>, ptr: &str) -> Res<Option<(u64, Option<u64>)>> {
    let lengths_only = m.keys().all(|k| {
        matches!(k.as_str(), "minLength" | "maxLength") || !ASSERTIONS.contains(&k.as_str())
    });
    if !lengths_only {
        return Ok(None);
    }
    let min = count(m, ptr, "minLength")?.unwrap_or(0);
    let max = count(m, ptr, "maxLength")?;
    let fits = |n: u64| u32::try_from(n).is_ok();
    Ok((fits(min) && max.is_none_or(fits)).then_some((min, max)))
}

fn within(n: u64, min: u64, max: Option<u64>) -> bool {
    n >= min && max.is_none_or(|max| n <= max)
}

/// JSON equality as JSON Schema means it (1 == 1.0).
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
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

//! Arrays: `items`, `prefixItems` (tuples) and counts.

use super::*;

impl Compiler<'_> {
    pub(super) fn array(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
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
        let mut tail: Option<Expr> = None; // items from position k on
        if let Some(r) = &rest_expr
            && hi.is_none_or(|h| h > k)
        {
            let more_lo = lo.saturating_sub(k + 1);
            let more_hi = hi.map(|h| h - k - 1);
            let to_u32 =
                |x: u64| u32::try_from(x).map_err(|_| invalid(ptr, "array length bound too large"));
            tail = Some(seq(vec![
                r.clone(),
                repeat(
                    seq(vec![sep.clone(), r.clone()]),
                    to_u32(more_lo)?,
                    more_hi.map(to_u32).transpose()?,
                ),
            ]));
        }
        let mut from: Option<Expr> = tail;
        for i in (0..elems.len()).rev() {
            let pos = i as u64 + 1; // items so far, including this one
            let next = from.map(|f| seq(vec![sep.clone(), f]));
            let body = match next {
                None => elems[i].clone(),
                Some(n) if pos >= lo => seq(vec![elems[i].clone(), opt(n)]),
                Some(n) => seq(vec![elems[i].clone(), n]),
            };
            from = Some(if elems.len() > 4 {
                self.rule(&format!("{hint}-from-{i}"), body)
            } else {
                body
            });
        }
        let inner = match from {
            None => eps(),
            Some(f) if lo == 0 => opt(seq(vec![f, ws.clone()])),
            Some(f) => seq(vec![f, ws.clone()]),
        };
        let body = seq(vec![lit("["), ws, inner, lit("]")]);
        Ok(Some(self.rule(&format!("{hint}-array"), body)))
    }
}

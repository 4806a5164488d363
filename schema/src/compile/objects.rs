//! Objects: named properties in schema order or any order, counted with
//! `minProperties`/`maxProperties`, and additional or pattern properties.

use super::*;
use std::borrow::Cow;

/// A keyword's members, `(name, subschema)`, borrowed from the schema.
type Members<'m> = [(&'m str, &'m Value)];

/// A named property: its name, schema, pointer, and whether it is required.
type Named<'m> = (&'m str, Cow<'m, Value>, String, bool);

impl Compiler<'_> {
    /// An object schema: `{`, its members in the configured order, `}`.
    pub(super) fn object(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let props = entries(m, ptr, "properties")?;
        let pats = entries(m, ptr, "patternProperties")?;
        let required = required_names(m, ptr)?;
        let closed = Value::Bool(false);
        let ap = m
            .get("additionalProperties")
            .or_else(|| self.opts.closed_objects.then_some(&closed));
        let ap_false = ap == Some(&closed);
        let min_p = count(m, ptr, "minProperties")?.unwrap_or(0);
        let max_p = count(m, ptr, "maxProperties")?;
        if max_p.is_some_and(|max| max < min_p) {
            return Ok(None);
        }
        let named = self.named_properties(&props, &required, &pats, ap, ptr)?;
        let ws = self.ws.clone();
        let mut items: Vec<(Expr, bool)> = Vec::new();
        for (k, v, p, req) in &named {
            match self.value(v, p, k)? {
                Some(val) => {
                    let kv = seq(vec![
                        lit(&Value::String(k.to_string()).to_string()),
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
        let names: Vec<String> = named.iter().map(|n| n.0.to_string()).collect();
        let extra = self.extra_members(&names, &pats, ap, ap_false, ptr, hint)?;
        let chain = match self.opts.property_order {
            PropertyOrder::Schema => {
                self.ordered_members(&items, extra.as_ref(), min_p, max_p, ptr, hint)?
            }
            PropertyOrder::Any => {
                self.any_order_members(&items, extra.as_ref(), min_p, max_p, ptr, hint)?
            }
        };
        let Some(chain) = chain else {
            return Ok(None);
        };
        let body = seq(vec![lit("{"), ws.clone(), chain, lit("}")]);
        Ok(Some(self.rule(&format!("{hint}-object"), body)))
    }

    /// The named properties, `(name, schema, pointer, required)`: `properties` in order,
    /// then required names not listed there (with the additional properties' schema); each
    /// merged with the `patternProperties` whose pattern its name matches.
    fn named_properties<'m>(
        &mut self,
        props: &Members<'m>,
        required: &'m [String],
        pats: &Members<'m>,
        ap: Option<&'m Value>,
        ptr: &str,
    ) -> Res<Vec<Named<'m>>> {
        let mut named: Vec<Named> = Vec::new();
        for &(k, v) in props {
            named.push((
                k,
                Cow::Borrowed(v),
                child(&child(ptr, "properties"), k),
                required.iter().any(|r| r == k),
            ));
        }
        for r in required {
            if !props.iter().any(|(k, _)| k == r) && !named.iter().any(|n| n.0 == r) {
                let s = ap.map_or(Cow::Owned(Value::Bool(true)), Cow::Borrowed);
                named.push((r, s, child(ptr, "required"), true));
            }
        }
        for (k, v, _, _) in named.iter_mut() {
            let mut matching = Vec::new();
            for &(p, s) in pats {
                if self.pattern_matches(p, k, ptr)? {
                    matching.push(s.clone());
                }
            }
            if !matching.is_empty() {
                let from_props = props.iter().any(|(pk, _)| pk == k);
                let mut all = if from_props {
                    vec![v.as_ref().clone()]
                } else {
                    Vec::new()
                };
                all.extend(matching);
                *v = Cow::Owned(if all.len() == 1 {
                    all.pop().expect("one")
                } else {
                    Value::Object(single("allOf", Value::Array(all)))
                });
            }
        }
        Ok(named)
    }

    /// Whether property name `name` matches pattern `p` (the pattern searched in the name).
    pub(super) fn pattern_matches(&mut self, p: &str, name: &str, ptr: &str) -> Res<bool> {
        Ok(self
            .pattern_dfa(p, ptr)?
            .is_some_and(|d| d.matches(name.as_bytes())))
    }

    pub(super) fn pattern_dfa(&mut self, p: &str, ptr: &str) -> Res<Option<&LexemeDfa>> {
        if !self.pattern_dfas.contains_key(p) {
            let dfa = match self.pattern_hir(p) {
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
    pub(super) fn extra_members(
        &mut self,
        names: &[String],
        pats: &Members,
        ap: Option<&Value>,
        ap_false: bool,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let mut alts = Vec::new();
        // Additional properties: keys that are neither named nor match a pattern. A pattern
        // refused (below, with its own members; lenient: deferred) leaves its keys here,
        // with any value, so that the grammar still accepts every valid object.
        let mut patterns = Vec::new();
        let mut refused = false;
        for (p, _) in pats {
            match self.pattern_hir(p) {
                Ok(h) => patterns.push(h),
                Err(_) => refused = true,
            }
        }
        if !ap_false || refused {
            let ap_schema = match ap {
                Some(s) if !refused => s.clone(),
                _ => Value::Bool(true),
            };
            alts.extend(self.additional_member(names, patterns, &ap_schema, ptr, hint)?);
        }
        // Keys matching a pattern, besides the named ones. (Every pattern's automaton
        // first: the checks compare them.)
        for (p, _) in pats {
            self.pattern_dfa(p, ptr)?;
        }
        for i in 0..pats.len() {
            alts.extend(self.pattern_member(names, pats, i, ptr, hint)?);
        }
        Ok(alt(alts))
    }

    /// `key: value` for additional properties (keys that are none of `names` and match
    /// none of `patterns`), or `None` if no value is valid.
    fn additional_member(
        &mut self,
        names: &[String],
        patterns: Vec<Hir>,
        ap_schema: &Value,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let Some(val) = self.value(
            ap_schema,
            &child(ptr, "additionalProperties"),
            &format!("{hint}-extra"),
        )?
        else {
            return Ok(None);
        };
        let key = if names.is_empty() && patterns.is_empty() {
            self.json_string()
        } else {
            let mut parts: Vec<Expr> = vec![self.plain_key()];
            parts.extend(self.name_keys(names).map(not));
            if let Some(p) = from_hir(&self.enc.encode(&Hir::alternation(patterns), Spelling::Any))
            {
                // Not matching any pattern, however its characters are escaped.
                parts.push(not(seq(vec![lit("\""), p, lit("\"")])));
            }
            self.rule(&format!("{hint}-other-key"), and(parts))
        };
        Ok(Some(self.member(key, val)))
    }

    /// `key: value` for keys matching pattern `i` of `pats` (not the named ones), or `None`.
    fn pattern_member(
        &mut self,
        names: &[String],
        pats: &Members,
        i: usize,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let (p, s) = pats[i];
        let hir = match self.pattern_hir(p) {
            Ok(h) => h,
            Err(e) => {
                self.unsupported("patternProperties", ptr, &format!("pattern '{p}': {e}"))?;
                return Ok(None);
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
        for &(q, _) in &pats[i + 1..] {
            let (Some(Some(a)), Some(Some(b))) =
                (self.pattern_dfas.get(p), self.pattern_dfas.get(q))
            else {
                continue;
            };
            if dfas_intersect(a, b, self.opts.max_overlap_pairs) {
                self.unsupported(
                    "patternProperties",
                    ptr,
                    &format!(
                        "patterns '{p}' and '{q}' overlap (a key matching both needs both schemas)"
                    ),
                )?;
            }
        }
        let pp = child(&child(ptr, "patternProperties"), p);
        let Some(val) = self.value(s, &pp, &format!("{hint}-pattern"))? else {
            return Ok(None);
        };
        let Some(body) = from_hir(&self.enc.encode(&hir, Spelling::Plain)) else {
            return Ok(None);
        };
        let mut key = seq(vec![lit("\""), body, lit("\"")]);
        if shadows_a_name && let Some(k) = self.name_keys(names) {
            key = and(vec![key, not(k)]);
        }
        let key = self.rule(&format!("{hint}-pattern-key"), key);
        Ok(Some(self.member(key, val)))
    }

    /// Any key, each string in its one plain spelling (how keys are matched).
    fn plain_key(&mut self) -> Expr {
        self.fixed_rule("json-plain-key", |c| {
            let ch = from_hir(&c.enc.encode(&any_char(), Spelling::Plain)).expect("non-empty");
            seq(vec![lit("\""), repeat(ch, 0, None), lit("\"")])
        })
    }

    /// The keys `names` (`None` if there are none), quoted, each in its plain spelling; with [`Self::plain_key`] and
    /// `~`, the keys that are none of them (the product of two small automata, where the
    /// complement of a set of strings written out as a regular expression grows with every
    /// name's every prefix).
    fn name_keys(&mut self, names: &[String]) -> Option<Expr> {
        let names = Hir::alternation(
            names
                .iter()
                .map(|n| Hir::literal(n.as_bytes().to_vec()))
                .collect(),
        );
        let body = from_hir(&self.enc.encode(&names, Spelling::Plain))?;
        Some(seq(vec![lit("\""), body, lit("\"")]))
    }

    /// `key ws ":" ws value`.
    fn member(&self, key: Expr, val: Expr) -> Expr {
        seq(vec![key, self.ws.clone(), lit(":"), self.ws.clone(), val])
    }

    /// Members in schema order: `S(i, c)` = the members from the i-th named property on,
    /// `c` members written so far (saturating where no bound needs the exact count).
    pub(super) fn ordered_members(
        &mut self,
        items: &[(Expr, bool)],
        extra: Option<&Expr>,
        min_p: u64,
        max_p: Option<u64>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
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
        let mut memo: FxHashMap<(usize, u64), Option<Expr>> = FxHashMap::default();
        // Built from the end, so every state's successors exist.
        for i in (0..=n).rev() {
            for c in (0..=cap).rev() {
                let e = if i == n {
                    self.extra_tail(extra, c, min_p, max_p)
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
                                seq(vec![sep.clone(), kv.clone()])
                            };
                            alts.push(seq(vec![head, next.clone()]));
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

    /// The end of the members in schema order, after `c` of them: the extra members, `r` of
    /// them with `min_p - c <= r <= max_p - c` (`None` if that cannot be).
    fn extra_tail(
        &self,
        extra: Option<&Expr>,
        c: u64,
        min_p: u64,
        max_p: Option<u64>,
    ) -> Option<Expr> {
        let r_lo = min_p.saturating_sub(c);
        let r_hi = max_p.map(|m| m.saturating_sub(c));
        if r_hi.is_some_and(|h| h < r_lo) {
            return None;
        }
        let nothing = || Some(if c == 0 { eps() } else { self.ws.clone() });
        let Some(x) = extra else {
            return if r_lo > 0 { None } else { nothing() };
        };
        if r_hi == Some(0) {
            return if r_lo > 0 { None } else { nothing() };
        }
        let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let more = seq(vec![self.sep(), x.clone()]);
        if c > 0 {
            return Some(seq(vec![
                repeat(more, to_u32(r_lo), r_hi.map(to_u32)),
                self.ws.clone(),
            ]));
        }
        let first = seq(vec![
            x.clone(),
            repeat(
                more,
                to_u32(r_lo.saturating_sub(1)),
                r_hi.map(|h| to_u32(h - 1)),
            ),
            self.ws.clone(),
        ]);
        Some(if r_lo == 0 {
            alt(vec![first, eps()]).expect("two")
        } else {
            first
        })
    }

    /// Members in any order, each named property at most once: the state is the set of
    /// properties written so far.
    pub(super) fn any_order_members(
        &mut self,
        items: &[(Expr, bool)],
        extra: Option<&Expr>,
        min_p: u64,
        max_p: Option<u64>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
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
        let mut memo: Vec<Option<Expr>> = vec![None; 1 << n];
        // States by decreasing set size, so successors are built first.
        let mut order: Vec<u32> = (0..1u32 << n).collect();
        order.sort_by_key(|s| std::cmp::Reverse(s.count_ones()));
        for &set in &order {
            let count = set.count_ones() as u64;
            let rule = self.fresh_name(&format!("{hint}-any-{set}"));
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
                        alts.push(seq(vec![sep.clone(), kv.clone(), next.clone()]));
                    }
                }
                if let Some(x) = extra {
                    alts.push(seq(vec![sep.clone(), x.clone(), name(&rule)]));
                }
            }
            if let Some(b) = alt(alts) {
                self.rules.push((rule.clone(), b));
                memo[set as usize] = Some(name(&rule));
            }
        }
        // The first member has no comma.
        let mut alts = Vec::new();
        if required == 0 && min_p == 0 {
            alts.push(eps());
        }
        for (i, (kv, _)) in items.iter().enumerate() {
            if let Some(next) = &memo[1 << i] {
                alts.push(seq(vec![kv.clone(), next.clone()]));
            }
        }
        if let Some(x) = extra
            && let Some(next) = &memo[0]
        {
            alts.push(seq(vec![x.clone(), next.clone()]));
        }
        Ok(alt(alts))
    }
}

/// The members of an object-valued keyword (`properties`, `patternProperties`), in order.
fn entries<'m>(m: &'m Map<String, Value>, ptr: &str, key: &str) -> Res<Vec<(&'m str, &'m Value)>> {
    match m.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Object(p)) => Ok(p.iter().map(|(k, v)| (k.as_str(), v)).collect()),
        Some(_) => Err(invalid(
            &child(ptr, key),
            format!("{key} must be an object"),
        )),
    }
}

/// The names `required` lists.
fn required_names(m: &Map<String, Value>, ptr: &str) -> Res<Vec<String>> {
    let bad = || {
        invalid(
            &child(ptr, "required"),
            "required must be an array of strings",
        )
    };
    match m.get("required") {
        None => Ok(Vec::new()),
        Some(Value::Array(r)) => r
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

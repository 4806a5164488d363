//! Strings: `pattern`, `format` and lengths intersected into one regular expression over the
//! JSON text.

use super::*;
use std::sync::Mutex;

impl Compiler<'_> {
    pub(super) fn string(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        hint: &str,
    ) -> Res<Option<Expr>> {
        let min = count(m, ptr, "minLength")?.unwrap_or(0);
        let max = count(m, ptr, "maxLength")?;
        if max.is_some_and(|max| max < min) {
            return Ok(None);
        }
        let (pattern, format) = self.pattern_and_format(m, ptr)?;
        // Lengths alone: one rule per pair of bounds (a schema's strings share a few), made
        // once rather than encoded and compared again for each.
        let lengths_alone = pattern.is_none() && format.is_none() && (min > 0 || max.is_some());
        if lengths_alone && let Some(rule) = self.length_strings.get(&(min, max)) {
            return Ok(Some(rule.clone()));
        }
        // The format's place among the parts while it stays as the format defines it (its
        // GBNF is then a constant of the process).
        let mut format_at = format.as_ref().map(|_| usize::from(pattern.is_some()));
        let format_name = m.get("format").and_then(Value::as_str).unwrap_or_default();
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
        // The states of a length counter, if the length is a part of its own (one state, for
        // `maxLength: 0`, still bounds the string).
        let mut counter = None;
        match parts.as_mut_slice() {
            [] if !bounded => return Ok(Some(self.json_string())),
            [] => parts.push(length()?),
            _ if !bounded => {}
            [one] => match restrict_length(one, min, max) {
                Restricted::To(h) => {
                    *one = h;
                    format_at = None;
                }
                Restricted::Nothing => return Ok(None),
                Restricted::NotOneRepetition => {
                    counter = Some(max.unwrap_or(min).saturating_add(1) as usize)
                }
            },
            _ => counter = Some(max.unwrap_or(min).saturating_add(1) as usize),
        }
        if parts.len() > 1 || counter.is_some() {
            let length = if counter.is_some() {
                Some(length()?)
            } else {
                None
            };
            // A format alone with a length: its product's size is a constant of the process.
            let format_alone = (parts.len() == 1 && format_at == Some(0)).then_some(format_name);
            let lengths = (min, max, counter.unwrap_or(1));
            self.refuse_large_product(&mut parts, lengths, length, ptr, format_alone)?;
        }
        let mut operands = Vec::with_capacity(parts.len());
        for (i, h) in parts.iter().enumerate() {
            let body = match format_at {
                Some(f) if f == i => formats::format_gbnf(format_name, Spelling::Any).cloned(),
                _ => from_hir(&self.enc.encode(h, Spelling::Any)),
            };
            let Some(body) = body else {
                return Ok(None);
            };
            operands.push(seq(vec![lit("\""), body, lit("\"")]));
        }
        let body = if operands.len() == 1 {
            operands.pop().expect("one")
        } else {
            and(operands)
        };
        let rule = self.rule(&format!("{hint}-string"), body);
        if lengths_alone {
            self.length_strings.insert((min, max), rule.clone());
        }
        Ok(Some(rule))
    }

    /// The regular expressions of `pattern` and `format`, where given and supported.
    fn pattern_and_format(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Res<(Option<Hir>, Option<Hir>)> {
        let mut pattern = None;
        if let Some(p) = m.get("pattern") {
            let p = p
                .as_str()
                .ok_or_else(|| invalid(&child(ptr, "pattern"), "pattern must be a string"))?;
            match self.pattern_hir(p) {
                Ok(h) => pattern = Some(h),
                Err(e) => self.unsupported("pattern", ptr, &e.to_string())?,
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
        Ok((pattern, format))
    }

    /// Checks that the intersection of `parts` (and of a length counter of `counter` states,
    /// appended as `length`) is small enough to build; if not, refuses it (lenient: defers
    /// the length or format, keeping only the first part).
    fn refuse_large_product(
        &mut self,
        parts: &mut Vec<Hir>,
        (min, max, counter): (u64, Option<u64>, usize),
        length: Option<Hir>,
        ptr: &str,
        format_alone: Option<&str>,
    ) -> Res<()> {
        // The product automaton has at most the product of the parts' states; where that
        // bound is over the limit, the states it can reach are counted (a format whose
        // own counters advance with the length counter reaches few of the pairs). For a
        // format alone the answer is a constant of the process, kept.
        type Memo = FxHashMap<(String, usize, usize), Option<usize>>;
        static FORMATS: Mutex<Option<Memo>> = Mutex::new(None);
        let limit = self.opts.max_product_states;
        let key = format_alone.map(|f| (f.to_string(), counter, limit));
        let memo = || FORMATS.lock().unwrap_or_else(|e| e.into_inner());
        let known = key
            .as_ref()
            .and_then(|k| memo().as_ref().and_then(|m| m.get(k).copied()));
        let states = match known {
            Some(n) => n,
            None => {
                let n = self.product_states(parts, counter, limit);
                if let Some(k) = key {
                    memo().get_or_insert_with(FxHashMap::default).insert(k, n);
                }
                n
            }
        };
        parts.extend(length);
        if states.is_none_or(|s| s > limit) {
            let bounded = min > 0 || max.is_some();
            let keyword = match (bounded, max) {
                (true, Some(_)) => "maxLength",
                (true, None) => "minLength",
                _ => "format",
            };
            self.unsupported(
                keyword,
                ptr,
                &format!(
                    "the intersection of this string's pattern, format and length has more than {} automaton states (max_product_states)",
                    self.opts.max_product_states
                ),
            )?;
            parts.truncate(1);
        }
        Ok(())
    }

    /// The states of the intersection of `parts` and a counter of `counter` states: the
    /// product of their numbers where that is within `limit`, else the states reachable
    /// (`None` past `limit`).
    fn product_states(&self, parts: &[Hir], counter: usize, limit: usize) -> Option<usize> {
        let bound = parts.iter().try_fold(counter, |acc, h| {
            self.dfa_states(h).map(|n| acc.saturating_mul(n.max(1)))
        })?;
        if bound <= limit {
            return Some(bound);
        }
        let dfas = parts
            .iter()
            .map(|h| {
                LexemeDfa::build_whole(
                    h,
                    self.opts.limits.max_lexeme_bytes,
                    self.opts.dfa_cache.as_ref(),
                )
                .ok()
            })
            .collect::<Option<Vec<_>>>()?;
        reachable_states(&dfas, counter, limit)
    }
}

/// Whether `a` and `b` (DFAs over the same bytes) accept a common string.
/// Past `max_pairs` explored state pairs, unsure: taken to intersect.
pub(super) fn dfas_intersect(a: &LexemeDfa, b: &LexemeDfa, max_pairs: usize) -> bool {
    let mut seen: FxHashSet<(StateId, StateId)> = FxHashSet::default();
    let mut stack = vec![(a.start(), b.start())];
    while let Some((x, y)) = stack.pop() {
        if x == DEAD || y == DEAD || !seen.insert((x, y)) {
            continue;
        }
        if x.is_accepting() && y.is_accepting() {
            return true;
        }
        if seen.len() > max_pairs {
            return true; // unsure: assume they overlap
        }
        for byte in 0..=255u8 {
            stack.push((a.next(x, byte), b.next(y, byte)));
        }
    }
    false
}

/// The states of the product of `dfas` and a counter of `counter` states (characters
/// counted as UTF-8 lead bytes; 1: no counter) that the start reaches, or `None` past
/// `limit`. Counted layer by layer (the tuples reached at each count): once a layer is the
/// one before it, so is every later one.
fn reachable_states(
    dfas: &[std::sync::Arc<LexemeDfa>],
    counter: usize,
    limit: usize,
) -> Option<usize> {
    type Tuple = Vec<StateId>;
    // One byte of each class of the product: bytes every DFA and the counter treat alike.
    let mut reps: Vec<u8> = Vec::new();
    let mut signatures: FxHashSet<Vec<u8>> = FxHashSet::default();
    for b in 0..=255u8 {
        let mut sig: Vec<u8> = dfas.iter().map(|d| d.class_of(b)).collect();
        sig.push(u8::from(b & 0xC0 == 0x80));
        if signatures.insert(sig) {
            reps.push(b);
        }
    }
    let counted = counter > 1;
    let lead = |b: u8| counted && b & 0xC0 != 0x80;
    let step = |t: &Tuple, b: u8| -> Option<Tuple> {
        let next: Tuple = dfas.iter().zip(t).map(|(d, &s)| d.next(s, b)).collect();
        (!next.contains(&DEAD)).then_some(next)
    };
    // The tuples reached from `from` by bytes that do not count, or `None` past `limit`.
    let close = |from: FxHashSet<Tuple>| -> Option<FxHashSet<Tuple>> {
        let mut seen = FxHashSet::default();
        let mut stack: Vec<Tuple> = from.into_iter().collect();
        while let Some(t) = stack.pop() {
            if !seen.insert(t.clone()) {
                continue;
            }
            if seen.len() > limit {
                return None;
            }
            stack.extend(
                reps.iter()
                    .filter(|&&b| !lead(b))
                    .filter_map(|&b| step(&t, b)),
            );
        }
        Some(seen)
    };
    let start: Tuple = dfas.iter().map(|d| d.start()).collect();
    if start.contains(&DEAD) {
        return Some(0);
    }
    let mut layer = close(FxHashSet::from_iter([start]))?;
    if !counted {
        return Some(layer.len());
    }
    let mut total = 0usize;
    for n in 0..counter {
        total += layer.len();
        if total > limit {
            return None;
        }
        if n + 1 == counter {
            break;
        }
        let next: FxHashSet<Tuple> = layer
            .iter()
            .flat_map(|t| {
                reps.iter()
                    .filter(|&&b| lead(b))
                    .filter_map(|&b| step(t, b))
            })
            .collect();
        let next = close(next)?;
        if next == layer {
            total = total.saturating_add(layer.len().saturating_mul(counter - 1 - n));
            return (total <= limit).then_some(total);
        }
        layer = next;
    }
    Some(total)
}

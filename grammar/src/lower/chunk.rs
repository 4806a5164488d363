//! Big repetitions of regular expressions cut into chunks: a lexeme of `k` copies repeated
//! by the Earley grammar (see [`chunking`]).

use super::*;

/// How a big repetition of a regular `x` (its expansion `inner_units × bound` over
/// [`BIG_REPEAT_UNITS`]) is lowered: a lexeme of `k` copies of `x` (a *chunk*) repeated by
/// the Earley grammar, and lexemes `x{0,t}` for the rest. `x{0,n}` with `n = k·q + r` is
/// `chunk{0,q} x{0,r} | chunk{0,q-1} x{r+1,k-1}` (the count's remainder mod `k` picks the
/// branch); a lower bound adds its remainder mod `k` to both last lexemes. Inside, the chunk's DFA states recur for every chunk, so their mask caches do
/// too. `None`: not big, one automaton as usual; and never for an `x` that matches the
/// empty string (chains of nullable chunks would make every prediction closure quadratic).
pub(super) fn chunking(
    inner_units: usize,
    inner_empty: bool,
    composed: bool,
    min: u32,
    max: Option<u32>,
) -> Option<u32> {
    let bound = max.unwrap_or(min).max(min) as usize;
    let (big, chunk) = if composed {
        (BIG_COMPOSED_UNITS, CHUNK_COMPOSED_UNITS)
    } else {
        (BIG_REPEAT_UNITS, CHUNK_UNITS)
    };
    if inner_empty || inner_units.saturating_mul(bound) <= big {
        return None;
    }
    Some((chunk / inner_units.max(1)).clamp(1, u32::MAX as usize) as u32)
}

impl<'a> Lowerer<'a> {
    /// The chunk size if `inner{min,max}` is a big repetition of a regular `inner`.
    pub(super) fn chunk_size(&self, inner: &Expr, min: u32, max: Option<u32>) -> Option<u32> {
        let key = (inner as *const Expr as usize, min, max);
        if let Some(&k) = self.chunks.borrow().get(&key) {
            return k;
        }
        let k = self.chunk_size_uncached(inner, min, max);
        self.chunks.borrow_mut().insert(key, k);
        k
    }

    pub(super) fn chunk_size_uncached(
        &self,
        inner: &Expr,
        min: u32,
        max: Option<u32>,
    ) -> Option<u32> {
        let empty = |j: usize| self.rule_empty[j];
        let iu = units(
            inner,
            self.index,
            self.regular,
            self.rule_units,
            &empty,
            usize::MAX,
        )
        .ok()?;
        let empty = matches_empty(inner, self.index, &empty);
        // Composed: a bounded count over a body whose automaton is prefix-free (asked only
        // where the answer matters: a repetition too big for one automaton otherwise).
        let big = iu.saturating_mul(max.unwrap_or(min).max(min) as usize) > BIG_REPEAT_UNITS;
        let composed = big && max.is_some() && !empty && {
            let hir = hir_of(inner, self.index, self.rule_hir);
            let limit = self.b.limits().max_lexeme_bytes;
            self.b
                .cached_dfa(&format!("#t {}", crate::lexeme::regex_key(&hir)), || {
                    LexemeDfa::build_tables(&hir, limit)
                })
                .is_ok_and(|d| d.composable_body())
        };
        chunking(iu, empty, composed, min, max)
    }

    /// A big repetition of a regular `inner`, in chunks (see [`chunking`]), followed by the
    /// regular items `after`, which end its last lexeme.
    pub(super) fn lower_chunked(
        &mut self,
        lhs: RuleId,
        e: &Expr,
        inner: &Expr,
        (min, max, k): (u32, Option<u32>, u32),
        after: &[&Expr],
        out: &mut Vec<Sym>,
    ) -> LowerResult<()> {
        let x = hir_of(inner, self.index, self.rule_hir);
        let display = self.shown(&[inner]);
        let tail_hir: Vec<Hir> = after
            .iter()
            .map(|a| hir_of(a, self.index, self.rule_hir))
            .collect();
        let tail_display = if after.is_empty() {
            String::new()
        } else {
            format!(" {}", self.shown(after))
        };
        // `x{lo,hi}`, then the items after when `last`.
        let lexeme =
            |lw: &mut Self, lo: u32, hi: Option<u32>, last: bool| -> LowerResult<Option<Sym>> {
                let mut parts = vec![Hir::repetition(Repetition {
                    min: lo,
                    max: hi,
                    greedy: true,
                    sub: Box::new(x.clone()),
                })];
                let mut shown = match hi {
                    Some(h) if h == lo => format!("({display}){{{lo}}}"),
                    Some(h) => format!("({display}){{{lo},{h}}}"),
                    None => format!("({display}){{{lo},}}"),
                };
                if last {
                    parts.extend(tail_hir.iter().cloned());
                    shown.push_str(&tail_display);
                }
                let h = Hir::concat(parts);
                let p = h.properties();
                if p.maximum_len() == Some(0) {
                    return Ok(None);
                }
                lw.b.lexeme(h, || shown)
                    .map(|id| Some(Sym::Lexeme(id)))
                    .map_err(|kind| (kind, e.span))
            };
        let chunk = lexeme(self, k, Some(k), false)?.expect("a chunk is not empty");
        for _ in 0..min / k {
            out.push(chunk);
        }
        // The lower bound's remainder goes into the last lexeme (`x{m} x{a,b}` is
        // `x{m+a,m+b}`): a lexeme of exactly `m` copies would end after `m`, and the
        // token sets of its states (each a step nearer that end) could not be sliced.
        let m = min % k;
        let Some(rest) = max.map(|n| n - min) else {
            out.extend(lexeme(self, m, None, true)?);
            return Ok(());
        };
        if rest == 0 {
            out.extend(lexeme(self, m, Some(m), true)?);
            return Ok(());
        }
        let (q, r) = (rest / k, rest % k);
        // Chains of up to j optional chunks, shared by both branches.
        let mut chains: Vec<Option<RuleId>> = vec![None];
        for j in 1..=q {
            let c = self.anon_rule(lhs);
            let mut body = vec![chunk];
            if let Some(prev) = chains[j as usize - 1] {
                body.push(Sym::Rule(prev));
            }
            self.b
                .add_production(c, body)
                .and_then(|()| self.b.add_production(c, vec![]))
                .map_err(|kind| (kind, e.span))?;
            chains.push(Some(c));
        }
        let alt_rule = self.anon_rule(lhs);
        let mut first: Vec<Sym> = chains[q as usize].map(Sym::Rule).into_iter().collect();
        first.extend(lexeme(self, m, Some(m + r), true)?);
        self.b
            .add_production(alt_rule, first)
            .map_err(|kind| (kind, e.span))?;
        if q > 0 && r + 1 < k {
            let mut second: Vec<Sym> = chains[q as usize - 1].map(Sym::Rule).into_iter().collect();
            second.extend(lexeme(self, m + r + 1, Some(m + k - 1), true)?);
            self.b
                .add_production(alt_rule, second)
                .map_err(|kind| (kind, e.span))?;
        }
        out.push(Sym::Rule(alt_rule));
        Ok(())
    }
}

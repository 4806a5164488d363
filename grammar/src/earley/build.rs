//! Building an Earley set: scan, prediction, completion with Leo items, and the share cache
//! that lets a set repeat the items of an earlier one built from the same completion.

use super::*;

impl Chart {
    pub(super) fn begin_set(&mut self, g: &Grammar) {
        let s = &mut self.s;
        s.stamp = s.stamp.wrapping_add(1);
        if s.stamp == 0 {
            // Stamps wrapped: clear them once every 2^32 sets.
            s.dot_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.rule_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.lex_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.count_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.stamp = 1;
        }
        if s.dot_stamp.len() < g.dot_next.len() {
            s.dot_stamp.resize(g.dot_next.len(), u32::MAX);
        }
        if s.rule_stamp.len() < g.rule_names.len() {
            s.rule_stamp.resize(g.rule_names.len(), u32::MAX);
            s.count_stamp.resize(g.rule_names.len(), u32::MAX);
            s.count.resize(g.rule_names.len(), 0);
            s.last.resize(g.rule_names.len(), 0);
        }
        if s.lex_stamp.len() < g.lexemes.len() {
            s.lex_stamp.resize(g.lexemes.len(), u32::MAX);
        }
        s.concrete.clear();
        s.concrete_list.clear();
        s.lexemes.clear();
    }

    /// Adds the prediction closure of `rule` to the set being built.
    pub(super) fn predict(&mut self, g: &Grammar, rule: RuleId, tokens: &mut bool) {
        let s = &mut self.s;
        if s.rule_stamp[rule.0 as usize] == s.stamp {
            return;
        }
        s.rule_stamp[rule.0 as usize] = s.stamp;
        let (dots, lexemes, expects_token) = g.predictions.of(rule);
        for &d in dots {
            if s.dot_stamp[d.0 as usize] != s.stamp {
                s.dot_stamp[d.0 as usize] = s.stamp;
                self.items.push(Item {
                    dot: d,
                    origin: Origin::SELF,
                });
            }
        }
        for &l in lexemes {
            if s.lex_stamp[l.0 as usize] != s.stamp {
                s.lex_stamp[l.0 as usize] = s.stamp;
                s.lexemes.push(l);
            }
        }
        *tokens |= expects_token;
    }

    #[inline]
    pub(super) fn add_concrete(&mut self, dot: DotId, origin: SetIdx) {
        const SMALL: usize = 24;
        let key = (dot.0, origin);
        let s = &mut self.s;
        if s.concrete_list.len() < SMALL {
            if s.concrete_list.contains(&key) {
                return;
            }
            s.concrete_list.push(key);
            if s.concrete_list.len() == SMALL {
                s.concrete.extend(s.concrete_list.iter().copied());
            }
        } else if !s.concrete.insert(key) {
            return;
        }
        self.items.push(Item {
            dot,
            origin: Origin::at(origin),
        });
    }

    pub(super) fn leo_lookup(&self, set: SetIdx, sym: RuleId) -> Option<Leo> {
        let (a, b) = self.sets[set.index()].leo;
        let slice = &self.leo[a as usize..b as usize];
        slice
            .binary_search_by_key(&sym, |l| l.sym)
            .ok()
            .map(|i| slice[i])
    }

    /// Builds a new Earley set from the completions in `self.s.events` (and the token
    /// reference items of `unit`, if any). Returns false if nothing was scanned.
    pub(super) fn build_set(
        &mut self,
        g: &Grammar,
        unit: Option<(SetIdx, &dyn Fn(TokenRefId) -> bool)>,
        pos: u64,
    ) -> Result<bool, RecognizeError> {
        if unit.is_some() || self.s.events.len() != 1 {
            return self.build_set_uncached(g, unit, pos);
        }
        let (j, lex) = self.s.events[0];
        let from_uid = self.sets[j.index()].uid;
        let slot_ix = share_slot(from_uid, lex);
        let slot = self.share[slot_ix];
        if slot.from_uid == from_uid
            && slot.lexeme == lex.0
            && slot.set.index() < self.sets.len()
            && self.sets[slot.set.index()].uid == slot.set_uid
        {
            // Same completion as an earlier set that is still alive: share its contents,
            // and its uid (what follows either goes alike).
            let src = self.sets[slot.set.index()];
            let idx = SetIdx::new(self.sets.len());
            if src.lexemes.1 > src.lexemes.0 {
                self.runs.push(Run::pending(idx));
            }
            self.sets.push(SetInfo {
                owns: false,
                pos,
                ..src
            });
            return Ok(true);
        }
        if !self.build_set_uncached(g, None, pos)? {
            return Ok(false);
        }
        let built = self.sets.len() - 1;
        self.sets[built].source = (from_uid, lex);
        self.share[slot_ix] = ShareSlot {
            from_uid,
            lexeme: lex.0,
            set: SetIdx::new(built),
            set_uid: self.sets[built].uid,
        };
        Ok(true)
    }

    pub(super) fn build_set_uncached(
        &mut self,
        g: &Grammar,
        unit: Option<(SetIdx, &dyn Fn(TokenRefId) -> bool)>,
        pos: u64,
    ) -> Result<bool, RecognizeError> {
        let items_start = self.items.len();
        let leo_start = self.leo.len();
        self.begin_set(g);
        // Items visited, against `max_work_per_push`: highly ambiguous grammars make every
        // lexeme end complete many items from many sets.
        let mut work = self.scan(g, unit);
        if self.items.len() == items_start {
            return Ok(false);
        }
        // Close: only items with a concrete origin need work; predicted items come with
        // their whole closure.
        let mut accepting = false;
        let mut tokens = false;
        let mut k = items_start;
        while k < self.items.len() {
            let it = self.items[k];
            k += 1;
            // Items predicted here complete nothing yet and are already closed.
            let Some(origin) = it.origin.set() else {
                continue;
            };
            match g.next(it.dot) {
                AfterDot::End => {
                    let lhs = g.lhs(it.dot);
                    let o = origin;
                    if it.dot == g.accept_dot && o == SetIdx::FIRST {
                        accepting = true;
                    }
                    if let Some(l) = self.leo_lookup(o, lhs) {
                        let origin = l.origin.in_set(o);
                        self.add_concrete(l.dot, origin);
                    } else {
                        let (a, b) = self.sets[o.index()].items;
                        work += (b - a) as usize;
                        for q in a..b {
                            let p = self.items[q as usize];
                            if g.next(p.dot) == AfterDot::Sym(Sym::Rule(lhs)) {
                                let origin = p.origin.in_set(o);
                                self.add_concrete(DotId(p.dot.0 + 1), origin);
                            }
                        }
                    }
                }
                AfterDot::Sym(Sym::Rule(b)) => {
                    self.predict(g, b, &mut tokens);
                    if g.nullable[b.0 as usize] {
                        self.add_concrete(DotId(it.dot.0 + 1), origin);
                    }
                }
                AfterDot::Sym(Sym::Lexeme(l)) => {
                    let s = &mut self.s;
                    if s.lex_stamp[l.0 as usize] != s.stamp {
                        s.lex_stamp[l.0 as usize] = s.stamp;
                        s.lexemes.push(l);
                    }
                    if g.lexemes[l.0 as usize].nullable {
                        self.add_concrete(DotId(it.dot.0 + 1), origin);
                    }
                }
                AfterDot::Sym(Sym::Token(_)) => tokens = true,
            }
            work += 1;
            let items = self.items.len() - items_start;
            if items > g.limits.max_items_per_set || work > g.limits.max_work_per_push {
                self.items.truncate(items_start);
                self.leo.truncate(leo_start);
                return Err(set_limit_error(g, work, items));
            }
        }
        self.finish_set(g, items_start, accepting, tokens, pos);
        Ok(true)
    }

    /// Scan: the items waiting for the completed lexemes (and for the token reference
    /// `unit`, in its set) move over them into the new set. Returns the items visited.
    #[inline]
    pub(super) fn scan(
        &mut self,
        g: &Grammar,
        unit: Option<(SetIdx, &dyn Fn(TokenRefId) -> bool)>,
    ) -> usize {
        let mut work = 0;
        for e in 0..self.s.events.len() {
            let (j, lex) = self.s.events[e];
            let (a, b) = self.sets[j.index()].items;
            work += (b - a) as usize;
            for k in a..b {
                let it = self.items[k as usize];
                if g.next(it.dot) == AfterDot::Sym(Sym::Lexeme(lex)) {
                    let origin = it.origin.in_set(j);
                    self.add_concrete(DotId(it.dot.0 + 1), origin);
                }
            }
        }
        if let Some((u, matches)) = unit {
            let (a, b) = self.sets[u.index()].items;
            for k in a..b {
                let it = self.items[k as usize];
                if let AfterDot::Sym(Sym::Token(t)) = g.next(it.dot)
                    && matches(t)
                {
                    let origin = it.origin.in_set(u);
                    self.add_concrete(DotId(it.dot.0 + 1), origin);
                }
            }
        }
        work
    }

    /// Computes the new set's Leo items, records it, and starts its lexer runs.
    pub(super) fn finish_set(
        &mut self,
        g: &Grammar,
        items_start: usize,
        accepting: bool,
        tokens: bool,
        pos: u64,
    ) {
        let idx = SetIdx::new(self.sets.len());
        let leo_start = self.leo.len();
        let s = &mut self.s;
        // Leo: symbols with exactly one waiting item, which is penultimate.
        let stamp = s.stamp;
        for k in items_start..self.items.len() {
            if let AfterDot::Sym(Sym::Rule(b)) = g.next(self.items[k].dot) {
                let b = b.0 as usize;
                if s.count_stamp[b] != stamp {
                    s.count_stamp[b] = stamp;
                    s.count[b] = 1;
                    s.last[b] = k as u32;
                } else {
                    s.count[b] += 1;
                }
            }
        }
        for k in items_start..self.items.len() {
            let it = self.items[k];
            if let AfterDot::Sym(Sym::Rule(b)) = g.next(it.dot)
                && s.count[b.0 as usize] == 1
                && s.last[b.0 as usize] == k as u32
                && g.dot_penult[it.dot.0 as usize]
            {
                let after = DotId(it.dot.0 + 1);
                let (dot, origin) = match it.origin.set() {
                    None => (after, Origin::SELF),
                    Some(o) => {
                        let lhs = g.lhs(it.dot);
                        let (a, bnd) = self.sets[o.index()].leo;
                        let slice = &self.leo[a as usize..bnd as usize];
                        match slice.binary_search_by_key(&lhs, |l| l.sym) {
                            Ok(i) => (slice[i].dot, Origin::at(slice[i].origin.in_set(o))),
                            Err(_) => (after, it.origin),
                        }
                    }
                };
                self.leo.push(Leo {
                    sym: b,
                    dot,
                    origin,
                });
            }
        }
        self.leo[leo_start..].sort_unstable_by_key(|l| l.sym);
        let lex_start = self.set_lex.len();
        let mut first = [0u64; 4];
        for &l in &s.lexemes {
            self.set_lex.push(l);
            let f = g.lexemes[l.0 as usize].dfa().first_bytes();
            for w in 0..4 {
                first[w] |= f[w];
            }
        }
        if !s.lexemes.is_empty() {
            self.runs.push(Run::pending(idx));
        }
        self.next_uid += 1;
        self.sets.push(SetInfo {
            items: (items_start as u32, self.items.len() as u32),
            leo: (leo_start as u32, self.leo.len() as u32),
            lexemes: (lex_start as u32, self.set_lex.len() as u32),
            first,
            pos,
            owns: true,
            source: (u64::MAX, LexemeId(0)),
            uid: self.next_uid,
            accepting,
            tokens,
        });
    }
}

/// The share-cache slot of a completion.
#[inline]
fn share_slot(from_uid: u64, lexeme: LexemeId) -> usize {
    let h = from_uid
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(lexeme.0).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    (h >> 40) as usize % SHARE_SLOTS
}

/// The limit a set being built broke: the work of one byte first, else its size.
#[cold]
fn set_limit_error(g: &Grammar, work: usize, items: usize) -> RecognizeError {
    let l = &g.limits;
    if work > l.max_work_per_push {
        let what = "Earley items visited for one byte";
        RecognizeError::limit(what, work, "max_work_per_push", l.max_work_per_push)
    } else {
        let what = "Earley items in one set";
        RecognizeError::limit(what, items, "max_items_per_set", l.max_items_per_set)
    }
}

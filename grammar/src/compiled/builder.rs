//! [`GrammarBuilder`]: rules, productions and lexemes in; a [`Grammar`] with its dot tables,
//! nullable rules and prediction closures out.

use super::*;

/// Builds a [`Grammar`] from rules, productions and lexemes. Front ends (GBNF, JSON Schema,
/// regex) all go through it.
#[derive(Debug)]
pub struct GrammarBuilder {
    limits: Limits,
    cache: Option<DfaCache>,
    rule_names: Vec<String>,
    prods: Vec<(RuleId, Vec<Sym>)>,
    lexemes: Vec<Lexeme>,
    lexeme_index: FxHashMap<Arc<str>, LexemeId>,
    token_refs: Vec<TokenAst>,
    token_index: FxHashMap<TokenAst, TokenRefId>,
    size: usize,
}

impl GrammarBuilder {
    /// An empty builder under `limits`, with an unbounded DFA cache of its own (see
    /// [`with_cache`](Self::with_cache)).
    pub fn new(limits: Limits) -> GrammarBuilder {
        GrammarBuilder {
            limits,
            cache: Some(DfaCache::new(usize::MAX)),
            rule_names: Vec::new(),
            prods: Vec::new(),
            lexemes: Vec::new(),
            lexeme_index: FxHashMap::default(),
            token_refs: Vec::new(),
            token_index: FxHashMap::default(),
            size: 0,
        }
    }

    /// Builds lexeme DFAs through `cache` (shared with other compiles). Without one, a
    /// cache of this compile's own shares the pieces its lexemes have in common.
    pub fn with_cache(mut self, cache: Option<DfaCache>) -> GrammarBuilder {
        self.cache = Some(cache.unwrap_or_else(|| DfaCache::new(usize::MAX)));
        self
    }

    /// The DFA named `key` through this builder's cache, or `build`'s.
    pub fn cached_dfa(
        &self,
        key: &str,
        build: impl FnOnce() -> Result<LexemeDfa, ErrorKind>,
    ) -> Result<Arc<LexemeDfa>, ErrorKind> {
        crate::dfa_cache::build_with(
            self.cache.as_ref(),
            key,
            self.limits.max_lexeme_bytes,
            build,
        )
    }

    /// The limits this builder compiles under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A new rule with no productions yet.
    pub fn add_rule(&mut self, name: impl Into<String>) -> RuleId {
        self.rule_names.push(name.into());
        RuleId(self.rule_names.len() as u32 - 1)
    }

    /// The name rule `id` was added with; panics for an id this builder did not make.
    pub fn rule_name(&self, id: RuleId) -> &str {
        &self.rule_names[id.0 as usize]
    }

    /// Adds `lhs -> syms`.
    pub fn add_production(&mut self, lhs: RuleId, syms: Vec<Sym>) -> Result<(), ErrorKind> {
        self.size += syms.len() + 1;
        if self.size > self.limits.max_grammar_size {
            return Err(ErrorKind::Limit {
                what: "the grammar's size (symbols in all productions)".into(),
                value: self.size,
                limit_name: "max_grammar_size",
                limit: self.limits.max_grammar_size,
            });
        }
        self.prods.push((lhs, syms));
        Ok(())
    }

    /// The lexeme for `hir`, compiled once per distinct regular expression; `display` names
    /// it for messages (asked only for a new lexeme: most of a machine-written grammar's
    /// runs repeat one already made).
    pub fn lexeme(
        &mut self,
        hir: Hir,
        display: impl FnOnce() -> String,
    ) -> Result<LexemeId, ErrorKind> {
        let key = crate::lexeme::regex_key(&hir);
        if let Some(&id) = self.lexeme_index.get(key.as_str()) {
            return Ok(id);
        }
        let p = hir.properties();
        let (nullable, empty) = (p.minimum_len() == Some(0), p.minimum_len().is_none());
        let id = LexemeId(self.lexemes.len() as u32);
        let key: Arc<str> = Arc::from(key);
        self.lexemes.push(Lexeme {
            dfa: DeferredDfa {
                cell: OnceLock::new(),
                source: Mutex::new(Some((
                    hir,
                    self.limits.max_lexeme_bytes,
                    self.cache.clone(),
                    key.clone(),
                ))),
                error: OnceLock::new(),
            },
            key: key.clone(),
            nullable,
            empty,
            display: display(),
        });
        self.lexeme_index.insert(key, id);
        Ok(id)
    }

    /// The lexeme named `key` (a [`crate::regex_key`], or a combination of them), its DFA
    /// from `build` the first time.
    pub fn lexeme_with(
        &mut self,
        key: &str,
        display: &str,
        nullable: bool,
        build: impl FnOnce() -> Result<Arc<LexemeDfa>, ErrorKind>,
    ) -> Result<LexemeId, ErrorKind> {
        if let Some(&id) = self.lexeme_index.get(key) {
            return Ok(id);
        }
        let dfa = build()?;
        let id = LexemeId(self.lexemes.len() as u32);
        self.lexemes.push(Lexeme {
            empty: dfa.start() == DEAD,
            dfa: DeferredDfa::built(dfa),
            key: Arc::from(key),
            nullable,
            display: display.to_string(),
        });
        self.lexeme_index.insert(Arc::from(key), id);
        Ok(id)
    }

    /// The terminal for a token reference.
    pub fn token_ref(&mut self, t: &TokenAst) -> TokenRefId {
        if let Some(&id) = self.token_index.get(t) {
            return id;
        }
        let id = TokenRefId(self.token_refs.len() as u32);
        self.token_refs.push(t.clone());
        self.token_index.insert(t.clone(), id);
        id
    }

    /// Finishes the grammar with `start` as its start rule. Unproductive productions are
    /// dropped; an unproductive start rule is [`ErrorKind::EmptyLanguage`].
    pub fn build(mut self, start: RuleId) -> Result<Grammar, ErrorKind> {
        let start_rule = self.add_rule(format!("{}'", self.rule_names[start.0 as usize]));
        self.prods.push((start_rule, vec![Sym::Rule(start)]));
        let n_rules = self.rule_names.len();

        // Productive symbols.
        let lexeme_ok: Vec<bool> = self
            .lexemes
            .iter()
            .map(|l| !l.empty || l.nullable)
            .collect();
        let productive = rule_fixpoint(&self.prods, n_rules, |s| match s {
            Sym::Lexeme(l) => lexeme_ok[l.0 as usize],
            _ => true,
        });
        if !productive[start.0 as usize] {
            return Err(ErrorKind::EmptyLanguage(
                self.rule_names[start.0 as usize].clone(),
            ));
        }
        let sym_ok = |s: &Sym| match s {
            Sym::Rule(r) => productive[r.0 as usize],
            Sym::Lexeme(l) => lexeme_ok[l.0 as usize],
            Sym::Token(_) => true,
        };
        let prods: Vec<(RuleId, Vec<Sym>)> = std::mem::take(&mut self.prods)
            .into_iter()
            .filter(|(lhs, syms)| productive[lhs.0 as usize] && syms.iter().all(sym_ok))
            .collect();

        let lex_nullable: Vec<bool> = self.lexemes.iter().map(|l| l.nullable).collect();
        let nullable = rule_fixpoint(&prods, n_rules, |s| match s {
            Sym::Lexeme(l) => lex_nullable[l.0 as usize],
            _ => false,
        });
        let dots = Dots::of(&prods, n_rules, start_rule);
        let predictions = dots.predictions(&nullable, &lex_nullable, &self.limits)?;
        Ok(Grammar {
            rule_names: self.rule_names,
            nullable,
            dot_next: dots.next,
            dot_lhs: dots.lhs,
            dot_penult: dots.penult,
            predictions,
            lexemes: self.lexemes,
            token_refs: self.token_refs,
            start_rule,
            accept_dot: dots.accept,
            limits: self.limits,
            productions: prods.len(),
            shortest: std::sync::OnceLock::new(),
        })
    }
}

/// The least set of rules with a production whose every symbol is a rule of the set or a
/// symbol `terminal` passes: productive rules, nullable rules. Worklist-driven, linear in
/// the grammar's size: each production counts the rule symbols it still waits for, and a
/// rule found decrements the productions that use it.
fn rule_fixpoint(
    prods: &[(RuleId, Vec<Sym>)],
    n_rules: usize,
    terminal: impl Fn(&Sym) -> bool,
) -> Vec<bool> {
    // Productions with a symbol that is neither a rule nor passes `terminal` never fire.
    let viable: Vec<bool> = prods
        .iter()
        .map(|(_, syms)| {
            syms.iter()
                .all(|s| matches!(s, Sym::Rule(_)) || terminal(s))
        })
        .collect();
    // The viable productions each rule occurs in (once per occurrence), in CSR form.
    let mut first = vec![0u32; n_rules + 1];
    for ((_, syms), _) in prods.iter().zip(&viable).filter(|(_, v)| **v) {
        for s in syms {
            if let Sym::Rule(r) = s {
                first[r.0 as usize + 1] += 1;
            }
        }
    }
    for i in 1..=n_rules {
        first[i] += first[i - 1];
    }
    let mut fill = first.clone();
    let mut uses = vec![0u32; first[n_rules] as usize];
    let mut waiting = vec![0u32; prods.len()];
    let mut found = vec![false; n_rules];
    let mut work: Vec<usize> = Vec::new();
    for (p, (lhs, syms)) in prods.iter().enumerate() {
        if !viable[p] {
            continue;
        }
        for s in syms {
            if let Sym::Rule(r) = s {
                uses[fill[r.0 as usize] as usize] = p as u32;
                fill[r.0 as usize] += 1;
                waiting[p] += 1;
            }
        }
        if waiting[p] == 0 && !found[lhs.0 as usize] {
            found[lhs.0 as usize] = true;
            work.push(lhs.0 as usize);
        }
    }
    while let Some(r) = work.pop() {
        for &p in &uses[first[r] as usize..first[r + 1] as usize] {
            let p = p as usize;
            waiting[p] -= 1;
            let lhs = prods[p].0.0 as usize;
            if waiting[p] == 0 && !found[lhs] {
                found[lhs] = true;
                work.push(lhs);
            }
        }
    }
    found
}

/// The dotted productions, numbered production by production: each symbol's dot, then the
/// production's end.
struct Dots {
    next: Vec<AfterDot>,
    lhs: Vec<RuleId>,
    /// The dot before a production's last symbol.
    penult: Vec<bool>,
    /// Each rule's productions' first dots.
    first: Vec<Vec<DotId>>,
    /// The end of the start production.
    accept: DotId,
}

impl Dots {
    fn of(prods: &[(RuleId, Vec<Sym>)], n_rules: usize, start_rule: RuleId) -> Dots {
        let n_dots: usize = prods.iter().map(|(_, syms)| syms.len() + 1).sum();
        let mut d = Dots {
            next: Vec::with_capacity(n_dots),
            lhs: Vec::with_capacity(n_dots),
            penult: Vec::with_capacity(n_dots),
            first: vec![Vec::new(); n_rules],
            accept: DotId(0),
        };
        for (lhs, syms) in prods {
            d.first[lhs.0 as usize].push(DotId(d.next.len() as u32));
            for (k, s) in syms.iter().enumerate() {
                d.next.push(AfterDot::Sym(*s));
                d.lhs.push(*lhs);
                d.penult.push(k + 1 == syms.len());
            }
            if *lhs == start_rule {
                d.accept = DotId(d.next.len() as u32);
            }
            d.next.push(AfterDot::End);
            d.lhs.push(*lhs);
            d.penult.push(false);
        }
        d
    }

    /// Each rule's prediction closure: the dots predicting it reaches (through nullable
    /// symbols), the lexemes they expect, whether any expects a token reference. Over
    /// `Limits::max_prediction_items` dots in all is an error.
    fn predictions(
        &self,
        nullable: &[bool],
        lex_nullable: &[bool],
        limits: &Limits,
    ) -> Result<Predictions, ErrorKind> {
        let n_rules = self.first.len();
        let mut p = Predictions {
            dots: Vec::new(),
            dot_at: Vec::with_capacity(n_rules + 1),
            lexemes: Vec::new(),
            lexeme_at: Vec::with_capacity(n_rules + 1),
            tokens: Vec::with_capacity(n_rules),
        };
        let mut seen_rule = vec![u32::MAX; n_rules];
        let mut seen_lex = vec![u32::MAX; lex_nullable.len()];
        let mut stack = Vec::new();
        let too_many = |value: usize| ErrorKind::Limit {
            what: "the size of the grammar's prediction closures".into(),
            value,
            limit_name: "max_prediction_items",
            limit: limits.max_prediction_items,
        };
        for r in 0..n_rules {
            let stamp = r as u32;
            // Offsets are u32: the limit keeps the tables far below that.
            p.dot_at.push(p.dots.len() as u32);
            p.lexeme_at.push(p.lexemes.len() as u32);
            let mut tokens = false;
            stack.push(r);
            seen_rule[r] = stamp;
            while let Some(rule) = stack.pop() {
                for &first in &self.first[rule] {
                    let mut d = first;
                    loop {
                        p.dots.push(d);
                        let go_on = match self.next[d.0 as usize] {
                            AfterDot::End => false,
                            AfterDot::Sym(Sym::Rule(c)) => {
                                if seen_rule[c.0 as usize] != stamp {
                                    seen_rule[c.0 as usize] = stamp;
                                    stack.push(c.0 as usize);
                                }
                                nullable[c.0 as usize]
                            }
                            AfterDot::Sym(Sym::Lexeme(l)) => {
                                if seen_lex[l.0 as usize] != stamp {
                                    seen_lex[l.0 as usize] = stamp;
                                    p.lexemes.push(l);
                                }
                                lex_nullable[l.0 as usize]
                            }
                            AfterDot::Sym(Sym::Token(_)) => {
                                tokens = true;
                                false
                            }
                        };
                        if !go_on {
                            break;
                        }
                        d = DotId(d.0 + 1);
                    }
                }
                if p.dots.len() > limits.max_prediction_items {
                    return Err(too_many(p.dots.len()));
                }
            }
            p.tokens.push(tokens);
        }
        p.dot_at.push(p.dots.len() as u32);
        p.lexeme_at.push(p.lexemes.len() as u32);
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain `r0 -> r1 | "a"`, `r1 -> r2 | "a"`, ...: predicting `r0` reaches every rule,
    /// so the closures hold about n² dots in all.
    fn chain(n: usize, limits: Limits) -> Result<Grammar, ErrorKind> {
        let mut b = GrammarBuilder::new(limits);
        let a = b
            .lexeme(regex_syntax::hir::Hir::literal(*b"a"), || "\"a\"".into())
            .unwrap();
        let rules: Vec<RuleId> = (0..n).map(|i| b.add_rule(format!("r{i}"))).collect();
        for w in rules.windows(2) {
            b.add_production(w[0], vec![Sym::Rule(w[1])]).unwrap();
            b.add_production(w[0], vec![Sym::Lexeme(a)]).unwrap();
        }
        b.add_production(rules[n - 1], vec![Sym::Lexeme(a)])
            .unwrap();
        b.build(rules[0])
    }

    #[test]
    fn prediction_closures_are_each_rules_reach_and_bounded_in_all() {
        let g = chain(4, Limits::default()).unwrap();
        // r0 reaches r1, r2, r3: seven productions' first dots, and the one lexeme.
        let (dots, lexemes, tokens) = g.predictions.of(RuleId(0));
        assert_eq!(dots.len(), 7);
        assert_eq!(lexemes.len(), 1);
        assert!(!tokens);
        let (dots, _, _) = g.predictions.of(RuleId(3));
        assert_eq!(dots.len(), 1);
        // The start rule r0' reaches r0 and the rest.
        let (dots, _, _) = g.predictions.of(g.start_rule);
        assert_eq!(dots.len(), 8);

        let limits = Limits {
            max_prediction_items: 1_000,
            ..Limits::default()
        };
        assert!(chain(20, limits.clone()).is_ok());
        match chain(40, limits) {
            Err(ErrorKind::Limit {
                limit_name, value, ..
            }) => {
                assert_eq!(limit_name, "max_prediction_items");
                assert!(value > 1_000);
            }
            other => panic!("expected the prediction limit, got {other:?}"),
        }
    }
}

//! Lowering: rules as written ([`RuleAst`]) -> the compiled [`Grammar`].
//!
//! 1. Resolve names: duplicate definitions, undefined references and a missing start rule
//!    are positioned errors.
//! 2. Find the *regular* rules: those that reach no recursion and no token reference. Their
//!    language is regular, so they can be inlined into lexemes. (Rules too deep to inline
//!    safely are treated as non-regular instead.)
//! 3. Check sizes: every expression's expansion (repetitions multiplied out, regular rules
//!    inlined) must fit `Limits::max_grammar_size`.
//! 4. Lower the non-regular rules reachable from the start rule into productions. In each
//!    sequence, every maximal run of consecutive regular items becomes one lexeme (one DFA).
//!    Repetitions of non-regular items are desugared: `x*` into a left-recursive rule
//!    (`R -> R x | ε`, linear for Earley without Leo items), `x{m,n}` into `m` copies and a
//!    bounded chain of optional rules.
//!
//! GBNF is scannerless, so this split must not change the language: the recognizer keeps
//! both branches alive wherever a lexeme could end or continue (see [`crate::earley`]).

use crate::CompileOptions;
use crate::ast::{ClassAst, Expr, ExprKind, RuleAst};
use crate::compiled::{Grammar, GrammarBuilder, RuleId, Sym};
use crate::error::{ErrorKind, GrammarError, Span};
use crate::lexeme::{Combine, LexemeDfa};
use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, Repetition};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::Arc;

mod chunk;
mod classify;
mod hir;
mod names;
mod size;

use chunk::chunking;
pub(crate) use classify::tarjan_sccs;
use classify::{Classes, classify, reachable_rules};
use hir::*;
use names::{missing_start, names_and_references};
use size::*;

/// A repetition of a regular expression whose expansion is larger than this many units
/// (`(a|ab){0,5000}`) is not one automaton: it is cut into chunks (see [`chunking`]).
const BIG_REPEAT_UNITS: usize = 16384;

/// The same for a repetition whose automaton is composed (a prefix-free body: see
/// `lexeme::compose`): its table is filled only where used, so one automaton serves a much
/// larger bound (a JSON string character, about 80 units with its escapes, up to 3,000
/// times).
const BIG_COMPOSED_UNITS: usize = 1 << 18;

/// The size of one chunk of a big repetition, in units: `x{k}` with `k` copies of `x`.
const CHUNK_UNITS: usize = 4096;

/// The same for a composed repetition.
const CHUNK_COMPOSED_UNITS: usize = 1 << 16;

/// Compiles rules into a grammar with `start` as the start rule.
///
/// `inline_units`: `None` inlines every regular rule into the lexemes of its callers (GBNF's
/// default: the fewest, largest lexemes). `Some(n)` inlines only regular rules whose
/// size as written (`shape_units`) is at most `n`; larger rules stay rules of the Earley grammar, so their
/// bodies become lexemes of their own, shared (with their mask caches) by every caller.
/// Machine-written grammars (JSON Schema) use it: their rules form DAGs that inlining would
/// copy once per path, and their values are best cached once per shape.
///
/// `text` is the source the rules were parsed from, for error positions and lexemes'
/// names; rules built by a program have none (their names are printed from the rules, and
/// errors carry no position).
pub fn lower(
    rules: &[RuleAst],
    text: Option<&str>,
    opts: &CompileOptions,
) -> Result<Grammar, GrammarError> {
    let (start, origin, limits, inline_units) = (
        opts.start.as_str(),
        opts.origin.as_str(),
        &opts.limits,
        opts.inline_units,
    );
    let err = |kind: ErrorKind, span: Span| match text {
        Some(text) => GrammarError::at(kind, span, origin, text),
        None => GrammarError::unplaced(kind, origin),
    };
    let (index, refs, opaque) = names_and_references(rules, text, &err)?;
    let Some(&start_ix) = index.get(start) else {
        return Err(missing_start(rules, start, &err, || {
            err(
                ErrorKind::MissingStartRule {
                    name: start.to_string(),
                    defined: "none".into(),
                },
                Span::new(0, 0),
            )
        }));
    };
    let sccs = tarjan_sccs(&refs);
    let classes = classify(rules, &index, &refs, &opaque, &sccs, limits, inline_units)
        .map_err(|(value, span)| err(size_limit(value, limits), span))?;
    let Classes {
        regular,
        intrinsic,
        intrinsic_units,
        rule_units,
        rule_empty,
    } = &classes;

    // Regular rules' regexes, callees first.
    let mut rule_hir: Vec<Option<Hir>> = vec![None; rules.len()];
    for scc in &sccs {
        for &r in scc {
            if regular[r] {
                rule_hir[r] = Some(hir_of(&rules[r].body, &index, &rule_hir));
            }
        }
    }

    // 4. Productions for the rules reachable from the start rule.
    let reachable = reachable_rules(start_ix, &refs, regular);
    let mut lw = Lowerer {
        text,
        rules,
        intrinsic,
        intrinsic_units,
        operand_hir: FxHashMap::default(),
        operand_rules: FxHashMap::default(),
        index: &index,
        regular,
        rule_units,
        rule_empty,
        rule_hir: &rule_hir,
        b: GrammarBuilder::new(limits.clone()).with_cache(opts.dfa_cache.clone()),
        rule_ids: vec![None; rules.len()],
        anon: 0,
        chunks: RefCell::default(),
        runs: FxHashMap::default(),
    };
    for (i, r) in rules.iter().enumerate() {
        if reachable[i] && (!regular[i] || i == start_ix) {
            lw.rule_ids[i] = Some(lw.b.add_rule(r.name.clone()));
        }
    }
    for (i, r) in rules.iter().enumerate() {
        let Some(lhs) = lw.rule_ids[i] else { continue };
        let res = if regular[i] {
            // A regular start rule is one lexeme.
            let mut out = Vec::new();
            lw.flush(&mut vec![&r.body], &mut out)
                .and_then(|()| lw.b.add_production(lhs, out).map_err(|k| (k, r.body.span)))
        } else {
            lw.lower_alternatives(lhs, &r.body)
        };
        res.map_err(|(k, span)| err(k, span))?;
    }
    let start_id = lw.rule_ids[start_ix].expect("start rule is reachable");
    lw.b.build(start_id)
        .map_err(|k| err(k, rules[start_ix].name_span))
}

type LowerResult<T> = Result<T, (ErrorKind, Span)>;

/// A repetition by its repeated expression's address and its bounds.
type RepeatKey = (usize, u32, Option<u32>);

struct Lowerer<'a> {
    text: Option<&'a str>,
    rules: &'a [RuleAst],
    intrinsic: &'a [bool],
    intrinsic_units: &'a [usize],
    /// Regexes of intrinsically regular rules that `&`/`~` operands reference (built on
    /// demand: most such rules are never operands).
    operand_hir: FxHashMap<usize, Hir>,
    /// The automaton of each rule named as an operand of `&` or `~` (an object's keys,
    /// named once per object with other members).
    operand_rules: FxHashMap<usize, Combined>,
    index: &'a FxHashMap<&'a str, usize>,
    regular: &'a [bool],
    rule_units: &'a [usize],
    rule_empty: &'a [bool],
    rule_hir: &'a [Option<Hir>],
    b: GrammarBuilder,
    /// AST rule index -> compiled rule, for the rules that got one.
    rule_ids: Vec<Option<RuleId>>,
    anon: usize,
    /// [`Lowerer::chunk_size`] by (repeated expression's address, min, max): asked again at
    /// every level of nesting above a repetition.
    chunks: RefCell<FxHashMap<RepeatKey, Option<u32>>>,
    /// The lexeme made of each run of regular items met so far (`None`: it matches only
    /// ""), by the items themselves: a machine-written grammar repeats most runs (a
    /// property's `ws ":" ws json-string`), and building a run's regex and its key costs far
    /// more than hashing the items.
    runs: FxHashMap<RunKey<'a>, Option<crate::LexemeId>>,
}

/// A run of items as a key of [`Lowerer::runs`]: compared in full, hashed by the top two
/// levels of each item (hashing every level of an enum's alternation cost more than the
/// lookups saved).
#[derive(PartialEq, Eq)]
struct RunKey<'a>(Vec<&'a Expr>);

impl std::hash::Hash for RunKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_usize(self.0.len());
        for e in &self.0 {
            shallow_hash(e, 2, h);
        }
    }
}

/// Hashes what [`Expr`]'s equality compares (span, depth, kind), down to `levels` levels
/// (first and last children only below the top): equal expressions hash alike. The span
/// keeps a parsed grammar's runs apart: written alike at two places, they are not equal.
fn shallow_hash<H: std::hash::Hasher>(e: &Expr, levels: u32, h: &mut H) {
    use std::hash::Hash;
    e.span.hash(h);
    h.write_u32(e.depth);
    std::mem::discriminant(&e.kind).hash(h);
    if levels == 0 {
        return;
    }
    match &e.kind {
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            h.write_usize(xs.len());
            for x in xs.first().into_iter().chain(xs.last()) {
                shallow_hash(x, levels - 1, h);
            }
        }
        ExprKind::Literal(chars) => chars.hash(h),
        ExprKind::Class(c) => c.hash(h),
        ExprKind::Any => {}
        ExprKind::RuleRef(name) => name.hash(h),
        ExprKind::Token(t) => t.hash(h),
        ExprKind::Repeat { inner, min, max } => {
            (min, max).hash(h);
            shallow_hash(inner, levels - 1, h);
        }
        ExprKind::Group(inner) | ExprKind::Not(inner) => shallow_hash(inner, levels - 1, h),
    }
}

impl<'a> Lowerer<'a> {
    /// [`shown`] with this grammar's source text.
    fn shown(&self, items: &[&Expr]) -> String {
        shown(self.text, items)
    }

    fn is_regular(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Literal(_) | ExprKind::Class(_) | ExprKind::Any => true,
            ExprKind::Token(_) | ExprKind::And(_) | ExprKind::Not(_) => false,
            ExprKind::RuleRef(name) => self.regular[self.index[name.as_str()]],
            ExprKind::Seq(xs) | ExprKind::Alt(xs) => xs.iter().all(|x| self.is_regular(x)),
            ExprKind::Group(inner) => self.is_regular(inner),
            ExprKind::Repeat { inner, min, max } => {
                self.is_regular(inner) && self.chunk_size(inner, *min, *max).is_none()
            }
        }
    }

    fn anon_rule(&mut self, parent: RuleId) -> RuleId {
        self.anon += 1;
        let name = format!("{}#{}", self.b.rule_name(parent), self.anon);
        self.b.add_rule(name)
    }

    /// One production per alternative of `e`.
    fn lower_alternatives(&mut self, lhs: RuleId, e: &'a Expr) -> LowerResult<()> {
        let mut alts = Vec::new();
        alternatives(e, &mut alts);
        for alt in alts {
            let syms = self.lower_sequence(lhs, alt)?;
            self.b
                .add_production(lhs, syms)
                .map_err(|k| (k, alt.span))?;
        }
        Ok(())
    }

    fn lower_sequence(&mut self, lhs: RuleId, e: &'a Expr) -> LowerResult<Vec<Sym>> {
        let mut items = Vec::new();
        sequence_items(e, &mut items);
        let mut out = Vec::new();
        let mut run: Vec<&'a Expr> = Vec::new();
        let mut i = 0;
        while i < items.len() {
            let item = items[i];
            i += 1;
            if self.is_regular(item) {
                run.push(item);
                continue;
            }
            self.flush(&mut run, &mut out)?;
            if let ExprKind::Repeat { inner, min, max } = &item.kind
                && self.is_regular(inner)
                && let Some(k) = self.chunk_size(inner, *min, *max)
            {
                // The regular items after a chunked repetition end its last lexeme (a
                // string's closing quote): that lexeme then ends only where they do.
                let mut after = Vec::new();
                while i < items.len() && self.is_regular(items[i]) {
                    after.push(items[i]);
                    i += 1;
                }
                self.lower_chunked(lhs, item, inner, (*min, *max, k), &after, &mut out)?;
                continue;
            }
            self.lower_item(lhs, item, &mut out)?;
        }
        self.flush(&mut run, &mut out)?;
        Ok(out)
    }

    /// Turns a run of regular items into one lexeme (nothing if it only matches "").
    fn flush(&mut self, run: &mut Vec<&'a Expr>, out: &mut Vec<Sym>) -> LowerResult<()> {
        if run.is_empty() {
            return Ok(());
        }
        let key = RunKey(std::mem::take(run));
        if let Some(&made) = self.runs.get(&key) {
            out.extend(made.map(Sym::Lexeme));
            return Ok(());
        }
        let run = &key.0;
        let span = run[0].span.to(run[run.len() - 1].span);
        let hir = Hir::concat(
            run.iter()
                .map(|x| hir_of(x, self.index, self.rule_hir))
                .collect(),
        );
        let props = hir.properties();
        if props.maximum_len() == Some(0) && props.minimum_len() == Some(0) {
            self.runs.insert(key, None);
            return Ok(());
        }
        let text = self.text;
        let display = || match run.as_slice() {
            [
                Expr {
                    kind: ExprKind::RuleRef(name),
                    ..
                },
            ] => name.clone(),
            _ => shown(text, run),
        };
        let id = self.b.lexeme(hir, display).map_err(|k| (k, span))?;
        out.push(Sym::Lexeme(id));
        self.runs.insert(key, Some(id));
        Ok(())
    }

    /// A non-regular item of a sequence.
    fn lower_item(&mut self, lhs: RuleId, e: &'a Expr, out: &mut Vec<Sym>) -> LowerResult<()> {
        match &e.kind {
            ExprKind::Repeat { inner, min, max }
                if self.is_regular(inner)
                    && let Some(k) = self.chunk_size(inner, *min, *max) =>
            {
                self.lower_chunked(lhs, e, inner, (*min, *max, k), &[], out)
            }
            ExprKind::Repeat { inner, min, max } => {
                let x = self.symbol_for(lhs, inner)?;
                for _ in 0..*min {
                    out.push(x);
                }
                match max {
                    None => {
                        // R -> R x | ε
                        let r = self.anon_rule(lhs);
                        self.b
                            .add_production(r, vec![Sym::Rule(r), x])
                            .and_then(|()| self.b.add_production(r, vec![]))
                            .map_err(|k| (k, e.span))?;
                        out.push(Sym::Rule(r));
                    }
                    Some(n) if *n > *min => {
                        // O1 -> x | ε ; Ok -> x O(k-1) | ε
                        let mut prev: Option<RuleId> = None;
                        for _ in 0..(n - min) {
                            let o = self.anon_rule(lhs);
                            let mut body = vec![x];
                            if let Some(p) = prev {
                                body.push(Sym::Rule(p));
                            }
                            self.b
                                .add_production(o, body)
                                .and_then(|()| self.b.add_production(o, vec![]))
                                .map_err(|k| (k, e.span))?;
                            prev = Some(o);
                        }
                        out.push(Sym::Rule(prev.expect("n > min")));
                    }
                    Some(_) => {}
                }
                Ok(())
            }
            _ => {
                let s = self.symbol_for(lhs, e)?;
                out.push(s);
                Ok(())
            }
        }
    }

    /// The automaton of `&`/`~` expression `e` (a lexeme of its own): operands are regular
    /// expressions, or `&`/`~` expressions themselves. Each step is cached process-wide by
    /// its key.
    fn combined(&mut self, e: &Expr) -> LowerResult<Combined> {
        match &e.kind {
            ExprKind::Group(inner) => self.combined(inner),
            ExprKind::Not(inner) => {
                let any = self.leaf(&any_string(), e.span)?;
                let x = self.combined(inner)?;
                self.product(any, x, Combine::FirstNotSecond, e.span)
            }
            ExprKind::And(xs) => {
                let mut positive = Vec::new();
                let mut negative = Vec::new();
                for x in xs {
                    match &ungroup(x).kind {
                        ExprKind::Not(y) => negative.push(&**y),
                        _ => positive.push(x),
                    }
                }
                let mut acc = match positive.first() {
                    Some(first) => self.combined(first)?,
                    None => self.leaf(&any_string(), e.span)?,
                };
                for x in positive.iter().skip(1) {
                    let b = self.combined(x)?;
                    acc = self.product(acc, b, Combine::Both, e.span)?;
                }
                for y in negative {
                    let b = self.combined(y)?;
                    acc = self.product(acc, b, Combine::FirstNotSecond, e.span)?;
                }
                Ok(acc)
            }
            ExprKind::RuleRef(name) => {
                let j = self.index[name.as_str()];
                if let Some(c) = self.operand_rules.get(&j) {
                    return Ok(c.clone());
                }
                let hir = self.operand_hir(e)?;
                let c = self.leaf(&hir, e.span)?;
                self.operand_rules.insert(j, c.clone());
                Ok(c)
            }
            _ => {
                let hir = self.operand_hir(e)?;
                self.leaf(&hir, e.span)
            }
        }
    }

    /// `a` combined with `b` (`&`, or `&~`), through the DFA cache.
    fn product(&self, a: Combined, b: Combined, how: Combine, span: Span) -> LowerResult<Combined> {
        let limit = self.b.limits().max_lexeme_bytes;
        let key = match how {
            Combine::Both => format!("(?:{})&(?:{})", a.key, b.key),
            Combine::FirstNotSecond => format!("(?:{})&~(?:{})", a.key, b.key),
        };
        let dfa = self
            .b
            .cached_dfa(&key, || Ok(LexemeDfa::product(&a.dfa, &b.dfa, how, limit)))
            .map_err(|k| (k, span))?;
        let nullable = match how {
            Combine::Both => a.nullable && b.nullable,
            Combine::FirstNotSecond => a.nullable && !b.nullable,
        };
        Ok(Combined { key, nullable, dfa })
    }

    fn leaf(&mut self, hir: &Hir, span: Span) -> LowerResult<Combined> {
        let key = crate::lexeme::regex_key(hir);
        let limit = self.b.limits().max_lexeme_bytes;
        let dfa = self
            .b
            .cached_dfa(&key, || LexemeDfa::build(hir, limit))
            .map_err(|k| (k, span))?;
        Ok(Combined {
            key,
            nullable: hir.properties().minimum_len() == Some(0),
            dfa,
        })
    }

    /// The regex of an operand of `&` or `~`: a regular expression (no recursion, token
    /// references, or `&`/`~` inside a sequence), within the size limit.
    fn operand_hir(&mut self, e: &Expr) -> LowerResult<Hir> {
        let mut bad = None;
        visit(e, &mut |x| match &x.kind {
            ExprKind::RuleRef(name) if !self.intrinsic[self.index[name.as_str()]] => {
                bad.get_or_insert((format!("rule '{name}' is not regular"), x.span));
            }
            ExprKind::Token(_) => {
                bad.get_or_insert(("a token reference is not a string".into(), x.span));
            }
            ExprKind::And(_) | ExprKind::Not(_) => {
                bad.get_or_insert((
                    "'&' and '~' may not appear inside a sequence, alternative or repetition of an operand".into(),
                    x.span,
                ));
            }
            _ => {}
        });
        if let Some((why, span)) = bad {
            return Err((ErrorKind::NotRegularOperand(why), span));
        }
        let limit = self.b.limits().max_grammar_size;
        let empty = |_: usize| true;
        units(
            e,
            self.index,
            self.intrinsic,
            self.intrinsic_units,
            &empty,
            limit,
        )
        .map_err(|(value, span)| {
            (
                ErrorKind::Limit {
                    what: "the expansion of this operand (repetitions multiplied out)".into(),
                    value,
                    limit_name: "max_grammar_size",
                    limit,
                },
                span,
            )
        })?;
        let index = self.index;
        Ok(hir_with(e, index, &mut |j| self.rule_regex(j)))
    }

    /// The regex of intrinsically regular rule `j`.
    fn rule_regex(&mut self, j: usize) -> Hir {
        if let Some(h) = &self.rule_hir[j] {
            return h.clone();
        }
        if let Some(h) = self.operand_hir.get(&j) {
            return h.clone();
        }
        let (rules, index) = (self.rules, self.index);
        let h = hir_with(&rules[j].body, index, &mut |k| self.rule_regex(k));
        self.operand_hir.insert(j, h.clone());
        h
    }

    /// One symbol standing for `e`: the rule or token itself, or a new anonymous rule.
    fn symbol_for(&mut self, lhs: RuleId, e: &'a Expr) -> LowerResult<Sym> {
        match &e.kind {
            ExprKind::RuleRef(name) if !self.regular[self.index[name.as_str()]] => Ok(Sym::Rule(
                self.rule_ids[self.index[name.as_str()]].expect("reachable rule has an id"),
            )),
            ExprKind::Token(t) => Ok(Sym::Token(self.b.token_ref(t))),
            ExprKind::And(_) | ExprKind::Not(_) => {
                let c = self.combined(e)?;
                let display = self.shown(&[e]);
                let id = self
                    .b
                    .lexeme_with(&c.key, &display, c.nullable, || Ok(c.dfa))
                    .map_err(|k| (k, e.span))?;
                Ok(Sym::Lexeme(id))
            }
            ExprKind::Group(inner) => self.symbol_for(lhs, inner),
            _ => {
                let r = self.anon_rule(lhs);
                self.lower_alternatives(r, e)?;
                Ok(Sym::Rule(r))
            }
        }
    }
}

/// A lexeme's automaton built from `&`/`~`, with the key that names it in caches.
#[derive(Clone)]
struct Combined {
    key: String,
    nullable: bool,
    dfa: Arc<LexemeDfa>,
}

/// How a run of items reads in messages and lexeme names: their source text, or for
/// rules with no source, the items printed as GBNF (at most 40 characters, see
/// [`display_source`]).
fn shown(text: Option<&str>, items: &[&Expr]) -> String {
    let (Some(first), Some(last)) = (items.first(), items.last()) else {
        return String::new();
    };
    if let Some(text) = text {
        let span = first.span.to(last.span);
        return display_source(&text[span.start..span.end]);
    }
    // Printing stops a little past what the name keeps.
    let mut out = Bounded(String::with_capacity(64));
    for (i, x) in items.iter().enumerate() {
        let sep = if i > 0 { " " } else { "" };
        if std::fmt::Write::write_str(&mut out, sep).is_err()
            || std::fmt::Write::write_fmt(&mut out, format_args!("{x}")).is_err()
        {
            break;
        }
    }
    display_owned(out.0)
}

/// `e` without enclosing groups.
fn ungroup(e: &Expr) -> &Expr {
    match &e.kind {
        ExprKind::Group(inner) => ungroup(inner),
        _ => e,
    }
}

/// The alternatives of `e`, looking through groups.
fn alternatives<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match &e.kind {
        ExprKind::Alt(xs) => out.extend(xs.iter()),
        ExprKind::Group(inner) => alternatives(inner, out),
        _ => out.push(e),
    }
}

/// The items of a sequence, splicing in groups that hold a plain sequence.
fn sequence_items<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match &e.kind {
        ExprKind::Seq(xs) => xs.iter().for_each(|x| sequence_items(x, out)),
        ExprKind::Group(inner) if !matches!(inner.kind, ExprKind::Alt(_)) => {
            sequence_items(inner, out)
        }
        _ => out.push(e),
    }
}

/// A string that refuses writes past 64 bytes (printing stops there).
struct Bounded(String);

impl std::fmt::Write for Bounded {
    fn write_char(&mut self, c: char) -> std::fmt::Result {
        if self.0.len() + c.len_utf8() > 64 {
            return Err(std::fmt::Error);
        }
        self.0.push(c);
        Ok(())
    }

    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = 64usize.saturating_sub(self.0.len());
        if s.len() <= room {
            self.0.push_str(s);
            return Ok(());
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.0.push_str(&s[..cut]);
        Err(std::fmt::Error)
    }
}

/// [`display_source`] of text already owned: most names printed from rules are short and
/// singly spaced already, and are kept as they are.
fn display_owned(s: String) -> String {
    let plain = s.len() <= 40
        && !s.contains("  ")
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && s.chars().all(|c| c == ' ' || !c.is_whitespace());
    if plain { s } else { display_source(&s) }
}

/// Source text for messages: whitespace collapsed, at most 40 characters (over 40: the
/// first 37 and an ellipsis).
fn display_source(s: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in s.split_whitespace() {
        // The space before a word counts as a character too.
        for c in (chars > 0).then_some(' ').into_iter().chain(word.chars()) {
            if chars == 40 {
                let cut = out.char_indices().nth(37).map_or(out.len(), |(i, _)| i);
                out.truncate(cut);
                out.push_str("...");
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{RunKey, display_owned, display_source};
    use crate::ast::{Expr, ExprKind};
    use std::hash::BuildHasher;

    #[test]
    fn runs_equal_in_full_hash_alike_and_runs_unequal_deep_down_stay_apart() {
        let lit = |s: &str| Expr::built(ExprKind::Literal(s.chars().collect()));
        let nest = |deep: &str| {
            let inner = Expr::built(ExprKind::Alt(vec![lit("a"), lit(deep), lit("z")]));
            let mid = Expr::built(ExprKind::Seq(vec![lit("x"), inner, lit("y")]));
            Expr::built(ExprKind::Alt(vec![lit("p"), mid, lit("q")]))
        };
        let (a, a2, b) = (nest("m"), nest("m"), nest("n"));
        let hasher = rustc_hash::FxBuildHasher;
        let key = |e| RunKey(vec![e]);
        assert_eq!(hasher.hash_one(key(&a)), hasher.hash_one(key(&a2)));
        // Equal to the hashed depth, so only the comparison tells them apart.
        assert_eq!(hasher.hash_one(key(&a)), hasher.hash_one(key(&b)));
        let mut runs = rustc_hash::FxHashMap::default();
        runs.insert(key(&a), 1);
        runs.insert(key(&b), 2);
        assert_eq!((runs[&key(&a2)], runs[&key(&b)], runs.len()), (1, 2, 2));
        // Parsed runs written alike at two places are unequal, and hash apart.
        let at = |start| {
            let mut e = lit(",");
            e.span = crate::error::Span {
                start,
                end: start + 3,
            };
            e
        };
        let (x, y) = (at(0), at(7));
        assert!(key(&x) != key(&y));
        assert_ne!(hasher.hash_one(key(&x)), hasher.hash_one(key(&y)));
    }

    #[test]
    fn source_text_collapses_and_stops_at_forty_characters() {
        assert_eq!(display_source("  a \n\t b  c "), "a b c");
        let forty = "x".repeat(40);
        assert_eq!(display_source(&forty), forty);
        let cut = format!("{}...", "x".repeat(37));
        assert_eq!(display_source(&format!("{forty}y")), cut);
        // The space after the fortieth character counts as the forty-first.
        assert_eq!(display_source(&format!("{forty} y")), cut);
        assert_eq!(display_source(&format!("{forty}  ")), forty);
        let wide = "é".repeat(41);
        assert_eq!(display_source(&wide), format!("{}...", "é".repeat(37)));
        for s in [
            "",
            "a b",
            " a",
            "a ",
            "a  b",
            "a\u{a0}b",
            "a\tb",
            forty.as_str(),
            &format!("{forty}y"),
            &"é".repeat(20),
            &"é".repeat(21),
        ] {
            assert_eq!(display_owned(s.to_string()), display_source(s), "{s:?}");
        }
    }
}

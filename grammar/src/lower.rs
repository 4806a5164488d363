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

/// How a big repetition of a regular `x` (its expansion `inner_units × bound` over
/// [`BIG_REPEAT_UNITS`]) is lowered: a lexeme of `k` copies of `x` (a *chunk*) repeated by
/// the Earley grammar, and lexemes `x{0,t}` for the rest. `x{0,n}` with `n = k·q + r` is
/// `chunk{0,q} x{0,r} | chunk{0,q-1} x{r+1,k-1}` (the count's remainder mod `k` picks the
/// branch); a lower bound adds its remainder mod `k` to both last lexemes. Inside, the chunk's DFA states recur for every chunk, so their mask caches do
/// too. `None`: not big, one automaton as usual; and never for an `x` that matches the
/// empty string (chains of nullable chunks would make every prediction closure quadratic).
fn chunking(
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

/// Compiles rules into a grammar with `start` as the start rule.
///
/// `inline_units`: `None` inlines every regular rule into the lexemes of its callers (GBNF's
/// default: the fewest, largest lexemes). `Some(n)` inlines only regular rules whose
/// size as written ([`shape_units`]) is at most `n`; larger rules stay rules of the Earley grammar, so their
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
        index: &index,
        regular,
        rule_units,
        rule_empty,
        rule_hir: &rule_hir,
        b: GrammarBuilder::new(limits.clone()).with_cache(opts.dfa_cache.clone()),
        rule_ids: vec![None; rules.len()],
        anon: 0,
        chunks: RefCell::default(),
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

/// Rule indices by name, each rule's references, and which rules are opaque (hold token
/// references or `&`/`~`, so are never inlined into lexemes). Step 1 of [`lower`].
#[allow(clippy::type_complexity)]
fn names_and_references<'r>(
    rules: &'r [RuleAst],
    text: Option<&str>,
    err: &dyn Fn(ErrorKind, Span) -> GrammarError,
) -> Result<(FxHashMap<&'r str, usize>, Vec<Vec<usize>>, Vec<bool>), GrammarError> {
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, r) in rules.iter().enumerate() {
        if let Some(&first) = index.get(r.name.as_str()) {
            let first_line = text.map_or(0, |text| {
                crate::error::Location::of(text, rules[first].name_span.start).line
            });
            return Err(err(
                ErrorKind::DuplicateRule {
                    name: r.name.clone(),
                    first_line,
                },
                r.name_span,
            ));
        }
        index.insert(&r.name, i);
    }
    let mut refs: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    let mut opaque = vec![false; rules.len()];
    for (i, r) in rules.iter().enumerate() {
        let mut undefined = None;
        visit(&r.body, &mut |e| match &e.kind {
            ExprKind::RuleRef(name) => match index.get(name.as_str()) {
                Some(&j) => refs[i].push(j),
                None => {
                    if undefined.is_none() {
                        undefined = Some((name.clone(), e.span));
                    }
                }
            },
            ExprKind::Token(_) | ExprKind::And(_) | ExprKind::Not(_) => opaque[i] = true,
            _ => {}
        });
        if let Some((name, span)) = undefined {
            return Err(err(ErrorKind::UndefinedRule(name), span));
        }
    }
    Ok((index, refs, opaque))
}

/// The error for a start rule that is not defined, listing a few rules that are
/// (`empty`: the error for a grammar with no rules at all).
fn missing_start(
    rules: &[RuleAst],
    start: &str,
    err: &dyn Fn(ErrorKind, Span) -> GrammarError,
    empty: impl FnOnce() -> GrammarError,
) -> GrammarError {
    if rules.is_empty() {
        return empty();
    }
    let defined: Vec<&str> = rules.iter().take(8).map(|r| r.name.as_str()).collect();
    let kind = ErrorKind::MissingStartRule {
        name: start.to_string(),
        defined: defined.join(", "),
    };
    err(kind, rules[0].name_span)
}

/// What steps 2 and 3 of [`lower`] find out about each rule.
struct Classes {
    /// Inlined into its callers' lexemes.
    regular: Vec<bool>,
    /// Regular whatever the inlining policy says (what `&` and `~` operands may
    /// reference), with its size in `intrinsic_units`.
    intrinsic: Vec<bool>,
    intrinsic_units: Vec<usize>,
    rule_units: Vec<usize>,
    /// Regular rules that match "" (others count as if they might).
    rule_empty: Vec<bool>,
}

/// Steps 2 and 3 of [`lower`]: the regular rules, callees before callers (in `sccs`,
/// Tarjan's order), and their sizes (expansions memoized, callees first). A size over the
/// limit is `(size, span)`.
fn classify(
    rules: &[RuleAst],
    index: &FxHashMap<&str, usize>,
    refs: &[Vec<usize>],
    opaque: &[bool],
    sccs: &[Vec<usize>],
    limits: &crate::Limits,
    inline_units: Option<usize>,
) -> Result<Classes, (usize, Span)> {
    let n = rules.len();
    let mut c = Classes {
        regular: vec![false; n],
        intrinsic: vec![false; n],
        intrinsic_units: vec![1usize; n],
        rule_units: vec![1usize; n],
        rule_empty: vec![true; n],
    };
    let mut inline_depth = vec![0u32; n];
    let mut rule_shape = vec![1usize; n];
    for scc in sccs {
        let recursive = scc.len() > 1 || refs[scc[0]].contains(&scc[0]);
        for &r in scc {
            let empty = |j: usize| c.rule_empty[j];
            if recursive
                || opaque[r]
                || refs[r].iter().any(|&j| !c.intrinsic[j])
                || has_big_repeat(
                    &rules[r].body,
                    index,
                    &c.intrinsic,
                    &c.intrinsic_units,
                    &empty,
                )
            {
                continue;
            }
            let depth =
                rules[r].body.depth + refs[r].iter().map(|&j| inline_depth[j]).max().unwrap_or(0);
            if depth <= limits.max_inline_depth {
                c.intrinsic[r] = true;
                c.regular[r] = refs[r].iter().all(|&j| c.regular[j]);
                inline_depth[r] = depth;
            }
        }
        for &r in scc {
            let empty = |j: usize| c.rule_empty[j];
            let body = &rules[r].body;
            let u = units(
                body,
                index,
                &c.regular,
                &c.rule_units,
                &empty,
                limits.max_grammar_size,
            )?;
            // A regular rule's references are all regular: the same count. Only rules that
            // reference demoted ones are counted again.
            if c.regular[r] {
                c.intrinsic_units[r] = u;
            } else if c.intrinsic[r] {
                c.intrinsic_units[r] = units(
                    body,
                    index,
                    &c.intrinsic,
                    &c.intrinsic_units,
                    &empty,
                    usize::MAX,
                )
                .unwrap_or(usize::MAX);
            }
            if c.regular[r] {
                c.rule_empty[r] = matches_empty(body, index, &empty);
                let shape = shape_units(body, index, &c.regular, &rule_shape);
                if inline_units.is_some_and(|n| shape > n) {
                    c.regular[r] = false;
                } else {
                    c.rule_units[r] = u;
                    rule_shape[r] = shape;
                }
            }
        }
    }
    Ok(c)
}

/// Rules reachable from `start` through rules that are not inlined.
fn reachable_rules(start: usize, refs: &[Vec<usize>], regular: &[bool]) -> Vec<bool> {
    let mut reachable = vec![false; refs.len()];
    let mut stack = vec![start];
    reachable[start] = true;
    while let Some(r) = stack.pop() {
        if regular[r] {
            continue;
        }
        for &j in &refs[r] {
            if !reachable[j] {
                reachable[j] = true;
                stack.push(j);
            }
        }
    }
    reachable
}

fn size_limit(value: usize, limits: &crate::Limits) -> ErrorKind {
    ErrorKind::Limit {
        what: "the expansion of this expression (repetitions multiplied out)".into(),
        value,
        limit_name: "max_grammar_size",
        limit: limits.max_grammar_size,
    }
}

/// Pre-order walk (recursion bounded by the nesting limit).
fn visit(e: &Expr, f: &mut impl FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            xs.iter().for_each(|x| visit(x, f))
        }
        ExprKind::Repeat { inner, .. } | ExprKind::Group(inner) | ExprKind::Not(inner) => {
            visit(inner, f)
        }
        _ => {}
    }
}

/// Size of an expression's expansion; `Err((size, span))` at the first node over `limit`.
fn units(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_units: &[usize],
    rule_empty: &dyn Fn(usize) -> bool,
    limit: usize,
) -> Result<usize, (usize, Span)> {
    let sub = |x: &Expr| units(x, index, regular, rule_units, rule_empty, limit);
    let u = match &e.kind {
        ExprKind::Literal(cs) => cs.len().max(1),
        ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => 1,
        ExprKind::RuleRef(name) => {
            let j = index[name.as_str()];
            if regular[j] { rule_units[j] } else { 1 }
        }
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            let mut sum = 1usize;
            for x in xs {
                sum = sum.saturating_add(sub(x)?);
            }
            sum
        }
        ExprKind::Group(inner) | ExprKind::Not(inner) => sub(inner)?,
        ExprKind::Repeat { inner, min, max } => {
            let factor = match max {
                Some(n) => (*n).max(1) as usize,
                None => *min as usize + 1,
            };
            let iu = sub(inner)?;
            let empty = matches_empty(inner, index, rule_empty);
            // As if composed: the larger of the two estimates (no chunks).
            match chunking(iu, empty, true, *min, *max) {
                // A chunk and two tails, and a rule per chunk of the bound.
                Some(k) => iu
                    .saturating_mul(k as usize)
                    .saturating_mul(3)
                    .saturating_add(factor / k as usize + 1),
                None => iu.saturating_mul(factor),
            }
        }
    };
    if u > limit { Err((u, e.span)) } else { Ok(u) }
}

/// Whether `e` holds a repetition that [`chunking`] cuts into chunks (such an expression
/// is not one lexeme).
fn has_big_repeat(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_units: &[usize],
    rule_empty: &dyn Fn(usize) -> bool,
) -> bool {
    let big = |x: &Expr| has_big_repeat(x, index, regular, rule_units, rule_empty);
    match &e.kind {
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => xs.iter().any(big),
        ExprKind::Group(inner) | ExprKind::Not(inner) => big(inner),
        ExprKind::Repeat { inner, min, max } => {
            big(inner)
                || units(inner, index, regular, rule_units, rule_empty, usize::MAX).is_ok_and(
                    |iu| {
                        let empty = matches_empty(inner, index, rule_empty);
                        chunking(iu, empty, false, *min, *max).is_some()
                    },
                )
        }
        _ => false,
    }
}

/// Whether `e` matches the empty string (a rule: as `rule_empty` says).
fn matches_empty(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    rule_empty: &dyn Fn(usize) -> bool,
) -> bool {
    match &e.kind {
        ExprKind::Literal(cs) => cs.is_empty(),
        ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => false,
        ExprKind::RuleRef(name) => rule_empty(index[name.as_str()]),
        ExprKind::Seq(xs) | ExprKind::And(xs) => {
            xs.iter().all(|x| matches_empty(x, index, rule_empty))
        }
        // Whether `~x` matches "" depends on x exactly; "may" is the safe answer here.
        ExprKind::Not(_) => true,
        ExprKind::Alt(xs) => xs.iter().any(|x| matches_empty(x, index, rule_empty)),
        ExprKind::Group(inner) => matches_empty(inner, index, rule_empty),
        ExprKind::Repeat { inner, min, .. } => *min == 0 || matches_empty(inner, index, rule_empty),
    }
}

/// Size of an expression as written, a repetition's body counted once (regular rules it
/// references counted at their own shape): what inlining copies, where [`units`] counts what
/// the automaton must hold.
fn shape_units(
    e: &Expr,
    index: &FxHashMap<&str, usize>,
    regular: &[bool],
    rule_shape: &[usize],
) -> usize {
    match &e.kind {
        ExprKind::Literal(_) | ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => 1,
        ExprKind::RuleRef(name) => {
            let j = index[name.as_str()];
            if regular[j] { rule_shape[j] } else { 1 }
        }
        ExprKind::Seq(xs) | ExprKind::Alt(xs) | ExprKind::And(xs) => {
            xs.iter().fold(1usize, |sum, x| {
                sum.saturating_add(shape_units(x, index, regular, rule_shape))
            })
        }
        ExprKind::Group(inner) => shape_units(inner, index, regular, rule_shape),
        ExprKind::Repeat { inner, .. } | ExprKind::Not(inner) => {
            shape_units(inner, index, regular, rule_shape).saturating_add(1)
        }
    }
}

fn class_hir(c: &ClassAst) -> Hir {
    let mut class = ClassUnicode::new(c.ranges.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)));
    if c.negated {
        class.negate();
    }
    Hir::class(Class::Unicode(class))
}

/// The regex of a regular expression (every rule it references is regular and built).
fn hir_of(e: &Expr, index: &FxHashMap<&str, usize>, rule_hir: &[Option<Hir>]) -> Hir {
    hir_with(e, index, &mut |j| {
        rule_hir[j]
            .clone()
            .expect("regular rules reference only regular rules, built first")
    })
}

/// The regex of a regular expression, `rule(j)` giving the regex of rule `j`.
fn hir_with(e: &Expr, index: &FxHashMap<&str, usize>, rule: &mut dyn FnMut(usize) -> Hir) -> Hir {
    match &e.kind {
        ExprKind::Literal(cs) => Hir::literal(cs.iter().collect::<String>().into_bytes()),
        ExprKind::Class(c) => class_hir(c),
        ExprKind::Any => Hir::class(Class::Unicode(ClassUnicode::new([ClassUnicodeRange::new(
            '\0',
            char::MAX,
        )]))),
        ExprKind::RuleRef(name) => rule(index[name.as_str()]),
        ExprKind::Seq(xs) => Hir::concat(xs.iter().map(|x| hir_with(x, index, rule)).collect()),
        ExprKind::Alt(xs) => {
            Hir::alternation(xs.iter().map(|x| hir_with(x, index, rule)).collect())
        }
        ExprKind::Group(inner) => hir_with(inner, index, rule),
        ExprKind::Repeat { inner, min, max } => Hir::repetition(Repetition {
            min: *min,
            max: *max,
            greedy: true,
            sub: Box::new(hir_with(inner, index, rule)),
        }),
        ExprKind::Token(_) | ExprKind::And(_) | ExprKind::Not(_) => {
            unreachable!("token references, '&' and '~' are never regular")
        }
    }
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
}

impl Lowerer<'_> {
    /// How a run of items reads in messages and lexeme names: their source text, or for
    /// rules with no source, the items printed as GBNF (at most 40 characters, see
    /// [`display_source`]).
    fn shown(&self, items: &[&Expr]) -> String {
        let (Some(first), Some(last)) = (items.first(), items.last()) else {
            return String::new();
        };
        if let Some(text) = self.text {
            let span = first.span.to(last.span);
            return display_source(&text[span.start..span.end]);
        }
        // Printing stops a little past what the name keeps.
        let mut out = Bounded(String::new());
        for (i, x) in items.iter().enumerate() {
            let sep = if i > 0 { " " } else { "" };
            if std::fmt::Write::write_str(&mut out, sep).is_err()
                || std::fmt::Write::write_fmt(&mut out, format_args!("{x}")).is_err()
            {
                break;
            }
        }
        display_source(&out.0)
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

    /// The chunk size if `inner{min,max}` is a big repetition of a regular `inner`.
    fn chunk_size(&self, inner: &Expr, min: u32, max: Option<u32>) -> Option<u32> {
        let key = (inner as *const Expr as usize, min, max);
        if let Some(&k) = self.chunks.borrow().get(&key) {
            return k;
        }
        let k = self.chunk_size_uncached(inner, min, max);
        self.chunks.borrow_mut().insert(key, k);
        k
    }

    fn chunk_size_uncached(&self, inner: &Expr, min: u32, max: Option<u32>) -> Option<u32> {
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
                .cached_dfa(&format!("#t {hir}"), || {
                    LexemeDfa::build_tables(&hir, limit)
                })
                .is_ok_and(|d| d.composable_body())
        };
        chunking(iu, empty, composed, min, max)
    }

    /// A big repetition of a regular `inner`, in chunks (see [`chunking`]), followed by the
    /// regular items `after`, which end its last lexeme.
    fn lower_chunked(
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
                lw.b.lexeme(h, &shown)
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

    fn anon_rule(&mut self, parent: RuleId) -> RuleId {
        self.anon += 1;
        let name = format!("{}#{}", self.b.rule_name(parent), self.anon);
        self.b.add_rule(name)
    }

    /// One production per alternative of `e`.
    fn lower_alternatives(&mut self, lhs: RuleId, e: &Expr) -> LowerResult<()> {
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

    fn lower_sequence(&mut self, lhs: RuleId, e: &Expr) -> LowerResult<Vec<Sym>> {
        let mut items = Vec::new();
        sequence_items(e, &mut items);
        let mut out = Vec::new();
        let mut run: Vec<&Expr> = Vec::new();
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
    fn flush(&mut self, run: &mut Vec<&Expr>, out: &mut Vec<Sym>) -> LowerResult<()> {
        if run.is_empty() {
            return Ok(());
        }
        let span = run[0].span.to(run[run.len() - 1].span);
        let hir = Hir::concat(
            run.iter()
                .map(|x| hir_of(x, self.index, self.rule_hir))
                .collect(),
        );
        let props = hir.properties();
        if props.maximum_len() == Some(0) && props.minimum_len() == Some(0) {
            run.clear();
            return Ok(());
        }
        let display = match run.as_slice() {
            [
                Expr {
                    kind: ExprKind::RuleRef(name),
                    ..
                },
            ] => name.clone(),
            _ => self.shown(run),
        };
        let id = self.b.lexeme(hir, &display).map_err(|k| (k, span))?;
        out.push(Sym::Lexeme(id));
        run.clear();
        Ok(())
    }

    /// A non-regular item of a sequence.
    fn lower_item(&mut self, lhs: RuleId, e: &Expr, out: &mut Vec<Sym>) -> LowerResult<()> {
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
        let key = hir.to_string();
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
    fn symbol_for(&mut self, lhs: RuleId, e: &Expr) -> LowerResult<Sym> {
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
struct Combined {
    key: String,
    nullable: bool,
    dfa: Arc<LexemeDfa>,
}

/// `.*`: every string (the base of a complement).
fn any_string() -> Hir {
    Hir::repetition(Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(Hir::class(Class::Unicode(ClassUnicode::new([
            ClassUnicodeRange::new('\0', char::MAX),
        ])))),
    })
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

/// Source text for messages: whitespace collapsed, at most 40 characters.
fn display_source(s: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in s.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == 40 {
                // Over 40: the first 37 and an ellipsis.
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

/// Strongly connected components of a graph given as adjacency lists, in Tarjan's output
/// order: every component comes after the components it points to. Iterative, so deep
/// reference chains cannot overflow the stack.
pub(crate) fn tarjan_sccs(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut sccs = Vec::new();
    let mut next = 0usize;
    let mut call: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        call.push((root, 0));
        while let Some(&(v, child)) = call.last() {
            if child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adj[v].get(child) {
                call.last_mut().expect("non-empty").1 += 1;
                if index[w] == usize::MAX {
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(&(parent, _)) = call.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                loop {
                    let w = stack.pop().expect("v is on the stack");
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                sccs.push(scc);
            }
        }
    }
    sccs
}

#[cfg(test)]
mod tests {
    use super::tarjan_sccs;

    #[test]
    fn sccs_come_callees_first() {
        // 0 -> 1 -> 2 -> 1, 2 -> 3
        let adj = vec![vec![1], vec![2], vec![1, 3], vec![]];
        let sccs = tarjan_sccs(&adj);
        let pos = |v: usize| sccs.iter().position(|s| s.contains(&v)).unwrap();
        assert!(pos(3) < pos(1));
        assert_eq!(pos(1), pos(2));
        assert!(pos(1) < pos(0));
    }
}

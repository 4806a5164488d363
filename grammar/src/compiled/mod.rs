//! The compiled grammar: dense, index-based, immutable, shared behind an `Arc`.
//!
//! A context-free grammar over two kinds of terminals: lexemes (regular pieces with a DFA)
//! and token references (matched by token id). Each production
//! `A -> X1 .. Xn` owns `n + 1` consecutive *dots* (Earley's dotted rules): dot `k` sits before
//! `X(k+1)`, dot `n` is the completed production. Per dot the tables give the symbol after it,
//! the rule on the left and whether that symbol is the production's last (for Leo items), so
//! the recognizer's inner loop is a few array reads.
//!
//! Built with [`GrammarBuilder`], which also removes unproductive productions, computes
//! nullable rules and precomputes, per rule, the closure of its prediction (the dotted items a
//! prediction adds with their nullable advances, and the lexemes those items expect).

use crate::ast::TokenAst;
use crate::dfa_cache::DfaCache;
use crate::error::ErrorKind;
use crate::lexeme::{DEAD, LexemeDfa};
use crate::limits::Limits;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, OnceLock};

mod builder;

pub use builder::GrammarBuilder;

/// Index of a rule (nonterminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

/// Index of a lexeme (a regular terminal with its DFA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LexemeId(pub u32);

/// Index of a token-reference terminal (`<[id]>`, `!<|end|>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenRefId(pub u32);

/// A dotted production (Earley item without origin).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DotId(pub u32);

/// A grammar symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sym {
    /// A rule (nonterminal).
    Rule(RuleId),
    /// A lexeme: a regular terminal matched byte by byte by its DFA.
    Lexeme(LexemeId),
    /// A token reference, matched against a whole token by id.
    Token(TokenRefId),
}

/// The symbol after a dot, or the end of the production.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AfterDot {
    /// The dot stands before this symbol.
    Sym(Sym),
    /// The dot is at the end: the production is complete.
    End,
}

/// A lexeme: its DFA, whether it also matches the empty string, and how to show it.
#[derive(Debug)]
pub struct Lexeme {
    /// Built on first use ([`Lexeme::dfa`]); shared with other grammars compiled through the
    /// same [`crate::DfaCache`].
    dfa: DeferredDfa,
    /// The regular expression the DFA was built from (its [`crate::regex_key`]; for
    /// `&`/`~`, the combination of its operands'): equal keys mean the same language, and
    /// with the DFA's [`LexemeDfa::numbering`] the same DFA state for state, so caches of
    /// per-state data can be shared between grammars by the pair.
    pub key: Arc<str>,
    /// Matches the empty string; the recognizer treats it as a nullable terminal (the DFA
    /// itself only ever completes after at least one byte).
    pub nullable: bool,
    /// Source text (or rule name) for messages.
    pub display: String,
    /// Matches nothing at all (known from the regex, without building the DFA).
    pub empty: bool,
}

impl Lexeme {
    /// The lexeme's DFA, built the first time it is asked for (most of a grammar's cost, and
    /// many lexemes of a large grammar are never reached). If the build fails (a size limit),
    /// a DFA that matches nothing stands in and [`Grammar::overflow`] reports the error.
    #[inline]
    pub fn dfa(&self) -> &LexemeDfa {
        self.dfa.get()
    }

    /// The DFA if it has been built (a cache counting bytes reads it without building).
    pub fn built_dfa(&self) -> Option<&Arc<LexemeDfa>> {
        self.dfa.cell.get()
    }
}

/// What a deferred lexeme DFA is built from: its regex, state limit, DFA cache and the
/// cache key.
type DfaSource = (Hir, usize, Option<DfaCache>, Arc<str>);

/// A lexeme DFA, or what builds it on first use.
struct DeferredDfa {
    cell: OnceLock<Arc<LexemeDfa>>,
    /// The regex and how to build it (taken by the build).
    source: Mutex<Option<DfaSource>>,
    error: OnceLock<ErrorKind>,
}

impl std::fmt::Debug for DeferredDfa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredDfa")
            .field("built", &self.cell.get().is_some())
            .finish()
    }
}

impl DeferredDfa {
    fn built(dfa: Arc<LexemeDfa>) -> DeferredDfa {
        DeferredDfa {
            cell: OnceLock::from(dfa),
            source: Mutex::new(None),
            error: OnceLock::new(),
        }
    }

    #[inline]
    fn get(&self) -> &LexemeDfa {
        self.cell.get_or_init(|| {
            let source = self.source.lock().unwrap_or_else(|e| e.into_inner()).take();
            let Some((hir, limit, cache, key)) = source else {
                return Arc::new(LexemeDfa::never());
            };
            let built = crate::dfa_cache::build_with(cache.as_ref(), &key, limit, || {
                LexemeDfa::build_in(&hir, limit, cache.as_ref())
            });
            built.unwrap_or_else(|e| {
                crate::lexeme::note_failure();
                let _ = self.error.set(e);
                Arc::new(LexemeDfa::never())
            })
        })
    }

    /// Built, and in trouble: its build failed or it outgrew its size limit.
    fn failed(&self) -> bool {
        self.cell.get().is_some_and(|d| d.overflowed()) || self.error.get().is_some()
    }
}

/// What predicting each rule adds to an Earley set (all items with the set itself as
/// origin): rule `r`'s dots are `dots[dot_at[r]..dot_at[r + 1]]`, its lexemes likewise, in
/// two flat tables (a large schema's grammar has thousands of rules).
#[derive(Clone, Debug, Default)]
pub(crate) struct Predictions {
    pub dots: Vec<DotId>,
    pub dot_at: Vec<u32>,
    pub lexemes: Vec<LexemeId>,
    pub lexeme_at: Vec<u32>,
    /// Some dot of the closure expects a token reference.
    pub tokens: Vec<bool>,
}

impl Predictions {
    /// The dots, the lexemes, and whether a token reference is expected, of rule `r`'s
    /// prediction closure.
    #[inline]
    pub fn of(&self, r: RuleId) -> (&[DotId], &[LexemeId], bool) {
        let r = r.0 as usize;
        (
            &self.dots[self.dot_at[r] as usize..self.dot_at[r + 1] as usize],
            &self.lexemes[self.lexeme_at[r] as usize..self.lexeme_at[r + 1] as usize],
            self.tokens[r],
        )
    }
}

/// The compiled grammar. See the module docs.
#[derive(Debug)]
pub struct Grammar {
    pub(crate) rule_names: Vec<String>,
    pub(crate) nullable: Vec<bool>,
    pub(crate) dot_next: Vec<AfterDot>,
    pub(crate) dot_lhs: Vec<RuleId>,
    /// The symbol after this dot is the last of its production.
    pub(crate) dot_penult: Vec<bool>,
    pub(crate) predictions: Predictions,
    pub(crate) lexemes: Vec<Lexeme>,
    pub(crate) token_refs: Vec<TokenAst>,
    /// The augmented start rule `S' -> start`; its completion means acceptance.
    pub(crate) start_rule: RuleId,
    pub(crate) accept_dot: DotId,
    pub(crate) limits: Limits,
    productions: usize,
    /// Shortest derivations, for completions under a budget (computed on first use).
    shortest: std::sync::OnceLock<crate::complete::Shortest>,
}

impl Grammar {
    #[inline]
    pub(crate) fn next(&self, dot: DotId) -> AfterDot {
        self.dot_next[dot.0 as usize]
    }

    #[inline]
    pub(crate) fn lhs(&self, dot: DotId) -> RuleId {
        self.dot_lhs[dot.0 as usize]
    }

    pub(crate) fn shortest(&self) -> &crate::complete::Shortest {
        self.shortest
            .get_or_init(|| crate::complete::Shortest::new(self))
    }

    /// The error to report if a lexeme DFA could not be built within `max_lexeme_bytes`, or a
    /// lazily built one needed a state past it ([`LexemeDfa::overflowed`]): recognition is
    /// then no longer exact.
    pub fn overflow(&self) -> Option<crate::RecognizeError> {
        if !crate::lexeme::any_failed() {
            return None;
        }
        self.lexemes.iter().any(|l| l.dfa.failed()).then(|| {
            crate::RecognizeError::limit(
                "the states of a lexeme's automaton",
                self.limits.max_lexeme_bytes + 1,
                "max_lexeme_bytes",
                self.limits.max_lexeme_bytes,
            )
        })
    }

    /// The lexemes, indexed by [`LexemeId`].
    pub fn lexemes(&self) -> &[Lexeme] {
        &self.lexemes
    }

    /// One lexeme.
    #[inline]
    pub fn lexeme(&self, id: LexemeId) -> &Lexeme {
        &self.lexemes[id.0 as usize]
    }

    /// The token references, indexed by [`TokenRefId`].
    pub fn token_refs(&self) -> &[TokenAst] {
        &self.token_refs
    }

    /// Whether the grammar contains token references at all.
    pub fn has_token_refs(&self) -> bool {
        !self.token_refs.is_empty()
    }

    /// The limits this grammar was compiled with (the recognizer enforces the run-time ones).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Rule names (anonymous rules are named after their parent, e.g. `root#3`).
    pub fn rule_name(&self, id: RuleId) -> &str {
        &self.rule_names[id.0 as usize]
    }

    /// A one-line summary: counts of rules, productions, lexemes and DFA states.
    pub fn summary(&self) -> String {
        let states: usize = self
            .lexemes
            .iter()
            .filter_map(|l| l.dfa.cell.get())
            .map(|d| d.len())
            .sum();
        format!(
            "{} rules, {} productions, {} lexemes ({} DFA states), {} token refs",
            self.rule_names.len(),
            self.productions,
            self.lexemes.len(),
            states,
            self.token_refs.len()
        )
    }
}

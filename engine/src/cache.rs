//! [`MaskCache`]: the token sets of lexeme DFA states, shared by every constraint on one
//! token space.
//!
//! A lexeme's DFA is identified by its regular expression and its state numbering (see
//! [`corral_grammar::Lexeme::key`] and [`LexemeDfa::numbering`]): DFAs built whole number
//! their states the same way every time, but one built lazily numbers them in the order
//! they are reached, so two grammars share a lazily built DFA's token sets only when they
//! compiled through one `DfaCache` (and so share the DFA itself). A server that compiles a
//! new JSON Schema per request through one `DfaCache` finds the string bodies, numbers and
//! separators of earlier schemas already done. The cache
//! is a handle the caller owns (one per loaded tokenizer), bounded by the bytes it holds:
//! past [`MaskCacheLimits::max_bytes`] it is emptied and refills from what is used next.
//!
//! A cache may have a *base* ([`MaskCache::with_base`]): another cache, made beforehand and
//! never written again, that it reads where it holds nothing. [`MaskCache::prefilled`]
//! makes one from a grammar: every state of its lexemes whose DFAs number their states by
//! regex alone, kept by state (class numbers are each cache's own). From the lexemes every
//! JSON Schema grammar of some options shares, it serves a new schema's brackets and
//! separators, with their whitespace, from its first mask; it does not depend on any other
//! grammar, and it stays when the cache over it is emptied.

use crate::classes::StateClasses;
use crate::constraint::Constraint;
use crate::tokens::{
    AsciiBytes, BodyRuns, LexTokens, Loops, RunPaths, SuffixWalk, walk_generic, walk_suffixes,
};
use corral_grammar::{DEAD, Grammar, LexemeDfa, LexemeId, Residual, StateId};
use corral_trie::{Alphabet, Prefix, TokenSpace};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// Bounds of a [`MaskCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskCacheLimits {
    /// Most bytes of token sets held (approximate: bitsets and tries). Default 512 MiB: the
    /// generic sets of a state take a bit per token (16-32 KiB at 128k-256k tokens), so
    /// about 16,000-32,000 states, far more than the grammars of a busy server touch.
    pub max_bytes: usize,
}

impl Default for MaskCacheLimits {
    fn default() -> MaskCacheLimits {
        MaskCacheLimits {
            max_bytes: 512 << 20,
        }
    }
}

/// How a [`MaskCache`] has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskCacheStats {
    /// States whose token sets are held now.
    pub entries: usize,
    /// Approximate bytes held.
    pub bytes: usize,
    /// Lookups answered from the cache, since it was made (not reset by emptying).
    pub hits: u64,
    /// Lookups that had to walk the DFA against the vocabulary, since it was made.
    pub misses: u64,
    /// Of the hits, those answered from the base ([`MaskCache::with_base`]).
    pub base_hits: u64,
    /// Times the cache was emptied for its bound.
    pub resets: u64,
}

/// A lexeme DFA state, as the cache keys it: the DFA's key (its regex) and numbering (see
/// `LexemeDfa::numbering`), and the state or its class.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regex: Arc<str>,
    numbering: u64,
    at: StateOrClass,
}

/// Where in a DFA a cache entry belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StateOrClass {
    /// One state, by index.
    State(u32),
    /// Every state of a class ([`crate::classes`]): states no token tells apart share the
    /// sets of the first one walked. By the class tables' generation and the class: a
    /// table made again after the tables were emptied numbers its classes afresh.
    Class(u32, u32),
}

impl Key {
    fn state(regex: &Arc<str>, dfa: &LexemeDfa, state: StateId) -> Key {
        Key {
            regex: regex.clone(),
            numbering: dfa.numbering(),
            at: StateOrClass::State(state.index() as u32),
        }
    }
}

/// An operand DFA and the [`BodyRuns`] made from one of its states.
type PlainRuns = (Arc<LexemeDfa>, Arc<BodyRuns>);

/// Suffix walks of one slice for one [`Prefix`], by DFA state.
type Walks = RwLock<FxHashMap<Key, Arc<SuffixWalk>>>;

/// DFAs whose state classes are kept at once (then they start over).
const CLASS_TABLES: usize = 256;

/// What an entry of the residuals' map is counted as, besides its key's text (which the
/// map may keep after the DFA that named it is gone).
const RESIDUAL_ENTRY_BYTES: usize = 64;

/// Token sets made beforehand for other caches to read ([`MaskCache::prefilled`],
/// [`MaskCache::with_base`]). They are kept by state, never by class: class numbers are
/// each cache's own, so only a base made this way means the same in every cache over it.
#[derive(Clone, Debug)]
pub struct MaskBase(Arc<MaskCache>);

impl MaskBase {
    /// The base's counters: its entries and bytes.
    pub fn stats(&self) -> MaskCacheStats {
        self.0.stats()
    }
}

/// Token sets of lexeme DFA states for one token space. See the module docs.
#[derive(Debug)]
pub struct MaskCache {
    space: Arc<TokenSpace>,
    limits: MaskCacheLimits,
    generic: RwLock<FxHashMap<Key, Arc<LexTokens>>>,
    /// Generic sets by the residual of the state they were walked from, with its offset:
    /// a state of another composed DFA with the same residual takes them, its end states
    /// mapped (see [`LexemeDfa::residual`]). The separators of different keys end alike
    /// (`... ":" ws`), as a plain `ws` does.
    residuals: RwLock<FxHashMap<Residual, (u32, Arc<LexTokens>)>>,
    /// The trie's paths through counted runs of single bytes, by the bytes and the room
    /// left (see [`RunPaths`]).
    run_paths: RwLock<FxHashMap<(u128, u32), Arc<RunPaths>>>,
    /// The runs of a string body's leaving tokens from a state many states' first bytes
    /// lead to (see [`BodyRuns`]).
    body_runs: RwLock<FxHashMap<Key, Arc<BodyRuns>>>,
    /// [`BodyRuns`] made from a state of an operand DFA, for the products over it whose
    /// states match that state (see [`LexemeDfa::first_alone`]), by the operand's address
    /// (it is held here too) and the state's index.
    plain_runs: RwLock<FxHashMap<(usize, u32), PlainRuns>>,
    /// Per [`Alphabet`] and [`Prefix`]: walks of its slice's suffix trie.
    walks: [[Walks; 3]; 2],
    /// Per DFA (key, numbering): the classes of its states.
    classes: Mutex<FxHashMap<(Arc<str>, u64), StateClasses>>,
    /// Per DFA (key, numbering): what its generic walks found about which states loop or
    /// stay inside (see [`Loops`]), so that a search from one state serves the next walk.
    loops: Mutex<FxHashMap<(Arc<str>, u64), Loops>>,
    /// The longest token's bytes: how far ahead a state's class looks.
    depth: usize,
    /// A base's entries ([`MaskBase`]), read when this cache holds none; never written.
    base: Option<Arc<MaskCache>>,
    /// Whether sets are kept by state only, never by class: a base's entries must mean the
    /// same in every cache over it, and class numbers are each cache's own.
    by_state: bool,
    bytes: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    base_hits: AtomicU64,
    resets: AtomicU64,
    /// Bumped, under the `classes` lock, whenever the class tables are emptied.
    class_generation: AtomicU32,
}

impl MaskCache {
    /// An empty cache for `space`, with default limits. Slices the vocabulary now (a few
    /// milliseconds for a large one), so that no mask waits for it.
    pub fn new(space: Arc<TokenSpace>) -> Arc<MaskCache> {
        MaskCache::with_limits(space, MaskCacheLimits::default())
    }

    /// An empty cache for `space` bounded by `limits`; slices the vocabulary now, as
    /// [`MaskCache::new`].
    pub fn with_limits(space: Arc<TokenSpace>, limits: MaskCacheLimits) -> Arc<MaskCache> {
        Arc::new(MaskCache::empty(space, limits, None))
    }

    /// An empty cache on `base`'s token space that reads `base`'s entries where it holds
    /// none, bounded by `limits` in the bytes of its own.
    pub fn with_base(base: &MaskBase, limits: MaskCacheLimits) -> Arc<MaskCache> {
        Arc::new(MaskCache::empty(
            base.0.space.clone(),
            limits,
            Some(base.0.clone()),
        ))
    }

    /// A base ([`MaskBase`]) holding the token sets of every state of `grammar`'s lexemes
    /// whose DFAs number their states by regex alone ([`LexemeDfa::numbering`] 0). A grammar
    /// with the lexemes every JSON Schema grammar of some options shares (brackets and
    /// separators with their whitespace) makes a base that serves a schema's first masks as
    /// if those lexemes had been seen before; nothing in it depends on any other grammar.
    /// Returns the base and the number of states reached.
    pub fn prefilled(space: Arc<TokenSpace>, grammar: &Arc<Grammar>) -> (MaskBase, usize) {
        let limits = MaskCacheLimits {
            max_bytes: usize::MAX,
        };
        let mut cache = MaskCache::empty(space, limits, None);
        cache.by_state = true;
        let cache = Arc::new(cache);
        let c = Constraint::with_cache(grammar.clone(), &cache);
        let mut walked = 0;
        for (i, lexeme) in grammar.lexemes().iter().enumerate() {
            let dfa = lexeme.dfa();
            if dfa.numbering() != 0 {
                continue;
            }
            for state in reachable_states(dfa) {
                c.state_tokens(LexemeId(i as u32), state);
                walked += 1;
            }
        }
        (MaskBase(cache), walked)
    }

    fn empty(
        space: Arc<TokenSpace>,
        limits: MaskCacheLimits,
        base: Option<Arc<MaskCache>>,
    ) -> MaskCache {
        space.prepare_slices();
        let depth = space.longest_token();
        MaskCache {
            space,
            limits,
            generic: RwLock::default(),
            residuals: RwLock::default(),
            run_paths: RwLock::default(),
            body_runs: RwLock::default(),
            plain_runs: RwLock::default(),
            walks: Default::default(),
            classes: Mutex::default(),
            loops: Mutex::default(),
            depth,
            base,
            by_state: false,
            bytes: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            base_hits: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            class_generation: AtomicU32::new(0),
        }
    }

    /// The token space whose sets this cache holds.
    pub fn space(&self) -> &Arc<TokenSpace> {
        &self.space
    }

    /// The longest token's bytes: token sets depend on what a DFA does with that many bytes
    /// at most (see [`LexemeDfa::representative`]).
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// A snapshot of the counters; entries counts every map's (generic sets, suffix walks,
    /// runs and paths).
    pub fn stats(&self) -> MaskCacheStats {
        let entries = self.generic.read().map_or(0, |m| m.len())
            + self.residuals.read().map_or(0, |m| m.len())
            + self.run_paths.read().map_or(0, |m| m.len())
            + self.body_runs.read().map_or(0, |m| m.len())
            + self.plain_runs.read().map_or(0, |m| m.len())
            + self
                .walks
                .iter()
                .flatten()
                .map(|w| w.read().map_or(0, |m| m.len()))
                .sum::<usize>();
        MaskCacheStats {
            entries,
            bytes: self.bytes.load(Relaxed),
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            base_hits: self.base_hits.load(Relaxed),
            resets: self.resets.load(Relaxed),
        }
    }

    /// Empties the cache (constraints keep the sets they already hold).
    pub fn clear(&self) {
        // A poisoned lock means a panic elsewhere while inserting: the map is still a map.
        self.generic
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.residuals
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.run_paths
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.body_runs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.plain_runs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        for w in self.walks.iter().flatten() {
            w.write().unwrap_or_else(|e| e.into_inner()).clear();
        }
        let mut classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        classes.clear();
        // A walk under way keeps its class's old generation (see `MaskCache::class`).
        self.class_generation.fetch_add(1, Relaxed);
        drop(classes);
        self.loops.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.bytes.store(0, Relaxed);
    }

    /// The generic token sets of `state` of the DFA named `key`, with the offsets that map
    /// their end states to this DFA's ([`LexemeDfa::counterpart`]): equal where the sets
    /// were walked from `state` itself, else those of another composed DFA's state with
    /// the same residual, and of `state`'s.
    pub(crate) fn generic(
        &self,
        key: &Arc<str>,
        dfa: &LexemeDfa,
        state: StateId,
    ) -> (Arc<LexTokens>, u32, u32) {
        if let Some(held) = self.held(key, dfa, state) {
            self.hits.fetch_add(1, Relaxed);
            return held;
        }
        let residual = dfa.residual(state);
        let mut k = Key::state(key, dfa, state);
        if !self.by_state
            && let Some(class) = self.class(key, dfa, state)
        {
            k.at = StateOrClass::Class(class.0, class.1);
        }
        let mut walked = false;
        let sets = self.get_or(
            |c| &c.generic,
            k,
            || {
                walked = true;
                let body_runs = |from, firsts| {
                    let k = Key::state(key, dfa, from);
                    self.get_or(
                        |c| &c.body_runs,
                        k,
                        || {
                            // The plain body of a key that must not be one of some names: made once
                            // for every such key over the same plain key.
                            let runs = dfa
                                .first_alone(from)
                                .and_then(|(a, p)| {
                                    self.plain_body_runs(a, p, firsts).in_dfa(dfa, from)
                                })
                                .unwrap_or_else(|| BodyRuns::new(dfa, from, &self.space, firsts));
                            let bytes = runs.memory_usage();
                            (Arc::new(runs), bytes)
                        },
                    )
                };
                // Taken out for the walk (a walk of the same DFA meanwhile starts afresh).
                let dfa_key = (key.clone(), dfa.numbering());
                let mut loops = self
                    .loops
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&dfa_key)
                    .unwrap_or_else(|| Loops::new(Alphabet::Strings, self.depth, true));
                let run_paths = |bytes, room| self.run_paths(bytes, room);
                let t = walk_generic(
                    dfa,
                    state,
                    &self.space,
                    &mut loops,
                    (&body_runs, &run_paths),
                );
                let mut kept = self.loops.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() >= CLASS_TABLES {
                    kept.clear();
                }
                kept.insert(dfa_key, loops);
                drop(kept);
                let bytes = sets_bytes(&t);
                (Arc::new(t), bytes)
            },
        );
        // Only sets walked from this very state name its end states (a class's are the
        // first walked state's).
        if walked {
            return self.by_residual(residual, sets);
        }
        (sets, 0, 0)
    }

    /// The generic sets held for `state` of the DFA named `key`: by its residual (walked
    /// from a state of this DFA or another), or by the state itself. With the offsets, as
    /// [`MaskCache::generic`].
    fn held(
        &self,
        key: &Arc<str>,
        dfa: &LexemeDfa,
        state: StateId,
    ) -> Option<(Arc<LexTokens>, u32, u32)> {
        if let Some((r, here)) = dfa.residual(state)
            && let Some((there, sets)) = self.find(&|c| &c.residuals, &r)
        {
            return Some((sets, there, here));
        }
        self.find(&|c| &c.generic, &Key::state(key, dfa, state))
            .map(|sets| (sets, 0, 0))
    }

    /// Sets whose end states are this DFA's (from `state` itself), kept by `state`'s
    /// residual as well, if it has one; with the offsets, as [`MaskCache::generic`].
    fn by_residual(
        &self,
        residual: Option<(Residual, u32)>,
        sets: Arc<LexTokens>,
    ) -> (Arc<LexTokens>, u32, u32) {
        let Some((r, here)) = residual else {
            return (sets, 0, 0);
        };
        let mut m = self.residuals.write().unwrap_or_else(|e| e.into_inner());
        let bytes = RESIDUAL_ENTRY_BYTES + r.segments.len();
        if m.insert(r, (here, sets.clone())).is_none() {
            self.bytes.fetch_add(bytes, Relaxed);
        }
        (sets, here, here)
    }

    /// The generic sets of `state`, a later count of the byte run (`[ \t\n\r]{0,32}`
    /// before a key) that `earlier`'s sets were found for (with their offsets, as
    /// [`MaskCache::generic`] gives them): those sets less the tokens that start with more
    /// of the run's bytes than `state` has room for (see [`LexTokens::along_run`]). In
    /// pretty-printed JSON an indentation takes a few tokens, and each count they reach
    /// would otherwise walk the trie. Kept as `state`'s own; `None` where the earlier sets
    /// do not serve.
    pub(crate) fn along_run(
        &self,
        key: &Arc<str>,
        dfa: &LexemeDfa,
        state: StateId,
        (sets, from, to): (&LexTokens, u32, u32),
    ) -> Option<(Arc<LexTokens>, u32, u32)> {
        if let Some(held) = self.held(key, dfa, state) {
            self.hits.fetch_add(1, Relaxed);
            return Some(held);
        }
        let run = dfa.byte_run(state)?;
        let paths = self.run_paths(run.bytes, run.room);
        let derived = sets.along_run(&paths, &self.space, |t| dfa.counterpart(t, from, to))?;
        let sets = self.get_or(
            |c| &c.generic,
            Key::state(key, dfa, state),
            || {
                let bytes = sets_bytes(&derived);
                (Arc::new(derived), bytes)
            },
        );
        Some(self.by_residual(dfa.residual(state), sets))
    }

    /// The paths of the trie through a run of `bytes` with `room` left (remembered).
    fn run_paths(&self, bytes: u128, room: u32) -> Arc<RunPaths> {
        self.get_or(
            |c| &c.run_paths,
            (bytes, room),
            || {
                let paths = RunPaths::new(&self.space, bytes, room);
                let used = paths.memory_usage();
                (Arc::new(paths), used)
            },
        )
    }

    /// What the DFA named `key` does with the suffixes of `alphabet`'s slice from `state`,
    /// for their tokens of kind `want`.
    pub(crate) fn walk(
        &self,
        key: &Arc<str>,
        dfa: &LexemeDfa,
        state: StateId,
        (alphabet, want): (Alphabet, Prefix),
    ) -> Arc<SuffixWalk> {
        let k = Key::state(key, dfa, state);
        self.get_or(
            |c| &c.walks[alphabet.index()][want.index()],
            k,
            || {
                let slice = self.space.slice_of(alphabet);
                let w = walk_suffixes(dfa, state, (slice, want), self.depth);
                let bytes = w.alive.as_slice().len() * 8 + w.endings.len() * 8;
                (Arc::new(w), bytes)
            },
        )
    }

    /// The [`BodyRuns`] of state `p` of `a` (see [`LexemeDfa::first_alone`]).
    fn plain_body_runs(&self, a: &Arc<LexemeDfa>, p: StateId, firsts: AsciiBytes) -> Arc<BodyRuns> {
        let k = (Arc::as_ptr(a) as usize, p.index() as u32);
        let (_, runs) = self.get_or(
            |c| &c.plain_runs,
            k,
            || {
                let runs = BodyRuns::new(a, p, &self.space, firsts);
                let bytes = runs.memory_usage();
                // The DFA is kept with its runs, so that its address names no other while held.
                ((a.clone(), Arc::new(runs)), bytes)
            },
        );
        runs
    }

    /// The entry of `key` in the map `map` picks, of this cache or else of its base.
    fn find<K: std::hash::Hash + Eq, V: Clone>(
        &self,
        map: &impl Fn(&MaskCache) -> &RwLock<FxHashMap<K, V>>,
        key: &K,
    ) -> Option<V> {
        let own = map(self)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        own.or_else(|| {
            let found = self.base.as_ref()?.find(map, key);
            if found.is_some() {
                self.base_hits.fetch_add(1, Relaxed);
            }
            found
        })
    }

    /// The class of a state the cache does not hold (see [`crate::classes`]), with the
    /// class tables' generation.
    fn class(&self, key: &Arc<str>, dfa: &LexemeDfa, state: StateId) -> Option<(u32, u32)> {
        let mut tables = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        if tables.len() >= CLASS_TABLES && !tables.contains_key(&(key.clone(), dfa.numbering())) {
            tables.clear();
            // A table made again numbers its classes afresh: sets kept by an old number
            // would answer for another class. The generation keeps them apart (a walk
            // under way inserts under the old one), and the old sets go with the tables.
            self.class_generation.fetch_add(1, Relaxed);
            let mut generic = self.generic.write().unwrap_or_else(|e| e.into_inner());
            let mut freed = 0;
            generic.retain(|k, t| {
                let by_state = matches!(k.at, StateOrClass::State(_));
                if !by_state {
                    freed += sets_bytes(t);
                }
                by_state
            });
            let _ = self
                .bytes
                .fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(freed)));
        }
        let generation = self.class_generation.load(Relaxed);
        let class = tables
            .entry((key.clone(), dfa.numbering()))
            .or_default()
            .class(dfa, state, self.depth)?;
        Some((generation, class))
    }

    fn get_or<K: std::hash::Hash + Eq, V: Clone>(
        &self,
        map: impl Fn(&MaskCache) -> &RwLock<FxHashMap<K, V>>,
        key: K,
        make: impl FnOnce() -> (V, usize),
    ) -> V {
        if let Some(v) = self.find(&map, &key) {
            self.hits.fetch_add(1, Relaxed);
            return v;
        }
        self.misses.fetch_add(1, Relaxed);
        // Computed outside the lock: two threads may both compute one entry; one is kept.
        let (v, bytes) = make();
        if self.bytes.load(Relaxed) + bytes > self.limits.max_bytes {
            self.clear();
            self.resets.fetch_add(1, Relaxed);
        }
        let mut m = map(self).write().unwrap_or_else(|e| e.into_inner());
        if m.insert(key, v.clone()).is_none() {
            self.bytes.fetch_add(bytes, Relaxed);
        }
        v
    }
}

/// The bytes a state's generic sets are counted as.
fn sets_bytes(t: &LexTokens) -> usize {
    t.inside.memory_usage()
        + t.suffixes.iter().map(|s| s.1.memory_usage()).sum::<usize>()
        + t.subtrees.len() * 8
}

/// The states of `dfa` reachable from its start, in the order a breadth-first search over
/// bytes finds them (every transition is built on the way).
fn reachable_states(dfa: &LexemeDfa) -> Vec<StateId> {
    if dfa.start() == DEAD {
        return Vec::new();
    }
    let mut seen = FxHashSet::default();
    let mut out = vec![dfa.start()];
    seen.insert(dfa.start());
    let mut k = 0;
    while k < out.len() {
        let s = out[k];
        k += 1;
        for b in 0..=255u8 {
            let t = dfa.next(s, b);
            if t != DEAD && seen.insert(t) {
                out.push(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::tests::space_of;
    use corral_grammar::{CompileOptions, compile_gbnf};

    /// Emptying the class tables (past [`CLASS_TABLES`] DFAs) drops the sets kept by class:
    /// a table made again numbers its classes afresh, so an old class number would name
    /// another class's sets.
    #[test]
    fn sets_kept_by_class_go_with_the_class_tables() {
        let cache = MaskCache::new(space_of(&[b"a", b" ", b"aaaa", b"}"]));
        // The run may end the lexeme (no byte run, whose counts take an earlier count's
        // sets instead).
        let g = compile_gbnf(
            r#"root ::= "{" [a ]{0,60} "}"?"#,
            &CompileOptions::default(),
        )
        .unwrap();
        let c = Constraint::with_cache(g.clone(), &cache);
        let by_class = |cache: &MaskCache| {
            let generic = cache.generic.read().unwrap();
            generic
                .keys()
                .filter(|k| matches!(k.at, StateOrClass::Class(..)))
                .count()
        };
        for state in reachable_states(g.lexeme(LexemeId(0)).dfa()) {
            c.state_tokens(LexemeId(0), state);
        }
        assert!(by_class(&cache) > 0, "the run's states share classes");
        let before = cache.stats().bytes;
        {
            let mut tables = cache.classes.lock().unwrap();
            for i in 0..CLASS_TABLES {
                tables.insert(
                    (Arc::from(format!("other {i}")), 0),
                    StateClasses::default(),
                );
            }
        }
        // A DFA the tables do not hold asks for a class: the tables are emptied, and later
        // classes are of a new generation (a walk under way keeps the old one).
        let generation = cache.class_generation.load(Relaxed);
        let dfa = g.lexeme(LexemeId(0)).dfa();
        cache.class(&Arc::from("another"), dfa, dfa.start());
        assert_eq!(by_class(&cache), 0);
        assert_eq!(cache.class_generation.load(Relaxed), generation + 1);
        assert!(
            cache.stats().bytes < before,
            "the dropped sets' bytes are given back"
        );
    }
}

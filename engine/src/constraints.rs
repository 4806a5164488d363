//! [`ConstraintCache`]: compiled constraints kept for reuse, so that a grammar or schema
//! seen again starts warm (its compiled lexemes and the token sets of the states it
//! visited), with one [`MaskCache`] shared by every constraint of the token space.
//!
//! Entries are keyed by a caller's string (a grammar's text and compile options, a
//! schema's text and options) or by a compiled grammar's identity. The cache is bounded
//! twice ([`CacheLimits`]): by entries, and by the heap bytes it holds. Half of the bytes
//! go to the token sets (the [`MaskCache`], emptied when full), half to lexeme DFAs: those
//! of the kept constraints and of the [`DfaCache`] their compiles share (itself at most a
//! quarter). DFAs built on demand grow after a constraint is kept, as masks reach their
//! states, so the bytes are counted again at each insertion and at
//! [`ConstraintCache::trim`]; the least recently used constraints are dropped until the
//! rest fit. A dropped constraint's memory goes back once no generation holds it.
//!
//! A caller that may still refuse a compiled constraint (a budget no output fits, a first
//! mask that fails) looks it up with [`ConstraintCache::get`], compiles it with
//! [`ConstraintCache::compile`], and keeps it with [`ConstraintCache::insert`] only once it
//! is accepted: refused constraints never stay.

use crate::cache::{MaskCache, MaskCacheLimits};
use crate::constraint::Constraint;
use corral_grammar::{DfaCache, Grammar};
use corral_trie::TokenSpace;
use rustc_hash::FxHashSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Default number of constraints kept.
pub const DEFAULT_CONSTRAINTS: usize = 64;

/// Default bound of a [`ConstraintCache`]'s memory: 1 GiB (512 MiB of token sets, 512 MiB
/// of lexeme DFAs).
pub const DEFAULT_CACHE_BYTES: usize = 1 << 30;

/// Bounds of a [`ConstraintCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most constraints kept (at least one). Default [`DEFAULT_CONSTRAINTS`].
    pub constraints: usize,
    /// Most heap bytes held, token sets and DFAs together (see the module docs). Default
    /// [`DEFAULT_CACHE_BYTES`].
    pub bytes: usize,
}

impl Default for CacheLimits {
    fn default() -> CacheLimits {
        CacheLimits {
            constraints: DEFAULT_CONSTRAINTS,
            bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// What a [`ConstraintCache`] holds and how it has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Constraints kept now.
    pub entries: usize,
    /// Heap bytes held now: the kept constraints' DFAs and tables, the DFA cache's, the
    /// token sets.
    pub bytes: usize,
    /// Lookups that found a kept constraint ([`ConstraintCache::get`],
    /// [`ConstraintCache::get_or_compile`], [`ConstraintCache::for_grammar`]).
    pub hits: u64,
    /// Lookups that found none.
    pub misses: u64,
    /// Constraints dropped for the byte bound.
    pub evicted_for_bytes: u64,
}

/// A bounded cache of constraints for one token space. See the module docs.
#[derive(Debug)]
pub struct ConstraintCache {
    masks: Arc<MaskCache>,
    dfas: DfaCache,
    limits: CacheLimits,
    /// Least recently used first.
    entries: Mutex<Vec<(Key, Arc<Constraint>)>>,
    hits: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Text(String),
    /// A grammar by address: the entry holds the grammar (through its constraint), so the
    /// address cannot be reused while the entry lives.
    Grammar(usize),
}

impl ConstraintCache {
    /// An empty cache of at most `capacity` constraints (at least one) on `space`, with the
    /// default byte bound.
    pub fn new(space: Arc<TokenSpace>, capacity: usize) -> ConstraintCache {
        ConstraintCache::with_limits(
            space,
            CacheLimits {
                constraints: capacity,
                ..CacheLimits::default()
            },
        )
    }

    /// An empty cache on `space` within `limits`.
    pub fn with_limits(space: Arc<TokenSpace>, limits: CacheLimits) -> ConstraintCache {
        let masks = MaskCache::with_limits(
            space,
            MaskCacheLimits {
                max_bytes: limits.bytes / 2,
            },
        );
        ConstraintCache::with_masks(masks, limits)
    }

    /// An empty cache whose constraints share `masks` (whose own bound then stands for the
    /// token sets).
    pub fn with_masks(masks: Arc<MaskCache>, limits: CacheLimits) -> ConstraintCache {
        ConstraintCache {
            masks,
            dfas: DfaCache::new(limits.bytes / 4),
            limits: CacheLimits {
                constraints: limits.constraints.max(1),
                ..limits
            },
            entries: Mutex::new(Vec::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// The token-set cache shared by the constraints.
    pub fn masks(&self) -> &Arc<MaskCache> {
        &self.masks
    }

    /// A DFA cache for the grammars compiled for this cache: grammars that share a lexeme
    /// then share its DFA, and through it the token sets of its states.
    pub fn dfas(&self) -> &DfaCache {
        &self.dfas
    }

    /// Most constraints kept.
    pub fn capacity(&self) -> usize {
        self.limits.constraints
    }

    /// The bounds in force (the constraint count raised to at least one).
    pub fn limits(&self) -> CacheLimits {
        self.limits
    }

    /// Constraints kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no constraint is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(hits, misses)` so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// Counts and bytes (the bytes are counted now: DFAs are read, not locked for long).
    pub fn cache_stats(&self) -> CacheStats {
        let entries = self.lock();
        CacheStats {
            entries: entries.len(),
            bytes: self.dfa_bytes(&entries) + self.masks.stats().bytes,
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            evicted_for_bytes: self.evicted.load(Relaxed),
        }
    }

    /// The constraint of a compiled grammar: the one made for this very grammar before,
    /// or a new one.
    pub fn for_grammar(&self, grammar: &Arc<Grammar>) -> Arc<Constraint> {
        let key = Key::Grammar(Arc::as_ptr(grammar) as usize);
        if let Some(c) = self.find(&key) {
            return c;
        }
        let c = self.compile(grammar.clone());
        self.keep(key, c.clone());
        c
    }

    /// The constraint kept under `key` (the text the grammar is compiled from and every
    /// option that changes it), or one from `compile`'s grammar, kept under `key`.
    pub fn get_or_compile<E>(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<Arc<Grammar>, E>,
    ) -> Result<Arc<Constraint>, E> {
        if let Some(c) = self.get(key) {
            return Ok(c);
        }
        // Compiled outside the lock: another thread may compile the same key meanwhile;
        // the later insert wins, both constraints work.
        let c = self.compile(compile()?);
        self.insert(key, c.clone());
        Ok(c)
    }

    /// The constraint kept under `key`, if any (a hit makes it the most recently used; a
    /// miss is counted).
    pub fn get(&self, key: &str) -> Option<Arc<Constraint>> {
        self.find(&Key::Text(key.to_string()))
    }

    /// A constraint of `grammar` sharing this cache's token sets, not kept (see
    /// [`ConstraintCache::insert`]).
    pub fn compile(&self, grammar: Arc<Grammar>) -> Arc<Constraint> {
        Constraint::with_cache(grammar, &self.masks)
    }

    /// Keeps `c` under `key` (replacing what was there), then drops the least recently
    /// used constraints past the bounds.
    pub fn insert(&self, key: &str, c: Arc<Constraint>) {
        self.keep(Key::Text(key.to_string()), c);
    }

    /// Drops the least recently used constraints while the cache holds more than its byte
    /// bound (DFAs grow as masks reach their states), and the DFA cache's oldest entries
    /// past its own. Cheap: a pass over the kept grammars' lexemes.
    pub fn trim(&self) {
        let mut entries = self.lock();
        self.trim_locked(&mut entries);
    }

    fn find(&self, key: &Key) -> Option<Arc<Constraint>> {
        let mut entries = self.lock();
        match entries.iter().position(|(k, _)| k == key) {
            Some(i) => {
                let entry = entries.remove(i);
                let c = entry.1.clone();
                entries.push(entry);
                self.hits.fetch_add(1, Relaxed);
                Some(c)
            }
            None => {
                self.misses.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn keep(&self, key: Key, c: Arc<Constraint>) {
        let mut entries = self.lock();
        entries.retain(|(k, _)| *k != key);
        if entries.len() >= self.limits.constraints {
            entries.remove(0);
        }
        entries.push((key, c));
        self.trim_locked(&mut entries);
    }

    /// Bytes of the DFAs (each once) and tables of `entries` and of the DFA cache.
    fn dfa_bytes(&self, entries: &[(Key, Arc<Constraint>)]) -> usize {
        let mut seen = FxHashSet::default();
        let kept: usize = entries.iter().map(|(_, c)| c.memory_usage(&mut seen)).sum();
        kept + self.dfas.bytes_besides(&seen)
    }

    fn trim_locked(&self, entries: &mut Vec<(Key, Arc<Constraint>)>) {
        self.dfas.trim();
        let budget = self.limits.bytes / 2;
        // The most recently kept constraint stays even alone past the bound: its
        // generation holds it anyway.
        while entries.len() > 1 && self.dfa_bytes(entries) > budget {
            entries.remove(0);
            self.evicted.fetch_add(1, Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Key, Arc<Constraint>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::{CompileOptions, compile_gbnf};
    use corral_trie::{TokenId, Vocabulary};

    fn space() -> Arc<TokenSpace> {
        let vocab = Vocabulary::from_parts(
            [(TokenId(0), b"a".to_vec()), (TokenId(1), b"b".to_vec())],
            [(TokenId(2), "</s>".to_string())],
        );
        Arc::new(TokenSpace::new(vocab, None, vec![TokenId(2)]))
    }

    type Compiled = Result<Arc<Grammar>, Box<corral_grammar::GrammarError>>;

    fn compile(text: &str) -> Compiled {
        compile_gbnf(text, &CompileOptions::default()).map_err(Box::new)
    }

    #[test]
    fn a_repeated_key_reuses_its_constraint_and_the_oldest_is_dropped() {
        let cache = ConstraintCache::new(space(), 2);
        let a = cache
            .get_or_compile("a", || compile("root ::= \"a\""))
            .unwrap();
        let again = cache
            .get_or_compile("a", || -> Compiled { panic!("compiled twice") })
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        cache
            .get_or_compile("b", || compile("root ::= \"b\""))
            .unwrap();
        // "a" was used last, so "b" is the oldest when "c" arrives.
        cache
            .get_or_compile("a", || compile("root ::= \"a\""))
            .unwrap();
        cache
            .get_or_compile("c", || compile("root ::= \"ab\""))
            .unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.stats(), (2, 3));
        let b = cache
            .get_or_compile("b", || compile("root ::= \"b\""))
            .unwrap();
        assert_eq!(cache.stats(), (2, 4), "b was dropped");
        assert!(Arc::ptr_eq(b.cache(), cache.masks()));
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_constraints_as_their_dfas_grow() {
        // Regexes whose DFAs are built on demand and grow with the input read:
        // (a|b)*a(a|b){k} needs a state per suffix of length k.
        let limits = CacheLimits {
            constraints: 64,
            bytes: 1 << 20,
        };
        let cache = ConstraintCache::with_limits(space(), limits);
        let mut held = Vec::new();
        for k in 8..40 {
            let key = format!("r{k}");
            let c = cache
                .get_or_compile(&key, || {
                    corral_grammar::compile_regex(
                        &format!("(a|b)*a(a|b){{{k}}}"),
                        &CompileOptions::default(),
                    )
                    .map_err(Box::new)
                })
                .unwrap();
            // Walk the DFA over up to a thousand states, as masks and completions would.
            let dfa = c.grammar().lexeme(corral_grammar::LexemeId(0)).dfa();
            let mut s = dfa.start();
            for i in 0..1000u32 {
                s = dfa.next(s, if i.count_ones() % 3 == 0 { b'a' } else { b'b' });
            }
            cache.trim();
            let st = cache.cache_stats();
            assert!(st.bytes <= limits.bytes, "{k}: {st:?}");
            held.push(Arc::downgrade(&c));
        }
        let st = cache.cache_stats();
        assert!(st.evicted_for_bytes > 0, "{st:?}");
        assert!(st.entries < 32, "{st:?}");
        // Dropped constraints are freed: nothing else holds them.
        let alive = held.iter().filter(|w| w.upgrade().is_some()).count();
        assert_eq!(alive, st.entries, "{st:?}");
    }

    #[test]
    fn a_constraint_compiled_but_not_inserted_is_not_kept() {
        let cache = ConstraintCache::new(space(), 4);
        assert!(cache.get("x").is_none());
        let c = cache.compile(compile("root ::= \"a\"").unwrap());
        assert!(Arc::ptr_eq(c.cache(), cache.masks()));
        assert_eq!(cache.len(), 0);
        cache.insert("x", c.clone());
        assert!(Arc::ptr_eq(&cache.get("x").unwrap(), &c));
        assert_eq!(cache.stats(), (1, 1));
    }

    #[test]
    fn a_grammar_is_found_by_identity_and_errors_are_not_kept() {
        let cache = ConstraintCache::new(space(), 4);
        let g = compile("root ::= \"a\"").unwrap();
        let c1 = cache.for_grammar(&g);
        let c2 = cache.for_grammar(&g);
        assert!(Arc::ptr_eq(&c1, &c2));
        let twin = compile("root ::= \"a\"").unwrap();
        assert!(!Arc::ptr_eq(&cache.for_grammar(&twin), &c1));
        assert!(
            cache
                .get_or_compile("bad", || compile("root ::= ("))
                .is_err()
        );
        assert_eq!(cache.len(), 2);
    }
}

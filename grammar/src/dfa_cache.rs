//! A cache of lexeme DFAs by regular expression, owned by the caller.
//!
//! Grammars share most of their lexemes (whitespace and separators, JSON strings and
//! numbers, formats), so a process that compiles many grammars (a server that gets a new
//! JSON Schema with each request) builds each DFA once when its compiles share a
//! [`DfaCache`] through [`crate::CompileOptions::dfa_cache`]. The cache is a handle: clones
//! share one store. It is bounded by the total number of DFA states it holds; past the
//! bound, the entries inserted first are dropped until the new one fits (grammars already
//! compiled keep their DFAs: entries are reference-counted). A DFA counts with the states
//! it had when it was inserted: one built lazily grows as masks need its states, each DFA
//! within the compile's `max_lexeme_bytes`. A compile without a cache
//! builds every DFA it needs (each distinct regex once per grammar), which is what a
//! benchmark of cold compiles wants.

use crate::error::ErrorKind;
use crate::lexeme::LexemeDfa;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Default bound of a [`DfaCache`]: DFA states held (about 16 MiB of tables for typical
/// lexemes).
pub const DEFAULT_DFA_CACHE_STATES: usize = 1 << 18;

/// A shared, bounded cache of lexeme DFAs. See the module docs.
#[derive(Clone, Debug)]
pub struct DfaCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// Each DFA with the states it was counted with.
    map: FxHashMap<Arc<str>, (Arc<LexemeDfa>, usize)>,
    /// Keys in insertion order, for eviction.
    order: VecDeque<Arc<str>>,
    states: usize,
    max_states: usize,
    hits: u64,
    misses: u64,
}

/// What a [`DfaCache`] holds and how it has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfaCacheStats {
    pub entries: usize,
    pub states: usize,
    pub hits: u64,
    pub misses: u64,
}

impl Default for DfaCache {
    fn default() -> DfaCache {
        DfaCache::new(DEFAULT_DFA_CACHE_STATES)
    }
}

impl DfaCache {
    /// An empty cache holding at most `max_states` DFA states in all.
    pub fn new(max_states: usize) -> DfaCache {
        DfaCache {
            inner: Arc::new(Mutex::new(Inner {
                map: FxHashMap::default(),
                order: VecDeque::new(),
                states: 0,
                max_states,
                hits: 0,
                misses: 0,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the map consistent (insertions are single
        // statements), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops every entry.
    pub fn clear(&self) {
        let mut c = self.lock();
        c.map.clear();
        c.order.clear();
        c.states = 0;
    }

    pub fn stats(&self) -> DfaCacheStats {
        let c = self.lock();
        DfaCacheStats {
            entries: c.map.len(),
            states: c.states,
            hits: c.hits,
            misses: c.misses,
        }
    }

    /// The DFA named `key`, or `build`'s (then cached). `size_limit` is the compile's
    /// `max_lexeme_bytes`: a cached DFA larger than that is not used.
    pub(crate) fn get_or_build(
        &self,
        key: &str,
        size_limit: usize,
        build: impl FnOnce() -> Result<LexemeDfa, ErrorKind>,
    ) -> Result<Arc<LexemeDfa>, ErrorKind> {
        {
            let mut c = self.lock();
            if let Some((d, _)) = c.map.get(key).cloned()
                && d.memory_usage() <= size_limit
            {
                c.hits += 1;
                return Ok(d);
            }
            c.misses += 1;
        }
        // Built outside the lock: two threads may build the same DFA; one copy is kept.
        let dfa = Arc::new(build()?);
        let mut c = self.lock();
        if dfa.len() > c.max_states {
            return Ok(dfa);
        }
        while c.states.saturating_add(dfa.len()) > c.max_states {
            let Some(old) = c.order.pop_front() else {
                break;
            };
            if let Some((_, counted)) = c.map.remove(&old) {
                c.states -= counted;
            }
        }
        let key: Arc<str> = Arc::from(key);
        let counted = dfa.len();
        if let Some((_, prev)) = c.map.insert(key.clone(), (dfa.clone(), counted)) {
            c.states -= prev;
        } else {
            c.order.push_back(key);
        }
        c.states += counted;
        Ok(dfa)
    }
}

impl LexemeDfa {
    /// [`LexemeDfa::build`] through `cache` (keyed by the regex's display form), if given.
    pub fn build_cached(
        hir: &regex_syntax::hir::Hir,
        size_limit: usize,
        cache: Option<&DfaCache>,
    ) -> Result<Arc<LexemeDfa>, ErrorKind> {
        build_with(cache, &hir.to_string(), size_limit, || {
            LexemeDfa::build_in(hir, size_limit, cache)
        })
    }
}

impl LexemeDfa {
    /// The whole DFA of `hir` by subset construction (every state built now), through
    /// `cache` if given: for sizing an automaton before combining it with another.
    pub fn build_whole(
        hir: &regex_syntax::hir::Hir,
        size_limit: usize,
        cache: Option<&DfaCache>,
    ) -> Result<Arc<LexemeDfa>, ErrorKind> {
        build_with(cache, &format!("#t {hir}"), size_limit, || {
            LexemeDfa::build_tables(hir, size_limit)
        })
    }
}

/// Looks `key` up in `cache` if there is one, else builds.
pub(crate) fn build_with(
    cache: Option<&DfaCache>,
    key: &str,
    size_limit: usize,
    build: impl FnOnce() -> Result<LexemeDfa, ErrorKind>,
) -> Result<Arc<LexemeDfa>, ErrorKind> {
    match cache {
        Some(c) => c.get_or_build(key, size_limit, build),
        None => build().map(Arc::new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_syntax::ParserBuilder;

    fn dfa(re: &str) -> LexemeDfa {
        let hir = ParserBuilder::new().build().parse(re).unwrap();
        LexemeDfa::build(&hir, 1 << 20).unwrap()
    }

    #[test]
    fn shares_hits_and_evicts_oldest_first() {
        let small = dfa("ab");
        let n = small.len();
        let cache = DfaCache::new(2 * n);
        let a = cache.get_or_build("a", 1 << 20, || Ok(dfa("ab"))).unwrap();
        let a2 = cache
            .get_or_build("a", 1 << 20, || panic!("cached"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        cache.get_or_build("b", 1 << 20, || Ok(dfa("cd"))).unwrap();
        cache.get_or_build("c", 1 << 20, || Ok(dfa("ef"))).unwrap();
        let s = cache.stats();
        assert_eq!((s.entries, s.states, s.hits, s.misses), (2, 2 * n, 1, 3));
        // "a" went first.
        let mut built = false;
        cache
            .get_or_build("a", 1 << 20, || {
                built = true;
                Ok(dfa("ab"))
            })
            .unwrap();
        assert!(built);
        cache.clear();
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn a_lazy_dfa_that_grew_after_insertion_is_evicted_with_the_count_it_came_with() {
        // Built lazily: the start state now, the others as transitions reach them.
        let hir = ParserBuilder::new().build().parse("[a-z]{0,40}x").unwrap();
        let cache = DfaCache::new(1 << 10);
        let lazy = cache
            .get_or_build("lazy", 1 << 20, || LexemeDfa::build(&hir, 1 << 20))
            .unwrap();
        let counted = cache.stats().states;
        let mut s = lazy.start();
        for _ in 0..30 {
            s = lazy.next(s, b'a');
        }
        assert!(lazy.len() > counted, "the DFA grew: {} states", lazy.len());
        // Filling the cache evicts it; the count must not go below zero.
        for i in 0..200 {
            let key = format!("k{i}");
            cache.get_or_build(&key, 1 << 20, || Ok(dfa("ab"))).unwrap();
        }
        let s = cache.stats();
        assert!(s.states <= 1 << 10, "{s:?}");
    }
}

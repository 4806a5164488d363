//! A cache of lexeme DFAs by regular expression, owned by the caller.
//!
//! Grammars share most of their lexemes (whitespace and separators, JSON strings and
//! numbers, formats), so a process that compiles many grammars (a server that gets a new
//! JSON Schema with each request) builds each DFA once when its compiles share a
//! [`DfaCache`] through [`crate::CompileOptions::dfa_cache`]. The cache is a handle: clones
//! share one store. It is bounded by the heap bytes its DFAs hold
//! ([`LexemeDfa::memory_usage`]): a DFA built on demand grows after it is inserted, as
//! masks need its states (each within the compile's `max_lexeme_bytes`), so the sizes are
//! read again at each insertion and at [`DfaCache::trim`], and the entries inserted first
//! are dropped until the rest fit. Grammars already compiled keep their DFAs (entries are
//! reference-counted): the memory goes back once no grammar holds them. A compile without a cache
//! builds every DFA it needs (each distinct regex once per grammar), which is what a
//! benchmark of cold compiles wants.

use crate::error::ErrorKind;
use crate::lexeme::{LexemeDfa, regex_key};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Default bound of a [`DfaCache`]: heap bytes of the DFAs held (the lexemes of thousands of
/// JSON Schemas; one pathological lexeme may take up to its `max_lexeme_bytes`).
pub const DEFAULT_DFA_CACHE_BYTES: usize = 64 << 20;

/// A shared, bounded cache of lexeme DFAs. See the module docs.
#[derive(Clone, Debug)]
pub struct DfaCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    map: FxHashMap<Arc<str>, Arc<LexemeDfa>>,
    /// Keys in insertion order, for eviction.
    order: VecDeque<Arc<str>>,
    max_bytes: usize,
    hits: u64,
    misses: u64,
}

impl Inner {
    /// Bytes the DFAs hold now.
    fn bytes(&self) -> usize {
        self.map.values().map(|d| d.memory_usage()).sum()
    }

    /// Drops the entries inserted first until the rest, and `room` more, fit.
    fn trim(&mut self, room: usize) {
        // Unbounded (a compile's private cache): nothing to drop, and summing every entry
        // at each insertion would make a compile of many lexemes quadratic.
        if self.max_bytes == usize::MAX {
            return;
        }
        let mut bytes = self.bytes();
        while bytes.saturating_add(room) > self.max_bytes {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(d) = self.map.remove(&old) {
                bytes = bytes.saturating_sub(d.memory_usage());
            }
        }
    }
}

/// What a [`DfaCache`] holds and how it has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfaCacheStats {
    /// DFAs held.
    pub entries: usize,
    /// Heap bytes of the DFAs held, now.
    pub bytes: usize,
    /// Lookups answered from the cache, since it was made ([`DfaCache::clear`] keeps the
    /// counts).
    pub hits: u64,
    /// Lookups that built a DFA (none cached, or the cached one was over the compile's
    /// `max_lexeme_bytes`), since the cache was made.
    pub misses: u64,
}

impl Default for DfaCache {
    fn default() -> DfaCache {
        DfaCache::new(DEFAULT_DFA_CACHE_BYTES)
    }
}

impl DfaCache {
    /// An empty cache holding DFAs of at most `max_bytes` in all.
    pub fn new(max_bytes: usize) -> DfaCache {
        DfaCache {
            inner: Arc::new(Mutex::new(Inner {
                map: FxHashMap::default(),
                order: VecDeque::new(),
                max_bytes,
                hits: 0,
                misses: 0,
            })),
        }
    }

    /// Most bytes held.
    pub fn max_bytes(&self) -> usize {
        self.lock().max_bytes
    }

    /// Bytes of the DFAs held whose address is not in `counted` (DFAs already counted
    /// elsewhere).
    pub fn bytes_besides(&self, counted: &rustc_hash::FxHashSet<usize>) -> usize {
        self.lock()
            .map
            .values()
            .filter(|d| !counted.contains(&(Arc::as_ptr(d) as usize)))
            .map(|d| d.memory_usage())
            .sum()
    }

    /// Drops the entries inserted first while the DFAs held (grown since they were
    /// inserted) take more than the bound.
    pub fn trim(&self) {
        self.lock().trim(0);
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
    }

    /// The entries, bytes and counts now (the bytes are summed over every entry).
    pub fn stats(&self) -> DfaCacheStats {
        let c = self.lock();
        DfaCacheStats {
            entries: c.map.len(),
            bytes: c.bytes(),
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
            if let Some(d) = c.map.get(key).cloned()
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
        let size = dfa.memory_usage();
        if size > c.max_bytes {
            return Ok(dfa);
        }
        c.trim(size);
        let key: Arc<str> = Arc::from(key);
        if c.map.insert(key.clone(), dfa.clone()).is_none() {
            c.order.push_back(key);
        }
        Ok(dfa)
    }
}

impl LexemeDfa {
    /// [`LexemeDfa::build`] through `cache` (keyed by [`crate::regex_key`]), if given.
    pub fn build_cached(
        hir: &regex_syntax::hir::Hir,
        size_limit: usize,
        cache: Option<&DfaCache>,
    ) -> Result<Arc<LexemeDfa>, ErrorKind> {
        build_with(cache, &regex_key(hir), size_limit, || {
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
        build_with(cache, &format!("#t {}", regex_key(hir)), size_limit, || {
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
        let n = small.memory_usage();
        let cache = DfaCache::new(2 * n);
        let a = cache.get_or_build("a", 1 << 20, || Ok(dfa("ab"))).unwrap();
        let a2 = cache
            .get_or_build("a", 1 << 20, || panic!("cached"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        cache.get_or_build("b", 1 << 20, || Ok(dfa("cd"))).unwrap();
        cache.get_or_build("c", 1 << 20, || Ok(dfa("ef"))).unwrap();
        let s = cache.stats();
        assert_eq!((s.entries, s.bytes, s.hits, s.misses), (2, 2 * n, 1, 3));
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
    fn a_lazy_dfa_that_grew_after_insertion_counts_its_bytes_now() {
        // Built lazily: the start state now, the others as transitions reach them.
        let hir = ParserBuilder::new().build().parse("[a-z]{0,40}x").unwrap();
        let small = dfa("ab").memory_usage();
        let cache = DfaCache::new(1 << 14);
        let lazy = cache
            .get_or_build("lazy", 1 << 20, || LexemeDfa::build(&hir, 1 << 20))
            .unwrap();
        let counted = cache.stats().bytes;
        let mut s = lazy.start();
        for _ in 0..30 {
            s = lazy.next(s, b'a');
        }
        assert!(
            cache.stats().bytes > counted,
            "the DFA grew: {:?}",
            cache.stats()
        );
        // Inserting more evicts it first; the bound holds at every insertion.
        for i in 0..200 {
            let key = format!("k{i}");
            cache.get_or_build(&key, 1 << 20, || Ok(dfa("ab"))).unwrap();
            assert!(cache.stats().bytes <= 1 << 14, "{:?}", cache.stats());
        }
        drop(lazy);
        // Grown past the bound after insertion: trim drops it.
        let grow = DfaCache::new(4 * small + 512);
        let lazy = grow
            .get_or_build("lazy", 1 << 20, || LexemeDfa::build(&hir, 1 << 20))
            .unwrap();
        let mut s = lazy.start();
        for _ in 0..30 {
            s = lazy.next(s, b'a');
        }
        assert!(grow.stats().bytes > grow.max_bytes());
        grow.trim();
        assert_eq!(grow.stats().entries, 0);
    }
}

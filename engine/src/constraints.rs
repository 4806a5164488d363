//! [`ConstraintCache`]: compiled constraints kept for reuse, so that a grammar or schema
//! seen again starts warm (its compiled lexemes and the token sets of the states it
//! visited), with one [`MaskCache`] shared by every constraint of the token space.
//!
//! Entries are keyed by a caller's string (a grammar's text and compile options, a
//! schema's text and options) or by a compiled grammar's identity; the least recently
//! used entry is dropped past [`ConstraintCache::capacity`].

use crate::adapter::Constraint;
use crate::cache::MaskCache;
use corral_grammar::{DEFAULT_DFA_CACHE_STATES, DfaCache, Grammar};
use corral_trie::TokenSpace;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Default number of constraints kept.
pub const DEFAULT_CONSTRAINTS: usize = 64;

/// A bounded cache of constraints for one token space. See the module docs.
#[derive(Debug)]
pub struct ConstraintCache {
    masks: Arc<MaskCache>,
    dfas: DfaCache,
    capacity: usize,
    /// Least recently used first.
    entries: Mutex<Vec<(Key, Arc<Constraint>)>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Text(String),
    /// A grammar by address: the entry holds the grammar (through its constraint), so the
    /// address cannot be reused while the entry lives.
    Grammar(usize),
}

impl ConstraintCache {
    /// An empty cache of at most `capacity` constraints (at least one) on `space`.
    pub fn new(space: Arc<TokenSpace>, capacity: usize) -> ConstraintCache {
        ConstraintCache::with_masks(MaskCache::new(space), capacity)
    }

    /// An empty cache whose constraints share `masks`.
    pub fn with_masks(masks: Arc<MaskCache>, capacity: usize) -> ConstraintCache {
        ConstraintCache {
            masks,
            dfas: DfaCache::new(DEFAULT_DFA_CACHE_STATES),
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
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
        self.capacity
    }

    /// Constraints kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(hits, misses)` so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// The constraint of a compiled grammar: the one made for this very grammar before,
    /// or a new one.
    pub fn for_grammar(&self, grammar: &Arc<Grammar>) -> Arc<Constraint> {
        let key = Key::Grammar(Arc::as_ptr(grammar) as usize);
        let Ok(c) = self.get_or_insert(key, || Ok::<_, std::convert::Infallible>(grammar.clone()));
        c
    }

    /// The constraint kept under `key` (the text the grammar is compiled from and every
    /// option that changes it), or one from `compile`'s grammar, kept under `key`.
    pub fn get_or_compile<E>(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<Arc<Grammar>, E>,
    ) -> Result<Arc<Constraint>, E> {
        self.get_or_insert(Key::Text(key.to_string()), compile)
    }

    fn get_or_insert<E>(
        &self,
        key: Key,
        compile: impl FnOnce() -> Result<Arc<Grammar>, E>,
    ) -> Result<Arc<Constraint>, E> {
        {
            let mut entries = self.lock();
            if let Some(i) = entries.iter().position(|(k, _)| *k == key) {
                let entry = entries.remove(i);
                let c = entry.1.clone();
                entries.push(entry);
                self.hits.fetch_add(1, Relaxed);
                return Ok(c);
            }
        }
        // Compiled outside the lock: another thread may compile the same key meanwhile;
        // the later insert wins, both constraints work.
        self.misses.fetch_add(1, Relaxed);
        let c = Constraint::with_cache(compile()?, &self.masks);
        let mut entries = self.lock();
        entries.retain(|(k, _)| *k != key);
        if entries.len() >= self.capacity {
            entries.remove(0);
        }
        entries.push((key, c.clone()));
        Ok(c)
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

//! Products of two DFAs (`a & b`, `a & ~b`), their states built as the recognizer and the
//! mask computation reach them.
//!
//! A schema's string with a `format` and a `maxLength` is the intersection of the format's
//! automaton with a counter of up to `maxLength` characters: built whole, tens of thousands of
//! state pairs, most of which no generation ever reaches. Built on demand, a pair becomes a
//! state the first time a transition leads to it, so a compile costs the start state alone.
//!
//! Every state but [`DEAD`] must be live (some continuation matches), and a pair's liveness
//! depends on both automata together: the first time a transition reaches a pair, a
//! depth-first search over pairs looks for a matching one, trying first the first byte of
//! a shortest match of each automaton. The search remembers what it proves: every pair on
//! the path to a match is live; when the search runs out, every pair it saw is dead (all
//! pairs reachable from the first were seen, and none matches).

use super::{Combine, DEAD, LexemeDfa, StateId, Table};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A pair of operand states.
type Pair = (StateId, StateId);

/// The construction state of a product built on demand.
#[derive(Debug)]
pub(super) struct LazyProduct {
    a: Arc<LexemeDfa>,
    b: Arc<LexemeDfa>,
    how: Combine,
    /// One byte of each class of the product.
    reps: Vec<u8>,
    pairs: Mutex<Pairs>,
    /// Set when a state was needed past the size limit (see [`LexemeDfa::overflowed`]).
    overflow: AtomicBool,
    /// Per state index: the fewest bytes to an accepting state, and the first.
    pub(super) shortest: Mutex<FxHashMap<u32, Option<(u32, u8)>>>,
    /// Bytes past which the product overflows: its table rows and what its searches
    /// remember ([`LazyProduct::size`]).
    size_limit: usize,
}

#[derive(Clone, Debug, Default)]
struct Pairs {
    /// State index -> its pair; index 0 is [`DEAD`].
    of: Vec<Pair>,
    /// State index -> its state.
    tags: Vec<StateId>,
    index: FxHashMap<Pair, u32>,
    /// Pairs whose liveness is known.
    live: FxHashMap<Pair, bool>,
}

impl Clone for LazyProduct {
    fn clone(&self) -> LazyProduct {
        LazyProduct {
            a: self.a.clone(),
            b: self.b.clone(),
            how: self.how,
            reps: self.reps.clone(),
            pairs: Mutex::new(super::lock(&self.pairs).clone()),
            overflow: AtomicBool::new(self.overflow.load(Relaxed)),
            shortest: Mutex::new(super::lock(&self.shortest).clone()),
            size_limit: self.size_limit,
        }
    }
}

/// The product needed more than its size limit (a search, or a new state).
struct Overflow;

impl LazyProduct {
    /// The pair after `byte`.
    fn step(&self, (x, y): Pair, byte: u8) -> Pair {
        let x = if x == DEAD {
            DEAD
        } else {
            self.a.next(x, byte)
        };
        let y = if y == DEAD {
            DEAD
        } else {
            self.b.next(y, byte)
        };
        (x, y)
    }

    /// Whether the pair matches: in `a` and in `b` (or not in `b`).
    fn accepting(&self, (x, y): Pair) -> bool {
        x.is_accepting()
            && match self.how {
                Combine::Both => y.is_accepting(),
                Combine::FirstNotSecond => !y.is_accepting(),
            }
    }

    /// Liveness known without a search: `Some(false)` if either side rules out a match,
    /// `Some(true)` if `b` has died under `&~` (then `a`'s own liveness suffices).
    fn obvious(&self, (x, y): Pair) -> Option<bool> {
        match self.how {
            _ if x == DEAD => Some(false),
            Combine::Both if y == DEAD => Some(false),
            Combine::FirstNotSecond if y == DEAD => Some(true),
            _ => None,
        }
    }

    /// Bytes held now (see [`LazyProduct::size`]), the shortest-match memo included.
    pub(super) fn memory_usage(&self) -> usize {
        self.size(&super::lock(&self.pairs), 0) + super::lock(&self.shortest).len() * 16
    }

    /// Bytes held: a table row per state, and about 16 per pair remembered (those of a
    /// search under way, `searching`, included).
    fn size(&self, pairs: &Pairs, searching: usize) -> usize {
        pairs.of.len() * 4 * self.reps.len() + (pairs.live.len() + searching) * 16
    }

    /// The bytes to try first from `p`: the first byte of a shortest match from each side
    /// (the side that must match; `a` alone under `&~`), then one byte of every class.
    fn order(&self, p: Pair) -> impl Iterator<Item = u8> + use<'_> {
        // A side that accepts already has no byte to suggest.
        let hint =
            |d: &LexemeDfa, s: StateId| d.shortest(s).filter(|&(n, _)| n > 0).map(|(_, b)| b);
        let hint_a = hint(&self.a, p.0);
        let hint_b = match self.how {
            Combine::Both => hint(&self.b, p.1),
            Combine::FirstNotSecond => None,
        };
        hint_a
            .into_iter()
            .chain(hint_b)
            .chain(self.reps.iter().copied())
    }

    /// Whether some continuation from `p` matches (see the module's notes).
    fn live(&self, pairs: &mut Pairs, p: Pair) -> Result<bool, Overflow> {
        if let Some(l) = self.obvious(p) {
            return Ok(l);
        }
        if let Some(&l) = pairs.live.get(&p) {
            return Ok(l);
        }
        if self.accepting(p) {
            pairs.live.insert(p, true);
            return Ok(true);
        }
        let mut seen: FxHashSet<Pair> = FxHashSet::default();
        seen.insert(p);
        // Depth-first: each pair on the path with the bytes not yet tried from it.
        let mut path = vec![(p, self.order(p))];
        while let Some((from, bytes)) = path.last_mut() {
            let Some(byte) = bytes.next() else {
                path.pop();
                continue;
            };
            let q = self.step(*from, byte);
            let known = match self.obvious(q) {
                Some(l) => Some(l),
                None => pairs.live.get(&q).copied(),
            };
            if known == Some(true) || (known.is_none() && self.accepting(q)) {
                for (r, _) in &path {
                    pairs.live.insert(*r, true);
                }
                pairs.live.insert(q, true);
                return Ok(true);
            }
            if known == Some(false) || !seen.insert(q) {
                continue;
            }
            if self.size(pairs, seen.len()) > self.size_limit {
                return Err(Overflow);
            }
            path.push((q, self.order(q)));
        }
        for q in seen {
            pairs.live.insert(q, false);
        }
        Ok(false)
    }

    /// The state of live pair `p`, numbered and tagged the first time it is reached.
    fn state(&self, pairs: &mut Pairs, p: Pair) -> Result<StateId, Overflow> {
        if let Some(&i) = pairs.index.get(&p) {
            return Ok(pairs.tags[i as usize]);
        }
        let mut cont = false;
        for byte in self.order(p) {
            if self.live(pairs, self.step(p, byte))? {
                cont = true;
                break;
            }
        }
        if self.size(pairs, 1) > self.size_limit {
            return Err(Overflow);
        }
        let i = pairs.of.len() as u32;
        let tag = StateId::new(i, self.accepting(p), cont);
        pairs.of.push(p);
        pairs.tags.push(tag);
        pairs.index.insert(p, i);
        Ok(tag)
    }

    /// The target of state index `i` on class `class`, stored in `trans`.
    pub(super) fn fill(&self, trans: &Table, i: u32, class: usize) -> StateId {
        let mut pairs = super::lock(&self.pairs);
        if let Some(t) = trans.get(i as usize, class) {
            return t; // another thread filled it meanwhile
        }
        let q = self.step(pairs.of[i as usize], self.reps[class]);
        let t = self.target(&mut pairs, q);
        trans.set(i as usize, class, t);
        t
    }

    /// The tagged state of pair `q`: [`DEAD`] unless live; past the size limit, [`DEAD`]
    /// and the overflow flag set.
    fn target(&self, pairs: &mut Pairs, q: Pair) -> StateId {
        let t = match self.live(pairs, q) {
            Ok(true) => self.state(pairs, q),
            Ok(false) => Ok(DEAD),
            Err(e) => Err(e),
        };
        t.unwrap_or_else(|Overflow| {
            self.overflow.store(true, Relaxed);
            super::note_failure();
            DEAD
        })
    }

    /// Whether this product or an operand needed a state past its size limit: an operand's
    /// state past its limit reads as dead, so the product's answers are no longer exact.
    pub(super) fn overflowed(&self) -> bool {
        self.overflow.load(Relaxed) || self.a.overflowed() || self.b.overflowed()
    }

    /// `a`'s state in state index `i`, where the product is `a & ~b` and `b` has died
    /// there: from then on the product matches what `a` matches.
    pub(super) fn first_alone(&self, i: u32) -> Option<(&Arc<LexemeDfa>, StateId)> {
        if self.how != Combine::FirstNotSecond {
            return None;
        }
        let (x, y) = *super::lock(&self.pairs).of.get(i as usize)?;
        (y == DEAD && x != DEAD).then_some((&self.a, x))
    }

    /// `a`'s state in state index `i`, where the product is `a & ~b` and `b`'s language
    /// is finite (see [`LexemeDfa::first_over_finite`]).
    pub(super) fn first_over_finite(&self, i: u32) -> Option<(&Arc<LexemeDfa>, StateId)> {
        if self.how != Combine::FirstNotSecond || !self.b.finite {
            return None;
        }
        let (x, _) = *super::lock(&self.pairs).of.get(i as usize)?;
        (x != DEAD).then_some((&self.a, x))
    }

    /// Number of states so far, [`DEAD`] included.
    pub(super) fn len(&self) -> usize {
        super::lock(&self.pairs).of.len()
    }
}

/// The byte classes of a product: bytes in one class of `a` and one of `b`; and one byte of
/// each class.
pub(super) fn pair_classes(a: &LexemeDfa, b: &LexemeDfa) -> ([u8; 256], Vec<u8>) {
    let mut classes = [0u8; 256];
    let mut class_of: FxHashMap<(u8, u8), u8> = FxHashMap::default();
    let mut reps = Vec::new();
    for byte in 0..=255u8 {
        let pair = (a.classes[byte as usize], b.classes[byte as usize]);
        let next = class_of.len() as u8;
        classes[byte as usize] = *class_of.entry(pair).or_insert_with(|| {
            reps.push(byte);
            next
        });
    }
    (classes, reps)
}

/// `a` combined with `b`, states built on first use; `size_limit` bounds the bytes of the
/// table and of what the construction remembers.
pub(super) fn product(
    a: Arc<LexemeDfa>,
    b: Arc<LexemeDfa>,
    how: Combine,
    size_limit: usize,
) -> LexemeDfa {
    let (classes, reps) = pair_classes(&a, &b);
    let stride = reps.len();
    let start_pair = (a.start, b.start);
    let lp = LazyProduct {
        a,
        b,
        how,
        reps,
        pairs: Mutex::new(Pairs {
            of: vec![(DEAD, DEAD)],
            tags: vec![DEAD],
            ..Pairs::default()
        }),
        overflow: AtomicBool::new(false),
        shortest: Mutex::new(FxHashMap::default()),
        size_limit,
    };
    let finite = match how {
        Combine::Both => lp.a.finite || lp.b.finite,
        Combine::FirstNotSecond => lp.a.finite,
    };
    let start = lp.target(&mut super::lock(&lp.pairs), start_pair);
    let dfa =
        LexemeDfa::built_on_demand(classes, stride, start, super::Fill::Product(Box::new(lp)));
    LexemeDfa { finite, ..dfa }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lexeme::tests::dfa_within;

    fn dfa(re: &str) -> Arc<LexemeDfa> {
        Arc::new(crate::lexeme::tests::dfa(re))
    }

    /// Steps both DFAs over every string of `alphabet` up to `len` bytes: the same states
    /// dead, accepting and continuing after every prefix.
    fn agree(lazy: &LexemeDfa, whole: &LexemeDfa, alphabet: &[u8], len: usize) -> usize {
        let same = |x: StateId, y: StateId, at: &[u8]| {
            let text = String::from_utf8_lossy(at);
            assert_eq!(x == DEAD, y == DEAD, "dead after {text:?}");
            assert_eq!(x.is_accepting(), y.is_accepting(), "accepting {text:?}");
            assert_eq!(x.can_continue(), y.can_continue(), "continuing {text:?}");
        };
        same(lazy.start(), whole.start(), b"");
        assert_eq!(lazy.first_bytes(), whole.first_bytes());
        let mut layer = vec![(Vec::new(), lazy.start(), whole.start())];
        let mut checked = 0;
        for _ in 0..len {
            let mut next = Vec::new();
            for (text, x, y) in layer {
                for &b in alphabet {
                    let (x2, y2) = (lazy.next(x, b), whole.next(y, b));
                    let mut t = text.clone();
                    t.push(b);
                    same(x2, y2, &t);
                    checked += 1;
                    if x2 != DEAD {
                        next.push((t, x2, y2));
                    }
                }
            }
            layer = next;
        }
        assert!(!lazy.overflowed());
        checked
    }

    #[test]
    fn built_on_demand_equals_built_whole() {
        let cases: &[(&str, &str, Combine, &[u8], usize)] = &[
            ("[a-c]*b[a-c]*", "[a-c]{0,5}", Combine::Both, b"abcd", 8),
            (
                "[a-z.]+@[a-z]+\\.[a-z]+",
                "[a-z.@]{0,7}",
                Combine::Both,
                b"a.@z",
                9,
            ),
            ("[a-z]+", "foo|bar|ba", Combine::FirstNotSecond, b"abfor", 5),
            ("a(b|c)*d", "[abcd]{2,4}", Combine::Both, b"abcd", 7),
            ("[ab]*", "(ab)*", Combine::FirstNotSecond, b"ab", 9),
            ("a+", "b+", Combine::Both, b"ab", 4),
            ("(ab)*", "(ab)*", Combine::FirstNotSecond, b"ab", 6),
            (
                "\"[^\"]{0,6}\"",
                "\"[a-z]*\"",
                Combine::Both,
                b"\"ab\xc3\xa9",
                8,
            ),
            // Both sides' shortest bytes die; the search pops the start before it finds `u`.
            ("(ab)*(w|u)", "(ab)*(v|u)", Combine::Both, b"abuvw", 8),
        ];
        for &(x, y, how, alphabet, len) in cases {
            let (a, b) = (dfa(x), dfa(y));
            let lazy = product(a.clone(), b.clone(), how, 1 << 24);
            let whole = LexemeDfa::product_whole(&a, &b, how, 1 << 24).unwrap();
            let n = agree(&lazy, &whole, alphabet, len);
            assert!(n > 0, "{x} / {y}");
        }
    }

    #[test]
    fn products_of_products_are_built_on_demand_too() {
        let (x, y, z) = (dfa("[a-d]{1,6}"), dfa("[a-c]*c"), dfa("a*c|bc"));
        let xy = Arc::new(product(x.clone(), y.clone(), Combine::Both, 1 << 24));
        let lazy = product(xy, z.clone(), Combine::FirstNotSecond, 1 << 24);
        let whole_xy = LexemeDfa::product_whole(&x, &y, Combine::Both, 1 << 24).unwrap();
        let whole =
            LexemeDfa::product_whole(&whole_xy, &z, Combine::FirstNotSecond, 1 << 24).unwrap();
        agree(&lazy, &whole, b"abcd", 8);
    }

    #[test]
    fn a_product_past_its_size_limit_says_it_overflowed() {
        let (a, b) = (dfa("[a-z]{0,400}"), dfa("[a-y]*z[a-z]*|[a-z]{0,3}"));
        let lazy = product(a, b, Combine::Both, 4096);
        let mut s = lazy.start();
        for _ in 0..300 {
            s = lazy.next(s, b'a');
        }
        assert!(lazy.overflowed());
    }

    #[test]
    fn a_dfa_with_itself() {
        let a = dfa("[a-c]+x?|y");
        for (how, empty) in [(Combine::Both, false), (Combine::FirstNotSecond, true)] {
            let lazy = product(a.clone(), a.clone(), how, 1 << 24);
            let whole = LexemeDfa::product_whole(&a, &a, how, 1 << 24).unwrap();
            assert_eq!(lazy.start() == DEAD, empty);
            agree(&lazy, &whole, b"abxy", 6);
        }
    }

    #[test]
    fn threads_stepping_one_product_agree_with_the_product_built_whole() {
        let (a, b) = (dfa("[a-z.]+@[a-z]+(\\.[a-z]+)*"), dfa("[a-z.@]{0,12}"));
        let lazy = product(a.clone(), b.clone(), Combine::Both, 1 << 24);
        let whole = LexemeDfa::product_whole(&a, &b, Combine::Both, 1 << 24).unwrap();
        let alphabet = b"ab.@z";
        std::thread::scope(|scope| {
            for seed in 1..=4u64 {
                let (lazy, whole) = (&lazy, &whole);
                scope.spawn(move || {
                    let mut x = seed;
                    for _ in 0..2000 {
                        let (mut s, mut t) = (lazy.start(), whole.start());
                        for _ in 0..14 {
                            x = x
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            let byte = alphabet[(x >> 33) as usize % alphabet.len()];
                            (s, t) = (lazy.next(s, byte), whole.next(t, byte));
                            assert_eq!(s == DEAD, t == DEAD);
                            assert_eq!(s.is_accepting(), t.is_accepting());
                            assert_eq!(s.can_continue(), t.can_continue());
                            if s == DEAD {
                                break;
                            }
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn an_operand_past_its_size_limit_makes_the_product_say_it_overflowed() {
        // The subset construction of [a-z]*a[a-z]{9} needs about 1,024 states: past 8 KB.
        let b = Arc::new(dfa_within("[a-z]*a[a-z]{9}", 8192));
        let lazy = product(dfa("[a-z]{0,40}"), b, Combine::Both, 1 << 24);
        let mut s = lazy.start();
        for &byte in b"abbbbbbbbbcdefghijklmnopqrstuvwxyzabcdefghi" {
            s = lazy.next(s, byte);
        }
        // Accepted (a, then more than nine letters, and 40 letters at most)... unless an
        // operand overflowed, which the product must then report.
        assert!(s.is_accepting() || lazy.overflowed());
        let mut t = lazy.start();
        for &byte in b"abbbbbbbbb" {
            t = lazy.next(t, byte);
        }
        assert!(t.is_accepting() || lazy.overflowed());
    }
}

//! A DFA's transition table (flat, or growing in buckets for lazily built DFAs) and how
//! its unknown entries are filled.

use super::*;

/// A table entry not computed yet (no state has this id), as stored: complemented, 0.
const UNKNOWN: u32 = u32::MAX;

/// A large table of known size is kept in pages of this many states, each allocated when
/// first written: a counted repetition of thousands is composed into as many states, of
/// which a walk touches a few (and zeroing the whole table would cost more than the walk).
const PAGE_STATES: usize = 64;

/// Tables of known size with more entries than this are paged.
const MAX_FLAT: usize = 1 << 14;

/// A transition table of states by `(state index, class)`, their tagged ids stored
/// complemented so that zeroed memory (a fresh allocation the system has not even backed
/// yet) reads as [`UNKNOWN`], an entry not computed yet. Flat for DFAs whose number of
/// states is known (built or composed), in pages where that is large; in buckets of
/// doubling size for lazily built ones, which grow without moving what readers may be
/// reading (bucket `k` holds states `2^k - 1 .. 2^(k+1) - 1`).
#[derive(Debug)]
pub(super) enum Table {
    Flat(Box<[AtomicU32]>, usize),
    Grow(Box<[OnceLock<Box<[AtomicU32]>>]>, usize),
    Paged(Box<[OnceLock<Box<[AtomicU32]>>]>, usize),
}

/// Zeroed atomics.
pub(super) fn zeroed(n: usize) -> Box<[AtomicU32]> {
    let zeroed: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    // SAFETY: `AtomicU32` has the same size, alignment and bit validity as `u32`, so a boxed
    // slice of one is a boxed slice of the other.
    unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU32]) }
}

impl Table {
    /// `states` rows of `stride` entries, all unknown.
    pub(super) fn unknown(states: usize, stride: usize) -> Table {
        if states * stride <= MAX_FLAT {
            return Table::Flat(zeroed(states * stride), stride);
        }
        let pages = states.div_ceil(PAGE_STATES);
        Table::Paged((0..pages).map(|_| OnceLock::new()).collect(), stride)
    }

    /// A table that grows as states are added.
    pub(super) fn growing(stride: usize) -> Table {
        Table::Grow((0..32).map(|_| OnceLock::new()).collect(), stride)
    }

    pub(super) fn from_ids(ids: Vec<StateId>, stride: usize) -> Table {
        Table::Flat(
            ids.into_iter().map(|t| AtomicU32::new(!t.bits())).collect(),
            stride,
        )
    }

    /// The entry of state index `s`, class `c`; `None` if not computed yet.
    #[inline(always)]
    pub(super) fn get(&self, s: usize, c: usize) -> Option<StateId> {
        let bits = match self {
            Table::Flat(t, stride) => !t[s * stride + c].load(Relaxed),
            Table::Grow(buckets, stride) => {
                let i = s + 1;
                let k = (usize::BITS - 1 - i.leading_zeros()) as usize;
                match buckets[k].get() {
                    Some(b) => !b[(i - (1 << k)) * stride + c].load(Relaxed),
                    None => UNKNOWN,
                }
            }
            Table::Paged(pages, stride) => match pages[s / PAGE_STATES].get() {
                Some(p) => !p[(s % PAGE_STATES) * stride + c].load(Relaxed),
                None => UNKNOWN,
            },
        };
        (bits != UNKNOWN).then_some(StateId::from_bits(bits))
    }

    pub(super) fn set(&self, s: usize, c: usize, t: StateId) {
        let t = t.bits();
        match self {
            Table::Flat(e, stride) => e[s * stride + c].store(!t, Relaxed),
            Table::Grow(buckets, stride) => {
                let i = s + 1;
                let k = (usize::BITS - 1 - i.leading_zeros()) as usize;
                let b = buckets[k].get_or_init(|| zeroed((1 << k) * stride));
                b[(i - (1 << k)) * stride + c].store(!t, Relaxed)
            }
            Table::Paged(pages, stride) => {
                let p = pages[s / PAGE_STATES].get_or_init(|| zeroed(PAGE_STATES * stride));
                p[(s % PAGE_STATES) * stride + c].store(!t, Relaxed)
            }
        }
    }

    /// Entries allocated.
    pub(super) fn allocated(&self) -> usize {
        match self {
            Table::Flat(t, _) => t.len(),
            Table::Grow(buckets, _) | Table::Paged(buckets, _) => buckets
                .iter()
                .filter_map(|b| b.get())
                .map(|b| b.len())
                .sum(),
        }
    }
}

impl Clone for Table {
    fn clone(&self) -> Table {
        let copy = |t: &[AtomicU32]| t.iter().map(|x| AtomicU32::new(x.load(Relaxed))).collect();
        let copy_all = |buckets: &[OnceLock<Box<[AtomicU32]>>]| {
            buckets
                .iter()
                .map(|b| match b.get() {
                    Some(b) => OnceLock::from(copy(b)),
                    None => OnceLock::new(),
                })
                .collect()
        };
        match self {
            Table::Flat(t, stride) => Table::Flat(copy(t), *stride),
            Table::Grow(buckets, stride) => Table::Grow(copy_all(buckets), *stride),
            Table::Paged(pages, stride) => Table::Paged(copy_all(pages), *stride),
        }
    }
}

/// How a DFA's unknown table entries are computed.
#[derive(Clone, Debug)]
pub(super) enum Fill {
    /// Never: every entry was computed when the DFA was built.
    Built,
    /// From segments ([`compose`]).
    Composed(Box<compose::Composed>),
    /// By subset construction, one state's row at a time.
    Subset(Box<Lazy>),
    /// By the product construction, one state's row at a time ([`product`]).
    Product(Box<product::LazyProduct>),
}

/// A lazily built DFA's construction state.
#[derive(Debug)]
pub(super) struct Lazy {
    pub(super) subsets: Mutex<subset::Subsets>,
    /// Set when a state was needed past the size limit (see [`LexemeDfa::overflowed`]).
    pub(super) overflow: AtomicBool,
    /// Per state index: the fewest bytes to an accepting state, and the first.
    pub(super) shortest: Mutex<FxHashMap<u32, Option<(u32, u8)>>>,
}

impl Clone for Lazy {
    fn clone(&self) -> Lazy {
        Lazy {
            subsets: Mutex::new(lock(&self.subsets).clone()),
            overflow: AtomicBool::new(self.overflow.load(Relaxed)),
            shortest: Mutex::new(lock(&self.shortest).clone()),
        }
    }
}

/// A mutex's guard; a poisoned lock (a panic while held elsewhere) is still used: the
/// guarded construction state is consistent between its operations.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_allocates_the_pages_it_writes() {
        let (states, stride) = (10_000, 40);
        let t = Table::unknown(states, stride);
        assert!(matches!(t, Table::Paged(..)));
        assert_eq!(t.allocated(), 0);
        let a = StateId::new(7, true, false);
        let b = StateId::new(9_999, false, true);
        t.set(5, 3, a);
        t.set(9_999, 39, b);
        assert_eq!(t.get(5, 3), Some(a));
        assert_eq!(t.get(9_999, 39), Some(b));
        assert_eq!(t.get(5, 4), None);
        assert_eq!(t.get(6_000, 0), None, "a page never written");
        assert_eq!(t.allocated(), 2 * PAGE_STATES * stride);
        let copy = t.clone();
        assert_eq!(copy.get(9_999, 39), Some(b));
        assert_eq!(copy.allocated(), t.allocated());
        // Small tables stay flat.
        assert!(matches!(Table::unknown(10, 40), Table::Flat(..)));
    }
}

//! A DFA's transition table (flat, or growing in buckets for lazily built DFAs) and how
//! its unknown entries are filled.

use super::*;

/// A table entry not computed yet (no state has this id), as stored: complemented, 0.
const UNKNOWN: u32 = u32::MAX;

/// A transition table of states by `(state index, class)`, their tagged ids stored
/// complemented so that zeroed memory (a fresh allocation the system has not even backed
/// yet) reads as [`UNKNOWN`], an entry not computed yet. Flat for DFAs whose number of states is known (built or composed); in
/// buckets of doubling size for lazily built ones, which grow without moving what readers
/// may be reading (bucket `k` holds states `2^k - 1 .. 2^(k+1) - 1`).
#[derive(Debug)]
pub(super) enum Table {
    Flat(Box<[AtomicU32]>, usize),
    Grow(Box<[OnceLock<Box<[AtomicU32]>>]>, usize),
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
        Table::Flat(zeroed(states * stride), stride)
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
    #[inline]
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
        }
    }

    /// Entries allocated.
    pub(super) fn allocated(&self) -> usize {
        match self {
            Table::Flat(t, _) => t.len(),
            Table::Grow(buckets, _) => buckets
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
        match self {
            Table::Flat(t, stride) => Table::Flat(copy(t), *stride),
            Table::Grow(buckets, stride) => Table::Grow(
                buckets
                    .iter()
                    .map(|b| match b.get() {
                        Some(b) => OnceLock::from(copy(b)),
                        None => OnceLock::new(),
                    })
                    .collect(),
                *stride,
            ),
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

//! [`StateId`]: a lexeme DFA state as the recognizer and the mask walk hold it.

/// A state of a [`super::LexemeDfa`]: its dense index (`0..len`) and two flags, whether
/// the bytes read so far are a complete match and whether some byte leads on, packed in
/// one `u32` so that stepping a run and testing it is one table load. The flags are read
/// with [`StateId::is_accepting`] and [`StateId::can_continue`]; the index, which keys
/// per-state tables and caches, with [`StateId::index`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct StateId(u32);

const ACCEPT: u32 = 1 << 31;
const CONTINUE: u32 = 1 << 30;
/// The bits of a [`StateId`] that hold its index.
pub(super) const INDEX: u32 = CONTINUE - 1;

impl StateId {
    /// The dead state: nothing more can match. Its index is 0.
    pub const DEAD: StateId = StateId(0);

    /// The state of index `index` with its flags (`index` < 2^30; 0 is [`StateId::DEAD`]).
    #[inline]
    pub(super) fn new(index: u32, accepting: bool, continues: bool) -> StateId {
        debug_assert!(index <= INDEX);
        StateId(index | if accepting { ACCEPT } else { 0 } | if continues { CONTINUE } else { 0 })
    }

    /// The state of a tagged id as a table stores it.
    #[inline]
    pub(super) fn from_bits(bits: u32) -> StateId {
        StateId(bits)
    }

    /// The tagged id, as a table stores it.
    #[inline]
    pub(super) fn bits(self) -> u32 {
        self.0
    }

    /// Whether this is [`StateId::DEAD`].
    #[inline]
    pub fn is_dead(self) -> bool {
        self.0 == 0
    }

    /// Whether the bytes read so far are a complete match.
    #[inline]
    pub fn is_accepting(self) -> bool {
        self.0 & ACCEPT != 0
    }

    /// Whether some byte leads on to a live state.
    #[inline]
    pub fn can_continue(self) -> bool {
        self.0 & CONTINUE != 0
    }

    /// The dense index (`0..len` of its DFA), for tables and caches keyed by state.
    #[inline]
    pub fn index(self) -> usize {
        (self.0 & INDEX) as usize
    }

    /// The index as a `u32` (indices are below 2^30).
    #[inline]
    pub(super) fn index32(self) -> u32 {
        self.0 & INDEX
    }
}

impl std::fmt::Debug for StateId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_dead() {
            return f.write_str("DEAD");
        }
        write!(f, "S{}", self.index())?;
        if self.is_accepting() {
            f.write_str("+accept")?;
        }
        if self.can_continue() {
            f.write_str("+more")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for StateId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

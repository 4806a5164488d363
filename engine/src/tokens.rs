//! Token sets of a lexeme DFA state: the reason masks are fast.
//!
//! A lexer run (a lexeme under way, in some DFA state) allows the tokens that keep its DFA
//! alive, and, where the lexeme can end inside a token, those whose rest the grammar takes
//! after it. The first part depends only on the DFA state, so it is computed once per state
//! and shared by every adapter, every grammar and every request on the same tokenizer
//! ([`crate::MaskCache`]). Two ways, by the state's kind:
//!
//! - **Sliced** (the body of a string, counted or not): every slice character (see
//!   [`corral_trie::CharSlice`]: all of Unicode from U+0020 but `"`, `\` and U+007F) leads
//!   to one same next state (`Shift::To`), and so on for `r` characters until one where
//!   they all die (`Shift::Kills`), with no accepting state on the way (or forever: a
//!   loop). Then the slice tokens of at most `r` characters are allowed, precomputed per
//!   tokenizer; of the other tokens (a prefix of `n` slice characters, then a suffix), those
//!   with `n <= r` whose suffix the DFA takes from the `n`-th state of that chain: a walk of
//!   the small trie of suffixes (`SuffixWalk`) for short prefixes, a direct run for the
//!   few tokens with long ones. No walk of the vocabulary at all. The walk from `s_0`
//!   serves the tokens that are a suffix alone, and those from `s_1`, `s_2`, ... only the
//!   suffixes that follow a prefix ([`corral_trie::Prefix`]): on Llama-3.1's words slice,
//!   514 nodes of the suffix trie's 214,052, so a counted chain (whose states all differ)
//!   costs one large walk per state, not one per state and prefix length. The same holds for a
//!   second alphabet, ASCII letters and digits ([`Alphabet::Words`]): the letters and
//!   digits of an e-mail address, a host name or an identifier, where every letter and
//!   digit leads one way. Its suffixes include every token that starts with another byte,
//!   so it is taken only where few such bytes go on (`MAX_LIVE_SUFFIX_STARTS`) and
//!   letters and digits do (a state they all end is generic: its walk dies at their first
//!   byte).
//! - **Generic** (anything else): one walk of the whole token trie with the DFA alone
//!   ([`LexTokens`]), pruned where the DFA dies. Where the walk reaches the body of a
//!   string after an ASCII byte (the state after `"`, after an escape such as `\n`, after
//!   the last hex digit of `\u00e9`), it does not go on node by node: below that node,
//!   every token whose rest is slice characters stays in the body (its *tail*, see
//!   [`CharSlice::subtree_tails`], precomputed per tokenizer in trie order), and only
//!   the others are run. A state after `\u00e` thus costs a pass over the tokens that
//!   start with a hex digit, not a DFA step per trie node below them. The suffix walks of
//!   the sliced states jump the same way, over the suffix trie's own tails (after `.` in
//!   an e-mail address's local part, say), also below a counted run's state far enough
//!   from its bound for the rest (`Loops::room`).
//!
//! States are taken by their representative ([`LexemeDfa::representative`]): in a
//! counted repetition, a count that reaches neither bound within the longest token behaves
//! as the lowest such count, so the body of a string with `maxLength: 500` is one state for
//! tokens, a loop, not 500 chained ones, and its sets are computed once, not per position.
//! Short of that, a count that reaches neither bound within one character shifts as its
//! representative at that depth does, recounted ([`LexemeDfa::recount`]): the chain of a
//! string with `maxLength: 80` computes the transitions of a few counts, not of each.
//!
//! In both, a token whose bytes the DFA takes to the end is allowed whatever the parser
//! says (the lexeme goes on, or ends exactly at the token's end). A token the DFA kills
//! after it accepted needs the parser for its rest: the first accepting point on its path is
//! recorded (deeper ones are reached from it, since the run also goes on past an end), and
//! the mask computation walks the rest with the recognizer placed just after the lexeme's
//! end there. (llguidance's "slicer" and XGrammar's "context-independent tokens" are
//! published forms of the same idea.)

mod generic;

pub(crate) use generic::walk_generic;
pub use generic::{AsciiBytes, BodyRuns, LexTokens, Rests, RunPaths};

use corral_grammar::{DEAD, LexemeDfa, StateId};
use corral_trie::{Alphabet, CharSlice, FixedBitSet, NodeId, Prefix, SuffixId};

/// Suffix walks are kept for tokens with a prefix shorter than this; the few with longer
/// ones are run one by one.
pub(crate) const WALKED_PREFIXES: u32 = 6;

/// How every slice character leads on from a DFA state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shift {
    /// Slice characters lead to different states (or some die and some do not).
    Mixed,
    /// Every slice character dies.
    Kills,
    /// Every slice character leads to this (live) state.
    To(StateId),
}

/// UTF-8 sequences of two to four bytes, as byte ranges per position.
const MULTIBYTE: &[&[(u8, u8)]] = &[
    &[(0xc2, 0xdf), (0x80, 0xbf)],
    &[(0xe0, 0xe0), (0xa0, 0xbf), (0x80, 0xbf)],
    &[(0xe1, 0xec), (0x80, 0xbf), (0x80, 0xbf)],
    &[(0xed, 0xed), (0x80, 0x9f), (0x80, 0xbf)],
    &[(0xee, 0xef), (0x80, 0xbf), (0x80, 0xbf)],
    &[(0xf0, 0xf0), (0x90, 0xbf), (0x80, 0xbf), (0x80, 0xbf)],
    &[(0xf1, 0xf3), (0x80, 0xbf), (0x80, 0xbf), (0x80, 0xbf)],
    &[(0xf4, 0xf4), (0x80, 0x8f), (0x80, 0xbf), (0x80, 0xbf)],
];

/// Where every character of `alphabet` leads from `s`.
pub(crate) fn shift(dfa: &LexemeDfa, s: StateId, alphabet: Alphabet) -> Shift {
    let mut target: Option<StateId> = None;
    let mut agree = |t: StateId| match target {
        None => {
            target = Some(t);
            true
        }
        Some(x) => x == t,
    };
    // One byte per byte class: the others of a class go the same way.
    let mut asked = [false; 256];
    for b in 0u8..=0x7f {
        let c = dfa.class_of(b) as usize;
        if alphabet.admits(b as char)
            && !std::mem::replace(&mut asked[c], true)
            && !agree(dfa.next(s, b))
        {
            return Shift::Mixed;
        }
    }
    // Multi-byte characters (every one is of `Strings`, none of `Words`).
    if alphabet == Alphabet::Strings {
        for seq in MULTIBYTE {
            let agreed = char_paths(dfa, s, seq, &mut |t, inner| match (inner, t) {
                (true, DEAD) => agree(DEAD),
                (true, _) => true,
                (false, t) => agree(t),
            });
            if !agreed {
                return Shift::Mixed;
            }
        }
    }
    match target {
        Some(DEAD) => Shift::Kills,
        Some(t) => Shift::To(t),
        None => Shift::Mixed,
    }
}

/// Every path of UTF-8 sequence `seq` (byte ranges per position) from `state`: one byte per
/// byte class and one per distinct next state at each position. `visit` sees each state
/// inside a character (`true`) and each state a whole character leads to (`false`); a path
/// ends where it dies. Stops at `visit`'s first `false`.
fn char_paths(
    dfa: &LexemeDfa,
    state: StateId,
    seq: &[(u8, u8)],
    visit: &mut dyn FnMut(StateId, bool) -> bool,
) -> bool {
    let Some((&(lo, hi), rest)) = seq.split_first() else {
        return true;
    };
    let mut asked = [false; 256];
    let mut seen: Vec<StateId> = Vec::new();
    for b in lo..=hi {
        if std::mem::replace(&mut asked[dfa.class_of(b) as usize], true) {
            continue;
        }
        let t = dfa.next(state, b);
        if seen.contains(&t) {
            continue;
        }
        seen.push(t);
        if !visit(t, !rest.is_empty()) || (t != DEAD && !char_paths(dfa, t, rest, visit)) {
            return false;
        }
    }
    true
}

/// Calls `step` on every state one character of `alphabet` (but those that start with a
/// byte of `except`, or are one) leads to from `s` (`false`) and on every state inside a
/// multi-byte one (`true`); stops at its first `false`, with the character's first byte.
/// A state after a lead byte that is in `led` (with its sequence) was followed from
/// another state before, and is not followed again: a search that visits many states
/// (the prefixes of many names) sees their multi-byte characters meet there.
fn each_char_step(
    dfa: &LexemeDfa,
    s: StateId,
    (alphabet, except): (Alphabet, &[u8]),
    led: &mut rustc_hash::FxHashSet<(StateId, usize)>,
    step: &mut dyn FnMut(StateId, bool) -> bool,
) -> Result<(), Option<u8>> {
    let mut asked = [false; 256];
    for b in 0u8..=0x7f {
        let c = dfa.class_of(b) as usize;
        if alphabet.admits(b as char)
            && !except.contains(&b)
            && !std::mem::replace(&mut asked[c], true)
            && !step(dfa.next(s, b), false)
        {
            return Err(Some(b));
        }
    }
    if alphabet != Alphabet::Strings {
        return Ok(());
    }
    // Multi-byte characters, by lead byte (to name the one that leaves).
    for (k, seq) in MULTIBYTE.iter().enumerate() {
        let (&(lo, hi), rest) = seq.split_first().expect("sequences are not empty");
        let mut asked = [false; 256];
        let mut seen: Vec<StateId> = Vec::new();
        for lead in lo..=hi {
            if except.contains(&lead)
                || std::mem::replace(&mut asked[dfa.class_of(lead) as usize], true)
            {
                continue;
            }
            let t = dfa.next(s, lead);
            if seen.contains(&t) {
                continue;
            }
            seen.push(t);
            if !step(t, true)
                || (t != DEAD && led.insert((t, k)) && !char_paths(dfa, t, rest, step))
            {
                return Err(Some(lead));
            }
        }
    }
    Ok(())
}

/// How [`search_inside`] ended.
enum Search {
    /// Every state reached stays inside: these.
    Inside(Vec<StateId>),
    /// A character leaves (one that starts with this byte, where known); the states on
    /// the way to it.
    Leaves(Option<u8>, Vec<StateId>),
    /// Past [`Loops::MAX_REACHED`] states.
    TooMany,
}

/// Searches the states the characters of `alphabet` but `except` lead to from `s` for one
/// that dies or accepts, states inside a character included. States are taken by their
/// representative within `depth` bytes (alike within the longest token, as far as a
/// token's rest reaches); `known` answers for states searched before.
fn search_inside(
    dfa: &LexemeDfa,
    s: StateId,
    (alphabet, except, depth): (Alphabet, &[u8], usize),
    known: &rustc_hash::FxHashMap<StateId, bool>,
) -> Search {
    // States reached, each with the index of the one it was reached from.
    let mut reached: Vec<(StateId, usize)> = vec![(s, usize::MAX)];
    let mut seen: rustc_hash::FxHashSet<StateId> = [s].into_iter().collect();
    let mut led = rustc_hash::FxHashSet::default();
    let mut next = 0;
    while next < reached.len() {
        let from = reached[next].0;
        let mut known_to_leave = false;
        let stepped = each_char_step(dfa, from, (alphabet, except), &mut led, &mut |t, within| {
            if t == DEAD || t.is_accepting() {
                return false;
            }
            if within {
                return true;
            }
            let t = dfa.representative(t, depth);
            match known.get(&t) {
                Some(&inside) => {
                    known_to_leave = !inside;
                    inside
                }
                None => {
                    if seen.insert(t) {
                        reached.push((t, next));
                    }
                    reached.len() <= Loops::MAX_REACHED
                }
            }
        });
        if let Err(byte) = stepped {
            if reached.len() > Loops::MAX_REACHED && !known_to_leave {
                return Search::TooMany;
            }
            let mut way = Vec::new();
            let mut at = next;
            while at != usize::MAX {
                way.push(reached[at].0);
                at = reached[at].1;
            }
            return Search::Leaves(byte.filter(|_| !known_to_leave), way);
        }
        next += 1;
    }
    Search::Inside(reached.into_iter().map(|(t, _)| t).collect())
}

/// A state is taken as sliced by [`Alphabet::Words`] only where at most this many bytes that
/// are not letters or digits keep it alive: every suffix of that slice starts with such a
/// byte, so the suffix walks stay small (a state that takes most bytes is walked whole).
pub(crate) const MAX_LIVE_SUFFIX_STARTS: usize = 64;

/// Whether the suffix walks of the words slice from `s` are small (see
/// [`MAX_LIVE_SUFFIX_STARTS`]).
pub(crate) fn few_suffix_starts(dfa: &LexemeDfa, s: StateId) -> bool {
    (0..=255u8)
        .filter(|&b| !Alphabet::Words.admits(b as char) && dfa.next(s, b) != DEAD)
        .count()
        <= MAX_LIVE_SUFFIX_STARTS
}

/// The chain of states slice characters lead through from a sliced state.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    /// `s_0` (the state itself), `s_1`, ...: as far as any token's prefix reaches.
    pub states: Vec<StateId>,
    /// Slice characters the lexeme takes before all of them die (`None`: more than any
    /// token has, or forever).
    pub left: Option<u32>,
    /// `s_1 == s_0`: the state loops on slice characters.
    pub self_loop: bool,
}

impl Chain {
    /// `s_n`: where the chain ends in a loop (or reaches past any token), its last state
    /// stands for the rest.
    pub fn state(&self, n: u32) -> StateId {
        self.states[(n as usize).min(self.states.len() - 1)]
    }
}

/// The chain from `s`, if `s` is a sliced state: uniform shifts with no accepting state
/// after `s` until they kill. `shift_of` gives (and remembers) each state's shift;
/// `horizon` is the most characters any token has.
pub(crate) fn chain(
    s: StateId,
    horizon: u32,
    shift_of: &mut dyn FnMut(StateId) -> Shift,
) -> Option<Chain> {
    let mut states = vec![s];
    loop {
        let cur = *states.last().expect("non-empty");
        match shift_of(cur) {
            Shift::Mixed => return None,
            Shift::Kills => {
                return Some(Chain {
                    left: Some(states.len() as u32 - 1),
                    self_loop: false,
                    states,
                });
            }
            Shift::To(t) => {
                if t.is_accepting() {
                    return None;
                }
                if t == cur {
                    return Some(Chain {
                        self_loop: states.len() == 1,
                        left: None,
                        states,
                    });
                }
                if states.len() as u32 > horizon {
                    return Some(Chain {
                        left: None,
                        self_loop: false,
                        states,
                    });
                }
                states.push(t);
            }
        }
    }
}

/// What the DFA does with the suffixes of the slice from one state. See the module docs.
#[derive(Debug)]
pub(crate) struct SuffixWalk {
    /// Suffixes all of whose bytes the DFA takes.
    pub alive: FixedBitSet,
    /// Where the lexeme can end inside a suffix (the first accepting node on a path): the
    /// DFA state there and the suffix-trie node; the suffixes below it that the DFA then
    /// kills need the parser.
    pub endings: Vec<(StateId, NodeId)>,
}

/// Walks the slice's suffix trie with `dfa` from `start`, for the suffixes with tokens of
/// kind `want` (the others' subtrees are skipped). Below a node where the DFA reaches a
/// state with room for the slice's characters (see [`Loops::room`]: a loop, or a counted
/// run far enough from its bound), after an ASCII byte, the suffixes whose rest is at most
/// that many such characters stay alive without a walk (as in [`walk_generic`]), and the
/// others are run one by one.
pub(crate) fn walk_suffixes(
    dfa: &LexemeDfa,
    start: StateId,
    (slice, want): (&CharSlice, Prefix),
    depth: usize,
) -> SuffixWalk {
    const NONE: u32 = u32::MAX;
    let trie = slice.suffixes();
    let nodes = trie.nodes();
    let mut alive = FixedBitSet::with_capacity(slice.suffix_count());
    let mut endings = Vec::new();
    let mut loops = Loops::new(slice.alphabet(), depth, false);
    // Per depth on the current path: the DFA state, and whether the lexeme could end
    // above (at or below depth 1).
    let mut path: Vec<(StateId, u32)> = vec![(start, NONE)];
    let mut i = 1;
    while i < nodes.len() {
        let n = nodes[i];
        if !slice.subtree_serves(i, want) {
            // No suffix below has tokens this walk is for.
            i += n.subtree as usize;
            continue;
        }
        let d = n.depth as usize;
        let next = dfa.next(path[d - 1].0, n.byte);
        if next == DEAD {
            // Dead: below an ending, its subtree walk with the parser covers these.
            i += n.subtree as usize;
            continue;
        }
        let mut here = path[d - 1].1;
        if here == NONE && next.is_accepting() {
            here = i as u32;
            endings.push((next, NodeId(i as u32)));
        }
        trie.mark(i, &mut alive);
        let room = if here == NONE && n.byte < 0x80 && n.subtree > 1 {
            loops.room(dfa, next)
        } else {
            0
        };
        if room >= Loops::MIN_ROOM {
            let end = i + n.subtree as usize;
            let (first, tails) = slice.suffix_tails(i + 1, end);
            for (k, &tail) in tails.iter().enumerate() {
                let sid = SuffixId(first.0 + k as u32);
                if !slice.suffix_serves(sid, want) {
                    continue;
                }
                let bytes = slice.suffix(sid);
                // The rest is characters of the alphabet, no more than the state takes.
                if tail as usize <= d && bytes.len() - d <= room as usize {
                    alive.insert(sid.index());
                    continue;
                }
                match run_suffix(dfa, next, &bytes[d..]) {
                    Outcome::Alive => alive.insert(sid.index()),
                    Outcome::Dead => {}
                    Outcome::Ending { state, at } => {
                        // The parser walks below the ending's node: once per node.
                        if let Some(node) = trie.node_of(&bytes[..d + at])
                            && !endings.contains(&(state, node))
                        {
                            endings.push((state, node));
                        }
                    }
                }
            }
            i = end;
            continue;
        }
        path.truncate(d);
        path.push((next, here));
        i += 1;
    }
    SuffixWalk { alive, endings }
}

/// What the DFA does with one suffix from `start`: all of it (`Alive`), dies before any
/// end (`Dead`), or ends first after `at` bytes in `state` and dies later (`Ending`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Alive,
    Dead,
    Ending { state: StateId, at: usize },
}

/// [`Outcome`] of `bytes` from `start`.
pub(crate) fn run_suffix(dfa: &LexemeDfa, start: StateId, bytes: &[u8]) -> Outcome {
    let mut s = start;
    let mut ending = None;
    for (k, &b) in bytes.iter().enumerate() {
        s = dfa.next(s, b);
        if s == DEAD {
            return match ending {
                Some((state, at)) => Outcome::Ending { state, at },
                None => Outcome::Dead,
            };
        }
        if ending.is_none() && s.is_accepting() {
            ending = Some((s, k + 1));
        }
    }
    Outcome::Alive
}

/// The node of the suffix trie under which suffix `sid`'s bytes after `at` hang.
pub(crate) fn suffix_node(slice: &CharSlice, sid: SuffixId, at: usize) -> Option<NodeId> {
    slice.suffixes().node_of(&slice.suffix(sid)[..at])
}

/// Which states of one DFA a walk may jump below, remembered for one walk: those where a
/// token whose rest is the alphabet's characters stays in the lexeme. A loop on every such
/// character without accepting (a string's body, a run of letters and digits) is found at
/// once, counting a state that such characters lead to a state that behaves alike within
/// the longest token (a counted string's body far from its bounds); otherwise
/// [`Loops::stays_inside`] looks at every state they reach, where that is asked for.
pub(crate) struct Loops {
    alphabet: Alphabet,
    depth: usize,
    /// Whether to look past loops ([`Loops::stays_inside`]): worth it in a walk of the
    /// whole trie, not of the small suffix tries.
    beyond_loops: bool,
    /// By state: a walk meets few, and a table by index would be as big as a large DFA.
    known: rustc_hash::FxHashMap<StateId, bool>,
    /// The last answers, ahead of `known`.
    recent: Recent<bool>,
    /// How the search from a state that does not stay inside ended (see
    /// [`Loops::stays_inside`]).
    left: rustc_hash::FxHashMap<StateId, Left>,
    /// [`Loops::room`] by state, and the last answers as for `recent`.
    rooms: rustc_hash::FxHashMap<StateId, u32>,
    recent_rooms: Recent<u32>,
}

impl std::fmt::Debug for Loops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loops")
            .field("alphabet", &self.alphabet)
            .field("known", &self.known.len())
            .finish_non_exhaustive()
    }
}

/// The last answers about states, by the low bits of their index: a walk asks at nearly
/// every node of a trie, about the same few states.
struct Recent<T>([(StateId, T); 64]);

impl<T: Copy + Default> Default for Recent<T> {
    fn default() -> Recent<T> {
        // `DEAD` marks an empty slot: no walk asks about it.
        Recent([(DEAD, T::default()); 64])
    }
}

impl<T: Copy> Recent<T> {
    #[inline]
    fn get(&self, s: StateId) -> Option<T> {
        let (at, v) = self.0[s.index() % self.0.len()];
        (s != DEAD && at == s).then_some(v)
    }

    #[inline]
    fn put(&mut self, s: StateId, v: T) {
        let n = self.0.len();
        self.0[s.index() % n] = (s, v);
    }
}

/// How a search of the states from one state found that it does not stay inside.
#[derive(Clone, Copy, Debug)]
enum Left {
    /// A character leaves (one that starts with this byte, where known).
    By(Option<u8>),
    /// The search gave up (past [`Loops::MAX_REACHED`] states).
    TooMany,
}

impl Loops {
    /// At most this many states are looked at for one state's answer; past them, false.
    const MAX_REACHED: usize = 1024;

    pub(crate) fn new(alphabet: Alphabet, depth: usize, beyond_loops: bool) -> Loops {
        Loops {
            alphabet,
            depth,
            beyond_loops,
            known: Default::default(),
            recent: Recent::default(),
            left: Default::default(),
            rooms: Default::default(),
            recent_rooms: Recent::default(),
        }
    }

    /// A walk jumps below a state with at least this much [`Loops::room`]: with less, most
    /// rests of the alphabet's characters would be run one by one.
    const MIN_ROOM: u32 = 8;

    /// Room is counted up to this many characters (more than any suffix has).
    const MAX_ROOM: u32 = 256;

    /// How many characters of the alphabet `s` takes in a row, whichever they are, with
    /// every state on the way alive and not accepting: `u32::MAX` for a loop (see
    /// [`Loops::test`]), else the length of the chain of uniform shifts from `s` (a counted
    /// run's characters left before its bound: an e-mail address's local part, a
    /// `[A-Za-z0-9 .]{1,32}`, where every letter and digit leads one way), up to
    /// [`Loops::MAX_ROOM`]; chains are followed only for [`Alphabet::Words`], whose shifts
    /// are a few ASCII bytes. A rest of at most that many such characters keeps the lexeme
    /// alive.
    fn room(&mut self, dfa: &LexemeDfa, s: StateId) -> u32 {
        if let Some(room) = self.recent_rooms.get(s) {
            return room;
        }
        let room = self.room_of(dfa, s);
        self.recent_rooms.put(s, room);
        room
    }

    fn room_of(&mut self, dfa: &LexemeDfa, s: StateId) -> u32 {
        if let Some(&r) = self.rooms.get(&s) {
            return r;
        }
        if s.is_accepting() {
            return 0;
        }
        if self.test(dfa, s) {
            self.rooms.insert(s, u32::MAX);
            return u32::MAX;
        }
        if self.alphabet != Alphabet::Words {
            // A shift of all of Unicode costs too much to follow a long chain of them.
            return 0;
        }
        // The chain from `s`, until a state whose room is known or one that does not
        // shift uniformly to a live state that does not accept.
        let mut chain = vec![s];
        let mut last = 0;
        while chain.len() <= Loops::MAX_ROOM as usize {
            let cur = chain[chain.len() - 1];
            match shift(dfa, cur, self.alphabet) {
                Shift::To(t) if t == cur => {
                    last = u32::MAX;
                    break;
                }
                Shift::To(t) if !t.is_accepting() => {
                    if let Some(&r) = self.rooms.get(&t) {
                        last = r.saturating_add(1);
                        break;
                    }
                    chain.push(t);
                }
                _ => break,
            }
        }
        // `last` is the room of the chain's last state; each one before has one more.
        for (k, &t) in chain.iter().rev().enumerate() {
            let r = if last == u32::MAX {
                u32::MAX
            } else {
                last.saturating_add(k as u32).min(Loops::MAX_ROOM)
            };
            self.rooms.insert(t, r);
        }
        self.rooms[&s]
    }

    fn test(&mut self, dfa: &LexemeDfa, s: StateId) -> bool {
        if let Some(answer) = self.recent.get(s) {
            return answer;
        }
        let answer = self.answer(dfa, s);
        self.recent.put(s, answer);
        answer
    }

    fn answer(&mut self, dfa: &LexemeDfa, s: StateId) -> bool {
        if let Some(&known) = self.known.get(&s) {
            return known;
        }
        // One byte first: most states loop on no alphabet.
        let rep = |t| dfa.representative(t, self.depth);
        let me = rep(s);
        let looped = rep(dfa.next(s, b'a')) == me
            && !s.is_accepting()
            && matches!(shift(dfa, s, self.alphabet), Shift::To(t) if rep(t) == me);
        // A key that must not be one of a few names: as the plain string's body.
        let first_loops = || {
            dfa.first_over_finite(s).is_some_and(|(a, x)| {
                !x.is_accepting()
                    && a.next(x, b'a') == x
                    && matches!(shift(a, x, self.alphabet), Shift::To(t) if t == x)
            })
        };
        let answer = looped
            || first_loops()
            || (self.beyond_loops
                && self.ascii_leaving(dfa, s, 0) == 0
                && self.stays_inside(dfa, s));
        self.known.insert(s, answer);
        answer
    }

    /// How many ASCII characters of the alphabet lead `s` to a dead or accepting state,
    /// counted up to `limit + 1`: a state with more than `limit` of them cannot stay inside
    /// with `limit` bytes set apart, and no search need show it (most states a walk meets,
    /// in keys, separators and numbers, die on nearly every letter).
    fn ascii_leaving(&self, dfa: &LexemeDfa, s: StateId, limit: usize) -> usize {
        // The letters and digits first: most states that leave do so on them.
        let rest = (0..0x80u8).filter(|b| !b.is_ascii_alphanumeric());
        let bytes = (b'a'..=b'z')
            .chain(b'0'..=b'9')
            .chain(b'A'..=b'Z')
            .chain(rest);
        let mut leaving = 0;
        for b in bytes.filter(|&b| self.alphabet.admits(b as char)) {
            let t = dfa.next(s, b);
            if t == DEAD || t.is_accepting() {
                leaving += 1;
                if leaving > limit {
                    break;
                }
            }
        }
        leaving
    }

    /// At most this many bytes are set apart by [`Loops::inside_except`].
    const MAX_EXCEPT: usize = 4;

    /// Whether every state the alphabet's characters lead to from `s`, and every state
    /// inside a character on the way, is alive and not accepting: then a token whose rest
    /// is such characters stays in the lexeme, though they do not all lead one way (a key
    /// that must contain a `/`, or must not be one of a few names). Every state reached
    /// is remembered as staying inside when `s` does, and every state on the way to one
    /// that leaves as not.
    fn stays_inside(&mut self, dfa: &LexemeDfa, s: StateId) -> bool {
        match search_inside(dfa, s, (self.alphabet, &[], self.depth), &self.known) {
            Search::Inside(states) => {
                states.into_iter().for_each(|t| {
                    self.known.insert(t, true);
                });
                true
            }
            Search::Leaves(byte, way) => {
                way.into_iter().for_each(|t| {
                    self.known.insert(t, false);
                });
                self.left.insert(s, Left::By(byte));
                false
            }
            Search::TooMany => {
                self.left.insert(s, Left::TooMany);
                false
            }
        }
    }

    /// The few bytes (at most [`Loops::MAX_EXCEPT`]) but the characters with which the
    /// alphabet's characters stay inside from `s` (as in [`Loops::stays_inside`]): none
    /// where they all do; `None` where no such few will do. A key that must not hold two
    /// `/` stays inside but for `/`; a pattern's `.` but for the lead byte of U+2028 and
    /// U+2029, which it does not match. A walk from there takes the tokens without such a
    /// byte as a set, and runs the tokens with one.
    fn inside_except(&mut self, dfa: &LexemeDfa, s: StateId) -> Option<Vec<u8>> {
        if self.test(dfa, s) {
            return Some(Vec::new());
        }
        if !self.beyond_loops || self.ascii_leaving(dfa, s, Loops::MAX_EXCEPT) > Loops::MAX_EXCEPT {
            return None;
        }
        // What the search of `test` found: no need to search again for that.
        let mut except = Vec::new();
        match self.left.get(&s) {
            Some(Left::TooMany) => return None,
            Some(&Left::By(Some(b))) => except.push(b),
            _ => {}
        }
        let none = rustc_hash::FxHashMap::default();
        loop {
            match search_inside(dfa, s, (self.alphabet, &except, self.depth), &none) {
                Search::Inside(_) => return Some(except),
                Search::Leaves(Some(b), _) if except.len() < Loops::MAX_EXCEPT => except.push(b),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::dfa;

    #[test]
    fn counts_shift_as_their_representative_does_recounted() {
        // A counted JSON string body (escapes, every character), and one of words.
        for (re, alphabet) in [
            (
                r#""(?:[^"\\\x00-\x1f]|\\["\\nt]|\\u[0-9a-f]{4}){2,40}""#,
                Alphabet::Strings,
            ),
            ("[A-Za-z0-9]{3,30}@", Alphabet::Words),
        ] {
            let d = dfa(re);
            let mut s = d.start();
            if alphabet == Alphabet::Strings {
                s = d.next(s, b'"');
            }
            let mut recounted = 0;
            while s != DEAD {
                let r = d.representative(s, 4);
                let direct = shift(&d, s, alphabet);
                if r != s {
                    recounted += 1;
                    let by_rep = match shift(&d, r, alphabet) {
                        Shift::To(t) => Shift::To(d.recount(t, r, s)),
                        other => other,
                    };
                    assert_eq!(by_rep, direct, "{re}: {s:?} as {r:?}");
                }
                s = d.next(s, b'x');
            }
            assert!(recounted > 10, "{re}");
        }
    }

    #[test]
    fn walks_jump_where_characters_lead_apart_but_stay_inside() {
        let depth = 16;
        // A key that must hold two `/`: after `"`, characters lead three ways, none out.
        let slashes = dfa(r#""[^"\\\x00-\x1f]*/[^"\\\x00-\x1f]*/[^"\\\x00-\x1f]*""#);
        let body = slashes.next(slashes.start(), b'"');
        assert_eq!(shift(&slashes, body, Alphabet::Strings), Shift::Mixed);
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        assert!(
            loops.test(&slashes, body),
            "every character stays in the key"
        );
        // Asked only for loops (the suffix walks), it is not one.
        assert!(!Loops::new(Alphabet::Strings, depth, false).test(&slashes, body));
        // One that must not hold two `/`: the second kills it.
        let not_two = dfa(r#""[^"\\\x00-\x1f/]*(?:/[^"\\\x00-\x1f/]*)?""#);
        let body = not_two.next(not_two.start(), b'"');
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        assert!(!loops.test(&not_two, body));
        // ... but for `/`, every character stays inside.
        assert_eq!(loops.inside_except(&not_two, body), Some(vec![b'/']));
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        let body = slashes.next(slashes.start(), b'"');
        assert_eq!(loops.inside_except(&slashes, body), Some(vec![]));
        // A key of ASCII only: a multi-byte character kills it.
        let ascii = dfa(r#""[ -!#-\[\]-~]*""#);
        let body = ascii.next(ascii.start(), b'"');
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        assert!(!loops.test(&ascii, body));
        assert_eq!(
            loops.inside_except(&ascii, body),
            None,
            "no byte sets that apart"
        );
        // A pattern's `.` in a string: every character but U+2028 and U+2029 (lead byte
        // 0xe2, as for `—` and `…`, which stay).
        let dot = dfa("\"[^\"\\\\\\x00-\\x1f\u{2028}\u{2029}]*\"");
        let body = dot.next(dot.start(), b'"');
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        assert_eq!(loops.inside_except(&dot, body), Some(vec![0xe2]));
        // Digits: more than a few bytes kill them.
        let digits = dfa("[0-9]+");
        let mut loops = Loops::new(Alphabet::Strings, depth, true);
        assert_eq!(loops.inside_except(&digits, digits.start()), None);
        // A key that ends at a character (`x` closes it): accepting inside, no jump.
        let ends = dfa(r#""[a-w]*x?"#);
        let body = ends.next(ends.start(), b'"');
        assert!(!Loops::new(Alphabet::Strings, depth, true).test(&ends, body));
    }

    /// A key that must not be one of a few names stays in its body as the plain string's
    /// body does, answered from the plain string's state without building the product's
    /// states; a key that must not match an infinite language is searched as before.
    #[test]
    fn keys_that_must_not_be_a_few_names_loop_as_the_plain_body() {
        use corral_grammar::Combine::FirstNotSecond;
        use std::sync::Arc;
        let plain = Arc::new(dfa(r#""(?:[^"\\\x00-\x1f]|\\["\\nt])*""#));
        let names = Arc::new(dfa(r#""(?:apple|apricot|banana)""#));
        let key = LexemeDfa::product(&plain, &names, FirstNotSecond, 1 << 24);
        let body = key.next(key.start(), b'"');
        let (a, x) = key.first_over_finite(body).expect("the names are finite");
        assert_eq!(
            shift(a, x, Alphabet::Strings),
            Shift::To(x),
            "the plain body"
        );
        let before = key.len();
        let mut loops = Loops::new(Alphabet::Strings, 16, true);
        assert!(loops.test(&key, body), "every character stays in the key");
        assert!(key.len() <= before + 1, "no search of the product's states");
        // A name spelled out is refused, a longer key is not.
        let run = |bytes: &[u8]| bytes.iter().fold(key.start(), |s, &b| key.next(s, b));
        assert_eq!(run(b"\"apple\""), DEAD);
        assert!(run(b"\"apples\"").is_accepting());
        // Names that start with `a`, then anything: infinitely many, so no shortcut; the
        // search still finds that every character stays inside.
        let any_a = Arc::new(dfa(r#""a[^"\\\x00-\x1f]*""#));
        let key = LexemeDfa::product(&plain, &any_a, FirstNotSecond, 1 << 24);
        let body = key.next(key.start(), b'"');
        assert!(key.first_over_finite(body).is_none());
        assert!(Loops::new(Alphabet::Strings, 16, true).test(&key, body));
    }

    #[test]
    fn string_bodies_shift_uniformly_and_bounds_kill() {
        let d = dfa(r#""(?:[^"\\\x00-\x1f]|\\["\\nt])*""#);
        let body = d.next(d.start(), b'"');
        assert_eq!(
            shift(&d, body, Alphabet::Strings),
            Shift::To(body),
            "a loop"
        );
        let counted = dfa(r#""[^"\\]{0,2}""#);
        let s0 = counted.next(counted.start(), b'"');
        let Shift::To(s1) = shift(&counted, s0, Alphabet::Strings) else {
            panic!("uniform")
        };
        let Shift::To(s2) = shift(&counted, s1, Alphabet::Strings) else {
            panic!("uniform")
        };
        assert_eq!(shift(&counted, s2, Alphabet::Strings), Shift::Kills);
        let mut memo = |s| shift(&counted, s, Alphabet::Strings);
        let c = chain(s0, 100, &mut memo).unwrap();
        assert_eq!((c.states.len(), c.left, c.self_loop), (3, Some(2), false));
        // Letters only: not every slice character.
        let letters = dfa("[a-z]+");
        assert_eq!(
            shift(&letters, letters.start(), Alphabet::Strings),
            Shift::Mixed
        );
        // Letters and digits, then `@`: uniform on the words alphabet, a loop.
        let name = dfa("[A-Za-z0-9]+@[a-z]");
        let s1 = name.next(name.start(), b'x');
        assert_eq!(shift(&name, s1, Alphabet::Words), Shift::To(s1));
        assert!(few_suffix_starts(&name, s1), "only '@' goes on");
        assert_eq!(shift(&name, name.start(), Alphabet::Words), Shift::To(s1));
        // Lower case only: mixed on words.
        assert_eq!(
            shift(&letters, letters.start(), Alphabet::Words),
            Shift::Mixed
        );
        // A state that takes nearly every byte is not worth slicing by words.
        let wide = dfa("[^,]*,");
        assert_eq!(
            shift(&wide, wide.start(), Alphabet::Words),
            Shift::To(wide.start())
        );
        assert!(!few_suffix_starts(&wide, wide.start()));
    }
}

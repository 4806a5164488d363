//! DFAs composed from segments, their transitions computed on first use.
//!
//! A lexeme of a machine-written grammar is often a sequence whose pieces are simple but
//! whose counted repetitions make its DFA large: a JSON string with `maxLength: 80` is `"`
//! then 80 copies of a JSON character (with every escape) then `"`; a separator between
//! object members is `[ \t\n\r]{0,32} "," [ \t\n\r]{0,32} "\"key\"" ...`. Subset
//! construction of such a regex, then minimization, costs milliseconds; a server that gets
//! a new JSON Schema with each request pays them before its first token. Composed, the DFA
//! costs nothing up front:
//!
//! - the lexeme is split into *segments*: counted repetitions `x{m,n}` of a body `x` that is
//!   prefix-free (an iteration ends the moment the body's DFA accepts) and not nullable,
//!   and plain runs between them; the bodies and plain runs are small DFAs built by subset
//!   construction;
//! - a counted segment's states are `(count, state of x)`: an iteration that completes at
//!   count `c` goes to `(c + 1, start)`; no iteration starts at the upper bound;
//! - segments are joined where each junction is deterministic: from a state where a segment
//!   may end, a byte either continues that segment or starts a following one (the next, or
//!   one past nullable segments), never both, which is checked on first-byte sets when the
//!   lexeme is composed. Otherwise the lexeme is built by subset construction as a whole.
//!
//! The state space is known from the segments (offsets of each segment's states), so the
//! table is allocated up front and filled entry by entry as the recognizer and the mask
//! computation ask: a state's flags and liveness are local to its segment (every segment's
//! language is non-empty, so whatever can finish its segment can finish the lexeme). The
//! result accepts exactly the regex's language; it is not minimized.

use super::{DEAD, Fill, INDEX, LexemeDfa, StateId, Table};

/// Index 0, local or global: the dead state's.
const DEAD_IX: u32 = 0;
use crate::error::ErrorKind;
use regex_syntax::hir::{Hir, HirKind};
use std::sync::{Arc, OnceLock};

/// Counted repetitions with fewer iterations are left to subset construction.
const MIN_COUNT: u32 = 2;

/// The longest segment keys, summed, for which a composed DFA names its residuals.
const MAX_RESIDUAL_KEYS: usize = 1 << 14;

/// A 256-bit byte set.
type Bytes = [u64; 4];

fn disjoint(a: &Bytes, b: &Bytes) -> bool {
    a.iter().zip(b).all(|(x, y)| x & y == 0)
}

fn union(a: &Bytes, b: &Bytes) -> Bytes {
    [a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]]
}

#[derive(Clone, Debug)]
enum Segment {
    /// A DFA (built by subset construction), and the tagged id of each of its state
    /// indices: local states are its indices.
    Plain(Arc<LexemeDfa>, Vec<StateId>),
    /// `body{min,max}`: local state `count * body.len + index`; `tags` as for `Plain`.
    Counted {
        body: Arc<LexemeDfa>,
        tags: Vec<StateId>,
        min: u32,
        max: u32,
    },
}

impl Segment {
    /// Number of local states (index 0, and the indices no state has, are never reached).
    fn size(&self) -> usize {
        match self {
            Segment::Plain(d, _) => d.len,
            Segment::Counted { body, max, .. } => (*max as usize + 1) * body.len,
        }
    }

    fn start(&self) -> u32 {
        match self {
            Segment::Plain(d, _) => d.start.index32(),
            Segment::Counted { body, .. } => body.start.index32(),
        }
    }

    /// `(count, body index)` of a counted segment's local state.
    fn split(body: &LexemeDfa, q: u32) -> (u32, u32) {
        (q / body.len as u32, q % body.len as u32)
    }

    /// Whether the segment may end in local state `q`.
    fn accepting(&self, q: u32) -> bool {
        match self {
            Segment::Plain(_, tags) => q != DEAD_IX && tags[q as usize].is_accepting(),
            Segment::Counted { body, min, .. } => {
                let (c, x) = Self::split(body, q);
                x == body.start.index32() && c >= *min
            }
        }
    }

    /// Whether some byte continues the segment from local state `q`.
    fn can_continue(&self, q: u32) -> bool {
        match self {
            Segment::Plain(_, tags) => q != DEAD_IX && tags[q as usize].can_continue(),
            Segment::Counted { body, max, .. } => {
                let (c, x) = Self::split(body, q);
                x != DEAD_IX && c < *max
            }
        }
    }

    /// The local state after `byte` in local state `q` (0, dead, if none).
    fn next(&self, q: u32, byte: u8) -> u32 {
        match self {
            Segment::Plain(d, _) => {
                if q == DEAD_IX {
                    DEAD_IX
                } else {
                    d.next_from_index(q, byte).index32()
                }
            }
            Segment::Counted { body, max, .. } => {
                let (c, x) = Self::split(body, q);
                if x == DEAD_IX || c >= *max {
                    return DEAD_IX;
                }
                // `next` reads only the index of a state, not its flags.
                let y = body.next_from_index(x, byte);
                if y.is_dead() {
                    DEAD_IX
                } else if y.is_accepting() {
                    (c + 1) * body.len as u32 + (body.start.index32())
                } else {
                    c * body.len as u32 + (y.index32())
                }
            }
        }
    }

    /// Bytes that can start the segment.
    fn first(&self) -> Bytes {
        match self {
            Segment::Plain(d, _) => d.first,
            Segment::Counted { body, max, .. } if *max > 0 => body.first,
            Segment::Counted { .. } => [0; 4],
        }
    }

    /// Bytes that continue the segment from a local state where it may end.
    fn continuing_at_ends(&self) -> Bytes {
        match self {
            Segment::Plain(d, tags) => {
                let mut out = [0u64; 4];
                for (i, &t) in tags.iter().enumerate().skip(1) {
                    if t != DEAD && t.is_accepting() {
                        for b in 0..=255u8 {
                            if !d.next_from_index(i as u32, b).is_dead() {
                                out[b as usize / 64] |= 1 << (b % 64);
                            }
                        }
                    }
                }
                out
            }
            // An end at a count below the upper bound may start another iteration.
            Segment::Counted { body, min, max, .. } if min < max => body.first,
            Segment::Counted { .. } => [0; 4],
        }
    }

    /// The fewest bytes from local state `q` to an end of the segment, and the first.
    fn shortest(&self, q: u32) -> Option<(u32, u8)> {
        match self {
            Segment::Plain(d, tags) => d.shortest(tags[q as usize]),
            Segment::Counted {
                body, tags, min, ..
            } => {
                let (c, x) = Self::split(body, q);
                let (whole, first) = body.shortest(body.start)?;
                if x == body.start.index32() {
                    let iterations = min.saturating_sub(c);
                    Some((iterations.saturating_mul(whole), first))
                } else {
                    // Finish this iteration, then the ones the lower bound still asks for.
                    let (rest, b) = body.shortest(tags[x as usize])?;
                    let more = min.saturating_sub(c + 1);
                    Some((rest + more.saturating_mul(whole), b))
                }
            }
        }
    }
}

/// A composed DFA's segments and how its global state indices map onto them.
#[derive(Clone, Debug)]
pub(super) struct Composed {
    segments: Vec<Segment>,
    /// Global index of each segment's local state 0.
    offset: Vec<u32>,
    /// `nullable_after[j]`: every segment from `j` on may be empty.
    nullable_after: Vec<bool>,
    /// `enter_after[j]`: some segment from `j` on (past nullable ones) has a first byte.
    enter_after: Vec<bool>,
    /// One byte of each global byte class.
    reps: Vec<u8>,
    /// Per segment: the shortest yield of the segments after it (saturating), and its first
    /// byte (`None` when it is empty).
    tail: OnceLock<Vec<(u32, Option<u8>)>>,
    /// Per segment: its piece's key (the plain run's, or a counted segment's body's).
    keys: Vec<String>,
    /// Per segment: the key of the segments from it on (see [`Composed::residual`]);
    /// empty where they would be too long.
    residuals: OnceLock<Vec<Arc<str>>>,
}

impl Composed {
    /// The segment of global index `g` and its local state.
    fn locate(&self, g: u32) -> (usize, u32) {
        let j = self.offset.partition_point(|&o| o <= g) - 1;
        (j, g - self.offset[j])
    }

    /// Where global index `g` starts an iteration of a counted segment whose body is one
    /// ASCII byte of a set, whose bounds differ, and that the lexeme cannot end in (the
    /// segments after it are not all nullable): the set, the iterations left, and those
    /// still needed before another segment may start. Every byte of the set leads on to
    /// the next count, and is dead past the last; any other byte leaves the segment.
    pub(super) fn byte_run(&self, g: u32) -> Option<(u128, u32, u32)> {
        let (_, body, min, max, c) = self.run_start(g)?;
        let mut bytes = 0u128;
        for b in 0..=255u8 {
            let t = body.next(body.start, b);
            if t == DEAD {
                continue;
            }
            if b >= 0x80 || !t.is_accepting() || t.can_continue() {
                return None;
            }
            bytes |= 1 << b;
        }
        Some((bytes, max - c, min.saturating_sub(c)))
    }

    /// The global index `k` counts before `g` in the counted run of single bytes `g`
    /// starts (see [`Composed::byte_run`]), where that count has reached the run's lower
    /// bound; `None` elsewhere. From both, every byte that is not the run's leads to the
    /// same state: past the lower bound, a count matters only to the run's own bytes.
    pub(super) fn run_back(&self, g: u32, k: u32) -> Option<u32> {
        // The body's bytes (one class) are the caller's `byte_run` check.
        let (j, body, min, _, c) = self.run_start(g)?;
        let back = c.checked_sub(k).filter(|&b| b >= min && k > 0)?;
        Some(self.offset[j] + back * body.len as u32 + body.start.index32())
    }

    /// Where `g` starts an iteration of a counted segment that the lexeme cannot end in,
    /// with bounds that differ (what [`Composed::byte_run`] asks before its body's
    /// bytes): the segment, its body, its bounds and `g`'s count.
    fn run_start(&self, g: u32) -> Option<(usize, &LexemeDfa, u32, u32, u32)> {
        if g == DEAD_IX {
            return None;
        }
        let (j, q) = self.settle(g)?;
        let (body, min, max, c, x) = self.counted_at(j, q)?;
        // With `min < max` a byte of the run never starts what follows (the junction was
        // checked); with `min == max` it may, once the run is done.
        (x == body.start.index32() && !self.nullable_after[j + 1] && min < max)
            .then_some((j, body, min, max, c))
    }

    /// What is left of the lexeme from global index `g`: the key of the segments it can
    /// still read, its local state in the first of them, and that segment's offset (its
    /// global index of local 0). A state where its segment is finished (accepting, and
    /// no byte continues the segment) is named as the next segment's start, which reads
    /// the same. From two states with equal residuals (in two DFAs, or one) every byte
    /// string leads the same way, to states whose global indices differ by the difference
    /// of the offsets: segments are numbered in order, equal segments have equal sizes,
    /// and no byte leads back to an earlier segment. `None` for the dead state, for a
    /// state past every segment, and where the keys would exceed [`MAX_RESIDUAL_KEYS`].
    pub(super) fn residual(&self, g: u32) -> Option<(Arc<str>, u32, u32)> {
        if g == DEAD_IX {
            return None;
        }
        let keys = self.residuals.get_or_init(|| {
            if self.keys.iter().map(String::len).sum::<usize>() > MAX_RESIDUAL_KEYS {
                return Vec::new();
            }
            // Each segment by its kind, its bounds and its key, the key's length first, so
            // that the concatenation names the segments one-to-one.
            let mut out: Vec<Arc<str>> = Vec::with_capacity(self.keys.len());
            let mut tail = String::new();
            for (seg, key) in self.segments.iter().zip(&self.keys).rev() {
                let named = match seg {
                    Segment::Plain(..) => format!("P{}:{key}", key.len()),
                    Segment::Counted { min, max, .. } => {
                        format!("C{min},{max},{}:{key}", key.len())
                    }
                };
                tail.insert_str(0, &named);
                out.push(tail.as_str().into());
            }
            out.reverse();
            out
        });
        let (j, q) = self.settle(g)?;
        keys.get(j).map(|k| (k.clone(), q, self.offset[j]))
    }

    /// Segment `j`'s body, bounds, and local state `q`'s count and body state, where the
    /// segment is counted.
    fn counted_at(&self, j: usize, q: u32) -> Option<(&LexemeDfa, u32, u32, u32, u32)> {
        let Segment::Counted { body, min, max, .. } = &self.segments[j] else {
            return None;
        };
        let (c, x) = Segment::split(body, q);
        Some((body, *min, *max, c, x))
    }

    /// The segment and local state of global index `g` (not dead), where a finished
    /// segment (accepting, and no byte continues it) stands as the next one's start, which
    /// reads the same; `None` past the last segment.
    fn settle(&self, g: u32) -> Option<(usize, u32)> {
        let (j, q) = self.locate(g);
        let seg = &self.segments[j];
        if seg.accepting(q) && !seg.can_continue(q) {
            let next = self.segments.get(j + 1)?;
            return Some((j + 1, next.start()));
        }
        Some((j, q))
    }

    /// Global index `g` with its flags.
    pub(super) fn tag(&self, g: u32) -> StateId {
        if g == DEAD_IX {
            return DEAD;
        }
        let (j, q) = self.locate(g);
        let seg = &self.segments[j];
        let ends = seg.accepting(q);
        let accept = ends && self.nullable_after[j + 1];
        // Past the end of this segment: some later segment reachable (through nullable
        // ones) has a first byte.
        let enter_later = ends && self.enter_after[j + 1];
        let cont = seg.can_continue(q) || enter_later;
        StateId::new(g, accept, cont)
    }

    /// The tagged target of global index `g` on byte class `class`.
    pub(super) fn next(&self, g: u32, class: usize) -> StateId {
        if g == DEAD_IX {
            return DEAD;
        }
        let b = self.reps[class];
        let (j, q) = self.locate(g);
        let seg = &self.segments[j];
        let t = seg.next(q, b);
        if t != DEAD_IX {
            return self.tag(self.offset[j] + t);
        }
        if seg.accepting(q) {
            // Determinism was checked: at most one following segment takes `b`.
            for (l, s) in self.segments.iter().enumerate().skip(j + 1) {
                let t = s.next(s.start(), b);
                if t != DEAD_IX {
                    return self.tag(self.offset[l] + t);
                }
                if !s.accepting(s.start()) {
                    break;
                }
            }
        }
        DEAD
    }

    /// A global index that behaves as `g` does on every byte string of at most `depth`
    /// bytes, at a lower count of the same counted segment; `None` if there is none.
    ///
    /// From count `c`, `depth` bytes reach counts `c..=c + depth` at most, and a count
    /// matters only by whether it has reached the segment's lower bound (the segment may
    /// end) and its upper bound (no iteration starts). Counts that reach neither bound
    /// within `depth` iterations are alike, and so are counts at or past the lower bound
    /// that do not reach the upper one: the lowest of each stands for the others.
    pub(super) fn representative(&self, g: u32, depth: u32) -> Option<u32> {
        if g == DEAD_IX {
            return None;
        }
        let (j, q) = self.locate(g);
        let (body, min, max, c, x) = self.counted_at(j, q)?;
        let reach = c as u64 + depth as u64;
        if reach >= max as u64 {
            return None;
        }
        let lowest = if c >= min {
            min
        } else if reach < min as u64 {
            0
        } else {
            return None;
        };
        (lowest < c).then(|| self.offset[j] + lowest * body.len as u32 + x)
    }

    /// The global index bytes lead to from `to` where they lead from `from` to `t`, for
    /// `from` the representative of `to` (see [`Composed::representative`], at a depth of
    /// at least those bytes): the same place, its count moved by the difference (a state
    /// past the counted segment is the same from both). Transitions that reach neither
    /// bound depend on a count only through that difference.
    pub(super) fn recount(&self, t: u32, from: u32, to: u32) -> u32 {
        if t == DEAD_IX || from == to {
            return t;
        }
        let (j, q) = self.locate(from);
        let Segment::Counted { body, .. } = &self.segments[j] else {
            return t;
        };
        let (jt, qt) = self.locate(t);
        if jt != j {
            return t;
        }
        let (from_count, _) = Segment::split(body, q);
        let (to_count, _) = Segment::split(body, self.locate(to).1);
        debug_assert!(to_count >= from_count, "`from` is `to` at a lower count");
        let (count, y) = Segment::split(body, qt);
        self.offset[j] + (count + to_count - from_count) * body.len as u32 + y
    }

    /// The fewest bytes from global index `g` to an accepting state, and the first.
    pub(super) fn shortest(&self, g: u32) -> Option<(u32, u8)> {
        if g == DEAD_IX {
            return None;
        }
        let (j, q) = self.locate(g);
        let (here, b) = self.segments[j].shortest(q)?;
        let (after, tail_first) = self.tail()[j];
        let total = here.saturating_add(after);
        if here > 0 {
            return Some((total, b));
        }
        match tail_first {
            Some(b) => Some((total, b)),
            None => Some((0, 0)),
        }
    }

    fn tail(&self) -> &[(u32, Option<u8>)] {
        self.tail.get_or_init(|| {
            let n = self.segments.len();
            let mut out = vec![(0u32, None); n];
            for j in (0..n.saturating_sub(1)).rev() {
                let next = &self.segments[j + 1];
                let (len, first) = next.shortest(next.start()).unwrap_or((u32::MAX, 0));
                let (rest, rest_first) = out[j + 1];
                out[j] = (
                    len.saturating_add(rest),
                    if len > 0 { Some(first) } else { rest_first },
                );
            }
            out
        })
    }
}

/// `hir` composed from segments, if it has a counted repetition worth composing and its
/// junctions are deterministic; `None` otherwise (build it by subset construction).
pub(super) fn compose(
    hir: &Hir,
    size_limit: usize,
    cache: Option<&crate::DfaCache>,
) -> Option<Result<LexemeDfa, ErrorKind>> {
    // Pieces by subset construction, shared through the cache (`#t ` keeps their keys
    // apart from lexemes', which may be composed).
    // Each piece's key also names its segment (see [`Composed::residual`]).
    let tables = |h: &Hir| {
        let key = format!("#t {}", super::regex_key(h));
        crate::dfa_cache::build_with(cache, &key, size_limit, || {
            LexemeDfa::build_tables(h, size_limit)
        })
        .map(|d| (d, key))
    };
    let items: Vec<&Hir> = match hir.kind() {
        HirKind::Concat(xs) => xs.iter().collect(),
        _ => vec![hir],
    };
    if !items.iter().any(|h| counted(h).is_some()) {
        return None;
    }
    let mut segments = Vec::new();
    let mut keys = Vec::new();
    let mut plain: Vec<Hir> = Vec::new();
    let flush = |plain: &mut Vec<Hir>,
                 segments: &mut Vec<Segment>,
                 keys: &mut Vec<String>|
     -> Result<bool, ErrorKind> {
        if plain.is_empty() {
            return Ok(true);
        }
        let (d, key) = tables(&Hir::concat(std::mem::take(plain)))?;
        // Composition needs every segment's language non-empty and not only the empty
        // string.
        if d.start == DEAD || !d.start.can_continue() {
            return Ok(false);
        }
        let tags = d.tags();
        segments.push(Segment::Plain(d, tags));
        keys.push(key);
        Ok(true)
    };
    for h in items {
        let Some((sub, min, max)) = counted(h) else {
            plain.push(h.clone());
            continue;
        };
        let (body, key) = match tables(sub) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        if !prefix_free(&body) {
            return None;
        }
        match flush(&mut plain, &mut segments, &mut keys) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        keys.push(key);
        let tags = body.tags();
        segments.push(Segment::Counted {
            body,
            tags,
            min,
            max,
        });
    }
    match flush(&mut plain, &mut segments, &mut keys) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => return Some(Err(e)),
    }
    join(segments, keys, size_limit).transpose()
}

/// `x{m,n}` with a non-nullable `x` and a large enough finite `n`: `(x, m, n)`.
fn counted(h: &Hir) -> Option<(&Hir, u32, u32)> {
    let HirKind::Repetition(r) = h.kind() else {
        return None;
    };
    let max = r.max?;
    (max >= MIN_COUNT && r.min <= max && r.sub.properties().minimum_len().is_some_and(|n| n > 0))
        .then_some((&*r.sub, r.min, max))
}

impl LexemeDfa {
    /// Whether a counted repetition of this DFA's language composes (see the module docs):
    /// it is prefix-free and does not match the empty string.
    pub(crate) fn composable_body(&self) -> bool {
        prefix_free(self)
    }
}

/// No accepting state of `body` can continue (an iteration ends where it first can), and
/// the start is live and not accepting.
fn prefix_free(body: &LexemeDfa) -> bool {
    if body.start == DEAD || body.start.is_accepting() {
        return false;
    }
    body.tags()
        .iter()
        .all(|&t| t == DEAD || !t.is_accepting() || !t.can_continue())
}

/// The composed DFA of `segments` in sequence; `Ok(None)` where a junction is not
/// deterministic.
fn join(
    segments: Vec<Segment>,
    keys: Vec<String>,
    size_limit: usize,
) -> Result<Option<LexemeDfa>, ErrorKind> {
    let k = segments.len();
    // Determinism: where segment j may end, the bytes that continue it and the bytes that
    // start each following segment reachable from there are pairwise disjoint.
    for j in 0..k {
        let mut seen = segments[j].continuing_at_ends();
        for s in &segments[j + 1..] {
            let f = s.first();
            if !disjoint(&seen, &f) {
                return Ok(None);
            }
            seen = union(&seen, &f);
            if !s.accepting(s.start()) {
                break;
            }
        }
    }
    // Byte classes: the common refinement of the segments' classes, one segment at a time
    // (a class so far and the segment's class name the refined class).
    let mut classes = [0u8; 256];
    let mut reps: Vec<u8> = vec![0];
    // The refined class of each pair (class so far, segment's class), by `so_far * width +
    // of`; `u16::MAX` where not named yet.
    let mut refined: Vec<u16> = Vec::new();
    for s in &segments {
        let (of, width) = match s {
            Segment::Plain(d, _) => (&d.classes, d.stride),
            Segment::Counted { body, .. } => (&body.classes, body.stride),
        };
        refined.clear();
        refined.resize(reps.len() * width, u16::MAX);
        reps.clear();
        for b in 0..=255u8 {
            let pair = classes[b as usize] as usize * width + of[b as usize] as usize;
            if refined[pair] == u16::MAX {
                refined[pair] = reps.len() as u16;
                reps.push(b);
            }
            classes[b as usize] = refined[pair] as u8;
        }
    }
    let stride = reps.len();
    let mut offset = Vec::with_capacity(k);
    let mut n = 1usize;
    for s in &segments {
        offset.push(n as u32);
        n += s.size();
    }
    if n * stride * 4 > size_limit || n > INDEX as usize {
        return Err(ErrorKind::Limit {
            what: "a lexeme's automaton".into(),
            value: n * stride * 4,
            limit_name: "max_lexeme_bytes",
            limit: size_limit,
        });
    }
    let mut nullable_after = vec![true; k + 1];
    let mut enter_after = vec![false; k + 1];
    for j in (0..k).rev() {
        let s = &segments[j];
        let nullable = s.accepting(s.start());
        nullable_after[j] = nullable_after[j + 1] && nullable;
        enter_after[j] = s.first() != [0; 4] || (nullable && enter_after[j + 1]);
    }
    let composed = Composed {
        offset,
        nullable_after,
        enter_after,
        reps,
        segments,
        tail: OnceLock::new(),
        keys,
        residuals: OnceLock::new(),
    };
    let start = composed.tag(composed.offset[0] + composed.segments[0].start());
    let live: Vec<bool> = (0..stride)
        .map(|c| composed.next(start.index32(), c) != DEAD)
        .collect();
    let mut first = [0u64; 4];
    for b in 0..=255u8 {
        if live[classes[b as usize] as usize] {
            first[b as usize / 64] |= 1 << (b % 64);
        }
    }
    Ok(Some(LexemeDfa {
        classes,
        stride,
        trans: Table::unknown(n, stride),
        len: n,
        first,
        start,
        fill: Fill::Composed(Box::new(composed)),
        shortest: OnceLock::new(),
        numbering: 0,
        finite: false,
    }))
}

#[cfg(test)]
mod tests;

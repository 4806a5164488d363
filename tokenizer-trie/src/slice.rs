//! The vocabulary sliced by string characters, once per tokenizer.
//!
//! Inside a JSON string (or any lexeme whose characters are most of Unicode) almost every
//! token is allowed, so walking the whole trie there costs a visit per node. The slice
//! precomputes what does not depend on the grammar:
//!
//! - *slice tokens*: tokens made only of *slice characters* (every Unicode scalar value from
//!   U+0020 up except `"`, `\` and U+007F: what every JSON string body allows unescaped),
//!   perhaps ending inside one (a partial UTF-8 sequence); bitsets of them by how many
//!   characters they start ([`CharSlice::mark_upto`]);
//! - every other token split into a *prefix* of whole slice characters (counted) and a
//!   *suffix* from the first byte that is not part of one (a quote, a backslash, a control
//!   character, a byte that does not start a character); the distinct suffixes in one small
//!   trie, each with its tokens by prefix length.
//!
//! A second slice, by ASCII letters and digits ([`Alphabet::Words`]), serves the lexemes
//! of names, e-mail addresses, host names and identifiers, where letters and digits are
//! what keeps a lexeme going and every other byte ends or kills it: its suffixes all start
//! with a byte that is not a letter or digit, and a walk from such a state dies at the
//! first byte of most of them.
//!
//! A lexeme state where every slice character leads to the same next state (the body of a
//! string, counted or not) then allows the slice tokens of at most as many characters as
//! the lexeme has left, and of the others exactly those whose suffix its DFA takes from the
//! state their prefix leads to: a walk of the suffix trie (a few thousand nodes), not of the
//! vocabulary. The engine does that part (corral-engine's mask computation).

use crate::token::TokenId;
use crate::trie::TokenTrie;
use crate::vocab::Vocabulary;
use fixedbitset::FixedBitSet;

/// Slice tokens are kept in bitsets by the characters they start up to this many; longer
/// ones in a list.
pub const SLICE_BITSETS: usize = 16;

/// Whether `c` is a slice character (of [`Alphabet::Strings`]).
#[inline]
pub fn is_slice_char(c: char) -> bool {
    c >= ' ' && c != '"' && c != '\\' && c != '\u{7f}'
}

/// The characters a slice is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alphabet {
    /// What every JSON string body allows unescaped ([`is_slice_char`]).
    Strings,
    /// ASCII letters and digits.
    Words,
}

impl Alphabet {
    /// Every alphabet, in [`Alphabet::index`] order.
    pub const ALL: [Alphabet; 2] = [Alphabet::Strings, Alphabet::Words];

    /// Whether `c` is one of the alphabet's characters.
    #[inline]
    pub fn admits(self, c: char) -> bool {
        match self {
            Alphabet::Strings => is_slice_char(c),
            Alphabet::Words => c.is_ascii_alphanumeric(),
        }
    }

    /// 0 for `Strings`, 1 for `Words` (for tables by alphabet).
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A suffix's id in [`CharSlice::suffixes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SuffixId(pub u32);

impl SuffixId {
    /// The id as an index into per-suffix tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which tokens of a suffix a walk of the suffix trie is for, by their prefix of slice
/// characters: a sliced state's own walk serves the tokens that are the suffix alone, the
/// walks of the states a prefix leads to serve the others. Most suffixes serve only
/// the first kind (a token that starts with a byte that is not a slice character); few
/// tokens run from letters into punctuation, so a walk for a prefix is small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// Tokens with no prefix.
    Empty = 1,
    /// Tokens with a prefix of at least one character.
    NonEmpty = 2,
    /// Both.
    Any = 3,
}

impl Prefix {
    /// The kind a walk for tokens with a prefix of `n` characters serves.
    pub fn of_length(n: u32) -> Prefix {
        if n == 0 {
            Prefix::Empty
        } else {
            Prefix::NonEmpty
        }
    }

    /// 0, 1, 2 (for tables by kind).
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

/// The vocabulary sliced by string characters. See the module docs.
#[derive(Clone, Debug)]
pub struct CharSlice {
    /// `upto[c]`: slice tokens that start at most `c` characters.
    upto: Vec<FixedBitSet>,
    /// Slice tokens that start more than [`SLICE_BITSETS`] characters: `(chars, token)`,
    /// sorted by chars.
    long: Vec<(u32, TokenId)>,
    /// The distinct suffixes of the other tokens; a suffix's terminal node carries its id
    /// (as the trie's "token").
    suffixes: TokenTrie,
    /// Per suffix id: the range of `by_suffix` holding its tokens, sorted by prefix length.
    ranges: Vec<(u32, u32)>,
    /// `(prefix chars, token)`, grouped by suffix.
    by_suffix: Vec<(u32, TokenId)>,
    /// `by_prefix[n]`: `(suffix, token)` of the tokens with a suffix after `n` characters.
    by_prefix: Vec<Vec<(SuffixId, TokenId)>>,
    /// Per suffix id: its bytes.
    suffix_bytes: Vec<Box<[u8]>>,
    /// The longest prefix (in characters) of a token with a suffix.
    max_prefix: u32,
    /// The most characters a slice token starts.
    max_chars: u32,
    /// Per token id: its tail (see [`CharSlice::subtree_tails`]; `u16::MAX` for none).
    by_id: Vec<u16>,
    /// Per suffix id: its tail.
    suffix_tails: Vec<u16>,
    /// Per suffix-trie node (and one past the last): the first suffix id at or after it.
    suffixes_at: Vec<u32>,
    /// Per suffix-trie node: the [`Prefix`] bits of the tokens of its subtree's suffixes.
    node_prefixes: Vec<u8>,
    /// The tokens of the main trie in its order (a subtree's are a range), each with its
    /// tail (see [`CharSlice::subtree_tails`]); empty until [`CharSlice::index_trie`].
    tails: Vec<Tail>,
    /// Per ASCII byte: below the main trie's node for that first byte, the tokens whose
    /// rest is slice characters (tail at most 1) as a bitset, and the positions in `tails`
    /// of the others. Empty until [`CharSlice::index_trie`].
    first_bytes: Vec<Option<FirstByte>>,
    /// The union of `first_bytes`' sets of tokens whose rest is slice characters.
    below_ascii: FixedBitSet,
    /// The main trie's tokens that are slice characters throughout (tail 0), and the
    /// positions in `tails` of the others.
    whole: FirstByte,
    /// Per first byte (and one past the last): where its tokens start in `whole.others`
    /// (in trie order, so by first byte).
    whole_at: Vec<u32>,
    /// Per byte (built when first asked for): the tokens of `whole`'s set that hold it.
    with_byte: Box<[std::sync::OnceLock<FixedBitSet>]>,
    /// The bytes of the tokens in `tails` whose tail is not 0, one after another in trie
    /// order: a walk that runs them reads memory in order.
    tail_bytes: Vec<u8>,
    /// Per main-trie node (and one past the last): where its tokens start in `tails`.
    tails_at: Vec<u32>,
    alphabet: Alphabet,
}

/// A token of the main trie with its tail (see [`CharSlice::subtree_tails`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    /// The token.
    pub token: TokenId,
    /// The byte offset after which every byte is part of a slice character.
    pub tail: u16,
    /// Where its bytes are in [`CharSlice::tail_bytes`] (tokens with a tail only).
    start: u32,
    len: u16,
}

/// The tokens below a first byte's node, for [`CharSlice::below_first_byte`].
#[derive(Clone, Debug)]
struct FirstByte {
    rest_in_slice: FixedBitSet,
    others: Vec<u32>,
}

/// How a token's bytes split: slice characters started, and where the suffix begins
/// (`None`: the whole token is slice characters, perhaps ending inside one).
fn split(bytes: &[u8], alphabet: Alphabet) -> (u32, Option<usize>) {
    let mut chars = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        let len = match bytes[i] {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return (chars, Some(i)),
        };
        let end = (i + len).min(bytes.len());
        match std::str::from_utf8(&bytes[i..end]) {
            Ok(s) => {
                if !s.chars().all(|c| alphabet.admits(c)) {
                    return (chars, Some(i));
                }
            }
            // A partial character at the end: a slice token if some completion of it is a
            // slice character (every multi-byte character is one of `Strings`).
            Err(e)
                if alphabet == Alphabet::Strings
                    && end == bytes.len()
                    && e.error_len().is_none()
                    && len > 1 =>
            {
                return (chars + 1, None);
            }
            Err(_) => return (chars, Some(i)),
        }
        chars += 1;
        i = end;
    }
    (chars, None)
}

/// Where the last run of slice characters in `bytes` starts: the offset just past the last
/// byte that is not part of one. Bytes are read as UTF-8 from the start, resynchronizing
/// one byte on after an invalid sequence, so every ASCII byte stands alone and the offset
/// after one is always a character boundary.
fn tail(bytes: &[u8], alphabet: Alphabet) -> usize {
    let mut tail = 0;
    let mut i = 0;
    while i < bytes.len() {
        let len = match bytes[i] {
            b @ 0x00..=0x7f => {
                i += 1;
                if !alphabet.admits(b as char) {
                    tail = i;
                }
                continue;
            }
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 0,
        };
        let end = (i + len.max(1)).min(bytes.len());
        match std::str::from_utf8(&bytes[i..end]) {
            Ok(s) if len > 0 => {
                i = end;
                if !s.chars().all(|c| alphabet.admits(c)) {
                    tail = i;
                }
            }
            // A partial character at the end, as in `split`.
            Err(e)
                if alphabet == Alphabet::Strings
                    && end == bytes.len()
                    && e.error_len().is_none()
                    && len > 1 =>
            {
                i = end;
            }
            _ => {
                i += 1;
                tail = i;
            }
        }
    }
    tail
}

/// The [`Prefix`] bits of a suffix's tokens (sorted by prefix length).
fn prefix_bits(tokens: &[(u32, TokenId)]) -> u8 {
    let empty = tokens.first().is_some_and(|&(p, _)| p == 0);
    let non_empty = tokens.last().is_some_and(|&(p, _)| p > 0);
    (if empty { Prefix::Empty as u8 } else { 0 })
        | if non_empty { Prefix::NonEmpty as u8 } else { 0 }
}

/// Per node of the suffix trie: the [`Prefix`] bits of every suffix in its subtree.
fn subtree_prefixes(
    trie: &TokenTrie,
    ranges: &[(u32, u32)],
    by_suffix: &[(u32, TokenId)],
) -> Vec<u8> {
    let nodes = trie.nodes();
    let mut bits = vec![0u8; nodes.len()];
    // Each node's parent: the last node seen one level up.
    let mut parent = vec![0u32; nodes.len()];
    let mut path: Vec<u32> = vec![0];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let d = n.depth as usize;
        path.truncate(d);
        parent[i] = path[d - 1];
        path.push(i as u32);
        if let Some(sid) = n.token() {
            let (a, b) = ranges[sid.index()];
            bits[i] = prefix_bits(&by_suffix[a as usize..b as usize]);
        }
    }
    for i in (1..nodes.len()).rev() {
        bits[parent[i] as usize] |= bits[i];
    }
    bits
}

impl CharSlice {
    /// Slices the text tokens of `vocab` by string characters; masks are `width` bits wide.
    pub fn new(vocab: &Vocabulary, width: usize) -> CharSlice {
        CharSlice::with_alphabet(vocab, width, Alphabet::Strings)
    }

    /// Slices the text tokens of `vocab` by the characters of `alphabet`.
    pub fn with_alphabet(vocab: &Vocabulary, width: usize, alphabet: Alphabet) -> CharSlice {
        let mut upto_lists: Vec<Vec<TokenId>> = vec![Vec::new(); SLICE_BITSETS + 1];
        let mut long = Vec::new();
        let mut rest: Vec<(&[u8], u32, TokenId)> = Vec::new();
        let mut max_chars = 0;
        let mut by_id = vec![u16::MAX; width];
        for (id, bytes) in vocab.text_tokens() {
            if let Some(t) = by_id.get_mut(id.index()) {
                *t = u16::try_from(tail(bytes, alphabet)).unwrap_or(u16::MAX);
            }
            match split(bytes, alphabet) {
                (chars, None) => {
                    max_chars = max_chars.max(chars);
                    if chars as usize <= SLICE_BITSETS {
                        upto_lists[chars as usize].push(id);
                    } else {
                        long.push((chars, id));
                    }
                }
                (chars, Some(at)) => rest.push((&bytes[at..], chars, id)),
            }
        }
        long.sort_unstable();
        let mut upto = Vec::with_capacity(SLICE_BITSETS + 1);
        let mut acc = FixedBitSet::with_capacity(width);
        for list in &upto_lists {
            for t in list {
                acc.insert(t.index());
            }
            upto.push(acc.clone());
        }
        // Suffix ids by the suffix's bytes.
        rest.sort_unstable_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
        let mut entries: Vec<(Vec<u8>, TokenId)> = Vec::new();
        let mut ranges = Vec::new();
        let mut by_suffix = Vec::with_capacity(rest.len());
        let mut by_prefix: Vec<Vec<(SuffixId, TokenId)>> = Vec::new();
        let mut suffix_bytes = Vec::new();
        let mut suffix_tails = Vec::new();
        let mut max_prefix = 0;
        for (k, &(suffix, chars, id)) in rest.iter().enumerate() {
            if k == 0 || rest[k - 1].0 != suffix {
                let sid = ranges.len() as u32;
                entries.push((suffix.to_vec(), TokenId(sid)));
                suffix_bytes.push(Box::from(suffix));
                suffix_tails.push(u16::try_from(tail(suffix, alphabet)).unwrap_or(u16::MAX));
                ranges.push((by_suffix.len() as u32, by_suffix.len() as u32));
            }
            let sid = SuffixId(ranges.len() as u32 - 1);
            by_suffix.push((chars, id));
            ranges.last_mut().expect("pushed").1 += 1;
            if by_prefix.len() <= chars as usize {
                by_prefix.resize(chars as usize + 1, Vec::new());
            }
            by_prefix[chars as usize].push((sid, id));
            max_prefix = max_prefix.max(chars);
        }
        let suffixes = TokenTrie::from_entries(entries);
        // Suffix ids are in byte order, which is the trie's: a subtree's are a range.
        let mut suffixes_at = Vec::with_capacity(suffixes.nodes().len() + 1);
        let mut next = 0u32;
        for n in suffixes.nodes() {
            suffixes_at.push(next);
            if let Some(sid) = n.token() {
                debug_assert_eq!(sid.0, next, "suffix ids in trie order");
                next += 1;
            }
        }
        suffixes_at.push(next);
        let node_prefixes = subtree_prefixes(&suffixes, &ranges, &by_suffix);
        CharSlice {
            upto,
            long,
            suffixes,
            suffixes_at,
            node_prefixes,
            ranges,
            by_suffix,
            by_prefix,
            suffix_bytes,
            max_prefix,
            max_chars,
            by_id,
            suffix_tails,
            tails: Vec::new(),
            first_bytes: Vec::new(),
            below_ascii: FixedBitSet::new(),
            whole: FirstByte {
                rest_in_slice: FixedBitSet::new(),
                others: Vec::new(),
            },
            whole_at: Vec::new(),
            with_byte: (0..256).map(|_| std::sync::OnceLock::new()).collect(),
            tail_bytes: Vec::new(),
            tails_at: Vec::new(),
            alphabet,
        }
    }

    /// Indexes the tokens of `trie` (the trie of `vocab`) for
    /// [`CharSlice::subtree_tails`].
    pub fn index_trie(&mut self, trie: &TokenTrie, vocab: &Vocabulary) {
        let nodes = trie.nodes();
        self.tails_at = Vec::with_capacity(nodes.len() + 1);
        self.tails.clear();
        self.tail_bytes.clear();
        for (i, n) in nodes.iter().enumerate() {
            self.tails_at.push(self.tails.len() as u32);
            if n.token().is_some() {
                for t in trie.tokens_at(i) {
                    let tail = self.by_id.get(t.index()).copied().unwrap_or(u16::MAX);
                    let start = self.tail_bytes.len() as u32;
                    let mut len = 0;
                    if tail > 0 {
                        let bytes = vocab.token_bytes(t).unwrap_or_default();
                        len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
                        self.tail_bytes.extend_from_slice(&bytes[..len as usize]);
                    }
                    self.tails.push(Tail {
                        token: t,
                        tail,
                        start,
                        len,
                    });
                }
            }
        }
        self.tails_at.push(self.tails.len() as u32);
        let width = self.upto.first().map_or(0, FixedBitSet::len);
        self.whole = FirstByte {
            rest_in_slice: FixedBitSet::with_capacity(width),
            others: Vec::new(),
        };
        self.whole_at = vec![0; 257];
        for (k, t) in self.tails.iter().enumerate() {
            if t.tail == 0 {
                self.whole.rest_in_slice.insert(t.token.index());
            } else {
                let first = self.tail_bytes(t).first().copied().unwrap_or(0);
                self.whole_at[first as usize + 1] += 1;
                self.whole.others.push(k as u32);
            }
        }
        for b in 0..256 {
            self.whole_at[b + 1] += self.whole_at[b];
        }
        // Grouped by first byte, in trie order within each (the trie's children need not
        // come in byte order).
        let mut others = std::mem::take(&mut self.whole.others);
        others.sort_by_key(|&k| self.tail_bytes(&self.tails[k as usize]).first().copied());
        self.whole.others = others;
        self.first_bytes = vec![None; 128];
        self.below_ascii = FixedBitSet::with_capacity(width);
        for (i, n) in nodes.iter().enumerate() {
            if n.depth != 1 || n.byte >= 0x80 {
                continue;
            }
            let mut fb = FirstByte {
                rest_in_slice: FixedBitSet::with_capacity(width),
                others: Vec::new(),
            };
            let (lo, hi) = (self.tails_at[i + 1], self.tails_at[i + n.subtree as usize]);
            for k in lo..hi {
                let t = &self.tails[k as usize];
                if t.tail <= 1 {
                    fb.rest_in_slice.insert(t.token.index());
                } else {
                    fb.others.push(k);
                }
            }
            self.below_ascii.union_with(&fb.rest_in_slice);
            self.first_bytes[n.byte as usize] = Some(fb);
        }
    }

    /// Below the main trie's node for ASCII first byte `byte` (the node itself left out):
    /// the tokens whose rest is slice characters, and the others (as in
    /// [`CharSlice::subtree_tails`]). `None` for a byte no token starts with, or before
    /// [`CharSlice::index_trie`].
    pub fn below_first_byte(
        &self,
        byte: u8,
    ) -> Option<(&FixedBitSet, impl Iterator<Item = &Tail>)> {
        let fb = self.first_bytes.get(byte as usize)?.as_ref()?;
        Some((
            &fb.rest_in_slice,
            fb.others.iter().map(|&k| &self.tails[k as usize]),
        ))
    }

    /// Every token of the main trie: those that are slice characters throughout, and the
    /// others (as in [`CharSlice::subtree_tails`]). Empty before [`CharSlice::index_trie`].
    pub fn every_token(&self) -> (&FixedBitSet, impl Iterator<Item = &Tail>) {
        (
            &self.whole.rest_in_slice,
            self.whole.others.iter().map(|&k| &self.tails[k as usize]),
        )
    }

    /// The others of [`CharSlice::every_token`] (not slice characters throughout) that
    /// start with `byte`.
    pub fn every_other_token_from(&self, byte: u8) -> impl Iterator<Item = &Tail> {
        let (lo, hi) = match self.whole_at.get(byte as usize..byte as usize + 2) {
            Some(&[lo, hi]) => (lo as usize, hi as usize),
            _ => (0, 0),
        };
        self.whole.others[lo..hi]
            .iter()
            .map(|&k| &self.tails[k as usize])
    }

    /// The tokens of [`CharSlice::every_token`]'s set (slice characters throughout) that
    /// hold byte `byte`, of `vocab` (the vocabulary this slice was made from; built the
    /// first time a byte is asked for).
    pub fn tokens_with_byte(&self, byte: u8, vocab: &Vocabulary) -> &FixedBitSet {
        self.with_byte[byte as usize].get_or_init(|| {
            let mut set = FixedBitSet::with_capacity(self.whole.rest_in_slice.len());
            for t in self.whole.rest_in_slice.ones() {
                if vocab
                    .token_bytes(TokenId(t as u32))
                    .is_some_and(|b| b.contains(&byte))
                {
                    set.insert(t);
                }
            }
            set
        })
    }

    /// The union of [`CharSlice::below_first_byte`]'s sets over every ASCII first byte (the
    /// sets are disjoint): a walk that jumps below most first bytes takes it and removes the
    /// sets of the few others, rather than adding each. Empty before
    /// [`CharSlice::index_trie`].
    pub fn below_ascii_first_bytes(&self) -> &FixedBitSet {
        &self.below_ascii
    }

    /// The bytes of a token of [`CharSlice::subtree_tails`] whose tail is not 0 (empty for
    /// the others).
    #[inline]
    pub fn tail_bytes(&self, t: &Tail) -> &[u8] {
        &self.tail_bytes[t.start as usize..t.start as usize + t.len as usize]
    }

    /// Whether [`CharSlice::index_trie`] was called.
    pub fn indexes_trie(&self) -> bool {
        !self.tails_at.is_empty()
    }

    /// The tokens at main-trie nodes `lo..hi` (in trie order; a subtree's nodes are such a
    /// range), each with its *tail*: the byte offset after which every byte is part of a
    /// slice character (0 for a slice token). After an ASCII byte at or past a token's
    /// tail, the rest of the token is slice characters. Empty before
    /// [`CharSlice::index_trie`].
    #[inline]
    pub fn subtree_tails(&self, lo: usize, hi: usize) -> &[Tail] {
        match (self.tails_at.get(lo), self.tails_at.get(hi)) {
            (Some(&a), Some(&b)) => &self.tails[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The characters this slice is made of.
    pub fn alphabet(&self) -> Alphabet {
        self.alphabet
    }

    /// Slice tokens that start at most `chars` characters, marked in `mask`.
    pub fn mark_upto(&self, chars: u32, mask: &mut FixedBitSet) {
        let c = (chars as usize).min(SLICE_BITSETS);
        mask.union_with(&self.upto[c]);
        if chars as usize > SLICE_BITSETS {
            for &(n, t) in &self.long {
                if n > chars {
                    break;
                }
                mask.insert(t.index());
            }
        }
    }

    /// The trie of the distinct suffixes; the "token" of a suffix's node is its
    /// [`SuffixId`].
    pub fn suffixes(&self) -> &TokenTrie {
        &self.suffixes
    }

    /// Number of distinct suffixes.
    pub fn suffix_count(&self) -> usize {
        self.ranges.len()
    }

    /// The tokens with suffix `sid`: `(prefix chars, token)`, by prefix length.
    pub fn tokens_of(&self, sid: SuffixId) -> &[(u32, TokenId)] {
        let (a, b) = self.ranges[sid.index()];
        &self.by_suffix[a as usize..b as usize]
    }

    /// The tokens whose suffix comes after exactly `n` slice characters.
    pub fn with_prefix(&self, n: u32) -> &[(SuffixId, TokenId)] {
        self.by_prefix.get(n as usize).map_or(&[], Vec::as_slice)
    }

    /// The bytes of suffix `sid`.
    pub fn suffix(&self, sid: SuffixId) -> &[u8] {
        &self.suffix_bytes[sid.index()]
    }

    /// The suffixes at suffix-trie nodes `lo..hi` (a subtree's nodes are such a range):
    /// the first one's id, and each one's tail (as in [`CharSlice::subtree_tails`]; at
    /// least 1, since a suffix starts with a byte that is not of a slice character).
    #[inline]
    pub fn suffix_tails(&self, lo: usize, hi: usize) -> (SuffixId, &[u16]) {
        let (a, b) = (self.suffixes_at[lo] as usize, self.suffixes_at[hi] as usize);
        (SuffixId(a as u32), &self.suffix_tails[a..b])
    }

    /// Whether the subtree of suffix-trie node `node` holds a suffix with tokens of kind
    /// `p`.
    #[inline]
    pub fn subtree_serves(&self, node: usize, p: Prefix) -> bool {
        self.node_prefixes[node] & p as u8 != 0
    }

    /// Whether suffix `sid` has tokens of kind `p`.
    #[inline]
    pub fn suffix_serves(&self, sid: SuffixId, p: Prefix) -> bool {
        prefix_bits(self.tokens_of(sid)) & p as u8 != 0
    }

    /// The longest prefix, in characters, of a token with a suffix.
    pub fn max_prefix(&self) -> u32 {
        self.max_prefix
    }

    /// The most characters a slice token starts.
    pub fn max_chars(&self) -> u32 {
        self.max_chars
    }

    /// Heap bytes used.
    pub fn memory_usage(&self) -> usize {
        self.upto
            .iter()
            .map(|b| b.as_slice().len() * 8)
            .sum::<usize>()
            + self.long.len() * 8
            + self.by_id.len() * 2
            + self.suffix_tails.len() * 2
            + self.suffixes_at.len() * 4
            + self.node_prefixes.len()
            + self.tails.len() * std::mem::size_of::<Tail>()
            + self.tail_bytes.len()
            + self
                .first_bytes
                .iter()
                .flatten()
                .map(|f| f.rest_in_slice.as_slice().len() * 8 + f.others.len() * 4)
                .sum::<usize>()
            + self.below_ascii.as_slice().len() * 8
            + self.whole.rest_in_slice.as_slice().len() * 8
            + self.whole.others.len() * 4
            + self.whole_at.len() * 4
            + self
                .with_byte
                .iter()
                .filter_map(|b| b.get())
                .map(|b| b.as_slice().len() * 8)
                .sum::<usize>()
            + self.tails_at.len() * 4
            + self.suffixes.memory_usage()
            + self.ranges.len() * 8
            + self.by_suffix.len() * 8 * 2
            + self
                .suffix_bytes
                .iter()
                .map(|b| b.len() + 16)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_into_slice_chars_and_a_suffix() {
        let split = |b: &[u8]| super::split(b, Alphabet::Strings);
        assert_eq!(split(b"hello"), (5, None));
        assert_eq!(split("日本".as_bytes()), (2, None));
        assert_eq!(
            split(b"\xe6\x97"),
            (1, None),
            "a partial character at the end"
        );
        assert_eq!(split(b"ab\","), (2, Some(2)));
        assert_eq!(split(b"\\n"), (0, Some(0)));
        assert_eq!(split(b"x\n"), (1, Some(1)));
        assert_eq!(split(b"\xa9abc"), (0, Some(0)), "a continuation byte first");
        assert_eq!(split(b"a\x7f"), (1, Some(1)));
    }

    #[test]
    fn tails_start_after_the_last_byte_not_of_a_slice_character() {
        let tail = |b: &[u8]| super::tail(b, Alphabet::Strings);
        assert_eq!(tail(b"hello"), 0);
        assert_eq!(tail(b"ab\",cd"), 3);
        assert_eq!(tail(b"x\n"), 2);
        assert_eq!(tail("a\"日本".as_bytes()), 2);
        assert_eq!(tail(b"\"\xe6\x97"), 1, "a partial character at the end");
        assert_eq!(tail(b"a\xe6b"), 2, "an invalid sequence: one byte on");
        assert_eq!(tail(b"\xa9abc"), 1);
        let words = |b: &[u8]| super::tail(b, Alphabet::Words);
        assert_eq!(words(b"example.com"), 8);
        assert_eq!(words(b"ab_c"), 3);
        assert_eq!(words("é1".as_bytes()), 2);
    }

    #[test]
    fn words_split_at_the_first_byte_not_a_letter_or_digit() {
        let split = |b: &[u8]| super::split(b, Alphabet::Words);
        assert_eq!(split(b"Hello42"), (7, None));
        assert_eq!(split(b"example."), (7, Some(7)));
        assert_eq!(split(b" the"), (0, Some(0)));
        assert_eq!(split(b"ab_c"), (2, Some(2)));
        assert_eq!(split("é".as_bytes()), (0, Some(0)));
        assert_eq!(split(b"a\xe6\x97"), (1, Some(1)), "no partial characters");
    }

    #[test]
    fn slice_bitsets_and_suffix_groups() {
        let words: [&[u8]; 6] = [
            b"ab",
            b"abcdefghijklmnopqrstu",
            b"\",",
            b"x\",",
            b"\"",
            b"\\n",
        ];
        let vocab = Vocabulary::from_parts(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (TokenId(i as u32), w.to_vec())),
            [],
        );
        let s = CharSlice::new(&vocab, 8);
        let mut m = FixedBitSet::with_capacity(8);
        s.mark_upto(2, &mut m);
        assert_eq!(m.ones().collect::<Vec<_>>(), vec![0]);
        s.mark_upto(100, &mut m);
        assert_eq!(m.ones().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(s.suffix_count(), 3); // `"`, `",`, `\n`
        assert_eq!(s.max_prefix(), 1);
        assert_eq!(s.max_chars(), 21);
        let comma = s.suffixes().prefixes_of(b"\",");
        let sid = SuffixId(comma.last().unwrap().0.0);
        assert_eq!(s.tokens_of(sid), &[(0, TokenId(2)), (1, TokenId(3))]);
        // `",` serves both kinds, `"` and `\n` only tokens that are the suffix alone.
        assert!(s.suffix_serves(sid, Prefix::Empty) && s.suffix_serves(sid, Prefix::NonEmpty));
        let quote = SuffixId(s.suffixes().prefixes_of(b"\"").last().unwrap().0.0);
        let newline = SuffixId(s.suffixes().prefixes_of(b"\\n").last().unwrap().0.0);
        for sid in [quote, newline] {
            assert!(s.suffix_serves(sid, Prefix::Empty));
            assert!(!s.suffix_serves(sid, Prefix::NonEmpty));
            assert!(s.suffix_serves(sid, Prefix::Any));
        }
        // Subtrees: the one below `"` holds `",`; the one below `\` does not.
        let node = |b: &[u8]| s.suffixes().node_of(b).unwrap().0 as usize;
        assert!(s.subtree_serves(node(b"\""), Prefix::NonEmpty));
        assert!(!s.subtree_serves(node(b"\\"), Prefix::NonEmpty));
        assert!(s.subtree_serves(0, Prefix::NonEmpty));
    }

    #[test]
    fn every_other_token_is_found_by_its_first_byte() {
        let words: [&[u8]; 9] = [
            b"ab",
            b"a\",",
            b"\",",
            b"x\n",
            b"\"",
            b"\\n",
            b"hello",
            b"\xc3\xa9\"",
            b"a\n\n",
        ];
        let vocab = Vocabulary::from_parts(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (TokenId(i as u32), w.to_vec())),
            [],
        );
        let mut s = CharSlice::new(&vocab, words.len());
        s.index_trie(&TokenTrie::new(&vocab), &vocab);
        let mut all: Vec<u32> = s.every_token().1.map(|t| t.token.0).collect();
        let mut by_first = Vec::new();
        for b in 0..=255u8 {
            for t in s.every_other_token_from(b) {
                assert_eq!(words[t.token.index()][0], b);
                by_first.push(t.token.0);
            }
        }
        all.sort();
        by_first.sort();
        assert_eq!(by_first, all);
        assert_eq!(all, [1, 2, 3, 4, 5, 7, 8]);
    }
}

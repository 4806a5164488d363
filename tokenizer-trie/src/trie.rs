//! The token trie: every text token's bytes in one flat array, in depth-first order.
//!
//! Node `i` holds its byte, its depth, the token ending there (if any) and the size of its
//! subtree, so "skip this subtree" is `i += subtree` and the walk needs no recursion and no
//! child pointers: the next node in the array is either the first child or, after a skip,
//! the next sibling of some ancestor, and its depth says which.

use crate::token::TokenId;
use crate::vocab::Vocabulary;
use fixedbitset::FixedBitSet;

/// No token ends at this node.
const NO_TOKEN: u32 = u32::MAX;

/// The index of a node in a [`TokenTrie`] (node 0 is the root).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The root: the empty prefix.
    pub const ROOT: NodeId = NodeId(0);

    /// The id as an index into the trie's node array.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A trie node. Node 0 is the root (the empty prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// Nodes in this subtree, the node itself included.
    pub subtree: u32,
    /// The token whose bytes end here (see [`Node::token`]).
    token: u32,
    /// Length of the prefix this node stands for (the root is 0).
    pub depth: u16,
    /// The last byte of the prefix this node stands for (0 at the root).
    pub byte: u8,
    /// [`DUPLICATED`] and [`WIDE`]; they fill the node's padding.
    flags: u8,
}

/// Other tokens have the node's bytes (in the trie's duplicates): spares the walk a search
/// of the duplicates per token.
const DUPLICATED: u8 = 1;
/// The node is wide: its children are listed apart (see [`WIDE_CHILDREN`]).
const WIDE: u8 = 2;

impl Node {
    /// The token whose bytes end here, if any (tokens with the same bytes as this one are
    /// [`TokenTrie::tokens_at`]).
    #[inline]
    pub fn token(&self) -> Option<TokenId> {
        (self.token != NO_TOKEN).then_some(TokenId(self.token))
    }
}

/// Something the trie walk can drive one byte at a time: the seam between tokens and
/// grammars (the engine implements it for the Earley recognizer).
pub trait ByteRecognizer {
    /// Feeds one byte; false if it cannot come next (and then nothing changed).
    fn push(&mut self, byte: u8) -> bool;
    /// Undoes the last `n` successful pushes.
    fn pop(&mut self, n: usize);
    /// A set of bytes (bit `b` of word `b / 64` for byte `b`) that holds every byte
    /// [`ByteRecognizer::push`] would take now; `None` (the default) if not known. A walk
    /// asks it below a node with many children, and goes down only those whose byte is in
    /// it (rather than trying every child).
    fn next_bytes(&mut self) -> Option<[u64; 4]> {
        None
    }
}

/// A node with at least this many children is wide: the trie lists them apart
/// ([`TokenTrie::walk_range`] goes down only those the recognizer may take).
const WIDE_CHILDREN: usize = 32;

/// Whether byte `b` is in the 256-bit set `bytes`.
#[inline]
fn has_byte(bytes: &[u64; 4], b: u8) -> bool {
    bytes[b as usize / 64] >> (b % 64) & 1 == 1
}

/// A flat depth-first token trie. See the module docs.
#[derive(Clone, Debug)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    /// Tokens with the same bytes as another token: `(node, token)`, sorted by node.
    duplicates: Vec<(u32, TokenId)>,
    /// One past the largest token id in the trie.
    id_bound: usize,
    /// The nodes whose children are listed apart: the root, then the wide nodes, as
    /// `(node, its children's range in `children`)`, sorted by node.
    listed: Vec<(u32, u32, u32)>,
    /// The children of the listed nodes, `(byte, node index)`, each node's in byte order.
    /// They lie far apart in `nodes` (each after its whole subtree), so a walk that tries
    /// every child reads them from here.
    children: Vec<(u8, u32)>,
}

impl TokenTrie {
    /// The trie of a vocabulary's text tokens.
    pub fn new(vocab: &Vocabulary) -> TokenTrie {
        TokenTrie::from_entries(vocab.text_tokens().map(|(id, b)| (b, id)))
    }

    /// The trie of arbitrary `(bytes, token id)` entries (empty byte strings are skipped).
    /// The bytes may be borrowed (a token's rest after a lexeme ends): nothing is copied
    /// but into the trie's nodes, and entries already in order are not sorted again.
    /// The sort is a stable one, which merges runs already in order: a walk's rests come
    /// as one sorted run per ended node (the tokens under `1`, then under `2`, ...).
    pub fn from_entries<B: AsRef<[u8]>>(
        entries: impl IntoIterator<Item = (B, TokenId)>,
    ) -> TokenTrie {
        // Each entry led by its first 8 bytes as a big-endian number (zero-padded), which
        // orders as the bytes do wherever two of them differ: most comparisons of a sort
        // read no bytes behind a pointer.
        let lead = |b: &[u8]| match b.first_chunk::<8>() {
            Some(word) => u64::from_be_bytes(*word),
            None => b
                .iter()
                .enumerate()
                .fold(0u64, |w, (i, &x)| w | (x as u64) << (56 - 8 * i)),
        };
        let mut entries: Vec<(u64, B, TokenId)> = entries
            .into_iter()
            .filter(|(b, _)| !b.as_ref().is_empty())
            .map(|(b, id)| (lead(b.as_ref()), b, id))
            .collect();
        // Equal leads of entries of at most 8 bytes: one is the other padded with zeros,
        // and the shorter comes first. Only longer entries compare their bytes.
        let order = |a: &(u64, B, TokenId), b: &(u64, B, TokenId)| {
            let (x, y) = (a.1.as_ref(), b.1.as_ref());
            a.0.cmp(&b.0)
                .then_with(|| match x.len().max(y.len()) {
                    ..=8 => x.len().cmp(&y.len()),
                    _ => x[x.len().min(8)..].cmp(&y[y.len().min(8)..]),
                })
                .then(a.2.cmp(&b.2))
        };
        if !entries.is_sorted_by(|a, b| order(a, b).is_le()) {
            // Entries mostly come as a few sorted runs (the tokens below a few trie nodes,
            // in trie order), which a stable sort finds and merges.
            entries.sort_by(order);
        }
        let id_bound = entries
            .iter()
            .map(|&(_, _, id)| id.index() + 1)
            .max()
            .unwrap_or(0);
        let mut nodes = vec![Node {
            subtree: 0,
            token: NO_TOKEN,
            depth: 0,
            byte: 0,
            flags: 0,
        }];
        let mut duplicates = Vec::new();
        // Stack of node indices on the current path; stack[d] is the node at depth d.
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for (_, bytes, id) in &entries {
            let bytes: &[u8] = bytes.as_ref();
            let lcp = prev
                .iter()
                .zip(bytes.iter())
                .take_while(|(a, b)| a == b)
                .count();
            while path.len() > lcp + 1 {
                let n = path.pop().expect("non-empty") as usize;
                nodes[n].subtree = (nodes.len() - n) as u32;
            }
            if lcp == bytes.len() {
                // Same bytes as the previous token.
                duplicates.push((*path.last().expect("non-empty"), *id));
                continue;
            }
            for (d, &b) in bytes.iter().enumerate().skip(lcp) {
                path.push(nodes.len() as u32);
                nodes.push(Node {
                    subtree: 0,
                    token: NO_TOKEN,
                    depth: (d + 1).min(u16::MAX as usize) as u16,
                    byte: b,
                    flags: 0,
                });
            }
            nodes.last_mut().expect("just pushed").token = id.0;
            prev = bytes;
        }
        while let Some(n) = path.pop() {
            nodes[n as usize].subtree = (nodes.len() - n as usize) as u32;
        }
        duplicates.sort_unstable();
        for &(n, _) in &duplicates {
            nodes[n as usize].flags |= DUPLICATED;
        }
        nodes.shrink_to_fit();
        duplicates.shrink_to_fit();
        // The root's children are always listed; another node's where it is wide.
        let (mut listed, mut children) = (Vec::new(), Vec::new());
        for n in 0..nodes.len() {
            if n > 0 && (nodes[n].subtree as usize) <= WIDE_CHILDREN {
                continue;
            }
            let from = children.len();
            let (mut i, end) = (n + 1, n + nodes[n].subtree as usize);
            while i < end {
                children.push((nodes[i].byte, i as u32));
                i += nodes[i].subtree as usize;
            }
            let wide = children.len() - from >= WIDE_CHILDREN;
            if n == 0 || wide {
                listed.push((n as u32, from as u32, children.len() as u32));
            } else {
                children.truncate(from);
            }
            if wide {
                nodes[n].flags |= WIDE;
            }
        }
        children.shrink_to_fit();
        TokenTrie {
            nodes,
            duplicates,
            id_bound,
            listed,
            children,
        }
    }

    /// All nodes, root first.
    #[inline]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The root's children, `(byte, node index)` in byte order.
    #[inline]
    pub fn root_children(&self) -> &[(u8, u32)] {
        self.listed_children(0)
    }

    /// The children of a listed node (the root, or a wide node).
    fn listed_children(&self, node: usize) -> &[(u8, u32)] {
        let at = self.listed.partition_point(|l| (l.0 as usize) < node);
        let (_, from, to) = self.listed[at];
        &self.children[from as usize..to as usize]
    }

    /// One past the largest token id in the trie.
    pub fn id_bound(&self) -> usize {
        self.id_bound
    }

    /// Heap bytes used.
    pub fn memory_usage(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.duplicates.capacity() * 8
            + self.listed.capacity() * 12
            + self.children.capacity() * 8
    }

    /// Marks the token(s) ending at node `i` in `mask`.
    #[inline]
    pub fn mark(&self, i: usize, mask: &mut FixedBitSet) {
        let n = self.nodes[i];
        if n.token != NO_TOKEN {
            mask.insert(n.token as usize);
            if n.flags & DUPLICATED != 0 {
                self.mark_duplicates(i, mask);
            }
        }
    }

    fn mark_duplicates(&self, i: usize, mask: &mut FixedBitSet) {
        let start = self.duplicates.partition_point(|&(n, _)| (n as usize) < i);
        for &(n, t) in &self.duplicates[start..] {
            if n as usize != i {
                break;
            }
            mask.insert(t.index());
        }
    }

    /// Every token id ending at node `i` (the node's token and its duplicates).
    pub fn tokens_at(&self, i: usize) -> impl Iterator<Item = TokenId> + '_ {
        let start = match self.nodes[i].flags & DUPLICATED != 0 {
            true => self.duplicates.partition_point(|&(n, _)| (n as usize) < i),
            false => self.duplicates.len(),
        };
        self.nodes[i].token().into_iter().chain(
            self.duplicates[start..]
                .iter()
                .take_while(move |&&(n, _)| n as usize == i)
                .map(|&(_, t)| t),
        )
    }

    /// Walks the whole trie with `r`, marking in `mask` every token all of whose bytes `r`
    /// accepts. Subtrees under a rejected byte are skipped.
    pub fn walk<R: ByteRecognizer>(&self, r: &mut R, mask: &mut FixedBitSet) {
        self.walk_range(r, mask, 1, self.nodes.len(), 0);
    }

    /// Walks nodes `start..end` (a run of whole subtrees whose parent is at depth
    /// `base_depth` and already pushed).
    pub fn walk_range<R: ByteRecognizer>(
        &self,
        r: &mut R,
        mask: &mut FixedBitSet,
        start: usize,
        end: usize,
        base_depth: usize,
    ) {
        self.walk_range_with(r, (start, end), base_depth, &mut |i| self.mark(i, mask));
    }

    /// [`TokenTrie::walk_range`], appending the tokens found to `out` instead of marking
    /// them in a bitset (for walks that find few tokens: no pass over a whole mask).
    pub fn walk_range_tokens<R: ByteRecognizer>(
        &self,
        r: &mut R,
        out: &mut Vec<TokenId>,
        start: usize,
        end: usize,
        base_depth: usize,
    ) {
        self.walk_range_with(r, (start, end), base_depth, &mut |i| {
            out.extend(self.tokens_at(i))
        });
    }

    /// The walk of [`TokenTrie::walk_range`], calling `found` with each node `r` accepts.
    #[inline]
    fn walk_range_with<R: ByteRecognizer>(
        &self,
        r: &mut R,
        (start, end): (usize, usize),
        base_depth: usize,
        found: &mut impl FnMut(usize),
    ) {
        let nodes = &self.nodes;
        // The range is every child of a wide node.
        if let Some(parent) = start.checked_sub(1)
            && nodes[parent].flags & WIDE != 0
            && parent + nodes[parent].subtree as usize == end
            && self.walk_wide(r, parent, base_depth, found)
        {
            return;
        }
        let mut depth = base_depth; // bytes pushed (relative to the trie root)
        let mut i = start;
        while i < end {
            let n = nodes[i];
            let parent_depth = n.depth as usize - 1;
            if depth > parent_depth {
                r.pop(depth - parent_depth);
                depth = parent_depth;
            }
            if r.push(n.byte) {
                depth += 1;
                found(i);
                if n.flags & WIDE != 0 && self.walk_wide(r, i, depth, found) {
                    i += n.subtree as usize;
                } else {
                    i += 1;
                }
            } else {
                i += n.subtree as usize;
            }
        }
        if depth > base_depth {
            r.pop(depth - base_depth);
        }
    }

    /// Walks below the wide node `node` (pushed, at `depth`), down only the children whose
    /// byte `r` may take; false (nothing walked) where `r` does not say which.
    fn walk_wide<R: ByteRecognizer>(
        &self,
        r: &mut R,
        node: usize,
        depth: usize,
        found: &mut impl FnMut(usize),
    ) -> bool {
        let Some(bytes) = r.next_bytes() else {
            return false;
        };
        for &(b, child) in self.listed_children(node) {
            if has_byte(&bytes, b) {
                let child = child as usize;
                let end = child + self.nodes[child].subtree as usize;
                self.walk_range_with(r, (child, end), depth, found);
            }
        }
        true
    }

    /// Every token that is a prefix of `text`: `(token, length)`, shortest first.
    pub fn prefixes_of(&self, text: &[u8]) -> Vec<(TokenId, usize)> {
        let nodes = &self.nodes;
        let mut out = Vec::new();
        let (mut i, mut depth) = (1, 0);
        while i < nodes.len() && depth < text.len() {
            let n = nodes[i];
            if n.depth as usize != depth + 1 {
                break;
            }
            if n.byte == text[depth] {
                depth += 1;
                out.extend(self.tokens_at(i).map(|t| (t, depth)));
                i += 1;
            } else {
                i += n.subtree as usize;
            }
        }
        out
    }

    /// The node whose prefix is `bytes`, if the trie has one.
    pub fn node_of(&self, bytes: &[u8]) -> Option<NodeId> {
        let nodes = &self.nodes;
        let (mut i, mut depth) = (1, 0);
        if bytes.is_empty() {
            return Some(NodeId::ROOT);
        }
        while i < nodes.len() {
            let n = nodes[i];
            if n.depth as usize != depth + 1 {
                return None;
            }
            if n.byte == bytes[depth] {
                depth += 1;
                if depth == bytes.len() {
                    return Some(NodeId(i as u32));
                }
                i += 1;
            } else {
                i += n.subtree as usize;
            }
        }
        None
    }

    /// `text` split greedily into the longest token that starts each rest, as far as that
    /// goes: `(tokens, bytes covered)` (short of `text.len()` only where no token starts
    /// with the next byte).
    pub fn greedy_tokens(&self, text: &[u8]) -> (Vec<TokenId>, usize) {
        let mut out = Vec::new();
        let mut at = 0;
        while at < text.len() {
            match self.prefixes_of(&text[at..]).last() {
                Some(&(t, len)) => {
                    out.push(t);
                    at += len;
                }
                None => break,
            }
        }
        (out, at)
    }

    /// A random segmentation of `text` into tokens of the trie (any split into tokens that
    /// exist, not only the tokenizer's own), or `None` if there is none. `next_random` gives
    /// uniform `u64`s.
    pub fn random_segmentation(
        &self,
        text: &[u8],
        next_random: &mut dyn FnMut() -> u64,
    ) -> Option<Vec<TokenId>> {
        // reachable[i]: text[i..] can be split into tokens.
        let n = text.len();
        let mut reachable = vec![false; n + 1];
        reachable[n] = true;
        for i in (0..n).rev() {
            reachable[i] = self
                .prefixes_of(&text[i..])
                .iter()
                .any(|&(_, len)| reachable[i + len]);
        }
        if !reachable[0] {
            return None;
        }
        let mut out = Vec::new();
        let mut at = 0;
        while at < n {
            let options: Vec<(TokenId, usize)> = self
                .prefixes_of(&text[at..])
                .into_iter()
                .filter(|&(_, len)| reachable[at + len])
                .collect();
            let (t, len) = options[(next_random() % options.len() as u64) as usize];
            out.push(t);
            at += len;
        }
        Some(out)
    }

    /// The bytes of the prefix at node `i` (walks back up; for messages and tests).
    pub fn prefix(&self, i: usize) -> Vec<u8> {
        let mut out = vec![0u8; self.nodes[i].depth as usize];
        let mut want = self.nodes[i].depth as usize;
        let mut j = i;
        loop {
            let n = self.nodes[j];
            if n.depth as usize == want && want > 0 {
                out[want - 1] = n.byte;
                want -= 1;
            }
            if want == 0 || j == 0 {
                break;
            }
            j -= 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Prefixes(Vec<&'static [u8]>, Vec<u8>);

    impl ByteRecognizer for Prefixes {
        fn push(&mut self, b: u8) -> bool {
            self.1.push(b);
            if self.0.iter().any(|p| p.starts_with(&self.1)) {
                true
            } else {
                self.1.pop();
                false
            }
        }
        fn pop(&mut self, n: usize) {
            self.1.truncate(self.1.len() - n);
        }
    }

    fn trie() -> TokenTrie {
        let words: [&[u8]; 7] = [
            b"a",
            b"ab",
            b"abc",
            b"b",
            b"ba",
            b"\xe6\x97",
            b"\xe6\x97\xa5",
        ];
        TokenTrie::from_entries(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (w.to_vec(), TokenId(i as u32)))
                .chain([(b"ab".to_vec(), TokenId(7))]),
        )
    }

    #[test]
    fn depth_first_layout_with_subtree_sizes() {
        let t = trie();
        let n = t.nodes();
        assert_eq!(n[0].subtree as usize, n.len());
        // a, ab, abc | b, ba | e6, e6 97, e6 97 a5
        let bytes: Vec<u8> = n[1..].iter().map(|x| x.byte).collect();
        assert_eq!(bytes, b"abcba\xe6\x97\xa5");
        assert_eq!(n[1].subtree, 3);
        assert_eq!(n[4].subtree, 2);
        assert_eq!(t.root_children(), &[(b'a', 1), (b'b', 4), (0xe6, 6)]);
        assert_eq!(t.prefix(3), b"abc");
        assert_eq!(t.prefix(8), b"\xe6\x97\xa5");
        assert_eq!(
            t.tokens_at(2).collect::<Vec<_>>(),
            vec![TokenId(1), TokenId(7)]
        );
    }

    #[test]
    fn walk_marks_exactly_the_accepted_tokens() {
        let t = trie();
        let mut mask = FixedBitSet::with_capacity(10);
        let mut r = Prefixes(vec![b"abx", b"ba", b"\xe6\x97\xa5"], Vec::new());
        t.walk(&mut r, &mut mask);
        let got: Vec<usize> = mask.ones().collect();
        // a, ab (and its duplicate 7), b, ba, both CJK pieces; not abc.
        assert_eq!(got, vec![0, 1, 3, 4, 5, 6, 7]);
        assert!(r.1.is_empty(), "the walk pops everything it pushed");
        // The same walk listing tokens: each found once, in trie order.
        let mut listed = Vec::new();
        t.walk_range_tokens(&mut r, &mut listed, 1, t.nodes().len(), 0);
        let listed: Vec<usize> = listed.iter().map(|t| t.index()).collect();
        assert_eq!(listed, vec![0, 1, 7, 3, 4, 5, 6]);
        assert!(r.1.is_empty());
    }

    #[test]
    fn entries_in_any_order_build_one_trie() {
        // Pairs that agree on their first eight bytes, a zero byte against a shorter
        // entry, and a prefix of another: the sort must order them as bytes do.
        let words: [&[u8]; 8] = [
            b"abcdefghZ",
            b"abcdefgh",
            b"abcdefghA",
            b"ab\0",
            b"ab",
            b"\xff",
            b"abcdefgh\0",
            b"b",
        ];
        let build = |order: &[usize]| {
            TokenTrie::from_entries(order.iter().map(|&i| (words[i], TokenId(i as u32))))
        };
        let sorted = {
            let mut order: Vec<usize> = (0..words.len()).collect();
            order.sort_by_key(|&i| words[i]);
            order
        };
        let expected = build(&sorted);
        let prefixes: Vec<Vec<u8>> = (1..expected.nodes().len())
            .map(|i| expected.prefix(i))
            .collect();
        let mut listed = prefixes.clone();
        listed.sort();
        assert_eq!(prefixes, listed, "nodes are in depth-first byte order");
        for order in [[7, 6, 5, 4, 3, 2, 1, 0], [2, 0, 6, 1, 4, 3, 7, 5]] {
            let t = build(&order);
            assert_eq!(t.nodes(), expected.nodes());
            for i in 0..t.nodes().len() {
                assert_eq!(
                    t.tokens_at(i).collect::<Vec<_>>(),
                    expected.tokens_at(i).collect::<Vec<_>>()
                );
            }
        }
    }

    /// Takes the prefixes of a set of words, counting its pushes; says which bytes it may
    /// take next (with some it refuses) where `tell` is set.
    struct Counted {
        words: Vec<Vec<u8>>,
        at: Vec<u8>,
        pushes: usize,
        tell: bool,
    }

    impl ByteRecognizer for Counted {
        fn push(&mut self, b: u8) -> bool {
            self.pushes += 1;
            self.at.push(b);
            if self.words.iter().any(|w| w.starts_with(&self.at)) {
                true
            } else {
                self.at.pop();
                false
            }
        }
        fn pop(&mut self, n: usize) {
            self.at.truncate(self.at.len() - n);
        }
        fn next_bytes(&mut self) -> Option<[u64; 4]> {
            let mut bytes = [0u64; 4];
            let d = self.at.len();
            for w in self.words.iter().filter(|w| w.starts_with(&self.at)) {
                if let Some(&b) = w.get(d) {
                    bytes[b as usize / 64] |= 1 << (b % 64);
                }
            }
            // A byte no word takes: the set may hold more than the recognizer takes.
            bytes[0] |= 1 << b'!';
            self.tell.then_some(bytes)
        }
    }

    #[test]
    fn a_walk_goes_down_only_the_children_of_a_wide_node_the_recognizer_may_take() {
        // The root and "x" are wide: 64 children each. "xy" has one child.
        let mut vocab: Vec<Vec<u8>> = Vec::new();
        for b in 0x40..0x80u8 {
            vocab.push(vec![b]);
            vocab.push(vec![b'x', b]);
        }
        vocab.extend([b"xyz".to_vec(), b"!".to_vec(), b"x!".to_vec()]);
        let t = TokenTrie::from_entries(
            vocab
                .iter()
                .enumerate()
                .map(|(i, w)| (w.as_slice(), TokenId(i as u32))),
        );
        let words: Vec<Vec<u8>> = [&b"A"[..], b"xB", b"xyz", b"xyq", b"q"]
            .iter()
            .map(|w| w.to_vec())
            .collect();
        let walk = |tell: bool, (start, end, depth): (usize, usize, usize), at: &[u8]| {
            let mut r = Counted {
                words: words.clone(),
                at: at.to_vec(),
                pushes: 0,
                tell,
            };
            let mut found = Vec::new();
            t.walk_range_tokens(&mut r, &mut found, start, end, depth);
            assert_eq!(r.at, at, "the walk pops what it pushed");
            found.sort();
            (found, r.pushes)
        };
        let token = |w: &[u8]| TokenId(vocab.iter().position(|v| v == w).unwrap() as u32);
        let whole = (1, t.nodes().len(), 0);
        let (told, told_pushes) = walk(true, whole, b"");
        let (tried, tried_pushes) = walk(false, whole, b"");
        // Every token that is a prefix of a word.
        let mut expected: Vec<TokenId> = [&b"A"[..], b"q", b"x", b"xB", b"xy", b"xyz"]
            .iter()
            .map(|w| token(w))
            .collect();
        expected.sort();
        assert_eq!(told, expected);
        assert_eq!(tried, expected);
        // Told: A, q, x, ! (refused) at the root; B, y, ! (refused) below "x"; z below "xy".
        assert_eq!(told_pushes, 8);
        assert!(tried_pushes > 128, "{tried_pushes}");
        // A walk of the children of a wide node alone (the subtree of "x", "x" pushed).
        let x = t.root_children().iter().find(|c| c.0 == b'x').unwrap().1 as usize;
        let below_x = (x + 1, x + t.nodes()[x].subtree as usize, 1);
        let (told, told_pushes) = walk(true, below_x, b"x");
        assert_eq!(told, vec![token(b"xB"), token(b"xy"), token(b"xyz")]);
        assert_eq!(walk(false, below_x, b"x").0, told);
        assert_eq!(told_pushes, 4);
    }
}

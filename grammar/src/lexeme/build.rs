//! Building a [`LexemeDfa`] from a regular expression: whole tables up front, or lazily,
//! one state's row at a time, for big ones.

use super::*;

impl LexemeDfa {
    /// Compiles `hir`; `size_limit` bounds the bytes of the NFA and of the DFA table.
    ///
    /// A sequence with counted repetitions is composed from its pieces, its table filled on
    /// first use (`compose`). Anything else: regex-automata compiles the Thompson NFA
    /// (UTF-8 automata for Unicode classes); the subset construction is ours: for the small
    /// anchored automata of lexemes it costs a few microseconds, where a general dense-DFA
    /// build (all start states, match delay, quit bytes) costs about a hundred.
    pub fn build(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        Self::build_in(hir, size_limit, None)
    }

    /// [`LexemeDfa::build`], with the pieces of a composed DFA through `cache`.
    pub(crate) fn build_in(
        hir: &Hir,
        size_limit: usize,
        cache: Option<&crate::DfaCache>,
    ) -> Result<LexemeDfa, ErrorKind> {
        let dfa = match compose::compose(hir, size_limit, cache) {
            Some(composed) => composed?,
            None => match Self::trie_tables(hir, size_limit) {
                Some(trie) => trie,
                None => Self::build_lazy(hir, size_limit)?,
            },
        };
        Ok(LexemeDfa {
            finite: hir.properties().maximum_len().is_some(),
            ..dfa
        })
    }

    /// [`LexemeDfa::build`] by subset construction of every state and minimization, never
    /// composed nor lazy (for the pieces of composed DFAs, which must be whole).
    pub(crate) fn build_tables(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        match Self::chain_tables(hir) {
            Some(d) => Ok(d),
            None => Self::subset_tables(hir, size_limit),
        }
    }

    /// [`LexemeDfa::build_tables`] by subset construction and minimization alone.
    fn subset_tables(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        let mut sub = subset::Subsets::new(hir, size_limit)?;
        let too_big = || size_error("limit".into(), size_limit);
        let stride = sub.stride;
        let start = sub.start().map_err(|_| too_big())?;
        let mut trans: Vec<u32> = vec![0; stride];
        let mut i = 1;
        while i < sub.len() {
            trans.resize((i + 1) * stride, 0);
            sub.row(i as u32, &mut trans[i * stride..])
                .map_err(|_| too_big())?;
            if trans.len() * 4 > size_limit {
                return Err(too_big());
            }
            i += 1;
        }
        let accept = (0..sub.len() as u32).map(|i| sub.accepting(i)).collect();
        Ok(Self::from_tables(
            sub.classes,
            stride,
            trans,
            accept,
            start,
            true,
        ))
    }

    /// The DFA of a literal (`"key"`, `,`) or of one class of ASCII bytes (`[ \t\n\r]`),
    /// written out directly: a chain of states, one per byte. Most pieces of composed
    /// lexemes are such, and an NFA compiled, then subsets built and minimized, cost more
    /// than the rest of a small schema's first mask. `None` for anything else.
    fn chain_tables(hir: &Hir) -> Option<LexemeDfa> {
        use regex_syntax::hir::{Class, HirKind};
        // Each position's set of bytes, as a 256-bit set.
        let steps: Vec<[bool; 256]> = match hir.kind() {
            HirKind::Literal(lit) if !lit.0.is_empty() && lit.0.len() <= 64 => lit
                .0
                .iter()
                .map(|&b| std::array::from_fn(|x| x == b as usize))
                .collect(),
            HirKind::Class(class) => {
                // ASCII ranges only: each a single byte.
                let ranges: Vec<(u32, u32)> = match class {
                    Class::Unicode(c) => c
                        .ranges()
                        .iter()
                        .map(|r| (r.start() as u32, r.end() as u32))
                        .collect(),
                    Class::Bytes(c) => c
                        .ranges()
                        .iter()
                        .map(|r| (r.start() as u32, r.end() as u32))
                        .collect(),
                };
                if ranges.is_empty() || ranges.iter().any(|&(_, hi)| hi >= 0x80) {
                    return None;
                }
                let mut set = [false; 256];
                for (lo, hi) in ranges {
                    set[lo as usize..=hi as usize].fill(true);
                }
                vec![set]
            }
            _ => return None,
        };
        // Byte classes: bytes in the sets of the same positions (at most 64: one bit each)
        // share one.
        let mut classes = [0u8; 256];
        let mut signatures: Vec<u64> = Vec::new();
        for (b, class) in classes.iter_mut().enumerate() {
            let sig = steps
                .iter()
                .enumerate()
                .fold(0u64, |m, (k, set)| m | (u64::from(set[b]) << k));
            let c = match signatures.iter().position(|&x| x == sig) {
                Some(c) => c,
                None => {
                    signatures.push(sig);
                    signatures.len() - 1
                }
            };
            *class = u8::try_from(c).ok()?;
        }
        let stride = signatures.len();
        // State 0 is dead, 1 the start, `k + 1` after `k` bytes; the last accepts.
        let n = steps.len() + 2;
        let mut trans = vec![0u32; n * stride];
        for k in 0..steps.len() {
            for (c, &sig) in signatures.iter().enumerate() {
                if sig >> k & 1 == 1 {
                    trans[(k + 1) * stride + c] = k as u32 + 2;
                }
            }
        }
        debug_assert!(steps.iter().all(|set| set.iter().any(|&x| x)));
        let mut accept = vec![false; n];
        accept[n - 1] = true;
        Some(Self::from_tables(classes, stride, trans, accept, 1, false))
    }

    /// The DFA of a small finite set of strings (the keys an object's other members may not
    /// take, an enum's values), written out as their trie: every node is live, and the
    /// table costs less to write than an NFA costs to compile. Minimized only at the leaves:
    /// every word that ends for good ends in one shared state, while words that merely end
    /// alike keep their own nodes. `None` for a regex that is not such a set, or whose table
    /// would pass `size_limit`.
    fn trie_tables(hir: &Hir, size_limit: usize) -> Option<LexemeDfa> {
        let words = literal_set(hir, 1024)?;
        if words.len() < 2 {
            // One word (or none) is a chain or left to subset construction.
            return None;
        }
        // Byte classes: each byte a word uses its own class, in byte order (ties between
        // equally short completions go to the lowest class, so to the lowest byte, as in
        // subset-built DFAs); every other byte class 0.
        let mut used = [false; 256];
        for w in &words {
            for &b in w {
                used[b as usize] = true;
            }
        }
        let mut classes = [0u8; 256];
        let mut stride = 1usize;
        for b in (0..256).filter(|&b| used[b]) {
            classes[b] = u8::try_from(stride).ok()?;
            stride += 1;
        }
        // State 0 is dead, 1 the root; nodes numbered as the words, in order, reach them.
        // Every node is live (it lies on a word), so the table needs no pruning.
        let nodes = 2 + words.iter().map(Vec::len).sum::<usize>();
        if nodes.saturating_mul(stride).saturating_mul(4) > size_limit {
            return None;
        }
        let mut raw = vec![0u32; nodes * stride];
        let mut accept = vec![false; nodes];
        let mut inner = vec![false; nodes];
        let mut len = 2usize;
        for w in &words {
            let mut s = 1usize;
            for &b in w {
                let slot = s * stride + classes[b as usize] as usize;
                if raw[slot] == 0 {
                    raw[slot] = len as u32;
                    len += 1;
                }
                inner[s] = true;
                s = raw[slot] as usize;
            }
            accept[s] = true;
        }
        // The nodes no word goes past all accept and lead nowhere: one state for them all,
        // so tokens that end words end in the same state (as in a minimal DFA).
        let mut map = vec![0u32; len];
        let mut leaf: Option<u32> = None;
        let mut kept = 1u32;
        for i in 1..len {
            map[i] = if inner[i] {
                kept += 1;
                kept - 1
            } else {
                *leaf.get_or_insert_with(|| {
                    kept += 1;
                    kept - 1
                })
            };
        }
        let tag = |i: u32| match i {
            0 => DEAD,
            i => StateId::new(map[i as usize], accept[i as usize], inner[i as usize]),
        };
        let len = kept as usize;
        let mut trans = vec![DEAD; len * stride];
        // Rows past the last node were never written; node 0 (dead) has no row of its own.
        for (i, row) in raw[..map.len() * stride]
            .chunks_exact(stride)
            .enumerate()
            .skip(1)
        {
            let at = map[i] as usize * stride;
            for (out, &t) in trans[at..at + stride].iter_mut().zip(row) {
                *out = tag(t);
            }
        }
        let start = tag(1);
        let mut first = [0u64; 4];
        for b in 0..=255u8 {
            if !trans[stride + classes[b as usize] as usize].is_dead() {
                first[b as usize / 64] |= 1 << (b % 64);
            }
        }
        Some(LexemeDfa {
            classes,
            stride,
            trans: Table::from_ids(trans, stride),
            len,
            first,
            start,
            fill: Fill::Built,
            shortest: OnceLock::new(),
            numbering: 0,
            finite: true,
        })
    }

    /// [`LexemeDfa::build`] lazily: the NFA and the start state now, every other state the
    /// first time a transition reaches it.
    pub(super) fn build_lazy(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        let mut sub = subset::Subsets::new(hir, size_limit)?;
        let start = sub
            .start()
            .map_err(|_| size_error("limit".into(), size_limit))?;
        let tag = |sub: &subset::Subsets, i: u32| {
            if i == 0 {
                DEAD
            } else {
                StateId::new(i, sub.accepting(i), sub.continues(i))
            }
        };
        let start = tag(&sub, start);
        let (classes, stride) = (sub.classes, sub.stride);
        let fill = Fill::Subset(Box::new(Lazy {
            subsets: Mutex::new(sub),
            overflow: AtomicBool::new(false),
            shortest: Mutex::new(FxHashMap::default()),
        }));
        Ok(Self::built_on_demand(classes, stride, start, fill))
    }

    /// A DFA whose states are numbered as `fill` reaches them (its own numbering), from its
    /// start state.
    pub(super) fn built_on_demand(
        classes: [u8; 256],
        stride: usize,
        start: StateId,
        fill: Fill,
    ) -> LexemeDfa {
        let dfa = LexemeDfa {
            classes,
            stride,
            trans: Table::growing(stride),
            len: 0,
            first: [0; 4],
            start,
            fill,
            shortest: OnceLock::new(),
            numbering: LAZY_NUMBERING.fetch_add(1, Relaxed),
            finite: false,
        };
        let mut first = [0u64; 4];
        if !start.is_dead() {
            for b in 0..=255u8 {
                if !dfa.next(start, b).is_dead() {
                    first[b as usize / 64] |= 1 << (b % 64);
                }
            }
        }
        LexemeDfa { first, ..dfa }
    }

    /// Finishes a DFA from a raw table (state 0 dead): merges states that cannot reach a
    /// match into `DEAD`, renumbers, and tags ids with their flags.
    pub(super) fn from_tables(
        classes: [u8; 256],
        stride: usize,
        trans: Vec<u32>,
        accept: Vec<bool>,
        start_ix: u32,
        minimize_states: bool,
    ) -> LexemeDfa {
        let n = accept.len();
        let live = live_states(stride, &trans, &accept);
        // Renumber: keep live states only; everything else becomes index 0, dead.
        let mut renum = vec![0u32; n];
        let mut kept = 1u32;
        for s in 1..n {
            if live[s] {
                renum[s] = kept;
                kept += 1;
            }
        }
        // Merge equivalent states (Hopcroft): the same language from both.
        let mut live_trans = vec![0; kept as usize * stride];
        let mut live_accept = vec![false; kept as usize];
        for s in 1..n {
            let ns = renum[s] as usize;
            if ns == 0 {
                continue;
            }
            live_accept[ns] = accept[s];
            for c in 0..stride {
                live_trans[ns * stride + c] = renum[trans[s * stride + c] as usize];
            }
        }
        let blocks = if minimize_states {
            minimize(kept as usize, stride, &live_trans, &live_accept)
        } else {
            (0..kept).collect()
        };
        for r in renum.iter_mut() {
            *r = blocks[*r as usize];
        }
        let kept = blocks.iter().max().map_or(1, |&m| m as usize + 1);
        // A representative original state per merged state, for its flags and transitions.
        let mut rep = vec![usize::MAX; kept];
        for (s, &ns) in renum.iter().enumerate().skip(1) {
            let ns = ns as usize;
            if ns != 0 && rep[ns] == usize::MAX {
                rep[ns] = s;
            }
        }
        // Tag every kept state with its flags, then write the table with tagged targets.
        let mut tagged = vec![DEAD; n];
        for s in 1..n {
            let ns = renum[s];
            if ns == 0 {
                continue;
            }
            let cont = (0..stride).any(|c| renum[trans[s * stride + c] as usize] != 0);
            tagged[s] = StateId::new(ns, accept[s], cont);
        }
        let mut new_trans = vec![DEAD; kept * stride];
        for (ns, &s) in rep.iter().enumerate().skip(1) {
            for c in 0..stride {
                new_trans[ns * stride + c] = tagged[trans[s * stride + c] as usize];
            }
        }
        let start = tagged[start_ix as usize];
        let mut first = [0u64; 4];
        if !start.is_dead() {
            for b in 0..=255u8 {
                let t = new_trans[start.index() * stride + classes[b as usize] as usize];
                if !t.is_dead() {
                    first[b as usize / 64] |= 1 << (b % 64);
                }
            }
        }
        LexemeDfa {
            classes,
            stride,
            trans: Table::from_ids(new_trans, stride),
            len: kept,
            first,
            start,
            fill: Fill::Built,
            shortest: OnceLock::new(),
            numbering: 0,
            finite: false,
        }
    }
}

/// The most characters of a class [`literal_set`] lists (a wider one, `[a-z]`, is a state
/// or two of a subset-built DFA, where a trie has a node per character).
const SET_CLASS_CHARS: usize = 8;

/// The most bytes [`literal_set`] lists in all.
const SET_BYTES: usize = 1 << 16;

/// The strings `hir` matches, in the order its alternatives list them, if there are at most
/// `limit` of them (duplicates counted) with at most [`SET_BYTES`] in all (checked before
/// each product is written): literals, concatenations and alternations of them, and classes
/// of at most [`SET_CLASS_CHARS`] characters. `None` for anything else.
fn literal_set(hir: &Hir, limit: usize) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::{Class, HirKind};
    let bytes = |words: &[Vec<u8>]| words.iter().map(Vec::len).sum::<usize>();
    match hir.kind() {
        HirKind::Empty => Some(vec![Vec::new()]),
        HirKind::Literal(lit) => (lit.0.len() <= SET_BYTES).then(|| vec![lit.0.to_vec()]),
        HirKind::Capture(c) => literal_set(&c.sub, limit),
        HirKind::Class(Class::Unicode(c)) => {
            let count: usize = c.ranges().iter().map(|r| r.len()).sum();
            (count <= limit.min(SET_CLASS_CHARS)).then(|| {
                c.iter()
                    .flat_map(|r| r.start()..=r.end())
                    .map(|ch| ch.to_string().into_bytes())
                    .collect()
            })
        }
        HirKind::Class(Class::Bytes(c)) => {
            let count: usize = c.ranges().iter().map(|r| r.len()).sum();
            (count <= limit.min(SET_CLASS_CHARS)).then(|| {
                c.iter()
                    .flat_map(|r| r.start()..=r.end())
                    .map(|b| vec![b])
                    .collect()
            })
        }
        HirKind::Alternation(xs) => {
            let mut out = Vec::new();
            let mut total = 0usize;
            for x in xs {
                let words = literal_set(x, limit)?;
                total = total.saturating_add(bytes(&words));
                out.extend(words);
                if out.len() > limit || total > SET_BYTES {
                    return None;
                }
            }
            Some(out)
        }
        HirKind::Concat(xs) => {
            let mut out = vec![Vec::new()];
            for x in xs {
                let tails = literal_set(x, limit)?;
                // Every head with every tail: counted before any is written.
                let total = bytes(&out)
                    .saturating_mul(tails.len())
                    .saturating_add(bytes(&tails).saturating_mul(out.len()));
                if out.len().saturating_mul(tails.len()) > limit || total > SET_BYTES {
                    return None;
                }
                out = out
                    .iter()
                    .flat_map(|head| tails.iter().map(move |t| [head.as_slice(), t].concat()))
                    .collect();
            }
            Some(out)
        }
        HirKind::Look(_) | HirKind::Repetition(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_syntax::ParserBuilder;

    /// Every string of at most four bytes of `alphabet`.
    fn up_to_four(alphabet: &[u8]) -> Vec<Vec<u8>> {
        let mut strings: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=4 {
            let longer: Vec<Vec<u8>> = strings
                .iter()
                .filter(|s| s.len() == len - 1)
                .flat_map(|s| alphabet.iter().map(move |&b| [s.as_slice(), &[b]].concat()))
                .collect();
            strings.extend(longer);
        }
        strings
    }

    /// Whether `dfa` accepts `bytes`, and whether it is still alive after them.
    fn run(dfa: &LexemeDfa, bytes: &[u8]) -> (bool, bool) {
        let s = bytes.iter().fold(
            dfa.start,
            |s, &b| {
                if s == DEAD { DEAD } else { dfa.next(s, b) }
            },
        );
        (s != DEAD && s.is_accepting(), s != DEAD)
    }

    #[test]
    fn a_chain_is_the_subset_constructions_automaton() {
        let res = [
            r#""key""#,
            ",",
            r"[ \t\n\r]",
            "é",
            "[a-c]",
            "a|b",
            r"\x00",
            "aab",
            "[\x7f]",
        ];
        // Every string of up to four bytes over the regexes' bytes and a few others.
        let alphabet: Vec<u8> = "\"key, \t\n\rabcd\x00\x7f"
            .bytes()
            .chain([0xc3, 0xa9])
            .collect();
        let mut strings = up_to_four(&alphabet);
        strings.extend([b"\"key\"".to_vec(), b"\"key\"x".to_vec(), b"\"ke".to_vec()]);
        for re in res {
            let hir = ParserBuilder::new().build().parse(re).unwrap();
            let chain = LexemeDfa::chain_tables(&hir).unwrap_or_else(|| panic!("{re}"));
            let subset = LexemeDfa::subset_tables(&hir, 1 << 20).unwrap();
            assert_eq!(
                chain.start.is_accepting(),
                subset.start.is_accepting(),
                "{re}"
            );
            for s in &strings {
                assert_eq!(run(&chain, s), run(&subset, s), "{re} on {s:?}");
            }
        }
        // Anything else is left to subset construction.
        for re in ["ab|c", "a*", "[é-ê]", ""] {
            let hir = ParserBuilder::new().build().parse(re).unwrap();
            assert!(LexemeDfa::chain_tables(&hir).is_none(), "{re}");
        }
    }

    #[test]
    fn a_finite_set_of_strings_is_the_subset_constructions_automaton() {
        let res = [
            r#""(apiVersion|kind|metadata|spec|status)""#,
            "ab|c",
            "a|ab|abc",
            "ab|",
            "(a|b)(c|dd)",
            "[é-ê]x|y",
            "é|ê|e",
            r#""(a|b|c|x|y)""#,
            "abc|abc|ab",
            "bc|ad",
            "[a-h]",
        ];
        let alphabet: Vec<u8> = "\"abcdeiklmnoprstuvxyAV"
            .bytes()
            .chain([0xc3, 0xa9, 0xaa])
            .collect();
        let mut strings = up_to_four(&alphabet);
        strings.extend(
            [
                "\"apiVersion\"",
                "\"apiVersion\"x",
                "\"apiVersio",
                "\"kind\"",
                "\"spe\"",
                "\"status\"",
                "éx",
                "êx",
            ]
            .map(|s| s.as_bytes().to_vec()),
        );
        for re in res {
            let hir = ParserBuilder::new().build().parse(re).unwrap();
            let trie = LexemeDfa::trie_tables(&hir, 1 << 20).unwrap_or_else(|| panic!("{re}"));
            let built = LexemeDfa::build(&hir, 1 << 20).unwrap();
            assert_eq!(built.numbering(), 0, "{re}: written out, not lazy");
            let subset = LexemeDfa::subset_tables(&hir, 1 << 20).unwrap();
            let end = |d: &LexemeDfa, s: &[u8]| {
                s.iter().fold(
                    d.start,
                    |st, &b| if st == DEAD { DEAD } else { d.next(st, b) },
                )
            };
            for s in &strings {
                assert_eq!(run(&trie, s), run(&subset, s), "{re} on {s:?}");
                assert_eq!(run(&built, s), run(&subset, s), "{re} on {s:?}");
                let (t, u) = (end(&trie, s), end(&subset, s));
                assert_eq!(t.can_continue(), u.can_continue(), "{re} on {s:?}");
                // The shortest completion, ties to the lowest byte, as subset construction.
                if t != DEAD {
                    assert_eq!(trie.shortest(t), subset.shortest(u), "{re} on {s:?}");
                }
            }
            assert_eq!(trie.first_bytes(), subset.first_bytes(), "{re}");
        }
        // Not a finite set, one string, a class too wide, too many strings or bytes, or a
        // table past the limit.
        let long = format!("(a|b|c|d)(a|b|c|d)({})", "x".repeat(5000));
        for re in [
            "a*",
            "abc",
            "",
            "[a-z]{3}",
            "[a-z]",
            "[a-d][a-d][a-d][a-d][a-d][a-d]",
            &long,
        ] {
            let hir = ParserBuilder::new().build().parse(re).unwrap();
            assert!(LexemeDfa::trie_tables(&hir, 1 << 20).is_none(), "{re}");
        }
        let hir = ParserBuilder::new().build().parse("abc|abd").unwrap();
        assert!(LexemeDfa::trie_tables(&hir, 16).is_none());
        // Words that end for good end in one state.
        let hir = ParserBuilder::new().build().parse("xa|b|ya").unwrap();
        let t = LexemeDfa::trie_tables(&hir, 1 << 20).unwrap();
        let after = |w: &[u8]| w.iter().fold(t.start, |st, &b| t.next(st, b));
        assert_eq!(after(b"xa"), after(b"b"));
        assert_eq!(after(b"ya"), after(b"b"));
        assert_eq!(t.len(), 5, "dead, start, x, y and one end");
    }
}

//! The mask of one step ([`RobustConstrainedAdapter::compute_mask`]): per lexer run, the
//! token sets of its state, and walks of the token trie with the recognizer where the
//! lexeme ends inside a token.

use super::{AdapterError, MAX_REMEMBERED_WALKS, RobustConstrainedAdapter, WalkKey, Walked};
use crate::constraint::{Constraint, StateTokens};
use crate::tokens::{Chain, LexTokens, Outcome, Rests, SuffixWalk, run_suffix, suffix_node};
use corral_grammar::{RecognizeError, Recognizer, Run, StateId};
use corral_trie::{Alphabet, ByteRecognizer, FixedBitSet, NodeId, SuffixId, TokenId};
use std::sync::Arc;

/// Drives the grammar's recognizer from the trie walk, keeping the first error.
struct Walker<'a> {
    rec: &'a mut Recognizer,
    error: Option<RecognizeError>,
}

impl ByteRecognizer for Walker<'_> {
    #[inline]
    fn push(&mut self, byte: u8) -> bool {
        match self.rec.push_byte(byte) {
            Ok(ok) => ok,
            Err(e) => {
                self.error.get_or_insert(e);
                false
            }
        }
    }

    #[inline]
    fn pop(&mut self, n: usize) {
        self.rec.pop(n);
    }

    fn next_bytes(&mut self) -> Option<[u64; 4]> {
        Some(self.rec.next_bytes())
    }
}

/// Puts the recognizer just after `run`'s lexeme ends in `end_state`; false if that is
/// not possible (or failed: the error is kept in the walker).
fn push_end(walker: &mut Walker<'_>, run: Run, end_state: StateId) -> bool {
    let pushed = walker.rec.push_lexeme_end(run, end_state);
    checked(walker, pushed)
}

/// [`push_end`] with the lexeme closed there ([`Recognizer::push_lexeme_closed`]).
fn push_closed(walker: &mut Walker<'_>, run: Run, end_state: StateId) -> bool {
    let pushed = walker.rec.push_lexeme_closed(run, end_state);
    checked(walker, pushed)
}

fn checked(walker: &mut Walker<'_>, pushed: Result<bool, RecognizeError>) -> bool {
    match pushed {
        Ok(ok) => ok,
        Err(e) => {
            walker.error.get_or_insert(e);
            false
        }
    }
}

/// The adapter's memos of walks after a lexeme's end, borrowed for one mask.
struct Memos<'a> {
    walks: &'a mut rustc_hash::FxHashMap<WalkKey, Vec<TokenId>>,
    suffix_walks: &'a mut rustc_hash::FxHashMap<WalkKey, FixedBitSet>,
}

/// The tokens of a run in a generic state: its inside set, the suffix tries where its
/// lexeme ends inside a token, and the main-trie subtrees below such ends. `from` and `to`
/// map the sets' end states to the run's DFA (see [`StateTokens::Generic`]).
fn generic_run(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &mut Memos<'_>,
    run: Run,
    (sets, from, to): (&LexTokens, u32, u32),
    mask: &mut FixedBitSet,
) {
    let dfa = c.grammar.lexeme(run.lexeme).dfa();
    let here = |t: StateId| {
        if from == to {
            t
        } else {
            dfa.counterpart(t, from, to)
        }
    };
    sets.inside.union_into(mask);
    // Where the lexeme can end inside a token: continue from there with the recognizer
    // just after the lexeme's end (one push per distinct end state).
    let space = c.space();
    let trie = space.trie();
    let nodes = trie.nodes();
    for (end_state, rests) in &sets.suffixes {
        let end_state = here(*end_state);
        match rests {
            Rests::Shared {
                trie,
                from: runs_from,
                firsts,
            } => {
                let key = WalkKey {
                    from_set: walker.rec.set_uid(run.set),
                    lexeme: run.lexeme,
                    end_state,
                    walked: Walked::BodyRests(here(*runs_from), Arc::as_ptr(trie) as usize),
                };
                let tokens = remembered(memo, key, || {
                    let mut tokens = Vec::new();
                    if push_end(walker, run, end_state) {
                        trie.walk_range_tokens(walker, &mut tokens, 1, trie.nodes().len(), 0);
                        walker.rec.pop(1);
                    }
                    walker.error.is_none().then_some(tokens)
                });
                // Only the tokens whose first byte leads this state where they were run.
                let vocab = space.vocab();
                for &t in tokens {
                    let first = vocab.token_bytes(t).and_then(|b| b.first());
                    if first.is_some_and(|&b| firsts.contains(b)) {
                        mask.insert(t.index());
                    }
                }
            }
            Rests::Trie(rests) => {
                if push_end(walker, run, end_state) {
                    rests.walk(walker, mask);
                    walker.rec.pop(1);
                }
            }
            Rests::Below(node) => {
                if push_end(walker, run, end_state) {
                    let (lo, n) = (node.index(), nodes[node.index()]);
                    trie.walk_range(
                        walker,
                        mask,
                        lo + 1,
                        lo + n.subtree as usize,
                        n.depth as usize,
                    );
                    walker.rec.pop(1);
                }
            }
        }
    }
    let mut k = 0;
    while k < sets.subtrees.len() {
        let walked_end = sets.subtrees[k].0;
        let group_end = k + sets.subtrees[k..]
            .iter()
            .take_while(|e| e.0 == walked_end)
            .count();
        let end_state = here(walked_end);
        // The lexeme ends at the node and does not go on (where it could, the nodes below
        // the walk took it on). What the walk below a node finds depends only on where the
        // lexeme started, the lexeme, and its end state: remembered across masks.
        let from = walker.rec.set_uid(run.set);
        let mut pushed = None;
        for &(_, node) in &sets.subtrees[k..group_end] {
            let key = WalkKey {
                from_set: from,
                lexeme: run.lexeme,
                end_state,
                walked: Walked::Tokens(node),
            };
            if let Some(tokens) = memo.walks.get(&key) {
                tokens.iter().for_each(|&t| mask.insert(t.index()));
                continue;
            }
            if *pushed.get_or_insert_with(|| push_closed(walker, run, end_state)) {
                let (lo, n) = (node.index(), nodes[node.index()]);
                let mut tokens = Vec::new();
                trie.walk_range_tokens(
                    walker,
                    &mut tokens,
                    lo + 1,
                    lo + n.subtree as usize,
                    n.depth as usize,
                );
                tokens.iter().for_each(|&t| mask.insert(t.index()));
                if memo.walks.len() >= MAX_REMEMBERED_WALKS {
                    memo.walks.clear();
                }
                memo.walks.insert(key, tokens);
            }
        }
        if pushed == Some(true) {
            walker.rec.pop(1);
        }
        k = group_end;
    }
}

/// The tokens `walk` finds, remembered by `key` (not where it gives none: it failed).
fn remembered<'m>(
    memo: &'m mut Memos<'_>,
    key: WalkKey,
    walk: impl FnOnce() -> Option<Vec<TokenId>>,
) -> &'m [TokenId] {
    if !memo.walks.contains_key(&key) {
        let Some(tokens) = walk() else {
            return &[];
        };
        if memo.walks.len() >= MAX_REMEMBERED_WALKS {
            memo.walks.clear();
        }
        memo.walks.insert(key, tokens);
    }
    &memo.walks[&key]
}

/// The suffixes below `node` of the suffix trie of `alphabet`'s slice that the parser takes
/// after `run`'s lexeme ends in `end_state` there (remembered).
fn parser_suffixes<'m>(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &'m mut Memos<'_>,
    (run, alphabet): (Run, Alphabet),
    end_state: StateId,
    node: NodeId,
) -> Option<&'m FixedBitSet> {
    let key = WalkKey {
        from_set: walker.rec.set_uid(run.set),
        lexeme: run.lexeme,
        end_state,
        walked: Walked::Suffixes(alphabet, node),
    };
    if !memo.suffix_walks.contains_key(&key) {
        let slice = c.space().slice_of(alphabet);
        let trie = slice.suffixes();
        let n = trie.nodes()[node.index()];
        let mut found = FixedBitSet::with_capacity(slice.suffix_count());
        if push_end(walker, run, end_state) {
            let lo = node.index();
            trie.walk_range(
                walker,
                &mut found,
                lo + 1,
                lo + n.subtree as usize,
                n.depth as usize,
            );
            walker.rec.pop(1);
        }
        if memo.suffix_walks.len() >= MAX_REMEMBERED_WALKS {
            memo.suffix_walks.clear();
        }
        memo.suffix_walks.insert(key, found);
    }
    memo.suffix_walks.get(&key)
}

/// The tokens of a run in a sliced state: the slice tokens it has room for, and of the
/// others those whose suffix its DFA (or the parser after its end) takes from where their
/// prefix leads (see [`crate::tokens`]).
fn sliced_run(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &mut Memos<'_>,
    run: Run,
    (alphabet, chain, walks): (Alphabet, &Chain, &[Arc<SuffixWalk>]),
    mask: &mut FixedBitSet,
) {
    let space = c.space().clone();
    let slice = space.slice_of(alphabet);
    slice.mark_upto(chain.left.unwrap_or(u32::MAX), mask);
    let reach = chain.left.unwrap_or(u32::MAX).min(slice.max_prefix());
    // The suffixes allowed after a prefix of `n` characters, by walk `w`.
    let mut allowed = FixedBitSet::with_capacity(slice.suffix_count());
    let by_walk = |w: &SuffixWalk,
                   allowed: &mut FixedBitSet,
                   walker: &mut Walker<'_>,
                   memo: &mut Memos<'_>| {
        allowed.clone_from(&w.alive);
        for &(end_state, node) in &w.endings {
            if let Some(found) = parser_suffixes(c, walker, memo, (run, alphabet), end_state, node)
            {
                allowed.union_with(found);
            }
        }
    };
    if chain.self_loop {
        by_walk(&walks[0], &mut allowed, walker, memo);
        for sid in allowed.ones() {
            for &(_, t) in slice.tokens_of(SuffixId(sid as u32)) {
                mask.insert(t.index());
            }
        }
        return;
    }
    for n in 0..=reach {
        let tokens = slice.with_prefix(n);
        if tokens.is_empty() {
            continue;
        }
        if let Some(w) = walks.get(n as usize) {
            by_walk(w, &mut allowed, walker, memo);
            if allowed.count_ones(..) < tokens.len() {
                // Fewer suffixes allowed than tokens with this prefix (the words slice,
                // whose suffixes include every token that starts with another byte): by
                // suffix, each suffix's tokens sorted by prefix length.
                for sid in allowed.ones() {
                    let of = slice.tokens_of(SuffixId(sid as u32));
                    let from = of.partition_point(|&(p, _)| p < n);
                    for &(_, t) in of[from..].iter().take_while(|&&(p, _)| p == n) {
                        mask.insert(t.index());
                    }
                }
            } else {
                for &(sid, t) in tokens {
                    if allowed.contains(sid.index()) {
                        mask.insert(t.index());
                    }
                }
            }
            continue;
        }
        // Few tokens have a prefix this long: run each one's suffix.
        let dfa = &c.grammar.lexeme(run.lexeme).dfa();
        let from = chain.state(n);
        for &(sid, t) in tokens {
            match run_suffix(dfa, from, slice.suffix(sid)) {
                Outcome::Alive => mask.insert(t.index()),
                Outcome::Dead => {}
                Outcome::Ending { state, at } => {
                    let Some(node) = suffix_node(slice, sid, at) else {
                        continue;
                    };
                    if parser_suffixes(c, walker, memo, (run, alphabet), state, node)
                        .is_some_and(|f| f.contains(sid.index()))
                    {
                        mask.insert(t.index());
                    }
                }
            }
        }
    }
}

impl RobustConstrainedAdapter {
    /// Fills `mask` (cleared and grown to the logit width) with the tokens allowed next.
    pub fn compute_mask(&mut self, mask: &mut FixedBitSet) -> Result<(), AdapterError> {
        self.check()?;
        let width = self.c.space().width();
        if mask.len() < width {
            mask.grow(width);
        }
        mask.clear();
        if self.finished {
            return Ok(());
        }
        // Same state as for the last mask (e.g. token after token inside a string): reuse.
        self.rec.state_key(&mut self.key);
        if let Some((key, last)) = &self.last_mask
            && *key == self.key
        {
            mask.union_with(last);
            return Ok(());
        }
        let c = self.c.clone();
        self.rec.runs_into(&mut self.runs);
        let mut walker = Walker {
            rec: &mut self.rec,
            error: None,
        };
        let mut memo = Memos {
            walks: &mut self.walks,
            suffix_walks: &mut self.suffix_walks,
        };
        for &run in &self.runs {
            match &**c.state_tokens(run.lexeme, run.state) {
                StateTokens::Generic { sets, from, to } => {
                    generic_run(&c, &mut walker, &mut memo, run, (sets, *from, *to), mask);
                }
                StateTokens::Sliced {
                    alphabet,
                    chain,
                    walks,
                } => {
                    sliced_run(
                        &c,
                        &mut walker,
                        &mut memo,
                        run,
                        (*alphabet, chain, walks),
                        mask,
                    );
                }
            }
        }
        let (g, space) = (&c.grammar, c.space());
        if let Some(e) = walker.error.or_else(|| c.grammar.overflow()) {
            return self.fail(e.into());
        }
        let refs = self.rec.expected_tokens();
        if !refs.is_empty() {
            let vocab_len = space.vocab().len().min(width);
            for r in refs {
                let t = &g.token_refs()[r.0 as usize];
                match (t.negated, c.refs[r.0 as usize]) {
                    (false, Some(id)) if id.index() < width => mask.insert(id.index()),
                    (false, _) => {}
                    (true, except) => {
                        for id in (0..vocab_len as u32).map(TokenId) {
                            if Some(id) != except && !space.eos().contains(&id) {
                                mask.insert(id.index());
                            }
                        }
                    }
                }
            }
        }
        if self.rec.is_accepting() {
            for &e in space.eos() {
                if e.index() < width {
                    mask.insert(e.index());
                }
            }
        }
        if mask.is_clear() {
            let position = self.rec.position();
            return self.fail(AdapterError::NoContinuation { position });
        }
        match &mut self.last_mask {
            Some((key, last)) => {
                key.clone_from(&self.key);
                last.clone_from(mask);
            }
            None => self.last_mask = Some((self.key.clone(), mask.clone())),
        }
        Ok(())
    }

    /// Forgets the last mask, so the next [`Self::compute_mask`] computes from scratch even
    /// in an unchanged state (for benchmarks of the computation itself).
    pub fn forget_last_mask(&mut self) {
        self.last_mask = None;
    }

    /// The allowed tokens as a list (convenience over [`Self::compute_mask`]).
    pub fn allowed_token_ids(&mut self) -> Result<Vec<TokenId>, AdapterError> {
        let mut mask = self.empty_mask();
        self.compute_mask(&mut mask)?;
        Ok(mask.ones().map(|i| TokenId(i as u32)).collect())
    }
}

//! The fewest bytes from a DFA state to an accepting one ([`LexemeDfa::shortest`]), for
//! shortest completions.

use super::*;

impl LexemeDfa {
    /// The fewest bytes from `state` to an accepting state, and the first of them (the most
    /// readable where several are shortest); `None` if no accepting state is reachable.
    pub fn shortest(&self, state: StateId) -> Option<(u32, u8)> {
        if state.is_dead() {
            return None;
        }
        match &self.fill {
            Fill::Composed(c) => return c.shortest(state.index32()),
            Fill::Subset(lazy) => return self.shortest_by_distance(lazy, state),
            Fill::Product(p) => return self.shortest_remembered(&p.shortest, state),
            Fill::Built => {}
        }
        let (dist, byte) = self.shortest.get_or_init(|| self.shortest_suffixes());
        let i = state.index();
        (dist[i] != u32::MAX).then(|| (dist[i], byte[i]))
    }

    /// [`LexemeDfa::shortest_forward`], remembered in `memo` by state index.
    pub(super) fn shortest_remembered(
        &self,
        memo: &Mutex<FxHashMap<u32, Option<(u32, u8)>>>,
        state: StateId,
    ) -> Option<(u32, u8)> {
        let i = state.index32();
        if let Some(&r) = lock(memo).get(&i) {
            return r;
        }
        let r = self.shortest_forward(state);
        lock(memo).insert(i, r);
        r
    }

    /// For a DFA built by subset construction: the fewest bytes from `state` to an
    /// accepting state (the least NFA distance of its set) and the first of them, the most
    /// readable byte whose target is one byte closer. Builds only the targets it tries.
    pub(super) fn shortest_by_distance(&self, lazy: &Lazy, state: StateId) -> Option<(u32, u8)> {
        let i = state.index32();
        let d = lock(&lazy.subsets).distance(i)?;
        if d == 0 {
            return Some((0, 0));
        }
        if let Some(&r) = lock(&lazy.shortest).get(&i) {
            return r;
        }
        let reps = self.readable_reps();
        let mut order: Vec<usize> = (0..self.stride).collect();
        order.sort_by_key(|&c| reps[c].0);
        let mut found = None;
        for c in order {
            let t = self.entry(i as usize, c);
            if t != DEAD && lock(&lazy.subsets).distance(t.index32()) == Some(d - 1) {
                found = Some((d, reps[c].1));
                break;
            }
        }
        // None only when the target on the path was past the size limit (overflowed).
        lock(&lazy.shortest).insert(i, found);
        found
    }

    /// For a lazily built DFA: the fewest bytes from `state` to an accepting state and the
    /// first of them, by a breadth-first search forward (classes tried most readable byte
    /// first, so the first path found is the most readable of the shortest).
    pub(super) fn shortest_forward(&self, state: StateId) -> Option<(u32, u8)> {
        if state.is_accepting() {
            return Some((0, 0));
        }
        let reps = self.readable_reps();
        let mut order: Vec<usize> = (0..self.stride).collect();
        order.sort_by_key(|&c| reps[c].0);
        // Per state reached: (distance, first byte of its path).
        let mut seen: FxHashMap<usize, (u32, u8)> = FxHashMap::default();
        let mut queue = std::collections::VecDeque::new();
        seen.insert(state.index(), (0, 0));
        queue.push_back(state);
        while let Some(s) = queue.pop_front() {
            let (d, first) = seen[&s.index()];
            for &c in &order {
                let t = self.entry(s.index(), c);
                if t == DEAD || seen.contains_key(&t.index()) {
                    continue;
                }
                let first = if d == 0 { reps[c].1 } else { first };
                if t.is_accepting() {
                    return Some((d + 1, first));
                }
                seen.insert(t.index(), (d + 1, first));
                queue.push_back(t);
            }
        }
        None
    }

    /// Per byte class: its most readable byte and that byte's rank (a lower-case letter,
    /// then a digit, an upper-case letter, a space, other printable ASCII, anything).
    pub(super) fn readable_reps(&self) -> Vec<(u8, u8)> {
        let rank = |b: u8| match b {
            b'a'..=b'z' => 0,
            b'0'..=b'9' => 1,
            b'A'..=b'Z' => 2,
            b' ' => 3,
            0x21..=0x7e => 4,
            _ => 5,
        };
        let mut reps = vec![(u8::MAX, 0u8); self.stride];
        for b in 0..=255u8 {
            let c = self.classes[b as usize] as usize;
            if rank(b) < reps[c].0 {
                reps[c] = (rank(b), b);
            }
        }
        reps
    }

    /// For every state (by [`StateId::index`]): the fewest bytes that lead from it to an
    /// accepting state (`u32::MAX` if none; 0 for accepting states), and the first of them.
    /// A breadth-first search backwards from the accepting states (over the whole table).
    pub(super) fn shortest_suffixes(&self) -> (Vec<u32>, Vec<u8>) {
        let n = self.len;
        // Tagged id of each state index, to read its flags.
        let tag = self.tags();
        let readable = self.readable_reps();
        let reps: Vec<u8> = readable.iter().map(|r| r.1).collect();
        let best: Vec<u8> = readable.iter().map(|r| r.0).collect();
        let mut preds: Vec<Vec<(u32, u8)>> = vec![Vec::new(); n];
        for s in 1..n {
            for (c, &rep) in reps.iter().enumerate() {
                let t = self.entry(s, c).index();
                if t != 0 {
                    preds[t].push((s as u32, rep));
                }
            }
        }
        let mut dist = vec![u32::MAX; n];
        let mut byte = vec![0u8; n];
        let mut queue = std::collections::VecDeque::new();
        for s in 1..n {
            if tag[s].is_accepting() {
                dist[s] = 0;
                queue.push_back(s);
            }
        }
        while let Some(t) = queue.pop_front() {
            for &(p, _) in &preds[t] {
                let p = p as usize;
                if dist[p] == u32::MAX {
                    dist[p] = dist[t] + 1;
                    queue.push_back(p);
                }
            }
        }
        // Of the bytes on a shortest way, the most readable.
        for p in 1..n {
            if dist[p] == 0 || dist[p] == u32::MAX {
                continue;
            }
            let mut chosen = (u8::MAX, 0u8);
            for (c, &rep) in reps.iter().enumerate() {
                let t = self.entry(p, c).index();
                if t != 0 && dist[t] != u32::MAX && dist[t] + 1 == dist[p] && best[c] < chosen.0 {
                    chosen = (best[c], rep);
                }
            }
            byte[p] = chosen.1;
        }
        (dist, byte)
    }
}

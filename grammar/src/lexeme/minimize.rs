//! Minimization of a built DFA: live states, then Hopcroft-style partition refinement.

/// The states of a raw table (state 0 dead) that can reach an accepting state: reverse
/// reachability over predecessor lists in CSR form (state t's predecessors are
/// `preds[first[t]..first[t + 1]]`).
pub(super) fn live_states(stride: usize, trans: &[u32], accept: &[bool]) -> Vec<bool> {
    let n = accept.len();
    let mut first = vec![0u32; n + 1];
    for &t in &trans[stride..] {
        first[t as usize + 1] += 1;
    }
    for i in 1..=n {
        first[i] += first[i - 1];
    }
    let mut fill = first.clone();
    let mut preds = vec![0u32; first[n] as usize];
    for (k, &t) in trans.iter().enumerate().skip(stride) {
        preds[fill[t as usize] as usize] = (k / stride) as u32;
        fill[t as usize] += 1;
    }
    let mut live = accept.to_vec();
    let mut stack: Vec<usize> = (0..n).filter(|&s| accept[s]).collect();
    while let Some(t) = stack.pop() {
        for &p in &preds[first[t] as usize..first[t + 1] as usize] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p as usize);
            }
        }
    }
    live
}

/// Hopcroft's partition refinement over a DFA whose states `1..n` are live and state 0 is
/// dead: the merged state of each state, numbered with 0 for dead and the rest in order of
/// their first member (so the start state's number is stable when it is state 1).
pub(super) fn minimize(n: usize, stride: usize, trans: &[u32], accept: &[bool]) -> Vec<u32> {
    if n <= 2 {
        return (0..n as u32).collect();
    }
    let (count, preds) = predecessors(n, stride, trans);
    let mut p = Partition::dead_rejecting_accepting(n, accept);
    let mut marked = vec![0usize; p.first.len()];
    let mut in_work = vec![true; p.first.len()];
    let mut work: Vec<usize> = (0..p.first.len()).collect();
    let mut splitter: Vec<u32> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    while let Some(a) = work.pop() {
        in_work[a] = false;
        splitter.clear();
        splitter.extend_from_slice(&p.elems[p.first[a]..p.end[a]]);
        for c in 0..stride {
            for &t in &splitter {
                let k = c * n + t as usize;
                for &s in &preds[count[k] as usize..count[k + 1] as usize] {
                    p.mark(s, &mut marked, &mut touched);
                }
            }
            for b in touched.drain(..) {
                let m = std::mem::take(&mut marked[b]);
                if m == p.end[b] - p.first[b] {
                    continue;
                }
                let nb = p.split(b, m);
                marked.push(0);
                if in_work[b] {
                    in_work.push(true);
                    work.push(nb);
                } else {
                    let smaller = if p.len(nb) <= p.len(b) { nb } else { b };
                    in_work.push(false);
                    in_work[smaller] = true;
                    work.push(smaller);
                }
            }
        }
    }
    p.numbering()
}

/// Predecessors per (byte class, target state), in CSR form: those of `c * n + t` are
/// `preds[count[k]..count[k + 1]]`.
pub(super) fn predecessors(n: usize, stride: usize, trans: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut count = vec![0u32; stride * n + 1];
    for s in 0..n {
        for c in 0..stride {
            count[c * n + trans[s * stride + c] as usize + 1] += 1;
        }
    }
    for i in 1..count.len() {
        count[i] += count[i - 1];
    }
    let mut fill = count.clone();
    let mut preds = vec![0u32; stride * n];
    for s in 0..n {
        for c in 0..stride {
            let k = c * n + trans[s * stride + c] as usize;
            preds[fill[k] as usize] = s as u32;
            fill[k] += 1;
        }
    }
    (count, preds)
}

/// The blocks of [`minimize`]'s refinement: each is a range `first..end` of `elems`; `pos`
/// finds a state in `elems`, `block_of` its block.
pub(super) struct Partition {
    pub(super) elems: Vec<u32>,
    pub(super) pos: Vec<usize>,
    pub(super) block_of: Vec<u32>,
    pub(super) first: Vec<usize>,
    pub(super) end: Vec<usize>,
}

impl Partition {
    /// The dead state alone, the live rejecting states, the accepting states (empty
    /// blocks left out).
    pub(super) fn dead_rejecting_accepting(n: usize, accept: &[bool]) -> Partition {
        let mut elems: Vec<u32> = Vec::with_capacity(n);
        elems.push(0);
        elems.extend((1..n as u32).filter(|&s| !accept[s as usize]));
        let non_acc_end = elems.len();
        elems.extend((1..n as u32).filter(|&s| accept[s as usize]));
        let mut p = Partition {
            pos: vec![0; n],
            block_of: vec![0; n],
            first: vec![0],
            end: vec![1],
            elems,
        };
        if non_acc_end > 1 {
            p.first.push(1);
            p.end.push(non_acc_end);
        }
        if non_acc_end < n {
            p.first.push(non_acc_end);
            p.end.push(n);
        }
        for (i, &s) in p.elems.iter().enumerate() {
            p.pos[s as usize] = i;
        }
        for b in 0..p.first.len() {
            for i in p.first[b]..p.end[b] {
                p.block_of[p.elems[i] as usize] = b as u32;
            }
        }
        p
    }

    pub(super) fn len(&self, b: usize) -> usize {
        self.end[b] - self.first[b]
    }

    /// Marks `s` in its block (moved to the block's marked front), noting blocks marked
    /// for the first time in `touched`.
    pub(super) fn mark(&mut self, s: u32, marked: &mut [usize], touched: &mut Vec<usize>) {
        let b = self.block_of[s as usize] as usize;
        let slot = self.first[b] + marked[b];
        if self.pos[s as usize] < slot {
            return; // already marked
        }
        if marked[b] == 0 {
            touched.push(b);
        }
        let other = self.elems[slot];
        let ps = self.pos[s as usize];
        self.elems.swap(slot, ps);
        self.pos[other as usize] = ps;
        self.pos[s as usize] = slot;
        marked[b] += 1;
    }

    /// Splits block `b`'s first `m` (marked) states into a new block; returns its index.
    pub(super) fn split(&mut self, b: usize, m: usize) -> usize {
        let nb = self.first.len();
        self.first.push(self.first[b]);
        self.end.push(self.first[b] + m);
        self.first[b] += m;
        for i in self.first[nb]..self.end[nb] {
            self.block_of[self.elems[i] as usize] = nb as u32;
        }
        nb
    }

    /// Each state's block number: dead first, then the blocks by their least state.
    pub(super) fn numbering(&self) -> Vec<u32> {
        let mut number = vec![u32::MAX; self.first.len()];
        number[self.block_of[0] as usize] = 0;
        let mut next = 1u32;
        let mut out = vec![0u32; self.block_of.len()];
        for (s, o) in out.iter_mut().enumerate() {
            let b = self.block_of[s] as usize;
            if number[b] == u32::MAX {
                number[b] = next;
                next += 1;
            }
            *o = number[b];
        }
        out
    }
}

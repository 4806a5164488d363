//! Dropping what the chart no longer needs: history below the top frame, runs below it,
//! and Earley sets nothing refers to any more.

use super::*;

impl Chart {
    /// Keeps only the top frame.
    pub(super) fn forget_history(&mut self) {
        let top = *self.frames.last().expect("at least one frame");
        self.frames.clear();
        self.frames.push(top);
        self.compact_runs();
    }

    /// Without history, runs below the top frame are garbage; drop them in batches
    /// (amortized O(1) per push).
    pub(super) fn compact_runs(&mut self) {
        let top = self.frames.last_mut().expect("at least one frame");
        let dead = top.runs_start as usize;
        if dead >= 4096 {
            self.runs.drain(..dead);
            top.runs_start = 0;
        }
    }

    /// Without history, a set is needed only while something can still reach it: a live
    /// run started there, or a waiting item (dot before a symbol) or Leo item of a needed
    /// set has it as origin; the current set and set 0 (acceptance) always. Complete items
    /// are read only while their set is built, so outside the current set they are dropped
    /// and their origins do not count. Drops the sets nothing needs and renumbers the rest
    /// in order, so memory follows the open structure of the input (the containers still
    /// open in a JSON document), not its length. Next collection at twice the sets kept:
    /// amortized O(1) per set built.
    pub(super) fn collect_sets(&mut self, g: &Grammar) {
        let top = *self.frames.last().expect("at least one frame");
        let n = self.sets.len();
        let current = n - 1;
        let waiting = |it: &Item| matches!(g.next(it.dot), AfterDot::Sym(_));
        let keep = self.sets_in_use(g, top);
        // Old index -> new, for the sets kept.
        let mut renumber = vec![SetIdx::FIRST; n];
        let mut kept = 0;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                renumber[i] = SetIdx::new(kept);
                kept += 1;
            }
        }
        let at = |o: Origin| {
            o.set()
                .map_or(Origin::SELF, |s| Origin::at(renumber[s.index()]))
        };
        let (mut sets, mut items, mut leo, mut set_lex) = std::mem::take(&mut self.s.spare);
        sets.clear();
        items.clear();
        leo.clear();
        set_lex.clear();
        for (i, info) in self.sets.iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let mut info = *info;
            let start = items.len() as u32;
            items.extend(
                self.items[info.items.0 as usize..info.items.1 as usize]
                    .iter()
                    .filter(|it| i == current || waiting(it))
                    .map(|it| Item {
                        origin: at(it.origin),
                        ..*it
                    }),
            );
            info.items = (start, items.len() as u32);
            let start = leo.len() as u32;
            leo.extend(
                self.leo[info.leo.0 as usize..info.leo.1 as usize]
                    .iter()
                    .map(|l| Leo {
                        origin: at(l.origin),
                        ..*l
                    }),
            );
            info.leo = (start, leo.len() as u32);
            let start = set_lex.len() as u32;
            set_lex
                .extend_from_slice(&self.set_lex[info.lexemes.0 as usize..info.lexemes.1 as usize]);
            info.lexemes = (start, set_lex.len() as u32);
            info.owns = true;
            sets.push(info);
        }
        for r in &mut self.runs[top.runs_start as usize..] {
            r.set = renumber[r.set.index()];
        }
        let old_sets = std::mem::replace(&mut self.sets, sets);
        let old_items = std::mem::replace(&mut self.items, items);
        let old_leo = std::mem::replace(&mut self.leo, leo);
        let old_set_lex = std::mem::replace(&mut self.set_lex, set_lex);
        self.s.spare = (old_sets, old_items, old_leo, old_set_lex);
        // Slots name sets by index: all stale now.
        self.share
            .iter_mut()
            .for_each(|s| *s = ShareSlot::default());
        let f = self.frames.last_mut().expect("at least one frame");
        f.sets_len = self.sets.len() as u32;
        f.items_len = self.items.len() as u32;
        f.leo_len = self.leo.len() as u32;
        f.set_lex_len = self.set_lex.len() as u32;
        self.collect_at = (2 * self.sets.len()).max(FIRST_COLLECTION);
    }

    /// Which sets [`Chart::collect_sets`] keeps: the first, the current one, those the top
    /// frame's runs started at, and every set an item of a kept set waits on (through its
    /// origin, or a Leo item's).
    fn sets_in_use(&self, g: &Grammar, top: Frame) -> Vec<bool> {
        let n = self.sets.len();
        let current = n - 1;
        let waiting = |it: &Item| matches!(g.next(it.dot), AfterDot::Sym(_));
        let mut keep = vec![false; n];
        let mut stack: Vec<SetIdx> = Vec::new();
        let mark = |s: SetIdx, keep: &mut Vec<bool>, stack: &mut Vec<SetIdx>| {
            if !keep[s.index()] {
                keep[s.index()] = true;
                stack.push(s);
            }
        };
        mark(SetIdx::FIRST, &mut keep, &mut stack);
        mark(SetIdx::new(current), &mut keep, &mut stack);
        for r in &self.runs[top.runs_start as usize..] {
            mark(r.set, &mut keep, &mut stack);
        }
        while let Some(s) = stack.pop() {
            let info = self.sets[s.index()];
            for it in &self.items[info.items.0 as usize..info.items.1 as usize] {
                if let Some(o) = it.origin.set()
                    && (s.index() == current || waiting(it))
                {
                    mark(o, &mut keep, &mut stack);
                }
            }
            for k in info.leo.0..info.leo.1 {
                if let Some(o) = self.leo[k as usize].origin.set() {
                    mark(o, &mut keep, &mut stack);
                }
            }
        }
        keep
    }

    /// Without history, the set built by the previous push is dropped when nothing refers to
    /// it any more: no run started there survived and no lexeme from there just completed.
    /// (Pretty-printed JSON ends a lexeme at every indentation byte; this keeps memory
    /// proportional to the sets that matter.) Set 0 stays: acceptance refers to it.
    pub(super) fn drop_unreferenced_set(&mut self, prev: Frame, new_start: usize) {
        if !prev.new_set || prev.sets_len < 2 || prev.sets_len as usize != self.sets.len() {
            return;
        }
        let last = SetIdx::new(prev.sets_len as usize - 1);
        if self.s.events.iter().any(|&(j, _)| j == last)
            || self.runs[new_start..].iter().any(|r| r.set == last)
        {
            return;
        }
        if self.s.events.len() == 1 {
            // About to complete the same lexeme from the same set again: keep this set, the
            // new one will share its items.
            let (j, lex) = self.s.events[0];
            let info = &self.sets[last.index()];
            if info.owns && info.source == (self.sets[j.index()].uid, lex) {
                return;
            }
        }
        let info = self.sets.pop().expect("checked");
        if info.owns {
            self.items.truncate(info.items.0 as usize);
            self.leo.truncate(info.leo.0 as usize);
            self.set_lex.truncate(info.lexemes.0 as usize);
        }
    }

    /// Truncates the arenas to what `frame` had.
    pub(super) fn drop_sets_after(&mut self, frame: Frame) {
        self.sets.truncate(frame.sets_len as usize);
        self.items.truncate(frame.items_len as usize);
        self.leo.truncate(frame.leo_len as usize);
        self.set_lex.truncate(frame.set_lex_len as usize);
    }
}

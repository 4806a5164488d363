//! Pushing input: a byte steps every lexer run, and the lexemes that complete build the
//! next Earley set; a token the grammar names, or a lexeme's end, is pushed the same way.

use super::*;

impl Recognizer {
    /// Feeds one byte. `Ok(false)`: the byte cannot come next, and nothing changed.
    pub fn push_byte(&mut self, byte: u8) -> Result<bool, RecognizeError> {
        // Fast path (most bytes inside strings and numbers): a single run that neither dies
        // nor completes. A live state that does not accept can always continue. (Reads only
        // the field it needs: copying the whole frame right after the last push wrote one
        // field of it stalls on store forwarding.)
        let runs_start = self.c.frames.last().expect("at least one frame").runs_start;
        if runs_start as usize + 1 == self.c.runs.len() {
            let top = *self.c.frames.last().expect("at least one frame");
            let r = self.c.runs[top.runs_start as usize];
            if r.lexeme != PENDING {
                let dfa = &self.g.lexemes[r.lexeme.0 as usize].dfa();
                let s = dfa.next(r.state, byte);
                if s != DEAD && !s.is_accepting() {
                    if self.c.keep_history {
                        self.c.runs.push(Run { state: s, ..r });
                        self.c.frames.push(Frame {
                            runs_start: top.runs_start + 1,
                            new_set: false,
                            pos: top.pos + 1,
                            ..top
                        });
                    } else {
                        self.c.runs[top.runs_start as usize].state = s;
                        let f = self.c.frames.last_mut().expect("at least one frame");
                        f.new_set = false;
                        f.pos += 1;
                    }
                    return Ok(true);
                }
            }
        }
        let top = *self.c.frames.last().expect("at least one frame");
        let new_start = self.c.step_runs(&self.g, top, byte);
        self.c.finish_push(&self.g, top, new_start, 1, None, false)
    }

    /// Pushes the end of `run`'s lexeme, with the run itself going on in `end_state` (an
    /// accepting state of its DFA), and no other run: the state right after `run`'s lexeme
    /// ended at some byte. The mask computation uses it to continue a walk from where a
    /// cached lexeme ends, without replaying the bytes before. Counts as one frame of zero
    /// bytes.
    pub fn push_lexeme_end(
        &mut self,
        run: Run,
        end_state: StateId,
    ) -> Result<bool, RecognizeError> {
        self.push_end_of(run, end_state, true)
    }

    /// [`Recognizer::push_lexeme_end`] with the lexeme closed there: `run` does not go on,
    /// so what follows is the next lexemes' only. The mask computation walks a large
    /// subtree below a node where a lexeme that could go on ends (a number's digit) so,
    /// and takes the longer lexemes from the nodes below.
    pub fn push_lexeme_closed(
        &mut self,
        run: Run,
        end_state: StateId,
    ) -> Result<bool, RecognizeError> {
        self.push_end_of(run, end_state, false)
    }

    fn push_end_of(
        &mut self,
        run: Run,
        end_state: StateId,
        going_on: bool,
    ) -> Result<bool, RecognizeError> {
        let top = *self.c.frames.last().expect("at least one frame");
        let new_start = self.c.runs.len();
        debug_assert!(end_state.is_accepting());
        if going_on && end_state.can_continue() {
            self.c.runs.push(Run {
                state: end_state,
                ..run
            });
        }
        self.c.s.events.clear();
        self.c.s.events.push((run.set, run.lexeme));
        self.c.finish_push(&self.g, top, new_start, 0, None, false)
    }

    /// Feeds one whole token: its bytes (empty for special tokens) go through the lexer as
    /// usual, and where the grammar expects a token reference at the current position,
    /// `matches(reference)` says whether this token satisfies it. Pushes
    /// `max(1, bytes.len())` frames, or none when the token is rejected (`Ok(false)`).
    pub fn push_token(
        &mut self,
        bytes: &[u8],
        matches: &dyn Fn(TokenRefId) -> bool,
    ) -> Result<bool, RecognizeError> {
        let unit_set = self
            .c
            .current_set()
            .filter(|&s| self.c.sets[s.index()].tokens);
        let Some(unit_set) = unit_set else {
            // A token without bytes (a special token) can only match a token reference.
            if bytes.is_empty() {
                return Ok(false);
            }
            return self.push_bytes_all_or_nothing(bytes);
        };
        // The byte branch may die inside the token while the token branch lives, so the
        // intermediate frames may be empty.
        let n = bytes.len();
        for (i, &b) in bytes.iter().enumerate() {
            let top = *self.c.frames.last().expect("at least one frame");
            let new_start = self.c.step_runs(&self.g, top, b);
            let last = i + 1 == n;
            let unit = last.then_some((unit_set, matches));
            match self.c.finish_push(&self.g, top, new_start, 1, unit, !last) {
                Ok(true) => {}
                Ok(false) => {
                    self.pop(i);
                    return Ok(false);
                }
                Err(e) => {
                    self.pop(i);
                    return Err(e);
                }
            }
        }
        if n == 0 {
            let top = *self.c.frames.last().expect("at least one frame");
            self.c.s.events.clear();
            let new_start = self.c.runs.len();
            return self.c.finish_push(
                &self.g,
                top,
                new_start,
                0,
                Some((unit_set, matches)),
                false,
            );
        }
        Ok(true)
    }

    /// Pushes all of `bytes` or none of them.
    pub fn push_bytes_all_or_nothing(&mut self, bytes: &[u8]) -> Result<bool, RecognizeError> {
        for (i, &b) in bytes.iter().enumerate() {
            match self.push_byte(b) {
                Ok(true) => {}
                other => {
                    self.pop(i);
                    return other;
                }
            }
        }
        Ok(true)
    }
}

impl Chart {
    /// Steps the runs of frame `top` by `byte`: survivors are appended to `self.runs` (from
    /// the returned index on), completions go to `self.s.events`.
    #[inline]
    pub(super) fn step_runs(&mut self, g: &Grammar, top: Frame, byte: u8) -> usize {
        let start = top.runs_start as usize;
        let end = self.runs.len();
        self.s.events.clear();
        let step = |runs: &mut Vec<Run>, events: &mut Vec<(SetIdx, LexemeId)>, r: Run| {
            let dfa = &g.lexemes[r.lexeme.0 as usize].dfa();
            let s = dfa.next(r.state, byte);
            if s == DEAD {
                return;
            }
            if s.is_accepting() {
                events.push((r.set, r.lexeme));
            }
            if s.can_continue() {
                runs.push(Run { state: s, ..r });
            }
        };
        for i in start..end {
            let r = self.runs[i];
            if r.lexeme == PENDING {
                let info = &self.sets[r.set.index()];
                if info.first[byte as usize / 64] >> (byte % 64) & 1 == 0 {
                    continue;
                }
                for k in info.lexemes.0..info.lexemes.1 {
                    let l = self.set_lex[k as usize];
                    let state = g.lexemes[l.0 as usize].dfa().start();
                    step(
                        &mut self.runs,
                        &mut self.s.events,
                        Run {
                            set: r.set,
                            lexeme: l,
                            state,
                        },
                    );
                }
            } else {
                step(&mut self.runs, &mut self.s.events, r);
            }
        }
        end
    }

    /// Ends a push whose stepped runs start at `new_start` and whose completions are in
    /// `self.s.events`.
    pub(super) fn finish_push(
        &mut self,
        g: &Grammar,
        prev: Frame,
        new_start: usize,
        bytes: u64,
        unit: Option<(SetIdx, &dyn Fn(TokenRefId) -> bool)>,
        allow_empty: bool,
    ) -> Result<bool, RecognizeError> {
        if self.s.events.is_empty()
            && unit.is_none()
            && self.runs.len() == new_start
            && !allow_empty
        {
            return Ok(false);
        }
        if !self.keep_history && unit.is_none() {
            self.drop_unreferenced_set(prev, new_start);
        }
        let built = if !self.s.events.is_empty() || unit.is_some() {
            match self.build_set(g, unit, prev.pos + bytes) {
                Ok(b) => b,
                Err(e) => {
                    self.runs.truncate(new_start);
                    return Err(e);
                }
            }
        } else {
            false
        };
        if !built && self.runs.len() == new_start && !allow_empty {
            return Ok(false);
        }
        if self.runs.len() - new_start > g.limits.max_lexer_runs {
            let value = self.runs.len() - new_start;
            self.runs.truncate(new_start);
            if built {
                self.drop_sets_after(prev);
            }
            return Err(RecognizeError::limit(
                "lexer runs alive at one position",
                value,
                "max_lexer_runs",
                g.limits.max_lexer_runs,
            ));
        }
        let frame = Frame {
            runs_start: new_start as u32,
            sets_len: self.sets.len() as u32,
            items_len: self.items.len() as u32,
            leo_len: self.leo.len() as u32,
            set_lex_len: self.set_lex.len() as u32,
            new_set: built,
            pos: prev.pos + bytes,
        };
        if self.keep_history {
            self.frames.push(frame);
        } else {
            *self.frames.last_mut().expect("at least one frame") = frame;
            self.compact_runs();
            if self.sets.len() >= self.collect_at {
                self.collect_sets(g);
                // What stays after a collection is the input's open structure: its depth.
                if self.sets.len() > g.limits.max_open_sets {
                    return Err(RecognizeError::limit(
                        "Earley sets kept open (the input's nesting)",
                        self.sets.len(),
                        "max_open_sets",
                        g.limits.max_open_sets,
                    ));
                }
            }
        }
        Ok(true)
    }
}

//! Post-processing of a split stream: events for the answer (`delta`), the reasoning, tool
//! calls, and one `final` event with statistics.
//!
//! Each option is a streaming stage with its own small state, fed characters in order, so
//! the result does not depend on how the stream was chunked:
//! - a reasoning budget: after `reasoning_max_tokens` reasoning words, the rest of the
//!   reasoning is treated as answer (the forced transition);
//! - a service-token filter: stray `<|...|>` markers are removed from the answer;
//! - n-gram suppression: an n-gram that immediately repeats the previous one (within a
//!   window of words) is dropped;
//! - whitespace collapse: a run of the same whitespace character becomes one; different
//!   characters are kept, so words are never glued;
//! - leak detection: the start of the (dropped) reasoning appearing in the answer.
//!
//! Token counts are words (whitespace-separated), unless the caller counts model tokens
//! ([`PostProcessor::push_tokens`]).

use super::{SplitEvent, Splitter, Stop, ToolCallEvent};

/// Options. The defaults clean up what a user is shown; [`PostprocOptions::passthrough`]
/// changes nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct PostprocOptions {
    /// Reasoning words (or tokens) before the forced transition to the answer. Default 256.
    pub reasoning_max_tokens: Option<usize>,
    /// Leave the reasoning text out of the final event. Default true.
    pub drop_from_history: bool,
    /// `(n, window)`: drop an n-gram that repeats the one just before it. Default (3, 128).
    pub ngram: Option<(usize, usize)>,
    /// Collapse runs of the same whitespace character. Default true.
    pub collapse_whitespace: bool,
    /// Remove `<|...|>` service tokens from the answer. Default true.
    pub filter_service_tokens: bool,
    /// How many leading characters of the reasoning count as a leak if found in the answer.
    /// Default 24.
    pub leak_prefix: usize,
}

impl Default for PostprocOptions {
    fn default() -> PostprocOptions {
        PostprocOptions {
            reasoning_max_tokens: Some(256),
            drop_from_history: true,
            ngram: Some((3, 128)),
            collapse_whitespace: true,
            filter_service_tokens: true,
            leak_prefix: 24,
        }
    }
}

impl PostprocOptions {
    /// Every stage off: the splitter's output as is.
    pub fn passthrough() -> PostprocOptions {
        PostprocOptions {
            reasoning_max_tokens: None,
            drop_from_history: false,
            ngram: None,
            collapse_whitespace: false,
            filter_service_tokens: false,
            leak_prefix: 24,
        }
    }
}

/// The statistics of the final event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FinalStats {
    /// Reasoning words, or with [`PostProcessor::push_tokens`] the model tokens that added
    /// reasoning text.
    pub reasoning_tokens: usize,
    /// Answer words, or with [`PostProcessor::push_tokens`] the model tokens that added
    /// answer text.
    pub final_tokens: usize,
    /// reasoning / (reasoning + final); 0 when both are 0.
    pub reasoning_ratio: f64,
    /// The reasoning's first [`PostprocOptions::leak_prefix`] characters (trimmed; at least
    /// 12 of them, or all if `leak_prefix` is smaller) appear in the answer.
    pub leak_detected: bool,
    /// `None` when `drop_from_history` is on.
    pub reasoning_text: Option<String>,
    /// Why the stream asked to stop; `None` when it just ended.
    pub stop: Option<Stop>,
}

/// A post-processed event.
#[derive(Clone, Debug, PartialEq)]
pub enum PostEvent {
    /// Answer text, after the stages (reasoning past the budget included).
    Delta(String),
    /// Reasoning text, after the stages.
    Reasoning(String),
    /// A tool-call event from the splitter, unchanged.
    ToolCall(ToolCallEvent),
    /// The last event, from [`PostProcessor::finish`].
    Final(FinalStats),
}

/// Removes `<|name|>` tokens (name: ASCII letters, digits, `_`), holding back a possible
/// one.
#[derive(Clone, Debug, Default)]
struct ServiceFilter {
    held: String,
}

impl ServiceFilter {
    fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            self.push_char(c, out);
        }
    }

    fn push_char(&mut self, c: char, out: &mut String) {
        if self.held.is_empty() {
            if c == '<' {
                self.held.push(c);
            } else {
                out.push(c);
            }
            return;
        }
        let h = self.held.as_str();
        let name_chars = h.len() > 2;
        let ok = if h == "<" {
            c == '|'
        } else if name_chars && h.ends_with('|') {
            c == '>'
        } else {
            c.is_ascii_alphanumeric() || c == '_' || (c == '|' && name_chars)
        };
        if ok && self.held.len() < 64 {
            self.held.push(c);
            if self.held.ends_with("|>") {
                self.held.clear(); // `<|name|>`: a service token, dropped
            }
        } else {
            // Not a service token: release the '<' and read the rest again.
            let rest = self.held.split_off(1);
            self.held.clear();
            out.push('<');
            for r in rest.chars().chain([c]) {
                self.push_char(r, out);
            }
        }
    }

    fn finish(&mut self, out: &mut String) {
        out.push_str(&std::mem::take(&mut self.held));
    }
}

/// Drops an n-gram of words that immediately repeats the previous n-gram.
#[derive(Clone, Debug)]
struct NgramFilter {
    n: usize,
    window: usize,
    /// Emitted words, most recent last (at most `window`).
    history: Vec<String>,
    /// Complete words (with their trailing whitespace) not yet emitted.
    pending: Vec<(String, String)>,
    /// The word being read, and whitespace after it.
    word: String,
    space: String,
    /// Whitespace before the first word.
    lead: String,
}

impl NgramFilter {
    fn new(n: usize, window: usize) -> NgramFilter {
        NgramFilter {
            n: n.max(1),
            window: window.max(2 * n.max(1)),
            history: Vec::new(),
            pending: Vec::new(),
            word: String::new(),
            space: String::new(),
            lead: String::new(),
        }
    }

    fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            if c.is_whitespace() {
                if self.word.is_empty() {
                    if self.pending.is_empty() && self.history.is_empty() {
                        self.lead.push(c);
                    } else if let Some(last) = self.pending.last_mut() {
                        last.1.push(c);
                    } else {
                        out.push(c);
                    }
                } else {
                    self.space.push(c);
                }
            } else {
                if !self.space.is_empty() {
                    self.complete_word(out);
                }
                self.word.push(c);
            }
        }
    }

    fn complete_word(&mut self, out: &mut String) {
        out.push_str(&std::mem::take(&mut self.lead));
        let w = std::mem::take(&mut self.word);
        let s = std::mem::take(&mut self.space);
        self.pending.push((w, s));
        let n = self.n;
        // Compare the last n words with the n before them (pending words after history).
        let words: Vec<&str> = self
            .history
            .iter()
            .map(String::as_str)
            .chain(self.pending.iter().map(|p| p.0.as_str()))
            .collect();
        if words.len() >= 2 * n
            && self.pending.len() >= n
            && words[words.len() - n..] == words[words.len() - 2 * n..words.len() - n]
        {
            self.pending.truncate(self.pending.len() - n);
        }
        // Words that can no longer start a repeat are emitted.
        while self.pending.len() >= n {
            let (w, s) = self.pending.remove(0);
            out.push_str(&w);
            out.push_str(&s);
            self.history.push(w);
            if self.history.len() > self.window {
                self.history.remove(0);
            }
        }
    }

    fn finish(&mut self, out: &mut String) {
        if !self.word.is_empty() {
            self.complete_word(out);
        }
        out.push_str(&std::mem::take(&mut self.lead));
        for (w, s) in self.pending.drain(..) {
            out.push_str(&w);
            out.push_str(&s);
        }
    }
}

/// Collapses a run of the same whitespace character into one.
#[derive(Clone, Debug, Default)]
struct Collapse {
    last: Option<char>,
}

impl Collapse {
    fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            if c.is_whitespace() && self.last == Some(c) {
                continue;
            }
            self.last = Some(c);
            out.push(c);
        }
    }
}

/// One channel's pipeline: service filter, n-gram filter, collapse.
#[derive(Clone, Debug)]
struct Pipeline {
    service: Option<ServiceFilter>,
    ngram: Option<NgramFilter>,
    collapse: Option<Collapse>,
}

impl Pipeline {
    fn new(o: &PostprocOptions, service: bool) -> Pipeline {
        Pipeline {
            service: (service && o.filter_service_tokens).then(ServiceFilter::default),
            ngram: o.ngram.map(|(n, w)| NgramFilter::new(n, w)),
            collapse: o.collapse_whitespace.then(Collapse::default),
        }
    }

    fn run(&mut self, text: &str, finish: bool) -> String {
        let mut a = String::new();
        match &mut self.service {
            Some(s) => {
                s.push(text, &mut a);
                if finish {
                    s.finish(&mut a);
                }
            }
            None => a.push_str(text),
        }
        let mut b = String::new();
        match &mut self.ngram {
            Some(g) => {
                g.push(&a, &mut b);
                if finish {
                    g.finish(&mut b);
                }
            }
            None => b = a,
        }
        match &mut self.collapse {
            Some(c) => {
                let mut out = String::new();
                c.push(&b, &mut out);
                out
            }
            None => b,
        }
    }
}

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

/// A splitter with post-processing. See the module docs.
#[derive(Debug)]
pub struct PostProcessor<S: Splitter> {
    splitter: S,
    opts: PostprocOptions,
    content: Pipeline,
    reasoning: Pipeline,
    /// Reasoning words seen (for the budget), and whether the last char was in a word.
    reasoning_words: usize,
    in_word: bool,
    over_budget: bool,
    /// Model tokens counted by `push_tokens` (None: count words).
    token_counts: Option<(usize, usize)>,
    all_content: String,
    all_reasoning: String,
    stop: Option<Stop>,
    finished: bool,
}

impl<S: Splitter> PostProcessor<S> {
    /// Post-processes what `splitter` produces with the stages `opts` turns on.
    pub fn new(splitter: S, opts: PostprocOptions) -> PostProcessor<S> {
        PostProcessor {
            splitter,
            content: Pipeline::new(&opts, true),
            reasoning: Pipeline::new(&opts, false),
            opts,
            reasoning_words: 0,
            in_word: false,
            over_budget: false,
            token_counts: None,
            all_content: String::new(),
            all_reasoning: String::new(),
            stop: None,
            finished: false,
        }
    }

    /// The splitter it reads from.
    pub fn splitter(&self) -> &S {
        &self.splitter
    }

    /// Whether the stream asked to stop (later pushes are ignored).
    pub fn stopped(&self) -> bool {
        self.stop.is_some()
    }

    /// Whether the reasoning budget was used up (the caller may force the end of
    /// reasoning in the model, e.g. by appending `</think>`).
    pub fn reasoning_budget_exhausted(&self) -> bool {
        self.over_budget
    }

    /// Feeds text; returns the events it produced.
    pub fn push(&mut self, text: &str) -> Vec<PostEvent> {
        let mut events = Vec::new();
        if self.finished || self.stop.is_some() {
            return events;
        }
        self.stop = self.splitter.process(text);
        self.drain(&mut events, false);
        events
    }

    /// Feeds one model token's text, counting model tokens instead of words.
    pub fn push_tokens(&mut self, text: &str) -> Vec<PostEvent> {
        let before = (self.all_reasoning.len(), self.all_content.len());
        let events = self.push(text);
        let counts = self.token_counts.get_or_insert((0, 0));
        counts.0 += usize::from(self.all_reasoning.len() > before.0);
        counts.1 += usize::from(self.all_content.len() > before.1);
        events
    }

    /// The end of the stream: remaining events and the final one.
    pub fn finish(&mut self) -> Vec<PostEvent> {
        let mut events = Vec::new();
        if self.finished {
            return events;
        }
        if self.stop.is_none() {
            self.splitter.finish();
        }
        self.drain(&mut events, true);
        self.finished = true;
        let (rt, ft) = self
            .token_counts
            .unwrap_or((words(&self.all_reasoning), words(&self.all_content)));
        let prefix: String = self
            .all_reasoning
            .trim()
            .chars()
            .take(self.opts.leak_prefix)
            .collect();
        let leak = prefix.chars().count() >= self.opts.leak_prefix.min(12)
            && !prefix.is_empty()
            && self.all_content.contains(&prefix);
        if leak {
            tracing::warn!("reasoning leaked into the answer");
        }
        events.push(PostEvent::Final(FinalStats {
            reasoning_tokens: rt,
            final_tokens: ft,
            reasoning_ratio: if rt + ft == 0 {
                0.0
            } else {
                rt as f64 / (rt + ft) as f64
            },
            leak_detected: leak,
            reasoning_text: (!self.opts.drop_from_history).then(|| self.all_reasoning.clone()),
            stop: self.stop,
        }));
        events
    }

    /// The splitter's events since the last drain, in stream order, through the stages;
    /// `finish` flushes what the stages hold back.
    fn drain(&mut self, events: &mut Vec<PostEvent>, finish: bool) {
        for e in self.splitter.take_events() {
            match e {
                SplitEvent::Reasoning(r) => {
                    let (kept, overflow) = self.budget(&r);
                    self.emit_reasoning(&kept, false, events);
                    self.emit_content(&overflow, false, events);
                }
                SplitEvent::Content(c) => self.emit_content(&c, false, events),
                SplitEvent::Tool(t) => events.push(PostEvent::ToolCall(t)),
            }
        }
        if finish {
            self.emit_reasoning("", true, events);
            self.emit_content("", true, events);
        }
    }

    /// Reasoning text split at the reasoning budget: what stays reasoning, and what comes
    /// after the last allowed word (answer from then on).
    fn budget(&mut self, reasoning: &str) -> (String, String) {
        let mut kept = String::new();
        let mut content = String::new();
        for c in reasoning.chars() {
            if self.over_budget {
                content.push(c);
                continue;
            }
            if c.is_whitespace() {
                if self.in_word {
                    self.in_word = false;
                    self.reasoning_words += 1;
                    if self
                        .opts
                        .reasoning_max_tokens
                        .is_some_and(|m| self.reasoning_words >= m)
                    {
                        self.over_budget = true;
                        content.push(c);
                        continue;
                    }
                }
            } else {
                self.in_word = true;
            }
            kept.push(c);
        }
        (kept, content)
    }

    fn emit_reasoning(&mut self, text: &str, finish: bool, events: &mut Vec<PostEvent>) {
        let r = self.reasoning.run(text, finish);
        if !r.is_empty() {
            self.all_reasoning.push_str(&r);
            events.push(PostEvent::Reasoning(r));
        }
    }

    fn emit_content(&mut self, text: &str, finish: bool, events: &mut Vec<PostEvent>) {
        let d = self.content.run(text, finish);
        if !d.is_empty() {
            self.all_content.push_str(&d);
            events.push(PostEvent::Delta(d));
        }
    }
}

#[cfg(test)]
mod tests;

//! Resource limits. Every one is configuration with a documented default; exceeding one is a
//! typed error ([`crate::ErrorKind::Limit`] at compile time, [`crate::RecognizeError::Limit`]
//! while parsing), never a hang or a crash.

/// Limits on grammar compilation and on the recognizer's work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of parentheses and quantifiers in a grammar expression. Recursive
    /// walks over the AST are bounded by it. Default 200.
    pub max_nesting_depth: u32,
    /// Most symbols over all productions after expanding repetitions (`x{m,n}` of a
    /// non-regular `x` is copied `n` times), and the most "units" a repetition may expand to
    /// inside a lexeme. Default 1,000,000.
    pub max_grammar_size: usize,
    /// Most bytes for one lexeme's NFA and DFA while it is built (regex-automata's size
    /// limits). Default 32 MiB.
    pub max_lexeme_bytes: usize,
    /// Most dotted items over all rules' precomputed prediction closures. Default 4,000,000.
    pub max_prediction_items: usize,
    /// Most Earley items in one Earley set. Default 100,000.
    pub max_items_per_set: usize,
    /// Most lexer runs (partial lexemes) alive at one position. Default 10,000.
    pub max_lexer_runs: usize,
    /// Most Earley items visited (scanned, completed, closed) for one byte. Bounds the
    /// cost of highly ambiguous grammars, where every lexeme end completes items from many
    /// sets; JSON visits a few dozen. Default 100,000.
    pub max_work_per_push: usize,
    /// Deepest chain of completions the shortest-completion search follows (the nesting
    /// of the parse it can close: budget completion and `finish_reason:
    /// budget_completed`). Deeper parses get no shortest completion. Each level is one
    /// frame of a recursive search, so raising it far needs a larger thread stack.
    /// Default 4,096.
    pub max_completion_depth: u32,
    /// Deepest nesting (in expression levels) of a regular rule inlined into its callers'
    /// lexemes; a deeper one stays a rule of its own. Bounds the recursion of the regex
    /// compiler; a rule left un-inlined costs Earley items instead of DFA steps.
    /// Default 400.
    pub max_inline_depth: u32,
    /// Most Earley sets a match without history (`corral match`, [`crate::StreamMatcher`])
    /// keeps open: the depth of the input's open structure (a JSON document's unclosed
    /// arrays and objects, each about 100 bytes of chart). Checked when unreachable sets
    /// are collected, so memory stays within about twice this many sets. Default 100,000.
    pub max_open_sets: usize,
    /// Most bytes one call of jump-forward (the adapter's `forced_bytes`) returns; the rest
    /// comes on the next call. Bounds the time of one call on grammars that force long
    /// literals. Default 4,096.
    pub max_forced_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_nesting_depth: 200,
            max_grammar_size: 1_000_000,
            max_lexeme_bytes: 32 << 20,
            max_prediction_items: 4_000_000,
            max_items_per_set: 100_000,
            max_lexer_runs: 10_000,
            max_work_per_push: 100_000,
            max_completion_depth: 4096,
            max_inline_depth: 400,
            max_open_sets: 100_000,
            max_forced_bytes: 4096,
        }
    }
}

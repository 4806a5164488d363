//! corral's Python module (`corral._corral`, re-exported by the `corral` package): the
//! tokenizer, grammars and matchers a serving engine's grammar backend needs, in the shape
//! of llguidance's and XGrammar's APIs.
//!
//! - `Tokenizer`: a `tokenizer.json` as corral's token space (the trie masks are walked
//!   over), with the model's logit width and end tokens. Its token-set cache is shared by
//!   every matcher on it: a grammar's states seen by one request are warm for the next
//!   request on the same `Grammar`, and for lexemes whose DFAs are built whole.
//! - `Grammar`: GBNF, JSON Schema or a regex, compiled; invalid input raises
//!   `GrammarError` (a `ValueError`) with corral's positioned message.
//! - `Matcher`: one generation's state: fill a bitmask row, accept tokens, roll back.
//!
//! Bitmasks are int32 arrays `[batch, ceil(vocab_size / 32)]`: bit `t % 32` of word
//! `t / 32` set means token `t` is allowed. Masks are computed with the GIL released;
//! `fill_next_token_bitmask_batch` computes a batch's rows with the engine's
//! `compute_masks` (in parallel from `corral_engine::PARALLEL_BATCH` rows).

/// mimalloc: corral allocates many small pieces (regex trees, grammar nodes), which the
/// system allocator serves about twice as slowly (a schema's compile: 2.5 ms -> 1.1 ms).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use corral_engine::{
    AdapterError, Constraint, MaskCache, MaskSlot, RobustConstrainedAdapter, compute_masks,
};
use corral_grammar::{CompileOptions, Grammar as CompiledGrammar};
use corral_schema::{JsonSchemaOptions, PropertyOrder, Whitespace};
use corral_trie::{FixedBitSet, TokenId, TokenSpace, Vocabulary};
use pyo3::create_exception;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;

create_exception!(
    _corral,
    GrammarError,
    PyValueError,
    "An invalid grammar, schema or regex; the message is corral's positioned error."
);

/// A tokenizer's vocabulary as corral's token space.
#[pyclass(frozen, module = "corral")]
struct Tokenizer {
    space: Arc<TokenSpace>,
    masks: Arc<MaskCache>,
}

#[pymethods]
impl Tokenizer {
    /// Loads `tokenizer.json`. `vocab_size`: the model's logit width (padded embeddings
    /// make it larger than the vocabulary); `eos_token_ids`: the tokens that end generation
    /// (default: the tokenizer's usual end token).
    #[staticmethod]
    #[pyo3(signature = (path, vocab_size=None, eos_token_ids=None))]
    fn from_file(
        path: &str,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Tokenizer> {
        let vocab = Vocabulary::from_tokenizer_json(path.as_ref())
            .map_err(|e| PyValueError::new_err(format!("{path}: {e}")))?;
        Tokenizer::build(vocab, vocab_size, eos_token_ids)
    }

    /// A tokenizer from its `tokenizer.json` text (a Hugging Face fast tokenizer's
    /// `backend_tokenizer.to_str()`).
    #[staticmethod]
    #[pyo3(signature = (json, vocab_size=None, eos_token_ids=None))]
    fn from_str(
        json: &str,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Tokenizer> {
        let hf = json
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| PyValueError::new_err(format!("not a tokenizer.json: {e}")))?;
        let vocab =
            Vocabulary::from_tokenizer(&hf).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Tokenizer::build(vocab, vocab_size, eos_token_ids)
    }

    /// Mask width: the model's logit count.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.space.width()
    }

    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.space.eos().iter().map(|t| t.0).collect()
    }
}

impl Tokenizer {
    fn build(
        vocab: Vocabulary,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Tokenizer> {
        if let Some(w) = vocab_size.filter(|&w| w < vocab.len()) {
            return Err(PyValueError::new_err(format!(
                "vocab_size {w} is smaller than the tokenizer's {} tokens",
                vocab.len()
            )));
        }
        let width = vocab_size.unwrap_or(vocab.len());
        let eos: Vec<TokenId> = match eos_token_ids {
            Some(ids) => {
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= width) {
                    return Err(PyValueError::new_err(format!(
                        "eos token {bad} is outside the vocabulary ({width} tokens)"
                    )));
                }
                ids.into_iter().map(TokenId).collect()
            }
            None => vocab.default_eos().into_iter().collect(),
        };
        let space = Arc::new(TokenSpace::new(vocab, Some(width), eos));
        let masks = MaskCache::new(space.clone());
        Ok(Tokenizer { space, masks })
    }
}

/// Generation's schema options with the Python API's arguments (see
/// `Grammar.from_json_schema`).
fn schema_options(
    any_order: bool,
    lenient: bool,
    whitespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<JsonSchemaOptions> {
    let mut opts = JsonSchemaOptions::for_generation().with_origin("schema");
    opts.lenient = lenient;
    if any_order {
        opts.property_order = PropertyOrder::Any;
    }
    if let Some(w) = whitespace {
        opts.whitespace = if let Ok(n) = w.extract::<u32>() {
            match n {
                0 => Whitespace::Compact,
                n => Whitespace::Flexible { max: n },
            }
        } else {
            match w.extract::<String>()?.as_str() {
                "compact" => Whitespace::Compact,
                "spaced" => Whitespace::Spaced,
                "lines" => Whitespace::Lines { max_indent: 20 },
                "free" => Whitespace::Flexible { max: 32 },
                other => {
                    return Err(PyValueError::new_err(format!(
                        "whitespace {other:?}: expected compact, spaced, lines, free or a number"
                    )));
                }
            }
        };
    }
    Ok(opts)
}

/// A JSON Schema's grammar as GBNF rules whose names all start with `prefix` (the start
/// rule is `{prefix}root`), to be placed in a larger grammar. Options as
/// `Grammar.from_json_schema`.
#[pyfunction]
#[pyo3(signature = (schema, prefix, any_order=false, whitespace=None))]
fn json_schema_gbnf(
    py: Python<'_>,
    schema: &str,
    prefix: &str,
    any_order: bool,
    whitespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let opts = schema_options(any_order, false, whitespace)?;
    let c = py
        .detach(|| corral_schema::compile_json_schema(schema, &opts).map_err(|e| e.to_string()))
        .map_err(grammar_error)?;
    let mut rules = c.rules.to_vec();
    for r in &mut rules {
        r.name = format!("{prefix}{}", r.name);
        prefix_refs(&mut r.body, prefix);
    }
    Ok(corral_grammar::ast::print_rules(&rules))
}

fn prefix_refs(e: &mut corral_grammar::ast::Expr, prefix: &str) {
    use corral_grammar::ast::ExprKind;
    match &mut e.kind {
        ExprKind::RuleRef(name) => *name = format!("{prefix}{name}"),
        ExprKind::Seq(v) | ExprKind::Alt(v) | ExprKind::And(v) => {
            v.iter_mut().for_each(|x| prefix_refs(x, prefix))
        }
        ExprKind::Repeat { inner, .. } => prefix_refs(inner, prefix),
        ExprKind::Group(x) | ExprKind::Not(x) => prefix_refs(x, prefix),
        ExprKind::Literal(_) | ExprKind::Class(_) | ExprKind::Any | ExprKind::Token(_) => {}
    }
}

/// A compiled grammar.
#[pyclass(frozen, module = "corral")]
struct Grammar {
    grammar: Arc<CompiledGrammar>,
}

fn grammar_error(e: impl std::fmt::Display) -> PyErr {
    GrammarError::new_err(e.to_string())
}

#[pymethods]
impl Grammar {
    /// GBNF (llama.cpp's dialect).
    #[staticmethod]
    #[pyo3(signature = (text, start="root"))]
    fn from_gbnf(py: Python<'_>, text: &str, start: &str) -> PyResult<Grammar> {
        let opts = CompileOptions::default().start(start).origin("grammar");
        let g = py
            .detach(|| corral_grammar::compile_gbnf(text, &opts).map_err(|e| e.to_string()))
            .map_err(grammar_error)?;
        Ok(Grammar { grammar: g })
    }

    /// A JSON Schema as JSON text (the package's wrapper also takes a dict). `any_order`:
    /// properties in any order; `lenient`: keywords a grammar cannot express are left out
    /// instead of refused; `whitespace`: `None` for the generation default (nothing or one
    /// space between tokens), `"compact"`, `"spaced"`, `"lines"` (a line break and up to 20
    /// spaces of indentation), `"free"` (up to 32 characters), or a number: 0 for compact,
    /// n for up to n characters.
    #[staticmethod]
    #[pyo3(signature = (schema, any_order=false, lenient=false, whitespace=None))]
    fn from_json_schema(
        py: Python<'_>,
        schema: &str,
        any_order: bool,
        lenient: bool,
        whitespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Grammar> {
        let opts = schema_options(any_order, lenient, whitespace)?;
        let c = py
            .detach(|| corral_schema::compile_json_schema(schema, &opts).map_err(|e| e.to_string()))
            .map_err(grammar_error)?;
        Ok(Grammar { grammar: c.grammar })
    }

    /// A regular expression the whole output matches.
    #[staticmethod]
    fn from_regex(py: Python<'_>, pattern: &str) -> PyResult<Grammar> {
        let opts = CompileOptions::default().origin("regex");
        let g = py
            .detach(|| corral_grammar::compile_regex(pattern, &opts).map_err(|e| e.to_string()))
            .map_err(grammar_error)?;
        Ok(Grammar { grammar: g })
    }
}

/// One generation's state under a grammar.
#[pyclass(module = "corral")]
struct Matcher {
    adapter: RobustConstrainedAdapter,
    mask: FixedBitSet,
    error: Option<String>,
}

/// A matcher in a batch of masks ([`corral_engine::compute_masks`]).
impl MaskSlot for Matcher {
    type Error = String;

    fn compute_mask(&mut self) -> Result<(), String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.adapter.is_finished() {
            // After the end token nothing more is allowed.
            self.mask.clear();
            return Ok(());
        }
        self.adapter.compute_mask(&mut self.mask).map_err(|e| {
            let m = e.to_string();
            self.error = Some(m.clone());
            m
        })
    }
}

/// A bitmask's memory: a writable, C-contiguous int32 array of `rows` x `cols`, on the CPU.
/// Read through numpy's `__array_interface__` or a torch tensor's `data_ptr()` (the
/// buffer protocol is not in the stable ABI before Python 3.11).
struct BitmaskView {
    ptr: usize,
    rows: usize,
}

impl BitmaskView {
    fn of(obj: &Bound<'_, PyAny>, words: usize) -> PyResult<BitmaskView> {
        let bad = |m: String| PyValueError::new_err(m);
        let (ptr, shape): (usize, Vec<usize>) = if let Ok(ai) = obj.getattr("__array_interface__") {
            let typestr: String = ai.get_item("typestr")?.extract()?;
            if typestr != "<i4" {
                return Err(bad(format!(
                    "the bitmask's dtype is {typestr}; expected int32"
                )));
            }
            let (ptr, readonly): (usize, bool) = ai.get_item("data")?.extract()?;
            if readonly {
                return Err(bad("the bitmask is read-only".into()));
            }
            let shape: Vec<usize> = ai.get_item("shape")?.extract()?;
            let strides = ai.get_item("strides")?;
            if !strides.is_none() {
                let strides: Vec<usize> = strides.extract()?;
                let dense: Vec<usize> = match shape.as_slice() {
                    [_, c] => vec![c * 4, 4],
                    _ => vec![4],
                };
                if strides != dense {
                    return Err(bad("the bitmask must be C-contiguous".into()));
                }
            }
            (ptr, shape)
        } else if obj.hasattr("data_ptr")? {
            let dtype = obj.getattr("dtype")?.str()?.to_string();
            if dtype != "torch.int32" {
                return Err(bad(format!(
                    "the bitmask's dtype is {dtype}; expected torch.int32"
                )));
            }
            let device = obj.getattr("device")?.getattr("type")?.str()?.to_string();
            if device != "cpu" {
                return Err(bad(format!(
                    "the bitmask is on {device}; fill a CPU tensor, then copy it"
                )));
            }
            if !obj.call_method0("is_contiguous")?.extract::<bool>()? {
                return Err(bad("the bitmask must be contiguous".into()));
            }
            let shape: Vec<usize> = obj.getattr("shape")?.extract()?;
            (obj.call_method0("data_ptr")?.extract()?, shape)
        } else {
            return Err(bad(
                "the bitmask must be a numpy array or a CPU torch tensor of int32".into(),
            ));
        };
        let rows = match shape.as_slice() {
            [rows, cols] if *cols == words => *rows,
            [cols] if *cols == words => 1,
            _ => {
                return Err(bad(format!(
                    "the bitmask's shape is {shape:?}; expected (batch, {words}) for this vocabulary"
                )));
            }
        };
        Ok(BitmaskView { ptr, rows })
    }

    fn check_row(&self, index: usize) -> PyResult<()> {
        if index >= self.rows {
            return Err(PyIndexError::new_err(format!(
                "bitmask row {index} out of range ({} rows)",
                self.rows
            )));
        }
        Ok(())
    }

    /// Writes `mask` as int32 words into row `index` (bit `t % 32` of word `t / 32`).
    fn write(&self, index: usize, words: usize, mask: &FixedBitSet) -> PyResult<()> {
        self.check_row(index)?;
        // Little-endian 64-bit blocks are the 32-bit words in order (bit t of the set is
        // bit t % 32 of word t / 32): the row is the blocks' bytes, then zeros.
        let blocks = mask.as_slice();
        let mut bytes = Vec::with_capacity(words * 4);
        for b in blocks {
            bytes.extend_from_slice(&(*b as u64).to_le_bytes());
        }
        bytes.resize(words * 4, 0);
        // SAFETY: `of` checked that `ptr` is a writable, C-contiguous int32 array of
        // `rows` x `words` elements on the CPU, and `index < rows`; the caller holds the GIL
        // and a reference to the array, so it stays alive and no Python code runs while
        // the row is copied in.
        unsafe {
            let base = (self.ptr as *mut u8).add(index * words * 4);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), base, words * 4);
        }
        Ok(())
    }
}

fn words(space: &TokenSpace) -> usize {
    space.width().div_ceil(32)
}

fn words_of(m: &Matcher) -> usize {
    words(m.adapter.constraint().space())
}

#[pymethods]
impl Matcher {
    #[new]
    fn new(grammar: &Grammar, tokenizer: &Tokenizer) -> Matcher {
        let c = Constraint::with_cache(grammar.grammar.clone(), &tokenizer.masks);
        let adapter = RobustConstrainedAdapter::new(c);
        let mask = adapter.empty_mask();
        Matcher {
            adapter,
            mask,
            error: None,
        }
    }

    /// Fills row `index` of `bitmask` with the tokens allowed next (the GIL is released
    /// while the mask is computed). An error (a resource limit) is sticky: see `error`.
    #[pyo3(signature = (bitmask, index=0))]
    fn fill_next_token_bitmask(
        &mut self,
        py: Python<'_>,
        bitmask: &Bound<'_, PyAny>,
        index: usize,
    ) -> PyResult<()> {
        let words = words(self.adapter.constraint().space());
        let view = BitmaskView::of(bitmask, words)?;
        view.check_row(index)?;
        py.detach(|| self.compute_mask())
            .map_err(PyValueError::new_err)?;
        view.write(index, words, &self.mask)
    }

    /// Takes token `t`: `True`, or `False` (and no change) if the grammar does not allow
    /// it here.
    fn accept_token(&mut self, token: u32) -> bool {
        if self.error.is_some() {
            return false;
        }
        match self.adapter.step_with_token(TokenId(token)) {
            Ok(()) => true,
            Err(AdapterError::TokenNotAllowed { .. } | AdapterError::Finished) => false,
            Err(AdapterError::UnknownToken { .. }) => false,
            Err(e) => {
                self.error = Some(e.to_string());
                false
            }
        }
    }

    /// How many of `tokens`, from the start, would be accepted (the state is unchanged).
    fn validate_tokens(&mut self, tokens: Vec<u32>) -> usize {
        let mut n = 0;
        for &t in &tokens {
            if !self.accept_token(t) {
                break;
            }
            n += 1;
        }
        let _ = self.adapter.rollback(n);
        n
    }

    /// Undoes the last `n` accepted tokens.
    fn rollback(&mut self, n: usize) -> PyResult<()> {
        self.adapter
            .rollback(n)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Back to the start of the output (the caches stay warm).
    fn reset(&mut self) {
        self.adapter = RobustConstrainedAdapter::new(self.adapter.constraint().clone());
        self.error = None;
    }

    /// An independent copy of this state (caches shared).
    fn fork(&self) -> Matcher {
        Matcher {
            adapter: self.adapter.fork(),
            mask: self.mask.clone(),
            error: self.error.clone(),
        }
    }

    /// The end token was taken, or the grammar is complete and admits nothing more.
    fn is_terminated(&mut self) -> bool {
        if self.adapter.is_finished() {
            return true;
        }
        if !self.adapter.is_accepting() || self.compute_mask().is_err() {
            return false;
        }
        let eos = self.adapter.constraint().space().eos();
        self.mask.ones().all(|t| eos.contains(&TokenId(t as u32)))
    }

    /// An end token was taken: the output is over.
    fn is_finished(&self) -> bool {
        self.adapter.is_finished()
    }

    /// The output so far is complete (an end token would be allowed).
    fn is_accepting(&self) -> bool {
        self.adapter.is_accepting()
    }

    /// The tokens of the continuation the grammar forces (jump-forward); empty if the next
    /// byte is free.
    fn forced_tokens(&mut self) -> Vec<u32> {
        match self.adapter.forced_tokens() {
            Ok(t) => t.into_iter().map(|t| t.0).collect(),
            Err(e) => {
                self.error = Some(e.to_string());
                Vec::new()
            }
        }
    }

    /// The sticky error, if a limit was hit.
    #[getter]
    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

/// Fills row `indices[i]` (default `i`) of `bitmask` for each matcher, in parallel, with
/// the GIL released.
#[pyfunction]
#[pyo3(signature = (matchers, bitmask, indices=None))]
fn fill_next_token_bitmask_batch(
    py: Python<'_>,
    matchers: Vec<PyRefMut<'_, Matcher>>,
    bitmask: &Bound<'_, PyAny>,
    indices: Option<Vec<usize>>,
) -> PyResult<()> {
    let mut matchers = matchers;
    let Some(first) = matchers.first() else {
        return Ok(());
    };
    let words = words(first.adapter.constraint().space());
    if let Some(m) = matchers.iter().find(|m| words_of(m) != words) {
        return Err(PyValueError::new_err(format!(
            "matchers of different vocabularies in one batch ({} and {} words per row)",
            words,
            words_of(m)
        )));
    }
    let view = BitmaskView::of(bitmask, words)?;
    let rows = view.rows;
    let indices = indices.unwrap_or_else(|| (0..matchers.len()).collect());
    if indices.len() != matchers.len() {
        return Err(PyValueError::new_err(format!(
            "{} matchers but {} indices",
            matchers.len(),
            indices.len()
        )));
    }
    if let Some(bad) = indices.iter().find(|&&i| i >= rows) {
        return Err(PyIndexError::new_err(format!(
            "bitmask row {bad} out of range ({rows} rows)"
        )));
    }
    let mut refs: Vec<&mut Matcher> = matchers.iter_mut().map(|m| &mut **m).collect();
    let results: Vec<Result<(), String>> = py.detach(|| compute_masks(&mut refs));
    for ((m, &i), r) in refs.iter().zip(&indices).zip(results) {
        r.map_err(PyValueError::new_err)?;
        view.write(i, words, &m.mask)?;
    }
    Ok(())
}

#[pymodule]
fn _corral(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tokenizer>()?;
    m.add_class::<Grammar>()?;
    m.add_class::<Matcher>()?;
    m.add_function(wrap_pyfunction!(fill_next_token_bitmask_batch, m)?)?;
    m.add_function(wrap_pyfunction!(json_schema_gbnf, m)?)?;
    m.add("GrammarError", m.py().get_type::<GrammarError>())?;
    Ok(())
}

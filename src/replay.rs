//! `corral replay`: tokenize a text (canonically, or at random into any tokens that exist)
//! and replay the tokens through the constraint, timing every mask. The last line of
//! standard output is one JSON object; tooling relies on its field names.

use crate::Failure;
use crate::source::ConstraintArgs;
use anyhow::{Context, anyhow};
use clap::ValueEnum;
use corral::engine::Constraint;
use corral::engine::replay::{replay, replay_observed, stats};
use corral::grammar::MatchOutcome;
use corral::trie::{TokenId, TokenSpace, Vocabulary, continuation_tokenizer};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tokenization {
    /// The tokenizer's own tokenization.
    Canonical,
    /// Random splits of the text into vocabulary tokens.
    Random,
}

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Hugging Face tokenizer.json.
    #[arg(long)]
    tokenizer: PathBuf,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// A file holding the text to tokenize and replay (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    #[arg(long, value_enum, default_value = "canonical")]
    tokenization: Tokenization,
    /// Runs (random tokenization: each run a new segmentation).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seed for random tokenizations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// End-of-sequence token id (default: what generation_config.json or
    /// tokenizer_config.json beside the tokenizer names, else the family's usual one).
    #[arg(long)]
    eos: Option<u32>,
    /// Write every computed mask to FILE, one JSON line each: `run`, `step` (tokens
    /// consumed before it), `token` (the run's next token; null after the last) and `words`
    /// (hex of the mask as little-endian 32-bit words: bit t % 32 of word t / 32 set =
    /// token t allowed, the layout of the Python package's bitmasks).
    #[arg(long, value_name = "FILE")]
    masks: Option<PathBuf>,
}

pub fn run(args: &ReplayArgs) -> Result<(), Failure> {
    let tok = tokenizers::Tokenizer::from_file(&args.tokenizer)
        .map_err(|e| anyhow!("cannot load tokenizer {}: {e}", args.tokenizer.display()))?;
    let vocab = Vocabulary::from_tokenizer(&tok).map_err(anyhow::Error::from)?;
    let eos = end_tokens(args, &vocab)?;
    let space = Arc::new(TokenSpace::new(vocab, None, eos));
    let t0 = Instant::now();
    // The text is a file: a JSON text may end with a line break (RFC 8259 whitespace).
    let mut constraint = args.constraint.clone();
    constraint.schema.outer_whitespace = true;
    let grammar = constraint.require()?.grammar;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let text = crate::input::read(&args.text, "text")?;
    if args.runs == 0 {
        Err(anyhow!("--runs must be at least 1"))?;
    }

    let runs = token_runs(args, &tok, &space, &text)?;

    let constraint = Constraint::new(grammar.clone(), space.clone());
    let report = match &args.masks {
        None => replay(&constraint, &runs),
        Some(path) => write_masks(&constraint, &runs, path)?,
    };
    let corral::engine::replay::Summary { mean, p50, p99 } = stats(&report.mask_us);
    let first_reject = match &report.first_reject {
        Some(r) => {
            // The first byte of the text the grammar cannot take.
            let byte_offset =
                match corral::grammar::match_bytes(&grammar, &text).map_err(anyhow::Error::from)? {
                    MatchOutcome::Rejected { offset, .. } => offset as usize,
                    _ => r.output_bytes,
                };
            serde_json::json!({"run": r.run, "token_index": r.token_index, "byte_offset": byte_offset})
        }
        None => serde_json::Value::Null,
    };
    let out = serde_json::json!({
        "tokens": report.tokens,
        "runs": report.runs,
        "rejected": report.first_reject.is_some(),
        "first_reject": first_reject,
        "eos_allowed_at_end": report.eos_allowed_at_end,
        "mask_us": {"mean": round2(mean), "p50": round2(p50), "p99": round2(p99)},
        "compile_ms": round2(compile_ms),
        "text_bytes": text.len(),
        "tokenization": format!("{:?}", args.tokenization).to_lowercase(),
        "cached_states": constraint.cached_states(),
    });
    crate::outln!("{out}")?;
    if report.first_reject.is_some() {
        return Err(Failure::NotInLanguage);
    }
    Ok(())
}

/// The end tokens: `--eos`, else what the configuration beside the tokenizer names, else
/// the family's usual one.
fn end_tokens(args: &ReplayArgs, vocab: &Vocabulary) -> anyhow::Result<Vec<TokenId>> {
    let dir = args.tokenizer.parent().unwrap_or(std::path::Path::new("."));
    match args.eos {
        Some(id) if id as usize >= vocab.len() => Err(anyhow!(
            "--eos {id} is outside the vocabulary ({} tokens)",
            vocab.len()
        )),
        Some(id) => Ok(vec![TokenId(id)]),
        None => vocab
            .configured_eos(dir)
            .or_else(|| vocab.default_eos().map(|e| vec![e]))
            .ok_or_else(|| anyhow!(
                "the tokenizer has no usual end-of-sequence token and no generation_config.json or tokenizer_config.json beside it names one; pass --eos ID"
            )),
    }
}

/// The token sequences to replay: the canonical tokenization `--runs` times, or that many
/// random segmentations.
fn token_runs(
    args: &ReplayArgs,
    tok: &tokenizers::Tokenizer,
    space: &TokenSpace,
    text: &[u8],
) -> anyhow::Result<Vec<Vec<TokenId>>> {
    match args.tokenization {
        Tokenization::Canonical => {
            let s = std::str::from_utf8(text)
                .context("the text is not UTF-8, so it has no canonical tokenization")?;
            let enc = continuation_tokenizer(tok)
                .encode(s, false)
                .map_err(|e| anyhow!("tokenizing: {e}"))?;
            let ids = TokenId::all(enc.get_ids());
            if space.vocab().decode_bytes(&ids) != text {
                Err(anyhow!(
                    "the tokenizer does not reproduce the text byte for byte (it normalizes it); use --tokenization random"
                ))?;
            }
            Ok(vec![ids; args.runs])
        }
        Tokenization::Random => {
            let mut x = args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            (0..args.runs)
                .map(|_| {
                    space
                        .trie()
                        .random_segmentation(text, &mut next)
                        .ok_or_else(|| {
                            anyhow!("the text cannot be split into tokens of this vocabulary")
                        })
                })
                .collect()
        }
    }
}

/// Replays `runs`, writing each mask to `path` (see `ReplayArgs::masks`).
fn write_masks(
    constraint: &Arc<Constraint>,
    runs: &[Vec<TokenId>],
    path: &std::path::Path,
) -> anyhow::Result<corral::engine::replay::ReplayReport> {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let words = constraint.space().width().div_ceil(32);
    let mut hex = String::with_capacity(words * 8);
    let report = replay_observed(constraint, runs, |s| {
        hex.clear();
        let bytes = s
            .mask
            .as_slice()
            .iter()
            .flat_map(|b| (*b as u64).to_le_bytes());
        for b in bytes.chain(std::iter::repeat(0)).take(words * 4) {
            write!(hex, "{b:02x}").expect("writing to a String");
        }
        let line = serde_json::json!({
            "run": s.run,
            "step": s.step,
            "token": s.token.map(|t| t.0),
            "words": hex,
        });
        writeln!(out, "{line}")
    });
    let report = report.and_then(|r| out.flush().map(|()| r));
    report.with_context(|| format!("cannot write {}", path.display()))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

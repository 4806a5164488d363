//! The `corral` command-line tool: thin glue over the library crates.
//!
//! Exit codes of `corral match` (relied on by tooling; keep them stable):
//! 0 the input is in the language, 1 it is not, 2 the grammar or schema is invalid or the
//! check could not run (bad arguments, unreadable files, a resource limit).

/// mimalloc: corral allocates many small pieces (regex trees, grammar nodes), which the
/// system allocator serves about twice as slowly (a schema's compile: 2.5 ms -> 1.1 ms).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use corral::grammar::MatchOutcome;
use source::{ConstraintArgs, SchemaArgs};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "corral",
    version,
    about = "Grammar-constrained decoding engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Largest file or standard input read whole (a grammar, a schema, a prompt, a text to
    /// replay; `match` streams its input but keeps whole what a lenient schema validates).
    #[arg(long, global = true, default_value_t = input::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Check whether an input is in a grammar's language, or valid for a JSON Schema (exit 0
    /// yes, 1 no, 2 error).
    Match(MatchArgs),
    /// Print the GBNF grammar a JSON Schema compiles to.
    Schema(SchemaCmdArgs),
    /// Generate text with a model, constrained by a grammar or regex, streamed to stdout.
    Generate(generate::GenerateArgs),
    /// Split a model's raw output into content, reasoning and tool calls (JSON lines).
    Split(split::SplitArgs),
    /// Replay tokenizations of a text through the constraint (exit 0 all accepted, 1 a
    /// token was refused, 2 bad arguments or grammar).
    Replay(replay::ReplayArgs),
    /// Serve the model over HTTP with OpenAI's API (chat completions, completions) and
    /// structured output (`response_format`, `grammar`, `regex`, `structured_outputs`).
    Serve(serve::ServeArgs),
}

#[derive(clap::Args)]
struct MatchArgs {
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    input: String,
    /// Print nothing on standard output (the exit code says it all).
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(clap::Args)]
struct SchemaCmdArgs {
    /// JSON Schema file.
    schema: PathBuf,
    #[command(flatten)]
    options: SchemaArgs,
}

mod generate;
mod input;
mod position;
mod replay;
mod serve;
mod source;
mod split;

/// An error that decides the exit code.
pub(crate) enum Failure {
    /// Exit 1: a definite "no".
    NotInLanguage,
    /// Standard output cannot be written: a closed pipe exits quietly with 141 (as a
    /// process killed by SIGPIPE would), anything else (a full disk) says so and exits 2.
    Output(std::io::Error),
    /// Exit 2: anything else.
    Error(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Error(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::Output(e)
    }
}

/// Writes to standard output (flushed), returning a write error instead of panicking as
/// `print!` does.
pub(crate) fn write_out(args: std::fmt::Arguments) -> Result<(), Failure> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)?;
    o.flush()?;
    Ok(())
}

/// A writer that keeps its first error and drops what comes after it (a generation streams
/// on after standard output closes; the error is reported at the end).
pub(crate) struct Latch<W: std::io::Write> {
    w: W,
    pub error: Option<std::io::Error>,
}

impl<W: std::io::Write> Latch<W> {
    pub fn new(w: W) -> Latch<W> {
        Latch { w, error: None }
    }

    /// The first error, if any.
    pub fn result(&mut self) -> Result<(), Failure> {
        match self.error.take() {
            Some(e) => Err(Failure::Output(e)),
            None => Ok(()),
        }
    }
}

impl<W: std::io::Write> std::io::Write for Latch<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.error.is_none()
            && let Err(e) = self.w.write_all(buf)
        {
            self.error = Some(e);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.error.is_none()
            && let Err(e) = self.w.flush()
        {
            self.error = Some(e);
        }
        Ok(())
    }
}

/// `println!` through [`write_out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { corral::models::pin_thread_count() };
    let cli = Cli::parse();
    input::set_max(cli.max_input_bytes);
    let result = match cli.command {
        Command::Match(args) => run_match(&args),
        Command::Schema(args) => run_schema(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Split(args) => split::run(&args),
        Command::Serve(args) => serve::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::NotInLanguage) => ExitCode::from(1),
        Err(Failure::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::from(141)
        }
        Err(Failure::Output(e)) => {
            eprintln!("error: cannot write the output: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Error(e)) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes, `: `-separated, each cause left out when the message before it
/// already says it (errors that print their source in their own message).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run_schema(args: &SchemaCmdArgs) -> Result<(), Failure> {
    // The grammar a model generates under (`--whitespace` shows another).
    let mut options = args.options.clone();
    options.generation = true;
    let (_, compiled) = source::load_schema(&args.schema, &options)?;
    for d in &compiled.deferred {
        outln!(
            "# left to validation after generation: '{}' at #{} ({})",
            d.keyword,
            d.pointer,
            d.reason
        )?;
    }
    write_out(format_args!("{}", compiled.gbnf()))?;
    Ok(())
}

/// Bytes read from the input at a time by `corral match`.
const MATCH_CHUNK: usize = 1 << 20;

fn open_input(input: &str) -> Result<(String, Box<dyn Read>)> {
    if input == "-" {
        Ok(("<stdin>".into(), Box::new(std::io::stdin().lock())))
    } else {
        let f = std::fs::File::open(input).with_context(|| format!("cannot read input {input}"))?;
        Ok((input.to_string(), Box::new(f)))
    }
}

/// Reads into `buf` until it is full or the input ends; returns the bytes read.
fn fill(r: &mut dyn Read, buf: &mut [u8], name: &str) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read input {name}")),
        }
    }
    Ok(n)
}

/// `corral match`: the input is streamed through the grammar in chunks, never held whole
/// (unless a lenient schema left keywords to validate on the parsed value).
fn run_match(args: &MatchArgs) -> Result<(), Failure> {
    // A JSON text may have whitespace around its value (RFC 8259), a file a final newline.
    let mut constraint = args.constraint.clone();
    constraint.schema.outer_whitespace = true;
    let loaded = constraint.require()?;
    let deferred = loaded
        .schema
        .as_ref()
        .filter(|(_, compiled)| !compiled.deferred.is_empty());
    let (name, mut reader) = open_input(&args.input)?;
    let mut matcher = corral::grammar::StreamMatcher::new(loaded.grammar.clone());
    let mut position = position::Position::default();
    let mut whole = Vec::new();
    let mut buf = vec![0u8; MATCH_CHUNK];
    let outcome = loop {
        let n = fill(reader.as_mut(), &mut buf, &name)?;
        let chunk = &buf[..n];
        if n == 0 {
            break matcher.finish().map_err(|e| Failure::Error(e.into()))?;
        }
        let before = matcher.position();
        if let Some(rejected) = matcher.feed(chunk).map_err(|e| Failure::Error(e.into()))? {
            let at = (matcher.position() - before) as usize;
            position.advance(&chunk[..at]);
            // What follows the offending byte, for the message: the rest of this chunk and
            // a little more if the chunk ends right there.
            let mut after = chunk[at..].to_vec();
            if after.len() < 256 {
                let mut more = [0u8; 256];
                let k = fill(reader.as_mut(), &mut more, &name).unwrap_or(0);
                after.extend_from_slice(&more[..k]);
            }
            return report_rejection(args, &name, &rejected, &position, &after);
        }
        position.advance(chunk);
        if deferred.is_some() {
            if (whole.len() + chunk.len()) as u64 > input::max() {
                return Err(input::too_large(
                    "the input validated whole by a lenient schema",
                    &name,
                )
                .into());
            }
            whole.extend_from_slice(chunk);
        }
    };
    let size = matcher.position();
    match outcome {
        MatchOutcome::Accepted => {
            // Keywords left to validation (lenient schemas) are checked on the value.
            if let Some((schema, _)) = deferred {
                let value: serde_json::Value = serde_json::from_slice(&whole)
                    .map_err(|e| anyhow::anyhow!("{name}: not JSON: {e}"))?;
                let errors = corral::schema::validate::Validator::new(schema)
                    .map_err(anyhow::Error::from)?
                    .errors(&value);
                if !errors.is_empty() {
                    for e in &errors {
                        eprintln!("{name}: {e}");
                    }
                    if !args.quiet {
                        outln!(
                            "no match: the grammar accepts it, but {} schema error(s) remain",
                            errors.len()
                        )?;
                    }
                    return Err(Failure::NotInLanguage);
                }
            }
            if !args.quiet {
                outln!("match: {size} bytes accepted")?;
            }
            Ok(())
        }
        rejected @ MatchOutcome::Rejected { .. } => {
            report_rejection(args, &name, &rejected, &position, &[])
        }
        MatchOutcome::Incomplete { expected } => {
            let (line, col, _) = position.show(&[]);
            eprintln!(
                "{name}:{line}:{col}: byte offset {size}: input ends early{}",
                expected_suffix(&expected)
            );
            if !args.quiet {
                outln!("no match: input ends early at byte offset {size}")?;
            }
            Err(Failure::NotInLanguage)
        }
    }
}

/// The message for a byte the grammar refuses; `position` is just before it, `after` the
/// bytes from it on.
fn report_rejection(
    args: &MatchArgs,
    name: &str,
    outcome: &MatchOutcome,
    position: &position::Position,
    after: &[u8],
) -> Result<(), Failure> {
    let MatchOutcome::Rejected { offset, expected } = outcome else {
        return Err(Failure::Error(anyhow::anyhow!("not a rejection")));
    };
    let (line, col, shown) = position.show(after);
    let found = position::describe_byte(after);
    eprintln!(
        "{name}:{line}:{col}: byte offset {offset}: {found} cannot come here{}",
        expected_suffix(expected)
    );
    eprintln!("{shown}");
    if !args.quiet {
        outln!("no match: rejected at byte offset {offset} (line {line}, column {col})")?;
    }
    Err(Failure::NotInLanguage)
}

fn expected_suffix(expected: &[String]) -> String {
    if expected.is_empty() {
        return String::new();
    }
    const SHOWN: usize = 12;
    let mut list: Vec<&str> = expected.iter().take(SHOWN).map(String::as_str).collect();
    if expected.len() > SHOWN {
        list.push("...");
    }
    format!(": expected one of: {}", list.join(" | "))
}

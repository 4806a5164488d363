//! The `corral` command-line tool: thin glue over the library crates.
//!
//! Exit codes of `corral match` (relied on by tooling; keep them stable):
//! 0 the input is in the language, 1 it is not, 2 the grammar or schema is invalid or the
//! check could not run (bad arguments, unreadable files, a resource limit).

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
mod replay;
mod source;
mod split;

/// An error that decides the exit code.
pub(crate) enum Failure {
    /// Exit 1: a definite "no".
    NotInLanguage,
    /// Exit 2: anything else.
    Error(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Error(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Match(args) => run_match(&args),
        Command::Schema(args) => run_schema(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Split(args) => split::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::NotInLanguage) => ExitCode::from(1),
        Err(Failure::Error(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn read_input(input: &str) -> Result<(String, Vec<u8>)> {
    if input == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
        Ok(("<stdin>".into(), buf))
    } else {
        let buf = std::fs::read(input).with_context(|| format!("cannot read input {input}"))?;
        Ok((input.to_string(), buf))
    }
}

fn run_schema(args: &SchemaCmdArgs) -> Result<(), Failure> {
    let (_, compiled) = source::load_schema(&args.schema, &args.options)?;
    for d in &compiled.deferred {
        println!(
            "# left to validation after generation: '{}' at #{} ({})",
            d.keyword, d.pointer, d.reason
        );
    }
    print!("{}", compiled.gbnf);
    Ok(())
}

fn run_match(args: &MatchArgs) -> Result<(), Failure> {
    // A JSON text may have whitespace around its value (RFC 8259), a file a final newline.
    let mut constraint = args.constraint.clone();
    constraint.schema.outer_whitespace = true;
    let loaded = constraint.require()?;
    let (name, input) = read_input(&args.input)?;
    let outcome = corral::grammar::match_bytes(&loaded.grammar, &input)
        .map_err(|e| Failure::Error(e.into()))?;
    match outcome {
        MatchOutcome::Accepted => {
            // Keywords left to validation (lenient schemas) are checked on the value.
            if let Some((schema, compiled)) = &loaded.schema
                && !compiled.deferred.is_empty()
            {
                let value: serde_json::Value = serde_json::from_slice(&input)
                    .map_err(|e| anyhow::anyhow!("{name}: not JSON: {e}"))?;
                let errors = corral::schema::validate::Validator::new(schema)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .errors(&value);
                if !errors.is_empty() {
                    for e in &errors {
                        eprintln!("{name}: {e}");
                    }
                    if !args.quiet {
                        println!(
                            "no match: the grammar accepts it, but {} schema error(s) remain",
                            errors.len()
                        );
                    }
                    return Err(Failure::NotInLanguage);
                }
            }
            if !args.quiet {
                println!("match: {} bytes accepted", input.len());
            }
            Ok(())
        }
        MatchOutcome::Rejected { offset, expected } => {
            let (line, col, shown) = locate(&input, offset as usize);
            let found = describe_byte(&input, offset as usize);
            eprintln!(
                "{name}:{line}:{col}: byte offset {offset}: {found} cannot come here{}",
                expected_suffix(&expected)
            );
            eprintln!("{shown}");
            if !args.quiet {
                println!("no match: rejected at byte offset {offset} (line {line}, column {col})");
            }
            Err(Failure::NotInLanguage)
        }
        MatchOutcome::Incomplete { expected } => {
            let (line, col, _) = locate(&input, input.len());
            eprintln!(
                "{name}:{line}:{col}: byte offset {}: input ends early{}",
                input.len(),
                expected_suffix(&expected)
            );
            if !args.quiet {
                println!("no match: input ends early at byte offset {}", input.len());
            }
            Err(Failure::NotInLanguage)
        }
    }
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

fn describe_byte(input: &[u8], offset: usize) -> String {
    let b = input[offset];
    let rest = &input[offset..input.len().min(offset + 4)];
    match std::str::from_utf8(rest)
        .ok()
        .or_else(|| std::str::from_utf8(&rest[..rest.len().min(utf8_len(b))]).ok())
        .and_then(|s| s.chars().next())
    {
        Some(c) => format!("{c:?} (byte 0x{b:02x})"),
        None => format!("byte 0x{b:02x} (not valid UTF-8 here)"),
    }
}

fn utf8_len(b: u8) -> usize {
    match b {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// 1-based line and column (in characters) of byte `offset`, and the line with a caret,
/// cut to a window around the caret for long lines.
fn locate(input: &[u8], offset: usize) -> (usize, usize, String) {
    let offset = offset.min(input.len());
    let line_start = input[..offset]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line_end = input[offset..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map_or(input.len(), |i| offset + i);
    let line = input[..line_start].iter().filter(|&&b| b == b'\n').count() + 1;
    let before = String::from_utf8_lossy(&input[line_start..offset]);
    let after = String::from_utf8_lossy(&input[offset..line_end]);
    let col = before.chars().count() + 1;
    const WINDOW: usize = 60;
    let before_chars: Vec<char> = before.chars().collect();
    let skip = before_chars.len().saturating_sub(WINDOW);
    let shown_before: String = before_chars[skip..].iter().collect();
    let shown_after: String = after.chars().take(WINDOW).collect();
    let prefix = if skip > 0 { "..." } else { "" };
    let pad: String = format!("{prefix}{shown_before}")
        .chars()
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    (
        line,
        col,
        format!("{prefix}{shown_before}{shown_after}\n{pad}^"),
    )
}

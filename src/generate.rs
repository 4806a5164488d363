//! `corral generate`: a model decoding under a grammar, streamed to standard output.

use crate::Failure;
use crate::source::ConstraintArgs;
use crate::split::SplitFormat;
use anyhow::{Context, anyhow};
use corral::engine::Scope;
use corral::engine::{
    Cars, CarsOptions, GenerateError, SamplerMethod, SamplingOptions, SmcOptions,
};
use corral::split::{
    Format, GenericParser, HarmonyMarkers, HarmonyMode, HarmonyParser, Splitter, ToolCallEvent,
};
use corral::{CompileOptions, DeviceSpec, Emit, GenerateOptions, Model, Prompt};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The default model (SmolLM2-135M-Instruct, Q4_1), fetched by scripts/fetch-assets.
const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// A GGUF file, a safetensors folder, a Hub repo id (`owner/name`, or
    /// `owner/name:file.gguf`). Default: SmolLM2-135M-Instruct Q4_1, fetched if missing.
    #[arg(long, short = 'm')]
    model: Option<String>,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// Regular expression the whole output must match.
    #[arg(long, conflicts_with_all = ["grammar", "json_schema"])]
    regex: Option<String>,
    #[arg(long, short = 'p', required_unless_present = "prompt_file")]
    prompt: Option<String>,
    /// Read the prompt from a file (`-`: standard input), for prompts too long for an
    /// argument.
    #[arg(long, conflicts_with = "prompt")]
    prompt_file: Option<PathBuf>,
    #[arg(long)]
    system: Option<String>,
    /// Do not apply the model's chat template.
    #[arg(long)]
    raw: bool,
    /// Most tokens generated (at least 1).
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// 0 for greedy decoding.
    #[arg(long, default_value_t = 0.7, allow_negative_numbers = true)]
    temperature: f32,
    /// Default 0.95 (off with --sampler smc, which samples the whole tempered
    /// distribution).
    #[arg(long, allow_negative_numbers = true)]
    top_p: Option<f32>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long, allow_negative_numbers = true)]
    min_p: Option<f32>,
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// How the output is drawn: `plain` (each token under the mask), `smc` (sequential
    /// Monte Carlo: the model's own distribution restricted to the grammar, approached) or
    /// `cars` (adaptive rejection sampling: that distribution exactly, at a cost that
    /// varies with how often the model leaves the grammar); see docs/sampling.md.
    #[arg(long, value_enum, default_value = "plain")]
    sampler: SamplerArg,
    /// With --sampler smc: particles (1 to 64, default 8), decoded as one batch.
    #[arg(long)]
    particles: Option<usize>,
    /// With --sampler cars: most prefixes the model may run on (one forward pass each)
    /// before the draw gives up; default 4096.
    #[arg(long)]
    max_prefixes: Option<usize>,
    /// With --sampler smc: resample when the effective sample size falls below this
    /// fraction of the particles (default 0.5).
    #[arg(long, allow_negative_numbers = true)]
    ess_threshold: Option<f64>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Most positions (prompt and output) a sequence may hold, below the model's own
    /// (the GGUF file's context length): what bounds its KV cache's memory.
    #[arg(long)]
    ctx_size: Option<std::num::NonZeroUsize>,
    /// Print a JSON line of statistics on standard error at the end.
    #[arg(long)]
    stats: bool,
    /// Sample every token, even where the grammar forces the continuation.
    #[arg(long)]
    no_jump_forward: bool,
    /// Compute the next mask on another thread while the forward pass runs.
    #[arg(long)]
    overlap_mask: bool,
    /// Split the output as it streams: the answer goes to standard output, reasoning to
    /// standard error, each tool call as a JSON line to standard output. `generic` takes
    /// its tool-call syntax from --tool-format. A harmony model (gpt-oss) gets `harmony`
    /// unless --raw.
    #[arg(long, value_enum)]
    format: Option<SplitFormat>,
    /// Tool-call syntax of the generic format: hermes, llama3, mistral, qwen3-coder.
    #[arg(long, default_value = "hermes")]
    tool_format: String,
    /// The prompt already opened the reasoning block (the output starts inside it).
    #[arg(long)]
    think_prefilled: bool,
    /// With --format: where the grammar applies, the answer after reasoning or the body of
    /// each tool call.
    #[arg(long, value_enum, default_value = "answer")]
    scope: ScopeArg,
    /// With --format and --scope answer: reasoning tokens before the end of reasoning is
    /// forced.
    #[arg(long)]
    reasoning_budget: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplerArg {
    /// Each token from the masked, renormalized distribution.
    Plain,
    /// Sequential Monte Carlo over --particles particles.
    Smc,
    /// Constrained adaptive rejection sampling: one exact output.
    Cars,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    /// After the end of reasoning (generic formats) or in harmony's final channel.
    Answer,
    /// The body of each tool call, from its opening tag.
    ToolCalls,
}

/// The splitter and the grammar's scope for `--format` (a harmony model's prompt, not
/// raw, selects harmony without it).
fn split_setup(
    args: &GenerateArgs,
    model: &Model,
) -> anyhow::Result<(Option<Box<dyn Splitter>>, Scope)> {
    let auto = (model.is_harmony() && !args.raw).then_some(SplitFormat::Harmony);
    let Some(format) = args.format.or(auto) else {
        return Ok((None, Scope::Whole));
    };
    match format {
        SplitFormat::Harmony => {
            if args.scope == ScopeArg::ToolCalls {
                return Err(anyhow!(
                    "--scope tool-calls needs a generic format (harmony tool calls are messages of the commentary channel)"
                ));
            }
            // Harmony's markers are control tokens: read by id where the model has them.
            let vocab = model.space().vocab();
            let mut p = HarmonyParser::new(HarmonyMode::Lenient);
            if let Some(m) = HarmonyMarkers::find(|name| vocab.token_by_text(name).map(|t| t.0)) {
                p = p.with_markers(m);
            }
            Ok((
                Some(Box::new(p)),
                corral::scope::harmony_answer(args.reasoning_budget),
            ))
        }
        SplitFormat::Generic => {
            let f = Format::by_name(&args.tool_format)
                .ok_or_else(|| {
                    anyhow!(
                        "unknown --tool-format {:?}: hermes, llama3, mistral or qwen3-coder",
                        args.tool_format
                    )
                })?
                .prefilled(args.think_prefilled);
            let scope = match args.scope {
                ScopeArg::Answer => corral::scope::answer(&f, args.reasoning_budget),
                ScopeArg::ToolCalls => corral::scope::tool_calls(&f),
            }
            .ok_or_else(|| anyhow!("format {} has no such region", f.name))?;
            let parser = GenericParser::new(f).context("the tool format's markers")?;
            Ok((Some(Box::new(parser)), scope))
        }
    }
}

/// The assets folder: `$CORRAL_ASSETS`, else `assets/` in the source tree.
fn assets_dir() -> PathBuf {
    std::env::var_os("CORRAL_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("assets"))
}

/// The default model's path, fetching it with the project's script if it is missing.
pub(crate) fn default_model() -> anyhow::Result<String> {
    let path = assets_dir().join(DEFAULT_MODEL);
    if !path.exists() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-assets");
        eprintln!(
            "corral: fetching the default model (SmolLM2-135M-Instruct Q4_1, ~100 MB) with {}",
            script.display()
        );
        let status = std::process::Command::new(&script)
            .arg("model")
            .env("CORRAL_ASSETS", assets_dir())
            .status()
            .with_context(|| format!("cannot run {}", script.display()))?;
        if !status.success() || !path.exists() {
            return Err(anyhow!(
                "could not fetch the default model into {}; run scripts/fetch-assets model, or pass --model",
                path.display()
            ));
        }
    }
    Ok(path.display().to_string())
}

/// The prompt: `--prompt`, or the text of `--prompt-file` (`-`: standard input).
fn read_prompt(args: &GenerateArgs) -> anyhow::Result<String> {
    match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(path)) => crate::input::read_text(path, "the prompt file"),
        (None, None) => Err(anyhow!("give --prompt or --prompt-file")),
    }
}

pub fn run(args: &GenerateArgs) -> Result<(), Failure> {
    let device: DeviceSpec = args.device.parse().map_err(anyhow::Error::from)?;
    // A model writes the JSON: the generation default whitespace.
    let mut constraint = args.constraint.clone();
    constraint.schema.generation = true;
    let loaded = constraint.load()?;
    let schema = loaded.as_ref().and_then(|l| l.schema.clone());
    let grammar = match (loaded, &args.regex) {
        (Some(l), _) => Some(l.grammar),
        (None, Some(re)) => Some(
            corral::compile_regex(re, &CompileOptions::default().origin("--regex"))
                .map_err(anyhow::Error::from)?,
        ),
        (None, None) => None,
    };
    // Checked before the model loads: bad values fail at once.
    if args.max_tokens == 0 {
        return Err(anyhow!("--max-tokens must be at least 1").into());
    }
    if args.sampler == SamplerArg::Cars {
        return run_cars(args, grammar, schema.as_ref().map(|s| &s.0), device);
    }
    let sampling = sampling_options(args)?;
    let mut model = load_model(args, device)?;
    let options = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling,
        jump_forward: !args.no_jump_forward,
        overlap_mask: args.overlap_mask,
        ignore_eos: false,
        complete_within_budget: true,
        scope: Scope::Whole,
        logprobs: None,
    };
    let (mut splitter, scope) = split_setup(args, &model)?;
    let options = corral::GenerateOptions { scope, ..options };
    let prompt = Prompt {
        user: read_prompt(args)?,
        system: args.system.clone(),
        raw: args.raw,
    };
    let mut stdout = crate::Latch::new(std::io::stdout().lock());
    // With --format: the answer (content) is kept apart, to check against a schema.
    let mut answer = String::new();
    // Whether reasoning went to standard error (to end its line).
    let mut reasoned = false;
    let mut on_piece = |e: Emit<'_>| {
        match (splitter.as_mut(), e) {
            (Some(sp), Emit::Control { token, name, .. }) if sp.reads_control_tokens() => {
                sp.process_control(token.0, name);
                reasoned |= route(sp.as_mut(), &mut stdout, &mut answer);
            }
            (None, e) => {
                let _ = stdout.write_all(e.as_text().unwrap_or_default().as_bytes());
            }
            (Some(sp), e) => {
                sp.process(e.as_text().unwrap_or_default());
                reasoned |= route(sp.as_mut(), &mut stdout, &mut answer);
            }
        }
        let _ = stdout.flush();
    };
    let constraint = grammar.as_ref().map(|g| model.constraints().for_grammar(g));
    let out = corral::generate_emitting(
        &mut model,
        constraint.as_ref(),
        prompt,
        &options,
        &mut on_piece,
    )
    .map_err(anyhow::Error::from)?;
    if let Some(sp) = splitter.as_mut() {
        sp.finish();
        if route(sp.as_mut(), &mut stdout, &mut answer) || reasoned {
            eprintln!();
        }
    } else {
        answer = out.text.clone();
    }
    let _ = writeln!(stdout);
    let _ = stdout.flush();
    stdout.result()?;
    // A schema's keywords beyond the grammar (lenient compiles) are checked on the value.
    let schema_valid = match &schema {
        Some((value, _)) => Some(valid_for_schema(value, &answer)?),
        None => None,
    };
    if args.stats {
        eprintln!(
            "{}",
            stats_json(&out, schema_valid, &model, grammar.is_some())
        );
    }
    Ok(())
}

/// The model `--model` names (the default one without it), within `--ctx-size`.
fn load_model(args: &GenerateArgs, device: DeviceSpec) -> anyhow::Result<Model> {
    let source = match &args.model {
        Some(m) => m.clone(),
        None => default_model()?,
    };
    let model = Model::load(&source, device)?;
    Ok(match args.ctx_size {
        Some(n) => model.with_max_positions(n)?,
        None => model,
    })
}

/// `--sampler cars`: one output drawn exactly from the tempered model restricted to the
/// grammar ([`Cars`]), printed once drawn. Whatever the sampler cannot honour is refused.
fn run_cars(
    args: &GenerateArgs,
    grammar: Option<Arc<corral::Grammar>>,
    schema: Option<&serde_json::Value>,
    device: DeviceSpec,
) -> Result<(), Failure> {
    let grammar = grammar.ok_or_else(|| {
        anyhow!("--sampler cars needs a grammar: --grammar, --json-schema or --regex")
    })?;
    let refused = [
        (args.top_p.is_some(), "--top-p"),
        (args.top_k.is_some(), "--top-k"),
        (args.min_p.is_some(), "--min-p"),
        (args.repeat_penalty != 1.0, "--repeat-penalty"),
        (args.particles.is_some(), "--particles"),
        (args.ess_threshold.is_some(), "--ess-threshold"),
        (args.overlap_mask, "--overlap-mask"),
        (args.format.is_some(), "--format"),
        (args.reasoning_budget.is_some(), "--reasoning-budget"),
        (args.think_prefilled, "--think-prefilled"),
        (args.scope != ScopeArg::Answer, "--scope"),
        (args.tool_format != "hermes", "--tool-format"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(anyhow!(
            "{flag} does not go with --sampler cars, which draws the whole output from the tempered model (--temperature) restricted to the grammar"
        )
        .into());
    }
    let opts = CarsOptions {
        temperature: args.temperature,
        max_tokens: args.max_tokens,
        max_prefixes: args.max_prefixes.unwrap_or(4096),
        ..CarsOptions::default()
    };
    let mut model = load_model(args, device)?;
    if model.is_harmony() && !args.raw {
        return Err(anyhow!(
            "a harmony model's output has channels, which --sampler cars does not split: add --raw to constrain the whole output"
        )
        .into());
    }
    let text = model
        .prompt_text(args.system.as_deref(), &read_prompt(args)?, args.raw)
        .map_err(anyhow::Error::from)?;
    let prompt = model.encode_prompt(&text).map_err(anyhow::Error::from)?;
    let max = model.lm().max_positions();
    if prompt.len().saturating_add(args.max_tokens) >= max {
        return Err(anyhow!(
            "the prompt ({} tokens) and --max-tokens {} take more than the {max} positions the model supports",
            prompt.len(),
            args.max_tokens,
        )
        .into());
    }
    let constraint = model.constraints().for_grammar(&grammar);
    let mut cars = Cars::new(constraint, &prompt, opts).map_err(anyhow::Error::from)?;
    let t = std::time::Instant::now();
    let out = cars.draw(model.lm(), args.seed).map_err(|e| match e {
        e @ GenerateError::CarsLimit { .. } => anyhow!(
            "{e}: the model rarely writes this grammar's outputs here; raise --max-prefixes, or draw with --sampler smc"
        ),
        GenerateError::NothingToSample => anyhow!(
            "no output of the grammar has a probability under the model at --temperature {} that the sampler can hold (f64, above about 1e-308): raise --temperature, or draw with --sampler smc",
            args.temperature
        ),
        e => e.into(),
    })?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", out.text).context("standard output")?;
    stdout.flush().context("standard output")?;
    let schema_valid = match schema {
        Some(value) => Some(valid_for_schema(value, &out.text)?),
        None => None,
    };
    if args.stats {
        let s = cars.stats();
        eprintln!(
            "{}",
            serde_json::json!({
                "schema_valid": schema_valid,
                "prompt_tokens": prompt.len(),
                "generated_tokens": out.tokens.len(),
                "forward_passes": out.forward_passes,
                "tokens_run": out.tokens_run,
                "ms": round2(ms),
                "finish_reason": "stop",
                "model": model.name(),
                "constrained": true,
                "sampler": {
                    "method": "cars",
                    "rejections": out.rejections,
                    "prefixes": s.prefixes,
                    "trie_bytes": s.bytes,
                    "live_mass": cars.live_mass(),
                },
            })
        );
    }
    Ok(())
}

/// `--stats`: the generation's figures, one JSON object.
fn stats_json(
    out: &corral::Generation,
    schema_valid: Option<bool>,
    model: &Model,
    constrained: bool,
) -> serde_json::Value {
    let s = &out.stats;
    serde_json::json!({
        "schema_valid": schema_valid,
        "prompt_tokens": s.prompt_tokens,
        "generated_tokens": s.generated_tokens,
        "forward_passes": s.forward_passes,
        "forced_tokens": s.forced_tokens,
        "prompt_tok_s": round2(s.prompt_tok_s),
        "decode_tok_s": round2(s.decode_tok_s),
        "mask_us_mean": round2(s.mask_us_mean),
        "mask_us_p99": round2(s.mask_us_p99),
        "finish_reason": out.finish_reason.as_str(),
        "model": model.name(),
        "constrained": constrained,
        "sampler": s.smc.as_ref().map(|m| serde_json::json!({
            "method": "smc",
            "particles": m.particles,
            "resamples": m.resamples,
            "ess_min": round2(m.ess_min),
            "ess_final": round2(m.ess_final),
            "sequence_steps": m.sequence_steps,
            "fork_ms": round2(m.fork_ms),
            "log_evidence": m.log_evidence,
        })),
    })
}

/// The sampling settings of the command line, checked.
fn sampling_options(args: &GenerateArgs) -> anyhow::Result<SamplingOptions> {
    let (method, default_top_p) = match args.sampler {
        // Drawn by `run_cars`, with its own settings.
        SamplerArg::Cars => anyhow::bail!("--sampler cars has no SamplingOptions"),
        _ if args.max_prefixes.is_some() => anyhow::bail!("--max-prefixes needs --sampler cars"),
        SamplerArg::Plain => {
            if args.particles.is_some() || args.ess_threshold.is_some() {
                anyhow::bail!("--particles and --ess-threshold need --sampler smc");
            }
            (SamplerMethod::Plain, 0.95)
        }
        SamplerArg::Smc => {
            let d = SmcOptions::new(8);
            let smc = SmcOptions {
                particles: args.particles.unwrap_or(d.particles),
                ess_threshold: args.ess_threshold.unwrap_or(d.ess_threshold),
            };
            (SamplerMethod::Smc(smc), 1.0)
        }
    };
    let top_p = args.top_p.unwrap_or(default_top_p);
    let sampling = SamplingOptions {
        temperature: args.temperature,
        top_k: args.top_k,
        // 1 is off; anything else is checked (a top-p of 2 or NaN is an error).
        top_p: (top_p != 1.0).then_some(top_p),
        method,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplingOptions::default()
    };
    sampling.validate().context("sampling")?;
    Ok(sampling)
}

/// Whether the answer is valid for the whole schema, saying on standard error why not.
fn valid_for_schema(schema: &serde_json::Value, answer: &str) -> anyhow::Result<bool> {
    let validator = corral::schema::validate::Validator::new(schema)?;
    match corral::schema::validate::check(&validator, answer.trim()) {
        Ok(_) => Ok(true),
        Err(errors) => {
            for e in &errors {
                eprintln!("corral: the output is not valid for the schema: {e}");
            }
            Ok(false)
        }
    }
}

/// Writes what the splitter produced: the answer to standard output (and `answer`),
/// reasoning to standard error, each finished tool call as a JSON line. Returns whether
/// there was reasoning.
fn route(sp: &mut dyn Splitter, stdout: &mut impl Write, answer: &mut String) -> bool {
    let r = sp.take_reasoning();
    if !r.is_empty() {
        eprint!("{r}");
    }
    let c = sp.take_content();
    if !c.is_empty() {
        let _ = stdout.write_all(c.as_bytes());
        answer.push_str(&c);
    }
    for t in sp.take_tool_calls() {
        if let ToolCallEvent::End {
            name, arguments, ..
        } = t
        {
            let args: serde_json::Value =
                serde_json::from_str(&arguments).unwrap_or(serde_json::Value::String(arguments));
            let _ = writeln!(
                stdout,
                "{}",
                serde_json::json!({"tool_call": {"name": name, "arguments": args}})
            );
        }
    }
    !r.is_empty()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

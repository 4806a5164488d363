//! Constrained adaptive rejection sampling ([`Cars`]): outputs drawn exactly from the
//! tempered model restricted to the grammar (within `max_tokens`), the target
//! [`crate::smc`] approaches.
//!
//! Rejection sampling draws from the model unconstrained and keeps an output only if the
//! grammar accepts it: each kept output is exact, but almost every draw is refused when
//! the grammar holds little of the model's mass. The adaptive version remembers what it
//! refused. A trie of the prefixes visited holds, at each prefix, the model's next-token
//! probabilities at the temperature over the tokens the grammar allows, and the share of
//! the prefix's probability not yet known to fall outside the grammar (its *live* share).
//! A draw walks from the root, picking each token in proportion to the model's probability
//! times the live share of the prefix it leads to, so that it draws from the model with
//! every known refusal taken out; the outputs it keeps are therefore the model's,
//! restricted to the grammar, exactly.
//!
//! Exact masks make refusals cheap: the first time a draw reaches a prefix, the model runs
//! on it and the mask shows at once every token the grammar refuses there. The draw is
//! refused with the probability those tokens hold (a fresh prefix's tokens are drawn from
//! the model unmasked), and whether or not it is, their mass leaves the prefix's live
//! share and that of every prefix above it. A refused draw starts again from the root;
//! the prefixes it passes were visited before and cost no forward pass. So each prefix
//! costs one forward pass and can refuse at most once, and a sampler that keeps its trie
//! across draws from the same prompt runs the model less and less: the draws after the
//! first cost only the prefixes no earlier draw reached.
//!
//! A draw, step by step:
//!
//! 1. Start at the root (the prompt), with no refusal known below it this draw.
//! 2. At a prefix reached before, pick a token in proportion to its probability times the
//!    live share of the prefix it leads to (an unvisited one's is 1). At a prefix this draw
//!    was the first to reach, pick from the model's whole distribution: a token the grammar
//!    refuses refuses the draw; go back to 1. (The root is never refused: what its mask
//!    refuses scales every output's probability alike.)
//! 3. An end token ends the draw with the output so far. A token to a prefix never reached
//!    runs the model on that prefix (on the walk's own KV cache where it has one, else on
//!    a copy of as much of the last walk's cache as the two share, or of the prompt's),
//!    adds it to the trie, and takes the mass its mask refuses out of
//!    the live shares above it. Go on at 2 from the prefix the token leads to.
//!
//! An output longer than `max_tokens` is outside the target: at that depth only the end
//! is allowed. The root's live share is an upper bound on the grammar's mass under the
//! model within `max_tokens`, reached once every prefix with mass has been visited
//! ([`Cars::live_mass`]). Only the temperature shapes the target: no top-k, top-p,
//! penalties or logit bias. The draws are exact up to the rounding of the probabilities
//! (f32 logits, f64 sums). A draw that fails leaves the trie as it was before the prefix
//! that failed: later draws may go on.

use crate::adapter::RobustConstrainedAdapter;
use crate::constraint::Constraint;
use crate::decoder::check_budget;
use crate::generate::GenerateError;
use crate::logprobs::log_sum_exp;
use crate::model::{BackendError, CausalLm, Logits, ModelError, Sequence};
use crate::sampling::{Rng, SamplingError};
use corral_trie::{FixedBitSet, TokenId};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of a [`Cars`] sampler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CarsOptions {
    /// The target's temperature: above 0. Default 1.
    pub temperature: f32,
    /// Longest output in tokens, the end not counted: longer ones are outside the target.
    /// Default 256.
    pub max_tokens: usize,
    /// Most prefixes the trie may hold, each a forward pass (about 10 ms for SmolLM2-135M
    /// on 2 cores): past it a draw fails. 1 to [`CarsOptions::MAX_PREFIXES`]; default
    /// 16,384.
    pub max_prefixes: usize,
    /// Most bytes the trie's tables may hold (16 an allowed token of a prefix; the KV
    /// caches, one a draw at a time, are apart): past it a draw fails. Default 1 GiB.
    pub max_bytes: usize,
}

impl CarsOptions {
    /// Most prefixes a trie may hold.
    pub const MAX_PREFIXES: usize = u32::MAX as usize - 1;
}

impl Default for CarsOptions {
    fn default() -> CarsOptions {
        CarsOptions {
            temperature: 1.0,
            max_tokens: 256,
            max_prefixes: 16_384,
            max_bytes: 1 << 30,
        }
    }
}

/// One output of [`Cars::draw`], and what the draw cost.
#[derive(Clone, Debug, PartialEq)]
pub struct CarsDraw {
    /// The output's tokens, the end not included.
    pub tokens: Vec<TokenId>,
    /// Their bytes as text (invalid UTF-8 replaced).
    pub text: String,
    /// Forward passes this draw ran: one for each prefix it was the first to reach (and
    /// the prompt's, for a sampler's first draw).
    pub forward_passes: usize,
    /// Tokens those passes ran.
    pub tokens_run: usize,
    /// Times the draw was refused and started again.
    pub rejections: usize,
    /// Time in those passes.
    pub forward_time: Duration,
}

/// What a [`Cars`] sampler has done so far, over all its draws.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CarsStats {
    /// Outputs drawn.
    pub draws: usize,
    /// Prefixes in the trie.
    pub prefixes: usize,
    /// Forward passes run.
    pub forward_passes: usize,
    /// Tokens those passes ran.
    pub tokens_run: usize,
    /// Draws refused and started again.
    pub rejections: usize,
    /// Bytes the trie's tables hold.
    pub bytes: usize,
    /// Time in forward passes.
    pub forward_time: Duration,
}

/// A prefix's place in the trie. The root (0) is no prefix's child, so a child's is never
/// 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodeId(NonZeroU32);

impl NodeId {
    fn index(self) -> usize {
        self.0.get() as usize
    }
}

/// A prefix the model has run on.
struct Node {
    /// Tokens of positive probability the grammar allows next (with any end token), within
    /// the length limit.
    allowed: Vec<TokenId>,
    /// Their probabilities under the model at the temperature.
    prob: Vec<f64>,
    /// The prefix each leads to, once visited.
    child: Vec<Option<NodeId>>,
    /// The share of this prefix's probability not known to fall outside the grammar:
    /// `sum prob[i] * live(child[i])`, an unvisited child's being 1.
    live: f64,
}

/// The live share of the prefix `child` names (1 for one not visited).
fn live_of(nodes: &[Node], child: Option<NodeId>) -> f64 {
    child.map_or(1.0, |c| nodes[c.index()].live)
}

impl Node {
    /// The index of the allowed token `r` falls on, weights `prob * live(child)` laid end
    /// to end; past their sum, what is left of `r`.
    fn pick(&self, mut r: f64, nodes: &[Node]) -> Result<usize, f64> {
        for (i, (&p, &c)) in self.prob.iter().zip(&self.child).enumerate() {
            let w = p * live_of(nodes, c);
            if r < w {
                return Ok(i);
            }
            r -= w;
        }
        Err(r)
    }

    /// The last allowed token of positive weight: where rounding leaves `r` just past the
    /// sum it was drawn below.
    fn last_live(&self, nodes: &[Node]) -> Option<usize> {
        (0..self.allowed.len())
            .rev()
            .find(|&i| self.prob[i] * live_of(nodes, self.child[i]) > 0.0)
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<Node>()
            + self.allowed.capacity() * std::mem::size_of::<TokenId>()
            + self.prob.capacity() * std::mem::size_of::<f64>()
            + self.child.capacity() * std::mem::size_of::<Option<NodeId>>()
    }
}

/// A draw's own KV cache and constraint, at the last prefix it reached, once it has run
/// the model on a new prefix.
struct WalkCache {
    sequence: Sequence,
    adapter: RobustConstrainedAdapter,
}

/// A constrained adaptive rejection sampler for one prompt and grammar (see the module
/// docs): each [`Cars::draw`] is one output drawn exactly from the tempered model
/// restricted to the grammar. Keep it across draws from the same prompt: the trie it
/// learns makes each draw after the first cheaper.
pub struct Cars {
    constraint: Arc<Constraint>,
    prompt: Vec<TokenId>,
    opts: CarsOptions,
    /// The prompt's KV cache, which a walk copies before it runs a new prefix.
    prompt_sequence: Option<Sequence>,
    /// The KV cache the last walk that ran the model left, and the tokens after the
    /// prompt it holds: a walk after a refusal often goes down the same prefix again.
    spare: Option<(Vec<TokenId>, Sequence)>,
    nodes: Vec<Node>,
    mask: FixedBitSet,
    stats: CarsStats,
}

impl std::fmt::Debug for Cars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cars")
            .field("prompt_tokens", &self.prompt.len())
            .field("opts", &self.opts)
            .field("stats", &self.stats)
            .field("live_mass", &self.live_mass())
            .finish_non_exhaustive()
    }
}

impl Cars {
    /// A sampler with an empty trie; checks the settings, and that some output of the
    /// grammar fits in `max_tokens` ([`GenerateError::BudgetTooSmall`],
    /// [`GenerateError::NoCompletion`]).
    pub fn new(
        constraint: Arc<Constraint>,
        prompt: &[TokenId],
        opts: CarsOptions,
    ) -> Result<Cars, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let bad = |name, value: String, expected| {
            Err(GenerateError::Sampling(SamplingError {
                name,
                value,
                expected,
            }))
        };
        if !(opts.temperature > 0.0
            && opts.temperature.is_finite()
            && (1.0 / opts.temperature).is_finite())
        {
            return bad(
                "temperature",
                opts.temperature.to_string(),
                "above 0 with the cars sampler (it samples the tempered model)",
            );
        }
        if opts.max_tokens == 0 {
            return bad("max_tokens", "0".into(), "at least 1");
        }
        if !(1..=CarsOptions::MAX_PREFIXES).contains(&opts.max_prefixes) {
            return bad(
                "max_prefixes",
                opts.max_prefixes.to_string(),
                "1 to 4,294,967,294",
            );
        }
        let mut adapter = RobustConstrainedAdapter::new(constraint.clone());
        check_budget(&mut adapter, opts.max_tokens)?;
        Ok(Cars {
            constraint,
            prompt: prompt.to_vec(),
            opts,
            prompt_sequence: None,
            spare: None,
            nodes: Vec::new(),
            mask: FixedBitSet::new(),
            stats: CarsStats::default(),
        })
    }

    /// What the sampler has done so far.
    pub fn stats(&self) -> CarsStats {
        self.stats
    }

    /// The share of the model's probability after the prompt not yet known to fall outside
    /// the grammar (within `max_tokens`): an upper bound on the grammar's mass, equal to it
    /// once every prefix with mass has been visited. `None` before the first draw.
    pub fn live_mass(&self) -> Option<f64> {
        self.nodes.first().map(|n| n.live)
    }

    /// Draws one output with the random state `seed`. Fails if the model or constraint
    /// does, if the trie would pass `max_prefixes` or `max_bytes`, or if no output of the
    /// grammar has mass under the model.
    pub fn draw(&mut self, lm: &mut dyn CausalLm, seed: u64) -> Result<CarsDraw, GenerateError> {
        let mut rng = Rng::new(seed);
        let before = self.stats;
        if self.nodes.is_empty() {
            let mut sequence = lm.new_sequence();
            let t = Instant::now();
            let logits = lm.forward_sequence(&mut sequence, &self.prompt, 0)?;
            self.count_pass(self.prompt.len(), t);
            let mut adapter = RobustConstrainedAdapter::new(self.constraint.clone());
            self.push_node(lm, &*logits, &mut adapter, 0)?;
            self.prompt_sequence = Some(sequence);
        }
        let space = self.constraint.space().clone();
        'walk: loop {
            let mut path: Vec<usize> = vec![0];
            let mut tokens: Vec<TokenId> = Vec::new();
            let mut cache: Option<WalkCache> = None;
            // A prefix this walk was the first to reach draws from all of the model's
            // tokens: one the grammar refuses refuses the draw. (The root's refusals are
            // known as soon as it runs: its normalizer is the same for every output.)
            let mut fresh = false;
            loop {
                let at = *path.last().expect("the root");
                let node = &self.nodes[at];
                if at == 0 && node.live <= 0.0 {
                    return Err(GenerateError::NothingToSample);
                }
                let r = rng.next_f64();
                let pick = if fresh {
                    node.pick(r, &self.nodes).ok()
                } else {
                    match node.pick(r * node.live, &self.nodes) {
                        Ok(i) => Some(i),
                        Err(rest) => {
                            debug_assert!(rest <= 1e-9 * node.live, "live share out of date");
                            node.last_live(&self.nodes)
                        }
                    }
                };
                let Some(i) = pick else {
                    self.stats.rejections += 1;
                    if let Some(c) = cache {
                        self.spare = Some((tokens, c.sequence));
                    }
                    continue 'walk;
                };
                let t = node.allowed[i];
                if space.eos().contains(&t) {
                    let bytes = space.vocab().decode_bytes(&tokens);
                    self.stats.draws += 1;
                    if let Some(c) = cache {
                        self.spare = Some((tokens.clone(), c.sequence));
                    }
                    return Ok(CarsDraw {
                        text: String::from_utf8_lossy(&bytes).into_owned(),
                        tokens,
                        forward_passes: self.stats.forward_passes - before.forward_passes,
                        tokens_run: self.stats.tokens_run - before.tokens_run,
                        rejections: self.stats.rejections - before.rejections,
                        forward_time: self.stats.forward_time - before.forward_time,
                    });
                }
                tokens.push(t);
                if let Some(child) = node.child[i] {
                    path.push(child.index());
                    fresh = false;
                    continue;
                }
                if self.stats.prefixes >= self.opts.max_prefixes {
                    return Err(GenerateError::CarsLimit {
                        what: "prefixes",
                        limit: self.opts.max_prefixes,
                    });
                }
                let (logits, mut next) = self.run_prefix(lm, cache.take(), &tokens)?;
                let id = self.push_node(lm, &*logits, &mut next.adapter, tokens.len())?;
                let child = u32::try_from(id)
                    .ok()
                    .and_then(NonZeroU32::new)
                    .expect("a child's index is in 1..=MAX_PREFIXES");
                self.nodes[at].child[i] = Some(NodeId(child));
                path.push(id);
                self.refresh(&path);
                cache = Some(next);
                fresh = true;
            }
        }
    }

    /// Runs the model on the prefix `tokens` (the prompt before them): one token on the
    /// walk's own cache where it has one, else the rest on a copy of the part of the spare
    /// cache the prefix shares, or all of them on a copy of the prompt's (or with the prompt
    /// again, where the model cannot copy).
    fn run_prefix(
        &mut self,
        lm: &mut dyn CausalLm,
        cache: Option<WalkCache>,
        tokens: &[TokenId],
    ) -> Result<(Box<dyn Logits>, WalkCache), GenerateError> {
        let n = self.prompt.len();
        let (mut sequence, adapter, feed, pos) = match cache {
            Some(WalkCache {
                sequence,
                mut adapter,
            }) => {
                let last = tokens.len() - 1;
                adapter.step_with_token(tokens[last])?;
                (sequence, adapter, tokens[last..].to_vec(), n + last)
            }
            None => {
                let mut adapter = RobustConstrainedAdapter::new(self.constraint.clone());
                adapter.step_with_tokens(tokens)?;
                // The last token always runs: its logits are the ones wanted.
                let shared = self.spare.as_ref().map_or(0, |(held, _)| {
                    let same = held.iter().zip(tokens).take_while(|(a, b)| a == b);
                    same.count().min(tokens.len() - 1)
                });
                let from_spare = match &self.spare {
                    Some((_, s)) if shared > 0 => lm.copy_prefix(s, n + shared),
                    _ => None,
                };
                let copied = self
                    .prompt_sequence
                    .as_ref()
                    .filter(|_| from_spare.is_none())
                    .and_then(|s| lm.copy_prefix(s, n));
                match (from_spare, copied) {
                    (Some(s), _) => (s, adapter, tokens[shared..].to_vec(), n + shared),
                    (None, Some(s)) => (s, adapter, tokens.to_vec(), n),
                    (None, None) => (
                        lm.new_sequence(),
                        adapter,
                        [&self.prompt, tokens].concat(),
                        0,
                    ),
                }
            }
        };
        let start = Instant::now();
        let logits = lm.forward_sequence(&mut sequence, &feed, pos)?;
        self.count_pass(feed.len(), start);
        Ok((logits, WalkCache { sequence, adapter }))
    }

    fn count_pass(&mut self, tokens: usize, start: Instant) {
        self.stats.forward_time += start.elapsed();
        self.stats.forward_passes += 1;
        self.stats.tokens_run += tokens;
    }

    /// Adds the prefix the model's `logits` are for (`depth` tokens after the prompt) to
    /// the trie: the allowed tokens' probabilities at the temperature. Returns its index.
    fn push_node(
        &mut self,
        lm: &dyn CausalLm,
        logits: &dyn Logits,
        adapter: &mut RobustConstrainedAdapter,
        depth: usize,
    ) -> Result<usize, GenerateError> {
        let space = self.constraint.space();
        let width = lm.logit_width().max(space.width());
        self.mask.grow(width);
        self.mask.clear();
        adapter.compute_mask(&mut self.mask)?;
        let v = logits.to_masked_vec(None)?;
        // Minus infinity is a token the model rules out; NaN or plus infinity is a broken
        // model, whose probabilities would be wrong.
        if v.iter().any(|l| l.is_nan() || *l == f32::INFINITY) {
            return Err(GenerateError::Model(ModelError::Backend(
                BackendError::from(
                    "the model's logits hold NaN or infinity: the cars sampler needs probabilities",
                ),
            )));
        }
        let scale = 1.0 / self.opts.temperature;
        let lse = log_sum_exp(&v, scale);
        let room = self.mask.count_ones(..);
        let mut node = Node {
            allowed: Vec::with_capacity(room),
            prob: Vec::with_capacity(room),
            child: Vec::with_capacity(room),
            live: 0.0,
        };
        for t in self.mask.ones() {
            let token = TokenId(t as u32);
            if depth >= self.opts.max_tokens && !space.eos().contains(&token) {
                continue;
            }
            let p = v
                .get(t)
                .map_or(0.0, |&l| (l as f64 * scale as f64 - lse).exp());
            if p > 0.0 {
                node.allowed.push(token);
                node.prob.push(p);
                node.child.push(None);
                node.live += p;
            }
        }
        let bytes = self.stats.bytes + node.bytes();
        if bytes > self.opts.max_bytes {
            return Err(GenerateError::CarsLimit {
                what: "bytes",
                limit: self.opts.max_bytes,
            });
        }
        self.stats.bytes = bytes;
        self.stats.prefixes += 1;
        self.nodes.push(node);
        Ok(self.nodes.len() - 1)
    }

    /// Recomputes the live share of each prefix on `path` above its last, which changed.
    fn refresh(&mut self, path: &[usize]) {
        for &at in path.iter().rev().skip(1) {
            let n = &self.nodes[at];
            let live = n
                .prob
                .iter()
                .zip(&n.child)
                .map(|(&p, &c)| p * live_of(&self.nodes, c))
                .sum();
            self.nodes[at].live = live;
        }
    }
}

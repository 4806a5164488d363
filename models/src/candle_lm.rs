//! One [`CausalLm`] for every candle model: the checks, the input tensor, the KV-cache
//! reset at position 0, prompt chunks and sequences of their own are written once here; an
//! architecture only says how to run its network ([`CandleNet`]).

use crate::logits::{CandleLogits, backend};
use candle_core::{Device, Tensor};
use corral_engine::{BatchItem, CausalLm, Logits, ModelError, Sequence};
use corral_trie::TokenId;

/// A candle network with its KV cache (one sequence).
pub trait CandleNet: Clone + Send + 'static {
    /// Runs `input` (shape `(1, seq)`) at positions `pos..`; the logits of the last
    /// position.
    fn forward(&mut self, input: &Tensor, pos: usize) -> candle_core::Result<Tensor>;
    /// Empties the KV cache.
    fn clear_kv_cache(&mut self);
    /// Another sequence over the same weights, its cache empty. The default clones (the
    /// weights must be shared by clones, not copied) and clears the cache.
    fn fresh(&self) -> Self {
        let mut net = self.clone();
        net.clear_kv_cache();
        net
    }
    /// A few new positions of each of several sequences (a decoding step, or a piece of a
    /// prompt): `nets[i]` runs `tokens[i]` from position `pos[i]` on its own cache. The
    /// logits of each one's last position, `(sequences, vocabulary)`. The default runs them
    /// one after another; a network that can batches them into one pass.
    fn forward_batch(
        nets: &mut [&mut Self],
        tokens: &[&[u32]],
        pos: &[usize],
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        forward_one_by_one(nets, tokens, pos, device)
    }
    /// [`CandleNet::forward_batch`], with the logits of each sequence's last `tails[i]`
    /// positions (from 1 to its tokens), `(sum of tails, vocabulary)`: sequence 0's first to
    /// last, then sequence 1's. The default (`forward_tails_by_steps`) runs the wanted
    /// positions after each one's first a pass each; a network that can returns them from
    /// one pass.
    fn forward_batch_tails(
        nets: &mut [&mut Self],
        tokens: &[&[u32]],
        pos: &[usize],
        tails: &[usize],
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        forward_tails_by_steps(nets, tokens, pos, tails, device)
    }
    /// Another sequence over the same weights whose cache holds a copy of this one's first
    /// `positions` positions (at most those it holds), sized to them; `None` (the default)
    /// where the network cannot.
    fn copy_prefix(&self, positions: usize) -> Option<Self> {
        let _ = positions;
        None
    }
    /// Bytes the KV cache holds, where the network counts them (the default: `None`).
    fn kv_cache_bytes(&self) -> Option<usize> {
        None
    }
}

/// [`CandleNet::forward_batch`] one sequence at a time.
pub fn forward_one_by_one<N: CandleNet>(
    nets: &mut [&mut N],
    tokens: &[&[u32]],
    pos: &[usize],
    device: &Device,
) -> candle_core::Result<Tensor> {
    let mut rows = Vec::with_capacity(nets.len());
    for ((net, &t), &p) in nets.iter_mut().zip(tokens).zip(pos) {
        let input = Tensor::new(t, device)?.unsqueeze(0)?;
        rows.push(net.forward(&input, p)?.flatten_all()?);
    }
    Tensor::stack(&rows, 0)
}

/// [`CandleNet::forward_batch_tails`] from [`CandleNet::forward_batch`]: each sequence up to
/// its first wanted position in one pass, then its other wanted positions one at a time.
pub fn forward_tails_by_steps<N: CandleNet>(
    nets: &mut [&mut N],
    tokens: &[&[u32]],
    pos: &[usize],
    tails: &[usize],
    device: &Device,
) -> candle_core::Result<Tensor> {
    let heads: Vec<&[u32]> = tokens
        .iter()
        .zip(tails)
        .map(|(t, &k)| &t[..t.len() + 1 - k])
        .collect();
    let first = N::forward_batch(nets, &heads, pos, device)?;
    let mut rows = Vec::with_capacity(tails.iter().sum());
    for (i, net) in nets.iter_mut().enumerate() {
        rows.push(first.get(i)?);
        for j in heads[i].len()..tokens[i].len() {
            let input = Tensor::new(&tokens[i][j..j + 1], device)?.unsqueeze(0)?;
            rows.push(net.forward(&input, pos[i] + j)?.flatten_all()?);
        }
    }
    Tensor::stack(&rows, 0)
}

/// The default of [`CandleLm::with_prefill_chunk`].
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// A candle network as a [`CausalLm`].
pub struct CandleLm<N: CandleNet> {
    /// The sequence [`CausalLm::forward`] runs.
    net: N,
    shape: Runner,
}

impl<N: CandleNet> std::fmt::Debug for CandleLm<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleLm")
            .field("net", &std::any::type_name::<N>())
            .field("device", &self.shape.device)
            .field("width", &self.shape.width)
            .field("max_positions", &self.shape.max_positions)
            .field("prefill_chunk", &self.shape.prefill_chunk)
            .field("kv_cache_bytes", &self.net.kv_cache_bytes())
            .finish_non_exhaustive()
    }
}

/// How a [`CandleLm`] runs its inputs.
struct Runner {
    device: Device,
    /// Logits per position (the model's vocabulary, padded).
    width: usize,
    max_positions: usize,
    prefill_chunk: usize,
}

impl<N: CandleNet> CandleLm<N> {
    /// Wraps `net` on `device`: `width` logits a position (the model's vocabulary, padded),
    /// at most `max_positions` positions a sequence (prompt and output together), and
    /// prompts run in chunks of [`DEFAULT_PREFILL_CHUNK`] positions.
    pub fn new(net: N, device: Device, width: usize, max_positions: usize) -> CandleLm<N> {
        CandleLm {
            net,
            shape: Runner {
                device,
                width,
                max_positions,
                prefill_chunk: DEFAULT_PREFILL_CHUNK,
            },
        }
    }

    /// Most positions one forward pass takes: a longer input (a prompt) runs in chunks of
    /// this many, each attending to the cache of those before, so attention's memory is
    /// `chunk x context` per head rather than `prompt x prompt`. Default
    /// [`DEFAULT_PREFILL_CHUNK`] (256); at least 1.
    pub fn with_prefill_chunk(mut self, positions: usize) -> CandleLm<N> {
        self.shape.prefill_chunk = positions.max(1);
        self
    }
}

impl Runner {
    fn check(&self, tokens: &[TokenId], pos: usize) -> Result<(), ModelError> {
        if pos + tokens.len() > self.max_positions {
            return Err(ModelError::Context {
                what: "prompt and output",
                needed: pos + tokens.len(),
                max: self.max_positions,
            });
        }
        if tokens.is_empty() {
            return Err(ModelError::NoTokens);
        }
        Ok(())
    }

    /// Runs `tokens` on `net` in chunks; the logits of the last.
    fn run<N: CandleNet>(
        &self,
        net: &mut N,
        tokens: &[TokenId],
        pos: usize,
    ) -> Result<Tensor, ModelError> {
        self.check(tokens, pos)?;
        if pos == 0 {
            net.clear_kv_cache();
        }
        let mut logits = None;
        for (k, chunk) in tokens.chunks(self.prefill_chunk).enumerate() {
            let input = Tensor::new(TokenId::raw(chunk), &self.device)
                .and_then(|t| t.unsqueeze(0))
                .map_err(backend)?;
            let at = pos + k * self.prefill_chunk;
            logits = Some(net.forward(&input, at).map_err(backend)?);
        }
        Ok(logits.expect("at least one chunk"))
    }
}

impl<N: CandleNet> CausalLm for CandleLm<N> {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        let logits = self.shape.run(&mut self.net, tokens, pos)?;
        Ok(Box::new(CandleLogits(logits)))
    }

    fn logit_width(&self) -> usize {
        self.shape.width
    }

    fn max_positions(&self) -> usize {
        self.shape.max_positions
    }

    fn reset(&mut self) {
        self.net.clear_kv_cache();
    }

    fn new_sequence(&self) -> Sequence {
        Sequence::new(self.net.fresh())
    }

    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        let tails = vec![1; items.len()];
        self.forward_batch_tails(items, &tails)
    }

    fn forward_batch_tails(
        &mut self,
        items: &mut [BatchItem<'_>],
        tails: &[usize],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        corral_engine::check_tails(items, tails)?;
        // Every item is checked before any runs, so that a refused batch changes nothing.
        for item in items.iter() {
            self.shape.check(item.tokens, item.pos)?;
            if !item.sequence.is::<N>() {
                return Err(ModelError::ForeignSequence);
            }
        }
        let mut out: Vec<Vec<Box<dyn Logits>>> = (0..items.len()).map(|_| Vec::new()).collect();
        // Decoding steps and short feeds (a few positions of a prompt) run as one pass;
        // longer feeds one by one, in chunks (the wanted positions after the first, one at a
        // time).
        let (mut steps, mut nets, mut tokens, mut pos) = (Vec::new(), Vec::new(), vec![], vec![]);
        for (i, item) in items.iter_mut().enumerate() {
            let net = item
                .sequence
                .downcast_mut::<N>()
                .ok_or(ModelError::ForeignSequence)?;
            if item.tokens.len() <= crate::llama::STEP_MAX_POSITIONS {
                if item.pos == 0 {
                    net.clear_kv_cache();
                }
                steps.push(i);
                nets.push(net);
                tokens.push(TokenId::raw(item.tokens));
                pos.push(item.pos);
            } else {
                let head = item.tokens.len() + 1 - tails[i];
                let logits = self.shape.run(net, &item.tokens[..head], item.pos)?;
                out[i].push(Box::new(CandleLogits(logits)));
                for j in head..item.tokens.len() {
                    let logits = self.shape.run(net, &item.tokens[j..j + 1], item.pos + j)?;
                    out[i].push(Box::new(CandleLogits(logits)));
                }
            }
        }
        if !steps.is_empty() {
            let slices: Vec<&[u32]> = tokens.iter().map(Vec::as_slice).collect();
            let step_tails: Vec<usize> = steps.iter().map(|&i| tails[i]).collect();
            let logits =
                N::forward_batch_tails(&mut nets, &slices, &pos, &step_tails, &self.shape.device)
                    .map_err(backend)?;
            let mut row = 0;
            for (i, k) in steps.into_iter().zip(step_tails) {
                for _ in 0..k {
                    out[i].push(Box::new(CandleLogits(logits.get(row).map_err(backend)?)));
                    row += 1;
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        let net = sequence.downcast_ref::<N>()?;
        net.copy_prefix(positions).map(Sequence::new)
    }

    fn sequence_bytes(&self, sequence: &Sequence) -> Option<usize> {
        sequence.downcast_ref::<N>()?.kv_cache_bytes()
    }
}

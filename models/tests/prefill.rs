//! Prompts run in chunks (`CandleLm::with_prefill_chunk`) give the logits a single pass
//! gives (within the quantized kernels' rounding), on the real SmolLM2 model: each chunk
//! attends to the cache of those before.

use candle_core::Device;
use corral_engine::CausalLm;
use corral_models::load_gguf_llama;
use corral_trie::TokenId;
use std::path::Path;

#[path = "../../tests/support/require.rs"]
mod require;

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_prompt_in_chunks_gives_the_logits_of_one_pass() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = require::require_input(path, "run scripts/fetch-assets model");
    let (whole, tokenizer, _) = load_gguf_llama(&path, &Device::Cpu).unwrap();
    let mut whole = whole.with_prefill_chunk(usize::MAX);
    let (chunked, _, _) = load_gguf_llama(&path, &Device::Cpu).unwrap();
    let mut chunked = chunked.with_prefill_chunk(37);
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(12);
    let ids = TokenId::all(tokenizer.encode(text, false).unwrap().get_ids());
    assert!(ids.len() > 100, "{} tokens", ids.len());
    let a = whole.forward(&ids, 0).unwrap().to_masked_vec(None).unwrap();
    let b = chunked
        .forward(&ids, 0)
        .unwrap()
        .to_masked_vec(None)
        .unwrap();
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    assert_eq!(argmax(&a), argmax(&b));
    // Not bit for bit: candle's quantized matmul takes other kernels for one row and for
    // several, so even one pass and token-by-token decoding differ by up to about 0.6 in
    // a logit of magnitude 20 on this prompt (measured). Chunks stay within that.
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1.0, "largest logit difference {worst}");
    // The next position continues from the chunked cache as from the whole one.
    let n = ids.len();
    let a = whole
        .forward(&ids[..1], n)
        .unwrap()
        .to_masked_vec(None)
        .unwrap();
    let b = chunked
        .forward(&ids[..1], n)
        .unwrap()
        .to_masked_vec(None)
        .unwrap();
    assert_eq!(argmax(&a), argmax(&b));
}

/// corral's dense llama pass against candle-transformers' `quantized_llama` on the same
/// GGUF, token by token:
/// - on candle's quantized kernel and candle's attention, the logits agree to rounding;
/// - attention by hand agrees with candle's on dequantized f32 weights. (On 8-bit
///   activations no such check holds: a rounding difference in the last bit can flip an
///   activation's 8-bit value, and the logits then differ by about 0.3-1.)
/// - corral's own kernel rounds activations to 8 bits too, differently: against the pass
///   on dequantized f32 weights it strays as far as candle's kernel does (measured: mean
///   largest logit difference 0.69 against 0.66 over 79 positions).
///
/// A prompt in one chunk (corral on dequantized f32 weights, candle's on 8-bit
/// activations) agrees on the next token and within the quantized kernels' spread.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn the_dense_llama_pass_matches_candle_transformers() {
    use candle_core::Tensor;
    use candle_core::quantized::gguf_file::Content;
    use candle_transformers::models::quantized_llama::ModelWeights;
    use corral_models::llama::{Attention, Kernels, KvType, Llama};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = require::require_input(path, "run scripts/fetch-assets model");
    let dev = Device::Cpu;
    let mut file = std::fs::File::open(&path).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut ours = Llama::from_gguf(&content, &mut file, &dev).unwrap();
    // The reference passes keep their caches in f32, as candle-transformers does; `ours`
    // keeps the default f16 cache, which strays within the 8-bit activations' spread.
    let mut load = |kernels| {
        Llama::from_gguf_with(&content, &mut file, &dev, kernels)
            .unwrap()
            .with_kv_type(KvType::F32)
    };
    let mut ours_on_candle = load(Kernels::Candle).with_attention(Attention::Candle);
    let mut exact = load(Kernels::Dequantized);
    let mut exact_on_candle = exact.clone().with_attention(Attention::Candle);
    let mut theirs = ModelWeights::from_gguf(content, &mut file, &dev).unwrap();
    let (_, tokenizer, _) = load_gguf_llama(&path, &dev).unwrap();
    let text = "Structured output: {\"name\": \"Ada\", \"born\": 1815} and more text after it. ";
    let ids = tokenizer
        .encode(text.repeat(3), false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert!(ids.len() > 40, "{} tokens", ids.len());
    let logits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    let (mut own_total, mut candle_total) = (0f32, 0f32);
    for (pos, &id) in ids.iter().enumerate() {
        let input = Tensor::new(&[id], &dev).unwrap().unsqueeze(0).unwrap();
        let a = logits(ours_on_candle.forward(&input, pos).unwrap());
        let b = logits(theirs.forward(&input, pos).unwrap());
        assert_eq!(a.len(), b.len());
        let w = worst(&a, &b);
        assert!(w < 1e-3, "position {pos}: largest logit difference {w}");
        let own = logits(ours.forward(&input, pos).unwrap());
        let e = logits(exact.forward(&input, pos).unwrap());
        let w = worst(&e, &logits(exact_on_candle.forward(&input, pos).unwrap()));
        assert!(
            w < 1e-3,
            "position {pos}: attention by hand {w} from candle's"
        );
        let (own_err, candle_err) = (worst(&own, &e), worst(&b, &e));
        assert!(
            own_err < 1.5,
            "position {pos}, own kernel: {own_err} from f32"
        );
        own_total += own_err;
        candle_total += candle_err;
        // The same next token as on f32 weights, unless the two best are that close.
        let best = argmax(&e);
        let runner_up = (0..e.len())
            .filter(|&i| i != best)
            .map(|i| e[i])
            .fold(f32::NEG_INFINITY, f32::max);
        if e[best] - runner_up > 2.0 * own_err {
            assert_eq!(argmax(&own), best, "position {pos}, own kernel");
        }
    }
    assert!(
        own_total <= 1.25 * candle_total,
        "own kernel {own_total} from f32 in all, candle's {candle_total}"
    );
    ours.clear_kv_cache();
    let input = Tensor::new(ids.as_slice(), &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let a = logits(ours.forward(&input, 0).unwrap());
    let b = logits(theirs.forward(&input, 0).unwrap());
    assert_eq!(argmax(&a), argmax(&b));
    let w = worst(&a, &b);
    assert!(w < 1.0, "one pass: largest logit difference {w}");
}

/// Decoding steps of several sequences in one pass (`CausalLm::forward_batch`) give each
/// sequence the logits it gets alone: prompts of different lengths, then steps at
/// different positions, with a sequence joining later and one starting over at position
/// 0; the single-sequence `forward` is the reference.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn batched_decoding_steps_give_each_sequence_its_own_logits() {
    use corral_engine::BatchItem;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = require::require_input(path, "run scripts/fetch-assets model");
    let (mut lm, tokenizer, _) = load_gguf_llama(&path, &Device::Cpu).unwrap();
    let encode = |t: &str| TokenId::all(tokenizer.encode(t, false).unwrap().get_ids());
    let prompts = [
        encode("The capital of France is"),
        encode("{\"name\": \"Ada\", \"born\":"),
        encode("Once upon a time, in a land far away, there lived a"),
    ];
    // Each alone: its prompt, then five steps feeding back the argmax.
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    let mut alone = Vec::new();
    for p in &prompts {
        let mut rows = vec![lm.forward(p, 0).unwrap().to_masked_vec(None).unwrap()];
        for step in 0..5 {
            let t = TokenId(argmax(&rows[step]) as u32);
            let l = lm.forward(&[t], p.len() + step).unwrap();
            rows.push(l.to_masked_vec(None).unwrap());
        }
        alone.push(rows);
    }
    let mut seqs: Vec<_> = prompts.iter().map(|_| lm.new_sequence()).collect();
    // How many of each sequence's rows of logits the batches have checked.
    let mut done = [0usize; 3];
    for k in 0..12 {
        if k == 4 {
            // Sequence 2 starts over.
            done[2] = 0;
        }
        // Sequence i joins at step i: its prompt, then one token per step.
        let feeds: Vec<(usize, Vec<TokenId>, usize)> = (0..3)
            .filter(|&i| k >= i && done[i] < 6)
            .map(|i| match done[i] {
                0 => (i, prompts[i].clone(), 0),
                n => {
                    let t = TokenId(argmax(&alone[i][n - 1]) as u32);
                    (i, vec![t], prompts[i].len() + n - 1)
                }
            })
            .collect();
        if feeds.is_empty() {
            break;
        }
        let mut batch: Vec<BatchItem> = seqs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, sequence)| {
                let (_, tokens, pos) = feeds.iter().find(|f| f.0 == i)?;
                Some(BatchItem {
                    tokens,
                    pos: *pos,
                    sequence,
                })
            })
            .collect();
        let out = lm.forward_batch(&mut batch).unwrap();
        for ((i, _, _), l) in feeds.iter().zip(out) {
            let got = l.to_masked_vec(None).unwrap();
            let want = &alone[*i][done[*i]];
            let worst = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "sequence {i}, row {}: {worst}", done[*i]);
            done[*i] += 1;
        }
    }
    assert_eq!(done, [6, 6, 6]);
}

/// A sequence copied from the first positions of another (`CausalLm::copy_prefix`, what
/// the server's prompt cache keeps) continues as the whole prompt run from position 0
/// does, holds only the bytes of its positions, and leaves the original as it was.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_copied_prefix_continues_as_the_whole_prompt() {
    use corral_engine::{BatchItem, Sequence};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = require::require_input(path, "run scripts/fetch-assets model");
    let (mut lm, tokenizer, _) = load_gguf_llama(&path, &Device::Cpu).unwrap();
    let encode = |t: &str| TokenId::all(tokenizer.encode(t, false).unwrap().get_ids());
    let first = encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nName a colour.",
    );
    let second = encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nName a bird.",
    );
    let shared = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        shared > 10 && shared < second.len(),
        "{shared} shared tokens"
    );
    let run = |lm: &mut dyn corral_engine::CausalLm, seq: &mut Sequence, t: &[TokenId], pos| {
        let mut batch = [BatchItem {
            tokens: t,
            pos,
            sequence: seq,
        }];
        let out = lm.forward_batch(&mut batch).unwrap();
        out[0].to_masked_vec(None).unwrap()
    };
    let mut original = lm.new_sequence();
    run(&mut lm, &mut original, &first, 0);
    let bytes = lm.sequence_bytes(&original).unwrap();
    let mut copy = lm.copy_prefix(&original, shared).unwrap();
    // SmolLM2-135M: 30 layers, keys and values of 3 heads of 64 f16 each per position.
    assert_eq!(lm.sequence_bytes(&copy), Some(shared * 30 * 2 * 3 * 64 * 2));
    assert!(bytes >= first.len() * 30 * 2 * 3 * 64 * 2);
    let got = run(&mut lm, &mut copy, &second[shared..], shared);
    let mut whole = lm.new_sequence();
    let want = run(&mut lm, &mut whole, &second, 0);
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(worst(&got, &want) < 1e-4, "{}", worst(&got, &want));
    // The original continues as if no copy had been made.
    let next = encode(" Blue");
    let a = run(&mut lm, &mut original, &next, first.len());
    let mut again = lm.new_sequence();
    run(&mut lm, &mut again, &first, 0);
    let b = run(&mut lm, &mut again, &next, first.len());
    assert!(worst(&a, &b) < 1e-4, "{}", worst(&a, &b));
    // Asking for more positions than the sequence holds copies what it holds.
    let all = lm.copy_prefix(&original, usize::MAX).unwrap();
    assert_eq!(
        lm.sequence_bytes(&all),
        Some((first.len() + next.len()) * 30 * 2 * 3 * 64 * 2)
    );
}

/// A pass that asks for several positions' logits (`CausalLm::forward_batch_tails`: a
/// drawn token and the span the grammar forces after it) gives each the logits that
/// feeding its tokens one at a time gives; a long feed (past a step pass's positions) gives
/// its wanted positions too.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn a_pass_gives_the_logits_of_each_wanted_position() {
    use corral_engine::{BatchItem, Sequence};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = require::require_input(path, "run scripts/fetch-assets model");
    let (mut lm, tokenizer, _) = load_gguf_llama(&path, &Device::Cpu).unwrap();
    let encode = |t: &str| TokenId::all(tokenizer.encode(t, false).unwrap().get_ids());
    let prompt = encode("Describe a T-shirt as JSON:");
    let span = encode("{\"size\": \"medium\", \"count\": 4}");
    let long = encode(&"The quick brown fox jumps over the lazy dog. ".repeat(16));
    assert!(
        span.len() >= 4 && long.len() > 128,
        "{} {}",
        span.len(),
        long.len()
    );
    let one = |lm: &mut dyn CausalLm, seq: &mut Sequence, t: &[TokenId], pos| {
        let mut batch = [BatchItem {
            tokens: t,
            pos,
            sequence: seq,
        }];
        lm.forward_batch(&mut batch).unwrap()[0]
            .to_masked_vec(None)
            .unwrap()
    };
    // The reference: each position fed alone.
    let mut alone = lm.new_sequence();
    one(&mut lm, &mut alone, &prompt, 0);
    let want: Vec<Vec<f32>> = (0..span.len())
        .map(|j| one(&mut lm, &mut alone, &span[j..j + 1], prompt.len() + j))
        .collect();
    let mut long_alone = lm.new_sequence();
    let head = long.len() - 2;
    let long_want = [
        one(&mut lm, &mut long_alone, &long[..=head], 0),
        one(&mut lm, &mut long_alone, &long[head + 1..], head + 1),
    ];
    // The same in one call: the span's last three positions, one position of a second
    // sequence, the long feed's last two.
    let mut a = lm.new_sequence();
    one(&mut lm, &mut a, &prompt, 0);
    let mut b = lm.new_sequence();
    one(&mut lm, &mut b, &prompt, 0);
    let mut c = lm.new_sequence();
    let k = span.len() - 3;
    let mut batch = [
        BatchItem {
            tokens: &span[..k],
            pos: prompt.len(),
            sequence: &mut a,
        },
        BatchItem {
            tokens: &span[..1],
            pos: prompt.len(),
            sequence: &mut b,
        },
        BatchItem {
            tokens: &long,
            pos: 0,
            sequence: &mut c,
        },
    ];
    let tails = [k, 1, 2];
    let got: Vec<Vec<f32>> = lm
        .forward_batch_tails(&mut batch, &tails)
        .unwrap()
        .iter()
        .map(|l| l.to_masked_vec(None).unwrap())
        .collect();
    assert_eq!(got.len(), k + 1 + 2);
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    for j in 0..k {
        assert!(worst(&got[j], &want[j]) < 1e-4, "position {j}");
    }
    assert!(worst(&got[k], &want[0]) < 1e-4, "the second sequence");
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    for (g, w) in got[k + 1..].iter().zip(&long_want) {
        // A long feed runs in chunks on other kernels than a step (see the chunk test).
        assert_eq!(argmax(g), argmax(w));
        assert!(worst(g, w) < 1.0, "{}", worst(g, w));
    }
    // The sequences continue from every position run.
    let next = one(&mut lm, &mut a, &span[k..k + 1], prompt.len() + k);
    assert!(worst(&next, &want[k]) < 1e-4);
    // A tail longer than the feed is refused.
    let mut d = lm.new_sequence();
    let mut batch = [BatchItem {
        tokens: &span[..2],
        pos: 0,
        sequence: &mut d,
    }];
    assert!(lm.forward_batch_tails(&mut batch, &[3]).is_err());
}

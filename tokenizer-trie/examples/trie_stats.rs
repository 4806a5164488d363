//! Vocabulary, trie and slice build time and memory for tokenizer.json files:
//! `cargo run --release -p corral-trie --example trie_stats -- assets/tokenizers/*/tokenizer.json`
use corral_trie::{Alphabet, CharSlice, TokenTrie, Vocabulary};
use std::time::Instant;

fn main() {
    for path in std::env::args().skip(1) {
        let t0 = Instant::now();
        let tok = tokenizers::Tokenizer::from_file(&path).expect("tokenizer.json");
        let t1 = Instant::now();
        let vocab = Vocabulary::from_tokenizer(&tok).expect("vocabulary");
        let t2 = Instant::now();
        let mut best = f64::MAX;
        let mut trie = TokenTrie::new(&vocab);
        for _ in 0..5 {
            let t = Instant::now();
            trie = TokenTrie::new(&vocab);
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{path}: {} ids ({} special); load tokenizer.json {:.0} ms, bytes of every token {:.0} ms; trie: {} nodes, build {best:.1} ms (best of 5), {:.2} MiB",
            vocab.len(),
            vocab.special_tokens().len(),
            (t1 - t0).as_secs_f64() * 1e3,
            (t2 - t1).as_secs_f64() * 1e3,
            trie.nodes().len(),
            trie.memory_usage() as f64 / (1 << 20) as f64
        );
        for a in Alphabet::ALL {
            let t = Instant::now();
            let mut slice = CharSlice::with_alphabet(&vocab, vocab.len(), a);
            if a == Alphabet::Strings {
                // As `TokenSpace` does: the tails of the trie's tokens, in its order.
                slice.index_trie(&trie, &vocab);
            }
            println!(
                "  slice by {a:?}: build {:.1} ms, {} suffixes ({} trie nodes), longest run {} characters, longest prefix {}, {:.2} MiB",
                t.elapsed().as_secs_f64() * 1e3,
                slice.suffix_count(),
                slice.suffixes().nodes().len(),
                slice.max_chars(),
                slice.max_prefix(),
                slice.memory_usage() as f64 / (1 << 20) as f64
            );
        }
    }
}

//! Any text through every splitter, whole and in chunks (the first byte picks the chunk
//! size): no panic, and the same summary either way.
#![no_main]
use corral_split::{Format, GenericParser, HarmonyMode, HarmonyParser, Splitter, split_all};
use corral_split::postproc::{PostProcessor, PostprocOptions};
use libfuzzer_sys::fuzz_target;

fn splitters() -> Vec<Box<dyn Splitter>> {
    vec![
        Box::new(HarmonyParser::new(HarmonyMode::Lenient)),
        Box::new(HarmonyParser::new(HarmonyMode::Strict)),
        Box::new(GenericParser::new(Format::hermes()).unwrap()),
        Box::new(GenericParser::new(Format::llama3()).unwrap()),
        Box::new(GenericParser::new(Format::mistral()).unwrap()),
        Box::new(GenericParser::new(Format::qwen3_coder().prefilled(true)).unwrap()),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&k, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let size = (k as usize % 13) + 1;
    let chars: Vec<char> = text.chars().collect();
    let chunks: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    for (whole, chunked) in splitters().into_iter().zip(splitters()) {
        let mut a = whole;
        let mut b = chunked;
        let sa = split_all(a.as_mut(), [text.as_ref()]).0;
        let sb = split_all(b.as_mut(), chunks.iter().map(String::as_str)).0;
        assert_eq!(sa, sb);
    }
    let mut p = PostProcessor::new(GenericParser::new(Format::hermes()).unwrap(), PostprocOptions::default());
    for c in &chunks {
        p.push(c);
    }
    p.finish();
});

//! Deterministic pretty-printed JSON documents for benchmarks and tests, inside json.gbnf's
//! language (indentation of at most 20 spaces, integers of at most 16 digits, exponents
//! without zeros after the first digit, no DEL in strings).

/// A document of about `target` bytes (a little more): `{"items": [record, ...]}`.
pub fn document(target: usize, seed: u64) -> String {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut out = String::with_capacity(target + 4096);
    out.push_str("{\n  \"items\": [");
    let mut i = 0u64;
    while out.len() < target {
        if i > 0 {
            out.push(',');
        }
        out.push_str("\n    {\n");
        let r = next();
        let fields = [
            format!("      \"id\": {i}"),
            format!("      \"name\": \"user_{}\"", r % 100_000),
            format!("      \"email\": \"user{}@example.com\"", r % 977),
            format!("      \"score\": {}.{}", (r >> 8) % 1000, (r >> 20) % 100),
            format!(
                "      \"ratio\": -{}.{}e-{}",
                (r >> 4) % 10,
                (r >> 12) % 1000,
                1 + (r >> 30) % 9
            ),
            format!(
                "      \"active\": {}",
                if r & 1 == 0 { "true" } else { "false" }
            ),
            "      \"parent\": null".to_string(),
            format!(
                "      \"note\": \"Line one\\nline \\\"two\\\" \\u00e9t\\u00e9, caf\\u00e9 \\\\ {} \u{65e5}\u{672c}\u{8a9e} \u{1F600}\"",
                r % 31
            ),
            format!(
                "      \"tags\": [\"t{}\", \"t{}\", \"t{}\"]",
                r % 7,
                (r >> 3) % 11,
                (r >> 6) % 13
            ),
            format!(
                "      \"address\": {{\n        \"street\": \"{} Main St\",\n        \"zip\": \"{:05}\",\n        \"geo\": [{}.{}, -{}.{}]\n      }}",
                r % 9999,
                (r >> 16) % 100_000,
                (r >> 24) % 90,
                (r >> 28) % 1_000_000,
                (r >> 32) % 180,
                (r >> 40) % 1_000_000
            ),
        ];
        out.push_str(&fields.join(",\n"));
        out.push_str("\n    }");
        i += 1;
    }
    out.push_str("\n  ]\n}\n");
    out
}

//! String formats as regular expressions over the string's value.
//!
//! Each follows its RFC strictly enough that nothing invalid gets through; where a rule is
//! not regular or not worth the automaton, the format is *stricter* than the RFC (never
//! looser), and says so here:
//! - `date`, `date-time`: days per month and leap years exact (RFC 3339); leap seconds
//!   (`:60`) and the year 0000 are refused (Python's `datetime` reads years 1 to 9999).
//! - `email`: the dot-atom local part and a hostname domain (RFC 5321 without quoted local
//!   parts or address literals). The local part is at most 64 characters as RFC 5321
//!   says, counted exactly only without dots: one with dots is at most 32 characters
//!   (63 with every other one a dot), since counting characters across dot-separated runs
//!   is not a small automaton.
//! - `hostname` (and the domain of `email`): labels of letters, digits and hyphens, not
//!   starting or ending with a hyphen (RFC 1123), without hyphens in both the third and
//!   fourth places (RFC 5891 keeps those for A-labels such as `xn--`, whose Punycode is not
//!   regular). Lengths are not counted: a label over 63 characters or a name over 253 would
//!   get through (the one place a format is looser than its RFC: counting them makes the
//!   automaton about 130 states, and its product with a `maxLength` of 254 more than
//!   `max_product_states`).
//! - `uri`, `uri-reference`: RFC 3986's grammar without IP literals in brackets
//!   (`http://[::1]/` is refused: the IPv6 grammar inside would make the automaton ten
//!   times larger).

use crate::pattern::{Encoder, Spelling};
use corral_grammar::ast::Expr;
use regex_syntax::hir::Hir;
use std::sync::OnceLock;

/// Years 0001 to 9999: RFC 3339 allows 0000, but Python's `datetime` (and with it pydantic)
/// and most date libraries do not, so a generated date is one they all read.
const DATE: &str = r"(?:(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)-02-(?:0[1-9]|1[0-9]|2[0-8])|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[2468][048]|[13579][26])00)-02-29)";
const TIME: &str = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
const H16: &str = r"[0-9A-Fa-f]{1,4}";
/// A DNS label: letters, digits and hyphens, not starting or ending with a hyphen, and
/// not `--` in the third and fourth places. Its length is not counted (see the module docs).
const LABEL: &str = "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,2}[A-Za-z0-9])?|[A-Za-z0-9][A-Za-z0-9-](?:[A-Za-z0-9][A-Za-z0-9-]|-[A-Za-z0-9])[A-Za-z0-9-]*[A-Za-z0-9])";
const UNRESERVED: &str = r"A-Za-z0-9\-._~";
const SUB_DELIMS: &str = r"!$&'()*+,;=";

fn ipv4() -> String {
    format!(r"{OCTET}(?:\.{OCTET}){{3}}")
}

fn ipv6() -> String {
    let ls32 = format!(r"(?:{H16}:{H16}|{})", ipv4());
    let h = |n: usize| format!("(?:{H16}:){{{n}}}");
    let upto = |n: usize| {
        if n == 0 {
            String::new()
        } else {
            format!("(?:{H16}:){{0,{n}}}{H16}")
        }
    };
    [
        format!("{}{ls32}", h(6)),
        format!("::{}{ls32}", h(5)),
        format!("(?:{H16})?::{}{ls32}", h(4)),
        format!("(?:{})?::{}{ls32}", upto(1), h(3)),
        format!("(?:{})?::{}{ls32}", upto(2), h(2)),
        format!("(?:{})?::{H16}:{ls32}", upto(3)),
        format!("(?:{})?::{ls32}", upto(4)),
        format!("(?:{})?::{H16}", upto(5)),
        format!("(?:{})?::", upto(6)),
    ]
    .iter()
    .map(|a| format!("(?:{a})"))
    .collect::<Vec<_>>()
    .join("|")
}

fn hostname() -> String {
    format!(r"{LABEL}(?:\.{LABEL})*")
}

/// RFC 3986 pieces.
fn uri_parts() -> (String, String, String) {
    let pct = r"%[0-9A-Fa-f]{2}";
    let pchar = format!(r"(?:[{UNRESERVED}{SUB_DELIMS}:@]|{pct})");
    let segment = format!("{pchar}*");
    let segment_nz = format!("{pchar}+");
    let userinfo = format!(r"(?:[{UNRESERVED}{SUB_DELIMS}:]|{pct})*");
    let reg_name = format!(r"(?:[{UNRESERVED}{SUB_DELIMS}]|{pct})*");
    let host = format!(r"(?:{}|{reg_name})", ipv4());
    let authority = format!(r"(?:{userinfo}@)?{host}(?::[0-9]*)?");
    let path_abempty = format!("(?:/{segment})*");
    let path_absolute = format!("/(?:{segment_nz}(?:/{segment})*)?");
    let path_rootless = format!("{segment_nz}(?:/{segment})*");
    let query = format!(r"(?:\?(?:{pchar}|[/?])*)?(?:#(?:{pchar}|[/?])*)?");
    let hier = format!("(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)");
    let uri = format!("[A-Za-z][A-Za-z0-9+.-]*:{hier}{query}");
    let segment_nz_nc = format!(r"(?:[{UNRESERVED}{SUB_DELIMS}@]|{pct})+");
    let path_noscheme = format!("{segment_nz_nc}(?:/{segment})*");
    let relative =
        format!("(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|){query}");
    (uri, relative, authority)
}

fn duration() -> String {
    let second = r"[0-9]+S";
    let minute = format!(r"[0-9]+M(?:{second})?");
    let hour = format!(r"[0-9]+H(?:{minute})?");
    let time = format!("T(?:{hour}|{minute}|{second})");
    let day = r"[0-9]+D";
    let month = format!(r"[0-9]+M(?:{day})?");
    let year = format!(r"[0-9]+Y(?:{month})?");
    let date = format!("(?:{day}|{month}|{year})(?:{time})?");
    format!(r"P(?:{date}|{time}|[0-9]+W)")
}

/// The formats corral checks.
pub const KNOWN: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "uri",
    "uri-reference",
];

/// The regex of a format (the whole string), or `None` if corral does not know it.
pub(crate) fn format_hir(name: &str) -> Option<Hir> {
    known(name).map(|i| format_tables()[i].0.clone())
}

/// The GBNF of format `name`'s JSON text in `spelling` (without quotes): a constant of the
/// process, encoded on first use.
pub(crate) fn format_gbnf(name: &str, spelling: Spelling) -> Option<&'static Expr> {
    let i = known(name)?;
    let (hir, text) = &format_tables()[i];
    text[spelling as usize]
        .get_or_init(|| crate::gbnf::from_hir(&Encoder::default().encode(hir, spelling)))
        .as_ref()
}

fn known(name: &str) -> Option<usize> {
    KNOWN.iter().position(|k| *k == name)
}

type FormatTable = (Hir, [OnceLock<Option<Expr>>; 2]);

/// Each of [`KNOWN`]'s regexes, parsed once per process.
fn format_tables() -> &'static [FormatTable] {
    static TABLES: OnceLock<Vec<FormatTable>> = OnceLock::new();
    TABLES.get_or_init(|| {
        KNOWN
            .iter()
            .map(|name| {
                let re = format_regex(name).expect("every known format has a regex");
                let hir = regex_syntax::ParserBuilder::new()
                    .build()
                    .parse(&re)
                    .expect("format regexes are valid");
                (hir, [OnceLock::new(), OnceLock::new()])
            })
            .collect()
    })
}

fn format_regex(name: &str) -> Option<String> {
    Some(match name {
        "date" => DATE.to_string(),
        "time" => TIME.to_string(),
        "date-time" => format!("{DATE}[Tt]{TIME}"),
        "duration" => duration(),
        "email" => {
            let a = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
            format!(r"(?:{a}{{1,64}}|{a}(?:\.?{a}){{0,31}})@{}", hostname())
        }
        "hostname" => hostname(),
        "ipv4" => ipv4(),
        "ipv6" => ipv6(),
        "uuid" => r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
            .to_string(),
        "uri" => uri_parts().0,
        "uri-reference" => {
            let (uri, rel, _) = uri_parts();
            format!("(?:{uri})|(?:{rel})")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::LexemeDfa;

    fn check(name: &str, ok: &[&str], bad: &[&str]) {
        let d = LexemeDfa::build(&format_hir(name).unwrap(), 1 << 26).unwrap();
        for s in ok {
            assert!(d.matches(s.as_bytes()), "{name}: {s} should match");
        }
        for s in bad {
            assert!(!d.matches(s.as_bytes()), "{name}: {s} should not match");
        }
    }

    #[test]
    fn formats() {
        for f in KNOWN {
            assert!(format_hir(f).is_some());
        }
        check(
            "date",
            &[
                "2024-02-29",
                "2000-02-29",
                "2023-12-31",
                "1999-04-30",
                "0001-01-01",
                "0010-10-10",
                "0100-01-31",
                "1000-06-30",
                "0400-02-29",
                "9999-12-31",
            ],
            &[
                "2023-02-29",
                "1900-02-29",
                "2023-04-31",
                "2023-13-01",
                "2023-1-01",
                "0000-01-01",
                "0000-02-29",
                "0000-04-30",
            ],
        );
        check(
            "date-time",
            &["2024-01-05T10:20:30Z", "2024-01-05t10:20:30.123+05:30"],
            &[
                "2024-01-05T24:00:00Z",
                "2024-01-05T10:20:30",
                "2024-01-05 10:20:30Z",
                "0000-01-05T10:20:30Z",
            ],
        );
        check(
            "time",
            &["23:59:59Z", "00:00:00-08:00"],
            &["23:59:60Z", "1:00:00Z"],
        );
        check(
            "ipv4",
            &["0.0.0.0", "255.255.255.255", "10.1.2.3"],
            &["256.1.1.1", "01.1.1.1", "1.1.1"],
        );
        check(
            "ipv6",
            &[
                "::1",
                "::",
                "2001:db8::8a2e:370:7334",
                "::ffff:192.0.2.1",
                "1:2:3:4:5:6:7:8",
            ],
            &["1:2:3:4:5:6:7:8:9", ":::", "12345::1", "1::2::3"],
        );
        check(
            "uuid",
            &["123e4567-e89b-12d3-a456-426614174000"],
            &[
                "123e4567e89b12d3a456426614174000",
                "123e4567-e89b-12d3-a456-42661417400g",
            ],
        );
        let (l64, l65) = ("a".repeat(64), "a".repeat(65));
        let dotted = format!("{}@x.y", "a.".repeat(15) + "ab");
        check(
            "email",
            &[
                "joe@example.com",
                "a.b+c@x-y.z",
                &format!("{l64}@x.y"),
                &dotted,
            ],
            &[
                "joe",
                "joe@",
                "a..b@x.y",
                "@x.y",
                "a b@x.y",
                &format!("{l65}@x.y"),
            ],
        );
        let d63 = "d".repeat(63);
        check(
            "hostname",
            &[
                "example.com",
                "a-b.c",
                "localhost",
                "ab-c.d",
                "a--b",
                "abc--d.e",
                &format!("{d63}.{d63}.{d63}"),
                "a.b.c.d.e.f.g.h.i.j",
            ],
            &[
                "-a.com",
                "a..b",
                "a_b.com",
                "",
                "ab--c.com",
                "xn--nxasmq6b.com",
            ],
        );
        check(
            "uri",
            &[
                "https://example.com/a/b?c=d#e",
                "mailto:joe@example.com",
                "urn:isbn:0451450523",
                "file:///etc/hosts",
            ],
            &[
                "//example.com",
                "example.com",
                "http://a b",
                "http://x/%zz",
                "1http://x",
                "http://[::1]/",
            ],
        );
        check(
            "uri-reference",
            &["/a/b", "../x?y", "https://x.y", "#frag", ""],
            &["a b", "http://x/%g0"],
        );
        check(
            "duration",
            &["P1Y2M3DT4H5M6S", "PT1M", "P3W", "P1D"],
            &["P", "PT", "P1H", "1Y"],
        );
    }

    /// Strings walked at random through each format's automaton (long ones included, to
    /// reach the length bounds) are valid for the validator corral reports with: a format
    /// may be stricter than its RFC, never looser.
    #[test]
    fn walked_strings_are_valid_for_the_validator() {
        let mut next = {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            }
        };
        for name in KNOWN {
            let d = LexemeDfa::build(&format_hir(name).unwrap(), 1 << 26).unwrap();
            let schema = serde_json::json!({"type": "string", "format": name});
            let v = crate::validate::Validator::new(&schema).unwrap();
            for walk in 0..400 {
                // Stop at an accepting state with chance 1 in `patience`.
                let patience = [2, 20, 200][walk % 3];
                let (mut s, mut text) = (d.start(), Vec::new());
                loop {
                    if s.is_accepting() && next() % patience == 0 {
                        break;
                    }
                    let live: Vec<u8> = (0x20u8..0x7f)
                        .filter(|&b| !d.next(s, b).is_dead())
                        .collect();
                    if live.is_empty() {
                        break;
                    }
                    let b = live[(next() % live.len() as u64) as usize];
                    s = d.next(s, b);
                    text.push(b);
                }
                assert!(s.is_accepting(), "{name}: walk ended in a live state");
                let text = String::from_utf8(text).unwrap();
                // The looseness the module docs own to: hostname lengths.
                let domain = match *name {
                    "hostname" => Some(text.as_str()),
                    "email" => text.rsplit_once('@').map(|(_, d)| d),
                    _ => None,
                };
                if domain.is_some_and(|d| d.len() > 253 || d.split('.').any(|l| l.len() > 63)) {
                    continue;
                }
                assert!(
                    v.is_valid(&serde_json::Value::String(text.clone())),
                    "{name}: {text:?} ({} bytes) is not valid",
                    text.len()
                );
            }
        }
    }
}

use super::*;
use corral_grammar::{CompileOptions, MatchOutcome, compile_gbnf, match_bytes};

fn accepts(expr: &Expr, s: &str) -> bool {
    let g = compile_gbnf(&format!("root ::= {expr}"), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{expr}"));
    match_bytes(&g, s.as_bytes()).unwrap() == MatchOutcome::Accepted
}

fn d(s: &str) -> SDec {
    SDec::parse(s).unwrap()
}

#[test]
fn parse_is_exact() {
    assert_eq!(d("1e30").to_string(), format!("1{}", "0".repeat(30)));
    assert_eq!(d("-0.0").to_string(), "0");
    assert_eq!(d("1.50").to_string(), "1.5");
    assert_eq!(d("12.5e-3").to_string(), "0.0125");
    assert_eq!(d("0.5").ceil().to_string(), "1");
    assert_eq!(d("-0.5").ceil().to_string(), "0");
    assert_eq!(d("-0.5").floor().to_string(), "-1");
    assert_eq!(d("-1").succ().to_string(), "0");
    assert_eq!(d("0").pred().to_string(), "-1");
    assert!(d("-2") < d("-1.5"));
    assert!(d("0.25") < d("0.3"));
}

#[test]
fn integer_ranges_match_brute_force() {
    let bounds = [
        None,
        Some(-120),
        Some(-10),
        Some(-1),
        Some(0),
        Some(1),
        Some(7),
        Some(9),
        Some(10),
        Some(99),
        Some(100),
        Some(101),
        Some(250),
    ];
    for lo in bounds {
        for hi in bounds {
            let l = lo.map(SDec::from_i128);
            let h = hi.map(SDec::from_i128);
            let expr = integer_range(l.as_ref(), h.as_ref());
            let Some(expr) = expr else {
                assert!(lo.unwrap() > hi.unwrap(), "{lo:?} {hi:?}");
                continue;
            };
            let g = compile_gbnf(&format!("root ::= {expr}"), &CompileOptions::default()).unwrap();
            for v in -300i128..=300 {
                let inside = lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
                let got =
                    match_bytes(&g, v.to_string().as_bytes()).unwrap() == MatchOutcome::Accepted;
                assert_eq!(got, inside, "{v} in [{lo:?}, {hi:?}]: {expr}");
            }
            let zero_in = lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0);
            assert_eq!(
                match_bytes(&g, b"-0").unwrap() == MatchOutcome::Accepted,
                zero_in
            );
            assert_ne!(match_bytes(&g, b"007").unwrap(), MatchOutcome::Accepted);
        }
    }
}

#[test]
fn huge_bounds_are_exact() {
    let hi = d("1e30");
    let e = integer_range(Some(&SDec::zero()), Some(&hi)).unwrap();
    assert!(accepts(&e, &format!("1{}", "0".repeat(30))));
    assert!(!accepts(&e, &format!("1{}1", "0".repeat(29))));
    assert!(accepts(&e, &"9".repeat(30)));
}

fn frac_cases() -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..=40i32 {
        for f in ["", ".0", ".5", ".25", ".05", ".50", ".999", ".001"] {
            v.push(format!("{i}{f}"));
            v.push(format!("-{i}{f}"));
        }
    }
    v
}

fn value(s: &str) -> f64 {
    s.parse().unwrap()
}

type Bounds = Option<(&'static str, bool)>;

/// For every pair of bounds from `bs`: compiles the range and checks each case `(text,
/// spelled as ranges take it)` is accepted exactly when its value lies in the range
/// and `spelled` (or `any_spelling(lo, hi)`).
fn check_ranges(
    bs: &[Bounds],
    cases: &[(String, bool)],
    any_spelling: impl Fn(Bounds, Bounds) -> bool,
) {
    for &lo in bs {
        for &hi in bs {
            let bound = |b: Bounds| {
                b.map(|(v, s)| Bound {
                    value: d(v),
                    strict: s,
                })
            };
            let expr = number_range(bound(lo).as_ref(), bound(hi).as_ref());
            let g = expr.as_ref().map(|e| {
                compile_gbnf(&format!("root ::= {e}"), &CompileOptions::default())
                    .unwrap_or_else(|err| panic!("{err}\n{e}"))
            });
            for (s, spelled) in cases {
                let x = value(s);
                let inside = lo.is_none_or(|(v, st)| if st { x > value(v) } else { x >= value(v) })
                    && hi.is_none_or(|(v, st)| if st { x < value(v) } else { x <= value(v) });
                let want = inside && (*spelled || any_spelling(lo, hi));
                let got = g.as_ref().is_some_and(|g| {
                    match_bytes(g, s.as_bytes()).unwrap() == MatchOutcome::Accepted
                });
                assert_eq!(got, want, "{s} in {lo:?}..{hi:?}: {expr:?}");
            }
        }
    }
}

#[test]
fn decimal_ranges_match_brute_force() {
    let bs = [
        None,
        Some(("0", false)),
        Some(("0", true)),
        Some(("0.5", false)),
        Some(("0.5", true)),
        Some(("-2.25", false)),
        Some(("-2.25", true)),
        Some(("3", true)),
        Some(("3", false)),
        Some(("12.05", false)),
        Some(("20", true)),
    ];
    let cases: Vec<(String, bool)> = frac_cases().into_iter().map(|s| (s, true)).collect();
    check_ranges(&bs, &cases, |_, _| true);
}

/// Numbers with exponents: normalized (`2.5e1`, zero as `0e0`) and not (`25e0`).
fn exp_cases() -> Vec<(String, bool)> {
    let mut v = Vec::new();
    let mantissas = [
        ("1", true),
        ("1.5", true),
        ("2.25", true),
        ("2.250", true),
        ("5", true),
        ("9.99", true),
        ("1.205", true),
        ("0", true),
        ("0.0", true),
        ("25", false),
        ("0.5", false),
        ("12.05", false),
    ];
    for (m, normal) in mantissas {
        for e in [
            "e-3", "E-2", "e-01", "e-1", "e0", "e-0", "E+0", "e1", "e+01", "e2", "E3",
        ] {
            v.push((format!("{m}{e}"), normal));
            v.push((format!("-{m}{e}"), normal));
        }
    }
    v
}

#[test]
fn decimal_ranges_take_normalized_exponents() {
    let bs = [
        None,
        Some(("0", false)),
        Some(("0", true)),
        Some(("0.5", false)),
        Some(("0.5", true)),
        Some(("-2.25", false)),
        Some(("-2.25", true)),
        Some(("3", true)),
        Some(("12.05", false)),
        Some(("20", true)),
        Some(("0.00225", false)),
    ];
    // Without bounds, or with only a bound at zero, every spelling.
    check_ranges(&bs, &exp_cases(), |lo, hi| {
        hi.is_none() && lo.is_none_or(|(v, _)| v == "0")
    });
}

#[test]
fn zero_bounds_keep_exponents() {
    let b = Bound {
        value: SDec::zero(),
        strict: true,
    };
    let e = number_range(Some(&b), None).unwrap();
    assert!(accepts(&e, "1e5"));
    assert!(accepts(&e, "0.001e-3"));
    assert!(!accepts(&e, "0e5"));
    assert!(!accepts(&e, "-1"));
    assert!(!accepts(&e, "0.000"));
}

#[test]
fn multiples() {
    for k in [2u64, 4, 5, 8, 10, 20, 25, 50, 100, 125] {
        let e = multiples_by_last_digits(k).unwrap();
        let g = compile_gbnf(&format!("root ::= {e}"), &CompileOptions::default()).unwrap();
        for v in -1100i64..=1100 {
            let got = match_bytes(&g, v.to_string().as_bytes()).unwrap() == MatchOutcome::Accepted;
            assert_eq!(got, v % k as i64 == 0, "{v} multiple of {k}: {e}");
        }
    }
    assert!(multiples_by_last_digits(3).is_none());
    let e = listed_multiples(3, &d("-7"), &d("20"), 100)
        .unwrap()
        .unwrap();
    for v in -10..=25 {
        assert_eq!(
            accepts(&e, &v.to_string()),
            (-7..=20).contains(&v) && v % 3 == 0,
            "{v}"
        );
    }
}

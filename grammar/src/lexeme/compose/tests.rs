use super::*;
use regex_syntax::ParserBuilder;

fn hir(re: &str) -> Hir {
    ParserBuilder::new().build().parse(re).unwrap()
}

/// Every live state that strings over `alphabet` reach from the start.
fn reachable(d: &LexemeDfa, alphabet: &[u8]) -> Vec<StateId> {
    let mut states = vec![d.start()];
    let mut k = 0;
    while k < states.len() {
        for &b in alphabet {
            let t = d.next(states[k], b);
            if t != DEAD && !states.contains(&t) {
                states.push(t);
            }
        }
        k += 1;
    }
    states
}

#[test]
fn representatives_behave_alike_within_their_depth() {
    for re in ["a[a-c]{2,12}x[bc]{0,9}", "[a-c]{3,12}", "x[a-c]{0,9}y?"] {
        representatives_alike(re);
    }
}

fn representatives_alike(re: &str) {
    let d = compose(&hir(re), 1 << 24, None).unwrap().unwrap();
    let alphabet = b"abcxy";
    let states = reachable(&d, alphabet);
    let mut moved = 0;
    for &s in &states {
        for depth in 0..=3 {
            let r = d.representative(s, depth);
            if r == s {
                continue;
            }
            moved += 1;
            assert_eq!(r.is_accepting(), s.is_accepting());
            // Every string of at most `depth` bytes: the same life and acceptance.
            let mut frontier = vec![(s, r)];
            for _ in 0..depth {
                let mut next = Vec::new();
                for (x, y) in frontier {
                    for &b in alphabet {
                        let (x, y) = (d.next(x, b), d.next(y, b));
                        assert_eq!(x == DEAD, y == DEAD, "{re}: {s} as {r} at {depth}");
                        assert_eq!(x.is_accepting(), y.is_accepting(), "{re}");
                        if x != DEAD {
                            next.push((x, y));
                        }
                    }
                }
                frontier = next;
            }
        }
    }
    assert!(
        moved > 5,
        "{re}: counts far from their bounds have representatives"
    );
}

#[test]
fn recounted_targets_are_where_the_bytes_lead() {
    for re in ["a[a-c]{2,12}x[bc]{0,9}", "[a-c]{3,12}", "x(?:ab|c){0,9}y?"] {
        let d = compose(&hir(re), 1 << 24, None).unwrap().unwrap();
        let alphabet = b"abcxy";
        let mut moved = 0;
        for s in reachable(&d, alphabet) {
            let r = d.representative(s, 2);
            if r == s {
                continue;
            }
            moved += 1;
            // Every string of up to two bytes leads from `s` where it leads from `r`,
            // recounted.
            for &a in alphabet {
                let (ra, sa) = (d.next(r, a), d.next(s, a));
                assert_eq!(d.recount(ra, r, s), sa, "{re}: {s} as {r}, {}", a as char);
                for &b in alphabet {
                    assert_eq!(d.recount(d.next(ra, b), r, s), d.next(sa, b), "{re}");
                }
            }
        }
        assert!(moved > 3, "{re}");
    }
}

/// Every string over `alphabet` up to `len` bytes: the composed DFA and the one built by
/// subset construction agree on life, acceptance and the shortest completion's length.
fn agree(re: &str, alphabet: &[u8], len: usize) {
    let h = hir(re);
    let composed = compose(&h, 1 << 24, None)
        .unwrap_or_else(|| panic!("{re} composes"))
        .unwrap();
    let tables = LexemeDfa::build_tables(&h, 1 << 24).unwrap();
    let mut frontier = vec![(Vec::new(), composed.start(), tables.start())];
    for _ in 0..=len {
        let mut next = Vec::new();
        for (s, a, b) in frontier {
            assert_eq!(a == DEAD, b == DEAD, "{re} {s:?}: life");
            if a == DEAD {
                continue;
            }
            assert_eq!(a.is_accepting(), b.is_accepting(), "{re} {s:?}");
            assert_eq!(a.can_continue(), b.can_continue(), "{re} {s:?}");
            assert_eq!(
                composed.shortest(a).map(|x| x.0),
                tables.shortest(b).map(|x| x.0),
                "{re} {s:?}: shortest"
            );
            for &c in alphabet {
                let mut t = s.clone();
                t.push(c);
                next.push((t, composed.next(a, c), tables.next(b, c)));
            }
        }
        frontier = next;
    }
}

#[test]
fn composed_dfas_accept_what_subset_construction_accepts() {
    agree(r#""[ab]{0,3}""#, b"\"abc", 7);
    agree(r#""(?:a|\\u0061){1,3}""#, b"\"a\\u0061x", 9);
    agree(r"[ \n]{0,2},[ \n]{0,2}key", b" \n,key", 7);
    agree(r"x{2}y{1,2}z?", b"xyz", 6);
    agree(r"(?:ab){2,3}c", b"abc", 8);
    // A nullable counted segment between two plain ones.
    agree(r"a[0-9]{0,2}b", b"a01b", 6);
}

#[test]
fn ambiguous_junctions_are_not_composed() {
    // Where `a` may end, `a` also starts the next segment.
    assert!(compose(&hir("a{0,3}a"), 1 << 20, None).is_none());
    // A body one of whose matches continues into a longer one.
    assert!(compose(&hir("(?:a|ab){2,3}"), 1 << 20, None).is_none());
    // Nothing counted: subset construction.
    assert!(compose(&hir("ab*c"), 1 << 20, None).is_none());
}

#[test]
fn states_with_equal_residuals_lead_alike_in_every_dfa() {
    // Separators of two keys that end alike, the end alone, and plain whitespace.
    let res = [
        r#"[ \n]{0,3},[ \n]{0,3}"ab"[ \n]{0,3}:[ \n]{0,3}"#,
        r#"[ \n]{0,3},[ \n]{0,3}"cd"[ \n]{0,3}:[ \n]{0,3}"#,
        r#"\{[ \n]{0,3}"#,
        r#"[ \n]{0,3}"#,
        r#"x[ \n]{2,3}y"#,
    ];
    let alphabet = b" \n,\"abcd:{xy";
    let dfas: Vec<_> = res
        .iter()
        .map(|re| compose(&hir(re), 1 << 24, None).unwrap().unwrap())
        .collect();
    let states: Vec<Vec<StateId>> = dfas.iter().map(|d| reachable(d, alphabet)).collect();
    let (mut shared, mut across) = (0, 0);
    for (i, a) in dfas.iter().enumerate() {
        for &s in &states[i] {
            let Some((rs, from)) = a.residual(s) else {
                continue;
            };
            for (j, b) in dfas.iter().enumerate() {
                for &t in &states[j] {
                    let Some((rt, to)) = b.residual(t) else {
                        continue;
                    };
                    if rs != rt || (i, s) == (j, t) {
                        continue;
                    }
                    shared += 1;
                    across += usize::from(i != j);
                    assert_eq!(
                        s.is_accepting(),
                        t.is_accepting(),
                        "{} / {}",
                        res[i],
                        res[j]
                    );
                    assert_eq!(
                        s.can_continue(),
                        t.can_continue(),
                        "{} / {}",
                        res[i],
                        res[j]
                    );
                    // Every string of up to four bytes: from `s` and `t` to counterparts.
                    let mut frontier = vec![(s, t)];
                    for _ in 0..4 {
                        let mut next = Vec::new();
                        for (x, y) in frontier {
                            for &c in alphabet {
                                let (x, y) = (a.next(x, c), b.next(y, c));
                                assert_eq!(
                                    b.counterpart(x, from, to),
                                    y,
                                    "{} / {}",
                                    res[i],
                                    res[j]
                                );
                                if x != DEAD {
                                    next.push((x, y));
                                }
                            }
                        }
                        frontier = next;
                    }
                }
            }
        }
    }
    // The keys' separators share their ends (after ':' and in the last run), with each
    // other, with '{' and its run, and with the run alone.
    assert!(across >= 20, "{across} pairs across DFAs ({shared} in all)");
    // A residual names what is left, not the place: the two keys' states before their
    // names differ, as do the start of `x[ \n]{2,3}y`'s run and a plain run's start.
    let start = |k: usize| dfas[k].residual(dfas[k].start()).unwrap().0;
    assert_ne!(start(0), start(1));
    assert_ne!(start(3), start(4));
    let after_x = dfas[4].next(dfas[4].start(), b'x');
    assert_ne!(dfas[4].residual(after_x).unwrap().0, start(3));
}

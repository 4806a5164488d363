//! The recognizer's internals: Leo items, the share cache, collecting sets. The black-box
//! behaviour (what is accepted) is tested in `grammar/tests/recognizer.rs`; these tests
//! look at the chart, so that a change that keeps the answers but loses one of these
//! mechanisms (and its cost bound) fails here.

use super::*;
use crate::{CompileOptions, compile_gbnf};

fn recognizer(gbnf: &str) -> Recognizer {
    Recognizer::new(compile_gbnf(gbnf, &CompileOptions::default()).unwrap())
}

fn push_all(r: &mut Recognizer, bytes: &[u8]) {
    for &b in bytes {
        assert!(r.push_byte(b).unwrap(), "byte {:?} refused", b as char);
    }
}

/// The most items any one Earley set holds.
fn widest_set(r: &Recognizer) -> u32 {
    r.c.sets
        .iter()
        .map(|s| s.items.1 - s.items.0)
        .max()
        .unwrap_or(0)
}

#[test]
fn leo_items_keep_right_recursion_constant_per_set() {
    // `list` is right-recursive (and `elem` nests, so none of it is a regular lexeme):
    // without Leo items, completing `list` after n elements completes n nested items in
    // that set.
    let gbnf = r#"root ::= list
list ::= elem list | elem
elem ::= "(" list? ")""#;
    let widest = |n: usize| {
        let mut r = recognizer(gbnf);
        push_all(&mut r, &b"()".repeat(n));
        assert!(r.is_accepting());
        assert!(!r.c.leo.is_empty(), "no Leo item was made");
        widest_set(&r)
    };
    let (short, long) = (widest(50), widest(2000));
    assert_eq!(
        short, long,
        "sets grow with the input: {short} items at 50 elements, {long} at 2000"
    );
    assert!(long < 16, "{long} items in one set");
}

#[test]
fn leo_chains_complete_to_the_topmost_item() {
    // A right-recursive rule under another production: the completion at the end must
    // reach `root`'s item through the chain (and refuse a byte that fits nowhere).
    let mut r = recognizer(
        r#"root ::= "[" list "]"
list ::= elem list | elem
elem ::= "(" list? ")""#,
    );
    push_all(&mut r, b"[()()()()(())()()()");
    assert!(!r.is_accepting());
    assert!(!r.push_byte(b'[').unwrap());
    push_all(&mut r, b"]");
    assert!(r.is_accepting());
}

/// Braces around nested brackets, with spaces after the opening brace (`item` nests, so the
/// rule is not one regular lexeme).
const GROUPED: &str = r#"root ::= "{" ws item "}"
ws ::= [ ]*
item ::= "x" | "[" item "]""#;

#[test]
fn repeated_completions_share_the_first_sets_items() {
    // Each space completes the same lexeme (`ws`, or `"{" ws` as one) from the same start
    // set: every set after the first is built from the same (start set, lexeme) and shares
    // its items.
    let mut r = recognizer(GROUPED);
    push_all(&mut r, b"{");
    let before = r.c.sets.len();
    let last = r.c.sets[before - 1];
    push_all(&mut r, b"     ");
    let built = &r.c.sets[before..];
    assert_eq!(built.len(), 5, "sets for five spaces");
    assert!(
        built.iter().all(|s| !s.owns),
        "a set after a space built its own items"
    );
    assert!(
        built
            .iter()
            .all(|s| s.items == last.items && s.source == last.source)
    );
    push_all(&mut r, b"[x]}");
    assert!(r.is_accepting());
}

#[test]
fn sets_that_share_items_share_their_uid_and_a_rebuilt_set_gets_a_new_one() {
    // What follows a set depends only on its items (and the sets they refer to), so a set
    // that shares another's items takes its uid: walks remembered by uid serve both. A set
    // built again after a pop owns its items and gets a uid no set had.
    let mut r = recognizer(GROUPED);
    push_all(&mut r, b"{");
    let before = r.c.sets.len();
    let first = r.c.sets[before - 1];
    push_all(&mut r, b"   ");
    let uids: Vec<u64> = r.c.sets[before..].iter().map(|s| s.uid).collect();
    assert_eq!(uids, vec![first.uid; 3]);
    r.pop(4);
    push_all(&mut r, b"{");
    let rebuilt = *r.c.sets.last().unwrap();
    assert!(rebuilt.owns);
    assert!(rebuilt.uid > first.uid, "a rebuilt set took an old uid");
    push_all(&mut r, b" [x]}");
    assert!(r.is_accepting());
}

#[test]
fn a_share_slot_is_not_used_after_its_set_is_popped() {
    // Pop the shared sets and build one again from the same completion: the answers stay
    // right, and after the pop the slot's set is gone, so the next set owns its items.
    let mut r = recognizer(GROUPED);
    push_all(&mut r, b"{  ");
    r.pop(3);
    assert_eq!(r.position(), 0);
    push_all(&mut r, b"{");
    let rebuilt = *r.c.sets.last().unwrap();
    assert!(
        rebuilt.owns,
        "the set after the pop took the popped set's items"
    );
    push_all(&mut r, b" ");
    let shared = *r.c.sets.last().unwrap();
    assert!(!shared.owns && shared.items == rebuilt.items);
    assert!(!r.is_accepting());
    push_all(&mut r, b" [x]}");
    assert!(r.is_accepting());
    assert!(!r.push_byte(b' ').unwrap());
}

#[test]
fn without_history_sets_nothing_reaches_are_collected() {
    // A flat list: once an element is complete, nothing refers to its sets (`elem` nests,
    // so the list is not one regular lexeme).
    let gbnf = r#"root ::= (elem ",")*
elem ::= "ab" | "(" root ")""#;
    let input = b"ab,".repeat(10_000);
    let mut kept = recognizer(gbnf);
    push_all(&mut kept, &input);
    let mut flat = recognizer(gbnf);
    flat.set_keep_history(false);
    push_all(&mut flat, &input);
    assert!(kept.is_accepting() && flat.is_accepting());
    assert!(
        kept.c.sets.len() >= 5000,
        "{} sets with history",
        kept.c.sets.len()
    );
    assert!(
        flat.c.sets.len() <= 2 * FIRST_COLLECTION,
        "{} sets kept without history",
        flat.c.sets.len()
    );
    // The collected chart still knows where it is: a complete element, then the end.
    assert!(!flat.push_byte(b'b').unwrap());
    push_all(&mut flat, b"ab");
    assert!(!flat.is_accepting());
    push_all(&mut flat, b",");
    assert!(flat.is_accepting());
}

#[test]
fn collecting_keeps_the_sets_open_containers_need() {
    // Nested brackets stay open: their sets are reachable and kept through collections,
    // and each closes in order after thousands of sets were collected around them.
    let gbnf = r#"root ::= item
item ::= "[" (elem ",")* item? "]"
elem ::= "x" | "(" item ")""#;
    let mut r = recognizer(gbnf);
    r.set_keep_history(false);
    let depth = 20;
    for _ in 0..depth {
        push_all(&mut r, b"[");
        push_all(&mut r, &b"x,".repeat(300));
    }
    assert!(
        r.c.sets.len() < 2 * FIRST_COLLECTION,
        "{} sets",
        r.c.sets.len()
    );
    for k in 0..depth {
        assert!(
            !r.is_accepting(),
            "accepting with {} brackets open",
            depth - k
        );
        push_all(&mut r, b"]");
    }
    assert!(r.is_accepting());
}

#[test]
fn the_next_bytes_hold_every_byte_a_push_takes() {
    // Lexemes under way, lexemes about to start, and a lexeme's end pushed alone.
    let gbnf = r#"root ::= "[" ws item (ws "," ws item)* ws "]"
item ::= [0-9]+ | "\"" [a-z]* "\""
ws ::= [ \n]*"#;
    let has = |bytes: [u64; 4], b: u8| bytes[b as usize / 64] >> (b % 64) & 1 == 1;
    let mut r = recognizer(gbnf);
    let text = b"[ 12 ,\n \"ab\"  ]";
    for k in 0..=text.len() {
        let next = r.next_bytes();
        let mut taken = 0;
        for b in 0..=255u8 {
            if r.push_byte(b).unwrap() {
                taken += 1;
                assert!(
                    has(next, b),
                    "{:?} takes {:?}, not in its next bytes",
                    String::from_utf8_lossy(&text[..k]),
                    b as char
                );
                r.pop(1);
            }
        }
        assert!(taken > 0 || k == text.len());
        if k < text.len() {
            push_all(&mut r, &text[k..=k]);
        }
    }
    // After a lexeme's end alone (as the mask's walks push it), the run goes on too.
    // (Nested, so that the number stays a lexeme of its own.)
    let mut r = recognizer(
        r#"root ::= item
item ::= [0-9]+ | "[" item [ ]* "]""#,
    );
    push_all(&mut r, b"[1");
    let run = r
        .runs()
        .into_iter()
        .find(|run| run.state.is_accepting())
        .unwrap();
    r.pop(1);
    assert!(r.push_lexeme_end(run, run.state).unwrap());
    let next = r.next_bytes();
    for b in [b'0', b' ', b']'] {
        assert!(has(next, b), "{:?}", b as char);
    }
    assert!(!has(next, b'a'));
}

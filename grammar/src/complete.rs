//! Shortest completions: the fewest bytes that finish a sentence, from a recognizer's state.
//!
//! Generation with a token budget uses it to stop *complete*: when the budget is about to
//! run out, the engine appends the shortest completion instead of cutting the output
//! mid-structure. Two parts:
//!
//! - static, per grammar ([`Shortest`], computed on first use): for every rule, its
//!   shortest derivation (and per lexeme DFA state, the fewest bytes to an accepting state,
//!   which the DFA answers itself: [`LexemeDfa::shortest`])
//!   (a fixpoint over the productions, Knuth's generalization of Dijkstra's algorithm run
//!   as plain relaxation);
//! - dynamic ([`crate::Recognizer::shortest_completion`]): from each live lexer run, finish
//!   its lexeme, then climb the Earley chart: completing a symbol in the set where it was
//!   started moves the items waiting for it, whose remaining symbols cost their shortest
//!   derivations, and so on up to the start rule.
//!
//! A token reference yields one token and no bytes of its own: it costs one unit, like a
//! byte, and appears in a completion as [`Piece::Token`] for the engine to resolve.

use crate::compiled::{AfterDot, DotId, Grammar, LexemeId, RuleId, Sym, TokenRefId};
use crate::lexeme::StateId;

/// A piece of a shortest completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text.
    Bytes(Vec<u8>),
    /// A token the grammar names by reference (its id or text, or any token but one).
    Token(TokenRefId),
}

/// A shortest completion: text and token references, in order. Adjacent text is one piece.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The pieces in order, never two `Bytes` in a row; empty when nothing is left to add.
    pub pieces: Vec<Piece>,
}

impl Completion {
    /// Whether nothing is left to add.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Its length in units: a byte each, a token each reference.
    pub fn units(&self) -> u64 {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len() as u64,
                Piece::Token(_) => 1,
            })
            .sum()
    }

    /// The text, when the completion names no token.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for p in &self.pieces {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Token(_) => return None,
            }
        }
        Some(out)
    }

    fn text(&mut self) -> &mut Vec<u8> {
        if !matches!(self.pieces.last(), Some(Piece::Bytes(_))) {
            self.pieces.push(Piece::Bytes(Vec::new()));
        }
        match self.pieces.last_mut() {
            Some(Piece::Bytes(b)) => b,
            _ => unreachable!("a text piece was just pushed"),
        }
    }

    pub(crate) fn push_byte(&mut self, b: u8) {
        self.text().push(b);
    }

    pub(crate) fn push_token(&mut self, t: TokenRefId) {
        self.pieces.push(Piece::Token(t));
    }
}

/// No completion.
pub(crate) const INF: u64 = u64::MAX / 4;

/// Per-grammar shortest derivations. See the module docs.
#[derive(Debug)]
pub(crate) struct Shortest {
    /// Per rule: the fewest bytes it derives, and the first dot of a production that does.
    rule: Vec<(u64, Option<DotId>)>,
}

impl Shortest {
    pub(crate) fn new(g: &Grammar) -> Shortest {
        let mut s = Shortest {
            rule: vec![(INF, None); g.rule_names.len()],
        };
        // Productions: runs of dots ending at `AfterDot::End`.
        let mut prods: Vec<(RuleId, DotId)> = Vec::new();
        let mut start = 0usize;
        for (d, next) in g.dot_next.iter().enumerate() {
            if *next == AfterDot::End {
                prods.push((g.dot_lhs[d], DotId(start as u32)));
                start = d + 1;
            }
        }
        loop {
            let mut changed = false;
            for &(lhs, first) in &prods {
                let len = s.suffix_len(g, first);
                if len < s.rule[lhs.0 as usize].0 {
                    s.rule[lhs.0 as usize] = (len, Some(first));
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        s
    }

    /// Bytes from DFA `state` of lexeme `l` to the lexeme's end.
    pub(crate) fn lexeme_len(&self, g: &Grammar, l: LexemeId, state: StateId) -> u64 {
        match g.lexemes[l.0 as usize].dfa().shortest(state) {
            None => INF,
            Some((d, _)) => u64::from(d),
        }
    }

    /// The shortest yield of one symbol.
    pub(crate) fn sym_len(&self, g: &Grammar, sym: Sym) -> u64 {
        match sym {
            Sym::Rule(r) => self.rule[r.0 as usize].0,
            Sym::Lexeme(l) => {
                let lx = &g.lexemes[l.0 as usize];
                if lx.nullable {
                    0
                } else {
                    self.lexeme_len(g, l, lx.dfa().start())
                }
            }
            Sym::Token(_) => 1,
        }
    }

    /// The shortest yield of the symbols from `dot` to the end of its production.
    pub(crate) fn suffix_len(&self, g: &Grammar, dot: DotId) -> u64 {
        let mut total = 0u64;
        let mut d = dot.0 as usize;
        while let AfterDot::Sym(sym) = g.dot_next[d] {
            total = total.saturating_add(self.sym_len(g, sym)).min(INF);
            d += 1;
        }
        total
    }

    /// Appends the bytes that finish lexeme `l` from `state`.
    pub(crate) fn lexeme_bytes(
        &self,
        g: &Grammar,
        l: LexemeId,
        mut state: StateId,
        out: &mut Completion,
    ) {
        let dfa = &g.lexemes[l.0 as usize].dfa();
        while let Some((d, b)) = dfa.shortest(state)
            && d > 0
        {
            out.push_byte(b);
            state = dfa.next(state, b);
        }
    }

    /// Appends the shortest yield of the symbols from `dot` to the end of its production.
    pub(crate) fn suffix_pieces(&self, g: &Grammar, dot: DotId, out: &mut Completion) {
        let mut d = dot.0 as usize;
        while let AfterDot::Sym(sym) = g.dot_next[d] {
            match sym {
                Sym::Rule(r) => {
                    if let Some(first) = self.rule[r.0 as usize].1 {
                        self.suffix_pieces(g, first, out);
                    }
                }
                Sym::Lexeme(l) => {
                    let lx = &g.lexemes[l.0 as usize];
                    if !lx.nullable {
                        self.lexeme_bytes(g, l, lx.dfa().start(), out);
                    }
                }
                Sym::Token(t) => out.push_token(t),
            }
            d += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{CompileOptions, Recognizer, compile_gbnf};

    use super::{Completion, Piece};
    use crate::TokenRefId;

    fn pieces(grammar: &str, input: &str) -> Option<Completion> {
        let g = compile_gbnf(grammar, &CompileOptions::default()).unwrap();
        let mut r = Recognizer::new(g);
        for &b in input.as_bytes() {
            assert!(r.push_byte(b).unwrap(), "{input}");
        }
        r.shortest_completion()
    }

    fn completion(grammar: &str, input: &str) -> Option<String> {
        pieces(grammar, input).map(|c| String::from_utf8(c.bytes().expect("text only")).unwrap())
    }

    #[test]
    fn completes_json() {
        let json = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../grammars/json.gbnf"
        ))
        .unwrap();
        for (input, done) in [
            (r#"{"a": [1, {"b": "x"#, r#"{"a": [1, {"b": "x"}]}"#),
            (r#"{"a": tr"#, r#"{"a": true}"#),
            (r#"[1"#, r#"[1]"#),
            (r#"{"#, r#"{}"#),
            (r#"{"k"#, r#"{"k":0}"#),
            (r#"[1.5e"#, r#"[1.5e0]"#),
            (r#"{"a":1}"#, r#"{"a":1}"#),
        ] {
            let c = completion(&json, input).unwrap();
            assert_eq!(format!("{input}{c}"), done, "{input}");
        }
    }

    #[test]
    fn every_prefix_completes_to_a_sentence() {
        let json = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../grammars/json.gbnf"
        ))
        .unwrap();
        let g = compile_gbnf(&json, &CompileOptions::default()).unwrap();
        let doc = r#"{"name": "caf\u00e9 \"x\"", "n": [-1.5e3, 0, {"deep": [[], {}]}], "ok": false, "z": null}"#;
        let mut r = Recognizer::new(g.clone());
        for (i, &b) in doc.as_bytes().iter().enumerate() {
            assert!(r.push_byte(b).unwrap());
            let c = r
                .shortest_completion()
                .expect("JSON can always be completed");
            let mut whole = doc.as_bytes()[..=i].to_vec();
            whole.extend(c.bytes().expect("text only"));
            assert_eq!(
                crate::match_bytes(&g, &whole).unwrap(),
                crate::MatchOutcome::Accepted,
                "{}",
                String::from_utf8_lossy(&whole)
            );
        }
    }

    #[test]
    fn counts_and_recursion() {
        let g = r#"root ::= "(" root ")" | "x"{3}"#;
        assert_eq!(completion(g, "((").unwrap(), "xxx))");
        let g = r#"root ::= list
list ::= item "," list | item
item ::= [a-z]+ "!""#;
        assert_eq!(completion(g, "ab!,cd").unwrap(), "!");
    }

    #[test]
    fn completions_go_through_token_references() {
        let text = |s: &str| Piece::Bytes(s.as_bytes().to_vec());
        let g = r#"root ::= "a" <[5]> "b""#;
        assert_eq!(
            pieces(g, "a").unwrap().pieces,
            [Piece::Token(TokenRefId(0)), text("b")]
        );
        assert_eq!(
            pieces(g, "").unwrap().pieces,
            [text("a"), Piece::Token(TokenRefId(0)), text("b")]
        );
        // A reference alone, and after a repetition that may end anywhere.
        assert_eq!(
            pieces("root ::= <[2]>", "").unwrap().pieces,
            [Piece::Token(TokenRefId(0))]
        );
        assert_eq!(
            pieces("root ::= [a-z]+ <[2]>", "ab").unwrap().pieces,
            [Piece::Token(TokenRefId(0))]
        );
        // A token costs one unit: the branch through it is shorter than "xyz".
        let g = r#"root ::= "a" (!<[2]> | "xyz") "b""#;
        assert_eq!(
            pieces(g, "a").unwrap().pieces,
            [Piece::Token(TokenRefId(0)), text("b")]
        );
        // Text only: `bytes` gives it whole.
        assert_eq!(
            pieces(r#"root ::= "ab" "cd""#, "a").unwrap().bytes(),
            Some(b"bcd".to_vec())
        );
    }
}

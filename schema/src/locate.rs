//! Where a JSON pointer lands in a JSON text, so schema errors can be shown as
//! `schema.json:12:7:` with a caret, like grammar errors.
//!
//! A small scanner over the text (it is already known to be valid JSON): it walks the
//! pointer's tokens, skipping values it does not enter, and returns the byte span of the
//! member's key (for an object member) or of the element (for an array index).

use corral_grammar::Span;

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// Skips a string starting at `i` (on the quote); returns its raw contents.
    fn string(&mut self) -> Option<String> {
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i;
        self.i += 1;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    let raw = std::str::from_utf8(&self.b[start..self.i]).ok()?;
                    return serde_json::from_str::<String>(raw).ok();
                }
                _ => self.i += 1,
            }
        }
        None
    }

    /// Skips any value.
    fn value(&mut self) -> Option<()> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                while self.i < self.b.len() {
                    match self.b[self.i] {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                None
            }
            _ => {
                while self.i < self.b.len() && !matches!(self.b[self.i], b',' | b'}' | b']') {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// Skips a value and the comma after it (`None`: no next member or element).
    fn skip_to_next(&mut self) -> Option<()> {
        self.value()?;
        self.ws();
        (self.b.get(self.i) == Some(&b',')).then(|| self.i += 1)
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The span of the member or element that `pointer` names in `text`; as far as it gets
/// (the innermost value found) when a token is missing.
pub(crate) fn locate(text: &str, pointer: &str) -> Span {
    let mut s = Scan {
        b: text.as_bytes(),
        i: 0,
    };
    s.ws();
    let mut span = Span::new(s.i, s.i + 1);
    if pointer.is_empty() {
        return span;
    }
    for token in pointer.split('/').skip(1) {
        let token = unescape(token);
        s.ws();
        match s.b.get(s.i) {
            Some(b'{') => {
                s.i += 1;
                loop {
                    s.ws();
                    let key_start = s.i;
                    let Some(key) = s.string() else {
                        return span;
                    };
                    let key_end = s.i;
                    s.ws();
                    if s.b.get(s.i) != Some(&b':') {
                        return span;
                    }
                    s.i += 1;
                    if key == token {
                        span = Span::new(key_start, key_end);
                        break;
                    }
                    if s.skip_to_next().is_none() {
                        return span;
                    }
                }
            }
            Some(b'[') => {
                let Ok(n) = token.parse::<usize>() else {
                    return span;
                };
                s.i += 1;
                for _ in 0..n {
                    if s.skip_to_next().is_none() {
                        return span;
                    }
                }
                s.ws();
                span = Span::new(s.i, s.i + 1);
            }
            _ => return span,
        }
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_members_and_elements() {
        let t = r#"{
  "a": {"b": [1, {"c~d": 2, "x/y": [3]}]},
  "z": "s"
}"#;
        let at = |p: &str| {
            let sp = locate(t, p);
            &t[sp.start..sp.end]
        };
        assert_eq!(at("/a"), "\"a\"");
        assert_eq!(at("/z"), "\"z\"");
        assert_eq!(at("/a/b/1/c~0d"), "\"c~d\"");
        assert_eq!(at("/a/b/1/x~1y"), "\"x/y\"");
        assert_eq!(at("/a/b/1"), "{");
        assert_eq!(at("/a/b/9"), "\"b\"", "missing: as far as it gets");
        assert_eq!(at(""), "{");
    }
}

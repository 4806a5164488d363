//! [`Utf8Stream`]: text streamed from token bytes, one character never split.

/// Streams UTF-8 text from token bytes: holds back an incomplete character (at most 3
/// bytes), never re-decodes what was already emitted.
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// The text completed by `bytes`.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut out = String::new();
        self.push_into(bytes, &mut out);
        out
    }

    /// [`Utf8Stream::push`] into a reused buffer (appended to).
    pub fn push_into(&mut self, bytes: &[u8], out: &mut String) {
        if self.pending.is_empty()
            && let Ok(s) = std::str::from_utf8(bytes)
        {
            out.push_str(s);
            return;
        }
        self.pending.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..good]).expect("valid prefix"));
                    match e.error_len() {
                        // Incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..good);
                            return;
                        }
                        // Invalid bytes (an unconstrained model can emit them).
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + n);
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_stream_holds_back_split_characters() {
        let mut s = Utf8Stream::default();
        let bytes = "aé日😀".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&s.push(&[*b]));
            assert!(s.pending.len() <= 3);
        }
        assert_eq!(out, "aé日😀");
        assert_eq!(s.push(b"\xff"), "\u{FFFD}");
        assert_eq!(s.push(b"\xe6\x97"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}

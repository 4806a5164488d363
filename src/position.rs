//! Where in a streamed input a byte is: line, column and the text around it, for `corral
//! match` messages, without holding the input (only the last few hundred bytes of the
//! current line).

/// Bytes of the current line kept before the chunk being read.
const KEPT: usize = 256;
/// Characters shown on each side of the caret.
const WINDOW: usize = 60;

/// Line and column of the input read so far. See the module docs.
#[derive(Debug)]
pub struct Position {
    /// 1-based line of the end of the input consumed so far.
    line: usize,
    /// Characters since the last newline.
    col: usize,
    /// The last bytes of the current line (at most [`KEPT`]).
    tail: Vec<u8>,
}

impl Default for Position {
    fn default() -> Position {
        Position {
            line: 1,
            col: 0,
            tail: Vec::new(),
        }
    }
}

/// Characters in UTF-8 bytes (bytes that do not continue a character).
fn chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| (b as i8) >= -0x40).count()
}

impl Position {
    /// Moves over `bytes`, consumed.
    pub fn advance(&mut self, bytes: &[u8]) {
        match bytes.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                self.line += bytes[..=i].iter().filter(|&&b| b == b'\n').count();
                self.col = chars(&bytes[i + 1..]);
                self.tail.clear();
                self.tail.extend_from_slice(&bytes[i + 1..]);
            }
            None => {
                self.col += chars(bytes);
                self.tail.extend_from_slice(bytes);
            }
        }
        if self.tail.len() > KEPT {
            self.tail.drain(..self.tail.len() - KEPT);
        }
    }

    /// Line and column (1-based, in characters) of the next byte, and the line around it
    /// with a caret under it; `after` are the bytes from there on (as many as are at hand).
    pub fn show(&self, after: &[u8]) -> (usize, usize, String) {
        let before = String::from_utf8_lossy(&self.tail);
        let end = after
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(after.len());
        let after = String::from_utf8_lossy(&after[..end]);
        let before: Vec<char> = before.chars().collect();
        let skip = before.len().saturating_sub(WINDOW);
        let cut = skip > 0 || self.col > before.len();
        let prefix = if cut { "..." } else { "" };
        let shown_before: String = before[skip..].iter().map(|&c| printable(c)).collect();
        let shown_after: String = after.chars().take(WINDOW).map(printable).collect();
        let pad: String = format!("{prefix}{shown_before}")
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        (
            self.line,
            self.col + 1,
            format!("{prefix}{shown_before}{shown_after}\n{pad}^"),
        )
    }
}

/// A character as shown in a message: control characters other than tab as `?`, so that
/// no raw control byte reaches the terminal.
fn printable(c: char) -> char {
    if c.is_control() && c != '\t' { '?' } else { c }
}

/// The character at the start of `bytes`, for a message.
pub fn describe_byte(bytes: &[u8]) -> String {
    let Some(&b) = bytes.first() else {
        return "end of input".into();
    };
    let rest = &bytes[..bytes.len().min(4)];
    match std::str::from_utf8(rest)
        .ok()
        .or_else(|| std::str::from_utf8(&rest[..rest.len().min(utf8_len(b))]).ok())
        .and_then(|s| s.chars().next())
    {
        Some(c) => format!("{c:?} (byte 0x{b:02x})"),
        None => format!("byte 0x{b:02x} (not valid UTF-8 here)"),
    }
}

fn utf8_len(b: u8) -> usize {
    match b {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_across_chunks() {
        let mut p = Position::default();
        p.advance(b"{\"a\":\n  [1, ");
        p.advance("é, 2".as_bytes());
        let (line, col, shown) = p.show(b"x]}\nnext");
        assert_eq!((line, col), (2, 11));
        assert_eq!(shown, "  [1, é, 2x]}\n          ^");
    }

    #[test]
    fn long_lines_are_cut_and_control_bytes_hidden() {
        let mut p = Position::default();
        p.advance(&vec![b'a'; 10_000]);
        p.advance(b"\x1b[31m");
        let (line, col, shown) = p.show(&vec![b'b'; 10_000]);
        assert_eq!((line, col), (1, 10_006));
        let first = shown.lines().next().unwrap();
        assert!(first.starts_with("..."));
        assert!(first.chars().count() <= 3 + 2 * WINDOW);
        assert!(!shown.contains('\x1b'));
    }
}

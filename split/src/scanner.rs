//! Finds markers in a stream that arrives in pieces.
//!
//! Text between markers comes out as whole runs (found by a byte-table search for the
//! bytes that can start an active marker); a possible marker start is held back until it
//! either completes a marker or cannot, so at most the longest marker minus one character
//! is ever held. Each byte is examined a bounded number of times: O(n) for the stream.

/// What the scanner found.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan<'a> {
    Text(&'a str),
    /// Marker number `i` (its text is consumed).
    Marker(usize),
}

/// What the sink wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Continue with only the markers in this bit mask active.
    Mask(u64),
    /// Stop: the rest of the input is dropped.
    Stop,
}

/// A marker scanner. See the module docs.
#[derive(Clone, Debug)]
pub struct MarkerScanner {
    markers: Vec<Box<str>>,
    active: u64,
    /// Bytes that start an active marker.
    starts: [bool; 256],
    /// A proper prefix of an active marker, held back.
    pending: String,
    longest: usize,
}

/// Why a set of markers cannot be scanned for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// More than 64 markers (the count given).
    #[error("at most 64 markers can be scanned for at once, not {0}")]
    TooMany(usize),
    /// A marker is the empty string.
    #[error("marker {index} is empty")]
    Empty {
        /// Its position in the list given.
        index: usize,
    },
    /// One marker occurs inside another other than as its prefix.
    #[error(
        "marker {inner:?} occurs inside marker {outer:?}: markers may contain one another only as a prefix"
    )]
    Contains {
        /// The longer marker.
        outer: String,
        /// The marker found inside it.
        inner: String,
    },
}

impl Default for MarkerScanner {
    /// No markers: everything is text.
    fn default() -> MarkerScanner {
        MarkerScanner {
            markers: Vec::new(),
            active: 0,
            starts: [false; 256],
            pending: String::new(),
            longest: 0,
        }
    }
}

impl MarkerScanner {
    /// Up to 64 non-empty markers, all active. A marker may contain another only as a
    /// prefix (see [`MarkerScanner::feed`]); anything else is a [`MarkerError`].
    pub fn new(markers: &[&str]) -> Result<MarkerScanner, MarkerError> {
        if markers.len() > 64 {
            return Err(MarkerError::TooMany(markers.len()));
        }
        if let Some(index) = markers.iter().position(|m| m.is_empty()) {
            return Err(MarkerError::Empty { index });
        }
        for outer in markers {
            // Past the first character (which may take more than one byte).
            let rest = &outer[outer.chars().next().map_or(0, char::len_utf8)..];
            for inner in markers {
                if outer.len() > inner.len() && !outer.starts_with(inner) && rest.contains(inner) {
                    return Err(MarkerError::Contains {
                        outer: outer.to_string(),
                        inner: inner.to_string(),
                    });
                }
            }
        }
        let mut s = MarkerScanner {
            markers: markers.iter().map(|m| Box::from(*m)).collect(),
            active: 0,
            starts: [false; 256],
            pending: String::new(),
            longest: markers.iter().map(|m| m.chars().count()).max().unwrap_or(0),
        };
        s.set_active(if markers.len() == 64 {
            u64::MAX
        } else {
            (1 << markers.len()) - 1
        });
        Ok(s)
    }

    /// Makes active exactly the markers whose bits are set in `mask` (bit `i`: marker `i`);
    /// text held back stays held.
    pub fn set_active(&mut self, mask: u64) {
        self.active = mask;
        self.starts = [false; 256];
        for (i, m) in self.markers.iter().enumerate() {
            if mask >> i & 1 == 1 {
                self.starts[m.as_bytes()[0] as usize] = true;
            }
        }
    }

    /// The active markers: bit `i` set for marker `i`.
    pub fn active(&self) -> u64 {
        self.active
    }

    /// Characters held back now (never more than the longest marker minus one).
    pub fn held_back(&self) -> usize {
        self.pending.chars().count()
    }

    /// The longest marker's length in characters.
    pub fn longest_marker(&self) -> usize {
        self.longest
    }

    /// Drops the held-back text, for a new stream (the active markers stay).
    pub fn reset(&mut self) {
        self.pending.clear();
    }

    /// Whether `s` is a prefix of an active marker (`Some(i)` if it is all of marker `i`).
    fn classify(&self, s: &str) -> (bool, Option<usize>) {
        let mut prefix = false;
        for (i, m) in self.markers.iter().enumerate() {
            if self.active >> i & 1 == 1 && m.starts_with(s) {
                if m.len() == s.len() {
                    return (true, Some(i));
                }
                prefix = true;
            }
        }
        (prefix, None)
    }

    /// Scans `input`; returns how many of its bytes were consumed (all of them, unless the
    /// sink stopped: then up to and including what it stopped on).
    ///
    /// Markers must not contain one another except as a prefix (true of every marker set
    /// used here), so a marker completed while re-examining held-back text always ends at
    /// the current byte, and stopping there loses nothing.
    pub fn feed(&mut self, input: &str, sink: &mut dyn FnMut(Scan<'_>) -> Flow) -> usize {
        let bytes = input.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if self.pending.is_empty() {
                // Plain text up to the next byte that can start a marker.
                let run = bytes[i..]
                    .iter()
                    .position(|&b| self.starts[b as usize])
                    .unwrap_or(bytes.len() - i);
                if run > 0 {
                    let flow = sink(Scan::Text(&input[i..i + run]));
                    i += run;
                    match flow {
                        Flow::Continue => {}
                        Flow::Mask(m) => self.set_active(m),
                        Flow::Stop => return i,
                    }
                    continue;
                }
            }
            let c = input[i..].chars().next().expect("char boundary");
            i += c.len_utf8();
            self.pending.push(c);
            if !self.resolve(sink) {
                return i;
            }
        }
        i
    }

    /// Settles `pending` after a character was added: a whole marker is reported, a
    /// prefix waits, anything else releases its first character as text and is looked at
    /// again (it may hide another marker's start).
    fn resolve(&mut self, sink: &mut dyn FnMut(Scan<'_>) -> Flow) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        match self.classify(&self.pending) {
            (_, Some(m)) => {
                self.pending.clear();
                match sink(Scan::Marker(m)) {
                    Flow::Continue => true,
                    Flow::Mask(mask) => {
                        self.set_active(mask);
                        true
                    }
                    Flow::Stop => false,
                }
            }
            (true, None) => true,
            (false, None) => {
                // Release the first character as text; the rest (shorter than the longest
                // marker) is scanned again: it may start another marker.
                let first = self.pending.chars().next().expect("non-empty").len_utf8();
                let rest = self.pending.split_off(first);
                let text = std::mem::take(&mut self.pending);
                match sink(Scan::Text(&text)) {
                    Flow::Continue => {}
                    Flow::Mask(m) => self.set_active(m),
                    Flow::Stop => return false,
                }
                let n = rest.len();
                self.feed(&rest, sink) == n
            }
        }
    }

    /// The end of the stream: what is held back is text.
    pub fn flush(&mut self, sink: &mut dyn FnMut(Scan<'_>) -> Flow) {
        if !self.pending.is_empty() {
            let text = std::mem::take(&mut self.pending);
            sink(Scan::Text(&text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(markers: &[&str], chunks: &[&str]) -> Vec<String> {
        let mut s = MarkerScanner::new(markers).unwrap();
        let mut out: Vec<String> = Vec::new();
        let mut sink = |e: Scan<'_>| {
            match e {
                Scan::Text(t) => match out.last_mut() {
                    Some(last) if !last.starts_with('#') => last.push_str(t),
                    _ => out.push(t.to_string()),
                },
                Scan::Marker(m) => out.push(format!("#{m}")),
            }
            Flow::Continue
        };
        for c in chunks {
            s.feed(c, &mut sink);
            assert!(s.held_back() < s.longest_marker().max(1));
        }
        s.flush(&mut sink);
        out
    }

    #[test]
    fn markers_across_chunks_and_false_starts() {
        let m = ["<|end|>", "<|start|>", "<think>"];
        assert_eq!(scan(&m, &["ab<|e", "nd|>cd"]), vec!["ab", "#0", "cd"]);
        assert_eq!(scan(&m, &["a<<|end|>"]), vec!["a<", "#0"]);
        assert_eq!(
            scan(&m, &["<|en", "x<thi", "nk>y<"]),
            vec!["<|enx", "#2", "y<"]
        );
        assert_eq!(scan(&m, &["<|s<|start|>"]), vec!["<|s", "#1"]);
        assert_eq!(
            scan(&m, &["é<", "|", "e", "n", "d", "|", ">é"]),
            vec!["é", "#0", "é"]
        );
    }

    /// Markers that start with a character of more than one byte are checked by character
    /// (a byte slice inside it would panic).
    #[test]
    fn markers_may_start_with_any_character() {
        assert_eq!(scan(&["«end»", "<x>"], &["a«end»b"]), vec!["a", "#0", "b"]);
        assert!(matches!(
            MarkerScanner::new(&["«x»", "x"]),
            Err(MarkerError::Contains { .. })
        ));
        assert!(MarkerScanner::new(&["«x»", "«"]).is_ok());
    }
}

//! Stop sequences over streamed text: text that may begin a stop sequence is held back
//! until it is known not to (at most the longest stop sequence's length, less one byte);
//! the output ends before the first stop sequence found.

/// Streams text through the request's stop sequences.
#[derive(Debug, Default)]
pub struct StopFilter {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopFilter {
    /// A filter for these stop sequences (empty ones are dropped; none passes all text).
    pub fn new(stops: Vec<String>) -> StopFilter {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            ..StopFilter::default()
        }
    }

    /// Whether a stop sequence was found (nothing more is passed on).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The text that can be passed on after `delta`.
    pub fn push(&mut self, delta: &str) -> String {
        if self.stopped {
            return String::new();
        }
        if self.stops.is_empty() {
            return delta.to_string();
        }
        self.held.push_str(delta);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s)).min() {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        // Keep the longest tail that begins some stop sequence.
        let keep = self
            .stops
            .iter()
            .map(|s| longest_prefix_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The end of the output: what was held back (no stop sequence completed).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`, on a
/// character boundary.
fn longest_prefix_suffix(text: &str, stop: &str) -> usize {
    let max = (stop.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && stop.as_bytes().starts_with(&text.as_bytes()[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut f = StopFilter::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for d in deltas {
            out.push_str(&f.push(d));
        }
        if !f.stopped() {
            out.push_str(&f.finish());
        }
        (out, f.stopped())
    }

    #[test]
    fn stop_split_across_deltas_is_found_and_cut() {
        assert_eq!(
            run(&["END"], &["abc E", "N", "Dxyz"]),
            ("abc ".into(), true)
        );
        assert_eq!(run(&["\n\n", "END"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn held_text_that_is_not_a_stop_is_passed_on() {
        let mut f = StopFilter::new(vec!["END".into()]);
        assert_eq!(f.push("abc E"), "abc ");
        assert_eq!(f.push("x"), "Ex");
        assert_eq!(run(&["END"], &["EN"]), ("EN".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        assert_eq!(run(&["é!"], &["caf", "é", "!x"]), ("caf".into(), true));
        assert_eq!(run(&["日本"], &["x日", "y"]), ("x日y".into(), false));
    }
}

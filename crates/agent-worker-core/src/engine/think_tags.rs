//! Splits inline `<think>…</think>` reasoning out of streamed text.
//!
//! Some models on Bedrock (Kimi K2, DeepSeek) stream their reasoning inside the answer's text,
//! wrapped in think tags. That text is process, not answer: it goes out as `thinking` and is
//! not stored as part of the answer. Tags may be split across deltas.

/// A piece of streamed text, on one side of the tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Answer text.
    Text(String),
    /// Reasoning text.
    Thinking(String),
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// The splitter's state across deltas.
#[derive(Debug, Default)]
pub(crate) struct ThinkTags {
    inside: bool,
    carry: String,
}

impl ThinkTags {
    /// Splits `delta`, holding back a tail that may be the start of a tag.
    pub(crate) fn push(&mut self, delta: &str) -> Vec<Piece> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.push_str(delta);
        let mut pieces = Vec::new();
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(at) = buf.find(tag) {
                self.piece(&buf[..at], &mut pieces);
                buf.drain(..at + tag.len());
                self.inside = !self.inside;
                continue;
            }
            let keep = (1..tag.len())
                .rev()
                .find(|&k| {
                    buf.len() >= k
                        && buf.is_char_boundary(buf.len() - k)
                        && tag.starts_with(&buf[buf.len() - k..])
                })
                .unwrap_or(0);
            let cut = buf.len() - keep;
            self.piece(&buf[..cut], &mut pieces);
            self.carry = buf[cut..].to_owned();
            return pieces;
        }
    }

    /// Flushes what was held back, at the end of the stream.
    pub(crate) fn finish(&mut self) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let carry = std::mem::take(&mut self.carry);
        self.piece(&carry, &mut pieces);
        pieces
    }

    fn piece(&self, text: &str, pieces: &mut Vec<Piece>) {
        if text.is_empty() {
            return;
        }
        pieces.push(if self.inside {
            Piece::Thinking(text.to_owned())
        } else {
            Piece::Text(text.to_owned())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(deltas: &[&str]) -> (String, String) {
        let mut tags = ThinkTags::default();
        let mut pieces: Vec<Piece> = deltas.iter().flat_map(|d| tags.push(d)).collect();
        pieces.extend(tags.finish());
        let (mut text, mut thinking) = (String::new(), String::new());
        for p in pieces {
            match p {
                Piece::Text(t) => text.push_str(&t),
                Piece::Thinking(t) => thinking.push_str(&t),
            }
        }
        (text, thinking)
    }

    #[test]
    fn plain_text_passes_through() {
        assert_eq!(
            split(&["Hello ", "<b>world</b> a < b"]),
            ("Hello <b>world</b> a < b".into(), String::new())
        );
    }

    #[test]
    fn tags_split_across_deltas_are_found() {
        assert_eq!(
            split(&[" <thi", "nk> plan ", "it </th", "ink>The answer"]),
            (" The answer".into(), " plan it ".into())
        );
    }

    #[test]
    fn an_unclosed_tag_keeps_the_rest_as_thinking() {
        assert_eq!(
            split(&["<think>still going"]),
            (String::new(), "still going".into())
        );
    }

    #[test]
    fn multibyte_text_near_a_partial_tag_is_safe() {
        assert_eq!(split(&["héllo <", "é"]), ("héllo <é".into(), String::new()));
    }
}

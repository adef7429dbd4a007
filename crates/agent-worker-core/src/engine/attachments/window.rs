//! Part of a file's text: the characters one call asks for, and how long the whole text is.
//!
//! A file's text is only ever given a page at a time, so that is all that is kept of it: a PDF's
//! text is written through a [`WindowWriter`] as it is read, which keeps the page asked for and
//! counts the rest, so the text is never held whole.

use std::ops::Range;

/// `text`: at most the asked number of characters of a text from character `from`; `total`:
/// the whole text's length in characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextWindow {
    /// The characters kept.
    pub(crate) text: String,
    /// The first one's place in the whole text, counted in characters.
    pub(crate) from: usize,
    /// The whole text's length in characters.
    pub(crate) total: usize,
}

impl TextWindow {
    /// The `limit` characters of `text` from character `from`.
    pub(crate) fn of(text: &str, from: usize, limit: usize) -> Self {
        Self {
            text: text.chars().skip(from).take(limit).collect(),
            from,
            total: text.chars().count(),
        }
    }

    /// How many characters it keeps.
    pub(crate) fn chars(&self) -> usize {
        self.text.chars().count()
    }

    /// The place just after its last character.
    pub(crate) fn end(&self) -> usize {
        self.from + self.chars()
    }
}

/// A text written a character at a time, trimmed of whitespace at both ends, of which only a
/// window is kept and the rest counted: whatever is written, it holds at most the window.
#[derive(Debug)]
pub(crate) struct WindowWriter {
    /// The characters to keep, by their place in the trimmed text.
    window: Range<usize>,
    kept: String,
    /// Characters of the text so far: whitespace is counted once text follows it.
    total: usize,
    /// Of those, the ones that are not control characters (whitespace counts as readable).
    readable: usize,
    /// The last character counted.
    last: Option<char>,
    /// Whitespace written after it: counted when text follows, trimmed when none does.
    pending: Pending,
}

/// Whitespace not yet counted: how much, the part of it that falls in the window (its places
/// are known, since nothing is counted before it), its last character, its last one that is not
/// a space, and the spaces after that.
#[derive(Debug, Default)]
struct Pending {
    len: usize,
    kept: String,
    last: Option<char>,
    last_not_space: Option<char>,
    trailing_spaces: usize,
}

impl WindowWriter {
    /// A writer keeping `limit` characters from character `from` of the trimmed text.
    pub(crate) fn new(from: usize, limit: usize) -> Self {
        Self {
            window: from..from.saturating_add(limit),
            kept: String::new(),
            total: 0,
            readable: 0,
            last: None,
            pending: Pending::default(),
        }
    }

    /// Writes one character.
    pub(crate) fn push(&mut self, c: char) {
        let pending = &mut self.pending;
        if c.is_whitespace() {
            // Whitespace before the first text is trimmed: nothing of it is kept.
            if self.total > 0 && self.window.contains(&(self.total + pending.len)) {
                pending.kept.push(c);
            }
            pending.len += 1;
            pending.last = Some(c);
            if c == ' ' {
                pending.trailing_spaces += 1;
            } else {
                pending.last_not_space = Some(c);
                pending.trailing_spaces = 0;
            }
            return;
        }
        if self.total > 0 {
            self.kept.push_str(&pending.kept);
            self.readable += pending.len;
            self.total += pending.len;
        }
        self.pending = Pending::default();
        if self.window.contains(&self.total) {
            self.kept.push(c);
        }
        if !c.is_control() {
            self.readable += 1;
        }
        self.total += 1;
        self.last = Some(c);
    }

    /// The last character written, whitespace included.
    pub(crate) fn last(&self) -> Option<char> {
        self.pending.last.or(self.last)
    }

    /// Whether nothing has been written, whitespace included.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0 && self.pending.len == 0
    }

    /// Takes back the spaces written last (other whitespace stays).
    pub(crate) fn drop_trailing_spaces(&mut self) {
        let pending = &mut self.pending;
        let spaces = pending.trailing_spaces;
        if spaces == 0 {
            return;
        }
        let start = self.total + pending.len - spaces;
        if self.total > 0 {
            let kept = (start.max(self.window.start)..(start + spaces).min(self.window.end)).len();
            pending.kept.truncate(pending.kept.len() - kept);
        }
        pending.len -= spaces;
        pending.trailing_spaces = 0;
        pending.last = pending.last_not_space;
    }

    /// The window, and how many characters of the whole text were readable.
    pub(crate) fn finish(self) -> (TextWindow, usize) {
        let window = TextWindow {
            text: self.kept,
            from: self.window.start,
            total: self.total,
        };
        (window, self.readable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_its_characters_and_counts_the_whole() {
        let window = TextWindow::of("héllo wörld", 2, 5);
        assert_eq!(window.text, "llo w");
        assert_eq!(
            (window.from, window.chars(), window.end(), window.total),
            (2, 5, 7, 11)
        );
        let past = TextWindow::of("héllo", 9, 5);
        assert_eq!((past.text.as_str(), past.end(), past.total), ("", 9, 5));
    }

    #[test]
    fn whatever_is_written_only_the_window_is_held() {
        let mut writer = WindowWriter::new(10, 5);
        writer.push('a');
        for i in 0..3_000_000 {
            writer.push(if i % 2 == 0 { ' ' } else { '\t' });
        }
        writer.push('b');
        for _ in 0..3_000_000 {
            writer.push('\r');
            writer.push('\n');
        }
        assert!(writer.kept.capacity() <= 64 && writer.pending.kept.capacity() <= 64);
        let (window, readable) = writer.finish();
        assert_eq!(window.total, 3_000_002);
        assert_eq!(readable, 3_000_002);
        assert_eq!(
            window.text, "\t \t \t",
            "places 10 to 14: the 10th to 14th of the whitespace"
        );
    }

    #[test]
    fn spaces_taken_back_are_taken_from_the_window_too() {
        let mut writer = WindowWriter::new(0, 100);
        "x \t  ".chars().for_each(|c| writer.push(c));
        writer.drop_trailing_spaces();
        writer.push('\n');
        writer.push('y');
        assert_eq!(writer.finish().0.text, "x \t\ny");
    }
}

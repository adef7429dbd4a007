//! A PDF's text: the strings its content streams show, in the order the file holds them.
//!
//! This reads the text layer of ordinary PDFs (uncompressed or `FlateDecode` content streams,
//! fonts with a one-byte encoding, UTF-16 strings). It does not render, run OCR, or decode
//! CID fonts; a file whose text cannot be read that way is named as such, never guessed at.

use std::borrow::Cow;

use miniz_oxide::inflate::decompress_to_vec_zlib_with_limit;

use super::window::{TextWindow, WindowWriter};

/// The most bytes one stream may inflate to.
const MAX_STREAM_BYTES: usize = 16 * 1024 * 1024;

/// The filters this reader does not undo; a stream with any of them is passed over.
const OTHER_FILTERS: [&[u8]; 8] = [
    b"/ASCII85Decode",
    b"/ASCIIHexDecode",
    b"/LZWDecode",
    b"/RunLengthDecode",
    b"/DCTDecode",
    b"/JPXDecode",
    b"/CCITTFaxDecode",
    b"/JBIG2Decode",
];

/// Why a PDF's text cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdfError {
    /// It does not start like a PDF.
    #[error("it is not a PDF")]
    NotPdf,
    /// It is encrypted.
    #[error("the PDF is encrypted")]
    Encrypted,
    /// Nothing readable was found.
    #[error("the PDF has no text this worker can read (a scan, or fonts it does not decode)")]
    NoText,
}

/// The text of a PDF, whole.
///
/// A turn never needs it whole: the engine reads a page of it at a time, keeping only that
/// page as it reads. This is for a caller that wants it all and can hold it.
pub fn text(bytes: &[u8]) -> Result<String, PdfError> {
    text_window(bytes, 0, usize::MAX).map(|window| window.text)
}

/// At most `limit` characters of a PDF's text from character `from`, and the whole text's
/// length: read through once, keeping only the characters asked for, so that what is held is
/// the file and one inflated stream at a time, never the whole text.
pub(crate) fn text_window(bytes: &[u8], from: usize, limit: usize) -> Result<TextWindow, PdfError> {
    if !bytes.starts_with(b"%PDF-") {
        return Err(PdfError::NotPdf);
    }
    if find(bytes, b"/Encrypt", 0).is_some() {
        return Err(PdfError::Encrypted);
    }
    let mut shown = WindowWriter::new(from, limit);
    for (dict, data) in streams(bytes) {
        if [
            "/XObject",
            "/ObjStm",
            "/XRef",
            "/Metadata",
            "/FontFile",
            "/Length1",
        ]
        .iter()
        .any(|k| find(dict, k.as_bytes(), 0).is_some())
        {
            continue;
        }
        let content = if find(dict, b"/Filter", 0).is_none() {
            Cow::Borrowed(data)
        } else if find(dict, b"/FlateDecode", 0).is_some()
            && !OTHER_FILTERS.iter().any(|f| find(dict, f, 0).is_some())
        {
            match decompress_to_vec_zlib_with_limit(data, MAX_STREAM_BYTES) {
                Ok(inflated) => Cow::Owned(inflated),
                Err(_) => continue,
            }
        } else {
            continue;
        };
        shown_text(&content, &mut shown);
    }
    let (window, readable) = shown.finish();
    if window.total == 0 || readable * 10 < window.total * 9 {
        return Err(PdfError::NoText);
    }
    Ok(window)
}

/// Where the text a content stream shows is written.
trait Shows {
    /// Writes one character.
    fn push(&mut self, c: char);
    /// The last character written, whitespace included.
    fn last(&self) -> Option<char>;
    /// Whether nothing has been written.
    fn is_empty(&self) -> bool;
    /// Takes back the spaces written last.
    fn drop_trailing_spaces(&mut self);

    /// Writes a string's characters: UTF-16 after its byte order mark, otherwise one byte a
    /// character.
    fn push_decoded(&mut self, bytes: &[u8]) {
        match bytes.strip_prefix(&[0xFE, 0xFF]) {
            Some(utf16) => {
                let units = utf16
                    .chunks(2)
                    .map(|p| u16::from_be_bytes([p[0], p.get(1).copied().unwrap_or(0)]));
                char::decode_utf16(units).for_each(|c| self.push(c.unwrap_or(char::REPLACEMENT_CHARACTER)));
            }
            None => bytes.iter().for_each(|&b| self.push(char::from(b))),
        }
    }

    /// Ends the line: its trailing spaces dropped, then one newline (none twice in a row, none
    /// first).
    fn newline(&mut self) {
        if !self.is_empty() && self.last() != Some('\n') {
            self.drop_trailing_spaces();
            self.push('\n');
        }
    }
}

impl Shows for WindowWriter {
    fn push(&mut self, c: char) {
        WindowWriter::push(self, c);
    }

    fn last(&self) -> Option<char> {
        WindowWriter::last(self)
    }

    fn is_empty(&self) -> bool {
        WindowWriter::is_empty(self)
    }

    fn drop_trailing_spaces(&mut self) {
        WindowWriter::drop_trailing_spaces(self);
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| at + from)
}

/// Each stream's dictionary and raw data.
fn streams(bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(start) = find(bytes, b"stream", at) {
        at = start + 6;
        // `endstream` also contains `stream`; a stream keyword follows a dictionary's `>>`.
        let before = &bytes[..start];
        let trimmed = before.trim_ascii_end();
        if !trimmed.ends_with(b">>") {
            continue;
        }
        let Some(dict_start) = before.windows(3).rposition(|w| w == b"obj") else {
            continue;
        };
        let dict = &trimmed[dict_start..];
        let mut data_start = at;
        if bytes.get(data_start) == Some(&b'\r') {
            data_start += 1;
        }
        if bytes.get(data_start) == Some(&b'\n') {
            data_start += 1;
        }
        let Some(end) = find(bytes, b"endstream", data_start) else {
            break;
        };
        let data = bytes[data_start..end].trim_ascii_end();
        found.push((dict, data));
        at = end + 9;
    }
    found
}

/// Appends the text the content stream's text operators show.
fn shown_text(content: &[u8], out: &mut impl Shows) {
    let mut operands: Vec<Operand> = Vec::new();
    let mut lexer = Lexer {
        bytes: content,
        at: 0,
    };
    while let Some(token) = lexer.next() {
        match token {
            Token::Operand(operand) => operands.push(operand),
            Token::Operator(op) => {
                match op {
                    b"Tj" | b"'" | b"\"" => {
                        if op != b"Tj" {
                            out.newline();
                        }
                        if let Some(Operand::Text(text)) = operands.last() {
                            out.push_decoded(text);
                        }
                    }
                    b"TJ" => {
                        if let Some(Operand::Array(items)) = operands.last() {
                            for item in items {
                                match item {
                                    Operand::Text(text) => out.push_decoded(text),
                                    Operand::Number(n) if *n < -200.0 && out.last() != Some(' ') => {
                                        out.push(' ')
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    b"T*" | b"ET" => out.newline(),
                    b"Td" | b"TD" => match operands.as_slice() {
                        [.., Operand::Number(_), Operand::Number(ty)] if *ty != 0.0 => out.newline(),
                        _ if !matches!(out.last(), Some(' ' | '\n')) && !out.is_empty() => out.push(' '),
                        _ => {}
                    },
                    _ => {}
                }
                operands.clear();
            }
        }
    }
}

#[derive(Debug)]
enum Operand {
    Number(f64),
    /// A string's bytes, decoded as they are shown.
    Text(Vec<u8>),
    Array(Vec<Operand>),
    Other,
}

enum Token<'a> {
    Operand(Operand),
    Operator(&'a [u8]),
}

struct Lexer<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn is_delimiter(b: u8) -> bool {
    b.is_ascii_whitespace() || b"()<>[]{}/%".contains(&b)
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while let Some(b) = self.peek() {
            if b == b'%' {
                while self.peek().is_some_and(|b| b != b'\n' && b != b'\r') {
                    self.at += 1;
                }
            } else if b.is_ascii_whitespace() || b == 0 {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn word(&mut self) -> &'a [u8] {
        let start = self.at;
        while self.peek().is_some_and(|b| !is_delimiter(b)) {
            self.at += 1;
        }
        &self.bytes[start..self.at]
    }

    fn next(&mut self) -> Option<Token<'a>> {
        self.skip_space();
        let b = self.peek()?;
        Some(match b {
            b'(' => Token::Operand(Operand::Text(self.literal())),
            b'<' if self.bytes.get(self.at + 1) == Some(&b'<') => {
                self.skip_dictionary();
                Token::Operand(Operand::Other)
            }
            b'<' => Token::Operand(Operand::Text(self.hex())),
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    match self.peek() {
                        None => break,
                        Some(b']') => {
                            self.at += 1;
                            break;
                        }
                        Some(_) => match self.next() {
                            Some(Token::Operand(operand)) => items.push(operand),
                            Some(Token::Operator(_)) => {}
                            None => break,
                        },
                    }
                }
                Token::Operand(Operand::Array(items))
            }
            b'/' => {
                self.at += 1;
                self.word();
                Token::Operand(Operand::Other)
            }
            b')' | b'>' | b']' | b'{' | b'}' => {
                self.at += 1;
                Token::Operand(Operand::Other)
            }
            _ => {
                let word = self.word();
                if word.is_empty() {
                    self.at += 1;
                    return Some(Token::Operand(Operand::Other));
                }
                match std::str::from_utf8(word).ok().and_then(|w| w.parse::<f64>().ok()) {
                    Some(n) => Token::Operand(Operand::Number(n)),
                    None => Token::Operator(word),
                }
            }
        })
    }

    fn skip_dictionary(&mut self) {
        let mut depth = 0usize;
        while let Some(b) = self.peek() {
            if b == b'<' && self.bytes.get(self.at + 1) == Some(&b'<') {
                depth += 1;
                self.at += 2;
            } else if b == b'>' && self.bytes.get(self.at + 1) == Some(&b'>') {
                self.at += 2;
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            } else if b == b'(' {
                self.literal();
            } else {
                self.at += 1;
            }
        }
    }

    /// A `( … )` string: balanced parentheses, backslash escapes.
    fn literal(&mut self) -> Vec<u8> {
        self.at += 1;
        let mut out = Vec::new();
        let mut depth = 1;
        while let Some(b) = self.peek() {
            self.at += 1;
            match b {
                b'\\' => {
                    let Some(next) = self.peek() else { break };
                    self.at += 1;
                    match next {
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'0'..=b'7' => {
                            let mut value = u32::from(next - b'0');
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(d @ b'0'..=b'7') => {
                                        value = value * 8 + u32::from(d - b'0');
                                        self.at += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push((value & 0xFF) as u8);
                        }
                        b'\r' => {
                            if self.peek() == Some(b'\n') {
                                self.at += 1;
                            }
                        }
                        b'\n' => {}
                        other => out.push(other),
                    }
                }
                b'(' => {
                    depth += 1;
                    out.push(b);
                }
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    out.push(b);
                }
                _ => out.push(b),
            }
        }
        out
    }

    /// A `< … >` hex string.
    fn hex(&mut self) -> Vec<u8> {
        self.at += 1;
        let mut digits = Vec::new();
        while let Some(b) = self.peek() {
            self.at += 1;
            if b == b'>' {
                break;
            }
            if let Some(d) = (b as char).to_digit(16) {
                digits.push(d as u8);
            }
        }
        if digits.len() % 2 == 1 {
            digits.push(0);
        }
        digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(content: &[u8], from: usize, limit: usize) -> (TextWindow, usize) {
        let mut out = WindowWriter::new(from, limit);
        shown_text(content, &mut out);
        out.finish()
    }

    /// The text as this reader wrote it before it kept only a window: the whole text in a
    /// `String`, trimmed at the end; and its readable characters.
    struct Whole(String);

    impl Shows for Whole {
        fn push(&mut self, c: char) {
            self.0.push(c);
        }

        fn last(&self) -> Option<char> {
            self.0.chars().next_back()
        }

        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        fn drop_trailing_spaces(&mut self) {
            let kept = self.0.trim_end_matches(' ').len();
            self.0.truncate(kept);
        }
    }

    fn whole(content: &[u8]) -> (String, usize) {
        let mut out = Whole(String::new());
        shown_text(content, &mut out);
        let text = out.0.trim().to_owned();
        let readable = text
            .chars()
            .filter(|c| !c.is_control() || c.is_whitespace())
            .count();
        (text, readable)
    }

    #[test]
    fn strings_escapes_and_arrays_become_lines_of_text() {
        let (window, readable) = shown(
            br"BT /F1 12 Tf 72 720 Td (  Hello \(world\)) Tj 0 -14 Td [(Sp) -250 (aced)] TJ T* <FEFF00E9> Tj (\101\102  ) ' ( \t) Tj ET",
            0,
            usize::MAX,
        );
        assert_eq!(window.text, "Hello (world)\nSp aced\n\u{e9}\nAB");
        assert_eq!((window.total, readable), (26, 26));
    }

    #[test]
    fn every_window_of_any_stream_is_that_part_of_the_whole_text() {
        const PIECES: [&str; 16] = [
            "(one  two) Tj ",
            "(  three) Tj ",
            "( \t) Tj ",
            "(   ) Tj ",
            "(\\r\\n ) Tj ",
            "(\\001\\002) ' ",
            "(x) \" ",
            "[(fo) -300 (ur)] TJ ",
            "[( ) -300 ( \t ) 50 (z)] TJ ",
            "<FEFF00E9 0020 D800> Tj ",
            "T* ",
            "0 -14 Td ",
            "5 0 Td ",
            "ET ",
            "BT ",
            "(\\n\\n) Tj ",
        ];
        let mut state = 0x9E37_79B9_u32;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as usize % n
        };
        for _ in 0..400 {
            let content: String = (0..1 + next(24)).map(|_| PIECES[next(PIECES.len())]).collect();
            let (text, readable) = whole(content.as_bytes());
            let total = text.chars().count();
            for _ in 0..8 {
                let (from, limit) = (next(total + 3), next(total + 3));
                let (window, counted) = shown(content.as_bytes(), from, limit);
                assert_eq!(
                    window,
                    TextWindow::of(&text, from, limit),
                    "{content:?} {from} {limit}"
                );
                assert_eq!(counted, readable, "{content:?}");
            }
            let (all, _) = shown(content.as_bytes(), 0, usize::MAX);
            assert_eq!(all.text, text, "{content:?}");
        }
    }

    #[test]
    fn what_is_not_a_readable_pdf_is_named() {
        assert_eq!(text(b"hello"), Err(PdfError::NotPdf));
        assert_eq!(
            text(b"%PDF-1.7\ntrailer << /Encrypt 5 0 R >>"),
            Err(PdfError::Encrypted)
        );
        assert_eq!(text(b"%PDF-1.4\n%%EOF\n"), Err(PdfError::NoText));
    }
}

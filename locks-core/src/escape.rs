//! Text from elsewhere, made safe to show: [`Escaped`] writes a string with every character
//! that could break a line, move the cursor, recolour a terminal or hide or reorder text written
//! as an escape, so that a lock key or a peer's reason shown in a log or on a terminal is
//! always one visible piece of one line.
//!
//! Escaped: `\` as `\\`; line feed, carriage return and tab as `\n`, `\r`, `\t`; every other
//! control character (C0, DEL, C1), the line and paragraph separators, and the invisible format
//! characters (soft hyphen, zero-width spaces and joiners, bidirectional marks, embeddings,
//! overrides and isolates, the byte order mark, interlinear annotations) as `\u{hex}`.
//! Everything else, other letters and symbols of any script included, is written as it is.

use std::fmt::{self, Write};

/// `s`, escaped as the module documentation says; at most `max` characters of it when made
/// with [`Escaped::bounded`], then `…` and how many bytes were left out.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a> {
    text: &'a str,
    max: usize,
}

impl<'a> Escaped<'a> {
    /// All of `text`, escaped.
    pub fn new(text: &'a str) -> Escaped<'a> {
        Escaped {
            text,
            max: usize::MAX,
        }
    }

    /// The first `max` characters of `text`, escaped, and a count of the bytes left out.
    pub fn bounded(text: &'a str, max: usize) -> Escaped<'a> {
        Escaped { text, max }
    }
}

/// Whether `c` is written as an escape (see the module documentation).
pub fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{61c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (i, c)) in self.text.char_indices().enumerate() {
            if n == self.max {
                return write!(f, "…({} more bytes)", self.text.len() - i);
            }
            match c {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if needs_escape(c) => write!(f, "\\u{{{:x}}}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_could_break_a_line_or_hide_text_is_escaped() {
        let shown = Escaped::new("a\nERROR x\r\x1b[2J\\\u{202e}b\u{200b}é日").to_string();
        assert_eq!(shown, "a\\nERROR x\\r\\u{1b}[2J\\\\\\u{202e}b\\u{200b}é日");
        assert!(!shown.chars().any(|c| c != '\\' && needs_escape(c)));
    }

    #[test]
    fn a_bounded_text_says_how_much_was_left_out() {
        assert_eq!(
            Escaped::bounded("abcdef", 4).to_string(),
            "abcd…(2 more bytes)"
        );
        assert_eq!(Escaped::bounded("abc", 4).to_string(), "abc");
        assert_eq!(
            Escaped::bounded("日本語", 1).to_string(),
            "日…(6 more bytes)"
        );
    }
}

//! Diagnostics: an error located in a source file, rendered the way compilers do
//! (`file:line:col: error: message`, then the line and a caret under the column).

use std::fmt;

/// The most chars of the offending line a diagnostic shows: a longer line is cut to
/// this many around the column, with `…` where it was cut.
pub const EXCERPT_CHARS: usize = 200;

/// The most chars of one word (a name, a token) a diagnostic's message shows: a
/// longer one is cut to this many, followed by `…` and its length.
pub const WORD_CHARS: usize = 64;

/// An error in a `.fg` file, located at a line and column.
///
/// `Display` renders it as
///
/// ```text
/// mlp.fg:3:7: error: matmul: inner dimensions differ: [64, 784] @ [512, 10] (784 vs 512)
///   h = matmul(x, w1)
///       ^
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Diagnostic {
    /// The file name as given to the parser.
    pub file: String,
    /// Line of the error, 1-based.
    pub line: usize,
    /// Column of the error, 1-based, counted in chars (not bytes).
    pub col: usize,
    /// What is wrong; a word longer than [`WORD_CHARS`] is abbreviated, and the whole is at
    /// most [`MESSAGE_CHARS`] chars.
    pub message: String,
    /// The text of the offending line, without its line terminator; a line longer
    /// than [`EXCERPT_CHARS`] is cut around the column, with `…` where it was cut.
    pub line_text: String,
    /// The column of the caret in `line_text`, 1-based, in chars: `col` unless the
    /// line was cut.
    pub caret: usize,
}

impl Diagnostic {
    /// A diagnostic for byte `offset` of `source` (clamped to the source and moved
    /// back to a char boundary, so any offset is safe).
    pub fn at(file: &str, source: &str, offset: usize, message: impl Into<String>) -> Diagnostic {
        let (line, col, line_start) = locate(source, offset);
        let line_end = source[line_start..]
            .find('\n')
            .map_or(source.len(), |i| line_start + i);
        let line_text = source[line_start..line_end].trim_end_matches('\r');
        let at = clamp_to_char(line_text, located_offset(source, offset) - line_start);
        Diagnostic::on_line(file, line, col, message.into(), line_text, at)
    }

    /// A diagnostic at byte `at` of `line_text` (a char boundary), which is line
    /// `line`, column `col` of its file: the line is excerpted and the message's long
    /// words abbreviated, so a diagnostic stays short whatever the input.
    pub(crate) fn on_line(
        file: &str,
        line: usize,
        col: usize,
        message: String,
        line_text: &str,
        at: usize,
    ) -> Diagnostic {
        let (line_text, caret) = excerpt(line_text, at);
        Diagnostic {
            file: file.to_string(),
            line,
            col,
            message: bounded_message(&message),
            line_text,
            caret,
        }
    }
}

/// The byte offset `locate` reports for `offset`: clamped, moved off a final newline,
/// back to a char boundary and off a CRLF's `\n`.
fn located_offset(source: &str, offset: usize) -> usize {
    let mut offset = offset.min(source.len());
    if offset == source.len() && offset > 0 && source.ends_with('\n') {
        offset -= 1;
    }
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    if source[offset..].starts_with('\n') && source[..offset].ends_with('\r') {
        offset -= 1;
    }
    offset
}

/// `at`, at most `s.len()`, moved back to a char boundary of `s`.
fn clamp_to_char(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// At most [`EXCERPT_CHARS`] chars of `line` around byte `at` (with `…` where cut),
/// and the 1-based column of `at` in the excerpt. Only the excerpt is looked at, so
/// a line of gigabytes costs no more than a short one.
fn excerpt(line: &str, at: usize) -> (String, usize) {
    let half = EXCERPT_CHARS / 2;
    let start = line[..at]
        .char_indices()
        .rev()
        .nth(half - 1)
        .map_or(0, |(i, _)| i);
    let end = line[at..]
        .char_indices()
        .nth(EXCERPT_CHARS - line[start..at].chars().count())
        .map_or(line.len(), |(i, _)| at + i);
    let mut text = String::new();
    let mut caret = line[start..at].chars().count() + 1;
    if start > 0 {
        text.push('…');
        caret += 1;
    }
    text.push_str(&line[start..end]);
    if end < line.len() {
        text.push('…');
    }
    (text, caret)
}

/// The most chars of a diagnostic's message: a message that quotes the input (a string
/// attribute of control chars, each escaped as `\u{11}`) can otherwise be several times
/// longer than the input, even with every word abbreviated.
pub const MESSAGE_CHARS: usize = 1000;

/// `text` cut to `limit` chars, followed by `…` and its length when it was longer.
/// `text` as a message: long words abbreviated ([`abbreviate`]) and the whole cut to
/// [`MESSAGE_CHARS`] chars, so that no input can make a message of megabytes.
pub fn bounded_message(text: &str) -> String {
    cut(&abbreviate(text), MESSAGE_CHARS)
}

fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((at, _)) => format!("{}…({} chars)", &text[..at], text.chars().count()),
        None => text.to_string(),
    }
}

/// `text` with every word longer than [`WORD_CHARS`] chars cut to that many and
/// followed by `…` and its length (`qqqq…(10000000 chars)`). Words are runs of chars
/// other than white space, quotes and brackets, so a quoted name keeps its quotes.
pub fn abbreviate(text: &str) -> String {
    abbreviate_words(text, WORD_CHARS)
}

/// [`abbreviate`] with another bound: every word longer than `limit` chars is cut to
/// that many, followed by `…` and its length. The CLI passes its messages and summaries
/// through this with a bound that real paths and names stay under, so that a graph with a
/// name of megabytes cannot make a message of megabytes.
pub fn abbreviate_words(text: &str, limit: usize) -> String {
    let is_word = |c: char| !c.is_whitespace() && !"`'\"()[]{},:;".contains(c);
    let mut out = String::with_capacity(text.len().min(4 * EXCERPT_CHARS));
    let mut rest = text;
    while !rest.is_empty() {
        let word_len = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_len);
        match word.char_indices().nth(limit) {
            Some((cut, _)) => {
                out.push_str(&word[..cut]);
                out.push_str(&format!("…({} chars)", word.chars().count()));
            }
            None => out.push_str(word),
        }
        let gap = after.find(is_word).unwrap_or(after.len());
        out.push_str(&after[..gap]);
        rest = &after[gap..];
    }
    out
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The caret line copies tabs from the source line so the caret stays
        // under the right char however the terminal expands tabs.
        let mut pad: String = self
            .line_text
            .chars()
            .take(self.caret.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let have = pad.chars().count();
        pad.extend(std::iter::repeat_n(
            ' ',
            self.caret.saturating_sub(1 + have),
        ));
        write!(
            f,
            "{}:{}:{}: error: {}\n  {}\n  {}^",
            self.file, self.line, self.col, self.message, self.line_text, pad
        )
    }
}

impl std::error::Error for Diagnostic {}

/// The 1-based line and column of byte `offset`, and the byte offset where its line
/// starts. An offset at the very end of a file that ends with a newline is shown at
/// the end of the last line rather than on an empty line after it.
pub(crate) fn locate(source: &str, offset: usize) -> (usize, usize, usize) {
    // At a CRLF line end, point at the `\r`: it ends the visible line.
    let offset = located_offset(source, offset);
    let before = &source[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let col = source[line_start..offset].chars().count() + 1;
    (line, col, line_start)
}

/// An error at a byte offset of the source being parsed; it becomes a
/// [`Diagnostic`] once the file name and source are at hand.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    /// Byte offset of the offending text.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl Located {
    /// An error at `offset`.
    pub fn new(offset: usize, message: impl Into<String>) -> Located {
        Located {
            offset,
            message: message.into(),
        }
    }

    /// Attaches the file name and source text.
    pub fn into_diagnostic(self, file: &str, source: &str) -> Diagnostic {
        Diagnostic::at(file, source, self.offset, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_caret_under_the_column() {
        let src = "graph g() {\n  h = matmul(x, w1)\n}\n";
        let d = Diagnostic::at("mlp.fg", src, src.find("matmul").unwrap(), "bad");
        assert_eq!((d.line, d.col), (2, 7));
        assert_eq!(
            d.to_string(),
            "mlp.fg:2:7: error: bad\n    h = matmul(x, w1)\n        ^"
        );
    }

    #[test]
    fn columns_count_chars_and_tabs_are_kept() {
        let src = "a\n\té = x$";
        let d = Diagnostic::at("f", src, src.find('$').unwrap(), "m");
        assert_eq!((d.line, d.col), (2, 7));
        assert_eq!(d.to_string(), "f:2:7: error: m\n  \té = x$\n  \t     ^");
    }

    #[test]
    fn long_lines_are_excerpted_around_the_column() {
        let line = format!("{}${}", "a".repeat(500), "b".repeat(500));
        let d = Diagnostic::at("f", &line, 500, "m");
        assert_eq!((d.line, d.col), (1, 501));
        assert_eq!(d.line_text.chars().count(), EXCERPT_CHARS + 2);
        assert_eq!(d.line_text.chars().nth(d.caret - 1), Some('$'));
        assert!(d.line_text.starts_with('…') && d.line_text.ends_with('…'));
        // Near the start nothing is cut before the column.
        let d = Diagnostic::at("f", &line, 3, "m");
        assert_eq!((d.col, d.caret), (4, 4));
        assert!(!d.line_text.starts_with('…') && d.line_text.ends_with('…'));
    }

    #[test]
    fn long_words_are_abbreviated() {
        let name = "é".repeat(100);
        assert_eq!(
            abbreviate(&format!("undefined value `{name}`, see `x`")),
            format!(
                "undefined value `{}…(100 chars)`, see `x`",
                "é".repeat(WORD_CHARS)
            )
        );
        assert_eq!(abbreviate("short words stay"), "short words stay");
    }

    #[test]
    fn end_of_file_points_after_the_last_line() {
        let src = "ab\ncd\n";
        let d = Diagnostic::at("f", src, src.len(), "eof");
        assert_eq!((d.line, d.col, d.line_text.as_str()), (2, 3, "cd"));
        let d = Diagnostic::at("f", "", 0, "empty");
        assert_eq!((d.line, d.col, d.line_text.as_str()), (1, 1, ""));
        // Offsets past the end or inside a char are clamped, never a panic.
        let d = Diagnostic::at("f", "é", 1, "inside");
        assert_eq!((d.line, d.col), (1, 1));
        let d = Diagnostic::at("f", "x\r\ny", 1, "crlf");
        assert_eq!((d.line, d.col, d.line_text.as_str()), (1, 2, "x"));
        let d = Diagnostic::at("f", "x\r\ny", 2, "crlf");
        assert_eq!((d.line, d.col, d.line_text.as_str()), (1, 2, "x"));
        let d = Diagnostic::at("f", "x\r\n", 3, "crlf eof");
        assert_eq!((d.line, d.col, d.line_text.as_str()), (1, 2, "x"));
    }
}

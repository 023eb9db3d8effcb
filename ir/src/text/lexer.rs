//! The lexer: `.fg` source text to tokens with byte spans.
//!
//! It is pulled one token at a time by the parser, so the first error in the file
//! is the one reported, whether it is a lexing or a parsing or a typing error.
//! Newlines are tokens (a statement ends at the end of its line); the parser skips
//! them where a construct is still open (inside parentheses and brackets).

use super::diag::Located;

/// What a token is. Identifiers borrow from the source.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum TokenKind<'a> {
    /// `[A-Za-z_][A-Za-z0-9_.]*`: names, op names, keywords, dtypes.
    Ident(&'a str),
    /// Digits only; the sign is a separate [`TokenKind::Minus`].
    Int(u64),
    /// A number with a point or an exponent.
    Float(f64),
    /// A double-quoted string, escapes resolved.
    Str(String),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `=`
    Eq,
    /// `-`
    Minus,
    /// `->`
    Arrow,
    /// `+` (in size expressions)
    Plus,
    /// `*` (in size expressions)
    Star,
    /// The end of a line (comments are skipped up to it).
    Newline,
    /// The end of the source.
    Eof,
}

/// A token and its byte span `start..end` in the source.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Token<'a> {
    /// What it is.
    pub kind: TokenKind<'a>,
    /// Byte offset of its first char.
    pub start: usize,
    /// Byte offset just past its last char.
    pub end: usize,
}

/// Cuts source text into tokens on demand.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `src`. A leading byte-order mark is skipped, as
    /// editors on some systems write one.
    pub fn new(src: &'a str) -> Lexer<'a> {
        let pos = if src.starts_with('\u{feff}') { 3 } else { 0 };
        Lexer { src, pos }
    }

    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat_while(&mut self, f: impl Fn(char) -> bool) {
        while let Some(c) = self.peek_char() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    /// The next token; after the end of the source, [`TokenKind::Eof`] forever.
    pub fn next_token(&mut self) -> Result<Token<'a>, Located> {
        // Blanks and comments; a comment runs up to (not including) its newline.
        loop {
            self.eat_while(|c| c == ' ' || c == '\t' || c == '\r');
            if self.peek_char() == Some('#') {
                self.eat_while(|c| c != '\n');
            } else {
                break;
            }
        }
        let start = self.pos;
        let Some(c) = self.bump() else {
            return Ok(Token {
                kind: TokenKind::Eof,
                start,
                end: start,
            });
        };
        let kind = match c {
            '\n' => TokenKind::Newline,
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            '[' => TokenKind::LBracket,
            ']' => TokenKind::RBracket,
            '{' => TokenKind::LBrace,
            '}' => TokenKind::RBrace,
            ',' => TokenKind::Comma,
            ':' => TokenKind::Colon,
            '=' => TokenKind::Eq,
            '-' if self.peek_char() == Some('>') => {
                self.pos += 1;
                TokenKind::Arrow
            }
            '-' => TokenKind::Minus,
            '+' => TokenKind::Plus,
            '*' => TokenKind::Star,
            '"' => self.string(start)?,
            c if c.is_ascii_digit() => self.number(start)?,
            c if c.is_ascii_alphabetic() || c == '_' => {
                self.eat_while(is_name_char);
                TokenKind::Ident(&self.src[start..self.pos])
            }
            '.' if self.peek_char().is_some_and(|c| c.is_ascii_digit()) => {
                self.eat_while(is_name_char);
                return Err(Located::new(
                    start,
                    format!(
                        "bad number `{}`: a number starts with a digit (write `0{}`)",
                        &self.src[start..self.pos],
                        &self.src[start..self.pos]
                    ),
                ));
            }
            c => return Err(Located::new(start, unexpected_char(c))),
        };
        Ok(Token {
            kind,
            start,
            end: self.pos,
        })
    }

    /// Lexes a number starting at `start` (see [`scan_number`]).
    fn number(&mut self, start: usize) -> Result<TokenKind<'a>, Located> {
        let (end, scan) = scan_number(self.src, start);
        self.pos = end;
        let text = &self.src[start..end];
        match scan {
            NumberScan::Int(v) => Ok(TokenKind::Int(v)),
            NumberScan::Float(v) => Ok(TokenKind::Float(v)),
            NumberScan::Bad => Err(Located::new(start, format!("bad number `{text}`"))),
            NumberScan::IntTooLarge => Err(Located::new(
                start,
                format!("integer `{text}` is too large"),
            )),
            NumberScan::FloatOutOfRange => Err(Located::new(
                start,
                format!("number `{text}` is out of range (beyond f64; write `inf` for infinity)"),
            )),
        }
    }

    /// Lexes a string whose opening quote is consumed. Escapes are those Rust's
    /// `{:?}` writes (`\"`, `\\`, `\n`, `\r`, `\t`, `\0`, `\'`, `\u{..}`), so
    /// printed strings read back unchanged.
    fn string(&mut self, start: usize) -> Result<TokenKind<'a>, Located> {
        let mut out = String::new();
        loop {
            let at = self.pos;
            match self.bump() {
                None | Some('\n') => {
                    return Err(Located::new(
                        start,
                        "unterminated string (a string ends with `\"` on the same line)",
                    ))
                }
                Some('"') => return Ok(TokenKind::Str(out)),
                Some('\\') => {
                    let c = match self.bump() {
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('\'') => '\'',
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some('0') => '\0',
                        Some('u') => self.unicode_escape(at)?,
                        _ => return Err(Located::new(
                            at,
                            "unknown escape in string (known: \\\" \\\\ \\n \\r \\t \\0 \\u{..})",
                        )),
                    };
                    out.push(c);
                }
                Some(c) => out.push(c),
            }
        }
    }

    /// The `{XXXX}` of a `\u{XXXX}` escape starting at byte `at`.
    fn unicode_escape(&mut self, at: usize) -> Result<char, Located> {
        let bad = || Located::new(at, "bad unicode escape (write `\\u{1F600}`)");
        if self.bump() != Some('{') {
            return Err(bad());
        }
        let digits = self.pos;
        self.eat_while(|c| c.is_ascii_hexdigit());
        let hex = &self.src[digits..self.pos];
        if hex.is_empty() || hex.len() > 6 || self.bump() != Some('}') {
            return Err(bad());
        }
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(bad)
    }
}

/// True for chars that may continue a name.
/// What [`scan_number`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NumberScan {
    /// An integer literal.
    Int(u64),
    /// A finite float literal.
    Float(f64),
    /// Malformed: an exponent without digits, or letters, digits or points glued on.
    Bad,
    /// An integer beyond `u64`.
    IntTooLarge,
    /// A float beyond `f64`.
    FloatOutOfRange,
}

/// Scans the number literal starting with the ASCII digit at byte `start` of `src`: `12`,
/// `0.5`, `1.`, `1e-5`, `2.5E+3`, the literal syntax of both the `.fg` and the `.tile`
/// formats. Letters, digits or points glued to it make it a bad number rather than a
/// number followed by a name. Returns the end of the literal (glued characters included)
/// and what it is.
pub fn scan_number(src: &str, start: usize) -> (usize, NumberScan) {
    let bytes = src.as_bytes();
    let mut pos = start;
    let eat = |pos: &mut usize, f: &dyn Fn(u8) -> bool| {
        while *pos < bytes.len() && f(bytes[*pos]) {
            *pos += 1;
        }
    };
    eat(&mut pos, &|c| c.is_ascii_digit());
    let mut is_float = false;
    let mut well_formed = true;
    if bytes.get(pos) == Some(&b'.') {
        is_float = true;
        pos += 1;
        eat(&mut pos, &|c| c.is_ascii_digit());
    }
    if matches!(bytes.get(pos), Some(b'e' | b'E')) {
        is_float = true;
        pos += 1;
        if matches!(bytes.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        let digits = pos;
        eat(&mut pos, &|c| c.is_ascii_digit());
        well_formed = pos > digits;
    }
    let glued = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
    if bytes.get(pos).is_some_and(|&c| glued(c)) {
        eat(&mut pos, &glued);
        well_formed = false;
    }
    let text = &src[start..pos];
    let scan = if !well_formed {
        NumberScan::Bad
    } else if is_float {
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => NumberScan::Float(v),
            Ok(_) => NumberScan::FloatOutOfRange,
            Err(_) => NumberScan::Bad,
        }
    } else {
        text.parse::<u64>()
            .map_or(NumberScan::IntTooLarge, NumberScan::Int)
    };
    (pos, scan)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

fn unexpected_char(c: char) -> String {
    if c.is_control() || c.is_whitespace() {
        format!("unexpected character U+{:04X}", c as u32)
    } else if c.is_alphabetic() {
        format!("unexpected character `{c}` (names are ASCII: letters, digits, `_` and `.`)")
    } else {
        format!("unexpected character `{c}`")
    }
}

/// How a token is named in "expected X, found Y" messages.
pub(crate) fn describe(tok: &Token<'_>, src: &str) -> String {
    match tok.kind {
        TokenKind::Newline => "end of line".into(),
        TokenKind::Eof => "end of file".into(),
        _ => {
            let text = &src[tok.start..tok.end];
            if text.chars().count() > 32 {
                let short: String = text.chars().take(32).collect();
                format!("`{short}...`")
            } else {
                format!("`{text}`")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(src: &str) -> Result<Vec<TokenKind<'_>>, (usize, String)> {
        let mut lx = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = lx.next_token().map_err(|e| (e.offset, e.message))?;
            if t.kind == TokenKind::Eof {
                return Ok(out);
            }
            out.push(t.kind);
        }
    }

    #[test]
    fn tokens_and_spans() {
        use TokenKind::*;
        assert_eq!(
            lex("h = add(x.1, -2) # c\n->").unwrap(),
            vec![
                Ident("h"),
                Eq,
                Ident("add"),
                LParen,
                Ident("x.1"),
                Comma,
                Minus,
                Int(2),
                RParen,
                Newline,
                Arrow
            ]
        );
        let mut lx = Lexer::new("\u{feff}  ab ");
        let t = lx.next_token().unwrap();
        assert_eq!((t.start, t.end), (5, 7));
        assert_eq!(lex("# only a comment").unwrap(), vec![]);
    }

    #[test]
    fn numbers() {
        use TokenKind::*;
        assert_eq!(
            lex("0 12 0.5 1. 1.e2 1e-5 2.5E+3 18446744073709551615").unwrap(),
            vec![
                Int(0),
                Int(12),
                Float(0.5),
                Float(1.0),
                Float(100.0),
                Float(1e-5),
                Float(2500.0),
                Int(u64::MAX)
            ]
        );
        for bad in ["1e", "1.5.3", "12abc", "0x1F", "1e+", "3_000"] {
            let (at, msg) = lex(bad).unwrap_err();
            assert_eq!(at, 0, "{bad}");
            assert!(msg.contains(&format!("bad number `{bad}`")), "{bad}: {msg}");
        }
        assert!(lex("18446744073709551616")
            .unwrap_err()
            .1
            .contains("too large"));
        assert!(lex("1e999").unwrap_err().1.contains("out of range"));
        assert!(lex(".5").unwrap_err().1.contains("`0.5`"));
    }

    #[test]
    fn strings() {
        assert_eq!(
            lex(r#""a\"b\\c\n\u{e9}""#).unwrap(),
            vec![TokenKind::Str("a\"b\\c\né".into())]
        );
        assert_eq!(lex("x \"abc").unwrap_err().0, 2);
        assert!(lex("\"a\nb\"").unwrap_err().1.contains("unterminated"));
        assert!(lex(r#""\q""#).unwrap_err().1.contains("unknown escape"));
        assert!(lex(r#""\u{110000}""#).unwrap_err().1.contains("unicode"));
        // Whatever Rust's Debug writes reads back as the same string.
        let s = "tab\t quote\" nul\0 esc\u{1b} é ☃";
        assert_eq!(
            lex(&format!("{s:?}")).unwrap(),
            vec![TokenKind::Str(s.into())]
        );
    }

    #[test]
    fn bad_characters() {
        assert_eq!(
            lex("a $").unwrap_err(),
            (2, "unexpected character `$`".into())
        );
        assert!(lex("é").unwrap_err().1.contains("ASCII"));
        assert!(lex("\u{a0}").unwrap_err().1.contains("U+00A0"));
    }
}

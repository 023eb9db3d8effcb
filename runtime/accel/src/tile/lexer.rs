//! The lexer: `.tile` source text to tokens with byte spans.
//!
//! The parser pulls one token at a time, so the first error in the file is the one
//! reported. Newlines are tokens because a statement ends at the end of its line;
//! the parser skips them inside `(..)` and `[..]`. A comment on a line of its own
//! is a token too (the tree keeps it); a comment after code is skipped.

use ferrite_ir::text::{scan_number, NumberScan};

/// What a token is. Identifiers borrow from the source.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum Tok<'a> {
    /// `[A-Za-z_][A-Za-z0-9_]*`: names, keywords, builtins, dtypes.
    Ident(&'a str),
    /// Digits only; a sign is a separate token.
    Int(u64),
    /// A number with a point or an exponent.
    Float(f64),
    /// A punctuation or operator token, as written (`(`, `<=`, `+=`, ...).
    Punct(&'static str),
    /// A `#` comment on a line of its own: the text after the `#` (and after one
    /// space, if one follows it).
    Comment(&'a str),
    /// The end of a line (a comment runs up to it).
    Newline,
    /// The end of the source.
    Eof,
}

/// A token and its byte span.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Token<'a> {
    /// What it is.
    pub tok: Tok<'a>,
    /// Byte offset of its first char.
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
}

/// A lexing error at a byte offset.
#[derive(Clone, Debug)]
pub(crate) struct LexError {
    /// Where the bad text starts.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

/// Punctuation, longest first so `<=` wins over `<`.
const PUNCT: [&str; 28] = [
    "<<", ">>", "<=", ">=", "==", "!=", "+=", "-=", "*=", "(", ")", "[", "]", "{", "}", ",", ":",
    "=", "<", ">", "!", "+", "-", "*", "/", "%", "&", "^",
];

/// `|` is kept apart only because the table above is full.
const PIPE: &str = "|";

/// Cuts source text into tokens on demand (cloned to look ahead).
#[derive(Clone)]
pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    /// True until a token other than a newline is read on the current line.
    line_start: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `src` (a leading byte-order mark is skipped).
    pub fn new(src: &'a str) -> Lexer<'a> {
        let pos = if src.starts_with('\u{feff}') { 3 } else { 0 };
        Lexer {
            src,
            pos,
            line_start: true,
        }
    }

    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn eat_while(&mut self, f: impl Fn(char) -> bool) {
        while let Some(c) = self.peek_char() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    /// The next token; after the end of the source, [`Tok::Eof`] forever.
    pub fn next_token(&mut self) -> Result<Token<'a>, LexError> {
        loop {
            self.eat_while(|c| c == ' ' || c == '\t' || c == '\r');
            if self.peek_char() != Some('#') {
                break;
            }
            let start = self.pos;
            self.eat_while(|c| c != '\n');
            if self.line_start {
                let text = self.src[start + 1..self.pos].trim_end_matches('\r');
                return Ok(Token {
                    tok: Tok::Comment(text.strip_prefix(' ').unwrap_or(text)),
                    start,
                    end: self.pos,
                });
            }
        }
        let start = self.pos;
        self.line_start = self.peek_char().is_none_or(|c| c == '\n');
        let Some(c) = self.peek_char() else {
            return Ok(Token {
                tok: Tok::Eof,
                start,
                end: start,
            });
        };
        let tok = if c == '\n' {
            self.pos += 1;
            Tok::Newline
        } else if c.is_ascii_digit() {
            self.number(start)?
        } else if c.is_ascii_alphabetic() || c == '_' {
            self.eat_while(is_name_char);
            Tok::Ident(&self.src[start..self.pos])
        } else if let Some(p) = PUNCT
            .iter()
            .chain(std::iter::once(&PIPE))
            .find(|p| self.src[start..].starts_with(**p))
        {
            self.pos += p.len();
            Tok::Punct(p)
        } else if c == '.' {
            return Err(LexError {
                offset: start,
                message: "unexpected `.`: a number starts with a digit (write `0.5`), and the \
                          language has no methods (write `cast(x, f16)`, not `x.to(f16)`)"
                    .into(),
            });
        } else {
            return Err(LexError {
                offset: start,
                message: format!("unexpected character `{}`", c.escape_debug()),
            });
        };
        Ok(Token {
            tok,
            start,
            end: self.pos,
        })
    }

    /// Lexes a number (the `.fg` literal syntax: [`ferrite_ir::text::scan_number`]).
    fn number(&mut self, start: usize) -> Result<Tok<'a>, LexError> {
        let (end, scan) = scan_number(self.src, start);
        self.pos = end;
        let text = &self.src[start..end];
        let bad = |message: String| LexError {
            offset: start,
            message,
        };
        match scan {
            NumberScan::Int(v) => Ok(Tok::Int(v)),
            NumberScan::Float(v) => Ok(Tok::Float(v)),
            NumberScan::Bad => Err(bad(format!("bad number `{text}`"))),
            NumberScan::IntTooLarge => Err(bad(format!("integer `{text}` is too large"))),
            NumberScan::FloatOutOfRange => Err(bad(format!(
                "number `{text}` is out of range (write `inf` for infinity)"
            ))),
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// How a token is named in "expected X, found Y" messages.
pub(crate) fn describe(tok: &Tok<'_>) -> String {
    match tok {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(v) => format!("`{v}`"),
        Tok::Float(v) => format!("`{v:?}`"),
        Tok::Punct(p) => format!("`{p}`"),
        Tok::Comment(_) => "a comment".into(),
        Tok::Newline => "the end of the line".into(),
        Tok::Eof => "the end of the file".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(src: &str) -> Result<Vec<Tok<'_>>, String> {
        let mut l = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = l.next_token().map_err(|e| e.message)?;
            if t.tok == Tok::Eof {
                return Ok(out);
            }
            out.push(t.tok);
        }
    }

    #[test]
    fn operators_take_the_longest_match() {
        let toks = lex("a<=b # c\n x+=1.5e2|y!=z").unwrap();
        assert_eq!(
            toks,
            vec![
                Tok::Ident("a"),
                Tok::Punct("<="),
                Tok::Ident("b"),
                Tok::Newline,
                Tok::Ident("x"),
                Tok::Punct("+="),
                Tok::Float(150.0),
                Tok::Punct("|"),
                Tok::Ident("y"),
                Tok::Punct("!="),
                Tok::Ident("z"),
            ]
        );
    }

    #[test]
    fn comments_on_lines_of_their_own_are_tokens() {
        let toks = lex("# head\n  #  two\nx # after\n#\r\n").unwrap();
        assert_eq!(
            toks,
            vec![
                Tok::Comment("head"),
                Tok::Newline,
                Tok::Comment(" two"),
                Tok::Newline,
                Tok::Ident("x"),
                Tok::Newline,
                Tok::Comment(""),
                Tok::Newline,
            ]
        );
    }

    #[test]
    fn bad_numbers_and_chars_are_errors() {
        assert!(lex("12ab").unwrap_err().contains("bad number `12ab`"));
        assert!(lex("1e").unwrap_err().contains("bad number"));
        assert!(lex("1e999").unwrap_err().contains("out of range"));
        assert!(lex("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert!(lex("x.to").unwrap_err().contains("no methods"));
        assert!(lex("a @ b")
            .unwrap_err()
            .contains("unexpected character `@`"));
    }
}

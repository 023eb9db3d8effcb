//! The loop-IR reader: text as the printer writes it (see `print.rs`) back to a
//! [`Program`], so that passes and backends can be tested text in, text out.
//!
//! Reading is the printer's inverse: for a verified program `p`,
//! `print(parse_program(print(p))) == print(p)`, and the program read equals `p` up to
//! the order of the nodes in each block that the text leaves open (nodes written
//! inline have no number; bound nodes `tK` are placed at position `K` whenever the
//! text allows it). The reader adds what the text implies: node dtypes (a load has its
//! buffer's, a comparison is `bool`, an index value `i64`, a constant its suffix's or
//! its literal's default), each kernel's recorded reads and writes, the program's
//! input and output lists, and a GEMM's stage and outer axes when the `gemm` line does
//! not state them. The program is verified after reading.
//!
//! Every error is a [`Diagnostic`] at the offending line and column (a verifier error
//! at the header of the first kernel at fault); no input makes the reader panic, and
//! expressions nest at most [`MAX_NESTING`] levels deep.
//!
//! What the text does not keep, and so does not come back: the fallback value of a
//! load without a guard (never used; read as zero), the sign and payload of a
//! NaN constant, and the shape of index arithmetic the simplifier never leaves (a sum
//! nested directly in a sum reads flat, and a product negated again, `(x*3)*-1`, reads
//! as `x*-3` when it is a term of a sum: both print ` - x*3`).

use super::expr::{Block, Bound, ExprNode, ExprOp, Load, Value};
use super::ids::{AccId, BufferId, ExprRef, KernelId};
use super::index::{IndexExpr, Var};
use super::print::{default_dtype, gemm_outer_axes, gemm_stage, infix, unary_name};
use super::program::{
    Buffer, BufferKind, Donation, GemmInfo, GemmOperand, Kernel, Program, ReduceKind, Reduction,
    Stage, StoreOp,
};
use super::scalar;
use crate::hash::HashMap;
use crate::op::{BinaryOp, UnaryOp};
use crate::types::TensorType;
use crate::{DType, Diagnostic, ValueId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// How deeply expressions (scalar and index) may nest in loop-IR text. Printed programs
/// nest far less: a value used twice is bound to a name, and operator chains do not nest.
pub const MAX_NESTING: usize = 256;

/// Reads a program printed by `Program`'s `Display` and verifies it. `file` names the
/// text in diagnostics.
///
/// ```
/// let text = "program p\n  buf0: f32[4]  input 0 `x`\n  buf1: f32[4]  output 0 `y`\n\n\
///             kernel k0_relu(buf0: f32[4]) -> buf1: f32[4]   # %1\n  \
///             for i0 in 0..4 parallel:\n    buf1[i0] = relu(buf0[i0])\n";
/// let p = ferrite_ir::loops::parse_program("p.loop", text).unwrap();
/// assert_eq!(p.to_string(), text);
/// let err = ferrite_ir::loops::parse_program("p.loop", &text.replace("relu(", "relu6(")).unwrap_err();
/// assert_eq!((err.line, err.col), (7, 16));
/// ```
pub fn parse_program(file: &str, text: &str) -> Result<Program, Diagnostic> {
    let (program, headers) =
        read(text).map_err(|e| Diagnostic::at(file, text, e.offset, e.message))?;
    program.verify().map_err(|e| {
        let at = first_invalid_kernel(&program)
            .and_then(|k| headers.get(k).copied())
            .unwrap_or_else(|| text.find("program").unwrap_or(0));
        Diagnostic::at(file, text, at, format!("the program does not verify: {e}"))
    })?;
    Ok(program)
}

/// The first kernel of an invalid program whose checks fail, found by verifying
/// prefixes of the kernel list (without the outputs, which a prefix need not write);
/// `None` when only the whole program is at fault.
fn first_invalid_kernel(p: &Program) -> Option<usize> {
    let prefix_ok = |n: usize| {
        Program {
            outputs: Vec::new(),
            kernels: p.kernels[..n].to_vec(),
            ..p.clone()
        }
        .verify()
        .is_ok()
    };
    if prefix_ok(p.kernels.len()) {
        return None;
    }
    // The smallest failing prefix: prefixes fail from some length on.
    let (mut good, mut bad) = (0, p.kernels.len());
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        if prefix_ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(bad - 1)
}

/// An error at a byte offset of the text.
#[derive(Debug)]
struct Error {
    offset: usize,
    message: String,
}

type R<T> = Result<T, Error>;

fn err<T>(offset: usize, message: impl Into<String>) -> R<T> {
    Err(Error {
        offset,
        message: message.into(),
    })
}

// ---------------------------------------------------------------------------------
// Lines and tokens

/// One non-blank, non-comment line.
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    /// Leading blanks.
    indent: usize,
    /// Byte offset of the first non-blank char.
    start: usize,
    /// The text from there, without the line terminator.
    text: &'a str,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut offset = if text.starts_with('\u{feff}') { 3 } else { 0 };
    for raw in text[offset..].split_inclusive('\n') {
        let content = raw.trim_end_matches(['\n', '\r']);
        let body = content.trim_start_matches([' ', '\t']);
        let indent = content.len() - body.len();
        if !body.trim().is_empty() && !body.starts_with('#') {
            out.push(Line {
                indent,
                start: offset + indent,
                text: body.trim_end(),
            });
        }
        offset += raw.len();
    }
    out
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Tok<'a> {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident(&'a str),
    /// Digits, with an optional `_dtype` suffix.
    Int(&'a str, Option<&'a str>),
    /// A number with a point or an exponent, with an optional `_dtype` suffix.
    Float(&'a str, Option<&'a str>),
    /// Punctuation and operators.
    Sym(&'static str),
    /// A name between backticks.
    Quoted(&'a str),
    /// The end of the line.
    End,
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    /// Byte offset in the whole text.
    at: usize,
    /// Whether blanks precede it (`i0*2` is index arithmetic, `x * 2` a multiply).
    spaced: bool,
}

const SYMBOLS: [&str; 24] = [
    "//", "==", "!=", "<=", ">=", "->", "..", "(", ")", "[", "]", ",", ":", ";", "=", "<", ">",
    "+", "-", "*", "/", "%", "@", "#",
];

fn tokens<'a>(line: &Line<'a>) -> R<Vec<Token<'a>>> {
    let s = line.text;
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut spaced = false;
    while i < b.len() {
        let c = b[i];
        let at = line.start + i;
        if c == b' ' || c == b'\t' {
            spaced = true;
            i += 1;
            continue;
        }
        let tok = if c.is_ascii_alphabetic() || c == b'_' {
            let n = s[i..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(s.len() - i);
            let t = Tok::Ident(&s[i..i + n]);
            i += n;
            t
        } else if c.is_ascii_digit() {
            let start = i;
            let mut float = false;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                float = true;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    float = true;
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let number = &s[start..i];
            let mut suffix = None;
            if i + 1 < b.len() && b[i] == b'_' && b[i + 1].is_ascii_alphabetic() {
                let n = s[i + 1..]
                    .find(|ch: char| !ch.is_ascii_alphanumeric())
                    .unwrap_or(s.len() - i - 1);
                suffix = Some(&s[i + 1..i + 1 + n]);
                i += 1 + n;
            }
            if i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                return err(line.start + i, "unexpected character in a number");
            }
            if float {
                Tok::Float(number, suffix)
            } else {
                Tok::Int(number, suffix)
            }
        } else if c == b'`' {
            let rest = &s[i + 1..];
            let Some(n) = rest.find('`') else {
                return err(at, "unterminated `name`");
            };
            let t = Tok::Quoted(&rest[..n]);
            i += n + 2;
            t
        } else {
            match SYMBOLS.iter().find(|sym| s[i..].starts_with(**sym)) {
                Some(sym) => {
                    i += sym.len();
                    Tok::Sym(sym)
                }
                None => {
                    let ch = s[i..].chars().next().unwrap_or(' ');
                    return err(at, format!("unexpected character `{ch}`"));
                }
            }
        };
        out.push(Token { tok, at, spaced });
        spaced = false;
    }
    out.push(Token {
        tok: Tok::End,
        at: line.start + s.len(),
        spaced,
    });
    Ok(out)
}

/// A cursor over one line's tokens.
struct Cursor<'a> {
    toks: Vec<Token<'a>>,
    pos: usize,
    depth: usize,
}

impl<'a> Cursor<'a> {
    fn new(line: &Line<'a>) -> R<Cursor<'a>> {
        Ok(Cursor {
            toks: tokens(line)?,
            pos: 0,
            depth: 0,
        })
    }

    fn peek(&self) -> Tok<'a> {
        self.peek_at(0)
    }

    fn peek_at(&self, k: usize) -> Tok<'a> {
        self.toks
            .get(self.pos + k)
            .or(self.toks.last())
            .map_or(Tok::End, |t| t.tok)
    }

    fn token(&self) -> Token<'a> {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .copied()
            .unwrap_or(Token {
                tok: Tok::End,
                at: 0,
                spaced: false,
            })
    }

    fn at(&self) -> usize {
        self.token().at
    }

    fn bump(&mut self) -> Tok<'a> {
        let t = self.peek();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Sym(x) if x == s)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(x) if x == w)
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        let yes = self.is_sym(s);
        if yes {
            self.bump();
        }
        yes
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let yes = self.is_word(w);
        if yes {
            self.bump();
        }
        yes
    }

    #[inline(never)]
    fn found(&self) -> String {
        match self.peek() {
            Tok::Ident(s) | Tok::Int(s, None) | Tok::Float(s, None) => format!("`{s}`"),
            Tok::Int(s, Some(d)) | Tok::Float(s, Some(d)) => format!("`{s}_{d}`"),
            Tok::Sym(s) => format!("`{s}`"),
            Tok::Quoted(s) => format!("`{s}` in backticks"),
            Tok::End => "the end of the line".into(),
        }
    }

    #[inline(never)]
    fn expect_sym(&mut self, s: &str) -> R<()> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            err(self.at(), format!("expected `{s}`, found {}", self.found()))
        }
    }

    fn expect_word(&mut self, w: &str) -> R<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            err(self.at(), format!("expected `{w}`, found {}", self.found()))
        }
    }

    fn ident(&mut self, what: &str) -> R<&'a str> {
        match self.peek() {
            Tok::Ident(s) => {
                self.bump();
                Ok(s)
            }
            _ => err(
                self.at(),
                format!("expected {what}, found {}", self.found()),
            ),
        }
    }

    fn end(&self) -> R<()> {
        match self.peek() {
            Tok::End => Ok(()),
            _ => err(
                self.at(),
                format!("expected the end of the line, found {}", self.found()),
            ),
        }
    }

    /// An unsigned integer without suffix.
    fn uint(&mut self, what: &str) -> R<u64> {
        let at = self.at();
        match self.peek() {
            Tok::Int(s, None) => {
                self.bump();
                s.parse()
                    .or_else(|_| err(at, format!("{what} `{s}` is too large")))
            }
            _ => err(at, format!("expected {what}, found {}", self.found())),
        }
    }

    fn usize(&mut self, what: &str) -> R<usize> {
        let at = self.at();
        let v = self.uint(what)?;
        usize::try_from(v).or_else(|_| err(at, format!("{what} {v} is too large")))
    }

    /// An integer with an optional leading `-`, as i128 (so `-9223372036854775808` reads).
    fn int_wide(&mut self, what: &str) -> R<i128> {
        let neg = self.eat_sym("-");
        let v = self.uint(what)? as i128;
        Ok(if neg { -v } else { v })
    }

    fn int(&mut self, what: &str) -> R<i64> {
        let at = self.at();
        let v = self.int_wide(what)?;
        i64::try_from(v).or_else(|_| err(at, format!("{what} {v} does not fit in i64")))
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return err(
                self.at(),
                format!("expression nested deeper than {MAX_NESTING} levels"),
            );
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }
}

/// `name` as `prefix` followed by a decimal number (`buf3` -> 3).
fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn loop_var(name: &str) -> Option<Var> {
    let (make, prefix): (fn(usize) -> Var, &str) = match name.as_bytes().first()? {
        b'i' => (Var::outer, "i"),
        b'r' => (Var::reduce, "r"),
        b'j' => (Var::store, "j"),
        _ => return None,
    };
    Some(make(numbered(name, prefix)? as usize))
}

// ---------------------------------------------------------------------------------
// Index expressions

/// A postfix operator of an index term.
enum Postfix {
    Mul(i128),
    Div(i64),
    Mod(i64),
}

impl Cursor<'_> {
    /// `term (+ term | - term)*`; a dynamic index `tK` is read as `Dynamic { value: K }`
    /// with extent 0, resolved by the block builder.
    fn index(&mut self) -> R<IndexExpr> {
        self.enter()?;
        let mut terms = vec![self.index_term(false)?];
        loop {
            if self.eat_sym("+") {
                terms.push(self.index_term(false)?);
            } else if self.eat_sym("-") {
                terms.push(self.index_term(true)?);
            } else {
                break;
            }
        }
        self.leave();
        Ok(if terms.len() == 1 {
            terms.pop().unwrap_or(IndexExpr::Const(0))
        } else {
            IndexExpr::Sum(terms)
        })
    }

    /// A primary with its `*c`, `// n`, `% n` chain; `negated` after a ` - `, which the
    /// printer writes for a negative constant or coefficient.
    fn index_term(&mut self, negated: bool) -> R<IndexExpr> {
        let at = self.at();
        let starts_literal = matches!(self.peek(), Tok::Int(..))
            || (self.is_sym("-") && matches!(self.peek_at(1), Tok::Int(..)));
        let (base, literal) = if starts_literal {
            let v = self.int_wide("an integer")?;
            (None, Some(v))
        } else {
            (Some(self.index_primary()?), None)
        };
        let mut chain = Vec::new();
        self.index_postfix(&mut chain, false)?;
        let mut literal = literal;
        if negated {
            match (chain.last_mut(), &mut literal) {
                (None, Some(v)) => *v = -*v,
                (Some(Postfix::Mul(c)), _) => *c = -*c,
                _ => chain.push(Postfix::Mul(-1)),
            }
        }
        let fits = |v: i128| -> R<i64> {
            i64::try_from(v).or_else(|_| err(at, format!("{v} does not fit in i64")))
        };
        let mut e = match (base, literal) {
            (Some(e), _) => e,
            (None, Some(v)) => IndexExpr::Const(fits(v)?),
            (None, None) => IndexExpr::Const(0),
        };
        for p in chain {
            e = match p {
                Postfix::Mul(c) => IndexExpr::Mul(Box::new(e), fits(c)?),
                Postfix::Div(n) => IndexExpr::FloorDiv(Box::new(e), n),
                Postfix::Mod(n) => IndexExpr::Mod(Box::new(e), n),
            };
        }
        Ok(e)
    }

    /// `*c`, `// n` and `% n` operators; with `glued`, only a `*` written without
    /// blanks counts (in a scalar expression `x * 2` is a multiply).
    fn index_postfix(&mut self, chain: &mut Vec<Postfix>, glued: bool) -> R<()> {
        loop {
            let t = self.token();
            if self.is_sym("*") && !(glued && t.spaced) {
                if glued && self.toks.get(self.pos + 1).is_some_and(|n| n.spaced) {
                    break;
                }
                self.bump();
                chain.push(Postfix::Mul(self.int_wide("a coefficient")?));
            } else if self.is_sym("//") || self.is_sym("%") {
                let div = self.is_sym("//");
                self.bump();
                let at = self.at();
                let n = self.int("a divisor")?;
                if n <= 0 {
                    return err(at, "a divisor must be positive");
                }
                chain.push(if div {
                    Postfix::Div(n)
                } else {
                    Postfix::Mod(n)
                });
            } else {
                return Ok(());
            }
        }
        Ok(())
    }

    fn index_primary(&mut self) -> R<IndexExpr> {
        let at = self.at();
        match self.peek() {
            Tok::Sym("(") => {
                self.bump();
                let e = self.index()?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Tok::Ident(name) => {
                self.bump();
                if let Some(v) = loop_var(name) {
                    Ok(IndexExpr::Var(v))
                } else if let Some(k) = numbered(name, "t") {
                    Ok(IndexExpr::Dynamic {
                        value: ExprRef(k),
                        extent: 0,
                    })
                } else {
                    err(
                        at,
                        format!("`{name}` is not a loop variable (`i0`, `r0`, `j0`) or a checked index (`t3`)"),
                    )
                }
            }
            _ => err(
                at,
                format!("expected an index expression, found {}", self.found()),
            ),
        }
    }

    /// `lo <= index < hi (and lo <= index < hi)*`
    fn guard(&mut self) -> R<Vec<Bound>> {
        let mut bounds = Vec::new();
        loop {
            let lo = self.int("a lower bound")?;
            self.expect_sym("<=")?;
            let expr = self.index()?;
            self.expect_sym("<")?;
            let hi = self.int("an upper bound")?;
            bounds.push(Bound { expr, lo, hi });
            if !self.eat_word("and") {
                return Ok(bounds);
            }
        }
    }

    /// `v0 in 0..e0, v1 in 0..e1, ..` with variables `{prefix}0, {prefix}1, ..`.
    fn loops(&mut self, prefix: &str) -> R<Vec<usize>> {
        let mut extents = Vec::new();
        loop {
            let at = self.at();
            let name = self.ident("a loop variable")?;
            if numbered(name, prefix) != Some(extents.len() as u32) {
                return err(
                    at,
                    format!("expected loop variable `{prefix}{}`", extents.len()),
                );
            }
            self.expect_word("in")?;
            let zero_at = self.at();
            if self.uint("a loop start")? != 0 {
                return err(zero_at, "loops start at 0");
            }
            self.expect_sym("..")?;
            extents.push(self.usize("a loop extent")?);
            if !self.eat_sym(",") {
                return Ok(extents);
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Scalar expressions

/// A literal as written.
#[derive(Clone, Copy, Debug)]
struct Literal<'a> {
    /// `1.5`, `3`, `inf`, `nan`, `true`.
    text: &'a str,
    negative: bool,
    suffix: Option<&'a str>,
    at: usize,
}

/// A load as written.
#[derive(Debug)]
struct LoadAst<'a> {
    buffer: u32,
    index: IndexExpr,
    guard: Vec<Bound>,
    other: Option<Literal<'a>>,
    at: usize,
}

/// A scalar expression as written; the block builder types it and makes nodes. The
/// variants are kept small (large payloads boxed): expressions nest deeply.
#[derive(Debug)]
enum Ast<'a> {
    Const(Box<Literal<'a>>),
    Acc(u32, usize),
    Index(Box<IndexExpr>, usize),
    Load(Box<LoadAst<'a>>),
    Checked {
        value: Box<Ast<'a>>,
        extent: u64,
        guard: Vec<Bound>,
        at: usize,
    },
    Unary(UnaryOp, Box<Ast<'a>>),
    Binary(BinaryOp, Box<Ast<'a>>, Box<Ast<'a>>, usize),
    Where(Box<[Ast<'a>; 3]>, usize),
    Cast(DType, Box<Ast<'a>>),
    Ref(u32, usize),
}

/// Binding strength of an infix operator (as the printer's `precedence`).
fn binary_op(t: Tok) -> Option<(BinaryOp, u8)> {
    let name = match t {
        Tok::Sym(s) => s,
        Tok::Ident(w @ ("and" | "or")) => w,
        _ => return None,
    };
    let op = BinaryOp::ALL
        .into_iter()
        .find(|b| infix(*b) == Some(name))?;
    let prec = match op {
        BinaryOp::Or => 1,
        BinaryOp::And => 2,
        BinaryOp::Add | BinaryOp::Sub => 4,
        BinaryOp::Mul | BinaryOp::Div => 5,
        _ => 3,
    };
    Some((op, prec))
}

impl<'a> Cursor<'a> {
    /// An expression whose operators bind at least as tightly as `min`.
    fn expr(&mut self, min: u8) -> R<Ast<'a>> {
        self.enter()?;
        let mut lhs = self.atom()?;
        while let Some((op, prec)) = binary_op(self.peek()) {
            if prec < min {
                break;
            }
            let at = self.at();
            self.bump();
            let rhs = self.expr(prec + 1)?;
            lhs = Ast::Binary(op, Box::new(lhs), Box::new(rhs), at);
        }
        self.leave();
        Ok(lhs)
    }

    #[inline(never)]
    fn literal(&mut self) -> R<Option<Literal<'a>>> {
        let at = self.at();
        let negative = self.is_sym("-");
        let k = negative as usize;
        let (text, suffix) = match self.peek_at(k) {
            Tok::Int(s, suffix) | Tok::Float(s, suffix) => (s, suffix),
            Tok::Ident(w) => match w.split_once('_') {
                Some((x @ ("inf" | "nan"), d)) => (x, Some(d)),
                None if matches!(w, "inf" | "nan") => (w, None),
                None if !negative && matches!(w, "true" | "false") => (w, None),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        self.bump();
        if negative {
            self.bump();
        }
        Ok(Some(Literal {
            text,
            negative,
            suffix,
            at,
        }))
    }

    /// An operand: a literal, a name, a call or a parenthesized expression. The
    /// recursive paths (calls, parentheses) keep their frames small; leaves are read
    /// by separate functions.
    fn atom(&mut self) -> R<Ast<'a>> {
        if self.is_sym("(") {
            return self.parenthesized();
        }
        if let Some(lit) = self.literal()? {
            return Ok(Ast::Const(Box::new(lit)));
        }
        let at = self.at();
        let Tok::Ident(name) = self.peek() else {
            return self.expected("an expression");
        };
        self.bump();
        if let Some(n) = numbered(name, "acc") {
            return Ok(Ast::Acc(n, at));
        }
        if let Some(n) = numbered(name, "t") {
            return Ok(Ast::Ref(n, at));
        }
        if self.is_sym("(") {
            return self.call(name, at);
        }
        self.leaf(name, at)
    }

    #[inline(never)]
    fn expected<T>(&self, what: &str) -> R<T> {
        err(
            self.at(),
            format!("expected {what}, found {}", self.found()),
        )
    }

    /// `(expr)` or a guarded load `(bufN[..] if GUARD else VALUE)`.
    fn parenthesized(&mut self) -> R<Ast<'a>> {
        self.bump();
        let inner = self.expr(0)?;
        if !self.is_word("if") {
            self.expect_sym(")")?;
            return Ok(inner);
        }
        match inner {
            Ast::Load(mut load) if load.guard.is_empty() => {
                self.guarded(&mut load)?;
                Ok(Ast::Load(load))
            }
            _ => err(
                self.at(),
                "only a load can be guarded (`(buf0[i0] if .. else 0.0)`)",
            ),
        }
    }

    /// The rest of a guarded load after its `bufN[..]`: `if GUARD else VALUE)`.
    #[inline(never)]
    fn guarded(&mut self, load: &mut LoadAst<'a>) -> R<()> {
        self.expect_word("if")?;
        load.guard = self.guard()?;
        self.expect_word("else")?;
        match self.literal()? {
            Some(other) => load.other = Some(other),
            None => return self.expected("the value where the guard fails"),
        }
        self.expect_sym(")")
    }

    /// A name that is not a call: a loop variable (with index arithmetic written
    /// without blanks, `i0*4`, or with `//` and `%`) or a load `bufN[..]`.
    #[inline(never)]
    fn leaf(&mut self, name: &str, at: usize) -> R<Ast<'a>> {
        if let Some(v) = loop_var(name) {
            let mut chain = Vec::new();
            self.index_postfix(&mut chain, true)?;
            let mut e = IndexExpr::Var(v);
            for p in chain {
                e = match p {
                    Postfix::Mul(c) => IndexExpr::Mul(
                        Box::new(e),
                        i64::try_from(c).or_else(|_| err(at, "coefficient out of range"))?,
                    ),
                    Postfix::Div(n) => IndexExpr::FloorDiv(Box::new(e), n),
                    Postfix::Mod(n) => IndexExpr::Mod(Box::new(e), n),
                };
            }
            return Ok(Ast::Index(Box::new(e), at));
        }
        if let Some(b) = numbered(name, "buf") {
            self.expect_sym("[")?;
            let index = self.index()?;
            self.expect_sym("]")?;
            return Ok(Ast::Load(Box::new(LoadAst {
                buffer: b,
                index,
                guard: Vec::new(),
                other: None,
                at,
            })));
        }
        err(at, format!("unknown name `{name}`"))
    }

    /// `name(..)`: a cast, an op, `where`, `checked` or `index`.
    fn call(&mut self, name: &str, at: usize) -> R<Ast<'a>> {
        // `i32(x)` is a cast (`i32` alone would be loop variable 32).
        if let Some(d) = DType::from_name(name) {
            return Ok(Ast::Cast(d, self.one_arg()?));
        }
        if let Some(u) = UnaryOp::ALL.into_iter().find(|u| unary_name(*u) == name) {
            return Ok(Ast::Unary(u, self.one_arg()?));
        }
        if let Some(b) = BinaryOp::ALL
            .into_iter()
            .find(|b| infix(*b).is_none() && b.name() == name)
        {
            let [x, y] = self.args::<2>()?;
            return Ok(Ast::Binary(b, Box::new(x), Box::new(y), at));
        }
        match name {
            "where" => Ok(Ast::Where(Box::new(self.args::<3>()?), at)),
            "checked" => self.checked(at),
            "index" => self.index_value(at),
            _ => err(at, format!("unknown operation `{name}`")),
        }
    }

    /// `(e0, e1, ..)` with `N` operands.
    fn args<const N: usize>(&mut self) -> R<[Ast<'a>; N]> {
        self.expect_sym("(")?;
        let mut out = Vec::with_capacity(N);
        for i in 0..N {
            if i > 0 {
                self.expect_sym(",")?;
            }
            out.push(self.expr(0)?);
        }
        self.expect_sym(")")?;
        out.try_into()
            .or_else(|_| err(self.at(), "wrong number of operands"))
    }

    fn one_arg(&mut self) -> R<Box<Ast<'a>>> {
        let [a] = self.args::<1>()?;
        Ok(Box::new(a))
    }

    /// `index(IDX)`: an index value.
    #[inline(never)]
    fn index_value(&mut self, at: usize) -> R<Ast<'a>> {
        self.expect_sym("(")?;
        let e = self.index()?;
        self.expect_sym(")")?;
        Ok(Ast::Index(Box::new(e), at))
    }

    /// `checked(VALUE, 0..N)`, optionally `if GUARD else 0`.
    fn checked(&mut self, at: usize) -> R<Ast<'a>> {
        self.expect_sym("(")?;
        let value = Box::new(self.expr(0)?);
        let (extent, guard) = self.checked_rest()?;
        Ok(Ast::Checked {
            value,
            extent,
            guard,
            at,
        })
    }

    #[inline(never)]
    fn checked_rest(&mut self) -> R<(u64, Vec<Bound>)> {
        self.expect_sym(",")?;
        let zero_at = self.at();
        if self.uint("0")? != 0 {
            return err(zero_at, "a checked index ranges over 0..extent");
        }
        self.expect_sym("..")?;
        let extent = self.uint("an extent")?;
        self.expect_sym(")")?;
        let mut guard = Vec::new();
        if self.eat_word("if") {
            guard = self.guard()?;
            self.expect_word("else")?;
            let zero_at = self.at();
            if self.uint("0")? != 0 {
                return err(
                    zero_at,
                    "a guarded checked index is 0 where its guard fails",
                );
            }
        }
        Ok((extent, guard))
    }
}

// ---------------------------------------------------------------------------------
// Blocks: typing expressions and placing their nodes

/// A node under construction; references are positions in `Builder::nodes`.
struct Tentative {
    node: ExprNode,
    deps: Vec<usize>,
}

/// Builds one stage's block from its bindings and roots.
struct Builder<'p> {
    buffers: &'p [Buffer],
    /// The dtypes of the accumulators defined by earlier stages of the kernel.
    accs: &'p HashMap<u32, DType>,
    nodes: Vec<Tentative>,
    /// Constants and accumulator reads are shared: the text does not say how many there are.
    shared: HashMap<ExprNode, usize>,
    /// Bound name `tK` -> node, in the order of the bindings.
    labels: Vec<(u32, usize)>,
}

fn parse_value(lit: &Literal, dtype: DType, exact_f64: bool) -> R<Value> {
    let at = lit.at;
    let value = match (lit.text, dtype.category()) {
        ("true" | "false", crate::Category::Bool) => Value::Bool(lit.text == "true"),
        ("inf", crate::Category::Float) => Value::Float(f64::INFINITY),
        ("nan", crate::Category::Float) => Value::Float(f64::NAN),
        (t, crate::Category::Float) if t.bytes().next().is_some_and(|b| b.is_ascii_digit()) => {
            // Constants print in their shortest f32 form, `other` values as f64.
            let x = if exact_f64 || dtype == DType::F64 {
                t.parse::<f64>().ok()
            } else {
                t.parse::<f32>().ok().map(f64::from)
            };
            match x {
                Some(x) => scalar::round_to(Value::Float(x), dtype),
                None => return err(at, format!("`{t}` is not a number")),
            }
        }
        (t, crate::Category::Int) if !t.contains(['.', 'e', 'E']) && t != "inf" && t != "nan" => {
            let v: i128 = match t.parse::<u64>() {
                Ok(v) => v as i128,
                Err(_) => return err(at, format!("integer `{t}` is too large")),
            };
            let v = if lit.negative { -v } else { v };
            let fits = dtype
                .int_range()
                .is_some_and(|(lo, hi)| (lo..=hi).contains(&v));
            if !fits {
                return err(at, format!("{v} does not fit in {dtype}"));
            }
            return Ok(Value::Int(v));
        }
        (t, _) => return err(at, format!("`{t}` is not a {dtype} value")),
    };
    Ok(match value {
        Value::Float(x) if lit.negative => Value::Float(-x),
        Value::Bool(_) if lit.negative => return err(at, "a bool has no sign"),
        v => v,
    })
}

impl Builder<'_> {
    fn push(&mut self, node: ExprNode) -> usize {
        let share = matches!(node.op, ExprOp::Const(_) | ExprOp::Acc(_));
        if share {
            if let Some(&t) = self.shared.get(&node) {
                return t;
            }
        }
        let mut deps = Vec::new();
        node.for_each_operand(&mut |r| deps.push(r.index()));
        deps.sort_unstable();
        deps.dedup();
        let t = self.nodes.len();
        if share {
            self.shared.insert(node.clone(), t);
        }
        self.nodes.push(Tentative { node, deps });
        t
    }

    fn dtype(&self, t: usize) -> DType {
        self.nodes[t].node.dtype
    }

    fn label(&self, k: u32, at: usize) -> R<usize> {
        match self.labels.iter().find(|(l, _)| *l == k) {
            Some((_, t)) => Ok(*t),
            None => err(at, format!("t{k} is not bound before this line")),
        }
    }

    /// `e` with its dynamic indices `tK` pointing at their checked-index nodes.
    fn resolve(&self, e: &IndexExpr, at: usize) -> R<IndexExpr> {
        Ok(match e {
            IndexExpr::Const(_) | IndexExpr::Var(_) => e.clone(),
            IndexExpr::Dynamic { value, .. } => {
                let t = self.label(value.0, at)?;
                match self.nodes[t].node.op {
                    ExprOp::CheckedIndex { extent, .. } => IndexExpr::Dynamic {
                        value: ExprRef(t as u32),
                        extent,
                    },
                    _ => return err(at, format!("{value} in an index must be a checked index")),
                }
            }
            IndexExpr::Sum(ts) => IndexExpr::Sum(
                ts.iter()
                    .map(|t| self.resolve(t, at))
                    .collect::<R<Vec<_>>>()?,
            ),
            IndexExpr::Mul(x, c) => IndexExpr::Mul(Box::new(self.resolve(x, at)?), *c),
            IndexExpr::FloorDiv(x, n) => IndexExpr::FloorDiv(Box::new(self.resolve(x, at)?), *n),
            IndexExpr::Mod(x, n) => IndexExpr::Mod(Box::new(self.resolve(x, at)?), *n),
        })
    }

    fn resolve_guard(&self, g: &[Bound], at: usize) -> R<Vec<Bound>> {
        g.iter()
            .map(|b| {
                Ok(Bound {
                    expr: self.resolve(&b.expr, at)?,
                    lo: b.lo,
                    hi: b.hi,
                })
            })
            .collect()
    }

    /// Types `e` and makes its nodes (operands first); returns the node of its value.
    fn build(&mut self, e: &Ast) -> R<usize> {
        let r = |t: usize| ExprRef(t as u32);
        let (dtype, op) = match e {
            Ast::Checked {
                value,
                extent,
                guard,
                at,
            } => {
                let v = self.build(value)?;
                let guard = self.resolve_guard(guard, *at)?;
                self.check_dtypes(e, &[v])?;
                let op = ExprOp::CheckedIndex {
                    value: r(v),
                    extent: *extent,
                    guard,
                };
                (DType::I64, op)
            }
            Ast::Unary(u, a) => {
                let a = self.build(a)?;
                let d = if *u == UnaryOp::Not {
                    DType::Bool
                } else {
                    self.dtype(a)
                };
                (d, ExprOp::Unary(*u, r(a)))
            }
            Ast::Binary(b, x, y, _) => {
                let x = self.build(x)?;
                let y = self.build(y)?;
                let d = self.check_dtypes(e, &[x, y])?;
                (d, ExprOp::Binary(*b, r(x), r(y)))
            }
            Ast::Where(abc, _) => {
                let c = self.build(&abc[0])?;
                let a = self.build(&abc[1])?;
                let b = self.build(&abc[2])?;
                let d = self.check_dtypes(e, &[c, a, b])?;
                (d, ExprOp::Where(r(c), r(a), r(b)))
            }
            Ast::Cast(d, a) => {
                let a = self.build(a)?;
                (*d, ExprOp::Cast(r(a)))
            }
            Ast::Ref(k, at) => return self.label(*k, *at),
            Ast::Const(lit) => return self.constant(lit),
            Ast::Load(l) => return self.load(l),
            Ast::Acc(a, at) => match self.accs.get(a) {
                Some(&d) => (d, ExprOp::Acc(AccId(*a))),
                None => return err(*at, format!("acc{a} is not defined by an earlier stage")),
            },
            Ast::Index(ix, at) => (DType::I64, ExprOp::Index(self.resolve(ix, *at)?)),
        };
        Ok(self.push(ExprNode { dtype, op }))
    }

    /// Checks the operand dtypes of `e` (built as `operands`) and returns its dtype.
    #[inline(never)]
    fn check_dtypes(&self, e: &Ast, operands: &[usize]) -> R<DType> {
        let d: Vec<DType> = operands.iter().map(|&t| self.dtype(t)).collect();
        match (e, d.as_slice()) {
            (Ast::Checked { at, .. }, [v]) if !v.is_int() => {
                err(*at, format!("a checked index takes an integer, not {v}"))
            }
            (Ast::Binary(b, _, _, at), [x, y]) if x != y => err(
                *at,
                format!("{} of {x} and {y}: operands must have one dtype", b.name()),
            ),
            (Ast::Binary(b, ..), _) if b.is_comparison() || b.is_logical() => Ok(DType::Bool),
            (Ast::Where(_, at), [c, a, b]) if *c != DType::Bool || a != b => err(
                *at,
                format!("where takes a bool and two values of one dtype, not {c}, {a} and {b}"),
            ),
            (Ast::Where(..), [_, a, _]) | (Ast::Binary(..), [a, _]) => Ok(*a),
            _ => Ok(DType::I64),
        }
    }

    /// The node of a constant: its suffix's dtype or its literal's default.
    #[inline(never)]
    fn constant(&mut self, lit: &Literal) -> R<usize> {
        let dtype = match lit.suffix {
            Some(s) => match DType::from_name(s) {
                Some(d) => d,
                None => return err(lit.at, format!("unknown dtype `{s}`")),
            },
            None => match lit.text {
                "true" | "false" => DType::Bool,
                t if t.contains(['.', 'e', 'E']) || t == "inf" || t == "nan" => {
                    default_dtype(Value::Float(0.0))
                }
                _ => default_dtype(Value::Int(0)),
            },
        };
        let op = ExprOp::Const(parse_value(lit, dtype, false)?);
        Ok(self.push(ExprNode { dtype, op }))
    }

    /// The node of a load; its dtype is its buffer's.
    #[inline(never)]
    fn load(&mut self, l: &LoadAst) -> R<usize> {
        let Some(buf) = self.buffers.get(l.buffer as usize) else {
            return err(l.at, format!("buf{} is not declared", l.buffer));
        };
        let dtype = buf.ty.dtype;
        let other = match &l.other {
            Some(lit) => parse_value(lit, dtype, true)?,
            None => Value::zero(dtype),
        };
        let load = Load {
            buffer: BufferId(l.buffer),
            index: self.resolve(&l.index, l.at)?,
            guard: self.resolve_guard(&l.guard, l.at)?,
            other,
        };
        Ok(self.push(ExprNode {
            dtype,
            op: ExprOp::Load(load),
        }))
    }

    /// Binds `tK` to the node of `e`.
    fn bind(&mut self, k: u32, e: &Ast, at: usize) -> R<()> {
        if self.labels.iter().any(|(l, _)| *l == k) {
            return err(at, format!("t{k} is bound twice"));
        }
        let t = self.build(e)?;
        if let Some((other, _)) = self.labels.iter().find(|(_, n)| *n == t) {
            return err(at, format!("t{k} names the same node as t{other}"));
        }
        self.labels.push((k, t));
        Ok(())
    }

    /// The final order of the nodes: each bound `tK` at position `K` where the text
    /// allows it, the others in the order they were read (operands first).
    fn order(&self) -> Vec<usize> {
        let n = self.nodes.len();
        let natural: Vec<usize> = (0..n).collect();
        let mut pinned: Vec<Option<usize>> = vec![None; n];
        let mut is_pinned = vec![false; n];
        for &(k, t) in &self.labels {
            match pinned.get_mut(k as usize) {
                Some(slot @ None) => {
                    *slot = Some(t);
                    is_pinned[t] = true;
                }
                _ => return natural,
            }
        }
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut pending: Vec<usize> = vec![0; n];
        let mut ready = BinaryHeap::new();
        for (t, tent) in self.nodes.iter().enumerate() {
            pending[t] = tent.deps.len();
            for &d in &tent.deps {
                users[d].push(t);
            }
            if tent.deps.is_empty() && !is_pinned[t] {
                ready.push(Reverse(t));
            }
        }
        let mut order = Vec::with_capacity(n);
        for slot in &pinned {
            let t = match slot {
                Some(t) if pending[*t] == 0 => *t,
                Some(_) => return natural,
                None => match ready.pop() {
                    Some(Reverse(t)) => t,
                    None => return natural,
                },
            };
            order.push(t);
            for &u in &users[t] {
                pending[u] -= 1;
                if pending[u] == 0 && !is_pinned[u] {
                    ready.push(Reverse(u));
                }
            }
        }
        order
    }

    /// The block in its final order, and the map from built nodes to its references.
    fn finish(self) -> (Block, Vec<ExprRef>) {
        let order = self.order();
        let mut map = vec![ExprRef(0); self.nodes.len()];
        for (pos, &t) in order.iter().enumerate() {
            map[t] = ExprRef(pos as u32);
        }
        let m = |r: ExprRef| map.get(r.index()).copied().unwrap_or(r);
        let nodes = order
            .iter()
            .map(|&t| self.nodes[t].node.map_refs(&m))
            .collect();
        (Block { nodes }, map)
    }
}

// ---------------------------------------------------------------------------------
// Programs, kernels and stages

/// A stage's text: where it starts and its statements.
enum StageText<'a> {
    Reduce {
        domain: Vec<usize>,
        lines: Vec<Line<'a>>,
        /// The single-line form `acc0 = sum(r0 in 0..8) expr`: the accumulator, the
        /// reduction, and the cursor after the loops.
        single: Option<(u32, ReduceKind, bool, usize, Cursor<'a>)>,
    },
    Store {
        domain: Vec<usize>,
        lines: Vec<Line<'a>>,
        /// The single-line form `for j0 in 0..8: buf1[..] = expr`.
        single: Option<Cursor<'a>>,
    },
}

/// The program in `text`, and the offset of each kernel's header.
fn read(text: &str) -> R<(Program, Vec<usize>)> {
    let lines = lines(text);
    let Some(first) = lines.first() else {
        return err(0, "expected `program NAME`, found an empty file");
    };
    let name = match first.text.strip_prefix("program") {
        Some(rest) if first.indent == 0 && rest.starts_with([' ', '\t']) => rest.trim(),
        _ => return err(first.start, "expected `program NAME`"),
    };
    let mut i = 1;
    let mut buffers = Vec::new();
    let mut donated = Vec::new();
    while i < lines.len() && lines[i].indent > 0 {
        let (b, from) = buffer_line(&lines[i], buffers.len())?;
        if let (BufferKind::Output(output), Some(input)) = (b.kind, from) {
            donated.push(Donation { input, output });
        }
        buffers.push(b);
        i += 1;
    }
    let ids = |kind: fn(BufferKind) -> Option<usize>, what: &str| -> R<Vec<BufferId>> {
        let mut list: Vec<Option<BufferId>> = Vec::new();
        for (b, line) in buffers.iter().zip(&lines[1..]) {
            if let Some(n) = kind(b.kind) {
                if list.len() <= n {
                    list.resize(n + 1, None);
                }
                if list[n].replace(b.id).is_some() {
                    return err(line.start, format!("two buffers are {what} {n}"));
                }
            }
        }
        list.iter()
            .enumerate()
            .map(|(n, b)| {
                b.map_or_else(|| err(first.start, format!("no buffer is {what} {n}")), Ok)
            })
            .collect()
    };
    let inputs = ids(
        |k| match k {
            BufferKind::Input(n) => Some(n),
            _ => None,
        },
        "input",
    )?;
    let outputs = ids(
        |k| match k {
            BufferKind::Output(n) => Some(n),
            _ => None,
        },
        "output",
    )?;
    let mut kernels = Vec::new();
    let mut headers = Vec::new();
    while i < lines.len() {
        let header = lines[i];
        if header.indent > 0 {
            return err(header.start, "expected `kernel` at the start of a line");
        }
        let mut end = i + 1;
        while end < lines.len() && lines[end].indent > 0 {
            end += 1;
        }
        let id = KernelId(kernels.len() as u32);
        kernels.push(kernel(&buffers, id, &header, &lines[i + 1..end])?);
        headers.push(header.start);
        i = end;
    }
    let program = Program {
        name: name.to_string(),
        buffers,
        inputs,
        outputs,
        kernels,
        constants: Vec::new(),
        donated,
    };
    Ok((program, headers))
}

/// `buf3: f32[4, 8]  input 0 `x``, or `buf5: f32[4, 8]  output 1 in place of input 0
/// `t.new``; the second value is that input.
fn buffer_line(line: &Line, index: usize) -> R<(Buffer, Option<usize>)> {
    let mut c = Cursor::new(line)?;
    let at = c.at();
    let name = c.ident("a buffer")?;
    if numbered(name, "buf") != Some(index as u32) {
        return err(at, format!("expected buffer `buf{index}`"));
    }
    c.expect_sym(":")?;
    let ty = c.tensor_type()?;
    let at = c.at();
    let mut from = None;
    let kind = match c.ident("`input`, `output`, `intermediate` or `scratch`")? {
        "input" => BufferKind::Input(c.usize("an input number")?),
        "output" => {
            let n = c.usize("an output number")?;
            if matches!(c.peek(), Tok::Ident("in")) {
                c.bump();
                for word in ["place", "of", "input"] {
                    let at = c.at();
                    if c.ident(&format!("`{word}`"))? != word {
                        return err(at, format!("expected `{word}`"));
                    }
                }
                from = Some(c.usize("an input number")?);
            }
            BufferKind::Output(n)
        }
        "intermediate" => BufferKind::Intermediate,
        "scratch" => BufferKind::Scratch,
        // The printer leaves a constant's data out, so text cannot rebuild it.
        "constant" => return err(
            at,
            "a constant buffer cannot be read from text: the printed program leaves its data out",
        ),
        other => {
            return err(
                at,
                format!("`{other}` is not `input`, `output`, `intermediate` or `scratch`"),
            )
        }
    };
    let Tok::Quoted(value) = c.peek() else {
        return err(
            c.at(),
            format!(
                "expected the value's name in backticks, found {}",
                c.found()
            ),
        );
    };
    c.bump();
    c.end()?;
    let buffer = Buffer {
        id: BufferId(index as u32),
        ty,
        kind,
        name: value.to_string(),
    };
    Ok((buffer, from))
}

impl Cursor<'_> {
    /// `f32[4, 8]`
    fn tensor_type(&mut self) -> R<TensorType> {
        let at = self.at();
        let name = self.ident("a dtype")?;
        let dtype = DType::from_name(name).ok_or_else(|| Error {
            offset: at,
            message: format!("unknown dtype `{name}`"),
        })?;
        let shape = self.usize_list("an extent")?;
        TensorType::new(dtype, shape).or_else(|e| err(at, e))
    }

    /// `[a, b, ..]`
    fn usize_list(&mut self, what: &str) -> R<Vec<usize>> {
        self.expect_sym("[")?;
        let mut out = Vec::new();
        if !self.eat_sym("]") {
            loop {
                out.push(self.usize(what)?);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym("]")?;
        }
        Ok(out)
    }

    /// `buf0: f32[4], buf1: f32[2, 3]` up to `)` or the end of the line.
    fn signature(&mut self) -> R<Vec<(BufferId, TensorType, usize)>> {
        let mut out = Vec::new();
        while let Tok::Ident(name) = self.peek() {
            let at = self.at();
            let Some(b) = numbered(name, "buf") else {
                return err(at, format!("expected a buffer, found `{name}`"));
            };
            self.bump();
            self.expect_sym(":")?;
            out.push((BufferId(b), self.tensor_type()?, at));
            if !self.eat_sym(",") {
                break;
            }
        }
        Ok(out)
    }
}

fn kernel(buffers: &[Buffer], id: KernelId, header: &Line, body: &[Line]) -> R<Kernel> {
    let mut c = Cursor::new(header)?;
    c.expect_word("kernel")?;
    let name = c.ident("a kernel name")?.to_string();
    c.expect_sym("(")?;
    let reads = c.signature()?;
    c.expect_sym(")")?;
    c.expect_sym("->")?;
    let writes = c.signature()?;
    let mut nodes = Vec::new();
    if c.eat_sym("#") {
        while c.eat_sym("%") {
            nodes.push(ValueId(c.uint("a value number")? as u32));
        }
    }
    c.end()?;

    let mut rest = body;
    let mut gemm_line = None;
    if let Some(l) = rest.first().filter(|l| l.text.starts_with("gemm ")) {
        gemm_line = Some(*l);
        rest = &rest[1..];
    }
    let mut domain = Vec::new();
    if let Some(l) = rest.first().filter(|l| l.text.starts_with("for i")) {
        let mut fc = Cursor::new(l)?;
        fc.expect_word("for")?;
        domain = fc.loops("i")?;
        fc.expect_word("parallel")?;
        fc.expect_sym(":")?;
        fc.end()?;
        if let Some(bad) = rest[1..].iter().find(|x| x.indent <= l.indent) {
            return err(
                bad.start,
                "expected the kernel's stages inside its outer loop",
            );
        }
        rest = &rest[1..];
    }

    let mut accs: HashMap<u32, DType> = HashMap::default();
    let mut stages = Vec::new();
    for st in stage_texts(rest)? {
        stages.push(stage(buffers, &mut accs, st)?);
    }
    let mut k = Kernel {
        id,
        name,
        nodes,
        domain,
        stages,
        gemm: None,
        reads: Vec::new(),
        writes: Vec::new(),
    };
    if let Some(l) = gemm_line {
        k.gemm = Some(gemm(&k, buffers, &l)?);
    }
    (k.reads, k.writes) = k.compute_accesses(buffers);
    for (listed, actual, what) in [(&reads, &k.reads, "reads"), (&writes, &k.writes, "writes")] {
        let listed_ids: Vec<BufferId> = listed.iter().map(|(b, _, _)| *b).collect();
        let actual_ids: Vec<BufferId> = actual.iter().map(|a| a.buffer).collect();
        if listed_ids != actual_ids {
            let show = |l: &[BufferId]| {
                l.iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return err(
                header.start,
                format!(
                    "the kernel {what} [{}], not [{}] as its header says",
                    show(&actual_ids),
                    show(&listed_ids)
                ),
            );
        }
        for (b, ty, at) in listed {
            if let Some(buf) = buffers.get(b.index()) {
                if buf.ty != *ty {
                    return err(*at, format!("{b} is declared {}, not {ty}", buf.ty));
                }
            }
        }
    }
    Ok(k)
}

/// Splits a kernel's stage lines into stages.
fn stage_texts<'a>(lines: &[Line<'a>]) -> R<Vec<StageText<'a>>> {
    let mut out = Vec::new();
    let Some(base) = lines.first().map(|l| l.indent) else {
        return Ok(out);
    };
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.indent != base {
            return err(l.start, "unexpected indentation");
        }
        // The lines of a block: those indented deeper than its header.
        let block = |from: usize| -> (Vec<Line<'a>>, usize) {
            let mut end = from;
            while end < lines.len() && lines[end].indent > base {
                end += 1;
            }
            (lines[from..end].to_vec(), end)
        };
        let mut c = Cursor::new(&l)?;
        match c.peek() {
            Tok::Ident("reduce") => {
                c.bump();
                let domain = if c.eat_word("over") {
                    c.expect_word("one")?;
                    c.expect_word("point")?;
                    Vec::new()
                } else {
                    c.loops("r")?
                };
                c.expect_sym(":")?;
                c.end()?;
                let (body, end) = block(i + 1);
                out.push(StageText::Reduce {
                    domain,
                    lines: body,
                    single: None,
                });
                i = end;
            }
            Tok::Ident("store") => {
                c.bump();
                c.expect_word("over")?;
                c.expect_word("one")?;
                c.expect_word("point")?;
                c.expect_sym(":")?;
                c.end()?;
                let (body, end) = block(i + 1);
                out.push(StageText::Store {
                    domain: Vec::new(),
                    lines: body,
                    single: None,
                });
                i = end;
            }
            Tok::Ident("for") => {
                c.bump();
                let domain = c.loops("j")?;
                c.expect_sym(":")?;
                if matches!(c.peek(), Tok::End) {
                    let (body, end) = block(i + 1);
                    out.push(StageText::Store {
                        domain,
                        lines: body,
                        single: None,
                    });
                    i = end;
                } else {
                    out.push(StageText::Store {
                        domain,
                        lines: Vec::new(),
                        single: Some(c),
                    });
                    i += 1;
                }
            }
            Tok::Ident(a) if numbered(a, "acc").is_some() => {
                let at = c.at();
                let acc = numbered(a, "acc").unwrap_or(0);
                c.bump();
                c.expect_sym("=")?;
                let (kind, dot) = c.reduce_kind()?;
                c.expect_sym("(")?;
                let domain = if c.eat_word("one") {
                    c.expect_word("point")?;
                    Vec::new()
                } else {
                    c.loops("r")?
                };
                c.expect_sym(")")?;
                out.push(StageText::Reduce {
                    domain,
                    lines: Vec::new(),
                    single: Some((acc, kind, dot, at, c)),
                });
                i += 1;
            }
            _ => {
                // Flat stores of one point: bindings, then stores; a binding after a
                // store starts the next stage.
                let mut end = i;
                let mut seen_store = false;
                while end < lines.len() && lines[end].indent == base {
                    let t = lines[end].text;
                    let is_binding =
                        t.starts_with('t') && t[1..].starts_with(|ch: char| ch.is_ascii_digit());
                    let is_store = t.starts_with("buf");
                    if !(is_binding || is_store) || (is_binding && seen_store) {
                        break;
                    }
                    seen_store |= is_store;
                    end += 1;
                }
                if end == i {
                    return err(l.start, format!("expected a stage, found {}", c.found()));
                }
                out.push(StageText::Store {
                    domain: Vec::new(),
                    lines: lines[i..end].to_vec(),
                    single: None,
                });
                i = end;
            }
        }
    }
    Ok(out)
}

impl<'a> Cursor<'a> {
    /// A reduction's name: its kind, and whether it is a dot product (`dot`).
    fn reduce_kind(&mut self) -> R<(ReduceKind, bool)> {
        let at = self.at();
        let name = self.ident("a reduction")?;
        if name == "dot" {
            return Ok((ReduceKind::Sum, true));
        }
        [
            ReduceKind::Sum,
            ReduceKind::Prod,
            ReduceKind::Max,
            ReduceKind::Min,
            ReduceKind::ArgMax,
            ReduceKind::ArgMin,
        ]
        .into_iter()
        .find(|k| k.name() == name)
        .map(|k| (k, false))
        .map_or_else(|| err(at, format!("unknown reduction `{name}`")), Ok)
    }

    /// What a reduction combines: `value`, or `value, rhs` for a dot product.
    fn reduced(&mut self, dot: bool) -> R<(Ast<'a>, Option<Ast<'a>>)> {
        let value = self.expr(0)?;
        let rhs = if dot {
            self.expect_sym(",")?;
            Some(self.expr(0)?)
        } else {
            None
        };
        Ok((value, rhs))
    }
}

/// A reduction statement `accN = KIND(value[, rhs])` in block form, or the rest of
/// the single-line form after `KIND(loops)`.
struct ReductionText<'a> {
    acc: u32,
    kind: ReduceKind,
    value: Ast<'a>,
    rhs: Option<Ast<'a>>,
    at: usize,
}

fn stage(buffers: &[Buffer], accs: &mut HashMap<u32, DType>, st: StageText) -> R<Stage> {
    let mut b = Builder {
        buffers,
        accs,
        nodes: Vec::new(),
        shared: HashMap::default(),
        labels: Vec::new(),
    };
    match st {
        StageText::Reduce {
            domain,
            lines,
            single,
        } => {
            let mut texts = Vec::new();
            // Writes besides accumulating (a backend's stash): built as they are read.
            let mut stores = Vec::new();
            if let Some((acc, kind, dot, at, mut c)) = single {
                let (value, rhs) = c.reduced(dot)?;
                c.end()?;
                texts.push(ReductionText {
                    acc,
                    kind,
                    value,
                    rhs,
                    at,
                });
            }
            for l in &lines {
                let mut c = Cursor::new(l)?;
                let at = c.at();
                let name = c.ident("a binding, a store or an accumulator")?;
                if let Some(k) = numbered(name, "t") {
                    c.expect_sym("=")?;
                    let e = c.expr(0)?;
                    c.end()?;
                    b.bind(k, &e, at)?;
                    continue;
                }
                if let Some(buf) = numbered(name, "buf") {
                    stores.push(store_statement(&mut b, &mut c, buf, at)?);
                    continue;
                }
                let Some(acc) = numbered(name, "acc") else {
                    return err(
                        at,
                        format!(
                            "expected `tN = ..`, `bufN[..] = ..` or `accN = ..`, found `{name}`"
                        ),
                    );
                };
                c.expect_sym("=")?;
                let (kind, dot) = c.reduce_kind()?;
                c.expect_sym("(")?;
                let (value, rhs) = c.reduced(dot)?;
                c.expect_sym(")")?;
                c.end()?;
                texts.push(ReductionText {
                    acc,
                    kind,
                    value,
                    rhs,
                    at,
                });
            }
            let mut built = Vec::new();
            for r in &texts {
                let v = b.build(&r.value)?;
                let rhs = match &r.rhs {
                    Some(e) => Some(b.build(e)?),
                    None => None,
                };
                built.push((r, v, rhs));
            }
            let mut defined = Vec::new();
            let mut reductions = Vec::new();
            let dtypes: Vec<DType> = built.iter().map(|(_, v, _)| b.dtype(*v)).collect();
            let (body, map) = b.finish();
            for ((r, v, rhs), vd) in built.into_iter().zip(dtypes) {
                if accs.contains_key(&r.acc) || defined.contains(&r.acc) {
                    return err(r.at, format!("acc{} is defined twice", r.acc));
                }
                defined.push(r.acc);
                let dtype = if r.kind.is_arg() { DType::I64 } else { vd };
                reductions.push(Reduction {
                    acc: AccId(r.acc),
                    kind: r.kind,
                    dtype,
                    value: map[v],
                    rhs: rhs.map(|t| map[t]),
                });
            }
            for r in &reductions {
                accs.insert(r.acc.0, r.dtype);
            }
            Ok(Stage::Reduce {
                domain,
                body,
                reductions,
                stores: store_ops(stores, &map),
            })
        }
        StageText::Store {
            domain,
            lines,
            single,
        } => {
            let mut stores = Vec::new();
            let mut cursors = Vec::new();
            if let Some(c) = single {
                cursors.push(c);
            }
            for l in &lines {
                cursors.push(Cursor::new(l)?);
            }
            for mut c in cursors {
                let at = c.at();
                let name = c.ident("a binding or a store")?;
                if let Some(k) = numbered(name, "t") {
                    c.expect_sym("=")?;
                    let e = c.expr(0)?;
                    c.end()?;
                    b.bind(k, &e, at)?;
                    continue;
                }
                let Some(buf) = numbered(name, "buf") else {
                    return err(
                        at,
                        format!("expected `tN = ..` or `bufN[..] = ..`, found `{name}`"),
                    );
                };
                stores.push(store_statement(&mut b, &mut c, buf, at)?);
            }
            let (body, map) = b.finish();
            Ok(Stage::Store {
                domain,
                body,
                stores: store_ops(stores, &map),
            })
        }
    }
}

/// The rest of a store statement `bufN[index] = value` after its buffer: builds the
/// value, and returns the buffer, the index and the value's tentative node.
fn store_statement(
    b: &mut Builder,
    c: &mut Cursor,
    buf: u32,
    at: usize,
) -> R<(u32, IndexExpr, usize)> {
    if b.buffers.get(buf as usize).is_none() {
        return err(at, format!("buf{buf} is not declared"));
    }
    c.expect_sym("[")?;
    let index = c.index()?;
    c.expect_sym("]")?;
    c.expect_sym("=")?;
    let e = c.expr(0)?;
    c.end()?;
    let v = b.build(&e)?;
    let index = b.resolve(&index, at)?;
    Ok((buf, index, v))
}

/// Store statements with their nodes renumbered as the finished block (`map`) has them.
fn store_ops(stores: Vec<(u32, IndexExpr, usize)>, map: &[ExprRef]) -> Vec<StoreOp> {
    let m = |r: ExprRef| map.get(r.index()).copied().unwrap_or(r);
    stores
        .into_iter()
        .map(|(buf, index, v)| StoreOp {
            buffer: BufferId(buf),
            index: index.map_refs(&m),
            value: map[v],
        })
        .collect()
}

/// `gemm acc0 = buf0[0; 6, 1] @ buf1[0; 5, 1]  batch [] m 4 n 5 k 6 [stage S] [axes [..]]`
fn gemm(k: &Kernel, buffers: &[Buffer], line: &Line) -> R<GemmInfo> {
    let mut c = Cursor::new(line)?;
    c.expect_word("gemm")?;
    let at = c.at();
    let acc = match numbered(c.ident("an accumulator")?, "acc") {
        Some(a) => AccId(a),
        None => return err(at, "expected an accumulator (`acc0`)"),
    };
    c.expect_sym("=")?;
    let lhs = c.gemm_operand(buffers)?;
    c.expect_sym("@")?;
    let rhs = c.gemm_operand(buffers)?;
    c.expect_word("batch")?;
    let batch = c.usize_list("a batch extent")?;
    c.expect_word("m")?;
    let m = c.usize("m")?;
    c.expect_word("n")?;
    let n = c.usize("n")?;
    c.expect_word("k")?;
    let kk = c.usize("k")?;
    let mut g = GemmInfo {
        batch,
        m,
        n,
        k: kk,
        lhs,
        rhs,
        stage: 0,
        acc,
        outer_axes: Vec::new(),
    };
    g.outer_axes = gemm_outer_axes(&g);
    let stage_at = c.at();
    g.stage = if c.eat_word("stage") {
        c.usize("a stage number")?
    } else {
        match gemm_stage(k, &g) {
            Some(s) => s,
            None => return err(stage_at, format!("no reduction stage defines {acc}")),
        }
    };
    if c.eat_word("axes") {
        c.expect_sym("[")?;
        let mut axes = Vec::new();
        if !c.eat_sym("]") {
            loop {
                if c.eat_word("_") {
                    axes.push(None);
                } else {
                    axes.push(Some(c.usize("an outer axis")?));
                }
                if !c.eat_sym(",") {
                    break;
                }
            }
            c.expect_sym("]")?;
        }
        g.outer_axes = axes;
    }
    c.end()?;
    Ok(g)
}

impl Cursor<'_> {
    /// `buf0[offset, batch strides..; row stride, col stride]`
    fn gemm_operand(&mut self, buffers: &[Buffer]) -> R<GemmOperand> {
        let at = self.at();
        let Some(b) = numbered(self.ident("a buffer")?, "buf") else {
            return err(at, "expected a buffer (`buf0`)");
        };
        if buffers.get(b as usize).is_none() {
            return err(at, format!("buf{b} is not declared"));
        }
        self.expect_sym("[")?;
        let offset = self.int("an offset")?;
        let mut batch_strides = Vec::new();
        while self.eat_sym(",") {
            batch_strides.push(self.int("a batch stride")?);
        }
        self.expect_sym(";")?;
        let row_stride = self.int("a row stride")?;
        self.expect_sym(",")?;
        let col_stride = self.int("a column stride")?;
        self.expect_sym("]")?;
        Ok(GemmOperand {
            buffer: BufferId(b),
            offset,
            batch_strides,
            row_stride,
            col_stride,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOFTMAX: &str = "\
program softmax
  buf0: f32[4, 8]  input 0 `x`
  buf1: f32[4, 8]  output 0 `y`

kernel k0_softmax(buf0: f32[4, 8]) -> buf1: f32[4, 8]   # %1 %2 %3
  for i0 in 0..4 parallel:
    acc0 = max(r0 in 0..8) buf0[i0*8 + r0]
    reduce r0 in 0..8:
      t3 = exp(buf0[i0*8 + r0] - acc0)
      acc1 = sum(t3)
      acc2 = argmax(t3)
    for j0 in 0..8: buf1[i0*8 + j0] = exp(buf0[i0*8 + j0] - acc0) / acc1
";

    fn read_ok(text: &str) -> Program {
        let p = parse_program("t.loop", text).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(p.to_string(), text, "the program read prints differently");
        p
    }

    /// The error for `text`, checked to be at `line:col` and to mention `needle`.
    fn read_err(text: &str, line: usize, col: usize, needle: &str) {
        let d = parse_program("t.loop", text).unwrap_err();
        assert!(
            d.message.contains(needle) && (d.line, d.col) == (line, col),
            "expected `{needle}` at {line}:{col}, got {d}"
        );
    }

    #[test]
    fn reads_what_the_printer_writes() {
        let p = read_ok(SOFTMAX);
        let k = &p.kernels[0];
        assert_eq!((k.domain.clone(), k.stages.len()), (vec![4], 3));
        assert_eq!(k.nodes, vec![ValueId(1), ValueId(2), ValueId(3)]);
        let Stage::Reduce {
            body, reductions, ..
        } = &k.stages[1]
        else {
            panic!("a reduction stage");
        };
        // t3 is node 3: the load, the accumulator and the difference come first.
        assert_eq!(reductions[0].value, ExprRef(3));
        assert_eq!(reductions[1].dtype, DType::I64);
        assert!(matches!(body.nodes[1].op, ExprOp::Acc(AccId(0))));
        assert_eq!(k.reads.len(), 1);
        assert_eq!(p.inputs, vec![BufferId(0)]);
    }

    #[test]
    fn constants_carry_their_dtype() {
        let text = "\
program c
  buf0: f16[3]  input 0 `h`
  buf1: i32[3]  input 1 `i`
  buf2: f16[3]  output 0 `a`
  buf3: i32[3]  output 1 `b`

kernel k0(buf0: f16[3], buf1: i32[3]) -> buf2: f16[3], buf3: i32[3]
  for i0 in 0..3 parallel:
    buf2[i0] = buf0[i0] * 0.099975586_f16 + -inf_f16
    buf3[i0] = where(buf1[i0] > -3_i32, i32(index(2)), i32(i0 // 2))
";
        let p = read_ok(text);
        let Stage::Store { body, .. } = &p.kernels[0].stages[0] else {
            panic!("a store stage");
        };
        let c = body
            .nodes
            .iter()
            .find(|n| n.dtype == DType::F16 && matches!(n.op, ExprOp::Const(_)))
            .unwrap();
        // 0.1 rounded to f16 (written in its shortest f32 form), not to f32.
        assert_eq!(
            c.op,
            ExprOp::Const(scalar::round_to(Value::Float(0.1), DType::F16))
        );
        let rounded = parse_program("t.loop", &text.replace("0.099975586_f16", "0.1_f16"));
        assert_eq!(rounded.as_ref(), Ok(&p));
        assert!(body
            .nodes
            .iter()
            .any(|n| n.op == ExprOp::Index(IndexExpr::Const(2))));
        // A bare constant has its literal's default dtype, which must fit its context.
        read_err(
            &text.replace("0.099975586_f16", "0.1"),
            9,
            25,
            "mul of f16 and f32",
        );
    }

    #[test]
    fn guards_checked_indices_and_gemms() {
        read_ok(
            "\
program g
  buf0: f32[5, 7]  input 0 `a`
  buf1: f32[7, 3]  input 1 `b`
  buf2: i64[5]  input 2 `ids`
  buf3: f32[5, 3]  output 0 `y`
  buf4: f32[5, 3]  output 1 `z`

kernel k0_matmul(buf0: f32[5, 7], buf1: f32[7, 3]) -> buf3: f32[5, 3]   # %2
  gemm acc0 = buf0[0; 7, 1] @ buf1[0; 3, 1]  batch [] m 5 n 3 k 7 axes [1, 0]
  for i0 in 0..3, i1 in 0..5 parallel:
    acc0 = dot(r0 in 0..7) buf0[i1*7 + r0], buf1[i0 + r0*3]
    buf3[i1*3 + i0] = acc0

kernel k1(buf0: f32[5, 7], buf2: i64[5]) -> buf4: f32[5, 3]
  for i0 in 0..5, i1 in 0..3 parallel:
    t1 = checked(buf2[i0], 0..5) if 0 <= i1 - 1 < 2 else 0
    buf4[i0*3 + i1] = (buf0[t1*7 + i1 - 1] if 0 <= i1 - 1 < 2 else -1.5)
",
        );
    }

    #[test]
    fn consecutive_store_stages_of_one_point_keep_apart() {
        let p = read_ok(
            "\
program s
  buf0: f32[4]  input 0 `x`
  buf1: f32[4]  output 0 `y`
  buf2: f32[4]  output 1 `z`

kernel k0(buf0: f32[4]) -> buf1: f32[4], buf2: f32[4]
  for i0 in 0..4 parallel:
    buf1[i0] = buf0[i0]
    store over one point:
      buf2[i0] = neg(buf0[i0])
",
        );
        assert_eq!(p.kernels[0].stages.len(), 2);
    }

    #[test]
    fn bound_names_are_positions_when_the_text_allows() {
        // t7 cannot be node 7 of a block of four: the names are labels then.
        let text = SOFTMAX.replace("t3", "t7");
        let p = parse_program("t.loop", &text).unwrap();
        assert_eq!(p.to_string(), SOFTMAX);
    }

    #[test]
    fn errors_are_located() {
        read_err("", 1, 1, "expected `program NAME`");
        read_err(
            &SOFTMAX.replace("exp(buf0[i0*8 + j0]", "exq(buf0[i0*8 + j0]"),
            12,
            39,
            "unknown operation `exq`",
        );
        read_err(
            &SOFTMAX.replace("acc1 = sum(t3)", "acc1 = sum(t4)"),
            10,
            18,
            "t4 is not bound",
        );
        read_err(
            &SOFTMAX.replace("- acc0)\n      acc1", "- acc5)\n      acc1"),
            9,
            34,
            "acc5 is not defined",
        );
        read_err(
            &SOFTMAX.replace("buf1[i0*8 + j0]", "buf1[i0*8 + k0]"),
            12,
            33,
            "not a loop variable",
        );
        read_err(
            &SOFTMAX.replace("r0 in 0..8)", "r1 in 0..8)"),
            7,
            16,
            "expected loop variable `r0`",
        );
        read_err(
            &SOFTMAX.replace("i0*8 + r0]\n", "i0*8 + r0] + \n"),
            7,
            45,
            "expected an expression",
        );
        read_err(
            &SOFTMAX.replace("buf0[i0*8 + r0]\n", "buf0[i0 // 0]\n"),
            7,
            39,
            "divisor must be positive",
        );
        read_err(
            &SOFTMAX.replace("-> buf1", "-> buf0"),
            5,
            1,
            "writes [buf1], not [buf0]",
        );
        read_err(
            &SOFTMAX.replace("buf1: f32[4, 8]  output", "buf1: f32[4, 8]  input"),
            3,
            3,
            "two buffers are input 0",
        );
        read_err(
            &SOFTMAX.replace("i0*8 + j0] =", "i0*8 + j0 + 1] ="),
            5,
            1,
            "does not verify",
        );
        read_err(&SOFTMAX.replace("`x`", "`x"), 2, 28, "unterminated");
    }

    #[test]
    fn nesting_is_bounded() {
        let program = |depth: usize| {
            format!(
                "program n\n  buf0: f32[1]  input 0 `x`\n  buf1: f32[1]  output 0 `y`\n\n\
                 kernel k0(buf0: f32[1]) -> buf1: f32[1]\n  buf1[0] = {}buf0[0]{}\n",
                "neg(".repeat(depth),
                ")".repeat(depth)
            )
        };
        read_ok(&program(MAX_NESTING - 2));
        read_err(
            &program(MAX_NESTING + 5),
            6,
            13 + 4 * MAX_NESTING,
            "nested deeper",
        );
        let index = format!(
            "program n\n  buf0: f32[1]  input 0 `x`\n  buf1: f32[1]  output 0 `y`\n\n\
             kernel k0(buf0: f32[1]) -> buf1: f32[1]\n  buf1[0] = buf0[{}0{}]\n",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        assert!(parse_program("t.loop", &index).is_err());
    }

    #[test]
    fn damaged_text_is_an_error_not_a_panic() {
        let texts = [
            SOFTMAX.to_string(),
            SOFTMAX.replace("acc1 = sum(t3)", "acc1 = sum(t3 if)"),
        ];
        for text in &texts {
            for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
                let _ = parse_program("t.loop", &text[..cut]);
                let mut damaged = text.clone();
                damaged.remove(cut.min(text.len() - 1));
                let _ = parse_program("t.loop", &damaged);
            }
        }
    }
}

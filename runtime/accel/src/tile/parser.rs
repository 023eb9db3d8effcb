//! The parser: `.tile` source text to a [`TileKernel`].
//!
//! Grammar (a statement ends at the end of its line; inside `(..)` and `[..]`
//! newlines are free, so long calls may wrap):
//!
//! ```text
//! file    := COMMENT* "kernel" NAME "(" [param ("," param)* [","]] ")" block
//! param   := NAME ":" ["*"] DTYPE
//! block   := "{" stmt* "}"
//! stmt    := "const" NAME "=" expr
//!          | NAME ("=" | "+=" | "-=" | "*=") expr
//!          | "for" NAME "in" "range" "(" expr ["," expr ["," expr]] ")" block
//!          | call
//!          | COMMENT                  (a `#` comment on a line of its own)
//! expr    := binary, loosest first: "|"  "&"  (== != < <= > >=)  (+ -)  (* / %)
//! unary   := ("-" | "!") unary | postfix
//! postfix := primary ("[" item ("," item)* "]")*        item := ":" | "None"
//! primary := INT | FLOAT | "inf" | "nan" | "true" | "false" | NAME | DTYPE
//!          | "(" expr ")" | "(" [expr ("," expr)* [","]] ")" | call
//! call    := BUILTIN "(" [arg ("," arg)* [","]] ")"      arg := expr | NAME "=" expr
//! ```
//!
//! Unlike Python, comparisons bind tighter than `&` and `|`, so
//! `offs < n & offs >= 0` means what it says. Comparisons do not chain.
//! Sugar is resolved here: `x += e` is `x = x + e`, `range(n)` is `range(0, n)`,
//! and a `-` written right before a number is part of the literal (`-3`), while
//! `-(3)` and `-x` are negations.

use super::ast::*;
use super::lexer::{describe, Lexer, Tok, Token};
use ferrite_ir::{DType, Diagnostic};

/// The deepest nesting (of parentheses, calls, operators and blocks together) the
/// parser accepts; deeper input is an error rather than a stack overflow.
pub const MAX_NESTING: usize = 64;

/// The deepest expression tree the parser builds, chains of binary operators included
/// (the checker's limit too).
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// Parses the one kernel in `src`; errors are located in `file`.
///
/// ```
/// use ferrite_accel::tile;
/// let k = tile::parse("k.tile", "kernel k(x: *f32) {\n  store(x, 1.0)\n}\n").unwrap();
/// assert_eq!(k.name, "k");
/// let err = tile::parse("k.tile", "kernel k(x: *f32) {\n  store(x, 1.0\n}\n").unwrap_err();
/// assert_eq!(err.to_string(), "k.tile:3:1: error: expected `)` or `,`, found `}`\n  }\n  ^");
/// ```
pub fn parse(file: &str, src: &str) -> Result<TileKernel, Diagnostic> {
    let fail = |e: PErr| Diagnostic::at(file, src, e.offset, e.message);
    let mut p = Parser::new(src).map_err(fail)?;
    p.kernel().map_err(fail)
}

/// A parse error at a byte offset.
struct PErr {
    offset: usize,
    message: String,
}

type PResult<T> = Result<T, PErr>;

struct Parser<'a> {
    lexer: Lexer<'a>,
    tok: Token<'a>,
    /// How many `(` / `[` are open: inside them newlines are skipped.
    open: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> PResult<Parser<'a>> {
        let mut lexer = Lexer::new(src);
        let tok = next(&mut lexer, 0)?;
        Ok(Parser {
            lexer,
            tok,
            open: 0,
            depth: 0,
        })
    }

    fn advance(&mut self) -> PResult<Token<'a>> {
        let next = next(&mut self.lexer, self.open)?;
        Ok(std::mem::replace(&mut self.tok, next))
    }

    /// The token after the current one, without consuming anything.
    fn peek2(&self) -> PResult<Tok<'a>> {
        let mut l = self.lexer.clone();
        Ok(next(&mut l, self.open)?.tok)
    }

    fn err<T>(&self, offset: usize, message: impl Into<String>) -> PResult<T> {
        Err(PErr {
            offset,
            message: message.into(),
        })
    }

    fn expected<T>(&self, what: &str) -> PResult<T> {
        self.err(
            self.tok.start,
            format!("expected {what}, found {}", describe(&self.tok.tok)),
        )
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.tok.tok, Tok::Punct(q) if q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.tok.tok, Tok::Ident(s) if s == w)
    }

    fn expect(&mut self, p: &str) -> PResult<Token<'a>> {
        if !self.is(p) {
            return self.expected(&format!("`{p}`"));
        }
        match p {
            "(" | "[" => self.open += 1,
            ")" | "]" => self.open = self.open.saturating_sub(1),
            _ => {}
        }
        self.advance()
    }

    fn expect_word(&mut self, w: &str) -> PResult<Token<'a>> {
        if !self.is_word(w) {
            return self.expected(&format!("`{w}`"));
        }
        self.advance()
    }

    fn skip_newlines(&mut self) -> PResult<()> {
        while self.tok.tok == Tok::Newline {
            self.advance()?;
        }
        Ok(())
    }

    fn enter(&mut self, offset: usize) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return self.err(
                offset,
                format!("nesting deeper than {MAX_NESTING} levels; split the expression"),
            );
        }
        Ok(())
    }

    /// A name being bound (parameter, constant, variable, loop variable).
    fn binding_name(&mut self, what: &str) -> PResult<(String, Span)> {
        let Tok::Ident(name) = self.tok.tok else {
            return self.expected(&format!("{what} name"));
        };
        if let Some(reason) = reserved(name) {
            return self.err(
                self.tok.start,
                format!("`{name}` {reason} and cannot name a {what}"),
            );
        }
        let t = self.advance()?;
        Ok((name.to_string(), Span::new(t.start, t.end)))
    }

    /// Comments on lines of their own, up to the next token of code.
    fn comments(&mut self) -> PResult<Vec<(String, Span)>> {
        let mut out = Vec::new();
        loop {
            self.skip_newlines()?;
            let Tok::Comment(text) = self.tok.tok else {
                return Ok(out);
            };
            let t = self.advance()?;
            out.push((text.to_string(), Span::new(t.start, t.end)));
        }
    }

    fn kernel(&mut self) -> PResult<TileKernel> {
        let comments = self.comments()?.into_iter().map(|(c, _)| c).collect();
        self.expect_word("kernel")?;
        let (name, span) = self.binding_name("kernel")?;
        self.expect("(")?;
        let mut params: Vec<Param> = Vec::new();
        while !self.is(")") {
            let (pname, pspan) = self.binding_name("parameter")?;
            if params.iter().any(|p| p.name == pname) {
                return self.err(
                    pspan.start,
                    format!("parameter `{pname}` is declared twice"),
                );
            }
            self.expect(":")?;
            let pointer = self.is("*");
            if pointer {
                self.advance()?;
            }
            let dtype = match self.tok.tok {
                Tok::Ident(s) => super::dtype_from_name(s),
                _ => None,
            };
            let Some(dtype) = dtype else {
                let names: Vec<&str> = super::DTYPES.iter().map(|d| d.name()).collect();
                return self.expected(&format!("a dtype ({})", names.join(", ")));
            };
            let end = self.advance()?.end;
            params.push(Param {
                name: pname,
                ty: if pointer {
                    ParamType::Ptr(dtype)
                } else {
                    ParamType::Scalar(dtype)
                },
                span: Span::new(pspan.start, end),
            });
            if !self.is(")") {
                if !self.is(",") {
                    return self.expected("`,` or `)`");
                }
                self.advance()?;
            }
        }
        self.expect(")")?;
        let body = self.block()?;
        self.comments()?;
        if self.tok.tok != Tok::Eof {
            return self.expected("the end of the file (one kernel per file)");
        }
        Ok(TileKernel {
            comments,
            name,
            params,
            body,
            span,
        })
    }

    fn block(&mut self) -> PResult<Vec<Stmt>> {
        self.enter(self.tok.start)?;
        self.expect("{")?;
        let mut body = Vec::new();
        loop {
            for (text, span) in self.comments()? {
                body.push(Stmt {
                    kind: StmtKind::Comment(text),
                    span,
                });
            }
            if self.is("}") {
                break;
            }
            if self.tok.tok == Tok::Eof {
                return self.expected("`}`");
            }
            body.push(self.stmt()?);
            if !self.is("}") && self.tok.tok != Tok::Newline {
                return self.expected("the end of the line");
            }
        }
        self.advance()?;
        self.depth -= 1;
        Ok(body)
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        let start = self.tok.start;
        if self.is_word("const") {
            self.advance()?;
            let (name, _) = self.binding_name("constant")?;
            self.expect("=")?;
            let value = self.expr()?;
            let span = Span::new(start, value.span.end);
            return Ok(Stmt {
                kind: StmtKind::Const { name, value },
                span,
            });
        }
        if self.is_word("for") {
            return self.for_stmt();
        }
        let target = matches!(self.tok.tok, Tok::Ident(_))
            && matches!(self.peek2()?, Tok::Punct("=" | "+=" | "-=" | "*="));
        if target {
            let (name, name_span) = self.binding_name("variable")?;
            let op = self.advance()?;
            let rhs = self.expr()?;
            let span = Span::new(start, rhs.span.end);
            let compound = match op.tok {
                Tok::Punct("+=") => Some(BinaryOp::Add),
                Tok::Punct("-=") => Some(BinaryOp::Sub),
                Tok::Punct("*=") => Some(BinaryOp::Mul),
                _ => None,
            };
            let value = match compound {
                None => rhs,
                Some(bop) => {
                    let lhs = Expr {
                        kind: ExprKind::Name(name.clone()),
                        span: name_span,
                    };
                    Expr {
                        kind: ExprKind::Binary(bop, Box::new(lhs), Box::new(rhs)),
                        span,
                    }
                }
            };
            return Ok(Stmt {
                kind: StmtKind::Assign { name, value },
                span,
            });
        }
        let e = self.expr()?;
        if !matches!(e.kind, ExprKind::Call { .. }) {
            return self.err(
                e.span.start,
                "an expression on its own does nothing: bind it (`x = ...`) or call \
                 `store`/`dma_wait`",
            );
        }
        let span = e.span;
        Ok(Stmt {
            kind: StmtKind::Expr(e),
            span,
        })
    }

    fn for_stmt(&mut self) -> PResult<Stmt> {
        let start = self.advance()?.start;
        let (var, _) = self.binding_name("loop variable")?;
        self.expect_word("in")?;
        let range_at = self.tok.start;
        self.expect_word("range")?;
        self.expect("(")?;
        let mut bounds = Vec::new();
        while !self.is(")") {
            if bounds.len() == 3 {
                return self.err(
                    self.tok.start,
                    "range takes at most 3 arguments (start, end, step)",
                );
            }
            bounds.push(self.expr()?);
            if !self.is(")") {
                if !self.is(",") {
                    return self.expected("`,` or `)`");
                }
                self.advance()?;
            }
        }
        self.expect(")")?;
        let mut bounds = bounds.into_iter();
        let (start_e, end_e, step) = match (bounds.next(), bounds.next(), bounds.next()) {
            (Some(end), None, _) => {
                let zero = Expr {
                    kind: ExprKind::Int(0),
                    span: end.span,
                };
                (zero, end, None)
            }
            (Some(s), Some(e), step) => (s, e, step),
            (None, ..) => {
                return self.err(
                    range_at,
                    "range needs an end: `range(end)` or `range(start, end[, step])`",
                )
            }
        };
        let body = self.block()?;
        Ok(Stmt {
            kind: StmtKind::For {
                var,
                start: start_e,
                end: end_e,
                step,
                body,
            },
            span: Span::new(start, range_at),
        })
    }

    fn expr(&mut self) -> PResult<Expr> {
        self.enter(self.tok.start)?;
        let e = self.binary(1)?;
        self.depth -= 1;
        Ok(e)
    }

    /// Precedence climbing over the levels of [`BinaryOp::precedence`].
    fn binary(&mut self, min_prec: u8) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        // Each operator of a left-associative chain (`a + b + c ...`) makes the tree one
        // level deeper without recursing here; bound it, so that a huge chain is an
        // error rather than a tree too deep to check or even to drop.
        let mut chain = 0usize;
        loop {
            let Some(op) = self.binary_op() else {
                return Ok(lhs);
            };
            let prec = op.precedence();
            if prec < min_prec {
                return Ok(lhs);
            }
            let op_at = self.advance()?.start;
            chain += 1;
            if self.depth + chain > MAX_EXPRESSION_DEPTH {
                return self.err(
                    op_at,
                    format!(
                        "expression nests deeper than {MAX_EXPRESSION_DEPTH} levels (a chain of \
                         {chain} operators); split it into named steps"
                    ),
                );
            }
            self.enter(op_at)?;
            let rhs = self.binary(prec + 1)?;
            self.depth -= 1;
            if op.is_comparison() {
                if let Some(next) = self.binary_op().filter(|o| o.is_comparison()) {
                    return self.err(
                        self.tok.start,
                        format!(
                            "comparisons do not chain; write `(a {} b) & (b {} c)`",
                            op.symbol(),
                            next.symbol()
                        ),
                    );
                }
            }
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
    }

    fn binary_op(&self) -> Option<BinaryOp> {
        let Tok::Punct(p) = self.tok.tok else {
            return None;
        };
        Some(match p {
            "|" => BinaryOp::Or,
            "&" => BinaryOp::And,
            "^" => BinaryOp::Xor,
            "<<" => BinaryOp::Shl,
            ">>" => BinaryOp::Shr,
            "==" => BinaryOp::Eq,
            "!=" => BinaryOp::Ne,
            "<" => BinaryOp::Lt,
            "<=" => BinaryOp::Le,
            ">" => BinaryOp::Gt,
            ">=" => BinaryOp::Ge,
            "+" => BinaryOp::Add,
            "-" => BinaryOp::Sub,
            "*" => BinaryOp::Mul,
            "/" => BinaryOp::Div,
            "%" => BinaryOp::Rem,
            _ => return None,
        })
    }

    fn unary(&mut self) -> PResult<Expr> {
        let op = match self.tok.tok {
            Tok::Punct("-") => UnaryOp::Neg,
            Tok::Punct("!") => UnaryOp::Not,
            _ => return self.postfix(),
        };
        let start = self.advance()?.start;
        // A minus written right before a number is part of the literal (so `-3`
        // is `Int(-3)`, and `-9223372036854775808` is representable); a minus
        // before anything else, `-(3)` included, is negation.
        if op == UnaryOp::Neg {
            let negative = match self.tok.tok {
                Tok::Int(v) if v <= 1 << 63 => Some(ExprKind::Int((v as i64).wrapping_neg())),
                Tok::Float(v) => Some(ExprKind::Float(-v)),
                Tok::Ident("inf") => Some(ExprKind::Float(f64::NEG_INFINITY)),
                Tok::Ident("nan") => Some(ExprKind::Float(-f64::NAN)),
                _ => None,
            };
            if let Some(kind) = negative {
                let end = self.advance()?.end;
                let lit = Expr {
                    kind,
                    span: Span::new(start, end),
                };
                return self.index_suffix(lit);
            }
        }
        self.enter(start)?;
        let operand = self.unary()?;
        self.depth -= 1;
        let span = Span::new(start, operand.span.end);
        Ok(Expr {
            kind: ExprKind::Unary(op, Box::new(operand)),
            span,
        })
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let e = self.primary()?;
        self.index_suffix(e)
    }

    fn index_suffix(&mut self, mut e: Expr) -> PResult<Expr> {
        while self.is("[") {
            self.expect("[")?;
            let mut items = Vec::new();
            while !self.is("]") {
                if self.is(":") {
                    items.push(IndexItem::Full);
                } else if self.is_word("None") {
                    items.push(IndexItem::NewAxis);
                } else {
                    return self.expected(
                        "`:` or `None` (tiles are indexed only to add axes, as in `x[:, None]`)",
                    );
                }
                self.advance()?;
                if !self.is("]") {
                    if !self.is(",") {
                        return self.expected("`,` or `]`");
                    }
                    self.advance()?;
                }
            }
            let end = self.expect("]")?.end;
            if items.is_empty() {
                return self.err(e.span.end, "an index needs at least one `:` or `None`");
            }
            let span = Span::new(e.span.start, end);
            e = Expr {
                kind: ExprKind::Index(Box::new(e), items),
                span,
            };
        }
        Ok(e)
    }

    fn primary(&mut self) -> PResult<Expr> {
        let t = self.tok.clone();
        let span = Span::new(t.start, t.end);
        let kind = match t.tok {
            Tok::Int(v) => {
                let Ok(v) = i64::try_from(v) else {
                    return self.err(t.start, format!("integer `{v}` is too large for i64"));
                };
                ExprKind::Int(v)
            }
            Tok::Float(v) => ExprKind::Float(v),
            Tok::Punct("(") => return self.paren(),
            Tok::Ident(word) => {
                if self.peek2()? == Tok::Punct("(") {
                    return self.call(word, t.start);
                }
                match word {
                    "true" => ExprKind::Bool(true),
                    "false" => ExprKind::Bool(false),
                    "inf" => ExprKind::Float(f64::INFINITY),
                    "nan" => ExprKind::Float(f64::NAN),
                    "None" => {
                        return self.err(
                            t.start,
                            "`None` is only allowed inside an index: `x[:, None]`",
                        )
                    }
                    w if super::dtype_from_name(w).is_some() => {
                        ExprKind::DType(super::dtype_from_name(w).unwrap_or(DType::F32))
                    }
                    w if Builtin::from_name(w).is_some() => {
                        return self
                            .err(t.start, format!("`{w}` is a function; call it: `{w}(..)`"))
                    }
                    w if KEYWORDS.contains(&w) => {
                        return self.err(
                            t.start,
                            format!("expected an expression, found keyword `{w}`"),
                        )
                    }
                    w => ExprKind::Name(w.to_string()),
                }
            }
            _ => return self.expected("an expression"),
        };
        self.advance()?;
        Ok(Expr { kind, span })
    }

    /// `(e)` is `e`; `()`, `(e,)` and `(e, f, ..)` are tuples.
    fn paren(&mut self) -> PResult<Expr> {
        let start = self.expect("(")?.start;
        let mut items = Vec::new();
        let mut trailing_comma = false;
        while !self.is(")") {
            items.push(self.expr()?);
            trailing_comma = false;
            if !self.is(")") {
                if !self.is(",") {
                    return self.expected("`,` or `)`");
                }
                self.advance()?;
                trailing_comma = true;
            }
        }
        let end = self.expect(")")?.end;
        let span = Span::new(start, end);
        if items.len() == 1 && !trailing_comma {
            let mut e = items
                .pop()
                .unwrap_or_else(|| Expr::new(ExprKind::Tuple(Vec::new())));
            e.span = span;
            return Ok(e);
        }
        Ok(Expr {
            kind: ExprKind::Tuple(items),
            span,
        })
    }

    fn call(&mut self, name: &str, start: usize) -> PResult<Expr> {
        let Some(func) = Builtin::from_name(name) else {
            let mut msg = format!("unknown function `{name}`");
            if name == "range" {
                msg = "`range` is only allowed in a `for` loop header".into();
            } else if let Some(s) = suggest(name, Builtin::ALL.iter().map(|b| b.name())) {
                msg += &format!("; did you mean `{s}`?");
            }
            return self.err(start, msg);
        };
        self.advance()?;
        self.expect("(")?;
        let mut args = Vec::new();
        let mut kwargs: Vec<(String, Expr)> = Vec::new();
        while !self.is(")") {
            let kw = match self.tok.tok {
                Tok::Ident(k) if self.peek2()? == Tok::Punct("=") => Some(k),
                _ => None,
            };
            if let Some(k) = kw {
                let at = self.tok.start;
                if kwargs.iter().any(|(n, _)| n == k) {
                    return self.err(at, format!("argument `{k}` is given twice"));
                }
                self.advance()?;
                self.advance()?;
                let value = self.expr()?;
                kwargs.push((k.to_string(), value));
            } else {
                let e = self.expr()?;
                if !kwargs.is_empty() {
                    return self.err(e.span.start, "positional argument after a keyword argument");
                }
                args.push(e);
            }
            if !self.is(")") {
                if !self.is(",") {
                    return self.expected("`)` or `,`");
                }
                self.advance()?;
            }
        }
        let end = self.expect(")")?.end;
        Ok(Expr {
            kind: ExprKind::Call { func, args, kwargs },
            span: Span::new(start, end),
        })
    }
}

/// The next token, skipping newlines while a `(` or `[` is open.
fn next<'a>(lexer: &mut Lexer<'a>, open: usize) -> PResult<Token<'a>> {
    loop {
        let t = lexer.next_token().map_err(|e| PErr {
            offset: e.offset,
            message: e.message,
        })?;
        // Inside a wrapped call, line ends and comments are free.
        if open == 0 || !matches!(t.tok, Tok::Newline | Tok::Comment(_)) {
            return Ok(t);
        }
    }
}

/// Why a word cannot be bound as a name, if it cannot.
pub(crate) fn reserved(name: &str) -> Option<&'static str> {
    if KEYWORDS.contains(&name) {
        Some("is a keyword")
    } else if super::dtype_from_name(name).is_some() {
        Some("is a dtype")
    } else if Builtin::from_name(name).is_some() {
        Some("is a builtin function")
    } else {
        None
    }
}

/// The closest candidate to a misspelled `name`, if one is close enough to be a
/// likely typo (edit distance at most a third of the length, and at least 1).
pub(crate) fn suggest<'s>(
    name: &str,
    candidates: impl Iterator<Item = &'s str>,
) -> Option<&'s str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(suggest("exq", ["exp", "log"].into_iter()), Some("exp"));
        assert_eq!(suggest("zzzz", ["exp", "log"].into_iter()), None);
    }

    #[test]
    fn comments_on_lines_of_their_own_are_kept() {
        let src = "# doc\n# more\nkernel k(x: *f32) {\n  # first\n  y = load(x, # inside\n    \
                   # a wrapped call\n    other=1.0)  # after\n  for i in range(0, 2, 1) {\n    \
                   #\n  }\n}\n# trailing\n";
        let k = parse("k.tile", src).unwrap();
        assert_eq!(k.comments, ["doc", "more"]);
        assert_eq!(k.body[0].kind, StmtKind::Comment("first".into()));
        assert!(matches!(&k.body[2].kind, StmtKind::For { body, .. }
            if body[0].kind == StmtKind::Comment(String::new())));
        let text = crate::tile::print(&k);
        assert_eq!(
            text,
            "# doc\n# more\nkernel k(x: *f32) {\n  # first\n  y = load(x, other=1.0)\n  \
             for i in range(0, 2, 1) {\n    #\n  }\n}\n"
        );
        assert_eq!(parse("k.tile", &text).unwrap(), k);
    }

    #[test]
    fn sugar_is_resolved() {
        let k = parse(
            "t",
            "kernel k(x: *f32) {\n  a = -3\n  a += 1\n  for i in range(4) {\n  }\n}\n",
        )
        .unwrap();
        assert_eq!(
            k.body[0].kind,
            StmtKind::Assign {
                name: "a".into(),
                value: Expr::new(ExprKind::Int(-3))
            }
        );
        let StmtKind::Assign { value, .. } = &k.body[1].kind else {
            panic!("not an assignment")
        };
        assert!(matches!(value.kind, ExprKind::Binary(BinaryOp::Add, ..)));
        let StmtKind::For { start, .. } = &k.body[2].kind else {
            panic!("not a loop")
        };
        assert_eq!(start.kind, ExprKind::Int(0));
    }

    #[test]
    fn precedence_puts_comparisons_above_logic() {
        let k = parse("t", "kernel k() {\n  m = a < n & b >= 0 | c\n}\n").unwrap();
        let StmtKind::Assign { value, .. } = &k.body[0].kind else {
            panic!("not an assignment")
        };
        let ExprKind::Binary(BinaryOp::Or, lhs, _) = &value.kind else {
            panic!("`|` is not the root: {value:?}")
        };
        assert!(matches!(lhs.kind, ExprKind::Binary(BinaryOp::And, ..)));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!(
            "kernel k() {{\n  x = {}1{}\n}}\n",
            "(".repeat(500),
            ")".repeat(500)
        );
        let e = parse("t", &deep).unwrap_err();
        assert!(e.message.contains("nesting deeper"), "{e}");
        let neg = format!("kernel k() {{\n  x = {}y\n}}\n", "-".repeat(500));
        assert!(parse("t", &neg)
            .unwrap_err()
            .message
            .contains("nesting deeper"));
    }
}

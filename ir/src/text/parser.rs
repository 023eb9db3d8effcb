//! The parser: `.fg` text to a [`Graph`].
//!
//! The graph is built while reading, through [`Graph::add_param`], [`Graph::add`]
//! and [`Graph::add_literal`], so every node is typed as soon as its call closes
//! and a typing error points at the op (or the attribute) that causes it.
//!
//! Grammar. A statement ends at the end of its line; inside `(..)` and `[..]`
//! newlines are free, so long calls and parameter lists may wrap.
//!
//! ```text
//! file    := ["weights" STRING] "graph" NAME "(" [param ("," param)* [","]] ")" ["->" type ("," type)*]
//!            "{" stmt* "return" expr ("," expr)* "}"
//! param   := NAME ":" type
//! type    := DTYPE "[" [INT ("," INT)* [","]] "]"
//! stmt    := NAME "=" call
//! expr    := call | NAME | literal
//! call    := OP "(" [arg ("," arg)* [","]] ")"         operands first, then attributes
//! arg     := expr | KEY "=" value
//! literal := ["-"] (INT | FLOAT | "inf" | "nan") | "true" | "false"
//! value   := literal | "[" [["-"] INT ("," ["-"] INT)* [","]] "]" | DTYPE | STRING
//!          | "[" [literal ("," literal)* [","]] "]"    only as `values=` of `constant`
//! ```
//!
//! `constant(...)` is read here rather than through the op table: it declares a value
//! (like a parameter) whose tensor comes from its attributes, `name="KEY"` (a tensor
//! of the `weights` file, fetched through the [`WeightSource`]) or `values=[..]`
//! (inline), with `dtype=` and `shape=` giving or checking its type.
//!
//! A statement binds a call. `y = x` (a bare name) and `y = 2.0` (a literal) are
//! rejected with an error that says to use the value directly: graph values are
//! nodes, and an alias would be a node with no op. `return`, `true`, `false`, `inf`
//! and `nan` are reserved and cannot name values.

use super::diag::{locate, Diagnostic, Located, EXCERPT_CHARS};
use super::lexer::{describe, Lexer, Token, TokenKind};
use super::weights::{NoWeights, WeightSource};
use crate::graph::check_declared_outputs;
use crate::graph::Node;
use crate::infer::infer_dims;
use crate::op::{Arity, AttrError, AttrErrorKind, AttrValue, Op, OpSpec, Scalar, OPS};
use crate::spelling::closest;
use crate::sym::{
    is_symbolic_attribute, Expr, Fact, Facts, SymAttrs, SymGraph, SYMBOLIC_ATTRIBUTES,
};
use crate::types::{TensorType, MAX_RANK};
use crate::{Constant, DType, Error, Graph, Tensor, ValueId};
use std::collections::{HashMap, VecDeque};

/// The deepest nesting of calls the parser accepts. Deeper input is an error, not
/// a stack overflow; the printer never nests deeper than this either.
pub const MAX_NESTING: usize = 256;

/// Words that cannot name values: they would read as a keyword or a literal.
const RESERVED: [&str; 5] = ["return", "true", "false", "inf", "nan"];

/// Parses one graph from `.fg` source text. `file` names the source in errors. A graph
/// that names a weights file is an error here; [`parse_with`] reads those.
pub fn parse(file: &str, source: &str) -> Result<Graph, Diagnostic> {
    parse_with(file, source, &mut NoWeights)
}

/// Parses one graph, fetching the tensors its `constant(name=...)` calls refer to from
/// `weights`. Errors of the source are located at the `weights` line or the constant.
pub fn parse_with(
    file: &str,
    source: &str,
    weights: &mut dyn WeightSource,
) -> Result<Graph, Diagnostic> {
    match parse_any(file, source, weights)? {
        Parsed::Graph(g) => Ok(g),
        Parsed::Symbolic(g) => {
            let at = g.facts().symbols.first().and_then(|s| s.at.clone());
            let symbol = g
                .facts()
                .symbols
                .first()
                .map_or("?".into(), |s| s.name.to_string());
            let (line, col) = at
                .as_deref()
                .and_then(|a| {
                    let mut it = a.rsplitn(3, ':');
                    let col = it.next()?.parse().ok()?;
                    let line = it.next()?.parse().ok()?;
                    Some((line, col))
                })
                .unwrap_or((1, 1));
            let offset = offset_of(source, line, col);
            Err(Located::new(
                offset,
                format!(
                    "the graph has symbolic dimensions (`{symbol}`); bind them to run it \
                     (`--dim {symbol}=N`, or inputs of a shape) or read it with `parse_any`"
                ),
            )
            .into_diagnostic(file, source))
        }
    }
}

/// What a `.fg` file holds: a graph with numbers for dimensions, or one with size
/// symbols ([`SymGraph`]).
#[derive(Clone, Debug)]
pub enum Parsed {
    /// Every dimension a number.
    Graph(Graph),
    /// Some dimension a size symbol.
    Symbolic(SymGraph),
}

/// Parses one graph that may have symbolic dimensions.
pub fn parse_any(
    file: &str,
    source: &str,
    weights: &mut dyn WeightSource,
) -> Result<Parsed, Diagnostic> {
    Parser::new(file, source, weights)
        .file()
        .map_err(|e| e.into_diagnostic(file, source))
}

/// The byte offset of 1-based `line:col` (chars) in `src`.
fn offset_of(src: &str, line: usize, col: usize) -> usize {
    let start: usize = src
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let rest = &src[start.min(src.len())..];
    start
        + rest
            .chars()
            .take(col.saturating_sub(1))
            .map(char::len_utf8)
            .sum::<usize>()
}

/// Parses one graph from raw bytes, rejecting input that is not UTF-8 with an
/// error located at the first bad byte.
pub fn parse_bytes(file: &str, bytes: &[u8]) -> Result<Graph, Diagnostic> {
    parse_bytes_with(file, bytes, &mut NoWeights)
}

/// [`parse_bytes`] with a [`WeightSource`] for the graph's weights file.
pub fn parse_bytes_with(
    file: &str,
    bytes: &[u8],
    weights: &mut dyn WeightSource,
) -> Result<Graph, Diagnostic> {
    match std::str::from_utf8(bytes) {
        Ok(source) => parse_with(file, source, weights),
        Err(e) => {
            let bad = e.valid_up_to();
            // The prefix before the first bad byte is valid by definition.
            let prefix = std::str::from_utf8(&bytes[..bad]).unwrap_or_default();
            let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
            let line_end = bytes[line_start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| line_start + i);
            // The line is shown up to a little past the excerpt (a huge line is never
            // copied whole), the bad bytes replaced; the replacements all come after
            // the bad byte, so its offset in the line is unchanged.
            let shown_end = line_end.min(bad.saturating_add(4 * EXCERPT_CHARS));
            let shown = String::from_utf8_lossy(&bytes[line_start..shown_end]);
            Err(Diagnostic::on_line(
                file,
                prefix.matches('\n').count() + 1,
                prefix[line_start..].chars().count() + 1,
                format!(
                    "invalid UTF-8: byte 0x{:02X} (.fg files are UTF-8 text)",
                    bytes[bad]
                ),
                shown.trim_end_matches('\r'),
                bad - line_start,
            ))
        }
    }
}

/// A name bound in the file, and where.
#[derive(Clone, Copy)]
struct Binding {
    id: ValueId,
    offset: usize,
    is_param: bool,
}

/// An operand as written: a value, or a literal whose dtype depends on the call.
enum Operand {
    Value {
        id: ValueId,
        start: usize,
    },
    Literal {
        value: Scalar,
        start: usize,
        end: usize,
    },
}

impl Operand {
    fn start(&self) -> usize {
        match *self {
            Operand::Value { start, .. } | Operand::Literal { start, .. } => start,
        }
    }
}

/// A `key=value` attribute and where its key is.
struct Attr<'a> {
    key: &'a str,
    start: usize,
    value: AttrValue,
    /// The size expressions of a value that has symbols (`value` then holds placeholders).
    sym: Option<Vec<Expr>>,
}

/// What the parser keeps beside the skeleton graph once it has met a size symbol.
struct SymState {
    facts: Facts,
    types: Vec<TensorType<Expr>>,
    attrs: Vec<SymAttrs>,
    places: Vec<Option<String>>,
    declared: Option<Vec<TensorType<Expr>>>,
}

struct Parser<'a, 'w> {
    /// The file's name, for the places that symbolic constraints name.
    file_name: &'a str,
    src: &'a str,
    weights: &'w mut dyn WeightSource,
    /// The file of the `weights` line, once read.
    weights_file: Option<String>,
    lexer: Lexer<'a>,
    /// Tokens read but not consumed (the parser looks at most two ahead).
    ahead: VecDeque<Token<'a>>,
    graph: Graph,
    names: HashMap<&'a str, Binding>,
    /// Calls currently open.
    depth: usize,
    /// Set once a size symbol is seen: the graph is then a [`SymGraph`].
    sym: Option<SymState>,
}

impl<'a, 'w> Parser<'a, 'w> {
    fn new(file_name: &'a str, src: &'a str, weights: &'w mut dyn WeightSource) -> Parser<'a, 'w> {
        Parser {
            file_name,
            src,
            weights,
            weights_file: None,
            lexer: Lexer::new(src),
            ahead: VecDeque::new(),
            graph: Graph::default(),
            names: HashMap::new(),
            depth: 0,
            sym: None,
        }
    }

    // ---- tokens ----

    fn peek_nth(&mut self, n: usize) -> Result<&Token<'a>, Located> {
        while self.ahead.len() <= n {
            let t = self.lexer.next_token()?;
            self.ahead.push_back(t);
        }
        Ok(&self.ahead[n])
    }

    fn peek(&mut self) -> Result<&Token<'a>, Located> {
        self.peek_nth(0)
    }

    fn next(&mut self) -> Result<Token<'a>, Located> {
        match self.ahead.pop_front() {
            Some(t) => Ok(t),
            None => self.lexer.next_token(),
        }
    }

    fn skip_newlines(&mut self) -> Result<(), Located> {
        while self.peek()?.kind == TokenKind::Newline {
            self.next()?;
        }
        Ok(())
    }

    fn expected(&self, found: &Token<'a>, what: &str) -> Located {
        Located::new(
            found.start,
            format!("expected {what}, found {}", describe(found, self.src)),
        )
    }

    fn expect(&mut self, kind: TokenKind<'a>, what: &str) -> Result<Token<'a>, Located> {
        let t = self.next()?;
        if t.kind == kind {
            Ok(t)
        } else {
            Err(self.expected(&t, what))
        }
    }

    /// After an item of a list that `close` ends: consumes a `,` (returns true) or
    /// `close` (returns false). Newlines may come before either; a missing one is
    /// reported where the line ended, which is where the user forgot it.
    fn separator(&mut self, close: TokenKind<'a>, what: &str) -> Result<bool, Located> {
        let first = self.peek()?.clone();
        self.skip_newlines()?;
        let t = self.next()?;
        if t.kind == TokenKind::Comma {
            Ok(true)
        } else if t.kind == close {
            Ok(false)
        } else {
            Err(self.expected(&first, what))
        }
    }

    /// `line:col` of a byte offset, for messages that refer to another place.
    fn position(&self, offset: usize) -> String {
        let (line, col, _) = locate(self.src, offset);
        format!("{line}:{col}")
    }

    // ---- the file ----

    fn file(mut self) -> Result<Parsed, Located> {
        self.skip_newlines()?;
        let mut t = self.next()?;
        let (mut weights, mut dims) = (false, false);
        loop {
            match t.kind {
                TokenKind::Ident("weights") if !weights => self.weights_line()?,
                TokenKind::Ident("dims") if !dims => self.dims_line()?,
                _ => break,
            }
            weights |= t.kind == TokenKind::Ident("weights");
            dims |= t.kind == TokenKind::Ident("dims");
            self.skip_newlines()?;
            t = self.next()?;
        }
        match t.kind {
            TokenKind::Ident("graph") => {}
            TokenKind::Eof => {
                return Err(Located::new(
                    t.start,
                    "empty file: expected `graph NAME(PARAMS) { ... }`",
                ))
            }
            _ => return Err(self.expected(&t, "`graph`")),
        }
        let t = self.next()?;
        let TokenKind::Ident(name) = t.kind else {
            return Err(self.expected(&t, "the graph's name"));
        };
        self.graph.name = name.to_string();
        self.expect(TokenKind::LParen, "`(` and the parameter list")?;
        self.params()?;
        let declared = if self.peek()?.kind == TokenKind::Arrow {
            self.next()?;
            Some(self.result_types()?)
        } else {
            None
        };
        self.skip_newlines()?;
        let what = if declared.is_some() {
            "`,` or `{` to open the graph body"
        } else {
            "`->` or `{` to open the graph body"
        };
        self.expect(TokenKind::LBrace, what)?;
        self.body(declared)?;
        self.skip_newlines()?;
        let t = self.next()?;
        match t.kind {
            TokenKind::Eof => Ok(self.finish()),
            TokenKind::Ident("graph") => Err(Located::new(
                t.start,
                "a file holds one graph, but a second `graph` follows",
            )),
            _ => Err(Located::new(
                t.start,
                format!(
                    "unexpected {} after the graph's closing `}}`",
                    describe(&t, self.src)
                ),
            )),
        }
    }

    /// The rest of `weights "FILE"`: opens the file through the weight source.
    fn weights_line(&mut self) -> Result<(), Located> {
        let t = self.next()?;
        let TokenKind::Str(file) = t.kind else {
            return Err(self.expected(&t, "the weights file's name in quotes after `weights`"));
        };
        self.weights
            .open(&file)
            .map_err(|e| Located::new(t.start, format!("weights \"{file}\": {e}")))?;
        let n = self.peek()?.clone();
        if !matches!(n.kind, TokenKind::Newline | TokenKind::Eof) {
            return Err(self.expected(&n, "end of line after the `weights` line"));
        }
        self.graph.weights = Some(file.clone());
        self.weights_file = Some(file);
        Ok(())
    }

    fn params(&mut self) -> Result<(), Located> {
        loop {
            self.skip_newlines()?;
            let t = self.next()?;
            let name = match t.kind {
                TokenKind::RParen => return Ok(()),
                TokenKind::Ident(name) => name,
                _ => return Err(self.expected(&t, "a parameter name or `)`")),
            };
            if let Some(first) = self.names.get(name) {
                return Err(Located::new(
                    t.start,
                    format!(
                        "duplicate parameter `{name}` (first declared at {})",
                        self.position(first.offset)
                    ),
                ));
            }
            self.check_new_name(name, t.start)?;
            self.expect(
                TokenKind::Colon,
                &format!("`:` and a type after parameter `{name}`"),
            )?;
            let ty = self.tensor_type(true)?;
            let id = match ty.concrete() {
                Some(ty) if self.sym.is_none() => self
                    .graph
                    .add_param(name, ty)
                    .map_err(|e| Located::new(t.start, e))?,
                _ => {
                    let index = self.graph.params.len();
                    let id = self
                        .push_symbolic(
                            Node {
                                op: Op::Param { index },
                                inputs: vec![],
                                ty: TensorType::scalar(ty.dtype),
                                name: Some(name.to_string()),
                            },
                            ty,
                            vec![],
                            t.start,
                        )
                        .map_err(|e| Located::new(t.start, e))?;
                    self.graph.params.push(id);
                    id
                }
            };
            self.names.insert(
                name,
                Binding {
                    id,
                    offset: t.start,
                    is_param: true,
                },
            );
            if !self.separator(TokenKind::RParen, "`,` or `)` in the parameter list")? {
                return Ok(());
            }
        }
    }

    fn result_types(&mut self) -> Result<Vec<TensorType<Expr>>, Located> {
        let mut types = vec![self.tensor_type(false)?];
        while self.peek()?.kind == TokenKind::Comma {
            self.next()?;
            self.skip_newlines()?;
            types.push(self.tensor_type(false)?);
        }
        Ok(types)
    }

    /// `f32[64, 784]` or `f32[B, T, 256]`; the dims are checked against the rank and
    /// element limits. `declare` (a parameter's type) lets a new symbol be introduced.
    fn tensor_type(&mut self, declare: bool) -> Result<TensorType<Expr>, Located> {
        let t = self.next()?;
        let dtype = match t.kind {
            TokenKind::Ident(name) => DType::from_name(name).ok_or_else(|| {
                Located::new(
                    t.start,
                    format!("unknown dtype `{name}` (dtypes are {})", DType::name_list()),
                )
            })?,
            _ => return Err(self.expected(&t, "a type such as `f32[2, 3]`")),
        };
        self.expect(
            TokenKind::LBracket,
            "`[` and the shape after the dtype (a scalar is `f32[]`)",
        )?;
        let mut dims = Vec::new();
        loop {
            self.skip_newlines()?;
            let d = self.next()?;
            match d.kind {
                TokenKind::RBracket => break,
                TokenKind::Int(v) if !self.continues_expression()? => {
                    dims.push(Expr::from_size(usize::try_from(v).map_err(|_| {
                        Located::new(d.start, format!("dimension {v} is too large"))
                    })?))
                }
                TokenKind::Minus => {
                    return Err(Located::new(d.start, "a dimension cannot be negative"))
                }
                TokenKind::Int(_) | TokenKind::Ident(_) | TokenKind::LParen => {
                    self.ahead.push_front(d.clone());
                    let e = self.size_expr(declare)?;
                    if e.as_const().is_some_and(|k| k < 0) {
                        return Err(Located::new(d.start, "a dimension cannot be negative"));
                    }
                    dims.push(e);
                }
                _ => {
                    return Err(
                        self.expected(&d, "a dimension (an integer >= 0 or a size symbol) or `]`")
                    )
                }
            }
            if dims.len() > MAX_RANK {
                return Err(Located::new(
                    d.start,
                    format!("rank exceeds the limit of {MAX_RANK} axes"),
                ));
            }
            if !self.separator(TokenKind::RBracket, "`,` or `]` in the shape")? {
                break;
            }
        }
        TensorType::checked(dtype, dims).map_err(|e| Located::new(t.start, e))
    }

    // ---- size symbols ----

    /// The rest of `dims B, T in [1, 512]`: declares symbols (and their ranges).
    fn dims_line(&mut self) -> Result<(), Located> {
        self.enter_symbolic();
        loop {
            let t = self.next()?;
            let TokenKind::Ident(name) = t.kind else {
                return Err(self.expected(&t, "a size symbol's name after `dims`"));
            };
            self.check_symbol_name(name, t.start)?;
            let place = self.place(t.start);
            let facts = &mut self.sym.as_mut().expect("symbolic").facts;
            if facts.symbol(name).is_some() {
                return Err(Located::new(
                    t.start,
                    format!("size symbol `{name}` is declared twice"),
                ));
            }
            facts.add_symbol(name, Some(place));
            facts.symbols.last_mut().expect("added").declared = true;
            if self.peek()?.kind == TokenKind::Ident("in") {
                self.next()?;
                let open = self.expect(TokenKind::LBracket, "`[LO, HI]` after `in`")?;
                let lo = self.range_bound()?;
                self.expect(TokenKind::Comma, "`,` between the bounds of the range")?;
                let hi = self.range_bound()?;
                self.expect(TokenKind::RBracket, "`]` closing the range")?;
                if lo > hi {
                    return Err(Located::new(
                        open.start,
                        format!("the range of `{name}` is empty ({lo} > {hi})"),
                    ));
                }
                let s = self
                    .sym
                    .as_mut()
                    .expect("symbolic")
                    .facts
                    .symbols
                    .last_mut();
                let s = s.expect("added");
                (s.lo, s.hi) = (lo, hi);
            }
            let n = self.peek()?.clone();
            match n.kind {
                TokenKind::Comma => {
                    self.next()?;
                }
                TokenKind::Newline | TokenKind::Eof => return Ok(()),
                _ => return Err(self.expected(&n, "`,` or the end of the `dims` line")),
            }
        }
    }

    fn range_bound(&mut self) -> Result<i64, Located> {
        let t = self.next()?;
        match t.kind {
            TokenKind::Int(v) => i64::try_from(v)
                .ok()
                .filter(|&v| v <= crate::sym::DEFAULT_MAX)
                .ok_or_else(|| {
                    Located::new(
                        t.start,
                        format!(
                            "bound {v} exceeds the element limit {}",
                            crate::sym::DEFAULT_MAX
                        ),
                    )
                }),
            _ => Err(self.expected(&t, "a bound (an integer >= 0)")),
        }
    }

    fn check_symbol_name(&self, name: &str, at: usize) -> Result<(), Located> {
        if RESERVED.contains(&name)
            || DType::from_name(name).is_some()
            || ["floordiv", "mod", "min", "max", "in", "dims"].contains(&name)
        {
            return Err(Located::new(
                at,
                format!("`{name}` cannot name a size symbol"),
            ));
        }
        Ok(())
    }

    /// `file:line:col` of a byte offset.
    fn place(&self, offset: usize) -> String {
        format!("{}:{}", self.file_name, self.position(offset))
    }

    /// Turns the graph read so far (parameters with numbers only) symbolic.
    fn enter_symbolic(&mut self) {
        if self.sym.is_some() {
            return;
        }
        let n = self.graph.nodes.len();
        self.sym = Some(SymState {
            facts: Facts::new(),
            types: self
                .graph
                .nodes
                .iter()
                .map(|node| TensorType::<Expr>::from_concrete(&node.ty))
                .collect(),
            attrs: vec![Vec::new(); n],
            places: vec![None; n],
            declared: None,
        });
    }

    /// Gives the nodes added by the concrete builder (literals, constants) their
    /// symbolic types.
    fn sync_symbolic(&mut self) {
        if let Some(st) = &mut self.sym {
            while st.types.len() < self.graph.nodes.len() {
                let node = &self.graph.nodes[st.types.len()];
                st.types.push(TensorType::<Expr>::from_concrete(&node.ty));
                st.attrs.push(Vec::new());
                st.places.push(None);
            }
        }
    }

    /// Appends a node typed symbolically.
    fn push_symbolic(
        &mut self,
        node: Node,
        ty: TensorType<Expr>,
        attrs: SymAttrs,
        offset: usize,
    ) -> Result<ValueId, Error> {
        self.enter_symbolic();
        self.sync_symbolic();
        let place = self.place(offset);
        let id = self.graph.push(node)?;
        let st = self.sym.as_mut().expect("symbolic");
        st.types.push(ty);
        st.attrs.push(attrs);
        st.places.push(Some(place));
        Ok(id)
    }

    /// Whether the token after the current one continues a size expression.
    fn continues_expression(&mut self) -> Result<bool, Located> {
        Ok(matches!(
            self.peek()?.kind,
            TokenKind::Plus | TokenKind::Star | TokenKind::Minus
        ))
    }

    /// A size expression: `B*T + 1`, `floordiv(T, 4)`, `(T - 1)*2`. With `declare`,
    /// a symbol not seen before is introduced; otherwise it is an error.
    fn size_expr(&mut self, declare: bool) -> Result<Expr, Located> {
        let mut e = self.size_term(declare)?;
        loop {
            match self.peek()?.kind {
                TokenKind::Plus => {
                    self.next()?;
                    e = e.add(&self.size_term(declare)?);
                }
                TokenKind::Minus => {
                    self.next()?;
                    e = e.sub(&self.size_term(declare)?);
                }
                _ => return Ok(e),
            }
        }
    }

    fn size_term(&mut self, declare: bool) -> Result<Expr, Located> {
        let mut e = self.size_factor(declare)?;
        while self.peek()?.kind == TokenKind::Star {
            self.next()?;
            e = e.mul(&self.size_factor(declare)?);
        }
        Ok(e)
    }

    fn size_factor(&mut self, declare: bool) -> Result<Expr, Located> {
        let t = self.next()?;
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Located::new(
                t.start,
                format!("nesting deeper than {MAX_NESTING} levels"),
            ));
        }
        let e = match t.kind {
            TokenKind::Int(v) => Expr::int(int_value(v, false, t.start)?),
            TokenKind::Minus => self.size_factor(declare)?.scale(-1),
            TokenKind::LParen => {
                let e = self.size_expr(declare)?;
                self.expect(TokenKind::RParen, "`)` closing the size expression")?;
                e
            }
            TokenKind::Ident(f @ ("floordiv" | "mod" | "min" | "max"))
                if self.peek()?.kind == TokenKind::LParen =>
            {
                self.next()?;
                let a = self.size_expr(declare)?;
                self.expect(
                    TokenKind::Comma,
                    &format!("`,` between the operands of `{f}`"),
                )?;
                let b = self.size_expr(declare)?;
                self.expect(TokenKind::RParen, &format!("`)` closing `{f}`"))?;
                match f {
                    "floordiv" => a.floor_div(&b),
                    "mod" => a.modulo(&b),
                    "min" => a.minimum(&b),
                    _ => a.maximum(&b),
                }
            }
            TokenKind::Ident(name) => self.symbol(name, t.start, declare)?,
            _ => return Err(self.expected(&t, "a size (an integer or a size symbol)")),
        };
        self.depth -= 1;
        Ok(e)
    }

    /// The symbol `name`, introduced here if `declare` and not known yet.
    fn symbol(&mut self, name: &str, at: usize, declare: bool) -> Result<Expr, Located> {
        let known = self
            .sym
            .as_ref()
            .is_some_and(|st| st.facts.symbol(name).is_some());
        if !known {
            if !declare {
                return Err(Located::new(
                    at,
                    format!(
                        "unknown size symbol `{name}`: a size symbol is bound by a parameter's \
                         type (`x: f32[{name}]`) or declared on a `dims {name}` line before `graph`"
                    ),
                ));
            }
            self.check_symbol_name(name, at)?;
            let place = self.place(at);
            self.enter_symbolic();
            self.sym
                .as_mut()
                .expect("symbolic")
                .facts
                .add_symbol(name, Some(place));
        }
        Ok(Expr::sym(name))
    }

    /// The parsed file: a graph, or a symbolic graph.
    fn finish(mut self) -> Parsed {
        self.sync_symbolic();
        match self.sym {
            None => Parsed::Graph(self.graph),
            Some(st) => Parsed::Symbolic(SymGraph {
                skeleton: self.graph,
                types: st.types,
                attrs: st.attrs,
                places: st.places,
                facts: st.facts,
                declared_outputs: st.declared,
            }),
        }
    }

    /// Statements up to and including `return ...` and the closing `}`.
    fn body(&mut self, declared: Option<Vec<TensorType<Expr>>>) -> Result<(), Located> {
        loop {
            self.skip_newlines()?;
            let t = self.peek()?.clone();
            match t.kind {
                TokenKind::Ident("return") => break,
                TokenKind::Ident(_) => {
                    self.statement()?;
                    let t = self.peek()?;
                    if !matches!(
                        t.kind,
                        TokenKind::Newline | TokenKind::RBrace | TokenKind::Eof
                    ) {
                        let t = t.clone();
                        return Err(self.expected(&t, "end of line after the statement"));
                    }
                }
                TokenKind::RBrace => {
                    return Err(Located::new(
                        t.start,
                        "the graph has no `return` statement (it comes last: `return y`)",
                    ))
                }
                TokenKind::Eof => {
                    return Err(Located::new(
                        t.start,
                        "unexpected end of file: the graph body needs a `return` statement and a closing `}`",
                    ))
                }
                _ => {
                    return Err(
                        self.expected(&t, "a statement (`name = op(...)` or `return ...`)")
                    )
                }
            }
        }
        self.ret(declared)?;
        self.skip_newlines()?;
        let t = self.next()?;
        if t.kind != TokenKind::RBrace {
            return Err(self.expected(&t, "`}` after `return` (it is the last statement)"));
        }
        Ok(())
    }

    fn check_new_name(&self, name: &str, offset: usize) -> Result<(), Located> {
        if RESERVED.contains(&name) {
            return Err(Located::new(
                offset,
                format!("`{name}` is a reserved word and cannot name a value"),
            ));
        }
        if let Some(b) = self.names.get(name) {
            let what = if b.is_param { ", as a parameter," } else { "" };
            return Err(Located::new(
                offset,
                format!(
                    "`{name}` is already defined{what} at {} (values cannot be reassigned: pick a new name)",
                    self.position(b.offset)
                ),
            ));
        }
        Ok(())
    }

    /// `name = call`.
    fn statement(&mut self) -> Result<(), Located> {
        let t = self.next()?;
        let TokenKind::Ident(name) = t.kind else {
            return Err(self.expected(&t, "a statement"));
        };
        if self.peek()?.kind == TokenKind::LParen {
            return Err(Located::new(
                t.start,
                format!(
                    "the result of `{name}(...)` must be named (`y = {name}(...)`) or returned"
                ),
            ));
        }
        self.check_new_name(name, t.start)?;
        self.expect(
            TokenKind::Eq,
            &format!("`=` after `{name}` (a statement is `name = op(...)`)"),
        )?;
        let e = self.peek()?.clone();
        let is_call =
            matches!(e.kind, TokenKind::Ident(_)) && self.peek_nth(1)?.kind == TokenKind::LParen;
        if is_call {
            let id = self.call(Some(name))?;
            self.names.insert(
                name,
                Binding {
                    id,
                    offset: t.start,
                    is_param: false,
                },
            );
            return Ok(());
        }
        match self.operand()? {
            Operand::Value { .. } => {
                let other = &self.src[e.start..e.end];
                Err(Located::new(
                    e.start,
                    format!(
                        "`{name} = {other}` would only give `{other}` a second name; use `{other}` directly"
                    ),
                ))
            }
            Operand::Literal { .. } => Err(Located::new(
                e.start,
                "a literal cannot be named: write it where it is used, or use `full(shape=[], value=...)`",
            )),
        }
    }

    /// `return a, relu(b), 2.0`.
    fn ret(&mut self, declared: Option<Vec<TensorType<Expr>>>) -> Result<(), Located> {
        let r = self.next()?;
        let mut outputs: Vec<(ValueId, usize)> = Vec::new();
        loop {
            let e = self.peek()?.clone();
            if outputs.is_empty()
                && matches!(
                    e.kind,
                    TokenKind::Newline | TokenKind::Eof | TokenKind::RBrace
                )
            {
                return Err(Located::new(e.start, "`return` needs at least one value"));
            }
            let id = match self.operand()? {
                Operand::Value { id, .. } => id,
                Operand::Literal { value, start, end } => {
                    self.literal(value, value.dtype_beside(None), start, end)?
                }
            };
            outputs.push((id, e.start));
            if self.peek()?.kind != TokenKind::Comma {
                break;
            }
            self.next()?;
        }
        self.graph.outputs = outputs.iter().map(|o| o.0).collect();
        self.sync_symbolic();
        if let (Some(decl), Some(_)) = (&declared, &self.sym) {
            return self.check_symbolic_outputs(decl.clone(), r.start, &outputs);
        }
        let declared = match declared {
            None => None,
            Some(decl) => Some(
                decl.iter()
                    .map(|t| t.concrete())
                    .collect::<Option<Vec<TensorType>>>()
                    .ok_or_else(|| {
                        Located::new(
                            r.start,
                            "internal: a symbolic declared type in a concrete graph",
                        )
                    })?,
            ),
        };
        if let Some(decl) = declared {
            if let Err(msg) = check_declared_outputs(&self.graph, &decl) {
                let at = if decl.len() != outputs.len() {
                    r.start
                } else {
                    outputs
                        .iter()
                        .zip(&decl)
                        .find(|((id, _), d)| self.graph.ty(*id) != *d)
                        .map_or(r.start, |((_, start), _)| *start)
                };
                return Err(Located::new(at, msg));
            }
            self.graph.declared_outputs = Some(decl);
        }
        Ok(())
    }

    /// Checks the `-> T, T` of a symbolic graph: equal extents are fine, different
    /// ones an error at the output, undecided ones a constraint.
    fn check_symbolic_outputs(
        &mut self,
        decl: Vec<TensorType<Expr>>,
        ret: usize,
        outputs: &[(ValueId, usize)],
    ) -> Result<(), Located> {
        if decl.len() != outputs.len() {
            return Err(Located::new(
                ret,
                format!(
                    "the graph declares {} result type{} but returns {} value{}",
                    decl.len(),
                    if decl.len() == 1 { "" } else { "s" },
                    outputs.len(),
                    if outputs.len() == 1 { "" } else { "s" }
                ),
            ));
        }
        let place = |p: &Self, at: usize| p.place(at);
        for (i, (d, (id, at))) in decl.iter().zip(outputs).enumerate() {
            let where_ = place(self, *at);
            let st = self.sym.as_mut().expect("symbolic");
            let got = &st.types[id.index()];
            let mismatch = || {
                Located::new(
                    *at,
                    format!("output {i} is {got} but the graph declares {d}"),
                )
            };
            if got.dtype != d.dtype || got.rank() != d.rank() {
                return Err(mismatch());
            }
            for (a, b) in got.shape.iter().zip(&d.shape) {
                match st.facts.decide_eq(a, b) {
                    Some(true) => {}
                    Some(false) => return Err(mismatch()),
                    None => {
                        st.facts.at = Some(where_.clone());
                        st.facts
                            .require(Fact::Eq(a.clone(), b.clone()), "the declared result type");
                    }
                }
            }
        }
        self.sym.as_mut().expect("symbolic").declared = Some(decl);
        Ok(())
    }

    // ---- expressions ----

    /// A name, a literal or a call.
    fn operand(&mut self) -> Result<Operand, Located> {
        let t = self.peek()?.clone();
        if matches!(t.kind, TokenKind::Ident(_)) && self.peek_nth(1)?.kind == TokenKind::LParen {
            let id = self.call(None)?;
            return Ok(Operand::Value { id, start: t.start });
        }
        let t = self.next()?;
        let value = match t.kind {
            TokenKind::Ident(name) => match literal_word(name) {
                Some(value) => value,
                None => {
                    let id = self.lookup(name, t.start)?;
                    return Ok(Operand::Value { id, start: t.start });
                }
            },
            TokenKind::Int(v) => Scalar::Int(int_value(v, false, t.start)?),
            TokenKind::Float(v) => Scalar::Float(v),
            TokenKind::Minus => {
                let n = self.next()?;
                let value = match n.kind {
                    TokenKind::Int(v) => Scalar::Int(int_value(v, true, t.start)?),
                    TokenKind::Float(v) => Scalar::Float(-v),
                    TokenKind::Ident("inf") => Scalar::Float(f64::NEG_INFINITY),
                    TokenKind::Ident("nan") => Scalar::Float(f64::NAN),
                    _ => return Err(self.expected(&n, "a number after `-`")),
                };
                return Ok(Operand::Literal {
                    value,
                    start: t.start,
                    end: n.end,
                });
            }
            _ => {
                return Err(self.expected(
                    &t,
                    "an operand (a name, a literal or a call such as `relu(x)`)",
                ))
            }
        };
        Ok(Operand::Literal {
            value,
            start: t.start,
            end: t.end,
        })
    }

    fn lookup(&self, name: &str, offset: usize) -> Result<ValueId, Located> {
        if let Some(b) = self.names.get(name) {
            return Ok(b.id);
        }
        let mut msg = format!("undefined name `{name}`");
        if is_op_name(name) {
            msg += &format!("; `{name}` is an op: call it as `{name}(...)`");
        } else {
            // Candidates in definition order, so ties go to the earliest name.
            let mut defined: Vec<(&str, usize)> =
                self.names.iter().map(|(n, b)| (*n, b.offset)).collect();
            defined.sort_by_key(|&(_, offset)| offset);
            if let Some(s) = closest(name, defined.into_iter().map(|(n, _)| n)) {
                msg += &format!("; did you mean `{s}`?");
            }
        }
        Err(Located::new(offset, msg))
    }

    /// `op(operands, key=value, ...)`: adds the node (named `bind` if given).
    fn call(&mut self, bind: Option<&'a str>) -> Result<ValueId, Located> {
        let t = self.next()?;
        let TokenKind::Ident(op_name) = t.kind else {
            return Err(self.expected(&t, "an op name"));
        };
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Located::new(
                t.start,
                format!("nesting deeper than {MAX_NESTING} levels"),
            ));
        }
        // Unknown ops are reported before their operands are read, so the error
        // is the first one in the text. `constant` is no entry of the op table.
        let spec = match OpSpec::find(op_name) {
            Some(spec) => Some(spec),
            None if op_name == "constant" => None,
            None => return Err(Located::new(t.start, unknown_op_message(op_name))),
        };
        self.expect(TokenKind::LParen, "`(`")?;
        let mut operands: Vec<Operand> = Vec::new();
        let mut attrs: Vec<Attr<'a>> = Vec::new();
        let what = format!("`,` or `)` in the call to `{op_name}`");
        loop {
            self.skip_newlines()?;
            let a = self.peek()?.clone();
            if a.kind == TokenKind::RParen {
                self.next()?;
                break;
            }
            let key = match a.kind {
                TokenKind::Ident(key) if self.peek_nth(1)?.kind == TokenKind::Eq => Some(key),
                _ => None,
            };
            if let Some(key) = key {
                self.next()?;
                self.next()?;
                if let Some(first) = attrs.iter().find(|x| x.key == key) {
                    return Err(Located::new(
                        a.start,
                        format!(
                            "duplicate attribute `{key}` (first given at {})",
                            self.position(first.start)
                        ),
                    ));
                }
                let (value, sym) = if spec.is_none() && key == "values" {
                    (self.value_list()?, None)
                } else {
                    self.attr_value()?
                };
                attrs.push(Attr {
                    key,
                    start: a.start,
                    value,
                    sym,
                });
            } else {
                if let Some(first) = attrs.first() {
                    return Err(Located::new(
                        a.start,
                        format!(
                            "operand after the attribute `{}`: operands come first, then `key=value` attributes",
                            first.key
                        ),
                    ));
                }
                operands.push(self.operand()?);
            }
            if !self.separator(TokenKind::RParen, &what)? {
                break;
            }
        }
        self.depth -= 1;
        match spec {
            Some(spec) => self.build(t.start, spec, operands, &attrs, bind),
            None => self.constant(t.start, &operands, &attrs, bind),
        }
    }

    /// Makes the node of a parsed call: builds the op, checks operands, types the
    /// literals, and adds it (which infers its type).
    fn build(
        &mut self,
        op_start: usize,
        spec: &'static OpSpec,
        operands: Vec<Operand>,
        attrs: &[Attr<'a>],
        bind: Option<&'a str>,
    ) -> Result<ValueId, Located> {
        let op_name = spec.name;
        let pairs: Vec<(String, AttrValue)> = attrs
            .iter()
            .map(|a| (a.key.to_string(), a.value.clone()))
            .collect();
        let op = match Op::from_call(op_name, &pairs) {
            Ok(Some(op)) => op,
            Ok(None) => return Err(Located::new(op_start, unknown_op_message(op_name))),
            Err(e) => return Err(attribute_error(op_start, e, attrs)),
        };
        let n = operands.len();
        let plural = |k: usize| if k == 1 { "" } else { "s" };
        match spec.arity {
            Arity::Exactly(k) if n != k => {
                let at = operands.get(k).map_or(op_start, Operand::start);
                return Err(Located::new(
                    at,
                    format!("{op_name} takes {k} operand{}, got {n}", plural(k)),
                ));
            }
            Arity::AtLeast(k) if n < k => {
                return Err(Located::new(
                    op_start,
                    format!("{op_name} takes at least {k} operand{}, got {n}", plural(k)),
                ))
            }
            _ => {}
        }
        // A literal is a rank-0 value; only elementwise ops are defined on one.
        if !op.is_elementwise() {
            if let Some(&Operand::Literal { start, end, .. }) = operands
                .iter()
                .find(|o| matches!(o, Operand::Literal { .. }))
            {
                return Err(Located::new(
                    start,
                    format!(
                        "{op_name} needs a tensor here, not the literal `{}`",
                        &self.src[start..end]
                    ),
                ));
            }
        }
        // A literal takes the dtype of the first tensor among the operands it is
        // combined with (PyTorch's scalar promotion).
        let value_positions: &[usize] = match op {
            Op::Binary(_) => &[0, 1],
            Op::Where => &[1, 2],
            _ => &[],
        };
        let peer = value_positions.iter().find_map(|&p| match operands.get(p) {
            Some(Operand::Value { id, .. }) => Some(self.graph.ty(*id).dtype),
            _ => None,
        });
        let mut ids = Vec::with_capacity(n);
        for (pos, o) in operands.iter().enumerate() {
            ids.push(match *o {
                Operand::Value { id, .. } => id,
                Operand::Literal { value, start, end } => {
                    let beside = if value_positions.contains(&pos) {
                        peer
                    } else {
                        None
                    };
                    self.literal(value, value.dtype_beside(beside), start, end)?
                }
            });
        }
        let mut sym_attrs: SymAttrs = Vec::new();
        for a in attrs {
            if let Some(exprs) = &a.sym {
                if !is_symbolic_attribute(op_name, a.key) {
                    let allowed: Vec<String> = SYMBOLIC_ATTRIBUTES
                        .iter()
                        .map(|(o, k)| format!("{o} {k}"))
                        .collect();
                    return Err(Located::new(
                        a.start,
                        format!(
                            "{op_name}: attribute `{}` cannot be a size expression (sizes may appear in: {})",
                            a.key,
                            allowed.join(", ")
                        ),
                    ));
                }
                sym_attrs.push((a.key.to_string(), exprs.clone()));
            }
        }
        let added = if self.sym.is_some() {
            self.sync_symbolic();
            let place = self.place(op_start);
            let st = self.sym.as_mut().expect("symbolic");
            let tys: Vec<&TensorType<Expr>> = ids.iter().map(|v| &st.types[v.index()]).collect();
            st.facts.at_node(Some(place), sym_attrs.clone());
            let typed = infer_dims(&op, &tys, &mut st.facts);
            st.facts.at_node(None, Vec::new());
            match typed {
                Ok(ty) => {
                    let node = Node {
                        op,
                        inputs: ids,
                        ty: TensorType::scalar(ty.dtype),
                        name: bind.map(str::to_string),
                    };
                    self.push_symbolic(node, ty, sym_attrs, op_start)
                }
                Err(e) => Err(Error::Type(e)),
            }
        } else {
            self.graph.add(op, &ids, bind.map(str::to_string))
        };
        let id = added.map_err(|e| {
            // A typing error names the attribute at fault, if one is; a few
            // (size limits) do not start with the op's name.
            let attribute = match &e {
                Error::Type(t) => t.attribute,
                _ => None,
            };
            let msg = e.to_string();
            let msg = if msg.starts_with(op_name) {
                msg
            } else {
                format!("{op_name}: {msg}")
            };
            let at = attribute
                .and_then(|key| attrs.iter().find(|a| a.key == key))
                .map_or(op_start, |a| a.start);
            Located::new(at, msg)
        })?;
        Ok(id)
    }

    /// Adds a literal of `dtype`, checking that its value fits.
    fn literal(
        &mut self,
        value: Scalar,
        dtype: DType,
        start: usize,
        end: usize,
    ) -> Result<ValueId, Located> {
        if !value.fits(dtype) {
            return Err(Located::new(
                start,
                format!(
                    "literal `{}` does not fit in {dtype}, the dtype of the tensor beside it",
                    &self.src[start..end]
                ),
            ));
        }
        let id = self
            .graph
            .add_literal(value, dtype)
            .map_err(|e| Located::new(start, e))?;
        self.sync_symbolic();
        Ok(id)
    }

    /// The value after `key=`.
    fn attr_value(&mut self) -> Result<(AttrValue, Option<Vec<Expr>>), Located> {
        let t = self.peek()?.clone();
        let symbolic = match t.kind {
            TokenKind::Int(_) => {
                matches!(self.peek_nth(1)?.kind, TokenKind::Plus | TokenKind::Star)
            }
            TokenKind::LParen => true,
            TokenKind::Ident(word) => {
                self.sym.is_some()
                    && literal_word(word).is_none()
                    && DType::from_name(word).is_none()
            }
            TokenKind::LBracket => {
                self.next()?;
                let (ints, exprs) = self.int_list()?;
                return Ok((AttrValue::Ints(ints), exprs));
            }
            _ => false,
        };
        if symbolic {
            let e = self.size_expr(false)?;
            return Ok(match e.as_const() {
                Some(k) => (AttrValue::Int(k), None),
                None => (AttrValue::Int(1), Some(vec![e])),
            });
        }
        let t = self.next()?;
        Ok((self.plain_attr_value(t)?, None))
    }

    /// An attribute value without size symbols, from its first token.
    fn plain_attr_value(&mut self, t: Token<'a>) -> Result<AttrValue, Located> {
        Ok(match t.kind {
            TokenKind::Int(v) => AttrValue::Int(int_value(v, false, t.start)?),
            TokenKind::Float(v) => AttrValue::Float(v),
            TokenKind::Minus => {
                let n = self.next()?;
                match n.kind {
                    TokenKind::Int(v) => AttrValue::Int(int_value(v, true, t.start)?),
                    TokenKind::Float(v) => AttrValue::Float(-v),
                    TokenKind::Ident("inf") => AttrValue::Float(f64::NEG_INFINITY),
                    TokenKind::Ident("nan") => AttrValue::Float(f64::NAN),
                    _ => return Err(self.expected(&n, "a number after `-`")),
                }
            }
            TokenKind::Ident(word) => match literal_word(word) {
                Some(Scalar::Bool(b)) => AttrValue::Bool(b),
                Some(s) => AttrValue::Float(s.as_f64()),
                None => AttrValue::DType(DType::from_name(word).ok_or_else(|| {
                    Located::new(
                        t.start,
                        format!(
                            "`{word}` is not an attribute value: expected a dtype ({}), a number, true/false, a list `[..]` or a \"string\"",
                            DType::name_list()
                        ),
                    )
                })?),
            },
            TokenKind::Str(s) => AttrValue::Str(s),
            _ => {
                return Err(self.expected(
                    &t,
                    "an attribute value (a number, true/false, `[..]`, a dtype or a \"string\")",
                ))
            }
        })
    }

    /// The `[..]` of `values=`: literals of any kind. A list of integers only is
    /// [`AttrValue::Ints`] (exact for `i64`), any other [`AttrValue::Values`].
    fn value_list(&mut self) -> Result<AttrValue, Located> {
        let open = self.next()?;
        if open.kind != TokenKind::LBracket {
            return Err(self.expected(&open, "a list of values `[..]`"));
        }
        let mut out = Vec::new();
        loop {
            self.skip_newlines()?;
            if self.peek()?.kind == TokenKind::RBracket {
                self.next()?;
                break;
            }
            let t = self.peek()?.clone();
            match self.operand()? {
                Operand::Literal { value, .. } => out.push(value),
                Operand::Value { .. } => {
                    return Err(Located::new(
                        t.start,
                        "a constant's values are literals (numbers, inf, nan, true, false)",
                    ))
                }
            }
            if !self.separator(TokenKind::RBracket, "`,` or `]` in the list of values")? {
                break;
            }
        }
        let ints: Option<Vec<i64>> = out
            .iter()
            .map(|v| match v {
                Scalar::Int(i) => Some(*i),
                _ => None,
            })
            .collect();
        Ok(match ints {
            Some(ints) => AttrValue::Ints(ints),
            None => AttrValue::Values(out),
        })
    }

    /// Makes the node of `constant(...)`: from the weights file (`name=`) or inline
    /// (`values=`), typed by `dtype=` and `shape=` when given.
    fn constant(
        &mut self,
        op_start: usize,
        operands: &[Operand],
        attrs: &[Attr<'a>],
        bind: Option<&'a str>,
    ) -> Result<ValueId, Located> {
        if let Some(o) = operands.first() {
            return Err(Located::new(
                o.start(),
                "constant takes no operands: its tensor is `name=\"KEY\"` (in the weights file) or `values=[..]`",
            ));
        }
        let decl = read_constant_attrs(attrs)?;
        let tensor = match (decl.name, decl.values) {
            (Some(_), Some((_, at))) => {
                return Err(Located::new(
                    at,
                    "constant: give `name=` (a tensor of the weights file) or `values=`, not both",
                ))
            }
            (None, None) => {
                return Err(Located::new(
                    op_start,
                    "constant needs `name=\"KEY\"` (a tensor of the weights file) or `values=[..]`",
                ))
            }
            (None, Some((values, at))) => {
                let values_at = at;
                inline_tensor(&values, decl.dtype, decl.shape.as_ref(), values_at)?
            }
            (Some((key, at)), None) => {
                let Some(file) = self.weights_file.clone() else {
                    return Err(Located::new(
                        at,
                        format!(
                            "constant \"{key}\" refers to the weights file, but the file names none                              (add a line `weights \"FILE.safetensors\"` before `graph`)"
                        ),
                    ));
                };
                let declared = match (decl.dtype, &decl.shape) {
                    (Some((d, _)), Some((s, _))) => TensorType::new(d, s.clone()).ok(),
                    _ => None,
                };
                let tensor = self
                    .weights
                    .tensor(&file, &key, declared.as_ref())
                    .map_err(|e| Located::new(at, format!("constant \"{key}\": {e}")))?;
                if let Some((d, at)) = decl.dtype {
                    if tensor.ty.dtype != d {
                        return Err(Located::new(
                            at,
                            format!(
                                "constant \"{key}\" is declared {d} but \"{file}\" holds it as {}",
                                tensor.ty
                            ),
                        ));
                    }
                }
                if let Some((s, at)) = &decl.shape {
                    if &tensor.ty.shape != s {
                        return Err(Located::new(
                            *at,
                            format!(
                                "constant \"{key}\" is declared with shape {:?} but \"{file}\" holds it as {}",
                                s, tensor.ty
                            ),
                        ));
                    }
                }
                Constant::named(key, tensor)
            }
        };
        let id = self
            .graph
            .add_constant(tensor, None)
            .map_err(|e| Located::new(op_start, format!("constant: {e}")))?;
        self.graph.nodes[id.index()].name = bind.map(str::to_string);
        self.sync_symbolic();
        Ok(id)
    }

    /// The rest of `[0, -1, 2]` after its `[`. Lists do not nest, so `[[` is an
    /// error here rather than a recursion. Entries may be size expressions
    /// (`[B*T, 256]`): then the second list holds every entry as an expression, and
    /// the first a placeholder 1 for each symbolic one.
    fn int_list(&mut self) -> Result<(Vec<i64>, Option<Vec<Expr>>), Located> {
        let mut out = Vec::new();
        let mut exprs: Vec<Expr> = Vec::new();
        let mut symbolic = false;
        loop {
            self.skip_newlines()?;
            let t = self.next()?;
            let sized = match t.kind {
                TokenKind::Int(_) => {
                    matches!(self.peek()?.kind, TokenKind::Plus | TokenKind::Star)
                }
                TokenKind::Ident(_) | TokenKind::LParen => true,
                _ => false,
            };
            if sized {
                self.ahead.push_front(t.clone());
                let e = self.size_expr(false)?;
                match e.as_const() {
                    Some(k) => {
                        out.push(k);
                        exprs.push(e);
                    }
                    None => {
                        symbolic = true;
                        out.push(1);
                        exprs.push(e);
                    }
                }
                if !self.separator(TokenKind::RBracket, "`,` or `]` in the list")? {
                    break;
                }
                continue;
            }
            let v = match t.kind {
                TokenKind::RBracket => break,
                TokenKind::Int(v) => int_value(v, false, t.start)?,
                TokenKind::Minus => {
                    let n = self.next()?;
                    match n.kind {
                        TokenKind::Int(v) => int_value(v, true, t.start)?,
                        _ => return Err(self.expected(&n, "an integer after `-`")),
                    }
                }
                _ => return Err(self.expected(&t, "an integer or `]`")),
            };
            out.push(v);
            exprs.push(Expr::int(v));
            if !self.separator(TokenKind::RBracket, "`,` or `]` in the list")? {
                break;
            }
        }
        Ok((out, symbolic.then_some(exprs)))
    }
}

/// `true`, `false`, `inf` and `nan` as literals.
fn literal_word(word: &str) -> Option<Scalar> {
    match word {
        "true" => Some(Scalar::Bool(true)),
        "false" => Some(Scalar::Bool(false)),
        "inf" => Some(Scalar::Float(f64::INFINITY)),
        "nan" => Some(Scalar::Float(f64::NAN)),
        _ => None,
    }
}

/// The integer `v` (negated if `negative`) as an i64.
fn int_value(v: u64, negative: bool, offset: usize) -> Result<i64, Located> {
    let wide = if negative {
        -i128::from(v)
    } else {
        i128::from(v)
    };
    i64::try_from(wide).map_err(|_| {
        Located::new(
            offset,
            format!("integer `{wide}` is out of range (it must fit in i64)"),
        )
    })
}

fn is_op_name(name: &str) -> bool {
    OpSpec::find(name).is_some() || name == "constant"
}

fn unknown_op_message(name: &str) -> String {
    let names = OPS.iter().map(|s| s.name).chain(["constant"]);
    match closest(name, names) {
        Some(s) => format!("unknown op `{name}`; did you mean `{s}`?"),
        None => format!("unknown op `{name}`"),
    }
}

/// The attributes of a `constant(...)` call, each with where its key is.
struct ConstantAttrs {
    name: Option<(String, usize)>,
    values: Option<(Vec<Scalar>, usize)>,
    dtype: Option<(DType, usize)>,
    shape: Option<(Vec<usize>, usize)>,
}

/// The attributes `constant` knows, in the order the printer writes them.
const CONSTANT_ATTRS: [&str; 4] = ["name", "values", "dtype", "shape"];

/// Reads `constant`'s attributes, checking each one's type.
fn read_constant_attrs(attrs: &[Attr<'_>]) -> Result<ConstantAttrs, Located> {
    let mut out = ConstantAttrs {
        name: None,
        values: None,
        dtype: None,
        shape: None,
    };
    for a in attrs {
        let ill = |what: &str| {
            Located::new(
                a.start,
                format!(
                    "constant: attribute `{}` must be {what}, not `{}`",
                    a.key, a.value
                ),
            )
        };
        match (a.key, &a.value) {
            ("name", AttrValue::Str(s)) => out.name = Some((s.clone(), a.start)),
            ("name", _) => return Err(ill("a string")),
            ("values", AttrValue::Ints(v)) => {
                out.values = Some((v.iter().map(|&i| Scalar::Int(i)).collect(), a.start))
            }
            ("values", AttrValue::Values(v)) => out.values = Some((v.clone(), a.start)),
            ("values", _) => return Err(ill("a list of values")),
            ("dtype", AttrValue::DType(d)) => out.dtype = Some((*d, a.start)),
            ("dtype", _) => return Err(ill(&format!("a dtype ({})", DType::name_list()))),
            ("shape", AttrValue::Ints(v)) => {
                let dims: Option<Vec<usize>> = v.iter().map(|&d| usize::try_from(d).ok()).collect();
                let Some(dims) = dims else {
                    return Err(Located::new(
                        a.start,
                        "constant: shape extents must be >= 0",
                    ));
                };
                if dims.len() > MAX_RANK {
                    return Err(Located::new(
                        a.start,
                        format!("constant: rank exceeds the limit of {MAX_RANK} axes"),
                    ));
                }
                out.shape = Some((dims, a.start));
            }
            ("shape", _) => return Err(ill("a list of integers")),
            (key, _) => {
                let mut msg = format!("constant: unknown attribute `{key}`");
                if let Some(s) = closest(key, CONSTANT_ATTRS.into_iter()) {
                    msg += &format!("; did you mean `{s}`?");
                }
                return Err(Located::new(a.start, msg));
            }
        }
    }
    if let (Some((d, _)), Some((s, at))) = (out.dtype, &out.shape) {
        TensorType::new(d, s.clone()).map_err(|e| Located::new(*at, format!("constant: {e}")))?;
    }
    Ok(out)
}

/// The tensor of `constant(values=[..])`. The dtype defaults as `torch.tensor` picks
/// one (`bool` for truth values, `i64` for integers, else `f32`), the shape to `[n]`;
/// every value must fit the dtype, and their count must be the shape's.
fn inline_tensor(
    values: &[Scalar],
    dtype: Option<(DType, usize)>,
    shape: Option<&(Vec<usize>, usize)>,
    at: usize,
) -> Result<Constant, Located> {
    let dtype = match dtype {
        Some((d, _)) => d,
        None if values.iter().all(|v| matches!(v, Scalar::Bool(_))) && !values.is_empty() => {
            DType::Bool
        }
        None if values.iter().all(|v| matches!(v, Scalar::Int(_))) => DType::I64,
        None => DType::F32,
    };
    let (dims, shape_at) = match shape {
        Some((s, shape_at)) => (s.clone(), *shape_at),
        None => (vec![values.len()], at),
    };
    let ty = TensorType::new(dtype, dims)
        .map_err(|e| Located::new(shape_at, format!("constant: {e}")))?;
    if ty.numel() != values.len() {
        return Err(Located::new(
            at,
            format!(
                "constant: {ty} holds {} value{}, but {} {} given",
                ty.numel(),
                if ty.numel() == 1 { "" } else { "s" },
                values.len(),
                if values.len() == 1 { "is" } else { "are" }
            ),
        ));
    }
    for (i, &v) in values.iter().enumerate() {
        let fits = match (v, dtype) {
            (Scalar::Float(_), d) if !d.is_float() => false,
            (Scalar::Int(i), DType::Bool) => i == 0 || i == 1,
            _ => v.fits(dtype),
        };
        if !fits {
            let shown = match v {
                Scalar::Float(f) => crate::op::format_float(f),
                Scalar::Int(i) => i.to_string(),
                Scalar::Bool(b) => b.to_string(),
            };
            return Err(Located::new(
                at,
                format!("constant: value {i} (`{shown}`) does not fit in {dtype}"),
            ));
        }
    }
    let tensor = if dtype.is_float() {
        let f: Vec<f64> = values.iter().map(|v| v.as_f64()).collect();
        Tensor::from_f64(&ty, &f)
    } else {
        let i: Vec<i64> = values
            .iter()
            .map(|v| match v {
                Scalar::Int(i) => *i,
                Scalar::Bool(b) => *b as i64,
                Scalar::Float(f) => *f as i64,
            })
            .collect();
        Tensor::from_i64(&ty, &i)
    };
    Ok(Constant::new(tensor))
}

/// Locates an error of [`Op::from_call`] at the attribute it names: a missing
/// attribute at its misspelling if there is one, else at the op.
fn attribute_error(op_start: usize, e: AttrError, attrs: &[Attr<'_>]) -> Located {
    let key = match &e.kind {
        AttrErrorKind::Missing { misspelling } => misspelling.as_deref(),
        _ => Some(e.attribute.as_str()),
    };
    let at = key
        .and_then(|k| attrs.iter().find(|a| a.key == k))
        .map_or(op_start, |a| a.start);
    Located::new(at, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_fit_their_dtype() {
        assert!(Scalar::Int(1 << 31).fits(DType::I64));
        assert!(!Scalar::Int(1 << 31).fits(DType::I32));
        assert!(!Scalar::Int(256).fits(DType::U8));
        assert!(Scalar::Int(255).fits(DType::U8));
        assert!(!Scalar::Int(-1).fits(DType::U64));
        assert!(!Scalar::Int(-129).fits(DType::I8));
        assert!(Scalar::Int(-32768).fits(DType::I16));
        assert!(Scalar::Float(1e300).fits(DType::F64));
        assert!(Scalar::Int(-(1 << 31)).fits(DType::I32));
        assert!(Scalar::Float(65504.0).fits(DType::F16));
        assert!(!Scalar::Float(1e5).fits(DType::F16));
        assert!(Scalar::Float(f64::INFINITY).fits(DType::F16));
        assert!(!Scalar::Float(1e39).fits(DType::F32));
        assert!(Scalar::Float(1e38).fits(DType::Bf16));
    }

    #[test]
    fn parses_the_design_example() {
        let src = "# two-layer MLP\n\
            graph mlp(x: f32[64, 784], w1: f32[784, 512], b1: f32[512], w2: f32[512, 10]) -> f32[64, 10] {\n\
            \x20 h = matmul(x, w1)\n\
            \x20 a = relu(add(h, b1))\n\
            \x20 y = matmul(a, w2)\n\
            \x20 s = mul(y, 0.5)\n\
            \x20 return s\n\
            }\n";
        let g = parse("mlp.fg", src).unwrap();
        crate::verify(&g).unwrap();
        assert_eq!(g.name, "mlp");
        assert_eq!(g.params.len(), 4);
        // 4 params, h, add, a, y, the literal, s.
        assert_eq!(g.nodes.len(), 10);
        assert_eq!(g.nodes[5].name, None);
        assert_eq!(g.nodes[5].op, Op::Binary(crate::BinaryOp::Add));
        assert_eq!(
            g.nodes[8].op,
            Op::Literal {
                value: Scalar::Float(0.5)
            }
        );
        assert_eq!(g.ty(g.outputs[0]).shape, vec![64, 10]);
    }

    #[test]
    fn literal_dtypes_follow_their_peer() {
        let g = parse(
            "t.fg",
            "graph t(h: f16[2], i: i32[2], c: bool[2]) {\n\
             \x20 a = add(2.0, h)\n\
             \x20 b = mul(i, 3)\n\
             \x20 d = where(c, 1, h)\n\
             \x20 e = add(1, 2.5)\n\
             \x20 return a, b, d, e, true\n}",
        )
        .unwrap();
        let lits: Vec<DType> = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Literal { .. }))
            .map(|n| n.ty.dtype)
            .collect();
        use DType::*;
        assert_eq!(lits, vec![F16, I32, F16, I64, F32, Bool]);
        let outs: Vec<DType> = g.outputs.iter().map(|&o| g.ty(o).dtype).collect();
        assert_eq!(outs, vec![F16, I32, F16, F32, Bool]);
    }
}

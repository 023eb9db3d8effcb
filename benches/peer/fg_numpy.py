"""A reader of Ferrite's `.fg` graph files and a NumPy evaluator of them, op by op.

This is the "eager" peer of Ferrite's compiled CPU code: every graph op becomes one (or,
for composite ops such as `softmax` and `layer_norm`, a few) NumPy calls, computed in the
graph's own dtype (float32 stays float32, as PyTorch eager computes), with NumPy's BLAS for
`matmul`. It follows the semantics of Ferrite's reference interpreter (`ir/src/interp*`):
PyTorch's type promotion, literals that take the dtype of the tensor beside them,
NaN-propagating `maximum`/`minimum`/`max`/`min`, `sign(+-0) = 0`, float-to-int casts that
truncate toward zero and saturate (NaN to 0), integer literals wrapping into `i32`, ...

The grammar is the one in `ir/src/text/parser.rs`:

    file    := "graph" NAME "(" [param ("," param)* [","]] ")" ["->" type ("," type)*]
               "{" stmt* "return" expr ("," expr)* "}"
    param   := NAME ":" type
    type    := DTYPE "[" [INT ("," INT)* [","]] "]"
    stmt    := NAME "=" call
    expr    := call | NAME | literal
    call    := OP "(" [arg ("," arg)* [","]] ")"        operands first, then attributes
    arg     := expr | KEY "=" value
    literal := ["-"] (INT | FLOAT | "inf" | "nan") | "true" | "false"
    value   := literal | "[" [["-"] INT ("," ["-"] INT)* [","]] "]" | DTYPE | STRING

It is a reader of valid files (Ferrite's own parser is the one that explains mistakes);
what it cannot read or evaluate raises `FgError` with the file, line and column, never a
wrong answer: an op it does not implement is an error naming the op.

Usage:

    g = parse_file("examples/mlp.fg")
    inputs = ferrite_random_inputs(g, seed=0)   # bit-identical to `ferrite run --seed 0`
    prog = Program(g)
    outputs = prog.run(inputs)                  # a list of arrays, one per returned value

`bf16` has no NumPy dtype and is refused.
"""

import math
import re

import numpy as np

__all__ = [
    "FgError",
    "Graph",
    "Node",
    "Program",
    "ferrite_random_inputs",
    "parse",
    "parse_file",
    "splitmix_uniform",
    "IMPLEMENTED_OPS",
    "ERF_IMPL",
]


class FgError(Exception):
    """A `.fg` file that this reader cannot read, or a graph it cannot evaluate."""


# ---------------------------------------------------------------------------------------
# dtypes and promotion (ir/src/dtype.rs)

NP_DTYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
DTYPE_NAMES = ("f32", "f16", "bf16", "i32", "i64", "bool")


def np_dtype(name, where=""):
    """The NumPy dtype of a Ferrite dtype name; `bf16` (no NumPy dtype) is an error."""
    if name == "bf16":
        raise FgError(f"{where}bf16 has no NumPy dtype; this evaluator supports f32, f16, i32, i64, bool")
    try:
        return NP_DTYPES[name]
    except KeyError:
        raise FgError(f"{where}unknown dtype `{name}`") from None


def category(dt):
    """'float', 'int' or 'bool'."""
    if dt == np.bool_:
        return "bool"
    if dt.kind in "iu":
        return "int"
    return "float"


def promote(a, b):
    """`torch.promote_types` on Ferrite's dtypes (ir/src/dtype.rs `promote`)."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca == "bool":
        return b
    if cb == "bool":
        return a
    if ca == "int" and cb == "int":
        return NP_DTYPES["i64"]
    if ca == "int":
        return b
    if cb == "int":
        return a
    return NP_DTYPES["f32"]  # two different float dtypes meet at f32


# ---------------------------------------------------------------------------------------
# lexer (ir/src/text/lexer.rs)

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<comment>\#[^\n]*)
  | (?P<newline>\n)
  | (?P<arrow>->)
  | (?P<number>[0-9][0-9]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<punct>[()\[\]{},:=\-])
    """,
    re.VERBOSE,
)
_ESCAPES = {'"': '"', "\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "0": "\0"}


class Token:
    __slots__ = ("kind", "value", "pos")

    def __init__(self, kind, value, pos):
        self.kind = kind  # 'ident' 'int' 'float' 'str' 'nl' 'eof' or the punctuation itself
        self.value = value
        self.pos = pos

    def __repr__(self):
        return f"Token({self.kind!r}, {self.value!r})"


def _unescape(body, pos, loc):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "u":
            m = re.match(r"\{([0-9A-Fa-f]{1,6})\}", body[i + 2:])
            if not m:
                raise FgError(f"{loc(pos)}: bad unicode escape in string")
            out.append(chr(int(m.group(1), 16)))
            i += 2 + m.end()
        else:
            raise FgError(f"{loc(pos)}: unknown escape in string")
    return "".join(out)


def tokenize(src, loc):
    """All tokens of `src`; `loc(offset)` formats a position for errors."""
    if src.startswith("\ufeff"):
        src = src[1:]
    toks, pos = [], 0
    while pos < len(src):
        m = _TOKEN_RE.match(src, pos)
        if not m:
            raise FgError(f"{loc(pos)}: unexpected character {src[pos]!r}")
        kind, text = m.lastgroup, m.group()
        if kind == "number":
            # A number glued to letters/points (`12abc`, `1.5.3`) is a bad number.
            if m.end() < len(src) and (src[m.end()].isalnum() or src[m.end()] in "_."):
                raise FgError(f"{loc(pos)}: bad number")
            if any(c in text for c in ".eE"):
                toks.append(Token("float", float(text), pos))
            else:
                toks.append(Token("int", int(text), pos))
        elif kind == "ident":
            toks.append(Token("ident", text, pos))
        elif kind == "string":
            toks.append(Token("str", _unescape(text[1:-1], pos, loc), pos))
        elif kind == "newline":
            toks.append(Token("nl", None, pos))
        elif kind in ("arrow", "punct"):
            toks.append(Token(text, text, pos))
        pos = m.end()
    toks.append(Token("eof", None, pos))
    return toks


# ---------------------------------------------------------------------------------------
# the graph


class Node:
    """One value of the graph: a parameter, a literal, or an op applied to earlier nodes."""

    __slots__ = ("kind", "name", "op", "args", "attrs", "value", "dtype", "shape", "pos")

    def __init__(self, kind, name=None, op=None, args=(), attrs=None, value=None,
                 dtype=None, shape=None, pos=0):
        self.kind = kind  # 'param' | 'literal' | 'op'
        self.name = name
        self.op = op
        self.args = list(args)
        self.attrs = attrs or {}
        self.value = value  # literal: ('float'|'int'|'bool', python value)
        self.dtype = dtype  # numpy dtype (params: declared; others: inferred)
        self.shape = shape  # params only (declared)
        self.pos = pos


class Graph:
    """A parsed graph: `nodes` in definition order, `params` and `outputs` as node indices."""

    def __init__(self, name, file):
        self.name = name
        self.file = file
        self.nodes = []
        self.params = []
        self.outputs = []
        self.output_names = []  # the returned value's name, or `output<i>` (as `ferrite run --out`)
        self.declared = None  # [(dtype name, shape)] of `-> ...`, if given

    def param_types(self):
        return [(self.nodes[p].name, self.nodes[p].dtype, self.nodes[p].shape) for p in self.params]

    def ops_used(self):
        return sorted({n.op for n in self.nodes if n.kind == "op"})


def _locator(file, src):
    def loc(offset):
        line = src.count("\n", 0, offset) + 1
        col = offset - (src.rfind("\n", 0, offset) + 1) + 1
        return f"{file}:{line}:{col}"

    return loc


class _Parser:
    def __init__(self, file, src):
        self.loc = _locator(file, src)
        self.toks = tokenize(src, self.loc)
        self.i = 0
        self.depth = 0  # open ( and [ : newlines inside are free
        self.graph = Graph("?", file)
        self.names = {}

    # tokens
    def peek(self, n=0):
        j, seen = self.i, -1
        while True:
            t = self.toks[min(j, len(self.toks) - 1)]
            if not (t.kind == "nl" and self.depth > 0):
                seen += 1
                if seen == n:
                    return t
            j += 1

    def next(self):
        while True:
            t = self.toks[min(self.i, len(self.toks) - 1)]
            self.i += 1
            if t.kind == "nl" and self.depth > 0:
                continue
            return t

    def expect(self, kind, what):
        t = self.next()
        if t.kind != kind:
            raise FgError(f"{self.loc(t.pos)}: expected {what}, found {t.value!r}")
        return t

    def skip_newlines(self):
        while self.peek().kind == "nl":
            self.next()

    # structure
    def file(self):
        self.skip_newlines()
        t = self.next()
        if t.kind != "ident" or t.value != "graph":
            raise FgError(f"{self.loc(t.pos)}: expected `graph`")
        self.graph.name = self.expect("ident", "the graph's name").value
        self.expect("(", "`(`")
        self.depth += 1
        while self.peek().kind != ")":
            name_tok = self.expect("ident", "a parameter name")
            self.expect(":", "`:`")
            dt, shape = self.tensor_type()
            node = Node("param", name=name_tok.value, dtype=np_dtype(dt, self.loc(name_tok.pos) + ": "),
                        shape=shape, pos=name_tok.pos)
            self.graph.params.append(self.add(node, name_tok.value))
            if self.peek().kind == ",":
                self.next()
        self.next()
        self.depth -= 1
        if self.peek().kind == "->":
            self.next()
            decl = [self.tensor_type()]
            while self.peek().kind == ",":
                self.next()
                self.skip_newlines()
                decl.append(self.tensor_type())
            self.graph.declared = decl
        self.skip_newlines()
        self.expect("{", "`{`")
        while True:
            self.skip_newlines()
            t = self.peek()
            if t.kind == "ident" and t.value == "return":
                self.next()
                break
            if t.kind != "ident":
                raise FgError(f"{self.loc(t.pos)}: expected a statement or `return`")
            self.statement()
        while True:
            self.graph.outputs.append(self.expr())
            if self.peek().kind != ",":
                break
            self.next()
        # File names of `ferrite run --out`: the returned value's name, or `output<i>`.
        self.graph.output_names = [self.graph.nodes[o].name or f"output{i}"
                                   for i, o in enumerate(self.graph.outputs)]
        self.skip_newlines()
        self.expect("}", "`}`")
        self.skip_newlines()
        self.expect("eof", "the end of the file")
        return self.graph

    def tensor_type(self):
        t = self.expect("ident", "a dtype")
        if t.value not in DTYPE_NAMES:
            raise FgError(f"{self.loc(t.pos)}: unknown dtype `{t.value}`")
        self.expect("[", "`[`")
        self.depth += 1
        dims = []
        while self.peek().kind != "]":
            dims.append(self.expect("int", "a dimension").value)
            if self.peek().kind == ",":
                self.next()
        self.next()
        self.depth -= 1
        return t.value, tuple(dims)

    def add(self, node, name=None):
        if name is not None:
            if name in self.names:
                raise FgError(f"{self.loc(node.pos)}: `{name}` is already defined")
            self.names[name] = len(self.graph.nodes)
        self.graph.nodes.append(node)
        return len(self.graph.nodes) - 1

    def statement(self):
        name_tok = self.next()
        self.expect("=", "`=`")
        t, t2 = self.peek(), self.peek(1)
        if not (t.kind == "ident" and t2.kind == "("):
            raise FgError(f"{self.loc(t.pos)}: a statement binds a call (`name = op(...)`)")
        idx = self.call()
        node = self.graph.nodes[idx]
        node.name = name_tok.value
        if name_tok.value in self.names:
            raise FgError(f"{self.loc(name_tok.pos)}: `{name_tok.value}` is already defined")
        self.names[name_tok.value] = idx

    def expr(self):
        """A call, a name or a literal; returns a node index."""
        t = self.peek()
        if t.kind == "ident" and self.peek(1).kind == "(":
            return self.call()
        lit = self.literal()
        if lit is not None:
            return self.add(Node("literal", value=lit, pos=t.pos))
        t = self.next()
        if t.kind == "ident":
            if t.value not in self.names:
                raise FgError(f"{self.loc(t.pos)}: undefined name `{t.value}`")
            return self.names[t.value]
        raise FgError(f"{self.loc(t.pos)}: expected an operand, found {t.value!r}")

    def literal(self):
        """A literal at the cursor as ('float'|'int'|'bool', value), consumed; else None."""
        t = self.peek()
        if t.kind == "ident" and t.value in ("true", "false"):
            self.next()
            return ("bool", t.value == "true")
        if t.kind == "ident" and t.value in ("inf", "nan"):
            self.next()
            return ("float", math.inf if t.value == "inf" else math.nan)
        if t.kind in ("int", "float"):
            self.next()
            return (t.kind, t.value)
        if t.kind == "-":
            n = self.peek(1)
            if n.kind in ("int", "float"):
                self.next(), self.next()
                return (n.kind, -n.value)
            if n.kind == "ident" and n.value in ("inf", "nan"):
                self.next(), self.next()
                return ("float", -math.inf if n.value == "inf" else math.nan)
        return None

    def call(self):
        op_tok = self.next()
        op = op_tok.value
        self.expect("(", "`(`")
        self.depth += 1
        args, attrs = [], {}
        while self.peek().kind != ")":
            if self.peek().kind == "ident" and self.peek(1).kind == "=":
                key = self.next().value
                self.next()
                attrs[key] = self.attr_value()
            else:
                if attrs:
                    raise FgError(f"{self.loc(self.peek().pos)}: operands come before attributes")
                args.append(self.expr())
            if self.peek().kind == ",":
                self.next()
            elif self.peek().kind != ")":
                t = self.peek()
                raise FgError(f"{self.loc(t.pos)}: expected `,` or `)` in the call to `{op}`")
        self.next()
        self.depth -= 1
        if op not in OPS:
            raise FgError(f"{self.loc(op_tok.pos)}: op `{op}` is not implemented by the NumPy evaluator "
                          f"(implemented: {', '.join(sorted(OPS))})")
        _check_call(op, args, attrs, f"{self.loc(op_tok.pos)}: {op}: ")
        return self.add(Node("op", op=op, args=args, attrs=attrs, pos=op_tok.pos))

    def attr_value(self):
        lit = self.literal()
        if lit is not None:
            return lit[1]
        t = self.next()
        if t.kind == "str":
            return t.value
        if t.kind == "ident":
            if t.value in DTYPE_NAMES:
                return ("dtype", t.value)
            raise FgError(f"{self.loc(t.pos)}: `{t.value}` is not an attribute value")
        if t.kind == "[":
            self.depth += 1
            out = []
            while self.peek().kind != "]":
                neg = self.peek().kind == "-"
                if neg:
                    self.next()
                v = self.expect("int", "an integer").value
                out.append(-v if neg else v)
                if self.peek().kind == ",":
                    self.next()
            self.next()
            self.depth -= 1
            return out
        raise FgError(f"{self.loc(t.pos)}: expected an attribute value")


def _signature(op):
    """(number of operands or None for at least one, required attributes, optional ones),
    as `Op::from_call` and `Op::arity` in ir/src/op.rs define them."""
    if op in UNARY:
        return 1, (), ("approximate",) if op == "gelu" else ()
    if op in BINARY:
        return 2, (), ()
    if op in REDUCE:
        return 1, (), ("axes", "keepdim")
    return {
        "where": (3, (), ()),
        "cast": (1, ("to",), ()),
        "argmax": (1, (), ("axis", "keepdim")),
        "argmin": (1, (), ("axis", "keepdim")),
        "softmax": (1, (), ("axis",)),
        "log_softmax": (1, (), ("axis",)),
        "layer_norm": (3, (), ("eps",)),
        "rms_norm": (2, (), ("eps",)),
        "matmul": (2, (), ()),
        "reshape": (1, ("shape",), ()),
        "permute": (1, ("dims",), ()),
        "transpose": (1, ("dim0", "dim1"), ()),
        "expand": (1, ("shape",), ()),
        "squeeze": (1, (), ("axes",)),
        "unsqueeze": (1, ("axis",), ()),
        "slice": (1, ("axis",), ("start", "end", "step")),
        "concat": (None, ("axis",), ()),
        "pad": (1, ("pads",), ("value",)),
        "index_select": (2, ("axis",), ()),
        "gather": (2, ("axis",), ()),
        "full": (0, ("shape", "value"), ("dtype",)),
        "arange": (0, ("end",), ("start", "step", "dtype")),
    }[op]


def _check_call(op, args, attrs, where):
    arity, required, optional = _signature(op)
    if arity is None and not args:
        raise FgError(f"{where}takes at least 1 operand, got 0")
    if arity is not None and len(args) != arity:
        raise FgError(f"{where}takes {arity} operand{'s' if arity != 1 else ''}, got {len(args)}")
    for key in required:
        if key not in attrs:
            raise FgError(f"{where}missing attribute `{key}`")
    for key in attrs:
        if key not in required and key not in optional:
            raise FgError(f"{where}unknown attribute `{key}`")
    for key in ("to", "dtype"):
        v = attrs.get(key)
        if v is not None and not (isinstance(v, tuple) and v[0] == "dtype"):
            raise FgError(f"{where}`{key}` must be a dtype")
    for key in ("shape", "dims", "pads", "axes"):
        if key in attrs and not isinstance(attrs[key], list):
            raise FgError(f"{where}`{key}` must be a list of integers")
    for key in ("axis", "dim0", "dim1", "start", "end", "step") if op != "arange" else ():
        if key in attrs and (isinstance(attrs[key], bool) or not isinstance(attrs[key], int)):
            raise FgError(f"{where}`{key}` must be an integer")


def parse(src, file="<string>"):
    """Parses `.fg` source text into a `Graph` (with every node's dtype inferred)."""
    g = _Parser(file, src).file()
    _infer_dtypes(g)
    return g


def parse_file(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), str(path))


# ---------------------------------------------------------------------------------------
# dtype inference (ir/src/infer.rs, the dtype half) and literal typing (Scalar::dtype_beside)

TRANSCENDENTAL = {"exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid",
                  "gelu", "silu", "erf"}
UNARY = TRANSCENDENTAL | {"neg", "abs", "relu", "floor", "ceil", "sign", "not"}
COMPARISON = {"eq", "ne", "lt", "le", "gt", "ge"}
LOGICAL = {"and", "or"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"} | COMPARISON | LOGICAL
REDUCE = {"sum", "mean", "max", "min", "prod"}


def _dtype_beside(lit, peer):
    kind = lit[0]
    if kind == "float":
        return peer if peer is not None and category(peer) == "float" else NP_DTYPES["f32"]
    if kind == "int":
        return peer if peer is not None and peer != np.bool_ else NP_DTYPES["i64"]
    return peer if peer is not None else NP_DTYPES["bool"]


def _literal_array(lit, dt):
    kind, v = lit
    if kind == "float" and category(dt) != "float":
        raise FgError(f"float literal {v} cannot be a {dt}")
    if kind == "int" and category(dt) == "int":
        # Integer literals wrap into the dtype, like every integer result.
        return np.array(v, dtype=np.int64).astype(dt)[()]
    return np.array(v, dtype=np.float64 if kind == "float" else np.int64).astype(dt)[()]


def _infer_dtypes(g):
    for idx, n in enumerate(g.nodes):
        if n.kind != "op":
            continue
        op = n.op
        # Literals take the dtype of the first tensor they are combined with.
        positions = (0, 1) if op in BINARY else (1, 2) if op == "where" else ()
        peer = next((g.nodes[n.args[p]].dtype for p in positions
                     if p < len(n.args) and g.nodes[n.args[p]].kind != "literal"), None)
        for p, a in enumerate(n.args):
            lit = g.nodes[a]
            if lit.kind == "literal" and lit.dtype is None:
                lit.dtype = _dtype_beside(lit.value, peer if p in positions else None)
        ds = [g.nodes[a].dtype for a in n.args]
        n.dtype = _result_dtype(g, n, ds)
    for o in g.outputs:
        n = g.nodes[o]
        if n.kind == "literal" and n.dtype is None:
            n.dtype = _dtype_beside(n.value, None)


def _result_dtype(g, n, ds):
    op, a = n.op, n.attrs
    f32 = NP_DTYPES["f32"]
    if op in UNARY:
        if op == "not":
            return NP_DTYPES["bool"]
        if op in TRANSCENDENTAL and category(ds[0]) != "float":
            return f32
        return ds[0]
    if op in BINARY:
        common = promote(ds[0], ds[1])
        if op in COMPARISON or op in LOGICAL:
            return NP_DTYPES["bool"]
        if op == "div" and category(common) != "float":
            return f32
        return common
    if op == "where":
        return promote(ds[1], ds[2])
    if op == "cast":
        return np_dtype(a["to"][1])
    if op in REDUCE:
        if op in ("sum", "prod") and category(ds[0]) != "float":
            return NP_DTYPES["i64"]
        return ds[0]
    if op in ("argmax", "argmin"):
        return NP_DTYPES["i64"]
    if op in ("full", "arange"):
        default = "f32" if op == "full" else "i64"
        return np_dtype(a.get("dtype", ("dtype", default))[1])
    return ds[0]  # normalization, matmul, movement, indexing keep the (first) operand's dtype


# ---------------------------------------------------------------------------------------
# the ops (ir/src/interp/*.rs, ir/src/scalar_ops.rs)


def _axis(a, rank):
    if not -rank <= a < max(rank, 1):
        raise FgError(f"axis {a} out of range for rank {rank}")
    return a + rank if a < 0 else a


def _cast(x, dt):
    """Converts like Ferrite's `cast`: float to int truncates toward zero and saturates,
    NaN becomes 0; int to narrower int wraps; anything to bool is `!= 0`."""
    x = np.asarray(x)
    if x.dtype == dt:
        return x
    if category(x.dtype) == "float" and category(dt) == "int":
        info = np.iinfo(dt)
        v = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        v = np.asarray(np.clip(v, info.min, info.max))
        # info.max is not exact in f64 for i64 (it rounds up to 2^63): saturate explicitly.
        out = np.asarray(v.astype(dt))
        out[v >= 2.0 ** (info.bits - 1)] = info.max
        return out
    return x.astype(dt)


def _erfcc(x):
    """erf computed in float32 with NumPy calls only: the complementary error function
    of Numerical Recipes (`erfcc`, a Chebyshev fit with relative error below 1.2e-7 for
    every argument); measured in float32 against math.erf, the absolute error stays
    below 4e-7 on [-6, 6]. About twenty NumPy calls, where PyTorch eager has one kernel."""
    x = np.asarray(x)
    z = x.astype(np.float32) if x.dtype != np.float32 else x
    f = np.float32
    t = f(1) / (f(1) + f(0.5) * np.abs(z))
    p = f(0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        p = p * t + f(c)
    erfc = t * np.exp(p - z * z)
    r = np.where(z >= 0, f(1) - erfc, erfc - f(1))
    return r.astype(x.dtype) if x.dtype != np.float32 else r


# NumPy has no erf ufunc. SciPy's (one call, as PyTorch eager's one kernel) is used when
# SciPy is installed; otherwise the composed form above.
try:
    from scipy.special import erf as _scipy_erf

    def _erf(x):
        x = np.asarray(x)
        return _scipy_erf(x).astype(x.dtype, copy=False)
    ERF_IMPL = "scipy.special.erf"
except ImportError:  # pragma: no cover - depends on the machine
    _erf = _erfcc
    ERF_IMPL = "NumPy-composed erfcc (no SciPy)"


def _float_unary(op, x):
    dt = x.dtype
    one = dt.type(1)
    if op == "neg":
        return np.negative(x)
    if op == "abs":
        return np.abs(x)
    if op == "exp":
        return np.exp(x)
    if op == "log":
        return np.log(x)
    if op == "sqrt":
        return np.sqrt(x)
    if op == "rsqrt":
        return np.reciprocal(np.sqrt(x))
    if op == "reciprocal":
        return np.reciprocal(x)
    if op == "sin":
        return np.sin(x)
    if op == "cos":
        return np.cos(x)
    if op == "tanh":
        return np.tanh(x)
    if op == "sigmoid":
        return one / (one + np.exp(-x))
    if op == "relu":
        return np.maximum(x, dt.type(0))  # NaN propagates, as in PyTorch
    if op == "silu":
        return x / (one + np.exp(-x))
    if op == "erf":
        return _erf(x)
    if op == "floor":
        return np.floor(x)
    if op == "ceil":
        return np.ceil(x)
    if op == "sign":
        return np.sign(x)  # 0 for +-0, NaN for NaN
    raise FgError(f"unary op `{op}` is not implemented")


def _gelu(x, approximate):
    dt = x.dtype
    half = dt.type(0.5)
    if approximate == "tanh":
        inner = dt.type(math.sqrt(2.0 / math.pi)) * (x + dt.type(0.044715) * x * x * x)
        return half * x * (dt.type(1) + np.tanh(inner))
    return half * x * (dt.type(1) + _erf(x * dt.type(1.0 / math.sqrt(2.0))))


def _truth(x):
    x = np.asarray(x)
    return x if x.dtype == np.bool_ else x != 0


def make_unary(op, attrs, out_dt):
    if op == "not":
        return lambda x: np.logical_not(_truth(x))
    if op == "gelu":
        approx = attrs.get("approximate", "none")
        if approx not in ("none", "tanh"):
            raise FgError(f'gelu: approximate must be "none" or "tanh", not {approx!r}')

        def gelu(x):
            return _gelu(_cast(x, out_dt), approx)
        return gelu
    if category(out_dt) == "float":
        def f(x):
            x = np.asarray(x)
            if x.dtype != out_dt:
                x = _cast(x, out_dt)
            return _float_unary(op, x)
        return f
    if out_dt == np.bool_:
        if op in ("floor", "ceil"):
            return lambda x: x
        raise FgError(f"{op} is not defined for bool tensors")
    # integers: wrapping arithmetic
    int_ops = {
        "neg": np.negative, "abs": np.abs, "sign": np.sign,
        "relu": lambda x: np.maximum(x, out_dt.type(0)),
        "floor": lambda x: x, "ceil": lambda x: x,
    }
    if op not in int_ops:
        raise FgError(f"{op} has no integer form")
    return int_ops[op]


def _int_pow(x, y):
    if np.any(y < 0):
        raise FgError("integers to negative integer powers are not allowed")
    return np.power(x, y)


_ARITH = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,  # both propagate NaN, as in PyTorch
}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def make_binary(op, dts, out_dt):
    common = promote(dts[0], dts[1])
    if op in LOGICAL:
        f = np.logical_and if op == "and" else np.logical_or
        return lambda x, y: f(_truth(x), _truth(y))
    compute = common if op in COMPARISON else out_dt
    # Operands of another dtype are converted first (NumPy's own promotion differs from
    # PyTorch's: int64 with float32 is float64 in NumPy, float32 in PyTorch).
    cx, cy = dts[0] != compute, dts[1] != compute
    if op in COMPARISON:
        f = _CMP[op]
    elif compute == np.bool_:
        if op not in ("maximum", "minimum", "mul"):
            raise FgError(f"{op} is not defined for bool tensors")
        f = np.logical_or if op == "maximum" else np.logical_and
    elif op == "pow":
        f = np.power if category(compute) == "float" else _int_pow
    else:
        f = _ARITH[op]
    if not (cx or cy):
        return f
    return lambda x, y: f(_cast(x, compute) if cx else x, _cast(y, compute) if cy else y)


def make_where(dts, out_dt):
    ca, cb = dts[1] != out_dt, dts[2] != out_dt

    def where(c, a, b):
        return np.where(c, _cast(a, out_dt) if ca else a, _cast(b, out_dt) if cb else b)
    return where


def _axes(attrs, rank, key="axes"):
    axes = attrs.get(key)
    if axes is None:
        return tuple(range(rank))
    return tuple(sorted({_axis(a, rank) for a in axes}))


def make_reduce(op, attrs, in_dt, out_dt):
    keep = bool(attrs.get("keepdim", False))
    f = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}[op]
    wide = op in ("sum", "prod") and out_dt != in_dt  # integers and bools accumulate in i64

    def reduce(x):
        axes = _axes(attrs, x.ndim)
        if wide:
            return np.asarray(f(x, axis=axes, keepdims=keep, dtype=out_dt))
        return np.asarray(f(x, axis=axes, keepdims=keep))
    return reduce


def make_arg_reduce(op, attrs):
    keep = bool(attrs.get("keepdim", False))
    f = np.argmax if op == "argmax" else np.argmin  # NaN counts as the extremum, first wins

    def arg(x):
        axis = attrs.get("axis")
        if axis is None:
            r = np.asarray(f(x), dtype=np.int64)
            return r.reshape((1,) * x.ndim) if keep else r
        if x.ndim == 0:
            return np.asarray(0, dtype=np.int64)
        return np.asarray(f(x, axis=_axis(axis, x.ndim), keepdims=keep), dtype=np.int64)
    return arg


def make_softmax(attrs, log):
    axis = attrs.get("axis", -1)

    def softmax(x):
        a = _axis(axis, x.ndim)
        # Stable form: subtract the (NaN-propagating) maximum first, as the interpreter.
        shifted = x - np.max(x, axis=a, keepdims=True)
        e = np.exp(shifted)
        s = np.sum(e, axis=a, keepdims=True)
        if log:
            return shifted - np.log(s)
        return e / s
    return softmax


def make_layer_norm(attrs, rms):
    eps = float(attrs.get("eps", 1e-6 if rms else 1e-5))

    def layer_norm(x, w, b):
        m = np.mean(x, axis=-1, keepdims=True)
        c = x - m
        var = np.mean(c * c, axis=-1, keepdims=True)
        return c / np.sqrt(var + x.dtype.type(eps)) * w + b

    def rms_norm(x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + x.dtype.type(eps)) * w
    return rms_norm if rms else layer_norm


def _expand_shape(from_shape, shape):
    off = len(shape) - len(from_shape)
    if off < 0:
        raise FgError("expand: the target has fewer axes than the input")
    return tuple(from_shape[i - off] if (d == -1 and i >= off) else d for i, d in enumerate(shape))


def make_movement(op, a):
    if op == "reshape":
        shape = tuple(a["shape"])
        return lambda x: np.reshape(x, shape)
    if op == "permute":
        dims = a["dims"]
        return lambda x: np.transpose(x, [_axis(d, x.ndim) for d in dims])
    if op == "transpose":
        return lambda x: np.swapaxes(x, _axis(a["dim0"], x.ndim), _axis(a["dim1"], x.ndim))
    if op == "expand":
        return lambda x: np.broadcast_to(x, _expand_shape(x.shape, a["shape"]))
    if op == "squeeze":
        axes = a.get("axes")

        def squeeze(x):
            if axes is None:
                return np.reshape(x, tuple(d for d in x.shape if d != 1))
            return np.squeeze(x, axis=tuple(_axis(i, x.ndim) for i in axes))
        return squeeze
    if op == "unsqueeze":
        return lambda x: np.expand_dims(x, _axis(a["axis"], x.ndim + 1))
    if op == "slice":
        start, end, step = a.get("start", 0), a.get("end"), a.get("step", 1)
        if step < 1:
            raise FgError("slice: step must be at least 1")

        def slice_(x):
            idx = [slice(None)] * x.ndim
            idx[_axis(a["axis"], x.ndim)] = slice(start, end, step)
            return x[tuple(idx)]
        return slice_
    if op == "concat":
        return lambda *xs: np.concatenate(xs, axis=_axis(a["axis"], xs[0].ndim))
    if op == "pad":
        pads, value = a["pads"], a.get("value", 0.0)

        def pad(x):
            if len(pads) != 2 * x.ndim:
                raise FgError("pad: pads needs 2 amounts per axis")
            # Negative amounts crop, then positive ones pad with `value`.
            crop = tuple(slice(max(-pads[2 * i], 0), x.shape[i] - max(-pads[2 * i + 1], 0))
                         for i in range(x.ndim))
            x = x[crop]
            widths = [(max(pads[2 * i], 0), max(pads[2 * i + 1], 0)) for i in range(x.ndim)]
            fill = _cast(np.asarray(value, dtype=np.float64), x.dtype)
            return np.pad(x, widths, mode="constant", constant_values=fill)
        return pad
    raise FgError(f"movement op `{op}` is not implemented")


def _check_index(idx, n, op):
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise FgError(f"{op}: index out of range [0, {n})")


def make_indexing(op, a):
    if op == "index_select":
        def index_select(x, idx):
            ax = _axis(a["axis"], x.ndim)
            _check_index(idx, x.shape[ax], op)
            return np.take(x, idx, axis=ax)
        return index_select

    def gather(x, idx):  # take_along_dim: all axes but `axis` broadcast
        ax = _axis(a["axis"], x.ndim)
        _check_index(idx, x.shape[ax], op)
        return np.take_along_axis(x, idx, axis=ax)
    return gather


def make_creation(op, a, out_dt):
    if op == "full":
        shape, value = tuple(a["shape"]), float(a["value"])
        fill = _cast(np.asarray(value, dtype=np.float64), out_dt)
        return lambda: np.full(shape, fill, dtype=out_dt)
    start, end, step = float(a.get("start", 0.0)), float(a["end"]), float(a.get("step", 1.0))
    n = max(math.ceil((end - start) / step), 0)
    if category(out_dt) == "int":
        # Integer arange truncates start and step first and computes start + i * step in
        # i64, as PyTorch's CPU kernel does.
        s, st = int(start), int(step)
        return lambda: (s + np.arange(n, dtype=np.int64) * st).astype(out_dt)
    return lambda: (start + np.arange(n, dtype=np.float64) * step).astype(out_dt)


OPS = UNARY | BINARY | REDUCE | {
    "where", "cast", "argmax", "argmin", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "matmul", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "slice",
    "concat", "pad", "index_select", "gather", "full", "arange"}
IMPLEMENTED_OPS = frozenset(OPS)


def make_op(node, dts):
    """The NumPy function that computes `node` from its operands' arrays."""
    op, a, out = node.op, node.attrs, node.dtype
    if op in UNARY:
        return make_unary(op, a, out)
    if op in BINARY:
        return make_binary(op, dts, out)
    if op == "where":
        return make_where(dts, out)
    if op == "cast":
        return lambda x: _cast(x, out)
    if op in REDUCE:
        return make_reduce(op, a, dts[0], out)
    if op in ("argmax", "argmin"):
        return make_arg_reduce(op, a)
    if op in ("softmax", "log_softmax"):
        return make_softmax(a, op == "log_softmax")
    if op in ("layer_norm", "rms_norm"):
        return make_layer_norm(a, op == "rms_norm")
    if op == "matmul":
        return np.matmul
    if op in ("index_select", "gather"):
        return make_indexing(op, a)
    if op in ("full", "arange"):
        return make_creation(op, a, out)
    return make_movement(op, a)


# ---------------------------------------------------------------------------------------
# the evaluator


class Program:
    """A graph ready to evaluate eagerly: one NumPy call (or a few) per graph op, every
    run, in definition order; an intermediate is dropped after its last use.

    Literals are made once (they are constants of the program, like Python scalars in a
    PyTorch model); everything else, `arange` and `full` included, is computed each run.
    """

    def __init__(self, graph):
        self.graph = graph
        g = graph
        n = len(g.nodes)
        self.consts = {}
        steps = []
        last_use = [-1] * n
        for i, node in enumerate(g.nodes):
            for a in node.args:
                last_use[a] = i
        for o in g.outputs:
            last_use[o] = n
        for i, node in enumerate(g.nodes):
            if node.kind == "literal":
                self.consts[i] = _literal_array(node.value, node.dtype)
            elif node.kind == "op":
                dts = [g.nodes[a].dtype for a in node.args]
                try:
                    f = make_op(node, dts)
                except FgError as e:
                    raise FgError(f"{g.file}: `{node.name or node.op}` ({node.op}): {e}") from None
                # Operands whose last use is this node are freed after it runs.
                free = tuple(a for a in set(node.args) if last_use[a] == i and g.nodes[a].kind == "op")
                steps.append((i, f, tuple(node.args), free))
        self.steps = steps
        self.n = n

    def _env(self, inputs):
        g = self.graph
        if len(inputs) != len(g.params):
            raise FgError(f"graph `{g.name}` takes {len(g.params)} inputs, got {len(inputs)}")
        env = [None] * self.n
        for k, (p, x) in enumerate(zip(g.params, inputs)):
            node = g.nodes[p]
            x = np.asarray(x)
            if x.dtype != node.dtype or tuple(x.shape) != tuple(node.shape):
                raise FgError(f"input {k} (`{node.name}`) is {x.dtype}{list(x.shape)}, "
                              f"the parameter is {node.dtype}{list(node.shape)}")
            env[p] = x
        for i, c in self.consts.items():
            env[i] = c
        return env

    def run(self, inputs):
        """Evaluates the graph; returns one array per returned value."""
        env = self._env(inputs)
        for i, f, args, free in self.steps:
            env[i] = f(*[env[a] for a in args])
            for a in free:
                env[a] = None
        return [np.asarray(env[o]) for o in self.graph.outputs]

    def run_checked(self, inputs, visit=None):
        """Like `run`, but checks every result's dtype against the inferred one, keeps
        every intermediate, and calls `visit(node, array)` on each op's result."""
        env = self._env(inputs)
        for i, f, args, _ in self.steps:
            node = self.graph.nodes[i]
            try:
                r = np.asarray(f(*[env[a] for a in args]))
            except FgError as e:
                raise FgError(f"{self.graph.file}: `{node.name or node.op}` ({node.op}): {e}") from None
            if r.dtype != node.dtype:
                raise FgError(f"{self.graph.file}: `{node.name or node.op}` ({node.op}) computed "
                              f"{r.dtype}, expected {node.dtype} (an evaluator bug)")
            env[i] = r
            if visit is not None:
                visit(node, r)
        return [np.asarray(env[o]) for o in self.graph.outputs]


# ---------------------------------------------------------------------------------------
# Ferrite's random inputs (ir/src/tensor.rs `Tensor::random`, `SplitMix64`)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix_bits(seed, n):
    """The first `n` outputs of SplitMix64 seeded with `seed`, as uint64 (vectorized:
    the k-th state is seed + k * golden, wrapping)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed % (1 << 64)) + np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def splitmix_uniform(seed, n):
    """`next_f64() * 2 - 1` for n draws: uniform in [-1, 1) as f64."""
    bits = splitmix_bits(seed, n)
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 2.0 - 1.0


def ferrite_random_inputs(graph, seed):
    """The inputs `ferrite run --seed S` and `ferrite profile --seed S` make: parameter i
    is `Tensor::random(type, S + i)` (floats uniform in [-1, 1) rounded once to the dtype,
    integers in [0, 10), bools fair)."""
    out = []
    for i, (name, dt, shape) in enumerate(graph.param_types()):
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        s = (seed + i) % (1 << 64)
        if category(dt) == "float":
            v = splitmix_uniform(s, n).astype(dt)
        else:
            m = np.uint64(2 if dt == np.bool_ else 10)
            v = (splitmix_bits(s, n) % m).astype(np.int64).astype(dt)
        out.append(v.reshape(shape))
    return out

//! The tile language: parse/print round trips, and located errors of the parser
//! and the checker.

use ferrite_accel::tile::{
    self, BinaryOp, Builtin, Expr, ExprKind, IndexItem, Param, ParamType, Span, Stmt, StmtKind,
    TileKernel, UnaryOp,
};
use ferrite_ir::{DType, SplitMix64};

const EXAMPLES: [&str; 4] = [
    "vector_add",
    "softmax_rows",
    "layer_norm",
    "matmul_bias_relu",
];

#[test]
fn examples_round_trip_through_the_printer() {
    for name in EXAMPLES {
        let (_, src) = ferrite_testkit::tile_example_source(name);
        let k = tile::parse(name, &src).unwrap_or_else(|d| panic!("{d}"));
        let text = tile::print(&k);
        let again = tile::parse("printed", &text).unwrap_or_else(|d| panic!("{d}\n{text}"));
        assert_eq!(again, k, "{name}: parse(print(k)) != k\n{text}");
        assert_eq!(tile::print(&again), text, "{name}: printing is not stable");
        tile::check(&again).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn every_dtype_parses_prints_and_checks() {
    for d in tile::DTYPES {
        let src = format!(
            "kernel k(x: *{d}, y: *{d}, s: {d}) {{\n  o = arange(0, 4)\n  v = load(x + o)\n  \
             w = cast(cast(v, f64), {d})\n  store(y + o, where(o < 2, w, s))\n}}\n"
        );
        let k = tile::parse("d.tile", &src).unwrap_or_else(|e| panic!("{d}: {e}"));
        assert_eq!(tile::print(&k), src, "{d}");
        tile::parse_and_check("d.tile", &src).unwrap_or_else(|e| panic!("{d}: {e}"));
        // A dtype's name is reserved: no variable can take it.
        let e = tile::parse("r.tile", &format!("kernel k() {{\n  {d} = 1\n}}\n")).unwrap_err();
        assert_eq!(
            e.message,
            format!("`{d}` is a dtype and cannot name a variable")
        );
    }
    // Constants next to narrow integers must fit them; a 64-bit integer takes any.
    let src = "kernel k(x: *u8, y: *u64) {\n  v = load(x + arange(0, 4)) + 300\n}\n";
    let e = tile::parse_and_check("n.tile", src).unwrap_err();
    assert_eq!(
        e.message,
        "the constant 300 does not fit in u8; cast the other operand to i64"
    );
    let src = "kernel k(x: *u8, y: *u64) {\n  v = load(y + arange(0, 4)) + -1\n}\n";
    tile::parse_and_check("n.tile", src).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_printer_writes_canonical_text() {
    let src = "kernel k(x:*f32 , n:i32){
    const B=4
  o=(program_id(0)*B)+arange(0,B)
  m=(o<n)&(o>=0)
  v=load(x+o,m,other=-1.5)
  for i in range(3) { v += 1.0 }
  store(x+o,-(v*2.0)[:,None][:, 0:0] if false else v,m)
}";
    // Slices are not part of the language: a located error.
    let e = tile::parse("k.tile", src).unwrap_err();
    assert_eq!((e.line, e.col), (7, 33), "{e}");
    let src = src.replace("[:, 0:0] if false else v", "");
    let src = src.replace("{ v += 1.0 }", "{\n v += 1.0\n }");
    let k = tile::parse("k.tile", &src).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(
        tile::print(&k),
        "kernel k(x: *f32, n: i32) {
  const B = 4
  o = program_id(0) * B + arange(0, B)
  m = o < n & o >= 0
  v = load(x + o, m, other=-1.5)
  for i in range(0, 3) {
    v = v + 1.0
  }
  store(x + o, -(v * 2.0)[:, None], m)
}
"
    );
}

/// A random, syntactically valid kernel: names and calls from small pools, every
/// operator, nesting a few levels deep, literals of every kind.
struct Gen(SplitMix64);

impl Gen {
    fn pick(&mut self, n: usize) -> usize {
        (self.0.next() % n as u64) as usize
    }

    fn name(&mut self) -> String {
        ["x", "offs", "acc", "m", "a_ptr", "t1"][self.pick(6)].to_string()
    }

    fn expr(&mut self, depth: usize) -> Expr {
        let leaf = depth == 0 || self.pick(3) == 0;
        let kind = if leaf {
            match self.pick(7) {
                0 => ExprKind::Int(self.0.next() as i64 >> self.pick(64)),
                1 => ExprKind::Float(f64::from_bits(self.0.next())),
                2 => ExprKind::Float(
                    [
                        0.5,
                        -0.0,
                        f64::INFINITY,
                        -f64::INFINITY,
                        f64::NAN,
                        1e-7,
                        3.0,
                    ][self.pick(7)],
                ),
                3 => ExprKind::Bool(self.pick(2) == 0),
                4 => ExprKind::DType(tile::DTYPES[self.pick(tile::DTYPES.len())]),
                5 => ExprKind::Int(i64::MIN),
                _ => ExprKind::Name(self.name()),
            }
        } else {
            match self.pick(5) {
                0 => ExprKind::Unary(
                    if self.pick(2) == 0 {
                        UnaryOp::Neg
                    } else {
                        UnaryOp::Not
                    },
                    Box::new(self.expr(depth - 1)),
                ),
                1 => {
                    let ops = [
                        BinaryOp::Or,
                        BinaryOp::Xor,
                        BinaryOp::And,
                        BinaryOp::Shl,
                        BinaryOp::Shr,
                        BinaryOp::Eq,
                        BinaryOp::Ne,
                        BinaryOp::Lt,
                        BinaryOp::Le,
                        BinaryOp::Gt,
                        BinaryOp::Ge,
                        BinaryOp::Add,
                        BinaryOp::Sub,
                        BinaryOp::Mul,
                        BinaryOp::Div,
                        BinaryOp::Rem,
                    ];
                    ExprKind::Binary(
                        ops[self.pick(ops.len())],
                        Box::new(self.expr(depth - 1)),
                        Box::new(self.expr(depth - 1)),
                    )
                }
                2 => {
                    let n = 1 + self.pick(3);
                    let items = (0..n)
                        .map(|_| {
                            if self.pick(2) == 0 {
                                IndexItem::Full
                            } else {
                                IndexItem::NewAxis
                            }
                        })
                        .collect();
                    ExprKind::Index(Box::new(self.expr(depth - 1)), items)
                }
                3 => {
                    let n = self.pick(3);
                    ExprKind::Tuple((0..n).map(|_| self.expr(depth - 1)).collect())
                }
                _ => {
                    let func = Builtin::ALL[self.pick(Builtin::ALL.len())];
                    let args = (0..self.pick(3)).map(|_| self.expr(depth - 1)).collect();
                    let kwargs = (0..self.pick(2))
                        .map(|_| {
                            (
                                ["mask", "axis", "other"][self.pick(3)].to_string(),
                                self.expr(depth - 1),
                            )
                        })
                        .collect();
                    ExprKind::Call { func, args, kwargs }
                }
            }
        };
        Expr::new(kind)
    }

    fn stmts(&mut self, depth: usize) -> Vec<Stmt> {
        (0..1 + self.pick(4))
            .map(|_| {
                let kind = match self.pick(5) {
                    0 => StmtKind::Const {
                        name: self.name().to_uppercase(),
                        value: self.expr(3),
                    },
                    1 if depth > 0 => StmtKind::For {
                        var: "k".into(),
                        start: self.expr(1),
                        end: self.expr(2),
                        step: (self.pick(2) == 0).then(|| self.expr(1)),
                        body: self.stmts(depth - 1),
                    },
                    2 => StmtKind::Expr(Expr::new(ExprKind::Call {
                        func: Builtin::Store,
                        args: vec![self.expr(2), self.expr(3)],
                        kwargs: Vec::new(),
                    })),
                    _ => StmtKind::Assign {
                        name: self.name(),
                        value: self.expr(4),
                    },
                };
                Stmt {
                    kind,
                    span: Span::default(),
                }
            })
            .collect()
    }

    fn kernel(&mut self) -> TileKernel {
        let params = (0..self.pick(4))
            .map(|i| Param {
                name: format!("p{i}"),
                ty: if self.pick(2) == 0 {
                    ParamType::Ptr(tile::DTYPES[self.pick(tile::DTYPES.len())])
                } else {
                    ParamType::Scalar(tile::DTYPES[self.pick(tile::DTYPES.len())])
                },
                span: Span::default(),
            })
            .collect();
        TileKernel {
            comments: Vec::new(),
            name: "random".into(),
            params,
            body: self.stmts(2),
            span: Span::default(),
        }
    }
}

#[test]
fn random_kernels_round_trip_exactly() {
    let mut g = Gen(SplitMix64(7));
    for case in 0..2000 {
        let k = g.kernel();
        let text = tile::print(&k);
        let back = tile::parse("random.tile", &text)
            .unwrap_or_else(|d| panic!("case {case}: printed text does not parse: {d}\n{text}"));
        assert_eq!(
            back,
            k,
            "case {case}\n{text}\nreprinted:\n{}",
            tile::print(&back)
        );
    }
}

/// Parses and checks `body` inside a kernel with a few parameters; the error as
/// `line:col: message` (line 1 is the kernel header).
fn error(body: &str) -> String {
    let src = format!("kernel k(x: *f32, h: *f16, n: i32, eps: f32) {{\n{body}\n}}\n");
    match tile::parse_and_check("e.tile", &src) {
        Ok(_) => panic!("no error for\n{src}"),
        Err(d) => {
            // The rendered diagnostic shows the line and a caret under the column.
            let text = d.to_string();
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 3, "{text}");
            assert_eq!(lines[2].trim_start().len(), 1, "{text}");
            assert_eq!(lines[2].chars().count(), d.col + 2, "{text}");
            format!("{}:{}: {}", d.line, d.col, d.message)
        }
    }
}

#[test]
fn parse_errors_are_located() {
    let cases: &[(&str, &str)] = &[
        ("  y = lod(x)", "2:7: unknown function `lod`; did you mean `load`?"),
        ("  y = load(x", "3:1: expected `)` or `,`, found `}`"),
        ("  const for = 1", "2:9: `for` is a keyword and cannot name a constant"),
        ("  m = 0 < n < 5", "2:13: comparisons do not chain; write `(a < b) & (b < c)`"),
        ("  v = x[0]", "2:9: expected `:` or `None` (tiles are indexed only to add axes, as in `x[:, None]`), found `0`"),
        ("  x + 1", "2:3: an expression on its own does nothing: bind it (`x = ...`) or call `store`/`dma_wait`"),
        ("  y = x.to(f16)", "2:8: unexpected `.`: a number starts with a digit (write `0.5`), and the language has no methods (write `cast(x, f16)`, not `x.to(f16)`)"),
        ("  r = range(4)", "2:7: `range` is only allowed in a `for` loop header"),
        ("  v = load(mask=n, x)", "2:20: positional argument after a keyword argument"),
        ("  v = 1 @ 2", "2:9: unexpected character `@`"),
        ("  exp = 3", "2:3: `exp` is a builtin function and cannot name a variable"),
        ("  v = 12abc", "2:7: bad number `12abc`"),
        ("  for i in range(1, 2, 3, 4) {\n  }", "2:27: range takes at most 3 arguments (start, end, step)"),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(body, want)| {
            let got = error(body);
            (got != *want).then(|| format!("for {body:?}\n  got  {got}\n  want {want}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let two = "kernel a() {\n}\nkernel b() {\n}\n";
    let e = tile::parse("two.tile", two).unwrap_err();
    assert_eq!(
        e.to_string(),
        "two.tile:3:1: error: expected the end of the file (one kernel per file), found `kernel`\n  kernel b() {\n  ^"
    );
    let e = tile::parse("p.tile", "kernel k(x: *f8) {\n}\n").unwrap_err();
    assert_eq!(
        e.message,
        "expected a dtype (f32, f16, bf16, i32, i64, bool, f64, i8, u8, i16, u16, u32, u64), \
         found `f8`"
    );
    let e = tile::parse("p.tile", "kernel k() {\n  x = 1\n").unwrap_err();
    assert_eq!(
        (e.line, e.col, e.message.as_str()),
        (2, 8, "expected `}`, found the end of the file")
    );
}

#[test]
fn type_errors_are_located() {
    let cases: &[(&str, &str)] = &[
        ("  y = load(x + ofs)", "2:16: `ofs` is not defined"),
        ("  offs = arange(0, 4)\n  y = load(x + ofs)", "3:16: `ofs` is not defined; did you mean `offs`?"),
        ("  z = arange(0, 4) + arange(0, 8)", "2:7: shapes [4] and [8] do not broadcast (axis -1 is 4 vs 8)"),
        (
            "  a = zeros((4, 8))\n  b = zeros((4, 8))\n  c = dot(a, b)",
            "4:7: dot: inner extents differ: f32[4, 8] @ f32[4, 8] (8 vs 4)",
        ),
        (
            "  a = zeros((4, 8), f16)\n  b = zeros((8, 4))\n  c = dot(a, b)",
            "4:7: dot needs two numeric tiles of one dtype, got f16[4, 8] and f32[8, 4]",
        ),
        (
            "  o = arange(0, 4)\n  v = load(x + o, o[:, None] < n)",
            "3:19: load: mask bool[4, 1] does not fit pointer tile *f32[4] (its shape must broadcast to [4])",
        ),
        ("  o = arange(0, 4)\n  v = load(x + o, o)", "3:19: load mask must be a bool tile, got i32[4]"),
        ("  e = exp(arange(0, 4))", "2:11: exp needs a float tile, got i32[4] (cast it first)"),
        ("  v = load(x)\n  exp(v)", "3:3: the result of `exp` is unused; bind it to a name"),
        (
            "  b = local_alloc((8,))\n  t = dma_async(b, x + arange(0, 4))",
            "3:20: dma_async copies element for element: the pointer tile *f32[4] must match the local buffer f32[8]",
        ),
        ("  const N = n * 2", "2:13: `const N` needs a value known before launch (literals and other constants), got `n * 2`"),
        ("  const N = 4\n  N = 5", "3:3: cannot assign to constant `N`"),
        (
            "  acc = zeros((4,))\n  for i in range(0, n) {\n    acc = cast(acc, f16)\n  }",
            "4:11: `acc` is carried around the loop, so it must keep its type: it was f32[4] before the loop, and this is f16[4]",
        ),
        ("  v = load(x, other=0.0)", "2:21: load: `other` fills masked-off lanes, so it needs a `mask`"),
        ("  p = program_id(3)", "2:18: the grid has axes 0, 1 and 2, not 3"),
        ("  o = arange(0, n)", "2:17: arange's end must be a constant integer, got i32 scalar"),
        ("  t = zeros((2048, 2048))", "2:13: tile [2048, 2048] has 4194304 elements, more than the limit of 1048576"),
        ("  v = load(x, msk=n < 3)", "2:19: `load` has no argument `msk` (it takes ptr, mask, other); did you mean `mask`?"),
        ("  for i in range(0, n) {\n    t = i\n  }\n  u = t", "5:7: `t` is not defined here: it was bound inside a loop body, and names bound there end with the loop (bind it before the loop to carry it)"),
        ("  v = load(h + arange(0, 4))\n  store(x, v)", "3:12: store: value f16[4] does not fit pointer *f32 (its shape must broadcast to [])"),
        ("  p = x * 2", "2:7: pointers support only `ptr + offsets`, `offsets + ptr` and `ptr - offsets`, not pointer *f32 * the constant 2"),
        ("  m = arange(0, 4) < 3000000000", "2:7: the constant 3000000000 does not fit in i32; cast the other operand to i64"),
        ("  t = dma_async(zeros((4,)), x)", "2:17: dma_async copies into a local buffer (local_alloc), got f32[4]"),
        ("  b = local_alloc((4,))\n  dma_async(b, x + arange(0, 4))", "3:3: keep the token of dma_async (`t = dma_async(..)`) so you can `dma_wait(t)` before reading the buffer"),
        ("  s = sum(zeros((4, 4)), axis=2)", "2:31: axis 2 is out of range for a tensor of rank 2 (expected -2..1)"),
        ("  v = load(x + 0.5)", "2:12: a pointer offset must be an integer tile, got f32 scalar"),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(body, want)| {
            let got = error(body);
            (got != *want).then(|| format!("for {body:?}\n  got  {got}\n  want {want}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn checked_constants_fold_and_promote_like_pytorch() {
    // A scalar kernel computing constants and promotions, run on the simulator.
    use ferrite_accel::sim::{self, KernelArg, Machine};
    use ferrite_ir::Tensor;
    let src = "kernel k(out: *f32, ints: *i32, h: *f16) {
  const A = 7 / 2
  const B = -7 % 3
  const C = 1 + 2.5
  store(out, A + B + C)
  store(ints + arange(0, 3), arange(0, 3) * A - 1)
  store(h, cast(1.0, f16) + 0.0001)
}
";
    let k = tile::parse_and_check("k.tile", src).unwrap_or_else(|d| panic!("{d}"));
    let t = |d: DType, n: usize| Tensor::zeros(&ferrite_ir::TensorType::new(d, vec![n]).unwrap());
    let mut args = [
        KernelArg::Buffer(t(DType::F32, 1)),
        KernelArg::Buffer(t(DType::I32, 3)),
        KernelArg::Buffer(t(DType::F16, 1)),
    ];
    sim::run(&Machine::mtia2i(), &k, [1, 1, 1], &mut args).unwrap();
    let get = |i: usize| match &args[i] {
        KernelArg::Buffer(t) => t.to_f64(),
        _ => unreachable!(),
    };
    // 7 / 2 truncates to 3, -7 % 3 is -1 (C remainder), 1 + 2.5 is 3.5.
    assert_eq!(get(0), vec![5.5]);
    assert_eq!(get(1), vec![-1.0, 2.0, 5.0]);
    // f16 + a float constant stays f16: 1 + 0.0001 rounds back to 1.
    assert_eq!(get(2), vec![1.0]);
}

/// Reliability finding F07: a 150,000-term `n + n + ...` chain overflowed the stack while
/// the rejected tree was dropped; the parser now refuses chains deeper than the checker
/// accepts, with a located error.
#[test]
fn a_huge_operator_chain_is_a_located_error() {
    let terms = vec!["n"; 150_000].join(" + ");
    let src = format!("kernel k(out: *i32, n: i32) {{\n  v = {terms}\n  store(out, v)\n}}\n");
    let err = tile::parse_and_check("chain.tile", &src)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("chain.tile:2:") && err.contains("nests deeper than 256"),
        "{}",
        &err[..err.len().min(300)]
    );
    // A chain within the limit still checks.
    let terms = vec!["n"; 200].join(" + ");
    let src = format!("kernel k(out: *i32, n: i32) {{\n  v = {terms}\n  store(out, v)\n}}\n");
    tile::parse_and_check("chain.tile", &src).unwrap();
}

/// `^`, `<<`, `>>` and `!` of integers on the simulator, against Rust's operators on the
/// native types with the shift rule of the graph IR written out (outside `[0, bits)`: 0
/// to the left, the sign fill to the right), for a signed and an unsigned dtype; their
/// precedence; and their type errors.
#[test]
fn bitwise_operators_compute_as_the_graph_ir_defines_them() {
    use ferrite_accel::sim::{self, KernelArg, Machine};
    use ferrite_ir::{Tensor, TensorType};
    fn run(d: DType, xs: &[i128], ss: &[i128]) -> Vec<Vec<i128>> {
        let n = xs.len();
        let src = format!(
            "kernel k(x: *{d}, s: *{d}, o: *{d}) {{
  offs = arange(0, {n})
  a = load(x + offs)
  b = load(s + offs)
  store(o + offs, a ^ b)
  store(o + {n} + offs, a << b)
  store(o + {} + offs, a >> b)
  store(o + {} + offs, !a)
  store(o + {} + offs, a | b ^ a & b)
}}
",
            2 * n,
            3 * n,
            4 * n
        );
        let k = tile::parse_and_check("k.tile", &src).unwrap_or_else(|e| panic!("{e}"));
        let t = |v: &[i128]| Tensor::from_i128(&TensorType::new(d, vec![v.len()]).unwrap(), v);
        let mut args = [
            KernelArg::Buffer(t(xs)),
            KernelArg::Buffer(t(ss)),
            KernelArg::Buffer(t(&vec![0; 5 * n])),
        ];
        sim::run(&Machine::mtia2i(), &k, [1, 1, 1], &mut args).unwrap();
        let KernelArg::Buffer(o) = &args[2] else {
            unreachable!()
        };
        o.to_i128().chunks(n).map(|c| c.to_vec()).collect()
    }
    macro_rules! check {
        ($t:ty, $d:expr) => {{
            let bits = <$t>::BITS as i128;
            let vals = [
                0,
                1,
                3,
                bits - 1,
                bits,
                bits + 1,
                <$t>::MAX as i128,
                <$t>::MIN as i128,
                (<$t>::MIN as i128).min(-1),
            ];
            let (mut xs, mut ss) = (Vec::new(), Vec::new());
            for &x in &vals {
                for &s in &vals {
                    xs.push(x);
                    ss.push(s);
                }
            }
            let got = run($d, &xs, &ss);
            let inside = |s: $t| (s as i128) >= 0 && (s as i128) < bits;
            let want = |f: &dyn Fn($t, $t) -> $t| -> Vec<i128> {
                xs.iter()
                    .zip(&ss)
                    .map(|(&a, &b)| f(a as $t, b as $t) as i128)
                    .collect()
            };
            assert_eq!(got[0], want(&|a, b| a ^ b), "^ of {}", $d);
            let shl = want(&|a, s| if inside(s) { a << s } else { 0 });
            assert_eq!(got[1], shl, "<< of {}", $d);
            let shr = want(&|a, s| {
                if inside(s) {
                    a >> s
                } else if (a as i128) < 0 {
                    !0
                } else {
                    0
                }
            });
            assert_eq!(got[2], shr, ">> of {}", $d);
            assert_eq!(got[3], want(&|a, _| !a), "! of {}", $d);
            assert_eq!(got[4], want(&|a, b| a | (b ^ (a & b))), "| ^ & of {}", $d);
        }};
    }
    check!(i8, DType::I8);
    check!(u64, DType::U64);
    check!(i32, DType::I32);
    // `<<` binds looser than `+`, tighter than comparisons; `^` between `|` and `&`.
    let k = tile::parse(
        "k.tile",
        "kernel k(n: i32) {\n  a = n << 1 + 2 < n | n ^ n & 1\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let printed = tile::print(&k);
    assert!(
        printed.contains("a = n << 1 + 2 < n | n ^ n & 1"),
        "{printed}"
    );
    let errors = [
        ("x = 1.5 ^ 2.5", "needs bool or integer operands"),
        ("x = cast(n, f32) << 1", "needs integer operands"),
        ("x = !cast(n, f32)", "needs a bool or integer tile"),
    ];
    for (body, want) in errors {
        let src = format!("kernel k(n: i32) {{\n  {body}\n  check(x == x)\n}}\n");
        let e = tile::parse_and_check("k.tile", &src)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.contains("k.tile:2:"), "{body}: {e}");
    }
}

//! Elementwise parity: every elementwise op of the op table (unary, binary, `where`,
//! `cast`, comparisons and logic), on every dtype it accepts, over a table of special
//! values (NaN, ±inf, ±0, subnormals, ±max, ±min-normal, ±1, ±0.5, integer extremes,
//! zero divisors), run through the reference interpreter, the CPU and the simulator
//! (fused, optimized: the paths a user gets) and compared with the interpreter:
//!
//! - integer and bool results bit for bit, and so are the results of exact ops
//!   (arithmetic, `sqrt`, rounding, `sign`, `relu`, `maximum`, casts, `where`);
//! - transcendental ops within a few ulp of the result dtype (or, for results near
//!   zero, within the dtype's epsilon in absolute terms), with NaN where the
//!   interpreter gives NaN, the same infinities, and the sign of a zero kept when the
//!   operands are themselves ±0 or ±inf;
//! - an op the interpreter rejects on the data (an integer to a negative power, an
//!   integer division by zero) is a run-time error, not an internal one, on every target.
//!
//! Every dtype and op runs on both backends.

use ferrite::{compile_ir, Options, Target};
use ferrite_ir::op::{AttrValue, OPS};
use ferrite_ir::{promote, BinaryOp, DType, Graph, Op, Tensor, TensorType, UnaryOp};

const DTYPES: [DType; 13] = DType::ALL;

/// The special values of a dtype, as f64 (exact in the dtype) or as i64.
enum Specials {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

fn specials(d: DType) -> Specials {
    let (max, min_normal, min_sub) = match d {
        DType::F32 => (
            f32::MAX as f64,
            f32::MIN_POSITIVE as f64,
            f32::from_bits(1) as f64,
        ),
        DType::F16 => (
            half::f16::MAX.to_f64(),
            half::f16::MIN_POSITIVE.to_f64(),
            half::f16::from_bits(1).to_f64(),
        ),
        DType::Bf16 => (
            half::bf16::MAX.to_f64(),
            half::bf16::MIN_POSITIVE.to_f64(),
            half::bf16::from_bits(1).to_f64(),
        ),
        DType::I32 => {
            return Specials::Int(vec![
                0,
                1,
                -1,
                2,
                -2,
                3,
                7,
                -7,
                31,
                32,
                33,
                i32::MAX as i64,
                i32::MIN as i64,
                i32::MAX as i64 - 1,
                i32::MIN as i64 + 1,
                (1 << 24) + 1,
                (1 << 24) + (1 << 16) + 1,
                -((1 << 24) + (1 << 16) + 1),
                65519,
                65520,
            ])
        }
        DType::I64 => {
            return Specials::Int(vec![
                0,
                1,
                -1,
                2,
                -2,
                3,
                7,
                -7,
                63,
                64,
                65,
                i64::MAX,
                i64::MIN,
                i64::MAX - 1,
                i64::MIN + 1,
                i32::MAX as i64,
                i32::MIN as i64,
                1 << 32,
                (1 << 53) + 1,
                (1 << 62) + (1 << 38) + 1,
                -((1 << 24) + (1 << 16) + 1),
            ])
        }
        DType::Bool => return Specials::Int(vec![0, 1]),
        DType::F64 => (f64::MAX, f64::MIN_POSITIVE, f64::from_bits(1)),
        // The narrow and unsigned integers: small values and the ends of the range;
        // u64's top half is written as the bits (negative i64s: -1 is u64::MAX).
        d => {
            let (lo, hi) = d.int_range().expect("an integer dtype");
            let hi = hi.min(i64::MAX as i128) as i64;
            let lo = lo as i64;
            // The width and its neighbours: shift amounts at and past the edge.
            let bits = 8 * d.size_bytes() as i64;
            let mut v = vec![0, 1, 2, 3, 7, hi, hi - 1, lo, bits - 1, bits, bits + 1];
            if lo < 0 {
                v.extend([-1, -2, -7, lo + 1]);
            }
            if d == DType::U64 {
                v.extend([-1, -2, i64::MIN, i64::MIN + 1, (1 << 53) + 1]);
            }
            return Specials::Int(v);
        }
    };
    Specials::Float(vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        min_sub,
        -min_sub,
        min_sub * 3.0,
        min_normal,
        -min_normal,
        max,
        -max,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        1.5,
        -2.5,
        10.0,
        -10.0,
        100.0,
        -100.0,
    ])
}

fn len(s: &Specials) -> usize {
    match s {
        Specials::Float(v) => v.len(),
        Specials::Int(v) => v.len(),
    }
}

/// A tensor of dtype `d` holding the specials at `index`.
fn tensor(d: DType, s: &Specials, index: &[usize]) -> Tensor {
    let ty = TensorType {
        dtype: d,
        shape: vec![index.len()],
    };
    match s {
        Specials::Float(v) => {
            Tensor::from_f64(&ty, &index.iter().map(|&i| v[i]).collect::<Vec<_>>())
        }
        Specials::Int(v) => Tensor::from_i64(&ty, &index.iter().map(|&i| v[i]).collect::<Vec<_>>()),
    }
}

/// The `.fg` text of special value `i` of `d` as a literal.
fn literal(d: DType, s: &Specials, i: usize) -> String {
    match s {
        Specials::Float(v) => {
            let x = v[i];
            if x.is_nan() {
                "nan".into()
            } else if x.is_infinite() {
                if x > 0.0 { "inf" } else { "-inf" }.into()
            } else if x == 0.0 && x.is_sign_negative() {
                "-0.0".into()
            } else {
                format!("{x:e}")
            }
        }
        Specials::Int(v) if d == DType::Bool => (v[i] != 0).to_string(),
        Specials::Int(v) => v[i].to_string(),
    }
}

/// How a result of an op is compared with the interpreter's.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Compare {
    /// Bit for bit (NaN equal to NaN).
    Exact,
    /// Within a few ulp (see the module docs).
    Approx,
}

fn unary_compare(u: UnaryOp) -> Compare {
    use UnaryOp::*;
    match u {
        Neg | Abs | Sqrt | Reciprocal | Relu | Floor | Ceil | Sign | Not | BitwiseNot => {
            Compare::Exact
        }
        _ => Compare::Approx,
    }
}

/// One graph to run: its text, its inputs and how to compare its outputs.
struct Case {
    name: String,
    src: String,
    inputs: Vec<Tensor>,
    compare: Compare,
    /// For each output, for each element, whether its operands were all ±0 or ±inf
    /// (so the sign of a zero result is kept even by an approximate op).
    special_operands: Vec<Vec<bool>>,
}

fn is_zero_or_inf(d: DType, s: &Specials, i: usize) -> bool {
    match s {
        Specials::Float(v) => v[i] == 0.0 || v[i].is_infinite(),
        Specials::Int(_) => d != DType::Bool,
    }
}

/// `op` on `x` (every special of `d`) as a one-output case.
fn unary_cases(name: &str, call: &str, compare: Compare, out: &mut Vec<Case>) {
    for d in DTYPES {
        let s = specials(d);
        let n = len(&s);
        let src = format!("graph g(x: {d}[{n}]) {{\n  y = {call}\n  return y\n}}\n");
        if ferrite_ir::parse("parity.fg", &src).is_err() {
            continue; // the op does not take this dtype
        }
        out.push(Case {
            name: format!("{name}({d})"),
            src,
            inputs: vec![tensor(d, &s, &(0..n).collect::<Vec<_>>())],
            compare,
            special_operands: vec![(0..n).map(|i| is_zero_or_inf(d, &s, i)).collect()],
        });
    }
}

/// Operand pairs of `dx` and `dy` for a binary op: the outer product of their
/// specials, without the pairs `keep` refuses.
fn pairs(sx: &Specials, sy: &Specials, keep: &dyn Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for i in 0..len(sx) {
        for j in 0..len(sy) {
            if keep(i, j) {
                v.push((i, j));
            }
        }
    }
    v
}

/// `op(x, y)` on every pair of specials, and with every special as a literal on
/// either side, as one graph per dtype pair.
fn binary_cases(
    op: &str,
    dx: DType,
    dy: DType,
    compare: Compare,
    keep: &dyn Fn(usize, usize) -> bool,
    out: &mut Vec<Case>,
) {
    let (sx, sy) = (specials(dx), specials(dy));
    let pv = pairs(&sx, &sy, keep);
    let n = pv.len();
    let (nx, ny) = (len(&sx), len(&sy));
    let mut body = format!("  z = {op}(x, y)\n");
    let mut outputs = vec!["z".to_string()];
    let mut special_operands = vec![pv
        .iter()
        .map(|&(i, j)| is_zero_or_inf(dx, &sx, i) && is_zero_or_inf(dy, &sy, j))
        .collect::<Vec<_>>()];
    // Literal right operands (of y's dtype) with every x, literal left operands with
    // every y.
    let mut literal_outputs = |body: &mut String, side: usize| {
        let (s_lit, d_lit, s_var, d_var, count) = if side == 1 {
            (&sy, dy, &sx, dx, ny)
        } else {
            (&sx, dx, &sy, dy, nx)
        };
        for k in 0..count {
            let keep_all = (0..len(s_var)).all(|v| if side == 1 { keep(v, k) } else { keep(k, v) });
            // `.fg` integer literals are at most i64: u64's top half has none.
            let unwritable = matches!(s_lit, Specials::Int(v) if d_lit == DType::U64 && v[k] < 0);
            if !keep_all || unwritable {
                continue;
            }
            let name = format!("l{side}_{k}");
            let lit = literal(d_lit, s_lit, k);
            let call = if side == 1 {
                format!("{op}(xa, {lit})")
            } else {
                format!("{op}({lit}, ya)")
            };
            body.push_str(&format!("  {name} = {call}\n"));
            outputs.push(name);
            special_operands.push(
                (0..len(s_var))
                    .map(|v| is_zero_or_inf(d_var, s_var, v) && is_zero_or_inf(d_lit, s_lit, k))
                    .collect(),
            );
        }
    };
    // A literal takes the tensor's dtype only when the kinds match (as PyTorch's
    // Python scalars do); keep literals to same-dtype cases so each is exact.
    if dx == dy {
        literal_outputs(&mut body, 1);
        literal_outputs(&mut body, 2);
    }
    let src = format!(
        "graph g(x: {dx}[{n}], y: {dy}[{n}], xa: {dx}[{nx}], ya: {dy}[{ny}]) {{\n{body}  return {}\n}}\n",
        outputs.join(", ")
    );
    if ferrite_ir::parse("parity.fg", &src).is_err() {
        return;
    }
    let xi: Vec<usize> = pv.iter().map(|p| p.0).collect();
    let yi: Vec<usize> = pv.iter().map(|p| p.1).collect();
    out.push(Case {
        name: format!("{op}({dx}, {dy})"),
        src,
        inputs: vec![
            tensor(dx, &sx, &xi),
            tensor(dy, &sy, &yi),
            tensor(dx, &sx, &(0..nx).collect::<Vec<_>>()),
            tensor(dy, &sy, &(0..ny).collect::<Vec<_>>()),
        ],
        compare,
        special_operands,
    });
}

/// Dtype pairs of binary ops: every dtype with itself, and mixed pairs that
/// promote (int to wider int, half to f32, int to float, bool to anything).
fn dtype_pairs() -> Vec<(DType, DType)> {
    let mut v: Vec<(DType, DType)> = DTYPES.iter().map(|&d| (d, d)).collect();
    use DType::*;
    v.extend([
        (I32, I64),
        (F16, F32),
        (Bf16, F16),
        (I32, F32),
        (I64, Bf16),
        (Bool, F32),
        (Bool, I32),
        (I8, U8),
        (U8, I32),
        (I16, U16),
        (U32, I64),
        (U64, I64),
        (U16, F16),
        (F64, F32),
        (I8, F64),
        (U64, F32),
        (Bf16, F64),
        (Bool, U64),
        (U8, I8),
        (U64, F64),
        (I16, F32),
        (Bool, U8),
    ]);
    v
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut kinds_seen = 0;
    for spec in OPS {
        // The op an entry builds, with its required attribute (`cast`'s `to`) given.
        let to = [("to".to_string(), AttrValue::DType(DType::F32))];
        let op = Op::from_call(spec.name, &[])
            .ok()
            .flatten()
            .or_else(|| Op::from_call(spec.name, &to).ok().flatten());
        let Some(op) = op else { continue };
        match op {
            Op::Unary(u) => {
                kinds_seen += 1;
                unary_cases(
                    spec.name,
                    &format!("{}(x)", spec.name),
                    unary_compare(u),
                    &mut cases,
                );
                if u == UnaryOp::Gelu {
                    unary_cases(
                        "gelu_tanh",
                        "gelu(x, approximate=\"tanh\")",
                        Compare::Approx,
                        &mut cases,
                    );
                }
            }
            Op::Binary(b) => {
                kinds_seen += 1;
                let compare = if b == BinaryOp::Pow {
                    Compare::Approx
                } else {
                    Compare::Exact
                };
                for (dx, dy) in dtype_pairs() {
                    let sy = specials(dy);
                    // An integer to a negative power, an integer division by zero: errors,
                    // tested apart.
                    let ints = !promote(dx, dy).is_float();
                    let int_pow = b == BinaryOp::Pow && ints;
                    let int_div = b.is_integer_division() && ints;
                    let keep = |_: usize, j: usize| match &sy {
                        Specials::Int(v) if int_pow => v[j] >= 0,
                        Specials::Int(v) if int_div => v[j] != 0,
                        _ => true,
                    };
                    binary_cases(spec.name, dx, dy, compare, &keep, &mut cases);
                }
            }
            Op::Where => {
                kinds_seen += 1;
                for d in DTYPES {
                    let s = specials(d);
                    let n = len(&s);
                    let src = format!(
                        "graph g(c: bool[{n}], a: {d}[{n}], b: {d}[{n}]) {{\n  y = where(c, a, b)\n  \
                         w = where(c, a, 0)\n  return y, w\n}}\n"
                    );
                    let c = Tensor::from_i64(
                        &TensorType {
                            dtype: DType::Bool,
                            shape: vec![n],
                        },
                        &(0..n as i64).map(|i| i % 2).collect::<Vec<_>>(),
                    );
                    let rev: Vec<usize> = (0..n).rev().collect();
                    cases.push(Case {
                        name: format!("where({d})"),
                        src,
                        inputs: vec![
                            c,
                            tensor(d, &s, &(0..n).collect::<Vec<_>>()),
                            tensor(d, &s, &rev),
                        ],
                        compare: Compare::Exact,
                        special_operands: vec![vec![false; n]; 2],
                    });
                }
            }
            Op::Cast { .. } => {
                kinds_seen += 1;
                for from in DTYPES {
                    let s = specials(from);
                    let n = len(&s);
                    let body: String = DTYPES
                        .iter()
                        .map(|to| format!("  y_{to} = cast(x, to={to})\n"))
                        .collect();
                    let names: Vec<String> = DTYPES.iter().map(|to| format!("y_{to}")).collect();
                    cases.push(Case {
                        name: format!("cast({from} -> *)"),
                        src: format!(
                            "graph g(x: {from}[{n}]) {{\n{body}  return {}\n}}\n",
                            names.join(", ")
                        ),
                        inputs: vec![tensor(from, &s, &(0..n).collect::<Vec<_>>())],
                        compare: Compare::Exact,
                        special_operands: vec![vec![false; n]; DTYPES.len()],
                    });
                }
            }
            _ => {}
        }
    }
    // neg .. not, add .. or, where, cast: the op table's elementwise ops; bitwise_not
    // and the five binary bitwise ops and shifts.
    assert_eq!(
        kinds_seen,
        20 + 19 + 2 + 1 + 5,
        "an elementwise op was added: give it special values"
    );
    cases
}

/// The ulp of `|v|` in dtype `d` (the spacing of floats at that magnitude).
fn ulp(v: f64, d: DType) -> f64 {
    let (mant, min_exp) = match d {
        DType::F64 => (52, -1022),
        DType::F16 => (10, -14),
        DType::Bf16 => (7, -126),
        _ => (23, -126),
    };
    let e = if v == 0.0 {
        min_exp
    } else {
        (v.abs().log2().floor() as i32).max(min_exp)
    };
    2f64.powi(e - mant)
}

fn epsilon(d: DType) -> f64 {
    match d {
        DType::F64 => 2f64.powi(-52),
        DType::F16 => 2f64.powi(-10),
        DType::Bf16 => 2f64.powi(-7),
        _ => 2f64.powi(-23),
    }
}

/// Why `got` is not `want` (element `i` of an output of `case`), if it is not.
fn mismatch(case: &Case, out: usize, got: &Tensor, want: &Tensor) -> Option<String> {
    if got.ty != want.ty {
        return Some(format!("type {} instead of {}", got.ty, want.ty));
    }
    let d = want.ty.dtype;
    if !d.is_float() {
        let (g, w) = (got.to_i128(), want.to_i128());
        let i = (0..w.len()).find(|&i| g[i] != w[i])?;
        return Some(format!("element {i}: {} instead of {}", g[i], w[i]));
    }
    let (g, w) = (got.to_f64(), want.to_f64());
    for i in 0..w.len() {
        let (a, b) = (g[i], w[i]);
        let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        if same {
            continue;
        }
        // Only an approximate op may differ, and only on a finite result that is not an
        // exact zero of special operands.
        let exact_only = case.compare != Compare::Approx
            || a.is_nan()
            || b.is_nan()
            || b.is_infinite()
            || (b == 0.0 && case.special_operands[out][i]);
        let ok = !exact_only && ((a - b).abs() <= 4.0 * ulp(b, d) || (a - b).abs() <= epsilon(d));
        if !ok {
            return Some(format!("element {i}: {a:e} instead of {b:e}"));
        }
    }
    None
}

#[test]
fn every_elementwise_op_agrees_with_the_interpreter_on_special_values() {
    let cases = all_cases();
    assert!(cases.len() > 100, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let g: Graph = ferrite_ir::parse("parity.fg", &case.src)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", case.name, case.src));
        let inputs: Vec<ferrite::Tensor> = case
            .inputs
            .iter()
            .map(|t| ferrite::Tensor::try_from(t.clone()).unwrap())
            .collect();
        let want = compile_ir(&g, &Options::default().target(Target::Interp))
            .unwrap()
            .run(&inputs);
        for target in [Target::Cpu, Target::Sim] {
            let got = compile_ir(&g, &Options::default().target(target).threads(1))
                .and_then(|exe| exe.run(&inputs));
            match (&want, got) {
                (Ok(want), Ok(got)) => {
                    for (k, (a, b)) in got.iter().zip(want).enumerate() {
                        if let Some(m) = mismatch(case, k, a.as_ir(), b.as_ir()) {
                            failures.push(format!("{} on {target}, output {k}: {m}", case.name));
                        }
                    }
                }
                (Err(_), Err(e)) if !e.is_internal() => {}
                (Err(w), Err(e)) => failures.push(format!(
                    "{} on {target}: an internal error ({e}) where the interpreter says: {w}",
                    case.name
                )),
                (Ok(_), Err(e)) => failures.push(format!("{} on {target}: {e}", case.name)),
                (Err(w), Ok(_)) => failures.push(format!(
                    "{} on {target}: runs where the interpreter fails ({w})",
                    case.name
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} divergences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Reliability finding F04: on the simulator an integer `pow` with a negative tensor
/// exponent returned the base (exit 0), and with a literal exponent the tile lowering
/// failed (exit 2). Every target reports the interpreter's run-time error (a user
/// error, exit 1), and a negative exponent only in lanes that are masked off (beyond
/// the end of a tensor whose length is not a multiple of the block) is no error.
#[test]
fn regression_integer_pow_of_a_negative_exponent_fails_on_every_target() {
    let tensor_exponent = "graph g(a: i32[3], b: i32[3]) {\n  y = pow(a, b)\n  return y\n}\n";
    let literal_exponent = "graph g(a: i64[3]) {\n  y = pow(a, -1)\n  return y\n}\n";
    let a32 = ferrite::Tensor::from_vec(&[3], vec![2i32, 1, -1]).unwrap();
    let b32 = ferrite::Tensor::from_vec(&[3], vec![-1i32, -2, -3]).unwrap();
    let a64 = ferrite::Tensor::from_vec(&[3], vec![2i64, 1, -1]).unwrap();
    for target in Target::ALL {
        for (src, inputs) in [
            (tensor_exponent, vec![a32.clone(), b32.clone()]),
            (literal_exponent, vec![a64.clone()]),
        ] {
            let g = ferrite_ir::parse("f04.fg", src).unwrap();
            let e = compile_ir(&g, &Options::default().target(target))
                .unwrap_or_else(|e| panic!("{target}: {e}"))
                .run(&inputs)
                .expect_err(target.name());
            assert!(!e.is_internal(), "{target}: {e}");
            assert!(
                e.to_string().contains("negative integer powers"),
                "{target}: {e}"
            );
        }
    }
    // One negative exponent among non-negative ones fails; none at all, computed from
    // a shifted input so that masked-off lanes would see -1, runs.
    let g = ferrite_ir::parse(
        "f04.fg",
        "graph g(a: i32[37], b: i32[37]) {\n  y = pow(a, sub(b, 1))\n  return y\n}\n",
    )
    .unwrap();
    let a = ferrite::Tensor::from_vec(&[37], (0..37).map(|i| i % 5 - 2).collect()).unwrap();
    let ones = ferrite::Tensor::from_vec(&[37], (0..37).map(|i| 1 + i % 4).collect()).unwrap();
    let mut bad: Vec<i32> = (0..37).map(|i| 1 + i % 4).collect();
    bad[36] = 0;
    let bad = ferrite::Tensor::from_vec(&[37], bad).unwrap();
    let want = compile_ir(&g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&[&a, &ones])
        .unwrap();
    for target in [Target::Cpu, Target::Sim] {
        let exe = compile_ir(&g, &Options::default().target(target)).unwrap();
        assert_eq!(exe.run(&[&a, &ones]).unwrap(), want, "{target}");
        let e = exe.run(&[&a, &bad]).expect_err(target.name());
        assert!(
            !e.is_internal() && e.to_string().contains("negative integer powers"),
            "{target}: {e}"
        );
    }
}

/// Integer division by zero (`floor_divide`, `trunc_divide`, `remainder`, `fmod`) is
/// the interpreter's run-time error on the CPU and the simulator (a user error, exit 1;
/// on the simulator through the kernel's `check`), for a divisor in a tensor and a literal one; lanes
/// past the end of a tensor, which load 0, are no error; and `MIN / -1` wraps.
#[test]
fn integer_division_by_zero_fails_on_both_backends_fused_and_unfused() {
    for op in ["floor_divide", "trunc_divide", "remainder", "fmod"] {
        for d in ["i8", "u16", "i32", "u64", "i64"] {
            let tensor_divisor =
                format!("graph g(a: {d}[37], b: {d}[37]) {{\n  y = {op}(a, b)\n  return y\n}}\n");
            let literal_divisor =
                format!("graph g(a: {d}[37], b: {d}[37]) {{\n  y = {op}(a, 0)\n  return y\n}}\n");
            let dt = DType::from_name(d).unwrap();
            let ty = TensorType {
                dtype: dt,
                shape: vec![37],
            };
            let a = Tensor::from_i64(&ty, &(0..37).map(|i| i * 5 - 90).collect::<Vec<_>>());
            let nonzero: Vec<i64> = (0..37)
                .map(|i| if i % 2 == 0 { 3 + i } else { -7 })
                .collect();
            let mut zero = nonzero.clone();
            zero[20] = 0;
            let (a, ok, bad) = (
                ferrite::Tensor::try_from(a).unwrap(),
                ferrite::Tensor::try_from(Tensor::from_i64(&ty, &nonzero)).unwrap(),
                ferrite::Tensor::try_from(Tensor::from_i64(&ty, &zero)).unwrap(),
            );
            let g = ferrite_ir::parse("div.fg", &tensor_divisor).unwrap();
            let want = compile_ir(&g, &Options::default().target(Target::Interp))
                .unwrap()
                .run(&[&a, &ok])
                .unwrap();
            for (target, fuse) in [Target::Cpu, Target::Sim]
                .into_iter()
                .flat_map(|t| [(t, true), (t, false)])
            {
                let opts = Options::default().target(target).fuse(fuse);
                let exe = compile_ir(&g, &opts).unwrap();
                assert_eq!(
                    exe.run(&[&a, &ok]).unwrap(),
                    want,
                    "{op}({d}) on {target}, fuse {fuse}"
                );
                let e = exe.run(&[&a, &bad]).expect_err(op);
                assert!(
                    !e.is_internal() && e.to_string().contains("integer division by zero"),
                    "{op}({d}): {e}"
                );
                let lit = ferrite_ir::parse("div.fg", &literal_divisor).unwrap();
                let e = compile_ir(&lit, &opts)
                    .unwrap_or_else(|e| panic!("{op}({d}): {e}"))
                    .run(&[&a, &ok])
                    .expect_err(op);
                assert!(
                    !e.is_internal() && e.to_string().contains("integer division by zero"),
                    "{op}({d}) by a literal 0: {e}"
                );
            }
        }
    }
    // i64::MIN / -1 is i64::MIN (it wraps), its remainders 0, as in the interpreter.
    let g = ferrite_ir::parse(
        "min.fg",
        "graph g(a: i64[2], b: i64[2]) {\n  f = floor_divide(a, b)\n  t = trunc_divide(a, b)\n  \
         r = remainder(a, b)\n  m = fmod(a, b)\n  return f, t, r, m\n}\n",
    )
    .unwrap();
    let a = ferrite::Tensor::from_vec(&[2], vec![i64::MIN, -7]).unwrap();
    let b = ferrite::Tensor::from_vec(&[2], vec![-1i64, 2]).unwrap();
    let v = |x: [i64; 2]| ferrite::Tensor::from_vec(&[2], x.to_vec()).unwrap();
    for target in [Target::Cpu, Target::Sim] {
        let got = compile_ir(&g, &Options::default().target(target))
            .unwrap()
            .run(&[&a, &b])
            .unwrap();
        assert_eq!(
            got,
            vec![v([i64::MIN, -4]), v([i64::MIN, -3]), v([0, 1]), v([0, -1])],
            "{target}"
        );
    }
}

/// An integer division or remainder by zero is the interpreter's run-time error (a user
/// error, exit 1) on every target, wherever the zero sits in the tensor.
#[test]
fn integer_division_by_zero_fails_on_every_target() {
    for op in ["floor_divide", "trunc_divide", "remainder", "fmod"] {
        let src = format!(
            "graph g(a: i32[37], b: i32[37]) {{\n  y = {op}(a, sub(b, 1))\n  return y\n}}\n"
        );
        let g = ferrite_ir::parse("div0.fg", &src).unwrap();
        let a = ferrite::Tensor::from_vec(&[37], (0..37).map(|i| i % 9 - 4).collect()).unwrap();
        let fine = ferrite::Tensor::from_vec(&[37], (0..37).map(|i| 2 + i % 4).collect()).unwrap();
        let mut bad: Vec<i32> = (0..37).map(|i| 2 + i % 4).collect();
        bad[36] = 1;
        let bad = ferrite::Tensor::from_vec(&[37], bad).unwrap();
        let want = compile_ir(&g, &Options::default().target(Target::Interp))
            .unwrap()
            .run(&[&a, &fine])
            .unwrap();
        for target in Target::ALL {
            let exe = compile_ir(&g, &Options::default().target(target))
                .unwrap_or_else(|e| panic!("{target}: {e}"));
            assert_eq!(exe.run(&[&a, &fine]).unwrap(), want, "{target}");
            let e = exe.run(&[&a, &bad]).expect_err(target.name());
            assert!(
                !e.is_internal() && e.to_string().contains("division by zero"),
                "{target}: {e}"
            );
        }
    }
}

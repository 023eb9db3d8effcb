//! Per-element bounds on how far a backend's f32 result may lie from the interpreter's f64
//! one, by running-error analysis on the graph itself.
//!
//! The interpreter accumulates every reduction and matmul in f64 and rounds once; a
//! backend accumulates in the dtype, in an order of its own (ARCHITECTURE, accumulation
//! policy). Where a reduction cancels, the difference is bounded by the textbook
//! `n * u * sum |x|` (`sum |a * b|` for a matmul), not by its result's magnitude; and a
//! product whose partial products may leave the f32 range (`prod` of 1e-30, 1e-30, 1e30,
//! 1e30 is 1 in f64 and 0 in f32 from the left) has no bound at all: it is
//! *unconditioned*, as `2 * 3.4e38 * 0` is in `tests/accumulation.rs`. Those errors then
//! pass through every op downstream: `reciprocal` of a sum that cancels is off by far more
//! than its rtol, `sigmoid` of an unconditioned product by at most its range.
//!
//! [`error_bounds`] builds a probe graph that computes, next to each float value `x` of the
//! decomposed graph (so the sums inside `softmax`, `log_softmax`, `layer_norm`, `mean` are
//! reductions like any other), a bound `e >= 0` on its error, in f64, from the bounds of
//! its operands and the rounding its op adds:
//!
//! - `sum`, `mean`: `sum e + 2 n u sum |x|` (`mean` divides both by `n`); unconditioned
//!   where `sum |x|` exceeds the dtype's largest finite value (a partial sum may overflow);
//! - `matmul`: `|A| E_b + E_a |B| + E_a E_b + 2 k u |A| |B|`, plus `k` times what an
//!   underflowing term may lose (`2^-93` below f64: the CPU's GEMM flushes denormals),
//!   unconditioned where `|A| |B|` overflows;
//! - `prod`: relative error `prod (1 + e_i / |x_i|) * (1 + u)^n - 1`; unconditioned where
//!   the product of the factors' magnitudes above 1 exceeds the largest finite value or the
//!   product of the nonzero ones below 1 is below the smallest normal (some order of f32
//!   multiplications then overflows or underflows; the f64 product need not);
//! - `max`, `min`, `maximum`, `minimum`, `clip`: the largest operand bound;
//! - `add`, `sub`, `mul`, `div`: the first-order-exact interval bounds (`div` unconditioned
//!   where the divisor's interval reaches 0);
//! - monotone functions (`exp`, `log`, `sqrt`, `rsqrt`, `reciprocal`, `tanh`, `sigmoid`,
//!   `erf`, `erfc`): `max |f(x +- e) - f(x)|` (`reciprocal` unconditioned where `x +- e` spans 0);
//!   Lipschitz ones (`gelu`, `silu`, `sin`, `cos`): `L e`; `pow`: the corners of the box;
//!   each transcendental adds 4 ulp of its result (the backends' vector math);
//! - data movement (`reshape`, `permute`, `expand`, `slice`, `pad`, `concat`, gathers,
//!   `where`): the same op applied to the bounds;
//! - everything else (comparisons, casts to integers, floor, ...): exact (their inexact
//!   inputs are [`super::flips`]'s business), or, for an op this file does not know whose
//!   operand carries a bound, unconditioned.
//!
//! An element whose bound is infinite or NaN is unconditioned and not compared; every other
//! element is compared with the output tolerance plus its bound. With no accumulation the
//! bounds are 0 (up to the transcendentals' ulps) and the check is the plain one.

use ferrite_ir::{
    BinaryOp as B, DType, Graph, Op, ReduceOp, Scalar, Tensor, UnaryOp as U, ValueId,
};

type R<T> = Result<T, ferrite_ir::Error>;

/// The unit roundoff of a float dtype.
fn unit(d: DType) -> f64 {
    match d {
        DType::F64 => 2f64.powi(-53),
        DType::F16 => 2f64.powi(-11),
        DType::Bf16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

/// The largest finite value of a float dtype.
fn largest(d: DType) -> f64 {
    match d {
        DType::F64 => f64::MAX,
        DType::F16 => 65504.0,
        DType::Bf16 => 3.3895313892515355e38,
        _ => f32::MAX as f64,
    }
}

/// The smallest positive normal value of a float dtype.
fn smallest_normal(d: DType) -> f64 {
    match d {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F16 => 2f64.powi(-14),
        _ => f32::MIN_POSITIVE as f64,
    }
}

/// How far one term of a matmul may be off by underflow: a subnormal's worth in f64; in
/// f32 (and the half dtypes, whose products run in f32) the CPU's GEMM runs with
/// denormals flushed when its operands are at most 2^32, so a subnormal factor read as
/// zero drops up to 2^-126 * 2^32 (and a flushed partial result 2^-126).
fn matmul_underflow(d: DType) -> f64 {
    match d {
        DType::F64 => smallest_subnormal(d),
        _ => 2f64.powi(-93),
    }
}

/// The smallest positive subnormal value of a float dtype.
fn smallest_subnormal(d: DType) -> f64 {
    match d {
        DType::F64 => 5e-324,
        DType::F16 => 2f64.powi(-24),
        DType::Bf16 => 2f64.powi(-133),
        _ => 2f64.powi(-149),
    }
}

/// The probe graph under construction: the decomposed graph plus the bound computations.
struct Probe {
    p: Graph,
}

impl Probe {
    fn lit(&mut self, v: f64) -> R<ValueId> {
        self.p.add_literal(Scalar::Float(v), DType::F64)
    }
    fn un(&mut self, u: U, x: ValueId) -> R<ValueId> {
        self.p.add(Op::Unary(u), &[x], None)
    }
    fn bin(&mut self, b: B, x: ValueId, y: ValueId) -> R<ValueId> {
        self.p.add(Op::Binary(b), &[x, y], None)
    }
    fn binl(&mut self, b: B, x: ValueId, v: f64) -> R<ValueId> {
        let l = self.lit(v)?;
        self.bin(b, x, l)
    }
    fn select(&mut self, c: ValueId, a: ValueId, b: ValueId) -> R<ValueId> {
        self.p.add(Op::Where, &[c, a, b], None)
    }
    fn f64(&mut self, x: ValueId) -> R<ValueId> {
        if self.p.ty(x).dtype == DType::F64 {
            return Ok(x);
        }
        self.p.add(Op::Cast { to: DType::F64 }, &[x], None)
    }
    /// `|x|`, with infinities and NaN as 0: the magnitude a rounding error scales with
    /// (an infinite or NaN term makes the result exact or non-finite on every side).
    fn abs_finite(&mut self, x: ValueId) -> R<ValueId> {
        let a = self.un(U::Abs, x)?;
        let fin = self.binl(B::Lt, a, f64::INFINITY)?;
        let z = self.lit(0.0)?;
        self.select(fin, a, z)
    }
    /// `m * e`, 0 where `e` is 0 (so that an infinite `m` does not make an exact value NaN).
    fn scale(&mut self, e: ValueId, m: ValueId) -> R<ValueId> {
        let zero = self.binl(B::Eq, e, 0.0)?;
        let me = self.bin(B::Mul, e, m)?;
        let z = self.lit(0.0)?;
        self.select(zero, z, me)
    }
    /// `d`, but infinite where `cond`.
    fn unbounded_where(&mut self, cond: ValueId, d: ValueId) -> R<ValueId> {
        let inf = self.lit(f64::INFINITY)?;
        self.select(cond, inf, d)
    }
    /// `e`, or 0 of `x`'s shape.
    fn or_zero(&mut self, e: Option<ValueId>, x: ValueId) -> R<ValueId> {
        match e {
            Some(e) => Ok(e),
            None => {
                let shape = self.p.ty(x).shape.clone();
                self.p.add(
                    Op::Full {
                        shape,
                        value: 0.0,
                        dtype: DType::F64,
                    },
                    &[],
                    None,
                )
            }
        }
    }
    /// `e` broadcast to the shape of `like`.
    fn fit(&mut self, e: ValueId, like: ValueId) -> R<ValueId> {
        let shape = self.p.ty(like).shape.clone();
        if self.p.ty(e).shape == shape {
            return Ok(e);
        }
        let shape = shape.iter().map(|&s| s as i64).collect();
        self.p.add(Op::Expand { shape }, &[e], None)
    }
    fn add_opt(&mut self, a: Option<ValueId>, b: Option<ValueId>) -> R<Option<ValueId>> {
        Ok(match (a, b) {
            (Some(a), Some(b)) => Some(self.bin(B::Add, a, b)?),
            (a, b) => a.or(b),
        })
    }
}

/// A bound on `|f(x +- e) - f(x)|` for a monotone `f`, 0 where `e` is 0.
fn monotone(pr: &mut Probe, u: U, x: ValueId, e: ValueId) -> R<ValueId> {
    let fx = pr.un(u, x)?;
    let hi = pr.bin(B::Add, x, e)?;
    let lo = pr.bin(B::Sub, x, e)?;
    let mut d = None;
    for end in [hi, lo] {
        let f = pr.un(u, end)?;
        let diff = pr.bin(B::Sub, f, fx)?;
        let diff = pr.un(U::Abs, diff)?;
        d = Some(match d {
            None => diff,
            Some(d) => pr.bin(B::Maximum, d, diff)?,
        });
    }
    let mut d = d.unwrap();
    if u == U::Reciprocal {
        // Unbounded where the interval reaches the pole.
        let ax = pr.un(U::Abs, x)?;
        let spans = pr.bin(B::Le, ax, e)?;
        d = pr.unbounded_where(spans, d)?;
    }
    let exact = pr.binl(B::Eq, e, 0.0)?;
    let z = pr.lit(0.0)?;
    pr.select(exact, z, d)
}

/// The bound of one node of the decomposed graph `g` (already copied into the probe with
/// the same ids), from its operands' bounds `es` (`None`: exact).
fn node_bound(pr: &mut Probe, g: &Graph, v: usize, es: &[Option<ValueId>]) -> R<Option<ValueId>> {
    let node = &g.nodes[v];
    let dt = node.ty.dtype;
    if !dt.is_float() {
        return Ok(None);
    }
    let ins = &node.inputs;
    let e = |i: usize| es[ins[i].index()];
    let any = ins.iter().any(|x| es[x.index()].is_some());
    let u = unit(dt);
    let out = ValueId(v as u32);
    let x64 = |pr: &mut Probe, i: usize| pr.f64(ins[i]);
    match &node.op {
        Op::Param { .. } | Op::Literal { .. } | Op::Constant(_) => Ok(None),
        Op::Full { .. } | Op::Arange { .. } => Ok(None),
        Op::Cast { .. } => Ok(e(0)),
        Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Slice { .. } => match e(0) {
            Some(e0) => Ok(Some(pr.p.add(node.op.clone(), &[e0], None)?)),
            None => Ok(None),
        },
        Op::Pad { pads, .. } => match e(0) {
            Some(e0) => Ok(Some(pr.p.add(
                Op::Pad {
                    pads: pads.clone(),
                    value: 0.0,
                },
                &[e0],
                None,
            )?)),
            None => Ok(None),
        },
        Op::IndexSelect { .. } | Op::Gather { .. } => match e(0) {
            Some(e0) => Ok(Some(pr.p.add(node.op.clone(), &[e0, ins[1]], None)?)),
            None => Ok(None),
        },
        Op::Concat { .. } => {
            if !any {
                return Ok(None);
            }
            let parts = (0..ins.len())
                .map(|i| pr.or_zero(e(i), ins[i]))
                .collect::<R<Vec<_>>>()?;
            Ok(Some(pr.p.add(node.op.clone(), &parts, None)?))
        }
        Op::Where => {
            if e(1).is_none() && e(2).is_none() {
                return Ok(None);
            }
            let a = match e(1) {
                Some(a) => a,
                None => pr.lit(0.0)?,
            };
            let b = match e(2) {
                Some(b) => b,
                None => pr.lit(0.0)?,
            };
            let w = pr.select(ins[0], a, b)?;
            Ok(Some(pr.fit(w, out)?))
        }
        Op::Clip { .. } => Ok(e(0)),
        Op::Unary(op) => unary_bound(pr, *op, ins[0], e(0), dt, out),
        Op::Binary(op) => binary_bound(pr, *op, ins[0], ins[1], e(0), e(1), out),
        Op::Reduce { op, axes, keepdim } => {
            let n = (g.ty(ins[0]).numel() / node.ty.numel().max(1)) as f64;
            let reduce = |pr: &mut Probe, op: ReduceOp, x: ValueId| {
                pr.p.add(
                    Op::Reduce {
                        op,
                        axes: axes.clone(),
                        keepdim: *keepdim,
                    },
                    &[x],
                    None,
                )
            };
            match op {
                ReduceOp::Sum | ReduceOp::Mean => {
                    let x = x64(pr, 0)?;
                    let a = pr.abs_finite(x)?;
                    let s = reduce(pr, *op, a)?;
                    let rounding = pr.binl(B::Mul, s, 2.0 * n * u)?;
                    // `sum |x|` (mean's times n) past the largest value: a partial sum may
                    // overflow on a backend.
                    let total = pr.binl(B::Mul, s, if *op == ReduceOp::Mean { n } else { 1.0 })?;
                    let over = pr.binl(B::Gt, total, largest(dt))?;
                    let rounding = pr.unbounded_where(over, rounding)?;
                    let carried = match e(0) {
                        Some(e0) => Some(reduce(pr, *op, e0)?),
                        None => None,
                    };
                    pr.add_opt(Some(rounding), carried)
                }
                ReduceOp::Max | ReduceOp::Min => match e(0) {
                    Some(e0) => Ok(Some(reduce(pr, ReduceOp::Max, e0)?)),
                    None => Ok(None),
                },
                ReduceOp::Prod => {
                    let x = x64(pr, 0)?;
                    let a = pr.un(U::Abs, x)?;
                    // The largest partial product of any order: the factors above 1.
                    let big = pr.binl(B::Maximum, a, 1.0)?;
                    let big = reduce(pr, ReduceOp::Prod, big)?;
                    // The smallest: the nonzero factors below 1 (a 0 makes the product 0
                    // in every order).
                    let small = pr.binl(B::Minimum, a, 1.0)?;
                    let zero = pr.binl(B::Eq, a, 0.0)?;
                    let one = pr.lit(1.0)?;
                    let small = pr.select(zero, one, small)?;
                    let small = reduce(pr, ReduceOp::Prod, small)?;
                    let over = pr.binl(B::Gt, big, largest(dt))?;
                    let under = pr.binl(B::Lt, small, smallest_normal(dt))?;
                    let unconditioned = pr.bin(B::Or, over, under)?;
                    // Relative: prod(1 + e_i / |x_i|) * (1 + u)^n - 1.
                    let mut rel = pr.lit((1.0 + u).powf(n) - 1.0)?;
                    if let Some(e0) = e(0) {
                        let r = pr.bin(B::Div, e0, a)?;
                        let exact = pr.binl(B::Eq, e0, 0.0)?;
                        let z = pr.lit(0.0)?;
                        let r = pr.select(exact, z, r)?;
                        let r = pr.binl(B::Add, r, 1.0)?;
                        let r = reduce(pr, ReduceOp::Prod, r)?;
                        let r = pr.binl(B::Mul, r, (1.0 + u).powf(n))?;
                        rel = pr.binl(B::Sub, r, 1.0)?;
                    }
                    let p = pr.f64(out)?;
                    let p = pr.abs_finite(p)?;
                    let d = pr.bin(B::Mul, p, rel)?;
                    let d = pr.fit(d, out)?;
                    Ok(Some(pr.unbounded_where(unconditioned, d)?))
                }
            }
        }
        Op::MatMul => {
            let (a, b) = (x64(pr, 0)?, x64(pr, 1)?);
            let (a, b) = (pr.abs_finite(a)?, pr.abs_finite(b)?);
            let k = *g.ty(ins[0]).shape.last().unwrap_or(&1) as f64;
            let s = pr.p.add(Op::MatMul, &[a, b], None)?;
            let rounding = pr.binl(B::Mul, s, 2.0 * k * u)?;
            let rounding = pr.binl(B::Add, rounding, k * matmul_underflow(dt))?;
            let over = pr.binl(B::Gt, s, largest(dt))?;
            let mut d = pr.unbounded_where(over, rounding)?;
            let (ea, eb) = (e(0), e(1));
            if let Some(ea) = ea {
                let t = pr.p.add(Op::MatMul, &[ea, b], None)?;
                d = pr.bin(B::Add, d, t)?;
            }
            if let Some(eb) = eb {
                let t = pr.p.add(Op::MatMul, &[a, eb], None)?;
                d = pr.bin(B::Add, d, t)?;
            }
            if let (Some(ea), Some(eb)) = (ea, eb) {
                let t = pr.p.add(Op::MatMul, &[ea, eb], None)?;
                d = pr.bin(B::Add, d, t)?;
            }
            Ok(Some(d))
        }
        Op::ArgReduce { .. } => Ok(None),
        // An op not modelled here: exact if its operands are, else unconditioned.
        _ if !any => Ok(None),
        _ => {
            let shape = node.ty.shape.clone();
            Ok(Some(pr.p.add(
                Op::Full {
                    shape,
                    value: f64::INFINITY,
                    dtype: DType::F64,
                },
                &[],
                None,
            )?))
        }
    }
}

fn unary_bound(
    pr: &mut Probe,
    op: U,
    x: ValueId,
    e: Option<ValueId>,
    dt: DType,
    out: ValueId,
) -> R<Option<ValueId>> {
    let transcendental = super::transcendental(&Op::Unary(op));
    let carried = match (op, e) {
        (_, None) => None,
        (U::Neg | U::Abs | U::Relu | U::Floor | U::Ceil | U::Sign, Some(e)) => Some(e),
        (
            U::Exp
            | U::Log
            | U::Sqrt
            | U::Rsqrt
            | U::Reciprocal
            | U::Tanh
            | U::Sigmoid
            | U::Erf
            | U::Erfc,
            Some(e),
        ) => {
            let x = pr.f64(x)?;
            Some(monotone(pr, op, x, e)?)
        }
        // Lipschitz: |gelu'| <= 1.13, |silu'| <= 1.1, |sin'|, |cos'| <= 1.
        (U::Gelu | U::GeluTanh | U::Silu | U::Sin | U::Cos, Some(e)) => {
            let l = pr.lit(1.13)?;
            Some(pr.scale(e, l)?)
        }
        (_, Some(_)) => None,
    };
    if !transcendental {
        return Ok(carried);
    }
    let y = pr.f64(out)?;
    let y = pr.abs_finite(y)?;
    let ulps = pr.binl(B::Mul, y, 4.0 * unit(dt))?;
    pr.add_opt(carried, Some(ulps))
}

fn binary_bound(
    pr: &mut Probe,
    op: B,
    a: ValueId,
    b: ValueId,
    ea: Option<ValueId>,
    eb: Option<ValueId>,
    out: ValueId,
) -> R<Option<ValueId>> {
    if ea.is_none() && eb.is_none() {
        return Ok(None);
    }
    let d = match op {
        B::Add | B::Sub => pr.add_opt(ea, eb)?.unwrap(),
        B::Maximum | B::Minimum => match (ea, eb) {
            (Some(ea), Some(eb)) => pr.bin(B::Maximum, ea, eb)?,
            (e, f) => e.or(f).unwrap(),
        },
        B::Mul => {
            let (a, b) = (pr.f64(a)?, pr.f64(b)?);
            let (aa, ab) = (pr.un(U::Abs, a)?, pr.un(U::Abs, b)?);
            let mut d = None;
            if let Some(ea) = ea {
                let t = pr.scale(ea, ab)?;
                d = pr.add_opt(d, Some(t))?;
            }
            if let Some(eb) = eb {
                let t = pr.scale(eb, aa)?;
                d = pr.add_opt(d, Some(t))?;
            }
            if let (Some(ea), Some(eb)) = (ea, eb) {
                let t = pr.bin(B::Mul, ea, eb)?;
                d = pr.add_opt(d, Some(t))?;
            }
            d.unwrap()
        }
        B::Div => {
            // |a/b - (a + da)/(b + db)| <= (|b| ea + |a| eb) / (|b| (|b| - eb)), |b| > eb.
            let (a, b) = (pr.f64(a)?, pr.f64(b)?);
            let (aa, ab) = (pr.un(U::Abs, a)?, pr.un(U::Abs, b)?);
            let mut num = None;
            if let Some(ea) = ea {
                let t = pr.scale(ea, ab)?;
                num = pr.add_opt(num, Some(t))?;
            }
            if let Some(eb) = eb {
                let t = pr.scale(eb, aa)?;
                num = pr.add_opt(num, Some(t))?;
            }
            let num = num.unwrap();
            let exact = pr.binl(B::Eq, num, 0.0)?;
            let den = match eb {
                Some(eb) => {
                    let gap = pr.bin(B::Sub, ab, eb)?;
                    pr.bin(B::Mul, ab, gap)?
                }
                None => pr.bin(B::Mul, ab, ab)?,
            };
            let d = pr.bin(B::Div, num, den)?;
            let d = match eb {
                Some(eb) => {
                    let spans = pr.bin(B::Le, ab, eb)?;
                    pr.unbounded_where(spans, d)?
                }
                None => d,
            };
            let z = pr.lit(0.0)?;
            pr.select(exact, z, d)?
        }
        B::Pow => {
            // Monotone in each operand where the base is positive: the box's corners.
            let (a, b) = (pr.f64(a)?, pr.f64(b)?);
            let p = pr.bin(B::Pow, a, b)?;
            let mut d = None;
            let ends = |pr: &mut Probe, x: ValueId, e: Option<ValueId>| -> R<Vec<ValueId>> {
                Ok(match e {
                    None => vec![x],
                    Some(e) => vec![pr.bin(B::Add, x, e)?, pr.bin(B::Sub, x, e)?],
                })
            };
            let (xs, ys) = (ends(pr, a, ea)?, ends(pr, b, eb)?);
            for &x in &xs {
                for &y in &ys {
                    let q = pr.bin(B::Pow, x, y)?;
                    let diff = pr.bin(B::Sub, q, p)?;
                    let diff = pr.un(U::Abs, diff)?;
                    d = Some(match d {
                        None => diff,
                        Some(d) => pr.bin(B::Maximum, d, diff)?,
                    });
                }
            }
            let d = d.unwrap();
            let mut exact = None;
            for e in [ea, eb].into_iter().flatten() {
                let z = pr.binl(B::Eq, e, 0.0)?;
                exact = Some(match exact {
                    None => z,
                    Some(x) => pr.bin(B::And, x, z)?,
                });
            }
            let z = pr.lit(0.0)?;
            let d = pr.select(exact.unwrap(), z, d)?;
            let y = pr.f64(out)?;
            let y = pr.abs_finite(y)?;
            let ulps = pr.binl(B::Mul, y, 4.0 * unit(pr.p.ty(out).dtype))?;
            pr.bin(B::Add, d, ulps)?
        }
        // Comparisons, rounding divisions, bitwise ops: discontinuous, left to `flips`.
        _ => return Ok(None),
    };
    Ok(Some(pr.fit(d, out)?))
}

/// For each output of `g` on `inputs`, a bound on each element's error (module docs), as
/// f64 tensors of the outputs' shapes; `None` where the analysis cannot run (the graph
/// does not decompose, or the probe fails to build or evaluate), and the caller falls back
/// to the whole-graph [`super::cancellation`] slack.
pub fn error_bounds(g: &Graph, inputs: &[Tensor]) -> Option<Vec<Tensor>> {
    let d = ferrite::passes::decompose::decompose(g).ok()?;
    let mut pr = Probe { p: d.clone() };
    let mut es: Vec<Option<ValueId>> = Vec::with_capacity(d.nodes.len());
    for v in 0..d.nodes.len() {
        let e = node_bound(&mut pr, &d, v, &es).ok()?;
        es.push(e);
    }
    let outs = d
        .outputs
        .iter()
        .map(|&o| match es[o.index()] {
            Some(e) => pr.fit(e, o),
            None => pr.or_zero(None, o),
        })
        .collect::<R<Vec<_>>>()
        .ok()?;
    pr.p.outputs = outs;
    pr.p.declared_outputs = None;
    ferrite_ir::interpret(&pr.p, inputs).ok()
}

//! The whole-pipeline differential check shared by `tests/empty.rs` and the `pipeline`
//! target of `tests/fuzz.rs`: one graph and its inputs through the public facade on every
//! target (the reference interpreter, the loop-IR evaluator, cpu fused and unfused at 1 and
//! 3 threads, sim fused and unfused), outputs compared with the interpreter under the
//! tolerances of the backends' own differential tests, and errors compared in kind: a user
//! error on one target must be a user error on all, and no target may report an internal
//! error or panic.
#![allow(dead_code)]

mod bounds;

use std::panic::{catch_unwind, AssertUnwindSafe};

use ferrite::{compile_ir, Options, Target};
use ferrite_ir::{DType, Graph, Mismatch, Op, Tensor};

pub use bounds::error_bounds;

/// How one target ended on one graph.
#[derive(Debug)]
pub enum Outcome {
    /// The outputs.
    Values(Vec<Tensor>),
    /// A user error (exit 1), compiling or running.
    User(String),
    /// An internal error (exit 2) or a panic: always a finding.
    Internal(String),
}

/// Every configuration the graph runs under besides the interpreter, by name.
pub fn configurations() -> Vec<(String, Options)> {
    let mut out = Vec::new();
    for fuse in [true, false] {
        let f = if fuse { "fused" } else { "unfused" };
        out.push((
            format!("loops {f}"),
            Options::default().target(Target::Loops).fuse(fuse),
        ));
        for threads in [1, 3] {
            out.push((
                format!("cpu {f} threads {threads}"),
                Options::default()
                    .target(Target::Cpu)
                    .fuse(fuse)
                    .threads(threads),
            ));
        }
        out.push((
            format!("sim {f}"),
            Options::default().target(Target::Sim).fuse(fuse),
        ));
    }
    out
}

/// Compiles and runs `g` under `options`, catching panics.
pub fn outcome(g: &Graph, inputs: &[Tensor], options: &Options) -> Outcome {
    let run = || -> Result<Vec<Tensor>, ferrite::Error> {
        let c = compile_ir(g, options)?;
        let ins: Vec<ferrite::Tensor> = inputs
            .iter()
            .map(|t| ferrite::Tensor::try_from(t.clone()))
            .collect::<Result<_, _>>()?;
        Ok(c.run(&ins)?.into_iter().map(|t| t.into_ir()).collect())
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(v)) => Outcome::Values(v),
        Ok(Err(e)) if e.is_internal() => Outcome::Internal(e.to_string()),
        Ok(Err(e)) => Outcome::User(e.to_string()),
        Err(p) => Outcome::Internal(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// The largest finite magnitude in `t`.
fn max_abs(t: &Tensor) -> f64 {
    t.to_f64()
        .into_iter()
        .filter(|x| x.is_finite())
        .fold(0.0, |m, x| m.max(x.abs()))
}

/// Compares one output with the interpreter's. Integers and bools exactly; floats with the
/// tolerances of `runtime/cpu/tests/differential.rs` (the dtype's, plus an absolute term
/// scaled by the output's magnitude) and, on the simulator, `runtime/accel/tests/lower.rs`'s.
pub fn close(got: &Tensor, want: &Tensor, sim: bool, has_matmul: bool) -> Result<(), String> {
    close_at(got, want, sim, has_matmul, want.ty.dtype, 0.0)
}

/// [`close`] with the tolerance of dtype `d` (a float output computed in a narrower dtype
/// and cast up carries that dtype's rounding), plus an absolute `slack` (see
/// [`cancellation`]).
fn close_at(
    got: &Tensor,
    want: &Tensor,
    sim: bool,
    has_matmul: bool,
    d: DType,
    slack: f64,
) -> Result<(), String> {
    mismatch_at(got, want, sim, has_matmul, d, slack).map_err(|e| e.to_string())
}

/// [`close_at`]'s comparison, with the worst element as a [`Mismatch`].
fn mismatch_at(
    got: &Tensor,
    want: &Tensor,
    sim: bool,
    has_matmul: bool,
    d: DType,
    slack: f64,
) -> Result<(), Mismatch> {
    let (rtol, atol) = if !d.is_float() {
        (0.0, 0.0)
    } else if sim {
        let r = match d {
            DType::F32 => 1e-4,
            _ => 2e-2,
        };
        (r, r * max_abs(want).max(1.0))
    } else {
        let (r, a) = match d {
            DType::F16 => (2e-3, 2e-3),
            DType::Bf16 => (1.6e-2, 1.6e-2),
            _ => (1e-4, 1e-5),
        };
        (r, a + if has_matmul { 2e-4 } else { 1e-4 } * max_abs(want))
    };
    got.check_close(want, rtol, atol + slack)
}

/// The dtype whose tolerance a float output of `g` is compared with: `want`'s own, or the
/// narrowest float dtype the graph computes in (an f16 `sin` cast to f32 is an f16 result).
pub fn precision(g: &Graph, want: DType) -> DType {
    if !want.is_float() {
        return want;
    }
    let narrow = |d: DType| match d {
        DType::Bf16 => 2,
        DType::F16 => 1,
        _ => 0,
    };
    g.nodes
        .iter()
        .map(|n| n.ty.dtype)
        .chain([want])
        .max_by_key(|&d| narrow(d))
        .filter(|&d| narrow(d) > 0)
        .unwrap_or(want)
}

/// Whether `g` computes through a matmul or a reduction. Their f32 accumulation, and the
/// scalar factors the optimizer moves through a matmul (as ONNX Runtime's MatMulScaleFusion
/// does), depend on order around infinities, NaN and underflow: a partial sum that
/// overflows, or a factor that flushes an operand to 0 before it meets an infinity, gives
/// inf or NaN in one order and a finite value in another (ARCHITECTURE, accumulation
/// policy).
pub fn order_dependent(g: &Graph) -> bool {
    g.nodes.iter().any(|n| accumulates(&n.op))
}

/// A matmul or a reduction (composites built on one included): an op whose f32 result
/// depends on the order it accumulates in.
fn accumulates(op: &Op) -> bool {
    matches!(
        op,
        Op::MatMul
            | Op::Reduce { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
    )
}

/// Which outputs of `g` take a discontinuous function of an inexact value (a
/// comparison, `where`'s condition, a cast to an integer or bool, floor/ceil/sign, an
/// argmax, sin/cos, a rounding division) computed from a matmul or a reduction (the
/// accumulation policy) or from a transcendental function (computed within a few ulp,
/// and in its far tail within a tiny absolute error: `gelu(-7.14)` is `-3.4e-12` in the
/// interpreter's f64 and 0 in f32 `0.5x(1 + erf(x/sqrt 2))`, as in PyTorch's CPU kernel).
/// There a legitimate rounding difference flips a boolean (`or(gelu(x), ..)`) or picks
/// another branch, so those outputs are not compared; every other output is.
pub fn flips(g: &Graph) -> Vec<bool> {
    use ferrite_ir::{BinaryOp as B, UnaryOp as U};
    let n = g.nodes.len();
    let (mut od, mut flip) = (vec![false; n], vec![false; n]);
    for (v, node) in g.nodes.iter().enumerate() {
        let ins: Vec<usize> = node.inputs.iter().map(|x| x.index()).collect();
        let any_od = ins.iter().any(|&i| od[i]);
        flip[v] = ins.iter().any(|&i| flip[i]);
        od[v] = any_od || accumulates(&node.op) || transcendental(&node.op);
        let discontinuous = match &node.op {
            Op::Binary(b) => matches!(
                b,
                B::Eq
                    | B::Ne
                    | B::Lt
                    | B::Le
                    | B::Gt
                    | B::Ge
                    | B::And
                    | B::Or
                    | B::FloorDivide
                    | B::TruncDivide
                    | B::Remainder
                    | B::Fmod
            ),
            Op::Unary(u) => matches!(u, U::Floor | U::Ceil | U::Sign | U::Not | U::Sin | U::Cos),
            Op::Cast { to } => !to.is_float(),
            Op::ArgReduce { .. } => true,
            Op::Where => od[ins[0]],
            _ => false,
        };
        if discontinuous && any_od {
            flip[v] = true;
        }
    }
    g.outputs.iter().map(|o| flip[o.index()]).collect()
}

/// The rounding error an f32 accumulation may make in `g` on `inputs`, by the textbook
/// bound: a sum of `n` terms accumulated in any order is off by at most about `n * u`
/// times the sum of the terms' magnitudes (`u` the unit roundoff of the accumulator),
/// which cancellation makes far larger than the result: `sum([0, 2^31, 8, 2, -2^31])` is
/// 10 in the interpreter's f64 and 0 in f32 from the left, both allowed (ARCHITECTURE,
/// accumulation policy). The interpreter evaluates, for every float `sum`, `mean` and
/// `matmul`, the same reduction of the operands' absolute values; the largest result
/// times its length and `2u` is the slack. 0 when `g` accumulates nothing.
pub fn cancellation(g: &Graph, inputs: &[Tensor]) -> f64 {
    use ferrite_ir::{ReduceOp, UnaryOp};
    let mut probe = g.clone();
    let mut lengths = Vec::new();
    let mut outs = Vec::new();
    for v in 0..g.nodes.len() {
        let node = &g.nodes[v];
        if !node.ty.dtype.is_float() {
            continue;
        }
        let u = if node.ty.dtype == DType::F64 {
            2f64.powi(-53)
        } else {
            2f64.powi(-24)
        };
        let operand = |i: usize| g.ty(node.inputs[i]).numel();
        let added = match &node.op {
            Op::Reduce {
                op: ReduceOp::Sum | ReduceOp::Mean,
                ..
            } => {
                let a = probe.add(Op::Unary(UnaryOp::Abs), &[node.inputs[0]], None);
                let n = operand(0) / node.ty.numel().max(1);
                a.and_then(|a| probe.add(node.op.clone(), &[a], None))
                    .map(|r| (r, n))
            }
            Op::MatMul => {
                let k = *g.ty(node.inputs[0]).shape.last().unwrap_or(&1);
                let a = probe.add(Op::Unary(UnaryOp::Abs), &[node.inputs[0]], None);
                let b = probe.add(Op::Unary(UnaryOp::Abs), &[node.inputs[1]], None);
                match (a, b) {
                    (Ok(a), Ok(b)) => probe.add(Op::MatMul, &[a, b], None).map(|r| (r, k)),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            _ => continue,
        };
        if let Ok((r, n)) = added {
            outs.push(r);
            lengths.push(2.0 * u * n as f64);
        }
    }
    if outs.is_empty() {
        return 0.0;
    }
    probe.outputs = outs;
    match ferrite_ir::interpret(&probe, inputs) {
        Ok(values) => values
            .iter()
            .zip(&lengths)
            .map(|(t, l)| l * max_abs(t))
            .fold(0.0, f64::max),
        Err(_) => 0.0,
    }
}

/// An elementwise function the backends compute within a few ulp of the interpreter's
/// correctly rounded value (vector math, `docs/graph-format.md`'s numerical semantics).
fn transcendental(op: &Op) -> bool {
    use ferrite_ir::{BinaryOp as B, UnaryOp as U};
    match op {
        Op::Unary(u) => matches!(
            u,
            U::Exp
                | U::Log
                | U::Rsqrt
                | U::Sin
                | U::Cos
                | U::Tanh
                | U::Sigmoid
                | U::Gelu
                | U::GeluTanh
                | U::Silu
                | U::Erf
                | U::Erfc
        ),
        Op::Binary(b) => *b == B::Pow,
        _ => false,
    }
}

/// [`close`], except that in an [`order_dependent`] graph an element that is inf or NaN on
/// either side is not compared (every finite element still is), and the absolute tolerance
/// grows by `slack`, the [`cancellation`] bound of its accumulations.
pub fn close_where_finite(
    got: &Tensor,
    want: &Tensor,
    sim: bool,
    has_matmul: bool,
    order_dependent: bool,
    precision: DType,
    slack: f64,
) -> Result<(), String> {
    let first = close_at(got, want, sim, has_matmul, precision, slack);
    if first.is_ok() || !order_dependent || !want.ty.dtype.is_float() || got.ty != want.ty {
        return first;
    }
    let (mut g, mut w) = (got.to_f64(), want.to_f64());
    for (a, b) in g.iter_mut().zip(w.iter_mut()) {
        if !a.is_finite() || !b.is_finite() {
            (*a, *b) = (0.0, 0.0);
        }
    }
    let (g, w) = (
        Tensor::from_f64(&got.ty, &g),
        Tensor::from_f64(&want.ty, &w),
    );
    close_at(&g, &w, sim, has_matmul, precision, slack)
}

/// [`close`] with a per-element error `bound` ([`error_bounds`], of `want`'s shape): an
/// element whose bound is infinite or NaN is unconditioned and not compared, nor, in an
/// [`order_dependent`] graph, one that is inf or NaN on either side; every other element
/// is within the output's tolerance plus its bound.
pub fn close_within(
    got: &Tensor,
    want: &Tensor,
    sim: bool,
    has_matmul: bool,
    order_dependent: bool,
    precision: DType,
    bound: &Tensor,
) -> Result<(), String> {
    if !want.ty.dtype.is_float() || got.ty != want.ty || bound.ty.shape != want.ty.shape {
        return close_at(got, want, sim, has_matmul, precision, 0.0);
    }
    let (g, w, b) = (got.to_f64(), want.to_f64(), bound.to_f64());
    let (mut g2, mut w2) = (g.clone(), w.clone());
    for i in 0..g.len() {
        let (x, y, e) = (g[i], w[i], b[i]);
        if !e.is_finite() || (order_dependent && !(x.is_finite() && y.is_finite())) {
            (g2[i], w2[i]) = (0.0, 0.0);
        } else if x.is_finite() && y.is_finite() {
            // Move `got` toward `want` by the bound: what is left is held to the tolerance.
            let d = x - y;
            g2[i] = if d.abs() <= e {
                y
            } else {
                y + d.signum() * (d.abs() - e)
            };
        }
    }
    let (g2, w2) = (
        Tensor::from_f64(&got.ty, &g2),
        Tensor::from_f64(&want.ty, &w2),
    );
    match mismatch_at(&g2, &w2, sim, has_matmul, precision, 0.0) {
        Ok(()) => Ok(()),
        Err(Mismatch::Element {
            index, rtol, atol, ..
        }) => Err(format!(
            "element {index} is {} but expected {} (abs error {:e}, error bound {:e}, then \
             rtol {rtol:e}, atol {atol:e})",
            g[index],
            w[index],
            (g[index] - w[index]).abs(),
            b[index]
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Compares one configuration's outputs `got` with the interpreter's `want`: under the
/// per-element [`error_bounds`] when they could be computed (`bounds`), else under the
/// whole-graph [`cancellation`] slack. `Err` names the first output that differs.
pub fn compare(
    g: &Graph,
    got: &[Tensor],
    want: &[Tensor],
    sim: bool,
    bounds: Option<&[Tensor]>,
    slack: f64,
) -> Result<(), String> {
    let has_matmul = g.nodes.iter().any(|n| matches!(n.op, Op::MatMul));
    let order = order_dependent(g);
    let flipped = flips(g);
    if got.len() != want.len() {
        return Err(format!("{} outputs, want {}", got.len(), want.len()));
    }
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        if flipped[i] {
            continue;
        }
        let at = precision(g, b.ty.dtype);
        match bounds {
            Some(e) => close_within(a, b, sim, has_matmul, order, at, &e[i]),
            None => close_where_finite(a, b, sim, has_matmul, order, at, slack),
        }
        .map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// What [`check`] saw: how many configurations ran to values and how many agreed on a user
/// error.
#[derive(Debug, Default, Clone, Copy)]
pub struct Agreement {
    pub values: usize,
    pub user_errors: usize,
}

/// Runs `g` on the interpreter and on every [`configurations`] entry and compares. `Err`
/// describes the first divergence (or internal error) per configuration.
pub fn check(g: &Graph, inputs: &[Tensor]) -> Result<Agreement, String> {
    let want = outcome(g, inputs, &Options::default().target(Target::Interp));
    let bounds = error_bounds(g, inputs);
    let slack = if bounds.is_none() && order_dependent(g) {
        cancellation(g, inputs)
    } else {
        0.0
    };
    let mut problems = Vec::new();
    let mut seen = Agreement::default();
    if let Outcome::Internal(e) = &want {
        problems.push(format!("interp: internal error: {e}"));
    }
    for (name, options) in configurations() {
        let got = outcome(g, inputs, &options);
        let sim = options.target == Target::Sim;
        match (&want, got) {
            (_, Outcome::Internal(e)) => problems.push(format!("{name}: internal error: {e}")),
            (Outcome::Values(w), Outcome::Values(v)) => {
                seen.values += 1;
                if let Err(e) = compare(g, &v, w, sim, bounds.as_deref(), slack) {
                    problems.push(format!("{name}: {e}"));
                }
            }
            (Outcome::User(_), Outcome::User(_)) => seen.user_errors += 1,
            (Outcome::Values(_), Outcome::User(e)) => {
                problems.push(format!("{name}: user error where interp runs: {e}"))
            }
            (Outcome::User(e), Outcome::Values(_)) => problems.push(format!(
                "{name}: runs where interp reports a user error ({e})"
            )),
            (Outcome::Internal(_), _) => {}
        }
    }
    if problems.is_empty() {
        Ok(seen)
    } else {
        Err(problems.join("\n"))
    }
}

/// The exclusive bound of each parameter's values when it holds the indices of an
/// `index_select` or `gather` (the extent it indexes, at least 1 so an index into an empty
/// axis is out of range on every target).
pub fn index_bounds(g: &Graph) -> Vec<Option<usize>> {
    let mut bounds = vec![None; g.params.len()];
    let mut bound = |v: ferrite_ir::ValueId, extent: usize| {
        if let Some(i) = g.params.iter().position(|&p| p == v) {
            bounds[i] = Some(bounds[i].map_or(extent, |b: usize| b.min(extent)));
        }
    };
    for n in &g.nodes {
        let axis = match n.op {
            Op::IndexSelect { axis } | Op::Gather { axis } | Op::IndexAdd { axis } => axis,
            // Rows of the table; offsets all 0 (every bag empty but the last, which
            // holds every index) are valid whatever the lengths.
            Op::EmbeddingBag { .. } => {
                bound(n.inputs[1], g.ty(n.inputs[0]).shape[0].max(1));
                bound(n.inputs[2], 1);
                continue;
            }
            _ => continue,
        };
        let x = g.ty(n.inputs[0]);
        let extent = x.shape[axis.rem_euclid(x.rank().max(1) as i64) as usize].max(1);
        bound(n.inputs[1], extent);
    }
    bounds
}

//! ONNX ops to IR ops, one file per family. Each mapping is exact: an op, or an
//! attribute value, that the IR cannot express exactly is refused with a message
//! that says what, never approximated.

mod attention;
mod bits;
pub(crate) mod control;
mod creation;
mod elementwise;
mod fold;
mod indexing;
mod losses;
mod movement;
mod nn;
mod order;
mod quant;
mod recurrent;
mod reduce;
mod resize;
mod scatter;
mod select;
mod spatial;
mod spectral;
pub(crate) mod training;
mod window;

use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};

/// Imports one node of the default domain; one value per declared result.
pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    let op = n.proto.op_type();
    if let Some(r) = elementwise::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = reduce::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = movement::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = nn::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = losses::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = attention::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = creation::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = indexing::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = spatial::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = window::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = resize::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = order::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = scatter::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = quant::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = select::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = spectral::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = recurrent::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = bits::import(ctx, n, op)? {
        return Ok(r);
    }
    if let Some(r) = fold::import(ctx, n, op)? {
        return Ok(r);
    }
    match op {
        o if o.starts_with("Sequence")
            || o.starts_with("Optional")
            || o == "SplitToSequence"
            || o == "ConcatFromSequence" =>
        {
            unsupported!("sequence and optional types are not supported")
        }
        _ => unsupported!("op {op} is not supported"),
    }
}

/// One result.
pub(crate) fn one(v: Val) -> OpResult<Option<Vec<Option<Val>>>> {
    Ok(Some(vec![Some(v)]))
}

// Small builders over `Ctx::op`, so the mappings read as the formulas they are.
impl Ctx {
    pub fn un(&mut self, u: UnaryOp, x: &Val) -> OpResult<Val> {
        self.op(Op::Unary(u), &[x])
    }

    pub fn bin(&mut self, b: BinaryOp, x: &Val, y: &Val) -> OpResult<Val> {
        self.op(Op::Binary(b), &[x, y])
    }

    /// `x <b> v`, `v` a scalar of `x`'s dtype.
    pub fn bin_s(&mut self, b: BinaryOp, x: &Val, v: f64) -> OpResult<Val> {
        let s = self.scalar(v, self.dtype(x));
        self.bin(b, x, &s)
    }

    pub fn add(&mut self, x: &Val, y: &Val) -> OpResult<Val> {
        self.bin(BinaryOp::Add, x, y)
    }

    pub fn sub(&mut self, x: &Val, y: &Val) -> OpResult<Val> {
        self.bin(BinaryOp::Sub, x, y)
    }

    pub fn mul(&mut self, x: &Val, y: &Val) -> OpResult<Val> {
        self.bin(BinaryOp::Mul, x, y)
    }

    pub fn div(&mut self, x: &Val, y: &Val) -> OpResult<Val> {
        self.bin(BinaryOp::Div, x, y)
    }

    pub fn select(&mut self, c: &Val, a: &Val, b: &Val) -> OpResult<Val> {
        self.op(Op::Where, &[c, a, b])
    }

    pub fn cast(&mut self, x: &Val, to: DType) -> OpResult<Val> {
        if self.dtype(x) == to {
            return Ok(x.clone());
        }
        self.op(Op::Cast { to }, &[x])
    }

    pub fn reshape(&mut self, x: &Val, shape: &[usize]) -> OpResult<Val> {
        if self.shape(x) == shape {
            return Ok(x.clone());
        }
        let shape = shape.iter().map(|&d| d as i64).collect();
        self.op(Op::Reshape { shape }, &[x])
    }

    pub fn permute(&mut self, x: &Val, dims: &[usize]) -> OpResult<Val> {
        if dims.iter().enumerate().all(|(i, &d)| i == d) {
            return Ok(x.clone());
        }
        let dims = dims.iter().map(|&d| d as i64).collect();
        self.op(Op::Permute { dims }, &[x])
    }

    /// A reduction over `axes` (every axis when empty), in `x`'s dtype (the IR widens integer sums).
    pub fn reduce(&mut self, r: ReduceOp, x: &Val, axes: &[usize], keep: bool) -> OpResult<Val> {
        let dtype = self.dtype(x);
        let axes = if axes.is_empty() {
            None
        } else {
            Some(axes.iter().map(|&a| a as i64).collect())
        };
        let y = self.op(
            Op::Reduce {
                op: r,
                axes,
                keepdim: keep,
            },
            &[x],
        )?;
        self.cast(&y, dtype)
    }

    /// `arange(start, end, step)` as a graph op, never folded: index tensors built
    /// this way stay expressible without constant tensors.
    pub fn arange(&mut self, start: i64, end: i64, step: i64) -> OpResult<Val> {
        let op = Op::Arange {
            start: start as f64,
            end: end as f64,
            step: step as f64,
            dtype: DType::I64,
        };
        Ok(Val::Ir(self.g.add(op, &[], None)?))
    }
}

/// Normalizes an ONNX axis (negative counts from the end) against `rank`.
pub(crate) fn axis(a: i64, rank: usize, what: &str) -> OpResult<usize> {
    let r = rank as i64;
    if a < -r || a >= r {
        invalid!("{what} {a} is out of range for rank {rank}");
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Normalizes a list of axes; duplicates are an error.
pub(crate) fn axes(list: &[i64], rank: usize, what: &str) -> OpResult<Vec<usize>> {
    let mut out = Vec::with_capacity(list.len());
    for &a in list {
        let a = axis(a, rank, what)?;
        if out.contains(&a) {
            invalid!("{what} {a} is repeated");
        }
        out.push(a);
    }
    Ok(out)
}

/// The ONNX dtype attribute `name` as a Ferrite dtype.
pub(crate) fn dtype_attr(n: &NodeIn, name: &str, default: Option<DType>) -> OpResult<DType> {
    if !n.has(name) {
        return match default {
            Some(d) => Ok(d),
            None => invalid!("attribute `{name}` is required"),
        };
    }
    crate::tensor::dtype_of(n.int(name, 0)? as i32).map_err(crate::error::OpError::Unsupported)
}

//! The e-class analysis: every e-class knows its tensor type and, when all its elements are one
//! known value, that value.
//!
//! Types come from `ferrite_ir::infer`, the same typing rules the verifier uses, so a rewrite
//! can be checked before it is added: a rule's right-hand side must infer to exactly the type of
//! the class it joins (see `rules::Term`). Constant values follow the reference interpreter's
//! arithmetic: computed in f64 and rounded to the result dtype once per op. Integer results are
//! folded only when they are exact (no wrap-around), and ops whose result the interpreter might
//! reject at run time (index ops) are never folded, so folding cannot hide an error.

use super::language::{OpEntry, OpTable, TensorLang};
use egg::{Analysis, DidMerge, EGraph, Id};
use ferrite_ir::infer::infer;
use ferrite_ir::loops::{scalar, Value};
use ferrite_ir::{promote, BinaryOp, DType, Op, ReduceOp, Scalar, Tensor, TensorType, UnaryOp};

/// The analysis state: the op table of the e-graph, and any contradiction found while merging.
#[derive(Default, Debug)]
pub struct TensorAnalysis {
    /// Every op the e-graph's nodes refer to.
    pub ops: OpTable,
    /// Merges of classes of different types. Rules are type-checked, so this never happens; the
    /// optimizer fails loudly if it does.
    pub conflicts: Vec<String>,
}

/// What is known about an e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassData {
    /// The tensor type of every node in the class (`None` only if inference failed, which a
    /// verified graph and type-checked rules never cause).
    pub ty: Option<TensorType>,
    /// The value of every element, when it is one known value.
    pub konst: Option<f64>,
}

impl Analysis<TensorLang> for TensorAnalysis {
    type Data = ClassData;

    fn make(eg: &mut EGraph<TensorLang, Self>, enode: &TensorLang, _id: Id) -> ClassData {
        let eg: &EGraph<TensorLang, Self> = eg;
        let entry = eg.analysis.ops.get(enode.op);
        let inputs: Vec<&ClassData> = enode.children.iter().map(|&c| &eg[c].data).collect();
        let ty = node_type(entry, &inputs);
        let konst = ty.as_ref().and_then(|ty| fold(entry, &inputs, ty));
        ClassData { ty, konst }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        let mut a_changed = false;
        let mut b_differs = false;
        match (&a.ty, b.ty) {
            (None, Some(t)) => {
                a.ty = Some(t);
                a_changed = true;
            }
            (Some(_), None) => b_differs = true,
            (Some(x), Some(y)) if *x != y => {
                self.conflict(format!("merged classes of types {x} and {y}"))
            }
            _ => {}
        }
        // Two folds of one value can differ in the last bits where a rule approximates (7 / 3
        // against 7 * f32(1/3)): that is within the rule's tolerance, not a contradiction. The
        // class keeps the value it had.
        match (a.konst, b.konst) {
            (None, Some(v)) => {
                a.konst = Some(v);
                a_changed = true;
            }
            (Some(x), y) if y.is_none_or(|y| !same_value(x, y)) => b_differs = true,
            _ => {}
        }
        DidMerge(a_changed, b_differs)
    }
}

impl TensorAnalysis {
    fn conflict(&mut self, message: String) {
        // One is enough to fail; keep a few for the error message.
        if self.conflicts.len() < 8 {
            self.conflicts.push(message);
        }
    }
}

/// True if two constant values are the same (NaN equals NaN here: it is one value to folding).
pub fn same_value(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The result type of an e-node whose operands have the given data.
pub fn node_type(entry: &OpEntry, inputs: &[&ClassData]) -> Option<TensorType> {
    if let Some(ty) = &entry.leaf_ty {
        return Some(ty.clone());
    }
    let tys: Option<Vec<&TensorType>> = inputs.iter().map(|d| d.ty.as_ref()).collect();
    infer(&entry.op, &tys?).ok()
}

/// Largest integer magnitude that f64 arithmetic on integers still gets exactly right.
const EXACT_INT: f64 = 9_007_199_254_740_992.0; // 2^53

/// `v` rounded to `dtype` as the interpreter stores it, or `None` if an integer dtype cannot hold
/// it exactly (not integral, out of range, or beyond exact f64 integers).
pub fn fit(v: f64, dtype: DType) -> Option<f64> {
    match dtype.int_range() {
        _ if dtype.is_float() => {
            Some(Tensor::from_f64(&TensorType::scalar(dtype), &[v]).to_f64()[0])
        }
        // Every range end below 2^53 is exact in f64; wider ranges are cut at 2^53.
        Some((lo, hi)) => (v.fract() == 0.0
            && v >= (lo as f64).max(-EXACT_INT)
            && v <= (hi as f64).min(EXACT_INT)
            && v.abs() < EXACT_INT)
            .then_some(v),
        None => (v == 0.0 || v == 1.0).then_some(v),
    }
}

/// Converts a value of dtype `from` to the wider dtype `to` (type promotion never narrows).
fn widen(v: f64, from: DType, to: DType) -> Option<f64> {
    if from == to {
        Some(v)
    } else {
        fit(v, to)
    }
}

fn truth(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// The constant value of an e-node, when its operands' values make it one.
fn fold(entry: &OpEntry, inputs: &[&ClassData], out: &TensorType) -> Option<f64> {
    match &entry.op {
        // An integer literal of a float dtype rounds once, straight from the integer
        // (`as f64` first could round twice beyond 2^53), as the interpreter converts it.
        Op::Literal {
            value: Scalar::Int(v),
        } if out.dtype.is_float() => {
            return match scalar::cast(Value::Int(*v as i128), out.dtype) {
                Value::Float(f) => Some(f),
                _ => None,
            }
        }
        Op::Literal { value } => return fit(value.as_f64(), out.dtype),
        Op::Full { value, .. } => return fit(*value, out.dtype),
        // A small constant whose elements are all equal folds like a `full`; a large one
        // is a weight, a leaf (reading it to find out would cost what it saves).
        Op::Constant(c) if c.is_small() => {
            let values = c.tensor().to_f64();
            let first = *values.first()?;
            let uniform = values.iter().all(|v| v.to_bits() == first.to_bits());
            return if uniform { fit(first, out.dtype) } else { None };
        }
        _ => {}
    }
    if inputs.is_empty() {
        return None;
    }
    let mut vals = Vec::with_capacity(inputs.len());
    for d in inputs {
        vals.push((d.ty.as_ref()?, d.konst?));
    }
    let (x_ty, x) = vals[0];
    match &entry.op {
        Op::Unary(u) => fold_unary(*u, x, out.dtype),
        Op::Binary(b) => fold_binary(*b, vals[0], vals[1], out.dtype),
        Op::Where => {
            let (ty, v) = if x != 0.0 { vals[1] } else { vals[2] };
            widen(v, ty.dtype, out.dtype)
        }
        Op::Cast { to } => cast_value(x, x_ty.dtype, *to),
        Op::Reduce { op, .. } => {
            let n = x_ty.numel().checked_div(out.numel()).unwrap_or(0) as f64;
            // An f64 sum or product rounds at every step of the interpreter's f64
            // accumulation, which `x * n` (one rounding) does not reproduce.
            if out.dtype == DType::F64 && n > 1.0 && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
                return None;
            }
            match op {
                ReduceOp::Sum => fit(x * n, out.dtype),
                ReduceOp::Prod if out.dtype.is_float() => fit(x.powf(n), out.dtype),
                ReduceOp::Prod => {
                    let e = u32::try_from(n as u64).ok()?;
                    fit((x as i64).checked_pow(e)? as f64, out.dtype)
                }
                ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean => widen(x, x_ty.dtype, out.dtype),
            }
        }
        // Every element is equal, so the first one is an extremum.
        Op::ArgReduce { .. } => Some(0.0),
        Op::MatMul => {
            let k = *x_ty.shape.last()? as f64;
            // As for sums: an f64 dot product rounds at every step.
            if out.dtype == DType::F64 && k > 1.0 {
                return None;
            }
            fit(x * vals[1].1 * k, out.dtype)
        }
        Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Slice { .. } => Some(x),
        Op::Concat { .. } => vals.iter().all(|&(_, v)| same_value(v, x)).then_some(x),
        Op::Pad { pads, value } => {
            let crops_only = pads.iter().all(|&p| p <= 0);
            (crops_only || fit(*value, out.dtype).is_some_and(|p| same_value(p, x))).then_some(x)
        }
        _ => None,
    }
}

fn fold_unary(u: UnaryOp, x: f64, out: DType) -> Option<f64> {
    let v = match u {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Sign if x.is_nan() => x,
        UnaryOp::Sign => truth(x > 0.0) - truth(x < 0.0),
        UnaryOp::Not => truth(x == 0.0),
        // Composites and erf: the interpreter's own formulas decide their last bits.
        _ => return None,
    };
    fit(v, out)
}

fn fold_binary(
    op: BinaryOp,
    (ta, a): (&TensorType, f64),
    (tb, b): (&TensorType, f64),
    out: DType,
) -> Option<f64> {
    let common = promote(ta.dtype, tb.dtype);
    let a = widen(a, ta.dtype, common)?;
    let b = widen(b, tb.dtype, common)?;
    let nan = a.is_nan() || b.is_nan();
    let v = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow if common.is_float() => a.powf(b),
        BinaryOp::Pow => {
            // Integer powers: exact, and a negative exponent is a run-time error.
            let e = u32::try_from(b as i64).ok()?;
            (a as i64).checked_pow(e)? as f64
        }
        // The divisions fold with the interpreter's own definition; an integer zero
        // divisor is a run-time error, so it is left to run.
        BinaryOp::FloorDivide | BinaryOp::TruncDivide | BinaryOp::Remainder | BinaryOp::Fmod => {
            use ferrite_ir::loops::{scalar, Value};
            let v = if common.is_float() {
                scalar::binary(op, Value::Float(a), Value::Float(b), common)
            } else {
                scalar::binary(op, Value::Int(a as i128), Value::Int(b as i128), common)
            };
            match v.ok()? {
                Value::Float(v) => v,
                Value::Int(v) => v as f64,
                Value::Bool(_) => return None,
            }
        }
        BinaryOp::Maximum if nan => f64::NAN,
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum if nan => f64::NAN,
        BinaryOp::Minimum => a.min(b),
        BinaryOp::Eq => truth(a == b),
        BinaryOp::Ne => truth(a != b),
        BinaryOp::Lt => truth(a < b),
        BinaryOp::Le => truth(a <= b),
        BinaryOp::Gt => truth(a > b),
        BinaryOp::Ge => truth(a >= b),
        BinaryOp::And => truth(a != 0.0 && b != 0.0),
        BinaryOp::Or => truth(a != 0.0 || b != 0.0),
        // The bitwise ops fold with the interpreter's own definition, on the exact integers
        // (every integer constant here is within 2^53; `fit` checks the result).
        BinaryOp::BitwiseAnd
        | BinaryOp::BitwiseOr
        | BinaryOp::BitwiseXor
        | BinaryOp::LeftShift
        | BinaryOp::RightShift => {
            use ferrite_ir::loops::{scalar, Value};
            let v = if common == DType::Bool {
                scalar::binary(op, Value::Bool(a != 0.0), Value::Bool(b != 0.0), common)
            } else if common.is_float() {
                return None;
            } else {
                scalar::binary(op, Value::Int(a as i128), Value::Int(b as i128), common)
            };
            match v.ok()? {
                Value::Int(v) => v as f64,
                Value::Bool(v) => truth(v),
                Value::Float(_) => return None,
            }
        }
    };
    // Bool arithmetic (mul, maximum, minimum) stays within {0, 1}; `fit` checks the rest.
    fit(v, out)
}

/// `cast(x, to)` of a constant; float -> int truncates, and values the cast would saturate or
/// that are NaN are not folded (the interpreter's choice there is not ours to copy).
fn cast_value(x: f64, from: DType, to: DType) -> Option<f64> {
    if to.is_float() {
        fit(x, to)
    } else if x.is_nan() {
        None
    } else if to == DType::Bool {
        Some(truth(x != 0.0))
    } else if from.is_float() {
        fit(x.trunc(), to)
    } else {
        fit(x, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_rounds_floats_and_guards_ints() {
        assert_eq!(fit(0.1, DType::F32), Some(0.1f32 as f64));
        assert_eq!(fit(1.0 / 3.0, DType::F16), Some(0.333251953125));
        assert_eq!(fit(2.5, DType::I32), None);
        assert_eq!(fit(3e9, DType::I32), None);
        assert_eq!(fit(-7.0, DType::I64), Some(-7.0));
        assert_eq!(fit(2.0, DType::Bool), None);
    }

    #[test]
    fn binary_folding_follows_promotion() {
        let f32s = TensorType::scalar(DType::F32);
        let i32s = TensorType::scalar(DType::I32);
        // int / int is a true division into f32.
        assert_eq!(
            fold_binary(BinaryOp::Div, (&i32s, 7.0), (&i32s, 2.0), DType::F32),
            Some(3.5)
        );
        // Integer divisions fold exactly, except by zero (a run-time error).
        assert_eq!(
            fold_binary(
                BinaryOp::FloorDivide,
                (&i32s, -7.0),
                (&i32s, 2.0),
                DType::I32
            ),
            Some(-4.0)
        );
        assert_eq!(
            fold_binary(BinaryOp::Remainder, (&i32s, 7.0), (&i32s, -2.0), DType::I32),
            Some(-1.0)
        );
        assert_eq!(
            fold_binary(BinaryOp::Fmod, (&i32s, 7.0), (&i32s, 0.0), DType::I32),
            None
        );
        assert_eq!(
            fold_binary(
                BinaryOp::TruncDivide,
                (&f32s, -7.5),
                (&f32s, 2.0),
                DType::F32
            ),
            Some(-3.0)
        );
        // Overflowing i32 arithmetic is left to run time (it wraps there).
        assert_eq!(
            fold_binary(
                BinaryOp::Mul,
                (&i32s, 65536.0),
                (&i32s, 65536.0),
                DType::I32
            ),
            None
        );
        assert_eq!(
            fold_binary(BinaryOp::Pow, (&i32s, 2.0), (&i32s, -1.0), DType::I32),
            None
        );
        let m = fold_binary(
            BinaryOp::Maximum,
            (&f32s, f64::NAN),
            (&f32s, 1.0),
            DType::F32,
        );
        assert!(m.unwrap().is_nan());
        assert_eq!(
            fold_binary(BinaryOp::Lt, (&i32s, 1.0), (&f32s, 1.5), DType::Bool),
            Some(1.0)
        );
    }

    #[test]
    fn casts_truncate_and_refuse_to_saturate() {
        assert_eq!(cast_value(-2.7, DType::F32, DType::I32), Some(-2.0));
        assert_eq!(cast_value(1e10, DType::F32, DType::I32), None);
        assert_eq!(cast_value(f64::NAN, DType::F32, DType::I64), None);
        assert_eq!(cast_value(0.5, DType::F32, DType::Bool), Some(1.0));
    }
}

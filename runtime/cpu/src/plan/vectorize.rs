//! The SIMD decision for the innermost loop of a stage.
//!
//! The innermost loop of a loop nest runs as `f32x4`/`i32x4` code when every node that
//! varies with its variable `v` has a lane-wise form and every memory access at that
//! level is contiguous in `v`: its index is `rest + 1*v` with `rest` fixed in the loop
//! (the coefficient is read off the index expression; `v` must not occur inside a floor
//! division or modulo). Values fixed in the loop (broadcast loads, accumulators of
//! earlier stages, constants) are splatted once before it. Anything else keeps the whole
//! loop scalar, and the reason is reported: data-dependent (gathered) accesses, strided
//! stores and loads of other strides than 2 and 3 (which a row's loop takes, as two vector
//! loads and a shuffle), `f16`/`bf16`/`i64` arithmetic, argmax, integer reductions. Guarded
//! (padded) loads are vector code in a row's loop when their bounds are affine in `v`.
//!
//! Lanes are `f32x4` for `f32`, `i32x4` for `i32` and for `i64` values provably within
//! `i32` (iotas, checked indices, small constants: see [`narrow_i64`]), and `i32x4` masks
//! (all ones or zero) for `bool`.

use super::analysis::split_linear;
use ferrite_ir::loops::{
    AccId, Block, ExprOp, Extents, IndexExpr, ReduceKind, Reduction, StoreOp, Value, Var,
};
use ferrite_ir::{BinaryOp, DType, UnaryOp};

/// How a value is held in a 128-bit vector.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lanes {
    /// Four `f32`.
    F32,
    /// Four `i32` (an `i32` value, or an `i64` value known to fit).
    I32,
    /// Four all-ones or all-zeros `i32` lanes: a `bool`.
    Mask,
}

/// Why a loop stays scalar, for the stage report (`t3: guarded (padded) load`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotVectorized(pub String);

impl std::fmt::Display for NotVectorized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the innermost loop of one stage needs to run as vector code.
#[derive(Clone, Debug)]
pub struct VectorPlan {
    /// The lane form of every node used by vector code (computed per lane, or splatted).
    pub lanes: Vec<Option<Lanes>>,
    /// Nodes fixed in the vector loop whose value vector code uses: splatted before it.
    pub splats: Vec<usize>,
    /// Loads whose index moves by 2 or 3 elements per lane, with that stride: each
    /// vector is two vector loads (of the elements from its first lane's to its last
    /// lane's, so no more is read than the lanes span) and one shuffle of their lanes.
    pub strided: Vec<(usize, i64)>,
}

/// The largest load stride that vector code takes: a vector of stride `s` spans `3s + 1`
/// elements, which two 4-lane loads cover up to `s = 3`.
pub const MAX_LOAD_STRIDE: i64 = 3;

/// The facts about one stage that the decision reads.
pub struct StageFacts<'a> {
    /// The stage body.
    pub body: &'a Block,
    /// The loop level of every node (0: fixed for the stage).
    pub levels: &'a [usize],
    /// Which nodes are emitted at all.
    pub live: &'a [bool],
    /// Which `i64` nodes provably fit in `i32`.
    pub narrow: &'a [bool],
    /// Which guarded loads need their index clamped (the index is not provably in bounds).
    pub clamped: &'a [bool],
    /// The innermost loop level and its variable.
    pub level: usize,
    /// The innermost loop variable.
    pub var: Var,
    /// The level of an index expression.
    pub index_level: &'a dyn Fn(&IndexExpr) -> usize,
    /// The reductions of a reduce stage (empty for a store stage).
    pub reductions: &'a [Reduction],
    /// The writes of a store stage (empty for a reduce stage).
    pub stores: &'a [StoreOp],
    /// Whether guarded loads may be vector code (a row's innermost loop, whose lanes the
    /// emitter tests at a group's ends); lanes across outer points keep them refused.
    pub vector_guards: bool,
    /// Whether loads of stride 2 or 3 may be vector code (a row's innermost loop: a
    /// stride-2 conv's taps); lanes across outer points keep them refused, so a kernel
    /// whose inner loop strides (a transposed read) still takes lanes.
    pub vector_strides: bool,
}

/// The lane form of a value of `dtype` (`narrow` for `i64` values that fit in `i32`).
pub fn lanes_of(dtype: DType, narrow: bool) -> Option<Lanes> {
    match dtype {
        DType::F32 => Some(Lanes::F32),
        DType::I32 => Some(Lanes::I32),
        DType::I64 if narrow => Some(Lanes::I32),
        DType::Bool => Some(Lanes::Mask),
        _ => None,
    }
}

/// For every node: true when it is an `i64` whose value always lies in the `i32` range
/// (iotas and checked indices of bounded range, small constants, widened `i32`s, and
/// selections among those). `narrow_accs` lists accumulators known to be small (argmax).
pub fn narrow_i64(body: &Block, ext: &Extents, narrow_accs: &[AccId]) -> Vec<bool> {
    let fits = |(lo, hi): (i64, i64)| lo >= i32::MIN as i64 && hi <= i32::MAX as i64;
    let mut narrow = vec![false; body.nodes.len()];
    for (i, node) in body.nodes.iter().enumerate() {
        if node.dtype != DType::I64 {
            continue;
        }
        let dt = |r: ferrite_ir::loops::ExprRef| body.nodes.get(r.index()).map(|n| n.dtype);
        let nr = |r: ferrite_ir::loops::ExprRef| narrow.get(r.index()).copied().unwrap_or(false);
        narrow[i] = match &node.op {
            ExprOp::Const(Value::Int(v)) => i64::try_from(*v).is_ok_and(|v| fits((v, v))),
            ExprOp::Index(e) => e.range(ext).is_some_and(fits),
            ExprOp::CheckedIndex { extent, .. } => *extent <= i32::MAX as u64 + 1,
            ExprOp::Cast(a) => matches!(dt(*a), Some(DType::I32 | DType::Bool)) || nr(*a),
            ExprOp::Where(_, a, b) => nr(*a) && nr(*b),
            ExprOp::Binary(BinaryOp::Maximum | BinaryOp::Minimum, a, b) => nr(*a) && nr(*b),
            ExprOp::Acc(a) => narrow_accs.contains(a),
            _ => false,
        };
    }
    narrow
}

/// Decides whether the innermost loop of a stage can be vector code; the error says why not.
pub fn plan_vector(f: &StageFacts<'_>) -> Result<VectorPlan, NotVectorized> {
    let n = f.body.nodes.len();
    let lanes_at = |i: usize| lanes_of(f.body.nodes[i].dtype, f.narrow[i]);
    let mut plan = VectorPlan {
        lanes: vec![None; n],
        splats: Vec::new(),
        strided: Vec::new(),
    };
    let mut uses_fixed = vec![false; n];
    let need = |r: usize,
                plan: &mut VectorPlan,
                uses_fixed: &mut Vec<bool>|
     -> Result<(), NotVectorized> {
        let lanes = lanes_at(r).ok_or_else(|| {
            NotVectorized(format!(
                "t{r} ({}) has no vector form",
                f.body.nodes[r].dtype
            ))
        })?;
        if f.levels[r] < f.level {
            uses_fixed[r] = true;
        }
        plan.lanes[r] = Some(lanes);
        Ok(())
    };
    for i in 0..n {
        if !f.live[i] || f.levels[i] != f.level {
            continue;
        }
        let node = &f.body.nodes[i];
        let here = |why: String| NotVectorized(format!("t{i}: {why}"));
        let lanes =
            lanes_at(i).ok_or_else(|| here(format!("{} values are not vectorized", node.dtype)))?;
        let dtype_of = |r: ferrite_ir::loops::ExprRef| f.body.nodes[r.index()].dtype;
        match &node.op {
            ExprOp::Const(_) | ExprOp::Acc(_) => {}
            ExprOp::Load(l) => {
                if !matches!(node.dtype, DType::F32 | DType::I32) {
                    return Err(here(format!("{} loads are not vectorized", node.dtype)));
                }
                // A guarded (padded) load is vector code when each bound is affine in the
                // loop variable: the lanes where the guard holds are then an interval, and
                // the emitter tests a group's first and last lane (`emit/expr.rs`).
                if !l.guard.is_empty() && !f.vector_guards {
                    return Err(here("guarded (padded) load".into()));
                }
                for bound in &l.guard {
                    match split_linear(&bound.expr, f.var) {
                        Some((rest, _)) if (f.index_level)(&rest) < f.level => {}
                        _ => {
                            return Err(here(format!(
                                "guard `{}` is not affine in {}",
                                bound.expr, f.var
                            )))
                        }
                    }
                }
                if f.clamped[i] && l.guard.is_empty() {
                    return Err(here("load index needs clamping".into()));
                }
                match contiguous(f, &l.index) {
                    Ok(()) => {}
                    Err(e) => match load_stride(f, &l.index) {
                        Some(stride) => plan.strided.push((i, stride)),
                        None => return Err(here(format!("load from {}: {e}", l.buffer))),
                    },
                }
            }
            ExprOp::Index(e) => {
                if lanes != Lanes::I32 {
                    return Err(here("index value may exceed i32".into()));
                }
                match split_linear(e, f.var) {
                    Some((rest, _)) if (f.index_level)(&rest) < f.level => {}
                    _ => return Err(here(format!("index `{e}` is not linear in {}", f.var))),
                }
            }
            ExprOp::CheckedIndex { .. } => return Err(here("data-dependent index".into())),
            ExprOp::Unary(u, a) => {
                let from = dtype_of(*a);
                let ok = match lanes_at(a.index()) {
                    Some(Lanes::F32) => true,
                    Some(Lanes::I32) => {
                        // `bitwise_not` of an i32 (or of an i64 that fits one) fits one.
                        matches!(u, UnaryOp::Not | UnaryOp::BitwiseNot)
                            || matches!(u, UnaryOp::Floor | UnaryOp::Ceil)
                            || (from == DType::I32
                                && matches!(u, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu))
                    }
                    Some(Lanes::Mask) => matches!(
                        u,
                        UnaryOp::Not | UnaryOp::BitwiseNot | UnaryOp::Floor | UnaryOp::Ceil
                    ),
                    None => false,
                };
                if !ok {
                    return Err(here(format!("{} of {from} is not vectorized", u.name())));
                }
                need(a.index(), &mut plan, &mut uses_fixed)?;
            }
            ExprOp::Binary(op, x, y) => {
                let from = dtype_of(*x);
                let ok = match lanes_at(x.index()) {
                    // The rounding divisions compute in f64 (a scalar helper).
                    Some(Lanes::F32) => !op.is_integer_division(),
                    Some(Lanes::I32) => {
                        op.is_comparison()
                            || op.is_logical()
                            || matches!(op, BinaryOp::Maximum | BinaryOp::Minimum)
                            // and/or/xor of values that fit an i32 fit one too. The
                            // shifts stay scalar: Cranelift shifts a vector by one
                            // scalar amount.
                            || matches!(
                                op,
                                BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor
                            )
                            || (from == DType::I32
                                && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul))
                    }
                    Some(Lanes::Mask) => matches!(
                        op,
                        BinaryOp::And
                            | BinaryOp::Or
                            | BinaryOp::BitwiseAnd
                            | BinaryOp::BitwiseOr
                            | BinaryOp::BitwiseXor
                            | BinaryOp::Maximum
                            | BinaryOp::Minimum
                            | BinaryOp::Mul
                            | BinaryOp::Eq
                            | BinaryOp::Ne
                    ),
                    None => false,
                };
                if !ok || lanes_at(y.index()) != lanes_at(x.index()) {
                    return Err(here(format!("{} of {from} is not vectorized", op.name())));
                }
                need(x.index(), &mut plan, &mut uses_fixed)?;
                need(y.index(), &mut plan, &mut uses_fixed)?;
            }
            ExprOp::Where(c, a, b) => {
                need(c.index(), &mut plan, &mut uses_fixed)?;
                need(a.index(), &mut plan, &mut uses_fixed)?;
                need(b.index(), &mut plan, &mut uses_fixed)?;
            }
            ExprOp::Cast(a) => {
                let from = dtype_of(*a);
                let ok = match (lanes_at(a.index()), node.dtype) {
                    (Some(Lanes::F32), DType::F32 | DType::I32 | DType::Bool) => true,
                    (Some(Lanes::I32), DType::F32 | DType::I32 | DType::Bool) => true,
                    // An i32 widened to i64 still fits in i32 (see `narrow_i64`).
                    (Some(Lanes::I32), DType::I64) => lanes == Lanes::I32,
                    (Some(Lanes::Mask), _) => true,
                    _ => false,
                };
                if !ok {
                    return Err(here(format!(
                        "cast from {from} to {} is not vectorized",
                        node.dtype
                    )));
                }
                need(a.index(), &mut plan, &mut uses_fixed)?;
            }
        }
        plan.lanes[i] = Some(lanes);
    }
    for r in f.reductions {
        let vi = r.value.index();
        if r.dtype != DType::F32
            || !matches!(
                r.kind,
                ReduceKind::Sum | ReduceKind::Prod | ReduceKind::Max | ReduceKind::Min
            )
        {
            return Err(NotVectorized(format!(
                "{} reduction of {} is not vectorized",
                r.kind.name(),
                r.dtype
            )));
        }
        need(vi, &mut plan, &mut uses_fixed)?;
        if let Some(rhs) = r.rhs {
            need(rhs.index(), &mut plan, &mut uses_fixed)?;
        }
    }
    for s in f.stores {
        let vi = s.value.index();
        let dtype = f.body.nodes[vi].dtype;
        if !matches!(dtype, DType::F32 | DType::I32) {
            return Err(NotVectorized(format!(
                "store of {dtype} to {} is not vectorized",
                s.buffer
            )));
        }
        contiguous(f, &s.index)
            .map_err(|e| NotVectorized(format!("store to {}: {e}", s.buffer)))?;
        need(vi, &mut plan, &mut uses_fixed)?;
    }
    plan.splats = (0..n).filter(|&i| uses_fixed[i]).collect();
    Ok(plan)
}

/// The stride `c` of a load index `rest + c*v` (`rest` fixed in the innermost loop) that
/// vector code takes as a strided load: 2 to [`MAX_LOAD_STRIDE`], where allowed.
fn load_stride(f: &StageFacts<'_>, index: &IndexExpr) -> Option<i64> {
    if !f.vector_strides {
        return None;
    }
    match split_linear(index, f.var) {
        Some((rest, c))
            if (2..=MAX_LOAD_STRIDE).contains(&c) && (f.index_level)(&rest) < f.level =>
        {
            Some(c)
        }
        _ => None,
    }
}

/// Checks that `index` is `rest + 1*v` with `rest` fixed in the innermost loop.
fn contiguous(f: &StageFacts<'_>, index: &IndexExpr) -> Result<(), NotVectorized> {
    match split_linear(index, f.var) {
        Some((rest, 1)) if (f.index_level)(&rest) < f.level => Ok(()),
        Some((_, 0)) => Err(NotVectorized(format!(
            "index `{index}` does not move with {}",
            f.var
        ))),
        Some((_, c)) if c != 1 => Err(NotVectorized(format!(
            "index `{index}` has stride {c} in {}",
            f.var
        ))),
        _ => Err(NotVectorized(format!(
            "index `{index}` is not contiguous in {}",
            f.var
        ))),
    }
}

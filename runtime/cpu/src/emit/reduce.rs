//! Reductions: accumulator registers, how each point adds into them, and how they
//! finish into the values later stages read.
//!
//! One point at a time, an accumulator is a scalar register in the reference's domain
//! (`f64` for float sums and products, the value's own register for max/min, `i64` for
//! integers; argmax/argmin keep the best value and its position). When the innermost
//! loop is vector code it also keeps one `f32x4` per unrolled group (a float sum folds
//! them into `f64x2` halves every [`FOLD_EVERY`] iterations; a float max/min takes one
//! `maxps`/`minps` per vector and keeps the NaNs it meets in a second `f32x4`), merged
//! into the scalar at the end. In a lanes step each lane is an accumulator of its own outer point, with the
//! scalar numerics: `f64x2` halves for sums and products, `f32x4` for max/min.

use super::convert::{bitcast, round_f64_to};
use super::expr::scalar_type;
use super::state::Emitter;
use crate::error::{Error, Result};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, Type, Value};
use cranelift_frontend::Variable;
use ferrite_ir::loops::{Block, ReduceKind, Reduction};
use ferrite_ir::{Category, DType};

/// The accumulators of one stage's reductions.
pub(super) enum Accumulators {
    /// One point at a time (with vector partial results when the inner loop is vector
    /// code); `fold_count` counts vector iterations since the sums' last fold.
    Point {
        vars: Vec<AccVars>,
        fold_count: Option<Variable>,
    },
    /// A lanes step: per reduction, the lanes of every group.
    Lanes(Vec<LaneAcc>),
}

/// Accumulator registers of one reduction.
pub(super) struct AccVars {
    /// Running value: `f64` for float sum/prod, the value's own register for float
    /// max/min, `i64` for integers; for argmax/argmin the position.
    acc: Variable,
    /// Argmax/argmin: the best value so far and the running position.
    best: Option<(Variable, Variable)>,
    /// Vectorized: one `f32x4` per unrolled group.
    vector: Vec<Variable>,
    /// Vectorized float max/min: per unrolled group, the last NaN seen in each lane (0.0
    /// while none was), kept apart so that the extreme itself takes one `maxps`/`minps`
    /// per vector (see [`Emitter::extreme_step`]).
    nan: Vec<Variable>,
    /// Vectorized float sums (not dot products): the `f64x2` halves the `f32x4` partial
    /// sums are folded into every `FOLD_EVERY` iterations of the unrolled loop.
    wide: Option<(Variable, Variable)>,
}

/// Iterations of the unrolled vector loop (16 elements each by default) between folds of
/// a float sum's `f32` lanes into `f64`: each lane adds at most this many terms in `f32`,
/// so a long row sums about as accurately as a pairwise sum (1M elements in 16 lanes
/// would otherwise chain 65,536 `f32` additions per lane).
const FOLD_EVERY: i64 = crate::row_order::FOLD_EVERY as i64;

/// Whether the unrolled vector loop of a row runs long enough (`iterations`) to fold its
/// float sums: a shorter one never does, and is emitted without the fold and its counter.
pub(super) fn reaches_fold(iterations: i64) -> bool {
    iterations >= FOLD_EVERY
}

/// Accumulator registers of one reduction in lane code.
pub(super) enum LaneAcc {
    /// Sum/product: per group, the `f64x2` of lanes 0-1 and of lanes 2-3.
    Wide(Vec<(Variable, Variable)>),
    /// Max/min: per group, one `f32x4`.
    Narrow(Vec<Variable>),
}

impl Emitter<'_, '_> {
    /// Adds the value of reduction `r` (number `ri` of the stage) at the current position
    /// into its accumulator: the scalar point (`group` `None`) or unrolled group `group`.
    pub(super) fn accumulate(
        &mut self,
        r: &Reduction,
        ri: usize,
        accs: &Accumulators,
        group: Option<usize>,
    ) -> Result<()> {
        match (accs, group) {
            (Accumulators::Point { vars, .. }, None) => {
                let vars = &vars[ri];
                let x = self.scalar_of(r.value)?;
                let value_dtype = self.vals.body.nodes[r.value.index()].dtype;
                match r.rhs {
                    Some(rhs) => {
                        let y = self.scalar_of(rhs)?;
                        self.accumulate_product(value_dtype, vars, x, y);
                    }
                    None => self.combine_scalar(r.kind, value_dtype, vars, x),
                }
            }
            (Accumulators::Point { vars, .. }, Some(g)) => {
                let x = self.vector_operand(r.value, g)?;
                let var = vars[ri].vector[g];
                let acc = self.b.use_var(var);
                let next = match r.rhs {
                    Some(rhs) => {
                        let y = self.vector_operand(rhs, g)?;
                        if self.target.has_fma {
                            // f32 lanes: the product is rounded once, fused into the add.
                            self.b.ins().fma(x, y, acc)
                        } else {
                            let p = self.b.ins().fmul(x, y);
                            self.b.ins().fadd(acc, p)
                        }
                    }
                    None if !vars[ri].nan.is_empty() => {
                        let nan_var = vars[ri].nan[g];
                        let seen = self.b.use_var(nan_var);
                        let seen = self.keep_nan(seen, x);
                        self.b.def_var(nan_var, seen);
                        self.extreme_step(r.kind, acc, x)
                    }
                    None => self.vector_combine(r.kind, acc, x),
                };
                self.b.def_var(var, next);
            }
            (Accumulators::Lanes(accs), Some(g)) => {
                let x = self.vector_operand(r.value, g)?;
                match &accs[ri] {
                    LaneAcc::Wide(halves) => {
                        let (lo_var, hi_var) = halves[g];
                        let (mut xl, mut xh) = self.widen_halves(x);
                        if let Some(rhs) = r.rhs {
                            // Products of two f32 are exact in f64.
                            let y = self.vector_operand(rhs, g)?;
                            let (yl, yh) = self.widen_halves(y);
                            xl = self.b.ins().fmul(xl, yl);
                            xh = self.b.ins().fmul(xh, yh);
                        }
                        let lo = self.b.use_var(lo_var);
                        let hi = self.b.use_var(hi_var);
                        let (lo, hi) = if r.kind == ReduceKind::Prod {
                            (self.b.ins().fmul(lo, xl), self.b.ins().fmul(hi, xh))
                        } else {
                            (self.b.ins().fadd(lo, xl), self.b.ins().fadd(hi, xh))
                        };
                        self.b.def_var(lo_var, lo);
                        self.b.def_var(hi_var, hi);
                    }
                    LaneAcc::Narrow(vars) => {
                        // The scalar rule per lane: take x when beyond acc or NaN.
                        let acc = self.b.use_var(vars[g]);
                        let next = self.nan_sticky_extreme(r.kind, acc, x);
                        self.b.def_var(vars[g], next);
                    }
                }
            }
            (Accumulators::Lanes(_), None) => {
                return Err(Error::internal("a lanes step accumulates a scalar point"))
            }
        }
        Ok(())
    }

    /// Records each accumulator's final value for later stages: rounded to its dtype
    /// once (for a lanes step, lane by lane).
    pub(super) fn finish_accumulators(
        &mut self,
        reductions: &[Reduction],
        accs: &Accumulators,
    ) -> Result<()> {
        match accs {
            Accumulators::Point { vars, .. } => self.finish_point_accumulators(reductions, vars),
            Accumulators::Lanes(lanes) => {
                self.finish_lane_accumulators(reductions, lanes);
                Ok(())
            }
        }
    }

    /// In the unrolled vector loop: every `FOLD_EVERY` iterations, adds each float sum's
    /// `f32x4` partial sums into its `f64x2` halves and restarts them at zero.
    pub(super) fn fold_sums(&mut self, accs: &Accumulators) {
        let Accumulators::Point {
            vars,
            fold_count: Some(count_var),
        } = accs
        else {
            return;
        };
        let count_var = *count_var;
        // One counter and one branch for all the stage's sums.
        let count = self.b.use_var(count_var);
        let count = self.b.ins().iadd_imm_s(count, 1);
        let due = self.b.ins().icmp_imm_s(IntCC::Equal, count, FOLD_EVERY);
        let zero = self.b.ins().iconst(types::I64, 0);
        let count = self.b.ins().select(due, zero, count);
        self.b.def_var(count_var, count);
        let fold = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(due, fold, &[], cont, &[]);
        self.b.switch_to_block(fold);
        self.b.seal_block(fold);
        self.b.set_cold_block(fold);
        let z = self.b.ins().f32const(0.0);
        let z = self.b.ins().splat(types::F32X4, z);
        for vars in vars {
            let Some((lo_var, hi_var)) = vars.wide else {
                continue;
            };
            let mut lo = self.b.use_var(lo_var);
            let mut hi = self.b.use_var(hi_var);
            for &var in &vars.vector {
                let part = self.b.use_var(var);
                let (pl, ph) = self.widen_halves(part);
                lo = self.b.ins().fadd(lo, pl);
                hi = self.b.ins().fadd(hi, ph);
                self.b.def_var(var, z);
            }
            self.b.def_var(lo_var, lo);
            self.b.def_var(hi_var, hi);
        }
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    /// The scalar accumulators of `reductions`, at their identities.
    pub(super) fn init_accumulators(
        &mut self,
        reductions: &[Reduction],
        body: &Block,
    ) -> Result<Vec<AccVars>> {
        let mut out = Vec::with_capacity(reductions.len());
        for r in reductions {
            let value = body.get(r.value).ok_or_else(|| {
                Error::internal(format!(
                    "{} reduces {}, which is not a node",
                    r.acc, r.value
                ))
            })?;
            let vd = value.dtype;
            let float = vd.category() == Category::Float;
            // A u64 compares unsigned, from its own extremes (0 and all ones).
            let (int_lo, int_hi) = if vd == DType::U64 {
                (0, -1)
            } else {
                (i64::MIN, i64::MAX)
            };
            let acc = if r.kind.is_arg() {
                let (best_ty, best_init) = if float {
                    let inf = if r.kind == ReduceKind::ArgMax {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    };
                    self.float_init(vd, inf)
                } else {
                    let init = if r.kind == ReduceKind::ArgMax {
                        int_lo
                    } else {
                        int_hi
                    };
                    (types::I64, self.b.ins().iconst(types::I64, init))
                };
                let zero = self.b.ins().iconst(types::I64, 0);
                let best = self.new_var(best_ty, best_init);
                let count = self.new_var(types::I64, zero);
                let pos = self.new_var(types::I64, zero);
                AccVars {
                    acc: pos,
                    best: Some((best, count)),
                    vector: Vec::new(),
                    nan: Vec::new(),
                    wide: None,
                }
            } else {
                let init = match (float, r.kind) {
                    (true, ReduceKind::Sum) => self.b.ins().f64const(0.0),
                    (true, ReduceKind::Prod) => self.b.ins().f64const(1.0),
                    (true, ReduceKind::Max) => self.float_init(vd, f64::NEG_INFINITY).1,
                    (true, _) => self.float_init(vd, f64::INFINITY).1,
                    (false, ReduceKind::Sum) => self.b.ins().iconst(types::I64, 0),
                    (false, ReduceKind::Prod) => self.b.ins().iconst(types::I64, 1),
                    (false, ReduceKind::Max) => self.b.ins().iconst(types::I64, int_lo),
                    (false, _) => self.b.ins().iconst(types::I64, int_hi),
                };
                let ty = self.b.func.dfg.value_type(init);
                AccVars {
                    acc: self.new_var(ty, init),
                    best: None,
                    vector: Vec::new(),
                    nan: Vec::new(),
                    wide: None,
                }
            };
            out.push(acc);
        }
        Ok(out)
    }

    /// `vars` with, when the innermost loop is vector code, one `f32x4` per unrolled
    /// group (and `f64x2` halves for float sums), plus the counter of their folds.
    pub(super) fn init_vector_accumulators(
        &mut self,
        reductions: &[Reduction],
        mut vars: Vec<AccVars>,
        vectorized: bool,
        unroll: usize,
    ) -> Accumulators {
        if !vectorized {
            return Accumulators::Point {
                vars,
                fold_count: None,
            };
        }
        for (r, v) in reductions.iter().zip(vars.iter_mut()) {
            let identity = match r.kind {
                ReduceKind::Sum => 0.0,
                ReduceKind::Prod => 1.0,
                ReduceKind::Max => f32::NEG_INFINITY,
                _ => f32::INFINITY,
            };
            let s = self.b.ins().f32const(identity);
            let splat = self.b.ins().splat(types::F32X4, s);
            v.vector = (0..unroll)
                .map(|_| self.new_var(types::F32X4, splat))
                .collect();
            if matches!(r.kind, ReduceKind::Max | ReduceKind::Min) {
                let zero = self.b.ins().f32const(0.0);
                let zero = self.b.ins().splat(types::F32X4, zero);
                v.nan = (0..unroll)
                    .map(|_| self.new_var(types::F32X4, zero))
                    .collect();
            }
            if r.kind == ReduceKind::Sum && r.rhs.is_none() {
                let zero = self.b.ins().f64const(0.0);
                let zero = self.b.ins().splat(types::F64X2, zero);
                v.wide = Some((
                    self.new_var(types::F64X2, zero),
                    self.new_var(types::F64X2, zero),
                ));
            }
        }
        let fold_count = vars.iter().any(|v| v.wide.is_some()).then(|| {
            let zero = self.b.ins().iconst(types::I64, 0);
            self.new_var(types::I64, zero)
        });
        Accumulators::Point { vars, fold_count }
    }

    /// `acc <- acc (op) x` for scalars, with the reference's NaN rules.
    fn combine_scalar(&mut self, kind: ReduceKind, value_dtype: DType, vars: &AccVars, x: Value) {
        let float = value_dtype.category() == Category::Float;
        if let Some((best_var, count_var)) = vars.best {
            let best = self.b.use_var(best_var);
            let count = self.b.use_var(count_var);
            let pos = self.b.use_var(vars.acc);
            let (x, update) = if float {
                let best_nan = self.b.ins().fcmp(FloatCC::Unordered, best, best);
                let x_nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                let cc = if kind == ReduceKind::ArgMax {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let better = self.b.ins().fcmp(cc, x, best);
                let better = self.b.ins().bor(better, x_nan);
                // The first NaN wins and stays.
                let settled = self.b.ins().bxor_imm_u(best_nan, 1);
                (x, self.b.ins().band(better, settled))
            } else {
                let w = self.int_to_i64(x, value_dtype);
                let cc = match (kind == ReduceKind::ArgMax, value_dtype == DType::U64) {
                    (true, false) => IntCC::SignedGreaterThan,
                    (false, false) => IntCC::SignedLessThan,
                    (true, true) => IntCC::UnsignedGreaterThan,
                    (false, true) => IntCC::UnsignedLessThan,
                };
                (w, self.b.ins().icmp(cc, w, best))
            };
            let best = self.b.ins().select(update, x, best);
            let pos = self.b.ins().select(update, count, pos);
            let count = self.b.ins().iadd_imm_s(count, 1);
            self.b.def_var(best_var, best);
            self.b.def_var(vars.acc, pos);
            self.b.def_var(count_var, count);
            return;
        }
        let acc = self.b.use_var(vars.acc);
        let next = if float {
            match kind {
                ReduceKind::Sum | ReduceKind::Prod => {
                    let w = self.float_to_f64(x);
                    if kind == ReduceKind::Sum {
                        self.b.ins().fadd(acc, w)
                    } else {
                        self.b.ins().fmul(acc, w)
                    }
                }
                _ => self.nan_sticky_extreme(kind, acc, x),
            }
        } else {
            let w = self.int_to_i64(x, value_dtype);
            let unsigned = value_dtype == DType::U64;
            match kind {
                ReduceKind::Sum => self.b.ins().iadd(acc, w),
                ReduceKind::Prod => self.b.ins().imul(acc, w),
                ReduceKind::Max if unsigned => self.b.ins().umax(acc, w),
                ReduceKind::Max => self.b.ins().smax(acc, w),
                _ if unsigned => self.b.ins().umin(acc, w),
                _ => self.b.ins().smin(acc, w),
            }
        };
        self.b.def_var(vars.acc, next);
    }

    /// `acc <- acc + x*y` for a dot product: the product is exact (in `f64`, or wrapping
    /// `i64`), as the reference computes it.
    fn accumulate_product(&mut self, value_dtype: DType, vars: &AccVars, x: Value, y: Value) {
        let acc = self.b.use_var(vars.acc);
        let next = if value_dtype.category() == Category::Float {
            let a = self.float_to_f64(x);
            let c = self.float_to_f64(y);
            let p = self.b.ins().fmul(a, c);
            self.b.ins().fadd(acc, p)
        } else {
            let a = self.int_to_i64(x, value_dtype);
            let c = self.int_to_i64(y, value_dtype);
            let p = self.b.ins().imul(a, c);
            self.b.ins().iadd(acc, p)
        };
        self.b.def_var(vars.acc, next);
    }

    /// `x` replaces `acc` when it is NaN or beyond it (so NaN, once in, stays); per lane
    /// for vectors.
    fn nan_sticky_extreme(&mut self, kind: ReduceKind, acc: Value, x: Value) -> Value {
        let cc = if kind == ReduceKind::Max {
            FloatCC::GreaterThan
        } else {
            FloatCC::LessThan
        };
        let beyond = self.b.ins().fcmp(cc, x, acc);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let take = self.b.ins().bor(beyond, nan);
        self.select_any(take, x, acc)
    }

    /// `x` where `x > acc` (max) or `x < acc` (min), else `acc`, per lane: one `maxps x,
    /// acc` (`minps`), which keeps `acc` where either is NaN and where both are zeros, as
    /// the scalar rule keeps the first of equal extremes. NaN is tracked apart by
    /// [`Emitter::keep_nan`] and put back at the end, so each group's dependent chain is
    /// this one instruction per vector (the IEEE `maximum` it replaces took six).
    fn extreme_step(&mut self, kind: ReduceKind, acc: Value, x: Value) -> Value {
        // Cranelift's x64 lowering matches exactly these shapes to `maxps`/`minps`.
        let mask = if kind == ReduceKind::Max {
            self.b.ins().fcmp(FloatCC::LessThan, acc, x)
        } else {
            self.b.ins().fcmp(FloatCC::LessThan, x, acc)
        };
        let mask = bitcast(self.b, types::F32X4, mask);
        self.b.ins().bitselect(mask, x, acc)
    }

    /// The lanes of `x` that are NaN, else those of `seen`.
    fn keep_nan(&mut self, seen: Value, x: Value) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let nan = bitcast(self.b, types::F32X4, nan);
        self.b.ins().bitselect(nan, x, seen)
    }

    fn vector_combine(&mut self, kind: ReduceKind, acc: Value, x: Value) -> Value {
        let vm = self.target.vm;
        match kind {
            ReduceKind::Sum => self.b.ins().fadd(acc, x),
            ReduceKind::Prod => self.b.ins().fmul(acc, x),
            ReduceKind::Max => vm.maximum(self.b, acc, x),
            _ => vm.minimum(self.b, acc, x),
        }
    }

    /// Folds vector accumulators into the scalar one and records each accumulator's
    /// final value, rounded to its dtype, for later stages.
    fn finish_point_accumulators(
        &mut self,
        reductions: &[Reduction],
        vars: &[AccVars],
    ) -> Result<()> {
        for (r, v) in reductions.iter().zip(vars) {
            if !v.vector.is_empty() {
                let mut parts: Vec<Value> =
                    v.vector.iter().map(|&var| self.b.use_var(var)).collect();
                if !v.nan.is_empty() {
                    // Each group's lanes: its NaN if it saw one, else its extreme.
                    for (part, &nan_var) in parts.iter_mut().zip(&v.nan) {
                        let seen = self.b.use_var(nan_var);
                        *part = self.keep_nan(*part, seen);
                    }
                }
                while parts.len() > 1 {
                    let mut next = Vec::with_capacity(parts.len().div_ceil(2));
                    for pair in parts.chunks(2) {
                        next.push(if pair.len() == 2 {
                            self.vector_combine(r.kind, pair[0], pair[1])
                        } else {
                            pair[0]
                        });
                    }
                    parts = next;
                }
                let lanes: Vec<Value> = (0..4u8)
                    .map(|l| self.b.ins().extractlane(parts[0], l))
                    .collect();
                let h01 = self.scalar_fold(r.kind, lanes[0], lanes[1]);
                let h23 = self.scalar_fold(r.kind, lanes[2], lanes[3]);
                let h = self.scalar_fold(r.kind, h01, h23);
                let acc = self.b.use_var(v.acc);
                let merged = match r.kind {
                    ReduceKind::Sum => {
                        let w = self.b.ins().fpromote(types::F64, h);
                        let mut acc = self.b.ins().fadd(acc, w);
                        if let Some((lo, hi)) = v.wide {
                            // The folded f64 part.
                            let lo = self.b.use_var(lo);
                            let hi = self.b.use_var(hi);
                            let both = self.b.ins().fadd(lo, hi);
                            let l0 = self.b.ins().extractlane(both, 0);
                            let l1 = self.b.ins().extractlane(both, 1);
                            let folded = self.b.ins().fadd(l0, l1);
                            acc = self.b.ins().fadd(acc, folded);
                        }
                        acc
                    }
                    ReduceKind::Prod => {
                        let w = self.b.ins().fpromote(types::F64, h);
                        self.b.ins().fmul(acc, w)
                    }
                    _ => self.nan_sticky_extreme(r.kind, acc, h),
                };
                self.b.def_var(v.acc, merged);
            }
            let acc = self.b.use_var(v.acc);
            let value = if r.kind.is_arg() {
                acc
            } else {
                match r.dtype.category() {
                    Category::Float => match r.kind {
                        ReduceKind::Sum | ReduceKind::Prod if r.dtype == DType::F64 => acc,
                        ReduceKind::Sum | ReduceKind::Prod => round_f64_to(self.b, acc, r.dtype),
                        _ => acc,
                    },
                    Category::Int => self.i64_to_int(acc, r.dtype),
                    Category::Bool => self.b.ins().icmp_imm_s(IntCC::NotEqual, acc, 0),
                }
            };
            debug_assert_eq!(self.b.func.dfg.value_type(value), scalar_type(r.dtype));
            self.done.scalar.insert(r.acc, value);
        }
        Ok(())
    }

    /// The register type of a float accumulator of values of `dtype` compared by value
    /// (max, min, arg), and the constant `c` in it.
    fn float_init(&mut self, dtype: DType, c: f64) -> (Type, Value) {
        if dtype == DType::F64 {
            (types::F64, self.b.ins().f64const(c))
        } else {
            (types::F32, self.b.ins().f32const(c as f32))
        }
    }

    /// Combines two `f32` partial results of a vectorized reduction.
    fn scalar_fold(&mut self, kind: ReduceKind, a: Value, c: Value) -> Value {
        match kind {
            ReduceKind::Sum => self.b.ins().fadd(a, c),
            ReduceKind::Prod => self.b.ins().fmul(a, c),
            _ => self.nan_sticky_extreme(kind, a, c),
        }
    }

    /// Lanes 0-1 and 2-3 of an `f32x4` as two `f64x2`.
    fn widen_halves(&mut self, x: Value) -> (Value, Value) {
        let lo = self.b.ins().fvpromote_low(x);
        let swapped = self.shuffle_f32x4(x, x, (8..16).chain(0..8));
        let hi = self.b.ins().fvpromote_low(swapped);
        (lo, hi)
    }

    /// The `f32x4` made of bytes `bytes` of `a` (0-15) and `b` (16-31).
    fn shuffle_f32x4(&mut self, a: Value, b: Value, bytes: impl Iterator<Item = u8>) -> Value {
        let a = bitcast(self.b, types::I8X16, a);
        let b = bitcast(self.b, types::I8X16, b);
        let mask = ConstantData::from(bytes.collect::<Vec<u8>>());
        let mask = self.b.func.dfg.immediates.push(mask);
        let v = self.b.ins().shuffle(a, b, mask);
        bitcast(self.b, types::F32X4, v)
    }

    /// The lanes accumulators of `reductions` for `unroll` groups, at their identities.
    pub(super) fn init_lane_accumulators(
        &mut self,
        reductions: &[Reduction],
        unroll: usize,
    ) -> Accumulators {
        let accs = reductions
            .iter()
            .map(|r| match r.kind {
                ReduceKind::Sum | ReduceKind::Prod => {
                    let identity = if r.kind == ReduceKind::Sum { 0.0 } else { 1.0 };
                    let s = self.b.ins().f64const(identity);
                    let v = self.b.ins().splat(types::F64X2, s);
                    LaneAcc::Wide(
                        (0..unroll)
                            .map(|_| {
                                let lo = self.b.declare_var(types::F64X2);
                                let hi = self.b.declare_var(types::F64X2);
                                self.b.def_var(lo, v);
                                self.b.def_var(hi, v);
                                (lo, hi)
                            })
                            .collect(),
                    )
                }
                _ => {
                    let identity = if r.kind == ReduceKind::Max {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    };
                    let s = self.b.ins().f32const(identity);
                    let v = self.b.ins().splat(types::F32X4, s);
                    LaneAcc::Narrow(
                        (0..unroll)
                            .map(|_| {
                                let var = self.b.declare_var(types::F32X4);
                                self.b.def_var(var, v);
                                var
                            })
                            .collect(),
                    )
                }
            })
            .collect();
        Accumulators::Lanes(accs)
    }

    /// Records each accumulator's lanes, rounded to `f32` once, for later stages.
    fn finish_lane_accumulators(&mut self, reductions: &[Reduction], accs: &[LaneAcc]) {
        for (r, acc) in reductions.iter().zip(accs) {
            let groups: Vec<Value> = match acc {
                LaneAcc::Wide(halves) => halves
                    .iter()
                    .map(|&(lo, hi)| {
                        let lo = self.b.use_var(lo);
                        let hi = self.b.use_var(hi);
                        // Each half rounds to f32 lanes 0-1 (lanes 2-3 zero); interleave.
                        let lo = self.b.ins().fvdemote(lo);
                        let hi = self.b.ins().fvdemote(hi);
                        self.shuffle_f32x4(lo, hi, (0..8).chain(16..24))
                    })
                    .collect(),
                LaneAcc::Narrow(vars) => vars.iter().map(|&v| self.b.use_var(v)).collect(),
            };
            self.done.lanes.insert(r.acc, groups);
        }
    }
}

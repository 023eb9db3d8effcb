//! Index expressions to CLIF `i64` arithmetic, with loop-invariant parts hoisted.
//!
//! An access `rest + c*v` whose innermost loop variable `v` appears only linearly is
//! emitted as `rest` (computed once, in the enclosing loop level where all of its
//! variables are fixed) plus `c*v` per iteration: strength reduction by construction.
//! Floor division and modulo by a positive constant use unsigned division when the
//! operand's range is provably non-negative (Cranelift turns division by a constant into
//! a multiply and shift) and a signed division with a floor correction otherwise (the
//! operands of padded loads can be negative under their guards).

use super::state::Emitter;
use crate::error::{Error, Result};
use crate::plan::analysis::split_linear;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use ferrite_ir::loops::IndexExpr;

impl Emitter<'_, '_> {
    /// The loop level an index expression varies at (see `Levels::index` in the plan).
    pub(super) fn index_level(&self, e: &IndexExpr) -> usize {
        self.nest.levels.index(e)
    }

    /// The loop-invariant parts of `e` with their levels, innermost first: the `rest` of
    /// each `rest + c*v` split. Emitting these when their level is complete hoists them.
    pub(super) fn invariant_parts(&self, e: &IndexExpr, out: &mut Vec<(IndexExpr, usize)>) {
        let level = self.index_level(e);
        if level == 0 {
            return;
        }
        let v = self.level_var(level);
        if let Some((rest, c)) = split_linear(e, v) {
            if c != 0 {
                let rest = rest.simplify(&self.nest.ext);
                let rest_level = self.index_level(&rest);
                out.push((rest.clone(), rest_level));
                self.invariant_parts(&rest, out);
            }
        }
    }

    /// The `i64` value of `e` at the current point (memoized while it stays valid).
    pub(super) fn index_value(&mut self, e: &IndexExpr) -> Result<Value> {
        if let Some(&(v, _)) = self.nest.index_memo.get(e) {
            return Ok(v);
        }
        let level = self.index_level(e);
        let value = self.index_uncached(e, level)?;
        self.nest.index_memo.insert(e.clone(), (value, level));
        Ok(value)
    }

    fn index_uncached(&mut self, e: &IndexExpr, level: usize) -> Result<Value> {
        if level > 0 {
            let v = self.level_var(level);
            if let Some((rest, c)) = split_linear(e, v) {
                if c != 0 && !matches!(e, IndexExpr::Var(_)) {
                    let rest = rest.simplify(&self.nest.ext);
                    let r = self.index_value(&rest)?;
                    let x = self.var_value(v)?;
                    let scaled = if c == 1 {
                        x
                    } else {
                        self.b.ins().imul_imm_s(x, c)
                    };
                    return Ok(self.b.ins().iadd(r, scaled));
                }
            }
        }
        Ok(match e {
            IndexExpr::Const(c) => self.b.ins().iconst(types::I64, *c),
            IndexExpr::Var(v) => self.var_value(*v)?,
            IndexExpr::Dynamic { value, .. } => {
                let x = self.scalar_of(*value)?;
                self.widen_to_i64(x)
            }
            IndexExpr::Sum(ts) => {
                let mut acc: Option<Value> = None;
                for t in ts {
                    let x = self.index_value(t)?;
                    acc = Some(match acc {
                        None => x,
                        Some(a) => self.b.ins().iadd(a, x),
                    });
                }
                match acc {
                    Some(a) => a,
                    None => self.b.ins().iconst(types::I64, 0),
                }
            }
            IndexExpr::Mul(x, c) => {
                let x = self.index_value(x)?;
                self.b.ins().imul_imm_s(x, *c)
            }
            IndexExpr::FloorDiv(x, n) | IndexExpr::Mod(x, n) => {
                let n = *n;
                if n <= 0 {
                    return Err(Error::internal(format!("index `{e}` divides by {n}")));
                }
                let (lo, _) = x
                    .range(&self.nest.ext)
                    .ok_or_else(|| Error::internal(format!("index `{x}` has no provable range")))?;
                let xv = self.index_value(x)?;
                let is_div = matches!(e, IndexExpr::FloorDiv(..));
                if lo >= 0 {
                    if is_div {
                        self.b.ins().udiv_imm_u(xv, n)
                    } else {
                        self.b.ins().urem_imm_u(xv, n)
                    }
                } else if is_div {
                    self.floor_div_imm(xv, n)
                } else {
                    let r = self.b.ins().srem_imm_s(xv, n);
                    let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
                    let wrapped = self.b.ins().iadd_imm_s(r, n);
                    self.b.ins().select(negative, wrapped, r)
                }
            }
        })
    }

    /// `floor(x / n)` of a signed `i64` for a constant `n > 0`: the truncating division,
    /// then one step toward -inf when the remainder is negative.
    pub(super) fn floor_div_imm(&mut self, x: Value, n: i64) -> Value {
        if n == 1 {
            return x;
        }
        let q = self.b.ins().sdiv_imm_s(x, n);
        let r = self.b.ins().srem_imm_s(x, n);
        let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
        let adjust = self.b.ins().uextend(types::I64, negative);
        self.b.ins().isub(q, adjust)
    }
}

//! Index expressions to CLIF `i64` arithmetic, with loop-invariant parts hoisted.
//!
//! An access `rest + c*v` whose innermost loop variable `v` appears only linearly is
//! emitted as `rest` (computed once, in the enclosing loop level where all of its
//! variables are fixed) plus `c*v` per iteration: strength reduction by construction.
//! Floor division and modulo by a positive constant use unsigned division when the
//! operand's range is provably non-negative (Cranelift turns division by a constant into
//! a multiply and shift) and a signed division with a floor correction otherwise (the
//! operands of padded loads can be negative under their guards).
//!
//! Integer constants and the operations of index and address arithmetic go through
//! [`Emitter::int_const`] and [`Emitter::int_op`], which fold constants and identities
//! as they are emitted and give an operation already emitted in the current block its
//! earlier value: the CLIF that reaches Cranelift is what its mid-end would have made of
//! the arithmetic anyway (a multiplication by a power of two is a shift), without the
//! instructions it would have built, verified and rewritten to get there.

use super::state::{Emitter, IntOp};
use crate::error::{Error, Result};
use crate::plan::analysis::split_linear;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, InstructionData, Opcode, Type, Value};
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
                    let scaled = self.int_op_imm(IntOp::Mul, x, c);
                    return Ok(self.int_op(IntOp::Add, r, scaled));
                }
            }
        }
        Ok(match e {
            IndexExpr::Const(c) => self.int_const(types::I64, *c),
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
                        Some(a) => self.int_op(IntOp::Add, a, x),
                    });
                }
                match acc {
                    Some(a) => a,
                    None => self.int_const(types::I64, 0),
                }
            }
            IndexExpr::Mul(x, c) => {
                let x = self.index_value(x)?;
                self.int_op_imm(IntOp::Mul, x, *c)
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
                let nv = self.int_const(types::I64, n);
                if lo >= 0 {
                    if is_div {
                        self.b.ins().udiv(xv, nv)
                    } else {
                        self.b.ins().urem(xv, nv)
                    }
                } else if is_div {
                    self.floor_div_imm(xv, n)
                } else {
                    let r = self.b.ins().srem(xv, nv);
                    let zero = self.int_const(types::I64, 0);
                    let negative = self.b.ins().icmp(IntCC::SignedLessThan, r, zero);
                    let wrapped = self.int_op(IntOp::Add, r, nv);
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
        if let Some(k) = self.known_i64(x) {
            return self.int_const(types::I64, k.div_euclid(n));
        }
        let nv = self.int_const(types::I64, n);
        let q = self.b.ins().sdiv(x, nv);
        let r = self.b.ins().srem(x, nv);
        let zero = self.int_const(types::I64, 0);
        let negative = self.b.ins().icmp(IntCC::SignedLessThan, r, zero);
        let adjust = self.b.ins().uextend(types::I64, negative);
        self.int_op(IntOp::Sub, q, adjust)
    }

    /// The integer constant `c` of type `ty`, emitted once per block.
    pub(super) fn int_const(&mut self, ty: Type, c: i64) -> Value {
        let Some(block) = self.b.current_block() else {
            return self.b.ins().iconst(ty, c);
        };
        if let Some(&v) = self.ints.consts.get(&(block, ty, c)) {
            return v;
        }
        let v = self.b.ins().iconst(ty, c);
        self.ints.consts.insert((block, ty, c), v);
        v
    }

    /// The value of `x` where it is an `i64` constant.
    pub(super) fn known_i64(&self, x: Value) -> Option<i64> {
        if self.b.func.dfg.value_type(x) != types::I64 {
            return None;
        }
        self.known_int(x)
    }

    /// The truth of an `i8` 0/1 where it is a constant.
    pub(super) fn known_flag(&self, x: Value) -> Option<bool> {
        if self.b.func.dfg.value_type(x) != types::I8 {
            return None;
        }
        self.known_int(x).map(|k| k != 0)
    }

    /// `a and b` of two `i8` 0/1 values, folded where either is a constant.
    pub(super) fn flag_and(&mut self, a: Value, b: Value) -> Value {
        match (self.known_flag(a), self.known_flag(b)) {
            (Some(false), _) | (_, Some(true)) => a,
            (_, Some(false)) | (Some(true), _) => b,
            _ => self.b.ins().band(a, b),
        }
    }

    /// The value of an integer constant.
    fn known_int(&self, x: Value) -> Option<i64> {
        let dfg = &self.b.func.dfg;
        let inst = dfg.value_def(x).inst()?;
        match dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => Some(imm.bits()),
            _ => None,
        }
    }

    /// `x cc c` for a constant `c`, an `i8` 0/1.
    pub(super) fn icmp_imm(&mut self, cc: IntCC, x: Value, c: i64) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let c = self.int_const(ty, c);
        self.b.ins().icmp(cc, x, c)
    }

    /// `-x` on an `i64`, folded where `x` is a constant.
    pub(super) fn int_neg(&mut self, x: Value) -> Value {
        match self.known_i64(x) {
            Some(k) => self.int_const(types::I64, k.wrapping_neg()),
            None => self.b.ins().ineg(x),
        }
    }

    /// `x op c` for a constant `c` (see [`Emitter::int_op`]).
    pub(super) fn int_op_imm(&mut self, op: IntOp, x: Value, c: i64) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let c = self.int_const(ty, c);
        self.int_op(op, x, c)
    }

    /// `x op y` on two integers of one type: on `i64` constants and identities folded
    /// (`x + 0` is `x`, `x * 8` is `x << 3`), otherwise the operation emitted in the
    /// current block before, or a new one.
    pub(super) fn int_op(&mut self, op: IntOp, x: Value, y: Value) -> Value {
        if let Some(v) = self.int_folded(op, x, y) {
            return v;
        }
        let commutes = !matches!(op, IntOp::Sub | IntOp::Shl);
        let key_args = if commutes && y < x { (y, x) } else { (x, y) };
        let block = self.b.current_block();
        if let Some(block) = block {
            if let Some(&v) = self.ints.ops.get(&(block, op, key_args.0, key_args.1)) {
                return v;
            }
        }
        let ins = self.b.ins();
        let v = match op {
            IntOp::Add => ins.iadd(x, y),
            IntOp::Sub => ins.isub(x, y),
            IntOp::Mul => ins.imul(x, y),
            IntOp::Shl => ins.ishl(x, y),
            IntOp::And => ins.band(x, y),
            IntOp::Min => ins.smin(x, y),
            IntOp::Max => ins.smax(x, y),
        };
        if let Some(block) = block {
            self.ints.ops.insert((block, op, key_args.0, key_args.1), v);
        }
        v
    }

    /// [`Emitter::int_op`]'s folding: the value of `x op y` where it needs no new
    /// operation (or another one: a multiplication by a power of two is a shift).
    fn int_folded(&mut self, op: IntOp, x: Value, y: Value) -> Option<Value> {
        let (a, b) = (self.known_i64(x), self.known_i64(y));
        if let (Some(a), Some(b)) = (a, b) {
            let c = match op {
                IntOp::Add => a.wrapping_add(b),
                IntOp::Sub => a.wrapping_sub(b),
                IntOp::Mul => a.wrapping_mul(b),
                IntOp::Shl => a.wrapping_shl(b as u32 & 63),
                IntOp::And => a & b,
                IntOp::Min => a.min(b),
                IntOp::Max => a.max(b),
            };
            return Some(self.int_const(types::I64, c));
        }
        let power_of_two = |c: i64| c > 1 && (c as u64).is_power_of_two();
        match (op, a, b) {
            (IntOp::Add, Some(0), _) | (IntOp::Mul, Some(1), _) | (IntOp::And, Some(-1), _) => {
                Some(y)
            }
            (IntOp::Add | IntOp::Sub | IntOp::Shl, _, Some(0))
            | (IntOp::Mul, _, Some(1))
            | (IntOp::And, _, Some(-1)) => Some(x),
            (IntOp::Mul | IntOp::And, Some(0), _) | (IntOp::Mul | IntOp::And, _, Some(0)) => {
                Some(self.int_const(types::I64, 0))
            }
            (IntOp::Mul, Some(c), _) if power_of_two(c) => {
                Some(self.int_op_imm(IntOp::Shl, y, c.trailing_zeros() as i64))
            }
            (IntOp::Mul, _, Some(c)) if power_of_two(c) => {
                Some(self.int_op_imm(IntOp::Shl, x, c.trailing_zeros() as i64))
            }
            (IntOp::Sub, ..) if x == y => Some(self.int_const(types::I64, 0)),
            (IntOp::Min | IntOp::Max, ..) if x == y => Some(x),
            _ => None,
        }
    }
}

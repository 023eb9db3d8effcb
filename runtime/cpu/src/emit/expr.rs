//! Scalar and vector emission of loop-IR nodes, per dtype.
//!
//! Scalars live in registers as `f32` (for `f32`, `f16` and `bf16`: a half value is held
//! as the `f32` of the same number), `f64`, and integers of their dtype's width (`i8` for
//! `i8`, `u8` and `bool`, a `bool` being 0 or 1); `dtypes.rs` emits the `f64`, narrow and
//! unsigned cases and every cast. Each
//! node computes in its dtype exactly as [`ferrite_ir::loops::scalar`] says: `f32` add,
//! sub, mul, div and sqrt are correctly rounded in hardware (the same result as the
//! reference's `f64` op rounded to `f32`); half-precision arithmetic is done in `f64` and
//! rounded once; integers wrap; casts truncate and saturate. Transcendentals come from
//! [`VMath`](crate::VMath) (a few ulp; no libm calls), on scalars and on vectors alike.
//!
//! Vector code (the plan's `vectorize` step decides where) holds `f32x4`, `i32x4` and `i32x4`
//! masks; each node produces one vector per unrolled group, so several independent
//! vectors are in flight.

use super::convert::{
    bf16_bits_to_f32, bitcast, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, iconst,
    round_f32_to, round_f64_to,
};
use super::state::{Emitter, GuardMode, IntOp, RowLoad};
use crate::error::{Error, Result};
use crate::plan::Lanes;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, MemFlagsData, Type, Value};
use ferrite_ir::loops::{scalar, Bound, BufferId, ExprOp, ExprRef, IndexExpr, Load, Value as Lit};
use ferrite_ir::{BinaryOp, Category, DType, UnaryOp};

/// The register type of a scalar of `dtype`.
pub(super) fn scalar_type(dtype: DType) -> Type {
    match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => types::F32,
        DType::F64 => types::F64,
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 => types::I64,
        DType::I16 | DType::U16 => types::I16,
        DType::Bool | DType::I8 | DType::U8 => types::I8,
    }
}

/// The register type of a vector of `lanes`.
fn vector_type(lanes: Lanes) -> Type {
    match lanes {
        Lanes::F32 => types::F32X4,
        Lanes::I32 | Lanes::Mask => types::I32X4,
    }
}

/// `x ** y` for integers with wrapping, as `ferrite_ir::loops::scalar` computes it; the
/// generated code checks `y >= 0` before calling. Called from generated code only for
/// integer `pow`, which has no vector form and is rare.
pub(super) extern "C" fn int_pow(x: i64, y: i64) -> i64 {
    let (mut base, mut exp, mut acc) = (x, y.max(0) as u64, 1i64);
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

/// `sin` of an argument too large for the vector math's range reduction: computed in
/// `f64` and rounded, as the reference does. Called only from the cold path of `trig`.
extern "C" fn f64_sin(x: f32) -> f32 {
    (x as f64).sin() as f32
}

/// `cos` for large arguments; see [`f64_sin`].
extern "C" fn f64_cos(x: f32) -> f32 {
    (x as f64).cos() as f32
}

fn float_cc(op: BinaryOp) -> FloatCC {
    match op {
        BinaryOp::Eq => FloatCC::Equal,
        // Rust's `!=`: true when either side is NaN.
        BinaryOp::Ne => FloatCC::NotEqual,
        BinaryOp::Lt => FloatCC::LessThan,
        BinaryOp::Le => FloatCC::LessThanOrEqual,
        BinaryOp::Gt => FloatCC::GreaterThan,
        _ => FloatCC::GreaterThanOrEqual,
    }
}

fn int_cc(op: BinaryOp, signed: bool) -> IntCC {
    match (op, signed) {
        (BinaryOp::Eq, _) => IntCC::Equal,
        (BinaryOp::Ne, _) => IntCC::NotEqual,
        (BinaryOp::Lt, true) => IntCC::SignedLessThan,
        (BinaryOp::Le, true) => IntCC::SignedLessThanOrEqual,
        (BinaryOp::Gt, true) => IntCC::SignedGreaterThan,
        (BinaryOp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
        (BinaryOp::Lt, false) => IntCC::UnsignedLessThan,
        (BinaryOp::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (BinaryOp::Gt, false) => IntCC::UnsignedGreaterThan,
        _ => IntCC::UnsignedGreaterThanOrEqual,
    }
}

impl Emitter<'_, '_> {
    // ---- shared helpers ----

    /// The scalar value of node `r` (computed earlier).
    pub(super) fn scalar_of(&self, r: ExprRef) -> Result<Value> {
        self.vals
            .scalar
            .get(r.index())
            .copied()
            .flatten()
            .ok_or_else(|| Error::internal(format!("t{} used before it is computed", r.0)))
    }

    /// An integer or bool register widened to `i64` (sign-extending integers).
    pub(super) fn widen_to_i64(&mut self, x: Value) -> Value {
        match self.b.func.dfg.value_type(x) {
            types::I64 => x,
            types::I8 => self.b.ins().uextend(types::I64, x),
            _ => self.b.ins().sextend(types::I64, x),
        }
    }

    /// A scalar constant of `dtype` (floats rounded to the dtype).
    pub(super) fn constant(&mut self, v: Lit, dtype: DType) -> Result<Value> {
        Ok(match (scalar::round_to(v, dtype), dtype.category()) {
            (Lit::Float(x), Category::Float) if dtype == DType::F64 => self.b.ins().f64const(x),
            (Lit::Float(x), Category::Float) => self.b.ins().f32const(x as f32),
            (Lit::Int(x), Category::Int) => iconst(self.b, scalar_type(dtype), x as i64),
            (Lit::Bool(x), Category::Bool) => iconst(self.b, types::I8, x as i64),
            (other, _) => {
                return Err(Error::internal(format!(
                    "constant {other} is not a {dtype}"
                )))
            }
        })
    }

    fn flags_for(&self, buffer: ferrite_ir::loops::BufferId) -> MemFlagsData {
        let flags = MemFlagsData::new().with_notrap();
        if self.mem.read_only.contains(&buffer) {
            flags.with_readonly()
        } else {
            flags
        }
    }

    /// The flags of a vector load. Never `readonly`, even from a buffer the kernel only
    /// reads: Cranelift treats read-only loads as pure and elaborates them apart from their
    /// uses, which gathered the loads of all of an unrolled body's groups ahead of its
    /// arithmetic (a 3x3 depthwise conv: 36 vectors live at once, 62 spill moves per
    /// iteration); in program order each group's loads die before the next group's start.
    /// A vector load's address moves with the innermost loop, so nothing is lost: such a
    /// load can neither be hoisted nor meet a duplicate.
    fn vector_flags(&self) -> MemFlagsData {
        MemFlagsData::new().with_notrap()
    }

    /// Where element `idx` of `buffer` is: a pointer and a constant byte offset from it
    /// (an element at a constant index is at an offset from the buffer's base).
    fn element_address(
        &mut self,
        buffer: ferrite_ir::loops::BufferId,
        idx: Value,
    ) -> Result<(Value, i32)> {
        let base = *self
            .mem
            .ptrs
            .get(&buffer)
            .ok_or_else(|| Error::internal(format!("{buffer} has no pointer slot")))?;
        let size = self.buffer_dtype(buffer)?.size_bytes() as i64;
        // Far enough from `i32::MAX` for a vector group's offsets on top.
        const NEAR: i64 = 1 << 30;
        let at_offset = self
            .known_i64(idx)
            .and_then(|k| k.checked_mul(size))
            .filter(|bytes| bytes.abs() < NEAR)
            .map(|bytes| bytes as i32);
        if let Some(bytes) = at_offset {
            return Ok((base, bytes));
        }
        let bytes = self.int_op_imm(IntOp::Mul, idx, size);
        Ok((self.int_op(IntOp::Add, base, bytes), 0))
    }

    /// The address of element `idx` of `buffer` as one pointer.
    pub(super) fn element_pointer(
        &mut self,
        buffer: ferrite_ir::loops::BufferId,
        index: &ferrite_ir::loops::IndexExpr,
    ) -> Result<Value> {
        let idx = self.index_value(index)?;
        let (ptr, offset) = self.element_address(buffer, idx)?;
        Ok(self.int_op_imm(IntOp::Add, ptr, offset.into()))
    }

    pub(super) fn buffer_dtype(&self, buffer: ferrite_ir::loops::BufferId) -> Result<DType> {
        self.mem
            .buffers
            .get(buffer.index())
            .map(|b| b.ty.dtype)
            .ok_or_else(|| Error::internal(format!("{buffer} does not exist")))
    }

    /// Loads one element of `dtype` at `addr + offset` into its scalar register form.
    fn load_scalar(
        &mut self,
        dtype: DType,
        flags: MemFlagsData,
        (addr, offset): (Value, i32),
    ) -> Value {
        match dtype {
            DType::F16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, offset);
                f16_bits_to_f32(self.b, h)
            }
            DType::Bf16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, offset);
                bf16_bits_to_f32(self.b, h)
            }
            _ => self.b.ins().load(scalar_type(dtype), flags, addr, offset),
        }
    }

    /// Stores a scalar register value of `dtype` at `addr + offset`.
    pub(super) fn store_scalar(
        &mut self,
        dtype: DType,
        flags: MemFlagsData,
        value: Value,
        (addr, offset): (Value, i32),
    ) {
        match dtype {
            DType::F16 => {
                let h = f32_to_f16_bits(self.b, value);
                self.b.ins().istore16(flags, h, addr, offset);
            }
            DType::Bf16 => {
                let h = f32_to_bf16_bits(self.b, value);
                self.b.ins().istore16(flags, h, addr, offset);
            }
            _ => {
                self.b.ins().store(flags, value, addr, offset);
            }
        }
    }

    /// Where a store's element is, as a pointer and a byte offset (proved in bounds
    /// before emission), and the store's flags.
    pub(super) fn store_address(
        &mut self,
        buffer: ferrite_ir::loops::BufferId,
        index: &ferrite_ir::loops::IndexExpr,
    ) -> Result<((Value, i32), MemFlagsData)> {
        let idx = self.index_value(index)?;
        let addr = self.element_address(buffer, idx)?;
        Ok((addr, MemFlagsData::new().with_notrap()))
    }

    /// 1 when every bound of `guard` holds, else 0 (an `i8`; a constant where the
    /// bounds' values are).
    pub(super) fn guard_value(&mut self, guard: &[Bound]) -> Result<Option<Value>> {
        let mut all: Option<Value> = None;
        for g in guard {
            let x = self.index_value(&g.expr)?;
            let ok = match self.known_i64(x) {
                Some(k) => self.int_const(types::I8, (g.lo <= k && k < g.hi) as i64),
                None => {
                    let ge = self.icmp_imm(IntCC::SignedGreaterThanOrEqual, x, g.lo);
                    let lt = self.icmp_imm(IntCC::SignedLessThan, x, g.hi);
                    self.b.ins().band(ge, lt)
                }
            };
            all = Some(match all {
                None => ok,
                Some(a) => self.flag_and(a, ok),
            });
        }
        Ok(all)
    }

    /// A value's truth (`!= 0`; NaN is true) as an `i8` 0/1.
    fn truth(&mut self, x: Value, dtype: DType) -> Value {
        self.truth_of(x, dtype)
    }

    /// Branches to the kernel's error exit with a new code when `bad` (an `i8`) is set.
    pub(super) fn check(&mut self, bad: Value, message: String) {
        self.exits.checks.push(message);
        let code = self.exits.checks.len() as i64;
        let code = self.b.ins().iconst(types::I32, code);
        let cont = self.b.create_block();
        let err = self.exits.err_block;
        self.b.ins().brif(bad, err, &[code.into()], cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    // ---- scalar nodes ----

    /// Emits node `i` of the current stage body as scalar code.
    pub(super) fn emit_scalar_node(&mut self, i: usize) -> Result<()> {
        let body = self.vals.body;
        let node = &body.nodes[i];
        let d = node.dtype;
        let dt = |r: &ExprRef| body.nodes[r.index()].dtype;
        let v = match &node.op {
            ExprOp::Const(c) => self.constant(*c, d)?,
            ExprOp::Load(l) => self.emit_load(i, l, d)?,
            ExprOp::Acc(a) => *self
                .done
                .scalar
                .get(a)
                .ok_or_else(|| Error::internal(format!("{a} is read before its stage")))?,
            ExprOp::Index(e) => self.index_value(e)?,
            ExprOp::CheckedIndex {
                value,
                extent,
                guard,
            } => {
                let x = self.scalar_of(*value)?;
                let x = self.widen_to_i64(x);
                let extent_i = i64::try_from(*extent).unwrap_or(i64::MAX);
                let bad = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, x, extent_i);
                let g = self.guard_value(guard)?;
                let bad = match g {
                    Some(g) => self.b.ins().band(bad, g),
                    None => bad,
                };
                self.check(
                    bad,
                    format!("index out of range for an axis of extent {extent} (t{i})"),
                );
                match g {
                    Some(g) => {
                        let zero = self.b.ins().iconst(types::I64, 0);
                        self.b.ins().select(g, x, zero)
                    }
                    None => x,
                }
            }
            ExprOp::Unary(u, a) => {
                let x = self.scalar_of(*a)?;
                self.scalar_unary(*u, x, dt(a), d)?
            }
            ExprOp::Binary(op, a, b) => {
                let x = self.scalar_of(*a)?;
                let y = self.scalar_of(*b)?;
                self.scalar_binary(*op, x, y, dt(a), d)?
            }
            ExprOp::Where(c, a, b) => {
                let c = self.scalar_of(*c)?;
                let x = self.scalar_of(*a)?;
                let y = self.scalar_of(*b)?;
                self.b.ins().select(c, x, y)
            }
            ExprOp::Cast(a) => {
                let x = self.scalar_of(*a)?;
                self.scalar_cast(x, dt(a), d)
            }
        };
        self.vals.scalar[i] = Some(v);
        Ok(())
    }

    fn emit_load(&mut self, i: usize, l: &Load, d: DType) -> Result<Value> {
        let other = self.constant(l.other, d)?;
        let clamp = self.vals.clamped[i];
        self.guarded_scalar_load(l.buffer, &l.index, &l.guard, other, d, clamp)
    }

    /// The elements of `buffer`.
    pub(super) fn buffer_numel(&self, buffer: BufferId) -> Result<usize> {
        self.mem
            .buffers
            .get(buffer.index())
            .map(|b| b.ty.numel())
            .ok_or_else(|| Error::internal(format!("{buffer} does not exist")))
    }

    /// One element of `buffer` at `index` where `guard` holds, else `other`, as scalar
    /// code; with `clamp` the index is clamped into the buffer first.
    fn guarded_scalar_load(
        &mut self,
        buffer: BufferId,
        index: &IndexExpr,
        guard: &[Bound],
        other: Value,
        d: DType,
        clamp: bool,
    ) -> Result<Value> {
        let numel = self.buffer_numel(buffer)?;
        let guard = self.guard_value(guard)?;
        if numel == 0 {
            // Nothing can be read; the proof pass only lets guarded loads get here.
            return Ok(other);
        }
        let mut idx = self.index_value(index)?;
        if clamp {
            // The value is discarded when the guard fails, so any in-bounds index will do.
            idx = self.int_op_imm(IntOp::Max, idx, 0);
            idx = self.int_op_imm(IntOp::Min, idx, numel as i64 - 1);
        }
        let addr = self.element_address(buffer, idx)?;
        let flags = self.flags_for(buffer);
        let loaded = self.load_scalar(d, flags, addr);
        Ok(match guard {
            Some(g) => self.b.ins().select(g, loaded, other),
            None => loaded,
        })
    }

    fn fconst(&mut self, x: f32) -> Value {
        self.b.ins().f32const(x)
    }

    /// The constant `c` shaped like `like` (an `f32` or a splatted `f32x4`).
    fn float_like(&mut self, like: Value, c: f32) -> Value {
        let s = self.b.ins().f32const(c);
        if self.b.func.dfg.value_type(like) == types::F32X4 {
            self.b.ins().splat(types::F32X4, s)
        } else {
            s
        }
    }

    /// A unary op (other than `not`) on an `f32` or `f32x4` register.
    fn float_unary(&mut self, u: UnaryOp, x: Value) -> Value {
        let vm = self.target.vm;
        match u {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Exp => vm.exp(self.b, x),
            UnaryOp::Log => vm.log(self.b, x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.float_like(x, 1.0);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Reciprocal => {
                let one = self.float_like(x, 1.0);
                self.b.ins().fdiv(one, x)
            }
            UnaryOp::Sin | UnaryOp::Cos => self.trig(u == UnaryOp::Cos, x),
            UnaryOp::Tanh => vm.tanh(self.b, x),
            UnaryOp::Sigmoid => vm.sigmoid(self.b, x),
            UnaryOp::Erf => vm.erf(self.b, x),
            UnaryOp::Erfc => vm.erfc(self.b, x),
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            UnaryOp::Relu => {
                // x > 0 or NaN keeps x; everything else (-0 included) is +0.
                let zero = self.float_like(x, 0.0);
                let keep = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
                if self.b.func.dfg.value_type(x).is_vector() {
                    // One `andps` with the mask instead of a three-micro-op blend.
                    let keep = bitcast(self.b, types::F32X4, keep);
                    self.b.ins().band(keep, x)
                } else {
                    self.b.ins().select(keep, x, zero)
                }
            }
            UnaryOp::Gelu => {
                // 0.5 x erfc(-x / sqrt 2): no cancellation for x << 0
                let c = self.float_like(x, -std::f32::consts::FRAC_1_SQRT_2);
                let s = self.b.ins().fmul(x, c);
                let erfc = vm.erfc(self.b, s);
                let half = self.float_like(x, 0.5);
                let half_x = self.b.ins().fmul(x, half);
                self.b.ins().fmul(half_x, erfc)
            }
            UnaryOp::GeluTanh => {
                // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                let c = self.float_like(x, (2.0f64 / std::f64::consts::PI).sqrt() as f32);
                let a = self.float_like(x, 0.044715);
                let x2 = self.b.ins().fmul(x, x);
                let x3 = self.b.ins().fmul(x2, x);
                let ax3 = self.b.ins().fmul(a, x3);
                let inner = self.b.ins().fadd(x, ax3);
                let inner = self.b.ins().fmul(c, inner);
                let t = vm.tanh(self.b, inner);
                self.half_x_one_plus(x, t)
            }
            UnaryOp::Silu => {
                // x / (1 + e^-x), as the reference writes it.
                let nx = self.b.ins().fneg(x);
                let ex = vm.exp(self.b, nx);
                let one = self.float_like(x, 1.0);
                let den = self.b.ins().fadd(one, ex);
                self.b.ins().fdiv(x, den)
            }
            UnaryOp::Sign if self.b.func.dfg.value_type(x).is_vector() => {
                // Bitwise: +-1 with x's sign bit, zeroed for +-0 (giving +0), all ones
                // (a NaN) where x is NaN: six one-micro-op instructions, no blends.
                let sign_mask = self.splat_i32(i32::MIN);
                let one = self.splat_i32(1.0f32.to_bits() as i32);
                let bits = bitcast(self.b, types::I32X4, x);
                let sign = self.b.ins().band(bits, sign_mask);
                let unit = self.b.ins().bor(sign, one);
                let zero = self.float_like(x, 0.0);
                let is_zero = self.b.ins().fcmp(FloatCC::Equal, x, zero);
                let nonzero = self.b.ins().bnot(is_zero);
                let unit = self.b.ins().band(unit, nonzero);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                let r = self.b.ins().bor(unit, nan);
                bitcast(self.b, types::F32X4, r)
            }
            UnaryOp::Sign => {
                let zero = self.float_like(x, 0.0);
                let one = self.float_like(x, 1.0);
                let minus = self.float_like(x, -1.0);
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x, zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                // ±0 gives +0 and NaN stays NaN.
                let r = self.select_any(nan, x, zero);
                let r = self.select_any(neg, minus, r);
                self.select_any(pos, one, r)
            }
            UnaryOp::Not => {
                // Equal to zero (NaN is true, so `not NaN` is false): an `i8` or a lane mask.
                let zero = self.float_like(x, 0.0);
                self.b.ins().fcmp(FloatCC::Equal, x, zero)
            }
            // Typing and the loop-IR verifier reject float operands (as `scalar_ops`).
            UnaryOp::BitwiseNot => self.float_like(x, f32::NAN),
        }
    }

    /// `sin x` or `cos x`: vector math, and for the rare arguments beyond its accurate
    /// range (where it returns NaN) a cold path that recomputes those lanes in `f64`.
    fn trig(&mut self, cos: bool, x: Value) -> Value {
        let vm = self.target.vm;
        let fast = if cos {
            vm.cos(self.b, x)
        } else {
            vm.sin(self.b, x)
        };
        let ty = self.b.func.dfg.value_type(x);
        let ax = self.b.ins().fabs(x);
        let limit = self.float_like(x, vm.trig_max_arg());
        let big = self.b.ins().fcmp(FloatCC::GreaterThan, ax, limit);
        let any = if ty.is_vector() {
            self.b.ins().vany_true(big)
        } else {
            big
        };
        let slow = self.b.create_block();
        let done = self.b.create_block();
        let result = self.b.append_block_param(done, ty);
        self.b.set_cold_block(slow);
        self.b.ins().brif(any, slow, &[], done, &[fast.into()]);
        self.b.switch_to_block(slow);
        self.b.seal_block(slow);
        let helper: extern "C" fn(f32) -> f32 = if cos { f64_cos } else { f64_sin };
        let sig = self.signature(&[types::F32], Some(types::F32));
        let callee = self
            .b
            .ins()
            .iconst(self.target.ptr_type, helper as usize as i64);
        let exact = if ty.is_vector() {
            let mut v = fast;
            for lane in 0..4u8 {
                let xl = self.b.ins().extractlane(x, lane);
                let call = self.b.ins().call_indirect(sig, callee, &[xl]);
                let r = self.b.inst_results(call)[0];
                v = self.b.ins().insertlane(v, r, lane);
            }
            v
        } else {
            let call = self.b.ins().call_indirect(sig, callee, &[x]);
            self.b.inst_results(call)[0]
        };
        self.b.ins().jump(done, &[exact.into()]);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        result
    }

    /// `0.5 * x * (1 + t)`, the shape of both gelu forms.
    fn half_x_one_plus(&mut self, x: Value, t: Value) -> Value {
        let one = self.float_like(x, 1.0);
        let half = self.float_like(x, 0.5);
        let t = self.b.ins().fadd(one, t);
        let hx = self.b.ins().fmul(half, x);
        self.b.ins().fmul(hx, t)
    }

    /// `c ? t : f` for a scalar (`i8` condition) or a vector (mask) `t`.
    pub(super) fn select_any(&mut self, c: Value, t: Value, f: Value) -> Value {
        if self.b.func.dfg.value_type(t).is_vector() {
            self.vselect(c, t, f)
        } else {
            self.b.ins().select(c, t, f)
        }
    }

    fn scalar_unary(&mut self, u: UnaryOp, x: Value, from: DType, d: DType) -> Result<Value> {
        if u == UnaryOp::Not {
            let t = self.truth(x, from);
            return Ok(self.b.ins().bxor_imm_u(t, 1));
        }
        Ok(match from.category() {
            Category::Float if from == DType::F64 => self.f64_unary(u, x),
            Category::Float => {
                if d != DType::F32 && u == UnaryOp::Sqrt {
                    // Correctly rounded: f64 sqrt of a half value, rounded once.
                    let w = self.b.ins().fpromote(types::F64, x);
                    let s = self.b.ins().sqrt(w);
                    round_f64_to(self.b, s, d)
                } else {
                    let r = self.float_unary(u, x);
                    match u {
                        // Exact in any float format.
                        UnaryOp::Neg
                        | UnaryOp::Abs
                        | UnaryOp::Floor
                        | UnaryOp::Ceil
                        | UnaryOp::Sign
                        | UnaryOp::Relu => r,
                        _ => round_f32_to(self.b, r, d),
                    }
                }
            }
            Category::Int => self.int_unary(u, x, d)?,
            Category::Bool => match u {
                UnaryOp::Floor | UnaryOp::Ceil => x,
                UnaryOp::BitwiseNot => self.b.ins().bxor_imm_u(x, 1),
                _ => {
                    return Err(Error::internal(format!(
                        "{} is not defined for bool",
                        u.name()
                    )))
                }
            },
        })
    }

    /// Emits a call of [`int_pow`] after checking that the exponent is not negative.
    pub(super) fn int_pow_call(&mut self, x: Value, y: Value, d: DType) -> Value {
        let wx = self.int_to_i64(x, d);
        let wy = self.int_to_i64(y, d);
        let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, wy, 0);
        self.check(
            negative,
            "integers to negative integer powers are not allowed".to_string(),
        );
        let sig = self.signature(&[types::I64, types::I64], Some(types::I64));
        let f: extern "C" fn(i64, i64) -> i64 = int_pow;
        let callee = self.b.ins().iconst(self.target.ptr_type, f as usize as i64);
        let call = self.b.ins().call_indirect(sig, callee, &[wx, wy]);
        let r = self.b.inst_results(call)[0];
        self.i64_to_int(r, d)
    }

    fn scalar_binary(
        &mut self,
        op: BinaryOp,
        x: Value,
        y: Value,
        from: DType,
        d: DType,
    ) -> Result<Value> {
        if op.is_logical() {
            let p = self.truth(x, from);
            let q = self.truth(y, from);
            return Ok(if op == BinaryOp::And {
                self.b.ins().band(p, q)
            } else {
                self.b.ins().bor(p, q)
            });
        }
        if op.is_comparison() {
            return Ok(match from.category() {
                Category::Float => self.b.ins().fcmp(float_cc(op), x, y),
                Category::Int => self.b.ins().icmp(int_cc(op, !from.is_unsigned()), x, y),
                Category::Bool => self.b.ins().icmp(int_cc(op, false), x, y),
            });
        }
        Ok(match from.category() {
            Category::Float if from == DType::F64 => self.f64_binary(op, x, y),
            Category::Float if op.is_integer_division() => self.narrow_float_division(op, x, y, d),
            Category::Float => {
                let half = d != DType::F32;
                if half
                    && matches!(
                        op,
                        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
                    )
                {
                    // Exact in f64 for half operands (division: rounded once, innocuously).
                    let a = self.b.ins().fpromote(types::F64, x);
                    let c = self.b.ins().fpromote(types::F64, y);
                    let r = self.float_arith(op, a, c);
                    round_f64_to(self.b, r, d)
                } else {
                    let r = match op {
                        BinaryOp::Pow => {
                            let vm = self.target.vm;
                            vm.pow(self.b, x, y)
                        }
                        BinaryOp::Maximum => {
                            let vm = self.target.vm;
                            vm.maximum(self.b, x, y)
                        }
                        BinaryOp::Minimum => {
                            let vm = self.target.vm;
                            vm.minimum(self.b, x, y)
                        }
                        _ => self.float_arith(op, x, y),
                    };
                    round_f32_to(self.b, r, d)
                }
            }
            Category::Int => self.int_binary(op, x, y, from)?,
            Category::Bool => match op {
                BinaryOp::Maximum | BinaryOp::BitwiseOr => self.b.ins().bor(x, y),
                BinaryOp::Minimum | BinaryOp::Mul | BinaryOp::BitwiseAnd => self.b.ins().band(x, y),
                BinaryOp::BitwiseXor => self.b.ins().bxor(x, y),
                _ => {
                    return Err(Error::internal(format!(
                        "{} is not defined for bool",
                        op.name()
                    )))
                }
            },
        })
    }

    fn float_arith(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        match op {
            BinaryOp::Add => self.b.ins().fadd(x, y),
            BinaryOp::Sub => self.b.ins().fsub(x, y),
            BinaryOp::Mul => self.b.ins().fmul(x, y),
            _ => self.b.ins().fdiv(x, y),
        }
    }

    /// `cast` from `from` to `to` on scalar registers (see `ferrite_ir::loops::scalar::cast`).
    pub(super) fn scalar_cast(&mut self, x: Value, from: DType, to: DType) -> Value {
        self.cast_any(x, from, to)
    }

    // ---- vector nodes ----

    /// The vector of node `r` for unrolled group `g`: computed lanes, or its splat.
    pub(super) fn vector_operand(&self, r: ExprRef, g: usize) -> Result<Value> {
        if let Some(v) = self
            .vals
            .vector
            .get(r.index())
            .and_then(|v| v.as_ref())
            .and_then(|v| v.get(g))
        {
            return Ok(*v);
        }
        self.vals
            .splat
            .get(r.index())
            .copied()
            .flatten()
            .ok_or_else(|| Error::internal(format!("t{} has no vector value", r.0)))
    }

    /// Splats the scalar value of node `i` (fixed in the vector loop) into `lanes`.
    pub(super) fn emit_splat(&mut self, i: usize, lanes: Lanes) -> Result<()> {
        let x = self.scalar_of(ExprRef(i as u32))?;
        let v = match lanes {
            Lanes::F32 => self.b.ins().splat(types::F32X4, x),
            Lanes::I32 => {
                let x = match self.b.func.dfg.value_type(x) {
                    types::I64 => self.b.ins().ireduce(types::I32, x),
                    _ => x,
                };
                self.b.ins().splat(types::I32X4, x)
            }
            Lanes::Mask => {
                let w = self.b.ins().uextend(types::I32, x);
                let m = self.b.ins().ineg(w);
                self.b.ins().splat(types::I32X4, m)
            }
        };
        self.vals.splat[i] = Some(v);
        Ok(())
    }

    /// The row load of node `i` in [`GuardMode::Row`], if it has one.
    fn row_load(&self, i: usize) -> Option<RowLoad> {
        self.nest.row_loads.get(i).copied().flatten()
    }

    /// The `i32x4` mask of an `i8` truth value: all ones where it is 1.
    pub(super) fn lane_mask(&mut self, ok: Value) -> Value {
        let w = self.b.ins().uextend(types::I32, ok);
        let m = self.b.ins().ineg(w);
        self.b.ins().splat(types::I32X4, m)
    }

    /// A scalar value splatted into the vector of `lanes`.
    pub(super) fn splat_lanes(&mut self, x: Value, lanes: Lanes) -> Value {
        self.b.ins().splat(vector_type(lanes), x)
    }

    fn splat_f32(&mut self, c: f32) -> Value {
        let s = self.fconst(c);
        self.b.ins().splat(types::F32X4, s)
    }

    fn splat_i32(&mut self, c: i32) -> Value {
        let s = iconst(self.b, types::I32, c as i64);
        self.b.ins().splat(types::I32X4, s)
    }

    /// `mask ? t : f` per lane (`mask` an `i32x4` mask).
    fn vselect(&mut self, mask: Value, t: Value, f: Value) -> Value {
        let ty = self.b.func.dfg.value_type(t);
        let m = if ty == types::I32X4 {
            mask
        } else {
            bitcast(self.b, ty, mask)
        };
        self.b.ins().bitselect(m, t, f)
    }

    /// Emits node `i` for unrolled group `g` (elements `4g..4g+4` after the loop
    /// variable's current value) as a vector of the lanes the plan gave it.
    pub(super) fn emit_vector_node(&mut self, i: usize, g: usize) -> Result<()> {
        let body = self.vals.body;
        let node = &body.nodes[i];
        let lanes_of = |s: &Self, r: &ExprRef| s.vals.lanes.get(r.index()).copied().flatten();
        let v = match &node.op {
            ExprOp::Load(l) if !l.guard.is_empty() && self.nest.guards == GuardMode::Test => {
                self.vector_guarded_load(i, l, g)?
            }
            ExprOp::Load(l) if !l.guard.is_empty() && self.nest.guards == GuardMode::Masked => {
                match self.masked_load(i, l, g)? {
                    Some(v) => v,
                    None => self.vector_guarded_load(i, l, g)?,
                }
            }
            // In a row whose fixed guards may fail, a load with such guards reads at an
            // index kept in the buffer and takes its fill where they fail.
            ExprOp::Load(l) if self.nest.guards == GuardMode::Row && self.row_load(i).is_some() => {
                let r = self
                    .row_load(i)
                    .ok_or_else(|| Error::internal("no row load"))?;
                let lanes =
                    self.vals.lanes[i].ok_or_else(|| Error::internal("load without lanes"))?;
                let x = self.var_value(self.level_var(self.nest.innermost))?;
                let moved = self.int_op_imm(IntOp::Mul, x, r.step);
                let idx = self.int_op(IntOp::Add, r.rest, moved);
                let addr = self.element_address(l.buffer, idx)?;
                let flags = self.vector_flags();
                let loaded = self.vector_load(i, vector_type(lanes), flags, addr, g);
                self.vselect(r.mask, loaded, r.fill)
            }
            // Inside a peeled loop's interval every lane's guard that is left holds: a
            // plain vector load.
            ExprOp::Load(l) => {
                let lanes =
                    self.vals.lanes[i].ok_or_else(|| Error::internal("load without lanes"))?;
                let idx = self.index_value(&l.index)?;
                let addr = self.element_address(l.buffer, idx)?;
                let flags = self.vector_flags();
                self.vector_load(i, vector_type(lanes), flags, addr, g)
            }
            ExprOp::Index(e) => {
                let v = self.level_var(self.nest.innermost);
                let (rest, c) = crate::plan::analysis::split_linear(e, v)
                    .ok_or_else(|| Error::internal("index not linear"))?;
                let rest = rest.simplify(&self.nest.ext);
                // `rest + c*v` at lane 0, computed once per iteration (memoized).
                let lane0 = rest + IndexExpr::Var(v) * c;
                let base = self.index_value(&lane0)?;
                self.lane_values(base, c, 4 * g as i64)
            }
            ExprOp::Unary(op, a) => {
                let x = self.vector_operand(*a, g)?;
                let from = lanes_of(self, a).ok_or_else(|| Error::internal("operand lanes"))?;
                self.vector_unary(*op, x, from)?
            }
            ExprOp::Binary(op, a, b) => {
                let x = self.vector_operand(*a, g)?;
                let y = self.vector_operand(*b, g)?;
                let from = lanes_of(self, a).ok_or_else(|| Error::internal("operand lanes"))?;
                self.vector_binary(*op, x, y, from)?
            }
            ExprOp::Where(c, a, b) => {
                let c = self.vector_operand(*c, g)?;
                let x = self.vector_operand(*a, g)?;
                let y = self.vector_operand(*b, g)?;
                self.vselect(c, x, y)
            }
            ExprOp::Cast(a) => {
                let x = self.vector_operand(*a, g)?;
                let from = lanes_of(self, a).ok_or_else(|| Error::internal("operand lanes"))?;
                let to = self.vals.lanes[i].ok_or_else(|| Error::internal("cast without lanes"))?;
                self.vector_cast(x, from, to)
            }
            ExprOp::Const(_) | ExprOp::Acc(_) | ExprOp::CheckedIndex { .. } => {
                return Err(Error::internal(format!("t{i} cannot be vector code")));
            }
        };
        let slot = self.vals.vector[i].get_or_insert_with(Vec::new);
        if slot.len() != g {
            return Err(Error::internal(format!("t{i} emitted out of group order")));
        }
        slot.push(v);
        Ok(())
    }

    /// The vector of group `g` of load `i`, whose lane 0 of group 0 is at `addr + offset`:
    /// one vector load, or for a load of stride `s` (2 or 3, the plan's `strided`) the
    /// lanes `b, b+s, b+2s, b+3s` of group `b = addr + 4gs` as two vector loads, at `b`
    /// (lanes 0 and 1) and at `b + 3s - 3` (lanes 2 and 3), and one shuffle: exactly the
    /// elements from the first lane's to the last lane's are read, so none outside the
    /// buffer.
    fn vector_load(
        &mut self,
        i: usize,
        vty: Type,
        flags: MemFlagsData,
        (addr, offset): (Value, i32),
        g: usize,
    ) -> Value {
        let s = self.lane_stride(i);
        if s == 1 {
            return self
                .b
                .ins()
                .load(vty, flags, addr, offset + (16 * g) as i32);
        }
        let first = offset + (16 * g as i64 * s) as i32;
        let low = self.b.ins().load(vty, flags, addr, first);
        let high = self
            .b
            .ins()
            .load(vty, flags, addr, first + (4 * (3 * s - 3)) as i32);
        // Lanes 0 and s of `low`, then lanes 3 - s and 3 of `high` (bytes 16.. of the pair).
        let lanes = [0, s, 4 + 3 - s, 4 + 3];
        let bytes: Vec<u8> = lanes
            .iter()
            .flat_map(|&l| (0..4).map(move |b| (4 * l + b) as u8))
            .collect();
        let low = bitcast(self.b, types::I8X16, low);
        let high = bitcast(self.b, types::I8X16, high);
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(bytes));
        let v = self.b.ins().shuffle(low, high, mask);
        bitcast(self.b, vty, v)
    }

    /// A guarded (padded) load of group `g` as vector code. Each guard bound is affine in
    /// the loop variable (the plan checks), so the lanes where the guard holds form an
    /// interval: when it holds at the group's first and last lane it holds at all four,
    /// whose elements are then in bounds and contiguous, and one vector load does (a
    /// window's interior). Otherwise (its edge) each lane is loaded as the scalar code
    /// loads it: index clamped into the buffer, `other` where the guard fails. The test
    /// and the fast load's address are computed before the branch; what the slow arm
    /// computes is not memoized past it.
    fn vector_guarded_load(&mut self, i: usize, l: &Load, g: usize) -> Result<Value> {
        let lanes = self.vals.lanes[i].ok_or_else(|| Error::internal("load without lanes"))?;
        let vty = vector_type(lanes);
        let d = self.vals.body.nodes[i].dtype;
        if self.buffer_numel(l.buffer)? == 0 {
            // Nothing can be read: every lane is `other`.
            let other = self.constant(l.other, d)?;
            return Ok(self.b.ins().splat(vty, other));
        }
        // Index values of outer levels first computed here live in this loop body, which
        // does not dominate what follows the loop (the tail, later stages): they are
        // forgotten at the end, as the slow arm's are at its end.
        let before = self.nest.index_memo.clone();
        let innermost = self.nest.innermost;
        let var = self.level_var(innermost);
        let ext = self.nest.ext.clone();
        let at = |e: &IndexExpr, k: i64| {
            crate::plan::analysis::substitute(e, &|v| {
                (v == var).then(|| IndexExpr::Var(var) + IndexExpr::Const(k))
            })
            .simplify(&ext)
        };
        let bounds_at = |k: i64| -> Vec<Bound> {
            l.guard
                .iter()
                .map(|b| Bound {
                    expr: at(&b.expr, k),
                    lo: b.lo,
                    hi: b.hi,
                })
                .collect()
        };
        let first = 4 * g as i64;
        let g_first = self.guard_value(&bounds_at(first))?;
        let g_last = self.guard_value(&bounds_at(first + 3))?;
        let (Some(g_first), Some(g_last)) = (g_first, g_last) else {
            return Err(Error::internal("a guarded load without bounds"));
        };
        let all = self.flag_and(g_first, g_last);
        let idx = self.index_value(&l.index)?;
        let addr = self.element_address(l.buffer, idx)?;
        let flags = self.vector_flags();
        // Where the guards are constants here (a row's first or last group) the group
        // takes one arm, without a branch.
        let known = self.known_flag(all);
        if known == Some(true) {
            return Ok(self.vector_load(i, vty, flags, addr, g));
        }
        let slow = self.b.create_block();
        let join = self.b.create_block();
        self.b.append_block_param(join, vty);
        if known.is_none() {
            let fast = self.b.create_block();
            self.b.ins().brif(all, fast, &[], slow, &[]);
            self.b.switch_to_block(fast);
            self.b.seal_block(fast);
            let whole = self.vector_load(i, vty, flags, addr, g);
            self.b.ins().jump(join, &[whole.into()]);
        } else {
            self.b.ins().jump(slow, &[]);
        }

        self.b.switch_to_block(slow);
        self.b.seal_block(slow);
        let memo = self.nest.index_memo.clone();
        let other = self.constant(l.other, d)?;
        if let Some(masked) = self.masked_edge(l, i, g, first, &at)? {
            // The group's elements are all inside the buffer: one vector load, and
            // `other` in the lanes whose guard fails.
            let (inside, lanes_ok) = masked;
            let load_block = self.b.create_block();
            let scalar_block = self.b.create_block();
            self.b
                .ins()
                .brif(inside, load_block, &[], scalar_block, &[]);
            self.b.switch_to_block(load_block);
            self.b.seal_block(load_block);
            let whole = self.vector_load(i, vty, flags, addr, g);
            let others = self.b.ins().splat(vty, other);
            let v = self.vselect(lanes_ok, whole, others);
            self.b.ins().jump(join, &[v.into()]);
            self.b.switch_to_block(scalar_block);
            self.b.seal_block(scalar_block);
        }
        let mut v: Option<Value> = None;
        for k in 0..4 {
            let lane = first + k;
            let (index, bounds) = (at(&l.index, lane), bounds_at(lane));
            let x = self.guarded_scalar_load(l.buffer, &index, &bounds, other, d, true)?;
            v = Some(match v {
                None => self.b.ins().splat(vty, x),
                Some(v) => self.b.ins().insertlane(v, x, k as u8),
            });
        }
        self.nest.index_memo = memo;
        let gathered = v.ok_or_else(|| Error::internal("no lanes"))?;
        self.b.ins().jump(join, &[gathered.into()]);

        self.b.switch_to_block(join);
        self.b.seal_block(join);
        self.nest
            .index_memo
            .retain(|e, (_, level)| *level >= innermost || before.contains_key(e));
        Ok(self.b.block_params(join)[0])
    }

    /// A guarded load of group `g` in [`GuardMode::Masked`]. `None` where a guard that
    /// moves with the loop is not a constant here or the load is not `f32` (then it tests
    /// its guards as a window's edge does).
    fn masked_load(&mut self, i: usize, l: &Load, g: usize) -> Result<Option<Value>> {
        let lanes = self.vals.lanes[i].ok_or_else(|| Error::internal("load without lanes"))?;
        if lanes != Lanes::F32 {
            return Ok(None);
        }
        let var = self.level_var(self.nest.innermost);
        let mut holds = [true; 4];
        let mut fixed = Vec::new();
        for b in &l.guard {
            let Some((_, a)) = crate::plan::analysis::split_linear(&b.expr, var) else {
                return Ok(None);
            };
            if a == 0 {
                fixed.push(b.clone());
                continue;
            }
            let x = self.index_value(&b.expr)?;
            let Some(k) = self.known_i64(x) else {
                return Ok(None);
            };
            for (j, h) in holds.iter_mut().enumerate() {
                *h &= (b.lo..b.hi).contains(&(k + a * (4 * g + j) as i64));
            }
        }
        let d = self.vals.body.nodes[i].dtype;
        let fill = self.constant(l.other, d)?;
        let fill = self.splat_lanes(fill, lanes);
        if !holds.iter().any(|&h| h) {
            return Ok(Some(fill));
        }
        // Computed before the test, so they dominate what follows it.
        let idx = self.index_value(&l.index)?;
        let addr = self.element_address(l.buffer, idx)?;
        let flags = self.vector_flags();
        let ok = self.guard_value(&fixed)?;
        let (load, join) = match ok {
            Some(ok) => {
                let load = self.b.create_block();
                let join = self.b.create_block();
                self.b.append_block_param(join, types::F32X4);
                self.b.ins().brif(ok, load, &[], join, &[fill.into()]);
                self.b.switch_to_block(load);
                self.b.seal_block(load);
                (true, Some(join))
            }
            None => (false, None),
        };
        let mut v = self.vector_load(i, types::F32X4, flags, addr, g);
        if !holds.iter().all(|&h| h) {
            let bytes: Vec<u8> = holds
                .iter()
                .flat_map(|&h| (-(h as i32)).to_le_bytes())
                .collect();
            let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
            let mask = self.b.ins().vconst(types::I32X4, c);
            v = self.vselect(mask, v, fill);
        }
        if let (true, Some(join)) = (load, join) {
            self.b.ins().jump(join, &[v.into()]);
            self.b.switch_to_block(join);
            self.b.seal_block(join);
            v = self.b.block_params(join)[0];
        }
        Ok(Some(v))
    }

    /// For a guarded vector load at a window's edge: whether all of group `g`'s elements
    /// (from the first lane's to the last lane's, as [`Self::vector_load`] reads them) are
    /// inside the buffer, and the `i32x4` mask of the lanes whose guard holds. Each
    /// bound's value at lane `k` is its value at the group's first lane (`first`) plus
    /// `k` times its coefficient. `None` where that cannot be done in `i32` lanes.
    fn masked_edge(
        &mut self,
        l: &Load,
        i: usize,
        g: usize,
        first: i64,
        at: &dyn Fn(&IndexExpr, i64) -> IndexExpr,
    ) -> Result<Option<(Value, Value)>> {
        const LIMIT: i64 = 1 << 30;
        let var = self.level_var(self.nest.innermost);
        let mut bounds = Vec::new();
        for b in &l.guard {
            let Some((_, a)) = crate::plan::analysis::split_linear(&b.expr, var) else {
                return Ok(None);
            };
            let fits = |x: i64| x.abs() < LIMIT;
            match b.expr.range(&self.nest.ext) {
                Some((lo, hi))
                    if fits(lo) && fits(hi) && fits(b.lo) && fits(b.hi) && fits(4 * a) => {}
                _ => return Ok(None),
            }
            bounds.push((at(&b.expr, first), a, b.lo, b.hi));
        }
        let numel = self.buffer_numel(l.buffer)? as i64;
        let stride = self.lane_stride(i);
        // The group's first element and its last (`vector_load` reads from one to the other).
        let idx = self.index_value(&l.index)?;
        let lo_idx = self.int_op_imm(IntOp::Add, idx, 4 * g as i64 * stride);
        let hi_idx = self.int_op_imm(IntOp::Add, lo_idx, 3 * stride);
        let ge = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, lo_idx, 0);
        let lt = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, hi_idx, numel);
        let inside = self.b.ins().band(ge, lt);
        let mut mask: Option<Value> = None;
        for (e0, a, lo, hi) in bounds {
            let x = self.index_value(&e0)?;
            if let Some(k) = self.known_i64(x) {
                // The lanes' values are constants: so is the mask.
                let bytes: Vec<u8> = (0..4)
                    .flat_map(|j| {
                        let ok = (lo..hi).contains(&(k + a * j));
                        (-(ok as i32)).to_le_bytes()
                    })
                    .collect();
                let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
                let ok = self.b.ins().vconst(types::I32X4, c);
                mask = Some(match mask {
                    None => ok,
                    Some(m) => self.b.ins().band(m, ok),
                });
                continue;
            }
            let x = self.lane_values(x, a, 0);
            let lo = self.splat_i32(lo as i32);
            let hi = self.splat_i32(hi as i32);
            let ge = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, x, lo);
            let lt = self.b.ins().icmp(IntCC::SignedLessThan, x, hi);
            let ok = self.b.ins().band(ge, lt);
            mask = Some(match mask {
                None => ok,
                Some(m) => self.b.ins().band(m, ok),
            });
        }
        Ok(mask.map(|m| (inside, m)))
    }

    /// The `i32x4` of `base + step * (from + k)` for lanes `k = 0..4` (`base` an `i64`
    /// known to fit `i32` with the steps).
    fn lane_values(&mut self, base: Value, step: i64, from: i64) -> Value {
        let base = self.b.ins().ireduce(types::I32, base);
        let base = self.b.ins().splat(types::I32X4, base);
        let steps: Vec<u8> = (0..4i64)
            .flat_map(|k| ((step * (from + k)) as i32).to_le_bytes())
            .collect();
        let steps = self.b.func.dfg.constants.insert(ConstantData::from(steps));
        let steps = self.b.ins().vconst(types::I32X4, steps);
        self.b.ins().iadd(base, steps)
    }

    /// The element stride between lanes of vector load node `i` (1 unless the plan
    /// made it a strided load).
    pub(super) fn lane_stride(&self, i: usize) -> i64 {
        self.vals
            .strided
            .iter()
            .find(|&&(n, _)| n == i)
            .map_or(1, |&(_, s)| s)
    }

    fn vector_unary(&mut self, op: UnaryOp, x: Value, from: Lanes) -> Result<Value> {
        Ok(match from {
            // `not` included: a mask of the lanes equal to zero.
            Lanes::F32 => self.float_unary(op, x),
            Lanes::I32 => match op {
                UnaryOp::Neg => self.b.ins().ineg(x),
                UnaryOp::Abs => self.b.ins().iabs(x),
                UnaryOp::Relu => {
                    let zero = self.splat_i32(0);
                    self.b.ins().smax(x, zero)
                }
                UnaryOp::Not => {
                    let zero = self.splat_i32(0);
                    self.b.ins().icmp(IntCC::Equal, x, zero)
                }
                UnaryOp::Floor | UnaryOp::Ceil => x,
                UnaryOp::BitwiseNot => self.b.ins().bnot(x),
                _ => return Err(Error::internal(format!("vector {} of i32", op.name()))),
            },
            Lanes::Mask => match op {
                UnaryOp::Not | UnaryOp::BitwiseNot => self.b.ins().bnot(x),
                _ => x,
            },
        })
    }

    fn vector_truth(&mut self, x: Value, lanes: Lanes) -> Value {
        match lanes {
            Lanes::F32 => {
                let zero = self.splat_f32(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            Lanes::I32 => {
                let zero = self.splat_i32(0);
                self.b.ins().icmp(IntCC::NotEqual, x, zero)
            }
            Lanes::Mask => x,
        }
    }

    fn vector_binary(&mut self, op: BinaryOp, x: Value, y: Value, from: Lanes) -> Result<Value> {
        if op.is_logical() {
            let p = self.vector_truth(x, from);
            let q = self.vector_truth(y, from);
            return Ok(if op == BinaryOp::And {
                self.b.ins().band(p, q)
            } else {
                self.b.ins().bor(p, q)
            });
        }
        Ok(match from {
            Lanes::F32 => match op {
                _ if op.is_comparison() => self.b.ins().fcmp(float_cc(op), x, y),
                BinaryOp::Pow => {
                    let vm = self.target.vm;
                    vm.pow(self.b, x, y)
                }
                BinaryOp::Maximum => {
                    let vm = self.target.vm;
                    vm.maximum(self.b, x, y)
                }
                BinaryOp::Minimum => {
                    let vm = self.target.vm;
                    vm.minimum(self.b, x, y)
                }
                _ => self.float_arith(op, x, y),
            },
            Lanes::I32 => match op {
                _ if op.is_comparison() => self.b.ins().icmp(int_cc(op, true), x, y),
                BinaryOp::Add => self.b.ins().iadd(x, y),
                BinaryOp::Sub => self.b.ins().isub(x, y),
                BinaryOp::Mul => self.b.ins().imul(x, y),
                BinaryOp::Maximum => self.b.ins().smax(x, y),
                BinaryOp::Minimum => self.b.ins().smin(x, y),
                BinaryOp::BitwiseAnd => self.b.ins().band(x, y),
                BinaryOp::BitwiseOr => self.b.ins().bor(x, y),
                BinaryOp::BitwiseXor => self.b.ins().bxor(x, y),
                _ => return Err(Error::internal(format!("vector {} of i32", op.name()))),
            },
            Lanes::Mask => match op {
                BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, x, y),
                BinaryOp::Ne | BinaryOp::BitwiseXor => self.b.ins().icmp(IntCC::NotEqual, x, y),
                BinaryOp::Maximum | BinaryOp::BitwiseOr => self.b.ins().bor(x, y),
                _ => self.b.ins().band(x, y),
            },
        })
    }

    fn vector_cast(&mut self, x: Value, from: Lanes, to: Lanes) -> Value {
        match (from, to) {
            (Lanes::F32, Lanes::I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, x),
            (Lanes::I32, Lanes::F32) => self.b.ins().fcvt_from_sint(types::F32X4, x),
            (_, Lanes::Mask) => self.vector_truth(x, from),
            (Lanes::Mask, Lanes::F32) => {
                let one = self.splat_f32(1.0);
                let one = bitcast(self.b, types::I32X4, one);
                let bits = self.b.ins().band(x, one);
                bitcast(self.b, types::F32X4, bits)
            }
            (Lanes::Mask, Lanes::I32) => {
                let one = self.splat_i32(1);
                self.b.ins().band(x, one)
            }
            _ => x,
        }
    }
}

//! Hand-built elementwise `f32` kernels: a vector loop, a vector tail, a scalar tail.
//!
//! A kernel is `fn(in_0: *const f32, .., out: *mut f32, n: usize)` and computes
//! `out[i] = op(in_0[i], ..)` for `i in 0..n`. The main loop handles `4 * unroll` elements
//! per iteration as `unroll` independent `f32x4` operations (several in flight hide the
//! latency of loads and long math sequences), then single `f32x4` steps, then scalars. The
//! same `op` closure is applied to `f32x4` and to `f32` values, which is why the vector math
//! in [`super::vmath`] accepts both.
//!
//! These kernels are the yardstick for tests and benchmarks, and show the loop shape the
//! loop-IR code generator emits. [`UnaryKernel`] and [`BinaryKernel`] call them safely:
//! they check slice lengths, which is all the generated loop relies on.

use std::fmt;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::jit::{Jit, JitCode, JitError};

/// The operation applied per element (or per `f32x4` of elements).
pub type ElementOp<'a> = &'a dyn Fn(&mut FunctionBuilder<'_>, &[Value]) -> Value;

/// Defines `name` as an elementwise kernel over `arity` inputs (see the module docs).
/// `unroll` is the number of `f32x4` operations per main-loop iteration (at least 1).
pub fn define_elementwise_f32(
    jit: &mut Jit,
    name: &str,
    arity: usize,
    unroll: usize,
    op: ElementOp<'_>,
) -> Result<(), JitError> {
    let ptr = jit.pointer_type();
    let params = vec![ptr; arity + 2];
    let signature = jit.signature(&params, &[]);
    let unroll = unroll.max(1) as i64;
    jit.define_with(name, signature, |b| {
        let flags = MemFlagsData::new().with_notrap();
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry).to_vec();
        let (inputs, out, n) = (&args[..arity], args[arity], args[arity + 1]);

        // One step of `width` elements at element index `i`, vector of `count` f32x4 or a scalar.
        let step = |b: &mut FunctionBuilder<'_>, i: Value, count: i64, scalar: bool| {
            let byte_offset = b.ins().ishl_imm_u(i, 2);
            let in_addrs: Vec<Value> = inputs
                .iter()
                .map(|&p| b.ins().iadd(p, byte_offset))
                .collect();
            let out_addr = b.ins().iadd(out, byte_offset);
            let ty = if scalar { types::F32 } else { types::F32X4 };
            let lane_bytes = if scalar { 4 } else { 16 };
            for u in 0..count {
                let offset = (u * lane_bytes) as i32;
                let loaded: Vec<Value> = in_addrs
                    .iter()
                    .map(|&a| b.ins().load(ty, flags, a, offset))
                    .collect();
                let result = op(b, &loaded);
                b.ins().store(flags, result, out_addr, offset);
            }
        };

        // Three counted loops, each `head(i) -> body(i) -> head(i + step)`, then `exit`.
        let exit = b.create_block();
        let main_end = b.ins().band_imm_s(n, !(4 * unroll - 1));
        let vec_end = b.ins().band_imm_s(n, !3i64);
        let stages: Vec<(Value, i64, i64, bool)> = if unroll > 1 {
            vec![
                (main_end, unroll, 4 * unroll, false),
                (vec_end, 1, 4, false),
                (n, 1, 1, true),
            ]
        } else {
            vec![(vec_end, 1, 4, false), (n, 1, 1, true)]
        };
        let zero = b.ins().iconst(ptr, 0);
        let mut start = zero;
        for (end, count, advance, scalar) in stages {
            let head = b.create_block();
            let body = b.create_block();
            let after = b.create_block();
            let i = b.append_block_param(head, ptr);
            b.ins().jump(head, &[start.into()]);
            b.switch_to_block(head);
            let more = b.ins().icmp(IntCC::UnsignedLessThan, i, end);
            b.ins().brif(more, body, &[], after, &[]);
            b.switch_to_block(body);
            step(b, i, count, scalar);
            let next = b.ins().iadd_imm_s(i, advance);
            b.ins().jump(head, &[next.into()]);
            b.switch_to_block(after);
            start = i;
        }
        b.ins().jump(exit, &[]);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
    })
}

/// Why a kernel call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// Input and output slices differ in length.
    LengthMismatch {
        /// The output length.
        expected: usize,
        /// The offending input length.
        found: usize,
    },
    /// The named function does not have the kernel signature.
    WrongSignature(String),
    /// The function could not be found.
    Jit(JitError),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::LengthMismatch { expected, found } => {
                write!(
                    f,
                    "kernel input has {found} elements, output has {expected}"
                )
            }
            KernelError::WrongSignature(n) => write!(f, "`{n}` is not an elementwise f32 kernel"),
            KernelError::Jit(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for KernelError {}

type UnaryFnPtr = unsafe extern "C" fn(*const f32, *mut f32, usize);
type BinaryFnPtr = unsafe extern "C" fn(*const f32, *const f32, *mut f32, usize);

fn checked_address(code: &JitCode, name: &str, arity: usize) -> Result<*const u8, KernelError> {
    let func = code.function(name).map_err(KernelError::Jit)?;
    let ptr = super::jit::HOST_POINTER;
    if !func.has_signature(&vec![ptr; arity + 2], &[]) {
        return Err(KernelError::WrongSignature(name.to_string()));
    }
    Ok(func.as_ptr())
}

/// A finalized one-input elementwise kernel, callable on slices.
#[derive(Clone, Copy)]
pub struct UnaryKernel<'a> {
    entry: UnaryFnPtr,
    _code: &'a JitCode,
}

impl<'a> UnaryKernel<'a> {
    /// The kernel `name` in `code`, which must have been defined by [`define_elementwise_f32`]
    /// with arity 1 (the signature is checked).
    pub fn new(code: &'a JitCode, name: &str) -> Result<Self, KernelError> {
        let address = checked_address(code, name, 1)?;
        // SAFETY: the function was compiled with exactly this signature (checked above:
        // three pointer-sized arguments, no results, default C calling convention), and the
        // returned value borrows `code`, which keeps the machine code mapped.
        let entry = unsafe { std::mem::transmute::<*const u8, UnaryFnPtr>(address) };
        Ok(UnaryKernel { entry, _code: code })
    }

    /// `dst[i] = op(src[i])` for every `i`.
    pub fn run(&self, src: &[f32], dst: &mut [f32]) -> Result<(), KernelError> {
        if src.len() != dst.len() {
            return Err(KernelError::LengthMismatch {
                expected: dst.len(),
                found: src.len(),
            });
        }
        // SAFETY: the generated loop reads elements 0..n of `src` and writes elements 0..n of
        // `dst`, and both slices have exactly n elements; `dst` is borrowed mutably, so it does
        // not alias `src`.
        unsafe { (self.entry)(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// A finalized two-input elementwise kernel, callable on slices.
#[derive(Clone, Copy)]
pub struct BinaryKernel<'a> {
    entry: BinaryFnPtr,
    _code: &'a JitCode,
}

impl<'a> BinaryKernel<'a> {
    /// The kernel `name` in `code`, defined by [`define_elementwise_f32`] with arity 2.
    pub fn new(code: &'a JitCode, name: &str) -> Result<Self, KernelError> {
        let address = checked_address(code, name, 2)?;
        // SAFETY: as for `UnaryKernel::new`, with four pointer-sized arguments.
        let entry = unsafe { std::mem::transmute::<*const u8, BinaryFnPtr>(address) };
        Ok(BinaryKernel { entry, _code: code })
    }

    /// `dst[i] = op(a[i], b[i])` for every `i`.
    pub fn run(&self, a: &[f32], b: &[f32], dst: &mut [f32]) -> Result<(), KernelError> {
        for input in [a, b] {
            if input.len() != dst.len() {
                return Err(KernelError::LengthMismatch {
                    expected: dst.len(),
                    found: input.len(),
                });
            }
        }
        // SAFETY: as in `UnaryKernel::run`: all three slices have exactly n elements.
        unsafe { (self.entry)(a.as_ptr(), b.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

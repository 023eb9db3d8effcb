//! Flush-to-zero and denormals-are-zero for compiled code.
//!
//! On x86-64 a float operation with a subnormal operand or result can take a
//! microcode assist costing on the order of a hundred cycles (far more on Intel than on
//! AMD), so a kernel whose values drift into the subnormal range (`exp` of very negative
//! numbers in a softmax, products of such values in a GEMM) can run many times slower
//! than the same kernel on normal values. Setting MXCSR's FTZ (results that would be
//! subnormal become zero) and DAZ (subnormal operands read as zero) bits removes the
//! assists at the price of IEEE gradual underflow. On AArch64 the FPCR's FZ bit does both.
//!
//! The mode is a per-thread register. [`FlushDenormals::enter`] sets it on the calling
//! thread and restores the previous value when the guard is dropped; the thread pool sets
//! it on each worker for the duration of a job that asks for it. It is off by default
//! (as in PyTorch, whose `torch.set_flush_denormal` is opt-in, and ONNX Runtime, whose
//! `session.set_denormal_as_zero` and `SetGlobalDenormalAsZero` are opt-in): with it
//! on, results that the interpreter gives as subnormals are zero instead.

/// Whether this machine can flush denormals ([`FlushDenormals::enter`] does nothing
/// where it cannot).
pub const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// The floating-point control state saved by [`FlushDenormals::enter`], restored on drop.
#[must_use = "the mode is restored when the guard is dropped"]
#[derive(Debug)]
pub struct FlushDenormals {
    saved: Option<usize>,
}

impl FlushDenormals {
    /// Turns flush-to-zero and denormals-are-zero on for the calling thread when `on` is
    /// true (and does nothing when it is false), until the guard is dropped.
    pub fn enter(on: bool) -> FlushDenormals {
        if !on || !SUPPORTED {
            return FlushDenormals { saved: None };
        }
        let saved = read_control();
        write_control(saved | FLUSH_BITS);
        FlushDenormals { saved: Some(saved) }
    }

    /// Whether the calling thread currently flushes denormals.
    pub fn active() -> bool {
        SUPPORTED && read_control() & FLUSH_BITS == FLUSH_BITS
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            write_control(saved);
        }
    }
}

/// MXCSR's DAZ (bit 6) and FTZ (bit 15).
#[cfg(target_arch = "x86_64")]
const FLUSH_BITS: usize = (1 << 6) | (1 << 15);

#[cfg(target_arch = "x86_64")]
fn read_control() -> usize {
    let mut csr: u32 = 0;
    // SAFETY: `stmxcsr` stores the 32-bit MXCSR register into the local `csr`, which is
    // valid for writes; it touches nothing else and every x86-64 CPU has SSE.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags));
    }
    csr as usize
}

#[cfg(target_arch = "x86_64")]
fn write_control(value: usize) {
    let csr = value as u32;
    // SAFETY: `ldmxcsr` loads MXCSR from the local `csr`; the value is one read by
    // `stmxcsr` with at most the DAZ and FTZ bits added, so no reserved bit is set
    // (which would fault). Changing rounding or flush modes is what the caller asked
    // for and affects only this thread.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, readonly, preserves_flags));
    }
}

/// FPCR's FZ (bit 24).
#[cfg(target_arch = "aarch64")]
const FLUSH_BITS: usize = 1 << 24;

#[cfg(target_arch = "aarch64")]
fn read_control() -> usize {
    let fpcr: u64;
    // SAFETY: reading FPCR has no side effect.
    unsafe {
        std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags));
    }
    fpcr as usize
}

#[cfg(target_arch = "aarch64")]
fn write_control(value: usize) {
    // SAFETY: the value is one read from FPCR with at most the FZ bit added; it changes
    // this thread's floating-point modes only, as the caller asked.
    unsafe {
        std::arch::asm!("msr fpcr, {}", in(reg) value as u64, options(nomem, nostack, preserves_flags));
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const FLUSH_BITS: usize = 0;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn read_control() -> usize {
    0
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn write_control(_: usize) {}

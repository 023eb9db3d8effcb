//! The runtime's steady state: a warm `run_into` allocates nothing and reuses every
//! buffer; runs give the same results on teams of 1, 2, 3 and 7 threads of the one
//! process pool (bigger teams than this machine has cores included); bound outputs
//! that a kernel does not fully cover are cleared between runs; flushing denormals
//! is scoped to the run.
//!
//! The allocator of this test binary counts allocations, so this file holds the tests
//! that need to know that nothing else allocates while they measure.

mod support;
use support::*;

use ferrite_cpu::{global_pool, CpuOptions, CpuProgram, FlushDenormals};
use ferrite_ir::Tensor;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Counts allocations while `COUNTING` is set.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The tests of this file measure one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: forwards to the system allocator; the counter has no effect on allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    f();
    COUNTING.store(false, Ordering::Relaxed);
    ALLOCATIONS.load(Ordering::Relaxed)
}

fn inputs_of(g: &ferrite_ir::Graph) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, t)| Tensor::random(t, 11 + i as u64))
        .collect()
}

/// Every example, fused, big enough for GEMM and parallel kernels: a warm run into bound
/// outputs allocates nothing (programs with GEMMs: the same few allocations each run, the
/// `gemm` crate's packing buffers), at 1 and 3 threads, and gives the outputs of `run`.
#[test]
fn warm_runs_into_bound_outputs_allocate_nothing() {
    let _serial = SERIAL.lock().unwrap();
    for name in example_names() {
        let g = example(&name);
        let p = schedule(&g, true);
        let inputs = inputs_of(&g);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        for threads in [1, 3] {
            let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
            let expected = c.run(&inputs).unwrap();
            let mut outputs = c.new_outputs();
            c.run_into(&refs[..], &mut outputs).unwrap();
            let addresses: Vec<usize> = outputs.iter().map(address).collect();
            let per_run: Vec<usize> = (0..3)
                .map(|_| allocations_during(|| c.run_into(&refs[..], &mut outputs).unwrap()))
                .collect();
            let gemm = (0..p.kernels.len()).any(|k| c.uses_gemm(k));
            if gemm {
                // Known gap: the `gemm` crate takes its packing buffers from the heap on
                // every call. Bounded (the same count every warm run), never growing.
                assert!(
                    per_run.iter().all(|&n| n == per_run[0]),
                    "{name} at {threads} threads: allocations per warm run {per_run:?}"
                );
            } else {
                assert_eq!(
                    per_run,
                    [0, 0, 0],
                    "{name} at {threads} threads: allocations in warm runs"
                );
            }
            assert_eq!(outputs, expected, "{name} at {threads} threads");
            let after: Vec<usize> = outputs.iter().map(address).collect();
            assert_eq!(addresses, after, "{name}: outputs moved");
        }
    }
}

fn address(t: &Tensor) -> usize {
    match &t.data {
        ferrite_ir::Data::F32(v) => v.as_ptr() as usize,
        ferrite_ir::Data::F16(v) => v.as_ptr() as usize,
        ferrite_ir::Data::Bf16(v) => v.as_ptr() as usize,
        ferrite_ir::Data::I32(v) => v.as_ptr() as usize,
        ferrite_ir::Data::I64(v) => v.as_ptr() as usize,
        ferrite_ir::Data::Bool(v) => v.as_ptr() as usize,
        #[allow(unreachable_patterns)]
        _ => 0,
    }
}

/// The same results on teams of 1, 2, 3 and 7 threads of the one pool, which grows to
/// the largest team asked for and is shared by every program.
#[test]
fn teams_of_any_size_agree_and_share_one_pool() {
    let _serial = SERIAL.lock().unwrap();
    for name in example_names() {
        let g = example(&name);
        let p = schedule(&g, true);
        let inputs = inputs_of(&g);
        let base = CpuProgram::compile(&p, &CpuOptions::with_threads(1))
            .unwrap()
            .run(&inputs)
            .unwrap();
        for threads in [2, 3, 7] {
            let c = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
            assert_eq!(c.threads(), threads);
            let out = c.run(&inputs).unwrap();
            for (a, b) in base.iter().zip(&out) {
                // A GEMM cut into row or column blocks is the library's single-threaded
                // kernel on each block, whose cache blocking (and so the order in which
                // K's partial sums are added) follows the block's size: the tolerance of
                // the other GEMM tests, scaled by the largest value.
                let big = a.to_f64().iter().fold(0.0f64, |m, v| m.max(v.abs()));
                a.check_close(b, 1e-4, 1e-4 + 2e-4 * big)
                    .unwrap_or_else(|e| panic!("{name} at {threads} threads: {e}"));
            }
        }
    }
    // One pool for the process, grown to the largest team, never one per program.
    assert!(global_pool(1).unwrap().threads() >= 7);
    let before = global_pool(1).unwrap().threads();
    let p = schedule(&example("mlp"), true);
    let _programs: Vec<CpuProgram> = (0..10)
        .map(|_| CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap())
        .collect();
    assert_eq!(global_pool(1).unwrap().threads(), before);
}

/// A bound output that its kernel does not write everywhere (a scatter-like pad) must
/// be cleared before each run, not keep the last run's values.
#[test]
fn bound_outputs_are_cleared_where_kernels_do_not_cover_them() {
    let _serial = SERIAL.lock().unwrap();
    let g = graph("graph padded(x: f32[3, 4]) -> f32[5, 6] {\n  y = pad(x, pads=[1, 1, 1, 1])\n  return y\n}\n");
    let p = schedule(&g, true);
    let c = CpuProgram::compile(&p, &CpuOptions::with_threads(2)).unwrap();
    let inputs = inputs_of(&g);
    let expected = c.run(&inputs).unwrap();
    let mut outputs = c.new_outputs();
    if let ferrite_ir::Data::F32(v) = &mut outputs[0].data {
        v.iter_mut().for_each(|x| *x = f32::NAN);
    }
    c.run_into(&inputs[..], &mut outputs).unwrap();
    assert_eq!(outputs, expected);
}

/// Flushing denormals is set for the run only, on the caller, and changes subnormal
/// results to zero; off (the default), subnormals are kept.
#[test]
fn flushing_denormals_is_scoped_to_the_run() {
    let _serial = SERIAL.lock().unwrap();
    let g =
        graph("graph tiny(x: f32[262144]) -> f32[262144] {\n  y = mul(x, 0.5)\n  return y\n}\n");
    let p = schedule(&g, true);
    let x = Tensor {
        ty: g.param_types()[0].clone(),
        data: ferrite_ir::Data::F32(vec![f32::MIN_POSITIVE; 262144]),
    };
    let half = f32::MIN_POSITIVE * 0.5;
    assert!(half > 0.0 && !half.is_normal());
    for threads in [1, 3] {
        let keep = CpuProgram::compile(&p, &CpuOptions::with_threads(threads)).unwrap();
        let out = keep.run(std::slice::from_ref(&x)).unwrap();
        assert_eq!(out[0].data, ferrite_ir::Data::F32(vec![half; 262144]));
        let opts = CpuOptions {
            flush_denormals: true,
            ..CpuOptions::with_threads(threads)
        };
        let flush = CpuProgram::compile(&p, &opts).unwrap();
        let out = flush.run(std::slice::from_ref(&x)).unwrap();
        if ferrite_cpu::denormals::SUPPORTED {
            assert_eq!(
                out[0].data,
                ferrite_ir::Data::F32(vec![0.0; 262144]),
                "{threads}"
            );
        }
        assert!(!FlushDenormals::active(), "the mode leaked out of the run");
        // The pool's workers are back to gradual underflow too.
        let out = keep.run(std::slice::from_ref(&x)).unwrap();
        assert_eq!(out[0].data, ferrite_ir::Data::F32(vec![half; 262144]));
    }
}

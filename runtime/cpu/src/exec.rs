//! Running a whole loop-IR [`Program`] on the CPU: compiled kernels, buffers, threads.
//!
//! [`CpuProgram::compile`] plans the program ([`crate::plan`]) and turns every planned
//! kernel into machine code ([`crate::emit`]); a GEMM kernel becomes a call of the extern
//! GEMM plus a JIT'd epilogue. It also plans storage with the loop IR's liveness and slot
//! assignment ([`ferrite_ir::loops::assign_slots`], the placement the memory plan
//! reports): intermediates (and GEMM temporaries) whose lifetimes, from the kernel that
//! writes them to the last kernel that reads them, do not overlap share a typed storage
//! slot, and buffers that their writer does not provably cover entirely are zeroed before
//! it runs (the reference starts every buffer at zero). Storage is kept between runs.
//!
//! [`CpuProgram::run`] checks the inputs, allocates outputs, and runs the steps in order;
//! [`CpuProgram::run_into`] writes into outputs the caller owns and keeps, so that a
//! warm run allocates nothing: inputs are read in place (any [`InputTensors`]: a slice
//! of tensors or of references to them), storage sets (intermediates, GEMM temporaries,
//! the kernels' argument arrays) are kept by the program and reused, and buffers that
//! must start at zero are cleared in parallel by the team that then uses them.
//! A kernel's outer domain is split across the thread pool by ranges when its outer
//! points write disjoint elements; chunks are sized so each has enough inner work to
//! amortize dispatch. A kernel whose run-time check fails (an out-of-range gather index)
//! makes `run` return an error naming the kernel and the check.
//!
//! Every program runs on the process's one thread pool ([`crate::pool::global_pool`]),
//! on a team of its first `threads` threads; a GEMM is cut into blocks on the same
//! team ([`crate::gemm::plan_split`]), never on threads of the library's own. With
//! [`CpuOptions::flush_denormals`] the caller and the team's workers flush denormals
//! for the run ([`crate::denormals`]).
//!
//! `CpuProgram` is `Send + Sync`: several threads may run it at once (each run takes its
//! own storage; the pool serves one run at a time and the others run on their own thread).

use super::denormals::FlushDenormals;
use super::emit::{self, KernelInfo};
use super::error::{Error, Result};
use super::gemm::{
    gemm_nd_then, gemm_taps, AfterBlock, BatchAxes, GemmScalar, MatLayout, MatMut, MatRef,
    Parallelism, Scale, Scan,
};
use super::jit::{verify_emitted, Jit, JitCode, JitOptions, Precompiled, Verified};
use super::plan::{plan_program, CodegenOptions, CpuPlan, ExternGemm, Run};
use super::pool::{default_thread_count, global_pool, ChunkSpan, ChunkTimes, Team, ThreadPool};
use super::stencil::{Coef, Pointers, Stencil};
use super::taps::{odometer, Taps};
use cranelift_codegen::ir::Function;
use ferrite_ir::loops::{
    assign_slots, Buffer, BufferId, BufferKind, Extents, Kernel, Liveness, Program, Rows, Slot,
    Slots, Stage, Var,
};
use ferrite_ir::parallel::{parallel_map, parallel_map_heavy};
use ferrite_ir::{DType, Data, Tensor};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Inner-loop iterations a parallel chunk should hold at least, so that handing it to a
/// worker costs little compared with running it. Iterations differ in cost by 10x and
/// more (a copy, a 3x3 depthwise tap sum): at 32K a depthwise conv of 384x14x14 was 3
/// chunks, 3 of 16 threads busy, on the 16-core Xeon; claiming a chunk is one atomic
/// add, so chunks can be small (there are at most 4 per thread anyway).
const MIN_CHUNK_WORK: usize = 4 * 1024;

/// Inner-loop iterations (all outer points together) below which a kernel runs on the
/// calling thread alone. Waking the team costs more than a small kernel: on the 16-core
/// Xeon the fused softmax + log_softmax of 7x1001 (about 35K iterations, 2 chunks) took
/// 10.8 us on one thread and 24-30 us on 4-16, where a sleeping worker's wake-up and the
/// hand-back alone take longer than the whole kernel (BENCHMARKS.md, "Small kernels on
/// one thread").
pub const MIN_PARALLEL_WORK: usize = 64 * 1024;

/// A parallel kernel with less work than [`MIN_PARALLEL_WORK`] iterations still goes to
/// the team once its first [`SERIAL_SAMPLES`] runs on the calling thread all took at
/// least this long: iterations say little about cost when each is dozens of operations
/// (a 3x3 depthwise conv of MobileNetV2's last stage, 960 x 7 x 7, is 47K iterations and
/// ~0.3 ms on one thread, where 35K of a softmax take 11 us). The decision is taken once
/// per compiled kernel; the bits never depend on it (every split gives the same values).
/// A program's run keeps the team's workers polling ([`ThreadPool::stay_awake`]), so
/// handing chunks out costs a few microseconds: at 100 us, ResNet-18's pads of its last
/// stages (512 x 9 x 9, 25-50 us) and its stride-2 slices (64 x 28 x 28, up to 125 us
/// when the first runs were quicker) ran on one thread of 16 on the Xeon, 0.4 ms of an
/// 8 ms run.
pub const MIN_PARALLEL_NS: u64 = 25_000;

/// Timed serial runs before a small kernel's decision (the least counts: the first run
/// also pays for cold caches and page faults).
pub const SERIAL_SAMPLES: u32 = 2;

/// The time a chunk of such a kernel should take, by its timed runs (a kernel of
/// [`MIN_PARALLEL_NS`] in five chunks).
const MIN_CHUNK_NS: u64 = 5_000;

/// How to compile and run a program on the CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads used to run kernels (the caller's included); at least 1.
    pub threads: usize,
    /// Code generation options (SIMD, unrolling).
    pub codegen: CodegenOptions,
    /// Run matmul reductions through the extern GEMM (else as generated loops).
    pub use_gemm: bool,
    /// Keep each kernel's CLIF and machine code for [`CpuProgram::dump`].
    pub capture_dumps: bool,
    /// Flush denormals to zero (FTZ + DAZ) while the program runs: on the calling thread
    /// and the pool's workers, restored after. Off by default (see [`crate::denormals`]).
    pub flush_denormals: bool,
}

/// The inputs of a run, read in place: one tensor per program input, in order.
/// Implemented for slices of tensors and of anything that borrows one (`&[Tensor]`,
/// `&[&Tensor]`), so callers that hold their inputs elsewhere pass references and
/// nothing is copied.
pub trait InputTensors {
    /// The number of inputs.
    fn count(&self) -> usize;
    /// Input `i` (`i < count()`).
    fn tensor(&self, i: usize) -> &Tensor;
}

impl<T: Borrow<Tensor>> InputTensors for [T] {
    fn count(&self) -> usize {
        self.len()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        self[i].borrow()
    }
}

impl<T: Borrow<Tensor>> InputTensors for Vec<T> {
    fn count(&self) -> usize {
        self.len()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        self[i].borrow()
    }
}

/// The outputs of a run into caller-owned tensors: one per program output, in order,
/// each of the output's type; the run overwrites their elements (never their types).
pub trait OutputTensors {
    /// The number of outputs.
    fn count(&self) -> usize;
    /// Output `i` (`i < count()`).
    fn tensor(&self, i: usize) -> &Tensor;
    /// Output `i`, to write (`i < count()`).
    fn tensor_mut(&mut self, i: usize) -> &mut Tensor;
}

impl OutputTensors for [Tensor] {
    fn count(&self) -> usize {
        self.len()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        &self[i]
    }
    fn tensor_mut(&mut self, i: usize) -> &mut Tensor {
        &mut self[i]
    }
}

impl OutputTensors for Vec<Tensor> {
    fn count(&self) -> usize {
        self.len()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        &self[i]
    }
    fn tensor_mut(&mut self, i: usize) -> &mut Tensor {
        &mut self[i]
    }
}

/// A sized handle on any [`OutputTensors`], so the run's internals take `&mut dyn`.
struct OutputsMut<'a, O: ?Sized>(&'a mut O);

impl<O: OutputTensors + ?Sized> OutputTensors for OutputsMut<'_, O> {
    fn count(&self) -> usize {
        self.0.count()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        self.0.tensor(i)
    }
    fn tensor_mut(&mut self, i: usize) -> &mut Tensor {
        self.0.tensor_mut(i)
    }
}

/// A sized handle on any [`InputTensors`], so the run's internals take `&dyn`.
struct InputsRef<'a, I: ?Sized>(&'a I);

impl<I: InputTensors + ?Sized> InputTensors for InputsRef<'_, I> {
    fn count(&self) -> usize {
        self.0.count()
    }
    fn tensor(&self, i: usize) -> &Tensor {
        self.0.tensor(i)
    }
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            threads: default_thread_count(),
            codegen: CodegenOptions::default(),
            use_gemm: true,
            capture_dumps: false,
            flush_denormals: false,
        }
    }
}

impl CpuOptions {
    /// The default options with `threads` threads.
    pub fn with_threads(threads: usize) -> Self {
        CpuOptions {
            threads,
            ..CpuOptions::default()
        }
    }
}

/// How long one kernel took in a profiled run, and which threads ran it when.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTiming {
    /// The kernel's name.
    pub name: String,
    /// When the kernel started, relative to the start of the run.
    pub start: Duration,
    /// Wall-clock time of the kernel (all threads).
    pub duration: Duration,
    /// The pieces of work the kernel ran, in completion order, with starts relative to
    /// the start of the run: one span per chunk of a loop split across the pool (worker
    /// 0 is the thread that called `run_profiled`), and one worker-0 span for each part
    /// run on the calling thread alone (a serial loop, or an extern GEMM call, whose
    /// internal threads are not visible). Empty for a kernel over an empty domain.
    pub spans: Vec<ChunkSpan>,
    /// Bytes the kernel reads and writes (the static estimate of the loop IR).
    pub bytes: usize,
    /// True when the kernel ran through the extern GEMM.
    pub gemm: bool,
}

/// A compiled kernel function and what calling it needs.
#[derive(Debug)]
struct JitKernel {
    info: KernelInfo,
    /// Entry address inside `CpuProgram::code`.
    address: usize,
    /// A parallel kernel below [`MIN_PARALLEL_WORK`] runs on the calling thread until
    /// [`SERIAL_SAMPLES`] runs have timed it: the least of those times, in nanoseconds
    /// (see [`MIN_PARALLEL_NS`]), scaled to the compiled point count ...
    serial_ns: AtomicU64,
    /// ... and how many runs have timed it.
    serial_runs: AtomicU32,
}

/// One step of a run: a kernel, as generated code or as extern GEMM plus epilogue.
#[derive(Debug)]
enum Step {
    Jit(JitKernel),
    Gemm {
        call: GemmCall,
        epilogue: Option<JitKernel>,
    },
    /// The direct stencil loop, then its epilogue ([`crate::stencil`]).
    Stencil {
        stencil: Box<Stencil>,
        epilogue: Option<JitKernel>,
    },
    /// A kernel over an empty domain.
    Nothing,
}

/// What an extern step of the plan runs (see [`Step`]).
#[derive(Clone, Debug)]
enum Extern {
    Gemm(ExternGemm),
    Stencil(Stencil),
}

/// What a GEMM step's product runs with.
#[derive(Debug)]
struct GemmCall {
    plan: Box<ExternGemm>,
    /// The dense strides of the product's batch axes (it is stored row-major).
    product_batch_strides: Vec<i64>,
    /// The scans of the operands that are constants, taken once when the program is
    /// built rather than by every run ([`crate::gemm::MatRef::scan`]).
    scans: [Option<Scan>; 2],
    /// Set when the right operand is gathered from its source as the product runs
    /// ([`crate::taps`]); the kernel that stores it (the step before) then does not run.
    gather: Option<Box<Gather>>,
}

/// How a product gathers its right operand (see [`GemmCall::gather`]).
#[derive(Debug)]
struct Gather {
    taps: Taps,
    /// The left operand (a constant) in panel form, packed once
    /// ([`crate::sgemm::Panels`]).
    panels: Option<crate::sgemm::Panels>,
}

/// A function of `CpuProgram::compile` after its thread built it: compiled there, or
/// verified only (a module that captures dumps compiles at `define`; debug builds'
/// extra twins are only compared).
enum Ready {
    Compiled(Box<Precompiled>),
    Verified(Box<Verified>),
}

/// One function of `CpuProgram::compile` as its thread left it: its `Ready`, its
/// facts, and (debug builds, first twins) its body.
type Built = (Ready, KernelInfo, Option<Function>);

/// A program compiled for the CPU. See the module docs.
#[derive(Debug)]
pub struct CpuProgram {
    program: Program,
    /// How the program was planned: the loop IR that was compiled.
    plan: CpuPlan,
    /// The planned program's buffers: the program's, then GEMM temporaries and scratch.
    buffers: Vec<Buffer>,
    /// One step per kernel, in order.
    steps: Vec<Step>,
    /// Storage slot of each intermediate or temporary buffer.
    slot_of: Vec<Option<usize>>,
    /// Element type and length of each storage slot.
    slots: Vec<Slot>,
    /// Buffers to zero before each step (not provably covered by their writer).
    zero_before: Vec<Vec<BufferId>>,
    /// Storage sets kept for reuse by later runs.
    spare: Mutex<Vec<Storage>>,
    /// The process's pool; runs use its first `threads` threads.
    pool: &'static ThreadPool,
    threads: usize,
    flush_denormals: bool,
    /// The most slots any generated kernel takes (the length of `Storage::addrs`).
    max_slots: usize,
    code: JitCode,
    /// Set by [`CpuProgram::with_rows`]: the plan's row axes, and per step whether its
    /// GEMM's `m` and its generated function's points count rows.
    rows: Option<(Rows, Vec<StepRows>)>,
}

/// Which of a step's sizes count rows (see [`CpuProgram::with_rows`]).
#[derive(Clone, Copy, Debug, Default)]
struct StepRows {
    gemm: bool,
    jit: bool,
}

/// The row count of one run, for scaling a row program's sizes (`None`: static).
#[derive(Clone, Copy, Debug)]
struct At {
    rows: usize,
    max: usize,
}

impl At {
    /// `n`, an extent at `max` rows that counts rows when `scales`, at this run's rows.
    fn scale(at: Option<At>, n: usize, scales: bool) -> usize {
        match at {
            Some(a) if scales => n / a.max * a.rows,
            _ => n,
        }
    }
}

/// What one run works in, kept between runs: the storage slots, and the array of
/// buffer addresses handed to each generated kernel.
#[derive(Debug)]
struct Storage {
    slots: Vec<Data>,
    addrs: Vec<usize>,
}

/// The most kernels one program may have. Cranelift compiles each kernel as a function
/// of its own, in about a millisecond, so an unfused program of 100k ops would take
/// minutes; this bounds a compile to seconds (a fused schedule holds up to 64 ops per
/// kernel, so fused graphs of a million ops stay under it).
pub const MAX_GENERATED_KERNELS: usize = 16_384;

/// A generated function: its name in the JIT module and what calling it needs.
type Compiled = (String, KernelInfo);

/// The signature of every generated kernel (see `emit`).
type KernelFn = extern "C" fn(*const usize, i64, i64) -> i32;

impl CpuProgram {
    /// Compiles `program` (which must verify) for this machine.
    pub fn compile(program: &Program, opts: &CpuOptions) -> Result<CpuProgram> {
        if program.kernels.len() > MAX_GENERATED_KERNELS {
            return Err(Error::TooManyKernels {
                program: program.name.clone(),
                kernels: program.kernels.len(),
                limit: MAX_GENERATED_KERNELS,
            });
        }
        let plan = plan_program(program, &opts.codegen, opts.use_gemm)?;
        if opts.threads == 0 {
            return Err(Error::Options {
                message: "the CPU backend needs at least one thread".into(),
            });
        }
        let pool = global_pool(opts.threads)?;
        let mut jit = Jit::with_options(JitOptions {
            capture_dumps: opts.capture_dumps,
            compile_threads: opts.threads,
            ..JitOptions::default()
        })?;
        let buffers = plan.program.buffers.clone();
        // Per kernel of the program: its extern GEMM, and the name and facts of its
        // generated function (a GEMM kernel's epilogue, or the kernel itself).
        let mut planned: Vec<(Option<Extern>, Option<Compiled>)> =
            vec![(None, None); program.kernels.len()];
        // The kernels whose stores the next product gathers as it runs get no code,
        // unless a row program may be made of this one (it stores its operands again,
        // see `with_rows`): ResNet-18's im2col kernels were two thirds of its functions.
        let gathers = find_gathers(program, &plan, &buffers);
        let skipped: Vec<usize> = if opts.codegen.row_bound.is_none() {
            gathers.iter().map(|&(si, _)| si - 1).collect()
        } else {
            Vec::new()
        };
        let mut generated = Vec::new();
        for (k, kp) in plan.program.kernels.iter().zip(&plan.kernels) {
            match &kp.run {
                Run::ExternGemm(g) => planned[kp.source].0 = Some(Extern::Gemm(g.clone())),
                Run::ExternStencil(st) => planned[kp.source].0 = Some(Extern::Stencil(st.clone())),
                Run::Generated(_) if skipped.contains(&kp.source) => {}
                Run::Generated(schedule) => generated.push((kp.source, k, schedule)),
                Run::Nothing | Run::Absorbed => {}
            }
        }
        // Twins (kernels equal up to their buffers' numbers: a layer's and the next
        // layer's) are built once; each other twin is the first's function with its own
        // slots. Debug builds build every kernel and check each twin against its first.
        let keys = parallel_map(generated.len(), opts.threads, |i| {
            let (_, k, schedule) = generated[i];
            emit::twin_key(&buffers, k, schedule)
        });
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        let first: Vec<usize> = keys
            .iter()
            .enumerate()
            .map(|(i, (key, _))| *first_with.entry(key.as_str()).or_insert(i))
            .collect();
        let built_here: Vec<usize> = (0..generated.len())
            .filter(|&i| first[i] == i || cfg!(debug_assertions))
            .collect();
        let fname =
            |source: usize| format!("k{source}_{}", sanitize(&program.kernels[source].name));
        // The functions are built, verified and compiled on the compile's threads, each
        // where it was built as soon as it is (Cranelift's compile is most of the work,
        // and a function waiting for the others to be emitted first left cores idle), then
        // defined in order. A module that captures dumps compiles at `define` instead.
        let isa = jit.shared_isa();
        let precompiler = jit.precompiler();
        let emitted_here = parallel_map_heavy(built_here.len(), opts.threads, |j| {
            let i = built_here[j];
            let (source, k, schedule) = generated[i];
            let fname = fname(source);
            let (func, info) = emit::function(&*isa, &fname, &buffers, k, schedule)?;
            let func = verify_emitted(&*isa, &fname, func)?;
            // Debug builds: the first twins' functions, to check the others against.
            let body = (cfg!(debug_assertions) && first[i] == i).then(|| func.function().clone());
            let ready = match &precompiler {
                Some(p) if first[i] == i => Ready::Compiled(Box::new(p.compile(&fname, func)?)),
                _ => Ready::Verified(Box::new(func)),
            };
            Ok((ready, info, body))
        });
        let mut emitted: Vec<Option<Result<Built>>> = (0..generated.len()).map(|_| None).collect();
        for (i, e) in built_here.into_iter().zip(emitted_here) {
            emitted[i] = Some(e);
        }
        let mut bodies: Vec<Option<Function>> = vec![None; generated.len()];
        for (i, &(source, k, schedule)) in generated.iter().enumerate() {
            let context = |e: Error| e.context(format!("kernel {}", program.kernels[source].name));
            let name = fname(source);
            let f = first[i];
            let built = emitted[i].take();
            let info = if f == i {
                let (ready, info, body) =
                    built.expect("every first twin is built").map_err(context)?;
                bodies[i] = body;
                match ready {
                    Ready::Compiled(p) => jit.define_precompiled(*p),
                    Ready::Verified(func) => jit.define_verified(&name, *func),
                }
                .map_err(|e| context(e.into()))?;
                info
            } else {
                let (_, of) = planned[generated[f].0]
                    .1
                    .as_ref()
                    .expect("a first twin is defined before the others");
                let info = of.for_twin(&name, k, schedule, &keys[f].1, &keys[i].1);
                if let Some(built) = built {
                    let (ready, fresh, _) = built.map_err(context)?;
                    let Ready::Verified(func) = ready else {
                        unreachable!("only first twins are compiled where they are built")
                    };
                    let same =
                        bodies[f].as_ref().map(|b| &b.stencil) == Some(&func.function().stencil);
                    assert!(
                        same && fresh == info,
                        "twin kernels build different functions: {} and {}",
                        program.kernels[generated[f].0].name,
                        program.kernels[source].name
                    );
                }
                jit.define_same_as(&name, &of.function)
                    .map_err(|e| context(e.into()))?;
                info
            };
            planned[source].1 = Some((name, info));
        }
        // The constant GEMM operands are scanned for subnormals once, here (tens of MB in
        // a conv net), on the compile's threads.
        let mut constant_operands: Vec<usize> = planned
            .iter()
            .filter_map(|(g, _)| match g {
                Some(Extern::Gemm(g)) => Some(g),
                _ => None,
            })
            .flat_map(|g| [g.lhs.buffer, g.rhs.buffer])
            .filter_map(|b| match buffers[b.index()].kind {
                BufferKind::Constant(c) => Some(c),
                _ => None,
            })
            .collect();
        constant_operands.sort_unstable();
        constant_operands.dedup();
        let scanned = parallel_map(constant_operands.len(), opts.threads, |i| {
            program
                .constants
                .get(constant_operands[i])
                .and_then(|c| scan_of(&c.tensor().data))
        });
        let scans: HashMap<usize, Scan> = constant_operands
            .into_iter()
            .zip(scanned)
            .filter_map(|(c, scan)| Some((c, scan?)))
            .collect();
        let code = jit.finalize()?;
        let mut steps = Vec::with_capacity(planned.len());
        for (gemm_plan, info) in planned {
            let jit_kernel = match info {
                Some((fname, info)) => {
                    let f = code.function(&fname)?;
                    let ptr = super::jit::HOST_POINTER;
                    let i64t = cranelift_codegen::ir::types::I64;
                    let i32t = cranelift_codegen::ir::types::I32;
                    if !f.has_signature(&[ptr, i64t, i64t], &[i32t]) {
                        return Err(Error::internal(format!("{fname} has the wrong signature")));
                    }
                    Some(JitKernel {
                        info,
                        address: f.as_ptr() as usize,
                        serial_ns: AtomicU64::new(u64::MAX),
                        serial_runs: AtomicU32::new(0),
                    })
                }
                None => None,
            };
            steps.push(match gemm_plan {
                Some(Extern::Stencil(st)) => Step::Stencil {
                    stencil: Box::new(st),
                    epilogue: jit_kernel,
                },
                Some(Extern::Gemm(plan)) => {
                    let dims: Vec<usize> =
                        plan.batch.iter().copied().chain([plan.m, plan.n]).collect();
                    let mut strides: Vec<i64> = ferrite_ir::types::contiguous_strides(&dims)
                        .into_iter()
                        .map(|s| s as i64)
                        .collect();
                    strides.truncate(plan.batch.len());
                    let scan = |b: BufferId| match buffers[b.index()].kind {
                        BufferKind::Constant(c) => scans.get(&c).copied(),
                        _ => None,
                    };
                    Step::Gemm {
                        call: GemmCall {
                            scans: [scan(plan.lhs.buffer), scan(plan.rhs.buffer)],
                            plan: Box::new(plan),
                            product_batch_strides: strides,
                            gather: None,
                        },
                        epilogue: jit_kernel,
                    }
                }
                None => match jit_kernel {
                    Some(j) => Step::Jit(j),
                    None => Step::Nothing,
                },
            });
        }
        for (si, gather) in gathers {
            if let Some(Step::Gemm { call, .. }) = steps.get_mut(si) {
                call.gather = Some(Box::new(gather));
            }
        }
        let Slots { slot_of, slots } = plan_storage(program, &steps, &buffers);
        let zero_before = zero_lists(program, &steps, &buffers, &slot_of, true);
        let max_slots = steps
            .iter()
            .flat_map(|s| match s {
                Step::Jit(j) => Some(j.info.slots.len()),
                Step::Gemm { epilogue, .. } | Step::Stencil { epilogue, .. } => {
                    epilogue.as_ref().map(|j| j.info.slots.len())
                }
                Step::Nothing => None,
            })
            .max()
            .unwrap_or(0);
        Ok(CpuProgram {
            program: program.clone(),
            plan,
            buffers,
            steps,
            slot_of,
            slots,
            zero_before,
            spare: Mutex::new(Vec::new()),
            pool,
            threads: opts.threads,
            flush_denormals: opts.flush_denormals,
            max_slots,
            code,
            rows: None,
        })
    }

    /// This program as a row program: one that runs at any row count from 1 to `max`
    /// ([`CpuProgram::run_rows_into`]), given which axis of each input and output
    /// holds the rows (`None`: it has none). The planned loop IR's row axes are derived
    /// and proved by [`Rows::derive`]; where they cannot be, the reason comes back
    /// (the program then runs only at `max`, as compiled, and is unchanged).
    pub fn with_rows(
        &mut self,
        name: &str,
        max: usize,
        inputs: &[Option<usize>],
        outputs: &[Option<usize>],
    ) -> std::result::Result<(), String> {
        let rows = Rows::derive(&self.plan.program, name, max, inputs, outputs)?;
        let mut steps = vec![StepRows::default(); self.steps.len()];
        for (pk, kp) in self.plan.kernels.iter().enumerate() {
            let scales = rows.kernels[pk].is_some();
            match &kp.run {
                Run::ExternGemm(g) => {
                    // Its rows must be the product's `m` (as `Rows::check` asks of the
                    // kernel's `GemmInfo`, which the plan's GEMM describes).
                    let rows_in_m = g.m.is_multiple_of(max)
                        && g.batch.iter().all(|&b| b == 1)
                        && rows.buffer(g.rhs.buffer).is_none();
                    if scales && !rows_in_m {
                        return Err(format!("GEMM {} has rows outside its m", g.product));
                    }
                    steps[kp.source].gemm = scales;
                }
                Run::ExternStencil(st) => {
                    return Err(format!(
                        "the direct stencil into {} runs at its compiled rows only",
                        st.out
                    ))
                }
                Run::Generated(_) => steps[kp.source].jit = scales,
                Run::Nothing | Run::Absorbed => {}
            }
        }
        for (step, sr) in self.steps.iter().zip(&steps) {
            if let Step::Gemm {
                epilogue: Some(_),
                call,
            } = step
            {
                if sr.gemm != sr.jit {
                    return Err(format!(
                        "GEMM {} and its epilogue disagree on rows",
                        call.plan.product
                    ));
                }
            }
        }
        // Gathers were recognized at the compiled sizes: a row program stores its
        // operands (the storage plan kept their kernels' buffers and the sources live),
        // with the code that `compile` generates for them when `row_bound` is set.
        for si in 1..self.steps.len() {
            if self.gathered(si - 1) && matches!(self.steps[si - 1], Step::Nothing) {
                return Err(format!(
                    "kernel {} was compiled without code (its product gathers it; a row \
                     program needs `CodegenOptions::row_bound`)",
                    self.program.kernels[si - 1].name
                ));
            }
        }
        for step in &mut self.steps {
            if let Step::Gemm { call, .. } = step {
                call.gather = None;
            }
        }
        // A buffer that several stores cover at the compiled count may not be covered
        // by them at fewer rows: only single covering stores are trusted here.
        self.zero_before = zero_lists(
            &self.program,
            &self.steps,
            &self.buffers,
            &self.slot_of,
            false,
        );
        self.rows = Some((rows, steps));
        Ok(())
    }

    /// The row axes of a row program ([`CpuProgram::with_rows`]).
    pub fn rows(&self) -> Option<&Rows> {
        self.rows.as_ref().map(|(r, _)| r)
    }

    /// Runs a row program at `rows` rows (1 to its `max`): each input and output holds
    /// its buffer's elements at that count, in the buffer's dtype (its shape is the
    /// caller's: `[B, T, 256]` for a buffer of `[1, B*T, 256]`).
    pub fn run_rows_into<I: InputTensors + ?Sized, O: OutputTensors + ?Sized>(
        &self,
        rows: usize,
        inputs: &I,
        outputs: &mut O,
    ) -> Result<()> {
        let Some((r, _)) = &self.rows else {
            return Err(Error::Options {
                message: format!("program `{}` has no row axes", self.program.name),
            });
        };
        if rows == 0 || rows > r.max {
            return Err(Error::Options {
                message: format!(
                    "program `{}` runs 1 to {} rows ({}), not {rows}",
                    self.program.name, r.max, r.name
                ),
            });
        }
        let at = At { rows, max: r.max };
        let outputs = &mut OutputsMut(outputs);
        self.check_outputs_at(outputs, Some(at))?;
        self.execute_at(&InputsRef(inputs), outputs, false, false, None, Some(at))
    }

    /// Bytes of storage one run allocates for intermediates and GEMM temporaries (the
    /// memory plan's `peak_bytes` of the program, plus any temporary that found no free
    /// slot).
    pub fn storage_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.bytes()).sum()
    }

    /// The program this was compiled from.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// How the program was planned: the loop IR that was compiled, with its schedule
    /// (`ferrite compile --dump` writes it as `05-cpu-plan.loop`).
    pub fn plan(&self) -> &CpuPlan {
        &self.plan
    }

    /// The number of threads kernels run on (a team of the process's pool).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether runs flush denormals ([`CpuOptions::flush_denormals`]).
    pub fn flushes_denormals(&self) -> bool {
        self.flush_denormals
    }

    /// Runs the program: one tensor per graph parameter in, one per output out.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outputs = self.new_outputs();
        self.execute(&InputsRef(inputs), &mut outputs, true, None)?;
        Ok(outputs)
    }

    /// [`CpuProgram::run`] on any [`InputTensors`] (references to tensors held
    /// elsewhere, say), read in place.
    pub fn run_borrowed<I: InputTensors + ?Sized>(&self, inputs: &I) -> Result<Vec<Tensor>> {
        let mut outputs = self.new_outputs();
        self.execute(&InputsRef(inputs), &mut outputs, true, None)?;
        Ok(outputs)
    }

    /// Runs the program on inputs read in place, writing its outputs into `outputs`
    /// (one per program output, of its type; see [`CpuProgram::new_outputs`]), which
    /// the caller keeps for the next run: a warm run allocates nothing.
    pub fn run_into<I: InputTensors + ?Sized, O: OutputTensors + ?Sized>(
        &self,
        inputs: &I,
        outputs: &mut O,
    ) -> Result<()> {
        let outputs = &mut OutputsMut(outputs);
        self.check_outputs(outputs)?;
        self.execute(&InputsRef(inputs), outputs, false, None)
    }

    /// [`CpuProgram::run_into`] for a program with donated buffers
    /// ([`Program::donated`]), the caller having put each donation's input value in its
    /// output tensor already (by swapping the tensors, say): the donated inputs are not
    /// read, and the outputs are updated in place, only where they change. Every other
    /// way of running a program copies each donated input into its output first.
    pub fn run_into_donated<I: InputTensors + ?Sized, O: OutputTensors + ?Sized>(
        &self,
        inputs: &I,
        outputs: &mut O,
    ) -> Result<()> {
        let outputs = &mut OutputsMut(outputs);
        self.check_outputs(outputs)?;
        self.execute_at(&InputsRef(inputs), outputs, false, true, None, None)
    }

    /// Zero tensors of the program's output types, for [`CpuProgram::run_into`].
    pub fn new_outputs(&self) -> Vec<Tensor> {
        self.program
            .outputs
            .iter()
            .map(|&b| Tensor::zeros(&self.buffers[b.index()].ty))
            .collect()
    }

    /// Runs the program and reports each kernel's wall-clock time, start, and the
    /// per-thread spans of its parallel chunks (see [`KernelTiming`]).
    pub fn run_profiled(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Vec<KernelTiming>)> {
        let mut outputs = self.new_outputs();
        let mut timings = Vec::with_capacity(self.steps.len());
        self.execute(&InputsRef(inputs), &mut outputs, true, Some(&mut timings))?;
        Ok((outputs, timings))
    }

    /// [`CpuProgram::run_profiled`] into caller-owned outputs, as [`CpuProgram::run_into`].
    pub fn run_profiled_into<I: InputTensors + ?Sized, O: OutputTensors + ?Sized>(
        &self,
        inputs: &I,
        outputs: &mut O,
    ) -> Result<Vec<KernelTiming>> {
        let outputs = &mut OutputsMut(outputs);
        self.check_outputs(outputs)?;
        let mut timings = Vec::with_capacity(self.steps.len());
        self.execute(&InputsRef(inputs), outputs, false, Some(&mut timings))?;
        Ok(timings)
    }

    /// The first of `tensor(0..)` whose type or data does not match buffer `ids[i]`, as
    /// (index, buffer name, its type, the buffer's type). At a row program's row count
    /// (`at`), a tensor matches a row buffer by dtype and element count (its shape is the
    /// caller's).
    fn first_mismatch_at<'t>(
        &self,
        ids: &[BufferId],
        at: Option<At>,
        tensor: impl Fn(usize) -> &'t Tensor,
    ) -> Option<(usize, String, String, String)> {
        if let (Some((r, _)), Some(a)) = (&self.rows, at) {
            return ids.iter().enumerate().find_map(|(i, &b)| {
                let (t, buf) = (tensor(i), &self.buffers[b.index()]);
                let numel = r.numel(buf, a.rows);
                let fits = t.ty.dtype == buf.ty.dtype
                    && t.ty.numel() == numel
                    && t.data.len() == numel
                    && (r.buffer(b).is_some() || t.ty == buf.ty);
                let expected = format!(
                    "{} of {numel} elements ({} = {})",
                    buf.ty.dtype, r.name, a.rows
                );
                (!fits).then(|| (i, buf.name.clone(), t.ty.to_string(), expected))
            });
        }
        ids.iter().enumerate().find_map(|(i, &b)| {
            let (t, buf) = (tensor(i), &self.buffers[b.index()]);
            let fits =
                t.ty == buf.ty && t.data.len() == buf.ty.numel() && t.data.dtype() == buf.ty.dtype;
            (!fits).then(|| (i, buf.name.clone(), t.ty.to_string(), buf.ty.to_string()))
        })
    }

    /// Checks caller-owned outputs against the program's output types.
    fn check_outputs(&self, outputs: &dyn OutputTensors) -> Result<()> {
        self.check_outputs_at(outputs, None)
    }

    /// [`CpuProgram::check_outputs`] at a row program's row count (`None`: as compiled).
    fn check_outputs_at(&self, outputs: &dyn OutputTensors, at: Option<At>) -> Result<()> {
        let p = &self.program;
        if outputs.count() != p.outputs.len() {
            return Err(Error::OutputCount {
                program: p.name.clone(),
                expected: p.outputs.len(),
                got: outputs.count(),
            });
        }
        if let Some((index, name, got, expected)) =
            self.first_mismatch_at(&p.outputs, at, |i| outputs.tensor(i))
        {
            return Err(Error::OutputType {
                index,
                name,
                got,
                expected,
            });
        }
        Ok(())
    }

    /// Whether step `si` is skipped: it stores the right operand of the next step's
    /// product, which gathers it from the kernel's source instead ([`GemmCall::gather`]).
    fn gathered(&self, si: usize) -> bool {
        matches!(self.steps.get(si + 1), Some(Step::Gemm { call, .. }) if call.gather.is_some())
    }

    /// How each kernel was compiled: GEMM or loops, and per stage vector or scalar (why).
    pub fn report(&self) -> String {
        let mut s = String::new();
        for (si, (k, step)) in self.program.kernels.iter().zip(&self.steps).enumerate() {
            let _ = writeln!(s, "{}:", k.name);
            if self.gathered(si) {
                let _ = writeln!(
                    s,
                    "  not run: the next kernel's product gathers its taps from the source{}",
                    if matches!(step, Step::Nothing) {
                        " (no code generated)"
                    } else {
                        ""
                    }
                );
                continue;
            }
            for &b in &self.zero_before[si] {
                let ty = &self.buffers[b.index()].ty;
                let _ = writeln!(
                    s,
                    "  zeroes {b} ({} bytes) before it runs: its stores are not proved to cover it",
                    ty.numel() * ty.dtype.size_bytes()
                );
            }
            let jit = match step {
                Step::Jit(j) => Some(j),
                Step::Gemm { call, epilogue } => {
                    let _ = writeln!(s, "  {}", call.plan.describe());
                    if let Some(g) = &call.gather {
                        let _ = writeln!(
                            s,
                            "  right operand gathered from {} ({} taps) into each block as it runs: no im2col stored",
                            g.taps.source,
                            g.taps.taps()
                        );
                        if let Some((shared, _)) = g.taps.shared_width(0) {
                            let _ = writeln!(
                                s,
                                "  its {} rows are {shared} packed rows shifted by whole output rows",
                                g.taps.k
                            );
                        }
                    }
                    epilogue.as_ref()
                }
                Step::Stencil { stencil, epilogue } => {
                    let _ = writeln!(
                        s,
                        "  {}, {}{}",
                        stencil.describe(),
                        if crate::stencil::vector_loop() {
                            "AVX-512"
                        } else {
                            "scalar (no AVX-512 here)"
                        },
                        if stencil.epilogue_per_rows && epilogue.is_some() {
                            ", epilogue per block of rows"
                        } else {
                            ""
                        }
                    );
                    epilogue.as_ref()
                }
                Step::Nothing => {
                    let through = matches!(
                        self.steps.get(si + 1),
                        Some(Step::Stencil { stencil, .. }) if stencil.through.is_some()
                    );
                    let _ = writeln!(
                        s,
                        "  {}",
                        if through {
                            "not run: the next kernel's stencil reads through this pad"
                        } else {
                            "empty domain: nothing to run"
                        }
                    );
                    None
                }
            };
            if let Some(j) = jit {
                for note in &j.info.notes {
                    let _ = writeln!(s, "  {note}");
                }
                for st in &j.info.stages {
                    let _ = writeln!(s, "  {st}");
                }
                if !j.info.parallel {
                    let _ = writeln!(
                        s,
                        "  runs on one thread (outer points may write the same elements)"
                    );
                }
            }
        }
        s
    }

    /// Per-kernel text: the loop IR, how it was compiled, and (when compiled with
    /// `capture_dumps`) the CLIF, the optimized CLIF and the machine code.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for (k, step) in self.program.kernels.iter().zip(&self.steps) {
            let _ = writeln!(s, "==== {}", k.name);
            let _ = writeln!(s, "{}", self.program.display_kernel(k));
            let jit = match step {
                Step::Jit(j) => Some(j),
                Step::Gemm { call, epilogue } => {
                    if let Some(g) = &k.gemm {
                        let _ = writeln!(s, "-- {}", super::plan::describe_gemm(g));
                    }
                    let _ = writeln!(s, "-- product into {}", call.plan.product);
                    epilogue.as_ref()
                }
                Step::Stencil { stencil, epilogue } => {
                    let _ = writeln!(s, "-- {}", stencil.describe());
                    epilogue.as_ref()
                }
                Step::Nothing => None,
            };
            let Some(j) = jit else { continue };
            for st in &j.info.stages {
                let _ = writeln!(s, "-- {st}");
            }
            if let Some(d) = self.code.dump(&j.info.function) {
                let _ = writeln!(s, "-- clif\n{}", d.clif);
                let _ = writeln!(s, "-- optimized clif\n{}", d.optimized_clif);
                let _ = writeln!(s, "-- machine code\n{}", d.vcode);
            }
        }
        s
    }

    /// The machine-code listing of kernel number `kernel` (with `capture_dumps`).
    pub fn disassembly(&self, kernel: usize) -> Option<&str> {
        let j = match self.steps.get(kernel)? {
            Step::Jit(j) => j,
            Step::Gemm { epilogue, .. } | Step::Stencil { epilogue, .. } => epilogue.as_ref()?,
            Step::Nothing => return None,
        };
        self.code.dump(&j.info.function).map(|d| d.vcode.as_str())
    }

    /// How many of the program's generated functions Cranelift compiled, and how many
    /// reused an identical function (of this program or of another live one).
    pub fn jit_stats(&self) -> super::jit::JitStats {
        self.code.stats()
    }

    /// The compile reports of kernel number `kernel`'s generated function, if it has one.
    pub fn kernel_info(&self, kernel: usize) -> Option<&KernelInfo> {
        match self.steps.get(kernel)? {
            Step::Jit(j) => Some(&j.info),
            Step::Gemm { epilogue, .. } | Step::Stencil { epilogue, .. } => {
                epilogue.as_ref().map(|j| &j.info)
            }
            Step::Nothing => None,
        }
    }

    /// Whether kernel number `kernel` runs through the extern GEMM.
    pub fn uses_gemm(&self, kernel: usize) -> bool {
        matches!(self.steps.get(kernel), Some(Step::Gemm { .. }))
    }

    /// Runs every step into `outputs`; `fresh` says they were just allocated as zeros
    /// (so the outputs that need zeroing are zero already).
    fn execute(
        &self,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        fresh: bool,
        timings: Option<&mut Vec<KernelTiming>>,
    ) -> Result<()> {
        self.execute_at(inputs, outputs, fresh, false, timings, None)
    }

    /// [`CpuProgram::execute`] at a row program's row count (`None`: as compiled);
    /// `donated` says the donated outputs hold their inputs' values already (otherwise
    /// they are copied in first).
    fn execute_at(
        &self,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        fresh: bool,
        donated: bool,
        mut timings: Option<&mut Vec<KernelTiming>>,
        at: Option<At>,
    ) -> Result<()> {
        let p = &self.program;
        if inputs.count() != p.inputs.len() {
            return Err(Error::InputCount {
                program: p.name.clone(),
                expected: p.inputs.len(),
                got: inputs.count(),
            });
        }
        if let Some((index, name, got, expected)) =
            self.first_mismatch_at(&p.inputs, at, |i| inputs.tensor(i))
        {
            return Err(Error::InputType {
                index,
                name,
                got,
                expected,
            });
        }
        if !donated {
            for d in &p.donated {
                outputs.tensor_mut(d.output).data = inputs.tensor(d.input).data.clone();
            }
        }
        let _mode = FlushDenormals::enter(self.flush_denormals);
        let team = self.pool.team(self.threads, self.flush_denormals);
        // Workers keep polling between this run's kernels, through serial ones too.
        let _awake = (self.threads > 1).then(|| self.pool.stay_awake());
        let mut storage = self.take_storage();
        // Profiled runs measure every kernel and chunk from here; unprofiled runs read
        // no clock at all.
        let origin = timings.as_ref().map(|_| Instant::now());
        let result = (|| {
            for (si, (step, kernel)) in self.steps.iter().zip(&p.kernels).enumerate() {
                let sr = match &self.rows {
                    Some((_, steps)) if at.is_some() => steps[si],
                    _ => StepRows::default(),
                };
                if self.gathered(si) {
                    // The next product gathers what this kernel would store.
                    if let (Some(origin), Some(t)) = (origin, timings.as_deref_mut()) {
                        t.push(KernelTiming {
                            name: kernel.name.clone(),
                            start: Instant::now().saturating_duration_since(origin),
                            duration: Duration::ZERO,
                            spans: Vec::new(),
                            bytes: 0,
                            gemm: false,
                        });
                    }
                    continue;
                }
                for &b in &self.zero_before[si] {
                    let buf = &self.buffers[b.index()];
                    let numel = match (&self.rows, at) {
                        (Some((r, _)), Some(a)) => r.numel(buf, a.rows),
                        _ => buf.ty.numel(),
                    };
                    let bytes = numel * buf.ty.dtype.size_bytes();
                    match (buf.kind, self.slot_of[b.index()]) {
                        (_, Some(slot)) => zero(team, &mut storage.slots[slot], bytes)?,
                        (BufferKind::Output(o), None) if !fresh => {
                            zero(team, &mut outputs.tensor_mut(o).data, bytes)?
                        }
                        _ => {}
                    }
                }
                let Some(origin) = origin else {
                    self.run_step(step, team, inputs, outputs, &mut storage, None, at, sr)
                        .map_err(|e| e.context(format!("kernel {}", kernel.name)))?;
                    continue;
                };
                let times = ChunkTimes::new(origin);
                let start = Instant::now();
                self.run_step(
                    step,
                    team,
                    inputs,
                    outputs,
                    &mut storage,
                    Some(&times),
                    at,
                    sr,
                )
                .map_err(|e| e.context(format!("kernel {}", kernel.name)))?;
                let duration = start.elapsed();
                if let Some(t) = timings.as_deref_mut() {
                    t.push(KernelTiming {
                        name: kernel.name.clone(),
                        start: start.saturating_duration_since(origin),
                        duration,
                        spans: times.take(),
                        bytes: kernel.bytes_moved(),
                        gemm: matches!(step, Step::Gemm { .. }),
                    });
                }
            }
            Ok(())
        })();
        self.return_storage(storage);
        result
    }

    fn take_storage(&self) -> Storage {
        let spare = self.spare.lock().ok().and_then(|mut s| s.pop());
        // A new set is left untouched (`calloc`'d pages are mapped when first written):
        // the kernels that write a buffer first touch it, on the threads that run them.
        spare.unwrap_or_else(|| Storage {
            slots: self.slots.iter().map(|s| zeros(s.dtype, s.len)).collect(),
            addrs: Vec::with_capacity(self.max_slots),
        })
    }

    fn return_storage(&self, storage: Storage) {
        if let Ok(mut s) = self.spare.lock() {
            // Keep a few sets for concurrent callers; more would only hold memory.
            if s.len() < 4 {
                s.push(storage);
            }
        }
    }

    /// The address of buffer `b`'s first element.
    fn address(
        &self,
        b: BufferId,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut [Data],
    ) -> Result<usize> {
        let buf = self
            .buffers
            .get(b.index())
            .ok_or_else(|| Error::internal(format!("{b} does not exist")))?;
        Ok(match buf.kind {
            BufferKind::Input(i) => data_addr(&inputs.tensor(i).data),
            // Owned by the program (shared with the graph); kernels only read it.
            BufferKind::Constant(c) => {
                let constant = self.program.constants.get(c).ok_or_else(|| {
                    Error::internal(format!("{b} holds constant {c}, which is missing"))
                })?;
                data_addr(&constant.tensor().data)
            }
            BufferKind::Output(o) => data_addr_mut(&mut outputs.tensor_mut(o).data),
            BufferKind::Intermediate => {
                let slot = self.slot_of[b.index()]
                    .ok_or_else(|| Error::internal(format!("{b} has no storage")))?;
                data_addr_mut(&mut storage[slot])
            }
            BufferKind::Scratch => {
                return Err(Error::internal(format!("scratch {b} has no storage")))
            }
        })
    }

    /// Runs one step; with `times`, records its chunks' spans there.
    #[allow(clippy::too_many_arguments)]
    fn run_step(
        &self,
        step: &Step,
        team: Team<'_>,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut Storage,
        times: Option<&ChunkTimes>,
        at: Option<At>,
        sr: StepRows,
    ) -> Result<()> {
        let points = |j: &JitKernel| At::scale(at, j.info.points, sr.jit);
        match step {
            Step::Jit(j) => self.run_jit(j, points(j), team, inputs, outputs, storage, times),
            Step::Nothing => Ok(()),
            Step::Stencil { stencil, epilogue } => self.run_stencil(
                stencil,
                epilogue.as_ref(),
                team,
                inputs,
                outputs,
                storage,
                times,
            ),
            Step::Gemm {
                call,
                epilogue: Some(j),
            } if call.plan.epilogue_per_rows => {
                // The blocks (each with its epilogue) run on the team, each a span.
                let m = At::scale(at, call.plan.m, sr.gemm);
                gemm_spans(times, || {
                    self.run_gemm_then(call, m, j, team.timed(times), inputs, outputs, storage)
                })
            }
            Step::Gemm { call, epilogue } => {
                // The GEMM's blocks run on the team, each a span.
                let m = At::scale(at, call.plan.m, sr.gemm);
                gemm_spans(times, || {
                    self.run_gemm(
                        call,
                        m,
                        team.timed(times),
                        inputs,
                        outputs,
                        &mut storage.slots,
                        None,
                    )
                })?;
                match epilogue {
                    Some(j) => self.run_jit(j, points(j), team, inputs, outputs, storage, times),
                    None => Ok(()),
                }
            }
        }
    }

    /// A GEMM whose epilogue runs on each block as the GEMM computes it
    /// (`ExternGemm::epilogue_per_rows`): row `i` of block `p, rows, cols` of the dense
    /// product is the epilogue's points `(p * m + i) * n + cols.start .. + cols.end`,
    /// which the plan proved touch only those elements of the product (updated in
    /// place) and read nothing else the GEMM writes.
    #[allow(clippy::too_many_arguments)]
    fn run_gemm_then(
        &self,
        call: &GemmCall,
        m: usize,
        j: &JitKernel,
        team: Team<'_>,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut Storage,
    ) -> Result<()> {
        let mut addrs = std::mem::take(&mut storage.addrs);
        // The product's address is its storage's heap allocation, which `run_gemm`
        // takes out of its place (moving the vector, not its elements) and puts back.
        let ran = self
            .slot_addresses(&j.info, inputs, outputs, &mut storage.slots, &mut addrs)
            .and_then(|()| {
                let entry = self.entry(j);
                let failure = AtomicI32::new(0);
                let n = call.plan.n;
                let args = &addrs;
                let points = |begin: usize, end: usize| {
                    note_failure(&failure, entry(args.as_ptr(), begin as i64, end as i64));
                };
                // Whole rows are one range of points; a block of columns, one per row.
                let after = |p: usize, rows: Range<usize>, cols: Range<usize>| {
                    if cols.len() == n {
                        points((p * m + rows.start) * n, (p * m + rows.end) * n);
                    } else {
                        for i in rows {
                            let row = (p * m + i) * n;
                            points(row + cols.start, row + cols.end);
                        }
                    }
                };
                self.run_gemm(
                    call,
                    m,
                    team,
                    inputs,
                    outputs,
                    &mut storage.slots,
                    Some(&after),
                )?;
                check_failure(&j.info, failure.into_inner())
            });
        storage.addrs = addrs;
        ran
    }

    /// A direct stencil ([`crate::stencil`]) on the team, its units (blocks of output
    /// vectors) split into ranges, then its epilogue: on each range right after the
    /// stencil computes it when the plan proved that safe (`Stencil::epilogue_per_rows`;
    /// units `a..b` are the epilogue's points `point(a)..point(b)`), else over the whole
    /// output after it.
    #[allow(clippy::too_many_arguments)]
    fn run_stencil(
        &self,
        st: &Stencil,
        epilogue: Option<&JitKernel>,
        team: Team<'_>,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut Storage,
        times: Option<&ChunkTimes>,
    ) -> Result<()> {
        let mut address = |b: BufferId| self.address(b, inputs, outputs, &mut storage.slots);
        let mut ptrs = Pointers {
            out: address(st.out)?,
            sources: Vec::with_capacity(st.taps.len()),
            coefs: Vec::with_capacity(st.taps.len()),
        };
        for tap in &st.taps {
            ptrs.sources.push(address(tap.source)?);
            ptrs.coefs.push(match tap.coef {
                Coef::Buffer(b) => address(b)?,
                Coef::Const(_) => 0,
            });
        }
        let per_rows = epilogue.filter(|_| st.epilogue_per_rows);
        let mut addrs = std::mem::take(&mut storage.addrs);
        if let Some(j) = per_rows {
            if let Err(e) =
                self.slot_addresses(&j.info, inputs, outputs, &mut storage.slots, &mut addrs)
            {
                storage.addrs = addrs;
                return Err(e);
            }
        }
        let avx512 = crate::stencil::vector_loop();
        let entry = per_rows.map(|j| self.entry(j));
        let failure = AtomicI32::new(0);
        let units = st.units();
        let args = &addrs;
        let task = |r: Range<usize>| {
            // SAFETY: the addresses are the buffers of this run, of the sizes the
            // program declares (inputs were checked, storage and outputs allocated from
            // the same types), for which the stencil proved its reads in bounds; the
            // output is no source (a kernel never reads what it writes) and each range
            // of rows is written by one task alone.
            unsafe { st.run_units(&ptrs, r.clone(), avx512) };
            if let Some(entry) = entry {
                let (a, b) = (st.point(r.start), st.point(r.end));
                note_failure(&failure, entry(args.as_ptr(), a as i64, b as i64));
            }
        };
        let per_unit = st.work_per_unit().max(1);
        let ran = if team.threads() > 1
            && units > 1
            && units.saturating_mul(per_unit) >= MIN_PARALLEL_WORK
        {
            let min_chunk = (STENCIL_CHUNK_WORK / per_unit).max(1);
            match times {
                None => team.parallel_for_range(units, min_chunk, task),
                Some(times) => team.parallel_for_range_timed(units, min_chunk, times, task),
            }
        } else {
            calling_thread_span(times, || task(0..units));
            Ok(())
        };
        storage.addrs = addrs;
        ran?;
        if let Some(j) = per_rows {
            check_failure(&j.info, failure.into_inner())?;
        }
        match epilogue {
            Some(j) if per_rows.is_none() => {
                self.run_jit(j, j.info.points, team, inputs, outputs, storage, times)
            }
            _ => Ok(()),
        }
    }

    /// Fills `addrs` with the base address of each of `info`'s slots.
    fn slot_addresses(
        &self,
        info: &KernelInfo,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut [Data],
        addrs: &mut Vec<usize>,
    ) -> Result<()> {
        addrs.clear();
        for &b in &info.slots {
            addrs.push(self.address(b, inputs, outputs, storage)?);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run_jit(
        &self,
        j: &JitKernel,
        points: usize,
        team: Team<'_>,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut Storage,
        times: Option<&ChunkTimes>,
    ) -> Result<()> {
        let info = &j.info;
        if points == 0 {
            return Ok(());
        }
        // The argument array is the storage set's own (reused, never reallocated: it
        // was made with room for the largest kernel).
        let mut addrs = std::mem::take(&mut storage.addrs);
        if let Err(e) = self.slot_addresses(info, inputs, outputs, &mut storage.slots, &mut addrs) {
            storage.addrs = addrs;
            return Err(e);
        }
        // Sizes are what the code was compiled for: inputs were checked, outputs and
        // storage are allocated from the same types. A row program runs the prefix of
        // points that its rows have (`points`), in buffers of at least those rows.
        let entry = self.entry(j);
        let failure = AtomicI32::new(0);
        let call = |begin: usize, end: usize| {
            note_failure(&failure, entry(addrs.as_ptr(), begin as i64, end as i64));
        };
        let work = points.saturating_mul(info.work_per_point.max(1));
        let can_split = info.parallel && team.threads() > 1 && points > 1;
        let by_work = can_split && work >= MIN_PARALLEL_WORK;
        // Small kernels: sampling while fewer than SERIAL_SAMPLES runs have timed them.
        let sampling =
            can_split && !by_work && j.serial_runs.load(Ordering::Relaxed) < SERIAL_SAMPLES;
        // Timed at the compiled point count; a row program's run of fewer points takes
        // proportionally less.
        let at_points = |ns: u64, from: usize, to: usize| {
            (ns as u128 * to as u128 / from.max(1) as u128).min(u64::MAX as u128) as u64
        };
        let serial_ns = match j.serial_ns.load(Ordering::Relaxed) {
            u64::MAX => u64::MAX,
            ns => at_points(ns, info.points, points),
        };
        let by_time = can_split && !by_work && !sampling && serial_ns >= MIN_PARALLEL_NS;
        let ran = if by_work || by_time {
            let min_chunk = if by_work {
                MIN_CHUNK_WORK / info.work_per_point.max(1)
            } else {
                // Points per chunk so that a chunk takes MIN_CHUNK_NS by the timed runs.
                let points = points as u128 * MIN_CHUNK_NS as u128;
                (points / serial_ns as u128) as usize
            }
            .max(1);
            let task = |r: std::ops::Range<usize>| call(r.start, r.end);
            match times {
                None => team.parallel_for_range(points, min_chunk, task),
                Some(times) => team.parallel_for_range_timed(points, min_chunk, times, task),
            }
        } else {
            let begin = sampling.then(Instant::now);
            calling_thread_span(times, || call(0, points));
            if let Some(begin) = begin {
                let ns = u64::try_from(begin.elapsed().as_nanos()).unwrap_or(u64::MAX);
                j.serial_ns
                    .fetch_min(at_points(ns, points, info.points), Ordering::Relaxed);
                j.serial_runs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        };
        storage.addrs = addrs;
        ran?;
        check_failure(info, failure.into_inner())
    }

    /// The callable entry of a compiled kernel.
    fn entry(&self, j: &JitKernel) -> KernelFn {
        // SAFETY: `j.address` is the entry of a function finalized in `self.code`, which
        // lives as long as `self` (and so outlives every call made through `&self`); its
        // signature was checked to be `(pointer, i64, i64) -> i32` in the host calling
        // convention, which is `KernelFn`. The generated code only touches the buffers
        // passed in its slot array, at indices proved in bounds for the buffer sizes the
        // program declares, and `run_jit` passes buffers of exactly those sizes.
        unsafe { std::mem::transmute::<*const u8, KernelFn>(j.address as *const u8) }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_gemm(
        &self,
        call: &GemmCall,
        m: usize,
        team: Team<'_>,
        inputs: &dyn InputTensors,
        outputs: &mut dyn OutputTensors,
        storage: &mut [Data],
        after: Option<AfterBlock<'_>>,
    ) -> Result<()> {
        let plan = &call.plan;
        // Take the product's storage out, so the operands can be borrowed alongside it.
        let pbuf = &self.buffers[plan.product.index()];
        let mut product = match pbuf.kind {
            BufferKind::Output(o) => {
                std::mem::replace(&mut outputs.tensor_mut(o).data, Data::F32(Vec::new()))
            }
            BufferKind::Intermediate => {
                let slot = self.slot_of[plan.product.index()]
                    .ok_or_else(|| Error::internal("the product has no storage"))?;
                std::mem::replace(&mut storage[slot], Data::F32(Vec::new()))
            }
            BufferKind::Input(_) | BufferKind::Constant(_) | BufferKind::Scratch => {
                return Err(Error::internal(format!(
                    "a GEMM cannot write {}",
                    plan.product
                )))
            }
        };
        let result = {
            let data = |b: BufferId| -> Result<&Data> {
                let buf = self
                    .buffers
                    .get(b.index())
                    .ok_or_else(|| Error::internal(format!("{b} does not exist")))?;
                Ok(match buf.kind {
                    BufferKind::Input(i) => &inputs.tensor(i).data,
                    BufferKind::Constant(c) => {
                        &self
                            .program
                            .constants
                            .get(c)
                            .ok_or_else(|| Error::internal(format!("{b} has no constant")))?
                            .tensor()
                            .data
                    }
                    BufferKind::Output(o) => &outputs.tensor(o).data,
                    BufferKind::Intermediate | BufferKind::Scratch => {
                        &storage[self.slot_of[b.index()]
                            .ok_or_else(|| Error::internal(format!("{b} has no storage")))?]
                    }
                })
            };
            if let Some(g) = &call.gather {
                let (a, x) = (data(plan.lhs.buffer)?, data(g.taps.source)?);
                gemm_gathered(call, g, m, team, a, x, &mut product, after)
            } else {
                match (data(plan.lhs.buffer)?, data(plan.rhs.buffer)?, &mut product) {
                    (Data::F32(a), Data::F32(b), Data::F32(c)) => {
                        gemm_batches(call, m, team, a, b, c, after)
                    }
                    (Data::F16(a), Data::F16(b), Data::F16(c)) => {
                        gemm_batches(call, m, team, a, b, c, after)
                    }
                    (Data::F64(a), Data::F64(b), Data::F64(c)) => {
                        gemm_batches(call, m, team, a, b, c, after)
                    }
                    _ => Err(Error::GemmDType { dtype: plan.dtype }),
                }
            }
        };
        match pbuf.kind {
            BufferKind::Output(o) => outputs.tensor_mut(o).data = product,
            _ => {
                if let Some(slot) = self.slot_of[plan.product.index()] {
                    storage[slot] = product;
                }
            }
        }
        result
    }
}

/// The [`Scan`] of a GEMM operand's elements, for the dtypes a GEMM takes.
fn scan_of(data: &Data) -> Option<Scan> {
    match data {
        Data::F32(v) => Some(GemmScalar::scan(v.as_slice())),
        Data::F16(v) => Some(GemmScalar::scan(v.as_slice())),
        Data::F64(v) => Some(GemmScalar::scan(v.as_slice())),
        _ => None,
    }
}

/// `f()`, a GEMM whose parallel blocks record their own spans in `times` (when
/// profiling); one that ran on the calling thread alone is recorded as one span of it.
fn gemm_spans<R>(times: Option<&ChunkTimes>, f: impl FnOnce() -> R) -> R {
    // Unprofiled runs read no clock.
    let before = times.map(|t| (t.count(), Instant::now()));
    let r = f();
    if let (Some(times), Some((count, start))) = (times, before) {
        if times.count() == count {
            times.record(0, 0, start);
        }
    }
    r
}

/// `f()`, recorded with `times` (when profiling) as one span of the calling thread.
fn calling_thread_span<R>(times: Option<&ChunkTimes>, f: impl FnOnce() -> R) -> R {
    let start = times.map(|_| Instant::now());
    let r = f();
    if let (Some(times), Some(start)) = (times, start) {
        times.record(0, 0, start);
    }
    r
}

/// Runs a planned product through [`gemm_nd`]: every batch axis strided on its own, the
/// whole cut into blocks across the team (one single-threaded library call per block),
/// or run on the calling thread when small ([`crate::gemm::plan_split`]).
fn gemm_batches<T: GemmScalar>(
    call: &GemmCall,
    m: usize,
    team: Team<'_>,
    a: &[T],
    b: &[T],
    c: &mut [T],
    after: Option<AfterBlock<'_>>,
) -> Result<()> {
    let GemmCall {
        plan,
        product_batch_strides: c_batch_strides,
        scans,
        gather: _,
    } = call;
    // A row program's product of fewer rows than compiled reads and writes only
    // their elements (so scanning an operand for flushing reads no unused rows).
    let (a, c) = match used_prefix(plan, m) {
        Some((a_len, c_len)) if a_len <= a.len() && c_len <= c.len() => {
            (&a[..a_len], &mut c[..c_len])
        }
        _ => (a, c),
    };
    let la = mat_layout(plan.lhs.offset, plan.lhs.row_stride, plan.lhs.col_stride)?;
    let lb = mat_layout(plan.rhs.offset, plan.rhs.row_stride, plan.rhs.col_stride)?;
    let lc = mat_layout(0, plan.n as i64, 1)?;
    let axes = BatchAxes {
        extents: &plan.batch,
        a: &plan.lhs.batch_strides,
        b: &plan.rhs.batch_strides,
        c: c_batch_strides,
    };
    gemm_nd_then(
        axes,
        (m, plan.n, plan.k),
        MatRef::new(a, la).with_scan(scans[0]),
        MatRef::new(b, lb).with_scan(scans[1]),
        MatMut::new(c, lc),
        Scale::overwrite(),
        Parallelism::Team(team),
        after,
    )?;
    Ok(())
}

/// The layout of a planned product's operand from its offset and strides (one matrix, no
/// batch stride: batch axes are strided on their own).
fn mat_layout(offset: i64, row: i64, col: i64) -> Result<MatLayout> {
    Ok(MatLayout {
        offset: usize::try_from(offset).map_err(|_| Error::internal("negative GEMM offset"))?,
        batch_stride: 0,
        row_stride: row as isize,
        col_stride: col as isize,
    })
}

/// Runs a product whose right operand `g` gathers from `x` ([`gemm_taps`]).
#[allow(clippy::too_many_arguments)]
fn gemm_gathered(
    call: &GemmCall,
    g: &Gather,
    m: usize,
    team: Team<'_>,
    a: &Data,
    x: &Data,
    c: &mut Data,
    after: Option<AfterBlock<'_>>,
) -> Result<()> {
    let plan = &call.plan;
    let (Data::F32(a), Data::F32(x), Data::F32(c)) = (a, x, c) else {
        return Err(Error::GemmDType { dtype: plan.dtype });
    };
    if m != plan.m {
        return Err(Error::internal(
            "a gathered product runs at its compiled rows only",
        ));
    }
    let la = mat_layout(plan.lhs.offset, plan.lhs.row_stride, plan.lhs.col_stride)?;
    gemm_taps(
        &g.taps,
        m,
        MatRef::new(a, la).with_scan(call.scans[0]),
        g.panels.as_ref(),
        x,
        MatMut::new(c, MatLayout::row_major(m, plan.n)),
        Parallelism::Team(team),
        after,
    )?;
    Ok(())
}

/// Bytes of a product's left operand (a convolution's weights) up to which it gathers its
/// right operand ([`find_gathers`]): ResNet-18's first two stages (at most 576 KiB).
pub const TAPS_MAX_WEIGHT_BYTES: usize = 1 << 20;

/// Multiply-adds a chunk of a direct stencil's blocks has at least. With
/// `MIN_CHUNK_WORK` (4K) MobileNetV2's small depthwise layers (0.3-1 M multiply-adds)
/// took 56-62 us at 16 threads on the Xeon, against 19-37 us with 64K chunks and 24-53
/// us as generated code; 256K was too coarse for some (a 144x56->28 layer 83 us).
const STENCIL_CHUNK_WORK: usize = 64 * 1024;

/// Finds the products whose right operand is a gather ([`Taps::recognize`]) that the
/// generated kernel right before stores for them alone, by the product's kernel index:
/// those products gather it themselves (`FERRITE_IMPLICIT_IM2COL=0` keeps every operand
/// stored), and the kernel before is skipped ([`CpuProgram::gathered`]). Decided from the
/// plan, before any code is generated, so that the kernels skipped need none.
fn find_gathers(program: &Program, plan: &CpuPlan, buffers: &[Buffer]) -> Vec<(usize, Gather)> {
    let off = std::env::var_os("FERRITE_IMPLICIT_IM2COL").is_some_and(|v| v == "0");
    let isa = crate::wide::Isa::host();
    if off || isa == crate::wide::Isa::Sse {
        return Vec::new();
    }
    // Per kernel of the program: its extern product, and its generated kernel (the
    // kernel itself, or a product's epilogue).
    let n = program.kernels.len();
    let mut gemm_of: Vec<Option<&ExternGemm>> = vec![None; n];
    let mut generated_of: Vec<Option<&Kernel>> = vec![None; n];
    let mut is_extern = vec![false; n];
    for (k, kp) in plan.program.kernels.iter().zip(&plan.kernels) {
        match &kp.run {
            Run::ExternGemm(g) => {
                gemm_of[kp.source] = Some(g);
                is_extern[kp.source] = true;
            }
            Run::ExternStencil(_) => is_extern[kp.source] = true,
            Run::Generated(_) => generated_of[kp.source] = Some(k),
            Run::Nothing | Run::Absorbed => {}
        }
    }
    let mut gathers = Vec::new();
    for si in 1..n {
        // A generated kernel (not an extern one's epilogue), then a product.
        let (false, Some(_), Some(plan)) = (is_extern[si - 1], generated_of[si - 1], gemm_of[si])
        else {
            continue;
        };
        let epilogue = generated_of[si];
        let r = plan.rhs.buffer;
        let rbuf = &buffers[r.index()];
        let dense = plan.rhs.offset == 0
            && plan.rhs.col_stride == 1
            && plan.rhs.row_stride == plan.n as i64
            && plan.batch.iter().all(|&b| b == 1)
            && rbuf.ty.numel() == plan.k * plan.n;
        // Small weights only: with large ones (ResNet-18's last stages, 2.3 and 9 MiB)
        // the crate's product of the stored im2col ran 1.1-1.6x faster than ours of the
        // gathered taps at one thread (Zen 5), more than the im2col kernel costs; with
        // layer 2's 576 KiB the two products took the same time and the im2col (0.14-0.18
        // ms) went.
        let small = plan.m.saturating_mul(plan.k).saturating_mul(4) <= TAPS_MAX_WEIGHT_BYTES;
        if plan.dtype != DType::F32
            || !small
            || !dense
            || rbuf.kind != BufferKind::Intermediate
            || plan.lhs.buffer == r
            || epilogue.is_some_and(|k| k.reads.iter().chain(&k.writes).any(|a| a.buffer == r))
        {
            continue;
        }
        // Stored by the kernel before for this product alone.
        let alone = program.kernels.iter().enumerate().all(|(ki, k)| {
            (ki == si || !k.reads.iter().any(|a| a.buffer == r))
                && (ki == si - 1 || !k.writes.iter().any(|a| a.buffer == r))
        });
        if !alone {
            continue;
        }
        let source_len = |b: BufferId| {
            let buf = buffers.get(b.index())?;
            (buf.ty.dtype == DType::F32 && b != r).then(|| buf.ty.numel())
        };
        let Some(taps) = Taps::recognize(&program.kernels[si - 1], r, plan.k, plan.n, source_len)
        else {
            continue;
        };
        // Constant weights in panel form, packed once here, not per run.
        let weights = match buffers[plan.lhs.buffer.index()].kind {
            BufferKind::Constant(c) => program.constants.get(c).map(|c| &c.tensor().data),
            _ => None,
        };
        let panels = match weights {
            Some(Data::F32(a)) => {
                let la = (
                    usize::try_from(plan.lhs.offset).unwrap_or(usize::MAX),
                    plan.lhs.row_stride as isize,
                    plan.lhs.col_stride as isize,
                );
                crate::sgemm::Panels::pack(isa, a, la, plan.m, plan.k)
            }
            _ => None,
        };
        gathers.push((si, Gather { taps, panels }));
    }
    gathers
}

/// For a product of `m` rows where `plan` has more (a row program's run) and no batch
/// axis longer than 1: the elements of its left operand and product that it touches,
/// as prefix lengths.
fn used_prefix(plan: &ExternGemm, m: usize) -> Option<(usize, usize)> {
    let l = &plan.lhs;
    if m == 0 || m >= plan.m || plan.batch.iter().any(|&b| b != 1) || plan.k == 0 {
        return None;
    }
    let (offset, rs, cs) = (
        usize::try_from(l.offset).ok()?,
        usize::try_from(l.row_stride).ok()?,
        usize::try_from(l.col_stride).ok()?,
    );
    let a_len = offset + (m - 1) * rs + (plan.k - 1) * cs + 1;
    Some((a_len, m * plan.n))
}

/// The result of a kernel's calls: `Ok`, or the check whose 1-based number `code` is.
/// Keeps the first non-zero code a generated function returned (chunks of one kernel run
/// on several threads; [`check_failure`] reports it).
fn note_failure(failure: &AtomicI32, code: i32) {
    if code != 0 {
        let _ = failure.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
    }
}

fn check_failure(info: &KernelInfo, code: i32) -> Result<()> {
    match code {
        0 => Ok(()),
        code => Err(Error::Check {
            message: info
                .checks
                .get(code as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("failed with code {code}")),
        }),
    }
}

/// The product's storage, shared by the blocks of a split GEMM (see `gemm_batches`).
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);

// SAFETY: the blocks that share it write disjoint elements (see `gemm_batches`).
unsafe impl<T: Send> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedMut<T> {}

/// Zeroes the first `bytes` bytes of `d` (zero is all-zero bits in every dtype), in
/// parallel on the team when there is enough of it.
fn zero(team: Team<'_>, d: &mut Data, bytes: usize) -> Result<()> {
    /// Bytes a thread clears at least: below this a single `memset` is quicker.
    const MIN_ZERO_BYTES: usize = 256 * 1024;
    let len = d.len() * d.dtype().size_bytes();
    let bytes = bytes.min(len);
    let base = SharedMut(data_addr_mut(d) as *mut u8);
    let clear = |r: std::ops::Range<usize>| {
        // Moves the whole `SharedMut` (which is Send) into the closure, not its raw
        // pointer field (which is not), as disjoint capture otherwise would.
        #[allow(clippy::redundant_locals)]
        let base = base;
        // SAFETY: `base` points at `len >= bytes` bytes of `d`, borrowed mutably for
        // this call; the ranges handed out are disjoint parts of `0..bytes`; all-zero
        // bytes are a valid value of every element type `Data` holds.
        unsafe { std::ptr::write_bytes(base.0.add(r.start), 0, r.len()) }
    };
    if team.threads() > 1 && bytes >= 2 * MIN_ZERO_BYTES {
        team.parallel_for_range(bytes, MIN_ZERO_BYTES, clear)?;
    } else {
        clear(0..bytes);
    }
    Ok(())
}

/// A kernel name usable as a symbol.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn zeros(dtype: DType, n: usize) -> Data {
    ferrite_ir::Tensor::zeros(&ferrite_ir::TensorType::new(dtype, vec![n]).expect("a valid shape"))
        .data
}

/// Applies `$body` to the vector inside any `Data` variant.
macro_rules! each_data {
    ($d:expr, $v:ident => $body:expr) => {
        match $d {
            Data::F32($v) => $body,
            Data::F16($v) => $body,
            Data::Bf16($v) => $body,
            Data::I32($v) => $body,
            Data::I64($v) => $body,
            Data::Bool($v) => $body,
            Data::F64($v) => $body,
            Data::I8($v) => $body,
            Data::U8($v) => $body,
            Data::I16($v) => $body,
            Data::U16($v) => $body,
            Data::U32($v) => $body,
            Data::U64($v) => $body,
        }
    };
}

fn data_addr(d: &Data) -> usize {
    each_data!(d, v => v.as_ptr() as usize)
}

fn data_addr_mut(d: &mut Data) -> usize {
    each_data!(d, v => v.as_mut_ptr() as usize)
}

/// Assigns intermediates and GEMM temporaries to storage slots with the loop IR's
/// liveness and slot assignment, the placement the memory plan reports: a GEMM product
/// temporary lives during its own step only.
fn plan_storage(program: &Program, steps: &[Step], buffers: &[Buffer]) -> Slots {
    let mut live = Liveness::of(program);
    for (si, step) in steps.iter().enumerate() {
        if let Step::Gemm { call, .. } = step {
            live.note_write(call.plan.product, si);
            // A gathering product reads its operand's source.
            if let Some(g) = &call.gather {
                live.note_read(g.taps.source, si);
            }
        }
        // A stencil may read a buffer its kernel does not (the source of a pad it reads
        // through).
        if let Step::Stencil { stencil, .. } = step {
            for tap in &stencil.taps {
                live.note_read(tap.source, si);
                if let crate::stencil::Coef::Buffer(b) = tap.coef {
                    live.note_read(b, si);
                }
            }
        }
    }
    assign_slots(buffers, &live)
}

/// Per step, the buffers to zero before it runs: intermediates (in a storage slot) and
/// outputs that the step's kernel does not provably write entirely (with `union`,
/// counting several stores that together cover a buffer), other than donated outputs.
fn zero_lists(
    program: &Program,
    steps: &[Step],
    buffers: &[Buffer],
    slot_of: &[Option<usize>],
    union: bool,
) -> Vec<Vec<BufferId>> {
    program
        .kernels
        .iter()
        .zip(steps)
        .map(|(k, step)| {
            let mut z: Vec<BufferId> = k
                .writes
                .iter()
                .map(|w| w.buffer)
                .filter(|&b| {
                    slot_of[b.index()].is_some()
                        || matches!(buffers[b.index()].kind, BufferKind::Output(_))
                })
                .filter(|&b| !writes_every_element(k, step, &buffers[b.index()], union))
                // A donated output holds its input's value: the kernel updates it.
                .filter(|&b| {
                    !program
                        .donated
                        .iter()
                        .any(|d| program.outputs[d.output] == b)
                })
                .collect();
            z.sort();
            z
        })
        .collect()
}

/// True when running `step` writes every element of `buf` (so stale contents never show):
/// one store covers it, or with `union` its stores' elements cover it and no stage reads
/// it (a later stage could read an element before another writes it).
fn writes_every_element(kernel: &Kernel, step: &Step, buf: &Buffer, union: bool) -> bool {
    match step {
        Step::Gemm { call, .. } if call.plan.product == buf.id => return true,
        Step::Stencil { stencil, .. } if stencil.out == buf.id => return true,
        _ => {}
    }
    let numel = buf.ty.numel();
    // Every store of `buf`: its index, the extents it runs over and its stage's domain.
    let stores: Vec<(&ferrite_ir::loops::IndexExpr, Extents, &[usize])> = kernel
        .stages
        .iter()
        .filter_map(|stage| match stage {
            Stage::Store { domain, stores, .. } => Some((stage, domain, stores)),
            Stage::Reduce { .. } => None,
        })
        .flat_map(|(stage, domain, stores)| {
            let ext = stage.extents(&kernel.domain);
            stores
                .iter()
                .filter(|s| s.buffer == buf.id)
                .map(move |s| (&s.index, ext.clone(), domain.as_slice()))
        })
        .collect();
    if stores
        .iter()
        .any(|(index, ext, domain)| store_covers(index, ext, &kernel.domain, domain, numel))
    {
        return true;
    }
    if !union {
        return false;
    }
    // Several stores that together cover it: an im2col's taps, a pad's interior and
    // borders. Only where no stage reads the buffer, which could read an element before
    // a later stage writes it.
    let reads = kernel.stages.iter().any(|stage| {
        stage.body().nodes.iter().any(|n| match &n.op {
            ferrite_ir::loops::ExprOp::Load(l) => l.buffer == buf.id,
            _ => false,
        })
    });
    if reads {
        return false;
    }
    let mut maps = Vec::new();
    for (index, ext, _) in &stores {
        match store_map(index, ext) {
            Some(Some(map)) => maps.push(map),
            Some(None) => {}
            None => return false,
        }
    }
    // Too few elements written to cover it, whatever they are.
    let written = maps.iter().fold(0u128, |n, (_, dims)| {
        n.saturating_add(dims.iter().map(|&(e, _)| e as u128).product::<u128>())
    });
    if written < numel as u128 {
        return false;
    }
    // An outer variable every store steps through with the same stride, whose periods
    // tile the buffer while each store's other terms stay inside one period (a
    // convolution's channels): the stores cover the buffer when they cover one period.
    let mut numel = numel as i128;
    while let Some(&(e, c)) = maps.first().and_then(|(_, dims)| dims.last()) {
        let inside = |(start, dims): &(i128, Vec<(i128, i128)>)| {
            let reach = dims.iter().map(|&(e, c)| (e - 1) * c).sum::<i128>() - (e - 1) * c;
            dims.contains(&(e, c)) && *start >= 0 && start + reach < c
        };
        if c.checked_mul(e) != Some(numel) || !maps.iter().all(inside) {
            break;
        }
        for (_, dims) in &mut maps {
            if let Some(at) = dims.iter().position(|&d| d == (e, c)) {
                dims.remove(at);
            }
        }
        numel = c;
    }
    let mut runs = Vec::new();
    for (start, dims) in &maps {
        if !store_runs(*start, dims, &mut runs) {
            return false;
        }
    }
    runs_cover(runs, numel)
}

/// Runs of consecutive elements that [`store_runs`] lists at most, over all of a
/// buffer's stores (after common outer periods are factored out); a buffer written in
/// more pieces is zeroed first.
const MAX_STORE_RUNS: usize = 1 << 14;

/// The elements a store at `index` writes, as its first element and the (extent, stride)
/// of each moving variable, strides positive (a variable with a negative coefficient
/// counted down writes the same elements), sorted by stride; `Some(None)` for a store
/// that writes nothing, `None` when the index is not affine over variables of known
/// extent.
#[allow(clippy::type_complexity)]
fn store_map(
    index: &ferrite_ir::loops::IndexExpr,
    ext: &Extents,
) -> Option<Option<(i128, Vec<(i128, i128)>)>> {
    let (offset, terms) = index.as_affine(ext)?;
    let mut start = offset as i128;
    let mut dims = Vec::with_capacity(terms.len());
    for (v, c) in terms {
        let e = ext.extent(v)?;
        if e == 0 {
            return Some(None);
        }
        if c == 0 || e == 1 {
            continue;
        }
        if c < 0 {
            start += c as i128 * (e as i128 - 1);
        }
        dims.push((e as i128, (c as i128).abs()));
    }
    dims.sort_by_key(|&(_, c)| c);
    Some(Some((start, dims)))
}

/// Appends to `runs` the elements of a store's map ([`store_map`]) as runs `start..end`
/// of consecutive elements (the innermost variables that step through consecutive
/// elements make one run; one run per point of the others), or returns false when that
/// would make more than [`MAX_STORE_RUNS`].
fn store_runs(start: i128, dims: &[(i128, i128)], runs: &mut Vec<(i128, i128)>) -> bool {
    let mut len = 1i128;
    let mut rest = dims;
    while let [(e, c), tail @ ..] = rest {
        if *c != len {
            break;
        }
        len *= e;
        rest = tail;
    }
    let count = rest
        .iter()
        .try_fold(1usize, |n, &(e, _)| n.checked_mul(e as usize));
    if count.is_none_or(|n| runs.len() + n > MAX_STORE_RUNS) {
        return false;
    }
    // Every point of the remaining variables, odometer order.
    let mut at = vec![0usize; rest.len()];
    loop {
        let s = start
            + at.iter()
                .zip(rest)
                .map(|(&i, &(_, c))| i as i128 * c)
                .sum::<i128>();
        runs.push((s, s + len));
        if !odometer(&mut at, rest.iter().map(|&(e, _)| e as usize)) {
            return true;
        }
    }
}

/// Whether `runs` cover `0..numel`: every element in at least one run (a pad's border
/// stores overlap at the corners), none outside.
fn runs_cover(mut runs: Vec<(i128, i128)>, numel: i128) -> bool {
    runs.sort_unstable();
    let mut next = 0i128;
    for (s, e) in runs {
        if s < 0 || s > next {
            return false;
        }
        next = next.max(e);
    }
    next == numel
}

/// A store covers its buffer when its index is an injective affine map from a domain of
/// exactly `numel` points into `0..numel`.
fn store_covers(
    index: &ferrite_ir::loops::IndexExpr,
    ext: &Extents,
    outer: &[usize],
    inner: &[usize],
    numel: usize,
) -> bool {
    let points: usize = outer.iter().chain(inner).product();
    if points != numel {
        return false;
    }
    let Some((offset, terms)) = index.as_affine(ext) else {
        return false;
    };
    let Some((lo, hi)) = index.range(ext) else {
        return false;
    };
    if offset != 0 || lo != 0 || hi as i128 != numel as i128 - 1 {
        return false;
    }
    let extent = |v: Var| ext.extent(v).unwrap_or(0);
    let mut dims: Vec<(u128, u128)> = terms
        .iter()
        .map(|&(v, c)| (extent(v) as u128, c.unsigned_abs() as u128))
        .collect();
    // Variables of extent > 1 missing from the map would write the same element twice.
    let moving = outer.iter().chain(inner).filter(|&&d| d > 1).count();
    if dims.iter().filter(|d| d.0 > 1).count() != moving {
        return false;
    }
    dims.sort_by_key(|&(_, c)| c);
    let mut reached = 0u128;
    for (extent, stride) in dims {
        if extent > 1 && stride <= reached {
            return false;
        }
        reached += (extent.saturating_sub(1)) * stride;
    }
    true
}

//! The CPU plan: every rewrite and decision the backend makes before emitting code, as
//! loop IR to loop IR.
//!
//! The plan runs a fixed list of named steps (the tables below). Each takes the program
//! (or one kernel) and returns it rewritten, together with the [`Schedule`] it decided;
//! after each step the result is checked by the loop-IR verifier, so a step that breaks
//! an invariant is caught by name. The output, a [`CpuPlan`], is complete loop IR (the
//! evaluator runs it to the same results as the input) with the schedule beside it, and
//! its `Display` is what `ferrite compile --dump` writes as `05-cpu-plan.loop`. The
//! emitter ([`crate::emit`]) then only translates it to Cranelift.
//!
//! The steps, file by file:
//!
//! - `epilogue.rs` (`split-gemm`): a matmul kernel becomes the product kernel, run by the
//!   extern GEMM, and an epilogue kernel reading the product.
//! - `coalesce.rs`: a pointwise kernel's innermost outer axes merged where every index
//!   stays affine, so short rows still make long vector loops.
//! - `disjoint.rs`: whether outer points write disjoint elements (else the kernel runs on
//!   one thread, and tiles and lanes, which reorder points, are off).
//! - `tile.rs`: a pointwise kernel whose loads stride across rows (a transpose) walks its
//!   outer domain in 16x16 tiles, so each tile's lines stay in L1.
//! - `lanes.rs`: kernels whose inner loops stride (reductions over a leading axis, a
//!   matmul without the extern GEMM) take four neighbouring outer points as the lanes
//!   instead, one accumulator per lane, with the scalar code's numerics.
//! - `stash.rs`: a transcendental that two stages of a kernel both compute (softmax's
//!   `exp(x - max)` in its sum and its store stage) computed once per outer point into a
//!   scratch row (a stack slot) that the later stage reads back.
//! - `wide.rs`: `exp`, `log`, `tanh`, `erf` and `sigmoid` in long
//!   vector loops computed over L1-resident scratch rows by the AVX2 / AVX-512 routines
//!   of [`crate::wide`] (one apply stage per function, a routine call), pointwise rows
//!   cut into blocks for it; the `f32x4` code where that does not pay.
//! - `vectorize.rs`: the SIMD decision for each stage's innermost loop (contiguous
//!   accesses, lane-wise ops) or why it stays scalar, with the proof that every access is
//!   in bounds (`analysis.rs`).
//! - `gemm-blocks` (here, after the kernel steps, whose schedules it reads): a GEMM whose
//!   pointwise in-place epilogue may run on each block of rows as the GEMM computes it.
//!
//! Architecture Invariant: nothing here knows Cranelift; the plan is loop IR and plain
//! data, and the emitter depends on it, never the other way.

pub(crate) mod analysis;
mod coalesce;
mod disjoint;
mod epilogue;
mod lanes;
mod nest;
mod rows;
mod schedule;
mod stage;
mod stash;
mod tile;
mod vectorize;
pub mod wide;

pub use disjoint::outer_points_write_disjoint;
pub use epilogue::describe as describe_gemm;
pub use lanes::{OuterLanes, StageLanes};
pub use schedule::{CpuPlan, ExternGemm, KernelPlan, Run, Schedule, ScratchSlot};
pub use stage::{StagePlan, StageReport};
pub use stash::{LaneStash, MAX_SCRATCH_BYTES};
pub use vectorize::{lanes_of, Lanes, NotVectorized, VectorPlan};

use crate::error::{Error, Result};
use crate::wide::Isa;
use analysis::{check_references, is_pointwise, live_nodes, prove_accesses, stage_loops, Levels};
use ferrite_ir::loops::{
    Buffer, BufferId, BufferKind, Extents, IndexExpr, Kernel, KernelId, Program, Reduction, Stage,
    Var,
};
use stage::stage_report;
use std::collections::HashMap;
use vectorize::{narrow_i64, plan_vector, StageFacts};

/// How kernels are compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodegenOptions {
    /// Emit SIMD code for innermost loops where possible.
    pub vectorize: bool,
    /// Vector groups per main-loop iteration (1 to 8; 4 keeps enough in flight).
    pub unroll: usize,
    /// Compute a transcendental that two stages of a kernel share once per point, into a
    /// stack scratch row, instead of in both stages (see `stash.rs`).
    pub stash: bool,
    /// The width of the wide routines that compute transcendentals over blocks of
    /// vectorized loops (see `wide.rs`); `None` (or `Isa::Sse`): the `f32x4` code only.
    /// The default is [`Isa::host`], which `FERRITE_CPU_ISA` caps. A width this CPU
    /// lacks is planned all the same (the plan does not depend on the host), and its
    /// apply stages are emitted as the `f32x4` loops they are.
    pub wide: Option<Isa>,
    /// For a row program (`CpuProgram::with_rows`): its most rows. A pointwise row cut
    /// into wide blocks is then cut within each of those rows (the block divides the
    /// elements per row), so that a run of fewer rows is a prefix of whole blocks.
    pub row_bound: Option<usize>,
    /// Run kernels that sum shifted rows (depthwise convolutions) through the direct
    /// stencil loop ([`crate::stencil`]) when the plan also uses extern kernels. The
    /// default: when this CPU has AVX-512 (the loop's scalar form, which other CPUs
    /// would run, is slower than the generated code) and `FERRITE_DIRECT_STENCIL` is
    /// not `0`.
    pub stencil: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            vectorize: true,
            unroll: 4,
            stash: true,
            wide: Some(Isa::host()).filter(|&isa| isa != Isa::Sse),
            row_bound: None,
            stencil: Isa::host() == Isa::Avx512
                && std::env::var_os(STENCIL_VAR).is_none_or(|v| v != "0"),
        }
    }
}

/// The environment variable that turns the direct stencil loop off (`0`).
pub const STENCIL_VAR: &str = "FERRITE_DIRECT_STENCIL";

/// A step over the whole program.
struct ProgramStep {
    name: &'static str,
    run: fn(&mut CpuPlan, &Options) -> Result<()>,
}

/// A step over one generated kernel: its new form (`None`: unchanged), deciding parts of
/// its schedule on the way.
struct KernelStep {
    name: &'static str,
    run: fn(&Kernel, &mut Schedule, &mut Scope) -> Result<Option<Kernel>>,
}

/// What a plan is made with.
struct Options<'a> {
    codegen: &'a CodegenOptions,
    /// Run matmul reductions through the extern GEMM.
    use_gemm: bool,
}

/// What a kernel step sees besides its kernel: the options, and the program's buffers
/// (a step that adds scratch buffers appends them).
struct Scope<'a> {
    codegen: &'a CodegenOptions,
    buffers: &'a mut Vec<Buffer>,
}

impl ProgramStep {
    const fn new(name: &'static str, run: fn(&mut CpuPlan, &Options) -> Result<()>) -> Self {
        ProgramStep { name, run }
    }
}

impl KernelStep {
    const fn new(
        name: &'static str,
        run: fn(&Kernel, &mut Schedule, &mut Scope) -> Result<Option<Kernel>>,
    ) -> Self {
        KernelStep { name, run }
    }
}

/// The program steps, in order.
#[rustfmt::skip]
const PROGRAM_STEPS: [ProgramStep; 3] = [
    ProgramStep::new("split-gemm", split_gemm), // matmul kernels: the GEMM's product kernel, then an epilogue
    ProgramStep::new("split-stencil", split_stencil), // sums of shifted rows: the direct stencil (through a pad before it), then an epilogue
    ProgramStep::new("skip-empty", skip_empty), // kernels over an empty domain run nothing
];

/// The program steps that read the kernel steps' schedules, in order, run after them.
#[rustfmt::skip]
const FINAL_STEPS: [ProgramStep; 2] = [
    ProgramStep::new("gemm-blocks", gemm_blocks), // pointwise in-place epilogues: on each block of rows the GEMM computes
    ProgramStep::new("stencil-blocks", stencil_blocks), // the same after a direct stencil
];

/// The kernel steps, in order, run on every kernel that becomes generated code.
#[rustfmt::skip]
const KERNEL_STEPS: [KernelStep; 8] = [
    KernelStep::new("coalesce",  coalesce),  // pointwise kernels: merge innermost outer axes while indices stay affine
    KernelStep::new("disjoint",  disjoint),  // may distinct outer points run on different threads?
    KernelStep::new("tile",      tile),      // parallel pointwise kernels reading across rows: 16x16 tiles
    KernelStep::new("nest",      nest),      // parallel pointwise kernels of short rows with per-point loads: rows as inner loops
    KernelStep::new("lanes",     lanes),     // parallel kernels whose inner loops stride: outer points as lanes
    KernelStep::new("stash",     stash),     // a transcendental two stages compute: once per point, in scratch
    KernelStep::new("wide",      wide),      // transcendentals of long vector loops: wide routine calls on scratch rows
    KernelStep::new("vectorize", vectorize), // each innermost loop as SIMD code, or why not; accesses proved
];

/// Plans a whole program (which must verify): the program steps, then the kernel steps
/// on every kernel that runs as generated code; the result is verified (and, in debug
/// builds, every step's).
pub fn plan_program(
    program: &Program,
    codegen: &CodegenOptions,
    use_gemm: bool,
) -> Result<CpuPlan> {
    program.verify().map_err(|e| Error::InvalidProgram {
        message: format!("program `{}` is invalid: {e}", program.name),
    })?;
    let opts = Options { codegen, use_gemm };
    let mut plan = CpuPlan {
        program: program.clone(),
        kernels: (0..program.kernels.len())
            .map(|source| KernelPlan {
                source,
                run: Run::Generated(Schedule::default()),
            })
            .collect(),
    };
    // Each step's output is verified in debug builds (the test suites and the fuzz replays),
    // which names the step that broke it; the final plan always, since code is generated
    // from it. Verifying the whole program after every step was 2.5% of compiling GPT-2.
    let each = cfg!(debug_assertions);
    for step in &PROGRAM_STEPS {
        (step.run)(&mut plan, &opts)?;
        if each {
            verify(&plan, step.name, true)?;
        }
    }
    for step in &KERNEL_STEPS {
        run_kernel_step(&mut plan, step, &opts)?;
        if each {
            verify(&plan, step.name, true)?;
        }
    }
    for step in &FINAL_STEPS {
        (step.run)(&mut plan, &opts)?;
        if each {
            verify(&plan, step.name, true)?;
        }
    }
    if !each {
        verify(&plan, "any (a debug build names which)", true)?;
    }
    Ok(plan)
}

/// Plans one kernel on its own (`buffers` are those of its program): the kernel steps,
/// each verified against the buffers. The kernel need not come from a verified program:
/// its references and accesses are checked first.
pub fn plan_kernel(
    kernel: &Kernel,
    buffers: &[Buffer],
    codegen: &CodegenOptions,
) -> Result<CpuPlan> {
    check_references(kernel)?;
    prove_kernel(kernel, buffers).map_err(|e| e.context(format!("kernel {}", kernel.name)))?;
    // The accesses are derived data, which a kernel built by hand may leave empty.
    let mut kernel = kernel.clone();
    (kernel.reads, kernel.writes) = kernel.compute_accesses(buffers);
    let kernel = &kernel;
    let opts = Options {
        codegen,
        use_gemm: false,
    };
    let mut plan = CpuPlan {
        program: Program {
            name: kernel.name.clone(),
            buffers: buffers.to_vec(),
            inputs: vec![],
            outputs: vec![],
            kernels: vec![kernel.clone()],
            constants: vec![],
            donated: vec![],
        },
        kernels: vec![KernelPlan {
            source: 0,
            run: Run::Generated(Schedule::default()),
        }],
    };
    plan.program
        .verify_kernel(kernel)
        .map_err(|e| Error::InvalidProgram {
            message: format!("kernel {}: {e}", kernel.name),
        })?;
    for step in &KERNEL_STEPS {
        run_kernel_step(&mut plan, step, &opts)?;
        verify(&plan, step.name, false)?;
    }
    Ok(plan)
}

/// Checks the plan after `step`: the whole program, or (`whole` false) each kernel on its
/// own, and the kernels lanes steps run in place of stashing ones.
fn verify(plan: &CpuPlan, step: &'static str, whole: bool) -> Result<()> {
    let failed = |message: String| Error::PlanStep { step, message };
    if whole {
        plan.program.verify().map_err(|e| failed(e.to_string()))?;
    } else {
        for k in &plan.program.kernels {
            plan.program
                .verify_kernel(k)
                .map_err(|e| failed(format!("kernel {}: {e}", k.name)))?;
        }
    }
    for kp in &plan.kernels {
        if let Run::Generated(Schedule {
            lanes: Some(OuterLanes {
                stash: Some(ls), ..
            }),
            ..
        }) = &kp.run
        {
            plan.program
                .verify_kernel(&ls.kernel)
                .map_err(|e| failed(format!("lanes form of kernel {}: {e}", ls.kernel.name)))?;
        }
    }
    Ok(())
}

/// Runs a kernel step on every generated kernel of `plan`, recomputing the accesses of
/// the kernels it rewrites.
fn run_kernel_step(plan: &mut CpuPlan, step: &KernelStep, opts: &Options) -> Result<()> {
    let Program {
        buffers, kernels, ..
    } = &mut plan.program;
    for (k, kp) in kernels.iter_mut().zip(&mut plan.kernels) {
        let Run::Generated(schedule) = &mut kp.run else {
            continue;
        };
        let mut scope = Scope {
            codegen: opts.codegen,
            buffers: &mut *buffers,
        };
        let rewritten = (step.run)(k, schedule, &mut scope)
            .map_err(|e| e.context(format!("kernel {}", k.name)))?;
        if let Some(mut new) = rewritten {
            (new.reads, new.writes) = new.compute_accesses(buffers);
            *k = new;
        }
    }
    Ok(())
}

/// Proves every access of `kernel` in bounds (see [`prove_accesses`]), for a kernel
/// that may not have been verified; nothing to prove over an empty domain.
fn prove_kernel(kernel: &Kernel, buffers: &[Buffer]) -> Result<()> {
    if kernel.domain.contains(&0) {
        return Ok(());
    }
    for stage in &kernel.stages {
        if stage.domain().contains(&0) {
            continue;
        }
        let ext = stage.extents(&kernel.domain);
        prove_accesses(
            stage.body(),
            &live_nodes(stage),
            stage.stores(),
            &ext,
            buffers,
        )?;
    }
    Ok(())
}

// ---- program steps ----

/// `split-gemm`: each matmul kernel the extern GEMM can run becomes its product kernel
/// and, unless the product is the whole result, an epilogue kernel (`epilogue.rs`).
fn split_gemm(plan: &mut CpuPlan, opts: &Options) -> Result<()> {
    if !opts.use_gemm {
        return Ok(());
    }
    split_kernels(plan, |k, buffers| {
        let split = epilogue::split_gemm(k, buffers, BufferId(buffers.len() as u32))?;
        buffers.extend(split.temp);
        Some((
            split.product_kernel,
            Run::ExternGemm(split.gemm),
            split.epilogue,
        ))
    });
    Ok(())
}

/// `split-stencil`: each kernel that sums shifted rows of its input (a depthwise conv)
/// becomes the direct stencil's kernel and, unless the sum is the whole result, an
/// epilogue reading it back (`crate::stencil`). When its taps all read a zero-padded copy
/// that the generated kernel right before stores for it alone (MobileNetV2's 14x14 and
/// 7x7 planes, whose short padded rows fusion stores apart), the stencil reads the copy's
/// source through the padding instead and the pad kernel runs nothing (`Run::Absorbed`).
/// The loop IR is unchanged (the stencil's kernel reads the padded buffer, which the pad
/// kernel still stores): the plan evaluates as before; only the extern stencil reads the
/// source.
fn split_stencil(plan: &mut CpuPlan, opts: &Options) -> Result<()> {
    if !opts.use_gemm || !opts.codegen.stencil {
        return Ok(());
    }
    // Per kernel: the pad before it that it may read through.
    let p = &plan.program;
    let mut pads: HashMap<KernelId, (usize, crate::stencil::Pad)> = HashMap::new();
    for i in 1..plan.kernels.len() {
        let (Run::Generated(_), Run::Generated(_)) =
            (&plan.kernels[i - 1].run, &plan.kernels[i].run)
        else {
            continue;
        };
        if plan.kernels[i - 1].source == plan.kernels[i].source {
            continue;
        }
        let Some(pad) = crate::stencil::Pad::recognize(&p.kernels[i - 1], &p.buffers) else {
            continue;
        };
        let b = pad.padded;
        let alone = p.buffers[b.index()].kind == BufferKind::Intermediate
            && p.kernels.iter().enumerate().all(|(j, k)| {
                (j == i || !k.reads.iter().any(|a| a.buffer == b))
                    && (j == i - 1 || !k.writes.iter().any(|a| a.buffer == b))
            });
        if alone {
            pads.insert(p.kernels[i].id, (plan.kernels[i - 1].source, pad));
        }
    }
    let mut absorbed = Vec::new();
    split_kernels(plan, |k, buffers| {
        let through = pads.get(&k.id).and_then(|(source, pad)| {
            let split = crate::stencil::split_through(k, buffers, Some(pad))?;
            absorbed.push(*source);
            Some(split)
        });
        let split = through.or_else(|| crate::stencil::split(k, buffers))?;
        Some((
            split.kernel,
            Run::ExternStencil(split.stencil),
            split.epilogue,
        ))
    });
    for kp in &mut plan.kernels {
        if absorbed.contains(&kp.source) && matches!(kp.run, Run::Generated(_)) {
            kp.run = Run::Absorbed;
        }
    }
    Ok(())
}

/// Replaces each generated kernel that `split` takes (it may add buffers) by the extern
/// kernel it returns, how that runs, and its epilogue (generated) when it has one; then
/// renumbers the kernels and recomputes their accesses.
fn split_kernels(
    plan: &mut CpuPlan,
    mut split: impl FnMut(&Kernel, &mut Vec<Buffer>) -> Option<(Kernel, Run, Option<Kernel>)>,
) {
    let buffers = &mut plan.program.buffers;
    let mut kernels = Vec::with_capacity(plan.program.kernels.len());
    let mut plans = Vec::with_capacity(plan.kernels.len());
    let old = std::mem::take(&mut plan.program.kernels);
    for (k, kp) in old.into_iter().zip(std::mem::take(&mut plan.kernels)) {
        let parts = match kp.run {
            Run::Generated(_) => split(&k, buffers),
            _ => None,
        };
        let Some((extern_kernel, run, epilogue)) = parts else {
            kernels.push(k);
            plans.push(kp);
            continue;
        };
        kernels.push(extern_kernel);
        plans.push(KernelPlan {
            source: kp.source,
            run,
        });
        if let Some(e) = epilogue {
            kernels.push(e);
            plans.push(KernelPlan {
                source: kp.source,
                run: Run::Generated(Schedule::default()),
            });
        }
    }
    for (i, k) in kernels.iter_mut().enumerate() {
        k.id = KernelId(i as u32);
        (k.reads, k.writes) = k.compute_accesses(buffers);
    }
    plan.program.kernels = kernels;
    plan.kernels = plans;
}

/// `skip-empty`: a generated kernel over an empty domain runs nothing.
fn skip_empty(plan: &mut CpuPlan, _: &Options) -> Result<()> {
    for (k, kp) in plan.program.kernels.iter().zip(&mut plan.kernels) {
        if matches!(kp.run, Run::Generated(_)) && k.domain.contains(&0) {
            kp.run = Run::Nothing;
        }
    }
    Ok(())
}

/// `gemm-blocks`: a GEMM whose epilogue may run on each block of the product as soon as
/// it is computed ([`crate::gemm::gemm_nd_then`]), instead of reading the whole product
/// back from memory after it. That needs the epilogue to be a parallel pointwise kernel
/// (outer points in any order and any ranges) that updates the product in place and
/// touches it only at each point's own element, that element being the point's flat
/// index: then each row of a block is one range of the epilogue's points, and it reads
/// nothing the GEMM has yet to write. Its other buffers are read-only and live across the
/// product kernel (they are read after it), so no GEMM operand shares their storage.
fn gemm_blocks(plan: &mut CpuPlan, _: &Options) -> Result<()> {
    let pairs = plan.kernels.windows(2).zip(&plan.program.kernels[1..]);
    let per_rows: Vec<usize> = pairs
        .enumerate()
        .filter_map(|(i, (pair, epilogue))| {
            let (Run::ExternGemm(g), Run::Generated(s)) = (&pair[0].run, &pair[1].run) else {
                return None;
            };
            (pair[0].source == pair[1].source && epilogue_runs_per_rows(g, epilogue, s))
                .then_some(i)
        })
        .collect();
    for i in per_rows {
        if let Run::ExternGemm(g) = &mut plan.kernels[i].run {
            g.epilogue_per_rows = true;
        }
    }
    Ok(())
}

/// `stencil-blocks`: a direct stencil's epilogue runs on each block of rows the stencil
/// computes, under the conditions `gemm-blocks` checks (the stencil writes its output
/// dense, each row one range of the epilogue's points).
fn stencil_blocks(plan: &mut CpuPlan, _: &Options) -> Result<()> {
    let pairs = plan.kernels.windows(2).zip(&plan.program.kernels[1..]);
    let per_rows: Vec<usize> = pairs
        .enumerate()
        .filter_map(|(i, (pair, epilogue))| {
            let (Run::ExternStencil(st), Run::Generated(s)) = (&pair[0].run, &pair[1].run) else {
                return None;
            };
            let numel = st.planes * st.rows * st.cols;
            (pair[0].source == pair[1].source && updates_in_place(st.out, numel, epilogue, s))
                .then_some(i)
        })
        .collect();
    for i in per_rows {
        if let Run::ExternStencil(st) = &mut plan.kernels[i].run {
            st.epilogue_per_rows = true;
        }
    }
    Ok(())
}

/// Whether `epilogue` (scheduled `s`) may run on blocks of rows of `g`'s product (see
/// `gemm_blocks`).
fn epilogue_runs_per_rows(g: &ExternGemm, epilogue: &Kernel, s: &Schedule) -> bool {
    let numel = g.batch.iter().product::<usize>() * g.m * g.n;
    !g.temporary && updates_in_place(g.product, numel, epilogue, s)
}

/// Whether `epilogue` (scheduled `s`) is a parallel pointwise kernel of `numel` points
/// that touches `product` (dense, `numel` elements) only at each point's own element,
/// the point's flat index, and stores nothing else.
fn updates_in_place(product: BufferId, numel: usize, epilogue: &Kernel, s: &Schedule) -> bool {
    if !s.parallel
        || s.lanes.is_some()
        || !s.scratch.is_empty()
        || !is_pointwise(epilogue)
        || epilogue.domain.iter().product::<usize>() != numel
    {
        return false;
    }
    let stage = &epilogue.stages[0];
    let ext = stage.extents(&epilogue.domain);
    let strides = ferrite_ir::types::contiguous_strides(&epilogue.domain);
    let flat = IndexExpr::Sum(
        strides
            .iter()
            .enumerate()
            .map(|(a, &st)| IndexExpr::Var(Var::outer(a)) * st as i64)
            .collect(),
    )
    .simplify(&ext);
    let at_own_element = |index: &IndexExpr| index.simplify(&ext) == flat;
    let stores = stage.stores();
    let loads_ok = stage.body().nodes.iter().all(|node| match &node.op {
        ferrite_ir::loops::ExprOp::Load(l) if l.buffer == product => {
            l.guard.is_empty() && at_own_element(&l.index)
        }
        _ => true,
    });
    !stores.is_empty()
        && stores
            .iter()
            .all(|st| st.buffer == product && at_own_element(&st.index))
        && loads_ok
}

// ---- kernel steps ----

/// `coalesce` (`coalesce.rs`).
fn coalesce(k: &Kernel, _: &mut Schedule, _: &mut Scope) -> Result<Option<Kernel>> {
    Ok(coalesce::coalesce_pointwise(k))
}

/// `disjoint` (`disjoint.rs`): whether the outer points may run in parallel. The
/// later steps only reorder points or add per-point scratch, so the answer stays true.
fn disjoint(k: &Kernel, s: &mut Schedule, _: &mut Scope) -> Result<Option<Kernel>> {
    s.parallel = outer_points_write_disjoint(k);
    Ok(None)
}

/// `tile` (`tile.rs`); tiles reorder the outer points, so only parallel kernels tile.
fn tile(k: &Kernel, s: &mut Schedule, _: &mut Scope) -> Result<Option<Kernel>> {
    if !s.parallel {
        return Ok(None);
    }
    Ok(tile::tile_strided_pointwise(k).map(|(tiled, note)| {
        s.notes.push(note);
        tiled
    }))
}

/// `nest` (`nest.rs`); nesting merges outer points, so only parallel kernels (whose
/// merged points still write disjoint elements).
fn nest(k: &Kernel, s: &mut Schedule, _: &mut Scope) -> Result<Option<Kernel>> {
    if !s.parallel {
        return Ok(None);
    }
    Ok(nest::nest_short_rows(k).map(|(nested, note)| {
        s.notes.push(note);
        nested
    }))
}

/// `lanes` (`lanes.rs`); lanes reorder the outer points, so only parallel kernels.
fn lanes(k: &Kernel, s: &mut Schedule, scope: &mut Scope) -> Result<Option<Kernel>> {
    if scope.codegen.vectorize && s.parallel {
        s.lanes = lanes::plan_outer_lanes(k, scope.codegen.unroll);
    }
    Ok(None)
}

/// `stash` (`stash.rs`). With lanes, a stash holds every lane of a group per inner point;
/// if that does not fit or plan, the kernel is not stashed and the lanes run without it
/// (every value is then computed four points at a time, which beats computing it once
/// per point in scalar code).
fn stash(k: &Kernel, s: &mut Schedule, scope: &mut Scope) -> Result<Option<Kernel>> {
    if !scope.codegen.stash {
        return Ok(None);
    }
    let first = scope.buffers.len();
    let Some(stashed) = stash::stash_shared(k, first) else {
        return Ok(None);
    };
    let mut lanes = None;
    if let Some(plain) = &s.lanes {
        let width = 4 * plain.unroll;
        let extent = k.domain[k.domain.len() - 1];
        let planned = stash::lanes_form(&stashed, first + stashed.scratch.len(), width, extent)
            .and_then(|ls| {
                let p = lanes::plan_outer_lanes(&ls.kernel, scope.codegen.unroll)?;
                (p.unroll == plain.unroll).then_some((ls, p))
            });
        match planned {
            Some(found) => lanes = Some(found),
            None => return Ok(None),
        }
    }
    scope.buffers.extend(stashed.scratch.iter().cloned());
    s.notes.extend(stashed.notes.iter().cloned());
    let slot_bytes = lanes.as_ref().map(|(ls, _)| ls.slot_bytes.clone());
    if let Some((mut ls, mut p)) = lanes {
        scope
            .buffers
            .extend(ls.scratch.iter().map(|(_, b)| b.clone()));
        (ls.kernel.reads, ls.kernel.writes) = ls.kernel.compute_accesses(scope.buffers);
        s.notes.push(format!(
            "stash rows hold the {} lanes of a group per point in lanes steps ({} bytes)",
            4 * p.unroll,
            ls.slot_bytes.iter().sum::<usize>()
        ));
        p.stash = Some(ls);
        s.lanes = Some(p);
    }
    s.scratch = stashed
        .scratch
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let own = b.ty.size_bytes();
            let lanes = slot_bytes.as_ref().and_then(|v| v.get(i).copied());
            ScratchSlot {
                buffer: b.id,
                bytes: lanes.unwrap_or(own).max(own),
            }
        })
        .collect();
    Ok(Some(stashed.kernel))
}

/// `wide` (`wide.rs`), with `vectorize`'s own decision of which stages are vector code.
fn wide(k: &Kernel, s: &mut Schedule, scope: &mut Scope) -> Result<Option<Kernel>> {
    let opts = scope.codegen;
    let Some(isa) = opts.wide.filter(|&isa| opts.vectorize && isa != Isa::Sse) else {
        return Ok(None);
    };
    let vectorizes = |k: &Kernel, si: usize, buffers: &[Buffer]| -> bool {
        let stage = &k.stages[si];
        let arg_accs: Vec<_> = k.stages[..si]
            .iter()
            .flat_map(|st| match st {
                Stage::Reduce { reductions, .. } => reductions
                    .iter()
                    .filter(|r| r.kind.is_arg())
                    .map(|r| r.acc)
                    .collect(),
                Stage::Store { .. } => Vec::new(),
            })
            .collect();
        let ext = stage.extents(&k.domain);
        plan_stage(
            stage,
            si,
            stage_loops(stage),
            &ext,
            buffers,
            opts,
            &arg_accs,
        )
        .is_ok_and(|p| p.vector.is_some())
    };
    let unroll = opts.unroll.clamp(1, 8);
    Ok(wide::apply_wide(
        k,
        s,
        scope.buffers,
        isa,
        unroll,
        opts.row_bound,
        &vectorizes,
    ))
}

/// `vectorize` (`vectorize.rs`): how each stage's loops run at one outer point (or, for
/// a pointwise kernel, along a row), and how each stage of a lanes step runs.
fn vectorize(k: &Kernel, s: &mut Schedule, scope: &mut Scope) -> Result<Option<Kernel>> {
    if k.domain.contains(&0) {
        // No points: the function returns at once.
        s.stages.clear();
        if let Some(l) = &mut s.lanes {
            l.plans.clear();
        }
        return Ok(None);
    }
    let opts = scope.codegen;
    let buffers = &scope.buffers[..];
    let n = k.domain.len();
    let row_loop = n >= 1 && is_pointwise(k);
    let mut arg_accs = Vec::new();
    let mut stages = Vec::with_capacity(k.stages.len());
    for (si, stage) in k.stages.iter().enumerate() {
        let loops = if row_loop {
            vec![(Var::outer(n - 1), k.domain[n - 1])]
        } else {
            stage_loops(stage)
        };
        let ext = stage.extents(&k.domain);
        stages.push(
            plan_stage(stage, si, loops, &ext, buffers, opts, &arg_accs)
                .map_err(|e| e.context(format!("stage {si}")))?,
        );
        if let Stage::Reduce { reductions, .. } = stage {
            arg_accs.extend(reductions.iter().filter(|r| r.kind.is_arg()).map(|r| r.acc));
        }
    }
    for (plan, call) in stages.iter_mut().zip(&s.wide) {
        if let Some(c) = call {
            plan.report.vector = Some(format!("{} call", c.isa.name()));
            plan.report.scalar_reason = None;
        }
    }
    s.stages = stages;
    if let Some(l) = &mut s.lanes {
        let lane_kernel = l.stash.as_ref().map_or(k, |ls| &ls.kernel);
        let last = Var::outer(n - 1);
        let mut plans = Vec::with_capacity(lane_kernel.stages.len());
        for (si, stage) in lane_kernel.stages.iter().enumerate() {
            let loops = stage_loops(stage);
            let ext = stage.extents(&k.domain);
            let clamped = if loops.iter().all(|&(_, d)| d > 0) {
                prove_accesses(
                    stage.body(),
                    &live_nodes(stage),
                    stage.stores(),
                    &ext,
                    buffers,
                )
                .map_err(|e| e.context(format!("stage {si}")))?
            } else {
                vec![false; stage.body().nodes.len()]
            };
            let report = StageReport {
                vector: Some(format!("f32x4x{} across {last}", l.unroll)),
                ..stage_report(stage, si, &loops)
            };
            plans.push(StagePlan {
                loops,
                clamped,
                vector: None,
                unroll: l.unroll,
                report,
            });
        }
        l.plans = plans;
    }
    Ok(None)
}

/// The vector groups per iteration of a stage's vector loop whose innermost loop runs
/// `n` times: the options', but one for rows shorter than [`wide::MIN_POINTS`] that the
/// unrolled loop would cover in one or two iterations. A row of 16 at four groups is one
/// iteration of four copies of the body (a softmax's exp polynomial four times over) and
/// a combine of four accumulators: four times the code, and Cranelift's compile time
/// grows with it, for no speed on rows that short (out-of-order execution overlaps the
/// iterations of one group as well). From 32 elements, where the row calls of `rows.rs`
/// start, whose order is the `f32x4x4` loop's, the options' unroll stays.
fn stage_unroll(unroll: usize, n: Option<usize>) -> usize {
    let unroll = unroll.clamp(1, 8);
    match n {
        Some(n) if n < wide::MIN_POINTS && n >= 4 * unroll => 1,
        _ => unroll,
    }
}

/// The plan of one stage at one outer point: its accesses proved, its innermost loop
/// vectorized when it can be (`arg_accs`: the argmax/argmin accumulators of earlier
/// stages, whose values fit `i32` lanes).
fn plan_stage(
    stage: &Stage,
    index: usize,
    loops: Vec<(Var, usize)>,
    ext: &Extents,
    buffers: &[Buffer],
    opts: &CodegenOptions,
    arg_accs: &[ferrite_ir::loops::AccId],
) -> Result<StagePlan> {
    let body = stage.body();
    let unroll = stage_unroll(opts.unroll, loops.last().map(|&(_, n)| n));
    let mut report = stage_report(stage, index, &loops);
    if !loops.iter().all(|&(_, d)| d > 0) {
        report.scalar_reason = Some("the loop is empty".into());
        return Ok(StagePlan {
            loops,
            clamped: vec![false; body.nodes.len()],
            vector: None,
            unroll,
            report,
        });
    }
    let live = live_nodes(stage);
    let clamped = prove_accesses(body, &live, stage.stores(), ext, buffers)?;
    let narrow = narrow_i64(body, ext, arg_accs);
    let vector = if loops.is_empty() {
        None
    } else if !opts.vectorize {
        report.scalar_reason = Some("vectorization disabled".into());
        None
    } else {
        let vars: Vec<Var> = loops.iter().map(|&(v, _)| v).collect();
        let levels = Levels::new(body, &vars);
        let index_level = |e: &IndexExpr| levels.index(e);
        let reductions: &[Reduction] = match stage {
            Stage::Reduce { reductions, .. } => reductions,
            Stage::Store { .. } => &[],
        };
        let facts = StageFacts {
            body,
            levels: &levels.nodes,
            live: &live,
            narrow: &narrow,
            clamped: &clamped,
            level: loops.len(),
            var: vars[vars.len() - 1],
            index_level: &index_level,
            reductions,
            stores: stage.stores(),
            vector_guards: true,
            vector_strides: true,
        };
        match plan_vector(&facts) {
            Ok(p) => Some(p),
            Err(why) => {
                report.scalar_reason = Some(why.0);
                None
            }
        }
    };
    if let Some(p) = &vector {
        let shape = if p.lanes.iter().flatten().any(|&l| l == Lanes::F32) {
            "f32x4"
        } else {
            "i32x4"
        };
        report.vector = Some(match p.strided.len() {
            0 => format!("{shape}x{unroll}"),
            n => format!("{shape}x{unroll}, {n} strided loads as two vector loads and a shuffle"),
        });
    }
    Ok(StagePlan {
        loops,
        clamped,
        vector,
        unroll,
        report,
    })
}

//! `compile`: a graph to a [`Compiled`] program for a [`Target`], with [`Options`].
//!
//! The pipeline is `ferrite_passes::pipeline::lower_graph` (decompose, e-graph
//! optimize, fuse + schedule into loop IR, memory plan) followed by the target's code
//! generator. This is the one place that turns a graph and [`Options`] into something
//! runnable: the library and every `ferrite` command (`run`, `compile`, `profile`) go
//! through [`compile_ir`], and [`Compiled`] answers what they report (stage times,
//! kernel counts, peak memory, the optimizer's report, the simulator's timing, the
//! backend's code as text). The stage texts can be written to a dump directory, which
//! is what `ferrite compile --dump` does.

use super::builder::Graph;
use super::error::{Error, Result};
use super::host::Tensor;
use super::memory::{self, default_memory_limit};
use ferrite_accel::program::{Intermediates, SimProgram};
use ferrite_accel::sim::{DeviceReport, Machine};
use ferrite_accel::tune::{KernelTuning, TuneOptions};
use ferrite_cpu::{CpuOptions, CpuProgram, InputTensors, OutputTensors};
use ferrite_ir::loops::Program;
use ferrite_ir::{interpret, print, verify, TensorType};
use ferrite_passes::dot::graph_dot;
use ferrite_passes::optimize::OptimizeReport;
use ferrite_passes::pipeline::{lower_graph, PipelineOptions, StageRecord};
use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_profile::{
    machine_info, machine_roofline, measure_copy_bandwidth, profile_cpu, profile_sim,
    ProfileReport, ProfileTarget, ScheduleProfile,
};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Where a compiled program runs: the one target type of the library and of every
/// `ferrite` command's `--target` flag (each command accepts the targets that make
/// sense for it and lists them in its `--help`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Target {
    /// Native code: loop IR through Cranelift, GEMM through an extern kernel, threads.
    #[default]
    Cpu,
    /// Tile kernels run on the simulator of the MTIA-like accelerator (the `mtia2i`
    /// preset): functionally exact, and slow, as a simulator is.
    Sim,
    /// The reference interpreter on the graph as given: slow, obviously correct, no pipeline.
    Interp,
    /// The loop-IR evaluator on the scheduled program: slow, checks decompose,
    /// optimize and fusion independently of any code generator.
    Loops,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 4] = [Target::Cpu, Target::Sim, Target::Interp, Target::Loops];

    /// The name used on the command line (`cpu`, `sim`, `interp`, `loops`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Sim => "sim",
            Target::Interp => "interp",
            Target::Loops => "loops",
        }
    }

    /// What the target is, in a few words (the command line's `--help` shows it).
    pub fn about(self) -> &'static str {
        match self {
            Target::Cpu => "native code through the Cranelift JIT",
            Target::Sim => "tile kernels on the accelerator simulator",
            Target::Interp => "the reference interpreter on the graph as given (no pipeline)",
            Target::Loops => {
                "the loop-IR evaluator on the scheduled program (the pipeline, no code generator)"
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = Error;

    /// A target by its [`name`](Target::name); anything else is an [`Error::UnknownTarget`].
    fn from_str(s: &str) -> Result<Target> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| Error::UnknownTarget { name: s.into() })
    }
}

impl From<ProfileTarget> for Target {
    /// The target a [`ProfileReport`] was measured on.
    fn from(t: ProfileTarget) -> Target {
        match t {
            ProfileTarget::Cpu => Target::Cpu,
            ProfileTarget::Sim => Target::Sim,
        }
    }
}

/// The most CPU threads [`Options::threads`] may ask for (the CPU backend's thread
/// pool refuses more, too).
pub const MAX_THREADS: usize = ferrite_cpu::MAX_THREADS;

/// How to compile: target, fusion, optimizer, threads, simulated machine, dump directory.
///
/// Built from the default with chained setters:
/// `Options::default().target(Target::Cpu).fuse(false).threads(4)`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// The target (default [`Target::Cpu`]).
    pub target: Target,
    /// Fuse ops into few kernels (default); `false` is one kernel per primitive op.
    pub fuse: bool,
    /// Run the e-graph optimizer (default).
    pub optimize: bool,
    /// CPU threads; `None` (default) is `FERRITE_NUM_THREADS` when set, else one per
    /// core. At most [`MAX_THREADS`]. Every program runs on the process's one thread
    /// pool, using this many of its threads (the pool grows to the largest count asked).
    pub threads: Option<usize>,
    /// Write every stage's text here (created if missing), numbered in pipeline order;
    /// see [`Compiled::dump_files`] for the layout.
    pub dump: Option<PathBuf>,
    /// The machine [`Target::Sim`] simulates; `None` (default) is the built-in
    /// MTIA-2i-like preset, [`Machine::mtia2i`].
    pub machine: Option<Machine>,
    /// The memory budget of one run, in bytes: a run whose estimated need is larger is
    /// refused with an [`Error::MemoryBudget`] before it allocates anything. `None`
    /// (default) is [`default_memory_limit`] (half the physical memory, at most
    /// 16 GiB); see [`crate::memory`] for what each target's estimate counts.
    pub memory_limit: Option<u64>,
    /// On [`Target::Cpu`], flush denormals to zero (FTZ + DAZ) while the program runs,
    /// on the calling thread and the pool's, restored after (default off, as in
    /// PyTorch and ONNX Runtime; ARCHITECTURE.md's Numerics section says what changes).
    pub flush_denormals: bool,
    /// On [`Target::Sim`], autotune every GEMM kernel on the simulator
    /// ([`crate::sim::tune`]) instead of taking the cost model's choice; `None`
    /// (default) takes the model's.
    pub autotune: Option<TuneOptions>,
    /// Pairs (input, output) whose output may be written in place of the input on
    /// [`Target::Cpu`] and [`Target::Loops`] (donated buffers, as `torch.compile`'s and
    /// JAX's): each pair the compiler finds safe ([`ferrite_passes::donate`]) is
    /// recorded in [`Compiled::donated`] and pays off through
    /// [`Compiled::run_into_donated`]. Empty (default): none.
    pub donate: Vec<(usize, usize)>,
    /// Set by [`crate::compile_dynamic`] for a row program's instance: its most rows,
    /// so that the CPU plan keeps blocks within a row (`CodegenOptions::row_bound`).
    pub(crate) row_bound: Option<usize>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            target: Target::Cpu,
            fuse: true,
            optimize: true,
            threads: None,
            dump: None,
            machine: None,
            memory_limit: None,
            flush_denormals: false,
            autotune: None,
            donate: Vec::new(),
            row_bound: None,
        }
    }
}

impl Options {
    /// Offers the outputs of `pairs` (input, output) the inputs' buffers
    /// ([`Options::donate`]).
    pub fn donate(mut self, pairs: Vec<(usize, usize)>) -> Options {
        self.donate = pairs;
        self
    }

    /// Sets the target.
    pub fn target(mut self, target: Target) -> Options {
        self.target = target;
        self
    }

    /// Turns fusion on or off.
    pub fn fuse(mut self, fuse: bool) -> Options {
        self.fuse = fuse;
        self
    }

    /// Turns the e-graph optimizer on or off.
    pub fn optimize(mut self, optimize: bool) -> Options {
        self.optimize = optimize;
        self
    }

    /// Sets the number of CPU threads (0 counts as 1; more than [`MAX_THREADS`] is an
    /// [`Error::InvalidOption`] when compiling).
    pub fn threads(mut self, threads: usize) -> Options {
        self.threads = Some(threads.max(1));
        self
    }

    /// Sets the dump directory.
    pub fn dump(mut self, dir: impl Into<PathBuf>) -> Options {
        self.dump = Some(dir.into());
        self
    }

    /// Sets the machine [`Target::Sim`] simulates.
    pub fn machine(mut self, machine: Machine) -> Options {
        self.machine = Some(machine);
        self
    }

    /// Autotunes GEMM kernels on [`Target::Sim`] (see [`Options::autotune`]).
    pub fn autotune(mut self, tune: TuneOptions) -> Options {
        self.autotune = Some(tune);
        self
    }

    /// Turns flushing denormals on or off (see [`Options::flush_denormals`]).
    pub fn flush_denormals(mut self, on: bool) -> Options {
        self.flush_denormals = on;
        self
    }

    /// Sets the memory budget of one run, in bytes (see [`Options::memory_limit`]).
    pub fn memory_limit(mut self, bytes: u64) -> Options {
        self.memory_limit = Some(bytes);
        self
    }

    /// The memory budget of one run: [`Options::memory_limit`], or the default.
    pub fn memory_budget(&self) -> u64 {
        self.memory_limit.unwrap_or_else(default_memory_limit)
    }

    /// Checks the options that can be out of range.
    fn check(&self) -> Result<()> {
        if self.threads.is_none() && self.target == Target::Cpu {
            ferrite_cpu::threads_from_env().map_err(|e| Error::InvalidOption {
                option: "threads",
                message: e.to_string(),
            })?;
        }
        match self.threads {
            Some(n) if n > MAX_THREADS => Err(Error::InvalidOption {
                option: "threads",
                message: format!("{n} threads asked for, at most {MAX_THREADS} are allowed"),
            }),
            _ => Ok(()),
        }
    }

    fn pipeline(&self) -> PipelineOptions {
        let mut p = PipelineOptions::default();
        p.optimize.enabled = self.optimize;
        p.schedule.fuse = self.fuse;
        p.threads = self.pass_threads();
        p.texts = self.dump.is_some();
        p
    }

    /// The threads the passes spread their work over: as many as the code will run on (as
    /// the CPU backend compiles its functions; `parallel_map` uses one a core at most).
    pub fn pass_threads(&self) -> usize {
        self.threads
            .unwrap_or_else(ferrite_cpu::default_thread_count)
    }
}

/// Compiles a built graph (its first build error, if any, is returned here).
///
/// ```
/// use ferrite::{Options, Target, Tensor};
/// let g = ferrite::Graph::new("affine");
/// let x = g.input("x", ferrite::f32(&[2]));
/// g.output(&(x * 3.0 - 1.0));
/// let exe = ferrite::compile(&g, &Options::default().target(Target::Interp))?;
/// let out = exe.run(&[&Tensor::from_vec(&[2], vec![1.0f32, 2.0])?])?;
/// assert_eq!(out[0].as_slice::<f32>(), Some(&[2.0, 5.0][..]));
/// # Ok::<(), ferrite::Error>(())
/// ```
pub fn compile(graph: &Graph, options: &Options) -> Result<Compiled> {
    compile_ir(&graph.to_ir()?, options)
}

/// Compiles an IR graph (parsed from `.fg` text, or built by hand).
///
/// [`Target::Interp`] keeps the graph as given; every other target runs the pipeline
/// (decompose, optimize, schedule) and then its code generator. With
/// [`Options::dump`] set, every stage's text is written there before this returns.
pub fn compile_ir(graph: &ferrite_ir::Graph, options: &Options) -> Result<Compiled> {
    let start = Instant::now();
    verify(graph).map_err(|e| Error::InvalidGraph {
        message: e.to_string(),
    })?;
    options.check()?;
    let (backend, records, tunings) = match options.target {
        Target::Interp => (Backend::Interp, Vec::new(), Vec::new()),
        Target::Loops | Target::Cpu | Target::Sim => {
            // The decomposition's own constants (the window ops' tap indices) are made
            // before any run's estimate exists: they count against the budget too.
            let needs = ferrite_passes::decompose::constant_bytes(graph);
            let limit = options.memory_budget();
            if needs > limit {
                return Err(Error::MemoryBudget {
                    what: format!(
                        "compiling graph `{}` (the tap indices of its convolutions and pools)",
                        graph.name
                    ),
                    needs,
                    limit,
                });
            }
            let mut lowered =
                lower_graph(graph, &options.pipeline()).map_err(|e| Error::Compile {
                    message: e.to_string(),
                    internal: e.is_internal(),
                })?;
            if matches!(options.target, Target::Cpu | Target::Loops) {
                // Pairs found unsafe stay copies; the program says which were taken.
                let _refused =
                    ferrite_passes::donate::donate(&mut lowered.scheduled.program, &options.donate);
            }
            let mut records = lowered.stages;
            let (code, record, tunings) = generate(&lowered.scheduled.program, options)?;
            records.extend(record);
            let pipeline = Pipeline {
                decomposed: lowered.decomposed,
                optimized: lowered.optimized,
                optimize_report: lowered.optimize_report,
                scheduled: lowered.scheduled,
            };
            (Backend::Lowered(Box::new(pipeline), code), records, tunings)
        }
    };
    let mut compiled = Compiled {
        graph: graph.clone(),
        input_names: param_names(graph),
        options: options.clone(),
        run_bytes: run_bytes(graph, &backend),
        backend,
        stages: records.iter().map(|s| (s.name, s.time)).collect(),
        compile_time: Duration::ZERO,
        dump_files: Vec::new(),
        tunings,
        loop_rows: None,
    };
    if let Some(dir) = &options.dump {
        compiled.dump_files = compiled.write_dump(dir, records)?;
    }
    compiled.compile_time = start.elapsed();
    Ok(compiled)
}

/// Runs the target's code generator on a scheduled program; returns the code and, for
/// the targets that have a code generator, its stage record (with its text only when
/// dumping, since the text of a large program is large).
fn generate(
    program: &Program,
    options: &Options,
) -> Result<(Code, Option<StageRecord>, Vec<KernelTuning>)> {
    let start = Instant::now();
    let failed = |stage: &str, e: String, internal: bool| Error::Compile {
        message: format!("{stage}: {e}"),
        internal,
    };
    let mut tunings = Vec::new();
    let (code, name, file) = match options.target {
        // The loop-IR evaluator runs the program itself. (The interpreter never gets
        // here: it runs the graph as given, with no pipeline.)
        Target::Interp | Target::Loops => return Ok((Code::Loops, None, Vec::new())),
        Target::Cpu => {
            let mut cpu_options = CpuOptions::default();
            if let Some(threads) = options.threads {
                cpu_options.threads = threads;
            }
            cpu_options.capture_dumps = options.dump.is_some();
            cpu_options.flush_denormals = options.flush_denormals;
            cpu_options.codegen.row_bound = options.row_bound;
            let cpu = CpuProgram::compile(program, &cpu_options)
                .map_err(|e| failed("cpu codegen", e.to_string(), e.is_internal()))?;
            (Code::Cpu(Box::new(cpu)), "cpu codegen", "cpu.clif")
        }
        Target::Sim => {
            let machine = options.machine.clone().unwrap_or_else(Machine::mtia2i);
            // The unfused baseline keeps one launch per kernel: it does not run
            // GEMMs that share their lhs as one launch either.
            let (sim, t) = SimProgram::compile_grouped(
                program,
                &machine,
                Intermediates::default(),
                options.autotune.as_ref(),
                options.fuse,
            )
            .map_err(|e| failed("tile lowering", e.to_string(), e.is_internal()))?;
            tunings = t;
            (Code::Sim(Box::new(sim)), "tile lowering", "kernels.tile")
        }
    };
    let time = start.elapsed();
    let text = match options.dump {
        Some(_) => code.text().unwrap_or_default(),
        None => String::new(),
    };
    let record = StageRecord {
        name,
        time,
        file,
        text,
    };
    Ok((code, Some(record), tunings))
}

/// What the pipeline made of the graph (every target but [`Target::Interp`]).
#[derive(Debug)]
struct Pipeline {
    decomposed: ferrite_ir::Graph,
    optimized: ferrite_ir::Graph,
    optimize_report: OptimizeReport,
    scheduled: Scheduled,
}

/// What runs a compiled program.
#[derive(Debug)]
enum Backend {
    /// The reference interpreter on the graph as given.
    Interp,
    /// The pipeline's result and the code generated from its loop-IR program.
    Lowered(Box<Pipeline>, Code),
}

/// The code generated from a loop-IR program.
#[derive(Debug)]
enum Code {
    /// None: the loop-IR evaluator runs the program itself.
    Loops,
    Cpu(Box<CpuProgram>),
    Sim(Box<SimProgram>),
}

impl Code {
    /// The code as text (see [`Compiled::code_text`]).
    fn text(&self) -> Option<String> {
        match self {
            Code::Loops => None,
            Code::Cpu(p) => Some(format!("{}\n{}", p.report(), p.dump())),
            Code::Sim(p) => Some(p.kernels_text()),
        }
    }
}

/// A compiled program: run it on host [`Tensor`]s, as often as needed, from any number
/// of threads at once (`Compiled` is `Send + Sync`).
///
/// Inputs go in by position ([`Compiled::run`], in the order of
/// [`Compiled::input_names`]) or by name ([`Compiled::run_named`]).
///
/// It also answers what the compiler did: the stage times, the graphs and the
/// optimizer report of the pipeline, the schedule (kernels and memory plan), and the
/// generated code as text.
#[derive(Debug)]
pub struct Compiled {
    graph: ferrite_ir::Graph,
    /// The parameters' names, in order (`%i` for an unnamed one of a hand-built graph).
    input_names: Vec<String>,
    /// The options it was compiled with, for [`Compiled::unfused`].
    options: Options,
    backend: Backend,
    stages: Vec<(&'static str, Duration)>,
    compile_time: Duration,
    dump_files: Vec<PathBuf>,
    /// What the autotuner did for each GEMM kernel ([`Options::autotune`]).
    tunings: Vec<KernelTuning>,
    /// The memory one run needs, estimated ([`Compiled::run_memory_bytes`]).
    run_bytes: u64,
    /// On [`Target::Loops`], the row axes of a row program ([`Compiled::make_rows`]).
    loop_rows: Option<ferrite_ir::loops::Rows>,
}

/// The memory one run of `backend` needs, estimated (see [`crate::memory`]).
fn run_bytes(graph: &ferrite_ir::Graph, backend: &Backend) -> u64 {
    match backend {
        Backend::Interp => memory::interp_bytes(graph),
        Backend::Lowered(pipeline, code) => match code {
            Code::Loops => memory::loops_bytes(graph, &pipeline.scheduled.program),
            Code::Cpu(p) => memory::cpu_bytes(graph, p),
            Code::Sim(p) => memory::sim_bytes(graph, p),
        },
    }
}

/// What one run of a [`Compiled`] program produced: the outputs, how long the run
/// took, and on [`Target::Sim`] the simulated device's timing report.
#[derive(Debug)]
pub struct Execution {
    outputs: Vec<Tensor>,
    time: Duration,
    device_report: Option<DeviceReport>,
}

impl Execution {
    /// An execution of these outputs that took `time`, with the device's report.
    pub(crate) fn new(
        outputs: Vec<Tensor>,
        time: Duration,
        device_report: Option<DeviceReport>,
    ) -> Execution {
        Execution {
            outputs,
            time,
            device_report,
        }
    }

    /// The outputs, one per graph output, in order.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// The outputs, by value.
    pub fn into_outputs(self) -> Vec<Tensor> {
        self.outputs
    }

    /// Wall-clock time of the run itself (inputs already checked and copied, outputs
    /// not yet checked).
    pub fn time(&self) -> Duration {
        self.time
    }

    /// The simulator's report (cycles, time and bytes per kernel launch), on
    /// [`Target::Sim`] only.
    pub fn device_report(&self) -> Option<&DeviceReport> {
        self.device_report.as_ref()
    }
}

/// How far [`Compiled::profile_report_with_progress`] has got: each step is reported
/// as it starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ProfileStep {
    /// Compiling the unfused baseline.
    CompilingUnfused,
    /// The untimed warm-up run of a schedule (CPU).
    WarmUp {
        /// The fused schedule, or the unfused baseline.
        fused: bool,
    },
    /// `done` of `runs` timed runs of a schedule are over (CPU).
    Timed {
        /// The fused schedule, or the unfused baseline.
        fused: bool,
        /// Timed runs over.
        done: usize,
        /// Timed runs in all.
        runs: usize,
    },
    /// The one simulated run of a schedule (simulator).
    Simulating {
        /// The fused schedule, or the unfused baseline.
        fused: bool,
    },
    /// Measuring the CPU's copy bandwidth, the roofline of the report (CPU).
    MeasuringBandwidth,
}

impl Compiled {
    /// What the autotuner did for each GEMM kernel, in kernel order (empty
    /// without [`Options::autotune`]).
    pub fn autotune_report(&self) -> &[KernelTuning] {
        &self.tunings
    }

    /// Runs the program: one input per graph input, in declaration order (as
    /// `&Tensor`s or `Tensor`s); returns one tensor per output. A wrong input count,
    /// dtype or shape is an [`Error::InputCount`], [`Error::InputDType`] or
    /// [`Error::InputShape`].
    ///
    /// On [`Target::Cpu`] the inputs are read in place (never copied) and the outputs
    /// are fresh tensors; [`Compiled::run_into`] writes into tensors the caller keeps.
    /// The other targets copy the inputs once into their own tensors.
    pub fn run<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Vec<Tensor>> {
        self.execute(inputs).map(Execution::into_outputs)
    }

    /// Runs the program into outputs the caller owns (one per graph output, of its type:
    /// [`Compiled::new_outputs`] makes them), like ONNX Runtime's IOBinding. On
    /// [`Target::Cpu`] the inputs are read in place and the outputs written in place,
    /// and a warm run (same program, same output tensors) allocates nothing: the
    /// program keeps its intermediates between runs. Other targets run as by
    /// [`Compiled::run`] and copy their results in. A wrong output count or type is an
    /// [`Error::OutputCount`] or [`Error::OutputType`].
    pub fn run_into<A: Borrow<Tensor>>(&self, inputs: &[A], outputs: &mut [Tensor]) -> Result<()> {
        self.check_into(inputs, outputs)?;
        match &self.backend {
            Backend::Lowered(_, Code::Cpu(p)) => p
                .run_into(&Borrowed(inputs), &mut BorrowedMut(outputs))
                .map_err(|e| Error::Run {
                    message: e.to_string(),
                }),
            _ => {
                for (out, t) in outputs.iter_mut().zip(self.run(inputs)?) {
                    *out = t;
                }
                Ok(())
            }
        }
    }

    /// What [`Compiled::run_into`] checks before it runs: the inputs' and the outputs'
    /// count and types, and the memory budget.
    fn check_into<A: Borrow<Tensor>>(&self, inputs: &[A], outputs: &[Tensor]) -> Result<()> {
        check_types(&self.graph, inputs.iter().map(|t| t.borrow().ty()))?;
        let types = self.output_types_iter();
        if outputs.len() != self.graph.outputs.len() {
            return Err(Error::OutputCount {
                expected: self.graph.outputs.len(),
                got: outputs.len(),
            });
        }
        for (index, (t, want)) in outputs.iter().zip(types).enumerate() {
            if t.ty() != want {
                return Err(Error::OutputType {
                    index,
                    expected: want.clone(),
                    got: t.ty().clone(),
                });
            }
        }
        self.check_memory()
    }

    /// [`Compiled::run_into`] with the donated outputs ([`Compiled::donated`]) holding
    /// their inputs' values already (the caller swapped the tensors): those inputs are
    /// not read, and on [`Target::Cpu`] the outputs are updated in place, only where
    /// they change (a sparse table update writes the touched rows). Other targets read
    /// the values from the outputs and run as by [`Compiled::run_into`].
    pub fn run_into_donated<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        outputs: &mut [Tensor],
    ) -> Result<()> {
        if let Backend::Lowered(_, Code::Cpu(p)) = &self.backend {
            self.check_into(inputs, outputs)?;
            return p
                .run_into_donated(&Borrowed(inputs), &mut BorrowedMut(outputs))
                .map_err(|e| Error::Run {
                    message: e.to_string(),
                });
        }
        let held: Vec<(usize, Tensor)> = self
            .donated()
            .iter()
            .filter_map(|d| outputs.get(d.output).map(|t| (d.input, t.clone())))
            .collect();
        let mut refs: Vec<&Tensor> = inputs.iter().map(Borrow::borrow).collect();
        for (i, t) in &held {
            if let Some(r) = refs.get_mut(*i) {
                *r = t;
            }
        }
        self.run_into(&refs, outputs)
    }

    /// Makes a CPU program compiled at `max` rows a row program (see
    /// `ferrite_cpu::CpuProgram::with_rows`), or says why it cannot be one.
    pub(crate) fn make_rows(
        &mut self,
        name: &str,
        max: usize,
        inputs: &[Option<usize>],
        outputs: &[Option<usize>],
    ) -> std::result::Result<(), String> {
        match &mut self.backend {
            Backend::Lowered(_, Code::Cpu(p)) => p.with_rows(name, max, inputs, outputs),
            Backend::Lowered(pipeline, Code::Loops) => {
                let program = &pipeline.scheduled.program;
                self.loop_rows = Some(ferrite_ir::loops::Rows::derive(
                    program, name, max, inputs, outputs,
                )?);
                Ok(())
            }
            Backend::Lowered(pipeline, Code::Sim(p)) => {
                let program = &pipeline.scheduled.program;
                let rows = ferrite_ir::loops::Rows::derive(program, name, max, inputs, outputs)?;
                let machine = p.machine().clone();
                let lowered = SimProgram::compile_rows(program, &machine, &rows, self.options.fuse)
                    .map_err(|e| format!("its tile lowering at any row count: {e}"))?;
                **p = lowered;
                self.run_bytes = run_bytes(&self.graph, &self.backend);
                Ok(())
            }
            _ => Err("symbolic kernels exist for the cpu, loops and sim targets only".into()),
        }
    }

    /// The tile program, on [`Target::Sim`].
    pub(crate) fn sim_program(&self) -> Option<&SimProgram> {
        match &self.backend {
            Backend::Lowered(_, Code::Sim(p)) => Some(p),
            _ => None,
        }
    }

    /// Runs a row program ([`Compiled::make_rows`]) at `rows` rows into `outputs`,
    /// whose types the caller has bound; on [`Target::Sim`], the device's report.
    pub(crate) fn run_rows<A: Borrow<Tensor>>(
        &self,
        rows: usize,
        inputs: &[A],
        outputs: &mut [Tensor],
    ) -> Result<Option<DeviceReport>> {
        self.check_memory()?;
        match &self.backend {
            Backend::Lowered(_, Code::Cpu(p)) => p
                .run_rows_into(rows, &Borrowed(inputs), &mut BorrowedMut(outputs))
                .map(|()| None)
                .map_err(|e| Error::Run {
                    message: e.to_string(),
                }),
            Backend::Lowered(_, Code::Sim(p)) => {
                let args: Vec<ferrite_ir::Tensor> =
                    inputs.iter().map(|t| t.borrow().as_ir().clone()).collect();
                let (results, report) = p.run_rows(rows, &args).map_err(|e| Error::Run {
                    message: e.to_string(),
                })?;
                for (out, t) in outputs.iter_mut().zip(results) {
                    let ty = out.ty().clone();
                    *out = Tensor::from_backend(retyped(t, &ty)?)?;
                }
                Ok(Some(report))
            }
            Backend::Lowered(pipeline, Code::Loops) => {
                let rows_of = self.loop_rows.clone().ok_or_else(|| Error::Internal {
                    message: "the loop program has no row axes".into(),
                })?;
                let program = ferrite_ir::loops::RowProgram {
                    program: pipeline.scheduled.program.clone(),
                    rows: rows_of,
                }
                .at(rows);
                let mut args = Vec::with_capacity(inputs.len());
                for (t, &b) in inputs.iter().zip(&program.inputs) {
                    args.push(retyped(
                        t.borrow().as_ir().clone(),
                        &program.buffers[b.index()].ty,
                    )?);
                }
                let results =
                    ferrite_ir::loops::evaluate(&program, &args).map_err(|e| Error::Run {
                        message: e.to_string(),
                    })?;
                for (out, t) in outputs.iter_mut().zip(results) {
                    let ty = out.ty().clone();
                    *out = Tensor::from_backend(retyped(t, &ty)?)?;
                }
                Ok(None)
            }
            _ => Err(Error::Internal {
                message: "a row program runs on the cpu, loops and sim targets only".into(),
            }),
        }
    }

    /// Zero tensors of the output types, to pass to [`Compiled::run_into`].
    pub fn new_outputs(&self) -> Vec<Tensor> {
        self.output_types_iter()
            .map(|ty| Tensor::from_backend(ferrite_ir::Tensor::zeros(ty)))
            .collect::<Result<_>>()
            .unwrap_or_default()
    }

    fn output_types_iter(&self) -> impl Iterator<Item = &TensorType> {
        self.graph.outputs.iter().map(|&o| self.graph.ty(o))
    }

    /// Runs the program on inputs given by name, in any order:
    /// `exe.run_named(&[("x", &x), ("w", &w)])`. Every input must be named once: a
    /// missing, unknown or repeated name is an [`Error::MissingInput`],
    /// [`Error::UnknownInput`] or [`Error::DuplicateInput`] naming it, so that two
    /// inputs of the same type cannot be swapped unnoticed.
    pub fn run_named(&self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor>> {
        self.run(&self.inputs_by_name(inputs)?)
    }

    /// Orders inputs given by name as the positional methods ([`Compiled::run`],
    /// [`Compiled::execute`], [`Compiled::profile`]) take them, with the errors of
    /// [`Compiled::run_named`].
    pub fn inputs_by_name<'a>(&self, inputs: &[(&str, &'a Tensor)]) -> Result<Vec<&'a Tensor>> {
        let index: HashMap<&str, usize> = self
            .input_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut ordered: Vec<Option<&Tensor>> = vec![None; self.input_names.len()];
        for &(name, t) in inputs {
            let Some(&i) = index.get(name) else {
                return Err(Error::UnknownInput {
                    name: name.into(),
                    inputs: self.input_names.clone(),
                });
            };
            if ordered[i].replace(t).is_some() {
                return Err(Error::DuplicateInput { name: name.into() });
            }
        }
        ordered
            .into_iter()
            .zip(&self.input_names)
            .map(|(t, name)| t.ok_or_else(|| Error::MissingInput { name: name.clone() }))
            .collect()
    }

    /// Runs the program and reports the run ([`Execution`]: the outputs, the time of
    /// the run itself, the simulator's report): what `ferrite run` does. Inputs are
    /// checked and copied as by [`Compiled::run`].
    pub fn execute<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Execution> {
        check_types(&self.graph, inputs.iter().map(|t| t.borrow().ty()))?;
        self.check_memory()?;
        if let Backend::Lowered(_, Code::Cpu(p)) = &self.backend {
            // Read in place: no copy of the inputs.
            let start = Instant::now();
            let outputs = p.run_borrowed(&Borrowed(inputs)).map_err(|e| Error::Run {
                message: e.to_string(),
            })?;
            let time = start.elapsed();
            return Ok(Execution {
                outputs: outputs
                    .into_iter()
                    .map(Tensor::from_backend)
                    .collect::<Result<_>>()?,
                time,
                device_report: None,
            });
        }
        let inputs = check_inputs(&self.graph, inputs)?;
        let start = Instant::now();
        let (outputs, device_report) = match &self.backend {
            Backend::Interp => interpret(&self.graph, &inputs)
                .map(|o| (o, None))
                .map_err(String::from),
            Backend::Lowered(pipeline, code) => match code {
                Code::Loops => ferrite_ir::loops::evaluate(&pipeline.scheduled.program, &inputs)
                    .map(|o| (o, None))
                    .map_err(String::from),
                Code::Cpu(p) => p.run(&inputs).map(|o| (o, None)).map_err(|e| e.to_string()),
                Code::Sim(p) => p
                    .run(&inputs)
                    .map(|(o, report)| (o, Some(report)))
                    .map_err(|e| e.to_string()),
            },
        }
        .map_err(|message| Error::Run { message })?;
        let time = start.elapsed();
        Ok(Execution {
            outputs: outputs
                .into_iter()
                .map(Tensor::from_backend)
                .collect::<Result<_>>()?,
            time,
            device_report,
        })
    }

    /// Profiles the program kernel by kernel (inputs checked as by [`Compiled::run`]):
    /// on [`Target::Cpu`] one warm-up run and then `runs` timed runs (at least one),
    /// each kernel's time being its median; on [`Target::Sim`] one simulated run
    /// (cycles are deterministic). Other targets have no kernels to measure: an
    /// [`Error::WrongTarget`].
    pub fn profile<A: Borrow<Tensor>>(&self, inputs: &[A], runs: usize) -> Result<ScheduleProfile> {
        self.profile_with_progress(inputs, runs, &mut |_| {})
    }

    /// [`Compiled::profile`], calling `progress` after each timed run with the number
    /// of runs done.
    pub fn profile_with_progress<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        runs: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<ScheduleProfile> {
        check_types(&self.graph, inputs.iter().map(|t| t.borrow().ty()))?;
        self.check_memory()?;
        let (pipeline, code) = self.profilable("profiling")?;
        let fused = self.options.fuse;
        let peak = pipeline.scheduled.memory.peak_bytes() as u64;
        let graph = &pipeline.optimized;
        match code {
            Code::Cpu(p) => profile_cpu(p, graph, &Borrowed(inputs), runs, fused, peak, progress),
            Code::Sim(p) => {
                let inputs = check_inputs(&self.graph, inputs)?;
                profile_sim(p, &pipeline.scheduled.program, graph, &inputs, fused, peak)
            }
            Code::Loops => unreachable!("profilable() refuses the loop-IR evaluator"),
        }
        .map_err(|e| Error::Run {
            message: e.to_string(),
        })
    }

    /// Profiles this program against its unfused baseline ([`Compiled::unfused`]) on
    /// the same inputs, as `ferrite profile` does: both kernel by kernel as by
    /// [`Compiled::profile`], with the roofline they are compared against (on the CPU
    /// the measured copy bandwidth, on the simulator the machine's). Render the report
    /// with [`crate::profile::render_table`], [`crate::profile::to_json`] or
    /// [`crate::profile::chrome_trace`].
    pub fn profile_report<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        runs: usize,
    ) -> Result<ProfileReport> {
        self.profile_report_with_progress(inputs, runs, &mut |_| {})
    }

    /// [`Compiled::profile_report`], calling `progress` as each [`ProfileStep`] starts.
    pub fn profile_report_with_progress<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        runs: usize,
        progress: &mut dyn FnMut(ProfileStep),
    ) -> Result<ProfileReport> {
        let (_, code) = self.profilable("a profile report")?;
        check_types(&self.graph, inputs.iter().map(|t| t.borrow().ty()))?;
        progress(ProfileStep::CompilingUnfused);
        let unfused = self.unfused()?;
        // The fused program keeps its storage for later runs while the unfused one
        // runs: both count.
        let needs = self.run_bytes.saturating_add(unfused.run_bytes);
        let limit = self.options.memory_budget();
        if needs > limit {
            return Err(Error::MemoryBudget {
                what: format!(
                    "profiling graph `{}` fused and unfused on {}",
                    self.graph.name,
                    self.target()
                ),
                needs,
                limit,
            });
        }
        let runs = runs.max(1);
        let mut measure = |exe: &Compiled, fused: bool| match exe.target() {
            Target::Sim => {
                progress(ProfileStep::Simulating { fused });
                exe.profile(inputs, runs)
            }
            _ => {
                progress(ProfileStep::WarmUp { fused });
                exe.profile_with_progress(inputs, runs, &mut |done| {
                    progress(ProfileStep::Timed { fused, done, runs })
                })
            }
        };
        let fused = measure(self, true)?;
        let unfused = measure(&unfused, false)?;
        let graph = self.graph.name.clone();
        Ok(match code {
            Code::Cpu(p) => {
                progress(ProfileStep::MeasuringBandwidth);
                ProfileReport {
                    graph,
                    target: ProfileTarget::Cpu,
                    runs,
                    threads: Some(p.threads()),
                    machine: None,
                    roofline: measure_copy_bandwidth(p.threads()),
                    fused,
                    unfused,
                }
            }
            Code::Sim(p) => ProfileReport {
                graph,
                target: ProfileTarget::Sim,
                runs: 1,
                threads: None,
                machine: Some(machine_info(p.machine())),
                roofline: machine_roofline(p.machine()),
                fused,
                unfused,
            },
            Code::Loops => unreachable!("profilable() refuses the loop-IR evaluator"),
        })
    }

    /// The pipeline and the code to profile, or an [`Error::WrongTarget`] for the
    /// targets without kernels to measure.
    fn profilable(&self, operation: &'static str) -> Result<(&Pipeline, &Code)> {
        match &self.backend {
            Backend::Lowered(pipeline, code @ (Code::Cpu(_) | Code::Sim(_))) => {
                Ok((pipeline, code))
            }
            _ => Err(Error::WrongTarget {
                operation,
                target: self.target(),
                supported: &[Target::Cpu, Target::Sim],
            }),
        }
    }

    /// The unfused baseline of this program: its optimized graph scheduled one kernel
    /// per primitive op, compiled for the same target with the same options (no dump).
    /// Unlike compiling again with [`Options::fuse`]`(false)`, the optimizer is not
    /// rerun, so both programs compute the same graph nodes and their kernels can be
    /// compared one to one, as `ferrite profile` does. Its stage times are its own
    /// schedule and code generation; [`Target::Interp`] has no schedule: an
    /// [`Error::WrongTarget`].
    pub fn unfused(&self) -> Result<Compiled> {
        let start = Instant::now();
        let Backend::Lowered(pipeline, _) = &self.backend else {
            return Err(Error::WrongTarget {
                operation: "the unfused baseline",
                target: self.target(),
                supported: &[Target::Cpu, Target::Sim, Target::Loops],
            });
        };
        let options = Options {
            fuse: false,
            dump: None,
            ..self.options.clone()
        };
        let unfused = ScheduleOptions {
            threads: self.options.pass_threads(),
            ..ScheduleOptions::unfused()
        };
        let scheduled = schedule(&pipeline.optimized, &unfused).map_err(|e| Error::Compile {
            message: format!("schedule: {e}"),
            internal: e.is_internal(),
        })?;
        let mut stages = vec![("schedule", start.elapsed())];
        let (code, record, tunings) = generate(&scheduled.program, &options)?;
        stages.extend(record.map(|r| (r.name, r.time)));
        let pipeline = Pipeline {
            decomposed: pipeline.decomposed.clone(),
            optimized: pipeline.optimized.clone(),
            optimize_report: pipeline.optimize_report.clone(),
            scheduled,
        };
        let backend = Backend::Lowered(Box::new(pipeline), code);
        Ok(Compiled {
            graph: self.graph.clone(),
            input_names: self.input_names.clone(),
            options,
            run_bytes: run_bytes(&self.graph, &backend),
            backend,
            stages,
            compile_time: start.elapsed(),
            dump_files: Vec::new(),
            tunings,
            loop_rows: None,
        })
    }

    /// The memory one run needs, estimated from the program before it runs: the
    /// copies of the inputs, the outputs and the target's working memory (see
    /// [`crate::memory`] for what each target's estimate counts). The caller's own
    /// input tensors are not counted.
    pub fn run_memory_bytes(&self) -> u64 {
        self.run_bytes
    }

    /// Refuses a run whose [`Compiled::run_memory_bytes`] is over the memory budget
    /// ([`Options::memory_limit`]) with an [`Error::MemoryBudget`]; the run methods
    /// call it before allocating anything.
    pub fn check_memory(&self) -> Result<()> {
        let limit = self.options.memory_budget();
        if self.run_bytes > limit {
            return Err(Error::MemoryBudget {
                what: format!("running graph `{}` on {}", self.graph.name, self.target()),
                needs: self.run_bytes,
                limit,
            });
        }
        Ok(())
    }

    /// The target it was compiled for.
    pub fn target(&self) -> Target {
        self.options.target
    }

    /// The options it was compiled with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The graph it was compiled from.
    pub fn graph(&self) -> &ferrite_ir::Graph {
        &self.graph
    }

    /// The input names (the graph's parameters), in the order [`Compiled::run`] takes
    /// them; [`Compiled::run_named`] takes them by these names.
    pub fn input_names(&self) -> &[String] {
        &self.input_names
    }

    /// The input types, in order.
    pub fn input_types(&self) -> Vec<TensorType> {
        self.graph.param_types()
    }

    /// The output types, in order.
    pub fn output_types(&self) -> Vec<TensorType> {
        self.graph
            .outputs
            .iter()
            .map(|&o| self.graph.ty(o).clone())
            .collect()
    }

    fn pipeline(&self) -> Option<&Pipeline> {
        match &self.backend {
            Backend::Interp => None,
            Backend::Lowered(p, _) => Some(p),
        }
    }

    /// The graph after `decompose`: primitive ops only (not for [`Target::Interp`],
    /// which runs no pipeline; likewise for the accessors below).
    pub fn decomposed_graph(&self) -> Option<&ferrite_ir::Graph> {
        self.pipeline().map(|p| &p.decomposed)
    }

    /// The graph after the e-graph optimizer (the decomposed graph when
    /// [`Options::optimize`] is off): the graph the kernels compute.
    pub fn optimized_graph(&self) -> Option<&ferrite_ir::Graph> {
        self.pipeline().map(|p| &p.optimized)
    }

    /// What the optimizer did: why it stopped, iterations, e-graph size, costs.
    pub fn optimize_report(&self) -> Option<&OptimizeReport> {
        self.pipeline().map(|p| &p.optimize_report)
    }

    /// The schedule: the loop-IR program, its memory plan (`memory.peak_bytes()` is
    /// the peak intermediate memory) and every fusion decision.
    pub fn schedule(&self) -> Option<&Scheduled> {
        self.pipeline().map(|p| &p.scheduled)
    }

    /// The scheduled loop-IR program.
    pub fn program(&self) -> Option<&Program> {
        self.schedule().map(|s| &s.program)
    }

    /// The outputs written in place of inputs ([`Options::donate`]): those of the
    /// offered pairs that the compiler found safe.
    pub fn donated(&self) -> &[ferrite_ir::loops::Donation] {
        self.program().map_or(&[], |p| &p.donated[..])
    }

    /// The number of kernels, when there is a program.
    pub fn kernel_count(&self) -> Option<usize> {
        self.program().map(|p| p.kernels.len())
    }

    /// The generated code as text: on [`Target::Cpu`] how each kernel was compiled
    /// and its loop IR, plus its Cranelift IR and machine code when compiled with a
    /// dump directory (only then are they kept); on [`Target::Sim`] the tile kernels
    /// with their launches and buffer placements. `None` for the targets without a
    /// code generator ([`Target::Interp`], [`Target::Loops`]).
    pub fn code_text(&self) -> Option<String> {
        match &self.backend {
            Backend::Interp => None,
            Backend::Lowered(_, code) => code.text(),
        }
    }

    /// How long each compiler stage took, in pipeline order (`decompose`,
    /// `optimize`, `schedule`, `memory plan`, then `cpu codegen` or `tile lowering`).
    pub fn stage_times(&self) -> &[(&'static str, Duration)] {
        &self.stages
    }

    /// How long `compile` took in all.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// The files written to [`Options::dump`], in order (empty without one):
    /// `00-parsed.fg`, the graph as given in canonical text (it parses back to the
    /// same graph), then one numbered file per stage (`01-decomposed.fg`,
    /// `02-optimized.fg` with the optimizer's report, `03-kernels.loop` with every
    /// fusion decision, `04-memory.txt`, and `05-kernels.tile` from the code generator,
    /// or on the CPU `05-cpu-plan.loop` (the loop IR the CPU backend compiles, with its
    /// schedule) and `06-cpu.clif`), and `graph.dot`, the optimized graph with one cluster per
    /// kernel (render with `dot -Tsvg`).
    pub fn dump_files(&self) -> &[PathBuf] {
        &self.dump_files
    }

    /// Writes the dump that [`Compiled::dump_files`] describes; `stages` are the
    /// pipeline's records, with their texts.
    fn write_dump(&self, dir: &Path, stages: Vec<StageRecord>) -> Result<Vec<PathBuf>> {
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).map_err(|e| io_error(&path, e))?;
            Ok(path)
        };
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let source = std::iter::once(("parsed.fg", print(&self.graph)));
        let mut files: Vec<_> = source
            .chain(stages.into_iter().map(|s| (s.file, s.text)))
            .collect();
        if let Backend::Lowered(_, Code::Cpu(p)) = &self.backend {
            // The CPU plan comes before the code generated from it.
            files.insert(files.len() - 1, ("cpu-plan.loop", p.plan().to_string()));
        }
        let mut written = files
            .into_iter()
            .enumerate()
            .map(|(i, (file, text))| write(dir.join(format!("{i:02}-{file}")), &text))
            .collect::<Result<Vec<_>>>()?;
        if let Some(p) = self.pipeline() {
            let dot = graph_dot(&p.optimized, &p.scheduled.program);
            written.push(write(dir.join("graph.dot"), &dot)?);
        }
        Ok(written)
    }
}

/// An I/O failure on `path`.
fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The name of each parameter of `g`: its name in the graph, or `%i` for an unnamed
/// parameter of a hand-built graph.
fn param_names(g: &ferrite_ir::Graph) -> Vec<String> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| g.node(p).name.clone().unwrap_or_else(|| format!("%{i}")))
        .collect()
}

/// Inputs borrowed in place for the CPU backend.
struct Borrowed<'a, A>(&'a [A]);

impl<A: Borrow<Tensor>> InputTensors for Borrowed<'_, A> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn tensor(&self, i: usize) -> &ferrite_ir::Tensor {
        self.0[i].borrow().as_ir()
    }
}

/// Caller-owned outputs written in place by the CPU backend (which keeps their types).
struct BorrowedMut<'a>(&'a mut [Tensor]);

impl OutputTensors for BorrowedMut<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn tensor(&self, i: usize) -> &ferrite_ir::Tensor {
        self.0[i].as_ir()
    }
    fn tensor_mut(&mut self, i: usize) -> &mut ferrite_ir::Tensor {
        self.0[i].as_ir_mut()
    }
}

/// Checks `inputs` against the graph's parameters and copies them for the backends.
pub(crate) fn check_inputs<A: Borrow<Tensor>>(
    g: &ferrite_ir::Graph,
    inputs: &[A],
) -> Result<Vec<ferrite_ir::Tensor>> {
    check_types(g, inputs.iter().map(|t| t.borrow().ty()))?;
    Ok(inputs.iter().map(|t| t.borrow().as_ir().clone()).collect())
}

/// Checks the dtype and shape of each input against the graph's parameters.
fn check_types<'a>(
    g: &ferrite_ir::Graph,
    inputs: impl ExactSizeIterator<Item = &'a TensorType>,
) -> Result<()> {
    if inputs.len() != g.params.len() {
        return Err(Error::InputCount {
            expected: g.params.len(),
            got: inputs.len(),
        });
    }
    for (index, (&p, ty)) in g.params.iter().zip(inputs).enumerate() {
        let want = g.ty(p);
        let name = || {
            g.node(p)
                .name
                .clone()
                .unwrap_or_else(|| format!("%{index}"))
        };
        if ty.dtype != want.dtype {
            return Err(Error::InputDType {
                index,
                name: name(),
                expected: want.dtype,
                got: ty.dtype,
            });
        }
        if ty.shape != want.shape {
            return Err(Error::InputShape {
                index,
                name: name(),
                expected: want.shape.clone(),
                got: ty.shape.clone(),
            });
        }
    }
    Ok(())
}

/// A row program's tensor at a row count ([1, B*T, 256]) as the caller's type
/// ([B, T, 256]), or the other way: the same elements under another shape.
fn retyped(mut t: ferrite_ir::Tensor, ty: &TensorType) -> Result<ferrite_ir::Tensor> {
    if t.ty.dtype != ty.dtype || t.data.len() != ty.numel() {
        return Err(Error::Internal {
            message: format!("{} does not hold a {ty}", t.ty),
        });
    }
    t.ty = ty.clone();
    Ok(t)
}

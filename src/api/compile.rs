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
use super::host::Array;
use ferrite_accel::program::SimProgram;
use ferrite_accel::sim::{DeviceReport, Machine};
use ferrite_cpu::{CpuOptions, CpuProgram};
use ferrite_ir::loops::Program;
use ferrite_ir::{interpret, print, verify, DType, Tensor, TensorType};
use ferrite_passes::dot::graph_dot;
use ferrite_passes::optimize::OptimizeReport;
use ferrite_passes::pipeline::{lower_graph, PipelineOptions, StageRecord};
use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_profile::{profile_cpu, profile_sim, ScheduleProfile};
use std::borrow::Borrow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Where a compiled program runs.
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
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Target, String> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown target `{s}` (expected cpu, sim, interp or loops)"))
    }
}

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
    /// CPU threads; `None` (default) is one per core.
    pub threads: Option<usize>,
    /// Write every stage's text here (created if missing), numbered in pipeline order;
    /// see [`Compiled::dump_files`] for the layout.
    pub dump: Option<PathBuf>,
    /// The machine [`Target::Sim`] simulates; `None` (default) is the built-in
    /// MTIA-2i-like preset, [`Machine::mtia2i`].
    pub machine: Option<Machine>,
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
        }
    }
}

impl Options {
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

    /// Sets the number of CPU threads (0 counts as 1).
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

    fn pipeline(&self) -> PipelineOptions {
        let mut p = PipelineOptions::default();
        p.optimize.enabled = self.optimize;
        p.schedule.fuse = self.fuse;
        p
    }
}

/// Compiles a built graph (its first build error, if any, is returned here).
///
/// ```
/// use ferrite::{Array, Options, Target};
/// let g = ferrite::Graph::new("affine");
/// let x = g.input("x", ferrite::f32(&[2]));
/// g.output(&(x * 3.0 - 1.0));
/// let exe = ferrite::compile(&g, &Options::default().target(Target::Interp))?;
/// let out = exe.run(&[&Array::from_vec(&[2], vec![1.0f32, 2.0])?])?;
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
    verify(graph).map_err(|message| Error::InvalidGraph { message })?;
    let (backend, records) = match options.target {
        Target::Interp => (Backend::Interp, Vec::new()),
        Target::Loops | Target::Cpu | Target::Sim => {
            let lowered = lower_graph(graph, &options.pipeline())
                .map_err(|message| Error::Compile { message })?;
            let mut records = lowered.stages;
            let (code, record) = generate(&lowered.scheduled.program, options)?;
            records.extend(record);
            let pipeline = Pipeline {
                decomposed: lowered.decomposed,
                optimized: lowered.optimized,
                optimize_report: lowered.optimize_report,
                scheduled: lowered.scheduled,
            };
            (Backend::Lowered(Box::new(pipeline), code), records)
        }
    };
    let mut compiled = Compiled {
        graph: graph.clone(),
        options: options.clone(),
        backend,
        stages: records.iter().map(|s| (s.name, s.time)).collect(),
        compile_time: Duration::ZERO,
        dump_files: Vec::new(),
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
fn generate(program: &Program, options: &Options) -> Result<(Code, Option<StageRecord>)> {
    let start = Instant::now();
    let failed = |stage: &str, e: String| Error::Compile {
        message: format!("{stage}: {e}"),
    };
    let (code, name, file) = match options.target {
        // The loop-IR evaluator runs the program itself. (The interpreter never gets
        // here: it runs the graph as given, with no pipeline.)
        Target::Interp | Target::Loops => return Ok((Code::Loops, None)),
        Target::Cpu => {
            let mut cpu_options = CpuOptions::default();
            if let Some(threads) = options.threads {
                cpu_options.threads = threads;
            }
            cpu_options.capture_dumps = options.dump.is_some();
            let cpu = CpuProgram::compile(program, &cpu_options)
                .map_err(|e| failed("cpu codegen", e.to_string()))?;
            (Code::Cpu(Box::new(cpu)), "cpu codegen", "cpu.clif")
        }
        Target::Sim => {
            let machine = options.machine.clone().unwrap_or_else(Machine::mtia2i);
            let sim =
                SimProgram::compile(program, &machine).map_err(|e| failed("tile lowering", e))?;
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
    Ok((code, Some(record)))
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

/// A compiled program: run it on host [`Array`]s, as often as needed, from any number
/// of threads at once (`Compiled` is `Send + Sync`).
///
/// It also answers what the compiler did: the stage times, the graphs and the
/// optimizer report of the pipeline, the schedule (kernels and memory plan), and the
/// generated code as text.
#[derive(Debug)]
pub struct Compiled {
    graph: ferrite_ir::Graph,
    /// The options it was compiled with, for [`Compiled::unfused`].
    options: Options,
    backend: Backend,
    stages: Vec<(&'static str, Duration)>,
    compile_time: Duration,
    dump_files: Vec<PathBuf>,
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
    /// The outputs, one per graph output, in order.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// The outputs, by value.
    pub fn into_outputs(self) -> Vec<Tensor> {
        self.outputs
    }

    /// Wall-clock time of the run itself (inputs already checked, outputs not converted).
    pub fn time(&self) -> Duration {
        self.time
    }

    /// The simulator's report (cycles, time and bytes per kernel launch), on
    /// [`Target::Sim`] only.
    pub fn device_report(&self) -> Option<&DeviceReport> {
        self.device_report.as_ref()
    }
}

impl Compiled {
    /// Runs the program: one input per graph input, in declaration order (as `&Array`s
    /// or `Array`s); returns one `Array` per output. A wrong input count, dtype or shape
    /// is an [`Error::InputCount`], [`Error::InputDType`] or [`Error::InputShape`].
    ///
    /// Inputs are copied once into the runtime's own tensors.
    pub fn run<A: Borrow<Array>>(&self, inputs: &[A]) -> Result<Vec<Array>> {
        let tensors = check_inputs(&self.graph, inputs)?;
        self.execute_checked(&tensors)?
            .outputs
            .into_iter()
            .map(|t| {
                Array::try_from(t).map_err(|e| Error::Run {
                    message: format!(
                        "internal error: the backend returned a malformed tensor: {e}"
                    ),
                })
            })
            .collect()
    }

    /// Runs the program on IR tensors, without copying them, and reports the run
    /// ([`Execution`]): what `ferrite run` does. Inputs are checked as by
    /// [`Compiled::run`].
    pub fn execute(&self, inputs: &[Tensor]) -> Result<Execution> {
        check_types(
            &self.graph,
            inputs.iter().map(|t| (t.ty.dtype, &t.ty.shape[..])),
        )?;
        self.execute_checked(inputs)
    }

    /// Runs the backend on inputs that match the parameters.
    fn execute_checked(&self, inputs: &[Tensor]) -> Result<Execution> {
        let start = Instant::now();
        let (outputs, device_report) = match &self.backend {
            Backend::Interp => interpret(&self.graph, inputs).map(|o| (o, None)),
            Backend::Lowered(pipeline, code) => match code {
                Code::Loops => ferrite_ir::loops::evaluate(&pipeline.scheduled.program, inputs)
                    .map(|o| (o, None)),
                Code::Cpu(p) => p.run(inputs).map(|o| (o, None)).map_err(|e| e.to_string()),
                Code::Sim(p) => p.run(inputs).map(|(o, report)| (o, Some(report))),
            },
        }
        .map_err(|message| Error::Run { message })?;
        Ok(Execution {
            outputs,
            time: start.elapsed(),
            device_report,
        })
    }

    /// Profiles the program kernel by kernel on IR inputs (checked as by
    /// [`Compiled::run`]): on [`Target::Cpu`] one warm-up run and then `runs` timed
    /// runs, each kernel's time being its median, with `progress` called after each
    /// timed run; on [`Target::Sim`] one simulated run (cycles are deterministic).
    /// Other targets have no kernels to measure: an [`Error::Run`].
    pub fn profile(
        &self,
        inputs: &[Tensor],
        runs: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<ScheduleProfile> {
        check_types(
            &self.graph,
            inputs.iter().map(|t| (t.ty.dtype, &t.ty.shape[..])),
        )?;
        let Backend::Lowered(pipeline, code) = &self.backend else {
            return Err(self.not_profilable());
        };
        let fused = self.options.fuse;
        let peak = pipeline.scheduled.memory.peak_bytes() as u64;
        let graph = &pipeline.optimized;
        match code {
            Code::Cpu(p) => profile_cpu(p, graph, inputs, runs, fused, peak, progress),
            Code::Sim(p) => profile_sim(p, &pipeline.scheduled.program, graph, inputs, fused, peak),
            Code::Loops => return Err(self.not_profilable()),
        }
        .map_err(|message| Error::Run { message })
    }

    fn not_profilable(&self) -> Error {
        Error::Run {
            message: format!(
                "profiling needs the cpu or sim target; this program is compiled for {}",
                self.target()
            ),
        }
    }

    /// The unfused baseline of this program: its optimized graph scheduled one kernel
    /// per primitive op, compiled for the same target with the same options (no dump).
    /// Unlike compiling again with [`Options::fuse`]`(false)`, the optimizer is not
    /// rerun, so both programs compute the same graph nodes and their kernels can be
    /// compared one to one, as `ferrite profile` does. Its stage times are its own
    /// schedule and code generation; [`Target::Interp`] has no schedule: an
    /// [`Error::Compile`].
    pub fn unfused(&self) -> Result<Compiled> {
        let start = Instant::now();
        let Backend::Lowered(pipeline, _) = &self.backend else {
            return Err(Error::Compile {
                message: "the interpreter target has no schedule to unfuse".into(),
            });
        };
        let options = Options {
            fuse: false,
            dump: None,
            ..self.options.clone()
        };
        let scheduled =
            schedule(&pipeline.optimized, &ScheduleOptions::unfused()).map_err(|e| {
                Error::Compile {
                    message: format!("schedule: {e}"),
                }
            })?;
        let mut stages = vec![("schedule", start.elapsed())];
        let (code, record) = generate(&scheduled.program, &options)?;
        stages.extend(record.map(|r| (r.name, r.time)));
        let pipeline = Pipeline {
            decomposed: pipeline.decomposed.clone(),
            optimized: pipeline.optimized.clone(),
            optimize_report: pipeline.optimize_report.clone(),
            scheduled,
        };
        Ok(Compiled {
            graph: self.graph.clone(),
            options,
            backend: Backend::Lowered(Box::new(pipeline), code),
            stages,
            compile_time: start.elapsed(),
            dump_files: Vec::new(),
        })
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

/// Checks `inputs` against the graph's parameters and copies them for the backends.
pub(crate) fn check_inputs<A: Borrow<Array>>(
    g: &ferrite_ir::Graph,
    inputs: &[A],
) -> Result<Vec<Tensor>> {
    let inputs: Vec<&Array> = inputs.iter().map(Borrow::borrow).collect();
    check_types(g, inputs.iter().map(|a| (a.dtype(), a.shape())))?;
    Ok(inputs.into_iter().map(|a| a.as_ir().clone()).collect())
}

/// Checks the dtype and shape of each input against the graph's parameters.
fn check_types<'a>(
    g: &ferrite_ir::Graph,
    inputs: impl ExactSizeIterator<Item = (DType, &'a [usize])>,
) -> Result<()> {
    if inputs.len() != g.params.len() {
        return Err(Error::InputCount {
            expected: g.params.len(),
            got: inputs.len(),
        });
    }
    for (index, (&p, (dtype, shape))) in g.params.iter().zip(inputs).enumerate() {
        let want = g.ty(p);
        let name = || {
            g.node(p)
                .name
                .clone()
                .unwrap_or_else(|| format!("%{index}"))
        };
        if dtype != want.dtype {
            return Err(Error::InputDType {
                index,
                name: name(),
                expected: want.dtype,
                got: dtype,
            });
        }
        if shape != want.shape.as_slice() {
            return Err(Error::InputShape {
                index,
                name: name(),
                expected: want.shape.clone(),
                got: shape.to_vec(),
            });
        }
    }
    Ok(())
}

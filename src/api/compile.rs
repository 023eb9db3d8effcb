//! `compile`: a graph to a [`Compiled`] program for a [`Target`], with [`Options`].
//!
//! The pipeline is `ferrite_passes::pipeline::lower_graph` (decompose, e-graph
//! optimize, fuse + schedule into loop IR, memory plan) followed by the target's code
//! generator. The stage texts can be written to a dump directory, as `ferrite compile
//! --dump` does.

use super::builder::Graph;
use super::error::{Error, Result};
use super::host::Array;
use ferrite_ir::loops::Program;
use ferrite_ir::{interpret, print, verify, TensorType};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions, StageRecord};
use ferrite_runtime::accel::program::SimProgram;
use ferrite_runtime::accel::sim::Machine;
use ferrite_runtime::cpu::{CpuOptions, CpuProgram};
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

/// How to compile: target, fusion, optimizer, threads, dump directory.
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
    /// Write every stage's text here (created if missing), numbered in pipeline order.
    pub dump: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            target: Target::Cpu,
            fuse: true,
            optimize: true,
            threads: None,
            dump: None,
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
pub fn compile_ir(graph: &ferrite_ir::Graph, options: &Options) -> Result<Compiled> {
    let start = Instant::now();
    verify(graph).map_err(|message| Error::InvalidGraph { message })?;
    let mut dump = vec![StageRecord {
        name: "graph",
        time: Duration::ZERO,
        file: "graph.fg",
        text: print(graph),
    }];
    let (backend, stages) = match options.target {
        Target::Interp => (Backend::Interp, Vec::new()),
        Target::Loops | Target::Cpu | Target::Sim => {
            let lowered = lower_graph(graph, &options.pipeline())
                .map_err(|message| Error::Compile { message })?;
            dump.extend(lowered.stages.iter().cloned());
            let program = lowered.scheduled.program;
            let backend = if options.target == Target::Loops {
                Backend::Loops(Box::new(program))
            } else if options.target == Target::Sim {
                let lowering = Instant::now();
                let sim = SimProgram::compile(&program, &Machine::mtia2i()).map_err(|e| {
                    Error::Compile {
                        message: format!("lowering to tile kernels: {e}"),
                    }
                })?;
                dump.push(StageRecord {
                    name: "tile lowering",
                    time: lowering.elapsed(),
                    file: "kernels.tile",
                    text: sim.kernels_text(),
                });
                Backend::Sim(Box::new(program), Box::new(sim))
            } else {
                let cpu_options = CpuOptions {
                    threads: options.threads.unwrap_or(CpuOptions::default().threads),
                    capture_dumps: options.dump.is_some(),
                    ..CpuOptions::default()
                };
                let codegen = Instant::now();
                let cpu =
                    CpuProgram::compile(&program, &cpu_options).map_err(|e| Error::Compile {
                        message: format!("cpu codegen: {e}"),
                    })?;
                let time = codegen.elapsed();
                let text = match options.dump {
                    Some(_) => format!("{}\n{}", cpu.report(), cpu.dump()),
                    None => String::new(),
                };
                dump.push(StageRecord {
                    name: "cpu codegen",
                    time,
                    file: "cpu.txt",
                    text,
                });
                Backend::Cpu(Box::new(cpu))
            };
            let stages = dump[1..].iter().map(|s| (s.name, s.time)).collect();
            (backend, stages)
        }
    };
    if let Some(dir) = &options.dump {
        write_dump(dir, &dump)?;
    }
    Ok(Compiled {
        graph: graph.clone(),
        target: options.target,
        backend,
        stages,
        compile_time: start.elapsed(),
    })
}

/// Writes each stage to `DIR/NN-<file>`, as `ferrite compile --dump` does.
fn write_dump(dir: &Path, stages: &[StageRecord]) -> Result<()> {
    let io = |path: &Path, e: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for (i, s) in stages.iter().enumerate() {
        let path = dir.join(format!("{i:02}-{}", s.file));
        std::fs::write(&path, &s.text).map_err(|e| io(&path, e))?;
    }
    Ok(())
}

/// What runs a compiled program.
#[derive(Debug)]
enum Backend {
    Interp,
    Loops(Box<Program>),
    Cpu(Box<CpuProgram>),
    /// The loop-IR program (for `Compiled::program`) and its tile kernels.
    Sim(Box<Program>, Box<SimProgram>),
}

/// A compiled program: run it on host [`Array`]s, as often as needed, from any number
/// of threads at once (`Compiled` is `Send + Sync`).
#[derive(Debug)]
pub struct Compiled {
    graph: ferrite_ir::Graph,
    target: Target,
    backend: Backend,
    stages: Vec<(&'static str, Duration)>,
    compile_time: Duration,
}

impl Compiled {
    /// Runs the program: one input per graph input, in declaration order (as `&Array`s
    /// or `Array`s); returns one `Array` per output. A wrong input count, dtype or shape
    /// is an [`Error::InputCount`], [`Error::InputDType`] or [`Error::InputShape`].
    ///
    /// Inputs are copied once into the runtime's own tensors.
    pub fn run<A: Borrow<Array>>(&self, inputs: &[A]) -> Result<Vec<Array>> {
        let tensors = check_inputs(&self.graph, inputs)?;
        let outputs = match &self.backend {
            Backend::Interp => interpret(&self.graph, &tensors),
            Backend::Loops(p) => ferrite_ir::loops::evaluate(p, &tensors),
            Backend::Cpu(p) => p.run(&tensors),
            // The simulator's timing report is not part of a run's result.
            Backend::Sim(_, p) => p.run(&tensors).map(|(outputs, _report)| outputs),
        }
        .map_err(|message| Error::Run { message })?;
        outputs
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

    /// The target it was compiled for.
    pub fn target(&self) -> Target {
        self.target
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

    /// The scheduled loop-IR program (not for [`Target::Interp`], which has none).
    pub fn program(&self) -> Option<&Program> {
        match &self.backend {
            Backend::Interp => None,
            Backend::Loops(p) => Some(p),
            Backend::Cpu(p) => Some(p.program()),
            Backend::Sim(p, _) => Some(p),
        }
    }

    /// The number of kernels, when there is a program.
    pub fn kernel_count(&self) -> Option<usize> {
        self.program().map(|p| p.kernels.len())
    }

    /// How long each compiler stage took, in pipeline order.
    pub fn stage_times(&self) -> &[(&'static str, Duration)] {
        &self.stages
    }

    /// How long `compile` took in all.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }
}

/// Checks `inputs` against the graph's parameters and copies them for the backends.
pub(crate) fn check_inputs<A: Borrow<Array>>(
    g: &ferrite_ir::Graph,
    inputs: &[A],
) -> Result<Vec<ferrite_ir::Tensor>> {
    if inputs.len() != g.params.len() {
        return Err(Error::InputCount {
            expected: g.params.len(),
            got: inputs.len(),
        });
    }
    let mut out = Vec::with_capacity(inputs.len());
    for (index, (&p, a)) in g.params.iter().zip(inputs).enumerate() {
        let a = a.borrow();
        let want = g.ty(p);
        let name = || {
            g.node(p)
                .name
                .clone()
                .unwrap_or_else(|| format!("%{index}"))
        };
        if a.dtype() != want.dtype {
            return Err(Error::InputDType {
                index,
                name: name(),
                expected: want.dtype,
                got: a.dtype(),
            });
        }
        if a.shape() != want.shape.as_slice() {
            return Err(Error::InputShape {
                index,
                name: name(),
                expected: want.shape.clone(),
                got: a.shape().to_vec(),
            });
        }
        out.push(a.as_ir().clone());
    }
    Ok(out)
}

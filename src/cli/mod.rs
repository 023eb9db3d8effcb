//! The `ferrite` command line: flag definitions, the error type that decides the
//! exit code, and helpers the commands share. Each command lives in its own file.

pub mod check;
pub mod compile;
pub mod convert;
pub mod fmt;
pub mod grad;
pub mod inputs;
pub mod profile;
pub mod run;
pub mod sim;
pub mod summary;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use ferrite::ir::Graph;
use ferrite::sim::Machine;
use ferrite::{Compiled, Options, Target, Tensor};
use std::io;
use std::path::{Path, PathBuf};

/// `ferrite`: a compiler for tensor programs.
#[derive(Parser, Debug)]
#[command(name = "ferrite", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 ok, 1 user error (the message says what to fix), 2 internal error."
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Parse and verify a graph file; errors are reported as file:line:col.
    Check(check::CheckArgs),
    /// Print a graph file in canonical form.
    Fmt(fmt::FmtArgs),
    /// Compile a graph: decompose, optimize, fuse; print a summary, dump each stage with --dump.
    Compile(compile::CompileArgs),
    /// Run a hand-written tile kernel on the accelerator simulator and print its report.
    Sim(sim::SimArgs),
    /// Run a graph on inputs from .npy files or random ones and summarize the outputs.
    Run(run::RunArgs),
    /// Profile the fused and the unfused schedule kernel by kernel; Chrome trace with --trace.
    Profile(profile::ProfileArgs),
    /// Convert an ONNX model to a .fg graph with its weights in a safetensors file beside it.
    Convert(convert::ConvertArgs),
    /// Differentiate a graph: print its joint forward + backward graph (reverse-mode autodiff).
    Grad(grad::GradArgs),
}

/// The parser of a command's `--target` flag: it accepts the `targets` that make
/// sense for the command, lists them in `--help` with what each is, and refuses any
/// other name as a usage error (exit code 1).
pub fn target_parser(targets: &'static [Target]) -> impl TypedValueParser<Value = Target> {
    PossibleValuesParser::new(
        targets
            .iter()
            .map(|t| PossibleValue::new(t.name()).help(t.about())),
    )
    .try_map(|name| name.parse::<Target>())
}

/// Why a command failed; the variant decides the exit code.
#[derive(Debug)]
pub enum CliError {
    /// Something the user can fix (a file, a flag, the graph): exit code 1, printed
    /// as `error: <message>`.
    User(String),
    /// A parse or type error already rendered as `file:line:col: error: ...` with
    /// the offending line: exit code 1, printed as is.
    Rendered(String),
    /// A bug in Ferrite: exit code 2.
    Internal(String),
    /// A library error, with what the command was doing (`running graph `g` failed`):
    /// its variant decides ([`ferrite::Error::is_internal`]), exit code 2 for a bug
    /// and 1 for anything else.
    Library {
        /// What failed, in the command's words; `None` when the error says it all.
        context: Option<String>,
        /// The library's error.
        error: ferrite::Error,
    },
    /// Standard output was closed early (`ferrite fmt x.fg | head`): not an error
    /// worth reporting, exit code 0.
    StdoutClosed,
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::StdoutClosed => 0,
            CliError::User(_) | CliError::Rendered(_) => 1,
            CliError::Internal(_) => 2,
            CliError::Library { error, .. } => match error.is_internal() {
                true => 2,
                false => 1,
            },
        }
    }

    /// A library error with what the command was doing.
    pub fn library(context: impl Into<String>, error: ferrite::Error) -> CliError {
        CliError::Library {
            context: Some(context.into()),
            error,
        }
    }

    /// Writes the message for the user to `err` (standard error), with any word longer
    /// than [`LONG_WORD`] chars abbreviated.
    pub fn report(&self, err: &mut dyn io::Write) {
        // A failure to write to stderr leaves nothing better to do than exit.
        let _ = match self {
            CliError::User(m) => writeln!(err, "error: {}", short(m)),
            CliError::Rendered(m) => writeln!(err, "{}", short(m.trim_end())),
            CliError::Internal(m) => writeln!(err, "internal error: {}\n{BUG}", short(m)),
            CliError::Library { context, error } => {
                let detail = library_detail(error);
                let m = short(&match context {
                    Some(c) => format!("{c}: {detail}"),
                    None => detail,
                });
                match error.is_internal() {
                    true => writeln!(err, "internal error: {m}\n{BUG}"),
                    false => writeln!(err, "error: {m}"),
                }
            }
            CliError::StdoutClosed => Ok(()),
        };
    }
}

/// Words (names, paths) longer than this many chars are abbreviated in what the CLI prints
/// about a graph: far above any real path or name, far below a hostile one of megabytes.
pub const LONG_WORD: usize = 1024;

/// `text` with every word over [`LONG_WORD`] chars abbreviated.
pub fn short(text: &str) -> String {
    ferrite::ir::text::abbreviate_words(text, LONG_WORD)
}

/// The line after an internal error's message.
const BUG: &str = "This is a bug in Ferrite; please report it with the input that caused it.";

/// A library error's message without the prefixes the commands say in their own
/// words (`execution failed: `, `compilation failed: `, `internal error: `).
fn library_detail(e: &ferrite::Error) -> String {
    match e {
        ferrite::Error::Run { message }
        | ferrite::Error::Compile { message, .. }
        | ferrite::Error::Internal { message } => message.clone(),
        e => e.to_string(),
    }
}

impl From<ferrite::Error> for CliError {
    /// A library error that says it all.
    fn from(error: ferrite::Error) -> CliError {
        CliError::Library {
            context: None,
            error,
        }
    }
}

impl From<io::Error> for CliError {
    /// Only writes to standard output are converted implicitly; file errors are
    /// wrapped with their path by [`read_file`] and the commands.
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::StdoutClosed
        } else {
            CliError::User(format!("cannot write to standard output: {e}"))
        }
    }
}

/// The result of a command.
pub type CliResult = Result<(), CliError>;

/// The flag that bounds the text files a command reads (graphs, kernels, presets).
#[derive(Args, Debug, Clone)]
pub struct TextLimit {
    /// The largest text file read (graph, kernel): bytes, or with a unit (K, M, G: KiB,
    /// MiB, GiB); larger files are refused before they are read.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "16M")]
    pub max_text_size: u64,
}

/// The flag that sets the memory budget of a command that runs something.
#[derive(Args, Debug, Clone)]
pub struct MemoryLimit {
    /// The memory budget: inputs, outputs and the target's working memory (the
    /// interpreter's f64 copies, the CPU's storage, the simulator's device memory),
    /// checked before anything is allocated. Bytes, or with a unit (K, M, G, T);
    /// default: half the physical memory, at most 16G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
}

impl MemoryLimit {
    /// The budget in bytes.
    pub fn bytes(&self) -> u64 {
        self.memory_limit
            .unwrap_or_else(ferrite::memory::default_memory_limit)
    }
}

/// Parses a size: `4096`, `512K`, `16M`, `2G`, `1T` (binary units; `KiB`, `MB` and a
/// trailing `B` are accepted too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a size like 4096, 512M or 16G");
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// A library error of reading a file the user named, worded for the command line.
fn read_error(e: ferrite::Error) -> CliError {
    match e {
        ferrite::Error::Io { path, message } => {
            CliError::User(format!("cannot read `{}`: {message}", path.display()))
        }
        e => e.into(),
    }
}

/// Reads a text file the user named (at most `limit` bytes), with an error that says
/// which one.
pub fn read_file(path: &Path, limit: &TextLimit) -> Result<Vec<u8>, CliError> {
    ferrite::files::read_bounded(path, limit.max_text_size, "--max-text-size").map_err(read_error)
}

/// Reads a `.npy` file the user named within `budget` bytes, header first.
pub fn read_npy(
    path: &Path,
    budget: u64,
) -> Result<(ferrite::ir::npy::Header, ferrite::ir::Tensor), CliError> {
    ferrite::files::read_npy_with_header(path, budget)
        .map(|(h, t)| (h, t.into_ir()))
        .map_err(read_error)
}

/// Reads and parses a `.fg` file that may have size symbols; a concrete graph is
/// verified (a parsed graph that fails the verifier is a bug in the parser).
pub fn load_fg(
    path: &Path,
    limit: &TextLimit,
) -> Result<(ferrite::ir::text::Parsed, Vec<u8>), CliError> {
    let bytes = read_file(path, limit)?;
    let parsed = ferrite::api::weights::parse_file_any(path, &bytes).map_err(|e| match e {
        ferrite::Error::Parse { message } => CliError::Rendered(message),
        e => e.into(),
    })?;
    if let ferrite::ir::text::Parsed::Graph(graph) = &parsed {
        let name = path.display().to_string();
        ferrite::verify(graph).map_err(|e| {
            CliError::Internal(format!(
                "`{name}` parsed into a graph the verifier rejects: {e}"
            ))
        })?;
    }
    Ok((parsed, bytes))
}

/// The flag of commands that take `.onnx` models or symbolic `.fg` graphs: values for
/// symbolic dimensions.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DimArgs {
    /// The value of a symbolic dimension of an ONNX model or a size symbol of a `.fg`
    /// graph (repeatable): --dim batch=1. A `.fg` graph's symbols are also bound by the
    /// shapes of the --input files.
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    pub dims: Vec<(String, usize)>,
}

/// Parses `NAME=N` for `--dim`.
pub fn parse_dim(s: &str) -> Result<(String, usize), String> {
    match s.split_once('=') {
        Some((name, n)) if !name.is_empty() => n
            .parse::<usize>()
            .map(|n| (name.to_string(), n))
            .map_err(|_| format!("expected NAME=N with N a count, got `{s}`")),
        _ => Err(format!("expected NAME=N, got `{s}`")),
    }
}

/// What a command loaded: the graph, and for an ONNX model its names.
pub struct Loaded {
    /// The graph, verified.
    pub graph: Graph,
    /// The ONNX model's inputs and outputs under both names; `None` for `.fg`.
    pub onnx: Option<ferrite::onnx::Model>,
    /// ONNX inputs whose `--input` value was needed at import time (a shape) and so
    /// became a constant of the graph.
    pub bound: Vec<String>,
    /// For a `.fg` graph with size symbols: the graph as written and the binding
    /// that `graph` is its instance at.
    pub symbolic: Option<(ferrite::ir::sym::SymGraph, ferrite::ir::sym::Binding)>,
}

impl Loaded {
    /// `, specialized at B=2, T=7 from f32[B, T, 256]`-style words for summaries, or "".
    pub fn specialization(&self) -> String {
        match &self.symbolic {
            None => String::new(),
            Some((g, b)) => {
                let params: Vec<String> = g
                    .params()
                    .iter()
                    .map(|(n, t)| format!("{n}: {t}"))
                    .collect();
                // What `compile_dynamic` would do with it, over many bindings.
                let path = match g.rows() {
                    Ok(form) => format!(
                        "as a row graph over {} (up to {} rows), `compile_dynamic` runs every \
                         binding on one cpu program",
                        form.name(),
                        form.max_rows
                    ),
                    Err(why) => match g.segments() {
                        Ok(seg) => format!(
                            "cut at its {} attentions into row graphs over {} (up to {} rows), \
                             `compile_dynamic` runs every binding on one set of cpu programs",
                            seg.steps
                                .iter()
                                .filter(|s| matches!(
                                    s,
                                    ferrite::ir::sym::Segment::Attention { .. }
                                ))
                                .count(),
                            seg.form.name(),
                            seg.form.max_rows
                        ),
                        Err(cut) => format!(
                            "each binding compiles on its own ({why}; cut at its attentions, {cut})"
                        ),
                    },
                };
                format!(
                    "symbolic graph ({}) specialized at {b}; {path}",
                    params.join(", ")
                )
            }
        }
    }
}

/// True for a path that names an ONNX model.
pub fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Loads a `.fg` graph or a `.onnx` model. For a model, `inputs` (the `--input`
/// files) supply the values of inputs that an op needs at import time.
pub fn load_any(
    path: &Path,
    limit: &TextLimit,
    dims: &DimArgs,
    inputs: &[(String, PathBuf)],
) -> Result<Loaded, CliError> {
    if !is_onnx(path) {
        let (parsed, _) = load_fg(path, limit)?;
        let (graph, symbolic) = match parsed {
            ferrite::ir::text::Parsed::Graph(graph) => {
                if let Some((name, _)) = dims.dims.first() {
                    return Err(CliError::User(format!(
                        "--dim {name}: `{}` has no size symbols",
                        path.display()
                    )));
                }
                (graph, None)
            }
            ferrite::ir::text::Parsed::Symbolic(g) => {
                let b = bind_symbols(&g, dims, inputs)?;
                let graph = g.instantiate(&b).map_err(|e| match e {
                    ferrite::ir::Error::Input(m) => CliError::User(m),
                    e if e.is_internal() => CliError::Internal(e.to_string()),
                    e => CliError::User(e.to_string()),
                })?;
                (graph, Some((g, b)))
            }
        };
        if symbolic.is_some() {
            let name = path.display().to_string();
            ferrite::verify(&graph).map_err(|e| {
                CliError::Internal(format!(
                    "`{name}` instantiated into a graph the verifier rejects: {e}"
                ))
            })?;
        }
        return Ok(Loaded {
            graph,
            onnx: None,
            bound: vec![],
            symbolic,
        });
    }
    let mut options = ferrite::onnx::Options {
        dims: dims.dims.iter().cloned().collect(),
        ..Default::default()
    };
    let mut bound = Vec::new();
    loop {
        match ferrite::onnx::load_with(path, &options) {
            Ok(model) => {
                return Ok(Loaded {
                    graph: model.graph.clone(),
                    onnx: Some(model),
                    bound,
                    symbolic: None,
                })
            }
            Err(ferrite::Error::Onnx { path: p, error }) => match *error {
                // A named dimension of an input whose --input file is given: its shape
                // binds the name, as `--dim` would (every binding imports on its own).
                ferrite::onnx::ImportError::SymbolicDim { input, axis, dim }
                    if !options.dims.contains_key(&dim)
                        && inputs.iter().any(|(n, _)| *n == input) =>
                {
                    let (_, file) = inputs
                        .iter()
                        .find(|(n, _)| *n == input)
                        .expect("found above");
                    let shape = input_shape(&input, file)?;
                    let Some(&n) = shape.get(axis) else {
                        return Err(CliError::User(format!(
                            "input `{input}`: `{}` has rank {}, but the model names axis {axis} `{dim}`",
                            file.display(),
                            shape.len()
                        )));
                    };
                    options.dims.insert(dim, n);
                }
                ferrite::onnx::ImportError::NeedsValue {
                    node,
                    operand,
                    input,
                } if !options.values.contains_key(&input) => {
                    let Some((_, file)) = inputs.iter().find(|(n, _)| *n == input) else {
                        return Err(CliError::User(format!(
                            "{}: {node}: operand `{operand}` must be known at import time; it is graph input `{input}`: give it with --input {input}=FILE",
                            path.display()
                        )));
                    };
                    let t = read_tensor_file(&input, file, u64::MAX)?;
                    options.values.insert(input.clone(), t.into_ir());
                    bound.push(input);
                }
                error => {
                    return Err(ferrite::Error::Onnx {
                        path: p,
                        error: Box::new(error),
                    }
                    .into())
                }
            },
            Err(ferrite::Error::Io { path, message }) => {
                return Err(CliError::User(format!(
                    "cannot read `{}`: {message}",
                    path.display()
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The binding of a symbolic graph's size symbols: `--dim` values, then the shapes of
/// the `--input` files (a `.npy` file's header only). Every symbol must be bound,
/// consistently, within its range and the graph's constraints.
fn bind_symbols(
    g: &ferrite::ir::sym::SymGraph,
    dims: &DimArgs,
    inputs: &[(String, PathBuf)],
) -> Result<ferrite::ir::sym::Binding, CliError> {
    let mut b = ferrite::ir::sym::Binding::new();
    for (name, n) in &dims.dims {
        if g.facts().symbol(name).is_none() {
            let known: Vec<String> = g
                .facts()
                .symbols
                .iter()
                .map(|s| s.name.to_string())
                .collect();
            return Err(CliError::User(format!(
                "--dim {name}: the graph has no size symbol `{name}` (its symbols: {})",
                known.join(", ")
            )));
        }
        let v = i64::try_from(*n)
            .map_err(|_| CliError::User(format!("--dim {name}={n}: too large")))?;
        b.set(name.as_str(), v);
    }
    let params = g.params();
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; params.len()];
    for (name, file) in inputs {
        if let Some(i) = params.iter().position(|(p, _)| p == name) {
            shapes[i] = Some(input_shape(name, file)?);
        }
    }
    // Parameters without an input file bind nothing; their declared extents must then
    // follow from the others (checked when the graph is instantiated).
    let given: Vec<(usize, &[usize])> = shapes
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_deref().map(|s| (i, s)))
        .collect();
    let bound = g
        .bind_some(&given, &b)
        .map_err(|e| CliError::User(e.to_string()))?;
    for s in &g.facts().symbols {
        if bound.get(&s.name).is_none() {
            return Err(CliError::User(format!(
                "size symbol `{}` is not bound: give --dim {}=N, or an --input whose shape has it{}",
                s.name,
                s.name,
                s.at.as_ref().map_or(String::new(), |a| format!(" ({a})"))
            )));
        }
    }
    Ok(bound)
}

/// The shape of an input file: a `.npy` file's header (its data is not read here),
/// or a `.pb` tensor's.
fn input_shape(name: &str, path: &Path) -> Result<Vec<usize>, CliError> {
    let is_pb = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pb"));
    if is_pb {
        return Ok(read_tensor_file(name, path, u64::MAX)?.shape().to_vec());
    }
    let bad = |e: String| CliError::User(format!("input `{name}`: `{}`: {e}", path.display()));
    let mut file = ferrite::files::InputFile::open(path).map_err(|e| bad(e.to_string()))?;
    let prefix = file.read_prefix(1 << 16).map_err(|e| bad(e.to_string()))?;
    let header = ferrite::ir::npy::read_header(&prefix).map_err(|e| bad(e.to_string()))?;
    Ok(header.shape)
}

/// Reads an input tensor from a `.npy` or an ONNX `TensorProto` (`.pb`) file.
/// A `.npy` file is read header first, within `budget` bytes.
pub fn read_tensor_file(name: &str, path: &Path, budget: u64) -> Result<Tensor, CliError> {
    let bad = |e: String| CliError::User(format!("input `{name}`: `{}`: {e}", path.display()));
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pb"))
    {
        return ferrite::onnx::read_tensor(path).map_err(|e| match e {
            ferrite::Error::Io { message, .. } => bad(message),
            ferrite::Error::Onnx { error, .. } => bad(error.to_string()),
            e => bad(e.to_string()),
        });
    }
    let (_, t) = read_npy(path, budget).map_err(|e| match e {
        CliError::Library {
            error: ferrite::Error::Npy { message },
            ..
        } => bad(message),
        e => e,
    })?;
    Ok(Tensor::try_from(t)?)
}

/// An ONNX output name as a file name: every character outside `[A-Za-z0-9_.-]`
/// replaced by `_` (so no name can leave the output folder or hide as `..`).
pub fn output_file_stem(onnx: &str) -> String {
    let s: String = onnx
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

/// The machine a `--machine PRESET` flag names (a preset file, or the name of a
/// built-in preset where no such file exists), or the built-in MTIA-2i-like one.
pub fn load_machine(preset: Option<&Path>) -> Result<Machine, CliError> {
    match preset {
        None => Ok(Machine::mtia2i()),
        Some(path) => {
            let builtin = path.to_str().and_then(Machine::builtin);
            match builtin {
                Some(m) if !path.exists() => Ok(m),
                _ => ferrite::sim::read_preset(path).map_err(read_error),
            }
        }
    }
}

/// The autotuner's options for `--autotune` on a command that compiles for
/// `target`: `None` without the flag, an error when the target is not the simulator.
pub fn autotune_options(
    target: Target,
    on: bool,
) -> Result<Option<ferrite::sim::tune::TuneOptions>, CliError> {
    match (target, on) {
        (_, false) => Ok(None),
        (Target::Sim, true) => Ok(Some(ferrite::sim::tune::TuneOptions {
            cache_dir: ferrite::sim::autotune_cache_dir(),
            ..Default::default()
        })),
        (_, true) => Err(CliError::User(
            "--autotune searches tile-kernel choices on the simulator; use it with --target sim"
                .into(),
        )),
    }
}

/// Writes what the autotuner did: a line per kernel, then one per candidate it
/// simulated (for a cached result, those of the run that filled the cache).
pub fn write_tunings(compiled: &Compiled, out: &mut dyn io::Write) -> io::Result<()> {
    for t in compiled.autotune_report() {
        writeln!(out, "autotune {t}")?;
        for trial in &t.tried {
            match trial.cycles {
                Some(c) => writeln!(out, "  tried {}: {c} cycles", trial.choice)?,
                None => writeln!(out, "  tried {}: over the simulation budget", trial.choice)?,
            }
        }
    }
    Ok(())
}

/// The machine of `--machine PRESET` for a command that compiles for `target`:
/// `None` without the flag, an error when the target is not the simulator.
pub fn sim_machine(target: Target, preset: Option<&Path>) -> Result<Option<Machine>, CliError> {
    match (target, preset) {
        (_, None) => Ok(None),
        (Target::Sim, Some(_)) => load_machine(preset).map(Some),
        (_, Some(_)) => Err(CliError::User(
            "--machine describes the simulated accelerator; use it with --target sim".into(),
        )),
    }
}

/// The compile options of the `--no-fuse` and `--no-optimize` flags, for `target`.
pub fn compile_options(target: Target, no_fuse: bool, no_optimize: bool) -> Options {
    Options::default()
        .target(target)
        .fuse(!no_fuse)
        .optimize(!no_optimize)
}

/// Compiles a graph the command has loaded (and so verified) through the library,
/// the one place that turns a graph and options into a runnable program. The
/// error's variant decides the exit code (a failing pipeline or code generator is a
/// bug); a dump that cannot be written is the user's to fix. Errors of running the
/// program are the command's to word.
pub fn compile_graph(graph: &Graph, options: &Options) -> Result<Compiled, CliError> {
    ferrite::compile_ir(graph, options).map_err(|e| match e {
        ferrite::Error::Io { path, message } => {
            CliError::User(format!("cannot write `{}`: {message}", path.display()))
        }
        e => e.into(),
    })
}

/// The input a command makes up for parameter `i` when none is given: reproducible
/// from the seed (`Tensor::random(type, seed + i)`).
pub fn random_input(g: &Graph, i: usize, seed: u64) -> Result<Tensor, CliError> {
    Ok(Tensor::random(
        g.ty(g.params[i]),
        seed.wrapping_add(i as u64),
    )?)
}

/// `1 param`, `3 params`.
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Parses `NAME=FILE` for `--input`.
pub fn parse_name_eq_path(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_eq_path() {
        assert_eq!(
            parse_name_eq_path("x=a/b=c.npy").unwrap(),
            ("x".to_string(), PathBuf::from("a/b=c.npy"))
        );
        assert!(parse_name_eq_path("x").is_err());
        assert!(parse_name_eq_path("=a.npy").is_err());
        assert!(parse_name_eq_path("x=").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        assert_eq!(parse_size("512 KB"), Ok(512 << 10));
        for bad in ["", "M", "1.5G", "-1", "16X", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn plurals() {
        assert_eq!(count(1, "op"), "1 op");
        assert_eq!(count(0, "op"), "0 ops");
        assert_eq!(count(5, "output"), "5 outputs");
    }

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::User("x".into()).exit_code(), 1);
        assert_eq!(CliError::Rendered("x".into()).exit_code(), 1);
        assert_eq!(CliError::Internal("x".into()).exit_code(), 2);
        let user = ferrite::Error::InputCount {
            expected: 1,
            got: 2,
        };
        assert_eq!(CliError::from(user).exit_code(), 1);
        let bug = ferrite::Error::Compile {
            message: "x".into(),
            internal: true,
        };
        assert_eq!(CliError::library("compiling", bug.clone()).exit_code(), 2);
        let user = ferrite::Error::Compile {
            message: "x".into(),
            internal: false,
        };
        assert_eq!(CliError::library("compiling", user).exit_code(), 1);
        assert_eq!(CliError::library("compiling", bug).exit_code(), 2);
        let broken: CliError = io::Error::from(io::ErrorKind::BrokenPipe).into();
        assert_eq!(broken.exit_code(), 0);
    }
}

//! `ferrite profile FILE [--input NAME=FILE.npy].. [--target cpu|sim] [--runs N]
//! [--threads N] [--trace FILE.json] [--format table|json] [--seed N] [--machine PRESET]`:
//! where the time goes, fused and unfused.
//!
//! The graph is compiled once through the library (decompose, optimize, fuse, code
//! generation) and profiled against its unfused baseline, whose optimized graph is
//! scheduled one kernel per primitive op ([`ferrite::Compiled::profile_report`]), so
//! both schedules compute the same graph nodes and their rows can be compared. Both
//! run on the same inputs, made as `ferrite run` makes them: parameters given with
//! `--input NAME=FILE` (`.npy` or ONNX `.pb`) are read from their files, the others are
//! random (parameter `i` is `Tensor::random(type, seed + i)`). Transcendental kernels
//! and softmax take value-dependent time, so a comparison with another runtime should
//! pass that runtime's inputs. On the CPU each schedule runs once to warm up and
//! then `--runs` times, and every kernel's time is its median; on the simulator one
//! run gives deterministic cycles.
//!
//! The table ends with the line `fused vs unfused: X.XXx` (unfused time over fused
//! time). `--format json` prints the report described in [`ferrite::profile::json`]
//! instead; `--trace` writes a Chrome trace.
//! Progress goes to standard error, and only when it is a terminal.

use super::inputs::{check_names, given_inputs, make_inputs};
use super::{
    autotune_options, compile_graph, load_any, load_machine, parse_name_eq_path, target_parser,
    write_tunings, CliError, CliResult, MemoryLimit, TextLimit,
};
use clap::{Args, ValueEnum};
use ferrite::profile::{chrome_trace, render_table, to_json, ProfileStep};
use ferrite::{Options, Target, MAX_THREADS};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How `profile` prints its report.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Format {
    /// Tables for people; the last line is `fused vs unfused: X.XXx`.
    Table,
    /// The documented JSON report.
    Json,
}

/// Flags of `ferrite profile`.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// The graph file (.fg) or ONNX model (.onnx).
    pub file: PathBuf,
    /// Symbolic dimensions of an ONNX model.
    #[command(flatten)]
    pub dims: super::DimArgs,
    /// Take parameter NAME from a .npy or ONNX TensorProto .pb file (repeatable); the others are random.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_name_eq_path)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Where to run: wall-clock times on the CPU, simulated cycles on the simulator.
    #[arg(long, value_parser = target_parser(&[Target::Cpu, Target::Sim]),
          default_value_t = Target::Cpu)]
    pub target: Target,
    /// Timed runs per schedule after one warm-up run (CPU); kernel times are medians.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub runs: u32,
    /// CPU threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64))]
    pub threads: Option<u32>,
    /// Write a Chrome trace (open in ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// CPU: flush subnormal floats to zero while the program runs (FTZ + DAZ, as
    /// `torch.set_flush_denormal(True)`): no slow assists, no gradual underflow.
    #[arg(long)]
    pub flush_denormals: bool,
    /// Print tables or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Seed of the random inputs (those not given with --input): parameter i gets seed + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// On --target sim: autotune every GEMM kernel on the simulator (results cached
    /// under $FERRITE_CACHE_DIR/autotune or ~/.cache/ferrite/autotune).
    #[arg(long)]
    pub autotune: bool,
    /// A machine preset file for `--target sim` (default: the built-in MTIA-2i-like machine).
    #[arg(long, value_name = "PRESET")]
    pub machine: Option<PathBuf>,
    #[command(flatten)]
    pub limit: TextLimit,
    #[command(flatten)]
    pub memory: MemoryLimit,
}

/// Profiles the graph and prints the report; see the module docs.
pub fn profile(args: &ProfileArgs, out: &mut dyn Write, err: &mut dyn Write) -> CliResult {
    match (args.target, &args.machine, args.threads) {
        (Target::Cpu, Some(_), _) => {
            return Err(CliError::User(
                "--machine describes the simulated accelerator; use it with --target sim".into(),
            ))
        }
        (Target::Sim, _, Some(_)) => return Err(CliError::User(
            "--threads sets CPU threads; the simulator's parallelism is its PE grid (--machine)"
                .into(),
        )),
        _ => {}
    }
    let source = load_any(&args.file, &args.limit, &args.dims, &args.inputs)?;
    let given = given_inputs(&source, &args.inputs);
    let graph = source.graph;
    check_names(&graph, &given)?;
    let mut options = Options::default()
        .target(args.target)
        .memory_limit(args.memory.bytes());
    match args.target {
        Target::Sim => {
            options = options.machine(load_machine(args.machine.as_deref())?);
            if let Some(t) = autotune_options(args.target, args.autotune)? {
                options = options.autotune(t);
            }
        }
        _ => {
            autotune_options(args.target, args.autotune)?;
            if let Some(threads) = args.threads {
                options = options.threads(threads as usize);
            }
            options = options.flush_denormals(args.flush_denormals);
        }
    }
    let mut progress = Progress::new(err);
    progress.say("compiling fused");
    let fused = compile_graph(&graph, &options)?;
    write_tunings(&fused, progress.notes())?;
    // The inputs and a run share the budget (the library checks the fused and
    // unfused runs together before they run).
    let input_bytes: u64 = graph
        .params
        .iter()
        .map(|&p| graph.ty(p).size_bytes() as u64)
        .sum();
    let (needs, limit) = (
        input_bytes.saturating_add(fused.run_memory_bytes()),
        options.memory_budget(),
    );
    if needs > limit {
        return Err(ferrite::Error::MemoryBudget {
            what: format!(
                "profiling graph `{}` on {} with its inputs",
                graph.name, args.target
            ),
            needs,
            limit,
        }
        .into());
    }
    // What is left over is what decoding a file may use beyond its tensor.
    let inputs = make_inputs(&graph, &given, args.seed, limit - needs, progress.notes())?.tensors;
    let mut step = None;
    let runs = args.runs as usize;
    let report = fused
        .profile_report_with_progress(&inputs, runs, &mut |s| {
            step = Some(s);
            match s {
                ProfileStep::CompilingUnfused => progress.say("compiling unfused"),
                ProfileStep::WarmUp { fused } => {
                    progress.say(&format!("running {}: warm-up", label(fused)))
                }
                ProfileStep::Timed { fused, done, runs } => {
                    progress.tick(&format!("running {}: {done}/{runs}", label(fused)))
                }
                ProfileStep::Simulating { fused } => {
                    progress.say(&format!("simulating {}", label(fused)))
                }
                ProfileStep::MeasuringBandwidth => progress.say("measuring copy bandwidth"),
                _ => {}
            }
        })
        .map_err(|e| {
            let context = match step {
                Some(ProfileStep::CompilingUnfused) => "compiling the unfused schedule".into(),
                Some(ProfileStep::WarmUp { fused } | ProfileStep::Timed { fused, .. }) => {
                    format!("running the {} schedule failed", label(fused))
                }
                Some(ProfileStep::Simulating { fused }) => {
                    format!("simulating the {} schedule failed", label(fused))
                }
                _ => "profiling failed".into(),
            };
            CliError::library(context, e)
        })?;
    drop(progress);

    if let Some(path) = &args.trace {
        std::fs::write(path, chrome_trace(&report))
            .map_err(|e| CliError::User(format!("cannot write `{}`: {e}", path.display())))?;
    }
    match args.format {
        Format::Table => out.write_all(render_table(&report).as_bytes())?,
        Format::Json => out.write_all(to_json(&report).as_bytes())?,
    }
    Ok(())
}

/// How the status line and errors name a schedule.
fn label(fused: bool) -> &'static str {
    if fused {
        "fused"
    } else {
        "unfused"
    }
}

/// One self-overwriting status line on standard error, shown only when standard
/// error is a terminal (so logs and pipes get no control characters), and erased
/// when dropped (so an error message starts on a clean line). Failures to write it
/// are ignored: the status is a courtesy, the report is what matters.
struct Progress<'a> {
    err: &'a mut dyn Write,
    enabled: bool,
    shown: bool,
    last: Option<Instant>,
}

/// Status updates closer together than this are skipped (a terminal write per
/// run would be most of the time between the runs of a small graph).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

impl<'a> Progress<'a> {
    fn new(err: &'a mut dyn Write) -> Progress<'a> {
        Progress {
            err,
            enabled: std::io::stderr().is_terminal(),
            shown: false,
            last: None,
        }
    }

    /// Shows `status` in place of the previous one.
    fn say(&mut self, status: &str) {
        if self.enabled {
            // `\x1b[2K` erases the previous status, whatever its length.
            let _ = write!(self.err, "\r\x1b[2Kprofile: {status}");
            let _ = self.err.flush();
            self.shown = true;
            self.last = Some(Instant::now());
        }
    }

    /// Where a note (a line of its own) goes: the status line is erased first.
    fn notes(&mut self) -> &mut dyn Write {
        if self.shown {
            let _ = write!(self.err, "\r\x1b[2K");
            self.shown = false;
        }
        &mut *self.err
    }

    /// Shows `status` unless the last status went up less than an interval ago.
    fn tick(&mut self, status: &str) {
        if self.last.is_none_or(|t| t.elapsed() >= PROGRESS_INTERVAL) {
            self.say(status);
        }
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        if self.shown {
            let _ = write!(self.err, "\r\x1b[2K");
            let _ = self.err.flush();
        }
    }
}

//! `ferrite profile FILE [--target cpu|sim] [--runs N] [--threads N] [--trace FILE.json]
//! [--format table|json] [--seed N] [--machine PRESET]`: where the time goes, fused and
//! unfused.
//!
//! The graph is compiled once through the library (decompose, optimize, fuse, code
//! generation); its optimized graph is also scheduled unfused, one kernel per
//! primitive op ([`ferrite::Compiled::unfused`]), so both schedules compute the same
//! graph nodes and their rows can be compared. Both are compiled for the target and
//! run on the same random inputs (parameter `i` is
//! `Tensor::random(type, seed + i)`, as `ferrite run` makes them). On the CPU each
//! schedule runs once to warm up and then `--runs` times, and every kernel's time is
//! its median; on the simulator one run gives deterministic cycles.
//!
//! The table ends with the line `fused vs unfused: X.XXx` (unfused time over fused
//! time). `--format json` prints the report described in
//! `ferrite_profile::json` instead; `--trace` writes a Chrome trace.
//! Progress goes to standard error, and only when it is a terminal.

use super::{
    compile_graph, load_graph, load_machine, random_input, run_failure, CliError, CliResult,
};
use clap::{Args, ValueEnum};
use ferrite::{Compiled, Options};
use ferrite_accel::sim::Machine;
use ferrite_cpu::default_thread_count;
use ferrite_ir::Tensor;
use ferrite_profile::{
    chrome_trace, machine_info, machine_roofline, measure_copy_bandwidth, render_table, to_json,
    ProfileReport, ProfileTarget, ScheduleProfile,
};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The most input data `profile` creates (4 GiB), as for `ferrite run`.
const INPUT_BYTES_LIMIT: usize = 4 << 30;

/// Where `profile` runs the schedules.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Target {
    /// Native code through the Cranelift JIT, wall-clock times.
    Cpu,
    /// The accelerator simulator, simulated cycles.
    Sim,
}

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
    /// The graph file (.fg).
    pub file: PathBuf,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Target::Cpu)]
    pub target: Target,
    /// Timed runs per schedule after one warm-up run (CPU); kernel times are medians.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub runs: u32,
    /// CPU threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// Write a Chrome trace (open in ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Print tables or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Seed of the random inputs: parameter i gets seed + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A machine preset file for `--target sim` (default: the built-in MTIA-2i-like machine).
    #[arg(long, value_name = "PRESET")]
    pub machine: Option<PathBuf>,
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
    let (graph, _) = load_graph(&args.file)?;
    let input_bytes: usize = graph.params.iter().map(|&p| graph.ty(p).size_bytes()).sum();
    if input_bytes > INPUT_BYTES_LIMIT {
        return Err(CliError::User(format!(
            "the parameters of `{}` need {input_bytes} bytes of random inputs, more than the {} GiB `profile` creates",
            graph.name,
            INPUT_BYTES_LIMIT >> 30
        )));
    }
    let platform = match args.target {
        Target::Cpu => Platform::Cpu {
            threads: args
                .threads
                .map_or_else(default_thread_count, |t| t as usize),
        },
        Target::Sim => Platform::Sim(load_machine(args.machine.as_deref())?),
    };
    let mut progress = Progress::new(err);
    progress.say("compiling fused");
    let fused = compile_graph(&graph, &platform.options())?;
    progress.say("compiling unfused");
    let unfused = fused
        .unfused()
        .map_err(|e| CliError::Internal(format!("compiling the unfused schedule: {e}")))?;
    let inputs: Vec<Tensor> = (0..graph.params.len())
        .map(|i| random_input(&graph, i, args.seed))
        .collect();
    let fused = measure(&fused, "fused", args, &inputs, &mut progress)?;
    let unfused = measure(&unfused, "unfused", args, &inputs, &mut progress)?;
    let report = match platform {
        Platform::Cpu { threads } => {
            progress.say("measuring copy bandwidth");
            ProfileReport {
                graph: graph.name.clone(),
                target: ProfileTarget::Cpu,
                runs: args.runs as usize,
                threads: Some(threads),
                machine: None,
                roofline: measure_copy_bandwidth(threads),
                fused,
                unfused,
            }
        }
        Platform::Sim(machine) => ProfileReport {
            graph: graph.name.clone(),
            target: ProfileTarget::Sim,
            runs: 1,
            threads: None,
            machine: Some(machine_info(&machine)),
            roofline: machine_roofline(&machine),
            fused,
            unfused,
        },
    };
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

/// What the schedules run on, fixed before compiling so that the report states what
/// the library compiled for.
enum Platform {
    /// Native code on this many threads.
    Cpu { threads: usize },
    /// The simulated accelerator.
    Sim(Machine),
}

impl Platform {
    /// The library options that compile for this platform.
    fn options(&self) -> Options {
        match self {
            Platform::Cpu { threads } => Options::default()
                .target(ferrite::Target::Cpu)
                .threads(*threads),
            Platform::Sim(machine) => Options::default()
                .target(ferrite::Target::Sim)
                .machine(machine.clone()),
        }
    }
}

/// Profiles one compiled schedule kernel by kernel (see [`Compiled::profile`]).
fn measure(
    exe: &Compiled,
    label: &str,
    args: &ProfileArgs,
    inputs: &[Tensor],
    progress: &mut Progress,
) -> Result<ScheduleProfile, CliError> {
    let runs = args.runs as usize;
    let (status, failure) = match args.target {
        Target::Cpu => (format!("running {label}: warm-up"), "running"),
        Target::Sim => (format!("simulating {label}"), "simulating"),
    };
    progress.say(&status);
    exe.profile(inputs, runs, &mut |done| {
        progress.tick(&format!("running {label}: {done}/{runs}"))
    })
    .map_err(|e| {
        CliError::User(format!(
            "{failure} the {label} schedule failed: {}",
            run_failure(e)
        ))
    })
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

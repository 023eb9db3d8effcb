//! `ferrite compile FILE [--target cpu|sim] [--no-fuse] [--no-optimize] [--dump DIR]`:
//! run the compiler pipeline and the target's code generator and summarize what they
//! did; with `--dump`, write every stage as text (the CPU's CLIF and machine code, or
//! the tile kernels, included).

use super::{count, load_graph, pipeline_options, CliError, CliResult, Target};
use clap::Args;
use ferrite_ir::print;
use ferrite_passes::pipeline::{lower_graph, StageRecord};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_runtime::accel::program::SimProgram;
use ferrite_runtime::accel::sim::Machine;
use ferrite_runtime::cpu::{CpuOptions, CpuProgram};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Flags of `ferrite compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The graph file (.fg).
    pub file: PathBuf,
    /// One kernel per primitive op, everything materialized (the unfused baseline).
    #[arg(long)]
    pub no_fuse: bool,
    /// Skip the e-graph optimizer.
    #[arg(long)]
    pub no_optimize: bool,
    /// The code generator to run after scheduling (`interp` stops after scheduling).
    #[arg(long, value_enum, default_value_t = Target::Cpu)]
    pub target: Target,
    /// Write each stage as text into DIR (created if missing), numbered in pipeline order.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
}

/// Compiles the graph and prints the summary; see the module docs.
pub fn compile(args: &CompileArgs, out: &mut dyn Write) -> CliResult {
    let parse_start = Instant::now();
    let (graph, _) = load_graph(&args.file)?;
    let parse_time = parse_start.elapsed();

    let opts = pipeline_options(args.no_fuse, args.no_optimize);
    let mut lowered = lower_graph(&graph, &opts).map_err(internal)?;
    lowered.stages.push(codegen(
        args.target,
        &lowered.scheduled.program,
        args.dump.is_some(),
    )?);
    // The unfused baseline of the same optimized graph, for comparison.
    let unfused = if args.no_fuse {
        lowered.scheduled.clone()
    } else {
        schedule(&lowered.optimized, &ScheduleOptions::unfused()).map_err(internal)?
    };

    let report = &lowered.optimize_report;
    writeln!(
        out,
        "graph {}: {}, {}, {}",
        graph.name,
        count(graph.params.len(), "param"),
        count(graph.op_count(), "op"),
        count(graph.outputs.len(), "output")
    )?;
    writeln!(
        out,
        "ops: {} before optimize, {} after",
        lowered.decomposed.op_count(),
        lowered.optimized.op_count()
    )?;
    writeln!(
        out,
        "optimizer: {} after {}, {} e-nodes",
        report.stop_reason,
        count(report.iterations, "iteration"),
        report.egraph_nodes
    )?;
    writeln!(
        out,
        "kernels: {} (unfused: {})",
        lowered.scheduled.program.kernels.len(),
        unfused.program.kernels.len()
    )?;
    writeln!(
        out,
        "peak intermediate memory: {} (unfused: {})",
        bytes(lowered.scheduled.memory.peak_bytes()),
        bytes(unfused.memory.peak_bytes())
    )?;
    let mut times = vec![format!("parse {}", ms(parse_time))];
    times.extend(
        lowered
            .stages
            .iter()
            .filter(|s| s.time > Duration::ZERO)
            .map(|s| format!("{} {}", s.name, ms(s.time))),
    );
    writeln!(
        out,
        "time: {} (total {})",
        times.join(", "),
        ms(parse_time + lowered.total_time())
    )?;

    if let Some(dir) = &args.dump {
        let parsed = StageRecord {
            name: "parse",
            time: parse_time,
            file: "parsed.fg",
            text: print(&graph),
        };
        let files = write_dump(dir, std::iter::once(&parsed).chain(&lowered.stages))?;
        // The optimized graph with each kernel as a cluster (render: dot -Tsvg graph.dot).
        let dot = dir.join("graph.dot");
        std::fs::write(
            &dot,
            ferrite_passes::dot::graph_dot(&lowered.optimized, &lowered.scheduled.program),
        )
        .map_err(|e| CliError::User(format!("cannot write `{}`: {e}", dot.display())))?;
        writeln!(out, "wrote {} files to {}", files + 1, dir.display())?;
    }
    Ok(())
}

/// Writes each stage to `DIR/NN-<file>` and returns how many files it wrote.
fn write_dump<'a>(
    dir: &Path,
    stages: impl Iterator<Item = &'a StageRecord>,
) -> Result<usize, CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::User(format!("cannot create `{}`: {e}", dir.display())))?;
    let mut n = 0;
    for (i, s) in stages.enumerate() {
        let path = dir.join(format!("{i:02}-{}", s.file));
        std::fs::write(&path, &s.text)
            .map_err(|e| CliError::User(format!("cannot write `{}`: {e}", path.display())))?;
        n += 1;
    }
    Ok(n)
}

/// A compile failure on a verified graph is a bug in a pass.
fn internal(e: String) -> CliError {
    CliError::Internal(e)
}

/// `1.234 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// `512 B`, `1.50 KiB`, `3.25 MiB`, `1.00 GiB`.
pub fn bytes(n: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// Runs the target's code generator on the scheduled program and records it as a stage.
fn codegen(
    target: Target,
    program: &ferrite_ir::loops::Program,
    capture: bool,
) -> Result<StageRecord, CliError> {
    let start = Instant::now();
    let (name, file, text) = match target {
        Target::Cpu => {
            let opts = CpuOptions {
                capture_dumps: capture,
                ..CpuOptions::default()
            };
            let cpu = CpuProgram::compile(program, &opts)
                .map_err(|e| internal(format!("cpu codegen: {e}")))?;
            let text = if capture {
                format!("{}\n{}", cpu.report(), cpu.dump())
            } else {
                String::new()
            };
            ("codegen", "cpu.clif", text)
        }
        Target::Sim => {
            let sim = SimProgram::compile(program, &Machine::mtia2i())
                .map_err(|e| internal(format!("tile lowering: {e}")))?;
            ("tile lowering", "kernels.tile", sim.kernels_text())
        }
        Target::Interp => (
            "no codegen",
            "interp.txt",
            "the interpreter runs the graph as parsed\n".into(),
        ),
    };
    Ok(StageRecord {
        name,
        time: start.elapsed(),
        file,
        text,
    })
}

//! `ferrite compile FILE [--target cpu|sim|loops] [--no-fuse] [--no-optimize] [--dump DIR] [--machine PRESET]`:
//! run the compiler pipeline and the target's code generator and summarize what they
//! did; with `--dump`, write every stage as text (the CPU's CLIF and machine code, or
//! the tile kernels, included). `--target loops` stops after scheduling: the loop-IR
//! evaluator runs the scheduled program itself, with no code generator. The
//! interpreter (`interp`) runs no pipeline, so there is nothing to compile for it.

use super::{
    autotune_options, compile_graph, compile_options, count, load_any, sim_machine, target_parser,
    write_tunings, CliError, CliResult, TextLimit,
};
use clap::Args;
use ferrite::passes::schedule::{schedule, ScheduleOptions};
use ferrite::Target;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `ferrite compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The graph file (.fg) or ONNX model (.onnx).
    pub file: PathBuf,
    /// Symbolic dimensions of an ONNX model.
    #[command(flatten)]
    pub dims: super::DimArgs,
    /// One kernel per primitive op, everything materialized (the unfused baseline).
    #[arg(long)]
    pub no_fuse: bool,
    /// Skip the e-graph optimizer.
    #[arg(long)]
    pub no_optimize: bool,
    /// The code generator to run after scheduling; `loops` runs none and stops after
    /// scheduling (the interpreter runs no pipeline, so there is nothing to compile for it).
    #[arg(long, value_parser = target_parser(&[Target::Cpu, Target::Sim, Target::Loops]),
          default_value_t = Target::Cpu)]
    pub target: Target,
    /// Write each stage as text into DIR (created if missing), numbered in pipeline order.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
    /// On --target sim: autotune every GEMM kernel on the simulator (results cached
    /// under $FERRITE_CACHE_DIR/autotune or ~/.cache/ferrite/autotune).
    #[arg(long)]
    pub autotune: bool,
    /// A machine preset for `--target sim`: a preset file, or a built-in name
    /// (`mtia2i`, the default; `mtia1`).
    #[arg(long, value_name = "PRESET")]
    pub machine: Option<PathBuf>,
    #[command(flatten)]
    pub limit: TextLimit,
}

/// Compiles the graph and prints the summary; see the module docs.
pub fn compile(args: &CompileArgs, out: &mut dyn Write) -> CliResult {
    let parse_start = Instant::now();
    let loaded = load_any(&args.file, &args.limit, &args.dims, &[])?;
    let specialization = loaded.specialization();
    let symbolic = loaded.symbolic;
    let graph = loaded.graph;
    let parse_time = parse_start.elapsed();

    let target = args.target;
    let mut options = compile_options(target, args.no_fuse, args.no_optimize);
    options.dump = args.dump.clone();
    if let Some(m) = sim_machine(target, args.machine.as_deref())? {
        options = options.machine(m);
    }
    if let Some(t) = autotune_options(target, args.autotune)? {
        options = options.autotune(t);
    }
    let exe = compile_graph(&graph, &options)?;
    write_tunings(&exe, out)?;
    let (Some(decomposed), Some(optimized), Some(report), Some(scheduled)) = (
        exe.decomposed_graph(),
        exe.optimized_graph(),
        exe.optimize_report(),
        exe.schedule(),
    ) else {
        return Err(CliError::Internal(format!(
            "compiling for {target} ran no pipeline"
        )));
    };
    // The unfused baseline of the same optimized graph, for comparison.
    let unfused = if args.no_fuse {
        scheduled.clone()
    } else {
        let unfused = ScheduleOptions {
            threads: options.pass_threads(),
            ..ScheduleOptions::unfused()
        };
        schedule(optimized, &unfused).map_err(|e| CliError::Internal(e.to_string()))?
    };

    writeln!(
        out,
        "graph {}: {}, {}, {}",
        super::short(&graph.name),
        count(graph.params.len(), "param"),
        count(graph.op_count(), "op"),
        count(graph.outputs.len(), "output")
    )?;
    if let Some((g, _)) = &symbolic {
        writeln!(out, "{}", super::short(&specialization))?;
        for (i, t) in g.output_types().iter().enumerate() {
            writeln!(out, "output {i}: {t}")?;
        }
        for c in &g.facts().constraints {
            let at = c.at.as_deref().map_or(String::new(), |a| format!(" ({a})"));
            writeln!(out, "requires: {} for {}{at}", c.fact, c.why)?;
        }
    }
    writeln!(
        out,
        "ops: {} before optimize, {} after",
        decomposed.op_count(),
        optimized.op_count()
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
        scheduled.program.kernels.len(),
        unfused.program.kernels.len()
    )?;
    writeln!(
        out,
        "peak intermediate memory: {} (unfused: {})",
        bytes(scheduled.memory.peak_bytes()),
        bytes(unfused.memory.peak_bytes())
    )?;
    let stages = exe.stage_times();
    let mut times = vec![format!("parse {}", ms(parse_time))];
    times.extend(
        stages
            .iter()
            .filter(|(_, time)| *time > Duration::ZERO)
            .map(|(name, time)| format!("{name} {}", ms(*time))),
    );
    let total: Duration = parse_time + stages.iter().map(|(_, time)| *time).sum::<Duration>();
    writeln!(out, "time: {} (total {})", times.join(", "), ms(total))?;

    if let Some(dir) = &args.dump {
        writeln!(
            out,
            "wrote {} files to {}",
            exe.dump_files().len(),
            dir.display()
        )?;
    }
    Ok(())
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

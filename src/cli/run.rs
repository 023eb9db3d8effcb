//! `ferrite run FILE [--input NAME=FILE.npy].. [--seed N] [--target cpu|sim|interp|loops]
//! [--out DIR]`: run a graph and summarize its outputs.
//!
//! Parameters not given with `--input` get deterministic random values: parameter
//! `i` is `Tensor::random(type, seed + i)`, so a run is reproducible from its flags.

use super::inputs::{check_names, given_inputs, make_inputs, Inputs};
use super::summary::summarize;
use super::{
    autotune_options, compile_graph, compile_options, count, load_any, output_file_stem,
    parse_name_eq_path, sim_machine, target_parser, write_tunings, CliError, CliResult,
    MemoryLimit, TextLimit,
};
use clap::Args;
use ferrite::ir::{Graph, ValueId};
use ferrite::{Target, MAX_THREADS};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The graph file (.fg) or ONNX model (.onnx).
    pub file: PathBuf,
    /// Symbolic dimensions of an ONNX model.
    #[command(flatten)]
    pub dims: super::DimArgs,
    /// Take parameter NAME from a .npy or ONNX TensorProto .pb file (repeatable); the others are random.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_name_eq_path)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Seed of the random inputs: parameter i gets seed + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to run the graph.
    #[arg(long, value_parser = target_parser(&Target::ALL), default_value_t = Target::Cpu)]
    pub target: Target,
    /// Write each output to DIR/<name>.npy, <name> being the returned value's name.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// One kernel per primitive op (the unfused baseline); not for interp.
    #[arg(long)]
    pub no_fuse: bool,
    /// Skip the e-graph optimizer; not for interp.
    #[arg(long)]
    pub no_optimize: bool,
    /// Threads for the cpu target (default: all cores).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64))]
    pub threads: Option<u32>,
    /// CPU: flush subnormal floats to zero while the program runs (FTZ + DAZ, as
    /// `torch.set_flush_denormal(True)`): no slow assists, no gradual underflow.
    #[arg(long)]
    pub flush_denormals: bool,
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
    #[command(flatten)]
    pub memory: MemoryLimit,
}

/// Runs the graph and prints the summary; see the module docs.
pub fn run(args: &RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> CliResult {
    let source = load_any(&args.file, &args.limit, &args.dims, &args.inputs)?;
    let given = given_inputs(&source, &args.inputs);
    let graph = source.graph.clone();
    check_names(&graph, &given)?;

    // The library compiles for the target (the interpreter target keeps the graph as
    // parsed) and runs it; only the run itself is timed.
    let mut options = compile_options(args.target, args.no_fuse, args.no_optimize)
        .memory_limit(args.memory.bytes());
    if let Some(t) = args.threads {
        options = options.threads(t as usize);
    }
    options = options.flush_denormals(args.flush_denormals);
    if let Some(m) = sim_machine(args.target, args.machine.as_deref())? {
        options = options.machine(m);
    }
    if let Some(t) = autotune_options(args.target, args.autotune)? {
        options = options.autotune(t);
    }
    let exe = compile_graph(&graph, &options)?;
    write_tunings(&exe, err)?;
    // The inputs this command makes and the run's own memory share one budget,
    // checked before any input is made or read.
    let budget = options.memory_budget();
    let input_bytes: u64 = graph
        .params
        .iter()
        .map(|&p| graph.ty(p).size_bytes() as u64)
        .sum();
    let needs = input_bytes.saturating_add(exe.run_memory_bytes());
    if needs > budget {
        return Err(ferrite::Error::MemoryBudget {
            what: format!(
                "running graph `{}` on {} with its inputs",
                graph.name, args.target
            ),
            needs,
            limit: budget,
        }
        .into());
    }
    // What is left over is what decoding a file may use beyond its tensor.
    let spare = budget - needs;

    let Inputs {
        tensors: inputs,
        loaded,
        random,
    } = make_inputs(&graph, &given, args.seed, spare, err)?;

    let executed = exe
        .execute(&inputs)
        .map_err(|e| CliError::library(format!("running graph `{}` failed", graph.name), e))?;
    let elapsed = executed.time();
    let outputs = executed.outputs();
    if outputs.len() != graph.outputs.len() {
        return Err(CliError::Internal(format!(
            "the {} target returned {} outputs for a graph with {}",
            args.target.name(),
            outputs.len(),
            graph.outputs.len()
        )));
    }

    let mut sources = loaded;
    if !random.is_empty() {
        sources.push(format!(
            "{} (seed {}): {}",
            count(random.len(), "random input"),
            args.seed,
            random.join(", ")
        ));
    }
    if sources.is_empty() {
        writeln!(out, "graph {}: no inputs", super::short(&graph.name))?;
    } else {
        let sources = super::short(&sources.join("; "));
        writeln!(out, "graph {}: {sources}", super::short(&graph.name))?;
    }
    if source.symbolic.is_some() {
        writeln!(out, "{}", super::short(&source.specialization()))?;
    }
    let names = match &source.onnx {
        Some(model) => model
            .outputs
            .iter()
            .map(|b| output_file_stem(&b.onnx))
            .collect(),
        None => output_file_names(&graph),
    };
    for (name, t) in names.iter().zip(outputs) {
        let (values, stats) = summarize(t.as_ir());
        writeln!(
            out,
            "{}: {}\n  {values}\n  {stats}",
            super::short(name),
            t.ty()
        )?;
    }
    if let Some(report) = executed.device_report() {
        writeln!(out, "{}", report.to_string().trim_end())?;
    }
    let compile = match exe.kernel_count() {
        Some(kernels) => format!(
            " (compiled in {:.3} ms, {})",
            exe.compile_time().as_secs_f64() * 1e3,
            count(kernels, "kernel")
        ),
        None => String::new(),
    };
    writeln!(
        out,
        "time: {:.3} ms on {}{compile}",
        elapsed.as_secs_f64() * 1e3,
        args.target.name()
    )?;

    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::User(format!("cannot create directory `{}`: {e}", dir.display()))
        })?;
        let mut written = HashSet::new();
        for (name, t) in names.iter().zip(outputs) {
            // A value returned twice has one file.
            if !written.insert(name) {
                continue;
            }
            let path = dir.join(format!("{name}.npy"));
            std::fs::write(&path, t.to_npy())
                .map_err(|e| CliError::User(format!("cannot write `{}`: {e}", path.display())))?;
            writeln!(out, "wrote {}", path.display())?;
        }
    }
    Ok(())
}

/// The file name (without `.npy`) of each output: [`Graph::output_name`], made
/// unique when an unnamed output's generated name `output{i}` collides with a
/// value of that name.
fn output_file_names(g: &Graph) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    // The value each name chosen so far belongs to (a lookup, not a scan of every
    // earlier output, which was quadratic for wide graphs).
    let mut taken: HashMap<String, ValueId> = HashMap::new();
    for (i, &v) in g.outputs.iter().enumerate() {
        let base = g.output_name(i);
        let mut name = base.clone();
        let mut k = 1;
        while taken.get(&name).is_some_and(|&w| w != v) {
            name = format!("{base}_{k}");
            k += 1;
        }
        taken.entry(name.clone()).or_insert(v);
        names.push(name);
    }
    names
}

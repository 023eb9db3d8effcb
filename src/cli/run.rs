//! `ferrite run FILE [--input NAME=FILE.npy].. [--seed N] [--target cpu|sim|interp|loops]
//! [--out DIR]`: run a graph and summarize its outputs.
//!
//! Parameters not given with `--input` get deterministic random values: parameter
//! `i` is `Tensor::random(type, seed + i)`, so a run is reproducible from its flags.

use super::summary::summarize;
use super::{
    compile_graph, compile_options, count, load_any, output_file_stem, parse_name_eq_path,
    random_input, read_npy, read_tensor_file, target_parser, CliError, CliResult, MemoryLimit,
    TextLimit,
};
use clap::Args;
use ferrite::ir::{Graph, ValueId};
use ferrite::{Target, Tensor, MAX_THREADS};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

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
    #[command(flatten)]
    pub limit: TextLimit,
    #[command(flatten)]
    pub memory: MemoryLimit,
}

/// Runs the graph and prints the summary; see the module docs.
pub fn run(args: &RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> CliResult {
    let source = load_any(&args.file, &args.limit, &args.dims, &args.inputs)?;
    let graph = source.graph;
    // ONNX inputs are named as in the model; the graph may spell them otherwise.
    let given: Vec<(String, PathBuf)> = match &source.onnx {
        None => args.inputs.clone(),
        Some(model) => args
            .inputs
            .iter()
            .filter(|(name, _)| !source.bound.contains(name))
            .map(|(name, path)| {
                let name = model
                    .inputs
                    .iter()
                    .find(|b| b.onnx == *name)
                    .map_or(name.clone(), |b| b.name.clone());
                (name, path.clone())
            })
            .collect(),
    };
    let from_files = match_inputs(&graph, &given)?;

    // The library compiles for the target (the interpreter target keeps the graph as
    // parsed) and runs it; only the run itself is timed.
    let mut options = compile_options(args.target, args.no_fuse, args.no_optimize)
        .memory_limit(args.memory.bytes());
    if let Some(t) = args.threads {
        options = options.threads(t as usize);
    }
    let exe = compile_graph(&graph, &options)?;
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

    let mut inputs = Vec::with_capacity(graph.params.len());
    let mut random = Vec::new();
    let mut loaded = Vec::new();
    for (i, &p) in graph.params.iter().enumerate() {
        let name = param_name(&graph, i);
        let ty = graph.ty(p);
        let tensor = match from_files.get(name) {
            Some(path) => {
                let budget = spare.saturating_add(ty.size_bytes() as u64);
                let t = load_input(name, ty, path, budget, err)?;
                loaded.push(format!("{name} from {}", path.display()));
                t
            }
            None => {
                random.push(name);
                random_input(&graph, i, args.seed)?
            }
        };
        inputs.push(tensor);
    }

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
        writeln!(out, "graph {}: no inputs", graph.name)?;
    } else {
        writeln!(out, "graph {}: {}", graph.name, sources.join("; "))?;
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
        writeln!(out, "{name}: {}\n  {values}\n  {stats}", t.ty())?;
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

/// The name of parameter `i` (parsed graphs name every parameter).
fn param_name(g: &Graph, i: usize) -> &str {
    g.node(g.params[i]).name.as_deref().unwrap_or("?")
}

/// Checks the `--input` names against the parameters: each must name one, once.
fn match_inputs<'a>(
    g: &Graph,
    inputs: &'a [(String, PathBuf)],
) -> Result<HashMap<&'a str, &'a Path>, CliError> {
    let mut map = HashMap::new();
    for (name, path) in inputs {
        let known = (0..g.params.len()).any(|i| param_name(g, i) == name);
        if !known {
            let params: Vec<&str> = (0..g.params.len()).map(|i| param_name(g, i)).collect();
            return Err(CliError::User(format!(
                "--input {name}=...: graph `{}` has no parameter `{name}` (its parameters: {})",
                g.name,
                if params.is_empty() {
                    "none".to_string()
                } else {
                    params.join(", ")
                }
            )));
        }
        if map.insert(name.as_str(), path.as_path()).is_some() {
            return Err(CliError::User(format!("--input `{name}` is given twice")));
        }
    }
    Ok(map)
}

/// Reads one `--input` file (within `budget` bytes) and checks it against the
/// parameter's type.
fn load_input(
    name: &str,
    ty: &ferrite::TensorType,
    path: &Path,
    budget: u64,
    err: &mut dyn Write,
) -> Result<Tensor, CliError> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pb"))
    {
        let t = read_tensor_file(name, path, budget)?;
        if t.ty() != ty {
            return Err(CliError::User(format!(
                "input `{name}` is declared {ty}, but `{}` holds {}",
                path.display(),
                t.ty()
            )));
        }
        return Ok(t);
    }
    let (header, t) = read_npy(path, budget).map_err(|e| match e {
        CliError::Library {
            error: ferrite::Error::Npy { message },
            ..
        } => CliError::User(format!("input `{name}`: {message}")),
        e => e,
    })?;
    let t = match converted(&t, ty) {
        Some(c) => {
            writeln!(
                err,
                "note: input `{name}`: `{}` stores '{}'; converted to {}",
                path.display(),
                header.descr,
                ty.dtype
            )?;
            c
        }
        None => t,
    };
    if &t.ty != ty {
        let mut msg = format!(
            "input `{name}` is declared {ty}, but `{}` holds {} (stored as '{}')",
            path.display(),
            t.ty,
            header.descr
        );
        if t.ty.shape == ty.shape {
            msg.push_str(&format!(
                "; convert it first, e.g. numpy's `a.astype({})`",
                numpy_type_name(ty.dtype)
            ));
        }
        return Err(CliError::User(msg));
    }
    Ok(Tensor::try_from(t)?)
}

/// `t` converted to the declared type `ty` where numpy's defaults make a file's
/// type differ harmlessly: float64 data for a float input (rounded once), or integers
/// of another width for an integer input when every value fits; `None` otherwise.
fn converted(t: &ferrite::ir::Tensor, ty: &ferrite::ir::TensorType) -> Option<ferrite::ir::Tensor> {
    let (from, to) = (t.ty.dtype, ty.dtype);
    if t.ty.shape != ty.shape || from == to {
        return None;
    }
    let target = t.ty.with_dtype(to);
    if from == ferrite::DType::F64 && to.is_float() {
        return Some(ferrite::ir::Tensor::from_f64(&target, &t.to_f64()));
    }
    let (lo, hi) = to.int_range()?;
    if !from.is_int() {
        return None;
    }
    let values = t.to_i128();
    values
        .iter()
        .all(|v| (lo..=hi).contains(v))
        .then(|| ferrite::ir::Tensor::from_i128(&target, &values))
}

/// The numpy spelling of a dtype, for hints.
fn numpy_type_name(d: ferrite::DType) -> &'static str {
    use ferrite::DType::*;
    match d {
        F32 => "np.float32",
        F16 => "np.float16",
        Bf16 => "ml_dtypes.bfloat16",
        I32 => "np.int32",
        I64 => "np.int64",
        Bool => "np.bool_",
        F64 => "np.float64",
        I8 => "np.int8",
        U8 => "np.uint8",
        I16 => "np.int16",
        U16 => "np.uint16",
        U32 => "np.uint32",
        U64 => "np.uint64",
    }
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

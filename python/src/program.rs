//! `ferrite.load`, `ferrite.compile` and `ferrite.Program`: files in, compiled
//! programs, runs on numpy arrays, profiles.

use crate::convert::{to_array, to_tensor, type_pair};
use crate::errors::{to_py, FileError, InputError, OnnxError};
use crate::graph::{output_names, param_names, Names, PyGraph};
use ferrite::{Compiled, Options, Target, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The default limit on text files read whole (the CLI's `--max-text-size`).
const MAX_TEXT_SIZE: u64 = 16 << 20;

/// Loads a graph: a `.onnx` model (by its extension) or a `.fg` file with its
/// weights file.
///
/// - `dims` gives the values of an ONNX model's symbolic dimensions
///   (`dims={"batch": 1}`), as `--dim` does.
/// - `values` gives inputs an ONNX op needs at import time (a `Reshape`'s shape fed
///   as an input) as numpy arrays; they become constants of the graph.
/// - `max_text_size` bounds a `.fg` file (16 MiB by default, as `--max-text-size`).
///
/// Errors are the CLI's: a `.fg` mistake is a `ParseError` with `file:line:col`, an
/// unsupported ONNX op an `OnnxError` naming the node, the op and the opset.
#[pyfunction]
#[pyo3(
    signature = (path, dims=None, values=None, max_text_size=MAX_TEXT_SIZE),
    text_signature = "(path, dims=None, values=None, max_text_size=16777216)"
)]
pub fn load(
    py: Python<'_>,
    path: PathBuf,
    dims: Option<HashMap<String, usize>>,
    values: Option<HashMap<String, Bound<'_, PyAny>>>,
    max_text_size: u64,
) -> PyResult<PyGraph> {
    let is_onnx = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    if !is_onnx {
        if dims.is_some() || values.is_some() {
            return Err(InputError::new_err(format!(
                "{}: dims= and values= are for ONNX models (.onnx)",
                path.display()
            )));
        }
        let graph = py.detach(|| load_fg(&path, max_text_size))?;
        return Ok(PyGraph::loaded(graph, None));
    }
    let mut given = HashMap::new();
    for (name, v) in values.unwrap_or_default() {
        given.insert(name.clone(), to_tensor(&v, &name)?);
    }
    let mut options = ferrite::onnx::Options {
        dims: dims.unwrap_or_default(),
        ..Default::default()
    };
    loop {
        match py.detach(|| ferrite::onnx::load_with(&path, &options)) {
            Ok(model) => {
                let names = Names {
                    inputs: model
                        .inputs
                        .iter()
                        .map(|b| (b.onnx.clone(), b.name.clone()))
                        .collect(),
                    outputs: model.outputs.iter().map(|b| b.onnx.clone()).collect(),
                };
                return Ok(PyGraph::loaded(model.graph, Some(names)));
            }
            Err(ferrite::Error::Onnx { path: p, error }) => match *error {
                ferrite::onnx::ImportError::NeedsValue {
                    node,
                    operand,
                    input,
                } if !options.values.contains_key(&input) => match given.remove(&input) {
                    Some(t) => {
                        options.values.insert(input, t.into_ir());
                    }
                    None => {
                        return Err(OnnxError::new_err(format!(
                            "{}: {node}: operand `{operand}` must be known at import time; it is graph input `{input}`: give it with values={{\"{input}\": array}}",
                            path.display()
                        )))
                    }
                },
                // The CLI's message, with the keyword argument for its flag.
                ferrite::onnx::ImportError::SymbolicDim { input, dim, axis } => {
                    return Err(OnnxError::new_err(crate::errors::short(&format!(
                        "{}: input `{input}` has symbolic dimension `{dim}` (axis {axis}); give it a value with dims={{\"{dim}\": N}}",
                        path.display()
                    ))))
                }
                error => {
                    return Err(to_py(ferrite::Error::Onnx {
                        path: p,
                        error: Box::new(error),
                    }))
                }
            },
            Err(e) => return Err(read_error(e)),
        }
    }
}

/// Reads, parses and verifies a `.fg` file as `ferrite check` does.
fn load_fg(path: &Path, limit: u64) -> PyResult<ferrite::ir::Graph> {
    let bytes = ferrite::files::read_bounded(path, limit, "max_text_size=").map_err(read_error)?;
    let graph = ferrite::api::weights::parse_file(path, &bytes).map_err(to_py)?;
    ferrite::verify(&graph).map_err(|e| {
        crate::errors::InternalError::new_err(format!(
            "`{}` parsed into a graph the verifier rejects: {e}",
            path.display()
        ))
    })?;
    Ok(graph)
}

/// A file error worded as the CLI words it (`cannot read `PATH`: ...`).
fn read_error(e: ferrite::Error) -> PyErr {
    match e {
        ferrite::Error::Io { path, message } => FileError::new_err(crate::errors::short(&format!(
            "cannot read `{}`: {message}",
            path.display()
        ))),
        e => to_py(e),
    }
}

/// Compiles `graph` for `target`:
///
/// - `"cpu"` (default): Cranelift-JIT'd kernels on a thread pool; `threads` threads
///   (default: `FERRITE_NUM_THREADS`, else one per core; at most 1024);
/// - `"sim"`: tile kernels on the simulated MTIA-like accelerator;
/// - `"interp"`: the reference interpreter on the graph as given (no pipeline);
/// - `"loops"`: the loop-IR evaluator on the scheduled program.
///
/// `fuse=False` compiles the unfused baseline (one kernel per primitive op),
/// `optimize=False` skips the e-graph optimizer, `dump` writes every stage to a
/// folder (as `ferrite compile --dump`), `memory_limit` is the memory budget of a run
/// in bytes, `flush_denormals` runs CPU code with FTZ/DAZ. The GIL is released while
/// compiling.
#[pyfunction]
#[pyo3(signature = (graph, target="cpu", threads=None, fuse=true, optimize=true, dump=None, memory_limit=None, flush_denormals=false))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    graph: &Bound<'_, PyGraph>,
    target: &str,
    threads: Option<usize>,
    fuse: bool,
    optimize: bool,
    dump: Option<PathBuf>,
    memory_limit: Option<u64>,
    flush_denormals: bool,
) -> PyResult<PyProgram> {
    let g = graph.get().to_ir()?;
    let target: Target = target.parse().map_err(to_py)?;
    let mut options = Options::default()
        .target(target)
        .fuse(fuse)
        .optimize(optimize)
        .flush_denormals(flush_denormals);
    if let Some(t) = threads {
        options = options.threads(t);
    }
    if let Some(d) = dump {
        options = options.dump(d);
    }
    if let Some(m) = memory_limit {
        options = options.memory_limit(m);
    }
    let names = graph.get().names.clone();
    let exe = py
        .detach(|| ferrite::compile_ir(&g, &options))
        .map_err(to_py)?;
    Ok(PyProgram {
        input_names: param_names(&g, names.as_ref()),
        output_names: output_names(&g, names.as_ref()),
        graph_names: exe.input_names().to_vec(),
        exe,
    })
}

/// A compiled program. Run it on numpy arrays as often as needed, from any thread
/// (the GIL is released while it runs).
///
/// Inputs are copied once into Ferrite's tensors (numpy's memory is borrowed only for
/// that copy); outputs are numpy arrays that own the program's result buffers, with
/// no copy (`bf16` aside: numpy has no such dtype; its bits come back as `uint16`,
/// viewed as `ml_dtypes.bfloat16` when that package is installed).
#[pyclass(module = "ferrite._ferrite", name = "Program", frozen)]
pub struct PyProgram {
    exe: Compiled,
    /// The names `run` takes inputs by (an ONNX model's ONNX names).
    input_names: Vec<String>,
    /// The graph's parameter names, in the same order.
    graph_names: Vec<String>,
    output_names: Vec<String>,
}

impl PyProgram {
    /// The input tensors in parameter order, from positional and named arguments.
    fn inputs(
        &self,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Tensor>> {
        let named = kwargs.map(|k| k.len()).unwrap_or(0);
        if named == 0 {
            return args
                .iter()
                .enumerate()
                .map(|(i, a)| to_tensor(&a, &self.label(i)))
                .collect();
        }
        if !args.is_empty() {
            return Err(InputError::new_err(
                "give the inputs either by position or by name, not both",
            ));
        }
        let mut slots: Vec<Option<Tensor>> = vec![None; self.input_names.len()];
        for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
            let key: String = key.extract()?;
            let index = self
                .input_names
                .iter()
                .position(|n| *n == key)
                .or_else(|| self.graph_names.iter().position(|n| *n == key));
            let Some(i) = index else {
                return Err(to_py(ferrite::Error::UnknownInput {
                    name: key,
                    inputs: self.input_names.clone(),
                }));
            };
            if slots[i].is_some() {
                return Err(to_py(ferrite::Error::DuplicateInput { name: key }));
            }
            slots[i] = Some(to_tensor(&value, &self.label(i))?);
        }
        slots
            .into_iter()
            .zip(&self.input_names)
            .map(|(t, name)| {
                t.ok_or_else(|| to_py(ferrite::Error::MissingInput { name: name.clone() }))
            })
            .collect()
    }

    fn label(&self, i: usize) -> String {
        match self.input_names.get(i) {
            Some(n) => format!("input {i} (`{n}`)"),
            None => format!("input {i}"),
        }
    }

    fn arrays<'py>(py: Python<'py>, outputs: Vec<Tensor>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        outputs.into_iter().map(|t| to_array(py, t)).collect()
    }
}

#[pymethods]
impl PyProgram {
    /// Runs the program: inputs by position (`run(x, w)`) or by name (`run(x=x,
    /// w=w)`, ONNX names for a model), as numpy arrays (or anything `numpy.asarray`
    /// takes) of exactly the parameters' dtypes and shapes; returns the outputs as a
    /// list of numpy arrays.
    #[pyo3(signature = (*args, **kwargs))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let inputs = self.inputs(args, kwargs)?;
        let outputs = py.detach(|| self.exe.run(&inputs)).map_err(to_py)?;
        Self::arrays(py, outputs)
    }

    /// `run`, returning the one output itself, or a tuple of several.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut outputs = self.run(py, args, kwargs)?;
        if outputs.len() == 1 {
            return Ok(outputs.remove(0));
        }
        Ok(PyTuple::new(py, outputs)?.into_any())
    }

    /// Profiles the program kernel by kernel against its unfused baseline, as
    /// `ferrite profile` does, on the inputs given as to `run`: on the CPU one warm-up
    /// and `runs` timed runs of each schedule, on the simulator one simulated run.
    /// Returns the report as a dict (the documented `ferrite-profile` JSON format:
    /// `report["schedules"]["fused"]["kernels"]`, `report["speedup"]`, ...); `trace` writes a
    /// Chrome trace (Perfetto, chrome://tracing) to that path; `table=True` returns
    /// the text table `ferrite profile` prints instead of the dict.
    #[pyo3(signature = (*args, runs=10, trace=None, table=false, **kwargs))]
    fn profile<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        runs: usize,
        trace: Option<PathBuf>,
        table: bool,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inputs = self.inputs(args, kwargs)?;
        let report = py
            .detach(|| self.exe.profile_report(&inputs, runs))
            .map_err(to_py)?;
        if let Some(path) = trace {
            let text = ferrite::profile::chrome_trace(&report);
            std::fs::write(&path, text).map_err(|e| {
                FileError::new_err(format!("cannot write `{}`: {e}", path.display()))
            })?;
        }
        if table {
            let text = ferrite::profile::render_table(&report);
            return Ok(text.into_pyobject(py)?.into_any());
        }
        let json = ferrite::profile::to_json(&report);
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Inputs made as `ferrite run` makes them: input `i` is random from `seed + i`
    /// (floats uniform in [-1, 1), integers in [0, 10), bools fair).
    #[pyo3(signature = (seed=0))]
    fn random_inputs<'py>(&self, py: Python<'py>, seed: u64) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let tensors = self
            .exe
            .input_types()
            .iter()
            .enumerate()
            .map(|(i, ty)| Tensor::random(ty, seed.wrapping_add(i as u64)))
            .collect::<ferrite::Result<Vec<_>>>()
            .map_err(to_py)?;
        Self::arrays(py, tensors)
    }

    /// The names `run` takes inputs by, in order.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.input_names.clone()
    }

    /// The outputs' names, in order (ONNX names for a model; `output<i>` for an
    /// unnamed one).
    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.output_names.clone()
    }

    /// `(dtype, shape)` of each input.
    #[getter]
    fn input_types<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.exe
            .input_types()
            .iter()
            .map(|t| type_pair(py, t))
            .collect()
    }

    /// `(dtype, shape)` of each output.
    #[getter]
    fn output_types<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.exe
            .output_types()
            .iter()
            .map(|t| type_pair(py, t))
            .collect()
    }

    /// The target it was compiled for (`"cpu"`, `"sim"`, `"interp"`, `"loops"`).
    #[getter]
    fn target(&self) -> String {
        self.exe.target().name().to_string()
    }

    /// The number of kernels (`None` for the interpreter, which has none).
    #[getter]
    fn kernel_count(&self) -> Option<usize> {
        self.exe.kernel_count()
    }

    /// The time `compile` took, in seconds.
    #[getter]
    fn compile_time(&self) -> f64 {
        self.exe.compile_time().as_secs_f64()
    }

    /// The time of each compiler stage, in seconds, in pipeline order.
    #[getter]
    fn stage_times(&self) -> Vec<(String, f64)> {
        self.exe
            .stage_times()
            .iter()
            .map(|(name, t)| (name.to_string(), t.as_secs_f64()))
            .collect()
    }

    /// The optimized graph as `.fg` text (`None` for the interpreter).
    fn optimized_fg(&self) -> Option<String> {
        self.exe.optimized_graph().map(ferrite::print)
    }

    /// The generated code as text: the CPU plan and Cranelift IR, or the tile kernels
    /// (`None` for the interpreter and the loop-IR evaluator).
    fn code_text(&self) -> Option<String> {
        self.exe.code_text()
    }

    /// The memory one run needs, estimated, in bytes (checked against the budget
    /// before every run).
    #[getter]
    fn run_memory_bytes(&self) -> u64 {
        self.exe.run_memory_bytes()
    }

    fn __repr__(&self) -> String {
        let kernels = match self.exe.kernel_count() {
            Some(k) => format!(", {k} kernels"),
            None => String::new(),
        };
        format!(
            "<ferrite.Program {} on {}{kernels}>",
            self.exe.graph().name,
            self.exe.target()
        )
    }
}

//! The inputs of `ferrite run` and `ferrite profile`: `--input NAME=FILE` files (`.npy`,
//! or an ONNX `TensorProto` `.pb`), each checked against its parameter, and
//! deterministic random values for the parameters not given (parameter `i` is
//! `Tensor::random(type, seed + i)`), so both commands run on the same inputs from the
//! same flags.

use super::{random_input, read_npy, read_tensor_file, CliError, Loaded};
use ferrite::ir::Graph;
use ferrite::Tensor;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The inputs a command made, and where each came from.
pub struct Inputs {
    /// One tensor per parameter, in order.
    pub tensors: Vec<Tensor>,
    /// `NAME from FILE` for each parameter read from a file.
    pub loaded: Vec<String>,
    /// The parameters that got random values.
    pub random: Vec<String>,
}

/// The `--input` files under the graph's parameter names: an ONNX model's inputs are
/// named as in the model, and the graph may spell them otherwise; the inputs that the
/// import bound as constants are left out.
pub fn given_inputs(source: &Loaded, inputs: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    match &source.onnx {
        None => inputs.to_vec(),
        Some(model) => inputs
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
    }
}

/// Checks the `--input` names against the parameters (each must name one, once)
/// before anything is compiled or read.
pub fn check_names(g: &Graph, given: &[(String, PathBuf)]) -> Result<(), CliError> {
    match_inputs(g, given).map(|_| ())
}

/// One tensor per parameter of `g`: read from its `--input` file (within `spare` bytes
/// beyond the tensor itself), or random from `seed`.
pub fn make_inputs(
    g: &Graph,
    given: &[(String, PathBuf)],
    seed: u64,
    spare: u64,
    err: &mut dyn Write,
) -> Result<Inputs, CliError> {
    let from_files = match_inputs(g, given)?;
    let mut made = Inputs {
        tensors: Vec::with_capacity(g.params.len()),
        loaded: Vec::new(),
        random: Vec::new(),
    };
    for (i, &p) in g.params.iter().enumerate() {
        let name = param_name(g, i);
        let ty = g.ty(p);
        let tensor = match from_files.get(name) {
            Some(path) => {
                let budget = spare.saturating_add(ty.size_bytes() as u64);
                let t = load_input(name, ty, path, budget, err)?;
                made.loaded.push(format!("{name} from {}", path.display()));
                t
            }
            None => {
                made.random.push(name.to_string());
                random_input(g, i, seed)?
            }
        };
        made.tensors.push(tensor);
    }
    Ok(made)
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

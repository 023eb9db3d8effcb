//! `ferrite convert MODEL.onnx -o OUT.fg`: an ONNX model as a `.fg` graph, with its
//! weights in a safetensors file beside it (`OUT.safetensors`, named by the graph's
//! `weights "FILE"` line), so that `ferrite run OUT.fg` computes what the model does.
//!
//! Only those two files are written, both inside the folder of `-o`: a `-o` with a `..`
//! component, or a target that is a symbolic link, is refused ([`ferrite::save`]).

use super::{load_any, CliError, CliResult, TextLimit};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite convert`.
#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The ONNX model (.onnx).
    pub file: PathBuf,
    /// The graph file to write (.fg); the weights go beside it as `<stem>.safetensors`.
    #[arg(short, long, value_name = "OUT.fg")]
    pub output: PathBuf,
    /// Symbolic dimensions of the model.
    #[command(flatten)]
    pub dims: super::DimArgs,
    /// The value of input NAME, from a .npy or .pb file (repeatable), for inputs the
    /// import needs to know (a shape); it becomes a constant of the graph.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = super::parse_name_eq_path)]
    pub inputs: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub limit: TextLimit,
}

/// Imports the model, writes the graph and its weights, and reads them back to check
/// that they load.
pub fn convert(args: &ConvertArgs, out: &mut dyn Write) -> CliResult {
    if !super::is_onnx(&args.file) {
        return Err(CliError::User(format!(
            "`{}` is not an ONNX model (.onnx)",
            args.file.display()
        )));
    }
    let out_path = &args.output;
    if out_path.extension().is_none_or(|e| e != "fg") {
        return Err(CliError::User(format!(
            "the output `{}` must be a .fg file",
            out_path.display()
        )));
    }
    let loaded = load_any(&args.file, &args.limit, &args.dims, &args.inputs)?;
    ferrite::save(&loaded.graph, out_path).map_err(|e| match e {
        ferrite::Error::Io { path, message } => {
            CliError::User(format!("cannot write `{}`: {message}", path.display()))
        }
        e => e.into(),
    })?;
    let back = ferrite::load(out_path).map_err(|e| {
        CliError::Internal(format!(
            "the converted graph `{}` does not load back: {e}",
            out_path.display()
        ))
    })?;
    let weights = match &back.weights {
        Some(w) => format!(" and {w}"),
        None => String::new(),
    };
    writeln!(
        out,
        "{} -> {}{weights} (graph {}: {} ops)",
        args.file.display(),
        out_path.display(),
        back.name,
        back.op_count()
    )?;
    if !loaded.bound.is_empty() {
        writeln!(
            out,
            "note: inputs {} became constants of the graph",
            loaded.bound.join(", ")
        )?;
    }
    Ok(())
}

//! `ferrite check FILE`: parse and verify a graph, print a one-line summary.

use super::{count, load_any, CliResult, TextLimit};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The graph file (.fg) or ONNX model (.onnx).
    pub file: PathBuf,
    #[command(flatten)]
    pub limit: TextLimit,
    /// Symbolic dimensions of an ONNX model.
    #[command(flatten)]
    pub dims: super::DimArgs,
}

/// Prints e.g. `mlp.fg: ok (graph mlp: 4 params, 5 ops, 1 output)`.
pub fn check(args: &CheckArgs, out: &mut dyn Write) -> CliResult {
    let graph = load_any(&args.file, &args.limit, &args.dims, &[])?.graph;
    writeln!(
        out,
        "{}: ok (graph {}: {}, {}, {})",
        args.file.display(),
        super::short(&graph.name),
        count(graph.params.len(), "param"),
        count(graph.op_count(), "op"),
        count(graph.outputs.len(), "output"),
    )?;
    Ok(())
}

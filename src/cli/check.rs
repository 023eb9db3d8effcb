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

/// Prints e.g. `mlp.fg: ok (graph mlp: 4 params, 5 ops, 1 output)`; a graph with size
/// symbols and no `--dim` is checked symbolically and its symbols listed.
pub fn check(args: &CheckArgs, out: &mut dyn Write) -> CliResult {
    if !super::is_onnx(&args.file) && args.dims.dims.is_empty() {
        let (parsed, _) = super::load_fg(&args.file, &args.limit)?;
        if let ferrite::ir::text::Parsed::Symbolic(g) = parsed {
            let params = g.params().len();
            let symbols: Vec<String> = g
                .facts()
                .symbols
                .iter()
                .map(|s| {
                    if s.hi == ferrite::ir::sym::DEFAULT_MAX {
                        s.name.to_string()
                    } else {
                        format!("{} in {}..={}", s.name, s.lo, s.hi)
                    }
                })
                .collect();
            writeln!(
                out,
                "{}: ok (graph {}: {}, {}, {}; size symbols {}, {})",
                args.file.display(),
                super::short(g.name()),
                count(params, "param"),
                count(g.op_count(), "op"),
                count(g.output_types().len(), "output"),
                symbols.join(", "),
                count(g.facts().constraints.len(), "constraint"),
            )?;
            return Ok(());
        }
    }
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

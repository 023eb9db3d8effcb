//! `ferrite grad FILE --wrt NAME,..`: the joint forward + backward graph of a graph whose
//! output is a scalar loss (or, with `--vjp`, of any outputs, with one cotangent input
//! per output), as `.fg` text that every other command takes; with `--partition`, that
//! graph split into a forward and a backward graph by the min-cut partitioner.

use super::{load_any, CliError, CliResult, TextLimit};
use clap::Args;
use ferrite::passes::{autodiff, partition};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite grad`.
#[derive(Args, Debug)]
pub struct GradArgs {
    /// The graph file (.fg) or ONNX model (.onnx).
    pub file: PathBuf,
    /// The values to differentiate with respect to: parameter or value names, comma-separated
    /// (repeatable).
    #[arg(long, value_name = "NAME,..", value_delimiter = ',', required = true)]
    pub wrt: Vec<String>,
    /// Which output is the loss (a float scalar), counting from 0.
    #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "vjp")]
    pub loss: usize,
    /// A vector-Jacobian product of every output instead: each float output gets a
    /// cotangent input `grad_<output>`.
    #[arg(long)]
    pub vjp: bool,
    /// Split the joint graph into a forward and a backward graph, the saved values chosen
    /// by a minimum cut (cheap ops recomputed in the backward), and print both graphs
    /// after a report of saved bytes (naive vs min-cut) and recomputed ops.
    #[arg(long)]
    pub partition: bool,
    /// Write the joint graph (with `--partition`, the report and both graphs) to this
    /// file instead of standard output.
    #[arg(short, long, value_name = "OUT.fg")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub limit: TextLimit,
    /// Symbolic dimensions of an ONNX model.
    #[command(flatten)]
    pub dims: super::DimArgs,
}

/// Prints (or writes) the joint graph.
pub fn grad(args: &GradArgs, out: &mut dyn Write, err: &mut dyn Write) -> CliResult {
    let g = load_any(&args.file, &args.limit, &args.dims, &[])?.graph;
    let mut wrt = Vec::with_capacity(args.wrt.len());
    for name in &args.wrt {
        match g.find(name.trim()) {
            Some(v) => wrt.push(v),
            None => {
                return Err(CliError::User(format!(
                    "`{}` has no value named `{}` (--wrt takes parameter or value names)",
                    args.file.display(),
                    super::short(name)
                )))
            }
        }
    }
    let user_error = |e: ferrite::passes::Error| match e.is_internal() {
        true => CliError::Internal(e.to_string()),
        false => CliError::User(format!("{}: {e}", args.file.display())),
    };
    let joint = if args.vjp {
        autodiff::vjp(&g, &wrt)
    } else {
        autodiff::grad(&g, args.loss, &wrt)
    }
    .map_err(user_error)?;
    let saved = autodiff::saved_for_backward(&g, &joint);
    writeln!(
        err,
        "saved for backward: {} ({}), and {} of the inputs",
        super::count(saved.activations.len(), "activation"),
        super::compile::bytes(saved.activation_bytes),
        saved.inputs.len()
    )?;
    let (text, what) = if args.partition {
        let p = partition::partition(&joint, g.outputs.len()).map_err(user_error)?;
        let what = format!(
            "forward and backward graphs of `{}` (saved {} bytes, naive {} bytes)",
            super::short(&joint.name),
            p.report.min_cut_bytes(),
            p.report.naive_bytes()
        );
        (p.text(), what)
    } else {
        let what = format!(
            "joint graph of `{}` ({} gradients, {} ops)",
            super::short(&joint.name),
            wrt.len(),
            joint.op_count()
        );
        (ferrite::print(&joint), what)
    };
    match &args.output {
        None => out.write_all(text.as_bytes())?,
        Some(path) => {
            std::fs::write(path, text.as_bytes())
                .map_err(|e| CliError::User(format!("cannot write `{}`: {e}", path.display())))?;
            writeln!(out, "{}: {what}", path.display())?;
        }
    }
    Ok(())
}

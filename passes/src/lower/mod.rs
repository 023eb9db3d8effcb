//! Lowering: primitive graph nodes to loop-IR kernels.
//!
//! This module holds the one code generator that both schedules use. A [`Plan`] says how
//! every graph value is obtained: loaded from a parameter, folded in as a constant,
//! computed by a scheduled node (an [`SNode`], which owns a buffer when its value is
//! needed outside its kernel), or — in fused mode — inlined into every consumer: views
//! become index arithmetic, and values that read no memory (`full`, `arange` and
//! elementwise ops over them) are recomputed. A *group* of scheduled nodes becomes one
//! kernel ([`build_kernel`]); fusion ([`crate::fuse`]) decides the groups, [`lower_unfused`]
//! makes every group a single node (the `--no-fuse` baseline).
//!
//! How a group becomes a kernel:
//!
//! - its outer domain is the kept shape of its reductions (all must agree), or the
//!   shape of what it stores; axes of extent 1 are dropped;
//! - every reduction (`sum`, `max`, `argmax`, `matmul`, ..) becomes an accumulator of a
//!   reduction stage, in dependency order; reductions over equal inner domains that do
//!   not depend on each other share one loop;
//! - every value the group must store (read by another kernel, or a graph output)
//!   becomes a write of a store stage: one per outer point (also through a permute or
//!   reshape of the domain, so a transposed layout is written directly), or a loop over
//!   the inner domain of a reduction whose input has the value's shape (a softmax row);
//! - values are computed on demand at index expressions (`KernelBuilder::value_at`):
//!   elementwise ops recurse into their operands at broadcast coordinates, movement ops
//!   rewrite the coordinates, reductions of the group are read as accumulators (only at
//!   the current outer point), and values from elsewhere are loads.
//!
//! A group that cannot become a kernel is refused with a named rule ([`Refusal`]), which
//! fusion records so a dump can say why two nodes were not fused.
//!
//! One file per concept, in the order data flows through them: `plan` (roles, scheduled
//! nodes, buffers), `kernel` (kernel assembly), `value` (value generation), `gemm` (the
//! GEMM description of a matmul kernel), `scatter` (the kernel of an `index_add`, whose
//! stores go where its index says); `domain` holds the shape-to-loop-domain helpers
//! they share and `refusal` the ways assembly can fail.

mod domain;
mod gemm;
mod kernel;
mod pad;
mod plan;
mod refusal;
mod scatter;
mod signature;
mod value;

pub(crate) use kernel::build_unnamed;
pub use kernel::{build_kernel, materialize_gemm_operands};
pub use plan::{Layout, Plan, Role, SNode};
pub use refusal::{LowerError, Refusal};
pub use signature::{signature, Signature};

use crate::error::{Error, Result};
use ferrite_ir::loops::{KernelId, Program};
use ferrite_ir::parallel::parallel_map;
use ferrite_ir::Graph;

/// Lowers a primitive graph with one kernel per primitive op, every value
/// materialized (views and output copies included): the `--no-fuse` baseline. The kernels
/// are built on up to `threads` threads (the program does not depend on it).
pub fn lower_unfused(g: &Graph, threads: usize) -> Result<Program> {
    let plan = Plan::unfused(g);
    let groups: Vec<Vec<usize>> = (0..plan.snodes.len()).map(|s| vec![s]).collect();
    assemble(&plan, &groups, threads)
}

/// Builds the program for `groups` (each a kernel, in execution order), the kernels on
/// up to `threads` threads (the program does not depend on it).
pub fn assemble(plan: &Plan, groups: &[Vec<usize>], threads: usize) -> Result<Program> {
    let layout = Layout::for_groups(plan, groups);
    let build = |i: usize| {
        build_kernel(plan, &layout, &groups[i], KernelId(i as u32)).map_err(|e| match e {
            LowerError::Refused(r) => Error::Internal(format!("kernel {i} cannot be built: {r}")),
            LowerError::Failed(e) => e,
        })
    };
    let kernels = parallel_map(groups.len(), threads, build)
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let outputs = layout
        .of_output
        .iter()
        .enumerate()
        .map(|(i, b)| b.ok_or_else(|| Error::Internal(format!("output {i} has no buffer"))))
        .collect::<Result<Vec<_>>>()?;
    let inputs = plan
        .g
        .params
        .iter()
        .map(|p| {
            layout.of_value[p.index()].ok_or_else(|| Error::internal("a parameter has no buffer"))
        })
        .collect::<Result<Vec<_>>>()?;
    let p = Program {
        name: plan.g.name.clone(),
        buffers: layout.buffers,
        inputs,
        outputs,
        kernels,
        constants: layout.constants,
        donated: Vec::new(),
    };
    p.verify()
        .map_err(|e| Error::Internal(format!("lowered program is invalid: {e}")))?;
    Ok(p)
}

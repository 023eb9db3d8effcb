//! The schedule entry point: a primitive graph to a loop-IR program and its memory plan.
//!
//! ```text
//! schedule(g)  =  index checks  ->  fuse (or lower_unfused, for --no-fuse)  ->  assemble kernels  ->  verify  ->  plan_memory
//! ```
//!
//! (`index_checks` adds a check kernel for an index op whose result is empty or read only in
//! part, whose index no kernel of its own would check in full.)
//!
//! The input must be primitive (run `decompose` first); the output program is
//! verified, and the fusion decisions are kept so a dump can say why each fusion was
//! made or refused.

use crate::error::{Error, Result};
use crate::fuse::{fuse, FusionDecision, FusionStats, MAX_FUSION_SIZE};
use crate::index_checks::add_index_checks;
use crate::lower::{assemble, lower_unfused};
use crate::memory::{plan_memory, MemoryPlan};
use ferrite_ir::loops::Program;
use ferrite_ir::{verify, Graph};
use std::fmt::Write;

/// How to schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Fuse into few kernels (`true`) or emit one kernel per primitive op (`--no-fuse`).
    pub fuse: bool,
    /// The most graph nodes one fused kernel may hold.
    pub max_fusion_size: usize,
    /// Threads the fusion planner may build candidate kernels on (0 and 1: the calling
    /// thread only). The result does not depend on it. [`lower_graph`] sets it from
    /// [`PipelineOptions::threads`].
    ///
    /// [`lower_graph`]: crate::pipeline::lower_graph
    /// [`PipelineOptions::threads`]: crate::pipeline::PipelineOptions::threads
    pub threads: usize,
}

impl Default for ScheduleOptions {
    fn default() -> ScheduleOptions {
        ScheduleOptions {
            fuse: true,
            max_fusion_size: MAX_FUSION_SIZE,
            threads: 1,
        }
    }
}

impl ScheduleOptions {
    /// The `--no-fuse` baseline.
    pub fn unfused() -> ScheduleOptions {
        ScheduleOptions {
            fuse: false,
            ..ScheduleOptions::default()
        }
    }
}

/// A scheduled graph.
#[derive(Clone, Debug)]
pub struct Scheduled {
    /// The kernels and buffers.
    pub program: Program,
    /// Where intermediates live; `memory.peak_bytes()` is the peak intermediate memory.
    pub memory: MemoryPlan,
    /// Every fusion made or refused, in order (empty when not fusing).
    pub decisions: Vec<FusionDecision>,
    /// How much work the fusion planner did (zero when not fusing).
    pub fusion_stats: FusionStats,
}

impl Scheduled {
    /// The fusion decisions as text, one per line.
    pub fn decisions_text(&self) -> String {
        let mut s = String::new();
        for d in &self.decisions {
            let _ = writeln!(s, "{d}");
        }
        s
    }
}

/// Schedules the primitive graph `g` (see the module docs).
pub fn schedule(g: &Graph, opts: &ScheduleOptions) -> Result<Scheduled> {
    verify(g).map_err(|e| Error::InvalidGraph(format!("schedule: the graph is invalid: {e}")))?;
    if let Some((i, n)) = g
        .nodes
        .iter()
        .enumerate()
        .find(|(_, n)| !n.op.is_primitive())
    {
        return Err(Error::InvalidGraph(format!(
            "schedule: %{i} is `{}`, which is not primitive (run decompose first)",
            n.op.name()
        )));
    }
    let checked = add_index_checks(g)?;
    let g = checked.as_ref().unwrap_or(g);
    let (program, decisions, fusion_stats) = if opts.fuse {
        let f = fuse(g, opts.max_fusion_size, opts.threads)?;
        (
            assemble(&f.plan, &f.groups, opts.threads)?,
            f.decisions,
            f.stats,
        )
    } else {
        (
            lower_unfused(g, opts.threads)?,
            Vec::new(),
            FusionStats::default(),
        )
    };
    let memory = plan_memory(&program);
    Ok(Scheduled {
        program,
        memory,
        decisions,
        fusion_stats,
    })
}

//! The compiler pipeline: a straight list of named passes, each timed, each
//! followed by the verifier, each leaving a text dump.
//!
//! ```text
//! decompose  ->  optimize (egg)  ->  schedule (fuse + memory plan)
//! ```
//!
//! The `decompose` stage first folds constant batch norms (and other per-channel
//! scales and shifts) into the constant weight of the conv before them
//! ([`crate::fold`]), while the graph still has its `conv` nodes.
//!
//! The texts are made only when [`PipelineOptions::texts`] asks for them (a dump): printing
//! a model's graph with its constants costs more than optimizing it.
//!
//! Parsing happens before (in the facade, which owns I/O) and code generation after
//! (in `ferrite-cpu` and `ferrite-accel`); both append their own [`StageRecord`]s so that a dump
//! directory lists every stage in pipeline order.

use crate::decompose::{decompose, decompose_verified};
use crate::error::{Error, Result};
use crate::fold::fold_conv_epilogues;
use crate::index_checks::keep_dropped_index_checks;
use crate::optimize::{optimize_verified, OptimizeConfig, OptimizeReport};
use crate::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_ir::{print, verify, Graph};
use std::time::{Duration, Instant};

/// What the pipeline does.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PipelineOptions {
    /// E-graph optimizer limits; `optimize.enabled = false` skips it.
    pub optimize: OptimizeConfig,
    /// Fusion on or off, and the fusion size cap.
    pub schedule: ScheduleOptions,
    /// Whether each stage's text is made (for `--dump`); off, [`StageRecord::text`] is empty.
    pub texts: bool,
    /// Threads the passes may spread independent work over (scaling folded weights,
    /// building the fusion planner's candidate kernels); 0 and 1 are the calling thread
    /// only. No result depends on it. It overrides `schedule.threads`.
    pub threads: usize,
}

/// One stage of a compile: its name, how long it took and what it produced, as text.
#[derive(Clone, Debug)]
pub struct StageRecord {
    /// The stage name (`decompose`, `optimize`, ...).
    pub name: &'static str,
    /// Wall-clock time of the stage.
    pub time: Duration,
    /// File name for `--dump DIR` (numbered in pipeline order by the writer).
    pub file: &'static str,
    /// The stage's output as text; empty unless [`PipelineOptions::texts`] was set.
    pub text: String,
}

/// The result of running the pipeline on a graph.
#[derive(Clone, Debug)]
pub struct Lowered {
    /// The graph after `decompose`: primitives only.
    pub decomposed: Graph,
    /// The graph after the e-graph optimizer (equal to `decomposed` when disabled).
    pub optimized: Graph,
    /// What the optimizer did.
    pub optimize_report: OptimizeReport,
    /// The loop-IR program, memory plan and fusion decisions.
    pub scheduled: Scheduled,
    /// Every stage in order, with timings and dumps.
    pub stages: Vec<StageRecord>,
}

impl Lowered {
    /// Total time of the stages recorded so far.
    pub fn total_time(&self) -> Duration {
        self.stages.iter().map(|s| s.time).sum()
    }
}

/// Runs `f`, checks its result with `check` in debug builds, and records the stage. A
/// result that fails the check is the stage's bug. Each pass verifies its own result
/// (`decompose` and `optimize` their graphs, `assemble` the loop-IR program) and
/// `schedule` its input graph, so a release build does not verify each a second time.
fn stage<T, E: std::fmt::Display>(
    stages: &mut Vec<StageRecord>,
    texts: bool,
    name: &'static str,
    file: &'static str,
    f: impl FnOnce() -> Result<T>,
    check: impl FnOnce(&T) -> Result<(), E>,
    text: impl FnOnce(&T) -> String,
) -> Result<T> {
    let start = Instant::now();
    let out = f().map_err(|e| e.context(name))?;
    let time = start.elapsed();
    if cfg!(debug_assertions) {
        check(&out)
            .map_err(|e| Error::Internal(format!("{name} produced an invalid result: {e}")))?;
    }
    stages.push(StageRecord {
        name,
        time,
        file,
        text: if texts { text(&out) } else { String::new() },
    });
    Ok(out)
}

/// Runs decompose, optimize and schedule on a verified graph.
pub fn lower_graph(g: &Graph, opts: &PipelineOptions) -> Result<Lowered> {
    verify(g).map_err(|e| Error::InvalidGraph(format!("the input graph is invalid: {e}")))?;
    let mut stages = Vec::new();
    let decomposed = stage(
        &mut stages,
        opts.texts,
        "decompose",
        "decomposed.fg",
        || match fold_conv_epilogues(g, opts.threads)? {
            Some((folded, _)) => decompose(&folded),
            None => decompose_verified(g),
        },
        verify,
        print,
    )?;
    let (optimized, optimize_report) = stage(
        &mut stages,
        opts.texts,
        "optimize",
        "optimized.fg",
        || {
            let (optimized, report) = optimize_verified(&decomposed, &opts.optimize)?;
            // An index op the optimizer removed still has its index checked.
            match keep_dropped_index_checks(&decomposed, &optimized)? {
                Some(checked) => Ok((checked, report)),
                None => Ok((optimized, report)),
            }
        },
        |(g, _)| verify(g),
        |(g, report)| {
            let mut text = String::new();
            for line in report.to_string().lines() {
                text.push_str("# ");
                text.push_str(line);
                text.push('\n');
            }
            text + &print(g)
        },
    )?;
    let scheduled = stage(
        &mut stages,
        opts.texts,
        "schedule",
        "kernels.loop",
        || {
            let options = ScheduleOptions {
                threads: opts.threads,
                ..opts.schedule.clone()
            };
            schedule(&optimized, &options)
        },
        |s| s.program.verify(),
        |s| {
            let mut text = s.program.to_string();
            if !s.decisions.is_empty() {
                text.push_str("\n# fusion decisions\n");
                for line in s.decisions_text().lines() {
                    text.push_str("# ");
                    text.push_str(line);
                    text.push('\n');
                }
            }
            text
        },
    )?;
    stages.push(StageRecord {
        name: "memory plan",
        time: Duration::ZERO,
        file: "memory.txt",
        text: if opts.texts {
            scheduled.memory.to_string()
        } else {
            String::new()
        },
    });
    Ok(Lowered {
        decomposed,
        optimized,
        optimize_report,
        scheduled,
        stages,
    })
}

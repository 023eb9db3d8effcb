//! How one stage runs: its loop nest, its vector decision, and the report that says so.

use super::vectorize::VectorPlan;
use ferrite_ir::loops::{Stage, Var};
use std::fmt;

/// How one stage runs: its loop nest and whether its innermost loop is vector code.
#[derive(Clone, Debug)]
pub struct StagePlan {
    /// The loops, outermost first: the stage's inner domain, or for a pointwise
    /// kernel the innermost outer axis (its row loop).
    pub loops: Vec<(Var, usize)>,
    /// Per node: a guarded load whose index is clamped into its buffer (it cannot be
    /// proved in bounds; the guard discards the value).
    pub clamped: Vec<bool>,
    /// The innermost loop as vector code, when it can be.
    pub vector: Option<VectorPlan>,
    /// Vector groups per iteration of the unrolled vector loop.
    pub unroll: usize,
    /// What the report says of the stage.
    pub report: StageReport,
}

/// How one stage of a kernel was compiled, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageReport {
    /// The stage's position in its kernel.
    pub stage: usize,
    /// `"reduce"` or `"store"`.
    pub kind: &'static str,
    /// The loop nest, outermost first (`j0 < 512`), empty for a single point.
    pub loops: String,
    /// The vector shape of the innermost loop (`f32x4x4`: four `f32x4` per iteration).
    pub vector: Option<String>,
    /// Why the innermost loop is scalar, when it has one and it is.
    pub scalar_reason: Option<String>,
}

impl fmt::Display for StageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stage {} ({}", self.stage, self.kind)?;
        if !self.loops.is_empty() {
            write!(f, " over {}", self.loops)?;
        }
        write!(f, "): ")?;
        match (&self.vector, &self.scalar_reason) {
            (Some(v), _) => write!(f, "vector {v}"),
            (None, Some(why)) => write!(f, "scalar ({why})"),
            (None, None) => write!(f, "scalar"),
        }
    }
}

/// The report of stage `index` over `loops`, before its vector decision.
pub fn stage_report(stage: &Stage, index: usize, loops: &[(Var, usize)]) -> StageReport {
    StageReport {
        stage: index,
        kind: match stage {
            Stage::Reduce { .. } => "reduce",
            Stage::Store { .. } => "store",
        },
        loops: loops
            .iter()
            .map(|(v, extent)| format!("{v} < {extent}"))
            .collect::<Vec<_>>()
            .join(", "),
        vector: None,
        scalar_reason: None,
    }
}

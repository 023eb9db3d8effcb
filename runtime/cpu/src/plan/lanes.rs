//! Vector lanes across the outer domain, for kernels whose inner loops stride.
//!
//! The usual vector code runs a stage's innermost loop four elements at a time, which
//! needs its accesses contiguous in that loop. A reduction over a leading axis
//! (`sum(x, axes=[0])` of a row-major `[n, m]`: `acc = sum(r0) x[r0*m + i0]`), a softmax
//! over a middle axis, or a matmul without the extern GEMM (`x[i0*k + r0] * w[r0*n + i1]`)
//! strides in its inner loop but is contiguous in the innermost *outer* axis. Those kernels
//! take four neighbouring outer points (or `4u` with unrolling) as the lanes: every value
//! that depends on the last outer coordinate is a vector (lane `l` is point `i + l`),
//! values that do not are scalars splatted where vectors use them, inner loops step one
//! point at a time, and each reduction keeps one accumulator per lane. Points that do not
//! fill a group (the end of a row, or of the thread's range) run the scalar code.
//!
//! Numerics are the scalar code's, lane by lane: float sums and products accumulate in
//! `f64` (two `f64x2` halves per vector), products of a dot are exact in `f64`, and each
//! lane is rounded to `f32` once at the end; max/min keep the first of equal values and
//! let NaN stick, as the scalar `select` does. The results are therefore bit-identical to
//! the scalar code and to the reference evaluator.
//!
//! The decision reuses [`plan_vector`] with the last outer variable as the vector
//! variable: a node "is at the vector level" when it depends on that variable. This is
//! the planning half; the emitter's lanes code translates the plan.

use super::analysis::{live_nodes, mentions, node_indices, split_linear};
use super::stage::StagePlan;
use super::stash::LaneStash;
use super::vectorize::{narrow_i64, plan_vector, Lanes, StageFacts};
use ferrite_ir::loops::{ExprOp, IndexExpr, Kernel, Reduction, Stage, StoreOp, Var};

/// How a kernel runs with lanes across its last outer axis.
#[derive(Clone, Debug)]
pub struct OuterLanes {
    /// `f32x4` groups per step: a step covers `4 * unroll` outer points.
    pub unroll: usize,
    /// Per stage, what is a vector.
    pub stages: Vec<StageLanes>,
    /// When the kernel stashes: the form of the kernel lanes steps run (scratch rows
    /// holding every lane of a group); else lanes steps run the kernel itself.
    pub stash: Option<LaneStash>,
    /// Per stage of a lanes step: its loops, clamped loads and report (the vector
    /// decision is `stages`); filled in by the `vectorize` step.
    pub plans: Vec<StagePlan>,
}

/// The lane plan of one stage.
#[derive(Clone, Debug)]
pub struct StageLanes {
    /// Nodes whose value depends on the last outer coordinate (one vector per group).
    pub varies: Vec<bool>,
    /// The lane form of every vector node and of every splatted scalar.
    pub lanes: Vec<Option<Lanes>>,
    /// Scalar nodes that vector code uses: splatted where they are computed.
    pub splats: Vec<bool>,
}

/// The lanes plan for `kernel`, or `None` when its inner loops vectorize themselves (or
/// it cannot run with outer lanes). `unroll` is the preferred number of groups per step.
pub fn plan_outer_lanes(kernel: &Kernel, unroll: usize) -> Option<OuterLanes> {
    let n = kernel.domain.len();
    if n == 0 || kernel.stages.is_empty() {
        return None;
    }
    let pointwise = kernel.stages.len() == 1 && kernel.stages[0].domain().is_empty();
    if pointwise {
        // Runs as a row loop, vectorized along the row already.
        return None;
    }
    let last = Var::outer(n - 1);
    let extent = kernel.domain[n - 1];
    let unroll = [unroll.clamp(1, 8), 4, 2, 1]
        .into_iter()
        .find(|&u| 4 * u <= extent)?;
    let mut worth = false;
    let mut stages = Vec::with_capacity(kernel.stages.len());
    for stage in &kernel.stages {
        let body = stage.body();
        let len = body.nodes.len();
        let live = live_nodes(stage);
        let ext = stage.extents(&kernel.domain);
        let inner = stage.domain().len().checked_sub(1).map(|k| match stage {
            Stage::Reduce { .. } => Var::reduce(k),
            Stage::Store { .. } => Var::store(k),
        });
        let mut varies = vec![false; len];
        for (i, node) in body.nodes.iter().enumerate() {
            let mut v = matches!(node.op, ExprOp::Acc(_));
            node.for_each_operand(&mut |r| v |= varies.get(r.index()).copied().unwrap_or(false));
            for e in node_indices(&node.op) {
                v |= mentions(e, last);
            }
            varies[i] = v;
            if !live[i] || !v {
                continue;
            }
            match &node.op {
                // Their vector forms step along an inner loop.
                ExprOp::Index(_) | ExprOp::CheckedIndex { .. } => return None,
                ExprOp::Load(l) => {
                    // Worth it when the inner loop could not run as vector code itself.
                    if let Some(iv) = inner {
                        if !matches!(split_linear(&l.index, iv), Some((_, 1))) {
                            worth = true;
                        }
                    }
                }
                _ => {}
            }
        }
        let levels: Vec<usize> = varies.iter().map(|&v| v as usize).collect();
        let narrow = narrow_i64(body, &ext, &[]);
        // Guarded loads that vary are refused by the plan; fixed ones run as scalar code,
        // which clamps them as the emitter decides.
        let clamped = vec![false; len];
        let index_level = |e: &IndexExpr| mentions(e, last) as usize;
        let reductions: &[Reduction] = match stage {
            Stage::Reduce { reductions, .. } => reductions,
            Stage::Store { .. } => &[],
        };
        let stores: &[StoreOp] = stage.stores();
        let facts = StageFacts {
            body,
            levels: &levels,
            live: &live,
            narrow: &narrow,
            clamped: &clamped,
            level: 1,
            var: last,
            index_level: &index_level,
            reductions,
            stores,
            vector_guards: false,
            vector_strides: false,
        };
        let plan = plan_vector(&facts).ok()?;
        let mut splats = vec![false; len];
        for &i in &plan.splats {
            splats[i] = true;
        }
        stages.push(StageLanes {
            varies,
            lanes: plan.lanes,
            splats,
        });
    }
    worth.then_some(OuterLanes {
        unroll,
        stages,
        stash: None,
        plans: Vec::new(),
    })
}

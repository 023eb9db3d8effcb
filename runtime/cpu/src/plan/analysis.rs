//! Facts about loop-IR kernels that the plan steps and the emitter both read: which
//! nodes are live, the loop level each node and index varies at, the linear part of an
//! index in one variable, and the proof that every access stays in its buffer.

use crate::error::{Error, Result};
use ferrite_ir::hash::HashMap;
use ferrite_ir::loops::{
    Block, Buffer, ExprNode, ExprOp, ExprRef, Extents, IndexExpr, Kernel, Stage, StoreOp, Var,
};

/// True when `v` occurs anywhere in `e`.
pub fn mentions(e: &IndexExpr, v: Var) -> bool {
    let mut found = false;
    e.for_each_var(&mut |w| found |= w == v);
    found
}

/// `e` as `(rest, c)` with `e == rest + c*v` and `rest` free of `v`, when `v` occurs only
/// outside floor divisions and modulos; `None` otherwise (or on coefficient overflow).
pub fn split_linear(e: &IndexExpr, v: Var) -> Option<(IndexExpr, i64)> {
    Some(match e {
        IndexExpr::Const(_) | IndexExpr::Dynamic { .. } => (e.clone(), 0),
        IndexExpr::Var(w) if *w == v => (IndexExpr::Const(0), 1),
        IndexExpr::Var(_) => (e.clone(), 0),
        IndexExpr::Sum(ts) => {
            let mut rest = Vec::with_capacity(ts.len());
            let mut c: i64 = 0;
            for t in ts {
                let (r, k) = split_linear(t, v)?;
                rest.push(r);
                c = c.checked_add(k)?;
            }
            (IndexExpr::Sum(rest), c)
        }
        IndexExpr::Mul(x, k) => {
            let (r, c) = split_linear(x, v)?;
            (IndexExpr::Mul(Box::new(r), *k), c.checked_mul(*k)?)
        }
        IndexExpr::FloorDiv(x, _) | IndexExpr::Mod(x, _) => {
            if mentions(x, v) {
                return None;
            }
            (e.clone(), 0)
        }
    })
}

/// `e` with every variable `v` for which `with(v)` is `Some` replaced.
pub fn substitute(e: &IndexExpr, with: &impl Fn(Var) -> Option<IndexExpr>) -> IndexExpr {
    match e {
        IndexExpr::Var(v) => with(*v).unwrap_or_else(|| e.clone()),
        IndexExpr::Const(_) | IndexExpr::Dynamic { .. } => e.clone(),
        IndexExpr::Sum(ts) => IndexExpr::Sum(ts.iter().map(|t| substitute(t, with)).collect()),
        IndexExpr::Mul(x, c) => IndexExpr::Mul(Box::new(substitute(x, with)), *c),
        IndexExpr::FloorDiv(x, c) => IndexExpr::FloorDiv(Box::new(substitute(x, with)), *c),
        IndexExpr::Mod(x, c) => IndexExpr::Mod(Box::new(substitute(x, with)), *c),
    }
}

/// The index expressions a node evaluates.
pub fn node_indices(op: &ExprOp) -> Vec<&IndexExpr> {
    match op {
        ExprOp::Load(l) => std::iter::once(&l.index)
            .chain(l.guard.iter().map(|g| &g.expr))
            .collect(),
        ExprOp::Index(e) => vec![e],
        ExprOp::CheckedIndex { guard, .. } => guard.iter().map(|g| &g.expr).collect(),
        _ => Vec::new(),
    }
}

/// Nodes whose value some root needs, plus nodes that can fail (checked indices,
/// integer powers and integer divisions), which the reference evaluates at every point whether used or not.
pub fn live_nodes(stage: &Stage) -> Vec<bool> {
    let body = stage.body();
    let mut live = vec![false; body.nodes.len()];
    for r in stage.roots() {
        if let Some(l) = live.get_mut(r.index()) {
            *l = true;
        }
    }
    for (i, node) in body.nodes.iter().enumerate() {
        let can_fail = match &node.op {
            ExprOp::CheckedIndex { .. } => true,
            ExprOp::Binary(ferrite_ir::BinaryOp::Pow, _, _) => node.dtype.is_int(),
            ExprOp::Binary(b, _, _) if b.is_integer_division() => node.dtype.is_int(),
            _ => false,
        };
        if can_fail {
            live[i] = true;
        }
    }
    for i in (0..body.nodes.len()).rev() {
        if live[i] {
            body.nodes[i].for_each_operand(&mut |r| {
                if let Some(l) = live.get_mut(r.index()) {
                    *l = true;
                }
            });
        }
    }
    live
}

/// Removes the nodes of `stage` that nothing needs (nodes that can fail stay, see
/// [`live_nodes`]), keeping the others in order and renumbering every reference.
pub fn drop_dead_nodes(stage: &mut Stage) {
    let live = live_nodes(stage);
    let (body, reductions, stores) = match stage {
        Stage::Reduce {
            body,
            reductions,
            stores,
            ..
        } => (body, &mut reductions[..], stores),
        Stage::Store { body, stores, .. } => (body, &mut [][..], stores),
    };
    let mut map: Vec<Option<ExprRef>> = vec![None; body.nodes.len()];
    let mut kept = Vec::with_capacity(body.nodes.len());
    for (i, node) in body.nodes.iter().enumerate() {
        if live[i] {
            let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
            kept.push(node.map_refs(&m));
            map[i] = Some(ExprRef(kept.len() as u32 - 1));
        }
    }
    body.nodes = kept;
    let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
    for r in reductions {
        r.value = m(r.value);
        r.rhs = r.rhs.map(m);
    }
    for s in stores {
        s.value = m(s.value);
        s.index = s.index.map_refs(&m);
    }
}

/// The loop levels of one stage's nest (level `k` is the `k`-th loop, outermost first;
/// level 0 is fixed for the stage) of its variables and of every node of its body.
#[derive(Clone, Debug, Default)]
pub struct Levels {
    /// The loop level of each variable of the nest (others are level 0).
    pub var_levels: HashMap<Var, usize>,
    /// The level of every node: the deepest level among its operands and the variables
    /// of its index expressions.
    pub nodes: Vec<usize>,
}

impl Levels {
    /// The levels of `body` in the nest `vars` (outermost first).
    pub fn new(body: &Block, vars: &[Var]) -> Levels {
        let var_levels: HashMap<Var, usize> =
            vars.iter().enumerate().map(|(k, &v)| (v, k + 1)).collect();
        let mut nodes = Vec::with_capacity(body.nodes.len());
        for node in &body.nodes {
            let level = node_level(node, &nodes, &var_levels);
            nodes.push(level);
        }
        Levels { var_levels, nodes }
    }

    /// The level of variable `v`.
    pub fn var(&self, v: Var) -> usize {
        self.var_levels.get(&v).copied().unwrap_or(0)
    }

    /// The level an index expression varies at: the deepest level of its variables and of
    /// the nodes its dynamic parts refer to (0 when it is fixed for the stage).
    pub fn index(&self, e: &IndexExpr) -> usize {
        let mut level = 0;
        e.for_each_var(&mut |v| level = level.max(self.var(v)));
        e.for_each_ref(&mut |r| level = level.max(self.nodes.get(r.index()).copied().unwrap_or(0)));
        level
    }
}

fn node_level(node: &ExprNode, node_levels: &[usize], var_levels: &HashMap<Var, usize>) -> usize {
    let mut level = 0;
    node.for_each_operand(&mut |r| {
        level = level.max(node_levels.get(r.index()).copied().unwrap_or(0))
    });
    for e in node_indices(&node.op) {
        e.for_each_var(&mut |v| level = level.max(var_levels.get(&v).copied().unwrap_or(0)));
    }
    level
}

/// Checks that every node reference of every stage points at an earlier node of the same
/// body (what the program verifier guarantees), so later analyses can index bodies freely.
pub fn check_references(kernel: &Kernel) -> Result<()> {
    for (si, stage) in kernel.stages.iter().enumerate() {
        let body = stage.body();
        for (i, node) in body.nodes.iter().enumerate() {
            let mut bad = None;
            node.for_each_operand(&mut |r| {
                if r.index() >= i {
                    bad = Some(r);
                }
            });
            if let Some(r) = bad {
                return Err(invalid(
                    kernel,
                    format!("stage {si}: t{i} uses {r}, which is not defined before it"),
                ));
            }
        }
        if let Some(r) = stage
            .roots()
            .into_iter()
            .find(|r| r.index() >= body.nodes.len())
        {
            return Err(invalid(kernel, format!("stage {si}: {r} is not a node")));
        }
    }
    Ok(())
}

fn invalid(kernel: &Kernel, message: String) -> Error {
    Error::InvalidProgram {
        message: format!("kernel {}: {message}", kernel.name),
    }
}

/// Proves every live access of a stage (body `body`, writes `stores`, variables in
/// `ext`) inside its buffer. Returns, per node, whether a guarded load must clamp its
/// index (its range is not provable; the guard discards the value). An unguarded load or
/// a store that cannot be proved is an error: the generated code would be unsafe.
pub fn prove_accesses(
    body: &Block,
    live: &[bool],
    stores: &[StoreOp],
    ext: &Extents,
    buffers: &[Buffer],
) -> Result<Vec<bool>> {
    let mut clamped = vec![false; body.nodes.len()];
    let within = |e: &IndexExpr, numel: usize| match e.range(ext) {
        Some((lo, hi)) => lo >= 0 && (hi as i128) < numel as i128,
        None => false,
    };
    let describe = |e: &IndexExpr, buf: &Buffer| {
        let range = match e.range(ext) {
            Some((lo, hi)) => format!("{lo}..={hi}"),
            None => "an unbounded range".into(),
        };
        format!(
            "cannot prove index `{e}` of {} (`{}`) in bounds: it spans {range}, the buffer has {} elements",
            buf.id,
            buf.name,
            buf.ty.numel()
        )
    };
    let buffer = |b: ferrite_ir::loops::BufferId| {
        buffers.get(b.index()).ok_or_else(|| Error::InvalidProgram {
            message: format!("{b} does not exist"),
        })
    };
    for (i, node) in body.nodes.iter().enumerate() {
        let ExprOp::Load(l) = &node.op else { continue };
        if !live[i] {
            continue;
        }
        let buf = buffer(l.buffer)?;
        if !within(&l.index, buf.ty.numel()) {
            if l.guard.is_empty() {
                return Err(Error::Unprovable {
                    message: format!("t{i}: {}", describe(&l.index, buf)),
                });
            }
            clamped[i] = true;
        }
    }
    for s in stores {
        let buf = buffer(s.buffer)?;
        if !within(&s.index, buf.ty.numel()) {
            return Err(Error::Unprovable {
                message: format!("store: {}", describe(&s.index, buf)),
            });
        }
    }
    Ok(clamped)
}

/// The loops of a stage's inner domain, outermost first.
pub fn stage_loops(stage: &Stage) -> Vec<(Var, usize)> {
    let kind = stage.var_kind();
    stage
        .domain()
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            (
                Var {
                    kind,
                    index: k as u32,
                },
                d,
            )
        })
        .collect()
}

/// True for a kernel that is one store stage without inner loops (a pointwise kernel):
/// it runs its innermost outer axis as its loop, a row at a time.
pub fn is_pointwise(kernel: &Kernel) -> bool {
    kernel.stages.len() == 1
        && matches!(&kernel.stages[0], Stage::Store { domain, .. } if domain.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_linear_occurrences_only() {
        let i = IndexExpr::Var(Var::outer(0));
        let j = IndexExpr::Var(Var::store(0));
        let e = i.clone() * 64 + j.clone() * 2 + IndexExpr::Const(3);
        let (rest, c) = split_linear(&e, Var::store(0)).unwrap();
        assert_eq!(c, 2);
        let ext = Extents {
            outer: vec![16],
            reduce: vec![],
            store: vec![64],
        };
        assert_eq!(rest.simplify(&ext).to_string(), "i0*64 + 3");
        assert!(split_linear(&j.clone().floor_div(4), Var::store(0)).is_none());
        let (rest, c) = split_linear(&(i.clone().modulo(4) + j), Var::store(0)).unwrap();
        assert_eq!(
            (rest.simplify(&ext).to_string(), c),
            ("i0 % 4".to_string(), 1)
        );
    }
}

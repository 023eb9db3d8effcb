//! Computing an expensive value once per point when two stages of a kernel need it.
//!
//! Fusion keeps a softmax row in one kernel by recomputing: the sum stage evaluates
//! `exp(x - max)` and the store stage evaluates it again (the loop IR has no other way to
//! hand a per-element value from one stage to the next). On the simulator that is cheap;
//! on a CPU one `f32x4` `exp` costs more than the memory traffic of the element, so the
//! recomputation made the fused kernel slower than the unfused chain. This rewrite does
//! what a hand-written CPU softmax does: the value is computed once, into a scratch row,
//! and both stages read it back.
//!
//! For a later stage `L` and an earlier stage `E` with the same inner domain, a node of `L`
//! that contains a transcendental (`exp`, `log`, `tanh`, `erf`, `sigmoid`, `sin`, `cos`,
//! `pow`) and is structurally equal to a live node of `E` (with `E`'s loop variables
//! renamed to `L`'s) is *stashed*:
//!
//! - `E` also writes the value to a scratch buffer at each point of the domain (one more
//!   store of a store stage, or a store of a reduction stage, made in the same loop, so
//!   the value is computed, written and accumulated in one pass);
//! - in `L` the node becomes a load of the scratch buffer at the same point.
//!
//! The scratch buffer ([`BufferKind::Scratch`]) holds one value per point of the inner
//! domain (row-major), so it is private to one outer point: the code generator places it
//! in the kernel's stack frame, and threads running other outer points have their own. The value stored is the node's
//! own, rounded to its dtype as the reference rounds it, so results are unchanged bit for
//! bit. Stashes stop at [`MAX_SCRATCH_BYTES`] per kernel (beyond it the kernel recomputes,
//! as before).

use super::analysis::{drop_dead_nodes, live_nodes, node_indices, substitute};
use ferrite_ir::hash::HashMap;
use ferrite_ir::loops::{
    Block, Buffer, BufferId, BufferKind, ExprNode, ExprOp, ExprRef, IndexExpr, Kernel, Load, Stage,
    StoreOp, Value, Var, VarKind,
};
use ferrite_ir::types::TensorType;
use ferrite_ir::{BinaryOp, DType, UnaryOp};

/// Scratch bytes a kernel may keep in its stack frame.
pub const MAX_SCRATCH_BYTES: usize = 64 * 1024;

/// Most values stashed per kernel.
const MAX_STASHES: usize = 8;

/// A kernel rewritten to compute shared values once.
#[derive(Clone, Debug)]
pub struct Stashed {
    /// The rewritten kernel (its accesses not yet recomputed).
    pub kernel: Kernel,
    /// The scratch buffers, one per stashed value, numbered from the id given to
    /// [`stash_shared`].
    pub scratch: Vec<Buffer>,
    /// One line per stash, for the compile report.
    pub notes: Vec<String>,
}

/// `kernel` with expensive values shared between its stages computed once, or `None`
/// when there is none. The scratch buffers get ids from `first_id` on.
pub fn stash_shared(kernel: &Kernel, first_id: usize) -> Option<Stashed> {
    let mut s = Stashed {
        kernel: kernel.clone(),
        scratch: Vec::new(),
        notes: Vec::new(),
    };
    let mut bytes = 0usize;
    // (stage, node) -> the scratch row it is written to.
    let mut stashed: HashMap<(usize, ExprRef), BufferId> = HashMap::default();
    'search: while s.scratch.len() < MAX_STASHES {
        for li in 1..s.kernel.stages.len() {
            for ei in 0..li {
                let Some((e_node, l_node)) = find_shared(&s.kernel, ei, li) else {
                    continue;
                };
                let what = s.kernel.stages[li].body().expr_text(l_node);
                if let Some(&id) = stashed.get(&(ei, e_node)) {
                    // Already written to a scratch row for another stage: read that one.
                    s.notes
                        .push(format!("stash: {what} also read back by stage {li}"));
                    load_from_scratch(&mut s.kernel.stages[li], l_node, id);
                    continue 'search;
                }
                let points: usize = s.kernel.stages[li].domain().iter().product();
                let size = points * 4;
                if bytes + size > MAX_SCRATCH_BYTES {
                    break 'search;
                }
                let id = BufferId((first_id + s.scratch.len()) as u32);
                let ty = TensorType::new(DType::F32, vec![points]).ok()?;
                s.scratch.push(Buffer {
                    id,
                    ty,
                    kind: BufferKind::Scratch,
                    name: format!("stash{}", s.scratch.len()),
                });
                bytes += size;
                stashed.insert((ei, e_node), id);
                s.notes.push(format!(
                    "stash: {what} computed once per point by stage {ei}, read back by stage \
                     {li} ({size}-byte stack scratch)"
                ));
                apply(&mut s, ei, e_node, li, l_node, id);
                continue 'search;
            }
        }
        break;
    }
    if s.scratch.is_empty() {
        return None;
    }
    // What the stages reading a stash no longer compute goes (nodes that can fail stay).
    let readers: Vec<usize> = (0..s.kernel.stages.len())
        .filter(|&si| {
            s.kernel.stages[si].body().nodes.iter().any(
                |n| matches!(&n.op, ExprOp::Load(l) if s.scratch.iter().any(|b| b.id == l.buffer)),
            )
        })
        .collect();
    for si in readers {
        drop_dead_nodes(&mut s.kernel.stages[si]);
    }
    Some(s)
}

/// Whether node `i` of `body` is a transcendental (the expensive ops of the vector math).
fn is_expensive_op(node: &ExprNode) -> bool {
    match &node.op {
        ExprOp::Unary(u, _) => matches!(
            u,
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Erfc
                | UnaryOp::Sigmoid
                | UnaryOp::Sin
                | UnaryOp::Cos
        ),
        ExprOp::Binary(BinaryOp::Pow, _, _) => node.dtype.is_float(),
        _ => false,
    }
}

/// Renames the inner loop variables of any stage kind to store variables (`r2` → `j2`).
pub(super) fn to_store_vars(e: &IndexExpr) -> IndexExpr {
    substitute(e, &|v: Var| match v.kind {
        VarKind::Reduce => Some(IndexExpr::Var(Var::store(v.index as usize))),
        _ => None,
    })
}

/// Structural ids of a body's nodes: equal ids mean equal values at the same inner point.
fn intern(body: &Block, table: &mut HashMap<ExprNode, u32>) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::with_capacity(body.nodes.len());
    for node in &body.nodes {
        let keyed = node.map_indices(to_store_vars);
        let keyed = keyed.map_refs(&|r| ExprRef(ids.get(r.index()).copied().unwrap_or(u32::MAX)));
        let next = table.len() as u32;
        ids.push(*table.entry(keyed).or_insert(next));
    }
    ids
}

/// A node of stage `li` worth stashing that stage `ei` also computes: (node in `ei`,
/// node in `li`). Takes the outermost such node (the latest in `li`'s order), so `exp(x)`
/// is stashed rather than `x`.
fn find_shared(kernel: &Kernel, ei: usize, li: usize) -> Option<(ExprRef, ExprRef)> {
    let (early, late) = (&kernel.stages[ei], &kernel.stages[li]);
    if early.domain() != late.domain() || early.domain().is_empty() {
        return None;
    }
    // A transcendental counts only where it is evaluated per inner point: `log(acc1)` is
    // computed once per outer point anyway (the emitter hoists it), so an expression over it
    // is cheap to recompute.
    let expensive = |body: &Block| -> Vec<bool> {
        let mut x = vec![false; body.nodes.len()];
        let mut inner = vec![false; body.nodes.len()];
        for (i, n) in body.nodes.iter().enumerate() {
            let mut varies = false;
            for e in node_indices(&n.op) {
                e.for_each_var(&mut |v| varies |= v.kind != VarKind::Outer);
            }
            let mut any = false;
            n.for_each_operand(&mut |r| {
                varies |= inner.get(r.index()).copied().unwrap_or(false);
                any |= x.get(r.index()).copied().unwrap_or(false);
            });
            inner[i] = varies;
            x[i] = any || (varies && is_expensive_op(n));
        }
        x
    };
    let l_exp = expensive(late.body());
    // Most kernels evaluate no transcendental per inner point: nothing to look up (interning
    // both bodies was 4% of compiling ResNet-18's nine-stage im2col kernels).
    if !l_exp.contains(&true) {
        return None;
    }
    let mut table = HashMap::default();
    let e_ids = intern(early.body(), &mut table);
    let l_ids = intern(late.body(), &mut table);
    let e_live = live_nodes(early);
    let l_live = live_nodes(late);
    let mut in_early: HashMap<u32, usize> = HashMap::default();
    for (i, &id) in e_ids.iter().enumerate() {
        if e_live[i] {
            in_early.entry(id).or_insert(i);
        }
    }
    for i in (0..late.body().nodes.len()).rev() {
        let node = &late.body().nodes[i];
        if !l_live[i] || !l_exp[i] || node.dtype != DType::F32 {
            continue;
        }
        if let Some(&e) = in_early.get(&l_ids[i]) {
            return Some((ExprRef(e as u32), ExprRef(i as u32)));
        }
    }
    None
}

/// The row-major position of the current point of a stage's inner domain.
pub(super) fn flat_index(domain: &[usize], kind: VarKind) -> IndexExpr {
    let mut terms = Vec::with_capacity(domain.len());
    let mut stride = 1i64;
    for k in (0..domain.len()).rev() {
        let v = IndexExpr::Var(Var {
            kind,
            index: k as u32,
        });
        terms.push(if stride == 1 {
            v
        } else {
            IndexExpr::Mul(Box::new(v), stride)
        });
        stride *= domain[k] as i64;
    }
    terms.reverse();
    if terms.len() == 1 {
        terms.pop().unwrap_or(IndexExpr::Const(0))
    } else {
        IndexExpr::Sum(terms)
    }
}

/// Replaces node `r` of `stage` by a load of `scratch` at the current inner point.
pub(super) fn load_from_scratch(stage: &mut Stage, r: ExprRef, scratch: BufferId) {
    let kind = stage.var_kind();
    let domain = stage.domain().to_vec();
    let body = match stage {
        Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
    };
    body.nodes[r.index()].op = ExprOp::Load(Load {
        buffer: scratch,
        index: flat_index(&domain, kind),
        guard: vec![],
        other: Value::Float(0.0),
    });
}

/// Writes node `e` of stage `ei` to `scratch` at each inner point and reads it back in
/// place of node `l` of stage `li`.
fn apply(s: &mut Stashed, ei: usize, e: ExprRef, li: usize, l: ExprRef, scratch: BufferId) {
    let domain = s.kernel.stages[ei].domain().to_vec();
    let kind = s.kernel.stages[ei].var_kind();
    let write = StoreOp {
        buffer: scratch,
        index: flat_index(&domain, kind),
        value: e,
    };
    match &mut s.kernel.stages[ei] {
        Stage::Store { stores, .. } | Stage::Reduce { stores, .. } => stores.push(write),
    }
    load_from_scratch(&mut s.kernel.stages[li], l, scratch);
}

/// A stashed kernel in the form its lanes code runs (see `lanes.rs`): each scratch row
/// holds `width` lanes per inner point, lane `l` of point `p` at `p*width + l`.
#[derive(Clone, Debug)]
pub struct LaneStash {
    /// The kernel with its scratch accesses at `p*width + i_last`.
    pub kernel: Kernel,
    /// `(scalar scratch, lanes scratch)`: the lanes code addresses the scratch through
    /// its own buffer, whose base is the slot's minus `i_last` elements; that buffer is
    /// declared with `(points-1)*width + extent` elements, the range the index spans.
    pub scratch: Vec<(BufferId, Buffer)>,
    /// Bytes of each scratch slot (in the order of `scratch`): `points * width * 4`.
    pub slot_bytes: Vec<usize>,
}

/// The lanes form of `s`, for lane groups of `width` points along the last outer axis
/// (extent `extent`), with its buffers numbered from `first_id`; `None` when the scratch
/// rows would exceed the budget.
pub fn lanes_form(s: &Stashed, first_id: usize, width: usize, extent: usize) -> Option<LaneStash> {
    let slot_bytes: Vec<usize> = s
        .scratch
        .iter()
        .map(|b| b.ty.numel().checked_mul(width)?.checked_mul(4))
        .collect::<Option<_>>()?;
    if slot_bytes.iter().sum::<usize>() > MAX_SCRATCH_BYTES {
        return None;
    }
    let last = Var::outer(s.kernel.domain.len().checked_sub(1)?);
    let mut scratch = Vec::with_capacity(s.scratch.len());
    let mut id_map = HashMap::default();
    for (k, b) in s.scratch.iter().enumerate() {
        let id = BufferId((first_id + k) as u32);
        let numel = (b.ty.numel().checked_sub(1)?)
            .checked_mul(width)?
            .checked_add(extent)?;
        let ty = TensorType::new(DType::F32, vec![numel]).ok()?;
        scratch.push((
            b.id,
            Buffer {
                id,
                ty,
                kind: BufferKind::Scratch,
                name: format!("{}_lanes", b.name),
            },
        ));
        id_map.insert(b.id, id);
    }
    let w = width as i64;
    let lane_index = |e: &IndexExpr| {
        IndexExpr::Sum(vec![
            IndexExpr::Mul(Box::new(e.clone()), w),
            IndexExpr::Var(last),
        ])
    };
    let mut kernel = s.kernel.clone();
    for stage in &mut kernel.stages {
        let (body, stores) = match stage {
            Stage::Reduce { body, stores, .. } | Stage::Store { body, stores, .. } => {
                (body, stores)
            }
        };
        for node in &mut body.nodes {
            if let ExprOp::Load(l) = &mut node.op {
                if let Some(&id) = id_map.get(&l.buffer) {
                    l.buffer = id;
                    l.index = lane_index(&l.index);
                }
            }
        }
        for st in stores {
            if let Some(&id) = id_map.get(&st.buffer) {
                st.buffer = id;
                st.index = lane_index(&st.index);
            }
        }
    }
    Some(LaneStash {
        kernel,
        scratch,
        slot_bytes,
    })
}

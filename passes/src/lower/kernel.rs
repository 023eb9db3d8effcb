//! Kernel assembly: a group of scheduled nodes becomes one kernel (see the module docs
//! of [`super`]): its outer domain, its reduction stages, its store stages and, for a
//! matmul, its GEMM description.

use super::domain::{coords_of, is_reduction, reduction_shape, squeeze};
use super::gemm::gemm_info;
use super::pad::{is_pad_kernel, pad_kernel};
use super::plan::{Layout, Plan, Role, SNode, MAX_INLINE_CHAIN};
use super::refusal::{LowerError, Refusal};
use super::scatter::{index_add_kernel, index_add_member};
use super::signature::{signature, Signature};
use super::value::{fail_to_error, Fail, KernelBuilder, StageState};
use crate::error::{Error, Result};
use ferrite_ir::hash::{HashMap, HashSet};
use ferrite_ir::infer::permutation;
use ferrite_ir::loops::{
    AccId, BufferId, Extents, IndexExpr, Kernel, KernelId, ReduceKind, Reduction, Stage, StoreOp,
    Var,
};
use ferrite_ir::types::contiguous_strides;
use ferrite_ir::{Graph, Op, ValueId};

/// Repairs a fused plan so every matmul can be a GEMM: a GEMM reads its operands
/// through strides, so any operand that is not a strided view of a buffer (a padded
/// view, an arange, ..) is materialized, until none is left.
///
/// Each matmul is built until it lowers, materializing the culprit of each refusal, in
/// matmul order: the plain algorithm is [`materialize_one_at_a_time`]. Materializing a
/// value only turns its readers' view of it into a buffer read, so a matmul that lowered
/// keeps lowering; and a matmul's build reads only its *cone* (the values it reaches
/// through views and inlined values), so a repair elsewhere cannot change its outcome.
/// Each pass therefore builds every matmul against one plan and materializes the culprits
/// of all refused ones at once, deferring to the next pass any matmul whose cone meets the
/// cone of one refused before it in this pass (a later repair of that one could change
/// its outcome). The result is the plain algorithm's (debug builds check), with one plan
/// rebuilt per pass instead of one per repair, which was quadratic in a deep model.
/// Returns the repaired plan and the number of plans rebuilt.
pub fn materialize_gemm_operands(plan: Plan<'_>) -> Result<(Plan<'_>, usize)> {
    let plain = cfg!(debug_assertions).then(|| materialize_one_at_a_time(plan.clone()));
    let batched = materialize_in_passes(plan);
    if let Some(plain) = plain {
        let same = match (&plain, &batched) {
            (Ok(p), Ok((b, _))) => p.role == b.role,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        assert!(
            same,
            "batched matmul repairs differ from the plain algorithm's: {:?} vs {:?}",
            plain.map(|p| p.snodes),
            batched.map(|(b, _)| b.snodes)
        );
    }
    batched
}

/// [`materialize_gemm_operands`]: the repairs of each pass at once.
fn materialize_in_passes(mut plan: Plan<'_>) -> Result<(Plan<'_>, usize)> {
    let g = plan.g;
    let matmuls = matmul_values(&plan);
    let mut repairs = 0usize;
    // Per value, the pass that last marked it as in a refused matmul's cone.
    let mut claimed = vec![0u32; g.nodes.len()];
    let mut pass = 0u32;
    // The matmuls that lowered: they keep lowering (see above), so no later pass builds
    // them again.
    let mut lowered: HashSet<ValueId> = HashSet::default();
    loop {
        pass += 1;
        let layout = Layout::provisional(&plan);
        let mut culprits: Vec<ValueId> = Vec::new();
        let mut deferred = false;
        // A matmul with the signature of one built in this pass (its twin in another
        // layer) builds alike: it takes that outcome, a refusal restated with its values.
        let mut built: HashMap<Signature<'_>, Option<Refusal>> = HashMap::default();
        for &v in &matmuls {
            let Role::Scheduled(s) = plan.role[v.index()] else {
                continue;
            };
            let cone = operand_cone(&plan, v);
            if cone.iter().any(|c| claimed[c.index()] == pass) {
                // Its outcome may depend on how an earlier refused matmul gets repaired:
                // claim its cone too, so later matmuls keep their order around it.
                deferred = true;
                for c in &cone {
                    claimed[c.index()] = pass;
                }
                continue;
            }
            if lowered.contains(&v) {
                continue;
            }
            let sig = signature(&plan, &layout, &[s]);
            let twin = built.get_key_value(&sig).and_then(|(twin, r)| match r {
                None => Some(None),
                Some(r) => sig.translate(twin, r).map(Some),
            });
            let refusal = match twin {
                Some(r) => r,
                None => {
                    let r = match build_unnamed(&plan, &layout, &[s]) {
                        Ok(_) => None,
                        Err(LowerError::Refused(r)) => Some(r),
                        Err(LowerError::Failed(e)) => return Err(e),
                    };
                    built.insert(sig, r.clone());
                    r
                }
            };
            match refusal {
                None => {
                    lowered.insert(v);
                }
                Some(r) => match r.culprit {
                    Some(c) if !matches!(plan.role[c.index()], Role::Scheduled(_)) => {
                        for c in &cone {
                            claimed[c.index()] = pass;
                        }
                        culprits.push(c);
                    }
                    _ => return Err(Error::Internal(format!("cannot lower %{}: {r}", v.0))),
                },
            }
        }
        drop(built);
        if culprits.is_empty() {
            debug_assert!(!deferred, "a deferred matmul waits on a repair");
            return Ok((plan, pass as usize - 1));
        }
        repairs += culprits.len();
        if repairs > 2 * g.nodes.len() {
            return Err(Error::internal(
                "lowering: materializing matmul operands did not converge",
            ));
        }
        plan = plan.with_scheduled_all(&culprits);
    }
}

/// The matmuls of `plan`'s scheduled nodes (by value: materializing renumbers them).
fn matmul_values(plan: &Plan<'_>) -> Vec<ValueId> {
    plan.snodes
        .iter()
        .filter_map(|n| match *n {
            SNode::Value(v) if plan.g.node(v).op == Op::MatMul => Some(v),
            _ => None,
        })
        .collect()
}

/// The values a build of `v` alone reads: `v`, and its operands through views and
/// inlined values, with the values they end at (scheduled, parameters, constants, literals).
fn operand_cone(plan: &Plan<'_>, v: ValueId) -> Vec<ValueId> {
    let mut cone = vec![v];
    let mut seen: HashSet<ValueId> = HashSet::from_iter([v]);
    let mut i = 0;
    while i < cone.len() {
        let x = cone[i];
        i += 1;
        if x != v && !matches!(plan.role[x.index()], Role::View | Role::Inline) {
            continue;
        }
        for &input in &plan.g.node(x).inputs {
            if seen.insert(input) {
                cone.push(input);
            }
        }
    }
    cone
}

/// [`materialize_gemm_operands`] one repair at a time: each matmul is built until it
/// lowers, the plan rebuilt after each materialized culprit; a last pass over every matmul
/// checks that each still lowers, and the whole repeats if one did not.
fn materialize_one_at_a_time(mut plan: Plan<'_>) -> Result<Plan<'_>> {
    let g = plan.g;
    let matmuls = matmul_values(&plan);
    let mut repairs = 0usize;
    let mut layout = Layout::provisional(&plan);
    loop {
        let mut changed = false;
        for &v in &matmuls {
            while let Role::Scheduled(s) = plan.role[v.index()] {
                match build_unnamed(&plan, &layout, &[s]) {
                    Ok(_) => break,
                    Err(LowerError::Refused(r)) => match r.culprit {
                        Some(c) if !matches!(plan.role[c.index()], Role::Scheduled(_)) => {
                            repairs += 1;
                            if repairs > 2 * g.nodes.len() {
                                return Err(Error::internal(
                                    "lowering: materializing matmul operands did not converge",
                                ));
                            }
                            plan = plan.with_scheduled(c);
                            layout = Layout::provisional(&plan);
                            changed = true;
                        }
                        _ => return Err(Error::Internal(format!("cannot lower %{}: {r}", v.0))),
                    },
                    Err(LowerError::Failed(e)) => return Err(e),
                }
            }
        }
        if !changed {
            return Ok(plan);
        }
    }
}

/// A store the group must perform.
struct StoreTarget {
    /// The value stored.
    value: ValueId,
    buffer: BufferId,
    shape: Vec<usize>,
}

/// Builds the kernel for `members` (scheduled node numbers of `plan`).
pub fn build_kernel(
    plan: &Plan,
    layout: &Layout,
    members: &[usize],
    id: KernelId,
) -> Result<Kernel, LowerError> {
    build(plan, layout, members, id, true)
}

/// [`build_kernel`] for a kernel only costed or tried (a fusion candidate, a matmul whose
/// operands are checked), which is thrown away: it is left unnamed (`""`).
pub(crate) fn build_unnamed(
    plan: &Plan,
    layout: &Layout,
    members: &[usize],
) -> Result<Kernel, LowerError> {
    build(plan, layout, members, KernelId(0), false)
}

fn build(
    plan: &Plan,
    layout: &Layout,
    members: &[usize],
    id: KernelId,
    named: bool,
) -> Result<Kernel, LowerError> {
    let g = plan.g;
    let kernel_name = |g: &Graph, id: KernelId, members: &[usize], plan: &Plan| {
        if named {
            kernel_name(g, id, members, plan)
        } else {
            String::new()
        }
    };
    let mut members: Vec<usize> = members.to_vec();
    members.sort_unstable();
    members.dedup();
    let in_group = members.clone();
    let values: Vec<ValueId> = members
        .iter()
        .filter_map(|&s| match plan.snodes[s] {
            SNode::Value(v) => Some(v),
            SNode::OutputCopy { .. } => None,
        })
        .collect();
    if let Some(v) = index_add_member(plan, &values, members.len())? {
        let name = kernel_name(g, id, &members, plan);
        return index_add_kernel(plan, layout, v, id, name);
    }
    if let ([v], 1) = (values.as_slice(), members.len()) {
        if is_pad_kernel(plan, layout, *v) {
            let name = kernel_name(g, id, &members, plan);
            return pad_kernel(plan, layout, *v, id, name);
        }
    }

    // What must be written.
    let mut stores = Vec::new();
    for &s in &members {
        if !plan.must_store(s, &|r| in_group.binary_search(&r).is_ok()) {
            continue;
        }
        let (value, buffer) = match plan.snodes[s] {
            SNode::Value(v) => (v, layout.of_value[v.index()]),
            SNode::OutputCopy { output, value } => (value, layout.of_output[output]),
        };
        let buffer =
            buffer.ok_or_else(|| Error::Internal(format!("%{} has no buffer", value.0)))?;
        stores.push(StoreTarget {
            value,
            buffer,
            shape: g.ty(value).shape.clone(),
        });
    }
    if stores.is_empty() {
        return Err(Error::internal("a kernel that stores nothing").into());
    }

    // Reductions of the group and the outer domain they agree on.
    let reductions: Vec<ValueId> = members
        .iter()
        .filter_map(|&s| match plan.snodes[s] {
            SNode::Value(v) if is_reduction(&g.node(v).op) => Some(v),
            _ => None,
        })
        .collect();
    let outer = match reductions.first() {
        Some(&r) => squeeze(&g.ty(r).shape),
        None => squeeze(&stores[0].shape),
    };
    for &r in &reductions {
        let kept = squeeze(&g.ty(r).shape);
        if kept != outer {
            return Err(Refusal::new(
                "reduction-domains-differ",
                format!(
                    "%{} keeps {:?} but %{} keeps {:?}",
                    reductions[0].0, outer, r.0, kept
                ),
            )
            .into());
        }
    }
    let matmuls: Vec<ValueId> = reductions
        .iter()
        .copied()
        .filter(|&r| g.node(r).op == Op::MatMul)
        .collect();
    if !matmuls.is_empty() && reductions.len() > 1 {
        return Err(Refusal::new(
            "gemm-with-reduction",
            format!(
                "a matmul kernel computes one product and no other reduction (%{} with {} more)",
                matmuls[0].0,
                reductions.len() - 1
            ),
        )
        .into());
    }

    let split = if reductions.is_empty() && stores.len() == 1 {
        concat_split(plan, &stores[0], &in_group)
    } else {
        None
    };
    let outer = match &split {
        Some(sp) => sp.outer.clone(),
        None => outer,
    };

    let mut b = KernelBuilder {
        plan,
        layout,
        in_group,
        outer: outer.clone(),
        ready: HashMap::default(),
        next_acc: 0,
        cur: StageState::default(),
        depth: 0,
        touched: HashSet::default(),
    };
    for &s in &members {
        if let SNode::Value(v) = plan.snodes[s] {
            b.touched.insert(v);
        }
    }

    if let Some(sp) = split {
        // One store stage per operand of the concat: each reaches one operand, so no
        // `where` selects among them.
        let target = StoreTarget {
            value: sp.concat,
            buffer: stores[0].buffer,
            shape: sp.shape,
        };
        let mut stages = Vec::with_capacity(sp.parts.len());
        for (domain, coords) in sp.parts {
            b.open_stage(Extents {
                outer: outer.clone(),
                reduce: vec![],
                store: domain.clone(),
            });
            let op = store_op(&mut b, &target, &coords).map_err(fail_to_error)?;
            stages.push(b.close_store_stage(domain, vec![op]));
        }
        let name = kernel_name(g, id, &members, plan);
        return Ok(b.finish(id, name, stages, None));
    }

    // Where each store goes: one per outer point, or over a reduction's inner domain.
    enum Placement {
        /// One write per outer point, at these coordinates of the stored value.
        Outer(Vec<IndexExpr>),
        Inner {
            domain: Vec<usize>,
            coords: Vec<IndexExpr>,
        },
    }
    let mut placements = Vec::with_capacity(stores.len());
    for st in &stores {
        if squeeze(&st.shape) == outer {
            placements.push(Placement::Outer(coords_of(&st.shape, Var::outer)));
            continue;
        }
        if let Some(coords) = view_coords(plan, st.value, &outer) {
            placements.push(Placement::Outer(coords));
            continue;
        }
        let found = reductions.iter().find_map(|&r| {
            let rs = reduction_shape(g, r)?;
            (rs.input == st.shape).then(|| {
                let mut next_outer = 0;
                let mut next_inner = 0;
                let mut domain = Vec::new();
                let coords = rs
                    .input
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        if d == 1 {
                            IndexExpr::Const(0)
                        } else if rs.axes.contains(&k) {
                            domain.push(d);
                            next_inner += 1;
                            IndexExpr::Var(Var::store(next_inner - 1))
                        } else {
                            next_outer += 1;
                            IndexExpr::Var(Var::outer(next_outer - 1))
                        }
                    })
                    .collect();
                Placement::Inner { domain, coords }
            })
        });
        // A matmul's epilogue computed after a reshape of the product (a conv's
        // `[N, C_out, H, W]` from the GEMM's `[C_out, H * W]`): one element per outer
        // point, at the row-major position of that point.
        let same_count = st.shape.iter().product::<usize>() == outer.iter().product::<usize>();
        let found = found.or_else(|| {
            (same_count && !matmuls.is_empty())
                .then(|| Placement::Outer(reshaped_coords(&outer, &st.shape)))
        });
        match found {
            Some(p) => placements.push(p),
            None => {
                return Err(Refusal::new(
                    "store-outside-domain",
                    format!(
                        "%{} of shape {:?} is neither the outer domain {:?}, a permuted or reshaped view of it, nor a reduced input",
                        st.value.0, st.shape, outer
                    ),
                )
                .into())
            }
        }
    }

    // Reduction stages, in dependency (value) order.
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage_reductions: Vec<Reduction> = Vec::new();
    let mut gemm_stage: Option<(usize, ValueId)> = None;
    let mut open_domain: Option<Vec<usize>> = None;
    let mut sorted = reductions.clone();
    sorted.sort();
    for &r in &sorted {
        let is_mm = g.node(r).op == Op::MatMul;
        let domain = b.reduction_domain(r);
        let fits_open = !is_mm && open_domain.as_ref() == Some(&domain);
        if !fits_open {
            b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
            b.open_stage(Extents {
                outer: outer.clone(),
                reduce: domain.clone(),
                store: vec![],
            });
            open_domain = Some(domain.clone());
        }
        let (value, rhs) = match b.reduction_body(r) {
            Ok(v) => v,
            Err(Fail::Pending) if fits_open => {
                // It reads an accumulator of the open stage: give it its own loop.
                b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
                b.open_stage(Extents {
                    outer: outer.clone(),
                    reduce: domain.clone(),
                    store: vec![],
                });
                open_domain = Some(domain.clone());
                b.reduction_body(r).map_err(fail_to_error)?
            }
            Err(e) => return Err(fail_to_error(e)),
        };
        let acc = AccId(b.next_acc);
        b.next_acc += 1;
        let rs = reduction_shape(g, r);
        let kind = rs.map_or(ReduceKind::Sum, |rs| rs.kind);
        stage_reductions.push(Reduction {
            acc,
            kind,
            dtype: g.ty(r).dtype,
            value,
            rhs,
        });
        b.cur.pending.push(r);
        if is_mm {
            gemm_stage = Some((stages.len(), r));
            b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);
        }
    }
    b.close_reduce_stage(&mut stages, &mut stage_reductions, &mut open_domain);

    // Store stages: the per-point writes, then one loop per inner domain.
    let mut outer_stores = Vec::new();
    // (inner domain, [(store index, coordinates)])
    type InnerStores = Vec<(usize, Vec<IndexExpr>)>;
    let mut inner_groups: Vec<(Vec<usize>, InnerStores)> = Vec::new();
    for (i, p) in placements.into_iter().enumerate() {
        match p {
            Placement::Outer(coords) => outer_stores.push((i, coords)),
            Placement::Inner { domain, coords } => {
                match inner_groups.iter_mut().find(|(d, _)| *d == domain) {
                    Some((_, list)) => list.push((i, coords)),
                    None => inner_groups.push((domain, vec![(i, coords)])),
                }
            }
        }
    }
    if !outer_stores.is_empty() {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: vec![],
        });
        let mut ops = Vec::new();
        for (i, coords) in outer_stores {
            ops.push(store_op(&mut b, &stores[i], &coords).map_err(fail_to_error)?);
        }
        stages.push(b.close_store_stage(vec![], ops));
    }
    for (domain, list) in inner_groups {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: domain.clone(),
        });
        let mut ops = Vec::new();
        for (i, coords) in list {
            ops.push(store_op(&mut b, &stores[i], &coords).map_err(fail_to_error)?);
        }
        stages.push(b.close_store_stage(domain, ops));
    }

    let gemm = match gemm_stage {
        // A matmul with an empty operand (M, N or K of 0) reads nothing: its operands are
        // constants, not strided views, and its stage is a plain loop over an empty
        // domain (zeros for K = 0), with no GEMM to call.
        Some((_, r)) if g.node(r).inputs.iter().any(|&x| g.ty(x).numel() == 0) => None,
        Some((si, r)) => Some(gemm_info(g, &b.outer, &stages, si, r)?),
        None => None,
    };

    let name = kernel_name(g, id, &members, plan);
    Ok(b.finish(id, name, stages, gemm))
}

/// A concat stored by one store stage per operand ([`concat_split`]).
struct ConcatSplit {
    /// The concat.
    concat: ValueId,
    /// Its shape.
    shape: Vec<usize>,
    /// The kernel's outer domain: every axis but the concat's and the last.
    outer: Vec<usize>,
    /// Per operand reached: the stage's domain and the concat's coordinates in it.
    parts: Vec<(Vec<usize>, Vec<IndexExpr>)>,
}

/// A concat needs at least this many outer points (the points of every axis but the
/// concat's and the last) to be stored operand by operand: the outer domain is what the
/// threads share, and with fewer, one `where` chain over every element parallelizes
/// better.
const MIN_SPLIT_OUTER: usize = 16;

/// When the group's one store `st` is a concat (or a reshape of one, which is the same
/// row-major buffer) computed in the kernel, its stores as one stage per operand: the
/// outer domain is every axis but the concat's and the last, and operand `i`'s stage
/// runs over its extent along the concat axis and the last axis. Each stage's concat
/// coordinate lies in one operand, so its value is that operand alone, where one store
/// of the whole concat evaluates a chain of `where`s per element (an im2col of 9 or 49
/// shifted slices).
fn concat_split(plan: &Plan, st: &StoreTarget, in_group: &[usize]) -> Option<ConcatSplit> {
    let g = plan.g;
    let mut v = st.value;
    for _ in 0..=MAX_INLINE_CHAIN {
        match g.node(v).op {
            Op::Reshape { .. } => v = g.node(v).inputs[0],
            _ => break,
        }
    }
    let Op::Concat { axis } = g.node(v).op else {
        return None;
    };
    match plan.role[v.index()] {
        Role::Scheduled(s) if in_group.binary_search(&s).is_err() => return None,
        _ => {}
    }
    let shape = g.ty(v).shape.clone();
    let r = shape.len();
    let a = ferrite_ir::types::normalize_axis(axis, r).ok()?;
    if r < 2 || g.node(v).inputs.len() < 2 || shape.contains(&0) {
        return None;
    }
    let last = r - 1;
    let is_outer = |k: usize| k != a && k != last;
    let outer_shape: Vec<usize> = (0..r).filter(|&k| is_outer(k)).map(|k| shape[k]).collect();
    if outer_shape.iter().product::<usize>() < MIN_SPLIT_OUTER {
        return None;
    }
    let outer_coords = coords_of(&outer_shape, Var::outer);
    let mut parts = Vec::new();
    let mut off = 0i64;
    for &x in &g.node(v).inputs {
        let len = g.ty(x).shape[a];
        if len == 0 {
            continue;
        }
        let mut domain = Vec::new();
        let mut next_outer = outer_coords.iter();
        let mut coords = Vec::with_capacity(r);
        for (k, &d) in shape.iter().enumerate() {
            if is_outer(k) {
                coords.push(next_outer.next()?.clone());
                continue;
            }
            let extent = if k == a { len } else { d };
            let at = if extent == 1 {
                IndexExpr::Const(0)
            } else {
                domain.push(extent);
                IndexExpr::Var(Var::store(domain.len() - 1))
            };
            coords.push(if k == a {
                IndexExpr::Const(off) + at
            } else {
                at
            });
        }
        parts.push((domain, coords));
        off += len as i64;
    }
    if parts.len() < 2 {
        return None;
    }
    Some(ConcatSplit {
        concat: v,
        shape,
        outer: squeeze(&outer_shape),
        parts,
    })
}

/// When `v` is a chain of permutes and reshapes (bijections) over a value whose shape
/// is the outer domain, the coordinates of `v` at each outer point: writing `v` there
/// covers every element exactly once. This lets a kernel store a transposed or
/// reshaped layout directly instead of leaving the copy to another kernel.
fn view_coords(plan: &Plan, v: ValueId, outer: &[usize]) -> Option<Vec<IndexExpr>> {
    let g = plan.g;
    let mut chain = Vec::new();
    let mut base = v;
    while squeeze(&g.ty(base).shape) != outer {
        let n = g.node(base);
        if !matches!(n.op, Op::Permute { .. } | Op::Reshape { .. })
            || chain.len() > MAX_INLINE_CHAIN
        {
            return None;
        }
        chain.push(base);
        base = n.inputs[0];
    }
    if chain.is_empty() {
        return None;
    }
    let ext = Extents {
        outer: outer.to_vec(),
        ..Extents::default()
    };
    let mut coords = coords_of(&g.ty(base).shape, Var::outer);
    for &c in chain.iter().rev() {
        let n = g.node(c);
        let from = &g.ty(n.inputs[0]).shape;
        let to = &n.ty.shape;
        coords = match &n.op {
            Op::Permute { dims } => {
                let perm = permutation("permute", dims, to.len()).ok()?;
                perm.iter().map(|&p| coords[p].clone()).collect()
            }
            _ => {
                let flat = IndexExpr::Sum(
                    coords
                        .iter()
                        .zip(contiguous_strides(from))
                        .map(|(x, s)| x.clone() * s as i64)
                        .collect(),
                );
                to.iter()
                    .zip(contiguous_strides(to))
                    .map(|(&d, s)| flat.clone().floor_div(s as i64).modulo(d.max(1) as i64))
                    .collect()
            }
        };
        coords = coords.iter().map(|x| x.simplify(&ext)).collect();
    }
    Some(coords)
}

/// The coordinates in `shape` of the outer point, read row-major: the flat index of the
/// point in `outer`, split by `shape`'s extents (the two hold as many elements).
fn reshaped_coords(outer: &[usize], shape: &[usize]) -> Vec<IndexExpr> {
    let ext = Extents {
        outer: outer.to_vec(),
        ..Extents::default()
    };
    let flat = IndexExpr::Sum(
        coords_of(outer, Var::outer)
            .into_iter()
            .zip(contiguous_strides(outer))
            .map(|(x, s)| x * s as i64)
            .collect(),
    );
    shape
        .iter()
        .zip(contiguous_strides(shape))
        .map(|(&d, s)| {
            flat.clone()
                .floor_div(s as i64)
                .modulo(d.max(1) as i64)
                .simplify(&ext)
        })
        .collect()
}

/// `k3_add_relu`: the id and the ops of the group's nodes, at most five.
fn kernel_name(g: &Graph, id: KernelId, members: &[usize], plan: &Plan) -> String {
    let mut names: Vec<&str> = Vec::new();
    for &s in members {
        let n = match plan.snodes[s] {
            SNode::Value(v) => g.node(v).op.name(),
            SNode::OutputCopy { .. } => "copy",
        };
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let more = names.len() > 5;
    names.truncate(5);
    let mut name = format!("{id}_{}", names.join("_"));
    if more {
        name.push_str("_etc");
    }
    name
}

/// The write of `st` at `coords`.
fn store_op(
    b: &mut KernelBuilder,
    st: &StoreTarget,
    coords: &[IndexExpr],
) -> Result<StoreOp, Fail> {
    let value = b.value_at(st.value, coords, &[])?;
    let index = b.flat(coords, &st.shape);
    Ok(StoreOp {
        buffer: st.buffer,
        index,
        value,
    })
}

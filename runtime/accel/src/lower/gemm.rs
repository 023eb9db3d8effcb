//! GEMM kernels: a matmul's reduction as tiled `dot`s with a K loop through
//! local memory, and its fused epilogue on the accumulator tile.
//!
//! The grid is `(ceil(M / BM), ceil(N / BN), batch)`; program `(i, j, z)` owns
//! the `BM x BN` block `(i, j)` of product `z`. Operands are addressed through
//! the strides the scheduler recorded (`GemmInfo`), so transposed and
//! broadcast operands, and batch strides of 0, need no copies. Slices of `BK`
//! along K are copied into two local buffers with `dma_async`, one slice ahead:
//! while the dot engine works on slice `k0`, the copies of slice `k0 + BK` are in
//! flight, which the timing model rewards with `max(dot, copy)` per step instead
//! of their sum. The last slice is peeled off the loop, so no copy past the end
//! of K is ever issued. The epilogue (bias, activation, residual, the store) is
//! the loop IR's own stages after the reduction, run on the `[BM, BN]`
//! accumulator tile with `rm[:, None]` and `rn[None, :]` as its row and column.

use super::blocks::{self, GemmNeed};
use super::builder::{
    add, and, arange, call, cast, column, div, dtype, ge, int, lt, mul, program_id, rem, row,
    Builder, Depth, E,
};
use super::frame::{Frame, AXIS0, AXIS1};
use super::kernel::emit_stage;
use super::ops::{TileVal, Val};
use super::stage::{bytes_per_point, points, Cx};
use super::{split, GemmChoice, TileLaunch};
use crate::error::{Error, Result};
use crate::tile::ast::Builtin;
use ferrite_ir::loops::{
    AccId, BufferId, ExprOp, Extents, GemmInfo, GemmOperand, Kernel, Program, Stage, Var,
};
use ferrite_ir::{DType, TensorType};
use std::collections::HashMap;

/// The kernel's GEMM when it can run on the dot engine: numeric operands of one
/// dtype (floats, and integers, which the dot engine accumulates in i32 or i64), the reduction a single dot product, and every other stage an
/// epilogue of one point per output element. Anything else runs as a plain
/// reduction.
pub(super) fn eligible<'a>(p: &Program, k: &'a Kernel) -> Option<&'a GemmInfo> {
    let g = k.gemm.as_ref()?;
    let (a, b) = (p.buffer(g.lhs.buffer)?, p.buffer(g.rhs.buffer)?);
    if a.ty.dtype != b.ty.dtype || crate::tile::dot_dtype(a.ty.dtype).is_none() {
        return None;
    }
    let Stage::Reduce { reductions, .. } = k.stages.get(g.stage)? else {
        return None;
    };
    if reductions.len() != 1 || reductions[0].acc != g.acc || reductions[0].rhs.is_none() {
        return None;
    }
    for (i, s) in k.stages.iter().enumerate() {
        if i < g.stage || (i > g.stage && points(s.domain()) > 1) {
            return None;
        }
    }
    if g.outer_axes.len() != g.batch.len() + 2 || g.batch.len() != g.lhs.batch_strides.len() {
        return None;
    }
    Some(g)
}

fn tuple_of(items: Vec<E>) -> E {
    E::Tuple(items)
}

/// `e * c`, skipping a multiplication by 1.
fn scaled(e: E, c: i64) -> E {
    if c == 1 {
        e
    } else {
        mul(e, int(c))
    }
}

/// `a & b` of optional masks.
fn both(a: Option<E>, b: Option<E>) -> Option<E> {
    match (a, b) {
        (Some(a), Some(b)) => Some(and(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `dma_async(buf, ptrs[, mask])`.
fn dma(buf: &E, ptrs: E, mask: Option<E>) -> E {
    let mut args = vec![buf.clone(), ptrs];
    args.extend(mask);
    call(Builtin::DmaAsync, args)
}

/// True when GEMM kernels `a` and `b` (each [`eligible`]) can run as one launch
/// whose programs load each block of their common left operand once for both:
/// the same left operand read the same way, the same shape, domain and operand
/// dtype, and neither touches a buffer the other writes (they are independent,
/// so the order of their stores within the launch does not matter).
pub(super) fn shares_lhs(p: &Program, a: (&Kernel, &GemmInfo), b: (&Kernel, &GemmInfo)) -> bool {
    let ((ka, ga), (kb, gb)) = (a, b);
    let dtype = |id: BufferId| p.buffer(id).map(|buf| buf.ty.dtype);
    if ga.lhs != gb.lhs
        || (ga.batch.as_slice(), ga.m, ga.n, ga.k) != (gb.batch.as_slice(), gb.m, gb.n, gb.k)
        || ga.outer_axes != gb.outer_axes
        || ka.domain != kb.domain
        || dtype(ga.rhs.buffer) != dtype(gb.rhs.buffer)
        || gb.rhs.buffer == ga.lhs.buffer
        || ga.rhs.buffer == ga.lhs.buffer
    {
        return false;
    }
    let written = |k: &Kernel| -> Vec<BufferId> {
        k.stages
            .iter()
            .flat_map(|s| s.stores().iter().map(|st| st.buffer))
            .collect()
    };
    let touched = |k: &Kernel| super::touched_buffers(k);
    let (wa, wb) = (written(ka), written(kb));
    let (ta, tb) = (touched(ka), touched(kb));
    !wa.iter().any(|x| tb.contains(x)) && !wb.iter().any(|x| ta.contains(x))
}

/// What the block choice of the GEMMs `members` (one, or several sharing their
/// left operand, see [`shares_lhs`]) depends on.
pub(super) fn need_group(cx: &Cx, members: &[(&Kernel, &GemmInfo)]) -> Result<GemmNeed> {
    let Some(&(k, g)) = members.first() else {
        return Err(Error::internal("a GEMM group without members"));
    };
    let mut need = need(cx, k, g)?;
    let mut rhs: Vec<BufferId> = vec![g.rhs.buffer];
    for &(k, g) in &members[1..] {
        let more = self::need(cx, k, g)?;
        need.epilogue_bytes_per_point += more.epilogue_bytes_per_point;
        need.epilogue_ops += more.epilogue_ops;
        need.out_lpddr |= more.out_lpddr;
        need.out_elem = need.out_elem.max(more.out_elem);
        need.lpddr[1] |= more.lpddr[1];
        need.batched[1] |= more.batched[1];
        if !rhs.contains(&g.rhs.buffer) {
            rhs.push(g.rhs.buffer);
            need.operand_bytes[1] += more.operand_bytes[1];
        }
    }
    need.group = members.len();
    need.splittable &= members.len() == 1;
    Ok(need)
}

/// What the block choice of GEMM `g` of kernel `k` depends on.
pub(super) fn need(cx: &Cx, k: &Kernel, g: &GemmInfo) -> Result<GemmNeed> {
    let dt = cx
        .program
        .buffer(g.lhs.buffer)
        .map(|buf| buf.ty.dtype)
        .ok_or_else(|| Error::internal("GEMM operand buffer"))?;
    let batch: usize = g.batch.iter().product();
    // A row kernel still counts the accumulator's read as a tile of its own:
    // its blocks are chosen at the least row count of their variant and run at
    // up to twice as many, where the larger blocks the exact count admits (on
    // half the PEs, at twice the bandwidth each) lose: `mlp_block` at 2 x 200
    // rows ran 1.13x its static compile (tests/dynamic_sim.rs). Costing a
    // variant over its whole range of counts would lift this.
    let accumulator = crate::tile::dot_dtype(dt).filter(|_| cx.rows.is_none());
    let epilogue = epilogue_bytes_per_point(k, g, cx.index_dtype.size_bytes(), accumulator);
    let operand = |op: &GemmOperand| {
        let bytes = cx.buffer_bytes(op.buffer);
        (
            cx.in_lpddr(op.buffer),
            op.batch_strides.iter().any(|&s| s != 0),
            bytes,
        )
    };
    let (a_lpddr, a_batched, a_bytes) = operand(&g.lhs);
    let (b_lpddr, b_batched, b_bytes) = operand(&g.rhs);
    // The output: the first buffer the epilogue stores.
    let out = k.stages[g.stage + 1..].iter().find_map(|s| match s {
        Stage::Store { stores, .. } => stores.first().map(|st| st.buffer),
        _ => None,
    });
    let out_elem = out
        .and_then(|id| cx.program.buffer(id))
        .map_or(4, |buf| buf.ty.dtype.size_bytes());
    let epilogue_ops = k.stages[g.stage + 1..]
        .iter()
        .flat_map(|s| &s.body().nodes)
        .filter(|n| {
            matches!(
                n.op,
                ExprOp::Unary(..) | ExprOp::Binary(..) | ExprOp::Where(..) | ExprOp::Cast(..)
            )
        })
        .count();
    // The same buffer on both sides is copied once, so it is staged only as the lhs.
    let same = g.lhs.buffer == g.rhs.buffer;
    Ok(GemmNeed {
        m: cx.sized(g.m),
        n: g.n,
        k: g.k,
        batch,
        elem: dt.size_bytes(),
        narrow: matches!(dt, DType::F16 | DType::Bf16 | DType::I8 | DType::U8),
        lpddr: [a_lpddr, b_lpddr && !same],
        batched: [a_batched, b_batched],
        operand_bytes: [a_bytes, b_bytes],
        out_elem,
        out_lpddr: out.is_none_or(|id| cx.in_lpddr(id)),
        epilogue_bytes_per_point: epilogue,
        epilogue_ops,
        sram_room: cx.sram_room,
        group: 1,
        // A row kernel's launches take the row count; the split's first two do not.
        splittable: split::splittable(cx, g, dt) && a_lpddr && b_lpddr && cx.rows.is_none(),
    })
}

/// Estimated bytes per output point of the epilogue's tiles that span the
/// whole `[BM, BN]` block, every one counted as live at once (as
/// [`bytes_per_point`] counts them): values that depend on the row alone or
/// the column alone (a bias) are a column or a row of the block, not a block.
/// The accumulator read in the dtype the dot engine accumulates in
/// (`dot_dtype`) is the dot's own tile, which the block choice counts already;
/// in another dtype it is a cast of it, a tile of its own.
fn epilogue_bytes_per_point(
    k: &Kernel,
    g: &GemmInfo,
    index_bytes: usize,
    dot_dtype: Option<DType>,
) -> usize {
    const ROW: u8 = 1;
    const COL: u8 = 2;
    let nb = g.batch.len();
    let axis = |t: usize| g.outer_axes.get(t).copied().flatten();
    let (row_axis, col_axis) = (axis(nb), axis(nb + 1));
    let of_var = |v: Var| -> u8 {
        let mut d = 0;
        if row_axis.is_some_and(|a| v == Var::outer(a)) {
            d |= ROW;
        }
        if col_axis.is_some_and(|a| v == Var::outer(a)) {
            d |= COL;
        }
        d
    };
    let mut total = 0;
    for stage in &k.stages[g.stage + 1..] {
        let nodes = &stage.body().nodes;
        let mut deps: Vec<u8> = Vec::with_capacity(nodes.len());
        let mut n = 8;
        for node in nodes {
            let mut d = match &node.op {
                ExprOp::Acc(_) => ROW | COL,
                ExprOp::Load(l) => {
                    let mut d = 0;
                    l.index.for_each_var(&mut |v| d |= of_var(v));
                    d
                }
                ExprOp::Index(e) => {
                    let mut d = 0;
                    e.for_each_var(&mut |v| d |= of_var(v));
                    d
                }
                // A checked index's guards are over the point too: count it whole.
                ExprOp::CheckedIndex { .. } => ROW | COL,
                _ => 0,
            };
            node.for_each_operand(&mut |r| d |= deps.get(r.index()).copied().unwrap_or(ROW | COL));
            let the_accumulator =
                matches!(node.op, ExprOp::Acc(_)) && Some(node.dtype) == dot_dtype;
            if d == ROW | COL && !the_accumulator {
                n += node.dtype.size_bytes().max(1);
                if matches!(
                    node.op,
                    ExprOp::Load(_) | ExprOp::Index(_) | ExprOp::CheckedIndex { .. }
                ) {
                    n += index_bytes + 1;
                }
            }
            deps.push(d);
        }
        total += n + match stage {
            Stage::Store { stores, .. } => stores.len() * (index_bytes + 1),
            Stage::Reduce { .. } => bytes_per_point(stage, index_bytes),
        };
    }
    total
}

/// Emits GEMM `g`'s epilogue (the stages of kernel `k` after its reduction) on
/// `acc`, the dot engine's `[rows, cols]` tile (of `dot_dtype`) of the output
/// rows `rm` and columns `rn` (lanes, masked by `masks`), for the batch
/// coordinates `coords` (none for a single product).
#[allow(clippy::too_many_arguments)]
pub(super) fn emit_epilogue(
    cx: &Cx,
    b: &mut Builder,
    k: &Kernel,
    g: &GemmInfo,
    acc: E,
    dot_dtype: DType,
    rm: &E,
    rn: &E,
    blocks: [usize; 2],
    masks: [Option<E>; 2],
    coords: &[Option<E>],
) -> Result<()> {
    let Stage::Reduce { reductions, .. } = &k.stages[g.stage] else {
        return Err(Error::internal("the GEMM stage is not a reduction"));
    };
    let acc_dtype = reductions[0].dtype;
    // The dot engine's accumulator wraps (integers) or rounds (floats) once into
    // the loop IR's: an i32 sum of i8 products modulo 2^8 is the i8 sum.
    let acc_e = if acc_dtype == dot_dtype {
        acc
    } else {
        b.bind(&format!("{}", g.acc), cast(acc, acc_dtype))
    };
    let mut accs: HashMap<AccId, Val> = HashMap::new();
    accs.insert(
        g.acc,
        Val::Tile(TileVal {
            e: acc_e,
            dtype: acc_dtype,
            deps: AXIS0 | AXIS1,
            depth: Depth::ZERO,
        }),
    );
    let nb = g.batch.len();
    let mut leaves = HashMap::new();
    for (t, axis) in g.outer_axes.iter().enumerate() {
        let Some(axis) = axis else { continue };
        let leaf = if t < nb {
            (
                coords.get(t).cloned().flatten().unwrap_or_else(|| int(0)),
                0,
            )
        } else if t == nb {
            (column(rm.clone()), AXIS0)
        } else {
            (row(rn.clone()), AXIS1)
        };
        leaves.insert(Var::outer(*axis), leaf);
    }
    let frame = Frame {
        rank: 2,
        blocks,
        masks,
        subst: HashMap::new(),
        ext: Extents {
            outer: k.domain.clone(),
            reduce: vec![],
            store: vec![],
        },
        leaves,
    };
    for (si, stage) in k.stages.iter().enumerate().skip(g.stage + 1) {
        emit_stage(cx, b, &frame, &mut accs, si, stage, 1)?;
    }
    Ok(())
}

/// A GEMM kernel lowered into a builder.
pub(super) struct Lowered {
    pub grid: [usize; 3],
    /// A line describing the blocks.
    pub note: String,
    /// The operands read from SRAM copies.
    pub staged: Vec<BufferId>,
    /// For a GEMM split along K (`split.rs`): the launches before its own, and
    /// the partial sums' scratch buffer; else none (a staging launch of
    /// `staged`, if any, is made by the caller).
    pub split: Option<(Vec<TileLaunch>, TensorType)>,
}

/// Lowers the GEMM kernels `members` (one, or several sharing their left
/// operand: [`shares_lhs`]) into `b` with `choice` (the cost model's when `None`
/// or when it does not fit).
///
/// With several members, program `(i, j, z)` computes block `(i, j)` of every
/// member's product: each K step copies the left operand's slice once and each
/// member's right slice, and runs one `dot` per member into its own
/// accumulator; then every member's epilogue runs on its accumulator.
pub(super) fn lower(
    cx: &Cx,
    members: &[(&Kernel, &GemmInfo)],
    b: &mut Builder,
    choice: Option<GemmChoice>,
) -> Result<Lowered> {
    let Some(&(_, g)) = members.first() else {
        return Err(Error::internal("a GEMM group without members"));
    };
    let dt = cx
        .program
        .buffer(g.lhs.buffer)
        .map(|buf| buf.ty.dtype)
        .ok_or_else(|| Error::internal("GEMM operand buffer"))?;
    let batch: usize = g.batch.iter().product();
    let need = need_group(cx, members)?;
    let plan = match choice {
        Some(c) if blocks::gemm_fits(cx.machine, &need, &c) => c,
        _ => blocks::gemm(cx.machine, &need),
    };
    let (bm, bn, bk) = (plan.bm, plan.bn, plan.bk);
    if plan.split > 0 {
        let &(k, g) = &members[0];
        let starts = blocks::split_parts(g.k, plan.split);
        let last = starts.last().copied().unwrap_or(plan.split);
        let fin = blocks::final_blocks(cx.machine, &need, last)
            .ok_or_else(|| Error::internal("a split GEMM whose final launch does not fit"))?;
        let grid = split::final_launch(cx, k, g, b, dt, last, &fin)?;
        let name = super::kernel_name(&k.name);
        let mut before = vec![split::first_part_staging(cx, g, &name, dt, plan.split)?];
        for part in 0..starts.len() - 1 {
            before.push(split::part_launch(cx, g, &name, dt, &plan, part)?);
        }
        let scratch = TensorType::new(DType::F32, vec![g.m, g.n])
            .map_err(|e| Error::internal(format!("partial sums: {e}")))?;
        return Ok(Lowered {
            grid,
            note: format!(
                "[{}, {}] = [{}, {}] @ [{}, {}] in {dt}: {bm} x {bn} blocks, split after K {}{}; \
                 the rest here in {} x {} blocks, {} rows at a time; {} and {} staged in SRAM",
                g.m,
                g.n,
                g.m,
                g.k,
                g.k,
                g.n,
                plan.split,
                if starts.len() > 2 {
                    format!(" and every {} to {last}", plan.split)
                } else {
                    String::new()
                },
                fin.rows,
                fin.cols,
                fin.chunk,
                g.lhs.buffer,
                g.rhs.buffer
            ),
            staged: vec![g.lhs.buffer, g.rhs.buffer],
            split: Some((before, scratch)),
        });
    }
    let mut staged = Vec::new();
    if plan.staged[0] {
        staged.push(g.lhs.buffer);
    }
    if plan.staged[1] {
        for &(_, m) in members {
            if cx.in_lpddr(m.rhs.buffer) && !staged.contains(&m.rhs.buffer) {
                staged.push(m.rhs.buffer);
            }
        }
    }
    let rows = plan.rows.max(1);
    let bmc = b.constant("BM", bm as i64);
    let bnc = b.constant("BN", bn as i64);
    let bkc = b.constant("BK", bk as i64);
    let rn = b.bind("rn", cx.lanes(1, bnc.clone()));
    let rk = b.bind("rk", cx.lanes_from_zero(bk));
    let n_mask =
        (!g.n.is_multiple_of(bn)).then(|| b.bind("mn", lt(row(rn.clone()), int(g.n as i64))));

    // Batch coordinates of this program's product.
    let mut coords: Vec<Option<E>> = vec![None; g.batch.len()];
    if batch > 1 {
        let z = if cx.index_dtype == DType::I32 {
            program_id(2)
        } else {
            cast(program_id(2), DType::I64)
        };
        let bz = b.bind("bz", z);
        for (t, &extent) in g.batch.iter().enumerate() {
            if extent <= 1 {
                continue;
            }
            let stride: usize = g.batch[t + 1..].iter().product();
            let mut e = bz.clone();
            if stride > 1 {
                e = div(e, int(stride as i64));
            }
            if t > 0 {
                e = rem(e, int(extent as i64));
            }
            coords[t] = Some(b.bind(&format!("b{t}"), e));
        }
    }
    let base = |op: &GemmOperand| -> Result<E> {
        let mut p = cx.param(op.buffer)?;
        if op.offset != 0 {
            p = add(p, int(op.offset));
        }
        for (c, &s) in coords.iter().zip(&op.batch_strides) {
            if let (Some(c), true) = (c, s != 0) {
                p = add(p, scaled(c.clone(), s));
            }
        }
        Ok(p)
    };
    let a = &g.lhs;
    let mut pbs = Vec::with_capacity(members.len());
    for &(_, m) in members {
        let w = &m.rhs;
        let mut pb = base(w)?;
        if w.row_stride != 0 {
            pb = add(pb, scaled(column(rk.clone()), w.row_stride));
        }
        if w.col_stride != 0 {
            pb = add(pb, scaled(row(rn.clone()), w.col_stride));
        }
        if w.row_stride == 0 || w.col_stride == 0 {
            pb = call(
                Builtin::BroadcastTo,
                vec![pb, tuple_of(vec![bkc.clone(), bnc.clone()])],
            );
        }
        pbs.push((b.bind("pb", pb), w.row_stride));
    }
    // The K tail, when K is not a multiple of BK, is masked (and reads zeros).
    let k_tail = !g.k.is_multiple_of(bk);
    let kk = int(g.k as i64);
    let b_mask = |lanes: &E| {
        both(
            k_tail.then(|| lt(column(lanes.clone()), kk.clone())),
            n_mask.clone(),
        )
    };

    let d = dtype(dt);
    let a_buf = E::Def(b.var(
        "a_buf",
        call(
            Builtin::LocalAlloc,
            vec![tuple_of(vec![bmc.clone(), bkc.clone()]), d.clone()],
        ),
    ));
    let b_bufs: Vec<E> = members
        .iter()
        .map(|_| {
            E::Def(b.var(
                "b_buf",
                call(
                    Builtin::LocalAlloc,
                    vec![tuple_of(vec![bkc.clone(), bnc.clone()]), d.clone()],
                ),
            ))
        })
        .collect();
    let dot_dtype = crate::tile::dot_dtype(dt)
        .ok_or_else(|| Error::internal("a GEMM of operands the dot engine does not take"))?;
    let nb = g.batch.len();
    let slices = g.k.div_ceil(bk);
    // With several row blocks per program, each block's store is deferred into
    // the next block's K loop, a slice of its rows per step, so that the memory
    // port writes it while the dot engine works.
    let mut deferred: Vec<E> = Vec::new();
    for r in 0..rows {
        if rows > 1 {
            b.comment(&format!("row block {r} of {rows}"));
        }
        let start = if rows > 1 {
            let pid = if cx.index_dtype == DType::I32 {
                program_id(0)
            } else {
                cast(program_id(0), DType::I64)
            };
            add(mul(pid, int((rows * bm) as i64)), int((r * bm) as i64))
        } else {
            int(0)
        };
        let rm = if rows > 1 {
            b.bind("rm", cx.offset_lanes(start, bm))
        } else {
            b.bind("rm", cx.lanes(0, bmc.clone()))
        };
        let m_mask = cx.row_mask(b, "mm", column(rm.clone()), g.m, rows * bm);
        let mut pa = base(a)?;
        if a.row_stride != 0 {
            pa = add(pa, scaled(column(rm.clone()), a.row_stride));
        }
        if a.col_stride != 0 {
            pa = add(pa, scaled(row(rk.clone()), a.col_stride));
        }
        // A stride of 0 (a broadcast operand, or an axis of extent 1) leaves the
        // pointer tile narrower than the local buffer it is copied into.
        if a.row_stride == 0 || a.col_stride == 0 {
            pa = call(
                Builtin::BroadcastTo,
                vec![pa, tuple_of(vec![bmc.clone(), bkc.clone()])],
            );
        }
        let pa = b.bind("pa", pa);
        let a_mask = |lanes: &E| {
            both(
                m_mask.clone(),
                k_tail.then(|| lt(row(lanes.clone()), kk.clone())),
            )
        };
        let accs: Vec<_> = members
            .iter()
            .map(|_| {
                b.var(
                    "acc",
                    call(
                        Builtin::Zeros,
                        vec![tuple_of(vec![bmc.clone(), bnc.clone()]), dtype(dot_dtype)],
                    ),
                )
            })
            .collect();
        let stores = std::mem::take(&mut deferred);
        // Step `s` of this block's K loop stores rows `[s * BM / steps, (s + 1) *
        // BM / steps)` of the previous block: the rows spread evenly over the steps.
        let steps = slices.saturating_sub(1).max(1) as i64;
        let emit_deferred = |b: &mut Builder, step: Option<E>| {
            for st in &stores {
                let E::Call(Builtin::Store, args, _) = st else {
                    continue;
                };
                let mut args = args.clone();
                if let Some(step) = &step {
                    let lanes = b.bind("rows", column(arange(bm)));
                    let lo = b.bind("lo", div(mul(step.clone(), int(bm as i64)), int(steps)));
                    let hi = b.bind(
                        "hi",
                        div(mul(add(step.clone(), int(1)), int(bm as i64)), int(steps)),
                    );
                    let chunk = and(ge(lanes.clone(), lo), lt(lanes, hi));
                    let mask = match args.get(2) {
                        Some(m) => and(m.clone(), chunk),
                        None => chunk,
                    };
                    args.truncate(2);
                    args.push(mask);
                }
                b.stmt(call(Builtin::Store, args));
            }
        };
        if slices > 0 {
            b.comment("K in slices of BK through local memory: the next slice is copied while");
            b.comment("this one is multiplied");
            let ta = b.var("ta", dma(&a_buf, pa.clone(), a_mask(&rk)));
            let tbs: Vec<_> = pbs
                .iter()
                .zip(&b_bufs)
                .map(|((pb, _), b_buf)| b.var("tb", dma(b_buf, pb.clone(), b_mask(&rk))))
                .collect();
            let wait = |b: &mut Builder| {
                b.stmt(call(Builtin::DmaWait, vec![E::Def(ta)]));
                for &tb in &tbs {
                    b.stmt(call(Builtin::DmaWait, vec![E::Def(tb)]));
                }
            };
            if slices > 1 {
                let k0 = b.open_loop("k0", int(0), int(((slices - 1) * bk) as i64), bkc.clone());
                wait(b);
                let x = b.var("x", call(Builtin::LocalLoad, vec![a_buf.clone()]));
                let ys: Vec<_> = b_bufs
                    .iter()
                    .map(|b_buf| b.var("y", call(Builtin::LocalLoad, vec![b_buf.clone()])))
                    .collect();
                let next = add(k0.clone(), bkc.clone());
                let lanes = if k_tail {
                    b.bind("kn", cx.offset_lanes(next.clone(), bk))
                } else {
                    rk.clone()
                };
                let advance = |p: &E, stride: i64| -> E {
                    if stride == 0 {
                        p.clone()
                    } else {
                        add(p.clone(), scaled(next.clone(), stride))
                    }
                };
                b.assign(ta, dma(&a_buf, advance(&pa, a.col_stride), a_mask(&lanes)));
                for ((&tb, b_buf), (pb, stride)) in tbs.iter().zip(&b_bufs).zip(&pbs) {
                    b.assign(tb, dma(b_buf, advance(pb, *stride), b_mask(&lanes)));
                }
                if !stores.is_empty() {
                    emit_deferred(b, Some(div(k0, bkc.clone())));
                }
                for (&acc, &y) in accs.iter().zip(&ys) {
                    b.assign(
                        acc,
                        call(Builtin::Dot, vec![E::Def(x), E::Def(y), E::Def(acc)]),
                    );
                }
                b.close_loop();
            } else {
                emit_deferred(b, None);
            }
            wait(b);
            let x = if members.len() > 1 {
                E::Def(b.var("x", call(Builtin::LocalLoad, vec![a_buf.clone()])))
            } else {
                call(Builtin::LocalLoad, vec![a_buf.clone()])
            };
            for (&acc, b_buf) in accs.iter().zip(&b_bufs) {
                b.assign(
                    acc,
                    call(
                        Builtin::Dot,
                        vec![
                            x.clone(),
                            call(Builtin::LocalLoad, vec![b_buf.clone()]),
                            E::Def(acc),
                        ],
                    ),
                );
            }
        } else {
            emit_deferred(b, None);
        }

        // The epilogue, on the accumulator tile (each member's on its own).
        let last = r + 1 == rows;
        if !last {
            b.capture_stores();
        }
        for (&(k, m), &acc) in members.iter().zip(&accs) {
            if members.len() > 1 {
                b.comment(&format!("the epilogue of {}", k.name));
            }
            emit_epilogue(
                cx,
                b,
                k,
                m,
                E::Def(acc),
                dot_dtype,
                &rm,
                &rn,
                [bm, bn],
                [m_mask.clone(), n_mask.clone()],
                &coords,
            )?;
        }
        if !last {
            deferred = b.take_captured_stores();
        }
    }
    let note = format!(
        "{}{}[{}, {}] = [{}, {}] @ [{}, {}] in {dt}: {bm} x {bn} blocks{}, K in slices of {bk}{}",
        if members.len() > 1 {
            format!("{} GEMMs sharing their lhs, each ", members.len())
        } else {
            String::new()
        },
        if nb > 0 {
            format!("{batch} products of ")
        } else {
            String::new()
        },
        g.m,
        g.n,
        g.m,
        g.k,
        g.k,
        g.n,
        if rows > 1 {
            format!(", {rows} row blocks per program")
        } else {
            String::new()
        },
        if staged.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = staged.iter().map(|b| b.to_string()).collect();
            format!("; {} staged in SRAM first", names.join(" and "))
        }
    );
    Ok(Lowered {
        grid: [g.m.div_ceil(rows * bm), g.n.div_ceil(bn), batch.max(1)],
        note,
        staged,
        split: None,
    })
}

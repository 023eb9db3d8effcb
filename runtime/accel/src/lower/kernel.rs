//! Lowering a loop-IR kernel that is not a GEMM: choosing its layout, then
//! emitting each stage.
//!
//! Layouts, by the shape of the kernel:
//!
//! - **pointwise, flat**: no stage loops over an inner domain; the outer domain
//!   is flattened and each program handles `BO` consecutive points (`o`);
//! - **pointwise, 2-D**: the same with two or more outer axes whose last extent
//!   splits into blocks of 16 to 1024 with few idle lanes: tiles are `[BR, BC]`
//!   blocks of rows (`o`, the leading axes flattened) by columns (`c`, the last
//!   axis), so values indexed by the row alone (a per-row mean) or by the column
//!   alone (a bias) are read once per row or column of the block instead of
//!   once per element;
//! - **rows**: some stage loops over an inner domain (a reduction, or a store
//!   after one): tiles are `[BO, BR]`, `BO` outer points (`o[:, None]`) by a
//!   block of the stage's flattened inner domain (`r[None, :]`). A stage whose
//!   inner domain is longer than its block loops over blocks (`for rb in
//!   range(0, R, BR)`), accumulating as it goes. When stages of one inner
//!   block read something no row changes (an affine weight), a program may loop
//!   over `LOOPS` blocks of rows (`for ob in range(0, LOOPS)`), those loads
//!   written once before the loop ([`blocks::row_loops`] chooses the count).
//!
//! A stage with an inner domain of one point is computed at the outer points
//! alone, and a stage with an empty domain does nothing (its accumulators hold
//! their identities).

use super::blocks::{self, InnerNeed};
use super::body::{Body, Scope};
use super::builder::{add, cast, column, int, lt, mul, program_id, row, Builder};
use super::frame::{unflatten, Frame, AXIS0, AXIS1};
use super::ops::Val;
use super::reduce;
use super::stage::{self, bytes_per_point, points, Cx};
use crate::error::Result;
use ferrite_ir::loops::{
    AccId, ExprOp, ExprRef, Extents, IndexExpr, Kernel, ReduceKind, Stage, Var, VarKind,
};
use ferrite_ir::DType;
use std::collections::HashMap;

/// True for a stage that loads a buffer it stores (an `index_add` adding at checked
/// indices): its inner points run one at a time, since two of them may pick the same
/// element, and a tile of them would lose all but one addition.
fn updates_in_place(s: &Stage) -> bool {
    s.stores().iter().any(|w| {
        s.body()
            .nodes
            .iter()
            .any(|n| matches!(&n.op, ExprOp::Load(l) if l.buffer == w.buffer))
    })
}

/// Lowers a non-GEMM kernel into `b`; returns the launch grid and a line
/// describing the blocks.
pub(super) fn lower(cx: &Cx, k: &Kernel, b: &mut Builder) -> Result<([usize; 3], String)> {
    let index_bytes = cx.index_dtype.size_bytes();
    let outer = points(&k.domain);
    let has_inner = k.stages.iter().any(|s| points(s.domain()) > 1);
    let mut accs: HashMap<AccId, Val> = HashMap::new();
    let o_var = Var::outer(0);
    if has_inner {
        let needs: Vec<InnerNeed> = k
            .stages
            .iter()
            .map(|s| InnerNeed {
                extent: points(s.domain()),
                bytes_per_point: bytes_per_point(s, index_bytes),
                serial: matches!(s, Stage::Reduce { reductions, .. }
                    if reductions.iter().any(|r| r.kind == ReduceKind::Prod))
                    || updates_in_place(s),
            })
            .collect();
        let (b0, inner) = blocks::rows(cx.machine, cx.sized(outer), &needs);
        // Loads that no row changes (an affine weight), in stages of one inner block.
        let fixed = if cx.rows.is_none() {
            row_invariant_loads(k, &inner)
        } else {
            Vec::new()
        };
        let fixed_bytes: u64 = fixed
            .iter()
            .map(|&(si, r)| {
                let s = &k.stages[si];
                let d = s.body().get(r).map_or(4, |n| n.dtype.size_bytes());
                (points(s.domain()) * d) as u64
            })
            .sum();
        let held = needs
            .iter()
            .zip(&inner)
            .map(|(s, &bi)| (b0 * bi * s.bytes_per_point) as u64)
            .max()
            .unwrap_or(0);
        let (lpddr, sram) = row_bytes(cx, k, &fixed);
        let loops = blocks::row_loops(
            cx.machine,
            blocks::RowLoopNeed {
                blocks: outer.div_ceil(b0),
                fixed: fixed_bytes,
                held,
                lpddr: lpddr * b0 as u64,
                sram: sram * b0 as u64,
            },
        );
        let bo = b.constant("BO", b0 as i64);
        if loops > 1 {
            emit_invariant_loads(cx, b, k, &inner, &fixed, b0)?;
        }
        let o = if loops > 1 {
            let lc = b.constant("LOOPS", loops as i64);
            b.comment("each program takes LOOPS blocks of BO rows, reading the loads above once");
            let ob = b.open_loop("ob", int(0), lc.clone(), int(1));
            let start = mul(add(mul(program_id(0), lc), ob), bo);
            let start = if cx.index_dtype == DType::I32 {
                start
            } else {
                cast(start, cx.index_dtype)
            };
            b.bind("o", column(cx.offset_lanes(start, b0)))
        } else {
            b.bind("o", column(cx.lanes(0, bo)))
        };
        let mask = cx.row_mask(b, "mo", o.clone(), outer, b0 * loops);
        let mut frame = Frame {
            rank: 2,
            blocks: [b0, 1],
            masks: [mask, None],
            subst: HashMap::new(),
            ext: Extents {
                outer: vec![outer],
                reduce: vec![],
                store: vec![],
            },
            leaves: HashMap::from([(o_var, (o, AXIS0))]),
        };
        for (i, c) in unflatten(&k.domain, &IndexExpr::Var(o_var))
            .into_iter()
            .enumerate()
        {
            frame.subst.insert(Var::outer(i), c);
        }
        for (si, (stage, &bi)) in k.stages.iter().zip(&inner).enumerate() {
            emit_stage(cx, b, &frame, &mut accs, si, stage, bi)?;
        }
        if loops > 1 {
            b.close_loop();
        }
        let distinct: Vec<String> = k
            .stages
            .iter()
            .zip(&inner)
            .filter(|(s, _)| points(s.domain()) > 1)
            .map(|(s, bi)| format!("{} in blocks of {bi}", points(s.domain())))
            .collect();
        let note = format!(
            "{} outer point{} per program{}; inner domains of {}",
            b0 * loops,
            if b0 * loops == 1 { "" } else { "s" },
            if loops > 1 {
                format!(" ({loops} blocks of {b0})")
            } else {
                String::new()
            },
            distinct.join(", ")
        );
        return Ok(([outer.div_ceil(b0 * loops), 1, 1], note));
    }
    let bpp = k
        .stages
        .iter()
        .map(|s| bytes_per_point(s, index_bytes))
        .max()
        .unwrap_or(8);
    let last = k.domain.last().copied().unwrap_or(1);
    // Rows along the last axis (a domain `[1, .., R]`) are never split into
    // columns: the row mask is along tile axis 0.
    let split = if k.domain.len() >= 2 && !cx.rows_along(k.domain.len() - 1) {
        blocks::column_block(last)
    } else {
        None
    };
    if let Some(bc) = split {
        let rows = outer / last.max(1);
        let col_blocks = last.div_ceil(bc);
        let br = blocks::row_block(cx.machine, cx.sized(rows), col_blocks, bc, bpp);
        let brc = b.constant("BR", br as i64);
        let bcc = b.constant("BC", bc as i64);
        let o = b.bind("o", column(cx.lanes(0, brc)));
        let c = b.bind("c", row(cx.lanes(1, bcc)));
        let mo = cx.row_mask(b, "mo", o.clone(), rows, br);
        let mc = (!last.is_multiple_of(bc)).then(|| b.bind("mc", lt(c.clone(), int(last as i64))));
        let c_var = Var::outer(1);
        let mut frame = Frame {
            rank: 2,
            blocks: [br, bc],
            masks: [mo, mc],
            subst: HashMap::new(),
            ext: Extents {
                outer: vec![rows, last],
                reduce: vec![],
                store: vec![],
            },
            leaves: HashMap::from([(o_var, (o, AXIS0)), (c_var, (c, AXIS1))]),
        };
        let lead = &k.domain[..k.domain.len() - 1];
        for (i, e) in unflatten(lead, &IndexExpr::Var(o_var))
            .into_iter()
            .enumerate()
        {
            frame.subst.insert(Var::outer(i), e);
        }
        frame
            .subst
            .insert(Var::outer(k.domain.len() - 1), IndexExpr::Var(c_var));
        for (si, stage) in k.stages.iter().enumerate() {
            emit_stage(cx, b, &frame, &mut accs, si, stage, 1)?;
        }
        let note = format!("[{br}, {bc}] blocks of the [{rows}, {last}] outer domain per program");
        return Ok(([rows.div_ceil(br), col_blocks, 1], note));
    }
    let b0 = blocks::pointwise(cx.machine, cx.sized(outer), bpp);
    let bo = b.constant("BO", b0 as i64);
    let o = b.bind("o", cx.lanes(0, bo));
    let mask = cx.row_mask(b, "mo", o.clone(), outer, b0);
    let mut frame = Frame {
        rank: 1,
        blocks: [b0, 1],
        masks: [mask, None],
        subst: HashMap::new(),
        ext: Extents {
            outer: vec![outer],
            reduce: vec![],
            store: vec![],
        },
        leaves: HashMap::from([(o_var, (o, AXIS0))]),
    };
    for (i, c) in unflatten(&k.domain, &IndexExpr::Var(o_var))
        .into_iter()
        .enumerate()
    {
        frame.subst.insert(Var::outer(i), c);
    }
    for (si, stage) in k.stages.iter().enumerate() {
        emit_stage(cx, b, &frame, &mut accs, si, stage, 1)?;
    }
    Ok((
        [outer.div_ceil(b0), 1, 1],
        format!("{b0} of the {outer} outer points per program"),
    ))
}

/// Emits stage `si` of a kernel in `outer`'s frame, with inner blocks of `block`
/// points; the accumulators it defines are added to `accs`.
pub(super) fn emit_stage(
    cx: &Cx,
    b: &mut Builder,
    outer: &Frame,
    accs: &mut HashMap<AccId, Val>,
    si: usize,
    stage: &Stage,
    block: usize,
) -> Result<()> {
    match stage {
        Stage::Reduce { .. } => reduce::emit(cx, b, outer, accs, si, stage, block),
        Stage::Store { .. } => stage::emit_store(cx, b, outer, accs, si, stage, block),
    }
}

/// The loads of a row kernel that no outer point changes, by stage and node:
/// live loads of a stage of one inner block (`inner`, its block, covers its
/// domain) whose index and guard mention no outer variable and no other node,
/// of a buffer the kernel does not store. None in a kernel that gathers (a load
/// at a data-dependent index): which program first reads a gathered line, and
/// pays LPDDR for it, depends on the rows each program takes, which
/// [`blocks::row_loops`] does not model (gpt2's embedding and first layer norm
/// ran 15% slower with two blocks per program).
fn row_invariant_loads(k: &Kernel, inner: &[usize]) -> Vec<(usize, ExprRef)> {
    let gathers = k.stages.iter().any(|s| {
        s.body().nodes.iter().any(|n| {
            let ExprOp::Load(l) = &n.op else {
                return false;
            };
            let mut dynamic = false;
            for e in std::iter::once(&l.index).chain(l.guard.iter().map(|g| &g.expr)) {
                e.for_each_ref(&mut |_| dynamic = true);
            }
            dynamic
        })
    });
    if gathers {
        return Vec::new();
    }
    let stored: Vec<_> = k
        .stages
        .iter()
        .flat_map(|s| s.stores().iter().map(|w| w.buffer))
        .collect();
    let mut out = Vec::new();
    for (si, (s, &bi)) in k.stages.iter().zip(inner).enumerate() {
        let total = points(s.domain());
        if total <= 1 || bi < total || updates_in_place(s) {
            continue;
        }
        let nodes = &s.body().nodes;
        let mut live = vec![false; nodes.len()];
        for r in s.roots() {
            if let Some(l) = live.get_mut(r.index()) {
                *l = true;
            }
        }
        for i in (0..nodes.len()).rev() {
            if live[i] {
                nodes[i].for_each_operand(&mut |r| {
                    if let Some(l) = live.get_mut(r.index()) {
                        *l = true;
                    }
                });
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            let ExprOp::Load(l) = &n.op else { continue };
            if !live[i] || stored.contains(&l.buffer) {
                continue;
            }
            let mut fixed = true;
            for e in std::iter::once(&l.index).chain(l.guard.iter().map(|g| &g.expr)) {
                e.for_each_var(&mut |v| fixed &= v.kind != VarKind::Outer);
                e.for_each_ref(&mut |_| fixed = false);
            }
            if fixed {
                out.push((si, ExprRef(i as u32)));
            }
        }
    }
    out
}

/// Bytes a row kernel moves per outer point at LPDDR and at SRAM (by where each
/// buffer lives): its loads but `fixed` (an expression read by several stages
/// counts once; one that no inner variable changes, one element) and its stores.
fn row_bytes(cx: &Cx, k: &Kernel, fixed: &[(usize, ExprRef)]) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut lpddr, mut sram) = (0u64, 0u64);
    let mut add = |id, bytes: u64| {
        if cx.in_lpddr(id) {
            lpddr += bytes;
        } else {
            sram += bytes;
        }
    };
    for (si, s) in k.stages.iter().enumerate() {
        let total = points(s.domain()) as u64;
        let nodes = &s.body().nodes;
        for (i, n) in nodes.iter().enumerate() {
            let ExprOp::Load(l) = &n.op else { continue };
            if fixed.contains(&(si, ExprRef(i as u32))) || !seen.insert((l.buffer, &l.index)) {
                continue;
            }
            let mut inner = false;
            l.index
                .for_each_var(&mut |v| inner |= v.kind != VarKind::Outer);
            let d = n.dtype.size_bytes() as u64;
            add(l.buffer, if inner { total * d } else { d });
        }
        for w in s.stores() {
            let d = s.body().get(w.value).map_or(4, |n| n.dtype.size_bytes()) as u64;
            add(w.buffer, total * d);
        }
    }
    (lpddr, sram)
}

/// Emits the loads `fixed` ([`row_invariant_loads`]) ahead of the row loop: the
/// stages inside it write the same expressions, which take these bindings.
fn emit_invariant_loads(
    cx: &Cx,
    b: &mut Builder,
    k: &Kernel,
    inner: &[usize],
    fixed: &[(usize, ExprRef)],
    b0: usize,
) -> Result<()> {
    b.comment("loads that no row changes");
    let accs = HashMap::new();
    let outer = Frame {
        rank: 2,
        blocks: [b0, 1],
        masks: [None, None],
        subst: HashMap::new(),
        ext: Extents {
            outer: vec![points(&k.domain)],
            reduce: vec![],
            store: vec![],
        },
        leaves: HashMap::new(),
    };
    for (si, (stage, &bi)) in k.stages.iter().zip(inner).enumerate() {
        let roots: Vec<ExprRef> = fixed
            .iter()
            .filter(|&&(s, _)| s == si)
            .map(|&(_, r)| r)
            .collect();
        if roots.is_empty() {
            continue;
        }
        let open = stage::Inner::open(cx, b, &outer, stage, bi);
        let scope = Scope {
            params: cx.params,
            accs: &accs,
            frame: &open.frame,
            index_dtype: cx.index_dtype,
            probe: cx.probe,
        };
        Body::new(&scope, stage.body()).emit(b, &roots)?;
        open.close(b);
    }
    Ok(())
}

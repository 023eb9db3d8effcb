//! GEMMs split along K: three launches or more in which LPDDR and the dot
//! engine work at the same time.
//!
//! A staged GEMM is two launches that add up: the staging launch is all LPDDR
//! (the dot engines wait), the GEMM launch all dot engine and SRAM, and its
//! last block's store is a tail that nothing hides. Split after `K0` of its K:
//!
//! 1. `NAME_stage` copies the first part of both operands (`k < K0`) from LPDDR
//!    to their SRAM copies, in equal parts on every PE;
//! 2. `NAME_part` multiplies that part, block by block, into partial sums that
//!    it writes to an SRAM scratch buffer, and, a slice per step of its K loop,
//!    copies the rest of the operands (`k >= K0`) to the SRAM copies: the
//!    memory port reads LPDDR while the dot engine works;
//! 3. `NAME` itself keeps the block's whole rest of the rhs (`[K - K0, BN]`) in
//!    local memory and finishes the block in chunks of rows: each chunk's lhs
//!    rows and partial sums are copied in while the previous chunk's dot runs,
//!    and its epilogue's store is posted while the next one's runs, so that
//!    only the last chunk's store is left at the end.
//!
//! The rest the final launch holds is at most what local memory takes. When
//! `K0` is less than half of K, more part launches come between 2 and 3
//! (`NAME_part1`, `NAME_part2`, ..., `blocks::split_parts`): each multiplies
//! the next `K0` of K on top of the partial sums (read back before its K loop)
//! and copies the part after it, so that LPDDR is read while the dot engines
//! work through most of K instead of in a staging launch that idles them. Each
//! adds a launch and a round trip of the partial sums through SRAM, which pays
//! where the dot engine, not the memory port, bounds a part launch (1024 on
//! the MTIA-1 preset, whose 128 KiB of local memory keep the final launch's
//! rest small).
//!
//! A program reads only what an earlier launch has written (never what
//! another program of its own launch copies), so the launches are correct in
//! any order of their programs. The copies are addressed by the operands'
//! strides, whatever their layout: each program copies its rows of the lhs
//! and its columns of the rhs for the part of K at hand.

use super::blocks::{staging_programs, Chunking, FinalBlocks, GemmNeed};
use super::builder::{
    add, and, arange, call, column, div, int, lt, mul, param, program_id, rem, row,
};
use super::builder::{Builder, E};
use super::gemm::emit_epilogue;
use super::stage::{param_name, Cx};
use super::staging::copy_name;
use super::{Bound, GemmChoice, TileLaunch};
use crate::error::{Error, Result};
use crate::tile::{self, ast::Builtin};
use ferrite_ir::loops::{GemmInfo, GemmOperand, Kernel};
use ferrite_ir::DType;

/// The name of the scratch parameter that holds the partial sums.
pub(super) const PARTIAL: &str = "partial";

/// Elements one staging copy moves at most.
const COPY_TILE: usize = 16384;

/// True when GEMM `g` can be split: one product (no batch), float operands
/// (partial sums in f32) from distinct buffers, offsets in i32.
pub(super) fn splittable(cx: &Cx, g: &GemmInfo, dt: DType) -> bool {
    g.batch.iter().product::<usize>() <= 1
        && matches!(dt, DType::F32 | DType::F16 | DType::Bf16)
        && g.lhs.buffer != g.rhs.buffer
        && cx.index_dtype == DType::I32
        && [&g.lhs, &g.rhs]
            .iter()
            .all(|op| op.row_stride != 0 && op.col_stride != 0)
}

/// `e * c`, skipping a multiplication by 1.
fn scaled(e: E, c: i64) -> E {
    if c == 1 {
        e
    } else {
        mul(e, int(c))
    }
}

/// The pointer tile of operand `op` at rows `r` (a column `[R, 1]`) and
/// columns `c` (a row `[1, C]`) of its matrix, from parameter `base`.
fn at(base: &str, op: &GemmOperand, r: E, c: E) -> E {
    let mut p = param(base);
    if op.offset != 0 {
        p = add(p, int(op.offset));
    }
    add(add(p, scaled(r, op.row_stride)), scaled(c, op.col_stride))
}

/// `dma_async(buf, ptrs[, mask])`.
fn dma(buf: &E, ptrs: E, mask: Option<E>) -> E {
    let mut args = vec![buf.clone(), ptrs];
    args.extend(mask);
    call(Builtin::DmaAsync, args)
}

/// `a & b` of optional masks.
fn both(a: Option<E>, b: Option<E>) -> Option<E> {
    match (a, b) {
        (Some(a), Some(b)) => Some(and(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `load(ptrs, mask)` stored to the same offsets of the copy: `store(copy, .., mask)`.
fn copy_stmt(b: &mut Builder, src: E, dst: E, mask: E) {
    let value = call(Builtin::Load, vec![src, mask.clone()]);
    b.stmt(call(Builtin::Store, vec![dst, value, mask]));
}

/// Checks and packages a built kernel as a launch.
fn finish(
    b: Builder,
    header: Vec<String>,
    name: &str,
    sig: &[(String, DType)],
    grid: [usize; 3],
    params: Vec<Bound>,
) -> Result<TileLaunch> {
    let mut tile_kernel = b.finish(header, name, sig);
    let text = tile::print_located(&mut tile_kernel);
    let file = format!("{name}.tile");
    let mut checked = tile::check(&tile_kernel).map_err(|e| {
        Error::internal(format!(
            "the kernel `{name}` does not check: {}\n{text}",
            e.to_diagnostic(&file, &text)
        ))
    })?;
    checked.locate(&file, &text);
    Ok(TileLaunch {
        name: name.to_string(),
        text,
        kernel: checked,
        grid,
        params,
        staging: Vec::new(),
        scratch: None,
    })
}

/// The launch that copies the first `split` of K of both operands to SRAM,
/// each program its rows of the lhs and its columns of the rhs.
pub(super) fn first_part_staging(
    cx: &Cx,
    g: &GemmInfo,
    kernel: &str,
    dt: DType,
    split: usize,
) -> Result<TileLaunch> {
    let programs = staging_programs(cx.machine);
    let (a, w) = (&g.lhs, &g.rhs);
    let mut b = Builder::new();
    let names = [
        param_name(a.buffer),
        param_name(w.buffer),
        copy_name(a.buffer),
        copy_name(w.buffer),
    ];
    for n in &names {
        b.reserve(n);
    }
    let (mp, np) = (g.m.div_ceil(programs), g.n.div_ceil(programs));
    let q = program_id(0);
    // The lhs: rows [q * MP, (q + 1) * MP), K in chunks of KC.
    let kc = (COPY_TILE / mp).clamp(1, split);
    let rm = b.bind(
        "rm",
        column(add(mul(q.clone(), int(mp as i64)), arange(mp))),
    );
    let m_on = b.bind("mm", lt(rm.clone(), int(g.m as i64)));
    let kc_lanes = b.bind("rk", row(arange(kc)));
    let c = b.open_loop("c0", int(0), int(split as i64), int(kc as i64));
    let kk = b.bind("k", add(c, kc_lanes));
    let on = and(m_on, lt(kk.clone(), int(split as i64)));
    let on = b.bind("on", on);
    copy_stmt(
        &mut b,
        at(&names[0], a, rm.clone(), kk.clone()),
        at(&names[2], a, rm, kk),
        on,
    );
    b.close_loop();
    // The rhs: columns [q * NP, (q + 1) * NP), K in chunks.
    let kr = (COPY_TILE / np).clamp(1, split);
    let rn = b.bind("rn", row(add(mul(q, int(np as i64)), arange(np))));
    let n_on = b.bind("mn", lt(rn.clone(), int(g.n as i64)));
    let kr_lanes = b.bind("rk", column(arange(kr)));
    let c = b.open_loop("c0", int(0), int(split as i64), int(kr as i64));
    let kk = b.bind("k", add(c, kr_lanes));
    let on = b.bind("on", and(lt(kk.clone(), int(split as i64)), n_on));
    copy_stmt(
        &mut b,
        at(&names[1], w, kk.clone(), rn.clone()),
        at(&names[3], w, kk, rn),
        on,
    );
    b.close_loop();
    let name = format!("{kernel}_stage");
    let header = vec![format!(
        "{name}: copies K [0, {split}) of {} and {} from LPDDR to SRAM for {kernel}, \
         {mp} rows and {np} columns per program",
        a.buffer, w.buffer
    )];
    let sig: Vec<(String, DType)> = names.iter().map(|n| (n.clone(), dt)).collect();
    finish(
        b,
        header,
        &name,
        &sig,
        [programs, 1, 1],
        vec![
            Bound::Buffer(a.buffer),
            Bound::Buffer(w.buffer),
            Bound::Copy(a.buffer),
            Bound::Copy(w.buffer),
        ],
    )
}

/// Part launch `part` (`blocks::part_range`): multiplies its part of K, `[lo,
/// hi)`, into the partial sums (on top of them after the first part) and
/// copies K `[hi, end)` of both operands to SRAM, a slice per step.
pub(super) fn part_launch(
    cx: &Cx,
    g: &GemmInfo,
    kernel: &str,
    dt: DType,
    c: &GemmChoice,
    part: usize,
) -> Result<TileLaunch> {
    let (bm, bn, bk) = (c.bm, c.bn, c.bk);
    // `split`: where this part ends and the range it copies begins.
    let (lo, split, end) = super::blocks::part_range(g.k, c.split, part);
    let only = super::blocks::split_parts(g.k, c.split).len() == 2;
    let (a, w) = (&g.lhs, &g.rhs);
    let grid = [g.m.div_ceil(bm), g.n.div_ceil(bn), 1];
    let programs = grid[0] * grid[1];
    let rest = end - split;
    let steps = (split - lo) / bk;
    let (mp, np) = (g.m.div_ceil(programs), g.n.div_ceil(programs));
    let (ca, cb) = super::blocks::split_chunks(
        cx.machine,
        (g.m, g.n),
        dt.size_bytes(),
        (bm, bn),
        steps,
        rest,
    );
    let mut b = Builder::new();
    let names = [
        param_name(a.buffer),
        param_name(w.buffer),
        copy_name(a.buffer),
        copy_name(w.buffer),
        PARTIAL.to_string(),
    ];
    for n in &names {
        b.reserve(n);
    }
    let d = super::builder::dtype(dt);
    let rm = b.bind("rm", cx.lanes(0, int(bm as i64)));
    let rn = b.bind("rn", cx.lanes(1, int(bn as i64)));
    let rk = b.bind("rk", arange(bk));
    let m_on =
        (!g.m.is_multiple_of(bm)).then(|| b.bind("mm", lt(column(rm.clone()), int(g.m as i64))));
    let n_on =
        (!g.n.is_multiple_of(bn)).then(|| b.bind("mn", lt(row(rn.clone()), int(g.n as i64))));
    let k0 = if lo == 0 {
        rk.clone()
    } else {
        b.bind("k0", add(int(lo as i64), rk.clone()))
    };
    let pa = b.bind("pa", at(&names[2], a, column(rm.clone()), row(k0.clone())));
    let pb = b.bind("pb", at(&names[3], w, column(k0), row(rn.clone())));
    let alloc = |b: &mut Builder, hint: &str, r: usize, c: usize| {
        E::Def(b.var(
            hint,
            call(
                Builtin::LocalAlloc,
                vec![E::Tuple(vec![int(r as i64), int(c as i64)]), d.clone()],
            ),
        ))
    };
    let a_buf = alloc(&mut b, "a_buf", bm, bk);
    let b_buf = alloc(&mut b, "b_buf", bk, bn);
    let sa_buf = alloc(&mut b, "sa_buf", ca.rows, ca.cols);
    let sb_buf = alloc(&mut b, "sb_buf", cb.rows, cb.cols);
    // This program's share of the rest: rows of the lhs, columns of the rhs,
    // a chunk of each per step (pieces of rows in whole cache lines, or whole
    // rows, so that no line is read by two programs).
    b.comment(&format!(
        "this program's share of K [{split}, {end}): {mp} rows of {} and {np} columns of {}, \
         in chunks of {} x {} and {} x {}",
        a.buffer, w.buffer, ca.rows, ca.cols, cb.rows, cb.cols
    ));
    let q = b.bind(
        "q",
        add(program_id(0), mul(program_id(1), int(grid[0] as i64))),
    );
    let a_base = b.bind("qa", mul(q.clone(), int(mp as i64)));
    let b_base = b.bind("qb", mul(q, int(np as i64)));
    // The rows `[R, 1]` and columns `[1, C]` of chunk `step` of a share of
    // `share` rows and columns from `base` in the operand (whose extents are
    // `limit`), and the mask of the chunk's elements in both.
    let chunk = |b: &mut Builder,
                 step: E,
                 c: Chunking,
                 base: (E, E),
                 share: (usize, usize),
                 limit: (usize, usize)|
     -> (E, E, E) {
        let (r0, c0) = if c.per_row == 1 {
            (mul(step, int(c.rows as i64)), int(0))
        } else {
            (
                div(step.clone(), int(c.per_row as i64)),
                mul(rem(step, int(c.per_row as i64)), int(c.cols as i64)),
            )
        };
        let lr = b.bind("lr", column(add(r0, arange(c.rows))));
        let lc = b.bind("lc", row(add(c0, arange(c.cols))));
        let rr = b.bind("rr", add(base.0, lr.clone()));
        let cc = b.bind("cc", add(base.1, lc.clone()));
        let mut on = lt(lr, int(share.0 as i64));
        if limit.0 != usize::MAX {
            on = and(on, lt(rr.clone(), int(limit.0 as i64)));
        }
        if !share.1.is_multiple_of(c.cols) {
            on = and(on, lt(lc, int(share.1 as i64)));
        }
        if limit.1 != usize::MAX {
            on = and(on, lt(cc.clone(), int(limit.1 as i64)));
        }
        let on = b.bind("on", on);
        (rr, cc, on)
    };
    let share = |b: &mut Builder, step: E| -> (E, E, E, E, E, E) {
        let (ra, ka, on_a) = chunk(
            b,
            step.clone(),
            ca,
            (a_base.clone(), int(split as i64)),
            (mp, rest),
            (
                if programs * mp > g.m { g.m } else { usize::MAX },
                usize::MAX,
            ),
        );
        let (kb, nb, on_b) = chunk(
            b,
            step,
            cb,
            (int(split as i64), b_base.clone()),
            (rest, np),
            (
                usize::MAX,
                if programs * np > g.n { g.n } else { usize::MAX },
            ),
        );
        (
            at(&names[0], a, ra.clone(), ka.clone()),
            at(&names[2], a, ra, ka),
            on_a,
            at(&names[1], w, kb.clone(), nb.clone()),
            at(&names[3], w, kb, nb),
            on_b,
        )
    };
    let (sa0, _, on_a0, sb0, _, on_b0) = share(&mut b, int(0));
    let ta = b.var("ta", dma(&a_buf, pa.clone(), m_on.clone()));
    let tb = b.var("tb", dma(&b_buf, pb.clone(), n_on.clone()));
    let tsa = b.var("tsa", dma(&sa_buf, sa0, Some(on_a0)));
    let tsb = b.var("tsb", dma(&sb_buf, sb0, Some(on_b0)));
    let init = if lo == 0 {
        call(
            Builtin::Zeros,
            vec![
                E::Tuple(vec![int(bm as i64), int(bn as i64)]),
                super::builder::dtype(DType::F32),
            ],
        )
    } else {
        b.comment(&format!(
            "the partial sums of K [0, {lo}) from the launches before"
        ));
        let sums = add(
            add(param(PARTIAL), mul(column(rm.clone()), int(g.n as i64))),
            row(rn.clone()),
        );
        let mut args = vec![sums];
        args.extend(both(m_on.clone(), n_on.clone()));
        call(Builtin::Load, args)
    };
    let acc = b.var("acc", init);
    let copied = if end == g.k {
        "the rest"
    } else {
        "the next part"
    };
    if lo == 0 {
        b.comment(
            "K [0, split) in slices of BK, the next slice copied while this one is multiplied;",
        );
    } else {
        b.comment(&format!(
            "K [{lo}, {split}) in slices of BK, the next slice copied while this one is multiplied;"
        ));
    }
    b.comment(&format!(
        "each step also copies a slice of this program's share of {copied} to SRAM"
    ));
    let t = b.open_loop("t", int(0), int(steps as i64), int(1));
    b.stmt(call(Builtin::DmaWait, vec![E::Def(ta)]));
    b.stmt(call(Builtin::DmaWait, vec![E::Def(tb)]));
    let x = b.var("x", call(Builtin::LocalLoad, vec![a_buf.clone()]));
    let y = b.var("y", call(Builtin::LocalLoad, vec![b_buf.clone()]));
    let next = b.bind("nk", mul(add(t.clone(), int(1)), int(bk as i64)));
    let kn = b.bind("kn", add(next.clone(), rk.clone()));
    let on_next = b.bind("on", lt(kn.clone(), int((split - lo) as i64)));
    b.assign(
        ta,
        dma(
            &a_buf,
            add(pa.clone(), scaled(next.clone(), a.col_stride)),
            both(m_on.clone(), Some(row(on_next.clone()))),
        ),
    );
    b.assign(
        tb,
        dma(
            &b_buf,
            add(pb.clone(), scaled(next, w.row_stride)),
            both(n_on.clone(), Some(column(on_next))),
        ),
    );
    b.assign(
        acc,
        call(Builtin::Dot, vec![E::Def(x), E::Def(y), E::Def(acc)]),
    );
    // After the dot, when the share's copy issued a step ago has landed: the
    // next slices are queued ahead of the next share's copy.
    b.stmt(call(Builtin::DmaWait, vec![E::Def(tsa)]));
    b.stmt(call(Builtin::DmaWait, vec![E::Def(tsb)]));
    let (_, da, on_a, _, db, on_b) = share(&mut b, t.clone());
    b.stmt(call(
        Builtin::Store,
        vec![da, call(Builtin::LocalLoad, vec![sa_buf.clone()]), on_a],
    ));
    b.stmt(call(
        Builtin::Store,
        vec![db, call(Builtin::LocalLoad, vec![sb_buf.clone()]), on_b],
    ));
    let (sa1, _, on_a1, sb1, _, on_b1) = share(&mut b, add(t, int(1)));
    b.assign(tsa, dma(&sa_buf, sa1, Some(on_a1)));
    b.assign(tsb, dma(&sb_buf, sb1, Some(on_b1)));
    b.close_loop();
    for tok in [ta, tb, tsa, tsb] {
        b.stmt(call(Builtin::DmaWait, vec![E::Def(tok)]));
    }
    let out = add(
        add(param(PARTIAL), mul(column(rm), int(g.n as i64))),
        row(rn),
    );
    let mut args = vec![out, E::Def(acc)];
    args.extend(both(m_on, n_on));
    b.stmt(call(Builtin::Store, args));
    let name = if part == 0 {
        format!("{kernel}_part")
    } else {
        format!("{kernel}_part{part}")
    };
    let header = vec![if only {
        format!(
            "{name}: the first {split} of K of {kernel} ({bm} x {bn} blocks, K slices of {bk}) \
             into partial sums in SRAM, while copying the rest of K of {} and {} to SRAM",
            a.buffer, w.buffer
        )
    } else {
        format!(
            "{name}: K [{lo}, {split}) of {kernel} ({bm} x {bn} blocks, K slices of {bk}) \
             into partial sums in SRAM, while copying K [{split}, {end}) of {} and {} to SRAM",
            a.buffer, w.buffer
        )
    }];
    let mut sig: Vec<(String, DType)> = names[..4].iter().map(|n| (n.clone(), dt)).collect();
    sig.push((PARTIAL.to_string(), DType::F32));
    finish(
        b,
        header,
        &name,
        &sig,
        grid,
        vec![
            Bound::Buffer(a.buffer),
            Bound::Buffer(w.buffer),
            Bound::Copy(a.buffer),
            Bound::Copy(w.buffer),
            Bound::Scratch,
        ],
    )
}

/// Emits into `b` the final launch of a split GEMM: K `[split, K)` from the
/// SRAM copies (`cx.params` names them) on top of the partial sums, and the
/// epilogue, in `blocks` (`blocks::final_blocks`: the rest of the rhs must fit
/// local memory), a chunk of rows at a time; returns the grid.
pub(super) fn final_launch(
    cx: &Cx,
    k: &Kernel,
    g: &GemmInfo,
    b: &mut Builder,
    dt: DType,
    split: usize,
    blocks: &FinalBlocks,
) -> Result<[usize; 3]> {
    let (bm, bn, ch) = (blocks.rows, blocks.cols, blocks.chunk);
    let (a, w) = (&g.lhs, &g.rhs);
    let rest = g.k - split;
    let chunks = bm / ch;
    let name = |id| -> Result<String> {
        cx.params
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::internal(format!("{id} is not a parameter")))
    };
    let (an, wn) = (name(a.buffer)?, name(w.buffer)?);
    b.reserve(PARTIAL);
    let d = super::builder::dtype(dt);
    let rn = b.bind("rn", cx.lanes(1, int(bn as i64)));
    let n_on =
        (!g.n.is_multiple_of(bn)).then(|| b.bind("mn", lt(row(rn.clone()), int(g.n as i64))));
    let rx = b.bind("rx", add(int(split as i64), arange(rest)));
    let alloc = |b: &mut Builder, hint: &str, r: usize, c: usize| {
        E::Def(b.var(
            hint,
            call(
                Builtin::LocalAlloc,
                vec![E::Tuple(vec![int(r as i64), int(c as i64)]), d.clone()],
            ),
        ))
    };
    b.comment(&format!(
        "the block's rhs for K [{split}, {}), kept in local memory for every chunk of rows",
        g.k
    ));
    let stash = alloc(b, "w_rest", rest, bn);
    let ts = b.var(
        "ts",
        dma(
            &stash,
            at(&wn, w, column(rx.clone()), row(rn.clone())),
            n_on.clone(),
        ),
    );
    let a_bufs = [alloc(b, "a_rest", ch, rest), alloc(b, "a_rest", ch, rest)];
    let p_bufs: Vec<E> = (0..2)
        .map(|_| {
            E::Def(b.var(
                "p_buf",
                call(
                    Builtin::LocalAlloc,
                    vec![
                        E::Tuple(vec![int(ch as i64), int(bn as i64)]),
                        super::builder::dtype(DType::F32),
                    ],
                ),
            ))
        })
        .collect();
    let row0 = b.bind("r0", mul(program_id(0), int(bm as i64)));
    let mut rms = Vec::with_capacity(chunks);
    let mut masks = Vec::with_capacity(chunks);
    let mut tokens: Vec<(E, E)> = Vec::with_capacity(chunks);
    let issue = |b: &mut Builder, i: usize, rms: &mut Vec<E>, masks: &mut Vec<Option<E>>| {
        let rm = b.bind(
            "rm",
            add(row0.clone(), add(int((i * ch) as i64), arange(ch))),
        );
        let m_on = (!g.m.is_multiple_of(bm))
            .then(|| b.bind("mm", lt(column(rm.clone()), int(g.m as i64))));
        let ta = b.var(
            "ta",
            dma(
                &a_bufs[i % 2],
                at(&an, a, column(rm.clone()), row(rx.clone())),
                m_on.clone(),
            ),
        );
        let mn = both(m_on.clone(), n_on.clone());
        let tp = b.var(
            "tp",
            dma(
                &p_bufs[i % 2],
                add(
                    add(param(PARTIAL), mul(column(rm.clone()), int(g.n as i64))),
                    row(rn.clone()),
                ),
                mn,
            ),
        );
        rms.push(rm);
        masks.push(m_on);
        (E::Def(ta), E::Def(tp))
    };
    tokens.push(issue(b, 0, &mut rms, &mut masks));
    b.stmt(call(Builtin::DmaWait, vec![E::Def(ts)]));
    let y = b.var("y", call(Builtin::LocalLoad, vec![stash]));
    for i in 0..chunks {
        b.comment(&format!("rows [{}, {}) of the block", i * ch, (i + 1) * ch));
        if i + 1 < chunks {
            let t = issue(b, i + 1, &mut rms, &mut masks);
            tokens.push(t);
        }
        let (ta, tp) = tokens[i].clone();
        b.stmt(call(Builtin::DmaWait, vec![ta]));
        b.stmt(call(Builtin::DmaWait, vec![tp]));
        // Variables, not bindings: a buffer read again is another value, which a
        // binding of the same expression would share.
        let x = b.var("x", call(Builtin::LocalLoad, vec![a_bufs[i % 2].clone()]));
        let p = b.var("p", call(Builtin::LocalLoad, vec![p_bufs[i % 2].clone()]));
        let acc = E::Def(b.var(
            "acc",
            call(Builtin::Dot, vec![E::Def(x), E::Def(y), E::Def(p)]),
        ));
        emit_epilogue(
            cx,
            b,
            k,
            g,
            acc,
            DType::F32,
            &rms[i],
            &rn,
            [ch, bn],
            [masks[i].clone(), n_on.clone()],
            &[],
        )?;
    }
    Ok([g.m.div_ceil(bm), g.n.div_ceil(bn), 1])
}

/// True when split choice `c` fits local memory in every one of its GEMM launches.
pub(super) fn fits(mach: &crate::sim::Machine, g: &GemmNeed, c: &GemmChoice) -> bool {
    let (bm, bn, bk, split) = (c.bm, c.bn, c.bk, c.split);
    if split == 0
        || split >= g.k
        || !split.is_multiple_of(bk)
        || c.rows != 1
        || c.staged != [true, true]
    {
        return false;
    }
    let starts = super::blocks::split_parts(g.k, split);
    let parts_fit = (0..starts.len() - 1).all(|p| {
        let (lo, hi, copy_end) = super::blocks::part_range(g.k, split, p);
        let (ca, cb) = super::blocks::split_chunks(
            mach,
            (g.m, g.n),
            g.elem,
            (bm, bn),
            (hi - lo) / bk,
            copy_end - hi,
        );
        let per = (ca.rows * ca.cols).max(cb.rows * cb.cols);
        // The part launch: its slices and the tiles read from them, its share's
        // copies (two buffers and two tiles), the accumulator.
        let part = 2 * (bm * bk + bk * bn) * g.elem + 4 * per * g.elem + bm * bn * 4;
        part as u64 <= mach.local_memory_bytes && per <= crate::tile::MAX_TILE_ELEMENTS
    });
    parts_fit
        && starts
            .last()
            .is_some_and(|&at| super::blocks::final_blocks(mach, g, at).is_some())
        && [bm * bk, bk * bn, bm * bn]
            .iter()
            .all(|&n| n <= crate::tile::MAX_TILE_ELEMENTS)
}

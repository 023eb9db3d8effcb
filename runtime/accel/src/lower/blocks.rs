//! Block sizes: how much of the domain one program covers.
//!
//! Two constraints and one goal:
//!
//! - every tile a program holds must fit the PE's local memory. The estimate
//!   counts every value of a stage body as live at once (an upper bound), plus
//!   offsets and masks of its accesses; GEMM counts its local buffers, the
//!   operand tiles read from them, the accumulator and the epilogue;
//! - a tile has at most [`MAX_TILE_ELEMENTS`] elements;
//! - programs should keep every PE busy: blocks shrink (in powers of two) until
//!   the grid has at least one program per PE, or until a tile would drop below
//!   one vector's width.
//!
//! GEMM blocks are chosen by a small cost model of the simulator's timing
//! (documented in `docs/tile-language.md`): for each candidate `BM x BN x BK`, the
//! K loop costs `max(dot, operand DMA)` per step, where the DMA's bandwidth is
//! the SRAM share of the PEs active in a wave, and the grid runs in waves of one
//! program per PE. A GEMM split along K (`split.rs`) is costed launch by launch
//! ([`split_cycles`]), each step or chunk of rows the larger of its dot and the
//! memory port's work.

use super::GemmChoice;
use crate::sim::Machine;
use crate::tile::MAX_TILE_ELEMENTS;

/// The widest inner block of a reduction (longer rows loop over blocks).
const MAX_INNER_BLOCK: usize = 4096;

/// Elements per cycle of one PE's vector engine on 32-bit data: tiles narrower
/// than this waste lanes.
fn vector_width(m: &Machine) -> usize {
    let per_pe = m.vector_tflops_f32 * 1e12 / m.pes().max(1) as f64 / m.clock_hz();
    prev_pow2(per_pe.round() as usize)
}

/// The largest power of two at most `n` (1 for `n <= 1`).
pub(super) fn prev_pow2(n: usize) -> usize {
    if n <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// The smallest power of two at least `n` (1 for `n <= 1`).
pub(super) fn next_pow2(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// How many elements of a tile whose points need `bytes_per_point` fit in local memory.
fn fitting(m: &Machine, bytes_per_point: usize) -> usize {
    let budget = m.local_memory_bytes as usize / bytes_per_point.max(1);
    prev_pow2(budget.min(MAX_TILE_ELEMENTS)).max(1)
}

/// The block of a 1-D pointwise program over `total` points.
///
/// The last block's padding lanes move nothing, but its program counts as
/// active in its wave, so the others' share of bandwidth is what full blocks
/// would get: blocks halve (down to a vector's width) while the padding is
/// more than 1/4096 of the domain.
pub(super) fn pointwise(m: &Machine, total: usize, bytes_per_point: usize) -> usize {
    let fit = fitting(m, bytes_per_point);
    let spread = prev_pow2(total.div_ceil(m.pes().max(1)));
    let floor = vector_width(m).min(next_pow2(total));
    let mut block = spread.max(floor).min(fit).min(next_pow2(total));
    while block > floor && total > block && (total.div_ceil(block) * block - total) * 4096 > total {
        block /= 2;
    }
    block
}

/// The column block of a 2-D pointwise program over `cols` columns: the largest
/// power of two from 16 to 1024 that leaves at most an eighth of the lanes idle
/// in the last, partial block; `None` when none does (the columns are better
/// flattened with the rows).
pub(super) fn column_block(cols: usize) -> Option<usize> {
    let mut best = None;
    let mut b = 16;
    while b <= 1024 && b <= next_pow2(cols) {
        let padded = cols.div_ceil(b) * b;
        if (padded - cols) * 8 <= cols {
            best = Some(b);
        }
        b *= 2;
    }
    best
}

/// The row block of a 2-D program whose tiles are `[rows_block, cols_block]`,
/// over `rows` rows and `col_blocks` column blocks.
pub(super) fn row_block(
    m: &Machine,
    rows: usize,
    col_blocks: usize,
    cols_block: usize,
    bytes_per_point: usize,
) -> usize {
    let fit = (fitting(m, bytes_per_point) / cols_block.max(1)).max(1);
    let spread = prev_pow2((rows * col_blocks.max(1)).div_ceil(m.pes().max(1)));
    let floor = (vector_width(m) / cols_block.max(1)).max(1);
    prev_pow2(spread.max(floor).min(fit)).min(next_pow2(rows))
}

/// What a stage of a row-reduction kernel needs from its inner block.
pub(super) struct InnerNeed {
    /// Points of the stage's inner domain.
    pub extent: usize,
    /// Estimated bytes per tile point of its body.
    pub bytes_per_point: usize,
    /// True when the stage reduces one point at a time (products).
    pub serial: bool,
}

/// The outer block and each stage's inner block of a kernel of row reductions
/// over `outer` rows.
pub(super) fn rows(m: &Machine, outer: usize, stages: &[InnerNeed]) -> (usize, Vec<usize>) {
    let inner: Vec<usize> = stages
        .iter()
        .map(|s| {
            if s.serial || s.extent <= 1 {
                1
            } else {
                // As few blocks as fit, all of one length: a domain that fits one
                // block is one block of its own length, so no lane pads it.
                let cap = MAX_INNER_BLOCK.min(fitting(m, s.bytes_per_point));
                s.extent.div_ceil(s.extent.div_ceil(cap))
            }
        })
        .collect();
    let mut fit = MAX_TILE_ELEMENTS;
    for (s, &bi) in stages.iter().zip(&inner) {
        fit = fit.min(fitting(m, s.bytes_per_point) / bi.max(1));
    }
    let widest = inner.iter().copied().max().unwrap_or(1);
    let spread = prev_pow2(outer.div_ceil(m.pes().max(1)));
    let floor = (vector_width(m) / widest).max(1);
    let b0 = prev_pow2(spread.max(floor).min(fit.max(1))).min(next_pow2(outer));
    (b0.max(1), inner)
}

/// A row-reduction kernel's blocks of rows, for [`row_loops`].
pub(super) struct RowLoopNeed {
    /// Blocks of rows.
    pub blocks: usize,
    /// Bytes every block reads that no row changes (an affine weight and bias).
    pub fixed: u64,
    /// The most bytes of tiles a block holds.
    pub held: u64,
    /// Bytes a block moves at LPDDR and at SRAM (but `fixed`).
    pub lpddr: u64,
    pub sram: u64,
}

/// Row blocks per program of a row-reduction kernel.
///
/// A program that loops over several blocks reads the `fixed` bytes once,
/// before the loop, and keeps them in local memory (when they fit beside the
/// tiles): each further block saves their read at its SRAM share (after the
/// first reader, they come from the read cache) for one scalar cycle of the
/// loop. But fewer programs may leave PEs idle whose share of bandwidth the
/// others get only in a wave of fewer programs. So each count up to the waves
/// of one block per program is costed as the simulator times it: programs in
/// waves of one per PE, each block's bytes at its wave's shares, and the one
/// with the shortest longest PE is taken.
pub(super) fn row_loops(m: &Machine, need: RowLoopNeed) -> usize {
    let r = PerCycle::new(m, false);
    let waves = need.blocks.div_ceil(r.pes);
    if waves <= 1 || need.fixed == 0 || need.held + need.fixed > m.local_memory_bytes {
        return 1;
    }
    let cycles = |loops: usize| {
        let programs = need.blocks.div_ceil(loops);
        let mut busy = vec![0.0f64; r.pes];
        for i in 0..programs {
            let wave = i / r.pes * r.pes;
            let (lshare, sshare) = r.shares((programs - wave).min(r.pes));
            let blocks = loops.min(need.blocks - i * loops) as f64;
            let fixed = need.fixed as f64 / sshare;
            let block = need.lpddr as f64 / lshare + need.sram as f64 / sshare;
            busy[i % r.pes] += if loops > 1 {
                fixed + blocks * (block + 1.0)
            } else {
                blocks * (block + fixed)
            };
        }
        busy.into_iter().fold(0.0, f64::max)
    };
    let mut best = (1, cycles(1));
    for loops in 2..=waves {
        let c = cycles(loops);
        if c < best.1 {
            best = (loops, c);
        }
    }
    best.0
}

/// A GEMM's shape and what its blocks must hold.
pub(super) struct GemmNeed {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Product of the batch extents.
    pub batch: usize,
    /// Bytes per operand element.
    pub elem: usize,
    /// True for f16, bf16, i8 and u8 operands (the dot engine's faster rates).
    pub narrow: bool,
    /// Whether each operand lives in LPDDR (else in SRAM).
    pub lpddr: [bool; 2],
    /// Whether each operand differs between the products of the batch (else
    /// every product reads the same matrix).
    pub batched: [bool; 2],
    /// Bytes of each operand's whole buffer (what staging it in SRAM copies).
    pub operand_bytes: [u64; 2],
    /// Bytes per output element, and whether the output lives in LPDDR.
    pub out_elem: usize,
    pub out_lpddr: bool,
    /// Estimated bytes per output point of the epilogue.
    pub epilogue_bytes_per_point: usize,
    /// Vector operations per output point of the epilogue.
    pub epilogue_ops: usize,
    /// SRAM free for staged operands while the kernel runs.
    pub sram_room: u64,
    /// GEMMs of this shape sharing the left operand in one launch (1 for a
    /// plain GEMM): each program copies a slice of the left operand once and one
    /// of each right operand, runs one dot and one epilogue (the epilogue
    /// figures above are their sum) and stores one block per GEMM.
    pub group: usize,
    /// Whether the GEMM may be split along K (`split.rs`).
    pub splittable: bool,
}

/// A GEMM choice with the cycles the cost model expects of it (both launches).
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) struct GemmPlan {
    pub choice: GemmChoice,
    pub cycles: f64,
}

/// The machine's figures per cycle, as the simulator's timing model uses them.
struct PerCycle {
    pes: usize,
    dot: f64,
    local: f64,
    sram: f64,
    lpddr: f64,
    vector: f64,
    launch: f64,
}

impl PerCycle {
    fn new(mach: &Machine, narrow: bool) -> PerCycle {
        let hz = mach.clock_hz();
        let pes = mach.pes().max(1);
        let dot = if narrow {
            mach.dot_tflops_f16
        } else {
            mach.dot_tflops_f32
        };
        PerCycle {
            pes,
            dot: dot * 1e12 / pes as f64 / hz,
            local: mach.local_bandwidth_gbps * 1e9 / hz,
            sram: mach.sram_bandwidth_gbps * 1e9 / hz,
            lpddr: mach.lpddr_bandwidth_gbps * 1e9 / hz,
            vector: vector_width(mach) as f64,
            launch: mach.launch_overhead_us * 1e-6 * hz,
        }
    }

    /// The (LPDDR, SRAM) bytes per cycle of one PE among `active`.
    fn shares(&self, active: usize) -> (f64, f64) {
        let active = active.max(1) as f64;
        (
            (self.lpddr / active).min(self.local),
            (self.sram / active).min(self.local),
        )
    }
}

/// The programs of a staging launch: one per PE.
pub(super) fn staging_programs(m: &Machine) -> usize {
    m.pes().max(1)
}

/// Cycles of the launch that copies `bytes` from LPDDR to SRAM, spread evenly
/// over the PEs: each program reads its share at LPDDR and writes it at SRAM.
fn staging_cycles(r: &PerCycle, bytes: u64) -> f64 {
    let per = bytes.div_ceil(r.pes as u64) as f64;
    let (lpddr, sram) = r.shares(r.pes);
    r.launch + per / lpddr + per / sram
}

/// Cycles of the GEMM launch with blocks `bm x bn x bk`, where operand `i` is
/// read from LPDDR when `lpddr[i]`: the model of the simulator's timing.
///
/// Programs run in linear order on PE `i % PEs`. A block of an LPDDR operand
/// is read from LPDDR by the first program that needs it (the SRAM read cache
/// is cold) and from SRAM by every later one, which is what makes the grid's
/// order matter: the first program of each row and column of blocks pays for
/// its panels at a 1/PEs share of LPDDR. Each K step costs the local reads
/// plus the larger of the dot and the next slice's copy; the epilogue and the
/// store of the block follow the last step.
fn gemm_cycles(
    r: &PerCycle,
    g: &GemmNeed,
    (bm, bn, bk): (usize, usize, usize),
    rows: usize,
    lpddr: [bool; 2],
) -> f64 {
    let rows = rows.max(1);
    let blocks_m = g.m.div_ceil(bm);
    let (gx, gy, gz) = (g.m.div_ceil(rows * bm), g.n.div_ceil(bn), g.batch.max(1));
    let programs = gx * gy * gz;
    let za = if g.batched[0] { gz } else { 1 };
    let zb = if g.batched[1] { gz } else { 1 };
    let mut seen_a = vec![false; blocks_m * za];
    let mut seen_b = vec![false; gy * zb];
    let mut busy = vec![0.0f64; r.pes];
    let group = g.group.max(1);
    let (a, b) = ((bm * bk * g.elem) as f64, (group * bk * bn * g.elem) as f64);
    let dot = (2 * group * bm * bn * bk) as f64 / r.dot;
    let read_local = ((a + b) / r.local).ceil();
    let steps = g.k.div_ceil(bk).max(1) as f64;
    let epilogue = ((bm * bn * g.epilogue_ops) as f64 / r.vector).ceil();
    let out = (group * bm * bn * g.out_elem) as f64;
    for i in 0..programs {
        let (x, y, z) = (i % gx, i / gx % gy, i / (gx * gy));
        let wave = i / r.pes * r.pes;
        let (lshare, sshare) = r.shares((programs - wave).min(r.pes));
        let store = out / if g.out_lpddr { lshare } else { sshare };
        let b_at = y + gy * if g.batched[1] { z } else { 0 };
        let mut cycles = 0.0;
        for sub in 0..rows {
            let row_block = x * rows + sub;
            if row_block >= blocks_m {
                break;
            }
            let a_at = row_block + blocks_m * if g.batched[0] { z } else { 0 };
            let a_cold = lpddr[0] && !std::mem::replace(&mut seen_a[a_at], true);
            let b_cold = lpddr[1] && !std::mem::replace(&mut seen_b[b_at], true);
            let copy =
                a / if a_cold { lshare } else { sshare } + b / if b_cold { lshare } else { sshare };
            // The previous block's store shares the port with this block's copies.
            let deferred = if sub > 0 {
                store / (steps - 1.0).max(1.0)
            } else {
                0.0
            };
            cycles += copy
                + (steps - 1.0) * (read_local + 1.0 + dot.max(copy + deferred))
                + read_local
                + dot
                + epilogue;
        }
        busy[i % r.pes] += cycles + store;
    }
    r.launch + busy.into_iter().fold(0.0, f64::max)
}

/// Elements of `elem` bytes in one line of the SRAM read cache: a copy whose
/// chunks are whole lines reads each line from LPDDR once, by one program.
pub(super) fn line_elements(m: &Machine, elem: usize) -> usize {
    (m.sram_line_bytes as usize / elem.max(1)).max(1)
}

/// How a step of the part launch of a split GEMM copies a piece of a
/// program's share of an operand: the share is `rows x cols` (row-major in the
/// share's own order), copied a `[rows, cols]` chunk per step.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Chunking {
    /// The chunk's shape: one row's `cols`-wide piece (`rows == 1`, then a row
    /// takes `per_row` chunks), or whole rows.
    pub rows: usize,
    pub cols: usize,
    /// Chunks per row of the share (1 when a chunk is whole rows).
    pub per_row: usize,
    /// Chunks in all, at most one per step.
    pub chunks: usize,
}

/// The chunks of a `rows x cols` share spread over `steps` steps: pieces of
/// a row in whole cache lines of `line` elements when a row is more than a
/// step's part, else whole rows.
pub(super) fn chunking(rows: usize, cols: usize, steps: usize, line: usize) -> Chunking {
    let steps = steps.max(1);
    let target = (rows * cols).div_ceil(steps).max(1);
    if cols > target {
        let mut width = target.div_ceil(line) * line;
        while width < cols {
            let per_row = cols.div_ceil(width);
            if rows * per_row <= steps {
                return Chunking {
                    rows: 1,
                    cols: width,
                    per_row,
                    chunks: rows * per_row,
                };
            }
            width += line;
        }
    }
    let r = rows
        .div_ceil(steps)
        .max(target.div_ceil(cols.max(1)))
        .min(rows.max(1));
    Chunking {
        rows: r,
        cols,
        per_row: 1,
        chunks: rows.div_ceil(r),
    }
}

/// Where the parts of K of a GEMM split after `split` begin (`split.rs`): at
/// 0, and then every `split` while more than `split` is left after it, so
/// that the final launch finishes at most `split` of K (which it must hold in
/// local memory). The last entry is where the final launch begins; a part
/// launch multiplies each part, and copies the next one (or the final's rest)
/// while it does. With `split` at least half of K there is one part.
pub(super) fn split_parts(k: usize, split: usize) -> Vec<usize> {
    let mut starts = vec![0];
    if split == 0 {
        return starts;
    }
    let mut at = split;
    while at < k {
        starts.push(at);
        if k - at <= split {
            break;
        }
        at += split;
    }
    starts
}

/// The K range that part launch `part` of a GEMM split after `split`
/// multiplies, and the end of the range it copies (which starts where the
/// multiplied one ends): the next part, or the final launch's rest.
pub(super) fn part_range(k: usize, split: usize, part: usize) -> (usize, usize, usize) {
    let starts = split_parts(k, split);
    let at = |i: usize| starts.get(i).copied().unwrap_or(k);
    (at(part), at(part + 1), at(part + 2))
}

/// The chunkings of a program's shares of the lhs (`[rows, copied]`) and the
/// rhs (`[copied, columns]`) that a part launch of a split GEMM copies over
/// `steps` K steps.
pub(super) fn split_chunks(
    mach: &Machine,
    (m, n): (usize, usize),
    elem: usize,
    (bm, bn): (usize, usize),
    steps: usize,
    copied: usize,
) -> (Chunking, Chunking) {
    let programs = m.div_ceil(bm) * n.div_ceil(bn);
    let line = line_elements(mach, elem);
    (
        chunking(m.div_ceil(programs), copied, steps, line),
        chunking(copied, n.div_ceil(programs), steps, line),
    )
}

/// The blocks of the final launch of a GEMM split after `split` of its K: a
/// program finishes `rows x cols` of the output, `chunk` rows at a time.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) struct FinalBlocks {
    pub rows: usize,
    pub cols: usize,
    pub chunk: usize,
    /// The cycles the model expects of the launch (without its overhead).
    pub cycles: f64,
}

/// The fastest blocks of the final launch of a GEMM split after `split` that
/// fit local memory, by the model of [`split_cycles`]: per program, the rest
/// of the rhs, then per chunk of rows the larger of its dot and its port (its
/// lhs rows, partial sums and store). Every tile a program holds counts: the
/// rest of the rhs and the tile read from it, two buffers of lhs rows and of
/// partial sums and the tiles read from them, the chunk's result and
/// epilogue. `None` when nothing fits.
pub(super) fn final_blocks(mach: &Machine, g: &GemmNeed, split: usize) -> Option<FinalBlocks> {
    let r = PerCycle::new(mach, g.narrow);
    let rest = g.k.checked_sub(split).filter(|&x| x > 0)?;
    let e = g.elem;
    let mut best: Option<FinalBlocks> = None;
    let top = |x: usize| next_pow2(x).min(512);
    let mut bm = 16.min(top(g.m));
    while bm <= top(g.m) {
        let mut bn = 16.min(top(g.n));
        while bn <= top(g.n) {
            for parts in [4, 8, 16] {
                let ch = (bm / parts).max(1);
                let bytes = 2 * rest * bn * e
                    + 3 * ch * rest * e
                    + 3 * ch * bn * 4
                    + ch * bn * (4 + g.epilogue_bytes_per_point);
                if bytes as u64 > mach.local_memory_bytes
                    || rest * bn > MAX_TILE_ELEMENTS
                    || ch * rest > MAX_TILE_ELEMENTS
                {
                    continue;
                }
                let chunks = bm.div_ceil(ch);
                let programs = g.m.div_ceil(bm) * g.n.div_ceil(bn);
                let mut last = vec![0.0f64; r.pes];
                for i in 0..programs {
                    let wave = i / r.pes * r.pes;
                    let (lshare, sshare) = r.shares((programs - wave).min(r.pes));
                    let out_share = if g.out_lpddr { lshare } else { sshare };
                    let w_rest = (rest * bn * e) as f64;
                    let rows_in = (ch * rest * e + ch * bn * 4) as f64;
                    let store = (ch * bn * g.out_elem) as f64 / out_share;
                    let c_dot = (2 * ch * bn * rest) as f64 / r.dot
                        + (rows_in / r.local).ceil()
                        + ((ch * bn * g.epilogue_ops) as f64 / r.vector).ceil();
                    let c_port = rows_in / sshare + store;
                    let mut c = w_rest / sshare + rows_in / sshare + (w_rest / r.local).ceil();
                    c += chunks as f64 * c_dot.max(c_port);
                    if c_dot > c_port {
                        c += store;
                    }
                    last[i % r.pes] += c;
                }
                let cycles = last.into_iter().fold(0.0, f64::max);
                if best.is_none_or(|b| cycles < b.cycles) {
                    best = Some(FinalBlocks {
                        rows: bm,
                        cols: bn,
                        chunk: ch,
                        cycles,
                    });
                }
            }
            bn *= 2;
        }
        bm *= 2;
    }
    best
}

/// Cycles of the launches of a GEMM split along K after `split` (`split.rs`),
/// by the same per-program model as [`gemm_cycles`]: the staging of the first
/// part; each part launch, whose steps cost the larger of the dot and the port
/// (the slices from SRAM and a slice of the next part's copy), after the
/// first one reading the partial sums before its K loop; the final launch,
/// the rest of the rhs, then per chunk of rows the larger of its dot and its
/// port (its lhs rows, partial sums and store).
fn split_cycles(
    mach: &Machine,
    r: &PerCycle,
    g: &GemmNeed,
    (bm, bn, bk): (usize, usize, usize),
    split: usize,
) -> f64 {
    let e = g.elem as f64;
    let first = ((g.m + g.n) * split * g.elem) as u64;
    let stage = staging_cycles(r, first);
    let (gx, gy) = (g.m.div_ceil(bm), g.n.div_ceil(bn));
    let programs = gx * gy;
    let starts = split_parts(g.k, split);
    let Some(fin) = starts.last().and_then(|&at| final_blocks(mach, g, at)) else {
        return f64::INFINITY;
    };
    let longest = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    let mut total = stage + fin.cycles + r.launch;
    for p in 0..starts.len() - 1 {
        let (lo, hi, copy_end) = part_range(g.k, split, p);
        let steps = (hi - lo) / bk;
        let (ca, cb) = split_chunks(mach, (g.m, g.n), g.elem, (bm, bn), steps, copy_end - hi);
        let copy_steps = ca.chunks.max(cb.chunks);
        let mut part = vec![0.0f64; r.pes];
        for i in 0..programs {
            let wave = i / r.pes * r.pes;
            let (lshare, sshare) = r.shares((programs - wave).min(r.pes));
            let slices = ((bm * bk + bk * bn) as f64) * e;
            let share = ((ca.rows * ca.cols + cb.rows * cb.cols) as f64) * e;
            let dot = (2 * bm * bn * bk) as f64 / r.dot;
            let local = ((slices + share) / r.local).ceil() + 1.0;
            let masks =
                16.0 + ((6 * (ca.rows + ca.cols + cb.rows + cb.cols)) as f64 / r.vector).ceil();
            let copy = slices / sshare;
            let with_share = copy + share / lshare + share / sshare;
            let sums = (bm * bn * 4) as f64 / sshare;
            let mut c = copy
                + ((bm * bn) as f64 / r.vector).ceil()
                + copy_steps.min(steps) as f64 * (local + masks + dot.max(with_share))
                + steps.saturating_sub(copy_steps) as f64 * (local + dot.max(copy));
            // The partial sums: read back first after the first part, written last.
            if p > 0 {
                c += sums;
            }
            c += sums;
            part[i % r.pes] += c;
        }
        total += r.launch + longest(part);
    }
    total
}

/// True when `c` fits local memory and the tile limit, and stages only LPDDR
/// operands that fit the free SRAM.
pub(super) fn gemm_fits(mach: &Machine, g: &GemmNeed, c: &GemmChoice) -> bool {
    let (bm, bn, bk) = (c.bm, c.bn, c.bk);
    if bm == 0 || bn == 0 || bk == 0 || !(c.rows == 1 || (c.rows == 2 && g.m > bm)) {
        return false;
    }
    if c.split > 0 {
        // Its launches hold other tiles than an unsplit GEMM's (`split::fits`);
        // the SRAM copies and the partial sums must fit beside each other.
        return g.splittable
            && g.lpddr == [true, true]
            && super::split::fits(mach, g, c)
            && g.operand_bytes[0] + g.operand_bytes[1] + (g.m * g.n * 4) as u64 <= g.sram_room;
    }
    // Local buffers, the tiles read from them, the accumulator and the epilogue;
    // with two row blocks, also the first block's result and pointers, kept
    // until the second block's K loop has stored them.
    let group = g.group.max(1);
    let mut bytes = 2 * (bm * bk + group * bk * bn) * g.elem
        + bm * bn * (4 * group + g.epilogue_bytes_per_point);
    if c.rows > 1 {
        bytes += group * bm * bn * (g.out_elem + 4);
    }
    let staged: u64 = (0..2)
        .filter(|&i| c.staged[i])
        .map(|i| g.operand_bytes[i])
        .sum();
    bytes <= mach.local_memory_bytes as usize
        && bm * bk <= MAX_TILE_ELEMENTS
        && bk * bn <= MAX_TILE_ELEMENTS
        && bm * bn <= MAX_TILE_ELEMENTS
        && (0..2).all(|i| !c.staged[i] || g.lpddr[i])
        && staged <= g.sram_room
}

/// Every GEMM choice that fits, fastest first by the cost model (among equal
/// costs, larger blocks first).
///
/// Staging an LPDDR operand costs a launch that reads it once, spread evenly
/// over every PE, and lets every GEMM program read it from SRAM: it pays when
/// the operand's blocks are read by many programs, whose first readers would
/// otherwise fetch whole panels from LPDDR at a 1/PEs share.
pub(super) fn gemm_ranked(mach: &Machine, g: &GemmNeed) -> Vec<GemmPlan> {
    let r = PerCycle::new(mach, g.narrow);
    let sizes = |limit: usize| -> Vec<usize> {
        let top = next_pow2(limit).min(256);
        let mut v = Vec::new();
        let mut s = 1;
        while s <= top {
            if s >= 16 || s == top {
                v.push(s);
            }
            s *= 2;
        }
        v
    };
    let mut plans = Vec::new();
    for &bm in &sizes(g.m) {
        for &bn in &sizes(g.n) {
            for &bk in &sizes(g.k.max(1)) {
                for (staged, rows) in [[false, false], [true, false], [false, true], [true, true]]
                    .into_iter()
                    .flat_map(|s| [(s, 1), (s, 2)])
                {
                    let choice = GemmChoice {
                        bm,
                        bn,
                        bk,
                        staged,
                        rows,
                        split: 0,
                    };
                    if !gemm_fits(mach, g, &choice) {
                        continue;
                    }
                    let lpddr = [g.lpddr[0] && !staged[0], g.lpddr[1] && !staged[1]];
                    let copied: u64 = (0..2)
                        .filter(|&i| staged[i])
                        .map(|i| g.operand_bytes[i])
                        .sum();
                    let mut cycles = gemm_cycles(&r, g, (bm, bn, bk), rows, lpddr);
                    if copied > 0 {
                        cycles += staging_cycles(&r, copied);
                    }
                    plans.push(GemmPlan { choice, cycles });
                }
                // Split along K: parts from 3/16 to 15/16 of K (more than one
                // part launch below a half).
                if !g.splittable {
                    continue;
                }
                for sixteenths in 3..16 {
                    let split = g.k * sixteenths / 16 / bk * bk;
                    let choice = GemmChoice {
                        bm,
                        bn,
                        bk,
                        staged: [true, true],
                        rows: 1,
                        split,
                    };
                    if split == 0 || !gemm_fits(mach, g, &choice) {
                        continue;
                    }
                    let cycles = split_cycles(mach, &r, g, (bm, bn, bk), split);
                    plans.push(GemmPlan { choice, cycles });
                }
            }
        }
    }
    let volume = |p: &GemmPlan| p.choice.bm * p.choice.bn * p.choice.bk;
    plans.sort_by(|a, b| {
        a.cycles
            .total_cmp(&b.cycles)
            .then(volume(b).cmp(&volume(a)))
    });
    // Costs within 0.1% of the least are a tie, which the largest block wins.
    if let Some(least) = plans.first().map(|p| p.cycles) {
        let tied = plans
            .iter()
            .take_while(|p| p.cycles <= least * 1.001)
            .enumerate()
            .max_by_key(|(i, p)| (volume(p), std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        if let Some(i) = tied {
            let best = plans.remove(i);
            plans.insert(0, best);
        }
    }
    plans
}

/// The GEMM choice the cost model says is fastest.
pub(super) fn gemm(mach: &Machine, g: &GemmNeed) -> GemmChoice {
    gemm_ranked(mach, g).first().map_or(
        GemmChoice {
            bm: 16,
            bn: 16,
            bk: 16,
            staged: [false, false],
            rows: 1,
            split: 0,
        },
        |p| p.choice,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two() {
        assert_eq!(prev_pow2(0), 1);
        assert_eq!(prev_pow2(5), 4);
        assert_eq!(prev_pow2(64), 64);
        assert_eq!(next_pow2(5), 8);
        assert_eq!(next_pow2(0), 1);
    }

    #[test]
    fn column_blocks_waste_little() {
        assert_eq!(column_block(1024), Some(1024));
        assert_eq!(column_block(17), None);
        assert_eq!(column_block(3), None);
        for cols in [16, 100, 257, 688, 700, 1000, 1025, 5000] {
            let b = column_block(cols).unwrap();
            let waste = cols.div_ceil(b) * b - cols;
            assert!(waste * 8 <= cols, "{cols}: {b}");
            // The next size up would waste more than an eighth, or exceed 1024.
            let up = 2 * b;
            assert!(
                up > 1024 || (cols.div_ceil(up) * up - cols) * 8 > cols,
                "{cols}: {b}"
            );
        }
        assert_eq!(column_block(688), Some(256)); // 3 blocks, 80 lanes (11.6%) idle
    }

    #[test]
    fn pointwise_blocks_spread_over_the_pes_and_fit() {
        let m = Machine::mtia2i();
        // 1M points of 100 bytes: limited by local memory (384 KiB / 100 B).
        let b = pointwise(&m, 1 << 20, 100);
        assert!(b * 100 <= 384 * 1024 && b >= 2048, "{b}");
        // 32768 points: one block per PE.
        assert_eq!(pointwise(&m, 32768, 16), 512);
        // Tiny domains get one small block.
        assert_eq!(pointwise(&m, 10, 16), 16);
    }

    #[test]
    fn row_blocks_cover_rows_with_one_program_per_pe() {
        let m = Machine::mtia2i();
        let need = |extent| InnerNeed {
            extent,
            bytes_per_point: 64,
            serial: false,
        };
        let inner_of = |extent| rows(&m, 4, &[need(extent)]).1[0];
        let (b0, inner) = rows(&m, 128, &[need(512), need(512)]);
        assert_eq!((b0, inner), (2, vec![512, 512]));
        // Long rows loop over blocks of at most MAX_INNER_BLOCK.
        let (_, inner) = rows(&m, 4, &[need(100_000)]);
        assert!(inner[0] <= MAX_INNER_BLOCK);
        // A row that fits one block is one block of its own length (no padding
        // lanes); longer rows take the fewest blocks that fit, of one length, so
        // fewer lanes than blocks pad the last.
        let (_, inner) = rows(&m, 4, &[need(1000), need(100), need(5000), need(5001)]);
        assert_eq!(inner, vec![1000, 100, 2500, 2501]);
        for (extent, bi) in [(100_000usize, inner_of(100_000)), (4097, inner_of(4097))] {
            let blocks = extent.div_ceil(bi);
            assert!(
                bi <= MAX_INNER_BLOCK && blocks * bi - extent < blocks,
                "{extent}: {bi}"
            );
        }
        let serial = InnerNeed {
            extent: 50,
            bytes_per_point: 64,
            serial: true,
        };
        assert_eq!(rows(&m, 4, &[serial]).1, vec![1]);
    }

    #[test]
    fn a_split_under_half_of_k_is_a_chain_of_parts() {
        // At least half of K: one part launch, the final launch holds the rest.
        assert_eq!(split_parts(1024, 576), vec![0, 576]);
        assert_eq!(split_parts(1024, 512), vec![0, 512]);
        // Less: parts of the same length while more than one is left.
        assert_eq!(split_parts(1024, 448), vec![0, 448, 896]);
        assert_eq!(split_parts(1024, 256), vec![0, 256, 512, 768]);
        assert_eq!(split_parts(200, 64), vec![0, 64, 128, 192]);
        // Part 1 of the 448 split multiplies K [448, 896) and copies the last 128.
        assert_eq!(part_range(1024, 448, 0), (0, 448, 896));
        assert_eq!(part_range(1024, 448, 1), (448, 896, 1024));
        assert_eq!(part_range(1024, 576, 0), (0, 576, 1024));
    }

    #[test]
    fn shares_are_copied_in_whole_lines_at_most_one_chunk_per_step() {
        // 16 rows of 448: pieces of 224 (14 lines of 16), two per row, 32 chunks.
        let c = chunking(16, 448, 36, 16);
        assert_eq!((c.rows, c.cols, c.per_row, c.chunks), (1, 224, 2, 32));
        // 448 rows of 16: whole rows, 13 at a time.
        let c = chunking(448, 16, 36, 16);
        assert_eq!((c.rows, c.cols, c.per_row, c.chunks), (13, 16, 1, 35));
        // More rows than steps, each longer than a step's part: whole rows.
        let c = chunking(100, 64, 10, 16);
        assert_eq!((c.rows, c.cols, c.chunks), (10, 64, 10));
        for (r, c_, steps) in [(7, 1000, 3), (1, 5, 40), (300, 300, 17), (16, 96, 6)] {
            let c = chunking(r, c_, steps, 16);
            assert!(c.chunks <= steps, "{r} x {c_} over {steps}: {c:?}");
            assert!(c.rows == 1 || c.cols == c_, "{c:?}");
        }
    }

    #[test]
    fn gemm_blocks_fit_and_spread() {
        let m = Machine::mtia2i();
        let need = |m_: usize, n: usize, k: usize, lpddr: bool| GemmNeed {
            m: m_,
            n,
            k,
            batch: 1,
            elem: 4,
            narrow: false,
            lpddr: [lpddr, lpddr],
            batched: [false, false],
            operand_bytes: [(m_ * k * 4) as u64, (k * n * 4) as u64],
            out_elem: 4,
            out_lpddr: lpddr,
            epilogue_bytes_per_point: 16,
            epilogue_ops: 2,
            sram_room: m.sram_bytes,
            group: 1,
            splittable: true,
        };
        let p = gemm(&m, &need(1024, 1024, 1024, false));
        assert!(gemm_fits(&m, &need(1024, 1024, 1024, false), &p));
        assert!(2 * (p.bm * p.bk + p.bk * p.bn) * 4 + p.bm * p.bn * 20 <= 384 * 1024);
        assert!(p.bm >= 64 && p.bn >= 64, "{p:?}");
        assert_eq!(
            p.staged,
            [false, false],
            "operands in SRAM are never staged"
        );
        // From LPDDR, a large product stages both operands: their panels are
        // read by many programs.
        assert_eq!(gemm(&m, &need(1024, 1024, 1024, true)).staged, [true, true]);
        // ... unless SRAM has no room for them.
        let full = GemmNeed {
            sram_room: 1 << 20,
            ..need(1024, 1024, 1024, true)
        };
        assert_eq!(gemm(&m, &full).staged, [false, false]);
        // A small product is split finely so that many PEs work on it.
        let p = gemm(&m, &need(64, 256, 256, false));
        assert!(
            !gemm_fits(
                &m,
                &need(64, 256, 256, false),
                &GemmChoice {
                    staged: [true, false],
                    ..p
                }
            ),
            "an operand in SRAM is never staged"
        );
        assert!(
            64usize.div_ceil(p.bm) * 256usize.div_ceil(p.bn) >= 16,
            "{p:?}"
        );
        // A matrix-vector product keeps a block of one row.
        assert_eq!(gemm(&m, &need(1, 256, 256, false)).bm, 1);
    }
}

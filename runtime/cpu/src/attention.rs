//! Multi-head scaled dot-product attention over token rows, as one hand-written kernel.
//!
//! For every sequence `b` and head `h`: `out_i = sum_j p_ij v_j` with `p_ij = e_ij * (1 /
//! sum_j e_ij)`, `e_ij = exp(s_ij - max_j s_ij)` (an `e_ij` below `2^-126` counted as 0
//! where it multiplies, as Ferrite's decomposed `softmax` does; the sum keeps it, as
//! there), `s_ij = (q_i . k_j) * scale`, and with `causal` the keys `j > i` masked (`-inf`:
//! they contribute nothing). Operands are `[batch * seq, heads * dim]` row tables
//! ([`RowsLayout`]); the output is written only in each head's own columns.
//!
//! The work is cut into tasks of (sequence, head, block of query rows), each run on one
//! thread with its own scratch (a thread-local buffer, reused from call to call):
//!
//! * the block's queries are transposed into `Q^T` (`head_dim x rows`, small), so that
//!   the scores come out transposed, `S^T = K Q^T` (`keys x rows`), from [`crate::sgemm`]
//!   with `K` read in place (no transpose of the keys, which would cost a copy per
//!   score row); with `causal` only the keys up to the block's last query are used,
//!   about half of the square;
//! * the softmax runs down the columns of `S^T`, a vector of queries at a time (scale and
//!   mask, column maximum; subtract, `exp` with [`crate::wide`]'s routine, column sum;
//!   the flushed multiply by `1 / sum`), compiled for the width of [`Isa::host`];
//! * `O = P V` is one more [`crate::sgemm`] product, `P` read through the transposed
//!   strides of `S^T`, `V` in place, written straight into the output rows.
//!
//! Each output is one FMA chain over the keys in order and each softmax column a
//! sequential fold, whatever the thread count, so every [`Parallelism`] gives the same
//! bits (tasks depend on the shape only).
//!
//! Denormals: each product runs flushed (FTZ + DAZ) under the rule of [`crate::gemm`]
//! (an operand bounded by `2^32` without subnormals, or both bounded), decided per task
//! from scans of the rows it reads; the softmax passes keep the thread's mode.
//!
//! Masked keys contribute exactly nothing: where a key of a block's own (diagonal) rows
//! is masked for some query and its `v` row holds an infinity or a NaN, that block's
//! `P V` is computed row by row over the unmasked keys only (a zero weight times an
//! infinity would be NaN).

use std::cell::RefCell;
use std::fmt;

use crate::denormals::FlushDenormals;
use crate::gemm::{GemmScalar, Parallelism, Scan};
use crate::pool::PoolError;
use crate::sgemm;
use crate::vmath::UnaryFn;
use crate::wide::{self, InPlaceFn, Isa};

/// The sizes and options of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Independent sequences.
    pub batch: usize,
    /// Tokens per sequence (queries and keys alike).
    pub seq: usize,
    /// Heads of the queries and the output.
    pub heads: usize,
    /// Heads of the keys and values (grouped-query attention): query head `h` reads
    /// key/value head `h / (heads / kv_heads)`. Equal to `heads` for multi-head attention;
    /// it must divide `heads`.
    pub kv_heads: usize,
    /// Elements per head of q and k.
    pub head_dim: usize,
    /// Elements per head of v and of the output.
    pub value_dim: usize,
    /// Query i attends key j only for j <= i (PyTorch's is_causal, top-left aligned).
    pub causal: bool,
    /// scores = (q . k) * scale.
    pub scale: f32,
}

/// Where a `[batch*seq, heads*dim]` operand lies in its slice: token row `r = b*seq + i`,
/// head `h`, element `d` is at `offset + r*row_stride + h*dim + d` (dim = head_dim for q
/// and k, value_dim for v and the output). row_stride >= heads*dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowsLayout {
    /// Index of token row 0's first element.
    pub offset: usize,
    /// Distance between consecutive token rows, at least `heads * dim`.
    pub row_stride: usize,
}

/// Why an attention call was refused (nothing is written then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttentionError {
    /// An operand's slice ends before the last element its layout reaches.
    OutOfBounds {
        /// `"q"`, `"k"`, `"v"` or `"out"`.
        operand: &'static str,
        /// The slice length the layout needs.
        needed: usize,
        /// The slice's length.
        len: usize,
    },
    /// A row stride shorter than a token row (`heads * dim`): rows would overlap.
    RowStride {
        /// `"q"`, `"k"`, `"v"` or `"out"`.
        operand: &'static str,
        /// The layout's row stride.
        row_stride: usize,
        /// `heads * dim`.
        row_len: usize,
    },
    /// The extent of an operand's layout overflows `usize`.
    Overflow {
        /// `"q"`, `"k"`, `"v"` or `"out"`.
        operand: &'static str,
    },
    /// `kv_heads` is 0 or does not divide `heads`.
    Heads {
        /// Query heads.
        heads: usize,
        /// Key and value heads.
        kv_heads: usize,
    },
    /// The parallel loop failed.
    Pool(PoolError),
}

impl fmt::Display for AttentionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttentionError::OutOfBounds {
                operand,
                needed,
                len,
            } => write!(
                f,
                "attention operand {operand} needs a slice of {needed} elements, got {len}"
            ),
            AttentionError::RowStride {
                operand,
                row_stride,
                row_len,
            } => write!(
                f,
                "attention operand {operand}: row stride {row_stride} is shorter than a \
                 token row of {row_len} elements (rows would overlap)"
            ),
            AttentionError::Overflow { operand } => {
                write!(f, "attention operand {operand}: layout extent overflows")
            }
            AttentionError::Heads { heads, kv_heads } => write!(
                f,
                "attention: {kv_heads} key/value heads do not divide {heads} query heads"
            ),
            AttentionError::Pool(e) => write!(f, "attention: {e}"),
        }
    }
}

impl std::error::Error for AttentionError {}

/// Query rows per task, when the shape gives enough tasks at this size.
const BLOCK_ROWS: usize = 64;
/// Query rows per task otherwise (few sequences and heads of short sequences).
const SMALL_BLOCK_ROWS: usize = 32;
/// Tasks below which the blocks are [`SMALL_BLOCK_ROWS`] tall.
const MIN_TASKS: usize = 16;
/// Multiply-adds (both products) below which a call runs on the calling thread.
const MIN_PARALLEL_MACS: usize = 1 << 18;

/// Checks that `rows` token rows of `heads * dim` elements at `layout` lie in a slice of
/// `len` elements, apart from each other.
fn check(
    operand: &'static str,
    len: usize,
    layout: RowsLayout,
    rows: usize,
    heads: usize,
    dim: usize,
) -> Result<(), AttentionError> {
    let overflow = AttentionError::Overflow { operand };
    let row_len = heads.checked_mul(dim).ok_or(overflow.clone())?;
    if rows == 0 || row_len == 0 {
        return Ok(());
    }
    if layout.row_stride < row_len {
        return Err(AttentionError::RowStride {
            operand,
            row_stride: layout.row_stride,
            row_len,
        });
    }
    let needed = (rows - 1)
        .checked_mul(layout.row_stride)
        .and_then(|x| x.checked_add(row_len))
        .and_then(|x| x.checked_add(layout.offset))
        .ok_or(overflow)?;
    if needed > len {
        return Err(AttentionError::OutOfBounds {
            operand,
            needed,
            len,
        });
    }
    Ok(())
}

/// Multi-head scaled dot-product attention (see the module docs): `out` gets, in each
/// head's columns of each token row, the attention of that token's query over its
/// sequence's keys and values. Other elements of `out` are not touched. Operands too
/// short for their layouts, row strides shorter than a row, or a failed parallel loop are
/// errors, and nothing is written then (a pool error aside, after which the output is
/// partly written).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    q_layout: RowsLayout,
    k: &[f32],
    k_layout: RowsLayout,
    v: &[f32],
    v_layout: RowsLayout,
    out: &mut [f32],
    out_layout: RowsLayout,
    parallelism: Parallelism<'_>,
) -> Result<(), AttentionError> {
    attention_at(
        Isa::host(),
        shape,
        (q, q_layout),
        (k, k_layout),
        (v, v_layout),
        (out, out_layout),
        parallelism,
    )
}

/// A read-only operand: its slice and layout.
type Input<'a> = (&'a [f32], RowsLayout);

/// [`attention`] at width `isa` (`Isa::Sse`: the portable code).
fn attention_at(
    isa: Isa,
    shape: &AttentionShape,
    q: Input<'_>,
    k: Input<'_>,
    v: Input<'_>,
    (out, out_layout): (&mut [f32], RowsLayout),
    parallelism: Parallelism<'_>,
) -> Result<(), AttentionError> {
    let s = *shape;
    let tokens = s
        .batch
        .checked_mul(s.seq)
        .ok_or(AttentionError::Overflow { operand: "q" })?;
    if s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
        return Err(AttentionError::Heads {
            heads: s.heads,
            kv_heads: s.kv_heads,
        });
    }
    check("q", q.0.len(), q.1, tokens, s.heads, s.head_dim)?;
    check("k", k.0.len(), k.1, tokens, s.kv_heads, s.head_dim)?;
    check("v", v.0.len(), v.1, tokens, s.kv_heads, s.value_dim)?;
    check("out", out.len(), out_layout, tokens, s.heads, s.value_dim)?;
    if tokens == 0 || s.heads == 0 || s.value_dim == 0 {
        return Ok(());
    }
    let block = if s.batch * s.heads * s.seq.div_ceil(BLOCK_ROWS) >= MIN_TASKS {
        BLOCK_ROWS
    } else {
        SMALL_BLOCK_ROWS
    };
    let isa = if isa != Isa::Sse && isa.supported() {
        isa
    } else {
        Isa::Sse
    };
    let ctx = Ctx {
        s,
        block,
        blocks: s.seq.div_ceil(block),
        q,
        k,
        v,
        out: OutPtr(out.as_mut_ptr()),
        out_layout,
        isa,
        exp: wide::in_place_routine(UnaryFn::Exp, isa),
    };
    let pairs = s.batch * s.heads;
    let tasks = pairs * ctx.blocks;
    // The heaviest blocks (the last, with causal) first, for balance.
    let run = |t: usize| {
        let (pair, blk) = (t % pairs, ctx.blocks - 1 - t / pairs);
        let r0 = blk * block;
        with_scratch(ctx.scratch_len(), |scratch| {
            ctx.task(
                pair / s.heads,
                pair % s.heads,
                r0,
                (r0 + block).min(s.seq),
                scratch,
            )
        });
    };
    let macs = pairs
        .saturating_mul(s.seq)
        .saturating_mul(s.seq)
        .saturating_mul(s.head_dim + s.value_dim);
    let team = parallelism.team();
    match team {
        Some(team) if team.threads() > 1 && tasks > 1 && macs >= MIN_PARALLEL_MACS => {
            team.parallel_for(tasks, run).map_err(AttentionError::Pool)
        }
        _ => {
            (0..tasks).for_each(run);
            Ok(())
        }
    }
}

/// The output's storage, written by the tasks at disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: each task writes only its own (sequence, head, query rows) block of the output,
// disjoint from every other task's (the rows do not overlap: `check` proved the row
// stride at least a row); nothing else accesses the output during the call (it is
// borrowed mutably by `attention`).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// One call's operands and choices, shared by its tasks.
struct Ctx<'a> {
    s: AttentionShape,
    /// Query rows per task.
    block: usize,
    /// Blocks per sequence.
    blocks: usize,
    q: Input<'a>,
    k: Input<'a>,
    v: Input<'a>,
    out: OutPtr,
    out_layout: RowsLayout,
    /// `Isa::Sse` for the portable code, else a supported width for `sgemm`.
    isa: Isa,
    exp: Option<InPlaceFn>,
}

thread_local! {
    /// Each thread's scratch, grown to the largest call's need and kept.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of the thread's scratch (a fresh buffer if it is in use).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0.0);
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// The scan of `rows` rows of `cols` elements, row `r` at `data[start + r * stride..]`.
fn scan_rows(data: &[f32], start: usize, stride: usize, rows: usize, cols: usize) -> Scan {
    let mut scan = Scan {
        bounded: true,
        normal: true,
    };
    for r in 0..rows {
        let at = start + r * stride;
        let s = f32::scan(&data[at..at + cols]);
        scan.bounded &= s.bounded;
        scan.normal &= s.normal;
        if !scan.bounded && !scan.normal {
            break;
        }
    }
    scan
}

impl Ctx<'_> {
    /// Floats of scratch a task uses: `Q^T`, `S^T`, and two rows of column values.
    fn scratch_len(&self) -> usize {
        self.block * (self.s.head_dim + self.s.seq + 2)
    }

    /// Index of element `d` of head `h` of token row `r` of an operand.
    fn at(layout: RowsLayout, r: usize, h: usize, dim: usize, d: usize) -> usize {
        layout.offset + r * layout.row_stride + h * dim + d
    }

    /// The output rows `r0..r1` of sequence `b`, head `h`.
    fn task(&self, b: usize, h: usize, r0: usize, r1: usize, scratch: &mut [f32]) {
        let s = &self.s;
        let (hd, vd) = (s.head_dim, s.value_dim);
        let rows = r1 - r0;
        let keys = if s.causal { r1 } else { s.seq };
        let tok0 = b * s.seq;
        let (q, ql) = self.q;
        let (k, kl) = self.k;
        let (v, vl) = self.v;
        let (qt, rest) = scratch.split_at_mut(self.block * hd);
        let (st, rest) = rest.split_at_mut(self.block * s.seq);
        let (colmax, colsum) = rest.split_at_mut(self.block);
        let (qt, st) = (&mut qt[..hd * rows], &mut st[..keys * rows]);
        let (colmax, colsum) = (&mut colmax[..rows], &mut colsum[..rows]);

        // Q^T: qt[d * rows + i] = q[r0 + i, d].
        for i in 0..rows {
            let at = Self::at(ql, tok0 + r0 + i, h, hd, 0);
            for (d, &x) in q[at..at + hd].iter().enumerate() {
                qt[d * rows + i] = x;
            }
        }

        // S^T = K[..keys] Q^T, flushed as `gemm` would flush it.
        // The key/value head this query head reads (grouped-query attention).
        let kvh = h / (s.heads / s.kv_heads);
        let k0 = Self::at(kl, tok0, kvh, hd, 0);
        let qs = scan_rows(
            q,
            Self::at(ql, tok0 + r0, h, hd, 0),
            ql.row_stride,
            rows,
            hd,
        );
        let flush = (qs.bounded && qs.normal) || {
            let ks = scan_rows(k, k0, kl.row_stride, keys, hd);
            ks.bounded && (ks.normal || qs.bounded)
        };
        {
            let _flush = FlushDenormals::enter(flush);
            if hd == 0 {
                st.fill(0.0);
            } else if self.isa == Isa::Sse {
                st.fill(0.0);
                for j in 0..keys {
                    let kr = &k[k0 + j * kl.row_stride..][..hd];
                    let sr = &mut st[j * rows..(j + 1) * rows];
                    for (d, &kx) in kr.iter().enumerate() {
                        for (x, &qx) in sr.iter_mut().zip(&qt[d * rows..(d + 1) * rows]) {
                            *x = kx.mul_add(qx, *x);
                        }
                    }
                }
            } else {
                let ops = sgemm::Operands {
                    a: k[k0..].as_ptr(),
                    a_row: kl.row_stride as isize,
                    a_col: 1,
                    a_panel: 0,
                    a_kblock: 0,
                    b: qt.as_ptr(),
                    b_row: rows as isize,
                    b_offs: std::ptr::null(),
                    c: st.as_mut_ptr(),
                    c_row: rows as isize,
                };
                // SAFETY: `check` proved token rows tok0..tok0 + keys of k, with key/value
                // head kvh's hd elements, inside `k` (k[k0..] starts at the first); `qt` is
                // hd x rows and `st` keys x rows, both dense scratch of this thread, apart
                // from each other and from `k`. `isa` is supported (`attention_at`), hd > 0.
                unsafe { sgemm::product(self.isa, &ops, keys, rows, hd) };
            }
        }

        let cols = Columns {
            st,
            keys,
            rows,
            diag: s.causal.then_some(r0),
            scale: s.scale,
            exp: self.exp,
            colmax,
            colsum,
        };
        let p_bounded = match self.isa {
            // SAFETY: the width is supported (`attention_at`).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { softmax_avx512(cols) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { softmax_avx2(cols) },
            _ => softmax_columns(cols),
        };

        // O = P V over the keys, P[i, j] = st[j * rows + i].
        let v0 = Self::at(vl, tok0, kvh, vd, 0);
        let vs = scan_rows(v, v0, vl.row_stride, keys, vd);
        let _flush = FlushDenormals::enter(vs.bounded && (vs.normal || p_bounded));
        // Masked keys of the block's own rows must add nothing, not 0 * inf.
        let by_row = s.causal
            && !vs.bounded
            && (r0..r1).any(|j| {
                let at = v0 + j * vl.row_stride;
                v[at..at + vd].iter().any(|x| !x.is_finite())
            });
        let o0 = Self::at(self.out_layout, tok0 + r0, h, vd, 0);
        let o_row = self.out_layout.row_stride;
        // Rows `i0..i1` of the block over keys `..n`.
        let pv = |i0: usize, i1: usize, n: usize| {
            if self.isa == Isa::Sse {
                for i in i0..i1 {
                    // SAFETY: output row r0 + i of sequence b, head h: this task's own
                    // elements (see `OutPtr`), in bounds by `check`.
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(self.out.0.add(o0 + i * o_row), vd)
                    };
                    o.fill(0.0);
                    for j in 0..n {
                        let p = st[j * rows + i];
                        let vr = &v[v0 + j * vl.row_stride..][..vd];
                        for (x, &y) in o.iter_mut().zip(vr) {
                            *x = p.mul_add(y, *x);
                        }
                    }
                }
                return;
            }
            let ops = sgemm::Operands {
                a: st[i0..].as_ptr(),
                a_row: 1,
                a_col: rows as isize,
                a_panel: 0,
                a_kblock: 0,
                b: v[v0..].as_ptr(),
                b_row: vl.row_stride as isize,
                b_offs: std::ptr::null(),
                // Not dereferenced here; in bounds of `out` by `check`.
                c: self.out.0.wrapping_add(o0 + i0 * o_row),
                c_row: o_row as isize,
            };
            // SAFETY: A is rows i0..i1 by keys ..n of `st` (n <= keys); B is token rows
            // tok0..tok0 + n of v, key/value head kvh's vd elements, in bounds by `check`
            // (of `kv_heads` heads); C is output rows r0 + i0..r0 + i1 of head h, this
            // task's own elements (see `OutPtr`), apart from `st` and `v`. The width is
            // supported and n > 0.
            unsafe { sgemm::product(self.isa, &ops, i1 - i0, vd, n) };
        };
        if by_row {
            (0..rows).for_each(|i| pv(i, i + 1, r0 + i + 1));
        } else {
            pv(0, rows, keys);
        }
    }
}

/// One block's scores for [`softmax_columns`]: `st` holds `keys` rows of `rows` floats
/// (column `i` is query `i` of the block, row `j` key `j`); with `diag = Some(r0)` the keys
/// `j > r0 + i` are masked (given weight 0); `exp` is the wide routine, or `None` for
/// `f32::exp`; `colmax` and `colsum` are `rows` floats of scratch.
struct Columns<'a> {
    st: &'a mut [f32],
    keys: usize,
    rows: usize,
    diag: Option<usize>,
    scale: f32,
    exp: Option<InPlaceFn>,
    colmax: &'a mut [f32],
    colsum: &'a mut [f32],
}

/// [`softmax_columns`] compiled for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_avx512(c: Columns<'_>) -> bool {
    softmax_columns(c)
}

/// [`softmax_columns`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(c: Columns<'_>) -> bool {
    softmax_columns(c)
}

/// The softmax of each column of the block's scores (see [`Columns`]), in place, the
/// scores scaled by `scale` first. Returns whether no weight is NaN.
#[inline(always)]
fn softmax_columns(c: Columns<'_>) -> bool {
    let Columns {
        st,
        keys,
        rows,
        diag,
        scale,
        exp,
        colmax,
        colsum,
    } = c;
    // Queries 0..masked(j) of the block do not see key j.
    let masked = |j: usize| diag.map_or(0, |r0| j.saturating_sub(r0).min(rows));
    colmax.fill(f32::NEG_INFINITY);
    for j in 0..keys {
        let lim = masked(j);
        let row = &mut st[j * rows + lim..(j + 1) * rows];
        for (x, m) in row.iter_mut().zip(&mut colmax[lim..]) {
            let s = *x * scale;
            *x = s;
            // NaN sticks.
            *m = if s > *m || s.is_nan() { s } else { *m };
        }
    }
    colsum.fill(0.0);
    for j in 0..keys {
        let lim = masked(j);
        let row = &mut st[j * rows..(j + 1) * rows];
        row[..lim].fill(0.0);
        let row = &mut row[lim..];
        for (x, &m) in row.iter_mut().zip(&colmax[lim..]) {
            *x -= m;
        }
        match exp {
            // SAFETY: `row` is row.len() floats of this thread's scratch.
            Some(f) => unsafe { f(row.as_mut_ptr(), row.len()) },
            None => row.iter_mut().for_each(|x| *x = x.exp()),
        }
        for (s, &x) in colsum[lim..].iter_mut().zip(row.iter()) {
            *s += x;
        }
    }
    let mut finite = true;
    for r in colsum.iter_mut() {
        *r = 1.0 / *r;
        finite &= !r.is_nan();
    }
    for j in 0..keys {
        let lim = masked(j);
        let row = &mut st[j * rows + lim..(j + 1) * rows];
        for (x, &r) in row.iter_mut().zip(&colsum[lim..]) {
            let e = if *x < f32::MIN_POSITIVE { 0.0 } else { *x };
            *x = e * r;
        }
    }
    finite
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The portable code and the host's width agree within rounding (the exp differs).
    #[test]
    fn portable_code_matches_the_wide_code() {
        let s = AttentionShape {
            batch: 2,
            seq: 70,
            heads: 3,
            kv_heads: 3,
            head_dim: 16,
            value_dim: 8,
            causal: true,
            scale: 0.25,
        };
        let n = |dim: usize| 2 * 70 * 3 * dim;
        let gen = |len: usize, seed: u32| -> Vec<f32> {
            (0..len)
                .map(|i| {
                    ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5
                })
                .collect()
        };
        let (q, k, v) = (gen(n(16), 1), gen(n(16), 2), gen(n(8), 3));
        let l = |dim: usize| RowsLayout {
            offset: 0,
            row_stride: 3 * dim,
        };
        let mut a = vec![0.0; n(8)];
        let mut b = vec![0.0; n(8)];
        for (isa, out) in [(Isa::Sse, &mut a), (Isa::host(), &mut b)] {
            attention_at(
                isa,
                &s,
                (&q, l(16)),
                (&k, l(16)),
                (&v, l(8)),
                (out, l(8)),
                Parallelism::None,
            )
            .unwrap();
        }
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5, "{x} {y}");
        }
    }
}

//! Ferrite's own `f32` matrix product for few rows: `C = A @ B` with `B` read in place,
//! never packed, compiled by rustc for AVX2 + FMA and for AVX-512F.
//!
//! The `gemm` crate packs every panel of `B` it uses on every call. With many rows of `A`
//! that cost is spread over many row blocks; with 32 or 64 rows (a linear layer on a small
//! batch, the projections of a short sequence) it is paid for a handful of them, and it
//! dominates: the 32x1024x1024 product of `mlp_large` ran at 56 GFLOP/s through the crate
//! on the 16-core Xeon. Here `B`'s rows are streamed as they lie:
//!
//! * `B` (unit column stride) is cut into blocks of [`NB`] columns and [`KC`] rows (64 KiB
//!   at most, so a block stays in L2 while every row tile of `A` passes over it, and its
//!   64 rows are few enough for the hardware prefetcher to follow them all);
//! * in a block, each register tile of `MR` rows x `NV` vectors of columns of `C` keeps its
//!   sums in registers across the block's [`KC`] rows: per row `k` of `B`, `NV` vector
//!   loads of `B`, and per row of the tile one broadcast of `A[i, k]` and `NV` FMAs;
//! * while the first row tile of a column tile runs, it prefetches the rows of `B` the
//!   next column tile reads (its `KC` rows are that many pages apart, more streams than
//!   the hardware prefetcher follows): when `B` comes from memory (a product just
//!   written by another kernel), the 32-row blocks of ResNet-18's products on 4 and 16
//!   threads of the 16-core Xeon ran 15-25% faster;
//! * the first K block writes `C`, later ones add to it, so `C` is never read before it
//!   is written (its old contents, NaN or not, do not leak in);
//! * a product of one or two rows (a matrix-vector product) instead streams `B` row
//!   after row in order, four rows per step into all of `C`, which stays in L1
//!   ([`STREAM_MAX_ROWS`]).
//!
//! `A` may have any strides (its elements are broadcast one at a time). Column tails are
//! single vectors and a final masked vector; row tails are tiles of fewer rows. Each
//! output is one sum over `k` in increasing order with one FMA per term, so the result
//! does not depend on the width, the tiling or the thread split (`tests/sgemm.rs`).
//!
//! Which products take this path rather than the crate's is decided in `gemm.rs`
//! ([`crate::gemm::ours_for`]), by measurement.

use crate::wide::Isa;

/// Rows of `B` (the contracted axis) per block: the register tiles' sums stay in
/// registers across this many FMAs before they go back to `C`. Measured on the 2-core
/// AVX-512 VM (thread CPU time, 32x1024x1024): 64 ran 1.1 ms, 128 1.2-1.7 ms, 256 1.9 ms,
/// 32 1.2-1.4 ms: with more rows than the prefetcher follows, `B` comes from DRAM on
/// demand.
pub const KC: usize = 64;

/// Columns of `B` per block: `KC x NB` floats of `B` (64 KiB) stay in L2 while every row
/// tile of `A` passes over them (1024 was no faster).
pub const NB: usize = 256;

/// Rows of `C` up to which a product streams `B` row after row, in order, instead of
/// in blocks: a matrix-vector product (a classifier's last layer at batch 1, 1x1280 by
/// 1280x1000, 5 MiB of `B`) is bound by reading `B` once, which the blocks did in
/// 1 KiB pieces of 64 rows at a time, at a third of the bandwidth of a sequential read.
/// Each step adds [`STREAM_KB`] rows of `B` to every column of `C`, which stays in L1;
/// each output is still one FMA per row of `B`, in order, so the bits do not change.
pub const STREAM_MAX_ROWS: usize = 2;

/// Rows of `B` a streaming step reads together (four sequential streams).
const STREAM_KB: usize = 4;

/// One block's operands: pointers to element `[0, 0]` of `A`, `B` and `C`, strides in
/// elements. `B` and `C` have unit column stride.
#[derive(Clone, Copy, Debug)]
pub struct Operands {
    /// `A[0, 0]`.
    pub a: *const f32,
    /// Distance between rows of `A`.
    pub a_row: isize,
    /// Distance between columns of `A`.
    pub a_col: isize,
    /// 0 for `A` strided as above; else `A` is in panels of [`panel_rows`] rows, this
    /// far apart: row `i`'s column `l` is at `a + (i / MR) * a_panel + (i % MR) * a_row +
    /// l * a_col` (see [`Panels`]). The product's rows then start at a panel.
    pub a_panel: isize,
    /// 0, or with panels, the distance between blocks of [`KC`] columns: column `l` of
    /// a row is then at `(l / KC) * a_kblock + (l % KC) * a_col` from its row's start,
    /// so that each block of columns of every panel is one run of memory (the order in
    /// which the product reads them).
    pub a_kblock: isize,
    /// `B[0, 0]`.
    pub b: *const f32,
    /// Distance between rows of `B`.
    pub b_row: isize,
    /// Null, or an array of `k` offsets: row `l` of `B` is then at `b + b_offs[l]` and
    /// `b_row` is not used (rows of `B` that share their floats at different places, see
    /// [`crate::taps`]).
    pub b_offs: *const isize,
    /// `C[0, 0]`.
    pub c: *mut f32,
    /// Distance between rows of `C`.
    pub c_row: isize,
}

impl Operands {
    /// Dense row-major operands: `A` (`k` columns) at `a`, `B` (`n` columns) at `b`, `C`
    /// (`n` columns) at `c`, strided, no panels, no row offsets.
    pub fn row_major(a: *const f32, k: usize, b: *const f32, n: usize, c: *mut f32) -> Operands {
        Operands {
            a,
            a_row: k as isize,
            a_col: 1,
            a_panel: 0,
            a_kblock: 0,
            b,
            b_row: n as isize,
            b_offs: std::ptr::null(),
            c,
            c_row: n as isize,
        }
    }
}

/// `C[m x n] = A[m x k] @ B[k x n]`, at width `isa`. `k > 0`.
///
/// # Safety
/// Every element `A[i, l]`, `B[l, j]` and `C[i, j]` (`i < m`, `j < n`, `l < k`) at the
/// operands' pointers and strides (or `B`'s row offsets, `b_offs`, `k` of them) is inside
/// one allocation; the elements of `C` are
/// distinct and nothing else accesses them during the call, and none of them is an element
/// of `A` or `B`. `isa` is [`Isa::Avx2`] or [`Isa::Avx512`] and supported by this CPU.
pub unsafe fn product(isa: Isa, ops: &Operands, m: usize, n: usize, k: usize) {
    debug_assert!(isa.supported() && k > 0);
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: the caller's guarantees, and the feature is present.
        Isa::Avx512 => unsafe { avx512::product(ops, m, n, k) },
        // SAFETY: as above.
        Isa::Avx2 => unsafe { avx2::product(ops, m, n, k) },
        Isa::Sse => unreachable!("sgemm has no SSE kernel"),
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, ops, m, n, k);
        unreachable!("sgemm runs on x86-64 only");
    }
}

/// Rows per panel of `A` in panel form ([`Operands::a_panel`]) at width `isa`: its
/// register tile's height.
pub fn panel_rows(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::MR,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::MR,
        _ => 1,
    }
}

/// A left operand packed once in panel form ([`Operands::a_panel`],
/// [`Operands::a_kblock`]) for one width: per block of [`KC`] columns, panels of
/// [`panel_rows`] rows, each `KC` columns of that many consecutive floats (rows past `m`
/// and columns past `k` zero), so a product reads each block of every panel as one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Panels {
    /// The packed floats.
    pub data: Vec<f32>,
    /// Rows and columns of `A`.
    pub m: usize,
    /// See `m`.
    pub k: usize,
    /// Rows per panel.
    pub mr: usize,
    /// Floats between panels (within a block of columns).
    pub panel: usize,
    /// Floats between blocks of columns.
    pub kblock: usize,
}

impl Panels {
    /// `A` (`m x k`, element `(i, l)` at `a[offset + i * row + l * col]`) packed for
    /// width `isa`, or `None` if an element is outside `a`.
    pub fn pack(
        isa: Isa,
        a: &[f32],
        (offset, row, col): (usize, isize, isize),
        m: usize,
        k: usize,
    ) -> Option<Panels> {
        let mr = panel_rows(isa);
        let panel = mr.checked_mul(KC)?;
        let kblock = m.div_ceil(mr).checked_mul(panel)?;
        let mut data = vec![0.0f32; k.div_ceil(KC).checked_mul(kblock)?];
        for i in 0..m {
            for l in 0..k {
                let at = offset as isize + i as isize * row + l as isize * col;
                let to = (l / KC) * kblock + (i / mr) * panel + (l % KC) * mr + i % mr;
                data[to] = *a.get(usize::try_from(at).ok()?)?;
            }
        }
        Some(Panels {
            data,
            m,
            k,
            mr,
            panel,
            kblock,
        })
    }

    /// `ops` with its `A` these panels' rows `first..` (`first` a multiple of `mr`,
    /// below `m`).
    pub fn rows_from(&self, first: usize, ops: Operands) -> Operands {
        assert!(first.is_multiple_of(self.mr) && first < self.m.max(1));
        Operands {
            a: self.data[first / self.mr * self.panel..].as_ptr(),
            a_row: 1,
            a_col: self.mr as isize,
            a_panel: self.panel as isize,
            a_kblock: self.kblock as isize,
            ..ops
        }
    }
}

/// Operand variant bit of the register tile: `A` in panels, rows 1 apart.
const A_PANEL: u8 = 1;
/// Operand variant bit of the register tile: `B`'s rows through `Operands::b_offs`.
const B_OFFS: u8 = 2;

/// The driver and the register tile, written once over each width's `V`, `LANES`, `MR`,
/// `NV` and vector helpers.
#[cfg(target_arch = "x86_64")]
macro_rules! kernels {
    ($feature:literal) => {
        /// Element `(i, l)` of `A`.
        ///
        /// # Safety
        /// It is an element of `A`.
        #[inline(always)]
        unsafe fn a_at(ops: &Operands, i: usize, l: usize) -> *const f32 {
            // SAFETY: the caller's guarantee.
            unsafe {
                let row = if ops.a_panel != 0 {
                    ops.a
                        .offset((i / MR) as isize * ops.a_panel + (i % MR) as isize * ops.a_row)
                } else {
                    ops.a.offset(i as isize * ops.a_row)
                };
                if ops.a_kblock != 0 {
                    row.offset((l / KC) as isize * ops.a_kblock + (l % KC) as isize * ops.a_col)
                } else {
                    row.offset(l as isize * ops.a_col)
                }
            }
        }

        /// One register tile: `C[i0.., j0..]` (`R` rows, `NV_` vectors, the last one of
        /// `tail` lanes when `MASK`) over rows `k0..k0 + kc` of `B`, written when `first`,
        /// else added to. With `PF`, each row of `B` it reads has the row at `pf` (the
        /// same distance on) prefetched: a hint, never an access.
        ///
        /// # Safety
        /// As [`super::product`], for the tile's elements.
        #[target_feature(enable = $feature)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile<
            const R: usize,
            const NV_: usize,
            const MASK: bool,
            const PF: bool,
            const VAR: u8,
        >(
            ops: &Operands,
            i0: usize,
            j0: usize,
            k0: usize,
            kc: usize,
            tail: usize,
            first: bool,
            pf: *const f32,
        ) {
            let mut acc = [[zero(); NV_]; R];
            // SAFETY (every pointer below): the caller guarantees the tile's elements of
            // A, B and C are in bounds; a masked lane is neither read nor written.
            unsafe {
                let c = ops.c.offset(i0 as isize * ops.c_row + j0 as isize);
                if !first {
                    for (r, row) in acc.iter_mut().enumerate() {
                        let cr = c.offset(r as isize * ops.c_row);
                        for (v, x) in row.iter_mut().enumerate() {
                            let p = cr.add(v * LANES);
                            *x = if MASK && v == NV_ - 1 {
                                load_tail(p, tail)
                            } else {
                                load(p)
                            };
                        }
                    }
                }
                let mut b = ops.b.offset(k0 as isize * ops.b_row + j0 as isize);
                let offs = ops.b_offs;
                // Known at compile time for panels of A (rows 1 apart: the broadcasts
                // take constant displacements, no address arithmetic per row).
                let a_row = if VAR & A_PANEL != 0 { 1 } else { ops.a_row };
                // Within one block of KC columns, so `a_col` apart.
                let mut a = a_at(ops, i0, k0);
                let mut pf = pf;
                for kk in 0..kc {
                    if VAR & B_OFFS != 0 {
                        b = ops.b.offset(*offs.add(k0 + kk) + j0 as isize);
                    }
                    if PF {
                        for v in 0..NV_ {
                            prefetch(pf.wrapping_add(v * LANES));
                        }
                        pf = pf.wrapping_offset(ops.b_row);
                    }
                    let mut bv = [zero(); NV_];
                    for (v, x) in bv.iter_mut().enumerate() {
                        let p = b.add(v * LANES);
                        *x = if MASK && v == NV_ - 1 {
                            load_tail(p, tail)
                        } else {
                            load(p)
                        };
                    }
                    for (r, row) in acc.iter_mut().enumerate() {
                        let av = splat(*a.offset(r as isize * a_row));
                        for (x, &bx) in row.iter_mut().zip(&bv) {
                            *x = fma(av, bx, *x);
                        }
                    }
                    b = b.offset(ops.b_row);
                    a = a.offset(ops.a_col);
                }
                for (r, row) in acc.iter().enumerate() {
                    let cr = c.offset(r as isize * ops.c_row);
                    for (v, &x) in row.iter().enumerate() {
                        let p = cr.add(v * LANES);
                        if MASK && v == NV_ - 1 {
                            store_tail(p, x, tail)
                        } else {
                            store(p, x)
                        }
                    }
                }
            }
        }

        /// [`tile`] without prefetching.
        ///
        /// # Safety
        /// As [`tile`].
        #[target_feature(enable = $feature)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn plain<const R: usize, const NV_: usize, const MASK: bool, const VAR: u8>(
            ops: &Operands,
            i0: usize,
            j0: usize,
            k0: usize,
            kc: usize,
            tail: usize,
            first: bool,
        ) {
            // SAFETY: the caller's guarantees.
            unsafe {
                tile::<R, NV_, MASK, false, VAR>(ops, i0, j0, k0, kc, tail, first, std::ptr::null())
            }
        }

        /// Every row tile of `m` rows for one column tile; the first (of `MR` rows)
        /// prefetches the rows of `B` the next column tile reads, from `next`.
        ///
        /// # Safety
        /// As [`super::product`].
        #[target_feature(enable = $feature)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn column<const NV_: usize, const MASK: bool, const VAR: u8>(
            ops: &Operands,
            m: usize,
            j0: usize,
            k0: usize,
            kc: usize,
            tail: usize,
            first: bool,
            next: Option<*const f32>,
        ) {
            let mut i0 = 0;
            if let Some(pf) = next.filter(|_| m >= MR) {
                // SAFETY: rows 0..MR are rows of C; prefetches never fault.
                unsafe { tile::<MR, NV_, MASK, true, VAR>(ops, 0, j0, k0, kc, tail, first, pf) };
                i0 = MR;
            }
            while i0 + MR <= m {
                // SAFETY: rows i0..i0 + MR are rows of C.
                unsafe { plain::<MR, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first) };
                i0 += MR;
            }
            let left = m - i0;
            if left == 0 {
                return;
            }
            // SAFETY (each arm): rows i0..m are rows of C.
            unsafe {
                match left {
                    1 => plain::<1, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    2 => plain::<2, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    3 => plain::<3, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    4 => plain::<4, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    5 => plain::<5, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    6 => plain::<6, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    7 => plain::<7, NV_, MASK, VAR>(ops, i0, j0, k0, kc, tail, first),
                    _ => unreachable!("a row tail is shorter than MR (at most 8)"),
                }
            }
        }

        /// Rows `k0..k0 + KB` of `B` into every column of the `R` rows of `C`, one
        /// vector of columns at a time (the last of `tail` lanes when `MASK`): `C`
        /// written when `first`, else added to, each output one FMA per row of `B`.
        ///
        /// # Safety
        /// As [`super::product`], for these rows of `B`; `j0..j0 + width` are columns.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn stream_step<const R: usize, const KB: usize, const MASK: bool>(
            ops: &Operands,
            av: &[[V; KB]; R],
            k0: usize,
            j0: usize,
            tail: usize,
            first: bool,
        ) {
            // SAFETY (every pointer): the caller's guarantee; masked lanes untouched.
            unsafe {
                let mut bv = [zero(); KB];
                for (kk, x) in bv.iter_mut().enumerate() {
                    let row = if ops.b_offs.is_null() {
                        (k0 + kk) as isize * ops.b_row
                    } else {
                        *ops.b_offs.add(k0 + kk)
                    };
                    let p = ops.b.offset(row + j0 as isize);
                    *x = if MASK { load_tail(p, tail) } else { load(p) };
                }
                for (r, ar) in av.iter().enumerate() {
                    let p = ops.c.offset(r as isize * ops.c_row + j0 as isize);
                    let mut acc = if first {
                        zero()
                    } else if MASK {
                        load_tail(p, tail)
                    } else {
                        load(p)
                    };
                    for (&a, &b) in ar.iter().zip(&bv) {
                        acc = fma(a, b, acc);
                    }
                    if MASK {
                        store_tail(p, acc, tail)
                    } else {
                        store(p, acc)
                    }
                }
            }
        }

        /// Rows `k0..k0 + KB` of `B` into all of `C` (`R` rows, `n` columns).
        ///
        /// # Safety
        /// As [`super::product`], for these rows of `B`.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn stream_rows<const R: usize, const KB: usize>(
            ops: &Operands,
            n: usize,
            k0: usize,
        ) {
            let mut av = [[zero(); KB]; R];
            for (r, ar) in av.iter_mut().enumerate() {
                for (kk, x) in ar.iter_mut().enumerate() {
                    // SAFETY: `A[r, k0 + kk]` is an element of A.
                    *x = splat(unsafe { *a_at(ops, r, k0 + kk) });
                }
            }
            let first = k0 == 0;
            let mut j0 = 0;
            // SAFETY (each call): the columns are columns of C, the last vector masked.
            unsafe {
                while j0 + LANES <= n {
                    stream_step::<R, KB, false>(ops, &av, k0, j0, LANES, first);
                    j0 += LANES;
                }
                if j0 < n {
                    stream_step::<R, KB, true>(ops, &av, k0, j0, n - j0, first);
                }
            }
        }

        /// A product of at most [`super::STREAM_MAX_ROWS`] rows, `B` read row after row
        /// in order ([`super::STREAM_MAX_ROWS`] says why).
        ///
        /// # Safety
        /// As [`super::product`].
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn stream<const R: usize>(ops: &Operands, n: usize, k: usize) {
            let mut k0 = 0;
            // SAFETY (each call): rows k0.. of B are rows of B.
            unsafe {
                while k0 + STREAM_KB <= k {
                    stream_rows::<R, STREAM_KB>(ops, n, k0);
                    k0 += STREAM_KB;
                }
                while k0 < k {
                    stream_rows::<R, 1>(ops, n, k0);
                    k0 += 1;
                }
            }
        }

        /// See [`super::product`].
        ///
        /// # Safety
        /// As [`super::product`], and the CPU has the feature.
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn product(ops: &Operands, m: usize, n: usize, k: usize) {
            // SAFETY (each arm): the caller's guarantees.
            unsafe {
                match m {
                    1 => return stream::<1>(ops, n, k),
                    2 => return stream::<2>(ops, n, k),
                    _ => {}
                }
                let panel = ops.a_panel != 0 && ops.a_row == 1;
                match (panel, !ops.b_offs.is_null()) {
                    (false, false) => blocks::<0>(ops, m, n, k),
                    (true, false) => blocks::<A_PANEL>(ops, m, n, k),
                    (false, true) => blocks::<B_OFFS>(ops, m, n, k),
                    (true, true) => blocks::<{ A_PANEL | B_OFFS }>(ops, m, n, k),
                }
            }
        }

        /// [`product`] of at least three rows, in blocks of `B`, for the operands'
        /// variant `VAR` ([`A_PANEL`], [`B_OFFS`]).
        ///
        /// # Safety
        /// As [`super::product`]; `ops` is of variant `VAR`.
        #[target_feature(enable = $feature)]
        unsafe fn blocks<const VAR: u8>(ops: &Operands, m: usize, n: usize, k: usize) {
            let step = NV * LANES;
            // B's element [k0, j0], where the next column tile starts reading.
            let at = |k0: usize, j0: usize| {
                ops.b_offs
                    .is_null()
                    .then(|| ops.b.wrapping_offset(k0 as isize * ops.b_row + j0 as isize))
            };
            for jb in (0..n).step_by(NB) {
                let je = (jb + NB).min(n);
                for k0 in (0..k).step_by(KC) {
                    let kc = KC.min(k - k0);
                    let first = k0 == 0;
                    let mut j0 = jb;
                    // The tile after the block's last: the next rows of B over the same
                    // columns, else the next block of columns.
                    let after = if k0 + KC < k {
                        at(k0 + KC, jb)
                    } else if je < n {
                        at(0, je)
                    } else {
                        None
                    };
                    // SAFETY (each call): columns j0.. of the tile are columns of C
                    // (j0 + width <= je <= n, the last vector masked to `n`).
                    unsafe {
                        while j0 + step <= je {
                            let next = if j0 + step < je {
                                at(k0, j0 + step)
                            } else {
                                after
                            };
                            column::<NV, false, VAR>(ops, m, j0, k0, kc, LANES, first, next);
                            j0 += step;
                        }
                        while j0 + LANES <= je {
                            let next = if j0 + LANES < je {
                                at(k0, j0 + LANES)
                            } else {
                                after
                            };
                            column::<1, false, VAR>(ops, m, j0, k0, kc, LANES, first, next);
                            j0 += LANES;
                        }
                        if j0 < je {
                            column::<1, true, VAR>(ops, m, j0, k0, kc, je - j0, first, after);
                        }
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Operands, A_PANEL, B_OFFS, KC, NB, STREAM_KB};
    use std::arch::x86_64::*;

    type V = __m512;
    const LANES: usize = 16;
    /// 8 rows x 2 vectors: 16 sums, 2 vectors of `B` and a broadcast in 32 registers;
    /// per row of `B` 10 loads for 16 FMAs, so the FMA ports are the limit.
    pub(super) const MR: usize = 8;
    const NV: usize = 2;

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn zero() -> V {
        _mm512_setzero_ps()
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn splat(x: f32) -> V {
        _mm512_set1_ps(x)
    }
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn fma(a: V, b: V, c: V) -> V {
        _mm512_fmadd_ps(a, b, c)
    }
    /// # Safety
    /// 16 floats are readable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load(p: *const f32) -> V {
        // SAFETY: the caller's guarantee; loadu has no alignment need.
        unsafe { _mm512_loadu_ps(p) }
    }
    /// # Safety
    /// 16 floats are writable at `p`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store(p: *mut f32, v: V) {
        // SAFETY: the caller's guarantee.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    fn mask(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }
    /// # Safety
    /// `n` floats are readable at `p`; the others are not touched.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_tail(p: *const f32, n: usize) -> V {
        // SAFETY: masked-off lanes are not accessed (no fault is raised for them).
        unsafe { _mm512_maskz_loadu_ps(mask(n), p) }
    }
    /// # Safety
    /// `n` floats are writable at `p`; the others are not touched.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store_tail(p: *mut f32, v: V, n: usize) {
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_ps(p, mask(n), v) }
    }

    #[inline]
    fn prefetch(p: *const f32) {
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }

    kernels!("avx512f");
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Operands, A_PANEL, B_OFFS, KC, NB, STREAM_KB};
    use std::arch::x86_64::*;

    type V = __m256;
    const LANES: usize = 8;
    /// 6 rows x 2 vectors: 12 sums, 2 vectors of `B` and a broadcast in 16 registers.
    pub(super) const MR: usize = 6;
    const NV: usize = 2;

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn zero() -> V {
        _mm256_setzero_ps()
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn splat(x: f32) -> V {
        _mm256_set1_ps(x)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn fma(a: V, b: V, c: V) -> V {
        _mm256_fmadd_ps(a, b, c)
    }
    /// # Safety
    /// 8 floats are readable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load(p: *const f32) -> V {
        // SAFETY: the caller's guarantee; loadu has no alignment need.
        unsafe { _mm256_loadu_ps(p) }
    }
    /// # Safety
    /// 8 floats are writable at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store(p: *mut f32, v: V) {
        // SAFETY: the caller's guarantee.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn mask(n: usize) -> __m256i {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes)
    }
    /// # Safety
    /// `n` floats are readable at `p`; the others are not touched.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load_tail(p: *const f32, n: usize) -> V {
        // SAFETY: masked-off lanes are not accessed (no fault is raised for them).
        unsafe { _mm256_maskload_ps(p, mask(n)) }
    }
    /// # Safety
    /// `n` floats are writable at `p`; the others are not touched.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store_tail(p: *mut f32, v: V, n: usize) {
        // SAFETY: as above.
        unsafe { _mm256_maskstore_ps(p, mask(n), v) }
    }

    #[inline]
    fn prefetch(p: *const f32) {
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }

    kernels!("avx2,fma");
}

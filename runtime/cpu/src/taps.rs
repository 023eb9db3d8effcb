//! Implicit im2col: a convolution's product that gathers its taps from the input as it
//! runs, instead of reading an im2col buffer that a kernel before it stored.
//!
//! `decompose` makes a convolution an im2col kernel (the taps of every output position,
//! one shifted copy of the (padded) input per tap, `[C * taps, positions]`) and a
//! product of the weights with it. The im2col is nine (a 3x3 kernel) to 49 (the 7x7
//! stem) times the input: on the 16-core Xeon ResNet-18's stored 57 MB per run, each
//! kernel written by one set of cores and read back by others (4.2 ms of a 37 ms run at
//! one thread, a fifth of the run at 16).
//!
//! [`Taps::recognize`] proves, from the loop IR of the kernel that writes the product's
//! right operand `B` (`k x n`, dense), that `B` is such a gather of one source buffer:
//! every stage a store of `B` of one (guarded) load of the source, affine in its loop
//! variables, the variables that move the store by whole rows of `B` apart from those
//! that move it within a row, the latter the same in every stage (the output positions)
//! and the guards (padding) on them alone. Then
//!
//! ```text
//! B[k, p] = x[base[k] + start[run] + i * step]   if lo <= i < hi   else 0
//!           where run = p / run_len, i = p % run_len, (lo, hi) = valid[tap[k]][run]
//! ```
//!
//! (`run`: an output row; `step`: the convolution's stride along it; `tap[k]`: the store
//! that writes row `k`, whose guard gives each run's valid interval). The product then
//! packs, per block of columns it computes, those columns of `B` straight from the
//! source into a buffer that stays in the core's L2 ([`Taps::pack`]), and runs
//! [`crate::sgemm`] on it; the im2col kernel does not run. The rules are checked on the
//! loop IR, not on the graph, so any kernel of that form qualifies (a pooling's or an
//! unfold's gather feeding a product as well as a convolution's); anything else keeps its
//! stored operand.

use ferrite_ir::loops::{BufferId, ExprOp, Extents, Kernel, Stage, Value, Var};
use std::ops::Range;

/// Stores and runs (their product) a gather may have: the table of valid intervals
/// stays small next to the operand it replaces.
const MAX_TABLE: usize = 1 << 20;

/// A product's right operand gathered from a source buffer (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taps {
    /// The buffer the taps are read from.
    pub source: BufferId,
    /// Rows of `B`.
    pub k: usize,
    /// Columns of `B`.
    pub n: usize,
    /// Per row of `B`: the source element of its position 0 before the run's start.
    base: Vec<i64>,
    /// Per row of `B`: the store (tap) that writes it.
    tap: Vec<u32>,
    /// Columns per run (the innermost position variable's extent).
    run_len: usize,
    /// Source elements between neighbours in a run.
    step: i64,
    /// Per run: its source offset.
    start: Vec<i64>,
    /// Per tap and run (`tap * runs + run`): the valid interval of the run's positions.
    valid: Vec<(u32, u32)>,
    /// Elements of the source it was recognized for.
    source_len: usize,
    /// Rows of `B` that hold the same floats shifted by whole runs, when there are such
    /// (see [`Shared`]).
    shared: Option<Shared>,
}

/// Rows of `B` that are one row shifted by whole runs: in a stride-1 3x3 convolution the
/// taps `(c, kh, kw)` for `kh = 0, 1, 2` read the same input row for output rows one
/// apart, the padding above and below being zero in every one of them. Row `kk` of `B` is
/// then `B[kk, j] = S[g, j + d * run_len]` for its shared row `g` and shift `d`, where
/// `S[g]` is a row over "virtual" columns a few runs wider than `B`'s; a product packs each
/// shared row once (a third of the floats of a 3x3 convolution's) and reads the rows of `B`
/// through offsets ([`crate::sgemm::Operands::b_offs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shared {
    /// Per row of `B`: its shared row and its shift in runs (from the shared row's first
    /// member, so at least 0).
    of_row: Vec<(u32, i32)>,
    /// Per shared row, its rows of `B` by increasing shift: `rows[first[g]..first[g + 1]]`.
    rows: Vec<u32>,
    /// See `rows`.
    first: Vec<u32>,
    /// The greatest shift: a shared row is `dmax` runs longer than the columns of `B` it
    /// stands for.
    dmax: i32,
}

/// Most runs two rows of `B` may be apart to share a row: a kernel's height (with its
/// dilation), not the distance between channels.
const MAX_SHIFT: i64 = 8;

/// Most rows of `B` one shared row stands for (a 7x7 kernel's seven rows, with room).
const MAX_CLUSTER: usize = 16;

/// Runs compared, all pairs of taps and shifts together, before the search for shared
/// rows gives up (the product then packs every row): it bounds the compile time a
/// gather of many taps over many runs can take.
const MAX_SHARE_WORK: usize = 1 << 24;

/// A guard of a store's load: `lo <= c + Σ a * x < hi`, each `x` a position variable
/// named by its place in the positions' layout (innermost first).
type Guard = (i64, Vec<(usize, i64)>, i64, i64);

/// One loop variable of a store: its extent and its coefficients in the stored and the
/// loaded index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Term {
    var: Var,
    extent: usize,
    dst: i64,
    src: i64,
}

impl Taps {
    /// The gather that `kernel` (which writes `b`, `k x n` dense, and nothing else)
    /// performs, when it is one; `source_len` gives the elements of a candidate source
    /// (`None`: not an `f32` buffer the product can read).
    pub fn recognize(
        kernel: &Kernel,
        b: BufferId,
        k: usize,
        n: usize,
        source_len: impl Fn(BufferId) -> Option<usize>,
    ) -> Option<Taps> {
        if kernel.gemm.is_some() || k == 0 || n == 0 || kernel.writes.iter().any(|w| w.buffer != b)
        {
            return None;
        }
        let (ni, ki) = (n as i64, k as i64);
        let mut source = None;
        // Per row of B, the store (tap) that writes it and its source base; the
        // positions' layout, the same for every store.
        let mut rows = vec![u32::MAX; k];
        let mut base = vec![0i64; k];
        let mut inner: Option<Vec<(usize, i64)>> = None;
        // Per store, its guards: `lo <= c + Σ a * x < hi` over positions' variables,
        // each named by its place in the (common) layout, innermost first.
        let mut guards: Vec<Vec<Guard>> = Vec::new();
        for stage in &kernel.stages {
            let Stage::Store { body, stores, .. } = stage else {
                return None;
            };
            let ext = stage.extents(&kernel.domain);
            for store in stores {
                let ExprOp::Load(load) = &body.nodes.get(store.value.index())?.op else {
                    return None;
                };
                if store.buffer != b || *source.get_or_insert(load.buffer) != load.buffer {
                    return None;
                }
                if !load.guard.is_empty() && load.other != Value::Float(0.0) {
                    return None;
                }
                let (d0, dst) = store.index.as_affine(&ext)?;
                let (s0, src) = load.index.as_affine(&ext)?;
                let terms = terms(&ext, &dst, &src)?;
                // Variables that move the store by whole rows (rows of B) and within
                // one (output positions).
                let (mut kvars, mut pvars) = (Vec::new(), Vec::new());
                for t in terms {
                    match t.dst {
                        d if d <= 0 => return None,
                        d if d % ni == 0 => kvars.push(t),
                        _ => pvars.push(t),
                    }
                }
                if d0 < 0 || d0 % ni != 0 {
                    return None;
                }
                // The positions: p-variables that tile 0..n exactly, in one layout for
                // every store.
                pvars.sort_by_key(|t| t.dst);
                let mut stride = 1i64;
                for t in &pvars {
                    if t.dst != stride {
                        return None;
                    }
                    stride = stride.checked_mul(t.extent as i64)?;
                }
                if stride != ni {
                    return None;
                }
                // Their strides in B follow from the tiling: extents and source strides
                // say the rest.
                let layout: Vec<(usize, i64)> = pvars.iter().map(|t| (t.extent, t.src)).collect();
                match &inner {
                    None => inner = Some(layout),
                    Some(l) if *l == layout => {}
                    Some(_) => return None,
                }
                // The guards, on p-variables only.
                let mut gs = Vec::with_capacity(load.guard.len());
                for g in &load.guard {
                    let (c, coeffs) = g.expr.as_affine(&ext)?;
                    let mut by_p = Vec::new();
                    for (v, a) in coeffs {
                        if a == 0 || ext.extent(v) == Some(1) {
                            continue;
                        }
                        by_p.push((pvars.iter().position(|t| t.var == v)?, a));
                    }
                    gs.push((c, by_p, g.lo, g.hi));
                }
                let tap = guards.len() as u32;
                // Its rows, each written once.
                let mut point = vec![0usize; kvars.len()];
                loop {
                    let row = d0 / ni
                        + kvars
                            .iter()
                            .zip(&point)
                            .map(|(t, &x)| t.dst / ni * x as i64)
                            .sum::<i64>();
                    if row >= ki || rows[row as usize] != u32::MAX {
                        return None;
                    }
                    rows[row as usize] = tap;
                    base[row as usize] = s0
                        + kvars
                            .iter()
                            .zip(&point)
                            .map(|(t, &x)| t.src * x as i64)
                            .sum::<i64>();
                    if !odometer(&mut point, kvars.iter().map(|t| t.extent)) {
                        break;
                    }
                }
                guards.push(gs);
            }
        }
        let (source, layout) = (source?, inner?);
        if rows.contains(&u32::MAX) {
            return None;
        }
        let (run_len, step, outer) = match layout.split_first() {
            Some((&(extent, src), rest)) => (extent, src, rest.to_vec()),
            None => (1, 0, Vec::new()),
        };
        let runs = n / run_len;
        if guards.len().checked_mul(runs)? > MAX_TABLE {
            return None;
        }
        // Each run's source offset, and per tap each run's valid interval.
        let mut start = Vec::with_capacity(runs);
        let mut point = vec![0usize; outer.len()];
        let mut valid = vec![(0u32, 0u32); guards.len() * runs];
        for run in 0..runs {
            let off = outer
                .iter()
                .zip(&point)
                .map(|(&(_, src), &x)| src * x as i64)
                .sum::<i64>();
            start.push(off);
            for (tap, gs) in guards.iter().enumerate() {
                let (mut lo, mut hi) = (0i64, run_len as i64);
                for (c, coeffs, glo, ghi) in gs {
                    // c + a * i + (outer terms) in glo..ghi.
                    let (mut rest, mut a) = (*c, 0i64);
                    for &(at, coef) in coeffs {
                        if at == 0 {
                            a = coef;
                        } else {
                            rest += coef * point[at - 1] as i64;
                        }
                    }
                    let (l, h) = interval(rest, a, *glo, *ghi, run_len as i64);
                    lo = lo.max(l);
                    hi = hi.min(h);
                }
                if hi <= lo {
                    (lo, hi) = (0, 0);
                }
                valid[tap * runs + run] = (lo as u32, hi as u32);
            }
            odometer(&mut point, outer.iter().map(|&(extent, _)| extent));
        }
        let taps = Taps {
            source,
            k,
            n,
            base,
            tap: rows,
            run_len,
            step,
            start,
            valid,
            source_len: source_len(source)?,
            shared: None,
        };
        if !taps.in_bounds(taps.source_len) {
            return None;
        }
        let shared = taps.find_shared();
        Some(Taps { shared, ..taps })
    }

    /// Whether every element [`Taps::pack`] reads is one of the source's `len`.
    fn in_bounds(&self, len: usize) -> bool {
        let runs = self.start.len();
        // Per tap, the lowest and highest offset it reads from a row's base.
        let mut reach = vec![(i64::MAX, i64::MIN); self.taps()];
        for (tap, r) in reach.iter_mut().enumerate() {
            for run in 0..runs {
                let (lo, hi) = self.valid[tap * runs + run];
                if lo >= hi {
                    continue;
                }
                let a = self.start[run] + lo as i64 * self.step;
                let b = self.start[run] + (hi as i64 - 1) * self.step;
                r.0 = r.0.min(a.min(b));
                r.1 = r.1.max(a.max(b));
            }
        }
        self.base.iter().zip(&self.tap).all(|(&b, &t)| {
            let (lo, hi) = reach[t as usize];
            lo > hi || (b + lo >= 0 && b + hi < len as i64)
        })
    }

    /// Rows of `B` that hold the same floats shifted by whole runs ([`Shared`]), when
    /// rows do and together they are fewer than `B`'s.
    fn find_shared(&self) -> Option<Shared> {
        let runs = self.start.len();
        if runs < 2 {
            return None;
        }
        // Runs a fixed distance apart in the source: one image, its output rows in order.
        let s = self.start[1] - self.start[0];
        if s <= 0 || self.start.windows(2).any(|w| w[1] - w[0] != s) {
            return None;
        }
        let runs_i = runs as i64;
        // A tap's valid interval in a run, empty ones alike.
        let valid = |tap: usize, run: i64| {
            let (lo, hi) = self.valid[tap * runs + run as usize];
            if hi > lo {
                (lo, hi)
            } else {
                (0, 0)
            }
        };
        // Rows by their base's residue modulo `s`, then base: candidates a few runs apart.
        let mut order: Vec<u32> = (0..self.k as u32).collect();
        order.sort_by_key(|&kk| {
            let b = self.base[kk as usize];
            (b.rem_euclid(s), b, kk)
        });
        let mut of_row = vec![(u32::MAX, 0i32); self.k];
        let (mut rows, mut first) = (Vec::new(), vec![0u32]);
        // Whether rows k1 and k2 (k2's base d runs after k1's) hold the same floats
        // wherever both have a run: the same source elements, the same valid positions.
        // That depends on their taps and `d` alone, so each triple is compared once, and
        // all the comparisons together stay under MAX_SHARE_WORK runs (else no sharing).
        let mut known: std::collections::HashMap<(u32, u32, i64), bool> =
            std::collections::HashMap::new();
        let mut work = 0usize;
        let mut agree = |k1: u32, k2: u32, d: i64| -> Option<bool> {
            let (t1, t2) = (self.tap[k1 as usize], self.tap[k2 as usize]);
            if let Some(&same) = known.get(&(t1, t2, d)) {
                return Some(same);
            }
            work += runs;
            if work > MAX_SHARE_WORK {
                return None;
            }
            let (u1, u2) = (t1 as usize, t2 as usize);
            let same = (d.max(0)..runs_i.min(runs_i + d)).all(|r| valid(u1, r) == valid(u2, r - d));
            known.insert((t1, t2, d), same);
            Some(same)
        };
        let mut cluster: Vec<u32> = Vec::new();
        let mut flush = |cluster: &mut Vec<u32>, of_row: &mut Vec<(u32, i32)>| {
            let g = (first.len() - 1) as u32;
            let b0 = self.base[cluster[0] as usize];
            for &kk in cluster.iter() {
                of_row[kk as usize] = (g, ((self.base[kk as usize] - b0) / s) as i32);
                rows.push(kk);
            }
            first.push(rows.len() as u32);
            cluster.clear();
        };
        for &kk in &order {
            let b = self.base[kk as usize];
            // Joins the cluster when it is of the same residue, a few runs from the last
            // member and fewer than `runs` from the first (so that they overlap), and
            // agrees with every member.
            let mut joins = match (cluster.first(), cluster.last()) {
                (Some(&c0), Some(&cl)) => {
                    let (b0, bl) = (self.base[c0 as usize], self.base[cl as usize]);
                    b.rem_euclid(s) == b0.rem_euclid(s)
                        && b - bl <= MAX_SHIFT * s
                        && (b - b0) / s < runs_i
                        && cluster.len() < MAX_CLUSTER
                }
                _ => false,
            };
            for &m in &cluster {
                if !joins {
                    break;
                }
                joins = agree(m, kk, (b - self.base[m as usize]) / s)?;
            }
            if !joins && !cluster.is_empty() {
                flush(&mut cluster, &mut of_row);
            }
            cluster.push(kk);
        }
        flush(&mut cluster, &mut of_row);
        let groups = first.len() - 1;
        // Worth it when the shared rows are fewer by a third at least.
        if groups * 3 > self.k * 2 {
            return None;
        }
        let dmax = of_row.iter().map(|&(_, d)| d).max()?;
        Some(Shared {
            of_row,
            rows,
            first,
            dmax,
        })
    }

    /// With shared rows ([`Shared`]): how many, and the columns of the packed rows
    /// [`Taps::pack_shared`] writes for `w` columns of `B`.
    pub fn shared_width(&self, w: usize) -> Option<(usize, usize)> {
        let sh = self.shared.as_ref()?;
        let extra = sh.dmax as usize * self.run_len;
        Some((sh.first.len() - 1, w + extra))
    }

    /// Columns `cols` of `B` as shared rows ([`Shared`]): shared row `g` at
    /// `out[g * width..][..width]` (`width` from [`Taps::shared_width`]), and in `offs`
    /// (`k` of them) the offset of each row of `B`'s column `cols.start` in `out`. Each
    /// shared row is written once, from its rows of `B` by increasing shift, each only
    /// where the ones before it did not reach.
    ///
    /// # Panics
    /// If the taps share no rows, `x` is shorter than the source, `cols` is not inside
    /// `0..n`, or `out` or `offs` is too short.
    pub fn pack_shared(&self, x: &[f32], cols: Range<usize>, out: &mut [f32], offs: &mut [isize]) {
        let sh = self
            .shared
            .as_ref()
            .expect("rows of B that share their floats");
        assert!(x.len() >= self.source_len && cols.end <= self.n);
        let (groups, width) = self.shared_width(cols.len()).expect("shared rows");
        let out = &mut out[..groups * width];
        let r = self.run_len;
        for (kk, off) in offs[..self.k].iter_mut().enumerate() {
            let (g, d) = sh.of_row[kk];
            *off = (g as usize * width + d as usize * r) as isize;
        }
        for (g, row) in out.chunks_exact_mut(width).enumerate() {
            // Columns of the shared row written so far.
            let mut done = 0;
            for &kk in &sh.rows[sh.first[g] as usize..sh.first[g + 1] as usize] {
                let d = sh.of_row[kk as usize].1 as usize;
                // Row kk's columns cols land at d * r.. in the shared row.
                let (lo, hi) = ((d * r).max(done), d * r + cols.len());
                if lo >= hi {
                    continue;
                }
                let from = cols.start + (lo - d * r);
                self.row_into(x, kk as usize, (from / r, from % r), &mut row[lo..hi]);
                done = hi;
            }
        }
    }

    /// Elements of the source [`Taps::pack`] may read (it reads fewer or as many).
    pub fn source_len(&self) -> usize {
        self.source_len
    }

    /// How many stores (taps) the gather has.
    pub fn taps(&self) -> usize {
        // Every tap has one interval per run, and there is a run at least (n > 0).
        self.valid.len() / self.start.len()
    }

    /// Columns `cols` of every row of `B` into `out` (`k x cols.len()`, row-major),
    /// read from `x` (the source).
    ///
    /// # Panics
    /// If `x` is shorter than the source the gather was recognized for, `out` shorter
    /// than `k * cols.len()` or `cols` not inside `0..n`.
    pub fn pack(&self, x: &[f32], cols: Range<usize>, out: &mut [f32]) {
        assert!(x.len() >= self.source_len && cols.end <= self.n);
        let w = cols.len();
        let at = (cols.start / self.run_len, cols.start % self.run_len);
        for (kk, row) in out[..self.k * w].chunks_exact_mut(w).enumerate() {
            self.row_into(x, kk, at, row);
        }
    }

    /// Row `kk` of `B` from column `(run, i0)` (a run and a position in it) on, into all
    /// of `row` (columns of `B`, inside `0..n`; `x` the whole source).
    #[inline]
    fn row_into(&self, x: &[f32], kk: usize, (mut run, mut i0): (usize, usize), row: &mut [f32]) {
        assert!(x.len() >= self.source_len);
        let w = row.len();
        let runs = self.start.len();
        let (step, x) = (self.step as isize, x.as_ptr());
        let pairs = cfg!(target_arch = "x86_64")
            && step == 2
            && crate::wide::Isa::host() == crate::wide::Isa::Avx512;
        let (base, tap) = (self.base[kk], self.tap[kk] as usize);
        let valid = &self.valid[tap * runs..(tap + 1) * runs];
        let mut at = 0;
        while at < w {
            let i1 = self.run_len.min(i0 + (w - at));
            let (lo, hi) = valid[run];
            let a = (lo as usize).clamp(i0, i1);
            let b = (hi as usize).clamp(a, i1);
            let seg = &mut row[at..at + (i1 - i0)];
            let (head, rest) = seg.split_at_mut(a - i0);
            let (mid, tail) = rest.split_at_mut(b - a);
            head.fill(0.0);
            tail.fill(0.0);
            let from = (base + self.start[run] + a as i64 * self.step) as isize;
            // SAFETY: `in_bounds` proved every element a valid position of a row reads
            // (`from + j * step` for `j` in `0..b - a`) inside the source's `source_len`
            // elements, and `x` has at least that many (asserted above).
            unsafe {
                if step == 1 {
                    for (j, o) in mid.iter_mut().enumerate() {
                        *o = *x.offset(from + j as isize);
                    }
                } else if pairs {
                    // A stride-2 convolution's taps: every other element.
                    #[cfg(target_arch = "x86_64")]
                    evens_avx512(x.offset(from), mid);
                } else {
                    for (j, o) in mid.iter_mut().enumerate() {
                        *o = *x.offset(from + j as isize * step);
                    }
                }
            }
            at += i1 - i0;
            run += 1;
            i0 = 0;
        }
    }
}

/// `out[j] = from[2 * j]` for every `j` of `out`, in vectors: two loads of 16 floats and
/// one permutation per 16 outputs (the scalar loop of a stride-2 gather made the 7x7
/// stride-2 stem of ResNet-18 a quarter slower than its product alone).
///
/// # Safety
/// `from[0..2 * out.len() - 1]` is readable; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn evens_avx512(from: *const f32, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let n = out.len();
    let to = out.as_mut_ptr();
    let mut j = 0;
    // SAFETY (each access): the loads stay inside `from[0..2 * n - 1]` (masked at the
    // end; masked lanes are not accessed), the stores inside `out`.
    unsafe {
        while j + 16 <= n {
            let p = from.add(2 * j);
            // Elements 2j .. 2j + 31, of which 2j + 31 may be past the last one read.
            let lo = _mm512_loadu_ps(p);
            let left = 2 * (n - j) - 1 - 16;
            let hi = _mm512_maskz_loadu_ps(((1u32 << left.min(16)) - 1) as __mmask16, p.add(16));
            _mm512_storeu_ps(to.add(j), _mm512_permutex2var_ps(lo, idx, hi));
            j += 16;
        }
        if j < n {
            let p = from.add(2 * j);
            let need = 2 * (n - j) - 1;
            let lo = _mm512_maskz_loadu_ps(((1u32 << need.min(16)) - 1) as __mmask16, p);
            let hi = if need > 16 {
                _mm512_maskz_loadu_ps(((1u32 << (need - 16)) - 1) as __mmask16, p.add(16))
            } else {
                _mm512_setzero_ps()
            };
            let m = ((1u32 << (n - j)) - 1) as __mmask16;
            _mm512_mask_storeu_ps(to.add(j), m, _mm512_permutex2var_ps(lo, idx, hi));
        }
    }
}

/// The moving variables of a store (extent above 1) with their coefficients in the
/// stored (`dst`) and loaded (`src`) index; `None` if one has no known extent or is
/// missing from the stored index (two points would write one element).
fn terms(ext: &Extents, dst: &[(Var, i64)], src: &[(Var, i64)]) -> Option<Vec<Term>> {
    let coef = |terms: &[(Var, i64)], v: Var| {
        terms
            .iter()
            .filter(|(w, _)| *w == v)
            .map(|(_, c)| c)
            .sum::<i64>()
    };
    let mut vars: Vec<Var> = dst.iter().chain(src).map(|&(v, _)| v).collect();
    let all = (0..ext.outer.len())
        .map(Var::outer)
        .chain((0..ext.store.len()).map(Var::store));
    vars.extend(all);
    vars.sort();
    vars.dedup();
    let mut out = Vec::new();
    for v in vars {
        let extent = ext.extent(v)?;
        if extent == 0 {
            return None;
        }
        if extent == 1 {
            continue;
        }
        out.push(Term {
            var: v,
            extent,
            dst: coef(dst, v),
            src: coef(src, v),
        });
    }
    Some(out)
}

/// Steps `point` (each coordinate below its extent) to the next point in odometer
/// order, the first coordinate fastest; false after the last.
pub(crate) fn odometer(point: &mut [usize], extents: impl Iterator<Item = usize>) -> bool {
    for (x, e) in point.iter_mut().zip(extents) {
        *x += 1;
        if *x < e {
            return true;
        }
        *x = 0;
    }
    false
}

/// The positions `i` in `0..len` where `lo <= c + a * i < hi`, as `lo_i..hi_i`.
pub(crate) fn interval(c: i64, a: i64, lo: i64, hi: i64, len: i64) -> (i64, i64) {
    if a == 0 {
        return if lo <= c && c < hi { (0, len) } else { (0, 0) };
    }
    // a > 0: ceil((lo - c) / a) <= i <= floor((hi - 1 - c) / a); a < 0 mirrored.
    let (first, last) = if a > 0 {
        (div_ceil(lo - c, a), (hi - 1 - c).div_euclid(a))
    } else {
        let m = -a;
        (div_ceil(c - hi + 1, m), (c - lo).div_euclid(m))
    };
    (first.max(0), (last + 1).min(len))
}

fn div_ceil(x: i64, d: i64) -> i64 {
    -((-x).div_euclid(d))
}

#[cfg(test)]
mod tests {
    /// The vector stride-2 gather takes every other element for every length (whole
    /// vectors, and tails that end one element before a vector's end or anywhere else),
    /// reading nothing past `2 * n - 1` elements (the source is cut there).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn evens_match_the_scalar_gather() {
        if !crate::wide::Isa::Avx512.supported() {
            return;
        }
        for n in 1..70usize {
            let src: Vec<f32> = (0..2 * n - 1).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut out = vec![f32::NAN; n + 3];
            // SAFETY: `src` holds exactly `2 * n - 1` floats; AVX-512F is present.
            unsafe { super::evens_avx512(src.as_ptr(), &mut out[..n]) };
            for (j, &o) in out[..n].iter().enumerate() {
                assert_eq!(o, src[2 * j], "n {n} j {j}");
            }
            assert!(
                out[n..].iter().all(|o| o.is_nan()),
                "n {n}: wrote past the end"
            );
        }
    }
}

//! Direct stencils: a kernel that sums a few shifted rows of its input, each times a
//! coefficient fixed per plane (a depthwise convolution, a box filter, a pooling's sum),
//! computed by a hand-written AVX-512 loop instead of generated `f32x4` code.
//!
//! `decompose` makes a depthwise convolution of few taps a sum over its taps of
//! `w[c, tap]` times a shifted (padded) copy of the input; fusion puts it into one
//! kernel with its bias and activation. Generated as `f32x4` code, each tap of each group
//! of four outputs was a guarded load, a multiply and an add, spilled around a long
//! expression: MobileNetV2's depthwise convs took 2.9 of its 8 ms at one thread (Zen 5),
//! 2.5-4x ONNX Runtime's time for the same layers.
//!
//! [`split`] proves, from the loop IR, that a pointwise kernel over `[planes.., rows,
//! cols]` stores (at its own dense element) an expression containing a sum
//!
//! ```text
//! S[p, oh, ow] = Σ_t c_t[p] * x_t[base_t[p] + row_step_t * oh + step * ow]   (0 where t's guard fails)
//! ```
//!
//! (`c_t` a constant or a load that depends on the plane only; `step` 1 or 2, the same for
//! every tap; each guard bound affine in `oh` and `ow`, so for each tap and output row the
//! valid columns are one interval), and that every element it would read lies in its
//! buffer. The kernel then becomes the stencil (the extern loop below, writing `S` into
//! the kernel's output) and, unless `S` is the whole result, an epilogue: the kernel with
//! `S` read back from the output, updated in place. The executor runs the epilogue on each
//! block of rows right after the stencil computes it, while it is in cache, when the plan
//! proves it pointwise at its own element (as a GEMM's epilogue).
//!
//! The loop: per block of up to eight 16-lane vectors of a row, or of several short rows
//! (up to sixteen vectors at stride 1), the accumulators stay in registers while each tap
//! adds `c * x` with one (masked) load and one FMA per vector (two loads and a
//! permutation at stride 2). The masks (the valid
//! columns of a tap in a row) are computed at compile time, one set per distinct interval.
//! Lanes outside a tap's interval load zero and still add `0 * c`, as the guarded loads of
//! the loop IR do, so a non-finite coefficient gives the same NaN; a tap whose whole row
//! is outside its interval is skipped when its coefficient is finite.
//!
//! Results differ from the generated code's in rounding only: each tap is one FMA (the
//! generated code rounds the product, then the sum), summed in the same order.
//!
//! The same shape with `maximum` in place of `+` and taps whose guarded lanes read `-inf`
//! (a max pooling) is a [`Combine::Max`] stencil: the same loop, each tap one IEEE
//! maximum (NaN propagates, `-0 < +0`), which gives the generated code's bits in any order.

use ferrite_ir::loops::{
    Block, Buffer, BufferId, ExprNode, ExprOp, ExprRef, IndexExpr, Kernel, Load, Stage, StoreOp,
    Value, Var, VarKind,
};
use ferrite_ir::types::contiguous_strides;
use ferrite_ir::{BinaryOp, DType};
use std::collections::HashMap;
use std::ops::Range;

/// Most taps one stencil sums (a 7x7 kernel's 49, with room).
pub const MAX_TAPS: usize = 64;

/// Fewest taps worth a stencil: a single shifted product is a pointwise kernel.
const MIN_TAPS: usize = 2;

/// Fewest output columns worth a stencil by rows: rows of fewer fill under half a
/// vector, where the generated `f32x4` code was as fast (MobileNetV2's 7x7 planes: 58-65
/// us generated, 63-72 us by rows, Zen 5). A flat stencil has no such minimum.
const MIN_COLS: usize = 8;

/// Widest rows run flat (vectors along the whole plane) when they may: narrower rows
/// fill their vectors poorly one row at a time; wider ones lose more to masks on every
/// vector than they gain (one Zen 5 core, 3x3 taps: 112 columns 24.5 GFMA/s by rows, 20.7
/// flat; 56 even; 28 columns 17.4 by rows, 20.8 flat; 14 columns 14.9 and 20.8).
const MAX_FLAT_COLS: usize = 32;

/// Largest per-plane and per-row tables (`planes * taps`, `taps * rows`).
const MAX_TABLE: usize = 1 << 20;

/// Most (plane, tap, row) triples whose reads are proved in bounds at compile time.
const MAX_CHECK: usize = 1 << 24;

/// Lanes of a vector.
const LANES: usize = 16;

/// Vectors of a row computed together (their accumulators in registers).
const BLOCK: usize = 8;

/// Vectors of a block of whole rows at most (see [`blocks`]), at stride 1 and 2: more
/// rows per block share each tap's lookups and broadcast (one Zen 5 core: 144 planes of
/// 56 x 56 187 -> 157 us, 32 of 112 x 112 140 -> 119 us with 16 against 8), where the two
/// loads and the permutation of a stride-2 tap leave registers for 8 only (16: 144 planes
/// of 112 x 112 at stride 2 334 -> 428 us).
const ROW_BLOCK: [usize; 2] = [16, 8];

/// A tap's coefficient.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Coef {
    /// The same for every plane.
    Const(f32),
    /// Read per plane from this buffer (at [`Stencil`]'s per-plane index).
    Buffer(BufferId),
}

/// One tap of a stencil.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tap {
    /// The buffer its shifted rows are read from.
    pub source: BufferId,
    /// Source elements between output rows.
    pub row_step: i64,
    /// Its coefficient.
    pub coef: Coef,
}

/// How a stencil combines its taps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// `Σ c_t * x_t`, one FMA per tap in order; lanes outside a tap's interval read 0.
    Sum,
    /// The IEEE 754-2019 `maximum` of the taps (a max pooling): NaN if any is NaN, `-0 <
    /// +0`; lanes outside a tap's interval read `-inf` (what the loop IR's guarded loads
    /// give). The order does not change the result; coefficients are not used.
    Max,
}

/// A kernel's sum (or maximum, [`Combine`]) of shifted rows (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Stencil {
    /// The buffer the sum is written to, dense `[planes, rows, cols]`.
    pub out: BufferId,
    /// Planes (the product of the outer axes before the last two).
    pub planes: usize,
    /// Output rows per plane.
    pub rows: usize,
    /// Output columns per row.
    pub cols: usize,
    /// Source elements between neighbours in a row: 1 or 2.
    pub step: usize,
    /// How the taps combine.
    pub combine: Combine,
    /// The taps, in the order they are summed.
    pub taps: Vec<Tap>,
    /// Whether the epilogue (the next planned kernel) runs on each block of rows right
    /// after the stencil computes it (set by the plan's `stencil-blocks` step).
    pub epilogue_per_rows: bool,
    /// Per plane and tap (`p * taps + t`): the source offset of output `(0, 0)`.
    base: Vec<i64>,
    /// Per plane and tap: the coefficient's index in its buffer (0 for a constant).
    coef_at: Vec<usize>,
    /// Per row and tap (`oh * taps + t`): the source offset of the row from the tap's
    /// plane base, and where its mask set starts in `masks`.
    row_taps: Vec<RowTap>,
    /// Mask sets, one mask per vector of a row each: the valid lanes of a tap in a row
    /// (bit `i`; at stride 2, bit `2i` of the 32 elements two loads read).
    masks: Vec<u32>,
    /// The blocks of vectors computed together, in output order; the same for every
    /// plane.
    blocks: Vec<BlockOf>,
    /// Per vector of a row: the lanes the row has.
    out_masks: Vec<u16>,
    /// Set when the taps read each plane as one run: the blocks are then vectors of the
    /// whole plane (rows included), not of a row.
    flat: Option<Flat>,
    /// The padded buffer its kernel reads, when the stencil reads the pad's source
    /// through the padding instead ([`split_through`]; the pad kernel does not run).
    pub through: Option<BufferId>,
}

/// A kernel that stores a zero-padded copy of a buffer: `padded[.., pt + i, pl + j] =
/// source[.., i, j]`, zero elsewhere ([`Pad::recognize`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pad {
    /// The buffer copied.
    pub source: BufferId,
    /// The padded buffer.
    pub padded: BufferId,
    /// Rows and columns of a plane of the source, and of the padded buffer.
    h: i64,
    w: i64,
    hp: i64,
    wp: i64,
    /// The padding before the first row and column.
    pt: i64,
    pl: i64,
}

impl Pad {
    /// The pad `kernel` stores, when every one of its stores writes one `f32` buffer,
    /// one of them (a store stage of its own) the copy of a source plane by plane at an
    /// offset, the others zeros outside the copy.
    pub fn recognize(kernel: &Kernel, buffers: &[Buffer]) -> Option<Pad> {
        if kernel.gemm.is_some() {
            return None;
        }
        let mut copy = None;
        let mut fills = Vec::new();
        let mut padded = None;
        for stage in &kernel.stages {
            let Stage::Store { body, stores, .. } = stage else {
                return None;
            };
            for st in stores {
                if *padded.get_or_insert(st.buffer) != st.buffer {
                    return None;
                }
                match &body.get(st.value)?.op {
                    ExprOp::Const(Value::Float(z)) if *z == 0.0 => fills.push((stage, st)),
                    ExprOp::Load(l) if l.guard.is_empty() && copy.is_none() => {
                        copy = Some((stage, st, l))
                    }
                    _ => return None,
                }
            }
        }
        let (padded, (stage, store, load)) = (padded?, copy?);
        let (pb, xb) = (
            buffers.get(padded.index())?,
            buffers.get(load.buffer.index())?,
        );
        if pb.ty.dtype != DType::F32 || xb.ty.dtype != DType::F32 || load.buffer == padded {
            return None;
        }
        let (pd, xd) = (&pb.ty.shape, &xb.ty.shape);
        let (np, nx) = (pd.len(), xd.len());
        if np < 2 || nx < 2 {
            return None;
        }
        let dim = |d: &[usize], i: usize| i64::try_from(d[i]).ok();
        let (hp, wp, h, w) = (
            dim(pd, np - 2)?,
            dim(pd, np - 1)?,
            dim(xd, nx - 2)?,
            dim(xd, nx - 1)?,
        );
        let planes: usize = xd[..nx - 2].iter().product();
        if pd[..np - 2].iter().product::<usize>() != planes || h < 2 || w < 2 {
            return None;
        }
        // The copy: per variable, its coefficients in the padded and the source index.
        let ext = stage.extents(&kernel.domain);
        let (pc0, pterms) = store.index.as_affine(&ext)?;
        let (xc0, xterms) = load.index.as_affine(&ext)?;
        if xc0 != 0 {
            return None;
        }
        let mut vars: Vec<Var> = pterms.iter().chain(&xterms).map(|&(v, _)| v).collect();
        vars.sort();
        vars.dedup();
        let coef = |terms: &[(Var, i64)], v: Var| {
            terms.iter().find(|&&(u, _)| u == v).map_or(0, |&(_, c)| c)
        };
        let (mut rows, mut cols, mut lead) = (false, false, Vec::new());
        for v in vars {
            let extent = ext.extent(v)?;
            if extent == 1 {
                continue;
            }
            let (pc, xc) = (coef(&pterms, v), coef(&xterms, v));
            if (pc, xc) == (1, 1) && extent as i64 == w && !cols {
                cols = true;
            } else if (pc, xc) == (wp, w) && extent as i64 == h && !rows {
                rows = true;
            } else if xc > 0 && xc % (h * w) == 0 && pc == xc / (h * w) * (hp * wp) {
                lead.push((xc, extent));
            } else {
                return None;
            }
        }
        // The plane variables lay the planes out densely, one after another.
        lead.sort_unstable();
        let mut next = h * w;
        for &(xc, extent) in &lead {
            if xc != next {
                return None;
            }
            next = next.checked_mul(extent as i64)?;
        }
        let (pt, pl) = (pc0.div_euclid(wp), pc0.rem_euclid(wp));
        if !rows || !cols || next != h * w * planes as i64 || pt + h > hp || pl + w > wp {
            return None;
        }
        // The fills stay outside the copy.
        let interior = |idx: i64| {
            let at = idx.rem_euclid(hp * wp);
            let (r, c) = (at / wp, at % wp);
            (pt..pt + h).contains(&r) && (pl..pl + w).contains(&c)
        };
        for (stage, st) in fills {
            let ext = stage.extents(&kernel.domain);
            let (c0, terms) = st.index.as_affine(&ext)?;
            let extents: Vec<usize> = terms
                .iter()
                .map(|&(v, _)| ext.extent(v))
                .collect::<Option<_>>()?;
            if extents.iter().try_fold(1usize, |a, &e| a.checked_mul(e))? > MAX_CHECK {
                return None;
            }
            let mut point = vec![0usize; terms.len()];
            loop {
                let idx = terms
                    .iter()
                    .zip(&point)
                    .fold(c0, |a, (&(_, k), &x)| a + k * x as i64);
                if interior(idx) {
                    return None;
                }
                if !crate::taps::odometer(&mut point, extents.iter().copied()) {
                    break;
                }
            }
        }
        Some(Pad {
            source: load.buffer,
            padded,
            h,
            w,
            hp,
            wp,
            pt,
            pl,
        })
    }

    /// `tap` (reading the padded buffer over `rows x cols` outputs, its reads inside
    /// their padded rows and planes) reading the source instead, guarded to it.
    fn map(&self, tap: &TapLoad, rows: usize, cols: usize) -> Option<TapLoad> {
        let (pp, xp) = (self.hp * self.wp, self.h * self.w);
        if tap.source != self.padded || tap.row_step % self.wp != 0 {
            return None;
        }
        let sh = tap.row_step / self.wp;
        let mut plane = Vec::with_capacity(tap.plane.len());
        for &(a, k) in &tap.plane {
            if k % pp != 0 {
                return None;
            }
            plane.push((a, k / pp * xp));
        }
        let (q, at) = (tap.c0.div_euclid(pp), tap.c0.rem_euclid(pp));
        let (kr, kc) = (at / self.wp, at % self.wp);
        // Every read stays in its padded row and plane.
        if kc + tap.step * (cols as i64 - 1) >= self.wp || kr + sh * (rows as i64 - 1) >= self.hp {
            return None;
        }
        let mut guards = tap.guards.clone();
        guards.push((kr - self.pt, sh, 0, 0, self.h));
        guards.push((kc - self.pl, 0, tap.step, 0, self.w));
        Some(TapLoad {
            source: self.source,
            c0: q * xp + (kr - self.pt) * self.w + (kc - self.pl),
            plane,
            row_step: sh * self.w,
            step: tap.step,
            guards,
        })
    }
}

/// The masks of a flat stencil: per tap, per vector of the plane, its valid lanes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Flat {
    /// Vectors per plane.
    vectors: usize,
    /// `t * vectors + j`: the lanes of vector `j` tap `t` reads (spread at stride 2).
    masks: Vec<u32>,
    /// The lanes of the plane's last vector.
    last: u16,
}

/// One row of one tap (see [`Stencil::row_taps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowTap {
    offset: i64,
    mask: u32,
    /// The masks of the row's first and last vectors, when every vector between them
    /// has all its lanes valid (its loads then need no mask); else 0.
    first: u32,
    last: u32,
    /// Rows from this one on (this one included) with the same masks: a block of rows
    /// within them reads each row its tap's `row_step` floats after the one before with
    /// the same masks, looked up once.
    run: u32,
}

/// Vectors of output computed together, their accumulators in registers: `rows` whole
/// rows of a plane whose rows are short (a 7x7 plane's seven rows; [`ROW_BLOCK`] vectors
/// at most), or up to [`BLOCK`] vectors of one long row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockOf {
    /// Its first output element within the plane (blocks tile the plane in order).
    first: usize,
    /// Its first row.
    row: usize,
    /// Its rows (at most [`ROW_BLOCK`] vectors in all).
    rows: usize,
    /// Its first vector within each row.
    v0: usize,
    /// Its vectors per row.
    vectors: usize,
}

/// A stencil kernel split off a kernel ([`split`]).
#[derive(Clone, Debug)]
pub struct Split {
    /// The stencil.
    pub stencil: Stencil,
    /// The kernel the stencil computes: the sum alone, stored at each point's element.
    pub kernel: Kernel,
    /// The rest of the kernel, reading the sum from the output (`None`: the sum is the
    /// result).
    pub epilogue: Option<Kernel>,
}

/// A shifted-row load: `x[c0 + Σ a * plane_var + row_step * oh + step * ow]` under
/// guards `lo <= c + a_row * oh + a_col * ow < hi`.
#[derive(Clone, Debug)]
struct TapLoad {
    source: BufferId,
    c0: i64,
    plane: Vec<(usize, i64)>,
    row_step: i64,
    step: i64,
    guards: Vec<(i64, i64, i64, i64, i64)>,
}

/// A coefficient as recognized: what it is, and (for a load) its index's offset and
/// plane terms.
type CoefAt = (Coef, i64, Vec<(usize, i64)>);

/// The view of a kernel's variables that recognition needs.
struct Axes<'a> {
    domain: &'a [usize],
    ext: ferrite_ir::loops::Extents,
    buffers: &'a [Buffer],
}

impl Axes<'_> {
    fn rank(&self) -> usize {
        self.domain.len()
    }

    /// An outer variable's role: `Some(Some(a))` the plane axis `a`, `Some(None)` a
    /// variable that is always 0 (extent 1), `None` the row or column variable or any
    /// other kind.
    fn plane_axis(&self, v: Var) -> Option<Option<usize>> {
        let r = self.rank();
        if v.kind != VarKind::Outer || v.index as usize >= r - 2 {
            return None;
        }
        let a = v.index as usize;
        Some((self.domain[a] > 1).then_some(a))
    }

    fn is_f32(&self, b: BufferId) -> bool {
        self.buffers
            .get(b.index())
            .is_some_and(|b| b.ty.dtype == DType::F32)
    }

    /// A shifted-row load whose guarded lanes read `fill` (0 for a sum's tap, `-inf`
    /// for a maximum's).
    fn tap_load(&self, node: &ExprNode, fill: f64) -> Option<TapLoad> {
        let ExprOp::Load(l) = &node.op else {
            return None;
        };
        if node.dtype != DType::F32
            || !self.is_f32(l.buffer)
            || (!l.guard.is_empty() && l.other != Value::Float(fill))
        {
            return None;
        }
        let r = self.rank();
        let (hv, wv) = (Var::outer(r - 2), Var::outer(r - 1));
        let (c0, terms) = l.index.as_affine(&self.ext)?;
        let (mut row_step, mut step, mut plane) = (0, 0, Vec::new());
        for (v, a) in terms {
            if v == wv {
                step = a;
            } else if v == hv {
                row_step = a;
            } else if let Some(p) = self.plane_axis(v)?.map(|p| (p, a)) {
                plane.push(p);
            }
        }
        if !(1..=2).contains(&step) {
            return None;
        }
        let mut guards = Vec::with_capacity(l.guard.len());
        for b in &l.guard {
            let (c, terms) = b.expr.as_affine(&self.ext)?;
            let (mut ar, mut ac) = (0, 0);
            for (v, a) in terms {
                if v == wv {
                    ac = a;
                } else if v == hv {
                    ar = a;
                } else if self.plane_axis(v)?.is_some() {
                    // A guard that depends on the plane: not one interval per row.
                    return None;
                }
            }
            guards.push((c, ar, ac, b.lo, b.hi));
        }
        Some(TapLoad {
            source: l.buffer,
            c0,
            plane,
            row_step,
            step,
            guards,
        })
    }

    /// A coefficient: a constant, or an unguarded load whose index depends on the plane
    /// only (its offset and plane terms).
    fn coef(&self, node: &ExprNode) -> Option<CoefAt> {
        if node.dtype != DType::F32 {
            return None;
        }
        match &node.op {
            ExprOp::Const(Value::Float(v)) => Some((Coef::Const(*v as f32), 0, Vec::new())),
            ExprOp::Load(l) if l.guard.is_empty() && self.is_f32(l.buffer) => {
                let (c0, terms) = l.index.as_affine(&self.ext)?;
                let mut plane = Vec::new();
                for (v, a) in terms {
                    if let Some(p) = self.plane_axis(v)? {
                        plane.push((p, a));
                    }
                }
                Some((Coef::Buffer(l.buffer), c0, plane))
            }
            _ => None,
        }
    }

    /// The tap and coefficient of a product node, either way round.
    fn term(&self, body: &Block, node: &ExprNode) -> Option<(TapLoad, CoefAt)> {
        let ExprOp::Binary(BinaryOp::Mul, a, b) = node.op else {
            return None;
        };
        if node.dtype != DType::F32 {
            return None;
        }
        let (na, nb) = (body.get(a)?, body.get(b)?);
        let pick = |t: &ExprNode, c: &ExprNode| {
            let tap = self.tap_load(t, 0.0)?;
            let (coef, c0, plane) = self.coef(c)?;
            Some((tap, (coef, c0, plane)))
        };
        pick(na, nb).or_else(|| pick(nb, na))
    }
}

/// Splits `kernel` into a stencil and its epilogue when it holds one (see the module
/// docs); `None` otherwise.
pub fn split(kernel: &Kernel, buffers: &[Buffer]) -> Option<Split> {
    split_through(kernel, buffers, None)
}

/// [`split`], the taps reading `pad`'s padded buffer read instead its source through
/// the padding (guarded, zero outside), so that the pad kernel need not run.
pub fn split_through(kernel: &Kernel, buffers: &[Buffer], pad: Option<&Pad>) -> Option<Split> {
    if kernel.gemm.is_some() || kernel.stages.len() != 1 {
        return None;
    }
    let stage = &kernel.stages[0];
    let Stage::Store {
        domain: sd,
        body,
        stores,
    } = stage
    else {
        return None;
    };
    let r = kernel.domain.len();
    if !sd.is_empty() || stores.len() != 1 || r < 2 {
        return None;
    }
    let (rows, cols) = (kernel.domain[r - 2], kernel.domain[r - 1]);
    let planes: usize = kernel.domain[..r - 2].iter().product();
    let numel = planes.checked_mul(rows)?.checked_mul(cols)?;
    if numel == 0 {
        return None;
    }
    let axes = Axes {
        domain: &kernel.domain,
        ext: stage.extents(&kernel.domain),
        buffers,
    };
    let store = &stores[0];
    let out = store.buffer;
    let obuf = buffers.get(out.index())?;
    if obuf.ty.dtype != DType::F32 || obuf.ty.numel() != numel {
        return None;
    }
    let strides = contiguous_strides(&kernel.domain);
    let flat = IndexExpr::Sum(
        strides
            .iter()
            .enumerate()
            .map(|(a, &s)| IndexExpr::Var(Var::outer(a)) * s as i64)
            .collect(),
    )
    .simplify(&axes.ext);
    if store.index.simplify(&axes.ext) != flat
        || body
            .nodes
            .iter()
            .any(|n| matches!(&n.op, ExprOp::Load(l) if l.buffer == out))
    {
        return None;
    }

    // Per node: how many taps the sum it computes has (0: not such a sum), and for a
    // product, its tap and coefficient.
    let mut count = vec![0usize; body.nodes.len()];
    let mut term_of = vec![None; body.nodes.len()];
    for (i, node) in body.nodes.iter().enumerate() {
        count[i] = match node.op {
            ExprOp::Binary(BinaryOp::Mul, ..) => {
                term_of[i] = axes.term(body, node);
                usize::from(term_of[i].is_some())
            }
            ExprOp::Binary(BinaryOp::Add, a, b) if node.dtype == DType::F32 => {
                match (count.get(a.index()), count.get(b.index())) {
                    (Some(&x), Some(&y)) if x > 0 && y > 0 => x + y,
                    _ => 0,
                }
            }
            _ => 0,
        };
    }
    // Likewise per node: how many taps the maximum it computes has, each tap a shifted
    // load whose guarded lanes read -inf (a max pooling's window).
    // Only the operands of a maximum are looked at as taps.
    let mut maxes = vec![0usize; body.nodes.len()];
    let mut leaf: Vec<Option<TapLoad>> = vec![None; body.nodes.len()];
    for (i, node) in body.nodes.iter().enumerate() {
        let ExprOp::Binary(BinaryOp::Maximum, a, b) = node.op else {
            continue;
        };
        if node.dtype != DType::F32 {
            continue;
        }
        let mut taps = 0;
        for x in [a, b] {
            let m = maxes.get(x.index()).copied().unwrap_or(0);
            if m > 0 {
                taps += m;
                continue;
            }
            if leaf.get(x.index()).is_some_and(Option::is_none) {
                leaf[x.index()] = axes.tap_load(body.get(x)?, f64::NEG_INFINITY);
            }
            match leaf.get(x.index()) {
                Some(Some(_)) => taps += 1,
                _ => {
                    taps = 0;
                    break;
                }
            }
        }
        maxes[i] = taps;
    }
    // The largest sum (or maximum) the stored value needs.
    let live = crate::plan::analysis::live_nodes(stage);
    let largest = |count: &[usize]| {
        (0..body.nodes.len())
            .filter(|&i| live[i] && count[i] >= MIN_TAPS)
            .max_by_key(|&i| (count[i], i))
    };
    let (combine, sum) = match (largest(&count), largest(&maxes)) {
        (Some(s), Some(m)) if maxes[m] > count[s] => (Combine::Max, m),
        (Some(s), _) => (Combine::Sum, s),
        (None, Some(m)) => (Combine::Max, m),
        (None, None) => return None,
    };
    let taps_n = match combine {
        Combine::Sum => count[sum],
        Combine::Max => maxes[sum],
    };
    if taps_n > MAX_TAPS {
        return None;
    }
    // Its terms, left to right.
    let mut terms = Vec::with_capacity(taps_n);
    let mut stack = vec![ExprRef(sum as u32)];
    while let Some(e) = stack.pop() {
        let node = body.get(e)?;
        match (combine, &node.op) {
            (Combine::Sum, &ExprOp::Binary(BinaryOp::Add, a, b)) => {
                stack.push(b);
                stack.push(a);
            }
            (Combine::Max, &ExprOp::Binary(BinaryOp::Maximum, a, b))
                if maxes.get(e.index()).is_some_and(|&m| m > 0) =>
            {
                stack.push(b);
                stack.push(a);
            }
            (Combine::Sum, _) => terms.push(term_of.get(e.index())?.clone()?),
            (Combine::Max, _) => {
                let tap = leaf.get(e.index())?.clone()?;
                terms.push((tap, (Coef::Const(1.0), 0, Vec::new())));
            }
        }
    }
    // A maximum is a window of one source (a pooling), not the pointwise maximum of
    // several buffers, which the generated code runs as well.
    if combine == Combine::Max && terms.iter().any(|(t, _)| t.source != terms[0].0.source) {
        return None;
    }
    if let Some(pad) = pad {
        // A pad's zeros are not a maximum's -inf.
        if combine == Combine::Max {
            return None;
        }
        for (tap, _) in &mut terms {
            *tap = pad.map(tap, rows, cols)?;
        }
    }
    let step = terms.first()?.0.step;
    if terms.len() != taps_n || terms.iter().any(|t| t.0.step != step) {
        return None;
    }
    let tn = terms.len();
    if planes.checked_mul(tn)? > MAX_TABLE || rows.checked_mul(tn)? > MAX_TABLE {
        return None;
    }
    // Flat: every tap reads its plane as one run (`row_step == step * cols`: a stride-1
    // conv whose output is as wide as its input), so vectors may span rows.
    let flat_vectors = numel.div_ceil(planes).div_ceil(LANES);
    let flat = terms.iter().all(|(t, _)| t.row_step == step * cols as i64)
        && flat_vectors.checked_mul(tn)? <= MAX_TABLE
        && cols <= MAX_FLAT_COLS;
    if !flat && cols < MIN_COLS {
        return None;
    }
    let len = |b: BufferId| buffers.get(b.index()).map(|b| b.ty.numel() as i64);

    // Per plane and tap: the source base and the coefficient's index.
    let outer = &kernel.domain[..r - 2];
    // The plane's coordinates, innermost first (the planes' order).
    let mut point = vec![0usize; outer.len()];
    let mut base = Vec::with_capacity(planes * tn);
    let mut coef_at = Vec::with_capacity(planes * tn);
    let at = |c0: i64, plane: &[(usize, i64)], point: &[usize]| {
        plane.iter().try_fold(c0, |s, &(a, k)| {
            s.checked_add(k.checked_mul(point[point.len() - 1 - a] as i64)?)
        })
    };
    for _ in 0..planes {
        for (tap, (coef, c0, plane)) in &terms {
            base.push(at(tap.c0, &tap.plane, &point)?);
            match coef {
                Coef::Const(_) => coef_at.push(0),
                Coef::Buffer(b) => {
                    let i = at(*c0, plane, &point)?;
                    if i < 0 || i >= len(*b)? {
                        return None;
                    }
                    coef_at.push(i as usize);
                }
            }
        }
        crate::taps::odometer(&mut point, outer.iter().rev().copied());
    }

    // Per tap and row: the valid columns, as mask sets.
    let vectors = cols.div_ceil(LANES);
    let mut set_by_interval: HashMap<(i64, i64), u32> = HashMap::new();
    let mut masks = Vec::new();
    let mut intervals = Vec::with_capacity(tn * rows);
    let mut row_taps = vec![
        RowTap {
            offset: 0,
            mask: 0,
            first: 0,
            last: 0,
            run: 1,
        };
        tn * rows
    ];
    for (t, (tap, ..)) in terms.iter().enumerate() {
        for oh in 0..rows {
            let (mut lo, mut hi) = (0i64, cols as i64);
            for &(c, ar, ac, glo, ghi) in &tap.guards {
                let (l, h) = crate::taps::interval(c + ar * oh as i64, ac, glo, ghi, cols as i64);
                lo = lo.max(l);
                hi = hi.min(h);
            }
            if hi <= lo {
                (lo, hi) = (0, 0);
            }
            intervals.push((lo, hi));
            let next = masks.len() as u32;
            let set = *set_by_interval.entry((lo, hi)).or_insert(next);
            if set == next {
                for v in 0..vectors as i64 {
                    let (a, b) = ((lo - v * 16).clamp(0, 16), (hi - v * 16).clamp(0, 16));
                    let m = if b > a {
                        ((1u32 << b) - 1) & !((1u32 << a) - 1)
                    } else {
                        0
                    };
                    masks.push(if step == 2 { spread(m) } else { m });
                }
            }
            // Vectors strictly inside the valid columns need no mask.
            let inner = (1..vectors.saturating_sub(1))
                .all(|v| lo <= (v * LANES) as i64 && ((v + 1) * LANES) as i64 <= hi);
            let (first, last) = if inner && vectors >= 2 {
                let m = |v: usize| masks[set as usize + v];
                (m(0), m(vectors - 1))
            } else {
                (0, 0)
            };
            row_taps[oh * tn + t] = RowTap {
                offset: tap.row_step.checked_mul(oh as i64)?,
                mask: set,
                first,
                last,
                run: 1,
            };
        }
        for oh in (0..rows.saturating_sub(1)).rev() {
            let (this, next) = (row_taps[oh * tn + t], row_taps[(oh + 1) * tn + t]);
            if (this.mask, this.first, this.last) == (next.mask, next.first, next.last) {
                row_taps[oh * tn + t].run = next.run.saturating_add(1);
            }
        }
    }
    if u32::try_from(masks.len()).is_err() || u32::try_from(rows * cols).is_err() {
        return None;
    }
    // Every element a valid lane reads lies in its source.
    if planes.checked_mul(tn)?.checked_mul(rows)? > MAX_CHECK {
        return None;
    }
    for p in 0..planes {
        for (t, (tap, ..)) in terms.iter().enumerate() {
            let n = len(tap.source)?;
            let b = base[p * tn + t];
            for oh in 0..rows {
                let (lo, hi) = intervals[t * rows + oh];
                if hi <= lo {
                    continue;
                }
                let row = b.checked_add(tap.row_step.checked_mul(oh as i64)?)?;
                let first = row.checked_add(step * lo)?;
                let last = row.checked_add(step * (hi - 1))?;
                if first < 0 || last >= n {
                    return None;
                }
            }
        }
    }
    let (blocks, flat) = if flat {
        // Per tap and vector of the plane: its valid lanes (the row's interval at each).
        let plane = rows * cols;
        let mut masks = vec![0u32; tn * flat_vectors];
        for t in 0..tn {
            for q in 0..plane {
                let (oh, ow) = (q / cols, (q % cols) as i64);
                let (lo, hi) = intervals[t * rows + oh];
                if lo <= ow && ow < hi {
                    masks[t * flat_vectors + q / LANES] |= 1 << (q % LANES);
                }
            }
        }
        if step == 2 {
            for m in &mut masks {
                *m = spread(*m);
            }
        }
        let blocks = (0..flat_vectors)
            .step_by(BLOCK)
            .map(|j| BlockOf {
                first: j * LANES,
                row: 0,
                rows: 1,
                v0: j,
                vectors: (flat_vectors - j).min(BLOCK),
            })
            .collect();
        let last = plane - (flat_vectors - 1) * LANES;
        let flat = Flat {
            vectors: flat_vectors,
            masks,
            last: ((1u32 << last) - 1) as u16,
        };
        (blocks, Some(flat))
    } else {
        (blocks(rows, cols, step as usize), None)
    };
    let out_masks = (0..vectors)
        .map(|v| ((1u32 << (cols - v * LANES).min(LANES)) - 1) as u16)
        .collect();
    let stencil = Stencil {
        out,
        planes,
        rows,
        cols,
        step: step as usize,
        combine,
        taps: terms
            .iter()
            .map(|(tap, (coef, ..))| Tap {
                source: tap.source,
                row_step: tap.row_step,
                coef: *coef,
            })
            .collect(),
        epilogue_per_rows: false,
        base,
        coef_at,
        row_taps,
        masks,
        blocks,
        out_masks,
        flat,
        through: pad.map(|p| p.padded),
    };

    // The stencil's kernel: the sum alone.
    let mut sum_body = body.clone();
    let map = sum_body.retain_live(&[ExprRef(sum as u32)]);
    let value = map.get(sum).copied().flatten()?;
    let stencil_kernel = Kernel {
        stages: vec![Stage::Store {
            domain: vec![],
            body: sum_body,
            stores: vec![StoreOp {
                buffer: out,
                index: store.index.clone(),
                value,
            }],
        }],
        reads: vec![],
        writes: vec![],
        ..kernel.clone()
    };
    // The epilogue: the sum read back from the output.
    let epilogue = (store.value.index() != sum).then(|| {
        let mut e_body = body.clone();
        e_body.nodes[sum] = ExprNode {
            dtype: DType::F32,
            op: ExprOp::Load(Load {
                buffer: out,
                index: store.index.clone(),
                guard: vec![],
                other: Value::Float(0.0),
            }),
        };
        let map = e_body.retain_live(&[store.value]);
        let value = map.get(store.value.index()).copied().flatten()?;
        Some(Kernel {
            name: format!("{}_epilogue", kernel.name),
            stages: vec![Stage::Store {
                domain: vec![],
                body: e_body,
                stores: vec![StoreOp {
                    buffer: out,
                    index: store.index.clone(),
                    value,
                }],
            }],
            reads: vec![],
            writes: vec![],
            ..kernel.clone()
        })
    });
    let epilogue = match epilogue {
        Some(e) => Some(e?),
        None => None,
    };
    Some(Split {
        stencil,
        kernel: stencil_kernel,
        epilogue,
    })
}

/// The blocks of a plane of `rows x cols` (see [`BlockOf`]).
fn blocks(rows: usize, cols: usize, step: usize) -> Vec<BlockOf> {
    let vectors = cols.div_ceil(LANES);
    let mut blocks = Vec::new();
    if vectors >= BLOCK {
        for row in 0..rows {
            for v0 in (0..vectors).step_by(BLOCK) {
                blocks.push(BlockOf {
                    first: row * cols + v0 * LANES,
                    row,
                    rows: 1,
                    v0,
                    vectors: (vectors - v0).min(BLOCK),
                });
            }
        }
    } else {
        let per = ROW_BLOCK[usize::from(step == 2)] / vectors;
        for row in (0..rows).step_by(per) {
            blocks.push(BlockOf {
                first: row * cols,
                row,
                rows: (rows - row).min(per),
                v0: 0,
                vectors,
            });
        }
    }
    blocks
}

/// Bit `i` of `m` (16 bits) to bit `2i`.
fn spread(m: u32) -> u32 {
    let mut x = m & 0xFFFF;
    x = (x | (x << 8)) & 0x00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333;
    (x | (x << 1)) & 0x5555_5555
}

/// Where one run's buffers are (addresses of `f32` arrays, shared across threads): the
/// output, and per tap its source and coefficient buffer (0 for a constant), each of the
/// length the program declares.
#[derive(Clone, Debug)]
pub struct Pointers {
    /// The output (`planes * rows * cols` floats).
    pub out: usize,
    /// Per tap: its source.
    pub sources: Vec<usize>,
    /// Per tap: its coefficient buffer, or 0.
    pub coefs: Vec<usize>,
}

/// What a block's loop reads besides the block: per tap, where output `(0, 0)` of the
/// plane reads (the pointer may lie outside the source; only valid lanes are read) and
/// its coefficient; the row table and the masks.
struct Plane<'a> {
    srcs: &'a [*const f32],
    coefs: &'a [f32],
    /// Per tap: its distance between rows ([`Tap::row_step`]).
    row_steps: &'a [i64],
    row_taps: &'a [RowTap],
    masks: &'a [u32],
    out_masks: &'a [u16],
    cols: usize,
    out: *mut f32,
}

impl Stencil {
    /// The units [`Stencil::run_units`] takes: blocks of output vectors, `planes *
    /// blocks per plane`, in output order.
    pub fn units(&self) -> usize {
        self.planes * self.blocks.len()
    }

    /// Multiply-adds per unit, about (for splitting work).
    pub fn work_per_unit(&self) -> usize {
        (self.rows * self.cols * self.taps.len()).div_ceil(self.blocks.len().max(1))
    }

    /// The first output element of unit `u` (`units()` gives the output's length): the
    /// units `a..b` write the elements `point(a)..point(b)` and no other.
    pub fn point(&self, u: usize) -> usize {
        let nb = self.blocks.len();
        let plane = self.rows * self.cols;
        match self.blocks.get(u % nb.max(1)) {
            Some(b) if u < self.units() => (u / nb) * plane + b.first,
            _ => self.planes * plane,
        }
    }

    /// One line for plans and reports.
    pub fn describe(&self) -> String {
        format!(
            "direct stencil f32: {}{} taps over {} planes of {}x{} into {}{}{}{}",
            match self.combine {
                Combine::Sum => "",
                Combine::Max => "maximum of ",
            },
            self.taps.len(),
            self.planes,
            self.rows,
            self.cols,
            self.out,
            if self.step == 2 {
                ", every other column"
            } else {
                ""
            },
            if self.flat.is_some() {
                ", vectors across rows"
            } else {
                ""
            },
            match self.through {
                Some(p) => format!(
                    ", reading {} through the padding of {p}",
                    self.taps[0].source
                ),
                None => String::new(),
            }
        )
    }

    /// Computes the output units `units` ([`Stencil::units`]), with AVX-512 when
    /// `avx512` (which the CPU must have: [`vector_loop`]), else scalar code giving the
    /// same bits.
    ///
    /// # Safety
    /// `ptrs` points at buffers of the lengths this stencil was recognized for (its
    /// reads were proved inside them then), the output not overlapping any source or
    /// coefficient buffer; no other thread touches the output elements of `units`
    /// while this runs.
    pub unsafe fn run_units(&self, ptrs: &Pointers, units: Range<usize>, avx512: bool) {
        let max = self.combine == Combine::Max;
        let tn = self.taps.len();
        let nb = self.blocks.len();
        let mut coefs = [0f32; MAX_TAPS];
        let mut srcs = [std::ptr::null::<f32>(); MAX_TAPS];
        let mut row_steps = [0i64; MAX_TAPS];
        for (step, tap) in row_steps.iter_mut().zip(&self.taps) {
            *step = tap.row_step;
        }
        let mut plane = usize::MAX;
        for u in units {
            let (p, b) = (u / nb, u % nb);
            if p != plane {
                plane = p;
                for (t, tap) in self.taps.iter().enumerate() {
                    coefs[t] = match tap.coef {
                        Coef::Const(c) => c,
                        // SAFETY: the index was checked against the buffer's length.
                        Coef::Buffer(_) => unsafe {
                            *(ptrs.coefs[t] as *const f32).add(self.coef_at[p * tn + t])
                        },
                    };
                    srcs[t] = (ptrs.sources[t] as *const f32)
                        .wrapping_offset(self.base[p * tn + t] as isize);
                }
            }
            let at = Plane {
                srcs: &srcs[..tn],
                coefs: &coefs[..tn],
                row_steps: &row_steps[..tn],
                row_taps: &self.row_taps,
                masks: &self.masks,
                out_masks: &self.out_masks,
                cols: self.cols,
                out: (ptrs.out as *mut f32).wrapping_add(p * self.rows * self.cols),
            };
            let block = self.blocks[b];
            if let Some(flat) = &self.flat {
                // SAFETY: as this function's contract; the block's vectors index the
                // flat masks.
                unsafe {
                    #[cfg(target_arch = "x86_64")]
                    if avx512 {
                        avx512::flat_block(&at, flat, block, self.step, max);
                        continue;
                    }
                    scalar_flat_block(&at, flat, block, self.step, max);
                }
                continue;
            }
            // SAFETY: as this function's contract; the block's rows and vectors index
            // the tables they were built with.
            unsafe {
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    avx512::block(&at, block, self.step, max);
                    continue;
                }
                scalar_block(&at, block, self.step, max);
            }
        }
    }
}

/// IEEE 754-2019 `maximum` as the vector loop computes it: a NaN operand gives that NaN
/// quieted (the first's if both are, as `acc + x` does), two zeros `+0` unless both are
/// `-0`.
fn range_max(acc: f32, x: f32) -> f32 {
    let quiet = |v: f32| f32::from_bits(v.to_bits() | 0x0040_0000);
    if acc.is_nan() {
        quiet(acc)
    } else if x.is_nan() {
        quiet(x)
    } else if acc == x {
        f32::from_bits(acc.to_bits() & x.to_bits())
    } else {
        acc.max(x)
    }
}

/// A tap's contribution to an accumulator: one FMA (sum) or one [`range_max`].
fn combine(max: bool, acc: f32, x: f32, c: f32) -> f32 {
    if max {
        range_max(acc, x)
    } else {
        x.mul_add(c, acc)
    }
}

/// What lanes outside a tap's interval read, and the accumulators' start.
fn fill(max: bool) -> f32 {
    if max {
        f32::NEG_INFINITY
    } else {
        0.0
    }
}

/// Whether this CPU runs the AVX-512 loop: AVX-512F and AVX-512DQ (a maximum is
/// `vrangeps`), which every AVX-512 core but the Xeon Phi has. Else the scalar loop runs.
pub fn vector_loop() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::wide::Isa::Avx512.supported() && std::arch::is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The scalar loop: lane by lane what the vector loop does, with the same FMAs (or
/// maxima) in the same order.
///
/// # Safety
/// As [`Stencil::run_units`].
unsafe fn scalar_block(at: &Plane<'_>, block: BlockOf, step: usize, max: bool) {
    let tn = at.srcs.len();
    let mut acc = [fill(max); ROW_BLOCK[0] * LANES];
    for (t, (&src, &c)) in at.srcs.iter().zip(at.coefs).enumerate() {
        for r in 0..block.rows {
            let rt = at.row_taps[(block.row + r) * tn + t];
            let row = src.wrapping_offset(rt.offset as isize);
            for v in 0..block.vectors {
                let m = at.masks[rt.mask as usize + block.v0 + v];
                let a = &mut acc[(r * block.vectors + v) * LANES..][..LANES];
                for (i, a) in a.iter_mut().enumerate() {
                    let bit = if step == 2 { 2 * i } else { i };
                    let x = if m >> bit & 1 == 1 {
                        // SAFETY: a valid lane, proved in bounds.
                        unsafe { *row.wrapping_add(step * ((block.v0 + v) * LANES + i)) }
                    } else {
                        fill(max)
                    };
                    *a = combine(max, *a, x, c);
                }
            }
        }
    }
    for r in 0..block.rows {
        for v in 0..block.vectors {
            let lanes = at.out_masks[block.v0 + v];
            let to = (block.row + r) * at.cols + (block.v0 + v) * LANES;
            for i in 0..LANES {
                if lanes >> i & 1 == 1 {
                    // SAFETY: a lane of the plane's output.
                    unsafe { *at.out.add(to + i) = acc[(r * block.vectors + v) * LANES + i] };
                }
            }
        }
    }
}

/// [`scalar_block`] for a flat stencil: the block's vectors run along the whole plane.
///
/// # Safety
/// As [`Stencil::run_units`].
unsafe fn scalar_flat_block(at: &Plane<'_>, flat: &Flat, block: BlockOf, step: usize, max: bool) {
    let mut acc = [fill(max); BLOCK * LANES];
    for (t, (&src, &c)) in at.srcs.iter().zip(at.coefs).enumerate() {
        for v in 0..block.vectors {
            let j = block.v0 + v;
            let m = flat.masks[t * flat.vectors + j];
            for i in 0..LANES {
                let bit = if step == 2 { 2 * i } else { i };
                let x = if m >> bit & 1 == 1 {
                    // SAFETY: a valid lane, proved in bounds.
                    unsafe { *src.wrapping_add(step * (j * LANES + i)) }
                } else {
                    fill(max)
                };
                acc[v * LANES + i] = combine(max, acc[v * LANES + i], x, c);
            }
        }
    }
    for v in 0..block.vectors {
        let j = block.v0 + v;
        let lanes = if j + 1 == flat.vectors {
            flat.last
        } else {
            u16::MAX
        };
        for i in 0..LANES {
            if lanes >> i & 1 == 1 {
                // SAFETY: a lane of the plane's output.
                unsafe { *at.out.add(j * LANES + i) = acc[v * LANES + i] };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{BlockOf, Flat, Plane, LANES};
    use std::arch::x86_64::*;

    /// A tap's masked load: invalid lanes read 0 (a sum) or -inf (a maximum, whose
    /// `fill` that is).
    macro_rules! load {
        ($max:expr, $fill:expr, $m:expr, $p:expr) => {
            if $max {
                _mm512_mask_loadu_ps($fill, $m, $p)
            } else {
                _mm512_maskz_loadu_ps($m, $p)
            }
        };
    }

    /// A tap's contribution: `acc + x * c`, or IEEE `maximum(acc, x)`: `vrangeps` (imm8
    /// 0b01 the maximum, `0b01 << 2` its sign from the comparison, so `-0 < +0`), which
    /// returns the other operand for a quiet NaN, then `acc + x` (the first NaN, quieted)
    /// in the lanes where either is NaN.
    macro_rules! combine {
        ($max:expr, $acc:expr, $x:expr, $c:expr) => {
            if $max {
                let (acc, x) = ($acc, $x);
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(acc, x);
                _mm512_mask_add_ps(_mm512_range_ps::<0b0101>(acc, x), nan, acc, x)
            } else {
                _mm512_fmadd_ps($x, $c, $acc)
            }
        };
    }

    /// One block (see [`super::scalar_block`]).
    ///
    /// # Safety
    /// As [`super::scalar_block`], and the CPU has AVX-512F and AVX-512DQ.
    pub(super) unsafe fn block(at: &Plane<'_>, b: BlockOf, step: usize, max: bool) {
        macro_rules! shapes {
            ($(($r:literal, $v:literal)),*) => {
                match (b.rows, b.vectors, step, max) {
                    $(
                        ($r, $v, 1, false) => run::<$r, $v, 1, false>(at, b),
                        ($r, $v, _, false) => run::<$r, $v, 2, false>(at, b),
                        ($r, $v, 1, true) => run::<$r, $v, 1, true>(at, b),
                        ($r, $v, _, true) => run::<$r, $v, 2, true>(at, b),
                    )*
                    _ => unreachable!("a block of {} rows of {} vectors", b.rows, b.vectors),
                }
            };
        }
        // SAFETY: as this function's contract.
        unsafe {
            shapes!(
                (1, 1),
                (2, 1),
                (3, 1),
                (4, 1),
                (5, 1),
                (6, 1),
                (7, 1),
                (8, 1),
                (9, 1),
                (10, 1),
                (11, 1),
                (12, 1),
                (13, 1),
                (14, 1),
                (15, 1),
                (16, 1),
                (1, 2),
                (2, 2),
                (3, 2),
                (4, 2),
                (5, 2),
                (6, 2),
                (7, 2),
                (8, 2),
                (1, 3),
                (2, 3),
                (3, 3),
                (4, 3),
                (5, 3),
                (1, 4),
                (2, 4),
                (3, 4),
                (4, 4),
                (1, 5),
                (2, 5),
                (3, 5),
                (1, 6),
                (2, 6),
                (1, 7),
                (2, 7),
                (1, 8)
            )
        }
    }

    /// One block of a flat stencil (see [`super::scalar_flat_block`]).
    ///
    /// # Safety
    /// As [`super::scalar_flat_block`], and the CPU has AVX-512F and AVX-512DQ.
    pub(super) unsafe fn flat_block(
        at: &Plane<'_>,
        flat: &Flat,
        b: BlockOf,
        step: usize,
        max: bool,
    ) {
        macro_rules! widths {
            ($($v:literal),*) => {
                match (b.vectors.min(8), step, max) {
                    $(
                        ($v, 1, false) => flat_run::<$v, 1, false>(at, flat, b),
                        ($v, _, false) => flat_run::<$v, 2, false>(at, flat, b),
                        ($v, 1, true) => flat_run::<$v, 1, true>(at, flat, b),
                        ($v, _, true) => flat_run::<$v, 2, true>(at, flat, b),
                    )*
                    _ => unreachable!("a flat block of {} vectors", b.vectors),
                }
            };
        }
        // SAFETY: as this function's contract.
        unsafe { widths!(1, 2, 3, 4, 5, 6, 7, 8) }
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn flat_run<const V: usize, const STEP: usize, const MAX: bool>(
        at: &Plane<'_>,
        flat: &Flat,
        b: BlockOf,
    ) {
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let fill = _mm512_set1_ps(super::fill(MAX));
        let mut acc = [fill; V];
        for (t, (&src, &c)) in at.srcs.iter().zip(at.coefs).enumerate() {
            let c = _mm512_set1_ps(c);
            // SAFETY: the block's vectors have masks (it was built with the table);
            // masked lanes are not accessed, valid ones were proved in bounds.
            unsafe {
                let masks = flat.masks.as_ptr().add(t * flat.vectors + b.v0);
                let p = src.wrapping_add(STEP * LANES * b.v0);
                for (v, acc) in acc.iter_mut().enumerate() {
                    let m = *masks.add(v);
                    let p = p.wrapping_add(STEP * LANES * v);
                    let x = if STEP == 1 {
                        load!(MAX, fill, m as __mmask16, p)
                    } else {
                        let lo = load!(MAX, fill, m as __mmask16, p);
                        let hi = load!(MAX, fill, (m >> 16) as __mmask16, p.wrapping_add(16));
                        _mm512_permutex2var_ps(lo, evens, hi)
                    };
                    *acc = combine!(MAX, *acc, x, c);
                }
            }
        }
        for (v, acc) in acc.iter().enumerate() {
            let j = b.v0 + v;
            let lanes = if j + 1 == flat.vectors {
                flat.last
            } else {
                u16::MAX
            };
            // SAFETY: the vector's lanes are the plane's output.
            unsafe { _mm512_mask_storeu_ps(at.out.add(j * LANES), lanes, *acc) };
        }
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn run<const R: usize, const V: usize, const STEP: usize, const MAX: bool>(
        at: &Plane<'_>,
        b: BlockOf,
    ) {
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let fill = _mm512_set1_ps(super::fill(MAX));
        let tn = at.srcs.len();
        // The block holds whole rows (a row's first and last vectors are its own).
        let whole = b.v0 == 0 && b.vectors == at.out_masks.len();
        let mut acc = [[fill; V]; R];
        // One whole row's vectors from `p`: masks on its first and last only, the inner
        // ones valid throughout (at stride 2, an inner vector's last odd element is not
        // read: it may lie past the source).
        macro_rules! whole_row {
            ($acc:expr, $p:expr, $first:expr, $last:expr, $c:expr) => {
                for (v, acc) in $acc.iter_mut().enumerate() {
                    let p = $p.wrapping_add(STEP * LANES * v);
                    let m = if v == 0 {
                        $first
                    } else if v == V - 1 {
                        $last
                    } else {
                        u32::MAX >> 1
                    };
                    let x = if STEP == 1 {
                        if v == 0 || v == V - 1 {
                            load!(MAX, fill, m as __mmask16, p)
                        } else {
                            _mm512_loadu_ps(p)
                        }
                    } else {
                        let lo = if v == 0 || v == V - 1 {
                            load!(MAX, fill, m as __mmask16, p)
                        } else {
                            _mm512_loadu_ps(p)
                        };
                        let hi = load!(MAX, fill, (m >> 16) as __mmask16, p.wrapping_add(16));
                        _mm512_permutex2var_ps(lo, evens, hi)
                    };
                    *acc = combine!(MAX, *acc, x, $c);
                }
            };
        }
        for (t, (&src, &c)) in at.srcs.iter().zip(at.coefs).enumerate() {
            let c = _mm512_set1_ps(c);
            // SAFETY (both paths): the rows' entries and their masks exist (the block was
            // built with the tables); masked lanes are not accessed, valid ones were
            // proved in bounds.
            unsafe {
                let rt = *at.row_taps.get_unchecked(b.row * tn + t);
                if V >= 2 && whole && (rt.first | rt.last) != 0 && rt.run as usize >= R {
                    // Every row of the block is whole with the same masks: one lookup,
                    // then a row `row_step` floats further each time.
                    let step = *at.row_steps.get_unchecked(t) as isize;
                    let mut p = src.wrapping_offset(rt.offset as isize);
                    for acc in acc.iter_mut() {
                        whole_row!(acc, p, rt.first, rt.last, c);
                        p = p.wrapping_offset(step);
                    }
                    continue;
                }
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                unsafe {
                    let rt = *at.row_taps.get_unchecked((b.row + r) * tn + t);
                    let p = src
                        .wrapping_offset(rt.offset as isize)
                        .wrapping_add(STEP * LANES * b.v0);
                    if V >= 2 && whole && (rt.first | rt.last) != 0 {
                        whole_row!(acc, p, rt.first, rt.last, c);
                        continue;
                    }
                    let masks = at.masks.as_ptr().add(rt.mask as usize + b.v0);
                    for (v, acc) in acc.iter_mut().enumerate() {
                        let m = *masks.add(v);
                        let p = p.wrapping_add(STEP * LANES * v);
                        let x = if STEP == 1 {
                            load!(MAX, fill, m as __mmask16, p)
                        } else {
                            let lo = load!(MAX, fill, m as __mmask16, p);
                            let hi = load!(MAX, fill, (m >> 16) as __mmask16, p.wrapping_add(16));
                            _mm512_permutex2var_ps(lo, evens, hi)
                        };
                        *acc = combine!(MAX, *acc, x, c);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, acc) in acc.iter().enumerate() {
                let to = (b.row + r) * at.cols + (b.v0 + v) * LANES;
                // SAFETY: the vector's lanes are the plane's output.
                unsafe {
                    _mm512_mask_storeu_ps(
                        at.out.add(to),
                        *at.out_masks.get_unchecked(b.v0 + v),
                        *acc,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_ir::loops::parse_program;

    /// The nine guarded loads of `buf0` of a 3x3 window (padding 1, stride `s`) over
    /// planes of `h x h`, as fusion writes them, reading `fill` outside; tap `kh * 3 + kw`.
    fn window_loads(h: usize, s: usize, fill: &str) -> Vec<String> {
        let mut loads = Vec::new();
        for kh in 0..3i64 {
            for kw in 0..3i64 {
                let (dh, dw) = (kh - 1, kw - 1);
                let idx = format!(
                    "i0*{} + i1*{} + i2*{} + {}",
                    h * h,
                    h * s,
                    s,
                    dh * h as i64 + dw
                );
                let guard = format!("0 <= i1*{s} + {dh} < {h} and 0 <= i2*{s} + {dw} < {h}");
                loads.push(format!("(buf0[{idx}] if {guard} else {fill})"));
            }
        }
        loads
    }

    /// A depthwise 3x3 conv (padding 1, stride `s`) of `c` planes of `h x h`, as fusion
    /// writes it, with a bias and ReLU6.
    fn depthwise(c: usize, h: usize, s: usize) -> ferrite_ir::loops::Program {
        let o = (h + 2 - 3) / s + 1;
        let terms: Vec<String> = window_loads(h, s, "0.0")
            .iter()
            .enumerate()
            .map(|(t, load)| format!("{load} * buf1[i0*9 + {t}]"))
            .collect();
        let text = format!(
            "program dw\n  buf0: f32[{c}, {h}, {h}]  input 0 `x`\n  buf1: f32[{c}, 9]  input 1 `w`\n  buf2: f32[{c}]  input 2 `b`\n  buf3: f32[{c}, {o}, {o}]  output 0 `y`\n\n\
             kernel k0(buf0: f32[{c}, {h}, {h}], buf1: f32[{c}, 9], buf2: f32[{c}]) -> buf3: f32[{c}, {o}, {o}]\n  for i0 in 0..{c}, i1 in 0..{o}, i2 in 0..{o} parallel:\n    buf3[i0*{} + i1*{o} + i2] = minimum(maximum({} + buf2[i0], 0.0), 6.0)\n",
            o * o,
            terms.join(" + ")
        );
        parse_program("dw", &text).unwrap_or_else(|d| panic!("{d}\n{text}"))
    }

    /// Runs every unit of `st` (a 9-tap stencil of `depthwise` or `maxpool`) on `x`,
    /// weights `wt` (none for a maximum).
    fn run_all(st: &Stencil, x: &[f32], wt: &[f32], out: &mut [f32], avx: bool) {
        assert!(out.len() == st.planes * st.rows * st.cols && st.taps.len() == 9);
        let ptrs = Pointers {
            out: out.as_mut_ptr() as usize,
            sources: vec![x.as_ptr() as usize; 9],
            coefs: vec![wt.as_ptr() as usize; 9],
        };
        // SAFETY: the buffers have the lengths the kernel declares.
        unsafe { st.run_units(&ptrs, 0..st.units(), avx) };
    }

    /// [`run_all`] into an output of `init`, returned.
    fn outputs(st: &Stencil, x: &[f32], wt: &[f32], init: f32, avx: bool) -> Vec<f32> {
        let mut out = vec![init; st.planes * st.rows * st.cols];
        run_all(st, x, wt, &mut out, avx);
        out
    }

    /// Where this CPU has the vector loop: it gives `scalar`'s bits.
    fn vector_gives(st: &Stencil, x: &[f32], wt: &[f32], init: f32, scalar: &[f32], what: &str) {
        if vector_loop() {
            let vector = outputs(st, x, wt, init, true);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&vector), bits(scalar), "{what}");
        }
    }

    /// The AVX-512 loop and the scalar loop give the same bits (flat and by rows, stride
    /// 1 and 2, rows of one to eight vectors and longer, every lane position of a row's
    /// edges), and both the sum of the taps within rounding.
    #[test]
    fn the_vector_loop_gives_the_scalar_loop_bits() {
        for (c, h, s) in [
            (3usize, 9usize, 1usize),
            (2, 17, 1),
            (2, 40, 1),
            (2, 33, 2),
            (2, 40, 2),
            (1, 130, 1),
            (1, 131, 2),
            (4, 16, 2),
            (3, 7, 1),
        ] {
            let p = depthwise(c, h, s);
            let st = split(&p.kernels[0], &p.buffers).expect("a stencil").stencil;
            let x: Vec<f32> = (0..c * h * h)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let wt: Vec<f32> = (0..c * 9)
                .map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0)
                .collect();
            let scalar = outputs(&st, &x, &wt, f32::NAN, false);
            // The plain sum, in f64.
            let o = st.cols;
            for pl in 0..c {
                for oh in 0..o {
                    for ow in 0..o {
                        let mut want = 0f64;
                        for kh in 0..3 {
                            for kw in 0..3 {
                                let (ih, iw) = ((oh * s + kh) as i64 - 1, (ow * s + kw) as i64 - 1);
                                if (0..h as i64).contains(&ih) && (0..h as i64).contains(&iw) {
                                    want += x[pl * h * h + ih as usize * h + iw as usize] as f64
                                        * wt[pl * 9 + kh * 3 + kw] as f64;
                                }
                            }
                        }
                        let got = scalar[(pl * o + oh) * o + ow] as f64;
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{c}x{h}/{s}: {got} {want}"
                        );
                    }
                }
            }
            vector_gives(&st, &x, &wt, f32::NAN, &scalar, &format!("{c}x{h}/{s}"));
        }
    }

    /// A 3x3 max pooling (padding 1, stride `s`) of `c` planes of `h x h`, as fusion
    /// writes it: the maximum of nine guarded loads that read -inf outside the input.
    fn maxpool(c: usize, h: usize, s: usize) -> ferrite_ir::loops::Program {
        let o = (h + 2 - 3) / s + 1;
        let taps = window_loads(h, s, "-inf");
        let max = taps
            .iter()
            .skip(1)
            .fold(taps[0].clone(), |a, t| format!("maximum({a}, {t})"));
        let text = format!(
            "program mp\n  buf0: f32[{c}, {h}, {h}]  input 0 `x`\n  buf1: f32[{c}, {o}, {o}]  output 0 `y`\n\n\
             kernel k0(buf0: f32[{c}, {h}, {h}]) -> buf1: f32[{c}, {o}, {o}]\n  for i0 in 0..{c}, i1 in 0..{o}, i2 in 0..{o} parallel:\n    buf1[i0*{} + i1*{o} + i2] = {max}\n",
            o * o,
        );
        parse_program("mp", &text).unwrap_or_else(|d| panic!("{d}\n{text}"))
    }

    /// The pointwise maximum of two buffers is not a window: it stays generated code.
    #[test]
    fn a_pointwise_maximum_of_two_buffers_is_no_stencil() {
        let text = "program pm\n  buf0: f32[2, 8, 16]  input 0 `x`\n  buf1: f32[2, 8, 16]  input 1 `y`\n  buf2: f32[2, 8, 16]  output 0 `z`\n\n\
             kernel k0(buf0: f32[2, 8, 16], buf1: f32[2, 8, 16]) -> buf2: f32[2, 8, 16]\n  for i0 in 0..2, i1 in 0..8, i2 in 0..16 parallel:\n    buf2[i0*128 + i1*16 + i2] = maximum(buf0[i0*128 + i1*16 + i2], buf1[i0*128 + i1*16 + i2])\n";
        let p = parse_program("pm", text).unwrap_or_else(|d| panic!("{d}\n{text}"));
        assert!(split(&p.kernels[0], &p.buffers).is_none());
    }

    /// A max pooling is a stencil of nine maxima: the AVX-512 loop gives the scalar
    /// loop's bits, and both the window's IEEE maximum (NaN if the window holds one, +0
    /// over a window of -0 and +0, -inf never from the padding alone).
    #[test]
    fn max_pooling_is_a_maximum_stencil() {
        for (c, h, s) in [
            (2usize, 9usize, 1usize),
            (2, 40, 2),
            (1, 131, 2),
            (3, 7, 1),
            (2, 112, 2),
        ] {
            let p = maxpool(c, h, s);
            let st = split(&p.kernels[0], &p.buffers).expect("a stencil").stencil;
            assert_eq!(
                (st.combine, st.taps.len()),
                (Combine::Max, 9),
                "{c}x{h}/{s}"
            );
            assert!(st.describe().contains("maximum of 9 taps"));
            let x: Vec<f32> = (0..c * h * h)
                .map(|i| match i * 37 % 211 {
                    0 => f32::NAN,
                    1 | 2 => -0.0,
                    3 | 4 => 0.0,
                    5 => f32::NEG_INFINITY,
                    6 => f32::INFINITY,
                    r if r % 2 == 0 => -(r as f32) / 3.0,
                    r => (r as f32 - 100.0) / 7.0,
                })
                .collect();
            // A maximum reads no coefficients.
            let scalar = outputs(&st, &x, &[], 1234.5, false);
            let o = st.cols;
            for pl in 0..c {
                for oh in 0..o {
                    for ow in 0..o {
                        let mut window = Vec::new();
                        for kh in 0..3 {
                            for kw in 0..3 {
                                let (ih, iw) = ((oh * s + kh) as i64 - 1, (ow * s + kw) as i64 - 1);
                                if (0..h as i64).contains(&ih) && (0..h as i64).contains(&iw) {
                                    window.push(x[pl * h * h + ih as usize * h + iw as usize]);
                                }
                            }
                        }
                        let got = scalar[(pl * o + oh) * o + ow];
                        let want = if window.iter().any(|v| v.is_nan()) {
                            f32::NAN
                        } else {
                            let m = window.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                            if m == 0.0 && window.iter().any(|v| v.to_bits() == 0) {
                                0.0
                            } else {
                                m
                            }
                        };
                        assert!(
                            (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits(),
                            "{c}x{h}/{s} ({pl}, {oh}, {ow}): {got} against {want} of {window:?}"
                        );
                    }
                }
            }
            vector_gives(&st, &x, &[], 1234.5, &scalar, &format!("{c}x{h}/{s}"));
        }
    }

    #[test]
    #[ignore = "a timing, not a test: cargo test --release -p ferrite-cpu stencil_speed -- --ignored --nocapture"]
    fn stencil_speed() {
        for (c, h, s) in [
            (1usize, 56usize, 1usize),
            (32, 112, 1),
            (144, 56, 1),
            (192, 28, 1),
            (960, 7, 1),
            (144, 112, 2),
            (96, 14, 1),
            (1, 24, 1),
        ] {
            let p = depthwise(c, h, s);
            let split = split(&p.kernels[0], &p.buffers).expect("a stencil");
            let st = split.stencil;
            let x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32).collect();
            let wt: Vec<f32> = (0..c * 9).map(|i| (i % 5) as f32 * 0.1).collect();
            let mut out = vec![0f32; st.planes * st.rows * st.cols];
            let avx = vector_loop();
            let mut best = f64::MAX;
            for _ in 0..300 {
                let t = std::time::Instant::now();
                run_all(&st, &x, &wt, &mut out, avx);
                best = best.min(t.elapsed().as_secs_f64());
            }
            let fmas = st.planes * st.rows * st.cols * 9;
            println!(
                "{c}x{h}x{h}/{s}: {:.1} us, {:.2} GFMA/s",
                best * 1e6,
                fmas as f64 / best * 1e-9
            );
        }
    }
}

//! Matrix multiplication through the `gemm` crate, behind a checked, safe interface.
//!
//! Computes, for every batch index `p`, `C[p] = alpha * A[p] @ B[p] + beta * C[p]`, with
//! `A[p]` of shape `m x k`, `B[p]` `k x n` and `C[p]` `m x n`. Each operand is a slice plus a
//! [`MatLayout`]: an offset and three element strides (batch, row, column), so a transposed
//! operand is just swapped strides and a weight shared by every batch has batch stride 0;
//! nothing is copied. Before the library is called every element each operand would touch
//! is proven to lie inside its slice, and the output is proven not to alias itself, so a
//! wrong layout is an error value rather than memory corruption.
//!
//! As in BLAS, `beta == 0` means `C` is not read at all (NaNs in it do not leak into the
//! result). Supported element types are `f32`, `f64` and this module's `f16` (the `gemm`
//! crate's, which is `half::f16`); `f16` products run in `f32` (see its `GemmScalar` impl).
//!
//! An `f32` (or widened `f16`) product whose operands are all finite and at most
//! [`FLUSH_LIMIT`] (`2^32`) in magnitude, or one of whose operands is so and has no
//! subnormal, runs with denormals flushed (FTZ + DAZ, [`FlushDenormals`]), whatever the
//! program's own mode: an operand below the smallest normal float reads as zero and a
//! result that would be subnormal is zero. Each term so dropped is below `2^-126 * 2^32 =
//! 2^-94`, and each flushed partial result below `2^-126`, far under any tolerance a matmul is held to (its accumulation order is the
//! backend's own), while each operation on a subnormal takes x86's microcode assist (~100
//! cycles): `P @ V` of a softmax whose rows hold `exp` of very negative scores (subnormal
//! probabilities) ran 27x slower, and a GEMM after a GELU whose inputs reach -13
//! (subnormal activations) 3.5x (BENCHMARKS.md). Operands with an infinity, a NaN or a
//! larger value keep IEEE arithmetic, where reading a subnormal as zero would matter
//! (`1e-39 * 3e38` is 0.3, `1e-39 * inf` is inf, not NaN). A pass over the smaller
//! operand (and, when it holds subnormals, the other) decides, once per product, so every
//! thread count gives the same bits; a few-row product's large weight is read only when
//! its activations hold subnormals.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::denormals::FlushDenormals;
use super::pool::{split_range, PoolError, Team, ThreadPool};
use super::sgemm;
use super::wide::Isa;

/// The half-precision type the `f16` products use (`half::f16`).
pub use gemm::f16;

/// An element type the GEMM kernels support.
pub trait GemmScalar: Copy + PartialEq + Send + Sync + 'static + sealed::Sealed {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// `self * other` in this type's arithmetic (used for `k == 0`, where only `beta` acts).
    fn scale(self, by: Self) -> Self;
    /// Whether products run in `f32` (operands widened, the result rounded once), because
    /// the library's own kernels for the type would accumulate in the type itself.
    const WIDEN: bool = false;
    /// The value as `f32` (exact for the widened types).
    fn to_f32(self) -> f32;
    /// The nearest value of the type.
    fn from_f32(x: f32) -> Self;
    /// What a product reading `xs` needs to know to run with denormals flushed (see the
    /// module docs); `f64` products never flush.
    fn scan(_xs: &[Self]) -> Scan {
        Scan {
            bounded: false,
            normal: false,
        }
    }
}

/// An operand's values, as far as flushing denormals in a product goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Every element finite and at most [`FLUSH_LIMIT`] in magnitude.
    pub bounded: bool,
    /// No element subnormal (zeros allowed).
    pub normal: bool,
}

/// [`GemmScalar::scan`] of `f32`: the largest magnitude's bits and the smallest of
/// `bits - 1` (zero wraps to the top), two reductions that vectorize, compiled for the
/// width of the wide routines ([`Isa::host`]; a scan of a 384 KiB operand took 50 us at
/// SSE2 width).
fn scan_f32(xs: &[f32]) -> Scan {
    match Isa::host() {
        // SAFETY: `Isa::host` is a width the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { scan_avx512(xs) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { scan_avx2(xs) },
        _ => scan_lanes(xs),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn scan_avx512(xs: &[f32]) -> Scan {
    scan_lanes(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2(xs: &[f32]) -> Scan {
    scan_lanes(xs)
}

#[inline(always)]
fn scan_lanes(xs: &[f32]) -> Scan {
    const LIMIT_BITS: u32 = FLUSH_LIMIT.to_bits();
    const MIN_NORMAL_BITS: u32 = f32::MIN_POSITIVE.to_bits();
    let (mut largest, mut lowest) = (0u32, u32::MAX);
    for c in xs.chunks(4096) {
        for &x in c {
            let m = x.to_bits() & 0x7fff_ffff;
            largest = largest.max(m);
            lowest = lowest.min(m.wrapping_sub(1));
        }
        if largest > LIMIT_BITS {
            break;
        }
    }
    Scan {
        // Infinities and NaNs have larger bits than any finite value.
        bounded: largest <= LIMIT_BITS,
        // Subnormals are the bits 1 ..= MIN_NORMAL_BITS - 1.
        normal: lowest >= MIN_NORMAL_BITS - 1,
    }
}

/// Whether a product of `a` and `b` runs with denormals flushed: when one operand is
/// bounded and has no subnormal (the other's subnormals then drop terms below `2^-94`,
/// and its infinities and NaNs meet unchanged values), or when both are bounded. An
/// operand whose scan is known is looked at first, else the smaller one; the other is
/// scanned only if that does not decide. (The scans run on the calling thread while the
/// team waits: ResNet-18's 512x4608 weight took 250 us of a 550 us product on 16
/// threads, each run, before the weights' scans were kept.)
fn flushes<T: GemmScalar>(a: &MatRef<'_, T>, b: &MatRef<'_, T>) -> bool {
    let a_first = a.scan.is_some() || (b.scan.is_none() && a.data.len() <= b.data.len());
    let (first, second) = if a_first { (a, b) } else { (b, a) };
    let scan = |m: &MatRef<'_, T>| m.scan.unwrap_or_else(|| T::scan(m.data));
    let s = scan(first);
    s.bounded && (s.normal || scan(second).bounded)
}

/// The largest operand magnitude, `2^32`, at which a product runs with denormals
/// flushed: a subnormal factor read as zero then drops a term below `2^-126 * 2^32 =
/// 2^-94`.
pub const FLUSH_LIMIT: f32 = 4_294_967_296.0;

impl GemmScalar for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn scale(self, by: f32) -> f32 {
        self * by
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> f32 {
        x
    }
    fn scan(xs: &[f32]) -> Scan {
        scan_f32(xs)
    }
}

impl GemmScalar for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn scale(self, by: f64) -> f64 {
        self * by
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(x: f32) -> f64 {
        x as f64
    }
}

/// On CPUs with AVX-512 FP16 the `gemm` crate multiplies and accumulates `f16` in `f16`
/// (a 2% error on a short cancelling dot product was seen), so `f16` products are run in
/// `f32`, as PyTorch's CPU matmul does: the products of two `f16` are exact in `f32`, and
/// each output is rounded to `f16` once.
impl GemmScalar for f16 {
    const ZERO: f16 = f16::ZERO;
    const ONE: f16 = f16::ONE;
    const WIDEN: bool = true;
    fn scale(self, by: f16) -> f16 {
        self * by
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> f16 {
        f16::from_f32(x)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for super::f16 {}
}

/// The sizes of a (batched) matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Number of independent products.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
}

impl GemmShape {
    /// One `m x k` by `k x n` product.
    pub fn new(m: usize, n: usize, k: usize) -> GemmShape {
        GemmShape { batch: 1, m, n, k }
    }

    /// `batch` products of the same sizes.
    pub fn batched(batch: usize, m: usize, n: usize, k: usize) -> GemmShape {
        GemmShape { batch, m, n, k }
    }

    /// Floating-point operations of the whole product (`2 * batch * m * n * k`).
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// Where the elements of a (batch of) matrices sit in a slice: element `[p, i, j]` is at
/// `offset + p * batch_stride + i * row_stride + j * col_stride`. Strides are in elements
/// and may be negative or zero (zero only for inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatLayout {
    /// Index of element `[0, 0, 0]`.
    pub offset: usize,
    /// Distance between consecutive matrices of the batch.
    pub batch_stride: isize,
    /// Distance between consecutive rows.
    pub row_stride: isize,
    /// Distance between consecutive columns.
    pub col_stride: isize,
}

impl MatLayout {
    /// Dense row-major `rows x cols` matrices, one after the other.
    pub fn row_major(rows: usize, cols: usize) -> MatLayout {
        MatLayout {
            offset: 0,
            batch_stride: (rows * cols) as isize,
            row_stride: cols as isize,
            col_stride: 1,
        }
    }

    /// Dense column-major `rows x cols` matrices, one after the other.
    pub fn col_major(rows: usize, cols: usize) -> MatLayout {
        MatLayout {
            offset: 0,
            batch_stride: (rows * cols) as isize,
            row_stride: 1,
            col_stride: rows as isize,
        }
    }

    /// The same storage viewed as the transposed matrices (rows and columns swapped).
    pub fn transposed(self) -> MatLayout {
        MatLayout {
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// The same matrix for every batch index (batch stride 0), e.g. a shared weight.
    pub fn broadcast_batch(self) -> MatLayout {
        MatLayout {
            batch_stride: 0,
            ..self
        }
    }

    /// The same layout starting at element `offset`.
    pub fn with_offset(self, offset: usize) -> MatLayout {
        MatLayout { offset, ..self }
    }
}

/// A read-only operand: a slice and the layout of the matrices in it.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a, T> {
    /// The storage.
    pub data: &'a [T],
    /// Where the elements are.
    pub layout: MatLayout,
    /// `data`'s [`Scan`], when the caller knows it (a weight scanned once when the
    /// program was built), so that the product does not scan it on every call.
    pub scan: Option<Scan>,
}

impl<'a, T> MatRef<'a, T> {
    /// An operand over `data` with `layout`.
    pub fn new(data: &'a [T], layout: MatLayout) -> Self {
        MatRef {
            data,
            layout,
            scan: None,
        }
    }

    /// This operand with `data`'s scan known to be `scan` (see [`MatRef::scan`]).
    pub fn with_scan(self, scan: Option<Scan>) -> Self {
        MatRef { scan, ..self }
    }
}

/// The output operand.
#[derive(Debug)]
pub struct MatMut<'a, T> {
    /// The storage.
    pub data: &'a mut [T],
    /// Where the elements are.
    pub layout: MatLayout,
}

impl<'a, T> MatMut<'a, T> {
    /// An output over `data` with `layout`.
    pub fn new(data: &'a mut [T], layout: MatLayout) -> Self {
        MatMut { data, layout }
    }
}

/// The scalars of `C = alpha * A @ B + beta * C`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale<T> {
    /// Multiplies the product.
    pub alpha: T,
    /// Multiplies the old `C`; zero means `C` is write-only.
    pub beta: T,
}

impl<T: GemmScalar> Scale<T> {
    /// `C = A @ B`.
    pub fn overwrite() -> Self {
        Scale {
            alpha: T::ONE,
            beta: T::ZERO,
        }
    }

    /// `C += A @ B`.
    pub fn accumulate() -> Self {
        Scale {
            alpha: T::ONE,
            beta: T::ONE,
        }
    }
}

/// How a product uses threads.
#[derive(Debug, Clone, Copy)]
pub enum Parallelism<'p> {
    /// Everything on the calling thread.
    None,
    /// The whole pool, as [`Parallelism::Team`] with all its threads.
    Pool(&'p ThreadPool),
    /// The team's threads, split by [`plan_split`]: batches, then blocks of rows or
    /// columns, each block a single-threaded library call on one of the team's threads
    /// (the library never starts threads of its own). Small products run on the caller.
    Team(Team<'p>),
}

impl<'p> Parallelism<'p> {
    /// The threads a product may use: `None` for the calling thread alone.
    pub fn team(self) -> Option<Team<'p>> {
        match self {
            Parallelism::None => None,
            Parallelism::Pool(pool) => Some(pool.all()),
            Parallelism::Team(team) => Some(team),
        }
    }
}

/// How a (batched) product is cut into independent blocks for the pool: every batch
/// index is cut into `row_parts` x `col_parts` blocks of `C`, each computed by one
/// single-threaded library call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmSplit {
    /// Products in the batch.
    pub batch: usize,
    /// Blocks of rows per product.
    pub row_parts: usize,
    /// Blocks of columns per product.
    pub col_parts: usize,
    /// Column blocks start at multiples of this.
    pub col_align: usize,
}

/// Multiply-adds below which a whole (batched) product runs on the calling thread:
/// handing out blocks costs a few microseconds.
pub const MIN_PARALLEL_MACS: usize = 4 << 20;

/// Multiply-adds a block should have at least. A 64x256x256 product (4M) cut in two
/// row halves ran no faster than whole on two threads (each half packs all of `B`),
/// while 64x688x256 (11M) gained; blocks of columns pack only their part of `B`.
pub const MIN_TASK_MACS: usize = 2 << 20;

/// Row blocks are multiples of this (a few micro-kernel heights), column blocks of
/// [`COL_ALIGN`], so that no block ends in a ragged sliver.
const ROW_ALIGN: usize = 16;
const COL_ALIGN: usize = 64;

/// Multiply-adds below which a product of few rows ([`OURS_MAX_ROWS`], computed by
/// [`crate::sgemm`]) runs on the calling thread, and that each of its blocks has at least.
/// That kernel reads `B` in place (no packing per block), so its blocks can be much
/// smaller than the crate's: 32x256x1024 and 32x1024x256 (8M, an MLP's narrow layers) were
/// held to 4 blocks by [`MIN_TASK_MACS`], 12 of 16 threads idle.
pub const OURS_MIN_PARALLEL_MACS: usize = 1 << 20;
/// See [`OURS_MIN_PARALLEL_MACS`].
pub const OURS_MIN_TASK_MACS: usize = 256 << 10;
/// [`OURS_MIN_PARALLEL_MACS`] and [`OURS_MIN_TASK_MACS`] for a matrix-vector product
/// (at most [`crate::sgemm::STREAM_MAX_ROWS`] rows), which reads `B` once and does
/// nothing else: its speed is the bandwidth of the cores that read `B`, so it is cut
/// into blocks of 256 KiB of `B` (MobileNetV2's classifier, 1x1280 by 1280x1000, in 5
/// blocks took 364 us on 16 threads of the Xeon and 477 us on one).
pub const STREAM_MIN_PARALLEL_MACS: usize = 256 << 10;
/// See [`STREAM_MIN_PARALLEL_MACS`].
pub const STREAM_MIN_TASK_MACS: usize = 64 << 10;
/// Rows a block of a product on [`crate::sgemm`] has at least, where the product has
/// them (see [`plan_split_for`]).
const OURS_BLOCK_ROWS: usize = 32;
/// Column blocks of a few-row product are multiples of this (two AVX-512 vectors).
const OURS_COL_ALIGN: usize = 32;

/// The split of `shape` across `threads` threads, or `None` to run it on the calling
/// thread (one thread, or under [`MIN_PARALLEL_MACS`] in all). Otherwise about one
/// block per thread, none under [`MIN_TASK_MACS`], taken from the batch first (whole
/// products need no repeated packing), then from the longer of the rows and columns,
/// then from the other. This is the split for the `gemm` crate; [`plan_split_for`] gives
/// the one for a product of few rows.
pub fn plan_split(shape: GemmShape, threads: usize) -> Option<GemmSplit> {
    plan_split_for(shape, threads, false)
}

/// [`plan_split`], or with `ours` (a product on [`crate::sgemm`]: blocks of at most
/// [`OURS_MAX_ROWS`] rows run on it, see `ours_block`; it packs nothing) the finer split of
/// [`OURS_MIN_PARALLEL_MACS`], [`OURS_MIN_TASK_MACS`] (for a matrix-vector product
/// [`STREAM_MIN_PARALLEL_MACS`], [`STREAM_MIN_TASK_MACS`]) and column blocks of
/// [`OURS_COL_ALIGN`], rows cut first down to blocks of `OURS_BLOCK_ROWS`, then columns,
/// then rows again. Each output of that kernel is the same sum whatever the block, so the
/// split never changes a bit.
pub fn plan_split_for(shape: GemmShape, threads: usize, ours: bool) -> Option<GemmSplit> {
    plan_split_rows(shape, threads, ours, OURS_BLOCK_ROWS)
}

/// [`plan_split_for`] with the fine split's blocks of at least `block_rows` rows (where
/// the product has them).
fn plan_split_rows(
    shape: GemmShape,
    threads: usize,
    ours: bool,
    block_rows: usize,
) -> Option<GemmSplit> {
    let (min_parallel, min_task, col_align) = if ours && shape.m <= sgemm::STREAM_MAX_ROWS {
        (
            STREAM_MIN_PARALLEL_MACS,
            STREAM_MIN_TASK_MACS,
            OURS_COL_ALIGN,
        )
    } else if ours {
        (OURS_MIN_PARALLEL_MACS, OURS_MIN_TASK_MACS, OURS_COL_ALIGN)
    } else {
        (MIN_PARALLEL_MACS, MIN_TASK_MACS, COL_ALIGN)
    };
    let GemmShape { batch, m, n, k } = shape;
    let macs = m.saturating_mul(n).saturating_mul(k);
    let total = macs.saturating_mul(batch);
    if threads <= 1 || total < min_parallel || macs == 0 {
        return None;
    }
    let blocks = threads
        .saturating_mul(blocks_per_thread())
        .min(total / min_task)
        .max(1);
    if blocks <= 1 {
        return None;
    }
    if batch >= blocks {
        return Some(GemmSplit {
            batch,
            row_parts: 1,
            col_parts: 1,
            col_align,
        });
    }
    // Blocks wanted per product, bounded by its size and by the alignment.
    let per_product = blocks.div_ceil(batch).min((macs / min_task).max(1));
    let (row_max, col_max) = (units(m, ROW_ALIGN), units(n, col_align));
    let (mut row_parts, mut col_parts);
    if ours {
        // Blocks of at least OURS_BLOCK_ROWS rows where there are that many: a block
        // reads its columns of B once per KC rows for every row tile, so a block of
        // 8 rows (128x1152 by 1152x784, a ResNet-18 convolution, in 16 blocks of
        // whole rows) streams all 3.6 MiB of B through each core for 8 FMAs per
        // element, and ran at a fifth of the speed of 4 x 4 blocks of 32 x 196.
        // Shorter blocks only when the columns run out.
        row_parts = per_product.min(m.div_ceil(block_rows));
        col_parts = (per_product / row_parts).min(col_max);
        row_parts = row_parts.max((per_product / col_parts).min(row_max));
    } else if m >= n {
        row_parts = per_product.min(row_max);
        col_parts = (per_product / row_parts).min(col_max);
    } else {
        col_parts = per_product.min(col_max);
        row_parts = (per_product / col_parts).min(row_max);
    }
    row_parts = row_parts.max(1);
    col_parts = col_parts.max(1);
    if batch == 1 && row_parts * col_parts == 1 {
        return None;
    }
    Some(GemmSplit {
        batch,
        row_parts,
        col_parts,
        col_align,
    })
}

impl GemmSplit {
    /// The number of blocks.
    pub fn tasks(&self) -> usize {
        self.batch * self.row_parts * self.col_parts
    }

    /// Block `t`: its batch index and its ranges of rows and columns of `C` (`m x n`).
    pub fn block(
        &self,
        t: usize,
        m: usize,
        n: usize,
    ) -> (usize, std::ops::Range<usize>, std::ops::Range<usize>) {
        let per = self.row_parts * self.col_parts;
        let (p, rest) = (t / per, t % per);
        let (i, j) = (rest / self.col_parts, rest % self.col_parts);
        (
            p,
            aligned_part(m, ROW_ALIGN, self.row_parts, i),
            aligned_part(n, self.col_align, self.col_parts, j),
        )
    }
}

/// Part `i` of `parts` of `0..len`, cut at multiples of `align` into [`units`] (the
/// last part takes the remainder).
fn aligned_part(len: usize, align: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    if parts <= 1 {
        return 0..len;
    }
    let n = units(len, align);
    let part = split_range(n, parts, i);
    // Unit `u` starts at `u * align`; the last one ends at `len`.
    let at = |u: usize| if u >= n { len } else { (u * align).min(len) };
    at(part.start)..at(part.end)
}

/// How many parts of `align` a range of `len` is cut into at most: a remainder under half
/// of `align` goes with the last whole part rather than making a part of its own. (A
/// part of one column of ResNet-18's last products, 49 = 3 x 16 + 1 columns, streamed
/// its 128 rows of the 9 MiB `A` for one column; 4 threads of 16 did that.)
fn units(len: usize, align: usize) -> usize {
    let align = align.max(1);
    ((len + (align - 1) / 2) / align).max(1)
}

/// Why a product was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GemmError {
    /// Some element of an operand would fall outside its slice.
    OutOfBounds {
        /// `"a"`, `"b"` or `"c"`.
        operand: &'static str,
        /// The lowest and highest element index the layout reaches.
        reach: (i128, i128),
        /// The slice length.
        len: usize,
    },
    /// Two different elements of `C` would share storage.
    OverlappingOutput,
    /// The parallel batch loop failed.
    Pool(PoolError),
    /// [`gemm_nd`]'s batch axes disagree in number, or are more than [`MAX_BATCH_AXES`].
    BatchAxes,
    /// [`gemm_taps`] on a host without AVX2 + FMA.
    Unsupported,
}

impl fmt::Display for GemmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GemmError::OutOfBounds {
                operand,
                reach,
                len,
            } => write!(
                f,
                "matmul operand {operand} reaches elements {}..={} of a slice of {len}",
                reach.0, reach.1
            ),
            GemmError::OverlappingOutput => {
                write!(
                    f,
                    "matmul output layout maps two elements to the same storage"
                )
            }
            GemmError::Pool(e) => write!(f, "matmul: {e}"),
            GemmError::Unsupported => write!(f, "a gathered matmul needs AVX2 + FMA or AVX-512"),
            GemmError::BatchAxes => write!(
                f,
                "matmul batch axes: as many strides as extents, at most {MAX_BATCH_AXES}"
            ),
        }
    }
}

impl std::error::Error for GemmError {}

/// One dimension of an operand: its extent and stride.
type Dim = (usize, isize);

/// The most batch axes [`gemm_nd`] takes (a tensor's rank bounds them).
pub const MAX_BATCH_AXES: usize = 16;

/// The most dimensions of an operand: its batch axes, rows and columns.
const MAX_DIMS: usize = MAX_BATCH_AXES + 2;

/// The batch axes of a product whose operands are strided independently along each:
/// element `[p0, .., pr, i, j]` of an operand is at `offset + sum(p_t * strides[t]) +
/// i * row_stride + j * col_stride`, with the operand's [`MatLayout`] giving `offset`,
/// `row_stride` and `col_stride` (its `batch_stride` is not used).
#[derive(Debug, Clone, Copy)]
pub struct BatchAxes<'s> {
    /// The extent of each batch axis.
    pub extents: &'s [usize],
    /// `A`'s stride along each batch axis.
    pub a: &'s [i64],
    /// `B`'s stride along each batch axis.
    pub b: &'s [i64],
    /// `C`'s stride along each batch axis.
    pub c: &'s [i64],
}

/// The lowest and highest element index reached by `offset + sum(i_d * stride_d)`.
fn reach(offset: usize, dims: &[Dim]) -> (i128, i128) {
    let mut lo = offset as i128;
    let mut hi = offset as i128;
    for &(extent, stride) in dims {
        let span = (extent as i128 - 1) * stride as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    (lo, hi)
}

fn check_bounds(
    operand: &'static str,
    len: usize,
    layout: &MatLayout,
    dims: &[Dim],
) -> Result<(), GemmError> {
    if dims.iter().any(|&(extent, _)| extent == 0) {
        return Ok(());
    }
    let (lo, hi) = reach(layout.offset, dims);
    if lo < 0 || hi >= len as i128 {
        return Err(GemmError::OutOfBounds {
            operand,
            reach: (lo, hi),
            len,
        });
    }
    Ok(())
}

/// Whether distinct indices always map to distinct elements. Sufficient condition: ordered by
/// stride magnitude, each stride steps over everything the smaller dimensions can reach.
/// (An operand has three dimensions; the check allocates nothing, as a steady-state run
/// must not.)
fn is_injective(dims: &[Dim]) -> bool {
    let mut sorted = [(0usize, 0u128); MAX_DIMS];
    if dims.len() > MAX_DIMS {
        return false;
    }
    for (s, &(extent, stride)) in sorted.iter_mut().zip(dims) {
        *s = (extent, stride.unsigned_abs() as u128);
    }
    let sorted = &mut sorted[..dims.len()];
    sorted.sort_unstable_by_key(|&(_, stride)| stride);
    let mut reached: u128 = 0;
    for &mut (extent, stride) in sorted {
        if extent <= 1 {
            continue;
        }
        if stride <= reached {
            return false;
        }
        reached += (extent as u128 - 1) * stride;
    }
    true
}

/// A pointer that may cross to pool threads.
#[derive(Clone, Copy)]
struct SharedPtr<T>(*mut T);

// SAFETY: pool tasks write through a `SharedPtr` only to the elements of their own batch
// index of `C`, which `is_injective` proved disjoint from every other batch's; `A` and `B`
// are only read.
unsafe impl<T> Send for SharedPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedPtr<T> {}

/// `C[p] = alpha * A[p] @ B[p] + beta * C[p]` for every batch index `p`. See the module docs.
pub fn gemm<T: GemmScalar>(
    shape: GemmShape,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    scale: Scale<T>,
    parallelism: Parallelism<'_>,
) -> Result<(), GemmError> {
    let GemmShape { batch, m, n, k } = shape;
    let (la, lb, lc) = (a.layout, b.layout, c.layout);
    let a_dims = [
        (batch, la.batch_stride),
        (m, la.row_stride),
        (k, la.col_stride),
    ];
    let b_dims = [
        (batch, lb.batch_stride),
        (k, lb.row_stride),
        (n, lb.col_stride),
    ];
    let c_dims = [
        (batch, lc.batch_stride),
        (m, lc.row_stride),
        (n, lc.col_stride),
    ];
    check_bounds("a", a.data.len(), &la, &a_dims)?;
    check_bounds("b", b.data.len(), &lb, &b_dims)?;
    check_bounds("c", c.data.len(), &lc, &c_dims)?;
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if !is_injective(&c_dims) {
        return Err(GemmError::OverlappingOutput);
    }
    if k == 0 {
        scale_output(c, shape, scale.beta);
        return Ok(());
    }

    if T::WIDEN {
        return gemm_widened(shape, a, b, c, scale, parallelism);
    }
    let base =
        |layout: &MatLayout, p: usize| layout.offset as isize + p as isize * layout.batch_stride;
    let bases = |p: usize| (base(&la, p), base(&lb, p), base(&lc, p));
    run_blocks(shape, &bases, a, b, c, scale, parallelism, None)
}

/// `C[p] = alpha * A[p] @ B[p] + beta * C[p]` for every index `p` of the batch axes
/// `axes` (each operand strided along each axis on its own; see [`BatchAxes`]), cut
/// across the pool as [`gemm`] does, the flattened batch being one batch.
pub fn gemm_nd<T: GemmScalar>(
    axes: BatchAxes<'_>,
    dims: (usize, usize, usize),
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    scale: Scale<T>,
    parallelism: Parallelism<'_>,
) -> Result<(), GemmError> {
    gemm_nd_then(axes, dims, a, b, c, scale, parallelism, None)
}

/// What runs after each block of a product ([`gemm_nd_then`]): called with the flat
/// batch index, the block's rows and its columns, on the thread that computed the
/// block, once every element of the block is written.
pub type AfterBlock<'f> =
    &'f (dyn Fn(usize, std::ops::Range<usize>, std::ops::Range<usize>) + Sync);

/// [`gemm_nd`], and with `after` run on each block of the product as soon as it is
/// computed, while it is in cache: a GEMM kernel's pointwise epilogue, which would
/// otherwise read the whole product back from memory. On one thread the blocks are
/// whole rows (see [`rows_per_block`]); on a team they are the blocks of rows and
/// columns of the usual split ([`plan_split_for`]), so that a product of few rows and
/// many columns (a convolution's: output channels by positions) still gives every
/// thread a block, and its epilogue runs on all of them. Each output's sum is the same
/// as without `after` (every block runs the kernel its rows select, as the usual split
/// does).
#[allow(clippy::too_many_arguments)]
pub fn gemm_nd_then<T: GemmScalar>(
    axes: BatchAxes<'_>,
    (m, n, k): (usize, usize, usize),
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    scale: Scale<T>,
    parallelism: Parallelism<'_>,
    after: Option<AfterBlock<'_>>,
) -> Result<(), GemmError> {
    let r = axes.extents.len();
    if r > MAX_BATCH_AXES || axes.a.len() != r || axes.b.len() != r || axes.c.len() != r {
        return Err(GemmError::BatchAxes);
    }
    let (la, lb, lc) = (a.layout, b.layout, c.layout);
    let mut dims = [(0usize, 0isize); MAX_DIMS];
    let mut operand = |strides: &[i64], rows: Dim, cols: Dim| -> [(usize, isize); MAX_DIMS] {
        for (d, (&e, &s)) in dims.iter_mut().zip(axes.extents.iter().zip(strides)) {
            *d = (e, s as isize);
        }
        dims[r] = rows;
        dims[r + 1] = cols;
        dims
    };
    let a_dims = operand(axes.a, (m, la.row_stride), (k, la.col_stride));
    let b_dims = operand(axes.b, (k, lb.row_stride), (n, lb.col_stride));
    let c_dims = operand(axes.c, (m, lc.row_stride), (n, lc.col_stride));
    check_bounds("a", a.data.len(), &la, &a_dims[..r + 2])?;
    check_bounds("b", b.data.len(), &lb, &b_dims[..r + 2])?;
    check_bounds("c", c.data.len(), &lc, &c_dims[..r + 2])?;
    let batch: usize = axes.extents.iter().product();
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if !is_injective(&c_dims[..r + 2]) {
        return Err(GemmError::OverlappingOutput);
    }
    // Each operand's offset for flat batch index `p` (the last axis varying fastest).
    let bases = |p: usize| {
        let mut rest = p;
        let (mut oa, mut ob, mut oc) = (la.offset as isize, lb.offset as isize, lc.offset as isize);
        for t in (0..r).rev() {
            let x = (rest % axes.extents[t]) as isize;
            rest /= axes.extents[t];
            oa += x * axes.a[t] as isize;
            ob += x * axes.b[t] as isize;
            oc += x * axes.c[t] as isize;
        }
        (oa, ob, oc)
    };
    if k == 0 || T::WIDEN {
        // One product at a time through `gemm`, which handles these cases.
        let (a_data, b_data) = (a.data, b.data);
        let c_data = c.data;
        for p in 0..batch {
            let (oa, ob, oc) = bases(p);
            let one = |l: MatLayout, o: isize| MatLayout {
                offset: o as usize,
                batch_stride: 0,
                ..l
            };
            gemm(
                GemmShape::new(m, n, k),
                MatRef::new(a_data, one(la, oa)),
                MatRef::new(b_data, one(lb, ob)),
                MatMut::new(&mut *c_data, one(lc, oc)),
                scale,
                parallelism,
            )?;
            if let Some(after) = after {
                after(p, 0..m, 0..n);
            }
        }
        return Ok(());
    }
    let rows = after.map(|f| (f, rows_per_block::<T>(m, n, k, &lb)));
    run_blocks(
        GemmShape::batched(batch, m, n, k),
        &bases,
        a,
        b,
        c,
        scale,
        parallelism,
        rows,
    )
}

/// The bytes of `C` a block of rows ([`gemm_nd_then`]) holds at most: it is still in L2
/// when the code after it reads it back.
pub const ROW_BLOCK_BYTES: usize = 512 << 10;

/// The bytes of `B` up to which a product is cut into blocks of rows for the sake of
/// its cache: each block reads all of `B` again, from L2 while it fits there.
pub const ROW_BLOCK_MAX_B_BYTES: usize = 2 << 20;

/// Rows of a block cut for [`gemm_nd_then`]: `C` blocks of at most [`ROW_BLOCK_BYTES`]
/// in multiples of 8 rows (the few-row kernel's tile), when `B` (`k x n`, laid out as
/// `lb`) is small enough to be read once per block; else whole products.
pub fn rows_per_block<T>(m: usize, n: usize, k: usize, lb: &MatLayout) -> usize {
    let elem = std::mem::size_of::<T>().max(1);
    let dense_b = lb.col_stride.unsigned_abs() <= 1 || lb.row_stride.unsigned_abs() <= 1;
    let b_bytes = k.saturating_mul(n).saturating_mul(elem);
    if !dense_b || b_bytes > ROW_BLOCK_MAX_B_BYTES {
        return m.max(1);
    }
    let fit = ROW_BLOCK_BYTES / n.saturating_mul(elem).max(1);
    (fit / 8 * 8).max(8).min(m.max(1))
}

/// Runs a checked product (bounds and injectivity proven by the caller for every batch
/// index, `k > 0`, no widening): batch index `p`'s operands start at `bases(p)`; the
/// work is cut by [`plan_split`] across the team, or runs on the calling thread.
#[allow(clippy::too_many_arguments)]
fn run_blocks<T: GemmScalar>(
    shape: GemmShape,
    bases: &(dyn Fn(usize) -> (isize, isize, isize) + Sync),
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    scale: Scale<T>,
    parallelism: Parallelism<'_>,
    after: Option<(AfterBlock<'_>, usize)>,
) -> Result<(), GemmError> {
    let GemmShape { k, .. } = shape;
    let (la, lb, lc) = (a.layout, b.layout, c.layout);
    let a_ptr = SharedPtr(a.data.as_ptr().cast_mut());
    let b_ptr = SharedPtr(b.data.as_ptr().cast_mut());
    let c_ptr = SharedPtr(c.data.as_mut_ptr());
    let ours = ours_for::<T>(&la, &lb, &lc, scale);
    // A product that one thread runs on the crate stays on it on a team, in blocks of
    // at least CRATE_BLOCK_ROWS rows.
    let crate_team = ours.is_some() && !ours_block(shape.m, shape.n, k);
    let ours = ours.filter(|_| !crate_team);
    let flush = flushes(&a, &b);
    // C[p][rows, cols] = A[p][rows, :] @ B[p][:, cols] on the calling thread.
    // C[p][rows, cols], a part of (or all of) a block of `block` rows and columns, on the
    // kernel the block runs on (so that its parts give the bits the block would).
    let run_block = |p: usize, block: (usize, usize), rows: Range<usize>, cols: Range<usize>| {
        // Restored when the block ends (see the module docs).
        let _flush = FlushDenormals::enter(flush);
        let (a_ptr, b_ptr, c_ptr) = (a_ptr, b_ptr, c_ptr);
        let (r0, c0) = (rows.start as isize, cols.start as isize);
        let (ba, bb, bc) = bases(p);
        if let Some(isa) = ours.filter(|_| ours_block(block.0, block.1, k)) {
            let ops = sgemm::Operands {
                a: a_ptr
                    .0
                    .wrapping_offset(ba + r0 * la.row_stride)
                    .cast_const()
                    .cast(),
                a_row: la.row_stride,
                a_col: la.col_stride,
                a_panel: 0,
                a_kblock: 0,
                b: b_ptr.0.wrapping_offset(bb + c0).cast_const().cast(),
                b_row: lb.row_stride,
                b_offs: std::ptr::null(),
                c: c_ptr.0.wrapping_offset(bc + r0 * lc.row_stride + c0).cast(),
                c_row: lc.row_stride,
            };
            // SAFETY: `T` is `f32` (checked by `ours_for`), so the casts keep the element
            // type; the elements the block reads and writes are in bounds, distinct in C
            // and not shared with A or B, as for the library call below; B and C have unit
            // column stride and the ISA is supported (`ours_for`).
            unsafe { sgemm::product(isa, &ops, rows.len(), cols.len(), k) };
            return;
        }
        // SAFETY: the caller proved that every element the library reads from A[p] and
        // B[p] and writes to C[p] (with these strides, from these bases) is inside its
        // slice; a block of rows and columns touches a subset of those elements. C does
        // not alias A or B (it is borrowed mutably); its elements were proved distinct,
        // so no two writes race, across concurrently run batches or blocks of one product.
        unsafe {
            gemm::gemm(
                rows.len(),
                cols.len(),
                k,
                c_ptr
                    .0
                    .wrapping_offset(bc)
                    .wrapping_offset(r0 * lc.row_stride + c0 * lc.col_stride),
                lc.col_stride,
                lc.row_stride,
                scale.beta != T::ZERO,
                a_ptr
                    .0
                    .wrapping_offset(ba)
                    .wrapping_offset(r0 * la.row_stride)
                    .cast_const(),
                la.col_stride,
                la.row_stride,
                b_ptr
                    .0
                    .wrapping_offset(bb)
                    .wrapping_offset(c0 * lb.col_stride)
                    .cast_const(),
                lb.col_stride,
                lb.row_stride,
                scale.beta,
                scale.alpha,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    };
    let team = parallelism.team();
    // Our kernel's split whatever the product's rows: its blocks mostly run on it.
    let split = team.and_then(|team| {
        let split = if crate_team {
            plan_split_rows(shape, team.threads(), true, CRATE_BLOCK_ROWS)
        } else {
            plan_split_for(shape, team.threads(), ours.is_some())
        };
        Some((team, split?))
    });
    let Some(split) = split else {
        return match after {
            Some((after, rows)) => run_row_blocks(shape, rows, &run_block, after),
            None => run_split(shape, None, Pieces::ONE, &run_block),
        };
    };
    let (_, rows0, cols0) = split.1.block(0, shape.m, shape.n);
    // Pieces of columns only: a part of a block's rows reads all of its columns of `B`
    // again (and on the crate packs them again), a part of its columns only its rows
    // of `A`. (Parts of at least 64 rows on the crate, halving, made ResNet-18's layer-3
    // and layer-4 products 8-12% slower on two threads of the VM, and 10-20% faster
    // with one of the two cores half taken by another process.)
    let min_cols = if ours.is_some() && ours_block(rows0.len(), cols0.len(), k) {
        (64, OURS_COL_ALIGN)
    } else {
        (128, COL_ALIGN)
    };
    let pieces = Pieces::plan(rows0.len(), cols0.len(), (usize::MAX, 1), min_cols);
    // Each piece's epilogue right after it, on its thread.
    run_split(shape, Some(split), pieces, &|p, block, rows, cols| {
        run_block(p, block, rows.clone(), cols.clone());
        if let Some((after, _)) = after {
            after(p, rows, cols);
        }
    })
}

/// Bytes of `B` a block (or piece) of [`gemm_taps`] packs at a time: its columns of every
/// row, which stay in the core's L2 while every row tile of `A` passes over them.
pub const TAPS_PACK_BYTES: usize = 1 << 20;

/// A thread's packed columns of a gathered `B`, for shared rows the offsets of `B`'s rows
/// in them, and which columns of which [`gemm_taps`] call they hold.
type Packed = (Vec<f32>, Vec<isize>, Option<(u64, usize, usize)>);

thread_local! {
    /// Each thread's [`Packed`] (grown once, then reused: a steady-state run allocates
    /// nothing).
    static PACKED: std::cell::RefCell<Packed> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), None)) };
}

/// Blocks a product is cut into per thread of its team, at most (the pool hands them
/// out as threads come free): `FERRITE_GEMM_BLOCKS_PER_THREAD` (1 to 8), default 1.
pub fn blocks_per_thread() -> usize {
    static PER_THREAD: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PER_THREAD.get_or_init(|| count_from_env("FERRITE_GEMM_BLOCKS_PER_THREAD", 1..=8, 1))
}

/// The count in environment variable `var` when it is one in `range`, else `default`.
fn count_from_env(var: &str, range: std::ops::RangeInclusive<usize>, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|v| range.contains(v))
        .unwrap_or(default)
}

/// The split of a [`gemm_taps`] product across `threads`: blocks of all rows where the
/// columns allow (each block packs its columns of `B` once for every row; blocks of 32
/// rows packed each column twice, ResNet-18's 64-row products on the 16-core Xeon), in
/// multiples of one vector; rows cut only when there are fewer vectors of columns than
/// blocks. `None` to run on the calling thread.
fn taps_split(m: usize, n: usize, k: usize, threads: usize) -> Option<GemmSplit> {
    let total = m.saturating_mul(n).saturating_mul(k);
    if threads <= 1 || total < OURS_MIN_PARALLEL_MACS {
        return None;
    }
    let blocks = threads
        .saturating_mul(blocks_per_thread())
        .min(total / OURS_MIN_TASK_MACS);
    let col_parts = blocks.min(units(n, TAPS_COL_ALIGN)).max(1);
    let row_parts = (blocks / col_parts).min(units(m, ROW_ALIGN)).max(1);
    (row_parts * col_parts > 1).then_some(GemmSplit {
        batch: 1,
        row_parts,
        col_parts,
        col_align: TAPS_COL_ALIGN,
    })
}

/// Column blocks of a [`gemm_taps`] split are multiples of this (one AVX-512 vector).
const TAPS_COL_ALIGN: usize = 16;

/// `C = A @ B` (`m x n`, `f32`, overwritten) where `B` (`k x n`) is gathered from `x` by
/// `taps` ([`crate::taps`]) instead of read from memory: each block of the split
/// ([`taps_split`]: columns first) packs its columns of `B`, at
/// most [`TAPS_PACK_BYTES`] at a time, and runs [`crate::sgemm`] on them; `after` runs
/// on each block of `C` as it is done. `C` has unit column stride.
#[allow(clippy::too_many_arguments)]
pub fn gemm_taps(
    taps: &crate::taps::Taps,
    m: usize,
    a: MatRef<'_, f32>,
    panels: Option<&sgemm::Panels>,
    x: &[f32],
    c: MatMut<'_, f32>,
    parallelism: Parallelism<'_>,
    after: Option<AfterBlock<'_>>,
) -> Result<(), GemmError> {
    let (n, k) = (taps.n, taps.k);
    let (la, lc) = (a.layout, c.layout);
    check_bounds(
        "a",
        a.data.len(),
        &la,
        &[(m, la.row_stride), (k, la.col_stride)],
    )?;
    check_bounds(
        "c",
        c.data.len(),
        &lc,
        &[(m, lc.row_stride), (n, lc.col_stride)],
    )?;
    if lc.col_stride != 1 || !is_injective(&[(m, lc.row_stride), (n, 1)]) {
        return Err(GemmError::OverlappingOutput);
    }
    if x.len() < taps.source_len() {
        return Err(GemmError::OutOfBounds {
            operand: "b",
            reach: (0, taps.source_len() as i128 - 1),
            len: x.len(),
        });
    }
    if m == 0 {
        return Ok(());
    }
    let isa = Isa::host();
    if isa == Isa::Sse {
        return Err(GemmError::Unsupported);
    }
    let flush = flushes(&a, &MatRef::new(x, MatLayout::row_major(1, x.len())));
    // `A` in panel form, when packed for this width and this product.
    let mr = sgemm::panel_rows(isa);
    let panels = panels.filter(|p| p.mr == mr && p.m == m && p.k == k);
    let (a_ptr, c_ptr) = (
        SharedPtr(a.data.as_ptr().cast_mut()),
        SharedPtr(c.data.as_mut_ptr()),
    );
    // This call's packs, told apart from any other call's in the threads' caches.
    let call = TAPS_CALLS.fetch_add(1, Ordering::Relaxed);
    // C[rows, cols] from columns `cols` of B, packed unless this thread's last pack was
    // of these columns in this call (the pieces of a block share its packs).
    let run_piece = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        let (a_ptr, c_ptr) = (a_ptr, c_ptr);
        let _flush = FlushDenormals::enter(flush);
        PACKED.with(|packed| {
            let (packed, offs, last) = &mut *packed.borrow_mut();
            // Rows of B that share their floats (`Taps::shared_width`) are packed once,
            // and B's rows read through offsets.
            let shared = taps.shared_width(cols.len());
            let w = cols.len();
            let this = (call, cols.start, cols.end);
            if *last != Some(this) {
                let need = shared.map_or(k * w, |(groups, sw)| groups * sw);
                if packed.len() < need {
                    packed.resize(need, 0.0);
                }
                if shared.is_some() && offs.len() < k {
                    offs.resize(k, 0);
                }
                if shared.is_some() {
                    taps.pack_shared(x, cols.clone(), packed, offs);
                } else {
                    taps.pack(x, cols.clone(), &mut packed[..k * w]);
                }
                *last = Some(this);
            }
            let (b_row, b_offs) = if shared.is_some() {
                (0, offs.as_ptr())
            } else {
                (w as isize, std::ptr::null())
            };
            let ops = sgemm::Operands {
                a: a_ptr
                    .0
                    .wrapping_offset(la.offset as isize + rows.start as isize * la.row_stride)
                    .cast_const(),
                a_row: la.row_stride,
                a_col: la.col_stride,
                a_panel: 0,
                a_kblock: 0,
                b: packed.as_ptr(),
                b_row,
                b_offs,
                c: c_ptr.0.wrapping_offset(
                    lc.offset as isize + rows.start as isize * lc.row_stride + cols.start as isize,
                ),
                c_row: lc.row_stride,
            };
            // The rows from their first panel on, where packed.
            let ops = match panels.filter(|_| rows.start.is_multiple_of(mr)) {
                Some(p) => p.rows_from(rows.start, ops),
                None => ops,
            };
            // SAFETY: A's (strided or in panels) and C's elements of the piece were
            // checked in bounds above (the whole product's reach), the packed B holds
            // `k x w` floats at unit column stride (or its rows at `offs`, each `w`
            // floats inside the shared rows `pack_shared` wrote), C's elements are
            // distinct (`is_injective`) and this piece's are written by it alone (the
            // split's blocks and their pieces are disjoint); the ISA is supported
            // (`Isa::host`), not SSE.
            unsafe { sgemm::product(isa, &ops, rows.len(), w, k) };
            if let Some(after) = after {
                after(0, rows, cols);
            }
        });
    };
    // Columns per pack at most: TAPS_PACK_BYTES of them, in whole vectors.
    let shared = taps.shared_width(0);
    let packed_rows = shared.map_or(k, |(groups, _)| groups);
    let pack_cols =
        (TAPS_PACK_BYTES / (packed_rows * 4).max(1) / TAPS_COL_ALIGN).max(1) * TAPS_COL_ALIGN;
    let team = parallelism.team();
    let split = team.and_then(|team| Some((team, taps_split(m, n, k, team.threads())?)));
    let (rows0, cols0) = match split {
        Some((_, split)) => {
            let (_, rows, cols) = split.block(0, m, n);
            (rows.len(), cols.len())
        }
        None => (m, n),
    };
    // A block's pieces: for stealing on a team, columns where each part is long against
    // the halo that shared rows pack with every part (`Taps::shared_width`), else rows
    // of whole panels (a thief packs the block's columns again); and always columns
    // that fit a pack. (Four parts of 392 columns with a halo of 56 made ResNet-18's
    // layer-2 products 8% slower on two threads.)
    let halo = shared.map_or(0, |(_, extra)| extra);
    let mut pieces = match split {
        Some(_) => Pieces::plan(
            rows0,
            cols0,
            (4 * mr, 4 * mr),
            ((4 * halo).max(64), TAPS_COL_ALIGN),
        ),
        None => Pieces::ONE,
    };
    if cols0 > pack_cols {
        // Equal parts of columns that each fit a pack (and are pieces enough to steal).
        pieces.cols = cols0.div_ceil(pack_cols);
        pieces.rows = 1;
        pieces.halving = false;
    }
    pieces.col_align = TAPS_COL_ALIGN;
    run_split(
        GemmShape::new(m, n, k),
        split,
        pieces,
        &|_, _, rows, cols| run_piece(rows, cols),
    )
}

/// Counts [`gemm_taps`] calls: a thread's last pack is reused by a piece of the same
/// call and the same columns only.
static TAPS_CALLS: AtomicU64 = AtomicU64::new(0);

/// Pieces a block of a product is cut into at most for work stealing
/// ([`Team::parallel_pieces`]): `FERRITE_GEMM_PIECES` (1 to 16; 1 turns stealing off),
/// default 4.
pub fn pieces_per_block() -> usize {
    static PIECES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PIECES.get_or_init(|| count_from_env("FERRITE_GEMM_PIECES", 1..=16, 4))
}

/// How each block of a split is cut into pieces: `cols` x `rows` parts, taken columns
/// first (piece `i` is column part `i / rows`, row part `i % rows`), so that a thread
/// that runs a block's pieces in order runs each column part's rows one after another.
/// Planned parts halve ([`halving_part`]): the owner of a block runs its first half in one
/// call, as fast as the whole block would run, and the small parts at the end are what
/// other threads take when they are done first. (Four equal parts of rows ran 8% slower
/// than whole blocks on two threads of the VM: each reads its kernel's `A` in shorter
/// runs, and packs `B` again on the crate.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pieces {
    /// Parts of a block's columns.
    pub cols: usize,
    /// Parts of a block's rows.
    pub rows: usize,
    /// Column parts start at multiples of this from the block's first column.
    pub col_align: usize,
    /// Row parts start at multiples of this from the block's first row.
    pub row_align: usize,
    /// Parts halve ([`halving_part`]) rather than being equal.
    pub halving: bool,
}

impl Pieces {
    /// A block in one piece.
    pub const ONE: Pieces = Pieces {
        cols: 1,
        rows: 1,
        col_align: 1,
        row_align: 1,
        halving: false,
    };

    /// The pieces of a block of `rows x cols`: up to [`pieces_per_block`] in all, column
    /// parts of at least `min_cols` (aligned to `col_align`) first, then row parts of
    /// at least `min_rows` (aligned to `row_align`).
    pub fn plan(
        rows: usize,
        cols: usize,
        (min_rows, row_align): (usize, usize),
        (min_cols, col_align): (usize, usize),
    ) -> Pieces {
        let most = pieces_per_block();
        let col_parts = most.min(cols / min_cols.max(1)).max(1);
        let row_parts = (most / col_parts).min(rows / min_rows.max(1)).max(1);
        Pieces {
            cols: col_parts,
            rows: row_parts,
            col_align: col_align.max(1),
            row_align: row_align.max(1),
            halving: true,
        }
    }

    /// The number of pieces of a block.
    pub fn count(&self) -> usize {
        self.cols * self.rows
    }

    /// Piece `i` of the block `rows x cols`: its rows and columns (empty past the end).
    pub fn piece(
        &self,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        i: usize,
    ) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (ci, ri) = (i / self.rows, i % self.rows);
        let part = if self.halving {
            halving_part
        } else {
            aligned_part
        };
        let r = part(rows.len(), self.row_align, self.rows, ri);
        let c = part(cols.len(), self.col_align, self.cols, ci);
        (
            rows.start + r.start..rows.start + r.end,
            cols.start + c.start..cols.start + c.end,
        )
    }
}

/// Part `i` of `parts` of `0..len`, cut at multiples of `align`: the first half, the
/// next quarter, and so on, the last part as long as the one before it (parts of a
/// short range may be empty).
fn halving_part(len: usize, align: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    if parts <= 1 {
        return if i == 0 { 0..len } else { len..len };
    }
    let n = units(len, align);
    let bound = |j: usize| {
        // Unit `u` starts at `u * align`; the last one ends at `len`.
        let u = n - (n >> j.min(63));
        if j >= parts || u >= n {
            return len;
        }
        (u * align).min(len)
    };
    bound(i)..bound(i + 1)
}

/// Runs `run_piece(p, block, rows, cols)` on every piece of every block of `split`
/// (work stealing on the team, [`Team::parallel_pieces`]), or of each whole product of
/// the batch on the calling thread; `block` is the rows and columns of the piece's
/// block.
fn run_split(
    shape: GemmShape,
    split: Option<(Team<'_>, GemmSplit)>,
    pieces: Pieces,
    run_piece: &(dyn Fn(usize, (usize, usize), std::ops::Range<usize>, std::ops::Range<usize>)
          + Sync),
) -> Result<(), GemmError> {
    let GemmShape { batch, m, n, .. } = shape;
    let piece = |p: usize, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, i| {
        let block = (rows.len(), cols.len());
        let (rows, cols) = pieces.piece(rows, cols, i);
        if !rows.is_empty() && !cols.is_empty() {
            run_piece(p, block, rows, cols);
        }
    };
    let ran = match split {
        Some((team, split)) => team.parallel_pieces(split.tasks(), pieces.count(), |t, i| {
            let (p, rows, cols) = split.block(t, m, n);
            piece(p, rows, cols, i);
        }),
        None => {
            for p in 0..batch {
                (0..pieces.count()).for_each(|i| piece(p, 0..m, 0..n, i));
            }
            Ok(())
        }
    };
    ran.map_err(GemmError::Pool)
}

/// [`run_blocks`] on the calling thread in blocks of `rows` whole rows, `after` run on
/// each block.
fn run_row_blocks(
    shape: GemmShape,
    rows: usize,
    run_block: &(dyn Fn(usize, (usize, usize), Range<usize>, Range<usize>) + Sync),
    after: AfterBlock<'_>,
) -> Result<(), GemmError> {
    let GemmShape { batch, m, n, .. } = shape;
    let rows = rows.clamp(1, m.max(1));
    for p in 0..batch {
        for start in (0..m).step_by(rows) {
            let r = start..(start + rows).min(m);
            run_block(p, (r.len(), n), r.clone(), 0..n);
            after(p, r, 0..n);
        }
    }
    Ok(())
}

/// Whether a block of `rows x cols` of `C` over `k` runs on [`crate::sgemm`] rather than
/// the crate: at most [`OURS_MAX_ROWS`] rows, and not both more than `OURS_BLOCK_ROWS` rows
/// and at least [`CRATE_MIN_COLS`] columns; or any rows over a short `k` (at most
/// [`OURS_SHORT_K`]) and at least [`OURS_SHORT_K_MIN_COLS`] columns.
fn ours_block(rows: usize, cols: usize, k: usize) -> bool {
    (rows <= OURS_MAX_ROWS && !(rows > OURS_BLOCK_ROWS && cols >= CRATE_MIN_COLS))
        || (k <= OURS_SHORT_K && cols >= OURS_SHORT_K_MIN_COLS)
}

/// The contracted length up to which a product of any number of rows runs on
/// [`crate::sgemm`]: the crate packs `A` and `B` on every call, which a few dozen FMAs per
/// output do not pay back, where ours reads both in place and writes each output once
/// (one block of [`crate::sgemm::KC`] rows of `B`, or two). 1x1 convolutions of
/// MobileNetV2 and ResNet-18's downsampling ones, one thread on the dev VM (Zen 5,
/// `ab_profile.py`, crate / ours): 96x12544x16 451 / 306 us, 144x3136x24 149 / 140,
/// 384x196x64 71 / 58, 576x196x96 155 / 129, 128x784x64 86 / 74, 256x196x128 94 / 82; at
/// 2 threads 301 / 190, 95 / 71. With `k` = 160 and 49 columns (960x49x160) ours was 1.7x
/// slower: a row of 49 is three vectors and a lane.
pub const OURS_SHORT_K: usize = 128;

/// Columns a block over a short `k` needs to run on [`crate::sgemm`] whatever its rows
/// ([`OURS_SHORT_K`]): two register tiles' width.
const OURS_SHORT_K_MIN_COLS: usize = 64;

/// Rows a block has at least (where the product has them) when a product that one
/// thread runs on the crate (not [`ours_block`] as a whole: a convolution's, a long
/// sequence's) is cut for a team. Its blocks then run on the crate too, cut as
/// [`plan_split_for`] cuts few-row products. Cut into blocks of 32 rows on
/// [`crate::sgemm`] instead, each block read its columns of `B` from memory for a
/// quarter of its FMAs, and ResNet-18's products ran 20-35% slower at 4 and 16 threads
/// on the 16-core Xeon (sum of its 21 products, blocks of 32 rows on ours / 32 rows on
/// the crate / 64 rows on the crate: 16 threads 5.5 / 4.8 / 4.4 ms, 4 threads 16.6 /
/// 14.6 / 11.1 ms; a 128-token transformer block at 16 threads 648 -> 579 us).
const CRATE_BLOCK_ROWS: usize = 64;

/// Columns from which a block of more than `OURS_BLOCK_ROWS` rows runs on the crate:
/// over rows thousands of positions long (a convolution's 64 output channels by 3136 or
/// 12544 positions, on one or two threads) the crate's packed panels beat reading `B` in
/// place: 64x576x3136 ran 103 / 128 GFLOP/s (ours / crate) on the 16-core Xeon and
/// 124 / 133 on the 2-core VM, 64x147x12544 96 / 132 and 103 / 131; 32-row blocks (an
/// MLP's, or a conv's on a team) stay ours (32x1024x1024: 92 / 74).
pub const CRATE_MIN_COLS: usize = 2048;

/// Rows of a block (of `C`) up to which [`crate::sgemm`] computes it instead of the
/// `gemm` crate. Both read `B` from memory once per block of rows; the crate packs it
/// first, which pays back over many rows and not over few. Measured single-threaded on
/// the 2-core AVX-512 VM (thread CPU time, crate / ours at AVX-512, BENCHMARKS.md
/// "Small-M GEMM"): 32x1024x1024 (a 4 MiB `B`) 2.2 / 1.0 ms; 32x256x1024, 64x256x1024 and
/// 64x1024x1024 within 7% of each other; 128x1024x1024 3.4 / 4.1 ms, 256^3 0.31 / 0.41 ms
/// and 512^3 3.1 / 5.1 ms, where the crate's packed panels win.
pub const OURS_MAX_ROWS: usize = 64;

/// The width at which [`crate::sgemm`] may run a product with these layouts and scalars,
/// or `None` for the crate: `f32` only, `C = A @ B` only (`alpha` 1, `beta` 0), `B` and `C`
/// with unit column stride, and a host with AVX2 + FMA or AVX-512F (`FERRITE_CPU_ISA=sse`
/// keeps every product on the crate).
pub fn ours_for<T: GemmScalar>(
    _a: &MatLayout,
    b: &MatLayout,
    c: &MatLayout,
    scale: Scale<T>,
) -> Option<Isa> {
    let isa = Isa::host();
    let f32_overwrite = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && scale.alpha == T::ONE
        && scale.beta == T::ZERO;
    (f32_overwrite && b.col_stride == 1 && c.col_stride == 1 && isa != Isa::Sse).then_some(isa)
}

/// The index of element `[p, i, j]` of an operand whose reach was checked in bounds.
fn element(l: &MatLayout, p: usize, i: usize, j: usize) -> usize {
    (l.offset as isize
        + p as isize * l.batch_stride
        + i as isize * l.row_stride
        + j as isize * l.col_stride) as usize
}

/// The product in `f32`: operands widened into dense row-major copies, the `f32` product
/// computed, each output rounded to `T` once. Bounds and aliasing were checked by `gemm`.
fn gemm_widened<T: GemmScalar>(
    shape: GemmShape,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    scale: Scale<T>,
    parallelism: Parallelism<'_>,
) -> Result<(), GemmError> {
    let GemmShape { batch, m, n, k } = shape;
    let widen = |data: &[T], l: &MatLayout, rows: usize, cols: usize| -> Vec<f32> {
        let mut out = Vec::with_capacity(batch * rows * cols);
        for p in 0..batch {
            for i in 0..rows {
                for j in 0..cols {
                    out.push(data[element(l, p, i, j)].to_f32());
                }
            }
        }
        out
    };
    let a32 = widen(a.data, &a.layout, m, k);
    let b32 = widen(b.data, &b.layout, k, n);
    let beta = scale.beta.to_f32();
    let mut c32 = if beta != 0.0 {
        widen(c.data, &c.layout, m, n)
    } else {
        vec![0.0; batch * m * n]
    };
    gemm(
        shape,
        MatRef::new(&a32, MatLayout::row_major(m, k)),
        MatRef::new(&b32, MatLayout::row_major(k, n)),
        MatMut::new(&mut c32, MatLayout::row_major(m, n)),
        Scale {
            alpha: scale.alpha.to_f32(),
            beta,
        },
        parallelism,
    )?;
    let mut x = c32.into_iter();
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let v = x.next().unwrap_or(0.0);
                c.data[element(&c.layout, p, i, j)] = T::from_f32(v);
            }
        }
    }
    Ok(())
}

/// `C = beta * C` (or zero when `beta == 0`, without reading `C`): the product with `k == 0`.
fn scale_output<T: GemmScalar>(c: MatMut<'_, T>, shape: GemmShape, beta: T) {
    let l = c.layout;
    for p in 0..shape.batch {
        for i in 0..shape.m {
            for j in 0..shape.n {
                let idx = l.offset as isize
                    + p as isize * l.batch_stride
                    + i as isize * l.row_stride
                    + j as isize * l.col_stride;
                let x = &mut c.data[idx as usize];
                *x = if beta == T::ZERO {
                    T::ZERO
                } else {
                    x.scale(beta)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injectivity_of_common_layouts() {
        assert!(is_injective(&[(2, 12), (3, 4), (4, 1)]));
        assert!(is_injective(&[(2, 12), (3, 1), (4, 3)]));
        assert!(is_injective(&[(1, 0), (3, 4), (4, 1)]));
        assert!(!is_injective(&[(2, 0), (3, 4), (4, 1)]));
        assert!(!is_injective(&[(3, 3), (4, 1)]));
        assert!(is_injective(&[(3, -4), (4, -1)]));
    }

    /// Every split covers each element of `C` exactly once, stays serial when small or
    /// on one thread, and never hands out more blocks than threads (nor tiny ones).
    #[test]
    fn splits_cover_the_product_once() {
        let shapes = [
            GemmShape::batched(1, 3, 5, 7),
            GemmShape::batched(1, 64, 256, 256),
            GemmShape::batched(1, 64, 688, 256),
            GemmShape::batched(12, 128, 64, 128),
            GemmShape::batched(2, 1000, 1000, 1000),
            GemmShape::batched(3, 4096, 17, 512),
            GemmShape::batched(1, 17, 4096, 512),
        ];
        for (shape, few_rows) in shapes.iter().flat_map(|&s| [(s, false), (s, true)]).chain([
            (GemmShape::batched(1, 32, 256, 1024), true),
            (GemmShape::batched(1, 32, 1024, 256), true),
            (GemmShape::batched(1, 5, 1000, 33), true),
        ]) {
            for threads in [1, 2, 3, 7, 16] {
                let Some(split) = plan_split_for(shape, threads, few_rows) else {
                    let macs = shape.batch * shape.m * shape.n * shape.k;
                    let min_task = if few_rows {
                        OURS_MIN_TASK_MACS
                    } else {
                        MIN_TASK_MACS
                    };
                    assert!(threads == 1 || macs < 2 * min_task || shape.batch == 1);
                    continue;
                };
                assert!(threads > 1);
                assert!(split.tasks() > 1, "{shape:?} {threads}: {split:?}");
                assert!(
                    split.row_parts * split.col_parts <= threads,
                    "{shape:?} {threads}: {split:?}"
                );
                let (m, n) = (shape.m, shape.n);
                let mut seen = vec![0u8; shape.batch * m * n];
                for t in 0..split.tasks() {
                    let (p, rows, cols) = split.block(t, m, n);
                    for i in rows {
                        for j in cols.clone() {
                            seen[(p * m + i) * n + j] += 1;
                        }
                    }
                }
                assert!(
                    seen.iter().all(|&c| c == 1),
                    "{shape:?} {threads}: {split:?}"
                );
            }
        }
        assert_eq!(
            plan_split(GemmShape::batched(1, 64, 256, 256), 16).map(|s| s.tasks()),
            Some(2)
        );
        assert_eq!(plan_split(GemmShape::batched(1, 8, 8, 8), 16), None);
        // An MLP's narrow layers of 32 rows fill 16 threads on the few-row kernel (the
        // crate's split holds them to 4 blocks).
        for (n, k) in [(256, 1024), (1024, 256)] {
            let shape = GemmShape::batched(1, 32, n, k);
            assert_eq!(plan_split(shape, 16).map(|s| s.tasks()), Some(4));
            assert_eq!(plan_split_for(shape, 16, true).map(|s| s.tasks()), Some(16));
        }
    }

    /// No block of a split is a sliver: a remainder under half an alignment goes with the
    /// last part (ResNet-18's last products, 49 columns, in parts of 16, 16 and 17, not 16,
    /// 16, 16 and 1).
    #[test]
    fn splits_leave_no_slivers() {
        for threads in [4, 7, 16] {
            let split = taps_split(512, 49, 4608, threads).unwrap();
            assert_eq!(split.col_parts, 3, "{split:?}");
            for t in 0..split.tasks() {
                let (_, rows, cols) = split.block(t, 512, 49);
                assert!(
                    cols.len() >= 16 && rows.len() >= 16,
                    "{t}: {rows:?} {cols:?}"
                );
            }
        }
        assert_eq!(aligned_part(49, 16, 4, 2), 32..49);
        assert_eq!(aligned_part(49, 16, 4, 3), 49..49);
        assert_eq!(aligned_part(57, 16, 4, 3), 48..57);
        assert_eq!(halving_part(196, 64, 3, 1), 128..196);
        assert_eq!(halving_part(196, 64, 3, 2), 196..196);
    }

    /// A block's pieces cover it exactly once, aligned, equal or halving (the first part
    /// at least as long as every later one), at most `pieces_per_block` of them where
    /// planned, none shorter than asked for.
    #[test]
    fn pieces_cover_their_block_once() {
        for (len, align, parts) in [
            (0, 16, 4),
            (5, 16, 4),
            (64, 32, 2),
            (70, 32, 4),
            (392, 16, 4),
            (3136, 16, 3),
        ] {
            for part in [halving_part, aligned_part] {
                let ranges: Vec<_> = (0..parts + 1).map(|i| part(len, align, parts, i)).collect();
                let mut at = 0;
                for r in &ranges {
                    assert_eq!(r.start, at, "{len} {align} {parts}: {ranges:?}");
                    assert!(r.start % align == 0 || r.is_empty(), "{ranges:?}");
                    at = r.end;
                }
                assert_eq!(at, len, "{len} {align} {parts}: {ranges:?}");
            }
            let halves: Vec<_> = (0..parts)
                .map(|i| halving_part(len, align, parts, i).len())
                .collect();
            assert!(
                halves.iter().skip(1).all(|&l| l <= halves[0] + align),
                "{halves:?}"
            );
        }
        for (rows, cols, min_rows, min_cols) in [
            (64, 196, 32, 448),
            (128, 49, 32, 64),
            (512, 16, 32, 64),
            (64, 1568, usize::MAX, 64),
            (32, 20, 32, 64),
        ] {
            let pieces = Pieces::plan(rows, cols, (min_rows, 8), (min_cols, 16));
            assert!(pieces.count() <= pieces_per_block().max(1));
            assert!(
                pieces.cols == 1 || cols / pieces.cols >= min_cols,
                "{pieces:?}"
            );
            assert!(
                pieces.rows == 1 || rows / pieces.rows >= min_rows.min(rows),
                "{pieces:?}"
            );
            let (r0, c0) = (3, 5);
            let mut seen = vec![0u8; rows * cols];
            for i in 0..pieces.count() {
                let (r, c) = pieces.piece(r0..r0 + rows, c0..c0 + cols, i);
                for i in r {
                    for j in c.clone() {
                        seen[(i - r0) * cols + j - c0] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{rows}x{cols}: {pieces:?}");
        }
    }

    /// On our kernel a product is cut into blocks of at least 32 rows where it has them,
    /// then columns: a conv's few output channels by many positions fill 16 threads with
    /// blocks that each read a part of `B` (whole rows of 8 read all of it), and a
    /// matrix-vector product is cut into blocks of 256 KiB of `B`.
    #[test]
    fn our_splits_keep_blocks_tall_and_fill_the_team() {
        let parts = |m, n, k| {
            let s = plan_split_for(GemmShape::batched(1, m, n, k), 16, true).unwrap();
            (s.row_parts, s.col_parts)
        };
        assert_eq!(parts(64, 3136, 576), (2, 8));
        assert_eq!(parts(128, 784, 1152), (4, 4));
        assert_eq!(parts(24, 3136, 144), (1, 16));
        assert_eq!(parts(512, 49, 4608), (16, 1));
        // 1x1280 by 1280x1000: 1.28M multiply-adds, blocks of at least 64K.
        assert_eq!(parts(1, 1000, 1280), (1, 16));
        // Columns run out: shorter row blocks fill the rest.
        assert_eq!(parts(32, 256, 1024), (2, 8));
    }

    /// A product one thread runs on the crate is cut for a team into blocks of at least
    /// 64 rows where it has them: a convolution's 64 output channels by 3136 positions
    /// into 16 blocks of whole rows, 512 channels by 49 positions into 8 x 2.
    #[test]
    fn crate_products_are_cut_into_tall_blocks() {
        let parts = |m, n, k| {
            assert!(!ours_block(m, n, k));
            let s = plan_split_rows(GemmShape::batched(1, m, n, k), 16, true, CRATE_BLOCK_ROWS)
                .unwrap();
            (s.row_parts, s.col_parts)
        };
        assert_eq!(parts(64, 3136, 576), (1, 16));
        assert_eq!(parts(128, 784, 1152), (2, 8));
        assert_eq!(parts(512, 49, 4608), (8, 2));
        assert_eq!(parts(128, 768, 256), (2, 8));
    }

    /// Which blocks run on our kernel: few rows, unless taller than a team's blocks and
    /// thousands of columns long (a conv's product on one thread), which the crate packs;
    /// and any rows over a short `k`.
    #[test]
    fn blocks_of_few_rows_or_short_rows_run_on_ours() {
        let k = OURS_SHORT_K + 1;
        assert!(ours_block(8, 100_000, k));
        assert!(ours_block(OURS_BLOCK_ROWS, 3136, k));
        assert!(ours_block(64, CRATE_MIN_COLS - 1, k));
        assert!(!ours_block(64, CRATE_MIN_COLS, k));
        assert!(!ours_block(OURS_MAX_ROWS + 1, 16, k));
        // Over a short `k`, any rows, unless the rows are short too.
        assert!(ours_block(96, 12544, 16));
        assert!(ours_block(576, 196, OURS_SHORT_K));
        assert!(!ours_block(960, 49, 96));
    }

    /// A known scan decides first (the weights' scan, taken once), so the other operand
    /// is not read; without one, the smaller operand is scanned, then the other.
    #[test]
    fn known_scans_decide_flushing_first() {
        let l = MatLayout::row_major(1, 4);
        let normal: &[f32] = &[1.0, -2.0, 0.0, 3.0];
        let subnormal: &[f32] = &[1.0, f32::MIN_POSITIVE / 4.0, 0.0, 1.0];
        let unbounded: &[f32] = &[1.0, f32::NAN, 0.0, 1.0];
        let m = |d: &'static [f32]| MatRef::new(d, l);
        let known = |d: &'static [f32]| MatRef::new(d, l).with_scan(Some(scan_f32(d)));
        // Bounded without subnormals: flushes whatever the other holds.
        assert!(flushes(&known(normal), &m(unbounded)));
        assert!(flushes(&m(unbounded), &known(normal)));
        // A known scan that does not decide alone: the other must be bounded.
        assert!(flushes(&known(subnormal), &m(subnormal)));
        assert!(!flushes(&known(subnormal), &m(unbounded)));
        // A known scan is believed: a (wrongly) known bounded, normal operand decides.
        let lie = MatRef::new(unbounded, l).with_scan(Some(Scan {
            bounded: true,
            normal: true,
        }));
        assert!(flushes(&lie, &m(unbounded)));
    }

    #[test]
    fn reach_with_negative_strides() {
        assert_eq!(reach(10, &[(3, -4), (4, 1)]), (2, 13));
    }
}

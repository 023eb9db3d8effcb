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

use std::fmt;

use super::pool::{PoolError, ThreadPool};

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
}

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
}

impl<'a, T> MatRef<'a, T> {
    /// An operand over `data` with `layout`.
    pub fn new(data: &'a [T], layout: MatLayout) -> Self {
        MatRef { data, layout }
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
    /// Use `pool.threads()` threads: when there are at least that many batches, whole
    /// products are spread over the pool (each single-threaded); otherwise each product of
    /// at least `MIN_SPLIT_MACS` multiply-adds is split along its longer side into one
    /// block per pool thread, and smaller ones run on the calling thread.
    Pool(&'p ThreadPool),
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
        }
    }
}

impl std::error::Error for GemmError {}

/// One dimension of an operand: its extent and stride.
type Dim = (usize, isize);

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
fn is_injective(dims: &[Dim]) -> bool {
    let mut dims: Vec<(usize, u128)> = dims
        .iter()
        .filter(|&&(extent, _)| extent > 1)
        .map(|&(extent, stride)| (extent, stride.unsigned_abs() as u128))
        .collect();
    dims.sort_by_key(|&(_, stride)| stride);
    let mut reached: u128 = 0;
    for (extent, stride) in dims {
        if stride <= reached {
            return false;
        }
        reached += (extent as u128 - 1) * stride;
    }
    true
}

/// Multiply-adds below which one product runs on one thread. Through the library's own
/// (rayon) threads a 64x256x256 product (4M) took 119 µs on two threads against 76 µs on
/// one; split into blocks on the pool it takes the same as on one (~68 µs), while a
/// 64x688x256 product (11M) gains (llama_mlp on two threads: ~630 -> ~490 µs).
const MIN_SPLIT_MACS: usize = 8 << 20;

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

    // Element [p, 0, 0] of each operand is accessed and so in bounds (checked above).
    let base = |layout: &MatLayout, p: usize| {
        (layout.offset as isize + p as isize * layout.batch_stride) as usize
    };
    let a_ptr = SharedPtr(a.data.as_ptr().cast_mut());
    let b_ptr = SharedPtr(b.data.as_ptr().cast_mut());
    let c_ptr = SharedPtr(c.data.as_mut_ptr());
    // C[p][rows, cols] = A[p][rows, :] @ B[p][:, cols] on the calling thread.
    let run_block = |p: usize, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        let (a_ptr, b_ptr, c_ptr) = (a_ptr, b_ptr, c_ptr);
        let (r0, c0) = (rows.start as isize, cols.start as isize);
        // SAFETY: `check_bounds` proved that every element the library reads from A[p] and
        // B[p] and writes to C[p] (with these strides, from these bases) is inside its slice;
        // a block of rows and columns touches a subset of those elements. C does not alias
        // A or B (it is borrowed mutably); `is_injective` proved C's elements distinct, so
        // no two writes race, across concurrently run batches or blocks of one product.
        unsafe {
            gemm::gemm(
                rows.len(),
                cols.len(),
                k,
                c_ptr
                    .0
                    .wrapping_add(base(&lc, p))
                    .wrapping_offset(r0 * lc.row_stride + c0 * lc.col_stride),
                lc.col_stride,
                lc.row_stride,
                scale.beta != T::ZERO,
                a_ptr
                    .0
                    .wrapping_add(base(&la, p))
                    .wrapping_offset(r0 * la.row_stride)
                    .cast_const(),
                la.col_stride,
                la.row_stride,
                b_ptr
                    .0
                    .wrapping_add(base(&lb, p))
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
    let run_one = |p: usize| run_block(p, 0..m, 0..n);
    match parallelism {
        Parallelism::Pool(pool) if pool.threads() > 1 && batch >= pool.threads() => {
            pool.parallel_for(batch, run_one).map_err(GemmError::Pool)
        }
        Parallelism::Pool(pool) if pool.threads() > 1 && m * n * k >= MIN_SPLIT_MACS => {
            // One product split along its longer side into a block per thread, on the
            // pool's threads (awake already) rather than the library's own.
            let (len, split_rows) = if m >= n { (m, true) } else { (n, false) };
            let parts = pool.threads().min(len);
            let chunk = len.div_ceil(parts);
            for p in 0..batch {
                pool.parallel_for(parts, |t| {
                    let (s, e) = ((t * chunk).min(len), ((t + 1) * chunk).min(len));
                    if s < e {
                        if split_rows {
                            run_block(p, s..e, 0..n);
                        } else {
                            run_block(p, 0..m, s..e);
                        }
                    }
                })
                .map_err(GemmError::Pool)?;
            }
            Ok(())
        }
        _ => {
            (0..batch).for_each(run_one);
            Ok(())
        }
    }
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

    #[test]
    fn reach_with_negative_strides() {
        assert_eq!(reach(10, &[(3, -4), (4, 1)]), (2, 13));
    }
}

//! `matmul` with numpy semantics: 1-D operands become a row (left) or column (right)
//! matrix whose added axis is dropped from the result, and batch axes broadcast.

use super::strided::{broadcast_strides, Offsets};
use crate::types::{broadcast_shapes, TensorType};
use crate::Tensor;
use crate::{Error, Result};

/// `a @ b` with result type `out`; floats accumulate in f64, integers in wrapping i64.
pub(super) fn matmul(a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Tensor> {
    let a_shape = match a.ty.shape.as_slice() {
        [k] => vec![1, *k],
        s => s.to_vec(),
    };
    let b_shape = match b.ty.shape.as_slice() {
        [k] => vec![*k, 1],
        s => s.to_vec(),
    };
    if a_shape.len() < 2 || b_shape.len() < 2 {
        return Err(Error::internal("matmul: operands must have rank >= 1"));
    }
    let (a_batch, a_mat) = a_shape.split_at(a_shape.len() - 2);
    let (b_batch, b_mat) = b_shape.split_at(b_shape.len() - 2);
    let (m, k, n) = (a_mat[0], a_mat[1], b_mat[1]);
    if b_mat[0] != k {
        return Err(Error::internal(format!(
            "matmul: inner dimensions differ ({k} vs {})",
            b_mat[0]
        )));
    }
    let batch = broadcast_shapes(a_batch, b_batch).map_err(|e| e.context("matmul"))?;
    // Offsets of each batch's matrix: broadcast strides count whole matrices.
    let matrix_offsets = |own: &[usize], size: usize| -> Vec<usize> {
        let strides: Vec<usize> = broadcast_strides(own, &batch)
            .into_iter()
            .map(|s| s * size)
            .collect();
        Offsets::new(&batch, &strides, 0).collect()
    };
    let a_offs = matrix_offsets(a_batch, m * k);
    let b_offs = matrix_offsets(b_batch, k * n);
    let dims = Dims { m, k, n };
    let pairs = a_offs.iter().copied().zip(b_offs.iter().copied());
    if a.ty.dtype.is_float() {
        let (av, bv) = (a.to_f64(), b.to_f64());
        let mut acc = vec![0.0f64; a_offs.len() * m * n];
        for ((ao, bo), c) in pairs.zip(acc.chunks_mut((m * n).max(1))) {
            dims.accumulate(&av[ao..], &bv[bo..], c, |s, x, y| *s += x * y);
        }
        Ok(Tensor::from_f64(out, &acc))
    } else {
        let (av, bv) = (a.to_i128(), b.to_i128());
        let mut acc = vec![0i128; a_offs.len() * m * n];
        for ((ao, bo), c) in pairs.zip(acc.chunks_mut((m * n).max(1))) {
            dims.accumulate(&av[ao..], &bv[bo..], c, |s, x, y| {
                *s = s.wrapping_add(x.wrapping_mul(y))
            });
        }
        Ok(Tensor::from_i128(out, &acc))
    }
}

/// The extents of one `[m, k] @ [k, n]` product.
struct Dims {
    m: usize,
    k: usize,
    n: usize,
}

impl Dims {
    /// `c[i, j] += a[i, p] * b[p, j]` over p in order, for row-major `a`, `b` and `c`.
    /// The j loop is innermost so rows of `b` and `c` are read contiguously; each
    /// `c[i, j]` still sums its terms in increasing p.
    fn accumulate<T: Copy>(&self, a: &[T], b: &[T], c: &mut [T], fma: impl Fn(&mut T, T, T)) {
        let Dims { m, k, n } = *self;
        for i in 0..m {
            let row = &mut c[i * n..(i + 1) * n];
            for p in 0..k {
                let x = a[i * k + p];
                for (s, &y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    fma(s, x, y);
                }
            }
        }
    }
}

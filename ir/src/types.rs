//! Tensor types: a dtype and a static shape.

use crate::sym::Dim;
use crate::{DType, TypeError};
use std::fmt;

/// The largest element count a single tensor may have (2^31). Larger shapes are
/// rejected by the verifier rather than failing later with an allocation abort.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 16;

/// A tensor type: element dtype plus a static shape (`f32[64, 784]`; scalars are `f32[]`).
/// With `D = Expr` (`ferrite_ir::sym`), a symbolic shape (`f32[B, T, 256]`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorType<D = usize> {
    /// Element type.
    pub dtype: DType,
    /// Extent of each axis, outermost first.
    pub shape: Vec<D>,
}

impl<D: Clone> TensorType<D> {
    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> TensorType<D> {
        TensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }

    /// The same dtype with another shape.
    pub fn with_shape(&self, shape: Vec<D>) -> TensorType<D> {
        TensorType {
            dtype: self.dtype,
            shape,
        }
    }
}

impl TensorType {
    /// Builds a type, checking rank and element-count limits.
    pub fn new(dtype: DType, shape: Vec<usize>) -> Result<TensorType, TypeError> {
        check_shape(&shape)?;
        Ok(TensorType { dtype, shape })
    }

    /// A rank-0 tensor type.
    pub fn scalar(dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: Vec::new(),
        }
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes occupied when materialized densely.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype.size_bytes()
    }
}

/// Checks a shape against [`MAX_RANK`] and [`MAX_ELEMENTS`] without overflowing.
pub fn check_shape(shape: &[usize]) -> Result<(), TypeError> {
    if shape.len() > MAX_RANK {
        return Err(TypeError::new(format!(
            "rank {} exceeds the limit of {MAX_RANK} axes",
            shape.len()
        )));
    }
    let mut n: usize = 1;
    for &d in shape {
        n = match n.checked_mul(d) {
            Some(n) if n <= MAX_ELEMENTS => n,
            _ => {
                return Err(TypeError::new(format!(
                    "shape {} has more than {MAX_ELEMENTS} elements",
                    ShapeDisplay(shape)
                )))
            }
        };
    }
    Ok(())
}

/// Row-major (C order) strides of a shape, in elements.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Displays a shape as `[2, 3]` (or `[B, T, 256]`).
pub struct ShapeDisplay<'a, D = usize>(pub &'a [D]);

impl<D: fmt::Display> fmt::Display for ShapeDisplay<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl<D: fmt::Display> fmt::Display for TensorType<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, ShapeDisplay(&self.shape))
    }
}

/// Broadcasts two shapes with numpy/PyTorch rules (align right, 1 stretches).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, TypeError> {
    broadcast_dims(&mut (), a, b)
}

/// [`broadcast_shapes`] over any dimension type. Two symbolic extents that may
/// differ are taken to be equal (recorded as a constraint): a symbol is never
/// assumed to be the 1 that stretches.
pub fn broadcast_dims<D: Dim>(cx: &mut D::Cx, a: &[D], b: &[D]) -> Result<Vec<D>, TypeError> {
    let rank = a.len().max(b.len());
    let one = D::lit(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            &a[i + a.len() - rank]
        } else {
            &one
        };
        let db = if i + b.len() >= rank {
            &b[i + b.len() - rank]
        } else {
            &one
        };
        out.push(match broadcast_dim(cx, da, db, "broadcasting") {
            Some(d) => d,
            None => {
                return Err(TypeError::new(format!(
                    "shapes {} and {} do not broadcast (axis {} is {} vs {})",
                    ShapeDisplay(a),
                    ShapeDisplay(b),
                    i as i64 - rank as i64,
                    da,
                    db
                )))
            }
        });
    }
    Ok(out)
}

/// The broadcast of two extents (`p` if equal or `q` is 1, `q` if `p` is 1), or
/// `None` if they do not broadcast.
pub fn broadcast_dim<D: Dim>(cx: &mut D::Cx, p: &D, q: &D, why: &str) -> Option<D> {
    if p == q || D::is_one(cx, q) == Some(true) {
        Some(p.clone())
    } else if D::is_one(cx, p) == Some(true) {
        Some(q.clone())
    } else if D::same(cx, p, q, why) {
        // Only symbolic extents get here: they must agree; keep a number if one is.
        Some(if p.number().is_some() { p } else { q }.clone())
    } else {
        None
    }
}

/// Resolves a possibly negative axis against a rank (`-1` is the last axis).
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, TypeError> {
    let r = rank as i64;
    // A rank-0 tensor accepts axis 0 and -1, as in PyTorch.
    let bound = r.max(1);
    if axis < -bound || axis >= bound {
        return Err(TypeError::new(format!(
            "axis {axis} is out of range for a tensor of rank {rank} (expected {}..{})",
            -bound,
            bound - 1
        )));
    }
    Ok(if axis < 0 { axis + bound } else { axis } as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(
            broadcast_shapes(&[4, 1, 3], &[5, 1]).unwrap(),
            vec![4, 5, 3]
        );
        assert_eq!(broadcast_shapes(&[], &[2, 2]).unwrap(), vec![2, 2]);
        assert!(broadcast_shapes(&[3], &[4]).is_err());
    }

    #[test]
    fn limits() {
        assert!(check_shape(&[1 << 20, 1 << 20]).is_err());
        assert!(check_shape(&[usize::MAX, 2]).is_err());
        assert!(check_shape(&[0, usize::MAX]).is_ok());
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axis(-1, 3).unwrap(), 2);
        assert!(normalize_axis(3, 3).is_err());
        assert_eq!(normalize_axis(0, 0).unwrap(), 0);
    }
}

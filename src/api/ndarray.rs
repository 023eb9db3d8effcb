//! Conversions between [`Tensor`] and `ndarray` arrays (the `ndarray` feature).
//!
//! Any array of an [`Element`] type converts to a tensor of its shape, whatever its
//! memory layout (the tensor is row-major); an owned array in standard layout moves
//! its elements without copying. A tensor converts to an owned `ArrayD` (moved or
//! copied) or is viewed as an `ArrayViewD` without copying.
//!
//! ```
//! use ferrite::Tensor;
//! use ferrite::ndarray;
//! let a = ndarray::array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
//! let t = Tensor::try_from(a.clone())?;
//! assert_eq!(t.shape(), &[2, 3]);
//! // A transposed view is copied in row-major order.
//! let tt = Tensor::from_ndarray(&a.t())?;
//! assert_eq!(tt.as_slice::<f32>(), Some(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0][..]));
//! assert_eq!(t.as_ndarray::<f32>()?, a.view().into_dyn());
//! let back = ndarray::ArrayD::<f32>::try_from(t)?;
//! assert_eq!(back, a.into_dyn());
//! # Ok::<(), ferrite::Error>(())
//! ```

use super::error::{Error, Result};
use super::host::{Element, Tensor};
use ::ndarray::{Array, ArrayBase, ArrayD, ArrayViewD, Data, Dimension, IxDyn};

impl Tensor {
    /// A tensor with the shape and elements of `array`, copied in row-major order
    /// whatever the array's memory layout. Shapes over the size limits are an
    /// [`Error::Data`].
    pub fn from_ndarray<T, S, D>(array: &ArrayBase<S, D>) -> Result<Tensor>
    where
        T: Element,
        S: Data<Elem = T>,
        D: Dimension,
    {
        Tensor::from_vec(array.shape(), array.iter().copied().collect())
    }

    /// The elements as an `ndarray` view of the tensor's shape, without copying; an
    /// [`Error::Data`] if the dtype is not `T`'s.
    pub fn as_ndarray<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        let values = self
            .as_slice::<T>()
            .ok_or_else(|| self.wrong_element::<T>())?;
        ArrayViewD::from_shape(IxDyn(self.shape()), values).map_err(shape_error)
    }

    /// A copy of the elements as an owned `ndarray` array of the tensor's shape; an
    /// [`Error::Data`] if the dtype is not `T`'s.
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        Ok(self.as_ndarray::<T>()?.to_owned())
    }
}

impl<T: Element, D: Dimension> TryFrom<Array<T, D>> for Tensor {
    type Error = Error;

    /// Moves the elements of an array in standard (row-major, contiguous) layout and
    /// copies those of any other.
    fn try_from(array: Array<T, D>) -> Result<Tensor> {
        if !array.is_standard_layout() {
            return Tensor::from_ndarray(&array);
        }
        let shape = array.shape().to_vec();
        let len = array.len();
        // A standard-layout array's elements are contiguous from its offset into the
        // storage, which may hold more (after slicing in place).
        let (mut values, offset) = array.into_raw_vec_and_offset();
        let offset = offset.unwrap_or(0);
        values.truncate(offset + len);
        values.drain(..offset);
        Tensor::from_vec(&shape, values)
    }
}

impl<T: Element> TryFrom<Tensor> for ArrayD<T> {
    type Error = Error;

    /// Moves the elements into an array of the tensor's shape; an [`Error::Data`] if
    /// the dtype is not `T`'s.
    fn try_from(t: Tensor) -> Result<ArrayD<T>> {
        let shape = t.shape().to_vec();
        ArrayD::from_shape_vec(IxDyn(&shape), t.into_vec::<T>()?).map_err(shape_error)
    }
}

/// A tensor's shape always matches its element count, so `ndarray` never rejects it;
/// should it, that is a bug.
fn shape_error(e: ::ndarray::ShapeError) -> Error {
    Error::Internal {
        message: format!("ndarray rejected a tensor's shape: {e}"),
    }
}

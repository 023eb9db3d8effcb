//! [`Tensor`]: a dense tensor on the host, the data that goes into and comes out of a
//! compiled program (the symbolic counterpart, which holds no data, is
//! [`Var`](crate::Var)).
//!
//! A [`Tensor`] wraps the IR's host tensor ([`ferrite_ir::Tensor`]) and keeps it
//! well-formed: its element storage always matches its type, because the only ways to
//! build one are checked. It converts from and to `Vec`s and slices of the element
//! types ([`Element`]: `f32`, `f16`, `bf16`, `i32`, `i64`, `bool`), from and to
//! numpy's `.npy` format, as bytes or as files, and with the `ndarray` feature from and
//! to `ndarray` arrays.
//!
//! ```
//! use ferrite::Tensor;
//! let a = Tensor::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0])?;
//! assert_eq!(a.shape(), &[2, 2]);
//! assert_eq!(a.as_slice::<f32>(), Some(&[1.0, 2.0, 3.0, 4.0][..]));
//! let back = Tensor::from_npy(&a.to_npy())?;
//! assert_eq!(back, a);
//! # Ok::<(), ferrite::Error>(())
//! ```

use super::error::{Error, Result};
use ferrite_ir::types::check_shape;
use ferrite_ir::{npy, DType, Data, Mismatch, TensorType};
use half::{bf16, f16};
use std::fmt;
use std::path::Path;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the element type of one [`DType`]: `f32`, `half::f16`,
/// `half::bf16`, `i32`, `i64` and `bool`. Sealed: the set matches the IR's dtypes.
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The dtype of tensors with this element type.
    const DTYPE: DType;
    /// Wraps a vector as tensor storage.
    #[doc(hidden)]
    fn into_data(values: Vec<Self>) -> Data;
    /// The elements of `data` if it holds this type.
    #[doc(hidden)]
    fn slice(data: &Data) -> Option<&[Self]>;
    /// The elements of `data` if it holds this type, or `data` back.
    #[doc(hidden)]
    fn from_data(data: Data) -> std::result::Result<Vec<Self>, Data>;
}

macro_rules! element {
    ($t:ty, $dtype:ident, $variant:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            fn into_data(values: Vec<Self>) -> Data {
                Data::$variant(values)
            }
            fn slice(data: &Data) -> Option<&[Self]> {
                match data {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn from_data(data: Data) -> std::result::Result<Vec<Self>, Data> {
                match data {
                    Data::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }
    };
}

element!(f32, F32, F32);
element!(f16, F16, F16);
element!(bf16, Bf16, Bf16);
element!(i32, I32, I32);
element!(i64, I64, I64);
element!(bool, Bool, Bool);
element!(f64, F64, F64);
element!(i8, I8, I8);
element!(u8, U8, U8);
element!(i16, I16, I16);
element!(u16, U16, U16);
element!(u32, U32, U32);
element!(u64, U64, U64);

/// A dense, row-major tensor on the host: a [`TensorType`] and its elements.
///
/// Inputs of [`Compiled::run`](crate::Compiled::run),
/// [`Compiled::execute`](crate::Compiled::execute) and [`Jit::run`](crate::Jit::run)
/// are `Tensor`s, and so are their outputs. `Tensor` is a checked wrapper around
/// [`ferrite_ir::Tensor`] (the reference interpreter's host tensor, whose fields are
/// public); [`Tensor::as_ir`], [`Tensor::into_ir`] and `TryFrom<ferrite_ir::Tensor>`
/// convert between the two.
#[derive(Clone, PartialEq, Debug)]
pub struct Tensor(ferrite_ir::Tensor);

impl Tensor {
    /// A tensor of `shape` holding `values` in row-major order.
    pub fn from_vec<T: Element>(shape: &[usize], values: Vec<T>) -> Result<Tensor> {
        let ty = checked_type(T::DTYPE, shape)?;
        if ty.numel() != values.len() {
            return Err(Error::data(format!(
                "shape {ty} needs {} values, got {}",
                ty.numel(),
                values.len()
            )));
        }
        Ok(Tensor(ferrite_ir::Tensor {
            ty,
            data: T::into_data(values),
        }))
    }

    /// A tensor of `shape` holding a copy of `values` in row-major order.
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Result<Tensor> {
        Tensor::from_vec(shape, values.to_vec())
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor(ferrite_ir::Tensor {
            ty: TensorType::scalar(T::DTYPE),
            data: T::into_data(vec![value]),
        })
    }

    /// A tensor of `shape` with every element equal to `value`.
    pub fn full<T: Element>(shape: &[usize], value: T) -> Result<Tensor> {
        let ty = checked_type(T::DTYPE, shape)?;
        Ok(Tensor(ferrite_ir::Tensor {
            data: T::into_data(vec![value; ty.numel()]),
            ty,
        }))
    }

    /// A tensor of type `ty` filled with zeros (`false` for `bool`).
    pub fn zeros(ty: &TensorType) -> Result<Tensor> {
        check_shape(&ty.shape).map_err(Error::data)?;
        Ok(Tensor(ferrite_ir::Tensor::zeros(ty)))
    }

    /// A tensor of type `ty` from f64 values, rounded to the dtype as a cast does
    /// (floats to nearest, integers toward zero, `bool` is `v != 0`).
    pub fn from_f64(ty: &TensorType, values: &[f64]) -> Result<Tensor> {
        check_shape(&ty.shape).map_err(Error::data)?;
        if ty.numel() != values.len() {
            return Err(Error::data(format!(
                "shape {ty} needs {} values, got {}",
                ty.numel(),
                values.len()
            )));
        }
        Ok(Tensor(ferrite_ir::Tensor::from_f64(ty, values)))
    }

    /// Deterministic pseudo-random contents for `ty` from `seed`: floats uniform in
    /// [-1, 1), integers in [0, 10), bools fair (the inputs `ferrite run --seed` uses).
    pub fn random(ty: &TensorType, seed: u64) -> Result<Tensor> {
        check_shape(&ty.shape).map_err(Error::data)?;
        Ok(Tensor(ferrite_ir::Tensor::random(ty, seed)))
    }

    /// Dtype and shape.
    pub fn ty(&self) -> &TensorType {
        &self.0.ty
    }

    /// The extent of each axis, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.0.ty.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.ty.dtype
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.0.ty.rank()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The elements, if they are of type `T` (`None` for another dtype).
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(&self.0.data)
    }

    /// The elements to write, if they are `f32`.
    pub(crate) fn as_mut_f32(&mut self) -> Option<&mut [f32]> {
        match &mut self.0.data {
            ferrite_ir::Data::F32(v) => Some(v),
            _ => None,
        }
    }

    /// A copy of the elements as a `Vec<T>`; an error if the dtype is not `T`'s.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.as_slice::<T>()
            .map(<[T]>::to_vec)
            .ok_or_else(|| self.wrong_element::<T>())
    }

    /// The elements as a `Vec<T>` without copying; an error if the dtype is not `T`'s.
    pub fn into_vec<T: Element>(self) -> Result<Vec<T>> {
        let err = self.wrong_element::<T>();
        T::from_data(self.0.data).map_err(|_| err)
    }

    /// Every element widened to f64 (exact except for `i64` beyond 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.0.to_f64()
    }

    /// The same elements with another shape of the same element count.
    pub fn reshape(self, shape: &[usize]) -> Result<Tensor> {
        let ty = checked_type(self.dtype(), shape)?;
        if ty.numel() != self.len() {
            return Err(Error::data(format!(
                "cannot reshape {} ({} elements) to {ty}",
                self.0.ty,
                self.len()
            )));
        }
        Ok(Tensor(ferrite_ir::Tensor {
            ty,
            data: self.0.data,
        }))
    }

    /// Decodes `.npy` bytes (any of the layouts `ferrite_ir::npy` accepts).
    pub fn from_npy(bytes: &[u8]) -> Result<Tensor> {
        npy::decode(bytes).map(Tensor).map_err(|e| Error::Npy {
            message: e.to_string(),
        })
    }

    /// Encodes as a version 1.0 `.npy` file (little-endian, C order), as numpy writes it.
    pub fn to_npy(&self) -> Vec<u8> {
        npy::encode(&self.0)
    }

    /// Reads a `.npy` file, header first, within the default memory budget
    /// ([`crate::files::read_npy`] takes another).
    pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
        crate::files::read_npy(path, crate::memory::default_memory_limit())
    }

    /// Writes a `.npy` file that numpy reads.
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_npy()).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Compares with `expected` elementwise: `|a - e| <= atol + rtol * |e|` (NaN equals
    /// NaN). The error is the worst mismatching element, or a type difference; it
    /// converts into an [`Error::NotClose`] for `?`.
    pub fn check_close(
        &self,
        expected: &Tensor,
        rtol: f64,
        atol: f64,
    ) -> std::result::Result<(), Mismatch> {
        self.0.check_close(&expected.0, rtol, atol)
    }

    /// The IR's host tensor.
    pub fn as_ir(&self) -> &ferrite_ir::Tensor {
        &self.0
    }

    /// The IR's host tensor, for a backend to write its elements in place (its type
    /// stays: backends check it and never change it).
    pub(crate) fn as_ir_mut(&mut self) -> &mut ferrite_ir::Tensor {
        &mut self.0
    }

    /// Unwraps into the IR's host tensor.
    pub fn into_ir(self) -> ferrite_ir::Tensor {
        self.0
    }

    /// A tensor a backend returned: one that does not match its type is a bug.
    pub(crate) fn from_backend(t: ferrite_ir::Tensor) -> Result<Tensor> {
        match storage_mismatch(&t) {
            Some(message) => Err(Error::Internal {
                message: format!("a backend returned a malformed tensor: {message}"),
            }),
            None => Ok(Tensor(t)),
        }
    }

    pub(crate) fn wrong_element<T: Element>(&self) -> Error {
        Error::data(format!(
            "the tensor is {} but {} elements were requested",
            self.0.ty,
            T::DTYPE
        ))
    }
}

/// A type with the size limits of every tensor (rank, element count) checked.
fn checked_type(dtype: DType, shape: &[usize]) -> Result<TensorType> {
    TensorType::new(dtype, shape.to_vec()).map_err(Error::data)
}

/// Storage that disagrees with its type, described; `None` when it agrees.
fn storage_mismatch(t: &ferrite_ir::Tensor) -> Option<String> {
    let (dtype, len) = (t.data.dtype(), t.data.len());
    if let Err(e) = check_shape(&t.ty.shape) {
        return Some(e.to_string());
    }
    if dtype != t.ty.dtype || len != t.ty.numel() {
        return Some(format!(
            "the tensor is typed {} but stores {len} {dtype} elements",
            t.ty
        ));
    }
    None
}

impl TryFrom<ferrite_ir::Tensor> for Tensor {
    type Error = Error;

    /// Checks that the storage matches the type (the IR tensor's fields are public).
    fn try_from(t: ferrite_ir::Tensor) -> Result<Tensor> {
        match storage_mismatch(&t) {
            Some(message) => Err(Error::Data { message }),
            None => Ok(Tensor(t)),
        }
    }
}

impl From<Tensor> for ferrite_ir::Tensor {
    fn from(a: Tensor) -> ferrite_ir::Tensor {
        a.0
    }
}

/// At most this many elements are shown by `Display`.
const SHOWN: usize = 8;

impl fmt::Display for Tensor {
    /// `f32[2, 2] [1, 2, 3, 4]`, eliding the middle of long tensors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [", self.0.ty)?;
        let values = self.0.to_f64();
        let ints = self.0.to_i128();
        let show = |f: &mut fmt::Formatter<'_>, i: usize| -> fmt::Result {
            if i > 0 {
                f.write_str(", ")?;
            }
            // Each value in its own precision: an f32 prints as the shortest decimal
            // that reads back as that f32, not as its f64 widening.
            match self.dtype() {
                DType::Bool => write!(f, "{}", values[i] != 0.0),
                d if d.is_int() => write!(f, "{}", ints[i]),
                DType::F64 => write!(f, "{}", values[i]),
                _ => write!(f, "{}", values[i] as f32),
            }
        };
        if values.len() <= SHOWN {
            for i in 0..values.len() {
                show(f, i)?;
            }
        } else {
            for i in 0..SHOWN / 2 {
                show(f, i)?;
            }
            f.write_str(", ..")?;
            for i in values.len() - SHOWN / 2..values.len() {
                show(f, i)?;
            }
        }
        f.write_str("]")
    }
}

//! numpy arrays to Ferrite tensors and back, and dtype names.
//!
//! What is copied, and why:
//! - An input array is copied once into a [`Tensor`], whose storage is a Rust `Vec`
//!   (the library's one host data type, which the CPU backend reads in place). A
//!   C-contiguous array is one `memcpy`; any other layout (a transpose, a slice with a
//!   step) is gathered in row-major order by the same single pass. The array is
//!   borrowed read-only for that copy only, not for the run, so Python code may
//!   change it while the program runs.
//! - An output is not copied: its `Vec` becomes the numpy array's buffer (numpy owns it
//!   through a capsule and frees it with Rust's allocator). `bf16`, which numpy lacks,
//!   is the exception: its bits are copied into a `uint16` array, viewed as
//!   `ml_dtypes.bfloat16` when that package is installed.

use crate::errors::InputError;
use ferrite::half::{bf16, f16};
use ferrite::{DType, Tensor, TensorType};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{
    PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// Every dtype, by its `.fg` name.
pub const DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
];

/// The `.fg` name of a dtype (`f32`, `i64`, `bool`).
pub fn dtype_name(d: DType) -> String {
    d.to_string()
}

/// A dtype given as its `.fg` name (`"f32"`), a numpy name (`"float32"`), or a numpy
/// dtype or scalar type (`numpy.float32`).
pub fn parse_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    let name: String = if let Ok(s) = obj.cast::<PyString>() {
        s.to_string()
    } else {
        let np = obj.py().import("numpy")?;
        np.call_method1("dtype", (obj,))
            .and_then(|d| d.getattr("name"))
            .and_then(|n| n.extract())
            .map_err(|_| {
                PyValueError::new_err(format!(
                    "not a dtype: {} (expected a name such as \"f32\" or a numpy dtype)",
                    obj.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?
    };
    dtype_from_name(&name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown dtype `{name}` (expected one of {})",
            DTYPES.map(dtype_name).join(", ")
        ))
    })
}

fn dtype_from_name(name: &str) -> Option<DType> {
    let numpy = match name {
        "float32" => "f32",
        "float16" => "f16",
        "bfloat16" => "bf16",
        "float64" => "f64",
        "int8" => "i8",
        "int16" => "i16",
        "int32" => "i32",
        "int64" => "i64",
        "uint8" => "u8",
        "uint16" => "u16",
        "uint32" => "u32",
        "uint64" => "u64",
        other => other,
    };
    DTYPES.into_iter().find(|d| d.to_string() == numpy)
}

/// A shape as a Python-facing tuple.
pub fn shape_tuple<'py>(py: Python<'py>, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    Ok(pyo3::types::PyTuple::new(py, shape)?.into_any())
}

/// `(dtype name, shape)` of a type.
pub fn type_pair<'py>(py: Python<'py>, ty: &TensorType) -> PyResult<Bound<'py, PyAny>> {
    Ok((dtype_name(ty.dtype), shape_tuple(py, &ty.shape)?)
        .into_pyobject(py)?
        .into_any())
}

/// The dtype of a numpy array, or `None` for one Ferrite has no dtype for. numpy's own
/// types are told by their kind and size, two reads of the descriptor: `dtype.name` is a
/// Python property that took a third of the binding's time on a small input (the
/// per-call cost of a `torch.compile` region). Others (`ml_dtypes.bfloat16`) go by name.
fn array_dtype(a: &Bound<'_, PyUntypedArray>) -> PyResult<Option<DType>> {
    let descr = a.dtype();
    let known = match (descr.kind(), descr.itemsize()) {
        (b'b', 1) => Some(DType::Bool),
        (b'f', 2) => Some(DType::F16),
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        (b'i', 1) => Some(DType::I8),
        (b'i', 2) => Some(DType::I16),
        (b'i', 4) => Some(DType::I32),
        (b'i', 8) => Some(DType::I64),
        (b'u', 1) => Some(DType::U8),
        (b'u', 2) => Some(DType::U16),
        (b'u', 4) => Some(DType::U32),
        (b'u', 8) => Some(DType::U64),
        _ => None,
    };
    if known.is_some() {
        return Ok(known);
    }
    let name: String = descr.getattr("name")?.extract()?;
    Ok(dtype_from_name(&name))
}

/// Copies the elements of `a` (of element type `T`) in row-major order.
fn elements<T: numpy::Element + Copy>(a: &Bound<'_, PyUntypedArray>) -> PyResult<Vec<T>> {
    let native;
    let a = match a.cast::<PyArrayDyn<T>>() {
        Ok(a) => a,
        // The other byte order (`>f4`): numpy swaps it into a native copy first.
        Err(_) => {
            native = a
                .call_method1("astype", (numpy::dtype::<T>(a.py()),))?
                .cast_into::<PyArrayDyn<T>>()?;
            &native
        }
    };
    let view = a.try_readonly()?;
    // `as_slice` also takes Fortran order, which is not the tensor's row-major order.
    Ok(match view.as_slice() {
        Ok(s) if a.is_c_contiguous() => s.to_vec(),
        _ => view.as_array().iter().copied().collect(),
    })
}

/// A tensor from anything numpy makes an array of (an array, a list, a scalar, a
/// torch CPU tensor), copied once (see the module docs). `name` says which input,
/// for errors.
pub fn to_tensor(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Tensor> {
    let py = obj.py();
    let array = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => py
            .import("numpy")?
            .call_method1("asarray", (obj,))?
            .cast_into::<PyUntypedArray>()?,
    };
    let shape = array.shape().to_vec();
    let Some(dtype) = array_dtype(&array)? else {
        let numpy: String = array.dtype().getattr("name")?.extract()?;
        return Err(InputError::new_err(format!(
            "{name}: numpy dtype {numpy} has no Ferrite dtype (expected one of {})",
            DTYPES.map(|d| numpy_name(d).to_string()).join(", ")
        )));
    };
    let made = match dtype {
        DType::F32 => Tensor::from_vec(&shape, elements::<f32>(&array)?),
        DType::F16 => Tensor::from_vec(&shape, elements::<f16>(&array)?),
        DType::Bf16 => {
            // An `ml_dtypes.bfloat16` array: read its bits through a uint16 view.
            let bits = array
                .call_method1("view", ("uint16",))?
                .cast_into::<PyUntypedArray>()?;
            let values = elements::<u16>(&bits)?
                .into_iter()
                .map(bf16::from_bits)
                .collect();
            Tensor::from_vec(&shape, values)
        }
        DType::F64 => Tensor::from_vec(&shape, elements::<f64>(&array)?),
        DType::I8 => Tensor::from_vec(&shape, elements::<i8>(&array)?),
        DType::I16 => Tensor::from_vec(&shape, elements::<i16>(&array)?),
        DType::I32 => Tensor::from_vec(&shape, elements::<i32>(&array)?),
        DType::I64 => Tensor::from_vec(&shape, elements::<i64>(&array)?),
        DType::U8 => Tensor::from_vec(&shape, elements::<u8>(&array)?),
        DType::U16 => Tensor::from_vec(&shape, elements::<u16>(&array)?),
        DType::U32 => Tensor::from_vec(&shape, elements::<u32>(&array)?),
        DType::U64 => Tensor::from_vec(&shape, elements::<u64>(&array)?),
        DType::Bool => Tensor::from_vec(&shape, elements::<bool>(&array)?),
    };
    made.map_err(|e| InputError::new_err(format!("{name}: {e}")))
}

/// numpy's name of a dtype.
pub fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::Bf16 => "bfloat16",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
    }
}

/// Moves a tensor's storage into a numpy array of its shape, without a copy.
fn owned<'py, T: numpy::Element>(
    py: Python<'py>,
    shape: &[usize],
    values: Vec<T>,
) -> PyResult<Bound<'py, PyAny>> {
    let array = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| crate::errors::InternalError::new_err(format!("output array: {e}")))?;
    Ok(PyArray::from_owned_array(py, array).into_any())
}

/// A numpy array that takes over a tensor's storage (see the module docs).
pub fn to_array(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let shape = t.shape().to_vec();
    let dtype = t.dtype();
    let wrong = |_| crate::errors::InternalError::new_err("output storage differs from its dtype");
    match dtype {
        DType::F32 => owned(py, &shape, t.into_vec::<f32>().map_err(wrong)?),
        DType::F16 => owned(py, &shape, t.into_vec::<f16>().map_err(wrong)?),
        DType::Bf16 => {
            let bits: Vec<u16> = t
                .into_vec::<bf16>()
                .map_err(wrong)?
                .into_iter()
                .map(bf16::to_bits)
                .collect();
            let array = owned(py, &shape, bits)?;
            match py.import("ml_dtypes") {
                Ok(m) => array.call_method1("view", (m.getattr("bfloat16")?,)),
                Err(_) => Ok(array),
            }
        }
        DType::F64 => owned(py, &shape, t.into_vec::<f64>().map_err(wrong)?),
        DType::I8 => owned(py, &shape, t.into_vec::<i8>().map_err(wrong)?),
        DType::I16 => owned(py, &shape, t.into_vec::<i16>().map_err(wrong)?),
        DType::I32 => owned(py, &shape, t.into_vec::<i32>().map_err(wrong)?),
        DType::I64 => owned(py, &shape, t.into_vec::<i64>().map_err(wrong)?),
        DType::U8 => owned(py, &shape, t.into_vec::<u8>().map_err(wrong)?),
        DType::U16 => owned(py, &shape, t.into_vec::<u16>().map_err(wrong)?),
        DType::U32 => owned(py, &shape, t.into_vec::<u32>().map_err(wrong)?),
        DType::U64 => owned(py, &shape, t.into_vec::<u64>().map_err(wrong)?),
        DType::Bool => owned(py, &shape, t.into_vec::<bool>().map_err(wrong)?),
    }
}

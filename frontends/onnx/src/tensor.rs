//! ONNX `TensorProto`s to Ferrite host tensors, and ONNX element types to dtypes.
//!
//! Sizes are checked before anything is allocated: the declared dims must form a
//! shape within the IR's limits, and the bytes present (inline or external) must be
//! exactly what the dims and the element type call for.

use crate::error::{Error, Result};
use crate::proto::{tensor_proto, TensorProto};
use ferrite_ir::{DType, Data, Tensor, TensorType};
use half::{bf16, f16};

/// Reads the external data of initializers. The importer does no I/O itself: the
/// caller (the `ferrite` face) resolves `location` inside the model's folder.
pub trait ExternalData {
    /// Checks that the file `location` names (a relative path that [`check_location`] has
    /// accepted) holds `length` bytes at `offset` and that they fit the caller's memory
    /// budget. The importer calls it before it allocates the tensor, so a declared size is
    /// checked against the file before anything is allocated or read.
    fn check(
        &mut self,
        location: &str,
        offset: u64,
        length: u64,
    ) -> std::result::Result<(), String>;

    /// Fills `dst` with the `dst.len()` bytes at `offset` of the file `location` names (a
    /// relative path that [`check_location`] has accepted). The implementation must check
    /// the file's size before reading and refuse to leave the model's folder. `dst` is the
    /// tensor's own storage where the host's byte order allows, so a weight is copied once.
    fn read(
        &mut self,
        location: &str,
        offset: u64,
        dst: &mut [u8],
    ) -> std::result::Result<(), String>;
}

/// A resolver for models that must have no external data (`from_bytes`).
pub struct NoExternalData;

impl ExternalData for NoExternalData {
    fn check(&mut self, location: &str, _: u64, _: u64) -> std::result::Result<(), String> {
        self.read(location, 0, &mut [])
    }

    fn read(&mut self, location: &str, _: u64, _: &mut [u8]) -> std::result::Result<(), String> {
        Err(format!(
            "the model refers to external file `{location}`, but it was loaded from bytes with no folder to read it from"
        ))
    }
}

/// Checks an external-data `location` lexically: a relative path of plain
/// components, none of them `..`, no drive or root, no NUL. Symbolic links are the
/// resolver's to check (it sees the file system; this crate does not).
pub fn check_location(location: &str) -> std::result::Result<(), String> {
    if location.is_empty() {
        return Err("the location is empty".into());
    }
    if location.contains('\0') {
        return Err("the location contains a NUL byte".into());
    }
    if location.starts_with('/') || location.starts_with('\\') || location.contains(':') {
        return Err(format!(
            "location `{location}` is an absolute path; it must be relative to the model's folder"
        ));
    }
    for part in location.split(['/', '\\']) {
        if part == ".." {
            return Err(format!(
                "location `{location}` leaves the model's folder (`..`)"
            ));
        }
    }
    Ok(())
}

/// The Ferrite dtype of an ONNX element type, or why there is none.
pub fn dtype_of(elem_type: i32) -> std::result::Result<DType, String> {
    use tensor_proto::DataType as T;
    match T::try_from(elem_type) {
        Ok(T::Float) => Ok(DType::F32),
        Ok(T::Float16) => Ok(DType::F16),
        Ok(T::Bfloat16) => Ok(DType::Bf16),
        Ok(T::Int32) => Ok(DType::I32),
        Ok(T::Int64) => Ok(DType::I64),
        Ok(T::Bool) => Ok(DType::Bool),
        Ok(T::Double) => Ok(DType::F64),
        Ok(T::Int8) => Ok(DType::I8),
        Ok(T::Uint8) => Ok(DType::U8),
        Ok(T::Int16) => Ok(DType::I16),
        Ok(T::Uint16) => Ok(DType::U16),
        Ok(T::Uint32) => Ok(DType::U32),
        Ok(T::Uint64) => Ok(DType::U64),
        Ok(t) => Err(format!(
            "element type {} is not supported (Ferrite has {})",
            t.as_str_name(),
            DType::name_list()
        )),
        Err(_) => Err(format!("element type {elem_type} is not an ONNX type")),
    }
}

/// The ONNX element type of a dtype.
pub fn elem_type_of(dtype: DType) -> i32 {
    use tensor_proto::DataType as T;
    (match dtype {
        DType::F32 => T::Float,
        DType::F16 => T::Float16,
        DType::Bf16 => T::Bfloat16,
        DType::I32 => T::Int32,
        DType::I64 => T::Int64,
        DType::Bool => T::Bool,
        DType::F64 => T::Double,
        DType::I8 => T::Int8,
        DType::U8 => T::Uint8,
        DType::I16 => T::Int16,
        DType::U16 => T::Uint16,
        DType::U32 => T::Uint32,
        DType::U64 => T::Uint64,
    }) as i32
}

/// The shape of declared dims, checked against the IR's limits.
pub fn shape_of(dims: &[i64]) -> std::result::Result<Vec<usize>, String> {
    let mut shape = Vec::with_capacity(dims.len());
    for &d in dims {
        if d < 0 {
            return Err(format!("dimension {d} is negative"));
        }
        shape.push(usize::try_from(d).map_err(|_| format!("dimension {d} is too large"))?);
    }
    ferrite_ir::types::check_shape(&shape).map_err(|e| e.to_string())?;
    Ok(shape)
}

/// Decodes a `TensorProto` into a host tensor, reading external data through `ext`.
pub fn to_tensor(t: &TensorProto, ext: &mut dyn ExternalData) -> Result<Tensor> {
    let name = t.name().to_string();
    let bad = |m: String| Error::Invalid(format!("tensor `{name}`: {m}"));
    if t.segment.is_some() {
        return Err(Error::Unsupported(format!(
            "tensor `{name}`: segmented tensors are not supported"
        )));
    }
    let dtype =
        dtype_of(t.data_type()).map_err(|m| Error::Unsupported(format!("tensor `{name}`: {m}")))?;
    let shape = shape_of(&t.dims).map_err(bad)?;
    let ty = TensorType::new(dtype, shape).map_err(|e| bad(e.to_string()))?;
    let n = ty.numel();
    let width = dtype.size_bytes();
    let external = t.data_location() == tensor_proto::DataLocation::External;
    let data = if external {
        let (location, offset) = external_place(t, &name, (n * width) as u64)?;
        let err = |message: String| Error::ExternalData {
            tensor: name.clone(),
            message,
        };
        ext.check(&location, offset, (n * width) as u64)
            .map_err(err)?;
        let mut read = |dst: &mut [u8]| ext.read(&location, offset, dst).map_err(err);
        match dtype {
            // Any non-zero byte is true, as in `raw_data`.
            DType::Bool => {
                let mut bytes = vec![0u8; n];
                read(&mut bytes)?;
                from_le_bytes(dtype, &bytes)
            }
            _ => Data::read_le(dtype, n, read)?.expect("only bools can be invalid bytes"),
        }
    } else {
        match &t.raw_data {
            Some(bytes) => {
                if bytes.len() != n * width {
                    return Err(bad(format!(
                        "{ty} needs {} bytes of data, the file has {}",
                        n * width,
                        bytes.len()
                    )));
                }
                from_le_bytes(dtype, bytes)
            }
            None => from_fields(t, dtype, n).map_err(bad)?,
        }
    };
    Ok(Tensor { ty, data })
}

/// Where a tensor's external data lies: the file and the offset of its `expected` bytes.
fn external_place(t: &TensorProto, name: &str, expected: u64) -> Result<(String, u64)> {
    let err = |message: String| Error::ExternalData {
        tensor: name.to_string(),
        message,
    };
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for kv in &t.external_data {
        let v = kv.value();
        let number = || {
            v.parse::<u64>()
                .map_err(|_| err(format!("`{}` is `{v}`, not a byte count", kv.key())))
        };
        match kv.key() {
            "location" => location = Some(v.to_string()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| err("no `location` is given".into()))?;
    check_location(&location).map_err(err)?;
    if let Some(len) = length {
        if len != expected {
            return Err(err(format!(
                "`length` is {len} bytes but the tensor's dims and type need {expected}"
            )));
        }
    }
    if offset.checked_add(expected).is_none() {
        return Err(err(format!(
            "offset {offset} + length {expected} overflows"
        )));
    }
    Ok((location, offset))
}

/// `raw_data` as elements (the caller checked its length): little-endian, bools one
/// byte each, non-zero true.
fn from_le_bytes(dtype: DType, b: &[u8]) -> Data {
    match dtype {
        DType::Bool => Data::Bool(b.iter().map(|&x| x != 0).collect()),
        _ => Data::from_le_bytes(dtype, b).expect("raw_data holds whole elements"),
    }
}

fn from_fields(t: &TensorProto, dtype: DType, n: usize) -> std::result::Result<Data, String> {
    let count = |len: usize, field: &str| {
        if len == n {
            Ok(())
        } else {
            Err(format!("{n} elements are declared, `{field}` holds {len}"))
        }
    };
    Ok(match dtype {
        DType::F32 => {
            count(t.float_data.len(), "float_data")?;
            Data::F32(t.float_data.clone())
        }
        DType::I64 => {
            count(t.int64_data.len(), "int64_data")?;
            Data::I64(t.int64_data.clone())
        }
        DType::I32 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::I32(t.int32_data.clone())
        }
        DType::Bool => {
            count(t.int32_data.len(), "int32_data")?;
            Data::Bool(t.int32_data.iter().map(|&x| x != 0).collect())
        }
        DType::F16 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::F16(
                t.int32_data
                    .iter()
                    .map(|&x| f16::from_bits(x as u16))
                    .collect(),
            )
        }
        DType::Bf16 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::Bf16(
                t.int32_data
                    .iter()
                    .map(|&x| bf16::from_bits(x as u16))
                    .collect(),
            )
        }
        DType::F64 => {
            count(t.double_data.len(), "double_data")?;
            Data::F64(t.double_data.clone())
        }
        // The narrow integers are stored one per int32 (the low bits), u32 and u64 in
        // uint64_data, as onnx.proto specifies.
        DType::I8 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::I8(t.int32_data.iter().map(|&x| x as i8).collect())
        }
        DType::U8 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::U8(t.int32_data.iter().map(|&x| x as u8).collect())
        }
        DType::I16 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::I16(t.int32_data.iter().map(|&x| x as i16).collect())
        }
        DType::U16 => {
            count(t.int32_data.len(), "int32_data")?;
            Data::U16(t.int32_data.iter().map(|&x| x as u16).collect())
        }
        DType::U32 => {
            count(t.uint64_data.len(), "uint64_data")?;
            Data::U32(t.uint64_data.iter().map(|&x| x as u32).collect())
        }
        DType::U64 => {
            count(t.uint64_data.len(), "uint64_data")?;
            Data::U64(t.uint64_data.clone())
        }
    })
}

/// Encodes a host tensor as a `TensorProto` with `raw_data` (for tests and tools).
pub fn from_tensor(name: &str, t: &Tensor) -> TensorProto {
    let raw = t.data.to_le_bytes();
    TensorProto {
        dims: t.ty.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(elem_type_of(t.ty.dtype)),
        name: Some(name.to_string()),
        raw_data: Some(raw.into()),
        ..TensorProto::default()
    }
}

/// Decodes a serialized `TensorProto` (a node test's `input_0.pb`).
pub fn decode_tensor(bytes: &[u8]) -> Result<Tensor> {
    use prost::Message;
    let t = TensorProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))?;
    to_tensor(&t, &mut NoExternalData)
}

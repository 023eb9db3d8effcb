//! The numpy `.npy` file format, as bytes: [`encode`] a [`Tensor`], [`decode`] one.
//!
//! This module does no file I/O (only the `ferrite` crate touches files); it turns
//! tensors into the bytes of a `.npy` file and back, following numpy's
//! `numpy/lib/format.py`.
//!
//! **Writing** always produces format version 1.0, little-endian, C order, with the
//! header laid out byte for byte as `numpy.save` lays it out (including the spare
//! spaces numpy leaves so the header can be grown in place), so the files load with
//! `numpy.load`:
//!
//! | dtype  | descr  | notes |
//! |--------|--------|-------|
//! | `f32`  | `<f4`  | |
//! | `f16`  | `<f2`  | |
//! | `bf16` | `<V2`  | numpy has no bfloat16; `<V2` (two opaque bytes, the raw little-endian bf16 bits) is what `numpy.save` writes for an `ml_dtypes.bfloat16` array, so `np.load(p).view(ml_dtypes.bfloat16)` recovers the values, and Ferrite reads the file back losslessly |
//! | `i32`  | `<i4`  | |
//! | `i64`  | `<i8`  | |
//! | `bool` | `\|b1` | one byte per element, 0 or 1 |
//! | `f64`  | `<f8`  | |
//! | `i8`, `i16` | `\|i1`, `<i2` | |
//! | `u8`, `u16`, `u32`, `u64` | `\|u1`, `<u2`, `<u4`, `<u8` | |
//!
//! **Reading** accepts versions 1.0, 2.0 and 3.0, either byte order, and Fortran
//! order (the data is reordered to C order: `np.save(p, a.T)` writes Fortran order).
//! Every element type maps to the Ferrite dtype of the same kind and size, exactly:
//! `f2`, `f4`, `f8`, `i1` to `i8`, `u1` to `u8`, `b1` → `bool` (any non-zero byte is
//! true, as when numpy views such bytes), and `V2` → `bf16` (see above). Converting to
//! a graph's declared dtype is the caller's business.
//!
//! Anything else (complex numbers, strings, structured arrays, Python objects) is an
//! error. Decoding never panics: header sizes, the shape and the data length are
//! all checked against each other, against [`MAX_RANK`](crate::MAX_RANK) and
//! [`MAX_ELEMENTS`](crate::MAX_ELEMENTS) before anything is allocated.

use crate::types::{ShapeDisplay, TensorType};
use crate::{DType, Data, Error, Result, Tensor};

/// The six bytes every `.npy` file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// numpy aligns the start of the data to 64 bytes so it can be memory-mapped.
const ALIGN: usize = 64;

/// numpy pads the header so the growth axis can later hold this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// The longest header accepted. numpy itself refuses headers over 10 000 bytes by
/// default; a valid header for a tensor of rank <= 16 is far shorter, and the cap
/// keeps hostile files from making the parser chew on megabytes of text.
const MAX_HEADER_LEN: usize = 1 << 16;

/// The parsed header of a `.npy` file.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Header {
    /// Format version, `(major, minor)`: `(1, 0)`, `(2, 0)` or `(3, 0)`.
    pub version: (u8, u8),
    /// The numpy type string exactly as stored (`<f4`, `>i8`, `|b1`, ...).
    pub descr: String,
    /// True when the data is stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The array's shape (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// The dtype the data decodes to.
    pub dtype: DType,
    /// Offset of the first data byte.
    pub data_offset: usize,
}

impl Header {
    /// The bytes of data the header declares (element count times the stored
    /// element size): what a well-formed file holds after [`Header::data_offset`].
    /// Lets a reader check a file's size before reading its data.
    pub fn data_bytes(&self) -> Result<usize> {
        let elem = Elem::parse(&self.descr)?;
        // `read_header` checked the shape against MAX_ELEMENTS, so this fits.
        let n: usize = self.shape.iter().product();
        n.checked_mul(elem.size()).ok_or_else(|| {
            Error::Npy(format!(
                "the data of shape {} is too large",
                ShapeDisplay(&self.shape)
            ))
        })
    }
}

/// The longest prefix of a `.npy` file [`read_header`] may need: the magic, the
/// version, a 4-byte header length and the longest header accepted. A reader that
/// hands `read_header` this many bytes (or the whole file, if shorter) gets the
/// header without reading the data.
pub const MAX_PREFIX_LEN: usize = MAGIC.len() + 2 + 4 + MAX_HEADER_LEN;

/// The numpy type string [`encode`] writes for a dtype.
pub fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::Bf16 => "<V2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
    }
}

/// Encodes a tensor as a version 1.0 `.npy` file (little-endian, C order), with the
/// header numpy itself would write. The dtype is taken from the data, which a
/// well-formed tensor keeps equal to `t.ty.dtype`.
pub fn encode(t: &Tensor) -> Vec<u8> {
    let dtype = t.data.dtype();
    let shape = &t.ty.shape;
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        descr(dtype),
        shape_literal(shape)
    );
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // Version 1.0 stores the header length in a u16; a dict for rank <= MAX_RANK is
    // a few hundred bytes, so it always fits.
    let unpadded = MAGIC.len() + 2 + 2 + dict.len() + 1;
    let pad = ALIGN - unpadded % ALIGN;
    let header_len = dict.len() + pad + 1;
    let data_len = t.len() * dtype.size_bytes();
    let mut out = Vec::with_capacity(unpadded + pad + data_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + pad, b' ');
    out.push(b'\n');
    out.extend_from_slice(&t.data.to_le_bytes());
    out
}

/// A shape as a Python tuple literal: `()`, `(3,)`, `(2, 3)`.
fn shape_literal(shape: &[usize]) -> String {
    match shape {
        [] => "()".into(),
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// Decodes a `.npy` file into a tensor (see the module docs for the accepted types).
pub fn decode(bytes: &[u8]) -> Result<Tensor> {
    let header = read_header(bytes)?;
    let elem = Elem::parse(&header.descr)?;
    // `read_header` has checked the shape against the limits.
    let ty = TensorType::new(header.dtype, header.shape.clone())
        .map_err(|e| Error::Npy(format!("the .npy array: {e}")))?;
    let n = ty.numel();
    let payload = &bytes[header.data_offset..];
    let expected = n.checked_mul(elem.size()).ok_or_else(|| {
        Error::Npy(format!(
            "the data of shape {} is too large",
            ShapeDisplay(&ty.shape)
        ))
    })?;
    if payload.len() != expected {
        return Err(Error::Npy(format!(
            "an array of shape {} and type {} needs {expected} data bytes, but the file has {}",
            ShapeDisplay(&ty.shape),
            header.descr,
            payload.len()
        )));
    }
    let mut data = elem.decode(payload)?;
    if header.fortran_order && ty.rank() > 1 {
        data = match data {
            Data::F32(v) => Data::F32(fortran_to_c(&v, &ty.shape)),
            Data::F16(v) => Data::F16(fortran_to_c(&v, &ty.shape)),
            Data::Bf16(v) => Data::Bf16(fortran_to_c(&v, &ty.shape)),
            Data::I32(v) => Data::I32(fortran_to_c(&v, &ty.shape)),
            Data::I64(v) => Data::I64(fortran_to_c(&v, &ty.shape)),
            Data::Bool(v) => Data::Bool(fortran_to_c(&v, &ty.shape)),
            Data::F64(v) => Data::F64(fortran_to_c(&v, &ty.shape)),
            Data::I8(v) => Data::I8(fortran_to_c(&v, &ty.shape)),
            Data::U8(v) => Data::U8(fortran_to_c(&v, &ty.shape)),
            Data::I16(v) => Data::I16(fortran_to_c(&v, &ty.shape)),
            Data::U16(v) => Data::U16(fortran_to_c(&v, &ty.shape)),
            Data::U32(v) => Data::U32(fortran_to_c(&v, &ty.shape)),
            Data::U64(v) => Data::U64(fortran_to_c(&v, &ty.shape)),
        };
    }
    Ok(Tensor { ty, data })
}

/// Reads and validates the header of a `.npy` file without touching the data.
pub fn read_header(bytes: &[u8]) -> Result<Header> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::Npy(
            "not a .npy file (it does not start with \\x93NUMPY)".into(),
        ));
    }
    let rest = &bytes[MAGIC.len()..];
    let (major, minor) = match rest {
        [major, minor, ..] => (*major, *minor),
        _ => return Err(Error::Npy("truncated .npy header (no version)".into())),
    };
    // Version 1.0 has a u16 header length; 2.0 widened it to u32 and 3.0 changed the
    // header text from latin-1 to UTF-8.
    let len_bytes = match (major, minor) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        _ => {
            return Err(Error::Npy(format!(
                "unsupported .npy format version {major}.{minor}"
            )))
        }
    };
    let start = MAGIC.len() + 2 + len_bytes;
    if bytes.len() < start {
        return Err(Error::Npy(
            "truncated .npy header (no header length)".into(),
        ));
    }
    let header_len = bytes[MAGIC.len() + 2..start]
        .iter()
        .rev()
        .fold(0usize, |acc, &b| (acc << 8) | b as usize);
    if header_len > MAX_HEADER_LEN {
        return Err(Error::Npy(format!(
            ".npy header of {header_len} bytes exceeds the limit of {MAX_HEADER_LEN}"
        )));
    }
    let data_offset = start + header_len;
    if bytes.len() < data_offset {
        return Err(Error::Npy(format!(
            "truncated .npy header (it declares {header_len} bytes, the file has {})",
            bytes.len() - start
        )));
    }
    let text = std::str::from_utf8(&bytes[start..data_offset])
        .map_err(|_| Error::Npy(".npy header is not valid text".into()))?;
    let dict = HeaderParser::new(text).parse()?;
    let elem = Elem::parse(&dict.descr)?;
    crate::types::check_shape(&dict.shape)
        .map_err(|e| Error::Npy(format!("the .npy array: {e}")))?;
    Ok(Header {
        version: (major, minor),
        dtype: elem.dtype(),
        descr: dict.descr,
        fortran_order: dict.fortran_order,
        shape: dict.shape,
        data_offset,
    })
}

/// The three entries of a header dict.
struct HeaderDict {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A parser for the Python dict literal in a `.npy` header. It accepts what
/// `ast.literal_eval` would for the three keys numpy writes, and nothing else.
struct HeaderParser<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> HeaderParser<'a> {
    fn new(text: &'a str) -> Self {
        HeaderParser {
            text: text.as_bytes(),
            pos: 0,
        }
    }

    fn error(&self, what: &str) -> Error {
        Error::Npy(format!(
            "malformed .npy header at byte {}: {what}",
            self.pos
        ))
    }

    fn skip_space(&mut self) {
        while self.pos < self.text.len() && self.text[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", c as char)))
        }
    }

    /// Consumes `c` if it is next.
    fn eat(&mut self, c: u8) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn parse(mut self) -> Result<HeaderDict> {
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        self.expect(b'{')?;
        while !self.eat(b'}') {
            let key = self.string()?;
            self.expect(b':')?;
            let dup = match key.as_str() {
                "descr" => {
                    if self.peek() == Some(b'[') {
                        return Err(Error::Npy(
                            "structured .npy arrays (a list descr) are not supported".into(),
                        ));
                    }
                    descr.replace(self.string()?).is_some()
                }
                "fortran_order" => fortran.replace(self.boolean()?).is_some(),
                "shape" => shape.replace(self.tuple()?).is_some(),
                _ => return Err(self.error(&format!("unexpected key {key:?}"))),
            };
            if dup {
                return Err(self.error(&format!("key {key:?} appears twice")));
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        // numpy pads with spaces and ends with a newline; anything else is not a header.
        if self.peek().is_some() {
            return Err(self.error("unexpected text after the header dict"));
        }
        let missing = |k: &str| Error::Npy(format!("malformed .npy header: no {k:?} key"));
        Ok(HeaderDict {
            descr: descr.ok_or_else(|| missing("descr"))?,
            fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?,
            shape: shape.ok_or_else(|| missing("shape"))?,
        })
    }

    /// A single- or double-quoted string without escapes (numpy never writes any).
    fn string(&mut self) -> Result<String> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.error("expected a quoted string")),
        };
        let start = self.pos + 1;
        let len = self.text[start..]
            .iter()
            .position(|&c| c == quote || c == b'\\' || c == b'\n')
            .ok_or_else(|| self.error("unterminated string"))?;
        if self.text[start + len] != quote {
            return Err(self.error("unsupported character in string"));
        }
        self.pos = start + len + 1;
        // The slice lies between two ASCII quotes of a valid UTF-8 text.
        String::from_utf8(self.text[start..start + len].to_vec())
            .map_err(|_| self.error("string is not valid text"))
    }

    fn boolean(&mut self) -> Result<bool> {
        self.skip_space();
        for (word, value) in [("True", true), ("False", false)] {
            if self.text[self.pos..].starts_with(word.as_bytes()) {
                self.pos += word.len();
                return Ok(value);
            }
        }
        Err(self.error("expected True or False"))
    }

    /// A tuple of non-negative integers: `()`, `(3,)`, `(2, 3)`. Python 2 era files
    /// write longs as `3L`, which is accepted too.
    fn tuple(&mut self) -> Result<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        while !self.eat(b')') {
            let start = self.pos;
            let mut value: usize = 0;
            while let Some(&c) = self.text.get(self.pos).filter(|c| c.is_ascii_digit()) {
                value = value
                    .checked_mul(10)
                    .and_then(|v| v.checked_add((c - b'0') as usize))
                    .ok_or_else(|| self.error("shape extent is too large"))?;
                self.pos += 1;
            }
            if self.pos == start {
                return Err(self.error("expected a non-negative integer in the shape"));
            }
            if self.text.get(self.pos) == Some(&b'L') {
                self.pos += 1;
            }
            dims.push(value);
            if dims.len() > crate::MAX_RANK {
                return Err(Error::Npy(format!(
                    "the .npy array has more than {} axes",
                    crate::MAX_RANK
                )));
            }
            if !self.eat(b',') {
                self.expect(b')')?;
                break;
            }
        }
        Ok(dims)
    }
}

/// A stored element type: what the bytes are, independent of the dtype they decode to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Elem {
    /// IEEE float of 2, 4 or 8 bytes.
    Float(usize, Endian),
    /// Signed integer of 1, 2, 4 or 8 bytes.
    Int(usize, Endian),
    /// Unsigned integer of 1, 2, 4 or 8 bytes.
    UInt(usize, Endian),
    /// One byte, zero or not.
    Bool,
    /// Two opaque bytes holding a little-endian bfloat16 (the ml_dtypes convention).
    Bf16,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Endian {
    Little,
    Big,
}

impl Elem {
    fn parse(descr: &str) -> Result<Elem> {
        let unsupported = || {
            Error::Npy(format!(
                "unsupported .npy element type {descr:?} (Ferrite reads float16/32/64, \
                 int8-64, uint8-64, bool and bfloat16 stored as '<V2')"
            ))
        };
        let bytes = descr.as_bytes();
        let (order, kind, size) = match bytes {
            [order, kind, size @ ..] => (*order, *kind, size),
            _ => return Err(unsupported()),
        };
        let size: usize = match std::str::from_utf8(size).ok().and_then(|s| s.parse().ok()) {
            Some(s) => s,
            None => return Err(unsupported()),
        };
        // '|' means "byte order not applicable" and is only valid for one-byte types;
        // '=' (native) never appears in files numpy writes, so it is ambiguous here.
        let endian = match order {
            b'<' => Endian::Little,
            b'>' => Endian::Big,
            b'|' if size == 1 || kind == b'V' => Endian::Little,
            _ => return Err(unsupported()),
        };
        Ok(match (kind, size) {
            (b'f', 2 | 4 | 8) => Elem::Float(size, endian),
            (b'i', 1 | 2 | 4 | 8) => Elem::Int(size, endian),
            (b'u', 1 | 2 | 4 | 8) => Elem::UInt(size, endian),
            (b'b', 1) => Elem::Bool,
            (b'V', 2) if endian == Endian::Little => Elem::Bf16,
            _ => return Err(unsupported()),
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::Float(s, _) | Elem::Int(s, _) | Elem::UInt(s, _) => s,
            Elem::Bool => 1,
            Elem::Bf16 => 2,
        }
    }

    fn dtype(self) -> DType {
        match self {
            Elem::Float(2, _) => DType::F16,
            Elem::Float(4, _) => DType::F32,
            Elem::Float(..) => DType::F64,
            Elem::Int(1, _) => DType::I8,
            Elem::Int(2, _) => DType::I16,
            Elem::Int(4, _) => DType::I32,
            Elem::Int(..) => DType::I64,
            Elem::UInt(1, _) => DType::U8,
            Elem::UInt(2, _) => DType::U16,
            Elem::UInt(4, _) => DType::U32,
            Elem::UInt(..) => DType::U64,
            Elem::Bool => DType::Bool,
            Elem::Bf16 => DType::Bf16,
        }
    }

    /// Decodes `payload` (exactly `numel * size` bytes) in storage order.
    fn decode(self, payload: &[u8]) -> Result<Data> {
        if self == Elem::Bool {
            return Ok(Data::Bool(payload.iter().map(|&b| b != 0).collect()));
        }
        let endian = match self {
            Elem::Float(_, e) | Elem::Int(_, e) | Elem::UInt(_, e) => e,
            Elem::Bool | Elem::Bf16 => Endian::Little,
        };
        let little: Vec<u8> = if endian == Endian::Big {
            payload
                .chunks_exact(self.size())
                .flat_map(|c| c.iter().rev().copied())
                .collect()
        } else {
            payload.to_vec()
        };
        Data::from_le_bytes(self.dtype(), &little)
            .ok_or_else(|| Error::internal("npy: the payload is not a whole number of elements"))
    }
}

/// Reorders elements stored in Fortran order (first axis fastest) into C order.
fn fortran_to_c<T: Copy>(src: &[T], shape: &[usize]) -> Vec<T> {
    // Fortran strides: axis 0 has stride 1, each later axis the product of the earlier extents.
    let mut fstride = vec![1usize; shape.len()];
    for k in 1..shape.len() {
        fstride[k] = fstride[k - 1] * shape[k - 1];
    }
    let n = src.len();
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0usize; shape.len()];
    let mut offset = 0usize;
    for _ in 0..n {
        out.push(src[offset]);
        // Advance the C-order multi-index like an odometer, keeping the Fortran offset in step.
        for k in (0..shape.len()).rev() {
            index[k] += 1;
            offset += fstride[k];
            if index[k] < shape[k] {
                break;
            }
            offset -= fstride[k] * shape[k];
            index[k] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Builds a v1.0 file from a header dict and data, padding like numpy.
    fn file(dict: &str, data: &[u8]) -> Vec<u8> {
        let pad = ALIGN - (10 + dict.len() + 1) % ALIGN;
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&((dict.len() + pad + 1) as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend(std::iter::repeat_n(b' ', pad));
        out.push(b'\n');
        out.extend_from_slice(data);
        out
    }

    /// The exact bytes `numpy.save` (numpy 2.4) writes for
    /// `np.arange(6, dtype=np.float32).reshape(2, 3)`.
    fn numpy_arange_2x3() -> Vec<u8> {
        let mut v =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
                .to_vec();
        v.extend(std::iter::repeat_n(b' ', 58));
        v.push(b'\n');
        for x in [
            0u32,
            0x3f80_0000,
            0x4000_0000,
            0x4040_0000,
            0x4080_0000,
            0x40a0_0000,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    #[test]
    fn encode_matches_numpy_byte_for_byte() {
        let t = Tensor::from_f32(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let bytes = encode(&t);
        assert_eq!(bytes, numpy_arange_2x3());
        assert_eq!((bytes.len() - 24) % ALIGN, 0, "data starts 64-byte aligned");
    }

    #[test]
    fn encode_bf16_like_ml_dtypes() {
        // numpy.save(np.array([1.5, -2], dtype=ml_dtypes.bfloat16)).
        let mut expected =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }"
                .to_vec();
        expected.extend(std::iter::repeat_n(b' ', 60));
        expected.extend_from_slice(b"\n\xc0\x3f\x00\xc0");
        let t = Tensor {
            ty: TensorType::new(DType::Bf16, vec![2]).unwrap(),
            data: Data::Bf16(vec![bf16::from_f32(1.5), bf16::from_f32(-2.0)]),
        };
        assert_eq!(encode(&t), expected);
        assert_eq!(decode(&expected).unwrap(), t);
    }

    #[test]
    fn decode_numpy_bytes() {
        let t = decode(&numpy_arange_2x3()).unwrap();
        assert_eq!(
            t,
            Tensor::from_f32(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap()
        );
    }

    #[test]
    fn round_trip_every_dtype_and_rank() {
        for dtype in DType::ALL {
            for shape in [
                vec![],
                vec![0],
                vec![5],
                vec![2, 3],
                vec![2, 1, 3, 2],
                vec![3, 0, 2],
            ] {
                let ty = TensorType::new(dtype, shape).unwrap();
                let t = Tensor::random(&ty, 7);
                let bytes = encode(&t);
                let header = read_header(&bytes).unwrap();
                assert_eq!(header.data_offset % ALIGN, 0);
                assert_eq!(header.descr, descr(dtype));
                assert_eq!(decode(&bytes).unwrap(), t, "{ty}");
            }
        }
    }

    #[test]
    fn fortran_order_is_reordered() {
        // numpy.save(np.arange(6, dtype=np.int64).reshape(2, 3).T): shape (3, 2),
        // stored column-major, so the bytes hold 0..6 in order; in C order the array
        // is [[0, 3], [1, 4], [2, 5]].
        let data: Vec<u8> = (0i64..6).flat_map(|v| v.to_le_bytes()).collect();
        let bytes = file(
            "{'descr': '<i8', 'fortran_order': True, 'shape': (3, 2), }",
            &data,
        );
        let t = decode(&bytes).unwrap();
        assert_eq!(t.ty.shape, vec![3, 2]);
        assert_eq!(t.data, Data::I64(vec![0, 3, 1, 4, 2, 5]));
        // Rank 3: element (i, j, k) of shape (2, 3, 4) is at i + 2j + 6k in the file.
        let data: Vec<u8> = (0i32..24).flat_map(|v| v.to_le_bytes()).collect();
        let bytes = file(
            "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }",
            &data,
        );
        let t = decode(&bytes).unwrap();
        let mut want = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    want.push(i + 2 * j + 6 * k);
                }
            }
        }
        assert_eq!(t.data, Data::I32(want));
        // An empty array may have huge extents after its zero one; nothing overflows.
        let bytes = file(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 99999999999, 99999999999), }",
            &[],
        );
        let t = decode(&bytes).unwrap();
        assert_eq!(t.ty.shape, vec![0, 99999999999, 99999999999]);
        assert!(t.is_empty());
    }

    #[test]
    fn conversions_and_byte_orders() {
        let f8: Vec<u8> = [1.5f64, -0.1, 1e300]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let h = read_header(&file(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
            &f8,
        ))
        .unwrap();
        assert_eq!(h.dtype, DType::F64);
        let t = decode(&file(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
            &f8,
        ))
        .unwrap();
        assert_eq!(t.data, Data::F64(vec![1.5, -0.1, 1e300]));

        let be: Vec<u8> = [1.0f32, -2.5]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let t = decode(&file(
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
            &be,
        ))
        .unwrap();
        assert_eq!(t.data, Data::F32(vec![1.0, -2.5]));

        let be: Vec<u8> = [-3i64, 1 << 40]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let t = decode(&file(
            "{'descr': '>i8', 'fortran_order': False, 'shape': (2,), }",
            &be,
        ))
        .unwrap();
        assert_eq!(t.data, Data::I64(vec![-3, 1 << 40]));

        let t = decode(&file(
            "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }",
            b"\xff\x05",
        ))
        .unwrap();
        assert_eq!(t.data, Data::I8(vec![-1, 5]));
        let t = decode(&file(
            "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }",
            b"\xff\x05",
        ))
        .unwrap();
        assert_eq!(t.data, Data::U8(vec![255, 5]));
        let t = decode(&file(
            "{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }",
            b"\xff\xff\xff\xff",
        ))
        .unwrap();
        assert_eq!(t.data, Data::U32(vec![u32::MAX]));
        let t = decode(&file(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
            b"\x00\x01\x07",
        ))
        .unwrap();
        assert_eq!(t.data, Data::Bool(vec![false, true, true]));
        let t = decode(&file(
            "{'descr': '>f2', 'fortran_order': False, 'shape': (), }",
            b"\x3c\x00",
        ))
        .unwrap();
        assert_eq!(t.data, Data::F16(vec![f16::ONE]));

        let big = u64::MAX.to_be_bytes();
        let t = decode(&file(
            "{'descr': '>u8', 'fortran_order': False, 'shape': (1,), }",
            &big,
        ))
        .unwrap();
        assert_eq!(t.data, Data::U64(vec![u64::MAX]));
    }

    #[test]
    fn lenient_header_spellings() {
        // Key order, double quotes, Python 2 longs, a missing trailing comma, `(3)`.
        let data = [0u8; 12];
        for dict in [
            "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}",
            "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3L,)}",
            "{'descr':'<f4','fortran_order':False,'shape':(3)}",
        ] {
            let t = decode(&file(dict, &data)).unwrap();
            assert_eq!(t.ty.shape, vec![3], "{dict}");
        }
        // Version 2.0: a u32 header length.
        let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }\n";
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        v2.extend_from_slice(dict.as_bytes());
        v2.extend_from_slice(&7i32.to_le_bytes());
        assert_eq!(decode(&v2).unwrap().data, Data::I32(vec![7]));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good = numpy_arange_2x3();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "not a .npy"),
            (b"\x93NUMP".to_vec(), "not a .npy"),
            (b"\x93NUMPY".to_vec(), "no version"),
            (b"\x93NUMPY\x04\x00".to_vec(), "version 4.0"),
            (b"\x93NUMPY\x01\x00\x10".to_vec(), "no header length"),
            (b"\x93NUMPY\x01\x00\xff\x00{".to_vec(), "truncated"),
            (b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec(), "exceeds the limit"),
            (good[..good.len() - 1].to_vec(), "needs 24 data bytes"),
            ([good.clone(), vec![0]].concat(), "needs 24 data bytes"),
            (file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8]), "unsupported"),
            (file("{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", &[0; 4]), "unsupported"),
            (file("{'descr': '<f', 'fortran_order': False, 'shape': (1,), }", &[0; 4]), "unsupported"),
            (file("{'descr': '>V2', 'fortran_order': False, 'shape': (1,), }", &[0; 2]), "unsupported"),
            (file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", &[0; 4]), "structured"),
            (file("{'descr': '<f4', 'fortran_order': False}", &[0; 4]), "no \"shape\""),
            (file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", &[0; 4]), "twice"),
            (file("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", &[0; 4]), "True or False"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", &[]), "non-negative"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", &[0; 4]), "unexpected key"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': ()} x", &[0; 4]), "after the header"),
            (file("{'descr': '<f4, 'fortran_order': False, 'shape': ()}", &[0; 4]), "expected"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}", &[]), "too large"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536)}", &[]), "elements"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}", &[0; 4]), "axes"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000,)}", &[0; 4]), "needs 4000000 data bytes"),
            (file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", &[0; 4]), "expected"),
            (file("{'descr': '\u{e9}', 'fortran_order': False, 'shape': (1,)}", &[0; 4]), "unsupported"),
        ];
        for (bytes, want) in cases {
            let err = decode(&bytes).expect_err(want).to_string();
            assert!(err.contains(want), "expected {want:?} in {err:?}");
        }
        // Every truncation of a valid file is an error, never a panic.
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "prefix of {n} bytes");
        }
    }

    #[test]
    fn corrupted_headers_never_panic() {
        // Flip every byte of a valid header to a few values; decoding must return.
        let good = numpy_arange_2x3();
        let mut rng = crate::SplitMix64(1);
        for i in 0..128 {
            for v in [
                0u8,
                b'(',
                b')',
                b',',
                b'\'',
                b'9',
                b'{',
                0xff,
                (rng.next() & 0xff) as u8,
            ] {
                let mut bytes = good.clone();
                bytes[i] = v;
                let _ = decode(&bytes);
            }
        }
    }
}

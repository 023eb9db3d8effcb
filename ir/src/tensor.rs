//! Host tensors: a type plus densely stored, row-major data.

use crate::types::TensorType;
use crate::DType;
use half::{bf16, f16};
use std::fmt;

/// Row-major element storage, one variant per dtype.
#[derive(Clone, PartialEq, Debug)]
pub enum Data {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    Bf16(Vec<bf16>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `u64` elements.
    U64(Vec<u64>),
}

impl Data {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F16(_) => DType::F16,
            Data::Bf16(_) => DType::Bf16,
            Data::I32(_) => DType::I32,
            Data::I64(_) => DType::I64,
            Data::Bool(_) => DType::Bool,
            Data::F64(_) => DType::F64,
            Data::I8(_) => DType::I8,
            Data::U8(_) => DType::U8,
            Data::I16(_) => DType::I16,
            Data::U16(_) => DType::U16,
            Data::U32(_) => DType::U32,
            Data::U64(_) => DType::U64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::Bf16(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::Bool(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::I16(v) => v.len(),
            Data::U16(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::U64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as little-endian bytes (floats by their bits, bools as 0 or 1).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        macro_rules! le {
            ($v:expr) => {
                $v.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
        }
        match self {
            Data::F32(v) => le!(v),
            Data::F16(v) => le!(v),
            Data::Bf16(v) => le!(v),
            Data::I32(v) => le!(v),
            Data::I64(v) => le!(v),
            Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            Data::F64(v) => le!(v),
            Data::I8(v) => le!(v),
            Data::U8(v) => v.clone(),
            Data::I16(v) => le!(v),
            Data::U16(v) => le!(v),
            Data::U32(v) => le!(v),
            Data::U64(v) => le!(v),
        }
    }

    /// `n` elements of `dtype` whose little-endian bytes `read` writes into the buffer it is
    /// given (exactly `n` elements' worth). On a little-endian host that buffer is the
    /// elements' own storage, so the bytes are copied once, from wherever `read` takes them
    /// (a file's weights: no staging buffer to allocate and fault in); otherwise they are
    /// staged and decoded as [`Data::from_le_bytes`] does. `Ok(None)` where that returns
    /// `None` (a bool byte that is neither 0 nor 1).
    pub fn read_le<E>(
        dtype: DType,
        n: usize,
        read: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Option<Data>, E> {
        macro_rules! direct {
            ($variant:ident, $t:ty) => {{
                let mut v: Vec<$t> = vec![0 as $t; n];
                read(bytemuck::cast_slice_mut::<$t, u8>(&mut v))?;
                return Ok(Some(Data::$variant(v)));
            }};
        }
        if cfg!(target_endian = "little") {
            match dtype {
                DType::F32 => direct!(F32, f32),
                DType::I32 => direct!(I32, i32),
                DType::I64 => direct!(I64, i64),
                DType::F64 => direct!(F64, f64),
                DType::I8 => direct!(I8, i8),
                DType::U8 => direct!(U8, u8),
                DType::I16 => direct!(I16, i16),
                DType::U16 => direct!(U16, u16),
                DType::U32 => direct!(U32, u32),
                DType::U64 => direct!(U64, u64),
                DType::F16 | DType::Bf16 | DType::Bool => {}
            }
        }
        let mut bytes = vec![0u8; n * dtype.size_bytes()];
        read(&mut bytes)?;
        Ok(Data::from_le_bytes(dtype, &bytes))
    }

    /// Elements of `dtype` from little-endian bytes, or `None` when the length is not
    /// a whole number of elements or a bool byte is neither 0 nor 1.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<Data> {
        let size = dtype.size_bytes();
        if !bytes.len().is_multiple_of(size) {
            return None;
        }
        macro_rules! le {
            ($t:ty) => {
                bytes
                    .chunks_exact(size)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of the element size")))
                    .collect()
            };
        }
        // On a little-endian host the bytes are the elements: one copy into an aligned
        // vector (a model's weights are tens of MB; element by element was a third of
        // loading a ResNet).
        macro_rules! pod {
            ($t:ty) => {{
                if cfg!(target_endian = "little") {
                    let mut v: Vec<$t> = vec![0 as $t; bytes.len() / size];
                    bytemuck::cast_slice_mut::<$t, u8>(&mut v).copy_from_slice(bytes);
                    v
                } else {
                    le!($t)
                }
            }};
        }
        Some(match dtype {
            DType::F32 => Data::F32(pod!(f32)),
            DType::F16 => Data::F16(le!(f16)),
            DType::Bf16 => Data::Bf16(le!(bf16)),
            DType::I32 => Data::I32(pod!(i32)),
            DType::I64 => Data::I64(pod!(i64)),
            DType::Bool => {
                if bytes.iter().any(|&b| b > 1) {
                    return None;
                }
                Data::Bool(bytes.iter().map(|&b| b == 1).collect())
            }
            DType::F64 => Data::F64(pod!(f64)),
            DType::I8 => Data::I8(pod!(i8)),
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::I16 => Data::I16(pod!(i16)),
            DType::U16 => Data::U16(pod!(u16)),
            DType::U32 => Data::U32(pod!(u32)),
            DType::U64 => Data::U64(pod!(u64)),
        })
    }
}

/// A dense tensor on the host.
#[derive(Clone, PartialEq, Debug)]
pub struct Tensor {
    /// Dtype and shape.
    pub ty: TensorType,
    /// Elements in row-major order; the variant matches `ty.dtype`.
    pub data: Data,
}

impl Tensor {
    /// A tensor of `ty` filled with zeros.
    pub fn zeros(ty: &TensorType) -> Tensor {
        let n = ty.numel();
        let data = match ty.dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::F16 => Data::F16(vec![f16::ZERO; n]),
            DType::Bf16 => Data::Bf16(vec![bf16::ZERO; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::I64 => Data::I64(vec![0; n]),
            DType::Bool => Data::Bool(vec![false; n]),
            DType::F64 => Data::F64(vec![0.0; n]),
            DType::I8 => Data::I8(vec![0; n]),
            DType::U8 => Data::U8(vec![0; n]),
            DType::I16 => Data::I16(vec![0; n]),
            DType::U16 => Data::U16(vec![0; n]),
            DType::U32 => Data::U32(vec![0; n]),
            DType::U64 => Data::U64(vec![0; n]),
        };
        Tensor {
            ty: ty.clone(),
            data,
        }
    }

    /// An `f32` tensor from a shape and values.
    pub fn from_f32(shape: &[usize], values: Vec<f32>) -> crate::Result<Tensor> {
        let ty = TensorType::new(DType::F32, shape.to_vec())?;
        if ty.numel() != values.len() {
            return Err(crate::Error::Input(format!(
                "shape {ty} needs {} values, got {}",
                ty.numel(),
                values.len()
            )));
        }
        Ok(Tensor {
            ty,
            data: Data::F32(values),
        })
    }

    /// Builds a tensor of `ty` from f64 values, rounding to the dtype (ints truncate
    /// toward zero and saturate, bools are `v != 0`).
    pub fn from_f64(ty: &TensorType, values: &[f64]) -> Tensor {
        assert_eq!(ty.numel(), values.len(), "from_f64: element count");
        let data = match ty.dtype {
            DType::F32 => Data::F32(values.iter().map(|&v| v as f32).collect()),
            DType::F16 => Data::F16(values.iter().map(|&v| f64_to_f16(v)).collect()),
            DType::Bf16 => Data::Bf16(values.iter().map(|&v| f64_to_bf16(v)).collect()),
            DType::I32 => Data::I32(values.iter().map(|&v| v as i32).collect()),
            DType::I64 => Data::I64(values.iter().map(|&v| v as i64).collect()),
            DType::Bool => Data::Bool(values.iter().map(|&v| v != 0.0).collect()),
            DType::F64 => Data::F64(values.to_vec()),
            DType::I8 => Data::I8(values.iter().map(|&v| v as i8).collect()),
            DType::U8 => Data::U8(values.iter().map(|&v| v as u8).collect()),
            DType::I16 => Data::I16(values.iter().map(|&v| v as i16).collect()),
            DType::U16 => Data::U16(values.iter().map(|&v| v as u16).collect()),
            DType::U32 => Data::U32(values.iter().map(|&v| v as u32).collect()),
            DType::U64 => Data::U64(values.iter().map(|&v| v as u64).collect()),
        };
        Tensor {
            ty: ty.clone(),
            data,
        }
    }

    /// Builds a tensor of `ty` from i64 values (floats round to nearest, integers wrap
    /// as a C cast does, bools are `v != 0`).
    pub fn from_i64(ty: &TensorType, values: &[i64]) -> Tensor {
        let wide: Vec<i128> = values.iter().map(|&v| v as i128).collect();
        Tensor::from_i128(ty, &wide)
    }

    /// Builds a tensor of `ty` from integers (floats round once to nearest even,
    /// integers wrap as a C cast does, bools are `v != 0`).
    pub fn from_i128(ty: &TensorType, values: &[i128]) -> Tensor {
        assert_eq!(ty.numel(), values.len(), "from_i128: element count");
        macro_rules! wrap {
            ($t:ty) => {
                values.iter().map(|&v| v as $t).collect()
            };
        }
        let data = match ty.dtype {
            DType::I8 => Data::I8(wrap!(i8)),
            DType::U8 => Data::U8(wrap!(u8)),
            DType::I16 => Data::I16(wrap!(i16)),
            DType::U16 => Data::U16(wrap!(u16)),
            DType::I32 => Data::I32(wrap!(i32)),
            DType::U32 => Data::U32(wrap!(u32)),
            DType::I64 => Data::I64(wrap!(i64)),
            DType::U64 => Data::U64(wrap!(u64)),
            DType::Bool => Data::Bool(values.iter().map(|&v| v != 0).collect()),
            DType::F64 => Data::F64(values.iter().map(|&v| v as f64).collect()),
            DType::F32 => Data::F32(values.iter().map(|&v| v as f32).collect()),
            DType::F16 | DType::Bf16 => {
                // Rounding to odd in f64 keeps the second rounding exact.
                let f: Vec<f64> = values.iter().map(|&v| i128_to_f64_round_odd(v)).collect();
                return Tensor::from_f64(ty, &f);
            }
        };
        Tensor {
            ty: ty.clone(),
            data,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.ty.numel()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element widened to f64 (exact for all dtypes except 64-bit integers
    /// beyond 2^53, which round to nearest).
    pub fn to_f64(&self) -> Vec<f64> {
        macro_rules! widen {
            ($v:expr) => {
                $v.iter().map(|&x| x as f64).collect()
            };
        }
        match &self.data {
            Data::F32(v) => widen!(v),
            Data::F16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::Bf16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::I32(v) => widen!(v),
            Data::I64(v) => widen!(v),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            Data::F64(v) => v.clone(),
            Data::I8(v) => widen!(v),
            Data::U8(v) => widen!(v),
            Data::I16(v) => widen!(v),
            Data::U16(v) => widen!(v),
            Data::U32(v) => widen!(v),
            Data::U64(v) => widen!(v),
        }
    }

    /// Every element as i64 (floats truncate toward zero and saturate, `u64` beyond
    /// `i64::MAX` saturates), for indices and sizes.
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Data::I64(v) => v.clone(),
            Data::F32(_) | Data::F16(_) | Data::Bf16(_) | Data::F64(_) => {
                self.to_f64().into_iter().map(|x| x as i64).collect()
            }
            _ => self
                .to_i128()
                .into_iter()
                .map(|x| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
                .collect(),
        }
    }

    /// Every element as i128: exact for every integer dtype and bool; floats truncate
    /// toward zero and saturate (NaN is 0).
    pub fn to_i128(&self) -> Vec<i128> {
        macro_rules! widen {
            ($v:expr) => {
                $v.iter().map(|&x| x as i128).collect()
            };
        }
        match &self.data {
            Data::I8(v) => widen!(v),
            Data::U8(v) => widen!(v),
            Data::I16(v) => widen!(v),
            Data::U16(v) => widen!(v),
            Data::I32(v) => widen!(v),
            Data::U32(v) => widen!(v),
            Data::I64(v) => widen!(v),
            Data::U64(v) => widen!(v),
            Data::Bool(v) => widen!(v),
            _ => self.to_f64().into_iter().map(|x| x as i128).collect(),
        }
    }

    /// Deterministic pseudo-random contents for `ty` from `seed`: floats uniform in
    /// [-1, 1), ints in [0, 10), bools fair. Used for inputs a user did not supply.
    pub fn random(ty: &TensorType, seed: u64) -> Tensor {
        let mut rng = SplitMix64(seed);
        let n = ty.numel();
        match ty.dtype {
            d if !d.is_float() => {
                let m = if ty.dtype == DType::Bool { 2 } else { 10 };
                let v: Vec<i64> = (0..n).map(|_| (rng.next() % m) as i64).collect();
                Tensor::from_i64(ty, &v)
            }
            _ => {
                let v: Vec<f64> = (0..n).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
                Tensor::from_f64(ty, &v)
            }
        }
    }

    /// Compares with `expected` elementwise: `|a - e| <= atol + rtol * |e|`, NaN equal to
    /// NaN, infinities equal when identical. The error is the type difference or the
    /// worst mismatching element.
    pub fn check_close(&self, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), Mismatch> {
        if self.ty != expected.ty {
            return Err(Mismatch::Type {
                got: self.ty.clone(),
                expected: expected.ty.clone(),
            });
        }
        let (a, e) = (self.to_f64(), expected.to_f64());
        let mut worst: Option<(usize, f64)> = None;
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= atol + rtol * y.abs();
            if !ok {
                let err = if (x - y).is_nan() {
                    f64::INFINITY
                } else {
                    (x - y).abs()
                };
                if worst.is_none_or(|(_, w)| err > w) {
                    worst = Some((i, err));
                }
            }
        }
        match worst {
            None => Ok(()),
            Some((index, abs_error)) => Err(Mismatch::Element {
                index,
                got: a[index],
                expected: e[index],
                abs_error,
                rtol,
                atol,
            }),
        }
    }
}

/// Why [`Tensor::check_close`] found two tensors not close.
#[derive(Clone, PartialEq, Debug)]
pub enum Mismatch {
    /// The tensors' types (dtype or shape) differ.
    Type {
        /// The compared tensor's type.
        got: TensorType,
        /// The expected tensor's type.
        expected: TensorType,
    },
    /// Elements differ beyond the tolerance; this is the one with the largest error.
    Element {
        /// Its row-major index.
        index: usize,
        /// Its value, widened to f64.
        got: f64,
        /// The expected value, widened to f64.
        expected: f64,
        /// `|got - expected|` (infinite when one of them is NaN or both are opposite infinities).
        abs_error: f64,
        /// The relative tolerance of the comparison.
        rtol: f64,
        /// The absolute tolerance of the comparison.
        atol: f64,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Type { got, expected } => {
                write!(f, "type {got} differs from expected {expected}")
            }
            Mismatch::Element {
                index,
                got,
                expected,
                abs_error,
                rtol,
                atol,
            } => write!(
                f,
                "element {index} is {got} but expected {expected} (abs error {abs_error:e}, rtol {rtol:e}, atol {atol:e})"
            ),
        }
    }
}

impl std::error::Error for Mismatch {}

/// `v` converted to `dtype` exactly as [`Tensor::from_f64`] stores it, read back as
/// an f64: floats round once to nearest, ties to even (f16 and bf16 too); integers
/// truncate toward zero and saturate (NaN is 0); bools are `v != 0` as 0 or 1.
///
/// This is the rounding every float op applies to its f64 result, one value at a
/// time, without building a tensor.
pub fn round_to_dtype(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => f64_to_f16(v).to_f64(),
        DType::Bf16 => f64_to_bf16(v).to_f64(),
        DType::F64 => v,
        DType::I32 => v as i32 as f64,
        DType::I64 => v as i64 as f64,
        DType::I8 => v as i8 as f64,
        DType::U8 => v as u8 as f64,
        DType::I16 => v as i16 as f64,
        DType::U16 => v as u16 as f64,
        DType::U32 => v as u32 as f64,
        DType::U64 => v as u64 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
    }
}

/// `v` as an f64 rounded to odd: exact below 2^53, otherwise truncated to 53 bits
/// with the last bit set when anything was cut off. Rounding that value again to a
/// format of at most 51 bits (f32, f16, bf16) gives the correctly rounded result of
/// `v`, where `v as f64` followed by a second rounding could land on a tie the exact
/// value was not on.
pub fn i128_to_f64_round_odd(v: i128) -> f64 {
    let m = v.unsigned_abs();
    let bits = 128 - m.leading_zeros();
    if bits <= 53 {
        return v as f64;
    }
    let shift = bits - 53;
    let mut kept = m >> shift;
    if m & ((1u128 << shift) - 1) != 0 {
        kept |= 1;
    }
    // `kept` has 53 bits, so it and the power of two are exact in f64.
    let magnitude = kept as f64 * 2f64.powi(shift as i32);
    if v < 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// `v` rounded to the nearest f16, ties to even. half's own `from_f64` drops the low
/// 32 mantissa bits before rounding, so values just above a tie would round down;
/// rounding to odd in f32 first keeps them sticky, and the second rounding is exact.
fn f64_to_f16(v: f64) -> f16 {
    f16::from_f32(f64_to_f32_round_odd(v))
}

/// `v` rounded to the nearest bf16, ties to even (see [`f64_to_f16`] for why
/// through a round-to-odd f32).
fn f64_to_bf16(v: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_round_odd(v))
}

/// `v` rounded to f32 with round-to-odd: inexact results are truncated toward zero
/// with the last bit set. Rounding that again to a format with at least 2 fewer
/// significant bits (f16, bf16) gives the correctly rounded value of `v`.
fn f64_to_f32_round_odd(v: f64) -> f32 {
    let nearest = v as f32;
    if !v.is_finite() || nearest.is_infinite() || nearest as f64 == v {
        return nearest;
    }
    // Step back toward zero when rounding went away from it; in sign-magnitude bits,
    // one less is one ulp smaller in magnitude for either sign.
    let truncated = if (nearest as f64).abs() > v.abs() {
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    };
    f32::from_bits(truncated.to_bits() | 1)
}

/// A tiny, well-known PRNG (SplitMix64) so random inputs are reproducible everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits. (Not an `Iterator`: the stream never ends.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform f64 in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The correctly rounded (to nearest, ties to even) value of `v` in a 16-bit float
    /// format, found by searching its bit patterns: independent of the round-to-odd
    /// path. `max_bits` is the largest finite pattern and `past_max` the value one ulp
    /// above it, where rounding goes to infinity.
    fn nearest_even(v: f64, value: impl Fn(u16) -> f64, max_bits: u16, past_max: f64) -> f64 {
        let a = v.abs();
        // Largest non-negative pattern whose value is <= a (values grow with the bits).
        let (mut lo, mut hi) = (0u16, max_bits);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if value(mid) <= a {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let below = value(lo);
        let above = if lo == max_bits {
            past_max
        } else {
            value(lo + 1)
        };
        let up = a - below > above - a || (a - below == above - a && lo % 2 == 1);
        let r = match (up, lo == max_bits) {
            (false, _) => below,
            (true, true) => f64::INFINITY,
            (true, false) => above,
        };
        r.copysign(v)
    }

    /// Values that probe rounding: random magnitudes over the format's range, exact
    /// midpoints between neighbours, and the f64s just beside those midpoints.
    fn probes(value: impl Fn(u16) -> f64, max_bits: u16, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64(seed);
        let mut out = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY];
        for _ in 0..4000 {
            let bits = (rng.next() % max_bits as u64) as u16;
            let mid = (value(bits) + value(bits + 1)) / 2.0;
            let sign = if rng.next() & 1 == 0 { 1.0 } else { -1.0 };
            let beside = f64::from_bits(mid.to_bits() + 1);
            let under = f64::from_bits(mid.to_bits() - 1);
            let random = value(bits) + rng.next_f64() * (value(bits + 1) - value(bits));
            out.extend([mid, beside, under, random].map(|x| x * sign));
        }
        out
    }

    #[test]
    fn half_formats_round_to_nearest_even() {
        let f16_value = |b: u16| f16::from_bits(b).to_f64();
        let bf16_value = |b: u16| bf16::from_bits(b).to_f64();
        for v in probes(f16_value, 0x7BFF, 1) {
            let want = nearest_even(v, f16_value, 0x7BFF, 65536.0);
            assert_eq!(
                round_to_dtype(v, DType::F16).to_bits(),
                want.to_bits(),
                "{v:e}"
            );
        }
        for v in probes(bf16_value, 0x7F7F, 2) {
            let want = nearest_even(v, bf16_value, 0x7F7F, 2f64.powi(128));
            assert_eq!(
                round_to_dtype(v, DType::Bf16).to_bits(),
                want.to_bits(),
                "{v:e}"
            );
        }
        // The case half's own conversion gets wrong: just above a bf16 tie.
        assert_eq!(
            round_to_dtype(0.25878921151161194, DType::Bf16),
            0.259765625
        );
        assert!(round_to_dtype(f64::NAN, DType::F16).is_nan());
        assert_eq!(round_to_dtype(65520.0, DType::F16), f64::INFINITY);
        assert_eq!(round_to_dtype(65519.99, DType::F16), 65504.0);
    }

    #[test]
    fn scalar_rounding_matches_tensor_storage() {
        let mut rng = SplitMix64(7);
        let mut values = vec![0.0, -0.0, 0.5, -2.5, 1e10, -1e20, 3e38, 4e38];
        values.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 2f64.powi(63)]);
        values.extend(
            (0..500).map(|_| (rng.next_f64() - 0.5) * 2f64.powi((rng.next() % 80) as i32 - 40)),
        );
        for dtype in DType::ALL {
            let ty = TensorType::new(dtype, vec![values.len()]).unwrap();
            let stored = Tensor::from_f64(&ty, &values).to_f64();
            for (&v, &s) in values.iter().zip(&stored) {
                let r = round_to_dtype(v, dtype);
                assert!(
                    r.to_bits() == s.to_bits() || (r.is_nan() && s.is_nan()),
                    "{v:e} as {dtype}: {r:e} vs {s:e}"
                );
            }
        }
        assert_eq!(round_to_dtype(-2.7, DType::I32), -2.0);
        assert_eq!(round_to_dtype(1e20, DType::I32), i32::MAX as f64);
        assert_eq!(round_to_dtype(f64::NAN, DType::I64), 0.0);
        assert_eq!(round_to_dtype(f64::NAN, DType::Bool), 1.0);
    }

    #[test]
    fn little_endian_bytes_decode_to_the_elements_they_encode() {
        // The fast path copies bytes into an aligned vector; check it element by element
        // against the explicit little-endian decoding, from a misaligned slice too.
        for dtype in DType::ALL {
            let ty = TensorType::new(dtype, vec![37]).unwrap();
            let t = Tensor::random(&ty, 11);
            let bytes = t.data.to_le_bytes();
            let mut shifted = vec![0u8];
            shifted.extend_from_slice(&bytes);
            for b in [&bytes[..], &shifted[1..]] {
                let back = Data::from_le_bytes(dtype, b).unwrap();
                assert_eq!(back.to_le_bytes(), bytes, "{dtype}");
            }
            let size = dtype.size_bytes();
            for (i, v) in t.to_f64().iter().enumerate().take(5) {
                let one = Data::from_le_bytes(dtype, &bytes[i * size..(i + 1) * size]).unwrap();
                let got = Tensor {
                    ty: TensorType::new(dtype, vec![1]).unwrap(),
                    data: one,
                }
                .to_f64()[0];
                assert!(got.to_bits() == v.to_bits() || (got.is_nan() && v.is_nan()));
            }
            if size > 1 {
                assert!(Data::from_le_bytes(dtype, &bytes[1..]).is_none(), "{dtype}");
            }
        }
        let f = Data::from_le_bytes(DType::F32, &1.5f32.to_le_bytes()).unwrap();
        assert_eq!(f, Data::F32(vec![1.5]));
    }

    #[test]
    fn elements_read_in_place_equal_the_decoded_bytes() {
        // `read_le` hands out the elements' own storage on this host: what the reader writes
        // must come out as `from_le_bytes` decodes it, for every dtype, and a reader's error
        // must come back as it is.
        for dtype in DType::ALL {
            let ty = TensorType::new(dtype, vec![29]).unwrap();
            let bytes = Tensor::random(&ty, 5).data.to_le_bytes();
            let read = Data::read_le(dtype, 29, |dst: &mut [u8]| {
                assert_eq!(dst.len(), bytes.len(), "{dtype}");
                dst.copy_from_slice(&bytes);
                Ok::<(), String>(())
            })
            .unwrap()
            .unwrap();
            assert_eq!(read, Data::from_le_bytes(dtype, &bytes).unwrap(), "{dtype}");
            let failed = Data::read_le(dtype, 29, |_: &mut [u8]| Err("short file".to_string()));
            assert_eq!(failed, Err("short file".to_string()), "{dtype}");
        }
        let bad = Data::read_le(DType::Bool, 2, |dst: &mut [u8]| {
            dst.copy_from_slice(&[1, 7]);
            Ok::<(), ()>(())
        });
        assert_eq!(bad, Ok(None));
    }
}

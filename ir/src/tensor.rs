//! Host tensors: a type plus densely stored, row-major data.

use crate::types::TensorType;
use crate::DType;
use half::{bf16, f16};

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
        };
        Tensor {
            ty: ty.clone(),
            data,
        }
    }

    /// An `f32` tensor from a shape and values.
    pub fn from_f32(shape: &[usize], values: Vec<f32>) -> Result<Tensor, String> {
        let ty = TensorType::new(DType::F32, shape.to_vec())?;
        if ty.numel() != values.len() {
            return Err(format!(
                "shape {ty} needs {} values, got {}",
                ty.numel(),
                values.len()
            ));
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
            // half's from_f64 drops the low 32 mantissa bits before rounding, so values
            // just above a tie round down; round to odd in f32 first, then round once.
            DType::F16 => Data::F16(
                values
                    .iter()
                    .map(|&v| f16::from_f32(f64_to_f32_round_odd(v)))
                    .collect(),
            ),
            DType::Bf16 => Data::Bf16(
                values
                    .iter()
                    .map(|&v| bf16::from_f32(f64_to_f32_round_odd(v)))
                    .collect(),
            ),
            DType::I32 => Data::I32(values.iter().map(|&v| v as i32).collect()),
            DType::I64 => Data::I64(values.iter().map(|&v| v as i64).collect()),
            DType::Bool => Data::Bool(values.iter().map(|&v| v != 0.0).collect()),
        };
        Tensor {
            ty: ty.clone(),
            data,
        }
    }

    /// Builds a tensor of `ty` from i64 values (floats round to nearest, i32 wraps
    /// as a C cast does, bools are `v != 0`).
    pub fn from_i64(ty: &TensorType, values: &[i64]) -> Tensor {
        assert_eq!(ty.numel(), values.len(), "from_i64: element count");
        let data = match ty.dtype {
            DType::I32 => Data::I32(values.iter().map(|&v| v as i32).collect()),
            DType::I64 => Data::I64(values.to_vec()),
            DType::Bool => Data::Bool(values.iter().map(|&v| v != 0).collect()),
            _ => {
                let f: Vec<f64> = values.iter().map(|&v| v as f64).collect();
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

    /// Every element widened to f64 (exact for all dtypes except i64 beyond 2^53).
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::Bf16(v) => v.iter().map(|&x| x.to_f64()).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    /// Every element as i64 (floats truncate toward zero).
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Data::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            _ => self.to_f64().into_iter().map(|x| x as i64).collect(),
        }
    }

    /// Deterministic pseudo-random contents for `ty` from `seed`: floats uniform in
    /// [-1, 1), ints in [0, 10), bools fair. Used for inputs a user did not supply.
    pub fn random(ty: &TensorType, seed: u64) -> Tensor {
        let mut rng = SplitMix64(seed);
        let n = ty.numel();
        match ty.dtype {
            DType::I32 | DType::I64 | DType::Bool => {
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
    /// NaN, infinities equal when identical. Returns a description of the worst mismatch.
    pub fn check_close(&self, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
        if self.ty != expected.ty {
            return Err(format!(
                "type {} differs from expected {}",
                self.ty, expected.ty
            ));
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
            Some((i, err)) => Err(format!(
                "element {i} is {} but expected {} (abs error {err:e}, rtol {rtol:e}, atol {atol:e})",
                a[i], e[i]
            )),
        }
    }
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

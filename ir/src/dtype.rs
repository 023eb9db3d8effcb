//! Element types and PyTorch's type-promotion lattice.

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 binary32: the default, supported by every op.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bf16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer (indices, `arange`, `argmax`).
    I64,
    /// Boolean (comparisons, masks).
    Bool,
    /// IEEE 754 binary64.
    F64,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 16-bit signed integer.
    I16,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
}

/// The three promotion categories of PyTorch, lowest first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Category {
    /// `bool`.
    Bool,
    /// The signed and unsigned integers (`i8` to `u64`).
    Int,
    /// `f16`, `bf16`, `f32`, `f64`.
    Float,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// The name used in `.fg` text (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    /// Every dtype's name, as a list for messages: `f32, f16, bf16, i32, ...`.
    pub fn name_list() -> String {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        names.join(", ")
    }

    /// Parses a dtype name as written in `.fg` text.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element in memory (`bool` is one byte, as in numpy).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::Bf16 | DType::I16 | DType::U16 => 2,
            DType::I64 | DType::U64 | DType::F64 => 8,
            DType::Bool | DType::I8 | DType::U8 => 1,
        }
    }

    /// The promotion category.
    pub fn category(self) -> Category {
        match self {
            DType::F32 | DType::F16 | DType::Bf16 | DType::F64 => Category::Float,
            DType::I8
            | DType::U8
            | DType::I16
            | DType::U16
            | DType::I32
            | DType::U32
            | DType::I64
            | DType::U64 => Category::Int,
            DType::Bool => Category::Bool,
        }
    }

    /// True for `f16`, `bf16`, `f32` and `f64`.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// True for the integers, signed and unsigned.
    pub fn is_int(self) -> bool {
        self.category() == Category::Int
    }

    /// True for `u8`, `u16`, `u32` and `u64`.
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The range of an integer dtype, as `(min, max)`; `None` for floats and bool.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::I8 => (i8::MIN as i128, i8::MAX as i128),
            DType::U8 => (0, u8::MAX as i128),
            DType::I16 => (i16::MIN as i128, i16::MAX as i128),
            DType::U16 => (0, u16::MAX as i128),
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::U32 => (0, u32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            DType::U64 => (0, u64::MAX as i128),
            _ => return None,
        })
    }

    /// `x` wrapped into an integer dtype (two's complement, as a C cast does); any other
    /// dtype leaves it as it is.
    pub fn wrap_int(self, x: i128) -> i128 {
        match self {
            DType::I8 => x as i8 as i128,
            DType::U8 => x as u8 as i128,
            DType::I16 => x as i16 as i128,
            DType::U16 => x as u16 as i128,
            DType::I32 => x as i32 as i128,
            DType::U32 => x as u32 as i128,
            DType::I64 => x as i64 as i128,
            DType::U64 => x as u64 as i128,
            _ => x,
        }
    }

    /// `x` clamped into an integer dtype's range (float-to-integer casts saturate);
    /// any other dtype leaves it as it is.
    pub fn saturate_int(self, x: i128) -> i128 {
        match self.int_range() {
            Some((lo, hi)) => x.clamp(lo, hi),
            None => x,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `torch.promote_types` restricted to Ferrite's dtypes: the smallest type both
/// operands convert to without losing their category. Where PyTorch has no rule
/// (`u64` with a signed integer), numpy's is taken: `f64`.
pub fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a.category(), b.category()) {
        (Category::Bool, _) => b,
        (_, Category::Bool) => a,
        (Category::Int, Category::Int) => promote_ints(a, b),
        (Category::Int, Category::Float) => b,
        (Category::Float, Category::Int) => a,
        // Two different float types: f64 wins; f16 and bf16 meet at f32.
        (Category::Float, Category::Float) if a == F64 || b == F64 => F64,
        (Category::Float, Category::Float) => F32,
    }
}

/// Two different integer dtypes: the wider of two of one signedness; with mixed
/// signedness, the signed one if it is wider, else the next signed type wider than
/// the unsigned one (`u8` and `i8` meet at `i16`), and `f64` past `i64`.
fn promote_ints(a: DType, b: DType) -> DType {
    use DType::*;
    let (s, u) = match (a.is_unsigned(), b.is_unsigned()) {
        (false, false) | (true, true) => {
            return if a.size_bytes() >= b.size_bytes() {
                a
            } else {
                b
            }
        }
        (false, true) => (a, b),
        (true, false) => (b, a),
    };
    if s.size_bytes() > u.size_bytes() {
        return s;
    }
    match u {
        U8 => I16,
        U16 => I32,
        U32 => I64,
        _ => F64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        use DType::*;
        assert_eq!(promote(F16, Bf16), F32);
        assert_eq!(promote(F16, F32), F32);
        assert_eq!(promote(I32, I64), I64);
        assert_eq!(promote(I64, F16), F16);
        assert_eq!(promote(Bool, I32), I32);
        assert_eq!(promote(Bool, Bool), Bool);
        assert_eq!(promote(F64, F16), F64);
        assert_eq!(promote(I64, F64), F64);
        assert_eq!(promote(U8, I8), I16);
        assert_eq!(promote(U8, I16), I16);
        assert_eq!(promote(U8, U32), U32);
        assert_eq!(promote(I8, I32), I32);
        assert_eq!(promote(U32, I32), I64);
        assert_eq!(promote(U64, I8), F64);
        assert_eq!(promote(U64, U8), U64);
        assert_eq!(promote(U16, F16), F16);
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(promote(a, b), promote(b, a), "{a} {b}");
            }
        }
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }
}

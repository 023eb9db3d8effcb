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
}

/// The three promotion categories of PyTorch, lowest first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Category {
    /// `bool`.
    Bool,
    /// `i32`, `i64`.
    Int,
    /// `f16`, `bf16`, `f32`.
    Float,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::Bool,
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
        }
    }

    /// Every dtype's name, as a list for messages: `f32, f16, bf16, i32, i64, bool`.
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
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// The promotion category.
    pub fn category(self) -> Category {
        match self {
            DType::F32 | DType::F16 | DType::Bf16 => Category::Float,
            DType::I32 | DType::I64 => Category::Int,
            DType::Bool => Category::Bool,
        }
    }

    /// True for `f16`, `bf16` and `f32`.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// True for `i32` and `i64`.
    pub fn is_int(self) -> bool {
        self.category() == Category::Int
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `torch.promote_types` restricted to Ferrite's dtypes: the smallest type both
/// operands convert to without losing their category.
pub fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a.category(), b.category()) {
        (Category::Bool, _) => b,
        (_, Category::Bool) => a,
        (Category::Int, Category::Int) => I64,
        (Category::Int, Category::Float) => b,
        (Category::Float, Category::Int) => a,
        // Two different float types: f16 and bf16 meet at f32, anything with f32 is f32.
        (Category::Float, Category::Float) => F32,
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
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }
}

//! Constant tensors: weights baked into a graph.
//!
//! A [`Constant`] holds its tensor behind an [`Arc`], so cloning a graph, an op or a
//! node (which every pass does) shares the data instead of copying it. A constant may
//! carry a *key*, its name in the graph's weights file (`constant(name="fc1.weight")`
//! in `.fg` text); a constant without one is written inline in text
//! (`constant(values=[..])`), which is meant for small tensors.

use crate::types::TensorType;
use crate::{DType, Data, Tensor};
use std::fmt;
use std::sync::Arc;

/// Constants of at most this many elements are *small*: the optimizer may fold through
/// them as it does through literals, and importers write them inline. Larger ones are
/// leaves (weights) that every pass passes through untouched.
pub const SMALL_CONSTANT: usize = 16;

/// A constant tensor of a graph, shared between every copy of the graph.
#[derive(Clone)]
pub struct Constant {
    key: Option<String>,
    tensor: Arc<Tensor>,
}

impl Constant {
    /// An unnamed constant, written inline when printed.
    pub fn new(tensor: impl Into<Arc<Tensor>>) -> Constant {
        Constant {
            key: None,
            tensor: tensor.into(),
        }
    }

    /// A constant stored as tensor `key` of the graph's weights file when printed.
    pub fn named(key: impl Into<String>, tensor: impl Into<Arc<Tensor>>) -> Constant {
        Constant {
            key: Some(key.into()),
            tensor: tensor.into(),
        }
    }

    /// The tensor's name in the weights file, if it has one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The same tensor under another key (or none).
    pub fn with_key(&self, key: Option<String>) -> Constant {
        Constant {
            key,
            tensor: Arc::clone(&self.tensor),
        }
    }

    /// The tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The shared handle to the tensor (clone it to share the data).
    pub fn shared(&self) -> &Arc<Tensor> {
        &self.tensor
    }

    /// Its type, which is the type of the node that holds it.
    pub fn ty(&self) -> &TensorType {
        &self.tensor.ty
    }

    /// True for constants of at most [`SMALL_CONSTANT`] elements.
    pub fn is_small(&self) -> bool {
        self.tensor.len() <= SMALL_CONSTANT
    }

    /// Checks that the tensor's storage matches its type (its fields are public, so a
    /// hand-built tensor can disagree with itself).
    pub fn check(&self) -> Result<(), String> {
        let t = &*self.tensor;
        let (dtype, len) = storage(&t.data);
        if dtype != t.ty.dtype || len != t.ty.numel() {
            return Err(format!(
                "the constant is typed {} but stores {len} {dtype} elements",
                t.ty
            ));
        }
        crate::types::check_shape(&t.ty.shape).map_err(|e| e.to_string())
    }

    /// Its only element, when it has exactly one (a scalar or a `[1]` tensor).
    pub fn single_value(&self) -> Option<f64> {
        (self.tensor.len() == 1).then(|| self.tensor.to_f64()[0])
    }
}

/// The dtype and length of some storage.
fn storage(data: &Data) -> (DType, usize) {
    (data.dtype(), data.len())
}

/// True if two tensors have the same type and the same bits (so a NaN equals itself
/// and `-0.0` differs from `0.0`: a constant is its bits).
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    if a.ty != b.ty {
        return false;
    }
    match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) => x
            .iter()
            .map(|v| v.to_bits())
            .eq(y.iter().map(|v| v.to_bits())),
        (Data::F16(x), Data::F16(y)) => x
            .iter()
            .map(|v| v.to_bits())
            .eq(y.iter().map(|v| v.to_bits())),
        (Data::Bf16(x), Data::Bf16(y)) => x
            .iter()
            .map(|v| v.to_bits())
            .eq(y.iter().map(|v| v.to_bits())),
        (Data::I32(x), Data::I32(y)) => x == y,
        (Data::I64(x), Data::I64(y)) => x == y,
        (Data::Bool(x), Data::Bool(y)) => x == y,
        _ => false,
    }
}

impl PartialEq for Constant {
    /// Equal keys and bit-identical tensors; shared data compares without reading it.
    fn eq(&self, other: &Constant) -> bool {
        self.key == other.key
            && (Arc::ptr_eq(&self.tensor, &other.tensor) || same_bits(&self.tensor, &other.tensor))
    }
}

impl Constant {
    /// A 64-bit FNV-1a hash of the tensor's type and element bits: equal for constants
    /// that are equal, and (with overwhelming likelihood) different otherwise. For
    /// messages and debug output, never for deciding that two constants are the same.
    pub fn fingerprint(&self) -> u64 {
        let t = &*self.tensor;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
            }
        };
        eat(t.ty.to_string().as_bytes());
        eat(&t.data.to_le_bytes());
        h
    }
}

impl fmt::Debug for Constant {
    /// The key, the type, and the values of a small constant or the fingerprint of a
    /// large one (weights are too large to debug-print).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Constant");
        d.field("key", &self.key).field("ty", &self.tensor.ty);
        if self.is_small() {
            d.field("data", &self.tensor.data);
        } else {
            d.field("fingerprint", &format_args!("{:016x}", self.fingerprint()));
        }
        d.finish()
    }
}

//! Runtime tiles and the whole-tile operations the simulator computes with.
//!
//! A tile's elements live in one of four vectors: f32, f16 and bf16 as `f32` (an
//! f16 or bf16 tile holds values exactly representable in its dtype: every
//! operation rounds its result), f64 as `f64`, integers as `i64`, bools as `bool`.
//! An integer tile holds values of its dtype: every result wraps to its width (as
//! in C and Triton), the unsigned ones are zero-extended, and a `u64` element is
//! kept as its 64 bits, so the operations whose result depends on signedness
//! (comparisons, `maximum`/`minimum`, division, remainder, casts) read elements
//! through [`int_value`]. Each operation is a loop over whole vectors, never an
//! interpretation of the kernel per element.

use crate::tile::typed::{BinOp, Lit, ReduceOp, UnOp};
use ferrite_ir::loops::{scalar, Value};
use ferrite_ir::{DType, Tensor, TensorType};
use std::borrow::Cow;

/// The elements of a tile or a buffer, in row-major order.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum Elems {
    /// f32, f16, bf16.
    F(Vec<f32>),
    /// f64.
    D(Vec<f64>),
    /// The integers, signed and unsigned (`u64` as its bits).
    I(Vec<i64>),
    /// bool.
    B(Vec<bool>),
}

impl Elems {
    /// `n` zeros of the storage class of `d`.
    pub fn zeros(d: DType, n: usize) -> Elems {
        if d == DType::F64 {
            Elems::D(vec![0.0; n])
        } else if d.is_float() {
            Elems::F(vec![0.0; n])
        } else if d.is_int() {
            Elems::I(vec![0; n])
        } else {
            Elems::B(vec![false; n])
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Elems::F(v) => v.len(),
            Elems::D(v) => v.len(),
            Elems::I(v) => v.len(),
            Elems::B(v) => v.len(),
        }
    }

    /// The elements of a host tensor (exact: every dtype fits its storage class).
    pub fn from_tensor(t: &Tensor) -> Elems {
        match t.ty.dtype {
            DType::F64 => Elems::D(t.to_f64()),
            d if d.is_float() => Elems::F(t.to_f64().into_iter().map(|v| v as f32).collect()),
            // Exact for every integer dtype; `u64` keeps its bits.
            d if d.is_int() => Elems::I(t.to_i128().into_iter().map(|v| v as i64).collect()),
            _ => Elems::B(t.to_i64().into_iter().map(|v| v != 0).collect()),
        }
    }

    /// A host tensor of type `ty` holding these elements.
    pub fn to_tensor(&self, ty: &TensorType) -> Tensor {
        match self {
            Elems::F(v) => {
                let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
                Tensor::from_f64(ty, &f)
            }
            Elems::D(v) => Tensor::from_f64(ty, v),
            // `from_i64` wraps into the dtype, which gives `u64` its bits back.
            Elems::I(v) => Tensor::from_i64(ty, v),
            Elems::B(v) => {
                let i: Vec<i64> = v.iter().map(|&x| x as i64).collect();
                Tensor::from_i64(ty, &i)
            }
        }
    }
}

/// A tile value: dtype, static shape, elements. A scalar has shape `[]`.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Tile {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub elems: Elems,
}

/// A tile of pointers: element offsets into the buffer bound to a parameter.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct PtrTile {
    /// The pointer parameter the offsets are relative to.
    pub param: usize,
    pub shape: Vec<usize>,
    pub offsets: Vec<i64>,
}

/// An error computing a value (integer division by zero).
pub(crate) type OpResult<T> = Result<T, String>;

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Rounds floats to `d` when it is narrower than f32.
pub(crate) fn round_floats(d: DType, v: &mut [f32]) {
    if matches!(d, DType::F16 | DType::Bf16) {
        let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        let ty = TensorType {
            dtype: d,
            shape: vec![v.len()],
        };
        let t = Tensor::from_f64(&ty, &f);
        for (x, r) in v.iter_mut().zip(t.to_f64()) {
            *x = r as f32;
        }
    }
}

/// The integer an element of integer dtype `d` stands for (a `u64` element is
/// kept as its bits).
pub(crate) fn int_value(d: DType, bits: i64) -> i128 {
    if d == DType::U64 {
        bits as u64 as i128
    } else {
        bits as i128
    }
}

/// How integer dtype `d` keeps the value `v`, wrapped into its range.
pub(crate) fn int_bits(d: DType, v: i128) -> i64 {
    d.wrap_int(v) as i64
}

/// `v` (of shape `from`) broadcast to shape `to` with numpy rules; borrowed when
/// the shapes are equal. The checker guarantees `from` broadcasts to `to`.
pub(crate) fn expand<'a, T: Copy>(v: &'a [T], from: &[usize], to: &[usize]) -> Cow<'a, [T]> {
    if from == to {
        return Cow::Borrowed(v);
    }
    let n = numel(to);
    if v.len() == 1 {
        return Cow::Owned(vec![v[0]; n]);
    }
    // Input strides aligned to the output's axes; 0 where the input is stretched.
    let rank = to.len();
    let mut strides = vec![0usize; rank];
    let mut s = 1;
    for i in (0..from.len()).rev() {
        let axis = rank - from.len() + i;
        strides[axis] = if from[i] == 1 { 0 } else { s };
        s *= from[i];
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    let inner = to.last().copied().unwrap_or(1);
    let inner_stride = strides.last().copied().unwrap_or(0);
    if n == 0 {
        return Cow::Owned(out);
    }
    loop {
        let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        if inner_stride == 0 {
            out.extend(std::iter::repeat_n(v[base], inner));
        } else {
            out.extend_from_slice(&v[base..base + inner]);
        }
        // Advance the odometer over all axes but the last.
        let mut axis = rank.saturating_sub(1);
        loop {
            if axis == 0 {
                return Cow::Owned(out);
            }
            axis -= 1;
            idx[axis] += 1;
            if idx[axis] < to[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
}

impl Tile {
    /// A scalar literal of dtype `d`.
    pub fn lit(d: DType, lit: Lit) -> Tile {
        let elems = match lit {
            Lit::F(v) if d == DType::F64 => Elems::D(vec![v]),
            Lit::F(v) => {
                let mut x = vec![v as f32];
                round_floats(d, &mut x);
                Elems::F(x)
            }
            Lit::I(v) => Elems::I(vec![int_bits(d, v as i128)]),
            Lit::B(v) => Elems::B(vec![v]),
        };
        Tile {
            dtype: d,
            shape: Vec::new(),
            elems,
        }
    }

    pub fn numel(&self) -> usize {
        self.elems.len()
    }

    /// The value of an integer scalar (a `u64` beyond `i64::MAX` is `None`).
    pub fn as_int(&self) -> Option<i64> {
        match &self.elems {
            Elems::I(v) if v.len() == 1 => i64::try_from(int_value(self.dtype, v[0])).ok(),
            _ => None,
        }
    }

    /// The same elements with another shape of equal size.
    pub fn reshape(&self, shape: &[usize]) -> Tile {
        Tile {
            dtype: self.dtype,
            shape: shape.to_vec(),
            elems: self.elems.clone(),
        }
    }

    /// Broadcast to `shape`.
    pub fn broadcast(&self, shape: &[usize]) -> Tile {
        let elems = match &self.elems {
            Elems::F(v) => Elems::F(expand(v, &self.shape, shape).into_owned()),
            Elems::D(v) => Elems::D(expand(v, &self.shape, shape).into_owned()),
            Elems::I(v) => Elems::I(expand(v, &self.shape, shape).into_owned()),
            Elems::B(v) => Elems::B(expand(v, &self.shape, shape).into_owned()),
        };
        Tile {
            dtype: self.dtype,
            shape: shape.to_vec(),
            elems,
        }
    }

    /// Conversion to `d`, exactly as the reference interpreter converts: floats to
    /// integers truncate toward zero and saturate into `d`'s range (NaN is 0),
    /// integers wrap, anything to bool is `!= 0`, and every conversion into a float
    /// rounds once to nearest even (f64 to f16 or bf16 directly, integers of any
    /// width, `u64` beyond `i64::MAX` included, straight to `d`).
    pub fn cast(&self, d: DType) -> Tile {
        let src = self.dtype;
        let to_int = |x: f64| int_bits(d, d.saturate_int(x as i128));
        let elems = match &self.elems {
            Elems::F(v) if d == DType::F64 => Elems::D(v.iter().map(|&x| x as f64).collect()),
            Elems::F(v) if d.is_float() => {
                let mut out = v.clone();
                round_floats(d, &mut out);
                Elems::F(out)
            }
            Elems::F(v) if d.is_int() => Elems::I(v.iter().map(|&x| to_int(x as f64)).collect()),
            Elems::F(v) => Elems::B(v.iter().map(|&x| x != 0.0).collect()),
            Elems::D(v) if d == DType::F64 => Elems::D(v.clone()),
            Elems::D(v) if d.is_float() => Elems::F(
                v.iter()
                    .map(|&x| ferrite_ir::round_to_dtype(x, d) as f32)
                    .collect(),
            ),
            Elems::D(v) if d.is_int() => Elems::I(v.iter().map(|&x| to_int(x)).collect()),
            Elems::D(v) => Elems::B(v.iter().map(|&x| x != 0.0).collect()),
            Elems::I(v) if d.is_float() => {
                let f = |x: i64| match scalar::cast(Value::Int(int_value(src, x)), d) {
                    Value::Float(f) => f,
                    _ => f64::NAN,
                };
                if d == DType::F64 {
                    Elems::D(v.iter().map(|&x| f(x)).collect())
                } else {
                    Elems::F(v.iter().map(|&x| f(x) as f32).collect())
                }
            }
            Elems::I(v) if d.is_int() => {
                Elems::I(v.iter().map(|&x| int_bits(d, int_value(src, x))).collect())
            }
            Elems::I(v) => Elems::B(v.iter().map(|&x| x != 0).collect()),
            Elems::B(v) if d == DType::F64 => Elems::D(v.iter().map(|&x| x as u8 as f64).collect()),
            Elems::B(v) if d.is_float() => Elems::F(v.iter().map(|&x| x as u8 as f32).collect()),
            Elems::B(v) if d.is_int() => Elems::I(v.iter().map(|&x| x as i64).collect()),
            Elems::B(v) => Elems::B(v.clone()),
        };
        Tile {
            dtype: d,
            shape: self.shape.clone(),
            elems,
        }
    }

    /// An elementwise function of one operand.
    pub fn unary(&self, op: UnOp) -> OpResult<Tile> {
        let elems = match &self.elems {
            Elems::F(v) => {
                let f: fn(f32) -> f32 = match op {
                    UnOp::Neg => |x| -x,
                    UnOp::Abs => f32::abs,
                    // NaN propagates, as in PyTorch.
                    UnOp::Relu => |x| if x < 0.0 { 0.0 } else { x },
                    UnOp::Exp => f32::exp,
                    UnOp::Log => f32::ln,
                    UnOp::Sqrt => f32::sqrt,
                    UnOp::Rsqrt => |x| 1.0 / x.sqrt(),
                    UnOp::Tanh => f32::tanh,
                    UnOp::Erf => |x| ferrite_ir::interp::erf(x as f64) as f32,
                    UnOp::Erfc => |x| ferrite_ir::interp::erfc(x as f64) as f32,
                    // where(x >= 0, 1, e) / (1 + e), e = exp(-|x|): nothing overflows.
                    UnOp::Sigmoid => |x| {
                        let e = (-x.abs()).exp();
                        (if x >= 0.0 { 1.0 } else { e }) / (1.0 + e)
                    },
                    UnOp::Sin => f32::sin,
                    UnOp::Cos => f32::cos,
                    UnOp::Floor => f32::floor,
                    UnOp::Ceil => f32::ceil,
                    UnOp::Not => return Err(format!("{op:?} of a float tile")),
                };
                let mut out: Vec<f32> = v.iter().map(|&x| f(x)).collect();
                round_floats(self.dtype, &mut out);
                Elems::F(out)
            }
            Elems::D(v) => {
                let f = f64_unary(op)?;
                Elems::D(v.iter().map(|&x| f(x)).collect())
            }
            Elems::I(v) => {
                let f: fn(i128) -> i128 = match op {
                    UnOp::Neg => i128::wrapping_neg,
                    UnOp::Abs => i128::wrapping_abs,
                    UnOp::Relu => |x| x.max(0),
                    // Two's complement in i128 is the dtype's own once wrapped.
                    UnOp::Not => |x| !x,
                    _ => return Err(format!("{op:?} of an integer tile")),
                };
                let d = self.dtype;
                Elems::I(v.iter().map(|&x| int_bits(d, f(int_value(d, x)))).collect())
            }
            Elems::B(v) => match op {
                UnOp::Not => Elems::B(v.iter().map(|&x| !x).collect()),
                _ => return Err(format!("{op:?} of a bool tile")),
            },
        };
        Ok(Tile {
            dtype: self.dtype,
            shape: self.shape.clone(),
            elems,
        })
    }

    /// An elementwise function of two operands of one dtype, broadcast to
    /// `shape`; the result has dtype `out` (bool for comparisons).
    pub fn binary(op: BinOp, a: &Tile, b: &Tile, out: DType, shape: &[usize]) -> OpResult<Tile> {
        let elems = match (&a.elems, &b.elems) {
            (Elems::F(x), Elems::F(y)) => {
                let (x, y) = (expand(x, &a.shape, shape), expand(y, &b.shape, shape));
                float_binary(op, &x, &y, out)?
            }
            (Elems::D(x), Elems::D(y)) => {
                let (x, y) = (expand(x, &a.shape, shape), expand(y, &b.shape, shape));
                f64_binary(op, &x, &y)?
            }
            (Elems::I(x), Elems::I(y)) => {
                let (x, y) = (expand(x, &a.shape, shape), expand(y, &b.shape, shape));
                int_binary(op, &x, &y, a.dtype, out)?
            }
            (Elems::B(x), Elems::B(y)) => {
                let (x, y) = (expand(x, &a.shape, shape), expand(y, &b.shape, shape));
                let f: fn(bool, bool) -> bool = match op {
                    BinOp::And => |p, q| p & q,
                    BinOp::Or => |p, q| p | q,
                    BinOp::Xor => |p, q| p ^ q,
                    BinOp::Eq => |p, q| p == q,
                    BinOp::Ne => |p, q| p != q,
                    BinOp::Lt => |p, q| !p & q,
                    BinOp::Le => |p, q| p <= q,
                    BinOp::Gt => |p, q| p & !q,
                    BinOp::Ge => |p, q| p >= q,
                    _ => return Err(format!("{op:?} of bool tiles")),
                };
                Elems::B(x.iter().zip(y.iter()).map(|(&p, &q)| f(p, q)).collect())
            }
            _ => return Err(format!("{op:?} of tiles of different dtypes")),
        };
        Ok(Tile {
            dtype: out,
            shape: shape.to_vec(),
            elems,
        })
    }

    /// `where(self, a, b)` broadcast to `shape`; `a` and `b` share a dtype.
    pub fn select(&self, a: &Tile, b: &Tile, shape: &[usize]) -> OpResult<Tile> {
        let Elems::B(c) = &self.elems else {
            return Err("where's condition is not bool".into());
        };
        let c = expand(c, &self.shape, shape);
        fn pick<T: Copy>(c: &[bool], x: &[T], y: &[T]) -> Vec<T> {
            c.iter()
                .zip(x.iter().zip(y))
                .map(|(&k, (&p, &q))| if k { p } else { q })
                .collect()
        }
        let elems = match (&a.elems, &b.elems) {
            (Elems::F(x), Elems::F(y)) => Elems::F(pick(
                &c,
                &expand(x, &a.shape, shape),
                &expand(y, &b.shape, shape),
            )),
            (Elems::D(x), Elems::D(y)) => Elems::D(pick(
                &c,
                &expand(x, &a.shape, shape),
                &expand(y, &b.shape, shape),
            )),
            (Elems::I(x), Elems::I(y)) => Elems::I(pick(
                &c,
                &expand(x, &a.shape, shape),
                &expand(y, &b.shape, shape),
            )),
            (Elems::B(x), Elems::B(y)) => Elems::B(pick(
                &c,
                &expand(x, &a.shape, shape),
                &expand(y, &b.shape, shape),
            )),
            _ => return Err("where of tiles of different dtypes".into()),
        };
        Ok(Tile {
            dtype: a.dtype,
            shape: shape.to_vec(),
            elems,
        })
    }

    /// A reduction along `axis` (all axes when `None`). Float sums accumulate in
    /// f64 and round once; max and min propagate NaN; integer sums wrap, and
    /// unsigned max and min compare the values, not the bits.
    pub fn reduce(&self, op: ReduceOp, axis: Option<usize>) -> OpResult<Tile> {
        let (outer, len, inner, out_shape) = match axis {
            Some(ax) if ax < self.shape.len() => {
                let outer = numel(&self.shape[..ax]);
                let inner = numel(&self.shape[ax + 1..]);
                let mut s = self.shape.clone();
                s.remove(ax);
                (outer, self.shape[ax], inner, s)
            }
            _ => (1, self.numel(), 1, Vec::new()),
        };
        let at = |o: usize, k: usize, i: usize| (o * len + k) * inner + i;
        let elems = match &self.elems {
            Elems::F(v) => {
                let mut out = Vec::with_capacity(outer * inner);
                for o in 0..outer {
                    for i in 0..inner {
                        let r = match op {
                            ReduceOp::Sum => {
                                (0..len).map(|k| v[at(o, k, i)] as f64).sum::<f64>() as f32
                            }
                            ReduceOp::Max => (0..len)
                                .map(|k| v[at(o, k, i)])
                                .fold(f32::NEG_INFINITY, nan_max),
                            ReduceOp::Min => (0..len)
                                .map(|k| v[at(o, k, i)])
                                .fold(f32::INFINITY, nan_min),
                        };
                        out.push(r);
                    }
                }
                round_floats(self.dtype, &mut out);
                Elems::F(out)
            }
            Elems::D(v) => {
                let mut out = Vec::with_capacity(outer * inner);
                for o in 0..outer {
                    for i in 0..inner {
                        let it = (0..len).map(|k| v[at(o, k, i)]);
                        out.push(match op {
                            ReduceOp::Sum => it.sum::<f64>(),
                            ReduceOp::Max => it.fold(f64::NEG_INFINITY, nan_max64),
                            ReduceOp::Min => it.fold(f64::INFINITY, nan_min64),
                        });
                    }
                }
                Elems::D(out)
            }
            Elems::I(v) => {
                let d = self.dtype;
                let mut out = Vec::with_capacity(outer * inner);
                for o in 0..outer {
                    for i in 0..inner {
                        let it = (0..len).map(|k| int_value(d, v[at(o, k, i)]));
                        let r = match op {
                            ReduceOp::Sum => it.fold(0i128, i128::wrapping_add),
                            ReduceOp::Max => it.max().unwrap_or(i128::MIN),
                            ReduceOp::Min => it.min().unwrap_or(i128::MAX),
                        };
                        out.push(int_bits(d, r));
                    }
                }
                Elems::I(out)
            }
            Elems::B(_) => return Err("reduction of a bool tile".into()),
        };
        Ok(Tile {
            dtype: self.dtype,
            shape: out_shape,
            elems,
        })
    }

    /// Transpose of a 2-D tile.
    pub fn trans(&self) -> OpResult<Tile> {
        let [m, n] = self.shape[..] else {
            return Err("trans of a tile that is not 2-D".into());
        };
        fn t<T: Copy>(v: &[T], m: usize, n: usize) -> Vec<T> {
            (0..n)
                .flat_map(|j| (0..m).map(move |i| v[i * n + j]))
                .collect()
        }
        let elems = match &self.elems {
            Elems::F(v) => Elems::F(t(v, m, n)),
            Elems::D(v) => Elems::D(t(v, m, n)),
            Elems::I(v) => Elems::I(t(v, m, n)),
            Elems::B(v) => Elems::B(t(v, m, n)),
        };
        Ok(Tile {
            dtype: self.dtype,
            shape: vec![n, m],
            elems,
        })
    }

    /// `a @ b (+ acc)` of 2-D tiles of one dtype, accumulated in
    /// [`crate::tile::dot_dtype`] as the dot engine does.
    pub fn dot(a: &Tile, b: &Tile, acc: Option<&Tile>) -> OpResult<Tile> {
        let (&[m, k], &[k2, n]) = (&a.shape[..], &b.shape[..]) else {
            return Err("dot of tiles that are not 2-D".into());
        };
        if k != k2 {
            return Err("dot of tiles with different inner extents".into());
        }
        let Some(out_dtype) = crate::tile::dot_dtype(a.dtype) else {
            return Err("dot of bool tiles".into());
        };
        let start = match acc {
            Some(t) if t.dtype == out_dtype && t.numel() == m * n => t.elems.clone(),
            Some(_) => return Err("dot accumulator of the wrong type".into()),
            None => Elems::zeros(out_dtype, m * n),
        };
        let elems = match (&a.elems, &b.elems, start) {
            (Elems::F(x), Elems::F(y), Elems::F(mut out)) => {
                matmul_into(&mut out, x, y, k, n, |o, p, q| *o += p * q);
                Elems::F(out)
            }
            (Elems::D(x), Elems::D(y), Elems::D(mut out)) => {
                matmul_into(&mut out, x, y, k, n, |o, p, q| *o += p * q);
                Elems::D(out)
            }
            (Elems::I(x), Elems::I(y), Elems::I(mut out)) => {
                let (da, db) = (a.dtype, b.dtype);
                let x: Vec<i128> = x.iter().map(|&v| int_value(da, v)).collect();
                let y: Vec<i128> = y.iter().map(|&v| int_value(db, v)).collect();
                let mut wide: Vec<i128> = out.iter().map(|&v| v as i128).collect();
                matmul_into(&mut wide, &x, &y, k, n, |o, p, q| {
                    *o = o.wrapping_add(p.wrapping_mul(q))
                });
                for (o, w) in out.iter_mut().zip(wide) {
                    *o = int_bits(out_dtype, w);
                }
                Elems::I(out)
            }
            _ => return Err("dot of tiles of different dtypes, or of bools".into()),
        };
        Ok(Tile {
            dtype: out_dtype,
            shape: vec![m, n],
            elems,
        })
    }
}

/// `out[i, j] (+)= x[i, :] . y[:, j]` for row-major `x` (`k` columns) and `y` (`n`
/// columns), with `fma` adding one product.
fn matmul_into<T: Copy>(
    out: &mut [T],
    x: &[T],
    y: &[T],
    k: usize,
    n: usize,
    fma: impl Fn(&mut T, T, T),
) {
    for (i, row) in out.chunks_exact_mut(n.max(1)).enumerate() {
        for (kk, &aik) in x[i * k..(i + 1) * k].iter().enumerate() {
            let brow = &y[kk * n..(kk + 1) * n];
            for (o, &bkj) in row.iter_mut().zip(brow) {
                fma(o, aik, bkj);
            }
        }
    }
}

/// IEEE 754-2019 `maximum`, as PyTorch's `maximum` on NaN: NaN wins, and -0 < +0.
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        // Equal: the same value, or zeros of either sign (+0 wins).
        f32::from_bits(a.to_bits() & b.to_bits())
    } else if a > b {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `minimum`: NaN wins, and -0 < +0.
fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        f32::from_bits(a.to_bits() | b.to_bits())
    } else if a < b {
        a
    } else {
        b
    }
}

fn float_binary(op: BinOp, x: &[f32], y: &[f32], out: DType) -> OpResult<Elems> {
    let cmp: Option<fn(f32, f32) -> bool> = match op {
        BinOp::Lt => Some(|p, q| p < q),
        BinOp::Le => Some(|p, q| p <= q),
        BinOp::Gt => Some(|p, q| p > q),
        BinOp::Ge => Some(|p, q| p >= q),
        BinOp::Eq => Some(|p, q| p == q),
        BinOp::Ne => Some(|p, q| p != q),
        _ => None,
    };
    if let Some(f) = cmp {
        return Ok(Elems::B(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()));
    }
    let f: fn(f32, f32) -> f32 = match op {
        BinOp::Add => |p, q| p + q,
        BinOp::Sub => |p, q| p - q,
        BinOp::Mul => |p, q| p * q,
        BinOp::Div => |p, q| p / q,
        BinOp::Rem => |p, q| p % q,
        BinOp::Max => nan_max,
        BinOp::Min => nan_min,
        // In f64, rounded once: the reference interpreter's `pow` exactly.
        BinOp::Pow => |p, q| (p as f64).powf(q as f64) as f32,
        _ => return Err(format!("{op:?} of float tiles")),
    };
    let mut v: Vec<f32> = x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect();
    round_floats(out, &mut v);
    Ok(Elems::F(v))
}

/// [`nan_max`] in f64.
fn nan_max64(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        f64::from_bits(a.to_bits() & b.to_bits())
    } else if a > b {
        a
    } else {
        b
    }
}

/// [`nan_min`] in f64.
fn nan_min64(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        f64::from_bits(a.to_bits() | b.to_bits())
    } else if a < b {
        a
    } else {
        b
    }
}

/// A one-operand function of f64 elements: the reference interpreter's own
/// formulas, so f64 results are its results bit for bit.
fn f64_unary(op: UnOp) -> OpResult<fn(f64) -> f64> {
    Ok(match op {
        UnOp::Neg => |x| -x,
        UnOp::Abs => f64::abs,
        UnOp::Relu => |x| if x > 0.0 || x.is_nan() { x } else { 0.0 },
        UnOp::Exp => f64::exp,
        UnOp::Log => f64::ln,
        UnOp::Sqrt => f64::sqrt,
        UnOp::Rsqrt => |x| 1.0 / x.sqrt(),
        UnOp::Tanh => f64::tanh,
        UnOp::Erf => ferrite_ir::interp::erf,
        UnOp::Erfc => ferrite_ir::interp::erfc,
        UnOp::Sigmoid => |x| {
            let e = (-x.abs()).exp();
            (if x >= 0.0 { 1.0 } else { e }) / (1.0 + e)
        },
        UnOp::Sin => f64::sin,
        UnOp::Cos => f64::cos,
        UnOp::Floor => f64::floor,
        UnOp::Ceil => f64::ceil,
        UnOp::Not => return Err(format!("{op:?} of a float tile")),
    })
}

fn f64_binary(op: BinOp, x: &[f64], y: &[f64]) -> OpResult<Elems> {
    let cmp: Option<fn(f64, f64) -> bool> = match op {
        BinOp::Lt => Some(|p, q| p < q),
        BinOp::Le => Some(|p, q| p <= q),
        BinOp::Gt => Some(|p, q| p > q),
        BinOp::Ge => Some(|p, q| p >= q),
        BinOp::Eq => Some(|p, q| p == q),
        BinOp::Ne => Some(|p, q| p != q),
        _ => None,
    };
    if let Some(f) = cmp {
        return Ok(Elems::B(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()));
    }
    let f: fn(f64, f64) -> f64 = match op {
        BinOp::Add => |p, q| p + q,
        BinOp::Sub => |p, q| p - q,
        BinOp::Mul => |p, q| p * q,
        BinOp::Div => |p, q| p / q,
        BinOp::Rem => |p, q| p % q,
        BinOp::Max => nan_max64,
        BinOp::Min => nan_min64,
        BinOp::Pow => f64::powf,
        _ => return Err(format!("{op:?} of float tiles")),
    };
    Ok(Elems::D(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()))
}

/// Two-operand integer functions on operands of dtype `d`, computed on the values
/// (so unsigned operands compare, divide and take maxima as unsigned) and wrapped
/// into `out`.
fn int_binary(op: BinOp, x: &[i64], y: &[i64], d: DType, out: DType) -> OpResult<Elems> {
    let cmp: Option<fn(i128, i128) -> bool> = match op {
        BinOp::Lt => Some(|p, q| p < q),
        BinOp::Le => Some(|p, q| p <= q),
        BinOp::Gt => Some(|p, q| p > q),
        BinOp::Ge => Some(|p, q| p >= q),
        BinOp::Eq => Some(|p, q| p == q),
        BinOp::Ne => Some(|p, q| p != q),
        _ => None,
    };
    if matches!(d, DType::I32 | DType::I64)
        && matches!(out, DType::I32 | DType::I64 | DType::Bool)
        && !matches!(op, BinOp::Shl | BinOp::Shr)
    {
        // Offsets and indices: the signed 32/64-bit values are their bits, so i64
        // arithmetic wrapped once gives the result without widening every lane.
        return signed_binary(op, x, y, out);
    }
    let v = |bits: i64| int_value(d, bits);
    if let Some(f) = cmp {
        return Ok(Elems::B(
            x.iter().zip(y).map(|(&p, &q)| f(v(p), v(q))).collect(),
        ));
    }
    nonzero_divisors(op, y)?;
    let f: fn(i128, i128) -> i128 = match op {
        BinOp::Add => i128::wrapping_add,
        BinOp::Sub => i128::wrapping_sub,
        BinOp::Mul => i128::wrapping_mul,
        // Toward zero, as in C; `MIN / -1` wraps back to `MIN` in the dtype.
        BinOp::Div => i128::wrapping_div,
        BinOp::Rem => i128::wrapping_rem,
        BinOp::And => |p, q| p & q,
        BinOp::Or => |p, q| p | q,
        BinOp::Xor => |p, q| p ^ q,
        // The reference interpreter's shifts: outside `[0, bits)`, 0 or the sign fill.
        BinOp::Shl => scalar::shift_left,
        BinOp::Shr => scalar::shift_right,
        BinOp::Max => i128::max,
        BinOp::Min => i128::min,
        _ => return Err(format!("{op:?} of integer tiles")),
    };
    Ok(Elems::I(
        x.iter()
            .zip(y)
            .map(|(&p, &q)| int_bits(out, f(v(p), v(q))))
            .collect(),
    ))
}

/// An integer `/` or `%` by zero is an error (of any lane: the lowering divides
/// masked-off lanes by 1).
fn nonzero_divisors(op: BinOp, y: &[i64]) -> OpResult<()> {
    if matches!(op, BinOp::Div | BinOp::Rem) && y.contains(&0) {
        let what = if op == BinOp::Div {
            "division"
        } else {
            "remainder"
        };
        return Err(format!("integer {what} by zero"));
    }
    Ok(())
}

/// [`int_binary`] of i32 or i64 operands, in i64.
fn signed_binary(op: BinOp, x: &[i64], y: &[i64], out: DType) -> OpResult<Elems> {
    let cmp: Option<fn(i64, i64) -> bool> = match op {
        BinOp::Lt => Some(|p, q| p < q),
        BinOp::Le => Some(|p, q| p <= q),
        BinOp::Gt => Some(|p, q| p > q),
        BinOp::Ge => Some(|p, q| p >= q),
        BinOp::Eq => Some(|p, q| p == q),
        BinOp::Ne => Some(|p, q| p != q),
        _ => None,
    };
    if let Some(f) = cmp {
        return Ok(Elems::B(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()));
    }
    nonzero_divisors(op, y)?;
    let f: fn(i64, i64) -> i64 = match op {
        BinOp::Add => i64::wrapping_add,
        BinOp::Sub => i64::wrapping_sub,
        BinOp::Mul => i64::wrapping_mul,
        BinOp::Div => i64::wrapping_div,
        BinOp::Rem => i64::wrapping_rem,
        BinOp::And => |p, q| p & q,
        BinOp::Or => |p, q| p | q,
        BinOp::Xor => |p, q| p ^ q,
        BinOp::Max => i64::max,
        BinOp::Min => i64::min,
        _ => return Err(format!("{op:?} of integer tiles")),
    };
    let mut v: Vec<i64> = x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect();
    if out == DType::I32 {
        for r in &mut v {
            *r = *r as i32 as i64;
        }
    }
    Ok(Elems::I(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_follows_numpy_broadcasting() {
        let col = [1, 2];
        assert_eq!(&*expand(&col, &[2, 1], &[2, 3]), &[1, 1, 1, 2, 2, 2]);
        let row = [1, 2, 3];
        assert_eq!(&*expand(&row, &[3], &[2, 3]), &[1, 2, 3, 1, 2, 3]);
        assert_eq!(&*expand(&[7], &[], &[2, 2]), &[7, 7, 7, 7]);
        let mid = [1, 2];
        assert_eq!(
            &*expand(&mid, &[1, 2, 1], &[2, 2, 2]),
            &[1, 1, 2, 2, 1, 1, 2, 2]
        );
    }

    #[test]
    fn narrow_floats_and_ints_round_and_wrap() {
        let t = Tile::lit(DType::F16, Lit::F(0.1));
        let Elems::F(v) = &t.elems else { panic!() };
        assert_eq!(v[0], 0.099975586);
        let big = Tile {
            dtype: DType::I32,
            shape: vec![1],
            elems: Elems::I(vec![i32::MAX as i64]),
        };
        let one = Tile::lit(DType::I32, Lit::I(1));
        let r = Tile::binary(BinOp::Add, &big, &one, DType::I32, &[1]).unwrap();
        assert_eq!(r.elems, Elems::I(vec![i32::MIN as i64]));
        let zero = Tile::lit(DType::I32, Lit::I(0));
        assert!(Tile::binary(BinOp::Div, &one, &zero, DType::I32, &[]).is_err());
        let f = Tile {
            dtype: DType::F32,
            shape: vec![3],
            elems: Elems::F(vec![f32::NAN, 3e10, -2.7]),
        };
        assert_eq!(
            f.cast(DType::I32).elems,
            Elems::I(vec![0, i32::MAX as i64, -2])
        );
    }

    fn ints(d: DType, v: &[i128]) -> Tile {
        Tile {
            dtype: d,
            shape: vec![v.len()],
            elems: Elems::I(v.iter().map(|&x| int_bits(d, x)).collect()),
        }
    }

    fn values(t: &Tile) -> Vec<i128> {
        let Elems::I(v) = &t.elems else { panic!() };
        v.iter().map(|&x| int_value(t.dtype, x)).collect()
    }

    #[test]
    fn unsigned_and_narrow_integers_wrap_compare_and_convert_as_the_interpreter() {
        let big = u64::MAX as i128;
        let u = ints(DType::U64, &[big, 1 << 63, 3]);
        let one = ints(DType::U64, &[1, 1, 1]);
        // Above i64::MAX is still greater, and wraps past u64::MAX.
        let gt = Tile::binary(BinOp::Gt, &u, &one, DType::Bool, &[3]).unwrap();
        assert_eq!(gt.elems, Elems::B(vec![true, true, true]));
        let sum = Tile::binary(BinOp::Add, &u, &one, DType::U64, &[3]).unwrap();
        assert_eq!(values(&sum), vec![0, (1 << 63) + 1, 4]);
        let q = Tile::binary(
            BinOp::Div,
            &u,
            &ints(DType::U64, &[2, 2, 2]),
            DType::U64,
            &[3],
        );
        assert_eq!(values(&q.unwrap()), vec![big / 2, 1 << 62, 1]);
        assert_eq!(values(&u.reduce(ReduceOp::Max, None).unwrap()), vec![big]);
        // Rounded once from the exact value: u64::MAX is 2^64 in f32 and f64.
        let Elems::F(f) = u.cast(DType::F32).elems else {
            panic!()
        };
        assert_eq!(f, vec![18446744073709551616.0, 9223372036854775808.0, 3.0]);
        let Elems::D(f) = u.cast(DType::F64).elems else {
            panic!()
        };
        assert_eq!(f[0], 18446744073709551616.0);
        // u8 wraps; i8 of 200 is -56; u8 of -1 is 255.
        let b = ints(DType::U8, &[250, 200, 0]);
        let s = Tile::binary(
            BinOp::Add,
            &b,
            &ints(DType::U8, &[10, 100, 0]),
            DType::U8,
            &[3],
        );
        assert_eq!(values(&s.unwrap()), vec![4, 44, 0]);
        assert_eq!(values(&b.cast(DType::I8)), vec![-6, -56, 0]);
        assert_eq!(values(&ints(DType::I16, &[-1]).cast(DType::U8)), vec![255]);
        assert_eq!(
            values(&ints(DType::I8, &[-128]).unary(UnOp::Neg).unwrap()),
            vec![-128]
        );
        // Floats to integers truncate and saturate into the target's range.
        let f = Tile {
            dtype: DType::F64,
            shape: vec![4],
            elems: Elems::D(vec![-1.5, 300.7, f64::NAN, 1e30]),
        };
        assert_eq!(values(&f.cast(DType::U8)), vec![0, 255, 0, 255]);
        assert_eq!(
            values(&f.cast(DType::I16)),
            vec![-1, 300, 0, i16::MAX as i128]
        );
        assert_eq!(values(&f.cast(DType::U64)), vec![0, 300, 0, big]);
        // f64 to f16 rounds once: just above half-way between two f16 values rounds
        // up, where rounding through f32 first would land on the tie and round to even.
        let above_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let t = Tile {
            dtype: DType::F64,
            shape: vec![1],
            elems: Elems::D(vec![above_tie]),
        };
        let Elems::F(h) = t.cast(DType::F16).elems else {
            panic!()
        };
        assert_eq!(h, vec![1.0 + 2f32.powi(-10)]);
    }

    #[test]
    fn integer_dots_accumulate_in_i32_and_f64_dots_in_f64() {
        let a = Tile {
            dtype: DType::I8,
            shape: vec![1, 2],
            elems: Elems::I(vec![127, 127]),
        };
        let b = Tile {
            dtype: DType::I8,
            shape: vec![2, 1],
            elems: Elems::I(vec![127, 2]),
        };
        let d = Tile::dot(&a, &b, None).unwrap();
        assert_eq!((d.dtype, d.elems), (DType::I32, Elems::I(vec![127 * 129])));
        let x = Tile {
            dtype: DType::F64,
            shape: vec![1, 2],
            elems: Elems::D(vec![1e8, 1.0]),
        };
        let y = Tile {
            dtype: DType::F64,
            shape: vec![2, 1],
            elems: Elems::D(vec![1.0, 3.0]),
        };
        let d = Tile::dot(&x, &y, None).unwrap();
        assert_eq!(
            (d.dtype, d.elems),
            (DType::F64, Elems::D(vec![100_000_003.0]))
        );
    }

    #[test]
    fn reductions_dot_and_transpose() {
        let t = Tile {
            dtype: DType::F32,
            shape: vec![2, 3],
            elems: Elems::F(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        };
        assert_eq!(
            t.reduce(ReduceOp::Sum, Some(1)).unwrap().elems,
            Elems::F(vec![6.0, 15.0])
        );
        assert_eq!(
            t.reduce(ReduceOp::Max, Some(0)).unwrap().elems,
            Elems::F(vec![4.0, 5.0, 6.0])
        );
        assert_eq!(
            t.reduce(ReduceOp::Min, None).unwrap().elems,
            Elems::F(vec![1.0])
        );
        let tt = t.trans().unwrap();
        assert_eq!(tt.elems, Elems::F(vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        // [[1,2,3],[4,5,6]] @ [[1,4],[2,5],[3,6]] = [[14,32],[32,77]]
        let d = Tile::dot(&t, &tt, None).unwrap();
        assert_eq!(d.elems, Elems::F(vec![14.0, 32.0, 32.0, 77.0]));
    }
}

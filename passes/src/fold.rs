//! `fold_conv_epilogues`: batch norm (and any per-channel scale and shift) with constant
//! operands folded into the constant weight of the `conv` before it.
//!
//! In inference a batch norm after a conv is an affine map per output channel, `y =
//! conv(x, W) * s + t`, and so is a conv bias followed by the ONNX form of batch norm
//! (`(y - mean) * rsqrt(var + eps) * scale + bias`). When `W` and every per-channel
//! operand are constants, the map moves into the weight at compile time: `conv(x, W') +
//! t` with `W'[o] = W[o] * s[o]`, as ONNX Runtime and PyTorch's `fuse_conv_bn_eval` do.
//! The kernel then does one multiply-add less per element and per channel, and the
//! per-channel vectors are no longer loaded by the conv's epilogue (or recomputed by a
//! depthwise conv's gather).
//!
//! The chain that folds starts at a `conv` whose weight is a constant, and extends
//! through each single user of the current value that is
//!
//! - `add`, `sub` or `mul` of it and a per-channel constant (either side), `div` of it by
//!   one, or
//! - `batch_norm(it, weight, bias, mean, var)` with the four vectors constants
//!   (`s = weight / sqrt(var + eps)`, `t = bias - mean * s`, the interpreter's formula),
//!
//! where a *per-channel constant* is an expression of constants and literals (`reshape`,
//! `neg`, `sqrt`, `rsqrt`, `reciprocal`, `add`, `sub`, `mul`, `div`) that broadcasts
//! along the channel axis only, and the result keeps the conv's type. A value with
//! another user (or that is an output) ends the chain there, so nothing that is read
//! elsewhere changes. `s` and `t` are computed in f64 from the constants' values and
//! `W'` and `t` are rounded once to the weight's dtype; a chain whose scale or shift is
//! not finite, or that would make a finite weight overflow, is left as it is.
//!
//! The interpreter target runs the graph as given, so the folded pipeline is checked
//! against it like any other rewrite (within the rounding that moving the scale into
//! the weight changes).

use crate::error::{Error, Result};
use ferrite_ir::parallel::parallel_map;
use ferrite_ir::{BinaryOp, Constant, Graph, Op, Scalar, Tensor, TensorType, UnaryOp, ValueId};
use std::collections::HashMap;
use std::rc::Rc;

/// Per-channel constant expressions of more elements than this are not evaluated (a
/// per-channel vector has one per channel; this bounds the work on anything else).
const MAX_VECTOR: usize = 1 << 16;

/// How deep a per-channel constant expression may nest.
const MAX_DEPTH: usize = 16;

/// `g` with every foldable conv epilogue folded (see the module docs), and how many
/// were; `None` when there was none (the graph is then not copied). The weights are
/// scaled on up to `threads` threads (a ResNet's are tens of MB); the result does not
/// depend on it.
pub fn fold_conv_epilogues(g: &Graph, threads: usize) -> Result<Option<(Graph, usize)>> {
    let uses = g.use_counts();
    let mut user: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            user[x.index()] = Some(i);
        }
    }
    let mut eval = Evaluator {
        g,
        memo: HashMap::new(),
    };
    let mut affine = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if let Op::Conv { .. } = n.op {
            if let Some(a) = chain(g, i, &uses, &user, &mut eval) {
                affine.push((i, a));
            }
        }
    }
    let mut plans: HashMap<usize, Plan> = scale_all(g, &affine, threads).into_iter().collect();
    if plans.is_empty() {
        return Ok(None);
    }
    let count = plans.len();
    let bug = |e: ferrite_ir::Error| Error::Internal(format!("fold_conv_epilogues: {e}"));
    let mut skip = vec![false; g.nodes.len()];
    for p in plans.values() {
        for &c in &p.chain {
            skip[c] = true;
        }
    }
    let mut out = Graph::new(g.name.clone());
    out.declared_outputs = g.declared_outputs.clone();
    out.weights = g.weights.clone();
    let mut remap: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let v = if let Some(p) = plans.remove(&i) {
            let w = out.add_constant(p.weight, None).map_err(bug)?;
            let x = remap[n.inputs[0].index()];
            let last = *p.chain.last().unwrap_or(&i);
            let name = g.nodes[last].name.clone();
            let y = match p.bias {
                None => out.add(n.op.clone(), &[x, w], name).map_err(bug)?,
                Some(b) => {
                    let y = out.add(n.op.clone(), &[x, w], None).map_err(bug)?;
                    let b = out.add_constant(b, None).map_err(bug)?;
                    out.add(Op::Binary(BinaryOp::Add), &[y, b], name)
                        .map_err(bug)?
                }
            };
            // The chain's values are read by the chain only; its last by what follows.
            for &c in &p.chain {
                remap_at(&mut remap, c, y);
            }
            y
        } else if skip[i] {
            match remap.get(i) {
                Some(&v) if v != ValueId(u32::MAX) => v,
                _ => return Err(Error::internal("fold_conv_epilogues: a chain out of order")),
            }
        } else {
            let name = n.name.clone();
            match &n.op {
                Op::Param { .. } => out
                    .add_param(name.unwrap_or_default(), n.ty.clone())
                    .map_err(bug)?,
                Op::Literal { value } => out.add_literal(*value, n.ty.dtype).map_err(bug)?,
                Op::Constant(c) => out.add_constant(c.clone(), name).map_err(bug)?,
                op => {
                    let ins: Vec<ValueId> = n.inputs.iter().map(|x| remap[x.index()]).collect();
                    out.add(op.clone(), &ins, name).map_err(bug)?
                }
            }
        };
        remap_at(&mut remap, i, v);
    }
    out.outputs = g.outputs.iter().map(|o| remap[o.index()]).collect();
    let out = out.without_dead_nodes();
    ferrite_ir::verify(&out).map_err(bug)?;
    Ok(Some((out, count)))
}

/// Sets `remap[i] = v`, growing `remap` with placeholders.
fn remap_at(remap: &mut Vec<ValueId>, i: usize, v: ValueId) {
    if remap.len() <= i {
        remap.resize(i + 1, ValueId(u32::MAX));
    }
    remap[i] = v;
}

/// One conv to fold: the nodes of its epilogue chain, the new weight and the bias.
struct Plan {
    chain: Vec<usize>,
    weight: Constant,
    bias: Option<Constant>,
}

/// A conv's foldable epilogue: its chain of nodes and `y = conv * s + t` per output
/// channel, before the weight is scaled.
struct Affine {
    chain: Vec<usize>,
    s: Vec<f64>,
    t: Vec<f64>,
}

/// The plans of the convs in `affine` (those whose weights scale without overflow), the
/// weights scaled on up to `threads` threads, in `affine`'s order.
fn scale_all(g: &Graph, affine: &[(usize, Affine)], threads: usize) -> Vec<(usize, Plan)> {
    let plans = parallel_map(affine.len(), threads, |k| {
        let (i, a) = &affine[k];
        Some((*i, scale(g, *i, a)?))
    });
    plans.into_iter().flatten().collect()
}

/// The epilogue chain of the conv at node `i` and its per-channel affine map, if it has
/// a foldable one.
fn chain(
    g: &Graph,
    i: usize,
    uses: &[usize],
    user: &[Option<usize>],
    eval: &mut Evaluator<'_>,
) -> Option<Affine> {
    let conv = &g.nodes[i];
    let ty = &conv.ty;
    let w = g.node(*conv.inputs.get(1)?);
    let Op::Constant(_) = &w.op else {
        return None;
    };
    if !ty.dtype.is_float() || w.ty.dtype != ty.dtype || ty.rank() < 2 {
        return None;
    }
    let c = ty.shape[1];
    if w.ty.shape.first() != Some(&c) {
        return None;
    }
    // y = conv * s + t, per output channel.
    let (mut s, mut t) = (vec![1.0f64; c], vec![0.0f64; c]);
    let mut chain = Vec::new();
    let mut scaled = false;
    let mut cur = i;
    while uses[cur] == 1 {
        let Some(u) = user[cur] else { break };
        let n = &g.nodes[u];
        if n.ty != *ty {
            break;
        }
        let me = ValueId(cur as u32);
        let other = |k: usize| n.inputs.get(k).copied().filter(|&v| v != me);
        let step = match &n.op {
            Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div))
                if n.inputs.len() == 2 =>
            {
                let left = n.inputs[0] == me;
                let Some(k) = other(if left { 1 } else { 0 }) else {
                    break;
                };
                let Some(k) = eval.per_channel(k, ty) else {
                    break;
                };
                match (op, left) {
                    (BinaryOp::Add, _) => {
                        t.iter_mut().zip(&k).for_each(|(t, k)| *t += k);
                    }
                    (BinaryOp::Sub, true) => {
                        t.iter_mut().zip(&k).for_each(|(t, k)| *t -= k);
                    }
                    (BinaryOp::Sub, false) => {
                        s.iter_mut().for_each(|s| *s = -*s);
                        t.iter_mut().zip(&k).for_each(|(t, k)| *t = k - *t);
                        scaled = true;
                    }
                    (BinaryOp::Mul, _) => {
                        for o in 0..c {
                            s[o] *= k[o];
                            t[o] *= k[o];
                        }
                        scaled = true;
                    }
                    (BinaryOp::Div, true) => {
                        for o in 0..c {
                            s[o] /= k[o];
                            t[o] /= k[o];
                        }
                        scaled = true;
                    }
                    _ => break,
                }
                true
            }
            Op::BatchNorm { eps } if n.inputs.len() == 5 && n.inputs[0] == me => {
                let mut v = Vec::with_capacity(4);
                for k in 1..5 {
                    match other(k).and_then(|x| eval.vector(x, c)) {
                        Some(x) => v.push(x),
                        None => break,
                    }
                }
                if v.len() != 4 {
                    break;
                }
                for o in 0..c {
                    let sc = v[0][o] / (v[3][o] + eps).sqrt();
                    let sh = v[1][o] - v[2][o] * sc;
                    s[o] *= sc;
                    t[o] = t[o] * sc + sh;
                }
                scaled = true;
                true
            }
            _ => false,
        };
        if !step {
            break;
        }
        chain.push(u);
        cur = u;
    }
    // Only a scale changes the weight; a lone bias add is already one op.
    if !scaled || s.iter().chain(&t).any(|x| !x.is_finite()) {
        return None;
    }
    Some(Affine { chain, s, t })
}

/// The fold of the conv at node `i` with its epilogue `a`: the weight scaled, the shift
/// as a bias; `None` when a finite weight would overflow.
fn scale(g: &Graph, i: usize, a: &Affine) -> Option<Plan> {
    let Affine { chain, s, t } = a;
    let conv = &g.nodes[i];
    let ty = &conv.ty;
    let w = g.node(conv.inputs[1]);
    let Op::Constant(wc) = &w.op else {
        return None;
    };
    let c = ty.shape[1];
    let tensor = wc.tensor();
    let per = tensor.ty.numel() / c.max(1);
    let (weight, overflow) = match &tensor.data {
        // f32 weights (the common case, millions of them in a ResNet) directly: each
        // product in f64, rounded once, as the general path below does, without three
        // f64 copies of the tensor.
        ferrite_ir::Data::F32(v) if w.ty.dtype == ferrite_ir::DType::F32 => {
            // One output channel's `per` weights at a time: no division per element (it
            // was most of a ResNet's fold), and a loop the compiler vectorizes.
            // The overflow check is in the same pass: the weights are tens of MB, and a
            // second pass over both tensors cost as much as the scaling.
            let per = per.max(1);
            let mut scaled = vec![0f32; v.len()];
            let mut overflow = false;
            for (o, (dst, src)) in scaled.chunks_mut(per).zip(v.chunks(per)).enumerate() {
                let sc = s[o];
                // Not `any`: a loop without an early exit vectorizes.
                let mut lost = false;
                for (d, &x) in dst.iter_mut().zip(src) {
                    let y = (x as f64 * sc) as f32;
                    *d = y;
                    lost |= !y.is_finite() & x.is_finite();
                }
                overflow |= lost;
            }
            let weight = Tensor {
                ty: w.ty.clone(),
                data: ferrite_ir::Data::F32(scaled),
            };
            (weight, overflow)
        }
        _ => {
            let values = tensor.to_f64();
            let s = &s;
            let scaled_w: Vec<f64> = values
                .chunks(per.max(1))
                .enumerate()
                .flat_map(|(o, chunk)| chunk.iter().map(move |&x| x * s[o]))
                .collect();
            let weight = Tensor::from_f64(&w.ty, &scaled_w);
            let overflow = weight
                .to_f64()
                .iter()
                .zip(&values)
                .any(|(a, b)| !a.is_finite() && b.is_finite());
            (weight, overflow)
        }
    };
    if overflow {
        return None;
    }
    let bias = if t.iter().all(|&x| x == 0.0) {
        None
    } else {
        let mut shape = vec![1; ty.rank() - 1];
        shape[0] = c;
        let bt = TensorType::new(ty.dtype, shape).ok()?;
        let b = Tensor::from_f64(&bt, t);
        if b.to_f64().iter().any(|x| !x.is_finite()) {
            return None;
        }
        Some(Constant::new(b))
    };
    let weight = match wc.key() {
        Some(key) => Constant::named(format!("{key}.folded"), weight),
        None => Constant::new(weight),
    };
    Some(Plan {
        chain: chain.clone(),
        weight,
        bias,
    })
}

/// A constant's value in f64, with its shape.
struct Value {
    shape: Vec<usize>,
    data: Vec<f64>,
}

/// Evaluates small constant expressions in f64 (memoized).
struct Evaluator<'g> {
    g: &'g Graph,
    memo: HashMap<ValueId, Option<Rc<Value>>>,
}

impl Evaluator<'_> {
    /// The per-channel vector (one value per channel of `ty`, axis 1) that `v` is, if it
    /// is a constant expression broadcasting along that axis only.
    fn per_channel(&mut self, v: ValueId, ty: &TensorType) -> Option<Vec<f64>> {
        let x = self.value(v, 0)?;
        let (r, c) = (ty.rank(), ty.shape[1]);
        if x.shape.len() > r {
            return None;
        }
        let offset = r - x.shape.len();
        let mut stride = 0;
        let mut step = 1;
        for (j, &d) in x.shape.iter().enumerate().rev() {
            if offset + j == 1 && d == c {
                stride = step;
            } else if d != 1 {
                return None;
            }
            step *= d;
        }
        Some((0..c).map(|o| x.data[o * stride]).collect())
    }

    /// The values of `v` if it is a constant expression of shape `[c]` (a batch norm's
    /// vectors, which apply along axis 1 whatever the rank).
    fn vector(&mut self, v: ValueId, c: usize) -> Option<Vec<f64>> {
        let x = self.value(v, 0)?;
        (x.shape == [c]).then(|| x.data.clone())
    }

    fn value(&mut self, v: ValueId, depth: usize) -> Option<Rc<Value>> {
        if let Some(x) = self.memo.get(&v) {
            return x.clone();
        }
        let x = self.compute(v, depth).map(Rc::new);
        self.memo.insert(v, x.clone());
        x
    }

    fn compute(&mut self, v: ValueId, depth: usize) -> Option<Value> {
        let n = self.g.node(v);
        if depth > MAX_DEPTH || !n.ty.dtype.is_float() || n.ty.numel() > MAX_VECTOR {
            return None;
        }
        let shape = n.ty.shape.clone();
        match &n.op {
            Op::Constant(c) => Some(Value {
                shape,
                data: c.tensor().to_f64(),
            }),
            Op::Literal { value } => {
                let x = match *value {
                    Scalar::Float(f) => f,
                    Scalar::Int(i) => i as f64,
                    Scalar::Bool(b) => b as u8 as f64,
                };
                // The literal's value in its dtype.
                let x = Tensor::from_f64(&n.ty, &[x]).to_f64()[0];
                Some(Value {
                    shape,
                    data: vec![x],
                })
            }
            Op::Reshape { .. } => {
                let x = self.value(n.inputs[0], depth + 1)?;
                Some(Value {
                    shape,
                    data: x.data.clone(),
                })
            }
            Op::Unary(u) => {
                let f: fn(f64) -> f64 = match u {
                    UnaryOp::Neg => |x| -x,
                    UnaryOp::Sqrt => f64::sqrt,
                    UnaryOp::Rsqrt => |x| 1.0 / x.sqrt(),
                    UnaryOp::Reciprocal => |x| 1.0 / x,
                    _ => return None,
                };
                let x = self.value(n.inputs[0], depth + 1)?;
                Some(Value {
                    shape,
                    data: x.data.iter().map(|&x| f(x)).collect(),
                })
            }
            Op::Binary(b) => {
                let f: fn(f64, f64) -> f64 = match b {
                    BinaryOp::Add => |a, b| a + b,
                    BinaryOp::Sub => |a, b| a - b,
                    BinaryOp::Mul => |a, b| a * b,
                    BinaryOp::Div => |a, b| a / b,
                    _ => return None,
                };
                let a = self.value(n.inputs[0], depth + 1)?;
                let b = self.value(n.inputs[1], depth + 1)?;
                let data = (0..n.ty.numel())
                    .map(|i| {
                        f(
                            a.data[broadcast(i, &shape, &a.shape)],
                            b.data[broadcast(i, &shape, &b.shape)],
                        )
                    })
                    .collect();
                Some(Value { shape, data })
            }
            _ => None,
        }
    }
}

/// The flat index into a tensor of shape `from` (broadcast, right-aligned) that flat
/// index `i` of shape `to` reads.
fn broadcast(mut i: usize, to: &[usize], from: &[usize]) -> usize {
    let offset = to.len() - from.len();
    let (mut flat, mut step) = (0, 1);
    for a in (0..to.len()).rev() {
        let k = i % to[a];
        i /= to[a];
        if a >= offset {
            let d = from[a - offset];
            if d != 1 {
                flat += k * step;
            }
            step *= d;
        }
    }
    flat
}

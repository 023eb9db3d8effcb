//! Shape and dtype inference: the typing rule of every op.
//!
//! [`infer`] is the single source of truth for what an op produces; the graph
//! builder calls it when a node is added and the verifier calls it again to
//! check graphs that passes rewrote.

use crate::op::{ArgReduceOp, BagMode, BinaryOp, Op, ReduceOp, UnaryOp};
use crate::sym::Dim;
use crate::types::{broadcast_dim, broadcast_dims, normalize_axis, ShapeDisplay, TensorType};
use crate::{promote, window, DType, TypeError};

/// The dtype a bitwise op computes in: the promoted dtype of its operands, which must
/// be integers or bools (PyTorch: `bitwise_and` of a float tensor is an error).
fn bitwise_dtype(name: &str, x: DType, y: DType) -> Result<DType, TypeError> {
    if x.is_float() || y.is_float() {
        let float = if x.is_float() { x } else { y };
        return Err(TypeError::new(format!(
            "{name} is not defined for float tensors ({float}); it takes integers or bools"
        )));
    }
    let common = promote(x, y);
    if common.is_float() {
        return Err(TypeError::new(format!(
            "{name} of {x} and {y}: no integer dtype holds both (they promote to {common}); \
             cast one first"
        )));
    }
    Ok(common)
}

/// Infers the result type of `op` applied to operands of types `inputs`.
/// The error is a sentence naming the op and what is wrong, and names the
/// attribute at fault when an attribute's value is the problem.
pub fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, TypeError> {
    infer_dims(op, inputs, &mut ())
}

/// [`infer`] over any dimension type: with `usize` it is [`infer`]; with
/// [`crate::sym::Expr`] it types symbolic shapes, reading the node's symbolic
/// attributes from `cx` and recording there the constraints it assumes.
pub fn infer_dims<D: Dim>(
    op: &Op,
    inputs: &[&TensorType<D>],
    cx: &mut D::Cx,
) -> Result<TensorType<D>, TypeError> {
    if let Some(n) = op.arity() {
        if inputs.len() != n {
            return Err(TypeError::new(format!(
                "{} takes {n} operand{}, got {}",
                op.name(),
                if n == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
    }
    let name = op.name();
    let ty = match op {
        Op::Param { .. } => {
            return Err(TypeError::new("param nodes are typed by their declaration"))
        }
        Op::Literal { .. } => {
            return Err(TypeError::new("literal nodes are typed by their context"))
        }
        Op::Constant(c) => D::with_numbers(name, &[], &|_| Ok(c.ty().clone()))?,
        Op::Unary(u) => {
            let x = inputs[0];
            let dtype = match u {
                UnaryOp::Not => DType::Bool,
                UnaryOp::BitwiseNot => bitwise_dtype(name, x.dtype, x.dtype)?,
                _ if u.is_transcendental() && !x.dtype.is_float() => DType::F32,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sign
                    if x.dtype == DType::Bool =>
                {
                    return Err(TypeError::new(format!(
                        "{name} is not defined for bool tensors"
                    )))
                }
                _ => x.dtype,
            };
            x.with_dtype(dtype)
        }
        Op::Binary(b) => {
            let (x, y) = (inputs[0], inputs[1]);
            let shape = broadcast_dims(cx, &x.shape, &y.shape).map_err(|e| e.context(name))?;
            let common = promote(x.dtype, y.dtype);
            let dtype = if b.is_bitwise() {
                bitwise_dtype(name, x.dtype, y.dtype)?;
                if b.is_shift() && common == DType::Bool {
                    return Err(TypeError::new(format!(
                        "{name} is not defined for bool tensors (cast to an integer first)"
                    )));
                }
                common
            } else if b.is_comparison() || b.is_logical() {
                DType::Bool
            } else if *b == BinaryOp::Div && !common.is_float() {
                DType::F32
            } else if common == DType::Bool
                && !matches!(b, BinaryOp::Maximum | BinaryOp::Minimum | BinaryOp::Mul)
            {
                return Err(TypeError::new(format!(
                    "{name} is not defined for bool tensors (use `or`/`and`, or cast first)"
                )));
            } else {
                common
            };
            TensorType { dtype, shape }
        }
        Op::Where => {
            let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
            if c.dtype != DType::Bool {
                return Err(TypeError::new(format!(
                    "where: the condition must be bool, not {} (compare first, e.g. `gt(x, 0.0)`)",
                    c.dtype
                )));
            }
            let ab = broadcast_dims(cx, &a.shape, &b.shape).map_err(|e| e.context("where"))?;
            let shape = broadcast_dims(cx, &c.shape, &ab).map_err(|e| e.context("where"))?;
            TensorType {
                dtype: promote(a.dtype, b.dtype),
                shape,
            }
        }
        Op::Cast { to } => inputs[0].with_dtype(*to),
        Op::Reduce {
            op: r,
            axes,
            keepdim,
        } => {
            let x = inputs[0];
            let reduced =
                reduced_axes(name, axes.as_deref(), x.rank()).map_err(|e| e.on("axes"))?;
            let dtype = match r {
                ReduceOp::Mean if !x.dtype.is_float() => {
                    return Err(TypeError::new(format!(
                        "mean needs a float tensor, not {} (cast first)",
                        x.dtype
                    )))
                }
                // PyTorch sums and multiplies integers in i64 (u64 stays u64).
                ReduceOp::Sum | ReduceOp::Prod if x.dtype == DType::U64 => DType::U64,
                ReduceOp::Sum | ReduceOp::Prod if !x.dtype.is_float() => DType::I64,
                _ => x.dtype,
            };
            if matches!(r, ReduceOp::Max | ReduceOp::Min)
                && reduced
                    .iter()
                    .any(|&a| x.shape.get(a).is_some_and(|d| !D::nonzero(cx, d, name)))
            {
                return Err(TypeError::new(format!(
                    "{name} over an axis of extent 0 has no identity"
                )));
            }
            TensorType {
                dtype,
                shape: reduce_shape(&x.shape, &reduced, *keepdim),
            }
        }
        Op::ArgReduce {
            op: _,
            axis,
            keepdim,
        } => {
            let x = inputs[0];
            if x.dtype == DType::Bool {
                return Err(TypeError::new(format!(
                    "{name} is not defined for bool tensors"
                )));
            }
            let shape = match axis {
                None => {
                    if x.shape.iter().any(|d| !D::nonzero(cx, d, name)) {
                        return Err(TypeError::new(format!("{name} of an empty tensor")));
                    }
                    if *keepdim {
                        vec![D::lit(1); x.rank()]
                    } else {
                        vec![]
                    }
                }
                Some(a) => {
                    let a = normalize_axis(*a, x.rank()).map_err(|e| e.context(name).on("axis"))?;
                    if x.shape.get(a).is_some_and(|d| !D::nonzero(cx, d, name)) {
                        return Err(TypeError::new(format!("{name} over an axis of extent 0")));
                    }
                    let axes = if x.rank() == 0 { vec![] } else { vec![a] };
                    reduce_shape(&x.shape, &axes, *keepdim)
                }
            };
            let _ = ArgReduceOp::ArgMax;
            TensorType {
                dtype: DType::I64,
                shape,
            }
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let x = inputs[0];
            normalize_axis(*axis, x.rank()).map_err(|e| e.context(name).on("axis"))?;
            float_input(name, x)?;
            x.clone()
        }
        Op::LayerNorm { eps } | Op::RmsNorm { eps } => {
            let x = inputs[0];
            float_input(name, x)?;
            if x.rank() == 0 {
                return Err(TypeError::new(format!(
                    "{name} needs a tensor of rank >= 1"
                )));
            }
            if !eps.is_finite() || *eps < 0.0 {
                return Err(
                    TypeError::new(format!("{name}: eps must be finite and >= 0")).on("eps"),
                );
            }
            let last = x.shape[x.rank() - 1].clone();
            for (i, p) in inputs[1..].iter().enumerate() {
                let what = if i == 0 { "weight" } else { "bias" };
                if p.rank() != 1 || !D::same(cx, &p.shape[0], &last, name) {
                    return Err(TypeError::new(format!(
                        "{name}: {what} must have shape [{last}] (the last axis of {}), not {}",
                        x,
                        ShapeDisplay(&p.shape)
                    )));
                }
                if p.dtype != x.dtype {
                    return Err(TypeError::new(format!(
                        "{name}: {what} dtype {} differs from input dtype {}",
                        p.dtype, x.dtype
                    )));
                }
            }
            x.clone()
        }
        Op::MatMul => matmul_dims(cx, inputs[0], inputs[1])?,
        Op::Reshape { shape } => {
            let x = inputs[0];
            let numel = numel_of::<D>(&x.shape)
                .ok_or_else(|| TypeError::new("reshape: the input has too many elements"))?;
            let target = D::ints_attr(cx, "shape", shape).into_owned();
            let out = reshape_dims(cx, &target, &numel).map_err(|e| e.on("shape"))?;
            x.with_dtype(x.dtype).with_shape(out)
        }
        Op::Permute { dims } => {
            let x = inputs[0];
            let perm = permutation(name, dims, x.rank()).map_err(|e| e.on("dims"))?;
            x.with_shape(perm.iter().map(|&d| x.shape[d].clone()).collect())
        }
        Op::Transpose { dim0, dim1 } => {
            let x = inputs[0];
            let a = normalize_axis(*dim0, x.rank())
                .map_err(|e| e.context(format!("{name}: dim0")).on("dim0"))?;
            let b = normalize_axis(*dim1, x.rank())
                .map_err(|e| e.context(format!("{name}: dim1")).on("dim1"))?;
            let mut shape = x.shape.clone();
            if x.rank() > 0 {
                shape.swap(a, b);
            }
            x.with_shape(shape)
        }
        Op::Expand { shape } => {
            let x = inputs[0];
            let target = D::ints_attr(cx, "shape", shape).into_owned();
            x.with_shape(expand_dims(cx, &x.shape, &target).map_err(|e| e.on("shape"))?)
        }
        Op::Squeeze { axes } => {
            let x = inputs[0];
            let shape = match axes {
                None => x
                    .shape
                    .iter()
                    .filter(|d| D::is_one(cx, d) != Some(true))
                    .cloned()
                    .collect(),
                Some(axes) => {
                    let axes = unique_axes(name, axes, x.rank()).map_err(|e| e.on("axes"))?;
                    let mut shape = Vec::new();
                    for (i, d) in x.shape.iter().enumerate() {
                        if axes.contains(&i) {
                            if !D::same(cx, d, &D::lit(1), name) {
                                return Err(TypeError::new(format!(
                                    "squeeze: axis {i} has extent {d}, not 1"
                                ))
                                .on("axes"));
                            }
                        } else {
                            shape.push(d.clone());
                        }
                    }
                    shape
                }
            };
            x.with_shape(shape)
        }
        Op::Unsqueeze { axis } => {
            let x = inputs[0];
            let a = normalize_axis(*axis, x.rank() + 1).map_err(|e| e.context(name).on("axis"))?;
            let mut shape = x.shape.clone();
            shape.insert(a, D::lit(1));
            x.with_shape(shape)
        }
        Op::Slice {
            axis,
            start,
            end,
            step,
        } => {
            let x = inputs[0];
            if x.rank() == 0 {
                return Err(TypeError::new("slice needs a tensor of rank >= 1"));
            }
            let a = normalize_axis(*axis, x.rank()).map_err(|e| e.context(name).on("axis"))?;
            if *step < 1 {
                return Err(
                    TypeError::new(format!("slice: step must be at least 1, not {step}"))
                        .on("step"),
                );
            }
            let start = D::ints_attr(cx, "start", std::slice::from_ref(start))[0].clone();
            let end = D::ints_attr(cx, "end", std::slice::from_ref(end))[0].clone();
            let len = D::slice_len(cx, &x.shape[a], &start, &end, *step as usize);
            let mut shape = x.shape.clone();
            shape[a] = len;
            x.with_shape(shape)
        }
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err(TypeError::new("concat needs at least one operand"));
            }
            let first = inputs[0];
            if first.rank() == 0 {
                return Err(TypeError::new("concat: operands must have rank >= 1"));
            }
            let a = normalize_axis(*axis, first.rank()).map_err(|e| e.context(name).on("axis"))?;
            let mut shape = first.shape.clone();
            shape[a] = D::lit(0);
            for (i, t) in inputs.iter().enumerate() {
                if t.dtype != first.dtype {
                    return Err(TypeError::new(format!(
                        "concat: operand {i} has dtype {}, operand 0 has {}",
                        t.dtype, first.dtype
                    )));
                }
                if t.rank() != first.rank()
                    || t.shape
                        .iter()
                        .zip(&first.shape)
                        .enumerate()
                        .any(|(j, (x, y))| j != a && !D::same(cx, x, y, name))
                {
                    return Err(TypeError::new(format!(
                        "concat: operand {i} has shape {}, which differs from operand 0's {} off axis {a}",
                        ShapeDisplay(&t.shape),
                        ShapeDisplay(&first.shape)
                    )));
                }
                shape[a] = shape[a].plus(&t.shape[a]);
            }
            TensorType::checked(first.dtype, shape)?
        }
        Op::Pad { .. } => D::with_numbers(name, inputs, &|inputs| pad_type(op, inputs))?,
        Op::IndexSelect { axis } => {
            // numpy `take` / ONNX `Gather`: the indexed axis is replaced by the index's
            // axes, so the result has rank `x.rank() - 1 + index.rank()`.
            let (x, idx) = (inputs[0], inputs[1]);
            index_dtype(name, idx)?;
            if x.rank() == 0 {
                return Err(TypeError::new("index_select needs a tensor of rank >= 1"));
            }
            let a = normalize_axis(*axis, x.rank()).map_err(|e| e.context(name).on("axis"))?;
            let mut shape = Vec::with_capacity(x.rank() - 1 + idx.rank());
            shape.extend_from_slice(&x.shape[..a]);
            shape.extend_from_slice(&idx.shape);
            shape.extend_from_slice(&x.shape[a + 1..]);
            TensorType::checked(x.dtype, shape)?
        }
        Op::Gather { axis } => {
            let (x, idx) = (inputs[0], inputs[1]);
            index_dtype(name, idx)?;
            if x.rank() == 0 || idx.rank() != x.rank() {
                return Err(TypeError::new(format!(
                    "gather: the index must have the same rank as the input ({}), not {}",
                    x.rank(),
                    idx.rank()
                )));
            }
            let a = normalize_axis(*axis, x.rank()).map_err(|e| e.context(name).on("axis"))?;
            // take_along_dim: all axes but `axis` broadcast against each other.
            let mut shape = Vec::with_capacity(x.rank());
            for i in 0..x.rank() {
                if i == a {
                    shape.push(idx.shape[i].clone());
                } else {
                    let (p, q) = (&x.shape[i], &idx.shape[i]);
                    shape.push(match broadcast_dim(cx, p, q, name) {
                        Some(d) => d,
                        None => return Err(TypeError::new(format!(
                            "gather: index shape {} does not broadcast against input shape {} on axis {i}",
                            ShapeDisplay(&idx.shape),
                            ShapeDisplay(&x.shape)
                        ))),
                    });
                }
            }
            TensorType::checked(x.dtype, shape)?
        }
        Op::IndexAdd { .. } | Op::IndexReduce { .. } | Op::EmbeddingBag { .. } => {
            D::with_numbers(name, inputs, &|inputs| bag_type(op, inputs))?
        }
        Op::Full {
            shape,
            value,
            dtype,
        } => {
            check_fill("full", *value, *dtype)?;
            let shape = D::dims_attr(cx, "shape", shape).into_owned();
            TensorType::checked(*dtype, shape).map_err(|e| e.on("shape"))?
        }
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => {
            if !start.is_finite() || !end.is_finite() || !step.is_finite() || *step == 0.0 {
                let culprit = if !start.is_finite() {
                    "start"
                } else if !end.is_finite() {
                    "end"
                } else {
                    "step"
                };
                return Err(TypeError::new(
                    "arange: start, end and step must be finite, step non-zero",
                )
                .on(culprit));
            }
            if *dtype == DType::Bool {
                return Err(TypeError::new("arange: dtype bool is not allowed").on("dtype"));
            }
            let n = ((end - start) / step).ceil().max(0.0);
            if n > crate::types::MAX_ELEMENTS as f64 {
                return Err(TypeError::new(format!(
                    "arange: {n} elements exceeds the limit"
                )));
            }
            let end = D::ints_attr(cx, "end", &[0])[0].clone();
            let n = match D::int_value(&end) {
                Some(_) => D::lit(n as usize),
                None => {
                    // A symbolic end: `ceil((end - start) / step)` of integer start and step.
                    if start.fract() != 0.0 || step.fract() != 0.0 || *step < 1.0 {
                        return Err(TypeError::new(
                            "arange: a symbolic end needs an integer start and a positive integer step",
                        )
                        .on("end"));
                    }
                    D::range_len(cx, &end, *start as i64, *step as i64)
                }
            };
            TensorType::checked(*dtype, vec![n])?
        }
        Op::Conv { .. } | Op::ConvTranspose { .. } | Op::MaxPool { .. } | Op::AvgPool { .. } => {
            D::with_numbers(name, inputs, &|inputs| window_type(op, inputs))?
        }
        Op::BatchNorm { eps } => {
            let x = inputs[0];
            float_input(name, x)?;
            if x.rank() < 2 {
                return Err(TypeError::new(format!(
                    "{name} needs an [N, C, ...] tensor of rank >= 2, not {x}"
                )));
            }
            if !eps.is_finite() || *eps < 0.0 {
                return Err(
                    TypeError::new(format!("{name}: eps must be finite and >= 0")).on("eps"),
                );
            }
            let c = x.shape[1].clone();
            let what = ["weight", "bias", "running_mean", "running_var"];
            for (p, what) in inputs[1..].iter().zip(what) {
                if p.rank() != 1 || !D::same(cx, &p.shape[0], &c, name) || p.dtype != x.dtype {
                    return Err(TypeError::new(format!(
                        "{name}: {what} must be {}[{c}] (the channels of {x}), not {p}",
                        x.dtype
                    )));
                }
            }
            x.clone()
        }
        Op::Clip { min, max } => {
            let x = inputs[0];
            if x.dtype == DType::Bool {
                return Err(TypeError::new(format!(
                    "{name} is not defined for bool tensors"
                )));
            }
            for (bound, key) in [(min, "min"), (max, "max")] {
                if let Some(v) = bound {
                    let fits = if x.dtype.is_float() {
                        !v.is_nan()
                    } else {
                        fill_fits(*v, x.dtype)
                    };
                    if !fits {
                        return Err(TypeError::new(format!(
                            "{name}: {key} {} is not a bound of a {} tensor",
                            crate::op::format_float(*v),
                            x.dtype
                        ))
                        .on(key));
                    }
                }
            }
            x.clone()
        }
    };
    D::check(&ty.shape).map_err(|e| e.context(name))?;
    Ok(ty)
}

/// The typing rules of `index_add`, `index_reduce` and `embedding_bag`, over concrete shapes.
fn bag_type(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, TypeError> {
    let name = op.name();
    Ok(match op {
        Op::IndexAdd { axis } | Op::IndexReduce { axis, .. } => {
            let (base, idx, src) = (inputs[0], inputs[1], inputs[2]);
            index_dtype(name, idx)?;
            if base.dtype == DType::Bool {
                return Err(TypeError::new(format!("{name}: the base cannot be bool")));
            }
            if base.rank() == 0 || idx.rank() != 1 {
                return Err(TypeError::new(format!(
                    "{name} needs a base of rank >= 1 and a 1-D index, not {} and {}",
                    ShapeDisplay(&base.shape),
                    ShapeDisplay(&idx.shape)
                )));
            }
            let a = normalize_axis(*axis, base.rank()).map_err(|e| e.context(name).on("axis"))?;
            let mut want = base.shape.clone();
            want[a] = idx.shape[0];
            if src.dtype != base.dtype || src.shape != want {
                return Err(TypeError::new(format!(
                    "{name}: the source must be {} {} (the base's with the index's length on axis {a}), not {} {}",
                    base.dtype,
                    ShapeDisplay(&want),
                    src.dtype,
                    ShapeDisplay(&src.shape)
                )));
            }
            base.clone()
        }
        Op::EmbeddingBag {
            mode,
            include_last_offset,
            padding_idx,
        } => {
            if inputs.len() > 4 {
                return Err(TypeError::new(format!(
                    "embedding_bag takes 3 or 4 operands (table, indices, offsets, per_sample_weights), not {}",
                    inputs.len()
                )));
            }
            let (table, idx, offsets) = (inputs[0], inputs[1], inputs[2]);
            if !table.dtype.is_float() || table.rank() != 2 {
                return Err(TypeError::new(format!(
                    "embedding_bag: the table must be a 2-D float tensor, not {table}"
                )));
            }
            index_dtype(name, idx)?;
            index_dtype(name, offsets)?;
            if idx.rank() != 1 || offsets.rank() != 1 {
                return Err(TypeError::new(format!(
                    "embedding_bag: indices and offsets must be 1-D, not {} and {}",
                    ShapeDisplay(&idx.shape),
                    ShapeDisplay(&offsets.shape)
                )));
            }
            if let Some(w) = inputs.get(3) {
                if *mode != BagMode::Sum {
                    return Err(TypeError::new(format!(
                        "embedding_bag: per_sample_weights need mode=\"sum\", not \"{}\"",
                        mode.name()
                    ))
                    .on("mode"));
                }
                if w.dtype != table.dtype || w.shape != idx.shape {
                    return Err(TypeError::new(format!(
                        "embedding_bag: per_sample_weights must be {} {} like the indices, not {w}",
                        table.dtype,
                        ShapeDisplay(&idx.shape)
                    )));
                }
            }
            let rows = table.shape[0] as i64;
            if let Some(p) = *padding_idx {
                if p < -rows || p >= rows {
                    return Err(TypeError::new(format!(
                        "embedding_bag: padding_idx {p} is outside -{rows}..{rows}"
                    ))
                    .on("padding_idx"));
                }
            }
            let bags = match (*include_last_offset, offsets.shape[0]) {
                (true, 0) => {
                    return Err(TypeError::new(
                        "embedding_bag: include_last_offset needs at least one offset",
                    )
                    .on("include_last_offset"))
                }
                (true, n) => n - 1,
                (false, n) => n,
            };
            TensorType::new(table.dtype, vec![bags, table.shape[1]])?
        }
        _ => {
            return Err(TypeError::new(format!(
                "{name} is not index_add or embedding_bag"
            )))
        }
    })
}

/// The typing rule of `pad`, on concrete shapes only.
fn pad_type(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, TypeError> {
    let Op::Pad { pads, value } = op else {
        return Err(TypeError::new(format!("{} is not pad", op.name())));
    };
    let x = inputs[0];
    if pads.len() != 2 * x.rank() {
        return Err(TypeError::new(format!(
            "pad: pads needs 2 amounts per axis ({} for rank {}), got {}",
            2 * x.rank(),
            x.rank(),
            pads.len()
        ))
        .on("pads"));
    }
    check_fill("pad", *value, x.dtype)?;
    let mut shape = Vec::with_capacity(x.rank());
    for (i, &d) in x.shape.iter().enumerate() {
        let n = d as i128 + pads[2 * i] as i128 + pads[2 * i + 1] as i128;
        if n < 0 || n > crate::types::MAX_ELEMENTS as i128 {
            return Err(TypeError::new(format!(
                "pad: axis {i} of extent {d} padded by ({}, {}) has invalid extent {n}",
                pads[2 * i],
                pads[2 * i + 1]
            ))
            .on("pads"));
        }
        shape.push(n as usize);
    }
    TensorType::new(x.dtype, shape)
}

/// The typing rule of the window ops (`conv`, `conv_transpose`, `max_pool`,
/// `avg_pool`), on concrete shapes only.
fn window_type(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, TypeError> {
    let name = op.name();
    Ok(match op {
        Op::Conv { groups, .. } => {
            let (x, w) = (inputs[0], inputs[1]);
            let axes = windows(op, x, Some(w))?;
            let mut shape = vec![x.shape[0], w.shape[0]];
            shape.extend(axes.iter().map(|a| a.output));
            let _ = groups;
            TensorType::new(x.dtype, shape)?
        }
        Op::ConvTranspose {
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        } => {
            let (x, w) = (inputs[0], inputs[1]);
            let spatial = window::spatial(name, "input", &x.shape)?;
            let (c_out, kernel) = conv_weight(name, x, w, *groups, true)?;
            // The windows of the forward conv: its stride, dilation and kernel.
            let attrs = window::Attrs {
                op: name,
                stride: stride.as_deref(),
                padding: padding.as_deref(),
                dilation: dilation.as_deref(),
                ceil_mode: false,
                stride_is_kernel: false,
            };
            let ones = vec![1; spatial.len()];
            let axes = window::resolve(&attrs, &ones, &ones)?;
            let extra = match output_padding {
                None => vec![0; spatial.len()],
                Some(v) if v.len() != spatial.len() => {
                    return Err(TypeError::new(format!(
                        "{name}: output_padding has {} entries, the input has {} spatial axes",
                        v.len(),
                        spatial.len()
                    ))
                    .on("output_padding"))
                }
                Some(v) => v.clone(),
            };
            let mut shape = vec![x.shape[0], c_out];
            for (i, a) in axes.iter().enumerate() {
                // PyTorch: output_padding must be smaller than the stride or the dilation.
                if extra[i] < 0 || extra[i] as usize >= a.stride.max(a.dilation) {
                    return Err(TypeError::new(format!(
                        "{name}: output_padding {} on spatial axis {i} must be in 0..{}, \
                         below the stride or the dilation",
                        extra[i],
                        a.stride.max(a.dilation)
                    ))
                    .on("output_padding"));
                }
                let full = (spatial[i] as i128 - 1) * a.stride as i128
                    + (kernel[i] as i128 - 1) * a.dilation as i128
                    + 1
                    + extra[i] as i128;
                let n = full - a.pad_begin as i128 - a.pad_end as i128;
                if spatial[i] == 0 || n < 1 {
                    return Err(TypeError::new(format!(
                        "{name}: the output would have extent {n} on spatial axis {i}"
                    ))
                    .on("padding"));
                }
                shape.push(n.min(u32::MAX as i128) as usize);
            }
            TensorType::new(x.dtype, shape)?
        }
        Op::MaxPool { .. } | Op::AvgPool { .. } => {
            let x = inputs[0];
            if matches!(op, Op::AvgPool { .. }) {
                float_input(name, x)?;
            } else if x.dtype == DType::Bool {
                return Err(TypeError::new(format!(
                    "{name} is not defined for bool tensors"
                )));
            }
            let axes = windows(op, x, None)?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(axes.iter().map(|a| a.output));
            TensorType::new(x.dtype, shape)?
        }
        _ => return Err(TypeError::new(format!("{name} is not a window op"))),
    })
}

/// The product of the extents, or `None` past the element limit.
fn numel_of<D: Dim>(shape: &[D]) -> Option<D> {
    shape.iter().try_fold(D::lit(1), |n, d| n.times(d))
}

/// The resolved windows of a `conv`, `max_pool` or `avg_pool` on an input of type `x`
/// (and, for `conv`, a weight of type `w`): one [`window::Axis`] per spatial axis.
/// Every check of the typing rule on the window attributes is made here.
pub fn windows(
    op: &Op,
    x: &TensorType,
    w: Option<&TensorType>,
) -> Result<Vec<window::Axis>, TypeError> {
    let name = op.name();
    let spatial = window::spatial(name, "input", &x.shape)?;
    let (kernel, attrs) = match op {
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
        } => {
            let w = w.ok_or_else(|| TypeError::new(format!("{name} takes a weight")))?;
            let (_, kernel) = conv_weight(name, x, w, *groups, false)?;
            let attrs = window::Attrs {
                op: name,
                stride: stride.as_deref(),
                padding: padding.as_deref(),
                dilation: dilation.as_deref(),
                ceil_mode: false,
                stride_is_kernel: false,
            };
            (kernel, attrs)
        }
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        }
        | Op::AvgPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
            ..
        } => {
            let kernel = window::kernel(name, kernel, spatial.len())?;
            let attrs = window::Attrs {
                op: name,
                stride: stride.as_deref(),
                padding: padding.as_deref(),
                dilation: dilation.as_deref(),
                ceil_mode: *ceil_mode,
                stride_is_kernel: true,
            };
            (kernel, attrs)
        }
        _ => return Err(TypeError::new(format!("{name} is not a window op"))),
    };
    window::resolve(&attrs, spatial, &kernel)
}

/// Checks a `conv` (or, `transposed`, a `conv_transpose`) weight against its input and
/// `groups`; returns the output channels and the kernel extents.
fn conv_weight(
    name: &'static str,
    x: &TensorType,
    w: &TensorType,
    groups: i64,
    transposed: bool,
) -> Result<(usize, Vec<usize>), TypeError> {
    float_input(name, x)?;
    if w.dtype != x.dtype {
        return Err(TypeError::new(format!(
            "{name}: the weight's dtype {} differs from the input's {}",
            w.dtype, x.dtype
        )));
    }
    window::spatial(name, "input", &x.shape)?;
    if w.rank() != x.rank() {
        return Err(TypeError::new(format!(
            "{name}: the weight {w} must have the input's rank {} ([{}, *kernel])",
            x.rank(),
            if transposed {
                "C_in, C_out / groups"
            } else {
                "C_out, C_in / groups"
            }
        )));
    }
    let c = x.shape[1];
    let g = usize::try_from(groups).unwrap_or(usize::MAX);
    if g == 0 || !c.is_multiple_of(g) {
        return Err(TypeError::new(format!(
            "{name}: groups={groups} does not divide the input's {c} channels"
        ))
        .on("groups"));
    }
    let c_out = if transposed {
        if w.shape[0] != c {
            return Err(TypeError::new(format!(
                "{name}: the weight {w} must have the input's {c} channels on axis 0"
            )));
        }
        w.shape[1].saturating_mul(g)
    } else {
        if w.shape[1].saturating_mul(g) != c {
            return Err(TypeError::new(format!(
                "{name}: the weight {w} must have {} input channels on axis 1 ({c} / groups={g})",
                c / g
            )));
        }
        if !w.shape[0].is_multiple_of(g) {
            return Err(TypeError::new(format!(
                "{name}: groups={g} does not divide the weight's {} output channels",
                w.shape[0]
            ))
            .on("groups"));
        }
        w.shape[0]
    };
    let kernel = w.shape[2..].to_vec();
    if kernel.contains(&0) {
        return Err(TypeError::new(format!(
            "{name}: the weight {w} has an empty kernel"
        )));
    }
    Ok((c_out, kernel))
}

impl<D: Dim> TensorType<D> {
    /// A type whose shape is checked against the rank and element limits.
    pub fn checked(dtype: DType, shape: Vec<D>) -> Result<TensorType<D>, TypeError> {
        D::check(&shape)?;
        Ok(TensorType { dtype, shape })
    }
}

fn float_input<D: Dim>(name: &str, x: &TensorType<D>) -> Result<(), TypeError> {
    if x.dtype.is_float() {
        Ok(())
    } else {
        Err(TypeError::new(format!(
            "{name} needs a float tensor, not {} (cast first)",
            x.dtype
        )))
    }
}

fn index_dtype<D: Dim>(name: &str, idx: &TensorType<D>) -> Result<(), TypeError> {
    if idx.dtype.is_int() {
        Ok(())
    } else {
        Err(TypeError::new(format!(
            "{name}: the index must be i32 or i64, not {}",
            idx.dtype
        )))
    }
}

/// Normalizes and deduplicates a list of axes.
pub fn unique_axes(name: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>, TypeError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank).map_err(|e| e.context(name))?;
        if out.contains(&n) {
            return Err(TypeError::new(format!("{name}: axis {a} appears twice")));
        }
        out.push(n);
    }
    Ok(out)
}

/// The normalized axes a reduction reduces (`None` means all). A rank-0 input reduces nothing.
pub fn reduced_axes(
    name: &str,
    axes: Option<&[i64]>,
    rank: usize,
) -> Result<Vec<usize>, TypeError> {
    let mut out = match axes {
        None => (0..rank).collect(),
        Some(axes) => unique_axes(name, axes, rank)?,
    };
    if rank == 0 {
        out.clear();
    }
    out.sort_unstable();
    Ok(out)
}

/// The shape left after reducing `axes` (kept as extent 1 with `keepdim`).
pub fn reduce_shape<D: Dim>(shape: &[D], axes: &[usize], keepdim: bool) -> Vec<D> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            if axes.contains(&i) {
                keepdim.then(|| D::lit(1))
            } else {
                Some(d.clone())
            }
        })
        .collect()
}

/// Validates a permutation of `rank` axes and normalizes negative entries.
pub fn permutation(name: &str, dims: &[i64], rank: usize) -> Result<Vec<usize>, TypeError> {
    if dims.len() != rank {
        return Err(TypeError::new(format!(
            "{name}: dims has {} entries but the tensor has rank {rank}",
            dims.len()
        )));
    }
    let perm = unique_axes(name, dims, rank)
        .map_err(|e| TypeError::new(format!("{e} (dims must be a permutation of 0..{rank})")))?;
    Ok(perm)
}

/// Resolves a reshape target with at most one `-1` against an element count.
pub fn reshape_target(shape: &[i64], numel: usize) -> Result<Vec<usize>, TypeError> {
    reshape_dims(&mut (), shape, &numel)
}

/// [`reshape_target`] over any dimension type.
pub fn reshape_dims<D: Dim>(
    cx: &mut D::Cx,
    shape: &[D::Int],
    numel: &D,
) -> Result<Vec<D>, TypeError> {
    let mut infer_at = None;
    let mut known = D::lit(1);
    for (i, d) in shape.iter().enumerate() {
        match D::int_value(d) {
            Some(-1) => {
                if infer_at.is_some() {
                    return Err(TypeError::new("reshape: at most one extent may be -1"));
                }
                infer_at = Some(i);
                continue;
            }
            Some(d) if d < 0 => {
                return Err(TypeError::new(format!("reshape: extent {d} is negative")))
            }
            _ => {}
        }
        known = known
            .times(&D::int_dim(d))
            .ok_or_else(|| TypeError::new("reshape: target shape has too many elements"))?;
    }
    let mut out: Vec<D> = shape.iter().map(D::int_dim).collect();
    if let Some(i) = infer_at {
        if !D::divides(cx, &known, numel, "reshape") {
            return Err(TypeError::new(format!(
                "reshape: cannot infer the -1 extent: {numel} elements do not divide into {}",
                fmt_list(shape)
            )));
        }
        out[i] = D::div_exact(numel, &known);
    } else if !D::same(cx, &known, numel, "reshape") {
        return Err(TypeError::new(format!(
            "reshape: target shape {} has {known} elements but the input has {numel}",
            fmt_list(shape)
        )));
    }
    D::check(&out)?;
    Ok(out)
}

/// Resolves an expand target (`-1` keeps the input extent) and checks it broadcasts.
pub fn expand_target(from: &[usize], shape: &[i64]) -> Result<Vec<usize>, TypeError> {
    expand_dims(&mut (), from, shape)
}

/// [`expand_target`] over any dimension type.
pub fn expand_dims<D: Dim>(
    cx: &mut D::Cx,
    from: &[D],
    shape: &[D::Int],
) -> Result<Vec<D>, TypeError> {
    if shape.len() < from.len() {
        return Err(TypeError::new(format!(
            "expand: target rank {} is below the input rank {}",
            shape.len(),
            from.len()
        )));
    }
    let lead = shape.len() - from.len();
    let mut out = Vec::with_capacity(shape.len());
    for (i, d) in shape.iter().enumerate() {
        let src = if i >= lead {
            Some(&from[i - lead])
        } else {
            None
        };
        let n = match (D::int_value(d), src) {
            (Some(-1), Some(s)) => s.clone(),
            (Some(-1), None) => {
                return Err(TypeError::new(format!(
                    "expand: -1 is not allowed for the new leading axis {i}"
                )))
            }
            (Some(d), _) if d < 0 => {
                return Err(TypeError::new(format!("expand: extent {d} is negative")))
            }
            (_, Some(s))
                if D::is_one(cx, s) != Some(true) && !D::same(cx, s, &D::int_dim(d), "expand") =>
            {
                return Err(TypeError::new(format!(
                "expand: cannot expand axis {i} of extent {s} to {d} (only extent-1 axes expand)"
            )))
            }
            _ => D::int_dim(d),
        };
        out.push(n);
    }
    D::check(&out)?;
    Ok(out)
}

/// Python slice clamping: returns the half-open range `[lo, hi)` within `0..len`.
pub fn slice_bounds(len: usize, start: i64, end: i64) -> (usize, usize) {
    let clamp = |v: i64| -> usize {
        let len = len as i64;
        let v = if v < 0 { v.saturating_add(len) } else { v };
        v.clamp(0, len) as usize
    };
    (clamp(start), clamp(end))
}

#[cfg(test)]
fn matmul_type(a: &TensorType, b: &TensorType) -> Result<TensorType, TypeError> {
    matmul_dims(&mut (), a, b)
}

fn matmul_dims<D: Dim>(
    cx: &mut D::Cx,
    a: &TensorType<D>,
    b: &TensorType<D>,
) -> Result<TensorType<D>, TypeError> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(TypeError::new("matmul: operands must have rank >= 1"));
    }
    if a.dtype != b.dtype {
        return Err(TypeError::new(format!(
            "matmul: operand dtypes differ ({} and {}); cast one",
            a.dtype, b.dtype
        )));
    }
    if a.dtype == DType::Bool {
        return Err(TypeError::new("matmul is not defined for bool tensors"));
    }
    // 1-D operands are promoted to matrices and the added axis removed afterwards.
    let a2 = if a.rank() == 1 {
        vec![D::lit(1), a.shape[0].clone()]
    } else {
        a.shape.clone()
    };
    let b2 = if b.rank() == 1 {
        vec![b.shape[0].clone(), D::lit(1)]
    } else {
        b.shape.clone()
    };
    let (m, k) = (&a2[a2.len() - 2], &a2[a2.len() - 1]);
    let (k2, n) = (&b2[b2.len() - 2], &b2[b2.len() - 1]);
    if !D::same(cx, k, k2, "matmul") {
        return Err(TypeError::new(format!(
            "matmul: inner dimensions differ: {} @ {} ({k} vs {k2})",
            ShapeDisplay(&a.shape),
            ShapeDisplay(&b.shape)
        )));
    }
    let batch = broadcast_dims(cx, &a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .map_err(|e| e.context("matmul: batch axes"))?;
    let mut shape = batch;
    if a.rank() > 1 {
        shape.push(m.clone());
    }
    if b.rank() > 1 {
        shape.push(n.clone());
    }
    TensorType::checked(a.dtype, shape)
}

fn fmt_list<T: std::fmt::Display>(v: &[T]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Whether a `full`/`pad` fill value converts to `dtype` as PyTorch's checked scalar
/// conversion allows: integers exactly and in range, floats without a finite value
/// overflowing to infinity (infinities and NaN themselves are fine), bools always.
pub fn fill_fits(value: f64, dtype: DType) -> bool {
    match dtype.int_range() {
        // One past the top of each range is a power of two, exact in f64 (2^63 is the
        // first value past i64::MAX, where `i64::MAX as f64` would round up to it).
        Some((lo, hi)) => value.fract() == 0.0 && value >= lo as f64 && value < (hi + 1) as f64,
        None if dtype == DType::Bool => true,
        None => !value.is_finite() || crate::tensor::round_to_dtype(value, dtype).is_finite(),
    }
}

/// The typing rule's check of a fill value (reliability finding F01: values no backend can
/// represent were accepted by `check` and failed later, inside a backend).
fn check_fill(op: &str, value: f64, dtype: DType) -> Result<(), TypeError> {
    if !dtype.is_float() && value.fract() != 0.0 {
        return Err(TypeError::new(format!(
            "{op}: value {value} is not representable in {dtype}"
        ))
        .on("value"));
    }
    if !fill_fits(value, dtype) {
        return Err(TypeError::new(format!(
            "{op}: value {value} cannot be converted to {dtype} without overflow"
        ))
        .on("value"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: DType, s: &[usize]) -> TensorType {
        TensorType::new(d, s.to_vec()).unwrap()
    }

    #[test]
    fn matmul_shapes() {
        let f = DType::F32;
        assert_eq!(
            matmul_type(&t(f, &[3]), &t(f, &[3])).unwrap().shape,
            Vec::<usize>::new()
        );
        assert_eq!(
            matmul_type(&t(f, &[2, 3]), &t(f, &[3])).unwrap().shape,
            vec![2]
        );
        assert_eq!(
            matmul_type(&t(f, &[3]), &t(f, &[3, 4])).unwrap().shape,
            vec![4]
        );
        assert_eq!(
            matmul_type(&t(f, &[5, 1, 2, 3]), &t(f, &[7, 3, 4]))
                .unwrap()
                .shape,
            vec![5, 7, 2, 4]
        );
        assert!(matmul_type(&t(f, &[2, 3]), &t(f, &[4, 5])).is_err());
    }

    #[test]
    fn reshape_and_expand() {
        assert_eq!(reshape_target(&[-1, 4], 12).unwrap(), vec![3, 4]);
        assert!(reshape_target(&[-1, -1], 12).is_err());
        assert!(reshape_target(&[5], 12).is_err());
        assert!(reshape_target(&[-1, 0], 12).is_err());
        assert_eq!(expand_target(&[3, 1], &[2, -1, 4]).unwrap(), vec![2, 3, 4]);
        assert!(expand_target(&[3], &[4]).is_err());
    }

    #[test]
    fn errors_name_the_attribute_at_fault() {
        let f = DType::F32;
        let x = t(f, &[2, 3]);
        let blame = |op: Op| infer(&op, &[&x]).unwrap_err().attribute;
        assert_eq!(blame(Op::Softmax { axis: 2 }), Some("axis"));
        let sum = Op::Reduce {
            op: ReduceOp::Sum,
            axes: Some(vec![1, -1]),
            keepdim: false,
        };
        assert_eq!(blame(sum), Some("axes"));
        assert_eq!(blame(Op::Permute { dims: vec![0, 0] }), Some("dims"));
        assert_eq!(blame(Op::Reshape { shape: vec![5] }), Some("shape"));
        assert_eq!(blame(Op::Transpose { dim0: 0, dim1: 2 }), Some("dim1"));
        assert_eq!(
            blame(Op::Squeeze {
                axes: Some(vec![0])
            }),
            Some("axes")
        );
        let pad = Op::Pad {
            pads: vec![0, 0],
            value: 0.0,
        };
        assert_eq!(blame(pad), Some("pads"));
        let arange = Op::Arange {
            start: 0.0,
            end: f64::NAN,
            step: 1.0,
            dtype: DType::I64,
        };
        assert_eq!(infer(&arange, &[]).unwrap_err().attribute, Some("end"));
        // Operands that do not fit are not an attribute's fault.
        let e = infer(&Op::MatMul, &[&x, &x]).unwrap_err();
        assert_eq!(e.attribute, None);
        assert_eq!(
            e.message,
            "matmul: inner dimensions differ: [2, 3] @ [2, 3] (3 vs 2)"
        );
    }

    #[test]
    fn slices_clamp_like_python() {
        assert_eq!(slice_bounds(10, -3, i64::MAX), (7, 10));
        assert_eq!(slice_bounds(10, 2, -2), (2, 8));
        assert_eq!(slice_bounds(10, 20, 30), (10, 10));
        assert_eq!(slice_bounds(10, i64::MIN, 3), (0, 3));
    }
}

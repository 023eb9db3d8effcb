//! The window ops (`conv`, `conv_transpose`, `max_pool`, `avg_pool`) and the
//! per-channel ones (`batch_norm`, `clip`) in primitives.
//!
//! A window op reads its taps with one gather: the input, spatial axes flattened,
//! `index_select`ed by a constant `[taps, out positions]` index, with the padding's
//! taps replaced by the fill value through a constant mask, gives the stack `[N, C, K,
//! *out]` (`im2col`), and then
//!
//! - `conv` is im2col: the stack `[N, C, K, *out]` is reshaped to `[N, G, C/G * K,
//!   P]` and multiplied by the weight as `[G, C_out/G, C/G * K]`, one `matmul` (the
//!   GEMM kernel; bias, batch norm and activations that follow fuse as its epilogue).
//!   A depthwise conv (one input and one output channel per group) is instead
//!   `sum(stack * w, axis 2)`, a reduction that reads the taps in place, with no
//!   im2col buffer and no matrix product of one row.
//! - `max_pool` is `max(stack, axis 2)` over an input padded with `-inf` (the
//!   dtype's minimum for integers), so padding never wins;
//! - `avg_pool` is `sum(stack, axis 2) / count`, padded with zeros, where `count` is
//!   the taps of each window that [`ferrite_ir::window::divisor`] counts (a literal
//!   when every window has the same, else a constant `[*out]`).
//! - `conv_transpose` is a `conv` of the input with zeros between its elements
//!   (`stride - 1` of them, by a reshape and a `pad`), padded by
//!   `dilation * (kernel - 1) - padding` (negative amounts crop), with the weight's channel axes swapped
//!   per group and its kernel reversed (`index_select` by a descending `arange`).
//!
//! The reductions keep the interpreter's rounding: one per `matmul` and `sum`, and
//! `avg_pool` divides a rounded sum as `mean` does. The depthwise form rounds each
//! product to the dtype first, which the accumulation policy allows a backend.

use super::Decomposer;
use crate::error::{Error, Result};
use ferrite_ir::infer::windows;
use ferrite_ir::window::{self, Axis};
use ferrite_ir::{BinaryOp, Constant, DType, Op, ReduceOp, Tensor, TensorType, UnaryOp, ValueId};

impl Decomposer {
    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.out.ty(v).shape.clone()
    }

    fn reshape(&mut self, v: ValueId, shape: &[usize]) -> Result<ValueId> {
        if self.shape(v) == shape {
            return Ok(v);
        }
        let shape = shape.iter().map(|&d| d as i64).collect();
        self.emit(Op::Reshape { shape }, &[v])
    }

    /// The taps of every window, `[N, C, K, *out]` (taps in row-major order of the
    /// kernel): the input with its spatial axes flattened, `index_select`ed by a
    /// constant `[K, P]` index of the position each tap of each window reads, and where
    /// a tap falls in the padding, `fill` (a `where` by a constant `[K, P]` mask). One
    /// gather whose elements each cost an index load (and a mask load): a stack of `K`
    /// strided slices would select among `K` views per element, and gathering from a
    /// padded copy would divide every flat index back into padded coordinates.
    fn im2col(&mut self, x: ValueId, axes: &[Axis], fill: f64) -> Result<ValueId> {
        let shape = self.shape(x);
        let (n, c) = (shape[0], shape[1]);
        let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
        let outs: Vec<usize> = axes.iter().map(|a| a.output).collect();
        let (k, p) = (
            kernel.iter().product::<usize>(),
            outs.iter().product::<usize>(),
        );
        let mut out_shape = vec![n, c, k];
        out_shape.extend_from_slice(&outs);
        let identity = k == 1
            && axes
                .iter()
                .all(|a| a.stride == 1 && a.pad_begin == 0 && a.output == a.input);
        if identity {
            return self.reshape(x, &out_shape);
        }
        let unravel = |mut f: usize, dims: &[usize]| {
            let mut idx = vec![0; dims.len()];
            for i in (0..dims.len()).rev() {
                idx[i] = f % dims[i];
                f /= dims[i];
            }
            idx
        };
        let mut index = Vec::with_capacity(k * p);
        let mut inside = Vec::with_capacity(k * p);
        for t in 0..k {
            let ks = unravel(t, &kernel);
            for o in 0..p {
                let os = unravel(o, &outs);
                let (mut flat, mut ok) = (0i64, true);
                for (i, a) in axes.iter().enumerate() {
                    let pos = a.position(os[i], ks[i]);
                    ok &= pos >= 0 && pos < a.input as i64;
                    flat = flat * a.input as i64 + pos.clamp(0, a.input as i64 - 1);
                }
                index.push(flat);
                inside.push(ok as i64);
            }
        }
        let kp = TensorType::new(DType::I64, vec![k, p]).map_err(Error::internal)?;
        let constant = |l: &mut Decomposer, t: Tensor| {
            l.out
                .add_constant(Constant::new(t), None)
                .map_err(Error::internal)
        };
        let index = constant(self, Tensor::from_i64(&kp, &index))?;
        let plane: usize = shape[2..].iter().product();
        let flat = self.reshape(x, &[n, c, plane])?;
        let mut cols = self.emit(Op::IndexSelect { axis: 2 }, &[flat, index])?;
        if inside.contains(&0) {
            let mask = Tensor::from_i64(&kp.with_dtype(DType::Bool), &inside);
            let mask = constant(self, mask)?;
            let fill = self.literal(fill, self.dtype(x))?;
            cols = self.emit(Op::Where, &[mask, cols, fill])?;
        }
        self.reshape(cols, &out_shape)
    }

    /// `conv(x, w)` of result type `ty`.
    pub(super) fn conv(
        &mut self,
        op: &Op,
        x: ValueId,
        w: ValueId,
        ty: &TensorType,
    ) -> Result<ValueId> {
        let Op::Conv { groups, .. } = op else {
            return Err(Error::internal("conv: not a conv"));
        };
        if ty.numel() == 0 {
            return self.empty(ty);
        }
        let (xt, wt) = (self.out.ty(x).clone(), self.out.ty(w).clone());
        let axes = windows(op, &xt, Some(&wt)).map_err(Error::internal)?;
        let (n, c, c_out) = (xt.shape[0], xt.shape[1], wt.shape[0]);
        let g = *groups as usize;
        let (cg, og) = (c / g, c_out / g);
        let k: usize = wt.shape[2..].iter().product();
        let p: usize = ty.shape[2..].iter().product();
        let cols = self.im2col(x, &axes, 0.0)?;
        let y = if cg == 1 && og == 1 {
            // Depthwise: sum over the taps of tap * w[c, tap], in the result's layout
            // so that what follows fuses as the reduction's epilogue.
            let mut wk = vec![c, k];
            wk.resize(ty.rank(), 1);
            let wk = self.reshape(w, &wk)?;
            let prod = self.binary(BinaryOp::Mul, cols, wk)?;
            self.reduce(ReduceOp::Sum, prod, Some(vec![2]), false)?
        } else {
            let cols = self.reshape(cols, &[n, g, cg * k, p])?;
            let wm = self.reshape(w, &[g, og, cg * k])?;
            self.emit(Op::MatMul, &[wm, cols])?
        };
        self.reshape(y, &ty.shape)
    }

    /// `conv_transpose(x, w)` of result type `ty`, as a `conv` of the zero-stuffed,
    /// padded input with the flipped weight.
    pub(super) fn conv_transpose(
        &mut self,
        op: &Op,
        x: ValueId,
        w: ValueId,
        ty: &TensorType,
    ) -> Result<ValueId> {
        let Op::ConvTranspose {
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        } = op
        else {
            return Err(Error::internal("conv_transpose: not a conv_transpose"));
        };
        if ty.numel() == 0 {
            return self.empty(ty);
        }
        let (xt, wt) = (self.out.ty(x).clone(), self.out.ty(w).clone());
        let s = xt.rank() - 2;
        let at = |v: &Option<Vec<i64>>, i: usize, d: i64| v.as_ref().map_or(d, |v| v[i]);
        let pad = |i: usize, end: bool| match padding {
            None => 0,
            Some(p) if p.len() == s => p[i],
            Some(p) => p[if end { s + i } else { i }],
        };
        // Zeros between the elements: [.., L, ..] -> [.., L, 1, ..] -> pad to
        // [.., L, st, ..] -> [.., L * st, ..], whose last `st - 1` are cropped below.
        let mut v = x;
        for i in 0..s {
            let st = at(stride, i, 1) as usize;
            if st == 1 {
                continue;
            }
            let mut shape = self.shape(v);
            shape.insert(3 + i, 1);
            let lifted = self.reshape(v, &shape)?;
            let mut pads = vec![0i64; 2 * shape.len()];
            pads[2 * (3 + i) + 1] = st as i64 - 1;
            let spread = self.emit(Op::Pad { pads, value: 0.0 }, &[lifted])?;
            let mut merged = self.shape(v);
            merged[2 + i] *= st;
            v = self.reshape(spread, &merged)?;
        }
        let mut pads = vec![0i64; 4];
        for i in 0..s {
            let reach = at(dilation, i, 1) * (wt.shape[2 + i] as i64 - 1);
            let st = at(stride, i, 1);
            pads.push(reach - pad(i, false));
            pads.push(reach - pad(i, true) + at(output_padding, i, 0) - (st - 1));
        }
        if pads.iter().any(|&p| p != 0) {
            v = self.emit(Op::Pad { pads, value: 0.0 }, &[v])?;
        }
        // The weight [C, C_out/G, *K] as a conv weight [C_out, C/G, *K], kernel flipped.
        let g = *groups as usize;
        let (c, og) = (wt.shape[0], wt.shape[1]);
        let kernel = &wt.shape[2..];
        let mut grouped = vec![g, c / g, og];
        grouped.extend_from_slice(kernel);
        let wg = self.reshape(w, &grouped)?;
        let mut dims: Vec<i64> = vec![0, 2, 1];
        dims.extend(3..3 + s as i64);
        let swapped = self.emit(Op::Permute { dims }, &[wg])?;
        let mut conv_w = vec![g * og, c / g];
        conv_w.extend_from_slice(kernel);
        let mut wf = self.reshape(swapped, &conv_w)?;
        for (i, &k) in kernel.iter().enumerate() {
            if k == 1 {
                continue;
            }
            let rev = self.emit(
                Op::Arange {
                    start: (k - 1) as f64,
                    end: -1.0,
                    step: -1.0,
                    dtype: DType::I64,
                },
                &[],
            )?;
            wf = self.emit(Op::IndexSelect { axis: 2 + i as i64 }, &[wf, rev])?;
        }
        let conv = Op::Conv {
            stride: None,
            padding: None,
            dilation: dilation.clone(),
            groups: *groups,
        };
        self.conv(&conv, v, wf, ty)
    }

    /// `max_pool(x)` or `avg_pool(x)` of result type `ty`.
    pub(super) fn pool(&mut self, op: &Op, x: ValueId, ty: &TensorType) -> Result<ValueId> {
        if ty.numel() == 0 {
            return self.empty(ty);
        }
        let xt = self.out.ty(x).clone();
        let axes = windows(op, &xt, None).map_err(Error::internal)?;
        match op {
            Op::MaxPool { .. } => {
                let fill = match xt.dtype.int_range() {
                    Some((lo, _)) => lo as f64,
                    None => f64::NEG_INFINITY,
                };
                let stack = self.im2col(x, &axes, fill)?;
                self.reduce(ReduceOp::Max, stack, Some(vec![2]), false)
            }
            Op::AvgPool {
                count_include_pad, ..
            } => {
                let outs: Vec<usize> = axes.iter().map(|a| a.output).collect();
                let counts: Vec<f64> = (0..outs.iter().product::<usize>())
                    .map(|mut f| {
                        let mut o = vec![0; outs.len()];
                        for i in (0..outs.len()).rev() {
                            o[i] = f % outs[i];
                            f /= outs[i];
                        }
                        window::divisor(&axes, &o, *count_include_pad) as f64
                    })
                    .collect();
                self.in_f32(&[x], |l, v| {
                    let stack = l.im2col(v[0], &axes, 0.0)?;
                    let sum = l.reduce(ReduceOp::Sum, stack, Some(vec![2]), false)?;
                    let dt = l.dtype(sum);
                    if counts.iter().all(|&c| c == counts[0]) {
                        return l.binary_const(BinaryOp::Div, sum, counts[0]);
                    }
                    let t = Tensor::from_f64(
                        &TensorType::new(dt, outs.clone()).map_err(Error::internal)?,
                        &counts,
                    );
                    let count = l
                        .out
                        .add_constant(Constant::new(t), None)
                        .map_err(Error::internal)?;
                    l.binary(BinaryOp::Div, sum, count)
                })
            }
            _ => Err(Error::internal(format!(
                "{} is not a pooling op",
                op.name()
            ))),
        }
    }

    /// `batch_norm(x, weight, bias, mean, var, eps)`: `scale = weight * rsqrt(var +
    /// eps)`, `shift = bias - mean * scale`, `x * scale + shift`, per channel (the
    /// interpreter's formula, and PyTorch's CPU kernel's).
    pub(super) fn batch_norm(&mut self, ins: &[ValueId], eps: f64) -> Result<ValueId> {
        self.in_f32(ins, |l, v| {
            let xs = l.shape(v[0]);
            let mut shape = vec![1; xs.len() - 1];
            shape[0] = xs[1];
            let p = v[1..]
                .iter()
                .map(|&t| l.reshape(t, &shape))
                .collect::<Result<Vec<_>>>()?;
            let shifted = l.binary_const(BinaryOp::Add, p[3], eps)?;
            let inv = l.emit(Op::Unary(UnaryOp::Rsqrt), &[shifted])?;
            let scale = l.binary(BinaryOp::Mul, p[0], inv)?;
            let moved = l.binary(BinaryOp::Mul, p[2], scale)?;
            let shift = l.binary(BinaryOp::Sub, p[1], moved)?;
            let scaled = l.binary(BinaryOp::Mul, v[0], scale)?;
            l.binary(BinaryOp::Add, scaled, shift)
        })
    }

    /// `clip(x, min, max)`: `minimum(maximum(x, min), max)`.
    pub(super) fn clip(
        &mut self,
        x: ValueId,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Result<ValueId> {
        let mut y = x;
        for (bound, op) in [(min, BinaryOp::Maximum), (max, BinaryOp::Minimum)] {
            if let Some(b) = bound {
                let lit = self.literal(b, self.dtype(x))?;
                y = self.emit(Op::Binary(op), &[y, lit])?;
            }
        }
        if y == x {
            // Neither bound: still a node of its own, so that the result can carry a name.
            return self.emit(Op::Binary(BinaryOp::Maximum), &[x, x]);
        }
        Ok(y)
    }
}

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
//!   im2col buffer and no matrix product of one row; of at most [`MAX_DIRECT_TAPS`]
//!   taps in f32 or f64 (MobileNet's 3x3), it skips the gather too: the sum over the
//!   taps of `w[c, tap]` times a strided slice of `pad(x)`, views that are index
//!   arithmetic, so the kernel loads each tap at an affine index.
//! - `max_pool` is `max(stack, axis 2)` over an input padded with `-inf` (the
//!   dtype's minimum for integers), so padding never wins; of at most
//!   [`MAX_DIRECT_TAPS`] taps (3x3, 5x5), it skips the gather as the depthwise conv
//!   does: a chain of `maximum`s of the taps' strided slices of the padded input;
//! - `avg_pool` is `sum(stack, axis 2) / count`, padded with zeros, where `count` is
//!   the taps of each window that [`ferrite_ir::window::divisor`] counts (a literal
//!   when every window has the same, else a constant `[*out]`).
//! - `conv_transpose` is PyTorch's col2im form: one `matmul` of the transposed
//!   weight and the input gives every (input position, tap) pair's product, and each
//!   output position gathers the pairs that reach it (a constant `[K, P_out]` index
//!   and mask, as im2col's) and sums them over the taps. Only pairs that exist are
//!   ever multiplied, as in the interpreter (an infinite weight meets no padding).
//!
//! The reductions keep the interpreter's rounding: one per `matmul` and `sum`, and
//! `avg_pool` divides a rounded sum as `mean` does. The depthwise form rounds each
//! product to the dtype first, which the accumulation policy allows a backend.

use super::Decomposer;
use crate::error::{Error, Result};
use ferrite_ir::infer::windows;
use ferrite_ir::window::{self, Axis};
use ferrite_ir::{BinaryOp, Constant, DType, Op, ReduceOp, Tensor, TensorType, UnaryOp, ValueId};

/// The bytes of the constant tap indices and masks (`[K, P]` i64 and bool) that
/// decomposing the window ops of `g` creates, so that a caller can refuse a graph whose
/// decomposition alone would exceed a memory budget (a pool padded by 2^27 has an index
/// of billions of entries) before anything is allocated. Saturates.
pub fn constant_bytes(g: &ferrite_ir::Graph) -> u64 {
    let mut total = 0u64;
    for node in &g.nodes {
        let x = match node.inputs.first() {
            Some(&x) => g.ty(x),
            None => continue,
        };
        let taps_and_positions = match &node.op {
            op @ (Op::Conv { .. } | Op::MaxPool { .. } | Op::AvgPool { .. }) => {
                let w = node.inputs.get(1).map(|&w| g.ty(w));
                let w = w.filter(|_| matches!(op, Op::Conv { .. }));
                match windows(op, x, w) {
                    Ok(axes) => axes
                        .iter()
                        .fold(1u64, |n, a| n.saturating_mul((a.kernel * a.output) as u64)),
                    Err(_) => 0,
                }
            }
            Op::ConvTranspose { .. } => {
                let w = node
                    .inputs
                    .get(1)
                    .map(|&w| g.ty(w).shape[2..].iter().product::<usize>());
                let p: usize = node.ty.shape.get(2..).map_or(0, |s| s.iter().product());
                (w.unwrap_or(0) as u64).saturating_mul(p as u64)
            }
            _ => 0,
        };
        total = total.saturating_add(taps_and_positions.saturating_mul(9));
    }
    total
}

/// The row-major coordinates in `dims` of `0..count`, `dims.len()` per point, one flat
/// vector (an odometer: no division, no allocation per point; a 0-D `dims` gives one zero
/// per point, so `chunks_exact(1)` still yields `count` points).
fn coordinates(count: usize, dims: &[usize]) -> Vec<usize> {
    let r = dims.len();
    let mut all = Vec::with_capacity(count * r.max(1));
    let mut c = vec![0usize; r];
    for _ in 0..count {
        if r == 0 {
            all.push(0);
            continue;
        }
        all.extend_from_slice(&c);
        for i in (0..r).rev() {
            c[i] += 1;
            if c[i] < dims[i] {
                break;
            }
            c[i] = 0;
        }
    }
    all
}

/// A depthwise conv or a max pool of at most this many taps (5x5) is decomposed as a sum
/// or a maximum of shifted slices ([`Decomposer::tap_views`]); a larger one gathers its
/// taps (its sum of products of 49 slices is more nodes than a kernel holds, and would be
/// cut into several kernels with stores between them).
const MAX_DIRECT_TAPS: usize = 25;

/// A conv's im2col of at most this many taps (7x7) is a concat of shifted slices, one
/// row copy per tap (views, which a kernel holds any number of); a larger one gathers
/// its taps. ResNet-18's 7x7 stem as 49 slices of the `pad` view made its codegen 2x (49
/// peeled, guarded row copies); with the pad stored once (the fuser stores a pad read by
/// a window of more than 25 taps, `fuse.rs`) the copies have no guards, compile as fast
/// as the gather did, and run 2.6x faster than it (2.90 -> 1.11 ms, pad included, on one
/// thread of the 2-core VM), with no index or mask constants.
const MAX_IM2COL_SLICES: usize = 49;

/// Whether the windows of `axes` have at most `limit` taps, to be read as shifted slices
/// ([`MAX_DIRECT_TAPS`], [`MAX_IM2COL_SLICES`]), and at least one output along every axis.
fn sliceable(axes: &[Axis], limit: usize) -> bool {
    axes.iter().map(|a| a.kernel).product::<usize>() <= limit && axes.iter().all(|a| a.output > 0)
}

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
        let mut index = Vec::with_capacity(k * p);
        let mut inside = Vec::with_capacity(k * p);
        let r = axes.len();
        let all_os = coordinates(p, &outs);
        for t in 0..k {
            let ks = window::unravel(t, &kernel);
            for os in all_os.chunks_exact(r.max(1)).take(p) {
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
        let plane: usize = shape[2..].iter().product();
        let flat = self.reshape(x, &[n, c, plane])?;
        let cols = self.gather_taps(flat, &index, &inside, k, p, fill)?;
        self.reshape(cols, &out_shape)
    }

    /// The im2col stack `[N, C, K, *out]` of a conv's matrix product as the concat of
    /// its tap views ([`Decomposer::tap_views`], zero-padded): stored whole, the concat
    /// is one store loop per tap (`lower::kernel`'s concat split), each copying rows of
    /// the input at affine indices, where the gather loads an index and a mask per
    /// element.
    fn im2col_sliced(&mut self, x: ValueId, axes: &[Axis]) -> Result<ValueId> {
        let shape = self.shape(x);
        let mut part = vec![shape[0], shape[1], 1];
        part.extend(axes.iter().map(|a| a.output));
        let taps = self.tap_views(x, axes, 0.0)?;
        let parts = taps
            .into_iter()
            .map(|t| self.reshape(t, &part))
            .collect::<Result<Vec<_>>>()?;
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        self.emit(Op::Concat { axis: 2 }, &parts)
    }

    /// `src` `[N, C, L]` gathered along its last axis by the constant `[k, p]` positions
    /// `index`, with `fill` where `inside` is 0: `[N, C, k, p]`. The `where` selects, so
    /// a tap outside never meets a value (no `0 * inf`).
    fn gather_taps(
        &mut self,
        src: ValueId,
        index: &[i64],
        inside: &[i64],
        k: usize,
        p: usize,
        fill: f64,
    ) -> Result<ValueId> {
        let kp = TensorType::new(DType::I64, vec![k, p]).map_err(Error::internal)?;
        let constant = |l: &mut Decomposer, t: Tensor| {
            l.out
                .add_constant(Constant::new(t), None)
                .map_err(Error::internal)
        };
        let index = constant(self, Tensor::from_i64(&kp, index))?;
        let mut cols = self.emit(Op::IndexSelect { axis: 2 }, &[src, index])?;
        if inside.contains(&0) {
            let mask = Tensor::from_i64(&kp.with_dtype(DType::Bool), inside);
            let mask = constant(self, mask)?;
            let fill = self.literal(fill, self.dtype(src))?;
            cols = self.emit(Op::Where, &[mask, cols, fill])?;
        }
        Ok(cols)
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
        // Half types keep the reduction, which accumulates in f32 (a chain of adds would
        // round each partial sum to the half type).
        let depthwise = cg == 1 && og == 1;
        if depthwise
            && sliceable(&axes, MAX_DIRECT_TAPS)
            && matches!(xt.dtype, DType::F32 | DType::F64)
        {
            return self.depthwise_direct(x, w, &axes, ty);
        }
        let cols = if !depthwise && sliceable(&axes, MAX_IM2COL_SLICES) {
            self.im2col_sliced(x, &axes)?
        } else {
            self.im2col(x, &axes, 0.0)?
        };
        let y = if depthwise {
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

    /// The taps of every window as `K` views `[N, C, *out]` of `x` padded with `fill`:
    /// tap `t` is the strided slice of `pad(x)` that every window's tap `t` reads. `pad`
    /// and `slice` are index arithmetic, so a kernel that combines the views loads each
    /// tap at an affine index (contiguous along the last axis at stride 1), where a
    /// gather loads an index and a mask per tap.
    fn tap_views(&mut self, x: ValueId, axes: &[Axis], fill: f64) -> Result<Vec<ValueId>> {
        let mut pads = vec![0i64; 4];
        for a in axes {
            // The padded extent the last tap of the last window reaches.
            let reach = (a.output - 1) * a.stride + (a.kernel - 1) * a.dilation + 1;
            let end = reach as i64 - a.input as i64 - a.pad_begin as i64;
            pads.push(a.pad_begin as i64);
            pads.push(end.max(0));
        }
        let padded = if pads.iter().all(|&p| p == 0) {
            x
        } else {
            self.emit(Op::Pad { pads, value: fill }, &[x])?
        };
        let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
        let k: usize = kernel.iter().product();
        let mut taps = Vec::with_capacity(k);
        for t in 0..k {
            let ks = window::unravel(t, &kernel);
            let mut tap = padded;
            for (i, a) in axes.iter().enumerate() {
                let start = ks[i] * a.dilation;
                let end = start + (a.output - 1) * a.stride + 1;
                let slice = Op::Slice {
                    axis: (2 + i) as i64,
                    start: start as i64,
                    end: end as i64,
                    step: a.stride as i64,
                };
                if start != 0 || end != self.shape(tap)[2 + i] || a.stride != 1 {
                    tap = self.emit(slice, &[tap])?;
                }
            }
            taps.push(tap);
        }
        Ok(taps)
    }

    /// A depthwise conv of few taps as the sum over its taps of `w[c, tap]` times a
    /// strided slice of the zero-padded input ([`Decomposer::tap_views`]): one
    /// elementwise kernel. Products are rounded to the dtype and summed in tap order, as
    /// the reduction form does (f32 and f64 only).
    fn depthwise_direct(
        &mut self,
        x: ValueId,
        w: ValueId,
        axes: &[Axis],
        ty: &TensorType,
    ) -> Result<ValueId> {
        let c = self.shape(x)[1];
        let taps = self.tap_views(x, axes, 0.0)?;
        let wk = self.reshape(w, &[c, taps.len()])?;
        let mut shape = vec![c];
        shape.resize(ty.rank() - 1, 1);
        let mut acc: Option<ValueId> = None;
        for (t, &tap) in taps.iter().enumerate() {
            let wt = self.emit(
                Op::Slice {
                    axis: 1,
                    start: t as i64,
                    end: t as i64 + 1,
                    step: 1,
                },
                &[wk],
            )?;
            let wt = self.reshape(wt, &shape)?;
            let prod = self.binary(BinaryOp::Mul, tap, wt)?;
            acc = Some(match acc {
                None => prod,
                Some(a) => self.binary(BinaryOp::Add, a, prod)?,
            });
        }
        let y = acc.ok_or_else(|| Error::internal("depthwise conv without taps"))?;
        debug_assert_eq!(axes.len() + 2, ty.rank());
        self.reshape(y, &ty.shape)
    }

    /// A max pool of few taps as `maximum(.. maximum(t0, t1) .., tK)` of its tap views
    /// ([`Decomposer::tap_views`]) over the input padded with the dtype's least value:
    /// one elementwise kernel, no tap index or mask. The interpreter's chain is the
    /// same (it starts from the least value and skips the padding, which `maximum`
    /// with the least value does too, NaN and signed zeros included), so the values are
    /// exact.
    fn max_pool_direct(&mut self, x: ValueId, axes: &[Axis], fill: f64) -> Result<ValueId> {
        let taps = self.tap_views(x, axes, fill)?;
        let mut acc = *taps
            .first()
            .ok_or_else(|| Error::internal("max_pool without taps"))?;
        for &tap in &taps[1..] {
            acc = self.emit(Op::Binary(BinaryOp::Maximum), &[acc, tap])?;
        }
        Ok(acc)
    }

    /// `conv_transpose(x, w)` of result type `ty`, input-centric as PyTorch's col2im
    /// form: every (input position, tap) pair's products over the input channels in
    /// one `matmul`, `[N, G, C_out/G * K, P_in]`, then each output position gathers the
    /// pairs that reach it and sums them over the taps. Only pairs that exist meet a
    /// weight, so an infinite weight never multiplies a padding zero (which a `conv`
    /// of the zero-stuffed input would do: `0 * inf = NaN` where the interpreter has a
    /// number), and the product is `stride^s` times smaller than that conv's.
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
            dilation,
            groups,
            ..
        } = op
        else {
            return Err(Error::internal("conv_transpose: not a conv_transpose"));
        };
        let (xt, wt) = (self.out.ty(x).clone(), self.out.ty(w).clone());
        let ins = &xt.shape[2..];
        let (n, c) = (xt.shape[0], xt.shape[1]);
        let (p_in, k): (usize, usize) = (ins.iter().product(), wt.shape[2..].iter().product());
        if ty.numel() == 0 || p_in == 0 || k == 0 || c == 0 {
            // No (input, tap) pair reaches an output: zeros.
            return self.empty(ty);
        }
        let s = xt.rank() - 2;
        let at = |v: &Option<Vec<i64>>, i: usize, d: i64| v.as_ref().map_or(d, |v| v[i]);
        let g = *groups as usize;
        let (cg, og) = (c / g, wt.shape[1]);
        let c_out = g * og;
        // Products: w as [G, C/G, C_out/G * K] transposed, times x as [N, G, C/G, P_in].
        let wg = self.reshape(w, &[g, cg, og * k])?;
        let wt_ = self.emit(
            Op::Permute {
                dims: vec![0, 2, 1],
            },
            &[wg],
        )?;
        let xg = self.reshape(x, &[n, g, cg, p_in])?;
        let cols = self.emit(Op::MatMul, &[wt_, xg])?;
        let cols = self.reshape(cols, &[n, c_out, k * p_in])?;
        // For output position o and tap t along an axis: the input position
        // (o + pad - t * dilation) / stride, when it divides and lies inside.
        let kernel = &wt.shape[2..];
        let outs = &ty.shape[2..];
        let p_out: usize = outs.iter().product();
        let mut index = Vec::with_capacity(k * p_out);
        let mut inside = Vec::with_capacity(k * p_out);
        let all_os = coordinates(p_out, outs);
        for t in 0..k {
            let ts = window::unravel(t, kernel);
            for os in all_os.chunks_exact(s.max(1)).take(p_out) {
                let (mut flat, mut ok) = (0i64, true);
                for a in 0..s {
                    let num = os[a] as i64 + at(padding, a, 0) - ts[a] as i64 * at(dilation, a, 1);
                    let st = at(stride, a, 1);
                    let pos = num.div_euclid(st);
                    ok &= num.rem_euclid(st) == 0 && pos >= 0 && pos < ins[a] as i64;
                    flat = flat * ins[a] as i64 + pos.clamp(0, ins[a] as i64 - 1);
                }
                index.push(t as i64 * p_in as i64 + flat);
                inside.push(ok as i64);
            }
        }
        let taps = self.gather_taps(cols, &index, &inside, k, p_out, 0.0)?;
        let y = self.reduce(ReduceOp::Sum, taps, Some(vec![2]), false)?;
        self.reshape(y, &ty.shape)
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
                if sliceable(&axes, MAX_DIRECT_TAPS) {
                    return self.max_pool_direct(x, &axes, fill);
                }
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

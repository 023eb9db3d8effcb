//! Ops over the channel and spatial axes of `[N, C, ...]` tensors that are movement
//! or reductions: DepthToSpace, SpaceToDepth (reshape, permute, reshape),
//! GlobalMaxPool and GlobalAveragePool (a max or mean over the spatial axes), LRN (a
//! sum of shifted squares) and AffineGrid (constant base coordinates times theta).
//! Pooling proper and Conv are in `window.rs`.

use super::one;
use crate::error::{invalid, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, Op, ReduceOp as R, Tensor, TensorType};
use std::sync::Arc;

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "DepthToSpace" | "SpaceToDepth" => one(depth_space(ctx, n, op)?),
        "GlobalMaxPool" | "GlobalAveragePool" => {
            let x = n.input(0)?;
            let rank = ctx.rank(x);
            if rank < 3 {
                invalid!("the input must have rank >= 3 ([N, C, ...]), not {rank}");
            }
            let ax: Vec<usize> = (2..rank).collect();
            let r = if op == "GlobalMaxPool" {
                R::Max
            } else {
                if !ctx.dtype(x).is_float() {
                    invalid!("the input must be float, not {}", ctx.ty(x));
                }
                R::Mean
            };
            one(ctx.reduce(r, x, &ax, true)?)
        }
        "LRN" => one(lrn(ctx, n)?),
        "AffineGrid" => one(affine_grid(ctx, n)?),
        _ => Ok(None),
    }
}

fn depth_space(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Val> {
    let x = n.input(0)?;
    let s = ctx.shape(x);
    if s.len() != 4 {
        invalid!("the input must be 4-D, not {}", ctx.ty(x));
    }
    let bs = match n.int("blocksize", 0)? {
        b if b > 0 => b as usize,
        _ if !n.has("blocksize") => invalid!("attribute `blocksize` is required"),
        b => invalid!("attribute `blocksize` must be positive, not {b}"),
    };
    let (b, c, h, w) = (s[0], s[1], s[2], s[3]);
    if op == "DepthToSpace" {
        let c2 = match bs.checked_mul(bs) {
            Some(sq) if c.is_multiple_of(sq) => c / sq,
            Some(sq) => invalid!("{c} channels are not a multiple of blocksize^2 = {sq}"),
            None => invalid!("{c} channels are not a multiple of blocksize^2 ({bs}^2)"),
        };
        let (tmp, perm) = match n.string("mode", "DCR")?.as_str() {
            "DCR" => ([b, bs, bs, c2, h, w], [0, 3, 4, 1, 5, 2]),
            "CRD" => ([b, c2, bs, bs, h, w], [0, 1, 4, 2, 5, 3]),
            m => invalid!("attribute `mode` must be DCR or CRD, not {m:?}"),
        };
        let y = ctx.reshape(x, &tmp)?;
        let y = ctx.permute(&y, &perm)?;
        ctx.reshape(&y, &[b, c2, h * bs, w * bs])
    } else {
        if !h.is_multiple_of(bs) || !w.is_multiple_of(bs) {
            invalid!("height {h} and width {w} must be multiples of blocksize {bs}");
        }
        let y = ctx.reshape(x, &[b, c, h / bs, bs, w / bs, bs])?;
        let y = ctx.permute(&y, &[0, 3, 5, 1, 2, 4])?;
        ctx.reshape(&y, &[b, c * bs * bs, h / bs, w / bs])
    }
}

/// `x / (bias + alpha / size * sum of x^2 over the channel window)^beta`, the window
/// of channel c being `c - floor((size-1)/2) ..= c + ceil((size-1)/2)` clipped to the
/// channels: a zero-padded square summed over `size` shifted slices.
fn lrn(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let x = n.input(0)?;
    let s = ctx.shape(x);
    if s.len() < 3 {
        invalid!(
            "the input must have rank >= 3 ([N, C, ...]), not {}",
            ctx.ty(x)
        );
    }
    let size = match n.int("size", 0)? {
        z if z > 0 => z as usize,
        _ if !n.has("size") => invalid!("attribute `size` is required"),
        z => invalid!("attribute `size` must be positive, not {z}"),
    };
    let alpha = n.float("alpha", 1e-4)?;
    let beta = n.float("beta", 0.75)?;
    let bias = n.float("bias", 1.0)?;
    let c = s[1];
    // A window reaching past every channel adds only padding zeros: at most c - 1 on
    // each side matter, so a hostile `size` of 2^28 costs no more than 2c - 1 slices.
    let before = ((size - 1) / 2).min(c.saturating_sub(1));
    let after = (size - 1 - (size - 1) / 2).min(c.saturating_sub(1));
    let sq = ctx.mul(x, x)?;
    let mut pads = vec![0i64; 2 * s.len()];
    pads[2] = before as i64;
    pads[3] = after as i64;
    let padded = ctx.op(Op::Pad { pads, value: 0.0 }, &[&sq])?;
    let mut sum: Option<Val> = None;
    for k in 0..before + after + 1 {
        let part = ctx.op(
            Op::Slice {
                axis: 1,
                start: k as i64,
                end: (k + c) as i64,
                step: 1,
            },
            &[&padded],
        )?;
        sum = Some(match sum {
            Some(t) => ctx.add(&t, &part)?,
            None => part,
        });
    }
    let sum = sum.expect("size >= 1");
    let d = ctx.bin_s(B::Mul, &sum, alpha / size as f64)?;
    let d = ctx.bin_s(B::Add, &d, bias)?;
    let d = ctx.bin_s(B::Pow, &d, beta)?;
    ctx.div(x, &d)
}

/// AffineGrid: the normalized coordinates of every output position (x over W, y over
/// H, z over D, then 1, as onnx's reference lays them out; computed in f64, rounded
/// once) as a constant `[positions, k + 1]`, times each `theta^T`.
pub(super) fn affine_grid(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let theta = n.input(0)?;
    let size = ctx.ints(n.input(1)?, "size")?;
    let align = n.int("align_corners", 0)? != 0;
    let dt = ctx.dtype(theta);
    let k = match size.len() {
        4 => 2,
        5 => 3,
        l => invalid!("size must have 4 or 5 entries, not {l}"),
    };
    let ts = ctx.shape(theta);
    if !dt.is_float() || ts.len() != 3 || ts[1] != k || ts[2] != k + 1 || ts[0] as i64 != size[0] {
        invalid!(
            "theta must be float [{}, {k}, {}], not {}",
            size[0],
            k + 1,
            ctx.ty(theta)
        );
    }
    if size.iter().any(|&d| d < 1) {
        invalid!("size {size:?} has an entry below 1");
    }
    let spatial: Vec<usize> = size[2..].iter().map(|&d| d as usize).collect();
    let coord = |i: usize, len: usize| -> f64 {
        if align {
            if len == 1 {
                -1.0
            } else {
                -1.0 + i as f64 * (2.0 / (len - 1) as f64)
            }
        } else {
            let step = 2.0 / len as f64;
            -1.0 + step / 2.0 + i as f64 * step
        }
    };
    let positions: usize = spatial.iter().product();
    let mut base = Vec::with_capacity(positions * (k + 1));
    for p in 0..positions {
        // Row-major position over the spatial dims, last (W) fastest.
        let mut rem = p;
        let mut idx = vec![0; k];
        for d in (0..k).rev() {
            idx[d] = rem % spatial[d];
            rem /= spatial[d];
        }
        // x over the last dim first, then y, then z.
        for d in (0..k).rev() {
            base.push(coord(idx[d], spatial[d]));
        }
        base.push(1.0);
    }
    let ty = TensorType::new(dt, vec![positions, k + 1])?;
    let base = Val::Const(Arc::new(Tensor::from_f64(&ty, &base)));
    let tt = ctx.permute(theta, &[0, 2, 1])?;
    let g = ctx.op(Op::MatMul, &[&base, &tt])?;
    let mut out = vec![ts[0]];
    out.extend(&spatial);
    out.push(k);
    ctx.reshape(&g, &out)
}

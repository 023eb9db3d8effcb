//! Attention (opsets 23 and 24), RotaryEmbedding and GroupNormalization, each
//! decomposed into IR ops (matmul, softmax, where, slices...) so that fusion sees
//! the pieces. The decompositions follow the ONNX reference implementation
//! (`onnx/reference/ops/op_attention.py`, `op_rotary_embedding.py`) step for step.

use super::{dtype_attr, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "Attention" => Ok(Some(attention(ctx, n)?)),
        "RotaryEmbedding" => one(rotary_embedding(ctx, n)?),
        "GroupNormalization" => one(group_normalization(ctx, n)?),
        _ => Ok(None),
    }
}

/// A rank-0 float constant of `dtype`.
fn float(ctx: &Ctx, v: f64, dtype: DType) -> Val {
    ctx.scalar(v, dtype)
}

/// `x[.., start:end:step]` along `axis`.
fn slice(
    ctx: &mut Ctx,
    x: &Val,
    axis: usize,
    start: usize,
    end: usize,
    step: usize,
) -> OpResult<Val> {
    let op = Op::Slice {
        axis: axis as i64,
        start: start as i64,
        end: end as i64,
        step: step as i64,
    };
    ctx.op(op, &[x])
}

/// A named positive integer attribute, if given.
fn heads_attr(n: &NodeIn, name: &str) -> OpResult<Option<usize>> {
    if !n.has(name) {
        return Ok(None);
    }
    match n.int(name, 0)? {
        h if h > 0 => Ok(Some(h as usize)),
        h => invalid!("attribute `{name}` must be positive, not {h}"),
    }
}

/// `[B, S, heads * size]` to `[B, heads, S, size]`.
fn split_heads(ctx: &mut Ctx, x: &Val, heads: usize, role: &str) -> OpResult<Val> {
    let s = ctx.shape(x);
    if !s[2].is_multiple_of(heads) {
        invalid!(
            "{role}'s hidden size {} is not a multiple of its {heads} heads",
            s[2]
        );
    }
    let x = ctx.reshape(x, &[s[0], s[1], heads, s[2] / heads])?;
    ctx.permute(&x, &[0, 2, 1, 3])
}

/// `0` where `keep`, `-inf` elsewhere, in `dtype`.
fn mask_bias(ctx: &mut Ctx, keep: &Val, dtype: DType) -> OpResult<Val> {
    let zero = float(ctx, 0.0, dtype);
    let ninf = float(ctx, f64::NEG_INFINITY, dtype);
    ctx.select(keep, &zero, &ninf)
}

/// `Attention`: `softmax(Q K^T * scale + bias) V` with the KV cache, grouped-query
/// heads, softcap and the four `qk_matmul_output` modes.
fn attention(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    let (q, k, v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let (mask, past_k, past_v, nonpad) = (n.opt(3), n.opt(4), n.opt(5), n.opt(6));
    let dt = ctx.dtype(q);
    if !dt.is_float() {
        invalid!("Q must be a float tensor, not {}", ctx.ty(q));
    }
    for (x, role) in [(k, "K"), (v, "V")] {
        if ctx.dtype(x) != dt {
            invalid!("{role} is {}, but Q is {}", ctx.ty(x), ctx.ty(q));
        }
    }
    let rank = ctx.rank(q);
    if ctx.rank(k) != rank || ctx.rank(v) != rank {
        invalid!(
            "Q, K and V must have one rank, not {}, {} and {}",
            ctx.rank(q),
            ctx.rank(k),
            ctx.rank(v)
        );
    }
    let q_heads = heads_attr(n, "q_num_heads")?;
    let kv_heads = heads_attr(n, "kv_num_heads")?;
    let (q4, k4, v4) = match rank {
        3 => {
            let (Some(hq), Some(hk)) = (q_heads, kv_heads) else {
                invalid!("3-D Q, K and V need the attributes `q_num_heads` and `kv_num_heads`");
            };
            (
                split_heads(ctx, q, hq, "Q")?,
                split_heads(ctx, k, hk, "K")?,
                split_heads(ctx, v, hk, "V")?,
            )
        }
        4 => {
            let (sq, sk) = (ctx.shape(q), ctx.shape(k));
            if q_heads.is_some_and(|h| h != sq[1]) {
                invalid!("`q_num_heads` does not match Q's {} heads", sq[1]);
            }
            if kv_heads.is_some_and(|h| h != sk[1]) {
                invalid!("`kv_num_heads` does not match K's {} heads", sk[1]);
            }
            (q.clone(), k.clone(), v.clone())
        }
        r => invalid!("Q, K and V must be 3-D or 4-D, not {r}-D"),
    };
    let (sq, sk, sv) = (ctx.shape(&q4), ctx.shape(&k4), ctx.shape(&v4));
    let (batch, hq, q_len, head) = (sq[0], sq[1], sq[2], sq[3]);
    if sk[0] != batch || sv[0] != batch {
        invalid!("Q, K and V must have one batch size");
    }
    if sk[3] != head {
        invalid!("K's head size {} is not Q's {head}", sk[3]);
    }
    if sv[1] != sk[1] || sv[2] != sk[2] {
        invalid!(
            "V's heads and sequence ({}, {}) are not K's ({}, {})",
            sv[1],
            sv[2],
            sk[1],
            sk[2]
        );
    }
    let scale = if n.has("scale") {
        n.float("scale", 0.0)?
    } else {
        1.0 / (head as f64).sqrt()
    };
    let root = scale.sqrt();

    // The KV cache: the past along the sequence axis, then the new keys and values.
    let cat = |ctx: &mut Ctx, past: Option<&Val>, new: &Val, role: &str| -> OpResult<Val> {
        let Some(p) = past else {
            return Ok(new.clone());
        };
        let (sp, sn) = (ctx.shape(p), ctx.shape(new));
        if sp.len() != 4 || sp[0] != sn[0] || sp[1] != sn[1] || sp[3] != sn[3] {
            invalid!(
                "{role} {} does not fit the new {} {:?}",
                ctx.ty(p),
                &role[5..],
                sn
            );
        }
        ctx.op(Op::Concat { axis: 2 }, &[p, new])
    };
    let present_k = cat(ctx, past_k, &k4, "past_key")?;
    let present_v = cat(ctx, past_v, &v4, "past_value")?;
    let total = ctx.dim(&present_k, 2)?;
    let past = total - sk[2];

    // The additive bias: the mask (padded with -inf up to the total length), the causal
    // triangle, the padding of `nonpad_kv_seqlen`.
    let mut bias = None;
    if let Some(m) = mask {
        let ms = ctx.shape(m);
        let Some(&last) = ms.last() else {
            invalid!("attn_mask must have rank >= 1");
        };
        if ms.len() > 4 {
            invalid!("attn_mask {} has more than 4 axes", ctx.ty(m));
        }
        if last > total {
            invalid!("attn_mask's last axis ({last}) is longer than the {total} keys");
        }
        let is_bool = ctx.dtype(m) == DType::Bool;
        if !is_bool && ctx.dtype(m) != dt {
            invalid!(
                "attn_mask must be bool or Q's dtype {dt}, not {}",
                ctx.ty(m)
            );
        }
        let m = if last < total {
            let mut pads = vec![0; 2 * ms.len()];
            pads[2 * ms.len() - 1] = (total - last) as i64;
            let value = if is_bool { 0.0 } else { f64::NEG_INFINITY };
            ctx.op(Op::Pad { pads, value }, &[m])?
        } else {
            m.clone()
        };
        bias = Some(if is_bool { mask_bias(ctx, &m, dt)? } else { m });
    }
    match n.int("is_causal", 0)? {
        0 => {}
        1 => {
            // Key j is visible from query i when j <= past + i.
            let i = ctx.arange(past as i64, (past + q_len) as i64, 1)?;
            let i = ctx.reshape(&i, &[q_len, 1])?;
            let j = ctx.arange(0, total as i64, 1)?;
            let keep = ctx.bin(B::Le, &j, &i)?;
            let c = mask_bias(ctx, &keep, dt)?;
            bias = Some(match bias {
                Some(b) => ctx.add(&b, &c)?,
                None => c,
            });
        }
        c => invalid!("attribute `is_causal` must be 0 or 1, not {c}"),
    }
    if let Some(len) = nonpad {
        if !matches!(ctx.dtype(len), DType::I64 | DType::I32) || ctx.shape(len) != [batch] {
            invalid!(
                "nonpad_kv_seqlen must be an integer vector of {batch}, not {}",
                ctx.ty(len)
            );
        }
        let len = ctx.cast(len, DType::I64)?;
        let len = ctx.reshape(&len, &[batch, 1, 1, 1])?;
        let j = ctx.arange(0, total as i64, 1)?;
        let keep = ctx.bin(B::Lt, &j, &len)?;
        let p = mask_bias(ctx, &keep, dt)?;
        bias = Some(match bias {
            Some(b) => ctx.add(&b, &p)?,
            None => p,
        });
    }

    // Grouped-query attention: each KV head serves `hq / hk` consecutive query heads.
    let hk = ctx.dim(&present_k, 1)?;
    let repeat = |ctx: &mut Ctx, x: &Val| -> OpResult<Val> {
        if hq == hk {
            return Ok(x.clone());
        }
        let s = ctx.shape(x);
        let x = ctx.op(Op::Unsqueeze { axis: 2 }, &[x])?;
        let shape = [s[0], s[1], hq / hk, s[2], s[3]].map(|d| d as i64).to_vec();
        let x = ctx.op(Op::Expand { shape }, &[&x])?;
        ctx.reshape(&x, &[s[0], hq, s[2], s[3]])
    };
    if hk == 0 || !hq.is_multiple_of(hk) {
        invalid!("Q's {hq} heads are not a multiple of K's and V's {hk}");
    }
    let kr = repeat(ctx, &present_k)?;
    let vr = repeat(ctx, &present_v)?;

    let kt = ctx.permute(&kr, &[0, 1, 3, 2])?;
    let qs = ctx.bin_s(B::Mul, &q4, root)?;
    let kts = ctx.bin_s(B::Mul, &kt, root)?;
    let qk = ctx.op(Op::MatMul, &[&qs, &kts])?;
    let softcap = n.float("softcap", 0.0)?;
    let capped = if softcap > 0.0 {
        let y = ctx.bin_s(B::Div, &qk, softcap)?;
        let y = ctx.un(U::Tanh, &y)?;
        ctx.bin_s(B::Mul, &y, softcap)?
    } else {
        qk.clone()
    };
    let biased = match &bias {
        Some(b) => ctx.add(&capped, b)?,
        None => capped.clone(),
    };
    let precision = if n.has("softmax_precision") {
        match dtype_attr(n, "softmax_precision", None)? {
            p if p.is_float() => p,
            p => invalid!("softmax_precision must be a float type, not {p}"),
        }
    } else {
        dt
    };
    let x = ctx.cast(&biased, precision)?;
    let probs = ctx.op(Op::Softmax { axis: -1 }, &[&x])?;
    let qk_out = match n.int("qk_matmul_output_mode", 0)? {
        0 => qk,
        1 => capped,
        2 => biased,
        3 => ctx.cast(&probs, dt)?,
        m => invalid!("attribute `qk_matmul_output_mode` must be 0, 1, 2 or 3, not {m}"),
    };
    let vp = ctx.cast(&vr, precision)?;
    let y = ctx.op(Op::MatMul, &[&probs, &vp])?;
    let y = ctx.cast(&y, dt)?;
    let y = if rank == 3 {
        let dv = ctx.dim(&y, 3)?;
        let y = ctx.permute(&y, &[0, 2, 1, 3])?;
        ctx.reshape(&y, &[batch, q_len, hq * dv])?
    } else {
        y
    };
    Ok(vec![
        Some(y),
        Some(present_k),
        Some(present_v),
        Some(qk_out),
    ])
}

/// `RotaryEmbedding`: rotates the first `rotary_embedding_dim` features of every head
/// by the cached angles, in halves or interleaved pairs.
fn rotary_embedding(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, cos, sin) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let ids = n.opt(3);
    let shape = ctx.shape(x);
    let dt = ctx.dtype(x);
    if !dt.is_float() {
        invalid!("the input must be a float tensor, not {}", ctx.ty(x));
    }
    // To `[B, S, heads, head_size]`.
    let x4 = match shape.len() {
        4 => ctx.permute(x, &[0, 2, 1, 3])?,
        3 => {
            let Some(h) = heads_attr(n, "num_heads")? else {
                invalid!("a 3-D input needs the attribute `num_heads`");
            };
            if !shape[2].is_multiple_of(h) {
                invalid!("hidden size {} is not a multiple of {h} heads", shape[2]);
            }
            ctx.reshape(x, &[shape[0], shape[1], h, shape[2] / h])?
        }
        r => invalid!("the input must be 3-D or 4-D, not {r}-D"),
    };
    let s4 = ctx.shape(&x4);
    let head = s4[3];
    let dim = match n.int("rotary_embedding_dim", 0)? {
        0 if head.is_multiple_of(2) => head,
        0 => invalid!("the head size {head} is odd: give an even `rotary_embedding_dim`"),
        d if d > 0 && d as usize <= head && d % 2 == 0 => d as usize,
        d => invalid!(
            "attribute `rotary_embedding_dim` must be even and at most the head size {head}, not {d}"
        ),
    };
    let half = dim / 2;
    let interleaved = match n.int("interleaved", 0)? {
        0 => false,
        1 => true,
        i => invalid!("attribute `interleaved` must be 0 or 1, not {i}"),
    };
    let mut caches = Vec::new();
    for (c, role) in [(cos, "cos_cache"), (sin, "sin_cache")] {
        if ctx.dtype(c) != dt {
            invalid!("{role} is {}, but the input is {dt}", ctx.ty(c));
        }
        let c = match ids {
            Some(p) => {
                if !matches!(ctx.dtype(p), DType::I64 | DType::I32) {
                    invalid!("position_ids must be integers, not {}", ctx.ty(p));
                }
                if ctx.rank(c) != 2 {
                    invalid!("{role} must be 2-D with position_ids, not {}", ctx.ty(c));
                }
                ctx.op(Op::IndexSelect { axis: 0 }, &[c, p])?
            }
            None => c.clone(),
        };
        let cs = ctx.shape(&c);
        if cs != [s4[0], s4[1], half] {
            invalid!(
                "{role} gives angles of shape {cs:?}, expected [{}, {}, {half}]",
                s4[0],
                s4[1]
            );
        }
        caches.push(ctx.op(Op::Unsqueeze { axis: 2 }, &[&c])?);
    }
    let (cos, sin) = (&caches[0], &caches[1]);
    let (x1, x2) = if interleaved {
        (
            slice(ctx, &x4, 3, 0, dim, 2)?,
            slice(ctx, &x4, 3, 1, dim, 2)?,
        )
    } else {
        (
            slice(ctx, &x4, 3, 0, half, 1)?,
            slice(ctx, &x4, 3, half, dim, 1)?,
        )
    };
    let a = ctx.mul(cos, &x1)?;
    let b = ctx.mul(sin, &x2)?;
    let real = ctx.sub(&a, &b)?;
    let a = ctx.mul(sin, &x1)?;
    let b = ctx.mul(cos, &x2)?;
    let imag = ctx.add(&a, &b)?;
    let rotated = if interleaved {
        let r = ctx.op(Op::Unsqueeze { axis: 4 }, &[&real])?;
        let i = ctx.op(Op::Unsqueeze { axis: 4 }, &[&imag])?;
        let pairs = ctx.op(Op::Concat { axis: 4 }, &[&r, &i])?;
        ctx.reshape(&pairs, &[s4[0], s4[1], s4[2], dim])?
    } else {
        ctx.op(Op::Concat { axis: 3 }, &[&real, &imag])?
    };
    let y = if dim < head {
        let rest = slice(ctx, &x4, 3, dim, head, 1)?;
        ctx.op(Op::Concat { axis: 3 }, &[&rotated, &rest])?
    } else {
        rotated
    };
    if shape.len() == 3 {
        ctx.reshape(&y, &shape)
    } else {
        ctx.permute(&y, &[0, 2, 1, 3])
    }
}

/// `GroupNormalization`: mean and variance per instance and group of channels (in the
/// `stash_type` precision), then a scale and bias per channel (per group before opset 21).
fn group_normalization(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Val> {
    let (x, scale, bias) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let shape = ctx.shape(x);
    if shape.len() < 2 {
        invalid!("the input must have rank >= 2, not {}", shape.len());
    }
    let groups = match n.int("num_groups", 0)? {
        g if g > 0 => g as usize,
        _ if !n.has("num_groups") => invalid!("attribute `num_groups` is required"),
        g => invalid!("attribute `num_groups` must be positive, not {g}"),
    };
    let c = shape[1];
    if !c.is_multiple_of(groups) {
        invalid!("{c} channels do not divide into {groups} groups");
    }
    let eps = n.float("epsilon", 1e-5)?;
    let stash = match n.int("stash_type", 1)? {
        1 => DType::F32,
        t => unsupported!("stash_type={t} is not supported"),
    };
    let dt = ctx.dtype(x);
    let rest: usize = shape[2..].iter().product();
    let xs = ctx.cast(x, stash)?;
    let xg = ctx.reshape(&xs, &[shape[0], groups, c / groups * rest])?;
    let mean = ctx.reduce(R::Mean, &xg, &[2], true)?;
    let d = ctx.sub(&xg, &mean)?;
    let sq = ctx.mul(&d, &d)?;
    let var = ctx.reduce(R::Mean, &sq, &[2], true)?;
    let ve = ctx.bin_s(B::Add, &var, eps)?;
    let inv = ctx.un(U::Rsqrt, &ve)?;
    let y = ctx.mul(&d, &inv)?;
    let y = ctx.cast(&y, dt)?;
    // The scale and bias per channel: opset 21 gives them per channel, 18 per group.
    let per = if n.opset >= 21 { c } else { groups };
    let mut out = Vec::new();
    for (p, role) in [(scale, "scale"), (bias, "bias")] {
        if ctx.shape(p) != [per] {
            invalid!("{role} must have shape [{per}], not {}", ctx.ty(p));
        }
        let p = if per == c {
            ctx.reshape(p, &[c, 1])?
        } else {
            let p = ctx.reshape(p, &[groups, 1, 1])?;
            let p = ctx.op(
                Op::Expand {
                    shape: vec![groups as i64, (c / groups) as i64, 1],
                },
                &[&p],
            )?;
            ctx.reshape(&p, &[c, 1])?
        };
        out.push(p);
    }
    let y = ctx.reshape(&y, &[shape[0], c, rest])?;
    let y = ctx.mul(&y, &out[0])?;
    let y = ctx.add(&y, &out[1])?;
    ctx.reshape(&y, &shape)
}

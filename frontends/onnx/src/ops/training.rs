//! The `ai.onnx.preview.training` domain: the optimizers Adagrad, Adam and Momentum
//! (standard and Nesterov), pointwise update formulas over `n` tensors, computed in
//! the tensors' float dtype as onnx's reference implementation writes them.

use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, UnaryOp as U};

/// The domain's name.
pub(crate) const DOMAIN: &str = "ai.onnx.preview.training";

pub(crate) fn import(ctx: &mut Ctx, n: &NodeIn) -> OpResult<Vec<Option<Val>>> {
    if n.opset != 1 {
        unsupported!(
            "opset {} of `{DOMAIN}` is not supported (Ferrite imports opset 1)",
            n.opset
        );
    }
    let (groups, outs) = match n.proto.op_type() {
        "Adagrad" => (3, 2),
        "Momentum" => (3, 2),
        "Adam" => (4, 3),
        op => unsupported!("op {op} of `{DOMAIN}` is not supported"),
    };
    let args = n.all()?;
    if args.len() < 2 + groups || (args.len() - 2) % groups != 0 {
        invalid!(
            "expected R, T and {groups} groups of tensors, got {} operands",
            args.len()
        );
    }
    let count = (args.len() - 2) / groups;
    let (r, t) = (args[0], args[1]);
    if ctx.ty(r).numel() != 1 || ctx.ty(t).numel() != 1 {
        invalid!(
            "R and T must hold one value each, not {} and {}",
            ctx.ty(r),
            ctx.ty(t)
        );
    }
    if !matches!(ctx.dtype(t), DType::I64 | DType::I32) {
        invalid!("T must be an integer, not {}", ctx.ty(t));
    }
    let mut results: Vec<Vec<Val>> = vec![Vec::new(); outs];
    for i in 0..count {
        let group: Vec<&Val> = (0..groups).map(|g| args[2 + g * count + i]).collect();
        let x = group[0];
        let dt = ctx.dtype(x);
        if !dt.is_float() {
            invalid!("the optimized tensors must be float, not {}", ctx.ty(x));
        }
        for v in &group[1..] {
            if ctx.ty(v) != ctx.ty(x) {
                invalid!("tensor {} does not match X ({})", ctx.ty(v), ctx.ty(x));
            }
        }
        let r = scalar_of(ctx, r, dt)?;
        let tf = scalar_of(ctx, t, dt)?;
        let tpos = {
            let zero = ctx.scalar(0.0, dt);
            ctx.bin(B::Gt, &tf, &zero)?
        };
        let outs = match n.proto.op_type() {
            "Adagrad" => adagrad(ctx, n, &r, &tf, &group)?,
            "Momentum" => momentum(ctx, n, &r, &tpos, &group)?,
            _ => adam(ctx, n, &r, &tf, &tpos, &group)?,
        };
        for (k, v) in outs.into_iter().enumerate() {
            results[k].push(v);
        }
    }
    Ok(results.into_iter().flatten().map(Some).collect())
}

/// A one-element operand as a rank-0 value of `dt`.
fn scalar_of(ctx: &mut Ctx, v: &Val, dt: DType) -> OpResult<Val> {
    let s = ctx.reshape(v, &[])?;
    ctx.cast(&s, dt)
}

/// `norm_coefficient * x + g`.
fn regularized(ctx: &mut Ctx, norm: f64, x: &Val, g: &Val) -> OpResult<Val> {
    let nx = ctx.bin_s(B::Mul, x, norm)?;
    ctx.add(&nx, g)
}

fn adagrad(ctx: &mut Ctx, n: &NodeIn, r: &Val, t: &Val, xs: &[&Val]) -> OpResult<Vec<Val>> {
    let decay = n.float("decay_factor", 0.0)?;
    let eps = n.float("epsilon", 0.0)?;
    let norm = n.float("norm_coefficient", 0.0)?;
    let (x, g, h) = (xs[0], xs[1], xs[2]);
    // r / (1 + t * decay)
    let td = ctx.bin_s(B::Mul, t, decay)?;
    let den = ctx.bin_s(B::Add, &td, 1.0)?;
    let r = ctx.div(r, &den)?;
    let gr = regularized(ctx, norm, x, g)?;
    let g2 = ctx.mul(&gr, &gr)?;
    let h_new = ctx.add(h, &g2)?;
    let sq = ctx.un(U::Sqrt, &h_new)?;
    let sq = ctx.bin_s(B::Add, &sq, eps)?;
    let step = ctx.mul(&r, &gr)?;
    let step = ctx.div(&step, &sq)?;
    let x_new = ctx.sub(x, &step)?;
    Ok(vec![x_new, h_new])
}

fn momentum(ctx: &mut Ctx, n: &NodeIn, r: &Val, tpos: &Val, xs: &[&Val]) -> OpResult<Vec<Val>> {
    for a in ["alpha", "beta", "mode", "norm_coefficient"] {
        if !n.has(a) {
            invalid!("attribute `{a}` is required");
        }
    }
    let alpha = n.float("alpha", 0.0)?;
    let beta = n.float("beta", 0.0)?;
    let norm = n.float("norm_coefficient", 0.0)?;
    let nesterov = match n.string("mode", "")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => invalid!("mode=\"{m}\" is neither \"standard\" nor \"nesterov\""),
    };
    let (x, g, v) = (xs[0], xs[1], xs[2]);
    let dt = ctx.dtype(x);
    let gr = regularized(ctx, norm, x, g)?;
    // beta, or 1 at the first update (t = 0).
    let (b, one) = (ctx.scalar(beta, dt), ctx.scalar(1.0, dt));
    let b = ctx.select(tpos, &b, &one)?;
    let av = ctx.bin_s(B::Mul, v, alpha)?;
    let bg = ctx.mul(&b, &gr)?;
    let v_new = ctx.add(&av, &bg)?;
    let dir = if nesterov {
        let av = ctx.bin_s(B::Mul, &v_new, alpha)?;
        ctx.add(&gr, &av)?
    } else {
        v_new.clone()
    };
    let step = ctx.mul(r, &dir)?;
    let x_new = ctx.sub(x, &step)?;
    Ok(vec![x_new, v_new])
}

fn adam(
    ctx: &mut Ctx,
    n: &NodeIn,
    r: &Val,
    t: &Val,
    tpos: &Val,
    xs: &[&Val],
) -> OpResult<Vec<Val>> {
    let alpha = n.float("alpha", 0.9)?;
    let beta = n.float("beta", 0.999)?;
    let eps = n.float("epsilon", 0.0)?;
    let norm = n.float("norm_coefficient", 0.0)?;
    let post = n.float("norm_coefficient_post", 0.0)?;
    let (x, g, v, h) = (xs[0], xs[1], xs[2], xs[3]);
    let dt = ctx.dtype(x);
    let gr = regularized(ctx, norm, x, g)?;
    let av = ctx.bin_s(B::Mul, v, alpha)?;
    let ag = ctx.bin_s(B::Mul, &gr, 1.0 - alpha)?;
    let v_new = ctx.add(&av, &ag)?;
    let bh = ctx.bin_s(B::Mul, h, beta)?;
    let g2 = ctx.mul(&gr, &gr)?;
    let bg = ctx.bin_s(B::Mul, &g2, 1.0 - beta)?;
    let h_new = ctx.add(&bh, &bg)?;
    let sq = ctx.un(U::Sqrt, &h_new)?;
    let sq = ctx.bin_s(B::Add, &sq, eps)?;
    // r * sqrt(1 - beta^t) / (1 - alpha^t) once t > 0, else r.
    let (a, b) = (ctx.scalar(alpha, dt), ctx.scalar(beta, dt));
    let bt = ctx.bin(B::Pow, &b, t)?;
    let at = ctx.bin(B::Pow, &a, t)?;
    let one = ctx.scalar(1.0, dt);
    let nb = ctx.sub(&one, &bt)?;
    let na = ctx.sub(&one, &at)?;
    let sb = ctx.un(U::Sqrt, &nb)?;
    let ra = ctx.mul(r, &sb)?;
    let ra = ctx.div(&ra, &na)?;
    let ra = ctx.select(tpos, &ra, r)?;
    let q = ctx.div(&v_new, &sq)?;
    let step = ctx.mul(&ra, &q)?;
    let x_new = ctx.sub(x, &step)?;
    let x_final = ctx.bin_s(B::Mul, &x_new, 1.0 - post)?;
    Ok(vec![x_final, v_new, h_new])
}

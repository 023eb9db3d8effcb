//! Contractions (MatMul, Gemm, Einsum) and normalizations (LayerNormalization,
//! RMSNormalization, BatchNormalization in inference, InstanceNormalization,
//! MeanVarianceNormalization, LpNormalization).

use super::{axes, axis, one};
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, ReduceOp as R, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    match op {
        "MatMul" => {
            let (a, b) = (n.input(0)?, n.input(1)?);
            one(ctx.op(Op::MatMul, &[a, b])?)
        }
        "Gemm" => {
            let (a, b) = (n.input(0)?, n.input(1)?);
            let alpha = n.float("alpha", 1.0)?;
            let beta = n.float("beta", 1.0)?;
            let a = if n.int("transA", 0)? != 0 {
                ctx.permute(a, &[1, 0])?
            } else {
                a.clone()
            };
            let b = if n.int("transB", 0)? != 0 {
                ctx.permute(b, &[1, 0])?
            } else {
                b.clone()
            };
            if ctx.rank(&a) != 2 || ctx.rank(&b) != 2 {
                invalid!("Gemm takes 2-D operands");
            }
            let mut y = ctx.op(Op::MatMul, &[&a, &b])?;
            if alpha != 1.0 {
                y = ctx.bin_s(B::Mul, &y, alpha)?;
            }
            if let Some(c) = n.opt(2) {
                let c = if beta != 1.0 {
                    ctx.bin_s(B::Mul, c, beta)?
                } else {
                    c.clone()
                };
                y = ctx.add(&y, &c)?;
            }
            one(y)
        }
        "Einsum" => {
            let eq = n.string("equation", "")?;
            let all = n.all()?;
            one(einsum(ctx, &eq, &all)?)
        }
        "LayerNormalization" | "RMSNormalization" => {
            let x = n.input(0)?;
            let scale = n.input(1)?;
            let rank = ctx.rank(x);
            let a = axis(n.int("axis", -1)?, rank, "axis")?;
            let eps = n.float("epsilon", 1e-5)?;
            let stash = match n.int("stash_type", 1)? {
                1 => DType::F32,
                t => unsupported!("stash_type={t} is not supported"),
            };
            let ax: Vec<usize> = (a..rank).collect();
            let dt = ctx.dtype(x);
            let xs = ctx.cast(x, stash)?;
            let (centered, mean) = if op == "LayerNormalization" {
                let mean = ctx.reduce(R::Mean, &xs, &ax, true)?;
                (ctx.sub(&xs, &mean)?, Some(mean))
            } else {
                (xs.clone(), None)
            };
            let sq = ctx.mul(&centered, &centered)?;
            let var = ctx.reduce(R::Mean, &sq, &ax, true)?;
            let ve = ctx.bin_s(B::Add, &var, eps)?;
            let inv = ctx.un(U::Rsqrt, &ve)?;
            let normed = ctx.mul(&centered, &inv)?;
            let normed = ctx.cast(&normed, dt)?;
            let mut y = ctx.mul(&normed, scale)?;
            if let Some(b) = n.opt(2).filter(|_| op == "LayerNormalization") {
                y = ctx.add(&y, b)?;
            }
            Ok(Some(vec![Some(y), mean, Some(inv)]))
        }
        "BatchNormalization" => {
            let training = n.int("training_mode", 0)? != 0;
            if n.opset < 14 && n.outputs() > 1 {
                unsupported!(
                    "BatchNormalization in training mode is not supported before opset 14"
                );
            }
            let x = n.input(0)?;
            let (scale, b, mean, var) = (n.input(1)?, n.input(2)?, n.input(3)?, n.input(4)?);
            if n.opset >= 14 && training {
                return Ok(Some(batch_norm_training(ctx, n, x, [scale, b, mean, var])?));
            }
            if n.outputs() > 1 {
                invalid!("running mean and variance are results only in training mode");
            }
            let eps = n.float("epsilon", 1e-5)?;
            let rank = ctx.rank(x);
            if rank < 2 {
                invalid!("BatchNormalization takes a tensor of rank >= 2");
            }
            let c = ctx.dim(x, 1)?;
            let mut shape = vec![1; rank - 1];
            shape[0] = c;
            let p = |ctx: &mut Ctx, v: &Val| ctx.reshape(v, &shape);
            let (scale, b, mean, var) = (p(ctx, scale)?, p(ctx, b)?, p(ctx, mean)?, p(ctx, var)?);
            let ve = ctx.bin_s(B::Add, &var, eps)?;
            let inv = ctx.un(U::Rsqrt, &ve)?;
            let d = ctx.sub(x, &mean)?;
            let y = ctx.mul(&d, &inv)?;
            let y = ctx.mul(&y, &scale)?;
            one(ctx.add(&y, &b)?)
        }
        "InstanceNormalization" => {
            let x = n.input(0)?;
            let (scale, b) = (n.input(1)?, n.input(2)?);
            let eps = n.float("epsilon", 1e-5)?;
            let rank = ctx.rank(x);
            if rank < 3 {
                invalid!("InstanceNormalization takes a tensor of rank >= 3");
            }
            let ax: Vec<usize> = (2..rank).collect();
            let mean = ctx.reduce(R::Mean, x, &ax, true)?;
            let d = ctx.sub(x, &mean)?;
            let sq = ctx.mul(&d, &d)?;
            let var = ctx.reduce(R::Mean, &sq, &ax, true)?;
            let ve = ctx.bin_s(B::Add, &var, eps)?;
            let inv = ctx.un(U::Rsqrt, &ve)?;
            let y = ctx.mul(&d, &inv)?;
            let c = ctx.dim(x, 1)?;
            let mut shape = vec![1; rank - 1];
            shape[0] = c;
            let scale = ctx.reshape(scale, &shape)?;
            let b = ctx.reshape(b, &shape)?;
            let y = ctx.mul(&y, &scale)?;
            one(ctx.add(&y, &b)?)
        }
        "MeanVarianceNormalization" => {
            let x = n.input(0)?;
            let rank = ctx.rank(x);
            let list = n.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
            let ax = axes(&list, rank, "axis")?;
            // The ONNX function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
            let mean = ctx.reduce(R::Mean, x, &ax, true)?;
            let mean_sq = ctx.mul(&mean, &mean)?;
            let sq = ctx.mul(x, x)?;
            let e_sq = ctx.reduce(R::Mean, &sq, &ax, true)?;
            let var = ctx.sub(&e_sq, &mean_sq)?;
            let std = ctx.un(U::Sqrt, &var)?;
            let std = ctx.bin_s(B::Add, &std, 1e-9)?;
            let d = ctx.sub(x, &mean)?;
            one(ctx.div(&d, &std)?)
        }
        "Det" => one(det(ctx, n.input(0)?)?),
        "LpNormalization" => {
            let x = n.input(0)?;
            let a = axis(n.int("axis", -1)?, ctx.rank(x), "axis")?;
            let norm = match n.int("p", 2)? {
                1 => {
                    let ab = ctx.un(U::Abs, x)?;
                    ctx.reduce(R::Sum, &ab, &[a], true)?
                }
                2 => {
                    let sq = ctx.mul(x, x)?;
                    let s = ctx.reduce(R::Sum, &sq, &[a], true)?;
                    ctx.un(U::Sqrt, &s)?
                }
                p => invalid!("p={p} is not 1 or 2"),
            };
            // A zero norm gives 0, not 0/0 (onnx's reference: where(norm == 0, 0, x / norm)).
            let q = ctx.div(x, &norm)?;
            let zero = ctx.bin_s(B::Eq, &norm, 0.0)?;
            let z = ctx.scalar(0.0, ctx.dtype(x));
            one(ctx.select(&zero, &z, &q)?)
        }
        _ => Ok(None),
    }
}

/// Einsum in the forms that are permutes, sums and one batched matmul: every letter
/// of an operand distinct, at most two operands. Letters in both operands and the
/// output are batch axes, in both but not the output contracted, in one only kept
/// (or summed first when the output lacks them).
fn einsum(ctx: &mut Ctx, eq: &str, ops: &[&Val]) -> OpResult<Val> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match eq.split_once("->") {
        Some((l, o)) => (l.to_string(), Some(o.to_string())),
        None => (eq.clone(), None),
    };
    if lhs.contains("...") || out.as_deref().is_some_and(|o| o.contains("...")) {
        return einsum_ellipsis(ctx, &lhs, out.as_deref(), ops);
    }
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    if terms.len() == ops.len()
        && terms.iter().any(|t| {
            let mut u = t.clone();
            u.sort();
            u.dedup();
            u.len() != t.len()
        })
    {
        return einsum_diagonals(ctx, &terms, out.as_deref(), ops);
    }
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    if terms.len() != ops.len() {
        invalid!(
            "the equation has {} operands, the node {}",
            terms.len(),
            ops.len()
        );
    }
    for (t, v) in terms.iter().zip(ops) {
        if t.iter().any(|c| !c.is_ascii_alphabetic()) {
            invalid!(
                "equation term `{}` has a character that is not a letter",
                t.iter().collect::<String>()
            );
        }
        if t.len() != ctx.rank(v) {
            invalid!(
                "term `{}` has {} letters for an operand of rank {}",
                t.iter().collect::<String>(),
                t.len(),
                ctx.rank(v)
            );
        }
        let mut seen = t.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != t.len() {
            unsupported!(
                "Einsum with a repeated letter in one operand (a diagonal) is not supported"
            );
        }
    }
    let out: Vec<char> = match out {
        Some(o) => o.chars().collect(),
        None => {
            // Implicit output: the letters used once, in alphabetical order.
            let mut all: Vec<char> = terms.concat();
            all.sort();
            let mut once: Vec<char> = all
                .iter()
                .copied()
                .filter(|c| all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.dedup();
            once
        }
    };
    let mut extents = std::collections::HashMap::new();
    for (t, v) in terms.iter().zip(ops) {
        for (&c, d) in t.iter().zip(ctx.shape(v)) {
            extents.entry(c).or_insert(d);
        }
    }
    let extent = |c: char| -> Option<usize> { extents.get(&c).copied() };
    for &c in &out {
        if extent(c).is_none() {
            invalid!("output letter `{c}` is in no operand");
        }
    }
    // Sum away the letters that only one operand has and the output lacks.
    let mut vals: Vec<Val> = Vec::new();
    let mut letters: Vec<Vec<char>> = Vec::new();
    for (k, (t, v)) in terms.iter().zip(ops).enumerate() {
        let others: Vec<char> = terms
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .flat_map(|(_, t)| t.clone())
            .collect();
        let drop: Vec<usize> = (0..t.len())
            .filter(|&i| !out.contains(&t[i]) && !others.contains(&t[i]))
            .collect();
        let v = if drop.is_empty() {
            (*v).clone()
        } else {
            ctx.reduce(R::Sum, v, &drop, false)?
        };
        letters.push(
            t.iter()
                .enumerate()
                .filter(|(i, _)| !drop.contains(i))
                .map(|(_, &c)| c)
                .collect(),
        );
        vals.push(v);
    }
    let (v, have) = match vals.len() {
        1 => (vals[0].clone(), letters[0].clone()),
        2 => {
            let (a, b) = (&letters[0], &letters[1]);
            let batch: Vec<char> = a
                .iter()
                .copied()
                .filter(|c| b.contains(c) && out.contains(c))
                .collect();
            let contract: Vec<char> = a
                .iter()
                .copied()
                .filter(|c| b.contains(c) && !out.contains(c))
                .collect();
            let left: Vec<char> = a.iter().copied().filter(|c| !b.contains(c)).collect();
            let right: Vec<char> = b.iter().copied().filter(|c| !a.contains(c)).collect();
            let pos = |t: &[char], cs: &[char]| {
                cs.iter()
                    .map(|c| t.iter().position(|d| d == c).unwrap())
                    .collect::<Vec<_>>()
            };
            for &c in &batch {
                if extent_in(ctx, &vals[0], a, c) != extent_in(ctx, &vals[1], b, c) {
                    invalid!("letter `{c}` has different extents in the two operands");
                }
            }
            let size = |cs: &[char]| {
                cs.iter()
                    .map(|&c| extent(c).unwrap_or(1))
                    .product::<usize>()
            };
            let ext = |cs: &[char]| {
                cs.iter()
                    .map(|&c| extent(c).unwrap_or(1))
                    .collect::<Vec<_>>()
            };
            let pa: Vec<usize> = [pos(a, &batch), pos(a, &left), pos(a, &contract)].concat();
            let pb: Vec<usize> = [pos(b, &batch), pos(b, &contract), pos(b, &right)].concat();
            let ta = ctx.permute(&vals[0], &pa)?;
            let tb = ctx.permute(&vals[1], &pb)?;
            let (nb, nl, nc, nr) = (size(&batch), size(&left), size(&contract), size(&right));
            let ta = ctx.reshape(&ta, &[nb, nl, nc])?;
            let tb = ctx.reshape(&tb, &[nb, nc, nr])?;
            let m = ctx.op(Op::MatMul, &[&ta, &tb])?;
            let shape = [ext(&batch), ext(&left), ext(&right)].concat();
            let m = ctx.reshape(&m, &shape)?;
            (m, [batch, left, right].concat())
        }
        k => unsupported!("Einsum of {k} operands is not supported"),
    };
    if have.len() != out.len() || out.iter().any(|c| !have.contains(c)) {
        invalid!("the output letters do not match the operands");
    }
    let perm: Vec<usize> = out
        .iter()
        .map(|c| have.iter().position(|d| d == c).unwrap())
        .collect();
    ctx.permute(&v, &perm)
}

fn extent_in(ctx: &Ctx, v: &Val, t: &[char], c: char) -> usize {
    t.iter()
        .position(|&d| d == c)
        .map_or(1, |i| ctx.shape(v).get(i).copied().unwrap_or(1))
}

/// An ellipsis stands for the dims that the letters leave, right-aligned across the
/// operands (numpy's broadcasting); each becomes a letter the equation does not use.
/// Without `->`, the output is the ellipsis, then the letters used once.
fn einsum_ellipsis(ctx: &mut Ctx, lhs: &str, out: Option<&str>, ops: &[&Val]) -> OpResult<Val> {
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ops.len() {
        invalid!(
            "the equation has {} operands, the node {}",
            terms.len(),
            ops.len()
        );
    }
    let free: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .filter(|c| !lhs.contains(*c) && !out.is_some_and(|o| o.contains(*c)))
        .collect();
    let mut counts = Vec::with_capacity(terms.len());
    for (t, v) in terms.iter().zip(ops) {
        let letters = t.replace("...", "").chars().count();
        let dots = t.matches("...").count();
        let r = ctx.rank(v);
        counts.push(match dots {
            0 => 0,
            1 if r >= letters => r - letters,
            1 => invalid!("term `{t}` has more letters than its operand's rank {r}"),
            _ => invalid!("term `{t}` has more than one ellipsis"),
        });
    }
    let most = counts.iter().copied().max().unwrap_or(0);
    if most > free.len() {
        unsupported!("an ellipsis of {most} dims leaves too few free letters");
    }
    let ell: String = free[..most].iter().collect();
    let mut new_terms = Vec::with_capacity(terms.len());
    for (t, &c) in terms.iter().zip(&counts) {
        new_terms.push(t.replace("...", &ell[most - c..]));
    }
    let new_out = match out {
        Some(o) => {
            if o.matches("...").count() > 1 {
                invalid!("the output `{o}` has more than one ellipsis");
            }
            o.replace("...", &ell)
        }
        None => {
            let all: String = terms.concat().replace("...", "");
            let mut once: Vec<char> = all
                .chars()
                .filter(|c| all.chars().filter(|d| d == c).count() == 1)
                .collect();
            once.sort();
            format!("{ell}{}", once.iter().collect::<String>())
        }
    };
    let eq = format!("{}->{new_out}", new_terms.join(","));
    einsum(ctx, &eq, ops)
}

/// A letter repeated within one operand takes that operand's diagonal first:
/// `where(i == j, x, 0)` summed over the second axis (the terms added are zeros, so the
/// diagonal is exact), until every letter of each operand is distinct.
fn einsum_diagonals(
    ctx: &mut Ctx,
    terms: &[Vec<char>],
    out: Option<&str>,
    ops: &[&Val],
) -> OpResult<Val> {
    let implicit_out = match out {
        Some(o) => o.to_string(),
        None => {
            // numpy's implicit output counts every occurrence, diagonals included.
            let all: Vec<char> = terms.concat();
            let mut once: Vec<char> = all
                .iter()
                .copied()
                .filter(|c| all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort();
            once.into_iter().collect()
        }
    };
    let mut vals = Vec::with_capacity(ops.len());
    let mut new_terms = Vec::with_capacity(ops.len());
    for (t, v) in terms.iter().zip(ops) {
        if t.len() != ctx.rank(v) {
            invalid!(
                "term `{}` has {} letters for an operand of rank {}",
                t.iter().collect::<String>(),
                t.len(),
                ctx.rank(v)
            );
        }
        let mut t = t.clone();
        let mut v = (*v).clone();
        while let Some((i, j)) = (0..t.len())
            .flat_map(|i| (i + 1..t.len()).map(move |j| (i, j)))
            .find(|&(i, j)| t[i] == t[j])
        {
            let shape = ctx.shape(&v);
            if shape[i] != shape[j] {
                invalid!(
                    "letter `{}` has extents {} and {}",
                    t[i],
                    shape[i],
                    shape[j]
                );
            }
            let r = shape.len();
            let d = shape[i];
            let mut si = vec![1; r];
            si[i] = d;
            let mut sj = vec![1; r];
            sj[j] = d;
            let ai = ctx.arange(0, d as i64, 1)?;
            let ai = ctx.reshape(&ai, &si)?;
            let aj = ctx.arange(0, d as i64, 1)?;
            let aj = ctx.reshape(&aj, &sj)?;
            let eye = ctx.bin(ferrite_ir::BinaryOp::Eq, &ai, &aj)?;
            let zero = ctx.scalar(0.0, ctx.dtype(&v));
            let m = ctx.select(&eye, &v, &zero)?;
            v = ctx.reduce(R::Sum, &m, &[j], false)?;
            t.remove(j);
        }
        vals.push(v);
        new_terms.push(t.into_iter().collect::<String>());
    }
    let eq = format!("{}->{implicit_out}", new_terms.join(","));
    let refs: Vec<&Val> = vals.iter().collect();
    einsum(ctx, &eq, &refs)
}

/// `x[.., i, j]` as a `[..]` value.
fn entry(ctx: &mut Ctx, x: &Val, i: usize, j: usize) -> OpResult<Val> {
    let r = ctx.rank(x) as i64;
    let mut v = x.clone();
    for (ax, k) in [(r - 2, i), (r - 1, j)] {
        v = ctx.op(
            Op::Slice {
                axis: ax,
                start: k as i64,
                end: k as i64 + 1,
                step: 1,
            },
            &[&v],
        )?;
    }
    ctx.op(
        Op::Squeeze {
            axes: Some(vec![r - 2, r - 1]),
        },
        &[&v],
    )
}

/// Det of 1x1, 2x2 and 3x3 matrices (batched) by cofactor expansion; larger ones
/// would need a pivoted LU and are refused.
pub(super) fn det(ctx: &mut Ctx, x: &Val) -> OpResult<Val> {
    let s = ctx.shape(x);
    let r = s.len();
    if r < 2 || s[r - 1] != s[r - 2] || !ctx.dtype(x).is_float() {
        invalid!("the input must be float [.., n, n], not {}", ctx.ty(x));
    }
    let n = s[r - 1];
    let e = |ctx: &mut Ctx, i: usize, j: usize| entry(ctx, x, i, j);
    // a*d - b*c of entries (i0, j0) (i0, j1) (i1, j0) (i1, j1).
    let minor = |ctx: &mut Ctx, i0: usize, i1: usize, j0: usize, j1: usize| -> OpResult<Val> {
        let (a, b) = (e(ctx, i0, j0)?, e(ctx, i0, j1)?);
        let (c, d) = (e(ctx, i1, j0)?, e(ctx, i1, j1)?);
        let ad = ctx.mul(&a, &d)?;
        let bc = ctx.mul(&b, &c)?;
        ctx.sub(&ad, &bc)
    };
    match n {
        1 => e(ctx, 0, 0),
        2 => minor(ctx, 0, 1, 0, 1),
        3 => {
            let mut acc: Option<Val> = None;
            for (j, (j0, j1)) in [(1, 2), (0, 2), (0, 1)].into_iter().enumerate() {
                let m = minor(ctx, 1, 2, j0, j1)?;
                let a = e(ctx, 0, j)?;
                let t = ctx.mul(&a, &m)?;
                acc = Some(match acc {
                    None => t,
                    Some(s) if j == 1 => ctx.sub(&s, &t)?,
                    Some(s) => ctx.add(&s, &t)?,
                });
            }
            Ok(acc.expect("three terms"))
        }
        _ => unsupported!("Det of {n}x{n} matrices is not supported (only up to 3x3)"),
    }
}

/// BatchNormalization with training_mode=1 (opset 14+): the batch's own mean and
/// (biased) variance over every axis but 1 normalize x; the running statistics are
/// `running * momentum + batch * (1 - momentum)`, as onnx's reference computes them.
fn batch_norm_training(
    ctx: &mut Ctx,
    n: &NodeIn,
    x: &Val,
    [scale, b, mean, var]: [&Val; 4],
) -> OpResult<Vec<Option<Val>>> {
    let eps = n.float("epsilon", 1e-5)?;
    let momentum = n.float("momentum", 0.9)?;
    let rank = ctx.rank(x);
    if rank < 2 || !ctx.dtype(x).is_float() {
        invalid!(
            "BatchNormalization takes a float tensor of rank >= 2, not {}",
            ctx.ty(x)
        );
    }
    let c = ctx.dim(x, 1)?;
    let ax: Vec<usize> = (0..rank).filter(|&a| a != 1).collect();
    let bm = ctx.reduce(R::Mean, x, &ax, true)?;
    let d = ctx.sub(x, &bm)?;
    let sq = ctx.mul(&d, &d)?;
    let bv = ctx.reduce(R::Mean, &sq, &ax, true)?;
    let ve = ctx.bin_s(B::Add, &bv, eps)?;
    let inv = ctx.un(U::Rsqrt, &ve)?;
    let mut shape = vec![1; rank];
    shape[1] = c;
    let (sc, bb) = (ctx.reshape(scale, &shape)?, ctx.reshape(b, &shape)?);
    let y = ctx.mul(&d, &inv)?;
    let y = ctx.mul(&y, &sc)?;
    let y = ctx.add(&y, &bb)?;
    let running = |ctx: &mut Ctx, old: &Val, batch: &Val| -> OpResult<Val> {
        let batch = ctx.reshape(batch, &[c])?;
        let old = ctx.reshape(old, &[c])?;
        let o = ctx.bin_s(B::Mul, &old, momentum)?;
        let nb = ctx.bin_s(B::Mul, &batch, 1.0 - momentum)?;
        ctx.add(&o, &nb)
    };
    let rm = running(ctx, mean, &bm)?;
    let rv = running(ctx, var, &bv)?;
    Ok(vec![Some(y), Some(rm), Some(rv)])
}

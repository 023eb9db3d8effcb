//! The recurrent layers `RNN`, `GRU` and `LSTM`, unrolled over the sequence at import
//! (the sequence length is a static dim). The input projection of every step is one
//! matmul over the whole sequence, as ONNX Runtime computes it; each step then adds its
//! recurrent matmul and applies the gates. `sequence_lens` (a constant or a computed
//! tensor) masks the steps past each batch entry's length: the state is carried
//! unchanged and `Y` is zero there, which for the reverse direction also makes each
//! entry start at its own last step, as the operator specifies.
//!
//! Gate orders follow the operator definitions: `W`, `R` and `B` hold the gates of
//! LSTM as `i o f c`, of GRU as `z r h`, and its peepholes `P` as `i o f`.

use super::control::MAX_UNROLL;
use super::elementwise::softplus;
use crate::error::{invalid, unsupported, OpResult};
use crate::import::{Ctx, NodeIn, Val};
use ferrite_ir::{BinaryOp as B, DType, Op, UnaryOp as U};

pub(super) fn import(ctx: &mut Ctx, n: &NodeIn, op: &str) -> OpResult<Option<Vec<Option<Val>>>> {
    let cell = match op {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru {
            linear_before_reset: n.int("linear_before_reset", 0)? != 0,
        },
        "LSTM" => Cell::Lstm {
            input_forget: n.int("input_forget", 0)? != 0,
        },
        _ => return Ok(None),
    };
    Ok(Some(recurrent(ctx, n, cell)?))
}

#[derive(Clone, Copy)]
enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    /// Gates per step.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// Activation functions per direction, and their defaults.
    fn defaults(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of the `activations` attribute, with its parameters.
#[derive(Clone, Debug)]
struct Act {
    name: String,
    alpha: f64,
    beta: f64,
}

/// Parses `activations`, `activation_alpha` and `activation_beta` into one list of
/// `per_dir` functions for each of `dirs` directions.
fn activations(n: &NodeIn, cell: Cell, dirs: usize) -> OpResult<Vec<Vec<Act>>> {
    let per_dir = cell.defaults().len();
    let names: Vec<String> = match n.strings("activations")? {
        Some(v) => v,
        None => (0..dirs)
            .flat_map(|_| cell.defaults().iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per_dir * dirs {
        invalid!(
            "`activations` lists {} functions; {} directions of this op take {}",
            names.len(),
            dirs,
            per_dir * dirs
        );
    }
    let alphas = n.floats("activation_alpha")?.unwrap_or_default();
    let betas = n.floats("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (0, 0);
    let take = |list: &[f32], i: &mut usize, default: f64| {
        let v = list.get(*i).map_or(default, |&v| v as f64);
        if *i < list.len() {
            *i += 1;
        }
        v
    };
    let mut acts = Vec::with_capacity(names.len());
    for name in names {
        // The defaults are those of the standalone operators (ONNX's reference).
        let (alpha, beta) = match name.to_ascii_lowercase().as_str() {
            "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (0.0, 0.0),
            "affine" => (take(&alphas, &mut ai, 1.0), take(&betas, &mut bi, 0.0)),
            "leakyrelu" => (take(&alphas, &mut ai, 0.01), 0.0),
            "thresholdedrelu" => (take(&alphas, &mut ai, 1.0), 0.0),
            "scaledtanh" => (take(&alphas, &mut ai, 1.0), take(&betas, &mut bi, 1.0)),
            "hardsigmoid" => (take(&alphas, &mut ai, 0.2), take(&betas, &mut bi, 0.5)),
            "elu" => (take(&alphas, &mut ai, 1.0), 0.0),
            _ => unsupported!("activation function `{name}` is not supported"),
        };
        acts.push(Act { name, alpha, beta });
    }
    Ok(acts.chunks(per_dir).map(|c| c.to_vec()).collect())
}

fn apply(ctx: &mut Ctx, a: &Act, x: &Val) -> OpResult<Val> {
    let dt = ctx.dtype(x);
    Ok(match a.name.to_ascii_lowercase().as_str() {
        "relu" => ctx.un(U::Relu, x)?,
        "tanh" => ctx.un(U::Tanh, x)?,
        "sigmoid" => ctx.un(U::Sigmoid, x)?,
        "affine" => {
            let y = ctx.bin_s(B::Mul, x, a.alpha)?;
            ctx.bin_s(B::Add, &y, a.beta)?
        }
        "leakyrelu" => {
            let neg = ctx.bin_s(B::Lt, x, 0.0)?;
            let ax = ctx.bin_s(B::Mul, x, a.alpha)?;
            ctx.select(&neg, &ax, x)?
        }
        "thresholdedrelu" => {
            let keep = ctx.bin_s(B::Gt, x, a.alpha)?;
            let zero = ctx.scalar(0.0, dt);
            ctx.select(&keep, x, &zero)?
        }
        "scaledtanh" => {
            let y = ctx.bin_s(B::Mul, x, a.beta)?;
            let y = ctx.un(U::Tanh, &y)?;
            ctx.bin_s(B::Mul, &y, a.alpha)?
        }
        "hardsigmoid" => {
            let y = ctx.bin_s(B::Mul, x, a.alpha)?;
            let y = ctx.bin_s(B::Add, &y, a.beta)?;
            let y = ctx.bin_s(B::Maximum, &y, 0.0)?;
            ctx.bin_s(B::Minimum, &y, 1.0)?
        }
        "elu" => {
            let pos = ctx.bin_s(B::Gt, x, 0.0)?;
            let e = ctx.un(U::Exp, x)?;
            let em1 = ctx.bin_s(B::Sub, &e, 1.0)?;
            let neg = ctx.bin_s(B::Mul, &em1, a.alpha)?;
            ctx.select(&pos, x, &neg)?
        }
        "softsign" => {
            let m = ctx.un(U::Abs, x)?;
            let d = ctx.bin_s(B::Add, &m, 1.0)?;
            ctx.div(x, &d)?
        }
        "softplus" => softplus(ctx, x)?,
        other => unsupported!("activation function `{other}` is not supported"),
    })
}

/// `x[.., start..start+len]` along `axis`.
fn part(ctx: &mut Ctx, x: &Val, axis: usize, start: usize, len: usize) -> OpResult<Val> {
    if ctx.dim(x, axis)? == len && start == 0 {
        return Ok(x.clone());
    }
    ctx.op(
        Op::Slice {
            axis: axis as i64,
            start: start as i64,
            end: (start + len) as i64,
            step: 1,
        },
        &[x],
    )
}

/// `x[i]` along axis 0, that axis dropped.
fn index0(ctx: &mut Ctx, x: &Val, i: usize) -> OpResult<Val> {
    let s = part(ctx, x, 0, i, 1)?;
    let shape = ctx.shape(&s)[1..].to_vec();
    ctx.reshape(&s, &shape)
}

fn concat(ctx: &mut Ctx, parts: &[Val], axis: usize) -> OpResult<Val> {
    if parts.len() == 1 {
        return Ok(parts[0].clone());
    }
    let refs: Vec<&Val> = parts.iter().collect();
    ctx.op(Op::Concat { axis: axis as i64 }, &refs)
}

fn recurrent(ctx: &mut Ctx, n: &NodeIn, cell: Cell) -> OpResult<Vec<Option<Val>>> {
    let (x, w, r) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let dt = ctx.dtype(x);
    if !dt.is_float() {
        invalid!("X must be a float tensor, not {dt}");
    }
    for (v, what) in [(w, "W"), (r, "R")] {
        if ctx.dtype(v) != dt {
            invalid!("{what} is {}, X is {dt}", ctx.dtype(v));
        }
    }
    let layout = n.int("layout", 0)?;
    if !matches!(layout, 0 | 1) {
        invalid!("layout must be 0 or 1, not {layout}");
    }
    if ctx.rank(x) != 3 || ctx.rank(w) != 3 || ctx.rank(r) != 3 {
        invalid!("X, W and R must be 3-D");
    }
    // Time-major from here on: [seq, batch, input].
    let x = if layout == 1 {
        ctx.permute(x, &[1, 0, 2])?
    } else {
        x.clone()
    };
    let (seq, batch, input) = (ctx.dim(&x, 0)?, ctx.dim(&x, 1)?, ctx.dim(&x, 2)?);
    let direction = n.string("direction", "forward")?;
    let dirs = match direction.as_str() {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        d => invalid!("direction must be forward, reverse or bidirectional, not `{d}`"),
    };
    let g = cell.gates();
    let hidden = match n.int("hidden_size", -1)? {
        -1 => {
            let rows = ctx.dim(r, 1)?;
            if rows % g != 0 {
                invalid!("R has {rows} rows, not a multiple of {g} gates");
            }
            rows / g
        }
        h if h > 0 => h as usize,
        h => invalid!("hidden_size must be positive, not {h}"),
    };
    let Some(gh) = g
        .checked_mul(hidden)
        .filter(|&gh| gh <= ferrite_ir::MAX_ELEMENTS)
    else {
        invalid!("hidden_size {hidden} is too large");
    };
    let want = |what: &str, shape: Vec<usize>, v: &Val, ctx: &Ctx| -> OpResult<()> {
        if ctx.shape(v) != shape {
            invalid!("{what} has shape {:?}, expected {:?}", ctx.shape(v), shape);
        }
        Ok(())
    };
    want("W", vec![dirs, gh, input], w, ctx)?;
    want("R", vec![dirs, gh, hidden], r, ctx)?;
    if seq > MAX_UNROLL {
        unsupported!(
            "a sequence of {seq} steps is longer than the {MAX_UNROLL} steps unrolled at import"
        );
    }
    let clip = if n.has("clip") {
        let c = n.float("clip", 0.0)?;
        if c.is_nan() || c <= 0.0 {
            invalid!("clip must be positive, not {c}");
        }
        Some(c)
    } else {
        None
    };
    let acts = activations(n, cell, dirs)?;
    let b = n.opt(3);
    if let Some(b) = b {
        want("B", vec![dirs, 2 * gh], b, ctx)?;
    }
    // sequence_lens as a [batch, 1] tensor of X's dtype, compared against each step.
    let lens = match n.opt(4) {
        None => None,
        Some(l) => {
            if ctx.shape(l) != [batch] {
                invalid!(
                    "sequence_lens has shape {:?}, expected [{batch}]",
                    ctx.shape(l)
                );
            }
            if !ctx.dtype(l).is_int() {
                invalid!("sequence_lens must be an integer tensor");
            }
            // A constant that covers every step needs no mask.
            let full = ctx
                .ints(l, "sequence_lens")
                .ok()
                .map(|v| v.iter().all(|&s| s == seq as i64));
            match full {
                Some(true) => None,
                _ => {
                    let lf = ctx.cast(l, DType::I64)?;
                    Some(ctx.reshape(&lf, &[batch, 1])?)
                }
            }
        }
    };
    // initial_h (and initial_c) as [dirs, batch, hidden], in layout 1 [batch, dirs, hidden].
    let state_in = |i: usize, what: &str, ctx: &mut Ctx| -> OpResult<Option<Val>> {
        match n.opt(i) {
            None => Ok(None),
            Some(v) => {
                let v = if layout == 1 {
                    want(what, vec![batch, dirs, hidden], v, ctx)?;
                    ctx.permute(v, &[1, 0, 2])?
                } else {
                    want(what, vec![dirs, batch, hidden], v, ctx)?;
                    v.clone()
                };
                Ok(Some(v))
            }
        }
    };
    let h0 = state_in(5, "initial_h", ctx)?;
    let (c0, p) = match cell {
        Cell::Lstm { .. } => {
            let c0 = state_in(6, "initial_c", ctx)?;
            let p = n.opt(7);
            if let Some(p) = p {
                want("P", vec![dirs, 3 * hidden], p, ctx)?;
            }
            (c0, p)
        }
        _ => (None, None),
    };
    if n.outputs()
        > if matches!(cell, Cell::Lstm { .. }) {
            3
        } else {
            2
        }
    {
        invalid!("the op has {} results declared", n.outputs());
    }

    let zero_state = {
        let z = ctx.scalar(0.0, dt);
        ctx.op(
            Op::Expand {
                shape: vec![batch as i64, hidden as i64],
            },
            &[&z],
        )?
    };
    let mut ys = Vec::with_capacity(dirs);
    let mut hs = Vec::with_capacity(dirs);
    let mut cs = Vec::with_capacity(dirs);
    for (d, act) in acts.iter().enumerate() {
        let reverse = direction == "reverse" || d == 1;
        let wd = index0(ctx, w, d)?; // [gh, input]
        let rd = index0(ctx, r, d)?; // [gh, hidden]
        let wt = ctx.permute(&wd, &[1, 0])?;
        let rt = ctx.permute(&rd, &[1, 0])?;
        // The input projection of every step at once: [seq, batch, gh].
        let xw = ctx.op(Op::MatMul, &[&x, &wt])?;
        let (wb, rb) = match b {
            Some(b) => {
                let bd = index0(ctx, b, d)?;
                (
                    Some(part(ctx, &bd, 0, 0, gh)?),
                    Some(part(ctx, &bd, 0, gh, gh)?),
                )
            }
            None => (None, None),
        };
        // GRU with linear_before_reset keeps the h gate's recurrent bias apart.
        let xw = match (&wb, &rb, cell) {
            (Some(wb), Some(rb), Cell::Gru { .. }) => {
                // z and r take both biases; h takes Wbh here and Rbh where the cell says.
                let zr = {
                    let a = part(ctx, wb, 0, 0, 2 * hidden)?;
                    let c = part(ctx, rb, 0, 0, 2 * hidden)?;
                    ctx.add(&a, &c)?
                };
                let wbh = part(ctx, wb, 0, 2 * hidden, hidden)?;
                let bias = concat(ctx, &[zr, wbh], 0)?;
                ctx.add(&xw, &bias)?
            }
            (Some(wb), Some(rb), _) => {
                let bias = ctx.add(wb, rb)?;
                ctx.add(&xw, &bias)?
            }
            _ => xw,
        };
        let rbh = match (&rb, cell) {
            (Some(rb), Cell::Gru { .. }) => Some(part(ctx, rb, 0, 2 * hidden, hidden)?),
            _ => None,
        };
        let peep = match p {
            Some(p) => {
                let pd = index0(ctx, p, d)?;
                Some([
                    part(ctx, &pd, 0, 0, hidden)?,
                    part(ctx, &pd, 0, hidden, hidden)?,
                    part(ctx, &pd, 0, 2 * hidden, hidden)?,
                ])
            }
            None => None,
        };
        let mut h = match &h0 {
            Some(h0) => index0(ctx, h0, d)?,
            None => zero_state.clone(),
        };
        let mut c = match &c0 {
            Some(c0) => index0(ctx, c0, d)?,
            None => zero_state.clone(),
        };

        let mut y_steps: Vec<Option<Val>> = vec![None; seq];
        let steps: Vec<usize> = if reverse {
            (0..seq).rev().collect()
        } else {
            (0..seq).collect()
        };
        for t in steps {
            let xt = index0(ctx, &xw, t)?; // [batch, gh]
            let gate = |ctx: &mut Ctx, v: &Val, k: usize| part(ctx, v, 1, k * hidden, hidden);
            let clipped = |ctx: &mut Ctx, v: Val| -> OpResult<Val> {
                match clip {
                    Some(c) => {
                        let v = ctx.bin_s(B::Maximum, &v, -c)?;
                        ctx.bin_s(B::Minimum, &v, c)
                    }
                    None => Ok(v),
                }
            };
            let (h_new, c_new) = match cell {
                Cell::Rnn => {
                    let hr = ctx.op(Op::MatMul, &[&h, &rt])?;
                    let pre = ctx.add(&xt, &hr)?;
                    let pre = clipped(ctx, pre)?;
                    (apply(ctx, &act[0], &pre)?, None)
                }
                Cell::Gru {
                    linear_before_reset,
                } => {
                    let rzr = part(ctx, &rt, 1, 0, 2 * hidden)?;
                    let rh = part(ctx, &rt, 1, 2 * hidden, hidden)?;
                    let hzr = ctx.op(Op::MatMul, &[&h, &rzr])?;
                    let xzr = part(ctx, &xt, 1, 0, 2 * hidden)?;
                    let zr = ctx.add(&xzr, &hzr)?;
                    let zr = clipped(ctx, zr)?;
                    let zr = apply(ctx, &act[0], &zr)?;
                    let z = gate(ctx, &zr, 0)?;
                    let rg = gate(ctx, &zr, 1)?;
                    let xh = gate(ctx, &xt, 2)?;
                    let hh = if linear_before_reset {
                        let mut m = ctx.op(Op::MatMul, &[&h, &rh])?;
                        if let Some(rbh) = &rbh {
                            m = ctx.add(&m, rbh)?;
                        }
                        ctx.mul(&rg, &m)?
                    } else {
                        let rh_in = ctx.mul(&rg, &h)?;
                        let mut m = ctx.op(Op::MatMul, &[&rh_in, &rh])?;
                        if let Some(rbh) = &rbh {
                            m = ctx.add(&m, rbh)?;
                        }
                        m
                    };
                    let pre = ctx.add(&xh, &hh)?;
                    let pre = clipped(ctx, pre)?;
                    let cand = apply(ctx, &act[1], &pre)?;
                    // (1 - z) * cand + z * h = cand + z * (h - cand)
                    let dh = ctx.sub(&h, &cand)?;
                    let zd = ctx.mul(&z, &dh)?;
                    (ctx.add(&cand, &zd)?, None)
                }
                Cell::Lstm { input_forget } => {
                    let hr = ctx.op(Op::MatMul, &[&h, &rt])?;
                    let pre = ctx.add(&xt, &hr)?;
                    let mut gi = gate(ctx, &pre, 0)?;
                    let mut go = gate(ctx, &pre, 1)?;
                    let mut gf = gate(ctx, &pre, 2)?;
                    let gc = gate(ctx, &pre, 3)?;
                    if let Some([pi, _, pf]) = &peep {
                        let a = ctx.mul(pi, &c)?;
                        gi = ctx.add(&gi, &a)?;
                        let a = ctx.mul(pf, &c)?;
                        gf = ctx.add(&gf, &a)?;
                    }
                    let gi = clipped(ctx, gi)?;
                    let i = apply(ctx, &act[0], &gi)?;
                    let f = if input_forget {
                        let one = ctx.scalar(1.0, dt);
                        ctx.sub(&one, &i)?
                    } else {
                        let gf = clipped(ctx, gf)?;
                        apply(ctx, &act[0], &gf)?
                    };
                    let gc = clipped(ctx, gc)?;
                    let cc = apply(ctx, &act[1], &gc)?;
                    let fc = ctx.mul(&f, &c)?;
                    let ic = ctx.mul(&i, &cc)?;
                    let c_new = ctx.add(&fc, &ic)?;
                    if let Some([_, po, _]) = &peep {
                        let a = ctx.mul(po, &c_new)?;
                        go = ctx.add(&go, &a)?;
                    }
                    let go = clipped(ctx, go)?;
                    let o = apply(ctx, &act[0], &go)?;
                    let hc = apply(ctx, &act[2], &c_new)?;
                    (ctx.mul(&o, &hc)?, Some(c_new))
                }
            };
            let (h_next, c_next, y) = match &lens {
                None => (h_new.clone(), c_new, h_new),
                Some(lens) => {
                    // Steps at or past an entry's length leave its state alone and give zeros.
                    let tt = ctx.scalar(t as f64, DType::I64);
                    let live = ctx.bin(B::Gt, lens, &tt)?; // [batch, 1]
                    let h_next = ctx.select(&live, &h_new, &h)?;
                    let c_next = match c_new {
                        Some(cn) => Some(ctx.select(&live, &cn, &c)?),
                        None => None,
                    };
                    let y = ctx.select(&live, &h_new, &zero_state)?;
                    (h_next, c_next, y)
                }
            };
            h = h_next;
            if let Some(cn) = c_next {
                c = cn;
            }
            y_steps[t] = Some(y);
        }
        // [seq, batch, hidden] for this direction.
        let mut ups = Vec::with_capacity(seq);
        for y in y_steps.into_iter().flatten() {
            ups.push(ctx.reshape(&y, &[1, batch, hidden])?);
        }
        let yd = if ups.is_empty() {
            let z = ctx.scalar(0.0, dt);
            ctx.op(
                Op::Expand {
                    shape: vec![0, batch as i64, hidden as i64],
                },
                &[&z],
            )?
        } else {
            concat(ctx, &ups, 0)?
        };
        ys.push(ctx.reshape(&yd, &[seq, 1, batch, hidden])?);
        hs.push(ctx.reshape(&h, &[1, batch, hidden])?);
        cs.push(ctx.reshape(&c, &[1, batch, hidden])?);
    }
    let y = concat(ctx, &ys, 1)?; // [seq, dirs, batch, hidden]
    let yh = concat(ctx, &hs, 0)?; // [dirs, batch, hidden]
    let yc = concat(ctx, &cs, 0)?;
    let (y, yh, yc) = if layout == 1 {
        (
            ctx.permute(&y, &[2, 0, 1, 3])?,
            ctx.permute(&yh, &[1, 0, 2])?,
            ctx.permute(&yc, &[1, 0, 2])?,
        )
    } else {
        (y, yh, yc)
    };
    let mut out = vec![Some(y), Some(yh)];
    if matches!(cell, Cell::Lstm { .. }) {
        out.push(Some(yc));
    }
    Ok(out)
}

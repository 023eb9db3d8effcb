//! A whole training step as one graph: the forward pass, the backward pass
//! ([`crate::autodiff`]) and the optimizer's update, so that all three are fused and
//! compiled together, as AOTAutograd + Inductor do.
//!
//! [`train_step`] takes a graph with a scalar loss and the parameters to train, and
//! returns a graph with these parameters, in order:
//! 1. the graph's own parameters (the trained ones and the data), unchanged in position;
//! 2. the optimizer's state: one tensor per trained parameter and slot (`momentum` for SGD
//!    with momentum; `exp_avg` and `exp_avg_sq` for Adam; `sum` for Adagrad; `left` and
//!    `right` for Shampoo), named `<param>.<slot>`, with the parameter's type (a column
//!    for row-wise Adagrad; for Shampoo a `[row_blocks, col_blocks, side, side]` stack of
//!    one statistic per block, [`Optimizer::slot_type`]); zeros before the first step;
//! 3. `step`, an `f64` scalar: the number of steps taken so far (0 before the first).
//!
//! and these results: the loss, each trained parameter's new value, each state slot's new
//! value (same order as the inputs), and `step + 1`. A driver feeds the new values back
//! (`ferrite::TrainStep`). The update rules are PyTorch's (`torch.optim.SGD`, `Adam`,
//! `AdamW`, `Adagrad`; row-wise Adagrad as fbgemm computes it), with hyperparameters as literals; Adam's bias corrections are computed in
//! `f64` from `step`, as PyTorch computes them in Python floats.
//!
//! **Sparse updates.** [`train_step_sparse`] trains some tables (2-D parameters that only
//! `embedding_bag`s read) from row-sparse gradients ([`crate::autodiff::grad_sparse`]):
//! SGD (without momentum or weight decay) and Adagrad, per element or row-wise, update
//! only the rows the batch touched, through `index_add`, and no tensor of the table's
//! size is made besides the table, its state and their new values. Duplicate indices are
//! coalesced as PyTorch coalesces a sparse gradient: each lookup finds the first lookup
//! of the same row (an `index_reduce(amin)` of positions into one integer per table row,
//! read back by `index_select`), the rows are summed there in lookup order (`index_add` into a
//! `[lookups, D]` buffer), and only those first positions update, once per distinct
//! row, by adding `-update` (and `-0.0` elsewhere, which leaves a value's bits as they
//! are). The numbers are the dense update's: the coalesced sum is the dense gradient's
//! row, summed in the same order.

use crate::autodiff::{fresh, grad_sparse, Gradient};
use crate::error::{Error, Result};
use ferrite_ir::{
    verify, BinaryOp as B, DType, Graph, Op, Scalar, TensorType, UnaryOp as U, ValueId,
};

/// An optimizer and its hyperparameters (PyTorch's names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.SGD`.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum factor (0: none, and no state).
        momentum: f64,
        /// Dampening of the momentum.
        dampening: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// `torch.optim.Adam` (`decoupled: false`) or `torch.optim.AdamW` (`decoupled: true`).
    Adam {
        /// Learning rate.
        lr: f64,
        /// Decay of the first moment.
        beta1: f64,
        /// Decay of the second moment.
        beta2: f64,
        /// Added to the denominator.
        eps: f64,
        /// L2 penalty (Adam: added to the gradient; AdamW: decoupled, applied to the weight).
        weight_decay: f64,
        /// AdamW's decoupled weight decay.
        decoupled: bool,
    },
    /// `torch.optim.Adagrad` (`row_wise: false`), or row-wise Adagrad as DLRM trains its
    /// embedding tables with (fbgemm's exact row-wise Adagrad: one accumulator per row, the
    /// mean of the row's squared gradient, so the state is a column rather than a table).
    /// A row the batch does not touch has a zero gradient and keeps its value and state,
    /// so the dense update computes what a sparse one would.
    Adagrad {
        /// Learning rate.
        lr: f64,
        /// Learning-rate decay per step (`lr / (1 + (step - 1) lr_decay)`).
        lr_decay: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Added to the denominator.
        eps: f64,
        /// One accumulator per row (the last axis) instead of per element.
        row_wise: bool,
    },
    /// Shampoo's block preconditioner (Gupta, Koren and Singer, 2018), as graph code: the
    /// parameter is seen as a matrix (a vector as one row, a tensor of higher rank as its
    /// last axis by the rest), cut into blocks of at most `block_size` x `block_size`
    /// (zero-padded at the edges, which leaves the real rows and columns exact), and each
    /// block `G` of the gradient updates its statistics `L += G G^T`, `R += G^T G`; then
    /// `W -= lr * (L + eps I)^(-1/4) G (R + eps I)^(-1/4)`. The inverse fourth roots are
    /// matmul-only: `iterations` steps of the coupled Newton iteration (see
    /// [`inverse_fourth_root`]), no eigendecomposition.
    Shampoo {
        /// Learning rate.
        lr: f64,
        /// Added to the diagonal of both statistics (their `eps I` start).
        eps: f64,
        /// The largest block side.
        block_size: usize,
        /// Newton steps per inverse root.
        iterations: usize,
    },
}

impl Optimizer {
    /// SGD without momentum.
    pub fn sgd(lr: f64) -> Optimizer {
        Optimizer::Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }

    /// Adam with PyTorch's defaults (betas 0.9, 0.999, eps 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        }
    }

    /// AdamW with PyTorch's defaults (weight decay 0.01).
    pub fn adamw(lr: f64) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decoupled: true,
        }
    }

    /// Adagrad with PyTorch's defaults (eps 1e-10), per element.
    pub fn adagrad(lr: f64) -> Optimizer {
        Optimizer::Adagrad {
            lr,
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-10,
            row_wise: false,
        }
    }

    /// Shampoo with `eps` 1e-4, blocks of at most 128 x 128 and 20 Newton steps per
    /// inverse root (enough for statistics whose largest eigenvalue is up to about 1e5
    /// times `eps`: see [`inverse_fourth_root`]).
    pub fn shampoo(lr: f64) -> Optimizer {
        Optimizer::Shampoo {
            lr,
            eps: 1e-4,
            block_size: 128,
            iterations: 20,
        }
    }

    /// The names of the state slots each trained parameter has.
    pub fn slots(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Shampoo { .. } => &["left", "right"],
            Optimizer::Sgd { momentum, .. } if *momentum != 0.0 => &["momentum"],
            Optimizer::Sgd { .. } => &[],
            Optimizer::Adam { .. } => &["exp_avg", "exp_avg_sq"],
            Optimizer::Adagrad { .. } => &["sum"],
        }
    }

    /// The type of state slot `slot` (an index into [`Optimizer::slots`]) of a parameter
    /// of type `ty`.
    pub fn slot_type(&self, slot: usize, ty: &TensorType) -> TensorType {
        match self {
            Optimizer::Shampoo { block_size, .. } => {
                let b = Blocks::of(&ty.shape, *block_size);
                let side = if slot == 0 { b.rows } else { b.cols };
                TensorType {
                    dtype: ty.dtype,
                    shape: vec![b.row_blocks, b.col_blocks, side, side],
                }
            }
            Optimizer::Adagrad { row_wise: true, .. } if ty.rank() > 0 => {
                let mut shape = ty.shape.clone();
                *shape.last_mut().unwrap() = 1;
                TensorType {
                    dtype: ty.dtype,
                    shape,
                }
            }
            _ => ty.clone(),
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |what: &str, v: f64| {
            Err(Error::InvalidGraph(format!(
                "train_step: {what} must be a finite number in range, not {v}"
            )))
        };
        let non_negative = |pairs: &[(&str, f64)]| -> Result<()> {
            match pairs.iter().find(|(_, v)| !v.is_finite() || *v < 0.0) {
                Some(&(w, v)) => bad(w, v),
                None => Ok(()),
            }
        };
        match *self {
            Optimizer::Sgd {
                lr,
                momentum,
                dampening,
                weight_decay,
                nesterov,
            } => {
                non_negative(&[
                    ("lr", lr),
                    ("momentum", momentum),
                    ("dampening", dampening),
                    ("weight_decay", weight_decay),
                ])?;
                if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                    return Err(Error::InvalidGraph(
                        "train_step: Nesterov momentum needs a momentum and zero dampening".into(),
                    ));
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => {
                non_negative(&[("lr", lr), ("eps", eps), ("weight_decay", weight_decay)])?;
                for (w, v) in [("beta1", beta1), ("beta2", beta2)] {
                    if !(0.0..1.0).contains(&v) {
                        return bad(w, v);
                    }
                }
            }
            Optimizer::Adagrad {
                lr,
                lr_decay,
                weight_decay,
                eps,
                ..
            } => {
                non_negative(&[
                    ("lr", lr),
                    ("lr_decay", lr_decay),
                    ("weight_decay", weight_decay),
                    ("eps", eps),
                ])?;
            }
            Optimizer::Shampoo {
                lr,
                eps,
                block_size,
                iterations,
            } => {
                non_negative(&[("lr", lr), ("eps", eps)])?;
                if eps == 0.0 || block_size == 0 || !(1..=MAX_NEWTON_STEPS).contains(&iterations) {
                    return Err(Error::InvalidGraph(format!(
                        "train_step: Shampoo needs eps > 0, block_size > 0 and 1 to \
                         {MAX_NEWTON_STEPS} iterations, not eps {eps}, block_size \
                         {block_size}, iterations {iterations}"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The training-step graph of `g` (see the module docs): `trained` are parameters of `g`
/// (float), the loss is `g.outputs[loss]`.
pub fn train_step(g: &Graph, loss: usize, trained: &[ValueId], opt: &Optimizer) -> Result<Graph> {
    train_step_groups(g, loss, &[(trained.to_vec(), opt.clone())])
}

/// [`train_step`] with one optimizer per group of parameters (PyTorch's parameter groups;
/// DLRM trains its embedding tables with row-wise Adagrad and its MLPs with another
/// optimizer). The trained parameters are the groups' in order; each has its own
/// optimizer's state slots.
pub fn train_step_groups(
    g: &Graph,
    loss: usize,
    groups: &[(Vec<ValueId>, Optimizer)],
) -> Result<Graph> {
    train_step_sparse(g, loss, groups, &[])
}

/// [`train_step_groups`], with the trained parameters of `row_sparse` (tables read only
/// by `embedding_bag`s) updated from row-sparse gradients (see the module docs). Their
/// optimizer must be SGD without momentum and weight decay, or Adagrad without weight
/// decay (per element or row-wise).
pub fn train_step_sparse(
    g: &Graph,
    loss: usize,
    groups: &[(Vec<ValueId>, Optimizer)],
    row_sparse: &[ValueId],
) -> Result<Graph> {
    let mut trained = Vec::new();
    let mut opts = Vec::new();
    for (params, opt) in groups {
        opt.check()?;
        for &p in params {
            trained.push(p);
            opts.push(opt);
        }
    }
    let trained = &trained[..];
    for &p in trained {
        if !g.params.contains(&p) {
            return Err(Error::InvalidGraph(format!(
                "train_step: {} is not a parameter of the graph; only parameters are trained",
                name(g, p)
            )));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for &p in trained {
        if !seen.insert(p) {
            return Err(Error::InvalidGraph(format!(
                "train_step: {} is listed twice",
                name(g, p)
            )));
        }
    }
    for &p in row_sparse {
        let Some(k) = trained.iter().position(|&t| t == p) else {
            return Err(Error::InvalidGraph(format!(
                "train_step: {} is asked for a sparse update but is not trained",
                name(g, p)
            )));
        };
        let fits = match *opts[k] {
            Optimizer::Sgd {
                momentum,
                weight_decay,
                ..
            } => momentum == 0.0 && weight_decay == 0.0,
            Optimizer::Adagrad { weight_decay, .. } => weight_decay == 0.0,
            Optimizer::Adam { .. } | Optimizer::Shampoo { .. } => false,
        };
        if !fits {
            return Err(Error::InvalidGraph(format!(
                "train_step: {} has a sparse update, which SGD without momentum or weight \
                 decay and Adagrad without weight decay make, not {:?}",
                name(g, p),
                opts[k]
            )));
        }
    }
    let (joint, grads) = grad_sparse(g, loss, trained, row_sparse)?;
    let mut out = joint.clone();
    let loss_v = joint.outputs[loss];
    // State parameters, slot-major per parameter.
    let mut state = Vec::new();
    for (&p, opt) in trained.iter().zip(&opts) {
        let mut slots = Vec::new();
        for (i, slot) in opt.slots().iter().enumerate() {
            let nm = fresh(&out, &format!("{}.{slot}", name_raw(g, p)));
            let ty = opt.slot_type(i, g.ty(p));
            slots.push(out.add_param(nm, ty).map_err(ir)?);
        }
        state.push(slots);
    }
    let step_name = fresh(&out, "step");
    let step = out
        .add_param(step_name, TensorType::scalar(DType::F64))
        .map_err(ir)?;
    let mut b = Build { g: &mut out };
    let one = b.lit(1.0, DType::F64)?;
    let t = b.bin(B::Add, step, one)?;
    let mut new_params = Vec::new();
    let mut new_state = Vec::new();
    for (k, &p) in trained.iter().enumerate() {
        let dt = b.g.ty(p).dtype;
        let mut d = match grads[k] {
            Gradient::Dense(d) => d,
            Gradient::RowSparse { indices, rows } => {
                let (np, ns) = b.sparse_update(p, indices, rows, &state[k], opts[k], t)?;
                new_params.push(np);
                new_state.extend(ns);
                continue;
            }
        };
        match *opts[k] {
            Optimizer::Sgd {
                lr,
                momentum,
                dampening,
                weight_decay,
                nesterov,
            } => {
                if weight_decay != 0.0 {
                    let wp = b.bin_s(B::Mul, p, weight_decay)?;
                    d = b.bin(B::Add, d, wp)?;
                }
                if momentum != 0.0 {
                    let buf = state[k][0];
                    // PyTorch starts the buffer at the first gradient, undamped.
                    let mb = b.bin_s(B::Mul, buf, momentum)?;
                    let dd = b.bin_s(B::Mul, d, 1.0 - dampening)?;
                    let later = b.bin(B::Add, mb, dd)?;
                    let zero = b.lit(0.0, DType::F64)?;
                    let first = b.bin(B::Eq, step, zero)?;
                    let nb = b.g.add(Op::Where, &[first, d, later], None).map_err(ir)?;
                    new_state.push(nb);
                    d = if nesterov {
                        let m = b.bin_s(B::Mul, nb, momentum)?;
                        b.bin(B::Add, d, m)?
                    } else {
                        nb
                    };
                }
                let u = b.bin_s(B::Mul, d, lr)?;
                new_params.push(b.bin(B::Sub, p, u)?);
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                decoupled,
            } => {
                let mut w = p;
                if weight_decay != 0.0 {
                    if decoupled {
                        w = b.bin_s(B::Mul, p, 1.0 - lr * weight_decay)?;
                    } else {
                        let wp = b.bin_s(B::Mul, p, weight_decay)?;
                        d = b.bin(B::Add, d, wp)?;
                    }
                }
                let (m, v) = (state[k][0], state[k][1]);
                // m = m + (1 - b1) (d - m), as torch's lerp_; v = b2 v + (1 - b2) d^2.
                let dm = b.bin(B::Sub, d, m)?;
                let dm = b.bin_s(B::Mul, dm, 1.0 - beta1)?;
                let m1 = b.bin(B::Add, m, dm)?;
                let vb = b.bin_s(B::Mul, v, beta2)?;
                let d2 = b.bin(B::Mul, d, d)?;
                let d2 = b.bin_s(B::Mul, d2, 1.0 - beta2)?;
                let v1 = b.bin(B::Add, vb, d2)?;
                // Bias corrections in f64: bc1 = 1 - b1^t, bc2 = 1 - b2^t.
                let bc = |b: &mut Build, beta: f64| -> Result<ValueId> {
                    let base = b.lit(beta, DType::F64)?;
                    let pw = b.bin(B::Pow, base, t)?;
                    let one = b.lit(1.0, DType::F64)?;
                    b.bin(B::Sub, one, pw)
                };
                let bc1 = bc(&mut b, beta1)?;
                let bc2 = bc(&mut b, beta2)?;
                // step size lr / bc1; denominator sqrt(v) / sqrt(bc2) + eps (torch's order).
                let lrl = b.lit(lr, DType::F64)?;
                let step_size = b.bin(B::Div, lrl, bc1)?;
                let step_size = b.cast(step_size, dt)?;
                let sbc2 = b.g.add(Op::Unary(U::Sqrt), &[bc2], None).map_err(ir)?;
                let sbc2 = b.cast(sbc2, dt)?;
                let sv = b.g.add(Op::Unary(U::Sqrt), &[v1], None).map_err(ir)?;
                let den = b.bin(B::Div, sv, sbc2)?;
                let den = b.bin_s(B::Add, den, eps)?;
                let ratio = b.bin(B::Div, m1, den)?;
                let upd = b.bin(B::Mul, ratio, step_size)?;
                new_params.push(b.bin(B::Sub, w, upd)?);
                new_state.push(m1);
                new_state.push(v1);
            }
            Optimizer::Adagrad {
                lr,
                lr_decay,
                weight_decay,
                eps,
                row_wise,
            } => {
                if weight_decay != 0.0 {
                    let wp = b.bin_s(B::Mul, p, weight_decay)?;
                    d = b.bin(B::Add, d, wp)?;
                }
                let sum = state[k][0];
                let d2 = b.bin(B::Mul, d, d)?;
                let rank = b.g.ty(p).rank();
                let d2 = if row_wise && rank > 0 {
                    let y =
                        b.g.add(
                            Op::Reduce {
                                op: ferrite_ir::ReduceOp::Mean,
                                axes: Some(vec![rank as i64 - 1]),
                                keepdim: true,
                            },
                            &[d2],
                            None,
                        )
                        .map_err(ir)?;
                    b.cast(y, dt)?
                } else {
                    d2
                };
                let s1 = b.bin(B::Add, sum, d2)?;
                // clr = lr / (1 + (t - 1) lr_decay), in f64 from the step count.
                let one = b.lit(1.0, DType::F64)?;
                let tm1 = b.bin(B::Sub, t, one)?;
                let decay = b.bin_s(B::Mul, tm1, lr_decay)?;
                let den = b.bin_s(B::Add, decay, 1.0)?;
                let lrl = b.lit(lr, DType::F64)?;
                let clr = b.bin(B::Div, lrl, den)?;
                let clr = b.cast(clr, dt)?;
                let sd = b.g.add(Op::Unary(U::Sqrt), &[s1], None).map_err(ir)?;
                let sd = b.bin_s(B::Add, sd, eps)?;
                let ratio = b.bin(B::Div, d, sd)?;
                let upd = b.bin(B::Mul, ratio, clr)?;
                new_params.push(b.bin(B::Sub, p, upd)?);
                new_state.push(s1);
            }
            Optimizer::Shampoo {
                lr,
                eps,
                block_size,
                iterations,
            } => {
                let (np, l1, r1) = b.shampoo(
                    p,
                    d,
                    (state[k][0], state[k][1]),
                    lr,
                    eps,
                    block_size,
                    iterations,
                )?;
                new_params.push(np);
                new_state.push(l1);
                new_state.push(r1);
            }
        }
    }
    out.outputs = vec![loss_v];
    out.outputs.extend(new_params);
    out.outputs.extend(new_state);
    out.outputs.push(t);
    out.declared_outputs = None;
    verify(&out)
        .map_err(|e| Error::internal(format!("train_step produced an invalid graph: {e}")))?;
    Ok(out)
}

struct Build<'g> {
    g: &'g mut Graph,
}

impl Build<'_> {
    fn add(&mut self, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
        self.g.add(op, inputs, None).map_err(ir)
    }

    /// The new value of table `p` and of its state slots from the row-sparse gradient
    /// `(indices, rows)`, for SGD or Adagrad (see the module docs).
    fn sparse_update(
        &mut self,
        p: ValueId,
        indices: ValueId,
        rows: ValueId,
        state: &[ValueId],
        opt: &Optimizer,
        t: ValueId,
    ) -> Result<(ValueId, Vec<ValueId>)> {
        let ty = self.g.ty(rows).clone();
        let (n, dt) = (ty.shape[0], ty.dtype);
        if n == 0 {
            // No lookups: nothing changes.
            return Ok((p, state.to_vec()));
        }
        // first[j]: the first lookup of the same row as lookup j, the least position of an
        // equal lookup: each row's least position by a scatter-min of the positions into a
        // column of the table's rows (`n` where no lookup points), read back at each
        // lookup. Linear in the lookups plus one integer per table row, where comparing
        // every pair of lookups was `n^2` (57% of a DLRM step at batch 512).
        let rows_of_table = self.g.ty(p).shape.first().copied().unwrap_or(0);
        let positions = self.arange(n, DType::I64)?;
        let none = self.full(&[rows_of_table], n as f64, DType::I64)?;
        let least = self.add(
            Op::IndexReduce {
                axis: 0,
                reduce: ferrite_ir::IndexReduceOp::Amin,
                include_self: true,
            },
            &[none, indices, positions],
        )?;
        let first = self.add(Op::IndexSelect { axis: 0 }, &[least, indices])?;
        let zeros = self.full(&ty.shape, 0.0, dt)?;
        // The coalesced gradient, at each row's first lookup.
        let sums = self.add(Op::IndexAdd { axis: 0 }, &[zeros, first, rows])?;
        let is_first = self.bin(B::Eq, first, positions)?;
        let is_first = self.reshape(is_first, &[n, 1])?;
        let neg_zero = self.lit(-0.0, dt)?;
        // `base` with `delta` added at each distinct row once: `-0.0` elsewhere.
        let apply = |b: &mut Build, base: ValueId, delta: ValueId| -> Result<ValueId> {
            let delta = b.add(Op::Where, &[is_first, delta, neg_zero])?;
            b.add(Op::IndexAdd { axis: 0 }, &[base, indices, delta])
        };
        match *opt {
            Optimizer::Sgd { lr, .. } => {
                let u = self.bin_s(B::Mul, sums, lr)?;
                let u = self.g.add(Op::Unary(U::Neg), &[u], None).map_err(ir)?;
                Ok((apply(self, p, u)?, vec![]))
            }
            Optimizer::Adagrad {
                lr,
                lr_decay,
                eps,
                row_wise,
                ..
            } => {
                let sum = state[0];
                let d2 = self.bin(B::Mul, sums, sums)?;
                let d2 = if row_wise {
                    let y = self.add(
                        Op::Reduce {
                            op: ferrite_ir::ReduceOp::Mean,
                            axes: Some(vec![1]),
                            keepdim: true,
                        },
                        &[d2],
                    )?;
                    self.cast(y, dt)?
                } else {
                    d2
                };
                let old = self.add(Op::IndexSelect { axis: 0 }, &[sum, indices])?;
                let s1 = self.bin(B::Add, old, d2)?;
                let one = self.lit(1.0, DType::F64)?;
                let tm1 = self.bin(B::Sub, t, one)?;
                let decay = self.bin_s(B::Mul, tm1, lr_decay)?;
                let den = self.bin_s(B::Add, decay, 1.0)?;
                let lrl = self.lit(lr, DType::F64)?;
                let clr = self.bin(B::Div, lrl, den)?;
                let clr = self.cast(clr, dt)?;
                let sd = self.g.add(Op::Unary(U::Sqrt), &[s1], None).map_err(ir)?;
                let sd = self.bin_s(B::Add, sd, eps)?;
                let ratio = self.bin(B::Div, sums, sd)?;
                let upd = self.bin(B::Mul, ratio, clr)?;
                let upd = self.g.add(Op::Unary(U::Neg), &[upd], None).map_err(ir)?;
                let np = apply(self, p, upd)?;
                let ns = apply(self, sum, d2)?;
                Ok((np, vec![ns]))
            }
            Optimizer::Adam { .. } | Optimizer::Shampoo { .. } => {
                Err(Error::internal("a sparse Adam or Shampoo update"))
            }
        }
    }

    /// Shampoo's update of `p` from its dense gradient `d` and its statistics `(l, r)`
    /// (see [`Optimizer::Shampoo`]): the new parameter and statistics.
    #[allow(clippy::too_many_arguments)]
    fn shampoo(
        &mut self,
        p: ValueId,
        d: ValueId,
        (l, r): (ValueId, ValueId),
        lr: f64,
        eps: f64,
        block_size: usize,
        iterations: usize,
    ) -> Result<(ValueId, ValueId, ValueId)> {
        let ty = self.g.ty(p).clone();
        if ty.numel() == 0 {
            return Ok((p, l, r));
        }
        let bl = Blocks::of(&ty.shape, block_size);
        let (mp, np) = (bl.row_blocks * bl.rows, bl.col_blocks * bl.cols);
        let i = |v: usize| v as i64;
        let g2 = self.add(
            Op::Reshape {
                shape: vec![i(bl.m), i(bl.n)],
            },
            &[d],
        )?;
        let g2 = if (mp, np) != (bl.m, bl.n) {
            self.add(
                Op::Pad {
                    pads: vec![0, i(mp - bl.m), 0, i(np - bl.n)],
                    value: 0.0,
                },
                &[g2],
            )?
        } else {
            g2
        };
        // [row_blocks, col_blocks, rows, cols]: one matrix per block.
        let g4 = self.add(
            Op::Reshape {
                shape: vec![i(bl.row_blocks), i(bl.rows), i(bl.col_blocks), i(bl.cols)],
            },
            &[g2],
        )?;
        let gb = self.add(
            Op::Permute {
                dims: vec![0, 2, 1, 3],
            },
            &[g4],
        )?;
        let gt = self.add(
            Op::Permute {
                dims: vec![0, 1, 3, 2],
            },
            &[gb],
        )?;
        let ggt = self.add(Op::MatMul, &[gb, gt])?;
        let l1 = self.bin(B::Add, l, ggt)?;
        let gtg = self.add(Op::MatMul, &[gt, gb])?;
        let r1 = self.bin(B::Add, r, gtg)?;
        let xl = inverse_fourth_root(self.g, l1, eps, iterations)?;
        let xr = inverse_fourth_root(self.g, r1, eps, iterations)?;
        let u = self.add(Op::MatMul, &[xl, gb])?;
        let u = self.add(Op::MatMul, &[u, xr])?;
        // Back to the parameter's layout, the padding cut off.
        let u = self.add(
            Op::Permute {
                dims: vec![0, 2, 1, 3],
            },
            &[u],
        )?;
        let mut u = self.add(
            Op::Reshape {
                shape: vec![i(mp), i(np)],
            },
            &[u],
        )?;
        for (axis, (padded, real)) in [(mp, bl.m), (np, bl.n)].into_iter().enumerate() {
            if padded != real {
                u = self.add(
                    Op::Slice {
                        axis: axis as i64,
                        start: 0,
                        end: i(real),
                        step: 1,
                    },
                    &[u],
                )?;
            }
        }
        let shape = ty.shape.iter().map(|&e| i(e)).collect();
        let u = self.add(Op::Reshape { shape }, &[u])?;
        let u = self.bin_s(B::Mul, u, lr)?;
        Ok((self.bin(B::Sub, p, u)?, l1, r1))
    }

    fn lit(&mut self, x: f64, dtype: DType) -> Result<ValueId> {
        self.g.add_literal(Scalar::Float(x), dtype).map_err(ir)
    }

    fn bin(&mut self, op: B, x: ValueId, y: ValueId) -> Result<ValueId> {
        self.g.add(Op::Binary(op), &[x, y], None).map_err(ir)
    }

    fn bin_s(&mut self, op: B, x: ValueId, c: f64) -> Result<ValueId> {
        let dt = self.g.ty(x).dtype;
        let c = self.lit(c, dt)?;
        self.bin(op, x, c)
    }

    fn cast(&mut self, x: ValueId, to: DType) -> Result<ValueId> {
        if self.g.ty(x).dtype == to {
            return Ok(x);
        }
        self.g.add(Op::Cast { to }, &[x], None).map_err(ir)
    }

    fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        let shape = shape.iter().map(|&d| d as i64).collect();
        self.add(Op::Reshape { shape }, &[x])
    }

    /// `0, 1, .., n - 1` as `dtype`.
    /// `full(shape, value)` of `dtype`.
    fn full(&mut self, shape: &[usize], value: f64, dtype: DType) -> Result<ValueId> {
        let shape = shape.to_vec();
        self.add(
            Op::Full {
                shape,
                value,
                dtype,
            },
            &[],
        )
    }

    fn arange(&mut self, n: usize, dtype: DType) -> Result<ValueId> {
        let op = Op::Arange {
            start: 0.0,
            end: n as f64,
            step: 1.0,
            dtype,
        };
        self.add(op, &[])
    }

    /// `x[:, None] == x[None, :]` for a vector `x` of `n` elements: `[n, n]` booleans.
    fn outer_eq(&mut self, x: ValueId, n: usize) -> Result<ValueId> {
        let col = self.reshape(x, &[n, 1])?;
        let row = self.reshape(x, &[1, n])?;
        self.bin(B::Eq, col, row)
    }
}

/// The most Newton steps an inverse root may take: each is four matmuls per block.
pub const MAX_NEWTON_STEPS: usize = 100;

/// How Shampoo sees a parameter of shape `shape` as an `m x n` matrix cut into
/// `row_blocks x col_blocks` blocks of `rows x cols` (the last ones zero-padded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Blocks {
    m: usize,
    n: usize,
    rows: usize,
    cols: usize,
    row_blocks: usize,
    col_blocks: usize,
}

impl Blocks {
    fn of(shape: &[usize], block_size: usize) -> Blocks {
        let (m, n) = match shape.len() {
            0 => (1, 1),
            1 => (1, shape[0]),
            r => (shape[..r - 1].iter().product(), shape[r - 1]),
        };
        let rows = block_size.min(m).max(1);
        let cols = block_size.min(n).max(1);
        Blocks {
            m,
            n,
            rows,
            cols,
            row_blocks: m.div_ceil(rows),
            col_blocks: n.div_ceil(cols),
        }
    }
}

/// Appends to `g` the inverse fourth root of `a + eps I`, for `a` a stack of symmetric
/// positive semi-definite `k x k` matrices (`[.., k, k]`, a float type), by the coupled
/// Newton iteration for `A^(-1/p)` at `p = 4` (Guo and Higham, 2006; the form Shampoo's
/// implementations use), matmuls and elementwise ops only:
///
/// ```text
/// A = a + eps I;  z = (p + 1) / (2 |A|_F);  X = z^(1/p) I;  M = z A
/// repeat `iterations` times:  T = ((p + 1) I - M) / p;  X = X T;  M = T^p M
/// ```
///
/// `M = X^p A` throughout and `M -> I`, so `X -> A^(-1/p)`. The scaling puts every
/// eigenvalue of `M` in `(0, (p + 1) / 2]`, where the iteration converges; a small
/// eigenvalue `mu` grows about `((p + 1) / p)^p`, 2.44 times, per step until it nears 1,
/// then converges quadratically, so a condition number `c` of `A` needs about
/// `log(c) / log(2.44) + 5` steps: 20 steps reach `c` near 1e6.
pub fn inverse_fourth_root(
    g: &mut Graph,
    a: ValueId,
    eps: f64,
    iterations: usize,
) -> Result<ValueId> {
    let ty = g.ty(a).clone();
    let r = ty.rank();
    if r < 2 || ty.shape[r - 1] != ty.shape[r - 2] || !ty.dtype.is_float() {
        return Err(Error::InvalidGraph(format!(
            "inverse_fourth_root: {ty} is no stack of square float matrices"
        )));
    }
    let (k, dt) = (ty.shape[r - 1], ty.dtype);
    let mut b = Build { g };
    // The identity, `arange(k)[:, None] == arange(k)[None, :]`.
    let iota = b.arange(k, DType::I64)?;
    let eye = b.outer_eq(iota, k)?;
    let eye = b.cast(eye, dt)?;
    let eps_eye = b.bin_s(B::Mul, eye, eps)?;
    let a = b.bin(B::Add, a, eps_eye)?;
    let axes = Some(vec![r as i64 - 2, r as i64 - 1]);
    let sq = b.bin(B::Mul, a, a)?;
    let norm = b.add(
        Op::Reduce {
            op: ferrite_ir::ReduceOp::Sum,
            axes,
            keepdim: true,
        },
        &[sq],
    )?;
    let norm = b.add(Op::Unary(U::Sqrt), &[norm])?;
    // z = 5 / (2 |A|) = 2.5 / |A|; X = z^(1/4) I; M = z A.
    let two_and_half = b.lit(2.5, dt)?;
    let z = b.bin(B::Div, two_and_half, norm)?;
    let root = b.add(Op::Unary(U::Sqrt), &[z])?;
    let root = b.add(Op::Unary(U::Sqrt), &[root])?;
    let mut x = b.bin(B::Mul, eye, root)?;
    let mut m = b.bin(B::Mul, a, z)?;
    let five_fourths_eye = b.bin_s(B::Mul, eye, 1.25)?;
    for step in 0..iterations {
        // T = 1.25 I - 0.25 M.
        let quarter = b.bin_s(B::Mul, m, 0.25)?;
        let t = b.bin(B::Sub, five_fourths_eye, quarter)?;
        x = b.add(Op::MatMul, &[x, t])?;
        if step + 1 < iterations {
            let t2 = b.add(Op::MatMul, &[t, t])?;
            let t4 = b.add(Op::MatMul, &[t2, t2])?;
            m = b.add(Op::MatMul, &[t4, m])?;
        }
    }
    Ok(x)
}

fn ir(e: ferrite_ir::Error) -> Error {
    Error::internal(format!("train_step: {e}"))
}

fn name_raw(g: &Graph, v: ValueId) -> String {
    g.node(v)
        .name
        .clone()
        .unwrap_or_else(|| format!("p{}", v.0))
}

fn name(g: &Graph, v: ValueId) -> String {
    format!("`{}`", name_raw(g, v))
}

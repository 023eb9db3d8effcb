//! The loop-IR verifier: the invariants every pass that produces a [`Program`] keeps.
//!
//! - ids equal positions; inputs and outputs point at buffers of the right kind;
//! - every node uses earlier nodes of the right dtypes, loop variables in scope and
//!   accumulators defined by an earlier stage of the same kernel;
//! - every store and every unguarded load is provably in bounds: the range of its
//!   index (from the loop extents, [`IndexExpr::range`]) lies inside the buffer, so a
//!   backend can emit unchecked accesses for them;
//! - each non-input buffer is written by exactly one kernel and read only by later
//!   kernels; inputs are never written. Two exceptions, both made by backends' plans:
//!   a later kernel may update a buffer in place (it loads an element only in a stage
//!   that stores it back, at the same index), and a scratch buffer is written and read by
//!   one kernel, each stage loading it coming after a stage that stores it;
//! - the recorded reads/writes and GEMM descriptions match the stages.

use super::expr::{Block, ExprOp};
use super::ids::ExprRef;
use super::index::{Extents, IndexExpr};
use super::program::{BufferKind, Kernel, Program, Stage};
use crate::op::UnaryOp;
use crate::{DType, Error};

impl Program {
    /// Checks the program's invariants (see the module docs); the error, an
    /// [`Error::InvalidProgram`], names the kernel, stage and node at fault.
    pub fn verify(&self) -> crate::Result<()> {
        self.check().map_err(Error::InvalidProgram)
    }

    /// The checks of [`Program::verify`]; the error is the message.
    fn check(&self) -> Result<(), String> {
        for (i, b) in self.buffers.iter().enumerate() {
            if b.id.index() != i {
                return Err(format!("buffer at position {i} has id {}", b.id));
            }
        }
        for (i, &b) in self.inputs.iter().enumerate() {
            match self.buffer(b).map(|b| b.kind) {
                Some(BufferKind::Input(p)) if p == i => {}
                _ => return Err(format!("input {i} is {b}, which is not input buffer {i}")),
            }
        }
        for (i, &b) in self.outputs.iter().enumerate() {
            match self.buffer(b).map(|b| b.kind) {
                Some(BufferKind::Output(p)) if p == i => {}
                _ => return Err(format!("output {i} is {b}, which is not output buffer {i}")),
            }
        }
        for b in &self.buffers {
            if let BufferKind::Constant(c) = b.kind {
                match self.constants.get(c) {
                    Some(k) if k.ty() == &b.ty => {}
                    Some(k) => {
                        return Err(format!(
                            "{} is {} but constant {c} is {}",
                            b.id,
                            b.ty,
                            k.ty()
                        ))
                    }
                    None => return Err(format!("{} holds constant {c}, which is missing", b.id)),
                }
            }
        }
        // Donations: distinct inputs and outputs of one type; the input is never read,
        // the output holds its value from the start.
        let mut donated_out = vec![false; self.buffers.len()];
        let mut donated_in = vec![false; self.buffers.len()];
        for d in &self.donated {
            let (Some(&i), Some(&o)) = (self.inputs.get(d.input), self.outputs.get(d.output))
            else {
                return Err(format!(
                    "donation of input {} to output {}: no such input or output",
                    d.input, d.output
                ));
            };
            if self.buffers[i.index()].ty != self.buffers[o.index()].ty {
                return Err(format!("donated {i} and {o} have different types"));
            }
            if std::mem::replace(&mut donated_in[i.index()], true)
                || std::mem::replace(&mut donated_out[o.index()], true)
            {
                return Err(format!("{i} or {o} is in two donations"));
            }
        }
        // writer[b] = kernel index that writes buffer b.
        let mut writer: Vec<Option<usize>> = vec![None; self.buffers.len()];
        for (ki, k) in self.kernels.iter().enumerate() {
            if k.id.0 as usize != ki {
                return Err(format!("kernel at position {ki} has id {}", k.id));
            }
            self.verify_kernel(k)
                .map_err(|e| format!("kernel {}: {e}", k.name))?;
            for r in &k.reads {
                let kind = self.buffers[r.buffer.index()].kind;
                if donated_in[r.buffer.index()] {
                    return Err(format!(
                        "kernel {} reads {}, which is donated to an output",
                        k.name, r.buffer
                    ));
                }
                match writer[r.buffer.index()] {
                    // A donated output holds its input's value until its writer updates
                    // it (in place: checked below).
                    None if donated_out[r.buffer.index()] => {}
                    // Scratch is read back by the kernel that writes it (the order of its
                    // stages is checked with the kernel).
                    None if kind == BufferKind::Scratch
                        && k.writes.iter().any(|w| w.buffer == r.buffer) => {}
                    // A kernel that fills a buffer and then updates it in place (an
                    // `index_add`: the base copied, then sources added at checked indices).
                    None if kind != BufferKind::Scratch && filled_then_updated(k, r.buffer) => {}
                    Some(w) if w < ki && kind != BufferKind::Scratch => {}
                    None if matches!(kind, BufferKind::Input(_) | BufferKind::Constant(_)) => {}
                    _ => {
                        return Err(format!(
                            "kernel {} reads {} before any earlier kernel writes it",
                            k.name, r.buffer
                        ))
                    }
                }
            }
            for w in &k.writes {
                let b = &self.buffers[w.buffer.index()];
                if matches!(b.kind, BufferKind::Input(_)) {
                    return Err(format!("kernel {} writes input buffer {}", k.name, b.id));
                }
                if matches!(b.kind, BufferKind::Constant(_)) {
                    return Err(format!("kernel {} writes constant buffer {}", k.name, b.id));
                }
                if let Some(prev) = writer[w.buffer.index()] {
                    if b.kind == BufferKind::Scratch || !updates_in_place(k, b.id) {
                        return Err(format!(
                            "{} is written by both {} and {}",
                            b.id, self.kernels[prev].name, k.name
                        ));
                    }
                }
                writer[w.buffer.index()] = Some(ki);
            }
        }
        for &o in &self.outputs {
            if writer[o.index()].is_none() {
                return Err(format!("output buffer {o} is never written"));
            }
        }
        Ok(())
    }

    /// Checks one kernel against the program's buffers: everything [`Program::verify`]
    /// checks of a kernel on its own, that is all but the order of the kernels.
    pub fn verify_kernel(&self, k: &Kernel) -> Result<(), String> {
        // acc id -> (dtype, defining stage)
        let mut accs: Vec<(super::AccId, DType, usize)> = Vec::new();
        // Scratch buffers stored by the stages before the current one.
        let mut scratch_written: Vec<super::BufferId> = Vec::new();
        for (si, stage) in k.stages.iter().enumerate() {
            let ext = stage.extents(&k.domain);
            let body = stage.body();
            self.verify_block(body, &ext, &accs)
                .map_err(|e| format!("stage {si}: {e}"))?;
            for node in &body.nodes {
                if let ExprOp::Load(l) = &node.op {
                    let scratch = self
                        .buffer(l.buffer)
                        .is_some_and(|b| b.kind == BufferKind::Scratch);
                    if scratch && !scratch_written.contains(&l.buffer) {
                        return Err(format!(
                            "stage {si}: loads scratch {} that no earlier stage stores",
                            l.buffer
                        ));
                    }
                }
            }
            for s in stage.stores() {
                let buf = self
                    .buffer(s.buffer)
                    .ok_or_else(|| format!("stage {si}: {} does not exist", s.buffer))?;
                let node = body
                    .get(s.value)
                    .ok_or_else(|| format!("stage {si}: {} is not a node", s.value))?;
                if node.dtype != buf.ty.dtype {
                    return Err(format!(
                        "stage {si}: stores a {} value into {} of {}",
                        node.dtype, s.buffer, buf.ty
                    ));
                }
                check_index(&s.index, &ext, body, buf.ty.numel())
                    .map_err(|e| format!("stage {si}: store to {}: {e}", s.buffer))?;
                if buf.kind == BufferKind::Scratch {
                    scratch_written.push(s.buffer);
                }
            }
            match stage {
                Stage::Reduce { reductions, .. } => {
                    for r in reductions {
                        let node = body
                            .get(r.value)
                            .ok_or_else(|| format!("stage {si}: {} is not a node", r.value))?;
                        let want = if r.kind.is_arg() {
                            DType::I64
                        } else {
                            node.dtype
                        };
                        if r.dtype != want {
                            return Err(format!(
                                "stage {si}: {} of {} values has dtype {}, expected {want}",
                                r.acc, node.dtype, r.dtype
                            ));
                        }
                        if node.dtype == DType::Bool
                            && matches!(r.kind, super::ReduceKind::Sum | super::ReduceKind::Prod)
                        {
                            return Err(format!(
                                "stage {si}: {} sums bools; cast them first",
                                r.acc
                            ));
                        }
                        if let Some(rhs) = r.rhs {
                            let other = body
                                .get(rhs)
                                .ok_or_else(|| format!("stage {si}: {rhs} is not a node"))?;
                            if r.kind != super::ReduceKind::Sum || other.dtype != node.dtype {
                                return Err(format!(
                                    "stage {si}: {} is a dot product of {} and {}; it must be a sum of one dtype",
                                    r.acc, node.dtype, other.dtype
                                ));
                            }
                        }
                        if accs.iter().any(|(a, _, _)| *a == r.acc) {
                            return Err(format!("stage {si}: {} is defined twice", r.acc));
                        }
                    }
                    for r in reductions {
                        accs.push((r.acc, r.dtype, si));
                    }
                }
                Stage::Store { .. } => {}
            }
        }
        let (reads, writes) = k.compute_accesses(&self.buffers);
        if reads != k.reads || writes != k.writes {
            return Err("recorded reads/writes differ from the stages".into());
        }
        if let Some(g) = &k.gemm {
            match k.stages.get(g.stage) {
                Some(Stage::Reduce { reductions, .. })
                    if reductions
                        .iter()
                        .any(|r| r.acc == g.acc && r.kind == super::ReduceKind::Sum) => {}
                _ => {
                    return Err(format!(
                        "gemm: stage {} does not define sum {}",
                        g.stage, g.acc
                    ))
                }
            }
            if g.outer_axes.len() != g.batch.len() + 2 {
                return Err("gemm: outer_axes needs one entry per batch axis plus m and n".into());
            }
        }
        Ok(())
    }

    fn verify_block(
        &self,
        body: &Block,
        ext: &Extents,
        accs: &[(super::AccId, DType, usize)],
    ) -> Result<(), String> {
        for (i, node) in body.nodes.iter().enumerate() {
            let here = ExprRef(i as u32);
            let dt = |r: ExprRef| -> Result<DType, String> {
                if r.index() >= i {
                    return Err(format!("{here} uses {r}, which is not defined before it"));
                }
                Ok(body.nodes[r.index()].dtype)
            };
            let mut earlier = Ok(());
            node.for_each_operand(&mut |r| {
                if earlier.is_ok() {
                    earlier = dt(r).map(|_| ());
                }
            });
            earlier?;
            let d = node.dtype;
            let bad = |what: &str| Err(format!("{here}: {what}"));
            match &node.op {
                ExprOp::Const(v) => {
                    if !v.fits_domain(d) {
                        return bad(&format!("constant {v} is not a {d}"));
                    }
                }
                ExprOp::Load(l) => {
                    let buf = self
                        .buffer(l.buffer)
                        .ok_or_else(|| format!("{here}: {} does not exist", l.buffer))?;
                    if buf.ty.dtype != d {
                        return bad(&format!("loads {} of {} as {d}", l.buffer, buf.ty));
                    }
                    if !l.other.fits_domain(d) {
                        return bad(&format!("guard value {} is not a {d}", l.other));
                    }
                    for g in &l.guard {
                        check_vars(&g.expr, ext, body)
                            .map_err(|e| format!("{here}: guard: {e}"))?;
                    }
                    if l.guard.is_empty() {
                        check_index(&l.index, ext, body, buf.ty.numel())
                            .map_err(|e| format!("{here}: load from {}: {e}", l.buffer))?;
                    } else {
                        check_vars(&l.index, ext, body).map_err(|e| format!("{here}: {e}"))?;
                    }
                }
                ExprOp::Acc(a) => match accs.iter().find(|(x, _, _)| x == a) {
                    Some((_, ad, _)) if *ad == d => {}
                    Some((_, ad, _)) => return bad(&format!("reads {a} of dtype {ad} as {d}")),
                    None => return bad(&format!("reads {a}, which no earlier stage defines")),
                },
                ExprOp::Index(e) => {
                    if d != DType::I64 {
                        return bad("an index value must be i64");
                    }
                    check_vars(e, ext, body).map_err(|e| format!("{here}: {e}"))?;
                }
                ExprOp::CheckedIndex { value, guard, .. } => {
                    if d != DType::I64 || !dt(*value)?.is_int() {
                        return bad("a checked index takes an integer and is i64");
                    }
                    for g in guard {
                        check_vars(&g.expr, ext, body)
                            .map_err(|e| format!("{here}: guard: {e}"))?;
                    }
                }
                ExprOp::Unary(u, a) => {
                    let ad = dt(*a)?;
                    match u {
                        UnaryOp::Not if d == DType::Bool => {}
                        UnaryOp::Not => return bad("not yields bool"),
                        _ if ad != d => {
                            return bad(&format!("{} of a {ad} cannot be {d}", u.name()))
                        }
                        _ if u.is_transcendental() && !d.is_float() => {
                            return bad(&format!("{} needs a float operand", u.name()))
                        }
                        UnaryOp::BitwiseNot if d.is_float() => {
                            return bad("bitwise_not needs an integer or bool operand")
                        }
                        _ => {}
                    }
                }
                ExprOp::Binary(b, x, y) => {
                    let (xd, yd) = (dt(*x)?, dt(*y)?);
                    if xd != yd {
                        return bad(&format!(
                            "{} of {xd} and {yd}: cast operands to one dtype",
                            b.name()
                        ));
                    }
                    let want = if b.is_comparison() || b.is_logical() {
                        DType::Bool
                    } else {
                        xd
                    };
                    if d != want {
                        return bad(&format!("{} of {xd} yields {want}, not {d}", b.name()));
                    }
                    if *b == crate::BinaryOp::Div && !d.is_float() {
                        return bad("div needs float operands");
                    }
                    if b.is_bitwise() && (d.is_float() || (b.is_shift() && d == DType::Bool)) {
                        return bad(&format!("{} of {d}: it takes integers", b.name()));
                    }
                }
                ExprOp::Where(c, a, b) => {
                    if dt(*c)? != DType::Bool || dt(*a)? != d || dt(*b)? != d {
                        return bad("where takes a bool condition and two values of its dtype");
                    }
                }
                ExprOp::Cast(a) => {
                    dt(*a)?;
                }
            }
        }
        Ok(())
    }
}

/// Whether kernel `k` updates buffer `b` in place: it loads `b` only, unguarded, in a
/// stage that stores `b` at the same index (equal once simplified), so each point reads
/// the element it is about to write back.
fn updates_in_place(k: &Kernel, b: super::BufferId) -> bool {
    let mut reads = false;
    for stage in &k.stages {
        let ext = stage.extents(&k.domain);
        for node in &stage.body().nodes {
            let ExprOp::Load(l) = &node.op else { continue };
            if l.buffer != b {
                continue;
            }
            let at = l.index.simplify(&ext);
            let written_back = stage
                .stores()
                .iter()
                .any(|s| s.buffer == b && s.index.simplify(&ext) == at);
            if !l.guard.is_empty() || !written_back {
                return false;
            }
            reads = true;
        }
    }
    reads
}

/// Whether kernel `k` first stores buffer `b` in a stage that does not read it, and
/// then only updates it in place in later stages: each point reads what an earlier
/// stage of the same point wrote, never another point's or an earlier kernel's.
fn filled_then_updated(k: &Kernel, b: super::BufferId) -> bool {
    let reads = |s: &super::Stage| {
        s.body()
            .nodes
            .iter()
            .any(|n| matches!(&n.op, ExprOp::Load(l) if l.buffer == b))
    };
    let Some(first) = k
        .stages
        .iter()
        .position(|s| s.stores().iter().any(|w| w.buffer == b))
    else {
        return false;
    };
    !k.stages[..=first].iter().any(reads) && updates_in_place(k, b)
}

/// Checks that `e` only uses variables in scope and dynamic indices that are checked
/// index nodes of the block with the same extent.
fn check_vars(e: &IndexExpr, ext: &Extents, body: &Block) -> Result<(), String> {
    let mut err = None;
    e.for_each_var(&mut |v| {
        if ext.extent(v).is_none() && err.is_none() {
            err = Some(format!("variable {v} is not in scope in `{e}`"));
        }
    });
    check_dynamic(e, body, &mut err);
    err.map_or(Ok(()), Err)
}

fn check_dynamic(e: &IndexExpr, body: &Block, err: &mut Option<String>) {
    match e {
        IndexExpr::Dynamic { value, extent } => match body.get(*value).map(|n| &n.op) {
            Some(ExprOp::CheckedIndex { extent: x, .. }) if x == extent => {}
            _ => {
                err.get_or_insert_with(|| {
                    format!("{value} in `{e}` is not a checked index of extent {extent}")
                });
            }
        },
        IndexExpr::Sum(ts) => ts.iter().for_each(|t| check_dynamic(t, body, err)),
        IndexExpr::Mul(x, _) | IndexExpr::FloorDiv(x, _) | IndexExpr::Mod(x, _) => {
            check_dynamic(x, body, err)
        }
        IndexExpr::Const(_) | IndexExpr::Var(_) => {}
    }
}

/// Checks variables and proves `0 <= e < numel` over the whole domain.
fn check_index(e: &IndexExpr, ext: &Extents, body: &Block, numel: usize) -> Result<(), String> {
    check_vars(e, ext, body)?;
    let any_point = ext
        .outer
        .iter()
        .chain(&ext.reduce)
        .chain(&ext.store)
        .all(|&d| d > 0);
    if !any_point {
        // The loop never runs, so no access happens.
        return Ok(());
    }
    match e.range(ext) {
        Some((lo, hi)) if lo >= 0 && (hi as i128) < numel as i128 => Ok(()),
        Some((lo, hi)) => Err(format!(
            "index `{e}` ranges over {lo}..={hi}, outside 0..{numel}"
        )),
        None => Err(format!("index `{e}` has no provable range")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::*;
    use crate::types::TensorType;

    fn buf(id: u32, kind: BufferKind, shape: &[usize]) -> Buffer {
        Buffer {
            id: BufferId(id),
            ty: TensorType::new(DType::F32, shape.to_vec()).unwrap(),
            kind,
            name: format!("v{id}"),
        }
    }

    fn copy_program(load_index: IndexExpr) -> Program {
        let mut body = Block::default();
        let v = body.push(ExprNode {
            dtype: DType::F32,
            op: ExprOp::Load(Load {
                buffer: BufferId(0),
                index: load_index,
                guard: vec![],
                other: Value::Float(0.0),
            }),
        });
        let mut k = Kernel {
            id: KernelId(0),
            name: "k0_copy".into(),
            nodes: vec![],
            domain: vec![4],
            stages: vec![Stage::Store {
                domain: vec![],
                body,
                stores: vec![StoreOp {
                    buffer: BufferId(1),
                    index: IndexExpr::Var(Var::outer(0)),
                    value: v,
                }],
            }],
            gemm: None,
            reads: vec![],
            writes: vec![],
        };
        let buffers = vec![
            buf(0, BufferKind::Input(0), &[4]),
            buf(1, BufferKind::Output(0), &[4]),
        ];
        (k.reads, k.writes) = k.compute_accesses(&buffers);
        Program {
            name: "copy".into(),
            buffers,
            inputs: vec![BufferId(0)],
            outputs: vec![BufferId(1)],
            kernels: vec![k],
            constants: vec![],
            donated: vec![],
        }
    }

    #[test]
    fn a_donated_input_is_never_read() {
        let mut p = copy_program(IndexExpr::Var(Var::outer(0)));
        p.verify().unwrap();
        p.donated = vec![super::super::Donation {
            input: 0,
            output: 0,
        }];
        let e = p.verify().unwrap_err().to_string();
        assert!(e.contains("donated"), "{e}");
    }

    #[test]
    fn accepts_a_copy_and_rejects_out_of_bounds() {
        copy_program(IndexExpr::Var(Var::outer(0)))
            .verify()
            .unwrap();
        let err = copy_program(IndexExpr::Var(Var::outer(0)) + IndexExpr::Const(1))
            .verify()
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside 0..4"), "{err}");
        let err = copy_program(IndexExpr::Var(Var::reduce(0)))
            .verify()
            .unwrap_err()
            .to_string();
        assert!(err.contains("not in scope"), "{err}");
    }

    #[test]
    fn rejects_mismatched_access_records_and_missing_outputs() {
        let mut p = copy_program(IndexExpr::Var(Var::outer(0)));
        p.kernels[0].reads.clear();
        assert!(p.verify().unwrap_err().to_string().contains("reads/writes"));
        let mut p = copy_program(IndexExpr::Var(Var::outer(0)));
        p.kernels.clear();
        assert!(p
            .verify()
            .unwrap_err()
            .to_string()
            .contains("never written"));
    }
}

//! Donated inputs: an output written in place of the input it replaces, as
//! `torch.compile`'s and JAX's donated buffers are, so that a training step updates a
//! parameter or an optimizer state without copying it.
//!
//! [`donate`] takes candidate pairs (input `i`, output `o`) and keeps those where it is
//! safe and pays: the one kernel writing output `o` starts with a stage that copies
//! input `i` into it element by element (an `index_add`'s or `index_reduce`'s base copy),
//! reads input `i` nowhere else, and every other kernel that reads input `i` runs before
//! it. The copy stage is dropped, those earlier reads read output `o` instead (it holds
//! input `i`'s value until the writer runs), and the program records the pair in
//! [`Program::donated`]: whoever runs it puts input `i`'s value in output `o`'s buffer
//! first (a backend copies it when the caller did not, [`Program::donated`] says how), and
//! input `i` itself is not read. A sparse update of a 25 MB table then writes only the
//! rows a batch touches. Each refused pair says why ([`Refused`]).

use ferrite_ir::loops::{BufferId, Donation, ExprOp, Kernel, Program, Stage};

/// A candidate pair [`donate`] left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The input.
    pub input: usize,
    /// The output.
    pub output: usize,
    /// Why (`output 1 is written by a kernel that does not start by copying input 0`).
    pub reason: String,
}

/// Makes each pair of `candidates` (input, output) that is safe a donation of `program`
/// (see the module docs); returns the pairs left alone with their reasons.
pub fn donate(program: &mut Program, candidates: &[(usize, usize)]) -> Vec<Refused> {
    let mut refused = Vec::new();
    for &(input, output) in candidates {
        if let Err(reason) = donate_one(program, input, output) {
            refused.push(Refused {
                input,
                output,
                reason,
            });
        }
    }
    refused
}

fn donate_one(p: &mut Program, input: usize, output: usize) -> Result<(), String> {
    let (Some(&ib), Some(&ob)) = (p.inputs.get(input), p.outputs.get(output)) else {
        return Err(format!(
            "the program has no input {input} or no output {output}"
        ));
    };
    if p.donated
        .iter()
        .any(|d| d.input == input || d.output == output)
    {
        return Err("the input or the output is donated already".into());
    }
    if p.buffers[ib.index()].ty != p.buffers[ob.index()].ty {
        return Err(format!(
            "input {input} is {} and output {output} is {}",
            p.buffers[ib.index()].ty,
            p.buffers[ob.index()].ty
        ));
    }
    if p.outputs.iter().filter(|&&b| b == ob).count() > 1 {
        return Err(format!("output {output}'s buffer is another output's too"));
    }
    let writes = |k: &Kernel, b: BufferId| k.writes.iter().any(|a| a.buffer == b);
    let reads = |k: &Kernel, b: BufferId| k.reads.iter().any(|a| a.buffer == b);
    let writers: Vec<usize> = (0..p.kernels.len())
        .filter(|&k| writes(&p.kernels[k], ob))
        .collect();
    let [w] = writers[..] else {
        return Err(format!(
            "output {output} is written by {} kernels, not one",
            writers.len()
        ));
    };
    if !starts_with_copy(&p.kernels[w], ib, ob) {
        return Err(format!(
            "output {output} is written by {}, which does not start by copying input {input}",
            p.kernels[w].name
        ));
    }
    if p.kernels[w].stages[1..].iter().any(|s| loads(s, ib)) {
        return Err(format!(
            "{} reads input {input} besides copying it",
            p.kernels[w].name
        ));
    }
    let readers: Vec<usize> = (0..p.kernels.len())
        .filter(|&k| k != w && reads(&p.kernels[k], ib))
        .collect();
    if let Some(&k) = readers.iter().find(|&&k| k > w) {
        return Err(format!(
            "{} reads input {input} after {} updates it",
            p.kernels[k].name, p.kernels[w].name
        ));
    }
    // Safe: drop the copy, and read the output where the input was read (the output
    // has no other writer, so no kernel before `w` touches it).
    p.kernels[w].stages.remove(0);
    for &k in readers.iter().chain([&w]) {
        let kernel = &mut p.kernels[k];
        if let Some(g) = &mut kernel.gemm {
            for op in [&mut g.lhs, &mut g.rhs] {
                if op.buffer == ib {
                    op.buffer = ob;
                }
            }
        }
        for s in &mut kernel.stages {
            for n in &mut stage_body_mut(s).nodes {
                if let ExprOp::Load(l) = &mut n.op {
                    if l.buffer == ib {
                        l.buffer = ob;
                    }
                }
            }
        }
        (kernel.reads, kernel.writes) = kernel.compute_accesses(&p.buffers);
    }
    p.donated.push(Donation { input, output });
    Ok(())
}

/// Whether `k`'s first stage is a plain copy of buffer `from` into `to`: one store of a
/// load of `from` at the store's own index, over the whole kernel.
fn starts_with_copy(k: &Kernel, from: BufferId, to: BufferId) -> bool {
    let Some(Stage::Store { body, stores, .. }) = k.stages.first() else {
        return false;
    };
    let [store] = &stores[..] else {
        return false;
    };
    // A GEMM kernel's stage numbers would shift; an update kernel has none.
    if store.buffer != to || k.stages.len() < 2 || k.gemm.is_some() {
        return false;
    }
    let ext = k.stages[0].extents(&k.domain);
    match body.get(store.value).map(|n| &n.op) {
        Some(ExprOp::Load(l)) => {
            l.buffer == from
                && l.guard.is_empty()
                && (l.index == store.index || l.index.simplify(&ext) == store.index.simplify(&ext))
        }
        _ => false,
    }
}

fn loads(s: &Stage, b: BufferId) -> bool {
    s.body()
        .nodes
        .iter()
        .any(|n| matches!(&n.op, ExprOp::Load(l) if l.buffer == b))
}

fn stage_body_mut(s: &mut Stage) -> &mut ferrite_ir::loops::Block {
    match s {
        Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
    }
}

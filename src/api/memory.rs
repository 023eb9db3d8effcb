//! The memory budget: one limit on the memory a run may allocate, checked before it
//! allocates anything, whatever the target.
//!
//! The budget is [`Options::memory_limit`](crate::Options::memory_limit), by default
//! [`default_memory_limit`]: half the machine's physical memory, at most
//! [`MAX_DEFAULT_MEMORY_LIMIT`] (16 GiB). Every target's need is estimated from the
//! program before it runs (the estimates below say what they count); a run whose need
//! is over the budget is an [`Error::MemoryBudget`](crate::Error::MemoryBudget), as is
//! an input file whose decoding would be ([`crate::files::read_npy`]).
//!
//! The estimates are upper bounds of the large allocations, the tensors: a few
//! kilobytes of bookkeeping per kernel are not counted.

use super::files::read_bounded;
use ferrite_accel::program::SimProgram;
use ferrite_cpu::CpuProgram;
use ferrite_ir::loops::{Program, Value};
use ferrite_ir::{DType, Graph, Op, TensorType};
use std::sync::OnceLock;

/// The largest default budget (16 GiB), whatever the machine's memory.
pub const MAX_DEFAULT_MEMORY_LIMIT: u64 = 16 << 30;

/// The default budget: half of the physical memory (`MemTotal` of `/proc/meminfo`),
/// at most [`MAX_DEFAULT_MEMORY_LIMIT`]; that cap where the physical memory is unknown.
pub fn default_memory_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        physical_memory().map_or(MAX_DEFAULT_MEMORY_LIMIT, |total| {
            (total / 2).min(MAX_DEFAULT_MEMORY_LIMIT)
        })
    })
}

/// The machine's physical memory in bytes, where `/proc/meminfo` says.
fn physical_memory() -> Option<u64> {
    let bytes = read_bounded("/proc/meminfo", 1 << 20, "no option").ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes of a tensor of type `ty` as host data.
fn tensor_bytes(ty: &TensorType) -> u64 {
    ty.size_bytes() as u64
}

/// The inputs of `g` as host data: the copies a run makes of the caller's inputs.
pub(crate) fn input_bytes(g: &Graph) -> u64 {
    g.params.iter().map(|&p| tensor_bytes(g.ty(p))).sum()
}

/// The reference interpreter's peak on `g`: the copies of the inputs, the values
/// alive at each node (the interpreter drops a value after its last use), and the
/// f64 working copies of the node being computed (its operands and its result).
pub(crate) fn interp_bytes(g: &Graph) -> u64 {
    let mut last_use = vec![0usize; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for x in &n.inputs {
            last_use[x.index()] = i;
        }
    }
    for o in &g.outputs {
        last_use[o.index()] = usize::MAX;
    }
    let size = |i: usize| tensor_bytes(&g.nodes[i].ty);
    let numel = |i: usize| g.nodes[i].ty.numel() as u64;
    // Inputs are borrowed for the whole run.
    let mut live = input_bytes(g);
    let mut peak = live;
    for (i, n) in g.nodes.iter().enumerate() {
        if matches!(n.op, Op::Param { .. }) {
            continue;
        }
        let operands: u64 = n.inputs.iter().map(|x| numel(x.index())).sum();
        let scratch = 8u64.saturating_mul(numel(i).saturating_add(operands));
        live = live.saturating_add(size(i));
        peak = peak.max(live.saturating_add(scratch));
        for x in &n.inputs {
            let x = x.index();
            if last_use[x] == i && !matches!(g.nodes[x].op, Op::Param { .. }) {
                live -= size(x);
                // A value used twice by the same node is freed once.
                last_use[x] = usize::MAX - 1;
            }
        }
    }
    peak
}

/// The loop-IR evaluator on `p`: the copies of the inputs, every buffer as
/// [`Value`]s (the evaluator keeps them all to the end), and the outputs.
pub(crate) fn loops_bytes(g: &Graph, p: &Program) -> u64 {
    let per = std::mem::size_of::<Value>() as u64;
    let buffers: u64 = p
        .buffers
        .iter()
        .map(|b| (b.ty.numel() as u64).saturating_mul(per))
        .sum();
    input_bytes(g)
        .saturating_add(buffers)
        .saturating_add(output_bytes(g))
}

/// The CPU executor on `p`: the copies of the inputs, the outputs, and the storage of
/// intermediates, GEMM temporaries and scratch ([`CpuProgram::storage_bytes`]).
pub(crate) fn cpu_bytes(g: &Graph, p: &CpuProgram) -> u64 {
    input_bytes(g)
        .saturating_add(output_bytes(g))
        .saturating_add(p.storage_bytes() as u64)
}

/// The simulator on `p`: the copies of the inputs, the outputs, the device's copy of
/// every buffer (8 bytes per element, one per bool, whatever the dtype; all buffers
/// counted, though intermediates are freed after their last reader), and the
/// widened copy one upload or read-back makes of its largest buffer.
pub(crate) fn sim_bytes(g: &Graph, p: &SimProgram) -> u64 {
    let device: u64 = p.buffers().iter().map(|b| sim_buffer_bytes(&b.ty)).sum();
    let largest = p
        .buffers()
        .iter()
        .map(|b| sim_transfer_bytes(&b.ty))
        .max()
        .unwrap_or(0);
    input_bytes(g)
        .saturating_add(output_bytes(g))
        .saturating_add(device)
        .saturating_add(largest)
}

/// The simulator's own copy of a buffer of type `ty`.
pub(crate) fn sim_buffer_bytes(ty: &TensorType) -> u64 {
    let per = if ty.dtype == DType::Bool { 1 } else { 8 };
    (ty.numel() as u64).saturating_mul(per)
}

/// The transient copy (f64 or i64 per element) an upload or a read-back of a buffer
/// of type `ty` makes.
pub(crate) fn sim_transfer_bytes(ty: &TensorType) -> u64 {
    (ty.numel() as u64).saturating_mul(8)
}

/// The outputs of `g` as host data.
fn output_bytes(g: &Graph) -> u64 {
    g.outputs.iter().map(|&o| tensor_bytes(g.ty(o))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_capped() {
        let limit = default_memory_limit();
        assert!(limit > 0 && limit <= MAX_DEFAULT_MEMORY_LIMIT);
    }

    #[test]
    fn the_interpreter_counts_live_values_and_working_copies() {
        let g = ferrite_ir::parse(
            "t.fg",
            "graph t(x: f32[1024]) {\n  y = neg(x)\n  return y\n}\n",
        )
        .unwrap();
        // x (4 KiB), y (4 KiB), and f64 copies of x and y (8 KiB each).
        assert_eq!(interp_bytes(&g), 4096 + 4096 + 8192 + 8192);
    }
}

//! The memory plan: where each intermediate buffer is stored, and how much storage that
//! takes.
//!
//! Lifetimes come from the loop IR's one liveness ([`Liveness`]): an intermediate lives
//! from the kernel that writes it to the last kernel that reads it. Intermediates of one
//! dtype whose lifetimes do not overlap share a typed storage slot
//! ([`assign_slots`]), and the plan's storage is the sum of the slots. This is the
//! placement the CPU backend runs, so [`MemoryPlan::peak_bytes`], the "peak
//! intermediate memory" that `ferrite compile` and `ferrite profile` print, is what the
//! CPU backend allocates for intermediates. (A CPU GEMM kernel whose product cannot be
//! written in place adds a temporary of its own, which shares a slot when one is free;
//! `CpuProgram::storage_bytes` counts it.) Inputs and outputs belong to the caller and
//! are not planned.

use ferrite_ir::loops::{assign_slots, BufferId, BufferKind, Liveness, Program, Slot};
use std::fmt;

/// One intermediate buffer's place in storage.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Allocation {
    /// The buffer.
    pub buffer: BufferId,
    /// The slot it is stored in (an index into [`MemoryPlan::slots`]).
    pub slot: usize,
    /// Size in bytes.
    pub size: usize,
    /// Index of the kernel that writes it.
    pub first: usize,
    /// Index of the last kernel that reads it.
    pub last: usize,
}

/// The plan for all intermediates of a program.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct MemoryPlan {
    /// One allocation per intermediate buffer, in buffer order.
    pub allocations: Vec<Allocation>,
    /// The storage slots.
    pub slots: Vec<Slot>,
    /// Bytes of storage for intermediates: the sum of the slots.
    pub arena_bytes: usize,
    /// The largest total size of intermediates live at once (a lower bound on any
    /// plan's storage; `arena_bytes` exceeds it where slots are shared unevenly).
    pub peak_live_bytes: usize,
    /// The sum of all intermediates' sizes (the storage without reuse).
    pub total_bytes: usize,
}

impl MemoryPlan {
    /// The peak intermediate bytes of the schedule under this plan: what the CPU
    /// backend allocates for them.
    pub fn peak_bytes(&self) -> usize {
        self.arena_bytes
    }
}

/// Plans the intermediates of `p` (see the module docs).
pub fn plan_memory(p: &Program) -> MemoryPlan {
    let live = Liveness::of(p);
    let slots = assign_slots(&p.buffers, &live);
    let allocations: Vec<Allocation> = p
        .buffers
        .iter()
        .filter(|b| b.kind == BufferKind::Intermediate)
        .filter_map(|b| {
            let iv = live.get(b.id)?;
            Some(Allocation {
                buffer: b.id,
                slot: slots.slot_of[b.id.index()]?,
                size: b.ty.size_bytes(),
                first: iv.first,
                last: iv.last,
            })
        })
        .collect();
    MemoryPlan {
        arena_bytes: slots.bytes(),
        peak_live_bytes: live.peak_live_bytes(&p.buffers),
        total_bytes: allocations.iter().map(|a| a.size).sum(),
        allocations,
        slots: slots.slots,
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "memory plan: {} intermediates, {} B without reuse, arena {} B in {} slot{} (peak live {} B)",
            self.allocations.len(),
            self.total_bytes,
            self.arena_bytes,
            self.slots.len(),
            if self.slots.len() == 1 { "" } else { "s" },
            self.peak_live_bytes
        )?;
        for a in &self.allocations {
            writeln!(
                f,
                "  {:<6} {:>10} B  slot {:<4} live k{}..k{}",
                a.buffer.to_string(),
                a.size,
                a.slot,
                a.first,
                a.last
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_program_needs_no_storage() {
        let empty = plan_memory(&Program::default());
        assert_eq!(empty, MemoryPlan::default());
    }
}

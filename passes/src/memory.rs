//! The memory plan: where each intermediate buffer lives in one arena.
//!
//! An intermediate is live from the kernel that writes it to the last kernel that
//! reads it (inclusive: a kernel's inputs and outputs exist at the same time). Buffers
//! whose lifetimes do not overlap may share memory. Offsets are assigned greedily by
//! size, largest first, each into the best-fitting gap left by the already placed
//! buffers it overlaps in time (the "greedy by size" planner of TFLite and XNNPACK),
//! with every offset aligned to [`ALIGNMENT`] bytes. Inputs and outputs belong to the
//! caller and are not planned.

use ferrite_ir::loops::{BufferId, BufferKind, Program};
use std::fmt;

/// Alignment of every arena offset, in bytes (a cache line; enough for any SIMD load).
pub const ALIGNMENT: usize = 64;

/// One intermediate buffer's place in the arena.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Allocation {
    /// The buffer.
    pub buffer: BufferId,
    /// Byte offset in the arena (a multiple of [`ALIGNMENT`]).
    pub offset: usize,
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
    /// Bytes the arena needs: the peak memory of intermediates under this plan.
    pub arena_bytes: usize,
    /// The largest total size of intermediates live at once (a lower bound on any
    /// plan's arena; `arena_bytes` exceeds it only by alignment and fragmentation).
    pub peak_live_bytes: usize,
    /// The sum of all intermediates' sizes (the arena without reuse).
    pub total_bytes: usize,
}

impl MemoryPlan {
    /// The peak intermediate bytes of the schedule under this plan.
    pub fn peak_bytes(&self) -> usize {
        self.arena_bytes
    }
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGNMENT).saturating_mul(ALIGNMENT)
}

/// Plans the intermediates of `p` (see the module docs).
pub fn plan_memory(p: &Program) -> MemoryPlan {
    let n = p.buffers.len();
    let mut first = vec![None; n];
    let mut last = vec![None; n];
    for (ki, k) in p.kernels.iter().enumerate() {
        for w in &k.writes {
            first[w.buffer.index()].get_or_insert(ki);
            last[w.buffer.index()] = Some(last[w.buffer.index()].map_or(ki, |l: usize| l.max(ki)));
        }
        for r in &k.reads {
            last[r.buffer.index()] = Some(last[r.buffer.index()].map_or(ki, |l: usize| l.max(ki)));
        }
    }
    let mut allocations: Vec<Allocation> = p
        .buffers
        .iter()
        .filter(|b| b.kind == BufferKind::Intermediate)
        .filter_map(|b| {
            let f = first[b.id.index()]?;
            Some(Allocation {
                buffer: b.id,
                offset: 0,
                size: b.ty.size_bytes(),
                first: f,
                last: last[b.id.index()].unwrap_or(f),
            })
        })
        .collect();

    // Largest first; ties by earliest start, then id, so plans are deterministic.
    let mut order: Vec<usize> = (0..allocations.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&allocations[a], &allocations[b]);
        y.size
            .cmp(&x.size)
            .then(x.first.cmp(&y.first))
            .then(x.buffer.cmp(&y.buffer))
    });
    let mut placed: Vec<usize> = Vec::new();
    for &i in &order {
        let a = &allocations[i];
        let size = align(a.size);
        // Address ranges of placed buffers alive at the same time, by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .map(|&j| &allocations[j])
            .filter(|b| b.first <= a.last && a.first <= b.last)
            .map(|b| (b.offset, b.offset.saturating_add(align(b.size))))
            .collect();
        busy.sort_unstable();
        // Best fit: the smallest gap that holds the buffer; else after the last busy range.
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut cursor = 0usize;
        for &(start, end) in &busy {
            if start >= cursor.saturating_add(size) {
                let gap = start - cursor;
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        allocations[i].offset = offset;
        placed.push(i);
    }

    let arena_bytes = allocations
        .iter()
        .map(|a| a.offset.saturating_add(align(a.size)))
        .max()
        .unwrap_or(0);
    let mut peak_live_bytes = 0;
    for ki in 0..p.kernels.len() {
        let live: usize = allocations
            .iter()
            .filter(|a| a.first <= ki && ki <= a.last)
            .map(|a| a.size)
            .sum();
        peak_live_bytes = peak_live_bytes.max(live);
    }
    let total_bytes = allocations.iter().map(|a| a.size).sum();
    MemoryPlan {
        allocations,
        arena_bytes,
        peak_live_bytes,
        total_bytes,
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "memory plan: {} intermediates, {} B without reuse, arena {} B (peak live {} B)",
            self.allocations.len(),
            self.total_bytes,
            self.arena_bytes,
            self.peak_live_bytes
        )?;
        for a in &self.allocations {
            writeln!(
                f,
                "  {:<6} {:>10} B  @ {:<10} live k{}..k{}",
                a.buffer.to_string(),
                a.size,
                a.offset,
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

    /// Checks that no two allocations alive at once overlap in memory.
    fn assert_disjoint(plan: &MemoryPlan) {
        for (i, a) in plan.allocations.iter().enumerate() {
            assert_eq!(a.offset % ALIGNMENT, 0);
            for b in &plan.allocations[i + 1..] {
                let time = a.first <= b.last && b.first <= a.last;
                let space = a.offset < b.offset + b.size && b.offset < a.offset + a.size;
                assert!(!(time && space), "{a:?} overlaps {b:?}");
            }
        }
    }

    #[test]
    fn alignment_rounds_up() {
        assert_eq!(align(0), 0);
        assert_eq!(align(1), 64);
        assert_eq!(align(64), 64);
        assert_eq!(align(65), 128);
        let empty = plan_memory(&Program::default());
        assert_eq!(empty.arena_bytes, 0);
        assert_disjoint(&empty);
    }
}

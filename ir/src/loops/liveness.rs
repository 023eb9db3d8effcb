//! Liveness: when each buffer of a [`Program`] must exist, over its kernel sequence,
//! and the storage slots that let buffers whose lifetimes do not overlap share memory.
//!
//! An intermediate lives from the kernel that writes it to the last kernel that reads
//! it, both included (a kernel's inputs and outputs exist at the same time). Inputs and
//! outputs belong to the caller: they exist for the whole run, and storage planning
//! leaves them out. This is the one liveness of the project: the memory plan
//! (`ferrite_passes::memory`), the CPU executor's storage and the accelerator's buffer
//! placement are all built from it, so the peak memory a compile reports is what the
//! CPU backend allocates.

use super::ids::BufferId;
use super::program::{Buffer, BufferKind, Program};
use crate::DType;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// The kernels during which a buffer exists: `first..=last`, as kernel indices.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Interval {
    /// The first kernel (for an intermediate, its writer).
    pub first: usize,
    /// The last kernel (for an intermediate, its last reader).
    pub last: usize,
}

impl Interval {
    /// True when both intervals share a kernel.
    pub fn overlaps(self, other: Interval) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// True when kernel `k` lies in the interval.
    pub fn contains(self, k: usize) -> bool {
        self.first <= k && k <= self.last
    }
}

/// The interval of every buffer of a program, by buffer index.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Liveness {
    intervals: Vec<Option<Interval>>,
    kernels: usize,
}

impl Liveness {
    /// The liveness of `p`'s buffers (see the module docs). An intermediate that no
    /// kernel writes has no interval; so have inputs and outputs of a program without
    /// kernels.
    pub fn of(p: &Program) -> Liveness {
        let mut live = Liveness {
            intervals: vec![None; p.buffers.len()],
            kernels: p.kernels.len(),
        };
        for (ki, k) in p.kernels.iter().enumerate() {
            for w in &k.writes {
                live.note_write(w.buffer, ki);
            }
            for r in &k.reads {
                live.note_read(r.buffer, ki);
            }
        }
        if let Some(end) = p.kernels.len().checked_sub(1) {
            for b in &p.buffers {
                if b.kind != BufferKind::Intermediate {
                    if let Some(slot) = live.intervals.get_mut(b.id.index()) {
                        *slot = Some(Interval {
                            first: 0,
                            last: end,
                        });
                    }
                }
            }
        }
        live
    }

    /// The interval of buffer `b`, if it has one.
    pub fn get(&self, b: BufferId) -> Option<Interval> {
        self.intervals.get(b.index()).copied().flatten()
    }

    /// Records that kernel `k` writes `b`: its interval starts at the first writer and
    /// reaches at least `k`. A backend uses this for buffers of its own (the CPU's GEMM
    /// product temporaries), which the program does not list.
    pub fn note_write(&mut self, b: BufferId, k: usize) {
        self.grow(b);
        let i = &mut self.intervals[b.index()];
        *i = Some(match *i {
            None => Interval { first: k, last: k },
            Some(iv) => Interval {
                first: iv.first,
                last: iv.last.max(k),
            },
        });
    }

    /// Records that kernel `k` reads `b`: a written buffer's interval reaches at least
    /// `k` (a read never starts one: the verifier rejects reads before the write).
    pub fn note_read(&mut self, b: BufferId, k: usize) {
        self.grow(b);
        if let Some(iv) = &mut self.intervals[b.index()] {
            iv.last = iv.last.max(k);
        }
    }

    fn grow(&mut self, b: BufferId) {
        if self.intervals.len() <= b.index() {
            self.intervals.resize(b.index() + 1, None);
        }
    }

    /// The largest total size of the intermediates among `buffers` that are live during
    /// one kernel (a lower bound on any storage plan).
    pub fn peak_live_bytes(&self, buffers: &[Buffer]) -> usize {
        // One sweep over interval ends (a scan of every buffer per kernel is quadratic).
        let mut delta = vec![0i128; self.kernels + 1];
        for b in buffers
            .iter()
            .filter(|b| b.kind == BufferKind::Intermediate)
        {
            let Some(iv) = self.get(b.id) else { continue };
            if iv.first >= self.kernels || iv.last < iv.first {
                continue;
            }
            let size = b.ty.size_bytes() as i128;
            delta[iv.first] += size;
            delta[iv.last.min(self.kernels - 1) + 1] -= size;
        }
        let mut live = 0i128;
        let mut peak = 0i128;
        for d in &delta[..self.kernels] {
            live += d;
            peak = peak.max(live);
        }
        usize::try_from(peak).unwrap_or(usize::MAX)
    }
}

/// Typed storage shared by intermediates whose intervals do not overlap.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Slot {
    /// Element type of every buffer placed in it.
    pub dtype: DType,
    /// Length in elements: the largest buffer placed in it.
    pub len: usize,
}

impl Slot {
    /// Size in bytes.
    pub fn bytes(self) -> usize {
        self.len.saturating_mul(self.dtype.size_bytes())
    }
}

/// Where the intermediates of a set of buffers are stored.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Slots {
    /// The slot of each buffer, by buffer index (`None` for inputs, outputs and
    /// intermediates that are never written).
    pub slot_of: Vec<Option<usize>>,
    /// The slots.
    pub slots: Vec<Slot>,
}

impl Slots {
    /// Bytes of all slots together: the storage one run allocates.
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(|s| s.bytes()).sum()
    }
}

/// Assigns the intermediates among `buffers` to storage slots: buffers of one dtype
/// whose intervals do not overlap share one. Buffers are taken in order of their first
/// kernel (larger first, then by id); each goes to the smallest free slot of its dtype
/// that holds it, else the largest free one (which grows), else a new slot.
pub fn assign_slots(buffers: &[Buffer], live: &Liveness) -> Slots {
    let n = buffers.len();
    let mut order: Vec<(usize, Interval)> = (0..n)
        .filter(|&b| buffers[b].kind == BufferKind::Intermediate)
        .filter_map(|b| Some((b, live.get(buffers[b].id)?)))
        .collect();
    order.sort_by_key(|&(b, iv)| (iv.first, std::cmp::Reverse(buffers[b].ty.numel())));
    let mut slot_of = vec![None; n];
    // Per slot: dtype and length.
    let mut slots: Vec<(DType, usize)> = Vec::new();
    // Occupied slots by the last kernel of their occupant (a min-heap), and the free
    // slots of each dtype by (length, slot): finding a slot costs a logarithm, not a
    // scan of every slot.
    let mut busy: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let mut free: Vec<(DType, BTreeSet<(usize, usize)>)> = Vec::new();
    for (b, iv) in order {
        while let Some(&Reverse((last, s))) = busy.peek() {
            if last >= iv.first {
                break;
            }
            busy.pop();
            let (dtype, len) = slots[s];
            match free.iter_mut().find(|(d, _)| *d == dtype) {
                Some((_, set)) => {
                    set.insert((len, s));
                }
                None => free.push((dtype, BTreeSet::from([(len, s)]))),
            }
        }
        let (dtype, numel) = (buffers[b].ty.dtype, buffers[b].ty.numel());
        // Best fit: the smallest free slot that is large enough (the first of equals),
        // else the largest free one (the last of equals).
        let fit = free
            .iter_mut()
            .find(|(d, _)| *d == dtype)
            .and_then(|(_, set)| {
                let pick = set
                    .range((numel, 0)..)
                    .next()
                    .or_else(|| set.iter().next_back())
                    .copied()?;
                set.remove(&pick);
                Some(pick.1)
            });
        let s = match fit {
            Some(s) => s,
            None => {
                slots.push((dtype, 0));
                slots.len() - 1
            }
        };
        slots[s].1 = slots[s].1.max(numel);
        busy.push(Reverse((iv.last, s)));
        slot_of[b] = Some(s);
    }
    Slots {
        slot_of,
        slots: slots
            .into_iter()
            .map(|(dtype, len)| Slot { dtype, len })
            .collect(),
    }
}

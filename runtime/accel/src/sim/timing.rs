//! The timing model: how many cycles a program takes on one PE.
//!
//! Each program has two timelines that run side by side:
//!
//! - the **instruction stream** (`t`): vector work (elementwise, reductions,
//!   `arange`, casts, `where`, transposes) costs `ceil(elements / rate)` cycles,
//!   where the rate is the chip's vector TFLOPS divided by PEs and clock (one op
//!   per element): the f16 rate when every dtype involved is at most 16 bits
//!   wide (f16, bf16, bool, i8, u8, i16, u16), a quarter of the f32 rate when one
//!   is f64 ([`F64_FRACTION`]), the f32 rate otherwise; a `dot` costs
//!   `2*M*N*K / rate` cycles at the dot engine's rate for its input dtype
//!   ([`Rates::dot`]); reading a local buffer costs its bytes at the
//!   local memory bandwidth; each loop iteration costs one scalar cycle. Address
//!   arithmetic (pointer + offsets, indexing, broadcasting) is free: it is the
//!   DMA engine's address generation, not vector work;
//! - the **memory port** (`port`): every transfer to or from global memory
//!   occupies it for `LPDDR bytes / LPDDR share + SRAM bytes / SRAM share`
//!   cycles, one transfer after another. A share is the level's chip bandwidth
//!   divided among the PEs active in this program's wave (at most the local
//!   memory bandwidth, which every byte passes through).
//!
//! A synchronous `load` waits for its transfer (the stream stops until the port
//! is free and the data is in). `dma_async` and `store` are posted: they queue on
//! the port and the stream goes on; `dma_wait` stops the stream until that copy
//! has landed. So the time of a program is `max(compute, memory)` where the kernel
//! overlaps them with async copies, and their sum where it loads synchronously.
//! A program ends when both timelines are done.
//!
//! Programs are dealt to PEs round-robin (program `i` runs on PE `i % PEs`); a
//! PE runs its programs back to back; the kernel takes the longest PE's total
//! plus the launch overhead.

use super::machine::Machine;
use ferrite_ir::DType;

/// ASSUMED: the fraction of the f32 rate at which the vector and dot engines do
/// f64 work. The chip publishes no f64 figure; an inference accelerator of this
/// kind has no f64 datapath, and a quarter is what emulating a 64-bit
/// multiply-add with 32-bit lanes costs at the least (GPUs without an f64 unit
/// run it at 1/32 to 1/64; a quarter keeps f64 graphs plausible, not fast).
pub(crate) const F64_FRACTION: f64 = 0.25;

/// How wide the elements of a piece of vector work are, which sets its rate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Width {
    /// Every element 16 bits or less (f16, bf16, bool, i8, u8, i16, u16).
    Narrow,
    /// 32-bit elements, and 64-bit integers (two 32-bit lanes, as i64 always was).
    Full,
    /// f64 elements.
    Double,
}

impl Width {
    /// The width class of work on elements of `dtypes` (the widest decides).
    pub fn of(dtypes: &[DType]) -> Width {
        if dtypes.contains(&DType::F64) {
            Width::Double
        } else if dtypes.iter().all(|d| d.size_bytes() <= 2) {
            Width::Narrow
        } else {
            Width::Full
        }
    }
}

/// Bytes a transfer moves at each global memory level.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(crate) struct Traffic {
    pub lpddr: u64,
    pub sram: u64,
}

/// A machine's figures per PE and per cycle.
#[derive(Clone, Debug)]
pub(crate) struct Rates {
    /// Vector element-ops per cycle per PE on 32-bit (and wider) data.
    pub vector_f32: f64,
    /// Vector element-ops per cycle per PE on f16/bf16 data.
    pub vector_f16: f64,
    /// Dot-engine flops per cycle per PE, f16/bf16 inputs.
    pub dot_f16: f64,
    /// Dot-engine flops per cycle per PE, f32 inputs.
    pub dot_f32: f64,
    /// Local memory bytes per cycle per PE.
    pub local: f64,
    /// LPDDR bytes per cycle, whole chip.
    pub lpddr: f64,
    /// SRAM bytes per cycle, whole chip.
    pub sram: f64,
    /// Number of PEs.
    pub pes: usize,
    /// Cycles of one launch.
    pub launch: f64,
}

impl Rates {
    /// Dot-engine flops per cycle per PE for inputs of dtype `d`: the published
    /// f16/bf16 rate, the preset's f32 rate, twice the f16 rate for i8 and u8
    /// (the chip's published INT8 figure, 354 TOPS, with i32 accumulation), and
    /// ASSUMED: the f32 rate for the wider integers, [`F64_FRACTION`] of it for f64.
    pub fn dot(&self, d: DType) -> f64 {
        match d {
            DType::F16 | DType::Bf16 => self.dot_f16,
            DType::I8 | DType::U8 => 2.0 * self.dot_f16,
            DType::F64 => self.dot_f32 * F64_FRACTION,
            _ => self.dot_f32,
        }
    }

    pub fn new(m: &Machine) -> Rates {
        let hz = m.clock_hz();
        let per_pe = |tera: f64| tera * 1e12 / m.pes() as f64 / hz;
        Rates {
            vector_f32: per_pe(m.vector_tflops_f32),
            vector_f16: per_pe(m.vector_tflops_f16),
            dot_f16: per_pe(m.dot_tflops_f16),
            dot_f32: per_pe(m.dot_tflops_f32),
            local: m.local_bandwidth_gbps * 1e9 / hz,
            lpddr: m.lpddr_bandwidth_gbps * 1e9 / hz,
            sram: m.sram_bandwidth_gbps * 1e9 / hz,
            pes: m.pes(),
            launch: m.launch_overhead_us * 1e-6 * hz,
        }
    }
}

/// The two timelines of one program.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    /// When the instruction stream is.
    t: f64,
    /// When the memory port is free.
    port: f64,
    /// Cycles of vector and dot work so far.
    compute: f64,
    vector_f32: f64,
    vector_f16: f64,
    rates: Rates,
    local: f64,
    lpddr_share: f64,
    sram_share: f64,
}

impl Clock {
    /// A program starting at cycle 0 in a wave of `active` PEs.
    pub fn new(r: &Rates, active: usize) -> Clock {
        let active = active.max(1) as f64;
        Clock {
            t: 0.0,
            port: 0.0,
            compute: 0.0,
            vector_f32: r.vector_f32,
            vector_f16: r.vector_f16,
            rates: r.clone(),
            local: r.local,
            lpddr_share: (r.lpddr / active).min(r.local),
            sram_share: (r.sram / active).min(r.local),
        }
    }

    /// Vector work on `elems` elements of width `w`.
    pub fn vector(&mut self, elems: usize, w: Width) {
        let rate = match w {
            Width::Narrow => self.vector_f16,
            Width::Full => self.vector_f32,
            Width::Double => self.vector_f32 * F64_FRACTION,
        };
        let c = (elems as f64 / rate).ceil();
        self.t += c;
        self.compute += c;
    }

    /// Dot-engine work on inputs of dtype `d`.
    pub fn dot(&mut self, flops: f64, d: DType) {
        let rate = self.rates.dot(d);
        let c = (flops / rate).ceil();
        self.t += c;
        self.compute += c;
    }

    /// Scalar-core work (loop control).
    pub fn scalar(&mut self, cycles: f64) {
        self.t += cycles;
    }

    /// Reading a local buffer into the instruction stream.
    pub fn local_read(&mut self, bytes: u64) {
        self.t += (bytes as f64 / self.local).ceil();
    }

    fn duration(&self, traffic: Traffic) -> f64 {
        traffic.lpddr as f64 / self.lpddr_share + traffic.sram as f64 / self.sram_share
    }

    /// A synchronous load: the stream waits for the port and the transfer.
    pub fn sync(&mut self, traffic: Traffic) {
        let start = self.t.max(self.port);
        self.port = start + self.duration(traffic);
        self.t = self.port;
    }

    /// A posted transfer (async DMA, store); returns when it completes.
    pub fn post(&mut self, traffic: Traffic) -> f64 {
        let start = self.t.max(self.port);
        self.port = start + self.duration(traffic);
        self.port
    }

    /// Waits until cycle `at` (a posted transfer's completion).
    pub fn wait(&mut self, at: f64) {
        self.t = self.t.max(at);
    }

    /// The program's total cycles (both timelines done) and its compute cycles.
    pub fn finish(&self) -> (f64, f64) {
        (self.t.max(self.port), self.compute)
    }
}

/// Busy and compute cycles per PE when program `i` (with the given cycles) runs
/// on PE `i % pes`.
pub(crate) fn schedule(programs: &[(f64, f64)], pes: usize) -> (Vec<f64>, Vec<f64>) {
    let mut busy = vec![0.0; pes];
    let mut compute = vec![0.0; pes];
    for (i, &(cycles, comp)) in programs.iter().enumerate() {
        busy[i % pes] += cycles;
        compute[i % pes] += comp;
    }
    (busy, compute)
}

/// PEs active in the wave of program `i` out of `total`.
pub(crate) fn active_in_wave(i: usize, total: usize, pes: usize) -> usize {
    let wave_start = i / pes * pes;
    (total - wave_start).min(pes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates() -> Rates {
        Rates {
            vector_f32: 32.0,
            vector_f16: 64.0,
            dot_f16: 2048.0,
            dot_f32: 512.0,
            local: 1000.0,
            lpddr: 160.0,
            sram: 2000.0,
            pes: 4,
            launch: 100.0,
        }
    }

    #[test]
    fn synchronous_loads_add_and_async_copies_overlap() {
        let r = rates();
        // 4 active PEs share 160 B/cycle of LPDDR: 40 B/cycle each.
        let mut c = Clock::new(&r, 4);
        c.sync(Traffic {
            lpddr: 4000,
            sram: 0,
        });
        c.vector(3200, Width::Full);
        assert_eq!(c.finish(), (200.0, 100.0));
        let mut c = Clock::new(&r, 4);
        let done = c.post(Traffic {
            lpddr: 4000,
            sram: 0,
        });
        c.vector(3200, Width::Full);
        c.wait(done);
        assert_eq!(c.finish(), (100.0, 100.0));
        // A posted store still ends the program only when it has drained.
        let mut c = Clock::new(&r, 4);
        c.post(Traffic {
            lpddr: 8000,
            sram: 0,
        });
        assert_eq!(c.finish(), (200.0, 0.0));
        // Alone, a PE gets the level's bandwidth up to the local memory's.
        let mut c = Clock::new(&r, 1);
        c.sync(Traffic {
            lpddr: 0,
            sram: 4000,
        });
        assert_eq!(c.finish().0, 4.0);
    }

    #[test]
    fn programs_are_dealt_round_robin_in_waves() {
        let (busy, compute) = schedule(&[(10.0, 1.0), (20.0, 2.0), (30.0, 3.0)], 2);
        assert_eq!(busy, vec![40.0, 20.0]);
        assert_eq!(compute, vec![4.0, 2.0]);
        assert_eq!(active_in_wave(0, 10, 4), 4);
        assert_eq!(active_in_wave(9, 10, 4), 2);
    }
}

//! What a simulated launch reports: time, bytes per memory level, work, and how
//! busy each PE was; and the sum over the launches of a program.

use std::fmt;

/// Bytes moved at each memory level.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Bytes {
    /// Read from off-chip LPDDR.
    pub lpddr_read: u64,
    /// Written to off-chip LPDDR.
    pub lpddr_write: u64,
    /// Read from on-chip SRAM (placed buffers and cache hits).
    pub sram_read: u64,
    /// Written to on-chip SRAM (placed buffers).
    pub sram_write: u64,
    /// Read from PE-local memory (`local_load`).
    pub local_read: u64,
    /// Written to PE-local memory (DMA copies landing).
    pub local_write: u64,
}

impl Bytes {
    /// LPDDR bytes, both directions.
    pub fn lpddr(&self) -> u64 {
        self.lpddr_read + self.lpddr_write
    }

    /// SRAM bytes, both directions.
    pub fn sram(&self) -> u64 {
        self.sram_read + self.sram_write
    }

    /// Local memory bytes, both directions.
    pub fn local(&self) -> u64 {
        self.local_read + self.local_write
    }

    fn add(&mut self, o: &Bytes) {
        self.lpddr_read += o.lpddr_read;
        self.lpddr_write += o.lpddr_write;
        self.sram_read += o.sram_read;
        self.sram_write += o.sram_write;
        self.local_read += o.local_read;
        self.local_write += o.local_write;
    }
}

/// The report of one kernel launch.
#[derive(Clone, PartialEq, Debug)]
pub struct SimReport {
    /// The kernel's name.
    pub kernel: String,
    /// The machine preset's name.
    pub machine: String,
    /// The launch grid.
    pub grid: [usize; 3],
    /// Programs run (the grid's product).
    pub programs: usize,
    /// PE grid rows and columns of the machine.
    pub pe_grid: [usize; 2],
    /// Clock frequency in GHz.
    pub clock_ghz: f64,
    /// Cycles from launch to the last PE finishing, launch overhead included.
    pub cycles: u64,
    /// The launch overhead part of `cycles`.
    pub launch_cycles: u64,
    /// Bytes moved per memory level.
    pub bytes: Bytes,
    /// Flops done by dot engines (2 per multiply-add).
    pub dot_flops: u64,
    /// Element operations done by vector engines (and scalar ops).
    pub vector_ops: u64,
    /// Per PE, cycles spent running programs.
    pub pe_busy_cycles: Vec<u64>,
    /// Per PE, cycles of vector and dot work.
    pub pe_compute_cycles: Vec<u64>,
    /// The chip's peak dot flops per cycle for the kernel's dot input dtype
    /// (f16 rate when it has no dot), for the efficiency line.
    pub peak_dot_flops_per_cycle: f64,
}

impl SimReport {
    /// Wall-clock time of the launch in seconds.
    pub fn seconds(&self) -> f64 {
        self.cycles as f64 / (self.clock_ghz * 1e9)
    }

    /// Per PE, the fraction of the launch it was running programs.
    pub fn pe_utilization(&self) -> Vec<f64> {
        let total = self.cycles.max(1) as f64;
        self.pe_busy_cycles
            .iter()
            .map(|&b| b as f64 / total)
            .collect()
    }

    /// Achieved dot flops as a fraction of the chip's peak over the launch.
    pub fn dot_efficiency(&self) -> f64 {
        self.dot_flops as f64 / (self.peak_dot_flops_per_cycle * self.cycles.max(1) as f64)
    }
}

/// `1234567` as `1.23 M`: three significant digits with an SI prefix.
pub(crate) fn si(v: f64, unit: &str) -> String {
    let (scaled, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .iter()
        .find(|(s, _)| v.abs() >= *s)
        .map_or((v, ""), |&(s, p)| (v / s, p));
    if prefix.is_empty() {
        format!("{v} {unit}")
    } else {
        format!("{scaled:.2} {prefix}{unit}")
    }
}

/// A duration in the unit that reads best: `12.34 us`, `5.67 ms`, `1.23 s`.
pub(crate) fn duration(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.2} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn percent_stats(xs: &[f64]) -> String {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(0.0, f64::max);
    let mean = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    format!(
        "min {:.1}%  mean {:.1}%  max {:.1}%",
        min * 100.0,
        mean * 100.0,
        max * 100.0
    )
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.seconds();
        let per_s = |bytes: u64| si(bytes as f64 / s.max(1e-30), "B/s");
        let pes = self.pe_busy_cycles.len();
        writeln!(
            f,
            "kernel `{}` on {}: grid [{}, {}, {}] = {} programs over {} PEs",
            self.kernel, self.machine, self.grid[0], self.grid[1], self.grid[2], self.programs, pes
        )?;
        writeln!(
            f,
            "  time     {}  ({} cycles at {} GHz, launch {})",
            duration(s),
            self.cycles,
            self.clock_ghz,
            self.launch_cycles
        )?;
        let b = &self.bytes;
        for (name, read, write) in [
            ("LPDDR", b.lpddr_read, b.lpddr_write),
            ("SRAM ", b.sram_read, b.sram_write),
            ("local", b.local_read, b.local_write),
        ] {
            writeln!(
                f,
                "  {name}    {}  (read {}, write {}; {})",
                si((read + write) as f64, "B"),
                si(read as f64, "B"),
                si(write as f64, "B"),
                per_s(read + write)
            )?;
        }
        writeln!(
            f,
            "  dot      {}  ({:.1}% of peak)",
            si(self.dot_flops as f64, "flop"),
            self.dot_efficiency() * 100.0
        )?;
        writeln!(f, "  vector   {}", si(self.vector_ops as f64, "op"))?;
        let total = self.cycles.max(1) as f64;
        let compute: Vec<f64> = self
            .pe_compute_cycles
            .iter()
            .map(|&c| c as f64 / total)
            .collect();
        let busy = self.pe_utilization();
        writeln!(f, "  PE busy     {}", percent_stats(&busy))?;
        writeln!(f, "  PE compute  {}", percent_stats(&compute))?;
        write!(f, "  PE busy % by grid row:")?;
        for row in busy.chunks(self.pe_grid[1].max(1)) {
            write!(f, "\n   ")?;
            for u in row {
                write!(f, " {:>3.0}", u * 100.0)?;
            }
        }
        Ok(())
    }
}

/// The launches of a program run on one [`Device`](super::Device), in order.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct DeviceReport {
    /// One report per launch.
    pub launches: Vec<SimReport>,
}

impl DeviceReport {
    /// Total cycles: launches run one after another.
    pub fn cycles(&self) -> u64 {
        self.launches.iter().map(|r| r.cycles).sum()
    }

    /// Total seconds.
    pub fn seconds(&self) -> f64 {
        self.launches.iter().map(SimReport::seconds).sum()
    }

    /// Bytes per level over all launches.
    pub fn bytes(&self) -> Bytes {
        let mut b = Bytes::default();
        for r in &self.launches {
            b.add(&r.bytes);
        }
        b
    }

    /// Dot flops over all launches.
    pub fn dot_flops(&self) -> u64 {
        self.launches.iter().map(|r| r.dot_flops).sum()
    }
}

impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<24} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11}",
            "kernel", "cycles", "time", "LPDDR", "SRAM", "local", "dot"
        )?;
        let row =
            |f: &mut fmt::Formatter<'_>, name: &str, cycles: u64, s: f64, b: Bytes, flops: u64| {
                writeln!(
                    f,
                    "{:<24} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11}",
                    name,
                    cycles,
                    duration(s),
                    si(b.lpddr() as f64, "B"),
                    si(b.sram() as f64, "B"),
                    si(b.local() as f64, "B"),
                    si(flops as f64, "flop")
                )
            };
        for r in &self.launches {
            row(f, &r.kernel, r.cycles, r.seconds(), r.bytes, r.dot_flops)?;
        }
        row(
            f,
            &format!("total ({} launches)", self.launches.len()),
            self.cycles(),
            self.seconds(),
            self.bytes(),
            self.dot_flops(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_prefixes() {
        assert_eq!(si(1_234_567.0, "B"), "1.23 MB");
        assert_eq!(si(0.0, "B"), "0 B");
        assert_eq!(si(999.0, "op"), "999 op");
        assert_eq!(duration(2.5e-4), "250.00 us");
        assert_eq!(duration(0.012), "12.00 ms");
    }
}

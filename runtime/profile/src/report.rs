//! The data model of a profile: per-kernel rows for the fused and the unfused
//! schedule of one graph, their totals, and the roofline they are measured against.
//!
//! The table ([`super::table`]), the JSON report ([`super::json`]) and the Chrome trace
//! ([`super::trace`]) are three views of one [`ProfileReport`].

use ferrite_ir::loops::Kernel;
use ferrite_ir::Graph;

/// Where the schedules ran.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProfileTarget {
    /// Native code on this machine; times are medians of wall-clock measurements.
    Cpu,
    /// The accelerator simulator; times are simulated cycles at the machine's clock.
    Sim,
}

impl ProfileTarget {
    /// `cpu` or `sim`, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ProfileTarget::Cpu => "cpu",
            ProfileTarget::Sim => "sim",
        }
    }
}

/// One memory level of the roofline and its peak bandwidth.
#[derive(Clone, PartialEq, Debug)]
pub struct MemoryLevel {
    /// The level's name in reports (`dram`, `lpddr`, `sram`).
    pub name: String,
    /// Peak bytes per second (reads and writes together).
    pub bytes_per_second: f64,
}

/// The bandwidth ceiling kernels are compared against.
///
/// A kernel's *roofline time* is the least time its memory traffic can take:
/// `Σ bytes at level / bandwidth of level` (the simulator's memory port serves the
/// levels one transfer after another, so their times add). Its *roofline share* is
/// that time divided by its actual time: 100% means it moved its bytes as fast as the
/// machine can. On the CPU the one level is DRAM at the measured copy bandwidth, so a
/// kernel whose data stays in cache can exceed 100%.
#[derive(Clone, PartialEq, Debug)]
pub struct Roofline {
    /// Where the figures come from, for readers.
    pub description: String,
    /// The levels; [`KernelProfile::level_bytes`] has one entry per level.
    pub levels: Vec<MemoryLevel>,
}

impl Roofline {
    /// The least time in nanoseconds that moving `level_bytes` can take.
    pub fn min_time_ns(&self, level_bytes: &[u64]) -> f64 {
        self.levels
            .iter()
            .zip(level_bytes)
            .filter(|(l, _)| l.bytes_per_second > 0.0)
            .map(|(l, &b)| b as f64 / l.bytes_per_second * 1e9)
            .sum()
    }
}

/// A graph node computed by a kernel.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpRef {
    /// The value id in the optimized graph (`%13` is 13).
    pub id: u32,
    /// The op's name in `.fg` text (`matmul`).
    pub op: String,
    /// The name bound in the source text, if any.
    pub name: Option<String>,
}

/// The ops of `kernel`, which was scheduled from `g`: every node it computes
/// (views and recomputed constants included), in graph order.
pub fn kernel_ops(g: &Graph, kernel: &Kernel) -> Vec<OpRef> {
    let mut ids: Vec<_> = kernel
        .nodes
        .iter()
        .filter(|v| v.index() < g.nodes.len())
        .copied()
        .collect();
    ids.sort();
    ids.dedup();
    ids.into_iter()
        .map(|v| {
            let n = g.node(v);
            OpRef {
                id: v.0,
                op: n.op.name().to_string(),
                name: n.name.clone(),
            }
        })
        .collect()
}

/// Simulator figures of one kernel.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct SimKernelDetail {
    /// Tile kernel launches the loop-IR kernel became.
    pub launches: usize,
    /// Programs run, over all launches.
    pub programs: usize,
    /// The launch overhead part of the kernel's cycles.
    pub launch_cycles: u64,
    /// Per PE, cycles spent running programs (summed over launches).
    pub pe_busy_cycles: Vec<u64>,
    /// Flops done by dot engines.
    pub dot_flops: u64,
}

/// One kernel as measured in one CPU run (the run the Chrome trace shows): when it ran
/// and which thread ran which chunk of it when. Times are nanoseconds from the start
/// of that run.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct KernelTrace {
    /// When the kernel started.
    pub start_ns: f64,
    /// How long it took (all threads).
    pub duration_ns: f64,
    /// Its chunks, in completion order.
    pub chunks: Vec<ChunkSlice>,
}

/// One chunk of a kernel run on one thread of the CPU pool.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct ChunkSlice {
    /// The thread: 0 is the one that runs the program, `1..` the pool's workers.
    pub worker: usize,
    /// The chunk's index in the kernel's parallel loop.
    pub chunk: usize,
    /// When the chunk started, in nanoseconds from the start of the run.
    pub start_ns: f64,
    /// How long it ran, in nanoseconds.
    pub duration_ns: f64,
}

/// One kernel's row.
#[derive(Clone, PartialEq, Debug)]
pub struct KernelProfile {
    /// Position in the schedule's execution order.
    pub index: usize,
    /// The kernel's name (`k3_matmul_add`).
    pub name: String,
    /// The graph nodes fused into it.
    pub ops: Vec<OpRef>,
    /// Time in nanoseconds: the median over the timed runs (CPU) or the simulated time.
    pub time_ns: f64,
    /// Simulated cycles (simulator only).
    pub cycles: Option<u64>,
    /// Bytes read from memory.
    pub bytes_read: u64,
    /// Bytes written to memory.
    pub bytes_written: u64,
    /// Bytes moved at each level of the report's [`Roofline`], in its order.
    pub level_bytes: Vec<u64>,
    /// True when the kernel's product ran on a GEMM (the CPU's extern GEMM, the
    /// simulator's dot engines).
    pub gemm: bool,
    /// Simulator figures (simulator only).
    pub sim: Option<SimKernelDetail>,
    /// The kernel's timeline in one representative run (CPU only).
    pub trace: Option<KernelTrace>,
}

impl KernelProfile {
    /// Bytes read plus written.
    pub fn bytes(&self) -> u64 {
        self.bytes_read + self.bytes_written
    }

    /// Achieved bandwidth in bytes per second (0 for a kernel that took no time).
    pub fn bandwidth(&self) -> f64 {
        if self.time_ns > 0.0 {
            self.bytes() as f64 / (self.time_ns * 1e-9)
        } else {
            0.0
        }
    }

    /// The kernel's share of the roofline: its least possible memory time over its
    /// actual time (see [`Roofline`]).
    pub fn roofline_share(&self, roofline: &Roofline) -> f64 {
        if self.time_ns > 0.0 {
            roofline.min_time_ns(&self.level_bytes) / self.time_ns
        } else {
            0.0
        }
    }
}

/// One schedule (fused or unfused) of the graph, profiled.
#[derive(Clone, PartialEq, Debug)]
pub struct ScheduleProfile {
    /// True for the fused schedule.
    pub fused: bool,
    /// The kernels in execution order.
    pub kernels: Vec<KernelProfile>,
    /// Time in kernels in nanoseconds: on the CPU the median over runs of each run's
    /// summed kernel times (not the sum of the per-kernel medians), on the simulator
    /// the simulated time of all launches.
    pub total_ns: f64,
    /// Simulated cycles of all launches (simulator only).
    pub total_cycles: Option<u64>,
    /// Median wall-clock time of a whole run: kernels plus argument checks, output
    /// allocation and buffer zeroing (CPU only).
    pub wall_ns: Option<f64>,
    /// Bytes the memory plan reserves for intermediates (the peak of live
    /// intermediates, with alignment).
    pub peak_intermediate_bytes: u64,
}

impl ScheduleProfile {
    /// `fused` or `unfused`.
    pub fn label(&self) -> &'static str {
        if self.fused {
            "fused"
        } else {
            "unfused"
        }
    }

    /// Bytes read by all kernels.
    pub fn bytes_read(&self) -> u64 {
        self.kernels.iter().map(|k| k.bytes_read).sum()
    }

    /// Bytes written by all kernels.
    pub fn bytes_written(&self) -> u64 {
        self.kernels.iter().map(|k| k.bytes_written).sum()
    }

    /// Bytes per roofline level over all kernels.
    pub fn level_bytes(&self) -> Vec<u64> {
        let n = self.kernels.iter().map(|k| k.level_bytes.len()).max();
        let mut total = vec![0; n.unwrap_or(0)];
        for k in &self.kernels {
            for (t, b) in total.iter_mut().zip(&k.level_bytes) {
                *t += b;
            }
        }
        total
    }

    /// Start of each kernel, in nanoseconds from the start of the schedule, with the
    /// kernels laid back to back at their [`KernelProfile::time_ns`].
    pub fn start_times_ns(&self) -> Vec<f64> {
        let mut t = 0.0;
        self.kernels
            .iter()
            .map(|k| {
                let start = t;
                t += k.time_ns;
                start
            })
            .collect()
    }
}

/// The machine a simulator profile ran on.
#[derive(Clone, PartialEq, Debug)]
pub struct MachineInfo {
    /// The preset's name.
    pub name: String,
    /// Clock frequency in GHz.
    pub clock_ghz: f64,
    /// PE grid rows and columns.
    pub pe_grid: [usize; 2],
}

/// A profile of one graph: both schedules on one target.
#[derive(Clone, PartialEq, Debug)]
pub struct ProfileReport {
    /// The graph's name.
    pub graph: String,
    /// Where it ran.
    pub target: ProfileTarget,
    /// Timed runs per schedule (after one warm-up run); 1 on the simulator.
    pub runs: usize,
    /// CPU threads kernels ran on (CPU only).
    pub threads: Option<usize>,
    /// The simulated machine (simulator only).
    pub machine: Option<MachineInfo>,
    /// What bandwidth shares are relative to.
    pub roofline: Roofline,
    /// The fused schedule.
    pub fused: ScheduleProfile,
    /// The unfused baseline: one kernel per primitive op.
    pub unfused: ScheduleProfile,
}

impl ProfileReport {
    /// Unfused time over fused time: how many times faster fusion made the graph.
    pub fn speedup(&self) -> f64 {
        if self.fused.total_ns > 0.0 {
            self.unfused.total_ns / self.fused.total_ns
        } else {
            0.0
        }
    }
}

/// The median of `xs` (the mean of the middle two for an even count; 0 when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small report with hand-picked numbers, shared by the views' tests.
    pub(crate) fn sample_report(target: ProfileTarget) -> ProfileReport {
        let op = |id, op: &str, name: Option<&str>| OpRef {
            id,
            op: op.into(),
            name: name.map(String::from),
        };
        let sim = |busy: Vec<u64>| match target {
            ProfileTarget::Cpu => None,
            ProfileTarget::Sim => Some(SimKernelDetail {
                launches: 1,
                programs: 4,
                launch_cycles: 100,
                pe_busy_cycles: busy,
                dot_flops: 0,
            }),
        };
        let cycles = |ns: f64| match target {
            ProfileTarget::Cpu => None,
            ProfileTarget::Sim => Some(ns as u64),
        };
        let levels = |b: u64| match target {
            ProfileTarget::Cpu => vec![b],
            ProfileTarget::Sim => vec![b, 0],
        };
        let kernel = |index, name: &str, ops, ns: f64, r: u64, w: u64, busy| KernelProfile {
            index,
            name: name.into(),
            ops,
            time_ns: ns,
            cycles: cycles(ns),
            bytes_read: r,
            bytes_written: w,
            level_bytes: levels(r + w),
            gemm: false,
            sim: sim(busy),
            trace: None,
        };
        let fused = ScheduleProfile {
            fused: true,
            kernels: vec![kernel(
                0,
                "k0_mul_relu",
                vec![op(1, "mul", None), op(2, "relu", Some("y \"quoted\""))],
                1000.0,
                4000,
                4000,
                vec![800, 700],
            )],
            total_ns: 1000.0,
            total_cycles: cycles(1000.0),
            wall_ns: (target == ProfileTarget::Cpu).then_some(1500.0),
            peak_intermediate_bytes: 0,
        };
        let unfused = ScheduleProfile {
            fused: false,
            kernels: vec![
                kernel(
                    0,
                    "k0_mul",
                    vec![op(1, "mul", None)],
                    1200.0,
                    4000,
                    4000,
                    vec![900, 900],
                ),
                kernel(
                    1,
                    "k1_relu",
                    vec![op(2, "relu", Some("y \"quoted\""))],
                    1800.0,
                    4000,
                    4000,
                    vec![1500, 1400],
                ),
            ],
            total_ns: 3000.0,
            total_cycles: cycles(3000.0),
            wall_ns: (target == ProfileTarget::Cpu).then_some(3600.0),
            peak_intermediate_bytes: 4096,
        };
        let roofline = match target {
            ProfileTarget::Cpu => Roofline {
                description: "copy bandwidth 16 GB/s".into(),
                levels: vec![MemoryLevel {
                    name: "dram".into(),
                    bytes_per_second: 16e9,
                }],
            },
            ProfileTarget::Sim => Roofline {
                description: "LPDDR 16 GB/s, SRAM 64 GB/s".into(),
                levels: vec![
                    MemoryLevel {
                        name: "lpddr".into(),
                        bytes_per_second: 16e9,
                    },
                    MemoryLevel {
                        name: "sram".into(),
                        bytes_per_second: 64e9,
                    },
                ],
            },
        };
        ProfileReport {
            graph: "g".into(),
            target,
            runs: 3,
            threads: (target == ProfileTarget::Cpu).then_some(2),
            machine: (target == ProfileTarget::Sim).then(|| MachineInfo {
                name: "test machine".into(),
                clock_ghz: 1.0,
                pe_grid: [1, 2],
            }),
            roofline,
            fused,
            unfused,
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn bandwidth_roofline_and_speedup_by_hand() {
        let r = sample_report(ProfileTarget::Cpu);
        let k = &r.fused.kernels[0];
        // 8000 bytes in 1000 ns is 8 GB/s, half of the 16 GB/s roofline.
        assert_eq!(k.bytes(), 8000);
        assert!((k.bandwidth() - 8e9).abs() < 1.0);
        assert!((k.roofline_share(&r.roofline) - 0.5).abs() < 1e-12);
        assert!((r.speedup() - 3.0).abs() < 1e-12);
        assert_eq!(r.unfused.start_times_ns(), vec![0.0, 1200.0]);
        assert_eq!(r.unfused.bytes_read(), 8000);
        assert_eq!(r.unfused.level_bytes(), vec![16000]);
    }

    #[test]
    fn sim_roofline_adds_the_levels() {
        let r = sample_report(ProfileTarget::Sim);
        // 16 kB at 16 GB/s (1000 ns) plus 64 kB at 64 GB/s (1000 ns).
        assert!((r.roofline.min_time_ns(&[16_000, 64_000]) - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn kernel_ops_lists_each_node_once_in_graph_order() {
        let g = ferrite_ir::parse(
            "t.fg",
            "graph t(x: f32[4]) -> f32[4] {\n  h = relu(mul(x, 2.0))\n  return h\n}\n",
        )
        .unwrap();
        let k = Kernel {
            id: ferrite_ir::loops::KernelId(0),
            name: "k0".into(),
            nodes: vec![
                ferrite_ir::ValueId(3),
                ferrite_ir::ValueId(2),
                ferrite_ir::ValueId(3),
            ],
            domain: vec![4],
            stages: vec![],
            gemm: None,
            reads: vec![],
            writes: vec![],
        };
        let ops = kernel_ops(&g, &k);
        assert_eq!(
            ops,
            vec![
                OpRef {
                    id: 2,
                    op: "mul".into(),
                    name: None
                },
                OpRef {
                    id: 3,
                    op: "relu".into(),
                    name: Some("h".into())
                },
            ]
        );
    }
}

//! Profiling compiled programs: where the time goes, kernel by kernel, fused and
//! unfused.
//!
//! The measurement functions run a compiled schedule and return a
//! [`ScheduleProfile`]; two of them (fused and unfused) and a [`Roofline`] make a
//! [`ProfileReport`], which renders as a table ([`render_table`]), as documented JSON
//! ([`to_json`]) and as a Chrome trace ([`chrome_trace`]).
//!
//! - [`profile_cpu`]: one warm-up run, then timed runs; each kernel's time is its
//!   median over the runs. [`measure_copy_bandwidth`] gives the CPU's roofline: the
//!   bandwidth of a large parallel memcpy, measured once per profile.
//! - [`profile_sim`]: one run on the simulator, whose cycles are deterministic; each
//!   kernel's row is its launch's report. [`machine_roofline`] gives the machine's
//!   LPDDR and SRAM bandwidths.
//!
//! Architecture invariant: this module measures and reports; it neither compiles nor
//! schedules (the caller brings compiled programs and the memory plan's figures), so
//! it depends on no pass.

mod error;
pub mod json;
pub mod report;
pub mod table;
pub mod trace;

pub use error::{Error, Result};
pub use json::{to_json, FORMAT_VERSION};
pub use report::{
    kernel_ops, median, ChunkSlice, KernelProfile, KernelTrace, MachineInfo, MemoryLevel, OpRef,
    ProfileReport, ProfileTarget, Roofline, ScheduleProfile, SimKernelDetail,
};
pub use table::render_table;
pub use trace::chrome_trace;

use ferrite_accel::program::SimProgram;
use ferrite_accel::sim::{Machine, SimReport};
use ferrite_cpu::{CpuProgram, InputTensors};
use ferrite_ir::loops::Program;
use ferrite_ir::{Graph, Tensor};
use std::time::{Duration, Instant};

/// Bytes of the source (and of the destination) of the copy-bandwidth measurement:
/// far beyond any last-level cache, so the copy runs at DRAM speed.
pub const COPY_BYTES: usize = 64 << 20;

/// Timed repetitions of the copy; the fastest counts (the first also faults pages in).
const COPY_REPEATS: usize = 5;

/// Measures the machine's copy bandwidth (bytes read plus written per second) with
/// `threads` threads each copying a slice of a [`COPY_BYTES`] buffer, and returns it
/// as the CPU roofline with one level, `dram`.
pub fn measure_copy_bandwidth(threads: usize) -> Roofline {
    let threads = threads.max(1);
    let words = COPY_BYTES / 8;
    let src: Vec<u64> = (0..words as u64).collect();
    let mut dst = vec![0u64; words];
    let chunk = words.div_ceil(threads);
    let mut best = Duration::MAX;
    for _ in 0..COPY_REPEATS {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for (d, s) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                scope.spawn(move || d.copy_from_slice(s));
            }
        });
        best = best.min(start.elapsed());
        std::hint::black_box(&mut dst);
    }
    let bytes_per_second = (2 * COPY_BYTES) as f64 / best.as_secs_f64().max(1e-9);
    Roofline {
        description: format!(
            "measured: memcpy of {} MiB on {} thread{}, best of {COPY_REPEATS}",
            COPY_BYTES >> 20,
            threads,
            if threads == 1 { "" } else { "s" }
        ),
        levels: vec![MemoryLevel {
            name: "dram".into(),
            bytes_per_second,
        }],
    }
}

/// Profiles a compiled schedule on the CPU: one warm-up run, then `runs` timed runs
/// (at least one). `graph` is the graph the program was scheduled from (for the op
/// names), `peak_intermediate_bytes` the memory plan's arena size. `progress` is
/// called after every timed run with the number done.
pub fn profile_cpu<I: InputTensors + ?Sized>(
    program: &CpuProgram,
    graph: &Graph,
    inputs: &I,
    runs: usize,
    fused: bool,
    peak_intermediate_bytes: u64,
    progress: &mut dyn FnMut(usize),
) -> Result<ScheduleProfile> {
    let runs = runs.max(1);
    let kernels = &program.program().kernels;
    // Outputs are made once and written again by every run, as a caller that binds its
    // outputs does: timed runs measure the steady state, not fresh allocations.
    let mut outputs = program.new_outputs();
    program.run_into(inputs, &mut outputs).map_err(Error::Cpu)?;
    // samples[k][run]: kernel k's time in that run.
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); kernels.len()];
    let mut totals = Vec::with_capacity(runs);
    let mut walls = Vec::with_capacity(runs);
    let mut gemm = vec![false; kernels.len()];
    // Every run's timings: the trace shows the run whose kernel total is the median.
    let mut all_timings = Vec::with_capacity(runs);
    for run in 0..runs {
        let start = Instant::now();
        let timings = program
            .run_profiled_into(inputs, &mut outputs)
            .map_err(Error::Cpu)?;
        walls.push(start.elapsed().as_secs_f64() * 1e9);
        if timings.len() != kernels.len() {
            return Err(Error::Internal(format!(
                "a profiled run timed {} kernels of {}",
                timings.len(),
                kernels.len()
            )));
        }
        let mut total = 0.0;
        for (k, t) in timings.iter().enumerate() {
            let ns = t.duration.as_secs_f64() * 1e9;
            samples[k].push(ns);
            total += ns;
            gemm[k] = t.gemm;
        }
        totals.push(total);
        all_timings.push(timings);
        progress(run + 1);
    }
    let total_median = median(&totals);
    let representative = (0..runs)
        .min_by(|&a, &b| {
            let da = (totals[a] - total_median).abs();
            let db = (totals[b] - total_median).abs();
            da.total_cmp(&db)
        })
        .unwrap_or(0);
    let ns = |d: Duration| d.as_secs_f64() * 1e9;
    let mut traces = all_timings
        .swap_remove(representative)
        .into_iter()
        .map(|t| KernelTrace {
            start_ns: ns(t.start),
            duration_ns: ns(t.duration),
            chunks: t
                .spans
                .iter()
                .map(|s| ChunkSlice {
                    worker: s.worker,
                    chunk: s.chunk,
                    start_ns: ns(s.start),
                    duration_ns: ns(s.duration),
                })
                .collect(),
        });
    let rows = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let read: usize = k.reads.iter().map(|a| a.bytes).sum();
            let written: usize = k.writes.iter().map(|a| a.bytes).sum();
            KernelProfile {
                index: i,
                name: k.name.clone(),
                ops: kernel_ops(graph, k),
                time_ns: median(&samples[i]),
                cycles: None,
                bytes_read: read as u64,
                bytes_written: written as u64,
                level_bytes: vec![(read + written) as u64],
                gemm: gemm[i],
                sim: None,
                trace: traces.next(),
            }
        })
        .collect();
    Ok(ScheduleProfile {
        fused,
        kernels: rows,
        total_ns: total_median,
        total_cycles: None,
        wall_ns: Some(median(&walls)),
        peak_intermediate_bytes,
    })
}

/// The simulator's roofline: the machine's LPDDR and SRAM bandwidths (levels
/// `lpddr` and `sram`, in that order).
pub fn machine_roofline(m: &Machine) -> Roofline {
    Roofline {
        description: format!(
            "machine preset `{}`: LPDDR {} GB/s, SRAM {} GB/s",
            m.name, m.lpddr_bandwidth_gbps, m.sram_bandwidth_gbps
        ),
        levels: vec![
            MemoryLevel {
                name: "lpddr".into(),
                bytes_per_second: m.lpddr_bandwidth_gbps * 1e9,
            },
            MemoryLevel {
                name: "sram".into(),
                bytes_per_second: m.sram_bandwidth_gbps * 1e9,
            },
        ],
    }
}

/// The machine's figures for a [`ProfileReport`].
pub fn machine_info(m: &Machine) -> MachineInfo {
    MachineInfo {
        name: m.name.clone(),
        clock_ghz: m.clock_ghz,
        pe_grid: [m.pe_rows, m.pe_cols],
    }
}

/// Profiles a schedule on the simulator: one run (simulated cycles do not vary).
/// `compiled` was compiled from `program`, which was scheduled from `graph`;
/// `peak_intermediate_bytes` is the memory plan's arena size. A kernel with no work
/// (an empty domain) is not launched and gets a row of zeros, and so does a GEMM
/// computed by an earlier kernel's launch (GEMMs sharing their left operand).
pub fn profile_sim(
    compiled: &SimProgram,
    program: &Program,
    graph: &Graph,
    inputs: &[Tensor],
    fused: bool,
    peak_intermediate_bytes: u64,
) -> Result<ScheduleProfile> {
    let (_, report) = compiled.run(inputs)?;
    let mut launches = report.launches.iter();
    let mut rows = Vec::with_capacity(program.kernels.len());
    for (i, k) in program.kernels.iter().enumerate() {
        // A GEMM that runs in an earlier kernel's launch (GEMMs sharing their
        // lhs: `SimProgram::merged_into`) has no launch of its own; that
        // kernel's row counts the launch.
        let launch = if k.domain.contains(&0) || compiled.merged_into(i).is_some() {
            None
        } else {
            match launches.next() {
                Some(l) if l.kernel == k.name || l.kernel == format!("{}_stage", k.name) => Some(l),
                Some(l) => {
                    return Err(Error::Internal(format!(
                        "the simulator reported launch `{}` where kernel `{}` was expected",
                        l.kernel, k.name
                    )))
                }
                None => {
                    return Err(Error::Internal(format!(
                        "kernel `{}` was not launched",
                        k.name
                    )))
                }
            }
        };
        // A kernel whose operands are staged in SRAM first has two launches:
        // the copy, then the kernel itself; a GEMM split along K has a third
        // between them, its first part (`NAME_part`). Its row counts them all.
        let mut staging = Vec::new();
        let launch = match launch {
            Some(l) if l.kernel == format!("{}_stage", k.name) => {
                staging.push(l);
                loop {
                    match launches.next() {
                        Some(part) if part.kernel == format!("{}_part", k.name) => {
                            staging.push(part)
                        }
                        Some(main) if main.kernel == k.name => break Some(main),
                        _ => {
                            return Err(Error::Internal(format!(
                                "kernel `{}` was not launched after its staging",
                                k.name
                            )))
                        }
                    }
                }
            }
            other => other,
        };
        let mut row = sim_row(i, k.name.clone(), kernel_ops(graph, k), launch);
        for st in staging {
            add_staging(&mut row, st);
        }
        rows.push(row);
    }
    if let Some(extra) = launches.next() {
        return Err(Error::Internal(format!(
            "unexpected launch `{}`",
            extra.kernel
        )));
    }
    Ok(ScheduleProfile {
        fused,
        total_ns: report.seconds() * 1e9,
        total_cycles: Some(report.cycles()),
        kernels: rows,
        wall_ns: None,
        peak_intermediate_bytes,
    })
}

/// Adds a kernel's staging launch (its operands copied to SRAM, or the first
/// part of a GEMM split along K) to its row.
fn add_staging(row: &mut KernelProfile, st: &SimReport) {
    let b = &st.bytes;
    row.time_ns += st.seconds() * 1e9;
    row.cycles = Some(row.cycles.unwrap_or(0) + st.cycles);
    row.bytes_read += b.lpddr_read + b.sram_read;
    row.bytes_written += b.lpddr_write + b.sram_write;
    if let [lpddr, sram] = &mut row.level_bytes[..] {
        *lpddr += b.lpddr();
        *sram += b.sram();
    }
    if let Some(sim) = &mut row.sim {
        sim.launches += 1;
        sim.launch_cycles += st.launch_cycles;
        sim.dot_flops += st.dot_flops;
        for (busy, more) in sim.pe_busy_cycles.iter_mut().zip(&st.pe_busy_cycles) {
            *busy += more;
        }
    }
}

/// One kernel's row from its launch report (zeros when it was not launched).
fn sim_row(
    index: usize,
    name: String,
    ops: Vec<OpRef>,
    launch: Option<&SimReport>,
) -> KernelProfile {
    let Some(l) = launch else {
        return KernelProfile {
            index,
            name,
            ops,
            time_ns: 0.0,
            cycles: Some(0),
            bytes_read: 0,
            bytes_written: 0,
            level_bytes: vec![0, 0],
            gemm: false,
            sim: Some(SimKernelDetail::default()),
            trace: None,
        };
    };
    let b = &l.bytes;
    KernelProfile {
        index,
        name,
        ops,
        time_ns: l.seconds() * 1e9,
        cycles: Some(l.cycles),
        bytes_read: b.lpddr_read + b.sram_read,
        bytes_written: b.lpddr_write + b.sram_write,
        level_bytes: vec![b.lpddr(), b.sram()],
        gemm: l.dot_flops > 0,
        trace: None,
        sim: Some(SimKernelDetail {
            launches: 1,
            programs: l.programs,
            launch_cycles: l.launch_cycles,
            pe_busy_cycles: l.pe_busy_cycles.clone(),
            dot_flops: l.dot_flops,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_cpu::CpuOptions;
    use ferrite_passes::decompose::decompose;
    use ferrite_passes::schedule::{schedule, ScheduleOptions};

    #[test]
    fn copy_bandwidth_is_a_plausible_figure() {
        let r = measure_copy_bandwidth(2);
        assert_eq!(r.levels.len(), 1);
        let bw = r.levels[0].bytes_per_second;
        // Any machine that runs the tests copies between 100 MB/s and 10 TB/s.
        assert!(bw > 1e8 && bw < 1e13, "{bw}");
        assert!(
            r.description.contains("64 MiB on 2 threads"),
            "{}",
            r.description
        );
    }

    #[test]
    fn cpu_profile_of_both_schedules_by_hand() {
        let text =
            "graph t(x: f32[256, 64]) -> f32[256, 64] {\n  y = relu(mul(x, 2.0))\n  return y\n}\n";
        let g = decompose(&ferrite_ir::parse("t.fg", text).unwrap()).unwrap();
        let x = Tensor::random(g.ty(g.params[0]), 7);
        let mut calls = Vec::new();
        for (fuse, kernels) in [(true, 1), (false, 2)] {
            let opts = if fuse {
                ScheduleOptions::default()
            } else {
                ScheduleOptions::unfused()
            };
            let s = schedule(&g, &opts).unwrap();
            let cpu = CpuProgram::compile(&s.program, &CpuOptions::with_threads(1)).unwrap();
            let peak = s.memory.peak_bytes() as u64;
            let p = profile_cpu(
                &cpu,
                &g,
                std::slice::from_ref(&x),
                3,
                fuse,
                peak,
                &mut |n| calls.push(n),
            )
            .unwrap();
            assert_eq!(p.fused, fuse);
            assert_eq!(p.kernels.len(), kernels);
            // Each kernel reads and writes one 256 x 64 f32 buffer: 64 KiB each way.
            for k in &p.kernels {
                assert_eq!(
                    (k.bytes_read, k.bytes_written),
                    (65536, 65536),
                    "{}",
                    k.name
                );
                assert_eq!(k.level_bytes, vec![131072]);
                assert!(k.time_ns > 0.0 && !k.gemm);
            }
            let ops: Vec<&str> = p
                .kernels
                .iter()
                .flat_map(|k| &k.ops)
                .map(|o| o.op.as_str())
                .collect();
            // decompose writes relu as maximum(x, 0).
            assert_eq!(ops, ["mul", "maximum"]);
            // The unfused intermediate (the product) is 64 KiB; fused there is none.
            assert_eq!(p.peak_intermediate_bytes, if fuse { 0 } else { 65536 });
            assert!(p.total_ns > 0.0 && p.wall_ns.unwrap() >= p.kernels[0].time_ns);
        }
        assert_eq!(calls, [1, 2, 3, 1, 2, 3]);
    }
    #[test]
    fn sim_profile_of_both_schedules_by_hand() {
        let text =
            "graph t(x: f32[256, 64]) -> f32[256, 64] {\n  y = relu(mul(x, 2.0))\n  return y\n}\n";
        let g = decompose(&ferrite_ir::parse("t.fg", text).unwrap()).unwrap();
        let x = Tensor::random(g.ty(g.params[0]), 7);
        let machine = Machine::mtia2i();
        let mut profiles = Vec::new();
        for fuse in [true, false] {
            let opts = if fuse {
                ScheduleOptions::default()
            } else {
                ScheduleOptions::unfused()
            };
            let s = schedule(&g, &opts).unwrap();
            let sim = SimProgram::compile(&s.program, &machine).unwrap();
            let peak = s.memory.peak_bytes() as u64;
            let p =
                profile_sim(&sim, &s.program, &g, std::slice::from_ref(&x), fuse, peak).unwrap();
            let cycles: u64 = p.kernels.iter().map(|k| k.cycles.unwrap()).sum();
            assert_eq!(p.total_cycles, Some(cycles));
            for k in &p.kernels {
                assert!(k.time_ns > 0.0);
                let d = k.sim.as_ref().unwrap();
                assert_eq!(d.pe_busy_cycles.len(), machine.pes());
                assert!(d.launch_cycles > 0 && d.launch_cycles < k.cycles.unwrap());
            }
            profiles.push(p);
        }
        let level_bytes = |p: &ScheduleProfile| -> Vec<Vec<u64>> {
            p.kernels.iter().map(|k| k.level_bytes.clone()).collect()
        };
        // Fused: the 64 KiB input in from LPDDR and the output back out.
        assert_eq!(level_bytes(&profiles[0]), [[131072, 0]]);
        // Unfused: the product goes to SRAM (it fits) and comes back from it.
        assert_eq!(level_bytes(&profiles[1]), [[65536, 65536], [65536, 65536]]);
        assert!(profiles[1].total_cycles > profiles[0].total_cycles);
        let r = machine_roofline(&machine);
        assert_eq!(r.levels[0].bytes_per_second, 204.8e9);
        // The fused kernel's least time: 128 KiB at 204.8 GB/s.
        let least = r.min_time_ns(&profiles[0].kernels[0].level_bytes);
        assert!((least - 131072.0 / 204.8).abs() < 1e-9);
    }
}

//! `ferrite profile --trace FILE.json`: the profile as a Chrome trace, for Perfetto
//! (ui.perfetto.dev) or `chrome://tracing`.
//!
//! The file is the Trace Event Format's JSON object form: `{"traceEvents": [...]}`
//! with complete events (`"ph": "X"`, times in microseconds) and metadata events
//! naming processes and threads. Each schedule is a process (`fused`, `unfused`),
//! both starting at time 0 so they line up for comparison:
//!
//! - on the CPU, the representative run's timeline (see [`KernelTrace`]): a `kernels`
//!   track with one slice per kernel at the time it really started, lasting what it
//!   took in that run, and one track per pool thread (`worker 0` is the thread that
//!   runs the program) with a slice for every chunk of a kernel that thread ran, at
//!   its real start and duration. Kernels without a recorded timeline (a report built
//!   by hand) fall back to a `main thread` track with the kernels laid back to back
//!   at their median times;
//! - on the simulator, kernels laid back to back on a `kernels` track with one slice per kernel, one track per PE
//!   with a slice for the cycles it was busy in each kernel (after the launch
//!   overhead), and one DMA track per memory level with a slice for the time the
//!   kernel's traffic at that level takes at the level's full bandwidth.
//!
//! A CPU kernel slice with a timeline also carries the median time over all runs
//! (`median_ns`). Every kernel slice carries its ops, bytes read and written, bandwidth and roofline
//! share as `args`, shown when the slice is selected.

use super::json::Json;
use super::report::{KernelTrace, ProfileReport, ProfileTarget, ScheduleProfile};

/// Track of the kernel slices (the main thread on the CPU).
const KERNEL_TID: u64 = 0;
/// First DMA track; level `i` is `DMA_TID + i`.
const DMA_TID: u64 = 1;
/// First PE track; PE `i` is `PE_TID + i`.
const PE_TID: u64 = 100;
/// First CPU worker track; worker `i` is `WORKER_TID + i`.
const WORKER_TID: u64 = 1000;

/// The report as a Chrome trace (see the module docs), ending in a newline.
pub fn chrome_trace(r: &ProfileReport) -> String {
    let mut events = Vec::new();
    for (pid, p) in [(1u64, &r.fused), (2, &r.unfused)] {
        schedule_events(r, pid, p, &mut events);
    }
    let other = Json::object([
        ("graph", Json::str(&r.graph)),
        ("target", Json::str(r.target.name())),
        ("speedup", Json::Num(r.speedup())),
    ]);
    // One event per line: readable, and far smaller than fully indented JSON.
    let mut out = String::from("{\"traceEvents\": [\n");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        e.write_compact(&mut out);
    }
    out.push_str("\n],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": ");
    other.write_compact(&mut out);
    out.push_str("}\n");
    out
}

fn metadata(name: &str, pid: u64, tid: Option<u64>, args: Json) -> Json {
    let mut fields = vec![
        ("name".to_string(), Json::str(name)),
        ("ph".to_string(), Json::str("M")),
        ("pid".to_string(), Json::int(pid)),
    ];
    if let Some(tid) = tid {
        fields.push(("tid".to_string(), Json::int(tid)));
    }
    fields.push(("args".to_string(), args));
    Json::Object(fields)
}

fn thread_name(pid: u64, tid: u64, name: &str) -> Json {
    metadata(
        "thread_name",
        pid,
        Some(tid),
        Json::object([("name", Json::str(name))]),
    )
}

/// A complete event (`"ph": "X"`) from `start_ns` lasting `dur_ns`.
fn slice(
    name: &str,
    cat: &str,
    pid: u64,
    tid: u64,
    start_ns: f64,
    dur_ns: f64,
    args: Json,
) -> Json {
    Json::object([
        ("name", Json::str(name)),
        ("cat", Json::str(cat)),
        ("ph", Json::str("X")),
        ("ts", Json::Num(start_ns / 1e3)),
        ("dur", Json::Num(dur_ns / 1e3)),
        ("pid", Json::int(pid)),
        ("tid", Json::int(tid)),
        ("args", args),
    ])
}

fn schedule_events(r: &ProfileReport, pid: u64, p: &ScheduleProfile, events: &mut Vec<Json>) {
    events.push(metadata(
        "process_name",
        pid,
        None,
        Json::object([(
            "name",
            Json::str(format!(
                "{} ({} kernels on {})",
                p.label(),
                p.kernels.len(),
                r.target.name()
            )),
        )]),
    ));
    events.push(metadata(
        "process_sort_index",
        pid,
        None,
        Json::object([("sort_index", Json::int(pid))]),
    ));
    let sim = r.target == ProfileTarget::Sim;
    let traced = p.kernels.iter().any(|k| k.trace.is_some());
    events.push(thread_name(
        pid,
        KERNEL_TID,
        if sim || traced {
            "kernels"
        } else {
            "main thread"
        },
    ));
    let workers = p
        .kernels
        .iter()
        .filter_map(|k| k.trace.as_ref())
        .flat_map(|t| t.chunks.iter().map(|c| c.worker + 1))
        .max()
        .unwrap_or(0);
    for w in 0..workers {
        let name = if w == 0 {
            "worker 0 (main thread)".to_string()
        } else {
            format!("worker {w}")
        };
        events.push(thread_name(pid, WORKER_TID + w as u64, &name));
    }
    let clock_ghz = r.machine.as_ref().map_or(1.0, |m| m.clock_ghz);
    let pes = p
        .kernels
        .iter()
        .filter_map(|k| k.sim.as_ref().map(|d| d.pe_busy_cycles.len()))
        .max()
        .unwrap_or(0);
    if sim {
        for (i, level) in r.roofline.levels.iter().enumerate() {
            events.push(thread_name(
                pid,
                DMA_TID + i as u64,
                &format!("DMA {}", level.name),
            ));
        }
        let cols = r.machine.as_ref().map_or(1, |m| m.pe_grid[1].max(1));
        for pe in 0..pes {
            events.push(thread_name(
                pid,
                PE_TID + pe as u64,
                &format!("PE {},{}", pe / cols, pe % cols),
            ));
        }
    }
    for (k, laid_out) in p.kernels.iter().zip(p.start_times_ns()) {
        let (start, duration) = match &k.trace {
            Some(t) => (t.start_ns, t.duration_ns),
            None => (laid_out, k.time_ns),
        };
        let ops: Vec<Json> = k
            .ops
            .iter()
            .map(|o| Json::str(format!("%{} {}", o.id, o.op)))
            .collect();
        let mut args = vec![
            ("ops".to_string(), Json::Array(ops)),
            ("bytes_read".to_string(), Json::int(k.bytes_read)),
            ("bytes_written".to_string(), Json::int(k.bytes_written)),
            ("bandwidth_GBps".to_string(), Json::Num(k.bandwidth() / 1e9)),
            (
                "roofline_share".to_string(),
                Json::Num(k.roofline_share(&r.roofline)),
            ),
            ("gemm".to_string(), Json::Bool(k.gemm)),
        ];
        if let Some(c) = k.cycles {
            args.push(("cycles".to_string(), Json::int(c)));
        }
        if k.trace.is_some() {
            args.push(("median_ns".to_string(), Json::Num(k.time_ns)));
        }
        events.push(slice(
            &k.name,
            "kernel",
            pid,
            KERNEL_TID,
            start,
            duration,
            Json::Object(args),
        ));
        if let Some(t) = &k.trace {
            chunk_events(&k.name, pid, t, events);
        }
        let Some(d) = &k.sim else { continue };
        let cycle_ns = 1.0 / clock_ghz;
        let busy_start = start + d.launch_cycles as f64 * cycle_ns;
        for (pe, &busy) in d.pe_busy_cycles.iter().enumerate() {
            if busy == 0 {
                continue;
            }
            events.push(slice(
                &k.name,
                "pe",
                pid,
                PE_TID + pe as u64,
                busy_start,
                busy as f64 * cycle_ns,
                Json::object([("busy_cycles", Json::int(busy))]),
            ));
        }
        for (i, (level, &b)) in r.roofline.levels.iter().zip(&k.level_bytes).enumerate() {
            if b == 0 || level.bytes_per_second <= 0.0 {
                continue;
            }
            events.push(slice(
                &k.name,
                "dma",
                pid,
                DMA_TID + i as u64,
                busy_start,
                b as f64 / level.bytes_per_second * 1e9,
                Json::object([("bytes", Json::int(b))]),
            ));
        }
    }
}

/// One slice per chunk of a CPU kernel, on the track of the thread that ran it.
fn chunk_events(name: &str, pid: u64, t: &KernelTrace, events: &mut Vec<Json>) {
    for c in &t.chunks {
        events.push(slice(
            name,
            "chunk",
            pid,
            WORKER_TID + c.worker as u64,
            c.start_ns,
            c.duration_ns,
            Json::object([("chunk", Json::int(c.chunk as u64))]),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;
    use serde_json::Value;

    fn events(text: &str) -> Vec<Value> {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        v["traceEvents"].as_array().unwrap().clone()
    }

    #[test]
    fn cpu_trace_has_a_slice_per_kernel_on_the_main_thread() {
        let r = sample_report(ProfileTarget::Cpu);
        let ev = events(&chrome_trace(&r));
        let slices: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 3);
        assert!(slices
            .iter()
            .all(|e| e["tid"] == KERNEL_TID && e["cat"] == "kernel"));
        // The unfused kernels: 1.2 us then 1.8 us, back to back, in microseconds.
        let relu = slices.iter().find(|e| e["name"] == "k1_relu").unwrap();
        assert_eq!(relu["pid"], 2);
        assert_eq!(relu["ts"].as_f64(), Some(1.2));
        assert_eq!(relu["dur"].as_f64(), Some(1.8));
        assert_eq!(relu["args"]["ops"][0], "%2 relu");
        assert_eq!(relu["args"]["bytes_written"], 4000);
        let names: Vec<&Value> = ev.iter().filter(|e| e["name"] == "process_name").collect();
        assert_eq!(names.len(), 2);
        assert_eq!(names[0]["args"]["name"], "fused (1 kernels on cpu)");
    }

    #[test]
    fn cpu_trace_with_timelines_has_a_track_per_worker() {
        use crate::report::ChunkSlice;
        let mut r = sample_report(ProfileTarget::Cpu);
        let chunk = |worker, chunk, start_ns, duration_ns| ChunkSlice {
            worker,
            chunk,
            start_ns,
            duration_ns,
        };
        r.unfused.kernels[1].trace = Some(KernelTrace {
            start_ns: 1500.0,
            duration_ns: 2000.0,
            chunks: vec![
                chunk(0, 1, 1500.0, 900.0),
                chunk(1, 0, 1510.0, 1000.0),
                chunk(0, 2, 2450.0, 1000.0),
            ],
        });
        let ev = events(&chrome_trace(&r));
        let tracks: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == 2)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tracks, ["kernels", "worker 0 (main thread)", "worker 1"]);
        // The kernel slice sits at its measured start, not back to back, and keeps its
        // args; the median time is an arg.
        let relu = ev
            .iter()
            .find(|e| e["cat"] == "kernel" && e["name"] == "k1_relu")
            .unwrap();
        assert_eq!(relu["tid"], KERNEL_TID);
        assert_eq!(relu["ts"].as_f64(), Some(1.5));
        assert_eq!(relu["dur"].as_f64(), Some(2.0));
        assert_eq!(relu["args"]["ops"][0], "%2 relu");
        assert_eq!(relu["args"]["bytes_written"], 4000);
        assert_eq!(relu["args"]["median_ns"].as_f64(), Some(1800.0));
        let chunks: Vec<(u64, f64, f64, u64)> = ev
            .iter()
            .filter(|e| e["cat"] == "chunk")
            .map(|e| {
                assert_eq!(e["name"], "k1_relu");
                assert_eq!(e["pid"], 2);
                (
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                    e["args"]["chunk"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            chunks,
            [
                (WORKER_TID, 1.5, 0.9, 1),
                (WORKER_TID + 1, 1.51, 1.0, 0),
                (WORKER_TID, 2.45, 1.0, 2)
            ]
        );
        // The fused schedule has no timeline: the old main-thread track.
        let fused: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == 1)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(fused, ["main thread"]);
    }

    #[test]
    fn sim_trace_has_pe_and_dma_tracks() {
        let r = sample_report(ProfileTarget::Sim);
        let ev = events(&chrome_trace(&r));
        let tracks: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == 1)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tracks,
            ["kernels", "DMA lpddr", "DMA sram", "PE 0,0", "PE 0,1"]
        );
        // k1_relu of the unfused schedule starts at 1200 cycles of 1 ns; its PEs start
        // after the 100-cycle launch overhead.
        let on = |tid: u64| {
            ev.iter()
                .find(|e| {
                    e["ph"] == "X" && e["pid"] == 2 && e["tid"] == tid && e["name"] == "k1_relu"
                })
                .unwrap()
        };
        assert_eq!(on(KERNEL_TID)["ts"].as_f64(), Some(1.2));
        assert_eq!(on(PE_TID + 1)["ts"].as_f64(), Some(1.3));
        assert_eq!(on(PE_TID + 1)["dur"].as_f64(), Some(1.4));
        // 8000 LPDDR bytes at 16 GB/s take 500 ns; nothing moved at SRAM, no slice.
        assert_eq!(on(DMA_TID)["dur"].as_f64(), Some(0.5));
        assert!(!ev.iter().any(|e| e["tid"] == DMA_TID + 1 && e["ph"] == "X"));
    }
}

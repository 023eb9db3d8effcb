//! `ferrite profile`'s human-readable report: a table per schedule, then totals, and
//! as the last line `fused vs unfused: X.XXx`.
//!
//! ```text
//! profile of softmax_rows on cpu: 2 threads, median of 10 runs after a warm-up
//! roofline: dram 11.52 GB/s (memcpy of 64 MiB on 2 threads)
//!
//! fused: 1 kernel
//!   #  kernel                 ops                      time   share      read   written  bandwidth  roofline
//!   0  k0_div_max_sub_exp...  %1 div %2 max %3 sub…  21.3 us  100.0%  256.0 KiB  256.0 KiB  24.6 GB/s   213.6%
//! ...
//! fused vs unfused: 2.41x
//! ```
//!
//! A roofline share above 100% on the CPU means the kernel's data came from cache,
//! which is faster than the DRAM copy bandwidth the share is relative to.

use super::report::{KernelProfile, ProfileReport, ProfileTarget, ScheduleProfile};
use std::fmt::Write;

/// Widest kernel name shown; longer ones are cut with `…` (the JSON has them whole).
const NAME_WIDTH: usize = 32;
/// Widest ops list shown.
const OPS_WIDTH: usize = 40;

/// The report as a table (see the module docs), ending in a newline.
pub fn render_table(r: &ProfileReport) -> String {
    let mut s = String::new();
    let _ = match r.target {
        ProfileTarget::Cpu => writeln!(
            s,
            "profile of {} on cpu: {}, median of {} after a warm-up",
            r.graph,
            plural(r.threads.unwrap_or(1), "thread"),
            plural(r.runs, "run")
        ),
        ProfileTarget::Sim => {
            let m = r.machine.as_ref();
            writeln!(
                s,
                "profile of {} on sim: {} ({}x{} PEs at {} GHz), simulated cycles",
                r.graph,
                m.map_or("?", |m| m.name.as_str()),
                m.map_or(0, |m| m.pe_grid[0]),
                m.map_or(0, |m| m.pe_grid[1]),
                m.map_or(0.0, |m| m.clock_ghz)
            )
        }
    };
    let levels: Vec<String> = r
        .roofline
        .levels
        .iter()
        .map(|l| format!("{} {}", l.name, bandwidth(l.bytes_per_second)))
        .collect();
    let _ = writeln!(
        s,
        "roofline: {} ({})",
        levels.join(", "),
        r.roofline.description
    );
    for sched in [&r.fused, &r.unfused] {
        s.push('\n');
        schedule_table(&mut s, r, sched);
    }
    s.push('\n');
    let total = |p: &ScheduleProfile| match p.total_cycles {
        Some(c) => format!("{c} cycles ({})", duration(p.total_ns)),
        None => duration(p.total_ns),
    };
    let _ = writeln!(
        s,
        "total time: fused {} in {}, unfused {} in {}",
        total(&r.fused),
        plural(r.fused.kernels.len(), "kernel"),
        total(&r.unfused),
        plural(r.unfused.kernels.len(), "kernel")
    );
    if let (Some(f), Some(u)) = (r.fused.wall_ns, r.unfused.wall_ns) {
        let _ = writeln!(
            s,
            "whole run (with buffer setup): fused {}, unfused {}",
            duration(f),
            duration(u)
        );
    }
    let moved = |p: &ScheduleProfile| bytes(p.bytes_read() + p.bytes_written());
    let _ = writeln!(
        s,
        "bytes moved: fused {}, unfused {}",
        moved(&r.fused),
        moved(&r.unfused)
    );
    let _ = writeln!(
        s,
        "peak intermediate memory: fused {}, unfused {}",
        bytes(r.fused.peak_intermediate_bytes),
        bytes(r.unfused.peak_intermediate_bytes)
    );
    let _ = writeln!(s, "fused vs unfused: {:.2}x", r.speedup());
    s
}

/// One schedule's header line, column titles, kernel rows and total row.
fn schedule_table(s: &mut String, r: &ProfileReport, p: &ScheduleProfile) {
    let _ = writeln!(s, "{}: {}", p.label(), plural(p.kernels.len(), "kernel"));
    let sim = r.target == ProfileTarget::Sim;
    let name_w = p
        .kernels
        .iter()
        .map(|k| k.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp("kernel".len(), NAME_WIDTH);
    let ops_w = p
        .kernels
        .iter()
        .map(|k| ops_text(k).chars().count())
        .max()
        .unwrap_or(0)
        .clamp("ops".len(), OPS_WIDTH);
    let mut head = format!("  {:>3}  {:<name_w$}  {:<ops_w$}", "#", "kernel", "ops");
    if sim {
        head.push_str(&format!("  {:>10}", "cycles"));
    }
    head.push_str(&format!(
        "  {:>10}  {:>6}  {:>10}  {:>10}",
        "time", "share", "read", "written"
    ));
    if sim {
        head.push_str(&format!("  {:>10}  {:>10}", "LPDDR", "SRAM"));
    }
    head.push_str(&format!("  {:>11}  {:>8}", "bandwidth", "roofline"));
    if sim {
        head.push_str(&format!("  {:>7}", "PE busy"));
    }
    let _ = writeln!(s, "{}", head.trim_end());
    for k in &p.kernels {
        let mut row = format!(
            "  {:>3}  {:<name_w$}  {:<ops_w$}",
            k.index,
            cut(&k.name, name_w),
            cut(&ops_text(k), ops_w)
        );
        if sim {
            row.push_str(&format!("  {:>10}", k.cycles.unwrap_or(0)));
        }
        row.push_str(&format!(
            "  {:>10}  {:>6}  {:>10}  {:>10}",
            duration(k.time_ns),
            percent(share(k.time_ns, p.total_ns)),
            bytes(k.bytes_read),
            bytes(k.bytes_written)
        ));
        if sim {
            let level = |i: usize| bytes(k.level_bytes.get(i).copied().unwrap_or(0));
            row.push_str(&format!("  {:>10}  {:>10}", level(0), level(1)));
        }
        row.push_str(&format!(
            "  {:>11}  {:>8}",
            bandwidth(k.bandwidth()),
            percent(k.roofline_share(&r.roofline))
        ));
        if sim {
            row.push_str(&format!("  {:>7}", percent(pe_busy(k))));
        }
        let _ = writeln!(s, "{}", row.trim_end());
    }
    let mut total = format!("  {:>3}  {:<name_w$}  {:<ops_w$}", "", "total", "");
    if sim {
        total.push_str(&format!("  {:>10}", p.total_cycles.unwrap_or(0)));
    }
    total.push_str(&format!(
        "  {:>10}  {:>6}  {:>10}  {:>10}",
        duration(p.total_ns),
        "",
        bytes(p.bytes_read()),
        bytes(p.bytes_written())
    ));
    let moved = p.bytes_read() + p.bytes_written();
    if sim {
        let levels = p.level_bytes();
        let level = |i: usize| bytes(levels.get(i).copied().unwrap_or(0));
        total.push_str(&format!("  {:>10}  {:>10}", level(0), level(1)));
    }
    let achieved = if p.total_ns > 0.0 {
        moved as f64 / (p.total_ns * 1e-9)
    } else {
        0.0
    };
    total.push_str(&format!(
        "  {:>11}  {:>8}",
        bandwidth(achieved),
        percent(share(r.roofline.min_time_ns(&p.level_bytes()), p.total_ns))
    ));
    let _ = writeln!(s, "{}", total.trim_end());
}

/// `%13 sum %15 mul …`: the kernel's ops with their graph ids.
fn ops_text(k: &KernelProfile) -> String {
    k.ops
        .iter()
        .map(|o| format!("%{} {}", o.id, o.op))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The mean fraction of the kernel's cycles its PEs were busy.
fn pe_busy(k: &KernelProfile) -> f64 {
    let (Some(d), Some(c)) = (&k.sim, k.cycles) else {
        return 0.0;
    };
    if d.pe_busy_cycles.is_empty() || c == 0 {
        return 0.0;
    }
    let mean = d.pe_busy_cycles.iter().sum::<u64>() as f64 / d.pe_busy_cycles.len() as f64;
    mean / c as f64
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

/// `s` cut to `width` characters, ending in `…` when cut.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// `1 kernel`, `3 kernels`.
fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `850 ns`, `12.34 us`, `5.67 ms`, `1.23 s`.
pub(crate) fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// `512 B`, `64.0 KiB`, `3.00 MiB`, `1.00 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    let v = n as f64;
    if n < 1 << 10 {
        format!("{n} B")
    } else if n < 1 << 20 {
        format!("{:.1} KiB", v / (1u64 << 10) as f64)
    } else if n < 1 << 30 {
        format!("{:.2} MiB", v / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", v / (1u64 << 30) as f64)
    }
}

/// `850 MB/s`, `12.3 GB/s`, `2.70 TB/s` (decimal units, as bandwidth is quoted).
pub(crate) fn bandwidth(bytes_per_second: f64) -> String {
    let v = bytes_per_second;
    if v >= 1e12 {
        format!("{:.2} TB/s", v / 1e12)
    } else if v >= 1e9 {
        format!("{:.1} GB/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.0} MB/s", v / 1e6)
    } else {
        format!("{:.0} kB/s", v / 1e3)
    }
}

fn percent(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn units() {
        assert_eq!(duration(850.0), "850 ns");
        assert_eq!(duration(12_345.0), "12.35 us");
        assert_eq!(duration(5.5e6), "5.50 ms");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(65536), "64.0 KiB");
        assert_eq!(bytes(3 << 20), "3.00 MiB");
        assert_eq!(bandwidth(12.34e9), "12.3 GB/s");
        assert_eq!(bandwidth(2.7e12), "2.70 TB/s");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }

    #[test]
    fn cpu_table_rows_totals_and_last_line() {
        let text = render_table(&sample_report(ProfileTarget::Cpu));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.last(), Some(&"fused vs unfused: 3.00x"), "{text}");
        assert!(lines[0].contains("2 threads, median of 3 runs"), "{text}");
        assert!(text.contains("fused: 1 kernel\n"), "{text}");
        assert!(text.contains("unfused: 2 kernels\n"), "{text}");
        // k1_relu: 1800 of 3000 ns is 60%; 8000 B in 1.8 us is 4.4 GB/s, 27.8% of 16 GB/s.
        let row = lines.iter().find(|l| l.contains("k1_relu")).unwrap();
        for cell in ["%2 relu", "1.80 us", "60.0%", "4.4 GB/s", "27.8%"] {
            assert!(row.contains(cell), "{cell} not in {row}");
        }
        assert!(text.contains("peak intermediate memory: fused 0 B, unfused 4.0 KiB"));
        assert!(
            text.contains("total time: fused 1.00 us in 1 kernel, unfused 3.00 us in 2 kernels")
        );
        assert!(text.contains("whole run (with buffer setup): fused 1.50 us, unfused 3.60 us"));
        // Every row of a table has the header's width (columns line up).
        let head = lines
            .iter()
            .position(|l| l.trim_start().starts_with("#"))
            .unwrap();
        let width = lines[head].chars().count();
        assert_eq!(lines[head + 1].chars().count(), width, "{text}");
    }

    #[test]
    fn sim_table_has_cycles_levels_and_pe_busy() {
        let text = render_table(&sample_report(ProfileTarget::Sim));
        assert!(text.starts_with("profile of g on sim: test machine (1x2 PEs at 1 GHz)"));
        let row = text.lines().find(|l| l.contains("k1_relu")).unwrap();
        // Busy 1500 and 1400 of 1800 cycles: a mean of 80.6%.
        for cell in ["1800", "7.8 KiB", "80.6%"] {
            assert!(row.contains(cell), "{cell} not in {row}");
        }
        assert!(text.contains("total time: fused 1000 cycles (1.00 us)"));
        assert!(text.ends_with("fused vs unfused: 3.00x\n"));
    }
}

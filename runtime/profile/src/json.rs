//! `ferrite profile --format json`: the report for machines.
//!
//! The format is stable: fields are only ever added, never renamed or removed, and
//! `version` changes if a field ever has to change meaning. Keys appear in the order
//! below. Times are nanoseconds (floats), byte counts are integers, shares are
//! fractions (0.5 is 50%). A field that does not apply to the target is `null`.
//!
//! ```text
//! {
//!   "format": "ferrite-profile",
//!   "version": 1,
//!   "graph": "transformer_block",          graph name
//!   "target": "cpu",                       "cpu" or "sim"
//!   "runs": 10,                            timed runs per schedule, after one warm-up (sim: 1)
//!   "threads": 2,                          CPU threads (sim: null)
//!   "machine": null,                       sim: {"name", "clock_ghz", "pe_rows", "pe_cols"}
//!   "roofline": {
//!     "description": "...",
//!     "levels": [{"name": "dram", "bytes_per_second": 1.2e10}]   sim: lpddr, sram
//!   },
//!   "schedules": {"fused": SCHEDULE, "unfused": SCHEDULE},
//!   "speedup": 3.7                         unfused total_ns / fused total_ns
//! }
//! SCHEDULE = {
//!   "kernel_count": 11,
//!   "total_ns": 123456.0,                  time in kernels (CPU: median over runs of the per-run sum)
//!   "total_cycles": null,                  sim: simulated cycles of all launches
//!   "wall_ns": 130000.0,                   CPU: median time of a whole run (sim: null)
//!   "bytes_read": 1048576,
//!   "bytes_written": 262144,
//!   "peak_intermediate_bytes": 393216,     the memory plan's arena for intermediates
//!   "kernels": [KERNEL, ...]               in execution order
//! }
//! KERNEL = {
//!   "index": 0,
//!   "name": "k0_sum_mul_sub_add_rsqrt",
//!   "ops": [{"id": 13, "op": "sum", "name": null}, ...],   graph nodes fused into it
//!   "start_ns": 0.0,                       start when kernels are laid back to back
//!   "time_ns": 12345.0,                    CPU: median over runs; sim: simulated
//!   "cycles": null,                        sim: simulated cycles
//!   "bytes_read": 65536,
//!   "bytes_written": 65536,
//!   "level_bytes": {"dram": 131072},       bytes per roofline level (sim: lpddr, sram)
//!   "bandwidth_bytes_per_second": 1.06e10, achieved: (read + written) / time
//!   "roofline_share": 0.88,                least memory time at the roofline / time
//!   "gemm": false,                         the product ran on a GEMM / dot engines
//!   "sim": null                            sim: {"launches", "programs", "launch_cycles",
//!                                                "dot_flops", "pe_busy_cycles": [..]}
//! }
//! ```

use super::report::{KernelProfile, ProfileReport, ScheduleProfile};
use std::fmt::Write;

/// The `version` field of the format described in the module docs.
pub const FORMAT_VERSION: u64 = 1;

/// A JSON value whose objects keep their keys in insertion order, so the report's
/// fields appear in the documented order.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// An integer, written exactly.
    Int(i128),
    /// A float; NaN and infinities (which JSON cannot represent) are written as `null`.
    Num(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs.
    pub(crate) fn object<const N: usize>(fields: [(&str, Json); N]) -> Json {
        Json::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    pub(crate) fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    pub(crate) fn int(v: impl Into<i128>) -> Json {
        Json::Int(v.into())
    }

    pub(crate) fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Json) -> Json {
        v.map_or(Json::Null, f)
    }

    /// Writes the value with two-space indentation; arrays of scalars stay on one line.
    pub(crate) fn write_pretty(&self, out: &mut String, indent: usize) {
        match self {
            Json::Array(items) if items.iter().all(Json::is_scalar) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_pretty(out, indent);
                }
                out.push(']');
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    item.write_pretty(out, indent + 1);
                }
                if !items.is_empty() {
                    out.push('\n');
                    pad(out, indent);
                }
                out.push(']');
            }
            Json::Object(fields) if fields.is_empty() => out.push_str("{}"),
            Json::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    write_string(out, k);
                    out.push_str(": ");
                    v.write_pretty(out, indent + 1);
                }
                out.push('\n');
                pad(out, indent);
                out.push('}');
            }
            scalar => scalar.write_compact(out),
        }
    }

    /// Writes the value on one line without spaces.
    pub(crate) fn write_compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Num(v) => write_number(out, *v),
            Json::Str(s) => write_string(out, s),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k);
                    out.push(':');
                    v.write_compact(out);
                }
                out.push('}');
            }
        }
    }

    /// True for values printed without nesting (objects and arrays print nested).
    fn is_scalar(&self) -> bool {
        !matches!(self, Json::Array(_) | Json::Object(_))
    }
}

fn pad(out: &mut String, indent: usize) {
    for _ in 0..indent {
        out.push_str("  ");
    }
}

/// A finite float in the shortest form that reads back exactly; `null` otherwise.
fn write_number(out: &mut String, v: f64) {
    if !v.is_finite() {
        out.push_str("null");
    } else if v == v.trunc() && v.abs() < 1e15 {
        // Keep a float visibly a float (`12.0`), as readers that type numbers expect.
        let _ = write!(out, "{v:.1}");
    } else if (1e-6..1e15).contains(&v.abs()) {
        // Plain decimals (`16.73`) where they stay short.
        let _ = write!(out, "{v}");
    } else {
        // Scientific notation (`1.5e-7`) rather than hundreds of digits.
        let _ = write!(out, "{v:e}");
    }
}

/// A JSON string literal: quotes, backslashes and control characters escaped.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The report as JSON text in the format of the module docs, ending in a newline.
pub fn to_json(r: &ProfileReport) -> String {
    let machine = Json::opt(r.machine.as_ref(), |m| {
        Json::object([
            ("name", Json::str(&m.name)),
            ("clock_ghz", Json::Num(m.clock_ghz)),
            ("pe_rows", Json::int(m.pe_grid[0] as u64)),
            ("pe_cols", Json::int(m.pe_grid[1] as u64)),
        ])
    });
    let levels = r
        .roofline
        .levels
        .iter()
        .map(|l| {
            Json::object([
                ("name", Json::str(&l.name)),
                ("bytes_per_second", Json::Num(l.bytes_per_second)),
            ])
        })
        .collect();
    let doc = Json::object([
        ("format", Json::str("ferrite-profile")),
        ("version", Json::int(FORMAT_VERSION)),
        ("graph", Json::str(&r.graph)),
        ("target", Json::str(r.target.name())),
        ("runs", Json::int(r.runs as u64)),
        ("threads", Json::opt(r.threads, |t| Json::int(t as u64))),
        ("machine", machine),
        (
            "roofline",
            Json::object([
                ("description", Json::str(&r.roofline.description)),
                ("levels", Json::Array(levels)),
            ]),
        ),
        (
            "schedules",
            Json::object([
                ("fused", schedule(r, &r.fused)),
                ("unfused", schedule(r, &r.unfused)),
            ]),
        ),
        ("speedup", Json::Num(r.speedup())),
    ]);
    let mut out = String::new();
    doc.write_pretty(&mut out, 0);
    out.push('\n');
    out
}

fn schedule(r: &ProfileReport, s: &ScheduleProfile) -> Json {
    let starts = s.start_times_ns();
    Json::object([
        ("kernel_count", Json::int(s.kernels.len() as u64)),
        ("total_ns", Json::Num(s.total_ns)),
        ("total_cycles", Json::opt(s.total_cycles, Json::int)),
        ("wall_ns", Json::opt(s.wall_ns, Json::Num)),
        ("bytes_read", Json::int(s.bytes_read())),
        ("bytes_written", Json::int(s.bytes_written())),
        (
            "peak_intermediate_bytes",
            Json::int(s.peak_intermediate_bytes),
        ),
        (
            "kernels",
            Json::Array(
                s.kernels
                    .iter()
                    .zip(starts)
                    .map(|(k, start)| kernel(r, k, start))
                    .collect(),
            ),
        ),
    ])
}

fn kernel(r: &ProfileReport, k: &KernelProfile, start_ns: f64) -> Json {
    let ops = k
        .ops
        .iter()
        .map(|o| {
            Json::object([
                ("id", Json::int(o.id)),
                ("op", Json::str(&o.op)),
                ("name", Json::opt(o.name.as_ref(), Json::str)),
            ])
        })
        .collect();
    let level_bytes = Json::Object(
        r.roofline
            .levels
            .iter()
            .zip(&k.level_bytes)
            .map(|(l, &b)| (l.name.clone(), Json::int(b)))
            .collect(),
    );
    let sim = Json::opt(k.sim.as_ref(), |d| {
        Json::object([
            ("launches", Json::int(d.launches as u64)),
            ("programs", Json::int(d.programs as u64)),
            ("launch_cycles", Json::int(d.launch_cycles)),
            ("dot_flops", Json::int(d.dot_flops)),
            (
                "pe_busy_cycles",
                Json::Array(d.pe_busy_cycles.iter().map(|&c| Json::int(c)).collect()),
            ),
        ])
    });
    Json::object([
        ("index", Json::int(k.index as u64)),
        ("name", Json::str(&k.name)),
        ("ops", Json::Array(ops)),
        ("start_ns", Json::Num(start_ns)),
        ("time_ns", Json::Num(k.time_ns)),
        ("cycles", Json::opt(k.cycles, Json::int)),
        ("bytes_read", Json::int(k.bytes_read)),
        ("bytes_written", Json::int(k.bytes_written)),
        ("level_bytes", level_bytes),
        ("bandwidth_bytes_per_second", Json::Num(k.bandwidth())),
        ("roofline_share", Json::Num(k.roofline_share(&r.roofline))),
        ("gemm", Json::Bool(k.gemm)),
        ("sim", sim),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;
    use crate::report::ProfileTarget;
    use serde_json::Value;

    #[test]
    fn scalars_and_escapes() {
        let mut s = String::new();
        Json::Array(vec![
            Json::Null,
            Json::Bool(true),
            Json::Int(-3),
            Json::Num(12.0),
            Json::Num(1.5e-7),
            Json::Num(16.73),
            Json::Num(f64::NAN),
            Json::str("a\"b\\c\n\u{1}é"),
        ])
        .write_compact(&mut s);
        assert_eq!(
            s,
            r#"[null,true,-3,12.0,1.5e-7,16.73,null,"a\"b\\c\n\u0001é"]"#
        );
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v[4].as_f64(), Some(1.5e-7));
        assert_eq!(v[7].as_str(), Some("a\"b\\c\n\u{1}é"));
    }

    #[test]
    fn numbers_round_trip_through_a_json_parser() {
        for x in [
            0.0,
            1.0,
            -2.5,
            1e-300,
            123456.789,
            0.1 + 0.2,
            1e20,
            f64::MAX,
            5e-324,
            2e-6,
        ] {
            let mut s = String::new();
            write_number(&mut s, x);
            let back: f64 = serde_json::from_str(&s).unwrap();
            assert_eq!(back, x, "{s}");
        }
    }

    #[test]
    fn report_has_the_documented_fields_and_values() {
        for target in [ProfileTarget::Cpu, ProfileTarget::Sim] {
            let r = sample_report(target);
            let text = to_json(&r);
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(v["format"], "ferrite-profile");
            assert_eq!(v["version"], 1);
            assert_eq!(v["target"], target.name());
            assert_eq!(v["speedup"].as_f64(), Some(3.0));
            let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
            keys.sort_unstable();
            let mut expected = [
                "format",
                "version",
                "graph",
                "target",
                "runs",
                "threads",
                "machine",
                "roofline",
                "schedules",
                "speedup",
            ];
            expected.sort_unstable();
            assert_eq!(keys, expected);
            // Keys are written in the documented order.
            assert!(text.find("\"format\"") < text.find("\"speedup\""));
            let unfused = &v["schedules"]["unfused"];
            assert_eq!(unfused["kernel_count"], 2);
            assert_eq!(unfused["total_ns"].as_f64(), Some(3000.0));
            assert_eq!(unfused["peak_intermediate_bytes"], 4096);
            let k1 = &unfused["kernels"][1];
            assert_eq!(k1["name"], "k1_relu");
            assert_eq!(k1["start_ns"].as_f64(), Some(1200.0));
            assert_eq!(k1["ops"][0]["id"], 2);
            assert_eq!(k1["ops"][0]["name"], "y \"quoted\"");
            // 8000 B in 1800 ns.
            let bw = k1["bandwidth_bytes_per_second"].as_f64().unwrap();
            assert!((bw - 8000.0 / 1.8e-6).abs() < 1.0);
            match target {
                ProfileTarget::Cpu => {
                    assert_eq!(v["threads"], 2);
                    assert!(v["machine"].is_null() && k1["sim"].is_null());
                    assert_eq!(k1["level_bytes"]["dram"], 8000);
                    assert_eq!(unfused["wall_ns"].as_f64(), Some(3600.0));
                }
                ProfileTarget::Sim => {
                    assert!(v["threads"].is_null());
                    assert_eq!(v["machine"]["pe_cols"], 2);
                    assert_eq!(k1["cycles"], 1800);
                    assert_eq!(k1["level_bytes"]["sram"], 0);
                    assert_eq!(k1["sim"]["pe_busy_cycles"][1], 1400);
                    assert!(unfused["wall_ns"].is_null());
                }
            }
        }
    }
}

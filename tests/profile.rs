//! End-to-end tests of `ferrite profile` (table, JSON, Chrome trace) and of the
//! `graph.dot` that `ferrite compile --dump` writes.
//!
//! Kernel lists are checked against `ferrite compile`, an independent reading of the
//! same pipeline: its summary counts the kernels and its dump names them.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

mod common;
use common::{assert_exit, examples, ferrite, stderr, stdout, Scratch};

/// True when `line` is `fused vs unfused: <digits>.<two digits>x`.
fn is_speedup_line(line: &str) -> bool {
    let Some(num) = line
        .strip_prefix("fused vs unfused: ")
        .and_then(|r| r.strip_suffix('x'))
    else {
        return false;
    };
    let Some((int, frac)) = num.split_once('.') else {
        return false;
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.len() == 2
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// The kernel names of the fused and the unfused schedule, from `ferrite compile
/// --dump` (each kernel's line in the loop-IR dump starts with `kernel NAME(`).
fn compiled_kernels(file: &str, scratch: &Scratch) -> [Vec<String>; 2] {
    let mut out = [Vec::new(), Vec::new()];
    for (i, flags) in [&[][..], &["--no-fuse"][..]].into_iter().enumerate() {
        let dir = PathBuf::from(scratch.path(&format!("dump{i}")));
        let dir_s = dir.to_str().unwrap();
        let mut args = vec!["compile", file, "--dump", dir_s];
        args.extend(flags);
        let o = ferrite(&args);
        assert_exit(&o, 0);
        let kernels = std::fs::read_to_string(dir.join("03-kernels.loop")).unwrap();
        out[i] = kernels
            .lines()
            .filter_map(|l| l.strip_prefix("kernel "))
            .map(|l| l.split('(').next().unwrap().to_string())
            .collect();
    }
    out
}

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{text}"))
}

#[test]
fn the_speedup_line_format() {
    assert!(is_speedup_line("fused vs unfused: 3.70x"));
    assert!(is_speedup_line("fused vs unfused: 12.00x"));
    assert!(!is_speedup_line("fused vs unfused: 3.7x"));
    assert!(!is_speedup_line("fused vs unfused: .70x"));
    assert!(!is_speedup_line("fused vs unfused: 3.70"));
}

#[test]
fn every_example_profiles_on_cpu() {
    for file in examples() {
        let o = ferrite(&["profile", &file, "--target", "cpu", "--runs", "2"]);
        assert_exit(&o, 0);
        let text = stdout(&o);
        let last = text.lines().last().unwrap_or("");
        assert!(
            is_speedup_line(last),
            "{file}: last line `{last}` in\n{text}"
        );
        for part in ["fused: ", "unfused: ", "peak intermediate memory: fused "] {
            assert!(text.contains(part), "{file}: no `{part}` in\n{text}");
        }
        // Standard error is a pipe here, so no progress output.
        assert_eq!(stderr(&o), "", "{file}");
    }
}

#[test]
fn every_example_profiles_on_sim() {
    for file in examples() {
        let o = ferrite(&["profile", &file, "--target", "sim", "--format", "json"]);
        assert_exit(&o, 0);
        let v = parse_json(&stdout(&o));
        assert_eq!(v["target"], "sim", "{file}");
        assert_eq!(v["machine"]["name"], "mtia2i");
        for label in ["fused", "unfused"] {
            let s = &v["schedules"][label];
            let mut cycles = 0;
            for k in s["kernels"].as_array().unwrap() {
                let c = k["cycles"].as_u64().unwrap();
                // A GEMM run in an earlier kernel's launch (GEMMs sharing their
                // lhs) has a row of zeros; that launch's row counts it.
                if label == "fused" && k["sim"]["launches"].as_u64() == Some(0) {
                    assert_eq!(c, 0, "{file} {k}");
                    continue;
                }
                assert!(c > 0 && k["time_ns"].as_f64().unwrap() > 0.0, "{file} {k}");
                assert_eq!(k["sim"]["pe_busy_cycles"].as_array().unwrap().len(), 64);
                cycles += c;
            }
            assert_eq!(s["total_cycles"].as_u64(), Some(cycles), "{file} {label}");
        }
    }
    // The table form, once: simulated cycles, the speedup line last.
    let o = ferrite(&["profile", "examples/softmax_rows.fg", "--target", "sim"]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with("profile of softmax_rows on sim: mtia2i"),
        "{text}"
    );
    assert!(is_speedup_line(text.lines().last().unwrap()), "{text}");
}

#[test]
fn sim_is_deterministic() {
    let run = |extra: &[&str]| {
        let mut args = vec!["profile", "examples/mlp.fg", "--target", "sim"];
        args.extend(extra);
        let o = ferrite(&args);
        assert_exit(&o, 0);
        stdout(&o)
    };
    assert_eq!(run(&[]), run(&[]));
    // The built-in machine is the preset file's.
    assert_eq!(
        run(&["--machine", "runtime/accel/presets/mtia2i.toml"]),
        run(&[])
    );
}

#[test]
fn json_report_has_every_kernel_with_positive_times() {
    let scratch = Scratch::new("json");
    for file in [
        "examples/softmax_rows.fg",
        "examples/mlp.fg",
        "examples/transformer_block.fg",
    ] {
        let o = ferrite(&[
            "profile",
            file,
            "--runs",
            "2",
            "--threads",
            "2",
            "--format",
            "json",
        ]);
        assert_exit(&o, 0);
        let v = parse_json(&stdout(&o));
        assert_eq!(v["format"], "ferrite-profile");
        assert_eq!(v["version"], 1);
        assert_eq!(v["target"], "cpu");
        assert_eq!(v["runs"], 2);
        assert_eq!(v["threads"], 2);
        let [fused, unfused] = compiled_kernels(file, &scratch);
        let mut totals = [0.0; 2];
        for (i, (label, expected)) in [("fused", &fused), ("unfused", &unfused)]
            .into_iter()
            .enumerate()
        {
            let s = &v["schedules"][label];
            let kernels = s["kernels"].as_array().unwrap();
            let names: Vec<&str> = kernels
                .iter()
                .map(|k| k["name"].as_str().unwrap())
                .collect();
            assert_eq!(&names, expected, "{file} {label}");
            assert_eq!(s["kernel_count"].as_u64(), Some(kernels.len() as u64));
            let mut read = 0;
            for (j, k) in kernels.iter().enumerate() {
                assert_eq!(k["index"].as_u64(), Some(j as u64));
                let t = k["time_ns"].as_f64().unwrap();
                assert!(t > 0.0, "{file} {label} {}: time {t}", names[j]);
                assert!(!k["ops"].as_array().unwrap().is_empty(), "{}", names[j]);
                assert!(k["roofline_share"].as_f64().unwrap() >= 0.0);
                read += k["bytes_read"].as_u64().unwrap();
            }
            assert_eq!(s["bytes_read"].as_u64(), Some(read), "{file} {label}");
            totals[i] = s["total_ns"].as_f64().unwrap();
            assert!(totals[i] > 0.0);
        }
        let speedup = v["speedup"].as_f64().unwrap();
        assert!((speedup - totals[1] / totals[0]).abs() < 1e-9 * speedup);
        // Fusion removes intermediates and refuses merges that raise the peak of live
        // ones (`raises-peak-memory`), so the fused peak is at most the unfused one.
        let peak = |l: &str| {
            v["schedules"][l]["peak_intermediate_bytes"]
                .as_u64()
                .unwrap()
        };
        assert!(peak("fused") <= peak("unfused"), "{file}");
    }
}

#[test]
fn trace_is_a_chrome_trace_with_a_slice_per_kernel_and_a_track_per_worker() {
    let scratch = Scratch::new("trace");
    let trace = PathBuf::from(scratch.path("trace.json"));
    let file = "examples/layer_norm_rows.fg";
    let o = ferrite(&[
        "profile",
        file,
        "--runs",
        "2",
        "--format",
        "json",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_exit(&o, 0);
    let report = parse_json(&stdout(&o));
    let t = parse_json(&std::fs::read_to_string(&trace).unwrap());
    let events = t["traceEvents"].as_array().expect("a traceEvents array");
    for e in events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        assert!(ph == "X" || ph == "M", "{e}");
        assert!(e["name"].is_string() && e["pid"].is_u64(), "{e}");
    }
    for (pid, label) in [(1, "fused"), (2, "unfused")] {
        let slices: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "kernel")
            .collect();
        let kernels = report["schedules"][label]["kernels"].as_array().unwrap();
        assert_eq!(slices.len(), kernels.len(), "{label}");
        // Worker tracks, by tid: the chunks each pool thread ran.
        let workers: Vec<u64> = events
            .iter()
            .filter(|e| {
                e["name"] == "thread_name"
                    && e["pid"] == pid
                    && e["args"]["name"].as_str().unwrap().starts_with("worker ")
            })
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert!(!workers.is_empty(), "{label}: no worker tracks");
        let chunks: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "chunk")
            .collect();
        // Times are microseconds printed from nanoseconds: allow for rounding.
        let eps = 1e-3;
        let mut end = 0.0;
        for (s, k) in slices.iter().zip(kernels) {
            assert_eq!(s["name"], k["name"]);
            assert_eq!(s["args"]["bytes_read"], k["bytes_read"]);
            assert_eq!(
                s["args"]["ops"].as_array().unwrap().len(),
                k["ops"].as_array().unwrap().len()
            );
            let (ts, dur) = (s["ts"].as_f64().unwrap(), s["dur"].as_f64().unwrap());
            assert!(dur > 0.0, "{s}");
            // At the measured start, in run order, never overlapping the previous one.
            assert!(ts + eps >= end, "{s} starts before {end}");
            assert_eq!(s["args"]["median_ns"], k["time_ns"], "{s}");
            end = ts + dur;
            // Each kernel's chunks lie on worker tracks, inside the kernel's slice.
            let mine: Vec<&&Value> = chunks.iter().filter(|c| c["name"] == k["name"]).collect();
            assert!(!mine.is_empty(), "{label}: no chunks of {s}");
            for c in mine {
                assert!(workers.contains(&c["tid"].as_u64().unwrap()), "{c}");
                let (cts, cdur) = (c["ts"].as_f64().unwrap(), c["dur"].as_f64().unwrap());
                assert!(
                    cts + eps >= ts && cts + cdur <= ts + dur + eps,
                    "{c} outside {s}"
                );
            }
        }
        // No thread runs two chunks at once.
        for w in &workers {
            let mut on: Vec<(f64, f64)> = chunks
                .iter()
                .filter(|c| c["tid"].as_u64() == Some(*w))
                .map(|c| (c["ts"].as_f64().unwrap(), c["dur"].as_f64().unwrap()))
                .collect();
            on.sort_by(|a, b| a.0.total_cmp(&b.0));
            for pair in on.windows(2) {
                assert!(
                    pair[0].0 + pair[0].1 <= pair[1].0 + eps,
                    "{label}: {pair:?}"
                );
            }
        }
        assert!(events.iter().any(|e| e["name"] == "process_name"
            && e["pid"] == pid
            && e["args"]["name"].as_str().unwrap().starts_with(label)));
    }
}

#[test]
fn sim_trace_has_pe_and_dma_tracks_and_a_slice_per_kernel() {
    let scratch = Scratch::new("simtrace");
    let trace = PathBuf::from(scratch.path("trace.json"));
    let o = ferrite(&[
        "profile",
        "examples/mlp.fg",
        "--target",
        "sim",
        "--format",
        "json",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_exit(&o, 0);
    let report = parse_json(&stdout(&o));
    let t = parse_json(&std::fs::read_to_string(&trace).unwrap());
    let events = t["traceEvents"].as_array().unwrap();
    for (pid, label) in [(1, "fused"), (2, "unfused")] {
        let tracks: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == pid)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tracks[..3], ["kernels", "DMA lpddr", "DMA sram"]);
        assert_eq!(tracks.len(), 3 + 64, "one track per PE of the 8x8 grid");
        assert_eq!(tracks[3 + 63], "PE 7,7");
        let kernels = report["schedules"][label]["kernels"].as_array().unwrap();
        let slices: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "kernel")
            .collect();
        assert_eq!(slices.len(), kernels.len());
        for (s, k) in slices.iter().zip(kernels) {
            assert_eq!(s["name"], k["name"]);
            assert_eq!(s["args"]["cycles"], k["cycles"]);
            let (ts, dur) = (s["ts"].as_f64().unwrap(), s["dur"].as_f64().unwrap());
            assert!(dur > 0.0);
            // Every PE and DMA slice of the kernel lies within the kernel's slice.
            for e in events.iter().filter(|e| {
                e["ph"] == "X" && e["pid"] == pid && e["name"] == k["name"] && e["cat"] != "kernel"
            }) {
                let (t0, d) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                assert!(d > 0.0 && t0 >= ts, "{e}");
                if e["cat"] == "pe" {
                    assert!(t0 + d <= ts + dur + 1e-6, "{e} outside {s}");
                }
            }
        }
        assert!(events.iter().any(|e| e["pid"] == pid && e["cat"] == "pe"));
        assert!(events.iter().any(|e| e["pid"] == pid && e["cat"] == "dma"));
    }
}

#[test]
fn bad_flags_and_files_are_user_errors() {
    for args in [
        &["profile", "examples/does_not_exist.fg"][..],
        &["profile", "examples/mlp.fg", "--runs", "0"],
        &["profile", "examples/mlp.fg", "--threads", "0"],
        &["profile", "examples/mlp.fg", "--format", "xml"],
        &["profile", "examples/mlp.fg", "--target", "interp"],
        &[
            "profile",
            "examples/mlp.fg",
            "--target",
            "sim",
            "--threads",
            "2",
        ],
        &[
            "profile",
            "examples/mlp.fg",
            "--machine",
            "runtime/accel/presets/mtia2i.toml",
        ],
    ] {
        let o = ferrite(args);
        assert_exit(&o, 1);
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    let scratch = Scratch::new("preset");
    let preset = PathBuf::from(scratch.path("bad.toml"));
    std::fs::write(&preset, "name = \"half a machine\"\n").unwrap();
    let o = ferrite(&[
        "profile",
        "examples/mlp.fg",
        "--target",
        "sim",
        "--machine",
        preset.to_str().unwrap(),
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("missing keys"), "{}", stderr(&o));
    let o = ferrite(&[
        "profile",
        "examples/mlp.fg",
        "--runs",
        "1",
        "--trace",
        "/nonexistent-dir/t.json",
    ]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("cannot write `/nonexistent-dir/t.json`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compile_dump_writes_graph_dot_with_a_cluster_per_kernel() {
    let scratch = Scratch::new("dot");
    for file in ["examples/transformer_block.fg", "examples/softmax_rows.fg"] {
        let dir = PathBuf::from(scratch.path("dump"));
        let o = ferrite(&["compile", file, "--dump", dir.to_str().unwrap()]);
        assert_exit(&o, 0);
        let summary = stdout(&o);
        let kernels: usize = summary
            .lines()
            .find_map(|l| l.strip_prefix("kernels: "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no kernel count in\n{summary}"));
        let dot = std::fs::read_to_string(dir.join("graph.dot")).unwrap();
        assert!(dot.starts_with("digraph "), "{dot}");
        assert!(dot.trim_end().ends_with('}'));
        assert_eq!(dot.matches("subgraph cluster_k").count(), kernels, "{file}");
        // Each cluster is labelled with its kernel's name, as in the loop-IR dump.
        let loops = std::fs::read_to_string(dir.join("03-kernels.loop")).unwrap();
        let names: BTreeSet<&str> = loops
            .lines()
            .filter_map(|l| l.strip_prefix("kernel "))
            .map(|l| l.split('(').next().unwrap())
            .collect();
        assert_eq!(names.len(), kernels);
        for n in names {
            assert!(
                dot.contains(&format!("label=\"{n}\\n")),
                "{n} not a cluster label"
            );
        }
        assert!(summary.contains(&format!("to {}", dir.display())));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `--input NAME=FILE` profiles on the user's values (the peer harness passes its
/// inputs this way); a wrong name, shape or file is a user error naming it.
#[test]
fn profiles_run_on_inputs_from_files() {
    let scratch = Scratch::new("profile-inputs");
    let dir = scratch.path("out");
    let o = ferrite(&["run", "examples/softmax_rows.fg", "--out", &dir]);
    assert_exit(&o, 0);
    // softmax keeps its input's shape: its output is a valid `logits`.
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1);
    let file = files[0].as_ref().unwrap().path().display().to_string();
    let given = format!("logits={file}");
    let o = ferrite(&[
        "profile",
        "examples/softmax_rows.fg",
        "--input",
        &given,
        "--runs",
        "2",
        "--format",
        "json",
    ]);
    assert_exit(&o, 0);
    assert_eq!(parse_json(&stdout(&o))["format"], "ferrite-profile");
    for (flag, says) in [
        (format!("nope={file}"), "no parameter `nope`"),
        ("logits=/does/not/exist.npy".to_string(), "exist.npy"),
    ] {
        let o = ferrite(&["profile", "examples/softmax_rows.fg", "--input", &flag]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains(says), "{flag}: {}", stderr(&o));
    }
    let o = ferrite(&["profile", "examples/mlp.fg", "--input", &given]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("no parameter `logits`"),
        "{}",
        stderr(&o)
    );
}

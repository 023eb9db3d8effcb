//! Golden tests of printed loop IR: each `golden/NAME.fg` (and each graph in
//! `examples/`) is decomposed and scheduled, and the kernel counts, the fused program,
//! its memory plan and the fusion decisions must equal `golden/NAME.loops`
//! (`golden/examples/NAME.loops`) exactly. After an intended change, re-bless with
//!
//! ```text
//! FERRITE_BLESS=1 cargo test -p ferrite-passes --test golden
//! ```
//!
//! and review the diff. A drift fails with a line diff of expected vs actual.

use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_testkit::{check_against_interpreter, check_golden, primitive, random_inputs};
use std::path::{Path, PathBuf};

/// The text a golden file holds for graph source `src`.
fn render(name: &str, src: &str, check_numbers: bool) -> String {
    let g = primitive(src);
    if check_numbers {
        check_against_interpreter(&g, &random_inputs(&g, 7))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let f = schedule(&g, &ScheduleOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let u = schedule(&g, &ScheduleOptions::unfused()).unwrap_or_else(|e| panic!("{name}: {e}"));
    format!(
        "# {name}: kernels: {} (unfused: {}), peak intermediate bytes: {} (unfused: {}), bytes moved: {} (unfused: {})\n\n{}\n{}\nfusion decisions:\n{}",
        f.program.kernels.len(),
        u.program.kernels.len(),
        f.memory.peak_bytes(),
        u.memory.peak_bytes(),
        f.program.bytes_moved(),
        u.program.bytes_moved(),
        f.program,
        f.memory,
        f.decisions_text()
    )
}

fn graphs_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fg"))
        .collect();
    files.sort();
    files
}

fn run_dir(dir: &Path, out_dir: &Path, check_numbers: bool) {
    let mut failures = Vec::new();
    let files = graphs_in(dir);
    assert!(!files.is_empty(), "no graphs in {}", dir.display());
    for file in files {
        let name = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let src =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let actual = render(&name, &src, check_numbers);
        if let Err(e) = check_golden(&out_dir.join(format!("{name}.loops")), &actual) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn small_graphs_print_as_blessed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    run_dir(&root, &root, true);
}

#[test]
fn examples_schedule_as_blessed() {
    // The examples are large: their numbers are checked by the fusion tests' smaller
    // versions; here the kernel counts and the printed kernels are pinned.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    run_dir(
        &manifest.join("../examples"),
        &manifest.join("tests/golden/examples"),
        false,
    );
}

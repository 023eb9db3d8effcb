//! The filetests: every file under `tests/filetests/` names a stage in its `test` line,
//! gives the stage's input and the expected output (`tests/filetests/README.md`
//! describes the format). Re-bless after an intended change with
//!
//! ```text
//! FERRITE_BLESS=1 cargo test --test filetests
//! ```
//!
//! and review the diff; `FERRITE_FILETEST=schedule/softmax` runs only matching files.
//! A new stage is one line in [`STAGES`] and a function from the case to its output.

use ferrite_accel::program::{Intermediates, SimProgram};
use ferrite_accel::sim::Machine;
use ferrite_accel::tile;
use ferrite_cpu::{plan_program, CodegenOptions, Isa};
use ferrite_ir::loops::{evaluate, parse_program, Program};
use ferrite_ir::{parse, print, verify, Graph, Tensor};
use ferrite_passes::decompose::decompose;
use ferrite_passes::optimize::{optimize, OptimizeConfig};
use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};
use ferrite_testkit::check_round_trip;
use ferrite_testkit::filetest::{run_dir, Case, Stage};
use std::path::Path;
use std::time::Duration;

/// Every stage the filetests may name.
const STAGES: &[Stage] = &[
    Stage::new("parse", parse_stage),
    Stage::new("decompose", decompose_stage),
    Stage::new("optimize", optimize_stage),
    Stage::new("schedule", schedule_stage).with_options(&["unfused"]),
    Stage::new("memory", memory_stage).with_options(&["unfused"]),
    Stage::new("read", read_stage),
    Stage::new("cpu-plan", cpu_plan_stage)
        .with_options(&["scalar", "no-stash", "no-gemm", "narrow"]),
    Stage::new("tile", tile_stage).with_options(&["lpddr"]),
    Stage::new("partition", partition_stage).with_options(&["wrt"]),
];

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    match run_dir(&dir, STAGES) {
        Ok(n) => eprintln!("{n} filetests passed"),
        Err(e) => panic!("{e}"),
    }
}

/// The case's `.fg` input, parsed and verified.
fn graph(case: &Case) -> Result<Graph, String> {
    let g = parse(case.file, case.input).map_err(|d| d.to_string())?;
    verify(&g).map_err(|e| format!("the parsed graph fails verify: {e}"))?;
    Ok(g)
}

/// The input graph decomposed to primitive ops.
fn primitive(case: &Case) -> Result<Graph, String> {
    decompose(&graph(case)?).map_err(|e| format!("decompose: {e}"))
}

/// `parse`: `.fg` in, the printed graph out.
fn parse_stage(case: &Case) -> Result<String, String> {
    Ok(print(&graph(case)?))
}

/// `decompose`: `.fg` in, the primitive graph out.
fn decompose_stage(case: &Case) -> Result<String, String> {
    let g = primitive(case)?;
    verify(&g).map_err(|e| format!("the decomposed graph fails verify: {e}"))?;
    Ok(print(&g))
}

/// `optimize`: `.fg` in (decomposed first), the optimized graph out. The time limit is
/// generous so that the result depends on the iteration limit, not on machine load.
fn optimize_stage(case: &Case) -> Result<String, String> {
    let cfg = OptimizeConfig {
        time_limit: Duration::from_secs(60),
        ..OptimizeConfig::default()
    };
    let (g, report) = optimize(&primitive(case)?, &cfg)?;
    Ok(format!(
        "# ops: {} before, {} after\n{}",
        report.ops_before,
        report.ops_after,
        print(&g)
    ))
}

/// The input graph decomposed and scheduled, fused unless the case sets `unfused`.
fn scheduled(case: &Case) -> Result<Scheduled, String> {
    let opts = if case.flag("unfused") {
        ScheduleOptions::unfused()
    } else {
        ScheduleOptions::default()
    };
    let s = schedule(&primitive(case)?, &opts)?;
    s.program
        .verify()
        .map_err(|e| format!("the scheduled program fails verify: {e}"))?;
    check_round_trip(&s.program)?;
    Ok(s)
}

/// `schedule`: `.fg` in (decomposed first), the loop-IR program and the fusion
/// decisions out. The program must also read back from its text.
fn schedule_stage(case: &Case) -> Result<String, String> {
    let s = scheduled(case)?;
    let mut text = s.program.to_string();
    if !s.decisions.is_empty() {
        text.push_str("\nfusion decisions:\n");
        text.push_str(&s.decisions_text());
    }
    Ok(text)
}

/// `memory`: `.fg` in (decomposed and scheduled), the memory plan out.
fn memory_stage(case: &Case) -> Result<String, String> {
    let s = scheduled(case)?;
    Ok(format!(
        "# kernels: {}, bytes moved: {}\n{}",
        s.program.kernels.len(),
        s.program.bytes_moved(),
        s.memory
    ))
}

/// The case's loop-IR input, read and verified (the input of loop-IR stages).
fn loop_program(case: &Case) -> Result<Program, String> {
    parse_program(case.file, case.input).map_err(|d| d.to_string())
}

/// `read`: loop IR in, the program read (and verified) printed out.
fn read_stage(case: &Case) -> Result<String, String> {
    Ok(loop_program(case)?.to_string())
}

/// `tile`: loop IR in, the program lowered to tile kernels for the default machine
/// out, as `ferrite compile --target sim --dump` writes it (`05-kernels.tile`).
/// Intermediates live in SRAM where they fit, or in LPDDR with `lpddr`. Each
/// kernel must also read back from its text as the kernel that runs, and the
/// program must compute on the simulator what the loop-IR evaluator computes.
fn tile_stage(case: &Case) -> Result<String, String> {
    let p = parse_program(case.file, case.input).map_err(|d| d.to_string())?;
    let placement = if case.flag("lpddr") {
        Intermediates::Lpddr
    } else {
        Intermediates::SramWhenFits
    };
    let sim =
        SimProgram::compile_with(&p, &Machine::mtia2i(), placement).map_err(|e| e.to_string())?;
    let text = sim.kernels_text();
    for l in sim.launches() {
        let again = tile::parse(&format!("{}.tile", l.name), &l.text)
            .map_err(|d| format!("the kernel does not read back: {d}"))?;
        if again != *l.kernel.kernel() {
            return Err(format!("`{}` reads back as another kernel", l.name));
        }
    }
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &b)| Tensor::random(&p.buffers[b.index()].ty, i as u64 + 1))
        .collect();
    let want = evaluate(&p, &inputs)?;
    let (got, _) = sim.run(&inputs).map_err(|e| format!("{e}\n{text}"))?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        g.check_close(w, 1e-4, 1e-5)
            .map_err(|e| format!("output {i} differs from the loop-IR evaluator's: {e}"))?;
    }
    Ok(text)
}

/// `cpu-plan`: loop IR in, the CPU backend's plan out: the planned loop IR, with each
/// kernel's schedule as `#` lines under its header. `scalar` turns SIMD off, `no-stash`
/// stashing, `no-gemm` the extern GEMM and the direct stencil, `no-stencil` the direct
/// stencil (planned whatever the host), `narrow` the wide routine calls (planned for
/// AVX-512 otherwise, whatever the host, so the expected text is the same everywhere). The plan must read back from its text and
/// evaluate to the same bits as the input (on random inputs).
fn cpu_plan_stage(case: &Case) -> Result<String, String> {
    let p = loop_program(case)?;
    let codegen = CodegenOptions {
        vectorize: !case.flag("scalar"),
        stash: !case.flag("no-stash"),
        wide: (!case.flag("narrow")).then_some(Isa::Avx512),
        stencil: !case.flag("no-stencil"),
        ..CodegenOptions::default()
    };
    let plan = plan_program(&p, &codegen, !case.flag("no-gemm")).map_err(|e| e.to_string())?;
    let text = plan.to_string();
    let back = parse_program(case.file, &text)
        .map_err(|d| format!("the plan does not read back: {d}\n{text}"))?;
    if back.to_string() != plan.program.to_string() {
        return Err(format!("the plan reads back as another program:\n{back}"));
    }
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, b)| Tensor::random(&p.buffers[b.index()].ty, i as u64))
        .collect();
    let bits = |r: Result<Vec<Tensor>, String>| -> Result<Vec<Vec<u64>>, String> {
        Ok(r?
            .iter()
            .map(|t| t.to_f64().into_iter().map(f64::to_bits).collect())
            .collect())
    };
    let (want, got) = (
        bits(evaluate(&p, &inputs).map_err(|e| e.to_string())),
        bits(evaluate(&plan.program, &inputs).map_err(|e| e.to_string())),
    );
    match (want, got) {
        (Ok(w), Ok(g)) if w == g => Ok(text),
        (Err(_), Err(_)) => Ok(text),
        (w, g) => Err(format!(
            "the plan evaluates differently: {:?} vs {:?}",
            w.map(|_| "outputs"),
            g.map(|_| "outputs")
        )),
    }
}

/// `partition`: `.fg` in (output 0 a scalar loss), the min-cut partition of its joint
/// graph for the values of `wrt=NAME,..` out: the report, the forward and the backward graph.
fn partition_stage(case: &Case) -> Result<String, String> {
    let g = graph(case)?;
    let wrt = case
        .value("wrt")
        .ok_or("the partition stage needs wrt=NAME,..")?;
    let ids = wrt
        .split(',')
        .map(|n| g.find(n).ok_or_else(|| format!("no value named `{n}`")))
        .collect::<Result<Vec<_>, _>>()?;
    let j = ferrite_passes::autodiff::grad(&g, 0, &ids).map_err(|e| e.to_string())?;
    let p = ferrite_passes::partition::partition(&j, g.outputs.len()).map_err(|e| e.to_string())?;
    Ok(p.text())
}

//! Row programs in the loop IR: a row graph's instance at its most rows, lowered by
//! the ordinary pipeline, carries row axes (`Rows::derive`) that the evaluator runs at
//! any row count, equal to the interpreter on the graph's instance at that binding;
//! the text is golden and reads back; wrong row axes are refused.
//!
//! Re-bless the golden text with `FERRITE_BLESS=1 cargo test -p ferrite-passes --test rows`.

use ferrite_ir::loops::{evaluate, parse_row_program, RowProgram, Rows};
use ferrite_ir::sym::{Binding, SymGraph};
use ferrite_ir::text::{parse_any, NoWeights, Parsed};
use ferrite_ir::{interpret, Tensor};
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::ScheduleOptions;
use ferrite_testkit::check_golden;
use std::path::Path;

/// GPT-2's MLP with its layer norm and residual, small, over N rows.
const MLP: &str = "dims N in [1, 48]
graph mlp(x: f32[N, 8], ln_w: f32[8], ln_b: f32[8], w1: f32[8, 16], b1: f32[16], w2: f32[16, 8]) -> f32[N, 8] {
  h = layer_norm(x, ln_w, ln_b)
  y = add(x, matmul(gelu(add(matmul(h, w1), b1)), w2))
  return y
}
";

fn sym(src: &str) -> SymGraph {
    match parse_any("mlp.fg", src, &mut NoWeights).unwrap() {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("no symbols"),
    }
}

fn row_program(g: &SymGraph, schedule: ScheduleOptions) -> RowProgram {
    let form = g.rows().unwrap();
    let instance = g.row_instance(&form, form.max_rows).unwrap();
    let opts = PipelineOptions {
        schedule,
        ..PipelineOptions::default()
    };
    let program = lower_graph(&instance, &opts).unwrap().scheduled.program;
    let axis = |carries: &bool| carries.then_some(form.row_axis());
    let inputs: Vec<_> = form.params.iter().map(axis).collect();
    let outputs: Vec<_> = form.outputs.iter().map(axis).collect();
    let rows = Rows::derive(&program, &form.name(), form.max_rows, &inputs, &outputs).unwrap();
    let p = RowProgram { program, rows };
    p.verify().unwrap();
    p
}

#[test]
fn the_evaluator_runs_a_row_program_at_every_row_count_fused_and_unfused() {
    let g = sym(MLP);
    for schedule in [ScheduleOptions::default(), ScheduleOptions::unfused()] {
        let p = row_program(&g, schedule);
        for n in [1usize, 2, 5, 31, 48] {
            let mut b = Binding::new();
            b.set("N", n as i64);
            let instance = g.instantiate(&b).unwrap();
            let inputs: Vec<Tensor> = instance
                .params
                .iter()
                .enumerate()
                .map(|(i, &v)| Tensor::random(instance.ty(v), 40 + i as u64))
                .collect();
            let want = interpret(&instance, &inputs).unwrap();
            let at = p.at(n);
            at.verify().unwrap();
            let got = evaluate(&at, &inputs).unwrap();
            got[0]
                .check_close(&want[0], 1e-5, 1e-5)
                .unwrap_or_else(|m| panic!("N={n}: {m}"));
        }
    }
}

#[test]
fn the_row_program_text_is_golden_and_reads_back() {
    let p = row_program(&sym(MLP), ScheduleOptions::default());
    let text = p.to_string();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/rows/mlp.loops");
    check_golden(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    let back = parse_row_program("mlp.loops", &text).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(back.rows, p.rows);
    assert_eq!(back.to_string(), text);
}

#[test]
fn wrong_row_axes_are_refused_at_their_line() {
    let p = row_program(&sym(MLP), ScheduleOptions::default());
    let text = p.to_string();
    let rows_line = text.lines().nth(1).unwrap().to_string();
    assert!(
        rows_line.starts_with("  rows N in 1..=48: buf0[0]"),
        "{rows_line}"
    );
    // A row input that the kernels do not read as rows: a weight claimed as rows.
    let w1 = p
        .program
        .buffers
        .iter()
        .position(|b| b.name == "w1")
        .unwrap();
    let bad = rows_line.replacen(": ", &format!(": buf{w1}[0] "), 1);
    let err = parse_row_program("mlp.loops", &text.replacen(&rows_line, &bad, 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("mlp.loops:2:"), "{err}");
    // A row factor that does not match the buffer.
    let bad = rows_line.replacen("buf0[0]", "buf0[0]*2", 1);
    let err = parse_row_program("mlp.loops", &text.replacen(&rows_line, &bad, 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not lead with its rows"), "{err}");
    // A malformed entry.
    let bad = rows_line.replacen("buf0[0]", "buf0(0)", 1);
    let err = parse_row_program("mlp.loops", &text.replacen(&rows_line, &bad, 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not `bufN[AXIS]`"), "{err}");
}

#[test]
fn rows_read_through_a_division_are_not_proved() {
    let p = row_program(&sym(MLP), ScheduleOptions::default());
    let text = p.to_string();
    // In bounds at 48 rows (the program verifies), but its bounds are not affine in
    // the rows, so the proof refuses it.
    let load = "acc0 = sum(r0 in 0..8) buf0[i0*8 + r0]";
    assert!(text.contains(load), "{text}");
    let edited = text.replacen(load, "acc0 = sum(r0 in 0..8) buf0[(i0*8 + r0) % 384]", 1);
    let err = parse_row_program("mlp.loops", &edited)
        .unwrap_err()
        .to_string();
    assert!(err.contains("indexes rows through a division"), "{err}");
    // Reading the next row: in bounds at 48 rows only if guarded, so the program
    // itself refuses an unguarded one; a read of the last row from every row is in
    // bounds at 48 rows but not at fewer.
    let edited = text.replacen(load, "acc0 = sum(r0 in 0..8) buf0[r0 + 376]", 1);
    let err = parse_row_program("mlp.loops", &edited)
        .unwrap_err()
        .to_string();
    assert!(err.contains("may leave buf0 at some row count"), "{err}");
}

#[test]
fn a_kernel_that_reduces_over_rows_is_not_a_row_program() {
    // The instance of a graph summing over its rows is a valid static program, but no
    // row program: its sum kernel reads rows and writes none.
    let g = sym("dims N in [1, 8]\ngraph s(x: f32[N, 4]) {\n  return relu(x)\n}\n");
    let form = g.rows().unwrap();
    let instance = g.row_instance(&form, 8).unwrap();
    let program = lower_graph(&instance, &PipelineOptions::default())
        .unwrap()
        .scheduled
        .program;
    // Claim the output carries no rows: its writer reads rows, so it would reduce.
    let err = Rows::derive(&program, "N", 8, &[Some(0)], &[None]).unwrap_err();
    assert!(err.contains("reduces across rows"), "{err}");
    // The inputs at a count that is not the program's.
    let err = Rows::derive(&program, "N", 3, &[Some(0)], &[Some(0)]).unwrap_err();
    assert!(err.contains("does not lead with 3 rows"), "{err}");
}

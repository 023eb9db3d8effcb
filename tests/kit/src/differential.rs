//! The differential check: a graph's fused and unfused schedules, evaluated as loop IR,
//! against the reference interpreter, bit for bit.

use ferrite_ir::loops::evaluate;
use ferrite_ir::{interpret, Graph, Tensor};
use ferrite_passes::decompose::decompose;
use ferrite_passes::schedule::{schedule, ScheduleOptions, Scheduled};

/// Schedules `g` (primitive) both ways, evaluates both programs and compares every
/// output with the interpreter bit for bit (NaN equal to NaN): the loop IR rounds
/// each node as the interpreter rounds each op, so results must be identical.
/// Returns the two schedules.
pub fn check_against_interpreter(
    g: &Graph,
    inputs: &[Tensor],
) -> Result<(Scheduled, Scheduled), String> {
    let fused =
        schedule(g, &ScheduleOptions::default()).map_err(|e| format!("fused schedule: {e}"))?;
    let unfused =
        schedule(g, &ScheduleOptions::unfused()).map_err(|e| format!("unfused schedule: {e}"))?;
    let want = interpret(g, inputs);
    for (label, s) in [("fused", &fused), ("unfused", &unfused)] {
        let got = evaluate(&s.program, inputs);
        match (&want, got) {
            (Ok(want), Ok(got)) => {
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    a.check_close(b, 0.0, 0.0)
                        .map_err(|e| format!("{label}: output {i}: {e}\n{}", s.program))?;
                }
            }
            // Both reject the inputs (e.g. an index out of range): fine.
            (Err(_), Err(_)) => {}
            (Ok(_), Err(e)) => {
                return Err(format!("{label}: evaluation failed: {e}\n{}", s.program))
            }
            (Err(e), Ok(_)) => {
                return Err(format!(
                    "{label}: the interpreter fails ({e}) but evaluation succeeds"
                ))
            }
        }
    }
    if fused.program.kernels.len() > unfused.program.kernels.len() {
        return Err(format!(
            "fusion made more kernels ({}) than the unfused schedule ({})",
            fused.program.kernels.len(),
            unfused.program.kernels.len()
        ));
    }
    Ok((fused, unfused))
}

/// Parses a graph from text and decomposes it to primitives.
pub fn primitive(src: &str) -> Graph {
    let g = ferrite_ir::parse("test.fg", src).unwrap_or_else(|e| panic!("{e}"));
    decompose(&g).unwrap_or_else(|e| panic!("{e}"))
}

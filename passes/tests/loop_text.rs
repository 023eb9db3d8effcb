//! The loop-IR text round trip: every program the scheduler makes (from the examples,
//! the golden graphs and random graphs, fused and unfused) prints, reads back with
//! `ferrite_ir::loops::parse_program`, prints the same text, equals the original up to
//! the order of block nodes, and (the small ones) evaluates to the same outputs bit
//! for bit.

use ferrite_ir::loops::{evaluate, parse_program, Program};
use ferrite_ir::{Graph, Tensor};
use ferrite_passes::decompose::decompose;
use ferrite_passes::pipeline::{lower_graph, PipelineOptions};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_testkit::{
    check_round_trip, example, example_graph, example_names, inputs_for, random_graph_with,
    random_inputs,
};

/// Programs of at most this many scalar operations are also evaluated.
const EVALUATE_OPS: u64 = 1_000_000;

/// Schedules `g` both ways and round-trips both programs; with `inputs`, also checks
/// that the programs read evaluate as the originals do (small programs only).
fn round_trip(name: &str, g: &Graph, inputs: Option<&[Tensor]>) -> Result<(), String> {
    for opts in [ScheduleOptions::default(), ScheduleOptions::unfused()] {
        let label = if opts.fuse { "fused" } else { "unfused" };
        let p = schedule(g, &opts)
            .map_err(|e| format!("{name} ({label}): schedule: {e}"))?
            .program;
        let q = check_round_trip(&p).map_err(|e| format!("{name} ({label}): {e}"))?;
        // The loop evaluator is slow; the larger examples are checked by structure only.
        let small = p.kernels.iter().map(|k| k.op_count()).sum::<u64>() <= EVALUATE_OPS;
        if let (Some(inputs), true) = (inputs, small) {
            same_outputs(&p, &q, inputs).map_err(|e| format!("{name} ({label}): {e}"))?;
        }
    }
    Ok(())
}

fn same_outputs(p: &Program, q: &Program, inputs: &[Tensor]) -> Result<(), String> {
    match (evaluate(p, inputs), evaluate(q, inputs)) {
        (Ok(a), Ok(b)) => {
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                y.check_close(x, 0.0, 0.0)
                    .map_err(|e| format!("output {i} of the program read: {e}"))?;
            }
            Ok(())
        }
        (Err(_), Err(_)) => Ok(()),
        (a, b) => Err(format!(
            "the original evaluates to {:?}, the program read to {:?}",
            a.map(|_| "outputs"),
            b.map(|_| "outputs")
        )),
    }
}

#[test]
fn examples_round_trip() {
    let mut failures = Vec::new();
    for name in example_names() {
        let g = example(&name);
        let inputs = random_inputs(&g, 0);
        if let Err(e) = round_trip(&name, &g, Some(&inputs)) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn kernel_dumps_read_back() {
    // What `ferrite compile --dump` writes as `03-kernels.loop`, comments included.
    for name in example_names() {
        let texts = PipelineOptions {
            texts: true,
            ..PipelineOptions::default()
        };
        let lowered =
            lower_graph(&example_graph(&name), &texts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let dump = lowered
            .stages
            .iter()
            .find(|s| s.file == "kernels.loop")
            .expect("a kernels.loop stage");
        let p = parse_program(&format!("{name}/03-kernels.loop"), &dump.text)
            .unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(
            p.to_string(),
            lowered.scheduled.program.to_string(),
            "{name}"
        );
    }
}

#[test]
fn random_graphs_round_trip() {
    let mut failures = Vec::new();
    for seed in 0..300u64 {
        let composites = seed % 2 == 1;
        let big = seed % 5 == 0;
        let max_ops = if seed % 3 == 0 { 30 } else { 12 };
        let rg = random_graph_with(seed, max_ops, composites, big);
        let Ok(g) = decompose(&rg.graph) else {
            continue;
        };
        let inputs = inputs_for(&rg, seed);
        if let Err(e) = round_trip(&format!("seed {seed}"), &g, Some(&inputs)) {
            failures.push(e);
        }
        if failures.len() >= 3 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

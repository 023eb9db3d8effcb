//! Differential testing of fusion and scheduling: random well-typed graphs (primitive
//! and composite ops, decomposed first) are scheduled fused and unfused, the loop IR
//! is evaluated, and every output must equal the reference interpreter's bit for bit.
//!
//! CI runs a bounded number of cases. To run many more:
//!
//! ```text
//! FERRITE_FUZZ_CASES=50000 cargo test -p ferrite-passes --test differential
//! ```
//!
//! `FERRITE_FUZZ_SEED=N` starts at another seed; a failure prints the seed and the
//! graph, and `FERRITE_FUZZ_CASES=1 FERRITE_FUZZ_SEED=<seed>` replays it.

use ferrite_passes::decompose::decompose;
use ferrite_testkit::{check_against_interpreter, inputs_for, random_graph};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn run_cases(first_seed: u64, cases: u64, max_ops: usize, composites: bool) {
    let mut kernels = (0usize, 0usize);
    for seed in first_seed..first_seed + cases {
        let rg = random_graph(seed, max_ops, composites);
        let g = match decompose(&rg.graph) {
            Ok(g) => g,
            Err(e) => panic!(
                "seed {seed}: decompose failed: {e}\n{}",
                ferrite_ir::print(&rg.graph)
            ),
        };
        let inputs = inputs_for(&rg, seed);
        match check_against_interpreter(&g, &inputs) {
            Ok((fused, unfused)) => {
                kernels.0 += fused.program.kernels.len();
                kernels.1 += unfused.program.kernels.len();
            }
            Err(e) => panic!(
                "seed {seed}: {e}\ngraph:\n{}\ndecomposed:\n{}",
                ferrite_ir::print(&rg.graph),
                ferrite_ir::print(&g)
            ),
        }
    }
    // Fusion must actually fuse on average, or the test checks nothing interesting.
    assert!(
        kernels.0 < kernels.1,
        "fused {} kernels vs unfused {}",
        kernels.0,
        kernels.1
    );
}

#[test]
fn random_primitive_graphs_match_the_interpreter() {
    let cases = env_u64("FERRITE_FUZZ_CASES", 400);
    let seed = env_u64("FERRITE_FUZZ_SEED", 1);
    run_cases(seed, cases, 12, false);
}

#[test]
fn random_graphs_with_composite_ops_match_the_interpreter() {
    let cases = env_u64("FERRITE_FUZZ_CASES", 300);
    let seed = env_u64("FERRITE_FUZZ_SEED", 1_000_000);
    run_cases(seed, cases, 10, true);
}

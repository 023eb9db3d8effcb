//! Fuzz targets for the inputs a user hands Ferrite: `.fg` text, `.npy` bytes and `.tile`
//! kernels (parsed, checked, and run on the simulator under a small budget). Each runs a
//! bounded number of mutants of the repository's own files in CI; by hand, for an hour each:
//!
//! ```text
//! FERRITE_FUZZ_SECONDS=3600 cargo test --release --test fuzz -- --test-threads 1 fg_parser
//! FERRITE_FUZZ_SECONDS=3600 cargo test --release --test fuzz -- --test-threads 1 npy_decoder
//! FERRITE_FUZZ_SECONDS=3600 cargo test --release --test fuzz -- --test-threads 1 tile_kernels
//! FERRITE_FUZZ_SECONDS=3600 cargo test --release --test fuzz -- --test-threads 1 pipeline
//! ```
//!
//! `pipeline` is the whole pipeline, differentially: random graphs from
//! `ferrite_testkit::random_edge_graph` (composites, extents 0 and 1, broadcasting, special
//! literals, emptying pads and slices, occasional long axes) with special-valued inputs
//! (`edge_inputs`: NaN, infinities, signed zeros, subnormals, huge values, integer
//! extremes), run through the facade on the interpreter, the loop-IR evaluator, cpu fused and
//! unfused at 1 and 3 threads and sim fused and unfused (`tests/pipeline`): outputs within
//! the backends' differential tolerances, errors of the same kind everywhere (a user error on
//! one target is one on all; an internal error or panic anywhere is a failure). Its findings
//! are `.fg` text; `FERRITE_FUZZ_REPLAY=target/fuzz-findings/pipeline/HASH.bin cargo test
//! --test fuzz pipeline` reruns one with the same inputs (derived from the text).
//! `FERRITE_FUZZ_NO_HUGE=1` leaves the huge finite inputs (1e20, 3e38, 65504) out: with them,
//! sums, products and variances that overflow f32 on the backends but not the interpreter's
//! f64 diverge (reliability finding F14, open), which hides everything else.
//!
//! The scheduler and each backend are also fuzzed on their own by the random-graph tests
//! (`FERRITE_FUZZ_CASES=N` on `-p ferrite-passes --test differential`, `-p ferrite-cpu --test
//! differential` and `-p ferrite-accel --test lower`). The harness is
//! `ferrite_testkit::fuzz`; failing inputs land in `target/fuzz-findings/`.

mod pipeline;
mod targets;

use ferrite_ir::{npy, print, DType, Tensor, TensorType};
use ferrite_testkit::fuzz::{corpus, fuzz, fuzz_generated, Verdict};
use ferrite_testkit::{edge_inputs_with, random_edge_graph, RandomGraph};
use targets::{fg_target, npy_target, tile_target};

#[test]
fn fg_parser() {
    let seeds = corpus(
        &[
            "examples",
            "tests/parse",
            "tests/errors",
            "passes/tests/golden",
        ],
        &[".fg"],
    );
    let stats = fuzz("fg_parser", &seeds, 20_000, fg_target);
    assert!(stats.accepted > 0);
}

fn npy_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for (i, d) in [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ]
    .into_iter()
    .enumerate()
    {
        for shape in [vec![], vec![3], vec![2, 3], vec![2, 1, 2]] {
            let ty = TensorType::new(d, shape).unwrap();
            seeds.push(npy::encode(&Tensor::random(&ty, i as u64)));
        }
    }
    seeds
}

#[test]
fn npy_decoder() {
    let stats = fuzz("npy_decoder", &npy_seeds(), 20_000, npy_target);
    assert!(stats.accepted > 0);
}

#[test]
fn tile_kernels() {
    let seeds = corpus(&["examples/kernels", "tests/filetests"], &[".tile"]);
    let stats = fuzz("tile_kernels", &seeds, 5_000, tile_target);
    assert!(stats.accepted > 0);
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A random edge-case graph as `.fg` text.
fn pipeline_case(seed: u64) -> Vec<u8> {
    print(&random_edge_graph(seed, 8).graph).into_bytes()
}

/// Parses the graph, derives its inputs from the text and runs it on every target.
fn pipeline_target(input: &[u8]) -> Verdict {
    let src = std::str::from_utf8(input).map_err(|e| format!("not UTF-8: {e}"))?;
    let graph = ferrite_ir::parse("case.fg", src)
        .map_err(|d| format!("a generated graph does not parse: {d}"))?;
    let rg = RandomGraph {
        index_bounds: pipeline::index_bounds(&graph),
        graph,
    };
    let huge = std::env::var("FERRITE_FUZZ_NO_HUGE").is_err();
    let inputs = edge_inputs_with(&rg, fnv(input), huge);
    pipeline::check(&rg.graph, &inputs).map(|seen| seen.values > 0)
}

#[test]
fn pipeline() {
    let stats = fuzz_generated("pipeline", 100, pipeline_case, pipeline_target);
    assert!(stats.accepted > 0);
}

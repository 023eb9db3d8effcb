//! `pad` as a kernel of its own (`passes/src/lower/pad.rs`: the input copied inside, the
//! fill stored over each padded side, no guards), on every target: the interpreter, the
//! loop-IR evaluator, cpu fused and unfused at 1 and 3 threads, sim fused and unfused
//! (`tests/pipeline`). Unfused every pad is such a kernel; fused, a pad into rows of at
//! most 16 read by several taps is (`short-padded-rows`). Ranks 1 to 4, pads on leading,
//! inner and last axes, one side or both, every dtype, fills that are not zero, and an
//! input with an empty axis.

mod pipeline;

use ferrite_ir::parse;

fn check(src: &str) {
    let g = parse("pad.fg", src).unwrap_or_else(|d| panic!("does not parse: {d}\n{src}"));
    let rg = ferrite_testkit::RandomGraph {
        index_bounds: pipeline::index_bounds(&g),
        graph: g,
    };
    let inputs = ferrite_testkit::inputs_for(&rg, 3);
    let agreement = pipeline::check(&rg.graph, &inputs).unwrap_or_else(|e| panic!("{src}\n{e}"));
    assert!(agreement.values > 0, "{src}: nothing compared");
}

#[test]
fn pad_kernels_match_the_interpreter_everywhere() {
    let cases = [
        "graph p(x: f32[5]) { return pad(x, pads=[2, 3], value=1.5) }",
        "graph p(x: i32[3, 4]) { return pad(x, pads=[1, 1, 0, 0], value=-7) }",
        "graph p(x: i64[3, 4]) { return pad(x, pads=[0, 2, 3, 0]) }",
        "graph p(x: f32[0, 4]) { return pad(x, pads=[1, 1, 1, 1], value=2.0) }",
        "graph p(x: f16[2, 3, 1, 4]) { return pad(x, pads=[0, 0, 0, 0, 1, 1, 0, 1], value=-inf) }",
        "graph p(x: f64[2, 2, 3]) { return pad(x, pads=[1, 0, 0, 2, 1, 1], value=0.25) }",
        "graph p(x: bool[2, 3]) { return pad(x, pads=[0, 0, 2, 1], value=1.0) }",
        // A window's taps over short padded rows: the pad is stored once when fused.
        "graph p(x: f32[1, 3, 6, 6]) {
           q = pad(x, pads=[0, 0, 0, 0, 1, 1, 1, 1], value=-1.0)
           a = slice(slice(q, axis=2, start=0, end=6), axis=3, start=0, end=6)
           b = slice(slice(q, axis=2, start=2, end=8), axis=3, start=1, end=7)
           c = slice(slice(q, axis=2, start=1, end=7, step=1), axis=3, start=2, end=8)
           return add(add(a, b), c)
         }",
        "graph p(x: f32[2, 7, 7]) {
           q = pad(x, pads=[0, 0, 2, 0, 0, 3], value=0.0)
           return mul(slice(q, axis=2, start=0, end=7), slice(q, axis=2, start=3, end=10))
         }",
    ];
    for src in cases {
        check(src);
    }
}

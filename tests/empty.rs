//! Empty values (an extent 0 in any position) through every op kind, on every target: the
//! interpreter, the loop-IR evaluator, cpu fused and unfused at 1 and 3 threads, sim fused
//! and unfused (`tests/pipeline`). Empty values made directly (a parameter) and from
//! non-empty ones (a slice past the end, a negative pad, an empty arange), then reshaped,
//! padded back to non-empty, concatenated, broadcast, reduced (`sum` = 0, `prod` = 1,
//! `mean` = NaN over an empty axis; `max`/`argmax` over one is a type error), multiplied.
//!
//! Regression for reliability finding F03: `pad(reshape(slice(x, axis=1, start=8),
//! shape=[0]), pads=[0, 2])` made the CPU backend exit 2 (`i0 // 0` has no provable range).

mod pipeline;

use ferrite_ir::parse;

/// Shapes with an extent 0 in each position, and what makes one from a non-empty `f32[4, 8]`.
const SHAPES: &[&str] = &["[0]", "[0, 3]", "[3, 0]", "[2, 0, 3]", "[1, 0]", "[0, 1]"];

fn check_source(src: &str) -> Result<pipeline::Agreement, String> {
    let g = parse("empty.fg", src).map_err(|d| format!("does not parse: {d}"))?;
    let rg = ferrite_testkit::RandomGraph {
        index_bounds: pipeline::index_bounds(&g),
        graph: g,
    };
    let inputs = ferrite_testkit::inputs_for(&rg, 1);
    pipeline::check(&rg.graph, &inputs)
}

/// Runs every source, reporting all failures at once.
fn check_all(sources: &[String]) -> pipeline::Agreement {
    let mut total = pipeline::Agreement::default();
    let mut failures = Vec::new();
    for src in sources {
        match check_source(src) {
            Ok(a) => {
                total.values += a.values;
                total.user_errors += a.user_errors;
            }
            Err(e) => failures.push(format!("{src}\n{e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} graphs diverge:\n\n{}",
        failures.len(),
        sources.len(),
        failures.join("\n\n")
    );
    total
}

fn graph(params: &str, body: &str) -> String {
    format!("graph g({params}) {{\n{body}\n}}\n")
}

#[test]
fn f03_an_empty_slice_reshaped_and_padded() {
    let sources = [
        "y = pad(reshape(slice(x, axis=1, start=8), shape=[0]), pads=[0, 2])",
        "y = pad(reshape(pad(x, pads=[0, 0, -8, 0]), shape=[0]), pads=[0, 2])",
        "y = pad(reshape(slice(x, axis=0, start=4), shape=[2, 0]), pads=[1, 0, 0, 3], value=2.0)",
        "y = pad(reshape(slice(x, axis=1, start=3, end=3), shape=[0, 5]), pads=[2, 0, 0, 0])",
    ]
    .map(|b| graph("x: f32[4, 8]", &format!("  {b}\n  return y")));
    let seen = check_all(&sources);
    assert_eq!(seen.values, 4 * pipeline::configurations().len());
}

#[test]
fn elementwise_ops_over_empty_shapes() {
    let mut sources = Vec::new();
    for s in SHAPES {
        for op in [
            "neg(x)",
            "exp(x)",
            "relu(x)",
            "abs(x)",
            "sqrt(abs(x))",
            "gelu(x)",
            "sigmoid(x)",
            "cast(x, to=i32)",
            "cast(x, to=f16)",
            "add(x, x)",
            "mul(x, 2.0)",
            "div(1.0, x)",
            "pow(x, 2.0)",
            "maximum(x, 0.0)",
            "where(gt(x, 0.0), x, 1.0)",
            "add(x, b)",
            "lt(x, b)",
        ] {
            sources.push(graph(
                &format!("x: f32{s}, b: f32[1]"),
                &format!("  y = {op}\n  return y"),
            ));
        }
        sources.push(graph(
            &format!("x: i32{s}, z: i64{s}"),
            "  y = add(mul(x, 3), z)\n  w = not(gt(x, 1))\n  return y, w",
        ));
    }
    check_all(&sources);
}

#[test]
fn reductions_over_empty_shapes() {
    let mut sources = Vec::new();
    for s in SHAPES {
        let rank = s.matches(',').count() + 1;
        for axis in 0..rank {
            for op in ["sum", "prod", "mean"] {
                for keepdim in ["false", "true"] {
                    sources.push(graph(
                        &format!("x: f32{s}"),
                        &format!("  y = {op}(x, axes=[{axis}], keepdim={keepdim})\n  return y"),
                    ));
                }
            }
            // Integer sums and products: 0 and 1 over an empty axis.
            sources.push(graph(
                &format!("x: i32{s}"),
                &format!(
                    "  y = sum(x, axes=[{axis}])\n  z = prod(x, axes=[{axis}])\n  return y, z"
                ),
            ));
        }
        for op in ["sum", "prod", "mean"] {
            sources.push(graph(
                &format!("x: f32{s}"),
                &format!("  y = {op}(x)\n  return y"),
            ));
        }
        // Sums of an empty axis feeding elementwise work and a pad.
        sources.push(graph(
            &format!("x: f32{s}"),
            "  y = add(exp(sum(x, axes=[-1], keepdim=true)), 1.0)\n  return y",
        ));
    }
    // max/min/argmax over a non-empty axis of an empty tensor are defined (empty results).
    sources.push(graph(
        "x: f32[0, 3]",
        "  y = max(x, axes=[1])\n  z = argmax(x, axis=1)\n  return y, z",
    ));
    sources.push(graph(
        "x: f32[3, 0, 2]",
        "  y = min(x, axes=[2])\n  z = argmin(x, axis=2, keepdim=true)\n  return y, z",
    ));
    check_all(&sources);
}

#[test]
fn max_and_argmax_over_an_empty_axis_are_type_errors() {
    for body in [
        "y = max(x, axes=[1])",
        "y = min(x)",
        "y = argmax(x, axis=1)",
        "y = argmin(x)",
    ] {
        let src = graph("x: f32[3, 0]", &format!("  {body}\n  return y"));
        let e = parse("empty.fg", &src).expect_err(&src).to_string();
        assert!(e.starts_with("empty.fg:2:"), "{e}");
        assert!(e.contains("extent 0") || e.contains("empty"), "{e}");
    }
}

#[test]
fn movement_ops_make_and_consume_empty_values() {
    let mut sources = Vec::new();
    let x = "x: f32[4, 8]";
    for body in [
        // Slices past the end, empty ranges, negative pads, on every axis.
        "y = slice(x, axis=0, start=4)",
        "y = slice(x, axis=1, start=5, end=2)",
        "y = slice(x, axis=-1, start=-1, end=-1, step=2)",
        "y = pad(x, pads=[-4, 0, 0, 0])",
        "y = pad(x, pads=[0, -2, -3, -5])",
        // ... reshaped, permuted, expanded, padded back, concatenated.
        "y = reshape(slice(x, axis=0, start=4), shape=[0, 2, 4])",
        "y = reshape(slice(x, axis=1, start=8), shape=[2, 0, 2])",
        "y = permute(reshape(slice(x, axis=1, start=8), shape=[2, 0, 2]), dims=[2, 0, 1])",
        "y = expand(reshape(slice(x, axis=1, start=8), shape=[1, 0]), shape=[3, 0])",
        "y = expand(slice(x, axis=0, start=4, end=4), shape=[2, 0, 8])",
        "y = pad(slice(x, axis=0, start=4), pads=[1, 2, 0, 0], value=-1.5)",
        "y = pad(permute(slice(x, axis=1, start=9), dims=[1, 0]), pads=[0, 1, 1, 0])",
        "y = concat(slice(x, axis=1, start=8), x, slice(x, axis=1, end=0), axis=1)",
        "y = concat(slice(x, axis=0, start=4), slice(x, axis=0, start=2), axis=0)",
        "y = concat(slice(x, axis=1, start=8), slice(x, axis=1, start=7, end=7), axis=1)",
        "y = concat(slice(x, axis=0, start=4), slice(x, axis=0, start=3, end=1), axis=1)",
        "y = add(exp(reshape(pad(x, pads=[0, 0, -8, 0]), shape=[0])), 1.0)",
        "y = sum(reshape(slice(x, axis=1, start=8), shape=[4, 0]), axes=[1])",
        "y = prod(reshape(slice(x, axis=0, start=4), shape=[0, 8]), axes=[0], keepdim=true)",
        "y = mean(slice(x, axis=1, start=8), axes=[1])",
        "y = add(x, sum(slice(x, axis=0, start=4), axes=[0], keepdim=true))",
        "y = pad(sum(reshape(slice(x, axis=1, start=8), shape=[4, 0]), axes=[1]), pads=[1, 1])",
        "y = matmul(slice(x, axis=1, start=8), slice(permute(x, dims=[1, 0]), axis=0, start=8))",
    ] {
        sources.push(graph(x, &format!("  {body}\n  return y")));
    }
    check_all(&sources);
}

#[test]
fn contractions_gathers_and_creation_over_empty_shapes() {
    let sources = [
        // K = 0: zeros; M = 0 or N = 0: empty.
        ("a: f32[3, 0], b: f32[0, 4]", "y = matmul(a, b)"),
        ("a: f32[0, 5], b: f32[5, 4]", "y = matmul(a, b)"),
        ("a: f32[3, 5], b: f32[5, 0]", "y = matmul(a, b)"),
        (
            "a: f32[2, 3, 0], b: f32[2, 0, 4]",
            "y = add(matmul(a, b), 1.0)",
        ),
        ("a: f32[0, 3, 2], b: f32[2, 4]", "y = matmul(a, b)"),
        ("a: f32[3, 0], b: f32[0]", "y = matmul(a, b)"),
        ("a: f32[0], b: f32[0]", "y = matmul(a, b)"),
        // An empty index list selects nothing; an empty other axis selects empty rows.
        ("x: f32[4, 3], i: i64[0]", "y = index_select(x, i, axis=0)"),
        ("x: f32[4, 0], i: i64[2]", "y = index_select(x, i, axis=0)"),
        ("x: f32[0, 3], i: i64[0]", "y = index_select(x, i, axis=0)"),
        ("x: f32[4, 3], i: i64[0, 3]", "y = gather(x, i, axis=0)"),
        ("x: f32[4, 0], i: i64[2, 0]", "y = gather(x, i, axis=0)"),
        (
            "b: f32[4, 3], i: i64[0], s: f32[0, 3]",
            "y = index_add(b, i, s, axis=0)",
        ),
        (
            "b: f32[4, 0], i: i64[2], s: f32[2, 0]",
            "y = index_add(b, i, s, axis=0)",
        ),
        (
            "b: f32[0, 3], i: i64[2], s: f32[0, 2]",
            "y = index_add(b, i, s, axis=1)",
        ),
        (
            "t: f32[5, 4], i: i64[0], o: i64[3]",
            "y = embedding_bag(t, i, o, mode=\"mean\")",
        ),
        (
            "t: f32[5, 0], i: i64[4], o: i64[2]",
            "y = embedding_bag(t, i, o)",
        ),
        // Indices with no bag at all: an error on every target (the simulator's check
        // kernel over an i64 constant once failed to lower).
        (
            "t: f32[5, 4], i: i64[3], o: i64[0]",
            "y = embedding_bag(t, i, o)",
        ),
        (
            "x: f32[2]",
            "y = full(shape=[0, 3], value=1.0)\n  z = add(y, 1.0)",
        ),
        ("x: f32[2]", "y = arange(start=3, end=3)"),
        (
            "x: f32[2]",
            "y = add(arange(start=5.0, end=2.0, dtype=f32), 1.0)",
        ),
        (
            "x: f32[2]",
            "y = pad(arange(end=0, dtype=f32), pads=[2, 1], value=4.0)",
        ),
        // Composites over empty tensors (decomposed into reductions).
        ("x: f32[0, 4]", "y = softmax(x, axis=-1)"),
        ("x: f32[4, 0]", "y = softmax(x, axis=-1)"),
        ("x: f32[4, 0]", "y = log_softmax(x, axis=1)"),
        ("x: f32[0, 3]", "y = softmax(x, axis=0)"),
        (
            "x: f32[3, 0], w: f32[0], b: f32[0]",
            "y = layer_norm(x, w, b)",
        ),
        (
            "x: f32[0, 4], w: f32[4], b: f32[4]",
            "y = layer_norm(x, w, b)",
        ),
        ("x: f32[2, 0], w: f32[0]", "y = rms_norm(x, w)"),
        ("x: f32[0, 2]", "y = silu(x)"),
    ]
    .map(|(p, b)| graph(p, &format!("  {b}\n  return y")));
    check_all(&sources);
}

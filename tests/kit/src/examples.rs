//! The repository's examples: `examples/*.fg` graphs and `examples/kernels/*.tile`
//! kernels, loaded by name with the path shown in diagnostics relative to the root.

use ferrite_ir::Graph;
use ferrite_passes::decompose::decompose;
use std::path::{Path, PathBuf};

/// The repository root (the workspace folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The names (file stems) of every `examples/*.fg`, sorted.
pub fn example_names() -> Vec<String> {
    let dir = repo_root().join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "fg").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    names
}

/// The source of `examples/<name>.fg`, with the path to show in messages.
pub fn example_source(name: &str) -> (String, String) {
    let shown = format!("examples/{name}.fg");
    let path = repo_root().join(&shown);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    (shown, src)
}

/// The parsed graph of `examples/<name>.fg`.
pub fn example_graph(name: &str) -> Graph {
    let (shown, src) = example_source(name);
    ferrite_ir::parse(&shown, &src).unwrap_or_else(|d| panic!("{d}"))
}

/// The graph of `examples/<name>.fg`, decomposed to primitive ops.
pub fn example(name: &str) -> Graph {
    decompose(&example_graph(name)).unwrap_or_else(|e| panic!("examples/{name}.fg: {e}"))
}

/// The source of `examples/kernels/<name>.tile`, with the path to show in messages.
pub fn tile_example_source(name: &str) -> (String, String) {
    let shown = format!("examples/kernels/{name}.tile");
    let path = repo_root().join(&shown);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    (shown, src)
}

/// The `.fg` text of a decoder of `layers` pre-norm blocks laid out like
/// `examples/transformer_block.fg` (GPT-2 without attention biases: causal softmax
/// attention, a 4x GELU MLP), sequence `seq`, width `d_model`, `heads` heads; each layer
/// has its own weights as parameters. `decoder_source(12, 128, 768, 12)` is GPT-2 small's
/// shape, for compile-time benches and the tests that identical layers compile once.
pub fn decoder_source(layers: usize, seq: usize, d_model: usize, heads: usize) -> String {
    use std::fmt::Write;
    assert!(layers > 0 && heads > 0 && d_model.is_multiple_of(heads));
    let (d, ff, hd) = (d_model, 4 * d_model, d_model / heads);
    let mut params = vec![format!("x: f32[{seq}, {d}]")];
    for l in 0..layers {
        for (name, ty) in [
            ("ln1_w", format!("[{d}]")),
            ("ln1_b", format!("[{d}]")),
            ("w_q", format!("[{d}, {d}]")),
            ("w_k", format!("[{d}, {d}]")),
            ("w_v", format!("[{d}, {d}]")),
            ("w_o", format!("[{d}, {d}]")),
            ("ln2_w", format!("[{d}]")),
            ("ln2_b", format!("[{d}]")),
            ("w_fc", format!("[{d}, {ff}]")),
            ("b_fc", format!("[{ff}]")),
            ("w_proj", format!("[{ff}, {d}]")),
            ("b_proj", format!("[{d}]")),
        ] {
            params.push(format!("l{l}_{name}: f32{ty}"));
        }
    }
    let mut s = format!(
        "graph decoder_{layers}({}) -> f32[{seq}, {d}] {{\n",
        params.join(", ")
    );
    let scale = 1.0 / (hd as f64).sqrt();
    let _ = writeln!(s, "  pos = arange(start=0, end={seq})");
    let _ = writeln!(
        s,
        "  causal = le(reshape(pos, shape=[1, {seq}]), reshape(pos, shape=[{seq}, 1]))"
    );
    let mut x = "x".to_string();
    for l in 0..layers {
        let p = |n: &str| format!("l{l}_{n}");
        let heads_of = |w: &str| {
            format!(
                "permute(reshape(matmul(l{l}_h, {}), shape=[{seq}, {heads}, {hd}]), dims=[1, 0, 2])",
                p(w)
            )
        };
        let _ = writeln!(
            s,
            "  l{l}_h = layer_norm({x}, {}, {})",
            p("ln1_w"),
            p("ln1_b")
        );
        let _ = writeln!(s, "  l{l}_q = {}", heads_of("w_q"));
        let _ = writeln!(s, "  l{l}_k = {}", heads_of("w_k"));
        let _ = writeln!(s, "  l{l}_v = {}", heads_of("w_v"));
        let _ = writeln!(
            s,
            "  l{l}_s = mul(matmul(l{l}_q, transpose(l{l}_k, dim0=-2, dim1=-1)), {scale:?})"
        );
        let _ = writeln!(
            s,
            "  l{l}_a = softmax(where(causal, l{l}_s, -inf), axis=-1)"
        );
        let _ = writeln!(
            s,
            "  l{l}_c = reshape(permute(matmul(l{l}_a, l{l}_v), dims=[1, 0, 2]), shape=[{seq}, {d}])"
        );
        let _ = writeln!(s, "  l{l}_x1 = add({x}, matmul(l{l}_c, {}))", p("w_o"));
        let _ = writeln!(
            s,
            "  l{l}_h2 = layer_norm(l{l}_x1, {}, {})",
            p("ln2_w"),
            p("ln2_b")
        );
        let _ = writeln!(
            s,
            "  l{l}_f = add(matmul(gelu(add(matmul(l{l}_h2, {}), {})), {}), {})",
            p("w_fc"),
            p("b_fc"),
            p("w_proj"),
            p("b_proj")
        );
        let _ = writeln!(s, "  l{l}_y = add(l{l}_x1, l{l}_f)");
        x = format!("l{l}_y");
    }
    let _ = writeln!(s, "  return {x}\n}}");
    s
}

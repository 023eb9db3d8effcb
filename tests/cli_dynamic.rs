//! The `ferrite` binary on graphs with size symbols: `check`, `fmt`, `run` and
//! `compile` bind them from `--input` shapes and `--dim`, and report broken bindings
//! as located user errors.

use ferrite::ir::npy;
use ferrite::ir::Tensor;
use ferrite::{DType, TensorType};

mod common;
use common::{assert_exit, ferrite, stderr, stdout, Scratch};

const BLOCK: &str = "examples/dynamic/transformer_block.fg";

const SCALE: &str = "\
dims N in [1, 8]
graph scale(x: f32[B, N]) -> f32[B, N] {
  y = mul(x, reshape(arange(end=N, dtype=f32), shape=[1, N]))
  return y
}
";

#[test]
fn check_and_fmt_take_a_symbolic_graph_as_written() {
    let o = ferrite(&["check", BLOCK]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        format!("{BLOCK}: ok (graph transformer_block_dynamic: 13 params, 31 ops, 1 output; size symbols B in 1..=32, T in 1..=512, 0 constraints)\n")
    );
    // The same ops as the static block.
    let o = ferrite(&["check", "examples/transformer_block.fg"]);
    assert!(
        stdout(&o).contains("13 params, 31 ops, 1 output"),
        "{}",
        stdout(&o)
    );
    let s = Scratch::new("dyn-fmt");
    let f = s.file("scale.fg", SCALE);
    let o = ferrite(&["fmt", &f]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), SCALE);
}

#[test]
fn run_binds_symbols_from_inputs_and_dims() {
    let s = Scratch::new("dyn-run");
    let f = s.file("scale.fg", SCALE);
    let x = Tensor::from_f64(&TensorType::new(DType::F32, vec![2, 3]).unwrap(), &[1.0; 6]);
    let xf = s.file("x.npy", npy::encode(&x));
    let out = s.path("out");
    let o = ferrite(&[
        "run",
        &f,
        "--target",
        "cpu",
        "--input",
        &format!("x={xf}"),
        "--out",
        &out,
    ]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.contains("symbolic graph (x: f32[B, N]) specialized at B=2, N=3"),
        "{text}"
    );
    let y = npy::decode(&std::fs::read(format!("{out}/y.npy")).unwrap()).unwrap();
    assert_eq!(y.to_f64(), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    // Without inputs, --dim binds the symbols (the inputs are then random).
    let o = ferrite(&[
        "run", &f, "--target", "interp", "--dim", "B=1", "--dim", "N=4",
    ]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("y: f32[1, 4]"), "{}", stdout(&o));
    // An unbound symbol, a symbol the graph lacks, a value out of range: exit 1.
    let o = ferrite(&["run", &f, "--dim", "N=4"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains(
            "size symbol `B` is not bound: give --dim B=N, or an --input whose shape has it"
        ),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["run", &f, "--dim", "K=4"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("--dim K: the graph has no size symbol `K` (its symbols: N, B)"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["run", &f, "--dim", "B=1", "--dim", "N=9"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains(&format!("N = 9 but N must be in 1..=8 ({f}:1:6)")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compile_prints_the_symbolic_types_and_the_binding() {
    let o = ferrite(&[
        "compile", BLOCK, "--target", "cpu", "--dim", "B=2", "--dim", "T=16",
    ]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("specialized at B=2, T=16"), "{text}");
    assert!(text.contains("output 0: f32[B, T, 256]"), "{text}");
    // Which path `compile_dynamic` takes, and why.
    assert!(
        text.contains("cut at its 1 attentions into row graphs over B*T (up to 16384 rows)"),
        "{text}"
    );
    let o = ferrite(&[
        "compile",
        "examples/dynamic/mlp_block.fg",
        "--dim",
        "B=2",
        "--dim",
        "T=16",
    ]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.contains("as a row graph over B*T (up to 16384 rows), `compile_dynamic` runs every binding on one cpu program"),
        "{text}"
    );
    let s = Scratch::new("dyn-compile");
    let f = s.file(
        "r.fg",
        "graph r(x: f32[T, 6]) {\n  y = reshape(x, shape=[-1, 4])\n  return y\n}\n",
    );
    let o = ferrite(&["compile", &f, "--dim", "T=2"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains(&format!(
            "requires: 6*T divisible by 4 for reshape ({f}:2:7)"
        )),
        "{}",
        stdout(&o)
    );
    let o = ferrite(&["compile", &f, "--dim", "T=3"]);
    assert_exit(&o, 1);
    assert_eq!(
        stderr(&o).trim_end(),
        format!("error: T = 3 but reshape needs 6*T divisible by 4 ({f}:2:7)")
    );
}

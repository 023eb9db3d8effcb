//! Constant tensors in the graph IR: building, verifying, interpreting, and their
//! `.fg` forms (inline values, and tensors of a weights file through a `WeightSource`).

use ferrite_ir::text::{parse_with, MemoryWeights};
use ferrite_ir::{interpret, parse, print, verify, Constant, DType, Graph, Op, Tensor, TensorType};
use std::sync::Arc;

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec()).unwrap()
}

fn weights(pairs: &[(&str, Tensor)]) -> MemoryWeights {
    let mut w = MemoryWeights::default();
    for (k, t) in pairs {
        w.tensors.insert(k.to_string(), Arc::new(t.clone()));
    }
    w
}

#[test]
fn a_constant_is_typed_by_its_tensor_and_shared_by_clones() {
    let mut g = Graph::new("g");
    let x = g.add_param("x", ty(DType::F32, &[2, 3])).unwrap();
    let w = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap();
    let c = g.add_constant(Constant::new(w), Some("w".into())).unwrap();
    assert_eq!(g.ty(c), &ty(DType::F32, &[3]));
    let y = g
        .add(Op::Binary(ferrite_ir::BinaryOp::Mul), &[x, c], None)
        .unwrap();
    g.outputs = vec![y];
    verify(&g).unwrap();
    assert_eq!(g.op_count(), 1);
    let h = g.clone();
    let (a, b) = (
        g.node(c).op.constant().unwrap(),
        h.node(c).op.constant().unwrap(),
    );
    assert!(
        Arc::ptr_eq(a.shared(), b.shared()),
        "a clone shares the tensor"
    );
    let out = interpret(&g, &[Tensor::from_f32(&[2, 3], vec![1.0; 6]).unwrap()]).unwrap();
    assert_eq!(out[0].to_f64(), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);

    // A node that disagrees with its tensor fails verify.
    let mut bad = g.clone();
    bad.nodes[c.index()].ty = ty(DType::F32, &[4]);
    assert!(verify(&bad).is_err());
    let mut bad = g.clone();
    bad.nodes[c.index()].inputs = vec![x];
    assert!(verify(&bad).is_err());
}

#[test]
fn inline_constants_round_trip_bit_for_bit() {
    let src = "graph g(x: f32[2]) {\n  \
        c = constant(values=[0.1, -0.0, inf, nan, 1e-7, 3.4028235e38], dtype=f32, shape=[2, 3])\n  \
        i = constant(values=[1, -2, 9223372036854775807], dtype=i64, shape=[3])\n  \
        b = constant(values=[true, false], dtype=bool, shape=[2])\n  \
        h = constant(values=[0.099975586, 65504.0], dtype=f16, shape=[2])\n  \
        s = constant(values=[2.5], dtype=bf16, shape=[])\n  \
        return c, i, b, h, add(x, constant(values=[1.0, 2.0], dtype=f32, shape=[2])), s\n}\n";
    let g = parse("g.fg", src).unwrap();
    verify(&g).unwrap();
    assert_eq!(print(&g), src);
    let again = parse("g.fg", &print(&g)).unwrap();
    assert_eq!(g, again);
    // Defaults: the dtype as torch.tensor picks it, the shape `[n]`.
    let g = parse(
        "d.fg",
        "graph d() {\n  a = constant(values=[1, 2])\n  b = constant(values=[1, 2.5])\n  c = constant(values=[true])\n  return a, b, c\n}\n",
    )
    .unwrap();
    let types: Vec<String> = g.outputs.iter().map(|&o| g.ty(o).to_string()).collect();
    assert_eq!(types, ["i64[2]", "f32[2]", "bool[1]"]);
}

#[test]
fn every_f32_prints_back_to_its_bits() {
    let mut rng = ferrite_ir::SplitMix64(7);
    // NaN prints as `nan`, so only its NaN-ness survives text, not its payload.
    let values: Vec<f32> = (0..20000)
        .map(|_| f32::from_bits(rng.next() as u32))
        .filter(|v| !v.is_nan())
        .collect();
    let t = Tensor::from_f32(&[values.len()], values).unwrap();
    let mut g = Graph::new("g");
    let c = g.add_constant(Constant::new(t), None).unwrap();
    g.outputs = vec![c];
    let again = parse("g.fg", &print(&g)).unwrap();
    assert_eq!(g, again);
}

#[test]
fn named_constants_come_from_the_weights_file() {
    let w1 = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let src = "weights \"m.safetensors\"\ngraph m(x: f32[2]) {\n  \
        w = constant(name=\"fc1.weight\", dtype=f32, shape=[2, 2])\n  \
        return matmul(x, w)\n}\n";
    let mut source = weights(&[("fc1.weight", w1.clone())]);
    let g = parse_with("m.fg", src, &mut source).unwrap();
    assert_eq!(g.weights.as_deref(), Some("m.safetensors"));
    assert_eq!(print(&g), src);
    let out = interpret(&g, &[Tensor::from_f32(&[2], vec![1.0, 1.0]).unwrap()]).unwrap();
    assert_eq!(out[0].to_f64(), vec![4.0, 6.0]);
    // The type may be left out: it comes from the file.
    let bare = src.replace(", dtype=f32, shape=[2, 2]", "");
    let g2 = parse_with("m.fg", &bare, &mut source).unwrap();
    assert_eq!(print(&g2), src);
}

#[test]
fn constant_mistakes_are_located() {
    let w = Tensor::from_f32(&[2, 2], vec![0.0; 4]).unwrap();
    let cases: [(&str, &str); 11] = [
        ("  c = constant(name=\"nope\")", "3:16: error: constant \"nope\": \"m.safetensors\" has no tensor named \"nope\""),
        ("  c = constant(name=\"w\", dtype=i32)", "3:26: error: constant \"w\" is declared i32 but \"m.safetensors\" holds it as f32[2, 2]"),
        ("  c = constant(name=\"w\", shape=[4])", "3:26: error: constant \"w\" is declared with shape [4] but \"m.safetensors\" holds it as f32[2, 2]"),
        ("  c = constant(values=[1.0, 2.0], shape=[3])", "3:16: error: constant: f32[3] holds 3 values, but 2 are given"),
        ("  c = constant(values=[1.5], dtype=i32)", "3:16: error: constant: value 0 (`1.5`) does not fit in i32"),
        ("  c = constant(values=[70000.0], dtype=f16)", "3:16: error: constant: value 0 (`70000.0`) does not fit in f16"),
        ("  c = constant()", "3:7: error: constant needs `name=\"KEY\"` (a tensor of the weights file) or `values=[..]`"),
        ("  c = constant(name=\"w\", values=[1])", "3:26: error: constant: give `name=` (a tensor of the weights file) or `values=`, not both"),
        ("  c = constant(x)", "3:16: error: constant takes no operands: its tensor is `name=\"KEY\"` (in the weights file) or `values=[..]`"),
        ("  c = constant(valeus=[1])", "3:16: error: constant: unknown attribute `valeus`; did you mean `values`?"),
        ("  c = constnat(values=[1])", "3:7: error: unknown op `constnat`; did you mean `constant`?"),
    ];
    let mut bad = Vec::new();
    for (line, want) in cases {
        let src =
            format!("weights \"m.safetensors\"\ngraph m(x: f32[2]) {{\n{line}\n  return c\n}}\n");
        let mut source = weights(&[("w", w.clone())]);
        let e = parse_with("m.fg", &src, &mut source)
            .unwrap_err()
            .to_string();
        let first = e.lines().next().unwrap();
        if first != format!("m.fg:{want}") {
            bad.push(format!("{line}\n  got  {first}\n  want m.fg:{want}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // A named constant without a weights line, and a weights line without a source.
    let e = parse(
        "m.fg",
        "graph m() {\n  c = constant(name=\"w\")\n  return c\n}\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "m.fg:2:16: error: constant \"w\" refers to the weights file, but the file names none"
        ),
        "{e}"
    );
    let e = parse(
        "m.fg",
        "weights \"m.safetensors\"\ngraph m() {\n  return 1.0\n}\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("m.fg:1:9: error: weights \"m.safetensors\": the graph's weights are in"),
        "{e}"
    );
}

//! Folding a constant batch norm (or per-channel scale and shift) into the constant
//! weight of the conv before it: which graphs fold, which do not, and that the folded
//! graph computes what the original does (interpreter against interpreter, and the
//! loop IR of the folded graph against the interpreter).

use ferrite_ir::{
    interpret, BinaryOp, Constant, DType, Graph, Op, Scalar, Tensor, TensorType, UnaryOp, ValueId,
};
use ferrite_passes::decompose::decompose;
use ferrite_passes::fold::fold_conv_epilogues;
use ferrite_testkit::check_against_interpreter;

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec()).unwrap()
}

fn constant(g: &mut Graph, shape: &[usize], seed: u64) -> ValueId {
    let t = Tensor::random(&f32s(shape), seed);
    g.add_constant(Constant::new(t), None).unwrap()
}

/// A positive variance: `0.5 + |random|`.
fn variance(g: &mut Graph, c: usize, seed: u64) -> ValueId {
    let t = Tensor::random(&f32s(&[c]), seed);
    let v: Vec<f64> = t.to_f64().iter().map(|x| 0.5 + x.abs()).collect();
    g.add_constant(Constant::new(Tensor::from_f64(&f32s(&[c]), &v)), None)
        .unwrap()
}

fn conv(g: &mut Graph, x: ValueId, w: ValueId, groups: i64) -> ValueId {
    let op = Op::Conv {
        stride: None,
        padding: Some(vec![1, 1]),
        dilation: None,
        groups,
    };
    g.add(op, &[x, w], None).unwrap()
}

fn bn(g: &mut Graph, y: ValueId, c: usize, seed: u64) -> ValueId {
    let s = constant(g, &[c], seed);
    let t = constant(g, &[c], seed + 1);
    let m = constant(g, &[c], seed + 2);
    let v = variance(g, c, seed + 3);
    g.add(Op::BatchNorm { eps: 1e-5 }, &[y, s, t, m, v], None)
        .unwrap()
}

fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.nodes.iter().filter(|n| pred(&n.op)).count()
}

/// The folded graph against the original on the interpreter, and its decomposed form
/// in the loop IR against the interpreter.
fn check_same(original: &Graph, folded: &Graph) {
    for seed in [3, 9] {
        let inputs = ferrite_testkit::random_inputs(original, seed);
        let want = interpret(original, &inputs).unwrap();
        let got = interpret(folded, &inputs).unwrap();
        for (a, b) in got.iter().zip(&want) {
            a.check_close(b, 1e-5, 1e-5)
                .unwrap_or_else(|e| panic!("{e}\n{}", ferrite_ir::print(folded)));
        }
        let d = decompose(folded).unwrap();
        check_against_interpreter(&d, &inputs).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn a_constant_batch_norm_folds_into_the_conv() {
    for (c_in, groups) in [(3, 1), (6, 6)] {
        let mut g = Graph::new("f");
        let x = g.add_param("x", f32s(&[2, c_in, 7, 7])).unwrap();
        let w = constant(&mut g, &[6, c_in / groups as usize, 3, 3], 1);
        let y = conv(&mut g, x, w, groups);
        let z = bn(&mut g, y, 6, 10);
        let r = g.add(Op::Unary(UnaryOp::Relu), &[z], None).unwrap();
        g.outputs = vec![r];
        let (f, n) = fold_conv_epilogues(&g, 1).unwrap().expect("folds");
        assert_eq!(n, 1);
        let text = ferrite_ir::print(&f);
        assert_eq!(
            count(&f, |op| matches!(op, Op::BatchNorm { .. })),
            0,
            "{text}"
        );
        assert_eq!(count(&f, |op| matches!(op, Op::Conv { .. })), 1, "{text}");
        // conv(x, W') + t, then the relu.
        assert_eq!(f.op_count(), 3, "{text}");
        let conv_node = f.nodes.iter().find(|n| matches!(n.op, Op::Conv { .. }));
        let w2 = f.node(conv_node.unwrap().inputs[1]);
        let old = g.node(w).op.constant().unwrap().tensor().to_f64();
        let new = w2
            .op
            .constant()
            .expect("a constant weight")
            .tensor()
            .to_f64();
        assert_ne!(old, new, "the weight is scaled");
        check_same(&g, &f);
    }
}

/// The ONNX importer's form of a conv bias and batch norm: `(conv + b - mean) *
/// rsqrt(var + eps) * scale + shift`, every vector reshaped to `[C, 1, 1]`.
#[test]
fn the_onnx_form_of_bias_and_batch_norm_folds() {
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let shaped = |g: &mut Graph, v: ValueId| {
        g.add(
            Op::Reshape {
                shape: vec![4, 1, 1],
            },
            &[v],
            None,
        )
        .unwrap()
    };
    let b = constant(&mut g, &[4], 2);
    let b = shaped(&mut g, b);
    let y = g.add(Op::Binary(BinaryOp::Add), &[y, b], None).unwrap();
    let (m, v, s, t) = (
        constant(&mut g, &[4], 3),
        variance(&mut g, 4, 4),
        constant(&mut g, &[4], 5),
        constant(&mut g, &[4], 6),
    );
    let (m, v, s, t) = (
        shaped(&mut g, m),
        shaped(&mut g, v),
        shaped(&mut g, s),
        shaped(&mut g, t),
    );
    let eps = g.add_literal(Scalar::Float(1e-5), DType::F32).unwrap();
    let ve = g.add(Op::Binary(BinaryOp::Add), &[v, eps], None).unwrap();
    let inv = g.add(Op::Unary(UnaryOp::Rsqrt), &[ve], None).unwrap();
    let d = g.add(Op::Binary(BinaryOp::Sub), &[y, m], None).unwrap();
    let d = g.add(Op::Binary(BinaryOp::Mul), &[d, inv], None).unwrap();
    let d = g.add(Op::Binary(BinaryOp::Mul), &[d, s], None).unwrap();
    let out = g.add(Op::Binary(BinaryOp::Add), &[d, t], Some("out".into()));
    g.outputs = vec![out.unwrap()];
    let (f, _) = fold_conv_epilogues(&g, 1).unwrap().expect("folds");
    let text = ferrite_ir::print(&f);
    assert_eq!(f.op_count(), 2, "conv(x, W') + t:\n{text}");
    assert_eq!(count(&f, |op| matches!(op, Op::Unary(_))), 0, "{text}");
    assert_eq!(f.output_name(0), "out");
    check_same(&g, &f);
}

#[test]
fn what_is_not_constant_or_is_read_elsewhere_stays() {
    // Batch norm vectors that are parameters.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let s = g.add_param("s", f32s(&[4])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let (t, m, v) = (
        constant(&mut g, &[4], 2),
        constant(&mut g, &[4], 3),
        variance(&mut g, 4, 4),
    );
    let z = g
        .add(Op::BatchNorm { eps: 1e-5 }, &[y, s, t, m, v], None)
        .unwrap();
    g.outputs = vec![z];
    assert!(fold_conv_epilogues(&g, 1).unwrap().is_none());

    // A weight that is a parameter.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = g.add_param("w", f32s(&[4, 3, 3, 3])).unwrap();
    let y = conv(&mut g, x, w, 1);
    let z = bn(&mut g, y, 4, 10);
    g.outputs = vec![z];
    assert!(fold_conv_epilogues(&g, 1).unwrap().is_none());

    // The conv's result also returned: it must keep its value.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let z = bn(&mut g, y, 4, 10);
    g.outputs = vec![z, y];
    assert!(fold_conv_epilogues(&g, 1).unwrap().is_none());

    // A scale that varies along a spatial axis is not per channel.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let k = constant(&mut g, &[1, 6], 5);
    let z = g.add(Op::Binary(BinaryOp::Mul), &[y, k], None).unwrap();
    g.outputs = vec![z];
    assert!(fold_conv_epilogues(&g, 1).unwrap().is_none());

    // A bias add alone is already one op: nothing to fold.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let b = constant(&mut g, &[4, 1, 1], 5);
    let z = g.add(Op::Binary(BinaryOp::Add), &[y, b], None).unwrap();
    g.outputs = vec![z];
    assert!(fold_conv_epilogues(&g, 1).unwrap().is_none());
}

#[test]
fn a_chain_folds_up_to_a_value_read_elsewhere() {
    // z = bn(conv) is also returned, so the mul after it stays; the batch norm folds.
    let mut g = Graph::new("f");
    let x = g.add_param("x", f32s(&[1, 3, 6, 6])).unwrap();
    let w = constant(&mut g, &[4, 3, 3, 3], 1);
    let y = conv(&mut g, x, w, 1);
    let z = bn(&mut g, y, 4, 10);
    let k = constant(&mut g, &[4, 1, 1], 20);
    let u = g.add(Op::Binary(BinaryOp::Mul), &[z, k], None).unwrap();
    g.outputs = vec![u, z];
    let (f, _) = fold_conv_epilogues(&g, 1).unwrap().expect("folds");
    let text = ferrite_ir::print(&f);
    assert_eq!(f.op_count(), 3, "conv, + t, * k:\n{text}");
    check_same(&g, &f);
}

/// The weights of many convs are scaled on several threads: the folded graph is the
/// one a single thread makes, constant for constant, whatever the order they finish in.
#[test]
fn folding_on_several_threads_gives_the_single_thread_graph() {
    let mut g = Graph::new("f");
    let mut x = g.add_param("x", f32s(&[1, 4, 6, 6])).unwrap();
    for layer in 0..9u64 {
        let w = constant(&mut g, &[4, 4, 3, 3], 100 + layer);
        let y = conv(&mut g, x, w, 1);
        // Every third layer has an overflowing scale and is left as it is.
        let z = if layer % 3 == 2 {
            // 3e38 * 1e3 is finite in f64 but scales the weight past f32's range.
            let big = g.add_literal(Scalar::Float(3e38), DType::F32).unwrap();
            let more = g.add_literal(Scalar::Float(1e3), DType::F32).unwrap();
            let y = g.add(Op::Binary(BinaryOp::Mul), &[y, big], None).unwrap();
            g.add(Op::Binary(BinaryOp::Mul), &[y, more], None).unwrap()
        } else {
            bn(&mut g, y, 4, 10 * layer)
        };
        x = g.add(Op::Unary(UnaryOp::Relu), &[z], None).unwrap();
    }
    g.outputs = vec![x];
    let (one, n) = fold_conv_epilogues(&g, 1).unwrap().expect("folds");
    assert_eq!(n, 6);
    for threads in [2, 4, 16] {
        let (many, m) = fold_conv_epilogues(&g, threads).unwrap().expect("folds");
        assert_eq!(m, n);
        assert_eq!(
            ferrite_ir::print(&many),
            ferrite_ir::print(&one),
            "{threads} threads"
        );
    }
    check_same(&g, &one);
}

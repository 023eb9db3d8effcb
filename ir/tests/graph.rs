//! The graph's name index: names stay unique, however a graph is built.

use ferrite_ir::types::TensorType;
use ferrite_ir::{parse, verify, DType, Graph, Node, Op, UnaryOp, ValueId};

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec()).unwrap()
}

/// Reliability finding F12: every parameter was checked against every node before it by
/// a linear name search, so `check` of 200k parameters took 38 s. With the index this
/// file parses in a blink even unoptimized; a quadratic search would take many minutes.
#[test]
fn two_hundred_thousand_parameters_parse() {
    let n = 200_000;
    let params: Vec<String> = (0..n).map(|i| format!("p{i}: f32[1]")).collect();
    let src = format!("graph g({}) {{\n  return p0\n}}\n", params.join(", "));
    let g = parse("params.fg", &src).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(g.params.len(), n);
    assert_eq!(g.find("p123456"), Some(g.params[123_456]));
    verify(&g).unwrap();
    // A repeated parameter is still refused, at its place.
    let dup = format!(
        "graph g({}, p199999: f32[1]) {{\n  return p0\n}}\n",
        params.join(", ")
    );
    let e = parse("params.fg", &dup).unwrap_err().to_string();
    assert!(e.contains("p199999"), "{e}");
}

#[test]
fn names_are_unique_through_every_way_of_adding() {
    let mut g = Graph::new("g");
    let x = g.add_param("x", f32s(&[2])).unwrap();
    let y = g
        .add(Op::Unary(UnaryOp::Relu), &[x], Some("y".to_string()))
        .expect("a new name");
    assert!(g.add_param("x", f32s(&[2])).is_err());
    assert!(g
        .add(Op::Unary(UnaryOp::Relu), &[y], Some("y".into()))
        .is_err());
    assert!(g
        .add(Op::Unary(UnaryOp::Relu), &[y], Some("2bad".into()))
        .is_err());

    // `set_name` names an unnamed value once, with a new valid name.
    let z = g.add(Op::Unary(UnaryOp::Relu), &[y], None).unwrap();
    assert!(g.set_name(z, "x").is_err());
    g.set_name(z, "z").unwrap();
    assert!(g.set_name(z, "w").is_err());
    assert_eq!(g.find("z"), Some(z));

    // Nodes appended directly are found, and their names are taken.
    g.nodes.push(Node {
        op: Op::Unary(UnaryOp::Relu),
        inputs: vec![z],
        ty: f32s(&[2]),
        name: Some("direct".into()),
    });
    let direct = ValueId(g.nodes.len() as u32 - 1);
    assert_eq!(g.find("direct"), Some(direct));
    assert!(g
        .add(Op::Unary(UnaryOp::Relu), &[z], Some("direct".into()))
        .is_err());
    assert_eq!(g.find("nothing"), None);

    // A node renamed directly no longer answers to its old name.
    g.nodes[z.index()].name = Some("renamed".into());
    assert_eq!(g.find("z"), None);
    g.outputs.push(direct);
    verify(&g).unwrap();
}

#[test]
fn the_index_does_not_make_graphs_unequal() {
    let mut a = Graph::new("g");
    let x = a.add_param("x", f32s(&[2])).unwrap();
    a.add(Op::Unary(UnaryOp::Relu), &[x], Some("y".into()))
        .unwrap();
    let mut b = Graph::new("g");
    b.nodes = a.nodes.clone();
    b.params = a.params.clone();
    assert_eq!(a, b);
}

/// A literal added through the API must fit its dtype exactly as one the parser reads
/// (tests/errors/literal_overflows_f16.fg): `3e38` is no `f16` and `2^31` no `i32`,
/// where they used to become an infinity or wrap on the way to a backend.
#[test]
fn literals_added_through_the_api_must_fit_their_dtype() {
    use ferrite_ir::Scalar;
    let mut g = Graph::new("g");
    for (value, dtype, want) in [
        (
            Scalar::Float(3e38),
            DType::F16,
            "literal `3e38` does not fit in f16",
        ),
        (
            Scalar::Float(1e39),
            DType::F32,
            "literal `1e39` does not fit in f32",
        ),
        (
            Scalar::Int(1 << 31),
            DType::I32,
            "literal `2147483648` does not fit in i32",
        ),
    ] {
        let e = g.add_literal(value, dtype).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        let src = format!(
            "graph g(x: {dtype}[2]) {{\n  y = mul(x, {})\n  return y\n}}\n",
            match value {
                Scalar::Int(i) => i.to_string(),
                v => format!("{:?}", v.as_f64()),
            }
        );
        let d = parse("lit.fg", &src).unwrap_err().to_string();
        assert!(d.contains("does not fit in"), "{d}");
    }
    // What fits is kept: the largest f16, infinities, i32's extremes.
    g.add_literal(Scalar::Float(65504.0), DType::F16).unwrap();
    g.add_literal(Scalar::Float(f64::NEG_INFINITY), DType::F16)
        .unwrap();
    g.add_literal(Scalar::Int(i32::MIN as i64), DType::I32)
        .unwrap();
}

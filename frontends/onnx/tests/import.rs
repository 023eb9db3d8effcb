//! The importer on small models built here with prost: names, folding, symbolic
//! dims, refusals, and hostile files (bad external-data locations, sizes that do not
//! match the bytes, nesting beyond the decoder's limit).

use ferrite_ir::{interpret, DType, Op, Tensor, TensorType};
use ferrite_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto, tensor_shape_proto, type_proto, AttributeProto,
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use ferrite_onnx::{import, Error, ExternalData, NoExternalData, Options};
use prost::Message;

fn value(name: &str, elem: i32, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Ok(v) => tensor_shape_proto::dimension::Value::DimValue(*v),
                Err(p) => tensor_shape_proto::dimension::Value::DimParam(p.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const F32: i32 = tensor_proto::DataType::Float as i32;
const I64: i32 = tensor_proto::DataType::Int64 as i32;

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    model_at(17, nodes, inputs, outputs, inits)
}

fn model_at(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![v.len() as i64],
        data_type: Some(I64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_f32(shape, v).unwrap()
}

#[test]
fn names_outside_the_syntax_are_mapped_and_kept() {
    let bytes = model(
        vec![node("Add", &["x:0", "1y"], &["out/0"])],
        vec![value("x:0", F32, &[Ok(2)]), value("1y", F32, &[Ok(2)])],
        vec![value("out/0", F32, &[Ok(2)])],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let names: Vec<(&str, &str)> = m
        .inputs
        .iter()
        .map(|b| (b.onnx.as_str(), b.name.as_str()))
        .collect();
    assert_eq!(names, [("x:0", "x_0"), ("1y", "_1y")]);
    assert_eq!(
        (m.outputs[0].onnx.as_str(), m.outputs[0].name.as_str()),
        ("out/0", "out_0")
    );
    let out = interpret(
        &m.graph,
        &[f32s(&[2], vec![1.0, 2.0]), f32s(&[2], vec![10.0, 20.0])],
    )
    .unwrap();
    assert_eq!(out[0], f32s(&[2], vec![11.0, 22.0]));
}

#[test]
fn symbolic_dims_need_a_value() {
    let bytes = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![value("x", F32, &[Err("batch"), Ok(3)])],
        vec![value("y", F32, &[Err("batch"), Ok(3)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        matches!(&e, Error::SymbolicDim { dim, input, axis: 0 } if dim == "batch" && input == "x"),
        "{e}"
    );
    assert!(e.to_string().contains("--dim batch=N"), "{e}");
    let mut options = Options::default();
    options.dims.insert("batch".into(), 4);
    let m = import(&bytes, &options, &mut NoExternalData).unwrap();
    assert_eq!(m.graph.ty(m.graph.params[0]).shape, [4, 3]);
}

#[test]
fn shape_computations_fold_at_import() {
    // y = Reshape(x, Concat(Shape(x)[0:1], [-1])): the shape is known at import.
    let mut shape = node("Shape", &["x"], &["s"]);
    shape.attribute.push(AttributeProto {
        name: Some("end".into()),
        i: Some(1),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    let mut concat = node("Concat", &["s", "minus1"], &["t"]);
    concat.attribute.push(AttributeProto {
        name: Some("axis".into()),
        i: Some(0),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    let bytes = model(
        vec![shape, concat, node("Reshape", &["x", "t"], &["y"])],
        vec![value("x", F32, &[Ok(2), Ok(3), Ok(4)])],
        vec![value("y", F32, &[Ok(2), Ok(12)])],
        vec![ints("minus1", &[-1])],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    // One param and one reshape: Shape, Concat and the constants are gone.
    assert_eq!(m.graph.op_count(), 1);
    assert!(matches!(
        m.graph.node(m.graph.outputs[0]).op,
        Op::Reshape { .. }
    ));
}

#[test]
fn an_operand_needed_at_import_names_the_input() {
    let bytes = model(
        vec![node("Reshape", &["x", "shape"], &["y"])],
        vec![value("x", F32, &[Ok(6)]), value("shape", I64, &[Ok(2)])],
        vec![value("y", F32, &[Ok(2), Ok(3)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        matches!(&e, Error::NeedsValue { input, .. } if input == "shape"),
        "{e}"
    );
    let mut options = Options::default();
    let ty = TensorType::new(DType::I64, vec![2]).unwrap();
    options
        .values
        .insert("shape".into(), Tensor::from_i64(&ty, &[2, 3]));
    let m = import(&bytes, &options, &mut NoExternalData).unwrap();
    assert_eq!(m.inputs.len(), 1);
    assert_eq!(m.graph.ty(m.graph.outputs[0]).shape, [2, 3]);
}

#[test]
fn gather_takes_any_rank_and_wraps_negative_indices() {
    let bytes = model(
        vec![node("Gather", &["x", "i"], &["y"])],
        vec![
            value("x", F32, &[Ok(3), Ok(2)]),
            value("i", I64, &[Ok(2), Ok(2)]),
        ],
        vec![value("y", F32, &[Ok(2), Ok(2), Ok(2)])],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let ty = TensorType::new(DType::I64, vec![2, 2]).unwrap();
    let x = f32s(&[3, 2], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let out = interpret(&m.graph, &[x, Tensor::from_i64(&ty, &[0, -1, 1, 2])]).unwrap();
    assert_eq!(
        out[0],
        f32s(&[2, 2, 2], vec![0.0, 1.0, 4.0, 5.0, 2.0, 3.0, 4.0, 5.0])
    );
}

#[test]
fn unsupported_ops_name_the_node_and_opset() {
    let mut n = node("MaxUnpool", &["x"], &["v"]);
    n.name = Some("unpool".into());
    let bytes = model(
        vec![n],
        vec![value("x", F32, &[Ok(4)])],
        vec![value("v", F32, &[Ok(1)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node `unpool` (MaxUnpool, opset 17): op MaxUnpool is not supported"
    );
    assert!(!e.is_internal());
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

fn body(nodes: Vec<NodeProto>, inputs: &[&str], outputs: &[&str]) -> GraphProto {
    let untyped = |n: &&str| ValueInfoProto {
        name: Some(n.to_string()),
        ..Default::default()
    };
    GraphProto {
        name: Some("body".into()),
        node: nodes,
        input: inputs.iter().map(untyped).collect(),
        output: outputs.iter().map(untyped).collect(),
        ..Default::default()
    }
}

/// `Loop(M, "", y)` whose body adds the outer `x` to `y` and also emits `y` as a scan output.
fn accumulate(trips: TensorProto) -> Vec<u8> {
    let b = body(
        vec![
            node("Identity", &["c_in"], &["c_out"]),
            node("Add", &["y_in", "x"], &["y_out"]),
            node("Identity", &["y_out"], &["scan"]),
        ],
        &["i", "c_in", "y_in"],
        &["c_out", "y_out", "scan"],
    );
    let mut l = node("Loop", &["M", "", "y"], &["y_final", "ys"]);
    l.attribute.push(graph_attr("body", b));
    model(
        vec![l],
        vec![value("x", F32, &[Ok(2)]), value("y", F32, &[Ok(2)])],
        vec![
            value("y_final", F32, &[Ok(2)]),
            value("ys", F32, &[Ok(3), Ok(2)]),
        ],
        vec![trips],
    )
}

fn scalar_i64(name: &str, v: i64) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![],
        data_type: Some(I64),
        int64_data: vec![v],
        ..Default::default()
    }
}

#[test]
fn loops_with_a_known_trip_count_unroll_and_read_outer_values() {
    let mut trips = scalar_i64("M", 3);
    let m = import(
        &accumulate(trips.clone()),
        &Options::default(),
        &mut NoExternalData,
    )
    .unwrap();
    let x = f32s(&[2], vec![1.0, 10.0]);
    let y = f32s(&[2], vec![0.5, 0.0]);
    let out = interpret(&m.graph, &[x, y]).unwrap();
    assert_eq!(out[0].to_f64(), [3.5, 30.0]);
    assert_eq!(out[1].ty.shape, [3, 2]);
    assert_eq!(out[1].to_f64(), [1.5, 10.0, 2.5, 20.0, 3.5, 30.0]);
    // Past the unroll bound: a named error, not an import that never ends.
    trips.int64_data = vec![5000];
    let e = import(&accumulate(trips), &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string().contains("node 0 (Loop, opset 17)")
            && e.to_string().contains("more than 4096 iterations"),
        "{e}"
    );
    assert!(!e.is_internal());
}

#[test]
fn control_flow_that_depends_on_data_is_refused_by_name() {
    // A trip count fed by the graph.
    let b = body(
        vec![node("Identity", &["c_in"], &["c_out"])],
        &["i", "c_in"],
        &["c_out"],
    );
    let mut l = node("Loop", &["M", ""], &[]);
    l.attribute.push(graph_attr("body", b));
    let bytes = model(
        vec![l, node("Identity", &["M"], &["y"])],
        vec![value("M", I64, &[])],
        vec![value("y", I64, &[])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string().contains("node 0 (Loop, opset 17)")
            && e.to_string()
                .contains("operand `M` must be known at import time, but it is graph input `M`"),
        "{e}"
    );
    // An If on a computed condition whose branches differ in shape.
    let then_b = body(vec![node("Identity", &["a"], &["t"])], &[], &["t"]);
    let else_b = body(vec![node("Identity", &["b"], &["e"])], &[], &["e"]);
    let mut n = node("If", &["c"], &["y"]);
    n.attribute = vec![
        graph_attr("then_branch", then_b),
        graph_attr("else_branch", else_b),
    ];
    let bytes = model(
        vec![n],
        vec![
            value("c", tensor_proto::DataType::Bool as i32, &[]),
            value("a", F32, &[Ok(2)]),
            value("b", F32, &[Ok(3)]),
        ],
        vec![value("y", F32, &[])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string().contains("node 0 (If, opset 17)")
            && e.to_string()
                .contains("the branches compute f32[2] and f32[3]"),
        "{e}"
    );
    // An error inside a branch names the branch and its node.
    let then_b = body(vec![node("Frobnicate", &["a"], &["t"])], &[], &["t"]);
    let else_b = body(vec![node("Identity", &["a"], &["e"])], &[], &["e"]);
    let mut n = node("If", &["c"], &["y"]);
    n.attribute = vec![
        graph_attr("then_branch", then_b),
        graph_attr("else_branch", else_b),
    ];
    let bytes = model(
        vec![n],
        vec![
            value("c", tensor_proto::DataType::Bool as i32, &[]),
            value("a", F32, &[Ok(2)]),
        ],
        vec![value("y", F32, &[])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string().contains(
            "in `then_branch`, node 0 (Frobnicate, opset 17): op Frobnicate is not supported"
        ),
        "{e}"
    );
}

#[test]
fn if_inlines_a_known_branch_and_selects_on_a_computed_one() {
    let then_b = body(vec![node("Neg", &["a"], &["t"])], &[], &["t"]);
    let else_b = body(vec![node("Identity", &["a"], &["e"])], &[], &["e"]);
    let mut n = node("If", &["c"], &["y"]);
    n.attribute = vec![
        graph_attr("then_branch", then_b),
        graph_attr("else_branch", else_b),
    ];
    let bool_in = || value("c", tensor_proto::DataType::Bool as i32, &[]);
    let bytes = model(
        vec![n.clone()],
        vec![bool_in(), value("a", F32, &[Ok(2)])],
        vec![value("y", F32, &[Ok(2)])],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let a = f32s(&[2], vec![1.0, -2.0]);
    for (c, want) in [(true, [-1.0, 2.0]), (false, [1.0, -2.0])] {
        let c = Tensor::from_i64(&TensorType::scalar(DType::Bool), &[c as i64]);
        let out = interpret(&m.graph, &[c, a.clone()]).unwrap();
        assert_eq!(out[0].to_f64(), want);
    }
    // With the condition known, only the branch taken is in the graph.
    let cond = TensorProto {
        name: Some("c".into()),
        dims: vec![],
        data_type: Some(tensor_proto::DataType::Bool as i32),
        int32_data: vec![0],
        ..Default::default()
    };
    let bytes = model(
        vec![n],
        vec![value("a", F32, &[Ok(2)])],
        vec![value("y", F32, &[Ok(2)])],
        vec![cond],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    assert!(m
        .graph
        .nodes
        .iter()
        .all(|n| !matches!(n.op, Op::Unary(_) | Op::Where)));
}

#[test]
fn scan_reverses_inputs_and_outputs_by_direction() {
    // A running sum over x read backwards, its outputs written backwards too.
    let b = body(
        vec![
            node("Add", &["s_in", "x_t"], &["s_out"]),
            node("Identity", &["s_out"], &["o"]),
        ],
        &["s_in", "x_t"],
        &["s_out", "o"],
    );
    let mut n = node("Scan", &["s", "x"], &["s_final", "os"]);
    n.attribute = vec![
        graph_attr("body", b),
        int_attr("num_scan_inputs", 1),
        AttributeProto {
            name: Some("scan_input_directions".into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: vec![1],
            ..Default::default()
        },
        AttributeProto {
            name: Some("scan_output_directions".into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: vec![1],
            ..Default::default()
        },
    ];
    let bytes = model(
        vec![n],
        vec![value("s", F32, &[Ok(1)]), value("x", F32, &[Ok(3), Ok(1)])],
        vec![
            value("s_final", F32, &[Ok(1)]),
            value("os", F32, &[Ok(3), Ok(1)]),
        ],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let s = f32s(&[1], vec![0.0]);
    let x = f32s(&[3, 1], vec![1.0, 2.0, 4.0]);
    let out = interpret(&m.graph, &[s, x]).unwrap();
    assert_eq!(out[0].to_f64(), [7.0]);
    // Iterations see 4, 2, 1: sums 4, 6, 7, written from the end.
    assert_eq!(out[1].to_f64(), [7.0, 6.0, 4.0]);
}

#[test]
fn old_and_future_opsets_are_refused() {
    for opset in [6, 99] {
        let bytes = model_at(
            opset,
            vec![node("Relu", &["x"], &["y"])],
            vec![value("x", F32, &[Ok(1)])],
            vec![value("y", F32, &[Ok(1)])],
            vec![],
        );
        let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("opset {opset} is not supported")),
            "{e}"
        );
    }
}

#[test]
fn nesting_beyond_the_decoders_limit_is_an_error() {
    // Graphs inside attributes inside nodes inside graphs, 200 deep.
    let mut g = GraphProto::default();
    for _ in 0..200 {
        let mut n = node("If", &[], &[]);
        n.attribute.push(AttributeProto {
            name: Some("then_branch".into()),
            g: Some(g),
            ..Default::default()
        });
        g = GraphProto {
            node: vec![n],
            ..Default::default()
        };
    }
    let bytes = ModelProto {
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec();
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(matches!(e, Error::Decode(_)), "{e}");
}

#[test]
fn tensor_sizes_are_checked_against_the_bytes_before_allocating() {
    for dims in [vec![1i64 << 40], vec![1 << 20, 1 << 20], vec![-1]] {
        let t = TensorProto {
            name: Some("w".into()),
            dims,
            data_type: Some(F32),
            raw_data: Some(vec![0u8; 8].into()),
            ..Default::default()
        };
        let bytes = model(
            vec![node("Identity", &["w"], &["y"])],
            vec![],
            vec![value("y", F32, &[])],
            vec![t],
        );
        let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
    }
    // Declared [3] but 8 bytes present.
    let t = TensorProto {
        name: Some("w".into()),
        dims: vec![3],
        data_type: Some(F32),
        raw_data: Some(vec![0u8; 8].into()),
        ..Default::default()
    };
    let bytes = model(
        vec![node("Identity", &["w"], &["y"])],
        vec![],
        vec![value("y", F32, &[Ok(3)])],
        vec![t],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(e.to_string().contains("needs 12 bytes"), "{e}");
}

/// A resolver that records what it was asked for.
struct Recorder(Vec<String>);

impl ExternalData for Recorder {
    fn check(&mut self, location: &str, _: u64, _: u64) -> Result<(), String> {
        self.0.push(location.to_string());
        Ok(())
    }

    fn read(&mut self, _: &str, _: u64, dst: &mut [u8]) -> Result<(), String> {
        dst.fill(0);
        Ok(())
    }
}

fn external(location: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut entries = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    for (k, v) in extra {
        entries.push(StringStringEntryProto {
            key: Some(k.to_string()),
            value: Some(v.to_string()),
        });
    }
    let t = TensorProto {
        name: Some("w".into()),
        dims: vec![2],
        data_type: Some(F32),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: entries,
        ..Default::default()
    };
    model(
        vec![node("Identity", &["w"], &["y"])],
        vec![],
        vec![value("y", F32, &[Ok(2)])],
        vec![t],
    )
}

#[test]
fn external_locations_outside_the_folder_are_refused_before_any_read() {
    for location in [
        "/etc/passwd",
        "../secret.bin",
        "a/../../b",
        "C:\\x",
        "",
        "w\0.bin",
    ] {
        let mut r = Recorder(vec![]);
        let e = import(&external(location, &[]), &Options::default(), &mut r).unwrap_err();
        assert!(matches!(e, Error::ExternalData { .. }), "{location:?}: {e}");
        assert!(r.0.is_empty(), "{location:?} was read");
    }
    let mut r = Recorder(vec![]);
    let e = import(
        &external("w.bin", &[("length", "12")]),
        &Options::default(),
        &mut r,
    )
    .unwrap_err();
    assert!(e.to_string().contains("`length` is 12 bytes"), "{e}");
    let e = import(
        &external("w.bin", &[("offset", "-1")]),
        &Options::default(),
        &mut r,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a byte count"), "{e}");
    assert!(r.0.is_empty());
    let m = import(
        &external("sub/w.bin", &[("offset", "16")]),
        &Options::default(),
        &mut r,
    )
    .unwrap();
    assert_eq!(r.0, ["sub/w.bin"]);
    assert_eq!(m.graph.ty(m.graph.outputs[0]).shape, [2]);
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// An Attention node of opset 23 on 4-D `q` [1, hq, 2, 4] and `k`, `v` [1, hk, 3, 4].
fn attention(hq: i64, hk: i64, attrs: Vec<AttributeProto>) -> Result<ferrite_onnx::Model, Error> {
    let mut n = node("Attention", &["q", "k", "v"], &["y"]);
    n.attribute = attrs;
    let bytes = model_at(
        23,
        vec![n],
        vec![
            value("q", F32, &[Ok(1), Ok(hq), Ok(2), Ok(4)]),
            value("k", F32, &[Ok(1), Ok(hk), Ok(3), Ok(4)]),
            value("v", F32, &[Ok(1), Ok(hk), Ok(3), Ok(4)]),
        ],
        vec![value("y", F32, &[Ok(1), Ok(hq), Ok(2), Ok(4)])],
        vec![],
    );
    import(&bytes, &Options::default(), &mut NoExternalData)
}

#[test]
fn attention_decomposes_into_matmuls_and_a_softmax() {
    let m = attention(4, 2, vec![int_attr("is_causal", 1)]).unwrap();
    let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops.iter().filter(|o| **o == "matmul").count(), 2, "{ops:?}");
    assert_eq!(
        ops.iter().filter(|o| **o == "softmax").count(),
        1,
        "{ops:?}"
    );
    assert!(
        ops.contains(&"where"),
        "the causal mask is a where: {ops:?}"
    );
    // Causal: the first query sees the first key only, so it gets V's first row.
    let q = Tensor::random(&TensorType::new(DType::F32, vec![1, 4, 2, 4]).unwrap(), 1);
    let k = Tensor::random(&TensorType::new(DType::F32, vec![1, 2, 3, 4]).unwrap(), 2);
    let v = Tensor::random(&TensorType::new(DType::F32, vec![1, 2, 3, 4]).unwrap(), 3);
    let y = interpret(&m.graph, &[q, k, v.clone()]).unwrap();
    let (y, v) = (y[0].to_f64(), v.to_f64());
    // Query heads 0 and 1 share KV head 0, heads 2 and 3 KV head 1.
    for h in 0..4 {
        let kv = h / 2;
        for d in 0..4 {
            let got = y[h * 8 + d];
            let want = v[kv * 12 + d];
            assert!((got - want).abs() < 1e-6, "head {h}: {got} vs {want}");
        }
    }
}

#[test]
fn attention_attributes_out_of_range_are_named_errors() {
    let cases = [
        (
            4,
            2,
            vec![int_attr("is_causal", 2)],
            "`is_causal` must be 0 or 1",
        ),
        (
            4,
            2,
            vec![int_attr("qk_matmul_output_mode", 7)],
            "`qk_matmul_output_mode` must be 0, 1, 2 or 3",
        ),
        (3, 2, vec![], "3 heads are not a multiple of K's and V's 2"),
        (
            4,
            2,
            vec![int_attr("q_num_heads", 3)],
            "`q_num_heads` does not match",
        ),
        (
            4,
            2,
            vec![int_attr("kv_num_heads", 0)],
            "`kv_num_heads` must be positive",
        ),
    ];
    for (hq, hk, attrs, want) in cases {
        let e = attention(hq, hk, attrs).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("node 0 (Attention, opset 23): "), "{msg}");
        assert!(msg.contains(want), "{msg}");
        assert!(!e.is_internal());
    }
}

#[test]
fn rotary_embedding_and_group_normalization_check_their_attributes() {
    let mut n = node("RotaryEmbedding", &["x", "c", "s"], &["y"]);
    n.attribute = vec![int_attr("rotary_embedding_dim", 3)];
    let bytes = model_at(
        23,
        vec![n],
        vec![
            value("x", F32, &[Ok(1), Ok(2), Ok(3), Ok(4)]),
            value("c", F32, &[Ok(1), Ok(3), Ok(2)]),
            value("s", F32, &[Ok(1), Ok(3), Ok(2)]),
        ],
        vec![value("y", F32, &[Ok(1), Ok(2), Ok(3), Ok(4)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string()
            .contains("(RotaryEmbedding, opset 23): attribute `rotary_embedding_dim` must be even"),
        "{e}"
    );
    let mut n = node("GroupNormalization", &["x", "s", "b"], &["y"]);
    n.attribute = vec![int_attr("num_groups", 3)];
    let bytes = model_at(
        21,
        vec![n],
        vec![
            value("x", F32, &[Ok(1), Ok(4), Ok(2)]),
            value("s", F32, &[Ok(4)]),
            value("b", F32, &[Ok(4)]),
        ],
        vec![value("y", F32, &[Ok(1), Ok(4), Ok(2)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string()
            .contains("(GroupNormalization, opset 21): 4 channels do not divide into 3 groups"),
        "{e}"
    );
}

/// Imports one node on inputs of the given shapes (all f32 unless named in `i64s`).
fn one_node(
    opset: i64,
    n: NodeProto,
    inputs: &[(&str, &[i64])],
    inits: Vec<TensorProto>,
) -> Result<ferrite_onnx::Model, Error> {
    let ins = inputs
        .iter()
        .map(|(name, dims)| {
            let dims: Vec<Result<i64, &str>> = dims.iter().map(|&d| Ok(d)).collect();
            value(name, F32, &dims)
        })
        .collect();
    let outs = n
        .output
        .iter()
        .map(|o| ValueInfoProto {
            name: Some(o.clone()),
            ..Default::default()
        })
        .collect();
    let bytes = model_at(opset, vec![n], ins, outs, inits);
    import(&bytes, &Options::default(), &mut NoExternalData)
}

#[test]
fn layout_and_indexing_ops_name_bad_attributes() {
    let mut d2s = node("DepthToSpace", &["x"], &["y"]);
    d2s.attribute = vec![int_attr("blocksize", 2)];
    let e = one_node(13, d2s, &[("x", &[1, 6, 2, 2])], vec![]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(DepthToSpace, opset 13): 6 channels are not a multiple of blocksize^2 = 4"),
        "{e}"
    );
    let mut s2d = node("SpaceToDepth", &["x"], &["y"]);
    s2d.attribute = vec![int_attr("blocksize", -1)];
    let e = one_node(13, s2d, &[("x", &[1, 1, 2, 2])], vec![]).unwrap_err();
    assert!(
        e.to_string().contains("`blocksize` must be positive"),
        "{e}"
    );
    let mut lrn = node("LRN", &["x"], &["y"]);
    lrn.attribute = vec![];
    let e = one_node(13, lrn, &[("x", &[1, 3, 2, 2])], vec![]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(LRN, opset 13): attribute `size` is required"),
        "{e}"
    );
    let mut oh = node("OneHot", &["i", "depth", "values"], &["y"]);
    oh.attribute = vec![int_attr("axis", 3)];
    let e = one_node(
        11,
        oh,
        &[("i", &[2, 2])],
        vec![ints("depth", &[4]), ints("values", &[0, 1])],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("(OneHot, opset 11): attribute `axis` 3 is out of range"),
        "{e}"
    );
    let g = node("GatherND", &["x", "i"], &["y"]);
    let e = one_node(13, g, &[("x", &[2, 2])], vec![ints("i", &[0, 1, 1])]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(GatherND, opset 13): index tuples of 3 entries do not fit data of rank 2"),
        "{e}"
    );
}

#[test]
fn gather_nd_wraps_negative_entries_and_refuses_out_of_range_ones() {
    // data [2, 3]; tuples (1, -1) and (0, 2); then (0, 3), whose flat offset 3 would be
    // in range but whose entry is not.
    let idx = TensorProto {
        name: Some("i".into()),
        dims: vec![2, 2],
        data_type: Some(I64),
        int64_data: vec![1, -1, 0, 2],
        ..Default::default()
    };
    let g = node("GatherND", &["x", "i"], &["y"]);
    let m = one_node(13, g.clone(), &[("x", &[2, 3])], vec![idx.clone()]).unwrap();
    let x = f32s(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let y = interpret(&m.graph, std::slice::from_ref(&x)).unwrap();
    assert_eq!(y[0].to_f64(), [5.0, 2.0]);
    let mut bad = idx;
    bad.int64_data = vec![1, -1, 0, 3];
    let m = one_node(13, g, &[("x", &[2, 3])], vec![bad]).unwrap();
    let e = interpret(&m.graph, &[x]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn top_k_breaks_ties_by_the_lower_index_and_orders_nan_largest() {
    let k = ints("k", &[3]);
    let x = f32s(&[6], vec![1.0, f32::NAN, 3.0, 1.0, 3.0, -2.0]);
    for (largest, want_v, want_i) in [
        (1, vec![f64::NAN, 3.0, 3.0], vec![1, 2, 4]),
        (0, vec![-2.0, 1.0, 1.0], vec![5, 0, 3]),
    ] {
        let mut n = node("TopK", &["x", "k"], &["v", "i"]);
        n.attribute = vec![int_attr("largest", largest)];
        let m = one_node(11, n, &[("x", &[6])], vec![k.clone()]).unwrap();
        let y = interpret(&m.graph, std::slice::from_ref(&x)).unwrap();
        let v = y[0].to_f64();
        assert_eq!(v.len(), 3);
        for (a, b) in v.iter().zip(&want_v) {
            assert!(a == b || (a.is_nan() && b.is_nan()), "{v:?} vs {want_v:?}");
        }
        assert_eq!(y[1].to_i64(), want_i);
    }
    let mut n = node("TopK", &["x", "k"], &["v", "i"]);
    n.attribute = vec![int_attr("axis", 0)];
    let e = one_node(11, n, &[("x", &[2])], vec![k]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(TopK, opset 11): K = 3 is not in 0..=2"),
        "{e}"
    );
}

#[test]
fn cum_sum_names_bad_flags() {
    let mut n = node("CumSum", &["x", "a"], &["y"]);
    n.attribute = vec![int_attr("exclusive", 2)];
    let e = one_node(14, n, &[("x", &[3])], vec![ints("a", &[0])]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(CumSum, opset 14): attribute `exclusive` must be 0 or 1, not 2"),
        "{e}"
    );
}

/// Found by the `onnx_models` fuzz target: an output declared with a shape its nodes do not
/// compute is an invalid model (exit 1, naming the output), not an internal error.
#[test]
fn an_output_declared_with_the_wrong_shape_is_invalid() {
    let bytes = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![value("x", F32, &[Ok(2), Ok(3)])],
        vec![value("y", F32, &[Ok(3), Ok(3)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(!e.is_internal(), "{e}");
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("output `y`"), "{e}");
}

#[test]
fn folding_stops_at_its_budget_and_the_rest_runs_in_the_graph() {
    // a1 = c + c, a2 = a1 + c, ..., a8 = a7 + c over a 512-element i64 initializer (4 KiB):
    // every node folds by default; under a 12 KiB budget three fold and five stay ops.
    let c: Vec<i64> = (0..512).collect();
    let mut nodes = vec![node("Add", &["c", "c"], &["a1"])];
    for i in 2..=8 {
        let (prev, out) = (format!("a{}", i - 1), format!("a{i}"));
        nodes.push(node("Add", &[&prev, "c"], &[&out]));
    }
    let bytes = model(
        nodes,
        vec![],
        vec![value("a8", I64, &[Ok(512)])],
        vec![ints("c", &c)],
    );
    let adds = |g: &ferrite_ir::Graph| {
        g.nodes
            .iter()
            .filter(|n| n.op == Op::Binary(ferrite_ir::BinaryOp::Add))
            .count()
    };
    let folded = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    assert_eq!(adds(&folded.graph), 0);
    let options = Options {
        fold_budget: Some(3 * 4096),
        ..Default::default()
    };
    let bounded = import(&bytes, &options, &mut NoExternalData).unwrap();
    assert_eq!(adds(&bounded.graph), 5);
    let want = Tensor::from_i64(
        &TensorType {
            dtype: DType::I64,
            shape: vec![512],
        },
        &c.iter().map(|v| v * 9).collect::<Vec<_>>(),
    );
    assert_eq!(interpret(&folded.graph, &[]).unwrap()[0], want);
    assert_eq!(interpret(&bounded.graph, &[]).unwrap()[0], want);
}

#[test]
fn integer_div_truncates_and_mod_follows_its_fmod_attribute() {
    let mut fmod = node("Mod", &["a", "b"], &["f"]);
    fmod.attribute.push(int_attr("fmod", 1));
    let bytes = model(
        vec![
            node("Div", &["a", "b"], &["q"]),
            node("Mod", &["a", "b"], &["r"]),
            fmod,
        ],
        vec![value("a", I64, &[Ok(4)]), value("b", I64, &[Ok(4)])],
        vec![
            value("q", I64, &[Ok(4)]),
            value("r", I64, &[Ok(4)]),
            value("f", I64, &[Ok(4)]),
        ],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let ty = TensorType::new(DType::I64, vec![4]).unwrap();
    let a = Tensor::from_i64(&ty, &[7, -7, 7, -7]);
    let b = Tensor::from_i64(&ty, &[2, 2, -2, -2]);
    let out = interpret(&m.graph, &[a.clone(), b]).unwrap();
    assert_eq!(out[0], Tensor::from_i64(&ty, &[3, -3, -3, 3]));
    assert_eq!(out[1], Tensor::from_i64(&ty, &[1, 1, -1, -1]));
    assert_eq!(out[2], Tensor::from_i64(&ty, &[1, -1, 1, -1]));
    // A zero divisor is the run's error, naming the op.
    let zero = Tensor::from_i64(&ty, &[1, 0, 1, 1]);
    let e = interpret(&m.graph, &[a, zero]).unwrap_err().to_string();
    assert!(e.contains("division by zero"), "{e}");
}

#[test]
fn float_mod_is_fmod_or_the_python_remainder() {
    let mut fmod = node("Mod", &["a", "b"], &["f"]);
    fmod.attribute.push(int_attr("fmod", 1));
    let bytes = model(
        vec![node("Mod", &["a", "b"], &["r"]), fmod],
        vec![value("a", F32, &[Ok(2)]), value("b", F32, &[Ok(2)])],
        vec![value("r", F32, &[Ok(2)]), value("f", F32, &[Ok(2)])],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    let out = interpret(
        &m.graph,
        &[f32s(&[2], vec![-7.5, 5.0]), f32s(&[2], vec![2.0, -3.0])],
    )
    .unwrap();
    assert_eq!(out[0], f32s(&[2], vec![0.5, -1.0]));
    assert_eq!(out[1], f32s(&[2], vec![-1.5, 2.0]));
}

fn scatter(op: &str, reduction: &str, idx: &[i64], upd: Vec<f32>) -> Result<Vec<f64>, String> {
    let mut n = node(op, &["x", "i", "u"], &["y"]);
    n.attribute.push(AttributeProto {
        name: Some("reduction".into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(reduction.as_bytes().to_vec()),
        ..Default::default()
    });
    let mut i = ints("i", idx);
    let k = idx.len() as i64;
    i.dims = if op == "ScatterND" {
        vec![k, 1]
    } else {
        vec![k]
    };
    let m = one_node(18, n, &[("x", &[4]), ("u", &[k])], vec![i]).map_err(|e| e.to_string())?;
    let x = f32s(&[4], vec![1.0, 2.0, 3.0, 4.0]);
    let u = f32s(&[k as usize], upd);
    interpret(&m.graph, &[x, u])
        .map(|y| y[0].to_f64())
        .map_err(|e| e.to_string())
}

#[test]
fn scatters_reduce_duplicates_and_refuse_out_of_range_indices() {
    for op in ["ScatterElements", "ScatterND"] {
        // The last duplicate wins without a reduction; negative indices count from the end.
        let y = scatter(op, "none", &[1, -1, 1], vec![10.0, 20.0, 30.0]).unwrap();
        assert_eq!(y, [1.0, 30.0, 3.0, 20.0], "{op}");
        let y = scatter(op, "add", &[1, 1, 0], vec![10.0, 20.0, 30.0]).unwrap();
        assert_eq!(y, [31.0, 32.0, 3.0, 4.0], "{op}");
        let y = scatter(op, "mul", &[2, 2], vec![2.0, 5.0]).unwrap();
        assert_eq!(y, [1.0, 2.0, 30.0, 4.0], "{op}");
        let y = scatter(op, "max", &[0, 0, 3], vec![-5.0, 7.0, 0.0]).unwrap();
        assert_eq!(y, [7.0, 2.0, 3.0, 4.0], "{op}");
        let y = scatter(op, "min", &[0, 0, 3], vec![5.0, 7.0, 0.0]).unwrap();
        assert_eq!(y, [1.0, 2.0, 3.0, 0.0], "{op}");
        let e = scatter(op, "none", &[4], vec![1.0]).unwrap_err();
        assert!(e.contains("out of range"), "{op}: {e}");
        let e = scatter(op, "avg", &[0], vec![1.0]).unwrap_err();
        assert!(
            e.contains(&format!("({op}, opset 18): reduction=\"avg\"")),
            "{e}"
        );
    }
}

#[test]
fn scatter_elements_covers_part_of_the_other_axes() {
    // data [2, 3], indices [1, 2] along axis 1: row 1 and column 2 stay data.
    let mut n = node("ScatterElements", &["x", "i", "u"], &["y"]);
    n.attribute.push(int_attr("axis", 1));
    let mut i = ints("i", &[2, 0]);
    i.dims = vec![1, 2];
    let m = one_node(13, n, &[("x", &[2, 3]), ("u", &[1, 2])], vec![i]).unwrap();
    let x = f32s(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let u = f32s(&[1, 2], vec![10.0, 20.0]);
    let y = interpret(&m.graph, &[x, u]).unwrap();
    assert_eq!(y[0].to_f64(), [20.0, 1.0, 10.0, 3.0, 4.0, 5.0]);
}

fn pad(mode: &str, shape: &[i64], pads: &[i64], x: Vec<f32>) -> Vec<f64> {
    let mut n = node("Pad", &["x", "p"], &["y"]);
    n.attribute.push(AttributeProto {
        name: Some("mode".into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(mode.as_bytes().to_vec()),
        ..Default::default()
    });
    let m = one_node(18, n, &[("x", shape)], vec![ints("p", pads)]).unwrap();
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    interpret(&m.graph, &[f32s(&dims, x)]).unwrap()[0].to_f64()
}

#[test]
fn pad_modes_follow_numpy_past_the_axis_length() {
    // Pads longer than the axis reflect and wrap again, as numpy's `pad` does.
    let x = || vec![1.0, 2.0, 3.0];
    assert_eq!(
        pad("reflect", &[3], &[4, 2], x()),
        [1.0, 2.0, 3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]
    );
    assert_eq!(
        pad("edge", &[3], &[4, 2], x()),
        [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]
    );
    assert_eq!(
        pad("wrap", &[3], &[4, 2], x()),
        [3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]
    );
    // Two axes: ONNX lists every begin, then every end.
    assert_eq!(
        pad("reflect", &[2, 2], &[1, 0, 0, 3], vec![1.0, 2.0, 3.0, 4.0]),
        [3.0, 4.0, 3.0, 4.0, 3.0, 1.0, 2.0, 1.0, 2.0, 1.0, 3.0, 4.0, 3.0, 4.0, 3.0]
    );
    let mut n = node("Pad", &["x", "p"], &["y"]);
    n.attribute.push(AttributeProto {
        name: Some("mode".into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(b"edge".to_vec()),
        ..Default::default()
    });
    let e = one_node(18, n, &[("x", &[0, 2])], vec![ints("p", &[1, 0, 0, 0])]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(Pad, opset 18): mode=\"edge\" cannot pad axis 0, which is empty"),
        "{e}"
    );
}

#[test]
fn inverse_trigonometric_functions_are_accurate_to_a_few_f32_ulp() {
    let mut xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 / 1000.0).collect();
    xs.extend([
        1e-30,
        -3e-8,
        1e4,
        -1e7,
        3e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let n = xs.len();
    type Reference = fn(f32) -> f32;
    let ops: [(&str, Reference); 3] = [
        ("Atan", f32::atan),
        ("Asin", f32::asin),
        ("Acos", f32::acos),
    ];
    for (op, reference) in ops {
        let m = one_node(22, node(op, &["x"], &["y"]), &[("x", &[n as i64])], vec![]).unwrap();
        let y = interpret(&m.graph, &[f32s(&[n], xs.clone())]).unwrap();
        for (&x, &got) in xs.iter().zip(&y[0].to_f64()) {
            let want = reference(x) as f64;
            if want.is_nan() {
                assert!(got.is_nan(), "{op}({x}) = {got}, want NaN");
                continue;
            }
            let ulp = (want.abs() as f32).max(f32::MIN_POSITIVE).to_bits();
            let ulp = (f32::from_bits(ulp + 1) - f32::from_bits(ulp)) as f64;
            assert!(
                (got - want).abs() <= 4.0 * ulp,
                "{op}({x}) = {got}, want {want} ({} ulp)",
                (got - want).abs() / ulp
            );
        }
    }
}

fn einsum(eq: &str, inputs: &[(&str, &[i64])], values: Vec<Tensor>) -> Vec<f64> {
    let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
    let mut n = node("Einsum", &names, &["y"]);
    n.attribute.push(AttributeProto {
        name: Some("equation".into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(eq.as_bytes().to_vec()),
        ..Default::default()
    });
    let m = one_node(12, n, inputs, vec![]).unwrap();
    interpret(&m.graph, &values).unwrap()[0].to_f64()
}

#[test]
fn einsum_takes_ellipses_and_diagonals() {
    // A batch of diagonals; NaN off the diagonal does not leak into it.
    let x = f32s(
        &[2, 2, 2],
        vec![1.0, f32::NAN, 3.0, 4.0, 5.0, 6.0, f32::INFINITY, 8.0],
    );
    assert_eq!(
        einsum("...ii->...i", &[("x", &[2, 2, 2])], vec![x.clone()]),
        [1.0, 4.0, 5.0, 8.0]
    );
    // Implicit output: the trace of each matrix, the ellipsis first.
    assert_eq!(einsum("...ii", &[("x", &[2, 2, 2])], vec![x]), [5.0, 13.0]);
    // The ellipsis of one operand broadcasts against the other's letters.
    let a = f32s(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3], vec![1.0, 0.0, -1.0]);
    assert_eq!(
        einsum("...j,j->...", &[("a", &[2, 3]), ("b", &[3])], vec![a, b]),
        [-2.0, -2.0]
    );
}

#[test]
fn bit_shifts_wrap_on_the_left_and_give_zero_past_the_width() {
    const U8: i32 = tensor_proto::DataType::Uint8 as i32;
    let run = |dir: &str, x: &[i64], y: &[i64]| {
        let mut n = node("BitShift", &["x", "y"], &["z"]);
        n.attribute.push(AttributeProto {
            name: Some("direction".into()),
            r#type: Some(AttributeType::String as i32),
            s: Some(dir.as_bytes().to_vec()),
            ..Default::default()
        });
        let k = x.len() as i64;
        let bytes = model_at(
            11,
            vec![n],
            vec![value("x", U8, &[Ok(k)]), value("y", U8, &[Ok(k)])],
            vec![value("z", U8, &[Ok(k)])],
            vec![],
        );
        let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
        let ty = TensorType::new(DType::U8, vec![x.len()]).unwrap();
        let (x, y) = (Tensor::from_i64(&ty, x), Tensor::from_i64(&ty, y));
        interpret(&m.graph, &[x, y]).map(|z| z[0].to_i64())
    };
    assert_eq!(
        run("LEFT", &[200, 1, 3], &[1, 7, 0]).unwrap(),
        [144, 128, 3]
    );
    assert_eq!(
        run("RIGHT", &[255, 200, 3], &[7, 3, 0]).unwrap(),
        [1, 25, 3]
    );
    // Past the width, numpy's rule (ONNX's reference): 0 either way.
    assert_eq!(run("LEFT", &[1, 255], &[8, 200]).unwrap(), [0, 0]);
    assert_eq!(run("RIGHT", &[255, 128], &[8, 255]).unwrap(), [0, 0]);
}

#[test]
fn unique_folds_once_its_operand_is_known() {
    let mut n = node("Unique", &["x"], &["y", "i", "inv", "c"]);
    n.attribute.push(int_attr("sorted", 0));
    let outs: Vec<ValueInfoProto> = ["y", "i", "inv", "c"]
        .iter()
        .map(|o| ValueInfoProto {
            name: Some(o.to_string()),
            ..Default::default()
        })
        .collect();
    let bytes = model_at(
        11,
        vec![n.clone()],
        vec![value("x", I64, &[Ok(6)])],
        outs.clone(),
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        matches!(&e, Error::NeedsValue { input, .. } if input == "x"),
        "{e}"
    );
    let mut options = Options::default();
    let ty = TensorType::new(DType::I64, vec![6]).unwrap();
    options
        .values
        .insert("x".into(), Tensor::from_i64(&ty, &[2, 1, 1, 3, 4, 3]));
    let m = import(&bytes, &options, &mut NoExternalData).unwrap();
    let out = interpret(&m.graph, &[]).unwrap();
    assert_eq!(out[0].to_i64(), [2, 1, 3, 4]);
    assert_eq!(out[1].to_i64(), [0, 1, 3, 4]);
    assert_eq!(out[2].to_i64(), [0, 1, 1, 2, 3, 2]);
    assert_eq!(out[3].to_i64(), [1, 2, 2, 1]);
    n.attribute.clear();
    let bytes = model_at(11, vec![n], vec![value("x", I64, &[Ok(6)])], outs, vec![]);
    let m = import(&bytes, &options, &mut NoExternalData).unwrap();
    let out = interpret(&m.graph, &[]).unwrap();
    assert_eq!(out[0].to_i64(), [1, 2, 3, 4]);
    assert_eq!(out[1].to_i64(), [1, 0, 3, 4]);
    assert_eq!(out[2].to_i64(), [1, 0, 0, 2, 3, 2]);
}

#[test]
fn det_expands_small_matrices_and_refuses_larger_ones() {
    let m = one_node(
        22,
        node("Det", &["x"], &["y"]),
        &[("x", &[2, 3, 3])],
        vec![],
    )
    .unwrap();
    let x = f32s(
        &[2, 3, 3],
        vec![
            2.0, 0.0, 1.0, 1.0, 3.0, 2.0, 1.0, 1.0, 1.0, // det 2*1 - 0 + 1*(1 - 3) = 0
            1.0, 2.0, 3.0, 0.0, 1.0, 4.0, 5.0, 6.0, 0.0, // det 1
        ],
    );
    assert_eq!(interpret(&m.graph, &[x]).unwrap()[0].to_f64(), [0.0, 1.0]);
    let e = one_node(22, node("Det", &["x"], &["y"]), &[("x", &[4, 4])], vec![]).unwrap_err();
    assert!(
        e.to_string()
            .contains("(Det, opset 22): Det of 4x4 matrices is not supported"),
        "{e}"
    );
}

#[test]
fn subgraphs_of_other_ops_are_refused() {
    let mut n = node("SequenceMap", &["x"], &["y"]);
    n.attribute
        .push(graph_attr("body", body(vec![], &["a"], &["a"])));
    let bytes = model(
        vec![n],
        vec![value("x", F32, &[Ok(1)])],
        vec![value("y", F32, &[Ok(1)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(
        e.to_string().contains("node 0 (SequenceMap, opset 17): attribute `body` is a subgraph, which Ferrite imports only for If, Loop and Scan"),
        "{e}"
    );
}

#[test]
fn tensor_scatter_wraps_when_circular_and_refuses_a_linear_write_past_the_end() {
    let run = |mode: &str, w: i64| {
        let mut n = node("TensorScatter", &["c", "u", "w"], &["y"]);
        n.attribute = vec![
            int_attr("axis", 1),
            AttributeProto {
                name: Some("mode".into()),
                r#type: Some(AttributeType::String as i32),
                s: Some(mode.as_bytes().to_vec()),
                ..Default::default()
            },
        ];
        let m = one_node(
            24,
            n,
            &[("c", &[1, 4]), ("u", &[1, 2])],
            vec![ints("w", &[w])],
        )
        .unwrap();
        let c = f32s(&[1, 4], vec![0.0, 1.0, 2.0, 3.0]);
        let u = f32s(&[1, 2], vec![10.0, 20.0]);
        interpret(&m.graph, &[c, u]).map(|y| y[0].to_f64())
    };
    assert_eq!(run("linear", 1).unwrap(), [0.0, 10.0, 20.0, 3.0]);
    assert_eq!(run("circular", 3).unwrap(), [20.0, 1.0, 2.0, 10.0]);
    let e = run("linear", 3).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// Found by the `onnx_models` fuzz target: operands of a smaller rank than the op needs, or
/// no operands at all, made the importer index past a shape (a panic) instead of naming
/// the node.
#[test]
fn ops_given_too_few_operands_or_axes_are_errors_naming_the_node() {
    let cases = [
        (
            vec![node("Concat", &[], &["y"])],
            vec![],
            vec![value("y", F32, &[Ok(1)])],
            "Concat",
        ),
        (
            vec![node("Sum", &[], &["y"])],
            vec![],
            vec![value("y", F32, &[Ok(1)])],
            "Sum",
        ),
        (
            vec![{
                let mut n = node("NegativeLogLikelihoodLoss", &["x", "t", "w"], &["y"]);
                n.attribute.push(int_attr("ignore_index", 7));
                n
            }],
            vec![
                value("x", F32, &[Ok(2), Ok(3)]),
                value("t", I64, &[Ok(2)]),
                value("w", F32, &[]),
            ],
            vec![value("y", F32, &[])],
            "NegativeLogLikelihoodLoss",
        ),
    ];
    for (nodes, inputs, outputs, op) in cases {
        let bytes = model(nodes, inputs, outputs, vec![]);
        let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
        assert!(e.to_string().contains(op), "{op}: {e}");
    }
    // ArgMax with select_last_index of a rank-0 operand: its one element.
    let mut argmax = node("ArgMax", &["x"], &["y"]);
    argmax.attribute.push(int_attr("select_last_index", 1));
    argmax.attribute.push(int_attr("keepdims", 0));
    let bytes = model(
        vec![argmax],
        vec![value("x", F32, &[])],
        vec![value("y", I64, &[])],
        vec![],
    );
    match import(&bytes, &Options::default(), &mut NoExternalData) {
        Ok(m) => {
            let out = interpret(&m.graph, &[f32s(&[], vec![5.0])]).unwrap();
            assert_eq!(out[0].to_i64(), vec![0]);
        }
        Err(e) => assert!(e.to_string().contains("ArgMax"), "{e}"),
    }
}

/// Found by AFL++ (onnx_import): an LRN of `size` 215365631 unrolled that many slices and
/// ran for minutes. Past the channels a window adds only zeros, so it now costs 2C - 1
/// slices at most, with the same result.
#[test]
fn lrn_with_a_window_wider_than_the_channels_costs_the_channels() {
    let mut lrn = node("LRN", &["x"], &["y"]);
    lrn.attribute.push(int_attr("size", 1 << 28));
    let bytes = model(
        vec![lrn],
        vec![value("x", F32, &[Ok(1), Ok(3), Ok(1), Ok(1)])],
        vec![value("y", F32, &[Ok(1), Ok(3), Ok(1), Ok(1)])],
        vec![],
    );
    let m = import(&bytes, &Options::default(), &mut NoExternalData).unwrap();
    assert!(m.graph.nodes.len() < 100, "{} nodes", m.graph.nodes.len());
    let x = f32s(&[1, 3, 1, 1], vec![1.0, 2.0, 3.0]);
    let y = interpret(&m.graph, &[x]).unwrap()[0].to_f64();
    // Every window covers all three channels: sum 14, d = (1 + 1e-4 * 14 / 2^28)^0.75.
    let d = (1.0 + 1e-4 * 14.0 / (1u64 << 28) as f64).powf(0.75);
    for (got, x) in y.iter().zip([1.0, 2.0, 3.0]) {
        assert!((got - x / d).abs() < 1e-6, "{got} vs {}", x / d);
    }
}

/// Found by the `onnx_models` fuzz target (an out-of-memory abort): a Split with
/// `num_outputs` of 2^40 built a list of that many part sizes.
#[test]
fn split_into_more_parts_than_a_node_can_have_is_an_error() {
    let mut split = node("Split", &["x"], &["a", "b"]);
    split.attribute.push(int_attr("num_outputs", 1 << 40));
    let bytes = model_at(
        18,
        vec![split],
        vec![value("x", F32, &[Ok(4)])],
        vec![value("a", F32, &[Ok(2)]), value("b", F32, &[Ok(2)])],
        vec![],
    );
    let e = import(&bytes, &Options::default(), &mut NoExternalData).unwrap_err();
    assert!(e.to_string().contains("Split"), "{e}");
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A one-node model on `x: f32[1, 2, 4, 4]` (and a weight `w: f32[3, 2, 3, 3]` for Conv).
fn spatial_node(
    op: &str,
    inputs: &[&str],
    attrs: Vec<AttributeProto>,
    inits: Vec<TensorProto>,
) -> Result<ferrite_onnx::Model, Error> {
    let mut n = node(op, inputs, &["y"]);
    n.name = Some("n0".into());
    n.attribute = attrs;
    let bytes = model_at(
        19,
        vec![n],
        vec![
            value("x", F32, &[Ok(1), Ok(2), Ok(4), Ok(4)]),
            value("w", F32, &[Ok(3), Ok(2), Ok(3), Ok(3)]),
        ],
        vec![value("y", F32, &[Ok(1)])],
        inits,
    );
    import(&bytes, &Options::default(), &mut NoExternalData)
}

/// An op, its inputs, attributes and initializers, and a part of the error it must give.
type SpatialCase = (
    &'static str,
    Vec<&'static str>,
    Vec<AttributeProto>,
    Vec<TensorProto>,
    &'static str,
);

#[test]
fn window_and_resize_attributes_out_of_range_are_named_errors() {
    let cases: Vec<SpatialCase> = vec![
        (
            "Conv",
            vec!["x", "w"],
            vec![ints_attr("pads", &[i64::MAX, 0, 0, 0])],
            vec![],
            "attribute `pads` entry 9223372036854775807 is out of range",
        ),
        (
            "Conv",
            vec!["x", "w"],
            vec![int_attr("group", 0)],
            vec![],
            "groups",
        ),
        (
            "Conv",
            vec!["x", "w"],
            vec![ints_attr("strides", &[1])],
            vec![],
            "attribute `strides` has 1 entries",
        ),
        (
            "MaxPool",
            vec!["x"],
            vec![ints_attr("kernel_shape", &[0, 2])],
            vec![],
            "kernel_shape [0, 2] must hold 2 positive extents",
        ),
        (
            "MaxPool",
            vec!["x"],
            vec![ints_attr("kernel_shape", &[300, 300])],
            vec![],
            "taps",
        ),
        (
            "AveragePool",
            vec!["x"],
            vec![],
            vec![],
            "attribute `kernel_shape` is required",
        ),
        (
            "Resize",
            vec!["x", "", "", "sizes"],
            vec![],
            vec![ints("sizes", &[1, 2, 1 << 30, 4])],
            "needs more than 16777216 taps",
        ),
        (
            "Resize",
            vec!["x", "", "scales", "sizes"],
            vec![],
            vec![ints("sizes", &[1, 2, 4, 4]), ints("scales", &[1, 1, 1, 1])],
            "only one of scales and sizes",
        ),
    ];
    for (op, inputs, attrs, inits, want) in cases {
        let e = spatial_node(op, &inputs, attrs, inits).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("node `n0` ({op}, opset 19)")),
            "{text}"
        );
        assert!(text.contains(want), "{op}: {text}");
        assert!(!e.is_internal(), "{text}");
    }
}

#[test]
fn symbolic_dims_stay_symbols_through_folded_shape_computations() {
    // y = reshape(relu(reshape(x, [-1, 4]) @ w), concat(shape(x)[0:2], [3])): the target
    // folds at import, so it generalizes only as [batch, seq, 3].
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![4, 3],
        data_type: Some(F32),
        float_data: (0..12).map(|i| i as f32 * 0.25 - 1.0).collect(),
        ..Default::default()
    };
    let mut concat = node("Concat", &["bs", "three"], &["target"]);
    concat.attribute.push(AttributeProto {
        name: Some("axis".into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    let bytes = model(
        vec![
            node("Shape", &["x"], &["shape"]),
            node("Slice", &["shape", "zero", "two"], &["bs"]),
            concat,
            node("Reshape", &["x", "flat"], &["x2"]),
            node("MatMul", &["x2", "w"], &["h"]),
            node("Relu", &["h"], &["r"]),
            node("Reshape", &["r", "target"], &["y"]),
        ],
        vec![value("x", F32, &[Err("batch"), Err("seq"), Ok(4)])],
        vec![value("y", F32, &[Err("batch"), Err("seq"), Ok(3)])],
        vec![
            ints("zero", &[0]),
            ints("two", &[2]),
            ints("three", &[3]),
            ints("flat", &[-1, 4]),
            w,
        ],
    );
    let proto = ferrite_onnx::decode_model(&bytes).unwrap();
    let (g, m) = ferrite_onnx::import_symbolic(
        &proto,
        &Options::default(),
        &[("seq", 64)],
        &mut NoExternalData,
    )
    .unwrap();
    assert_eq!(m.inputs[0].onnx, "x");
    assert_eq!(g.params()[0].1.to_string(), "f32[batch, seq, 4]");
    assert_eq!(g.output_types()[0].to_string(), "f32[batch, seq, 3]");
    let seq = g.facts().symbol("seq").unwrap();
    assert_eq!((seq.lo, seq.hi), (1, 64));
    // Any binding: the instance computes what a plain import at those values does.
    for (b, s) in [(1usize, 1usize), (2, 5), (6, 40)] {
        let mut binding = ferrite_ir::sym::Binding::new();
        binding.set("batch", b as i64);
        binding.set("seq", s as i64);
        let instance = g.instantiate(&binding).unwrap();
        let mut options = Options::default();
        options.dims.insert("batch".into(), b);
        options.dims.insert("seq".into(), s);
        let plain = import(&bytes, &options, &mut NoExternalData).unwrap();
        let x = f32s(
            &[b, s, 4],
            (0..b * s * 4).map(|i| (i % 7) as f32 - 3.0).collect(),
        );
        let got = interpret(&instance, std::slice::from_ref(&x)).unwrap();
        let want = interpret(&plain.graph, &[x]).unwrap();
        assert_eq!(got, want, "batch {b}, seq {s}");
    }
    // A dimension pinned by the options stays a number.
    let mut pinned = Options::default();
    pinned.dims.insert("batch".into(), 2);
    let (g, _) = ferrite_onnx::import_symbolic(&proto, &pinned, &[], &mut NoExternalData).unwrap();
    assert_eq!(g.params()[0].1.to_string(), "f32[2, seq, 4]");
}

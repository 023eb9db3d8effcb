//! The ONNX ops that the importer decomposes (Attention, RotaryEmbedding,
//! GroupNormalization) on the CPU and the simulator, fused and unfused, against the
//! reference interpreter; and `ferrite convert`, whose `.fg` and safetensors files
//! compute what the model does and are never written outside the output's folder.

mod common;
use common::{assert_exit, ferrite, stderr};
use ferrite::{compile_ir, Options, Target, Tensor};
use ferrite_ir::{DType, TensorType};
use ferrite_onnx::prost::Message;
use ferrite_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto, tensor_shape_proto, type_proto, AttributeProto,
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use std::path::{Path, PathBuf};

const F32: i32 = tensor_proto::DataType::Float as i32;
const I64: i32 = tensor_proto::DataType::Int64 as i32;
const BOOL: i32 = tensor_proto::DataType::Bool as i32;

fn value(name: &str, elem: i32, dims: &[usize]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An output whose type the importer infers.
fn untyped(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("m".into()),
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-onnx-ops-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Random inputs for the graph's parameters: floats in [-1, 1), integers in [0, 10),
/// bools fair.
fn inputs(g: &ferrite_ir::Graph) -> Vec<Tensor> {
    g.params
        .iter()
        .enumerate()
        .map(|(i, &p)| Tensor::random(g.ty(p), 7 + i as u64).unwrap())
        .collect()
}

/// Runs the model's graph on the interpreter, then on the CPU and the simulator,
/// fused and unfused, and compares every output with the interpreter's.
fn check_backends(name: &str, bytes: Vec<u8>) {
    let dir = scratch(name);
    let path = dir.join("m.onnx");
    std::fs::write(&path, bytes).unwrap();
    let g = ferrite::onnx::load(&path).unwrap().graph;
    let xs = inputs(&g);
    let interp = compile_ir(&g, &Options::default().target(Target::Interp)).unwrap();
    let want = interp.run(&xs).unwrap();
    for target in [Target::Cpu, Target::Sim] {
        for fuse in [true, false] {
            let exe = compile_ir(&g, &Options::default().target(target).fuse(fuse)).unwrap();
            let got = exe.run(&xs).unwrap();
            assert_eq!(got.len(), want.len());
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                if let Err(m) = a.check_close(b, 1e-4, 1e-5) {
                    panic!("{name}: output {k} on {target:?} (fuse {fuse}): {m}");
                }
            }
        }
    }
}

#[test]
fn attention_with_cache_gqa_causal_mask_and_softcap_runs_on_every_target() {
    // 3-D Q [B=2, Sq=3, 4 heads x 4], K/V [2, 3, 2 heads x 4], a past of 2 and a bool
    // mask over the total length 5; every output (Y, present K and V, the softcapped
    // scores) is compared.
    let bytes = model(
        23,
        vec![node(
            "Attention",
            &["q", "k", "v", "mask", "pk", "pv"],
            &["y", "present_k", "present_v", "qk"],
            vec![
                int("q_num_heads", 4),
                int("kv_num_heads", 2),
                int("is_causal", 1),
                float("softcap", 2.0),
                float("scale", 0.3),
                int("qk_matmul_output_mode", 1),
            ],
        )],
        vec![
            value("q", F32, &[2, 3, 16]),
            value("k", F32, &[2, 3, 8]),
            value("v", F32, &[2, 3, 8]),
            value("mask", BOOL, &[2, 1, 3, 5]),
            value("pk", F32, &[2, 2, 2, 4]),
            value("pv", F32, &[2, 2, 2, 4]),
        ],
        vec![
            untyped("y"),
            untyped("present_k"),
            untyped("present_v"),
            untyped("qk"),
        ],
        vec![],
    );
    check_backends("attention", bytes);
}

#[test]
fn attention_with_an_additive_short_mask_and_softmax_output_runs_on_every_target() {
    // A float mask shorter than the keys is padded with -inf.
    let bytes = model(
        24,
        vec![node(
            "Attention",
            &["q", "k", "v", "mask"],
            &["y", "", "", "probs"],
            vec![int("qk_matmul_output_mode", 3)],
        )],
        vec![
            value("q", F32, &[1, 2, 4, 8]),
            value("k", F32, &[1, 2, 6, 8]),
            value("v", F32, &[1, 2, 6, 3]),
            value("mask", F32, &[4, 5]),
        ],
        vec![untyped("y"), untyped("probs")],
        vec![],
    );
    check_backends("attention-additive", bytes);
}

#[test]
fn rotary_embedding_runs_on_every_target() {
    for interleaved in [0, 1] {
        // 4-D input [B=2, H=2, S=3, D=8], rotating the first 4 features, positions
        // picked from a cache of 5.
        let ids = TensorProto {
            name: Some("pos".into()),
            dims: vec![2, 3],
            data_type: Some(I64),
            int64_data: vec![0, 1, 2, 4, 3, 1],
            ..Default::default()
        };
        let bytes = model(
            23,
            vec![node(
                "RotaryEmbedding",
                &["x", "cos", "sin", "pos"],
                &["y"],
                vec![
                    int("interleaved", interleaved),
                    int("rotary_embedding_dim", 4),
                ],
            )],
            vec![
                value("x", F32, &[2, 2, 3, 8]),
                value("cos", F32, &[5, 2]),
                value("sin", F32, &[5, 2]),
            ],
            vec![untyped("y")],
            vec![ids],
        );
        check_backends(&format!("rotary-{interleaved}"), bytes);
    }
}

#[test]
fn group_normalization_runs_on_every_target() {
    let bytes = model(
        21,
        vec![node(
            "GroupNormalization",
            &["x", "s", "b"],
            &["y"],
            vec![int("num_groups", 2), float("epsilon", 1e-3)],
        )],
        vec![
            value("x", F32, &[2, 4, 3, 2]),
            value("s", F32, &[4]),
            value("b", F32, &[4]),
        ],
        vec![untyped("y")],
        vec![],
    );
    check_backends("group-norm", bytes);
}

/// `y = matmul(x, w) + b`, `w` an f32[8, 4] initializer (a weight, too large to inline).
fn mlp() -> Vec<u8> {
    let w = TensorProto {
        name: Some("layer/w".into()),
        dims: vec![8, 4],
        data_type: Some(F32),
        float_data: (0..32).map(|i| (i as f32 - 15.5) / 8.0).collect(),
        ..Default::default()
    };
    let b = TensorProto {
        name: Some("b".into()),
        dims: vec![4],
        data_type: Some(F32),
        float_data: vec![0.5, -1.0, 0.25, 2.0],
        ..Default::default()
    };
    model(
        17,
        vec![
            node("MatMul", &["x", "layer/w"], &["h"], vec![]),
            node("Add", &["h", "b"], &["y:0"], vec![]),
        ],
        vec![value("x", F32, &[3, 8])],
        vec![value("y:0", F32, &[3, 4])],
        vec![w, b],
    )
}

fn convert(model: &Path, out: &Path) -> std::process::Output {
    ferrite(&[
        "convert",
        &model.display().to_string(),
        "-o",
        &out.display().to_string(),
    ])
}

#[test]
fn convert_writes_a_graph_and_weights_that_compute_what_the_model_does() {
    let dir = scratch("convert");
    let onnx = dir.join("mlp.onnx");
    std::fs::write(&onnx, mlp()).unwrap();
    let out = dir.join("out/mlp.fg");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let o = convert(&onnx, &out);
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("weights \"mlp.safetensors\"\n"), "{text}");
    assert!(dir.join("out/mlp.safetensors").is_file());
    // Nothing else is written.
    let mut names: Vec<String> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["mlp.fg", "mlp.safetensors"]);

    let model = ferrite::onnx::load(&onnx).unwrap().graph;
    let graph = ferrite::load(&out).unwrap();
    let x = Tensor::random(&TensorType::new(DType::F32, vec![3, 8]).unwrap(), 3).unwrap();
    for target in [Target::Interp, Target::Cpu, Target::Sim] {
        let opts = Options::default().target(target);
        let want = compile_ir(&model, &opts).unwrap().run(&[&x]).unwrap();
        let got = compile_ir(&graph, &opts).unwrap().run(&[&x]).unwrap();
        // The same graph up to names: the same values, bit for bit.
        got[0]
            .check_close(&want[0], 0.0, 0.0)
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
    }
    // The converted graph runs from the command line as well.
    let o = ferrite(&["run", &out.display().to_string()]);
    assert_exit(&o, 0);
}

#[test]
fn convert_refuses_to_write_through_links_or_up_the_tree() {
    let dir = scratch("convert-refusals");
    let outside = scratch("convert-outside");
    let onnx = dir.join("mlp.onnx");
    std::fs::write(&onnx, mlp()).unwrap();
    std::fs::create_dir_all(dir.join("out/sub")).unwrap();
    // The graph file itself a link leading out of the folder.
    let secret = outside.join("secret.fg");
    std::fs::write(&secret, "keep").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("out/g.fg")).unwrap();
    let o = convert(&onnx, &dir.join("out/g.fg"));
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    // The weights file beside it a link.
    let weights = outside.join("w.safetensors");
    std::fs::write(&weights, "keep").unwrap();
    std::os::unix::fs::symlink(&weights, dir.join("out/h.safetensors")).unwrap();
    let o = convert(&onnx, &dir.join("out/h.fg"));
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("h.safetensors"), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    // A `..` component.
    let o = convert(&onnx, &dir.join("out/sub/../up.fg"));
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("`..`"), "{}", stderr(&o));
    assert!(!dir.join("out/up.fg").exists());
    // Not a .fg name, not a model.
    let o = convert(&onnx, &dir.join("out/x.txt"));
    assert_exit(&o, 1);
    let o = convert(&dir.join("out/g.fg"), &dir.join("out/y.fg"));
    assert_exit(&o, 1);
    // What the links lead to is untouched.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
    assert_eq!(std::fs::read_to_string(&weights).unwrap(), "keep");
}

fn strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Strings as i32),
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A bad attribute of a recurrent layer is an import error naming the node, its op and
/// the attribute; the gates' shapes are checked against `hidden_size`.
#[test]
fn recurrent_layers_refuse_bad_attributes_by_name() {
    let rnn = |attrs: Vec<AttributeProto>, w_rows: usize| {
        model(
            14,
            vec![node("RNN", &["X", "W", "R"], &["Y"], attrs)],
            vec![
                value("X", F32, &[2, 1, 3]),
                value("W", F32, &[1, w_rows, 3]),
                value("R", F32, &[1, w_rows, w_rows]),
            ],
            vec![untyped("Y")],
            vec![],
        )
    };
    let cases = [
        (
            rnn(
                vec![int("hidden_size", 4), string("direction", "sideways")],
                4,
            ),
            "direction must be forward, reverse or bidirectional",
        ),
        (
            rnn(
                vec![int("hidden_size", 4), strings("activations", &["Gauss"])],
                4,
            ),
            "activation function `Gauss` is not supported",
        ),
        (
            rnn(
                vec![
                    int("hidden_size", 4),
                    strings("activations", &["Tanh", "Relu"]),
                ],
                4,
            ),
            "`activations` lists 2 functions",
        ),
        (
            rnn(vec![int("hidden_size", 5)], 4),
            "W has shape [1, 4, 3], expected [1, 5, 3]",
        ),
        (
            rnn(vec![int("hidden_size", 4), float("clip", -1.0)], 4),
            "clip must be positive",
        ),
    ];
    let dir = scratch("recurrent-errors");
    for (i, (bytes, want)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("m{i}.onnx"));
        std::fs::write(&path, bytes).unwrap();
        let e = ferrite::onnx::load(&path)
            .expect_err("import must fail")
            .to_string();
        assert!(e.contains(want) && e.contains("RNN"), "case {i}: {e}");
    }
}

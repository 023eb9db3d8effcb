//! `.onnx` models through the face: `ferrite::onnx::load` with external data (inside
//! the folder only: no symlink escape, offsets checked against the file), and the
//! `ferrite` binary running a model with `.npy` and `.pb` inputs.

use ferrite_onnx::prost::Message;
use ferrite_onnx::proto::{
    tensor_proto, tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use std::path::PathBuf;
use std::process::Command;

mod common;

const F32: i32 = tensor_proto::DataType::Float as i32;

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(F32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
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

/// Axis `axis` of `v`'s shape named `name` (a `dim_param`) instead of a number.
fn name_dim(v: &mut ValueInfoProto, axis: usize, name: &str) {
    if let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().unwrap().value.as_mut() {
        t.shape.as_mut().unwrap().dim[axis].value =
            Some(tensor_shape_proto::dimension::Value::DimParam(name.into()));
    }
}

/// `y:0 = x + w`, `w` an f32[2] initializer stored in `location` at `offset`.
fn model(location: &str, offset: u64) -> Vec<u8> {
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![2],
        data_type: Some(F32),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![
            StringStringEntryProto {
                key: Some("location".into()),
                value: Some(location.into()),
            },
            StringStringEntryProto {
                key: Some("offset".into()),
                value: Some(offset.to_string()),
            },
        ],
        ..Default::default()
    };
    ModelProto {
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("add".into()),
            node: vec![NodeProto {
                op_type: Some("Add".into()),
                input: vec!["x".into(), "w".into()],
                output: vec!["y:0".into()],
                ..Default::default()
            }],
            input: vec![value("x", &[2])],
            output: vec![value("y:0", &[2])],
            initializer: vec![w],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-onnx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn weights() -> Vec<u8> {
    [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

#[test]
fn external_data_inside_the_folder_loads() {
    let dir = scratch("ok");
    let mut data = vec![0u8; 8];
    data.extend(weights());
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), data).unwrap();
    std::fs::write(dir.join("m.onnx"), model("sub/w.bin", 8)).unwrap();
    let m = ferrite::onnx::load(dir.join("m.onnx")).unwrap();
    let x = ferrite::Tensor::from_vec(&[2], vec![1.0f32, 1.0]).unwrap();
    let exe = ferrite::compile_ir(
        &m.graph,
        &ferrite::Options::default().target(ferrite::Target::Interp),
    )
    .unwrap();
    assert_eq!(
        exe.run(&[&x]).unwrap()[0].as_slice::<f32>(),
        Some(&[2.5f32, -1.0][..])
    );
}

#[test]
fn external_data_cannot_leave_the_folder() {
    let dir = scratch("escape");
    let outside = scratch("outside");
    std::fs::write(outside.join("secret.bin"), weights()).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (
            outside.join("secret.bin").display().to_string(),
            "absolute path",
        ),
        ("../secret.bin".into(), "leaves the model's folder"),
        ("link.bin".into(), "leads outside the model's folder"),
        ("w.bin".into(), "has 8 bytes"),
        ("missing.bin".into(), "cannot open"),
        ("sub".into(), "not a regular file"),
    ];
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.join("secret.bin"), dir.join("link.bin")).unwrap();
    std::fs::write(dir.join("w.bin"), weights()).unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for (location, why) in cases {
        if location == "link.bin" && !cfg!(unix) {
            continue;
        }
        let offset = if location == "w.bin" { 4 } else { 0 };
        std::fs::write(dir.join("m.onnx"), model(&location, offset)).unwrap();
        let e = ferrite::onnx::load(dir.join("m.onnx")).unwrap_err();
        assert!(!e.is_internal());
        assert!(e.to_string().contains(why), "{location}: {e}");
    }
}

#[test]
fn the_cli_runs_a_model_with_npy_and_pb_inputs() {
    let dir = scratch("cli");
    // One value repeated: a `full` in the graph, which every target runs today
    // (the backends do not run constant tensors yet).
    let w: Vec<u8> = [1.5f32, 1.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("w.bin"), w).unwrap();
    std::fs::write(dir.join("m.onnx"), model("w.bin", 0)).unwrap();
    let x = ferrite::Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
    std::fs::write(dir.join("x.npy"), x.to_npy()).unwrap();
    let pb = ferrite_onnx::tensor::from_tensor("x", x.as_ir()).encode_to_vec();
    std::fs::write(dir.join("x.pb"), pb).unwrap();
    for (input, target) in [("x.npy", "cpu"), ("x.pb", "sim"), ("x.pb", "interp")] {
        let out = dir.join(format!("out-{target}"));
        let r = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .arg("run")
            .arg(dir.join("m.onnx"))
            .arg("--input")
            .arg(format!("x={}", dir.join(input).display()))
            .arg("--target")
            .arg(target)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        // `y:0` is written as `y_0.npy`.
        let y = ferrite::Tensor::read_npy(out.join("y_0.npy")).unwrap();
        assert_eq!(y.as_slice::<f32>(), Some(&[2.5f32, 3.5][..]));
    }
    let r = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .arg("check")
        .arg(dir.join("m.onnx"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn the_cli_names_a_missing_symbolic_dim_and_exits_1() {
    let dir = scratch("dim");
    let mut m = ModelProto::decode(&model("w.bin", 0)[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.initializer.clear();
    g.input.push(value("w", &[2]));
    name_dim(&mut g.input[0], 0, "n");
    g.output[0] = ValueInfoProto {
        name: Some("y:0".into()),
        ..Default::default()
    };
    std::fs::write(dir.join("m.onnx"), m.encode_to_vec()).unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .arg("run")
            .arg(dir.join("m.onnx"))
            .args(extra)
            .output()
            .unwrap()
    };
    let r = run(&[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("--dim n=N"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let r = run(&["--dim", "n=2"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // The shape of an --input file binds the name as --dim does.
    let ty = ferrite::TensorType::new(ferrite::DType::F32, vec![3]).unwrap();
    let t = ferrite::ir::Tensor::from_f64(&ty, &[1.0, 2.0, 3.0]);
    std::fs::write(dir.join("x.npy"), ferrite::ir::npy::encode(&t)).unwrap();
    let x = format!("x={}", dir.join("x.npy").display());
    let r = run(&["--input", &x]);
    let err = String::from_utf8_lossy(&r.stderr);
    // n = 3 from x, so the fixed w of [2] does not broadcast: the model's own error.
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(!err.contains("--dim n=N"), "{err}");
    let ty2 = ferrite::TensorType::new(ferrite::DType::F32, vec![2]).unwrap();
    let t2 = ferrite::ir::Tensor::from_f64(&ty2, &[1.0, 2.0]);
    std::fs::write(dir.join("x2.npy"), ferrite::ir::npy::encode(&t2)).unwrap();
    let x2 = format!("x={}", dir.join("x2.npy").display());
    let r = run(&["--input", &x2]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn an_onnx_model_with_symbolic_dims_compiles_once_for_every_binding() {
    // relu(x @ w) over x: f32[batch, seq, 8].
    let (mut x, mut y) = (value("x", &[1, 1, 8]), value("y", &[1, 1, 16]));
    for v in [&mut x, &mut y] {
        name_dim(v, 0, "batch");
        name_dim(v, 1, "seq");
    }
    let node = |op: &str, inputs: &[&str], output: &str| NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    let bytes = ModelProto {
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("mlp".into()),
            node: vec![node("MatMul", &["x", "w"], "h"), node("Relu", &["h"], "y")],
            input: vec![x],
            output: vec![y],
            initializer: vec![TensorProto {
                name: Some("w".into()),
                dims: vec![8, 16],
                data_type: Some(F32),
                float_data: (0..128).map(|i| (i % 11) as f32 * 0.1 - 0.5).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let dir = scratch("symbolic");
    std::fs::write(dir.join("mlp.onnx"), bytes).unwrap();
    let (g, _) = ferrite::onnx::load_symbolic(
        dir.join("mlp.onnx"),
        &Default::default(),
        &[("batch", 8), ("seq", 64)],
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let bindings: Vec<ferrite::ir::sym::Binding> = [(1, 1), (3, 17), (8, 64)]
        .iter()
        .map(|&(b, s)| {
            let mut binding = ferrite::ir::sym::Binding::new();
            binding.set("batch", b);
            binding.set("seq", s);
            binding
        })
        .collect();
    let compiled =
        common::dynamic::check_against_interp(&g, ferrite::Options::default(), &bindings);
    assert_eq!(compiled, 1);
}

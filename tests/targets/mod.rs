//! The fuzz targets of `tests/fuzz.rs` for the `.fg` parser, the `.npy` decoder, the
//! `.tile` parser, checker and simulator, and the ONNX importer, shared with the
//! coverage-guided targets of `fuzz/` (cargo-afl), which include this file. It uses
//! `ferrite_ir`, `ferrite_accel` and `ferrite_onnx` directly (not the facade), so `fuzz/`
//! builds without the CPU backend.
#![allow(dead_code)]

use ferrite_accel::{sim, tile};
use ferrite_ir::{npy, parse_bytes, print, verify, Tensor, TensorType};
use ferrite_onnx::{Error as OnnxError, NoExternalData, Options as OnnxOptions};
use ferrite_testkit::fuzz::{check_location, Verdict};

pub fn fg_target(input: &[u8]) -> Verdict {
    match parse_bytes("fuzz.fg", input) {
        Ok(g) => {
            verify(&g).map_err(|e| format!("a parsed graph fails verification: {e}"))?;
            let printed = print(&g);
            let again = ferrite_ir::parse("printed.fg", &printed)
                .map_err(|d| format!("the printed graph does not parse: {d}\n{printed}"))?;
            if print(&again) != printed {
                return Err("printing is not a fixed point".into());
            }
            Ok(true)
        }
        Err(d) => check_location(&d.to_string(), "fuzz.fg", input),
    }
}

pub fn npy_target(input: &[u8]) -> Verdict {
    let Ok(t) = npy::decode(input) else {
        return Ok(false);
    };
    {
        let again = npy::decode(&npy::encode(&t))
            .map_err(|e| format!("a decoded tensor does not re-decode: {e}"))?;
        if format!("{:?}", again.to_f64()) != format!("{:?}", t.to_f64()) || again.ty != t.ty {
            return Err("encode then decode changed the tensor".into());
        }
    }
    Ok(true)
}

pub fn tile_target(input: &[u8]) -> Verdict {
    let Ok(src) = std::str::from_utf8(input) else {
        return Ok(false);
    };
    let k = match tile::parse_and_check("fuzz.tile", src) {
        Ok(k) => k,
        Err(d) => return check_location(&d.to_string(), "fuzz.tile", input),
    };
    let printed = tile::print(k.kernel());
    let again = tile::parse("printed.tile", &printed)
        .map_err(|d| format!("the printed kernel does not parse: {d}\n{printed}"))?;
    if &again != k.kernel() {
        return Err(format!("printing changed the kernel:\n{printed}"));
    }
    // Run it on small buffers under a small budget: faults are errors, never panics.
    let mut dev = sim::Device::new(sim::Machine::mtia2i());
    dev.limit_work(1 << 22, 1 << 23);
    let mut args = Vec::new();
    for p in &k.kernel().params {
        args.push(match p.ty {
            tile::ParamType::Ptr(d) => {
                let ty = TensorType::new(d, vec![256]).unwrap();
                match dev.upload(&p.name, &Tensor::random(&ty, 1), sim::Placement::Lpddr) {
                    Ok(id) => sim::DeviceArg::Buffer(id),
                    Err(_) => return Ok(true),
                }
            }
            tile::ParamType::Scalar(d) if d.is_float() => sim::DeviceArg::Float(0.5),
            tile::ParamType::Scalar(_) => sim::DeviceArg::Int(1),
        });
    }
    let _ = dev.launch(&k, [2, 1, 1], &args);
    Ok(true)
}

/// Imports `input` as an ONNX model. A refusal must be a user error (not the importer's
/// internal error), name the node and its op when it is about a node, and stay short; an
/// imported graph must pass the IR's verifier and print as `.fg` text that parses back.
/// `Ok(None)` is a refusal.
pub fn onnx_import(input: &[u8]) -> Result<Option<ferrite_onnx::Model>, String> {
    let mut options = OnnxOptions::default();
    // Symbolic dims of the node tests and of mutants get a small value.
    for d in ["N", "batch", "M", "K", "seq", "a", "b", "c"] {
        options.dims.insert(d.into(), 2);
    }
    match ferrite_onnx::import(input, &options, &mut NoExternalData) {
        Ok(m) => {
            verify(&m.graph).map_err(|e| format!("an imported graph fails verification: {e}"))?;
            Ok(Some(m))
        }
        Err(e) if e.is_internal() => Err(format!("internal error on a model: {e}")),
        Err(e) => {
            let text = e.to_string();
            if let OnnxError::Node { node, .. } = &e {
                if !text.contains(&node.op_type) {
                    return Err(format!("a node error does not name its op: {text}"));
                }
            }
            if text.len() > 4 * input.len() + 4096 {
                return Err(format!(
                    "a {} byte error for a {} byte model",
                    text.len(),
                    input.len()
                ));
            }
            Ok(None)
        }
    }
}

/// [`onnx_import`] as a verdict: accepted when the model imports.
pub fn onnx_target(input: &[u8]) -> Verdict {
    onnx_import(input).map(|m| m.is_some())
}

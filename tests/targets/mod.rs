//! The fuzz targets of `tests/fuzz.rs` for the `.fg` parser, the `.npy` decoder and the
//! `.tile` parser, checker and simulator, shared with the coverage-guided targets of
//! `fuzz/` (cargo-afl), which include this file. It uses `ferrite_ir` and `ferrite_accel`
//! directly (not the facade), so `fuzz/` builds without the CPU backend.
#![allow(dead_code)]

use ferrite_accel::{sim, tile};
use ferrite_ir::{npy, parse_bytes, print, verify, Tensor, TensorType};
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

//! The cheaper instruction shapes of the vector math and pointwise ops keep their exact
//! semantics, and the code really has those shapes:
//!
//! - `maximum`/`minimum` with a constant operand (one `maxps`/`minps`, or compare + `andps`
//!   for `+0`) still propagate NaN and return the second operand for `-0`/`+0`;
//! - vector `sign` and `relu` (bitwise forms without blends) match the reference on
//!   special values, in vector bodies and scalar tails;
//! - unrolled groups are interleaved: the stores of an unrolled body end up together at the
//!   end of the loop block instead of one per group.

mod support;
use support::*;

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{CpuOptions, CpuProgram, Jit, JitOptions, UnaryKernel, VMath};
use ferrite_ir::{DType, Tensor, TensorType};

fn specials() -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        -f32::NAN,
        0.0,
        -0.0,
        1e-3,
        -1e-3,
        2.0,
        -2.0,
        1.5,
        -1.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::MAX,
        f32::MIN,
        7.25,
    ];
    // A length that leaves a scalar tail after the vector body.
    v.extend([0.5, -0.5, 3.0]);
    v
}

/// `torch.maximum`/`minimum` as the vector math documents them: NaN wins, and for
/// `-0`/`+0` the second operand is returned.
fn expected(x: f32, y: f32, max: bool) -> f32 {
    if x.is_nan() || y.is_nan() {
        return f32::NAN;
    }
    if x == y {
        // IEEE 754-2019 maximum/minimum order -0 below +0; equal nonzero values are one value.
        if x != 0.0 {
            return x;
        }
        let both_neg = x.is_sign_negative() && y.is_sign_negative();
        let both_pos = x.is_sign_positive() && y.is_sign_positive();
        return match (max, both_neg, both_pos) {
            (true, true, _) => -0.0,
            (true, false, _) => 0.0,
            (false, _, true) => 0.0,
            (false, _, false) => -0.0,
        };
    }
    if (x > y) == max {
        x
    } else {
        y
    }
}

fn same(got: f32, want: f32) -> bool {
    (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits()
}

/// A constant shaped like `like` (`f32` or a splatted `f32x4`).
fn constant(b: &mut FunctionBuilder<'_>, like: Value, c: f32) -> Value {
    let s = b.ins().f32const(c);
    if b.func.dfg.value_type(like) == types::F32X4 {
        b.ins().splat(types::F32X4, s)
    } else {
        s
    }
}

#[test]
fn maximum_minimum_with_a_constant_keep_their_semantics() {
    let constants = [
        0.0f32,
        -0.0,
        1e-3,
        2.0,
        -1.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let mut jit = Jit::new().unwrap();
    let vm = VMath::for_isa(jit.isa());
    let mut names = Vec::new();
    for (k, &c) in constants.iter().enumerate() {
        for max in [true, false] {
            for constant_first in [true, false] {
                let name = format!("f{k}_{max}_{constant_first}");
                define_elementwise_f32(&mut jit, &name, 1, 2, &|b, v| {
                    let c = constant(b, v[0], c);
                    let (x, y) = if constant_first { (c, v[0]) } else { (v[0], c) };
                    if max {
                        vm.maximum(b, x, y)
                    } else {
                        vm.minimum(b, x, y)
                    }
                })
                .unwrap();
                names.push((name, c, max, constant_first));
            }
        }
    }
    let code = jit.finalize().unwrap();
    let xs = specials();
    for (name, c, max, constant_first) in names {
        let kernel = UnaryKernel::new(&code, &name).unwrap();
        let mut out = vec![0.0; xs.len()];
        kernel.run(&xs, &mut out).unwrap();
        for (&x, &got) in xs.iter().zip(&out) {
            let want = if constant_first {
                expected(c, x, max)
            } else {
                expected(x, c, max)
            };
            assert!(
                same(got, want),
                "{} with constant {c:e} ({}): x = {x:e} gave {got:e}, want {want:e}",
                if max { "maximum" } else { "minimum" },
                if constant_first { "first" } else { "second" },
            );
        }
    }
}

#[test]
fn maximum_with_a_nonzero_constant_is_one_maxps() {
    let options = JitOptions {
        capture_dumps: true,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).unwrap();
    let vm = VMath::for_isa(jit.isa());
    define_elementwise_f32(&mut jit, "clamp", 1, 1, &|b, v| {
        let lo = constant(b, v[0], 1e-3);
        let hi = constant(b, v[0], 2.0);
        let m = vm.maximum(b, v[0], lo);
        vm.minimum(b, m, hi)
    })
    .unwrap();
    let code = jit.finalize().unwrap();
    let vcode = code.dump("clamp").unwrap().vcode.to_lowercase();
    assert!(
        vcode.contains("maxps") && vcode.contains("minps"),
        "{vcode}"
    );
    // No NaN fix-up: neither a blend nor an unordered compare.
    assert!(
        !vcode.contains("blendv") && !vcode.contains("cmpunord"),
        "{vcode}"
    );
}

#[test]
fn vector_sign_and_relu_match_the_reference() {
    let xs = specials();
    let ty = TensorType::new(DType::F32, vec![xs.len()]).unwrap();
    let x = Tensor::from_f64(&ty, &xs.iter().map(|&v| v as f64).collect::<Vec<_>>());
    for op in ["sign", "relu", "abs"] {
        let g = graph(&format!(
            "graph g(x: f32[{n}]) -> f32[{n}] {{\n  y = {op}(x)\n  return y\n}}\n",
            n = xs.len()
        ));
        let want = ferrite_ir::interpret(&g, std::slice::from_ref(&x)).unwrap();
        let want = want[0].to_f64();
        for vectorize in [true, false] {
            let mut opts = CpuOptions::with_threads(1);
            opts.codegen.vectorize = vectorize;
            let c = CpuProgram::compile(&schedule(&g, true), &opts).unwrap();
            let got = c.run(std::slice::from_ref(&x)).unwrap()[0].to_f64();
            for ((&x, &g), &w) in xs.iter().zip(&got).zip(&want) {
                let ok = (g.is_nan() && w.is_nan()) || (g as f32).to_bits() == (w as f32).to_bits();
                assert!(ok, "{op}({x:e}) = {g:e}, want {w:e} (simd {vectorize})");
            }
        }
    }
}

#[test]
fn unrolled_groups_are_interleaved() {
    let g = graph("graph g(x: f32[1024]) -> f32[1024] {\n  y = exp(x)\n  return y\n}\n");
    let mut opts = CpuOptions::with_threads(1);
    opts.capture_dumps = true;
    let c = CpuProgram::compile(&schedule(&g, true), &opts).unwrap();
    let dump = c.dump();
    let optimized = dump
        .split("-- optimized clif")
        .nth(1)
        .and_then(|s| s.split("-- machine code").next())
        .unwrap_or_else(|| panic!("no optimized CLIF in:\n{dump}"));
    // The block holding the four-group body is the one with four vector stores; they come
    // one after the other at its end, not one per ~30-instruction group (input loads are
    // read-only, so the groups' loads and arithmetic may all move ahead of the stores).
    let block = optimized
        .split("\n\n")
        .find(|b| b.matches("store notrap").count() == 4)
        .unwrap_or_else(|| panic!("no four-store block in:\n{optimized}"));
    let lines: Vec<&str> = block.lines().collect();
    let stores: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("store notrap"))
        .map(|(k, _)| k)
        .collect();
    assert!(
        stores[3] - stores[0] <= 8,
        "stores at lines {stores:?} of the block:\n{block}"
    );
    // And the results are still right.
    let inputs = random_inputs(&g);
    let want = ferrite_ir::interpret(&g, &inputs).unwrap();
    let got = c.run(&inputs).unwrap();
    got[0].check_close(&want[0], 1e-6, 0.0).unwrap();
}

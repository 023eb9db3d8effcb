//! The JIT wrapper and the hand-built elementwise kernels.

use std::sync::Arc;
use std::thread;

use cranelift_codegen::ir::{types, InstBuilder};
use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{
    BinaryKernel, Jit, JitCode, JitError, JitOptions, KernelError, OptLevel, UnaryKernel,
};

fn assert_send_sync<T: Send + Sync>() {}

/// Defines `name(a: i64, b: i64) -> i64 { a * b + 7 }`.
fn define_mul_add(jit: &mut Jit, name: &str) {
    let sig = jit.signature(&[types::I64, types::I64], &[types::I64]);
    jit.define_with(name, sig, |b| {
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        let (x, y) = (b.block_params(block)[0], b.block_params(block)[1]);
        let p = b.ins().imul(x, y);
        let r = b.ins().iadd_imm_s(p, 7);
        b.ins().return_(&[r]);
    })
    .expect("valid function");
}

fn call_mul_add(code: &JitCode, name: &str, x: i64, y: i64) -> i64 {
    let f = code.function(name).expect("defined");
    assert!(f.has_signature(&[types::I64, types::I64], &[types::I64]));
    // SAFETY: the signature was just checked, and `code` outlives the call.
    let f = unsafe { std::mem::transmute::<*const u8, extern "C" fn(i64, i64) -> i64>(f.as_ptr()) };
    f(x, y)
}

#[test]
fn compiles_and_calls_a_function() {
    let mut jit = Jit::new().expect("host JIT");
    define_mul_add(&mut jit, "mul_add");
    let code = jit.finalize().expect("finalize");
    assert_eq!(call_mul_add(&code, "mul_add", 6, 7), 49);
    assert_eq!(call_mul_add(&code, "mul_add", -3, 5), -8);
    assert_eq!(code.function_names(), vec!["mul_add"]);
}

#[test]
fn without_optimization_too() {
    let options = JitOptions {
        opt_level: OptLevel::None,
        verify_after_passes: true,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).expect("host JIT");
    define_mul_add(&mut jit, "f");
    let code = jit.finalize().expect("finalize");
    assert_eq!(call_mul_add(&code, "f", 2, 3), 13);
}

#[test]
fn verifier_errors_are_values_naming_the_function() {
    let mut jit = Jit::new().expect("host JIT");
    let sig = jit.signature(&[types::I64], &[types::I64]);
    // Returns an f32 from a function declared to return i64.
    let err = jit
        .define_with("broken", sig, |b| {
            let block = b.create_block();
            b.append_block_params_for_function_params(block);
            b.switch_to_block(block);
            let v = b.ins().f32const(1.0);
            b.ins().return_(&[v]);
        })
        .unwrap_err();
    match &err {
        JitError::Verifier { name, errors } => {
            assert_eq!(name, "broken");
            assert!(!errors.is_empty());
        }
        other => panic!("expected a verifier error, got {other:?}"),
    }
    assert!(
        err.to_string().contains("`broken` failed verification"),
        "{err}"
    );
    // The module stays usable after a rejected function.
    define_mul_add(&mut jit, "ok");
    let code = jit.finalize().expect("finalize");
    assert_eq!(call_mul_add(&code, "ok", 1, 1), 8);
}

#[test]
fn duplicate_and_unknown_names() {
    let mut jit = Jit::new().expect("host JIT");
    define_mul_add(&mut jit, "f");
    let sig = jit.signature(&[], &[]);
    let func = jit.new_function("f", sig);
    assert_eq!(
        jit.define("f", func).unwrap_err(),
        JitError::DuplicateName("f".into())
    );
    let code = jit.finalize().expect("finalize");
    assert_eq!(
        code.function("g").unwrap_err(),
        JitError::UnknownFunction("g".into())
    );
}

#[test]
fn dumps_hold_clif_and_machine_code() {
    let options = JitOptions {
        capture_dumps: true,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).expect("host JIT");
    define_mul_add(&mut jit, "mul_add");
    let code = jit.finalize().expect("finalize");
    let dump = code.dump("mul_add").expect("captured");
    assert!(
        dump.clif.contains("function %mul_add(i64, i64) -> i64"),
        "{}",
        dump.clif
    );
    assert!(dump.clif.contains("imul"));
    assert!(dump.optimized_clif.contains("function %mul_add"));
    assert!(dump.vcode.contains("imul"), "{}", dump.vcode);
    // Without the option nothing is kept.
    let mut jit = Jit::new().expect("host JIT");
    define_mul_add(&mut jit, "f");
    assert!(jit.finalize().expect("finalize").dumps().is_empty());
}

#[test]
fn finalized_code_is_shared_across_threads() {
    assert_send_sync::<JitCode>();
    let mut jit = Jit::new().expect("host JIT");
    define_mul_add(&mut jit, "f");
    let code = Arc::new(jit.finalize().expect("finalize"));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let code = Arc::clone(&code);
            thread::spawn(move || {
                (0..1000)
                    .map(|i| call_mul_add(&code, "f", t, i))
                    .sum::<i64>()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let t = t as i64;
        assert_eq!(h.join().unwrap(), (0..1000).map(|i| t * i + 7).sum::<i64>());
    }
}

#[test]
fn many_modules_can_be_created_and_dropped() {
    // Each JitCode frees its executable memory on drop.
    for i in 0..200 {
        let mut jit = Jit::new().expect("host JIT");
        define_mul_add(&mut jit, "f");
        let code = jit.finalize().expect("finalize");
        assert_eq!(call_mul_add(&code, "f", i, 2), 2 * i + 7);
    }
}

#[test]
fn elementwise_kernels_for_every_length_and_unroll() {
    let mut jit = Jit::new().expect("host JIT");
    for unroll in [1, 2, 4] {
        define_elementwise_f32(&mut jit, &format!("copy{unroll}"), 1, unroll, &|_, v| v[0])
            .unwrap();
        define_elementwise_f32(&mut jit, &format!("add{unroll}"), 2, unroll, &|b, v| {
            b.ins().fadd(v[0], v[1])
        })
        .unwrap();
        define_elementwise_f32(&mut jit, &format!("mul_sub{unroll}"), 2, unroll, &|b, v| {
            let p = b.ins().fmul(v[0], v[1]);
            b.ins().fsub(p, v[0])
        })
        .unwrap();
    }
    let code = jit.finalize().expect("finalize");
    for unroll in [1, 2, 4] {
        let copy = UnaryKernel::new(&code, &format!("copy{unroll}")).unwrap();
        let add = BinaryKernel::new(&code, &format!("add{unroll}")).unwrap();
        let mul_sub = BinaryKernel::new(&code, &format!("mul_sub{unroll}")).unwrap();
        for n in 0..70 {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 100.0 - i as f32).collect();
            // One sentinel past the end checks that nothing is written beyond n.
            let mut out = vec![f32::NAN; n + 1];
            copy.run(&a, &mut out[..n]).unwrap();
            assert_eq!(&out[..n], &a[..]);
            assert!(out[n].is_nan());
            add.run(&a, &b, &mut out[..n]).unwrap();
            assert!(out[..n]
                .iter()
                .zip(a.iter().zip(&b))
                .all(|(o, (x, y))| *o == x + y));
            mul_sub.run(&a, &b, &mut out[..n]).unwrap();
            assert!(out[..n]
                .iter()
                .zip(a.iter().zip(&b))
                .all(|(o, (x, y))| *o == x * y - x));
            assert!(
                out[n].is_nan(),
                "unroll {unroll}, n {n}: wrote past the end"
            );
        }
    }
    // Wrong lengths and wrong signatures are errors.
    let copy = UnaryKernel::new(&code, "copy4").unwrap();
    let err = copy.run(&[1.0; 3], &mut [0.0; 4]).unwrap_err();
    assert_eq!(
        err,
        KernelError::LengthMismatch {
            expected: 4,
            found: 3
        }
    );
    assert!(matches!(
        UnaryKernel::new(&code, "add4"),
        Err(KernelError::WrongSignature(_))
    ));
    assert!(matches!(
        BinaryKernel::new(&code, "nope"),
        Err(KernelError::Jit(JitError::UnknownFunction(_)))
    ));
}

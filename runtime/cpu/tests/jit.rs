//! The JIT wrapper and the hand-built elementwise kernels.

use std::sync::Arc;
use std::thread;

use cranelift_codegen::ir::{types, InstBuilder};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use ferrite_cpu::kernels::define_elementwise_f32;
use ferrite_cpu::{
    BinaryKernel, Jit, JitCode, JitError, JitOptions, KernelError, OptLevel, UnaryKernel,
};

fn assert_send_sync<T: Send + Sync>() {}

/// The body of `(a: i64, b: i64) -> i64 { a * b + c }`.
fn mul_add_body(b: &mut FunctionBuilder<'_>, c: i64) {
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    let (x, y) = (b.block_params(block)[0], b.block_params(block)[1]);
    let p = b.ins().imul(x, y);
    let r = b.ins().iadd_imm_s(p, c);
    b.ins().return_(&[r]);
}

/// A body that returns an f32 from a function declared to return i64.
fn wrong_return_body(b: &mut FunctionBuilder<'_>) {
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    let v = b.ins().f32const(1.0);
    b.ins().return_(&[v]);
}

/// Defines `name(a: i64, b: i64) -> i64 { a * b + 7 }`.
fn define_mul_add(jit: &mut Jit, name: &str) {
    define_mul_add_c(jit, name, 7);
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
        .define_with("broken", sig, wrong_return_body)
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

/// Defines `name(a: i64, b: i64) -> i64 { a * b + c }`.
fn define_mul_add_c(jit: &mut Jit, name: &str, c: i64) {
    let sig = jit.signature(&[types::I64, types::I64], &[types::I64]);
    jit.define_with(name, sig, |b| mul_add_body(b, c))
        .expect("valid function");
}

#[test]
fn identical_functions_are_compiled_once_per_module() {
    // The constant makes these functions unlike any other test's, which may run at the
    // same time and share through the process-wide table.
    let mut jit = Jit::new().unwrap();
    define_mul_add_c(&mut jit, "first", 7_001);
    define_mul_add_c(&mut jit, "second", 7_001);
    define_mul_add_c(&mut jit, "other", 7_002);
    let code = jit.finalize().unwrap();
    let stats = code.stats();
    assert_eq!(
        (
            stats.compiled,
            stats.shared_in_module,
            stats.shared_across_modules
        ),
        (2, 1, 0),
        "{stats:?}"
    );
    assert_eq!(code.function_names(), vec!["first", "other", "second"]);
    assert_eq!(
        code.function("first").unwrap().as_ptr(),
        code.function("second").unwrap().as_ptr()
    );
    assert_eq!(call_mul_add(&code, "second", 6, 7), 7_043);
    assert_eq!(call_mul_add(&code, "other", 6, 7), 7_044);
}

#[test]
fn live_modules_share_functions_and_stay_alive_for_their_borrowers() {
    let mut a = Jit::new().unwrap();
    define_mul_add_c(&mut a, "f", 8_001);
    let a = a.finalize().unwrap();
    assert_eq!(a.stats().compiled, 1);

    let mut b = Jit::new().unwrap();
    define_mul_add_c(&mut b, "g", 8_001);
    define_mul_add_c(&mut b, "h", 8_002);
    let b = b.finalize().unwrap();
    let stats = b.stats();
    assert_eq!(
        (
            stats.compiled,
            stats.shared_in_module,
            stats.shared_across_modules
        ),
        (1, 0, 1),
        "{stats:?}"
    );
    assert_eq!(
        a.function("f").unwrap().as_ptr(),
        b.function("g").unwrap().as_ptr()
    );
    // `b` keeps `a`'s code alive after `a` is dropped.
    drop(a);
    assert_eq!(call_mul_add(&b, "g", 2, 3), 8_007);

    // A module capturing dumps shares only within itself, so each function has its dump.
    let mut c = Jit::with_options(JitOptions {
        capture_dumps: true,
        ..JitOptions::default()
    })
    .unwrap();
    define_mul_add_c(&mut c, "p", 8_001);
    define_mul_add_c(&mut c, "q", 8_001);
    let c = c.finalize().unwrap();
    let stats = c.stats();
    assert_eq!(
        (
            stats.compiled,
            stats.shared_in_module,
            stats.shared_across_modules
        ),
        (1, 1, 0),
        "{stats:?}"
    );
    assert!(c.dump("q").is_some_and(|d| d.clif.contains("imul")));
    assert_eq!(call_mul_add(&c, "q", 1, 1), 8_002);
}

#[test]
fn options_are_part_of_the_sharing_key() {
    let mut a = Jit::new().unwrap();
    define_mul_add_c(&mut a, "f", 9_001);
    let a = a.finalize().unwrap();
    let mut b = Jit::with_options(JitOptions {
        opt_level: OptLevel::None,
        ..JitOptions::default()
    })
    .unwrap();
    define_mul_add_c(&mut b, "f", 9_001);
    let b = b.finalize().unwrap();
    assert_eq!(b.stats().compiled, 1);
    assert_eq!(call_mul_add(&b, "f", 1, 2), 9_003);
    drop(a);
}

#[test]
fn functions_compile_on_several_threads_at_finalize() {
    let options = JitOptions {
        compile_threads: 4,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).unwrap();
    // Constants unlike any other test's (the process-wide sharing table).
    for c in 0..40 {
        define_mul_add_c(&mut jit, &format!("f{c}"), 9_100 + c);
    }
    define_mul_add_c(&mut jit, "again", 9_100);
    let code = jit.finalize().unwrap();
    let stats = code.stats();
    assert_eq!(
        (stats.compiled, stats.shared_in_module),
        (40, 1),
        "{stats:?}"
    );
    for c in 0..40 {
        assert_eq!(call_mul_add(&code, &format!("f{c}"), 6, 7), 9_142 + c);
    }
    assert_eq!(call_mul_add(&code, "again", 2, 3), 9_106);
}

#[test]
fn a_rejected_function_leaves_the_pending_ones_intact() {
    let options = JitOptions {
        compile_threads: 3,
        ..JitOptions::default()
    };
    let mut jit = Jit::with_options(options).unwrap();
    define_mul_add_c(&mut jit, "fine", 9_200);
    // A function the verifier rejects fails at `define` in the deferred mode too (returning
    // an i64 where the signature says i32), and the function pending before it still compiles.
    let sig = jit.signature(&[types::I64], &[types::I64]);
    let e = jit
        .define_with("broken", sig, |b| {
            let block = b.create_block();
            b.append_block_params_for_function_params(block);
            b.switch_to_block(block);
            let x = b.block_params(block)[0];
            let narrow = b.ins().ireduce(types::I32, x);
            b.ins().return_(&[narrow]);
        })
        .unwrap_err();
    assert!(
        matches!(&e, JitError::Verifier { name, .. } if name == "broken"),
        "{e}"
    );
    let code = jit.finalize().unwrap();
    assert_eq!(call_mul_add(&code, "fine", 1, 1), 9_201);
}

#[test]
fn a_module_dropped_while_its_functions_compile_lets_its_workers_go() {
    // Functions queued for the background workers, then the module dropped without
    // `finalize` (a caller's error while defining): the queue is dropped and the workers
    // leave. A second module after it compiles and runs as usual.
    for _ in 0..3 {
        let mut jit = Jit::with_options(JitOptions {
            compile_threads: 4,
            ..JitOptions::default()
        })
        .unwrap();
        for c in 0..12 {
            define_mul_add_c(&mut jit, &format!("f{c}"), 9_300 + c);
        }
        drop(jit);
    }
    let mut jit = Jit::with_options(JitOptions {
        compile_threads: 4,
        ..JitOptions::default()
    })
    .unwrap();
    define_mul_add_c(&mut jit, "after", 9_400);
    let code = jit.finalize().unwrap();
    assert_eq!(call_mul_add(&code, "after", 2, 3), 9_406);
}

/// Builds the function `name` with `params -> returns` and `body` without a module, for
/// `isa`.
fn build_for(
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    name: &str,
    params: &[cranelift_codegen::ir::Type],
    returns: &[cranelift_codegen::ir::Type],
    body: impl FnOnce(&mut FunctionBuilder<'_>),
) -> cranelift_codegen::ir::Function {
    use cranelift_codegen::ir::{Function, UserFuncName};
    let sig = ferrite_cpu::jit::signature(isa, params, returns);
    let mut func = Function::with_name_signature(UserFuncName::testcase(name), sig);
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut ctx);
    body(&mut b);
    b.seal_all_blocks();
    b.finalize(isa.frontend_config());
    func
}

/// Functions built and verified on other threads with the module's shared ISA are
/// defined without a second verification, and run; `verify` rejects what `define` would.
#[test]
fn functions_built_and_verified_on_other_threads_are_defined() {
    let mut jit = Jit::with_options(JitOptions {
        compile_threads: 3,
        ..JitOptions::default()
    })
    .expect("host JIT");
    let isa = jit.shared_isa();
    let verified: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = (0..4i64)
            .map(|c| {
                let isa = &isa;
                s.spawn(move || {
                    let name = format!("f{c}");
                    let i64s = [types::I64, types::I64];
                    let f = build_for(&**isa, &name, &i64s, &i64s[..1], |b| mul_add_body(b, c));
                    (
                        name,
                        ferrite_cpu::jit::verify(&**isa, "f", f).expect("valid"),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, f) in verified {
        jit.define_verified(&name, f).expect("defined");
    }
    let broken = build_for(
        &*isa,
        "broken",
        &[types::I64],
        &[types::I64],
        wrong_return_body,
    );
    assert!(matches!(
        ferrite_cpu::jit::verify(&*isa, "broken", broken),
        Err(JitError::Verifier { name, .. }) if name == "broken"
    ));
    let code = jit.finalize().expect("finalize");
    for c in 0..4 {
        assert_eq!(call_mul_add(&code, &format!("f{c}"), 6, 7), 42 + c);
    }
}

/// Precompiled functions with one body are compiled once, whatever order they are
/// defined in: one whose body another claimed (on another thread, say) waits for that
/// one's definition, and so does a name defined as the same as it.
#[test]
fn precompiled_functions_share_a_claimed_body_in_any_order() {
    let mut jit = Jit::new().expect("host JIT");
    let isa = jit.shared_isa();
    let pre = jit
        .precompiler()
        .expect("a module without dumps precompiles");
    let i64s = [types::I64, types::I64];
    // The constant makes the body unlike any other test's (the process-wide table).
    let compile = |name: &str, c: i64| {
        let f = build_for(&*isa, name, &i64s, &i64s[..1], |b| mul_add_body(b, c));
        pre.compile(
            name,
            ferrite_cpu::jit::verify(&*isa, name, f).expect("valid"),
        )
        .expect("compiles")
    };
    let claimant = compile("claimant", 7_101);
    let repeat = compile("repeat", 7_101);
    let other = compile("other", 7_102);
    jit.define_precompiled(repeat)
        .expect("waits for its claimant");
    jit.define_same_as("twin", "repeat").expect("waits too");
    jit.define_precompiled(other).expect("defined");
    jit.define_precompiled(claimant).expect("defined");
    let code = jit.finalize().expect("finalize");
    let stats = code.stats();
    assert_eq!(
        (
            stats.compiled,
            stats.shared_in_module,
            stats.shared_across_modules
        ),
        (2, 2, 0),
        "{stats:?}"
    );
    for name in ["claimant", "repeat", "twin"] {
        assert_eq!(call_mul_add(&code, name, 6, 7), 7_143, "{name}");
    }
    assert_eq!(call_mul_add(&code, "other", 6, 7), 7_144);
    assert_eq!(
        code.function("claimant").unwrap().as_ptr(),
        code.function("twin").unwrap().as_ptr()
    );
}

/// A precompiled function whose claimant is never defined fails the finalize, naming it.
#[test]
fn a_claimed_body_never_defined_fails_the_finalize() {
    let mut jit = Jit::new().expect("host JIT");
    let isa = jit.shared_isa();
    let pre = jit
        .precompiler()
        .expect("a module without dumps precompiles");
    let i64s = [types::I64, types::I64];
    let compile = |name: &str| {
        let f = build_for(&*isa, name, &i64s, &i64s[..1], |b| mul_add_body(b, 7_201));
        pre.compile(
            name,
            ferrite_cpu::jit::verify(&*isa, name, f).expect("valid"),
        )
        .expect("compiles")
    };
    let _claimant = compile("claimant");
    jit.define_precompiled(compile("repeat")).expect("waits");
    assert!(matches!(
        jit.finalize(),
        Err(JitError::UnknownFunction(name)) if name == "claimant"
    ));
}

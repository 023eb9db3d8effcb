//! `ferrite::jit`: tracing, the guard cache (hits, misses, recompiles, the limit and
//! the eager fallback), events, thread safety, and eager == compiled on the example
//! models.

#[path = "../examples/models/mod.rs"]
mod models;

use ferrite::{jit, DType, Error, JitEvent, JitStats, Options, Target, Tensor, Var, WhenFull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::from_slice(shape, values).unwrap()
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
    Tensor::from_vec(shape, values).unwrap()
}

/// Collects events instead of printing them.
fn recorder() -> (Arc<Mutex<Vec<JitEvent>>>, impl Fn(&JitEvent) + Send + Sync) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    (events, move |e: &JitEvent| {
        sink.lock().unwrap().push(e.clone())
    })
}

#[test]
fn a_closure_is_traced_once_per_signature_and_cached() {
    let traces = Arc::new(AtomicUsize::new(0));
    let counter = traces.clone();
    let f = jit(move |[x, w]: [Var; 2]| {
        counter.fetch_add(1, Ordering::SeqCst);
        (x.matmul(&w) + 1.0).relu()
    });
    let x = f32s(&[2, 2], &[1.0, -2.0, 3.0, 4.0]);
    let w = f32s(&[2, 2], &[1.0, 0.0, 0.0, -1.0]);
    let want = f32s(&[2, 2], &[2.0, 3.0, 4.0, 0.0]);
    for _ in 0..3 {
        assert_eq!(f.run(&[&x, &w]).unwrap(), vec![want.clone()]);
    }
    assert_eq!(traces.load(Ordering::SeqCst), 1, "traced once");
    assert_eq!(
        f.stats(),
        JitStats {
            calls: 3,
            hits: 2,
            misses: 1,
            compiles: 1,
            recompiles: 0,
            eager_calls: 0,
            evictions: 0,
            cache_entries: 1,
        }
    );
    let sig = vec![x.ty().clone(), w.ty().clone()];
    assert_eq!(f.signatures(), vec![sig.clone()]);
    let exe = f.compiled(&sig).unwrap();
    assert_eq!(exe.target(), Target::Cpu);
    assert!(exe.kernel_count().unwrap() >= 1);
    // Eager runs trace again but never touch the cache or the counters.
    assert_eq!(f.run_eager(&[&x, &w]).unwrap(), vec![want]);
    assert_eq!(traces.load(Ordering::SeqCst), 2);
    assert_eq!(f.stats().calls, 3);
}

#[test]
fn a_new_shape_or_dtype_fails_the_guard_and_recompiles() {
    let (events, hook) = recorder();
    let f = jit(|[x]| x.sum_all())
        .name("total")
        .options(Options::default().target(Target::Interp))
        .on_event(hook);
    let a = ramp(&[2, 3]);
    let b = ramp(&[4]);
    let c = Tensor::from_vec(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(
        f.run(&[&a]).unwrap()[0].as_slice::<f32>(),
        Some(&[-2.25f32][..])
    );
    assert_eq!(
        f.run(&[&b]).unwrap()[0].as_slice::<f32>(),
        Some(&[-2.5f32][..])
    );
    // Same shape, another dtype: another signature (and an i64 sum).
    assert_eq!(
        f.run(&[&c]).unwrap()[0].as_slice::<i64>(),
        Some(&[21i64][..])
    );
    f.run(&[&a]).unwrap();
    let s = f.stats();
    assert_eq!((s.calls, s.hits, s.misses), (4, 1, 3));
    assert_eq!((s.compiles, s.recompiles, s.cache_entries), (3, 2, 3));

    let events = events.lock().unwrap();
    let compiled: Vec<(bool, Vec<ferrite::TensorType>)> = events
        .iter()
        .map(|e| match e {
            JitEvent::Compiled {
                recompile,
                signature,
                ..
            } => (*recompile, signature.clone()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        compiled,
        vec![
            (false, vec![a.ty().clone()]),
            (true, vec![b.ty().clone()]),
            (true, vec![c.ty().clone()]),
        ]
    );
    let line = events[1].to_string();
    assert!(
        line.starts_with("ferrite::jit `total`: recompiled for (f32[4]) in "),
        "{line}"
    );
    assert!(line.ends_with("(cache 2/8)"), "{line}");
}

#[test]
fn past_the_cache_limit_new_signatures_run_eagerly_and_say_so_once() {
    let (events, hook) = recorder();
    let f = jit(|[x]| (x.exp() * 2.0).softmax(-1))
        .name("limited")
        .cache_limit(2)
        .when_full(WhenFull::Eager)
        .on_event(hook);
    let inputs: Vec<Tensor> = (1..=5).map(|n| ramp(&[n])).collect();
    let mut first = Vec::new();
    for x in &inputs {
        first.push(f.run(&[x]).unwrap());
    }
    // Cached signatures still hit; the others keep running eagerly.
    for (x, want) in inputs.iter().zip(&first) {
        assert_eq!(&f.run(&[x]).unwrap(), want);
    }
    let s = f.stats();
    assert_eq!(s.calls, 10);
    assert_eq!((s.compiles, s.recompiles, s.cache_entries), (2, 1, 2));
    assert_eq!(s.eager_calls, 6, "3 new signatures, twice each");
    assert_eq!(s.hits, 2);
    assert_eq!(s.misses, 8);

    let events = events.lock().unwrap();
    let fallbacks: Vec<&JitEvent> = events
        .iter()
        .filter(|e| matches!(e, JitEvent::EagerFallback { .. }))
        .collect();
    assert_eq!(fallbacks.len(), 1, "said once");
    assert_eq!(
        fallbacks[0],
        &JitEvent::EagerFallback {
            name: "limited".into(),
            signature: vec![inputs[2].ty().clone()],
            limit: 2
        }
    );
    assert!(fallbacks[0].to_string().contains("run eagerly"));

    // Eager results agree with compiled ones: compile the eager signatures fresh.
    let g = jit(|[x]| (x.exp() * 2.0).softmax(-1));
    for (x, eager) in inputs.iter().zip(&first).skip(2) {
        g.run(&[x]).unwrap()[0]
            .check_close(&eager[0], 1e-5, 1e-6)
            .unwrap();
    }
}

#[test]
fn past_the_cache_limit_the_least_recently_used_signature_is_evicted() {
    let (events, hook) = recorder();
    let f = jit(|[x]| (x.exp() * 2.0).softmax(-1))
        .name("lru")
        .cache_limit(2)
        .on_event(hook);
    let xs: Vec<Tensor> = (1..=4).map(|n| ramp(&[n])).collect();
    f.run(&[&xs[0]]).unwrap(); // [1]
    f.run(&[&xs[1]]).unwrap(); // [1], [2]
    f.run(&[&xs[0]]).unwrap(); // hit: [2] is now the least recently used
    f.run(&[&xs[2]]).unwrap(); // evicts [2]
    let mut sigs = f.signatures();
    sigs.sort_by_key(|s| s[0].shape.clone());
    assert_eq!(
        sigs,
        vec![vec![xs[0].ty().clone()], vec![xs[2].ty().clone()]]
    );
    let got = f.run(&[&xs[1]]).unwrap(); // evicts [1] (used before [3]), compiles [2] again
    let s = f.stats();
    assert_eq!(
        (
            s.calls,
            s.hits,
            s.compiles,
            s.evictions,
            s.eager_calls,
            s.cache_entries
        ),
        (5, 1, 4, 2, 0, 2)
    );
    let want = f.run_eager(&[&xs[1]]).unwrap();
    got[0].check_close(&want[0], 1e-5, 1e-6).unwrap();
    let events = events.lock().unwrap();
    let evicted: Vec<&JitEvent> = events
        .iter()
        .filter(|e| matches!(e, JitEvent::Evicted { .. }))
        .collect();
    assert_eq!(evicted.len(), 2);
    assert_eq!(
        evicted[0],
        &JitEvent::Evicted {
            name: "lru".into(),
            evicted: vec![xs[1].ty().clone()],
            signature: vec![xs[2].ty().clone()],
            limit: 2,
        }
    );
    assert!(
        evicted[0].to_string().contains("least recently used"),
        "{}",
        evicted[0]
    );
}

#[test]
fn a_cache_limit_of_zero_never_compiles() {
    let f = jit(|[x, y]| &x * &y - 1).cache_limit(0).on_event(|_| {});
    let x = f32s(&[3], &[1.0, 2.0, 3.0]);
    let out = f.run(&[&x, &x]).unwrap();
    assert_eq!(out[0], f32s(&[3], &[0.0, 3.0, 8.0]));
    let s = f.stats();
    assert_eq!((s.compiles, s.eager_calls, s.cache_entries), (0, 1, 0));
}

#[test]
fn errors_in_the_closure_or_the_inputs_are_returned_and_not_cached() {
    let (events, hook) = recorder();
    // Valid for square inputs only.
    let f = jit(|[x]| x.matmul(&x)).on_event(hook);
    let bad = ramp(&[2, 3]);
    for _ in 0..2 {
        let err = f.run(&[&bad]).unwrap_err();
        assert!(
            matches!(&err, Error::Build { op, .. } if op == "matmul"),
            "{err:?}"
        );
        assert!(err.to_string().contains("tests/jit.rs:"), "{err}");
    }
    let s = f.stats();
    assert_eq!(
        (s.compiles, s.cache_entries),
        (2, 0),
        "failures hold no slot"
    );
    assert!(matches!(
        events.lock().unwrap()[0],
        JitEvent::CompileFailed { .. }
    ));
    let ok = ramp(&[2, 2]);
    assert_eq!(f.run(&[&ok]).unwrap()[0].shape(), &[2, 2]);
    assert_eq!(
        f.run(&[&ok, &ok]).unwrap_err(),
        Error::InputCount {
            expected: 1,
            got: 2
        }
    );
    assert_eq!(
        f.run_eager::<&Tensor>(&[]).unwrap_err(),
        Error::InputCount {
            expected: 1,
            got: 0
        }
    );
    // A closure may return a Result; its error is the call's error.
    let g = jit(|[x]| -> ferrite::Result<Var> {
        let ty = x.ty()?;
        if ty.dtype != DType::F32 {
            return Err(Error::Data {
                message: "f32 only".into(),
            });
        }
        Ok(x.relu())
    })
    .on_event(|_| {});
    let ints = Tensor::from_vec(&[1], vec![1i32]).unwrap();
    assert!(matches!(g.run(&[&ints]), Err(Error::Data { .. })));
    assert_eq!(g.run(&[&ramp(&[2])]).unwrap()[0], f32s(&[2], &[0.0, 0.0]));
}

#[test]
fn closures_return_one_or_several_outputs() {
    let x = ramp(&[4]);
    let opts = Options::default().target(Target::Interp);
    let pair = jit(|[x]| (x.max_all(), x.min_all())).options(opts.clone());
    let out = pair.run(&[&x]).unwrap();
    assert_eq!(
        (out[0].to_f64_vec(), out[1].to_f64_vec()),
        (vec![-0.25], vec![-1.0])
    );
    let three = jit(|[x]| [x.abs(), x.neg(), x.clone()]).options(opts.clone());
    assert_eq!(three.run(&[&x]).unwrap().len(), 3);
    let many = jit(|[x]| (0..5).map(|i| &x * i).collect::<Vec<_>>()).options(opts.clone());
    let out = many.run(&[&x]).unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out[4], f32s(&[4], &[-4.0, -3.0, -2.0, -1.0]));
    let quad = jit(|[a, b]| (a.clone(), b.clone(), &a + &b, &a * &b)).options(opts);
    assert_eq!(quad.run(&[&x, &x]).unwrap().len(), 4);
    // Returning nothing is an error, not a panic.
    let none = jit(|[_x]: [Var; 1]| Vec::<Var>::new());
    assert!(matches!(none.run(&[&x]), Err(Error::NoOutputs { .. })));
}

#[test]
fn a_jit_serves_many_threads_and_compiles_each_signature_once() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    let f = jit(|[x, w]| x.matmul(&w).tanh().sum([-1], false)).on_event(|_| {});
    assert_send_sync(&f);
    let w = ramp(&[16, 8]);
    let xs = [ramp(&[4, 16]), ramp(&[6, 16])];
    let want: Vec<Tensor> = xs
        .iter()
        .map(|x| f.run_eager(&[x, &w]).unwrap().remove(0))
        .collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (f, w, xs, want) = (&f, &w, &xs, &want);
            s.spawn(move || {
                for i in 0..10 {
                    let k = (t + i) % 2;
                    let got = f.run(&[&xs[k], w]).unwrap();
                    got[0].check_close(&want[k], 1e-5, 1e-6).unwrap();
                }
            });
        }
    });
    let s = f.stats();
    assert_eq!(s.calls, 80);
    assert_eq!(
        s.compiles, 2,
        "concurrent misses of one signature compile it once"
    );
    assert_eq!(s.hits + s.misses, 80);
    assert_eq!(s.misses, 2);
}

#[test]
fn eager_and_compiled_agree_on_the_transformer_example() {
    let weights = models::block_weights();
    for target in [Target::Cpu, Target::Sim, Target::Loops] {
        let block = jit(models::transformer_block())
            .options(Options::default().target(target))
            .on_event(|_| {});
        for (batch, seq) in [(2, 16), (3, 8)] {
            let x = models::uniform(&[batch, seq, models::D_MODEL], batch as u64, 1.0);
            let inputs = models::with_weights(&x, &weights);
            let compiled = block.run(&inputs).unwrap();
            let eager = ferrite::eager(models::transformer_block(), &inputs).unwrap();
            assert_eq!(compiled[0].shape(), &[batch, seq, models::D_MODEL]);
            compiled[0]
                .check_close(&eager[0], 1e-4, 1e-4)
                .unwrap_or_else(|e| panic!("{target}, batch {batch}: {e}"));
        }
        assert_eq!(block.stats().recompiles, 1, "{target}");
    }
}

#[test]
fn the_causal_mask_makes_early_positions_ignore_later_ones() {
    // An independent check of the block's attention: changing the last position of the
    // sequence must not change the outputs at earlier positions.
    let block = jit(models::transformer_block()).on_event(|_| {});
    let weights = models::block_weights();
    let (seq, d) = (8, models::D_MODEL);
    let x = models::uniform(&[1, seq, d], 5, 1.0);
    let mut changed = x.to_f64_vec();
    for v in &mut changed[(seq - 1) * d..] {
        *v += 0.5;
    }
    let changed = Tensor::from_f64(x.ty(), &changed).unwrap();
    let a = block
        .run(&models::with_weights(&x, &weights))
        .unwrap()
        .remove(0);
    let b = block
        .run(&models::with_weights(&changed, &weights))
        .unwrap()
        .remove(0);
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    assert_eq!(
        a[..(seq - 1) * d],
        b[..(seq - 1) * d],
        "earlier positions moved"
    );
    assert_ne!(
        a[(seq - 1) * d..],
        b[(seq - 1) * d..],
        "the last position did not"
    );
}

#[test]
fn eager_and_compiled_agree_on_the_mlp_example() {
    let batch = 16;
    let g = models::mlp_graph(batch);
    let x = models::uniform(&[batch, models::MLP_IN], 0, 1.0);
    let weights = models::mlp_weights();
    let inputs = models::with_weights(&x, &weights);
    let eager = ferrite::compile(&g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&inputs)
        .unwrap();
    for options in [
        Options::default(),
        Options::default().fuse(false),
        Options::default().optimize(false),
        Options::default().target(Target::Loops),
        Options::default().target(Target::Sim),
    ] {
        let got = ferrite::compile(&g, &options)
            .unwrap()
            .run(&inputs)
            .unwrap();
        got[0]
            .check_close(&eager[0], 1e-4, 1e-6)
            .unwrap_or_else(|e| panic!("{options:?}: {e}"));
        assert_eq!(got[1], eager[1], "{options:?}: predicted classes");
    }
    // Probabilities: rows sum to one.
    for row in eager[0].to_f64_vec().chunks(models::MLP_OUT) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn automatic_dynamic_compiles_a_transformer_once_for_every_length_after_the_second() {
    let (events, hook) = recorder();
    let f = jit(models::transformer_block())
        .name("block")
        .automatic_dynamic(true)
        .on_event(hook);
    let weights = models::block_weights();
    let mut lengths: Vec<usize> = vec![16, 24];
    lengths.extend((1..=40).map(|i| (i * 37) % 97 + 1));
    for (i, &t) in lengths.iter().enumerate() {
        let b = 1 + i % 3;
        let x = models::uniform(&[b, t, models::D_MODEL], 100 + i as u64, 1.0);
        let inputs = models::with_weights(&x, &weights);
        let got = f.run(&inputs).unwrap();
        let want = f.run_eager(&inputs).unwrap();
        got[0]
            .check_close(&want[0], 1e-4, 1e-4)
            .unwrap_or_else(|m| panic!("B={b}, T={t}: {m}"));
    }
    let events = events.lock().unwrap();
    let generalized: Vec<&JitEvent> = events
        .iter()
        .filter(|e| matches!(e, JitEvent::Generalized { .. }))
        .collect();
    // The first call compiles its shapes; the second generalizes B and T (both changed),
    // and later calls past the symbols' ranges generalize again with wider ones.
    assert!(
        !generalized.is_empty() && generalized.len() <= 3,
        "{events:#?}"
    );
    let text = generalized[0].to_string();
    assert!(text.contains("f32[s0, s1, 64]"), "{text}");
    assert!(text.contains("one program for every binding"), "{text}");
    assert!(!events
        .iter()
        .any(|e| matches!(e, JitEvent::NotGeneralized { .. })));
    // Every compile: the first signature, then each generalization's row programs.
    let compiled = events
        .iter()
        .filter(|e| matches!(e, JitEvent::Compiled { .. }))
        .count();
    let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    assert!(compiled <= 1 + 2 * generalized.len(), "{lines:#?}");
}

#[test]
fn automatic_dynamic_says_why_a_closure_does_not_generalize() {
    let (events, hook) = recorder();
    // A pad of the length squared: `pad` amounts are no size expressions, so the
    // traces differ beyond their sizes.
    let f = jit(|[x]: [Var; 1]| {
        let n = x.size(0);
        x.reshape([1, n]).pad([0, 0, 0, n * n + 1 - n], 0.0)
    })
    .automatic_dynamic(true)
    .on_event(hook);
    for n in [2usize, 3, 5] {
        let x = ramp(&[n]);
        let y = f.run(&[x]).unwrap();
        assert_eq!(y[0].shape(), &[1, n * n + 1]);
    }
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, JitEvent::NotGeneralized { .. })),
        "{events:#?}"
    );
    assert_eq!(f.stats().compiles, 3);
}

//! Constant tensors end to end through `ferrite::`: built with `Graph::constant`, captured
//! by `jit`, read from `.fg` text with a safetensors weights file, and run on every target,
//! fused and unfused, against the reference interpreter.

use ferrite::{Options, Target, Tensor};

fn t(shape: &[usize], seed: u64) -> Tensor {
    Tensor::random(&ferrite::f32(shape), seed).unwrap()
}

/// Runs `g` on every target, fused and unfused, and checks each against the interpreter.
fn check_everywhere(g: &ferrite::Graph, inputs: &[&Tensor]) -> Vec<Tensor> {
    let want = ferrite::compile(g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(inputs)
        .unwrap();
    for target in [Target::Cpu, Target::Sim, Target::Loops] {
        for fuse in [true, false] {
            let exe = ferrite::compile(g, &Options::default().target(target).fuse(fuse)).unwrap();
            let got = exe.run(inputs).unwrap();
            for (a, b) in got.iter().zip(&want) {
                a.check_close(b, 1e-5, 1e-5)
                    .unwrap_or_else(|e| panic!("{target:?} fuse={fuse}: {e}"));
            }
        }
    }
    want
}

#[test]
fn matmul_with_constant_weights_and_broadcast_bias() {
    let g = ferrite::Graph::new("mlp");
    let x = g.input("x", ferrite::f32(&[8, 16]));
    let w1 = g.constant("fc1.weight", &t(&[16, 32], 1));
    let b1 = g.constant("fc1.bias", &t(&[32], 2));
    let w2 = g.constant("fc2.weight", &t(&[32, 4], 3));
    let h = (x.matmul(&w1) + &b1).relu();
    g.output(&h.matmul(&w2).softmax(-1));
    let exe = ferrite::compile(&g, &Options::default()).unwrap();
    assert_eq!(exe.input_names(), ["x"], "constants are no inputs");
    check_everywhere(&g, &[&t(&[8, 16], 9)]);
}

#[test]
fn constants_feed_reductions_and_index_select_tables() {
    let g = ferrite::Graph::new("emb");
    let ids = g.input("ids", ferrite::i64(&[6]));
    let table = g.constant("table", &t(&[10, 8], 4));
    let scale = g.constant("scale", &t(&[8], 5));
    let e = table.index_select(0, &ids) * &scale;
    g.output(&e.sum([1], false));
    g.output(&table.max([0], true));
    let ids = Tensor::from_vec(&[6], vec![0i64, 3, 9, 3, 1, 7]).unwrap();
    check_everywhere(&g, &[&ids]);
}

#[test]
fn small_constants_fold_and_a_constant_can_be_an_output() {
    let g = ferrite::Graph::new("fold");
    let x = g.input("x", ferrite::f32(&[4]));
    let ones = g.constant("ones", &Tensor::from_vec(&[4], vec![1.0f32; 4]).unwrap());
    let c = g.constant("c", &t(&[4], 6));
    g.output(&(x * &ones));
    g.output(&c);
    let out = check_everywhere(&g, &[&t(&[4], 7)]);
    assert_eq!(out[1], t(&[4], 6));
}

#[test]
fn jit_closures_capture_weights_as_constants() {
    let w = t(&[3, 2], 8);
    let f = ferrite::jit(move |[x]| x.matmul(&x.graph().constant("w", &w)).relu());
    let x = t(&[4, 3], 9);
    let got = f.run(&[&x]).unwrap();
    let want = f.run_eager(&[&x]).unwrap();
    got[0].check_close(&want[0], 1e-6, 1e-6).unwrap();
}

#[test]
fn graphs_with_weights_round_trip_through_text() {
    let dir = std::env::temp_dir().join(format!("ferrite-consts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = ferrite::Graph::new("mlp");
    let x = g.input("x", ferrite::f32(&[2, 5]));
    let w = g.constant("fc.weight", &t(&[5, 3], 1));
    let s = g.constant(
        "s",
        &Tensor::from_vec(&[3], vec![0.5f32, 2.0, -1.0]).unwrap(),
    );
    g.output(&(x.matmul(&w) * &s));
    let ir = g.to_ir().unwrap();
    let path = dir.join("mlp.fg");
    ferrite::save(&ir, &path).unwrap();
    assert!(dir.join("mlp.safetensors").is_file());
    let back = ferrite::load(&path).unwrap();
    assert_eq!(back.weights.as_deref(), Some("mlp.safetensors"));
    let text = ferrite::print(&back);
    assert_eq!(
        text,
        std::fs::read_to_string(&path).unwrap(),
        "load(save(g)) prints as saved"
    );
    let xs = t(&[2, 5], 3);
    let a = ferrite::ir::interpret(&ir, &[xs.as_ir().clone()]).unwrap();
    let b = ferrite::ir::interpret(&back, &[xs.as_ir().clone()]).unwrap();
    assert_eq!(a, b);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The MLP of `examples/weights/`, its weights drawn from fixed seeds.
fn example_mlp() -> ferrite::Graph {
    let g = ferrite::Graph::new("mlp");
    let x = g.input("x", ferrite::f32(&[4, 16]));
    let w1 = g.constant("fc1.weight", &t(&[16, 32], 101));
    let b1 = g.constant("fc1.bias", &t(&[32], 102));
    let w2 = g.constant("fc2.weight", &t(&[32, 10], 103));
    let b2 = g.constant("fc2.bias", &t(&[10], 104));
    let h = (x.matmul(&w1) + &b1).relu();
    let logits = h.matmul(&w2) + &b2;
    g.output(&logits.log_softmax(-1));
    g
}

/// `examples/weights/mlp.fg` and its `mlp.safetensors` are what `ferrite::save` writes
/// for [`example_mlp`] (the golden text of a printed graph with constants);
/// `FERRITE_BLESS=1` rewrites them.
#[test]
fn the_weights_example_is_what_save_writes() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("ferrite-consts-ex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ir = example_mlp().to_ir().unwrap();
    ferrite::save(&ir, dir.join("mlp.fg")).unwrap();
    let committed = repo.join("examples/weights");
    for name in ["mlp.fg", "mlp.safetensors"] {
        let fresh = std::fs::read(dir.join(name)).unwrap();
        if std::env::var_os("FERRITE_BLESS").is_some() {
            std::fs::create_dir_all(&committed).unwrap();
            std::fs::write(committed.join(name), &fresh).unwrap();
        }
        let old = std::fs::read(committed.join(name)).unwrap_or_default();
        assert!(
            old == fresh,
            "examples/weights/{name} is stale (FERRITE_BLESS=1 rewrites it)"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // And it runs, through the file, as the builder graph does.
    let back = ferrite::load(committed.join("mlp.fg")).unwrap();
    let x = t(&[4, 16], 0);
    let want = ferrite::compile(&example_mlp(), &Options::default().target(Target::Interp))
        .unwrap()
        .run(&[&x])
        .unwrap();
    for target in [Target::Cpu, Target::Sim] {
        let got = ferrite::compile_ir(&back, &Options::default().target(target))
            .unwrap()
            .run(&[&x])
            .unwrap();
        got[0].check_close(&want[0], 1e-5, 1e-5).unwrap();
    }
}

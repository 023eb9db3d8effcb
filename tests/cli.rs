//! End-to-end tests of the `ferrite` binary: exit codes, messages, and the files it writes.

use ferrite::ir::Tensor;
use ferrite::ir::{npy, Data};
use ferrite::{DType, TensorType};
use std::path::Path;

mod common;
use common::{assert_exit, examples, ferrite, ferrite_env, stderr, stdout, Scratch};

fn read_npy(path: &str) -> Tensor {
    npy::decode(&std::fs::read(path).unwrap()).unwrap()
}

const SCALE_GRAPH: &str = "\
# y = x * s, broadcasting s over the rows.
graph scale(x: f32[2, 3], s: f32[3]) -> f32[2, 3] {
  y = mul(x, s)
  return y
}
";

#[test]
fn check_prints_a_summary_for_every_example() {
    let all = examples();
    assert!(all.len() >= 8, "examples: {all:?}");
    for file in &all {
        let o = ferrite(&["check", file]);
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert!(out.starts_with(&format!("{file}: ok (graph ")), "{out}");
    }
    let o = ferrite(&["check", "examples/mlp.fg"]);
    assert_eq!(
        stdout(&o),
        "examples/mlp.fg: ok (graph mlp: 5 params, 5 ops, 1 output)\n"
    );
}

#[test]
fn parse_errors_are_located_and_exit_1() {
    let s = Scratch::new("parse-errors");
    let bad = s.file(
        "bad.fg",
        "# inner dimensions differ\ngraph g(x: f32[2, 3], w: f32[4, 5]) {\n  y = matmul(x, w)\n  return y\n}\n",
    );
    for cmd in ["check", "fmt", "run"] {
        let o = ferrite(&[cmd, &bad]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("{bad}:3:7: error: matmul")),
            "{cmd}: {err}"
        );
        // The offending line and a caret under column 7 follow.
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[1].trim(), "y = matmul(x, w)", "{err}");
        let caret = lines[2].find('^').expect("a caret line");
        let code = lines[1].find("matmul").unwrap();
        assert_eq!(caret, code, "{err}");
        assert!(stdout(&o).is_empty());
    }
    let junk = s.file("junk.fg", b"graph g(x: f32[2]) {\n  return x\n}\n\xff\n");
    let o = ferrite(&["check", &junk]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with(&format!("{junk}:4:1: error:")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn missing_files_and_bad_flags_are_user_errors() {
    let o = ferrite(&["check", "no/such/file.fg"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with("error: cannot read `no/such/file.fg`:"),
        "{}",
        stderr(&o)
    );

    let o = ferrite(&["run", "examples/mlp.fg", "--bogus"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("--bogus"), "{}", stderr(&o));

    let o = ferrite(&["frobnicate", "examples/mlp.fg"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("frobnicate"), "{}", stderr(&o));

    let o = ferrite(&[]);
    assert_exit(&o, 1);

    let o = ferrite(&["run", "examples/mlp.fg", "--seed", "minus-one"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("minus-one"), "{}", stderr(&o));

    let o = ferrite(&["run", "examples/mlp.fg", "--input", "x"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("expected NAME=FILE.npy"),
        "{}",
        stderr(&o)
    );

    for flag in ["--help", "--version"] {
        let o = ferrite(&[flag]);
        assert_exit(&o, 0);
        assert!(stdout(&o).contains("ferrite"), "{}", stdout(&o));
    }
    let o = ferrite(&["run", "--help"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("--input <NAME=FILE.npy>"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn compiled_targets_match_the_interpreter() {
    let s = Scratch::new("targets");
    let run = |target: &str, extra: &[&str]| {
        let dir = s.path(&format!("{target}{}", extra.join("")));
        let mut args = vec![
            "run",
            "examples/transformer_block.fg",
            "--target",
            target,
            "--out",
            &dir,
        ];
        args.extend_from_slice(extra);
        let o = ferrite(&args);
        assert_exit(&o, 0);
        (stdout(&o), read_npy(&format!("{dir}/y.npy")))
    };
    let (_, want) = run("interp", &[]);
    for (target, extra) in [
        ("cpu", &[][..]),
        ("cpu", &["--no-fuse", "--threads", "1"][..]),
        ("sim", &[][..]),
        ("sim", &["--no-fuse"][..]),
    ] {
        let (text, got) = run(target, extra);
        got.check_close(&want, 1e-3, 1e-3)
            .unwrap_or_else(|e| panic!("{target} {extra:?}: {e}"));
        assert!(
            text.contains(&format!(" on {target} (compiled in ")),
            "{text}"
        );
        if target == "sim" {
            assert!(text.contains("cycles") && text.contains("LPDDR"), "{text}");
        }
    }
    let o = ferrite(&["run", "examples/mlp.fg", "--target", "gpu"]);
    assert_exit(&o, 1);
    let o = ferrite(&["run", "examples/mlp.fg", "--threads", "0"]);
    assert_exit(&o, 1);
}

#[test]
fn every_command_takes_the_targets_that_make_sense_for_it() {
    // `loops` is the loop-IR evaluator, a target of its own: it runs the pipeline
    // and evaluates the scheduled program, and agrees with the interpreter.
    let s = Scratch::new("loops");
    let mut outputs = Vec::new();
    for target in ["interp", "loops"] {
        let dir = s.path(target);
        let o = ferrite(&[
            "run",
            "examples/softmax_rows.fg",
            "--target",
            target,
            "--out",
            &dir,
        ]);
        assert_exit(&o, 0);
        assert!(
            stdout(&o).contains(&format!(" on {target}")),
            "{}",
            stdout(&o)
        );
        outputs.push(read_npy(&format!("{dir}/probs.npy")));
    }
    outputs[1].check_close(&outputs[0], 1e-6, 1e-6).unwrap();

    // `compile --target loops` stops after scheduling: no code generator's file.
    let d = s.path("dump");
    let o = ferrite(&[
        "compile",
        "examples/softmax_rows.fg",
        "--target",
        "loops",
        "--dump",
        &d,
    ]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("kernels: 1 "), "{}", stdout(&o));
    assert!(Path::new(&d).join("04-memory.txt").exists());
    assert!(!Path::new(&d).join("05-cpu.clif").exists());
    // The interpreter runs no pipeline, so there is nothing to compile for it: a
    // usage error that lists the targets `compile` takes, not a silent `loops`.
    let o = ferrite(&["compile", "examples/softmax_rows.fg", "--target", "interp"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("[possible values: cpu, sim, loops]"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["compile", "--help"]);
    assert!(
        stdout(&o).contains("loops: the loop-IR evaluator"),
        "{}",
        stdout(&o)
    );
    let o = ferrite(&["run", "examples/softmax_rows.fg", "--target", "gpu"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("[possible values: cpu, sim, interp, loops]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn thread_counts_out_of_range_are_user_errors() {
    // More threads than the library allows is the user's mistake (it used to fail
    // starting the threads, exit 2, or panic).
    for threads in ["100000", "18446744073709551615", "0"] {
        let o = ferrite(&["run", "examples/mlp.fg", "--threads", threads]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
    }
}

#[test]
fn fmt_output_reparses_and_is_a_fixed_point() {
    let s = Scratch::new("fmt");
    for file in examples() {
        let o = ferrite(&["fmt", &file]);
        assert_exit(&o, 0);
        let text = stdout(&o);
        // The leading comment block survives.
        let source = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().next(), source.lines().next(), "{file}");
        let copy = s.file("copy.fg", &text);
        let o = ferrite(&["check", &copy]);
        assert_exit(&o, 0);
        let o = ferrite(&["fmt", &copy]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), text, "{file}: fmt is not a fixed point");
    }
}

#[test]
fn fmt_write_rewrites_in_place_but_never_drops_comments() {
    let s = Scratch::new("fmt-write");
    let messy = s.file(
        "messy.fg",
        "# header\ngraph   scale(x:f32[2,3],s:f32[3])->f32[2,3]{\n y=mul(x,s)\n      return y }\n",
    );
    let o = ferrite(&["fmt", "--write", &messy]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), format!("{messy}: formatted\n"));
    let formatted = std::fs::read_to_string(&messy).unwrap();
    assert!(
        formatted.starts_with("# header\ngraph scale(x: f32[2, 3], s: f32[3])"),
        "{formatted}"
    );
    let o = ferrite(&["fmt", "-w", &messy]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), format!("{messy}: already formatted\n"));
    assert_eq!(std::fs::read_to_string(&messy).unwrap(), formatted);

    let commented = s.file(
        "commented.fg",
        "graph g(x: f32[2]) {\n  y = neg(x)  # keep me\n  return y\n}\n",
    );
    let o = ferrite(&["fmt", "--write", &commented]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("would drop 1 comment line"),
        "{}",
        stderr(&o)
    );
    assert!(std::fs::read_to_string(&commented)
        .unwrap()
        .contains("# keep me"));
    // Printing to stdout works and says what it left out.
    let o = ferrite(&["fmt", &commented]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("1 comment line inside the graph not kept"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains('#'));
}

#[test]
fn run_summarizes_and_writes_npy_outputs() {
    let s = Scratch::new("run-out");
    let out_dir = s.path("out");
    let o = ferrite(&[
        "run",
        "examples/mlp.fg",
        "--target",
        "interp",
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with("graph mlp: 5 random inputs (seed 0): x, w1, b1, w2, b2\n"),
        "{text}"
    );
    assert!(text.contains("\nlogits: f32[64, 10]\n  ["), "{text}");
    assert!(text.contains("min "), "{text}");
    assert!(text.contains("\ntime: "), "{text}");
    let path = format!("{out_dir}/logits.npy");
    assert!(text.ends_with(&format!("wrote {path}\n")), "{text}");
    let logits = read_npy(&path);
    assert_eq!(
        logits.ty,
        TensorType::new(DType::F32, vec![64, 10]).unwrap()
    );
    assert!(logits.to_f64().iter().all(|v| v.is_finite()));

    // The same seed gives the same result; another seed another one.
    let o = ferrite(&[
        "run",
        "examples/mlp.fg",
        "--target",
        "interp",
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    assert_eq!(read_npy(&path), logits);
    let o = ferrite(&[
        "run",
        "examples/mlp.fg",
        "--target",
        "interp",
        "--seed",
        "1",
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    assert_ne!(read_npy(&path), logits);

    // Several outputs, one returned twice and one unnamed.
    let multi = s.file(
        "multi.fg",
        "graph multi(x: f32[3]) {\n  m = max(x)\n  return m, neg(x), m\n}\n",
    );
    let o = ferrite(&["run", &multi, "--out", &out_dir]);
    assert_exit(&o, 0);
    let x = Tensor::random(&TensorType::new(DType::F32, vec![3]).unwrap(), 0).to_f64();
    let m = read_npy(&format!("{out_dir}/m.npy"));
    assert_eq!(m.ty.shape, Vec::<usize>::new());
    assert_eq!(m.to_f64()[0], x.iter().cloned().fold(f64::MIN, f64::max));
    let neg = read_npy(&format!("{out_dir}/output1.npy"));
    assert_eq!(neg.to_f64(), x.iter().map(|v| -v).collect::<Vec<_>>());
    assert_eq!(stdout(&o).matches("wrote ").count(), 2, "{}", stdout(&o));
}

#[test]
fn inputs_from_npy_files_round_trip() {
    let s = Scratch::new("inputs");
    let graph = s.file("scale.fg", SCALE_GRAPH);
    let x = Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, -4.0, 5.0, 0.5]).unwrap();
    let sv = Tensor::from_f32(&[3], vec![2.0, -1.0, 0.25]).unwrap();
    let xp = s.file("x.npy", npy::encode(&x));
    let sp = s.file("s.npy", npy::encode(&sv));
    let out_dir = s.path("out");
    let o = ferrite(&[
        "run",
        &graph,
        "--input",
        &format!("x={xp}"),
        "-i",
        &format!("s={sp}"),
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).starts_with(&format!("graph scale: x from {xp}; s from {sp}\n")),
        "{}",
        stdout(&o)
    );
    let y = read_npy(&format!("{out_dir}/y.npy"));
    let want = Tensor::from_f32(&[2, 3], vec![2.0, -2.0, 0.75, -8.0, -5.0, 0.125]).unwrap();
    assert_eq!(y, want);
    assert!(
        stdout(&o).contains(
            "y: f32[2, 3]\n  [2, -2, 0.75, -8, -5, 0.125]\n  min -8, max 2, mean -2.02083\n"
        ),
        "{}",
        stdout(&o)
    );

    // A float64 file (numpy's default) is converted, with a note; the rest is random.
    let mut f64_file = npy::encode(&Tensor::from_f32(&[3], vec![0.0; 3]).unwrap());
    let header_end = npy::read_header(&f64_file).unwrap().data_offset;
    f64_file.truncate(header_end);
    let text = String::from_utf8(f64_file[10..].to_vec())
        .unwrap()
        .replace("<f4", "<f8");
    let mut bytes = f64_file[..10].to_vec();
    bytes.extend_from_slice(text.as_bytes());
    for v in [2.0f64, 4.0, 8.0] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let s64 = s.file("s64.npy", bytes);
    let o = ferrite(&[
        "run",
        &graph,
        "--input",
        &format!("s={s64}"),
        "--seed",
        "5",
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("stores '<f8'; converted to f32"),
        "{}",
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("; 1 random input (seed 5): x\n"),
        "{}",
        stdout(&o)
    );
    // x is parameter 0, so its seed is 5 + 0.
    let x = Tensor::random(&TensorType::new(DType::F32, vec![2, 3]).unwrap(), 5).to_f64();
    let y = read_npy(&format!("{out_dir}/y.npy")).to_f64();
    for (i, (&yv, &xv)) in y.iter().zip(&x).enumerate() {
        assert_eq!(yv, (xv as f32 * [2.0f32, 4.0, 8.0][i % 3]) as f64);
    }
}

#[test]
fn bad_inputs_are_user_errors() {
    let s = Scratch::new("bad-inputs");
    let graph = s.file("scale.fg", SCALE_GRAPH);
    let wrong_shape = s.file(
        "w.npy",
        npy::encode(&Tensor::from_f32(&[3, 2], vec![0.0; 6]).unwrap()),
    );
    let ids = Tensor {
        ty: TensorType::new(DType::I64, vec![2, 3]).unwrap(),
        data: Data::I64(vec![0; 6]),
    };
    let wrong_dtype = s.file("i.npy", npy::encode(&ids));
    let garbage = s.file("g.npy", b"definitely not numpy");
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![format!("z={wrong_shape}")],
            "error: --input z=...: graph `scale` has no parameter `z` (its parameters: x, s)".into(),
        ),
        (
            vec![format!("x={wrong_shape}")],
            format!("error: input `x` is declared f32[2, 3], but `{wrong_shape}` holds f32[3, 2] (stored as '<f4')"),
        ),
        (
            vec![format!("x={wrong_dtype}")],
            format!("error: input `x` is declared f32[2, 3], but `{wrong_dtype}` holds i64[2, 3] (stored as '<i8'); convert it first, e.g. numpy's `a.astype(np.float32)`"),
        ),
        (
            vec![format!("x={garbage}")],
            format!("error: input `x`: `{garbage}`: not a .npy file"),
        ),
        (
            vec![format!("x={}", s.path("missing.npy"))],
            format!("error: cannot read `{}`", s.path("missing.npy")),
        ),
        (
            vec![format!("x={wrong_shape}"), format!("x={wrong_shape}")],
            "error: --input `x` is given twice".into(),
        ),
    ];
    for (inputs, want) in cases {
        let mut args = vec!["run".to_string(), graph.clone()];
        for i in inputs {
            args.push("--input".into());
            args.push(i);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = ferrite(&args);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).starts_with(&want),
            "want {want:?}\ngot  {:?}",
            stderr(&o)
        );
    }
}

#[test]
fn runtime_errors_and_memory_limits_are_user_errors() {
    let s = Scratch::new("runtime");
    // Token ids out of range for the embedding table.
    let ids = Tensor {
        ty: TensorType::new(DType::I64, vec![128]).unwrap(),
        data: Data::I64((0..128).map(|i| i * 10).collect()),
    };
    let ids_path = s.file("ids.npy", npy::encode(&ids));
    let o = ferrite(&[
        "run",
        "examples/embedding.fg",
        "--input",
        &format!("ids={ids_path}"),
    ]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with("error: running graph `embedding` failed: "),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("1000"), "{}", stderr(&o));

    let huge_input = s.file(
        "huge.fg",
        "graph huge(x: f32[32768, 65536]) {\n  return neg(x)\n}\n",
    );
    // 8 GiB of inputs, their copies and the outputs: over any default budget (at most
    // 16 GiB), refused before an input is made.
    let o = ferrite(&["run", &huge_input]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with(
            "error: running graph `huge` on cpu with its inputs needs 25769803776 bytes, \
             over the memory budget of "
        ),
        "{}",
        stderr(&o)
    );

    let huge_value = s.file(
        "blowup.fg",
        "graph blowup(x: f32[2]) {\n  y = full(shape=[2, 1024, 1024, 1024], value=1.0)\n  return sum(y)\n}\n",
    );
    // The interpreter materializes `y` and its f64 copy: 24 GiB.
    let o = ferrite(&["run", &huge_value, "--target", "interp"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o)
            .starts_with("error: running graph `blowup` on interp with its inputs needs 2576980"),
        "{}",
        stderr(&o)
    );
}

/// F02: an index into an empty axis made cpu and sim exit 2, and an out-of-range index
/// whose result is empty was accepted by both.
#[test]
fn f02_indices_into_empty_axes_exit_1_on_every_target() {
    let s = Scratch::new("f02");
    let ids = |shape: Vec<usize>, v: Vec<i64>| Tensor {
        ty: TensorType::new(DType::I64, shape).unwrap(),
        data: Data::I64(v),
    };
    let cases = [
        (
            "graph g(x: f32[0], i: i64[1]) {\n  y = index_select(x, i, axis=0)\n  return y\n}\n",
            ids(vec![1], vec![0]),
        ),
        (
            "graph g(x: f32[3, 0], i: i64[3, 2]) {\n  y = gather(x, i, axis=1)\n  return y\n}\n",
            ids(vec![3, 2], vec![0; 6]),
        ),
        (
            "graph g(x: f32[0, 4], i: i64[2]) {\n  y = index_select(x, i, axis=1)\n  return y\n}\n",
            ids(vec![2], vec![0, 9]),
        ),
    ];
    for (k, (text, index)) in cases.iter().enumerate() {
        let fg = s.file(&format!("g{k}.fg"), text);
        let i = s.file(&format!("i{k}.npy"), npy::encode(index));
        let input = format!("i={i}");
        let o = ferrite(&["compile", &fg]);
        assert_exit(&o, 0);
        for target in ["interp", "cpu", "sim", "loops"] {
            for fuse in [&[][..], &["--no-fuse"][..]] {
                let mut args = vec!["run", &fg, "--input", &input, "--target", target];
                args.extend_from_slice(fuse);
                let o = ferrite(&args);
                assert_exit(&o, 1);
                assert!(
                    stderr(&o).starts_with("error: running graph `g` failed: "),
                    "{k} {target} {fuse:?}: {}",
                    stderr(&o)
                );
            }
        }
    }
}

#[test]
fn compile_summarizes_every_example_and_dumps_each_stage() {
    for ex in examples() {
        let o = ferrite(&["compile", &ex]);
        assert_exit(&o, 0);
        let text = stdout(&o);
        let kernels = text
            .lines()
            .find_map(|l| l.strip_prefix("kernels: "))
            .unwrap_or_else(|| panic!("{ex}: no kernels line in\n{text}"));
        // `kernels: N (unfused: M)` with fusion never producing more kernels.
        let (n, m) = kernels
            .strip_suffix(')')
            .and_then(|s| s.split_once(" (unfused: "))
            .unwrap_or_else(|| panic!("{ex}: malformed `{kernels}`"));
        let (n, m): (usize, usize) = (n.parse().unwrap(), m.parse().unwrap());
        assert!(n >= 1 && n <= m, "{ex}: {kernels}");
        assert!(text.contains(" before optimize, "), "{ex}: {text}");
        assert!(text.contains("peak intermediate memory: "), "{ex}: {text}");
    }

    let dir = Scratch::new("dump");
    let d = dir.path("out");
    let o = ferrite(&["compile", "examples/softmax_rows.fg", "--dump", &d]);
    assert_exit(&o, 0);
    let mut files: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "00-parsed.fg",
            "01-decomposed.fg",
            "02-optimized.fg",
            "03-kernels.loop",
            "04-memory.txt",
            "05-cpu-plan.loop",
            "06-cpu.clif",
            "graph.dot"
        ]
    );
    // Every graph stage is valid .fg text.
    for f in &files[..3] {
        let src = std::fs::read_to_string(Path::new(&d).join(f)).unwrap();
        ferrite::parse(f, &src).unwrap_or_else(|e| panic!("{f} does not parse:\n{e}"));
    }
    let kernels = std::fs::read_to_string(Path::new(&d).join("03-kernels.loop")).unwrap();
    assert_eq!(kernels.matches("\nkernel ").count(), 1, "{kernels}");
    // The CPU dump holds Cranelift IR and machine code for the kernel.
    let clif = std::fs::read_to_string(Path::new(&d).join("06-cpu.clif")).unwrap();
    assert!(clif.contains("function"), "{clif}");
    // Before it, the loop IR the CPU backend compiles, with its schedule.
    let plan = std::fs::read_to_string(Path::new(&d).join("05-cpu-plan.loop")).unwrap();
    assert!(
        plan.contains("\nkernel ") && plan.contains("  # parallel"),
        "{plan}"
    );

    // On the simulator target the dump ends with the lowered tile kernels, which parse.
    let d2 = dir.path("sim");
    let o = ferrite(&[
        "compile",
        "examples/softmax_rows.fg",
        "--target",
        "sim",
        "--dump",
        &d2,
    ]);
    assert_exit(&o, 0);
    let tile = std::fs::read_to_string(Path::new(&d2).join("05-kernels.tile")).unwrap();
    assert!(tile.contains("kernel "), "{tile}");

    let o = ferrite(&["compile", "examples/softmax_rows.fg", "--no-fuse"]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    let line = text.lines().find(|l| l.starts_with("kernels: ")).unwrap();
    let (n, m) = line["kernels: ".len()..]
        .strip_suffix(')')
        .and_then(|s| s.split_once(" (unfused: "))
        .unwrap();
    assert_eq!(n, m, "--no-fuse schedules the unfused baseline: {line}");
    assert!(n.parse::<usize>().unwrap() >= 5, "{line}");
}

/// `FERRITE_CPU_ISA=sse` plans and runs the 128-bit code only: no wide routine call in
/// the CPU plan, which the widest width this CPU has makes (when it has one), with the
/// same output bits.
#[test]
fn ferrite_cpu_isa_sse_keeps_the_narrow_code() {
    let dir = Scratch::new("isa");
    let mut plans = Vec::new();
    let mut outputs = Vec::new();
    for isa in ["sse", "avx512"] {
        let d = dir.path(&format!("dump-{isa}"));
        let env = [("FERRITE_CPU_ISA", isa)];
        let o = ferrite_env(&["compile", "examples/softmax_rows.fg", "--dump", &d], &env);
        assert_exit(&o, 0);
        plans.push(std::fs::read_to_string(Path::new(&d).join("05-cpu-plan.loop")).unwrap());
        let out = dir.path(&format!("out-{isa}"));
        let o = ferrite_env(&["run", "examples/softmax_rows.fg", "--out", &out], &env);
        assert_exit(&o, 0);
        outputs.push(std::fs::read(format!("{out}/probs.npy")).unwrap());
    }
    assert!(!plans[0].contains("routine"), "{}", plans[0]);
    #[cfg(target_arch = "x86_64")]
    let wide = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    assert_eq!(plans[1].contains("# wide: stage"), wide, "{}", plans[1]);
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn sim_runs_a_hand_written_kernel_and_reports() {
    let dir = Scratch::new("sim");
    let n = 3000;
    let x = Tensor::from_f32(&[n], (0..n).map(|i| i as f32).collect()).unwrap();
    let y = Tensor::from_f32(&[n], vec![0.5; n]).unwrap();
    let xp = dir.file("x.npy", npy::encode(&x));
    let yp = dir.file("y.npy", npy::encode(&y));
    let out_dir = dir.path("out");
    let o = ferrite(&[
        "sim",
        "examples/kernels/vector_add.tile",
        "--grid",
        "3",
        "--arg",
        &format!("x={xp}"),
        "--arg",
        &format!("y={yp}"),
        "--arg",
        "out=zeros:3000",
        "--arg",
        "n=3000",
        "--out",
        &out_dir,
    ]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("LPDDR"), "{text}");
    assert!(text.contains("cycles"), "{text}");
    let out = read_npy(&format!("{out_dir}/out.npy"));
    let want: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    assert_eq!(out.to_f64(), want);

    // A parameter without a value, an unknown one, and a bad grid are user errors.
    let o = ferrite(&["sim", "examples/kernels/vector_add.tile", "--grid", "3"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("parameter `x` needs a value"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&[
        "sim",
        "examples/kernels/vector_add.tile",
        "--grid",
        "3",
        "--arg",
        "nope=1",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("no parameter `nope`"), "{}", stderr(&o));
    let o = ferrite(&["sim", "examples/kernels/vector_add.tile", "--grid", "0x"]);
    assert_exit(&o, 1);
    // Out-of-bounds access without a mask is reported, not a crash: n larger than the buffers.
    let o = ferrite(&[
        "sim",
        "examples/kernels/vector_add.tile",
        "--grid",
        "3",
        "--arg",
        &format!("x={xp}"),
        "--arg",
        &format!("y={yp}"),
        "--arg",
        "out=zeros:3000",
        "--arg",
        "n=3072",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("vector_add"), "{}", stderr(&o));
    // A malformed kernel is located.
    let bad = dir.file("bad.tile", "kernel k(x: *f32) {\n  y = nope(x)\n}\n");
    let o = ferrite(&["sim", &bad, "--grid", "1", "--arg", "x=zeros:4"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("bad.tile:2:"), "{}", stderr(&o));
}

/// Reliability finding F13: a 20k-op relu chain took 10 s to compile and 100k ops over a
/// minute, quadratic in the schedule. The fused chain now compiles (64 ops per kernel);
/// unfused, one Cranelift function per op is past the CPU backend's kernel limit, which
/// is refused with exit 1 and the limit stated, rather than compiled for minutes.
#[test]
fn long_chains_compile_or_are_refused_with_the_kernel_limit() {
    let s = Scratch::new("long-chain");
    let n = ferrite::MAX_CPU_KERNELS + 100;
    let mut src = String::from("graph chain(x: f32[2, 2]) {\n");
    for i in 0..n {
        let prev = if i == 0 {
            "x".to_string()
        } else {
            format!("a{}", i - 1)
        };
        src += &format!("  a{i} = relu({prev})\n");
    }
    src += &format!("  return a{}\n}}\n", n - 1);
    let f = s.file("chain.fg", src);
    let fused = ferrite(&["compile", &f]);
    assert_exit(&fused, 0);
    let unfused = ferrite(&["compile", "--no-fuse", &f]);
    assert_exit(&unfused, 1);
    let e = stderr(&unfused);
    assert!(
        e.contains(&format!("has {n} kernels")) && e.contains("at most 16384"),
        "{e}"
    );
}

#[test]
fn machine_and_autotune_flags_run_on_the_simulator_only() {
    let s = Scratch::new("machine");
    // A built-in preset by name, on every command that runs the simulator.
    for cmd in ["run", "compile", "profile"] {
        let o = ferrite(&[
            cmd,
            "examples/mlp.fg",
            "--target",
            "sim",
            "--machine",
            "mtia1",
        ]);
        assert_exit(&o, 0);
        if cmd == "profile" {
            assert!(stdout(&o).contains("on sim: mtia1"), "{}", stdout(&o));
        }
    }
    // Elsewhere they are user errors that say why.
    for flag in [&["--machine", "mtia1"][..], &["--autotune"][..]] {
        let mut args = vec!["run", "examples/mlp.fg", "--target", "cpu"];
        args.extend_from_slice(flag);
        let o = ferrite(&args);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).contains("use it with --target sim"),
            "{}",
            stderr(&o)
        );
    }
    // A preset name that is neither a file nor built in is a file error.
    let o = ferrite(&[
        "run",
        "examples/mlp.fg",
        "--target",
        "sim",
        "--machine",
        "mtia9",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("mtia9"), "{}", stderr(&o));
    // --autotune reports each GEMM kernel it tuned, and the second run reads the cache.
    let cache = s.path("cache");
    for expect in ["candidates (", "(cached)"] {
        let o = common::ferrite_env(
            &["run", "examples/mlp.fg", "--target", "sim", "--autotune"],
            &[("FERRITE_CACHE_DIR", cache.as_str())],
        );
        assert_exit(&o, 0);
        assert!(stderr(&o).contains("autotune k0_"), "{}", stderr(&o));
        assert!(stderr(&o).contains("  tried "), "{}", stderr(&o));
        assert!(stderr(&o).contains(expect), "{}", stderr(&o));
    }
    assert!(Path::new(&cache).join("autotune").is_dir());
}

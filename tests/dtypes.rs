//! `f64` and the narrow and unsigned integers through the face: the interpreter, the
//! loop-IR evaluator and the CPU compute them (wrapping, unsigned comparison, exact f64),
//! and the simulator refuses them with a user error naming the dtype, never a wrong
//! answer or a panic.

use ferrite::{compile_ir, Options, Target, Tensor};

fn graph(source: &str) -> ferrite::ir::Graph {
    ferrite::parse("dtypes.fg", source).unwrap_or_else(|d| panic!("{d}"))
}

const WRAP: &str = "graph wrap(a: u8[4], b: u8[4], c: f64[2]) -> u8[4], bool[4], f64[2], i16[4] {
  s = add(a, b)
  g = gt(a, b)
  f = add(c, 0.1)
  m = add(cast(a, to=i8), a)
  return s, g, f, m
}";

#[test]
fn the_interpreter_and_loops_compute_the_new_dtypes() {
    let g = graph(WRAP);
    let a = Tensor::from_vec(&[4], vec![250u8, 3, 200, 0]).unwrap();
    let b = Tensor::from_vec(&[4], vec![10u8, 5, 100, 255]).unwrap();
    let c = Tensor::from_vec(&[2], vec![0.2f64, 1e300]).unwrap();
    for target in [Target::Interp, Target::Loops, Target::Cpu] {
        let exe = compile_ir(&g, &Options::default().target(target)).unwrap();
        let out = exe.run(&[&a, &b, &c]).unwrap();
        assert_eq!(
            out[0],
            Tensor::from_vec(&[4], vec![4u8, 8, 44, 255]).unwrap(),
            "{target}"
        );
        let gt = Tensor::from_vec(&[4], vec![true, false, true, false]).unwrap();
        assert_eq!(out[1], gt, "{target}");
        // 0.2 + 0.1 in f64, not rounded through f32.
        let f = Tensor::from_vec(&[2], vec![0.2f64 + 0.1, 1e300]).unwrap();
        assert_eq!(out[2], f, "{target}");
        // u8 + i8 promotes to i16: 250 as i8 is -6, so -6 + 250 = 244; 200 as i8 is -56.
        let m = Tensor::from_vec(&[4], vec![244i16, 6, 144, 0]).unwrap();
        assert_eq!(out[3], m, "{target}");
    }
}

#[test]
fn the_simulator_refuses_what_it_does_not_compute() {
    let g = graph(WRAP);
    let err = compile_ir(&g, &Options::default().target(Target::Sim))
        .map(|_| ())
        .unwrap_err();
    assert!(!err.is_internal(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("u8") || msg.contains("f64") || msg.contains("i8") || msg.contains("i16"),
        "{msg}"
    );
}

#[test]
fn literals_must_fit_their_integer_dtype() {
    let e = ferrite::parse(
        "lit.fg",
        "graph g(x: u8[2]) {\n  y = add(x, 256)\n  return y\n}",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("lit.fg:2:") && e.contains("does not fit in u8"),
        "{e}"
    );
    let e = ferrite::parse(
        "lit.fg",
        "graph g(x: u32[2]) {\n  y = mul(x, -1)\n  return y\n}",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not fit in u32"), "{e}");
}

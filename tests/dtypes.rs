//! `f64` and the narrow and unsigned integers through the face: the interpreter, the
//! loop-IR evaluator, the CPU and the simulator compute them (wrapping, unsigned comparison,
//! exact f64; on both backends fused and unfused, reductions, casts and matmuls included),
//! never a wrong answer or a panic.

use ferrite::{compile_ir, Options, Target, Tensor};
use ferrite_ir::{DType, TensorType};

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
    for target in [Target::Interp, Target::Loops, Target::Cpu, Target::Sim] {
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

/// Values of `d` spread over its whole range (both ends and `u64` above `i64::MAX`
/// included, so sums and products wrap), or f64 values of mixed sign and size.
fn spread(d: DType, shape: &[usize], salt: i128) -> Tensor {
    let ty = TensorType::new(d, shape.to_vec()).unwrap();
    let n = ty.numel() as i128;
    let t = match d.int_range() {
        Some((lo, hi)) => {
            let span = hi - lo + 1;
            let v: Vec<i128> = (0..n)
                .map(|i| lo + (i * 2_654_435_761 + salt * 97 + 13).rem_euclid(span))
                .collect();
            ferrite_ir::Tensor::from_i128(&ty, &v)
        }
        None => {
            let v: Vec<f64> = (0..n)
                .map(|i| ((i * 7919 + salt * 31) % 200 - 100) as f64 * 0.37e3)
                .collect();
            ferrite_ir::Tensor::from_f64(&ty, &v)
        }
    };
    Tensor::try_from(t).unwrap()
}

#[test]
fn both_backends_reduce_cast_and_multiply_every_dtype_as_the_interpreter_does() {
    use DType::*;
    for d in [F64, I8, U8, I16, U16, U32, U64, I32, I64] {
        let float = d.is_float();
        let mean = if float {
            "  a = mean(x, axes=[0])\n"
        } else {
            ""
        };
        let src = format!(
            "graph g(x: {d}[5, 37], y: {d}[37, 3]) {{\n  s = sum(x, axes=[1])\n  \
             p = prod(x, axes=[0])\n  mx = max(x, axes=[1])\n  mn = min(x)\n  \
             am = argmax(x, axis=1)\n  m = matmul(x, y)\n  r = relu(m)\n{mean}  \
             c = cast(add(x, x), to=f32)\n  h = cast(x, to=f16)\n  b = cast(x, to=bf16)\n  \
             u = cast(x, to=u64)\n  q = cast(mul(x, x), to=i8)\n  \
             return s, p, mx, mn, am, m, r, c, h, b, u, q{}\n}}\n",
            if float { ", a" } else { "" }
        );
        let g = graph(&src);
        let (x, y) = (spread(d, &[5, 37], 1), spread(d, &[37, 3], 2));
        let want = compile_ir(&g, &Options::default().target(Target::Interp))
            .unwrap()
            .run(&[&x, &y])
            .unwrap();
        for (target, fuse) in [Target::Cpu, Target::Sim]
            .into_iter()
            .flat_map(|t| [(t, true), (t, false)])
        {
            let exe = compile_ir(&g, &Options::default().target(target).fuse(fuse))
                .unwrap_or_else(|e| panic!("{d}, {target}, fuse {fuse}: {e}"));
            let got = exe.run(&[&x, &y]).unwrap_or_else(|e| panic!("{d}: {e}"));
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                let (a, b) = (a.as_ir(), b.as_ir());
                assert_eq!(a.ty, b.ty, "{d}, {target}, fuse {fuse}, output {k}");
                if b.ty.dtype.is_float() && float {
                    // f64 sums and products in another order: a few ulp.
                    a.check_close(b, 1e-12, 0.0)
                        .unwrap_or_else(|m| panic!("{d}, {target}, fuse {fuse}, output {k}: {m}"));
                } else {
                    assert_eq!(a, b, "{d}, {target}, fuse {fuse}, output {k}");
                }
            }
        }
    }
}

/// f64 constants on the simulator were written as f32's short form (`1.4285715` for
/// the f64 value of the f32 nearest 1/0.7) or as an f32 literal cast to f64 (`0.1`
/// became 0.10000000149011612): they keep every bit now, beside a tile and alone.
#[test]
fn regression_f64_constants_keep_their_bits_on_the_simulator() {
    let g = graph(
        "graph g(x: f64[4], c: bool[4]) {
  a = add(x, 1.4285714626312256)
  b = where(c, x, 0.1)
  m = mul(x, 0.30000001192092896)
  f = full(shape=[4], value=0.1, dtype=f64)
  return a, b, m, f
}",
    );
    let x = Tensor::from_vec(&[4], vec![0.0f64, 1.0, -2.5, 1e-300]).unwrap();
    let c = Tensor::from_vec(&[4], vec![true, false, true, false]).unwrap();
    let want = compile_ir(&g, &Options::default().target(Target::Interp))
        .unwrap()
        .run(&[&x, &c])
        .unwrap();
    for fuse in [true, false] {
        let got = compile_ir(&g, &Options::default().target(Target::Sim).fuse(fuse))
            .unwrap()
            .run(&[&x, &c])
            .unwrap();
        assert_eq!(got, want, "fuse {fuse}");
    }
}

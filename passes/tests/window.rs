//! The window ops (`conv`, `conv_transpose`, `max_pool`, `avg_pool`) and `batch_norm`,
//! `clip`: the reference interpreter against values computed by hand, `decompose`
//! against the interpreter (within rounding: im2col sums in another order, the
//! depthwise form rounds its products), the decomposed graph fused and unfused in the
//! loop IR against the interpreter (bit for bit), and the kernel counts of fusion.

use ferrite_ir::{interpret, parse, Graph, Tensor, TensorType};
use ferrite_passes::decompose::decompose;
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_testkit::{check_against_interpreter, random_inputs};

fn graph(src: &str) -> Graph {
    parse("test.fg", src).unwrap_or_else(|e| panic!("{e}"))
}

/// Decomposes `src`, checks it against the interpreter of the source graph within
/// `tol` and the loop IR of the decomposed graph bit for bit; returns the number of
/// fused kernels.
fn check(src: &str, tol: f64) -> (usize, String) {
    let g = graph(src);
    let d = decompose(&g).unwrap_or_else(|e| panic!("{e}"));
    for seed in [1, 7] {
        let inputs = random_inputs(&g, seed);
        let want = interpret(&g, &inputs).unwrap_or_else(|e| panic!("{e}"));
        let got = interpret(&d, &inputs).unwrap_or_else(|e| panic!("{e}"));
        for (a, b) in got.iter().zip(&want) {
            a.check_close(b, tol, tol)
                .unwrap_or_else(|e| panic!("{src}\n{e}\n{}", ferrite_ir::print(&d)));
        }
        check_against_interpreter(&d, &inputs).unwrap_or_else(|e| panic!("{src}\n{e}"));
    }
    let p = schedule(&d, &ScheduleOptions::default()).unwrap().program;
    (p.kernels.len(), p.to_string())
}

fn f32s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(
        &TensorType::new(ferrite_ir::DType::F32, shape.to_vec()).unwrap(),
        v,
    )
}

/// Values rounded to f32, as an f32 result holds them.
fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| x as f32 as f64).collect()
}

fn run(src: &str, inputs: &[Tensor]) -> Vec<f64> {
    interpret(&graph(src), inputs).unwrap().remove(0).to_f64()
}

#[test]
fn conv_and_pools_by_hand() {
    // x = 0..16 as [1, 1, 4, 4]; a 3x3 box of ones with padding 1 and stride 2.
    let x = f32s(&[1, 1, 4, 4], &(0..16).map(f64::from).collect::<Vec<_>>());
    let w = f32s(&[1, 1, 3, 3], &[1.0; 9]);
    let y = run(
        "graph c(x: f32[1, 1, 4, 4], w: f32[1, 1, 3, 3]) { return conv(x, w, stride=[2, 2], padding=[1, 1]) }",
        &[x.clone(), w],
    );
    // Windows centred on (0,0), (0,2), (2,0), (2,2).
    assert_eq!(y, [10.0, 24.0, 51.0, 90.0]);
    let y = run(
        "graph p(x: f32[1, 1, 4, 4]) { return max_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1]) }",
        std::slice::from_ref(&x),
    );
    assert_eq!(y, [5.0, 7.0, 13.0, 15.0]);
    // count_include_pad=false divides by the 4, 6, 6 and 9 taps inside the input.
    let y = run(
        "graph p(x: f32[1, 1, 4, 4]) { return avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1], count_include_pad=false) }",
        std::slice::from_ref(&x),
    );
    assert_eq!(
        y,
        rounded(&[10.0 / 4.0, 24.0 / 6.0, 51.0 / 6.0, 90.0 / 9.0])
    );
    let y = run(
        "graph p(x: f32[1, 1, 4, 4]) { return avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1]) }",
        std::slice::from_ref(&x),
    );
    assert_eq!(y, rounded(&[10.0 / 9.0, 24.0 / 9.0, 51.0 / 9.0, 10.0]));
    // ceil_mode keeps the partial last window [3] of a 2-wide pool over 0..4 with stride 3.
    let x1 = f32s(&[1, 1, 5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let y = run(
        "graph p(x: f32[1, 1, 5]) { return avg_pool(x, kernel=[2], stride=[3], ceil_mode=true) }",
        &[x1],
    );
    assert_eq!(y, [0.5, 3.5]);
    // conv_transpose of [1, 2] with a kernel [1, 10] and stride 2: [1, 10, 2, 20].
    let y = run(
        "graph t(x: f32[1, 1, 2], w: f32[1, 1, 2]) { return conv_transpose(x, w, stride=[2]) }",
        &[
            f32s(&[1, 1, 2], &[1.0, 2.0]),
            f32s(&[1, 1, 2], &[1.0, 10.0]),
        ],
    );
    assert_eq!(y, [1.0, 10.0, 2.0, 20.0]);
}

#[test]
fn conv_forms_decompose_to_the_interpreter() {
    let cases = [
        // plain, strided, padded, dilated, asymmetric padding
        "graph c(x: f32[2, 3, 7, 6], w: f32[4, 3, 3, 3]) { return conv(x, w) }",
        "graph c(x: f32[1, 3, 9, 8], w: f32[5, 3, 3, 2]) { return conv(x, w, stride=[2, 3], padding=[1, 0, 2, 1], dilation=[2, 1]) }",
        // grouped, depthwise, depthwise with a multiplier, 1x1
        "graph c(x: f32[2, 4, 5, 5], w: f32[6, 2, 3, 3]) { return conv(x, w, padding=[1, 1], groups=2) }",
        "graph c(x: f32[1, 6, 8, 8], w: f32[6, 1, 3, 3]) { return conv(x, w, stride=[2, 2], padding=[1, 1], groups=6) }",
        "graph c(x: f32[1, 3, 5, 5], w: f32[6, 1, 3, 3]) { return conv(x, w, groups=3) }",
        "graph c(x: f32[2, 8, 4, 4], w: f32[3, 8, 1, 1]) { return conv(x, w) }",
        // depthwise as shifted slices: dilated with asymmetric padding, a stride that
        // leaves a remainder, more padding than the taps reach, 5x5, 1-D, 3-D, f16; and
        // 7x7 and 9x9, past MAX_DIRECT_TAPS, as a gather
        "graph c(x: f32[1, 4, 9, 8], w: f32[4, 1, 3, 3]) { return conv(x, w, padding=[2, 0, 1, 3], dilation=[2, 3], groups=4) }",
        "graph c(x: f32[2, 3, 8, 8], w: f32[3, 1, 3, 3]) { return conv(x, w, stride=[3, 3], groups=3) }",
        "graph c(x: f32[1, 2, 5, 5], w: f32[2, 1, 3, 3]) { return conv(x, w, padding=[3, 2], groups=2) }",
        "graph c(x: f32[1, 3, 9, 9], w: f32[3, 1, 5, 5]) { return conv(x, w, stride=[2, 2], padding=[2, 2], groups=3) }",
        "graph c(x: f32[2, 3, 11], w: f32[3, 1, 3]) { return conv(x, w, padding=[1], groups=3) }",
        "graph c(x: f32[1, 2, 4, 5, 3], w: f32[2, 1, 2, 3, 2]) { return conv(x, w, padding=[1, 1, 0], groups=2) }",
        "graph c(x: f32[1, 2, 9, 9], w: f32[2, 1, 7, 7]) { return conv(x, w, padding=[3, 3], groups=2) }",
        "graph c(x: f32[1, 2, 11, 11], w: f32[2, 1, 9, 9]) { return conv(x, w, padding=[4, 4], groups=2) }",
        // 1-D and 3-D
        "graph c(x: f32[2, 3, 11], w: f32[2, 3, 4]) { return conv(x, w, stride=[2], padding=[3]) }",
        "graph c(x: f32[1, 2, 4, 5, 3], w: f32[2, 2, 2, 3, 2]) { return conv(x, w, padding=[1, 1, 0]) }",
        // half precision
        "graph c(x: f16[1, 2, 5, 5], w: f16[3, 2, 3, 3]) { return conv(x, w) }",
    ];
    for src in cases {
        check(src, 1e-5);
    }
    // A half-precision depthwise conv gathers its taps and rounds each product to f16
    // (within about an ulp of the interpreter's f64 sum).
    check(
        "graph c(x: f16[1, 2, 6, 6], w: f16[2, 1, 3, 3]) { return conv(x, w, padding=[1, 1], groups=2) }",
        2e-3,
    );
}

#[test]
fn conv_transpose_forms_decompose_to_the_interpreter() {
    let cases = [
        "graph t(x: f32[1, 2, 3, 3], w: f32[2, 3, 3, 3]) { return conv_transpose(x, w) }",
        "graph t(x: f32[2, 2, 3, 4], w: f32[2, 2, 3, 3]) { return conv_transpose(x, w, stride=[3, 2], padding=[1, 2], output_padding=[1, 1]) }",
        "graph t(x: f32[1, 4, 3, 3], w: f32[4, 1, 2, 2]) { return conv_transpose(x, w, stride=[2, 2], groups=2, dilation=[2, 1]) }",
        "graph t(x: f32[1, 1, 5], w: f32[1, 2, 3]) { return conv_transpose(x, w, padding=[2, 0]) }",
        "graph t(x: f32[1, 1, 2, 2, 2], w: f32[1, 1, 2, 2, 2]) { return conv_transpose(x, w, stride=[2, 1, 1]) }",
    ];
    for src in cases {
        check(src, 1e-5);
    }
}

#[test]
fn pools_batch_norm_and_clip_decompose_to_the_interpreter() {
    let cases = [
        "graph p(x: f32[2, 3, 7, 7]) { return max_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1]) }",
        "graph p(x: f32[1, 2, 6, 7]) { return max_pool(x, kernel=[2, 3], dilation=[2, 1], ceil_mode=true) }",
        "graph p(x: i32[1, 2, 5, 5]) { return max_pool(x, kernel=[2, 2], padding=[1, 1], stride=[2, 2]) }",
        "graph p(x: u8[1, 1, 5, 5]) { return max_pool(x, kernel=[3, 3], padding=[1, 1]) }",
        "graph p(x: f32[1, 2, 7, 7]) { return avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=true) }",
        "graph p(x: f32[1, 2, 7, 7]) { return avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 0, 0, 1], count_include_pad=false, ceil_mode=true) }",
        "graph p(x: f32[1, 2, 8]) { return avg_pool(x, kernel=[3], dilation=[2]) }",
        "graph p(x: f16[1, 2, 4, 4, 4]) { return avg_pool(x, kernel=[2, 2, 2]) }",
        "graph b(x: f32[2, 3, 4, 4], w: f32[3], b: f32[3], m: f32[3], v: f32[3]) { return batch_norm(x, w, b, m, abs(v), eps=1e-3) }",
        "graph b(x: f16[2, 3, 5], w: f16[3], b: f16[3], m: f16[3], v: f16[3]) { return batch_norm(x, w, b, m, abs(v)) }",
        "graph c(x: f32[4, 8]) { return clip(x, min=0.0, max=6.0) }",
        "graph c(x: i32[4, 8]) { return clip(x, max=3) }",
        "graph c(x: f32[4, 8]) { return clip(x) }",
    ];
    for src in cases {
        check(src, 1e-3);
    }
}

#[test]
fn conv_with_its_epilogue_is_two_kernels() {
    // im2col, then the GEMM with bias, batch norm, relu6 and the residual add fused
    // into its epilogue (rows of 18 padded: the pad stays a view).
    let n = check(
        "graph c(x: f32[1, 8, 16, 16], w: f32[8, 8, 3, 3], b: f32[8, 1, 1],
                 s: f32[8], t: f32[8], m: f32[8], v: f32[8]) {
           y = add(conv(x, w, padding=[1, 1]), b)
           z = batch_norm(y, s, t, m, abs(v))
           return add(clip(z, min=0.0, max=6.0), x)
         }",
        1e-4,
    );
    assert_eq!(n.0, 2, "{}", n.1);
}

#[test]
fn pooling_is_one_kernel_and_fuses_with_what_follows() {
    let n = check(
        "graph p(x: f32[1, 4, 19, 19]) { return relu(max_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1])) }",
        0.0,
    );
    assert_eq!(n.0, 1, "{}", n.1);
    let n = check(
        "graph p(x: f32[1, 4, 19, 19]) { return mul(avg_pool(x, kernel=[3, 3], stride=[2, 2], padding=[1, 1], count_include_pad=false), 2.0) }",
        1e-6,
    );
    assert_eq!(n.0, 1, "{}", n.1);
    // A 3x3 depthwise conv is one elementwise kernel reading each tap of the input in
    // place at an affine index: no tap index or mask is loaded.
    let n = check(
        "graph d(x: f32[1, 6, 18, 18], w: f32[6, 1, 3, 3]) { return relu(conv(x, w, padding=[1, 1], groups=6)) }",
        1e-5,
    );
    assert_eq!(n.0, 1, "{}", n.1);
    assert!(!n.1.contains("i64[") && !n.1.contains("bool["), "{}", n.1);
    // Over planes of 8x8 (rows of 10 padded, at most SHORT_PADDED_ROW) the padded input
    // is stored once by a kernel of its own, and no load of either kernel is guarded.
    let n = check(
        "graph d(x: f32[1, 6, 8, 8], w: f32[6, 1, 3, 3]) { return relu(conv(x, w, padding=[1, 1], groups=6)) }",
        1e-5,
    );
    assert_eq!(n.0, 2, "{}", n.1);
    assert!(n.1.contains("_pad(") && !n.1.contains(" if "), "{}", n.1);
    // A 7x7 one gathers its 49 taps: one reduction kernel.
    let n = check(
        "graph d(x: f32[1, 2, 9, 9], w: f32[2, 1, 7, 7]) { return relu(conv(x, w, padding=[3, 3], groups=2)) }",
        1e-5,
    );
    assert_eq!(n.0, 1, "{}", n.1);
    assert!(n.1.contains("i64[49, 81]"), "{}", n.1);
    // A 7x7 conv's im2col (ResNet's stem) is 49 row copies of the pad, stored once (a
    // window of more than 25 taps reads it), then the GEMM: no index or mask.
    let n = check(
        "graph c(x: f32[1, 3, 20, 20], w: f32[4, 3, 7, 7]) { return relu(conv(x, w, stride=[2, 2], padding=[3, 3])) }",
        1e-5,
    );
    assert_eq!(n.0, 3, "{}", n.1);
    assert!(
        n.1.contains("_pad(") && !n.1.contains("i64[") && !n.1.contains(" if "),
        "{}",
        n.1
    );
}

#[test]
fn a_gather_reads_a_costly_producer_from_memory() {
    // A 7x7 max pool (a gather: more taps than shifted slices are made for) reads each
    // input element at 49 taps: the shift and ReLU before it would run 49 times per
    // element fused, so they are stored once (2 kernels) when that recomputation
    // outweighs the store and reload ...
    let src = |c: usize, hw: usize| {
        format!(
            "graph d(x: f32[1, {c}, {hw}, {hw}], t: f32[{c}, 1, 1]) {{
               return max_pool(relu(add(x, t)), kernel=[7, 7], stride=[1, 1], padding=[3, 3])
             }}"
        )
    };
    let (n, text) = check(&src(8, 32), 0.0);
    assert_eq!(n, 2, "{text}");
    let d = decompose(&graph(&src(8, 32))).unwrap();
    let s = schedule(&d, &ScheduleOptions::default()).unwrap();
    assert!(
        s.decisions_text()
            .contains("recompute-costs-more-than-memory"),
        "{}",
        s.decisions_text()
    );
    let gather = s.program.kernels.last().unwrap();
    assert_eq!(
        gather.op_count(),
        (8 * 32 * 32 * 49 * 2) as u64,
        "the pool kernel only selects and compares its taps:\n{text}"
    );
    // ... and fused (1 kernel) when the input is small enough that the kernel a stored
    // producer would need costs more than recomputing it.
    let (n, text) = check(&src(2, 4), 0.0);
    assert_eq!(n, 1, "{text}");
}

#[test]
fn a_small_max_pool_is_a_chain_of_maxima_of_shifted_slices() {
    // A 3x3 max pool is 8 `maximum`s of strided slices of the input padded with -inf:
    // one elementwise kernel loading each tap at an affine index, no tap index or mask,
    // exact on every target (NaN and -0 included, `check`'s tolerance is 0); the
    // shifted ReLU before it is stored once rather than recomputed at each of the taps.
    let src = "graph d(x: f32[1, 8, 32, 32], t: f32[8, 1, 1]) {
                 return max_pool(relu(add(x, t)), kernel=[3, 3], stride=[2, 2], padding=[1, 1])
               }";
    let (n, text) = check(src, 0.0);
    assert_eq!(n, 2, "{text}");
    assert!(!text.contains("i64[") && !text.contains("bool["), "{text}");
    let d = decompose(&graph(src)).unwrap();
    let s = schedule(&d, &ScheduleOptions::default()).unwrap();
    let pool = s.program.kernels.last().unwrap();
    assert_eq!(pool.op_count(), (8 * 16 * 16 * 8) as u64, "{text}");
}

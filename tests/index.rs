//! `index_select` with indices of any rank (numpy `take`) and `gather`, on every target, fused
//! and unfused, against an independent reference written out here; out-of-range and negative
//! indices are run-time user errors on every target; indices into empty axes (F02).

use ferrite::{compile, DType, Error, Graph, Options, Target, Tensor, TensorType};

/// Every way to run a graph: each target, fused and unfused (the interpreter once).
fn configurations() -> Vec<(Target, bool)> {
    let mut all = vec![(Target::Interp, true)];
    for target in [Target::Loops, Target::Cpu, Target::Sim] {
        all.push((target, true));
        all.push((target, false));
    }
    all
}

/// A configuration and what running in it gave.
type Outcome = ((Target, bool), Result<Vec<Tensor>, Error>);

fn run_all(g: &Graph, inputs: &[&Tensor]) -> Vec<Outcome> {
    configurations()
        .into_iter()
        .map(|(target, fuse)| {
            let options = Options::default().target(target).fuse(fuse);
            let exe = compile(g, &options).unwrap_or_else(|e| panic!("{target} fuse={fuse}: {e}"));
            ((target, fuse), exe.run(inputs))
        })
        .collect()
}

/// numpy's `take(x, index, axis)`, written out over multi-indices.
fn take(x: &[f64], shape: &[usize], index: &[i64], ishape: &[usize], axis: usize) -> Vec<f64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n: usize = ishape.iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for &k in &index[..n] {
            for i in 0..inner {
                out.push(x[(o * shape[axis] + k as usize) * inner + i]);
            }
        }
    }
    out
}

fn ints(dtype: DType, shape: &[usize], values: &[i64]) -> Tensor {
    let values: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    Tensor::from_f64(&TensorType::new(dtype, shape.to_vec()).unwrap(), &values).unwrap()
}

fn distinct_values(shape: &[usize]) -> Vec<f64> {
    (0..shape.iter().product::<usize>())
        .map(|k| k as f64 * 0.5 - 3.0)
        .collect()
}

#[test]
fn index_select_of_every_index_rank_and_axis_matches_numpy_take() {
    let shape = [3, 4, 5];
    let xs = distinct_values(&shape);
    let x_val = Tensor::from_f64(&ferrite::f32(&shape), &xs).unwrap();
    for ishape in [vec![], vec![3], vec![2, 3], vec![2, 1, 2]] {
        for axis in 0..3usize {
            for dtype in [DType::I32, DType::I64] {
                let extent = shape[axis] as i64;
                let n: usize = ishape.iter().product();
                // Repeats, the last index and 0, in a scrambled order.
                let index: Vec<i64> = (0..n as i64).map(|k| (k * 7 + 3) % extent).collect();
                let g = Graph::new("take");
                let x = g.input("x", ferrite::f32(&shape));
                let i = g.input("i", TensorType::new(dtype, ishape.clone()).unwrap());
                // Negative axes address the same axis.
                let a = if axis == 1 { -2 } else { axis as i64 };
                g.output(&(x.index_select(a, &i) * 2.0));
                let i_val = ints(dtype, &ishape, &index);
                let mut out_shape = shape[..axis].to_vec();
                out_shape.extend(&ishape);
                out_shape.extend(&shape[axis + 1..]);
                let want: Vec<f64> = take(&xs, &shape, &index, &ishape, axis)
                    .iter()
                    .map(|v| v * 2.0)
                    .collect();
                let want = Tensor::from_f64(&ferrite::f32(&out_shape), &want).unwrap();
                for (config, got) in run_all(&g, &[&x_val, &i_val]) {
                    let got =
                        got.unwrap_or_else(|e| panic!("{config:?} {ishape:?} axis {axis}: {e}"));
                    got[0].check_close(&want, 0.0, 0.0).unwrap_or_else(|e| {
                        panic!("{config:?} index {ishape:?} {dtype} axis {axis}: {e}")
                    });
                }
            }
        }
    }
}

/// Runs `g` everywhere and asserts a run-time user error whose message contains `needle`
/// (on the simulator, which stops at the access a bad index would make: an out-of-bounds
/// read).
fn rejected_everywhere(g: &Graph, inputs: &[&Tensor], needle: &str) {
    for (config, got) in run_all(g, inputs) {
        match got {
            Ok(v) => panic!("{config:?}: accepted, gave {v:?}"),
            Err(e) => {
                assert!(!e.is_internal(), "{config:?}: {e}");
                let want = if config.0 == Target::Sim {
                    "out-of-bounds read"
                } else {
                    needle
                };
                assert!(e.to_string().contains(want), "{config:?}: {e}");
            }
        }
    }
}

#[test]
fn out_of_range_and_negative_indices_are_user_errors_on_every_target() {
    for ishape in [vec![], vec![2], vec![2, 2], vec![1, 2, 1]] {
        for dtype in [DType::I32, DType::I64] {
            for bad in [4i64, -1, i32::MIN as i64] {
                let g = Graph::new("bad");
                let x = g.input("x", ferrite::f32(&[3, 4]));
                let i = g.input("i", TensorType::new(dtype, ishape.clone()).unwrap());
                g.output(&x.index_select(1, &i).exp());
                let n: usize = ishape.iter().product();
                let mut index = vec![1i64; n];
                index[n - 1] = bad;
                let i_val = ints(dtype, &ishape, &index);
                let x_val = Tensor::from_f64(&ferrite::f32(&[3, 4]), &[0.0; 12]).unwrap();
                rejected_everywhere(&g, &[&x_val, &i_val], "out of range");
            }
        }
    }
    // An index used as data, not as an offset: the simulator used to return it unchecked.
    let g = Graph::new("positions");
    let i = g.input("i", ferrite::i64(&[2]));
    g.output(&g.arange(0.0, 4.0, 1.0, DType::I64).index_select(0, &i));
    rejected_everywhere(&g, &[&ints(DType::I64, &[2], &[1, 9])], "out of range");
    // gather, too.
    let g = Graph::new("bad_gather");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let i = g.input("i", ferrite::i32(&[2, 1]));
    g.output(&x.gather(1, &i));
    let x_val = Tensor::from_f64(&ferrite::f32(&[2, 3]), &[0.0; 6]).unwrap();
    for bad in [3i64, -1] {
        let i_val = ints(DType::I32, &[2, 1], &[0, bad]);
        rejected_everywhere(&g, &[&x_val, &i_val], "out of range");
    }
}

/// F02 (reliability probe): `index_select`/`gather` over an axis of extent 0 made cpu and sim
/// exit 2 ("lowered program is invalid"), and an out-of-range index whose result is empty was
/// accepted by cpu and sim but rejected by the interpreter.
#[test]
fn f02_indices_into_an_empty_axis_are_out_of_range_everywhere() {
    // index_select(x: f32[0], i: i64[1]).
    let g = Graph::new("index_select_empty");
    let x = g.input("x", ferrite::f32(&[0]));
    let i = g.input("i", ferrite::i64(&[1]));
    g.output(&x.index_select(0, &i));
    let x_val = Tensor::from_f64(&ferrite::f32(&[0]), &[]).unwrap();
    let i_val = ints(DType::I64, &[1], &[0]);
    rejected_everywhere(&g, &[&x_val, &i_val], "out of range");

    // A rank-2 index into an empty middle axis, fused with a consumer.
    let g = Graph::new("middle");
    let x = g.input("x", ferrite::f32(&[2, 0, 3]));
    let i = g.input("i", ferrite::i32(&[2, 2]));
    g.output(&(x.index_select(1, &i) + 1.0).sum_all());
    let x_val = Tensor::from_f64(&ferrite::f32(&[2, 0, 3]), &[]).unwrap();
    let i_val = ints(DType::I32, &[2, 2], &[0, 0, 0, 0]);
    rejected_everywhere(&g, &[&x_val, &i_val], "out of range");

    // gather(x: f32[3, 0], i: i64[3, 2], axis=1).
    let g = Graph::new("gather_empty");
    let x = g.input("x", ferrite::f32(&[3, 0]));
    let i = g.input("i", ferrite::i64(&[3, 2]));
    g.output(&x.gather(1, &i));
    let x_val = Tensor::from_f64(&ferrite::f32(&[3, 0]), &[]).unwrap();
    let i_val = ints(DType::I64, &[3, 2], &[0; 6]);
    rejected_everywhere(&g, &[&x_val, &i_val], "out of range");

    // index_select(x: f32[0, 4], [0, 9], axis=1): the result [0, 2] is empty, but 9 is out
    // of range for the axis of extent 4, and PyTorch (so the interpreter) checks it.
    let g = Graph::new("oob_empty_result");
    let x = g.input("x", ferrite::f32(&[0, 4]));
    let i = g.input("i", ferrite::i64(&[2]));
    g.output(&x.index_select(1, &i));
    let x_val = Tensor::from_f64(&ferrite::f32(&[0, 4]), &[]).unwrap();
    let i_val = ints(DType::I64, &[2], &[0, 9]);
    rejected_everywhere(&g, &[&x_val, &i_val], "out of range");
    // In range, the same graph gives the empty result everywhere.
    let ok = ints(DType::I64, &[2], &[0, 3]);
    for (config, got) in run_all(&g, &[&x_val, &ok]) {
        let got = got.unwrap_or_else(|e| panic!("{config:?}: {e}"));
        assert_eq!(got[0].ty().shape, vec![0, 2], "{config:?}");
    }

    // An empty index into an empty axis is fine: the result is empty.
    let g = Graph::new("empty_index");
    let x = g.input("x", ferrite::f32(&[0, 3]));
    let i = g.input("i", ferrite::i64(&[2, 0]));
    g.output(&x.index_select(0, &i));
    let x_val = Tensor::from_f64(&ferrite::f32(&[0, 3]), &[]).unwrap();
    let i_val = ints(DType::I64, &[2, 0], &[]);
    for (config, got) in run_all(&g, &[&x_val, &i_val]) {
        let got = got.unwrap_or_else(|e| panic!("{config:?}: {e}"));
        assert_eq!(got[0].ty().shape, vec![2, 0, 3], "{config:?}");
    }
}

/// An index op whose result is read only in part (a slice of it, an elementwise op of it
/// sliced, an index into it) still checks every index, as the interpreter does: a fused
/// kernel that computes only the picked rows used to accept an out-of-range index elsewhere.
#[test]
fn indices_of_a_result_read_only_in_part_are_checked_everywhere() {
    let x_val = Tensor::from_f64(&ferrite::f32(&[4, 3]), &[0.0; 12]).unwrap();
    let bad = ints(DType::I64, &[3], &[0, 9, 1]);
    let good = ints(DType::I64, &[3], &[3, 0, 1]);
    let graphs: Vec<Graph> = (0..4)
        .map(|case| {
            let g = Graph::new("partial");
            let x = g.input("x", ferrite::f32(&[4, 3]));
            let i = g.input("i", ferrite::i64(&[3]));
            let y = x.index_select(0, &i);
            let out = match case {
                0 => y.slice(0, 0..1),
                1 => (y.exp() + 1.0).reshape([9]).slice(0, 0..2),
                2 => y.index_select(0, &g.arange(0.0, 1.0, 1.0, DType::I64)),
                _ => x.gather(0, &i.reshape([3, 1])).slice(0, 2..3),
            };
            g.output(&out);
            g
        })
        .collect();
    for g in &graphs {
        rejected_everywhere(g, &[&x_val, &bad], "out of range");
        for (config, got) in run_all(g, &[&x_val, &good]) {
            got.unwrap_or_else(|e| panic!("{config:?}: {e}"));
        }
    }
}

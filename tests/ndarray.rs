//! `Tensor` from and to `ndarray` arrays (compiled only with the `ndarray` feature:
//! `cargo test -p ferrite --features ndarray --test ndarray`).
#![cfg(feature = "ndarray")]

use ferrite::ndarray::{arr0, array, s, Array3, ArrayD, IxDyn};
use ferrite::{Error, Options, Target, Tensor};

#[test]
fn arrays_convert_both_ways_in_any_layout() {
    let a = Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i64);
    let t = Tensor::try_from(a.clone()).unwrap();
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.as_ndarray::<i64>().unwrap(), a.view().into_dyn());
    assert_eq!(t.to_ndarray::<i64>().unwrap(), a.clone().into_dyn());

    // Strided and permuted views, and an owned array sliced in place, come out row-major.
    let view = a.slice(s![.., 1.., ..;2]);
    let t = Tensor::from_ndarray(&view).unwrap();
    assert_eq!(t.shape(), &[2, 2, 2]);
    assert_eq!(
        t.as_slice::<i64>().unwrap(),
        &[10, 12, 20, 22, 110, 112, 120, 122]
    );
    let permuted = a.clone().permuted_axes([2, 0, 1]);
    let t = Tensor::try_from(permuted.clone()).unwrap();
    assert_eq!(t.as_ndarray::<i64>().unwrap(), permuted.view().into_dyn());
    let mut sliced = a.clone();
    sliced.slice_collapse(s![1.., 1.., ..]);
    assert!(sliced.is_standard_layout());
    let t = Tensor::try_from(sliced.clone()).unwrap();
    assert_eq!(t.as_ndarray::<i64>().unwrap(), sliced.view().into_dyn());

    // Rank 0, empty, and every element type.
    let t = Tensor::try_from(arr0(true)).unwrap();
    assert_eq!(t.rank(), 0);
    let empty = ArrayD::<f32>::zeros(IxDyn(&[3, 0]));
    assert!(Tensor::try_from(empty).unwrap().is_empty());
    let h = array![ferrite::half::f16::from_f32(1.5)];
    assert_eq!(Tensor::try_from(h).unwrap().dtype(), ferrite::DType::F16);

    // Asking for the wrong element type is a typed error.
    let t = Tensor::try_from(array![1.0f32, 2.0]).unwrap();
    assert!(matches!(
        t.as_ndarray::<i32>().unwrap_err(),
        Error::Data { .. }
    ));
    assert!(matches!(
        ArrayD::<i64>::try_from(t).unwrap_err(),
        Error::Data { .. }
    ));
}

#[test]
fn a_compiled_program_runs_on_converted_arrays() {
    let g = ferrite::Graph::new("affine");
    let x = g.input("x", ferrite::f32(&[2, 3]));
    let w = g.input("w", ferrite::f32(&[3, 2]));
    g.output(&(x.matmul(&w) + 1.0));
    let exe = ferrite::compile(&g, &Options::default().target(Target::Cpu)).unwrap();
    let x = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let w = array![[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]];
    let out = exe
        .run_named(&[
            ("x", &Tensor::try_from(x.clone()).unwrap()),
            ("w", &Tensor::try_from(w.clone()).unwrap()),
        ])
        .unwrap();
    let y = ArrayD::<f32>::try_from(out.into_iter().next().unwrap()).unwrap();
    assert_eq!(y, (x.dot(&w) + 1.0).into_dyn());
}

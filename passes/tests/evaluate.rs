//! The loop-IR evaluator on bad inputs: errors are values that name the kernel,
//! never panics or wrong answers.

use ferrite_ir::loops::evaluate;
use ferrite_ir::{DType, Tensor, TensorType};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_testkit::primitive;

fn embedding() -> ferrite_ir::Graph {
    primitive(
        "graph e(ids: i64[3], table: f32[4, 2]) { return exp(index_select(table, ids, axis=0)) }",
    )
}

fn ids(values: &[i64]) -> Tensor {
    Tensor::from_i64(
        &TensorType::new(DType::I64, vec![values.len()]).unwrap(),
        values,
    )
}

#[test]
fn out_of_range_indices_are_errors_naming_the_kernel() {
    let g = embedding();
    let table = Tensor::random(&TensorType::new(DType::F32, vec![4, 2]).unwrap(), 1);
    for opts in [ScheduleOptions::default(), ScheduleOptions::unfused()] {
        let s = schedule(&g, &opts).unwrap();
        let ok = evaluate(&s.program, &[ids(&[3, 0, 1]), table.clone()]);
        assert!(ok.is_ok(), "{ok:?}");
        for bad in [[0, 4, 1], [0, -1, 1]] {
            let err = evaluate(&s.program, &[ids(&bad), table.clone()])
                .unwrap_err()
                .to_string();
            assert!(err.contains("kernel k"), "{err}");
            assert!(err.contains("out of range"), "{err}");
            assert!(ferrite_ir::interpret(&g, &[ids(&bad), table.clone()]).is_err());
        }
    }
}

#[test]
fn wrong_inputs_are_errors() {
    let g = embedding();
    let s = schedule(&g, &ScheduleOptions::default()).unwrap();
    let table = Tensor::random(&TensorType::new(DType::F32, vec![4, 2]).unwrap(), 1);
    let err = evaluate(&s.program, &[ids(&[0, 1, 2])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes 2 inputs"), "{err}");
    let wrong_shape = Tensor::random(&TensorType::new(DType::F32, vec![2, 4]).unwrap(), 1);
    let err = evaluate(&s.program, &[ids(&[0, 1, 2]), wrong_shape])
        .unwrap_err()
        .to_string();
    assert!(err.contains("has type f32[2, 4]"), "{err}");
    let err = evaluate(&s.program, &[table.clone(), table])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 0"), "{err}");
}

#[test]
fn a_corrupted_program_is_rejected_before_running() {
    let g = embedding();
    let mut s = schedule(&g, &ScheduleOptions::default()).unwrap();
    s.program.kernels[0].domain[0] += 1;
    let table = Tensor::random(&TensorType::new(DType::F32, vec![4, 2]).unwrap(), 1);
    let err = evaluate(&s.program, &[ids(&[0, 1, 2]), table])
        .unwrap_err()
        .to_string();
    assert!(err.contains("is invalid"), "{err}");
}

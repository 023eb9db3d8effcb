//! The loop-IR forms that backends' plans make: reduction stages that also write a
//! scratch buffer (a stash), and kernels that update an earlier kernel's buffer in place.
//! Each must verify, print, and evaluate to the same results as the plain program.

use ferrite_ir::loops::*;
use ferrite_ir::types::TensorType;
use ferrite_ir::{DType, Tensor, UnaryOp};

fn buffer(id: u32, kind: BufferKind, shape: &[usize]) -> Buffer {
    Buffer {
        id: BufferId(id),
        ty: TensorType::new(DType::F32, shape.to_vec()).unwrap(),
        kind,
        name: format!("b{id}"),
    }
}

fn node(body: &mut Block, op: ExprOp) -> ExprRef {
    body.push(ExprNode {
        dtype: DType::F32,
        op,
    })
}

fn load(body: &mut Block, buffer: u32, index: IndexExpr) -> ExprRef {
    node(
        body,
        ExprOp::Load(Load {
            buffer: BufferId(buffer),
            index,
            guard: vec![],
            other: Value::Float(0.0),
        }),
    )
}

fn var(v: Var) -> IndexExpr {
    IndexExpr::Var(v)
}

/// `y[i, j] = exp(x[i, j]) / sum_j exp(x[i, j])` over `[4, 8]`; with `stash`, the sum
/// stage also writes `exp(x)` to scratch `buf2` and the store stage reads it back.
fn normalize(stash: bool) -> Program {
    let mut buffers = vec![
        buffer(0, BufferKind::Input(0), &[4, 8]),
        buffer(1, BufferKind::Output(0), &[4, 8]),
    ];
    if stash {
        buffers.push(buffer(2, BufferKind::Scratch, &[8]));
    }
    let row = |v: Var| var(Var::outer(0)) * 8 + var(v);
    let mut sum_body = Block::default();
    let x = load(&mut sum_body, 0, row(Var::reduce(0)));
    let e = node(&mut sum_body, ExprOp::Unary(UnaryOp::Exp, x));
    let mut store_body = Block::default();
    let e2 = if stash {
        load(&mut store_body, 2, var(Var::store(0)))
    } else {
        let x = load(&mut store_body, 0, row(Var::store(0)));
        node(&mut store_body, ExprOp::Unary(UnaryOp::Exp, x))
    };
    let s = node(&mut store_body, ExprOp::Acc(AccId(0)));
    let y = node(
        &mut store_body,
        ExprOp::Binary(ferrite_ir::BinaryOp::Div, e2, s),
    );
    let mut k = Kernel {
        id: KernelId(0),
        name: "k0_normalize".into(),
        nodes: vec![],
        domain: vec![4],
        stages: vec![
            Stage::Reduce {
                domain: vec![8],
                body: sum_body,
                reductions: vec![Reduction {
                    acc: AccId(0),
                    kind: ReduceKind::Sum,
                    dtype: DType::F32,
                    value: e,
                    rhs: None,
                }],
                stores: if stash {
                    vec![StoreOp {
                        buffer: BufferId(2),
                        index: var(Var::reduce(0)),
                        value: e,
                    }]
                } else {
                    vec![]
                },
            },
            Stage::Store {
                domain: vec![8],
                body: store_body,
                stores: vec![StoreOp {
                    buffer: BufferId(1),
                    index: row(Var::store(0)),
                    value: y,
                }],
            },
        ],
        gemm: None,
        reads: vec![],
        writes: vec![],
    };
    (k.reads, k.writes) = k.compute_accesses(&buffers);
    Program {
        name: "normalize".into(),
        buffers,
        inputs: vec![BufferId(0)],
        outputs: vec![BufferId(1)],
        kernels: vec![k],
        constants: vec![],
        donated: vec![],
    }
}

#[test]
fn a_stash_in_a_reduction_stage_verifies_prints_and_evaluates_the_same() {
    let plain = normalize(false);
    let stashed = normalize(true);
    stashed.verify().unwrap();
    let text = stashed.to_string();
    assert!(text.contains("buf2: f32[8]  scratch `b2`"), "{text}");
    assert!(
        text.contains(
            "    reduce r0 in 0..8:\n      t1 = exp(buf0[i0*8 + r0])\n      buf2[r0] = t1\n      acc0 = sum(t1)\n"
        ),
        "{text}"
    );
    assert!(text.contains("buf1[i0*8 + j0] = buf2[j0] / acc0"), "{text}");
    // The reader takes the form back.
    assert_eq!(
        parse_program("stash.loop", &text).unwrap().to_string(),
        text
    );
    let x = Tensor::random(&plain.buffers[0].ty, 7);
    let want = evaluate(&plain, std::slice::from_ref(&x)).unwrap();
    let got = evaluate(&stashed, &[x]).unwrap();
    assert_eq!(got, want);
}

#[test]
fn scratch_is_read_only_after_a_stage_stores_it_and_only_by_its_kernel() {
    // The store stage reads the scratch row, but no earlier stage writes it.
    let mut p = normalize(true);
    if let Stage::Reduce { stores, .. } = &mut p.kernels[0].stages[0] {
        stores.clear();
    }
    let k = &mut p.kernels[0];
    (k.reads, k.writes) = k.compute_accesses(&p.buffers);
    let err = p.verify().unwrap_err().to_string();
    assert!(err.contains("no earlier stage stores"), "{err}");
    // A second kernel reading another kernel's scratch.
    let mut p = normalize(true);
    let mut k = p.kernels[0].clone();
    k.id = KernelId(1);
    k.name = "k1_again".into();
    k.stages.remove(0);
    p.kernels.push(k);
    assert!(p.verify().is_err());
}

/// `y = x + 1` in one kernel, then a second kernel doing `y = y * y` (`index` is where
/// the second kernel reads `y`).
fn update(index: IndexExpr) -> Program {
    let buffers = vec![
        buffer(0, BufferKind::Input(0), &[6]),
        buffer(1, BufferKind::Output(0), &[6]),
    ];
    let i0 = var(Var::outer(0));
    let mut first = Block::default();
    let x = load(&mut first, 0, i0.clone());
    let one = node(&mut first, ExprOp::Const(Value::Float(1.0)));
    let y = node(
        &mut first,
        ExprOp::Binary(ferrite_ir::BinaryOp::Add, x, one),
    );
    let mut second = Block::default();
    let y2 = load(&mut second, 1, index);
    let sq = node(
        &mut second,
        ExprOp::Binary(ferrite_ir::BinaryOp::Mul, y2, y2),
    );
    let kernel = |id: u32, name: &str, body: Block, value: ExprRef| {
        let mut k = Kernel {
            id: KernelId(id),
            name: name.into(),
            nodes: vec![],
            domain: vec![6],
            stages: vec![Stage::Store {
                domain: vec![],
                body,
                stores: vec![StoreOp {
                    buffer: BufferId(1),
                    index: i0.clone(),
                    value,
                }],
            }],
            gemm: None,
            reads: vec![],
            writes: vec![],
        };
        (k.reads, k.writes) = k.compute_accesses(&buffers);
        k
    };
    let kernels = vec![
        kernel(0, "k0_add", first, y),
        kernel(1, "k1_square", second, sq),
    ];
    Program {
        name: "update".into(),
        buffers,
        inputs: vec![BufferId(0)],
        outputs: vec![BufferId(1)],
        kernels,
        constants: vec![],
        donated: vec![],
    }
}

#[test]
fn a_later_kernel_may_update_a_buffer_in_place_at_the_index_it_writes() {
    let p = update(var(Var::outer(0)));
    p.verify().unwrap();
    let text = p.to_string();
    assert_eq!(
        parse_program("update.loop", &text).unwrap().to_string(),
        text
    );
    let x = Tensor::from_f64(&p.buffers[0].ty, &[0.0, 1.0, 2.0, -1.0, 0.5, 3.0]);
    let y = evaluate(&p, &[x]).unwrap();
    assert_eq!(y[0].to_f64(), vec![1.0, 4.0, 9.0, 0.0, 2.25, 16.0]);
    // Reading another point's element is not an update: two kernels write buf1.
    let err = update(IndexExpr::Const(5) + var(Var::outer(0)) * -1)
        .verify()
        .unwrap_err()
        .to_string();
    assert!(err.contains("written by both"), "{err}");
}

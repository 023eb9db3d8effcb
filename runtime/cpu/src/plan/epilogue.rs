//! GEMM kernels: the product goes to the extern GEMM, the rest becomes an epilogue kernel.
//!
//! A kernel with a [`GemmInfo`] computes `acc = Σ_k lhs * rhs` in a reduction stage and
//! then a fused epilogue (bias, activation, residual) that reads `acc`. [`split_gemm`]
//! checks the description against the reduction it replaces (the loads' affine indices
//! must be exactly the described strides), then splits the kernel in two:
//!
//! - the *product kernel*, which [`crate::gemm`] runs: the GEMM reduction and a store of
//!   `acc` into a dense `[batch.., m, n]` buffer: straight into the kernel's output when
//!   the kernel stores the product at exactly that layout, otherwise into a temporary;
//! - the *epilogue*, the kernel without the GEMM reduction, where every read of `acc`
//!   becomes a load of that buffer. Writing into the output, the epilogue updates it in
//!   place: each point loads its own element and stores it back. When the kernel only
//!   stores the product, there is no epilogue at all.
//!
//! The extern GEMM supports `f32`, `f64` and `f16`; other dtypes (the integers), and
//! descriptions that do not match the stage, keep the reduction as generated loops
//! (`split_gemm` returns `None`).

use super::schedule::ExternGemm;
use ferrite_ir::loops::{
    AccId, Block, Buffer, BufferId, BufferKind, ExprNode, ExprOp, Extents, GemmInfo, GemmOperand,
    IndexExpr, Kernel, Load, ReduceKind, Stage, StoreOp, Value, Var,
};
use ferrite_ir::types::{contiguous_strides, TensorType};
use ferrite_ir::{BinaryOp, DType};

/// A GEMM kernel, split (the kernels' accesses are not yet computed).
#[derive(Clone, Debug)]
pub struct GemmSplit {
    /// The kernel the extern GEMM runs: the product's reduction and its store.
    pub product_kernel: Kernel,
    /// The product, for the extern GEMM.
    pub gemm: ExternGemm,
    /// The temporary holding the product, when it is not the kernel's output.
    pub temp: Option<Buffer>,
    /// The rest of the kernel, reading the product (`None`: the product is the result).
    pub epilogue: Option<Kernel>,
}

/// Splits `kernel` (see the module docs). `temp_id` is the id a temporary product
/// buffer gets if one is needed. `None` when the kernel has no usable GEMM description.
pub fn split_gemm(kernel: &Kernel, buffers: &[Buffer], temp_id: BufferId) -> Option<GemmSplit> {
    let g = kernel.gemm.as_ref()?;
    let Some(Stage::Reduce {
        domain: red_domain,
        body,
        reductions,
        ..
    }) = kernel.stages.get(g.stage)
    else {
        return None;
    };
    let r = reductions
        .iter()
        .find(|r| r.acc == g.acc && r.kind == ReduceKind::Sum)?;
    let dtype = r.dtype;
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16) {
        return None;
    }
    // The product is a dot reduction `value * rhs` (or, equivalently, a sum of products).
    let (x, y) = match r.rhs {
        Some(rhs) => (r.value, rhs),
        None => match body.get(r.value)?.op {
            ExprOp::Binary(BinaryOp::Mul, x, y) => (x, y),
            _ => return None,
        },
    };
    let load = |e: ferrite_ir::loops::ExprRef| match &body.get(e)?.op {
        ExprOp::Load(l) if l.guard.is_empty() => Some(l.clone()),
        _ => None,
    };
    let (lx, ly) = (load(x)?, load(y)?);
    let dtype_of = |b: BufferId| buffers.get(b.index()).map(|b| b.ty.dtype);
    if dtype_of(g.lhs.buffer)? != dtype || dtype_of(g.rhs.buffer)? != dtype {
        return None;
    }
    let nb = g.batch.len();
    if g.outer_axes.len() != nb + 2 {
        return None;
    }
    // Extents: each described axis is the outer axis it names, or has extent 1.
    let extents: Vec<usize> = g.batch.iter().copied().chain([g.m, g.n]).collect();
    for (t, axis) in g.outer_axes.iter().enumerate() {
        match axis {
            Some(a) if kernel.domain.get(*a) == Some(&extents[t]) => {}
            None if extents[t] == 1 => {}
            _ => return None,
        }
    }
    let expected_red: &[usize] = if g.k == 1 {
        &[]
    } else {
        std::slice::from_ref(&g.k)
    };
    if red_domain.as_slice() != expected_red && red_domain.as_slice() != [g.k] {
        return None;
    }
    let ext = Extents {
        outer: kernel.domain.clone(),
        reduce: red_domain.clone(),
        store: vec![],
    };
    let k_var = (!red_domain.is_empty()).then(|| Var::reduce(0));
    let matches = |l: &Load, op: &GemmOperand, rows_are_k: bool| -> bool {
        if l.buffer != op.buffer || op.offset < 0 {
            return false;
        }
        let Some((offset, terms)) = l.index.as_affine(&ext) else {
            return false;
        };
        let mut want: Vec<(Var, i64)> = Vec::new();
        for t in 0..nb {
            if let (Some(a), Some(&s)) = (g.outer_axes[t], op.batch_strides.get(t)) {
                want.push((Var::outer(a), s));
            }
        }
        let (outer_axis, outer_stride, k_stride) = if rows_are_k {
            (g.outer_axes[nb + 1], op.col_stride, op.row_stride)
        } else {
            (g.outer_axes[nb], op.row_stride, op.col_stride)
        };
        if let Some(a) = outer_axis {
            want.push((Var::outer(a), outer_stride));
        }
        if let Some(v) = k_var {
            want.push((v, k_stride));
        }
        want.retain(|&(_, c)| c != 0);
        want.sort();
        offset == op.offset && want == terms && op.batch_strides.len() == nb
    };
    // The product may be written `lhs * rhs` or `rhs * lhs`.
    let ok = (matches(&lx, &g.lhs, false) && matches(&ly, &g.rhs, true))
        || (matches(&ly, &g.lhs, false) && matches(&lx, &g.rhs, true));
    if !ok
        || [&g.lhs, &g.rhs].iter().any(|o| {
            o.batch_strides
                .iter()
                .chain([&o.row_stride, &o.col_stride])
                .any(|&s| s < 0)
        })
    {
        return None;
    }

    // The dense product index at the current outer point.
    let dense = contiguous_strides(&extents);
    let mut terms: Vec<IndexExpr> = Vec::new();
    for (t, axis) in g.outer_axes.iter().enumerate() {
        if let Some(a) = axis {
            terms.push(IndexExpr::Var(Var::outer(*a)) * dense[t] as i64);
        }
    }
    let product_index = IndexExpr::Sum(terms).simplify(&Extents {
        outer: kernel.domain.clone(),
        reduce: vec![],
        store: vec![],
    });

    // Stages after the GEMM: the only store, at the dense index, lets the GEMM write there.
    let mut stages: Vec<Stage> = Vec::new();
    for (si, stage) in kernel.stages.iter().enumerate() {
        if si == g.stage {
            if let Stage::Reduce {
                domain,
                body,
                reductions,
                stores,
            } = stage
            {
                let rest: Vec<_> = reductions
                    .iter()
                    .filter(|x| x.acc != g.acc)
                    .cloned()
                    .collect();
                if !rest.is_empty() {
                    stages.push(Stage::Reduce {
                        domain: domain.clone(),
                        body: body.clone(),
                        reductions: rest,
                        stores: stores.clone(),
                    });
                }
            }
        } else {
            stages.push(stage.clone());
        }
    }
    // A product nothing after it reads (its result sliced away: `slice(a @ b)` to empty,
    // then padded) is dead; splitting would have the GEMM and the stores that replace it
    // both write the output, which is not an update in place. The kernel stays whole.
    if !stages.iter().any(|s| reads_acc(s, g.acc)) {
        return None;
    }
    let numel: usize = extents.iter().product();
    let in_place = in_place_target(
        &stages,
        &kernel.domain,
        buffers,
        dtype,
        numel,
        &product_index,
    );
    let (product, temp) = match in_place {
        Some(b) => (b, None),
        None => {
            let ty = TensorType::new(dtype, extents.clone()).ok()?;
            let temp = Buffer {
                id: temp_id,
                ty,
                kind: BufferKind::Intermediate,
                name: format!("{}.product", kernel.name),
            };
            (temp_id, Some(temp))
        }
    };
    let only_copies = in_place.is_some() && stores_only_the_product(&stages, g.acc);
    let epilogue = if only_copies {
        None
    } else {
        for stage in &mut stages {
            replace_acc(stage, g.acc, product, &product_index);
        }
        Some(Kernel {
            id: kernel.id,
            name: format!("{}_epilogue", kernel.name),
            nodes: kernel.nodes.clone(),
            domain: kernel.domain.clone(),
            stages,
            gemm: None,
            reads: vec![],
            writes: vec![],
        })
    };
    // The product kernel: the GEMM reduction alone (its body pruned to what it needs),
    // then the store of `acc` at the dense index.
    let mut product_body = body.clone();
    let map = product_body.retain_live(&[r.value].into_iter().chain(r.rhs).collect::<Vec<_>>());
    let moved = |e: ferrite_ir::loops::ExprRef| map.get(e.index()).copied().flatten();
    let mut store_body = Block::default();
    let value = store_body.push(ExprNode {
        dtype,
        op: ExprOp::Acc(g.acc),
    });
    let product_kernel = Kernel {
        id: kernel.id,
        name: kernel.name.clone(),
        nodes: kernel.nodes.clone(),
        domain: kernel.domain.clone(),
        stages: vec![
            Stage::Reduce {
                domain: red_domain.clone(),
                body: product_body,
                reductions: vec![ferrite_ir::loops::Reduction {
                    value: moved(r.value)?,
                    rhs: match r.rhs {
                        Some(rhs) => Some(moved(rhs)?),
                        None => None,
                    },
                    ..r.clone()
                }],
                stores: vec![],
            },
            Stage::Store {
                domain: vec![],
                body: store_body,
                stores: vec![StoreOp {
                    buffer: product,
                    index: product_index,
                    value,
                }],
            },
        ],
        gemm: Some(GemmInfo {
            stage: 0,
            ..g.clone()
        }),
        reads: vec![],
        writes: vec![],
    };
    Some(GemmSplit {
        product_kernel,
        gemm: ExternGemm {
            dtype,
            batch: g.batch.clone(),
            m: g.m,
            n: g.n,
            k: g.k,
            lhs: g.lhs.clone(),
            rhs: g.rhs.clone(),
            product,
            temporary: temp.is_some(),
            epilogue_per_rows: false,
        },
        temp,
        epilogue,
    })
}

/// The kernel's output buffer, when the kernel's only write is one store per outer point
/// at the dense product index into a buffer of the product's dtype and size.
fn in_place_target(
    stages: &[Stage],
    domain: &[usize],
    buffers: &[Buffer],
    dtype: DType,
    numel: usize,
    product_index: &IndexExpr,
) -> Option<BufferId> {
    let mut found = None;
    for stage in stages {
        if let Stage::Store {
            domain: sd, stores, ..
        } = stage
        {
            if found.is_some() || !sd.is_empty() || stores.len() != 1 {
                return None;
            }
            let s = &stores[0];
            let buf = buffers.get(s.buffer.index())?;
            let ext = stage.extents(domain);
            if buf.ty.dtype != dtype
                || buf.ty.numel() != numel
                || s.index.simplify(&ext) != *product_index
            {
                return None;
            }
            found = Some(s.buffer);
        }
    }
    found
}

/// Whether `stage`'s body reads the accumulator `acc`.
fn reads_acc(stage: &Stage, acc: AccId) -> bool {
    let body = match stage {
        Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
    };
    body.nodes
        .iter()
        .any(|n| matches!(n.op, ExprOp::Acc(a) if a == acc))
}

/// True when the only remaining work is storing `acc` itself.
fn stores_only_the_product(stages: &[Stage], acc: AccId) -> bool {
    stages.iter().all(|s| match s {
        Stage::Store { body, stores, .. } => stores
            .iter()
            .all(|w| matches!(body.get(w.value).map(|n| &n.op), Some(ExprOp::Acc(a)) if *a == acc)),
        Stage::Reduce { .. } => false,
    })
}

/// Rewrites every read of `acc` into a load of the product buffer at the current point.
fn replace_acc(stage: &mut Stage, acc: AccId, product: BufferId, index: &IndexExpr) {
    let body = match stage {
        Stage::Reduce { body, .. } | Stage::Store { body, .. } => body,
    };
    for node in &mut body.nodes {
        if matches!(node.op, ExprOp::Acc(a) if a == acc) {
            *node = ExprNode {
                dtype: node.dtype,
                op: ExprOp::Load(Load {
                    buffer: product,
                    index: index.clone(),
                    guard: vec![],
                    other: Value::zero(node.dtype),
                }),
            };
        }
    }
}

/// The GEMM description of a kernel, for reports.
pub fn describe(g: &GemmInfo) -> String {
    format!(
        "gemm batch {:?} m {} n {} k {} (lhs {} rows {} cols {}; rhs {} rows {} cols {})",
        g.batch,
        g.m,
        g.n,
        g.k,
        g.lhs.buffer,
        g.lhs.row_stride,
        g.lhs.col_stride,
        g.rhs.buffer,
        g.rhs.row_stride,
        g.rhs.col_stride
    )
}

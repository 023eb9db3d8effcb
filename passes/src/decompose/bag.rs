//! `embedding_bag` as primitives: the rows gathered by `index_select`, each position's
//! bag (its segment id) found from the offsets, and the rows added into their bags by
//! `index_add`. Nothing is `bags x lookups x dim`: the segment ids compare every
//! position with every offset (`lookups x bags` integers), the rows are `lookups x dim`.
//!
//! Offsets that PyTorch rejects (a first offset other than 0, a decrease, an offset
//! past the end, a last offset other than the end with `include_last_offset`, indices
//! in no bag) make every segment id -1, so the `index_add` stops the run with an
//! index error on every backend, as the interpreter stops with its own message.
//!
//! The autodiff rule reads the same parts ([`BagParts`]), so forward and backward agree
//! on which position goes to which bag and with which factor.
//!
//! `index_reduce(reduce="mean")` is written here too, as `index_add`s ([`index_mean`]).

use ferrite_ir::{
    BagMode, BinaryOp as B, DType, Graph, IndexReduceOp, Op, ReduceOp, Result, Scalar, ValueId,
};

/// What forward and backward of one `embedding_bag` share.
pub struct BagParts {
    /// The bag of each position of `indices`, `[N]` i64 (-1 everywhere when the offsets
    /// are invalid).
    pub seg: ValueId,
    /// The factor of each position's row, `[N, 1]` in the compute dtype: its weight,
    /// or 0 at `padding_idx`; `None` for 1.
    pub factor: Option<ValueId>,
    /// For mean mode, what each bag's sum is divided by, `[bags]`: its count of rows,
    /// at least 1 (an empty bag's sum is 0).
    pub denom: Option<ValueId>,
    /// The number of bags.
    pub bags: usize,
    /// The dtype the bags are computed in (`f32` for half tables).
    pub compute: DType,
}

/// The attributes of an `embedding_bag` node.
#[derive(Clone, Copy, Debug)]
pub struct BagAttrs {
    /// `mode`.
    pub mode: BagMode,
    /// `include_last_offset`.
    pub include_last_offset: bool,
    /// `padding_idx`.
    pub padding_idx: Option<i64>,
}

impl BagAttrs {
    /// The attributes of `op`, if it is an `embedding_bag`.
    pub fn of(op: &Op) -> Option<BagAttrs> {
        match *op {
            Op::EmbeddingBag {
                mode,
                include_last_offset,
                padding_idx,
            } => Some(BagAttrs {
                mode,
                include_last_offset,
                padding_idx,
            }),
            _ => None,
        }
    }
}

fn add(g: &mut Graph, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
    g.add(op, inputs, None)
}

fn int(g: &mut Graph, v: i64) -> Result<ValueId> {
    g.add_literal(Scalar::Int(v), DType::I64)
}

fn bin(g: &mut Graph, b: B, x: ValueId, y: ValueId) -> Result<ValueId> {
    add(g, Op::Binary(b), &[x, y])
}

fn cast(g: &mut Graph, x: ValueId, to: DType) -> Result<ValueId> {
    if g.ty(x).dtype == to {
        return Ok(x);
    }
    add(g, Op::Cast { to }, &[x])
}

fn reshape(g: &mut Graph, x: ValueId, shape: &[usize]) -> Result<ValueId> {
    if g.ty(x).shape == shape {
        return Ok(x);
    }
    let shape = shape.iter().map(|&d| d as i64).collect();
    add(g, Op::Reshape { shape }, &[x])
}

fn slice(g: &mut Graph, x: ValueId, start: usize, end: usize) -> Result<ValueId> {
    add(
        g,
        Op::Slice {
            axis: 0,
            start: start as i64,
            end: end as i64,
            step: 1,
        },
        &[x],
    )
}

fn full(g: &mut Graph, shape: &[usize], value: f64, dtype: DType) -> Result<ValueId> {
    add(
        g,
        Op::Full {
            shape: shape.to_vec(),
            value,
            dtype,
        },
        &[],
    )
}

/// `index_reduce(base, idx, src, reduce="mean")` as `index_add`s: the sums (from the
/// base, or from zero where an index points without `include_self`) over the counts
/// (plus one with `include_self`), floor-divided for integers as PyTorch divides.
pub fn index_mean(
    g: &mut Graph,
    axis: i64,
    include_self: bool,
    ins: &[ValueId],
) -> Result<ValueId> {
    let (base, idx, src) = (ins[0], ins[1], ins[2]);
    let ty = g.ty(base).clone();
    let dt = ty.dtype;
    let div = if dt.is_float() {
        B::Div
    } else {
        B::FloorDivide
    };
    let lit = |g: &mut Graph, v: f64| {
        let value = if dt.is_float() {
            Scalar::Float(v)
        } else {
            Scalar::Int(v as i64)
        };
        g.add_literal(value, dt)
    };
    let zeros = full(g, &ty.shape, 0.0, dt)?;
    let src_shape = g.ty(src).shape.clone();
    let ones = full(g, &src_shape, 1.0, dt)?;
    let count = add(g, Op::IndexAdd { axis }, &[zeros, idx, ones])?;
    let one = lit(g, 1.0)?;
    if include_self {
        let sum = add(g, Op::IndexAdd { axis }, &[base, idx, src])?;
        let n = bin(g, B::Add, count, one)?;
        return bin(g, div, sum, n);
    }
    let zero = lit(g, 0.0)?;
    let hit = bin(g, B::Gt, count, zero)?;
    let start = add(g, Op::Where, &[hit, zero, base])?;
    let sum = add(g, Op::IndexAdd { axis }, &[start, idx, src])?;
    let n = bin(g, B::Maximum, count, one)?;
    let mean = bin(g, div, sum, n)?;
    add(g, Op::Where, &[hit, mean, base])
}

/// `index_add(zeros([bags, ..]), seg, x)` along axis 0.
pub fn into_bags(g: &mut Graph, seg: ValueId, x: ValueId, bags: usize) -> Result<ValueId> {
    let ty = g.ty(x).clone();
    let mut shape = ty.shape.clone();
    shape[0] = bags;
    let zeros = full(g, &shape, 0.0, ty.dtype)?;
    add(g, Op::IndexAdd { axis: 0 }, &[zeros, seg, x])
}

/// The segment ids and row factors of `embedding_bag(table, indices, offsets[, w])`.
pub fn bag_parts(g: &mut Graph, attrs: BagAttrs, ins: &[ValueId]) -> Result<BagParts> {
    let (table, indices, offsets) = (ins[0], ins[1], ins[2]);
    let tt = g.ty(table).clone();
    let compute = if matches!(tt.dtype, DType::F16 | DType::Bf16) {
        DType::F32
    } else {
        tt.dtype
    };
    let n = g.ty(indices).shape[0];
    let l = g.ty(offsets).shape[0];
    let bags = if attrs.include_last_offset { l - 1 } else { l };
    let offs = cast(g, offsets, DType::I64)?;

    // seg[j] = #{b : start[b] <= j} - 1.
    let seg = if bags == 0 {
        full(g, &[n], -1.0, DType::I64)?
    } else {
        let starts = if attrs.include_last_offset {
            slice(g, offs, 0, bags)?
        } else {
            offs
        };
        // Compared and counted as f32 where every position and count is exact in it
        // (below 2^24), so the comparisons run as vector code (i64 lanes do not); an
        // offset rounded there is still past every position if it was, or before every
        // one if negative (and rejected below).
        let exact = if n.max(bags) < 1 << 24 {
            DType::F32
        } else {
            DType::I64
        };
        let row = cast(g, starts, exact)?;
        let row = reshape(g, row, &[1, bags])?;
        let pos = add(
            g,
            Op::Arange {
                start: 0.0,
                end: n as f64,
                step: 1.0,
                dtype: exact,
            },
            &[],
        )?;
        let col = reshape(g, pos, &[n, 1])?;
        let le = bin(g, B::Le, row, col)?;
        let le = cast(g, le, exact)?;
        let count = add(
            g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: Some(vec![1]),
                keepdim: false,
            },
            &[le],
        )?;
        let count = cast(g, count, DType::I64)?;
        let one = int(g, 1)?;
        let seg = bin(g, B::Sub, count, one)?;

        // The offsets PyTorch rejects.
        let zero = int(g, 0)?;
        let first = slice(g, offs, 0, 1)?;
        let mut bad = vec![bin(g, B::Ne, first, zero)?];
        if l >= 2 {
            let next = slice(g, offs, 1, l)?;
            let prev = slice(g, offs, 0, l - 1)?;
            bad.push(bin(g, B::Lt, next, prev)?);
        }
        let last = slice(g, offs, l - 1, l)?;
        let end = int(g, n as i64)?;
        let past = if attrs.include_last_offset {
            B::Ne
        } else {
            B::Gt
        };
        bad.push(bin(g, past, last, end)?);
        let bad = add(g, Op::Concat { axis: 0 }, &bad)?;
        let bad = cast(g, bad, DType::I64)?;
        let any = add(
            g,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: None,
                keepdim: false,
            },
            &[bad],
        )?;
        let any = bin(g, B::Gt, any, zero)?;
        let minus = int(g, -1)?;
        add(g, Op::Where, &[any, minus, seg])?
    };

    // The factor of each row: weight, padding mask, 1/count.
    let mut factor: Option<ValueId> = match ins.get(3) {
        Some(&w) => Some(cast(g, w, compute)?),
        None => None,
    };
    if let Some(p) = attrs.padding_idx {
        let rows = tt.shape[0] as i64;
        let p = if p < 0 { p + rows } else { p };
        let idx = cast(g, indices, DType::I64)?;
        let p = int(g, p)?;
        let keep = bin(g, B::Ne, idx, p)?;
        let keep = cast(g, keep, compute)?;
        factor = Some(match factor {
            Some(w) => bin(g, B::Mul, w, keep)?,
            None => keep,
        });
    }
    let denom = if attrs.mode == BagMode::Mean {
        let counted = match factor {
            Some(f) => f,
            None => full(g, &[n], 1.0, compute)?,
        };
        let counts = into_bags(g, seg, counted, bags)?;
        let one = g.add_literal(Scalar::Float(1.0), compute)?;
        Some(bin(g, B::Maximum, counts, one)?)
    } else {
        None
    };
    let factor = match factor {
        Some(f) => Some(reshape(g, f, &[n, 1])?),
        None => None,
    };
    Ok(BagParts {
        seg,
        factor,
        denom,
        bags,
        compute,
    })
}

/// The bag of each position for max mode, `[N]` i64: its segment id, or `bags` (a bag
/// past the real ones, sliced off) at `padding_idx`, which takes part in no bag.
pub fn max_segments(
    g: &mut Graph,
    attrs: BagAttrs,
    parts: &BagParts,
    indices: ValueId,
    rows: usize,
) -> Result<ValueId> {
    let Some(p) = attrs.padding_idx else {
        return Ok(parts.seg);
    };
    let p = if p < 0 { p + rows as i64 } else { p };
    let idx = cast(g, indices, DType::I64)?;
    let p = int(g, p)?;
    let keep = bin(g, B::Ne, idx, p)?;
    // Invalid offsets (-1 everywhere) stay -1, so the index check still fails.
    let zero = int(g, 0)?;
    let invalid = bin(g, B::Lt, parts.seg, zero)?;
    let past = int(g, parts.bags as i64)?;
    let aside = add(g, Op::Where, &[invalid, parts.seg, past])?;
    add(g, Op::Where, &[keep, parts.seg, aside])
}

/// `embedding_bag` as primitives: sum and mean modes add the (weighted) rows into their
/// bags with `index_add`; max mode takes each bag's elementwise maximum with
/// `index_reduce(amax)` into zeros without the base, so an empty bag is 0 as in PyTorch.
pub fn embedding_bag(g: &mut Graph, attrs: BagAttrs, ins: &[ValueId]) -> Result<ValueId> {
    let dt = g.ty(ins[0]).dtype;
    let parts = bag_parts(g, attrs, ins)?;
    if attrs.mode == BagMode::Max {
        let tt = g.ty(ins[0]).clone();
        let seg = max_segments(g, attrs, &parts, ins[1], tt.shape[0])?;
        let rows = add(g, Op::IndexSelect { axis: 0 }, &[ins[0], ins[1]])?;
        let rows = cast(g, rows, parts.compute)?;
        let extra = usize::from(attrs.padding_idx.is_some());
        let zeros = full(g, &[parts.bags + extra, tt.shape[1]], 0.0, parts.compute)?;
        let out = add(
            g,
            Op::IndexReduce {
                axis: 0,
                reduce: IndexReduceOp::Amax,
                include_self: false,
            },
            &[zeros, seg, rows],
        )?;
        let out = if extra == 1 {
            slice(g, out, 0, parts.bags)?
        } else {
            out
        };
        return cast(g, out, dt);
    }
    let rows = add(g, Op::IndexSelect { axis: 0 }, &[ins[0], ins[1]])?;
    let rows = cast(g, rows, parts.compute)?;
    let rows = match parts.factor {
        Some(f) => bin(g, B::Mul, rows, f)?,
        None => rows,
    };
    let out = into_bags(g, parts.seg, rows, parts.bags)?;
    let out = match parts.denom {
        Some(c) => {
            let c = reshape(g, c, &[parts.bags, 1])?;
            bin(g, B::Div, out, c)?
        }
        None => out,
    };
    cast(g, out, dt)
}

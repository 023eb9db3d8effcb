//! `index_add`, `index_reduce` and `embedding_bag`: the ops that combine rows into
//! data-chosen places.

use super::strided::split_at_axis;
use crate::op::{BagMode, IndexReduceOp};
use crate::scalar_ops::{float_binary, int_binary, int_division};
use crate::tensor::round_to_dtype;
use crate::types::TensorType;
use crate::BinaryOp;
use crate::{Error, Result, Tensor};

/// Checks one index value against the extent it selects from.
fn checked(op: &str, k: i64, extent: usize) -> Result<usize> {
    if k >= 0 && (k as u64) < extent as u64 {
        Ok(k as usize)
    } else {
        Err(Error::Eval(format!(
            "{op}: index {k} out of range for axis of extent {extent}"
        )))
    }
}

/// `index_add(base, index, source, axis)`: slice `j` of `source` is added to slice
/// `index[j]` of a copy of `base`, for `j` in order. Floats round to the dtype after
/// every addition, as PyTorch's kernel (and every backend) adds in the dtype, so
/// duplicate indices accumulate in index order; integers wrap.
pub(super) fn index_add(
    axis: i64,
    base: &Tensor,
    index: &Tensor,
    source: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let (outer, len, inner) = split_at_axis(&base.ty.shape, axis)?;
    let picks = index
        .to_i64()
        .into_iter()
        .map(|k| checked("index_add", k, len))
        .collect::<Result<Vec<usize>>>()?;
    let p = picks.len();
    let at = |o: usize, k: usize, i: usize| (o * len + k) * inner + i;
    let from = |o: usize, j: usize, i: usize| (o * p + j) * inner + i;
    if out.dtype.is_float() {
        let mut v = base.to_f64();
        let s = source.to_f64();
        for o in 0..outer {
            for (j, &k) in picks.iter().enumerate() {
                for i in 0..inner {
                    let x = &mut v[at(o, k, i)];
                    *x = round_to_dtype(*x + s[from(o, j, i)], out.dtype);
                }
            }
        }
        Ok(Tensor::from_f64(out, &v))
    } else {
        let mut v = base.to_i128();
        let s = source.to_i128();
        for o in 0..outer {
            for (j, &k) in picks.iter().enumerate() {
                for i in 0..inner {
                    let x = &mut v[at(o, k, i)];
                    *x = x.wrapping_add(s[from(o, j, i)]);
                }
            }
        }
        Ok(Tensor::from_i128(out, &v))
    }
}

/// `index_reduce`: each slice `j` of `source` combined into slice `index[j]` of the
/// result in index order, starting from the base's slice (`include_self`) or from the
/// first source slice sent there; `mean` divides each picked slice's sum by its count
/// (plus one with `include_self`), rounding down for integers.
pub(super) fn index_reduce(
    axis: i64,
    reduce: IndexReduceOp,
    include_self: bool,
    base: &Tensor,
    index: &Tensor,
    source: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let (outer, len, inner) = split_at_axis(&base.ty.shape, axis)?;
    let picks = index
        .to_i64()
        .into_iter()
        .map(|k| checked("index_reduce", k, len))
        .collect::<Result<Vec<usize>>>()?;
    let p = picks.len();
    let at = |o: usize, k: usize, i: usize| (o * len + k) * inner + i;
    let from = |o: usize, j: usize, i: usize| (o * p + j) * inner + i;
    let combine = reduce.combine().unwrap_or(BinaryOp::Add);
    // How many source slices each slice of the axis receives.
    let mut count = vec![0usize; len];
    for &k in &picks {
        count[k] += 1;
    }
    // Whether element (o, k, i) already holds a value to combine with.
    let mut started = vec![include_self; len];
    macro_rules! run {
        ($v:expr, $s:expr, $op:expr, $div:expr) => {{
            let (mut v, s) = ($v, $s);
            for o in 0..outer {
                started.iter_mut().for_each(|x| *x = include_self);
                for (j, &k) in picks.iter().enumerate() {
                    for i in 0..inner {
                        let (x, y) = (v[at(o, k, i)], s[from(o, j, i)]);
                        v[at(o, k, i)] = if started[k] { $op(x, y)? } else { y };
                    }
                    started[k] = true;
                }
            }
            if reduce == IndexReduceOp::Mean {
                for o in 0..outer {
                    for (k, &c) in count.iter().enumerate() {
                        if c > 0 {
                            let c = c + usize::from(include_self);
                            for i in 0..inner {
                                v[at(o, k, i)] = $div(v[at(o, k, i)], c)?;
                            }
                        }
                    }
                }
            }
            v
        }};
    }
    if out.dtype.is_float() {
        let dt = out.dtype;
        let v = run!(
            base.to_f64(),
            source.to_f64(),
            |x, y| float_binary(combine, x, y).map(|r| round_to_dtype(r, dt)),
            |x: f64, c: usize| Ok::<f64, Error>(round_to_dtype(x / c as f64, dt))
        );
        Ok(Tensor::from_f64(out, &v))
    } else {
        let v = run!(
            base.to_i128(),
            source.to_i128(),
            |x, y| int_binary(combine, x, y),
            |x: i128, c: usize| int_division(BinaryOp::FloorDivide, x, c as i128)
        );
        Ok(Tensor::from_i128(out, &v))
    }
}

/// The bags of `embedding_bag`: for each, the range of `indices` it holds. The first
/// offset must be 0, the offsets must not decrease nor pass the end, and with
/// `include_last_offset` the last one must be the end, as PyTorch requires; every index
/// must be in a bag. Without indices every bag is empty and the offsets are not read.
pub(crate) fn bag_ranges(
    offsets: &[i64],
    n: usize,
    include_last_offset: bool,
) -> Result<Vec<(usize, usize)>> {
    let bags = if include_last_offset {
        offsets.len().saturating_sub(1)
    } else {
        offsets.len()
    };
    let bad = |why: String| Err(Error::Eval(format!("embedding_bag: {why}")));
    if bags == 0 && n > 0 {
        return bad(format!("the {n} indices are in no bag"));
    }
    if n == 0 {
        // Every bag is empty, whatever the offsets say (the compiled targets check the
        // offsets through the indices' bags, and there are none).
        return Ok(vec![(0, 0); bags]);
    }
    if let Some(&first) = offsets.first() {
        if first != 0 {
            return bad(format!("the first offset must be 0, not {first}"));
        }
    }
    if include_last_offset {
        if let Some(&last) = offsets.last() {
            if last != n as i64 {
                return bad(format!(
                    "with include_last_offset the last offset must be the number of indices ({n}), not {last}"
                ));
            }
        }
    }
    let mut ranges = Vec::with_capacity(bags);
    for b in 0..bags {
        let start = offsets[b];
        let end = offsets.get(b + 1).copied().unwrap_or(n as i64);
        if end < start {
            return bad(format!("offsets decrease from {start} to {end} at bag {b}"));
        }
        if end > n as i64 {
            return bad(format!("offset {end} passes the end of the {n} indices"));
        }
        ranges.push((start as usize, end as usize));
    }
    Ok(ranges)
}

/// `embedding_bag(table, indices, offsets[, per_sample_weights])`, plainly in f64 and
/// rounded once: each bag's rows (times their weights) summed, averaged over the rows
/// counted, or their elementwise maximum; rows at `padding_idx` are left out; an empty
/// bag gives zeros.
pub(super) fn embedding_bag(
    mode: BagMode,
    include_last_offset: bool,
    padding_idx: Option<i64>,
    x: &[&Tensor],
    out: &TensorType,
) -> Result<Tensor> {
    let (table, indices) = (x[0], x[1].to_i64());
    let (rows, dim) = (table.ty.shape[0], table.ty.shape[1]);
    let t = table.to_f64();
    let weights = x.get(3).map(|w| w.to_f64());
    let pad = padding_idx.map(|p| if p < 0 { p + rows as i64 } else { p });
    let ranges = bag_ranges(&x[2].to_i64(), indices.len(), include_last_offset)?;
    let mut result = vec![0.0; out.numel()];
    for (b, &(start, end)) in ranges.iter().enumerate() {
        let acc = &mut result[b * dim..(b + 1) * dim];
        let mut count = 0usize;
        for j in start..end {
            let k = indices[j];
            let row = checked("embedding_bag", k, rows)?;
            if Some(k) == pad {
                continue;
            }
            let w = weights.as_ref().map_or(1.0, |w| w[j]);
            let r = &t[row * dim..(row + 1) * dim];
            for (a, &v) in acc.iter_mut().zip(r) {
                *a = match mode {
                    BagMode::Max if count == 0 => v,
                    BagMode::Max if v > *a => v,
                    BagMode::Max => *a,
                    BagMode::Sum | BagMode::Mean => *a + w * v,
                };
            }
            count += 1;
        }
        if mode == BagMode::Mean && count > 0 {
            acc.iter_mut().for_each(|a| *a /= count as f64);
        }
    }
    Ok(Tensor::from_f64(out, &result))
}

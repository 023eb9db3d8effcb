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
    let how = Combine {
        op: BinaryOp::Add,
        include_self: true,
        mean: false,
    };
    scatter("index_add", axis, how, base, index, source, out)
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
    let how = Combine {
        op: reduce.combine().unwrap_or(BinaryOp::Add),
        include_self,
        mean: reduce == IndexReduceOp::Mean,
    };
    scatter("index_reduce", axis, how, base, index, source, out)
}

/// How [`scatter`] combines a source slice into the slice its index picks.
#[derive(Clone, Copy)]
struct Combine {
    /// The elementwise op (in the dtype: floats round after each, integers wrap).
    op: BinaryOp,
    /// Whether the base's value is the first operand (else the first source's is taken).
    include_self: bool,
    /// Divide each picked slice by the number of values combined there.
    mean: bool,
}

/// `index_add` and `index_reduce`: the source slices combined into the slices `index`
/// picks along `axis`, in index order; `name` is the op, for errors.
fn scatter(
    name: &str,
    axis: i64,
    how: Combine,
    base: &Tensor,
    index: &Tensor,
    source: &Tensor,
    out: &TensorType,
) -> Result<Tensor> {
    let (outer, len, inner) = split_at_axis(&base.ty.shape, axis)?;
    let picks = index
        .to_i64()
        .into_iter()
        .map(|k| checked(name, k, len))
        .collect::<Result<Vec<usize>>>()?;
    let lines = Lines {
        outer,
        len,
        inner,
        picks,
    };
    if out.dtype.is_float() {
        let dt = out.dtype;
        let v = lines.combine(
            how,
            base.to_f64(),
            &source.to_f64(),
            |x, y| float_binary(how.op, x, y).map(|r| round_to_dtype(r, dt)),
            |x, c| Ok(round_to_dtype(x / c as f64, dt)),
        )?;
        Ok(Tensor::from_f64(out, &v))
    } else {
        let v = lines.combine(
            how,
            base.to_i128(),
            &source.to_i128(),
            |x, y| int_binary(how.op, x, y),
            |x, c| int_division(BinaryOp::FloorDivide, x, c as i128),
        )?;
        Ok(Tensor::from_i128(out, &v))
    }
}

/// A scatter's layout: `outer` lines of `len` slices of `inner` elements in the result,
/// and source slice `j` of each line sent to slice `picks[j]`.
struct Lines {
    outer: usize,
    len: usize,
    inner: usize,
    picks: Vec<usize>,
}

impl Lines {
    /// `v` (the base's values) with the source `s` combined in by `op`, then divided
    /// by `div` for `mean`.
    fn combine<T: Copy>(
        &self,
        how: Combine,
        mut v: Vec<T>,
        s: &[T],
        op: impl Fn(T, T) -> Result<T>,
        div: impl Fn(T, usize) -> Result<T>,
    ) -> Result<Vec<T>> {
        let (len, inner, p) = (self.len, self.inner, self.picks.len());
        let at = |o: usize, k: usize, i: usize| (o * len + k) * inner + i;
        // Whether slice k of the current line holds a value to combine with yet.
        let mut started = vec![how.include_self; len];
        for o in 0..self.outer {
            started.fill(how.include_self);
            for (j, &k) in self.picks.iter().enumerate() {
                for i in 0..inner {
                    let (x, y) = (v[at(o, k, i)], s[(o * p + j) * inner + i]);
                    v[at(o, k, i)] = if started[k] { op(x, y)? } else { y };
                }
                started[k] = true;
            }
        }
        if how.mean {
            // How many source slices each slice of a line receives.
            let mut count = vec![0usize; len];
            for &k in &self.picks {
                count[k] += 1;
            }
            for o in 0..self.outer {
                for (k, &c) in count.iter().enumerate().filter(|(_, &c)| c > 0) {
                    let c = c + usize::from(how.include_self);
                    for i in 0..inner {
                        v[at(o, k, i)] = div(v[at(o, k, i)], c)?;
                    }
                }
            }
        }
        Ok(v)
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

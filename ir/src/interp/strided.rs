//! Index arithmetic shared by the ops: row-major walks over a shape that yield the
//! matching flat offset into a tensor read through arbitrary strides, and the helpers
//! that pick elements by offset without leaving their dtype.

use crate::types::{contiguous_strides, normalize_axis};
use crate::Data;
use crate::{Error, Result};

/// Walks the multi-indices of `shape` in row-major order and yields
/// `base + Σ index[i] * strides[i]` for each. Broadcasting is a stride of 0, a
/// permutation is a permuted stride list, a strided slice a scaled stride.
pub(super) struct Offsets {
    shape: Vec<usize>,
    strides: Vec<usize>,
    index: Vec<usize>,
    offset: usize,
    remaining: usize,
}

impl Offsets {
    /// A walk over `shape` reading through `strides` (one per axis) from `base`.
    pub(super) fn new(shape: &[usize], strides: &[usize], base: usize) -> Offsets {
        debug_assert_eq!(shape.len(), strides.len());
        Offsets {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            index: vec![0; shape.len()],
            offset: base,
            remaining: shape.iter().product(),
        }
    }
}

impl Iterator for Offsets {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let current = self.offset;
        // Advance like an odometer: bump the innermost axis and carry outward, so each
        // step costs O(1) amortized instead of recomputing the offset from the index.
        for i in (0..self.shape.len()).rev() {
            self.index[i] += 1;
            self.offset += self.strides[i];
            if self.index[i] < self.shape[i] {
                break;
            }
            self.offset -= self.strides[i] * self.shape[i];
            self.index[i] = 0;
        }
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Offsets {}

/// Strides that read a row-major tensor of `shape` as if broadcast to `out` (numpy
/// rules: axes align on the right; a missing or extent-1 axis has stride 0 and repeats).
pub(super) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = contiguous_strides(shape);
    let lead = out.len().saturating_sub(shape.len());
    (0..out.len())
        .map(|i| match i.checked_sub(lead) {
            Some(j) if shape[j] != 1 => own[j],
            _ => 0,
        })
        .collect()
}

/// Offsets into a row-major tensor of `shape` for every element of `out`, reading it
/// broadcast to `out`.
pub(super) fn broadcast_offsets(shape: &[usize], out: &[usize]) -> Offsets {
    Offsets::new(out, &broadcast_strides(shape, out), 0)
}

/// Splits `shape` around `axis` into (outer, extent, inner) element counts, so element
/// `(o, k, i)` lives at `(o * extent + k) * inner + i`. A rank-0 shape is one element
/// along its only axis, as PyTorch treats dim 0 of a scalar.
pub(super) fn split_at_axis(shape: &[usize], axis: i64) -> Result<(usize, usize, usize)> {
    if shape.is_empty() {
        normalize_axis(axis, 0)?;
        return Ok((1, 1, 1));
    }
    let a = normalize_axis(axis, shape.len())?;
    Ok((
        shape[..a].iter().product(),
        shape[a],
        shape[a + 1..].iter().product(),
    ))
}

/// Applies `$body` (an expression over the element vector `$v`) to whichever variant
/// `$data` is, wrapping the result in the same variant.
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            Data::F32($v) => Data::F32($body),
            Data::F16($v) => Data::F16($body),
            Data::Bf16($v) => Data::Bf16($body),
            Data::I32($v) => Data::I32($body),
            Data::I64($v) => Data::I64($body),
            Data::Bool($v) => Data::Bool($body),
            Data::F64($v) => Data::F64($body),
            Data::I8($v) => Data::I8($body),
            Data::U8($v) => Data::U8($body),
            Data::I16($v) => Data::I16($body),
            Data::U16($v) => Data::U16($body),
            Data::U32($v) => Data::U32($body),
            Data::U64($v) => Data::U64($body),
        }
    };
}

/// `data[src[0]], data[src[1]], ...` in the same dtype: every movement op is this
/// with a different list of source offsets, so values are copied bit for bit.
pub(super) fn pick(data: &Data, src: impl Iterator<Item = usize>) -> Data {
    map_data!(data, v => src.map(|i| v[i]).collect())
}

/// [`pick`] over the offsets of a strided view, `Offsets::new(shape, strides, base)`, a row
/// of the innermost axis at a time: one tight loop per row instead of the odometer's step per
/// element. Constant folding permutes and broadcasts whole weight tensors with it (a
/// classifier's transposed weight is a million elements).
pub(super) fn pick_strided(data: &Data, shape: &[usize], strides: &[usize], base: usize) -> Data {
    let (n, s) = match (shape.last(), strides.last()) {
        (Some(&n), Some(&s)) => (n, s),
        _ => (1, 0),
    };
    let rank = shape.len().saturating_sub(1);
    let total: usize = shape.iter().product();
    let rows = || Offsets::new(&shape[..rank], &strides[..rank], base);
    // A transpose (rows one element apart, columns `s` apart): rows in groups, read a
    // column of the group at a time, one run of memory, instead of one strided walk per row.
    let transposed = s != 1 && rank >= 1 && strides[rank - 1] == 1 && shape[rank - 1] >= GROUP;
    map_data!(data, v => {
        let mut out = Vec::with_capacity(total);
        if n > 0 && transposed {
            let starts: Vec<usize> = rows().collect();
            pick_transposed(v, &starts, n, s, &mut out);
        } else if n > 0 {
            for row in rows() {
                if s == 1 {
                    out.extend_from_slice(&v[row..row + n]);
                } else {
                    out.extend((0..n).map(|k| v[row + k * s]));
                }
            }
        }
        out
    })
}

/// Rows of a transposed read at a time ([`pick_transposed`]): a cache line of `f32`.
const GROUP: usize = 16;

/// Appends to `out` the rows starting at `starts` (`n` elements `s` apart each): where
/// [`GROUP`] consecutive rows start one element apart, the group is written a column at a
/// time from `GROUP` adjacent elements (a 1280 x 1000 classifier weight transposed in 2.4
/// ms on the VM, most of it in strided reads, before this).
fn pick_transposed<T: Copy>(v: &[T], starts: &[usize], n: usize, s: usize, out: &mut Vec<T>) {
    let mut i = 0;
    while i < starts.len() {
        let group = &starts[i..(i + GROUP).min(starts.len())];
        let first = group[0];
        if group.len() == GROUP && group.iter().enumerate().all(|(r, &at)| at == first + r) {
            let at = out.len();
            out.resize(at + GROUP * n, v[first]);
            let block = &mut out[at..];
            for k in 0..n {
                let column = &v[first + k * s..first + k * s + GROUP];
                for (r, &x) in column.iter().enumerate() {
                    block[r * n + k] = x;
                }
            }
            i += GROUP;
        } else {
            out.extend((0..n).map(|k| v[first + k * s]));
            i += 1;
        }
    }
}

/// The elements of every part, one after another. All parts must share a dtype.
pub(super) fn concat_data(parts: &[&Data]) -> Result<Data> {
    macro_rules! join {
        ($variant:ident) => {{
            let mut out = Vec::new();
            for part in parts {
                match part {
                    Data::$variant(v) => out.extend_from_slice(v),
                    _ => return Err(Error::internal("cannot join elements of different dtypes")),
                }
            }
            Data::$variant(out)
        }};
    }
    Ok(match parts.first() {
        None => return Err(Error::internal("nothing to join")),
        Some(Data::F32(_)) => join!(F32),
        Some(Data::F16(_)) => join!(F16),
        Some(Data::Bf16(_)) => join!(Bf16),
        Some(Data::I32(_)) => join!(I32),
        Some(Data::I64(_)) => join!(I64),
        Some(Data::Bool(_)) => join!(Bool),
        Some(Data::F64(_)) => join!(F64),
        Some(Data::I8(_)) => join!(I8),
        Some(Data::U8(_)) => join!(U8),
        Some(Data::I16(_)) => join!(I16),
        Some(Data::U16(_)) => join!(U16),
        Some(Data::U32(_)) => join!(U32),
        Some(Data::U64(_)) => join!(U64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_walk_row_major() {
        let all: Vec<usize> = Offsets::new(&[2, 3], &[3, 1], 0).collect();
        assert_eq!(all, vec![0, 1, 2, 3, 4, 5]);
        // The transpose of a 3x2 row-major matrix.
        let t: Vec<usize> = Offsets::new(&[2, 3], &[1, 2], 0).collect();
        assert_eq!(t, vec![0, 2, 4, 1, 3, 5]);
        let scalar: Vec<usize> = Offsets::new(&[], &[], 7).collect();
        assert_eq!(scalar, vec![7]);
        assert_eq!(Offsets::new(&[3, 0], &[0, 1], 0).count(), 0);
    }

    #[test]
    fn broadcasting_repeats() {
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), vec![1, 0]);
        let o: Vec<usize> = broadcast_offsets(&[2, 1], &[2, 3]).collect();
        assert_eq!(o, vec![0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn row_by_row_picks_what_the_odometer_picks() {
        let data = Data::F32((0..60).map(|i| i as f32).collect());
        let views: [(&[usize], &[usize], usize); 8] = [
            (&[3, 4, 5], &[20, 5, 1], 0),
            (&[5, 4, 3], &[1, 5, 20], 0),
            (&[4, 3], &[5, 20], 2),
            (&[2, 3], &[0, 1], 7),
            (&[3, 0], &[0, 1], 0),
            (&[0, 3], &[1, 0], 0),
            (&[], &[], 9),
            (&[6], &[0], 4),
        ];
        for (shape, strides, base) in views {
            let want = pick(&data, Offsets::new(shape, strides, base));
            let got = pick_strided(&data, shape, strides, base);
            assert_eq!(got, want, "{shape:?} {strides:?} {base}");
        }
        // Transposes, read in groups of rows: whole groups, a ragged last group, groups
        // broken by an outer axis (rows 37 apart every 20) and a batch of them.
        let data = Data::I32((0..4000).collect());
        let views: [(&[usize], &[usize], usize); 5] = [
            (&[37, 50], &[1, 37], 0),
            (&[16, 3], &[1, 16], 5),
            (&[2, 20, 7], &[37, 1, 200], 3),
            (&[3, 33, 9], &[1000, 1, 40], 1),
            (&[40, 1], &[1, 40], 0),
        ];
        for (shape, strides, base) in views {
            let want = pick(&data, Offsets::new(shape, strides, base));
            let got = pick_strided(&data, shape, strides, base);
            assert_eq!(got, want, "{shape:?} {strides:?} {base}");
        }
    }

    #[test]
    fn split_axis() {
        assert_eq!(split_at_axis(&[2, 3, 4], 1).unwrap(), (2, 3, 4));
        assert_eq!(split_at_axis(&[2, 3, 4], -1).unwrap(), (6, 4, 1));
        assert_eq!(split_at_axis(&[], -1).unwrap(), (1, 1, 1));
        assert!(split_at_axis(&[2], 1).is_err());
    }
}

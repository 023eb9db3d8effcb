//! Placeholder (naive) multi-head attention; replaced by the helper's kernel on merge.

use crate::gemm::Parallelism;
use std::fmt;

/// The sizes and options of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Independent sequences.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Elements per head of q and k.
    pub head_dim: usize,
    /// Elements per head of v and the output.
    pub value_dim: usize,
    /// Query i attends key j only for j <= i.
    pub causal: bool,
    /// scores = (q . k) * scale.
    pub scale: f32,
}

/// Where a `[batch*seq, heads*dim]` operand lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowsLayout {
    /// First element.
    pub offset: usize,
    /// Elements between token rows.
    pub row_stride: usize,
}

/// An attention call's error.
#[derive(Debug)]
pub struct AttentionError(String);

impl fmt::Display for AttentionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AttentionError {}

/// Naive attention.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    q_layout: RowsLayout,
    k: &[f32],
    k_layout: RowsLayout,
    v: &[f32],
    v_layout: RowsLayout,
    out: &mut [f32],
    out_layout: RowsLayout,
    _parallelism: Parallelism<'_>,
) -> Result<(), AttentionError> {
    let s = shape;
    let rows = s.batch * s.seq;
    let need = |l: RowsLayout, dim: usize| {
        if rows == 0 {
            0
        } else {
            l.offset + (rows - 1) * l.row_stride + s.heads * dim
        }
    };
    if q.len() < need(q_layout, s.head_dim)
        || k.len() < need(k_layout, s.head_dim)
        || v.len() < need(v_layout, s.value_dim)
        || out.len() < need(out_layout, s.value_dim)
    {
        return Err(AttentionError("an operand is too short".into()));
    }
    let mut e = vec![0f32; s.seq];
    for b in 0..s.batch {
        for h in 0..s.heads {
            for i in 0..s.seq {
                let qi = q_layout.offset + (b * s.seq + i) * q_layout.row_stride + h * s.head_dim;
                let keys = if s.causal { i + 1 } else { s.seq };
                let mut m = f32::NEG_INFINITY;
                for (j, ej) in e.iter_mut().enumerate().take(keys) {
                    let kj =
                        k_layout.offset + (b * s.seq + j) * k_layout.row_stride + h * s.head_dim;
                    let mut d = 0f32;
                    for x in 0..s.head_dim {
                        d += q[qi + x] * k[kj + x];
                    }
                    *ej = d * s.scale;
                    m = m.max(*ej);
                }
                let mut sum = 0f32;
                for ej in e.iter_mut().take(keys) {
                    let x = (*ej - m).exp();
                    *ej = if x < f32::MIN_POSITIVE { 0.0 } else { x };
                    sum += *ej;
                }
                let r = 1.0 / sum;
                let oi =
                    out_layout.offset + (b * s.seq + i) * out_layout.row_stride + h * s.value_dim;
                for x in 0..s.value_dim {
                    let mut acc = 0f32;
                    for (j, ej) in e.iter().enumerate().take(keys) {
                        let vj = v_layout.offset
                            + (b * s.seq + j) * v_layout.row_stride
                            + h * s.value_dim;
                        acc += ej * r * v[vj + x];
                    }
                    out[oi + x] = acc;
                }
            }
        }
    }
    Ok(())
}

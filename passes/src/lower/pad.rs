//! A `pad` stored as a kernel of its own: the input copied to the inside of the output,
//! and the fill stored over each padded border, with no guard in any stage.
//!
//! Lowered as a view, `pad` is a guarded load of its input at every element of the
//! output; a kernel of its own then tests the padding per element and per row edge
//! (MobileNetV2's padded 14x14 planes took as long as the depthwise conv reading
//! them). Here the outer domain is the axes before the first padded one, which the
//! pad leaves alone; one stage copies the input's trailing block to its place inside
//! the output, and one stage per padded side stores the fill over that side's slab of
//! the output (slabs of two axes meet at the corners, written twice with the same
//! value). Every element of the output is written, on every target.

use super::domain::{coords_of, squeeze};
use super::plan::Plan;
use super::value::{fail_to_error, KernelBuilder};
use super::{Layout, LowerError};
use crate::error::Error;
use ferrite_ir::loops::{Extents, IndexExpr, Kernel, KernelId, Stage, StoreOp, Var};
use ferrite_ir::{Op, ValueId};

/// Whether `v` is a `pad` this module lowers: no negative amount (a crop), some axis
/// padded, and a buffer of its own to store into.
pub(super) fn is_pad_kernel(plan: &Plan, layout: &Layout, v: ValueId) -> bool {
    let Op::Pad { pads, .. } = &plan.g.node(v).op else {
        return false;
    };
    pads.iter().all(|&p| p >= 0)
        && pads.iter().any(|&p| p > 0)
        && plan.g.ty(v).shape.iter().all(|&d| d > 0)
        && layout.of_value[v.index()].is_some()
}

/// The kernel computing `pad` value `v` (see the module docs).
pub(super) fn pad_kernel(
    plan: &Plan,
    layout: &Layout,
    v: ValueId,
    id: KernelId,
    name: String,
) -> Result<Kernel, LowerError> {
    let g = plan.g;
    let node = g.node(v);
    let Op::Pad { pads, value } = &node.op else {
        return Err(Error::internal("pad_kernel of another op").into());
    };
    let x = node.inputs[0];
    let out = node.ty.shape.clone();
    let own = g.ty(x).shape.clone();
    let dtype = node.ty.dtype;
    let buffer = layout.of_value[v.index()]
        .ok_or_else(|| Error::internal(format!("%{} has no buffer", v.0)))?;
    let rank = out.len();
    // Axes before the first padded one are outer; the rest are each stage's own.
    let first = (0..rank)
        .find(|&k| pads[2 * k] != 0 || pads[2 * k + 1] != 0)
        .unwrap_or(rank);
    let lead = &out[..first];
    let outer = squeeze(lead);
    let lead_coords = coords_of(lead, Var::outer);
    let mut b = KernelBuilder::alone(plan, layout, outer.clone(), v);
    // The store domain of a block of trailing extents, and its coordinates.
    let block = |extents: &[usize]| (squeeze(extents), coords_of(extents, Var::store));
    let open = |b: &mut KernelBuilder, domain: &[usize]| {
        b.open_stage(Extents {
            outer: outer.clone(),
            reduce: vec![],
            store: domain.to_vec(),
        })
    };
    // Output coordinates: the outer ones, then `coords` (over the axes from `first`)
    // shifted by `offset(axis)`.
    let at = |coords: &[IndexExpr], offset: &dyn Fn(usize) -> i64| -> Vec<IndexExpr> {
        let shifted = coords
            .iter()
            .enumerate()
            .map(|(i, c)| match offset(first + i) {
                0 => c.clone(),
                o => c.clone() + IndexExpr::Const(o),
            });
        lead_coords.iter().cloned().chain(shifted).collect()
    };
    let mut stages: Vec<Stage> = Vec::new();
    // A stage storing `value` at `dst` (coordinates of the output) over `domain`.
    let mut store = |b: &mut KernelBuilder, domain: Vec<usize>, dst: &[IndexExpr], value| {
        let index = b.flat(dst, &out);
        stages.push(b.close_store_stage(
            domain,
            vec![StoreOp {
                buffer,
                index,
                value,
            }],
        ));
    };

    // The input, inside.
    let inner = &own[first..];
    if inner.iter().all(|&d| d > 0) && lead.iter().all(|&d| d > 0) {
        let (domain, coords) = block(inner);
        open(&mut b, &domain);
        let src: Vec<IndexExpr> = lead_coords.iter().chain(&coords).cloned().collect();
        let value = b.value_at(x, &src, &[]).map_err(fail_to_error)?;
        let dst = at(&coords, &|axis| pads[2 * axis]);
        store(&mut b, domain, &dst, value);
    }

    // The fill, over each padded side's slab.
    for k in first..rank {
        for (side, amount) in [(0, pads[2 * k]), (1, pads[2 * k + 1])] {
            if amount == 0 {
                continue;
            }
            let mut extents = out[first..].to_vec();
            extents[k - first] = amount as usize;
            let (domain, coords) = block(&extents);
            open(&mut b, &domain);
            let fill = b.fill(*value, dtype).map_err(LowerError::Failed)?;
            let start = if side == 0 {
                0
            } else {
                pads[2 * k] + own[k] as i64
            };
            let dst = at(&coords, &|axis| if axis == k { start } else { 0 });
            store(&mut b, domain, &dst, fill);
        }
    }
    Ok(b.finish(id, name, stages, None))
}

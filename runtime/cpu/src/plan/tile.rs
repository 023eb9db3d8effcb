//! Tiling a pointwise kernel that reads across rows (a transpose), so it walks memory in
//! small squares instead of striding through a page per element.
//!
//! A pointwise kernel runs its innermost outer axis `i_b` as the row loop. When a load's
//! index moves by a large stride along `i_b` (`x[i0 + i1*1024]`, the transposed read of
//! `y = x^T + 1`), every element of the row touches a new cache line and, at 4 KiB
//! strides, a new page: the copy ran at ~1 GB/s. If that load is contiguous along
//! another outer axis `i_a`, the two axes are split into tiles, `i_a = a_o*T + a_i` and
//! `i_b = b_o*T + b_i`, with the tile axes `a_i, b_i` innermost: a `T x T` tile touches
//! `T` lines of each operand, which stay in L1 while the tile is done. The rewrite only
//! reorders the points of the outer domain (a bijection), so results are unchanged and
//! outer points still write disjoint elements.

use super::analysis::substitute;
use super::coalesce::reindex_pointwise;
use ferrite_ir::loops::{ExprOp, Extents, IndexExpr, Kernel, Stage, Var};

/// Loads striding at least this many elements along the row axis get tiled.
const MIN_STRIDE: i64 = 16;

/// `kernel` with two outer axes tiled, and a note saying which, or `None` when it is not a
/// pointwise kernel with a strided read that tiling fixes.
pub fn tile_strided_pointwise(kernel: &Kernel) -> Option<(Kernel, String)> {
    let Stage::Store {
        domain: inner,
        body,
        stores,
    } = kernel.stages.first()?
    else {
        return None;
    };
    if kernel.stages.len() != 1 || !inner.is_empty() || kernel.domain.len() < 2 {
        return None;
    }
    let n = kernel.domain.len();
    let b = n - 1;
    let ext = Extents {
        outer: kernel.domain.clone(),
        reduce: vec![],
        store: vec![],
    };
    let coeff =
        |terms: &[(Var, i64)], v: Var| terms.iter().find(|(w, _)| *w == v).map_or(0, |&(_, c)| c);
    // The strided load and the axis along which it is contiguous.
    let mut choice = None;
    for node in &body.nodes {
        let ExprOp::Load(l) = &node.op else { continue };
        let Some((_, terms)) = l.index.as_affine(&ext) else {
            continue;
        };
        if coeff(&terms, Var::outer(b)).abs() < MIN_STRIDE {
            continue;
        }
        if let Some(a) = (0..b).rev().find(|&a| coeff(&terms, Var::outer(a)) == 1) {
            choice = Some((a, l.buffer, coeff(&terms, Var::outer(b))));
            break;
        }
    }
    let (a, buffer, stride) = choice?;
    // The stores should stay contiguous along the row (or the rewrite just moves the
    // stride from the loads to the stores).
    for s in stores {
        let (_, terms) = s.index.as_affine(&ext)?;
        if coeff(&terms, Var::outer(b)).abs() >= MIN_STRIDE {
            return None;
        }
    }
    let t = [16usize, 8]
        .into_iter()
        .find(|&t| kernel.domain[a].is_multiple_of(t) && kernel.domain[b].is_multiple_of(t))?;
    let mut domain = kernel.domain.clone();
    domain[a] /= t;
    domain[b] /= t;
    domain.push(t);
    domain.push(t);
    let new_ext = Extents {
        outer: domain.clone(),
        reduce: vec![],
        store: vec![],
    };
    let ti = t as i64;
    let rewrite = |e: &IndexExpr| -> IndexExpr {
        substitute(e, &|v| {
            if v == Var::outer(a) {
                Some(IndexExpr::Var(Var::outer(a)) * ti + IndexExpr::Var(Var::outer(n)))
            } else if v == Var::outer(b) {
                Some(IndexExpr::Var(Var::outer(b)) * ti + IndexExpr::Var(Var::outer(n + 1)))
            } else {
                None
            }
        })
        .simplify(&new_ext)
    };
    let note = format!(
        "tiled: i{a} and i{b} in {t}x{t} tiles ({buffer} is read with stride {stride} along i{b})"
    );
    Some((
        reindex_pointwise(kernel, domain, |e| Some(rewrite(e)))?,
        note,
    ))
}

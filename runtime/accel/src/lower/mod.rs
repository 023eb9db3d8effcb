//! Lowering from the loop IR to tile kernels: one tile kernel per loop-IR kernel.
//!
//! - GEMM kernels (`gemm.rs`) become tiled `dot`s with a K loop through local
//!   memory (`local_alloc`, `dma_async` one slice ahead, `dma_wait`) and the
//!   fused epilogue on the accumulator tile;
//! - every other kernel is lowered by layout (`kernel.rs`): pointwise kernels
//!   over blocks of their outer domain (flat, or rows by columns), kernels with
//!   reductions over `[outer block, inner block]` tiles, with a loop over inner
//!   blocks when a row does not fit one (`reduce.rs`); `stage.rs` holds what
//!   every stage needs and lowers store stages;
//! - `frame.rs` turns index expressions (views, pads, concats, gathers) into tile
//!   arithmetic on offsets; `body.rs` and `ops.rs` turn stage bodies into tile
//!   expressions with the loop IR's semantics; `blocks.rs` chooses block sizes
//!   that fit a PE's local memory and spread work over the PEs;
//! - `builder.rs` builds the kernel's syntax tree ([`tile::TileKernel`]),
//!   sharing common subexpressions, with the loop-IR kernel it implements as a
//!   comment on top. The tree is checked like a hand-written kernel and printed
//!   once, for the dump: the printer is exact, so the dump is what runs, and
//!   the simulator's errors point into it.
//!
//! [`crate::program::SimProgram`] lowers a whole program and runs it.
//!
//! Architecture invariant: lowering reads only the loop IR ([`Program`]) and the
//! machine's figures; it knows nothing of the graph or of the passes that
//! produced the program.

mod blocks;
mod body;
mod builder;
mod frame;
mod gemm;
mod kernel;
mod ops;
mod reduce;
mod split;
mod stage;
mod staging;

use crate::error::{Error, Result};
use crate::sim::{Machine, Placement};
use crate::tile::{self, CheckedKernel};
use ferrite_ir::loops::{BufferId, ExprOp, Kernel, Program, Stage};
use ferrite_ir::{DType, TensorType};
use std::collections::HashMap;

/// One loop-IR kernel lowered to a tile kernel, with its launch.
#[derive(Clone, Debug)]
pub struct TileLaunch {
    /// The tile kernel's name (the loop-IR kernel's).
    pub name: String,
    /// The kernel as printed (the dump; the simulator's errors point into it).
    pub text: String,
    /// The checked kernel the simulator runs.
    pub kernel: CheckedKernel,
    /// The launch grid.
    pub grid: [usize; 3],
    /// What each pointer parameter is bound to, in parameter order.
    pub params: Vec<Bound>,
    /// The launches that run right before this one, in order: copies of
    /// operands from LPDDR to SRAM, and the first part of a split GEMM.
    pub staging: Vec<TileLaunch>,
    /// The type of the SRAM scratch buffer that this launch and its staging
    /// launches share (a split GEMM's partial sums), if they use one.
    pub scratch: Option<TensorType>,
}

/// What a launch binds to a pointer parameter of its kernel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Bound {
    /// A buffer of the program.
    Buffer(BufferId),
    /// The SRAM copy of a buffer of the program, which the staging launches of
    /// the kernel fill; it lives from the first of them to the kernel's launch.
    Copy(BufferId),
    /// The kernel's scratch buffer in SRAM ([`TileLaunch::scratch`]).
    Scratch,
}

impl TileLaunch {
    /// The buffers of the program that this launch and its staging launches
    /// read or write (not their copies), in parameter order, each once.
    pub fn buffers(&self) -> Vec<BufferId> {
        self.bound(|b| match b {
            Bound::Buffer(id) => Some(id),
            _ => None,
        })
    }

    /// The buffers whose SRAM copies this launch and its staging launches use.
    pub fn copies(&self) -> Vec<BufferId> {
        self.bound(|b| match b {
            Bound::Copy(id) => Some(id),
            _ => None,
        })
    }

    /// The buffers `pick` takes from the parameters of this launch and its
    /// staging launches, in parameter order, each once.
    fn bound(&self, pick: impl Fn(Bound) -> Option<BufferId>) -> Vec<BufferId> {
        let mut out = Vec::new();
        for l in self.staging.iter().chain([self]) {
            for id in l.params.iter().filter_map(|&b| pick(b)) {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        out
    }
}

/// The tunable parameters of a GEMM kernel's lowering: its blocks, and which
/// operands a staging launch copies from LPDDR to SRAM first (lhs, rhs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GemmChoice {
    /// Rows of the output block of one program.
    pub bm: usize,
    /// Columns of the output block of one program.
    pub bn: usize,
    /// The K slice copied to local memory per step.
    pub bk: usize,
    /// Whether the lhs and the rhs are staged in SRAM.
    pub staged: [bool; 2],
    /// Row blocks per program (1 or 2): with 2, the first block's store is
    /// written during the second block's K loop.
    pub rows: usize,
    /// When not 0, the GEMM is split along K after this many (a multiple of
    /// `bk`, with both operands staged and one row block): a launch stages the
    /// first part of K, a second multiplies it into partial sums in SRAM while
    /// it stages the rest, and the kernel's own launch finishes the sums and
    /// runs the epilogue, so that LPDDR and the dot engine work at once.
    pub split: usize,
}

impl std::fmt::Display for GemmChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} x {} blocks, K slice {}", self.bm, self.bn, self.bk)?;
        if self.rows > 1 {
            write!(f, ", {} row blocks per program", self.rows)?;
        }
        match self.staged {
            [false, false] => Ok(()),
            [true, false] => write!(f, ", lhs staged"),
            [false, true] => write!(f, ", rhs staged"),
            [true, true] => write!(f, ", both staged"),
        }?;
        if self.split > 0 {
            write!(f, ", split after K {}", self.split)?;
        }
        Ok(())
    }
}

/// Offsets up to this magnitude are computed in i32 (with headroom for lanes of
/// partial blocks, which run past the end of a domain).
const I32_OFFSETS: i128 = 1 << 30;

/// Lowers kernel `k` of program `p` for `machine`, given where each buffer of
/// the program lives (`placements[i]` for buffer `i`; a missing entry means
/// LPDDR), which decides how block sizes trade compute for traffic, and given
/// `sram_room` bytes of SRAM free while it runs (for operands staged there),
/// with `choice` for a GEMM kernel (the cost model's when `None`, or when it
/// does not fit); `None` when the kernel's domain is empty (there is nothing
/// to run).
pub fn lower_kernel(
    p: &Program,
    k: &Kernel,
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    choice: Option<GemmChoice>,
) -> Result<Option<TileLaunch>> {
    lower_group(p, &[k], machine, placements, sram_room, choice)
}

/// The most GEMMs one launch computes beside each other ([`lhs_groups`]): each
/// adds a right slice and an accumulator to every program's local memory.
pub const MAX_LHS_GROUP: usize = 4;

/// Runs of consecutive kernels of `p`, as ranges of kernel indices, that can run
/// as one launch: independent GEMM kernels that read the same left operand the
/// same way and have the same shape (a transformer's q, k and v projections of
/// one activation), at most [`MAX_LHS_GROUP`] of them. Their launch copies each
/// block of the shared operand once for all of them, and the program makes one
/// launch instead of several (horizontal fusion at the kernel level, as
/// Inductor's combo kernels; no weight is copied). Every other kernel is a
/// range of its own.
pub fn lhs_groups(p: &Program) -> Vec<std::ops::Range<usize>> {
    fn gemm_of<'k>(p: &Program, k: &'k Kernel) -> Option<&'k ferrite_ir::loops::GemmInfo> {
        if k.domain.contains(&0) {
            None
        } else {
            gemm::eligible(p, k)
        }
    }
    let mut groups = Vec::new();
    let mut i = 0;
    while i < p.kernels.len() {
        let mut end = i + 1;
        if let Some(first) = gemm_of(p, &p.kernels[i]) {
            while end < p.kernels.len() && end - i < MAX_LHS_GROUP {
                let k = &p.kernels[end];
                let Some(g) = gemm_of(p, k) else { break };
                let fits = (i..end).all(|j| {
                    let kj = &p.kernels[j];
                    let gj = gemm_of(p, kj).unwrap_or(first);
                    gemm::shares_lhs(p, (kj, gj), (k, g))
                });
                if !fits {
                    break;
                }
                end += 1;
            }
        }
        groups.push(i..end);
        i = end;
    }
    groups
}

/// Lowers kernels `ks` of program `p` as one launch: one kernel, as
/// [`lower_kernel`] does, or a group of [`lhs_groups`], whose programs each
/// compute the same block of every member's product (the launch is named after
/// the first member). Arguments as for [`lower_kernel`]; `choice` applies to
/// the group as a whole.
pub fn lower_group(
    p: &Program,
    ks: &[&Kernel],
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    choice: Option<GemmChoice>,
) -> Result<Option<TileLaunch>> {
    Ok(lower_group_rows(p, ks, machine, placements, sram_room, choice, None)?.map(|(l, _)| l))
}

/// How a row kernel's launch follows the row count: its scalar parameter
/// `n_rows` is `per_row * rows`, and grid axis 0 has `ceil(per_row * rows / block)`
/// programs (the other axes are the launch's own).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RowGrid {
    /// Points of the masked tile axis per row.
    pub per_row: usize,
    /// Lanes of that axis per program.
    pub block: usize,
}

impl RowGrid {
    /// The launch grid at `rows` rows, from the grid at the most rows.
    pub fn grid(&self, grid: [usize; 3], rows: usize) -> [usize; 3] {
        [(self.per_row * rows).div_ceil(self.block), grid[1], grid[2]]
    }

    /// The value of the kernel's `n_rows` parameter at `rows` rows.
    pub fn n_rows(&self, rows: usize) -> usize {
        self.per_row * rows
    }
}

/// A row kernel's rows for [`lower_group_rows`] and [`group_choices_rows`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RowHint<'a> {
    /// The program's most rows.
    pub max: usize,
    /// The row axis of the kernel's domain.
    pub axis: usize,
    /// The row count the blocks are chosen for (1 to `max`).
    pub hint: usize,
    /// Elements per row of each buffer of the program with rows ([`row_elements`]).
    pub elements: &'a [Option<usize>],
}

/// The elements per row of every buffer of `p` with rows (by index), as
/// [`RowHint`]'s users need them; `None` for a buffer without rows.
pub fn row_elements(p: &Program, rows: &ferrite_ir::loops::Rows) -> Vec<Option<usize>> {
    p.buffers
        .iter()
        .map(|b| rows.buffer(b.id).map(|_| b.ty.numel() / rows.max))
        .collect()
}

fn row_cx(rows: Option<RowHint>) -> Option<stage::RowCx> {
    rows.map(|r| stage::RowCx {
        max: r.max,
        axis: r.axis,
        hint: r.hint,
        buffers: r.elements.to_vec(),
        grid: std::cell::Cell::new(None),
        conflict: std::cell::Cell::new(false),
    })
}

/// As [`lower_group`], for kernels of a row program at its most rows whose rows
/// run along an axis of their domain (`rows`: `None` for a kernel without rows,
/// lowered as [`lower_group`] does), with blocks chosen for a row count (the
/// hint; `placements` and `sram_room` should be those at that count): the kernel takes the row count's points as
/// its last parameter, `n_rows`, masks its row axis with it (`o < n_rows`, even
/// where the blocks divide the extent at `max`), and its [`RowGrid`] says how the
/// launch follows the count. Fails when the lowering did not mask the rows
/// along grid axis 0 (a layout that splits them otherwise).
#[allow(clippy::too_many_arguments)]
pub fn lower_group_rows(
    p: &Program,
    ks: &[&Kernel],
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    choice: Option<GemmChoice>,
    rows: Option<RowHint>,
) -> Result<Option<(TileLaunch, Option<RowGrid>)>> {
    let Some(&k) = ks.first() else {
        return Err(Error::internal("a launch of no kernels"));
    };
    if ks.iter().any(|k| k.domain.contains(&0)) {
        if ks.len() > 1 {
            return Err(Error::internal("a group of GEMMs with an empty kernel"));
        }
        return Ok(None);
    }
    let mut args: Vec<BufferId> = ks.iter().flat_map(|k| touched_buffers(k)).collect();
    args.sort();
    args.dedup();
    let mut params = HashMap::new();
    for &id in &args {
        params.insert(id, stage::param_name(id));
    }
    let index_dtype = if ks.iter().any(|k| index_dtype(p, k) == DType::I64) {
        DType::I64
    } else {
        DType::I32
    };
    let cx = stage::Cx {
        program: p,
        machine,
        params: &params,
        index_dtype,
        placements,
        sram_room,
        probe: ks.iter().find_map(|k| probe_buffer(p, k)),
        rows: row_cx(rows),
    };
    let mut b = builder::Builder::new();
    for &id in &args {
        b.reserve(&params[&id]);
    }
    b.reserve(stage::ROWS_PARAM);
    let members: Vec<(&Kernel, &ferrite_ir::loops::GemmInfo)> = ks
        .iter()
        .filter_map(|k| gemm::eligible(p, k).map(|g| (*k, g)))
        .collect();
    let lowered = if members.len() == ks.len() {
        gemm::lower(&cx, &members, &mut b, choice)?
    } else if ks.len() == 1 {
        let (grid, note) = kernel::lower(&cx, k, &mut b)?;
        gemm::Lowered {
            grid,
            note,
            staged: Vec::new(),
            split: None,
        }
    } else {
        return Err(Error::internal("a group of kernels that are not all GEMMs"));
    };
    let gemm::Lowered {
        grid,
        note,
        staged,
        split,
    } = lowered;
    let name = kernel_name(&k.name);
    let (staging, scratch) = match split {
        Some((before, scratch)) => (before, Some(scratch)),
        None if staged.is_empty() => (Vec::new(), None),
        None => (
            vec![staging::staging_launch(p, &name, &staged, machine)?],
            None,
        ),
    };
    let mut header = vec![if ks.len() == 1 {
        format!("{name}: lowered from the loop-IR kernel")
    } else {
        format!(
            "{name}: lowered from the {} loop-IR kernels {}, which share their lhs",
            ks.len(),
            ks.iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }];
    for k in ks {
        for line in p.display_kernel(k).to_string().lines() {
            header.push(format!("  {line}"));
        }
    }
    header.push(format!(
        "grid [{}, {}, {}]: {note}",
        grid[0], grid[1], grid[2]
    ));
    let mut sig: Vec<(String, DType)> = args
        .iter()
        .map(|&id| {
            let d = p.buffer(id).map_or(DType::F32, |b| b.ty.dtype);
            (params[&id].clone(), d)
        })
        .collect();
    let mut bound: Vec<Bound> = args
        .iter()
        .map(|&id| {
            if staged.contains(&id) {
                Bound::Copy(id)
            } else {
                Bound::Buffer(id)
            }
        })
        .collect();
    if let Some(s) = &scratch {
        sig.push((split::PARTIAL.to_string(), s.dtype));
        bound.push(Bound::Scratch);
    }
    let mut tile_kernel = b.finish(header, &name, &sig);
    let row_grid = match &cx.rows {
        None => None,
        Some(r) => {
            let grid_of = r.grid.get().filter(|_| !r.conflict.get());
            let Some((per_row, block)) = grid_of else {
                return Err(Error::unsupported(format!(
                    "kernel {name}: its rows are not masked along grid axis 0 alone"
                )));
            };
            tile_kernel.params.push(tile::Param {
                name: stage::ROWS_PARAM.to_string(),
                ty: tile::ParamType::Scalar(index_dtype),
                span: tile::Span::default(),
            });
            Some(RowGrid { per_row, block })
        }
    };
    let text = tile::print_located(&mut tile_kernel);
    let file = format!("{name}.tile");
    let mut kernel = tile::check(&tile_kernel).map_err(|e| {
        Error::internal(format!(
            "the lowered kernel `{name}` does not check: {}\n{text}",
            e.to_diagnostic(&file, &text)
        ))
    })?;
    kernel.locate(&file, &text);
    Ok(Some((
        TileLaunch {
            name,
            text,
            kernel,
            grid,
            params: bound,
            staging,
            scratch,
        },
        row_grid,
    )))
}

/// The choices of a GEMM kernel that fit, fastest first by the cost model
/// (the first is what [`lower_kernel`] picks without a choice); empty for a
/// kernel that does not run on the dot engine.
pub fn gemm_choices(
    p: &Program,
    k: &Kernel,
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
) -> Result<Vec<GemmChoice>> {
    group_choices(p, &[k], machine, placements, sram_room)
}

/// The choices of a group of GEMM kernels ([`lhs_groups`]) as one launch that fit,
/// fastest first by the cost model; empty when none fits or some member does
/// not run on the dot engine.
pub fn group_choices(
    p: &Program,
    ks: &[&Kernel],
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
) -> Result<Vec<GemmChoice>> {
    group_choices_rows(p, ks, machine, placements, sram_room, None)
}

/// As [`group_choices`], for row kernels with their blocks chosen for a row
/// count (see [`lower_group_rows`]).
pub fn group_choices_rows(
    p: &Program,
    ks: &[&Kernel],
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    rows: Option<RowHint>,
) -> Result<Vec<GemmChoice>> {
    let mut members = Vec::with_capacity(ks.len());
    for &k in ks {
        match gemm::eligible(p, k) {
            Some(g) if !k.domain.contains(&0) => members.push((k, g)),
            _ => return Ok(Vec::new()),
        }
    }
    let Some(&(k, _)) = members.first() else {
        return Ok(Vec::new());
    };
    let params = HashMap::new();
    let cx = stage::Cx {
        program: p,
        machine,
        params: &params,
        index_dtype: index_dtype(p, k),
        placements,
        sram_room,
        probe: probe_buffer(p, k),
        rows: row_cx(rows),
    };
    let need = gemm::need_group(&cx, &members)?;
    Ok(blocks::gemm_ranked(machine, &need)
        .into_iter()
        .map(|plan| plan.choice)
        .collect())
}

/// A valid kernel name: the loop IR's names are identifiers already, but a name
/// from elsewhere is made one.
pub(super) fn kernel_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        s.insert(0, 'k');
    }
    s
}

/// Every buffer a kernel loads from or stores to, in id order.
/// A buffer that `k` stores to and that has elements: a load from its first element is
/// in bounds, so a probe through it fails exactly where its offset is -1.
fn probe_buffer(p: &Program, k: &Kernel) -> Option<BufferId> {
    k.stages.iter().find_map(|stage| match stage {
        Stage::Store { stores, .. } => stores
            .iter()
            .map(|s| s.buffer)
            .find(|b| p.buffers.get(b.index()).is_some_and(|b| b.ty.numel() > 0)),
        _ => None,
    })
}

fn touched_buffers(k: &Kernel) -> Vec<BufferId> {
    let mut out = Vec::new();
    for stage in &k.stages {
        for node in &stage.body().nodes {
            if let ExprOp::Load(l) = &node.op {
                out.push(l.buffer);
            }
        }
        if let Stage::Store { stores, .. } = stage {
            out.extend(stores.iter().map(|s| s.buffer));
        }
    }
    if let Some(g) = &k.gemm {
        out.push(g.lhs.buffer);
        out.push(g.rhs.buffer);
    }
    out.sort();
    out.dedup();
    out
}

/// i32 offsets when every buffer, domain and index expression of the kernel
/// stays well inside 31 bits; i64 otherwise.
fn index_dtype(p: &Program, k: &Kernel) -> DType {
    let mut biggest: i128 = stage::points(&k.domain) as i128;
    for id in touched_buffers(k) {
        if let Some(b) = p.buffer(id) {
            biggest = biggest.max(b.ty.numel() as i128);
        }
    }
    for stage in &k.stages {
        let ext = stage.extents(&k.domain);
        biggest = biggest.max(stage::points(stage.domain()) as i128);
        let mut exprs = Vec::new();
        for node in &stage.body().nodes {
            match &node.op {
                ExprOp::Load(l) => {
                    exprs.push(&l.index);
                    exprs.extend(l.guard.iter().map(|g| &g.expr));
                }
                ExprOp::Index(e) => exprs.push(e),
                ExprOp::CheckedIndex { guard, .. } => exprs.extend(guard.iter().map(|g| &g.expr)),
                _ => {}
            }
        }
        if let Stage::Store { stores, .. } = stage {
            exprs.extend(stores.iter().map(|s| &s.index));
        }
        for e in exprs {
            biggest = biggest.max(frame::magnitude(e, &ext).unwrap_or(i128::MAX));
        }
    }
    if biggest < I32_OFFSETS {
        DType::I32
    } else {
        DType::I64
    }
}

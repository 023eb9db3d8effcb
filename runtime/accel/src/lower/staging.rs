//! Staging launches: copies of LPDDR buffers into SRAM, made right before the
//! kernel that reads them many times.
//!
//! The SRAM read cache fills within one launch, and the simulator (like a wave
//! of programs on the chip) charges each line's LPDDR read to the first program
//! that touches it. A GEMM's first program of each row and column of blocks
//! would then fetch whole operand panels at its 1/PEs share of LPDDR while the
//! other PEs wait on nothing. A staging launch reads each staged buffer once,
//! in equal parts on every PE, and writes it to an SRAM copy that the GEMM
//! reads instead: the operands cross LPDDR at the whole chip's bandwidth.
//!
//! The copy kernel takes the sources, then their copies, as parameters: program
//! `p` copies elements `[p * C, (p + 1) * C)` of each source, `T` at a time.

use super::blocks::{next_pow2, staging_programs};
use super::builder::{add, call, cast, int, lt, mul, param, program_id, Builder, E};
use super::stage::param_name;
use super::{Bound, TileLaunch};
use crate::error::{Error, Result};
use crate::sim::Machine;
use crate::tile::{self, ast::Builtin};
use ferrite_ir::loops::{BufferId, Program};
use ferrite_ir::DType;

/// Elements one copy moves at a time.
const COPY_TILE: usize = 16384;

/// The parameter of the SRAM copy of `id` in a staging kernel.
pub(super) fn copy_name(id: BufferId) -> String {
    format!("staged_{id}")
}

/// The staging launch of kernel `kernel` for `sources`.
pub(super) fn staging_launch(
    p: &Program,
    kernel: &str,
    sources: &[BufferId],
    machine: &Machine,
) -> Result<TileLaunch> {
    let programs = staging_programs(machine);
    let mut b = Builder::new();
    let mut sig = Vec::new();
    let mut dsts = Vec::new();
    for &id in sources {
        let d = p
            .buffer(id)
            .map(|buf| buf.ty.dtype)
            .ok_or_else(|| Error::internal(format!("staged buffer {id}")))?;
        b.reserve(&param_name(id));
        sig.push((param_name(id), d));
        dsts.push((copy_name(id), d));
    }
    for (n, _) in &dsts {
        b.reserve(n);
    }
    let mut header = vec![format!(
        "{kernel}_stage: copies {} from LPDDR to SRAM for {kernel}, in equal parts on \
         {programs} programs",
        sources
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    )];
    for &id in sources {
        let n = p.buffer(id).map_or(0, |buf| buf.ty.numel());
        // Each program's part, a whole number of copy tiles.
        let tile = next_pow2(n.div_ceil(programs)).min(COPY_TILE);
        let part = n.div_ceil(programs).div_ceil(tile) * tile;
        header.push(format!(
            "  {id}: {n} elements, {part} per program, {tile} at a time"
        ));
        let wide = (part as u128) * (programs as u128) >= 1 << 30;
        let index = |e: E| if wide { cast(e, DType::I64) } else { e };
        let base = b.bind("base", mul(index(program_id(0)), int(part as i64)));
        let lanes = |b: &mut Builder, start: E| {
            let ar = call(Builtin::Arange, vec![int(0), int(tile as i64)]);
            b.bind("o", add(start, index(ar)))
        };
        let copy = |b: &mut Builder, o: E| {
            let mask = b.bind("on", lt(o.clone(), int(n as i64)));
            let src = add(param(&param_name(id)), o.clone());
            let value = call(Builtin::Load, vec![src, mask.clone()]);
            b.stmt(call(
                Builtin::Store,
                vec![add(param(&copy_name(id)), o), value, mask],
            ));
        };
        if part > tile {
            let c = b.open_loop("c", int(0), int(part as i64), int(tile as i64));
            let o = lanes(&mut b, add(base, c));
            copy(&mut b, o);
            b.close_loop();
        } else {
            let o = lanes(&mut b, base);
            copy(&mut b, o);
        }
    }
    sig.extend(dsts);
    let name = format!("{kernel}_stage");
    let mut tile_kernel = b.finish(header, &name, &sig);
    let text = tile::print_located(&mut tile_kernel);
    let file = format!("{name}.tile");
    let mut checked = tile::check(&tile_kernel).map_err(|e| {
        Error::internal(format!(
            "the staging kernel `{name}` does not check: {}\n{text}",
            e.to_diagnostic(&file, &text)
        ))
    })?;
    checked.locate(&file, &text);
    Ok(TileLaunch {
        name,
        text,
        kernel: checked,
        grid: [programs, 1, 1],
        params: sources
            .iter()
            .map(|&id| Bound::Buffer(id))
            .chain(sources.iter().map(|&id| Bound::Copy(id)))
            .collect(),
        staging: Vec::new(),
        scratch: None,
    })
}

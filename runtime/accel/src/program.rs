//! A whole loop-IR program compiled for the simulated accelerator: its tile
//! kernels, where each buffer lives, and running it on a [`Device`].
//!
//! Placement follows the machine's memory hierarchy. Graph inputs and outputs
//! belong to the caller and live in LPDDR. Intermediates live only from the
//! kernel that writes them to the last kernel that reads them, and are placed in
//! on-chip SRAM when they fit next to the intermediates live at the same time,
//! as a memory plan's arena would be (greedily, in kernel order); otherwise in
//! LPDDR. A run allocates each intermediate right before its writer and frees it
//! right after its last reader, so SRAM is reused as lifetimes end.
//! [`Intermediates::Lpddr`] puts every intermediate in LPDDR instead, as an eager
//! framework that materializes every tensor in device memory would.
//!
//! ```
//! use ferrite_ir::{interpret, parse, DType, Tensor, TensorType};
//! use ferrite_passes::decompose::decompose;
//! use ferrite_passes::schedule::{schedule, ScheduleOptions};
//! use ferrite_accel::{program::SimProgram, sim::Machine};
//! let g = parse("g.fg", "graph g(x: f32[4, 100]) {\n  y = softmax(x, axis=-1)\n  return y\n}\n")
//!     .unwrap();
//! let program = schedule(&decompose(&g).unwrap(), &ScheduleOptions::default())
//!     .unwrap()
//!     .program;
//! let compiled = SimProgram::compile(&program, &Machine::mtia2i()).unwrap();
//! let x = Tensor::random(&TensorType::new(DType::F32, vec![4, 100]).unwrap(), 1);
//! let (outputs, report) = compiled.run(&[x.clone()]).unwrap();
//! outputs[0].check_close(&interpret(&g, &[x]).unwrap()[0], 1e-5, 1e-7).unwrap();
//! assert_eq!(report.launches.len(), 1);
//! // Rows of 100 in one block of 100 lanes: no padding lanes, so no mask.
//! assert!(compiled.kernels_text().contains("acc0 = max(x, axis=1)"));
//! ```

use super::lower::{
    group_choices, group_choices_rows, lhs_groups, lower_group, lower_group_rows, row_elements,
    Bound, RowGrid, RowHint, TileLaunch,
};
use super::sim::{self, Device, DeviceArg, DeviceReport, Machine, Placement};
use super::tune::{tune_kernel, KernelTuning, TuneOptions};
use crate::error::{Error, Result};
use ferrite_ir::loops::{BufferId, BufferKind, Liveness, Program, Rows};
use ferrite_ir::{Tensor, TensorType};
use std::fmt::Write;

/// Where a compiled program keeps its intermediates.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Intermediates {
    /// In on-chip SRAM when they fit beside the others live at the time (the default).
    #[default]
    SramWhenFits,
    /// Always in LPDDR, as an eager framework keeps every tensor.
    Lpddr,
}

/// Where one buffer of the program lives and when.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferPlan {
    /// The loop-IR buffer.
    pub id: BufferId,
    /// Its name on the device (`buf3 h`).
    pub device_name: String,
    /// Its type.
    pub ty: TensorType,
    /// Input, output or intermediate.
    pub kind: BufferKind,
    /// The memory it is placed in.
    pub placement: Placement,
    /// For an intermediate: the kernel (index into the program's kernels) that
    /// writes it and the last one that reads it.
    pub live: Option<(usize, usize)>,
}

/// A loop-IR program lowered to tile kernels, ready to run on the simulator.
#[derive(Clone, Debug)]
pub struct SimProgram {
    name: String,
    machine: Machine,
    buffers: Vec<BufferPlan>,
    inputs: Vec<BufferId>,
    outputs: Vec<BufferId>,
    /// Per loop-IR kernel, in order: its tile kernel, or `None` when it has no work
    /// or runs in an earlier kernel's launch (see `merged`).
    launches: Vec<Option<TileLaunch>>,
    /// Per loop-IR kernel: the kernel whose launch computes it, when that is an
    /// earlier one (GEMMs sharing their lhs run as one launch: `lhs_groups`).
    merged: Vec<Option<usize>>,
    /// The constant tensors of the program's constant buffers, shared with the graph.
    constants: Vec<ferrite_ir::Constant>,
    /// For a row program ([`SimProgram::compile_rows`]): its row axes.
    rows: Option<Rows>,
    /// Per loop-IR kernel of a row program that has rows: its variants, each with
    /// blocks chosen for a row count, by that count ascending (the first for 1
    /// row); a run at `r` rows launches the last variant chosen for at most `r`.
    /// The last is [`SimProgram::launches`]'s.
    row_variants: Vec<Vec<RowVariant>>,
}

/// A row kernel lowered with its blocks chosen for `from` rows.
#[derive(Clone, Debug)]
struct RowVariant {
    from: usize,
    launch: TileLaunch,
    grid: RowGrid,
}

impl SimProgram {
    /// Lowers every kernel of `program` for `machine`, intermediates in SRAM
    /// where they fit.
    pub fn compile(program: &Program, machine: &Machine) -> Result<SimProgram> {
        SimProgram::compile_with(program, machine, Intermediates::default())
    }

    /// Lowers every kernel of `program` for `machine`, placing intermediates as
    /// `intermediates` says.
    pub fn compile_with(
        program: &Program,
        machine: &Machine,
        intermediates: Intermediates,
    ) -> Result<SimProgram> {
        Ok(SimProgram::compile_tuned(program, machine, intermediates, None)?.0)
    }

    /// Lowers every kernel of `program` for `machine`, placing intermediates as
    /// `intermediates` says; with `tune`, each GEMM kernel's choice is the
    /// autotuner's ([`crate::tune`]), whose report of each kernel is returned.
    /// Consecutive independent GEMMs that share their left operand run as one
    /// launch (see [`SimProgram::compile_grouped`]).
    pub fn compile_tuned(
        program: &Program,
        machine: &Machine,
        intermediates: Intermediates,
        tune: Option<&TuneOptions>,
    ) -> Result<(SimProgram, Vec<KernelTuning>)> {
        SimProgram::compile_grouped(program, machine, intermediates, tune, true)
    }

    /// As [`SimProgram::compile_tuned`]; with `group`, runs of consecutive
    /// independent GEMM kernels that read the same left operand the same way and
    /// have the same shape (`lower::lhs_groups`: a transformer's q, k and v
    /// projections) become one launch whose programs copy each block of that
    /// operand once for all of them; without, every kernel is its own launch
    /// (the unfused baseline). A group is lowered with the cost model's choice
    /// (the autotuner tunes single GEMM kernels), and falls back to one launch
    /// per kernel when no choice of blocks fits local memory.
    pub fn compile_grouped(
        program: &Program,
        machine: &Machine,
        intermediates: Intermediates,
        tune: Option<&TuneOptions>,
        group: bool,
    ) -> Result<(SimProgram, Vec<KernelTuning>)> {
        SimProgram::compile_any(program, machine, intermediates, tune, group, None)
    }

    /// Lowers a row program (`program` at its most rows, with the row axes `rows`
    /// proved by [`Rows::check`]) once, to run at any row count
    /// ([`SimProgram::run_rows`]): each row kernel takes the points of its row
    /// axis at the launch's count as a scalar argument (`n_rows`), masks its row
    /// axis with it, and its grid is computed at the launch from the count; every
    /// other kernel is static. A GEMM never stages a row operand in SRAM (its
    /// staging copy has a static extent), and nothing is autotuned. Placements
    /// are planned again at each run from the sizes at its count. Fails when a
    /// kernel's rows are not masked along its grid's first axis.
    pub fn compile_rows(
        program: &Program,
        machine: &Machine,
        rows: &Rows,
        group: bool,
    ) -> Result<SimProgram> {
        rows.check(program)
            .map_err(|e| Error::InvalidProgram(format!("rows {}: {e}", rows.name)))?;
        let (p, _) = SimProgram::compile_any(
            program,
            machine,
            Intermediates::default(),
            None,
            group,
            Some(rows),
        )?;
        Ok(p)
    }

    fn compile_any(
        program: &Program,
        machine: &Machine,
        intermediates: Intermediates,
        tune: Option<&TuneOptions>,
        group: bool,
        rows: Option<&Rows>,
    ) -> Result<(SimProgram, Vec<KernelTuning>)> {
        program.verify().map_err(|e| {
            Error::InvalidProgram(format!("program `{}` is invalid: {e}", program.name))
        })?;
        if !program.donated.is_empty() {
            // The simulator's launches copy their outputs out of SRAM; an output updated
            // in place of an input is the CPU target's (and the loop-IR evaluator's).
            return Err(Error::InvalidProgram(format!(
                "program `{}` has donated buffers, which the simulator does not take",
                program.name
            )));
        }
        let n = program.kernels.len();
        // Groups are decided from the program alone; the members' outputs then
        // live from the group's first kernel, where its launch runs.
        let mut ranges = if group {
            lhs_groups(program)
        } else {
            (0..n).map(|i| i..i + 1).collect()
        };
        let mut merged: Vec<Option<usize>> = vec![None; n];
        let mut buffers;
        loop {
            for r in &ranges {
                for i in r.clone().skip(1) {
                    merged[i] = Some(r.start);
                }
            }
            buffers = plan_buffers(program, machine, intermediates, &merged);
            let placements: Vec<Placement> = buffers.iter().map(|b| b.placement).collect();
            // A group none of whose choices fits is split back into its kernels.
            let unfit = ranges.iter().position(|r| {
                r.len() > 1 && {
                    let ks: Vec<_> = program.kernels[r.clone()].iter().collect();
                    let room = sram_room(&buffers, machine, r.start);
                    group_choices(program, &ks, machine, &placements, room)
                        .map_or(true, |c| c.is_empty())
                }
            });
            let Some(u) = unfit else { break };
            let r = ranges.remove(u);
            for (j, i) in r.enumerate() {
                merged[i] = None;
                ranges.insert(u + j, i..i + 1);
            }
        }
        let placements: Vec<Placement> = buffers.iter().map(|b| b.placement).collect();
        let mut launches: Vec<Option<TileLaunch>> = (0..n).map(|_| None).collect();
        let mut row_variants: Vec<Vec<RowVariant>> = vec![Vec::new(); n];
        let mut tunings = Vec::new();
        for r in &ranges {
            let ki = r.start;
            let k = &program.kernels[ki];
            let room = sram_room(&buffers, machine, ki);
            let context = |e: Error| e.context(format_args!("kernel {}", k.name));
            let ks: Vec<_> = program.kernels[r.clone()].iter().collect();
            let row_axis = rows.and_then(|rs| rs.kernels.get(ki).copied().flatten());
            if let (Some(rs), Some(axis)) = (rows, row_axis) {
                let variants = lower_row_variants(program, &ks, machine, &buffers, rs, axis.axis)
                    .map_err(context)?;
                launches[ki] = variants.last().map(|v| v.launch.clone());
                row_variants[ki] = variants;
                continue;
            }
            let mut choice = None;
            if let (Some(opts), 1, None) = (tune, r.len(), rows) {
                if let Some(t) =
                    tune_kernel(program, k, machine, &placements, room, opts).map_err(context)?
                {
                    choice = Some(t.best);
                    tunings.push(t);
                }
            }
            launches[ki] =
                lower_group(program, &ks, machine, &placements, room, choice).map_err(context)?;
        }
        let compiled = SimProgram {
            name: program.name.clone(),
            machine: machine.clone(),
            buffers,
            inputs: program.inputs.clone(),
            outputs: program.outputs.clone(),
            launches,
            merged,
            constants: program.constants.clone(),
            rows: rows.cloned(),
            row_variants,
        };
        Ok((compiled, tunings))
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The machine it was compiled for.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The tile kernels, in launch order (kernels with no work are left out;
    /// a kernel's staging launch comes right before it).
    pub fn launches(&self) -> impl Iterator<Item = &TileLaunch> {
        self.launches
            .iter()
            .flatten()
            .flat_map(|l| l.staging.iter().chain([l]))
    }

    /// For loop-IR kernel `ki`: the earlier kernel whose launch computes it too
    /// (GEMMs sharing their left operand run as one launch, named after the
    /// first), or `None` when it has a launch of its own (or no work).
    pub fn merged_into(&self, ki: usize) -> Option<usize> {
        self.merged.get(ki).copied().flatten()
    }

    /// Where every buffer lives.
    pub fn buffers(&self) -> &[BufferPlan] {
        &self.buffers
    }

    /// Every lowered kernel as tile-language text, each preceded by its launch
    /// and the buffers bound to it, after a table of buffer placements: the text
    /// of `ferrite compile --target sim --dump`.
    pub fn kernels_text(&self) -> String {
        let mut out = format!(
            "# program {} for {}: {} tile kernel{}\n#\n# buffers:\n",
            self.name,
            self.machine.name,
            self.launches().count(),
            if self.launches().count() == 1 {
                ""
            } else {
                "s"
            }
        );
        for b in &self.buffers {
            let role = match b.kind {
                BufferKind::Input(i) => format!("input {i}"),
                BufferKind::Constant(i) => format!("constant {i}"),
                BufferKind::Output(i) => format!("output {i}"),
                BufferKind::Intermediate => match b.live {
                    Some((w, r)) => format!("intermediate, live k{w}..k{r}"),
                    None => "intermediate, never written".to_string(),
                },
                BufferKind::Scratch => "scratch".to_string(),
            };
            let _ = writeln!(
                out,
                "#   {:<6} {:<20} {:<8} {role}",
                b.id.to_string(),
                b.ty.to_string(),
                placement_name(b.placement)
            );
        }
        for l in self.launches() {
            let args: Vec<String> = l
                .params
                .iter()
                .map(|b| match b {
                    Bound::Buffer(a) => a.to_string(),
                    Bound::Copy(a) => format!("{a} staged in SRAM"),
                    Bound::Scratch => "partial sums in SRAM".to_string(),
                })
                .collect();
            let _ = write!(
                out,
                "\n# launch {} grid [{}, {}, {}] ({})\n{}",
                l.name,
                l.grid[0],
                l.grid[1],
                l.grid[2],
                args.join(", "),
                l.text
            );
        }
        out
    }

    /// Runs the program on a fresh device: one tensor per graph input (in
    /// order, of the input buffers' types) in, one per output out, and the
    /// simulator's report of every launch.
    pub fn run(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, DeviceReport)> {
        self.run_at(None, inputs)
    }

    /// The row axes of a row program ([`SimProgram::compile_rows`]).
    pub fn rows(&self) -> Option<&Rows> {
        self.rows.as_ref()
    }

    /// Of a row program: how many launches have rows, and how many variants
    /// (blocks chosen for different row counts) they have in all.
    pub fn row_variant_counts(&self) -> (usize, usize) {
        let with: Vec<usize> = self
            .row_variants
            .iter()
            .map(Vec::len)
            .filter(|&n| n > 0)
            .collect();
        (with.len(), with.iter().sum())
    }

    /// Runs a row program ([`SimProgram::compile_rows`]) at `rows` rows (1 to its
    /// most) on a fresh device: the inputs and outputs are its buffers at that
    /// count (a row input of `[1, max, 256]` is given as `[1, rows, 256]`, or
    /// any shape of as many elements, which it is taken as).
    pub fn run_rows(&self, rows: usize, inputs: &[Tensor]) -> Result<(Vec<Tensor>, DeviceReport)> {
        if self.rows.is_none() {
            return Err(Error::Input(format!(
                "program `{}` is not a row program",
                self.name
            )));
        }
        self.run_at(Some(rows), inputs)
    }

    fn run_at(
        &self,
        rows: Option<usize>,
        inputs: &[Tensor],
    ) -> Result<(Vec<Tensor>, DeviceReport)> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::Input(format!(
                "program `{}` takes {} input{}, got {}",
                self.name,
                self.inputs.len(),
                if self.inputs.len() == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
        let mut dev = Device::new(self.machine.clone());
        let mut ins = Vec::with_capacity(inputs.len());
        for (i, (&b, t)) in self.inputs.iter().zip(inputs).enumerate() {
            let plan = &self.buffers[b.index()];
            let ty = self.type_at(plan, rows)?;
            let t = match rows {
                // A row input is taken as the buffer at its count, whatever its shape.
                Some(_) if t.ty.dtype == ty.dtype && t.ty.numel() == ty.numel() => {
                    let mut t = t.clone();
                    t.ty = ty.clone();
                    t
                }
                _ if t.ty == ty => t.clone(),
                _ => {
                    return Err(Error::Input(format!(
                        "input {i} has type {} but the program expects {ty}",
                        t.ty
                    )))
                }
            };
            ins.push(dev.upload(&plan.device_name, &t, plan.placement)?);
        }
        // Constants are in device memory when the program is loaded, before any launch.
        let constants = self.upload_constants(&mut dev, "")?;
        let mut outs = Vec::with_capacity(self.outputs.len());
        for &b in &self.outputs {
            let plan = &self.buffers[b.index()];
            let ty = self.type_at(plan, rows)?;
            outs.push(dev.alloc(&plan.device_name, &ty, plan.placement)?);
        }
        self.launch_all(&mut dev, rows, &ins, &outs, &constants, "")?;
        let mut outputs = Vec::with_capacity(outs.len());
        for id in outs {
            outputs.push(dev.read(id)?);
        }
        Ok((outputs, dev.report().clone()))
    }

    /// The type of buffer `plan` at `rows` rows (its own type without a count).
    fn type_at(&self, plan: &BufferPlan, rows: Option<usize>) -> Result<TensorType> {
        let mut ty = plan.ty.clone();
        if let (Some(r), Some(rs)) = (rows, &self.rows) {
            if r == 0 || r > rs.max {
                return Err(Error::Input(format!(
                    "program `{}` runs 1 to {} rows, not {r}",
                    self.name, rs.max
                )));
            }
            if let Some(a) = rs.buffer(plan.id) {
                ty.shape[a.axis] = a.factor * r;
            }
        }
        Ok(ty)
    }

    /// Runs a row program ([`SimProgram::compile_rows`]) at `rows` rows on `dev`,
    /// whose buffers `inputs` and `outputs` (one per graph input and output, in
    /// order, each with as many elements as the program's buffer at that count)
    /// the caller made and keeps. The program's constants and intermediates live
    /// on `dev` during the run only, named after `prefix`; intermediates go to
    /// SRAM where they fit beside what `dev` holds there already.
    pub fn run_rows_on(
        &self,
        dev: &mut Device,
        rows: usize,
        inputs: &[sim::BufferId],
        outputs: &[sim::BufferId],
        prefix: &str,
    ) -> Result<()> {
        if self.rows.is_none() {
            return Err(Error::Input(format!(
                "program `{}` is not a row program",
                self.name
            )));
        }
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Error::Input(format!(
                "program `{}` takes {} inputs and {} outputs, got {} and {}",
                self.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let constants = self.upload_constants(dev, prefix)?;
        self.launch_all(dev, Some(rows), inputs, outputs, &constants, prefix)?;
        for (_, id) in constants {
            dev.free(id)?;
        }
        Ok(())
    }

    /// Uploads the program's constants to `dev`, named after `prefix`: their
    /// buffers' indices and device buffers.
    fn upload_constants(
        &self,
        dev: &mut Device,
        prefix: &str,
    ) -> Result<Vec<(usize, sim::BufferId)>> {
        let mut made = Vec::new();
        for plan in &self.buffers {
            if let BufferKind::Constant(c) = plan.kind {
                let constant = self.constants.get(c).ok_or_else(|| {
                    Error::internal(format!("{} holds constant {c}, which is missing", plan.id))
                })?;
                let name = format!("{prefix}{}", plan.device_name);
                let id = dev.upload(&name, constant.tensor(), plan.placement)?;
                made.push((plan.id.index(), id));
            }
        }
        Ok(made)
    }

    /// Where every buffer lives in a run at `rows` rows: the compile's placements
    /// for a static run; for a row count, the intermediates placed again from
    /// their sizes at the count (as a static compile at that count places them),
    /// in the SRAM left beside `held` bytes and the largest staging copy.
    fn placements_at(&self, rows: Option<usize>, held: u64) -> Result<Vec<Placement>> {
        let Some(r) = rows else {
            return Ok(self.buffers.iter().map(|b| b.placement).collect());
        };
        // The SRAM a launch takes beside the buffers: its operands' copies and
        // its scratch (a split GEMM's partial sums).
        let staging: u64 = self
            .launches()
            .map(|l| {
                l.copies()
                    .iter()
                    .map(|a| self.buffers[a.index()].ty.size_bytes() as u64)
                    .sum::<u64>()
                    + l.scratch.as_ref().map_or(0, |t| t.size_bytes() as u64)
            })
            .max()
            .unwrap_or(0);
        let room = self
            .machine
            .sram_bytes
            .saturating_sub(held)
            .saturating_sub(staging);
        let mut bytes = Vec::with_capacity(self.buffers.len());
        for b in &self.buffers {
            bytes.push(self.type_at(b, Some(r))?.size_bytes() as u64);
        }
        let live: Vec<Option<(usize, usize)>> = self.buffers.iter().map(|b| b.live).collect();
        Ok(greedy_sram(&live, &bytes, room))
    }

    /// Runs every launch on `dev` with the graph's inputs and outputs at `inputs`
    /// and `outputs` (see [`SimProgram::run_rows_on`]) and its constants at
    /// `constants`; the intermediates are made and freed here.
    fn launch_all(
        &self,
        dev: &mut Device,
        rows: Option<usize>,
        inputs: &[sim::BufferId],
        outputs: &[sim::BufferId],
        constants: &[(usize, sim::BufferId)],
        prefix: &str,
    ) -> Result<()> {
        let held = dev.used_bytes(Placement::Sram);
        let placements = self.placements_at(rows, held)?;
        let name = |plan: &BufferPlan| format!("{prefix}{}", plan.device_name);
        let mut ids: Vec<Option<sim::BufferId>> = vec![None; self.buffers.len()];
        for (&b, &id) in self.inputs.iter().zip(inputs) {
            ids[b.index()] = Some(id);
        }
        for (&b, &id) in self.outputs.iter().zip(outputs) {
            ids[b.index()] = Some(id);
        }
        for &(i, id) in constants {
            ids[i] = Some(id);
        }
        for (ki, launch) in self.launches.iter().enumerate() {
            // Intermediates come to life right before the kernel that writes them.
            for plan in &self.buffers {
                if plan.live.is_some_and(|(w, _)| w == ki) {
                    let ty = self.type_at(plan, rows)?;
                    ids[plan.id.index()] =
                        Some(dev.alloc(&name(plan), &ty, placements[plan.id.index()])?);
                }
            }
            // A row kernel's variant for this count, with its grid and row count.
            let variant = rows.and_then(|r| {
                let v = pick_variant(&self.row_variants[ki], r, self.machine.pes())?;
                Some((&v.launch, v.grid.grid(v.launch.grid, r), v.grid.n_rows(r)))
            });
            let launch = match variant {
                Some((l, _, _)) => Some(l),
                None => launch.as_ref(),
            };
            if let Some(l) = launch {
                run_launch(dev, l, variant.map(|(_, g, n)| (g, n)), &|a| {
                    let plan = &self.buffers[a.index()];
                    let id = ids[a.index()].ok_or_else(|| {
                        Error::internal(format!("kernel {}: buffer {a} is not allocated", l.name))
                    })?;
                    Ok((id, self.type_at(plan, rows)?, name(plan)))
                })?;
            }
            // ... and end right after the last kernel that reads them.
            for plan in &self.buffers {
                if plan.live.is_some_and(|(_, r)| r == ki) {
                    if let Some(id) = ids[plan.id.index()].take() {
                        dev.free(id)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs launch `l` on `dev`: its staging launches, then itself, with `buffer(id)`
/// the device buffer of the program's buffer `id` (with its type and device
/// name). The SRAM copies of staged buffers and the scratch buffer are
/// allocated before the first of these launches and freed after the last.
pub(crate) fn run_launch(
    dev: &mut Device,
    l: &TileLaunch,
    rows: Option<([usize; 3], usize)>,
    buffer: &dyn Fn(BufferId) -> Result<(sim::BufferId, TensorType, String)>,
) -> Result<()> {
    let mut copies = Vec::new();
    for a in l.copies() {
        let (_, ty, name) = buffer(a)?;
        copies.push((
            a,
            dev.alloc(&format!("{name} staged"), &ty, Placement::Sram)?,
        ));
    }
    let scratch = match &l.scratch {
        Some(ty) => Some(dev.alloc(&format!("{} partial sums", l.name), ty, Placement::Sram)?),
        None => None,
    };
    let mut ran = Ok(());
    for launch in l.staging.iter().chain([l]) {
        let mut args = Vec::with_capacity(launch.params.len() + 1);
        for b in &launch.params {
            args.push(DeviceArg::Buffer(match b {
                Bound::Buffer(a) => buffer(*a)?.0,
                Bound::Copy(a) => copies
                    .iter()
                    .find(|c| c.0 == *a)
                    .map(|c| c.1)
                    .ok_or_else(|| Error::internal(format!("{a} has no copy")))?,
                Bound::Scratch => {
                    scratch.ok_or_else(|| Error::internal(format!("{} has no scratch", l.name)))?
                }
            }));
        }
        // A row kernel's own launch: the grid at the run's rows and its row count.
        let mut grid = launch.grid;
        if let (true, Some((g, n))) = (std::ptr::eq(launch, l), rows) {
            grid = g;
            args.push(DeviceArg::Int(n as i64));
        }
        ran = dev.launch(&launch.kernel, grid, &args).map(|_| ());
        if ran.is_err() {
            break;
        }
    }
    for (_, copy) in copies {
        dev.free(copy)?;
    }
    if let Some(s) = scratch {
        dev.free(s)?;
    }
    Ok(ran?)
}

fn placement_name(p: Placement) -> &'static str {
    match p {
        Placement::Lpddr => "LPDDR",
        Placement::Sram => "SRAM",
    }
}

/// The variant of a row kernel to launch at `rows` rows on `pes` PEs: of the
/// variants chosen for the power of two at most `rows` and the one above, the
/// one with fewer waves of programs times work per program (each program's
/// share of the kernel's work at the bound); the one below on a tie.
fn pick_variant(variants: &[RowVariant], rows: usize, pes: usize) -> Option<&RowVariant> {
    let below = variants.iter().rposition(|v| v.from <= rows)?;
    let cost = |v: &RowVariant| {
        let programs: usize = v.grid.grid(v.launch.grid, rows).iter().product();
        let at_max: usize = v.launch.grid.iter().product();
        // waves / programs at the bound, compared as a fraction.
        (programs.div_ceil(pes.max(1)) as u128, at_max.max(1) as u128)
    };
    let mut best = &variants[below];
    if let Some(above) = variants.get(below + 1) {
        let ((wb, pb), (wa, pa)) = (cost(best), cost(above));
        if wa * pb < wb * pa {
            best = above;
        }
    }
    Some(best)
}

/// The row counts a row kernel's variants are chosen for: the powers of two
/// below `max`, and `max`.
fn row_hints(max: usize) -> Vec<usize> {
    let mut hints: Vec<usize> = (0..usize::BITS)
        .map(|i| 1usize << i)
        .take_while(|&h| h < max)
        .collect();
    hints.push(max);
    hints
}

/// Lowers the row kernels `ks` (one launch; rows along `axis`) of row program
/// `p` once per row hint, each with the placements and SRAM room a static
/// compile at that count would see; variants equal to the one before are left
/// out. A row operand is never staged (the copy's extent is static).
fn lower_row_variants(
    p: &Program,
    ks: &[&ferrite_ir::loops::Kernel],
    machine: &Machine,
    buffers: &[BufferPlan],
    rows: &Rows,
    axis: usize,
) -> Result<Vec<RowVariant>> {
    let ki = ks
        .first()
        .and_then(|k| p.kernels.iter().position(|x| std::ptr::eq(x, *k)))
        .ok_or_else(|| Error::internal("a launch of no kernels"))?;
    let live: Vec<Option<(usize, usize)>> = buffers.iter().map(|b| b.live).collect();
    let elements = row_elements(p, rows);
    let mut out: Vec<RowVariant> = Vec::new();
    for hint in row_hints(rows.max) {
        let bytes: Vec<u64> = buffers
            .iter()
            .map(|b| {
                let n = match rows.buffer(b.id) {
                    Some(a) => b.ty.numel() / b.ty.shape[a.axis].max(1) * a.factor * hint,
                    None => b.ty.numel(),
                };
                (n * b.ty.dtype.size_bytes()) as u64
            })
            .collect();
        let placements = greedy_sram(&live, &bytes, machine.sram_bytes);
        let used: u64 = (0..buffers.len())
            .filter(|&i| placements[i] == Placement::Sram)
            .filter(|&i| live[i].is_none_or(|(w, r)| w <= ki && ki <= r))
            .map(|i| bytes[i])
            .sum();
        let room = machine.sram_bytes.saturating_sub(used);
        let row = Some(RowHint {
            max: rows.max,
            axis,
            hint,
            elements: &elements,
        });
        let mut choice = None;
        if let Some(g) = ks[0].gemm.as_ref() {
            if rows.buffer(g.lhs.buffer).is_some() {
                // The first choice that copies no row operand to SRAM first.
                let choices = group_choices_rows(p, ks, machine, &placements, room, row)?;
                choice = choices.into_iter().find(|c| !c.staged[0]);
            }
        }
        let Some((launch, grid)) =
            lower_group_rows(p, ks, machine, &placements, room, choice, row)?
        else {
            return Ok(Vec::new());
        };
        let Some(grid) = grid else {
            return Err(Error::internal("a row kernel lowered without its row grid"));
        };
        let staged = launch.copies().iter().any(|a| rows.buffer(*a).is_some());
        if staged {
            return Err(Error::unsupported(
                "a row operand staged in SRAM by a copy of static extent",
            ));
        }
        let same = |a: &TileLaunch, b: &TileLaunch| {
            a.text == b.text
                && a.staging
                    .iter()
                    .map(|s| &s.text)
                    .eq(b.staging.iter().map(|s| &s.text))
        };
        if out.last().is_some_and(|v| same(&v.launch, &launch)) {
            continue;
        }
        out.push(RowVariant {
            from: hint,
            launch,
            grid,
        });
    }
    Ok(out)
}

/// Bytes of SRAM not taken by the intermediates placed there that are live
/// while kernel `ki` runs.
fn sram_room(plans: &[BufferPlan], m: &Machine, ki: usize) -> u64 {
    let used: u64 = plans
        .iter()
        .filter(|b| b.placement == Placement::Sram)
        .filter(|b| b.live.is_none_or(|(w, r)| w <= ki && ki <= r))
        .map(|b| b.ty.size_bytes() as u64)
        .sum();
    m.sram_bytes.saturating_sub(used)
}

/// Places every buffer (see the module docs); `merged[i]` is the kernel whose
/// launch computes kernel `i`, when that is an earlier one.
fn plan_buffers(
    p: &Program,
    m: &Machine,
    intermediates: Intermediates,
    merged: &[Option<usize>],
) -> Vec<BufferPlan> {
    // Lifetimes of intermediates: first writer (its launch) to last reader.
    let live = Liveness::of(p);
    let launch_of = |k: usize| merged.get(k).copied().flatten().unwrap_or(k);
    let mut plans: Vec<BufferPlan> = p
        .buffers
        .iter()
        .map(|b| BufferPlan {
            id: b.id,
            device_name: format!("{} {}", b.id, b.name),
            ty: b.ty.clone(),
            kind: b.kind,
            placement: Placement::Lpddr,
            live: match b.kind {
                BufferKind::Intermediate => live
                    .get(b.id)
                    .map(|iv| (launch_of(iv.first), iv.last.max(launch_of(iv.first)))),
                _ => None,
            },
        })
        .collect();
    if intermediates == Intermediates::SramWhenFits {
        let live: Vec<Option<(usize, usize)>> = plans.iter().map(|b| b.live).collect();
        let bytes: Vec<u64> = plans.iter().map(|b| b.ty.size_bytes() as u64).collect();
        for (plan, placement) in plans
            .iter_mut()
            .zip(greedy_sram(&live, &bytes, m.sram_bytes))
        {
            plan.placement = placement;
        }
    }
    plans
}

/// Places intermediates (buffers with a lifetime `live`, of `bytes` each) greedily
/// in kernel order: one goes to SRAM when it fits in `room` beside the SRAM
/// intermediates still live when it is written; everything else is in LPDDR.
fn greedy_sram(live: &[Option<(usize, usize)>], bytes: &[u64], room: u64) -> Vec<Placement> {
    let mut out = vec![Placement::Lpddr; live.len()];
    let mut placed: Vec<(usize, u64)> = Vec::new(); // (last reader, bytes)
    let mut order: Vec<usize> = (0..live.len()).filter(|&i| live[i].is_some()).collect();
    order.sort_by_key(|&i| (live[i].map_or(0, |l| l.0), i));
    for i in order {
        let Some((w, r)) = live[i] else {
            continue;
        };
        placed.retain(|&(last, _)| last >= w);
        let used: u64 = placed.iter().map(|&(_, b)| b).sum();
        if used.saturating_add(bytes[i]) <= room {
            out[i] = Placement::Sram;
            placed.push((r, bytes[i]));
        }
    }
    out
}

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
//! // Rows of 100 in blocks of 128: the 28 padding lanes read -inf into the max.
//! assert!(compiled.kernels_text().contains("acc0 = max(where(mr, x, -inf), axis=1)"));
//! ```

use super::lower::{group_choices, lhs_groups, lower_group, Bound, TileLaunch};
use super::sim::{self, Device, DeviceArg, DeviceReport, Machine, Placement};
use super::tune::{tune_kernel, KernelTuning, TuneOptions};
use crate::error::{Error, Result};
use ferrite_ir::loops::{BufferId, BufferKind, Liveness, Program};
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
        let mut tunings = Vec::new();
        for r in &ranges {
            let ki = r.start;
            let k = &program.kernels[ki];
            let room = sram_room(&buffers, machine, ki);
            let context = |e: Error| e.context(format_args!("kernel {}", k.name));
            let mut choice = None;
            if let (Some(opts), 1) = (tune, r.len()) {
                if let Some(t) =
                    tune_kernel(program, k, machine, &placements, room, opts).map_err(context)?
                {
                    choice = Some(t.best);
                    tunings.push(t);
                }
            }
            let ks: Vec<_> = program.kernels[r.clone()].iter().collect();
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
        let mut ids: Vec<Option<sim::BufferId>> = vec![None; self.buffers.len()];
        for (i, (&b, t)) in self.inputs.iter().zip(inputs).enumerate() {
            let plan = &self.buffers[b.index()];
            if t.ty != plan.ty {
                return Err(Error::Input(format!(
                    "input {i} has type {} but the program expects {}",
                    t.ty, plan.ty
                )));
            }
            ids[b.index()] = Some(dev.upload(&plan.device_name, t, plan.placement)?);
        }
        // Constants are in device memory when the program is loaded, before any launch.
        for plan in &self.buffers {
            if let BufferKind::Constant(c) = plan.kind {
                let constant = self.constants.get(c).ok_or_else(|| {
                    Error::internal(format!("{} holds constant {c}, which is missing", plan.id))
                })?;
                ids[plan.id.index()] =
                    Some(dev.upload(&plan.device_name, constant.tensor(), plan.placement)?);
            }
        }
        for &b in &self.outputs {
            let plan = &self.buffers[b.index()];
            ids[b.index()] = Some(dev.alloc(&plan.device_name, &plan.ty, plan.placement)?);
        }
        for (ki, launch) in self.launches.iter().enumerate() {
            // Intermediates come to life right before the kernel that writes them.
            for plan in &self.buffers {
                if plan.live.is_some_and(|(w, _)| w == ki) {
                    ids[plan.id.index()] =
                        Some(dev.alloc(&plan.device_name, &plan.ty, plan.placement)?);
                }
            }
            if let Some(l) = launch {
                run_launch(&mut dev, l, &|a| {
                    let plan = &self.buffers[a.index()];
                    let id = ids[a.index()].ok_or_else(|| {
                        Error::internal(format!("kernel {}: buffer {a} is not allocated", l.name))
                    })?;
                    Ok((id, plan.ty.clone(), plan.device_name.clone()))
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
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for &b in &self.outputs {
            let id = ids[b.index()]
                .ok_or_else(|| Error::internal(format!("output buffer {b} is missing")))?;
            outputs.push(dev.read(id)?);
        }
        Ok((outputs, dev.report().clone()))
    }
}

/// Runs launch `l` on `dev`: its staging launches, then itself, with `buffer(id)`
/// the device buffer of the program's buffer `id` (with its type and device
/// name). The SRAM copies of staged buffers and the scratch buffer are
/// allocated before the first of these launches and freed after the last.
pub(crate) fn run_launch(
    dev: &mut Device,
    l: &TileLaunch,
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
        let mut args = Vec::with_capacity(launch.params.len());
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
        ran = dev.launch(&launch.kernel, launch.grid, &args).map(|_| ());
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
        // Greedy in kernel order: an intermediate goes to SRAM when it fits beside
        // the SRAM intermediates still live when it is written.
        let mut placed: Vec<(usize, u64)> = Vec::new(); // (last reader, bytes)
        let mut order: Vec<usize> = (0..plans.len())
            .filter(|&i| plans[i].live.is_some())
            .collect();
        order.sort_by_key(|&i| (plans[i].live.map_or(0, |l| l.0), i));
        for i in order {
            let Some((w, r)) = plans[i].live else {
                continue;
            };
            placed.retain(|&(last, _)| last >= w);
            let used: u64 = placed.iter().map(|&(_, b)| b).sum();
            let bytes = plans[i].ty.size_bytes() as u64;
            if used.saturating_add(bytes) <= m.sram_bytes {
                plans[i].placement = Placement::Sram;
                placed.push((r, bytes));
            }
        }
    }
    plans
}

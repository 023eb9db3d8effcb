//! Graphs with size symbols, compiled once and run at any binding.
//!
//! [`compile_dynamic`] takes a [`SymGraph`] (a `.fg` file with `x: f32[B, T, 256]`)
//! and gives a [`Dynamic`]: [`Dynamic::run`] reads the symbols' values from the
//! inputs' shapes (with [`Dynamic::run_with`], also from values given beside them,
//! for symbols no input carries), checks the graph's ranges and constraints, and
//! runs the graph at that binding.
//!
//! Two paths, and [`Dynamic::summary`] says which one a graph takes and why:
//!
//! - **One program for every binding**: a *row graph* (its symbols are leading axes
//!   that no op mixes, `SymGraph::rows`: MLPs, layer norms, the feed-forward half of a
//!   transformer, embedding lookups) on [`Target::Cpu`] is compiled once, at its most rows
//!   (the product of its row symbols' upper bounds), into a CPU row program whose kernels
//!   take the row count at each run (`CpuProgram::with_rows`, proved for every count by
//!   `ferrite_ir::loops::Rows`); its storage is sized by that bound. On [`Target::Loops`]
//!   the loop-IR evaluator runs the proved row program at each count
//!   (`RowProgram::at`). On [`Target::Sim`] the same proved program is lowered once to
//!   tile kernels that take the row count as an argument
//!   (`ferrite_accel::program::SimProgram::compile_rows`): each row kernel masks its row
//!   axis with it, its grid is computed at the launch, and it comes in a few variants
//!   whose blocks are chosen for different counts (one per power of two); buffers are
//!   sized and placed at the run's count.
//! - **Row programs between attention kernels**: a transformer (a row graph but for its
//!   attentions, `SymGraph::segments`) on the same targets is cut at its attentions into
//!   row graphs, each compiled once as above; a run runs them in order at the binding's
//!   rows, with each attention in between run by `ferrite_cpu::attention` with the
//!   binding's batch and sequence length. The values passed between steps are kept for
//!   the next run at the same binding. On [`Target::Sim`] the steps run on one simulated
//!   device, the attentions as the tile attention kernel
//!   (`ferrite_accel::attention`), the values between steps in device buffers.
//! - **Specialized per binding**: every other graph (an op that mixes rows otherwise, an
//!   attention in another form; other targets), and a row graph whose compiled program the
//!   row proof refuses: each new binding is instantiated with its numbers and compiled as a
//!   static graph. The programs are kept in a bounded cache with least-recently-used
//!   eviction, the [`jit`](super::jit) cache.
//!
//! Either way [`JitStats`] count calls, hits, compiles and evictions, and every
//! compile and eviction is a [`JitEvent`] whose signature is the inputs' types at that
//! binding (at the most rows, for a row program).

use super::compile::{compile_ir, Compiled, Execution, Options, Target};
use super::error::{Error, Result};
use super::host::Tensor;
use super::jit::{emit_to, lock, reported, Cache, Counters, Hook, JitEvent, JitStats, Slot};
use ferrite_accel::attention::{AttentionKernel, AttentionSpec};
use ferrite_accel::sim::{self, DeviceReport, Placement};
use ferrite_cpu::attention::{attention, AttentionShape, RowsLayout};
use ferrite_cpu::gemm::Parallelism;
use ferrite_ir::sym::{Binding, RowForm, Segment, Segments, Source, SymGraph};
use ferrite_ir::TensorType;
use std::borrow::Borrow;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Specializations a [`Dynamic`] keeps by default.
pub const DEFAULT_SPECIALIZATIONS: usize = 64;

/// A graph with size symbols, compiled per binding on demand (see the [module docs](self)).
pub struct Dynamic {
    graph: SymGraph,
    options: Options,
    cache_limit: usize,
    hook: Option<Hook>,
    cache: Mutex<Cache<Binding>>,
    counters: Counters,
    path: Path,
}

/// How a [`Dynamic`] runs its graph (see the [module docs](self)).
enum Path {
    /// One row program for every binding, compiled at the first run: the program,
    /// or why the row proof refused it (the graph is then specialized per binding).
    Rows {
        form: RowForm,
        program: OnceLock<std::result::Result<Arc<Compiled>, String>>,
    },
    /// Row programs between attention kernels, each compiled once at the first run
    /// (one per [`Segment::Rows`]), or why one of them was refused.
    Segmented {
        segments: Segments,
        programs: OnceLock<std::result::Result<Vec<StepCode>, String>>,
        /// Slot tensors of the last run, reused by the next one at the same binding.
        workspace: Workspace,
    },
    /// Each binding compiled on its own, for this reason.
    Specialized(String),
}

/// What runs one step of a segmented graph.
enum StepCode {
    /// A row program.
    Rows(Arc<Compiled>),
    /// An attention: on [`Target::Sim`] its tile kernel, elsewhere `ferrite_cpu::attention`.
    Attention(Option<Box<AttentionKernel>>),
}

/// A segmented graph's code, one per step.
type Programs = [StepCode];

/// Whether the target runs graphs with size symbols from programs compiled once.
fn symbolic_target(target: Target) -> bool {
    matches!(target, Target::Cpu | Target::Loops | Target::Sim)
}

/// A segmented graph's slot tensors kept from one run to the next, with their binding.
type Workspace = Mutex<Option<(Binding, Vec<Option<Tensor>>)>>;

/// Prepares `graph` to run at any binding of its size symbols with `options`.
/// Nothing is compiled until a binding is run ([`Dynamic::run`]) or asked for
/// ([`Dynamic::specialize`]).
pub fn compile_dynamic(graph: &SymGraph, options: &Options) -> Result<Dynamic> {
    let path = match graph.rows() {
        Ok(form) if symbolic_target(options.target) => Path::Rows {
            form,
            program: OnceLock::new(),
        },
        Ok(_) => Path::Specialized(format!(
            "symbolic kernels exist for the cpu, loops and sim targets only, not {:?}",
            options.target
        )),
        Err(why) if symbolic_target(options.target) => match graph.segments() {
            Ok(segments) => Path::Segmented {
                segments,
                programs: OnceLock::new(),
                workspace: Mutex::new(None),
            },
            Err(cut) => Path::Specialized(format!("{why}; cut at its attentions, {cut}")),
        },
        Err(why) => Path::Specialized(why),
    };
    Ok(Dynamic {
        path,
        graph: graph.clone(),
        options: options.clone(),
        cache_limit: DEFAULT_SPECIALIZATIONS,
        hook: None,
        cache: Mutex::new(Cache::default()),
        counters: Counters::default(),
    })
}

impl Dynamic {
    /// Keeps at most `limit` compiled bindings (at least 1), evicting the least
    /// recently used one to make room.
    pub fn cache_limit(mut self, limit: usize) -> Dynamic {
        self.cache_limit = limit.max(1);
        self
    }

    /// Routes every [`JitEvent`] to `hook` instead of the `FERRITE_LOG` log.
    pub fn on_event(mut self, hook: impl Fn(&JitEvent) + Send + Sync + 'static) -> Dynamic {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The symbolic graph.
    pub fn graph(&self) -> &SymGraph {
        &self.graph
    }

    /// The binding that `inputs` give (and `extra`, for symbols no input carries),
    /// checked against the graph's ranges and constraints.
    pub fn binding<A: Borrow<Tensor>>(&self, inputs: &[A], extra: &Binding) -> Result<Binding> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.borrow().shape()).collect();
        self.graph.bind(&shapes, extra).map_err(|e| Error::Binding {
            message: e.to_string(),
        })
    }

    /// Runs the graph on `inputs`, at the binding their shapes give.
    pub fn run<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Vec<Tensor>> {
        self.run_with(inputs, &Binding::new())
    }

    /// Runs the graph on `inputs`, at the binding their shapes and `extra` give.
    pub fn run_with<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        extra: &Binding,
    ) -> Result<Vec<Tensor>> {
        Ok(self.execute_with(inputs, extra)?.into_outputs())
    }

    /// Runs the graph on `inputs` and reports the run ([`Execution`]): on
    /// [`Target::Sim`] with the device's report of every launch of the run (of every
    /// step's, for a segmented graph), whose cycles are what the run costs.
    pub fn execute<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Execution> {
        self.execute_with(inputs, &Binding::new())
    }

    /// [`Dynamic::execute`] at the binding the inputs' shapes and `extra` give.
    pub fn execute_with<A: Borrow<Tensor>>(
        &self,
        inputs: &[A],
        extra: &Binding,
    ) -> Result<Execution> {
        let b = self.binding(inputs, extra)?;
        let start = Instant::now();
        let (outputs, report) = if let Some((form, program)) = self.row_program()? {
            self.run_rows(form, &program, &b, inputs)?
        } else if let Some((segments, programs, workspace)) = self.segment_programs() {
            if self.options.target == Target::Sim {
                self.run_segments_sim(segments, programs, &b, inputs)?
            } else {
                (
                    self.run_segments(segments, programs, workspace, &b, inputs)?,
                    None,
                )
            }
        } else {
            return self.specialize(&b)?.execute(inputs);
        };
        Ok(Execution::new(outputs, start.elapsed(), report))
    }

    /// A segmented graph's steps, their row programs (compiled now if this is its first
    /// run; `None` for an attention step) and its workspace; `None` on the other paths (or
    /// when one of the programs was refused).
    fn segment_programs(&self) -> Option<(&Segments, &Programs, &Workspace)> {
        let Path::Segmented {
            segments,
            programs,
            workspace,
        } = &self.path
        else {
            return None;
        };
        let mut first = false;
        let compiled = programs.get_or_init(|| {
            first = true;
            segments
                .steps
                .iter()
                .map(|step| match step {
                    Segment::Rows { graph, form, .. } => {
                        self.compile_rows(graph, form).map(StepCode::Rows)
                    }
                    Segment::Attention { site, .. } if self.options.target == Target::Sim => {
                        AttentionKernel::new(&AttentionSpec {
                            heads: site.heads,
                            kv_heads: site.kv_heads,
                            head_dim: site.head_dim,
                            value_dim: site.value_dim,
                            causal: site.causal,
                            scale: site.scale,
                        })
                        .map(|k| StepCode::Attention(Some(Box::new(k))))
                        .map_err(|e| format!("the attention kernel: {e}"))
                    }
                    Segment::Attention { .. } => Ok(StepCode::Attention(None)),
                })
                .collect()
        });
        let programs = compiled.as_ref().ok()?;
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let hits = if first {
            &self.counters.misses
        } else {
            &self.counters.hits
        };
        hits.fetch_add(1, Ordering::Relaxed);
        Some((segments, programs, workspace))
    }

    /// Runs the steps of a segmented graph at binding `b`: each row program at the
    /// binding's rows, each attention at its sequences and length.
    fn run_segments<A: Borrow<Tensor>>(
        &self,
        segments: &Segments,
        programs: &Programs,
        workspace: &Workspace,
        b: &Binding,
        inputs: &[A],
    ) -> Result<Vec<Tensor>> {
        let (rows, seq) = rows_and_length(segments, b)?;
        if rows == 0 {
            return self.specialize(b)?.run(inputs);
        }
        // The pool's workers keep polling between the steps (as they do between the
        // kernels of one program), instead of going to sleep at each attention.
        let threads = self
            .options
            .threads
            .unwrap_or_else(ferrite_cpu::pool::default_thread_count);
        let pool = ferrite_cpu::pool::global_pool(threads).map_err(|e| Error::Run {
            message: e.to_string(),
        })?;
        let _awake = (threads > 1).then(|| pool.stay_awake());
        // Slot tensors of the last run at this binding, else new ones.
        let mut slots: Vec<Option<Tensor>> = match lock(workspace).take() {
            Some((at, slots)) if at == *b => slots,
            _ => vec![None; segments.slots.len()],
        };
        let fresh = |j: usize, slots: &mut Vec<Option<Tensor>>| -> Result<Tensor> {
            if let Some(t) = slots[j].take() {
                return Ok(t);
            }
            Tensor::from_backend(ferrite_ir::Tensor::zeros(&slot_type(segments, j, b)?))
        };
        for &j in &segments.positions {
            if slots[j].is_none() {
                let ty = slot_type(segments, j, b)?;
                slots[j] = Some(Tensor::from_backend(positions(&ty, rows, seq))?);
            }
        }
        for (step, program) in segments.steps.iter().zip(programs) {
            match step {
                Segment::Rows {
                    inputs: from,
                    outputs: to,
                    ..
                } => {
                    let StepCode::Rows(program) = program else {
                        return Err(Error::Internal {
                            message: "a row step without its program".into(),
                        });
                    };
                    let mut outs = Vec::with_capacity(to.len());
                    for &j in to {
                        outs.push(fresh(j, &mut slots)?);
                    }
                    let ins = from
                        .iter()
                        .map(|s| source(s, inputs, &slots))
                        .collect::<Result<Vec<&Tensor>>>()?;
                    program.run_rows(rows, &ins, &mut outs)?;
                    for (&j, t) in to.iter().zip(outs) {
                        slots[j] = Some(t);
                    }
                }
                Segment::Attention { site, q, k, v, out } => {
                    let mut o = fresh(*out, &mut slots)?;
                    let shape = AttentionShape {
                        batch: rows / seq,
                        seq,
                        heads: site.heads,
                        kv_heads: site.kv_heads,
                        head_dim: site.head_dim,
                        value_dim: site.value_dim,
                        causal: site.causal,
                        scale: site.scale as f32,
                    };
                    // A row of `width` elements per token.
                    let operand = |s: &Source, width: usize| -> Result<(&[f32], RowsLayout)> {
                        let t = source(s, inputs, &slots)?;
                        let data = t.as_slice::<f32>().ok_or_else(|| Error::Internal {
                            message: "attention on a tensor that is not f32".into(),
                        })?;
                        Ok((
                            data,
                            RowsLayout {
                                offset: 0,
                                row_stride: width,
                            },
                        ))
                    };
                    let (qd, ql) = operand(q, site.heads * site.head_dim)?;
                    let (kd, kl) = operand(k, site.kv_heads * site.head_dim)?;
                    let (vd, vl) = operand(v, site.kv_heads * site.value_dim)?;
                    let ol = RowsLayout {
                        offset: 0,
                        row_stride: site.heads * site.value_dim,
                    };
                    let team = pool.team(threads, self.options.flush_denormals);
                    let od = o.as_mut_f32().ok_or_else(|| Error::Internal {
                        message: "attention into a tensor that is not f32".into(),
                    })?;
                    attention(
                        &shape,
                        qd,
                        ql,
                        kd,
                        kl,
                        vd,
                        vl,
                        od,
                        ol,
                        Parallelism::Team(team),
                    )
                    .map_err(|e| Error::Run {
                        message: format!("attention: {e}"),
                    })?;
                    slots[*out] = Some(o);
                }
            }
        }
        let mut outputs = Vec::with_capacity(segments.outputs.len());
        for (i, &j) in segments.outputs.iter().enumerate() {
            // Positions stay for the next run; an output that is one is a copy.
            let again = segments.outputs[i + 1..].contains(&j) || segments.positions.contains(&j);
            let t = if again {
                slots[j].clone()
            } else {
                slots[j].take()
            };
            outputs.push(t.ok_or_else(|| Error::Internal {
                message: format!("output {i} was not computed"),
            })?);
        }
        *lock(workspace) = Some((b.clone(), slots));
        Ok(outputs)
    }

    /// The row program, compiled now if this is its first run; `None` on the
    /// specialized path (or when the row proof refused the program).
    fn row_program(&self) -> Result<Option<(&RowForm, Arc<Compiled>)>> {
        let Path::Rows { form, program } = &self.path else {
            return Ok(None);
        };
        let mut first = false;
        let compiled = program.get_or_init(|| {
            first = true;
            self.compile_rows(&self.graph, form)
        });
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        match compiled {
            Ok(p) => {
                let hits = if first {
                    &self.counters.misses
                } else {
                    &self.counters.hits
                };
                hits.fetch_add(1, Ordering::Relaxed);
                Ok(Some((form, p.clone())))
            }
            Err(_) => {
                // Counted again by `specialize`.
                self.counters.calls.fetch_sub(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// Compiles the row instance at the most rows and makes it a row program; a
    /// refusal (of the row proof, of the memory budget at the bound, or a failed
    /// compile) is kept as the reason to specialize instead.
    fn compile_rows(
        &self,
        graph: &SymGraph,
        form: &RowForm,
    ) -> std::result::Result<Arc<Compiled>, String> {
        let start = Instant::now();
        let graph = graph
            .row_instance(form, form.max_rows)
            .map_err(|e| format!("its instance at {} rows: {e}", form.max_rows))?;
        let signature: Vec<TensorType> =
            graph.params.iter().map(|&p| graph.ty(p).clone()).collect();
        self.counters.compiles.fetch_add(1, Ordering::Relaxed);
        // The compile is reported as one; the row proof or the memory budget may still
        // refuse the program, which is then the reason the graph is specialized.
        let mut refusal = None;
        let options = Options {
            row_bound: Some(form.max_rows),
            ..self.options.clone()
        };
        let compiled = compile_ir(&graph, &options).map(|mut c| {
            let axis = |carries: &bool| carries.then_some(form.row_axis());
            let inputs: Vec<Option<usize>> = form.params.iter().map(axis).collect();
            let outputs: Vec<Option<usize>> = form.outputs.iter().map(axis).collect();
            refusal = match c.make_rows(&form.name(), form.max_rows, &inputs, &outputs) {
                Err(why) => Some(format!("the row proof: {why}")),
                Ok(()) => c
                    .check_memory()
                    .err()
                    .map(|e| format!("the row program's storage at {} rows: {e}", form.max_rows)),
            };
            c
        });
        let program = reported(
            |e| self.emit(e),
            graph.name.clone(),
            signature,
            false,
            || 1,
            1,
            start,
            compiled,
        )
        .map_err(|e| format!("the row program: {e}"))?;
        match refusal {
            Some(why) => Err(why),
            None => Ok(program),
        }
    }

    fn run_rows<A: Borrow<Tensor>>(
        &self,
        form: &RowForm,
        program: &Compiled,
        b: &Binding,
        inputs: &[A],
    ) -> Result<(Vec<Tensor>, Option<DeviceReport>)> {
        let rows = form.rows(b).ok_or_else(|| Error::Binding {
            message: format!("the rows {} are not bound", form.name()),
        })?;
        if rows == 0 {
            // No rows to run; the static outputs, if any, are still computed.
            return self.run_specialized(b, inputs);
        }
        let mut outputs = Vec::with_capacity(form.outputs.len());
        for t in self.graph.output_types() {
            let ty = t.bind(b).map_err(|message| Error::Binding { message })?;
            outputs.push(Tensor::from_backend(ferrite_ir::Tensor::zeros(&ty))?);
        }
        let report = program.run_rows(rows, inputs, &mut outputs)?;
        Ok((outputs, report))
    }

    /// Runs the steps of a segmented graph at binding `b` on one simulated device:
    /// the inputs are uploaded once, each row program runs at the binding's rows
    /// and each attention kernel at its sequences and length on the buffers the
    /// steps share (in SRAM where they fit, as a static program's intermediates
    /// are), each freed after its last reader; the outputs are read back at the end.
    fn run_segments_sim<A: Borrow<Tensor>>(
        &self,
        segments: &Segments,
        programs: &Programs,
        b: &Binding,
        inputs: &[A],
    ) -> Result<(Vec<Tensor>, Option<DeviceReport>)> {
        let (rows, seq) = rows_and_length(segments, b)?;
        if rows == 0 {
            return self.run_specialized(b, inputs);
        }
        let run_err = |e: ferrite_accel::Error| Error::Run {
            message: e.to_string(),
        };
        let dev_err = |e: sim::SimError| Error::Run {
            message: e.to_string(),
        };
        let machine = self
            .options
            .machine
            .clone()
            .unwrap_or_else(sim::Machine::mtia2i);
        let mut dev = sim::Device::new(machine.clone());
        // The graph's inputs, uploaded when a step first reads them.
        let mut ins: Vec<Option<sim::BufferId>> = vec![None; inputs.len()];
        let mut slots: Vec<Option<sim::BufferId>> = vec![None; segments.slots.len()];
        // The last step that reads each slot (outputs are read at the end).
        let mut last_read: Vec<Option<usize>> = vec![None; segments.slots.len()];
        for (i, step) in segments.steps.iter().enumerate() {
            let reads: Vec<&Source> = match step {
                Segment::Rows { inputs, .. } => inputs.iter().collect(),
                Segment::Attention { q, k, v, .. } => vec![q, k, v],
            };
            for s in reads {
                if let Source::Slot(j) = *s {
                    last_read[j] = Some(i);
                }
            }
        }
        for &j in &segments.outputs {
            last_read[j] = None;
        }
        let slot_type = |j: usize| slot_type(segments, j, b);
        // A slot is made in SRAM when it fits in half of it beside the slots there (the
        // other half is left to the row programs' own intermediates); outputs are in LPDDR.
        let make = |dev: &mut sim::Device, j: usize| -> Result<sim::BufferId> {
            let ty = slot_type(j)?;
            let fits =
                dev.used_bytes(Placement::Sram) + ty.size_bytes() as u64 <= machine.sram_bytes / 2;
            let placement = if fits && !segments.outputs.contains(&j) {
                Placement::Sram
            } else {
                Placement::Lpddr
            };
            dev.alloc(&format!("slot{j}"), &ty, placement)
                .map_err(dev_err)
        };
        for &j in &segments.positions {
            let t = positions(&slot_type(j)?, rows, seq);
            slots[j] = Some(
                dev.upload(&format!("slot{j}"), &t, Placement::Lpddr)
                    .map_err(dev_err)?,
            );
        }
        let mut buffer = |dev: &mut sim::Device,
                          slots: &[Option<sim::BufferId>],
                          s: &Source|
         -> Result<sim::BufferId> {
            match *s {
                Source::Input(i) => {
                    if let Some(id) = ins[i] {
                        return Ok(id);
                    }
                    let t = inputs.get(i).ok_or_else(|| Error::Internal {
                        message: format!("input {i} is missing"),
                    })?;
                    let id = dev
                        .upload(&format!("input{i}"), t.borrow().as_ir(), Placement::Lpddr)
                        .map_err(dev_err)?;
                    ins[i] = Some(id);
                    Ok(id)
                }
                Source::Slot(j) => slots[j].ok_or_else(|| Error::Internal {
                    message: format!("slot {j} is not computed before it is used"),
                }),
            }
        };
        for (i, (step, code)) in segments.steps.iter().zip(programs).enumerate() {
            match (step, code) {
                (
                    Segment::Rows {
                        inputs: from,
                        outputs: to,
                        ..
                    },
                    StepCode::Rows(program),
                ) => {
                    let p = program.sim_program().ok_or_else(|| Error::Internal {
                        message: "a row step without its tile program".into(),
                    })?;
                    let mut args = Vec::with_capacity(from.len());
                    for s in from {
                        args.push(buffer(&mut dev, &slots, s)?);
                    }
                    let mut outs = Vec::with_capacity(to.len());
                    for &j in to {
                        let id = make(&mut dev, j)?;
                        slots[j] = Some(id);
                        outs.push(id);
                    }
                    p.run_rows_on(&mut dev, rows, &args, &outs, &format!("step{i} "))
                        .map_err(run_err)?;
                }
                (Segment::Attention { q, k, v, out, .. }, StepCode::Attention(Some(kernel))) => {
                    let q = buffer(&mut dev, &slots, q)?;
                    let k = buffer(&mut dev, &slots, k)?;
                    let v = buffer(&mut dev, &slots, v)?;
                    let o = make(&mut dev, *out)?;
                    slots[*out] = Some(o);
                    kernel
                        .launch(&mut dev, rows / seq, seq, [q, k, v, o])
                        .map_err(run_err)?;
                }
                _ => {
                    return Err(Error::Internal {
                        message: format!("step {i} has no code for the sim target"),
                    })
                }
            }
            // Slots end after their last reader.
            for (j, last) in last_read.iter().enumerate() {
                if *last == Some(i) && !segments.positions.contains(&j) {
                    if let Some(id) = slots[j].take() {
                        dev.free(id).map_err(dev_err)?;
                    }
                }
            }
        }
        let mut outputs = Vec::with_capacity(segments.outputs.len());
        for (i, &j) in segments.outputs.iter().enumerate() {
            let id = slots[j].ok_or_else(|| Error::Internal {
                message: format!("output {i} was not computed"),
            })?;
            let mut t = dev.read(id).map_err(dev_err)?;
            t.ty = slot_type(j)?;
            outputs.push(Tensor::from_backend(t)?);
        }
        Ok((outputs, Some(dev.report().clone())))
    }

    /// Runs binding `b` on its own specialized program, with the device's report.
    fn run_specialized<A: Borrow<Tensor>>(
        &self,
        b: &Binding,
        inputs: &[A],
    ) -> Result<(Vec<Tensor>, Option<DeviceReport>)> {
        let e = self.specialize(b)?.execute(inputs)?;
        let report = e.device_report().cloned();
        Ok((e.into_outputs(), report))
    }

    /// Whether every binding runs one program (a row graph on the cpu, loops or sim
    /// target whose row program was proved), as far as known now: before the first
    /// run, whether the graph qualifies.
    pub fn is_symbolic(&self) -> bool {
        match &self.path {
            Path::Rows { program, .. } => !matches!(program.get(), Some(Err(_))),
            Path::Segmented { programs, .. } => !matches!(programs.get(), Some(Err(_))),
            Path::Specialized(_) => false,
        }
    }

    /// The static program compiled for binding `b` alone (compiled now unless cached),
    /// on either path: [`Dynamic::run`] uses it only where the graph is specialized.
    pub fn specialize(&self, b: &Binding) -> Result<Arc<Compiled>> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let mut evicted = None;
        let slot: Arc<Slot> = {
            let mut cache = lock(&self.cache);
            match cache.touch(b) {
                Some(slot) => {
                    self.counters.hits.fetch_add(1, Ordering::Relaxed);
                    slot
                }
                None => {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    if cache.len() >= self.cache_limit {
                        evicted = cache.evict_lru();
                    }
                    let slot = Arc::new(Slot::new());
                    cache.insert(b.clone(), slot.clone());
                    slot
                }
            }
        };
        if let Some(old) = evicted {
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            self.emit(JitEvent::Evicted {
                name: self.graph.name().to_string(),
                evicted: self.signature(&old),
                signature: self.signature(b),
                limit: self.cache_limit,
            });
        }
        match slot.get_or_init(|| self.compile(b)) {
            Ok(c) => Ok(c.clone()),
            Err(e) => {
                // Failures are not cached: a later call retries.
                let mut cache = lock(&self.cache);
                if cache.map.get(b).is_some_and(|(s, _)| Arc::ptr_eq(s, &slot)) {
                    cache.map.remove(b);
                }
                Err(e.clone())
            }
        }
    }

    /// The bindings compiled now, in no particular order.
    pub fn bindings(&self) -> Vec<Binding> {
        lock(&self.cache).map.keys().cloned().collect()
    }

    /// The cache's counters: `calls` counts specializations asked for (one per run).
    pub fn stats(&self) -> JitStats {
        let c = &self.counters;
        let compiles = c.compiles.load(Ordering::Relaxed);
        JitStats {
            calls: c.calls.load(Ordering::Relaxed),
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            compiles,
            recompiles: compiles.saturating_sub(1),
            eager_calls: 0,
            evictions: c.evictions.load(Ordering::Relaxed),
            cache_entries: lock(&self.cache).len(),
        }
    }

    /// One line on how the graph runs: its symbols, which path it takes
    /// (one program for every binding, or specialized per binding) and why.
    pub fn summary(&self) -> String {
        let symbols: Vec<String> = self
            .graph
            .facts()
            .symbols
            .iter()
            .map(|s| {
                if s.hi == ferrite_ir::sym::DEFAULT_MAX {
                    format!("{} >= {}", s.name, s.lo)
                } else {
                    format!("{} in {}..={}", s.name, s.lo, s.hi)
                }
            })
            .collect();
        let s = self.stats();
        let how = match &self.path {
            Path::Rows { form, program } => match program.get() {
                Some(Err(why)) => format!("specialized per binding ({why})"),
                state => format!(
                    "one program for every binding (rows {} up to {}, {}): {} compiled{}",
                    form.name(),
                    form.max_rows,
                    if state.is_some() {
                        "compiled"
                    } else {
                        "compiled at the first run"
                    },
                    s.compiles,
                    sim_note(state.and_then(|p| p.as_ref().ok()).into_iter(), false)
                ),
            },
            Path::Segmented {
                segments, programs, ..
            } => match programs.get() {
                Some(Err(why)) => format!("specialized per binding ({why})"),
                state => {
                    let attentions = segments
                        .steps
                        .iter()
                        .filter(|s| matches!(s, Segment::Attention { .. }))
                        .count();
                    let rows = state
                        .and_then(|p| p.as_ref().ok())
                        .into_iter()
                        .flatten()
                        .filter_map(|c| match c {
                            StepCode::Rows(p) => Some(p),
                            StepCode::Attention(_) => None,
                        });
                    let note = sim_note(rows, attentions > 0);
                    format!(
                        "one program for every binding ({} row programs over rows {} up to {} \
                         between {attentions} attention kernels, {}): {} compiled{note}",
                        segments.steps.len() - attentions,
                        segments.form.name(),
                        segments.form.max_rows,
                        if state.is_some() {
                            "compiled"
                        } else {
                            "compiled at the first run"
                        },
                        s.compiles
                    )
                }
            },
            Path::Specialized(why) => format!("specialized per binding ({why})"),
        };
        if !self.is_symbolic() {
            return format!(
                "`{}` has size symbols {}; {how}: {} compiled, {} cached of {}, {} evicted",
                self.graph.name(),
                symbols.join(", "),
                s.compiles,
                s.cache_entries,
                self.cache_limit,
                s.evictions
            );
        }
        format!(
            "`{}` has size symbols {}; {how}",
            self.graph.name(),
            symbols.join(", ")
        )
    }

    /// The inputs' types at binding `b`.
    fn signature(&self, b: &Binding) -> Vec<TensorType> {
        self.graph
            .params()
            .iter()
            .filter_map(|(_, t)| t.bind(b).ok())
            .collect()
    }

    fn compile(&self, b: &Binding) -> Result<Arc<Compiled>> {
        let start = Instant::now();
        let previous = self.counters.compiles.fetch_add(1, Ordering::Relaxed);
        let compiled = self
            .graph
            .instantiate(b)
            .map_err(|e| match e {
                ferrite_ir::Error::Input(message) => Error::Binding { message },
                e => Error::InvalidGraph {
                    message: e.to_string(),
                },
            })
            .and_then(|g| compile_ir(&g, &self.options));
        reported(
            |e| self.emit(e),
            self.graph.name().to_string(),
            self.signature(b),
            previous > 0,
            || lock(&self.cache).len(),
            self.cache_limit,
            start,
            compiled,
        )
    }

    fn emit(&self, event: JitEvent) {
        emit_to(&self.hook, event)
    }
}

/// On the sim target, what the tile programs of `programs` hold (nothing elsewhere):
/// their row kernels and block variants, and the attention kernel if `attention`.
fn sim_note<'a>(programs: impl Iterator<Item = &'a Arc<Compiled>>, attention: bool) -> String {
    let (mut kernels, mut variants, mut any) = (0, 0, false);
    for p in programs {
        if let Some(sim) = p.sim_program() {
            any = true;
            let (k, v) = sim.row_variant_counts();
            kernels += k;
            variants += v;
        }
    }
    if !any {
        return String::new();
    }
    format!(
        "; on sim, {kernels} row kernels in {variants} variants with blocks by row count \
         (the count, the grid and the row masks are launch arguments){}",
        if attention {
            ", and the tile attention kernel (batch and length at launch)"
        } else {
            ""
        }
    )
}

/// The tensor a step's operand comes from: an input of the run or a slot.
fn source<'t, A: Borrow<Tensor>>(
    s: &Source,
    inputs: &'t [A],
    slots: &'t [Option<Tensor>],
) -> Result<&'t Tensor> {
    let t = match *s {
        Source::Input(i) => inputs.get(i).map(Borrow::borrow),
        Source::Slot(j) => slots.get(j).and_then(Option::as_ref),
    };
    t.ok_or_else(|| Error::Internal {
        message: format!("{s:?} is not computed before it is used"),
    })
}

impl fmt::Debug for Dynamic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dynamic")
            .field("graph", &self.graph.name())
            .field("options", &self.options)
            .field("cache_limit", &self.cache_limit)
            .field("cache_entries", &lock(&self.cache).len())
            .finish()
    }
}

/// The type of slot `j` of a segmented graph at binding `b`.
fn slot_type(segments: &Segments, j: usize, b: &Binding) -> Result<TensorType> {
    segments.slots[j]
        .1
        .bind(b)
        .map_err(|message| Error::Binding { message })
}

/// The positions slot of `rows` token rows of sequences of `seq` (each row's index in
/// its sequence), typed `ty`.
fn positions(ty: &TensorType, rows: usize, seq: usize) -> ferrite_ir::Tensor {
    let t: Vec<f64> = (0..rows).map(|r| (r % seq) as f64).collect();
    ferrite_ir::Tensor::from_f64(ty, &t)
}

/// The rows (the product of the row symbols) and the sequence length (the last
/// row symbol) of a segmented graph at binding `b`.
fn rows_and_length(segments: &Segments, b: &Binding) -> Result<(usize, usize)> {
    let form = &segments.form;
    let unbound = || Error::Binding {
        message: format!("the rows {} are not bound", form.name()),
    };
    let rows = form.rows(b).ok_or_else(unbound)?;
    let seq = form
        .symbols
        .last()
        .and_then(|s| b.get(s))
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(unbound)?;
    Ok((rows, seq))
}

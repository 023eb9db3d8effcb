//! A simulated device: named buffers in device memory, kernel launches over them,
//! and the reports of those launches. [`run`] is the one-launch shortcut.

use super::error::SimError;
use super::exec::{launch_budget, Launch, MAX_WORK_PER_DEVICE};
use super::machine::Machine;
use super::memory::{DeviceBuffer, LineCache, Placement};
use super::report::{Bytes, DeviceReport, SimReport};
use super::timing::{active_in_wave, schedule, Rates};
use super::value::{Elems, Tile};
use crate::tile::ast::ParamType;
use crate::tile::typed::{CheckedKernel, Lit};
use ferrite_ir::types::ShapeDisplay;
use ferrite_ir::{DType, Tensor, TensorType};

/// The most programs one launch may have: a guard against a grid that would keep
/// the simulator busy for hours.
pub const MAX_PROGRAMS: usize = 1 << 24;

/// The most host memory a [`Device`]'s buffers may take together (4 GiB). The simulator
/// keeps every element as an f64 or i64 (8 bytes, one for bool) whatever its dtype, so
/// this is 512M elements: a buffer beyond it is refused before anything is allocated.
pub const MAX_DEVICE_HOST_BYTES: u64 = 4 << 30;

/// A buffer on a [`Device`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BufferId(usize);

/// What a launch binds to a kernel parameter.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum DeviceArg {
    /// A device buffer, for a pointer parameter (`x: *f32`).
    Buffer(BufferId),
    /// An integer, for an integer or bool scalar parameter (or a float one).
    Int(i64),
    /// A float, for a float scalar parameter.
    Float(f64),
}

/// What [`run`] binds to a kernel parameter; buffers are read back after the run.
#[derive(Clone, PartialEq, Debug)]
pub enum KernelArg {
    /// A host tensor copied to device memory, and back when the kernel is done.
    Buffer(Tensor),
    /// An integer scalar.
    Int(i64),
    /// A float scalar.
    Float(f64),
}

/// A simulated accelerator with its memory, for a sequence of launches sharing
/// buffers (a compiled program). Launch reports accumulate in
/// [`Device::report`].
///
/// ```
/// use ferrite_accel::{sim, tile};
/// use ferrite_ir::Tensor;
/// let k = tile::parse_and_check("inc.tile",
///     "kernel inc(x: *f32, n: i32) {\n  o = program_id(0) * 4 + arange(0, 4)\n  \
///      store(x + o, load(x + o, o < n) + 1.0, o < n)\n}\n").unwrap();
/// let mut dev = sim::Device::new(sim::Machine::mtia2i());
/// let x = dev.upload("x", &Tensor::from_f32(&[6], vec![0.0; 6]).unwrap(), sim::Placement::Lpddr).unwrap();
/// for _ in 0..2 {
///     dev.launch(&k, [2, 1, 1], &[sim::DeviceArg::Buffer(x), sim::DeviceArg::Int(6)]).unwrap();
/// }
/// assert_eq!(dev.read(x).unwrap().to_f64(), vec![2.0; 6]);
/// assert_eq!(dev.report().launches.len(), 2);
/// ```
#[derive(Debug)]
pub struct Device {
    machine: Machine,
    buffers: Vec<Option<DeviceBuffer>>,
    report: DeviceReport,
    /// Work units of the simulation budget spent by every launch so far.
    work: u64,
    /// The simulation budget: work units per launch (beside [`launch_budget`]) and for
    /// all launches together.
    work_limits: (u64, u64),
}

impl Device {
    /// An empty device of `machine`.
    pub fn new(machine: Machine) -> Device {
        Device {
            machine,
            buffers: Vec::new(),
            report: DeviceReport::default(),
            work: 0,
            work_limits: (u64::MAX, MAX_WORK_PER_DEVICE),
        }
    }

    /// Lowers the simulation budget (work units per launch, and for all launches of
    /// this device together) below the defaults, [`launch_budget`] of the launch's grid
    /// and [`MAX_WORK_PER_DEVICE`]; larger values leave them.
    pub fn limit_work(&mut self, per_launch: u64, total: u64) {
        self.work_limits = (per_launch, total.min(MAX_WORK_PER_DEVICE));
    }

    /// Work units of the simulation budget spent so far.
    pub fn work_spent(&self) -> u64 {
        self.work
    }

    /// The machine simulated.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The reports of every launch so far, in order.
    pub fn report(&self) -> &DeviceReport {
        &self.report
    }

    /// Bytes of the buffers placed at `placement` now.
    pub fn used_bytes(&self, placement: Placement) -> u64 {
        self.used(placement)
    }

    /// Bytes of buffers placed at `placement`.
    fn used(&self, placement: Placement) -> u64 {
        self.buffers
            .iter()
            .flatten()
            .filter(|b| b.placement == placement)
            .map(DeviceBuffer::bytes)
            .sum()
    }

    /// Copies a host tensor into a new device buffer named `name`.
    pub fn upload(
        &mut self,
        name: &str,
        tensor: &Tensor,
        placement: Placement,
    ) -> Result<BufferId, SimError> {
        if data_len(tensor) != tensor.ty.numel() {
            return Err(SimError::Device {
                message: format!(
                    "tensor for `{name}` has {} elements but type {}",
                    data_len(tensor),
                    tensor.ty
                ),
            });
        }
        let id = self.alloc(name, &tensor.ty, placement)?;
        self.write(id, tensor)?;
        Ok(id)
    }

    /// A new zero-filled buffer named `name`.
    pub fn alloc(
        &mut self,
        name: &str,
        ty: &TensorType,
        placement: Placement,
    ) -> Result<BufferId, SimError> {
        if self.buffers.iter().flatten().any(|b| b.name == name) {
            return Err(SimError::Device {
                message: format!("a buffer named `{name}` already exists"),
            });
        }
        let bytes = ty.size_bytes() as u64;
        let (capacity, level) = match placement {
            Placement::Lpddr => (self.machine.lpddr_bytes, "LPDDR"),
            Placement::Sram => (self.machine.sram_bytes, "SRAM"),
        };
        let host = host_bytes(ty);
        let host_used: u64 = self
            .buffers
            .iter()
            .flatten()
            .map(|b| host_bytes(&b.ty))
            .sum();
        if host_used.saturating_add(host) > MAX_DEVICE_HOST_BYTES {
            return Err(SimError::Device {
                message: format!(
                    "buffer `{name}` ({}) needs {host} bytes of simulator memory (the \
                     simulator keeps 8 bytes per element); with the {host_used} bytes its \
                     other buffers take, that is more than the limit of {MAX_DEVICE_HOST_BYTES} \
                     bytes",
                    ty
                ),
            });
        }
        let used = self.used(placement);
        if used.saturating_add(bytes) > capacity {
            return Err(SimError::Device {
                message: format!(
                    "buffer `{name}` ({bytes} bytes) does not fit in {level}: {used} of \
                     {capacity} bytes are taken"
                ),
            });
        }
        self.buffers.push(Some(DeviceBuffer {
            name: name.to_string(),
            ty: ty.clone(),
            elems: Elems::zeros(ty.dtype, ty.numel()),
            placement,
        }));
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn buffer(&self, id: BufferId) -> Result<&DeviceBuffer, SimError> {
        self.buffers
            .get(id.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| SimError::Device {
                message: format!("buffer #{} does not exist (freed?)", id.0),
            })
    }

    /// The buffer named `name`, if any.
    pub fn find(&self, name: &str) -> Option<BufferId> {
        self.buffers
            .iter()
            .position(|b| b.as_ref().is_some_and(|b| b.name == name))
            .map(BufferId)
    }

    /// Copies a buffer back to the host.
    pub fn read(&self, id: BufferId) -> Result<Tensor, SimError> {
        let b = self.buffer(id)?;
        Ok(b.elems.to_tensor(&b.ty))
    }

    /// Overwrites a buffer with a host tensor of its exact type.
    pub fn write(&mut self, id: BufferId, tensor: &Tensor) -> Result<(), SimError> {
        let b = self.buffer(id)?;
        if b.ty != tensor.ty {
            return Err(SimError::Device {
                message: format!(
                    "buffer `{}` is {} but the tensor is {}",
                    b.name, b.ty, tensor.ty
                ),
            });
        }
        let elems = Elems::from_tensor(tensor);
        if let Some(Some(b)) = self.buffers.get_mut(id.0) {
            b.elems = elems;
        }
        Ok(())
    }

    /// Frees a buffer; its id is invalid afterwards.
    pub fn free(&mut self, id: BufferId) -> Result<(), SimError> {
        self.buffer(id)?;
        self.buffers[id.0] = None;
        Ok(())
    }

    /// Runs `kernel` over `grid` with `args` bound to its parameters, adds the
    /// launch's report to [`Device::report`] and returns it.
    ///
    /// Programs run in order of their linear id `x + gx * (y + gy * z)`. If a
    /// program faults, the launch stops there: buffers keep what earlier programs
    /// wrote, as on real hardware.
    pub fn launch(
        &mut self,
        kernel: &CheckedKernel,
        grid: [usize; 3],
        args: &[DeviceArg],
    ) -> Result<SimReport, SimError> {
        let name = kernel.name().to_string();
        let bad = |message: String| SimError::BadLaunch {
            kernel: name.clone(),
            message,
        };
        let programs = grid
            .iter()
            .try_fold(1usize, |n, &g| n.checked_mul(g))
            .unwrap_or(usize::MAX);
        if programs == 0 {
            return Err(bad(format!(
                "grid {} has no programs; every axis must be at least 1",
                ShapeDisplay(&grid)
            )));
        }
        if programs > MAX_PROGRAMS {
            return Err(bad(format!(
                "grid {} has {programs} programs, more than the simulator's limit of \
                 {MAX_PROGRAMS}; use larger blocks",
                ShapeDisplay(&grid)
            )));
        }
        let params = &kernel.kernel().params;
        if args.len() != params.len() {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            return Err(bad(format!(
                "the kernel takes {} argument{} ({}), got {}",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                names.join(", "),
                args.len()
            )));
        }
        let mut param_buffers = vec![None; params.len()];
        let mut param_scalars = vec![None; params.len()];
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            match (p.ty, a) {
                (ParamType::Ptr(d), DeviceArg::Buffer(id)) => {
                    let b = self.buffer(*id)?;
                    if b.ty.dtype != d {
                        return Err(bad(format!(
                            "argument `{}` is declared *{d} but buffer `{}` holds {}",
                            p.name, b.name, b.ty
                        )));
                    }
                    param_buffers[i] = Some(id.0);
                }
                (ParamType::Ptr(d), _) => {
                    return Err(bad(format!(
                        "argument `{}` is a pointer (*{d}) and needs a buffer, got a scalar",
                        p.name
                    )))
                }
                (ParamType::Scalar(d), DeviceArg::Buffer(_)) => {
                    return Err(bad(format!(
                        "argument `{}` is a {d} scalar, got a buffer",
                        p.name
                    )))
                }
                (ParamType::Scalar(d), &DeviceArg::Int(v)) => {
                    let lit = match d {
                        DType::I32 if i32::try_from(v).is_err() => {
                            return Err(bad(format!(
                                "argument `{}` is i32 but {v} does not fit",
                                p.name
                            )))
                        }
                        DType::Bool if v != 0 && v != 1 => {
                            return Err(bad(format!(
                                "argument `{}` is bool, so it takes 0 or 1, not {v}",
                                p.name
                            )))
                        }
                        DType::Bool => Lit::B(v == 1),
                        _ if d.int_range().is_some_and(|(lo, hi)| {
                            !(lo..=hi).contains(&(v as i128)) && d != DType::U64
                        }) =>
                        {
                            return Err(bad(format!(
                                "argument `{}` is {d} but {v} does not fit",
                                p.name
                            )))
                        }
                        _ if d.is_int() => Lit::I(v),
                        _ => Lit::F(v as f64),
                    };
                    param_scalars[i] = Some(Tile::lit(d, lit));
                }
                (ParamType::Scalar(d), &DeviceArg::Float(v)) => {
                    if !d.is_float() {
                        return Err(bad(format!(
                            "argument `{}` is {d} but got the float {v}",
                            p.name
                        )));
                    }
                    param_scalars[i] = Some(Tile::lit(d, Lit::F(v)));
                }
            }
        }
        let needed = kernel.local_memory_bytes();
        if needed > self.machine.local_memory_bytes {
            return Err(SimError::LocalMemoryOverflow {
                kernel: name,
                needed,
                capacity: self.machine.local_memory_bytes,
                allocations: kernel
                    .allocs
                    .iter()
                    .map(|a| {
                        let at = a
                            .site
                            .location
                            .as_ref()
                            .map_or(String::new(), |l| format!(" at {l}"));
                        format!("{} ({} bytes){at}", a.site.text, a.bytes())
                    })
                    .collect(),
            });
        }

        let rates = Rates::new(&self.machine);
        let cache_room = self
            .machine
            .sram_bytes
            .saturating_sub(self.used(Placement::Sram));
        let mut launch = Launch {
            kernel,
            grid,
            cache: LineCache::new(self.machine.sram_line_bytes, cache_room, self.buffers.len()),
            buffers: &mut self.buffers,
            param_buffers,
            param_scalars,
            rates: rates.clone(),
            bytes: Bytes::default(),
            dot_flops: 0,
            vector_ops: 0,
            work: 0,
            work_limit: launch_budget(programs)
                .min(self.work_limits.0)
                .min(self.work_limits.1.saturating_sub(self.work)),
        };
        let pes = rates.pes;
        let mut cycles = Vec::with_capacity(programs);
        let mut ran = Ok(());
        for i in 0..programs {
            let pid = [i % grid[0], i / grid[0] % grid[1], i / (grid[0] * grid[1])];
            match launch.run_program(pid, active_in_wave(i, programs, pes)) {
                Ok(c) => cycles.push(c),
                Err(e) => {
                    ran = Err(e);
                    break;
                }
            }
        }
        self.work = self.work.saturating_add(launch.work);
        ran?;
        let (busy, compute) = schedule(&cycles, pes);
        let longest = busy.iter().copied().fold(0.0, f64::max);
        let report = SimReport {
            kernel: name,
            machine: self.machine.name.clone(),
            grid,
            programs,
            pe_grid: [self.machine.pe_rows, self.machine.pe_cols],
            clock_ghz: self.machine.clock_ghz,
            cycles: (longest + rates.launch).ceil() as u64,
            launch_cycles: rates.launch.ceil() as u64,
            bytes: launch.bytes,
            dot_flops: launch.dot_flops,
            vector_ops: launch.vector_ops,
            pe_busy_cycles: busy.iter().map(|c| c.ceil() as u64).collect(),
            pe_compute_cycles: compute.iter().map(|c| c.ceil() as u64).collect(),
            peak_dot_flops_per_cycle: pes as f64 * rates.dot(dot_dtype(kernel)),
        };
        self.report.launches.push(report.clone());
        Ok(report)
    }
}

/// Host bytes the simulator's copy of a buffer of type `ty` takes.
fn host_bytes(ty: &TensorType) -> u64 {
    let per = if ty.dtype == DType::Bool { 1 } else { 8 };
    (ty.numel() as u64).saturating_mul(per)
}

/// The number of elements a tensor's data holds.
fn data_len(t: &Tensor) -> usize {
    t.data.len()
}

/// The input dtype of the kernel's dots (f16 when it has none), whose rate is the
/// peak its efficiency is measured against.
fn dot_dtype(kernel: &CheckedKernel) -> DType {
    use crate::tile::typed::{CExpr, CKind, CStmt, Ty};
    fn expr(e: &CExpr) -> Option<DType> {
        if let CKind::Dot(a, ..) = &e.kind {
            if let Ty::Tile(d, _) = a.ty {
                return Some(d);
            }
        }
        None
    }
    fn walk(body: &[CStmt]) -> Option<DType> {
        body.iter().find_map(|s| match s {
            CStmt::Assign(_, e) => expr(e),
            CStmt::For { body, .. } => walk(body),
            _ => None,
        })
    }
    walk(&kernel.body).unwrap_or(DType::F16)
}

/// Runs one launch of `kernel` on a fresh device: buffers are uploaded to LPDDR
/// (named after their parameters), and read back into `args` afterwards, also
/// when the launch fails part way.
///
/// ```
/// use ferrite_accel::{sim, tile};
/// use ferrite_ir::Tensor;
/// let k = tile::parse_and_check("add.tile",
///     "kernel add(x: *f32, y: *f32, n: i32) {\n  o = arange(0, 4)\n  \
///      store(y + o, load(x + o, o < n) * 2.0, o < n)\n}\n").unwrap();
/// let x = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap();
/// let y = Tensor::from_f32(&[3], vec![0.0; 3]).unwrap();
/// let mut args = [sim::KernelArg::Buffer(x), sim::KernelArg::Buffer(y), sim::KernelArg::Int(3)];
/// let report = sim::run(&sim::Machine::mtia2i(), &k, [1, 1, 1], &mut args).unwrap();
/// let sim::KernelArg::Buffer(y) = &args[1] else { unreachable!() };
/// assert_eq!(y.to_f64(), vec![2.0, 4.0, 6.0]);
/// assert_eq!(report.bytes.lpddr_read, 12);
/// ```
pub fn run(
    machine: &Machine,
    kernel: &CheckedKernel,
    grid: [usize; 3],
    args: &mut [KernelArg],
) -> Result<SimReport, SimError> {
    let mut dev = Device::new(machine.clone());
    let params = &kernel.kernel().params;
    let mut bound = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        bound.push(match a {
            KernelArg::Buffer(t) => {
                let name = params.get(i).map_or(format!("arg{i}"), |p| p.name.clone());
                DeviceArg::Buffer(dev.upload(&name, t, Placement::Lpddr)?)
            }
            KernelArg::Int(v) => DeviceArg::Int(*v),
            KernelArg::Float(v) => DeviceArg::Float(*v),
        });
    }
    let result = dev.launch(kernel, grid, &bound);
    for (a, b) in args.iter_mut().zip(&bound) {
        if let (KernelArg::Buffer(t), DeviceArg::Buffer(id)) = (a, b) {
            *t = dev.read(*id)?;
        }
    }
    result
}

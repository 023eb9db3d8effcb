//! Functional execution of one program of a launch, tile at a time, with its
//! timing charged to a [`Clock`] as it goes.

use super::error::{OutOfBounds, SimError};
use super::memory::{gather, scatter, DeviceBuffer, LineCache, OutOfRange};
use super::report::Bytes;
use super::timing::{Clock, Rates, Traffic};
use super::value::{expand, Elems, PtrTile, Tile};
use crate::tile::typed::{CExpr, CKind, CStmt, CheckedKernel, Ty};
use ferrite_ir::types::{broadcast_shapes, ShapeDisplay};
use ferrite_ir::DType;
use std::rc::Rc;

/// The most iterations one execution of a loop may run: a guard against a
/// kernel that would keep the simulator busy for hours.
pub const MAX_LOOP_TRIPS: i128 = 1 << 24;

/// The simulation budget of one launch of few programs, in work units: every element a
/// tile operation computes is one unit (a `dot` of `m x k` by `k x n` is `m * k * n`), and
/// every statement, expression and loop iteration costs [`STEP_COST`] more, every program
/// [`PROGRAM_COST`], since the simulator's own overhead per step is that of a few hundred
/// elements. A launch of more than `MAX_WORK_PER_LAUNCH / MAX_WORK_PER_PROGRAM` (256)
/// programs may spend [`MAX_WORK_PER_PROGRAM`] per program instead (see [`launch_budget`]).
/// A launch that would exceed its budget stops with [`SimError::Budget`]: the simulator runs
/// in bounded time whatever the kernel. On this project's 2-core machine the simulator
/// spends about 3 * 2^30 units a second (release build).
pub const MAX_WORK_PER_LAUNCH: u64 = 1 << 32;

/// The simulation budget of one program of a launch of many (see [`launch_budget`]): a
/// launch's legitimate work grows with its grid (a GEMM of 16384 x 256 by 256 x 1024 is
/// 2048 programs of about 3 * 2^20 units each, 2^32.6 in all), a runaway kernel's with its
/// loops, which the floor of [`MAX_WORK_PER_LAUNCH`] still stops.
pub const MAX_WORK_PER_PROGRAM: u64 = 1 << 24;

/// The simulation budget of a whole [`Device`](super::Device)'s life (a compiled program's
/// run): launches together spend at most this many work units. It bounds the time of any
/// run (about 20 s of simulation in a release build on this project's 2-core machine), and
/// holds the largest run of the issue-19 range: a two-layer GPT-2-style decoder at 32 x 512
/// tokens spends about 2^35.8 (`ferrite run examples/dynamic/gpt2.fg --target sim --dim
/// B=32 --dim T=512`; its 14 million steps are a tenth of it).
pub const MAX_WORK_PER_DEVICE: u64 = 1 << 36;

/// The work units a launch of `programs` programs may spend: [`MAX_WORK_PER_LAUNCH`], or
/// [`MAX_WORK_PER_PROGRAM`] per program when that is more (and in any case no more than
/// what is left of the device's [`MAX_WORK_PER_DEVICE`]).
pub fn launch_budget(programs: usize) -> u64 {
    (programs as u64)
        .saturating_mul(MAX_WORK_PER_PROGRAM)
        .max(MAX_WORK_PER_LAUNCH)
}

/// Work units of one statement, expression or loop iteration, beside its elements: what
/// the simulator spends on a step of a scalar loop, about 90 ns (`acc = acc + 1` is five
/// steps, 435 ns an iteration on the 2-core machine), is about 260 elements' worth at 3 *
/// 2^30 units a second. At 64 (before reliability finding F08's last case was measured),
/// 2^24 programs of a 4096-iteration scalar loop spent the device's 2^36 units in 94 s;
/// at 512, 12 s.
pub const STEP_COST: u64 = 512;

/// Work units of starting one program of a launch.
pub const PROGRAM_COST: u64 = 1024;

/// A runtime value.
#[derive(Clone, Debug)]
enum Val {
    Tile(Rc<Tile>),
    Ptr(Rc<PtrTile>),
    /// Index into the program's DMA tokens.
    Token(usize),
    /// Index of the `local_alloc` site (one buffer per site per program).
    Local(usize),
}

/// What a launch shares between its programs.
pub(crate) struct Launch<'a> {
    pub kernel: &'a CheckedKernel,
    pub grid: [usize; 3],
    pub buffers: &'a mut [Option<DeviceBuffer>],
    /// Per parameter: the device buffer bound to it (pointer parameters).
    pub param_buffers: Vec<Option<usize>>,
    /// Per parameter: the scalar bound to it (scalar parameters).
    pub param_scalars: Vec<Option<Tile>>,
    pub cache: LineCache,
    pub rates: Rates,
    pub bytes: Bytes,
    pub dot_flops: u64,
    pub vector_ops: u64,
    /// Work units spent so far (see [`MAX_WORK_PER_LAUNCH`]).
    pub work: u64,
    /// The work units this launch may spend.
    pub work_limit: u64,
}

/// Why a program stopped.
enum Fault {
    OutOfBounds {
        site: usize,
        lane: usize,
        shape: Vec<usize>,
        offset: i64,
        param: usize,
        write: bool,
    },
    Message(String),
    /// The launch spent its simulation budget.
    Budget,
}

impl From<String> for Fault {
    fn from(m: String) -> Fault {
        Fault::Message(m)
    }
}

type Run<T> = Result<T, Fault>;

/// A local buffer's state within one program.
#[derive(Clone, Default)]
struct LocalBuf {
    data: Option<Rc<Tile>>,
    /// The token of a copy into it not yet waited for.
    pending: Option<usize>,
}

struct Program<'l, 'a> {
    launch: &'l mut Launch<'a>,
    slots: Vec<Option<Val>>,
    locals: Vec<LocalBuf>,
    /// Completion cycle and target buffer of every DMA started.
    tokens: Vec<(f64, usize)>,
    clock: Clock,
    pid: [usize; 3],
}

impl Launch<'_> {
    /// Runs the program with id `pid` in a wave of `active` PEs; returns its
    /// total and compute cycles.
    pub fn run_program(&mut self, pid: [usize; 3], active: usize) -> Result<(f64, f64), SimError> {
        let kernel = self.kernel;
        let mut slots = vec![None; kernel.slots];
        for (i, slot) in slots
            .iter_mut()
            .enumerate()
            .take(kernel.kernel().params.len())
        {
            *slot = match (self.param_buffers[i], &self.param_scalars[i]) {
                (Some(_), _) => Some(Val::Ptr(Rc::new(PtrTile {
                    param: i,
                    shape: Vec::new(),
                    offsets: vec![0],
                }))),
                (None, Some(t)) => Some(Val::Tile(Rc::new(t.clone()))),
                (None, None) => None,
            };
        }
        let clock = Clock::new(&self.rates, active);
        if self.charge(PROGRAM_COST).is_err() {
            return Err(self.budget_error());
        }
        let mut p = Program {
            launch: self,
            slots,
            locals: vec![LocalBuf::default(); kernel.allocs.len()],
            tokens: Vec::new(),
            clock,
            pid,
        };
        match p.block(&kernel.body) {
            Ok(()) => Ok(p.clock.finish()),
            Err(fault) => Err(p.error(fault)),
        }
    }
}

impl Launch<'_> {
    /// Spends `units` of the launch's simulation budget.
    fn charge(&mut self, units: u64) -> Run<()> {
        self.work = self.work.saturating_add(units);
        if self.work > self.work_limit {
            Err(Fault::Budget)
        } else {
            Ok(())
        }
    }

    fn budget_error(&self) -> SimError {
        SimError::Budget {
            kernel: self.kernel.name().to_string(),
            limit: self.work_limit,
        }
    }
}

fn rc(t: Tile) -> Val {
    Val::Tile(Rc::new(t))
}

impl Program<'_, '_> {
    fn error(&self, fault: Fault) -> SimError {
        let kernel = self.launch.kernel;
        let name = kernel.name().to_string();
        match fault {
            Fault::Message(message) => SimError::Program {
                kernel: name,
                program: self.pid,
                message,
            },
            Fault::Budget => self.launch.budget_error(),
            Fault::OutOfBounds {
                site,
                lane,
                shape,
                offset,
                param,
                write,
            } => {
                let s = &kernel.sites[site];
                let buffer = kernel.kernel().params[param].name.clone();
                let len = self.launch.param_buffers[param]
                    .and_then(|b| self.launch.buffers[b].as_ref())
                    .map_or(0, |b| b.elems.len());
                SimError::OutOfBounds(Box::new(OutOfBounds {
                    kernel: name,
                    program: self.pid,
                    access: s.text.clone(),
                    location: s.location.clone(),
                    lane: unravel(lane, &shape),
                    offset,
                    buffer,
                    len,
                    write,
                }))
            }
        }
    }

    fn block(&mut self, body: &[CStmt]) -> Run<()> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &CStmt) -> Run<()> {
        self.launch.charge(STEP_COST)?;
        match s {
            CStmt::Assign(slot, e) => {
                let v = self.eval(e)?;
                self.slots[*slot] = Some(v);
            }
            CStmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let (a, z, d) = (self.int(start)?, self.int(end)?, self.int(step)?);
                if d == 0 {
                    return Err(Fault::Message("range step is 0".into()));
                }
                let (a128, z128, d128) = (a as i128, z as i128, d as i128);
                let trips = if d > 0 {
                    (z128 - a128 + d128 - 1).div_euclid(d128).max(0)
                } else {
                    (a128 - z128 - d128 - 1).div_euclid(-d128).max(0)
                };
                if trips > MAX_LOOP_TRIPS {
                    return Err(Fault::Message(format!(
                        "range({a}, {z}, {d}) runs {trips} iterations, more than the \
                         simulator's limit of {MAX_LOOP_TRIPS}"
                    )));
                }
                let dtype = match &start.ty {
                    Ty::Tile(d, _) => *d,
                    _ => DType::I32,
                };
                for i in 0..trips {
                    let v = (a128 + i * d128) as i64;
                    self.slots[*var] = Some(rc(Tile {
                        dtype,
                        shape: Vec::new(),
                        elems: Elems::I(vec![v]),
                    }));
                    self.clock.scalar(1.0);
                    self.launch.charge(STEP_COST)?;
                    self.block(body)?;
                }
            }
            CStmt::Store {
                ptr,
                value,
                mask,
                site,
            } => {
                let p = self.ptr(ptr)?;
                let v = self.tile(value)?;
                let v = v.broadcast(&p.shape);
                let m = self.mask(mask.as_ref(), &p.shape)?;
                let buf = self.buffer_of(p.param)?;
                let b = self.launch.buffers[buf]
                    .as_mut()
                    .ok_or_else(|| Fault::Message("a bound buffer was freed".into()))?;
                let traffic = scatter(b, &p.offsets, m.as_deref(), &v)
                    .map_err(|e| self.oob(e, *site, &p, true))?;
                self.launch.bytes.lpddr_write += traffic.lpddr;
                self.launch.bytes.sram_write += traffic.sram;
                self.clock.post(traffic);
            }
            CStmt::Check {
                cond,
                mask,
                site,
                reason,
            } => {
                let c = self.tile(cond)?;
                let mut shape = c.shape.clone();
                let m = match mask {
                    Some(m) => {
                        let t = self.tile(m)?;
                        shape = broadcast_shapes(&c.shape, &t.shape)
                            .map_err(|e| Fault::Message(e.to_string()))?;
                        let Elems::B(v) = &t.elems else {
                            return Err(Fault::Message("a mask that is not bool".into()));
                        };
                        Some(expand(v, &t.shape, &shape).into_owned())
                    }
                    None => None,
                };
                let Elems::B(v) = &c.elems else {
                    return Err(Fault::Message("a check of a value that is not bool".into()));
                };
                let v = expand(v, &c.shape, &shape);
                self.vector(v.len(), &[DType::Bool]);
                let failed = (0..v.len()).find(|&i| !v[i] && m.as_ref().is_none_or(|m| m[i]));
                if let Some(lane) = failed {
                    let why = reason.as_ref().map_or(String::new(), |r| format!("{r}: "));
                    return Err(Fault::Message(format!(
                        "{why}{} failed in lane {}",
                        self.site_text(*site),
                        ShapeDisplay(&unravel(lane, &shape))
                    )));
                }
            }
            CStmt::DmaWait(t) => {
                let Val::Token(id) = self.eval(t)? else {
                    return Err(Fault::Message(
                        "dma_wait of a value that is not a token".into(),
                    ));
                };
                let (done, buf) = self.tokens[id];
                self.clock.wait(done);
                if self.locals[buf].pending == Some(id) {
                    self.locals[buf].pending = None;
                }
            }
        }
        Ok(())
    }

    fn oob(&self, e: OutOfRange, site: usize, p: &PtrTile, write: bool) -> Fault {
        Fault::OutOfBounds {
            site,
            lane: e.lane,
            shape: p.shape.clone(),
            offset: e.offset,
            param: p.param,
            write,
        }
    }

    fn buffer_of(&self, param: usize) -> Run<usize> {
        self.launch.param_buffers[param]
            .ok_or_else(|| Fault::Message("a pointer without a bound buffer".into()))
    }

    fn int(&mut self, e: &CExpr) -> Run<i64> {
        self.tile(e)?
            .as_int()
            .ok_or_else(|| Fault::Message("expected an integer scalar".into()))
    }

    fn tile(&mut self, e: &CExpr) -> Run<Rc<Tile>> {
        match self.eval(e)? {
            Val::Tile(t) => Ok(t),
            _ => Err(Fault::Message("expected a tile".into())),
        }
    }

    fn ptr(&mut self, e: &CExpr) -> Run<Rc<PtrTile>> {
        match self.eval(e)? {
            Val::Ptr(p) => Ok(p),
            _ => Err(Fault::Message("expected a pointer".into())),
        }
    }

    /// A mask broadcast to `shape`.
    fn mask(&mut self, m: Option<&CExpr>, shape: &[usize]) -> Run<Option<Vec<bool>>> {
        let Some(m) = m else { return Ok(None) };
        let t = self.tile(m)?;
        match &t.elems {
            Elems::B(v) => Ok(Some(expand(v, &t.shape, shape).into_owned())),
            _ => Err(Fault::Message("a mask that is not bool".into())),
        }
    }

    /// Charges vector work on `elems` elements of the given dtypes.
    fn vector(&mut self, elems: usize, dtypes: &[DType]) {
        self.clock.vector(elems, super::timing::Width::of(dtypes));
        self.launch.vector_ops += elems as u64;
    }

    /// Gathers from global memory for a load or a DMA.
    fn gather(
        &mut self,
        ptr: &CExpr,
        mask: Option<&CExpr>,
        other: Option<&CExpr>,
        site: usize,
    ) -> Run<(Tile, Traffic)> {
        let p = self.ptr(ptr)?;
        let m = self.mask(mask, &p.shape)?;
        let o = match other {
            Some(o) => Some(self.tile(o)?.broadcast(&p.shape)),
            None => None,
        };
        let buf = self.buffer_of(p.param)?;
        let launch = &mut *self.launch;
        let b = launch.buffers[buf]
            .as_ref()
            .ok_or_else(|| Fault::Message("a bound buffer was freed".into()))?;
        let dtype = b.ty.dtype;
        let (elems, traffic) = gather(
            b,
            buf,
            &mut launch.cache,
            &p.offsets,
            m.as_deref(),
            o.as_ref(),
        )
        .map_err(|e| self.oob(e, site, &p, false))?;
        self.launch.bytes.lpddr_read += traffic.lpddr;
        self.launch.bytes.sram_read += traffic.sram;
        let tile = Tile {
            dtype,
            shape: p.shape.clone(),
            elems,
        };
        Ok((tile, traffic))
    }

    fn site_text(&self, site: usize) -> String {
        let s = &self.launch.kernel.sites[site];
        match &s.location {
            Some(l) => format!("`{}` at {l}", s.text),
            None => format!("`{}`", s.text),
        }
    }

    fn alloc_text(&self, alloc: usize) -> String {
        let a = &self.launch.kernel.allocs[alloc].site;
        match &a.location {
            Some(l) => format!("`{}` ({l})", a.text),
            None => format!("`{}`", a.text),
        }
    }

    fn eval(&mut self, e: &CExpr) -> Run<Val> {
        let (dtype, shape) = match &e.ty {
            Ty::Tile(d, s) | Ty::Ptr(d, s) | Ty::Local(d, s) => (*d, s.as_slice()),
            Ty::Token => (DType::Bool, &[][..]),
        };
        let n: usize = shape.iter().product();
        self.launch.charge(STEP_COST + n as u64)?;
        Ok(match &e.kind {
            CKind::Lit(l) => rc(Tile::lit(dtype, *l)),
            CKind::Slot(s) => self.slots[*s]
                .clone()
                .ok_or_else(|| Fault::Message("read of an unset variable".into()))?,
            CKind::ProgramId(axis) | CKind::NumPrograms(axis) => {
                let v = if matches!(e.kind, CKind::ProgramId(_)) {
                    self.pid[*axis]
                } else {
                    self.launch.grid[*axis]
                };
                self.clock.scalar(1.0);
                rc(Tile {
                    dtype: DType::I32,
                    shape: Vec::new(),
                    elems: Elems::I(vec![v as i64]),
                })
            }
            CKind::Arange(start) => {
                self.vector(n, &[DType::I32]);
                rc(Tile {
                    dtype: DType::I32,
                    shape: shape.to_vec(),
                    elems: Elems::I((0..n as i64).map(|i| start + i).collect()),
                })
            }
            CKind::Broadcast(x) => match self.eval(x)? {
                Val::Tile(t) => {
                    self.vector(n, &[dtype]);
                    rc(t.broadcast(shape))
                }
                Val::Ptr(p) => Val::Ptr(Rc::new(PtrTile {
                    param: p.param,
                    shape: shape.to_vec(),
                    offsets: expand(&p.offsets, &p.shape, shape).into_owned(),
                })),
                _ => return Err(Fault::Message("broadcast of a non-tile".into())),
            },
            CKind::Unary(op, x) => {
                let t = self.tile(x)?;
                self.vector(n, &[dtype]);
                rc(t.unary(*op)?)
            }
            CKind::Binary(op, a, b) => {
                let (x, y) = (self.tile(a)?, self.tile(b)?);
                self.vector(n, &[x.dtype, dtype]);
                rc(Tile::binary(*op, &x, &y, dtype, shape)?)
            }
            CKind::PtrOffset(p, o, negate) => {
                let (p, o) = (self.ptr(p)?, self.tile(o)?);
                let Elems::I(off) = &o.elems else {
                    return Err(Fault::Message(
                        "a pointer offset that is not an integer".into(),
                    ));
                };
                let (base, off) = (
                    expand(&p.offsets, &p.shape, shape),
                    expand(off, &o.shape, shape),
                );
                let offsets = base
                    .iter()
                    .zip(off.iter())
                    .map(|(&b, &d)| {
                        if *negate {
                            b.wrapping_sub(d)
                        } else {
                            b.wrapping_add(d)
                        }
                    })
                    .collect();
                Val::Ptr(Rc::new(PtrTile {
                    param: p.param,
                    shape: shape.to_vec(),
                    offsets,
                }))
            }
            CKind::Cast(x) => {
                let t = self.tile(x)?;
                self.vector(n, &[t.dtype, dtype]);
                rc(t.cast(dtype))
            }
            CKind::Reshape(x) => match self.eval(x)? {
                Val::Tile(t) => rc(t.reshape(shape)),
                Val::Ptr(p) => Val::Ptr(Rc::new(PtrTile {
                    param: p.param,
                    shape: shape.to_vec(),
                    offsets: p.offsets.clone(),
                })),
                _ => return Err(Fault::Message("indexing of a non-tile".into())),
            },
            CKind::Trans(x) => {
                let t = self.tile(x)?;
                self.vector(n, &[dtype]);
                rc(t.trans()?)
            }
            CKind::Reduce(op, x, axis) => {
                let t = self.tile(x)?;
                self.vector(t.numel(), &[dtype]);
                rc(t.reduce(*op, *axis)?)
            }
            CKind::Dot(a, b, acc) => {
                let (x, y) = (self.tile(a)?, self.tile(b)?);
                let c = match acc {
                    Some(c) => Some(self.tile(c)?),
                    None => None,
                };
                let (m, k) = (x.shape[0], x.shape[1]);
                let flops = 2 * m * k * y.shape[1];
                self.launch.charge((m * k * y.shape[1]) as u64)?;
                self.clock.dot(flops as f64, x.dtype);
                self.launch.dot_flops += flops as u64;
                rc(Tile::dot(&x, &y, c.as_deref())?)
            }
            CKind::Where(c, a, b) => {
                let (c, x, y) = (self.tile(c)?, self.tile(a)?, self.tile(b)?);
                self.vector(n, &[dtype]);
                rc(c.select(&x, &y, shape)?)
            }
            CKind::Load {
                ptr,
                mask,
                other,
                site,
            } => {
                let (t, traffic) = self.gather(ptr, mask.as_deref(), other.as_deref(), *site)?;
                self.clock.sync(traffic);
                rc(t)
            }
            CKind::LocalAlloc(site) => Val::Local(*site),
            CKind::DmaAsync {
                buf,
                ptr,
                mask,
                other,
                site,
            } => {
                let Val::Local(b) = self.eval(buf)? else {
                    return Err(Fault::Message("dma_async into a non-buffer".into()));
                };
                if self.locals[b].pending.is_some() {
                    return Err(Fault::Message(format!(
                        "{} copies into {} while an earlier copy into it is still in flight; \
                         dma_wait on that copy's token first",
                        self.site_text(*site),
                        self.alloc_text(b)
                    )));
                }
                let (t, traffic) = self.gather(ptr, mask.as_deref(), other.as_deref(), *site)?;
                let bytes = (t.numel() * t.dtype.size_bytes()) as u64;
                self.launch.bytes.local_write += bytes;
                let done = self.clock.post(traffic);
                let id = self.tokens.len();
                self.tokens.push((done, b));
                self.locals[b] = LocalBuf {
                    data: Some(Rc::new(t)),
                    pending: Some(id),
                };
                Val::Token(id)
            }
            CKind::LocalLoad { buf, site } => {
                let Val::Local(b) = self.eval(buf)? else {
                    return Err(Fault::Message("local_load of a non-buffer".into()));
                };
                if self.locals[b].pending.is_some() {
                    return Err(Fault::Message(format!(
                        "{} reads {} before the copy into it has been waited for; call \
                         dma_wait on the token of its dma_async first",
                        self.site_text(*site),
                        self.alloc_text(b)
                    )));
                }
                let Some(t) = self.locals[b].data.clone() else {
                    return Err(Fault::Message(format!(
                        "{} reads {}, which no dma_async has filled yet",
                        self.site_text(*site),
                        self.alloc_text(b)
                    )));
                };
                let bytes = (t.numel() * t.dtype.size_bytes()) as u64;
                self.launch.bytes.local_read += bytes;
                self.clock.local_read(bytes);
                Val::Tile(t)
            }
        })
    }
}

/// The multi-index of linear position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (k, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[k] = i % d;
            i /= d;
        }
    }
    idx
}

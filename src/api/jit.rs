//! `jit`: capture an ordinary Rust closure over symbolic tensors as a graph, compile
//! it, and reuse the compiled code while its guard holds. The Dynamo analogue.
//!
//! # How a call runs
//!
//! A [`Jit`] wraps a closure `Fn([Var; N]) -> outputs`. On [`Jit::run`] the input
//! *signature* (each input's dtype and shape) is the guard, and the cache maps
//! signatures to compiled programs:
//!
//! 1. **hit**: the signature was compiled before; the compiled program runs;
//! 2. **miss** with room in the cache: the closure is *traced* (called once with
//!    symbolic [`Var`]s of the input types, which record every op into a fresh
//!    [`Graph`]), the graph is compiled with the `Jit`'s [`Options`], the
//!    result cached and run. The first compile is a compile, every later one a
//!    *recompile*: the guard failed for every cached signature;
//! 3. **miss** with the cache full (`cache_limit` entries, default 8 like Dynamo's
//!    `cache_size_limit`): by default the least recently used signature is evicted and
//!    the new one compiled ([`WhenFull::Evict`]; each eviction is a [`JitEvent`]), so a
//!    long-running process keeps compiled code for the shapes it sees now. With
//!    [`WhenFull::Eager`] (Dynamo's behaviour) the call runs *eagerly* instead, and says
//!    so once.
//!
//! Eager means op by op on the reference interpreter: the closure is traced and each op
//! computes and materializes its whole result before the next one starts; nothing is
//! compiled, optimized or fused. [`Jit::run_eager`] (and [`eager`]) run any call that
//! way, which is the baseline compiled code is measured and checked against.
//!
//! Because only shapes and dtypes are guarded, the closure must compute the same ops
//! for the same signature: a closure that branches on captured mutable state would be
//! replayed with the state of its first trace, as with `torch.compile`. Weights are
//! inputs like any other tensor (the graph IR has no tensor constants, so a captured
//! host [`Tensor`] cannot become part of the graph); shapes, flags and sizes may be
//! captured freely.
//!
//! # Arity
//!
//! The closure takes its inputs as one array, `|[x, w]| ...`: the pattern fixes the
//! arity (any number, checked at run time against the number of inputs) and lets the
//! compiler infer the element type, which a trait over closures of 1, 2, 3, ... plain
//! arguments could not. It returns a [`Var`], a tuple of up to four, an array or a
//! `Vec` of them, or a `Result` of any of these ([`IntoOutputs`]).
//!
//! # Observing the cache
//!
//! [`Jit::stats`] counts calls, hits, misses, compiles, recompiles and eager calls.
//! Every compile and the eager fallback is a [`JitEvent`]; by default compiles are logged
//! to standard error when the environment variable `FERRITE_LOG` is set (to anything but
//! `0`) and the fallback is always reported, once; [`Jit::on_event`] routes every event to
//! a hook instead.

use super::automatic::Automatic;
use super::builder::{Graph, Var};
use super::compile::{check_inputs, compile_ir, Compiled, Options};
use super::error::{Error, Result};
use super::host::Tensor;
use super::memory::interp_bytes;
use ferrite_ir::types::ShapeDisplay;
use ferrite_ir::{interpret, TensorType};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Dynamo's default `cache_size_limit`: compiled signatures kept per function.
pub const DEFAULT_CACHE_LIMIT: usize = 8;

/// What a [`Jit`] does with a new signature when its cache is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Evict the least recently used signature and compile the new one (the default).
    #[default]
    Evict,
    /// Run new signatures eagerly, op by op on the interpreter, keeping the cache as it
    /// is (Dynamo's fall back once `cache_size_limit` is reached).
    Eager,
}

/// The environment variable that turns on a log line per compile.
pub const LOG_ENV: &str = "FERRITE_LOG";

/// What a traced closure returns: one or more tensors of its graph.
pub trait IntoOutputs {
    /// The outputs in order, or the error the closure returned.
    fn into_outputs(self) -> Result<Vec<Var>>;
}

impl IntoOutputs for Var {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(vec![self])
    }
}

impl IntoOutputs for Vec<Var> {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(self)
    }
}

impl<const M: usize> IntoOutputs for [Var; M] {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(self.into())
    }
}

impl IntoOutputs for (Var, Var) {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(vec![self.0, self.1])
    }
}

impl IntoOutputs for (Var, Var, Var) {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(vec![self.0, self.1, self.2])
    }
}

impl IntoOutputs for (Var, Var, Var, Var) {
    fn into_outputs(self) -> Result<Vec<Var>> {
        Ok(vec![self.0, self.1, self.2, self.3])
    }
}

impl<R: IntoOutputs> IntoOutputs for Result<R> {
    fn into_outputs(self) -> Result<Vec<Var>> {
        self?.into_outputs()
    }
}

/// Something that happened in a [`Jit`]'s cache. `Display` gives the log line.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum JitEvent {
    /// A signature was traced and compiled.
    Compiled {
        /// The function's name.
        name: String,
        /// The input types that were compiled for.
        signature: Vec<TensorType>,
        /// True when an earlier signature had been compiled already.
        recompile: bool,
        /// Cache entries after this compile.
        entries: usize,
        /// The cache limit.
        limit: usize,
        /// Tracing and compiling time.
        time: Duration,
        /// Kernels in the compiled program (none for the interpreter target).
        kernels: Option<usize>,
    },
    /// Tracing or compiling a signature failed; the call returns the error.
    CompileFailed {
        /// The function's name.
        name: String,
        /// The input types.
        signature: Vec<TensorType>,
        /// What went wrong.
        error: Error,
    },
    /// The cache was full: the least recently used signature was dropped to make room.
    Evicted {
        /// The function's name.
        name: String,
        /// The signature dropped.
        evicted: Vec<TensorType>,
        /// The new signature that needed its place.
        signature: Vec<TensorType>,
        /// The cache limit.
        limit: usize,
    },
    /// Automatic dynamic shapes ([`Jit::automatic_dynamic`]): a signature with other sizes
    /// than an earlier one made the closure's graph generalize over the changed axes.
    Generalized {
        /// The function's name.
        name: String,
        /// The parameters' types over the size symbols (`(f32[s0, s1, 64], ..)`).
        types: String,
        /// How the generalized graph runs ([`super::dynamic::Dynamic::summary`]).
        summary: String,
    },
    /// Automatic dynamic shapes: the traces did not generalize (reported once per dtypes
    /// and ranks); each signature is compiled on its own.
    NotGeneralized {
        /// The function's name.
        name: String,
        /// Why.
        why: String,
    },
    /// The cache is full: calls with new signatures run eagerly from now on (reported once).
    EagerFallback {
        /// The function's name.
        name: String,
        /// The first signature that did not fit.
        signature: Vec<TensorType>,
        /// The cache limit.
        limit: usize,
    },
}

/// `(f32[2, 3], i64[4])`.
struct SignatureDisplay<'a>(&'a [TensorType]);

impl fmt::Display for SignatureDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}{}", t.dtype, ShapeDisplay(&t.shape))?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for JitEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitEvent::Compiled {
                name,
                signature,
                recompile,
                entries,
                limit,
                time,
                kernels,
            } => {
                write!(
                    f,
                    "ferrite::jit `{name}`: {} for {} in {:.1} ms",
                    if *recompile { "recompiled" } else { "compiled" },
                    SignatureDisplay(signature),
                    time.as_secs_f64() * 1e3
                )?;
                if let Some(k) = kernels {
                    write!(f, ", {k} kernel{}", if *k == 1 { "" } else { "s" })?;
                }
                write!(f, " (cache {entries}/{limit})")
            }
            JitEvent::CompileFailed {
                name,
                signature,
                error,
            } => write!(
                f,
                "ferrite::jit `{name}`: compiling for {} failed: {error}",
                SignatureDisplay(signature)
            ),
            JitEvent::Evicted {
                name,
                evicted,
                signature,
                limit,
            } => write!(
                f,
                "ferrite::jit `{name}`: cache limit of {limit} signatures reached; evicted {}, \
                 the least recently used, to compile {}",
                SignatureDisplay(evicted),
                SignatureDisplay(signature)
            ),
            JitEvent::Generalized {
                name,
                types,
                summary,
            } => write!(
                f,
                "ferrite::jit `{name}`: sizes changed; generalized to {types}: {summary}"
            ),
            JitEvent::NotGeneralized { name, why } => write!(
                f,
                "ferrite::jit `{name}`: sizes changed but the traces do not generalize ({why}); \
                 each signature compiles on its own"
            ),
            JitEvent::EagerFallback {
                name,
                signature,
                limit,
            } => write!(
                f,
                "ferrite::jit `{name}`: cache limit of {limit} signatures reached; {} and \
                 every other new signature run eagerly (op by op, not compiled)",
                SignatureDisplay(signature)
            ),
        }
    }
}

/// Counters of a [`Jit`]'s cache, as [`Jit::stats`] reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Calls of [`Jit::run`].
    pub calls: u64,
    /// Calls whose signature was cached.
    pub hits: u64,
    /// Calls whose signature was not cached (each compiled or ran eagerly).
    pub misses: u64,
    /// Traces and compiles, failed ones included.
    pub compiles: u64,
    /// Compiles after the first.
    pub recompiles: u64,
    /// Calls that ran eagerly because the cache was full ([`WhenFull::Eager`]).
    pub eager_calls: u64,
    /// Signatures evicted to make room ([`WhenFull::Evict`]).
    pub evictions: u64,
    /// Signatures in the cache now.
    pub cache_entries: usize,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) calls: AtomicU64,
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) compiles: AtomicU64,
    pub(super) eager_calls: AtomicU64,
    pub(super) evictions: AtomicU64,
}

/// The cache: compiled slots by key (a signature; a binding of size symbols for
/// [`super::dynamic`]), each with the tick of its last use.
pub(super) struct Cache<K = Vec<TensorType>> {
    pub(super) map: HashMap<K, (Arc<Slot>, u64)>,
    tick: u64,
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Cache {
            map: HashMap::new(),
            tick: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Cache<K> {
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The slot of `key`, marked as just used.
    pub(super) fn touch<Q>(&mut self, key: &Q) -> Option<Arc<Slot>>
    where
        K: Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(slot, used)| {
            *used = tick;
            slot.clone()
        })
    }

    pub(super) fn insert(&mut self, key: K, slot: Arc<Slot>) {
        self.tick += 1;
        self.map.insert(key, (slot, self.tick));
    }

    /// Removes and returns the least recently used key.
    pub(super) fn evict_lru(&mut self) -> Option<K> {
        let oldest = self
            .map
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(sig, _)| sig.clone())?;
        self.map.remove(&oldest);
        Some(oldest)
    }
}

/// A compile, done once per signature by whichever call gets there first; calls with
/// the same signature meanwhile wait for it rather than compiling again.
pub(super) type Slot = OnceLock<Result<Arc<Compiled>>>;

/// An event hook.
pub(super) type Hook = Arc<dyn Fn(&JitEvent) + Send + Sync>;

/// A closure compiled on demand, per input signature (see the [module docs](self)).
/// `Send + Sync` when the closure is: one `Jit` can serve many threads.
///
/// ```
/// use ferrite::{Tensor, Options, Target};
/// let f = ferrite::jit(|[x, y]| (x * &y).relu() + 1.0)
///     .options(Options::default().target(Target::Interp));
/// let a = Tensor::from_vec(&[2], vec![1.0f32, -2.0])?;
/// let b = Tensor::from_vec(&[2], vec![3.0f32, 4.0])?;
/// assert_eq!(f.run(&[&a, &b])?[0].as_slice::<f32>(), Some(&[4.0, 1.0][..]));
/// f.run(&[&a, &b])?; // same signature: a cache hit
/// let s = f.stats();
/// assert_eq!((s.calls, s.hits, s.compiles), (2, 1, 1));
/// # Ok::<(), ferrite::Error>(())
/// ```
pub struct Jit<F, const N: usize> {
    f: F,
    name: String,
    options: Options,
    cache_limit: usize,
    when_full: WhenFull,
    hook: Option<Hook>,
    cache: Mutex<Cache>,
    counters: Counters,
    warned_eager: AtomicBool,
    automatic: bool,
    auto: Automatic,
}

/// Wraps `f` for compiled, cached execution: see [`Jit`]. The closure takes its inputs
/// as an array, `|[x, w]| x.matmul(&w).relu()`.
pub fn jit<const N: usize, F, R>(f: F) -> Jit<F, N>
where
    F: Fn([Var; N]) -> R,
    R: IntoOutputs,
{
    Jit {
        f,
        name: "jit".into(),
        options: Options::default(),
        cache_limit: DEFAULT_CACHE_LIMIT,
        when_full: WhenFull::default(),
        hook: None,
        cache: Mutex::new(Cache::default()),
        counters: Counters::default(),
        warned_eager: AtomicBool::new(false),
        automatic: false,
        auto: Automatic::default(),
    }
}

/// Runs `f` once, eagerly (op by op on the reference interpreter, nothing compiled).
pub fn eager<const N: usize, F, R, A>(f: F, inputs: &[A]) -> Result<Vec<Tensor>>
where
    F: Fn([Var; N]) -> R,
    R: IntoOutputs,
    A: Borrow<Tensor>,
{
    jit(f).name("eager").run_eager(inputs)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The cache map is updated by single inserts and removes; a panic elsewhere leaves it valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn log_enabled() -> bool {
    std::env::var(LOG_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl<F, R, const N: usize> Jit<F, N>
where
    F: Fn([Var; N]) -> R,
    R: IntoOutputs,
{
    /// Names the function (in graphs, dumps and log lines; default `jit`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Compile options for every signature (default: CPU, fused, optimized).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// How many compiled signatures to keep (default 8; 0 runs every call eagerly).
    pub fn cache_limit(mut self, limit: usize) -> Self {
        self.cache_limit = limit;
        self
    }

    /// What to do with a new signature when the cache is full (default
    /// [`WhenFull::Evict`]).
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.when_full = policy;
        self
    }

    /// Dynamo's automatic dynamic shapes (default off): once a call comes with other sizes
    /// than an earlier one of the same dtypes and ranks, the changed axes become size
    /// symbols and the closure is compiled once over them ([`super::dynamic`]), so later
    /// sizes run without recompiling (see `src/api/automatic.rs`). Each generalization is
    /// a [`JitEvent::Generalized`] (or [`JitEvent::NotGeneralized`], saying why not).
    pub fn automatic_dynamic(mut self, on: bool) -> Self {
        self.automatic = on;
        self
    }

    /// Sends every [`JitEvent`] to `hook` instead of the default log on standard error.
    pub fn on_event(mut self, hook: impl Fn(&JitEvent) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Runs the function on `inputs`: compiled for their signature (compiling on the
    /// first call with it, evicting the least recently used signature when the cache is
    /// full), or eagerly when the cache is full and the policy says so. Errors are those of
    /// tracing (build errors), compiling and [`Compiled::run`].
    pub fn run<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Vec<Tensor>> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let signature = signature(inputs, N)?;
        if self.automatic {
            if let Some(d) = self.auto.program(inputs) {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return d.run(inputs);
            }
            if !lock(&self.cache).map.contains_key(&signature) {
                let general = self.auto.on_miss(
                    &self.name,
                    &signature,
                    &|sig| self.trace(sig),
                    &self.options,
                    &self.hook,
                    &|e| self.emit(e),
                );
                if let Some(d) = general {
                    self.counters.misses.fetch_add(1, Ordering::Relaxed);
                    self.counters.compiles.fetch_add(1, Ordering::Relaxed);
                    return d.run(inputs);
                }
            }
        }
        let mut evicted = None;
        let slot = {
            let mut cache = lock(&self.cache);
            if let Some(slot) = cache.touch(&signature) {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                Some(slot)
            } else {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                if cache.len() >= self.cache_limit
                    && self.cache_limit > 0
                    && self.when_full == WhenFull::Evict
                {
                    evicted = cache.evict_lru();
                }
                if cache.len() < self.cache_limit {
                    let slot = Arc::new(Slot::new());
                    cache.insert(signature.clone(), slot.clone());
                    Some(slot)
                } else {
                    None
                }
            }
        };
        if let Some(old) = evicted {
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            self.emit(JitEvent::Evicted {
                name: self.name.clone(),
                evicted: old,
                signature: signature.clone(),
                limit: self.cache_limit,
            });
        }
        let Some(slot) = slot else {
            self.counters.eager_calls.fetch_add(1, Ordering::Relaxed);
            if !self.warned_eager.swap(true, Ordering::Relaxed) {
                self.emit(JitEvent::EagerFallback {
                    name: self.name.clone(),
                    signature: signature.clone(),
                    limit: self.cache_limit,
                });
            }
            return self.eager(&signature, inputs);
        };
        match slot.get_or_init(|| self.compile(&signature)) {
            Ok(compiled) => compiled.run(inputs),
            Err(e) => {
                // Failures are not cached: they hold no slot, and a later call retries.
                let mut cache = lock(&self.cache);
                if cache
                    .map
                    .get(&signature)
                    .is_some_and(|(s, _)| Arc::ptr_eq(s, &slot))
                {
                    cache.map.remove(&signature);
                }
                Err(e.clone())
            }
        }
    }

    /// Runs the function eagerly on `inputs` (see the [module docs](self)), whatever the
    /// cache holds. Not counted in [`Jit::stats`].
    pub fn run_eager<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Vec<Tensor>> {
        let signature = signature(inputs, N)?;
        self.eager(&signature, inputs)
    }

    /// Traces the function for input types `signature` and returns its graph, without
    /// compiling or caching it.
    pub fn trace(&self, signature: &[TensorType]) -> Result<ferrite_ir::Graph> {
        if signature.len() != N {
            return Err(Error::InputCount {
                expected: N,
                got: signature.len(),
            });
        }
        let g = Graph::new(self.name.clone());
        let args: [Var; N] =
            std::array::from_fn(|i| g.input(&format!("arg{i}"), signature[i].clone()));
        for out in (self.f)(args).into_outputs()? {
            g.output(&out);
        }
        g.to_ir()
    }

    /// The compiled program for `signature`, if it is cached.
    pub fn compiled(&self, signature: &[TensorType]) -> Option<Arc<Compiled>> {
        let slot = lock(&self.cache).map.get(signature)?.0.clone();
        slot.get()?.as_ref().ok().cloned()
    }

    /// The cached signatures, in no particular order.
    pub fn signatures(&self) -> Vec<Vec<TensorType>> {
        lock(&self.cache).map.keys().cloned().collect()
    }

    /// Empties the cache (the counters keep counting; the eager notice may come again).
    pub fn clear_cache(&self) {
        lock(&self.cache).map.clear();
        self.warned_eager.store(false, Ordering::Relaxed);
    }

    /// The counters.
    pub fn stats(&self) -> JitStats {
        let c = &self.counters;
        let compiles = c.compiles.load(Ordering::Relaxed);
        JitStats {
            calls: c.calls.load(Ordering::Relaxed),
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            compiles,
            recompiles: compiles.saturating_sub(1),
            eager_calls: c.eager_calls.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            cache_entries: lock(&self.cache).len(),
        }
    }

    fn compile(&self, signature: &[TensorType]) -> Result<Arc<Compiled>> {
        let start = Instant::now();
        let previous = self.counters.compiles.fetch_add(1, Ordering::Relaxed);
        let compiled = self
            .trace(signature)
            .and_then(|g| compile_ir(&g, &self.options));
        reported(
            |e| self.emit(e),
            self.name.clone(),
            signature.to_vec(),
            previous > 0,
            || lock(&self.cache).len(),
            self.cache_limit,
            start,
            compiled,
        )
    }

    fn eager<A: Borrow<Tensor>>(
        &self,
        signature: &[TensorType],
        inputs: &[A],
    ) -> Result<Vec<Tensor>> {
        let g = self.trace(signature)?;
        let (needs, limit) = (interp_bytes(&g), self.options.memory_budget());
        if needs > limit {
            return Err(Error::MemoryBudget {
                what: format!("interpreting `{}` eagerly", self.name),
                needs,
                limit,
            });
        }
        let tensors = check_inputs(&g, inputs)?;
        interpret(&g, &tensors)
            .map_err(|e| Error::Run {
                message: e.to_string(),
            })?
            .into_iter()
            .map(Tensor::from_backend)
            .collect()
    }

    fn emit(&self, event: JitEvent) {
        emit_to(&self.hook, event)
    }
}

/// Hands `event` to `hook`, or without one prints it to stderr when `FERRITE_JIT_LOG` asks
/// (an eager fallback always).
pub(crate) fn emit_to(hook: &Option<Hook>, event: JitEvent) {
    match hook {
        Some(hook) => hook(&event),
        None => {
            if matches!(event, JitEvent::EagerFallback { .. }) || log_enabled() {
                eprintln!("{event}");
            }
        }
    }
}

/// Reports one compile of a cache entry, started at `start`, as a `Compiled` or a
/// `CompileFailed` event, and returns its result: the jit's and `Dynamic`'s compiles
/// report alike. `entries` is read once the compile succeeded.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reported(
    emit: impl Fn(JitEvent),
    name: String,
    signature: Vec<TensorType>,
    recompile: bool,
    entries: impl FnOnce() -> usize,
    limit: usize,
    start: Instant,
    compiled: Result<Compiled>,
) -> Result<Arc<Compiled>> {
    match compiled {
        Ok(c) => {
            emit(JitEvent::Compiled {
                name,
                signature,
                recompile,
                entries: entries(),
                limit,
                time: start.elapsed(),
                kernels: c.kernel_count(),
            });
            Ok(Arc::new(c))
        }
        Err(error) => {
            emit(JitEvent::CompileFailed {
                name,
                signature,
                error: error.clone(),
            });
            Err(error)
        }
    }
}

/// The guard: each input's type. Checks the count first.
fn signature<A: Borrow<Tensor>>(inputs: &[A], n: usize) -> Result<Vec<TensorType>> {
    if inputs.len() != n {
        return Err(Error::InputCount {
            expected: n,
            got: inputs.len(),
        });
    }
    Ok(inputs.iter().map(|a| a.borrow().ty().clone()).collect())
}

impl<F, const N: usize> fmt::Debug for Jit<F, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit")
            .field("name", &self.name)
            .field("arity", &N)
            .field("options", &self.options)
            .field("cache_limit", &self.cache_limit)
            .field("cache_entries", &lock(&self.cache).len())
            .finish()
    }
}

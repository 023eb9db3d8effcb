//! Graphs with size symbols, compiled once and run at any binding.
//!
//! [`compile_dynamic`] takes a [`SymGraph`] (a `.fg` file with `x: f32[B, T, 256]`)
//! and gives a [`Dynamic`]: [`Dynamic::run`] reads the symbols' values from the
//! inputs' shapes (with [`Dynamic::run_with`], also from values given beside them,
//! for symbols no input carries), checks the graph's ranges and constraints, and
//! runs the graph at that binding.
//!
//! The backends have no symbolic kernels yet: each new binding is specialized, the
//! graph instantiated with its numbers and compiled as a static graph. The compiled
//! programs are kept in a bounded cache with least-recently-used eviction, the
//! [`jit`](super::jit) cache: its [`JitStats`] count hits, compiles and evictions,
//! and every compile and eviction is a [`JitEvent`] whose signature is the inputs'
//! types at that binding. [`Dynamic::summary`] says so.

use super::compile::{compile_ir, Compiled, Options};
use super::error::{Error, Result};
use super::host::Tensor;
use super::jit::{emit_to, lock, reported, Cache, Counters, Hook, JitEvent, JitStats, Slot};
use ferrite_ir::sym::{Binding, SymGraph};
use ferrite_ir::TensorType;
use std::borrow::Borrow;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
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
}

/// Prepares `graph` to run at any binding of its size symbols with `options`.
/// Nothing is compiled until a binding is run ([`Dynamic::run`]) or asked for
/// ([`Dynamic::specialize`]).
pub fn compile_dynamic(graph: &SymGraph, options: &Options) -> Result<Dynamic> {
    Ok(Dynamic {
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
        let b = self.binding(inputs, extra)?;
        self.specialize(&b)?.run(inputs)
    }

    /// The program compiled for binding `b` (compiled now unless cached).
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

    /// One line on how the graph runs: its symbols, and that each binding is compiled
    /// on its own (the backends have no symbolic kernels yet).
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
        format!(
            "`{}` has size symbols {}; specialized per binding (no symbolic kernels yet): \
             {} compiled, {} cached of {}, {} evicted",
            self.graph.name(),
            symbols.join(", "),
            s.compiles,
            s.cache_entries,
            self.cache_limit,
            s.evictions
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

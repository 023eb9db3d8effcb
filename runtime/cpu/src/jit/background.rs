//! Compiling a module's functions on other threads while its owner defines the rest.
//!
//! [`Jit::define`](super::Jit::define) with more than one compile thread hands each new
//! function to a [`Compiler`]: a queue and up to `threads - 1` workers, started as functions
//! arrive. The owner goes on emitting the next kernels while the first ones compile, and at
//! [`Compiler::finish`] it compiles what is left beside the workers. Before, every function
//! waited for the last one to be emitted, so the serial emission of a model's kernels (a third
//! of its codegen) was never overlapped with Cranelift.
//!
//! `define` has verified every function it queues (a rejected one is its caller's error,
//! not the module's). Results are returned in definition order, and the first failure in
//! that order is the error.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use cranelift_codegen::ir::Function;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::Context;

use super::{compile_function, JitError, MachineCode, OptLevel, Pending};

/// The queue of functions to compile and their results.
pub(super) struct Compiler {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Most workers (the owner compiles too, at `finish`).
    max_workers: usize,
    submitted: usize,
}

struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
    optimizer: OwnedTargetIsa,
    isa: OwnedTargetIsa,
    opt_level: OptLevel,
}

#[derive(Default)]
struct State {
    todo: VecDeque<(usize, Pending)>,
    done: Vec<Compiled>,
    /// No more functions will come: an idle worker leaves.
    closed: bool,
}

/// One function's outcome, by its place in definition order.
pub(super) struct Compiled {
    pub index: usize,
    pub pending: Pending,
    pub code: Result<MachineCode, JitError>,
}

impl Compiler {
    /// A compiler for `threads` threads in all (the owner's included); `optimizer` runs the
    /// mid-end and `isa` compiles, as in [`compile_function`].
    pub fn new(
        threads: usize,
        optimizer: OwnedTargetIsa,
        isa: OwnedTargetIsa,
        opt_level: OptLevel,
    ) -> Compiler {
        Compiler {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                arrived: Condvar::new(),
                optimizer,
                isa,
                opt_level,
            }),
            workers: Vec::new(),
            max_workers: threads.saturating_sub(1),
            submitted: 0,
        }
    }

    /// Queues `p` and wakes (or starts) a worker for it.
    pub fn submit(&mut self, p: Pending) {
        self.shared.lock().todo.push_back((self.submitted, p));
        self.submitted += 1;
        // One worker per queued function, up to the limit: a module of three functions
        // starts no more than three threads.
        if self.workers.len() < self.max_workers.min(self.submitted) {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("ferrite-cranelift".into())
                .spawn(move || shared.work());
            // Without a thread the owner compiles the function itself, at `finish`.
            if let Ok(handle) = spawned {
                self.workers.push(handle);
            }
        }
        self.shared.arrived.notify_one();
    }

    /// Compiles what is still queued (on this thread and the workers), waits for the
    /// workers, and returns every function's outcome in definition order. A worker's panic
    /// is resumed here.
    pub fn finish(mut self) -> Vec<Compiled> {
        self.shared.lock().closed = true;
        self.shared.arrived.notify_all();
        self.shared.work();
        for w in std::mem::take(&mut self.workers) {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        let mut done = std::mem::take(&mut self.shared.lock().done);
        done.sort_by_key(|c| c.index);
        debug_assert_eq!(done.len(), self.submitted);
        done
    }
}

impl Drop for Compiler {
    /// A module dropped before `finish` (an error while defining): the queued functions are
    /// dropped and the workers leave once their current function is done.
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closed = true;
        state.todo.clear();
        drop(state);
        self.shared.arrived.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Compiles queued functions until the queue is empty and closed.
    fn work(&self) {
        let mut ctx = Context::new();
        while let Some((index, mut pending)) = self.next() {
            let code = self.compile(&mut ctx, &mut pending);
            self.lock().done.push(Compiled {
                index,
                pending,
                code,
            });
        }
    }

    /// The next queued function, waiting for one while the queue is open; `None` once it
    /// is empty and closed.
    fn next(&self) -> Option<(usize, Pending)> {
        self.arrived
            .wait_while(self.lock(), |s| s.todo.is_empty() && !s.closed)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .todo
            .pop_front()
    }

    /// Compiles `p`'s function (moved out of `p`: only its name and id are needed after).
    fn compile(&self, ctx: &mut Context, p: &mut Pending) -> Result<MachineCode, JitError> {
        ctx.clear();
        ctx.func = std::mem::replace(&mut p.func, Function::new());
        compile_function(ctx, &*self.optimizer, &*self.isa, self.opt_level, p)
    }
}

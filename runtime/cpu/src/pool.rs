//! A persistent thread pool that splits a kernel's outer loop across cores.
//!
//! [`ThreadPool::parallel_for`] runs `task(chunk)` for every `chunk in 0..n_chunks`, with the
//! calling thread working alongside `threads - 1` long-lived workers. Workers claim chunks
//! from a shared atomic counter, so uneven chunks balance themselves. Dispatch is a few
//! atomic operations, not a thread spawn nor a lock: after a job a worker polls for
//! [`SPIN_BEFORE_SLEEP`] before it sleeps on a condition variable, because kernels of a
//! compiled program arrive back to back and waking a sleeping thread costs a futex call;
//! while a program runs it holds [`ThreadPool::stay_awake`] and idle workers poll for up
//! to [`SPIN_WHILE_AWAKE`].
//!
//! Behaviour worth knowing:
//! * The pool runs one job at a time. A `parallel_for` issued while another is in flight
//!   (from another thread, or nested inside a task) runs all its chunks on the calling
//!   thread. That never deadlocks and always makes progress; it only forgoes parallelism.
//! * A panicking task does not take the pool down: the panic is caught, the remaining
//!   unclaimed chunks are skipped, and `parallel_for` returns [`PoolError::TaskPanicked`]
//!   once every worker has left the job. Chunks already running finish normally.
//! * Dropping the pool stops and joins its workers.
//! * A [`Team`] is a view of the pool limited to its first `threads` threads (the caller
//!   and workers `1..threads`), optionally flushing denormals on its workers for the
//!   job ([`crate::denormals`]); workers outside the team skip its jobs. Programs
//!   compiled for fewer threads than the pool has run on such a team.
//! * [`global_pool`] is the one pool of the process, shared by every compiled program
//!   and by the GEMM: it starts with `FERRITE_NUM_THREADS` threads (or one per core)
//!   and grows, never shrinks, when a program asks for more ([`ThreadPool::grow`]).
//! * [`Team::parallel_pieces`] runs blocks of pieces with work stealing: a thread runs a
//!   whole block's pieces in order, threads left without a block take the last pieces of
//!   the block with the most left (the GEMM's blocks, so that a slow core's block does
//!   not hold up the product).
//! * For profiling, [`ThreadPool::parallel_for_timed`] records which thread ran each
//!   chunk, when and for how long, into a [`ChunkTimes`]. Worker 0 is the thread that
//!   called the loop, workers `1..threads` the pool's own threads. The untimed entry
//!   points read no clock and take no lock per chunk.

use crate::denormals::FlushDenormals;
use std::fmt;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long an idle worker polls for the next job before it goes to sleep.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// How long an idle worker polls while a [`ThreadPool::stay_awake`] hold lasts: long
/// enough to outlast a program's serial kernels (MobileNetV2's and ResNet-18's take
/// tens to a few hundred microseconds), short enough that a long one, or a pause of the
/// caller's between kernels, costs no more than a millisecond of a core per worker.
const SPIN_WHILE_AWAKE: Duration = Duration::from_millis(1);

/// [`ThreadPool::parallel_for_range`] cuts a range into at most this many chunks per thread:
/// enough to balance uneven work, few enough that claiming a chunk stays negligible.
const CHUNKS_PER_THREAD: usize = 4;

/// Why a parallel loop failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// A task panicked; the first panic's chunk index and message.
    TaskPanicked {
        /// The chunk whose task panicked.
        chunk: usize,
        /// The panic message (or a placeholder if the payload was not a string).
        message: String,
    },
    /// A pool was asked for zero threads.
    ZeroThreads,
    /// A pool was asked for more than [`MAX_THREADS`] threads.
    TooManyThreads(usize),
    /// The operating system refused to start a worker thread.
    Spawn(String),
    /// `FERRITE_NUM_THREADS` is not a number.
    BadCount(String),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::TaskPanicked { chunk, message } => {
                write!(f, "a parallel task panicked in chunk {chunk}: {message}")
            }
            PoolError::ZeroThreads => write!(f, "a thread pool needs at least one thread"),
            PoolError::TooManyThreads(n) => write!(
                f,
                "{n} threads asked for, at most {MAX_THREADS} are allowed"
            ),
            PoolError::Spawn(m) => write!(f, "cannot start a worker thread: {m}"),
            PoolError::BadCount(v) => write!(
                f,
                "{NUM_THREADS_VAR}={v:?} is not a thread count (1 to {MAX_THREADS})"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// One chunk of a timed parallel loop: which thread ran it, when, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// The thread that ran it: 0 is the caller of the loop, `1..threads` the workers.
    pub worker: usize,
    /// The chunk's index in the loop.
    pub chunk: usize,
    /// When it started, relative to the [`ChunkTimes`] origin.
    pub start: Duration,
    /// How long it ran.
    pub duration: Duration,
}

/// Where a timed parallel loop records its [`ChunkSpan`]s. Shared by all threads of the
/// loop; spans arrive in completion order. Reuse one across loops to collect several.
#[derive(Debug)]
pub struct ChunkTimes {
    origin: Instant,
    spans: Mutex<Vec<ChunkSpan>>,
}

impl ChunkTimes {
    /// An empty sink whose span starts are measured from `origin`.
    pub fn new(origin: Instant) -> Self {
        ChunkTimes {
            origin,
            spans: Mutex::new(Vec::new()),
        }
    }

    /// The instant span starts are relative to.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Records a span of `worker` running `chunk` from `start` until now.
    pub fn record(&self, worker: usize, chunk: usize, start: Instant) {
        let duration = start.elapsed();
        let span = ChunkSpan {
            worker,
            chunk,
            // An instant before the origin (not possible for loops started after it)
            // saturates to zero rather than panicking.
            start: start.saturating_duration_since(self.origin),
            duration,
        };
        lock(&self.spans).push(span);
    }

    /// How many spans have been recorded (and not taken).
    pub fn count(&self) -> usize {
        lock(&self.spans).len()
    }

    /// The spans recorded so far, leaving the sink empty.
    pub fn take(&self) -> Vec<ChunkSpan> {
        std::mem::take(&mut *lock(&self.spans))
    }
}

/// The most threads a pool may have: more is refused ([`PoolError::TooManyThreads`])
/// before any thread is started, rather than exhausting the system's threads.
pub const MAX_THREADS: usize = 1024;

/// The most blocks [`Team::parallel_pieces`] steals among (its counters live on the
/// stack: a steady-state run allocates nothing); more run without stealing.
pub const MAX_STEAL_BLOCKS: usize = 256;

/// The environment variable that sets the default number of threads.
pub const NUM_THREADS_VAR: &str = "FERRITE_NUM_THREADS";

/// The number of threads used by default: `FERRITE_NUM_THREADS` when it is set to a
/// count in `1..=MAX_THREADS`, else the machine's available parallelism, at most
/// [`MAX_THREADS`]. (An invalid value is ignored here; [`threads_from_env`] reports it,
/// and the `ferrite` library refuses it.)
pub fn default_thread_count() -> usize {
    threads_from_env()
        .ok()
        .flatten()
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)))
}

/// `FERRITE_NUM_THREADS` as a thread count: `None` when unset (or empty), an error
/// naming the value when it is not a count in `1..=MAX_THREADS`.
pub fn threads_from_env() -> Result<Option<usize>, PoolError> {
    let Some(value) = std::env::var_os(NUM_THREADS_VAR) else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<usize>() {
        Ok(0) => Err(PoolError::ZeroThreads),
        Ok(n) if n > MAX_THREADS => Err(PoolError::TooManyThreads(n)),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(PoolError::BadCount(text.to_string())),
    }
}

/// The process's thread pool, started on first use with [`default_thread_count`]
/// threads and grown to `threads` if it has fewer. Every compiled program runs on it.
pub fn global_pool(threads: usize) -> Result<&'static ThreadPool, PoolError> {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    if threads == 0 {
        return Err(PoolError::ZeroThreads);
    }
    if threads > MAX_THREADS {
        return Err(PoolError::TooManyThreads(threads));
    }
    let pool = match POOL.get() {
        Some(pool) => pool,
        None => {
            let pool = ThreadPool::new(default_thread_count().max(threads))?;
            // Another thread may have won the race; its pool is grown below.
            let _ = POOL.set(pool);
            POOL.get()
                .ok_or_else(|| PoolError::Spawn("the global pool vanished".into()))?
        }
    };
    pool.grow(threads)?;
    Ok(pool)
}

/// The `chunk`-th of `n_chunks` nearly equal, contiguous parts of `0..len` (the first
/// `len % n_chunks` parts are one longer). Parts past the end are empty.
pub fn split_range(len: usize, n_chunks: usize, chunk: usize) -> Range<usize> {
    if n_chunks == 0 || chunk >= n_chunks {
        return len..len;
    }
    let base = len / n_chunks;
    let extra = len % n_chunks;
    let start = chunk * base + chunk.min(extra);
    let size = base + usize::from(chunk < extra);
    start..start + size
}

/// A persistent pool of worker threads. `Send + Sync`: share it by reference or `Arc`.
pub struct ThreadPool {
    shared: Arc<Shared>,
    /// The workers, numbered `1..=workers.len()`; only ever added to (under this lock).
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Held by the thread whose job is published; see the module docs for contention.
    submit: Mutex<()>,
    /// Workers plus the caller: `workers.len() + 1`, readable without the lock.
    threads: AtomicUsize,
}

/// The first `threads` threads of a pool, flushing denormals on its workers or not: the
/// part of the pool one program runs on. Cheap to copy; see the module docs.
#[derive(Clone, Copy, Debug)]
pub struct Team<'p> {
    pool: &'p ThreadPool,
    threads: usize,
    flush_denormals: bool,
    /// Where [`Team::parallel_for`] records its chunks (see [`Team::timed`]).
    times: Option<&'p ChunkTimes>,
}

/// What the submitter and the workers share. Joining and leaving a job are atomic
/// operations, not lock round trips: with 15 workers taking a mutex twice per job, the
/// last of them entered a job 15-45 us after it was published on the 16-core Xeon, longer
/// than many whole kernels take there. The mutex is only for going to sleep and waking.
struct Shared {
    /// The published job, null when none (see [`Shared::job_for_worker`]).
    job: AtomicPtr<Job<'static>>,
    /// Bumped on every publish and at shutdown; idle workers poll it.
    generation: AtomicU64,
    /// Workers inside, or entering, the published job.
    active: AtomicUsize,
    /// Workers asleep, or about to sleep, on `work_ready`.
    sleeping: AtomicUsize,
    /// Holds of [`ThreadPool::stay_awake`]: while there are any, idle workers keep
    /// polling instead of going to sleep.
    awake: AtomicUsize,
    /// Whether a hold may keep workers polling: only while the pool has no more threads
    /// than the machine has cores (polling threads would take the cores of working ones).
    may_stay_awake: AtomicBool,
    shutdown: AtomicBool,
    /// Guards sleeping on `work_ready` (and nothing else).
    sleep_lock: Mutex<()>,
    work_ready: Condvar,
}

/// How the submitter retires a job and a worker joins one, without a lock:
///
/// * the submitter stores the job (`SeqCst`), bumps the generation, runs chunks, then
///   stores null (`SeqCst`) and waits until `active` is zero;
/// * a worker increments `active` (`SeqCst`), then loads the job (`SeqCst`) and runs it
///   only if it is not null, and decrements `active` when it is done.
///
/// In the single total order of `SeqCst` operations, a worker that loads the job before
/// the submitter's null store has incremented `active` before that store too, so the
/// submitter's later loads of `active` see it until the worker leaves: the job (on the
/// submitter's stack) outlives every worker's use of it. A worker that loads after the
/// null store sees null (or a later job) and touches nothing.
impl Shared {
    fn job_for_worker(&self) -> *const Job<'static> {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.job.load(Ordering::SeqCst)
    }
}

struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync + 'a),
    n_chunks: usize,
    /// The team's size: workers numbered at or above it skip the job.
    team: usize,
    /// Whether the job's workers flush denormals while they run it.
    flush_denormals: bool,
    next: AtomicUsize,
    failure: Mutex<Option<(usize, String)>>,
    /// Where to record chunk timings; `None` outside profiling.
    times: Option<&'a ChunkTimes>,
}

impl<'a> Job<'a> {
    fn new(
        task: &'a (dyn Fn(usize) + Sync + 'a),
        n_chunks: usize,
        team: usize,
        flush_denormals: bool,
        times: Option<&'a ChunkTimes>,
    ) -> Self {
        Job {
            task,
            n_chunks,
            team,
            flush_denormals,
            next: AtomicUsize::new(0),
            failure: Mutex::new(None),
            times,
        }
    }

    /// Claims and runs chunks until none are left; `worker` identifies this thread in
    /// chunk timings.
    fn run(&self, worker: usize) {
        loop {
            let chunk = self.next.fetch_add(1, Ordering::Relaxed);
            if chunk >= self.n_chunks {
                return;
            }
            // The clock is read only when timing, so untimed loops pay one branch.
            let started = self.times.map(|_| Instant::now());
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| (self.task)(chunk)));
            if let (Some(times), Some(started)) = (self.times, started) {
                times.record(worker, chunk, started);
            }
            if let Err(payload) = outcome {
                // Skip the chunks nobody has claimed yet: the job has failed anyway.
                self.next.store(self.n_chunks, Ordering::Relaxed);
                let mut failure = lock(&self.failure);
                if failure.is_none() {
                    *failure = Some((chunk, panic_message(payload.as_ref())));
                }
            }
        }
    }

    fn into_result(self) -> Result<(), PoolError> {
        match self
            .failure
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            None => Ok(()),
            Some((chunk, message)) => Err(PoolError::TaskPanicked { chunk, message }),
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Locks, ignoring poisoning: no code panics while holding these locks, and task panics are
/// caught before they could poison anything.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ThreadPool {
    /// A pool using `threads` threads in total: the caller of `parallel_for` plus
    /// `threads - 1` workers (so `1` means everything runs on the caller).
    pub fn new(threads: usize) -> Result<ThreadPool, PoolError> {
        if threads == 0 {
            return Err(PoolError::ZeroThreads);
        }
        if threads > MAX_THREADS {
            return Err(PoolError::TooManyThreads(threads));
        }
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            generation: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            awake: AtomicUsize::new(0),
            may_stay_awake: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleep_lock: Mutex::new(()),
            work_ready: Condvar::new(),
        });
        let pool = ThreadPool {
            shared,
            workers: Mutex::new(Vec::with_capacity(threads - 1)),
            submit: Mutex::new(()),
            threads: AtomicUsize::new(1),
        };
        // On error, dropping `pool` joins the workers started so far.
        pool.grow(threads)?;
        Ok(pool)
    }

    /// Starts workers until the pool has at least `threads` threads (at most
    /// [`MAX_THREADS`]); a pool never shrinks. Jobs in flight are not disturbed: a new
    /// worker joins from the next job on.
    pub fn grow(&self, threads: usize) -> Result<(), PoolError> {
        if threads > MAX_THREADS {
            return Err(PoolError::TooManyThreads(threads));
        }
        let mut workers = lock(&self.workers);
        while workers.len() + 1 < threads {
            let index = workers.len() + 1;
            let shared = Arc::clone(&self.shared);
            // The worker waits for jobs published after it started.
            let seen = self.shared.generation.load(Ordering::SeqCst);
            let handle = thread::Builder::new()
                .name(format!("ferrite-worker-{index}"))
                .spawn(move || worker_loop(&shared, index, seen))
                .map_err(|e| PoolError::Spawn(e.to_string()))?;
            workers.push(handle);
            self.threads.store(workers.len() + 1, Ordering::Release);
        }
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        self.shared
            .may_stay_awake
            .store(workers.len() < cores, Ordering::Relaxed);
        Ok(())
    }

    /// The first `threads` threads of the pool (all of them if it has fewer), with
    /// denormals flushed on the workers during each job when `flush_denormals` is set
    /// (the caller sets its own mode: see [`FlushDenormals`]).
    pub fn team(&self, threads: usize, flush_denormals: bool) -> Team<'_> {
        Team {
            pool: self,
            threads: threads.clamp(1, self.threads()),
            flush_denormals,
            times: None,
        }
    }

    /// The whole pool as a team, not flushing denormals.
    pub fn all(&self) -> Team<'_> {
        self.team(self.threads(), false)
    }

    /// A pool with [`default_thread_count`] threads.
    pub fn with_default_threads() -> Result<ThreadPool, PoolError> {
        ThreadPool::new(default_thread_count())
    }

    /// The total number of threads (workers plus the calling thread).
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::Acquire)
    }

    /// [`Team::parallel_for`] on the whole pool.
    pub fn parallel_for<F>(&self, n_chunks: usize, task: F) -> Result<(), PoolError>
    where
        F: Fn(usize) + Sync,
    {
        self.all().parallel_for(n_chunks, task)
    }

    /// [`Team::parallel_for_timed`] on the whole pool.
    pub fn parallel_for_timed<F>(
        &self,
        n_chunks: usize,
        times: &ChunkTimes,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(usize) + Sync,
    {
        self.all().parallel_for_timed(n_chunks, times, task)
    }

    /// [`Team::parallel_for_range`] on the whole pool.
    pub fn parallel_for_range<F>(
        &self,
        len: usize,
        min_chunk_len: usize,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(Range<usize>) + Sync,
    {
        self.all().parallel_for_range(len, min_chunk_len, task)
    }

    /// [`Team::parallel_for_range_timed`] on the whole pool.
    pub fn parallel_for_range_timed<F>(
        &self,
        len: usize,
        min_chunk_len: usize,
        times: &ChunkTimes,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(Range<usize>) + Sync,
    {
        self.all()
            .parallel_for_range_timed(len, min_chunk_len, times, task)
    }

    /// Keeps idle workers polling for jobs for [`SPIN_WHILE_AWAKE`] after each job,
    /// instead of [`SPIN_BEFORE_SLEEP`], until the guard is dropped: a program holds it
    /// for a run, so that a kernel that runs on the calling thread alone for longer than
    /// the short spin does not cost the next parallel kernel a futex wake-up per worker.
    /// Ignored (workers sleep as usual) when the pool has more threads than the machine
    /// has cores.
    pub fn stay_awake(&self) -> AwakeGuard<'_> {
        self.shared.awake.fetch_add(1, Ordering::Relaxed);
        AwakeGuard { pool: self }
    }

    fn publish(&self, job: &Job<'_>) {
        // Erase the job's lifetime for the workers; `retire` restores the guarantee.
        let ptr = (job as *const Job<'_>).cast::<Job<'static>>().cast_mut();
        let shared = &*self.shared;
        shared.job.store(ptr, Ordering::SeqCst);
        shared.generation.fetch_add(1, Ordering::SeqCst);
        // A worker counts itself as sleeping before it checks the generation, so either
        // it sees the new generation or it is counted here (see `worker_loop`).
        if shared.sleeping.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&shared.sleep_lock);
            shared.work_ready.notify_all();
        }
    }

    /// Unpublishes the job, then waits until no worker is inside it (see [`Shared`]).
    fn retire(&self) {
        let shared = &*self.shared;
        shared.job.store(std::ptr::null_mut(), Ordering::SeqCst);
        let mut polls = 0u32;
        while shared.active.load(Ordering::SeqCst) != 0 {
            polls = polls.wrapping_add(1);
            if polls < 1 << 12 {
                std::hint::spin_loop();
            } else {
                // A worker still inside may have lost its core (more threads than cores).
                thread::yield_now();
            }
        }
    }
}

/// Keeps a pool's idle workers polling while it lives: see [`ThreadPool::stay_awake`].
#[must_use = "workers stay awake only while the guard lives"]
pub struct AwakeGuard<'p> {
    pool: &'p ThreadPool,
}

impl Drop for AwakeGuard<'_> {
    fn drop(&mut self) {
        self.pool.shared.awake.fetch_sub(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for AwakeGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AwakeGuard")
    }
}

impl<'p> Team<'p> {
    /// The team, with every loop of [`Team::parallel_for`] and
    /// [`Team::parallel_for_range`] recording its chunks into `times` when it is given
    /// (as [`Team::parallel_for_timed`] does): for code that runs its own parallel loops
    /// on a team it is handed, such as the GEMM's blocks.
    pub fn timed<'a>(self, times: Option<&'a ChunkTimes>) -> Team<'a>
    where
        'p: 'a,
    {
        Team { times, ..self }
    }

    /// The number of threads of the team (the caller's included).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the team's workers flush denormals during its jobs.
    pub fn flushes_denormals(&self) -> bool {
        self.flush_denormals
    }

    /// Runs `task(chunk)` once for every `chunk in 0..n_chunks`, in parallel, and returns when
    /// all have finished. Chunks run in no particular order, on any of the pool's threads or
    /// the caller's. A panicking task becomes [`PoolError::TaskPanicked`].
    pub fn parallel_for<F>(&self, n_chunks: usize, task: F) -> Result<(), PoolError>
    where
        F: Fn(usize) + Sync,
    {
        self.run_job(n_chunks, &task, self.times)
    }

    /// [`ThreadPool::parallel_for`], recording each chunk's thread, start and duration
    /// into `times` (see [`ChunkSpan`]). A loop that the pool runs on the calling thread
    /// alone (one chunk, one thread, or the pool busy) records all its chunks as worker 0.
    pub fn parallel_for_timed<F>(
        &self,
        n_chunks: usize,
        times: &ChunkTimes,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(usize) + Sync,
    {
        self.run_job(n_chunks, &task, Some(times))
    }

    fn run_job(
        &self,
        n_chunks: usize,
        task: &(dyn Fn(usize) + Sync),
        times: Option<&ChunkTimes>,
    ) -> Result<(), PoolError> {
        // Only as many threads as there are chunks take part: the others stay out of
        // the job instead of waking up to find nothing left.
        let job = Job::new(
            task,
            n_chunks,
            self.threads.min(n_chunks),
            self.flush_denormals,
            times,
        );
        if n_chunks <= 1 || self.threads <= 1 {
            job.run(0);
            return job.into_result();
        }
        let pool = self.pool;
        let _guard = match pool.submit.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Busy (another caller or a nested call): do the work here.
                job.run(0);
                return job.into_result();
            }
        };
        pool.publish(&job);
        job.run(0);
        pool.retire();
        job.into_result()
    }

    /// Runs `task(block, piece)` once for every `block in 0..blocks` and `piece in
    /// 0..pieces`, in parallel, with work stealing: each thread takes a whole block and
    /// runs its pieces in order from the first; a thread that finds no block left takes
    /// the *last* remaining piece of the block with the most pieces left, until none
    /// are. A block's pieces then mostly run on one thread, one after another (the
    /// order in which they share what they load), and a slow thread's last pieces go to
    /// the threads that are done. With one piece, or more blocks than
    /// [`MAX_STEAL_BLOCKS`], this is [`Team::parallel_for`] over the blocks, each
    /// running its pieces in order. In a timed loop each thread's part is one chunk.
    pub fn parallel_pieces<F>(&self, blocks: usize, pieces: usize, task: F) -> Result<(), PoolError>
    where
        F: Fn(usize, usize) + Sync,
    {
        let steal = pieces > 1 && blocks <= MAX_STEAL_BLOCKS && self.threads > 1;
        let Some(pieces) = u32::try_from(pieces).ok().filter(|_| steal) else {
            return self.parallel_for(blocks, |b| (0..pieces).for_each(|p| task(b, p)));
        };
        // Per block, the next piece from the front (high half) and one past the last
        // piece left (low half): the owner advances the first, thieves lower the second,
        // each with one compare-and-swap, so every piece is taken exactly once.
        let left: [AtomicU64; MAX_STEAL_BLOCKS] =
            std::array::from_fn(|_| AtomicU64::new(u64::from(pieces)));
        let span = |now: u64| ((now >> 32) as u32, now as u32);
        let next_block = AtomicUsize::new(0);
        let take = |b: usize, front: bool| -> Option<usize> {
            let cell = &left[b];
            let mut now = cell.load(Ordering::Relaxed);
            loop {
                let (first, end) = span(now);
                if first >= end {
                    return None;
                }
                let (new, piece) = if front {
                    (now + (1 << 32), first)
                } else {
                    (now - 1, end - 1)
                };
                match cell.compare_exchange_weak(now, new, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return Some(piece as usize),
                    Err(seen) => now = seen,
                }
            }
        };
        self.parallel_for(self.threads.min(blocks), |_| {
            loop {
                let b = next_block.fetch_add(1, Ordering::Relaxed);
                if b >= blocks {
                    break;
                }
                while let Some(p) = take(b, true) {
                    task(b, p);
                }
            }
            loop {
                // The block with the most pieces left (a thread still on its first
                // pieces is the furthest behind).
                let victim = (0..blocks)
                    .map(|b| {
                        let (first, end) = span(left[b].load(Ordering::Relaxed));
                        (end.saturating_sub(first), b)
                    })
                    .max()
                    .filter(|&(n, _)| n > 0);
                let Some((_, b)) = victim else { break };
                if let Some(p) = take(b, false) {
                    task(b, p);
                }
            }
        })
    }

    /// Splits `0..len` into contiguous ranges of at least `min_chunk_len` elements (more
    /// chunks than threads, for balance) and runs `task` on each in parallel.
    pub fn parallel_for_range<F>(
        &self,
        len: usize,
        min_chunk_len: usize,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(Range<usize>) + Sync,
    {
        let n_chunks = self.range_chunks(len, min_chunk_len);
        self.parallel_for(n_chunks, |chunk| task(split_range(len, n_chunks, chunk)))
    }

    /// [`ThreadPool::parallel_for_range`], recording chunk timings into `times` as
    /// [`ThreadPool::parallel_for_timed`] does.
    pub fn parallel_for_range_timed<F>(
        &self,
        len: usize,
        min_chunk_len: usize,
        times: &ChunkTimes,
        task: F,
    ) -> Result<(), PoolError>
    where
        F: Fn(Range<usize>) + Sync,
    {
        let n_chunks = self.range_chunks(len, min_chunk_len);
        self.parallel_for_timed(n_chunks, times, |chunk| {
            task(split_range(len, n_chunks, chunk))
        })
    }

    /// How many chunks `parallel_for_range` cuts `0..len` into.
    fn range_chunks(&self, len: usize, min_chunk_len: usize) -> usize {
        let by_size = len.div_ceil(min_chunk_len.max(1));
        by_size.min(self.threads * CHUNKS_PER_THREAD).max(1)
    }
}

/// The loop of worker thread number `index` (1-based; 0 is the submitting caller).
fn worker_loop(shared: &Shared, index: usize, mut seen: u64) {
    loop {
        let spin_start = Instant::now();
        let mut polls = 0u32;
        while shared.generation.load(Ordering::Acquire) == seen {
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            // Reading the clock costs more than a poll, so check it only now and then.
            if polls.is_multiple_of(64) {
                let awake = shared.awake.load(Ordering::Relaxed) > 0
                    && shared.may_stay_awake.load(Ordering::Relaxed);
                let limit = if awake {
                    SPIN_WHILE_AWAKE
                } else {
                    SPIN_BEFORE_SLEEP
                };
                if spin_start.elapsed() > limit {
                    break;
                }
            }
        }
        if shared.generation.load(Ordering::SeqCst) == seen {
            let mut guard = lock(&shared.sleep_lock);
            // Counted before the check: `publish` bumps the generation, then notifies
            // if it sees any sleeper, so no new generation goes unnoticed.
            shared.sleeping.fetch_add(1, Ordering::SeqCst);
            while shared.generation.load(Ordering::SeqCst) == seen
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                guard = shared
                    .work_ready
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            shared.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        seen = shared.generation.load(Ordering::Acquire);
        let job = shared.job_for_worker();
        // SAFETY: `job_for_worker` counted this worker in `active` before loading the
        // pointer, so a non-null job stays alive until the decrement below (see
        // `Shared`). It may be a later job than `seen`'s: running it is as good.
        if let Some(job) = unsafe { job.as_ref() } {
            // A worker outside the job's team leaves it to the others.
            if index < job.team {
                let mode = FlushDenormals::enter(job.flush_denormals);
                job.run(index);
                drop(mode);
            }
        }
        shared.active.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Bump the generation so that polling workers stop and see the shutdown.
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        {
            let _guard = lock(&self.shared.sleep_lock);
            self.shared.work_ready.notify_all();
        }
        let workers = std::mem::take(&mut *lock(&self.workers));
        for handle in workers {
            // Workers catch task panics, so a join error cannot carry anything useful.
            let _ = handle.join();
        }
    }
}

impl fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .finish()
    }
}

//! The persistent thread pool: coverage, parallelism, panics, concurrency, shutdown.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ferrite_cpu::{
    default_thread_count, split_range, PoolError, ThreadPool, MAX_STEAL_BLOCKS, MAX_THREADS,
};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn pool_is_send_and_sync() {
    assert_send_sync::<ThreadPool>();
}

/// Every counter is 1: each task ran once.
fn each_once(counts: &[AtomicUsize], what: &str) {
    for (i, count) in counts.iter().enumerate() {
        assert_eq!(count.load(Ordering::Relaxed), 1, "{what}: task {i}");
    }
}

#[test]
fn every_chunk_runs_exactly_once() {
    for threads in [1, 2, 3, 5] {
        let pool = ThreadPool::new(threads).expect("pool");
        for n in [0usize, 1, 2, 3, 7, 64, 1000] {
            let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.parallel_for(n, |c| {
                counts[c].fetch_add(1, Ordering::Relaxed);
            })
            .expect("no panic");
            each_once(&counts, &format!("threads {threads}, n {n}"));
        }
    }
}

#[test]
fn results_match_serial_computation() {
    let pool = ThreadPool::new(3).expect("pool");
    let len = 100_003;
    let input: Vec<f64> = (0..len).map(|i| (i as f64).sqrt()).collect();
    let output: Vec<Mutex<f64>> = (0..16).map(|_| Mutex::new(0.0)).collect();
    // Each chunk sums its part of the range; the parts are disjoint and cover everything.
    pool.parallel_for(16, |c| {
        let part: f64 = input[split_range(len, 16, c)].iter().sum();
        *output[c].lock().unwrap() = part;
    })
    .expect("no panic");
    let parallel: f64 = output.iter().map(|m| *m.lock().unwrap()).sum();
    let serial: f64 = input.iter().sum();
    assert!(
        (parallel - serial).abs() <= 1e-9 * serial,
        "{parallel} vs {serial}"
    );
}

#[test]
fn split_range_partitions_evenly() {
    for len in [0usize, 1, 5, 16, 17, 1000] {
        for n in 1..=9 {
            let parts: Vec<_> = (0..n).map(|c| split_range(len, n, c)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[n - 1].end, len);
            for w in parts.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let sizes: Vec<usize> = parts.iter().map(|r| r.len()).collect();
            let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "uneven split of {len} into {n}: {sizes:?}");
        }
    }
    assert_eq!(split_range(10, 3, 5), 10..10);
}

#[test]
fn parallel_for_range_covers_the_range() {
    let pool = ThreadPool::new(2).expect("pool");
    let hits: Vec<AtomicUsize> = (0..1001).map(|_| AtomicUsize::new(0)).collect();
    pool.parallel_for_range(hits.len(), 10, |range| {
        assert!(range.len() >= 10 || range.end == hits.len() || range.is_empty());
        for i in range {
            hits[i].fetch_add(1, Ordering::Relaxed);
        }
    })
    .expect("no panic");
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
}

#[test]
fn work_is_spread_over_the_workers() {
    let pool = ThreadPool::new(2).expect("pool");
    let ids = Mutex::new(HashSet::new());
    pool.parallel_for(8, |_| {
        ids.lock().unwrap().insert(thread::current().id());
        // Long enough that one thread cannot take every chunk before the other wakes.
        thread::sleep(Duration::from_millis(20));
    })
    .expect("no panic");
    assert_eq!(
        ids.lock().unwrap().len(),
        2,
        "both threads should have run chunks"
    );
}

#[test]
fn workers_persist_across_calls() {
    let pool = ThreadPool::new(3).expect("pool");
    let ids = Mutex::new(HashSet::new());
    for _ in 0..200 {
        pool.parallel_for(6, |_| {
            ids.lock().unwrap().insert(thread::current().id());
            std::hint::black_box((0..2000).sum::<u64>());
        })
        .expect("no panic");
    }
    // The caller plus two workers, however many calls: no thread is spawned per call.
    assert!(ids.lock().unwrap().len() <= 3);
}

#[test]
fn dispatch_overhead_is_small() {
    let pool = ThreadPool::new(2).expect("pool");
    let calls = 20_000;
    let start = Instant::now();
    for _ in 0..calls {
        pool.parallel_for(2, |c| {
            std::hint::black_box(c);
        })
        .expect("no panic");
    }
    let per_call = start.elapsed() / calls;
    println!("parallel_for(2 chunks, empty task): {per_call:?} per call");
    // A spawn-per-call design costs tens of microseconds; generous bound for loaded CI.
    assert!(
        per_call < Duration::from_micros(200),
        "{per_call:?} per call"
    );
}

#[test]
fn a_panicking_task_is_an_error_and_the_pool_survives() {
    let pool = ThreadPool::new(2).expect("pool");
    let ran = AtomicUsize::new(0);
    let result = pool.parallel_for(50, |c| {
        ran.fetch_add(1, Ordering::Relaxed);
        if c == 7 {
            panic!("chunk seven failed");
        }
    });
    match result {
        Err(PoolError::TaskPanicked { chunk, message }) => {
            assert_eq!(chunk, 7);
            assert!(message.contains("chunk seven failed"), "{message}");
        }
        other => panic!("expected a task panic, got {other:?}"),
    }
    // Still works afterwards, on all threads.
    let count = AtomicUsize::new(0);
    pool.parallel_for(100, |_| {
        count.fetch_add(1, Ordering::Relaxed);
    })
    .expect("pool still usable");
    assert_eq!(count.load(Ordering::Relaxed), 100);
    // Formatted panics carry their message too.
    let err = pool
        .parallel_for(3, |c| assert!(c != 2, "bad chunk {c}"))
        .unwrap_err();
    assert!(err.to_string().contains("bad chunk 2"), "{err}");
}

#[test]
fn usable_from_several_threads_at_once() {
    let pool = Arc::new(ThreadPool::new(2).expect("pool"));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let pool = Arc::clone(&pool);
            thread::spawn(move || {
                for round in 0..200 {
                    let n = 1 + (t * 7 + round) % 13;
                    let sum = AtomicUsize::new(0);
                    pool.parallel_for(n, |c| {
                        sum.fetch_add(c + 1, Ordering::Relaxed);
                    })
                    .expect("no panic");
                    assert_eq!(sum.load(Ordering::Relaxed), n * (n + 1) / 2);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("caller thread");
    }
}

#[test]
fn nested_parallel_for_does_not_deadlock() {
    let pool = ThreadPool::new(2).expect("pool");
    let total = AtomicUsize::new(0);
    pool.parallel_for(4, |_| {
        pool.parallel_for(5, |_| {
            total.fetch_add(1, Ordering::Relaxed);
        })
        .expect("inner");
    })
    .expect("outer");
    assert_eq!(total.load(Ordering::Relaxed), 20);
}

#[test]
fn zero_threads_is_an_error_and_drop_joins() {
    assert_eq!(ThreadPool::new(0).unwrap_err(), PoolError::ZeroThreads);
    // Too many threads is refused before any is started (it used to exhaust the
    // system's threads, or overflow the capacity of the worker list).
    for n in [MAX_THREADS + 1, usize::MAX] {
        assert_eq!(
            ThreadPool::new(n).unwrap_err(),
            PoolError::TooManyThreads(n)
        );
    }
    assert!(default_thread_count() <= MAX_THREADS);
    // Creating and dropping pools repeatedly must not leak or hang.
    for _ in 0..50 {
        let pool = ThreadPool::new(3).expect("pool");
        pool.parallel_for(3, |_| {}).expect("no panic");
    }
    assert!(
        ThreadPool::with_default_threads()
            .expect("default pool")
            .threads()
            >= 1
    );
}

#[test]
fn timed_loops_record_every_chunk_on_its_thread() {
    use ferrite_cpu::pool::ChunkTimes;
    let pool = ThreadPool::new(2).expect("pool");
    let origin = Instant::now();
    let times = ChunkTimes::new(origin);
    let len = 64;
    // Each chunk records which OS thread ran it, to check the reported worker index.
    let ran_on: Vec<Mutex<Option<thread::ThreadId>>> = (0..len).map(|_| Mutex::new(None)).collect();
    let caller = thread::current().id();
    let mut n_chunks = 0;
    let mut saw_both = false;
    for _ in 0..20 {
        pool.parallel_for_range_timed(len, 1, &times, |r| {
            for i in r {
                *ran_on[i].lock().unwrap() = Some(thread::current().id());
            }
            thread::sleep(Duration::from_millis(2));
        })
        .expect("no panic");
        let spans = times.take();
        let end = origin.elapsed();
        // 64 points of at least 1 cut into at most 4 chunks per thread: 8.
        n_chunks = spans.len();
        let mut chunks: Vec<usize> = spans.iter().map(|s| s.chunk).collect();
        chunks.sort_unstable();
        assert_eq!(chunks, (0..8).collect::<Vec<_>>());
        for s in &spans {
            assert!(s.worker < 2, "{s:?}");
            assert!(s.duration >= Duration::from_millis(2), "{s:?}");
            assert!(s.start + s.duration <= end, "{s:?} ends after {end:?}");
            let first = split_range(len, 8, s.chunk).start;
            let id = ran_on[first].lock().unwrap().expect("ran");
            assert_eq!(s.worker == 0, id == caller, "{s:?}");
        }
        for w in 0..2 {
            let mut mine: Vec<_> = spans.iter().filter(|s| s.worker == w).collect();
            mine.sort_by_key(|s| s.start);
            for pair in mine.windows(2) {
                assert!(
                    pair[0].start + pair[0].duration <= pair[1].start,
                    "{pair:?}"
                );
            }
        }
        saw_both |= spans.iter().any(|s| s.worker == 0) && spans.iter().any(|s| s.worker == 1);
        if saw_both {
            break;
        }
    }
    assert_eq!(n_chunks, 8);
    assert!(saw_both, "the worker never ran a chunk");
    // The untimed loop records nothing.
    pool.parallel_for(8, |_| {}).expect("no panic");
    assert!(times.take().is_empty());
}

/// Joining and leaving a job are lock-free (`Shared` in `pool.rs`): many short jobs
/// whose tasks write into the submitter's stack, back to back and with pauses long
/// enough for the workers to fall asleep, with and without a `stay_awake` hold, each
/// see every chunk once and return only when every chunk has finished. A lost wake-up
/// would hang here; a job retired while a worker is still inside it would miss writes.
#[test]
fn short_jobs_with_sleeps_between_never_lose_a_chunk() {
    let pool = ThreadPool::new(4).expect("pool");
    for hold in [false, true] {
        let _awake = hold.then(|| pool.stay_awake());
        for round in 0..2000 {
            let n = 1 + round % 13;
            let slots: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.parallel_for(n, |c| {
                if c % 5 == 0 {
                    std::hint::black_box((0..500).sum::<u64>());
                }
                slots[c].fetch_add(round + 1, Ordering::Relaxed);
            })
            .expect("no panic");
            assert!(
                slots.iter().all(|s| s.load(Ordering::Relaxed) == round + 1),
                "round {round}, hold {hold}"
            );
            if round % 200 == 0 {
                // Past SPIN_BEFORE_SLEEP: without a hold the workers go to sleep.
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A team made `timed` records the chunks of its plain loops (the GEMM's blocks are
/// such loops); the untimed team records nothing.
#[test]
fn timed_teams_record_their_loops() {
    use ferrite_cpu::pool::ChunkTimes;
    let pool = ThreadPool::new(3).expect("pool");
    let times = ChunkTimes::new(Instant::now());
    let team = pool.team(3, false);
    team.parallel_for(6, |_| {}).expect("no panic");
    assert_eq!(times.count(), 0);
    team.timed(Some(&times))
        .parallel_for(6, |_| {})
        .expect("no panic");
    let mut chunks: Vec<usize> = times.take().iter().map(|s| s.chunk).collect();
    chunks.sort_unstable();
    assert_eq!(chunks, (0..6).collect::<Vec<_>>());
    // One chunk runs on the caller, and is recorded as worker 0.
    team.timed(Some(&times))
        .parallel_for(1, |_| {})
        .expect("no panic");
    let spans = times.take();
    assert_eq!((spans.len(), spans[0].worker), (1, 0));
}

/// Work stealing: every piece of every block runs exactly once, whatever the threads,
/// blocks (more than `MAX_STEAL_BLOCKS` included: no stealing then) and pieces.
#[test]
fn every_piece_runs_exactly_once() {
    for threads in [1, 2, 3, 5] {
        let pool = ThreadPool::new(threads).expect("pool");
        for (blocks, pieces) in [
            (0usize, 4usize),
            (1, 1),
            (1, 7),
            (2, 4),
            (5, 3),
            (16, 8),
            (MAX_STEAL_BLOCKS + 3, 2),
        ] {
            let counts: Vec<AtomicUsize> =
                (0..blocks * pieces).map(|_| AtomicUsize::new(0)).collect();
            pool.all()
                .parallel_pieces(blocks, pieces, |b, p| {
                    assert!(b < blocks && p < pieces);
                    counts[b * pieces + p].fetch_add(1, Ordering::Relaxed);
                })
                .expect("no panic");
            each_once(
                &counts,
                &format!("threads {threads}, {blocks} blocks of {pieces}"),
            );
        }
    }
}

/// A block whose owner is slow loses its last pieces to the threads that are done: the
/// owner runs them from the first, the others take them from the last.
#[test]
fn a_slow_blocks_last_pieces_are_stolen() {
    let pool = ThreadPool::new(3).expect("pool");
    let pieces = 8;
    let ran_on: Vec<Mutex<Option<thread::ThreadId>>> =
        (0..2 * pieces).map(|_| Mutex::new(None)).collect();
    pool.all()
        .parallel_pieces(2, pieces, |b, p| {
            // Block 0's first piece is slow; everything else is quick.
            if b == 0 && p == 0 {
                thread::sleep(Duration::from_millis(200));
            }
            *ran_on[b * pieces + p].lock().unwrap() = Some(thread::current().id());
        })
        .expect("no panic");
    let who = |b: usize, p: usize| ran_on[b * pieces + p].lock().unwrap().expect("ran");
    let owner = who(0, 0);
    // The last piece went to another thread while the owner slept.
    assert_ne!(
        who(0, pieces - 1),
        owner,
        "block 0's last piece was not stolen"
    );
    // Stolen pieces are a run at the end: once a piece is the owner's, so are those
    // before it.
    let owned = (0..pieces).take_while(|&p| who(0, p) == owner).count();
    assert!((owned..pieces).all(|p| who(0, p) != owner));
}

/// A panicking piece is an error; the other pieces still run and the pool survives.
#[test]
fn a_panicking_piece_is_an_error() {
    let pool = ThreadPool::new(3).expect("pool");
    let ran = AtomicUsize::new(0);
    let r = pool.all().parallel_pieces(4, 4, |b, p| {
        if b == 1 && p == 2 {
            panic!("piece {b}.{p}");
        }
        ran.fetch_add(1, Ordering::Relaxed);
    });
    assert!(matches!(r, Err(PoolError::TaskPanicked { .. })), "{r:?}");
    let again = AtomicUsize::new(0);
    pool.all()
        .parallel_pieces(4, 4, |_, _| {
            again.fetch_add(1, Ordering::Relaxed);
        })
        .expect("the pool survives");
    assert_eq!(again.load(Ordering::Relaxed), 16);
}

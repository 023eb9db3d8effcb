//! `parallel_map`: a compile's independent work spread over scoped threads (the passes'
//! candidate kernels and folded weights, the CPU backend's functions).
//!
//! Compiling stays deterministic whatever the thread count: each item is computed by a
//! function of its index alone, and the results come back in index order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Work a helper thread should have before one is started for it: starting and joining a
/// scoped thread costs tens of microseconds of the calling thread.
const WORK_PER_HELPER: Duration = Duration::from_micros(200);

/// The machine's cores (its available parallelism), read once: no compile work uses
/// more threads than this.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `(0..n).map(f)` computed on up to `threads` threads, at most one a core (the calling
/// thread is one of them), in index order. The calling thread starts computing the items and, after each,
/// starts helpers for as many threads as the items left would keep busy at its pace so
/// far ([`WORK_PER_HELPER`] each): a map of small items stays on one thread, and one
/// whose first items were quick still spreads once the slow ones come. Items are handed
/// out one at a time, so uneven items balance. A panic in `f` is resumed on the calling
/// thread.
pub fn parallel_map<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    map_on_threads(n, threads, false, f)
}

/// [`parallel_map`] for items each known to take well over [`WORK_PER_HELPER`] (a
/// function's Cranelift compile): the helpers start at once instead of after the first
/// item, which would otherwise run alone.
pub fn parallel_map_heavy<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    map_on_threads(n, threads, true, f)
}

fn map_on_threads<T: Send>(
    n: usize,
    threads: usize,
    eager: bool,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let threads = threads.min(cores());
    if threads <= 1 || n <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return out;
            }
            out.push((i, f(i)));
        }
    };
    let mut done: Vec<(usize, T)> = std::thread::scope(|scope| {
        let start = Instant::now();
        let mut handles = Vec::new();
        if eager {
            while handles.len() + 1 < threads.min(n) {
                handles.push(scope.spawn(work));
            }
        }
        let mut all = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            all.push((i, f(i)));
            let left = n.saturating_sub(next.load(Ordering::Relaxed));
            if left > 1 && handles.len() + 1 < threads {
                let pace = start.elapsed().as_nanos() as f64 / all.len() as f64;
                let wanted = ((pace * left as f64 / WORK_PER_HELPER.as_nanos() as f64) as usize)
                    .min(threads - 1)
                    .min(left - 1);
                while handles.len() < wanted {
                    handles.push(scope.spawn(work));
                }
            }
        }
        for h in handles {
            match h.join() {
                Ok(out) => all.extend(out),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    done.sort_unstable_by_key(|&(i, _)| i);
    done.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::parallel_map;

    #[test]
    fn results_come_back_in_index_order_on_any_thread_count() {
        for threads in [0, 1, 2, 7, 64] {
            for n in [0, 1, 5, 100] {
                let got = parallel_map(n, threads, |i| i * i);
                let want: Vec<usize> = (0..n).map(|i| i * i).collect();
                assert_eq!(got, want, "{n} items on {threads} threads");
            }
        }
    }

    #[test]
    fn slow_items_run_on_several_threads_and_quick_ones_on_one() {
        let ids = |n: usize, pause: std::time::Duration| {
            let mut ids = parallel_map(n, 4, |_| {
                std::thread::sleep(pause);
                std::thread::current().id()
            });
            ids.sort_by_key(|id| format!("{id:?}"));
            ids.dedup();
            ids.len()
        };
        if super::cores() > 1 {
            assert!(ids(16, std::time::Duration::from_millis(2)) > 1);
        }
        assert_eq!(ids(16, std::time::Duration::ZERO), 1);
    }

    #[test]
    #[should_panic(expected = "item 3")]
    fn a_panic_in_a_worker_reaches_the_caller() {
        parallel_map(8, 4, |i| {
            // Slow enough that helpers are started.
            std::thread::sleep(std::time::Duration::from_millis(1));
            if i == 3 {
                panic!("item 3");
            }
            i
        });
    }
}

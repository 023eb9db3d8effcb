//! `parallel_map`: a compile's independent work spread over scoped threads (the passes'
//! candidate kernels and folded weights, the CPU backend's functions).
//!
//! Compiling stays deterministic whatever the thread count: each item is computed by a
//! function of its index alone, and the results come back in index order.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `(0..n).map(f)` computed on up to `threads` threads (the calling thread is one of
/// them), in index order. Items are handed out one at a time, so uneven items balance.
/// A panic in `f` is resumed on the calling thread.
pub fn parallel_map<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let workers = threads.min(n);
    if workers <= 1 {
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
        let helpers: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
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
    #[should_panic(expected = "item 3")]
    fn a_panic_in_a_worker_reaches_the_caller() {
        parallel_map(8, 4, |i| {
            if i == 3 {
                panic!("item 3");
            }
            i
        });
    }
}

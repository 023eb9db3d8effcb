//! A small mutation fuzzer for stable Rust: structured random inputs for the parsers and
//! decoders, run for a bounded number of cases in CI and for as long as asked by hand.
//!
//! Coverage-guided fuzzers need more than the repository gives: libFuzzer through cargo-fuzz
//! a nightly compiler, AFL++ through cargo-afl (0.18 installs on stable 1.95 and builds its
//! own AFL++) a `cargo install` and a separately instrumented build of the stack; this harness
//! needs neither. It
//! mutates a seed corpus (the repository's own example and test files) with byte flips,
//! insertions and deletions of interesting bytes and tokens, splices of two seeds, and
//! truncations, and calls the target on each input inside `catch_unwind`. A watchdog thread
//! aborts the process, printing the input, when one case runs longer than the hang limit,
//! so a hang is a failure too. Failing inputs are written to
//! `target/fuzz-findings/<target>/<hash>.bin` and the test fails naming them.
//!
//! [`fuzz_generated`] drives a target the same way on generated inputs instead of mutants
//! (the whole-pipeline target: random graphs printed as `.fg` text).
//!
//! Budget (environment): `FERRITE_FUZZ_SECONDS=N` runs each target for N seconds (an hour:
//! 3600); otherwise `FERRITE_FUZZ_CASES=N` cases (default: the target's CI count).
//! `FERRITE_FUZZ_SEED=N` changes the random stream. `FERRITE_FUZZ_REPLAY=FILE` runs the
//! target on that one saved input only (a finding, to debug or minimize it).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A target's verdict on one input: `Ok(true)` when it accepted the input (parsed or
/// decoded it), `Ok(false)` when it rejected it as it should (a located error), `Err` when a
/// promise is broken (a wrong location, a round trip that differs, ...). A panic is a
/// failure too.
pub type Verdict = Result<bool, String>;

/// How many cases a run made and how they ended.
#[derive(Debug, Default, Clone, Copy)]
pub struct FuzzStats {
    /// Inputs tried.
    pub cases: u64,
    /// Inputs the target accepted (parsed, decoded) rather than rejected with an error.
    pub accepted: u64,
}

/// Seconds one case may run before the watchdog calls it a hang.
pub const HANG_SECONDS: u64 = 20;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes and tokens worth inserting: delimiters, digits, signs, extreme numbers, keywords
/// of both languages, non-ASCII and invalid UTF-8.
const DICTIONARY: &[&[u8]] = &[
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"=",
    b":",
    b"->",
    b"\n",
    b" ",
    b"#",
    b"\"",
    b"-",
    b"+",
    b"*",
    b"/",
    b"%",
    b"<",
    b">=",
    b"==",
    b"!",
    b"&",
    b"|",
    b".",
    b"0",
    b"1",
    b"-1",
    b"9",
    b"1e39",
    b"-1e400",
    b"3e9",
    b"9223372036854775808",
    b"2147483648",
    b"0.5",
    b"nan",
    b"inf",
    b"-inf",
    b"true",
    b"false",
    b"return",
    b"graph",
    b"kernel",
    b"for",
    b"in",
    b"range",
    b"const",
    b"f32",
    b"f16",
    b"bf16",
    b"i32",
    b"i64",
    b"bool",
    b"axis=",
    b"axes=[",
    b"shape=[",
    b"keepdim=true",
    b"value=",
    b"dtype=",
    b"load(",
    b"store(",
    b"arange(0, ",
    b"program_id(0)",
    b"dot(",
    b"local_alloc(",
    b"\xc3\xa9",
    b"\xff",
    b"\x00",
    b"\t",
    b"\r\n",
];

/// One mutation of `input` (or a splice with `other`).
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let at = rng.below(out.len() + 1);
        match rng.below(8) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let token = DICTIONARY[rng.below(DICTIONARY.len())];
                out.splice(at..at, token.iter().copied());
            }
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 => out.truncate(at),
            4 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = 1 + rng.below(other.len() - from);
                out.splice(at..at, other[from..from + len].iter().copied());
            }
            5 if !out.is_empty() => {
                // Repeat a slice: long lines, deep nesting, long chains.
                let start = at.min(out.len() - 1);
                let end = (start + 1 + rng.below(8)).min(out.len());
                let piece = out[start..end].to_vec();
                let times = 1 + rng.below(64);
                for _ in 0..times {
                    out.splice(end..end, piece.iter().copied());
                }
            }
            6 if !out.is_empty() => {
                // Replace a digit run with an extreme number.
                let i = at.min(out.len() - 1);
                if out[i].is_ascii_digit() {
                    let token = DICTIONARY[rng.below(DICTIONARY.len())];
                    out.splice(i..i + 1, token.iter().copied());
                }
            }
            _ => {
                let byte = (rng.next() & 0xff) as u8;
                out.insert(at, byte);
            }
        }
    }
    out
}

fn findings_dir(target: &str) -> PathBuf {
    crate::repo_root().join("target/fuzz-findings").join(target)
}

fn save(target: &str, input: &[u8]) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in input {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let dir = findings_dir(target);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{h:016x}.bin"));
    let _ = std::fs::write(&path, input);
    path
}

/// Reads every file under `dirs` (relative to the repository root) whose name ends in one
/// of `extensions`: a seed corpus.
pub fn corpus(dirs: &[&str], extensions: &[&str]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    for dir in dirs {
        collect(&crate::repo_root().join(dir), extensions, &mut files);
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

fn collect(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, extensions, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| extensions.iter().any(|x| n.ends_with(x)))
        {
            out.push(p);
        }
    }
}

/// Runs `target` on mutants of `seeds` for the budget the environment sets (or
/// `ci_cases`), panicking with every failing input saved when a verdict fails or the
/// target panics. Returns the counts.
pub fn fuzz(
    name: &str,
    seeds: &[Vec<u8>],
    ci_cases: u64,
    target: impl Fn(&[u8]) -> Verdict,
) -> FuzzStats {
    assert!(!seeds.is_empty(), "fuzz target {name}: empty seed corpus");
    drive(
        name,
        ci_cases,
        |rng, case| {
            if case < seeds.len() as u64 {
                seeds[case as usize].clone()
            } else {
                let a = &seeds[rng.below(seeds.len())];
                let b = &seeds[rng.below(seeds.len())];
                mutate(rng, a, b)
            }
        },
        target,
    )
}

/// [`fuzz`] on generated inputs: case `i` is `generate(s)` for a seed `s` drawn from the
/// random stream (so `FERRITE_FUZZ_SEED` gives new cases), under the same budget,
/// watchdog and findings directory.
pub fn fuzz_generated(
    name: &str,
    ci_cases: u64,
    generate: impl Fn(u64) -> Vec<u8>,
    target: impl Fn(&[u8]) -> Verdict,
) -> FuzzStats {
    drive(name, ci_cases, |rng, _| generate(rng.next()), target)
}

fn drive(
    name: &str,
    ci_cases: u64,
    mut next_input: impl FnMut(&mut Rng, u64) -> Vec<u8>,
    target: impl Fn(&[u8]) -> Verdict,
) -> FuzzStats {
    if let Ok(path) = std::env::var("FERRITE_FUZZ_REPLAY") {
        let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let verdict = target(&input);
        eprintln!("fuzz target {name}: replayed {path}: {verdict:?}");
        if let Err(why) = verdict {
            panic!("fuzz target {name} fails on {path}:\n{why}");
        }
        return FuzzStats {
            cases: 1,
            accepted: u64::from(verdict == Ok(true)),
        };
    }
    let seconds = env_u64("FERRITE_FUZZ_SECONDS");
    let cases = env_u64("FERRITE_FUZZ_CASES").unwrap_or(ci_cases);
    let mut rng = Rng(env_u64("FERRITE_FUZZ_SEED").unwrap_or(0x5eed) ^ fnv(name.as_bytes()));
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let inflight = std::env::var_os("FERRITE_FUZZ_INFLIGHT").map(PathBuf::from);

    // The watchdog: the case in flight and when it started.
    let started = Arc::new(AtomicU64::new(0));
    let current: Arc<Mutex<Vec<u8>>> = Arc::new(Mutex::new(Vec::new()));
    let epoch = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    {
        let (started, current, done) = (started.clone(), current.clone(), done.clone());
        let name = name.to_string();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            if done.load(Ordering::Relaxed) == 1 {
                return;
            }
            let s = started.load(Ordering::Relaxed);
            let now = epoch.elapsed().as_millis() as u64;
            if s != 0 && now.saturating_sub(s) > HANG_SECONDS * 1000 {
                let input = current.lock().map(|c| c.clone()).unwrap_or_default();
                let path = save(&name, &input);
                eprintln!(
                    "fuzz target {name}: a case ran longer than {HANG_SECONDS} s (a hang); input saved to {}",
                    path.display()
                );
                std::process::abort();
            }
        });
    }

    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut stats = FuzzStats::default();
    let mut failures = Vec::new();
    loop {
        match deadline {
            Some(d) if Instant::now() >= d => break,
            None if stats.cases >= cases => break,
            _ => {}
        }
        let input = next_input(&mut rng, stats.cases);
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        // An abort (an allocation failure) kills the process before any verdict: with
        // `FERRITE_FUZZ_INFLIGHT=FILE` each case is written there first, so it survives.
        if let Some(path) = &inflight {
            let _ = std::fs::write(path, &input);
        }
        started.store(epoch.elapsed().as_millis().max(1) as u64, Ordering::Relaxed);
        let verdict = catch_unwind(AssertUnwindSafe(|| target(&input)));
        started.store(0, Ordering::Relaxed);
        stats.cases += 1;
        match verdict {
            Ok(Ok(accepted)) => stats.accepted += u64::from(accepted),
            Ok(Err(why)) => failures.push((why, save(name, &input))),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push((format!("panic: {msg}"), save(name, &input)));
            }
        }
        if failures.len() >= 10 {
            break;
        }
    }
    std::panic::set_hook(quiet);
    done.store(1, Ordering::Relaxed);
    eprintln!(
        "fuzz target {name}: {} cases, {} accepted, {} failures, {:.1} s",
        stats.cases,
        stats.accepted,
        failures.len(),
        epoch.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        let list: Vec<String> = failures
            .iter()
            .map(|(why, path)| format!("{}: {why}", path.display()))
            .collect();
        panic!("fuzz target {name} failed:\n{}", list.join("\n"));
    }
    stats
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Checks that a rendered diagnostic names a location inside `input`: `file:LINE:COL:` with
/// LINE at most the number of lines plus one and COL at least 1; `Ok(false)` (rejected).
pub fn check_location(rendered: &str, file: &str, input: &[u8]) -> Verdict {
    let first = rendered.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix(file)
        .and_then(|r| r.strip_prefix(':'))
        .ok_or_else(|| format!("diagnostic does not start with `{file}:`: {first}"))?;
    let mut parts = rest.splitn(3, ':');
    let line: usize = parts
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| format!("no line number: {first}"))?;
    let col: usize = parts
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no column: {first}"))?;
    let lines = input.split(|&b| b == b'\n').count();
    if line == 0 || line > lines + 1 || col == 0 {
        return Err(format!(
            "location {line}:{col} is outside the input ({lines} lines): {first}"
        ));
    }
    // Diagnostics excerpt the offending line; a message much longer than its input would be
    // a copy of too much (F11).
    if rendered.len() > 4 * input.len() + 4096 {
        return Err(format!(
            "a {} byte diagnostic for a {} byte input",
            rendered.len(),
            input.len()
        ));
    }
    Ok(false)
}

//! The autotuner: for each GEMM kernel of a program, a search over its
//! lowering's tunable parameters ([`GemmChoice`]: blocks, K slice, staging of
//! the operands in SRAM, and with the blocks the number of programs) with the
//! simulator as the fitness function.
//!
//! The search is a hill climb from the cost model's choice: each step
//! simulates the untried neighbours of the best choice so far (one block size
//! halved or doubled, one operand's staging flipped), the model's favourites
//! first. It stops when no neighbour is left (`exhausted`), after `budget`
//! simulations or once they have spent `work` units of simulation (`budget`;
//! a candidate that would overrun it counts as not run), or after `patience`
//! simulations in a row that did
//! not improve on the best (`patience`). A candidate runs on a fresh device
//! with every buffer of the kernel where the program places it, filled with
//! zeros: a GEMM's timing does not depend on its values.
//!
//! Results are cached on disk, one file per kernel signature (the loop-IR
//! kernel, its buffers' types and placements, the free SRAM) and machine
//! (every figure of the preset), so that a second compile simulates nothing.

use crate::error::Result;
use crate::lower::{gemm_choices, lower_kernel, GemmChoice};
use crate::program::run_launch;
use crate::sim::{Device, Machine, Placement};
use ferrite_ir::loops::{Kernel, Program};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How hard the autotuner searches, and where it keeps what it found.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOptions {
    /// The most candidates simulated for one kernel.
    pub budget: usize,
    /// The simulation work (the simulator's units, see
    /// [`crate::sim::MAX_WORK_PER_LAUNCH`]) all candidates of one kernel may
    /// spend together: a large GEMM is tried fewer times.
    pub work: u64,
    /// Stop after this many simulated candidates in a row that are not faster
    /// than the best.
    pub patience: usize,
    /// The directory of the cache; `None` keeps nothing.
    pub cache_dir: Option<PathBuf>,
}

impl Default for TuneOptions {
    fn default() -> TuneOptions {
        TuneOptions {
            budget: 16,
            work: 1 << 34,
            patience: 6,
            cache_dir: None,
        }
    }
}

/// Why the search of one kernel ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stop {
    /// Every neighbour of the best choice was tried.
    Exhausted,
    /// The budget of simulations was spent.
    Budget,
    /// `patience` simulations in a row brought nothing better.
    Patience,
    /// The result came from the cache: nothing was simulated.
    Cached,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Exhausted => "no untried neighbour left",
            Stop::Budget => "budget spent",
            Stop::Patience => "no improvement within the patience",
            Stop::Cached => "cached",
        })
    }
}

/// One simulated candidate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Trial {
    /// The choice.
    pub choice: GemmChoice,
    /// Its simulated cycles (the staging launch included); `None` when it
    /// could not run (over the simulation budget).
    pub cycles: Option<u64>,
}

/// What the autotuner did for one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTuning {
    /// The kernel's name.
    pub kernel: String,
    /// The cost model's choice (what the lowering takes without tuning).
    pub model: GemmChoice,
    /// The fastest choice found.
    pub best: GemmChoice,
    /// The simulated cycles of the best choice.
    pub best_cycles: u64,
    /// The simulated cycles of the model's choice.
    pub model_cycles: u64,
    /// Every candidate simulated, in order (those of the run that filled the
    /// cache when the result is cached).
    pub tried: Vec<Trial>,
    /// Why the search ended.
    pub stop: Stop,
    /// The cache file, and why it could not be written if it could not.
    pub cache: Option<(PathBuf, Option<String>)>,
}

impl std::fmt::Display for KernelTuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let speedup = self.model_cycles as f64 / self.best_cycles.max(1) as f64;
        write!(
            f,
            "{}: {} candidates ({}), best {} in {} cycles, model's choice {} in {} ({speedup:.2}x)",
            self.kernel,
            self.tried.len(),
            self.stop,
            self.best,
            self.best_cycles,
            self.model,
            self.model_cycles
        )?;
        if let Some((path, Some(e))) = &self.cache {
            write!(f, "; cache {} not written: {e}", path.display())?;
        }
        Ok(())
    }
}

/// Tunes kernel `k` of `p` (placed as `placements`, with `sram_room` bytes of
/// SRAM free while it runs) for `machine`; `None` for a kernel with nothing
/// to tune (not a GEMM, or an empty domain).
pub fn tune_kernel(
    p: &Program,
    k: &Kernel,
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    opts: &TuneOptions,
) -> Result<Option<KernelTuning>> {
    let ranked = gemm_choices(p, k, machine, placements, sram_room)?;
    let Some(&model) = ranked.first() else {
        return Ok(None);
    };
    let path = opts
        .cache_dir
        .as_ref()
        .map(|dir| cache_path(dir, p, k, machine, placements, sram_room));
    if let Some(path) = &path {
        if let Some(mut t) = read_cache(path, &ranked) {
            t.kernel = k.name.clone();
            t.model = model;
            t.cache = Some((path.clone(), None));
            return Ok(Some(t));
        }
    }
    let rank = |c: &GemmChoice| ranked.iter().position(|r| r == c);
    let mut tried: Vec<Trial> = Vec::new();
    let mut spent = 0u64;
    let mut measure = |c: GemmChoice| {
        let left = opts.work.saturating_sub(spent);
        let (cycles, work) = measure(p, k, machine, placements, sram_room, c, left)?;
        spent = spent.saturating_add(work);
        Ok::<_, crate::Error>((cycles, spent >= opts.work))
    };
    let (model_cycles, _) = measure(model)?;
    tried.push(Trial {
        choice: model,
        cycles: model_cycles,
    });
    let Some(model_cycles) = model_cycles else {
        // The model's choice is over the simulation budget: nothing to compare.
        return Ok(None);
    };
    let (mut best, mut best_cycles) = (model, model_cycles);
    let mut since_better = 0;
    let stop = 'search: loop {
        let mut next: Vec<GemmChoice> = neighbours(&best)
            .into_iter()
            .filter(|c| rank(c).is_some() && !tried.iter().any(|t| t.choice == *c))
            .collect();
        next.sort_by_key(|c| rank(c));
        if next.is_empty() {
            break Stop::Exhausted;
        }
        for c in next {
            if tried.len() >= opts.budget {
                break 'search Stop::Budget;
            }
            let (cycles, spent_all) = measure(c)?;
            tried.push(Trial { choice: c, cycles });
            if spent_all {
                if let Some(cy) = cycles.filter(|&cy| cy < best_cycles) {
                    (best, best_cycles) = (c, cy);
                }
                break 'search Stop::Budget;
            }
            match cycles {
                Some(cy) if cy < best_cycles => {
                    (best, best_cycles) = (c, cy);
                    since_better = 0;
                    // Climb: the neighbours of the new best come next.
                    continue 'search;
                }
                _ => since_better += 1,
            }
            if since_better >= opts.patience {
                break 'search Stop::Patience;
            }
        }
    };
    let mut t = KernelTuning {
        kernel: k.name.clone(),
        model,
        best,
        best_cycles,
        model_cycles,
        tried,
        stop,
        cache: None,
    };
    if let Some(path) = path {
        let error = write_cache(&path, &t).err();
        t.cache = Some((path, error));
    }
    Ok(Some(t))
}

/// The choices one step from `c`: a block size or the K slice halved or
/// doubled, one operand's staging flipped, the row blocks per program
/// switched between 1 and 2, or a split's first part moved by a K slice.
fn neighbours(c: &GemmChoice) -> Vec<GemmChoice> {
    let mut out = Vec::new();
    for scale in [2, 0] {
        let s = |v: usize| if scale == 2 { v * 2 } else { v / 2 };
        out.push(GemmChoice { bm: s(c.bm), ..*c });
        out.push(GemmChoice { bn: s(c.bn), ..*c });
        out.push(GemmChoice { bk: s(c.bk), ..*c });
    }
    for i in 0..2 {
        let mut staged = c.staged;
        staged[i] = !staged[i];
        out.push(GemmChoice { staged, ..*c });
    }
    out.push(GemmChoice {
        rows: 3 - c.rows.clamp(1, 2),
        ..*c
    });
    // A split GEMM's first part a K slice longer or shorter, or no split.
    if c.split > 0 {
        out.push(GemmChoice {
            split: c.split + c.bk,
            ..*c
        });
        out.push(GemmChoice {
            split: c.split - c.bk,
            ..*c
        });
        out.push(GemmChoice { split: 0, ..*c });
    }
    out
}

/// Simulated cycles of kernel `k` lowered with `choice`, on zeros, every
/// buffer where the program places it, and the work units the simulation
/// spent; `None` when it could not run within `work` units (or at all).
fn measure(
    p: &Program,
    k: &Kernel,
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
    choice: GemmChoice,
    work: u64,
) -> Result<(Option<u64>, u64)> {
    let mut dev = Device::new(machine.clone());
    dev.limit_work(work, work);
    let cycles = simulate(&mut dev, p, k, placements, sram_room, choice)?;
    Ok((cycles, dev.work_spent()))
}

fn simulate(
    dev: &mut Device,
    p: &Program,
    k: &Kernel,
    placements: &[Placement],
    sram_room: u64,
    choice: GemmChoice,
) -> Result<Option<u64>> {
    let machine = dev.machine().clone();
    let Some(l) = lower_kernel(p, k, &machine, placements, sram_room, Some(choice))? else {
        return Ok(None);
    };
    let mut bound = Vec::new();
    for a in l.buffers() {
        let ty = p
            .buffer(a)
            .map(|b| b.ty.clone())
            .ok_or_else(|| crate::Error::internal(format!("{a} is not a buffer")))?;
        let at = placements
            .get(a.index())
            .copied()
            .unwrap_or(Placement::Lpddr);
        let Ok(id) = dev.alloc(&a.to_string(), &ty, at) else {
            return Ok(None);
        };
        bound.push((a, ty, id));
    }
    // A candidate the simulator refuses (over the simulation budget, or local
    // memory) is not a choice; the program's own run reports any error of the
    // choice it keeps.
    let ran = run_launch(dev, &l, None, &|a| {
        bound
            .iter()
            .find(|b| b.0 == a)
            .map(|b| (b.2, b.1.clone(), a.to_string()))
            .ok_or_else(|| crate::Error::internal(format!("{a} is no argument")))
    });
    if ran.is_err() {
        return Ok(None);
    }
    Ok(Some(dev.report().cycles()))
}

/// FNV-1a, 64 bits: a hash that is the same in every build.
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cache file of kernel `k`'s signature on `machine`.
fn cache_path(
    dir: &Path,
    p: &Program,
    k: &Kernel,
    machine: &Machine,
    placements: &[Placement],
    sram_room: u64,
) -> PathBuf {
    let mut key = format!(
        "{}\n{machine:?}\nsram room {sram_room}\n",
        p.display_kernel(k)
    );
    for b in &p.buffers {
        let at = placements
            .get(b.id.index())
            .copied()
            .unwrap_or(Placement::Lpddr);
        let _ = writeln!(key, "{} {} {at:?}", b.id, b.ty);
    }
    let name: String = machine
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    dir.join(format!("{name}-{:016x}.txt", fnv1a(&key)))
}

/// The first line of a cache file; the number changes when a cached choice
/// would lower to other kernels (4: a split of less than half of K is a chain
/// of part launches, `lower/split.rs`).
const CACHE_HEADER: &str = "ferrite-autotune 4";

fn choice_fields(c: &GemmChoice) -> String {
    format!(
        "{} {} {} {} {} {} {}",
        c.bm, c.bn, c.bk, c.staged[0] as u8, c.staged[1] as u8, c.rows, c.split
    )
}

fn write_cache(path: &Path, t: &KernelTuning) -> std::result::Result<(), String> {
    let mut text = format!("{CACHE_HEADER}\n# {}\n", t.kernel);
    let _ = writeln!(text, "best {} {}", choice_fields(&t.best), t.best_cycles);
    let _ = writeln!(text, "model {}", t.model_cycles);
    let _ = writeln!(text, "stop {:?}", t.stop);
    for trial in &t.tried {
        let cycles = trial.cycles.map_or("-".to_string(), |c| c.to_string());
        let _ = writeln!(text, "tried {} {cycles}", choice_fields(&trial.choice));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // Written beside and renamed, so that a reader never sees half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

/// The cached result at `path`, when the file is there, well formed and its
/// choices are among `valid` (anything else is tuned again).
fn read_cache(path: &Path, valid: &[GemmChoice]) -> Option<KernelTuning> {
    // A cache file is a few hundred bytes; anything large is not one.
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 1 << 16 {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != CACHE_HEADER {
        return None;
    }
    let parse_choice = |f: &[&str]| -> Option<GemmChoice> {
        let n = |i: usize| f.get(i)?.parse::<usize>().ok();
        let c = GemmChoice {
            bm: n(0)?,
            bn: n(1)?,
            bk: n(2)?,
            staged: [n(3)? == 1, n(4)? == 1],
            rows: n(5)?,
            split: n(6)?,
        };
        valid.contains(&c).then_some(c)
    };
    let (mut best, mut model_cycles, mut tried) = (None, None, Vec::new());
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first() {
            Some(&"best") => {
                best = Some((parse_choice(&f[1..])?, f.get(8)?.parse::<u64>().ok()?));
            }
            Some(&"model") => model_cycles = Some(f.get(1)?.parse::<u64>().ok()?),
            Some(&"tried") => tried.push(Trial {
                choice: parse_choice(&f[1..])?,
                cycles: f.get(8)?.parse::<u64>().ok(),
            }),
            _ => {}
        }
    }
    let (best, best_cycles) = best?;
    Some(KernelTuning {
        kernel: String::new(),
        model: best,
        best,
        best_cycles,
        model_cycles: model_cycles?,
        tried,
        stop: Stop::Cached,
        cache: None,
    })
}

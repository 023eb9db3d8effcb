//! The order in which generated code combines a vectorized reduction over a row, written
//! once in plain Rust for the wide row routines ([`crate::wide`]) that must give its bits.
//!
//! A reduction stage whose inner loop is vector code (`emit/reduce.rs`, with the default
//! unroll of four `f32x4` groups) runs three loops over a row of `n` floats:
//!
//! 1. `16` elements per iteration: element `16k + 4g + l` goes to lane `l` of group `g`'s
//!    accumulator (so, in a 16-lane register, to lane `4g + l`). A float sum adds in `f32`
//!    and, every [`FOLD_EVERY`] iterations, adds each group's lanes 0-1 into `f64` halves
//!    `lo` and lanes 2-3 into `hi`, group after group, and restarts them at zero. A max or
//!    min keeps `acc < x ? x : acc` (`x < acc` for min) per lane and, apart, the last NaN
//!    each lane saw.
//! 2. `4` elements per iteration over what is left: into group 0.
//! 3. One element at a time: a scalar accumulator (`f64` for sums; NaN-sticky for max and
//!    min).
//!
//! Then the groups merge pairwise as `f32x4` (`(g0, g1), (g2, g3)`, then the two; max and
//! min with `torch.maximum`/`minimum`'s NaN rules, after each group's lanes take their NaN
//! if they saw one), the lanes as `(l0, l1), (l2, l3)`, then the two, and the result joins
//! the scalar accumulator (for sums: plus the folded `f64` halves, rounded to `f32` once).

/// Elements per iteration of the unrolled vector loop: four `f32x4` groups.
pub const STEP: usize = 16;

/// Lanes of one group.
const LANES: usize = 4;

/// Iterations of the unrolled vector loop between folds of a float sum's `f32` lanes into
/// `f64` (`emit/reduce.rs` uses it too).
pub const FOLD_EVERY: usize = 16;

/// A float sum's state besides its 16 `f32` lanes: the fold counter and the `f64` halves.
#[derive(Clone, Copy, Debug, Default)]
pub struct SumFolds {
    count: usize,
    lo: [f64; 2],
    hi: [f64; 2],
}

impl SumFolds {
    /// Counts one iteration of the unrolled loop; true when the lanes are due to fold (the
    /// caller then calls [`SumFolds::fold`] and restarts its lanes at zero).
    #[inline]
    pub fn step(&mut self) -> bool {
        self.count += 1;
        if self.count == FOLD_EVERY {
            self.count = 0;
            true
        } else {
            false
        }
    }

    /// Adds the lanes into the `f64` halves, group after group.
    #[inline]
    pub fn fold(&mut self, lanes: &[f32; STEP]) {
        for g in lanes.chunks_exact(LANES) {
            self.lo[0] += f64::from(g[0]);
            self.lo[1] += f64::from(g[1]);
            self.hi[0] += f64::from(g[2]);
            self.hi[1] += f64::from(g[3]);
        }
    }

    /// The sum, given the lanes after the unrolled loop and the `rest` of the row (fewer
    /// than [`STEP`] values) that the four-wide and scalar loops take.
    pub fn finish(&self, mut lanes: [f32; STEP], rest: &[f32]) -> f32 {
        debug_assert!(rest.len() < STEP);
        let fours = rest.len() / LANES * LANES;
        for four in rest[..fours].chunks_exact(LANES) {
            for (l, &x) in four.iter().enumerate() {
                lanes[l] += x;
            }
        }
        let mut acc = 0.0f64;
        for &x in &rest[fours..] {
            acc += f64::from(x);
        }
        let g = |i: usize, l: usize| lanes[LANES * i + l];
        let c: [f32; LANES] = std::array::from_fn(|l| (g(0, l) + g(1, l)) + (g(2, l) + g(3, l)));
        let h = (c[0] + c[1]) + (c[2] + c[3]);
        acc += f64::from(h);
        let folded = (self.lo[0] + self.hi[0]) + (self.lo[1] + self.hi[1]);
        (acc + folded) as f32
    }
}

/// `torch.maximum` (`max`) or `torch.minimum` of two `f32`, as generated code computes it
/// lane by lane: NaN in `x` wins, then the strictly greater (smaller), then for equal
/// values the `and` (`or`) of the bits (+0 wins a maximum, -0 a minimum), else `y`.
fn maximum(max: bool, x: f32, y: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x == y {
        let (a, b) = (x.to_bits(), y.to_bits());
        return f32::from_bits(if max { a & b } else { a | b });
    }
    let first = if max { y < x } else { x < y };
    if first {
        x
    } else {
        y
    }
}

/// The scalar accumulator's rule: `x` when it is beyond `acc` or NaN, else `acc`.
fn sticky(max: bool, acc: f32, x: f32) -> f32 {
    let beyond = if max { x > acc } else { x < acc };
    if beyond || x.is_nan() {
        x
    } else {
        acc
    }
}

/// One step of a group's lanes: `acc < x ? x : acc` (`x < acc` for min).
#[inline]
pub fn extreme_step(max: bool, acc: f32, x: f32) -> f32 {
    let take = if max { acc < x } else { x < acc };
    if take {
        x
    } else {
        acc
    }
}

/// The identity a max (`-inf`) or min (`+inf`) starts from.
pub fn extreme_identity(max: bool) -> f32 {
    if max {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    }
}

/// The max (min) of a row, given its 16 lanes and their last NaNs (`0.0` where none) after
/// the unrolled loop, and the `rest` of the row.
pub fn finish_extreme(
    max: bool,
    mut lanes: [f32; STEP],
    mut nans: [f32; STEP],
    rest: &[f32],
) -> f32 {
    debug_assert!(rest.len() < STEP);
    let fours = rest.len() / LANES * LANES;
    for four in rest[..fours].chunks_exact(LANES) {
        for (l, &x) in four.iter().enumerate() {
            if x.is_nan() {
                nans[l] = x;
            }
            lanes[l] = extreme_step(max, lanes[l], x);
        }
    }
    let mut acc = extreme_identity(max);
    for &x in &rest[fours..] {
        acc = sticky(max, acc, x);
    }
    for (v, &n) in lanes.iter_mut().zip(&nans) {
        if n.is_nan() {
            *v = n;
        }
    }
    let g = |i: usize, l: usize| lanes[LANES * i + l];
    let c: [f32; LANES] = std::array::from_fn(|l| {
        maximum(
            max,
            maximum(max, g(0, l), g(1, l)),
            maximum(max, g(2, l), g(3, l)),
        )
    });
    let h = sticky(max, sticky(max, c[0], c[1]), sticky(max, c[2], c[3]));
    sticky(max, acc, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definitions, for rows where every order gives the same answer.
    #[test]
    fn small_exact_rows_agree_with_the_plain_definitions() {
        for n in [0usize, 1, 3, 4, 15, 16, 17, 33, 256, 257, 1000, 4100] {
            let row: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
            let steps = n / STEP;
            let mut lanes = [0.0f32; STEP];
            let mut folds = SumFolds::default();
            let mut mx = [extreme_identity(true); STEP];
            let mut mn = [extreme_identity(false); STEP];
            for k in 0..steps {
                for l in 0..STEP {
                    let x = row[k * STEP + l];
                    lanes[l] += x;
                    mx[l] = extreme_step(true, mx[l], x);
                    mn[l] = extreme_step(false, mn[l], x);
                }
                if folds.step() {
                    folds.fold(&lanes);
                    lanes = [0.0; STEP];
                }
            }
            let rest = &row[steps * STEP..];
            let sum: f64 = row.iter().map(|&x| f64::from(x)).sum();
            assert_eq!(folds.finish(lanes, rest), sum as f32, "sum of {n}");
            let nans = [0.0; STEP];
            let want_max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let want_min = row.iter().copied().fold(f32::INFINITY, f32::min);
            assert_eq!(finish_extreme(true, mx, nans, rest), want_max, "max of {n}");
            assert_eq!(
                finish_extreme(false, mn, nans, rest),
                want_min,
                "min of {n}"
            );
        }
    }

    #[test]
    fn nan_wins_and_zeros_follow_torch() {
        let mut lanes = [f32::NEG_INFINITY; STEP];
        let mut nans = [0.0; STEP];
        lanes[5] = 1.0;
        nans[9] = f32::NAN;
        assert!(finish_extreme(true, lanes, nans, &[]).is_nan());
        assert!(finish_extreme(true, lanes, [0.0; STEP], &[f32::NAN]).is_nan());
        assert_eq!(maximum(true, -0.0, 0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(maximum(false, 0.0, -0.0).to_bits(), (-0.0f32).to_bits());
    }
}

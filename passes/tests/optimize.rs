//! Tests of the e-graph optimizer.
//!
//! - Soundness, rule by rule: for random shapes and values, a graph matching the rule's
//!   left-hand side is rewritten by that rule alone (`rewrite_once`, which extracts the rule's
//!   right-hand side), and the reference interpreter must agree on both within the tolerance
//!   stated for the rule. Every rule must have a case here (`every_rule_has_a_soundness_case`).
//! - Golden tests in egg's style: one line of graph text in, one line out.
//! - Names, parameters and untouched ops survive; limits stop runs and say why; a 200,000-node
//!   graph compiles; the examples and random graphs (ours, built for the rules, and the shared
//!   generator's in `common/`) still match the interpreter.

use ferrite_ir::{interpret, parse, print, verify, DType, Graph, Op, SplitMix64, Tensor};
use ferrite_passes::decompose::decompose;
use ferrite_passes::optimize::{
    optimize, rewrite_once, rule_names, OptimizeConfig, OptimizeReport,
};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Generous time so that results do not depend on machine load; the iteration limit binds.
fn config() -> OptimizeConfig {
    OptimizeConfig {
        time_limit: Duration::from_secs(20),
        ..OptimizeConfig::default()
    }
}

fn graph(src: &str) -> Graph {
    parse("test.fg", src).unwrap_or_else(|e| panic!("{e}\nin:\n{src}"))
}

fn run(g: &Graph) -> (Graph, OptimizeReport) {
    let (out, report) = optimize(g, &config()).unwrap_or_else(|e| panic!("{e}\n{}", print(g)));
    verify(&out).unwrap();
    (out, report)
}

fn inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.param_types()
        .iter()
        .enumerate()
        .map(|(i, t)| Tensor::random(t, seed * 1000 + i as u64))
        .collect()
}

/// Runs both graphs on the same random inputs and compares every output.
fn agree(original: &Graph, rewritten: &Graph, seed: u64, rtol: f64, atol: f64) {
    let xs = inputs(original, seed);
    let want = interpret(original, &xs).unwrap_or_else(|e| panic!("{e}\n{}", print(original)));
    let got = interpret(rewritten, &xs).unwrap_or_else(|e| panic!("{e}\n{}", print(rewritten)));
    assert_eq!(want.len(), got.len());
    for (i, (w, o)) in want.iter().zip(&got).enumerate() {
        if let Err(e) = o.check_close(w, rtol, atol) {
            panic!(
                "output {i}: {e}\noriginal:\n{}rewritten:\n{}",
                print(original),
                print(rewritten)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random shapes for the soundness cases.

struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        (self.0.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// A shape of rank `lo..=hi` with extents 1..=4.
    fn shape(&mut self, lo: usize, hi: usize) -> Vec<usize> {
        let rank = lo + self.below(hi - lo + 1);
        (0..rank).map(|_| 1 + self.below(4)).collect()
    }

    /// A random permutation of `0..n`.
    fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }
}

fn s(shape: &[usize]) -> String {
    let items: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// `shape` with some extents replaced by 1, so it broadcasts against `shape`.
fn broadcastable(r: &mut Rng, shape: &[usize]) -> Vec<usize> {
    let drop = r.below(shape.len() + 1);
    shape[drop..]
        .iter()
        .map(|&d| if r.below(3) == 0 { 1 } else { d })
        .collect()
}

/// One graph returning `body`, over the given parameters.
fn g1(params: &str, body: &str) -> String {
    format!("graph g({params}) {{\n  return {body}\n}}\n")
}

// ---------------------------------------------------------------------------------------------
// Soundness: one case per rule.

/// A rule's soundness case: a random graph matching its left-hand side, and the tolerance
/// within which its right-hand side must agree (`rtol`, `atol` as in `Tensor::check_close`).
struct Case {
    rule: &'static str,
    rtol: f64,
    atol: f64,
    make: fn(&mut Rng) -> String,
}

/// f32 unary-context case: one parameter `x` of a random shape.
fn unary(r: &mut Rng, body: &str) -> String {
    let shape = r.shape(0, 3);
    g1(&format!("x: f32{}", s(&shape)), body)
}

/// Two parameters `x` and `y` whose shapes broadcast.
fn binary(r: &mut Rng, body: &str) -> String {
    let a = r.shape(1, 3);
    let b = broadcastable(r, &a);
    let (a, b) = if r.below(2) == 0 { (a, b) } else { (b, a) };
    g1(&format!("x: f32{}, y: f32{}", s(&a), s(&b)), body)
}

const EXACT: (f64, f64) = (0.0, 0.0);
/// One extra rounding of an f32 result (2^-23, with margin).
const ONE_ROUNDING: (f64, f64) = (3e-7, 1e-30);
/// Re-associated f32 arithmetic near cancellation.
const REASSOCIATED: (f64, f64) = (1e-5, 1e-5);

fn case(rule: &'static str, (rtol, atol): (f64, f64), make: fn(&mut Rng) -> String) -> Case {
    Case {
        rule,
        rtol,
        atol,
        make,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // arithmetic
        case("mul-one", EXACT, |r| {
            let shape = r.shape(0, 3);
            let one = r
                .pick(&[
                    "1.0".to_string(),
                    format!("full(shape={}, value=1.0)", s(&shape)),
                ])
                .clone();
            let body = if r.below(2) == 0 {
                format!("mul(x, {one})")
            } else {
                format!("mul({one}, x)")
            };
            g1(&format!("x: f32{}", s(&shape)), &body)
        }),
        case("add-zero", EXACT, |r| {
            // Only -0.0 is an identity of float addition (-0 + +0 is +0).
            let body = either_order(r, "add", "-0.0");
            unary(r, &body)
        }),
        case("sub-zero", EXACT, |r| unary(r, "sub(x, 0.0)")),
        case("div-one", EXACT, |r| unary(r, "div(x, 1.0)")),
        case("neg-neg", EXACT, |r| unary(r, "neg(neg(x))")),
        case("mul-zero-int", EXACT, |r| {
            let dtype = r.pick(&["i32", "i64"]);
            let shape = r.shape(0, 3);
            let body = if r.below(2) == 0 {
                "mul(x, 0)"
            } else {
                "mul(0, x)"
            };
            g1(&format!("x: {dtype}{}", s(&shape)), body)
        }),
        case("sub-self-int", EXACT, |r| {
            let shape = r.shape(0, 3);
            g1(&format!("x: i32{}", s(&shape)), "sub(x, x)")
        }),
        case("mul-neg-one", EXACT, |r| {
            let body = either_order(r, "mul", "-1.0");
            unary(r, &body)
        }),
        case("zero-sub", EXACT, |r| unary(r, "sub(-0.0, x)")),
        case("add-neg", EXACT, |r| {
            let body = if r.below(2) == 0 {
                "add(x, neg(y))"
            } else {
                "add(neg(y), x)"
            };
            binary(r, body)
        }),
        case("sub-neg", EXACT, |r| binary(r, "sub(x, neg(y))")),
        case("neg-sub", EXACT, |r| binary(r, "neg(sub(x, y))")),
        case("abs-abs", EXACT, |r| unary(r, "abs(abs(x))")),
        case("abs-neg", EXACT, |r| unary(r, "abs(neg(x))")),
        case("pow-zero", EXACT, |r| unary(r, "pow(x, 0.0)")),
        case("pow-one", EXACT, |r| unary(r, "pow(x, 1.0)")),
        case("pow-two", ONE_ROUNDING, |r| unary(r, "pow(x, 2.0)")),
        case("pow-neg-one", ONE_ROUNDING, |r| unary(r, "pow(x, -1.0)")),
        case("one-div", EXACT, |r| unary(r, "div(1.0, x)")),
        case("reciprocal-sqrt", ONE_ROUNDING, |r| {
            unary(r, "reciprocal(sqrt(x))")
        }),
        case("div-sqrt", ONE_ROUNDING, |r| binary(r, "div(y, sqrt(x))")),
        case("div-const", EXACT, |r| {
            let c = r.pick(&["2.0", "0.25", "-8.0", "1024.0", "-0.5"]);
            unary(r, &format!("div(x, {c})"))
        }),
        case("mul-const-chain", EXACT, |r| {
            // Exact scalings of floats (a factor ±1, or powers of two >= 1), any integers.
            let (dtype, c1, c2) = *r.pick(&[
                ("f32", "2.0", "8.0"),
                ("f32", "-4.0", "1024.0"),
                ("f32", "-1.0", "0.1"),
                ("f32", "3.0", "-1.0"),
                ("f16", "2.0", "-2.0"),
                ("i32", "3", "-7"),
                ("i64", "-5", "11"),
            ]);
            let inner = if r.below(2) == 0 {
                format!("mul(x, {c1})")
            } else {
                format!("mul({c1}, x)")
            };
            let shape = r.shape(0, 3);
            g1(
                &format!("x: {dtype}{}", s(&shape)),
                &format!("mul({inner}, {c2})"),
            )
        }),
        case("add-const-chain", EXACT, |r| {
            let dtype = r.pick(&["i32", "i64"]);
            let c1 = r.pick(&["3", "-7", "65536"]);
            let c2 = r.pick(&["2", "-4", "100"]);
            let inner = *r.pick(&["add(x, C)", "add(C, x)", "sub(x, C)"]);
            let outer = *r.pick(&["add(I, D)", "sub(I, D)", "add(D, I)"]);
            let body = outer.replace('I', &inner.replace('C', c1)).replace('D', c2);
            let shape = r.shape(0, 3);
            g1(&format!("x: {dtype}{}", s(&shape)), &body)
        }),
        case("cast-same", EXACT, |r| {
            let dtype = r.pick(&["f32", "f16", "bf16", "i32", "i64", "bool"]);
            let shape = r.shape(0, 3);
            g1(
                &format!("x: {dtype}{}", s(&shape)),
                &format!("cast(x, to={dtype})"),
            )
        }),
        case("cast-cast", EXACT, |r| {
            let (from, via) = *r.pick(&[
                ("f16", "f32"),
                ("bf16", "f32"),
                ("i32", "i64"),
                ("bool", "i32"),
                ("bool", "f16"),
                ("f32", "f32"),
            ]);
            let to = r.pick(&["f32", "f16", "bf16", "i32", "i64", "bool"]);
            let shape = r.shape(0, 3);
            let body = format!("cast(cast(x, to={via}), to={to})");
            g1(&format!("x: {from}{}", s(&shape)), &body)
        }),
        case("factor-mul", EXACT, |r| {
            let a = r.shape(1, 3);
            let b = broadcastable(r, &a);
            let c = broadcastable(r, &a);
            let op = r.pick(&["add", "sub"]);
            let d = r.pick(&["i32", "i64"]);
            let left = if r.below(2) == 0 {
                "mul(a, b)"
            } else {
                "mul(b, a)"
            };
            let right = if r.below(2) == 0 {
                "mul(a, c)"
            } else {
                "mul(c, a)"
            };
            g1(
                &format!("a: {d}{}, b: {d}{}, c: {d}{}", s(&a), s(&b), s(&c)),
                &format!("{op}({left}, {right})"),
            )
        }),
        // constants
        case("fold-constants", ONE_ROUNDING, |r| {
            let x = r.shape(1, 3);
            let shape = broadcastable(r, &x);
            let c = *r.pick(&[
                "mul(full(shape=S, value=2.0), 3.0)",
                "exp(full(shape=S, value=0.5))",
                "sum(full(shape=[3, 4], value=2.5), axes=[0, 1])",
                "div(cast(7, to=f32), 2.0)",
            ]);
            g1(
                &format!("x: f32{}", s(&x)),
                &format!("add(x, {})", c.replace('S', &s(&shape))),
            )
        }),
        case("where-const-cond", EXACT, |r| {
            let cond = r.pick(&["gt(2.0, 1.0)", "lt(2.0, 1.0)"]);
            binary(r, &format!("where({cond}, x, y)"))
        }),
        case("where-same", EXACT, |r| {
            binary(r, "where(gt(x, 0.0), y, y)")
        }),
        // movement
        case("permute-identity", EXACT, |r| {
            let shape = r.shape(1, 4);
            let dims: Vec<usize> = (0..shape.len()).collect();
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("permute(x, dims={})", s(&dims)),
            )
        }),
        case("permute-permute", EXACT, |r| {
            let shape = r.shape(2, 4);
            let (p, q) = (r.perm(shape.len()), r.perm(shape.len()));
            let body = format!("permute(permute(x, dims={}), dims={})", s(&p), s(&q));
            g1(&format!("x: f32{}", s(&shape)), &body)
        }),
        case("permute-as-reshape", EXACT, |r| {
            // Non-unit axes keep their order; unit axes move.
            let mut shape = r.shape(2, 3);
            shape.insert(r.below(shape.len() + 1), 1);
            let mut dims: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
            for unit in (0..shape.len()).filter(|&i| shape[i] == 1) {
                dims.insert(r.below(dims.len() + 1), unit);
            }
            if dims.iter().enumerate().all(|(i, &d)| i == d) {
                // Never the identity (that is another rule's case): move a unit axis.
                let i = dims.iter().position(|&d| shape[d] == 1).unwrap();
                let unit = dims.remove(i);
                dims.insert((i + 1) % (dims.len() + 1), unit);
            }
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("permute(x, dims={})", s(&dims)),
            )
        }),
        case("reshape-identity", EXACT, |r| {
            let shape = r.shape(0, 3);
            // Under an op: a reshape to the output's own shape is also what keeps an output
            // distinct from a parameter, so a returned one would print the same.
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("exp(reshape(x, shape={}))", s(&shape)),
            )
        }),
        case("reshape-reshape", EXACT, |r| {
            let shape = r.shape(1, 3);
            let n: usize = shape.iter().product();
            let mut back = shape.clone();
            back.reverse();
            let body = format!("reshape(reshape(x, shape=[{n}]), shape={})", s(&back));
            g1(&format!("x: f32{}", s(&shape)), &body)
        }),
        case("expand-identity", EXACT, |r| {
            let shape = r.shape(0, 3);
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("expand(x, shape={})", s(&shape)),
            )
        }),
        case("expand-expand", EXACT, |r| {
            let full = r.shape(2, 3);
            let small = broadcastable(r, &full);
            let mid = {
                let lead = full.len() - small.len();
                let keep = r.below(lead + 1);
                let mut m: Vec<usize> = full[keep..lead].to_vec();
                m.extend(
                    small
                        .iter()
                        .zip(&full[lead..])
                        .map(|(&a, &b)| if r.below(2) == 0 { a } else { b }),
                );
                m
            };
            let body = format!("expand(expand(x, shape={}), shape={})", s(&mid), s(&full));
            g1(&format!("x: f32{}", s(&small)), &body)
        }),
        case("slice-identity", EXACT, |r| {
            let shape = r.shape(1, 3);
            let axis = r.below(shape.len()) as i64
                - if r.below(2) == 0 {
                    0
                } else {
                    shape.len() as i64
                };
            let end = r.pick(&["", ", end=1000"]);
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("slice(x, axis={axis}{end})"),
            )
        }),
        case("concat-single", EXACT, |r| {
            let shape = r.shape(1, 3);
            g1(&format!("x: f32{}", s(&shape)), "concat(x, axis=0)")
        }),
        case("pad-zero", EXACT, |r| {
            let shape = r.shape(1, 3);
            let pads = vec![0; 2 * shape.len()];
            g1(
                &format!("x: f32{}", s(&shape)),
                &format!("pad(x, pads={}, value=3.0)", s(&pads)),
            )
        }),
        // reductions
        case("sum-scalar-factor", REASSOCIATED, |r| {
            let shape = r.shape(1, 3);
            // Float factors must be constants of magnitude >= 1 (no overflow moves).
            let c = r.pick(&["-1.5", "2.0", "full(shape=[1], value=3.0)"]);
            let body = format!(
                "sum(mul(x, {c}), axes=[{}], keepdim={})",
                r.below(shape.len()),
                r.below(2) == 0
            );
            g1(&format!("x: f32{}, c: f32[]", s(&shape)), &body)
        }),
        case("extremum-pos-factor", EXACT, |r| {
            let shape = r.shape(1, 3);
            let op = r.pick(&["max", "min"]);
            let c = r.pick(&["2.5", "0.1", "3.0"]);
            let body = format!("{op}(mul({c}, x), axes=[-1])");
            g1(&format!("x: f32{}", s(&shape)), &body)
        }),
        case("sum-of-broadcast", ONE_ROUNDING, |r| {
            let full = r.shape(2, 3);
            let mut small = broadcastable(r, &full);
            let lead = full.len() - small.len();
            if lead == 0 {
                small[0] = 1; // at least one stretched axis
            }
            let mut full = full;
            if full[0] == 1 {
                full[0] = 3;
            }
            let axes: Vec<usize> = (0..full.len())
                .filter(|&i| i == 0 || r.below(2) == 0)
                .collect();
            let body = format!(
                "sum(expand(x, shape={}), axes={}, keepdim={})",
                s(&full),
                s(&axes),
                r.below(2) == 0
            );
            g1(&format!("x: f32{}", s(&small)), &body)
        }),
        case("reduce-reduce", REASSOCIATED, |r| {
            let shape = r.shape(3, 4);
            let op = r.pick(&["sum", "max", "min"]);
            let k1 = r.below(2) == 0;
            let a1 = r.below(shape.len());
            let rank2 = if k1 { shape.len() } else { shape.len() - 1 };
            let a2 = r.below(rank2) as i64 - if r.below(2) == 0 { 0 } else { rank2 as i64 };
            let body = format!(
                "{op}({op}(x, axes=[{a1}], keepdim={k1}), axes=[{a2}], keepdim={})",
                r.below(2) == 0
            );
            g1(&format!("x: f32{}", s(&shape)), &body)
        }),
        case("reduce-unit-axes", EXACT, |r| {
            let mut shape = r.shape(1, 3);
            let axis = r.below(shape.len() + 1);
            shape.insert(axis, 1);
            let op = r.pick(&["sum", "max", "min", "prod"]);
            let dtype = r.pick(&["f32", "i32"]);
            g1(
                &format!("x: {dtype}{}", s(&shape)),
                &format!("{op}(x, axes=[{axis}])"),
            )
        }),
        // matmul
        case("matmul-transpose", EXACT, |r| {
            let (m, k, n) = (1 + r.below(4), 1 + r.below(4), 1 + r.below(4));
            if r.below(2) == 0 {
                g1(
                    &format!("a: f32[{m}, {k}], b: f32[{k}, {n}]"),
                    "permute(matmul(a, b), dims=[1, 0])",
                )
            } else {
                let batch = 1 + r.below(3);
                g1(
                    &format!("a: f32[{batch}, {m}, {k}], b: f32[{k}, {n}]"),
                    "permute(matmul(a, b), dims=[0, 2, 1])",
                )
            }
        }),
        case("matmul-scalar-out", REASSOCIATED, |r| {
            let (m, k, n) = (1 + r.below(4), 1 + r.below(4), 1 + r.below(4));
            let body = *r.pick(&[
                "matmul(mul(a, 0.5), b)",
                "matmul(a, mul(c, b))",
                "matmul(mul(c, a), b)",
            ]);
            g1(
                &format!("a: f32[{m}, {k}], b: f32[{k}, {n}], c: f32[]"),
                body,
            )
        }),
        case("matmul-scalar-in", REASSOCIATED, |r| {
            let (m, k, n) = (1 + r.below(4), 1 + r.below(4), 1 + r.below(4));
            let body = *r.pick(&["mul(matmul(a, b), 0.125)", "mul(c, matmul(a, b))"]);
            g1(
                &format!("a: f32[{m}, {k}], b: f32[{k}, {n}], c: f32[]"),
                body,
            )
        }),
    ]
}

/// `op(x, c)` or `op(c, x)`.
fn either_order(r: &mut Rng, op: &str, c: &str) -> String {
    if r.below(2) == 0 {
        format!("{op}(x, {c})")
    } else {
        format!("{op}({c}, x)")
    }
}

#[test]
fn every_rule_has_a_soundness_case() {
    let rules: BTreeSet<&str> = rule_names().into_iter().collect();
    let tested: BTreeSet<&str> = cases().iter().map(|c| c.rule).collect();
    assert_eq!(rules.len(), rule_names().len(), "rule names must be unique");
    let untested: Vec<_> = rules.difference(&tested).collect();
    let unknown: Vec<_> = tested.difference(&rules).collect();
    assert!(
        untested.is_empty(),
        "rules without a soundness case: {untested:?}"
    );
    assert!(
        unknown.is_empty(),
        "cases for rules that do not exist: {unknown:?}"
    );
    for name in rule_names() {
        let kebab = name.split('-').all(|w| {
            !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
        assert!(kebab, "`{name}` is not kebab-case");
    }
}

#[test]
fn every_rule_is_sound_on_random_shapes_and_values() {
    for case in cases() {
        for seed in 0..8 {
            let mut rng = Rng(SplitMix64(seed * 7919 + case.rule.len() as u64));
            let src = (case.make)(&mut rng);
            let g = graph(&src);
            let rewritten = rewrite_once(&g, case.rule)
                .unwrap_or_else(|e| panic!("{}: {e}\n{src}", case.rule))
                .unwrap_or_else(|| panic!("{} did not fire on\n{src}", case.rule));
            assert_ne!(
                print(&rewritten),
                print(&g),
                "{}: firing changed nothing on\n{src}",
                case.rule
            );
            agree(&g, &rewritten, seed, case.rtol, case.atol);
            // The full optimizer on the same graph stays within the rule's tolerance too.
            let (optimized, _) = run(&g);
            agree(
                &g,
                &optimized,
                seed,
                case.rtol.max(1e-5),
                case.atol.max(1e-5),
            );
        }
    }
}

#[test]
fn rules_leave_what_they_must_not_touch() {
    // x * 0 is not 0 for floats (inf, NaN); x ** -1 on integers is an error at run time;
    // dividing integers is exact true division; max(x * c) needs c > 0.
    for (rule, src) in [
        ("mul-zero-int", g1("x: f32[3]", "mul(x, 0.0)")),
        ("sub-self-int", g1("x: f32[3]", "sub(x, x)")),
        ("pow-neg-one", g1("x: i32[3]", "pow(x, -1)")),
        ("div-const", g1("x: i32[3]", "div(x, 4)")),
        // Special values and exactness (the elementwise parity test, tests/parity.rs):
        // -0 + +0 is +0; +0 - +0 is +0, not -(+0); x * (1/3) is an ulp off x / 3;
        // sum(x * 0.125) fits in f32 where sum(x) * 0.125 overflows.
        ("add-zero", g1("x: f32[3]", "add(x, 0.0)")),
        ("sub-zero", g1("x: f32[3]", "sub(x, -0.0)")),
        ("zero-sub", g1("x: f32[3]", "sub(0.0, x)")),
        ("div-const", g1("x: f32[3]", "div(x, 3.0)")),
        ("sum-scalar-factor", g1("x: f32[3]", "sum(mul(x, 0.125))")),
        ("extremum-pos-factor", g1("x: f32[3]", "max(mul(x, -2.0))")),
        ("sum-scalar-factor", g1("x: i32[3]", "sum(mul(x, 3))")),
        (
            "mul-one",
            g1("x: f32[3]", "mul(x, full(shape=[2, 3], value=1.0))"),
        ),
        ("mul-one", g1("x: i32[3]", "mul(x, 1.0)")),
        ("div-one", g1("x: i32[3]", "div(x, 1)")),
        (
            "mul-const-chain",
            g1("x: f32[3]", "mul(mul(x, 1e30), 1e30)"),
        ),
        // Float chains that round twice, or overflow or underflow in the middle, are not
        // the single product, constant or sum (issue 13: exact under f32 rounding).
        ("mul-const-chain", g1("x: f32[3]", "mul(mul(x, 3.0), 0.5)")),
        ("mul-const-chain", g1("x: f32[3]", "mul(mul(x, 0.5), 0.5)")),
        (
            "mul-const-chain",
            g1("x: f32[3]", "mul(mul(x, 1e30), 1e-30)"),
        ),
        ("add-const-chain", g1("x: f32[3]", "sub(add(x, 1e8), 1e8)")),
        ("add-const-chain", g1("x: f16[3]", "add(add(x, 0.5), 0.25)")),
        (
            "factor-mul",
            g1(
                "a: f32[3], b: f32[3], c: f32[3]",
                "sub(mul(a, b), mul(a, c))",
            ),
        ),
        (
            "matmul-transpose",
            g1("a: f32[3], b: f32[3, 4]", "matmul(a, b)"),
        ),
        (
            "cast-cast",
            g1("x: f32[3]", "cast(cast(x, to=f16), to=f32)"),
        ),
        (
            "cast-cast",
            g1("x: i32[3]", "cast(cast(x, to=f32), to=i32)"),
        ),
    ] {
        let g = graph(&src);
        assert_eq!(
            rewrite_once(&g, rule).unwrap(),
            None,
            "{rule} fired on\n{src}"
        );
    }
    assert!(rewrite_once(&graph(&g1("x: f32[3]", "x")), "no-such-rule").is_err());
}

// ---------------------------------------------------------------------------------------------
// Golden tests: one line in, one line out.

/// The statements of a printed graph on one line, `; `-separated.
fn body_line(g: &Graph) -> String {
    let text = print(g);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines[1..lines.len() - 1].join("; ")
}

/// Optimizes `graph g(params) { body }` and compares the printed body with `expected`, and the
/// interpreter's results on both.
fn golden(params: &str, body: &str, expected: &str) {
    let src = format!(
        "graph g({params}) {{\n  {}\n}}\n",
        body.replace("; ", "\n  ")
    );
    let g = graph(&src);
    let (out, report) = run(&g);
    assert_eq!(
        body_line(&out),
        expected,
        "\nin:  {body}\nreport:\n{report}"
    );
    agree(&g, &out, 1, 1e-5, 1e-6);
}

macro_rules! golden {
    ($($name:ident: $params:literal, $body:literal => $expected:literal;)*) => {
        $(
            #[test]
            fn $name() {
                golden($params, $body, $expected);
            }
        )*
    };
}

golden! {
    double_transpose:     "x: f32[2, 3]", "return permute(permute(x, dims=[1, 0]), dims=[1, 0])" => "return reshape(x, shape=[2, 3])";
    transposes_compose:   "x: f32[2, 3, 4]", "return permute(permute(x, dims=[1, 0, 2]), dims=[0, 2, 1])" => "return permute(x, dims=[1, 2, 0])";
    unit_axis_permute:    "x: f32[3, 1, 4]", "return permute(x, dims=[1, 0, 2])" => "return reshape(x, shape=[1, 3, 4])";
    // Not x: x * 2 overflows to inf for |x| > f32::MAX / 2, and inf * 0.5 stays inf.
    times_two_over_two:   "x: f32[8]", "return div(mul(x, 2.0), 2.0)" => "return mul(mul(x, 2.0), 0.5)";
    reshape_chain:        "x: f32[2, 3]", "return reshape(reshape(reshape(x, shape=[6]), shape=[3, 2]), shape=[2, 3])" => "return reshape(x, shape=[2, 3])";
    reshape_chain_to_new: "x: f32[2, 3]", "return reshape(reshape(x, shape=[6]), shape=[3, 2, 1])" => "return reshape(x, shape=[3, 2, 1])";
    expand_chain:         "x: f32[1, 4]", "return expand(expand(x, shape=[3, 4]), shape=[2, 3, 4])" => "return expand(x, shape=[2, 3, 4])";
    duplicated_subexprs:  "x: f32[4]", "a = exp(x); b = exp(x); return add(a, b)" => "a = exp(x); return add(a, a)";
    scalar_chain:         "x: f32[4]", "return mul(mul(mul(x, 2.0), 4.0), -1.0)" => "return mul(x, -8.0)";
    scalar_chain_inexact: "x: f32[4]", "return mul(mul(x, 3.0), 0.5)" => "return mul(mul(x, 3.0), 0.5)";
    // x + 0.0 is not x at x = -0 (it is +0), so the folded offset stays.
    offset_chain:         "x: i32[4]", "return add(sub(add(x, 1), 3), 5)" => "return add(x, 3)";
    offset_chain_float:   "x: f32[4]", "return add(sub(add(x, 1.0), 3.0), 2.0)" => "return add(sub(add(x, 1.0), 3.0), 2.0)";
    square:               "x: f32[4]", "return pow(x, 2.0)" => "return mul(x, x)";
    // The square of an expensive value (LLaMA's RMSNorm squares the residual stream): `x * x`
    // reads the value once, so it must not cost twice the value's cost and lose to `pow`.
    square_of_expensive:  "x: f32[64, 64], w: f32[64, 64]", "return sum(pow(exp(matmul(x, w)), 2.0), axes=[1])" => "t0 = exp(matmul(x, w)); return sum(mul(t0, t0), axes=[1])";
    // sqrt differs from pow(x, 0.5) at -0 (-0, not +0) and -inf (NaN, not +inf).
    square_root:          "x: f32[4]", "return pow(x, 0.5)" => "return pow(x, 0.5)";
    inverse_sqrt:         "x: f32[4]", "return div(1.0, sqrt(x))" => "return rsqrt(x)";
    divide_by_sqrt:       "x: f32[4], y: f32[4]", "return div(y, sqrt(x))" => "return mul(y, rsqrt(x))";
    divide_by_constant:   "x: f32[4]", "return div(x, 4.0)" => "return mul(x, 0.25)";
    // A rounded reciprocal would be an ulp off the division.
    divide_by_third:      "x: f32[4]", "return div(x, 3.0)" => "return div(x, 3.0)";
    half_divide_exact:    "x: bf16[4]", "return div(x, 4.0)" => "return mul(x, 0.25)";
    half_divide_inexact:  "x: f16[4]", "return div(x, 3.0)" => "return div(x, 3.0)";
    half_chain_inexact:   "x: bf16[4]", "return mul(mul(x, 3.0), 0.1)" => "return mul(mul(x, 3.0), 0.1)";
    double_negation:      "x: f32[4], y: f32[4]", "return add(neg(neg(x)), neg(y))" => "return sub(x, y)";
    factoring:            "a: i32[64], b: i32[64], c: i32[64]", "return add(mul(a, b), mul(a, c))" => "return mul(a, add(b, c))";
    factoring_float:      "a: f32[64], b: f32[64], c: f32[64]", "return add(mul(a, b), mul(a, c))" => "return add(mul(a, b), mul(a, c))";
    sum_of_scaled:        "x: f32[64, 64]", "return sum(mul(x, 3.0), axes=[1])" => "return mul(sum(x, axes=[1]), 3.0)";
    sum_of_broadcast:     "x: f32[64]", "return sum(expand(x, shape=[32, 64]), axes=[0])" => "return mul(x, 32.0)";
    nested_sums:          "x: f32[4, 5, 6]", "return sum(sum(x, axes=[2]), axes=[0])" => "return sum(x, axes=[0, 2])";
    transposed_product:   "a: f32[4, 8], b: f32[6, 4]", "return permute(matmul(permute(a, dims=[1, 0]), permute(b, dims=[1, 0])), dims=[1, 0])" => "return matmul(b, a)";
    scale_smaller_operand:"q: f32[64, 8], k: f32[8, 128]", "return mul(matmul(q, k), 0.125)" => "return matmul(mul(q, 0.125), k)";
    constants_fold:       "x: f32[4]", "return add(x, mul(full(shape=[4], value=2.0), 3.0))" => "return add(x, full(shape=[4], value=6.0))";
    integer_zero:         "x: i32[4]", "return add(mul(x, 0), sub(x, x))" => "return full(shape=[4], value=0.0, dtype=i32)";
    decided_select:       "x: f32[4], y: f32[4]", "return where(gt(2.0, 1.0), x, y)" => "return reshape(x, shape=[4])";
    redundant_casts:      "x: f16[4]", "return cast(cast(cast(x, to=f32), to=f32), to=f16)" => "return reshape(x, shape=[4])";
    lossy_casts_kept:     "x: f32[4]", "return cast(cast(x, to=f16), to=f32)" => "return cast(cast(x, to=f16), to=f32)";
    float_times_zero:     "x: f32[4]", "return mul(x, 0.0)" => "return mul(x, 0.0)";
    named_output_kept:    "x: f32[4]", "y = mul(x, 1.0); return y" => "y = reshape(x, shape=[4]); return y";
}

// ---------------------------------------------------------------------------------------------
// Names, parameters, untouched ops.

#[test]
fn untouched_graph_round_trips_exactly() {
    let src = "graph keep(x: f32[4, 8], idx: i64[3], w: f16[8, 8], unused: f32[2]) -> f32[4, 8], f32[3, 8], f16[4, 8], i64[4] {
  s = softmax(x, axis=-1)
  r = index_select(s, idx, axis=0)
  h = matmul(cast(x, to=f16), w)
  a = argmax(x, axis=1)
  g = gather(x, reshape(a, shape=[4, 1]), axis=1)
  c = concat(s, expand(g, shape=[4, 8]), axis=0)
  p = pad(c, pads=[1, -1, 0, 0], value=-2.5)
  t = add(slice(p, axis=0, start=1, end=5), arange(start=0, end=8, dtype=f32))
  return t, r, h, a
}
";
    let g = graph(src);
    let (out, report) = run(&g);
    assert_eq!(print(&out), print(&g), "report:\n{report}");
    assert!(report.rules_fired.is_empty(), "{report}");
    assert_eq!(out.params.len(), 4);
}

#[test]
fn params_and_output_names_survive() {
    let g = graph(
        "graph names(x: f32[4], y: f32[4], z: f32[4]) {
  a = exp(x)
  b = exp(x)
  c = mul(y, 1.0)
  return a, b, c, x, a
}
",
    );
    let (out, _) = run(&g);
    assert_eq!(out.param_types(), g.param_types());
    for (i, &p) in g.params.iter().enumerate() {
        assert_eq!(out.node(out.params[i]).name, g.node(p).name);
    }
    let names: Vec<String> = (0..out.outputs.len()).map(|i| out.output_name(i)).collect();
    assert_eq!(names, ["a", "b", "c", "x", "a"]);
    assert_eq!(
        body_line(&out),
        "a = exp(x); b = reshape(a, shape=[4]); c = reshape(y, shape=[4]); return a, b, c, x, a"
    );
    agree(&g, &out, 3, 0.0, 0.0);
}

#[test]
fn disabled_returns_the_input() {
    let g = graph(&g1("x: f32[4]", "mul(x, 1.0)"));
    let cfg = OptimizeConfig {
        enabled: false,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    assert_eq!(out, g);
    assert_eq!(report.stop_reason, "disabled");
    assert_eq!((report.ops_before, report.ops_after), (1, 1));
}

#[test]
fn report_counts_ops_costs_and_rules() {
    let g = graph(&g1(
        "x: f32[16, 16]",
        "permute(permute(mul(x, 1.0), dims=[1, 0]), dims=[1, 0])",
    ));
    let (_, report) = run(&g);
    assert_eq!(report.stop_reason, "Saturated");
    // All that is left is the free reshape that keeps the output anonymous (`output0`).
    assert_eq!((report.ops_before, report.ops_after), (3, 1));
    assert!(report.cost_after < report.cost_before);
    assert_eq!(report.rules_fired.get("mul-one"), Some(&1));
    assert_eq!(report.rules_fired.get("permute-permute"), Some(&1));
    assert!(report.egraph_nodes > 0 && report.egraph_classes > 0 && report.iterations > 0);
    let text = report.to_string();
    assert!(text.contains("ops: 3 before optimize, 1 after"), "{text}");
    assert!(text.contains("permute-permute 1"), "{text}");
}

#[test]
fn regression_rounded_constants_merge() {
    // 7 / 3 folds to f32(2.3333333) but 7 * f32(1/3), its div-const form, to f32(2.3333335):
    // one class holding both values is a rule's rounding, not a contradiction.
    let g = graph(&g1(
        "x: f32[4]",
        "add(x, div(full(shape=[4], value=7.0), 3.0))",
    ));
    let (out, _) = run(&g);
    assert_eq!(
        body_line(&out),
        "return add(x, full(shape=[4], value=2.3333332538604736))"
    );
    agree(&g, &out, 0, 0.0, 0.0);
}

/// Reliability finding F15: `pow(x, -0.5)` was rewritten to `rsqrt(x)`, which gives NaN at
/// `-inf` (IEEE and PyTorch: `+0`) and `-inf` at `-0.0` (`+inf`). The optimized graph must
/// give the interpreter's answers on the special values too.
#[test]
fn regression_pow_neg_half_keeps_special_values() {
    let g = graph("graph p(x: f32[7]) -> f32[7] {\n  y = pow(x, -0.5)\n  return y\n}\n");
    let (out, _) = run(&g);
    let x = Tensor::from_f32(
        &[7],
        vec![f32::NEG_INFINITY, -0.0, 0.0, 4.0, -1.0, f32::INFINITY, 0.25],
    )
    .unwrap();
    let want = interpret(&g, std::slice::from_ref(&x)).unwrap();
    let got = interpret(&out, &[x]).unwrap();
    assert_eq!(
        format!("{:?}", got[0].to_f64()),
        format!("{:?}", want[0].to_f64()),
        "{}",
        print(&out)
    );
}

#[test]
fn invalid_input_is_an_error_not_a_panic() {
    let mut g = graph(&g1("x: f32[4]", "exp(x)"));
    g.outputs.clear();
    assert!(optimize(&g, &config()).is_err());
}

// ---------------------------------------------------------------------------------------------
// Limits.

/// `n` chained steps, each with something to rewrite: `x = mul(add(x, 0.0), 1.0)`.
fn chain(n: usize) -> Graph {
    let mut src = String::from("graph chain(x0: f32[4]) {\n");
    for i in 1..=n {
        src.push_str(&format!("  x{i} = exp(mul(add(x{}, -0.0), 1.0))\n", i - 1));
    }
    src.push_str(&format!("  return x{n}\n}}\n"));
    graph(&src)
}

#[test]
fn iteration_limit_stops_and_says_so() {
    let g = graph(&g1(
        "x: f32[4]",
        // Powers of two at least 1: their chain folds exactly, one step per iteration.
        "mul(mul(mul(mul(x, 2.0), 4.0), 8.0), 16.0)",
    ));
    let cfg = OptimizeConfig {
        iter_limit: 1,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    assert_eq!(report.stop_reason, "IterationLimit(1)");
    assert_eq!(report.iterations, 1);
    agree(&g, &out, 0, 1e-6, 0.0);
}

#[test]
fn node_limit_stops_and_says_so() {
    // Each step gains two e-nodes (x * (1/3) and d * d), so the e-graph outgrows the limit.
    let mut src = String::from("graph grow(x0: f32[4]) {\n");
    for i in 1..=200 {
        src.push_str(&format!("  x{i} = pow(div(x{}, 3.0), 2.0)\n", i - 1));
    }
    src.push_str("  return x200\n}\n");
    let g = graph(&src);
    let cfg = OptimizeConfig {
        node_limit: 500,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    assert!(report.stop_reason.starts_with("NodeLimit("), "{report}");
    verify(&out).unwrap();
    agree(&g, &out, 0, 1e-5, 1e-30);
}

#[test]
fn time_limit_stops_and_says_so() {
    // One e-graph of 18,000 nodes whose first iteration applies 12,000 rewrites: that
    // takes well over a millisecond on any machine (about 40 ms on the dev VM in a debug
    // build; with a 20 ms limit the test failed once the op table's lookups got faster).
    // On a loaded machine the limit may pass while the window is still being cut, before
    // the e-graph starts: the window is then skipped, which is the limit stopping it too.
    let g = chain(6000);
    let cfg = OptimizeConfig {
        time_limit: Duration::from_millis(1),
        node_limit: 1_000_000,
        window: 100_000,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    let stopped = report.stop_reason.starts_with("TimeLimit(")
        || (report.stop_reason.starts_with("skipped") && report.windows_skipped == 1);
    assert!(stopped, "{report}");
    verify(&out).unwrap();
    assert!(out.op_count() <= g.op_count());
}

#[test]
fn a_spent_budget_skips_windows() {
    let g = chain(300);
    let cfg = OptimizeConfig {
        time_limit: Duration::ZERO,
        window: 100,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    let windows = (g.nodes.len() - 1).div_ceil(100);
    assert_eq!((report.windows, report.windows_skipped), (windows, windows));
    assert_eq!(report.stop_reason, format!("skipped ({windows} windows)"));
    assert_eq!(print(&out), print(&g));
}

#[test]
fn windows_stitch_into_an_equivalent_graph() {
    // Small windows cut through the chain; values cross window borders both as parameters and
    // as literals, and the output is in the last window.
    let g = chain(40);
    let cfg = OptimizeConfig {
        window: 7,
        ..config()
    };
    let (out, report) = optimize(&g, &cfg).unwrap();
    assert!(report.windows > 5, "{report}");
    assert_eq!(report.windows_skipped, 0);
    assert_eq!(out.op_count(), 40, "only the exps remain:\n{}", print(&out));
    agree(&g, &out, 2, 1e-6, 0.0);
}

#[test]
fn a_200k_node_graph_compiles() {
    // Built through the API (anonymous nodes) so that building it is linear.
    let mut g = Graph::new("huge");
    let t = ferrite_ir::TensorType::new(DType::F32, vec![4]).unwrap();
    let x = g.add_param("x", t).unwrap();
    let mut v = x;
    while g.nodes.len() < 200_000 {
        let one = g
            .add_literal(ferrite_ir::Scalar::Float(1.0), DType::F32)
            .unwrap();
        let m = g
            .add(Op::Binary(ferrite_ir::BinaryOp::Mul), &[v, one], None)
            .unwrap();
        v = g
            .add(Op::Unary(ferrite_ir::UnaryOp::Tanh), &[m], None)
            .unwrap();
    }
    g.outputs.push(v);
    let start = Instant::now();
    let (out, report) = optimize(&g, &OptimizeConfig::default()).unwrap();
    let took = start.elapsed();
    assert!(report.windows > 1, "{report}");
    assert!(took < Duration::from_secs(30), "took {took:?}\n{report}");
    assert!(out.op_count() <= g.op_count());
    agree(&g, &out, 0, 1e-6, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Whole programs.

#[test]
fn examples_match_the_interpreter_after_decompose_and_optimize() {
    // The optimizer is checked against its input, the decomposed graph: decomposition's own
    // rounding is the decompose tests' business.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "fg"));
    paths.sort();
    for path in paths {
        let src = std::fs::read_to_string(&path).unwrap();
        let g = parse(&path.display().to_string(), &src).unwrap_or_else(|e| panic!("{e}"));
        let d = decompose(&g).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let start = Instant::now();
        let (out, report) = optimize(&d, &OptimizeConfig::default()).unwrap();
        eprintln!(
            "{}: {:.2} ms, {} -> {} ops, {}",
            path.display(),
            start.elapsed().as_secs_f64() * 1e3,
            report.ops_before,
            report.ops_after,
            report.stop_reason
        );
        assert!(report.cost_after <= report.cost_before * (1.0 + 1e-9));
        agree(&d, &out, 5, 1e-5, 1e-5);
    }
}

/// A random primitive graph over f32 values: elementwise ops with constants, views, reductions
/// and products, built so that the rules have plenty to match.
fn random_graph(seed: u64) -> Graph {
    let mut r = Rng(SplitMix64(seed));
    let mut g = Graph::new("random");
    let n = 2 + r.below(3);
    let mut pool: Vec<ferrite_ir::ValueId> = Vec::new();
    for i in 0..3 {
        let t = ferrite_ir::TensorType::new(DType::F32, vec![n, n]).unwrap();
        pool.push(g.add_param(format!("p{i}"), t).unwrap());
    }
    use ferrite_ir::{BinaryOp as B, Scalar, UnaryOp as U};
    for _ in 0..12 + r.below(12) {
        let a = *r.pick(&pool);
        let b = *r.pick(&pool);
        let lit = |g: &mut Graph, r: &mut Rng| {
            let v = *r.pick(&[0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -0.25]);
            g.add_literal(Scalar::Float(v), DType::F32).unwrap()
        };
        let v = match r.below(12) {
            0 => {
                let u = *r.pick(&[U::Neg, U::Abs, U::Tanh, U::Sin]);
                g.add(Op::Unary(u), &[a], None)
            }
            1 | 2 => {
                let op = *r.pick(&[B::Add, B::Sub, B::Mul, B::Maximum]);
                g.add(Op::Binary(op), &[a, b], None)
            }
            3 | 4 => {
                let op = *r.pick(&[B::Add, B::Sub, B::Mul, B::Div, B::Pow]);
                // Only literals divide and only non-negative powers: values stay finite (the
                // documented infinity caveats of re-association are not what this tests; NaN,
                // from pow(negative, 0.5), is fine: every rule keeps it).
                let c = match op {
                    B::Div => *r.pick(&[2.0, -0.5, 3.0, 1.0]),
                    B::Pow => *r.pick(&[0.0, 1.0, 2.0, 0.5]),
                    _ => *r.pick(&[0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -0.25]),
                };
                let c = g.add_literal(Scalar::Float(c), DType::F32).unwrap();
                let (x, y) = if matches!(op, B::Div | B::Pow) || r.below(2) == 0 {
                    (a, c)
                } else {
                    (c, a)
                };
                g.add(Op::Binary(op), &[x, y], None)
            }
            5 => g.add(Op::Permute { dims: vec![1, 0] }, &[a], None),
            6 => {
                let axis = r.below(2) as i64;
                let op = *r.pick(&[ferrite_ir::ReduceOp::Sum, ferrite_ir::ReduceOp::Max]);
                let red = g
                    .add(
                        Op::Reduce {
                            op,
                            axes: Some(vec![axis]),
                            keepdim: true,
                        },
                        &[a],
                        None,
                    )
                    .unwrap();
                g.add(
                    Op::Expand {
                        shape: vec![n as i64, n as i64],
                    },
                    &[red],
                    None,
                )
            }
            7 => g.add(Op::MatMul, &[a, b], None),
            8 => {
                let m = g.add(Op::Binary(B::Mul), &[a, b], None).unwrap();
                let k = g
                    .add(Op::Binary(B::Mul), &[a, *r.pick(&pool)], None)
                    .unwrap();
                g.add(Op::Binary(B::Add), &[m, k], None)
            }
            9 => {
                let flat = g.add(Op::Reshape { shape: vec![-1] }, &[a], None).unwrap();
                g.add(
                    Op::Reshape {
                        shape: vec![n as i64, n as i64],
                    },
                    &[flat],
                    None,
                )
            }
            10 => {
                // 1 / sqrt(a*a + 1): the inverse-square-root rules, on a positive value.
                let one = g.add_literal(Scalar::Float(1.0), DType::F32).unwrap();
                let sq = g.add(Op::Binary(B::Mul), &[a, a], None).unwrap();
                let pos = g.add(Op::Binary(B::Add), &[sq, one], None).unwrap();
                let s = g.add(Op::Unary(U::Sqrt), &[pos], None).unwrap();
                g.add(Op::Binary(B::Div), &[one, s], None)
            }
            _ => {
                let c = lit(&mut g, &mut r);
                let m = g.add(Op::Binary(B::Mul), &[a, c], None).unwrap();
                let s = g
                    .add(
                        Op::Reduce {
                            op: ferrite_ir::ReduceOp::Sum,
                            axes: None,
                            keepdim: false,
                        },
                        &[m],
                        None,
                    )
                    .unwrap();
                g.add(
                    Op::Expand {
                        shape: vec![n as i64, n as i64],
                    },
                    &[s],
                    None,
                )
            }
        };
        pool.push(v.unwrap());
    }
    let k = pool.len();
    g.outputs = vec![pool[k - 1], pool[k - 2]];
    g
}

#[test]
fn random_graphs_match_the_interpreter() {
    for seed in 0..60 {
        let g = random_graph(seed);
        verify(&g).unwrap();
        let (out, report) = run(&g);
        assert!(
            report.cost_after <= report.cost_before * (1.0 + 1e-9),
            "{report}"
        );
        agree(&g, &out, seed, 1e-4, 1e-4);
    }
}

#[test]
fn shared_random_graphs_match_the_interpreter() {
    // The generator the schedule tests use: every dtype, composites decomposed first.
    let mut fired = 0;
    for seed in 0..1500 {
        let rg = ferrite_testkit::random_graph(seed, 14, true);
        let Ok(d) = decompose(&rg.graph) else {
            continue;
        };
        let (out, report) = run(&d);
        fired += usize::from(!report.rules_fired.is_empty());
        let xs = ferrite_testkit::inputs_for(&rg, seed);
        // Inputs the graph itself rejects (an index out of range) prove nothing here.
        let Ok(want) = interpret(&d, &xs) else {
            continue;
        };
        let got = interpret(&out, &xs).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for (i, (o, w)) in got.iter().zip(&want).enumerate() {
            // Re-rounding costs an ulp or two of the dtype.
            let tol = if o.ty.dtype == DType::F32 { 1e-4 } else { 1e-2 };
            if let Err(e) = o.check_close(w, tol, tol) {
                panic!(
                    "seed {seed}: output {i}: {e}\n{}optimized:\n{}",
                    print(&d),
                    print(&out)
                );
            }
        }
    }
    assert!(fired > 500, "rules fired on only {fired} graphs");
}

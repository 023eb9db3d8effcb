//! `optimize`: equality saturation over the primitive graph, with egg.
//!
//! The graph is added to an e-graph (one e-class per distinct value, so common subexpressions
//! merge for free), a library of shape- and dtype-guarded rewrite rules runs under iteration,
//! e-node and time limits, and the cheapest equivalent graph is extracted with a cost model that
//! counts bytes materialized and flops (see [`cost`] for the model).
//!
//! - `language.rs`: the egg `Language` (interned ops over e-classes) and the graph conversions.
//! - `analysis.rs`: the e-class analysis: tensor type and constant value of every class.
//! - `rules/`: the rules by topic (arithmetic, constants, movement, reductions, matmul).
//! - `cost.rs`: the cost model and the extractor.
//!
//! Guarantees: the result has the same parameters (order, names, types) and outputs (order,
//! types, and names, kept on the node producing each), passes `ferrite_ir::verify`, and costs
//! no more than the input under the model (otherwise the input is returned). Ops no rule models
//! pass through unchanged, attributes included.
//!
//! Large graphs are optimized in windows of consecutive nodes, each its own e-graph, sharing one
//! time budget; when it runs out, the remaining windows are copied unchanged. A graph of any size
//! therefore compiles in time and memory linear in its size, optimized as far as the budget goes.

mod analysis;
pub mod cost;
mod egraph;
mod language;
mod rules;

use crate::error::{Error, Result};
use analysis::TensorAnalysis;
use egg::{BackoffScheduler, Language, Rewrite, Runner, SimpleScheduler, StopReason};
use egraph::{add_graph, extract_graph, TensorEGraph};
use ferrite_ir::{verify, Graph, Node, Op, ValueId};
use language::TensorLang;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Limits and switches for [`optimize`].
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizeConfig {
    /// Run the optimizer at all (`--no-optimize` clears it).
    pub enabled: bool,
    /// Most rewrite iterations per e-graph.
    pub iter_limit: usize,
    /// Most e-nodes per e-graph; rewriting stops when an e-graph grows past it.
    pub node_limit: usize,
    /// Time for rewriting the whole graph (conversion and extraction, both linear, come on top).
    pub time_limit: Duration,
    /// Most graph nodes per e-graph: larger graphs are optimized in windows of this many nodes.
    pub window: usize,
}

impl Default for OptimizeConfig {
    /// Limits for a compile measured in milliseconds: 30 iterations, 20,000 e-nodes, 50 ms,
    /// windows of 2,000 nodes.
    fn default() -> Self {
        OptimizeConfig {
            enabled: true,
            iter_limit: 30,
            node_limit: 20_000,
            time_limit: Duration::from_millis(50),
            window: 2_000,
        }
    }
}

/// What [`optimize`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizeReport {
    /// Why rewriting stopped: egg's `StopReason` as text (`Saturated`, `IterationLimit(30)`,
    /// `NodeLimit(20013)`, `TimeLimit(0.0502)`), or `disabled`. A graph optimized in several
    /// windows lists each reason with the number of windows that stopped for it.
    pub stop_reason: String,
    /// Rewrite iterations run (summed over windows).
    pub iterations: usize,
    /// E-nodes in the final e-graph(s).
    pub egraph_nodes: usize,
    /// E-classes in the final e-graph(s).
    pub egraph_classes: usize,
    /// How many times each rule taught the e-graph something new, by rule name.
    pub rules_fired: BTreeMap<String, usize>,
    /// Ops (nodes other than parameters and literals) in the input.
    pub ops_before: usize,
    /// Ops in the result.
    pub ops_after: usize,
    /// The input's cost under the model ([`cost::graph_cost`]).
    pub cost_before: f64,
    /// The result's cost.
    pub cost_after: f64,
    /// E-graphs the graph was split into.
    pub windows: usize,
    /// Windows copied unchanged because the time budget was spent.
    pub windows_skipped: usize,
    /// Wall-clock time of the whole call.
    pub time: Duration,
}

impl fmt::Display for OptimizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "stop reason: {} after {} iteration{} ({:.2} ms)",
            self.stop_reason,
            self.iterations,
            if self.iterations == 1 { "" } else { "s" },
            self.time.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "e-graph: {} e-nodes, {} e-classes",
            self.egraph_nodes, self.egraph_classes
        )?;
        if self.windows > 1 {
            writeln!(
                f,
                "windows: {} ({} skipped)",
                self.windows, self.windows_skipped
            )?;
        }
        writeln!(
            f,
            "ops: {} before optimize, {} after",
            self.ops_before, self.ops_after
        )?;
        writeln!(
            f,
            "cost: {:.0} before, {:.0} after",
            self.cost_before, self.cost_after
        )?;
        if self.rules_fired.is_empty() {
            writeln!(f, "rules fired: none")
        } else {
            writeln!(f, "rules fired:")?;
            for (rule, n) in &self.rules_fired {
                writeln!(f, "  {rule} {n}")?;
            }
            Ok(())
        }
    }
}

/// The names of every rewrite rule, in library order.
pub fn rule_names() -> Vec<&'static str> {
    rules::all().iter().map(|r| r.name).collect()
}

/// Applies the rule named `rule` once (one iteration, wherever it matches) and returns the graph
/// that uses what the rule added wherever it can, whatever the cost; `None` if it did not fire.
///
/// This isolates a rule's right-hand side, so a test can check it against the left-hand side
/// with the interpreter; [`optimize`] itself might extract neither.
pub fn rewrite_once(g: &Graph, rule: &str) -> Result<Option<Graph>> {
    on_mock_clock(|| rewrite_once_stopped_clock(g, rule))
}

fn rewrite_once_stopped_clock(g: &Graph, rule: &str) -> Result<Option<Graph>> {
    verify(g).map_err(|e| Error::invalid_input("rewrite_once", e))?;
    let rewrite = rules::rewrites()
        .into_iter()
        .find(|r| r.name.as_str() == rule)
        .ok_or_else(|| {
            Error::UnknownRule(format!("rewrite_once: there is no rule named `{rule}`"))
        })?;
    let mut eg = TensorEGraph::new(TensorAnalysis::default());
    let classes = add_graph(&mut eg, g);
    let original: Vec<TensorLang> = eg.classes().flat_map(|c| c.nodes.clone()).collect();
    let runner: Runner<TensorLang, TensorAnalysis> = Runner::default()
        .with_egraph(eg)
        .with_iter_limit(1)
        .with_scheduler(SimpleScheduler)
        .run([&rewrite]);
    if !runner
        .iterations
        .iter()
        .any(|it| it.applied.contains_key(&rewrite.name))
    {
        return Ok(None);
    }
    let eg = runner.egraph;
    if !eg.analysis.conflicts.is_empty() {
        return Err(Error::Internal(format!(
            "rewrite_once: `{rule}` merged values that differ: {}",
            eg.analysis.conflicts.join("; ")
        )));
    }
    let original = original
        .into_iter()
        .map(|n| n.map_children(|c| eg.find(c)))
        .collect();
    let choice = cost::extract(&eg, &mut cost::PreferNew { original });
    let out = extract_graph(&eg, &choice, g, &classes, &vec![true; g.outputs.len()])?;
    verify(&out).map_err(|e| {
        Error::Internal(format!(
            "rewrite_once: `{rule}` produced an invalid graph: {e}"
        ))
    })?;
    Ok(Some(out))
}

/// Optimizes a (primitive) graph by equality saturation and cost-based extraction.
///
/// Returns an equivalent graph and a report. Errors only on an invalid input graph, or on an
/// internal inconsistency (which would be a bug, reported rather than miscompiled).
pub fn optimize(g: &Graph, cfg: &OptimizeConfig) -> Result<(Graph, OptimizeReport)> {
    verify(g).map_err(|e| Error::invalid_input("optimize", e))?;
    optimize_verified(g, cfg)
}

/// [`optimize`] of a graph that its caller has just verified (the pipeline's decomposed
/// graph, which `decompose` verified), which is not verified again; its result is.
pub(crate) fn optimize_verified(
    g: &Graph,
    cfg: &OptimizeConfig,
) -> Result<(Graph, OptimizeReport)> {
    on_mock_clock(|| optimize_stopped_clock(g, cfg))
}

/// Runs `f` with egg's clock stopped.
///
/// egg times its runner, its rebuilds and its rules with `quanta`, whose first reading in a
/// process calibrates the TSC against the OS clock in a busy loop: at least 500 rounds of a
/// microsecond, up to 200 ms on a noisy machine. That was half the instructions of compiling a
/// small graph, and its wall time came on every `ferrite` invocation. Under a mock clock egg's
/// timings all read zero, so its own time limit never fires; [`optimize_region`] enforces the
/// budget with std's clock in a runner hook instead, checked where egg checks its limits (at the
/// start of each iteration).
fn on_mock_clock<T>(f: impl FnOnce() -> T) -> T {
    thread_local! {
        static STOPPED: quanta::Clock = quanta::Clock::mock().0;
    }
    STOPPED.with(|clock| quanta::with_clock(clock, f))
}

fn optimize_stopped_clock(g: &Graph, cfg: &OptimizeConfig) -> Result<(Graph, OptimizeReport)> {
    let start = Instant::now();
    let cost_before = cost::graph_cost(g);
    let mut report = OptimizeReport {
        stop_reason: "disabled".into(),
        iterations: 0,
        egraph_nodes: 0,
        egraph_classes: 0,
        rules_fired: BTreeMap::new(),
        ops_before: g.op_count(),
        ops_after: g.op_count(),
        cost_before,
        cost_after: cost_before,
        windows: 0,
        windows_skipped: 0,
        time: Duration::ZERO,
    };
    if !cfg.enabled {
        report.time = start.elapsed();
        return Ok((g.clone(), report));
    }
    let out = optimize_windows(g, cfg, &mut report)?;
    verify(&out)
        .map_err(|e| Error::Internal(format!("optimize: produced an invalid graph: {e}")))?;
    for (i, (&a, &b)) in g.outputs.iter().zip(&out.outputs).enumerate() {
        if g.ty(a) != out.ty(b) || g.output_name(i) != out.output_name(i) {
            return Err(Error::Internal(format!(
                "optimize: output {i} changed from `{}`: {} to `{}`: {}",
                g.output_name(i),
                g.ty(a),
                out.output_name(i),
                out.ty(b)
            )));
        }
    }
    report.ops_after = out.op_count();
    report.cost_after = cost::graph_cost(&out);
    report.time = start.elapsed();
    Ok((out, report))
}

/// Splits the graph's nodes into windows, optimizes each (while time lasts) and stitches the
/// results together.
fn optimize_windows(g: &Graph, cfg: &OptimizeConfig, report: &mut OptimizeReport) -> Result<Graph> {
    let rules = rules::rewrites();
    // The budget is for rewriting: it starts after the input was checked and costed.
    let deadline = Instant::now() + cfg.time_limit;
    let n = g.nodes.len();
    // The last node that uses each value, and which values the graph returns.
    let mut last_use = vec![0usize; n];
    for (i, node) in g.nodes.iter().enumerate() {
        for &x in &node.inputs {
            last_use[x.index()] = i;
        }
    }
    let returned: HashSet<usize> = g.outputs.iter().map(|o| o.index()).collect();
    let names: HashSet<&str> = g.nodes.iter().filter_map(|n| n.name.as_deref()).collect();
    let mut prefix = String::from("window_in");
    while names.iter().any(|n| n.starts_with(&prefix)) {
        prefix.push('_');
    }

    let mut out = Graph::new(g.name.clone());
    out.declared_outputs = g.declared_outputs.clone();
    let mut map: Vec<Option<ValueId>> = vec![None; n];
    for &p in &g.params {
        map[p.index()] = Some(ValueId(out.nodes.len() as u32));
        out.params.push(ValueId(out.nodes.len() as u32));
        out.nodes.push(g.node(p).clone());
    }
    let body: Vec<usize> = (0..n)
        .filter(|&i| !matches!(g.nodes[i].op, Op::Param { .. }))
        .collect();
    let chunks: Vec<&[usize]> = body.chunks(cfg.window.max(1)).collect();
    let mut reasons: Vec<String> = Vec::new();
    for (k, chunk) in chunks.iter().enumerate() {
        let now = Instant::now();
        let end = chunk.last().map_or(0, |&i| i + 1);
        let (window, externals, exits) = cut_window(g, chunk, end, &last_use, &returned, &prefix);
        if exits.is_empty() {
            continue; // nothing here is used: dead code
        }
        report.windows += 1;
        let strict: Vec<bool> = exits.iter().map(|i| returned.contains(i)).collect();
        let result = if now >= deadline {
            report.windows_skipped += 1;
            reasons.push("skipped".into());
            window
        } else {
            let budget = (deadline - now) / (chunks.len() - k) as u32;
            let (optimized, stats) = optimize_region(&window, &strict, cfg, budget, &rules)?;
            reasons.push(stats.stop_reason);
            report.iterations += stats.iterations;
            report.egraph_nodes += stats.egraph_nodes;
            report.egraph_classes += stats.egraph_classes;
            for (rule, count) in stats.rules_fired {
                *report.rules_fired.entry(rule).or_default() += count;
            }
            // Never make code worse: the extraction's tree cost can misjudge sharing.
            let (before, after) = (cost::graph_cost(&window), cost::graph_cost(&optimized));
            if after > before * (1.0 + 1e-9) + 1e-9 {
                window
            } else {
                optimized
            }
        };
        stitch(&mut out, &mut map, &result, &externals, &exits)?;
    }
    report.stop_reason = summarize(&reasons);
    out.outputs = g
        .outputs
        .iter()
        .map(|o| {
            map[o.index()].ok_or_else(|| Error::internal("optimize: an output was not rebuilt"))
        })
        .collect::<Result<_, _>>()?;
    Ok(out)
}

/// The window of graph nodes `chunk` as a graph of its own: values from earlier windows become
/// parameters (`externals`, by original index; literals and small constants are copied instead), and the values
/// later nodes or the graph's outputs use become its outputs (`exits`, by original index).
fn cut_window(
    g: &Graph,
    chunk: &[usize],
    end: usize,
    last_use: &[usize],
    returned: &HashSet<usize>,
    prefix: &str,
) -> (Graph, Vec<usize>, Vec<usize>) {
    let mut w = Graph::new(g.name.clone());
    let mut local: HashMap<usize, ValueId> = HashMap::new();
    let mut externals = Vec::new();
    for &i in chunk {
        let node = &g.nodes[i];
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &x in &node.inputs {
            let x = x.index();
            let v = match local.get(&x) {
                Some(&v) => v,
                None => {
                    let src = &g.nodes[x];
                    let v = ValueId(w.nodes.len() as u32);
                    // Literals and small constants are copied, so folding sees them;
                    // a copied constant shares its tensor.
                    let small = src.op.constant().is_some_and(|c| c.is_small());
                    if matches!(src.op, Op::Literal { .. }) || small {
                        w.nodes.push(Node {
                            name: None,
                            ..src.clone()
                        });
                    } else {
                        w.params.push(v);
                        w.nodes.push(Node {
                            op: Op::Param {
                                index: externals.len(),
                            },
                            inputs: vec![],
                            ty: src.ty.clone(),
                            name: Some(format!("{prefix}{}", externals.len())),
                        });
                        externals.push(x);
                    }
                    local.insert(x, v);
                    v
                }
            };
            inputs.push(v);
        }
        local.insert(i, ValueId(w.nodes.len() as u32));
        w.nodes.push(Node {
            inputs,
            ..node.clone()
        });
    }
    let exits: Vec<usize> = chunk
        .iter()
        .copied()
        .filter(|&i| last_use[i] >= end || returned.contains(&i))
        .collect();
    w.outputs = exits.iter().map(|i| local[i]).collect();
    (w, externals, exits)
}

/// Appends an optimized window to `out`, mapping its parameters to the values they stand for.
fn stitch(
    out: &mut Graph,
    map: &mut [Option<ValueId>],
    window: &Graph,
    externals: &[usize],
    exits: &[usize],
) -> Result<()> {
    let mut local: Vec<ValueId> = Vec::with_capacity(window.nodes.len());
    for node in &window.nodes {
        let v = match node.op {
            // Earlier windows, which define every value this one uses, are stitched first.
            Op::Param { index } => externals.get(index).and_then(|&x| map[x]).ok_or_else(|| {
                Error::internal("optimize: a window uses a value no earlier window defines")
            })?,
            _ => {
                let v = ValueId(out.nodes.len() as u32);
                out.nodes.push(Node {
                    inputs: node.inputs.iter().map(|x| local[x.index()]).collect(),
                    ..node.clone()
                });
                v
            }
        };
        local.push(v);
    }
    for (&i, o) in exits.iter().zip(&window.outputs) {
        map[i] = Some(local[o.index()]);
    }
    Ok(())
}

/// What one e-graph run did.
struct RegionStats {
    stop_reason: String,
    iterations: usize,
    egraph_nodes: usize,
    egraph_classes: usize,
    rules_fired: BTreeMap<String, usize>,
}

/// How a stop for time reads in [`OptimizeReport::stop_reason`], as egg's own `TimeLimit` does.
const TIME_LIMIT: &str = "TimeLimit";

/// Runs the rules on one graph and extracts the cheapest equivalent graph.
fn optimize_region(
    g: &Graph,
    strict: &[bool],
    cfg: &OptimizeConfig,
    time: Duration,
    rules: &[Rewrite<TensorLang, TensorAnalysis>],
) -> Result<(Graph, RegionStats)> {
    let mut eg = TensorEGraph::new(TensorAnalysis::default());
    let classes = add_graph(&mut eg, g);
    let initial = eg.number_of_classes();
    let started = Instant::now();
    let runner: Runner<TensorLang, TensorAnalysis> = Runner::default()
        .with_egraph(eg)
        .with_iter_limit(cfg.iter_limit)
        .with_node_limit(cfg.node_limit)
        // egg's clock is stopped (see `on_mock_clock`): the budget is this hook's.
        .with_time_limit(Duration::MAX)
        .with_hook(move |_| {
            let elapsed = started.elapsed();
            if elapsed > time {
                Err(format!("{TIME_LIMIT}({:.4})", elapsed.as_secs_f64()))
            } else {
                Ok(())
            }
        })
        // Backoff bans a rule that matches too often, against explosive rules; none of ours is,
        // so the first ban waits until a rule matches more often than there are classes.
        .with_scheduler(BackoffScheduler::default().with_initial_match_limit(initial.max(1_000)))
        .run(rules);
    let mut rules_fired = BTreeMap::new();
    for it in &runner.iterations {
        for (rule, &count) in &it.applied {
            *rules_fired.entry(rule.as_str().to_string()).or_default() += count;
        }
    }
    let stop_reason = match &runner.stop_reason {
        Some(StopReason::Other(r)) if r.starts_with(TIME_LIMIT) => r.clone(),
        Some(r) => format!("{r:?}"),
        None => "unknown".into(),
    };
    let eg = runner.egraph;
    if !eg.analysis.conflicts.is_empty() {
        return Err(Error::Internal(format!(
            "optimize: rewriting merged values that differ: {}",
            eg.analysis.conflicts.join("; ")
        )));
    }
    let choice = cost::extract(&eg, &mut cost::CostModel::new(&eg));
    let out = extract_graph(&eg, &choice, g, &classes, strict)?;
    let stats = RegionStats {
        stop_reason,
        iterations: runner.iterations.len(),
        egraph_nodes: eg.total_number_of_nodes(),
        egraph_classes: eg.number_of_classes(),
        rules_fired,
    };
    Ok((out, stats))
}

/// One stop reason, or for many windows each distinct kind of reason with its window count.
fn summarize(reasons: &[String]) -> String {
    match reasons {
        [] => "empty".into(),
        [one] => one.clone(),
        _ => {
            // Group by the reason's kind: the numbers inside differ from window to window.
            let mut counts: Vec<(String, usize)> = Vec::new();
            for r in reasons {
                let kind = r.split('(').next().unwrap_or(r).to_string();
                match counts.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((kind, 1)),
                }
            }
            counts
                .iter()
                .map(|(k, n)| format!("{k} ({n} window{})", if *n == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

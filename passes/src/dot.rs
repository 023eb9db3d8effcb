//! `graph.dot`: the optimized graph drawn with Graphviz, one cluster per kernel.
//!
//! Reading a fusion result from loop IR alone is hard; a picture of the graph with a
//! box around each kernel shows at a glance what went together and which edges cost
//! a round trip through memory. [`graph_dot`] draws:
//!
//! - every computing node as a box labelled with its name, id, op, attributes and
//!   result type; literal operands are written into their consumer's label instead of
//!   being drawn (`mul(·, 0.5)`);
//! - parameters as ellipses and outputs as double octagons, outside every cluster;
//! - one `cluster_kN` per kernel, labelled with the kernel's name and the bytes it
//!   reads and writes, holding the nodes that only that kernel computes;
//! - nodes computed by several kernels (views and memory-free values that fusion
//!   recomputes in each consumer) outside the clusters, dashed, naming the kernels;
//! - edges inside a kernel thin and grey (the value stays in registers), edges
//!   between kernels bold and labelled with the bytes of the materialized buffer.
//!
//! Render with `dot -Tsvg graph.dot -o graph.svg`.

use ferrite_ir::loops::Program;
use ferrite_ir::{Graph, Op, Scalar, ValueId};
use std::fmt::Write;

/// Draws `g` with the kernels of `program` (scheduled from `g`) as clusters; see the
/// module docs. The output is a complete Graphviz `digraph`.
pub fn graph_dot(g: &Graph, program: &Program) -> String {
    // The kernels that compute each value (a kernel lists a value once).
    let mut kernels_of: Vec<Vec<usize>> = vec![Vec::new(); g.nodes.len()];
    for (ki, k) in program.kernels.iter().enumerate() {
        for v in &k.nodes {
            if let Some(list) = kernels_of.get_mut(v.index()) {
                if !list.contains(&ki) {
                    list.push(ki);
                }
            }
        }
    }
    let live = live_values(g);
    // (The program may compute values `g` lacks: the index checks that scheduling adds.)
    let home = |v: ValueId| match kernels_of.get(v.index()).map(Vec::as_slice) {
        Some([k]) => Some(*k),
        _ => None,
    };

    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", quote(&g.name));
    let _ = writeln!(
        s,
        "  label={}; labelloc=t; fontname=\"monospace\";",
        quote(&format!(
            "{}: {} op{} in {} kernel{}",
            g.name,
            g.op_count(),
            if g.op_count() == 1 { "" } else { "s" },
            program.kernels.len(),
            if program.kernels.len() == 1 { "" } else { "s" }
        ))
    );
    s.push_str("  rankdir=TB; newrank=true;\n");
    s.push_str(
        "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"monospace\", fontsize=10];\n",
    );
    s.push_str("  edge [fontname=\"monospace\", fontsize=9];\n");

    for (i, &p) in g.params.iter().enumerate() {
        let name = g
            .node(p)
            .name
            .clone()
            .unwrap_or_else(|| format!("param{i}"));
        let _ = writeln!(
            s,
            "  {} [shape=ellipse, style=filled, fillcolor=\"#e8e8e8\", label={}];",
            node_id(p),
            quote(&format!("{name}\n{}", g.ty(p)))
        );
    }

    for (ki, k) in program.kernels.iter().enumerate() {
        let read: usize = k.reads.iter().map(|a| a.bytes).sum();
        let written: usize = k.writes.iter().map(|a| a.bytes).sum();
        let _ = writeln!(s, "  subgraph cluster_k{ki} {{");
        let _ = writeln!(
            s,
            "    label={}; style=\"rounded,filled\"; fillcolor=\"#f4f8ff\"; color=\"#4a78c2\";",
            quote(&format!(
                "{}\nreads {}, writes {}",
                k.name,
                bytes(read),
                bytes(written)
            ))
        );
        for v in &k.nodes {
            if v.index() < g.nodes.len() && home(*v) == Some(ki) && is_drawn(g, *v) {
                let _ = writeln!(s, "    {}", node_stmt(g, *v, None));
            }
        }
        s.push_str("  }\n");
    }

    // Recomputed or dead nodes: outside every cluster, marked as such.
    for v in g.values() {
        if !is_drawn(g, v) || matches!(g.node(v).op, Op::Param { .. }) || home(v).is_some() {
            continue;
        }
        let note = match kernels_of[v.index()].as_slice() {
            [] if live[v.index()] => "not computed by any kernel".to_string(),
            [] => "dead: no output depends on it".to_string(),
            ks => format!(
                "recomputed in {}",
                ks.iter()
                    .map(|&k| format!("k{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let _ = writeln!(s, "  {}", node_stmt(g, v, Some(&note)));
    }

    for (i, &o) in g.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  out{i} [shape=doubleoctagon, style=filled, fillcolor=\"#e8e8e8\", label={}];",
            quote(&format!("output {i}: {}\n{}", g.output_name(i), g.ty(o)))
        );
        let _ = writeln!(s, "  {} -> out{i};", node_id(o));
    }

    for v in g.values() {
        if !is_drawn(g, v) {
            continue;
        }
        for &x in &g.node(v).inputs {
            if !is_drawn(g, x) {
                continue;
            }
            let attrs = match (home(x), home(v)) {
                (Some(a), Some(b)) if a == b => "[color=\"#9a9a9a\"]".to_string(),
                (Some(_), Some(_)) => format!(
                    "[style=bold, label={}]",
                    quote(&bytes(g.ty(x).size_bytes()))
                ),
                _ => String::new(),
            };
            let sep = if attrs.is_empty() { "" } else { " " };
            let _ = writeln!(s, "  {} -> {}{sep}{attrs};", node_id(x), node_id(v));
        }
    }
    s.push_str("}\n");
    s
}

/// Literals are folded into their consumers' labels; everything else is a node.
fn is_drawn(g: &Graph, v: ValueId) -> bool {
    !matches!(g.node(v).op, Op::Literal { .. })
}

/// Values some output depends on.
fn live_values(g: &Graph) -> Vec<bool> {
    let mut live = vec![false; g.nodes.len()];
    for &o in &g.outputs {
        live[o.index()] = true;
    }
    for i in (0..g.nodes.len()).rev() {
        if live[i] {
            for x in &g.nodes[i].inputs {
                live[x.index()] = true;
            }
        }
    }
    live
}

fn node_id(v: ValueId) -> String {
    format!("n{}", v.0)
}

/// `n7 [label="h = %7 mul(·, 0.5)\nf32[64, 256]", fillcolor=...];`
fn node_stmt(g: &Graph, v: ValueId, note: Option<&str>) -> String {
    let n = g.node(v);
    let mut head = format!("{v} {}", n.op.name());
    if n.inputs.iter().any(|&x| !is_drawn(g, x)) {
        let operands: Vec<String> = n
            .inputs
            .iter()
            .map(|&x| match g.node(x).op {
                Op::Literal { value } => literal_text(value),
                _ => "·".to_string(),
            })
            .collect();
        head = format!("{head}({})", operands.join(", "));
    }
    if let Some(name) = &n.name {
        head = format!("{name} = {head}");
    }
    let mut label = head;
    let attrs: Vec<String> =
        n.op.attributes()
            .into_iter()
            .map(|(k, a)| format!("{k}={a}"))
            .collect();
    if !attrs.is_empty() {
        label = format!("{label}\n{}", attrs.join(" "));
    }
    label = format!("{label}\n{}", n.ty);
    let mut style = String::from("rounded,filled");
    if let Some(note) = note {
        label = format!("{label}\n({note})");
        style.push_str(",dashed");
    }
    format!(
        "{} [label={}, style={}, fillcolor={}];",
        node_id(v),
        quote(&label),
        quote(&style),
        quote(fill(&n.op))
    )
}

/// A literal as written in `.fg` text (`2`, `0.5`, `true`).
fn literal_text(value: Scalar) -> String {
    match value {
        Scalar::Float(v) => ferrite_ir::op::format_float(v),
        Scalar::Int(v) => v.to_string(),
        Scalar::Bool(b) => b.to_string(),
    }
}

/// A colour per kind of op, so matmuls and reductions stand out in a large graph.
fn fill(op: &Op) -> &'static str {
    match op {
        Op::MatMul => "#ffd8a8",
        Op::Reduce { .. } | Op::ArgReduce { .. } => "#cfe2ff",
        _ if op.is_movement() => "#eeeeee",
        Op::IndexSelect { .. } | Op::Gather { .. } => "#e5dbff",
        _ => "white",
    }
}

/// A Graphviz string literal: quotes and backslashes escaped, newlines as `\n`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `512 B`, `64.0 KiB`, `3.00 MiB`.
fn bytes(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.2} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompose::decompose;
    use crate::schedule::{schedule, ScheduleOptions};

    fn scheduled(text: &str, fuse: bool) -> (Graph, Program) {
        let g = decompose(&ferrite_ir::parse("t.fg", text).unwrap()).unwrap();
        let opts = if fuse {
            ScheduleOptions::default()
        } else {
            ScheduleOptions::unfused()
        };
        let p = schedule(&g, &opts).unwrap().program;
        (g, p)
    }

    /// The statements between `subgraph cluster_kN {` and its closing brace.
    fn cluster_body(dot: &str, k: usize) -> &str {
        let start = dot
            .find(&format!("subgraph cluster_k{k} {{"))
            .unwrap_or_else(|| panic!("no cluster k{k} in\n{dot}"));
        let end = dot[start..].find("\n  }\n").unwrap() + start;
        &dot[start..end]
    }

    const SOFTMAX: &str = "graph sm(x: f32[4, 8]) -> f32[4, 8] {\n  y = softmax(mul(x, 0.5), axis=-1)\n  return y\n}\n";

    #[test]
    fn fused_softmax_is_one_cluster_with_every_node() {
        let (g, p) = scheduled(SOFTMAX, true);
        assert_eq!(p.kernels.len(), 1, "{p}");
        let dot = graph_dot(&g, &p);
        assert!(dot.starts_with("digraph \"sm\" {\n"), "{dot}");
        assert!(dot.ends_with("}\n"));
        assert_eq!(dot.matches("subgraph cluster_").count(), 1);
        let body = cluster_body(&dot, 0);
        for v in &p.kernels[0].nodes {
            if is_drawn(&g, *v) {
                assert!(
                    body.contains(&format!("  {} [", node_id(*v))),
                    "{v} missing in\n{body}"
                );
            }
        }
        // The literal is folded into its consumer and never drawn as a node.
        assert!(dot.contains("mul(·, 0.5)"), "{dot}");
        assert!(dot.contains(" in 1 kernel\""), "{dot}");
        // The named value's label starts with its name.
        let y = g.find("y").unwrap();
        assert!(dot.contains(&format!("label=\"y = {y} mul\\n")), "{dot}");
        let literal = g.values().find(|&v| !is_drawn(&g, v)).unwrap();
        assert!(!dot.contains(&format!("{} ", node_id(literal))));
        // No edge inside the kernel is drawn as a materialized buffer.
        assert!(!dot.contains("style=bold"), "{dot}");
        assert!(dot.contains("n0 [shape=ellipse") && dot.contains("out0 [shape=doubleoctagon"));
    }

    #[test]
    fn unfused_edges_between_kernels_carry_bytes() {
        let (g, p) = scheduled(SOFTMAX, false);
        let dot = graph_dot(&g, &p);
        assert_eq!(dot.matches("subgraph cluster_").count(), p.kernels.len());
        // Every edge between two computing nodes crosses kernels: bold, with its size.
        let computing = g
            .values()
            .filter(|&v| is_drawn(&g, v) && !matches!(g.node(v).op, Op::Param { .. }));
        let crossing: usize = computing
            .map(|v| {
                g.node(v)
                    .inputs
                    .iter()
                    .filter(|&&x| is_drawn(&g, x) && !matches!(g.node(x).op, Op::Param { .. }))
                    .count()
            })
            .sum();
        assert!(crossing > 0);
        assert_eq!(dot.matches("style=bold").count(), crossing, "{dot}");
        // A [4, 8] f32 buffer is 128 bytes; the row max and sum are [4, 1]: 16 bytes.
        assert!(dot.contains("label=\"128 B\""), "{dot}");
        assert!(dot.contains("label=\"16 B\""), "{dot}");
    }

    #[test]
    fn every_node_is_drawn_once_and_braces_balance() {
        let text = "graph t(x: f32[8, 16], w: f32[16, 4], b: f32[4]) -> f32[8, 4], f32[8] {\n  h = add(matmul(x, w), b)\n  r = relu(h)\n  s = sum(permute(r, dims=[1, 0]), axes=[0])\n  return r, s\n}\n";
        for fuse in [true, false] {
            let (g, p) = scheduled(text, fuse);
            let dot = graph_dot(&g, &p);
            for v in g.values().filter(|&v| is_drawn(&g, v)) {
                let decl = format!("  {} [", node_id(v));
                assert_eq!(dot.matches(&decl).count(), 1, "{v} in\n{dot}");
            }
            assert_eq!(dot.matches('{').count(), dot.matches('}').count());
            assert_eq!(dot.matches("subgraph cluster_").count(), p.kernels.len());
            assert!(dot.contains("-> out0;") && dot.contains("-> out1;"));
        }
    }

    #[test]
    fn quoting_escapes_quotes_backslashes_and_newlines() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(65536), "64.0 KiB");
        assert_eq!(bytes(3 << 20), "3.00 MiB");
    }

    /// Scheduling adds index checks the graph lacks (here for an `index_select` with an
    /// empty result): the drawing skips their values instead of indexing past the graph
    /// (`ferrite compile --dump` panicked on such a graph).
    #[test]
    fn program_values_beyond_the_graph_are_skipped() {
        let text = "graph e(x: f32[0, 0]) -> f32[2, 0] {\n  y = index_select(x, full(shape=[2], value=-1, dtype=i64), axis=0)\n  return y\n}\n";
        for fuse in [true, false] {
            let (g, p) = scheduled(text, fuse);
            let beyond = p
                .kernels
                .iter()
                .flat_map(|k| &k.nodes)
                .any(|v| v.index() >= g.nodes.len());
            assert!(beyond, "no check kernel in\n{p}");
            let dot = graph_dot(&g, &p);
            assert!(dot.ends_with("}\n"), "{dot}");
        }
    }
}

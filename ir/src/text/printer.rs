//! The printer: a [`Graph`] to canonical `.fg` text.
//!
//! Canonical means what a user would write: one statement per named node in node
//! order, anonymous single-use nodes nested at their use, literals inline,
//! attributes only where they differ from their defaults. For a parsed graph,
//! parsing the printed text gives the same graph, and printing is a fixed point.
//!
//! Graphs built through the API may hold what the text cannot say directly, and
//! the printer makes it sayable rather than wrong:
//! - an anonymous node used twice (or never) becomes a statement with a fresh
//!   name `t0`, `t1`, ... that no node already has;
//! - an anonymous chain nested deeper than the parser accepts is cut into named
//!   temporaries the same way;
//! - a literal whose dtype is not the one the parser would give it in that place
//!   (or that feeds an op which needs a tensor) is printed as the equivalent
//!   `full(shape=[], value=.., dtype=..)`.
//!
//! Nothing here recurses: expressions are written from an explicit stack, so
//! any graph prints whatever its depth. Operands that refer to missing or later
//! nodes (graphs that fail `verify`) print as `%N` instead of panicking.

use super::parser::MAX_NESTING;
use crate::op::{format_float, Op, Scalar};
use crate::sym::{SymGraph, DEFAULT_MAX};
use crate::{Constant, Data, Graph, ValueId};
use std::collections::HashSet;

/// Prints `g` as `.fg` text (ending with a newline).
pub fn print(g: &Graph) -> String {
    Printer::new(g).print()
}

/// Prints a graph with symbolic dimensions: its `dims` line, symbolic parameter and
/// result types and size expressions in attributes. Parsing the text gives the same
/// graph.
pub fn print_symbolic(g: &SymGraph) -> String {
    let mut p = Printer::new(&g.skeleton);
    p.sym = Some(g);
    p.print()
}

/// How one value is referred to where it is used.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// By its name (parameters, named nodes, temporaries).
    Named,
    /// Written out in full at its single use.
    Inline,
    /// A literal, written at each use.
    Literal,
}

/// One piece of an expression still to be written.
enum Work<'g> {
    Text(&'g str),
    Owned(String),
    /// Operand `pos` of node `user` (or output `pos` when `user` is `None`).
    Operand {
        user: Option<usize>,
        pos: usize,
    },
    /// A node's call, written in full.
    Call(usize),
}

struct Printer<'g> {
    g: &'g Graph,
    form: Vec<Form>,
    /// The name each named node is printed with.
    names: Vec<Option<String>>,
    /// For each node, which operands are literals printed as literal text (the
    /// others print as `full(..)`); empty for nodes without literal operands.
    literal_text: Vec<Vec<bool>>,
    /// Same, for the outputs.
    output_literal_text: Vec<bool>,
    /// The symbolic types and attributes, when printing a [`SymGraph`].
    sym: Option<&'g SymGraph>,
}

impl<'g> Printer<'g> {
    fn new(g: &'g Graph) -> Printer<'g> {
        let n = g.nodes.len();
        let valid = |user: usize, v: ValueId| v.index() < user;
        // Uses of each node; an operand that is not an earlier node is no use.
        let mut uses = vec![0usize; n];
        for (i, node) in g.nodes.iter().enumerate() {
            for &v in &node.inputs {
                if valid(i, v) {
                    uses[v.index()] += 1;
                }
            }
        }
        for &o in &g.outputs {
            if o.index() < n {
                uses[o.index()] += 1;
            }
        }
        let literal_text: Vec<Vec<bool>> = (0..n).map(|i| literal_operands(g, i)).collect();
        let output_literal_text: Vec<bool> = g
            .outputs
            .iter()
            .map(|&o| match g.nodes.get(o.index()).map(|n| &n.op) {
                Some(Op::Literal { value }) => g.ty(o).dtype == value.dtype_beside(None),
                _ => false,
            })
            .collect();

        let mut form = Vec::with_capacity(n);
        // Nesting depth of each inline expression, in calls.
        let mut height = vec![0usize; n];
        for (i, node) in g.nodes.iter().enumerate() {
            let f = match node.op {
                Op::Literal { .. } => Form::Literal,
                Op::Param { .. } => Form::Named,
                _ if node.name.is_none() && uses[i] == 1 => Form::Inline,
                _ => Form::Named,
            };
            form.push(f);
            if matches!(node.op, Op::Param { .. } | Op::Literal { .. }) {
                continue;
            }
            let mut h = 0;
            for (pos, &v) in node.inputs.iter().enumerate() {
                if !valid(i, v) {
                    continue;
                }
                let vi = v.index();
                match form[vi] {
                    // Cut a chain that would nest deeper than the parser accepts.
                    Form::Inline if height[vi] >= MAX_NESTING => form[vi] = Form::Named,
                    Form::Inline => h = h.max(height[vi]),
                    // A literal printed as `full(..)` is one call deep.
                    Form::Literal if !literal_text[i].get(pos).copied().unwrap_or(true) => {
                        h = h.max(1)
                    }
                    _ => {}
                }
            }
            height[i] = h + 1;
        }

        // Fresh names for anonymous named nodes, avoiding every existing name.
        let taken: HashSet<&str> = g.nodes.iter().filter_map(|n| n.name.as_deref()).collect();
        let mut next_temp = 0usize;
        let mut names = Vec::with_capacity(n);
        for (i, node) in g.nodes.iter().enumerate() {
            names.push(match (&node.name, form[i]) {
                (Some(name), _) => Some(name.clone()),
                (None, Form::Named) => loop {
                    let t = format!("t{next_temp}");
                    next_temp += 1;
                    if !taken.contains(t.as_str()) {
                        break Some(t);
                    }
                },
                _ => None,
            });
        }
        Printer {
            g,
            form,
            names,
            literal_text,
            output_literal_text,
            sym: None,
        }
    }

    fn print(&self) -> String {
        let g = self.g;
        let mut out = String::new();
        if let Some(file) = weights_file(g) {
            out.push_str(&format!("weights {file:?}\n"));
        }
        if let Some(sg) = self.sym {
            let declared: Vec<String> = sg
                .facts
                .symbols
                .iter()
                .filter(|s| s.declared)
                .map(|s| {
                    if s.lo == 1 && s.hi == DEFAULT_MAX {
                        s.name.to_string()
                    } else {
                        format!("{} in [{}, {}]", s.name, s.lo, s.hi)
                    }
                })
                .collect();
            if !declared.is_empty() {
                out.push_str(&format!("dims {}\n", declared.join(", ")));
            }
        }
        out.push_str(&format!("graph {}(", g.name));
        for (k, &p) in g.params.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            match g.nodes.get(p.index()) {
                Some(node) => {
                    let name = node.name.clone().unwrap_or_else(|| p.to_string());
                    match self.sym {
                        Some(sg) => out.push_str(&format!("{name}: {}", sg.types[p.index()])),
                        None => out.push_str(&format!("{name}: {}", node.ty)),
                    }
                }
                None => out.push_str(&p.to_string()),
            }
        }
        out.push(')');
        let decl: Option<Vec<String>> = match self.sym {
            Some(sg) => sg
                .declared_outputs
                .as_ref()
                .map(|d| d.iter().map(|t| t.to_string()).collect()),
            None => g
                .declared_outputs
                .as_ref()
                .map(|d| d.iter().map(|t| t.to_string()).collect()),
        };
        if let Some(types) = decl {
            out.push_str(" -> ");
            out.push_str(&types.join(", "));
        }
        out.push_str(" {\n");
        for (i, node) in g.nodes.iter().enumerate() {
            if self.form[i] != Form::Named || matches!(node.op, Op::Param { .. }) {
                continue;
            }
            out.push_str("  ");
            out.push_str(self.names[i].as_deref().unwrap_or_default());
            out.push_str(" = ");
            self.write(&mut out, Work::Call(i));
            out.push('\n');
        }
        out.push_str("  return");
        for pos in 0..g.outputs.len() {
            out.push_str(if pos == 0 { " " } else { ", " });
            self.write(&mut out, Work::Operand { user: None, pos });
        }
        out.push_str("\n}\n");
        out
    }

    /// Node `i`'s attributes as `(key, text)`, size expressions in place of the
    /// placeholders of a symbolic graph's node.
    fn attribute_texts(&self, i: usize) -> Vec<(&'static str, String)> {
        let node = &self.g.nodes[i];
        let mut out: Vec<(&'static str, String)> = node
            .op
            .attributes()
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        let Some(sg) = self.sym else {
            return out;
        };
        for (key, exprs) in &sg.attrs[i] {
            let list = matches!(
                (&node.op, key.as_str()),
                (
                    Op::Full { .. } | Op::Reshape { .. } | Op::Expand { .. },
                    "shape"
                )
            );
            let text = if list {
                let items: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
                format!("[{}]", items.join(", "))
            } else {
                exprs
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = text,
                None => {
                    let spec_key = node
                        .op
                        .spec()
                        .and_then(|spec| spec.attrs.iter().find(|a| a.name == key))
                        .map(|a| a.name);
                    if let Some(k) = spec_key {
                        out.push((k, text));
                    }
                }
            }
        }
        out
    }

    /// Writes one expression, expanding inline operands from an explicit stack.
    fn write(&self, out: &mut String, root: Work<'g>) {
        let g = self.g;
        let mut stack = vec![root];
        while let Some(work) = stack.pop() {
            match work {
                Work::Text(s) => out.push_str(s),
                Work::Owned(s) => out.push_str(&s),
                Work::Call(i) => {
                    let node = &g.nodes[i];
                    if let Op::Constant(c) = &node.op {
                        out.push_str(&constant_text(c));
                        continue;
                    }
                    out.push_str(node.op.name());
                    out.push('(');
                    // Pushed in reverse: the stack pops them in order.
                    let mut items: Vec<Work<'g>> = Vec::new();
                    for pos in 0..node.inputs.len() {
                        if pos > 0 {
                            items.push(Work::Text(", "));
                        }
                        items.push(Work::Operand { user: Some(i), pos });
                    }
                    for (k, (key, value)) in self.attribute_texts(i).into_iter().enumerate() {
                        if k > 0 || !node.inputs.is_empty() {
                            items.push(Work::Text(", "));
                        }
                        items.push(Work::Owned(format!("{key}={value}")));
                    }
                    items.push(Work::Text(")"));
                    stack.extend(items.into_iter().rev());
                }
                Work::Operand { user, pos } => {
                    let (v, as_text) = match user {
                        Some(i) => (
                            g.nodes[i].inputs[pos],
                            self.literal_text[i].get(pos).copied().unwrap_or(true),
                        ),
                        None => (g.outputs[pos], self.output_literal_text[pos]),
                    };
                    let vi = v.index();
                    let in_range = match user {
                        Some(i) => vi < i,
                        None => vi < g.nodes.len(),
                    };
                    if !in_range {
                        out.push_str(&v.to_string());
                        continue;
                    }
                    match (self.form[vi], &g.nodes[vi].op) {
                        (Form::Literal, Op::Literal { value }) if as_text => {
                            out.push_str(&literal(*value))
                        }
                        (Form::Literal, Op::Literal { value }) => {
                            let full = Op::Full {
                                shape: vec![],
                                value: value.as_f64(),
                                dtype: g.nodes[vi].ty.dtype,
                            };
                            out.push_str(&call_text(&full));
                        }
                        (Form::Inline, _) => stack.push(Work::Call(vi)),
                        _ => out.push_str(self.names[vi].as_deref().unwrap_or_default()),
                    }
                }
            }
        }
    }
}

/// The weights file a printed graph names: its own, or `<graph name>.safetensors`
/// when it has constants with keys and no file; `None` when nothing refers to one.
pub fn weights_file(g: &Graph) -> Option<String> {
    let keyed = g
        .nodes
        .iter()
        .any(|n| n.op.constant().is_some_and(|c| c.key().is_some()));
    match &g.weights {
        Some(file) => Some(file.clone()),
        None if keyed => Some(format!("{}.safetensors", g.name)),
        None => None,
    }
}

/// `constant(name="KEY", dtype=.., shape=[..])` for a constant with a key (its tensor
/// lives in the weights file), `constant(values=[..], dtype=.., shape=[..])` for one
/// without: every value written so that it reads back to the same bits.
fn constant_text(c: &Constant) -> String {
    let ty = c.ty();
    let shape: Vec<String> = ty.shape.iter().map(|d| d.to_string()).collect();
    let typed = format!("dtype={}, shape=[{}]", ty.dtype, shape.join(", "));
    if let Some(key) = c.key() {
        return format!("constant(name={key:?}, {typed})");
    }
    let t = c.tensor();
    let values: Vec<String> = match &t.data {
        Data::F32(v) => v.iter().map(|&x| float32_text(x)).collect(),
        Data::F16(v) => v.iter().map(|x| float32_text(x.to_f32())).collect(),
        Data::Bf16(v) => v.iter().map(|x| float32_text(x.to_f32())).collect(),
        Data::I32(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::I64(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::F64(v) => v.iter().map(|&x| crate::op::format_float(x)).collect(),
        Data::I8(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U8(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::I16(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U16(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U32(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U64(v) => v.iter().map(|x| x.to_string()).collect(),
    };
    format!("constant(values=[{}], {typed})", values.join(", "))
}

/// An `f32` (or a narrower float widened to one) as the shortest text that reads back
/// to it through the parser's f64, or the exact f64 text where rounding twice (decimal
/// to f64 to f32) would change it.
fn float32_text(x: f32) -> String {
    if !x.is_finite() {
        return format_float(x as f64);
    }
    let short = format!("{x:?}");
    match short.parse::<f64>() {
        Ok(v) if (v as f32).to_bits() == x.to_bits() => short,
        _ => format_float(x as f64),
    }
}

/// A literal as written in text: floats keep a point (`2.0`), ints are plain.
fn literal(value: Scalar) -> String {
    match value {
        Scalar::Float(v) => format_float(v),
        Scalar::Int(v) => v.to_string(),
        Scalar::Bool(v) => v.to_string(),
    }
}

/// `op(k=v, ...)` for an op without operands.
fn call_text(op: &Op) -> String {
    let attrs: Vec<String> = op
        .attributes()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{}({})", op.name(), attrs.join(", "))
}

/// For each operand of node `i`: true if it is a literal that can be printed as
/// literal text, i.e. parsing it there gives it its dtype. Literals that cannot
/// are printed as `full(..)`, which is a tensor operand and so changes the peer
/// dtype the others see; hence the loop until nothing changes (it only ever
/// turns more literals into `full`, so it ends).
fn literal_operands(g: &Graph, i: usize) -> Vec<bool> {
    let node = &g.nodes[i];
    let lit = |pos: usize| -> Option<(Scalar, crate::DType)> {
        let v = node.inputs[pos];
        if v.index() >= i {
            return None;
        }
        match &g.nodes[v.index()].op {
            Op::Literal { value } => Some((*value, g.ty(v).dtype)),
            _ => None,
        }
    };
    let k = node.inputs.len();
    if (0..k).all(|p| lit(p).is_none()) {
        return Vec::new();
    }
    let value_positions: &[usize] = match node.op {
        Op::Binary(_) => &[0, 1],
        Op::Where => &[1, 2],
        _ => &[],
    };
    let mut as_text: Vec<bool> = (0..k).map(|p| lit(p).is_some()).collect();
    loop {
        let peer = value_positions
            .iter()
            .filter(|&&p| p < k && !as_text[p])
            .find_map(|&p| {
                let v = node.inputs[p];
                (v.index() < i).then(|| g.ty(v).dtype)
            });
        let mut changed = false;
        for (p, text) in as_text.iter_mut().enumerate() {
            let Some((value, dtype)) = lit(p) else {
                continue;
            };
            let beside = if value_positions.contains(&p) {
                peer
            } else {
                None
            };
            if *text && (!node.op.is_elementwise() || value.dtype_beside(beside) != dtype) {
                *text = false;
                changed = true;
            }
        }
        if !changed {
            return as_text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{BinaryOp, UnaryOp};
    use crate::{DType, TensorType};

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType::new(DType::F32, shape.to_vec()).unwrap()
    }

    #[test]
    fn shared_anonymous_nodes_get_fresh_names() {
        let mut g = crate::Graph::new("g");
        let x = g.add_param("x", f32s(&[2])).unwrap();
        // `t0` is taken, so the temporary is `t1`.
        let t0 = g
            .add(Op::Unary(UnaryOp::Neg), &[x], Some("t0".into()))
            .unwrap();
        let e = g.add(Op::Unary(UnaryOp::Exp), &[t0], None).unwrap();
        let s = g.add(Op::Binary(BinaryOp::Add), &[e, e], None).unwrap();
        let _dead = g.add(Op::Unary(UnaryOp::Abs), &[x], None).unwrap();
        g.outputs = vec![s];
        assert_eq!(
            print(&g),
            "graph g(x: f32[2]) {\n  t0 = neg(x)\n  t1 = exp(t0)\n  t2 = abs(x)\n  return add(t1, t1)\n}\n"
        );
    }

    #[test]
    fn literals_that_text_cannot_type_print_as_full() {
        let mut g = crate::Graph::new("g");
        let x = g.add_param("x", f32s(&[2])).unwrap();
        // Beside an f32 tensor a written `2` would be f32, not i64.
        let two = g.add_literal(Scalar::Int(2), DType::I64).unwrap();
        let a = g.add(Op::Binary(BinaryOp::Add), &[x, two], None).unwrap();
        let half = g.add_literal(Scalar::Float(0.5), DType::F32).unwrap();
        let b = g.add(Op::Binary(BinaryOp::Mul), &[a, half], None).unwrap();
        g.outputs = vec![b];
        assert_eq!(
            print(&g),
            "graph g(x: f32[2]) {\n  return mul(add(x, full(shape=[], value=2.0, dtype=i64)), 0.5)\n}\n"
        );
    }

    #[test]
    fn broken_graphs_print_without_panicking() {
        let mut g = crate::Graph::new("g");
        let x = g.add_param("x", f32s(&[2])).unwrap();
        let y = g.add(Op::Unary(UnaryOp::Neg), &[x], None).unwrap();
        g.nodes[1].inputs = vec![ValueId(7)];
        g.outputs = vec![y, ValueId(9)];
        assert_eq!(print(&g), "graph g(x: f32[2]) {\n  return neg(%7), %9\n}\n");
    }
}

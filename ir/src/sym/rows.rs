//! Row graphs: graphs whose size symbols are only leading "row" axes that no op mixes.
//!
//! A graph is a *row graph* over its leading symbols `L = [B, T]` when every value is
//! either static (no symbol in its type) or `L ++ static` (`f32[B, T, 256]`), no
//! static value is computed from a row value, and every op acts on each row alone:
//! elementwise ops (static operands broadcast over the rows), reductions and
//! normalizations over trailing axes, a matmul of a row value by a static matrix,
//! movement ops and indexing that keep the leading axes in place, an embedding lookup
//! (`index_select` of a static table by row ids). Such a graph computes the same
//! function of each of its `B*T` rows, so it is the same graph at every binding up to
//! the number of rows: [`SymGraph::row_instance`] is its instance at the most rows,
//! with the last row symbol carrying all of them (`[1, B*T, 256]` is `[B, T, 256]`'s
//! memory), which the backends compile once and run at any smaller count.
//!
//! [`SymGraph::rows`] decides it and otherwise says why not, naming the value and its
//! place, so callers can report which path a graph takes.

use super::{Binding, Expr, SymGraph, Symbol, DEFAULT_MAX};
use crate::op::Op;
use crate::types::normalize_axis;
use crate::{Graph, Result, ValueId};

/// How a row graph's rows are counted.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RowForm {
    /// The leading symbols, in order (`[B, T]`); the row count is their product.
    pub symbols: Vec<Symbol>,
    /// The most rows a binding can have: the product of the symbols' upper bounds.
    pub max_rows: usize,
    /// Per parameter: whether it carries rows (else its type is static).
    pub params: Vec<bool>,
    /// Per output: whether it carries rows.
    pub outputs: Vec<bool>,
}

impl RowForm {
    /// The row count at binding `b` (the product of the row symbols' values).
    pub fn rows(&self, b: &Binding) -> Option<usize> {
        self.symbols.iter().try_fold(1usize, |acc, s| {
            let v = usize::try_from(b.get(s)?).ok()?;
            acc.checked_mul(v)
        })
    }

    /// The axis of a row-carrying value's instance that holds the rows (the last
    /// leading axis: the others are 1 in [`SymGraph::row_instance`]).
    pub fn row_axis(&self) -> usize {
        self.symbols.len() - 1
    }

    /// `B*T`: the row count as written.
    pub fn name(&self) -> String {
        self.symbols
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("*")
    }
}

impl SymGraph {
    /// This graph's [`RowForm`] if it is a row graph (see the [module docs](self)),
    /// else why not, naming the first value or op at fault.
    pub fn rows(&self) -> std::result::Result<RowForm, String> {
        let sk = &self.skeleton;
        let place = |v: ValueId| {
            self.places[v.index()]
                .as_deref()
                .map_or(String::new(), |p| format!(" at {p}"))
        };
        let label = |v: ValueId| {
            sk.node(v)
                .name
                .clone()
                .map_or(format!("{v}"), |n| format!("`{n}`"))
        };
        // The leading symbols: those of the first parameter that has any.
        let (lead, symbols, max_rows) = self.row_symbols()?;
        let k = lead.len();
        // Whether each value carries rows (else it is static).
        let mut is_row = vec![false; sk.nodes.len()];
        for (i, node) in sk.nodes.iter().enumerate() {
            let v = ValueId(i as u32);
            let t = &self.types[i];
            let row = t.rank() >= k && t.shape[..k] == lead[..];
            let rest_static = t.shape[if row { k } else { 0 }..]
                .iter()
                .all(Expr::is_const);
            if !rest_static {
                return Err(format!(
                    "{}{} has type {t}: symbols past the leading [{}]",
                    label(v),
                    place(v),
                    lead.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            is_row[i] = row;
            let ins = &node.inputs;
            let any_row_input = ins.iter().any(|x| is_row[x.index()]);
            if !row {
                if any_row_input {
                    return Err(format!(
                        "{}{} ({}) reduces across rows",
                        label(v),
                        place(v),
                        node.op.name()
                    ));
                }
                continue;
            }
            let rank_of = |x: &ValueId| self.types[x.index()].rank();
            let trailing =
                |axis: i64, rank: usize| normalize_axis(axis, rank).is_ok_and(|a| a >= k);
            // Static operands broadcast over the rows: none of their axes meets a row axis
            // unless it is 1.
            let broadcasts = |x: &ValueId| {
                let tx = &self.types[x.index()];
                let offset = t.rank() - tx.rank().min(t.rank());
                tx.shape
                    .iter()
                    .enumerate()
                    .all(|(j, d)| j + offset >= k || d.as_const() == Some(1))
            };
            let operands_ok = |ins: &[ValueId]| {
                ins.iter()
                    .all(|x| is_row[x.index()] || (rank_of(x) <= t.rank() && broadcasts(x)))
            };
            let ok = match &node.op {
                Op::Param { .. } | Op::Full { .. } => true,
                Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } => operands_ok(ins),
                Op::Reduce {
                    axes: Some(axes), ..
                } => axes.iter().all(|&a| trailing(a, rank_of(&ins[0]))),
                Op::ArgReduce { axis, .. } => axis.is_some_and(|a| trailing(a, rank_of(&ins[0]))),
                Op::Softmax { axis } | Op::LogSoftmax { axis } => trailing(*axis, t.rank()),
                Op::LayerNorm { .. } | Op::RmsNorm { .. } => {
                    t.rank() > k && ins[1..].iter().all(|x| !is_row[x.index()])
                }
                Op::MatMul => {
                    is_row[ins[0].index()]
                        && !is_row[ins[1].index()]
                        && rank_of(&ins[1]) <= 2
                        && rank_of(&ins[0]) > k
                }
                Op::Reshape { .. } | Op::Expand { .. } => {
                    is_row[ins[0].index()] || broadcasts(&ins[0])
                }
                Op::Permute { dims } => dims
                    .iter()
                    .enumerate()
                    .all(|(j, &d)| j >= k || normalize_axis(d, t.rank()).ok() == Some(j)),
                Op::Transpose { dim0, dim1 } => {
                    trailing(*dim0, t.rank()) && trailing(*dim1, t.rank())
                }
                Op::Squeeze { axes: Some(axes) } => {
                    axes.iter().all(|&a| trailing(a, rank_of(&ins[0])))
                }
                Op::Unsqueeze { axis } => trailing(*axis, t.rank()),
                Op::Slice { axis, .. } => trailing(*axis, t.rank()),
                Op::Concat { axis } => {
                    trailing(*axis, t.rank()) && ins.iter().all(|x| is_row[x.index()])
                }
                Op::IndexSelect { axis } => {
                    let (x, idx) = (&ins[0], &ins[1]);
                    if is_row[x.index()] {
                        !is_row[idx.index()] && trailing(*axis, rank_of(x))
                    } else {
                        // An embedding: a static table looked up by row ids.
                        normalize_axis(*axis, rank_of(x)).ok() == Some(0)
                    }
                }
                Op::Gather { axis } => {
                    ins.iter().all(|x| is_row[x.index()]) && trailing(*axis, t.rank())
                }
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "{}{} ({}) mixes rows",
                    label(v),
                    place(v),
                    node.op.name()
                ));
            }
        }
        Ok(RowForm {
            symbols,
            max_rows,
            params: sk.params.iter().map(|p| is_row[p.index()]).collect(),
            outputs: sk.outputs.iter().map(|o| is_row[o.index()]).collect(),
        })
    }

    /// The leading row symbols (as expressions and as symbols) and the most rows: the
    /// product of their upper bounds. An error when no parameter leads with symbols, a
    /// symbol leads twice or has no bound, or another symbol is not leading.
    pub(crate) fn row_symbols(
        &self,
    ) -> std::result::Result<(Vec<Expr>, Vec<Symbol>, usize), String> {
        let lead = self.lead();
        if lead.is_empty() {
            return Err("no parameter leads with size symbols".into());
        }
        let symbols: Vec<Symbol> = lead.iter().filter_map(|e| e.as_symbol().cloned()).collect();
        if let Some(s) = symbols
            .iter()
            .enumerate()
            .find_map(|(i, s)| symbols[..i].contains(s).then_some(s))
        {
            return Err(format!("row symbol `{s}` leads twice"));
        }
        let mut max_rows = 1usize;
        for s in &symbols {
            let info = self
                .facts
                .symbol(s)
                .ok_or_else(|| format!("`{s}` is not declared"))?;
            if info.hi >= DEFAULT_MAX {
                return Err(format!(
                    "row symbol `{s}` has no upper bound (declare one: `dims {s} in [1, N]`); \
                     a row program is sized by it"
                ));
            }
            max_rows = max_rows
                .checked_mul(info.hi as usize)
                .ok_or("too many rows")?;
        }
        for info in &self.facts.symbols {
            if !symbols.contains(&info.name) {
                return Err(format!(
                    "size symbol `{}` is not a leading axis of the inputs",
                    info.name
                ));
            }
        }
        Ok((lead, symbols, max_rows))
    }

    /// The concrete graph of row graph `form` at `rows` rows: the last row symbol
    /// `rows`, the others 1, so each row value is `[1, .., rows, ..]`, whose memory
    /// is that of `[B, T, ..]` at any binding with `B*T = rows`. The ranges are not
    /// checked (`rows` is typically every symbol's bound at once); the typing is.
    pub fn row_instance(&self, form: &RowForm, rows: usize) -> Result<Graph> {
        let mut b = Binding::new();
        let last = form.symbols.len() - 1;
        for (i, s) in form.symbols.iter().enumerate() {
            b.set(s.clone(), if i == last { rows as i64 } else { 1 });
        }
        self.build(&b)
    }
}

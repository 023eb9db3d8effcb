//! Dynamo's "automatic dynamic" for [`jit`](super::jit): a size that changed once is
//! compiled as a symbol next time.
//!
//! With [`Jit::automatic_dynamic`](super::jit::Jit::automatic_dynamic) on, the first call
//! with a signature is compiled for its exact shapes, as without it. When a later call
//! has the same dtypes and ranks but other sizes, each axis whose size changed becomes a
//! size symbol (`s0`, `s1`, ..; axes that changed from the same value to the same value
//! share one), the closure is traced again with each symbol in turn moved past both
//! sizes, and the traces are generalized into one graph over the symbols
//! ([`SymGraph::generalize`]: every number the shapes flowed into fitted as an
//! expression of the symbols from the first two traces and checked on the others). That graph is compiled by
//! [`compile_dynamic`] (one program for every binding where it can: row graphs, and
//! transformers cut at their attentions; otherwise one program per binding in its own
//! cache), and every later call whose sizes it admits runs it. A symbol's range is `1` to
//! four times the largest size seen, rounded up to a power of two (a row program's
//! storage is sized by it); a call past it generalizes again with a wider range. A
//! program that does not generalize (an op whose attributes depend on the sizes in
//! another way, control flow on them) keeps compiling each signature, and says why once.

use super::compile::Options;
use super::dynamic::{compile_dynamic, Dynamic};
use super::error::Result;
use super::host::Tensor;
use super::jit::{lock, Hook, JitEvent};
use ferrite_ir::sym::{trace_bindings, Binding, Expr, Facts, SymGraph};
use ferrite_ir::{DType, Graph, TensorType};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Dtypes and ranks of a signature: what must stay the same for sizes to generalize.
type Structure = Vec<(DType, usize)>;

/// The state of automatic dynamic shapes of one [`Jit`](super::jit::Jit).
#[derive(Default)]
pub(super) struct Automatic {
    /// The first signature seen of each structure.
    first: Mutex<HashMap<Structure, Vec<TensorType>>>,
    /// The generalized programs, newest first.
    general: Mutex<Vec<Arc<Dynamic>>>,
    /// Structures whose traces did not generalize, and why.
    refused: Mutex<HashMap<Structure, String>>,
}

fn structure(signature: &[TensorType]) -> Structure {
    signature.iter().map(|t| (t.dtype, t.rank())).collect()
}

impl Automatic {
    /// The generalized program whose symbols' ranges admit `inputs`, if any.
    pub(super) fn program<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Option<Arc<Dynamic>> {
        lock(&self.general)
            .iter()
            .find(|d| d.binding(inputs, &Binding::new()).is_ok())
            .cloned()
    }

    /// Notes a signature that missed every cache. When an earlier signature of the same
    /// structure had other sizes, generalizes the closure's traces (`trace`) over the
    /// changed axes and compiles the result: `Some` program to run, or `None` (first of
    /// its structure, or it does not generalize: the caller compiles the signature).
    pub(super) fn on_miss(
        &self,
        name: &str,
        signature: &[TensorType],
        trace: &dyn Fn(&[TensorType]) -> Result<Graph>,
        options: &Options,
        hook: &Option<Hook>,
        emit: &dyn Fn(JitEvent),
    ) -> Option<Arc<Dynamic>> {
        let key = structure(signature);
        if lock(&self.refused).contains_key(&key) {
            return None;
        }
        let first = lock(&self.first)
            .entry(key.clone())
            .or_insert_with(|| signature.to_vec())
            .clone();
        if first == signature {
            return None;
        }
        match generalize(&first, signature, trace) {
            Ok(g) => {
                let mut d = match compile_dynamic(&g, options) {
                    Ok(d) => d,
                    Err(e) => {
                        self.refuse(key, name, format!("compile_dynamic: {e}"), emit);
                        return None;
                    }
                };
                if let Some(h) = hook.clone() {
                    d = d.on_event(move |e| h(e));
                }
                let types: Vec<String> = g.params().iter().map(|(_, t)| t.to_string()).collect();
                emit(JitEvent::Generalized {
                    name: name.to_string(),
                    types: format!("({})", types.join(", ")),
                    summary: d.summary(),
                });
                let d = Arc::new(d);
                lock(&self.general).insert(0, d.clone());
                Some(d)
            }
            Err(why) => {
                self.refuse(key, name, why, emit);
                None
            }
        }
    }

    fn refuse(&self, key: Structure, name: &str, why: String, emit: &dyn Fn(JitEvent)) {
        emit(JitEvent::NotGeneralized {
            name: name.to_string(),
            why: why.clone(),
        });
        lock(&self.refused).insert(key, why);
    }
}

/// The closure's graph over symbols for the axes where `a` and `b` differ.
fn generalize(
    a: &[TensorType],
    b: &[TensorType],
    trace: &dyn Fn(&[TensorType]) -> Result<Graph>,
) -> std::result::Result<SymGraph, String> {
    // One symbol per distinct change (from, to).
    let mut changes: Vec<(usize, usize)> = Vec::new();
    let mut params: Vec<TensorType<Expr>> = Vec::with_capacity(a.len());
    for (ta, tb) in a.iter().zip(b) {
        let mut shape = Vec::with_capacity(ta.rank());
        for (&x, &y) in ta.shape.iter().zip(&tb.shape) {
            if x == y {
                shape.push(Expr::from(x as i64));
                continue;
            }
            let i = match changes.iter().position(|&c| c == (x, y)) {
                Some(i) => i,
                None => {
                    changes.push((x, y));
                    changes.len() - 1
                }
            };
            shape.push(Expr::sym(format!("s{i}")));
        }
        params.push(TensorType {
            dtype: ta.dtype,
            shape,
        });
    }
    // Each symbol's range: 1 to four times the largest value traced, a power of two.
    let names: Vec<String> = (0..changes.len()).map(|i| format!("s{i}")).collect();
    let values: Vec<(&str, i64, i64)> = names
        .iter()
        .zip(&changes)
        .map(|(n, &(x, y))| (n.as_str(), x as i64, y as i64))
        .collect();
    let bindings = trace_bindings(&values);
    let mut facts = Facts::new();
    for (name, &(x, y)) in names.iter().zip(&changes) {
        facts.add_symbol(name, None);
        let most = x.max(y) + x.abs_diff(y);
        if let Some(info) = facts.symbols.iter_mut().find(|s| *s.name == **name) {
            info.hi = ((4 * most).next_power_of_two()).max(16) as i64;
        }
    }
    let mut traces = Vec::with_capacity(bindings.len());
    for b in bindings {
        let sig: Vec<TensorType> = params
            .iter()
            .map(|t| t.bind(&b))
            .collect::<std::result::Result<_, _>>()?;
        let g = trace(&sig).map_err(|e| format!("tracing at {b}: {e}"))?;
        traces.push((g, b));
    }
    SymGraph::generalize(&traces, &params, facts)
}

//! Symbolic dimensions kept as size symbols: one graph for every value of a model's
//! `dim_param`s.
//!
//! The importer folds shape computations (`Shape`, `Gather`, `Concat` into a `Reshape`'s
//! target) with numbers, so it needs a value for every symbolic dimension. To keep them
//! symbolic, [`import_symbolic`] imports the model at a few values of its free
//! `dim_param`s (each moved on its own, so that no two can stand in for each other) and
//! generalizes the imports ([`ferrite_ir::sym::SymGraph::generalize`]): every number the
//! dimensions flowed into is fitted as an expression of them and checked on the other
//! imports, and the graph is typed over them. A model whose import depends on its sizes
//! in another way (an op chosen by a size, a size in an attribute that cannot be an
//! expression) is refused with the reason, and can still be imported with values.

use crate::import::{import_model, Model, Options};
use crate::proto::{tensor_shape_proto, type_proto, ModelProto};
use crate::{Error, ExternalData, Result};
use ferrite_ir::sym::{trace_bindings, Binding, Expr, Facts, SymGraph, DEFAULT_MAX};
use ferrite_ir::TensorType;
use std::collections::HashSet;

/// The model's graph with its free `dim_param`s (those `options.dims` does not pin) as
/// size symbols of the same names, and the model imported at the first of the values
/// tried (for its input and output names). `bounds` gives symbols an upper bound
/// (`("sequence", 512)`; the others are unbounded): a row program is sized by it.
pub fn import_symbolic(
    model: &ModelProto,
    options: &Options,
    bounds: &[(&str, usize)],
    ext: &mut dyn ExternalData,
) -> Result<(SymGraph, Model)> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| Error::Invalid("the model has no graph".into()))?;
    let inits: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    // Each free dim_param, in order of appearance, and where it appears.
    let mut symbols: Vec<String> = Vec::new();
    let mut axes: Vec<(String, Vec<Option<String>>)> = Vec::new();
    for vi in &graph.input {
        let name = vi.name.clone().unwrap_or_default();
        if inits.contains(name.as_str()) {
            continue;
        }
        let Some(type_proto::Value::TensorType(t)) =
            vi.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            continue;
        };
        let dims = t.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or(&[]);
        let mut per_axis = Vec::with_capacity(dims.len());
        for d in dims {
            let p = match &d.value {
                Some(tensor_shape_proto::dimension::Value::DimParam(p))
                    if !options.dims.contains_key(p) =>
                {
                    Some(p.clone())
                }
                _ => None,
            };
            if let Some(p) = &p {
                if !symbols.contains(p) {
                    symbols.push(p.clone());
                }
            }
            per_axis.push(p);
        }
        axes.push((name, per_axis));
    }
    if symbols.is_empty() {
        return Err(Error::Invalid(
            "the model's inputs have no symbolic dimension to keep".into(),
        ));
    }
    // Small distinct values, two per symbol, then each symbol moved on its own.
    let values: Vec<(&str, i64, i64)> = symbols
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), 3 + 2 * i as i64, 7 + 2 * i as i64))
        .collect();
    let bindings = trace_bindings(&values);
    let import_at = |b: &Binding, ext: &mut dyn ExternalData| {
        let mut o = options.clone();
        for (s, v) in b.iter() {
            o.dims.insert(s.to_string(), v as usize);
        }
        import_model(model, &o, ext)
    };
    // The first import is also returned, for its names; of the others only the graphs.
    let m0 = import_at(&bindings[0], ext)?;
    let mut traces = Vec::with_capacity(bindings.len());
    traces.push((m0.graph.clone(), bindings[0].clone()));
    for b in &bindings[1..] {
        traces.push((import_at(b, ext)?.graph, b.clone()));
    }
    // The parameters' types over the symbols.
    let mut params: Vec<TensorType<Expr>> = Vec::with_capacity(m0.inputs.len());
    for (k, input) in m0.inputs.iter().enumerate() {
        let ty = m0.graph.ty(m0.graph.params[k]);
        let named = axes
            .iter()
            .find(|(n, _)| *n == input.onnx)
            .map(|(_, a)| a.as_slice())
            .unwrap_or(&[]);
        let shape = ty
            .shape
            .iter()
            .enumerate()
            .map(|(axis, &d)| match named.get(axis).cloned().flatten() {
                Some(p) => Expr::sym(p),
                None => Expr::from(d as i64),
            })
            .collect();
        params.push(TensorType {
            dtype: ty.dtype,
            shape,
        });
    }
    let mut facts = Facts::new();
    for s in &symbols {
        facts.add_symbol(s, None);
        let hi = bounds
            .iter()
            .find(|(n, _)| n == s)
            .map_or(DEFAULT_MAX, |&(_, b)| b as i64);
        if let Some(info) = facts.symbols.iter_mut().find(|i| *i.name == **s) {
            info.hi = hi;
        }
    }
    let g = SymGraph::generalize(&traces, &params, facts).map_err(|why| {
        Error::Unsupported(format!(
            "the model does not import as one graph over its symbolic dimensions ({}): {why}; \
             give them values instead",
            symbols.join(", ")
        ))
    })?;
    Ok((g, m0))
}

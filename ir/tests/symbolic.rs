//! Graphs with size symbols: the `.fg` syntax, symbolic typing, binding and
//! instantiation, run on the interpreter.

use ferrite_ir::sym::{Binding, SymGraph};
use ferrite_ir::text::{parse_any, print_symbolic, NoWeights, Parsed};
use ferrite_ir::{interpret, parse, print, Tensor};

fn sym(file: &str, src: &str) -> SymGraph {
    match parse_any(file, src, &mut NoWeights).unwrap_or_else(|e| panic!("{e}")) {
        Parsed::Symbolic(g) => g,
        Parsed::Graph(_) => panic!("{file} parsed as a concrete graph"),
    }
}

fn sym_error(src: &str) -> String {
    match parse_any("x.fg", src, &mut NoWeights) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("parsed: {src}"),
    }
}

fn binding(pairs: &[(&str, i64)]) -> Binding {
    let mut b = Binding::new();
    for (s, v) in pairs {
        b.set(*s, *v);
    }
    b
}

const BLOCK: &str = include_str!("../../examples/dynamic/transformer_block.fg");
const STATIC: &str = include_str!("../../examples/transformer_block.fg");

#[test]
fn the_dynamic_block_prints_back_and_is_typed_symbolically() {
    let g = sym("block.fg", BLOCK);
    let text = print_symbolic(&g);
    let again = sym("again.fg", &text);
    assert_eq!(print_symbolic(&again), text, "printing is a fixed point");
    assert!(
        text.starts_with("dims B in [1, 32], T in [1, 512]\n"),
        "{text}"
    );
    assert!(text.contains("shape=[B, T, 4, 64]"), "{text}");
    assert!(text.contains("arange(end=T)"), "{text}");
    let outs: Vec<String> = g.output_types().iter().map(|t| t.to_string()).collect();
    assert_eq!(outs, ["f32[B, T, 256]"]);
    // Every value has a symbolic type: the attention scores are [B, 4, T, T].
    let types: Vec<String> = g.types().iter().map(|t| t.to_string()).collect();
    assert!(types.iter().any(|t| t == "f32[B, 4, T, T]"), "{types:?}");
    // The block relies on nothing beyond its ranges.
    assert!(
        g.facts().constraints.is_empty(),
        "{:?}",
        g.facts().constraints
    );
}

#[test]
fn an_instance_is_the_graph_with_the_numbers_written() {
    let g = sym("block.fg", BLOCK);
    // At B=1, T=64 the block is the static example with a batch axis of 1.
    let inst = g.instantiate(&binding(&[("B", 1), ("T", 64)])).unwrap();
    let fixed = parse("static.fg", STATIC).unwrap();
    let inputs: Vec<Tensor> = fixed
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| Tensor::random(fixed.ty(p), 40 + i as u64))
        .collect();
    let mut batched = inputs.clone();
    batched[0] = Tensor {
        ty: inst.ty(inst.params[0]).clone(),
        data: inputs[0].data.clone(),
    };
    let want = interpret(&fixed, &inputs).unwrap();
    let got = interpret(&inst, &batched).unwrap();
    assert_eq!(got[0].data, want[0].data);
    // The instance prints as a concrete graph with the numbers in place of the symbols.
    let text = print(&inst);
    assert!(text.contains("x: f32[1, 64, 256]"), "{text}");
    assert!(text.contains("shape=[1, 64, 4, 64]"), "{text}");
}

#[test]
fn the_interpreter_runs_random_bindings() {
    let g = sym("block.fg", BLOCK);
    let mut seed = 1u64;
    for (b, t) in [(1, 1), (2, 3), (3, 17), (1, 40)] {
        let shapes: Vec<Vec<usize>> = g
            .params()
            .iter()
            .map(|(_, ty)| {
                ty.shape
                    .iter()
                    .map(|d| {
                        let v = d.eval_with(&|s| match s {
                            "B" => Some(b),
                            "T" => Some(t),
                            _ => None,
                        });
                        v.unwrap() as usize
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let bound = g.bind(&refs, &Binding::new()).unwrap();
        assert_eq!(bound, binding(&[("B", b), ("T", t)]));
        let inst = g.instantiate(&bound).unwrap();
        let inputs: Vec<Tensor> = inst
            .params
            .iter()
            .map(|&p| {
                seed += 1;
                Tensor::random(inst.ty(p), seed)
            })
            .collect();
        let out = interpret(&inst, &inputs).unwrap();
        assert_eq!(out[0].ty.shape, vec![b as usize, t as usize, 256]);
    }
}

#[test]
fn bindings_are_checked_with_the_symbols_and_values() {
    let g = sym("block.fg", BLOCK);
    let e = g
        .instantiate(&binding(&[("B", 2), ("T", 600)]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "T = 600 but T must be in 1..=512 (block.fg:3:20)"
    );
    let e = g.instantiate(&binding(&[("B", 2)])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "size symbol `T` is not bound (block.fg:3:20)"
    );
    let mut shapes: Vec<Vec<usize>> = vec![vec![2, 5, 256]];
    shapes.extend(
        g.params()[1..]
            .iter()
            .map(|(_, t)| t.concrete().unwrap().shape),
    );
    shapes[0][2] = 255;
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let e = g.bind(&refs, &Binding::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input `x` has shape [2, 5, 255] but is declared f32[B, T, 256]: axis 2 is 255, not 256 = 256"
    );
}

#[test]
fn constraints_name_the_symbol_the_values_and_the_place() {
    let src = "graph g(x: f32[T, 6]) {\n  y = reshape(x, shape=[-1, 4])\n  return y\n}\n";
    let g = sym("x.fg", src);
    assert_eq!(g.output_types()[0].to_string(), "f32[floordiv(6*T, 4), 4]");
    let e = g.instantiate(&binding(&[("T", 7)])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "T = 7 but reshape needs 6*T divisible by 4 (x.fg:2:7)"
    );
    let inst = g.instantiate(&binding(&[("T", 8)])).unwrap();
    assert_eq!(inst.ty(inst.outputs[0]).shape, vec![12, 4]);
    // Two symbols a matmul needs equal.
    let src = "graph g(a: f32[M, K], b: f32[N, 3]) {\n  return matmul(a, b)\n}\n";
    let g = sym("x.fg", src);
    let e = g
        .instantiate(&binding(&[("M", 2), ("K", 4), ("N", 5)]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "K = 4, N = 5 but matmul needs K equal to N (x.fg:2:10)"
    );
}

#[test]
fn symbols_in_attributes_and_the_dims_line() {
    let src = "dims N in [2, 64]\ngraph g() -> i64[N], f32[N, N] {\n  a = arange(end=N)\n  m = full(shape=[N, N], value=1.0)\n  return a, m\n}\n";
    let g = sym("x.fg", src);
    assert_eq!(print_symbolic(&g), src);
    let inst = g.instantiate(&binding(&[("N", 3)])).unwrap();
    let out = interpret(&inst, &[]).unwrap();
    assert_eq!(out[0].ty.shape, vec![3]);
    assert_eq!(out[1].ty.shape, vec![3, 3]);
    // Expressions, and slices with symbolic bounds.
    let src = "graph g(x: f32[B, T]) -> f32[B*T + B] {\n  y = reshape(concat(x, slice(x, axis=1, start=T - 1), axis=1), shape=[B*(T + 1)])\n  return y\n}\n";
    let g = sym("x.fg", src);
    let text = print_symbolic(&g);
    assert!(text.contains("start=T - 1"), "{text}");
    assert_eq!(print_symbolic(&sym("again.fg", &text)), text);
    let inst = g.instantiate(&binding(&[("B", 2), ("T", 5)])).unwrap();
    assert_eq!(inst.ty(inst.outputs[0]).shape, vec![12]);
}

#[test]
fn symbolic_mistakes_are_located_errors() {
    // A symbol in an attribute that no parameter binds and no `dims` line declares.
    let e = sym_error("graph g(x: f32[4]) {\n  return reshape(x, shape=[T])\n}\n");
    assert!(e.starts_with("x.fg:2:28: error: unknown size symbol `T`: a size symbol is bound by a parameter's type"), "{e}");
    assert!(
        sym_error("graph g(x: f32[S]) {\n  return reshape(x, shape=[T])\n}\n")
            .starts_with("x.fg:2:28: error: unknown size symbol `T`")
    );
    // An attribute that cannot hold a size.
    assert!(
        sym_error("graph g(x: f32[T, 4]) {\n  return softmax(x, axis=T)\n}\n")
            .starts_with("x.fg:2:21: error: softmax: attribute `axis` cannot be a size expression")
    );
    // A declared result type that the graph does not have.
    assert!(
        sym_error("graph g(x: f32[T, 4]) -> f32[T, 5] {\n  return relu(x)\n}\n").starts_with(
            "x.fg:2:10: error: output 0 is f32[T, 4] but the graph declares f32[T, 5]"
        )
    );
    // Ops without a symbolic rule yet name themselves.
    let e = sym_error("graph g(x: f32[1, 1, T, T]) {\n  return max_pool(x, kernel=[2, 2])\n}\n");
    assert!(
        e.starts_with("x.fg:2:10: error: max_pool does not take symbolic dimensions yet"),
        "{e}"
    );
    // A range that is empty, a symbol declared twice, a dtype as a symbol.
    assert!(
        sym_error("dims T in [4, 2]\ngraph g(x: f32[T]) {\n  return x\n}\n")
            .contains("the range of `T` is empty (4 > 2)")
    );
    assert!(
        sym_error("dims T, T\ngraph g(x: f32[T]) {\n  return x\n}\n")
            .contains("size symbol `T` is declared twice")
    );
    assert!(sym_error("graph g(x: f32[f32]) {\n  return x\n}\n")
        .contains("`f32` cannot name a size symbol"));
}

#[test]
fn the_concrete_reader_refuses_symbols_with_a_hint() {
    let e = parse("x.fg", "graph g(x: f32[T]) {\n  return relu(x)\n}\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("x.fg:1:16: error: the graph has symbolic dimensions (`T`)"),
        "{e}"
    );
}

/// Which graphs are row graphs (`SymGraph::rows`), and why the others are not.
#[test]
fn row_graphs_are_told_apart_with_reasons() {
    let row = |body: &str, params: &str| {
        let src = format!("dims B in [1, 4], T in [1, 8]\ngraph g({params}) {{\n{body}\n}}\n");
        sym("rows.fg", &src).rows()
    };
    let x = "x: f32[B, T, 6], w: f32[6, 6], v: f32[6]";
    for body in [
        "  return add(matmul(relu(x), w), v)",
        "  return softmax(x, axis=-1)",
        "  return sum(x, axes=[2], keepdim=true)",
        "  return reshape(permute(reshape(x, shape=[B, T, 2, 3]), dims=[0, 1, 3, 2]), shape=[B, T, 6])",
        "  return slice(x, axis=2, start=1, end=4)",
        "  return concat(x, x, axis=-1)",
        "  return unsqueeze(x, axis=2)",
        "  return layer_norm(x, v, v)",
        "  return add(x, full(shape=[B, T, 6], value=1.0))",
    ] {
        let form = row(body, x).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(form.name(), "B*T");
        assert_eq!(form.max_rows, 32);
        assert_eq!(form.params, [true, false, false]);
    }
    for (body, why) in [
        (
            "  return sum(x, axes=[1])",
            "has type f32[B, 6]: symbols past the leading [B, T]",
        ),
        ("  return sum(x)", "reduces across rows"),
        ("  return softmax(x, axis=1)", "(softmax) mixes rows"),
        (
            "  return permute(x, dims=[1, 0, 2])",
            "has type f32[T, B, 6]",
        ),
        (
            "  return slice(x, axis=1, start=0, end=1)",
            "has type f32[B, 1, 6]",
        ),
        (
            "  return add(x, reshape(arange(end=T, dtype=f32), shape=[1, T, 1]))",
            "has type f32[T]",
        ),
    ] {
        let err = row(body, x).unwrap_err();
        assert!(err.contains(why), "{body}: {err}");
        assert!(err.contains("rows.fg:"), "{body}: {err}");
    }
    // A symbol leading twice is not a count of rows.
    let g = sym(
        "t.fg",
        "dims T in [1, 8]\ngraph g(x: f32[T, T, 4]) {\n  return relu(x)\n}\n",
    );
    assert!(g.rows().unwrap_err().contains("`T` leads twice"));
    // Unbounded row symbols size no program.
    let g = sym("u.fg", "graph g(x: f32[N, 4]) {\n  return relu(x)\n}\n");
    assert!(g.rows().unwrap_err().contains("no upper bound"));
}

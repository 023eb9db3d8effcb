//! The `.fg` text format, tested as data:
//! - `tests/parse/NAME.fg` prints as `tests/parse/NAME.expected` (re-bless with
//!   `FERRITE_BLESS=1`), and printing is a fixed point;
//! - `tests/errors/NAME.fg` is one user mistake, with the expected message and
//!   location in its first two lines (`# error: ...`, `# at: LINE:COL`);
//! - every `examples/*.fg` round-trips, and so do random graphs built through the
//!   API (checked against the reference interpreter).

use ferrite_ir::op::{BinaryOp, Op, ReduceOp, Scalar, UnaryOp};
use ferrite_ir::{interpret, parse, parse_bytes, print, verify, DType, Graph, Tensor, TensorType};
use ferrite_testkit::{check_golden, diff};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `.fg` files of a directory, sorted; none if it does not exist.
fn fg_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fg"))
        .collect();
    files.sort();
    files
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Structural equality that treats NaN literals as equal (the `Debug` form of a
/// graph shows every op, operand, type and name).
fn same_graph(a: &Graph, b: &Graph) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Parses `text`, prints it, parses the print and prints again: the graph must
/// survive and the print must be a fixed point. Returns the first print.
fn round_trip(file: &str, text: &str) -> Result<String, String> {
    let g = parse(file, text).map_err(|d| d.to_string())?;
    verify(&g).map_err(|e| format!("{file}: parsed graph fails verify: {e}"))?;
    let printed = print(&g);
    let again = parse(file, &printed)
        .map_err(|d| format!("{file}: the printed text does not parse:\n{d}\n{printed}"))?;
    if !same_graph(&g, &again) {
        return Err(format!(
            "{file}: parse(print(g)) differs from g\n{g:#?}\n{again:#?}"
        ));
    }
    let reprinted = print(&again);
    if reprinted != printed {
        return Err(format!(
            "{file}: printing is not a fixed point:\n{}",
            diff(&printed, &reprinted)
        ));
    }
    Ok(printed)
}

#[test]
fn golden_prints() {
    let dir = repo().join("tests/parse");
    let files = fg_files(&dir);
    assert!(files.len() >= 25, "expected the golden files in {dir:?}");
    let mut failures = Vec::new();
    for path in &files {
        let name = format!("tests/parse/{}.fg", stem(path));
        let text = std::fs::read_to_string(path).unwrap();
        let printed = match round_trip(&name, &text) {
            Ok(p) => p,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        if let Err(e) = check_golden(&path.with_extension("expected"), &printed) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// The expected substring and location of an error file's first two lines.
fn error_expectation(text: &str) -> Option<(String, usize, usize)> {
    let mut lines = text.lines();
    let message = lines.next()?.strip_prefix("# error: ")?.to_string();
    let (line, col) = lines.next()?.strip_prefix("# at: ")?.split_once(':')?;
    Some((message, line.trim().parse().ok()?, col.trim().parse().ok()?))
}

#[test]
fn user_mistakes_are_located_errors() {
    let dir = repo().join("tests/errors");
    let files = fg_files(&dir);
    assert!(files.len() >= 40, "expected the error files in {dir:?}");
    let mut failures = Vec::new();
    for path in &files {
        let name = format!("{}.fg", stem(path));
        let text = std::fs::read_to_string(path).unwrap();
        let Some((want, line, col)) = error_expectation(&text) else {
            failures.push(format!(
                "{name}: must start with `# error: TEXT` and `# at: LINE:COL`"
            ));
            continue;
        };
        let d = match parse(&name, &text) {
            Ok(_) => {
                failures.push(format!("{name}: parsed without error"));
                continue;
            }
            Err(d) => d,
        };
        let rendered = d.to_string();
        if !rendered.contains(&want) || (d.line, d.col) != (line, col) {
            failures.push(format!(
                "{name}: want `{want}` at {line}:{col}, got at {}:{}:\n{rendered}",
                d.line, d.col
            ));
            continue;
        }
        // The rendering: location, the line itself, a caret under the column.
        let expected_line = text.lines().nth(line - 1).unwrap_or("");
        let mut parts = rendered.split('\n');
        let head = parts.next().unwrap_or("");
        assert!(
            head.starts_with(&format!("{name}:{line}:{col}: error: ")),
            "{head}"
        );
        assert_eq!(parts.next(), Some(format!("  {expected_line}").as_str()));
        let caret = parts.next().unwrap_or("");
        assert_eq!(caret.chars().count(), col + 2, "{rendered}");
        assert!(caret.ends_with('^'), "{rendered}");
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn the_design_example_error_reads_as_documented() {
    let src = "graph mlp(x: f32[64, 784], w1: f32[512, 10]) {\n\
               \x20 # the weight is the wrong one\n\
               \x20 h = matmul(x, w1)\n\
               \x20 return h\n}\n";
    let d = parse("mlp.fg", src).unwrap_err();
    assert_eq!(
        d.to_string(),
        "mlp.fg:3:7: error: matmul: inner dimensions differ: [64, 784] @ [512, 10] (784 vs 512)\n\
         \x20   h = matmul(x, w1)\n\
         \x20       ^"
    );
}

#[test]
fn invalid_utf8_is_located_at_the_first_bad_byte() {
    let bytes = b"graph g(x: f32[2]) {\n  y = n\xc3\xa9g(x) \xff\xfe\n  return y\n}\n";
    let d = parse_bytes("bad.fg", bytes).unwrap_err();
    assert_eq!((d.line, d.col), (2, 14), "{d}");
    assert!(d.message.contains("invalid UTF-8: byte 0xFF"), "{d}");
    assert!(d.line_text.starts_with("  y = n\u{e9}g(x) "), "{d}");
    // A bad byte first on its line is on that line, not at the end of the last one.
    let d = parse_bytes("bad.fg", b"graph g() {\n\x80\n}").unwrap_err();
    assert_eq!((d.line, d.col), (2, 1), "{d}");
    // Valid bytes go through to the parser.
    let g = parse_bytes("ok.fg", "graph g(x: f32[2]) {\n  return x\n}\n".as_bytes()).unwrap();
    assert_eq!(g.params.len(), 1);
}

#[test]
fn hostile_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 100_000;
    let src = format!(
        "graph g(x: f32[2]) {{\n  y = {}x{}\n  return y\n}}\n",
        "neg(".repeat(depth),
        ")".repeat(depth)
    );
    let d = parse("deep.fg", &src).unwrap_err();
    assert!(
        d.message.contains("nesting deeper than 256 levels"),
        "{}",
        d.message
    );
    // The 257th call is where it goes too deep.
    assert_eq!((d.line, d.col), (2, 7 + 4 * 256));

    // Brackets do not nest in the format at all.
    let src = format!(
        "graph g(x: f32[2]) {{\n  y = sum(x, axes={})\n  return y\n}}\n",
        "[".repeat(depth)
    );
    let d = parse("brackets.fg", &src).unwrap_err();
    assert!(
        d.message.contains("expected an integer or `]`"),
        "{}",
        d.message
    );

    // Exactly 256 levels is fine and prints back unchanged.
    let src = format!(
        "graph g(x: f32[2]) {{\n  y = {}x{}\n  return y\n}}\n",
        "neg(".repeat(256),
        ")".repeat(256)
    );
    assert_eq!(round_trip("ok.fg", &src).unwrap(), src);
}

#[test]
fn deep_anonymous_chains_from_the_api_print_as_temporaries() {
    let mut g = Graph::new("chain");
    let x = g
        .add_param("x", TensorType::new(DType::F32, vec![2]).unwrap())
        .unwrap();
    let mut v = x;
    for _ in 0..100_000 {
        v = g.add(Op::Unary(UnaryOp::Neg), &[v], None).unwrap();
    }
    g.outputs = vec![v];
    let printed = print(&g);
    let again = parse("chain.fg", &printed).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(print(&again), printed);
    // Every statement nests at most 256 calls; the chain is all there.
    assert_eq!(again.op_count(), 100_000);
    for line in printed.lines() {
        assert!(line.matches('(').count() <= 256, "{line}");
    }
    assert!(printed.lines().count() < 100_000 / 200);
}

#[test]
fn windows_line_endings_and_a_byte_order_mark_are_accepted() {
    let unix = "graph g(x: f32[2]) {\n  y = neg(x)  # comment\n  return y\n}\n";
    let windows = format!("\u{feff}{}", unix.replace('\n', "\r\n"));
    let a = parse("unix.fg", unix).unwrap();
    let b = parse("windows.fg", &windows).unwrap();
    assert!(same_graph(&a, &b));
    let d = parse("w.fg", &windows.replace("neg(x)", "neg(q)")).unwrap_err();
    assert_eq!(d.line_text, "  y = neg(q)  # comment");
}

#[test]
fn examples_round_trip() {
    for path in fg_files(&repo().join("examples")) {
        let name = format!("examples/{}.fg", stem(&path));
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = round_trip(&name, &text) {
            panic!("{e}");
        }
    }
}

/// One step of a random graph: an op choice, operand picks, whether to name the
/// result, and which operand (if any) is a literal of which kind.
type Step = (u8, u16, u16, u16, bool, u8);

/// Builds a graph from random steps through the API, skipping steps that do not
/// type. Literals get arbitrary dtypes (not only the ones text would give them),
/// anonymous nodes get several uses, and some results are never used.
fn build(steps: &[Step], outputs: &[u16]) -> Graph {
    let mut g = Graph::new("random");
    let t = |d, s: &[usize]| TensorType::new(d, s.to_vec()).unwrap();
    let mut values = vec![
        g.add_param("x", t(DType::F32, &[2, 3])).unwrap(),
        g.add_param("y", t(DType::F32, &[3])).unwrap(),
        g.add_param("h", t(DType::F16, &[2, 1])).unwrap(),
        g.add_param("i", t(DType::I32, &[2, 3])).unwrap(),
        g.add_param("c", t(DType::Bool, &[3])).unwrap(),
    ];
    let literals = [
        (Scalar::Float(0.5), DType::F32),
        (Scalar::Float(-2.0), DType::F16),
        (Scalar::Int(3), DType::I64),
        (Scalar::Int(-1), DType::I32),
        (Scalar::Int(2), DType::F32),
        (Scalar::Bool(true), DType::Bool),
        (Scalar::Bool(false), DType::F32),
    ];
    for (k, &(op, a, b, c, named, lit)) in steps.iter().enumerate() {
        let op = match op % 12 {
            0 => Op::Unary(UnaryOp::Neg),
            1 => Op::Unary(UnaryOp::Exp),
            2 => Op::Unary(UnaryOp::Abs),
            3 => Op::Binary(BinaryOp::Add),
            4 => Op::Binary(BinaryOp::Mul),
            5 => Op::Binary(BinaryOp::Maximum),
            6 => Op::Binary(BinaryOp::Lt),
            7 => Op::Where,
            8 => Op::Cast { to: DType::F32 },
            9 => Op::Reduce {
                op: ReduceOp::Sum,
                axes: Some(vec![-1]),
                keepdim: true,
            },
            10 => Op::Binary(BinaryOp::Sub),
            _ => Op::Unary(UnaryOp::Relu),
        };
        let arity = op.arity().unwrap_or(1);
        let mut inputs: Vec<_> = [a, b, c]
            .iter()
            .take(arity)
            .map(|&p| values[p as usize % values.len()])
            .collect();
        if lit < 7 * 3 {
            let slot = lit as usize / 7;
            if slot < arity {
                let (value, dtype) = literals[lit as usize % 7];
                inputs[slot] = g.add_literal(value, dtype).unwrap();
            }
        }
        let name = named.then(|| format!("v{k}"));
        if let Ok(v) = g.add(op, &inputs, name) {
            values.push(v);
        }
    }
    g.outputs = outputs
        .iter()
        .map(|&p| values[values.len() - 1 - p as usize % values.len()])
        .collect();
    g
}

/// Element values, with NaN equal to NaN.
fn same_values(a: &Tensor, b: &Tensor) -> bool {
    a.ty == b.ty
        && a.to_f64()
            .iter()
            .zip(b.to_f64())
            .all(|(x, y)| x == &y || (x.is_nan() && y.is_nan()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Printing an API-built graph gives text that parses to a graph computing the
    /// same outputs, and whose print is the same text.
    #[test]
    fn api_graphs_print_to_equivalent_text(
        steps in proptest::collection::vec(
            (any::<u8>(), any::<u16>(), any::<u16>(), any::<u16>(), any::<bool>(), 0u8..40),
            1..24,
        ),
        outputs in proptest::collection::vec(any::<u16>(), 1..4),
    ) {
        let g = build(&steps, &outputs);
        prop_assert!(verify(&g).is_ok());
        let printed = print(&g);
        let again = match parse("random.fg", &printed) {
            Ok(again) => again,
            Err(d) => return Err(TestCaseError::fail(format!("{d}\n{printed}"))),
        };
        prop_assert_eq!(print(&again), printed.clone());
        let inputs: Vec<Tensor> = g
            .param_types()
            .iter()
            .enumerate()
            .map(|(i, ty)| Tensor::random(ty, i as u64))
            .collect();
        let want = interpret(&g, &inputs).unwrap();
        let got = interpret(&again, &inputs).unwrap();
        prop_assert_eq!(want.len(), got.len());
        for (w, o) in want.iter().zip(&got) {
            prop_assert!(same_values(w, o), "{printed}\n{w:?}\n{o:?}");
        }
    }
}

/// The golden inputs, read once.
fn golden_sources() -> Vec<Vec<u8>> {
    fg_files(&repo().join("tests/parse"))
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Randomly damaged files never panic the parser; the error is located inside
    /// the file; and whatever still parses round-trips.
    #[test]
    fn damaged_files_give_errors_not_panics(
        file in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let sources = golden_sources();
        let mut bytes = file.get(&sources).clone();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => {}
            }
        }
        match parse_bytes("damaged.fg", &bytes) {
            Ok(g) => {
                let printed = print(&g);
                let again = parse("damaged.fg", &printed);
                prop_assert!(again.is_ok(), "{printed}");
                prop_assert_eq!(print(&again.unwrap()), printed);
            }
            Err(d) => {
                let lines = bytes.split(|&b| b == b'\n').count();
                prop_assert!(d.line >= 1 && d.line <= lines, "{d}");
                prop_assert!(d.caret >= 1 && d.caret <= d.line_text.chars().count() + 1, "{d}");
                prop_assert!(d.col >= d.caret.saturating_sub(1), "{d}");
            }
        }
    }
}

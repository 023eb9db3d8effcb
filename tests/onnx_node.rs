//! The ONNX backend node tests as a conformance suite.
//!
//! `scripts/fetch-onnx-node-tests.sh` unpacks the node tests of the onnx 1.22.0 wheel
//! (`onnx/backend/test/data/node/*/{model.onnx, test_data_set_*/*.pb}`) into a cache
//! outside the checkout; this runner imports every model, runs it on the reference
//! interpreter, the CPU backend and the simulator (fused), and compares each output
//! with ONNX's tolerance: a float matches when `|got - want| <= 1e-4 * max(1,
//! max|want|) + 1e-3 * |want|`, NaN where NaN, equal infinities; integers and bools
//! exactly. It prints `N passed, M failed` per op family and target.
//!
//! `tests/onnx/node-expected-failures.txt` lists every test and target that fails,
//! with the reason; a test that fails unlisted (a regression) or passes while listed
//! fails this test. `FERRITE_BLESS=1` rewrites the list from the run.
//!
//! Where the data is: `FERRITE_ONNX_NODE_TESTS`, else
//! `${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/onnx-1.22.0/onnx/backend/test/data/node`.
//! Without it the test fails under CI (`CI` set) and says how to fetch it elsewhere.

use ferrite::{Options, Target, Tensor};
use ferrite_onnx::proto::ModelProto;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const TARGETS: [Target; 3] = [Target::Interp, Target::Cpu, Target::Sim];
const EXPECTED: &str = "tests/onnx/node-expected-failures.txt";

fn data_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("FERRITE_ONNX_NODE_TESTS") {
        Some(d) => PathBuf::from(d),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            cache.join("ferrite/onnx-1.22.0/onnx/backend/test/data/node")
        }
    };
    dir.is_dir().then_some(dir)
}

/// The op family a test belongs to, from the ops of its model.
fn family(op: &str) -> &'static str {
    match op {
        "Abs" | "Neg" | "Exp" | "Log" | "Sqrt" | "Reciprocal" | "Sin" | "Cos" | "Tan" | "Tanh"
        | "Sinh" | "Cosh" | "Asin" | "Acos" | "Atan" | "Asinh" | "Acosh" | "Atanh" | "Erf"
        | "Floor" | "Ceil" | "Round" | "Sign" | "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod"
        | "Sum" | "Mean" | "Max" | "Min" | "Clip" | "IsNaN" | "IsInf" | "BitShift"
        | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => "elementwise",
        "Relu" | "Sigmoid" | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "HardSigmoid"
        | "HardSwish" | "Softplus" | "Softsign" | "Mish" | "PRelu" | "ThresholdedRelu" | "Gelu"
        | "Shrink" | "Swish" => "activation",
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor"
        | "Not" | "Where" => "comparison/logic",
        o if o.starts_with("Reduce") || o == "ArgMax" || o == "ArgMin" => "reduction",
        "Softmax"
        | "LogSoftmax"
        | "Hardmax"
        | "LayerNormalization"
        | "RMSNormalization"
        | "BatchNormalization"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "MeanVarianceNormalization"
        | "LpNormalization"
        | "LRN" => "normalization",
        "MatMul" | "Gemm" | "Einsum" | "MatMulInteger" | "QLinearMatMul" | "Det" => "contraction",
        "Reshape" | "Transpose" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" | "Concat"
        | "Slice" | "Pad" | "Split" | "Tile" | "Identity" | "Dropout" | "DepthToSpace"
        | "SpaceToDepth" | "ReverseSequence" | "CenterCropPad" => "movement",
        "Gather" | "GatherElements" | "GatherND" | "Scatter" | "ScatterElements" | "ScatterND"
        | "OneHot" | "Compress" | "NonZero" | "TopK" | "Unique" | "TensorScatter" => "indexing",
        "Constant" | "ConstantOfShape" | "Shape" | "Size" | "Range" | "EyeLike" | "Trilu"
        | "CumSum" | "CumProd" => "shape/creation",
        "Cast" | "CastLike" | "BitCast" => "cast",
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => "loss",
        "Attention" | "RotaryEmbedding" => "attention",
        "RNN" | "GRU" | "LSTM" => "recurrent",
        o if o.contains("Conv")
            || o.contains("Pool")
            || o == "MaxUnpool"
            || o == "Col2Im"
            || o == "DeformConv"
            || o == "Resize"
            || o == "Upsample"
            || o == "GridSample"
            || o == "RoiAlign"
            || o == "AffineGrid" =>
        {
            "conv/pool/resize"
        }
        o if o.contains("Sequence")
            || o.starts_with("Optional")
            || o == "If"
            || o == "Loop"
            || o == "Scan" =>
        {
            "control/sequence"
        }
        o if o.contains("Quantize") || o.contains("Integer") => "quantization",
        _ => "other",
    }
}

/// The op a test is named after: the model's op whose name, lowercased, the test
/// name starts with (longest first), else its first op.
fn test_op(name: &str, model: &ModelProto) -> String {
    let stem = name.trim_start_matches("test_").replace('_', "");
    let ops: Vec<&str> = model
        .graph
        .as_ref()
        .map_or(vec![], |g| g.node.iter().map(|n| n.op_type()).collect());
    let mut best: Option<&str> = None;
    for op in &ops {
        if stem.starts_with(&op.to_lowercase()) && best.is_none_or(|b| b.len() < op.len()) {
            best = Some(op);
        }
    }
    best.or(ops.first().copied()).unwrap_or("?").to_string()
}

type Outcome = Result<(), String>;

fn short(s: impl std::fmt::Display) -> String {
    let s = s.to_string();
    let line = s.lines().next().unwrap_or("").replace('\t', " ");
    if line.chars().count() > 160 {
        line.chars().take(157).collect::<String>() + "..."
    } else {
        line
    }
}

/// The tolerance of the suite.
fn compare(got: &Tensor, want: &Tensor) -> Outcome {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {} where {} is expected", got.ty(), want.ty()));
    }
    // Integers and bools exactly: as stored (f64 would round 64-bit values).
    if !want.dtype().is_float() && got == want {
        return Ok(());
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    if !want.dtype().is_float() {
        let i = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("element {i}: got {}, want {}", g[i], w[i]));
    }
    let big = w
        .iter()
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= 1e-4 * big + 1e-3 * b.abs()
        };
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

/// Runs one node test on every target.
fn run_test(dir: &Path) -> (String, [Outcome; 3]) {
    let fail = |m: String| (String::from("?"), [Err(m.clone()), Err(m.clone()), Err(m)]);
    let bytes = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => return fail(format!("cannot read model.onnx: {e}")),
    };
    let proto = match ferrite_onnx::decode_model(&bytes) {
        Ok(p) => p,
        Err(e) => return fail(short(e)),
    };
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let op = test_op(&name, &proto);
    let (op2, outcomes) = match run_datasets(dir, &bytes, &proto) {
        Ok(o) => (op, o),
        Err(m) => (op, [Err(m.clone()), Err(m.clone()), Err(m)]),
    };
    (op2, outcomes)
}

fn run_datasets(dir: &Path, bytes: &[u8], proto: &ModelProto) -> Result<[Outcome; 3], String> {
    let graph = proto.graph.as_ref().ok_or("the model has no graph")?;
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let input_names: Vec<String> = graph
        .input
        .iter()
        .map(|v| v.name().to_string())
        .filter(|n| !inits.contains(n.as_str()))
        .collect();
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    if sets.is_empty() {
        return Err("no test data sets".into());
    }
    let mut outcomes: [Outcome; 3] = [Ok(()), Ok(()), Ok(())];
    for set in &sets {
        let read = |kind: &str, i: usize| -> Result<Tensor, String> {
            ferrite::onnx::read_tensor(set.join(format!("{kind}_{i}.pb"))).map_err(|e| match e {
                // The data set's file, not the machine's path to it.
                ferrite::Error::Onnx { error, .. } => short(format!("{kind}_{i}.pb: {error}")),
                e => short(e),
            })
        };
        let inputs: Vec<Tensor> = (0..input_names.len())
            .map(|i| read("input", i))
            .collect::<Result<_, _>>()?;
        let want: Vec<Tensor> = (0..graph.output.len())
            .map(|i| read("output", i))
            .collect::<Result<_, _>>()?;
        // Inputs an op needs at import time (a shape, axes) are given as values.
        let mut options = ferrite_onnx::Options::default();
        let model = loop {
            match ferrite::onnx::from_bytes(bytes, &options) {
                Ok(m) => break m,
                Err(ferrite::Error::Onnx { error, .. })
                    if matches!(&*error, ferrite_onnx::Error::NeedsValue { input, .. }
                        if !options.values.contains_key(input)) =>
                {
                    let ferrite_onnx::Error::NeedsValue { input, .. } = *error else {
                        return Err("unreachable".into());
                    };
                    let i = input_names
                        .iter()
                        .position(|n| *n == input)
                        .ok_or("unknown input")?;
                    options.values.insert(input, inputs[i].clone().into_ir());
                }
                Err(e) => return Err(short(e)),
            }
        };
        let args: Vec<&Tensor> = model
            .inputs
            .iter()
            .map(|b| &inputs[input_names.iter().position(|n| *n == b.onnx).unwrap()])
            .collect();
        for (k, target) in TARGETS.iter().enumerate() {
            if outcomes[k].is_err() {
                continue;
            }
            let opts = Options::default().target(*target).threads(1);
            let got = ferrite::compile_ir(&model.graph, &opts).and_then(|exe| exe.run(&args));
            outcomes[k] = match got {
                Err(e) => Err(short(e)),
                Ok(got) => got
                    .iter()
                    .zip(&want)
                    .enumerate()
                    .try_for_each(|(i, (g, w))| {
                        compare(g, w)
                            .map_err(|m| format!("output {i} (`{}`): {m}", model.outputs[i].onnx))
                    }),
            };
        }
    }
    Ok(outcomes)
}

#[test]
fn onnx_node_tests() {
    let Some(dir) = data_dir() else {
        let msg = "the ONNX node tests are not fetched: run scripts/fetch-onnx-node-tests.sh";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return;
    };
    let mut tests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    tests.sort();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(BTreeMap::new());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(t) = tests.get(i) else { break };
                let name = t.file_name().unwrap().to_string_lossy().to_string();
                let r = std::panic::catch_unwind(|| run_test(t)).unwrap_or_else(|p| {
                    let m = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    let m = format!("panic: {}", short(m));
                    ("?".into(), [Err(m.clone()), Err(m.clone()), Err(m)])
                });
                results.lock().unwrap().insert(name, r);
            });
        }
    });
    let results = results.into_inner().unwrap();

    // Counts by family and target.
    let mut by_family: BTreeMap<&str, [(usize, usize); 3]> = BTreeMap::new();
    let mut totals = [(0usize, 0usize); 3];
    for (name, (op, outcomes)) in &results {
        // An `_expanded` test is its op's function body: it counts with that op.
        let op = name
            .strip_suffix("_expanded")
            .and_then(|base| results.get(base))
            .map_or(op, |(base_op, _)| base_op);
        let row = by_family.entry(family(op)).or_default();
        for k in 0..3 {
            let slot = if outcomes[k].is_ok() { 0 } else { 1 };
            if slot == 0 {
                row[k].0 += 1;
                totals[k].0 += 1;
            } else {
                row[k].1 += 1;
                totals[k].1 += 1;
            }
        }
    }
    let mut report = String::new();
    writeln!(
        report,
        "ONNX node tests ({} in {}):",
        results.len(),
        dir.display()
    )
    .unwrap();
    writeln!(
        report,
        "{:<20} {:>18} {:>18} {:>18}",
        "family", "interp", "cpu", "sim"
    )
    .unwrap();
    let cell = |(p, f): (usize, usize)| format!("{p} passed, {f} failed");
    for (fam, row) in &by_family {
        writeln!(
            report,
            "{fam:<20} {:>18} {:>18} {:>18}",
            cell(row[0]),
            cell(row[1]),
            cell(row[2])
        )
        .unwrap();
    }
    writeln!(
        report,
        "{:<20} {:>18} {:>18} {:>18}",
        "all",
        cell(totals[0]),
        cell(totals[1]),
        cell(totals[2])
    )
    .unwrap();
    println!("{report}");

    // The expected failures: `test target[,target] reason`.
    let mut actual = String::new();
    writeln!(
        actual,
        "# ONNX node tests that fail, with the targets they fail on and why."
    )
    .unwrap();
    writeln!(
        actual,
        "# Checked by tests/onnx_node.rs; FERRITE_BLESS=1 rewrites it."
    )
    .unwrap();
    for (name, (_, outcomes)) in &results {
        let failing: Vec<&str> = (0..3)
            .filter(|&k| outcomes[k].is_err())
            .map(|k| TARGETS[k].name())
            .collect();
        if failing.is_empty() {
            continue;
        }
        let reason = outcomes.iter().find_map(|o| o.as_ref().err()).unwrap();
        writeln!(actual, "{name} {} {reason}", failing.join(",")).unwrap();
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(EXPECTED);
    if std::env::var_os("FERRITE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    let status = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                Some((parts.next()?.to_string(), parts.next()?.to_string()))
            })
            .collect()
    };
    let (want, got) = (status(&expected), status(&actual));
    let mut drift = Vec::new();
    for name in results.keys() {
        let (w, g) = (want.get(name), got.get(name));
        if w != g {
            drift.push(format!(
                "{name}: expected to fail on [{}], fails on [{}]",
                w.map_or("", |s| s.as_str()),
                g.map_or("", |s| s.as_str())
            ));
        }
    }
    for name in want.keys().filter(|n| !results.contains_key(*n)) {
        drift.push(format!("{name}: listed but not in the suite"));
    }
    assert!(
        drift.is_empty(),
        "{} node tests changed status (a regression, or a fix: re-bless with FERRITE_BLESS=1):\n{}",
        drift.len(),
        drift.join("\n")
    );
}

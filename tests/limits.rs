//! Bounded resources, through the built binary and the library: files are stat'ed and
//! read with a limit (F10), diagnostics excerpt long lines and abbreviate long names
//! (F11), every run has a memory budget, and thread counts are bounded. Every input
//! is made here, in memory or as a sparse file (no disk use), and every case is fast.

use ferrite::ir::npy;
use ferrite::{Error, Options, Target, Tensor};
use std::fs::File;
use std::process::Command;

mod common;
use common::{assert_exit, ferrite, stderr, Scratch};

const GRAPH: &str = "graph g(x: f32[2, 3]) {\n  return neg(x)\n}\n";

/// The header of a `.npy` file declaring `f32` `shape`, without data.
fn npy_header(shape: &str) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    let mut h = dict.into_bytes();
    h.resize(h.len() + (64 - unpadded % 64) % 64, b' ');
    h.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(&h);
    out
}

/// A file of `len` bytes that starts with `head` and is sparse after it.
fn sparse(s: &Scratch, name: &str, head: &[u8], len: u64) -> String {
    let path = s.file(name, head);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len)
        .unwrap();
    path
}

/// A FIFO in the scratch directory.
fn fifo(s: &Scratch, name: &str) -> String {
    let path = s.path(name);
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    path
}

#[test]
fn non_regular_files_are_refused_without_blocking() {
    let s = Scratch::new("limits-fifo");
    let f = fifo(&s, "pipe.fg");
    let g = s.file("g.fg", GRAPH);
    let dir = s.path("");
    // A FIFO would block forever and /dev/zero never ends: each is refused by its
    // kind, as a graph, an input, a kernel and a preset.
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (vec!["check".into(), f.clone()], &f, "a FIFO"),
        (
            vec!["check".into(), "/dev/zero".into()],
            "/dev/zero",
            "a character device",
        ),
        (vec!["fmt".into(), dir.clone()], &dir, "a directory"),
        (
            vec!["run".into(), g.clone(), "--input".into(), format!("x={f}")],
            &f,
            "a FIFO",
        ),
        (
            vec![
                "run".into(),
                g.clone(),
                "--input".into(),
                "x=/dev/zero".into(),
            ],
            "/dev/zero",
            "a character device",
        ),
        (
            vec![
                "sim".into(),
                "/dev/zero".into(),
                "--grid".into(),
                "1".into(),
            ],
            "/dev/zero",
            "a character device",
        ),
        (
            vec![
                "profile".into(),
                g.clone(),
                "--target".into(),
                "sim".into(),
                "--machine".into(),
                f.clone(),
            ],
            &f,
            "a FIFO",
        ),
    ];
    for (args, path, kind) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = ferrite(&args);
        assert_exit(&o, 1);
        assert_eq!(
            stderr(&o),
            format!("error: cannot read `{path}`: {kind}, not a regular file (only regular files are read)\n"),
            "{args:?}"
        );
    }
}

#[test]
fn large_files_are_refused_before_they_are_read() {
    let s = Scratch::new("limits-large");
    // A valid graph followed by 6 GB of NUL bytes (sparse): refused by its size.
    let big = sparse(&s, "big.fg", GRAPH.as_bytes(), 6 << 30);
    let o = ferrite(&["check", &big]);
    assert_exit(&o, 1);
    assert_eq!(
        stderr(&o),
        format!(
            "error: `{big}` is 6442450944 bytes, over the limit of 16777216 bytes for a file \
             read whole (raise it with --max-text-size)\n"
        )
    );
    // The limit is the flag's.
    let small = s.file("small.fg", GRAPH);
    let o = ferrite(&["check", &small, "--max-text-size", "16"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("over the limit of 16 bytes"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["check", &small, "--max-text-size", "1K"]);
    assert_exit(&o, 0);
    let o = ferrite(&["check", &small, "--max-text-size", "lots"]);
    assert_exit(&o, 1);

    // A 6 GB .npy whose header declares f32[2, 3]: the size is checked against the
    // header before any data is read.
    let npy = sparse(&s, "sparse6g.npy", &npy_header("(2, 3)"), 6 << 30);
    let g = s.file("g.fg", GRAPH);
    let o = ferrite(&["run", &g, "--input", &format!("x={npy}")]);
    assert_exit(&o, 1);
    assert_eq!(
        stderr(&o),
        format!(
            "error: input `x`: `{npy}`: an array of shape [2, 3] and type <f4 needs 24 data \
             bytes, but the file has 6442450816\n"
        )
    );
    // A header that declares as much data as the file has, more than the budget
    // allows: refused before the data is read.
    let huge = npy_header("(1073741824,)");
    let len = huge.len() as u64 + (4 << 30);
    let npy = sparse(&s, "sparse4g.npy", &huge, len);
    let kernel = "examples/kernels/vector_add.tile";
    let o = ferrite(&[
        "sim",
        kernel,
        "--grid",
        "1",
        "--memory-limit",
        "1G",
        "--arg",
        &format!("x={npy}"),
    ]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with(&format!(
            "error: reading `{npy}` (f32[1073741824]) needs {} bytes, over the memory budget of \
             1073741824 bytes (raise it with --memory-limit",
            len + (4 << 30)
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_library_reads_files_boundedly() {
    let s = Scratch::new("limits-library");
    let t = Tensor::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let path = s.file("t.npy", t.to_npy());
    assert_eq!(ferrite::files::read_npy(&path, 1 << 20).unwrap(), t);
    // The file's bytes (152) and the tensor (24) must fit.
    let e = ferrite::files::read_npy(&path, 100).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MemoryBudget {
                needs: 176,
                limit: 100,
                ..
            }
        ),
        "{e:?}"
    );
    let e = ferrite::files::read_bounded(&path, 10, "a flag").unwrap_err();
    assert!(
        matches!(
            e,
            Error::FileTooLarge {
                size: 152,
                limit: 10,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(matches!(
        Tensor::read_npy("/dev/zero"),
        Err(Error::Io { .. })
    ));
    let f = fifo(&s, "pipe.npy");
    assert!(matches!(Tensor::read_npy(&f), Err(Error::Io { .. })));
    assert!(matches!(
        ferrite::sim::read_preset(&f),
        Err(Error::Io { .. })
    ));
    // Header first, then exactly the bytes it declares.
    let mut file = ferrite::files::InputFile::open(&path).unwrap();
    let header = npy::read_header(&file.read_prefix(npy::MAX_PREFIX_LEN).unwrap()).unwrap();
    assert_eq!(header.data_bytes().unwrap(), 24);
    let data = file.read_range(header.data_offset as u64, 24).unwrap();
    assert_eq!(data, t.to_npy()[header.data_offset..]);
    assert!(matches!(file.read_range(150, 24), Err(Error::Io { .. })));
}

#[test]
fn huge_names_and_lines_give_short_diagnostics() {
    // A 10 MB undefined name: the message names it by its first chars and length.
    let name = "q".repeat(10_000_000);
    let src = format!("graph g(x: f32[2]) {{\n  y = relu({name})\n  return y\n}}\n");
    let d = ferrite::parse("long.fg", &src).unwrap_err();
    let text = d.to_string();
    assert!(text.len() < 1000, "{} bytes", text.len());
    assert_eq!((d.line, d.col), (2, 12));
    assert!(
        d.message
            .contains(&format!("{}…(10000000 chars)", "q".repeat(64))),
        "{}",
        d.message
    );
    // The caret still points at the name's first char.
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[2].find('^'), Some(2 + 11), "{text}");

    // A valid graph followed by a 5 MB line of junk: the excerpt is around the column.
    let junk = "x".repeat(5_000_000);
    let src = format!("graph g(x: f32[2]) {{\n  return x\n}}\n{junk}\n");
    let d = ferrite::parse("junk.fg", &src).unwrap_err();
    assert_eq!(d.line, 4);
    assert!(d.line_text.chars().count() <= ferrite::ir::text::EXCERPT_CHARS + 2);
    assert!(d.to_string().len() < 1000);

    // An error in the middle of a long line: cut on both sides, the caret under it.
    let src = format!(
        "graph g(x: f32[2]) {{\n  y = add(x, x){0}${0}\n}}\n",
        " ".repeat(300)
    );
    let d = ferrite::parse("mid.fg", &src).unwrap_err();
    assert!(
        d.line_text.starts_with('…') && d.line_text.ends_with('…'),
        "{d}"
    );
    let caret_line = d.to_string().lines().nth(2).unwrap().to_string();
    let at = caret_line.chars().position(|c| c == '^').unwrap() - 2;
    assert_eq!(d.line_text.chars().nth(at), Some('$'), "{d}");

    // Found by AFL++ (fg_parser): a string attribute of control chars and backslashes, each
    // escaped in the message, made a diagnostic six times the size of its input.
    let attr = format!("tan{}", "\u{11}".repeat(20_000));
    let src =
        format!("graph g(x: f32[8]) {{\n  a = gelu(x, approximate=\"{attr}\")\n  return a\n}}\n");
    let d = ferrite::parse("attr.fg", &src).unwrap_err();
    assert!(d.to_string().len() < 4000, "{} bytes", d.to_string().len());

    // The tile language and the loop-IR reader share the diagnostics.
    let kernel = format!("kernel k(x: *f32) {{\n  store(x, {name})\n}}\n");
    let d = ferrite::sim::tile::parse_and_check("long.tile", &kernel).unwrap_err();
    assert!(d.to_string().len() < 1000, "{} bytes", d.to_string().len());
    let program = format!("program p {{\n  {junk}\n}}\n");
    let d = ferrite::ir::loops::parse_program("junk.loop", &program).unwrap_err();
    assert!(d.to_string().len() < 1000, "{} bytes", d.to_string().len());
}

/// What the CLI prints about a graph (its summaries and its errors) abbreviates names of
/// megabytes: a valid graph named by a hostile file cannot make output of megabytes.
#[test]
fn huge_graph_and_value_names_give_short_output() {
    let s = Scratch::new("limits-names");
    let (g, y) = ("g".repeat(1_000_000), "y".repeat(1_000_000));
    let src = format!(
        "graph {g}(x: f32[4], i: i64[2]) {{\n  {y} = index_select(x, i, axis=0)\n  return {y}\n}}\n"
    );
    let file = s.file("names.fg", src);
    let ok = s.file(
        "i.npy",
        npy::encode(&ferrite::ir::Tensor::from_i64(
            &ferrite::ir::TensorType {
                dtype: ferrite::ir::DType::I64,
                shape: vec![2],
            },
            &[0, 3],
        )),
    );
    let bad = s.file(
        "bad.npy",
        npy::encode(&ferrite::ir::Tensor::from_i64(
            &ferrite::ir::TensorType {
                dtype: ferrite::ir::DType::I64,
                shape: vec![2],
            },
            &[0, 9],
        )),
    );
    let runs: Vec<(Vec<String>, i32)> = vec![
        (vec!["check".into(), file.clone()], 0),
        (vec!["compile".into(), file.clone()], 0),
        (
            vec![
                "run".into(),
                file.clone(),
                "--input".into(),
                format!("i={ok}"),
            ],
            0,
        ),
        (
            vec![
                "run".into(),
                file.clone(),
                "--input".into(),
                format!("i={bad}"),
            ],
            1,
        ),
        (
            vec![
                "run".into(),
                file.clone(),
                "--target".into(),
                "interp".into(),
                "--input".into(),
                format!("i={bad}"),
            ],
            1,
        ),
    ];
    for (args, code) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = ferrite(&args);
        assert_exit(&o, code);
        let printed = o.stdout.len() + o.stderr.len();
        assert!(printed < 20_000, "{args:?}: {printed} bytes");
    }
}

/// A graph with a 4 MiB input.
const BIG: &str = "graph big(x: f32[1024, 1024]) {\n  return exp(x)\n}\n";

#[test]
fn runs_over_the_memory_budget_are_refused() {
    let s = Scratch::new("limits-memory");
    let g = s.file("big.fg", BIG);
    for target in ["interp", "loops", "cpu", "sim"] {
        let o = ferrite(&["run", &g, "--target", target, "--memory-limit", "4M"]);
        assert_exit(&o, 1);
        assert!(
            stderr(&o).starts_with(&format!(
                "error: running graph `big` on {target} with its inputs needs "
            )) && stderr(&o).contains(
                " bytes, over the memory budget of 4194304 bytes (raise it with --memory-limit"
            ),
            "{}",
            stderr(&o)
        );
        let o = ferrite(&["run", &g, "--target", target, "--memory-limit", "200M"]);
        assert_exit(&o, 0);
    }
    let o = ferrite(&["profile", &g, "--runs", "1", "--memory-limit", "1M"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("over the memory budget of 1048576 bytes"),
        "{}",
        stderr(&o)
    );
    // The simulator's buffers of a hand-written kernel count against it too.
    let kernel = "examples/kernels/vector_add.tile";
    let o = ferrite(&[
        "sim",
        kernel,
        "--grid",
        "1",
        "--memory-limit",
        "1M",
        "--arg",
        "x=zeros:65536",
        "--arg",
        "y=zeros:65536",
        "--arg",
        "out=zeros:65536",
        "--arg",
        "n=4",
    ]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).starts_with("error: --arg y (f32[65536]) with the arguments before it needs"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_library_checks_the_budget_before_a_run() {
    let g = ferrite::parse("big.fg", BIG).unwrap();
    let x = Tensor::full(&[1024, 1024], 0.5f32).unwrap();
    for target in Target::ALL {
        let options = Options::default().target(target).memory_limit(1 << 20);
        let exe = ferrite::compile_ir(&g, &options).unwrap();
        // Inputs, outputs and at least one working copy: more than 8 MiB.
        assert!(exe.run_memory_bytes() >= 8 << 20, "{target}");
        let e = exe.run(&[&x]).unwrap_err();
        assert!(
            matches!(e, Error::MemoryBudget { limit: 1048576, .. }) && !e.is_internal(),
            "{target}: {e:?}"
        );
        let options = options.memory_limit(exe.run_memory_bytes());
        let exe = ferrite::compile_ir(&g, &options).unwrap();
        assert_eq!(exe.run(&[&x]).unwrap().len(), 1, "{target}");
    }
    // Eager mode interprets: its budget is the options' too.
    let f = ferrite::jit(|[x]: [ferrite::Var; 1]| x.exp())
        .options(Options::default().target(Target::Interp).memory_limit(1000));
    assert!(matches!(
        f.run_eager(&[&x]),
        Err(Error::MemoryBudget { .. })
    ));
}

#[test]
fn thread_counts_are_bounded_everywhere() {
    for cmd in ["run", "profile"] {
        let o = ferrite(&[cmd, "examples/mlp.fg", "--threads", "1025"]);
        assert_exit(&o, 1);
        assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
    }
    let g = ferrite::parse("big.fg", BIG).unwrap();
    let e = ferrite::compile_ir(&g, &Options::default().threads(1025)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidOption {
                option: "threads",
                ..
            }
        ),
        "{e:?}"
    );
}

/// A large read (a model's weight) is split over threads: the bytes are the file's, at
/// any offset and length around the part size, and a range past the end is still an
/// error naming the file, read or not.
#[test]
fn large_reads_split_over_threads_read_the_files_bytes() {
    let s = Scratch::new("large_reads");
    let path = s.path("weights.bin");
    let bytes: Vec<u8> = (0..(5u64 << 20) + 12345)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let mut file = ferrite::files::InputFile::open(&path).unwrap();
    for (offset, len) in [
        (0usize, bytes.len()),
        (7, (2 << 20) - 1),
        (7, 2 << 20),
        (1 << 20, 3 << 20),
        (bytes.len() - (2 << 20) - 3, (2 << 20) + 3),
    ] {
        let mut dst = vec![0u8; len];
        file.read_into(offset as u64, &mut dst).unwrap();
        assert!(dst == bytes[offset..offset + len], "{offset}+{len}");
    }
    let mut dst = vec![0u8; 3 << 20];
    let past = (bytes.len() - (2 << 20)) as u64;
    let err = file.read_into(past, &mut dst).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path: p, .. } if p.as_path() == std::path::Path::new(&path)),
        "{err}"
    );
}

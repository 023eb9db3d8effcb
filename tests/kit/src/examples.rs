//! The repository's examples: `examples/*.fg` graphs and `examples/kernels/*.tile`
//! kernels, loaded by name with the path shown in diagnostics relative to the root.

use ferrite_ir::Graph;
use ferrite_passes::decompose::decompose;
use std::path::{Path, PathBuf};

/// The repository root (the workspace folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The names (file stems) of every `examples/*.fg`, sorted.
pub fn example_names() -> Vec<String> {
    let dir = repo_root().join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "fg").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    names
}

/// The source of `examples/<name>.fg`, with the path to show in messages.
pub fn example_source(name: &str) -> (String, String) {
    let shown = format!("examples/{name}.fg");
    let path = repo_root().join(&shown);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    (shown, src)
}

/// The parsed graph of `examples/<name>.fg`.
pub fn example_graph(name: &str) -> Graph {
    let (shown, src) = example_source(name);
    ferrite_ir::parse(&shown, &src).unwrap_or_else(|d| panic!("{d}"))
}

/// The graph of `examples/<name>.fg`, decomposed to primitive ops.
pub fn example(name: &str) -> Graph {
    decompose(&example_graph(name)).unwrap_or_else(|e| panic!("examples/{name}.fg: {e}"))
}

/// The source of `examples/kernels/<name>.tile`, with the path to show in messages.
pub fn tile_example_source(name: &str) -> (String, String) {
    let shown = format!("examples/kernels/{name}.tile");
    let path = repo_root().join(&shown);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    (shown, src)
}

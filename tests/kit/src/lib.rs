//! Ferrite's test kit: what more than one crate's tests need, written once.
//!
//! * [`examples`]: the repository's example graphs and tile kernels, by name.
//! * [`random`]: a seeded generator of random well-typed graphs and their inputs.
//! * [`differential`]: fused and unfused schedules against the reference interpreter.
//! * [`golden`]: one golden-file harness: compare, show a line diff on drift, re-bless
//!   with `FERRITE_BLESS=1`.
//! * [`filetest`]: the filetest runner: one text file per case (`test STAGE`, input,
//!   expected output), run against a table of stages.
//! * [`loop_text`]: loop-IR print / read round trips.
//! * [`fuzz`]: the mutation fuzzer; [`protobuf`]: its mutations of protobuf messages (ONNX models).
//!
//! This crate is a dev-dependency only; nothing that ships depends on it.

pub mod differential;
pub mod examples;
pub mod filetest;
pub mod fuzz;
pub mod golden;
pub mod loop_text;
pub mod protobuf;
pub mod random;

pub use differential::{check_against_interpreter, primitive};
pub use examples::{
    decoder_source, example, example_graph, example_names, example_source, repo_root,
    tile_example_source,
};
pub use filetest::{run_dir, Case, Stage};
pub use golden::{bless_requested, check_golden, diff};
pub use loop_text::check_round_trip;
pub use random::{
    edge_inputs, edge_inputs_with, inputs_for, random_edge_graph, random_graph, random_graph_with,
    random_inputs, RandomGraph,
};

//! The `.fg` text format of the graph IR (`docs/graph-format.md`): a lexer, a parser that
//! types the graph as it reads and reports every mistake as a located
//! [`Diagnostic`], and a printer whose output parses back to the same graph.
//!
//! ```
//! let src = "graph g(x: f32[2, 3]) {\n  y = sum(relu(x), axes=[1])\n  return y\n}\n";
//! let g = ferrite_ir::parse("g.fg", src).unwrap();
//! assert_eq!(ferrite_ir::print(&g), src);
//! let err = ferrite_ir::parse("g.fg", "graph g(x: f32[2]) {\n  return relu6(x)\n}\n").unwrap_err();
//! assert_eq!(err.to_string(),
//!     "g.fg:2:10: error: unknown op `relu6`; did you mean `relu`?\n    return relu6(x)\n           ^");
//! ```

mod diag;
mod lexer;
mod parser;
mod printer;
mod weights;

pub use diag::{
    abbreviate, abbreviate_words, bounded_message, Diagnostic, EXCERPT_CHARS, MESSAGE_CHARS,
    WORD_CHARS,
};
pub use lexer::{scan_number, NumberScan};
pub use parser::{
    parse, parse_any, parse_bytes, parse_bytes_with, parse_with, Parsed, MAX_NESTING,
};
pub use printer::{print, print_symbolic, weights_file};
pub use weights::{MemoryWeights, NoWeights, WeightSource};

//! The tile kernel language (`.tile` files): a Triton-like, block-level SPMD
//! language with explicit local memory and asynchronous DMA.
//!
//! [`parse`] reads a kernel, [`print()`] writes it back canonically (the round trip
//! is exact), [`check()`] types it and resolves it into a [`CheckedKernel`] the
//! simulator runs; [`parse_and_check`] does both with located errors.
//! `docs/tile-language.md` describes the language.

pub mod ast;
pub mod check;
mod lexer;
mod parser;
mod printer;
pub(crate) mod typed;

pub use ast::{
    BinaryOp, Builtin, Expr, ExprKind, IndexItem, Param, ParamType, Span, Stmt, StmtKind,
    TileKernel, UnaryOp,
};
pub use check::{check, CheckError, MAX_TILE_ELEMENTS, MAX_TILE_RANK};
pub use parser::{parse, MAX_NESTING};
pub use printer::{print, print_expr, print_located};

use ferrite_ir::DType;

/// The dtypes of the tile language (and of the simulated machine's memory): every
/// dtype of the IR, so that every graph has a kernel. Their names are reserved
/// words: no parameter, constant or variable can be called `i8` or `f64`.
pub const DTYPES: [DType; 13] = DType::ALL;

/// The tile-language dtype named `name`.
pub fn dtype_from_name(name: &str) -> Option<DType> {
    DType::from_name(name).filter(|d| DTYPES.contains(d))
}

/// The dtype `dot` of two tiles of dtype `d` accumulates in and returns, as the
/// dot engines do: f32 for f32, f16 and bf16 inputs, f64 for f64, i32 for the
/// integers up to 32 bits (the int8 engine's accumulator; a result wraps, so it is
/// exact modulo the inputs' width), i64 for the 64-bit ones. `None` for bool.
pub fn dot_dtype(d: DType) -> Option<DType> {
    Some(match d {
        DType::Bool => return None,
        DType::F64 => DType::F64,
        d if d.is_float() => DType::F32,
        d if d.size_bytes() <= 4 => DType::I32,
        _ => DType::I64,
    })
}

pub(crate) use parser::reserved;
pub use typed::CheckedKernel;

use ferrite_ir::Diagnostic;

/// Parses and checks the kernel in `src`; every error is located in `file`.
/// Runtime errors of the checked kernel point at `file:line:col` too.
///
/// ```
/// use ferrite_accel::tile;
/// let err = tile::parse_and_check("k.tile", "kernel k(x: *f32) {\n  y = load(x + offs)\n}\n").unwrap_err();
/// assert_eq!(err.to_string(), "k.tile:2:16: error: `offs` is not defined\n    y = load(x + offs)\n                 ^");
/// ```
pub fn parse_and_check(file: &str, src: &str) -> Result<CheckedKernel, Diagnostic> {
    let kernel = parse(file, src)?;
    let mut checked = check(&kernel).map_err(|e| e.to_diagnostic(file, src))?;
    checked.locate(file, src);
    Ok(checked)
}

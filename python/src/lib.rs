//! `ferrite._ferrite`, the extension module of the `ferrite` Python package.
//!
//! A thin layer over the `ferrite` library: it converts numpy arrays and Python
//! values, releases the GIL around compiling and running, and turns library errors
//! into the `ferrite.FerriteError` hierarchy with the CLI's messages. It holds no
//! compiler logic. The Python side (`ferrite/__init__.py`) re-exports it with the
//! torch.compile backend (`ferrite/dynamo.py`); `ferrite/_ferrite.pyi` is its stub.

mod convert;
mod errors;
mod graph;
mod program;

use pyo3::prelude::*;

/// Rust's allocations in the extension go through mimalloc, as in the `ferrite` binary
/// (`src/main.rs`), with huge pages for large blocks only (`ferrite::alloc`); Python's own
/// stay with Python.
#[global_allocator]
static ALLOCATOR: ferrite::alloc::LargePages<mimalloc::MiMalloc> =
    ferrite::alloc::LargePages(mimalloc::MiMalloc);

/// Ferrite: load or build tensor graphs, compile them for the CPU or a simulated
/// accelerator, and run them on numpy arrays.
#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::PyVar>()?;
    m.add_class::<program::PyProgram>()?;
    m.add_function(wrap_pyfunction!(program::load, m)?)?;
    m.add_function(wrap_pyfunction!(program::compile, m)?)?;
    m.add_function(wrap_pyfunction!(graph::concat, m)?)?;
    m.add_function(wrap_pyfunction!(graph::stack, m)?)?;
    m.add_function(wrap_pyfunction!(graph::where_, m)?)?;
    m.add_function(wrap_pyfunction!(graph::scaled_dot_product_attention, m)?)?;
    m.add("DTYPES", convert::DTYPES.map(convert::dtype_name).to_vec())?;
    Ok(())
}

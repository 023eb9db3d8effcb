//! Where the parser gets the tensors of a graph's weights file.
//!
//! A `.fg` file may name one weights file (`weights "model.safetensors"`, before
//! `graph`), and `constant(name="fc1.weight")` refers to a tensor in it. `ir` does no
//! I/O, so the parser asks a [`WeightSource`] for those tensors; the `ferrite` face
//! implements one over safetensors files, and tests implement one over a map.

use crate::{Tensor, TensorType};
use std::sync::Arc;

/// The tensors that `constant(name=...)` refers to.
pub trait WeightSource {
    /// Called once for the file's `weights "FILE"` line, with `FILE` as written, before
    /// any tensor is asked for: the place to refuse a path (absolute, escaping the
    /// graph's folder, not a regular file) or a malformed header. The error is a
    /// sentence; the parser locates it at the file name.
    fn open(&mut self, file: &str) -> Result<(), String>;

    /// Tensor `name` of the weights file `file` (as written after `weights`). `declared`
    /// is the type the text gives it, when it gives both `dtype=` and `shape=`, so a
    /// source can refuse a mismatch from the header before reading any data; the
    /// parser checks the returned tensor's type against the text in any case.
    fn tensor(
        &mut self,
        file: &str,
        name: &str,
        declared: Option<&TensorType>,
    ) -> Result<Arc<Tensor>, String>;
}

/// The source of [`parse`](super::parse): it has no files, so a graph that names a
/// weights file is an error that says how to read one.
pub struct NoWeights;

impl WeightSource for NoWeights {
    fn open(&mut self, file: &str) -> Result<(), String> {
        Err(format!(
            "the graph's weights are in \"{file}\", and this parser was given no way to read \
             files (`ferrite` and `ferrite::load` read them; `ferrite_ir::text::parse_with` \
             takes a `WeightSource`)"
        ))
    }

    fn tensor(
        &mut self,
        file: &str,
        _: &str,
        _: Option<&TensorType>,
    ) -> Result<Arc<Tensor>, String> {
        Err(self.open(file).err().unwrap_or_default())
    }
}

/// A [`WeightSource`] over tensors held in memory, keyed by name, for one weights file
/// of any name. Tests and importers that already hold their weights use it.
#[derive(Default)]
pub struct MemoryWeights {
    /// The tensors by name.
    pub tensors: std::collections::HashMap<String, Arc<Tensor>>,
}

impl WeightSource for MemoryWeights {
    fn open(&mut self, _: &str) -> Result<(), String> {
        Ok(())
    }

    fn tensor(
        &mut self,
        file: &str,
        name: &str,
        _: Option<&TensorType>,
    ) -> Result<Arc<Tensor>, String> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| format!("\"{file}\" has no tensor named \"{name}\""))
    }
}

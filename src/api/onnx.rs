//! ONNX models in: [`load`] / [`load_with`] a `.onnx` file, or [`from_bytes`].
//!
//! The import itself is `ferrite-onnx`'s (no I/O); this module reads the files. A
//! model is untrusted input: the model file and every external-data file are read
//! with a size check before the read ([`read_bounded`](super::files::read_bounded)), and an external-data
//! `location` resolves only to a regular file inside the model's folder: no
//! absolute path, no `..`, no symbolic link that leads out (the path-traversal class
//! of CVE-2022-25882 and CVE-2024-27318, and the symlink variant CVE-2026-27489).
//!
//! ```no_run
//! let model = ferrite::onnx::load("model.onnx")?;
//! let exe = ferrite::compile_ir(&model.graph, &ferrite::Options::default())?;
//! # Ok::<(), ferrite::Error>(())
//! ```

use super::error::{Error, Result};
use super::files::{read_bounded, InputFile};
use super::host::Tensor;
use std::path::{Path, PathBuf};

/// The importer's error, carried by [`Error::Onnx`].
pub use ferrite_onnx::Error as ImportError;
pub use ferrite_onnx::{Binding, Model, Options};

/// The largest model file read (protobuf messages are limited to 2 GiB).
pub const MAX_MODEL_BYTES: u64 = 2 << 30;
/// The most external data read for one model.
pub const MAX_EXTERNAL_BYTES: u64 = 16 << 30;
/// The largest `.pb` tensor file read.
pub const MAX_TENSOR_BYTES: u64 = 4 << 30;

/// Loads a `.onnx` file with no symbolic dimensions to fill in.
pub fn load(path: impl AsRef<Path>) -> Result<Model> {
    load_with(path, &Options::default())
}

/// Loads a `.onnx` file whose inputs have symbolic dimensions (`dim_param`s) as one graph
/// over size symbols of the same names, for [`crate::compile_dynamic`]: the model is
/// imported at a few values of its free dimensions and the imports generalized
/// ([`ferrite_onnx::import_symbolic`]). `options.dims` pins dimensions to values as for
/// [`load_with`]; `bounds` gives symbols their upper bounds (`("sequence", 512)`), which
/// row programs need. Returns the graph and the model imported at the first values tried
/// (for its input and output names).
///
/// ```no_run
/// let (g, _) = ferrite::onnx::load_symbolic("model.onnx", &Default::default(), &[("batch", 32), ("sequence", 512)])?;
/// let exe = ferrite::compile_dynamic(&g, &ferrite::Options::default())?;
/// # Ok::<(), ferrite::Error>(())
/// ```
pub fn load_symbolic(
    path: impl AsRef<Path>,
    options: &Options,
    bounds: &[(&str, usize)],
) -> Result<(ferrite_ir::sym::SymGraph, Model)> {
    let path = path.as_ref();
    let (bytes, mut ext) = read_model(path)?;
    let model = ferrite_onnx::decode_model_owned(bytes).map_err(|e| import_error(path, e))?;
    ferrite_onnx::import_symbolic(&model, options, bounds, &mut ext)
        .map_err(|e| import_error(path, e))
}

/// Loads a `.onnx` file; external data is read from the model's folder.
pub fn load_with(path: impl AsRef<Path>, options: &Options) -> Result<Model> {
    let path = path.as_ref();
    let (bytes, mut ext) = read_model(path)?;
    ferrite_onnx::import_owned(bytes, options, &mut ext).map_err(|e| import_error(path, e))
}

/// A model file's bytes (size-checked before the read) and the resolver of its external
/// data, inside the model's folder.
fn read_model(path: &Path) -> Result<(Vec<u8>, Folder)> {
    let bytes = read_bounded(path, MAX_MODEL_BYTES, "a smaller model")?;
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((bytes, Folder::new(folder)?))
}

/// The importer's `error` about the model at `path`.
fn import_error(path: &Path, error: ImportError) -> Error {
    Error::Onnx {
        path: Some(path.to_path_buf()),
        error: Box::new(error),
    }
}

/// Imports a model from bytes; a model with external data is refused (it has no folder).
pub fn from_bytes(bytes: &[u8], options: &Options) -> Result<Model> {
    ferrite_onnx::import(bytes, options, &mut ferrite_onnx::NoExternalData).map_err(|error| {
        Error::Onnx {
            path: None,
            error: Box::new(error),
        }
    })
}

/// Reads a serialized ONNX `TensorProto` (`input_0.pb` of the ONNX node tests).
pub fn read_tensor(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = read_bounded(path, MAX_TENSOR_BYTES, "a smaller tensor file")?;
    let t = ferrite_onnx::decode_tensor(&bytes).map_err(|e| import_error(path, e))?;
    Tensor::try_from(t)
}

/// External data read from inside one folder.
struct Folder {
    root: PathBuf,
    /// Bytes checked so far, against [`MAX_EXTERNAL_BYTES`].
    read: u64,
    /// The file the last location named, kept open: a model's tensors mostly share one.
    open: Option<(String, InputFile)>,
}

impl Folder {
    fn new(folder: &Path) -> Result<Folder> {
        let root = folder.canonicalize().map_err(|e| Error::Io {
            path: folder.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Folder {
            root,
            read: 0,
            open: None,
        })
    }

    /// The file `location` names, opened once.
    fn file(&mut self, location: &str) -> std::result::Result<&mut InputFile, String> {
        if self.open.as_ref().is_none_or(|(l, _)| l != location) {
            ferrite_onnx::check_location(location)?;
            let path = self.root.join(location);
            // Canonicalizing resolves every symbolic link on the way: the file it names
            // must still lie inside the model's folder.
            let real = path
                .canonicalize()
                .map_err(|e| format!("cannot open `{location}`: {e}"))?;
            if !real.starts_with(&self.root) {
                return Err(format!("`{location}` leads outside the model's folder"));
            }
            // Stat first: a FIFO or device is refused before it is opened (it could block).
            let file = InputFile::open(&real).map_err(|e| format!("`{location}`: {e}"))?;
            self.open = Some((location.to_string(), file));
        }
        Ok(&mut self.open.as_mut().expect("opened above").1)
    }
}

impl ferrite_onnx::ExternalData for Folder {
    fn check(
        &mut self,
        location: &str,
        offset: u64,
        length: u64,
    ) -> std::result::Result<(), String> {
        let len = self.file(location)?.len();
        let end = offset
            .checked_add(length)
            .ok_or_else(|| format!("offset {offset} + length {length} overflows"))?;
        if end > len {
            return Err(format!(
                "bytes {offset}..{end} are asked for, but `{location}` has {len} bytes"
            ));
        }
        if self.read + length > MAX_EXTERNAL_BYTES {
            return Err(format!(
                "the model's external data exceeds the limit of {MAX_EXTERNAL_BYTES} bytes"
            ));
        }
        self.read += length;
        Ok(())
    }

    fn read(
        &mut self,
        location: &str,
        offset: u64,
        dst: &mut [u8],
    ) -> std::result::Result<(), String> {
        self.file(location)?
            .read_into(offset, dst)
            .map_err(|e| format!("`{location}`: {e}"))
    }
}

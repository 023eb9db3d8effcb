//! Graphs with weights on disk: [`load`] reads a `.fg` file and the safetensors file its
//! `weights "FILE"` line names; [`save`] writes a graph's text and its weights beside it.
//!
//! A graph file is untrusted input, and so is its weights file. The weights file must be
//! inside the `.fg` file's folder: an absolute path, a `..` component, or a symlink that
//! resolves outside the folder is refused, and so is anything but a regular file. The
//! file's size is taken from the file system and checked against [`MAX_WEIGHTS_BYTES`]
//! before anything is read; its header length against that size before the header is
//! read; and every tensor's declared offsets against the bytes actually read (the
//! `safetensors` crate's validation), so a header that declares more data than the file
//! holds is an error, never a large allocation or an out-of-bounds read.

use crate::{Error, Result};
use ferrite_ir::text::{parse_any, parse_bytes_with, Parsed, WeightSource};
use ferrite_ir::{Constant, DType, Data, Graph, Tensor, TensorType};
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The largest weights file that [`load`] reads (16 GiB).
pub const MAX_WEIGHTS_BYTES: u64 = 16 << 30;

/// Reads, parses and verifies the graph in `path`, with the tensors of its weights file.
/// A mistake in either file is an [`Error::Parse`] located in the `.fg` text.
pub fn load(path: impl AsRef<Path>) -> Result<Graph> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let g = parse_file(path, &bytes)?;
    ferrite_ir::verify(&g).map_err(|e| Error::InvalidGraph {
        message: e.to_string(),
    })?;
    Ok(g)
}

/// Reads and parses `path` like [`load`], where the graph may have size symbols
/// (`x: f32[B, T, 256]`): a [`Parsed::Symbolic`] graph runs through
/// [`compile_dynamic`](crate::compile_dynamic).
pub fn load_parsed(path: impl AsRef<Path>) -> Result<Parsed> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let parsed = parse_file_any(path, &bytes)?;
    if let Parsed::Graph(g) = &parsed {
        ferrite_ir::verify(g).map_err(|e| Error::InvalidGraph {
            message: e.to_string(),
        })?;
    }
    Ok(parsed)
}

/// [`parse_file`] for a graph that may have size symbols.
pub fn parse_file_any(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let folder = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut source = SafetensorsFolder::new(folder);
    let name = path.display().to_string();
    let source_text = std::str::from_utf8(bytes).map_err(|_| {
        // The concrete reader renders the located UTF-8 error.
        match parse_bytes_with(&name, bytes, &mut source) {
            Err(d) => Error::Parse {
                message: d.to_string(),
            },
            Ok(_) => Error::Parse {
                message: format!("{name}: invalid UTF-8"),
            },
        }
    })?;
    parse_any(&name, source_text, &mut source).map_err(|d| Error::Parse {
        message: d.to_string(),
    })
}

/// Parses `.fg` bytes read from `path`, fetching the weights relative to its folder.
pub fn parse_file(path: &Path, bytes: &[u8]) -> Result<Graph> {
    let folder = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut source = SafetensorsFolder::new(folder);
    parse_bytes_with(&path.display().to_string(), bytes, &mut source).map_err(|d| Error::Parse {
        message: d.to_string(),
    })
}

/// The [`WeightSource`] of a graph file: safetensors files inside one folder.
pub struct SafetensorsFolder {
    folder: PathBuf,
    /// The tensors of each opened file, by file name as written.
    files: HashMap<String, HashMap<String, Arc<Tensor>>>,
}

impl SafetensorsFolder {
    /// A source reading weights files inside `folder` (`""` is the current directory).
    pub fn new(folder: impl Into<PathBuf>) -> SafetensorsFolder {
        SafetensorsFolder {
            folder: folder.into(),
            files: HashMap::new(),
        }
    }
}

impl WeightSource for SafetensorsFolder {
    fn open(&mut self, file: &str) -> std::result::Result<(), String> {
        if !self.files.contains_key(file) {
            let path = inside(&self.folder, file)?;
            let tensors = read_safetensors(&path)?;
            self.files.insert(file.to_string(), tensors);
        }
        Ok(())
    }

    fn tensor(
        &mut self,
        file: &str,
        name: &str,
        _declared: Option<&TensorType>,
    ) -> std::result::Result<Arc<Tensor>, String> {
        self.open(file)?;
        self.files
            .get(file)
            .and_then(|t| t.get(name))
            .cloned()
            .ok_or_else(|| format!("\"{file}\" has no tensor named \"{name}\""))
    }
}

/// `file` (as written in a `weights` line) resolved inside `folder`, or why not.
fn inside(folder: &Path, file: &str) -> std::result::Result<PathBuf, String> {
    let rel = Path::new(file);
    if file.is_empty() {
        return Err("the file name is empty".into());
    }
    if rel.is_absolute() || rel.has_root() {
        return Err("an absolute path is refused: name a file in the graph's folder".into());
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err("a path with `..` is refused: name a file in the graph's folder".into());
    }
    let path = folder.join(rel);
    let base = std::fs::canonicalize(if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    })
    .map_err(|e| format!("cannot resolve the graph's folder: {e}"))?;
    let real = std::fs::canonicalize(&path).map_err(|e| format!("cannot open: {e}"))?;
    if !real.starts_with(&base) {
        return Err(format!(
            "it resolves to `{}`, outside the graph's folder (a symlink?): refused",
            real.display()
        ));
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("cannot open: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    Ok(real)
}

/// Every tensor of the safetensors file at `path` (a regular file inside the folder).
fn read_safetensors(path: &Path) -> std::result::Result<HashMap<String, Arc<Tensor>>, String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let size = f.metadata().map_err(|e| format!("cannot stat: {e}"))?.len();
    if size > MAX_WEIGHTS_BYTES {
        return Err(format!(
            "the file has {size} bytes, over the limit of {MAX_WEIGHTS_BYTES}"
        ));
    }
    let mut head = [0u8; 8];
    f.read_exact(&mut head).map_err(|_| {
        format!("a safetensors file starts with an 8-byte header length; this one has {size} bytes")
    })?;
    let header = u64::from_le_bytes(head);
    if header > size - 8 {
        return Err(format!(
            "the header declares {header} bytes but the file has only {} after the length",
            size - 8
        ));
    }
    // The size is known and bounded, so this reads at most what the file holds.
    let mut bytes = Vec::with_capacity(size as usize);
    bytes.extend_from_slice(&head);
    f.take(size - 8)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 != size {
        return Err("the file changed while it was read".into());
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| match e {
        safetensors::SafeTensorError::MetadataIncompleteBuffer => {
            "the header's tensors do not cover exactly the data in the file (it declares more or fewer bytes than the file holds)".to_string()
        }
        e => format!("not a valid safetensors file: {e}"),
    })?;
    let mut out = HashMap::new();
    for (name, view) in st.iter() {
        let t = to_tensor(view.dtype(), view.shape(), view.data())
            .map_err(|e| format!("tensor \"{name}\": {e}"))?;
        out.insert(name.to_string(), Arc::new(t));
    }
    Ok(out)
}

/// A tensor from safetensors' little-endian bytes.
fn to_tensor(dtype: Dtype, shape: &[usize], bytes: &[u8]) -> std::result::Result<Tensor, String> {
    let (dt, size) = match dtype {
        Dtype::F32 => (DType::F32, 4),
        Dtype::F16 => (DType::F16, 2),
        Dtype::BF16 => (DType::Bf16, 2),
        Dtype::I32 => (DType::I32, 4),
        Dtype::I64 => (DType::I64, 8),
        Dtype::BOOL => (DType::Bool, 1),
        Dtype::F64 => (DType::F64, 8),
        Dtype::I8 => (DType::I8, 1),
        Dtype::U8 => (DType::U8, 1),
        Dtype::I16 => (DType::I16, 2),
        Dtype::U16 => (DType::U16, 2),
        Dtype::U32 => (DType::U32, 4),
        Dtype::U64 => (DType::U64, 8),
        other => {
            return Err(format!(
                "dtype {other:?} is not one Ferrite has ({})",
                DType::name_list()
            ))
        }
    };
    let ty = TensorType::new(dt, shape.to_vec()).map_err(|e| e.to_string())?;
    if bytes.len() != ty.numel() * size {
        return Err(format!(
            "{ty} needs {} bytes, the file holds {}",
            ty.numel() * size,
            bytes.len()
        ));
    }
    if dt == DType::Bool {
        if let Some(b) = bytes.iter().find(|&&b| b > 1) {
            return Err(format!("a bool is 0 or 1, not {b}"));
        }
    }
    let data = Data::from_le_bytes(dt, bytes)
        .ok_or_else(|| format!("{ty}: the bytes are not whole elements"))?;
    Ok(Tensor { ty, data })
}

/// One tensor as safetensors writes it.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn to_bytes(t: &Tensor) -> Bytes {
    let dtype = match t.ty.dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::Bool => Dtype::BOOL,
        DType::F64 => Dtype::F64,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
    };
    let data = t.data.to_le_bytes();
    Bytes {
        dtype,
        shape: t.ty.shape.clone(),
        data,
    }
}

/// Writes `g` as `.fg` text to `path` and its weights to `<stem>.safetensors` beside it,
/// so that [`load`] reads the same graph back. Constants with a key go to the weights
/// file under it; large constants without one get a key (their value's name, else
/// `const<N>`); small ones are written inline. Nothing is written anywhere else: a
/// path with a `..` component or a target that is a symlink is refused.
pub fn save(g: &Graph, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let io = |p: &Path, e: &dyn std::fmt::Display| Error::Io {
        path: p.to_path_buf(),
        message: e.to_string(),
    };
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| io(path, &"the graph file needs a name"))?;
    check_target(path)?;
    let file = format!("{stem}.safetensors");
    let mut g = g.clone();
    let mut keyed: BTreeMap<String, Arc<Tensor>> = BTreeMap::new();
    let mut next = 0usize;
    for i in 0..g.nodes.len() {
        let Some(c) = g.nodes[i].op.constant() else {
            continue;
        };
        if c.key().is_none() && c.is_small() {
            continue;
        }
        let wanted = c
            .key()
            .map(str::to_string)
            .or_else(|| g.nodes[i].name.clone());
        let mut key = wanted.unwrap_or_else(|| format!("const{next}"));
        // A key names one tensor: another tensor under a taken key gets a new one.
        while keyed.get(&key).is_some_and(|t| {
            !Arc::ptr_eq(t, c.shared())
                && Constant::new(t.clone()) != Constant::new(c.shared().clone())
        }) {
            next += 1;
            key = format!("const{next}");
        }
        keyed.insert(key.clone(), c.shared().clone());
        let renamed = c.with_key(Some(key));
        g.nodes[i].op = ferrite_ir::Op::Constant(renamed);
    }
    g.weights = (!keyed.is_empty()).then(|| file.clone());
    let text = ferrite_ir::print(&g);
    if !keyed.is_empty() {
        let tensors: Vec<(String, Bytes)> = keyed
            .iter()
            .map(|(k, t)| (k.clone(), to_bytes(t)))
            .collect();
        let bytes = safetensors::serialize(tensors.iter().map(|(k, b)| (k.as_str(), b)), None)
            .map_err(|e| io(path, &format!("cannot encode the weights: {e}")))?;
        let sidecar = path.with_file_name(&file);
        check_target(&sidecar)?;
        write_inside(&sidecar, &bytes)?;
    }
    write_inside(path, text.as_bytes())
}

/// Refuses a target of [`save`] that could lead outside its folder: a path with a `..`
/// component, a symbolic link, or anything but a regular file.
fn check_target(path: &Path) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::Io {
            path: path.to_path_buf(),
            message: format!("refusing to write: {why}"),
        })
    };
    if path.components().any(|c| c == Component::ParentDir) {
        return refuse("the path has a `..` component");
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            refuse("it is a symbolic link, which could lead outside the folder")
        }
        Ok(m) if !m.is_file() => refuse("it exists and is not a regular file"),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path`, a target [`check_target`] accepted, without ever writing
/// outside its folder (the ONNX `save_external_data` path-traversal class,
/// CVE-2025-51480): the bytes go to a fresh file beside the target (`create_new`, which
/// never follows a link) that is then renamed over it, so a link put there meanwhile is
/// replaced, not written through.
fn write_inside(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |p: &Path, e: std::io::Error| Error::Io {
        path: p.to_path_buf(),
        message: e.to_string(),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| io(&temp, e))?;
    let written = std::io::Write::write_all(&mut file, bytes);
    drop(file);
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, path)) {
        let _ = std::fs::remove_file(&temp);
        return Err(io(path, e));
    }
    Ok(())
}

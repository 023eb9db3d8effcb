//! Reading files, boundedly: every file the library or the `ferrite` binary reads by
//! path goes through here (graphs, tile kernels, `.npy` inputs, machine presets).
//!
//! A file is stat'ed before it is opened, and only regular files are read: a FIFO
//! would block forever, and `/dev/zero` or `/dev/urandom` never end. What is read
//! is bounded before any byte is read:
//!
//! - text read whole ([`read_bounded`]) has a size limit, [`DEFAULT_TEXT_LIMIT`]
//!   unless the caller says otherwise (`--max-text-size` on the command line);
//! - a file with a header ([`read_npy`], or any format through [`InputFile`]) is
//!   read header first: the header's declared sizes are checked against the file's
//!   size and against the memory budget, and then exactly the declared bytes are
//!   read.
//!
//! Front ends that read other formats (`.onnx`, `.pb`, external weights) use
//! [`InputFile`] the same way: [`InputFile::open`], [`InputFile::read_prefix`] for
//! the header, then [`InputFile::read_range`] or [`InputFile::read_all`] with the
//! bound the header implies.

use super::error::{Error, Result};
use super::host::Tensor;
use ferrite_ir::npy;
use ferrite_ir::types::ShapeDisplay;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest text file read by default (16 MiB): a graph of a hundred thousand ops
/// is a few MiB; anything larger is refused unless the limit is raised.
pub const DEFAULT_TEXT_LIMIT: u64 = 16 << 20;

/// A read of at least twice this many bytes ([`InputFile::read_into`], a model's large
/// weights) is split over threads, each part at least this long.
const PARALLEL_READ_PART: usize = 1 << 20;

/// A regular file opened for bounded reading. See the module docs.
#[derive(Debug)]
pub struct InputFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl InputFile {
    /// Opens `path` for reading. Anything but a regular file (a directory, a FIFO, a
    /// socket, a device such as `/dev/zero`) is an [`Error::Io`] naming the path,
    /// refused before it is opened, so a FIFO cannot block.
    pub fn open(path: impl AsRef<Path>) -> Result<InputFile> {
        let path = path.as_ref();
        let io = |message: String| Error::Io {
            path: path.to_path_buf(),
            message,
        };
        // Stat by path first: opening a FIFO for reading blocks until a writer comes.
        let meta = std::fs::metadata(path).map_err(|e| io(e.to_string()))?;
        if !meta.is_file() {
            return Err(io(not_regular(&meta)));
        }
        let file = File::open(path).map_err(|e| io(e.to_string()))?;
        // And again on the open file, in case the path was replaced in between.
        let meta = file.metadata().map_err(|e| io(e.to_string()))?;
        if !meta.is_file() {
            return Err(io(not_regular(&meta)));
        }
        Ok(InputFile {
            path: path.to_path_buf(),
            file,
            len: meta.len(),
        })
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the whole file, which may be at most `limit` bytes: a larger one is an
    /// [`Error::FileTooLarge`] (`raise` says how to raise the limit, e.g.
    /// `"--max-text-size"`), refused before anything is read. A file that grows while
    /// it is read is cut off at `limit + 1` bytes and refused the same way.
    pub fn read_all(&mut self, limit: u64, raise: &'static str) -> Result<Vec<u8>> {
        let too_large = |size: u64| Error::FileTooLarge {
            path: self.path.clone(),
            size,
            limit,
            raise,
        };
        if self.len > limit {
            return Err(too_large(self.len));
        }
        self.file.seek(SeekFrom::Start(0)).map_err(|e| self.io(e))?;
        let mut bytes = Vec::with_capacity(self.len as usize);
        (&mut self.file)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| self.io(e))?;
        if bytes.len() as u64 > limit {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// The first `max` bytes of the file (all of it, if shorter): room for a header.
    pub fn read_prefix(&mut self, max: usize) -> Result<Vec<u8>> {
        let n = self.len.min(max as u64);
        self.read_range(0, n)
    }

    /// Exactly `len` bytes starting at byte `offset`; the caller has bounded `len`
    /// (by a header it checked against [`InputFile::len`] and its memory budget).
    /// A range past the end of the file is an [`Error::Io`].
    pub fn read_range(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check_range(offset, len)?;
        let mut bytes = vec![0u8; len as usize];
        self.read_into(offset, &mut bytes)?;
        Ok(bytes)
    }

    /// Fills `dst` with the bytes at `offset`: the range is checked against the file's
    /// length first, as by [`InputFile::read_range`], without a buffer of its own.
    pub fn read_into(&mut self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len() as u64)?;
        #[cfg(unix)]
        if dst.len() >= 2 * PARALLEL_READ_PART {
            return self.read_parallel(offset, dst);
        }
        self.file
            .seek(SeekFrom::Start(offset))
            .map_err(|e| self.io(e))?;
        self.file.read_exact(dst).map_err(|e| self.io(e))
    }

    /// `dst` read from `offset` in parts of at least [`PARALLEL_READ_PART`] bytes, on up
    /// to one thread a core: most of reading a large weight is faulting in and zeroing
    /// its fresh pages and copying from the page cache, which scale with threads.
    #[cfg(unix)]
    fn read_parallel(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let threads = ferrite_cpu::default_thread_count()
            .min(ferrite_ir::parallel::cores())
            .min(dst.len() / PARALLEL_READ_PART)
            .max(1);
        let part = dst.len().div_ceil(threads);
        let file = &self.file;
        let read = |at: usize, buf: &mut [u8]| file.read_exact_at(buf, offset + at as u64);
        let results: Vec<std::io::Result<()>> = std::thread::scope(|scope| {
            let mut parts = dst.chunks_mut(part).enumerate();
            let first = parts.next();
            let helpers: Vec<_> = parts
                .map(|(i, buf)| scope.spawn(move || read(i * part, buf)))
                .collect();
            let mut results = vec![first.map_or(Ok(()), |(_, buf)| read(0, buf))];
            for h in helpers {
                match h.join() {
                    Ok(r) => results.push(r),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            results
        });
        results
            .into_iter()
            .collect::<std::io::Result<()>>()
            .map_err(|e| self.io(e))
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len);
        if end.is_none() {
            return Err(Error::Io {
                path: self.path.clone(),
                message: format!(
                    "bytes {offset}..{} are past the end of the file ({} bytes)",
                    offset.saturating_add(len),
                    self.len
                ),
            });
        }
        Ok(())
    }

    fn io(&self, e: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }
}

/// What a non-regular file is, for the error that refuses it.
fn not_regular(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    };
    format!("{kind}, not a regular file (only regular files are read)")
}

/// Reads a whole file of at most `limit` bytes (see [`InputFile::read_all`]; `raise`
/// names the flag or option that raises the limit).
pub fn read_bounded(path: impl AsRef<Path>, limit: u64, raise: &'static str) -> Result<Vec<u8>> {
    InputFile::open(path)?.read_all(limit, raise)
}

/// Reads a `.npy` file within a memory budget of `budget` bytes: the header first,
/// then, once the declared shape and element type agree with the file's size and
/// the file's bytes plus the decoded tensor fit in the budget, exactly the declared
/// bytes. A file whose size differs from its header is an [`Error::Npy`] and one
/// over the budget an [`Error::MemoryBudget`], both before the data is read.
pub fn read_npy(path: impl AsRef<Path>, budget: u64) -> Result<Tensor> {
    read_npy_with_header(path, budget).map(|(_, t)| t)
}

/// [`read_npy`], also returning the file's header (its stored element type, and
/// whether decoding converted it).
pub fn read_npy_with_header(path: impl AsRef<Path>, budget: u64) -> Result<(npy::Header, Tensor)> {
    let path = path.as_ref();
    let npy_error = |message: String| Error::Npy {
        message: format!("`{}`: {message}", path.display()),
    };
    let mut file = InputFile::open(path)?;
    let prefix = file.read_prefix(npy::MAX_PREFIX_LEN)?;
    let header = npy::read_header(&prefix).map_err(|e| npy_error(e.to_string()))?;
    let data = header.data_bytes().map_err(|e| npy_error(e.to_string()))? as u64;
    let expected = header.data_offset as u64 + data;
    if file.len() != expected {
        return Err(npy_error(format!(
            "an array of shape {} and type {} needs {data} data bytes, but the file has {}",
            ShapeDisplay(&header.shape),
            header.descr,
            file.len().saturating_sub(header.data_offset as u64)
        )));
    }
    // The file's bytes and the decoded tensor are alive together; a Fortran-order
    // array is reordered into a second tensor.
    let numel: u64 = header.shape.iter().map(|&d| d as u64).product();
    let decoded = numel * header.dtype.size_bytes() as u64;
    let copies = if header.fortran_order && header.shape.len() > 1 {
        2
    } else {
        1
    };
    let needs = expected.saturating_add(decoded * copies);
    if needs > budget {
        return Err(Error::MemoryBudget {
            what: format!(
                "reading `{}` ({})",
                path.display(),
                ferrite_ir::TensorType {
                    dtype: header.dtype,
                    shape: header.shape.clone()
                }
            ),
            needs,
            limit: budget,
        });
    }
    let bytes = file.read_all(expected, "the memory budget")?;
    let tensor = npy::decode(&bytes).map_err(|e| npy_error(e.to_string()))?;
    Ok((header, Tensor::try_from(tensor)?))
}

//! `ferrite sim KERNEL.tile --grid G [--arg NAME=FILE.npy|VALUE|zeros:SHAPE].. [--out DIR]
//! [--machine PRESET]`: run a hand-written tile kernel on the accelerator simulator and
//! print its report.

use super::{load_machine, read_file, read_npy, CliError, CliResult, MemoryLimit, TextLimit};
use clap::Args;
use ferrite::ir::{npy, Tensor};
use ferrite::sim::tile::{self, ParamType};
use ferrite::sim::{self, KernelArg};
use ferrite::Error;
use ferrite::{DType, TensorType};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// The kernel file (.tile).
    pub file: PathBuf,
    /// Programs to launch: `G`, `GxH` or `GxHxW` (program_id(0..3) ranges).
    #[arg(long, value_name = "G[xH[xW]]", value_parser = parse_grid)]
    pub grid: [usize; 3],
    /// Bind parameter NAME: a .npy file for a pointer, `zeros:4x256` for a fresh
    /// zero buffer, or a number for a scalar (repeatable; every parameter needs one).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    pub args: Vec<(String, String)>,
    /// Write every pointer argument after the run as DIR/<name>.npy.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// A machine preset file (default: the built-in MTIA-2i-like machine).
    #[arg(long, value_name = "PRESET")]
    pub machine: Option<PathBuf>,
    #[command(flatten)]
    pub limit: TextLimit,
    #[command(flatten)]
    pub memory: MemoryLimit,
}

/// Runs the kernel and prints the simulator's report.
pub fn sim(args: &SimArgs, out: &mut dyn Write) -> CliResult {
    let bytes = read_file(&args.file, &args.limit)?;
    let name = args.file.display().to_string();
    let src = String::from_utf8(bytes)
        .map_err(|_| CliError::User(format!("`{name}` is not UTF-8 text")))?;
    let kernel =
        tile::parse_and_check(&name, &src).map_err(|d| CliError::Rendered(d.to_string()))?;
    let machine = load_machine(args.machine.as_deref())?;

    let params = &kernel.kernel().params;
    for (n, _) in &args.args {
        if !params.iter().any(|p| &p.name == n) {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            return Err(CliError::User(format!(
                "--arg {n}=...: kernel `{}` has no parameter `{n}` (its parameters: {})",
                kernel.name(),
                names.join(", ")
            )));
        }
    }
    let mut bound = Vec::with_capacity(params.len());
    // The simulator's working copies of all buffers together are bounded, and so is
    // everything together (the host tensors, the device's copies, the widened copy an
    // upload makes): count each buffer before it is made, so that many large `zeros:`
    // arguments are refused rather than exhausting memory.
    let mut left = Left {
        host: sim::MAX_DEVICE_HOST_BYTES,
        budget: args.memory.bytes(),
        limit: args.memory.bytes(),
        largest: 0,
    };
    for p in params {
        let mut given = args.args.iter().filter(|(n, _)| n == &p.name);
        let value = match (given.next(), given.next()) {
            (Some((_, v)), None) => v,
            (None, _) => {
                return Err(CliError::User(format!(
                    "parameter `{}` needs a value: --arg {}=...",
                    p.name, p.name
                )))
            }
            (Some(_), Some(_)) => {
                return Err(CliError::User(format!("--arg `{}` is given twice", p.name)))
            }
        };
        bound.push(bind(&p.name, p.ty, value, &mut left)?);
    }
    // Uploading a buffer, and reading it back, goes through one f64 or i64 copy.
    if left.largest > left.budget {
        return Err(Error::MemoryBudget {
            what: format!("simulating kernel `{}` with its arguments", kernel.name()),
            needs: left.limit - left.budget + left.largest,
            limit: left.limit,
        }
        .into());
    }

    let report = sim::run(&machine, &kernel, args.grid, &mut bound)
        .map_err(|e| CliError::User(format!("{e}")))?;
    writeln!(
        out,
        "kernel {} on grid {}x{}x{}",
        kernel.name(),
        args.grid[0],
        args.grid[1],
        args.grid[2]
    )?;
    writeln!(out, "{report}")?;

    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::User(format!("cannot create directory `{}`: {e}", dir.display()))
        })?;
        for (p, arg) in params.iter().zip(&bound) {
            if let KernelArg::Buffer(t) = arg {
                let path = dir.join(format!("{}.npy", p.name));
                std::fs::write(&path, npy::encode(t)).map_err(|e| {
                    CliError::User(format!("cannot write `{}`: {e}", path.display()))
                })?;
                writeln!(out, "wrote {}", path.display())?;
            }
        }
    }
    Ok(())
}

/// What the buffers bound so far leave of the limits.
struct Left {
    /// Of the simulator's cap on its buffers ([`sim::MAX_DEVICE_HOST_BYTES`]).
    host: u64,
    /// Of the memory budget.
    budget: u64,
    /// The memory budget.
    limit: u64,
    /// The largest transient copy of one buffer.
    largest: u64,
}

/// Turns one `--arg` value into a kernel argument of the parameter's type.
fn bind(name: &str, ty: ParamType, value: &str, left: &mut Left) -> Result<KernelArg, CliError> {
    let bad = |msg: String| CliError::User(format!("--arg {name}={value}: {msg}"));
    let take = |ty: &TensorType, left: &mut Left| {
        let per = if ty.dtype == DType::Bool { 1 } else { 8 };
        let device = (ty.numel() as u64).saturating_mul(per);
        if device > left.host {
            return Err(bad(format!(
                "the simulator keeps 8 bytes per element, and this buffer ({ty}, {device} \
                 bytes) with the ones before it exceeds its limit of {} bytes",
                sim::MAX_DEVICE_HOST_BYTES
            )));
        }
        // The host tensor and the device's copy.
        let needs = device.saturating_add(ty.size_bytes() as u64);
        if needs > left.budget {
            return Err(Error::MemoryBudget {
                what: format!("--arg {name} ({ty}) with the arguments before it"),
                needs: left.limit - left.budget + needs,
                limit: left.limit,
            }
            .into());
        }
        left.host -= device;
        left.budget -= needs;
        left.largest = left.largest.max((ty.numel() as u64).saturating_mul(8));
        Ok(())
    };
    match ty {
        ParamType::Ptr(dtype) => {
            if let Some(shape) = value.strip_prefix("zeros:") {
                let shape = parse_dims(shape).map_err(bad)?;
                let ty = TensorType::new(dtype, shape).map_err(|e| bad(e.to_string()))?;
                take(&ty, left)?;
                return Ok(KernelArg::Buffer(Tensor::zeros(&ty)));
            }
            let path = PathBuf::from(value);
            let (_, t) = read_npy(&path, left.budget).map_err(|e| match e {
                CliError::Library {
                    error: Error::Npy { message },
                    ..
                } => bad(message),
                e => e,
            })?;
            // The file's tensor is counted now that its type is known.
            take(&t.ty, left)?;
            if t.ty.dtype != dtype {
                return Err(bad(format!(
                    "the parameter is *{dtype} but the file holds {}",
                    t.ty
                )));
            }
            Ok(KernelArg::Buffer(t))
        }
        ParamType::Scalar(dtype) if dtype.is_float() => value
            .parse::<f64>()
            .map(KernelArg::Float)
            .map_err(|_| bad(format!("expected a number for a {dtype} scalar"))),
        ParamType::Scalar(dtype) => {
            let v = value
                .parse::<i64>()
                .map_err(|_| bad(format!("expected an integer for a {dtype} scalar")))?;
            if dtype == DType::Bool && !(0..=1).contains(&v) {
                return Err(bad("expected 0 or 1 for a bool scalar".into()));
            }
            Ok(KernelArg::Int(v))
        }
    }
}

/// Parses `4x256` into extents.
fn parse_dims(s: &str) -> Result<Vec<usize>, String> {
    s.split('x')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{s}` is not a shape like 4x256"))
        })
        .collect()
}

/// Parses `--grid G[xH[xW]]`.
fn parse_grid(s: &str) -> Result<[usize; 3], String> {
    let dims = parse_dims(s)?;
    if dims.is_empty() || dims.len() > 3 {
        return Err(format!("`{s}` is not a grid like 64 or 8x8"));
    }
    let mut grid = [1; 3];
    grid[..dims.len()].copy_from_slice(&dims);
    Ok(grid)
}

/// Parses `NAME=VALUE` for `--arg`.
fn parse_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got `{s}`")),
    }
}

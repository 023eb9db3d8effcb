//! The `ferrite` command line: flag definitions, the error type that decides the
//! exit code, and helpers the commands share. Each command lives in its own file.

pub mod check;
pub mod compile;
pub mod fmt;
pub mod profile;
pub mod run;
pub mod sim;
pub mod summary;

use clap::{Parser, Subcommand, ValueEnum};
use ferrite::{Compiled, Options};
use ferrite_accel::sim::Machine;
use ferrite_ir::{Graph, Tensor};
use std::io;
use std::path::{Path, PathBuf};

/// `ferrite`: a compiler for tensor programs.
#[derive(Parser, Debug)]
#[command(name = "ferrite", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 ok, 1 user error (the message says what to fix), 2 internal error."
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Parse and verify a graph file; errors are reported as file:line:col.
    Check(check::CheckArgs),
    /// Print a graph file in canonical form.
    Fmt(fmt::FmtArgs),
    /// Compile a graph: decompose, optimize, fuse; print a summary, dump each stage with --dump.
    Compile(compile::CompileArgs),
    /// Run a hand-written tile kernel on the accelerator simulator and print its report.
    Sim(sim::SimArgs),
    /// Run a graph on inputs from .npy files or random ones and summarize the outputs.
    Run(run::RunArgs),
    /// Profile the fused and the unfused schedule kernel by kernel; Chrome trace with --trace.
    Profile(profile::ProfileArgs),
}

/// Where a graph runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Target {
    /// The reference interpreter (slow, obviously correct).
    Interp,
    /// Native code through the Cranelift JIT.
    Cpu,
    /// The accelerator simulator.
    Sim,
}

impl Target {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        self.api().name()
    }

    /// The library's target of the same name.
    pub fn api(self) -> ferrite::Target {
        match self {
            Target::Interp => ferrite::Target::Interp,
            Target::Cpu => ferrite::Target::Cpu,
            Target::Sim => ferrite::Target::Sim,
        }
    }
}

/// Why a command failed; the variant decides the exit code.
#[derive(Debug)]
pub enum CliError {
    /// Something the user can fix (a file, a flag, the graph): exit code 1, printed
    /// as `error: <message>`.
    User(String),
    /// A parse or type error already rendered as `file:line:col: error: ...` with
    /// the offending line: exit code 1, printed as is.
    Rendered(String),
    /// A bug in Ferrite: exit code 2.
    Internal(String),
    /// Standard output was closed early (`ferrite fmt x.fg | head`): not an error
    /// worth reporting, exit code 0.
    StdoutClosed,
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::StdoutClosed => 0,
            CliError::User(_) | CliError::Rendered(_) => 1,
            CliError::Internal(_) => 2,
        }
    }

    /// Writes the message for the user to `err` (standard error).
    pub fn report(&self, err: &mut dyn io::Write) {
        // A failure to write to stderr leaves nothing better to do than exit.
        let _ = match self {
            CliError::User(m) => writeln!(err, "error: {m}"),
            CliError::Rendered(m) => writeln!(err, "{}", m.trim_end()),
            CliError::Internal(m) => writeln!(
                err,
                "internal error: {m}\nThis is a bug in Ferrite; please report it with the input that caused it."
            ),
            CliError::StdoutClosed => Ok(()),
        };
    }
}

impl From<io::Error> for CliError {
    /// Only writes to standard output are converted implicitly; file errors are
    /// wrapped with their path by [`read_file`] and the commands.
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::StdoutClosed
        } else {
            CliError::User(format!("cannot write to standard output: {e}"))
        }
    }
}

/// The result of a command.
pub type CliResult = Result<(), CliError>;

/// Reads a file the user named, with an error that says which one.
pub fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path)
        .map_err(|e| CliError::User(format!("cannot read `{}`: {e}", path.display())))
}

/// Reads, parses and verifies a graph file. Parse errors come back rendered with
/// their location; a parsed graph that fails the verifier is a bug in the parser.
pub fn load_graph(path: &Path) -> Result<(Graph, Vec<u8>), CliError> {
    let bytes = read_file(path)?;
    let name = path.display().to_string();
    let graph =
        ferrite_ir::parse_bytes(&name, &bytes).map_err(|d| CliError::Rendered(d.to_string()))?;
    ferrite_ir::verify(&graph).map_err(|e| {
        CliError::Internal(format!(
            "`{name}` parsed into a graph the verifier rejects: {e}"
        ))
    })?;
    Ok((graph, bytes))
}

/// The machine a `--machine PRESET` flag names, or the built-in MTIA-2i-like one.
pub fn load_machine(preset: Option<&Path>) -> Result<Machine, CliError> {
    let Some(path) = preset else {
        return Ok(Machine::mtia2i());
    };
    let text = String::from_utf8(read_file(path)?)
        .map_err(|_| CliError::User(format!("`{}` is not UTF-8 text", path.display())))?;
    Machine::from_preset_str(&text)
        .map_err(|e| CliError::User(format!("`{}`: {e}", path.display())))
}

/// The compile options of the `--no-fuse` and `--no-optimize` flags, for `target`.
pub fn compile_options(target: ferrite::Target, no_fuse: bool, no_optimize: bool) -> Options {
    Options::default()
        .target(target)
        .fuse(!no_fuse)
        .optimize(!no_optimize)
}

/// Compiles a graph the command has loaded (and so verified) through the library,
/// the one place that turns a graph and options into a runnable program. A failing
/// pipeline or code generator is a bug (exit code 2); a dump that cannot be written
/// is the user's to fix. Errors of running the program are the command's to word.
pub fn compile_graph(graph: &Graph, options: &Options) -> Result<Compiled, CliError> {
    ferrite::compile_ir(graph, options).map_err(|e| match e {
        ferrite::Error::Io { path, message } => {
            CliError::User(format!("cannot write `{}`: {message}", path.display()))
        }
        ferrite::Error::Compile { message } => CliError::Internal(message),
        e => CliError::Internal(e.to_string()),
    })
}

/// The message of a failed run, without the library's `execution failed: ` prefix
/// (the commands say what failed in their own words).
pub fn run_failure(e: ferrite::Error) -> String {
    match e {
        ferrite::Error::Run { message } => message,
        e => e.to_string(),
    }
}

/// The input a command makes up for parameter `i` when none is given: reproducible
/// from the seed (`Tensor::random(type, seed + i)`).
pub fn random_input(g: &Graph, i: usize, seed: u64) -> Tensor {
    Tensor::random(g.ty(g.params[i]), seed.wrapping_add(i as u64))
}

/// `1 param`, `3 params`.
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Parses `NAME=FILE` for `--input`.
pub fn parse_name_eq_path(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_eq_path() {
        assert_eq!(
            parse_name_eq_path("x=a/b=c.npy").unwrap(),
            ("x".to_string(), PathBuf::from("a/b=c.npy"))
        );
        assert!(parse_name_eq_path("x").is_err());
        assert!(parse_name_eq_path("=a.npy").is_err());
        assert!(parse_name_eq_path("x=").is_err());
    }

    #[test]
    fn plurals() {
        assert_eq!(count(1, "op"), "1 op");
        assert_eq!(count(0, "op"), "0 ops");
        assert_eq!(count(5, "output"), "5 outputs");
    }

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::User("x".into()).exit_code(), 1);
        assert_eq!(CliError::Rendered("x".into()).exit_code(), 1);
        assert_eq!(CliError::Internal("x".into()).exit_code(), 2);
        let broken: CliError = io::Error::from(io::ErrorKind::BrokenPipe).into();
        assert_eq!(broken.exit_code(), 0);
    }
}

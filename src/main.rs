//! The `ferrite` binary: parses the command line and dispatches to `cli/`.
//!
//! Exit codes: 0 ok, 1 user error (with a message on standard error), 2 internal
//! error (a bug: a panic or a broken invariant). For an error of the library, its
//! variant decides ([`ferrite::Error::is_internal`], through `CliError::exit_code`).

mod cli;

use clap::error::ErrorKind;
use clap::Parser;
use cli::{CliError, Command};
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

/// Compiling allocates and frees a great deal (e-graphs, candidate kernels, Cranelift IR); under
/// glibc's malloc that and the page faults of fresh memory were a fifth of a model's compile.
/// mimalloc is built without its own huge-page advice (`no_thp`): [`LargePages`] asks for
/// huge pages for large blocks only (its module says why).
///
/// [`LargePages`]: ferrite::alloc::LargePages
#[global_allocator]
static ALLOCATOR: ferrite::alloc::LargePages<mimalloc::MiMalloc> =
    ferrite::alloc::LargePages(mimalloc::MiMalloc);

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // clap exits with 2 on usage errors; for Ferrite a bad flag is a user error.
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 1,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    // A panic is a bug, whatever the input: report it as an internal error (exit 2)
    // rather than with Rust's default exit code 101.
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let (mut out, mut err) = (stdout.lock(), stderr.lock());
        let result = match &args.command {
            Command::Check(a) => cli::check::check(a, &mut out),
            Command::Fmt(a) => cli::fmt::fmt(a, &mut out, &mut err),
            Command::Compile(a) => cli::compile::compile(a, &mut out),
            Command::Sim(a) => cli::sim::sim(a, &mut out),
            Command::Run(a) => cli::run::run(a, &mut out, &mut err),
            Command::Profile(a) => cli::profile::profile(a, &mut out, &mut err),
            Command::Convert(a) => cli::convert::convert(a, &mut out),
            Command::Grad(a) => cli::grad::grad(a, &mut out, &mut err),
        };
        result.and_then(|()| out.flush().map_err(CliError::from))
    }));
    let result = result.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(CliError::Internal(format!("panic: {msg}")))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(&mut std::io::stderr());
            ExitCode::from(e.exit_code())
        }
    }
}

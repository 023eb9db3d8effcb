//! Helpers shared by the tests that run the `ferrite` binary (`cli.rs`, `profile.rs`), and
//! by the tests of graphs with size symbols ([`dynamic`]).
#![allow(dead_code)]

pub mod dynamic;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `ferrite ARGS` from the repository root.
pub fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the ferrite binary runs")
}

/// Runs `ferrite ARGS` from the repository root with environment variables `env` set.
pub fn ferrite_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the ferrite binary runs")
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code, showing both streams when it differs.
#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit code\n--- stdout:\n{}\n--- stderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

/// A fresh scratch directory for one test, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new empty directory named after the test and this process.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ferrite-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `contents` to `name` in the directory and returns its path as a string.
    pub fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p.to_str().unwrap().to_string()
    }

    /// The path of `name` in the directory, as a string.
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every `examples/*.fg`, relative to the repository root, sorted.
pub fn examples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".fg"))
        .map(|n| format!("examples/{n}"))
        .collect();
    files.sort();
    files
}

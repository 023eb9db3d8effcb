//! The filetest runner, in Cranelift's style: one text file per case, holding the
//! stage to run, its input and the expected output (the format is described in
//! `tests/filetests/README.md`):
//!
//! ```text
//! test schedule unfused
//! ; Comment lines start with `;` (header only).
//!
//! graph g(x: f32[4]) {
//!   return relu(x)
//! }
//!
//! === expected ===
//! program g
//! ...
//! ```
//!
//! A [`Stage`] is a named function from the case's input text to its output text;
//! each test target passes the table of the stages it knows to [`run_dir`], which runs
//! every file under a folder, shows a line diff for each case whose output drifted and
//! reports all failures of the run together. `FERRITE_BLESS=1` rewrites the expected
//! part of each drifted file (everything after the separator line) and nothing else;
//! `FERRITE_FILETEST=TEXT` runs only the files whose path contains `TEXT`.

use crate::golden::{bless_requested, diff};
use std::path::{Path, PathBuf};

/// The line that separates a case's input from its expected output.
pub const SEPARATOR: &str = "=== expected ===";

/// A named step of the compiler that filetests can exercise.
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    /// The name a case's `test` line gives (`schedule`).
    pub name: &'static str,
    /// The options a case may set for it (`unfused`, or `key` for `key=value`).
    pub options: &'static [&'static str],
    /// Input text to output text; an error is compared as the text `error: MESSAGE`.
    pub run: fn(&Case) -> Result<String, String>,
}

impl Stage {
    /// A stage without options.
    pub const fn new(name: &'static str, run: fn(&Case) -> Result<String, String>) -> Stage {
        Stage {
            name,
            options: &[],
            run,
        }
    }

    /// The same stage, accepting `options`.
    pub const fn with_options(self, options: &'static [&'static str]) -> Stage {
        Stage { options, ..self }
    }
}

/// One case as a stage sees it.
#[derive(Clone, Debug)]
pub struct Case<'a> {
    /// The file's path relative to the repository root, for diagnostics.
    pub file: &'a str,
    /// The input: the file up to the separator, with the header lines blanked so that
    /// line numbers in diagnostics are those of the file.
    pub input: &'a str,
    /// The options set in the header, in order: `name` or `name=value`.
    pub options: Vec<(String, Option<String>)>,
}

impl Case<'_> {
    /// Whether option `name` is set (as a flag or with a value).
    pub fn flag(&self, name: &str) -> bool {
        self.options.iter().any(|(n, _)| n == name)
    }

    /// The value of option `name=value`, the last one if set twice.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// A filetest file split into its parts.
#[derive(Debug)]
struct Parsed<'a> {
    stage: &'a str,
    options: Vec<(String, Option<String>)>,
    /// The input with header lines blanked.
    input: String,
    /// The text up to and including the separator line, kept when blessing.
    head: &'a str,
    /// The expected output, `None` when the file has no separator yet.
    expected: Option<&'a str>,
}

/// Splits `text` into header, input and expected output.
fn parse_file(text: &str) -> Result<Parsed<'_>, String> {
    let mut stage = None;
    let mut options = Vec::new();
    let mut input = String::new();
    let mut in_header = true;
    let mut offset = 0;
    let mut split = None;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let content = line.trim_end_matches(['\n', '\r']);
        if content == SEPARATOR {
            split = Some(offset + line.len());
            break;
        }
        offset += line.len();
        let trimmed = content.trim();
        if in_header {
            let words: Vec<&str> = trimmed.split_whitespace().collect();
            let header = match words.first() {
                None => true,
                Some(w) if w.starts_with(';') => true,
                Some(&"test") if stage.is_none() => {
                    let name = words
                        .get(1)
                        .ok_or_else(|| format!("line {}: `test` needs a stage name", number + 1))?;
                    stage = Some(*name);
                    add_options(&mut options, &words[2..]);
                    true
                }
                Some(&"set") if stage.is_some() => {
                    add_options(&mut options, &words[1..]);
                    true
                }
                Some(_) if stage.is_none() => {
                    return Err(format!(
                        "line {}: a filetest starts with `test STAGE`, found `{trimmed}`",
                        number + 1
                    ))
                }
                Some(_) => false,
            };
            if header {
                if line.ends_with('\n') {
                    input.push('\n');
                }
                continue;
            }
            in_header = false;
        }
        input.push_str(line);
    }
    let stage = stage.ok_or("the file has no `test STAGE` line")?;
    let (head, expected) = match split {
        Some(at) => (&text[..at], Some(&text[at..])),
        None => (text, None),
    };
    Ok(Parsed {
        stage,
        options,
        input,
        head,
        expected,
    })
}

fn add_options(options: &mut Vec<(String, Option<String>)>, words: &[&str]) {
    for w in words {
        match w.split_once('=') {
            Some((k, v)) => options.push((k.to_string(), Some(v.to_string()))),
            None => options.push((w.to_string(), None)),
        }
    }
}

/// The text a stage's result is compared as, ending with a newline: its output, or
/// the error message, prefixed with `error: ` unless its first line already says
/// `error:` (a located diagnostic, `file:line:col: error: ...`).
fn render(result: Result<String, String>) -> String {
    let mut text = match result {
        Ok(s) => s,
        Err(e) if e.lines().next().is_some_and(|l| l.contains("error:")) => e,
        Err(e) => format!("error: {e}"),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Runs one file; `Err` describes the failure.
fn run_file(path: &Path, shown: &str, stages: &[Stage]) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let parsed = parse_file(&text).map_err(|e| format!("{shown}: {e}"))?;
    let stage = stages
        .iter()
        .find(|s| s.name == parsed.stage)
        .ok_or_else(|| {
            let known: Vec<&str> = stages.iter().map(|s| s.name).collect();
            format!(
                "{shown}: unknown stage `{}` (this runner knows: {})",
                parsed.stage,
                known.join(", ")
            )
        })?;
    for (name, _) in &parsed.options {
        if !stage.options.contains(&name.as_str()) {
            return Err(format!(
                "{shown}: stage `{}` has no option `{name}` (it takes: {})",
                stage.name,
                if stage.options.is_empty() {
                    "none".to_string()
                } else {
                    stage.options.join(", ")
                }
            ));
        }
    }
    let case = Case {
        file: shown,
        input: &parsed.input,
        options: parsed.options.clone(),
    };
    let actual = render((stage.run)(&case));
    if parsed.expected == Some(actual.as_str()) {
        return Ok(());
    }
    if bless_requested() {
        let mut blessed = parsed.head.to_string();
        if parsed.expected.is_none() {
            blessed = blessed.trim_end().to_string();
            blessed.push_str("\n\n");
            blessed.push_str(SEPARATOR);
        }
        if !blessed.ends_with('\n') {
            blessed.push('\n');
        }
        blessed.push_str(&actual);
        return std::fs::write(path, blessed).map_err(|e| format!("{shown}: {e}"));
    }
    match parsed.expected {
        None => Err(format!(
            "{shown}: no `{SEPARATOR}` line yet; run with FERRITE_BLESS=1 to write the output:\n{actual}"
        )),
        Some(expected) => Err(format!(
            "{shown}: output drifted (- expected, + actual; re-bless with FERRITE_BLESS=1 if intended):\n{}",
            diff(expected, &actual)
        )),
    }
}

/// Every file under `dir` (recursively, sorted), except `README.md` and hidden files.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') || name == "README.md" {
            continue;
        }
        if path.is_dir() {
            files_under(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Runs every filetest under `dir` with `stages` and returns how many ran; the error
/// lists every failing case with its diff. Paths in messages are relative to the
/// repository root.
pub fn run_dir(dir: &Path, stages: &[Stage]) -> Result<usize, String> {
    let mut files = Vec::new();
    files_under(dir, &mut files)?;
    files.sort();
    let filter = std::env::var("FERRITE_FILETEST").unwrap_or_default();
    let root = crate::repo_root().canonicalize().ok();
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in files {
        let shown = match (&root, path.canonicalize()) {
            (Some(root), Ok(p)) => p
                .strip_prefix(root)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| path.display().to_string()),
            _ => path.display().to_string(),
        };
        if !shown.contains(&filter) {
            continue;
        }
        ran += 1;
        if let Err(e) = run_file(&path, &shown, stages) {
            failures.push(e);
        }
    }
    if ran == 0 {
        return Err(format!(
            "no filetests under {} match `{filter}`",
            dir.display()
        ));
    }
    if failures.is_empty() {
        Ok(ran)
    } else {
        Err(format!(
            "{} of {ran} filetests failed:\n\n{}",
            failures.len(),
            failures.join("\n\n")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_header_input_and_expected() {
        let text = "; about\ntest schedule unfused\nset a=1 b\n\ngraph g\n=== expected ===\nout\n";
        let p = parse_file(text).unwrap();
        assert_eq!(p.stage, "schedule");
        assert_eq!(
            p.options,
            vec![
                ("unfused".to_string(), None),
                ("a".to_string(), Some("1".to_string())),
                ("b".to_string(), None)
            ]
        );
        // Header lines are blanked, so the input keeps the file's line numbers.
        assert_eq!(p.input, "\n\n\n\ngraph g\n");
        assert_eq!(p.expected, Some("out\n"));
        assert!(p.head.ends_with("=== expected ===\n"));
    }

    #[test]
    fn a_set_line_after_the_input_is_input() {
        let p = parse_file("test parse\nx\nset y\n").unwrap();
        assert_eq!(p.input, "\nx\nset y\n");
        assert_eq!(p.expected, None);
        assert!(parse_file("graph g\n").unwrap_err().contains("test STAGE"));
        assert!(parse_file("test\n").unwrap_err().contains("stage name"));
    }

    #[test]
    fn errors_render_as_text() {
        assert_eq!(render(Err("bad".into())), "error: bad\n");
        assert_eq!(
            render(Err("f:1:2: error: bad".into())),
            "f:1:2: error: bad\n"
        );
        assert_eq!(render(Ok("a".into())), "a\n");
        assert_eq!(render(Ok(String::new())), "");
    }
}

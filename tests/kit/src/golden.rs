//! One golden-file harness for every crate: compare printed output with a file, show a
//! line diff when it drifts, and re-bless with `FERRITE_BLESS=1`.

use std::path::Path;

/// Whether the run was asked to re-bless golden files (`FERRITE_BLESS=1`).
pub fn bless_requested() -> bool {
    std::env::var("FERRITE_BLESS").is_ok_and(|v| v == "1")
}

/// A line diff of `expected` against `actual`: `- ` lines only in `expected`, `+ ` lines
/// only in `actual`, unchanged lines left out (longest common subsequence).
pub fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] > lcs[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    out
}

/// Compares `actual` with the golden file at `path`, or writes it when blessing.
pub fn check_golden(path: &Path, actual: &str) -> Result<(), String> {
    if bless_requested() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        return std::fs::write(path, actual).map_err(|e| format!("{}: {e}", path.display()));
    }
    let expected = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e} (run with FERRITE_BLESS=1 to create it)",
            path.display()
        )
    })?;
    if expected == actual {
        Ok(())
    } else {
        Err(format!(
            "{} drifted (- expected, + actual; re-bless with FERRITE_BLESS=1 if intended):\n{}",
            path.display(),
            diff(&expected, actual)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn the_diff_marks_changed_lines() {
        assert_eq!(diff("a\nb\nc\n", "a\nx\nc\n"), "- b\n+ x\n");
        assert_eq!(diff("a\n", "a\nb\n"), "+ b\n");
        assert_eq!(diff("a\nb\n", "a\n"), "- b\n");
    }
}

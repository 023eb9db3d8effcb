//! `ferrite fmt FILE [--write]`: print a graph in canonical form.
//!
//! The canonical form is the printer's output ([`ferrite::print`]) preceded by
//! the file's leading comment block (the comment lines above `graph`, which say what
//! the file is). The printer does not keep comments inside the graph; `fmt` says so
//! on standard error, and `--write` refuses to drop them.

use super::{count, load_fg, CliError, CliResult, TextLimit};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Flags of `ferrite fmt`.
#[derive(Args, Debug)]
pub struct FmtArgs {
    /// The graph file (.fg).
    pub file: PathBuf,
    /// Rewrite the file in place instead of printing it.
    #[arg(short, long)]
    pub write: bool,
    #[command(flatten)]
    pub limit: TextLimit,
}

/// Prints the canonical text, or rewrites the file with it.
pub fn fmt(args: &FmtArgs, out: &mut dyn Write, err: &mut dyn Write) -> CliResult {
    let (parsed, bytes) = load_fg(&args.file, &args.limit)?;
    // The parser accepted the bytes, so they are UTF-8.
    let source = String::from_utf8_lossy(&bytes);
    let layout = CommentLayout::of(&source);
    let printed = match &parsed {
        ferrite::ir::text::Parsed::Graph(graph) => ferrite::print(graph),
        ferrite::ir::text::Parsed::Symbolic(g) => ferrite::ir::text::print_symbolic(g),
    };
    let text = canonical_text(&layout, &printed);
    let path = args.file.display();
    if !args.write {
        if layout.inner_comments > 0 {
            writeln!(
                err,
                "note: {path}: {} inside the graph not kept (only the comment block above `graph` is)",
                count(layout.inner_comments, "comment line"),
            )?;
        }
        out.write_all(text.as_bytes())?;
        return Ok(());
    }
    if layout.inner_comments > 0 {
        return Err(CliError::User(format!(
            "{path}: not rewritten, because fmt would drop {} inside the graph \
             (only the comment block above `graph` is kept); run without --write to see the result",
            count(layout.inner_comments, "comment line"),
        )));
    }
    if text == source {
        writeln!(out, "{path}: already formatted")?;
        return Ok(());
    }
    std::fs::write(&args.file, text.as_bytes())
        .map_err(|e| CliError::User(format!("cannot write `{path}`: {e}")))?;
    writeln!(out, "{path}: formatted")?;
    Ok(())
}

/// Where the comments of a source file are, as far as `fmt` cares.
#[derive(Debug, PartialEq)]
struct CommentLayout {
    /// The comment lines before the first line of code, right-trimmed, without
    /// leading or trailing blank lines.
    header: Vec<String>,
    /// True when a blank line separated the header from the code.
    blank_after_header: bool,
    /// Lines after the header that hold a comment (which the printer drops).
    inner_comments: usize,
}

impl CommentLayout {
    fn of(source: &str) -> CommentLayout {
        let mut lines = source.lines().peekable();
        let mut header: Vec<String> = Vec::new();
        let mut blank_after_header = false;
        while let Some(line) = lines.peek() {
            let t = line.trim();
            if t.starts_with('#') {
                header.push(line.trim_end().to_string());
                blank_after_header = false;
            } else if t.is_empty() {
                // Blank lines inside the header are kept; leading ones are not.
                if !header.is_empty() {
                    blank_after_header = true;
                    header.push(String::new());
                }
            } else {
                break;
            }
            lines.next();
        }
        while header.last().is_some_and(|l| l.is_empty()) {
            header.pop();
        }
        let inner_comments = lines.filter(|l| has_comment(l)).count();
        CommentLayout {
            header,
            blank_after_header,
            inner_comments,
        }
    }
}

/// The header comment block, then the printed graph, ending in one newline.
fn canonical_text(layout: &CommentLayout, printed: &str) -> String {
    let mut text = String::new();
    for line in &layout.header {
        text.push_str(line);
        text.push('\n');
    }
    if !layout.header.is_empty() && layout.blank_after_header {
        text.push('\n');
    }
    text.push_str(printed.trim_end());
    text.push('\n');
    text
}

/// True if `line` has a `#` comment, i.e. a `#` outside a double-quoted string.
fn has_comment(line: &str) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for c in line.chars() {
        match (in_string, c) {
            (true, _) if escaped => escaped = false,
            (true, '\\') => escaped = true,
            (_, '"') => in_string = !in_string,
            (false, '#') => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_inside_strings_do_not_count() {
        assert!(has_comment("  y = relu(x)  # why"));
        assert!(!has_comment("  y = gelu(x, approximate=\"#tanh\")"));
        assert!(has_comment(
            "  y = gelu(x, approximate=\"a\\\"#\")  # after"
        ));
        assert!(!has_comment("  y = gelu(x, approximate=\"a\\\"#\")"));
    }

    #[test]
    fn header_block_is_kept_and_inner_comments_counted() {
        let src = "\n# A model.\n#   second line   \n\n# more\n\ngraph g(x: f32[]) {\n  # inner\n  y = neg(x) # trailing\n  return y\n}\n# after\n";
        let layout = CommentLayout::of(src);
        assert_eq!(
            layout.header,
            vec!["# A model.", "#   second line", "", "# more"]
        );
        assert!(layout.blank_after_header);
        assert_eq!(layout.inner_comments, 3);
        let printed = "graph g(x: f32[]) {\n  y = neg(x)\n  return y\n}\n";
        let text = canonical_text(&layout, printed);
        assert_eq!(
            text,
            "# A model.\n#   second line\n\n# more\n\ngraph g(x: f32[]) {\n  y = neg(x)\n  return y\n}\n"
        );
        // Formatting the result again changes nothing.
        let again = CommentLayout::of(&text);
        assert_eq!(canonical_text(&again, printed), text);
    }

    #[test]
    fn no_header() {
        let layout = CommentLayout::of("graph g(x: f32[]) {\n  return x\n}");
        assert!(layout.header.is_empty());
        assert_eq!(canonical_text(&layout, "graph\n\n"), "graph\n");
    }
}

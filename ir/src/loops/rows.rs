//! Row programs: loop IR whose leading extent is a run-time size, `rows`.
//!
//! A [`RowProgram`] is a [`Program`] written at its most rows (`max`) plus [`Rows`]:
//! for each buffer and kernel, which axis (if any) counts rows, as `factor * rows`.
//! At a smaller count `r` the same program runs with each such extent `factor * r`:
//! only the first points of a row kernel's outer domain run, and a row buffer holds
//! only its first rows. That is sound when nothing but those extents depends on the
//! row count, which [`Rows::derive`] establishes and [`Rows::check`] proves:
//!
//! - a row axis is a kernel's or buffer's first axis longer than 1 (the axes before it
//!   are 1), so the points or elements of `r` rows are a prefix of those of `max`;
//! - a kernel reading a row buffer writes only row buffers (nothing reduces across
//!   rows), and a GEMM's rows are its `m` (batch axes of extent 1, the right operand
//!   not a row buffer);
//! - every index into a row buffer is affine in the kernel's row variable (never under
//!   a division or modulo), so its least and greatest values are affine functions of
//!   `r`, as is the buffer's length: checked at `r = 1` and `r = max`, every index is
//!   in bounds at every `r` between. An index into any other buffer only shrinks as `r`
//!   does (interval arithmetic is monotone), so its check at `max` covers every `r`.
//!
//! So the points of the first `r` rows touch only the first `r` rows of every row
//! buffer: a run of `r` rows computes exactly the first `r` rows of a run of `max`
//! whose inputs' first `r` rows are the same. (Each point computes what it computes at
//! `max`: guards and index values that read the row variable are the same.) That
//! those rows are the graph's at the binding is the graph's part, a row graph.
//!
//! [`RowProgram::at`] is the static program at `r` rows (what the evaluator runs);
//! its text is the program's with a `rows` line naming the row axes.

use super::index::{Extents, IndexExpr, Var};
use super::program::{Buffer, BufferKind, Kernel, Program, Stage};
use super::ExprOp;
use std::fmt;

/// Which axis of a buffer or kernel counts rows: its extent is `factor * rows`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RowAxis {
    /// The axis.
    pub axis: usize,
    /// Extent per row.
    pub factor: usize,
}

/// The row axes of a program (see the [module docs](self)).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Rows {
    /// The row count as the user writes it (`B*T`).
    pub name: String,
    /// The most rows: the program's extents are at this count.
    pub max: usize,
    /// Per buffer (by id), its row axis.
    pub buffers: Vec<Option<RowAxis>>,
    /// Per kernel (by id), its outer domain's row axis.
    pub kernels: Vec<Option<RowAxis>>,
}

/// A program whose row count is chosen at each run.
#[derive(Clone, PartialEq, Debug)]
pub struct RowProgram {
    /// The program at [`Rows::max`] rows.
    pub program: Program,
    /// Its row axes.
    pub rows: Rows,
}

/// The first axis longer than 1 of `dims`, as a row axis of `max` rows, if it is one.
fn leading_rows(dims: &[usize], max: usize) -> Option<RowAxis> {
    let axis = dims.iter().position(|&d| d != 1)?;
    let d = dims[axis];
    (d > 0 && d.is_multiple_of(max)).then_some(RowAxis {
        axis,
        factor: d / max,
    })
}

/// Whether variable `v` occurs in `e` under a division or modulo.
fn under_div(e: &IndexExpr, v: Var) -> bool {
    // A division or modulo makes the index's bounds non-affine in the rows.
    fn walk(e: &IndexExpr, v: Var, inside: bool) -> bool {
        match e {
            IndexExpr::Var(x) => inside && *x == v,
            IndexExpr::Const(_) | IndexExpr::Dynamic { .. } => false,
            IndexExpr::Sum(ts) => ts.iter().any(|t| walk(t, v, inside)),
            IndexExpr::Mul(a, _) => walk(a, v, inside),
            IndexExpr::FloorDiv(a, _) | IndexExpr::Mod(a, _) => walk(a, v, true),
        }
    }
    walk(e, v, false)
}

impl Rows {
    /// The row axes of `p` at `max` rows, given those of its inputs and outputs
    /// (`Some(axis)` for one that carries rows), or why `p` is not a row program.
    pub fn derive(
        p: &Program,
        name: &str,
        max: usize,
        inputs: &[Option<usize>],
        outputs: &[Option<usize>],
    ) -> Result<Rows, String> {
        if max == 0 {
            return Err("a row program has at least one row".into());
        }
        let mut buffers: Vec<Option<RowAxis>> = vec![None; p.buffers.len()];
        let given = |b: &Buffer| -> Result<Option<RowAxis>, String> {
            let axis = match b.kind {
                BufferKind::Input(i) => inputs.get(i).copied().flatten(),
                BufferKind::Output(o) => outputs.get(o).copied().flatten(),
                _ => return Ok(None),
            };
            let Some(axis) = axis else { return Ok(None) };
            match leading_rows(&b.ty.shape, max) {
                Some(r) if r.axis == axis => Ok(Some(r)),
                _ => Err(format!(
                    "{} ({}) does not lead with {max} rows on axis {axis}",
                    b.id, b.name
                )),
            }
        };
        for b in &p.buffers {
            if matches!(b.kind, BufferKind::Input(_)) {
                buffers[b.id.index()] = given(b)?;
            }
        }
        let mut kernels = Vec::with_capacity(p.kernels.len());
        for k in &p.kernels {
            let mut reads_rows = false;
            for stage in &k.stages {
                for node in &stage.body().nodes {
                    if let ExprOp::Load(l) = &node.op {
                        reads_rows |= buffers[l.buffer.index()].is_some();
                    }
                }
            }
            if let Some(g) = &k.gemm {
                reads_rows |= buffers[g.lhs.buffer.index()].is_some();
                reads_rows |= buffers[g.rhs.buffer.index()].is_some();
            }
            let written: Vec<&Buffer> = k
                .stages
                .iter()
                .flat_map(|s| s.stores())
                .map(|s| &p.buffers[s.buffer.index()])
                .collect();
            let mut writes_row_output = false;
            for b in &written {
                writes_row_output |= given(b)?.is_some();
            }
            if !reads_rows && !writes_row_output {
                kernels.push(None);
                continue;
            }
            let row = leading_rows(&k.domain, max).ok_or_else(|| {
                format!(
                    "kernel {} reads rows but its domain {:?} does not lead with {max} of them",
                    k.name, k.domain
                )
            })?;
            for b in written {
                let axis = match b.kind {
                    BufferKind::Scratch => continue,
                    BufferKind::Output(_) => given(b)?,
                    _ => leading_rows(&b.ty.shape, max),
                };
                match axis {
                    Some(a) => buffers[b.id.index()] = Some(a),
                    None => {
                        return Err(format!(
                            "kernel {} reads rows but writes {} ({}), which has none: \
                             it reduces across rows",
                            k.name, b.id, b.name
                        ))
                    }
                }
            }
            kernels.push(Some(row));
        }
        for b in &p.buffers {
            if let BufferKind::Output(_) = b.kind {
                if given(b)?.is_some() && buffers[b.id.index()].is_none() {
                    return Err(format!("{} ({}) is never written by rows", b.id, b.name));
                }
            }
        }
        let rows = Rows {
            name: name.to_string(),
            max,
            buffers,
            kernels,
        };
        rows.check(p)?;
        Ok(rows)
    }

    /// Proves that `p` runs correctly at every row count from 1 to `max` (see the
    /// [module docs](self)), or says which kernel and access it cannot prove.
    pub fn check(&self, p: &Program) -> Result<(), String> {
        if self.buffers.len() != p.buffers.len() || self.kernels.len() != p.kernels.len() {
            return Err("the row axes do not match the program".into());
        }
        for (b, r) in p.buffers.iter().zip(&self.buffers) {
            if let Some(r) = r {
                if leading_rows(&b.ty.shape, self.max) != Some(*r) {
                    return Err(format!("{} does not lead with its rows", b.id));
                }
            }
        }
        for (k, r) in p.kernels.iter().zip(&self.kernels) {
            let Some(r) = r else {
                // Nothing of a static kernel may depend on rows.
                let reads_rows = k.reads.iter().chain(&k.writes).any(|a| {
                    self.buffers
                        .get(a.buffer.index())
                        .is_some_and(|x| x.is_some())
                });
                if reads_rows {
                    return Err(format!(
                        "kernel {} touches rows but has no row axis",
                        k.name
                    ));
                }
                continue;
            };
            if leading_rows(&k.domain, self.max) != Some(*r) {
                return Err(format!("kernel {} does not lead with its rows", k.name));
            }
            self.check_kernel(p, k, *r)?;
        }
        Ok(())
    }

    fn check_kernel(&self, p: &Program, k: &Kernel, r: RowAxis) -> Result<(), String> {
        let v = Var::outer(r.axis);
        let fail = |what: &str| Err(format!("kernel {}: {what}", k.name));
        // The same point computes the same values (guards, index values) in a run of
        // any count; what differs is which points run and how long the row buffers are,
        // so the accesses are what must be proved.
        if let Some(g) = &k.gemm {
            let m_rows = g.m.is_multiple_of(self.max)
                && g.outer_axes.get(g.batch.len()) == Some(&Some(r.axis));
            if !m_rows || g.batch.iter().any(|&b| b != 1) {
                return fail("a GEMM whose rows are not its m");
            }
            if self.buffers[g.rhs.buffer.index()].is_some() {
                return fail("a GEMM whose right operand has rows");
            }
        }
        let at = |rows: usize, stage: &Stage| {
            let mut outer = k.domain.clone();
            outer[r.axis] = r.factor * rows;
            stage.extents(&outer)
        };
        let numel = |b: &Buffer, rows: usize| -> i128 {
            let mut n: i128 = 1;
            for (i, &d) in b.ty.shape.iter().enumerate() {
                let d = match self.buffers[b.id.index()] {
                    Some(x) if x.axis == i => x.factor * rows,
                    _ => d,
                };
                n *= d as i128;
            }
            n
        };
        let in_bounds =
            |index: &IndexExpr, b: &Buffer, ext: &Extents, rows: usize| match index.range(ext) {
                Some((lo, hi)) => lo >= 0 && (hi as i128) < numel(b, rows),
                None => false,
            };
        for stage in &k.stages {
            let (one, max) = (at(1, stage), at(self.max, stage));
            let access = |index: &IndexExpr, buf: usize| -> Result<(), String> {
                let b: &Buffer = &p.buffers[buf];
                let rowed = self.buffers[b.id.index()].is_some();
                if rowed && under_div(index, v) {
                    return Err(format!(
                        "kernel {}: {} indexes rows through a division ({index})",
                        k.name, b.id
                    ));
                }
                let ok = if rowed {
                    in_bounds(index, b, &one, 1) && in_bounds(index, b, &max, self.max)
                } else {
                    b.kind == BufferKind::Scratch || in_bounds(index, b, &max, self.max)
                };
                if !ok {
                    return Err(format!(
                        "kernel {}: {index} may leave {} at some row count",
                        k.name, b.id
                    ));
                }
                Ok(())
            };
            for node in &stage.body().nodes {
                if let ExprOp::Load(l) = &node.op {
                    access(&l.index, l.buffer.index())?;
                }
            }
            for s in stage.stores() {
                access(&s.index, s.buffer.index())?;
            }
        }
        Ok(())
    }

    /// The row axis of buffer `b`'s type, if it has one.
    pub fn buffer(&self, b: super::BufferId) -> Option<RowAxis> {
        self.buffers.get(b.index()).copied().flatten()
    }

    /// Elements of buffer `b` at `rows` rows.
    pub fn numel(&self, b: &Buffer, rows: usize) -> usize {
        match self.buffer(b.id) {
            Some(_) => b.ty.numel() / self.max * rows,
            None => b.ty.numel(),
        }
    }

    /// Outer points of kernel `k` (whose domain has `points` points at `max` rows) at
    /// `rows` rows.
    pub fn points(&self, k: usize, points: usize, rows: usize) -> usize {
        match self.kernels.get(k).copied().flatten() {
            Some(_) => points / self.max * rows,
            None => points,
        }
    }
}

impl RowProgram {
    /// The static program at `rows` rows (1 to `max`): every row extent scaled.
    pub fn at(&self, rows: usize) -> Program {
        let mut p = self.program.clone();
        let rs = &self.rows;
        for (b, r) in p.buffers.iter_mut().zip(&rs.buffers) {
            if let Some(r) = r {
                b.ty.shape[r.axis] = r.factor * rows;
            }
        }
        for (k, r) in p.kernels.iter_mut().zip(&rs.kernels) {
            if let Some(r) = r {
                k.domain[r.axis] = r.factor * rows;
                if let Some(g) = &mut k.gemm {
                    g.m = g.m / rs.max * rows;
                }
            }
        }
        let buffers = p.buffers.clone();
        for k in &mut p.kernels {
            let (reads, writes) = k.compute_accesses(&buffers);
            k.reads = reads;
            k.writes = writes;
        }
        p
    }

    /// Verifies the program and proves its row axes ([`Rows::check`]).
    pub fn verify(&self) -> crate::Result<()> {
        self.program.verify()?;
        self.rows
            .check(&self.program)
            .map_err(|m| crate::Error::InvalidProgram(format!("rows {}: {m}", self.rows.name)))
    }
}

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |axes: &[Option<RowAxis>], prefix: &str| -> String {
            axes.iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let r = (*r)?;
                    Some(if r.factor == 1 {
                        format!("{prefix}{i}[{}]", r.axis)
                    } else {
                        format!("{prefix}{i}[{}]*{}", r.axis, r.factor)
                    })
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        write!(
            f,
            "rows {} in 1..={}: {}; {}",
            self.name,
            self.max,
            list(&self.buffers, "buf"),
            list(&self.kernels, "k")
        )
    }
}

/// The program's text with its `rows` line after the `program` line.
impl fmt::Display for RowProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.program.to_string();
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        writeln!(f, "{first}")?;
        writeln!(f, "  {}", self.rows)?;
        write!(f, "{rest}")
    }
}

/// Reads what [`RowProgram`]'s `Display` writes: a program whose second line is
/// `rows NAME in 1..=MAX: bufI[AXIS](*FACTOR).. ; kI[AXIS](*FACTOR)..`. The row axes
/// are checked ([`Rows::check`]) after the program is read and verified.
pub fn parse_row_program(file: &str, text: &str) -> Result<RowProgram, crate::text::Diagnostic> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("rows "));
    let located = |line: usize, message: String| {
        crate::text::Diagnostic::on_line(file, line + 1, 1, message, lines_of(text, line), 0)
    };
    let Some(at) = at else {
        return Err(located(0, "expected a `rows` line after `program`".into()));
    };
    let spec = lines[at].trim();
    let rows = parse_rows_line(spec).map_err(|m| located(at, m))?;
    lines[at] = "";
    let program = super::parse_program(file, &lines.join("\n"))?;
    let rows = Rows {
        buffers: expand(&rows.buffers, program.buffers.len()),
        kernels: expand(&rows.kernels, program.kernels.len()),
        ..rows
    };
    rows.check(&program).map_err(|m| located(at, m))?;
    Ok(RowProgram { program, rows })
}

fn lines_of(text: &str, line: usize) -> &str {
    text.lines().nth(line).unwrap_or("")
}

/// A list read from the `rows` line, one entry per buffer or kernel (a longer one
/// names one that does not exist, which [`Rows::check`] reports).
fn expand(list: &[Option<RowAxis>], n: usize) -> Vec<Option<RowAxis>> {
    let mut out = list.to_vec();
    if out.len() < n {
        out.resize(n, None);
    }
    out
}

fn parse_rows_line(spec: &str) -> Result<Rows, String> {
    let body = spec.strip_prefix("rows ").ok_or("expected `rows`")?;
    let (head, axes) = body
        .split_once(':')
        .ok_or("expected `:` after the row count")?;
    let (name, range) = head
        .split_once(" in 1..=")
        .ok_or("expected `NAME in 1..=MAX`")?;
    let max: usize = range
        .trim()
        .parse()
        .map_err(|_| format!("`{}` is not a row count", range.trim()))?;
    let (bufs, kernels) = axes
        .split_once(';')
        .ok_or("expected `;` between buffers and kernels")?;
    let entries = |text: &str, prefix: &str| -> Result<Vec<Option<RowAxis>>, String> {
        let mut out: Vec<Option<RowAxis>> = Vec::new();
        for word in text.split_whitespace() {
            let bad = || format!("`{word}` is not `{prefix}N[AXIS]` or `{prefix}N[AXIS]*FACTOR`");
            let rest = word.strip_prefix(prefix).ok_or_else(bad)?;
            let (id, rest) = rest.split_once('[').ok_or_else(bad)?;
            let (axis, rest) = rest.split_once(']').ok_or_else(bad)?;
            let factor = match rest.strip_prefix('*') {
                Some(f) => f.parse().map_err(|_| bad())?,
                None if rest.is_empty() => 1,
                None => return Err(bad()),
            };
            let id: usize = id.parse().map_err(|_| bad())?;
            let axis: usize = axis.parse().map_err(|_| bad())?;
            if id >= 1 << 24 || factor == 0 {
                return Err(bad());
            }
            if out.len() <= id {
                out.resize(id + 1, None);
            }
            out[id] = Some(RowAxis { axis, factor });
        }
        Ok(out)
    };
    Ok(Rows {
        name: name.trim().to_string(),
        max,
        buffers: entries(bufs, "buf")?,
        kernels: entries(kernels, "k")?,
    })
}

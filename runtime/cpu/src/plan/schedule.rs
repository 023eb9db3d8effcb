//! What the plan decides besides the loop IR: how each planned kernel runs.
//!
//! A [`CpuPlan`] is the planned program (complete loop IR: it verifies and the
//! evaluator runs it to the same results as the program it came from) and one
//! [`KernelPlan`] per planned kernel. For generated code the [`Schedule`] holds the
//! decisions the emitter translates: whether outer points may run on threads, how each
//! stage's loops run (vector or scalar, and why), lanes across the outer domain, the
//! stack scratch of stashed values. Its `Display` prints the planned program with the
//! schedule as `#` annotations under each kernel's header.

use super::lanes::OuterLanes;
use super::stage::{StagePlan, StageReport};
use super::wide::WideCall;
use crate::stencil::Stencil;
use ferrite_ir::loops::{BufferId, GemmOperand, Program};
use ferrite_ir::DType;
use std::fmt;

/// A planned program and how each of its kernels runs.
#[derive(Clone, Debug)]
pub struct CpuPlan {
    /// The planned loop IR.
    pub program: Program,
    /// One entry per kernel of `program`, in order.
    pub kernels: Vec<KernelPlan>,
}

/// How one planned kernel runs.
#[derive(Clone, Debug)]
pub struct KernelPlan {
    /// The kernel of the input program it comes from (a GEMM kernel becomes two).
    pub source: usize,
    /// Generated code, the extern GEMM, or nothing.
    pub run: Run,
}

/// What runs a planned kernel.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Run {
    /// Code generated from the kernel's loop IR, scheduled so.
    Generated(Schedule),
    /// The extern GEMM computes the kernel: its reduction stage and the store of the
    /// product.
    ExternGemm(ExternGemm),
    /// The direct stencil loop computes the kernel (a sum of shifted rows stored at
    /// each point's element; see [`crate::stencil`]).
    ExternStencil(Stencil),
    /// A pad kernel that the next kernel's stencil reads through
    /// ([`Stencil::through`]): nothing runs.
    Absorbed,
    /// A kernel over an empty domain: nothing runs.
    Nothing,
}

/// The matrix product of a planned GEMM kernel, for [`crate::gemm`].
#[derive(Clone, Debug, PartialEq)]
pub struct ExternGemm {
    /// Element type of the operands and the product (`f32` or `f16`).
    pub dtype: DType,
    /// Extents of the batch axes.
    pub batch: Vec<usize>,
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// The contracted extent.
    pub k: usize,
    /// The `[batch.., m, k]` operand.
    pub lhs: GemmOperand,
    /// The `[batch.., k, n]` operand.
    pub rhs: GemmOperand,
    /// Where the dense `[batch.., m, n]` product is written.
    pub product: BufferId,
    /// Whether `product` is a temporary the plan added (else the kernel's own output,
    /// which the epilogue, if any, then updates in place).
    pub temporary: bool,
    /// Whether the epilogue (the next planned kernel) runs on each block of rows of the
    /// product as soon as the GEMM has computed it, while the block is in cache, rather
    /// than over the whole product after it (see `gemm-blocks` in `plan/mod.rs`).
    pub epilogue_per_rows: bool,
}

/// How a generated kernel runs.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// Distinct outer points write distinct elements, so ranges of the outer domain may
    /// run on different threads (and tiles and lanes may reorder the points).
    pub parallel: bool,
    /// Lanes across the last outer axis, when the inner loops stride.
    pub lanes: Option<OuterLanes>,
    /// How each stage runs at one outer point (for a pointwise kernel, along one row).
    /// Empty for a kernel over an empty domain, which runs nothing.
    pub stages: Vec<StagePlan>,
    /// The stack slots of the kernel's scratch buffers, in order.
    pub scratch: Vec<ScratchSlot>,
    /// The rewrites made before emission (tiles, stashes, wide calls), one line each.
    pub notes: Vec<String>,
    /// Per stage, when it is a call of a wide routine (see `wide.rs`); empty when no
    /// stage is.
    pub wide: Vec<Option<WideCall>>,
}

/// A scratch buffer placed in the kernel's stack frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchSlot {
    /// The scratch buffer.
    pub buffer: BufferId,
    /// The slot's size: the buffer's, or the room lanes steps need for every lane.
    pub bytes: usize,
}

impl Schedule {
    /// The stage reports of what runs the bulk of the kernel: the lanes steps when
    /// there are lanes, else the stages themselves.
    pub fn reports(&self) -> Vec<StageReport> {
        match &self.lanes {
            Some(l) => l.plans.iter().map(|s| s.report.clone()).collect(),
            None => self.stages.iter().map(|s| s.report.clone()).collect(),
        }
    }

    /// The schedule as annotation lines (without the `# `).
    fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.push(if self.parallel {
            "parallel".to_string()
        } else {
            "runs on one thread (outer points may write the same elements)".to_string()
        });
        lines.extend(self.notes.iter().cloned());
        for s in self.reports() {
            lines.push(s.to_string());
        }
        if let Some(l) = &self.lanes {
            for (scalar, lanes) in l.stash.iter().flat_map(|ls| &ls.scratch) {
                lines.push(format!(
                    "lanes steps keep {scalar} as {} (lane l of point p at p*{} + l)",
                    lanes.id,
                    4 * l.unroll
                ));
            }
            lines.push(format!(
                "points that do not fill a group of {} run one at a time:",
                4 * l.unroll
            ));
            for s in &self.stages {
                lines.push(format!("  {}", s.report));
            }
        }
        for s in &self.scratch {
            lines.push(format!("{} in a {}-byte stack slot", s.buffer, s.bytes));
        }
        lines
    }
}

impl ExternGemm {
    /// The report line (`extern gemm f32 batch [] m 64 n 256 k 128 into buf3`).
    pub fn describe(&self) -> String {
        format!(
            "extern gemm {} batch {:?} m {} n {} k {} into {}{}{}",
            self.dtype,
            self.batch,
            self.m,
            self.n,
            self.k,
            self.product,
            if self.temporary { " (temporary)" } else { "" },
            if self.epilogue_per_rows {
                ", epilogue per block of rows"
            } else {
                ""
            }
        )
    }
}

impl fmt::Display for CpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.program;
        let text = p.to_string();
        // The program's header (name and buffers) as the printer writes it.
        let header_end = text.find("\n\n").map_or(text.len(), |i| i + 1);
        f.write_str(&text[..header_end])?;
        for (k, plan) in p.kernels.iter().zip(&self.kernels) {
            writeln!(f)?;
            let kernel = p.display_kernel(k).to_string();
            let (first, rest) = kernel.split_once('\n').unwrap_or((&kernel, ""));
            writeln!(f, "{first}")?;
            let lines = match &plan.run {
                Run::Generated(s) => s.lines(),
                Run::ExternGemm(g) => vec![g.describe()],
                Run::ExternStencil(st) => vec![format!(
                    "{}{}",
                    st.describe(),
                    if st.epilogue_per_rows {
                        ", epilogue per block of rows"
                    } else {
                        ""
                    }
                )],
                Run::Absorbed => {
                    vec!["not run: the next kernel's stencil reads through this pad".to_string()]
                }
                Run::Nothing => vec!["empty domain: nothing runs".to_string()],
            };
            for line in lines {
                writeln!(f, "  # {line}")?;
            }
            if let Run::Generated(Schedule {
                lanes: Some(OuterLanes {
                    stash: Some(ls), ..
                }),
                ..
            }) = &plan.run
            {
                // The form lanes steps run, whose stash rows hold every lane of a group.
                writeln!(f, "  # lanes steps run:")?;
                let form = p.display_kernel(&ls.kernel).to_string();
                for line in form.lines().skip(1) {
                    writeln!(f, "  # {}", line.strip_prefix("  ").unwrap_or(line))?;
                }
            }
            f.write_str(rest)?;
        }
        Ok(())
    }
}

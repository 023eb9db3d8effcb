//! Why a group of scheduled nodes cannot be one kernel, and how code generation fails.

use crate::error::Error;
use ferrite_ir::ValueId;

/// Why a group of nodes cannot be one kernel: a rule name and the particulars.
#[derive(Clone, PartialEq, Debug)]
pub struct Refusal {
    /// The rule, in kebab case (`reduction-domains-differ`).
    pub rule: &'static str,
    /// What exactly violated it.
    pub detail: String,
    /// A value whose materialization would make the group possible, when there is one.
    pub culprit: Option<ValueId>,
}

impl Refusal {
    pub(super) fn new(rule: &'static str, detail: String) -> Refusal {
        Refusal {
            rule,
            detail,
            culprit: None,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// Failure of code generation for a group.
#[derive(Debug)]
pub enum LowerError {
    /// The group is legal as nodes but cannot be one kernel.
    Refused(Refusal),
    /// Lowering failed: the graph holds a value that does not fit its dtype, or a bug.
    Failed(Error),
}

impl From<Refusal> for LowerError {
    fn from(r: Refusal) -> LowerError {
        LowerError::Refused(r)
    }
}

impl From<Error> for LowerError {
    fn from(e: Error) -> LowerError {
        LowerError::Failed(e)
    }
}

//! The entity ids of the loop IR: `u32` newtypes whose `Display` is their text syntax
//! (`buf3`, `k3`, `acc3`, `t3`). They live apart from the structures that use them so
//! that expressions, index expressions and programs need not import one another in a
//! circle.

use std::fmt;

/// A buffer of a [`Program`](super::Program); prints as `buf3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct BufferId(pub u32);

impl BufferId {
    /// The index into [`Program::buffers`](super::Program::buffers).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buf{}", self.0)
    }
}

/// A kernel of a [`Program`](super::Program); prints as `k3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct KernelId(pub u32);

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "k{}", self.0)
    }
}

/// A reduction accumulator of a kernel; prints as `acc3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct AccId(pub u32);

impl fmt::Display for AccId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "acc{}", self.0)
    }
}

/// A reference to a node of the enclosing [`Block`](super::Block); prints as `t3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ExprRef(pub u32);

impl ExprRef {
    /// The index into [`Block::nodes`](super::Block::nodes).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ExprRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

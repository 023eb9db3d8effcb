//! [`Partitioned`]: a joint forward + backward graph split by the min-cut partitioner
//! ([`ferrite_passes::partition`]) and compiled as two programs, as AOTAutograd hands
//! a forward and a backward graph to its compiler: the forward returns the outputs and
//! the saved values, the backward takes them (and the inputs it reads) and returns the
//! gradients.

use super::compile::{compile_ir, Compiled, Options};
use super::error::{Error, Result};
use super::host::Tensor;
use ferrite_passes::partition::{partition_with, Partition, Policy};
use std::borrow::Borrow;

/// A joint graph's forward and backward programs.
pub struct Partitioned {
    forward: Compiled,
    backward: Compiled,
    partition: Partition,
    forward_outputs: usize,
    inputs: usize,
}

impl Partitioned {
    /// Splits `joint` (from [`ferrite_passes::autodiff::grad`] or `vjp`), whose first
    /// `forward_outputs` outputs are the forward's, with the min-cut policy, and compiles
    /// both halves with `options`.
    pub fn new(
        joint: &ferrite_ir::Graph,
        forward_outputs: usize,
        options: &Options,
    ) -> Result<Self> {
        Partitioned::with_policy(joint, forward_outputs, Policy::MinCut, options)
    }

    /// [`Partitioned::new`] under `policy` (the naive one saves everything the backward
    /// reads and recomputes nothing).
    pub fn with_policy(
        joint: &ferrite_ir::Graph,
        forward_outputs: usize,
        policy: Policy,
        options: &Options,
    ) -> Result<Self> {
        let partition =
            partition_with(joint, forward_outputs, policy).map_err(|e| match e.is_internal() {
                true => Error::Internal {
                    message: e.to_string(),
                },
                false => Error::InvalidGraph {
                    message: e.to_string(),
                },
            })?;
        Ok(Partitioned {
            forward: compile_ir(&partition.forward, options)?,
            backward: compile_ir(&partition.backward, options)?,
            partition,
            forward_outputs,
            inputs: joint.params.len(),
        })
    }

    /// Runs the forward half on the joint graph's inputs: its outputs, and the values
    /// saved for [`Partitioned::backward`].
    pub fn forward<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        self.check(inputs.len())?;
        let picked: Vec<&Tensor> = self
            .partition
            .forward_inputs
            .iter()
            .map(|&i| inputs[i].borrow())
            .collect();
        let mut outputs = self.forward.run(&picked)?;
        let saved = outputs.split_off(self.forward_outputs);
        Ok((outputs, saved))
    }

    /// Runs the backward half on the saved values and the joint graph's inputs (of which
    /// it reads the cotangents and the parameters it needs): the joint graph's outputs
    /// after the forward ones.
    pub fn backward<A: Borrow<Tensor>>(
        &self,
        saved: &[Tensor],
        inputs: &[A],
    ) -> Result<Vec<Tensor>> {
        self.check(inputs.len())?;
        if saved.len() != self.partition.saved.len() {
            return Err(Error::InputCount {
                expected: self.partition.saved.len(),
                got: saved.len(),
            });
        }
        let mut picked: Vec<&Tensor> = saved.iter().collect();
        picked.extend(
            self.partition
                .backward_inputs
                .iter()
                .map(|&i| inputs[i].borrow()),
        );
        self.backward.run(&picked)
    }

    /// Forward then backward: the joint graph's outputs.
    pub fn run<A: Borrow<Tensor>>(&self, inputs: &[A]) -> Result<Vec<Tensor>> {
        let (mut outputs, saved) = self.forward(inputs)?;
        outputs.extend(self.backward(&saved, inputs)?);
        Ok(outputs)
    }

    /// The partition: both graphs, what is saved and recomputed, and the report.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// The compiled forward half.
    pub fn forward_program(&self) -> &Compiled {
        &self.forward
    }

    /// The compiled backward half.
    pub fn backward_program(&self) -> &Compiled {
        &self.backward
    }

    fn check(&self, got: usize) -> Result<()> {
        match got == self.inputs {
            true => Ok(()),
            false => Err(Error::InputCount {
                expected: self.inputs,
                got,
            }),
        }
    }
}

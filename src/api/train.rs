//! [`TrainStep`]: a training step (forward, backward, optimizer update) compiled once as
//! one program ([`ferrite_passes::train::train_step`]) and run many times, the trained
//! parameters and the optimizer's state kept between steps.

use super::compile::{compile_ir, Compiled, Options};
use super::error::{Error, Result};
use super::host::Tensor;
use super::profile::ScheduleProfile;
pub use ferrite_passes::train::Optimizer;

/// A compiled training step. Each [`TrainStep::step`] runs forward, backward and the
/// update on one batch, and keeps the new parameters and optimizer state for the next.
/// On the CPU the new values are written into buffers kept between steps (two sets,
/// swapped), so a warm step allocates no tensors.
pub struct TrainStep {
    exe: Compiled,
    /// Positions, among the graph's parameters, of the trained ones and of the data.
    trained: Vec<usize>,
    data: Vec<usize>,
    /// The graph's parameter count (the state follows).
    graph_params: usize,
    /// Current values: every input of the step program (data slots hold zero placeholders).
    inputs: Vec<Tensor>,
    /// Output buffers of the next step.
    outputs: Vec<Tensor>,
    steps: u64,
}

impl TrainStep {
    /// Compiles the training step of `graph` (whose output `loss` is a float scalar) for
    /// the parameters named in `trained`, starting from `init` (one tensor per trained
    /// parameter, in the order of `trained`), with `optimizer`, on `options`' target.
    pub fn new(
        graph: &ferrite_ir::Graph,
        loss: usize,
        trained: &[&str],
        init: Vec<Tensor>,
        optimizer: &Optimizer,
        options: &Options,
    ) -> Result<TrainStep> {
        TrainStep::with_groups(graph, loss, &[(trained, optimizer.clone())], init, options)
    }

    /// [`TrainStep::new`] with one optimizer per group of parameters (PyTorch's parameter
    /// groups); `init` holds one tensor per trained parameter, the groups' in order.
    pub fn with_groups(
        graph: &ferrite_ir::Graph,
        loss: usize,
        groups: &[(&[&str], Optimizer)],
        init: Vec<Tensor>,
        options: &Options,
    ) -> Result<TrainStep> {
        TrainStep::with_sparse(graph, loss, groups, &[], init, options)
    }

    /// [`TrainStep::with_groups`], with the trained tables named in `row_sparse` (2-D
    /// parameters that only `embedding_bag`s read) updated from row-sparse gradients:
    /// only the rows a batch touches change, and the step makes no dense gradient of
    /// them ([`ferrite_passes::train::train_step_sparse`]).
    pub fn with_sparse(
        graph: &ferrite_ir::Graph,
        loss: usize,
        groups: &[(&[&str], Optimizer)],
        row_sparse: &[&str],
        init: Vec<Tensor>,
        options: &Options,
    ) -> Result<TrainStep> {
        let trained: Vec<&str> = groups.iter().flat_map(|(n, _)| n.iter().copied()).collect();
        let trained = &trained[..];
        let invalid = |message: String| Error::InvalidGraph { message };
        let mut ids = Vec::with_capacity(trained.len());
        let mut positions = Vec::with_capacity(trained.len());
        for name in trained {
            let v = graph
                .find(name)
                .ok_or_else(|| invalid(format!("the graph has no parameter `{name}`")))?;
            let pos = graph
                .params
                .iter()
                .position(|&p| p == v)
                .ok_or_else(|| invalid(format!("`{name}` is a value, not a parameter")))?;
            ids.push(v);
            positions.push(pos);
        }
        if init.len() != trained.len() {
            return Err(invalid(format!(
                "{} initial values for {} trained parameters",
                init.len(),
                trained.len()
            )));
        }
        for ((name, t), &v) in trained.iter().zip(&init).zip(&ids) {
            if t.ty() != graph.ty(v) {
                return Err(invalid(format!(
                    "the initial value of `{name}` is {}, the parameter is {}",
                    t.ty(),
                    graph.ty(v)
                )));
            }
        }
        let mut id_groups = Vec::with_capacity(groups.len());
        let mut at = 0;
        for (names, opt) in groups {
            id_groups.push((ids[at..at + names.len()].to_vec(), opt.clone()));
            at += names.len();
        }
        let mut sparse = Vec::with_capacity(row_sparse.len());
        for name in row_sparse {
            match trained.iter().position(|t| t == name) {
                Some(k) => sparse.push(ids[k]),
                None => return Err(invalid(format!("`{name}` is sparse but not trained"))),
            }
        }
        let step_graph = ferrite_passes::train::train_step_sparse(graph, loss, &id_groups, &sparse)
            .map_err(|e| match e.is_internal() {
                true => Error::Internal {
                    message: e.to_string(),
                },
                false => invalid(e.to_string()),
            })?;
        // Each new parameter and state value may be written in place of the old one (a
        // sparse table update then writes only the rows the batch touched).
        let graph_params = graph.params.len();
        let state = step_graph.params.len() - graph_params;
        let mut pairs: Vec<(usize, usize)> = positions
            .iter()
            .enumerate()
            .map(|(k, &p)| (p, 1 + k))
            .collect();
        pairs.extend((0..state).map(|s| (graph_params + s, 1 + positions.len() + s)));
        let exe = compile_ir(&step_graph, &options.clone().donate(pairs))?;
        let mut inputs: Vec<Tensor> = step_graph
            .params
            .iter()
            .map(|&p| Tensor::zeros(step_graph.ty(p)))
            .collect::<Result<_>>()?;
        for (&pos, t) in positions.iter().zip(init) {
            inputs[pos] = t;
        }
        let data = (0..graph_params)
            .filter(|i| !positions.contains(i))
            .collect();
        let outputs = exe.new_outputs();
        Ok(TrainStep {
            exe,
            trained: positions,
            data,
            graph_params,
            inputs,
            outputs,
            steps: 0,
        })
    }

    /// One step on `data` (the graph's untrained parameters, in their order); returns the
    /// loss before the update. Tables and states updated in place ([`Compiled::donated`])
    /// are left as the failing kernel found them when a step fails part-way (an index out
    /// of range in a later kernel), as an in-place PyTorch step would leave them.
    pub fn step(&mut self, data: &[Tensor]) -> Result<f64> {
        // A donated output starts as its input's value: swapped in, so nothing is copied
        // (the input's slot then holds the spare buffer, which the step does not read).
        for d in self.exe.donated() {
            std::mem::swap(&mut self.inputs[d.input], &mut self.outputs[d.output]);
        }
        let refs = step_inputs(&self.inputs, &self.data, data)?;
        let run = self.exe.run_into_donated(&refs, &mut self.outputs);
        if run.is_err() {
            // Back as they were: the step did not happen.
            for d in self.exe.donated() {
                std::mem::swap(&mut self.inputs[d.input], &mut self.outputs[d.output]);
            }
        }
        run?;
        let loss = self.outputs[0].to_f64_vec()[0];
        // Outputs: loss, new params, new state (in input order), step + 1.
        let n = self.trained.len();
        for (k, &pos) in self.trained.iter().enumerate() {
            std::mem::swap(&mut self.inputs[pos], &mut self.outputs[1 + k]);
        }
        let state = self.inputs.len() - self.graph_params;
        for s in 0..state {
            std::mem::swap(
                &mut self.inputs[self.graph_params + s],
                &mut self.outputs[1 + n + s],
            );
        }
        self.steps += 1;
        Ok(loss)
    }

    /// Kernel-by-kernel times of `runs` steps on `data` from the current values, which
    /// stay as they are (no step is taken): where a step's time goes.
    pub fn profile(&self, data: &[Tensor], runs: usize) -> Result<ScheduleProfile> {
        self.exe
            .profile(&step_inputs(&self.inputs, &self.data, data)?, runs)
    }

    /// The current value of each trained parameter, in the order given to [`TrainStep::new`].
    pub fn params(&self) -> Vec<&Tensor> {
        self.trained.iter().map(|&p| &self.inputs[p]).collect()
    }

    /// The steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The compiled step program (its graph is the training-step graph).
    pub fn compiled(&self) -> &Compiled {
        &self.exe
    }
}

/// Every input of the step program: the current values `inputs`, with `data` in the slots
/// at `positions` (borrowed: the batch is read in place, never copied).
fn step_inputs<'a>(
    inputs: &'a [Tensor],
    positions: &[usize],
    data: &'a [Tensor],
) -> Result<Vec<&'a Tensor>> {
    if data.len() != positions.len() {
        return Err(Error::InputCount {
            expected: positions.len(),
            got: data.len(),
        });
    }
    let mut refs: Vec<&Tensor> = inputs.iter().collect();
    for (&pos, t) in positions.iter().zip(data) {
        refs[pos] = t;
    }
    Ok(refs)
}

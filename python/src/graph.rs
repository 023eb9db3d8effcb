//! `ferrite.Graph` and `ferrite.Var`: graphs loaded from files, and the builder.
//!
//! The builder is the library's ([`ferrite::Graph`], [`ferrite::Var`]), whose ops do not
//! fail but poison their result and record the error in the graph. Python can raise at
//! the op, as PyTorch does, so every op here checks its result and raises
//! [`BuildError`] at once, located at the Python line that called it (the library's
//! own location would be this file). The graph keeps that first error: compiling it
//! raises the same error again.

use crate::convert::{dtype_name, parse_dtype, shape_tuple, to_tensor};
use crate::errors::{to_py, BuildError, InternalError};
use ferrite::ir::op::Scalar;
use ferrite::{DType, Operand, TensorType};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PySlice, PyTuple};
use std::sync::{Arc, Mutex};

/// What a `ferrite.Graph` holds.
pub enum Kind {
    /// Built op by op from Python.
    Builder(ferrite::Graph),
    /// Loaded from a `.fg` or `.onnx` file (immutable).
    Loaded(Arc<ferrite::ir::Graph>),
}

/// The names of an ONNX model's inputs and outputs, next to Ferrite's.
#[derive(Clone, Default)]
pub struct Names {
    /// `(ONNX name, graph name)` of each input, in order.
    pub inputs: Vec<(String, String)>,
    /// The ONNX name of each output, in order.
    pub outputs: Vec<String>,
}

/// A tensor graph: loaded with `ferrite.load(path)`, or built with
/// `ferrite.Graph(name)`, `graph.input(...)`, ops on `Var`s and `graph.output(...)`.
///
/// `str(graph)` is its `.fg` text.
#[pyclass(module = "ferrite._ferrite", name = "Graph", frozen)]
pub struct PyGraph {
    pub kind: Kind,
    /// ONNX names, for a graph imported from a model.
    pub names: Option<Names>,
    /// The first build error, as raised in Python (located at the Python line).
    error: Mutex<Option<String>>,
    /// A builder's inputs so far, by name (the library's builder has no names until
    /// it has outputs).
    declared: Mutex<Vec<(String, TensorType)>>,
}

impl PyGraph {
    pub fn loaded(graph: ferrite::ir::Graph, names: Option<Names>) -> PyGraph {
        PyGraph {
            kind: Kind::Loaded(Arc::new(graph)),
            names,
            error: Mutex::new(None),
            declared: Mutex::new(Vec::new()),
        }
    }

    /// The graph as IR, ready to compile; a builder's first error, as raised.
    pub fn to_ir(&self) -> PyResult<Arc<ferrite::ir::Graph>> {
        match &self.kind {
            Kind::Loaded(g) => Ok(g.clone()),
            Kind::Builder(b) => {
                if let Some(message) = self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
                {
                    return Err(BuildError::new_err(message));
                }
                b.to_ir().map(Arc::new).map_err(to_py)
            }
        }
    }

    fn builder(&self, what: &str) -> PyResult<&ferrite::Graph> {
        match &self.kind {
            Kind::Builder(b) => Ok(b),
            Kind::Loaded(_) => Err(BuildError::new_err(format!(
                "{what}: this graph was loaded from a file and cannot be changed; build one with ferrite.Graph(name)"
            ))),
        }
    }

    /// Wraps a builder result, raising its error (located in Python) if it is poisoned.
    fn wrap(slf: &Py<PyGraph>, py: Python<'_>, var: ferrite::Var) -> PyResult<PyVar> {
        if var.is_valid() {
            return Ok(PyVar {
                var,
                graph: slf.clone_ref(py),
            });
        }
        Err(slf.get().recorded_error(py, Some(&var)))
    }

    /// The graph's first build error as a Python exception, located at the Python
    /// line that caused it; kept, so that `compile` raises the same.
    fn recorded_error(&self, py: Python<'_>, var: Option<&ferrite::Var>) -> PyErr {
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(message) = error.clone() {
            // An earlier op failed: the library recorded nothing new.
            return BuildError::new_err(message);
        }
        let cause = match &self.kind {
            Kind::Builder(b) => b.check().err(),
            Kind::Loaded(_) => None,
        };
        // An op on a poisoned var of another graph: that graph's error.
        let cause = cause.or_else(|| var.and_then(|v| v.graph().check().err()));
        let message = match cause {
            Some(ferrite::Error::Build {
                op,
                operands,
                message,
                location: _,
            }) => ferrite::Error::Build {
                op,
                operands,
                message,
                location: python_location(py),
            }
            .to_string(),
            Some(ferrite::Error::ForeignVar { op, .. }) => ferrite::Error::ForeignVar {
                op,
                location: python_location(py),
            }
            .to_string(),
            Some(e) => e.to_string(),
            None => return InternalError::new_err("a poisoned value without an error"),
        };
        *error = Some(message.clone());
        BuildError::new_err(message)
    }
}

/// `file:line:col` of the innermost Python frame outside the `ferrite` package (the
/// user's line that built the op).
fn python_location(py: Python<'_>) -> String {
    let locate = || -> PyResult<String> {
        let package = py
            .import("ferrite")
            .and_then(|m| m.getattr("__file__"))
            .and_then(|f| f.extract::<String>())
            .ok()
            .and_then(|f| {
                std::path::Path::new(&f)
                    .parent()
                    .map(|p| p.display().to_string())
            });
        let mut frame = py.import("sys")?.call_method1("_getframe", (0,))?;
        loop {
            let code = frame.getattr("f_code")?;
            let file: String = code.getattr("co_filename")?.extract()?;
            let inside = package.as_deref().is_some_and(|p| file.starts_with(p));
            let back = frame.getattr("f_back")?;
            if !inside || back.is_none() {
                let line: i64 = frame.getattr("f_lineno")?.extract()?;
                // Python 3.11+ has the column of the instruction.
                let col = frame
                    .getattr("f_lasti")
                    .and_then(|lasti| {
                        let i: usize = lasti.extract()?;
                        let positions: Vec<Bound<'_, PyAny>> = code
                            .call_method0("co_positions")?
                            .try_iter()?
                            .collect::<PyResult<_>>()?;
                        positions
                            .get(i / 2)
                            .map(|p| p.get_item(2)?.extract::<Option<i64>>())
                            .transpose()
                            .map(Option::flatten)
                    })
                    .ok()
                    .flatten();
                return Ok(match col {
                    Some(c) => format!("{file}:{line}:{}", c + 1),
                    None => format!("{file}:{line}"),
                });
            }
            frame = back;
        }
    };
    locate().unwrap_or_else(|_| "<python>".into())
}

#[pymethods]
impl PyGraph {
    /// An empty graph to build, named `name` (a valid identifier: it names the graph
    /// in `.fg` text and dumps).
    #[new]
    fn new(name: &str) -> PyGraph {
        PyGraph {
            kind: Kind::Builder(ferrite::Graph::new(name)),
            names: None,
            error: Mutex::new(None),
            declared: Mutex::new(Vec::new()),
        }
    }

    /// The graph's name.
    #[getter]
    fn name(&self) -> String {
        match &self.kind {
            Kind::Builder(b) => b.name(),
            Kind::Loaded(g) => g.name.clone(),
        }
    }

    /// The inputs (parameters), in order, as `(name, dtype, shape)`; an ONNX model's
    /// inputs under their ONNX names.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let pairs: Vec<(String, TensorType)> = match &self.kind {
            Kind::Builder(_) => self
                .declared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            Kind::Loaded(g) => param_names(g, self.names.as_ref())
                .into_iter()
                .zip(g.params.iter().map(|&p| g.ty(p).clone()))
                .collect(),
        };
        pairs
            .into_iter()
            .map(|(name, ty)| {
                Ok((name, dtype_name(ty.dtype), shape_tuple(py, &ty.shape)?)
                    .into_pyobject(py)?
                    .into_any())
            })
            .collect()
    }

    /// The outputs, in order, as `(name, dtype, shape)` (`output<i>` for an unnamed one).
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let g = self.to_ir()?;
        let names = output_names(&g, self.names.as_ref());
        g.outputs
            .iter()
            .zip(names)
            .map(|(&o, name)| {
                let ty = g.ty(o);
                Ok((name, dtype_name(ty.dtype), shape_tuple(py, &ty.shape)?)
                    .into_pyobject(py)?
                    .into_any())
            })
            .collect()
    }

    /// Declares an input named `name` of `dtype` (`"f32"`, `numpy.float32`, ...) and
    /// `shape`; inputs are passed to `run` in declaration order.
    fn input(
        slf: &Bound<'_, PyGraph>,
        name: &str,
        dtype: &Bound<'_, PyAny>,
        shape: Vec<usize>,
    ) -> PyResult<PyVar> {
        let dtype = parse_dtype(dtype)?;
        let ty = ferrite::tensor_type(dtype, &shape);
        let var = slf.get().builder("input")?.input(name, ty.clone());
        let var = PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)?;
        slf.get()
            .declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), ty));
        Ok(var)
    }

    /// A constant (a weight) named `name` holding a copy of `value` (a numpy array);
    /// the compiled program owns it, and `run` does not take it.
    fn constant(slf: &Bound<'_, PyGraph>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<PyVar> {
        let tensor = to_tensor(value, name)?;
        let var = slf.get().builder("constant")?.constant(name, &tensor);
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// A rank-0 constant: `f32` for a float, `i64` for an int, `bool` for a bool
    /// (next to a tensor, the Python scalar itself, `x * 2.0`, takes its dtype).
    fn scalar(slf: &Bound<'_, PyGraph>, value: &Bound<'_, PyAny>) -> PyResult<PyVar> {
        let b = slf.get().builder("scalar")?;
        let var = match scalar(value)? {
            Scalar::Float(v) => b.scalar(v),
            Scalar::Int(v) => b.scalar(v),
            Scalar::Bool(v) => b.scalar(v),
        };
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// A tensor of `shape` filled with `value`.
    #[pyo3(signature = (shape, value, dtype=None))]
    fn full(
        slf: &Bound<'_, PyGraph>,
        shape: Vec<i64>,
        value: f64,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVar> {
        let dtype = dtype.map(parse_dtype).transpose()?.unwrap_or(DType::F32);
        let var = slf.get().builder("full")?.full(shape, value, dtype);
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// Zeros of `shape`.
    #[pyo3(signature = (shape, dtype=None))]
    fn zeros(
        slf: &Bound<'_, PyGraph>,
        shape: Vec<i64>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVar> {
        let dtype = dtype.map(parse_dtype).transpose()?.unwrap_or(DType::F32);
        let var = slf.get().builder("zeros")?.zeros(shape, dtype);
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// Ones of `shape`.
    #[pyo3(signature = (shape, dtype=None))]
    fn ones(
        slf: &Bound<'_, PyGraph>,
        shape: Vec<i64>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVar> {
        let dtype = dtype.map(parse_dtype).transpose()?.unwrap_or(DType::F32);
        let var = slf.get().builder("ones")?.ones(shape, dtype);
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// `start, start + step, ...` below `end` (numpy's `arange`).
    #[pyo3(signature = (start, end, step=1.0, dtype=None))]
    fn arange(
        slf: &Bound<'_, PyGraph>,
        start: f64,
        end: f64,
        step: f64,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVar> {
        let dtype = dtype.map(parse_dtype).transpose()?.unwrap_or(DType::F32);
        let var = slf.get().builder("arange")?.arange(start, end, step, dtype);
        PyGraph::wrap(&slf.clone().unbind(), slf.py(), var)
    }

    /// Marks values as outputs, in order (`run` returns them in that order).
    #[pyo3(signature = (*values))]
    fn output(slf: &Bound<'_, PyGraph>, values: Vec<PyRef<'_, PyVar>>) -> PyResult<()> {
        let b = slf.get().builder("output")?;
        for v in &values {
            b.output(&v.var);
        }
        if values.is_empty() {
            return Err(BuildError::new_err("output() needs at least one value"));
        }
        // A value of another graph poisons this one: raise it here.
        match b.check() {
            Err(_) => Err(slf.get().recorded_error(slf.py(), None)),
            Ok(()) => Ok(()),
        }
    }

    /// Raises the graph's first build error, if any (`compile` does the same).
    fn check(&self) -> PyResult<()> {
        self.to_ir().map(|_| ())
    }

    /// The graph's `.fg` text (constants are named; `save` writes their data).
    fn to_fg(&self) -> PyResult<String> {
        Ok(ferrite::print(&*self.to_ir()?))
    }

    /// Writes the graph as `.fg` text to `path`, with its weights (constants of more
    /// than 16 elements) in a safetensors file beside it, as `ferrite convert` does.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let g = self.to_ir()?;
        py.detach(|| ferrite::save(&g, &path)).map_err(to_py)
    }

    /// The number of ops (nodes that are not inputs, literals or constants).
    #[getter]
    fn op_count(&self) -> PyResult<usize> {
        Ok(self.to_ir()?.op_count())
    }

    fn __str__(&self) -> PyResult<String> {
        self.to_fg()
    }

    fn __repr__(&self) -> String {
        let what = match &self.kind {
            Kind::Builder(_) => "built",
            Kind::Loaded(_) => "loaded",
        };
        format!("<ferrite.Graph {} ({what})>", self.name())
    }
}

/// The names `run` takes the inputs by: ONNX names for an imported model.
pub fn param_names(g: &ferrite::ir::Graph, names: Option<&Names>) -> Vec<String> {
    match names {
        Some(n) => n.inputs.iter().map(|(onnx, _)| onnx.clone()).collect(),
        None => g
            .params
            .iter()
            .enumerate()
            .map(|(i, &p)| g.node(p).name.clone().unwrap_or_else(|| format!("%{i}")))
            .collect(),
    }
}

/// Output names: ONNX names for an imported model, else the returned value's name,
/// `output<i>` for an unnamed one (as `ferrite run --out` names files).
pub fn output_names(g: &ferrite::ir::Graph, names: Option<&Names>) -> Vec<String> {
    match names {
        Some(n) => n.outputs.clone(),
        None => g
            .outputs
            .iter()
            .enumerate()
            .map(|(i, &o)| {
                g.node(o)
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("output{i}"))
            })
            .collect(),
    }
}

/// A Python scalar as a literal.
fn scalar(obj: &Bound<'_, PyAny>) -> PyResult<Scalar> {
    if obj.is_instance_of::<PyBool>() {
        Ok(Scalar::Bool(obj.extract()?))
    } else if obj.is_instance_of::<PyInt>() {
        Ok(Scalar::Int(obj.extract()?))
    } else if obj.is_instance_of::<PyFloat>() {
        Ok(Scalar::Float(obj.extract()?))
    } else {
        // numpy scalars.
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Scalar::Int(v));
        }
        obj.extract::<f64>().map(Scalar::Float).map_err(|_| {
            PyTypeError::new_err(format!(
                "expected a ferrite.Var or a number, got {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
    }
}

/// An operand: a `Var` or a Python number.
fn operand(obj: &Bound<'_, PyAny>) -> PyResult<Operand> {
    if let Ok(v) = obj.cast::<PyVar>() {
        return Ok(Operand::Var(v.get().var.clone()));
    }
    scalar(obj).map(Operand::Scalar)
}

/// Axes given as one int or a sequence of ints.
fn axes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    match obj.extract::<i64>() {
        Ok(a) => Ok(vec![a]),
        Err(_) => obj.extract(),
    }
}

/// A shape given as ints (`reshape(2, 3)`) or one sequence (`reshape((2, 3))`).
fn dims_arg(args: &Bound<'_, PyTuple>) -> PyResult<Vec<i64>> {
    if args.len() == 1 {
        if let Ok(v) = args.get_item(0)?.extract::<Vec<i64>>() {
            return Ok(v);
        }
    }
    args.extract()
}

/// A symbolic tensor: one value of a graph being built. It holds no data; ops and
/// operators (`+ - * / ** @ // %`, comparisons, `&`, `|`, `~`, indexing) record ops
/// and return new `Var`s. Python numbers beside a `Var` take its dtype, as in PyTorch.
/// An op that does not type-check raises `ferrite.BuildError` at once, located at
/// the calling line.
#[pyclass(module = "ferrite._ferrite", name = "Var", frozen)]
pub struct PyVar {
    var: ferrite::Var,
    graph: Py<PyGraph>,
}

impl PyVar {
    fn wrap(&self, py: Python<'_>, var: ferrite::Var) -> PyResult<PyVar> {
        PyGraph::wrap(&self.graph, py, var)
    }

    fn ty(&self) -> PyResult<TensorType> {
        self.var.ty().map_err(to_py)
    }

    fn other(&self, obj: &Bound<'_, PyAny>) -> PyResult<ferrite::Var> {
        Ok(obj.cast::<PyVar>()?.get().var.clone())
    }

    /// `scalar op self` for the ops the library has no scalar-on-the-left form of:
    /// the scalar as a tensor of this one's shape and dtype (a float beside an
    /// integer tensor makes the pair `f32`, as promotion would).
    fn scalar_left(&self, obj: &Bound<'_, PyAny>) -> PyResult<ferrite::Var> {
        let s = scalar(obj)?;
        let base = match (s, self.var.dtype()) {
            (Scalar::Float(_), d) if !d.is_float() => self.var.cast(DType::F32),
            _ => self.var.clone(),
        };
        Ok(base.full_like(match s {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(v) => f64::from(u8::from(v)),
        }))
    }
}

macro_rules! var_methods {
    (
        unary: [$($(#[doc = $udoc:literal])* $u:ident),* $(,)?],
        binary: [$($(#[doc = $bdoc:literal])* $b:ident),* $(,)?],
        reduce: [$($rdoc:literal $r:ident $rall:ident),* $(,)?],
    ) => {
        #[pymethods]
        impl PyVar {
            $(
                $(#[doc = $udoc])*
                fn $u(&self, py: Python<'_>) -> PyResult<PyVar> {
                    self.wrap(py, self.var.$u())
                }
            )*
            $(
                $(#[doc = $bdoc])*
                fn $b(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                    let other = operand(other)?;
                    self.wrap(py, self.var.$b(other))
                }
            )*
            $(
                #[doc = concat!("The ", $rdoc, " over `axes` (an int, a sequence, or `None` for all); `keepdim` keeps them with extent 1.")]
                #[pyo3(signature = (axes=None, keepdim=false))]
                fn $r(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<PyVar> {
                    let var = match axes {
                        None if !keepdim => self.var.$rall(),
                        None => self.var.$r((0..self.var.rank() as i64).collect::<Vec<_>>(), true),
                        Some(a) => self.var.$r(self::axes(a)?, keepdim),
                    };
                    self.wrap(py, var)
                }
            )*

            /// The graph this value belongs to.
            #[getter]
            fn graph(&self, py: Python<'_>) -> Py<PyGraph> {
                self.graph.clone_ref(py)
            }

            /// The dtype's name (`"f32"`).
            #[getter]
            fn dtype(&self) -> PyResult<String> {
                Ok(dtype_name(self.ty()?.dtype))
            }

            /// The shape, a tuple.
            #[getter]
            fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                shape_tuple(py, &self.ty()?.shape)
            }

            /// The number of axes.
            #[getter]
            fn ndim(&self) -> PyResult<usize> {
                Ok(self.ty()?.rank())
            }

            /// The extent of `axis` (negative counts from the end).
            fn size(&self, axis: i64) -> PyResult<usize> {
                let ty = self.ty()?;
                let rank = ty.rank() as i64;
                let a = if axis < 0 { axis + rank } else { axis };
                if !(0..rank).contains(&a) {
                    return Err(PyValueError::new_err(format!("axis {axis} is out of range for {ty}")));
                }
                Ok(ty.shape[a as usize])
            }

            /// Converts to `dtype`.
            fn cast(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                let dtype = parse_dtype(dtype)?;
                self.wrap(py, self.var.cast(dtype))
            }

            /// The index of the first maximum along `axis` (`i64`; `None`: of the flattened tensor).
            #[pyo3(signature = (axis=None, keepdim=false))]
            fn argmax(&self, py: Python<'_>, axis: Option<i64>, keepdim: bool) -> PyResult<PyVar> {
                self.wrap(py, match axis { Some(a) => self.var.argmax(a, keepdim), None => self.var.argmax_all() })
            }

            /// The index of the first minimum along `axis` (`i64`; `None`: of the flattened tensor).
            #[pyo3(signature = (axis=None, keepdim=false))]
            fn argmin(&self, py: Python<'_>, axis: Option<i64>, keepdim: bool) -> PyResult<PyVar> {
                self.wrap(py, match axis { Some(a) => self.var.argmin(a, keepdim), None => self.var.argmin_all() })
            }

            /// Softmax along `axis`.
            #[pyo3(signature = (axis=-1), text_signature = "(self, /, axis=-1)")]
            fn softmax(&self, py: Python<'_>, axis: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.softmax(axis))
            }

            /// Log-softmax along `axis`.
            #[pyo3(signature = (axis=-1), text_signature = "(self, /, axis=-1)")]
            fn log_softmax(&self, py: Python<'_>, axis: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.log_softmax(axis))
            }

            /// Layer normalization over the last axis, scaled by `weight` and shifted by `bias`.
            #[pyo3(signature = (weight, bias, eps=1e-5))]
            fn layer_norm(&self, py: Python<'_>, weight: &Bound<'_, PyAny>, bias: &Bound<'_, PyAny>, eps: f64) -> PyResult<PyVar> {
                self.wrap(py, self.var.layer_norm(&self.other(weight)?, &self.other(bias)?, eps))
            }

            /// RMS normalization over the last axis, scaled by `weight`.
            #[pyo3(signature = (weight, eps=1e-6))]
            fn rms_norm(&self, py: Python<'_>, weight: &Bound<'_, PyAny>, eps: f64) -> PyResult<PyVar> {
                self.wrap(py, self.var.rms_norm(&self.other(weight)?, eps))
            }

            /// The matrix product (batched, broadcasting; also the `@` operator).
            fn matmul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.matmul(&self.other(other)?))
            }

            /// The same elements in `shape` (ints or one sequence; one extent may be -1).
            #[pyo3(signature = (*shape))]
            fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyVar> {
                self.wrap(py, self.var.reshape(dims_arg(shape)?))
            }

            /// The axes in the order `dims`.
            #[pyo3(signature = (*dims))]
            fn permute(&self, py: Python<'_>, dims: &Bound<'_, PyTuple>) -> PyResult<PyVar> {
                self.wrap(py, self.var.permute(dims_arg(dims)?))
            }

            /// Swaps two axes.
            fn transpose(&self, py: Python<'_>, dim0: i64, dim1: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.transpose(dim0, dim1))
            }

            /// Broadcasts to `shape`.
            #[pyo3(signature = (*shape))]
            fn expand(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyVar> {
                self.wrap(py, self.var.expand(dims_arg(shape)?))
            }

            /// Removes axes of extent 1: `axes` (an int or a sequence), or all of them.
            #[pyo3(signature = (axes=None))]
            fn squeeze(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>) -> PyResult<PyVar> {
                self.wrap(py, match axes { None => self.var.squeeze_all(), Some(a) => self.var.squeeze(self::axes(a)?) })
            }

            /// Inserts an axis of extent 1 at `axis`.
            fn unsqueeze(&self, py: Python<'_>, axis: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.unsqueeze(axis))
            }

            /// Every `step`-th index of `start..end` along `axis` (bounds as in Python slices).
            #[pyo3(signature = (axis, start=None, end=None, step=1))]
            fn slice(&self, py: Python<'_>, axis: i64, start: Option<i64>, end: Option<i64>, step: i64) -> PyResult<PyVar> {
                let start = start.unwrap_or(0);
                self.wrap(py, match end {
                    Some(e) => self.var.slice_step(axis, start..e, step),
                    None => self.var.slice_step(axis, start.., step),
                })
            }

            /// Pads with `value`: `pads` holds `before, after` for each axis, axis 0 first;
            /// negative amounts crop.
            #[pyo3(signature = (pads, value=0.0))]
            fn pad(&self, py: Python<'_>, pads: Vec<i64>, value: f64) -> PyResult<PyVar> {
                self.wrap(py, self.var.pad(pads, value))
            }

            /// The slices along `axis` at the positions of the integer `index` (numpy's `take`).
            fn index_select(&self, py: Python<'_>, axis: i64, index: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.index_select(axis, &self.other(index)?))
            }

            /// This tensor with slice `j` of `source` along `axis` added to slice `index[j]`,
            /// duplicates accumulating (`torch.index_add`); `index` is 1-D.
            fn index_add(
                &self,
                py: Python<'_>,
                axis: i64,
                index: &Bound<'_, PyAny>,
                source: &Bound<'_, PyAny>,
            ) -> PyResult<PyVar> {
                self.wrap(py, self.var.index_add(axis, &self.other(index)?, &self.other(source)?))
            }

            /// This tensor with slice `j` of `source` along `axis` combined into slice
            /// `index[j]` by `reduce` (`"prod"`, `"mean"`, `"amax"`, `"amin"`), in order;
            /// with `include_self` false the indexed slices of this tensor take no part
            /// (`torch.index_reduce`); `index` is 1-D.
            #[pyo3(signature = (axis, index, source, reduce, include_self = true))]
            fn index_reduce(
                &self,
                py: Python<'_>,
                axis: i64,
                index: &Bound<'_, PyAny>,
                source: &Bound<'_, PyAny>,
                reduce: &str,
                include_self: bool,
            ) -> PyResult<PyVar> {
                use ferrite::ir::IndexReduceOp as R;
                let op = match reduce {
                    "prod" => R::Prod,
                    "mean" => R::Mean,
                    "amax" => R::Amax,
                    "amin" => R::Amin,
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "index_reduce: reduce must be \"prod\", \"mean\", \"amax\" or \"amin\", not {other:?}"
                        )))
                    }
                };
                let (index, source) = (self.other(index)?, self.other(source)?);
                self.wrap(py, self.var.index_reduce(axis, &index, &source, op, include_self))
            }

            /// Picks along `axis` with an index of the same rank (`torch.take_along_dim`).
            fn gather(&self, py: Python<'_>, axis: i64, index: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.gather(axis, &self.other(index)?))
            }

            /// `a` where this `bool` condition holds, else `b` (`ferrite.where(self, a, b)`).
            fn where_(&self, py: Python<'_>, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.where_(operand(a)?, operand(b)?))
            }

            /// A tensor like this one filled with `value`.
            fn full_like(&self, py: Python<'_>, value: f64) -> PyResult<PyVar> {
                self.wrap(py, self.var.full_like(value))
            }

            /// Zeros like this tensor.
            fn zeros_like(&self, py: Python<'_>) -> PyResult<PyVar> {
                self.wrap(py, self.var.zeros_like())
            }

            /// Ones like this tensor.
            fn ones_like(&self, py: Python<'_>) -> PyResult<PyVar> {
                self.wrap(py, self.var.ones_like())
            }

            /// Pieces of `size` along `axis` (the last may be shorter), as `torch.split`.
            #[pyo3(signature = (size, axis=0))]
            fn split(&self, py: Python<'_>, size: &Bound<'_, PyAny>, axis: i64) -> PyResult<Vec<PyVar>> {
                let parts = match size.extract::<usize>() {
                    Ok(s) => self.var.split(s, axis),
                    Err(_) => self.var.split_sizes(&size.extract::<Vec<usize>>()?, axis),
                };
                parts.into_iter().map(|v| self.wrap(py, v)).collect()
            }

            /// `chunks` pieces along `axis`, as `torch.chunk`.
            #[pyo3(signature = (chunks, axis=0))]
            fn chunk(&self, py: Python<'_>, chunks: usize, axis: i64) -> PyResult<Vec<PyVar>> {
                self.var.chunk(chunks, axis).into_iter().map(|v| self.wrap(py, v)).collect()
            }

            /// Merges axes `start_dim..=end_dim` into one.
            #[pyo3(signature = (start_dim=0, end_dim=-1), text_signature = "(self, /, start_dim=0, end_dim=-1)")]
            fn flatten(&self, py: Python<'_>, start_dim: i64, end_dim: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.flatten(start_dim, end_dim))
            }

            /// The lower triangle of the last two axes (the rest zero).
            #[pyo3(signature = (diagonal=0))]
            fn tril(&self, py: Python<'_>, diagonal: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.tril(diagonal))
            }

            /// The upper triangle of the last two axes (the rest zero).
            #[pyo3(signature = (diagonal=0))]
            fn triu(&self, py: Python<'_>, diagonal: i64) -> PyResult<PyVar> {
                self.wrap(py, self.var.triu(diagonal))
            }

            /// `value` where the `bool` `mask` holds.
            fn masked_fill(&self, py: Python<'_>, mask: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.masked_fill(&self.other(mask)?, operand(value)?))
            }

            /// Clamped to `[min, max]` (either may be `None`).
            #[pyo3(signature = (min=None, max=None))]
            fn clamp(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyVar> {
                self.wrap(py, self.var.clamp(min, max))
            }

            /// The variance over `axes` (`None`: all) with Bessel's `correction`.
            #[pyo3(signature = (axes=None, correction=1, keepdim=false))]
            fn var(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>, correction: i64, keepdim: bool) -> PyResult<PyVar> {
                self.wrap(py, match axes {
                    None if !keepdim => self.var.var_all(correction),
                    None => self.var.var((0..self.var.rank() as i64).collect::<Vec<_>>(), correction, true),
                    Some(a) => self.var.var(self::axes(a)?, correction, keepdim),
                })
            }

            /// The running sum along `axis`.
            #[pyo3(signature = (axis, exclusive=false, reverse=false))]
            fn cumsum(&self, py: Python<'_>, axis: i64, exclusive: bool, reverse: bool) -> PyResult<PyVar> {
                self.wrap(py, self.var.cumsum_ext(axis, exclusive, reverse))
            }

            /// `self @ weight.T + bias`, as `torch.nn.functional.linear`.
            #[pyo3(signature = (weight, bias=None))]
            fn linear(&self, py: Python<'_>, weight: &Bound<'_, PyAny>, bias: Option<&Bound<'_, PyAny>>) -> PyResult<PyVar> {
                let bias = bias.map(|b| self.other(b)).transpose()?;
                self.wrap(py, self.var.linear(&self.other(weight)?, bias.as_ref()))
            }

            fn __add__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.add(operand(o)?)) }
            fn __sub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.sub(operand(o)?)) }
            fn __mul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.mul(operand(o)?)) }
            fn __truediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.div(operand(o)?)) }
            fn __floordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.floor_divide(operand(o)?)) }
            fn __mod__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.remainder(operand(o)?)) }
            fn __pow__(&self, py: Python<'_>, o: &Bound<'_, PyAny>, _modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyVar> { self.wrap(py, self.var.pow(operand(o)?)) }
            fn __matmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.matmul(&self.other(o)?)) }
            fn __and__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.logical_and(operand(o)?)) }
            fn __or__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.logical_or(operand(o)?)) }

            fn __rand__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.logical_and(operand(o)?))
            }
            fn __ror__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, self.var.logical_or(operand(o)?))
            }
            fn __radd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.add(operand(o)?)) }
            fn __rmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.mul(operand(o)?)) }
            fn __rsub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, match scalar(o)? {
                    Scalar::Float(v) => v - &self.var,
                    Scalar::Int(v) => v - &self.var,
                    Scalar::Bool(v) => i64::from(v) - &self.var,
                })
            }
            fn __rtruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.wrap(py, match scalar(o)? {
                    Scalar::Float(v) => v / &self.var,
                    Scalar::Int(v) => v / &self.var,
                    Scalar::Bool(v) => i64::from(v) / &self.var,
                })
            }
            fn __rfloordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { let l = self.scalar_left(o)?; self.wrap(py, l.floor_divide(&self.var)) }
            fn __rmod__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { let l = self.scalar_left(o)?; self.wrap(py, l.remainder(&self.var)) }
            fn __rpow__(&self, py: Python<'_>, o: &Bound<'_, PyAny>, _modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyVar> { let l = self.scalar_left(o)?; self.wrap(py, l.pow(&self.var)) }

            fn __neg__(&self, py: Python<'_>) -> PyResult<PyVar> { self.wrap(py, self.var.neg()) }
            fn __abs__(&self, py: Python<'_>) -> PyResult<PyVar> { self.wrap(py, self.var.abs()) }
            fn __invert__(&self, py: Python<'_>) -> PyResult<PyVar> { self.wrap(py, self.var.logical_not()) }

            fn __lt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.lt(operand(o)?)) }
            fn __le__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.le(operand(o)?)) }
            fn __gt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.gt(operand(o)?)) }
            fn __ge__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.ge(operand(o)?)) }
            fn __eq__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.eq(operand(o)?)) }
            fn __ne__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyVar> { self.wrap(py, self.var.ne(operand(o)?)) }

            fn __hash__(slf: &Bound<'_, Self>) -> isize {
                slf.as_ptr() as isize
            }

            /// A `Var` has no truth value: it holds no data.
            fn __bool__(&self) -> PyResult<bool> {
                Err(PyTypeError::new_err(
                    "a ferrite.Var has no truth value (it is symbolic; use where() to choose by a condition)",
                ))
            }

            fn __len__(&self) -> PyResult<usize> {
                let ty = self.ty()?;
                ty.shape.first().copied().ok_or_else(|| PyTypeError::new_err("len() of a rank-0 Var"))
            }

            /// Basic indexing: ints, slices with a positive step, `None` and `...`.
            fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyVar> {
                self.index(py, key)
            }

            fn __repr__(&self) -> String {
                match self.var.ty() {
                    Ok(ty) => format!("<ferrite.Var {ty}>"),
                    Err(_) => "<ferrite.Var (poisoned)>".into(),
                }
            }
        }
    };
}

var_methods! {
    unary: [
        #[doc = "`-x`."] neg,
        #[doc = "`|x|`."] abs,
        #[doc = "`e^x` (integers give `f32`)."] exp,
        #[doc = "The natural logarithm."] log,
        #[doc = "The square root."] sqrt,
        #[doc = "`1 / sqrt(x)`."] rsqrt,
        #[doc = "`1 / x`."] reciprocal,
        #[doc = "The sine."] sin,
        #[doc = "The cosine."] cos,
        #[doc = "The hyperbolic tangent."] tanh,
        #[doc = "`1 / (1 + e^-x)`."] sigmoid,
        #[doc = "`max(x, 0)`."] relu,
        #[doc = "`x * Phi(x)` with the exact (erf) normal CDF."] gelu,
        #[doc = "GELU with the tanh approximation."] gelu_tanh,
        #[doc = "`x * sigmoid(x)` (SiLU)."] silu,
        #[doc = "The error function."] erf,
        #[doc = "The complementary error function `1 - erf(x)`."] erfc,
        #[doc = "Rounds toward -inf."] floor,
        #[doc = "Rounds toward +inf."] ceil,
        #[doc = "-1, 0 or 1."] sign,
        #[doc = "Logical not (`bool`)."] logical_not,
    ],
    binary: [
        #[doc = "`self + other`, broadcasting."] add,
        #[doc = "`self - other`, broadcasting."] sub,
        #[doc = "`self * other`, broadcasting."] mul,
        #[doc = "True division (integers give `f32`)."] div,
        #[doc = "`self ** other`."] pow,
        #[doc = "Division rounded toward -inf (`//`)."] floor_divide,
        #[doc = "Division rounded toward zero."] trunc_divide,
        #[doc = "The remainder with the sign of the divisor (`%`)."] remainder,
        #[doc = "The remainder with the sign of the dividend (C `fmod`)."] fmod,
        #[doc = "The elementwise maximum (NaN-propagating)."] maximum,
        #[doc = "The elementwise minimum (NaN-propagating)."] minimum,
        #[doc = "`self == other` (`bool`)."] eq,
        #[doc = "`self != other` (`bool`)."] ne,
        #[doc = "`self < other` (`bool`)."] lt,
        #[doc = "`self <= other` (`bool`)."] le,
        #[doc = "`self > other` (`bool`)."] gt,
        #[doc = "`self >= other` (`bool`)."] ge,
        #[doc = "Logical and (`bool`)."] logical_and,
        #[doc = "Logical or (`bool`)."] logical_or,
    ],
    reduce: [
        "sum" sum sum_all,
        "mean" mean mean_all,
        "maximum" max max_all,
        "minimum" min min_all,
        "product" prod prod_all,
    ],
}

impl PyVar {
    /// `x[key]` for ints, slices, `None` and `...`.
    fn index(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyVar> {
        let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        let rank = self.ty()?.rank();
        let consumed = items
            .iter()
            .filter(|k| !k.is_none() && !k.is(py.Ellipsis()))
            .count();
        if consumed > rank {
            return Err(PyValueError::new_err(format!(
                "too many indices: {consumed} for a tensor of rank {rank}"
            )));
        }
        let mut var = self.var.clone();
        // `axis` is the axis of `var` the next key applies to.
        let mut axis: i64 = 0;
        let mut squeeze = Vec::new();
        for k in &items {
            if k.is_none() {
                var = var.unsqueeze(axis);
                axis += 1;
            } else if k.is(py.Ellipsis()) {
                axis += (rank - consumed) as i64;
            } else if let Ok(s) = k.cast::<PySlice>() {
                let extent = var.size(axis) as i64;
                let step: Option<i64> = s.getattr("step")?.extract()?;
                let step = step.unwrap_or(1);
                if step <= 0 {
                    return Err(PyValueError::new_err("slice steps must be positive"));
                }
                let clip = |v: Option<i64>, default: i64| match v {
                    None => default,
                    Some(v) if v < 0 => (v + extent).max(0),
                    Some(v) => v.min(extent),
                };
                let start = clip(s.getattr("start")?.extract()?, 0);
                let end = clip(s.getattr("stop")?.extract()?, extent).max(start);
                if (start, end, step) != (0, extent, 1) {
                    var = var.slice_step(axis, start..end, step);
                }
                axis += 1;
            } else if let Ok(i) = k.extract::<i64>() {
                let extent = var.size(axis) as i64;
                let j = if i < 0 { i + extent } else { i };
                if !(0..extent).contains(&j) {
                    return Err(PyValueError::new_err(format!(
                        "index {i} is out of range for axis {axis} of extent {extent}"
                    )));
                }
                var = var.slice(axis, j..j + 1);
                squeeze.push(axis);
                axis += 1;
            } else {
                return Err(PyTypeError::new_err(
                    "a Var is indexed by ints, slices, None and ... only",
                ));
            }
            if !var.is_valid() {
                break;
            }
        }
        if !squeeze.is_empty() && var.is_valid() {
            var = var.squeeze(squeeze);
        }
        self.wrap(py, var)
    }
}

fn vars<'a>(items: &'a [PyRef<'a, PyVar>]) -> Vec<&'a ferrite::Var> {
    items.iter().map(|v| &v.var).collect()
}

/// Joins `tensors` along an existing `axis`.
#[pyfunction]
#[pyo3(signature = (tensors, axis=0))]
pub fn concat(py: Python<'_>, tensors: Vec<PyRef<'_, PyVar>>, axis: i64) -> PyResult<PyVar> {
    let first = tensors
        .first()
        .ok_or_else(|| BuildError::new_err("concat() needs at least one tensor"))?;
    let graph = first.graph.clone_ref(py);
    let var = ferrite::concat(&vars(&tensors), axis);
    PyGraph::wrap(&graph, py, var)
}

/// Joins `tensors` along a new `axis`.
#[pyfunction]
#[pyo3(signature = (tensors, axis=0))]
pub fn stack(py: Python<'_>, tensors: Vec<PyRef<'_, PyVar>>, axis: i64) -> PyResult<PyVar> {
    let first = tensors
        .first()
        .ok_or_else(|| BuildError::new_err("stack() needs at least one tensor"))?;
    let graph = first.graph.clone_ref(py);
    let var = ferrite::stack(&vars(&tensors), axis);
    PyGraph::wrap(&graph, py, var)
}

/// `a` where the `bool` `cond` holds, else `b`; `a` and `b` may be numbers.
#[pyfunction]
#[pyo3(name = "where")]
pub fn where_(
    py: Python<'_>,
    cond: PyRef<'_, PyVar>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
) -> PyResult<PyVar> {
    let var = ferrite::where_(&cond.var, operand(a)?, operand(b)?);
    PyGraph::wrap(&cond.graph, py, var)
}

/// `softmax(q @ k^T * scale + mask) @ v` over the last two axes, as
/// `torch.nn.functional.scaled_dot_product_attention` (`scale` defaults to
/// `1/sqrt(head dim)`; `causal` masks the upper triangle; `mask` is `bool` (keep where
/// true) or additive).
#[pyfunction]
#[pyo3(signature = (q, k, v, mask=None, causal=false, scale=None))]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    q: PyRef<'_, PyVar>,
    k: PyRef<'_, PyVar>,
    v: PyRef<'_, PyVar>,
    mask: Option<PyRef<'_, PyVar>>,
    causal: bool,
    scale: Option<f64>,
) -> PyResult<PyVar> {
    let var = ferrite::scaled_dot_product_attention(
        &q.var,
        &k.var,
        &v.var,
        mask.as_ref().map(|m| &m.var),
        causal,
        scale,
    );
    PyGraph::wrap(&q.graph, py, var)
}

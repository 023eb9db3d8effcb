//! The graph builder: [`Graph`], the symbolic [`Var`] handle, and operator overloading.
//!
//! A [`Var`] is a handle to one value of a graph under construction. Calling a method
//! on it ([`Var::matmul`], [`Var::relu`], ...; see `ops.rs`) or combining it with
//! an operator (`+ - * /`, `+= -= *= /=`, unary `-`) records an op in its graph and
//! returns a handle to the result; nothing is computed.
//!
//! Operators take `Var`s (owned or borrowed) and scalars. On the right any
//! [`ScalarValue`] works (`f32`, `f64`, `i32`, `i64`, `bool`); on the left only `f64` and
//! `i64`, because with two candidate types a bare literal (`1.0 - x`) would leave the
//! result's type unknown until inference falls back, and `(1.0 - x).relu()` would not
//! compile. An `f32` variable goes on the left as `f64::from(s)`.
//!
//! # Errors: a poisoned builder
//!
//! Ops are checked when they are recorded, by the IR's typing rule
//! ([`ferrite_ir::infer::infer`]). A Rust `Result` per op would make operator overloading
//! unusable (`(x.matmul(&w)? + b)?.relu()?`), and PyTorch's answer, raising at the op,
//! is a panic in Rust. So a failed op does not fail the call: it records the error in
//! its graph, and returns a *poisoned* handle. Ops on poisoned handles return poisoned
//! handles without recording anything more, so the graph keeps the first error, which
//! is the cause. [`compile`](crate::compile) (and [`Graph::check`], to ask early) then
//! returns it as [`Error::Build`], naming the op, the operand types, the typing rule's
//! message and the `file:line:col` of the user code that built the op.
//!
//! ```
//! let g = ferrite::Graph::new("bad");
//! let a = g.input("a", ferrite::f32(&[2, 3]));
//! let b = g.input("b", ferrite::f32(&[4, 5]));
//! let c = (a.matmul(&b) + 1.0).relu(); // no panic: `c` is poisoned
//! g.output(&c);
//! let err = g.check().unwrap_err();
//! assert!(err.to_string().contains("matmul(f32[2, 3], f32[4, 5]): inner dimensions differ"));
//! ```
//!
//! Handles are cheap to clone (a reference count and an id). A graph is shared by its
//! handles and guarded by a mutex, so `Graph` and `Var` are `Send + Sync`.

use super::error::{Error, Result};
use ferrite_ir::op::{BinaryOp, Op, Scalar, UnaryOp};
use ferrite_ir::{verify, DType, TensorType, ValueId};
use std::fmt;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};
use std::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, BitXor, BitXorAssign, Not};
use std::ops::{Shl, ShlAssign, Shr, ShrAssign};
use std::panic::Location;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A graph under construction and the first error recorded in it.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) graph: ferrite_ir::Graph,
    pub(crate) error: Option<Error>,
}

impl State {
    /// Keeps `e` unless an earlier error is already recorded.
    fn fail(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

type Shared = Arc<Mutex<State>>;

fn lock(state: &Shared) -> MutexGuard<'_, State> {
    // The builder never panics while holding the lock; should a panic happen anyway,
    // the graph is still consistent (a node is pushed whole or not at all).
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A tensor graph being built: typed inputs, ops recorded through [`Var`] handles,
/// outputs. Compile it with [`compile`](crate::compile).
///
/// ```
/// let g = ferrite::Graph::new("scale");
/// let x = g.input("x", ferrite::f32(&[4]));
/// g.output(&(x * 2.0 + 1));
/// assert_eq!(g.to_ir()?.op_count(), 2);
/// # Ok::<(), ferrite::Error>(())
/// ```
#[derive(Clone)]
pub struct Graph {
    pub(crate) state: Shared,
}

/// A symbolic tensor: one value of a [`Graph`], with a static type. It holds no data
/// (the host data that programs run on is [`Tensor`](crate::Tensor)).
///
/// Methods and operators record ops (see the [module docs](self) for errors). A handle
/// whose op failed is *poisoned*: it has no type, ops on it are poisoned too, and the
/// graph reports the original error.
///
/// ```
/// let g = ferrite::Graph::new("attention_scores");
/// let q = g.input("q", ferrite::f32(&[2, 8, 16]));
/// let k = g.input("k", ferrite::f32(&[2, 8, 16]));
/// // Shapes are static, so code can compute with them.
/// let scores = q.matmul(&k.transpose(-2, -1)) / (q.size(-1) as f64).sqrt();
/// assert_eq!(scores.shape(), vec![2, 8, 8]);
/// let p = scores.softmax(-1);
/// assert_eq!(p.argmax(-1, false).dtype(), ferrite::DType::I64);
/// // Scalars go on either side and take the tensor's dtype.
/// let q = 1.0 - &p * 2;
/// assert_eq!(q.dtype(), ferrite::DType::F32);
/// g.output(&q);
/// assert!(g.to_string().contains("softmax(div(matmul(q, transpose(k, dim0=-2, dim1=-1)), 4.0))"));
/// ```
#[derive(Clone)]
pub struct Var {
    pub(crate) state: Shared,
    /// `None` when poisoned.
    pub(crate) id: Option<ValueId>,
}

/// An operand of a binary op or `where_`: a tensor or a scalar literal.
///
/// Scalars follow PyTorch's promotion: a literal takes the dtype of the tensor beside it
/// unless its category is higher (`i64_tensor * 0.5` is `f32`, `f16_tensor * 2.0` is `f16`).
#[derive(Clone, Debug)]
pub enum Operand {
    /// A tensor of the same graph.
    Var(Var),
    /// A rank-0 literal.
    Scalar(Scalar),
}

impl From<Var> for Operand {
    fn from(t: Var) -> Operand {
        Operand::Var(t)
    }
}

impl From<&Var> for Operand {
    fn from(t: &Var) -> Operand {
        Operand::Var(t.clone())
    }
}

/// A Rust value usable as a scalar literal: `f32`, `f64` (float literals), `i32`, `i64`
/// (integer literals), `bool`, or an IR [`Scalar`].
pub trait ScalarValue: Copy {
    /// The literal.
    fn to_scalar(self) -> Scalar;
}

impl ScalarValue for Scalar {
    fn to_scalar(self) -> Scalar {
        self
    }
}

impl ScalarValue for f32 {
    fn to_scalar(self) -> Scalar {
        Scalar::Float(self as f64)
    }
}

impl ScalarValue for f64 {
    fn to_scalar(self) -> Scalar {
        Scalar::Float(self)
    }
}

impl ScalarValue for i32 {
    fn to_scalar(self) -> Scalar {
        Scalar::Int(self as i64)
    }
}

impl ScalarValue for i64 {
    fn to_scalar(self) -> Scalar {
        Scalar::Int(self)
    }
}

impl ScalarValue for bool {
    fn to_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
}

impl<S: ScalarValue> From<S> for Operand {
    fn from(v: S) -> Operand {
        Operand::Scalar(v.to_scalar())
    }
}

/// An `f32` tensor type of `shape`, for [`Graph::input`]. Shape limits are checked by
/// `input`, so a huge shape is a build error rather than a panic here.
pub fn f32(shape: &[usize]) -> TensorType {
    tensor_type(DType::F32, shape)
}

/// An `f16` tensor type of `shape`.
pub fn f16(shape: &[usize]) -> TensorType {
    tensor_type(DType::F16, shape)
}

/// A `bf16` tensor type of `shape`.
pub fn bf16(shape: &[usize]) -> TensorType {
    tensor_type(DType::Bf16, shape)
}

/// An `i32` tensor type of `shape`.
pub fn i32(shape: &[usize]) -> TensorType {
    tensor_type(DType::I32, shape)
}

/// An `i64` tensor type of `shape`.
pub fn i64(shape: &[usize]) -> TensorType {
    tensor_type(DType::I64, shape)
}

/// A `bool` tensor type of `shape`.
pub fn bool(shape: &[usize]) -> TensorType {
    tensor_type(DType::Bool, shape)
}

/// A tensor type of any dtype (unchecked: [`Graph::input`] checks the limits).
pub fn tensor_type(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType {
        dtype,
        shape: shape.to_vec(),
    }
}

fn location_text(l: &Location<'_>) -> String {
    format!("{}:{}:{}", l.file(), l.line(), l.column())
}

/// The typing rule's message without the leading `op: ` that the error shows anyway.
fn strip_op<'a>(op: &str, message: &'a str) -> &'a str {
    message
        .strip_prefix(op)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
}

impl Graph {
    /// An empty graph named `name` (the name appears in dumps and in `.fg` text; it
    /// should be a valid identifier, `[A-Za-z_][A-Za-z0-9_.]*`).
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            state: Arc::new(Mutex::new(State {
                graph: ferrite_ir::Graph::new(name),
                error: None,
            })),
        }
    }

    /// The graph's name.
    pub fn name(&self) -> String {
        lock(&self.state).graph.name.clone()
    }

    /// Declares an input (a parameter: data or weights) named `name` of type `ty`
    /// (`ferrite::f32(&[64, 784])`). Inputs are passed to `run` in declaration order.
    /// An invalid or repeated name, or a shape over the size limits, is a build error.
    #[track_caller]
    pub fn input(&self, name: &str, ty: TensorType) -> Var {
        let location = Location::caller();
        let mut st = lock(&self.state);
        match st.graph.add_param(name, ty.clone()) {
            Ok(id) => self.handle(Some(id)),
            Err(e) => {
                let message = e.to_string();
                st.fail(Error::Build {
                    op: "input".into(),
                    operands: vec![ty],
                    // Say which input, unless the message already does.
                    message: if message.contains(&format!("`{name}`")) {
                        message
                    } else {
                        format!("`{name}`: {message}")
                    },
                    location: location_text(location),
                });
                self.handle(None)
            }
        }
    }

    /// Marks `t` as an output of the graph. Outputs are returned by `run` in the order
    /// they were marked; a value may be an output more than once.
    #[track_caller]
    pub fn output(&self, t: &Var) {
        let location = Location::caller();
        let adopted = foreign_error(&self.state, std::slice::from_ref(t), "output", location);
        let mut st = lock(&self.state);
        if let Some(e) = adopted {
            st.fail(e);
            return;
        }
        match t.id {
            Some(id) => st.graph.outputs.push(id),
            // The op that poisoned `t` recorded its error in this graph already.
            None => st.fail(Error::Build {
                op: "output".into(),
                operands: vec![],
                message: "the value is poisoned by an earlier error".into(),
                location: location_text(location),
            }),
        }
    }

    /// The first error recorded while building, if any.
    pub fn check(&self) -> Result<()> {
        match &lock(&self.state).error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The types of the inputs, in order.
    pub fn input_types(&self) -> Vec<TensorType> {
        lock(&self.state).graph.param_types()
    }

    /// The graph as IR, ready for the compiler: the first build error if there was
    /// one, [`Error::NoOutputs`] without outputs. Values no output depends on are dropped
    /// (inputs are kept, so `run` still takes every declared input).
    pub fn to_ir(&self) -> Result<ferrite_ir::Graph> {
        let st = lock(&self.state);
        if let Some(e) = &st.error {
            return Err(e.clone());
        }
        if st.graph.outputs.is_empty() {
            return Err(Error::NoOutputs {
                graph: st.graph.name.clone(),
            });
        }
        let g = st.graph.without_dead_nodes();
        verify(&g).map_err(|e| Error::InvalidGraph {
            message: e.to_string(),
        })?;
        Ok(g)
    }

    pub(crate) fn handle(&self, id: Option<ValueId>) -> Var {
        Var {
            state: self.state.clone(),
            id,
        }
    }

    /// A constant tensor (a weight) baked into the graph under `name`: it is no input
    /// (`run` does not take it), the compiled program owns it, and [`save`](crate::save)
    /// writes it to the weights file as tensor `name`. The data is shared, not copied,
    /// when the graph is compiled. A `name` that is a valid value name also names the
    /// value in `.fg` text; a repeated one is a build error.
    ///
    /// ```
    /// let g = ferrite::Graph::new("affine");
    /// let x = g.input("x", ferrite::f32(&[2]));
    /// let w = g.constant("w", &ferrite::Tensor::from_vec(&[2], vec![2.0f32, 3.0])?);
    /// g.output(&(x * &w));
    /// let exe = ferrite::compile(&g, &ferrite::Options::default())?;
    /// let out = exe.run(&[&ferrite::Tensor::from_vec(&[2], vec![1.0f32, 1.0])?])?;
    /// assert_eq!(out[0].as_slice::<f32>(), Some(&[2.0, 3.0][..]));
    /// # Ok::<(), ferrite::Error>(())
    /// ```
    #[track_caller]
    pub fn constant(&self, name: &str, tensor: &crate::Tensor) -> Var {
        let location = Location::caller();
        let mut st = lock(&self.state);
        let constant = ferrite_ir::Constant::named(name, tensor.as_ir().clone());
        let value_name = ferrite_ir::is_valid_name(name).then(|| name.to_string());
        match st.graph.add_constant(constant, value_name) {
            Ok(id) => self.handle(Some(id)),
            Err(e) => {
                st.fail(Error::Build {
                    op: "constant".into(),
                    operands: vec![tensor.ty().clone()],
                    message: format!("`{name}`: {e}"),
                    location: location_text(location),
                });
                self.handle(None)
            }
        }
    }

    /// A rank-0 constant: `f32` for floats, `i64` for integers, `bool` for bools.
    /// (Next to a tensor, prefer the scalar itself, `x * 2.0`, which takes the tensor's dtype.)
    #[track_caller]
    pub fn scalar(&self, value: impl ScalarValue) -> Var {
        let location = Location::caller();
        let value = value.to_scalar();
        let mut st = lock(&self.state);
        match st.graph.add_literal(value, value.dtype_beside(None)) {
            Ok(id) => self.handle(Some(id)),
            Err(e) => {
                st.fail(Error::Build {
                    op: "scalar".into(),
                    operands: vec![],
                    message: e.to_string(),
                    location: location_text(location),
                });
                self.handle(None)
            }
        }
    }

    /// Records `message` as a build error of `op` and returns a poisoned handle.
    #[track_caller]
    pub(crate) fn fail(&self, op: &str, operands: Vec<TensorType>, message: String) -> Var {
        let location = Location::caller();
        lock(&self.state).fail(Error::Build {
            op: op.into(),
            operands,
            message,
            location: location_text(location),
        });
        self.handle(None)
    }

    /// Records `op` applied to `operands` and returns the result's handle (see the
    /// module docs for what happens on error).
    #[track_caller]
    pub(crate) fn record(&self, op: Op, operands: &[Operand]) -> Var {
        let location = Location::caller();
        let tensors: Vec<Var> = operands
            .iter()
            .filter_map(|o| match o {
                Operand::Var(t) => Some(t.clone()),
                Operand::Scalar(_) => None,
            })
            .collect();
        let adopted = foreign_error(&self.state, &tensors, op.name(), location);
        let mut st = lock(&self.state);
        if let Some(e) = adopted {
            st.fail(e);
            return self.handle(None);
        }
        if tensors.iter().any(|t| t.id.is_none()) {
            return self.handle(None);
        }
        let mut ids = Vec::with_capacity(operands.len());
        for (i, o) in operands.iter().enumerate() {
            let id = match o {
                Operand::Var(t) => match t.id {
                    Some(id) => id,
                    None => return self.handle(None),
                },
                Operand::Scalar(s) => {
                    let peer = scalar_peer(&op, operands, i, &st.graph);
                    match st.graph.add_literal(*s, s.dtype_beside(peer)) {
                        Ok(id) => id,
                        Err(e) => {
                            st.fail(Error::Build {
                                op: op.name().into(),
                                operands: vec![],
                                message: e.to_string(),
                                location: location_text(location),
                            });
                            return self.handle(None);
                        }
                    }
                }
            };
            ids.push(id);
        }
        let name = op.name();
        match st.graph.add(op.clone(), &ids, None) {
            Ok(id) => self.handle(Some(id)),
            Err(e) => {
                let operands = ids.iter().map(|&v| st.graph.ty(v).clone()).collect();
                st.fail(Error::Build {
                    op: name.into(),
                    operands,
                    message: strip_op(name, &e.to_string()).to_string(),
                    location: location_text(location),
                });
                self.handle(None)
            }
        }
    }
}

/// The dtype a scalar operand at position `i` takes its type beside: the first tensor
/// among the operands it combines with (for `where`, the condition stands alone and the
/// two values combine with each other).
fn scalar_peer(op: &Op, operands: &[Operand], i: usize, g: &ferrite_ir::Graph) -> Option<DType> {
    let group = match op {
        Op::Where if i == 0 => 0..1,
        Op::Where => 1..operands.len(),
        _ => 0..operands.len(),
    };
    operands[group].iter().find_map(|o| match o {
        Operand::Var(Var { id: Some(id), .. }) => Some(g.ty(*id).dtype),
        _ => None,
    })
}

/// The error to record when some of `tensors` belong to another graph than `state`:
/// that graph's own error if the tensor is poisoned there (so the cause is kept),
/// otherwise [`Error::ForeignVar`]. Locks the other graphs one at a time, never
/// while holding `state`, so two threads mixing graphs cannot deadlock.
fn foreign_error(
    state: &Shared,
    tensors: &[Var],
    op: &str,
    location: &Location<'_>,
) -> Option<Error> {
    let foreign = tensors.iter().find(|t| !Arc::ptr_eq(&t.state, state))?;
    let theirs = if foreign.id.is_none() {
        lock(&foreign.state).error.clone()
    } else {
        None
    };
    Some(theirs.unwrap_or_else(|| Error::ForeignVar {
        op: op.into(),
        location: location_text(location),
    }))
}

/// A poisoned handle in a graph of its own that holds `message`: for calls that have
/// no graph to record into (`concat` of nothing).
#[track_caller]
pub(crate) fn detached_error(op: &str, message: String) -> Var {
    Graph::new("detached").fail(op, vec![], message)
}

impl Var {
    /// The graph this tensor belongs to (for creation ops such as [`Graph::full`] inside
    /// a traced closure, which has no `Graph` of its own).
    pub fn graph(&self) -> Graph {
        Graph {
            state: self.state.clone(),
        }
    }

    /// The tensor's type, or the graph's first error if this handle is poisoned.
    pub fn ty(&self) -> Result<TensorType> {
        let st = lock(&self.state);
        match self.id {
            Some(id) => Ok(st.graph.ty(id).clone()),
            None => Err(st.error.clone().unwrap_or_else(|| Error::Build {
                op: "?".into(),
                operands: vec![],
                message: "the value is poisoned".into(),
                location: "?".into(),
            })),
        }
    }

    /// The static shape; empty for a poisoned handle (prefer [`Var::size`] for one axis).
    pub fn shape(&self) -> Vec<usize> {
        self.ty().map(|t| t.shape).unwrap_or_default()
    }

    /// The dtype; `f32` for a poisoned handle.
    pub fn dtype(&self) -> DType {
        self.ty().map(|t| t.dtype).unwrap_or(DType::F32)
    }

    /// The number of axes; 0 for a poisoned handle.
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// The extent of `axis` (negative counts from the end). An axis out of range is a
    /// build error; then, and for a poisoned handle, the result is 1, so that code
    /// computing shapes from it goes on without panicking and the graph reports the error.
    #[track_caller]
    pub fn size(&self, axis: i64) -> usize {
        let Some(id) = self.id else { return 1 };
        let ty = lock(&self.state).graph.ty(id).clone();
        let message = match ferrite_ir::types::normalize_axis(axis, ty.rank()) {
            Ok(a) if ty.rank() > 0 => return ty.shape[a],
            Ok(_) => "a rank-0 tensor has no axes".to_string(),
            Err(e) => e.to_string(),
        };
        self.graph().fail("size", vec![ty], message);
        1
    }

    /// The value's id in the IR graph; `None` for a poisoned handle.
    pub fn id(&self) -> Option<ValueId> {
        self.id
    }

    /// True unless an op building this handle failed.
    pub fn is_valid(&self) -> bool {
        self.id.is_some()
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.id, self.ty()) {
            (Some(id), Ok(ty)) => write!(f, "Var({id}: {ty})"),
            _ => f.write_str("Var(poisoned)"),
        }
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("Graph")
            .field("name", &st.graph.name)
            .field("nodes", &st.graph.nodes.len())
            .field("outputs", &st.graph.outputs.len())
            .field("error", &st.error)
            .finish()
    }
}

impl fmt::Display for Graph {
    /// The graph as `.fg` text (what has been built so far).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ferrite_ir::print(&lock(&self.state).graph))
    }
}

/// Records a binary op between two operands, at least one of which is a tensor.
#[track_caller]
pub(crate) fn binary(op: BinaryOp, lhs: Operand, rhs: Operand) -> Var {
    let graph = match (&lhs, &rhs) {
        (Operand::Var(t), _) | (_, Operand::Var(t)) => t.graph(),
        _ => return detached_error(op.name(), "at least one operand must be a tensor".into()),
    };
    graph.record(Op::Binary(op), &[lhs, rhs])
}

/// Implements `Var op R`, `&Var op R` (R: a tensor or any [`ScalarValue`]),
/// `f64 op Var`, `i64 op Var` and `Var op= R` for one arithmetic operator.
macro_rules! arithmetic {
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident, $op:ident) => {
        arithmetic!($Trait, $method, $Assign, $assign, $op; f64, i64);
    };
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident, $op:ident; $($s:ty),*) => {
        impl<R: Into<Operand>> $Trait<R> for Var {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: R) -> Var {
                binary(BinaryOp::$op, Operand::Var(self), rhs.into())
            }
        }

        impl<R: Into<Operand>> $Trait<R> for &Var {
            type Output = Var;
            #[track_caller]
            fn $method(self, rhs: R) -> Var {
                binary(BinaryOp::$op, self.into(), rhs.into())
            }
        }

        impl<R: Into<Operand>> $Assign<R> for Var {
            #[track_caller]
            fn $assign(&mut self, rhs: R) {
                *self = binary(BinaryOp::$op, (&*self).into(), rhs.into());
            }
        }

        // Scalars on the left are f64 and i64 only: with a second float (or integer)
        // type, an unsuffixed literal (`1.0 - x`) could not infer its type, and calling a
        // method on the result would not compile.
        arithmetic!(@scalar $Trait, $method, $op, $($s),*);
    };
    (@scalar $Trait:ident, $method:ident, $op:ident, $($s:ty),*) => {
        $(
            impl $Trait<Var> for $s {
                type Output = Var;
                #[track_caller]
                fn $method(self, rhs: Var) -> Var {
                    binary(BinaryOp::$op, self.into(), Operand::Var(rhs))
                }
            }

            impl $Trait<&Var> for $s {
                type Output = Var;
                #[track_caller]
                fn $method(self, rhs: &Var) -> Var {
                    binary(BinaryOp::$op, self.into(), rhs.into())
                }
            }
        )*
    };
}

arithmetic!(Add, add, AddAssign, add_assign, Add);
arithmetic!(Sub, sub, SubAssign, sub_assign, Sub);
arithmetic!(Mul, mul, MulAssign, mul_assign, Mul);
arithmetic!(Div, div, DivAssign, div_assign, Div);
// The bitwise operators take integers (and `& | ^` bools): scalars on the left are i64.
arithmetic!(BitAnd, bitand, BitAndAssign, bitand_assign, BitwiseAnd; i64);
arithmetic!(BitOr, bitor, BitOrAssign, bitor_assign, BitwiseOr; i64);
arithmetic!(BitXor, bitxor, BitXorAssign, bitxor_assign, BitwiseXor; i64);
arithmetic!(Shl, shl, ShlAssign, shl_assign, LeftShift; i64);
arithmetic!(Shr, shr, ShrAssign, shr_assign, RightShift; i64);

/// `!x` is `bitwise_not` (PyTorch's `~x`): bitwise of integers, logical of bools.
impl Not for Var {
    type Output = Var;
    #[track_caller]
    fn not(self) -> Var {
        self.graph()
            .record(Op::Unary(UnaryOp::BitwiseNot), &[self.into()])
    }
}

impl Not for &Var {
    type Output = Var;
    #[track_caller]
    fn not(self) -> Var {
        self.graph()
            .record(Op::Unary(UnaryOp::BitwiseNot), &[self.into()])
    }
}

impl Neg for Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        self.graph().record(Op::Unary(UnaryOp::Neg), &[self.into()])
    }
}

impl Neg for &Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        self.graph().record(Op::Unary(UnaryOp::Neg), &[self.into()])
    }
}

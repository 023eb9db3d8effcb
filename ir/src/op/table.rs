//! The op table: every op that `.fg` text can call, with its operands and its
//! attributes (name, type, default, and the rule a value must keep).
//!
//! It is the one place that names ops and attributes. [`Op::name`] and
//! [`Op::arity`] read it, [`Op::from_call`] checks attributes against it and fills
//! in defaults, [`Op::attributes`] prints by it (leaving out values equal to the
//! default), and the parser's "did you mean" suggestions search it.
//!
//! [`Op::name`]: super::Op::name
//! [`Op::arity`]: super::Op::arity
//! [`Op::from_call`]: super::Op::from_call
//! [`Op::attributes`]: super::Op::attributes

use super::{ArgReduceOp, BinaryOp, ReduceOp, UnaryOp};
use crate::hash::HashMap;
use crate::DType;
use std::fmt;
use std::sync::OnceLock;

/// How many tensor operands an op takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// This many or more (`concat`).
    AtLeast(usize),
}

/// The type of an attribute's value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AttrType {
    /// An integer: `axis=-1`.
    Int,
    /// A number; an integer is read as a float: `eps=1e-5`, `value=0`.
    Float,
    /// `true` or `false`.
    Bool,
    /// A list of integers: `axes=[0, 2]`.
    Ints,
    /// A dtype: `to=f16`.
    DType,
    /// A string: `approximate="tanh"`.
    Str,
}

impl fmt::Display for AttrType {
    /// How a message asks for a value of this type (`an integer`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrType::Int => f.write_str("an integer"),
            AttrType::Float => f.write_str("a number"),
            AttrType::Bool => f.write_str("true or false"),
            AttrType::Ints => f.write_str("a list of integers"),
            AttrType::DType => write!(f, "a dtype ({})", DType::name_list()),
            AttrType::Str => f.write_str("a string"),
        }
    }
}

/// What an op does with an attribute that is not given.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum AttrDefault {
    /// Nothing: the attribute must be given.
    Required,
    /// Something no value says: every axis (`sum`), the flattened tensor (`argmax`).
    Absent,
    /// Uses this integer.
    Int(i64),
    /// Uses this number.
    Float(f64),
    /// Uses this truth value.
    Bool(bool),
    /// Uses this dtype.
    DType(DType),
    /// Uses this string.
    Str(&'static str),
}

/// A rule a well-typed attribute value must keep.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rule {
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// An integer no smaller than this.
    AtLeast(i64),
    /// A list of extents: no entry is negative.
    Extents,
    /// A finite number other than zero.
    FiniteNonZero,
}

/// One attribute of an op.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AttrSpec {
    /// The key in `key=value`.
    pub name: &'static str,
    /// The type of the value.
    pub ty: AttrType,
    /// What leaving it out means.
    pub default: AttrDefault,
    /// What a value must satisfy beyond its type, if anything.
    pub rule: Option<Rule>,
}

/// One op of the `.fg` text.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct OpSpec {
    /// The name it is called by.
    pub name: &'static str,
    /// Its tensor operands.
    pub arity: Arity,
    /// Its attributes, in the order the printer writes them.
    pub attrs: &'static [AttrSpec],
    /// The [`Op`](super::Op) variant it builds.
    pub(super) kind: Kind,
}

impl OpSpec {
    /// The op called `name`, if there is one.
    pub fn find(name: &str) -> Option<&'static OpSpec> {
        OPS.iter().find(|s| s.name == name)
    }

    /// The attribute called `name`, if the op has one.
    pub fn attr(&self, name: &str) -> Option<&'static AttrSpec> {
        self.attrs.iter().find(|a| a.name == name)
    }

    /// The entry of an op kind. Every kind has one (a unit test checks).
    pub(super) fn of(kind: Kind) -> &'static OpSpec {
        // Indexed once: a scan of the table was 2% of compiling a conv net (names of
        // ops in kernel names and refusals).
        static INDEX: OnceLock<HashMap<Kind, &'static OpSpec>> = OnceLock::new();
        INDEX.get_or_init(|| OPS.iter().rev().map(|s| (s.kind, s)).collect())[&kind]
    }
}

/// The variant of [`Op`](super::Op) an entry builds, without attribute values.
/// `gelu` builds [`UnaryOp::Gelu`] or, with `approximate="tanh"`, [`UnaryOp::GeluTanh`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Kind {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Where,
    Cast,
    Reduce(ReduceOp),
    ArgReduce(ArgReduceOp),
    Softmax,
    LogSoftmax,
    LayerNorm,
    RmsNorm,
    MatMul,
    Reshape,
    Permute,
    Transpose,
    Expand,
    Squeeze,
    Unsqueeze,
    Slice,
    Concat,
    Pad,
    IndexSelect,
    Gather,
    IndexAdd,
    IndexReduce,
    EmbeddingBag,
    Full,
    Arange,
    Conv,
    ConvTranspose,
    MaxPool,
    AvgPool,
    BatchNorm,
    Clip,
}

const fn op(name: &'static str, kind: Kind, arity: Arity, attrs: &'static [AttrSpec]) -> OpSpec {
    OpSpec {
        name,
        arity,
        attrs,
        kind,
    }
}

/// An attribute that must be given.
const fn req(name: &'static str, ty: AttrType) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        default: AttrDefault::Required,
        rule: None,
    }
}

/// An attribute whose absence means something of its own.
const fn absent(name: &'static str, ty: AttrType) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        default: AttrDefault::Absent,
        rule: None,
    }
}

/// An attribute with a default value (its type is the default's).
const fn opt(name: &'static str, default: AttrDefault) -> AttrSpec {
    let ty = match default {
        AttrDefault::Int(_) => AttrType::Int,
        AttrDefault::Float(_) => AttrType::Float,
        AttrDefault::Bool(_) => AttrType::Bool,
        AttrDefault::DType(_) => AttrType::DType,
        AttrDefault::Str(_) | AttrDefault::Required | AttrDefault::Absent => AttrType::Str,
    };
    AttrSpec {
        name,
        ty,
        default,
        rule: None,
    }
}

impl AttrSpec {
    const fn rule(self, rule: Rule) -> AttrSpec {
        AttrSpec {
            rule: Some(rule),
            ..self
        }
    }
}

use Arity::{AtLeast, Exactly};
use AttrDefault as D;
use AttrType::{DType as Dt, Float, Int, Ints};
use Kind as K;

const NONE: &[AttrSpec] = &[];
const AXIS: &[AttrSpec] = &[req("axis", Int)];
const SOFTMAX: &[AttrSpec] = &[opt("axis", D::Int(-1))];
const REDUCE: &[AttrSpec] = &[absent("axes", Ints), opt("keepdim", D::Bool(false))];
const ARG_REDUCE: &[AttrSpec] = &[absent("axis", Int), opt("keepdim", D::Bool(false))];
const CONV: &[AttrSpec] = &[
    absent("stride", Ints),
    absent("padding", Ints),
    absent("dilation", Ints),
    opt("groups", D::Int(1)).rule(Rule::AtLeast(1)),
];
const CONV_TRANSPOSE: &[AttrSpec] = &[
    absent("stride", Ints),
    absent("padding", Ints),
    absent("output_padding", Ints),
    absent("dilation", Ints),
    opt("groups", D::Int(1)).rule(Rule::AtLeast(1)),
];
const MAX_POOL: &[AttrSpec] = &[
    req("kernel", Ints),
    absent("stride", Ints),
    absent("padding", Ints),
    absent("dilation", Ints),
    opt("ceil_mode", D::Bool(false)),
];
const AVG_POOL: &[AttrSpec] = &[
    req("kernel", Ints),
    absent("stride", Ints),
    absent("padding", Ints),
    absent("dilation", Ints),
    opt("ceil_mode", D::Bool(false)),
    opt("count_include_pad", D::Bool(true)),
];

/// Every op `.fg` text can call. Suggestions for a misspelled name go to the
/// first of the closest, so the order is part of the language.
#[rustfmt::skip]
pub static OPS: [OpSpec; 81] = [
    //  name            builds                             operands     attributes
    op("neg",           K::Unary(UnaryOp::Neg),            Exactly(1),  NONE),
    op("abs",           K::Unary(UnaryOp::Abs),            Exactly(1),  NONE),
    op("exp",           K::Unary(UnaryOp::Exp),            Exactly(1),  NONE),
    op("log",           K::Unary(UnaryOp::Log),            Exactly(1),  NONE),
    op("sqrt",          K::Unary(UnaryOp::Sqrt),           Exactly(1),  NONE),
    op("rsqrt",         K::Unary(UnaryOp::Rsqrt),          Exactly(1),  NONE),
    op("reciprocal",    K::Unary(UnaryOp::Reciprocal),     Exactly(1),  NONE),
    op("sin",           K::Unary(UnaryOp::Sin),            Exactly(1),  NONE),
    op("cos",           K::Unary(UnaryOp::Cos),            Exactly(1),  NONE),
    op("tanh",          K::Unary(UnaryOp::Tanh),           Exactly(1),  NONE),
    op("sigmoid",       K::Unary(UnaryOp::Sigmoid),        Exactly(1),  NONE),
    op("relu",          K::Unary(UnaryOp::Relu),           Exactly(1),  NONE),
    op("gelu",          K::Unary(UnaryOp::Gelu),           Exactly(1),  &[
        opt("approximate", D::Str("none")).rule(Rule::OneOf(&["none", "tanh"])),
    ]),
    op("silu",          K::Unary(UnaryOp::Silu),           Exactly(1),  NONE),
    op("erf",           K::Unary(UnaryOp::Erf),            Exactly(1),  NONE),
    op("erfc",          K::Unary(UnaryOp::Erfc),           Exactly(1),  NONE),
    op("floor",         K::Unary(UnaryOp::Floor),          Exactly(1),  NONE),
    op("ceil",          K::Unary(UnaryOp::Ceil),           Exactly(1),  NONE),
    op("sign",          K::Unary(UnaryOp::Sign),           Exactly(1),  NONE),
    op("not",           K::Unary(UnaryOp::Not),            Exactly(1),  NONE),
    op("add",           K::Binary(BinaryOp::Add),          Exactly(2),  NONE),
    op("sub",           K::Binary(BinaryOp::Sub),          Exactly(2),  NONE),
    op("mul",           K::Binary(BinaryOp::Mul),          Exactly(2),  NONE),
    op("div",           K::Binary(BinaryOp::Div),          Exactly(2),  NONE),
    op("pow",           K::Binary(BinaryOp::Pow),          Exactly(2),  NONE),
    op("floor_divide",  K::Binary(BinaryOp::FloorDivide),  Exactly(2),  NONE),
    op("trunc_divide",  K::Binary(BinaryOp::TruncDivide),  Exactly(2),  NONE),
    op("remainder",     K::Binary(BinaryOp::Remainder),    Exactly(2),  NONE),
    op("fmod",          K::Binary(BinaryOp::Fmod),         Exactly(2),  NONE),
    op("maximum",       K::Binary(BinaryOp::Maximum),      Exactly(2),  NONE),
    op("minimum",       K::Binary(BinaryOp::Minimum),      Exactly(2),  NONE),
    op("eq",            K::Binary(BinaryOp::Eq),           Exactly(2),  NONE),
    op("ne",            K::Binary(BinaryOp::Ne),           Exactly(2),  NONE),
    op("lt",            K::Binary(BinaryOp::Lt),           Exactly(2),  NONE),
    op("le",            K::Binary(BinaryOp::Le),           Exactly(2),  NONE),
    op("gt",            K::Binary(BinaryOp::Gt),           Exactly(2),  NONE),
    op("ge",            K::Binary(BinaryOp::Ge),           Exactly(2),  NONE),
    op("and",           K::Binary(BinaryOp::And),          Exactly(2),  NONE),
    op("or",            K::Binary(BinaryOp::Or),           Exactly(2),  NONE),
    op("bitwise_and",   K::Binary(BinaryOp::BitwiseAnd),   Exactly(2),  NONE),
    op("bitwise_or",    K::Binary(BinaryOp::BitwiseOr),    Exactly(2),  NONE),
    op("bitwise_xor",   K::Binary(BinaryOp::BitwiseXor),   Exactly(2),  NONE),
    op("bitwise_not",   K::Unary(UnaryOp::BitwiseNot),     Exactly(1),  NONE),
    op("bitwise_left_shift", K::Binary(BinaryOp::LeftShift), Exactly(2), NONE),
    op("bitwise_right_shift", K::Binary(BinaryOp::RightShift), Exactly(2), NONE),
    op("where",         K::Where,                          Exactly(3),  NONE),
    op("cast",          K::Cast,                           Exactly(1),  &[req("to", Dt)]),
    op("sum",           K::Reduce(ReduceOp::Sum),          Exactly(1),  REDUCE),
    op("mean",          K::Reduce(ReduceOp::Mean),         Exactly(1),  REDUCE),
    op("max",           K::Reduce(ReduceOp::Max),          Exactly(1),  REDUCE),
    op("min",           K::Reduce(ReduceOp::Min),          Exactly(1),  REDUCE),
    op("prod",          K::Reduce(ReduceOp::Prod),         Exactly(1),  REDUCE),
    op("argmax",        K::ArgReduce(ArgReduceOp::ArgMax), Exactly(1),  ARG_REDUCE),
    op("argmin",        K::ArgReduce(ArgReduceOp::ArgMin), Exactly(1),  ARG_REDUCE),
    op("softmax",       K::Softmax,                        Exactly(1),  SOFTMAX),
    op("log_softmax",   K::LogSoftmax,                     Exactly(1),  SOFTMAX),
    op("layer_norm",    K::LayerNorm,                      Exactly(3),  &[opt("eps", D::Float(1e-5))]),
    op("rms_norm",      K::RmsNorm,                        Exactly(2),  &[opt("eps", D::Float(1e-6))]),
    op("matmul",        K::MatMul,                         Exactly(2),  NONE),
    op("reshape",       K::Reshape,                        Exactly(1),  &[req("shape", Ints)]),
    op("permute",       K::Permute,                        Exactly(1),  &[req("dims", Ints)]),
    op("transpose",     K::Transpose,                      Exactly(1),  &[req("dim0", Int), req("dim1", Int)]),
    op("expand",        K::Expand,                         Exactly(1),  &[req("shape", Ints)]),
    op("squeeze",       K::Squeeze,                        Exactly(1),  &[absent("axes", Ints)]),
    op("unsqueeze",     K::Unsqueeze,                      Exactly(1),  AXIS),
    op("slice",         K::Slice,                          Exactly(1),  &[
        req("axis", Int),
        opt("start", D::Int(0)),
        opt("end", D::Int(i64::MAX)),
        opt("step", D::Int(1)).rule(Rule::AtLeast(1)),
    ]),
    op("concat",        K::Concat,                         AtLeast(1),  AXIS),
    op("pad",           K::Pad,                            Exactly(1),  &[req("pads", Ints), opt("value", D::Float(0.0))]),
    op("index_select",  K::IndexSelect,                    Exactly(2),  AXIS),
    op("gather",        K::Gather,                         Exactly(2),  AXIS),
    op("index_add",     K::IndexAdd,                       Exactly(3),  AXIS),
    op("index_reduce",  K::IndexReduce,                    Exactly(3),  &[
        req("axis", Int),
        req("reduce", AttrType::Str).rule(Rule::OneOf(&["prod", "mean", "amax", "amin"])),
        opt("include_self", D::Bool(true)),
    ]),
    op("embedding_bag", K::EmbeddingBag,                   AtLeast(3),  &[
        opt("mode", D::Str("sum")).rule(Rule::OneOf(&["sum", "mean", "max"])),
        opt("include_last_offset", D::Bool(false)),
        absent("padding_idx", Int),
    ]),
    op("full",          K::Full,                           Exactly(0),  &[
        req("shape", Ints).rule(Rule::Extents),
        req("value", Float),
        opt("dtype", D::DType(DType::F32)),
    ]),
    op("arange",        K::Arange,                         Exactly(0),  &[
        opt("start", D::Float(0.0)),
        req("end", Float),
        opt("step", D::Float(1.0)).rule(Rule::FiniteNonZero),
        opt("dtype", D::DType(DType::I64)),
    ]),
    op("conv",          K::Conv,                           Exactly(2),  CONV),
    op("conv_transpose", K::ConvTranspose,                 Exactly(2),  CONV_TRANSPOSE),
    op("max_pool",      K::MaxPool,                        Exactly(1),  MAX_POOL),
    op("avg_pool",      K::AvgPool,                        Exactly(1),  AVG_POOL),
    op("batch_norm",    K::BatchNorm,                      Exactly(5),  &[opt("eps", D::Float(1e-5))]),
    op("clip",          K::Clip,                           Exactly(1),  &[absent("min", Float), absent("max", Float)]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{AttrValue, Op};

    /// A value of the attribute's type that keeps its rule and is not its default.
    fn sample(a: &AttrSpec) -> AttrValue {
        match (a.ty, a.rule) {
            (AttrType::Str, Some(Rule::OneOf(choices))) => {
                let other = choices.iter().find(|c| a.default != AttrDefault::Str(c));
                AttrValue::Str(other.expect("a choice besides the default").to_string())
            }
            (AttrType::Int, _) => AttrValue::Int(2),
            (AttrType::Float, _) => AttrValue::Float(0.5),
            (AttrType::Bool, _) => AttrValue::Bool(a.default != AttrDefault::Bool(true)),
            (AttrType::Ints, _) => AttrValue::Ints(vec![1, 2]),
            (AttrType::DType, _) => AttrValue::DType(DType::F16),
            (AttrType::Str, _) => AttrValue::Str("s".into()),
        }
    }

    fn call(spec: &OpSpec, attrs: &[(&str, AttrValue)]) -> Op {
        let pairs: Vec<(String, AttrValue)> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        match Op::from_call(spec.name, &pairs) {
            Ok(Some(op)) => op,
            other => panic!("{}({pairs:?}): {other:?}", spec.name),
        }
    }

    #[test]
    fn names_are_unique_and_every_kind_has_an_entry() {
        for (i, s) in OPS.iter().enumerate() {
            assert!(OPS[..i].iter().all(|t| t.name != s.name), "{}", s.name);
            assert!(OPS[..i].iter().all(|t| t.kind != s.kind), "{}", s.name);
            assert_eq!(OpSpec::find(s.name), Some(s));
            for (j, a) in s.attrs.iter().enumerate() {
                assert!(s.attrs[..j].iter().all(|b| b.name != a.name), "{}", a.name);
            }
        }
        for u in UnaryOp::ALL {
            assert_eq!(Op::Unary(u).spec().map(|s| s.name), Some(u.name()));
        }
        for b in BinaryOp::ALL {
            assert_eq!(
                OpSpec::find(b.name()).map(|s| s.kind),
                Some(Kind::Binary(b))
            );
        }
        for r in ReduceOp::ALL {
            assert_eq!(
                OpSpec::find(r.name()).map(|s| s.kind),
                Some(Kind::Reduce(r))
            );
        }
        for r in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
            assert_eq!(
                OpSpec::find(r.name()).map(|s| s.kind),
                Some(Kind::ArgReduce(r))
            );
        }
        assert_eq!(UnaryOp::GeluTanh.name(), "gelu");
        assert_eq!(OpSpec::find("param"), None);
        assert_eq!(OpSpec::find("relu6"), None);
    }

    /// Every op builds from its required attributes, and every attribute given a
    /// value other than its default prints back with that value and parses back
    /// to the same op.
    #[test]
    fn every_op_parses_and_prints_back_from_its_entry() {
        for spec in &OPS {
            let required: Vec<(&str, AttrValue)> = spec
                .attrs
                .iter()
                .filter(|a| a.default == AttrDefault::Required)
                .map(|a| (a.name, sample(a)))
                .collect();
            let op = call(spec, &required);
            assert_eq!(op.name(), spec.name);
            assert_eq!(op.spec(), Some(spec));
            let arity = match spec.arity {
                Arity::Exactly(n) => Some(n),
                Arity::AtLeast(_) => None,
            };
            assert_eq!(op.arity(), arity, "{}", spec.name);
            let printed = op.attributes();
            let names: Vec<&str> = printed.iter().map(|(k, _)| *k).collect();
            let want: Vec<&str> = required.iter().map(|(k, _)| *k).collect();
            assert_eq!(names, want, "{}", spec.name);

            let all: Vec<(&str, AttrValue)> =
                spec.attrs.iter().map(|a| (a.name, sample(a))).collect();
            let op = call(spec, &all);
            let printed = op.attributes();
            assert_eq!(printed, all, "{}", spec.name);
            assert_eq!(call(spec, &printed), op, "{}", spec.name);
        }
    }

    /// An attribute given its default value builds the same op as leaving it out,
    /// and the printer leaves it out.
    #[test]
    fn every_default_round_trips() {
        for spec in &OPS {
            let required: Vec<(&str, AttrValue)> = spec
                .attrs
                .iter()
                .filter(|a| a.default == AttrDefault::Required)
                .map(|a| (a.name, sample(a)))
                .collect();
            let plain = call(spec, &required);
            for a in spec.attrs {
                let default = match a.default {
                    AttrDefault::Required | AttrDefault::Absent => continue,
                    AttrDefault::Int(v) => AttrValue::Int(v),
                    AttrDefault::Float(v) => AttrValue::Float(v),
                    AttrDefault::Bool(v) => AttrValue::Bool(v),
                    AttrDefault::DType(d) => AttrValue::DType(d),
                    AttrDefault::Str(s) => AttrValue::Str(s.into()),
                };
                let mut given = required.clone();
                given.push((a.name, default));
                let op = call(spec, &given);
                assert_eq!(op, plain, "{} {}", spec.name, a.name);
                assert!(op.attributes().iter().all(|(k, _)| *k != a.name));
            }
        }
    }
}

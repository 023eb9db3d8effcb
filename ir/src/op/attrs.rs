//! Attributes: values as written after `key=`, reading them into an [`Op`] by the
//! op table, writing them back out, and the typed error of a bad attribute.

use super::table::{AttrDefault, AttrType, Kind, OpSpec, Rule};
use super::{BagMode, IndexReduceOp, Op, Scalar, UnaryOp};
use crate::spelling::{edit_distance, threshold};
use crate::DType;
use std::fmt;

/// An attribute value, as it appears after `key=` in `.fg` text.
#[derive(Clone, PartialEq, Debug)]
pub enum AttrValue {
    /// `3`, `-1`
    Int(i64),
    /// `1e-5`, `0.5`
    Float(f64),
    /// `true` / `false`
    Bool(bool),
    /// `[0, 2, 1]`
    Ints(Vec<i64>),
    /// `f16`
    DType(DType),
    /// `"tanh"`
    Str(String),
    /// `[0.5, -1, true]`: the `values=` of an inline `constant`, when not every value
    /// is an integer.
    Values(Vec<Scalar>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => f.write_str(&format_float(*v)),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Ints(vs) => {
                f.write_str("[")?;
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
            AttrValue::Values(vs) => {
                f.write_str("[")?;
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match v {
                        Scalar::Float(x) => f.write_str(&format_float(*x))?,
                        Scalar::Int(x) => write!(f, "{x}")?,
                        Scalar::Bool(x) => write!(f, "{x}")?,
                    }
                }
                f.write_str("]")
            }
        }
    }
}

/// Formats a float so that it reads back as a float with the same value
/// (`2.0`, `1e-5`, `inf`, `nan`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{v:?}")
    }
}

/// Why [`Op::from_call`] rejected an op's attributes.
#[derive(Clone, PartialEq, Debug)]
pub struct AttrError {
    /// The op, as named in text.
    pub op: &'static str,
    /// The attribute at fault: as given, or for [`AttrErrorKind::Missing`] as the op names it.
    pub attribute: String,
    /// What is wrong with it.
    pub kind: AttrErrorKind,
}

/// What is wrong with an attribute.
#[derive(Clone, PartialEq, Debug)]
#[non_exhaustive]
pub enum AttrErrorKind {
    /// The op has no attribute of that name; `suggestion` is the closest one it has, if any is close.
    Unknown {
        /// A known attribute a few edits away.
        suggestion: Option<&'static str>,
    },
    /// A required attribute is not given; `misspelling` is a given one whose name is close to it.
    Missing {
        /// The given attribute that is probably the missing one misspelled.
        misspelling: Option<String>,
    },
    /// The attribute is given more than once.
    Duplicate,
    /// The value has the wrong type.
    IllTyped {
        /// The type the op table gives the attribute.
        expected: AttrType,
        /// The value as given.
        got: AttrValue,
    },
    /// The value has the right type but breaks the attribute's rule.
    OutOfRange {
        /// The rule it breaks.
        rule: Rule,
        /// The value as read.
        got: AttrValue,
    },
}

impl fmt::Display for AttrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, key) = (self.op, &self.attribute);
        match &self.kind {
            AttrErrorKind::Unknown { suggestion } => {
                write!(f, "{op}: unknown attribute `{key}`")?;
                if let Some(s) = suggestion {
                    write!(f, "; did you mean `{s}`?")?;
                }
                Ok(())
            }
            AttrErrorKind::Missing { misspelling } => {
                write!(f, "{op}: missing required attribute `{key}`")?;
                if let Some(m) = misspelling {
                    write!(f, " (is `{m}` a misspelling?)")?;
                }
                Ok(())
            }
            AttrErrorKind::Duplicate => write!(f, "{op}: attribute `{key}` given twice"),
            AttrErrorKind::IllTyped { expected, got } => {
                write!(f, "{op}: attribute `{key}` must be {expected}, not `{got}`")
            }
            AttrErrorKind::OutOfRange { rule, got } => {
                write!(f, "{op}: {key} ")?;
                match (rule, got) {
                    (Rule::OneOf(choices), _) => {
                        f.write_str("must be ")?;
                        for (i, c) in choices.iter().enumerate() {
                            let sep = match i {
                                0 => "",
                                _ if i + 1 == choices.len() => " or ",
                                _ => ", ",
                            };
                            write!(f, "{sep}{c:?}")?;
                        }
                        write!(f, ", not {got}")
                    }
                    (Rule::AtLeast(min), _) => write!(f, "must be at least {min}, not {got}"),
                    (Rule::Extents, AttrValue::Ints(vs)) => {
                        let d = vs.iter().find(|&&d| d < 0).unwrap_or(&0);
                        write!(f, "extents must be >= 0, not {d}")
                    }
                    (Rule::Extents, _) => write!(f, "extents must be >= 0, not {got}"),
                    (Rule::FiniteNonZero, _) => f.write_str("must be finite and non-zero"),
                }
            }
        }
    }
}

impl std::error::Error for AttrError {}

impl AttrType {
    /// `value` as an attribute of this type (an integer reads as a number), or
    /// `None` if it has another type.
    fn accept(self, value: &AttrValue) -> Option<AttrValue> {
        match (self, value) {
            (AttrType::Float, AttrValue::Int(v)) => Some(AttrValue::Float(*v as f64)),
            (AttrType::Int, AttrValue::Int(_))
            | (AttrType::Float, AttrValue::Float(_))
            | (AttrType::Bool, AttrValue::Bool(_))
            | (AttrType::Ints, AttrValue::Ints(_))
            | (AttrType::DType, AttrValue::DType(_))
            | (AttrType::Str, AttrValue::Str(_)) => Some(value.clone()),
            _ => None,
        }
    }
}

impl Rule {
    /// True if a value of the attribute's type keeps the rule.
    fn allows(self, value: &AttrValue) -> bool {
        match (self, value) {
            (Rule::OneOf(choices), AttrValue::Str(s)) => choices.contains(&s.as_str()),
            (Rule::AtLeast(min), AttrValue::Int(v)) => *v >= min,
            (Rule::Extents, AttrValue::Ints(vs)) => vs.iter().all(|&d| d >= 0),
            (Rule::FiniteNonZero, AttrValue::Float(v)) => v.is_finite() && *v != 0.0,
            _ => false,
        }
    }
}

impl AttrDefault {
    /// The value an absent attribute takes (`None` for required and absent ones).
    fn value(self) -> Option<AttrValue> {
        Some(match self {
            AttrDefault::Required | AttrDefault::Absent => return None,
            AttrDefault::Int(v) => AttrValue::Int(v),
            AttrDefault::Float(v) => AttrValue::Float(v),
            AttrDefault::Bool(v) => AttrValue::Bool(v),
            AttrDefault::DType(d) => AttrValue::DType(d),
            AttrDefault::Str(s) => AttrValue::Str(s.to_string()),
        })
    }

    /// True if `value` is this default. Floats compare by bits, so `-0.0` is not
    /// the default `0.0` (and prints).
    fn is(self, value: &AttrValue) -> bool {
        match (self, value) {
            (AttrDefault::Float(d), AttrValue::Float(v)) => d.to_bits() == v.to_bits(),
            _ => self.value().as_ref() == Some(value),
        }
    }
}

/// Builds the op of `spec` from the attributes given in a call.
///
/// Each attribute is checked for its type, then its presence, then its rule;
/// attributes that have a rule are checked first, the others in table order.
/// Unknown and repeated keys are reported after that, in the order given.
pub(super) fn read(spec: &'static OpSpec, given: &[(String, AttrValue)]) -> Result<Op, AttrError> {
    let error = |attribute: &str, kind| AttrError {
        op: spec.name,
        attribute: attribute.to_string(),
        kind,
    };
    let mut used = vec![false; given.len()];
    let mut values = vec![None; spec.attrs.len()];
    let (ruled, plain): (Vec<_>, Vec<_>) =
        (0..spec.attrs.len()).partition(|&i| spec.attrs[i].rule.is_some());
    for i in ruled.into_iter().chain(plain) {
        let a = &spec.attrs[i];
        values[i] = match given.iter().position(|(k, _)| k == a.name) {
            Some(g) => {
                used[g] = true;
                let got = &given[g].1;
                let v = a.ty.accept(got).ok_or_else(|| {
                    error(
                        a.name,
                        AttrErrorKind::IllTyped {
                            expected: a.ty,
                            got: got.clone(),
                        },
                    )
                })?;
                if let Some(rule) = a.rule.filter(|r| !r.allows(&v)) {
                    return Err(error(a.name, AttrErrorKind::OutOfRange { rule, got: v }));
                }
                Some(v)
            }
            None if a.default == AttrDefault::Required => {
                let misspelling = given
                    .iter()
                    .map(|(k, _)| k)
                    .find(|k| *k != a.name && edit_distance(k, a.name) <= threshold(a.name))
                    .cloned();
                return Err(error(a.name, AttrErrorKind::Missing { misspelling }));
            }
            None => a.default.value(),
        };
    }
    for (i, (key, _)) in given.iter().enumerate() {
        if given[..i].iter().any(|(k, _)| k == key) {
            return Err(error(key, AttrErrorKind::Duplicate));
        }
        if !used[i] {
            let suggestion = suggest(spec, given, key);
            return Err(error(key, AttrErrorKind::Unknown { suggestion }));
        }
    }
    Ok(build(spec.kind, &Values(values)))
}

/// The attribute of `spec` closest to the unknown `key`, among those not given
/// already; ties go to the first in the table.
fn suggest(spec: &OpSpec, given: &[(String, AttrValue)], key: &str) -> Option<&'static str> {
    let mut best: Option<(usize, &'static str)> = None;
    for a in spec.attrs {
        if given.iter().any(|(k, _)| k == a.name) {
            continue;
        }
        let d = edit_distance(key, a.name);
        if d <= threshold(key) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, a.name));
        }
    }
    best.map(|(_, name)| name)
}

/// The attributes printed for `op`: every required one, and optional ones whose
/// value differs from the default.
pub(super) fn written(op: &Op) -> Vec<(&'static str, AttrValue)> {
    let Some(spec) = op.spec() else {
        return Vec::new();
    };
    spec.attrs
        .iter()
        .zip(values(op))
        .filter_map(|(a, v)| Some((a.name, v.filter(|v| !a.default.is(v))?)))
        .collect()
}

/// An op's attribute values, one per attribute of its table entry, in order
/// (`None` for an absent attribute that has no value).
fn values(op: &Op) -> Vec<Option<AttrValue>> {
    use AttrValue as A;
    let int = |v: i64| Some(A::Int(v));
    let float = |v: f64| Some(A::Float(v));
    let ints = |v: &Vec<i64>| Some(A::Ints(v.clone()));
    match op {
        Op::Param { .. }
        | Op::Literal { .. }
        | Op::Constant(_)
        | Op::Binary(_)
        | Op::Where
        | Op::MatMul => vec![],
        Op::Unary(UnaryOp::Gelu) => vec![Some(A::Str("none".into()))],
        Op::Unary(UnaryOp::GeluTanh) => vec![Some(A::Str("tanh".into()))],
        Op::Unary(_) => vec![],
        Op::Cast { to } => vec![Some(A::DType(*to))],
        Op::Reduce { axes, keepdim, .. } => {
            vec![axes.as_ref().and_then(ints), Some(A::Bool(*keepdim))]
        }
        Op::ArgReduce { axis, keepdim, .. } => vec![axis.and_then(int), Some(A::Bool(*keepdim))],
        Op::Softmax { axis } | Op::LogSoftmax { axis } => vec![int(*axis)],
        Op::LayerNorm { eps } | Op::RmsNorm { eps } => vec![float(*eps)],
        Op::Reshape { shape } | Op::Expand { shape } => vec![ints(shape)],
        Op::Permute { dims } => vec![ints(dims)],
        Op::Transpose { dim0, dim1 } => vec![int(*dim0), int(*dim1)],
        Op::Squeeze { axes } => vec![axes.as_ref().and_then(ints)],
        Op::Unsqueeze { axis }
        | Op::Concat { axis }
        | Op::IndexSelect { axis }
        | Op::Gather { axis }
        | Op::IndexAdd { axis } => vec![int(*axis)],
        Op::IndexReduce {
            axis,
            reduce,
            include_self,
        } => vec![
            int(*axis),
            Some(A::Str(reduce.name().into())),
            Some(A::Bool(*include_self)),
        ],
        Op::EmbeddingBag {
            mode,
            include_last_offset,
            padding_idx,
        } => vec![
            Some(A::Str(mode.name().into())),
            Some(A::Bool(*include_last_offset)),
            padding_idx.and_then(int),
        ],
        Op::Slice {
            axis,
            start,
            end,
            step,
        } => vec![int(*axis), int(*start), int(*end), int(*step)],
        Op::Pad { pads, value } => vec![ints(pads), float(*value)],
        Op::Full {
            shape,
            value,
            dtype,
        } => vec![
            Some(A::Ints(shape.iter().map(|&d| d as i64).collect())),
            float(*value),
            Some(A::DType(*dtype)),
        ],
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => vec![
            float(*start),
            float(*end),
            float(*step),
            Some(A::DType(*dtype)),
        ],
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
        } => vec![
            stride.as_ref().and_then(ints),
            padding.as_ref().and_then(ints),
            dilation.as_ref().and_then(ints),
            int(*groups),
        ],
        Op::ConvTranspose {
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        } => vec![
            stride.as_ref().and_then(ints),
            padding.as_ref().and_then(ints),
            output_padding.as_ref().and_then(ints),
            dilation.as_ref().and_then(ints),
            int(*groups),
        ],
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        } => vec![
            ints(kernel),
            stride.as_ref().and_then(ints),
            padding.as_ref().and_then(ints),
            dilation.as_ref().and_then(ints),
            Some(A::Bool(*ceil_mode)),
        ],
        Op::AvgPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
            count_include_pad,
        } => vec![
            ints(kernel),
            stride.as_ref().and_then(ints),
            padding.as_ref().and_then(ints),
            dilation.as_ref().and_then(ints),
            Some(A::Bool(*ceil_mode)),
            Some(A::Bool(*count_include_pad)),
        ],
        Op::BatchNorm { eps } => vec![float(*eps)],
        Op::Clip { min, max } => vec![min.and_then(float), max.and_then(float)],
    }
}

/// Attribute values that [`read`] checked against the table: one per attribute,
/// each of the attribute's type, present unless the attribute is absent.
struct Values(Vec<Option<AttrValue>>);

impl Values {
    fn get(&self, i: usize) -> Option<&AttrValue> {
        self.0.get(i).and_then(Option::as_ref)
    }

    fn opt_int(&self, i: usize) -> Option<i64> {
        match self.get(i) {
            None => None,
            Some(AttrValue::Int(v)) => Some(*v),
            Some(_) => self.mismatch(i),
        }
    }

    fn int(&self, i: usize) -> i64 {
        self.opt_int(i).unwrap_or_else(|| self.mismatch(i))
    }

    fn float(&self, i: usize) -> f64 {
        match self.get(i) {
            Some(AttrValue::Float(v)) => *v,
            _ => self.mismatch(i),
        }
    }

    fn opt_float(&self, i: usize) -> Option<f64> {
        match self.get(i) {
            None => None,
            Some(AttrValue::Float(v)) => Some(*v),
            Some(_) => self.mismatch(i),
        }
    }

    fn bool(&self, i: usize) -> bool {
        match self.get(i) {
            Some(AttrValue::Bool(v)) => *v,
            _ => self.mismatch(i),
        }
    }

    fn opt_ints(&self, i: usize) -> Option<Vec<i64>> {
        match self.get(i) {
            None => None,
            Some(AttrValue::Ints(v)) => Some(v.clone()),
            Some(_) => self.mismatch(i),
        }
    }

    fn ints(&self, i: usize) -> Vec<i64> {
        self.opt_ints(i).unwrap_or_else(|| self.mismatch(i))
    }

    fn dtype(&self, i: usize) -> DType {
        match self.get(i) {
            Some(AttrValue::DType(d)) => *d,
            _ => self.mismatch(i),
        }
    }

    fn str(&self, i: usize) -> &str {
        match self.get(i) {
            Some(AttrValue::Str(s)) => s,
            _ => self.mismatch(i),
        }
    }

    /// A value [`build`] reads differs in type from its table entry: a bug in
    /// this file, which the op-table tests build every op to catch.
    fn mismatch(&self, i: usize) -> ! {
        panic!("attribute {i} is not what the op table says: {:?}", self.0)
    }
}

/// The op of `kind` with attribute values `v`, in its table entry's order.
fn build(kind: Kind, v: &Values) -> Op {
    match kind {
        Kind::Unary(UnaryOp::Gelu) if v.str(0) == "tanh" => Op::Unary(UnaryOp::GeluTanh),
        Kind::Unary(u) => Op::Unary(u),
        Kind::Binary(b) => Op::Binary(b),
        Kind::Where => Op::Where,
        Kind::Cast => Op::Cast { to: v.dtype(0) },
        Kind::Reduce(op) => Op::Reduce {
            op,
            axes: v.opt_ints(0),
            keepdim: v.bool(1),
        },
        Kind::ArgReduce(op) => Op::ArgReduce {
            op,
            axis: v.opt_int(0),
            keepdim: v.bool(1),
        },
        Kind::Softmax => Op::Softmax { axis: v.int(0) },
        Kind::LogSoftmax => Op::LogSoftmax { axis: v.int(0) },
        Kind::LayerNorm => Op::LayerNorm { eps: v.float(0) },
        Kind::RmsNorm => Op::RmsNorm { eps: v.float(0) },
        Kind::MatMul => Op::MatMul,
        Kind::Reshape => Op::Reshape { shape: v.ints(0) },
        Kind::Permute => Op::Permute { dims: v.ints(0) },
        Kind::Transpose => Op::Transpose {
            dim0: v.int(0),
            dim1: v.int(1),
        },
        Kind::Expand => Op::Expand { shape: v.ints(0) },
        Kind::Squeeze => Op::Squeeze {
            axes: v.opt_ints(0),
        },
        Kind::Unsqueeze => Op::Unsqueeze { axis: v.int(0) },
        Kind::Slice => Op::Slice {
            axis: v.int(0),
            start: v.int(1),
            end: v.int(2),
            step: v.int(3),
        },
        Kind::Concat => Op::Concat { axis: v.int(0) },
        Kind::Pad => Op::Pad {
            pads: v.ints(0),
            value: v.float(1),
        },
        Kind::IndexSelect => Op::IndexSelect { axis: v.int(0) },
        Kind::Gather => Op::Gather { axis: v.int(0) },
        Kind::IndexAdd => Op::IndexAdd { axis: v.int(0) },
        Kind::IndexReduce => Op::IndexReduce {
            axis: v.int(0),
            reduce: match v.str(1) {
                "prod" => IndexReduceOp::Prod,
                "mean" => IndexReduceOp::Mean,
                "amax" => IndexReduceOp::Amax,
                // `Rule::OneOf` has checked the value.
                _ => IndexReduceOp::Amin,
            },
            include_self: v.bool(2),
        },
        Kind::EmbeddingBag => Op::EmbeddingBag {
            mode: match v.str(0) {
                "mean" => BagMode::Mean,
                "max" => BagMode::Max,
                // `Rule::OneOf` has checked the value.
                _ => BagMode::Sum,
            },
            include_last_offset: v.bool(1),
            padding_idx: v.opt_int(2),
        },
        Kind::Full => Op::Full {
            // `Rule::Extents` has checked that no extent is negative.
            shape: v.ints(0).into_iter().map(|d| d as usize).collect(),
            value: v.float(1),
            dtype: v.dtype(2),
        },
        Kind::Arange => Op::Arange {
            start: v.float(0),
            end: v.float(1),
            step: v.float(2),
            dtype: v.dtype(3),
        },
        Kind::Conv => Op::Conv {
            stride: v.opt_ints(0),
            padding: v.opt_ints(1),
            dilation: v.opt_ints(2),
            groups: v.int(3),
        },
        Kind::ConvTranspose => Op::ConvTranspose {
            stride: v.opt_ints(0),
            padding: v.opt_ints(1),
            output_padding: v.opt_ints(2),
            dilation: v.opt_ints(3),
            groups: v.int(4),
        },
        Kind::MaxPool => Op::MaxPool {
            kernel: v.ints(0),
            stride: v.opt_ints(1),
            padding: v.opt_ints(2),
            dilation: v.opt_ints(3),
            ceil_mode: v.bool(4),
        },
        Kind::AvgPool => Op::AvgPool {
            kernel: v.ints(0),
            stride: v.opt_ints(1),
            padding: v.opt_ints(2),
            dilation: v.opt_ints(3),
            ceil_mode: v.bool(4),
            count_include_pad: v.bool(5),
        },
        Kind::BatchNorm => Op::BatchNorm { eps: v.float(0) },
        Kind::Clip => Op::Clip {
            min: v.opt_float(0),
            max: v.opt_float(1),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(op: &str, attrs: &[(&str, AttrValue)]) -> AttrError {
        let pairs: Vec<(String, AttrValue)> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        match Op::from_call(op, &pairs) {
            Err(e) => e,
            Ok(op) => panic!("{op:?}"),
        }
    }

    #[test]
    fn unknown_attributes_suggest_one_the_op_knows() {
        let e = error("softmax", &[("axes", AttrValue::Int(-1))]);
        assert_eq!(e.attribute, "axes");
        assert_eq!(
            e.kind,
            AttrErrorKind::Unknown {
                suggestion: Some("axis")
            }
        );
        assert_eq!(
            e.to_string(),
            "softmax: unknown attribute `axes`; did you mean `axis`?"
        );
        // `sum` knows `axes` and `keepdim` but not `axis` or `step`.
        let e = error("sum", &[("axs", AttrValue::Ints(vec![0]))]);
        assert_eq!(
            e.kind,
            AttrErrorKind::Unknown {
                suggestion: Some("axes")
            }
        );
        let e = error("sum", &[("stp", AttrValue::Int(1))]);
        assert_eq!(e.kind, AttrErrorKind::Unknown { suggestion: None });
        assert_eq!(e.to_string(), "sum: unknown attribute `stp`");
        // An attribute already given is not suggested again.
        let e = error(
            "sum",
            &[
                ("axes", AttrValue::Ints(vec![0])),
                ("axis", AttrValue::Int(0)),
            ],
        );
        assert_eq!(
            (e.attribute.as_str(), e.kind),
            ("axis", AttrErrorKind::Unknown { suggestion: None })
        );
    }

    #[test]
    fn missing_attributes_name_a_likely_misspelling() {
        let e = error("reshape", &[]);
        assert_eq!(e.attribute, "shape");
        assert_eq!(e.kind, AttrErrorKind::Missing { misspelling: None });
        assert_eq!(e.to_string(), "reshape: missing required attribute `shape`");
        let e = error("reshape", &[("shap", AttrValue::Ints(vec![6]))]);
        assert_eq!(
            e.kind,
            AttrErrorKind::Missing {
                misspelling: Some("shap".into())
            }
        );
        assert_eq!(
            e.to_string(),
            "reshape: missing required attribute `shape` (is `shap` a misspelling?)"
        );
    }

    #[test]
    fn ill_typed_and_out_of_range_values() {
        let e = error("sum", &[("axes", AttrValue::Int(1))]);
        assert_eq!(e.attribute, "axes");
        assert_eq!(
            e.kind,
            AttrErrorKind::IllTyped {
                expected: AttrType::Ints,
                got: AttrValue::Int(1)
            }
        );
        assert_eq!(
            e.to_string(),
            "sum: attribute `axes` must be a list of integers, not `1`"
        );
        let e = error("cast", &[("to", AttrValue::Int(1))]);
        assert_eq!(
            e.to_string(),
            "cast: attribute `to` must be a dtype (f32, f16, bf16, i32, i64, bool, f64, i8, u8, i16, u16, u32, u64), not `1`"
        );
        let cases: [(&str, &str, AttrValue, &str); 4] = [
            (
                "gelu",
                "approximate",
                AttrValue::Str("fast".into()),
                "gelu: approximate must be \"none\" or \"tanh\", not \"fast\"",
            ),
            (
                "slice",
                "step",
                AttrValue::Int(0),
                "slice: step must be at least 1, not 0",
            ),
            (
                "full",
                "shape",
                AttrValue::Ints(vec![2, -3]),
                "full: shape extents must be >= 0, not -3",
            ),
            (
                "arange",
                "step",
                AttrValue::Int(0),
                "arange: step must be finite and non-zero",
            ),
        ];
        for (op, key, value, message) in cases {
            let e = error(
                op,
                &[
                    (key, value),
                    ("axis", AttrValue::Int(0)),
                    ("value", AttrValue::Int(0)),
                    ("end", AttrValue::Int(1)),
                ],
            );
            assert_eq!(e.attribute, key);
            assert!(matches!(e.kind, AttrErrorKind::OutOfRange { .. }), "{e:?}");
            assert_eq!(e.to_string(), message);
        }
        // An integer is a number: `value=0` reads as 0.0.
        let op = Op::from_call(
            "pad",
            &[
                ("pads".into(), AttrValue::Ints(vec![1, 1])),
                ("value".into(), AttrValue::Int(3)),
            ],
        );
        assert_eq!(
            op,
            Ok(Some(Op::Pad {
                pads: vec![1, 1],
                value: 3.0
            }))
        );
    }

    #[test]
    fn attributes_given_twice_and_unknown_ops() {
        let e = error(
            "softmax",
            &[("axis", AttrValue::Int(0)), ("axis", AttrValue::Int(1))],
        );
        assert_eq!(
            (e.attribute.as_str(), &e.kind),
            ("axis", &AttrErrorKind::Duplicate)
        );
        assert_eq!(e.to_string(), "softmax: attribute `axis` given twice");
        assert_eq!(
            Op::from_call("relu6", &[("axis".into(), AttrValue::Int(0))]),
            Ok(None)
        );
    }

    #[test]
    fn rules_are_checked_first() {
        // `step` has a rule, so it is checked before the missing `axis`.
        let e = error("slice", &[("step", AttrValue::Int(0))]);
        assert_eq!(e.attribute, "step");
    }
}

//! The passes tell the caller's mistakes from Ferrite's bugs: every error below is
//! caused by the input, so none is internal.

use ferrite_passes::optimize::{optimize, rewrite_once, OptimizeConfig};
use ferrite_passes::schedule::{schedule, ScheduleOptions};
use ferrite_passes::Error;
use ferrite_testkit::primitive;

/// A fill value its dtype cannot hold never reaches a pass: the typing rule rejects it
/// where it is written (reliability finding F01), so `Error::Unrepresentable` stays a
/// defence for graphs built some other way.
#[test]
fn a_fill_value_that_overflows_its_dtype_is_rejected_when_built() {
    let err = ferrite_ir::parse(
        "f.fg",
        "graph f(x: f16[2]) { return add(x, full(shape=[2], value=100000.0, dtype=f16)) }",
    )
    .unwrap_err();
    assert!(err.to_string().contains("without overflow"), "{err}");
    assert!(err.to_string().starts_with("f.fg:1:"), "{err}");
}

#[test]
fn an_unknown_rule_is_the_callers_mistake() {
    let g = primitive("graph r(x: f32[3]) { return neg(neg(x)) }");
    let err = rewrite_once(&g, "no-such-rule").unwrap_err();
    assert!(matches!(err, Error::UnknownRule(_)), "{err:?}");
    assert!(!err.is_internal());
}

#[test]
fn an_invalid_graph_is_the_callers_mistake() {
    let mut g = primitive("graph v(x: f32[3]) { return exp(x) }");
    g.outputs.clear();
    for err in [
        optimize(&g, &OptimizeConfig::default()).unwrap_err(),
        schedule(&g, &ScheduleOptions::default()).unwrap_err(),
        ferrite_passes::decompose::decompose(&g).unwrap_err(),
    ] {
        assert!(matches!(err, Error::InvalidGraph(_)), "{err:?}");
        assert!(!err.is_internal());
    }
}

#[test]
fn context_keeps_the_variant() {
    let e = Error::Internal("x".into()).context("schedule");
    assert_eq!(e, Error::Internal("schedule: x".into()));
    assert!(e.is_internal());
    assert_eq!(String::from(e), "schedule: x");
}

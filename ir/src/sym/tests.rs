use super::*;
use crate::infer::infer_dims;
use crate::op::Op;
use crate::types::TensorType;
use crate::{DType, SplitMix64};

fn s(n: &str) -> Expr {
    Expr::sym(n)
}

#[test]
fn polynomials_are_canonical() {
    let (b, t) = (s("B"), s("T"));
    // B*T + T == T*(B + 1)
    assert_eq!(b.mul(&t).add(&t), t.mul(&b.add(&Expr::int(1))));
    assert_eq!(b.sub(&b), Expr::int(0));
    assert_eq!(
        b.mul(&t).scale(2).add(&t).sub(&Expr::int(1)).to_string(),
        "2*B*T + T - 1"
    );
    assert_eq!(t.mul(&t).to_string(), "T*T");
    assert_eq!(Expr::int(-3).to_string(), "-3");
    assert_eq!(
        Expr::int(0).sub(&t).add(&Expr::int(5)).to_string(),
        "-T + 5"
    );
    assert_eq!(b.scale(4).floor_div(&Expr::int(2)), b.scale(2));
    assert_eq!(b.scale(4).modulo(&Expr::int(2)), Expr::int(0));
    assert_eq!(t.floor_div(&Expr::int(4)).to_string(), "floordiv(T, 4)");
    // Division by one term that divides every term is exact.
    let bt256 = b.mul(&t).scale(256);
    assert_eq!(bt256.floor_div(&t.scale(256)), b);
    assert_eq!(
        bt256.add(&t.scale(512)).floor_div(&t),
        b.scale(256).add(&Expr::int(512))
    );
    assert_eq!(bt256.modulo(&t), Expr::int(0));
    assert_eq!(b.floor_div(&t).to_string(), "floordiv(B, T)");
    assert_eq!(t.minimum(&t.add(&Expr::int(1))), t);
    assert_eq!(t.maximum(&b), b.maximum(&t));
}

/// A random expression and the same computation done directly on numbers.
fn random_expr(rng: &mut SplitMix64, depth: u32, vals: &[(&str, i64)]) -> (Expr, i128) {
    let pick = rng.next() % if depth == 0 { 2 } else { 9 };
    match pick {
        0 => {
            let k = (rng.next() % 21) as i64 - 10;
            (Expr::int(k), k as i128)
        }
        1 => {
            let (n, v) = vals[(rng.next() as usize) % vals.len()];
            (s(n), v as i128)
        }
        _ => {
            let (a, x) = random_expr(rng, depth - 1, vals);
            let (b, y) = random_expr(rng, depth - 1, vals);
            match pick {
                2 => (a.add(&b), x + y),
                3 => (a.sub(&b), x - y),
                4 => (a.mul(&b), x * y),
                5 => (a.minimum(&b), x.min(y)),
                6 => (a.maximum(&b), x.max(y)),
                7 | 8 => {
                    // Division by a positive constant, as the typing rules divide.
                    let k = (rng.next() % 5) as i64 + 1;
                    let kk = k as i128;
                    if pick == 7 {
                        (a.floor_div(&Expr::int(k)), x.div_euclid(kk))
                    } else {
                        (a.modulo(&Expr::int(k)), x.rem_euclid(kk))
                    }
                }
                _ => unreachable!(),
            }
        }
    }
}

#[test]
fn random_expressions_evaluate_as_direct_arithmetic() {
    let mut rng = SplitMix64(19);
    for case in 0..2000 {
        let vals = [
            ("B", (rng.next() % 9) as i64 + 1),
            ("T", (rng.next() % 300) as i64 + 1),
            ("K", (rng.next() % 4) as i64 + 1),
        ];
        let (e, want) = random_expr(&mut rng, 4, &vals);
        let mut b = Binding::new();
        for (n, v) in vals {
            b.set(n, v);
        }
        assert_eq!(b.eval(&e).unwrap() as i128, want, "case {case}: {e} at {b}");
        // Substituting every symbol folds to the same constant.
        let folded = e.substitute(&|n| b.get(n));
        assert_eq!(
            folded.as_const().map(i128::from),
            Some(want),
            "case {case}: {e}"
        );
        // The bounds over the symbols' ranges contain the value.
        let mut facts = Facts::new();
        for (n, _) in vals {
            facts.add_symbol(n, None);
        }
        facts.symbols[0].hi = 9;
        facts.symbols[1].hi = 300;
        facts.symbols[2].hi = 4;
        let (lo, hi) = facts.bounds(&e);
        assert!(
            lo <= want && want <= hi,
            "case {case}: {e} = {want} outside [{lo}, {hi}]"
        );
    }
}

#[test]
fn evaluation_errors_name_the_symbol() {
    let b = Binding::new();
    assert_eq!(
        b.eval(&s("T")).unwrap_err().to_string(),
        "size symbol `T` is not bound"
    );
    let mut b = Binding::new();
    b.set("T", 0);
    assert!(b.eval(&Expr::int(4).floor_div(&s("T"))).is_err());
}

fn sym(shape: &[&str]) -> TensorType<Expr> {
    TensorType {
        dtype: DType::F32,
        shape: shape
            .iter()
            .map(|d| match d.parse::<i64>() {
                Ok(n) => Expr::int(n),
                Err(_) => s(d),
            })
            .collect(),
    }
}

fn facts(symbols: &[&str]) -> Facts {
    let mut f = Facts::new();
    for n in symbols {
        f.add_symbol(n, None);
    }
    f
}

#[test]
fn the_one_typing_rule_types_symbolic_shapes() {
    let mut cx = facts(&["B", "T", "K"]);
    let x = sym(&["B", "T", "256"]);
    let w = sym(&["256", "64"]);
    let y = infer_dims(&Op::MatMul, &[&x, &w], &mut cx).unwrap();
    assert_eq!(y.to_string(), "f32[B, T, 64]");
    assert!(cx.constraints.is_empty());
    // Reshape to [B*T, 64] needs nothing; to [-1, 4] needs divisibility by 4... of 64: none.
    let r = Op::Reshape {
        shape: vec![-1, 64],
    };
    assert_eq!(
        infer_dims(&r, &[&y], &mut cx).unwrap().to_string(),
        "f32[B*T, 64]"
    );
    // Inner dims that are different symbols: recorded as a constraint.
    let a = sym(&["B", "T"]);
    let k = sym(&["K", "8"]);
    let p = infer_dims(&Op::MatMul, &[&a, &k], &mut cx).unwrap();
    assert_eq!(p.to_string(), "f32[B, 8]");
    assert_eq!(cx.constraints.len(), 1);
    assert_eq!(cx.constraints[0].fact.to_string(), "K equal to T");
    let mut b = Binding::new();
    b.set("B", 2);
    b.set("T", 7);
    b.set("K", 5);
    let e = cx.check(&b).unwrap_err();
    assert_eq!(e, "K = 5, T = 7 but matmul needs K equal to T");
    b.set("K", 7);
    cx.check(&b).unwrap();
}

#[test]
fn divisibility_and_ranges_are_checked_with_the_values() {
    let mut cx = facts(&["T"]);
    cx.at = Some("x.fg:3:9".into());
    let x = sym(&["T", "6"]);
    let r = Op::Reshape { shape: vec![-1, 4] };
    let y = infer_dims(&r, &[&x], &mut cx).unwrap();
    assert_eq!(y.to_string(), "f32[floordiv(6*T, 4), 4]");
    let mut b = Binding::new();
    b.set("T", 7);
    assert_eq!(
        cx.check(&b).unwrap_err(),
        "T = 7 but reshape needs 6*T divisible by 4 (x.fg:3:9)"
    );
    b.set("T", 8);
    cx.check(&b).unwrap();
    assert_eq!(y.bind(&b).unwrap().shape, vec![12, 4]);
    cx.symbols[0].hi = 512;
    b.set("T", 600);
    assert_eq!(
        cx.check(&b).unwrap_err(),
        "T = 600 but T must be in 1..=512"
    );
}

#[test]
fn symbolic_types_agree_with_concrete_typing_at_every_binding() {
    // Every op of the transformer block's kind, typed once symbolically and then
    // concretely at random bindings: binding the symbolic type gives the concrete one.
    let ops = [
        Op::Softmax { axis: -1 },
        Op::Transpose { dim0: 1, dim1: 2 },
        Op::Slice {
            axis: 1,
            start: 1,
            end: -1,
            step: 2,
        },
        Op::Slice {
            axis: 1,
            start: 0,
            end: 5,
            step: 1,
        },
        Op::Unsqueeze { axis: 0 },
        Op::Reshape { shape: vec![-1] },
        Op::Reduce {
            op: crate::ReduceOp::Sum,
            axes: Some(vec![1]),
            keepdim: true,
        },
        Op::Expand {
            shape: vec![3, -1, -1, 4],
        },
    ];
    let x = sym(&["B", "T", "1"]);
    let mut rng = SplitMix64(7);
    for op in &ops {
        let mut cx = facts(&["B", "T"]);
        let ty = infer_dims(op, &[&x], &mut cx).unwrap();
        for _ in 0..50 {
            let mut b = Binding::new();
            b.set("B", (rng.next() % 5) as i64 + 1);
            b.set("T", (rng.next() % 20) as i64 + 1);
            if cx.check(&b).is_err() {
                continue;
            }
            let concrete = x.bind(&b).unwrap();
            let want = crate::infer::infer(op, &[&concrete]).unwrap();
            assert_eq!(ty.bind(&b).unwrap(), want, "{op:?} at {b}: {ty}");
        }
    }
}

#[test]
fn ops_without_a_symbolic_rule_name_themselves() {
    let mut cx = facts(&["T"]);
    let x = sym(&["1", "3", "T", "T"]);
    let op = Op::MaxPool {
        kernel: vec![2, 2],
        stride: None,
        padding: None,
        dilation: None,
        ceil_mode: false,
    };
    let e = infer_dims(&op, &[&x], &mut cx).unwrap_err();
    assert_eq!(
        e.message,
        "max_pool does not take symbolic dimensions yet (operand 0 is f32[1, 3, T, T])"
    );
}

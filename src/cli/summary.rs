//! Short, eyeball-able summaries of tensors: the first few values and min/max/mean.

use ferrite::ir::{Data, Tensor};
use std::fmt::Write;

/// How many leading values a summary shows.
const SHOWN: usize = 6;

/// Two lines describing `t`: its first values, then its statistics, e.g.
/// `[0.5, -1.25, 3, ...]` and `min -1.25, max 3, mean 0.75`. Statistics of float
/// tensors are over the finite values, with NaN and infinity counted separately.
pub fn summarize(t: &Tensor) -> (String, String) {
    let n = t.len();
    let mut first = String::from("[");
    let shown: Vec<String> = match &t.data {
        Data::Bool(v) => v.iter().take(SHOWN).map(|b| b.to_string()).collect(),
        Data::I32(_) | Data::I64(_) => t
            .to_i64()
            .into_iter()
            .take(SHOWN)
            .map(|v| v.to_string())
            .collect(),
        _ => t
            .to_f64()
            .into_iter()
            .take(SHOWN)
            .map(format_number)
            .collect(),
    };
    first.push_str(&shown.join(", "));
    if n > SHOWN {
        first.push_str(", ...");
    }
    first.push(']');
    if n == 0 {
        return (first, "no elements".into());
    }
    let stats = match &t.data {
        Data::Bool(v) => {
            let trues = v.iter().filter(|&&b| b).count();
            format!("{trues} of {n} true")
        }
        Data::I32(_) | Data::I64(_) => {
            let v = t.to_i64();
            let (min, max) = (v.iter().min(), v.iter().max());
            // The sum of up to 2^31 i64 values fits in an i128.
            let mean = v.iter().map(|&x| x as i128).sum::<i128>() as f64 / n as f64;
            match (min, max) {
                (Some(min), Some(max)) => {
                    format!("min {min}, max {max}, mean {}", format_number(mean))
                }
                _ => String::new(),
            }
        }
        _ => float_stats(&t.to_f64()),
    };
    (first, stats)
}

fn float_stats(v: &[f64]) -> String {
    let (mut min, mut max, mut sum, mut finite) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
    let (mut nan, mut inf) = (0usize, 0usize);
    for &x in v {
        if x.is_nan() {
            nan += 1;
        } else if x.is_infinite() {
            inf += 1;
        } else {
            min = min.min(x);
            max = max.max(x);
            sum += x;
            finite += 1;
        }
    }
    let mut s = String::new();
    if finite > 0 {
        let _ = write!(
            s,
            "min {}, max {}, mean {}",
            format_number(min),
            format_number(max),
            format_number(sum / finite as f64)
        );
    }
    if nan + inf > 0 {
        if !s.is_empty() {
            s.push_str(", ");
        }
        let _ = write!(s, "non-finite: {nan} nan, {inf} inf");
    }
    s
}

/// A float in at most six significant digits, plain for moderate magnitudes and in
/// scientific notation otherwise: `0.5`, `-1.23457`, `1.5e-7`, `inf`.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if (1e-4..1e6).contains(&a) {
        // Six significant digits: the digits after the point depend on the magnitude.
        let decimals = (5 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
        return s;
    }
    let s = format!("{v:.5e}");
    // Trim zeros in the mantissa: 1.50000e-7 -> 1.5e-7.
    match s.split_once('e') {
        Some((m, e)) if m.contains('.') => {
            format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.'))
        }
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::ir::{DType, TensorType};

    #[test]
    fn numbers() {
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(-1.2345678), "-1.23457");
        assert_eq!(format_number(123456.7), "123457");
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(1.5e-7), "1.5e-7");
        assert_eq!(format_number(2e9), "2e9");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_number(f64::NAN), "nan");
    }

    #[test]
    fn float_summary() {
        let t = Tensor::from_f32(
            &[2, 4],
            vec![1.0, -2.0, 0.5, f32::NAN, 4.0, f32::INFINITY, 0.0, 0.5],
        )
        .unwrap();
        let (first, stats) = summarize(&t);
        assert_eq!(first, "[1, -2, 0.5, nan, 4, inf, ...]");
        assert_eq!(
            stats,
            "min -2, max 4, mean 0.666667, non-finite: 1 nan, 1 inf"
        );
    }

    #[test]
    fn int_bool_and_empty_summaries() {
        let ty = TensorType::new(DType::I64, vec![3]).unwrap();
        let t = Tensor::from_i64(&ty, &[i64::MAX, -1, 4]);
        assert_eq!(
            summarize(&t),
            (
                "[9223372036854775807, -1, 4]".to_string(),
                "min -1, max 9223372036854775807, mean 3.07446e18".to_string()
            )
        );
        let t = Tensor::from_i64(&ty.with_dtype(DType::Bool), &[1, 0, 1]);
        assert_eq!(
            summarize(&t),
            ("[true, false, true]".to_string(), "2 of 3 true".to_string())
        );
        let t = Tensor::zeros(&TensorType::new(DType::F32, vec![0, 3]).unwrap());
        assert_eq!(summarize(&t), ("[]".to_string(), "no elements".to_string()));
    }
}

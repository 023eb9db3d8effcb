//! A double-precision error function (std has none).
//!
//! The algorithm and coefficients are those of fdlibm's `s_erf.c`:
//! "Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved. Developed at
//! SunPro, a Sun Microsystems, Inc. business. Permission to use, copy, modify, and
//! distribute this software is freely granted, provided that this notice is preserved."
//! Its error is below 1 ulp. Coefficients are written as bit patterns so they are
//! exactly the published doubles.

const fn c(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// erf(1) rounded to 24 bits; the [0.84375, 1.25] branch approximates erf(x) - ERX.
const ERX: f64 = c(0x3FEB0AC1_60000000);
/// 2/sqrt(pi) - 1, for |x| < 2^-28 where erf(x) = x + EFX * x.
const EFX: f64 = c(0x3FC06EBA_8214DB69);

// erf(x) = x + x * P(x^2) / Q(x^2) on |x| < 0.84375.
const PP: [f64; 5] = [
    c(0x3FC06EBA_8214DB68),
    c(0xBFD4CD7D_691CB913),
    c(0xBF9D2A51_DBD7194F),
    c(0xBF77A291_236668E4),
    c(0xBEF8EAD6_120016AC),
];
const QQ: [f64; 6] = [
    1.0,
    c(0x3FD97779_CDDADC09),
    c(0x3FB0A54C_5536CEBA),
    c(0x3F74D022_C4D36B0F),
    c(0x3F215DC9_221C1A10),
    c(0xBED09C43_42A26120),
];

// erf(1 + s) = ERX + P(s) / Q(s) on 0.84375 <= |x| < 1.25.
const PA: [f64; 7] = [
    c(0xBF6359B8_BEF77538),
    c(0x3FDA8D00_AD92B34D),
    c(0xBFD7D240_FBB8C3F1),
    c(0x3FD45FCA_805120E4),
    c(0xBFBC6398_3D3E28EC),
    c(0x3FA22A36_599795EB),
    c(0xBF61BF38_0A96073F),
];
const QA: [f64; 7] = [
    1.0,
    c(0x3FBB3E66_18EEE323),
    c(0x3FE14AF0_92EB6F33),
    c(0x3FB2635C_D99FE9A7),
    c(0x3FC02660_E763351F),
    c(0x3F8BEDC2_6B51DD1C),
    c(0x3F888B54_5735151D),
];

// erfc(x) = exp(-x^2 - 0.5625 + R(1/x^2) / S(1/x^2)) / x on 1.25 <= |x| < 1/0.35.
const RA: [f64; 8] = [
    c(0xBF843412_600D6435),
    c(0xBFE63416_E4BA7360),
    c(0xC0251E04_41B0E726),
    c(0xC04F300A_E4CBA38D),
    c(0xC0644CB1_84282266),
    c(0xC067135C_EBCCABB2),
    c(0xC0545265_57E4D2F2),
    c(0xC023A0EF_C69AC25C),
];
const SA: [f64; 9] = [
    1.0,
    c(0x4033A6B9_BD707687),
    c(0x4061350C_526AE721),
    c(0x407B290D_D58A1A71),
    c(0x40842B19_21EC2868),
    c(0x407AD021_57700314),
    c(0x405B28A3_EE48AE2C),
    c(0x401A47EF_8E484A93),
    c(0xBFAEEFF2_EE749A62),
];

// The same form on 1/0.35 <= |x| < 6.
const RB: [f64; 7] = [
    c(0xBF843412_39E86F4A),
    c(0xBFE993BA_70C285DE),
    c(0xC031C209_555F995A),
    c(0xC064145D_43C5ED98),
    c(0xC083EC88_1375F228),
    c(0xC0900461_6A2E5992),
    c(0xC07E384E_9BDC383F),
];
const SB: [f64; 8] = [
    1.0,
    c(0x403E568B_261D5190),
    c(0x40745CAE_221B9F0A),
    c(0x409802EB_189D5118),
    c(0x40A8FFB7_688C246A),
    c(0x40A3F219_CEDF3BE6),
    c(0x407DA874_E79FE763),
    c(0xC03670E2_42712D62),
];

/// Evaluates the polynomial with coefficients `coeffs` (lowest degree first) at `x`.
fn poly(coeffs: &[f64], x: f64) -> f64 {
    coeffs.iter().rev().fold(0.0, |acc, &k| acc * x + k)
}

/// The error function `erf(x) = 2/sqrt(pi) * ∫_0^x exp(-t^2) dt`, accurate to about
/// 1 ulp in double precision. `erf(±inf) = ±1`, `erf(NaN) = NaN`.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let value = if a < 0.84375 {
        if a < f64::from_bits(0x3E30_0000_0000_0000) {
            // |x| < 2^-28: the cubic term is below half an ulp.
            a + EFX * a
        } else {
            let z = a * a;
            a + a * (poly(&PP, z) / poly(&QQ, z))
        }
    } else if a < 1.25 {
        let s = a - 1.0;
        ERX + poly(&PA, s) / poly(&QA, s)
    } else if a >= 6.0 {
        // erfc(6) < 2.2e-17, below half an ulp of 1.
        1.0
    } else {
        1.0 - erfc_tail(a)
    };
    value.copysign(x)
}

/// `erfc(a)` for `1.25 <= a < 28` (fdlibm's form, as in `erf`).
fn erfc_tail(a: f64) -> f64 {
    let s = 1.0 / (a * a);
    let r_over_s = if a < 1.0 / 0.35 {
        poly(&RA, s) / poly(&SA, s)
    } else {
        poly(&RB, s) / poly(&SB, s)
    };
    // exp(-a^2) is split as exp(-z^2) * exp((z - a)(z + a)) with z = a rounded to 32
    // high bits, so that z^2 is exact and the large exponent loses no precision.
    let z = f64::from_bits(a.to_bits() & 0xFFFF_FFFF_0000_0000);
    let r = (-z * z - 0.5625).exp() * ((z - a) * (z + a) + r_over_s).exp();
    r / a
}

/// The complementary error function `1 - erf(x)`, without the cancellation of that
/// difference for large `x`: about 1 ulp where `erf` is, relative, down to the
/// subnormal range. `erfc(-inf) = 2`, `erfc(inf) = 0`, `erfc(NaN) = NaN`.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 1.25 {
        // erf(x) <= erf(1.25) = 0.92: 1 - erf(x) >= 0.077 loses at most 4 bits.
        return 1.0 - erf(x);
    }
    if x >= 28.0 {
        // erfc(28) < 1e-342 underflows.
        return 0.0;
    }
    erfc_tail(x)
}

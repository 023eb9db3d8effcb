"""Regenerates the polynomial coefficients in vmath.rs (python3 with numpy and mpmath).

Each fit minimizes the maximum *relative* error of the final function (not of the
polynomial alone) with Lawson's iteratively reweighted least squares on a dense
Chebyshev-spaced grid; references come from mpmath at 100 bits. The printed figure is the
fit's own error; rounding coefficients to f32 and evaluating in f32 add the rest, which the
runtime tests measure (tests/cpu_vmath.rs).
"""
import mpmath as mp
import numpy as np

mp.mp.prec = 100


def grid(a, b, n=4000):
    return (a + b) / 2 + (b - a) / 2 * np.cos(np.linspace(np.pi, 0, n))


def lawson(basis, target, weight, iters=300):
    """Coefficients c minimizing max |weight * (basis @ c - target)|."""
    a, b = basis * weight[:, None], target * weight
    w = np.full(len(b), 1.0 / len(b))
    best = None
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(a * np.sqrt(w)[:, None], b * np.sqrt(w), rcond=None)
        err = np.abs(a @ c - b)
        if best is None or err.max() < best[0]:
            best = (err.max(), c)
        w = w * err / (w * err).sum()
    return best


def fit(name, x, basis_var, degree, target, weight, scale=1.0):
    basis = np.vander(basis_var / scale, degree + 1, increasing=True)
    err, c = lawson(basis, target, weight)
    c = c / scale ** np.arange(degree + 1)
    coeffs = ", ".join(np.format_float_scientific(np.float32(v), unique=True) for v in c)
    print(f"{name}: fit error {err:.2e}\n    [{coeffs}]")


def f(fn, xs):
    return np.array([float(fn(mp.mpf(v))) for v in xs])


if __name__ == "__main__":
    # exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
    r = grid(-0.3466, 0.3466)
    fit("EXP_P", r, r, 4, f(lambda v: (mp.exp(v) - 1 - v) / v**2 if v else mp.mpf(0.5), r), r**2 / f(mp.exp, r))
    # log(1+f) = f - f^2/2 + f^3 P(f), 1+f in [sqrt(1/2), sqrt(2))
    x = grid(np.sqrt(0.5) - 1, np.sqrt(2) - 1)
    x = x[np.abs(x) > 1e-6]
    fit("LOG_P", x, x, 8, f(lambda v: (mp.log1p(v) - v + v**2 / 2) / v**3, x), np.abs(x**3 / f(mp.log1p, x)))
    # sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= 1
    r = grid(1e-4, 1.0)
    fit("SIN_S", r, r**2, 3, f(lambda v: (mp.sin(v) - v) / v**3, r), r**3 / f(mp.sin, r))
    fit("COS_C", r, r**2, 3, f(lambda v: (mp.cos(v) - 1 + v**2 / 2) / v**4, r), r**4 / f(mp.cos, r))
    # tanh x = x + x^3 T(x^2), |x| <= 0.625
    x = grid(1e-4, 0.625)
    fit("TANH_T", x, x**2, 4, f(lambda v: (mp.tanh(v) - v) / v**3, x), x**3 / f(mp.tanh, x))
    # erf x = x + x A(x^2), |x| <= 0.875
    x = grid(1e-4, 0.875)
    fit("ERF_A", x, x**2, 6, f(lambda v: (mp.erf(v) - v) / v, x), x / f(mp.erf, x))
    # erf x = 1 - exp(-H(x - 0.875)), x in [0.875, 4]; the error that matters is erfc * dH
    x = grid(0.875, 4.0, 3000)
    fit("ERF_H", x, x - 0.875, 6, f(lambda v: -mp.log(mp.erfc(v)), x), f(mp.erfc, x) / f(mp.erf, x), scale=3.125)

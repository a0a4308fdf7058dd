"""erf(x) for NumPy arrays, accurate to the last bit of float64 or float32 (NumPy has no erf).

The piecewise rational approximations of Sun's FDLIBM ``s_erf.c`` (float64) and ``s_erff.c`` (float32, with the
shorter FreeBSD coefficients), vectorized: the first formula on every element, each other one only on the elements
whose |x| falls in its range.

    |x| < 0.84375            erf = x + x P(x^2) / Q(x^2)
    0.84375 <= |x| < 1.25    erf = erx + P(|x| - 1) / Q(|x| - 1)
    1.25 <= |x| < 6 (or 4)   erf = 1 - exp(-x^2 - 0.5625 + R(1/x^2) / S(1/x^2)) / |x|
    beyond                   erf = +-1 (rounded), NaN stays NaN

float64 results are within 1 ulp of the true value, float32 results within 1 ulp of float32 rounding (both
tested against math.erf).
"""

from __future__ import annotations

import numpy as np

# Sun FDLIBM s_erf.c (Copyright 1993 Sun Microsystems, Inc.; "Permission to use, copy, modify, and distribute
# this software is freely granted, provided that this notice is preserved.")
ERX = 8.45062911510467529297e-01  # erf(1) rounded to float; 0.84375 <= |x| < 1.25: erf = erx + P/Q
PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
      -5.77027029648944159157e-03, -2.37630166566501626084e-05)  # fmt: skip
QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
      1.32494738004321644526e-04, -3.96022827877536812320e-06)  # fmt: skip
PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
      3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
      -2.16637559486879084300e-03)  # fmt: skip
QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
      1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)  # fmt: skip
RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e01,
      -6.23753324503260060396e01, -1.62396669462573470355e02, -1.84605092906711035994e02,
      -8.12874355063065934246e01, -9.81432934416914548592e00)  # fmt: skip
SA = (1.0, 1.96512716674392571292e01, 1.37657754143519042600e02, 4.34565877475229228821e02,
      6.45387271733267880336e02, 4.29008140027567833386e02, 1.08635005541779435134e02,
      6.57024977031928170135e00, -6.04244152148580987438e-02)  # fmt: skip
RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e01,
      -1.60636384855821916062e02, -6.37566443368389627722e02, -1.02509513161107724954e03,
      -4.83519191608651397019e02)  # fmt: skip
SB = (1.0, 3.03380607434824582924e01, 3.25792512996573918826e02, 1.53672958608443695994e03,
      3.19985821950859553908e03, 2.55305040643316442583e03, 4.74528541206955367215e02,
      -2.24409524465858183362e01)  # fmt: skip


# FreeBSD s_erff.c (float; Sun's notice above, float conversion by Ian Lance Taylor, shorter polynomials since
# 2017): enough for float32
PP32 = (1.28379166e-01, -3.36030394e-01, -1.86260219e-03)
QQ32 = (1.0, 3.12324286e-01, 2.16070302e-02, -1.98859419e-03)
ERX32 = 8.42697144e-01  # erf(1) rounded to 16 bits
PA32 = (3.64939137e-06, 4.15109694e-01, -1.65179938e-01, 1.10914491e-01)
QA32 = (1.0, 6.02074385e-01, 5.35934687e-01, 1.68576106e-01, 5.62181212e-02)
RA32 = (-9.87132732e-03, -5.53605914e-01, -2.17589188e00, -1.43268085e00)
SA32 = (1.0, 5.45995426e00, 6.69798088e00, 1.43113089e00, -5.77397496e-02)


def _poly(z, coeffs):  # Horner: c0 + z (c1 + z (c2 + ...)), in z's dtype, one temporary
    t = z.dtype.type
    acc = z * t(coeffs[-1])
    acc += t(coeffs[-2])
    for c in coeffs[-3::-1]:
        acc *= z
        acc += t(c)
    return acc


def _small(a, P=PP, Q=QQ):  # |x| < 0.84375: erf(a) = a + a P(a^2)/Q(a^2)
    z = a * a
    r = _poly(z, P)
    r /= _poly(z, Q)
    r *= a
    r += a
    return r


def _middle(a, P=PA, Q=QA, erx=ERX):  # 0.84375 <= |x| < 1.25: erf(a) = erx + P(a-1)/Q(a-1)
    s = a - a.dtype.type(1)
    r = _poly(s, P)
    r /= _poly(s, Q)
    r += a.dtype.type(erx)
    return r


def _tail(a, R, S):  # 1.25 <= |x| < 6: erf(a) = 1 - exp(-a^2 - 0.5625 + R(1/a^2)/S(1/a^2)) / a
    t = a.dtype.type
    s = a * a
    np.divide(t(1), s, out=s)
    ratio = _poly(s, R)
    ratio /= _poly(s, S)
    if a.dtype == np.float64:
        # z = a with the low 32 bits of the mantissa cleared, so -z*z is exact: exp(-a^2) loses nothing
        z = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
        ratio += (z - a) * (z + a)
        np.exp(ratio, out=ratio)
        z *= z
        z += 0.5625
        np.negative(z, out=z)
        np.exp(z, out=z)
        ratio *= z
    else:
        # float32 keeps -a^2 to a relative 2^-24: an error of at most ~16 * 6e-8 in an exponent whose exp is
        # below 0.08, far under the 6e-8 spacing of float32 numbers near 1
        s = a * a
        ratio -= s
        ratio -= t(0.5625)
        np.exp(ratio, out=ratio)
    ratio /= a
    np.subtract(t(1), ratio, out=ratio)
    return ratio


def _last(a, R, S, top):  # the last range, which also takes inf and NaN: beyond `top`, erf rounds to 1
    return _tail(np.minimum(a, a.dtype.type(top)), R, S)


# float64: the four ranges of s_erf.c; at |x| = 6 the last formula already rounds to 1 (erfc(6) = 2e-17).
# float32: beyond 1/0.35 erfc < 5e-5, so the first tail rational's small error there is invisible in float32 and
# one tail range suffices; at 4 the result rounds to 1 (erfc(4) = 1.5e-8, below half a float32 spacing).
_RANGES = {
    np.dtype(np.float64): (
        (0.84375, 1.25, 1 / 0.35),
        (_small, _middle, lambda v: _tail(v, RA, SA), lambda v: _last(v, RB, SB, 6.0)),
    ),
    np.dtype(np.float32): (
        (0.84375, 1.25),
        (lambda v: _small(v, PP32, QQ32), lambda v: _middle(v, PA32, QA32, ERX32), lambda v: _last(v, RA32, SA32, 4.0)),
    ),
}


def erf(x):  # [...] -> [...], same dtype (float32 or float64; anything else goes to float64)
    """The error function erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt, elementwise.

    float64: within 1 ulp of the true value; float32: within 1 ulp of float32 rounding.
    """
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    order = "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"  # flatten without a copy
    flat = x.reshape(-1, order=order)
    a = np.abs(flat)
    breaks, (first, *others) = _RANGES[a.dtype]
    # The first (cheapest) formula runs on every element; the other ranges are then gathered, computed and written
    # over it: that costs fewer passes than gathering every range (index arrays and scattered writes are slow).
    # NaN stays NaN in the first formula; outside its range the first formula may overflow: those are overwritten.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out = first(a)
    code = (a >= a.dtype.type(breaks[0])).view(np.uint8)  # the range of each element: 0, 1, 2, ...
    for b in breaks[1:]:
        code = code + (a >= a.dtype.type(b)).view(np.uint8)
    for k, fn in enumerate(others, start=1):
        idx = np.flatnonzero(code == k)
        if idx.size:
            out[idx] = fn(a[idx])
    np.copysign(out, flat, out=out)
    return out.reshape(x.shape, order=order)

// ln and exp that give the same bits on every platform and standard library (std::log and
// std::exp are not correctly rounded and differ between libms): only IEEE-754 +, -, ×, ÷ and
// exact operations (frexp, ldexp, floor), each correctly rounded, in a fixed order, one rounding
// per statement (no expression that a compiler could contract into an FMA). Accurate to a few
// ulp, which is all their users (synthetic data, calibration statistics) need; what matters is
// that a seed names the same bytes everywhere. tests/checkpoint_write/synthetic_interop.py
// re-implements portable_log in Python and reproduces generated tensors bit for bit.
#pragma once

namespace fp4cl::detail {

// ln(x) for a finite x > 0: x = m·2^e with m in [√½, √2), ln m = 2·atanh(t) with
// t = (m-1)/(m+1), |t| < 0.172, by its series through t^21 (truncation below 2^-60) in Horner
// form p = 1/21, p = p·t² + 1/k for k = 19, 17, ..., 1; then 2t·p + e·ln 2 with ln 2 split
// (Cody–Waite) into ln2_hi = 6.93147180369123816490e-01 and ln2_lo = 1.90821492927058770002e-10:
// e·ln2_hi + ((2t·p) + e·ln2_lo).
double portable_log(double x);

// e^x for finite x (overflows to +Inf above 709.78, underflows to 0): k = floor(x/ln 2 + 1/2),
// r = (x - k·ln2_hi) - k·ln2_lo, e^r = 1 + r(1 + r/2(1 + r/3(... (1 + r/13)))) by Horner
// (p = 1; p = 1 + (r/k)·p for k = 13, ..., 1), times 2^k.
double portable_exp(double x);

}  // namespace fp4cl::detail

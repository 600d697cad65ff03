"""float32 exp, erf and tanh as inline polynomials: the same instructions on a scalar and on
every lane of a vector.

libm's expf/erff/tanhf are calls, which LLVM makes lane by lane on a vector (sixteen calls
per AVX-512 vector), and they keep a loop of softmax or GELU scalar. Inline, they vectorize
with the loop; and because a scalar uses the very same instructions, a vectorized loop and
its scalar remainder (or another schedule of the same kernel) give the same bits.

* exp: Cephes' expf — n = round(x log2 e), r = x - n ln 2 in two parts, a degree-7
  polynomial for e^r, times 2^n built in the exponent field (in two halves, so that
  results down to the subnormal range and up to the largest float are exact scalings);
  +inf above 88.7228, 0 below -103.9721, NaN kept.
* erf: the rational approximation of Eigen/XLA (odd degree-13 over even degree-8
  polynomial) on x clamped to [-4, 4], where erf is +-1 in float32.
* tanh: Eigen's rational approximation (odd degree-13 over even degree-6) on x clamped to
  [-7.9053, 7.9053], x itself where |x| < 0.0004, +-1 where |x| > 9.

Measured against float64 references (tests/emit/test_llvm_math.py): exp within 2 ulp,
erf within 5e-7 absolute, tanh within 4e-7 relative. float16 values are computed in
float32 registers and take the same path; float64 keeps LLVM's intrinsics and libm.
"""

from __future__ import annotations

from llvmlite import ir

FAST_MATH = frozenset({"exp", "erf", "tanh"})  # names computed here for float32 registers

_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
_EXP_HI, _EXP_LO = 88.72283935546875, -103.97207708
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)  # fmt: skip
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)  # fmt: skip
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)  # fmt: skip
_TANH_CLAMP, _TANH_TINY = 7.90531110763549805, 0.0004
_TANH_ONE = 9.0  # tanh rounds to +-1 in float32 beyond 8.67


class FastMath:
    """The polynomials, emitted through an ExprEmitter `em` (its builder, constants and
    intrinsics) on float32 register values, scalar or vector."""

    def __init__(self, em):
        self.em = em
        self.b = em.b

    def emit(self, name: str, x: ir.Value) -> ir.Value:
        return getattr(self, name)(x)

    def c(self, value: float, like: ir.Value) -> ir.Value:
        return self.em.const("float32", value, like)

    def fma(self, x, y, z) -> ir.Value:
        """x * y + z, fused as the target allows (as every x * y + z tcc emits)."""
        if not self.em.fp_contract:
            return self.b.fadd(self.b.fmul(x, y), z)
        return self.em.intrinsic("llvm.fmuladd", x, y, z)

    def horner(self, coefficients, x: ir.Value) -> ir.Value:
        acc = self.c(coefficients[0], x)
        for k in coefficients[1:]:
            acc = self.fma(acc, x, self.c(k, x))
        return acc

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        x = self.em.intrinsic("llvm.maxnum", x, self.c(lo, x))
        return self.em.intrinsic("llvm.minnum", x, self.c(hi, x))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2.0 ** n for int32 n in [-126, 127], built in the exponent field."""
        b = self.b
        biased = b.add(n, self.em.const("int32", 127, n))
        bits = b.shl(biased, self.em.const("int32", 23, n))
        return b.bitcast(bits, self.c(0.0, n).type)

    def exp(self, x: ir.Value) -> ir.Value:
        b = self.b
        xc = self.clamp(x, _EXP_LO, _EXP_HI)
        n = self.em.intrinsic("llvm.floor", self.fma(xc, self.c(_LOG2E, x), self.c(0.5, x)))
        r = self.fma(n, self.c(-_LN2_HI, x), xc)
        r = self.fma(n, self.c(-_LN2_LO, x), r)
        y = self.horner(_EXP_POLY, r)
        y = self.fma(y, b.fmul(r, r), b.fadd(r, self.c(1.0, x)))
        ni = b.fptosi(n, self.em.const("int32", 0, x).type)
        half = b.ashr(ni, self.em.const("int32", 1, ni))
        y = b.fmul(b.fmul(y, self.pow2(half)), self.pow2(b.sub(ni, half)))
        y = b.select(b.fcmp_ordered(">", x, self.c(_EXP_HI, x)), self.c(float("inf"), x), y)
        y = b.select(b.fcmp_ordered("<", x, self.c(_EXP_LO, x)), self.c(0.0, x), y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def odd_rational(self, x: ir.Value, odd, even) -> ir.Value:
        """x * odd(x^2) / even(x^2), the form of the erf and tanh approximations."""
        x2 = self.b.fmul(x, x)
        return self.b.fdiv(self.b.fmul(x, self.horner(odd, x2)), self.horner(even, x2))

    def erf(self, x: ir.Value) -> ir.Value:
        y = self.odd_rational(self.clamp(x, -4.0, 4.0), _ERF_P, _ERF_Q)
        return self.b.select(self.b.fcmp_unordered("uno", x, x), x, y)

    def tanh(self, x: ir.Value) -> ir.Value:
        b = self.b
        y = self.odd_rational(self.clamp(x, -_TANH_CLAMP, _TANH_CLAMP), _TANH_P, _TANH_Q)
        ax = self.em.intrinsic("llvm.fabs", x)
        y = b.select(b.fcmp_ordered("<", ax, self.c(_TANH_TINY, x)), x, y)
        one = self.em.intrinsic("llvm.copysign", self.c(1.0, x), x)
        y = b.select(b.fcmp_ordered(">", ax, self.c(_TANH_ONE, x)), one, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

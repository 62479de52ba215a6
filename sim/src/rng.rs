//! Random draws for the simulator on a xorshift64 generator: uniform,
//! log-uniform, normal, Poisson and binomial counts, and the normal
//! distribution's CDF and quantile for the latency histograms.
//!
//! Seeded and portable: a run is reproducible from its seed on any machine.

/// xorshift64 (Marsaglia 13/7/17).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut r = Self(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        // Decorrelate nearby seeds.
        for _ in 0..4 {
            r.next_u64();
        }
        r
    }

    /// A generator for a sub-stream (e.g. one fault's parameters), independent
    /// of how many draws the parent made.
    pub fn derive(seed: u64, stream: u64) -> Self {
        Self::new(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform integer in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Log-uniform in [lo, hi) (both positive).
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.uniform()).exp()
    }

    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Standard normal (Box–Muller, one of the pair).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Poisson(lambda): Knuth's product of uniforms below 30, a rounded
    /// normal approximation above (relative error of the tails is irrelevant
    /// there: counts of hundreds or more).
    pub fn poisson(&mut self, lambda: f64) -> u64 {
        if lambda.is_nan() || lambda <= 0.0 {
            return 0;
        }
        if lambda < 30.0 {
            let l = (-lambda).exp();
            let mut k = 0u64;
            let mut p = 1.0;
            loop {
                p *= self.uniform();
                if p <= l {
                    return k;
                }
                k += 1;
            }
        }
        let x = (lambda + lambda.sqrt() * self.normal()).round();
        if x <= 0.0 {
            0
        } else if x >= u64::MAX as f64 {
            u64::MAX
        } else {
            x as u64
        }
    }

    /// Binomial(n, p): Bernoulli trials for small n, inversion (BINV) when
    /// the expected count of the rarer outcome is small, a rounded normal
    /// approximation otherwise.
    pub fn binomial(&mut self, n: u64, p: f64) -> u64 {
        if n == 0 || p.is_nan() || p <= 0.0 {
            return 0;
        }
        if p >= 1.0 {
            return n;
        }
        if p > 0.5 {
            return n - self.binomial(n, 1.0 - p);
        }
        if n <= 40 {
            return (0..n).filter(|_| self.bernoulli(p)).count() as u64;
        }
        let mean = n as f64 * p;
        if mean < 20.0 {
            let q = 1.0 - p;
            let s = p / q;
            let a = (n as f64 + 1.0) * s;
            let mut r = q.powf(n as f64);
            let mut u = self.uniform();
            let mut x = 0u64;
            while u > r && x < n {
                u -= r;
                x += 1;
                r *= a / x as f64 - s;
                if r <= 0.0 {
                    break;
                }
            }
            return x;
        }
        let sd = (mean * (1.0 - p)).sqrt();
        (mean + sd * self.normal()).round().clamp(0.0, n as f64) as u64
    }
}

/// Complementary error function (Numerical Recipes' Chebyshev fit,
/// fractional error < 1.2e-7 everywhere).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Standard normal CDF Φ(x).
pub fn norm_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Standard normal quantile Φ⁻¹(p) (Acklam, relative error < 1.2e-9).
pub fn norm_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let lo = 0.024_25;
    if p < lo {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lo {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
        (m, v)
    }

    #[test]
    fn poisson_mean_and_variance() {
        let mut r = Rng::new(3);
        for &l in &[0.04, 1.0, 4.0, 29.0, 31.0, 500.0, 2.4e5] {
            let xs: Vec<f64> = (0..20_000).map(|_| r.poisson(l) as f64).collect();
            let (m, v) = mean_var(&xs);
            let se = (l / 20_000.0).sqrt();
            assert!((m - l).abs() < 5.0 * se, "λ={l}: mean {m}");
            assert!((v / l - 1.0).abs() < 0.1, "λ={l}: var {v}");
        }
        assert_eq!(r.poisson(0.0), 0);
    }

    #[test]
    fn binomial_mean_and_variance() {
        let mut r = Rng::new(5);
        for &(n, p) in &[
            (10u64, 0.3),
            (100, 0.01),
            (1500, 0.005),
            (1500, 0.4),
            (2000, 0.97),
        ] {
            let xs: Vec<f64> = (0..20_000).map(|_| r.binomial(n, p) as f64).collect();
            let (m, v) = mean_var(&xs);
            let want = n as f64 * p;
            let var = want * (1.0 - p);
            assert!(
                (m - want).abs() < 5.0 * (var / 20_000.0).sqrt() + 1e-9,
                "n={n} p={p}: {m}"
            );
            assert!((v / var - 1.0).abs() < 0.1, "n={n} p={p}: var {v} vs {var}");
        }
    }

    #[test]
    fn normal_cdf_and_quantile_agree() {
        for &p in &[1e-9, 0.001, 0.02, 0.3, 0.5, 0.77, 0.99, 0.999_999] {
            let x = norm_quantile(p);
            assert!((norm_cdf(x) - p).abs() < 1e-6 * p.max(1e-3), "p={p}: x={x}");
        }
        assert!((norm_cdf(1.959_964) - 0.975).abs() < 1e-6);
    }
}

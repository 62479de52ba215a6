//! Counting statistics for the detectors: Poisson tail probabilities and
//! exact (Garwood) confidence intervals of a Poisson mean.
//!
//! Errors on a link, retries of a transport, requests over a latency bound:
//! all are counts of rare independent events, so "is this count too many
//! for the reference rate?" is a Poisson tail, whatever the window length.

/// Median of a slice (selection on a copy, O(n)); 0 for empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    let n = s.len();
    let (below, m, _) = s.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *m;
    if n % 2 == 1 {
        return hi;
    }
    let lo = below.iter().copied().fold(f64::MIN, f64::max);
    (lo + hi) / 2.0
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, 9 terms; |error| < 1e-13).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularised lower incomplete gamma `P(a, x)` (series for x < a + 1,
/// continued fraction otherwise; Numerical Recipes' split).
fn gamma_p(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let lg = ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        (sum.ln() - x + a * x.ln() - lg).exp().min(1.0)
    } else {
        1.0 - gamma_q_cf(a, x, lg)
    }
}

/// Upper regularised incomplete gamma `Q(a, x)` by Lentz's continued fraction.
fn gamma_q_cf(a: f64, x: f64, lg: f64) -> f64 {
    let tiny = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / tiny;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < tiny {
            d = tiny;
        }
        c = b + an / c;
        if c.abs() < tiny {
            c = tiny;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-16 {
            break;
        }
    }
    ((-x + a * x.ln() - lg).exp() * h).clamp(0.0, 1.0)
}

/// `P(X ≥ k)` for `X ~ Poisson(lambda)`: how surprising `k` or more events
/// are when `lambda` are expected. 1 for `k = 0`; accurate down to ~1e-300.
pub fn poisson_sf(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    // P(X ≥ k) = P(k, λ), the regularised lower incomplete gamma.
    let a = k as f64;
    if lambda < a + 1.0 {
        gamma_p(a, lambda)
    } else {
        1.0 - gamma_q_cf(a, lambda, ln_gamma(a)).min(1.0)
    }
}

/// `P(X ≥ k)` for `X ~ Binomial(n, p)`, for the upper tail only (`k`
/// above the mean `n·p`; at or below it, 1): the conditional test that the
/// later of two Poisson counts is higher than their exposures explain.
pub fn binomial_upper_sf(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if p.is_nan() || p <= 0.0 {
        return 0.0;
    }
    if k > n {
        return 0.0;
    }
    if p >= 1.0 || k as f64 <= n as f64 * p {
        return 1.0;
    }
    let nf = n as f64;
    let ln_c = |i: f64| ln_gamma(nf + 1.0) - ln_gamma(i + 1.0) - ln_gamma(nf - i + 1.0);
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    // Terms fall from i = k on (k is above the mode): sum until negligible.
    let mut sum = 0.0;
    for i in k..=n {
        let fi = i as f64;
        let term = (ln_c(fi) + fi * lp + (nf - fi) * lq).exp();
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    sum.min(1.0)
}

/// `P(X ≤ k)` for `X ~ Poisson(lambda)`: how surprising so few events are
/// when `lambda` are expected (the test that a rate has dropped).
pub fn poisson_cdf(k: u64, lambda: f64) -> f64 {
    if lambda <= 0.0 {
        return 1.0;
    }
    // P(X ≤ k) = Q(k + 1, λ), the regularised upper incomplete gamma.
    let a = k as f64 + 1.0;
    if lambda < a + 1.0 {
        (1.0 - gamma_p(a, lambda)).clamp(0.0, 1.0)
    } else {
        gamma_q_cf(a, lambda, ln_gamma(a)).clamp(0.0, 1.0)
    }
}

/// Exact two-sided `1 - alpha` confidence interval of a Poisson mean from
/// an observed count `k` (Garwood): the means for which `k` sits at the
/// `alpha/2` tails.
pub fn poisson_interval(k: u64, alpha: f64) -> (f64, f64) {
    let half = alpha / 2.0;
    let lower = if k == 0 {
        0.0
    } else {
        // Largest mean with P(X ≥ k) ≤ alpha/2.
        bisect(|m| poisson_sf(k, m) - half, 0.0, k as f64 + 10.0)
    };
    // Smallest mean with P(X ≤ k) ≤ alpha/2, i.e. P(X ≥ k+1) ≥ 1 - alpha/2.
    let hi_start = (k as f64 + 10.0) * 4.0 + 10.0;
    let upper = bisect(|m| poisson_sf(k + 1, m) - (1.0 - half), 0.0, hi_start);
    (lower, upper)
}

/// The detectors' scan test: the latest window's count and the whole
/// horizon's count, each against its expected count at the reference rate,
/// each at `alpha / 2` (Bonferroni over the two scans). The window catches a
/// sudden onset that a long horizon dilutes; the horizon catches a rate too
/// low to show in one short window. Returns the smaller tail probability
/// (doubled) and whether it is below `alpha`.
pub fn scan_test(
    k_window: u64,
    exp_window: f64,
    k_horizon: u64,
    exp_horizon: f64,
    alpha: f64,
) -> (f64, bool) {
    let p = poisson_sf(k_window, exp_window).min(poisson_sf(k_horizon, exp_horizon));
    let p = (2.0 * p).min(1.0);
    (p, p < alpha)
}

/// Root of an increasing `f` on `[lo, hi]` by bisection.
fn bisect(f: impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    while f(hi) < 0.0 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if f(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi.max(1e-300) {
            break;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn binomial_upper_tail_matches_direct_sums() {
        // P(X >= 14), X ~ Bin(20, 1/3) = 8.8e-4 (a later stretch of 5
        // minutes with 14 of 20 errors, the earlier 10 with 6).
        let direct: f64 = (14..=20u64)
            .map(|i| {
                let c = (1..=i).fold(1.0, |a, j| a * (20 - i + j) as f64 / j as f64);
                c * (1.0f64 / 3.0).powi(i as i32) * (2.0f64 / 3.0).powi(20 - i as i32)
            })
            .sum();
        assert!(
            close(binomial_upper_sf(14, 20, 1.0 / 3.0), direct, 1e-9),
            "{direct}"
        );
        assert!(close(direct, 8.8e-4, 0.01), "{direct}");
        assert_eq!(binomial_upper_sf(5, 20, 1.0 / 3.0), 1.0, "below the mean");
        assert_eq!(binomial_upper_sf(0, 20, 0.5), 1.0);
        assert_eq!(binomial_upper_sf(21, 20, 0.5), 0.0);
        // Large n: no overflow, a tiny tail (z ≈ 19: about 1e-80).
        let t = binomial_upper_sf(53_000, 100_000, 0.5);
        assert!(t > 1e-90 && t < 1e-70, "{t}");
    }

    #[test]
    fn poisson_tail_matches_direct_sums() {
        // Direct sum of the upper tail of the pmf (no cancellation).
        for lambda in [0.01f64, 0.24, 1.0, 4.0, 30.0] {
            for k in 0..40u64 {
                let mut pmf = (-lambda).exp();
                let mut tail = 0.0;
                for i in 0..400u64 {
                    if i >= k {
                        tail += pmf;
                    }
                    pmf *= lambda / (i + 1) as f64;
                }
                let got = poisson_sf(k, lambda);
                if tail > 1e-280 {
                    assert!(close(got, tail, 1e-9), "k={k} λ={lambda}: {got} vs {tail}");
                }
            }
        }
        // Deep tail: P(X ≥ 8 | 0.24) ≈ 0.24^8/8! e^-0.24 (first term dominates).
        let first = 0.24f64.powi(8) / 40320.0 * (-0.24f64).exp();
        let got = poisson_sf(8, 0.24);
        assert!(got > first && got < first * 1.05, "{got} vs {first}");
        assert_eq!(poisson_sf(0, 5.0), 1.0);
        assert_eq!(poisson_sf(3, 0.0), 0.0);
    }

    #[test]
    fn poisson_cdf_matches_direct_sums() {
        for lambda in [0.3f64, 2.0, 8.75, 40.0, 190.0] {
            let mut pmf = (-lambda).exp();
            let mut cdf = 0.0;
            for k in 0..60u64 {
                cdf += pmf;
                let got = poisson_cdf(k, lambda);
                if cdf > 1e-280 {
                    assert!(close(got, cdf, 1e-8), "k={k} λ={lambda}: {got} vs {cdf}");
                }
                pmf *= lambda / (k + 1) as f64;
            }
        }
        // 0 events where 12 were expected: e^-12.
        assert!(close(poisson_cdf(0, 12.0), (-12.0f64).exp(), 1e-9));
        assert_eq!(poisson_cdf(5, 0.0), 1.0);
    }

    #[test]
    fn garwood_interval_known_values() {
        // Tabulated 95 % limits: k=0 → (0, 3.689), k=1 → (0.0253, 5.572),
        // k=10 → (4.795, 18.39).
        let (l, u) = poisson_interval(0, 0.05);
        assert_eq!(l, 0.0);
        assert!(close(u, 3.689, 1e-3), "{u}");
        let (l, u) = poisson_interval(1, 0.05);
        assert!(close(l, 0.0253, 1e-2) && close(u, 5.572, 1e-3), "{l} {u}");
        let (l, u) = poisson_interval(10, 0.05);
        assert!(close(l, 4.795, 1e-3) && close(u, 18.39, 1e-3), "{l} {u}");
    }
}

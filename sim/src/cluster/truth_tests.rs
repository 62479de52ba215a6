use super::*;

/// `P(X ≥ k)` by summing the pmf from 0 (recursively, in linear space):
/// `1 − Σ_{i<k} pmf(i)`, fine for the moderate λ used here.
fn tail_by_pmf(k: u64, lambda: f64) -> f64 {
    let mut pmf = (-lambda).exp();
    let mut below = 0.0;
    for i in 0..k {
        below += pmf;
        pmf *= lambda / (i + 1) as f64;
    }
    (1.0 - below).max(0.0)
}

/// Sum of the upper tail directly (no cancellation), for deep tails.
fn upper_by_pmf(k: u64, lambda: f64) -> f64 {
    let mut pmf = (-lambda).exp();
    let mut tail = 0.0;
    for i in 0..k + 400 {
        if i >= k {
            tail += pmf;
        }
        pmf *= lambda / (i + 1) as f64;
    }
    tail
}

#[test]
fn ln_factorial_is_exact_enough_on_both_sides_of_20() {
    let mut f = 0.0f64;
    for n in 1..=170u64 {
        f += (n as f64).ln();
        let got = ln_factorial(n);
        assert!((got - f).abs() <= 1e-12 * f.max(1.0), "{n}: {got} vs {f}");
    }
    assert_eq!(ln_factorial(0), 0.0);
}

#[test]
fn poisson_tail_matches_pmf_sums() {
    for lambda in [0.04f64, 0.24, 1.0, 4.0, 30.0, 200.0] {
        for k in 0..(3.0 * lambda) as u64 + 40 {
            let got = poisson_tail(k, lambda);
            let deep = upper_by_pmf(k, lambda);
            let want = if deep < 1e-3 {
                deep
            } else {
                tail_by_pmf(k, lambda)
            };
            if want > 1e-300 {
                let rel = (got - want).abs() / want;
                assert!(rel < 1e-9, "k={k} λ={lambda}: {got:e} vs {want:e}");
            }
        }
    }
    // Closed forms: P(X ≥ 1) = 1 − e^−λ; P(X ≥ 0) = 1; no errors without
    // a background.
    assert!((poisson_tail(1, 0.5) - (1.0 - (-0.5f64).exp())).abs() < 1e-15);
    assert_eq!(poisson_tail(0, 3.0), 1.0);
    assert_eq!(poisson_tail(1, 0.0), 0.0);
    // Millions of errors over a background of 7: far below f64's range,
    // not NaN.
    assert_eq!(poisson_tail(3_000_000, 7.0), 0.0);
    // A large mean: P(X ≥ λ) is just over a half (1/2 + pmf(λ)/2 + …).
    let half = poisson_tail(10_000, 10_000.0);
    assert!((0.50..0.51).contains(&half), "{half}");
}

/// NDR, 10 s windows: the reference BER (1e-14) gives 0.04 errors a window.
/// Five excess errors in the onset window are visible
/// (P(Poisson(0.04) ≥ 5) = 8.25e-10 < 1e-9); four are not (1.03e-7), nor
/// five spread over two windows (λ = 0.08: 2.6e-8).
#[test]
fn a_link_is_visible_once_its_errors_since_onset_outrun_the_reference() {
    let bits = 400e9 * 10.0;
    let (ber, alpha) = (1e-14, 1e-9);
    let p5 = poisson_tail(5, 0.04);
    assert!((p5 / 8.25e-10 - 1.0).abs() < 0.01, "{p5:e}");

    let mut t = Truth {
        onset_window: 13,
        ..Truth::default()
    };
    // Before the onset window nothing counts, even with errors.
    t.link_errors(12, 0, 0.0, ber, alpha);
    t.link_errors(13, 5, bits, ber, alpha);
    assert_eq!(t.visible_window, Some(13));

    let mut t = Truth {
        onset_window: 13,
        ..Truth::default()
    };
    t.link_errors(13, 4, bits, ber, alpha);
    assert_eq!(t.visible_window, None);
    t.link_errors(14, 1, bits, ber, alpha);
    assert_eq!(
        t.visible_window,
        None,
        "5 over 2 windows: {:e}",
        poisson_tail(5, 0.08)
    );
    // Two more: 7 errors over 3 windows (λ = 0.12): 6.4e-11.
    t.link_errors(15, 2, bits, ber, alpha);
    assert_eq!(t.visible_window, Some(15));
    assert_eq!(t.excess_errors, 7);
    // Visible once: later windows do not move it.
    t.link_errors(16, 100, bits, ber, alpha);
    assert_eq!(t.visible_window, Some(15));
}

//! `ib_link_degraded`: a port's bit error rate (errors ÷ bits signalled)
//! per counter family, and its transport retries per packet, tested by a
//! Poisson scan over the latest window and over the horizon against a
//! reference; hysteresis at `clear_significance`, and a saturated counter
//! holds an open incident.
use vocab::ib::saturation;
use vocab::kind::IncidentKind;

use super::IbConfig;
use super::{
    history::{horizon_secs, LongSum, Sums},
    Fabric, IbDetector, PortState, ERROR_COUNTERS,
};
use crate::engine::{incidents::Finding, stats};

/// `1.2e-12` style.
fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1e}")
    }
}

/// What one of a port's tests found this window.
struct Verdict {
    /// Doubled tail probability of the test, and the family (or
    /// "transport retries") it came from.
    p: f64,
    source: String,
    evidence: Vec<String>,
    /// BER estimate of the physical family.
    ber: Option<f64>,
    reference: f64,
}

/// The most significant of a port's tests, and how many significant ones
/// stopped this window.
struct Tests<'a> {
    cfg: &'a IbConfig,
    best: Option<Verdict>,
    gone: u32,
}

impl Tests<'_> {
    /// Families whose errors stopped this window are left out (counted
    /// when their horizon still holds significant errors).
    fn consider(&mut self, v: Verdict, stop: bool) {
        if stop {
            if v.p < self.cfg.clear_significance {
                self.gone += 1;
            }
            return;
        }
        if self.best.as_ref().is_none_or(|b| v.p < b.p) {
            self.best = Some(v);
        }
    }
}

/// Whether a rate has demonstrably stopped: the latest window's count is
/// improbably low (below `alpha`) for the rate the horizon measured, so the
/// horizon's evidence is history, not the link's present. A port whose
/// errors stopped does not stay open for the horizon; a port with sparse
/// errors (a few an hour) never looks stopped in one window.
fn stopped(k_window: u64, exp_window: f64, k_horizon: u64, exp_horizon: f64, alpha: f64) -> bool {
    if exp_horizon <= 0.0 || exp_window <= 0.0 {
        return false;
    }
    let expected = k_horizon as f64 * exp_window / exp_horizon;
    (k_window as f64) < expected && stats::poisson_cdf(k_window, expected) < alpha
}

/// The reference BER: the fabric's median (with enough peers), floored at
/// `reference_ber` and capped at `alarm_ber`.
fn reference_ber(cfg: &IbConfig, fabric: &Fabric) -> f64 {
    let (_, fabric_ber, _, n_ber, _) = *fabric;
    if n_ber >= cfg.min_peers {
        fabric_ber.max(cfg.reference_ber)
    } else {
        cfg.reference_ber
    }
    .min(cfg.alarm_ber)
}

/// The horizon that decided a test, in words.
fn horizon_name(secs: f64) -> String {
    if secs >= 120.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{secs:.0} s")
    }
}

/// One test per physical family with bits over the horizon: the latest
/// window, `horizon_s` and each long horizon, Bonferroni-corrected over
/// their number; the evidence names the horizon that decided.
fn ber_tests(t: &mut Tests, s: &Sums, long: &[LongSum], reference: f64) {
    let cfg = t.cfg;
    let scans = (2 + long.len()) as f64;
    for (f, name) in ERROR_COUNTERS.iter().enumerate() {
        let (kh, bh) = s.horizon[f];
        let (kw, bw) = s.window[f];
        if bh <= 0.0 {
            continue;
        }
        let p_short =
            stats::poisson_sf(kw, reference * bw).min(stats::poisson_sf(kh, reference * bh));
        // The most significant long horizon, if one beats the short ones.
        // A long horizon whose rate the short one demonstrably no longer
        // shows (its count improbably low for that rate) holds history,
        // not the link's present: it neither opens nor holds the port.
        let deciding = long
            .iter()
            .filter(|l| l.errors[f].1 > 0.0)
            .filter(|l| !stopped(kh, bh, l.errors[f].0, l.errors[f].1, cfg.clear_significance))
            .map(|l| {
                (
                    stats::poisson_sf(l.errors[f].0, reference * l.errors[f].1),
                    l,
                )
            })
            .filter(|(p, _)| *p < p_short)
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let p = (scans * deciding.map_or(p_short, |d| d.0)).min(1.0);
        let ber = kh as f64 / bh;
        let (lo, hi) = stats::poisson_interval(kh, 0.05);
        let mut evidence = vec![format!(
            "BER {} (95% interval {}–{}) from {name}: {kh} errors in {:.0} s at the link's rate; this window +{kw} (BER {})",
            sci(ber),
            sci(lo / bh),
            sci(hi / bh),
            horizon_secs(s, f),
            sci(if bw > 0.0 { kw as f64 / bw } else { 0.0 }),
        )];
        let mut long_ber = None;
        if let Some((_, l)) = deciding {
            let (k, b) = l.errors[f];
            long_ber = Some(k as f64 / b);
            evidence.insert(0, format!(
                "decided over the last {}: BER {} from {name}, {k} errors in {:.0} s (horizons judged: window, {}, {}; tail probability ×{scans:.0} for the number of horizons)",
                horizon_name(l.horizon_s),
                sci(k as f64 / b),
                l.secs,
                horizon_name(cfg.horizon_s),
                long.iter().map(|l| horizon_name(l.horizon_s)).collect::<Vec<_>>().join(", "),
            ));
        }
        t.consider(
            Verdict {
                p,
                source: (*name).to_string(),
                evidence,
                ber: Some(long_ber.unwrap_or(ber)),
                reference,
            },
            stopped(kw, bw, kh, bh, cfg.clear_significance),
        );
    }
}

/// Transport retries per packet: against the fabric, the port's own
/// history (links noisy when healthy) and the configured reference.
fn retry_test(t: &mut Tests, st: &PortState, s: &Sums, fabric: &Fabric) {
    let cfg = t.cfg;
    let (_, _, fabric_retry, _, n_retry) = *fabric;
    let own_warm = st.own_retry.warm();
    let by_peers_retry = n_retry >= cfg.min_peers;
    if s.retries_w.1 == 0 || !(by_peers_retry || own_warm) {
        return;
    }
    let mut retry_ref = cfg.retry_reference_per_packet;
    let mut basis = format!("reference {}", sci(retry_ref));
    if by_peers_retry && fabric_retry * cfg.own_history_factor > retry_ref {
        retry_ref = fabric_retry * cfg.own_history_factor;
        basis = format!(
            "{:.0}x the fabric median {} over {n_retry} ports",
            cfg.own_history_factor,
            sci(fabric_retry)
        );
    }
    if let Some(b) = st.own_retry.value().filter(|_| own_warm) {
        if b * cfg.own_history_factor > retry_ref {
            retry_ref = b * cfg.own_history_factor;
            basis = format!(
                "{:.0}x this port's own baseline {} over {} windows",
                cfg.own_history_factor,
                sci(b),
                st.own_retry.learnt()
            );
        }
    }
    let (rw, pw) = s.retries_w;
    let (rh, ph) = s.retries_h;
    let (p, _) = stats::scan_test(
        rw,
        retry_ref * pw as f64,
        rh,
        retry_ref * ph as f64,
        cfg.significance,
    );
    t.consider(Verdict {
        p,
        source: "transport retries".into(),
        evidence: vec![format!(
            "transport retries {} per packet this window ({rw} in {pw} packets; {rh} in {ph} over {:.0} s) against {} per packet ({basis})",
            sci(rw as f64 / pw as f64),
            s.secs,
            sci(retry_ref)
        )],
        ber: None,
        reference: retry_ref,
    }, stopped(rw, pw as f64, rh, ph as f64, cfg.clear_significance));
}

impl IbDetector {
    /// Runs a port's tests on its history; a finding when it is (or stays)
    /// degraded.
    pub(super) fn judge(
        &mut self,
        entity: &str,
        port: u32,
        fabric: Fabric,
        verbs_errors: u64,
        jobs: &[String],
    ) -> Option<Finding> {
        let cfg = &self.cfg;
        let st = self.ports.get_mut(entity)?;
        let s = st.history.sums();
        let long = st.history.long_sums(&cfg.long_horizons_s);
        let mut t = Tests {
            cfg,
            best: None,
            gone: 0,
        };
        ber_tests(&mut t, &s, &long, reference_ber(cfg, &fabric));
        retry_test(&mut t, st, &s, &fabric);
        // Own retry history learns from this window when it was near it.
        if let Some((r, pk)) = st.history.last().and_then(|x| x.retries) {
            let ratio = r as f64 / pk as f64;
            let near = st.own_retry.near(ratio, cfg.retry_reference_per_packet);
            st.own_retry.learn(ratio, near);
        }
        let saturated: Vec<String> = st
            .saturated
            .iter()
            .filter(|n| ERROR_COUNTERS.contains(&n.as_str()))
            .cloned()
            .collect();
        if t.best
            .as_ref()
            .is_none_or(|b| b.p >= cfg.clear_significance)
            && t.gone > 0
        {
            // Every significant error family stopped: the horizon restarts
            // here, so its past errors neither hold nor reopen the port.
            st.history.restart();
        }
        let verdict = t.best?;
        let opens = verdict.p < cfg.significance;
        let holds = st.degraded && (verdict.p < cfg.clear_significance || !saturated.is_empty());
        if !(opens || holds) {
            st.degraded = false;
            return None;
        }
        st.degraded = true;
        let ratio = verdict
            .ber
            .map_or(0.0, |b| (b / verdict.reference).max(1.0).log10());
        let confidence = (0.6
            + 0.1 * ratio.min(3.0)
            + if verbs_errors > 0 { 0.05 } else { 0.0 }
            + if opens { 0.05 } else { 0.0 })
        .min(0.99);
        let ev = evidence(cfg, st, verdict, opens, &fabric, &saturated, verbs_errors);
        let hca = entity
            .rsplit_once('/')
            .and_then(|(a, _)| a.rsplit_once('/').map(|(_, h)| h.to_string()))
            .unwrap_or_default();
        let mut finding = Finding::new(IncidentKind::IbLinkDegraded, entity, confidence);
        let mut ev = ev;
        if let Some((line, eta_s)) = forecast(cfg, st) {
            ev.insert(1.min(ev.len()), line);
            finding = finding.with_mark(format!("forecast_alarm_s:{eta_s:.0}"));
        }
        for n in &saturated {
            finding = finding.with_mark(format!("saturated:{n}"));
        }
        Some(
            finding
                .with_evidence_list(ev)
                .with_jobs(jobs)
                .with_runbook({
                    let hca = crate::shell::quote(&hca);
                    format!("link errors above the reference: `perfquery -x` on {hca} port {port}, `mlxlink -d {hca} -p {port} -c` for BER and FEC, `ibdiagnet` for the far end; drain the node and replace the cable if BER keeps rising")
                }),
        )
    }
}

/// Tail probability below which a rise between the older and the recent
/// minutes is a trend (not Poisson noise).
const TREND_SIGNIFICANCE: f64 = 1e-3;

/// "Rising: … at this rate, 1e-12 in ~40 min" when the recent minutes'
/// BER is significantly above the older ones' (a conditional binomial test
/// on the two counts) and still below the alarm line: the time to the
/// alarm line at the measured exponential growth.
fn forecast(cfg: &IbConfig, st: &PortState) -> Option<(String, f64)> {
    let t = st.history.trend()?;
    // Given all the errors of both stretches, how many fall in the later
    // one if the rate did not change: binomial by the stretches' bits.
    let share = t.b_new / (t.b_old + t.b_new);
    if stats::binomial_upper_sf(t.k_new, t.k_old + t.k_new, share) >= TREND_SIGNIFICANCE {
        return None;
    }
    let ber_old = t.k_old.max(1) as f64 / t.b_old;
    let ber_new = t.k_new as f64 / t.b_new;
    if ber_new >= cfg.alarm_ber || ber_new <= ber_old {
        return None;
    }
    let rate = (ber_new / ber_old).ln() / t.dt_s;
    let eta_s = (cfg.alarm_ber / ber_new).ln() / rate;
    let eta = if eta_s >= 7200.0 {
        format!("~{:.0} h", eta_s / 3600.0)
    } else {
        format!("~{:.0} min", (eta_s / 60.0).max(1.0))
    };
    Some((
        format!(
            "rising: BER {} → {} from {} over {:.0} min; at this rate, {} in {eta}",
            sci(ber_old),
            sci(ber_new),
            ERROR_COUNTERS[t.family],
            t.dt_s / 60.0,
            sci(cfg.alarm_ber),
        ),
        eta_s,
    ))
}

/// The evidence of a degraded port: the deciding test, its reference and
/// tail probability, the counters that moved, saturated counters, traffic
/// and the host's verbs errors.
fn evidence(
    cfg: &IbConfig,
    st: &PortState,
    verdict: Verdict,
    opens: bool,
    fabric: &Fabric,
    saturated: &[String],
    verbs_errors: u64,
) -> Vec<String> {
    let (_, fabric_ber, _, n_ber, _) = *fabric;
    let mut ev = verdict.evidence;
    if verdict.ber.is_some() {
        ev.push(format!(
            "reference BER {} ({}), alarm line {}; tail probability {} vs significance {}",
            sci(verdict.reference),
            if n_ber >= cfg.min_peers && fabric_ber > cfg.reference_ber {
                format!("fabric median over {n_ber} ports")
            } else {
                format!(
                    "floor; fabric median {} over {n_ber} ports",
                    sci(fabric_ber)
                )
            },
            sci(cfg.alarm_ber),
            sci(verdict.p),
            sci(cfg.significance),
        ));
    } else {
        ev.push(format!(
            "tail probability {} vs significance {}",
            sci(verdict.p),
            sci(cfg.significance)
        ));
    }
    if !opens {
        ev.push(format!(
            "still significant at {} (hysteresis), most in {}",
            sci(cfg.clear_significance),
            verdict.source
        ));
    }
    let last = st.history.last();
    // One line per counter that moved, `name +N this window`.
    for (f, n) in ERROR_COUNTERS.iter().enumerate() {
        if let Some(e) = last.and_then(|x| x.errors[f]).filter(|&e| e > 0) {
            ev.push(format!("{n} +{e} this window"));
        }
    }
    for (n, d) in &st.moved_hw {
        ev.push(format!("{n} +{d} this window"));
    }
    for n in saturated {
        ev.push(format!(
            "{n} saturated at {}: errors since are not counted (a lower bound, not zero); clear the counters (`perfquery -R`) to measure again",
            saturation(n).unwrap_or(0)
        ));
    }
    if let Some(x) = last {
        if let Some(b) = x.bytes {
            let per_s = b as f64 / x.secs;
            let util = if x.rate_bytes > 0 {
                format!(
                    " ({:.0}% of the link's {:.0} Gb/s each way)",
                    50.0 * per_s / x.rate_bytes as f64,
                    x.rate_bytes as f64 * 8e-9
                )
            } else {
                String::new()
            };
            ev.push(format!(
                "traffic {:.2} GB/s sent + received this window{util}",
                per_s / 1e9
            ));
        }
    }
    if verbs_errors > 0 {
        ev.push(format!(
            "{verbs_errors} verbs work completions in error on this host this window"
        ));
    }
    ev
}

//! The paired-ratio rounds of the probe-overhead benchmarks (`launch`,
//! `nccl`): every configuration measured once per round, the order rotated
//! from round to round, and each throughput paired with the same round's
//! first configuration ("without probes"), so that a machine slower in one
//! round slows both sides of the ratio. A configuration whose measurement
//! fails is recorded as failed and left out of the later rounds; the others
//! go on.
use anyhow::Result;

use crate::report::Failures;

/// Every round's throughput and paired ratio, per configuration (in the
/// order of the configurations given).
pub struct Rounds {
    /// Throughput of each round the configuration ran.
    pub tput: Vec<Vec<f64>>,
    /// Throughput / the same round's baseline, for each round both ran.
    pub ratios: Vec<Vec<f64>>,
    /// The `(throughput, baseline)` behind each ratio.
    pub pairs: Vec<Vec<(f64, f64)>>,
    /// Why a configuration stopped being measured (its failure's text).
    pub failed: Vec<Option<String>>,
}

/// Runs `rounds` rounds over `configs` (the first is the baseline):
/// `measure(i, round)` measures `configs[i]` and returns its throughput
/// (recording whatever else it measured itself); a failure is added to
/// `failures` as `"LABEL round N"`.
pub fn run<C: Copy>(
    rounds: u32,
    configs: &[C],
    label: fn(C) -> &'static str,
    failures: &mut Failures,
    mut measure: impl FnMut(usize, usize) -> Result<f64>,
) -> Rounds {
    let n = configs.len();
    let mut s = Rounds {
        tput: vec![Vec::new(); n],
        ratios: vec![Vec::new(); n],
        pairs: vec![Vec::new(); n],
        failed: vec![None; n],
    };
    for round in 0..rounds as usize {
        let mut this: Vec<Option<f64>> = vec![None; n];
        for k in 0..n {
            let i = (round + k) % n;
            if s.failed[i].is_some() {
                continue;
            }
            match measure(i, round) {
                Ok(x) => this[i] = Some(x),
                Err(e) => {
                    let what = format!("{} round {round}", label(configs[i]));
                    s.failed[i] = Some(failures.add(&what, &e));
                }
            }
        }
        for i in 0..n {
            let Some(x) = this[i] else { continue };
            s.tput[i].push(x);
            if let Some(base) = this[0] {
                s.ratios[i].push(x / base.max(1e-9));
                s.pairs[i].push((x, base));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_rotate_pair_with_the_baseline_and_drop_a_failed_config() {
        let mut order = Vec::new();
        let mut failures = Failures::default();
        let s = run(
            3,
            &["without", "a", "b"],
            |c| c,
            &mut failures,
            |i, round| {
                order.push((round, i));
                match (i, round) {
                    (2, 1) => anyhow::bail!("stand-in crashed"),
                    (0, _) => Ok(100.0),
                    (1, r) => Ok(50.0 + r as f64),
                    _ => Ok(200.0),
                }
            },
        );
        assert_eq!(
            order,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 1),
                (1, 2),
                (1, 0),
                (2, 0),
                (2, 1)
            ],
            "rotated; b not measured after it failed"
        );
        assert_eq!(s.tput[1], [50.0, 51.0, 52.0]);
        assert_eq!(s.ratios[1], [0.5, 0.51, 0.52]);
        assert_eq!(s.pairs[1][2], (52.0, 100.0));
        assert_eq!(s.ratios[0], [1.0, 1.0, 1.0]);
        assert_eq!(s.tput[2], [200.0]);
        assert!(
            s.failed[2]
                .as_deref()
                .is_some_and(|f| f.contains("b round 1")),
            "{:?}",
            s.failed
        );
        assert!(s.failed[0].is_none() && s.failed[1].is_none());
    }
}

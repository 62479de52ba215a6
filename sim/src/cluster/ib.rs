//! InfiniBand ports: their counters (vocab's IBA widths), the degrading
//! links' excess errors, sporadic single errors, and each window's base
//! errors, derived errors and traffic.
use std::sync::OnceLock;

use super::{overlap, Cluster, Fault, Kind, Span, Target, HCAS};

/// The counter files (sysfs `counters/`) a simulated port has, in the order
/// of [`Port::c`].
pub const COUNTERS: [&str; 13] = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_wait",
];
pub(super) const SYM: usize = 0;
const LER: usize = 1;
const DOWNED: usize = 2;
const RCV_ERR: usize = 3;
const DISCARDS: usize = 6;
pub(super) const XMIT_DATA: usize = 8;
const RCV_DATA: usize = 9;
const XMIT_PKTS: usize = 10;
const RCV_PKTS: usize = 11;
const XMIT_WAIT: usize = 12;

/// Largest value of `counters/<file>` on the simulated HCAs, where it
/// saturates: the simulated HCAs have PortCountersExtended, so the counters
/// it widens (data and packets, [`vocab::ib::EXT_COUNTERS`]) are 64-bit;
/// every other counter stops at its legacy width ([`vocab::ib::saturation`]).
pub fn counter_max(file: &str) -> u64 {
    let widened = vocab::ib::EXT_COUNTERS.iter().any(|x| x.widens == file);
    if widened {
        u64::MAX
    } else {
        vocab::ib::saturation(file).unwrap_or(u64::MAX)
    }
}

/// [`counter_max`] of every entry of [`COUNTERS`] (looked up once).
fn maxima() -> &'static [u64; 13] {
    static MAXIMA: OnceLock<[u64; 13]> = OnceLock::new();
    MAXIMA.get_or_init(|| COUNTERS.map(counter_max))
}

/// `port_xmit_wait` ticks per second of waiting.
const WAIT_TICKS_PER_S: f64 = 250e6;
/// Time a corrupted packet costs its rank (NAK, go-back-N retransmit).
const CORRUPT_PACKET_COST_S: f64 = 20e-6;

#[derive(Clone, Debug)]
pub(super) struct Port {
    pub c: [u64; 13],
    pub state: u32,
    pub phys: u32,
    pub base_ber: f64,
}

impl Port {
    /// Adds `v` to counter `i`, which stops at its maximum.
    pub fn add(&mut self, i: usize, v: u64) {
        self.c[i] = self.c[i].saturating_add(v).min(maxima()[i]);
    }
}

/// ∫ (ber(t) − base) dt over [a, b) for a BER ramping log-linearly from
/// `base` at `onset` to `target` at `onset + ramp`, constant after.
pub fn excess_ber_integral(base: f64, target: f64, ramp: f64, onset: f64, a: f64, b: f64) -> f64 {
    let a = a.max(onset);
    if b <= a || target <= base {
        return 0.0;
    }
    if ramp <= 0.0 {
        return (target - base) * (b - a);
    }
    let end = onset + ramp;
    let g = (target / base).ln() / ramp;
    let mut s = 0.0;
    let (ra, rb) = (a, b.min(end));
    if rb > ra {
        s += base / g * ((g * (rb - onset)).exp() - (g * (ra - onset)).exp()) - base * (rb - ra);
    }
    let (fa, fb) = (a.max(end), b);
    if fb > fa {
        s += (target - base) * (fb - fa);
    }
    s.max(0.0)
}

impl Cluster {
    /// Degrading links: the fault's excess errors this window, and their
    /// ground truth (the bits the port signalled since the onset).
    pub(super) fn degrade_advance(&mut self, faults: &[Fault], s: Span) {
        let bits = self.spec.link_rate.bits_per_sec();
        for (fi, f) in faults.iter().enumerate() {
            let o = s.on(f);
            let (ber, ramp_s, ports) = match (&f.kind, &f.target) {
                (&Kind::IbLinkDegrade { ber, ramp_s }, &Target::Port { node, hca }) => {
                    (ber, ramp_s, vec![(node, hca)])
                }
                (&Kind::IbSwitchDegrade { ber, ports }, &Target::Switch(leaf)) => (
                    ber,
                    0.0,
                    super::topology::switch_ports(leaf, ports, self.nodes.len()),
                ),
                _ => continue,
            };
            // A switch's ports: each is judged on its own errors, and the
            // switch is the fault once three are significant, so the truth
            // follows the third-most erring port (the only one of one).
            let mut each: Vec<(u64, f64)> = Vec::with_capacity(ports.len());
            for (node, hca) in ports {
                let pi = node * HCAS + hca;
                let base = self.nodes[node].ports[hca].base_ber;
                let up_bits = bits * self.up_frac[pi];
                let lambda = up_bits * excess_ber_integral(base, ber, ramp_s, o, s.a, s.b);
                let excess = self.rng.poisson(lambda);
                self.extra_sym[pi] += excess;
                let signalled = up_bits * overlap(s.a, s.b, o, f64::INFINITY);
                each.push((excess, signalled));
            }
            each.sort_by_key(|e| std::cmp::Reverse(e.0));
            let Some(&(excess, signalled)) = each.get(each.len().min(3).saturating_sub(1)) else {
                continue;
            };
            let (reference_ber, significance) = (self.reference_ber, self.significance);
            self.truth[fi].link_errors(s.k, excess, signalled, reference_ber, significance);
        }
    }

    /// Sporadic single errors on many ports at once.
    pub(super) fn single_errors_advance(&mut self, faults: &[Fault], s: Span) {
        for f in faults {
            if let Kind::SingleErrors { fraction, every_s } = f.kind {
                let o = s.on(f);
                let share = overlap(s.a, s.b, o, f64::INFINITY) / s.w;
                let events = self.rng.poisson(share * s.w / every_s);
                for _ in 0..events {
                    let hit = self.rng.binomial(self.extra_sym.len() as u64, fraction);
                    for _ in 0..hit {
                        let pi = self.rng.below(self.extra_sym.len());
                        self.extra_sym[pi] += 1;
                    }
                }
            }
        }
    }

    /// Every port: base errors, derived errors, traffic; corrupted packets
    /// slow the rank on the port. `util` is the job's share of line rate,
    /// `run_frac` the share of the window the job ran.
    pub(super) fn ports_advance(&mut self, w: f64, util: f64, run_frac: f64) {
        let bits = self.spec.link_rate.bits_per_sec();
        let rate_bytes = self.spec.link_rate.bytes_per_sec() as f64;
        for (ni, node) in self.nodes.iter_mut().enumerate() {
            for (hi, p) in node.ports.iter_mut().enumerate() {
                let pi = ni * HCAS + hi;
                let up = self.up_frac[pi];
                let sym = self.rng.poisson(p.base_ber * bits * w * up) + self.extra_sym[pi];
                let cong = self.congested[pi];
                let port_util = util * (1.0 - 0.3 * cong);
                // Each symbol error lands in at most one packet.
                let rcv_err = self.rng.binomial(sym, (port_util * 0.5).min(1.0));
                let ler = self.rng.poisson(sym as f64 * 1e-4);
                p.add(SYM, sym);
                p.add(RCV_ERR, rcv_err);
                p.add(LER, ler);
                p.add(DOWNED, self.downs[pi]);
                let jitter = 0.95 + 0.1 * self.rng.uniform();
                let bytes = rate_bytes * w * up * port_util * jitter;
                let words = (bytes / 4.0) as u64;
                let packets = (bytes / 4096.0) as u64;
                p.add(XMIT_DATA, words);
                p.add(RCV_DATA, words);
                p.add(XMIT_PKTS, packets);
                p.add(RCV_PKTS, packets);
                // Some waiting is normal under load; congestion adds a lot.
                let wait_share = 0.01 * port_util + cong * self.rng.range(0.2, 0.6);
                p.add(XMIT_WAIT, (wait_share * w * up * WAIT_TICKS_PER_S) as u64);
                if cong > 0.0 {
                    let d = self.rng.poisson(cong * w * 2.0);
                    p.add(DISCARDS, d);
                }
                if rcv_err > 0 && run_frac > 0.0 {
                    let slow = (rcv_err as f64 / w * CORRUPT_PACKET_COST_S).min(1.0);
                    node.step[hi] *= 1.0 + slow;
                    node.comm[hi] *= 1.0 + slow;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The widths come from vocab: legacy error counters stop at their IBA
    /// width, the counters PortCountersExtended widens are 64-bit, and
    /// `port_xmit_wait` (PortCounters only) at 32 bits.
    #[test]
    fn counter_maxima_follow_the_iba_widths() {
        let m = maxima();
        assert_eq!(m[SYM], 65_535);
        assert_eq!(m[LER], 255);
        assert_eq!(m[DOWNED], 255);
        assert_eq!(m[RCV_ERR], 65_535);
        assert_eq!(m[4], 15, "local_link_integrity_errors");
        assert_eq!(m[5], 15, "excessive_buffer_overrun_errors");
        assert_eq!(m[DISCARDS], 65_535);
        for i in [XMIT_DATA, RCV_DATA, XMIT_PKTS, RCV_PKTS] {
            assert_eq!(m[i], u64::MAX, "{}", COUNTERS[i]);
        }
        assert_eq!(m[XMIT_WAIT], u64::from(u32::MAX));
        // Every simulated counter is one vocab knows.
        assert!(COUNTERS.iter().all(|f| vocab::ib::spec(f).is_some()));
    }
}

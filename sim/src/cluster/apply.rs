//! The faults' effects on one window, other than the ports' errors
//! ([`super::ib`]) and the NCCL timeline: the job's run time, link states,
//! counter resets and congestion; GPUs, nodes, collectors and storage
//! slowdowns; congestion on step times; idle GPUs.

use super::{overlap, Cluster, Fault, Kind, Span, Target, GPUS, HCAS};
use crate::rng::Rng;

/// Fraction of step time spent writing checkpoints on healthy storage.
const CHECKPOINT_SHARE: f64 = 0.02;

/// A node's ranks slowed by their checkpoints on storage `factor` times slower.
fn checkpoint_slowdown(factor: f64) -> f64 {
    (1.0 + CHECKPOINT_SHARE * (factor - 1.0)).min(2.0)
}

impl Cluster {
    /// The share of the window the job ran (`job-end` gaps), and whether it
    /// runs at the window's end.
    pub(super) fn job_advance(&mut self, faults: &[Fault], s: Span) -> f64 {
        let mut run_frac = 1.0;
        self.job_running = true;
        for f in faults {
            if let Kind::JobEnd { gap_s } | Kind::NcclJobExit { gap_s } = f.kind {
                let o = s.on(f);
                run_frac -= overlap(s.a, s.b, o, o + gap_s) / s.w;
                if s.at_end(o) && s.b <= o + gap_s + 1e-9 {
                    self.job_running = false;
                }
            }
        }
        run_frac.clamp(0.0, 1.0)
    }

    /// The share of the window the job pauses (`nccl-checkpoint`,
    /// `nccl-eval`), and which pause holds at its end.
    pub(super) fn pause_advance(&mut self, faults: &[Fault], s: Span) -> f64 {
        let mut share = 0.0f64;
        self.pause = None;
        for f in faults {
            if let Kind::NcclCheckpoint { duration_s } | Kind::NcclEval { duration_s } = f.kind {
                let o = s.on(f);
                share = share.max(overlap(s.a, s.b, o, o + duration_s) / s.w);
                if s.at_end(o) && s.b <= o + duration_s + 1e-9 {
                    self.pause = Some(f.kind.clone());
                }
            }
        }
        share.clamp(0.0, 1.0)
    }

    /// Every node's per-window state before the faults: up, sending, a
    /// healthy step time (±1.5 %); the per-port scratch cleared.
    pub(super) fn reset_window(&mut self) {
        for node in &mut self.nodes {
            node.up = true;
            node.skip = false;
            node.restarted = false;
            node.comm = [1.0; GPUS];
            for s in &mut node.step {
                *s = 1.0 + 0.03 * (self.rng.uniform() - 0.5);
            }
        }
        self.serve_factor = 1.0;
        self.up_frac.iter_mut().for_each(|x| *x = 1.0);
        self.downs.iter_mut().for_each(|x| *x = 0);
        self.extra_sym.iter_mut().for_each(|x| *x = 0);
        self.congested.iter_mut().for_each(|x| *x = 0.0);
    }

    /// Link state, resets and congestion (they shape the traffic); returns
    /// the congestion level (share of the window congested).
    pub(super) fn links_advance(&mut self, faults: &[Fault], s: Span) -> f64 {
        let mut cong_level = 0.0f64;
        for (fi, f) in faults.iter().enumerate() {
            let o = s.on(f);
            match (&f.kind, &f.target) {
                (Kind::IbLinkDown | Kind::NcclHangPortDown, Target::Port { node, hca })
                    if s.at_end(o) =>
                {
                    let pi = node * HCAS + hca;
                    if s.in_window(o) {
                        self.downs[pi] += 1;
                    }
                    self.up_frac[pi] = ((o - s.a) / s.w).clamp(0.0, 1.0);
                    let p = &mut self.nodes[*node].ports[*hca];
                    p.state = 1;
                    p.phys = 2;
                }
                (&Kind::IbLinkFlap { period_s, down_s }, &Target::Port { node, hca })
                    if s.at_end(o) =>
                {
                    self.flap_advance(s, o, period_s, down_s, node, hca);
                }
                (Kind::CounterReset, Target::Port { node, hca }) if s.in_window(o) => {
                    self.nodes[*node].ports[*hca].c = [0; 13];
                }
                (
                    &Kind::Congestion {
                        fraction,
                        duration_s,
                    },
                    _,
                ) => {
                    let share = overlap(s.a, s.b, o, o + duration_s) / s.w;
                    if share > 0.0 {
                        cong_level = cong_level.max(share);
                        // The congested ports: a fixed set per fault.
                        for (pi, c) in self.congested.iter_mut().enumerate() {
                            let mut h = Rng::derive(fi as u64 + 1, pi as u64);
                            if h.uniform() < fraction {
                                *c = c.max(share);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        cong_level
    }

    /// A flapping port (flaps from `o` every `period_s`, each `down_s`
    /// long): its downs in the window, its time up, its sampled state.
    fn flap_advance(
        &mut self,
        s: Span,
        o: f64,
        period_s: f64,
        down_s: f64,
        node: usize,
        hca: usize,
    ) {
        let pi = node * HCAS + hca;
        let n_lo = ((s.a - down_s - o) / period_s).ceil().max(0.0) as u64;
        let n_hi = ((s.b - o) / period_s).ceil().max(0.0) as u64;
        let mut down_time = 0.0;
        for n in n_lo..n_hi {
            let start = o + n as f64 * period_s;
            if s.in_window(start) {
                self.downs[pi] += 1;
            }
            down_time += overlap(s.a, s.b, start, start + down_s);
        }
        self.up_frac[pi] = (1.0 - down_time / s.w).clamp(0.0, 1.0);
        let t = s.b - 1e-9 - o;
        let down = t >= 0.0 && t % period_s < down_s;
        let p = &mut self.nodes[node].ports[hca];
        (p.state, p.phys) = if down { (1, 2) } else { (4, 5) };
    }

    /// GPUs, nodes, collectors, storage slowdowns: returns each node's
    /// per-device latency factor.
    pub(super) fn nodes_advance(&mut self, faults: &[Fault], s: Span) -> Vec<Vec<f64>> {
        let mut slow: Vec<Vec<f64>> = self
            .nodes
            .iter()
            .map(|n| vec![1.0; n.devices.len()])
            .collect();
        for f in faults {
            let o = s.on(f);
            if !s.at_end(o) {
                continue;
            }
            match (&f.kind, &f.target) {
                (
                    Kind::GpuThermal | Kind::GpuPower | Kind::Xid { .. } | Kind::EccDbe,
                    &Target::Gpu { node, gpu },
                ) => {
                    self.gpu_fault(&f.kind, s, o, node, gpu);
                }
                (&Kind::StorageStall { factor }, Target::Device { node, dev }) => {
                    slow[*node][*dev] *= factor;
                    // The node's ranks wait longer for their checkpoints.
                    for st in &mut self.nodes[*node].step {
                        *st *= checkpoint_slowdown(factor);
                    }
                }
                (&Kind::StorageFleetSlow { factor }, _) => {
                    for (n, node) in slow.iter_mut().zip(&mut self.nodes) {
                        n.iter_mut().for_each(|x| *x *= factor);
                        for st in &mut node.step {
                            *st *= checkpoint_slowdown(factor);
                        }
                    }
                }
                (Kind::NodeLoss, Target::Node(n)) => self.nodes[*n].up = false,
                (&Kind::InferenceSlow { factor }, _) => self.serve_factor *= factor,
                (&Kind::JobSlow { factor }, _) => {
                    for node in &mut self.nodes {
                        node.step.iter_mut().for_each(|st| *st *= factor);
                    }
                }
                // The rank's process computes slower (CPU contention, a
                // data loader, a slow GPU without a throttle reason).
                (&Kind::NcclSlowRank { factor }, &Target::Gpu { node, gpu }) => {
                    self.nodes[node].step[gpu] *= factor;
                }
                (&Kind::NcclSlowRank { factor }, &Target::Node(n)) => {
                    self.nodes[n].step.iter_mut().for_each(|st| *st *= factor);
                }
                (Kind::CollectorRestart, Target::Node(n)) if s.in_window(o) => {
                    let node = &mut self.nodes[*n];
                    node.restarts += 1;
                    node.instance = format!("{}-sim-{}", node.name, node.restarts + 1);
                    node.seq = 0;
                    node.skip = true;
                    node.restarted = true;
                }
                _ => {}
            }
        }
        slow
    }

    /// A GPU fault active at the window's end (onset `o`): throttles slow
    /// the rank (and the model server on the last GPU of the last node); an
    /// XID is an event in its onset window; a double-bit ECC error counts.
    pub(super) fn gpu_fault(&mut self, kind: &Kind, s: Span, o: f64, node: usize, gpu: usize) {
        let serves = node == self.nodes.len().saturating_sub(1) && gpu == GPUS - 1;
        let slowdown = match kind {
            Kind::GpuThermal => {
                let g = &mut self.nodes[node].gpus[gpu];
                (g.temp, g.clock, g.throttle) = (91, 1200, 0x40);
                1.5
            }
            Kind::GpuPower => {
                let g = &mut self.nodes[node].gpus[gpu];
                (g.clock, g.throttle, g.power) = (1400, 0x4, 699.0);
                1.35
            }
            Kind::Xid { code } if s.in_window(o) => {
                let e = self.xid_fault_event(o, node, gpu, *code);
                self.nodes[node].events.push(e);
                return;
            }
            Kind::EccDbe if s.in_window(o) => {
                self.nodes[node].gpus[gpu].dbe += 1;
                return;
            }
            _ => return,
        };
        self.nodes[node].step[gpu] *= slowdown;
        if serves {
            self.serve_factor *= slowdown;
        }
    }

    /// Congestion (`level`: the share of the window congested) slows every
    /// rank's step, all of it in the fabric.
    pub(super) fn congestion_advance(&mut self, level: f64) {
        if level <= 0.0 {
            return;
        }
        for node in &mut self.nodes {
            for st in &mut node.step {
                *st *= 1.0 + 0.2 * level;
            }
            for c in &mut node.comm {
                *c *= 1.0 + 0.2 * level;
            }
        }
    }

    /// GPUs of an idle cluster cool down and draw idle power.
    pub(super) fn gpus_idle(&mut self) {
        for node in &mut self.nodes {
            for g in &mut node.gpus {
                if g.throttle == 0 {
                    (g.power, g.temp) = if self.job_running {
                        (550.0, 55)
                    } else {
                        (90.0, 38)
                    };
                }
            }
        }
    }
}

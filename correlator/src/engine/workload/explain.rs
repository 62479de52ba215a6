//! Joining a workload symptom to an infrastructure cause through the
//! placement of the job's ranks, and the symptom's own incident when
//! nothing explains it.
use vocab::kind::IncidentKind;

use super::{Place, Symptom};
use crate::engine::incidents::Finding;

impl Symptom {
    /// Whether an incident (kind, entity, evidence) on the infrastructure
    /// explains this symptom: it sits on a GPU, HCA port, host or device
    /// that one of the job's ranks uses; or, for a job's slowdown, a
    /// straggler of the same job (every rank waits for the slow one: one
    /// cause, one incident).
    pub fn explained_by(&self, kind: &str, entity: &str, evidence: &[String]) -> bool {
        if kind == "straggler" {
            return self.is_slowdown_of_straggler(entity);
        }
        self.places
            .iter()
            .any(|p| place_explained(p, kind, entity, evidence))
    }

    /// Whether this is a job's slowdown and `straggler` (`job/rank`) one of
    /// its ranks.
    fn is_slowdown_of_straggler(&self, straggler: &str) -> bool {
        self.kind == IncidentKind::JobSlowdown
            && !self.job.is_empty()
            && straggler
                .strip_prefix(&self.job)
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|r| !r.is_empty() && !r.contains('/'))
    }

    /// The placement that ties the symptom to the cause, for the evidence
    /// ("rank 7 on n003 uses gpu1 and mlx5_1").
    pub fn via(&self, kind: &str, entity: &str, evidence: &[String]) -> String {
        if kind == "straggler" && self.is_slowdown_of_straggler(entity) {
            let rank = entity.rsplit('/').next().unwrap_or(entity);
            return format!("every rank waits for its straggling rank {rank}");
        }
        let Some(p) = self
            .places
            .iter()
            .find(|p| place_explained(p, kind, entity, evidence))
        else {
            return String::new();
        };
        let mut s = if p.rank >= 0 {
            format!("rank {} on {}", p.rank, p.host)
        } else {
            format!("served from {}", p.host)
        };
        let mut uses = Vec::new();
        if p.device >= 0 {
            uses.push(format!("gpu{}", p.device));
        }
        if !p.hca.is_empty() {
            uses.push(p.hca.clone());
        }
        if !uses.is_empty() {
            s.push_str(&format!(" uses {}", uses.join(" and ")));
        }
        s
    }

    /// The symptom's own incident, when no cause explains it.
    pub fn finding(&self) -> Finding {
        if self.kind == IncidentKind::Straggler {
            let host = self.places.first().map_or("", |p| p.host.as_str());
            let sh = crate::shell::quote(host);
            let rank = self.places.first().map_or(-1, |p| p.rank);
            return Finding::new(IncidentKind::Straggler, &self.entity, 0.6)
                .with_evidence(self.line.clone())
                .with_evidence(format!("no GPU throttling, link degradation or storage stall found on {host} for this rank"))
                .with_jobs(std::slice::from_ref(&self.job))
                .with_runbook(format!("1 workload: rank {rank}'s step time against its peers (data loader, CPU contention `top -H` on {sh}, `py-spy dump`); 2 GPU: `nvidia-smi -q -d PERFORMANCE` on {sh}; 3 fabric: `NCCL_DEBUG=INFO`, `perfquery -x` on its HCA; 4 storage: `iostat -x 1` on {sh}"));
        }
        let hosts: Vec<&str> = {
            let mut h: Vec<&str> = self.places.iter().map(|p| p.host.as_str()).collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        let shown = hosts.iter().take(8).copied().collect::<Vec<_>>().join(", ");
        // The runbook's copy: each host one shell word.
        let shown_sh = hosts
            .iter()
            .take(8)
            .map(|h| crate::shell::quote(h))
            .collect::<Vec<_>>()
            .join(", ");
        let more = if hosts.len() > 8 {
            format!(" and {} more", hosts.len() - 8)
        } else {
            String::new()
        };
        let conf = (0.55 + 0.2 * (self.ratio - 1.0).min(1.0)).min(0.8);
        Finding::new(self.kind, &self.entity, conf)
            .with_evidence(self.line.clone())
            .with_evidence(format!(
                "no open GPU, link, storage or node incident on the {} rank(s) of {} on {shown}{more}",
                self.places.len(),
                self.job
            ))
            .with_jobs(std::slice::from_ref(&self.job))
            .with_runbook(runbook(
                self.kind,
                &crate::shell::quote(&self.job),
                &shown_sh,
            ))
    }
}

fn place_explained(p: &Place, kind: &str, entity: &str, evidence: &[String]) -> bool {
    let host = vocab::entity::host_prefix(&p.host);
    match kind {
        k if k.starts_with("gpu_") => {
            let gpu = vocab::entity::gpu(&p.host, p.device);
            // A host incident (shared cooling) lists its GPUs, one line each.
            p.device >= 0
                && (entity == gpu
                    || (entity == p.host
                        && evidence.iter().any(|e| e.starts_with(&format!("{gpu}: ")))))
        }
        "ib_link_degraded" | "ib_link_down" | "ib_link_flapping" => {
            let port = if p.hca.is_empty() {
                host
            } else {
                vocab::entity::hca_prefix(&p.host, &p.hca)
            };
            entity.starts_with(&port)
                || evidence.iter().any(|e| {
                    crate::engine::incidents::evidence_port(e).is_some_and(|r| r.starts_with(&port))
                })
        }
        "storage_latency" => entity.starts_with(&host),
        // One host's mount, or a target whose evidence lists this host.
        "nfs_latency" | "lustre_latency" => {
            entity.starts_with(&host)
                || evidence.iter().any(|e| {
                    e.strip_prefix(crate::engine::nfs::AFFECTED)
                        .is_some_and(|l| l.split(' ').any(|h| h == p.host))
                })
        }
        "node_lost" => entity == p.host,
        // Another tenant on a GPU, port or device of this rank's host.
        "interference" => {
            entity == vocab::entity::gpu(&p.host, p.device)
                || (!p.hca.is_empty()
                    && entity.starts_with(&vocab::entity::hca_prefix(&p.host, &p.hca)))
                || evidence.iter().any(|e| {
                    e.starts_with("shared storage ") && e.ends_with(&format!(" on {}", p.host))
                })
        }
        _ => false,
    }
}

/// The cross-layer runbook of an unexplained workload symptom: workload →
/// GPU → fabric → storage → external.
fn runbook(kind: IncidentKind, job: &str, hosts: &str) -> String {
    let first = if kind == IncidentKind::InferenceLatency {
        format!("1 workload: {job}'s request mix (prompt/output lengths), batch size and queue depth (gen_ai.* metrics), KV-cache pressure, a model or engine upgrade")
    } else {
        format!("1 workload: {job}'s phase (eval, recompilation, data loader stalls: `py-spy dump`), batch size and input pipeline")
    };
    format!(
        "{first}; 2 GPU on {hosts}: `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE` for throttle reasons, `dcgmi diag -r 1`; 3 fabric: `perfquery -x` / `mlxlink -c` on the ranks' HCAs, `NCCL_DEBUG=INFO` for ring/tree changes; 4 storage: `iostat -x 1` and the checkpoint/dataset filesystem's latency; 5 external: other tenants on the nodes (CPU steal, memory bandwidth), shared filesystem or object store, upstream services"
    )
}

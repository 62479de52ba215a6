//! The severity table through the incident manager: every kind is rated,
//! the rows with real sizes, a severity that rises and never falls, the
//! configuration's overrides and their validation.
use proto::v1::{CudaProc, NcclRank, Origin, Window};

use super::severity::{Severity, SeverityConfig};
use super::*;
use vocab::kind::IncidentKind;

fn mgr_with(sev: SeverityConfig) -> IncidentManager {
    IncidentManager::new(IncidentConfig {
        quiet_s: 2.0,
        quiet_windows: 2,
        update_delta: 0.05,
        severity: sev,
    })
}

fn mgr() -> IncidentManager {
    mgr_with(SeverityConfig::default())
}

/// A window of `host` whose NCCL ranks of `job` report a communicator of
/// `nranks` and whose CUDA processes of it use `devices` GPUs.
fn job_window(host: &str, job: &str, nranks: i32, devices: i32) -> Window {
    Window {
        end_unix_ms: 1_000,
        origin: Some(Origin {
            hostname: host.into(),
            ..Default::default()
        }),
        nccl: vec![NcclRank {
            job: job.into(),
            nranks,
            ..Default::default()
        }],
        cuda: (0..devices)
            .map(|d| CudaProc {
                device: d,
                job: job.into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn finding(kind: &'static str, entity: &str, jobs: &[&str]) -> Finding {
    let jobs: Vec<String> = jobs.iter().map(|j| j.to_string()).collect();
    Finding::new(
        IncidentKind::parse(kind).expect("a known kind"),
        entity,
        0.9,
    )
    .with_jobs(&jobs)
}

trait WithKind {
    fn with_kind(self, kind: &'static str) -> Self;
}

impl WithKind for Finding {
    fn with_kind(mut self, kind: &'static str) -> Self {
        self.kind = IncidentKind::parse(kind).expect("a known kind");
        self
    }
}

fn opened(m: &mut IncidentManager, f: Finding) -> CandidateUpdate {
    let host = vocab::entity::host_of(&f.entity).to_string();
    let ups = m.apply(10_000, &host, Vec::new(), vec![f], &[]);
    assert_eq!(ups.len(), 1, "{ups:?}");
    assert_eq!(ups[0].state, "opened");
    ups[0].clone()
}

#[test]
fn every_incident_kind_gets_a_severity() {
    for k in vocab::kind::IncidentKind::ALL {
        let kind = k.as_str();
        for jobs in [&[][..], &["j1"][..]] {
            let mut m = mgr();
            let u = opened(&mut m, finding(kind, "n1/x", jobs));
            assert!(
                Severity::parse(&u.severity).is_some(),
                "{kind} with jobs {jobs:?}: severity {:?}",
                u.severity
            );
            // The open list (what the web UI, Alertmanager and a restart
            // see) carries it too.
            assert_eq!(m.open()[0].severity, u.severity, "{kind}");
        }
    }
}

#[test]
fn table_rows_with_real_sizes() {
    let mut m = mgr();
    // A 1,024-GPU training job (its NCCL world) and an 8-GPU one (its CUDA
    // processes on one host).
    m.observe_jobs(&job_window("n1", "big", 1024, 8));
    m.observe_jobs(&job_window("n2", "small", -1, 8));
    assert_eq!(m.sizes.gpus("big"), 1024);
    assert_eq!(m.sizes.gpus("small"), 8);
    let sev = |m: &mut IncidentManager, f: Finding| opened(m, f).severity;
    // A degraded link under the 1,024-GPU job pages; under 8 GPUs or idle
    // it warns.
    assert_eq!(
        sev(&mut m, finding("ib_link_degraded", "n1/mlx5_0/1", &["big"])),
        "critical"
    );
    assert_eq!(
        sev(
            &mut m,
            finding("ib_link_degraded", "n2/mlx5_0/1", &["small"])
        ),
        "warning"
    );
    assert_eq!(
        sev(&mut m, finding("ib_link_degraded", "n3/mlx5_0/1", &[])),
        "warning"
    );
    // A throttling idle GPU is information; under a job it warns.
    assert_eq!(
        sev(&mut m, finding("gpu_thermal_throttle", "n3/gpu0", &[])),
        "info"
    );
    assert_eq!(
        sev(
            &mut m,
            finding("gpu_thermal_throttle", "n2/gpu0", &["small"])
        ),
        "warning"
    );
    // An application XID warns even under the 1,024-GPU job; a reset pages
    // even on an idle GPU; a follow-on XID is information.
    let xid = |entity: &str, action: &str, jobs: &[&str]| {
        finding("gpu_xid", entity, jobs).with_mark(format!("xid_action:{action}"))
    };
    assert_eq!(
        sev(&mut m, xid("n1/gpu1", "RESTART_APP", &["big"])),
        "warning"
    );
    assert_eq!(sev(&mut m, xid("n3/gpu1", "RESET_GPU", &[])), "critical");
    assert_eq!(sev(&mut m, xid("n3/gpu2", "WORKFLOW_XID_45", &[])), "info");
    // An XID judged the application's (its own kind) warns under the
    // 1,024-GPU job; a fatal SXid (its GPUs need a reset) pages, a
    // non-fatal one on an idle node warns.
    assert_eq!(
        sev(&mut m, finding("app_xid", "n1/gpu6", &["big"])),
        "warning"
    );
    assert_eq!(
        sev(
            &mut m,
            xid("n3/nvswitch/0000:05:00.0", "RESET_GPU", &[]).with_kind("nvswitch_sxid")
        ),
        "critical"
    );
    assert_eq!(
        sev(
            &mut m,
            finding("nvswitch_sxid", "n3/nvswitch/0000:06:00.0", &[])
        ),
        "warning"
    );
    // A GPU off the bus (no action mark) pages.
    assert_eq!(sev(&mut m, finding("gpu_xid", "n3/gpu3", &[])), "critical");
    // Stopped work pages whatever runs there.
    assert_eq!(sev(&mut m, finding("node_lost", "n4", &[])), "critical");
    assert_eq!(
        sev(
            &mut m,
            finding("gpu_ecc", "n3/gpu4", &[]).with_mark("ecc_action:WATCH".into())
        ),
        "info"
    );
    assert_eq!(
        sev(
            &mut m,
            finding("gpu_ecc", "n3/gpu5", &[]).with_mark("ecc_action:RMA".into())
        ),
        "critical"
    );
    // Four jobs on one filer's latency: many jobs page.
    assert_eq!(
        sev(
            &mut m,
            finding("nfs_latency", "nfs:fs1:/export", &["a", "b", "c", "d"])
        ),
        "critical"
    );
    assert_eq!(
        sev(&mut m, finding("nfs_latency", "nfs:fs2:/export", &["a"])),
        "warning"
    );
}

#[test]
fn severity_rises_with_an_update_and_never_falls_while_open() {
    let mut m = mgr();
    m.observe_jobs(&job_window("n1", "big", 1024, 8));
    let link = "n1/mlx5_0/1";
    let u = opened(&mut m, finding("ib_link_degraded", link, &[]));
    assert_eq!(u.severity, "warning");
    // The big job's ranks now cross the link: same confidence, no new
    // evidence, but the severity rises, and that is an update.
    let ups = m.apply(
        11_000,
        "n1",
        Vec::new(),
        vec![finding("ib_link_degraded", link, &["big"])],
        &[],
    );
    assert_eq!(ups.len(), 1, "{ups:?}");
    assert_eq!(
        (ups[0].state.as_str(), ups[0].severity.as_str()),
        ("updated", "critical")
    );
    assert_eq!(ups[0].incident_id, u.incident_id);
    // The job leaves; the incident stays critical until it resolves.
    m.observe_jobs(&Window::default());
    let ups = m.apply(
        12_000,
        "n1",
        Vec::new(),
        vec![finding("ib_link_degraded", link, &[])],
        &[],
    );
    assert!(ups.is_empty(), "{ups:?}");
    assert_eq!(m.open()[0].severity, "critical");
    // A restart restores the stored severity.
    let mut r = mgr();
    assert!(r.restore(Stored {
        id: "i1".into(),
        kind: "ib_link_degraded".into(),
        entity: link.into(),
        severity: "critical".into(),
        ..Default::default()
    }));
    assert_eq!(r.open()[0].severity, "critical");
}

#[test]
fn a_slowed_job_raises_an_idle_incident() {
    let mut m = mgr();
    let u = opened(&mut m, finding("gpu_thermal_throttle", "n1/gpu0", &[]));
    assert_eq!(u.severity, "info");
    let key = ("gpu_thermal_throttle", "n1/gpu0".to_string());
    let up = m
        .attach(
            &key,
            11_000,
            "job7/3",
            "rank 3 of job7 1.4x slower".into(),
            "job7",
            1.4,
        )
        .expect("an update");
    assert_eq!(up.severity, "warning");
}

#[test]
fn configuration_overrides_rows_and_kinds_and_is_validated() {
    let mut cfg = SeverityConfig::default();
    cfg.rules.insert("idle".into(), "warning".into());
    cfg.kinds.insert("node_lost".into(), "warning".into());
    cfg.large_job_gpus = 8;
    cfg.validate().expect("valid");
    let mut m = mgr_with(cfg.clone());
    m.observe_jobs(&job_window("n2", "small", -1, 8));
    assert_eq!(
        opened(&mut m, finding("gpu_thermal_throttle", "n3/gpu0", &[])).severity,
        "warning"
    );
    assert_eq!(
        opened(&mut m, finding("node_lost", "n4", &[])).severity,
        "warning"
    );
    assert_eq!(
        opened(
            &mut m,
            finding("ib_link_degraded", "n2/mlx5_0/1", &["small"])
        )
        .severity,
        "critical"
    );
    let key_of = |c: SeverityConfig| c.validate().err().map(|e| (e.key, e.why.to_string()));
    let mut bad = cfg.clone();
    bad.rules.insert("nope".into(), "info".into());
    let (k, why) = key_of(bad).expect("unknown rule");
    assert_eq!(k, "incidents.severity.rules");
    assert!(why.contains("large_job"), "{why}");
    let mut bad = cfg.clone();
    bad.kinds.insert("gpu_xid".into(), "page".into());
    assert_eq!(key_of(bad).map(|e| e.0), Some("incidents.severity.kinds"));
    let mut bad = cfg.clone();
    bad.kinds.insert("gpu_oops".into(), "info".into());
    assert_eq!(key_of(bad).map(|e| e.0), Some("incidents.severity.kinds"));
    let mut bad = cfg;
    bad.large_job_gpus = 0;
    assert_eq!(
        key_of(bad).map(|e| e.0),
        Some("incidents.severity.large_job_gpus")
    );
    // From TOML, as the correlator reads it.
    let c: crate::engine::config::DetectConfig = toml::from_str(
        "[incidents.severity]\nlarge_job_gpus = 512\nrules = { idle = \"warning\" }\nkinds = { gpu_xid = \"critical\" }\n",
    )
    .expect("parses");
    assert_eq!(c.incidents.severity.large_job_gpus, 512);
    assert_eq!(c.incidents.severity.kinds["gpu_xid"], "critical");
}

#[test]
fn job_sizes_are_bounded_and_forget_gone_hosts() {
    let mut s = super::severity::JobSizes::default();
    s.observe("n1", &job_window("n1", "j", -1, 8));
    s.observe("n2", &job_window("n2", "j", -1, 4));
    assert_eq!(s.gpus("j"), 12);
    s.forget_hosts(&std::collections::HashSet::from(["n2".to_string()]));
    assert_eq!(s.gpus("j"), 8);
}

//! XIDs judged, not counted: whose fault an XID is decides its incident.
//!
//! NVIDIA's catalogue gives each code an immediate action; an
//! application-class code ([`Class::Application`]: 13, 31 and the rest of
//! the `RESTART_APP` bucket) is the application's while it follows one job
//! or executable, on whichever GPU it runs (`app_xid`: tell the job's
//! owner, never a GPU reset), and a hardware suspicion when one GPU meets
//! it for `xid_unrelated_jobs` unrelated jobs (different executables or
//! users) within `xid_horizon_s` (`gpu_xid`, the jobs named). A job whose
//! code follows it to other GPUs does not count against any one GPU. XID
//! 43 and 45 are follow-ons: folded into the GPU's live episode, nothing
//! alone. Hardware-class codes keep their catalogue action. All XIDs of a
//! GPU within `xid_hold_s` of each other are one episode, one finding per
//! window with a count per code: a burst of 10,000 is one incident.
//! docs/detection.md, "GPU XIDs".
use std::collections::{BTreeMap, HashMap, VecDeque};

use proto::v1::{Event, Window};
use vocab::xid::{self, Action, Class};

use super::xid_finding::{Judged, Summary};
use super::GpuConfig;
use crate::engine::incidents::Finding;

/// Attributed application-class XIDs kept per GPU (newest), one per
/// (code, who): a crash loop is one entry with a count.
const KEPT_PER_GPU: usize = 64;
/// GPUs and NVSwitches with XID state per host (an HGX node has 8 + 6).
const ENTITIES_PER_HOST: usize = 64;
/// Jobs and executables followed across GPUs (fleet-wide).
const TRAILS: usize = 16_384;
/// GPUs remembered per followed job or executable.
const TRAIL_GPUS: usize = 16;
/// Jobs named in one episode's evidence.
const NAMED: usize = 16;

/// Who met an XID, as the kernel log and the collector's attribution say.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Who {
    job: String,
    exe: String,
    uid: Option<u32>,
}

impl Who {
    /// `None` when the event names no process (NVML only, or pid 0: a
    /// driver-internal error).
    fn of(e: &Event) -> Option<Who> {
        if e.job.is_empty() && (e.pid == 0 || e.process.is_empty()) {
            return None;
        }
        Some(Who {
            job: e.job.clone(),
            exe: e.process.clone(),
            uid: e.uid,
        })
    }

    /// What a fault follows across GPUs: the job, else the executable of
    /// one user.
    fn key(&self) -> String {
        if self.job.is_empty() {
            let uid = self.uid.map_or_else(|| "?".into(), |u| u.to_string());
            format!("exe:{}:{uid}", self.exe)
        } else {
            format!("job:{}", self.job)
        }
    }

    /// Related: one job, or (different jobs) one executable of one user.
    /// What is unknown is no evidence of a difference.
    fn related(&self, o: &Who) -> bool {
        if !self.job.is_empty() && self.job == o.job {
            return true;
        }
        let exe = self.exe.is_empty() || o.exe.is_empty() || self.exe == o.exe;
        let user = match (self.uid, o.uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        exe && user
    }

    fn show(&self) -> String {
        let job = if self.job.is_empty() {
            "no job".to_string()
        } else {
            format!("job {}", self.job)
        };
        let uid = self.uid.map_or_else(String::new, |u| format!(", uid {u}"));
        format!("{job} ({}{uid})", self.exe)
    }
}

/// One (code, who) on a GPU within the horizon.
#[derive(Clone, Debug)]
struct Seen {
    ms: i64,
    code: u32,
    who: Who,
    count: u64,
}

/// The XIDs of one GPU (or SXids of one NVSwitch) within `xid_hold_s` of
/// each other.
#[derive(Clone, Debug)]
struct Episode {
    first_ms: i64,
    last_ms: i64,
    /// Code → (events, its first detail).
    codes: BTreeMap<u32, (u64, String)>,
    /// Follow-ons (43, 45) folded in, by code.
    folded: BTreeMap<u32, u64>,
    /// Application-class events naming no process.
    unattributed: u64,
    judged: Judged,
    /// Who met its application-class codes (at most [`NAMED`]).
    who: Vec<Who>,
    /// Why it is judged as it is (the latest reasons).
    reasons: Vec<String>,
    /// Unrelated jobs the GPU failed (when suspected).
    unrelated: Option<usize>,
}

impl Episode {
    fn new(ms: i64, judged: Judged) -> Self {
        Self {
            first_ms: ms,
            last_ms: ms,
            codes: BTreeMap::new(),
            folded: BTreeMap::new(),
            unattributed: 0,
            judged,
            who: Vec::new(),
            reasons: Vec::new(),
            unrelated: None,
        }
    }
}

#[derive(Debug, Default)]
struct Entity {
    seen: VecDeque<Seen>,
    episode: Option<Episode>,
    /// An NVSwitch: the node's GPUs when it was last judged.
    gpus: Vec<String>,
}

/// The XID and SXid judge (state of [`super::GpuDetector`]).
#[derive(Debug, Default)]
pub(super) struct XidJudge {
    hosts: HashMap<String, HashMap<String, Entity>>,
    /// Job or executable → the GPUs it met each application-class code on
    /// (ms, GPU, code), newest last.
    trails: HashMap<String, VecDeque<(i64, String, u32)>>,
    /// When the trails were last pruned (at most once a minute).
    pruned_ms: i64,
}

fn dropped(what: &'static str) {
    metrics::counter!(crate::telemetry::ENGINE_DROPPED.name, "what" => what).increment(1);
}

fn followon(outcome: &'static str, n: u64) {
    metrics::counter!(crate::telemetry::ENGINE_XID_FOLLOWONS.name, "outcome" => outcome)
        .increment(n);
}

impl XidJudge {
    /// Judges the XID and SXid events of `host`'s window; one finding per
    /// GPU or NVSwitch with a live episode.
    pub fn observe(
        &mut self,
        cfg: &GpuConfig,
        host: &str,
        w: &Window,
        jobs: &[String],
    ) -> Vec<Finding> {
        let now = w.end_unix_ms;
        let gpus: Vec<String> = w
            .gpus
            .iter()
            .map(|g| vocab::entity::gpu(host, g.index))
            .collect();
        for e in &w.events {
            let sxid = e.kind == vocab::EventKind::NvswitchSxid.as_str()
                && e.entity.starts_with(&vocab::entity::nvswitch(host, ""));
            if e.kind != vocab::EventKind::GpuXid.as_str() && !sxid {
                continue;
            }
            let Some(ent) = self.entity(host, &e.entity) else {
                continue;
            };
            if sxid {
                if !gpus.is_empty() {
                    ent.gpus.clone_from(&gpus);
                }
                note_code(ent, now, e, Judged::Hardware);
            } else {
                self.note_xid(cfg, host, now, e);
            }
        }
        self.findings(cfg, host, now, jobs)
    }

    /// The state of `entity` of `host`, `None` (counted) past the host's
    /// [`ENTITIES_PER_HOST`].
    fn entity(&mut self, host: &str, entity: &str) -> Option<&mut Entity> {
        let h = self.hosts.entry(host.to_string()).or_default();
        if !h.contains_key(entity) && h.len() >= ENTITIES_PER_HOST {
            dropped("xid_entities");
            return None;
        }
        Some(h.entry(entity.to_string()).or_default())
    }

    fn note_xid(&mut self, cfg: &GpuConfig, host: &str, now: i64, e: &Event) {
        let code = u32::try_from(e.code).unwrap_or(u32::MAX);
        let count = e.count.max(1);
        match xid::class(code) {
            Class::FollowOn => {
                let ent = self.entity(host, &e.entity);
                match ent.and_then(|x| x.episode.as_mut()) {
                    Some(ep) if now - ep.last_ms <= hold_ms(cfg) => {
                        *ep.folded.entry(code).or_insert(0) += count;
                        followon("folded", count);
                    }
                    _ => followon("alone", count),
                }
            }
            Class::Hardware => {
                if let Some(ent) = self.entity(host, &e.entity) {
                    note_code(ent, now, e, Judged::Hardware);
                }
            }
            Class::Application => self.note_application(cfg, host, now, e, code),
        }
    }

    /// An application-class XID: who met it, where else it met it, and
    /// which unrelated jobs this GPU failed within the horizon.
    fn note_application(&mut self, cfg: &GpuConfig, host: &str, now: i64, e: &Event, code: u32) {
        let horizon = (cfg.xid_horizon_s * 1000.0) as i64;
        let who = Who::of(e);
        if let Some(w) = &who {
            self.trail(now, horizon, &w.key(), &e.entity, code);
        }
        let trails = &self.trails;
        // GPUs (this one included) the job met this code on.
        let follows = |w: &Who| -> Vec<String> {
            let mut g: Vec<String> = trails
                .get(&w.key())
                .into_iter()
                .flatten()
                .filter(|(t, _, c)| *c == code && now - t <= horizon)
                .map(|(_, g, _)| g.clone())
                .collect();
            g.sort_unstable();
            g.dedup();
            g
        };
        let own_gpus = who.as_ref().map(follows).unwrap_or_default();
        let Some(ent) = self.hosts.get_mut(host).and_then(|h| h.get_mut(&e.entity)) else {
            return;
        };
        let first = if who.is_some() {
            Judged::Application
        } else {
            Judged::ApplicationUnknown
        };
        note_code(ent, now, e, first);
        let Some(who) = who else {
            if let Some(ep) = ent.episode.as_mut() {
                ep.unattributed += e.count.max(1);
            }
            return;
        };
        remember(&mut ent.seen, now, horizon, code, &who, e.count.max(1));
        // Unrelated jobs this GPU failed with this code, leaving out jobs
        // whose fault follows them to other GPUs.
        let mut reps: Vec<&Seen> = Vec::new();
        for s in ent.seen.iter().filter(|s| s.code == code) {
            if follows(&s.who).len() < 2 && reps.iter().all(|r| !r.who.related(&s.who)) {
                reps.push(s);
            }
        }
        let Some(ep) = ent.episode.as_mut() else {
            return;
        };
        if ep.who.len() < NAMED && !ep.who.contains(&who) {
            ep.who.push(who.clone());
        }
        if reps.len() >= cfg.xid_unrelated_jobs {
            let named: Vec<String> = reps
                .iter()
                .map(|s| {
                    format!(
                        "{} ×{} (last {})",
                        s.who.show(),
                        s.count,
                        vocab::time::utc(s.ms)
                    )
                })
                .collect();
            ep.judged = ep.judged.max(Judged::HardwareSuspected);
            ep.unrelated = ep.unrelated.max(Some(reps.len()));
            ep.reasons = vec![format!(
                "hardware suspected: this GPU met XID {code} for {} unrelated jobs (different executables or users) within {:.0} s: {}",
                reps.len(),
                cfg.xid_horizon_s,
                named.join("; ")
            )];
        } else if own_gpus.len() >= 2 && ep.judged <= Judged::Application {
            ep.reasons = vec![format!(
                "the application's: {} met XID {code} on {} GPUs within {:.0} s ({}): it follows the job, not a GPU",
                who.show(),
                own_gpus.len(),
                cfg.xid_horizon_s,
                own_gpus.join(", ")
            )];
        } else if ep.judged <= Judged::Application {
            ep.reasons = vec![format!(
                "the application's: only {} met XID {code} on this GPU within {:.0} s (no unrelated job did)",
                who.show(),
                cfg.xid_horizon_s
            )];
        }
    }

    /// Records that `key` met `code` on `gpu` (bounded; counted past
    /// [`TRAILS`]).
    fn trail(&mut self, now: i64, horizon: i64, key: &str, gpu: &str, code: u32) {
        if !self.trails.contains_key(key) && self.trails.len() >= TRAILS {
            if now - self.pruned_ms >= 60_000 {
                self.pruned_ms = now;
                self.trails
                    .retain(|_, t| t.back().is_some_and(|(ms, _, _)| now - ms <= horizon));
            }
            if self.trails.len() >= TRAILS {
                dropped("xid_trails");
                return;
            }
        }
        let t = self.trails.entry(key.to_string()).or_default();
        t.retain(|(ms, g, c)| now - ms <= horizon && !(g == gpu && *c == code));
        t.push_back((now, gpu.to_string(), code));
        while t.len() > TRAIL_GPUS {
            t.pop_front();
        }
    }

    /// One finding per live episode of `host`; episodes past `xid_hold_s`
    /// end, entities with nothing left are forgotten.
    fn findings(&mut self, cfg: &GpuConfig, host: &str, now: i64, jobs: &[String]) -> Vec<Finding> {
        let Some(h) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        let horizon = (cfg.xid_horizon_s * 1000.0) as i64;
        let mut out = Vec::new();
        for (entity, ent) in h.iter_mut() {
            ent.seen.retain(|s| now - s.ms <= horizon);
            if ent
                .episode
                .as_ref()
                .is_some_and(|ep| now - ep.last_ms > hold_ms(cfg))
            {
                ent.episode = None;
            }
            if let Some(ep) = &ent.episode {
                let s = summary(ep);
                out.push(if entity.contains("/nvswitch/") {
                    super::xid_finding::sxid(entity, &s, &ent.gpus, jobs)
                } else {
                    super::xid_finding::gpu(entity, &s, jobs)
                });
            }
        }
        h.retain(|_, e| e.episode.is_some() || !e.seen.is_empty());
        if h.is_empty() {
            self.hosts.remove(host);
        }
        out
    }

    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.hosts.retain(|h, _| !gone.contains(h));
    }

    /// GPUs and NVSwitches with XID state (all hosts), and followed jobs.
    #[cfg(test)]
    pub fn tracked(&self) -> (usize, usize) {
        (
            self.hosts.values().map(HashMap::len).sum(),
            self.trails.len(),
        )
    }
}

fn hold_ms(cfg: &GpuConfig) -> i64 {
    (cfg.xid_hold_s * 1000.0) as i64
}

/// Counts `e` into `ent`'s live episode (a new one past `xid_hold_s`).
fn note_code(ent: &mut Entity, now: i64, e: &Event, judged: Judged) {
    let ep = ent.episode.get_or_insert_with(|| Episode::new(now, judged));
    ep.last_ms = now;
    ep.judged = ep.judged.max(judged);
    let code = u32::try_from(e.code).unwrap_or(u32::MAX);
    let c = ep
        .codes
        .entry(code)
        .or_insert_with(|| (0, e.detail.chars().take(200).collect()));
    c.0 = c.0.saturating_add(e.count.max(1));
}

/// Remembers (code, who) on a GPU: one entry per pair, newest last.
fn remember(seen: &mut VecDeque<Seen>, now: i64, horizon: i64, code: u32, who: &Who, count: u64) {
    let mut total = count;
    seen.retain(|s| {
        if s.code == code && s.who == *who {
            total = total.saturating_add(s.count);
            return false;
        }
        now - s.ms <= horizon
    });
    seen.push_back(Seen {
        ms: now,
        code,
        who: who.clone(),
        count: total,
    });
    while seen.len() > KEPT_PER_GPU {
        seen.pop_front();
    }
}

/// How severe a catalogue action is, for choosing an episode's own.
fn severity(a: Action) -> u8 {
    match a {
        Action::RebootNode => 9,
        Action::EccWorkflow => 8,
        Action::NvlinkWorkflow => 7,
        Action::ResetGpu => 6,
        Action::ContactSupport => 5,
        Action::CheckMechanicals => 4,
        Action::UpdateSoftware | Action::AsStated => 3,
        Action::Unknown => 2,
        Action::RestartApp => 1,
        Action::Ignore | Action::FollowOther => 0,
    }
}

fn summary(ep: &Episode) -> Summary<'_> {
    let hardware = ep.judged == Judged::Hardware;
    let top = ep
        .codes
        .keys()
        .copied()
        .filter(|c| !hardware || xid::class(*c) == Class::Hardware)
        .max_by_key(|c| (severity(xid::action(*c)), std::cmp::Reverse(*c)))
        .unwrap_or(0);
    Summary {
        first_ms: ep.first_ms,
        last_ms: ep.last_ms,
        codes: &ep.codes,
        folded: &ep.folded,
        unattributed: ep.unattributed,
        judged: ep.judged,
        who: ep.who.iter().map(|w| (w.job.clone(), w.show())).collect(),
        reasons: &ep.reasons,
        unrelated: ep.unrelated,
        action: xid::action(top),
        top,
    }
}

//! Writes: incident updates (one transaction per batch) and the open
//! incidents rewritten after a restart.
use proto::v1::CandidateUpdate;
use rusqlite::params;

use super::{classify, json_list, maintain::MERGE, HistoryError, Store, MAX_SIDS};
use crate::history::{rollup::Agg, samples::Sample, MINUTE};
use vocab::entity::host_of;

/// An incident's row from its update (the first one inserts it). The
/// severity kept is the latest one given (an update without one, from an
/// older correlator, keeps it). With `?14` (a rewrite of an open incident,
/// [`Store::rewrite_open`]) the row keeps the earliest opening and the
/// latest update of the two; otherwise the update's time is the latest.
const UPSERT_INCIDENT: &str = "INSERT INTO incidents(id, kind, entity, host, state, opened_ms, \
     updated_ms, resolved_ms, confidence, evidence, jobs, runbook, cluster, severity) \
     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, state = excluded.state, \
     opened_ms = CASE WHEN ?15 THEN MIN(opened_ms, excluded.opened_ms) ELSE opened_ms END, \
     updated_ms = CASE WHEN ?15 THEN MAX(updated_ms, excluded.updated_ms) \
     ELSE excluded.updated_ms END, resolved_ms = excluded.resolved_ms, \
     confidence = excluded.confidence, evidence = excluded.evidence, \
     jobs = excluded.jobs, runbook = excluded.runbook, \
     severity = CASE WHEN excluded.severity = '' THEN severity ELSE excluded.severity END";

/// The prepared statements of incident writes: the row, an update, its jobs.
struct IncidentWrites<'t> {
    inc: rusqlite::CachedStatement<'t>,
    upd: rusqlite::CachedStatement<'t>,
    job: rusqlite::CachedStatement<'t>,
}

impl IncidentWrites<'_> {
    /// Writes `u` as the incident's row (`opened_ms`, its state, resolved
    /// when resolved; `rewrite`: see [`UPSERT_INCIDENT`]), one update and
    /// its jobs.
    fn write(
        &mut self,
        u: &CandidateUpdate,
        opened_ms: i64,
        rewrite: bool,
    ) -> rusqlite::Result<()> {
        let resolved = !rewrite && u.state == "resolved";
        let evidence = json_list(&u.evidence);
        self.inc.execute(params![
            u.incident_id,
            u.kind,
            u.entity,
            host_of(&u.entity),
            if resolved { "resolved" } else { "open" },
            opened_ms,
            u.ts_unix_ms,
            resolved.then_some(u.ts_unix_ms),
            u.confidence,
            evidence,
            json_list(&u.affected_jobs),
            u.runbook,
            u.cluster,
            u.severity,
            rewrite,
        ])?;
        self.upd.execute(params![
            u.incident_id,
            u.ts_unix_ms,
            u.state,
            u.confidence,
            evidence
        ])?;
        for j in &u.affected_jobs {
            self.job.execute(params![u.incident_id, j])?;
        }
        Ok(())
    }
}

/// An incident's jobs (each once).
const INSERT_JOB: &str = "INSERT OR IGNORE INTO incident_jobs(incident_id, job) VALUES(?1, ?2)";

impl Store {
    /// Writes incident updates and samples in one transaction.
    pub fn write(
        &mut self,
        updates: &[CandidateUpdate],
        samples: &[Sample],
    ) -> Result<(), HistoryError> {
        self.write_journaled(updates, samples, None)
    }

    /// [`write`](Self::write), recording in the same transaction that the
    /// incident journal's updates up to `seq` are in the database
    /// (`meta.journal_seq`; a start replays only those above it).
    pub fn write_journaled(
        &mut self,
        updates: &[CandidateUpdate],
        samples: &[Sample],
        seq: Option<u64>,
    ) -> Result<(), HistoryError> {
        let r = self.write_tx(updates, samples, seq);
        if r.is_err() {
            // Ids created by a rolled-back transaction are not in the database.
            self.sids.clear();
        }
        r
    }

    fn write_tx(
        &mut self,
        updates: &[CandidateUpdate],
        samples: &[Sample],
        seq: Option<u64>,
    ) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut w = IncidentWrites {
                inc: tx.prepare_cached(UPSERT_INCIDENT).map_err(e)?,
                upd: tx
                    .prepare_cached(
                        "INSERT INTO updates(incident_id, ts_ms, state, confidence, evidence) \
                         VALUES(?1, ?2, ?3, ?4, ?5)",
                    )
                    .map_err(e)?,
                job: tx.prepare_cached(INSERT_JOB).map_err(e)?,
            };
            for u in updates {
                w.write(u, u.ts_unix_ms, false).map_err(e)?;
            }
            let mut raw = tx
                .prepare_cached(&format!(
                    "INSERT INTO series(res, sid, ts, n, sum, min, max) \
                     VALUES(0, ?1, ?2, 1, ?3, ?3, ?3) {MERGE}"
                ))
                .map_err(e)?;
            let mut new_sid = tx
                .prepare_cached(
                    "INSERT INTO series_ids(entity, signal) VALUES(?1, ?2) \
                     ON CONFLICT(entity, signal) DO UPDATE SET entity = excluded.entity RETURNING id",
                )
                .map_err(e)?;
            if self.sids.len() >= MAX_SIDS {
                self.sids.clear();
            }
            for s in samples {
                if !s.value.is_finite() {
                    continue;
                }
                let known = self
                    .sids
                    .get(s.entity.as_str())
                    .and_then(|v| v.iter().find(|(sig, _)| sig == s.signal))
                    .map(|x| x.1);
                let sid = match known {
                    Some(id) => id,
                    None => {
                        let id: i64 = new_sid
                            .query_row(params![s.entity, s.signal], |r| r.get(0))
                            .map_err(e)?;
                        self.sids
                            .entry(s.entity.clone())
                            .or_default()
                            .push((s.signal.to_string(), id));
                        id
                    }
                };
                raw.execute(params![sid, s.ts, s.value]).map_err(e)?;
                let a = Agg {
                    n: 1,
                    sum: s.value,
                    min: s.value,
                    max: s.value,
                };
                self.minutes.add(sid, s.ts, MINUTE, self.rolled_minute, a);
            }
        }
        if let Some(seq) = seq.and_then(|s| i64::try_from(s).ok()) {
            tx.execute(
                "INSERT INTO meta(key, value) VALUES('journal_seq', ?1) \
                 ON CONFLICT(key) DO UPDATE SET value = MAX(value, excluded.value)",
                params![seq],
            )
            .map_err(e)?;
        }
        tx.commit().map_err(e)
    }

    /// Writes the latest state of incidents that are open — `(opened_ms,
    /// latest update)` each — in one transaction: after a disk fault lost
    /// some of their updates, or into a new file that replaced a deleted
    /// one. An incident without any stored update gets its latest one.
    pub fn rewrite_open(&mut self, open: &[(i64, &CandidateUpdate)]) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut w = IncidentWrites {
                inc: tx.prepare_cached(UPSERT_INCIDENT).map_err(e)?,
                upd: tx
                    .prepare_cached(
                        "INSERT INTO updates(incident_id, ts_ms, state, confidence, evidence) \
                         SELECT ?1, ?2, ?3, ?4, ?5 \
                         WHERE NOT EXISTS (SELECT 1 FROM updates WHERE incident_id = ?1)",
                    )
                    .map_err(e)?,
                job: tx.prepare_cached(INSERT_JOB).map_err(e)?,
            };
            for (opened, u) in open {
                w.write(u, *opened, true).map_err(e)?;
            }
        }
        tx.commit().map_err(e)
    }
}

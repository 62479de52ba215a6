//! Queries behind the web API and the CLI.
use rusqlite::{params, params_from_iter, OptionalExtension as _};

use super::{
    list_of, HistoryError, IncidentFilter, IncidentRow, Offender, SeriesPoint, Store, UpdateRow,
};
use crate::history::{HOUR, MINUTE, RAW};

impl Store {
    /// Newest first.
    pub fn incidents(&self, f: &IncidentFilter) -> Result<Vec<IncidentRow>, HistoryError> {
        let mut sql = String::from(
            "SELECT id, kind, entity, host, state, opened_ms, updated_ms, resolved_ms, confidence, \
             evidence, jobs, runbook, cluster, severity FROM incidents WHERE 1 = 1",
        );
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        let mut eq = |col: &str, v: &str, args: &mut Vec<rusqlite::types::Value>| {
            if !v.is_empty() {
                args.push(v.to_string().into());
                sql.push_str(&format!(" AND {col} = ?{}", args.len()));
            }
        };
        eq("kind", &f.kind, &mut args);
        eq("host", &f.host, &mut args);
        eq("entity", &f.entity, &mut args);
        eq("state", &f.state, &mut args);
        eq("cluster", &f.cluster, &mut args);
        eq("severity", &f.severity, &mut args);
        eq(
            "id IN (SELECT incident_id FROM incident_jobs WHERE job",
            &f.job,
            &mut args,
        );
        if !f.job.is_empty() {
            sql.push(')');
        }
        if f.since_ms > 0 {
            args.push(f.since_ms.into());
            sql.push_str(&format!(" AND opened_ms >= ?{}", args.len()));
        }
        if f.until_ms > 0 {
            args.push(f.until_ms.into());
            sql.push_str(&format!(" AND opened_ms < ?{}", args.len()));
        }
        let limit = match f.limit {
            0 => 200,
            n => n.min(10_000),
        };
        sql.push_str(&format!(" ORDER BY opened_ms DESC, id LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params_from_iter(args), row_of)
            .and_then(Iterator::collect);
        rows.map_err(|e| self.sql(e))
    }

    /// One incident and its updates, oldest first.
    pub fn incident(
        &self,
        id: &str,
    ) -> Result<Option<(IncidentRow, Vec<UpdateRow>)>, HistoryError> {
        let row = self
            .conn
            .query_row(
                "SELECT id, kind, entity, host, state, opened_ms, updated_ms, resolved_ms, confidence, \
                 evidence, jobs, runbook, cluster, severity FROM incidents WHERE id = ?1",
                [id],
                row_of,
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some(row) = row else { return Ok(None) };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ts_ms, state, confidence, evidence FROM updates WHERE incident_id = ?1 \
                 ORDER BY ts_ms, rowid LIMIT 1000",
            )
            .map_err(|e| self.sql(e))?;
        let ups = stmt
            .query_map([id], |r| {
                Ok(UpdateRow {
                    ts_ms: r.get(0)?,
                    state: r.get(1)?,
                    confidence: r.get(2)?,
                    evidence: list_of(&r.get::<_, String>(3)?),
                })
            })
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        Ok(Some((row, ups)))
    }

    /// Open incidents (restored into the engine after a restart).
    pub fn open_incidents(&self) -> Result<Vec<IncidentRow>, HistoryError> {
        self.incidents(&IncidentFilter {
            state: "open".into(),
            limit: 10_000,
            ..IncidentFilter::default()
        })
    }

    /// Signals recorded for an entity (any resolution).
    pub fn signals(&self, entity: &str) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT signal FROM series_ids i WHERE entity = ?1 AND (\
                 EXISTS (SELECT 1 FROM series WHERE res = 0 AND sid = i.id) OR \
                 EXISTS (SELECT 1 FROM series WHERE res = 60000 AND sid = i.id) OR \
                 EXISTS (SELECT 1 FROM series WHERE res = 3600000 AND sid = i.id)) ORDER BY signal",
            )
            .map_err(|e| self.sql(e))?;
        stmt.query_map([entity], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }

    /// Time of the entity's latest sample at any resolution.
    pub fn latest_ts(&self, entity: &str) -> Result<Option<i64>, HistoryError> {
        Ok(self.span(entity)?.map(|s| s.1))
    }

    /// Entities recorded under `prefix/` (a host's ports, GPUs, devices; a
    /// job's models), at most `limit`.
    pub fn entities_under(&self, prefix: &str, limit: usize) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT entity FROM series_ids WHERE entity > ?1 AND entity < ?2 \
                 ORDER BY entity LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        // `prefix/` up to `prefix0` ('0' follows '/'): an index range.
        stmt.query_map(
            params![format!("{prefix}/"), format!("{prefix}0"), limit as i64],
            |r| r.get(0),
        )
        .and_then(Iterator::collect)
        .map_err(|e| self.sql(e))
    }

    /// Times of the entity's earliest and latest samples at any resolution.
    pub fn span(&self, entity: &str) -> Result<Option<(i64, i64)>, HistoryError> {
        self.conn
            .query_row(
                "SELECT MIN(ts), MAX(ts) FROM series WHERE res IN (0, 60000, 3600000) \
                 AND sid IN (SELECT id FROM series_ids WHERE entity = ?1)",
                [entity],
                |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
            )
            .map_err(|e| self.sql(e))
    }

    /// A series over `[from, to)`, at the finest resolution that has rows
    /// there, merged into at most `points` buckets.
    pub fn series(
        &self,
        entity: &str,
        signal: &str,
        from: i64,
        to: i64,
        points: usize,
    ) -> Result<(i64, Vec<SeriesPoint>), HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ts, n, sum, min, max FROM series WHERE res = ?1 AND sid = \
                 (SELECT id FROM series_ids WHERE entity = ?2 AND signal = ?3) \
                 AND ts >= ?4 AND ts < ?5 ORDER BY ts",
            )
            .map_err(|e| self.sql(e))?;
        for res in [RAW, MINUTE, HOUR] {
            let rows: Vec<(i64, i64, f64, f64, f64)> = stmt
                .query_map(params![res, entity, signal, from, to], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .and_then(Iterator::collect)
                .map_err(|e| self.sql(e))?;
            if rows.is_empty() {
                continue;
            }
            let width = ((to - from) / points.max(1) as i64).max(1);
            let mut out: Vec<(SeriesPoint, i64, f64)> = Vec::new();
            for (ts, n, sum, min, max) in rows {
                let b = from + (ts - from) / width * width;
                match out.last_mut() {
                    Some((p, cn, cs)) if p.ts == b => {
                        *cn += n;
                        *cs += sum;
                        p.min = p.min.min(min);
                        p.max = p.max.max(max);
                    }
                    _ => out.push((
                        SeriesPoint {
                            ts: b,
                            mean: 0.0,
                            min,
                            max,
                        },
                        n,
                        sum,
                    )),
                }
            }
            let pts = out
                .into_iter()
                .map(|(mut p, n, s)| {
                    p.mean = s / n.max(1) as f64;
                    p
                })
                .collect();
            return Ok((res, pts));
        }
        Ok((RAW, Vec::new()))
    }

    /// Entities with at least `min` incidents opened since `since_ms`,
    /// most incidents first (workload symptoms, which are not hardware,
    /// are left out).
    pub fn offenders(
        &self,
        since_ms: i64,
        min: u64,
        limit: usize,
    ) -> Result<Vec<Offender>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT entity, host, group_concat(DISTINCT kind), COUNT(*), MIN(opened_ms), MAX(opened_ms), \
                 SUM(COALESCE(resolved_ms, updated_ms) - opened_ms) FROM incidents \
                 WHERE opened_ms >= ?1 AND kind NOT IN ('job_slowdown', 'inference_latency', 'straggler') \
                 GROUP BY entity HAVING COUNT(*) >= ?2 \
                 ORDER BY COUNT(*) DESC, MAX(opened_ms) DESC LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        // Saturating: `min` past i64 is "more than any entity has", not
        // (wrapped to -1) "at least -1"; a `limit` past i64 is no limit.
        let min = i64::try_from(min).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        stmt.query_map(params![since_ms, min, limit], |r| {
            let kinds: String = r.get(2)?;
            Ok(Offender {
                entity: r.get(0)?,
                host: r.get(1)?,
                kinds: kinds.split(',').map(str::to_string).collect(),
                incidents: r.get::<_, i64>(3)?.max(0) as u64,
                first_ms: r.get(4)?,
                last_ms: r.get(5)?,
                open_s: r.get::<_, Option<i64>>(6)?.unwrap_or(0).max(0) as f64 / 1000.0,
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| self.sql(e))
    }

    /// Rows per resolution (raw, minute, hour) and incidents, for metrics and tests.
    pub fn counts(&self) -> Result<[u64; 4], HistoryError> {
        let mut out = [0u64; 4];
        for (i, res) in [RAW, MINUTE, HOUR].into_iter().enumerate() {
            out[i] = self
                .conn
                .query_row("SELECT COUNT(*) FROM series WHERE res = ?1", [res], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(|e| self.sql(e))?
                .max(0) as u64;
        }
        out[3] = self
            .conn
            .query_row("SELECT COUNT(*) FROM incidents", [], |r| r.get::<_, i64>(0))
            .map_err(|e| self.sql(e))?
            .max(0) as u64;
        Ok(out)
    }
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<IncidentRow> {
    Ok(IncidentRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        entity: r.get(2)?,
        host: r.get(3)?,
        state: r.get(4)?,
        opened_ms: r.get(5)?,
        updated_ms: r.get(6)?,
        resolved_ms: r.get(7)?,
        confidence: r.get(8)?,
        evidence: list_of(&r.get::<_, String>(9)?),
        jobs: list_of(&r.get::<_, String>(10)?),
        runbook: r.get(11)?,
        cluster: r.get(12)?,
        severity: r.get(13)?,
    })
}

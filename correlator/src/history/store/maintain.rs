//! Upkeep: rollups raw → 1 min → 1 h, retention per resolution, and the
//! disk budget (incremental vacuum, oldest data first).
use rusqlite::params;

use super::{classify, disk_bytes, sibling, HistoryError, Store, LATE_MS};
use crate::history::{HOUR, MINUTE, RAW};

impl Store {
    /// Writes the complete minutes (older than `now_ms - LATE_MS`) and the
    /// complete hours of the open buckets, with the new horizons, in one
    /// transaction: a restart neither loses nor double-counts a rollup.
    pub fn rollup(&mut self, now_ms: i64) -> Result<(), HistoryError> {
        let minute = (now_ms - LATE_MS).div_euclid(MINUTE) * MINUTE;
        if minute <= self.rolled_minute {
            return Ok(());
        }
        let closed = self.minutes.take_before(minute);
        for ((sid, b), a) in &closed {
            self.hours.add(*sid, *b, HOUR, self.rolled_hour, *a);
        }
        let hour = minute.div_euclid(HOUR) * HOUR;
        let hours = if hour > self.rolled_hour {
            self.hours.take_before(hour)
        } else {
            Vec::new()
        };
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut ins = tx
                .prepare_cached(&format!(
                    "INSERT INTO series(res, sid, ts, n, sum, min, max) \
                     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7) {MERGE}"
                ))
                .map_err(e)?;
            for (res, rows) in [(MINUTE, &closed), (HOUR, &hours)] {
                for ((sid, b), a) in rows {
                    ins.execute(params![res, sid, b, a.n, a.sum, a.min, a.max])
                        .map_err(e)?;
                }
            }
            let mut meta = tx
                .prepare_cached(
                    "INSERT INTO meta(key, value) VALUES(?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                )
                .map_err(e)?;
            meta.execute(params!["rolled_minute", minute]).map_err(e)?;
            if hour > self.rolled_hour {
                meta.execute(params!["rolled_hour", hour]).map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        self.rolled_minute = minute;
        self.rolled_hour = self.rolled_hour.max(hour);
        Ok(())
    }

    /// Samples kept raw only: older than the rolled horizon when they came,
    /// or past the bound of open buckets.
    pub fn unrolled(&self) -> u64 {
        self.minutes.skipped + self.hours.skipped
    }

    /// Deletes rows past each resolution's retention and resolved incidents
    /// past the hour retention; then keeps the file within `max_bytes`.
    /// Returns the rows deleted.
    pub fn retain(&self, now_ms: i64) -> Result<u64, HistoryError> {
        let mut gone = 0;
        for (res, keep_s) in [
            (RAW, self.cfg.raw_retention_s),
            (MINUTE, self.cfg.minute_retention_s),
            (HOUR, self.cfg.hour_retention_s),
        ] {
            let horizon = now_ms.saturating_sub(
                i64::try_from(keep_s)
                    .unwrap_or(i64::MAX / 2)
                    .saturating_mul(1000),
            );
            gone += self
                .conn
                .execute(
                    "DELETE FROM series WHERE res = ?1 AND ts < ?2",
                    params![res, horizon],
                )
                .map_err(|e| self.sql(e))? as u64;
        }
        let horizon = now_ms.saturating_sub(
            i64::try_from(self.cfg.hour_retention_s)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(1000),
        );
        gone += self.delete_incidents_before(horizon)?;
        // Usage is kept as long as the hourly series (chargeback horizon).
        gone += self
            .conn
            .execute("DELETE FROM usage WHERE hour < ?1", params![horizon])
            .map_err(|e| self.sql(e))? as u64;
        gone += self.keep_budget()?;
        Ok(gone)
    }

    fn delete_incidents_before(&self, horizon: i64) -> Result<u64, HistoryError> {
        let old = "SELECT id FROM incidents WHERE state = 'resolved' AND resolved_ms < ?1";
        let e = |e| self.sql(e);
        self.conn
            .execute(
                &format!("DELETE FROM updates WHERE incident_id IN ({old})"),
                [horizon],
            )
            .map_err(e)?;
        for table in ["incident_jobs", "acks"] {
            self.conn
                .execute(
                    &format!("DELETE FROM {table} WHERE incident_id IN ({old})"),
                    [horizon],
                )
                .map_err(e)?;
        }
        self.conn
            .execute(
                "DELETE FROM incidents WHERE state = 'resolved' AND resolved_ms < ?1",
                [horizon],
            )
            .map(|n| n as u64)
            .map_err(e)
    }

    /// Bytes the database takes on disk: the file, its write-ahead log and
    /// its shared-memory index (`-wal`, `-shm`), as allocated.
    pub fn used_bytes(&self) -> Result<u64, HistoryError> {
        Ok(["", "-wal", "-shm"]
            .iter()
            .map(|s| disk_bytes(&sibling(&self.path, s)))
            .sum())
    }

    /// Bytes of the pages holding data (not on the free list), wherever
    /// they are (file or write-ahead log).
    pub fn live_bytes(&self) -> Result<u64, HistoryError> {
        let q = |p: &str| -> Result<i64, HistoryError> {
            self.conn
                .query_row(p, [], |r| r.get(0))
                .map_err(|e| self.sql(e))
        };
        let pages = q("PRAGMA page_count")? - q("PRAGMA freelist_count")?;
        Ok(u64::try_from(pages * q("PRAGMA page_size")?).unwrap_or(0))
    }

    /// Returns free pages and the write-ahead log to the file system (the
    /// log is truncated unless a reader still needs it).
    fn compact(&self) -> Result<(), HistoryError> {
        if self.can_shrink {
            // One page per step: step until done, not once.
            let mut stmt = self
                .conn
                .prepare("PRAGMA incremental_vacuum")
                .map_err(|e| self.sql(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
            while rows.next().map_err(|e| self.sql(e))?.is_some() {}
        }
        // A reader in the log makes the checkpoint wait for it: give up
        // quickly (the next maintenance tries again), not the 5 s the
        // writes wait.
        let pragma = |sql: &str| {
            self.conn
                .query_row(sql, [], |_| Ok(()))
                .map_err(|e| self.sql(e))
        };
        pragma("PRAGMA busy_timeout = 100")?;
        let r = pragma("PRAGMA wal_checkpoint(TRUNCATE)");
        pragma("PRAGMA busy_timeout = 5000")?;
        r
    }

    /// Over budget on disk: first the write-ahead log and free pages go
    /// back to the file system; then, while still over, the oldest tenth of
    /// the finest resolution that has rows is deleted (then of the resolved
    /// incidents), compacting after each step. Rows are deleted only while
    /// the data itself (with the `-shm` index) exceeds the budget: a log a
    /// reader still holds, or free pages of a file without incremental
    /// auto-vacuum (an older release's), are not worth any history.
    fn keep_budget(&self) -> Result<u64, HistoryError> {
        let max = self.cfg.max_bytes;
        if self.used_bytes()? <= max {
            return Ok(0);
        }
        self.compact()?;
        let shm = disk_bytes(&sibling(&self.path, "-shm"));
        let mut gone = 0;
        for _ in 0..64 {
            if self.used_bytes()? <= max || self.live_bytes()? + shm <= max {
                break;
            }
            let mut deleted = false;
            for res in [RAW, MINUTE, HOUR] {
                let span: Option<(i64, i64)> = self
                    .conn
                    .query_row(
                        "SELECT MIN(ts), MAX(ts) FROM series WHERE res = ?1",
                        [res],
                        |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
                    )
                    .map_err(|e| self.sql(e))?;
                let Some((lo, hi)) = span else { continue };
                let cut = lo + ((hi - lo) / 10).max(1);
                gone += self
                    .conn
                    .execute(
                        "DELETE FROM series WHERE res = ?1 AND ts < ?2",
                        params![res, cut],
                    )
                    .map_err(|e| self.sql(e))? as u64;
                deleted = true;
                break;
            }
            if !deleted {
                // Only incidents left: the oldest resolved tenth.
                let span: Option<(i64, i64)> = self
                    .conn
                    .query_row(
                        "SELECT MIN(resolved_ms), MAX(resolved_ms) FROM incidents WHERE state = 'resolved'",
                        [],
                        |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
                    )
                    .map_err(|e| self.sql(e))?;
                let Some((lo, hi)) = span else { break };
                gone += self.delete_incidents_before(lo + ((hi - lo) / 10).max(1))?;
            }
            self.compact()?;
        }
        Ok(gone)
    }
}

/// Merges a row into an existing one of the same key (several hosts'
/// windows ending in the same millisecond, late windows, re-run rollups).
pub(super) const MERGE: &str = "ON CONFLICT(res, sid, ts) DO UPDATE SET n = n + excluded.n, \
     sum = sum + excluded.sum, min = MIN(min, excluded.min), max = MAX(max, excluded.max)";

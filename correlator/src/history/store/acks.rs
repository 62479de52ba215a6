//! Operator acknowledgements as recorded: every set and clear, kept with
//! their incident (deleted with it by retention).
use rusqlite::params;
use serde::Serialize;

use super::{HistoryError, Store};

/// One acknowledgement set or cleared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AckRow {
    pub incident_id: String,
    pub ts_ms: i64,
    /// `set` or `cleared`.
    pub action: String,
    pub by: String,
    pub why: String,
    pub until_ms: Option<i64>,
}

impl Store {
    /// Records one acknowledgement change.
    pub fn record_ack(&self, row: &AckRow) -> Result<(), HistoryError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO acks(incident_id, ts_ms, action, by, why, until_ms) \
                 VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    row.incident_id,
                    row.ts_ms,
                    row.action,
                    row.by,
                    row.why,
                    row.until_ms
                ],
            )
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// An incident's acknowledgements, oldest first.
    pub fn acks_of(&self, incident_id: &str) -> Result<Vec<AckRow>, HistoryError> {
        let mut q = self
            .conn
            .prepare_cached(
                "SELECT incident_id, ts_ms, action, by, why, until_ms FROM acks \
                 WHERE incident_id = ?1 ORDER BY ts_ms, action DESC",
            )
            .map_err(|e| self.sql(e))?;
        q.query_map([incident_id], row_of)
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }

    /// The acknowledgements in force on open incidents: each one's latest
    /// change, where it is a `set` (restored after a restart).
    pub fn live_acks(&self) -> Result<Vec<AckRow>, HistoryError> {
        let mut q = self
            .conn
            .prepare_cached(
                "SELECT a.incident_id, a.ts_ms, a.action, a.by, a.why, a.until_ms FROM acks a \
                 JOIN incidents i ON i.id = a.incident_id AND i.state = 'open' \
                 WHERE a.ts_ms = (SELECT MAX(ts_ms) FROM acks b WHERE b.incident_id = a.incident_id) \
                 AND a.action = 'set' \
                 AND NOT EXISTS (SELECT 1 FROM acks c WHERE c.incident_id = a.incident_id \
                   AND c.ts_ms = a.ts_ms AND c.action = 'cleared')",
            )
            .map_err(|e| self.sql(e))?;
        q.query_map([], row_of)
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<AckRow> {
    Ok(AckRow {
        incident_id: r.get(0)?,
        ts_ms: r.get(1)?,
        action: r.get(2)?,
        by: r.get(3)?,
        why: r.get(4)?,
        until_ms: r.get(5)?,
    })
}

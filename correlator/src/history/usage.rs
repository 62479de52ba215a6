//! Usage for chargeback: the windows' `JobUsage` rows summed per hour and
//! (job, team, resource kind) in the history database, and the
//! `faultline-correlator usage` report over them. Sums are exact (counters
//! add, peak memory takes the maximum); a row without a job is kept as
//! unattributed usage and reported on its own line, so the report's rows
//! add up to the fleet's totals.
use std::{collections::BTreeMap, io::Write};

use proto::v1::JobUsage;
use rusqlite::params;
use serde::Serialize;

use super::store::{classify, HistoryError, Store};

const HOUR_MS: i64 = 3_600_000;

/// The label of usage no job could be charged for.
pub const UNATTRIBUTED: &str = "(unattributed)";
/// The label of a job's usage whose team is unknown (`--by team`).
pub const NO_TEAM: &str = "(no team)";

/// Group the report by job or by team.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Job,
    Team,
}

/// One line of the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UsageRow {
    /// The job or team, `(unattributed)`, `(no team)` or `TOTAL`.
    pub key: String,
    /// With `--by job`: the job's team(s), comma-separated.
    pub team: String,
    pub gpu_alloc_hours: f64,
    pub gpu_busy_hours: f64,
    pub energy_kwh: f64,
    pub peak_mem_bytes: u64,
    pub cuda_launches: u64,
    pub cuda_copy_bytes: u64,
    pub cuda_sync_wait_s: f64,
    pub io_requests: u64,
    pub io_bytes: u64,
    pub io_device_s: f64,
    pub fabric_bytes: u64,
}

impl UsageRow {
    fn add(&mut self, o: &UsageRow) {
        self.gpu_alloc_hours += o.gpu_alloc_hours;
        self.gpu_busy_hours += o.gpu_busy_hours;
        self.energy_kwh += o.energy_kwh;
        self.peak_mem_bytes = self.peak_mem_bytes.max(o.peak_mem_bytes);
        self.cuda_launches += o.cuda_launches;
        self.cuda_copy_bytes += o.cuda_copy_bytes;
        self.cuda_sync_wait_s += o.cuda_sync_wait_s;
        self.io_requests += o.io_requests;
        self.io_bytes += o.io_bytes;
        self.io_device_s += o.io_device_s;
        self.fabric_bytes += o.fabric_bytes;
    }
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Adds one window's usage rows (window end `ts_ms`) to its hour.
    pub fn add_usage(&mut self, ts_ms: i64, rows: &[JobUsage]) -> Result<(), HistoryError> {
        if rows.is_empty() {
            return Ok(());
        }
        let hour = ts_ms - ts_ms.rem_euclid(HOUR_MS);
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| classify(&path, &e))?;
        {
            let mut up = tx
                .prepare_cached(
                    "INSERT INTO usage VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
                     ON CONFLICT(hour, job, team, kind) DO UPDATE SET \
                     gpu_alloc_s = gpu_alloc_s + excluded.gpu_alloc_s, gpu_busy_s = gpu_busy_s + excluded.gpu_busy_s, \
                     energy_j = energy_j + excluded.energy_j, peak_mem_bytes = MAX(peak_mem_bytes, excluded.peak_mem_bytes), \
                     launches = launches + excluded.launches, copy_bytes = copy_bytes + excluded.copy_bytes, \
                     sync_wait_ns = sync_wait_ns + excluded.sync_wait_ns, io_requests = io_requests + excluded.io_requests, \
                     io_bytes = io_bytes + excluded.io_bytes, io_device_ns = io_device_ns + excluded.io_device_ns, \
                     fabric_bytes = fabric_bytes + excluded.fabric_bytes",
                )
                .map_err(|e| classify(&path, &e))?;
            for u in rows {
                let num = |x: f64| if x.is_finite() { x } else { 0.0 };
                up.execute(params![
                    hour,
                    u.job,
                    u.team,
                    u.resource_kind,
                    num(u.gpu_alloc_seconds),
                    num(u.gpu_busy_seconds),
                    num(u.energy_joules),
                    i64_of(u.peak_mem_bytes),
                    i64_of(u.launches),
                    i64_of(u.copy_bytes),
                    i64_of(u.sync_wait_ns),
                    i64_of(u.io_requests),
                    i64_of(u.io_bytes),
                    i64_of(u.io_device_ns),
                    i64_of(u.fabric_bytes),
                ])
                .map_err(|e| classify(&path, &e))?;
            }
        }
        tx.commit().map_err(|e| classify(&path, &e))
    }

    /// Usage of the hours from the one holding `since_ms` on, by job or
    /// team, sorted by key with the unattributed line last but one and the
    /// `TOTAL` line (the sum of all the others) last.
    pub fn usage(&self, since_ms: i64, by: By) -> Result<Vec<UsageRow>, HistoryError> {
        let path = self.path.clone();
        let since = since_ms - since_ms.rem_euclid(HOUR_MS);
        let mut q = self
            .conn
            .prepare(
                "SELECT job, team, SUM(gpu_alloc_s), SUM(gpu_busy_s), SUM(energy_j), MAX(peak_mem_bytes), \
                 SUM(launches), SUM(copy_bytes), SUM(sync_wait_ns), SUM(io_requests), SUM(io_bytes), \
                 SUM(io_device_ns), SUM(fabric_bytes) FROM usage WHERE hour >= ?1 GROUP BY job, team",
            )
            .map_err(|e| classify(&path, &e))?;
        let rows = q
            .query_map([since], |r| {
                let u = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    UsageRow {
                        gpu_alloc_hours: r.get::<_, f64>(2)? / 3600.0,
                        gpu_busy_hours: r.get::<_, f64>(3)? / 3600.0,
                        energy_kwh: r.get::<_, f64>(4)? / 3.6e6,
                        peak_mem_bytes: u(5)?,
                        cuda_launches: u(6)?,
                        cuda_copy_bytes: u(7)?,
                        cuda_sync_wait_s: u(8)? as f64 / 1e9,
                        io_requests: u(9)?,
                        io_bytes: u(10)?,
                        io_device_s: u(11)? as f64 / 1e9,
                        fabric_bytes: u(12)?,
                        ..UsageRow::default()
                    },
                ))
            })
            .map_err(|e| classify(&path, &e))?;
        let mut by_key: BTreeMap<String, (Vec<String>, UsageRow)> = BTreeMap::new();
        for row in rows {
            let (job, team, r) = row.map_err(|e| classify(&path, &e))?;
            let key = match by {
                _ if job.is_empty() => UNATTRIBUTED.to_string(),
                By::Job => job,
                By::Team if team.is_empty() => NO_TEAM.to_string(),
                By::Team => team.clone(),
            };
            let e = by_key.entry(key).or_default();
            if by == By::Job && !team.is_empty() && !e.0.contains(&team) {
                e.0.push(team);
            }
            e.1.add(&r);
        }
        let unattributed = by_key.remove(UNATTRIBUTED);
        let mut out: Vec<UsageRow> = by_key
            .into_iter()
            .map(|(key, (teams, mut r))| {
                r.key = key;
                r.team = teams.join(",");
                r
            })
            .collect();
        if let Some((_, mut r)) = unattributed {
            r.key = UNATTRIBUTED.into();
            out.push(r);
        }
        let mut total = UsageRow {
            key: "TOTAL".into(),
            ..UsageRow::default()
        };
        for r in &out {
            total.add(r);
        }
        out.push(total);
        Ok(out)
    }
}

/// The report's output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

const COLUMNS: [&str; 13] = [
    "key",
    "team",
    "gpu_alloc_hours",
    "gpu_busy_hours",
    "energy_kwh",
    "peak_mem_bytes",
    "cuda_launches",
    "cuda_copy_bytes",
    "cuda_sync_wait_s",
    "io_requests",
    "io_bytes",
    "io_device_s",
    "fabric_bytes",
];

fn cells(r: &UsageRow) -> [String; 13] {
    [
        r.key.clone(),
        r.team.clone(),
        format!("{:.6}", r.gpu_alloc_hours),
        format!("{:.6}", r.gpu_busy_hours),
        format!("{:.6}", r.energy_kwh),
        r.peak_mem_bytes.to_string(),
        r.cuda_launches.to_string(),
        r.cuda_copy_bytes.to_string(),
        format!("{:.6}", r.cuda_sync_wait_s),
        r.io_requests.to_string(),
        r.io_bytes.to_string(),
        format!("{:.6}", r.io_device_s),
        r.fabric_bytes.to_string(),
    ]
}

/// Writes the report: an aligned table, CSV (RFC 4180 quoting) or one JSON
/// object per line.
pub fn report(out: &mut impl Write, rows: &[UsageRow], f: Format) -> std::io::Result<()> {
    match f {
        Format::Json => {
            for r in rows {
                let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
                writeln!(out, "{line}")?;
            }
        }
        Format::Csv => {
            writeln!(out, "{}", COLUMNS.join(","))?;
            for r in rows {
                let c: Vec<String> = cells(r)
                    .into_iter()
                    .map(|c| {
                        if c.contains([',', '"', '\n']) {
                            format!("\"{}\"", c.replace('"', "\"\""))
                        } else {
                            c
                        }
                    })
                    .collect();
                writeln!(out, "{}", c.join(","))?;
            }
        }
        Format::Table => {
            let all: Vec<[String; 13]> = rows.iter().map(cells).collect();
            let mut width = COLUMNS.map(str::len);
            for c in &all {
                for (w, s) in width.iter_mut().zip(c) {
                    *w = (*w).max(s.chars().count());
                }
            }
            let line = |c: &[String]| {
                c.iter()
                    .zip(width)
                    .enumerate()
                    .map(|(i, (s, w))| {
                        if i < 2 {
                            format!("{s:<w$}")
                        } else {
                            format!("{s:>w$}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("  ")
            };
            let head: Vec<String> = COLUMNS.iter().map(|s| s.to_string()).collect();
            writeln!(out, "{}", line(&head))?;
            for c in &all {
                writeln!(out, "{}", line(c))?;
            }
        }
    }
    Ok(())
}

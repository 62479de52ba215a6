//! `faultline-correlator incidents` and `offenders`: history as tables or JSON lines.
use std::io::Write;

use super::{IncidentRow, Offender};

/// Parses an age like `7d`, `12h`, `30m`, `45s` into milliseconds.
pub fn parse_age(s: &str) -> Result<i64, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num
        .parse()
        .map_err(|_| format!("`{s}`: give a number and a unit, e.g. 7d, 12h, 30m, 45s"))?;
    let ms = match unit {
        "d" => 86_400_000,
        "h" => 3_600_000,
        "m" => 60_000,
        "s" | "" => 1000,
        _ => return Err(format!("`{s}`: the unit is one of d, h, m, s")),
    };
    n.checked_mul(ms)
        .ok_or_else(|| format!("`{s}` is too long"))
}

pub use vocab::time::utc;

/// One JSON object per line.
fn json_lines<T: serde::Serialize>(out: &mut impl Write, rows: &[T]) -> std::io::Result<()> {
    for r in rows {
        let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Incidents, one per line (or one JSON object per line).
pub fn incidents(out: &mut impl Write, rows: &[IncidentRow], json: bool) -> std::io::Result<()> {
    if json {
        return json_lines(out, rows);
    }
    writeln!(
        out,
        "{:<19}  {:<8}  {:<22}  {:<28}  {:>4}  {:<16}  jobs",
        "opened (UTC)", "state", "kind", "entity", "conf", "id"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<19}  {:<8}  {:<22}  {:<28}  {:>4.2}  {:<16}  {}",
            utc(r.opened_ms),
            r.state,
            r.kind,
            r.entity,
            r.confidence,
            r.id,
            r.jobs.join(",")
        )?;
    }
    Ok(())
}

/// Recurring offenders, most incidents first.
pub fn offenders(out: &mut impl Write, rows: &[Offender], json: bool) -> std::io::Result<()> {
    if json {
        return json_lines(out, rows);
    }
    writeln!(
        out,
        "{:<28}  {:>9}  {:>9}  {:<19}  kinds",
        "entity", "incidents", "open (s)", "last (UTC)"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<28}  {:>9}  {:>9.0}  {:<19}  {}",
            r.entity,
            r.incidents,
            r.open_s,
            utc(r.last_ms),
            r.kinds.join(",")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_dates() {
        assert_eq!(parse_age("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_age("30m"), Ok(1_800_000));
        assert!(parse_age("7w").is_err());
        assert!(parse_age("d").is_err());
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_709_251_199_000), "2024-02-29 23:59:59");
    }
}

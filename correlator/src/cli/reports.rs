//! The history commands: `incidents`, `offenders` and `usage`, read from
//! the history database.
use anyhow::{Context as _, Result};

use correlator::history::{report, IncidentFilter, Store};

/// Where the history database is, for the CLI's history commands.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// History database file.
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,
    /// Or the correlator's config file (its `[history] path`).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

impl HistoryArgs {
    fn open(&self) -> Result<Store> {
        let file = match &self.config {
            Some(p) => correlator::config::load_file(p)?,
            None => correlator::config::FileConfig::default(),
        };
        let path = self.history.clone().or(file.history.path.clone()).context(
            "no history database: give --history FILE or --config FILE with `[history] path`",
        )?;
        Ok(Store::open_reader(&path, &file.history)?)
    }
}

// `incidents`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct IncidentsArgs {
    #[command(flatten)]
    db: HistoryArgs,
    /// Only open incidents.
    #[arg(long)]
    open: bool,
    /// Only incidents opened within this age (e.g. 7d, 12h, 30m).
    #[arg(long, value_name = "AGE")]
    since: Option<String>,
    /// Only incidents of this entity (e.g. n017/mlx5_2/1).
    #[arg(long)]
    entity: Option<String>,
    /// Only this kind.
    #[arg(long)]
    kind: Option<String>,
    /// Only incidents affecting this job.
    #[arg(long)]
    job: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 200)]
    limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

// `offenders`'s arguments.
#[derive(Debug, clap::Args)]
pub struct OffendersArgs {
    #[command(flatten)]
    db: HistoryArgs,
    /// Over this period.
    #[arg(long, value_name = "AGE", default_value = "30d")]
    since: String,
    /// At least this many incidents.
    #[arg(long, default_value_t = 2)]
    min: u64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

// `usage`'s arguments.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    db: HistoryArgs,
    /// Over this period (e.g. 30d, 12h), from the start of its first hour.
    #[arg(long, value_name = "AGE", default_value = "30d")]
    since: String,
    /// One line per job or per team.
    #[arg(long, value_enum, default_value = "team")]
    by: correlator::history::usage::By,
    /// CSV with a header line.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Milliseconds of an age (`7d`, `12h`, `30m`) given as `--since`.
fn since(age: &str) -> Result<i64> {
    report::parse_age(age).map_err(|e| anyhow::anyhow!("--since {e}"))
}

pub fn incidents(a: IncidentsArgs) -> Result<()> {
    let since_ms = match a.since {
        Some(age) => vocab::time::now_unix_ms() - since(&age)?,
        None => 0,
    };
    let rows = a.db.open()?.incidents(&IncidentFilter {
        state: if a.open { "open".into() } else { String::new() },
        since_ms,
        entity: a.entity.unwrap_or_default(),
        kind: a.kind.unwrap_or_default(),
        job: a.job.unwrap_or_default(),
        limit: a.limit,
        ..Default::default()
    })?;
    report::incidents(&mut std::io::stdout().lock(), &rows, a.json)?;
    Ok(())
}

pub fn offenders(a: OffendersArgs) -> Result<()> {
    let age = since(&a.since)?;
    let rows =
        a.db.open()?
            .offenders(vocab::time::now_unix_ms() - age, a.min, 1000)?;
    report::offenders(&mut std::io::stdout().lock(), &rows, a.json)?;
    Ok(())
}

pub fn usage(a: UsageArgs) -> Result<()> {
    use correlator::history::usage::{report as table, Format};
    let age = since(&a.since)?;
    let rows = a.db.open()?.usage(vocab::time::now_unix_ms() - age, a.by)?;
    let f = if a.csv {
        Format::Csv
    } else if a.json {
        Format::Json
    } else {
        Format::Table
    };
    table(&mut std::io::stdout().lock(), &rows, f)?;
    Ok(())
}

//! Jobs announced by the batch scheduler: the Slurm prolog
//! (`deploy/slurm/prolog.sh`) writes one small file per job into a
//! directory on the node and the epilog removes it, so the collector knows
//! which job and user own which GPUs and HCAs even for processes that carry
//! no `SLURM_*` variable and run outside the job's cgroup (docs/slurm.md).
//!
//! File format (`<dir>/<job id>`), one `key=value` per line, unknown keys
//! ignored:
//!
//! ```text
//! job=4711
//! user=alice
//! gpus=0,1
//! hcas=mlx5_0,mlx5_1
//! ```
use std::path::Path;

/// At most this many job files are read (a node runs far fewer jobs).
pub const MAX_JOBS: usize = 1024;
/// At most this many bytes of each file are read.
pub const MAX_FILE_BYTES: u64 = 4096;

/// One job's claim on this node's devices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFile {
    pub job: String,
    pub user: String,
    /// NVML GPU indices.
    pub gpus: Vec<u32>,
    /// RDMA device names (`mlx5_0`).
    pub hcas: Vec<String>,
}

/// Parses one job file; `None` when it names no job.
pub fn parse(text: &str) -> Option<JobFile> {
    let mut j = JobFile::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let list = || {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .take(64)
        };
        match k.trim() {
            "job" => j.job = v.chars().take(64).collect(),
            "user" => j.user = v.chars().take(64).collect(),
            "gpus" => j.gpus = list().filter_map(|s| s.parse().ok()).collect(),
            "hcas" => j.hcas = list().map(|s| s.chars().take(64).collect()).collect(),
            _ => {}
        }
    }
    (!j.job.is_empty()).then_some(j)
}

/// The jobs of one directory read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobMap {
    pub jobs: Vec<JobFile>,
    /// Files that could not be read or named no job.
    pub unreadable: u64,
    /// Files beyond [`MAX_JOBS`], not read.
    pub over_limit: u64,
}

impl JobMap {
    /// Reads `dir` (a missing directory is an empty map: no scheduler hooks).
    pub fn read(dir: &Path) -> Self {
        let mut m = Self::default();
        let Ok(rd) = std::fs::read_dir(dir) else {
            return m;
        };
        let mut names: Vec<_> = rd
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        names.sort();
        for p in names {
            if m.jobs.len() >= MAX_JOBS {
                m.over_limit += 1;
                continue;
            }
            match crate::bounded_read::read_to_string(&p, MAX_FILE_BYTES)
                .ok()
                .and_then(|t| parse(&t))
            {
                Some(j) => m.jobs.push(j),
                None => m.unreadable += 1,
            }
        }
        m
    }

    /// The job that claimed GPU `index` (the first, by job file name).
    pub fn job_of_gpu(&self, index: u32) -> Option<&JobFile> {
        self.jobs.iter().find(|j| j.gpus.contains(&index))
    }

    /// The job that claimed HCA `device`.
    pub fn job_of_hca(&self, device: &str) -> Option<&JobFile> {
        self.jobs
            .iter()
            .find(|j| j.hcas.iter().any(|h| h == device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_prolog_format_and_ignores_the_rest() {
        let j = parse("job=4711\nuser=alice\ngpus=0, 3,x\nhcas=mlx5_0,mlx5_1\nfuture=1\n")
            .expect("a job");
        assert_eq!(j.job, "4711");
        assert_eq!(j.user, "alice");
        assert_eq!(j.gpus, [0, 3]);
        assert_eq!(j.hcas, ["mlx5_0", "mlx5_1"]);
        assert_eq!(parse("user=bob\ngpus=1\n"), None, "no job, no entry");
    }

    #[test]
    fn reads_a_directory_of_jobs() {
        let d = std::env::temp_dir().join(format!("faultline-jobmap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("12"), "job=12\nuser=alice\ngpus=0,1\nhcas=mlx5_0\n").unwrap();
        std::fs::write(d.join("13"), "job=13\nuser=bob\ngpus=2\n").unwrap();
        std::fs::write(d.join("14"), "garbage\n").unwrap();
        std::fs::write(d.join(".13.tmp"), "job=99\ngpus=7\n").unwrap();
        let m = JobMap::read(&d);
        assert_eq!(m.jobs.len(), 2);
        assert_eq!(m.unreadable, 1);
        assert_eq!(m.job_of_gpu(1).map(|j| j.job.as_str()), Some("12"));
        assert_eq!(m.job_of_gpu(2).map(|j| j.user.as_str()), Some("bob"));
        assert_eq!(m.job_of_gpu(7), None, "a file being written is skipped");
        assert_eq!(m.job_of_hca("mlx5_0").map(|j| j.job.as_str()), Some("12"));
        assert_eq!(JobMap::read(&d.join("missing")), JobMap::default());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

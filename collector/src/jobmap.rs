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
//!
//! The same prolog also keeps dcgm-exporter's `--hpc-job-mapping-dir`
//! (NVIDIA/dcgm-exporter, `internal/pkg/transformation/hpc.go`), which
//! sites may already fill with a prolog of their own: one file per GPU,
//! named by the GPU's index (`0`, `1`; a MIG GPU instance
//! `<gpu>.<instance>`, e.g. `2.0`), holding the ids of the jobs on it, one
//! per line. [`JobMap::read_hpc_job_mapping`] adds those jobs; a MIG
//! instance's job counts for its whole GPU (faultline's series are per
//! GPU), and a line `0` (the "no job" placeholder some mapping tools write)
//! or an empty line names no job.
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

    /// Adds the jobs of a dcgm-exporter `hpc-job-mapping-dir` (a missing
    /// directory adds none). A job already known from a job file gains the
    /// GPUs the mapping gives it; job files come first in
    /// [`JobMap::job_of_gpu`]. Files that are not named like a GPU
    /// (`<index>` or `<index>.<instance>`) are skipped, as dcgm-exporter
    /// skips them; files that cannot be read count in `unreadable`.
    pub fn read_hpc_job_mapping(&mut self, dir: &Path) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut files: Vec<(u32, String, std::path::PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let gpu = mapping_file_gpu(&name)?;
                Some((gpu, name, e.path()))
            })
            .collect();
        files.sort();
        for (n, (gpu, _, p)) in files.into_iter().enumerate() {
            if n >= MAX_JOBS {
                self.over_limit += 1;
                continue;
            }
            if p.is_dir() {
                continue;
            }
            let Ok(text) = crate::bounded_read::read_to_string(&p, MAX_FILE_BYTES) else {
                self.unreadable += 1;
                continue;
            };
            for job in text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && *l != "0")
                .take(64)
            {
                let job: String = job.chars().take(64).collect();
                self.claim(job, gpu);
            }
        }
    }

    /// Records that `job` holds GPU `gpu` (bounded by [`MAX_JOBS`] jobs).
    fn claim(&mut self, job: String, gpu: u32) {
        if let Some(j) = self.jobs.iter_mut().find(|j| j.job == job) {
            if !j.gpus.contains(&gpu) && j.gpus.len() < 64 {
                j.gpus.push(gpu);
            }
            return;
        }
        if self.jobs.len() >= MAX_JOBS {
            self.over_limit += 1;
            return;
        }
        self.jobs.push(JobFile {
            job,
            gpus: vec![gpu],
            ..JobFile::default()
        });
    }

    /// The job that claimed GPU `index`: the first in reading order (job
    /// files by name, then the jobs of the mapping files by GPU index).
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

/// The GPU index of a dcgm-exporter mapping file name: `<index>` or
/// `<index>.<GPU instance>` (dcgm-exporter's `^\d+(\.\d+)?$`).
fn mapping_file_gpu(name: &str) -> Option<u32> {
    let (gpu, instance) = match name.split_once('.') {
        Some((g, i)) => (g, Some(i)),
        None => (name, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(gpu) || instance.is_some_and(|i| !digits(i)) {
        return None;
    }
    gpu.parse().ok()
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

    #[test]
    fn reads_dcgm_exporters_hpc_job_mapping_dir() {
        let d = std::env::temp_dir().join(format!("faultline-hpcmap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("3")).unwrap();
        std::fs::write(d.join("0"), "12\n").unwrap();
        // Two jobs share GPU 1 (dcgm-exporter gives each its own series).
        std::fs::write(d.join("1"), "20\n21\n").unwrap();
        std::fs::write(d.join("2.0"), "22\n").unwrap();
        std::fs::write(d.join("4"), "0\n\n").unwrap();
        std::fs::write(d.join(".5.tmp"), "23\n").unwrap();
        std::fs::write(d.join("GPU-0a1b"), "24\n").unwrap();
        std::fs::write(d.join("6.x"), "25\n").unwrap();
        let mut m = JobMap {
            jobs: vec![parse("job=12\nuser=alice\ngpus=7\n").unwrap()],
            ..JobMap::default()
        };
        m.read_hpc_job_mapping(&d);
        assert_eq!(m.unreadable, 0, "{m:?}");
        let jobs: Vec<(&str, &[u32])> = m
            .jobs
            .iter()
            .map(|j| (j.job.as_str(), j.gpus.as_slice()))
            .collect();
        assert_eq!(
            jobs,
            [
                ("12", &[7, 0][..]),
                ("20", &[1][..]),
                ("21", &[1][..]),
                ("22", &[2][..])
            ]
        );
        assert_eq!(m.job_of_gpu(0).map(|j| j.user.as_str()), Some("alice"));
        assert_eq!(m.job_of_gpu(1).map(|j| j.job.as_str()), Some("20"));
        assert_eq!(
            m.job_of_gpu(2).map(|j| j.job.as_str()),
            Some("22"),
            "MIG 2.0"
        );
        assert_eq!(m.job_of_gpu(4), None, "0 is no job");
        assert_eq!(m.job_of_gpu(5), None, "a file being written");
        assert_eq!(m.job_of_gpu(6), None);
        let before = m.clone();
        m.read_hpc_job_mapping(&d.join("missing"));
        assert_eq!(m, before);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! What the simulated fleet looks like: its size, window length, link rate,
//! utilisation and storage classes.
use serde::Serialize;

/// InfiniBand link speed of every port (4X links).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkRate {
    /// 200 Gb/s
    Hdr,
    /// 400 Gb/s
    Ndr,
    /// 800 Gb/s
    Xdr,
}

impl LinkRate {
    pub const ALL: [LinkRate; 3] = [LinkRate::Hdr, LinkRate::Ndr, LinkRate::Xdr];

    pub fn bytes_per_sec(self) -> u64 {
        match self {
            LinkRate::Hdr => 25_000_000_000,
            LinkRate::Ndr => 50_000_000_000,
            LinkRate::Xdr => 100_000_000_000,
        }
    }

    pub fn bits_per_sec(self) -> f64 {
        self.bytes_per_sec() as f64 * 8.0
    }

    /// The `rate` file's text.
    pub fn text(self) -> &'static str {
        match self {
            LinkRate::Hdr => "200 Gb/sec (4X HDR)",
            LinkRate::Ndr => "400 Gb/sec (4X NDR)",
            LinkRate::Xdr => "800 Gb/sec (4X XDR)",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkRate::Hdr => "hdr",
            LinkRate::Ndr => "ndr",
            LinkRate::Xdr => "xdr",
        }
    }
}

/// Which block devices the nodes have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageMix {
    /// One NVMe drive per node (`nvme0n1`).
    Nvme,
    /// One SATA/SAS SSD per node (`sda`).
    Ssd,
    /// One hard disk per node (`sda`).
    Hdd,
    /// Each node some of: an NVMe drive, an SSD, a hard disk.
    Mixed,
}

impl StorageMix {
    pub const ALL: [StorageMix; 4] = [
        StorageMix::Nvme,
        StorageMix::Ssd,
        StorageMix::Hdd,
        StorageMix::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StorageMix::Nvme => "nvme",
            StorageMix::Ssd => "ssd",
            StorageMix::Hdd => "hdd",
            StorageMix::Mixed => "mixed",
        }
    }
}

/// What the simulated fleet looks like.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterSpec {
    pub nodes: usize,
    /// Window length in seconds.
    pub window_s: f64,
    pub link_rate: LinkRate,
    /// Fraction of the link rate the job's traffic uses (0..=1).
    pub utilisation: f64,
    pub storage: StorageMix,
    pub seed: u64,
    /// The training job reports its step time over OTLP (`Window.steps`);
    /// without, its step time is only what the correlator infers from its
    /// collectives' cadence.
    pub otlp_steps: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            nodes: 32,
            window_s: 1.0,
            link_rate: LinkRate::Ndr,
            utilisation: 0.7,
            storage: StorageMix::Nvme,
            seed: 1,
            otlp_steps: true,
        }
    }
}

impl ClusterSpec {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.nodes >= 2 && self.nodes <= 4096,
            "nodes must be within 2..=4096, got {}",
            self.nodes
        );
        anyhow::ensure!(
            self.window_s.is_finite() && (0.1..=60.0).contains(&self.window_s),
            "the window length must be within 0.1..=60 seconds, got {}",
            self.window_s
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.utilisation),
            "utilisation must be a fraction within 0..=1, got {}",
            self.utilisation
        );
        Ok(())
    }
}

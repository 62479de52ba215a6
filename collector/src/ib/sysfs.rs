//! Reading one snapshot of every port under `<root>/class/infiniband`.
use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
    time::Instant,
};

use super::DeviceFilter;

/// Port attributes some drivers do not have (e.g. `lid` on iWARP or some
/// RoCE devices): their absence is noted, not a read error.
pub const OPTIONAL_FILES: &[&str] = &["lid", "link_layer", "phys_state", "rate"];

/// One port as read from sysfs. Files that were unreadable (or missing,
/// unless optional) are absent here and listed in `read_errors`.
#[derive(Clone, Debug)]
pub struct PortSnapshot {
    pub device: String,
    pub port: u32,
    pub taken: Instant,
    /// `state` id (4 = ACTIVE).
    pub state: Option<u32>,
    /// `phys_state` id (5 = LinkUp).
    pub phys_state: Option<u32>,
    /// Signalling rate in bytes/s, from `rate` ("100 Gb/sec (4X EDR)").
    pub rate_bytes_per_sec: Option<u64>,
    /// The `rate` file as written.
    pub rate_text: Option<String>,
    pub link_layer: Option<String>,
    pub lid: Option<u32>,
    /// Raw values of `counters/*`.
    pub counters: BTreeMap<String, u64>,
    /// Raw values of `hw_counters/*`.
    pub hw_counters: BTreeMap<String, u64>,
    /// Raw values of `counters_ext/*` (64-bit counters of older kernels, mlx4).
    pub counters_ext: BTreeMap<String, u64>,
    /// Counter files that read "N/A (no PMA)": the port has no performance
    /// management agent (iWARP); not read errors.
    pub unavailable: Vec<String>,
    /// The HCA's identity (`board_id`, `fw_ver`, `hca_type`).
    pub hca: HcaInfo,
    /// (file, error) for every file that could not be read or parsed.
    pub read_errors: Vec<(String, String)>,
}

/// An [`OPTIONAL_FILES`] file a port does not have.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MissingFile {
    pub device: String,
    pub port: u32,
    pub file: &'static str,
}

/// One read of the ports, with the optional files they lack.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    pub ports: Vec<PortSnapshot>,
    pub missing: Vec<MissingFile>,
}

/// Non-numeric facts of an HCA (`<root>/class/infiniband/<dev>/`); empty
/// when the driver does not expose the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HcaInfo {
    pub board_id: String,
    pub firmware_version: String,
    pub hca_type: String,
}

impl HcaInfo {
    fn read(dev: &Path) -> Self {
        let f = |n: &str| {
            crate::bounded_read::read_to_string(&dev.join(n), crate::bounded_read::SYSFS_MAX)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Self {
            board_id: f("board_id"),
            firmware_version: f("fw_ver"),
            hca_type: f("hca_type"),
        }
    }
}

impl PortSnapshot {
    /// Entity name of this port on `host`: `<host>/<hca>/<port>`.
    pub fn entity(&self, host: &str) -> String {
        vocab::entity::port(host, &self.device, self.port)
    }
}

/// Reads every port of every device. A missing `class/infiniband` means no
/// RDMA devices (empty result), not an error.
pub fn read_ports(sysfs_root: &Path) -> io::Result<Vec<PortSnapshot>> {
    scan(sysfs_root, &DeviceFilter::default()).map(|s| s.ports)
}

/// Reads every port of the devices `filter` accepts.
pub fn scan(sysfs_root: &Path, filter: &DeviceFilter) -> io::Result<Scan> {
    let class = sysfs_root.join("class/infiniband");
    let rd = match fs::read_dir(&class) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(e),
    };
    let mut devices: Vec<(String, PathBuf)> = rd
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, _)| filter.accepts(name))
        .collect();
    devices.sort();
    let mut out = Scan::default();
    for (dev, path) in devices {
        let Ok(ports) = fs::read_dir(path.join("ports")) else {
            continue;
        };
        let hca = HcaInfo::read(&path);
        let mut nums: Vec<(u32, PathBuf)> = ports
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                Some((n, e.path()))
            })
            .collect();
        nums.sort();
        for (n, p) in nums {
            let (port, missing) = read_port(&dev, n, &p, &hca);
            out.missing
                .extend(missing.into_iter().map(|file| MissingFile {
                    device: dev.clone(),
                    port: n,
                    file,
                }));
            out.ports.push(port);
        }
    }
    Ok(out)
}

fn read_port(
    device: &str,
    port: u32,
    dir: &Path,
    hca: &HcaInfo,
) -> (PortSnapshot, Vec<&'static str>) {
    let mut errors = Vec::new();
    let mut unavailable = Vec::new();
    let mut missing = Vec::new();
    let mut text = |name: &'static str| -> Option<String> {
        match crate::bounded_read::read_to_string(&dir.join(name), crate::bounded_read::SYSFS_MAX) {
            Ok(s) => Some(s.trim().to_string()),
            Err(e) if e.kind() == io::ErrorKind::NotFound && OPTIONAL_FILES.contains(&name) => {
                missing.push(name);
                None
            }
            Err(e) => {
                errors.push((name.to_string(), e.to_string()));
                None
            }
        }
    };
    let state = text("state").and_then(|s| parse_id(&s));
    let phys_state = text("phys_state").and_then(|s| parse_id(&s));
    let rate_text = text("rate");
    let link_layer = text("link_layer");
    let lid = text("lid").and_then(|s| parse_lid(&s));
    let rate_bytes_per_sec = rate_text.as_deref().and_then(parse_rate);
    let mut dir_of =
        |name: &str| read_counter_dir(&dir.join(name), name, &mut errors, &mut unavailable);
    let counters = dir_of("counters");
    let hw_counters = dir_of("hw_counters");
    let counters_ext = dir_of("counters_ext");
    unavailable.sort();
    let snap = PortSnapshot {
        device: device.to_string(),
        port,
        taken: Instant::now(),
        state,
        phys_state,
        rate_bytes_per_sec,
        rate_text,
        link_layer,
        lid,
        counters,
        hw_counters,
        counters_ext,
        unavailable,
        hca: hca.clone(),
        read_errors: errors,
    };
    (snap, missing)
}

/// Reads every regular file of a counter directory. A missing directory is
/// normal (rxe has no `counters/`, old drivers no `hw_counters/`, new
/// kernels no `counters_ext/`); so is a counter a port cannot serve.
fn read_counter_dir(
    dir: &Path,
    label: &str,
    errors: &mut Vec<(String, String)>,
    unavailable: &mut Vec<String>,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match crate::bounded_read::read_to_string(&e.path(), crate::bounded_read::SYSFS_MAX) {
            Ok(s) => match parse_counter(&s) {
                Some(v) => {
                    out.insert(name, v);
                }
                None if s.trim() == vocab::ib::NO_PMA => {
                    unavailable.push(format!("{label}/{name}"))
                }
                None => errors.push((
                    format!("{label}/{name}"),
                    format!("not a counter: {:?}", s.trim()),
                )),
            },
            Err(err) => errors.push((format!("{label}/{name}"), err.to_string())),
        }
    }
    out
}

/// "4: ACTIVE" → 4.
pub fn parse_id(s: &str) -> Option<u32> {
    s.split(':').next()?.trim().parse().ok()
}

/// "0x1a" or "26" → 26.
pub fn parse_lid(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A counter file: a decimal (sometimes hex `0x..`) integer.
pub fn parse_counter(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// "100 Gb/sec (4X EDR)" → 12_500_000_000 bytes/s; "2.5 Gb/sec (1X SDR)" too.
pub fn parse_rate(s: &str) -> Option<u64> {
    let mut it = s.split_whitespace();
    let value: f64 = it.next()?.parse().ok()?;
    let unit = it.next()?;
    let mult = match unit {
        "Gb/sec" => 1e9,
        "Mb/sec" => 1e6,
        "Tb/sec" => 1e12,
        _ => return None,
    };
    Some((value * mult / 8.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_values() {
        assert_eq!(parse_id("4: ACTIVE"), Some(4));
        assert_eq!(parse_id("5: LinkUp"), Some(5));
        assert_eq!(parse_id("garbage"), None);
        assert_eq!(parse_lid("0x1a"), Some(26));
        assert_eq!(parse_lid("7"), Some(7));
        assert_eq!(parse_rate("100 Gb/sec (4X EDR)"), Some(12_500_000_000));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), Some(312_500_000));
        assert_eq!(parse_rate("10 Mb/sec"), Some(1_250_000));
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_counter("18446744073709551615\n"), Some(u64::MAX));
        assert_eq!(parse_counter("0x10"), Some(16));
        assert_eq!(parse_counter("-1"), None);
    }
}

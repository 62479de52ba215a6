//! A fake sysfs tree with InfiniBand devices (`--sysfs-root`).
use std::{fs, path::PathBuf};

/// A fake sysfs tree with InfiniBand devices, for the collector's sysfs
/// reader: `root()` is what `--sysfs-root` takes (it holds `class/infiniband`).
/// Removed on drop.
pub struct FakeIb {
    root: PathBuf,
}

impl FakeIb {
    pub fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "faultline-fake-ib-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        fs::create_dir_all(root.join("class/infiniband")).expect("create fake sysfs");
        Self { root }
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The directory of a port, created with its `counters/` and `hw_counters/`.
    pub fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        let d = self
            .root
            .join(format!("class/infiniband/{dev}/ports/{port}"));
        fs::create_dir_all(d.join("counters")).expect("mkdir counters");
        fs::create_dir_all(d.join("hw_counters")).expect("mkdir hw_counters");
        d
    }

    /// Writes a healthy active 4X EDR InfiniBand port with zeroed counters.
    pub fn active_port(&self, dev: &str, port: u32) {
        let d = self.port_dir(dev, port);
        self.write(dev, port, "state", "4: ACTIVE");
        self.write(dev, port, "phys_state", "5: LinkUp");
        self.write(dev, port, "rate", "100 Gb/sec (4X EDR)");
        self.write(dev, port, "link_layer", "InfiniBand");
        self.write(dev, port, "lid", "0x1a");
        for c in [
            "port_xmit_data",
            "port_rcv_data",
            "port_xmit_packets",
            "port_rcv_packets",
            "symbol_error",
            "link_error_recovery",
            "link_downed",
            "port_rcv_errors",
            "port_xmit_discards",
            "local_link_integrity_errors",
            "excessive_buffer_overrun_errors",
            "VL15_dropped",
            "port_xmit_wait",
        ] {
            fs::write(d.join("counters").join(c), "0\n").expect("write counter");
        }
    }

    /// Writes `value` into `<port>/<file>` (e.g. `state`, `counters/symbol_error`).
    pub fn write(&self, dev: &str, port: u32, file: &str, value: &str) {
        let p = self.port_dir(dev, port).join(file);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir in fake sysfs");
        }
        fs::write(&p, format!("{value}\n")).expect("write fake sysfs file");
    }

    /// Writes `value` into the device's own `file` (`board_id`, `fw_ver`, `hca_type`).
    pub fn device_file(&self, dev: &str, file: &str, value: &str) {
        let p = self.root.join(format!("class/infiniband/{dev}/{file}"));
        fs::write(&p, format!("{value}\n")).expect("write fake sysfs file");
    }

    pub fn counter(&self, dev: &str, port: u32, name: &str, value: u64) {
        self.write(dev, port, &format!("counters/{name}"), &value.to_string());
    }

    pub fn hw_counter(&self, dev: &str, port: u32, name: &str, value: u64) {
        self.write(
            dev,
            port,
            &format!("hw_counters/{name}"),
            &value.to_string(),
        );
    }

    /// Port 1 of mlx5_0..mlx5_3 after `w` windows of 0.5 s of traffic
    /// (500 M words each), with `errors` symbol errors so far on mlx5_2.
    pub fn traffic(&self, w: u64, errors: u64) {
        let words = w * 500_000_000;
        for hca in 0..4 {
            let dev = format!("mlx5_{hca}");
            self.counter(&dev, 1, "port_rcv_data", words);
            self.counter(&dev, 1, "port_xmit_data", words);
        }
        if errors > 0 {
            self.counter("mlx5_2", 1, "symbol_error", errors);
        }
    }

    pub fn remove(&self, dev: &str, port: u32, file: &str) {
        let _ = fs::remove_file(self.port_dir(dev, port).join(file));
    }
}

impl Drop for FakeIb {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

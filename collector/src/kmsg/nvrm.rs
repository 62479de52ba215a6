//! The NVIDIA driver's error reports in the kernel log: GPU XIDs (`NVRM:
//! Xid ...`, NVLink errors included: XID 74 and 144–150) and NVSwitch SXids
//! (`nvidia-nvswitchN: SXid ...`). The formats, as the driver writes them
//! (real lines in `tests/fixtures/kmsg/`, each with its public source):
//!
//! ```text
//! NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception ...
//! NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ...
//! NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000     (older drivers: no pid)
//! NVRM: Xid (0000:02:00): 13, ...                                       (oldest: no "PCI:")
//! nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, ...}
//! ```
//!
//! Fabric Manager writes to its own log file, not the kernel's: what of the
//! NVLink fabric reaches the kernel log are these XIDs and SXids.

/// At most this many characters of the driver's text in an event.
pub const MAX_TEXT: usize = 240;

/// A PCI function's place without its function number: the driver's XID
/// names `domain:bus:device`, NVML `domain:bus:device.function`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciKey {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
}

/// Parses `0000:3b:00`, `0000:3b:00.0`, NVML's `00000000:3B:00.0`.
pub fn pci_key(s: &str) -> Option<PciKey> {
    let s = s.split('.').next()?;
    let mut f = s.split(':');
    let (d, b, v) = (f.next()?, f.next()?, f.next()?);
    if f.next().is_some() {
        return None;
    }
    Some(PciKey {
        domain: u32::from_str_radix(d, 16).ok()?,
        bus: u8::from_str_radix(b, 16).ok()?,
        device: u8::from_str_radix(v, 16).ok()?,
    })
}

/// A GPU's XID as the driver reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xid {
    /// The address as the driver wrote it (`0000:3b:00`).
    pub pci: String,
    pub key: PciKey,
    pub code: u64,
    /// The process the driver named; `None` when it named none
    /// (`pid='<unknown>'`, pid 0, or an older driver without the field).
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// The driver's text after the code (and the pid and name).
    pub text: String,
}

/// An NVSwitch's SXid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sxid {
    /// The switch's address as the driver wrote it (`0000:84:00.0`).
    pub pci: String,
    pub code: u64,
    /// The driver's device name (`nvidia-nvswitch1`), when the line has it.
    pub device: Option<String>,
    pub text: String,
}

/// A driver report of the kernel log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Xid(Xid),
    Sxid(Sxid),
}

/// The report a kernel-log message holds, if it is one.
pub fn parse(message: &str) -> Option<Report> {
    if let Some(i) = message.find("SXid (") {
        let device = message[..i]
            .trim_end()
            .strip_suffix(':')
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty());
        let (pci, code, rest) = address_and_code(&message[i + "SXid (".len()..])?;
        return Some(Report::Sxid(Sxid {
            pci: pci.to_string(),
            code,
            device,
            text: bounded(rest),
        }));
    }
    let i = message.find("NVRM: Xid (")?;
    let (pci, code, rest) = address_and_code(&message[i + "NVRM: Xid (".len()..])?;
    let key = pci_key(pci)?;
    let (pid, process, text) = who(rest);
    Some(Report::Xid(Xid {
        pci: pci.to_string(),
        key,
        code,
        pid,
        process,
        text: bounded(text),
    }))
}

/// `PCI:0000:3b:00): 13, rest` → (`0000:3b:00`, 13, `rest`).
fn address_and_code(s: &str) -> Option<(&str, u64, &str)> {
    let (addr, rest) = s.split_once("):")?;
    let addr = addr.strip_prefix("PCI:").unwrap_or(addr).trim();
    if addr.is_empty() || addr.len() > 32 {
        return None;
    }
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let code = rest[..end].parse().ok()?;
    let rest = rest[end..].trim_start_matches(',').trim_start();
    Some((addr, code, rest))
}

/// `pid=4242, name=python3, text` → (Some(4242), Some("python3"), `text`).
fn who(s: &str) -> (Option<u32>, Option<String>, &str) {
    let Some(after) = s.strip_prefix("pid=") else {
        return (None, None, s);
    };
    let (pid, rest) = after.split_once(", ").unwrap_or((after, ""));
    let pid = pid.parse::<u32>().ok().filter(|&p| p != 0);
    let Some(after) = rest.strip_prefix("name=") else {
        return (pid, None, rest);
    };
    let (name, text) = after.split_once(", ").unwrap_or((after, ""));
    let process = Some(name.trim())
        .filter(|n| !n.is_empty() && *n != "<unknown>" && *n != "'<unknown>'")
        .map(|n| n.chars().take(64).collect());
    (pid, process, text)
}

fn bounded(s: &str) -> String {
    s.trim().chars().take(MAX_TEXT).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(m: &str) -> Xid {
        match parse(m) {
            Some(Report::Xid(x)) => x,
            other => panic!("not an XID: {other:?} for {m}"),
        }
    }

    #[test]
    fn xid_with_a_process() {
        let x = xid("NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
        assert_eq!(x.pci, "0000:3b:00");
        assert_eq!(x.key, pci_key("00000000:3B:00.0").expect("nvml's form"));
        assert_eq!((x.code, x.pid), (13, Some(4242)));
        assert_eq!(x.process.as_deref(), Some("python3"));
        assert!(x.text.starts_with("Graphics SM Warp Exception on (GPC 7"));
    }

    #[test]
    fn xid_without_a_process() {
        let x = xid("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x57c730=0xc04000b");
        assert_eq!((x.code, x.pid, x.process), (13, None, None));
        assert!(x.text.starts_with("Graphics Exception: ESR"));
        let old = xid("NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000");
        assert_eq!((old.code, old.pid), (32, None));
        assert_eq!(old.text, "Channel ID 00000000 intr 00004000");
        let oldest = xid("NVRM: Xid (0000:02:00): 13, 0003 00000000 0000a097 00001b0c");
        assert_eq!((oldest.pci.as_str(), oldest.code), ("0000:02:00", 13));
        let nvlink = xid("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)");
        assert_eq!((nvlink.key.domain, nvlink.code), (0x18, 145));
        let zero = xid("NVRM: Xid (PCI:0000:9b:00): 94, pid=0, name=, Contained ECC error");
        assert_eq!((zero.pid, zero.process), (None, None));
    }

    #[test]
    fn sxid_and_what_is_not_a_report() {
        let Some(Report::Sxid(s)) = parse(
            "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}",
        ) else {
            panic!("an SXid");
        };
        assert_eq!((s.pci.as_str(), s.code), ("0000:84:00.0", 12028));
        assert_eq!(s.device.as_deref(), Some("nvidia-nvswitch1"));
        assert!(s.text.starts_with("Data {0x000001c0"));
        assert_eq!(
            parse("NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)"),
            None
        );
        assert_eq!(parse("NVRM: Xid (PCI:0000:3b:00): x, garbage"), None);
        assert_eq!(parse("NVRM: Xid (PCI:zz:3b:00): 13, text"), None);
        let long = format!(
            "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, {}",
            "y".repeat(5000)
        );
        assert_eq!(xid(&long).text.len(), MAX_TEXT);
    }
}

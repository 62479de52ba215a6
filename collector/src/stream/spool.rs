//! A bounded directory of encoded windows, oldest first, that survives
//! crashes: every window is written to a temporary file, fsynced, renamed
//! into place and the directory fsynced, so a file under its final name is
//! complete. A file that is empty, truncated or undecodable anyway (a disk
//! fault, a hand edit) is moved to `quarantine/`, counted
//! (`faultline_spool_quarantined_total{reason}`) and logged once — never
//! retried, so it cannot wedge the sender.
//!
//! File format: `FLW1`, payload length (u32 LE), CRC-32 of the payload
//! (u32 LE), then the window in protobuf. Files without the magic (written
//! before the header existed) are decoded as bare protobuf.
use std::{
    collections::BTreeMap,
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use prost::Message as _;
use proto::v1::{Origin, Window};

const MAGIC: &[u8; 4] = b"FLW1";
const HEADER: usize = 12;
/// Quarantined files kept for inspection; older ones are deleted.
const QUARANTINE_KEEP: usize = 32;
/// Largest spool file read: a window is bounded by the correlator's 16 MiB
/// message limit; anything bigger is not ours.
const MAX_FILE: u64 = 32 << 20;

/// File name of a window: `<instance>~<seq>.win`, zero-padded so that names
/// sort in production order (instances start with their start time).
pub fn file_name(w: &Window) -> String {
    let inst = w.origin.as_ref().map_or("", |o| o.instance.as_str());
    name_of(inst, w.seq)
}

/// File name of window `seq` of collector instance `inst`.
pub fn name_of(inst: &str, seq: u64) -> String {
    format!("{inst}~{seq:020}.win")
}

pub fn parse_name(name: &str) -> Option<(String, u64)> {
    let stem = name.strip_suffix(".win")?;
    let (inst, seq) = stem.rsplit_once('~')?;
    Some((inst.to_string(), seq.parse().ok()?))
}

/// Why a spool file cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Corrupt {
    #[error("empty file")]
    Empty,
    #[error("truncated file")]
    Truncated,
    #[error("checksum mismatch")]
    Checksum,
    #[error("not a window")]
    Undecodable,
    #[error("window does not match its file name")]
    Mismatch,
    #[error("unreadable file")]
    Unreadable,
}

impl Corrupt {
    /// The `reason` label of `faultline_spool_quarantined_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Truncated => "truncated",
            Self::Checksum => "checksum",
            Self::Undecodable => "undecodable",
            Self::Mismatch => "mismatch",
            Self::Unreadable => "unreadable",
        }
    }
}

/// Encodes a window as a spool file.
pub fn encode_file(w: &Window) -> Vec<u8> {
    let payload = w.encode_to_vec();
    let mut buf = Vec::with_capacity(HEADER + payload.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buf.extend_from_slice(&payload);
    buf
}

/// Decodes the spool file `name` holding `bytes`: the window must be
/// complete, intact and be the one its name says (origin instance and seq).
pub fn decode_file(name: &str, bytes: &[u8]) -> Result<Window, Corrupt> {
    if bytes.is_empty() {
        return Err(Corrupt::Empty);
    }
    let payload = match bytes.strip_prefix(MAGIC.as_slice()) {
        Some(rest) => {
            let (Some(len), Some(crc)) = (rest.get(0..4), rest.get(4..8)) else {
                return Err(Corrupt::Truncated);
            };
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
            let body = &rest[8..];
            if body.len() < len {
                return Err(Corrupt::Truncated);
            }
            if body.len() > len || crc32fast::hash(body) != crc {
                return Err(Corrupt::Checksum);
            }
            body
        }
        None if MAGIC.starts_with(bytes) => return Err(Corrupt::Truncated),
        None => bytes,
    };
    let w = Window::decode(payload).map_err(|_| Corrupt::Undecodable)?;
    let (inst, seq) = parse_name(name).ok_or(Corrupt::Mismatch)?;
    match &w.origin {
        Some(o) if o.instance == inst && !o.hostname.is_empty() && w.seq == seq => Ok(w),
        _ => Err(Corrupt::Mismatch),
    }
}

/// One spooled window: its file size and the window's end (unix ms).
#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    end_ms: i64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    entries: BTreeMap<String, Entry>,
    /// Origin of every instance with windows spooled in this process or
    /// found at open (what `Resume` asks about).
    origins: BTreeMap<String, Origin>,
    bytes: u64,
    /// Windows dropped because the spool was full (since this process started).
    pub dropped: u64,
    /// Files moved to `quarantine/` (since this process started).
    pub quarantined: u64,
}

/// Writes `buf` to `path` durably: temporary file, fsync, rename, fsync of
/// the directory. On any error the temporary file is removed (a full disk
/// leaves nothing behind).
fn write_durable(dir: &Path, name: &str, buf: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let r = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(buf)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, dir.join(name))?;
        fs::File::open(dir)?.sync_all()
    })();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

impl Spool {
    /// Opens (creating) `dir`, keeping the intact windows left by a previous
    /// run; leftover temporary files are removed and damaged files
    /// quarantined. `max_bytes`: the key
    /// [`SPOOL_MAX_BYTES`](super::section::SPOOL_MAX_BYTES) (its default,
    /// bound and flag are declared there).
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut s = Self {
            dir: dir.to_path_buf(),
            max_bytes: max_bytes.max(1),
            entries: BTreeMap::new(),
            origins: BTreeMap::new(),
            bytes: 0,
            dropped: 0,
            quarantined: 0,
        };
        let mut names = Vec::new();
        for e in fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            } else if parse_name(&name).is_some() && e.file_type().is_ok_and(|t| t.is_file()) {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            match s.load(&name) {
                Ok((w, size)) => {
                    let end_ms = w.end_unix_ms;
                    if let Some(o) = w.origin {
                        s.origins.entry(o.instance.clone()).or_insert(o);
                    }
                    s.bytes += size;
                    s.entries.insert(name, Entry { size, end_ms });
                }
                Err(why) => s.quarantine(&name, why),
            }
        }
        Ok(s)
    }

    fn load(&self, name: &str) -> Result<(Window, u64), Corrupt> {
        let path = self.dir.join(name);
        let bytes = crate::bounded_read::read(&path, MAX_FILE).map_err(|_| Corrupt::Unreadable)?;
        let w = decode_file(name, &bytes)?;
        Ok((w, bytes.len() as u64))
    }

    /// Moves a damaged file aside (once: it is no longer in the spool),
    /// counts and logs it.
    fn quarantine(&mut self, name: &str, why: Corrupt) {
        if let Some(e) = self.entries.remove(name) {
            self.bytes -= e.size;
        }
        let qdir = self.dir.join("quarantine");
        let moved = fs::create_dir_all(&qdir)
            .and_then(|()| fs::rename(self.dir.join(name), qdir.join(name)));
        if moved.is_err() {
            let _ = fs::remove_file(self.dir.join(name));
        }
        self.quarantined += 1;
        metrics::counter!(crate::metrics_catalog::SPOOL_QUARANTINED.name, "reason" => why.reason())
            .increment(1);
        tracing::warn!(
            file = %self.dir.join(name).display(),
            reason = %why,
            "spool file damaged: moved to {}/ and skipped",
            qdir.display()
        );
        // Keep the quarantine bounded: the oldest files go.
        if let Ok(rd) = fs::read_dir(&qdir) {
            let mut old: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            if old.len() > QUARANTINE_KEEP {
                old.sort();
                for p in &old[..old.len() - QUARANTINE_KEEP] {
                    let _ = fs::remove_file(p);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends a window (durably); if that overflows the bound, the oldest
    /// windows are evicted (never the one just written). Returns the evicted
    /// names. A window without an origin instance is refused.
    pub fn push(&mut self, w: &Window) -> io::Result<Vec<String>> {
        let Some(origin) = w.origin.as_ref().filter(|o| !o.instance.is_empty()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "window without an origin instance",
            ));
        };
        let name = file_name(w);
        let buf = encode_file(w);
        write_durable(&self.dir, &name, &buf)?;
        if !self.origins.contains_key(&origin.instance) {
            self.origins.insert(origin.instance.clone(), origin.clone());
        }
        let entry = Entry {
            size: buf.len() as u64,
            end_ms: w.end_unix_ms,
        };
        if let Some(old) = self.entries.insert(name.clone(), entry) {
            self.bytes -= old.size;
        }
        self.bytes += entry.size;
        let mut dropped = Vec::new();
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            let Some((oldest, e)) = self.entries.pop_first() else {
                break;
            };
            if oldest == name {
                self.entries.insert(oldest, e);
                break;
            }
            let _ = fs::remove_file(self.dir.join(&oldest));
            self.bytes -= e.size;
            dropped.push(oldest);
        }
        self.dropped += dropped.len() as u64;
        Ok(dropped)
    }

    /// Names after `after` (all when `None`), oldest first.
    pub fn names_after(&self, after: Option<&str>) -> Vec<String> {
        match after {
            Some(a) => self
                .entries
                .range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
                .map(|(k, _)| k.clone())
                .collect(),
            None => self.entries.keys().cloned().collect(),
        }
    }

    /// The first name after `after` (the first of all when `None`).
    pub fn next_after(&self, after: Option<&str>) -> Option<String> {
        match after {
            Some(a) => self
                .entries
                .range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
                .next()
                .map(|(k, _)| k.clone()),
            None => self.entries.keys().next().cloned(),
        }
    }

    /// A spooled window's end (unix ms) and file size, without reading it.
    pub fn entry(&self, name: &str) -> Option<(i64, u64)> {
        self.entries.get(name).map(|e| (e.end_ms, e.size))
    }

    /// Reads one window; a damaged file is quarantined (and `None`).
    pub fn read(&mut self, name: &str) -> Option<Window> {
        match self.load(name) {
            Ok((w, _)) => Some(w),
            Err(why) => {
                self.quarantine(name, why);
                None
            }
        }
    }

    /// Distinct collector instances with windows in the spool.
    pub fn instances(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .entries
            .keys()
            .filter_map(|n| parse_name(n).map(|(i, _)| i))
            .collect();
        v.dedup();
        v
    }

    /// The origin (host, boot, instance) of an instance seen in this spool.
    pub fn origin(&self, instance: &str) -> Option<&Origin> {
        self.origins.get(instance)
    }

    /// Removes an instance's windows up to and including `seq` (delivered),
    /// except those `keep` names (held aside: the correlator judges them
    /// when they are sent).
    pub fn remove_upto(&mut self, instance: &str, seq: u64, keep: impl Fn(&str) -> bool) -> usize {
        let victims: Vec<String> = self
            .entries
            .range::<str, _>((
                std::ops::Bound::Included(name_of(instance, 0).as_str()),
                std::ops::Bound::Included(name_of(instance, seq).as_str()),
            ))
            .map(|(n, _)| n)
            .filter(|n| parse_name(n).is_some_and(|(i, s)| i == instance && s <= seq) && !keep(n))
            .cloned()
            .collect();
        for n in &victims {
            self.remove(n);
        }
        victims.len()
    }

    /// Removes one window (refused for good, or delivered); whether it was
    /// spooled.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(e) = self.entries.remove(name) else {
            return false;
        };
        self.bytes -= e.size;
        let _ = fs::remove_file(self.dir.join(name));
        true
    }

    /// Removes every window that ended before `end_ms` (unix ms); returns
    /// their names, oldest first.
    pub fn remove_ended_before(&mut self, end_ms: i64) -> Vec<String> {
        let victims: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.end_ms < end_ms)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &victims {
            self.remove(n);
        }
        victims
    }
}

#[cfg(test)]
mod tests {
    use proto::v1::Origin;

    use super::*;

    fn w(inst: &str, seq: u64, pad: usize) -> Window {
        Window {
            origin: Some(Origin {
                hostname: "n1".into(),
                instance: inst.into(),
                ..Origin::default()
            }),
            seq,
            events: vec![proto::v1::Event {
                detail: "x".repeat(pad),
                ..Default::default()
            }],
            ..Window::default()
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("faultline-spool-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn bounded_oldest_dropped_and_counted_and_survives_reopen() {
        let dir = tmp("bounded");
        let one = encode_file(&w("a", 1, 100)).len() as u64;
        let mut s = Spool::open(&dir, one * 3).unwrap();
        for seq in 1..=5 {
            s.push(&w("a", seq, 100)).unwrap();
        }
        assert_eq!(s.len(), 3);
        assert_eq!(s.dropped, 2);
        let names = s.names_after(None);
        assert!(names[0].ends_with(&format!("{:020}.win", 3)), "{names:?}");
        assert_eq!(s.read(&names[2]).unwrap().seq, 5);
        assert_eq!(s.remove_upto("a", 4, |_| false), 2);
        assert_eq!(s.len(), 1);
        drop(s);
        let mut s = Spool::open(&dir, one * 3).unwrap();
        assert_eq!(s.len(), 1, "spool survives a restart");
        assert_eq!(s.instances(), ["a"]);
        assert_eq!(s.origin("a").map(|o| o.hostname.as_str()), Some("n1"));
        assert_eq!(s.read(&s.names_after(None)[0]).unwrap().seq, 5);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_truncated_and_foreign_files_are_quarantined_once_at_open() {
        let dir = tmp("quarantine");
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        for seq in 1..=4 {
            s.push(&w("a", seq, 50)).unwrap();
        }
        drop(s);
        let name = |seq: u64| format!("a~{seq:020}.win");
        // What a crash without fsync leaves: an empty file.
        fs::write(dir.join(name(1)), b"").unwrap();
        // A file cut in half.
        let full = fs::read(dir.join(name(2))).unwrap();
        fs::write(dir.join(name(2)), &full[..full.len() / 2]).unwrap();
        // A valid window under the wrong name.
        fs::write(dir.join(name(9)), encode_file(&w("a", 3, 1))).unwrap();
        // Left over from a crash between create and rename.
        fs::write(dir.join(format!("{}.tmp", name(5))), b"").unwrap();
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        assert_eq!(s.quarantined, 3);
        assert_eq!(s.names_after(None), [name(3), name(4)]);
        assert_eq!(s.read(&name(3)).unwrap().seq, 3);
        let mut q: Vec<String> = fs::read_dir(dir.join("quarantine"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        q.sort();
        assert_eq!(q, [name(1), name(2), name(9)]);
        assert!(!dir.join(format!("{}.tmp", name(5))).exists());
        // Damaged after open: quarantined on read, and only once.
        fs::write(dir.join(name(4)), b"\x00").unwrap();
        assert!(s.read(&name(4)).is_none());
        assert_eq!(s.quarantined, 4);
        assert_eq!(s.names_after(None), [name(3)]);
        drop(s);
        let s = Spool::open(&dir, 1 << 20).unwrap();
        assert_eq!(s.quarantined, 0, "quarantined files are not seen again");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refused_windows_leave_by_name_or_by_end_time_and_stay_gone_after_reopen() {
        let dir = tmp("refused");
        let ended = |inst: &str, seq: u64, end_ms: i64| Window {
            end_unix_ms: end_ms,
            ..w(inst, seq, 10)
        };
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        // A collector run with a bad clock (1970), then a good one.
        for seq in 1..=3 {
            s.push(&ended("a", seq, 1000 * seq as i64)).unwrap();
        }
        for seq in 1..=3 {
            s.push(&ended("b", seq, 1_700_000_000_000 + seq as i64))
                .unwrap();
        }
        assert!(s.remove(&name_of("a", 1)));
        assert!(!s.remove(&name_of("a", 1)), "only once");
        assert_eq!(
            s.remove_ended_before(1_700_000_000_002),
            [name_of("a", 2), name_of("a", 3), name_of("b", 1)]
        );
        assert_eq!(s.names_after(None), [name_of("b", 2), name_of("b", 3)]);
        let on_disk: u64 = s
            .names_after(None)
            .iter()
            .map(|n| fs::metadata(dir.join(n)).unwrap().len())
            .sum();
        assert_eq!(s.bytes(), on_disk, "their bytes are released");
        assert!(!dir.join(name_of("a", 2)).exists());
        drop(s);
        let s = Spool::open(&dir, 1 << 20).unwrap();
        assert_eq!(s.names_after(None), [name_of("b", 2), name_of("b", 3)]);
        assert_eq!(s.quarantined, 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn decode_names_each_kind_of_damage() {
        let win = w("a", 7, 10);
        let name = file_name(&win);
        let buf = encode_file(&win);
        assert_eq!(decode_file(&name, &buf).unwrap(), win);
        assert_eq!(decode_file(&name, b""), Err(Corrupt::Empty));
        assert_eq!(decode_file(&name, b"FL"), Err(Corrupt::Truncated));
        assert_eq!(decode_file(&name, &buf[..6]), Err(Corrupt::Truncated));
        assert_eq!(
            decode_file(&name, &buf[..buf.len() - 1]),
            Err(Corrupt::Truncated)
        );
        let mut flipped = buf.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode_file(&name, &flipped), Err(Corrupt::Checksum));
        // A bare protobuf (older spool) is still read.
        assert_eq!(decode_file(&name, &win.encode_to_vec()).unwrap(), win);
        assert_eq!(
            decode_file(&name, b"\xff\xff\xff"),
            Err(Corrupt::Undecodable)
        );
        // An empty protobuf decodes to a window without origin: refused.
        let empty = Window::default().encode_to_vec();
        assert_eq!(decode_file(&name, &empty), Err(Corrupt::Empty));
        assert_eq!(
            decode_file("b~00000000000000000007.win", &buf),
            Err(Corrupt::Mismatch)
        );
    }
}

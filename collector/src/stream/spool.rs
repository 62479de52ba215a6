//! A bounded directory of encoded windows, oldest first.
use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use prost::Message as _;
use proto::v1::Window;

/// File name of a window: `<instance>~<seq>.win`, zero-padded so that names
/// sort in production order (instances start with their start time).
pub fn file_name(w: &Window) -> String {
    let inst = w.origin.as_ref().map_or("", |o| o.instance.as_str());
    format!("{inst}~{:020}.win", w.seq)
}

pub fn parse_name(name: &str) -> Option<(String, u64)> {
    let stem = name.strip_suffix(".win")?;
    let (inst, seq) = stem.rsplit_once('~')?;
    Some((inst.to_string(), seq.parse().ok()?))
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    /// name → size
    entries: BTreeMap<String, u64>,
    bytes: u64,
    /// Windows dropped because the spool was full (since this process started).
    pub dropped: u64,
    /// Unreadable files removed.
    pub corrupt: u64,
}

impl Spool {
    /// Opens (creating) `dir`, keeping windows left by a previous run.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut entries = BTreeMap::new();
        let mut bytes = 0;
        for e in fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
                continue;
            }
            if parse_name(&name).is_none() {
                continue;
            }
            let size = e.metadata().map_or(0, |m| m.len());
            bytes += size;
            entries.insert(name, size);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes: max_bytes.max(1),
            entries,
            bytes,
            dropped: 0,
            corrupt: 0,
        })
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

    /// Appends a window; if that overflows the bound, the oldest windows are
    /// evicted (never the one just written). Returns the evicted names.
    pub fn push(&mut self, w: &Window) -> io::Result<Vec<String>> {
        let name = file_name(w);
        let buf = w.encode_to_vec();
        let tmp = self.dir.join(format!("{name}.tmp"));
        fs::write(&tmp, &buf)?;
        fs::rename(&tmp, self.dir.join(&name))?;
        if let Some(old) = self.entries.insert(name.clone(), buf.len() as u64) {
            self.bytes -= old;
        }
        self.bytes += buf.len() as u64;
        let mut dropped = Vec::new();
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            let Some((oldest, size)) = self.entries.pop_first() else {
                break;
            };
            if oldest == name {
                self.entries.insert(oldest, size);
                break;
            }
            let _ = fs::remove_file(self.dir.join(&oldest));
            self.bytes -= size;
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

    /// Reads one window; an unreadable file is removed and counted.
    pub fn read(&mut self, name: &str) -> Option<Window> {
        let path = self.dir.join(name);
        match fs::read(&path)
            .ok()
            .and_then(|b| Window::decode(b.as_slice()).ok())
        {
            Some(w) => Some(w),
            None => {
                if let Some(size) = self.entries.remove(name) {
                    self.bytes -= size;
                }
                let _ = fs::remove_file(path);
                self.corrupt += 1;
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

    /// Removes an instance's windows up to and including `seq` (delivered).
    pub fn remove_upto(&mut self, instance: &str, seq: u64) -> usize {
        let victims: Vec<String> = self
            .entries
            .keys()
            .filter(|n| parse_name(n).is_some_and(|(i, s)| i == instance && s <= seq))
            .cloned()
            .collect();
        for n in &victims {
            if let Some(size) = self.entries.remove(n) {
                self.bytes -= size;
            }
            let _ = fs::remove_file(self.dir.join(n));
        }
        victims.len()
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

    #[test]
    fn bounded_oldest_dropped_and_counted_and_survives_reopen() {
        let dir = std::env::temp_dir().join(format!("faultline-spool-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let one = w("a", 1, 100).encoded_len() as u64;
        let mut s = Spool::open(&dir, one * 3).unwrap();
        for seq in 1..=5 {
            s.push(&w("a", seq, 100)).unwrap();
        }
        assert_eq!(s.len(), 3);
        assert_eq!(s.dropped, 2);
        let names = s.names_after(None);
        assert!(names[0].ends_with(&format!("{:020}.win", 3)), "{names:?}");
        assert_eq!(s.read(&names[2]).unwrap().seq, 5);
        assert_eq!(s.remove_upto("a", 4), 2);
        assert_eq!(s.len(), 1);
        drop(s);
        let mut s = Spool::open(&dir, one * 3).unwrap();
        assert_eq!(s.len(), 1, "spool survives a restart");
        assert_eq!(s.instances(), ["a"]);
        // a corrupt file is removed and counted
        fs::write(dir.join("a~00000000000000000009.win"), b"\xff\xff\xff").unwrap();
        let mut s2 = Spool::open(&dir, one * 3).unwrap();
        assert!(s2.read("a~00000000000000000009.win").is_none());
        assert_eq!(s2.corrupt, 1);
        assert_eq!(s.read(&s.names_after(None)[0]).unwrap().seq, 5);
        fs::remove_dir_all(&dir).unwrap();
    }
}

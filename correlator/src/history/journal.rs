//! The incident journal: every incident update is written into a file
//! reserved at start (`<database>-incidents`, `history.journal_bytes`,
//! preallocated) before the update is broadcast to subscribers, the web UI
//! and Alertmanager, so a full disk cannot keep it out, and a `kill -9`
//! while the database cannot take it (a full disk) does not lose it: the
//! next start replays what the database lacks (docs/history.md, "Two faults
//! at once").
//!
//! The file is two halves; records are appended to the active one. Each
//! record is `magic, payload length, epoch, seq, hash` and the encoded
//! update; a half's records are those from its start with its first
//! record's epoch and a matching hash. When the active half is full the
//! records not yet in the database are copied to the other half under a new
//! epoch (the latest per incident when they do not fit) and appends go
//! there; the old half is only overwritten at the next switch, by when the
//! new one holds all it had, so a crash at any point leaves every record in
//! one half or the other. The database stores the highest seq it committed
//! (`meta.journal_seq`, in the same transaction), and a start replays only
//! the records above it, in seq order.
//!
//! Writes go to the page cache (no fsync on the engine's path): they
//! survive the process's death. The writer thread syncs the file after each
//! batch, so a machine crash can lose what was appended since.
use std::{
    collections::{BTreeMap, HashSet, VecDeque},
    fs::File,
    io,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use prost::Message as _;
use proto::v1::CandidateUpdate;

/// `FLIJ`, little-endian.
const MAGIC: u32 = 0x4a49_4c46;
/// Magic, length, epoch, seq, hash.
const HEADER: usize = 4 + 4 + 8 + 8 + 8;
/// Bounds of `history.journal_bytes`.
pub const MIN_BYTES: u64 = 64 << 10;
pub const MAX_BYTES: u64 = 256 << 20;

/// The journal of the database at `db`.
pub fn path_of(db: &Path) -> PathBuf {
    super::store::sibling(db, "-incidents")
}

/// Updates read back, with their seqs, oldest first.
pub type Replay = Vec<(u64, CandidateUpdate)>;

/// One record not yet committed to the database.
struct Rec {
    seq: u64,
    id: String,
    payload: Vec<u8>,
}

/// What the journal counts (the recorder's stats and metrics read them).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Updates not journaled: no room (the database has been failing for
    /// longer than the journal holds), or one larger than half the file.
    pub missed: u64,
    /// Writes into the journal that failed (an I/O error).
    pub errors: u64,
}

pub struct Journal {
    file: File,
    /// Bytes of each half.
    half: u64,
    active: u64,
    epoch: u64,
    /// Write offset in the active half.
    at: u64,
    next_seq: u64,
    /// Records appended and not committed, oldest first.
    pending: VecDeque<Rec>,
    pub counts: Counts,
}

/// 64-bit FNV-1a over the header fields and the payload: a torn or stale
/// record is told from a whole one (not a defence against forgery: the
/// file is the correlator's own, mode 0600).
fn hash(epoch: u64, seq: u64, payload: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in epoch
        .to_le_bytes()
        .iter()
        .chain(&seq.to_le_bytes())
        .chain(payload)
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn record(epoch: u64, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(HEADER + payload.len());
    r.extend_from_slice(&MAGIC.to_le_bytes());
    r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    r.extend_from_slice(&epoch.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&hash(epoch, seq, payload).to_le_bytes());
    r.extend_from_slice(payload);
    r
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// `(seq, encoded update)` of each record of a half.
type Records = Vec<(u64, Vec<u8>)>;

/// The records of one half, and its epoch.
fn scan(file: &File, base: u64, half: u64) -> io::Result<(u64, Records)> {
    let mut buf = vec![0u8; half as usize];
    file.read_exact_at(&mut buf, base)?;
    let (mut at, mut epoch, mut out) = (0usize, None, Vec::new());
    while at + HEADER <= buf.len() {
        let h = &buf[at..at + HEADER];
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) != MAGIC || at + HEADER + len > buf.len() {
            break;
        }
        let (e, seq, sum) = (le64(&h[8..]), le64(&h[16..]), le64(&h[24..]));
        let payload = &buf[at + HEADER..at + HEADER + len];
        if epoch.is_some_and(|x| x != e) || hash(e, seq, payload) != sum {
            break;
        }
        epoch = Some(e);
        out.push((seq, payload.to_vec()));
        at += HEADER + len;
    }
    Ok((epoch.unwrap_or(0), out))
}

impl Journal {
    /// Opens (creating and reserving `bytes`) the journal of `db`; returns
    /// it and the updates it holds above `committed` (the database's
    /// `journal_seq`), in order: those a crash kept out of the database.
    pub fn open(db: &Path, bytes: u64, committed: u64) -> io::Result<(Self, Replay)> {
        let path = path_of(db);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        // Read with the halves it was written in; a new size
        // (`journal_bytes` changed) applies once nothing in it is pending.
        let want = bytes.clamp(MIN_BYTES, MAX_BYTES) & !8191;
        let old = meta.len().min(MAX_BYTES) & !8191;
        let mut found = BTreeMap::new();
        let mut epochs = [0u64; 2];
        if old >= MIN_BYTES {
            for (h, epoch) in epochs.iter_mut().enumerate() {
                let (e, recs) = scan(&file, h as u64 * (old / 2), old / 2)?;
                *epoch = e;
                found.extend(recs);
            }
        }
        let size = if old >= MIN_BYTES && found.keys().any(|s| *s > committed) {
            old
        } else {
            if old != want {
                file.set_len(want)?;
            }
            want
        };
        if let Err(e) = reserve(&file, size) {
            // Already that long (a restart on a full disk): its blocks are
            // most likely those reserved before; a write that finds a hole
            // fails and is counted.
            if meta.len() < size {
                return Err(e);
            }
            tracing::warn!(error = %e, "incident journal: reserving its blocks again failed; using the file as it is");
        }
        let half = size / 2;
        let max_seq = found.keys().next_back().copied().unwrap_or(0);
        let mut j = Self {
            file,
            half,
            // The newer half; `switch` below writes the older one, and the
            // newer keeps its records until that one holds them.
            active: u64::from(epochs[1] > epochs[0]),
            epoch: epochs[0].max(epochs[1]),
            at: 0,
            next_seq: max_seq.max(committed) + 1,
            pending: VecDeque::new(),
            counts: Counts::default(),
        };
        let mut replay = Vec::new();
        for (seq, payload) in found.into_iter().filter(|(s, _)| *s > committed) {
            if let Ok(u) = CandidateUpdate::decode(payload.as_slice()) {
                j.pending.push_back(Rec {
                    seq,
                    id: u.incident_id.clone(),
                    payload,
                });
                replay.push((seq, u));
            }
        }
        j.switch()?;
        Ok((j, replay))
    }

    /// Appends `u` before it is sent anywhere; returns its seq (given even
    /// when it could not be journaled, which is counted).
    pub fn append(&mut self, u: &CandidateUpdate) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let payload = u.encode_to_vec();
        let len = (HEADER + payload.len()) as u64;
        if len > self.half / 2 {
            self.counts.missed += 1;
            return seq;
        }
        if self.at + len > self.half {
            if let Err(e) = self.switch() {
                self.counts.errors += 1;
                tracing::error!(error = %e, "incident journal: switching halves failed");
            }
        }
        if self.at + len > self.half {
            // Saturated: the database has been failing for longer than the
            // journal holds; this update lives in memory only.
            self.counts.missed += 1;
            return seq;
        }
        let r = record(self.epoch, seq, &payload);
        match self
            .file
            .write_all_at(&r, self.active * self.half + self.at)
        {
            Ok(()) => {
                self.at += len;
                self.pending.push_back(Rec {
                    seq,
                    id: u.incident_id.clone(),
                    payload,
                });
            }
            Err(e) => {
                self.counts.errors += 1;
                tracing::error!(error = %e, "incident journal write failed");
            }
        }
        seq
    }

    /// The database committed every update up to `seq`: their records are
    /// no longer needed.
    pub fn committed(&mut self, seq: u64) {
        while self.pending.front().is_some_and(|r| r.seq <= seq) {
            self.pending.pop_front();
        }
    }

    /// Updates appended and not committed yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// A second handle on the file, for syncing off the engine's path.
    pub fn sync_handle(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// Moves appends to the other half under a new epoch, copying the
    /// pending records first (only the latest of each incident when they
    /// would take more than half of it; the oldest dropped, counted, past
    /// that).
    fn switch(&mut self) -> io::Result<()> {
        let room = self.half / 2;
        let size = |p: &VecDeque<Rec>| -> u64 {
            p.iter()
                .map(|r| (HEADER + r.payload.len()) as u64)
                .sum::<u64>()
        };
        if size(&self.pending) > room {
            let mut seen = HashSet::new();
            let before = self.pending.len();
            let mut kept: VecDeque<Rec> = self
                .pending
                .drain(..)
                .rev()
                .filter(|r| seen.insert(r.id.clone()))
                .collect();
            kept.make_contiguous().reverse();
            // Superseded updates of an incident are history, not state.
            self.counts.missed += (before - kept.len()) as u64;
            while size(&kept) > room {
                kept.pop_front();
                self.counts.missed += 1;
            }
            self.pending = kept;
        }
        self.active = 1 - self.active;
        self.epoch += 1;
        self.at = 0;
        let mut out = Vec::new();
        for r in &self.pending {
            out.extend_from_slice(&record(self.epoch, r.seq, &r.payload));
        }
        // A whole-half write would be torn only by a crash, and the other
        // half still holds every record then.
        self.file
            .write_all_at(&out, self.active * self.half)
            .inspect(|()| self.at = out.len() as u64)
    }
}

/// Reserves `size` bytes for `file` (blocks allocated now, so later writes
/// into them need no space from a full disk).
fn reserve(file: &File, size: u64) -> io::Result<()> {
    let len = i64::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid open descriptor; no memory is passed.
    match unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(file), 0, len) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: &str, ts: i64, state: &str) -> CandidateUpdate {
        CandidateUpdate {
            ts_unix_ms: ts,
            incident_id: id.into(),
            state: state.into(),
            kind: "node_lost".into(),
            entity: "n1".into(),
            evidence: vec!["x".repeat(200)],
            ..CandidateUpdate::default()
        }
    }

    fn db(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("faultline-journal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("h.db")
    }

    #[test]
    fn uncommitted_updates_survive_reopen_in_order_and_committed_ones_do_not() {
        let db = db("reopen");
        let (mut j, replay) = Journal::open(&db, MIN_BYTES, 0).unwrap();
        assert!(replay.is_empty());
        assert_eq!(std::fs::metadata(path_of(&db)).unwrap().len(), MIN_BYTES);
        let a = j.append(&up("a", 1, "opened"));
        let b = j.append(&up("b", 2, "opened"));
        j.committed(a);
        let c = j.append(&up("a", 3, "resolved"));
        drop(j);
        let (j, replay) = Journal::open(&db, MIN_BYTES, a).unwrap();
        let got: Vec<(u64, String, String)> = replay
            .into_iter()
            .map(|(s, u)| (s, u.incident_id, u.state))
            .collect();
        assert_eq!(
            got,
            [
                (b, "b".into(), "opened".into()),
                (c, "a".into(), "resolved".into())
            ]
        );
        // New seqs continue above every seq seen.
        assert_eq!(j.next_seq, c + 1);
        drop(j);
        // A new size waits while records are pending, then applies.
        let (j, replay) = Journal::open(&db, 2 * MIN_BYTES, a).unwrap();
        assert_eq!((replay.len(), j.half), (2, MIN_BYTES / 2));
        drop(j);
        let (j, replay) = Journal::open(&db, 2 * MIN_BYTES, c).unwrap();
        assert_eq!((replay.len(), j.half), (0, MIN_BYTES));
        assert_eq!(
            std::fs::metadata(path_of(&db)).unwrap().len(),
            2 * MIN_BYTES
        );
        assert!(j.next_seq > c);
    }

    #[test]
    fn many_switches_keep_every_pending_update_and_compact_per_incident() {
        let db = db("switch");
        let (mut j, _) = Journal::open(&db, MIN_BYTES, 0).unwrap();
        // ~300 bytes each: 32 KiB halves switch every ~100 records.
        let mut last = 0;
        for i in 0..1000 {
            let s = j.append(&up(&format!("i{}", i % 10), i, "updated"));
            // The database keeps up to 5 behind.
            j.committed(s.saturating_sub(5));
            last = s;
        }
        assert_eq!(j.counts, Counts::default());
        drop(j);
        let (_, replay) = Journal::open(&db, MIN_BYTES, last - 5).unwrap();
        let seqs: Vec<u64> = replay.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (last - 4..=last).collect::<Vec<_>>());
        // The database stops (a full disk): 40 incidents keep updating; the
        // journal keeps the latest of each.
        let (mut j, _) = Journal::open(&db, MIN_BYTES, last).unwrap();
        for i in 0..2000 {
            j.append(&up(&format!("k{}", i % 40), i, "updated"));
        }
        assert!(j.counts.missed > 0 && j.counts.errors == 0);
        drop(j);
        let (_, replay) = Journal::open(&db, MIN_BYTES, last).unwrap();
        let ids: HashSet<String> = replay.iter().map(|(_, u)| u.incident_id.clone()).collect();
        assert_eq!(ids.len(), 40, "every incident's latest state kept");
        let newest = replay.iter().map(|(_, u)| u.ts_unix_ms).max();
        assert_eq!(newest, Some(1999));
    }
}

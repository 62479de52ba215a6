//! The window log: one window per line as JSON, the format
//! `faultline-correlator replay` reads (`docs/replay.md`). Written by the
//! collector's and the correlator's `--record`. A failed append (a full disk)
//! removes what it wrote, so the log never holds a half-written line; a log
//! that ends in a partial line (a crash) is cut back to its last full line
//! when opened.
use std::{
    fs::{File, OpenOptions},
    io::{self, Read as _, Seek as _, SeekFrom, Write as _},
    path::Path,
};

use crate::v1::Window;

#[derive(Debug)]
pub struct RecordLog {
    file: File,
    /// Length of the log up to its last complete line.
    len: u64,
}

impl RecordLog {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let len = complete_len(&mut file)?;
        if len != file.metadata()?.len() {
            file.set_len(len)?;
        }
        Ok(Self { file, len })
    }

    /// Appends one window as a line; on error the log is as before.
    pub fn append(&mut self, w: &Window) -> io::Result<()> {
        let mut line = serde_json::to_vec(w).map_err(io::Error::other)?;
        line.push(b'\n');
        match self.file.write_all(&line) {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Drop the partial line; if even that fails, the next open cuts it.
                let _ = self.file.set_len(self.len);
                Err(e)
            }
        }
    }
}

/// Length up to and including the last newline.
fn complete_len(file: &mut File) -> io::Result<u64> {
    let total = file.metadata()?.len();
    let mut end = total;
    let mut buf = vec![0u8; 64 << 10];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_last_line_is_cut_and_appends_are_whole_lines() {
        let p = std::env::temp_dir().join(format!("faultline-record-{}.jsonl", std::process::id()));
        std::fs::write(&p, b"{\"seq\":1}\n{\"seq\":2,\"orig").unwrap();
        let mut log = RecordLog::open(&p).unwrap();
        log.append(&Window {
            seq: 3,
            ..Window::default()
        })
        .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], "{\"seq\":1}");
        assert!(lines[1].contains("\"seq\":3"), "{text}");
        assert!(text.ends_with('\n'));
        std::fs::remove_file(&p).unwrap();
    }
}

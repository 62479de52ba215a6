//! Where reading the kernel log resumes after a restart: the boot id and
//! the last sequence number read, in `kmsg.state_file` (`BOOT_ID SEQ\n`).
//! A restart in the same boot skips records at or below the saved number;
//! a saved position of another boot is void.
use std::path::{Path, PathBuf};

/// What a record's sequence number is against the position.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// At or below the saved position of this boot: already read.
    Old,
    /// New; `lost`: records between the last one read and this one.
    New { lost: u64 },
}

pub struct Resume {
    file: PathBuf,
    boot_id: String,
    /// The last sequence number read in this boot.
    last: Option<u64>,
    /// A position of this boot was loaded from the file.
    loaded: bool,
    saved: Option<u64>,
}

impl Resume {
    /// The saved position, when it is of `boot_id`.
    pub fn load(file: &Path, boot_id: String) -> Self {
        let text = if file.as_os_str().is_empty() {
            None
        } else {
            crate::bounded_read::read_to_string(file, 256).ok()
        };
        let last = text.as_deref().and_then(|t| {
            let (b, s) = t.trim().split_once(' ')?;
            (!boot_id.is_empty() && b == boot_id)
                .then(|| s.trim().parse().ok())
                .flatten()
        });
        let other_boot = text.is_some() && last.is_none();
        if other_boot {
            tracing::info!(
                file = %file.display(),
                "kmsg: the saved position is of another boot; reading this boot's log from its start"
            );
        }
        Self {
            file: file.to_path_buf(),
            boot_id,
            loaded: last.is_some() || other_boot,
            last,
            saved: last,
        }
    }

    /// Whether to skip what the buffer holds now: only without any saved
    /// position (a first start) and when `first_start = "end"`.
    pub fn start_at_end(&self, end_first: bool) -> bool {
        end_first && !self.loaded
    }

    /// Takes a record's sequence number.
    pub fn advance(&mut self, seq: u64) -> Step {
        match self.last {
            Some(l) if seq <= l => Step::Old,
            Some(l) => {
                self.last = Some(seq);
                Step::New { lost: seq - l - 1 }
            }
            None => {
                self.last = Some(seq);
                Step::New { lost: 0 }
            }
        }
    }

    /// Writes the position when it moved (atomically: a temporary file
    /// renamed over the old one). A failure is logged and retried next
    /// window; the reading goes on.
    pub fn save(&mut self) {
        if self.file.as_os_str().is_empty() || self.last == self.saved {
            return;
        }
        let Some(last) = self.last else { return };
        let tmp = self.file.with_extension("tmp");
        let res = self
            .file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, format!("{} {last}\n", self.boot_id)))
            .and_then(|()| std::fs::rename(&tmp, &self.file));
        match res {
            Ok(()) => self.saved = Some(last),
            Err(e) => {
                metrics::counter!(crate::kmsg::KMSG_DROPPED.name, "reason" => "state_write")
                    .increment(1);
                tracing::warn!(file = %self.file.display(), error = %e,
                    "kmsg: cannot save the position read; a restart may report these records again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_in_the_same_boot_only() {
        let dir = std::env::temp_dir().join(format!("faultline-kmsg-state-{}", std::process::id()));
        let f = dir.join("sub/kmsg.state");
        let mut r = Resume::load(&f, "boot-a".into());
        assert!(r.start_at_end(true), "a first start follows first_start");
        assert_eq!(r.advance(10), Step::New { lost: 0 });
        assert_eq!(r.advance(13), Step::New { lost: 2 });
        r.save();
        let mut again = Resume::load(&f, "boot-a".into());
        assert!(
            !again.start_at_end(true),
            "a saved position reads the buffer"
        );
        assert_eq!(again.advance(13), Step::Old);
        assert_eq!(again.advance(14), Step::New { lost: 0 });
        let mut other = Resume::load(&f, "boot-b".into());
        assert!(!other.start_at_end(true), "another boot: from the start");
        assert_eq!(other.advance(1), Step::New { lost: 0 });
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! tracefs access: mounting, tracepoint existence and field offsets from
//! `events/<category>/<name>/format`.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

/// Where tracefs normally lives.
pub const DEFAULT_ROOT: &str = "/sys/kernel/tracing";

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted at {root} and mounting it failed ({source}); run \
         `mount -t tracefs nodev {root}` as root"
    )]
    NotMounted {
        root: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("tracepoint {category}/{name} not found in {root}/events (kernel lacks it)")]
    MissingTracepoint {
        root: PathBuf,
        category: String,
        name: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("tracepoint {category}/{name} has no field `{field}` in its format")]
    MissingField {
        category: String,
        name: String,
        field: String,
    },
}

/// A tracefs mount point.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

/// One field of a tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

impl Tracefs {
    /// Uses `root` as is (tests point this at a fake tree).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The system tracefs, mounting it at [`DEFAULT_ROOT`] if it is not mounted yet.
    pub fn system() -> Result<Self, TracefsError> {
        let root = PathBuf::from(DEFAULT_ROOT);
        if !root.join("events").is_dir() {
            mount_tracefs(&root).map_err(|source| TracefsError::NotMounted {
                root: root.clone(),
                source,
            })?;
        }
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn has_tracepoint(&self, category: &str, name: &str) -> bool {
        self.root
            .join("events")
            .join(category)
            .join(name)
            .join("format")
            .is_file()
    }

    /// Reads the `format` file of a tracepoint and returns the named field.
    pub fn field(&self, category: &str, name: &str, field: &str) -> Result<Field, TracefsError> {
        let fields = self.fields(category, name)?;
        fields
            .into_iter()
            .find(|(n, _)| n == field)
            .map(|(_, f)| f)
            .ok_or_else(|| TracefsError::MissingField {
                category: category.into(),
                name: name.into(),
                field: field.into(),
            })
    }

    /// All fields of a tracepoint, in format order.
    pub fn fields(&self, category: &str, name: &str) -> Result<Vec<(String, Field)>, TracefsError> {
        if !self.has_tracepoint(category, name) {
            return Err(TracefsError::MissingTracepoint {
                root: self.root.clone(),
                category: category.into(),
                name: name.into(),
            });
        }
        let path = self
            .root
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let text = fs::read_to_string(&path).map_err(|source| TracefsError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(parse_format(&text))
    }
}

/// Parses the `field:` lines of a tracepoint format file.
///
/// A line looks like `\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;`.
/// The field name is the last identifier of the declaration, without any `[N]` suffix.
pub fn parse_format(text: &str) -> Vec<(String, Field)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';').map(str::trim) {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse::<u32>().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse::<u32>().ok();
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            continue;
        };
        let last = decl.split_whitespace().last().unwrap_or("");
        let name = last.split('[').next().unwrap_or("").trim_start_matches('*');
        if !name.is_empty() {
            out.push((name.to_string(), Field { offset, size }));
        }
    }
    out
}

fn mount_tracefs(root: &Path) -> io::Result<()> {
    use std::ffi::CString;
    let target = CString::new(root.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let fstype = c"tracefs";
    let source = c"nodev";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXEC_FORMAT: &str = "name: sched_process_exec
ID: 316
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;
\tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:0;

print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid
";

    #[test]
    fn parses_fields_with_data_loc_and_arrays() {
        let f = parse_format(EXEC_FORMAT);
        let get = |n: &str| f.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("filename"), Some(Field { offset: 8, size: 4 }));
        assert_eq!(
            get("old_pid"),
            Some(Field {
                offset: 16,
                size: 4
            })
        );
        assert_eq!(
            get("rwbs"),
            Some(Field {
                offset: 34,
                size: 10
            })
        );
        assert_eq!(get("common_pid"), Some(Field { offset: 4, size: 4 }));
        assert_eq!(f.len(), 8);
    }

    #[test]
    fn fake_tree_lookup_and_missing() {
        let dir = std::env::temp_dir().join(format!("faultline-tracefs-{}", std::process::id()));
        let ev = dir.join("events/sched/sched_process_exec");
        fs::create_dir_all(&ev).unwrap();
        fs::write(ev.join("format"), EXEC_FORMAT).unwrap();
        let t = Tracefs::at(&dir);
        assert!(t.has_tracepoint("sched", "sched_process_exec"));
        assert_eq!(
            t.field("sched", "sched_process_exec", "pid").unwrap(),
            Field {
                offset: 12,
                size: 4
            }
        );
        let err = t.field("block", "block_rq_issue", "dev").unwrap_err();
        assert!(
            err.to_string().contains("block/block_rq_issue not found"),
            "{err}"
        );
        let err = t.field("sched", "sched_process_exec", "nope").unwrap_err();
        assert!(err.to_string().contains("no field `nope`"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! Reading small files that come from outside (sysfs trees, config files,
//! spool files, certificates, keys, token files, the fabric topology)
//! without trusting them: only regular files are read (a FIFO would block
//! forever, a character device such as `/dev/zero` never ends), the open
//! never blocks, and at most `max` bytes are accepted. The one helper both
//! the collector and the correlator use.
use std::{
    fs,
    io::{self, Read as _},
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

/// Upper bound for one sysfs attribute (the kernel's is a page).
pub const SYSFS_MAX: u64 = 64 << 10;
/// Upper bound for a configuration file.
pub const CONFIG_MAX: u64 = 4 << 20;
/// Upper bound for a PEM file (a certificate chain, a CA bundle, a key).
pub const PEM_MAX: u64 = 1 << 20;
/// Upper bound for a token file (`--token-file`, `stream.token_file`).
pub const TOKEN_FILE_MAX: u64 = 4 << 20;

/// Reads `path` if it is a regular file of at most `max` bytes.
pub fn read(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut buf = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn devices_fifos_and_oversized_files_are_refused_quickly() {
        let dir = std::env::temp_dir().join(format!("faultline-bounded-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let e = read(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&fifo, 1024).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let big = dir.join("big");
        fs::write(&big, vec![b'1'; 2000]).unwrap();
        assert_eq!(
            read(&big, 1999).unwrap_err().to_string(),
            "larger than 1999 bytes"
        );
        assert_eq!(read(&big, 2000).unwrap().len(), 2000);
        fs::write(&big, b"\xff\n").unwrap();
        assert_eq!(
            read_to_string(&big, 10).unwrap_err().to_string(),
            "not UTF-8 text"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! RDMA device and port facts through the verbs API (rdma-sys types), with
//! `libibverbs.so.1` loaded at run time: a host without the verbs library or
//! without devices says so once and the collector keeps working (linking it
//! would make the binary fail to start there).
//!
//! Also: a blocking listener per device for async events (port active/error,
//! LID/GID change, device fatal), each becoming a timeline event.
use std::{
    ffi::{c_char, c_int, c_void, CStr, CString},
    path::Path,
    sync::mpsc,
};

use rdma_sys::{ibv_async_event, ibv_context, ibv_device, ibv_port_attr};

#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error(
        "RDMA inactive: cannot load {lib} ({reason}); install rdma-core's libibverbs1 on RDMA hosts"
    )]
    NoLibrary { lib: String, reason: String },
    #[error("RDMA inactive: {lib} lacks {symbol}")]
    MissingSymbol { lib: String, symbol: &'static str },
}

/// Why the provider's data-path functions could not be located.
#[derive(Debug, thiserror::Error)]
pub enum DataPathError {
    #[error(transparent)]
    Load(#[from] RdmaError),
    #[error("no RDMA device to open a context on")]
    NoDevice,
    #[error("ibv_open_device failed")]
    OpenDevice,
    #[error("reading /proc/self/maps: {0}")]
    Maps(#[source] std::io::Error),
    #[error("provider has no {0} in its ops table")]
    NotInOps(&'static str),
    #[error("{name} at {addr:#x} is not in a mapped file")]
    NotMapped { name: &'static str, addr: u64 },
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
type GetAsyncEvent = unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
type AckAsyncEvent = unsafe extern "C" fn(*mut ibv_async_event);

/// The verbs functions faultline uses, resolved from the library at run time.
pub struct Verbs {
    handle: *mut c_void,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    query_port: QueryPort,
    get_async_event: GetAsyncEvent,
    ack_async_event: AckAsyncEvent,
}

// SAFETY: the function pointers and the dlopen handle may be used from any
// thread; libibverbs is thread-safe.
unsafe impl Send for Verbs {}
unsafe impl Sync for Verbs {}

/// Port facts as `ibv_query_port` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub device: String,
    pub port: u8,
    /// `ibv_port_state` (4 = ACTIVE).
    pub state: u32,
    pub phys_state: u8,
    /// `ibv_mtu` enum of the active MTU (1 = 256 … 5 = 4096).
    pub active_mtu: u32,
    pub active_width: u8,
    pub active_speed: u8,
    pub lid: u16,
    /// 1 = InfiniBand, 2 = Ethernet (RoCE).
    pub link_layer: u8,
}

/// An async event from a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    pub device: String,
    /// `ibv_event_type` value.
    pub event_type: u32,
    /// Port number for port events, otherwise 0.
    pub port: u32,
    pub name: &'static str,
    /// When the listener received it.
    pub at: std::time::SystemTime,
}

/// Names of `enum ibv_event_type`.
pub fn event_name(t: u32) -> &'static str {
    match t {
        0 => "IBV_EVENT_CQ_ERR",
        1 => "IBV_EVENT_QP_FATAL",
        2 => "IBV_EVENT_QP_REQ_ERR",
        3 => "IBV_EVENT_QP_ACCESS_ERR",
        4 => "IBV_EVENT_COMM_EST",
        5 => "IBV_EVENT_SQ_DRAINED",
        6 => "IBV_EVENT_PATH_MIG",
        7 => "IBV_EVENT_PATH_MIG_ERR",
        8 => "IBV_EVENT_DEVICE_FATAL",
        9 => "IBV_EVENT_PORT_ACTIVE",
        10 => "IBV_EVENT_PORT_ERR",
        11 => "IBV_EVENT_LID_CHANGE",
        12 => "IBV_EVENT_PKEY_CHANGE",
        13 => "IBV_EVENT_SM_CHANGE",
        14 => "IBV_EVENT_SRQ_ERR",
        15 => "IBV_EVENT_SRQ_LIMIT_REACHED",
        16 => "IBV_EVENT_QP_LAST_WQE_REACHED",
        17 => "IBV_EVENT_CLIENT_REREGISTER",
        18 => "IBV_EVENT_GID_CHANGE",
        19 => "IBV_EVENT_WQ_FATAL",
        _ => "IBV_EVENT_UNKNOWN",
    }
}

/// Port events carry a port number in the event's union.
fn is_port_event(t: u32) -> bool {
    matches!(t, 9 | 10 | 11 | 12 | 13 | 17 | 18)
}

impl Verbs {
    /// Loads the system `libibverbs.so.1`.
    pub fn load() -> Result<Self, RdmaError> {
        Self::load_from(Path::new("libibverbs.so.1"))
    }

    pub fn load_from(lib: &Path) -> Result<Self, RdmaError> {
        let name = lib.display().to_string();
        let c =
            CString::new(lib.as_os_str().as_encoded_bytes()).map_err(|e| RdmaError::NoLibrary {
                lib: name.clone(),
                reason: e.to_string(),
            })?;
        // SAFETY: valid C string.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns a valid string or null.
            let reason = unsafe {
                let e = libc::dlerror();
                if e.is_null() {
                    "unknown error".to_string()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(RdmaError::NoLibrary { lib: name, reason });
        }
        let sym = |s: &'static CStr| -> Result<*mut c_void, RdmaError> {
            // SAFETY: valid handle and NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, s.as_ptr()) };
            if p.is_null() {
                Err(RdmaError::MissingSymbol {
                    lib: name.clone(),
                    symbol: s.to_str().unwrap_or("?"),
                })
            } else {
                Ok(p)
            }
        };
        // SAFETY (all transmutes): each symbol has the C signature of its type alias
        // (libibverbs' exported ABI).
        unsafe {
            Ok(Self {
                get_device_list: std::mem::transmute::<*mut c_void, GetDeviceList>(sym(
                    c"ibv_get_device_list",
                )?),
                free_device_list: std::mem::transmute::<*mut c_void, FreeDeviceList>(sym(
                    c"ibv_free_device_list",
                )?),
                get_device_name: std::mem::transmute::<*mut c_void, GetDeviceName>(sym(
                    c"ibv_get_device_name",
                )?),
                open_device: std::mem::transmute::<*mut c_void, OpenDevice>(sym(
                    c"ibv_open_device",
                )?),
                close_device: std::mem::transmute::<*mut c_void, CloseDevice>(sym(
                    c"ibv_close_device",
                )?),
                query_port: std::mem::transmute::<*mut c_void, QueryPort>(sym(c"ibv_query_port")?),
                get_async_event: std::mem::transmute::<*mut c_void, GetAsyncEvent>(sym(
                    c"ibv_get_async_event",
                )?),
                ack_async_event: std::mem::transmute::<*mut c_void, AckAsyncEvent>(sym(
                    c"ibv_ack_async_event",
                )?),
                handle,
            })
        }
    }

    /// Names of the RDMA devices (empty on a host without any).
    pub fn device_names(&self) -> Vec<String> {
        self.with_devices(|devs| {
            devs.iter()
                .map(|&d| {
                    // SAFETY: device from the list; the name is a C string owned by it.
                    let n = unsafe { (self.get_device_name)(d) };
                    if n.is_null() {
                        String::new()
                    } else {
                        // SAFETY: non-null C string.
                        unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
                    }
                })
                .collect()
        })
    }

    fn with_devices<T>(&self, f: impl FnOnce(&[*mut ibv_device]) -> T) -> T {
        let mut n: c_int = 0;
        // SAFETY: out-pointer to a c_int.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: list from ibv_get_device_list.
                unsafe { (self.free_device_list)(list) };
            }
            return f(&[]);
        }
        // SAFETY: the list holds n device pointers.
        let devs = unsafe { std::slice::from_raw_parts(list, n as usize) }.to_vec();
        let r = f(&devs);
        // SAFETY: list from ibv_get_device_list, freed once.
        unsafe { (self.free_device_list)(list) };
        r
    }

    /// Queries ports 1..=`max_ports` of every device (stops at the first port
    /// that does not exist).
    pub fn ports(&self, max_ports: u8) -> Vec<PortInfo> {
        let names = self.device_names();
        self.with_devices(|devs| {
            let mut out = Vec::new();
            for (&d, name) in devs.iter().zip(names) {
                // SAFETY: device pointer from the list.
                let ctx = unsafe { (self.open_device)(d) };
                if ctx.is_null() {
                    continue;
                }
                for port in 1..=max_ports {
                    // SAFETY: zeroed attr is a valid initial value; the compat
                    // query fills the prefix it knows.
                    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
                    // SAFETY: open context, valid attr pointer.
                    if unsafe { (self.query_port)(ctx, port, &mut attr) } != 0 {
                        break;
                    }
                    out.push(PortInfo {
                        device: name.clone(),
                        port,
                        state: attr.state,
                        phys_state: attr.phys_state,
                        active_mtu: attr.active_mtu,
                        active_width: attr.active_width,
                        active_speed: attr.active_speed,
                        lid: attr.lid,
                        link_layer: attr.link_layer,
                    });
                }
                // SAFETY: context opened above.
                unsafe { (self.close_device)(ctx) };
            }
            out
        })
    }

    /// Starts one blocking thread per device that forwards its async events.
    /// Returns how many devices are being listened to.
    pub fn listen_async_events(self: &std::sync::Arc<Self>, tx: mpsc::Sender<AsyncEvent>) -> usize {
        let names = self.device_names();
        self.with_devices(|devs| {
            let mut n = 0;
            for (&d, name) in devs.iter().zip(names) {
                // SAFETY: device pointer from the list.
                let ctx = unsafe { (self.open_device)(d) };
                if ctx.is_null() {
                    continue;
                }
                let ctx_addr = ctx as usize;
                let verbs = self.clone();
                let tx = tx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("ibv-async-{name}"))
                    .spawn(move || {
                        let ctx = ctx_addr as *mut ibv_context;
                        loop {
                            // SAFETY: zeroed event is a valid out-parameter.
                            let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
                            // SAFETY: context stays open for the thread's life.
                            if unsafe { (verbs.get_async_event)(ctx, &mut ev) } != 0 {
                                return;
                            }
                            // Read the enum field as the integer the C side wrote:
                            // an unknown value must not become a Rust enum.
                            // SAFETY: the field is a 4-byte C enum.
                            let t: u32 =
                                unsafe { std::ptr::read((&raw const ev.event_type).cast::<u32>()) };
                            // SAFETY: for port events the union holds the port number.
                            let port = if is_port_event(t) {
                                unsafe { ev.element.port_num as u32 }
                            } else {
                                0
                            };
                            // SAFETY: every event must be acknowledged once.
                            unsafe { (verbs.ack_async_event)(&mut ev) };
                            let e = AsyncEvent {
                                device: name.clone(),
                                event_type: t,
                                port,
                                name: event_name(t),
                                at: std::time::SystemTime::now(),
                            };
                            if tx.send(e).is_err() {
                                return;
                            }
                        }
                    });
                if spawned.is_ok() {
                    n += 1;
                }
            }
            n
        })
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // SAFETY: handle from dlopen; the library stays loaded while listener
        // threads hold an Arc, so this runs only after they are done.
        unsafe { libc::dlclose(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_one_clear_error() {
        let Err(e) = Verbs::load_from(Path::new("/nonexistent/libibverbs.so.1")) else {
            panic!("loaded a nonexistent library")
        };
        let e = e.to_string();
        assert!(
            e.starts_with("RDMA inactive: cannot load /nonexistent/libibverbs.so.1"),
            "{e}"
        );
    }

    #[test]
    fn event_names() {
        assert_eq!(event_name(10), "IBV_EVENT_PORT_ERR");
        assert_eq!(event_name(9), "IBV_EVENT_PORT_ACTIVE");
        assert_eq!(event_name(8), "IBV_EVENT_DEVICE_FATAL");
        assert_eq!(event_name(99), "IBV_EVENT_UNKNOWN");
        assert!(is_port_event(18) && !is_port_event(1));
    }

    #[test]
    fn system_library_without_devices_enumerates_nothing() {
        // libibverbs1 is installed with libibverbs-dev; this machine's kernel has no RDMA.
        let Ok(v) = Verbs::load() else { return };
        let names = v.device_names();
        if std::path::Path::new("/sys/class/infiniband").exists() {
            return;
        }
        assert!(names.is_empty(), "{names:?}");
        assert!(v.ports(2).is_empty());
    }
}

/// Where a provider data-path function lives: a file and an offset in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeLocation {
    pub path: std::path::PathBuf,
    pub file_offset: u64,
}

/// Maps a code address of this process to (file, file offset) through
/// `/proc/self/maps` (the text of `maps` is passed in for testing).
pub fn locate_address(maps: &str, addr: u64) -> Option<CodeLocation> {
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off), Some(_dev), Some(_ino), Some(path)) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(off)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        if (start..end).contains(&addr) && path.starts_with('/') {
            return Some(CodeLocation {
                path: path.into(),
                file_offset: addr - start + off,
            });
        }
    }
    None
}

impl Verbs {
    /// Resolves the provider's `poll_cq`, `post_send` and `post_recv` through
    /// the ops table of a context opened on the first device (providers such
    /// as rxe export no symbols). Needs an RDMA device.
    pub fn data_path_locations(&self) -> Result<[(&'static str, CodeLocation); 3], DataPathError> {
        self.with_devices(|devs| {
            let &d = devs.first().ok_or(DataPathError::NoDevice)?;
            // SAFETY: device pointer from the list.
            let ctx = unsafe { (self.open_device)(d) };
            if ctx.is_null() {
                return Err(DataPathError::OpenDevice);
            }
            // SAFETY: open context; the ops table is part of struct ibv_context.
            let ops = unsafe { &(*ctx).ops };
            let addrs = [
                ("poll_cq", ops.poll_cq.map(|f| f as usize as u64)),
                ("post_send", ops.post_send.map(|f| f as usize as u64)),
                ("post_recv", ops.post_recv.map(|f| f as usize as u64)),
            ];
            let maps = std::fs::read_to_string("/proc/self/maps").map_err(DataPathError::Maps);
            // SAFETY: context opened above.
            unsafe { (self.close_device)(ctx) };
            let maps = maps?;
            let find = |(name, a): (&'static str, Option<u64>)| {
                let addr = a.ok_or(DataPathError::NotInOps(name))?;
                locate_address(&maps, addr)
                    .map(|l| (name, l))
                    .ok_or(DataPathError::NotMapped { name, addr })
            };
            Ok([find(addrs[0])?, find(addrs[1])?, find(addrs[2])?])
        })
    }
}

#[cfg(test)]
mod locate_tests {
    use super::*;

    #[test]
    fn address_to_file_offset() {
        let maps = "\
7f1000000000-7f1000010000 r--p 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
7f1000010000-7f1000020000 r-xp 00010000 08:01 42 /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0 [stack]
";
        let l = locate_address(maps, 0x7f1000010123).unwrap();
        assert_eq!(l.file_offset, 0x10123);
        assert!(l.path.ends_with("librxe-rdmav34.so"));
        assert_eq!(locate_address(maps, 0x7ffd00000010), None);
        assert_eq!(locate_address(maps, 0x1), None);
    }
}

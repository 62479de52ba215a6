//! The Kubernetes pod, namespace and container each GPU is allocated to,
//! from the kubelet's pod-resources API (`v1.PodResourcesLister/List`,
//! gRPC on the kubelet's unix socket), as dcgm-exporter labels its series.
//! Where the socket is not mounted (not a Kubernetes node, or the DaemonSet
//! leaves it out) nothing is asked, and the GPU series keep the labels the
//! processes' cgroups give ([`crate::workload`]).
//!
//! A thread of its own asks the kubelet every [`REFRESH`] (the window loop
//! never waits on the kubelet) and keeps the latest answer for the GPU
//! source to read.
use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{mpsc, Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use proto::podresources::v1::{
    pod_resources_lister_client::PodResourcesListerClient, ListPodResourcesRequest,
    ListPodResourcesResponse,
};
use tonic::transport::{Endpoint, Uri};

use crate::{nvml::GpuInfo, workload::WorkloadLabels};

/// Where the kubelet serves the API.
pub const DEFAULT_SOCKET: &str = crate::nvml::DEFAULT_POD_RESOURCES_SOCKET;
/// How often the kubelet is asked.
pub const REFRESH: Duration = Duration::from_secs(5);
/// How long one `List` (connect included) may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest `List` answer decoded (bytes).
const MAX_RESPONSE: usize = 16 << 20;
/// At most this many device → container entries are kept.
const MAX_DEVICES: usize = 4096;
/// Consecutive failed `List`s after which the last answer is dropped (the
/// labels fall back to the cgroups').
const STALE_AFTER: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("kubelet pod-resources API on {path}: cannot connect ({reason}); is the kubelet running and the socket mounted read-write?")]
    Connect { path: String, reason: String },
    #[error("kubelet pod-resources API on {path}: List failed ({reason})")]
    List { path: String, reason: String },
}

/// A container a device is allocated to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRef {
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// NVIDIA devices → the container each is allocated to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuAllocations {
    by_device: BTreeMap<String, PodRef>,
}

impl GpuAllocations {
    /// The NVIDIA devices of a `List` answer (resources `nvidia.com/...`).
    /// Device ids are GPU UUIDs or indices, as NVIDIA's device plugin names
    /// them; a time-sliced replica (`<id>::<n>`) counts as its GPU. A
    /// device shared by several containers keeps the first listed.
    pub fn from_response(r: &ListPodResourcesResponse) -> Self {
        let mut by_device = BTreeMap::new();
        for pod in &r.pod_resources {
            for c in &pod.containers {
                for d in &c.devices {
                    if !d.resource_name.starts_with("nvidia.com/") {
                        continue;
                    }
                    for id in &d.device_ids {
                        if by_device.len() >= MAX_DEVICES {
                            break;
                        }
                        let id = id.split_once("::").map_or(id.as_str(), |(g, _)| g);
                        by_device.entry(id.to_string()).or_insert_with(|| PodRef {
                            pod: pod.name.clone(),
                            namespace: pod.namespace.clone(),
                            container: c.name.clone(),
                        });
                    }
                }
            }
        }
        Self { by_device }
    }

    /// The container GPU `g` is allocated to (by UUID, else by index).
    pub fn of(&self, g: &GpuInfo) -> Option<&PodRef> {
        self.by_device
            .get(&g.uuid)
            .or_else(|| self.by_device.get(&g.index.to_string()))
    }

    pub fn len(&self) -> usize {
        self.by_device.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_device.is_empty()
    }

    /// Puts the kubelet's pod, namespace and container on the workload
    /// labels of every GPU it allocated (keeping the job, rank and Slurm
    /// job the processes gave); other GPUs keep what the cgroups said.
    pub fn label(&self, gpus: &[GpuInfo], workloads: &mut BTreeMap<u32, (WorkloadLabels, usize)>) {
        for g in gpus {
            let Some(p) = self.of(g) else { continue };
            let (w, _) = workloads
                .entry(g.index)
                .or_insert_with(|| (WorkloadLabels::default(), 1));
            w.pod.clone_from(&p.pod);
            w.namespace.clone_from(&p.namespace);
            w.container.clone_from(&p.container);
        }
    }
}

/// Connects tonic's channel to a unix socket.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl tonic::codegen::Service<Uri> for UnixConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move {
            tokio::net::UnixStream::connect(path)
                .await
                .map(hyper_util::rt::TokioIo::new)
        })
    }
}

/// One `List` on the kubelet's socket, within `timeout`.
pub async fn list(socket: &Path, timeout: Duration) -> Result<GpuAllocations, PodResourcesError> {
    let path = socket.display().to_string();
    // The authority is not used on a unix socket.
    let channel = Endpoint::from_static("http://kubelet.sock")
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(UnixConnector(socket.to_path_buf()))
        .await
        .map_err(|e| PodResourcesError::Connect {
            path: path.clone(),
            reason: error_chain(&e),
        })?;
    let mut client = PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_RESPONSE);
    let r = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| PodResourcesError::List {
            path,
            reason: format!("{}: {}", s.code(), s.message()),
        })?;
    Ok(GpuAllocations::from_response(r.get_ref()))
}

/// An error with its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// The thread asking the kubelet; dropping it stops the thread.
pub struct Watcher {
    latest: Arc<Mutex<Arc<GpuAllocations>>>,
    stop: Option<mpsc::Sender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts asking the kubelet at `socket` every `every`, after a first
    /// answer (or failure) within [`LIST_TIMEOUT`], so the first window
    /// already has the kubelet's labels. `None` when the socket is not
    /// there: the GPU series keep the cgroups' labels.
    pub fn start(socket: &Path, every: Duration) -> Option<Self> {
        if !socket.exists() {
            tracing::info!(socket = %socket.display(), "no kubelet pod-resources socket: the GPU series' container, pod and namespace labels come from the processes' cgroups");
            return None;
        }
        let latest = Arc::new(Mutex::new(Arc::new(GpuAllocations::default())));
        let (stop, stopped) = mpsc::channel();
        let (first_tx, first_rx) = mpsc::sync_channel(1);
        let shared = latest.clone();
        let path = socket.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("pod-resources".into())
            .spawn(move || run(&path, every, &shared, &stopped, &first_tx));
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pod-resources thread: GPU labels from cgroups");
                return None;
            }
        };
        // The thread answers after its first List (bounded by the timeout).
        let _ = first_rx.recv_timeout(LIST_TIMEOUT + Duration::from_secs(1));
        Some(Self {
            latest,
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// The latest allocations (empty before the first answer or after
    /// [`STALE_AFTER`] failures in a row).
    pub fn current(&self) -> Arc<GpuAllocations> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!("the pod-resources thread panicked: GPU pod labels stopped updating before shutdown");
            }
        }
    }
}

fn run(
    socket: &Path,
    every: Duration,
    latest: &Mutex<Arc<GpuAllocations>>,
    stopped: &mpsc::Receiver<()>,
    first: &mpsc::SyncSender<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(error = %e, "pod-resources thread: no runtime; GPU labels from cgroups");
            let _ = first.try_send(());
            return;
        }
    };
    let mut failures = 0u32;
    loop {
        match rt.block_on(list(socket, LIST_TIMEOUT)) {
            Ok(a) => {
                if failures > 0 {
                    tracing::info!(socket = %socket.display(), "kubelet pod-resources API answers again");
                }
                failures = 0;
                metrics::gauge!(crate::metrics_catalog::POD_RESOURCES_GPUS.name)
                    .set(a.len() as f64);
                *latest.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(a);
            }
            Err(e) => {
                metrics::counter!(crate::metrics_catalog::POD_RESOURCES_ERRORS.name).increment(1);
                if failures == 0 {
                    tracing::warn!(error = %e, "kubelet pod-resources API unavailable; GPU container labels from cgroups until it answers");
                }
                failures = failures.saturating_add(1);
                if failures == STALE_AFTER {
                    *latest.lock().unwrap_or_else(PoisonError::into_inner) =
                        Arc::new(GpuAllocations::default());
                    metrics::gauge!(crate::metrics_catalog::POD_RESOURCES_GPUS.name).set(0.0);
                }
            }
        }
        let _ = first.try_send(());
        match stopped.recv_timeout(every) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Dropped (or told) to stop.
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use proto::podresources::v1::{ContainerDevices, ContainerResources, PodResources};

    use super::*;

    fn gpu(index: u32, uuid: &str) -> GpuInfo {
        GpuInfo {
            index,
            uuid: uuid.into(),
            name: String::new(),
            pci_bus_id: String::new(),
            minor: Some(index),
        }
    }

    #[test]
    fn nvidia_devices_map_to_their_container_by_uuid_index_or_replica() {
        let r = ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "trainer-0".into(),
                    namespace: "ml".into(),
                    containers: vec![
                        ContainerResources {
                            name: "sidecar".into(),
                            devices: vec![ContainerDevices {
                                resource_name: "example.com/fpga".into(),
                                device_ids: vec!["GPU-a".into()],
                            }],
                        },
                        ContainerResources {
                            name: "pytorch".into(),
                            devices: vec![ContainerDevices {
                                resource_name: "nvidia.com/gpu".into(),
                                device_ids: vec!["GPU-a".into(), "GPU-b::3".into()],
                            }],
                        },
                    ],
                },
                PodResources {
                    name: "infer".into(),
                    namespace: "serving".into(),
                    containers: vec![ContainerResources {
                        name: "triton".into(),
                        devices: vec![ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: vec!["2".into(), "GPU-a".into()],
                        }],
                    }],
                },
            ],
        };
        let a = GpuAllocations::from_response(&r);
        assert_eq!(a.len(), 3);
        let of = |g: GpuInfo| {
            a.of(&g)
                .map(|p| (p.pod.clone(), p.namespace.clone(), p.container.clone()))
        };
        let t = |p: &str, n: &str, c: &str| Some((p.into(), n.into(), c.into()));
        // Not the fpga sidecar; the first container listed keeps a shared GPU.
        assert_eq!(of(gpu(0, "GPU-a")), t("trainer-0", "ml", "pytorch"));
        assert_eq!(of(gpu(1, "GPU-b")), t("trainer-0", "ml", "pytorch"));
        assert_eq!(of(gpu(2, "GPU-c")), t("infer", "serving", "triton"));
        assert_eq!(of(gpu(3, "GPU-d")), None);

        // The kubelet's names replace the cgroup's container id; the job stays.
        let mut w = BTreeMap::from([(
            0,
            (
                WorkloadLabels {
                    container: "4f6c0a1b2c3d".into(),
                    pod: "5d1c-uid".into(),
                    job: "run-7".into(),
                    ..WorkloadLabels::default()
                },
                1,
            ),
        )]);
        a.label(&[gpu(0, "GPU-a"), gpu(2, "GPU-c"), gpu(3, "GPU-d")], &mut w);
        assert_eq!(
            w[&0].0.pairs(),
            [
                ("container", "pytorch"),
                ("namespace", "ml"),
                ("pod", "trainer-0"),
                ("hpc_job", "run-7")
            ]
        );
        assert_eq!(w[&2].0.container, "triton");
        assert!(!w.contains_key(&3));
    }
}

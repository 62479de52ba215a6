//! The `container`, `pod` and `namespace` labels of the GPU series come from
//! the kubelet's pod-resources API, as dcgm-exporter's do: a fake kubelet
//! serves `v1.PodResourcesLister/List` on a unix socket in a temp dir, the
//! collector's watcher asks it, and the dcgm-exporter series of the NVML
//! stand-in's GPUs carry the Kubernetes container name instead of the
//! cgroup's container-id prefix. A GPU the kubelet does not list keeps the
//! cgroup's labels; a socket that is not there means no watcher; a kubelet
//! that goes away stops labelling after a few failed asks.
use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use collector::{nvml, nvml::podresources, workload::WorkloadLabels};
use proto::podresources::v1::{
    pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer},
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};
use tonic::{Request, Response, Status};

/// The kubelet of a node: GPU 0 (by UUID) to `ml/trainer-0` container
/// `pytorch`, GPU 2 (by index, NVIDIA's index strategy) to
/// `serving/infer-7` container `triton`, an fpga to a sidecar.
struct FakeKubelet {
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let dev = |r: &str, ids: &[&str]| ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| (*s).to_string()).collect(),
        };
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: vec![
                PodResources {
                    name: "trainer-0".into(),
                    namespace: "ml".into(),
                    containers: vec![
                        ContainerResources {
                            name: "sidecar".into(),
                            devices: vec![dev("example.com/fpga", &["fpga0"])],
                        },
                        ContainerResources {
                            name: "pytorch".into(),
                            devices: vec![dev(
                                "nvidia.com/gpu",
                                &["GPU-fa0171e0-0000-4000-8000-000000000000"],
                            )],
                        },
                    ],
                },
                PodResources {
                    name: "infer-7".into(),
                    namespace: "serving".into(),
                    containers: vec![ContainerResources {
                        name: "triton".into(),
                        devices: vec![dev("nvidia.com/gpu", &["2"])],
                    }],
                },
            ],
        }))
    }
}

/// Serves the fake kubelet on `socket` until the returned runtime is dropped.
fn serve(socket: &Path, calls: Arc<AtomicUsize>) -> tokio::runtime::Runtime {
    let rt = tests::runtime();
    let listener = rt
        .block_on(async { tokio::net::UnixListener::bind(socket) })
        .expect("bind the kubelet socket");
    rt.spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .serve_with_incoming(
                PodResourcesListerServer::new(FakeKubelet { calls }),
                incoming,
            )
            .await;
    });
    rt
}

#[test]
fn gpu_series_carry_the_kubelet_s_container_names() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::scratch_dir("podres");
    let socket = dir.join("kubelet.sock");
    // Read by the stand-in at nvmlInit; set before any thread of this test starts.
    std::env::set_var("FAKE_NVML_GPUS", "3");
    std::env::remove_var("FAKE_NVML_SCENARIO");

    assert!(
        podresources::Watcher::start(&socket, Duration::from_millis(50)).is_none(),
        "no socket, no watcher"
    );

    let calls = Arc::new(AtomicUsize::new(0));
    let kubelet = serve(&socket, calls.clone());

    // One List, straight.
    let a = kubelet
        .block_on(podresources::list(&socket, podresources::LIST_TIMEOUT))
        .expect("List");
    assert_eq!(a.len(), 2, "the two NVIDIA devices, not the fpga: {a:?}");

    let mut src = nvml::NvmlSource::open(Some(&tests::fake_nvml())).expect("the stand-in");
    let (samples, _) = src.sample();
    let gpus = src.gpus().to_vec();
    let watcher = podresources::Watcher::start(&socket, Duration::from_millis(50))
        .expect("a watcher on the mounted socket");
    // The first answer is in before `start` returns.
    let current = watcher.current();
    assert_eq!(current.len(), 2);

    // GPU 0's process was seen in a container whose cgroup gives only the
    // container id; GPU 1 runs a Slurm job; the kubelet names GPU 0's and
    // GPU 2's containers.
    let mut workloads = BTreeMap::from([
        (
            0,
            (
                WorkloadLabels {
                    container: "4f6c0a1b2c3d".into(),
                    pod: "7d3e2f10-uid".into(),
                    job: "7d3e2f10-uid".into(),
                    ..WorkloadLabels::default()
                },
                1,
            ),
        ),
        (
            1,
            (
                WorkloadLabels {
                    hpc_job: "4711".into(),
                    ..WorkloadLabels::default()
                },
                1,
            ),
        ),
    ]);
    current.label(&gpus, &mut workloads);
    let ex = nvml::Export {
        hostname: "n17",
        driver_version: "550.54.15",
        dcgm_compat: true,
        workloads: &workloads,
        ..nvml::Export::default()
    };
    let text = nvml::render_with(&gpus, &samples, &BTreeMap::new(), &ex);
    let line = |gpu: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("DCGM_FI_DEV_GPU_TEMP{{gpu=\"{gpu}\"")))
            .unwrap_or_else(|| panic!("no GPU {gpu} temperature:\n{text}"))
            .to_string()
    };
    let base = |g: u32| {
        format!(
            "gpu=\"{g}\",UUID=\"GPU-fa0171e0-0000-4000-8000-00000000000{g}\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{g}\",modelName=\"Fake H100 80GB HBM3\",Hostname=\"n17\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"",
            0x18 + g
        )
    };
    assert_eq!(
        line("0"),
        format!(
            "DCGM_FI_DEV_GPU_TEMP{{{},container=\"pytorch\",namespace=\"ml\",pod=\"trainer-0\"}} 45",
            base(0)
        )
    );
    assert_eq!(
        line("1"),
        format!("DCGM_FI_DEV_GPU_TEMP{{{},hpc_job=\"4711\"}} 45", base(1)),
        "not allocated by the kubelet: the cgroups' labels"
    );
    assert_eq!(
        line("2"),
        format!(
            "DCGM_FI_DEV_GPU_TEMP{{{},container=\"triton\",namespace=\"serving\",pod=\"infer-7\"}} 45",
            base(2)
        )
    );
    // faultline's own series carry the same names, with the job kept.
    assert!(
        text.lines().any(
            |l| l.starts_with("faultline_gpu_temperature_celsius{gpu=\"0\"")
                && l.contains(
                    "container=\"pytorch\",namespace=\"ml\",pod=\"trainer-0\",hpc_job=\"7d3e2f10-uid\""
                )
        ),
        "{text}"
    );

    // It keeps asking, every 50 ms here.
    let t = Instant::now();
    while calls.load(Ordering::SeqCst) < 4 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the watcher stopped asking"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // The kubelet goes away: after three failed asks the labels fall back.
    drop(kubelet);
    std::fs::remove_file(&socket).unwrap();
    let t = Instant::now();
    while !watcher.current().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "allocations kept after the kubelet left"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(watcher);
    std::fs::remove_dir_all(&dir).unwrap();
}

//! Config parsing, defaults, validation and its messages.
use std::time::Duration;

use super::*;
use crate::probes::CodeLoc;

#[test]
fn defaults_and_a_full_file() {
    let c = FileConfig::parse("", "x").unwrap();
    assert_eq!(c, FileConfig::default());
    assert_eq!(c.collector.metrics_addr, "127.0.0.1:9477");
    let c = FileConfig::parse(
        r#"
[collector]
window_secs = 0.5
metrics_addr = "0.0.0.0:9500"
[block]
sample_every = 100
[cuda]
library = "/opt/nvidia/libcuda.so.1"
events_per_sec = 1000
[verbs]
provider = { path = "/usr/lib/libmlx5.so.1", poll_cq = "0x1a2b", post_send = "mlx5_post_send", post_recv = "mlx5_post_recv" }
[nvml]
enabled = false
[otlp]
http_enabled = false
grpc_addr = "0.0.0.0:14317"
max_body_bytes = 1048576
[otlp.names]
"megatron.iteration_time_ms" = "step_seconds"
"#,
        "f.toml",
    )
    .unwrap();
    assert_eq!(c.collector.window_secs, 0.5);
    assert_eq!(c.block.sample_every, 100);
    assert!(!c.nvml.enabled);
    assert!(c.otlp.enabled && c.otlp.grpc_enabled && !c.otlp.http_enabled);
    assert_eq!(c.otlp.grpc_addr, "0.0.0.0:14317");
    assert_eq!(c.otlp.max_body_bytes, 1 << 20);
    assert_eq!(c.otlp.names["megatron.iteration_time_ms"], "step_seconds");
    let t = c.verbs.provider.unwrap().target().unwrap();
    assert_eq!(t.poll_cq, CodeLoc::Offset(0x1a2b));
    assert_eq!(t.post_send, CodeLoc::Symbol("mlx5_post_send".into()));
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_on_one_line() {
    let e = FileConfig::parse(
        "[cuda]\nenabled = true\nlibary = \"/x\"\n",
        "/etc/faultline.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("config error: /etc/faultline.toml line 3, column 1: unknown field `libary`"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let e = FileConfig::parse("[gpu]\n", "f").unwrap_err().to_string();
    assert!(e.contains("unknown field `gpu`"), "{e}");
    let e = FileConfig::parse("[collector]\nwindow_secs = 0\n", "f")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "config error: collector.window_secs: must be a number of seconds in [0.01, 3600], got 0"
    );
    let e = FileConfig::parse("[collector]\nmetrics_addr = \"localhost\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config error: collector.metrics_addr: \"localhost\" is not HOST:PORT"),
        "{e}"
    );
    let e = FileConfig::parse("[collector]\nwindow_secs = \"fast\"\n", "f")
        .unwrap_err()
        .to_string();
    // The value is the file's text: hidden (a `--config` aimed at a secret).
    assert!(
        e.starts_with(
            "config error: f line 2, column 15: invalid type: string \"…\", expected f64"
        ),
        "{e}"
    );
    let e = FileConfig::parse("[otlp]\ngrpc_addr = \"4317\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config error: otlp.grpc_addr: \"4317\" is not HOST:PORT"),
        "{e}"
    );
    let e = FileConfig::parse("[otlp.names]\n\"my.step\" = \"steps\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config error: otlp.names: \"my.step\" maps to unknown signal \"steps\""),
        "{e}"
    );
    let e = FileConfig::parse("[verbs]\nprovider = { path = \"/p\", poll_cq = \"0xZZ\", post_send = \"a\", post_recv = \"b\" }\n", "f").unwrap_err().to_string();
    assert!(
        e.starts_with("config error: verbs.provider: bad offset 0xZZ"),
        "{e}"
    );
}

#[test]
fn values_that_would_panic_or_spin_are_refused() {
    for (text, got) in [
        ("1e-300", "1e-300"),
        ("nan", "NaN"),
        ("inf", "inf"),
        ("1e20", "1e20"),
        ("0.001", "0.001"),
    ] {
        let e = FileConfig::parse(&format!("[collector]\nwindow_secs = {text}\n"), "f")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("config error: collector.window_secs: must be a number of seconds in [0.01, 3600], got {got}")
        );
    }
    assert_eq!(
        duration_arg("1e20").unwrap_err().to_string(),
        "must be a number of seconds in [0, 315360000], got 1e20"
    );
    assert_eq!(
        duration_arg("nan").unwrap_err().to_string(),
        "must be a number of seconds in [0, 315360000], got NaN"
    );
    assert_eq!(
        duration_arg("-1").unwrap_err().to_string(),
        "must be a number of seconds in [0, 315360000], got -1"
    );
    assert_eq!(
        duration_arg("x").unwrap_err().to_string(),
        "\"x\" is not a number of seconds"
    );
    assert_eq!(duration_arg("1.5"), Ok(Duration::from_millis(1500)));
    assert_eq!(duration_arg("0"), Ok(Duration::ZERO));
    for bad in [
        "http://",
        "https://",
        "ftp://h:1",
        "127.0.0.1:50051",
        "http://:50051",
        "http:// h",
    ] {
        let e = FileConfig::parse(&format!("[stream]\nendpoint = \"{bad}\"\n"), "f")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("config error: stream.endpoint: "),
            "{bad}: {e}"
        );
        assert!(
            e.ends_with("use a URL like http://127.0.0.1:50051"),
            "{bad}: {e}"
        );
    }
    for good in ["http://127.0.0.1:50051", "http://[::1]:1"] {
        FileConfig::parse(&format!("[stream]\nendpoint = \"{good}\"\n"), "f").unwrap();
    }
    let c = FileConfig::parse("[collector]\nwindow_secs = 0.01\n", "f").unwrap();
    assert_eq!(c.collector.window(), Duration::from_millis(10));
}

/// `--metrics-addr :9477` was rejected; node_exporter accepts `:9100`.
#[test]
fn port_only_means_every_interface() {
    use std::net::SocketAddr;
    assert_eq!(
        parse_listen_addr(":9477").ok(),
        Some(SocketAddr::from(([0, 0, 0, 0], 9477)))
    );
    assert_eq!(
        parse_listen_addr("127.0.0.1:9477").ok(),
        Some(SocketAddr::from(([127, 0, 0, 1], 9477)))
    );
    assert!(parse_listen_addr("[::1]:9477").is_ok());
    assert!(parse_listen_addr(":").is_err());
    assert!(parse_listen_addr("9477").is_err());
    let mut c = FileConfig::default();
    c.collector.metrics_addr = ":9477".into();
    assert!(c.validate().is_ok());
}

/// The `[ib]` and `[otlp]` checks live in their modules; through the file
/// their messages still name the key after `config error:`.
#[test]
fn section_errors_keep_their_key_and_text() {
    let e = FileConfig::parse(
        "[ib]\ndevice_include = \"a\"\ndevice_exclude = \"b\"\n",
        "f",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "config error: ib.device_include: ib.device_include and ib.device_exclude are mutually exclusive (as node_exporter's --collector.infiniband.device-include/-exclude); set one");
    let e = FileConfig::parse("[ib]\ndevice_exclude = \"mlx5_[0\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config error: ib.device_exclude: \"mlx5_[0\" is not a regular expression: "),
        "{e}"
    );
    let e = FileConfig::parse("[otlp]\nmax_body_bytes = 10\n", "f")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "config error: otlp.max_body_bytes: must be at least 1024, got 10"
    );
    let e = FileConfig::parse("[otlp.limits]\nmax_connections = 0\n", "f")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config error: otlp.limits: max_connections: "),
        "{e}"
    );
    let e = FileConfig::parse("[nccl]\nrescan_s = -1\n", "f")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "config error: nccl.rescan_s: must be a number of seconds in [0, 86400], got -1"
    );
    let e = FileConfig::parse("[nccl]\nretain_exited_s = -5\n", "f")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "config error: nccl.retain_exited_s: must be a number of seconds in [0, 86400], got -5"
    );
    let e = FileConfig::parse("[nccl]\nmax_job_totals = 0\n", "f")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "config error: nccl.max_job_totals: must be in [1, 65536]"
    );
    let c = FileConfig::parse("[nccl]\nretain_exited_s = 0\nmax_job_totals = 5\n", "f").unwrap();
    assert_eq!((c.nccl.retain_exited_s, c.nccl.max_job_totals), (0.0, 5));
    let d = FileConfig::parse("", "f").unwrap();
    assert_eq!(
        (d.nccl.retain_exited_s, d.nccl.max_job_totals),
        (120.0, 1024)
    );
}

/// A cluster name is one NATS subject token and a Prometheus label value.
#[test]
fn cluster_names_are_checked() {
    let c = FileConfig::parse("[collector]\ncluster = \"east-1_b\"\n", "f").unwrap();
    assert_eq!(c.collector.cluster.as_deref(), Some("east-1_b"));
    for bad in ["", "east.1", "a b", "é", &"x".repeat(65)] {
        let e = FileConfig::parse(&format!("[collector]\ncluster = \"{bad}\"\n"), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("collector.cluster"), "{bad:?}: {e}");
    }
}

/// Every dotted path of an integer or float under `t`.
fn numbers(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => numbers(&path, t, out),
            toml::Value::Integer(_) | toml::Value::Float(_) => out.push(path),
            _ => {}
        }
    }
}

/// For each numeric key of the defaults (walked, so a key added later is
/// covered too), `nan`, `-1`, `inf` and `-inf` are refused naming the key.
#[test]
fn nan_minus_one_and_inf_are_refused_for_every_number_by_name() {
    let table: toml::Table = toml::from_str(&FileConfig::default().to_toml()).unwrap();
    let mut keys = Vec::new();
    numbers("", &table, &mut keys);
    assert!(keys.len() > 20, "{keys:?}");
    let bads = [
        ("nan", toml::Value::Float(f64::NAN)),
        ("-1", toml::Value::Integer(-1)),
        ("inf", toml::Value::Float(f64::INFINITY)),
        ("-inf", toml::Value::Float(f64::NEG_INFINITY)),
    ];
    let mut wrong = Vec::new();
    for key in &keys {
        for (bad, v) in &bads {
            let mut doc = table.clone();
            let mut t = &mut doc;
            let path: Vec<&str> = key.split('.').collect();
            for seg in &path[..path.len() - 1] {
                t = t[*seg].as_table_mut().unwrap();
            }
            t.insert(path[path.len() - 1].to_string(), v.clone());
            let (table, leaf) = key.rsplit_once('.').unwrap_or(("", key));
            match FileConfig::parse(&toml::to_string(&doc).unwrap(), "r.toml") {
                // -1 is the server's own store limit (docs/config.md).
                Ok(_) if key == "stream.nats_max_bytes" && *bad == "-1" => {}
                Ok(_) => wrong.push(format!("{key} = {bad}")),
                // `otlp.limits: body_timeout_s: …` names it too.
                Err(e)
                    if !e.to_string().contains(key.as_str())
                        && !e.to_string().contains(&format!("{table}: {leaf}")) =>
                {
                    wrong.push(format!("{key} = {bad} refused without its name: {e}"));
                }
                Err(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "accepted or unnamed: {wrong:#?}");
}

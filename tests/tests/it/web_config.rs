//! `--web-config-file` (Prometheus exporter-toolkit's format, as
//! node_exporter's `--web.config.file`) on the real binaries: a PKI made by
//! `openssl`, bcrypt hashes by Apache's `htpasswd` (what exporter-toolkit's
//! docs use), requests by `curl`, and a real Prometheus scraping the
//! collector over TLS with basic auth.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::mpsc::Receiver,
    time::{Duration, Instant},
};

use tests::{bin, KillOnDrop};

const PASSWORD: &str = "correct horse battery staple";

/// Whether `tool` runs; without it the test is skipped locally and fails
/// under `CI=true` (scripts/setup.sh installs it).
fn have(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool)
        .arg(if tool == "openssl" {
            "version"
        } else {
            "--version"
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        assert!(
            !tests::in_ci(),
            "{test}: CI=true but {tool} is missing (scripts/setup.sh installs it)"
        );
        eprintln!("SKIPPED {test}: {tool} is not installed");
    }
    ok
}

fn have_all(tools: &[&str], test: &str) -> bool {
    tools.iter().all(|t| have(t, test))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory of its own for each test.
fn scratch(name: &str) -> PathBuf {
    tests::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("web-config-{name}")))
}

/// A CA and a certificate it signs (`name`.pem, `name`.key), EC P-256.
fn issue(dir: &Path, ca: &str, name: &str, ext: &str) {
    let p = |s: &str| dir.join(s);
    run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", &format!("/CN={name}"), "-keyout"])
        .arg(p(&format!("{name}.key")))
        .arg("-out")
        .arg(p(&format!("{name}.csr"))));
    std::fs::write(p(&format!("{name}.ext")), ext).expect("ext file");
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-in"])
        .arg(p(&format!("{name}.csr")))
        .arg("-CA")
        .arg(p(&format!("{ca}.pem")))
        .arg("-CAkey")
        .arg(p(&format!("{ca}.key")))
        .args(["-CAcreateserial", "-extfile"])
        .arg(p(&format!("{name}.ext")))
        .arg("-out")
        .arg(p(&format!("{name}.pem"))));
}

fn new_ca(dir: &Path, name: &str) {
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
        ])
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(dir.join(format!("{name}.pem"))));
}

/// `ca` signs `server` (for 127.0.0.1) and `client`; `rogue-ca` signs
/// `rogue` (a client certificate from a CA the server does not trust).
fn pki(dir: &Path) {
    new_ca(dir, "ca");
    new_ca(dir, "rogue-ca");
    issue(
        dir,
        "ca",
        "server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    issue(dir, "ca", "client", "extendedKeyUsage=clientAuth\n");
    issue(dir, "rogue-ca", "rogue", "extendedKeyUsage=clientAuth\n");
}

/// A bcrypt hash of `password` as the docs make it (`htpasswd -nBC`), at
/// cost 6 to keep the test quick.
fn bcrypt(password: &str) -> String {
    let out = run(Command::new("htpasswd").args(["-nbBC", "6", "", password]));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches(':')
        .to_string()
}

/// One `curl` request: (exit code, status, lowercased head, body).
fn curl(args: &[&str]) -> (i32, u16, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        out.status.code().unwrap_or(-1),
        status,
        head.to_ascii_lowercase(),
        body.to_string(),
    )
}

fn wait_line(rx: &Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return l,
            Ok(_) => {}
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
    panic!("waiting for {what}: timed out")
}

/// The collector with nothing but its metrics endpoint behind `web`: the
/// process and the endpoint's `host:port`.
fn collector(dir: &Path, web: &Path) -> (KillOnDrop, String) {
    let sysfs = dir.join("sysfs");
    std::fs::create_dir_all(&sysfs).expect("empty sysfs");
    let mut child = KillOnDrop(
        Command::new(bin("faultline-collector"))
            .args([
                "--quiet",
                "--duration",
                "60",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .args([
                "--no-otlp",
                "--no-nvml",
                "--no-cuda",
                "--no-nccl",
                "--no-verbs",
            ])
            .args(["--no-block", "--sysfs-root"])
            .arg(&sysfs)
            .arg("--web-config-file")
            .arg(web)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the collector"),
    );
    let rx = tests::lines_of(&mut child.0);
    let line = wait_line(&rx, "the metrics address", |l| {
        l.starts_with("metrics on https://")
    });
    let addr = line
        .trim_start_matches("metrics on https://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    // Keep reading stdout so the collector never blocks on it.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    (child, addr)
}

fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[test]
fn tls_and_basic_auth_on_the_collectors_metrics() {
    let _turn = tests::one_file_at_a_time(file!());
    if !have_all(&["openssl", "curl", "htpasswd"], "web_config tls+basic") {
        return;
    }
    let dir = scratch("basic");
    pki(&dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{}'\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
            bcrypt(PASSWORD)
        ),
    )
    .expect("web.yml");
    let (_c, addr) = collector(&dir, &web);
    let url = format!("https://{addr}/metrics");
    let ca = dir.join("ca.pem").display().to_string();
    let right = format!("prometheus:{PASSWORD}");

    let (rc, status, head, body) = curl(&["--cacert", &ca, "-u", &right, &url]);
    assert_eq!((rc, status), (0, 200), "{head}{body}");
    assert!(
        head.contains("\r\nx-content-type-options: nosniff"),
        "{head}"
    );
    assert!(body.contains("# TYPE faultline_"), "{body}");

    for (who, user) in [
        ("wrong password", "prometheus:wrong"),
        ("unknown user", "root:x"),
    ] {
        let (rc, status, head, _) = curl(&["--cacert", &ca, "-u", user, &url]);
        assert_eq!((rc, status), (0, 401), "{who}: {head}");
        assert!(
            head.contains("\r\nwww-authenticate: basic"),
            "{who}: {head}"
        );
    }
    let (_, status, _, _) = curl(&["--cacert", &ca, &url]);
    assert_eq!(status, 401, "no credentials");
    // Probes need no password.
    let (_, status, _, _) = curl(&["--cacert", &ca, &format!("https://{addr}/healthz")]);
    assert_eq!(status, 200);
    // Only TLS: plain HTTP gets no answer, an unknown CA fails to verify.
    let (rc, status, _, _) = curl(&["-u", &right, &format!("http://{addr}/metrics")]);
    assert!(rc != 0 && status == 0, "plain HTTP answered {status}");
    let (rc, _, _, _) = curl(&["-u", &right, &url]);
    assert_eq!(
        rc, 60,
        "a certificate from an unknown CA must fail curl's check"
    );

    let (_, _, _, body) = curl(&["--cacert", &ca, "-u", &right, &url]);
    let failures = |reason: &str| {
        sample(
            &body,
            &format!(
                "faultline_web_auth_failures_total{{listener=\"metrics\",reason=\"{reason}\"}}"
            ),
        )
    };
    assert_eq!(failures("wrong"), Some(2.0), "{body}");
    assert_eq!(failures("missing"), Some(1.0), "{body}");
}

#[test]
fn client_certificates_from_the_ca_are_required() {
    let _turn = tests::one_file_at_a_time(file!());
    if !have_all(&["openssl", "curl"], "web_config client certs") {
        return;
    }
    let dir = scratch("mtls");
    pki(&dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  \
         min_version: TLS13\n",
    )
    .expect("web.yml");
    let (_c, addr) = collector(&dir, &web);
    let url = format!("https://{addr}/metrics");
    let p = |f: &str| dir.join(f).display().to_string();
    let (rc, status, head, body) = curl(&[
        "--cacert",
        &p("ca.pem"),
        "--cert",
        &p("client.pem"),
        "--key",
        &p("client.key"),
        &url,
    ]);
    assert_eq!((rc, status), (0, 200), "{head}{body}");
    // No certificate, or one from another CA: the handshake fails.
    for (who, cert) in [("none", None), ("rogue CA", Some("rogue"))] {
        let mut args = vec!["--cacert".to_string(), p("ca.pem")];
        if let Some(c) = cert {
            args.extend([
                "--cert".into(),
                p(&format!("{c}.pem")),
                "--key".into(),
                p(&format!("{c}.key")),
            ]);
        }
        args.push(url.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (rc, status, _, _) = curl(&args);
        assert!(rc != 0 && status == 0, "{who}: rc {rc}, status {status}");
    }
    // TLS 1.2 is below min_version.
    let (rc, _, _, _) = curl(&[
        "--cacert",
        &p("ca.pem"),
        "--cert",
        &p("client.pem"),
        "--key",
        &p("client.key"),
        "--tls-max",
        "1.2",
        &url,
    ]);
    assert_ne!(rc, 0, "TLS 1.2 accepted");
    let (_, _, _, body) = curl(&[
        "--cacert",
        &p("ca.pem"),
        "--cert",
        &p("client.pem"),
        "--key",
        &p("client.key"),
        &url,
    ]);
    let closed = sample(
        &body,
        "faultline_connections_closed_total{listener=\"metrics\",reason=\"tls_handshake\"}",
    );
    assert!(closed.is_some_and(|n| n >= 3.0), "{closed:?}");
}

#[test]
fn bad_web_config_files_are_refused_at_start_naming_the_problem() {
    let _turn = tests::one_file_at_a_time(file!());
    if !have_all(&["openssl"], "web_config refusals") {
        return;
    }
    let dir = scratch("refused");
    pki(&dir);
    for (name, text, says) in [
        ("typo", "tls_server_config:\n  certfile: server.pem\n", "unknown field `certfile`"),
        (
            "missing-cert",
            "tls_server_config:\n  cert_file: nowhere.pem\n  key_file: server.key\n",
            "tls_server_config.cert_file",
        ),
        (
            "key-mismatch",
            "tls_server_config:\n  cert_file: server.pem\n  key_file: client.key\n",
            "does not fit",
        ),
        ("plain-hash", "basic_auth_users:\n  sre: hunter2\n", "basic_auth_users.sre: not a bcrypt hash"),
        (
            "ca-without-policy",
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: ca.pem\n",
            "client_auth_type",
        ),
        (
            "tls10",
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS10\n",
            "tls_server_config.min_version",
        ),
        ("rate-limit", "rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit: not supported"),
    ] {
        let web = dir.join(format!("{name}.yml"));
        std::fs::write(&web, text).expect("web config");
        // The collector refuses at start (exit 2 as for any config error)...
        let out = Command::new(bin("faultline-collector"))
            .args(["--metrics-addr", "127.0.0.1:0", "--web-config-file"])
            .arg(&web)
            .output()
            .expect("collector");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says) && err.contains(&*web.to_string_lossy()), "{name}: {err}");
        // `check-config` says the same on both binaries (the correlator's
        // from `[web] web_config_file`).
        let out = Command::new(bin("faultline-collector"))
            .args(["check-config", "--web-config-file"])
            .arg(&web)
            .output()
            .expect("collector check-config");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        let toml = dir.join(format!("{name}.toml"));
        std::fs::write(&toml, format!("[web]\nweb_config_file = '{}'\n", web.display()))
            .expect("correlator config");
        let out = Command::new(bin("faultline-correlator"))
            .arg("check-config")
            .arg(&toml)
            .output()
            .expect("correlator check-config");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        // ... and the correlator refuses to start, before serving anything.
        let out = Command::new(bin("faultline-correlator"))
            .args(["serve", "--insecure", "--listen", "127.0.0.1:0"])
            .args(["--web", "127.0.0.1:0", "--web-config-file"])
            .arg(&web)
            .output()
            .expect("correlator");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: the correlator started");
        assert!(err.contains(says), "{name}: {err}");
    }
}

/// Polls `url` with `args` until it answers `want` (30 s at most).
fn until_status(args: &[&str], url: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut a = args.to_vec();
        a.push(url);
        let (_, status, _, _) = curl(&a);
        if status == want {
            return;
        }
        assert!(Instant::now() < deadline, "{url}: still {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[test]
fn the_correlators_web_ui_and_metrics_listener_take_the_same_file() {
    let _turn = tests::one_file_at_a_time(file!());
    if !have_all(&["openssl", "curl", "htpasswd"], "web_config correlator") {
        return;
    }
    let dir = scratch("correlator");
    pki(&dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  sre: '{}'\n",
            bcrypt(PASSWORD)
        ),
    )
    .expect("web.yml");
    let token = dir.join("viewer.token");
    std::fs::write(&token, "viewer-token-0123456789abcdef\n").expect("token");
    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        format!("[web]\ntoken_file = '{}'\n", token.display()),
    )
    .expect("correlator.toml");
    let (ui, metrics) = (free_port(), free_port());
    let _corr = KillOnDrop(
        Command::new(bin("faultline-correlator"))
            .args(["serve", "--insecure", "--listen", "127.0.0.1:0", "--config"])
            .arg(&conf)
            .arg("--web")
            .arg(format!("127.0.0.1:{ui}"))
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics}"))
            .arg("--web-config-file")
            .arg(&web)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the correlator"),
    );
    let ca = dir.join("ca.pem").display().to_string();
    let user = format!("sre:{PASSWORD}");
    for port in [ui, metrics] {
        until_status(
            &["--cacert", &ca],
            &format!("https://127.0.0.1:{port}/healthz"),
            200,
        );
        let url = format!("https://127.0.0.1:{port}/metrics");
        let (_, status, _, body) = curl(&["--cacert", &ca, "-u", &user, &url]);
        assert_eq!(status, 200, "{port}: {body}");
        assert!(body.contains("faultline_"), "{body}");
        let (_, status, head, _) = curl(&["--cacert", &ca, "-u", "sre:wrong", &url]);
        assert_eq!(status, 401, "{head}");
        assert!(head.contains("www-authenticate: basic"), "{head}");
    }
    // The UI's API: a user's password, or the viewer token, from loopback too.
    let api = format!("https://127.0.0.1:{ui}/api/open");
    let (_, status, _, body) = curl(&["--cacert", &ca, "-u", &user, &api]);
    assert_eq!(status, 200, "{body}");
    let bearer = "Authorization: Bearer viewer-token-0123456789abcdef";
    let (_, status, _, body) = curl(&["--cacert", &ca, "-H", bearer, &api]);
    assert_eq!(status, 200, "{body}");
    let (_, status, _, _) = curl(&["--cacert", &ca, &api]);
    assert_eq!(status, 401);
}

#[test]
fn prometheus_scrapes_a_collector_over_tls_with_basic_auth() {
    let _turn = tests::one_file_at_a_time(file!());
    const PROMETHEUS: &str = "prometheus";
    if !have_all(
        &["openssl", "curl", "htpasswd", PROMETHEUS],
        "web_config prometheus",
    ) {
        return;
    }
    let dir = scratch("prometheus");
    pki(&dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{}'\n",
            bcrypt(PASSWORD)
        ),
    )
    .expect("web.yml");
    let (_c, addr) = collector(&dir, &web);
    let port = free_port();
    let conf = dir.join("prometheus.yml");
    // As a kube-prometheus-stack ServiceMonitor renders it: scheme https,
    // basic_auth, tls_config.ca_file.
    std::fs::write(
        &conf,
        format!(
            "global: {{scrape_interval: 1s}}\n\
             scrape_configs:\n\
             - job_name: faultline-collector\n  scheme: https\n  \
             basic_auth: {{username: prometheus, password: '{PASSWORD}'}}\n  \
             tls_config: {{ca_file: '{ca}'}}\n  \
             static_configs:\n  - targets: ['{addr}']\n\
             - job_name: wrong-password\n  scheme: https\n  \
             basic_auth: {{username: prometheus, password: nope}}\n  \
             tls_config: {{ca_file: '{ca}'}}\n  \
             static_configs:\n  - targets: ['{addr}']\n",
            ca = dir.join("ca.pem").display()
        ),
    )
    .expect("prometheus.yml");
    let _prom = KillOnDrop(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Prometheus"),
    );
    let query = |q: &str| -> String {
        let (_, _, _, body) = curl(&[
            "-G",
            &format!("http://127.0.0.1:{port}/api/v1/query"),
            "--data-urlencode",
            &format!("query={q}"),
        ]);
        body
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = query("up");
        let ok =
            up.contains("\"job\":\"faultline-collector\"") && up.contains("\"wrong-password\"");
        let good = query("up{job=\"faultline-collector\"} == 1");
        let bad = query("up{job=\"wrong-password\"} == 0");
        let scraped = query("faultline_web_auth_failures_total{reason=\"wrong\"} > 0");
        if ok
            && [&good, &bad, &scraped]
                .iter()
                .all(|b| b.contains("\"value\""))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped the collector over TLS with basic auth: {up}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Ctrl-C on `scripts/run.sh` (`faultline-sim --web … --keep-serving`),
/// after the run and during it: the temporary history database is closed
/// before it is removed (no "history database deleted while the correlator
/// runs" ERROR, no file recreated) and nothing of it stays in the temporary
/// directory (during the run the default SIGINT left the database and its
/// 8 MiB incident journal behind).
#[test]
fn ctrl_c_on_the_simulators_web_ui_leaves_no_error_and_no_files() {
    let _turn = tests::one_file_at_a_time(file!());
    for (when, args, ready) in [
        (
            "after the run",
            ["--duration", "2", "--keep-serving"],
            "simulation done",
        ),
        (
            "during the run",
            ["--duration", "3600", "--keep-serving"],
            "web UI:",
        ),
    ] {
        let dir = scratch(&format!("sim-{}", when.replace(' ', "-")));
        let mut child = KillOnDrop(
            Command::new(bin("faultline-sim"))
                .args(["--inject", "ib-link-degrade", "--web", "127.0.0.1:0"])
                .args(args)
                .env("TMPDIR", &dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start faultline-sim"),
        );
        let rx = tests::lines_of(&mut child.0);
        wait_line(&rx, ready, |l| l.starts_with(ready));
        // A few windows into the history first.
        std::thread::sleep(Duration::from_millis(1500));
        let pid = i32::try_from(child.0.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.0.try_wait().expect("wait").is_none() {
            assert!(
                Instant::now() < deadline,
                "{when}: still running 10 s after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut stderr = String::new();
        if let Some(mut e) = child.0.stderr.take() {
            use std::io::Read as _;
            let _ = e.read_to_string(&mut stderr);
        }
        assert!(
            !stderr.contains("ERROR") && !stderr.contains("deleted while"),
            "{when}: {stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("scratch dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("faultline-sim-history"))
            .collect();
        assert!(
            left.is_empty(),
            "{when}: left in the temporary directory: {left:?}"
        );
    }
}

/// Polls `args` with curl until it answers 200 (10 s at most).
fn until_ok(args: &[&str], what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (rc, status, _, body) = curl(args);
        if status == 200 {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: curl {rc}, status {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    let _turn = tests::one_file_at_a_time(file!());
    if !have_all(&["openssl", "curl"], "web_config renewal") {
        return;
    }
    let dir = scratch("renewal");
    pki(&dir);
    std::fs::write(
        dir.join("web.yml"),
        "tls_server_config:\n  cert_file: live.pem\n  key_file: live.key\n",
    )
    .expect("web.yml");
    let p = |f: &str| dir.join(f);
    let install = |cert: &str, key: &str| {
        // As cert-manager or certbot renew: new files renamed into place.
        std::fs::copy(p(cert), p("new.pem")).expect("copy cert");
        std::fs::copy(p(key), p("new.key")).expect("copy key");
        std::fs::rename(p("new.key"), p("live.key")).expect("rename key");
        std::fs::rename(p("new.pem"), p("live.pem")).expect("rename cert");
    };
    install("server.pem", "server.key");
    let (_c, addr) = collector(&dir, &p("web.yml"));
    let url = format!("https://{addr}/metrics");
    let with_ca = |ca: &str| {
        vec![
            "--cacert".to_string(),
            p(ca).display().to_string(),
            url.clone(),
        ]
    };
    let first = with_ca("ca.pem");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    until_ok(&first, "the first certificate");

    // Renewed by another CA: served from the next handshake a second on.
    new_ca(&dir, "ca2");
    issue(
        &dir,
        "ca2",
        "server2",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    install("server2.pem", "server2.key");
    let second = with_ca("ca2.pem");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    until_ok(&second, "the renewed certificate");
    let (rc, _, _, _) = curl(&first);
    assert_eq!(rc, 60, "the old CA still verifies the server");

    // A broken renewal (a key that does not fit): the last good pair stays.
    std::thread::sleep(Duration::from_millis(1100));
    install("server.pem", "server2.key");
    std::thread::sleep(Duration::from_millis(1100));
    let body = until_ok(&second, "the kept certificate");
    assert_eq!(
        sample(&body, "faultline_web_tls_reload_errors_total"),
        Some(1.0),
        "{body}"
    );
}

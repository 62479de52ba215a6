//! `faultline-collector`: the host agent.
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use collector::{
    block::section as block,
    config::{collector as c, ConfigError, FileConfig},
    cuda::section as cuda,
    ib::section as ib,
    nccl::section as nccl,
    nvml,
    otlp::section as otlp,
    stream::section as stream,
    verbs::section as verbs,
};

/// faultline's host agent: eBPF probes on the kernel/driver boundary, windowed
/// and streamed to the correlator.
#[derive(Debug, Parser)]
#[command(name = "faultline-collector", version)]
struct Cli {
    /// Print one snapshot (InfiniBand ports) in Prometheus text format and exit.
    /// Needs no privileges.
    #[arg(long)]
    once: bool,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Attach the probes and print what they see (the default).
    Run(RunArgs),
    /// Check the configuration (file and flags), print the effective settings
    /// as TOML and exit: 0 when valid, 2 with one line naming the problem.
    /// The file as `--config FILE` or `FILE`, as `faultline-correlator
    /// check-config` takes it.
    CheckConfig(CheckArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct CheckArgs {
    /// TOML configuration file (the same as `--config FILE`).
    #[arg(value_name = "FILE")]
    file: Option<std::path::PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

/// `check-config FILE --config OTHER`: which one to check is unclear.
#[derive(Debug, thiserror::Error)]
#[error("check-config: two config files ({} and --config {}); give one", .file.display(), .flag.display())]
struct TwoConfigFiles {
    file: std::path::PathBuf,
    flag: std::path::PathBuf,
}

impl CheckArgs {
    /// The run arguments with the file from either form.
    fn run_args(&self) -> Result<RunArgs, TwoConfigFiles> {
        let mut a = self.run.clone();
        match (&self.file, &a.config) {
            (Some(f), Some(c)) if f != c => {
                return Err(TwoConfigFiles {
                    file: f.clone(),
                    flag: c.clone(),
                })
            }
            (Some(f), _) => a.config = Some(f.clone()),
            _ => {}
        }
        Ok(a)
    }
}

/// Flags override the configuration file (`--config`), which overrides the
/// defaults; `docs/config.md` documents every key.
#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE", env = "FAULTLINE_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = collector::config::duration_arg)]
    duration: Option<std::time::Duration>,
    // `[collector]`: name, help, default and environment variable from the
    // keys' declarations (`config/collector.rs`).
    #[arg(long = c::WINDOW_SECS.long(), value_name = "SECONDS", help = c::WINDOW_SECS.help())]
    window: Option<f64>,
    #[arg(long = c::QUIET.long(), help = c::QUIET.help())]
    quiet: bool,
    #[arg(
        long = c::METRICS_ADDR.long(),
        value_name = "HOST:PORT",
        help = c::METRICS_ADDR.help()
    )]
    metrics_addr: Option<String>,
    #[arg(
        long = c::WEB_CONFIG_FILE.long(),
        value_name = "FILE",
        alias = "web.config.file",
        help = c::WEB_CONFIG_FILE.help()
    )]
    web_config_file: Option<std::path::PathBuf>,
    #[arg(
        long = c::HOSTNAME.long(),
        value_name = "NAME",
        env = c::HOSTNAME.env_var(),
        help = c::HOSTNAME.help()
    )]
    hostname: Option<String>,
    #[arg(
        long = c::CLUSTER.long(),
        value_name = "NAME",
        env = c::CLUSTER.env_var(),
        help = c::CLUSTER.help()
    )]
    cluster: Option<String>,
    #[arg(long = c::LOG_FORMAT.long(), value_name = "FORMAT", help = c::LOG_FORMAT.help())]
    log_format: Option<String>,
    // The families' sections: name, help and default from the keys'
    // declarations (`<family>/section.rs`).
    #[arg(long = block::ENABLED.long(), help = block::ENABLED.help())]
    no_block: bool,
    #[arg(long = cuda::ENABLED.long(), help = cuda::ENABLED.help())]
    no_cuda: bool,
    #[arg(long = cuda::LIBRARY.long(), value_name = "PATH", help = cuda::LIBRARY.help())]
    cuda_library: Option<std::path::PathBuf>,
    #[arg(long = nccl::ENABLED.long(), help = nccl::ENABLED.help())]
    no_nccl: bool,
    #[arg(long = nccl::LIBRARY.long(), value_name = "PATH", help = nccl::LIBRARY.help())]
    nccl_library: Vec<std::path::PathBuf>,
    #[arg(long = nvml::ENABLED.long(), help = nvml::ENABLED.help())]
    no_nvml: bool,
    #[arg(long = nvml::DCGM_COMPAT.long(), help = nvml::DCGM_COMPAT.help())]
    no_dcgm_compat: bool,
    #[arg(long = c::JOB_DIR.long(), value_name = "DIR", help = c::JOB_DIR.help())]
    job_dir: Option<std::path::PathBuf>,
    #[arg(
        long = c::HPC_JOB_MAPPING_DIR.long(),
        value_name = "DIR",
        help = c::HPC_JOB_MAPPING_DIR.help()
    )]
    hpc_job_mapping_dir: Option<std::path::PathBuf>,
    #[arg(long = nvml::LIBRARY.long(), value_name = "PATH", help = nvml::LIBRARY.help())]
    nvml_library: Option<std::path::PathBuf>,
    // clap's path parser refuses an empty value; the OS string one takes it.
    #[arg(
        long = nvml::POD_RESOURCES_SOCKET.long(),
        value_name = "PATH",
        value_parser = clap::value_parser!(std::ffi::OsString),
        help = nvml::POD_RESOURCES_SOCKET.help()
    )]
    pod_resources_socket: Option<std::ffi::OsString>,
    #[arg(
        long = ib::DEVICE_INCLUDE.long(),
        value_name = "REGEX",
        alias = "collector.infiniband.device-include",
        help = ib::DEVICE_INCLUDE.help()
    )]
    ib_device_include: Option<String>,
    #[arg(
        long = ib::DEVICE_EXCLUDE.long(),
        value_name = "REGEX",
        alias = "collector.infiniband.device-exclude",
        help = ib::DEVICE_EXCLUDE.help()
    )]
    ib_device_exclude: Option<String>,
    #[arg(long = ib::EXPORT.long(), help = ib::EXPORT.help())]
    no_ib_export: bool,
    #[arg(long = verbs::ENABLED.long(), help = verbs::ENABLED.help())]
    no_verbs: bool,
    #[arg(long = verbs::LIBRARY.long(), value_name = "PATH", help = verbs::LIBRARY.help())]
    verbs_library: Option<std::path::PathBuf>,
    #[arg(
        long = verbs::PROVIDER.long(),
        value_name = "SPEC",
        value_parser = collector::probes::ProviderTarget::parse_spec,
        help = verbs::PROVIDER.help()
    )]
    verbs_provider: Option<collector::probes::ProviderTarget>,
    #[arg(long = c::SYSFS_ROOT.long(), value_name = "DIR", help = c::SYSFS_ROOT.help())]
    sysfs_root: Option<std::path::PathBuf>,
    #[arg(long = c::PROC_ROOT.long(), value_name = "DIR", help = c::PROC_ROOT.help())]
    proc_root: Option<std::path::PathBuf>,
    // `[stream]`: name, help and default from the keys' declarations.
    #[arg(long = stream::ENDPOINT.long(), value_name = "URL", help = stream::ENDPOINT.help())]
    correlator: Option<String>,
    #[arg(long = stream::SPOOL_DIR.long(), value_name = "DIR", help = stream::SPOOL_DIR.help())]
    spool_dir: Option<std::path::PathBuf>,
    #[arg(
        long = stream::SPOOL_MAX_BYTES.long(),
        value_name = "BYTES",
        help = stream::SPOOL_MAX_BYTES.help()
    )]
    spool_max_bytes: Option<u64>,
    #[arg(long = stream::RECORD.long(), value_name = "FILE", help = stream::RECORD.help())]
    record: Option<std::path::PathBuf>,
    #[arg(long = otlp::ENABLED.long(), help = otlp::ENABLED.help())]
    no_otlp: bool,
    #[arg(long = otlp::GRPC_ENABLED.long(), help = otlp::GRPC_ENABLED.help())]
    no_otlp_grpc: bool,
    #[arg(long = otlp::HTTP_ENABLED.long(), help = otlp::HTTP_ENABLED.help())]
    no_otlp_http: bool,
    #[arg(
        long = otlp::GRPC_ADDR.long(),
        value_name = "HOST:PORT",
        help = otlp::GRPC_ADDR.help()
    )]
    otlp_grpc_addr: Option<std::net::SocketAddr>,
    #[arg(
        long = otlp::HTTP_ADDR.long(),
        value_name = "HOST:PORT",
        help = otlp::HTTP_ADDR.help()
    )]
    otlp_http_addr: Option<std::net::SocketAddr>,
    #[arg(long = c::LOG.long(), env = c::LOG.env_var(), help = c::LOG.help())]
    log: Option<String>,
}

/// Defaults → file → flags.
fn settings(args: &RunArgs) -> Result<FileConfig, ConfigError> {
    let mut c = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    if let Some(w) = args.window {
        c.collector.window_secs = w;
    }
    if let Some(a) = &args.metrics_addr {
        c.collector.metrics_addr = a.clone();
    }
    if args.web_config_file.is_some() {
        c.collector.web_config_file = args.web_config_file.clone();
    }
    if args.hostname.is_some() {
        c.collector.hostname = args.hostname.clone();
    }
    if args.cluster.is_some() {
        c.collector.cluster = args.cluster.clone();
    }
    if let Some(f) = &args.log_format {
        c.collector.log_format = f.clone();
    }
    if let Some(p) = &args.sysfs_root {
        c.collector.sysfs_root = p.clone();
    }
    if let Some(p) = &args.proc_root {
        c.collector.proc_root = p.clone();
    }
    match (&args.log, std::env::var("RUST_LOG")) {
        (Some(l), _) => c.collector.log = l.clone(),
        // The file's filter wins over the environment's default.
        (None, Ok(l)) if args.config.is_none() => c.collector.log = l,
        _ => {}
    }
    c.collector.quiet |= args.quiet;
    if args.correlator.is_some() {
        c.stream.endpoint = args.correlator.clone();
    }
    if let Some(d) = &args.spool_dir {
        c.stream.spool_dir = d.clone();
    }
    if let Some(b) = args.spool_max_bytes {
        c.stream.spool_max_bytes = b;
    }
    if args.record.is_some() {
        c.stream.record = args.record.clone();
    }
    c.block.enabled &= !args.no_block;
    c.cuda.enabled &= !args.no_cuda;
    c.nccl.enabled &= !args.no_nccl;
    if !args.nccl_library.is_empty() {
        c.nccl.library = args.nccl_library.clone();
    }
    c.nvml.enabled &= !args.no_nvml;
    c.nvml.dcgm_compat &= !args.no_dcgm_compat;
    if let Some(d) = &args.job_dir {
        c.collector.job_dir = d.clone();
    }
    if let Some(d) = &args.hpc_job_mapping_dir {
        c.collector.hpc_job_mapping_dir = d.clone();
    }
    c.verbs.enabled &= !args.no_verbs;
    c.otlp.enabled &= !args.no_otlp;
    c.otlp.grpc_enabled &= !args.no_otlp_grpc;
    c.otlp.http_enabled &= !args.no_otlp_http;
    if let Some(a) = args.otlp_grpc_addr {
        c.otlp.grpc_addr = a.to_string();
    }
    if let Some(a) = args.otlp_http_addr {
        c.otlp.http_addr = a.to_string();
    }
    if args.cuda_library.is_some() {
        c.cuda.library = args.cuda_library.clone();
    }
    if args.nvml_library.is_some() {
        c.nvml.library = args.nvml_library.clone();
    }
    if let Some(p) = &args.pod_resources_socket {
        c.nvml.pod_resources_socket = p.into();
    }
    // A flag replaces the file's pattern, include or exclude alike (the two
    // are exclusive).
    if args.ib_device_include.is_some() || args.ib_device_exclude.is_some() {
        c.ib.device_include = args.ib_device_include.clone();
        c.ib.device_exclude = args.ib_device_exclude.clone();
    }
    c.ib.export &= !args.no_ib_export;
    if args.verbs_library.is_some() {
        c.verbs.library = args.verbs_library.clone();
    }
    if let Some(t) = &args.verbs_provider {
        c.verbs.provider = Some(t.section());
    }
    c.validate()?;
    Ok(c)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (args, check) = match &cli.command {
        Some(Command::Run(a)) => (a.clone(), false),
        Some(Command::CheckConfig(a)) => match a.run_args() {
            Ok(a) => (a, true),
            Err(e) => {
                eprintln!("faultline-collector: {e}");
                return ExitCode::from(2);
            }
        },
        None => (cli.run.clone(), false),
    };
    let cfg = match settings(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("faultline-collector: {e}");
            return ExitCode::from(2);
        }
    };
    if check {
        print!("{}", cfg.to_toml());
        println!("# config ok");
        return ExitCode::SUCCESS;
    }
    init_tracing(&cfg.collector.log, &cfg.collector.log_format);
    if cli.once {
        return once(&cfg);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultline-collector: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stop = collector::agent::Stop {
        duration: args.duration,
    };
    match rt.block_on(collector::agent::run(cfg, stop)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-collector: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--once`: the InfiniBand ports in Prometheus text. A sysfs root that does
/// not exist is an operator's typo, not a host without RDMA devices.
fn once(cfg: &FileConfig) -> ExitCode {
    let sysfs_root = &cfg.collector.sysfs_root;
    if !sysfs_root.is_dir() {
        eprintln!(
            "faultline-collector: error: --sysfs-root {} is not a directory; give the directory that holds class/infiniband (default /sys)",
            sysfs_root.display()
        );
        return ExitCode::from(2);
    }
    // Valid: `settings` checked the patterns.
    let filter = collector::ib::DeviceFilter::new(
        cfg.ib.device_include.as_deref(),
        cfg.ib.device_exclude.as_deref(),
    )
    .unwrap_or_default();
    match collector::ib::scan(sysfs_root, &filter) {
        Ok(scan) => {
            print!("{}", collector::ib::prom::render(&scan.ports, None));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "faultline-collector: error: reading {}/class/infiniband: {e}",
                sysfs_root.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Logs on stderr, text or JSON: colour codes only on a terminal and when
/// `NO_COLOR` is unset or empty.
fn init_tracing(filter: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(vocab::term::colour(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
        .with_writer(std::io::stderr);
    // `try_init` also bridges the `log` records that aya-log emits.
    let _ = if format == "json" {
        b.json().try_init()
    } else {
        b.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag a declared key names is a flag of `run` with the key's
    /// environment variable (the flags take both from the declarations).
    #[test]
    fn the_declared_flags_and_env_are_the_commands() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let declared = [&c::DECLARED[..], &stream::DECLARED[..]].concat();
        let mut flags = 0;
        for d in declared {
            let Some(flag) = d.flag else { continue };
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap_or_else(|| panic!("{}: no --{flag}", d.path));
            let env = arg.get_env().and_then(|e| e.to_str());
            assert_eq!(env, d.env, "{}'s environment variable", d.path);
            flags += 1;
        }
        assert_eq!(flags, 16);
    }

    /// `--pod-resources-socket ""` turns the kubelet's API off, as `--help`
    /// says (clap's path parser refused the empty value).
    #[test]
    fn an_empty_pod_resources_socket_turns_it_off() {
        let cli = Cli::try_parse_from(["faultline-collector", "--pod-resources-socket", ""])
            .expect("an empty --pod-resources-socket parses");
        let cfg = settings(&cli.run).expect("valid settings");
        assert!(cfg.nvml.pod_resources_socket.as_os_str().is_empty());
        let cli = Cli::try_parse_from([
            "faultline-collector",
            "--pod-resources-socket",
            "/run/k.sock",
        ])
        .expect("a path parses");
        let cfg = settings(&cli.run).expect("valid settings");
        assert_eq!(
            cfg.nvml.pod_resources_socket,
            std::path::Path::new("/run/k.sock")
        );
    }
}

//! The node this agent reports as. In a pod without host networking
//! `/proc/sys/kernel/hostname` is the pod's name, which changes on every
//! restart; the node's name comes from `--hostname` (or `NODE_NAME`, set
//! from the downward API's `spec.nodeName`), and the host's machine-id
//! through the host's `/proc` (`<proc_root>/1/root/etc/machine-id`).
use std::path::Path;

use crate::identity::HostIdentity;

/// The host identity through `proc_root`; `node_name` (flag, config or
/// `NODE_NAME`) wins over the kernel's hostname; "localhost" when nothing says.
pub fn identity(proc_root: &Path, node_name: Option<&str>) -> HostIdentity {
    // The host's /etc as its PID 1 sees it, when the proc root is the
    // host's; the agent's own /etc otherwise.
    let host_etc = proc_root.join("1/root/etc");
    let etc = if host_etc.join("machine-id").is_file() {
        host_etc
    } else {
        Path::new("/etc").to_path_buf()
    };
    let mut id = HostIdentity::read(proc_root, &etc);
    match node_name.map(str::trim).filter(|n| !n.is_empty()) {
        Some(n) => id.hostname = n.to_string(),
        None if id.hostname.is_empty() => id.hostname = "localhost".into(),
        None => {}
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_tree(tag: &str) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("faultline-host-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(root.join("sys/kernel/random")).expect("mkdir");
        std::fs::create_dir_all(root.join("1/root/etc")).expect("mkdir");
        std::fs::write(root.join("sys/kernel/hostname"), "collector-7f9c4-xk2lp\n").expect("write");
        std::fs::write(root.join("sys/kernel/random/boot_id"), "b007\n").expect("write");
        std::fs::write(root.join("1/root/etc/machine-id"), "0123456789abcdef\n").expect("write");
        root
    }

    #[test]
    fn node_name_and_host_machine_id_through_the_proc_root() {
        let root = proc_tree("node");
        let id = identity(&root, Some("gpu-node-17"));
        assert_eq!(id.hostname, "gpu-node-17");
        assert_eq!(id.machine_id, "0123456789abcdef");
        assert_eq!(id.boot_id, "b007");
        // Without a node name: the kernel's hostname under the proc root.
        assert_eq!(identity(&root, None).hostname, "collector-7f9c4-xk2lp");
        assert_eq!(
            identity(&root, Some("  ")).hostname,
            "collector-7f9c4-xk2lp"
        );
        let _ = std::fs::remove_dir_all(root);
    }
}

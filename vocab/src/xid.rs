//! NVIDIA XID codes and what to do about each.
//!
//! Source: NVIDIA's Xid catalog for Ampere and newer GPUs
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>,
//! the catalog spreadsheet's "Resolution Bucket (Immediate Action)" column,
//! as of late 2025). Codes the catalog marks unused are left out; an
//! unknown code is [`Action::Unknown`] and the runbook points at the
//! catalog. The meanings are NVIDIA's short descriptions.

/// NVIDIA's immediate resolution bucket for an XID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `RESTART_APP`: the application faulted; the GPU is fine.
    RestartApp,
    /// `RESET_GPU`: reset the GPU (its jobs must leave it first).
    ResetGpu,
    /// `RESTART_BM`: drain and reboot the node.
    RebootNode,
    /// `IGNORE`: informational, or a follow-on of another XID.
    Ignore,
    /// `CHECK_MECHANICALS`: power cabling and seating.
    CheckMechanicals,
    /// `UPDATE_SWFW`: update the driver or firmware.
    UpdateSoftware,
    /// `CONTACT_SUPPORT`: collect `nvidia-bug-report.sh`, contact NVIDIA.
    ContactSupport,
    /// `WORKFLOW_XID_48`: a double-bit ECC error; the GPU needs a reset and
    /// its row remapping checked.
    EccWorkflow,
    /// `WORKFLOW_NVLINK_ERR` / `WORKFLOW_NVLINK5_ERR`: NVLink errors; reset
    /// the GPU, check the links and the fabric manager.
    NvlinkWorkflow,
    /// `WORKFLOW_XID_45`: preemptive cleanup after another error; follow
    /// that XID.
    FollowOther,
    /// `XID_154`: the driver states the recovery action in the message.
    AsStated,
    /// Not in the catalog.
    Unknown,
}

impl Action {
    /// NVIDIA's bucket name.
    pub fn bucket(self) -> &'static str {
        match self {
            Action::RestartApp => "RESTART_APP",
            Action::ResetGpu => "RESET_GPU",
            Action::RebootNode => "RESTART_BM",
            Action::Ignore => "IGNORE",
            Action::CheckMechanicals => "CHECK_MECHANICALS",
            Action::UpdateSoftware => "UPDATE_SWFW",
            Action::ContactSupport => "CONTACT_SUPPORT",
            Action::EccWorkflow => "WORKFLOW_XID_48",
            Action::NvlinkWorkflow => "WORKFLOW_NVLINK_ERR",
            Action::FollowOther => "WORKFLOW_XID_45",
            Action::AsStated => "XID_154",
            Action::Unknown => "UNKNOWN",
        }
    }

    /// What an operator does, in a few words.
    pub fn what_to_do(self) -> &'static str {
        match self {
            Action::RestartApp => "restart the application; the GPU is healthy (an application or CUDA bug)",
            Action::ResetGpu => "drain the GPU's jobs and reset it (`nvidia-smi -r`)",
            Action::RebootNode => "drain the node and reboot it; if it recurs, check the PCIe slot and power, then RMA",
            Action::Ignore => "no action (informational or a follow-on of another XID)",
            Action::CheckMechanicals => "check the GPU's auxiliary power cabling and seating",
            Action::UpdateSoftware => "update the driver and firmware",
            Action::ContactSupport => "collect `nvidia-bug-report.sh` and contact NVIDIA support",
            Action::EccWorkflow => "drain the GPU's jobs and reset it; check row remapping (`nvidia-smi -q -d ROW_REMAPPER`), RMA on a remap failure",
            Action::NvlinkWorkflow => "drain the GPU's jobs and reset it; check its NVLinks (`nvidia-smi nvlink -e`) and the fabric manager",
            Action::FollowOther => "follow the XID that preceded it on this GPU",
            Action::AsStated => "take the recovery action the driver's message states",
            Action::Unknown => "look the code up in NVIDIA's Xid catalog",
        }
    }

    /// Whether the GPU (or the node) needs an operator: anything but an
    /// application fault or information.
    pub fn is_hardware(self) -> bool {
        !matches!(
            self,
            Action::RestartApp | Action::Ignore | Action::FollowOther | Action::Unknown
        )
    }
}

/// Whose fault an XID is, before any judgement of who met it: the
/// correlator judges an application-class code by the jobs it follows
/// (docs/detection.md, "GPU XIDs").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// NVIDIA's `RESTART_APP` bucket (but XID 94): the application faulted
    /// (13 graphics engine exception, 31 memory page fault, the copy and
    /// video engine exceptions). One job's again and again is still the
    /// job's; several unrelated jobs' on one GPU is a hardware suspicion.
    Application,
    /// XID 43 (the driver stopped a process's channel: a kill or a fault)
    /// and 45 (`WORKFLOW_XID_45`, preemptive cleanup after another error
    /// or a kill): a follow-on, never an incident alone.
    FollowOn,
    /// Everything else, XID 94 included (a contained ECC error is the
    /// memory's, though its action is to restart the application): the
    /// catalogue's action stands.
    Hardware,
}

/// The class of `code` (an unknown code is [`Class::Hardware`]: its
/// catalogue action, `UNKNOWN`, is to look it up, never to blame a job).
pub fn class(code: u32) -> Class {
    match (code, action(code)) {
        (43 | 45, _) => Class::FollowOn,
        (94, _) => Class::Hardware,
        (_, Action::RestartApp) => Class::Application,
        _ => Class::Hardware,
    }
}

/// One XID: code, NVIDIA's description, its action.
pub type Entry = (u32, &'static str, Action);

use Action::*;

/// The catalog, by code (sorted).
pub const CATALOG: &[Entry] = &[
    (8, "GPU stopped processing", RestartApp),
    (11, "Invalid or corrupted push buffer stream", RestartApp),
    (13, "Graphics Engine Exception", RestartApp),
    (25, "Invalid or illegal push buffer stream", RestartApp),
    (31, "GPU memory page fault", RestartApp),
    (32, "Invalid or corrupted push buffer stream", RestartApp),
    (37, "Driver firmware error", Ignore),
    (38, "Driver firmware error", Ignore),
    (39, "Copy Engine Exception", RestartApp),
    (40, "Copy Engine Exception", RestartApp),
    (41, "Copy Engine Exception", RestartApp),
    (43, "GPU stopped processing", Ignore),
    (44, "Graphics Engine fault during context switch", Ignore),
    (
        45,
        "Preemptive cleanup, due to previous errors",
        FollowOther,
    ),
    (46, "GPU stopped processing", ResetGpu),
    (48, "Double Bit ECC Error", EccWorkflow),
    (
        54,
        "Auxiliary power is not connected to the GPU board",
        CheckMechanicals,
    ),
    (60, "Video processor exception", RestartApp),
    (62, "Internal micro-controller halt", ResetGpu),
    (63, "GPU memory remapping event", Ignore),
    (64, "GPU memory remapping failure", ResetGpu),
    (66, "Illegal access by driver", Ignore),
    (67, "Illegal access by driver", Ignore),
    (68, "NVDEC0 Exception", RestartApp),
    (69, "Graphics Engine class error", RestartApp),
    (70, "CE3: Unknown Error", RestartApp),
    (71, "CE4: Unknown Error", RestartApp),
    (72, "CE5: Unknown Error", RestartApp),
    (74, "NVLINK Error", NvlinkWorkflow),
    (75, "CE6: Unknown Error", RestartApp),
    (76, "CE7: Unknown Error", RestartApp),
    (77, "CE8: Unknown Error", RestartApp),
    (78, "vGPU Start Error", UpdateSoftware),
    (79, "GPU has fallen off the bus", RebootNode),
    (80, "Corrupted data sent to GPU", RestartApp),
    (82, "NVJPG0 Error", RestartApp),
    (83, "NVDEC1 Error", RestartApp),
    (84, "NVDEC2 Error", RestartApp),
    (85, "CE9: Unknown Error", RestartApp),
    (86, "OFA Exception", RestartApp),
    (88, "NVDEC3 Error", RestartApp),
    (89, "NVDEC4 Error", RestartApp),
    (92, "High single-bit ECC error rate", Ignore),
    (
        93,
        "Non-fatal violation of provisioned InfoROM wear limit",
        Ignore,
    ),
    (94, "Contained memory error", RestartApp),
    (95, "Uncontained memory error", ResetGpu),
    (96, "NVDEC5 Error", RestartApp),
    (97, "NVDEC6 Error", RestartApp),
    (98, "NVDEC7 Error", RestartApp),
    (99, "NVJPG1 Error", RestartApp),
    (100, "NVJPG2 Error", RestartApp),
    (101, "NVJPG3 Error", RestartApp),
    (102, "NVJPG4 Error", RestartApp),
    (103, "NVJPG5 Error", RestartApp),
    (104, "NVJPG6 Error", RestartApp),
    (105, "NVJPG7 Error", RestartApp),
    (106, "SMBPBI Test Message", Ignore),
    (107, "SMBPBI Test Message Silent", Ignore),
    (109, "Context Switch Timeout Error", ResetGpu),
    (110, "Security Fault Error", ResetGpu),
    (119, "GSP RPC Timeout", ResetGpu),
    (120, "GSP Error", ResetGpu),
    (121, "C2C Error", Ignore),
    (126, "CE10: Unknown Error", RestartApp),
    (127, "CE11: Unknown Error", RestartApp),
    (128, "CE12: Unknown Error", RestartApp),
    (129, "CE13: Unknown Error", RestartApp),
    (130, "CE14: Unknown Error", RestartApp),
    (131, "CE15: Unknown Error", RestartApp),
    (132, "CE16: Unknown Error", RestartApp),
    (133, "CE17: Unknown Error", RestartApp),
    (134, "CE18: Unknown Error", RestartApp),
    (135, "CE19: Unknown Error", RestartApp),
    (136, "Link Training Failed", ResetGpu),
    (137, "NVLink Privilege Error", Ignore),
    (139, "OFA1 Error", RestartApp),
    (140, "ECC Unrecovered Error", ResetGpu),
    (141, "CUDA Fast Path Error", Ignore),
    (142, "NVENC3 Error", ContactSupport),
    (143, "GPU Initialization Error", ResetGpu),
    (144, "NVLINK: SAW Error", NvlinkWorkflow),
    (145, "NVLINK: RLW Error", NvlinkWorkflow),
    (146, "NVLINK: TLW Error", NvlinkWorkflow),
    (147, "NVLINK: TREX Error", NvlinkWorkflow),
    (148, "NVLINK: NVLPW_CTRL Error", NvlinkWorkflow),
    (149, "NVLINK: NETIR Error", NvlinkWorkflow),
    (150, "NVLINK: MSE Error", NvlinkWorkflow),
    (154, "GPU Recovery Action Changed", AsStated),
    (155, "NVLINK: SW Defined Error", ResetGpu),
    (156, "Resource Retirement Event", ResetGpu),
    (157, "Resource Retirement Failure", Ignore),
    (158, "GPU Fatal Timeout", ResetGpu),
];

/// The catalog's entry for `code`.
pub fn lookup(code: u32) -> Option<&'static Entry> {
    CATALOG
        .binary_search_by_key(&code, |e| e.0)
        .ok()
        .map(|i| &CATALOG[i])
}

/// NVIDIA's action for `code` ([`Action::Unknown`] when not catalogued).
pub fn action(code: u32) -> Action {
    lookup(code).map_or(Action::Unknown, |e| e.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_sorted_and_unique() {
        assert!(CATALOG.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn bus_loss_ecc_and_application_faults_differ() {
        assert_eq!(action(79), Action::RebootNode);
        assert_eq!(action(13), Action::RestartApp);
        assert_eq!(action(31), Action::RestartApp);
        assert_eq!(action(48), Action::EccWorkflow);
        assert_eq!(action(95), Action::ResetGpu);
        assert_eq!(action(94), Action::RestartApp);
        assert_eq!(action(1), Action::Unknown, "unused in the catalog");
        assert!(action(79).is_hardware() && !action(13).is_hardware());
        assert_eq!(class(13), Class::Application);
        assert_eq!(class(31), Class::Application);
        assert_eq!(class(43), Class::FollowOn);
        assert_eq!(class(45), Class::FollowOn);
        assert_eq!(class(94), Class::Hardware, "contained ECC: the memory's");
        assert_eq!(class(95), Class::Hardware);
        assert_eq!(class(92), Class::Hardware, "IGNORE, but the memory's");
        assert_eq!(class(1), Class::Hardware, "unknown: never a job's");
    }
}

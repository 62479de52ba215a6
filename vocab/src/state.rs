//! States of a candidate update (`CandidateUpdate.state`).
use crate::kind::names;

names! {
    /// Where an incident is in its life.
    UpdateState {
        /// First seen.
        Opened = "opened",
        /// Still open: its confidence or evidence changed.
        Updated = "updated",
        /// Its cause is gone.
        Resolved = "resolved",
        /// Open when a subscriber connected (the snapshot it starts from).
        Open = "open",
    }
}

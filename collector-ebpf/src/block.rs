//! Block-layer probes (filled in by the storage issue).

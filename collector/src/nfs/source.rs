//! NFS mounts from mountstats → per mount and procedure RPC rows, console
//! lines and the `faultline_nfs_*` families.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    nfs::{self, NfsReader},
    sources::{Ctx, Fact, Source},
};

pub struct NfsSource {
    reader: NfsReader,
}

impl NfsSource {
    pub fn new(reader: NfsReader) -> Self {
        Self { reader }
    }

    /// The exposition before the first window.
    pub fn render(&self) -> String {
        self.reader.render()
    }
}

impl Source for NfsSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        match self.reader.window() {
            Ok((rows, _)) => {
                for r in &rows {
                    cx.console.detail(nfs::delta::line(r));
                }
                wire.nfs = rows;
            }
            Err(e) => {
                // A host without NFS support or a restricted /proc: the
                // rest of the window goes on.
                metrics::counter!(crate::metrics_catalog::SYSFS_READ_ERRORS.name, "file" => "mountstats")
                    .increment(1);
                tracing::debug!(error = %e, "reading mountstats");
            }
        }
        cx.expo.set_section("nfs", self.reader.render());
        Ok(None)
    }
}

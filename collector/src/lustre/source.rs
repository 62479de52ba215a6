//! Lustre client targets → per target and RPC type rows (on the wire's NFS
//! list, `fstype = "lustre"`), console lines and the `faultline_lustre_*`
//! families.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    lustre::{self, LustreReader},
    sources::{Ctx, Fact, Source},
};

pub struct LustreSource {
    reader: LustreReader,
}

impl LustreSource {
    pub fn new(reader: LustreReader) -> Self {
        Self { reader }
    }

    /// The exposition before the first window.
    pub fn render(&self) -> String {
        self.reader.render()
    }
}

impl Source for LustreSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let (rows, _) = self.reader.window();
        for r in &rows {
            cx.console.detail(lustre::delta::line(r));
        }
        // After the NFS source's rows: one list of network file system RPCs.
        wire.nfs.extend(rows);
        cx.expo.set_section("lustre", self.reader.render());
        Ok(None)
    }
}

//! Block I/O: the in-kernel aggregates → per device/op/cgroup rows.
use anyhow::Result;
use proto::v1 as pb;

use super::{render_prometheus, wire, BlockSnapshot, BlockWindow, Names};
use crate::sources::{Ctx, Fact, Source};

pub struct BlockSource {
    prev: BlockSnapshot,
    names: Names,
}

impl BlockSource {
    pub fn new(prev: BlockSnapshot, names: Names) -> Self {
        Self { prev, names }
    }

    /// The exposition before the first window.
    pub fn render(&mut self) -> String {
        render_prometheus(&self.prev, &mut self.names)
    }
}

impl Source for BlockSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let cur = cx.probes.block_snapshot()?;
        let win = BlockWindow::between(&self.prev, &cur, &mut self.names);
        for line in win.lines() {
            cx.console.detail(line);
        }
        wire.block = wire::rows(&win);
        cx.expo
            .set_section("block", render_prometheus(&cur, &mut self.names));
        self.prev = cur;
        Ok(None)
    }
}

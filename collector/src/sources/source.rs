//! What the window loop asks of each source, what it lends them, and the
//! order of one window: every source collects, then the sources that need
//! another source's data of the same window derive from it.
use std::{
    any::Any,
    collections::{BTreeMap, BTreeSet},
    time::SystemTime,
};

use anyhow::Result;
use proto::v1 as pb;

use crate::{http::Exposition, identity::IdentityCache, probes::Probes};

/// The console: per-entity detail lines only without `--quiet` (journald
/// gets one summary line per window, not one per device, kernel and port).
#[derive(Clone, Copy, Debug)]
pub struct Console {
    pub quiet: bool,
}

impl Console {
    /// A per-entity line (a device, a kernel, a port, an event).
    pub fn detail(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            println!("  {line}");
        }
    }

    /// A line that is always printed (startup facts, the window summary).
    pub fn info(&self, line: impl std::fmt::Display) {
        println!("{line}");
    }
}

/// Lent to every source for one window, in both phases.
pub struct Ctx<'a> {
    /// The node's name (entity prefix).
    pub host: &'a str,
    /// The window's end.
    pub now: SystemTime,
    pub probes: &'a mut Probes,
    pub ids: &'a mut IdentityCache,
    pub expo: &'a Exposition,
    pub console: Console,
}

/// The CUDA device ordinals each process used, by pid.
pub type CudaPids = BTreeMap<u32, BTreeSet<i32>>;

/// One thing a source learned in the collect phase that another source
/// needs in the derive phase.
#[derive(Debug)]
pub enum Fact {
    /// Values of the family's own types, read back by type with
    /// [`Facts::get`] (the GPU source's `nvml::GpuFacts` for `cuda` and
    /// `kmsg`, its `usage::GpuReadings` for `usage`), so that `sources/` names no
    /// family. A later value of the same type replaces an earlier one.
    Typed(Vec<Box<dyn Any>>),
    /// From the CUDA source: the processes in its maps this window.
    CudaPids(CudaPids),
    /// From the verbs source: bytes each process posted in the window.
    VerbsPosted(Vec<(u32, u64)>),
}

/// Every fact of one window; empty where the source that learns it is off.
/// Built during the collect phase only, read-only in the derive phase.
#[derive(Debug, Default)]
pub struct Facts {
    pub cuda_pids: CudaPids,
    pub verbs_posted: Vec<(u32, u64)>,
    typed: Vec<Box<dyn Any>>,
}

impl Fact {
    /// One value of a family's own type.
    pub fn typed<T: Any>(value: T) -> Self {
        Self::Typed(vec![Box::new(value)])
    }
}

impl Facts {
    /// The value of type `T` a source returned this window ([`Fact::Typed`]),
    /// `None` where no source did.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.typed.iter().find_map(|v| v.downcast_ref())
    }

    fn record(&mut self, fact: Fact) {
        match fact {
            Fact::Typed(values) => {
                for v in values {
                    let t = (*v).type_id();
                    self.typed.retain(|old| (**old).type_id() != t);
                    self.typed.push(v);
                }
            }
            Fact::CudaPids(p) => self.cuda_pids = p,
            Fact::VerbsPosted(v) => self.verbs_posted = v,
        }
    }
}

/// One signal family. Each window it turns its new snapshot into a delta
/// against the last one, and that into the wire rows (`wire`), its console
/// lines and its metrics.
pub trait Source {
    /// Collect phase: this source's own inputs only. What another source
    /// needs from it is returned, never read from another source here.
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>>;

    /// Derive phase, after every source collected: the parts that need
    /// another source's facts of this same window. `wire` holds every
    /// source's collected rows.
    fn derive(&mut self, _cx: &mut Ctx<'_>, _facts: &Facts, _wire: &mut pb::Window) -> Result<()> {
        Ok(())
    }
}

/// Closes one window over `sources`: all collect, then all derive.
pub fn close_window(
    sources: &mut [Box<dyn Source>],
    cx: &mut Ctx<'_>,
    wire: &mut pb::Window,
) -> Result<()> {
    let mut facts = Facts::default();
    for s in sources.iter_mut() {
        if let Some(fact) = s.collect(cx, wire)? {
            facts.record(fact);
        }
    }
    for s in sources.iter_mut() {
        s.derive(cx, &facts, wire)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_facts_are_read_back_by_type_and_the_later_one_wins() {
        #[derive(Debug, PartialEq)]
        struct A(u32);
        #[derive(Debug, PartialEq)]
        struct B(&'static str);
        let mut f = Facts::default();
        assert_eq!(f.get::<A>(), None);
        f.record(Fact::Typed(vec![Box::new(A(1)), Box::new(B("b"))]));
        f.record(Fact::typed(A(2)));
        f.record(Fact::CudaPids(CudaPids::from([(7, BTreeSet::from([0]))])));
        assert_eq!(f.get::<A>(), Some(&A(2)));
        assert_eq!(f.get::<B>(), Some(&B("b")));
        assert_eq!(f.typed.len(), 2);
        assert_eq!(f.cuda_pids.len(), 1);
        assert_eq!(f.get::<u8>(), None);
    }
}

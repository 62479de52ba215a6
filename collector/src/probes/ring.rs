//! Draining event ring buffers without busy polling: each ring's fd is
//! registered with tokio (epoll), and a batch is read whenever it is readable.
use std::{io, marker::PhantomData};

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use super::{ProbeError, Probes};

/// A record type carried by one ring.
pub trait Decode: Sized {
    /// Map name of the ring in the eBPF object.
    const RING: &'static str;
    /// `probe` label of this ring's metrics.
    const LABEL: &'static str;
    /// Decodes one ring item; `None` for a short or mistagged record.
    fn decode(bytes: &[u8]) -> Option<Self>;
}

/// The `Event<D>` in one ring item when it is long enough and tagged `kind`.
pub fn read_event<D: aya::Pod>(
    bytes: &[u8],
    kind: collector_common::EventKind,
) -> Option<collector_common::Event<D>> {
    if bytes.len() < size_of::<collector_common::Event<D>>() {
        return None;
    }
    // SAFETY: length checked; `Event<D>` is `#[repr(C)]` of a plain header
    // and a `Pod` payload (any bit pattern valid); unaligned read.
    let ev: collector_common::Event<D> = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    (collector_common::EventKind::try_from(ev.header.kind) == Ok(kind)).then_some(ev)
}

/// One ring buffer, registered with the runtime.
pub struct EventRing<R> {
    fd: AsyncFd<RingBuf<MapData>>,
    malformed: u64,
    _record: PhantomData<R>,
}

impl<R: Decode> EventRing<R> {
    /// Waits until at least one event is available, then appends everything
    /// in the ring to `out`.
    pub async fn recv_batch(&mut self, out: &mut Vec<R>) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable_mut().await?;
            // Clear first, then drain: an event committed after the drain
            // re-arms readiness instead of being missed.
            guard.clear_ready();
            let ring = guard.get_inner_mut();
            let before = out.len();
            while let Some(item) = ring.next() {
                match R::decode(&item) {
                    Some(r) => out.push(r),
                    None => {
                        self.malformed += 1;
                        metrics::counter!(crate::metrics_catalog::RING_MALFORMED.name, "probe" => R::LABEL)
                            .increment(1);
                    }
                }
            }
            let n = out.len() - before;
            if n > 0 {
                metrics::counter!(crate::metrics_catalog::PROBE_EVENTS.name, "probe" => R::LABEL)
                    .increment(n as u64);
                return Ok(());
            }
        }
    }

    /// Appends what is in the ring now, without waiting.
    pub fn drain_now(&mut self, out: &mut Vec<R>) {
        let ring = self.fd.get_mut();
        while let Some(item) = ring.next() {
            match R::decode(&item) {
                Some(r) => out.push(r),
                None => self.malformed += 1,
            }
        }
    }

    /// Ring items that could not be decoded.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}

impl Probes {
    /// Takes the ring that carries `R` (once).
    pub fn take_ring<R: Decode>(&mut self) -> Result<EventRing<R>, ProbeError> {
        EventRing::from_ebpf(self.ebpf_mut())
    }
}

impl<R: Decode> EventRing<R> {
    /// Takes `R::RING` out of a loaded object and registers it with tokio.
    pub fn from_ebpf(ebpf: &mut aya::Ebpf) -> Result<Self, ProbeError> {
        let map = ebpf
            .take_map(R::RING)
            .ok_or(ProbeError::MissingMap(R::RING))?;
        let ring = RingBuf::try_from(map).map_err(|source| ProbeError::Map {
            name: R::RING,
            source,
        })?;
        // SAFETY: the RingBuf owns its map fd, which stays open and unchanged
        // until the AsyncFd (and with it the RingBuf) is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| ProbeError::Poll {
                name: R::RING,
                source: e.into_parts().1,
            })?;
        Ok(Self {
            fd,
            malformed: 0,
            _record: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use collector_common::{block::BlockRequestData, Event, EventHeader, EventKind};

    use super::read_event;

    #[test]
    fn an_item_is_read_only_when_long_enough_and_of_its_kind() {
        let ev = Event {
            header: EventHeader {
                ts_ns: 7,
                cgroup_id: 9,
                pid: 42,
                tid: 43,
                kind: EventKind::BlockRequest as u32,
                _pad: 0,
            },
            data: BlockRequestData {
                sector: 1234,
                latency_ns: 5000,
                bytes: 4096,
                ..Default::default()
            },
        };
        // SAFETY: reading the bytes of a plain `#[repr(C)]` value.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&raw const ev).cast::<u8>(),
                size_of::<Event<BlockRequestData>>(),
            )
        };
        let got = read_event::<BlockRequestData>(bytes, EventKind::BlockRequest).expect("read");
        assert_eq!(
            (got.header.pid, got.data.sector, got.data.bytes),
            (42, 1234, 4096)
        );
        assert!(read_event::<BlockRequestData>(bytes, EventKind::Cuda).is_none());
        assert!(
            read_event::<BlockRequestData>(&bytes[..bytes.len() - 1], EventKind::BlockRequest)
                .is_none()
        );
    }
}

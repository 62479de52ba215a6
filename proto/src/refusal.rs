//! A refusal travels as the details of the gRPC status that ends a Stream
//! call ([`v1::Refusal`]), so a collector can tell a window it should resend
//! later from one it must drop.
use prost::Message as _;

use crate::v1;

impl v1::Refusal {
    /// The status ending a Stream call, with this refusal as its details.
    pub fn into_status(self, code: tonic::Code, message: impl Into<String>) -> tonic::Status {
        tonic::Status::with_details(
            code,
            message,
            prost::bytes::Bytes::from(self.encode_to_vec()),
        )
    }

    /// The refusal carried by `status`, if any (none from an older
    /// correlator, or on any other error).
    pub fn of(status: &tonic::Status) -> Option<Self> {
        if status.details().is_empty() {
            return None;
        }
        Self::decode(status.details()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_survives_the_status_round_trip_and_plain_errors_carry_none() {
        let r = v1::Refusal {
            instance: "i1".into(),
            seq: 7,
            reason: "clock_past".into(),
            permanent: true,
            min_end_unix_ms: 1_700_000_000_000,
        };
        let s = r.clone().into_status(tonic::Code::OutOfRange, "too old");
        assert_eq!(s.code(), tonic::Code::OutOfRange);
        assert_eq!(s.message(), "too old");
        assert_eq!(v1::Refusal::of(&s), Some(r));
        assert_eq!(v1::Refusal::of(&tonic::Status::unavailable("x")), None);
        let junk = tonic::Status::with_details(
            tonic::Code::Internal,
            "x",
            prost::bytes::Bytes::from_static(b"\xff\xff"),
        );
        assert_eq!(v1::Refusal::of(&junk), None);
    }
}

//! W3C Trace Context: the `traceparent` a caller sends in its gRPC metadata joins the
//! RPC's span as `trace_id` and `parent_id` fields, so the server's log lines for a
//! call can be found by the trace id the caller's own tracing shows. Only parsed and
//! recorded: no spans are exported (that would need an OpenTelemetry pipeline).

/// The ids of a valid `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent<'a> {
    /// The trace id: 32 lower-case hex digits, not all zero.
    pub trace_id: &'a str,
    /// The caller's span id: 16 lower-case hex digits, not all zero.
    pub parent_id: &'a str,
}

/// Parses a `traceparent` value; `None` for anything the spec says to ignore (a
/// version `ff`, wrong lengths, upper case, all-zero ids).
pub fn parse(value: &str) -> Option<TraceParent<'_>> {
    let mut parts = value.trim().split('-');
    let (version, trace_id, parent_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // A later version may add fields after the flags; version 00 may not.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    if !hex(version, 2) || version == "ff" || !hex(flags, 2) {
        return None;
    }
    if !hex(trace_id, 32) || !nonzero(trace_id) || !hex(parent_id, 16) || !nonzero(parent_id) {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
    })
}

/// The `traceparent` of a request's metadata, if it has a valid one.
pub fn from_metadata(metadata: &tonic::metadata::MetadataMap) -> Option<TraceParent<'_>> {
    parse(metadata.get("traceparent")?.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_gives_its_ids_and_others_are_ignored() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse(valid),
            Some(TraceParent {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
                parent_id: "00f067aa0ba902b7",
            })
        );
        // A future version may carry more fields.
        assert!(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
        for invalid in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert_eq!(parse(invalid), None, "{invalid}");
        }
    }
}

//! What the gRPC layer's RPC path records for every call: requests by method and status
//! code, unary durations, and open streams by kind. Fixed arrays of atomics indexed by
//! [`Method`]: no lock on the request path.

use std::{
    sync::atomic::{AtomicI64, AtomicU64, Ordering},
    time::Duration,
};

use super::{
    histogram::Histogram,
    text::{header, write_family, Kind},
};
use crate::method::{code_name, Method, CODE_NAMES};

/// gRPC status codes, by their number.
const CODES: usize = CODE_NAMES.len();

/// A server stream's kind, for `turnstile_streams_open{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Hold,
    Subscribe,
    Watch,
}

/// The RPC families' counters.
pub(super) struct RpcCounters {
    requests: [[AtomicU64; CODES]; Method::ALL.len()],
    durations: [Histogram; Method::ALL.len()],
    streams: [AtomicI64; 3],
}

impl Default for RpcCounters {
    fn default() -> Self {
        Self {
            // std's Default stops at arrays of 32.
            requests: std::array::from_fn(|_| Default::default()),
            durations: std::array::from_fn(|_| Histogram::default()),
            streams: Default::default(),
        }
    }
}

impl RpcCounters {
    pub(super) fn request(&self, method: Method, code: i32) {
        let code = usize::try_from(code).unwrap_or(2).min(CODES - 1);
        self.requests[method.index()][code].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn duration(&self, method: Method, elapsed: Duration) {
        self.durations[method.index()].observe(elapsed.as_secs_f64());
    }

    pub(super) fn stream(&self, kind: StreamKind, change: i64) {
        self.streams[kind as usize].fetch_add(change, Ordering::Relaxed);
    }

    pub(super) fn write(&self, out: &mut String) {
        write_family(
            out,
            (
                "turnstile_rpc_requests_total",
                Kind::Counter,
                "RPCs ended, by method and status code (streams when they end).",
            ),
            Method::ALL.into_iter().flat_map(|method| {
                (0..CODES).filter_map(move |code| {
                    let count = self.requests[method.index()][code].load(Ordering::Relaxed);
                    (count > 0).then(|| {
                        let name = code_name(code as i32);
                        (format!("method=\"{method}\",code=\"{name}\""), count)
                    })
                })
            }),
        );
        header(
            out,
            "turnstile_rpc_duration_seconds",
            Kind::Histogram,
            "Unary RPC durations, by method.",
        );
        for method in Method::ALL.into_iter().filter(|m| !m.is_stream()) {
            self.durations[method.index()].render(
                out,
                "turnstile_rpc_duration_seconds",
                &format!("method=\"{method}\""),
            );
        }
        write_family(
            out,
            (
                "turnstile_streams_open",
                Kind::Gauge,
                "Open server streams, by kind.",
            ),
            [
                ("hold", StreamKind::Hold),
                ("subscribe", StreamKind::Subscribe),
                ("watch", StreamKind::Watch),
            ]
            .map(|(kind, at)| {
                let open = self.streams[at as usize].load(Ordering::Relaxed);
                (format!("kind=\"{kind}\""), open)
            }),
        );
    }
}

//! What the two lease services (locks and semaphores) share on the wire: the rules of
//! `ttl` and `wait`, and a Hold stream's event as the message both Hold streams carry.

use std::time::Duration;

use super::{
    pb,
    proto_time::{timestamp_from_ms, DurationRule},
};
use crate::{
    limits::MAX_WAIT,
    lock::{hold::HoldEvent, DEFAULT_TTL, MAX_TTL, MIN_TTL},
};

/// The rule of every lease's `ttl` (the semaphores' too).
pub(super) const TTL: DurationRule = DurationRule {
    default: DEFAULT_TTL,
    min: MIN_TTL,
    max: MAX_TTL,
};
/// The rule of every `wait` (the semaphores' too).
pub(super) const WAIT: DurationRule = DurationRule {
    default: Duration::ZERO,
    min: Duration::ZERO,
    max: MAX_WAIT,
};

/// A Hold stream's event as the message both services' Hold streams carry.
pub(super) fn hold_event(event: HoldEvent) -> pb::hold_response::Event {
    use pb::hold_response::{Acquired, Event, Lost, Renewed};
    match event {
        HoldEvent::Acquired(lease) => Event::Acquired(Acquired {
            token: lease.token,
            fencing_token: lease.fencing_token,
            expires_at: Some(timestamp_from_ms(lease.expires_at_ms)),
        }),
        HoldEvent::Renewed(until) => Event::Renewed(Renewed {
            expires_at: Some(timestamp_from_ms(until)),
        }),
        HoldEvent::Lost(reason) => Event::Lost(Lost {
            reason: reason.to_owned(),
        }),
    }
}

//! The queue scripts, one `.lua` file per state change, each with `prelude.lua` (the
//! key layout, the packed task meta and the shared helpers) in front, so every script
//! is still one atomic EVALSHA. Also where a call's `KEYS` are put in script order.

use crate::redis::{keys::QueueKeys, Invocation, Script};

/// A queue script: `prelude.lua`, then its own file.
fn script(name: &'static str, body: &str) -> Script {
    Script::with_prelude(name, include_str!("prelude.lua"), body)
}

/// The queue scripts, loaded at boot.
#[derive(Debug)]
pub struct QueueScripts {
    pub(super) enqueue: Script,
    pub(super) lease: Script,
    pub(super) ack: Script,
    pub(super) nack: Script,
    pub(super) extend_lease: Script,
    pub(super) peek: Script,
    pub(super) cancel: Script,
    pub(super) redrive: Script,
    pub(super) stats: Script,
    pub(super) dispatch: Script,
    pub(super) attach: Script,
    pub(super) detach: Script,
    pub(super) give_back: Script,
}

impl QueueScripts {
    pub(super) fn new() -> Self {
        Self {
            enqueue: script("enqueue.lua", include_str!("enqueue.lua")),
            lease: script("lease.lua", include_str!("lease.lua")),
            ack: script("ack.lua", include_str!("ack.lua")),
            nack: script("nack.lua", include_str!("nack.lua")),
            extend_lease: script("extend_lease.lua", include_str!("extend_lease.lua")),
            peek: script("peek.lua", include_str!("peek.lua")).read_only(),
            cancel: script("cancel.lua", include_str!("cancel.lua")),
            redrive: script("redrive.lua", include_str!("redrive.lua")),
            stats: script("stats.lua", include_str!("stats.lua")).read_only(),
            dispatch: script("dispatch.lua", include_str!("dispatch.lua")),
            attach: script("attach.lua", include_str!("attach.lua")),
            detach: script("detach.lua", include_str!("detach.lua")),
            give_back: script("give_back.lua", include_str!("give_back.lua")),
        }
    }

    /// Every script, for `SCRIPT LOAD` at boot.
    pub fn all(&self) -> [&Script; 13] {
        [
            &self.enqueue,
            &self.lease,
            &self.ack,
            &self.nack,
            &self.extend_lease,
            &self.peek,
            &self.cancel,
            &self.redrive,
            &self.stats,
            &self.dispatch,
            &self.attach,
            &self.detach,
            &self.give_back,
        ]
    }
}

/// Starts a call of `script` with every key of the queue, in `KEYS` order.
pub(super) fn call<'a>(script: &'a Script, keys: &QueueKeys) -> Invocation<'a> {
    let mut call = script.key(&keys.all[0]);
    for key in &keys.all[1..] {
        call.key(key);
    }
    call
}

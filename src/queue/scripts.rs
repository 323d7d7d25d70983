//! The queue scripts: one file per state change in `lua/`, each assembled at build
//! time with the helpers of `lua/include/` it names (`--- @include "reclaim"`: the key
//! names, the packed task meta and the shared helpers), so each is one atomic EVALSHA
//! that carries only what it uses. Also where a call's `KEYS` are put in script order.

use crate::redis::{keys::QueueKeys, script::Source, Invocation, Script};

include!(concat!(env!("OUT_DIR"), "/lua_queue.rs"));

/// Starts a call of `script` with every key of the queue, in `KEYS` order.
pub(super) fn call<'a>(script: &'a Script, keys: &QueueKeys) -> Invocation<'a> {
    let mut call = script.key(&keys.all[0]);
    for key in &keys.all[1..] {
        call.key(key);
    }
    call
}

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

#[cfg(test)]
mod tests {
    use crate::redis::Keys;

    /// A script given keys after the queue's (`fire.lua`'s `fired`) finds them at
    /// `QUEUE_KEY_COUNT + 1`: a key added to the queue's must move them, and did not
    /// once (fire.lua wrote its records into the history hash).
    #[test]
    fn the_scripts_count_the_queue_keys_as_keys_rs_builds_them() {
        let count = Keys::new("t").queue("q").all.len();
        let lua = include_str!("lua/include/keys.lua");
        assert!(
            lua.contains(&format!("local QUEUE_KEY_COUNT = {count}\n")),
            "include/keys.lua must say QUEUE_KEY_COUNT = {count}"
        );
        assert!(
            lua.contains(&format!("KEYS[{count}]\n")),
            "the last key read"
        );
        assert!(!lua.contains(&format!("KEYS[{}]", count + 1)));
    }
}

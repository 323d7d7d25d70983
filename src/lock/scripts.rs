//! The lock scripts, one `.lua` file per state change, each with `prelude.lua` (the
//! packed lease) in front, so every script is still one atomic EVALSHA.

use crate::redis::Script;

/// The lock scripts, loaded at boot.
#[derive(Debug)]
pub struct LockScripts {
    pub(super) acquire: Script,
    pub(super) release: Script,
    pub(super) release_owner: Script,
    pub(super) extend: Script,
    pub(super) describe: Script,
}

/// A lock script: `prelude.lua` (the packed lease), then its own file.
fn script(name: &'static str, body: &str) -> Script {
    Script::with_prelude(name, include_str!("prelude.lua"), body)
}

impl LockScripts {
    pub(super) fn new() -> Self {
        Self {
            acquire: script("acquire.lua", include_str!("acquire.lua")),
            release: script("release.lua", include_str!("release.lua")),
            release_owner: script("release_owner.lua", include_str!("release_owner.lua")),
            extend: script("extend.lua", include_str!("extend.lua")),
            describe: script("describe.lua", include_str!("describe.lua")).read_only(),
        }
    }

    /// Every script, for `SCRIPT LOAD` at boot.
    pub fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.release,
            &self.release_owner,
            &self.extend,
            &self.describe,
        ]
    }
}

//! `Script`: a Lua source compiled into the binary with `include_str!`, run by SHA
//! (`EVALSHA`) and loaded again on `NOSCRIPT`, since a restarted Redis has an empty
//! script cache. The scripts are loaded at boot so the first request pays nothing.

/// One Lua script and its SHA1.
#[derive(Debug)]
pub struct Script {
    /// For logs: the file name, e.g. `acquire.lua`.
    pub name: &'static str,
    /// redis-rs' script: EVALSHA with the NOSCRIPT fallback.
    pub inner: redis::Script,
}

impl Script {
    /// A script named `name` with the Lua `source`.
    pub fn new(name: &'static str, source: &'static str) -> Self {
        Self {
            name,
            inner: redis::Script::new(source),
        }
    }

    /// A script named `name` whose source is `prelude` (the helpers its family of
    /// scripts shares) followed by `body`: still one script, one atomic EVALSHA.
    pub fn with_prelude(name: &'static str, prelude: &str, body: &str) -> Self {
        Self {
            name,
            inner: redis::Script::new(&format!("{prelude}{body}")),
        }
    }

    /// Starts an invocation with its first key.
    pub fn key(&self, key: impl redis::ToRedisArgs) -> redis::ScriptInvocation<'_> {
        self.inner.key(key)
    }
}

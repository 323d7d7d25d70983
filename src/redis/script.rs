//! `Script`: a Lua source compiled into the binary with `include_str!`, run by SHA
//! (`EVALSHA`) and loaded again on `NOSCRIPT`, since a restarted Redis has an empty
//! script cache. The scripts are loaded at boot so the first request pays nothing.
//!
//! An [`Invocation`] is our own rather than redis-rs' `ScriptInvocation`, because the
//! `EVALSHA` must be sent in one pipeline with a `WAIT` (`--redis-wait-replicas`), so
//! that both go down the same connection to the same node, and redis-rs does not hand
//! out the command it builds.

use redis::ToRedisArgs;

/// One Lua script and its SHA1.
#[derive(Debug)]
pub struct Script {
    /// For logs: the file name, e.g. `acquire.lua`.
    pub name: &'static str,
    /// redis-rs' script: the source and its SHA1, and `SCRIPT LOAD`.
    pub inner: redis::Script,
    /// Whether it may change state: only those wait for replicas.
    pub writes: bool,
}

impl Script {
    /// A script named `name` with the Lua `source`.
    pub fn new(name: &'static str, source: &'static str) -> Self {
        Self {
            name,
            inner: redis::Script::new(source),
            writes: true,
        }
    }

    /// A script named `name` whose source is `prelude` (the helpers its family of
    /// scripts shares) followed by `body`: still one script, one atomic EVALSHA.
    pub fn with_prelude(name: &'static str, prelude: &str, body: &str) -> Self {
        Self {
            name,
            inner: redis::Script::new(&format!("{prelude}{body}")),
            writes: true,
        }
    }

    /// The same script, marked as one that never writes (no `WAIT` after it).
    pub fn read_only(self) -> Self {
        Self {
            writes: false,
            ..self
        }
    }

    /// Starts an invocation with its first key.
    pub fn key(&self, key: impl ToRedisArgs) -> Invocation<'_> {
        let mut invocation = Invocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        };
        invocation.key(key);
        invocation
    }
}

/// One call of a [`Script`]: its keys and arguments.
pub struct Invocation<'a> {
    /// What runs.
    pub script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    /// Adds a key (`KEYS[n]`).
    pub fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument (`ARGV[n]`).
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `EVALSHA sha numkeys keys… args…`: routed by its first key on a cluster.
    pub fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.inner.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

//! `Script`: a Lua source assembled at build time (build.rs: a script's file with the
//! helpers it includes in front) and compiled into the binary, run by SHA
//! (`EVALSHA`) and loaded again on `NOSCRIPT`, since a restarted Redis has an empty
//! script cache. The scripts are loaded at boot so the first request pays nothing.
//!
//! An [`Invocation`] is our own rather than redis-rs' `ScriptInvocation`, because the
//! `EVALSHA` must be sent in one pipeline with a `WAIT` (`--redis-wait-replicas`), so
//! that both go down the same connection to the same node, and redis-rs does not hand
//! out the command it builds.

use std::fmt::Write as _;

use redis::ToRedisArgs;

/// A script's source as build.rs assembled it: its own file with the helpers it
/// includes in front.
#[derive(Debug)]
pub struct Source {
    /// Its file name, e.g. `acquire.lua`.
    pub name: &'static str,
    /// The whole script, as Redis runs it.
    pub text: &'static str,
    /// Where its lines come from: (first line in `text`, file, that line's number in
    /// the file), in order.
    pub parts: &'static [(usize, &'static str, usize)],
}

/// The first line of a script that never writes: Redis itself then refuses a write
/// from it (and runs it on a read-only replica).
pub const NO_WRITES: &str = "#!lua flags=no-writes";

/// A line of a script that writes, but whose answer tells the caller nothing was
/// stored (Peek and Stats: their only writes return expired leases, which any later
/// script would return again), so its call does not wait for replicas.
pub const NO_REPLICA_WAIT: &str = "--- @no-replica-wait";

impl Source {
    /// The file and line that line `line` of the assembled script comes from.
    pub fn locate(&self, line: usize) -> Option<(&'static str, usize)> {
        let &(start, file, first) = self
            .parts
            .iter()
            .rev()
            .find(|(start, _, _)| *start <= line)?;
        Some((file, first + (line - start)))
    }

    /// `message` (a Redis error) with each `user_script:N` it names replaced by the
    /// file and line of ours that line comes from.
    pub fn explain(&self, message: &str) -> String {
        let marker = "user_script:";
        let mut out = String::with_capacity(message.len() + 32);
        let mut rest = message;
        while let Some(at) = rest.find(marker) {
            out.push_str(&rest[..at]);
            let after = &rest[at + marker.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            match after[..digits]
                .parse()
                .ok()
                .and_then(|line| self.locate(line))
            {
                Some((file, line)) => {
                    let _ = write!(out, "{file}:{line}");
                }
                None => out.push_str(&rest[at..at + marker.len() + digits]),
            }
            rest = &after[digits..];
        }
        out.push_str(rest);
        out
    }
}

/// One Lua script and its SHA1.
#[derive(Debug)]
pub struct Script {
    /// Where it comes from, for errors that name a line.
    pub source: &'static Source,
    /// redis-rs' script: the source and its SHA1, and `SCRIPT LOAD`.
    pub inner: redis::Script,
    /// Whether it may change state: all but those opening with [`NO_WRITES`], which
    /// Redis holds to it.
    pub writes: bool,
    /// Whether its call waits for replicas (`--redis-wait-replicas`): every script
    /// that writes, but those marked [`NO_REPLICA_WAIT`].
    pub confirms: bool,
}

impl Script {
    /// The script build.rs assembled as `source`.
    pub fn assembled(source: &'static Source) -> Self {
        let writes = !source.text.starts_with(NO_WRITES);
        Self {
            source,
            inner: redis::Script::new(source.text),
            writes,
            confirms: writes && !source.text.lines().any(|line| line == NO_REPLICA_WAIT),
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

#[cfg(test)]
mod tests {
    use super::Source;

    static SOURCE: Source = Source {
        name: "ack.lua",
        text: "-- a\n-- b\n-- c\n-- d\n-- e\n",
        parts: &[(1, "include/now.lua", 1), (3, "ack.lua", 2)],
    };

    #[test]
    fn a_line_of_the_assembled_script_is_located_in_its_own_file() {
        assert_eq!(SOURCE.locate(1), Some(("include/now.lua", 1)));
        assert_eq!(SOURCE.locate(2), Some(("include/now.lua", 2)));
        assert_eq!(SOURCE.locate(3), Some(("ack.lua", 2)));
        assert_eq!(SOURCE.locate(5), Some(("ack.lua", 4)));
        assert_eq!(
            SOURCE.explain("ERR user_script:4: boom script: 3ac7, on @user_script:4."),
            "ERR ack.lua:3: boom script: 3ac7, on @ack.lua:3."
        );
        assert_eq!(SOURCE.explain("ERR user_script:x"), "ERR user_script:x");
    }
}

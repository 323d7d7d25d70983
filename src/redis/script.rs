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

use redis::{RedisWrite, ToRedisArgs};

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
            keys: Packed::default(),
            args: Packed::default(),
        };
        invocation.key(key);
        invocation
    }
}

/// One call of a [`Script`]: its keys and arguments.
pub struct Invocation<'a> {
    /// What runs.
    pub script: &'a Script,
    keys: Packed,
    args: Packed,
}

impl Invocation<'_> {
    /// Adds a key (`KEYS[n]`).
    pub fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[n]`).
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA sha numkeys keys… args…`: routed by its first key on a cluster.
    pub fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.inner.get_hash()).arg(self.keys.len());
        for part in self.keys.iter().chain(self.args.iter()) {
            cmd.arg(part);
        }
        cmd
    }
}

/// Arguments end to end in one buffer, as a command holds them: `to_redis_args` made
/// a vector per argument, and a lock call has eleven (2.7% of a lock cycle's server
/// instructions went to adding them, `bench cost`).
#[derive(Default)]
struct Packed {
    bytes: Vec<u8>,
    /// Where each argument ends in `bytes`.
    ends: Vec<usize>,
}

impl Packed {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }
}

impl RedisWrite for Packed {
    fn write_arg(&mut self, arg: &[u8]) {
        self.bytes.extend_from_slice(arg);
        self.ends.push(self.bytes.len());
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.ends.push(self.bytes.len());
        NextArg(self)
    }
}

/// Writes one argument at the end of a [`Packed`], moving its end as it grows.
struct NextArg<'a>(&'a mut Packed);

impl std::io::Write for NextArg<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.bytes.extend_from_slice(buf);
        if let Some(end) = self.0.ends.last_mut() {
            *end = self.0.bytes.len();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Packed, Source};

    #[test]
    fn packed_arguments_come_back_one_by_one_as_written() {
        use redis::{RedisWrite, ToRedisArgs};
        let mut packed = Packed::default();
        "key".write_redis_args(&mut packed);
        b"".as_slice().write_redis_args(&mut packed);
        42_i64.write_redis_args(&mut packed);
        vec!["a", "bc"].write_redis_args(&mut packed);
        std::io::Write::write_all(&mut packed.writer_for_next_arg(), b"x").unwrap();
        std::io::Write::write_all(&mut packed.writer_for_next_arg(), b"").unwrap();
        let parts: Vec<&[u8]> = packed.iter().collect();
        assert_eq!(parts, [&b"key"[..], b"", b"42", b"a", b"bc", b"x", b""]);
        assert_eq!(packed.len(), 7);
    }

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

//! The only place Redis keys are built.
//!
//! Layout: `<prefix>:<kind>:{<encoded name>}[:<part>]`. The name is encoded so that it
//! holds no `{` or `}` (`%` → `%25`, `{` → `%7B`, `}` → `%7D`), which makes the braces
//! we add the key's Redis Cluster hash tag: every key of one lock or one queue lands in
//! one slot, whatever the name (`LockRoom:{42}` included), so every script is
//! single-slot. The prefix may hold no braces either (checked in `config`). A tenant
//! namespace, later, becomes one more component here and nowhere else.

/// Builds every key and channel name under one `--key-prefix`.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

/// The keys of one lock name, all in one hash slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockKeys {
    /// A string holding the packed lease (token, waited, fencing, expires_at, owner,
    /// request_id; layout in `src/lock/prelude.lua`), its PX = the lease.
    pub lock: String,
    /// The last fencing token handed out for this name; outlives the lease.
    pub fence: String,
}

/// The keys of one queue, all in one hash slot; see `src/queue/prelude.lua` for what
/// each holds. The order is the order of `KEYS` in every queue script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueKeys {
    /// Every key, in script order: pending, inflight, dead, tasks, payloads, reserved,
    /// seq, leased.
    pub all: [String; 8],
}

impl QueueKeys {
    /// The pending zset (READY and DELAYED tasks), also the queue's wake-up message.
    pub fn pending(&self) -> &str {
        &self.all[0]
    }
}

impl Keys {
    /// Keys under `prefix` (already validated: non-empty, no braces).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The keys of the lock `name`.
    pub fn lock(&self, name: &str) -> LockKeys {
        let lock = format!("{}:lock:{{{}}}", self.prefix, encode(name));
        LockKeys {
            fence: format!("{lock}:fence"),
            lock,
        }
    }

    /// Sorted set of the lock names `owner` may hold (score: lease end, Unix ms), for
    /// `ReleaseAll`. It lives in the owner's slot, not the locks'.
    pub fn owner_locks(&self, owner: &str) -> String {
        format!("{}:owner:{{{}}}", self.prefix, encode(owner))
    }

    /// The pub/sub channel a released lock is announced on (message: its lock key).
    pub fn lock_released_channel(&self) -> String {
        format!("{}:events:lock-released", self.prefix)
    }

    /// The keys of the queue `name`.
    pub fn queue(&self, name: &str) -> QueueKeys {
        let base = format!("{}:queue:{{{}}}", self.prefix, encode(name));
        QueueKeys {
            all: [
                "pending", "inflight", "dead", "tasks", "payloads", "reserved", "seq", "leased",
            ]
            .map(|part| format!("{base}:{part}")),
        }
    }

    /// The channel on which a queue with newly due (or newly scheduled) tasks is
    /// announced (message: its pending key).
    pub fn queue_changed_channel(&self) -> String {
        format!("{}:events:queue-changed", self.prefix)
    }

    /// The channel on which a freed Subscribe slot is announced (message: the
    /// subscription's worker tag).
    pub fn slot_freed_channel(&self) -> String {
        format!("{}:events:slot-freed", self.prefix)
    }
}

/// Percent-encodes the three characters that could move or break a hash tag.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of `encode`: a round trip proves no two names share a key.
    fn decode(encoded: &str) -> Option<String> {
        let mut out = String::with_capacity(encoded.len());
        let mut rest = encoded;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            let code = rest.get(at + 1..at + 3)?;
            out.push(match code {
                "25" => '%',
                "7B" => '{',
                "7D" => '}',
                _ => return None,
            });
            rest = &rest[at + 3..];
        }
        out.push_str(rest);
        Some(out)
    }

    /// The lock name back from a lock key.
    fn lock_name(keys: &Keys, lock_key: &str) -> Option<String> {
        let rest = lock_key
            .strip_prefix(&keys.prefix)?
            .strip_prefix(":lock:{")?;
        decode(rest.strip_suffix('}')?)
    }

    /// The hash tag Redis Cluster would use for `key`: the text between the first `{`
    /// and the next `}`, when non-empty.
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{') {
            if let Some(len) = key[open + 1..].find('}') {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
        key
    }

    #[test]
    fn every_key_of_a_lock_shares_one_hash_tag_even_with_braces_in_the_name() {
        let keys = Keys::new("turnstile");
        for name in [
            "plain",
            "LockRoom:{42}",
            "}{",
            "{}",
            "%7B",
            "a{b}c{d}",
            "é:{ü}",
        ] {
            let lock = keys.lock(name);
            assert_eq!(hash_tag(&lock.lock), hash_tag(&lock.fence), "{name}");
            assert!(!hash_tag(&lock.lock).contains(['{', '}']), "{name}");
            assert_eq!(lock_name(&keys, &lock.lock).as_deref(), Some(name));
        }
    }

    #[test]
    fn every_key_of_a_queue_shares_one_hash_tag() {
        let keys = Keys::new("turnstile");
        for name in ["jobs", "mail:{eu}", "}"] {
            let queue = keys.queue(name);
            let tag = hash_tag(queue.pending());
            assert!(queue.all.iter().all(|key| hash_tag(key) == tag), "{name}");
        }
        assert_eq!(
            keys.queue("mail:{eu}").pending(),
            "turnstile:queue:{mail:%7Beu%7D}:pending"
        );
    }

    #[test]
    fn different_names_never_share_a_key() {
        let keys = Keys::new("turnstile");
        assert_ne!(keys.lock("%7B").lock, keys.lock("{").lock);
        assert_ne!(keys.lock("a}").lock, keys.lock("a%7D").lock);
        assert_eq!(
            keys.lock("LockRoom:{42}").lock,
            "turnstile:lock:{LockRoom:%7B42%7D}"
        );
    }
}

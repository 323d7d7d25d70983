//! The only place Redis keys and pub/sub channels are built.
//!
//! Layout: `<space>:<kind>:{<encoded name>}[:<part>]`, where `<space>` is the
//! `--key-prefix` for the tenant `default` (the layout from before tenants, so its data
//! is still found) and `<prefix>:t:<encoded tenant>` for every other tenant. The name
//! is encoded so that it holds no `{` or `}` (`%` → `%25`, `{` → `%7B`, `}` → `%7D`),
//! which makes the braces we add the key's Redis Cluster hash tag: every key of one
//! lock or one queue lands in one slot, whatever the name (`LockRoom:{42}` included),
//! so every script is single-slot. The tenant is encoded the same way and also loses
//! its `:` (`%3A`), so it is exactly one component: no tenant name, and no lock or
//! queue name, can spell another tenant's key. The prefix may hold no braces (checked
//! in `config`).
//!
//! Channels: `<prefix>:events:<event>:<encoded tenant>`; one pattern per event
//! (`events_pattern`) hears every tenant's.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use super::slots;
use crate::tenant::Tenant;

/// Builds every key and channel name of one tenant under one `--key-prefix`. Cheap to
/// clone; [`Keys::tenant`] gives another tenant's builder.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: Arc<str>,
    /// Where this tenant's keys start: the prefix, or `<prefix>:t:<encoded tenant>`.
    space: Arc<str>,
    /// The tenant, encoded: the last component of its channels.
    tenant: Arc<str>,
    /// On a Redis Cluster: indexes kept per hash slot (see [`LockKeys::index`]).
    slot_indexes: bool,
    /// The queues' keys built so far, shared by every tenant's builder of this prefix.
    queues: Arc<QueueKeyCache>,
}

/// The most queues whose keys [`Keys::queue`] keeps; past it, it starts over.
const QUEUE_KEYS_KEPT: usize = 4096;

/// The keys of the queues named so far, by key space and name. Every call on a queue
/// needs its 17 keys, and formatting them on each call costs 8.5% of the server's CPU
/// under `bench queue` (2026-11-27 profile), so a busy queue's calls look them up.
/// Bounded by [`QUEUE_KEYS_KEPT`] (about 1 KB each).
#[derive(Default)]
struct QueueKeyCache(Mutex<QueueKeysKept>);

#[derive(Default)]
struct QueueKeysKept {
    by_space: HashMap<Arc<str>, HashMap<Box<str>, Arc<QueueKeys>>>,
    count: usize,
}

impl fmt::Debug for QueueKeyCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).count;
        write!(f, "QueueKeyCache({kept} queues)")
    }
}

/// The keys of one lock name, all in one hash slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockKeys {
    /// A string holding the packed lease (token, waited, fencing, expires_at, owner,
    /// request_id; layout in `src/lock/lua/include/lease.lua`), its PX = the lease.
    pub lock: String,
    /// The last fencing token handed out for this name; outlives the lease.
    pub fence: String,
    /// Set while a Watch stream watches the name (`src/lock/lua/watch.lua`), so that
    /// a win publishes lock-changed.
    pub watched: String,
    /// The index of held locks that `ListLocks` reads, written by the lock scripts: a
    /// zset, name -> lease end (Unix ms). On one Redis the tenant has one; on a
    /// cluster one per hash slot, tagged to land on the lock's own slot (so that the
    /// scripts stay single-slot), and the slots in use are listed in
    /// [`Keys::lock_slots`].
    pub index: String,
    /// On a cluster, the slot of `index` (and of the lock).
    pub slot: Option<u16>,
}

/// The keys of one semaphore name, all in one hash slot, in the order of `KEYS` in
/// every semaphore script (`src/semaphore/lua/acquire.lua` says what each holds):
/// holders, line, leases, sem (the hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreKeys {
    /// Every key, in script order.
    pub all: [String; 4],
}

/// The keys of one queue, all in one hash slot; see `src/queue/lua/include/keys.lua` for what
/// each holds. The order is the order of `KEYS` in every queue script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueKeys {
    /// Every key, in script order: pending, inflight, dead, tasks, payloads, reserved,
    /// seq, leased, counters, then flow control's config, ready, ranked, rotation,
    /// groups, wakeups, group_index, the dashboard's history, each task's last error,
    /// progress, delivery history and result, the kept COMPLETED and CANCELLED tasks,
    /// the ids someone waits for, and the ends told to them, kept a while for a
    /// waiter that did not hear them (`src/queue/lua/include/keys.lua` says what each
    /// holds).
    pub all: [String; 26],
}

impl SemaphoreKeys {
    /// The hash: the key a script call is routed by.
    pub fn sem(&self) -> &str {
        &self.all[3]
    }
}

impl QueueKeys {
    /// The pending zset (READY and DELAYED tasks), also the queue's wake-up message.
    pub fn pending(&self) -> &str {
        &self.all[0]
    }

    /// The dashboard's per-minute history (`src/queue/lua/include/history.lua`).
    pub fn history(&self) -> &str {
        &self.all[16]
    }

    /// The Subscribe deliveries by stream tag (`src/queue/lua/include/keys.lua`).
    pub fn leased(&self) -> &str {
        &self.all[7]
    }
}

/// The pub/sub events: each has one channel per tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A released lock (message: its lock key).
    LockReleased,
    /// A queue with newly due or newly scheduled tasks (message: its pending key).
    QueueChanged,
    /// A freed Subscribe slot (message: the subscription's worker tag).
    SlotFreed,
    /// A watched lock won by a new holder (message: its lock key).
    LockChanged,
    /// A schedule put or deleted (message: the schedule's name; the tenant is the
    /// channel's last component).
    ScheduleChanged,
    /// Semaphore waiters that may go now (message: their tickets, space-separated).
    SemaphoreWake,
    /// A task someone waits for is done (message: its queue's pending key and the
    /// task, `src/queue/lua/include/announce.lua`).
    TaskDone,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Self::LockReleased => "lock-released",
            Self::QueueChanged => "queue-changed",
            Self::SlotFreed => "slot-freed",
            Self::LockChanged => "lock-changed",
            Self::ScheduleChanged => "schedule-changed",
            Self::SemaphoreWake => "semaphore-wake",
            Self::TaskDone => "task-done",
        }
    }
}

impl Keys {
    /// The keys of the tenant `default` under `prefix` (already validated: non-empty,
    /// no braces).
    pub fn new(prefix: impl Into<String>) -> Self {
        let prefix: Arc<str> = prefix.into().into();
        Self {
            space: prefix.clone(),
            prefix,
            tenant: encode_tenant(crate::tenant::DEFAULT_TENANT).into(),
            slot_indexes: false,
            queues: Arc::default(),
        }
    }

    /// The same keys, with indexes kept per hash slot (a Redis Cluster).
    pub fn with_slot_indexes(mut self) -> Self {
        self.slot_indexes = true;
        self
    }

    /// The same prefix, for `tenant`'s keys.
    pub fn tenant(&self, tenant: &Tenant) -> Self {
        // Without auth every call is the default tenant's, on keys that are already
        // its own: nothing to build.
        if tenant.is_default() && Arc::ptr_eq(&self.space, &self.prefix) {
            return self.clone();
        }
        let encoded = encode_tenant(tenant.as_str());
        let space = if tenant.is_default() {
            self.prefix.clone()
        } else {
            format!("{}:t:{encoded}", self.prefix).into()
        };
        Self {
            prefix: self.prefix.clone(),
            space,
            tenant: encoded.into(),
            slot_indexes: self.slot_indexes,
            queues: self.queues.clone(),
        }
    }

    /// The keys of the lock `name`.
    pub fn lock(&self, name: &str) -> LockKeys {
        // Built on every lock call (two a cycle), so each key is one allocation of its
        // exact size (`concat`): `format!` grew each String several times (3.6% of a
        // lock cycle's server instructions, `bench cost`). So are the semaphore's, the
        // owner index's and the event channels.
        let encoded = encode(name);
        let lock = concat(&[&self.space, ":lock:{", &encoded, "}"]);
        let slot = self.slot_indexes.then(|| slots::slot_of_tag(&encoded));
        LockKeys {
            fence: concat(&[&lock, ":fence"]),
            watched: concat(&[&lock, ":watched"]),
            lock,
            index: self.lock_index(slot),
            slot,
        }
    }

    /// Whether indexes are kept per hash slot (a Redis Cluster).
    pub fn has_slot_indexes(&self) -> bool {
        self.slot_indexes
    }

    /// The index of held locks on `slot` (a cluster), or the tenant's one (`None`).
    pub fn lock_index(&self, slot: Option<u16>) -> String {
        match slot {
            Some(slot) => format!("{}:locks:{{{}}}", self.space, slots::tag_of_slot(slot)),
            None => concat(&[&self.space, ":locks:{", &self.tenant, "}"]),
        }
    }

    /// On a cluster, the slots whose lock index holds (or held) this tenant's locks: a
    /// set of slot numbers in the tenant's slot.
    pub fn lock_slots(&self) -> String {
        format!("{}:lock-slots:{{{}}}", self.space, self.tenant)
    }

    /// The keys of the semaphore `name` (its own name space, beside the locks').
    pub fn semaphore(&self, name: &str) -> SemaphoreKeys {
        let sem = concat(&[&self.space, ":semaphore:{", &encode(name), "}"]);
        SemaphoreKeys {
            all: [
                concat(&[&sem, ":holders"]),
                concat(&[&sem, ":line"]),
                concat(&[&sem, ":leases"]),
                sem,
            ],
        }
    }

    /// Sorted set of the lock names `owner` may hold (score: lease end, Unix ms), for
    /// `ReleaseAll`. It lives in the owner's slot, not the locks'.
    pub fn owner_locks(&self, owner: &str) -> String {
        concat(&[&self.space, ":owner:{", &encode(owner), "}"])
    }

    /// The keys of the queue `name`, built once and then kept (see [`QueueKeyCache`]).
    pub fn queue(&self, name: &str) -> Arc<QueueKeys> {
        let mut kept = self.queues.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = kept
            .by_space
            .get(&*self.space)
            .and_then(|names| names.get(name))
        {
            return keys.clone();
        }
        if kept.count >= QUEUE_KEYS_KEPT {
            kept.by_space.clear();
            kept.count = 0;
        }
        let keys = Arc::new(self.build_queue(name));
        kept.by_space
            .entry(self.space.clone())
            .or_default()
            .insert(name.into(), keys.clone());
        kept.count += 1;
        keys
    }

    fn build_queue(&self, name: &str) -> QueueKeys {
        let base = format!("{}:queue:{{{}}}", self.space, encode(name));
        QueueKeys {
            all: [
                "pending",
                "inflight",
                "dead",
                "tasks",
                "payloads",
                "reserved",
                "seq",
                "leased",
                "counters",
                "config",
                "ready",
                "ranked",
                "rotation",
                "groups",
                "wakeups",
                "group_index",
                "history",
                "errors",
                "progress",
                "attempts",
                "results",
                "completed",
                "cancelled",
                "watched",
                "told",
                "told_until",
            ]
            .map(|part| format!("{base}:{part}")),
        }
    }

    /// This tenant's open Subscribe streams over every replica (the dashboard's Workers
    /// page): a hash on the tenant's slot, field = the stream's session, value =
    /// `src/queue/workers.rs`'s record.
    pub fn workers(&self) -> String {
        format!("{}:workers:{{{}}}", self.space, self.tenant)
    }

    /// A replica's liveness: set with a short expiry and refreshed while it runs, so
    /// the streams a dead replica registered are dropped from the Workers page.
    /// Prefix-wide (a replica serves every tenant), in its own slot.
    pub fn replica_alive(&self, replica: &str) -> String {
        format!("{}:replica:{{{}}}", self.prefix, encode(replica))
    }

    /// This tenant's queue registry, on one slot: the names of its queues that hold a
    /// task or a config (a zset, all score 0, by name), and when a server last named
    /// each (a hash, name -> Unix ms).
    pub fn queue_registry(&self) -> (String, String) {
        let registry = format!("{}:queues:{{{}}}", self.space, self.tenant);
        let named = format!("{registry}:named");
        (registry, named)
    }

    /// Where a schedule of `schedule`'s name records the fire times it enqueued into
    /// `queue`: a hash on the queue's slot (field: the schedule's name), written by the
    /// same script as the task (`src/queue/lua/fire.lua` says what each value holds).
    pub fn queue_fired(&self, queue: &str) -> String {
        format!("{}:queue:{{{}}}:fired", self.space, encode(queue))
    }

    /// This tenant's schedules, on one slot: their definitions (a hash, name -> JSON,
    /// `src/schedule/record.rs`), their names (a zset, all score 0, for paging by name)
    /// and since when each fires (`src/schedule/lua/put_schedule.lua`).
    pub fn schedules(&self) -> [String; 3] {
        let defs = format!("{}:schedules:{{{}}}", self.space, self.tenant);
        let names = format!("{defs}:names");
        let since = format!("{defs}:since");
        [defs, names, since]
    }

    /// A dashboard session: the SHA-256 (hex) of the token it signed in with, expiring
    /// with the session. Prefix-wide (the token says the tenant), in its own slot.
    pub fn session(&self, id: &str) -> String {
        format!("{}:session:{{{}}}", self.prefix, encode(id))
    }

    /// The tenants that have (or had) schedules, for every server to load at start: a
    /// set of tenant names, one key for the whole prefix.
    pub fn schedule_tenants(&self) -> String {
        format!("{}:schedule-tenants", self.prefix)
    }

    /// The tenant whose channel is `channel` (the inverse of [`Keys::channel`]'s last
    /// component), if it is one of ours.
    pub fn tenant_of_channel(channel: &str) -> Option<String> {
        decode(channel.rsplit_once(':')?.1)
    }

    /// This tenant's channel for `event`.
    pub fn channel(&self, event: Event) -> String {
        concat(&[&self.prefix, ":events:", event.as_str(), ":", &self.tenant])
    }

    /// The pattern (`PSUBSCRIBE`) matching every tenant's channel for `event`; the
    /// prefix's glob characters are escaped.
    pub fn events_pattern(&self, event: Event) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 32);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        format!("{pattern}:events:{}:*", event.as_str())
    }
}

/// `parts` joined, in one allocation of the exact size.
fn concat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

/// Percent-encodes the characters that could move or break a hash tag, and `%`
/// itself. A name's `:` stays (it is inside the braces, where it cannot end one).
fn encode(name: &str) -> String {
    escape(name, false)
}

/// Like [`encode`], and `:` too: a tenant is one component of a key or channel.
fn encode_tenant(tenant: &str) -> String {
    escape(tenant, true)
}

fn escape(text: &str, colon: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' if colon => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// The inverse of [`encode`] and [`encode_tenant`] (a round trip in the tests proves
/// no two names share a key).
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
            "3A" => ':',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock name back from a lock key.
    fn lock_name(keys: &Keys, lock_key: &str) -> Option<String> {
        let rest = lock_key
            .strip_prefix(&*keys.prefix)?
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

    /// The Redis Cluster slot of `key`: the slot of its hash tag (`redis/slots.rs`).
    fn slot(key: &str) -> u16 {
        slots::slot_of_tag(hash_tag(key))
    }

    #[test]
    fn the_slot_function_agrees_with_redis_cluster() {
        // CLUSTER KEYSLOT answers, and the CRC16 check value of the spec.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
    }

    #[test]
    fn every_scripts_key_list_is_on_one_cluster_slot_for_every_tenant_and_name() {
        // On a cluster, as the server builds them there (per-slot lock indexes).
        let prefix = Keys::new("turnstile").with_slot_indexes();
        for tenant in TRICKY_TENANTS {
            let keys = prefix.tenant(&Tenant::new("tenant", tenant).unwrap());
            // (An empty name, which would hash the whole key, is refused as INVALID_ARGUMENT.)
            for name in TRICKY_NAMES
                .iter()
                .chain(&["LockRoom:{42}", "a{b}c{d}", "{}"])
            {
                // The lock scripts take [lock, fence, watched, index] (acquire), [lock,
                // watched] (watch), [lock, index] (release, extend, release_owner) and
                // the lock alone (describe).
                let lock = keys.lock(name);
                assert_eq!(slot(&lock.lock), slot(&lock.fence), "{tenant} {name}");
                assert_eq!(slot(&lock.lock), slot(&lock.watched), "{tenant} {name}");
                assert_eq!(slot(&lock.lock), slot(&lock.index), "{tenant} {name}");
                assert_eq!(Some(slot(&lock.lock)), lock.slot, "{tenant} {name}");
                // Every semaphore script takes its four keys.
                let semaphore = keys.semaphore(name);
                for key in &semaphore.all {
                    assert_eq!(slot(key), slot(semaphore.sem()), "{tenant} {name} {key}");
                }
                // Every queue script takes all nine queue keys.
                let queue = keys.queue(name);
                let first = slot(&queue.all[0]);
                for key in &queue.all {
                    assert_eq!(slot(key), first, "{tenant} {name} {key}");
                }
            }
        }
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
            assert_eq!(hash_tag(&lock.lock), hash_tag(&lock.watched), "{name}");
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
    fn kept_queue_keys_are_the_ones_built_for_that_tenant_and_name() {
        let keys = Keys::new("turnstile");
        let acme = keys.tenant(&Tenant::new("tenant", "acme").unwrap());
        let jobs = keys.queue("jobs");
        assert!(Arc::ptr_eq(&jobs, &keys.queue("jobs")), "built once");
        assert_eq!(*jobs, keys.build_queue("jobs"));
        // Another tenant's queue of the same name, through the shared cache.
        assert_eq!(*acme.queue("jobs"), acme.build_queue("jobs"));
        assert_ne!(acme.queue("jobs").pending(), jobs.pending());
        assert_eq!(*keys.queue("job"), keys.build_queue("job"));
        // Past the bound it starts over, and still answers right.
        for n in 0..QUEUE_KEYS_KEPT + 10 {
            let name = format!("q{n}");
            assert_eq!(*acme.queue(&name), acme.build_queue(&name));
        }
        assert!(keys.queues.0.lock().unwrap().count <= QUEUE_KEYS_KEPT);
        assert_eq!(*keys.queue("jobs"), keys.build_queue("jobs"));
        assert_eq!(*acme.queue("jobs"), acme.build_queue("jobs"));
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

    /// The tenant and lock name back from a lock key: what a key says is all there is
    /// to know about whose it is.
    fn lock_owner(prefix: &str, key: &str) -> Option<(String, String)> {
        let rest = key.strip_prefix(prefix)?;
        let (tenant, rest) = match rest.strip_prefix(":t:") {
            Some(rest) => {
                let end = rest.find(':')?;
                (decode(&rest[..end])?, &rest[end..])
            }
            None => (crate::tenant::DEFAULT_TENANT.to_owned(), rest),
        };
        let name = decode(rest.strip_prefix(":lock:{")?.strip_suffix('}')?)?;
        Some((tenant, name))
    }

    const TRICKY_TENANTS: [&str; 10] = [
        "default",
        "shop",
        "sho",
        "shop:lock",
        "a:t:b",
        "{x}",
        "%3A",
        ":",
        "t",
        "shop%",
    ];
    const TRICKY_NAMES: [&str; 8] = [
        "x",
        "lock:{x}",
        "t:shop:lock:{x}",
        "}",
        "{",
        "%7D",
        ":",
        "shop",
    ];

    #[test]
    fn no_tenant_or_name_can_spell_another_tenants_key() {
        let root = Keys::new("turnstile");
        let mut seen = std::collections::HashMap::new();
        for tenant in TRICKY_TENANTS {
            let keys = root.tenant(&Tenant::new("tenant", tenant).unwrap());
            for name in TRICKY_NAMES {
                let lock = keys.lock(name);
                assert_eq!(
                    lock_owner("turnstile", &lock.lock),
                    Some((tenant.to_owned(), name.to_owned())),
                    "{tenant} / {name}: {}",
                    lock.lock
                );
                assert!(!hash_tag(&lock.lock).contains(['{', '}']));
                let queue = keys.queue(name).pending().to_owned();
                for key in [lock.lock, lock.fence, queue, keys.owner_locks(name)] {
                    if let Some(earlier) = seen.insert(key.clone(), (tenant, name)) {
                        panic!("{key} is both {earlier:?} and {:?}", (tenant, name));
                    }
                }
            }
        }
    }

    #[test]
    fn the_default_tenant_keeps_the_layout_from_before_tenants() {
        let root = Keys::new("turnstile");
        let default = root.tenant(&Tenant::default());
        assert_eq!(default.lock("a").lock, "turnstile:lock:{a}");
        assert_eq!(root.lock("a").lock, "turnstile:lock:{a}");
        let shop = root.tenant(&Tenant::new("tenant", "sh:op").unwrap());
        assert_eq!(shop.lock("a").lock, "turnstile:t:sh%3Aop:lock:{a}");
        let keys = shop.lock("x{y}%");
        assert_eq!(
            [keys.lock, keys.fence, keys.watched, keys.index],
            [
                "turnstile:t:sh%3Aop:lock:{x%7By%7D%25}",
                "turnstile:t:sh%3Aop:lock:{x%7By%7D%25}:fence",
                "turnstile:t:sh%3Aop:lock:{x%7By%7D%25}:watched",
                "turnstile:t:sh%3Aop:locks:{sh%3Aop}",
            ]
        );
        assert_eq!(
            shop.queue("a").pending(),
            "turnstile:t:sh%3Aop:queue:{a}:pending"
        );
    }

    #[test]
    fn each_tenant_has_its_own_channels_and_one_pattern_hears_them_all() {
        let root = Keys::new("turn*stile");
        let mut channels = std::collections::HashSet::new();
        for tenant in TRICKY_TENANTS {
            let keys = root.tenant(&Tenant::new("tenant", tenant).unwrap());
            let channel = keys.channel(Event::SlotFreed);
            assert!(channel.starts_with("turn*stile:events:slot-freed:"));
            assert!(channels.insert(channel));
        }
        assert_eq!(
            root.events_pattern(Event::SlotFreed),
            "turn\\*stile:events:slot-freed:*"
        );
    }
}

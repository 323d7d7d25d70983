//! Listing a tenant's queues (`ListQueues`) and a queue's groups (`ListGroups`), by
//! name, a page at a time.
//!
//! A queue's keys live on its own slot, so the tenant's queue names are kept apart,
//! in its registry (`Keys::queue_registry`: the names by name, and when a server last
//! named each): a server names a queue there before it enqueues into it or
//! configures it, at most once a [`RELIST`] per queue. A listing shows every registered queue; one found empty with the default
//! config is taken off only when no server named it for [`STALE`] (`unlist.lua`), so a
//! queue in use is never lost from the listing and one emptied moments ago may still
//! show with zeros. A queue's groups are on its slot (`list_groups.lua`).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use redis::Value;

use super::{
    model::{Stats, TaskState},
    scripts::call,
    GroupConfig, QueueConfig, QueueStore,
};
use crate::{
    error::{Error, Result},
    redis::reply::{int, string},
    tenant::Tenant,
    time::now_ms,
};

/// How often a server names a queue it uses in the registry again.
pub const RELIST: Duration = Duration::from_secs(60);
/// How long no server must have named an empty queue before it leaves the registry.
pub const STALE: Duration = Duration::from_secs(600);
/// The most queue names a server remembers having listed (then it forgets them all).
const REMEMBERED: usize = 100_000;

/// The queues this server named in their tenants' registries lately, by tenant and
/// name (looked up by reference: an Enqueue allocates nothing here).
#[derive(Default)]
pub(super) struct Listed(Mutex<Remembered>);

#[derive(Default)]
struct Remembered {
    by_tenant: HashMap<Tenant, HashMap<String, Instant>>,
    len: usize,
}

impl Listed {
    /// Whether `queue` of `tenant` is to be named in its registry now (and notes that
    /// it is).
    fn due(&self, tenant: &Tenant, queue: &str) -> bool {
        let mut listed = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        if let Some(at) = listed
            .by_tenant
            .get_mut(tenant)
            .and_then(|queues| queues.get_mut(queue))
        {
            if now.duration_since(*at) < RELIST {
                return false;
            }
            *at = now;
            return true;
        }
        if listed.len >= REMEMBERED {
            *listed = Remembered::default();
        }
        listed.len += 1;
        listed
            .by_tenant
            .entry(tenant.clone())
            .or_default()
            .insert(queue.to_owned(), now);
        true
    }
}

/// One queue of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSummary {
    pub queue: String,
    pub stats: Stats,
}

/// One group of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub group: String,
    pub ready: u64,
    pub delayed: u64,
    pub in_flight: u64,
    pub dead: u64,
    pub config: GroupConfig,
}

/// A page, and the name to list after for the next one (None: the last page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub after: Option<String>,
}

impl QueueStore {
    /// Names `queue` in the tenant's registry, unless this server did lately.
    pub(super) async fn name_queue(&self, queue: &str) -> Result<()> {
        if self.listed.due(&self.tenant, queue) {
            let (registry, named) = self.redis.keys.queue_registry();
            let mut pipe = redis::pipe();
            pipe.cmd("ZADD").arg(&registry).arg("NX").arg(0).arg(queue);
            pipe.cmd("HSET").arg(&named).arg(queue).arg(now_ms());
            self.redis.query_pipe(&pipe).await?;
        }
        Ok(())
    }

    /// A page of the tenant's queues whose names start with `prefix`, after `after`.
    pub async fn list_queues(
        &self,
        prefix: &str,
        after: Option<&str>,
        size: usize,
    ) -> Result<Page<QueueSummary>> {
        let (registry, named) = self.redis.keys.queue_registry();
        let mut from = Vec::with_capacity(prefix.len() + 1);
        match after {
            Some(after) if after >= prefix => {
                from.push(b'(');
                from.extend_from_slice(after.as_bytes());
            }
            _ => {
                from.push(b'[');
                from.extend_from_slice(prefix.as_bytes());
            }
        }
        // UTF-8 never holds 0xff: every name with the prefix sorts before it.
        let to: Vec<u8> = if prefix.is_empty() {
            b"+".to_vec()
        } else {
            [b"(", prefix.as_bytes(), &[0xff]].concat()
        };
        let names: Vec<String> = self
            .redis
            .query(
                redis::cmd("ZRANGE")
                    .arg(&registry)
                    .arg(from)
                    .arg(to)
                    .arg("BYLEX")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(size + 1),
            )
            .await?;
        let more = names.len() > size;
        let mut items = Vec::with_capacity(size.min(names.len()));
        for name in names.iter().take(size) {
            let stats = self.stats(name).await?;
            let empty = stats.ready + stats.delayed + stats.in_flight + stats.dead == 0;
            if empty && stats.config == QueueConfig::default() {
                let cutoff = now_ms() - STALE.as_millis() as i64;
                let mut unlist = self.scripts.unlist.key(&registry);
                unlist.key(&named);
                unlist.arg(name).arg(cutoff);
                let gone: i64 = self.redis.invoke(&unlist).await?;
                if gone == 1 {
                    continue;
                }
            }
            items.push(QueueSummary {
                queue: name.clone(),
                stats,
            });
        }
        Ok(Page {
            items,
            after: more.then(|| names[size - 1].clone()),
        })
    }

    /// A page of `queue`'s groups that hold a task or a config, after `after`.
    pub async fn list_groups(
        &self,
        queue: &str,
        after: Option<&str>,
        size: usize,
    ) -> Result<Page<GroupSummary>> {
        let keys = self.keys(queue);
        let mut call = call(&self.scripts.list_groups, &keys);
        call.arg(after.unwrap_or_default())
            .arg(if after.is_some() { "1" } else { "0" })
            .arg(size);
        let reply: Vec<Value> = self.invoke_reclaiming(&call).await?;
        let rows = reply.get(1..).unwrap_or_default();
        if !rows.len().is_multiple_of(7) {
            return Err(Error::Internal(format!(
                "list_groups replied {} values",
                reply.len()
            )));
        }
        let items = rows
            .chunks(7)
            .map(|r| {
                Ok(GroupSummary {
                    group: string(r, 0)?,
                    ready: int(r, 1)? as u64,
                    delayed: int(r, 2)? as u64,
                    in_flight: int(r, 3)? as u64,
                    dead: int(r, 4)? as u64,
                    config: GroupConfig {
                        paused: int(r, 5)? == 1,
                        weight: (int(r, 6)? as u32).max(1),
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let more = int(&reply, 0)? == 1;
        Ok(Page {
            after: more
                .then(|| items.last().map(|g| g.group.clone()))
                .flatten(),
            items,
        })
    }
}

/// Where a page of a state's tasks (`ListTasks`, the dashboard's tabs) goes on: the
/// score and member of the last entry a page looked at in the state's zset
/// (`lua/list_tasks.lua`). As a token: "t1." and the hex of "<state>\n<score>\n<member>",
/// so a token of another state's listing is refused.
pub struct TaskCursor;

/// The longest task page token (hex of state, score and member).
const MAX_TASK_TOKEN: usize = 4 * 1024;

impl TaskCursor {
    /// The token of `cursor` ('' for none: the last page).
    pub fn token(state: TaskState, cursor: Option<&(String, String)>) -> String {
        let Some((score, member)) = cursor else {
            return String::new();
        };
        let mut token = String::from("t1.");
        for byte in format!("{}\n{score}\n{member}", state.as_script_arg()).bytes() {
            token.push_str(&format!("{byte:02x}"));
        }
        token
    }

    /// The cursor a token continues after (none for '': the first page); one not made
    /// for `state`'s listing is INVALID_ARGUMENT naming `field`.
    pub fn from_token(
        field: &'static str,
        state: TaskState,
        token: &str,
    ) -> Result<Option<(String, String)>> {
        if token.is_empty() {
            return Ok(None);
        }
        let refused = || Error::invalid(field, "not a page token of this listing");
        let hex = token.strip_prefix("t1.").ok_or_else(refused)?;
        if hex.len() % 2 != 0 || hex.len() > MAX_TASK_TOKEN {
            return Err(refused());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| refused())?;
        let text = String::from_utf8(bytes).map_err(|_| refused())?;
        let mut parts = text.splitn(3, '\n');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(name), Some(score), Some(member)) if name == state.as_script_arg() => {
                Ok(Some((score.to_owned(), member.to_owned())))
            }
            _ => Err(refused()),
        }
    }
}

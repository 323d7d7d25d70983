//! Who may do what. A bearer token from the `--auth-file` names a tenant and the
//! permissions it has; the gRPC layer's `Authorized` (`grpc/auth.rs`) checks it once per call, before any
//! handler runs or any message is decoded, and puts the [`Caller`] in the request.
//! Handlers scope every store call to the caller's tenant, which `redis/keys.rs` turns
//! into a key space of its own.
//!
//! The file is re-read on SIGHUP ([`Auth::reload`]); a file that does not parse keeps
//! the old one. Open streams watch for it: when their token is removed (or loses the
//! permission or tenant they were opened with) they end with UNAUTHENTICATED or
//! PERMISSION_DENIED (`grpc/auth.rs`'s `Revocable`).
//!
//! A token is never kept, logged or compared in the clear: only its SHA-256 is, and
//! hashes are compared in constant time.

mod file;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use tokio::sync::watch;

pub use crate::tenant::Tenant;
use crate::{
    error::{Error, Result},
    method::{Method, LOCK_SERVICE, QUEUE_SERVICE, SCHEDULE_SERVICE, SEMAPHORE_SERVICE},
    shutdown::Shutdown,
};

/// What a token may do; each RPC needs exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// Every LockService RPC.
    Lock,
    /// Enqueue.
    Produce,
    /// Lease, Ack, Nack, ExtendLease, Subscribe.
    Consume,
    /// Peek, Stats, Cancel, Redrive, ConfigureQueue, ConfigureGroup, ListQueues,
    /// ListGroups.
    Admin,
    /// Every ScheduleService RPC: `produce` or `admin` lets it through (a schedule
    /// produces tasks; an operator manages schedules). Not a name in the auth file.
    Schedule,
    /// GetTask, Wait and ListTasks: `produce` or `consume` lets it through (whoever made a task
    /// or works on it may read its story), and `admin` (the dashboard's). Not a name in
    /// the auth file.
    Outcome,
}

impl Permission {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "lock" => Self::Lock,
            "produce" => Self::Produce,
            "consume" => Self::Consume,
            "admin" => Self::Admin,
            _ => return None,
        })
    }

    /// The name the auth file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::Admin => "admin",
            Self::Schedule => "produce` or `admin",
            Self::Outcome => "produce`, `consume` or `admin",
        }
    }

    /// The bits of the permissions that let a call needing this one through.
    fn bits(self) -> u8 {
        match self {
            Self::Schedule => Self::Produce.bits() | Self::Admin.bits(),
            Self::Outcome => Self::Produce.bits() | Self::Consume.bits() | Self::Admin.bits(),
            own => 1 << own as u8,
        }
    }

    /// The permission `method` needs.
    pub fn for_method(method: Method) -> Self {
        match method {
            Method::Acquire
            | Method::Release
            | Method::Extend
            | Method::Describe
            | Method::ReleaseAll
            | Method::Hold
            | Method::CheckFence
            | Method::Watch
            | Method::SemaphoreAcquire
            | Method::SemaphoreRelease
            | Method::SemaphoreExtend
            | Method::SemaphoreDescribe
            | Method::SemaphoreHold => Self::Lock,
            Method::Enqueue => Self::Produce,
            Method::Lease
            | Method::Ack
            | Method::Nack
            | Method::ExtendLease
            | Method::Subscribe => Self::Consume,
            Method::Peek
            | Method::Cancel
            | Method::Redrive
            | Method::Stats
            | Method::ConfigureQueue
            | Method::ConfigureGroup
            | Method::ListQueues
            | Method::ListGroups
            | Method::ListLocks => Self::Admin,
            Method::GetTask | Method::Wait | Method::ListTasks => Self::Outcome,
            Method::PutSchedule
            | Method::GetSchedule
            | Method::ListSchedules
            | Method::DeleteSchedule
            | Method::TriggerSchedule => Self::Schedule,
        }
    }

    /// The permission a call on an HTTP/2 path needs (`/turnstile.v1.QueueService/Ack`);
    /// `None` for paths outside our services (health, reflection). A path of our
    /// services that names no [`Method`] (one a newer client knows) needs `Admin`, so
    /// that nothing of ours is ever reached without a token.
    pub fn for_path(path: &str) -> Option<Self> {
        if let Some(method) = Method::from_path(path) {
            return Some(Self::for_method(method));
        }
        let service = path.strip_prefix('/')?.split_once('/')?.0;
        [
            LOCK_SERVICE,
            QUEUE_SERVICE,
            SCHEDULE_SERVICE,
            SEMAPHORE_SERVICE,
        ]
        .contains(&service)
        .then_some(Self::Admin)
    }
}

/// A set of [`Permission`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions(u8);

impl Permissions {
    /// None at all.
    pub const NONE: Self = Self(0);

    /// This set and `permission`.
    pub fn with(self, permission: Permission) -> Self {
        Self(self.0 | permission.bits())
    }

    /// Whether `permission` is in the set.
    pub fn has(self, permission: Permission) -> bool {
        self.0 & permission.bits() != 0
    }
}

/// One `[[token]]` of the auth file.
#[derive(Clone, Debug)]
pub struct Grant {
    hash: [u8; 32],
    tenant: Tenant,
    permissions: Permissions,
}

/// Who gets in.
#[derive(Clone, Debug)]
pub enum Policy {
    /// No auth file: everyone is the tenant `default` with every permission.
    Open,
    /// Only holders of these tokens, each in its tenant.
    Tokens(Vec<Grant>),
}

impl Policy {
    /// The grant of the token whose SHA-256 is `hash`. Every grant is compared, each
    /// in constant time, so the time taken says nothing about which bytes matched.
    fn grant(&self, hash: &[u8; 32]) -> Option<&Grant> {
        let Policy::Tokens(grants) = self else {
            return None;
        };
        let mut found = None;
        for grant in grants {
            if constant_time_eq(&grant.hash, hash) {
                found = Some(grant);
            }
        }
        found
    }
}

/// What the auth check learned about a call: put in the request's extensions by
/// the gRPC layer's `Authorized` and read by its RPC path.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The key space every store call of this request is scoped to.
    pub tenant: Tenant,
    /// The permission the call needed.
    permission: Permission,
    /// The SHA-256 of its token; `None` when auth is off.
    hash: Option<[u8; 32]>,
    /// Where to watch for the token's revocation.
    auth: Auth,
}

impl Caller {
    /// Completes when this caller's token no longer allows what it was let in for:
    /// it was removed or moved to another tenant (UNAUTHENTICATED) or lost the
    /// permission (PERMISSION_DENIED). Never, when auth is off.
    pub async fn revoked(&self) -> Error {
        let Some(hash) = self.hash else {
            return std::future::pending().await;
        };
        let mut changes = self.auth.changed.subscribe();
        loop {
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
            let policy = self.auth.policy();
            match policy.grant(&hash) {
                Some(grant) if grant.tenant != self.tenant => {
                    return Error::Unauthenticated("the token now belongs to another tenant".into())
                }
                Some(grant) if !grant.permissions.has(self.permission) => {
                    return Error::PermissionDenied(format!(
                        "the token no longer has the `{}` permission",
                        self.permission.name()
                    ))
                }
                Some(_) => {}
                None => return Error::Unauthenticated("the bearer token was revoked".into()),
            }
        }
    }
}

/// Who a dashboard request is: the tenant it sees and whether it may act on it.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// The only tenant its pages show.
    pub tenant: Tenant,
    /// The token has `admin`: the pages offer actions.
    pub admin: bool,
}

/// The shared auth state: the policy in force and a signal when it changes. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct Auth {
    /// The `--auth-file`, `None` when auth is off.
    path: Option<Arc<PathBuf>>,
    policy: Arc<RwLock<Arc<Policy>>>,
    /// Bumped on every reload that changed the policy; open streams watch it.
    changed: watch::Sender<u64>,
}

impl Auth {
    /// Auth off: everyone is the tenant `default` with every permission.
    pub fn open() -> Self {
        Self::with(None, Policy::Open)
    }

    /// Tokens from `path`; an error (which never quotes the file) if it cannot be read
    /// or parsed.
    pub fn from_file(path: &Path) -> std::result::Result<Self, String> {
        let policy = read(path)?;
        Ok(Self::with(Some(Arc::new(path.to_owned())), policy))
    }

    fn with(path: Option<Arc<PathBuf>>, policy: Policy) -> Self {
        Self {
            path,
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            changed: watch::channel(0).0,
        }
    }

    /// Re-reads the auth file on every SIGHUP until shutdown: the new tokens apply at
    /// once, or, if the file is broken, the old ones stay and the log says why.
    pub fn spawn_reloader(&self, shutdown: &Shutdown) {
        if !self.is_on() {
            return;
        }
        let mut hangups = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::hangup(),
        ) {
            Ok(hangups) => hangups,
            Err(err) => {
                tracing::warn!(cause = %err, "cannot watch SIGHUP; the auth file is read only at start");
                return;
            }
        };
        let (auth, stop) = (self.clone(), shutdown.clone());
        shutdown.spawn(async move {
            loop {
                tokio::select! {
                    _ = hangups.recv() => match auth.reload() {
                        Ok(tokens) => tracing::info!(tokens, "auth file reloaded"),
                        Err(why) => tracing::warn!(cause = %why, "auth file not reloaded; the old tokens stay"),
                    },
                    () = stop.cancelled() => return,
                }
            }
        });
    }

    /// Whether callers need a token.
    pub fn is_on(&self) -> bool {
        self.path.is_some()
    }

    fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the auth file again. On success the new tokens apply to the next call
    /// and open streams re-check theirs; on failure the old ones stay and the reason
    /// is returned.
    pub fn reload(&self) -> std::result::Result<usize, String> {
        let Some(path) = &self.path else {
            return Ok(0);
        };
        let policy = read(path)?;
        let tokens = match &policy {
            Policy::Tokens(grants) => grants.len(),
            Policy::Open => 0,
        };
        *self
            .policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(policy);
        self.changed.send_modify(|generation| *generation += 1);
        Ok(tokens)
    }

    /// The caller of `path` with `authorization` metadata (its value, if any):
    /// UNAUTHENTICATED without a known token, PERMISSION_DENIED when the token lacks
    /// the method's permission. `None` for a path outside our services.
    pub fn check(&self, path: &str, authorization: Option<&[u8]>) -> Option<Result<Caller>> {
        let permission = Permission::for_path(path)?;
        let policy = self.policy();
        if let Policy::Open = *policy {
            return Some(Ok(Caller {
                tenant: Tenant::default(),
                permission,
                hash: None,
                auth: self.clone(),
            }));
        }
        Some(self.check_token(&policy, permission, authorization))
    }

    /// Who a dashboard request is, from its `Authorization` header's value: any known
    /// token sees its own tenant (read only without `admin`); with auth off, the
    /// tenant `default`, with every permission.
    pub fn viewer(&self, authorization: Option<&[u8]>) -> Result<Viewer> {
        let policy = self.policy();
        if let Policy::Open = *policy {
            return Ok(Viewer {
                tenant: Tenant::default(),
                admin: true,
            });
        }
        let token = bearer(authorization.ok_or_else(|| {
            Error::Unauthenticated(
                "the dashboard needs a bearer token: send `Authorization: Bearer <token>`".into(),
            )
        })?)?;
        self.viewer_of(&sha256(token))
    }

    /// The viewer whose token hashes to `hash` (a dashboard session keeps the hash, never
    /// the token), as the policy in force says now: a token removed or moved on reload
    /// is UNAUTHENTICATED from its next request on. With auth off, the tenant `default`.
    pub fn viewer_of(&self, hash: &[u8; 32]) -> Result<Viewer> {
        let policy = self.policy();
        if let Policy::Open = *policy {
            return Ok(Viewer {
                tenant: Tenant::default(),
                admin: true,
            });
        }
        let grant = policy
            .grant(hash)
            .ok_or_else(|| Error::Unauthenticated("unknown bearer token".into()))?;
        Ok(Viewer {
            tenant: grant.tenant.clone(),
            admin: grant.permissions.has(Permission::Admin),
        })
    }

    fn check_token(
        &self,
        policy: &Policy,
        permission: Permission,
        authorization: Option<&[u8]>,
    ) -> Result<Caller> {
        let token = bearer(authorization.ok_or_else(|| {
            Error::Unauthenticated("missing `authorization: Bearer <token>` metadata".into())
        })?)?;
        let hash = sha256(token);
        let grant = policy
            .grant(&hash)
            .ok_or_else(|| Error::Unauthenticated("unknown bearer token".into()))?;
        if !grant.permissions.has(permission) {
            return Err(Error::PermissionDenied(format!(
                "this token lacks the `{}` permission",
                permission.name()
            )));
        }
        Ok(Caller {
            tenant: grant.tenant.clone(),
            permission,
            hash: Some(hash),
            auth: self.clone(),
        })
    }
}

fn read(path: &Path) -> std::result::Result<Policy, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    file::parse(&text).map_err(|why| format!("{}: {why}", path.display()))
}

/// The token of an `authorization` value: `Bearer <token>` (the scheme in any case).
fn bearer(value: &[u8]) -> Result<&str> {
    let value = std::str::from_utf8(value)
        .map_err(|_| Error::Unauthenticated("the authorization metadata is not text".into()))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(Error::Unauthenticated(
            "the authorization metadata must be `Bearer <token>`".into(),
        )),
    }
}

/// The SHA-256 of `token`, as the auth file lists it.
pub fn sha256(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

/// Equal or not, in a time that depends on neither value.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the compiler from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_needs_the_permission_the_contract_names() {
        let cases = [
            ("/turnstile.v1.LockService/Acquire", Some(Permission::Lock)),
            (
                "/turnstile.v1.LockService/ReleaseAll",
                Some(Permission::Lock),
            ),
            (
                "/turnstile.v1.QueueService/Enqueue",
                Some(Permission::Produce),
            ),
            (
                "/turnstile.v1.QueueService/Subscribe",
                Some(Permission::Consume),
            ),
            (
                "/turnstile.v1.QueueService/ExtendLease",
                Some(Permission::Consume),
            ),
            (
                "/turnstile.v1.QueueService/Redrive",
                Some(Permission::Admin),
            ),
            ("/turnstile.v1.QueueService/Newer", Some(Permission::Admin)),
            ("/grpc.health.v1.Health/Check", None),
            (
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                None,
            ),
        ];
        for (path, wanted) in cases {
            assert_eq!(Permission::for_path(path), wanted, "{path}");
        }
    }

    #[test]
    fn only_a_bearer_value_carries_a_token() {
        assert_eq!(bearer(b"Bearer abc").unwrap(), "abc");
        assert_eq!(bearer(b"bearer  abc ").unwrap(), "abc");
        assert!(bearer(b"Basic abc").is_err());
        assert!(bearer(b"Bearer ").is_err());
        assert!(bearer(b"abc").is_err());
        assert!(bearer(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn hashes_compare_equal_only_when_equal() {
        let a = sha256("a");
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
    }
}

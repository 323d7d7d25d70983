//! The names of the RPCs and of gRPC's status codes, as one type the router, the
//! permissions and the metrics share: a method is a [`Method`], never a string that a
//! typo could turn into a silently dropped metric or a wrong permission.

/// One RPC of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    // LockService
    Acquire,
    Release,
    Extend,
    Describe,
    ReleaseAll,
    Hold,
    CheckFence,
    Watch,
    ListLocks,
    // QueueService
    Enqueue,
    Lease,
    Ack,
    Nack,
    ExtendLease,
    Peek,
    Cancel,
    Redrive,
    Stats,
    ConfigureQueue,
    ConfigureGroup,
    ListQueues,
    ListGroups,
    Subscribe,
    GetTask,
    Wait,
    ListTasks,
    // ScheduleService
    PutSchedule,
    GetSchedule,
    ListSchedules,
    DeleteSchedule,
    TriggerSchedule,
    // SemaphoreService: the RPCs are named `Acquire`, `Release`, ... as the locks'; the
    // variants (and the metrics' `method` label) carry the service's name.
    SemaphoreAcquire,
    SemaphoreRelease,
    SemaphoreExtend,
    SemaphoreDescribe,
    SemaphoreHold,
}

/// The gRPC services the methods belong to.
pub const LOCK_SERVICE: &str = "turnstile.v1.LockService";
/// See [`LOCK_SERVICE`].
pub const QUEUE_SERVICE: &str = "turnstile.v1.QueueService";
/// See [`LOCK_SERVICE`].
pub const SCHEDULE_SERVICE: &str = "turnstile.v1.ScheduleService";
/// See [`LOCK_SERVICE`].
pub const SEMAPHORE_SERVICE: &str = "turnstile.v1.SemaphoreService";

impl Method {
    /// Every method, in the order of [`Method::index`].
    pub const ALL: [Method; 36] = [
        Method::Acquire,
        Method::Release,
        Method::Extend,
        Method::Describe,
        Method::ReleaseAll,
        Method::Hold,
        Method::CheckFence,
        Method::Watch,
        Method::ListLocks,
        Method::Enqueue,
        Method::Lease,
        Method::Ack,
        Method::Nack,
        Method::ExtendLease,
        Method::Peek,
        Method::Cancel,
        Method::Redrive,
        Method::Stats,
        Method::ConfigureQueue,
        Method::ConfigureGroup,
        Method::ListQueues,
        Method::ListGroups,
        Method::Subscribe,
        Method::GetTask,
        Method::Wait,
        Method::ListTasks,
        Method::PutSchedule,
        Method::GetSchedule,
        Method::ListSchedules,
        Method::DeleteSchedule,
        Method::TriggerSchedule,
        Method::SemaphoreAcquire,
        Method::SemaphoreRelease,
        Method::SemaphoreExtend,
        Method::SemaphoreDescribe,
        Method::SemaphoreHold,
    ];

    /// Its position in [`Method::ALL`], for tables indexed by method.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name as the `.proto` spells it (`ExtendLease`; `Acquire` for both
    /// services' Acquire).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::SemaphoreAcquire => "Acquire",
            Method::SemaphoreRelease => "Release",
            Method::SemaphoreExtend => "Extend",
            Method::SemaphoreDescribe => "Describe",
            Method::SemaphoreHold => "Hold",
            other => other.label(),
        }
    }

    /// The name unique over every service, for metrics and logs: the RPC's name, but
    /// `SemaphoreAcquire` for `SemaphoreService.Acquire`.
    pub fn label(self) -> &'static str {
        match self {
            Method::Acquire => "Acquire",
            Method::Release => "Release",
            Method::Extend => "Extend",
            Method::Describe => "Describe",
            Method::ReleaseAll => "ReleaseAll",
            Method::Hold => "Hold",
            Method::CheckFence => "CheckFence",
            Method::Watch => "Watch",
            Method::ListLocks => "ListLocks",
            Method::Enqueue => "Enqueue",
            Method::Lease => "Lease",
            Method::Ack => "Ack",
            Method::Nack => "Nack",
            Method::ExtendLease => "ExtendLease",
            Method::Peek => "Peek",
            Method::Cancel => "Cancel",
            Method::Redrive => "Redrive",
            Method::Stats => "Stats",
            Method::ConfigureQueue => "ConfigureQueue",
            Method::ConfigureGroup => "ConfigureGroup",
            Method::ListQueues => "ListQueues",
            Method::ListGroups => "ListGroups",
            Method::Subscribe => "Subscribe",
            Method::GetTask => "GetTask",
            Method::Wait => "Wait",
            Method::ListTasks => "ListTasks",
            Method::PutSchedule => "PutSchedule",
            Method::GetSchedule => "GetSchedule",
            Method::ListSchedules => "ListSchedules",
            Method::DeleteSchedule => "DeleteSchedule",
            Method::TriggerSchedule => "TriggerSchedule",
            Method::SemaphoreAcquire => "SemaphoreAcquire",
            Method::SemaphoreRelease => "SemaphoreRelease",
            Method::SemaphoreExtend => "SemaphoreExtend",
            Method::SemaphoreDescribe => "SemaphoreDescribe",
            Method::SemaphoreHold => "SemaphoreHold",
        }
    }

    /// The service it belongs to ([`LOCK_SERVICE`], [`QUEUE_SERVICE`],
    /// [`SCHEDULE_SERVICE`] or [`SEMAPHORE_SERVICE`]).
    pub fn service(self) -> &'static str {
        match self {
            Method::Acquire
            | Method::Release
            | Method::Extend
            | Method::Describe
            | Method::ReleaseAll
            | Method::Hold
            | Method::CheckFence
            | Method::Watch
            | Method::ListLocks => LOCK_SERVICE,
            Method::Enqueue
            | Method::Lease
            | Method::Ack
            | Method::Nack
            | Method::ExtendLease
            | Method::Peek
            | Method::Cancel
            | Method::Redrive
            | Method::Stats
            | Method::ConfigureQueue
            | Method::ConfigureGroup
            | Method::ListQueues
            | Method::ListGroups
            | Method::Subscribe
            | Method::GetTask
            | Method::Wait
            | Method::ListTasks => QUEUE_SERVICE,
            Method::PutSchedule
            | Method::GetSchedule
            | Method::ListSchedules
            | Method::DeleteSchedule
            | Method::TriggerSchedule => SCHEDULE_SERVICE,
            Method::SemaphoreAcquire
            | Method::SemaphoreRelease
            | Method::SemaphoreExtend
            | Method::SemaphoreDescribe
            | Method::SemaphoreHold => SEMAPHORE_SERVICE,
        }
    }

    /// Whether it answers with a server stream (its calls are counted when they end,
    /// and have no duration).
    pub fn is_stream(self) -> bool {
        matches!(
            self,
            Method::Hold | Method::Subscribe | Method::Watch | Method::SemaphoreHold
        )
    }

    /// The method an HTTP/2 path (`/turnstile.v1.LockService/Acquire`) calls, if it is
    /// one of ours. Every call's auth check asks this, so it is a match, not a search
    /// of [`Method::ALL`]; the unit test below holds it to `service` and `as_str`.
    pub fn from_path(path: &str) -> Option<Method> {
        let (service, name) = path.strip_prefix('/')?.split_once('/')?;
        Some(match (service, name) {
            (LOCK_SERVICE, "Acquire") => Method::Acquire,
            (LOCK_SERVICE, "Release") => Method::Release,
            (LOCK_SERVICE, "Extend") => Method::Extend,
            (LOCK_SERVICE, "Describe") => Method::Describe,
            (LOCK_SERVICE, "ReleaseAll") => Method::ReleaseAll,
            (LOCK_SERVICE, "Hold") => Method::Hold,
            (LOCK_SERVICE, "CheckFence") => Method::CheckFence,
            (LOCK_SERVICE, "Watch") => Method::Watch,
            (LOCK_SERVICE, "ListLocks") => Method::ListLocks,
            (QUEUE_SERVICE, "Enqueue") => Method::Enqueue,
            (QUEUE_SERVICE, "Lease") => Method::Lease,
            (QUEUE_SERVICE, "Ack") => Method::Ack,
            (QUEUE_SERVICE, "Nack") => Method::Nack,
            (QUEUE_SERVICE, "ExtendLease") => Method::ExtendLease,
            (QUEUE_SERVICE, "Peek") => Method::Peek,
            (QUEUE_SERVICE, "Cancel") => Method::Cancel,
            (QUEUE_SERVICE, "Redrive") => Method::Redrive,
            (QUEUE_SERVICE, "Stats") => Method::Stats,
            (QUEUE_SERVICE, "ConfigureQueue") => Method::ConfigureQueue,
            (QUEUE_SERVICE, "ConfigureGroup") => Method::ConfigureGroup,
            (QUEUE_SERVICE, "ListQueues") => Method::ListQueues,
            (QUEUE_SERVICE, "ListGroups") => Method::ListGroups,
            (QUEUE_SERVICE, "Subscribe") => Method::Subscribe,
            (QUEUE_SERVICE, "GetTask") => Method::GetTask,
            (QUEUE_SERVICE, "Wait") => Method::Wait,
            (QUEUE_SERVICE, "ListTasks") => Method::ListTasks,
            (SCHEDULE_SERVICE, "PutSchedule") => Method::PutSchedule,
            (SCHEDULE_SERVICE, "GetSchedule") => Method::GetSchedule,
            (SCHEDULE_SERVICE, "ListSchedules") => Method::ListSchedules,
            (SCHEDULE_SERVICE, "DeleteSchedule") => Method::DeleteSchedule,
            (SCHEDULE_SERVICE, "TriggerSchedule") => Method::TriggerSchedule,
            (SEMAPHORE_SERVICE, "Acquire") => Method::SemaphoreAcquire,
            (SEMAPHORE_SERVICE, "Release") => Method::SemaphoreRelease,
            (SEMAPHORE_SERVICE, "Extend") => Method::SemaphoreExtend,
            (SEMAPHORE_SERVICE, "Describe") => Method::SemaphoreDescribe,
            (SEMAPHORE_SERVICE, "Hold") => Method::SemaphoreHold,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// gRPC's status codes by number, spelled as gRPC spells them (`UNAVAILABLE`), as
/// grpcurl and the other languages' clients print them.
pub const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The name of status code `code` (`UNKNOWN` for a number gRPC does not define).
pub fn code_name(code: i32) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|at| CODE_NAMES.get(at))
        .copied()
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_through_its_path_and_index() {
        for (at, method) in Method::ALL.into_iter().enumerate() {
            assert_eq!(method.index(), at);
            let path = format!("/{}/{}", method.service(), method.as_str());
            assert_eq!(Method::from_path(&path), Some(method), "{path}");
        }
        assert_eq!(Method::from_path("/turnstile.v1.LockService/Enqueue"), None);
        assert_eq!(Method::from_path("/turnstile.v1.QueueService/Nope"), None);
        assert_eq!(Method::from_path("/grpc.health.v1.Health/Check"), None);
    }

    #[test]
    fn code_names_are_grpcs() {
        assert_eq!(code_name(0), "OK");
        assert_eq!(code_name(14), "UNAVAILABLE");
        assert_eq!(code_name(16), "UNAUTHENTICATED");
        assert_eq!(code_name(17), "UNKNOWN");
        assert_eq!(code_name(-1), "UNKNOWN");
    }
}

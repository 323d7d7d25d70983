//! Who may do what (contract: "Who may do what: tenants, tokens, TLS"): bearer tokens
//! from the auth file, one permission per RPC, tenants as separate key spaces that no
//! RPC and no name trick can cross, reload on SIGHUP, no token in any log, and TLS.

use crate::common;

use std::path::PathBuf;

use common::*;
use tokio_stream::StreamExt;
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{interceptor::InterceptedService, Interceptor},
    transport::Channel,
    Code, Request, Status,
};
use turnstile::pb::{
    self, hold_response, lock_service_client::LockServiceClient,
    queue_service_client::QueueServiceClient, subscribe_response,
};

/// Adds `authorization: Bearer <token>` to every call (nothing without a token).
#[derive(Clone)]
struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Locks = LockServiceClient<InterceptedService<Channel, Bearer>>;
type Queues = QueueServiceClient<InterceptedService<Channel, Bearer>>;
type Schedules =
    pb::schedule_service_client::ScheduleServiceClient<InterceptedService<Channel, Bearer>>;

/// A schedule client on `channel` that sends `token`.
fn schedules_client(channel: Channel, token: Option<&str>) -> Schedules {
    let bearer = Bearer(token.map(|t| format!("Bearer {t}").parse().expect("ascii token")));
    pb::schedule_service_client::ScheduleServiceClient::with_interceptor(channel, bearer)
}

type Semaphores =
    pb::semaphore_service_client::SemaphoreServiceClient<InterceptedService<Channel, Bearer>>;

/// Schedule and semaphore clients on `channel` that send `token`.
fn other_clients(channel: Channel, token: Option<&str>) -> (Schedules, Semaphores) {
    let bearer = Bearer(token.map(|t| format!("Bearer {t}").parse().expect("ascii token")));
    (
        schedules_client(channel.clone(), token),
        pb::semaphore_service_client::SemaphoreServiceClient::with_interceptor(channel, bearer),
    )
}

/// Lock and queue clients on `channel` that send `token`.
fn clients(channel: Channel, token: Option<&str>) -> (Locks, Queues) {
    let bearer = Bearer(token.map(|t| format!("Bearer {t}").parse().expect("ascii token")));
    (
        LockServiceClient::with_interceptor(channel.clone(), bearer.clone()),
        QueueServiceClient::with_interceptor(channel, bearer),
    )
}

const ALL: &[&str] = &["lock", "produce", "consume", "admin"];

/// Every RPC, and the permission the contract says it needs.
const RPCS: [(&str, &str); 36] = [
    ("Acquire", "lock"),
    ("Release", "lock"),
    ("Extend", "lock"),
    ("Describe", "lock"),
    ("ReleaseAll", "lock"),
    ("Hold", "lock"),
    ("CheckFence", "lock"),
    ("Watch", "lock"),
    ("Enqueue", "produce"),
    ("Lease", "consume"),
    ("Ack", "consume"),
    ("Nack", "consume"),
    ("ExtendLease", "consume"),
    ("Subscribe", "consume"),
    ("GetTask", "produce|consume|admin"),
    ("Wait", "produce|consume|admin"),
    ("ListTasks", "produce|consume|admin"),
    ("Peek", "admin"),
    ("Cancel", "admin"),
    ("Redrive", "admin"),
    ("Stats", "admin"),
    ("ConfigureQueue", "admin"),
    ("ConfigureGroup", "admin"),
    ("ListQueues", "admin"),
    ("ListGroups", "admin"),
    ("ListLocks", "admin"),
    ("PutSchedule", "produce|admin"),
    ("GetSchedule", "produce|admin"),
    ("ListSchedules", "produce|admin"),
    ("TriggerSchedule", "produce|admin"),
    ("DeleteSchedule", "produce|admin"),
    ("SemaphoreAcquire", "lock"),
    ("SemaphoreRelease", "lock"),
    ("SemaphoreExtend", "lock"),
    ("SemaphoreDescribe", "lock"),
    ("SemaphoreHold", "lock"),
];

/// Calls `rpc` with a valid request; the status code it got (OK when it was served;
/// a stream counts as served once it is open).
async fn call(
    rpc: &str,
    locks: &mut Locks,
    queues: &mut Queues,
    (schedules, semaphores): &mut (Schedules, Semaphores),
) -> Code {
    let (name, queue) = ("perm-lock".to_owned(), "perm-queue".to_owned());
    let result: Result<(), Status> = match rpc {
        "Acquire" => locks
            .acquire(pb::AcquireRequest {
                name: name.clone(),
                owner: "o".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "Release" => locks
            .release(pb::ReleaseRequest {
                name,
                token: "t".into(),
            })
            .await
            .map(drop),
        "Extend" => locks
            .extend(pb::ExtendRequest {
                name,
                token: "t".into(),
                ttl: ms(1000),
            })
            .await
            .map(drop),
        "Describe" => locks
            .describe(pb::DescribeRequest {
                name,
                token: String::new(),
            })
            .await
            .map(drop),
        "ReleaseAll" => locks
            .release_all(pb::ReleaseAllRequest { owner: "o".into() })
            .await
            .map(drop),
        "CheckFence" => locks
            .check_fence(pb::CheckFenceRequest {
                name,
                fencing_token: 1,
            })
            .await
            .map(drop),
        "Watch" => locks
            .watch(pb::WatchRequest {
                name: "perm-watch".into(),
            })
            .await
            .map(drop),
        "Hold" => locks
            .hold(pb::HoldRequest {
                name: "perm-hold".into(),
                owner: "o".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "Enqueue" => queues
            .enqueue(pb::EnqueueRequest {
                queue,
                tasks: vec![pb::TaskSpec {
                    id: "t".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .map(drop),
        "Lease" => queues
            .lease(pb::LeaseRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        "Ack" => queues
            .ack(pb::AckRequest {
                queue,
                receipts: vec!["r".into()],
                ..Default::default()
            })
            .await
            .map(drop),
        "Nack" => queues
            .nack(pb::NackRequest {
                queue,
                receipt: "r".into(),
                delay: None,
                ..Default::default()
            })
            .await
            .map(drop),
        "ExtendLease" => queues
            .extend_lease(pb::ExtendLeaseRequest {
                queue,
                receipt: "r".into(),
                visibility: ms(1000),
                ..Default::default()
            })
            .await
            .map(drop),
        "Subscribe" => queues
            .subscribe(pb::SubscribeRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        "Peek" => queues
            .peek(pb::PeekRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        "Cancel" => queues
            .cancel(pb::CancelRequest {
                queue,
                ids: vec!["t".into()],
                ..Default::default()
            })
            .await
            .map(drop),
        "Redrive" => queues
            .redrive(pb::RedriveRequest { queue, ids: vec![] })
            .await
            .map(drop),
        "Stats" => queues.stats(pb::StatsRequest { queue }).await.map(drop),
        // Served: an unknown id is the handler's NOT_FOUND, past the permission check.
        "GetTask" => match queues
            .get_task(pb::GetTaskRequest {
                queue,
                id: "nobody".into(),
            })
            .await
        {
            Err(status) if status.code() == Code::NotFound => Ok(()),
            other => other.map(drop),
        },
        "Wait" => queues
            .wait(pb::WaitRequest {
                queue,
                id: "nobody".into(),
                timeout: None,
            })
            .await
            .map(drop),
        "ListTasks" => queues
            .list_tasks(pb::ListTasksRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        "ConfigureQueue" => queues
            .configure_queue(pb::ConfigureQueueRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        "ConfigureGroup" => queues
            .configure_group(pb::ConfigureGroupRequest {
                queue,
                group: "g".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "ListQueues" => queues
            .list_queues(pb::ListQueuesRequest::default())
            .await
            .map(drop),
        "ListGroups" => queues
            .list_groups(pb::ListGroupsRequest {
                queue,
                ..Default::default()
            })
            .await
            .map(drop),
        // The schedule exists (PutSchedule ran first), so Get and Trigger succeed.
        "PutSchedule" => schedules
            .put_schedule(pb::PutScheduleRequest {
                schedule: Some(pb::Schedule {
                    name: "perm-schedule".into(),
                    queue,
                    spec: Some(pb::schedule::Spec::Cron("@yearly".into())),
                    ..Default::default()
                }),
            })
            .await
            .map(drop),
        "GetSchedule" => schedules
            .get_schedule(pb::GetScheduleRequest {
                name: "perm-schedule".into(),
            })
            .await
            .map(drop),
        "ListSchedules" => schedules
            .list_schedules(pb::ListSchedulesRequest::default())
            .await
            .map(drop),
        "TriggerSchedule" => schedules
            .trigger_schedule(pb::TriggerScheduleRequest {
                name: "perm-schedule".into(),
            })
            .await
            .map(drop),
        "DeleteSchedule" => schedules
            .delete_schedule(pb::DeleteScheduleRequest {
                name: "perm-schedule".into(),
            })
            .await
            .map(drop),
        "ListLocks" => locks
            .list_locks(pb::ListLocksRequest::default())
            .await
            .map(drop),
        "SemaphoreAcquire" => semaphores
            .acquire(pb::SemaphoreServiceAcquireRequest {
                name: "perm-semaphore".into(),
                owner: "o".into(),
                limit: 100,
                ..Default::default()
            })
            .await
            .map(drop),
        "SemaphoreRelease" => semaphores
            .release(pb::SemaphoreServiceReleaseRequest {
                name: "perm-semaphore".into(),
                token: "t".into(),
            })
            .await
            .map(drop),
        "SemaphoreExtend" => semaphores
            .extend(pb::SemaphoreServiceExtendRequest {
                name: "perm-semaphore".into(),
                token: "t".into(),
                ttl: None,
            })
            .await
            .map(drop),
        "SemaphoreDescribe" => semaphores
            .describe(pb::SemaphoreServiceDescribeRequest {
                name: "perm-semaphore".into(),
            })
            .await
            .map(drop),
        "SemaphoreHold" => semaphores
            .hold(pb::SemaphoreServiceHoldRequest {
                name: "perm-semaphore-hold".into(),
                owner: "o".into(),
                limit: 100,
                ..Default::default()
            })
            .await
            .map(drop),
        other => panic!("no RPC {other}"),
    };
    match result {
        Ok(()) => Code::Ok,
        Err(status) => status.code(),
    }
}

/// A server with two tenants, `shop` and `rival`, each with a token of every
/// permission (`token-of-shop`, `token-of-rival`).
async fn shop_and_rival(redis: &TestRedis) -> TestServer {
    let grants: [(&str, &str, &[&str]); 2] = [
        ("token-of-shop", "shop", ALL),
        ("token-of-rival", "rival", ALL),
    ];
    server_with(redis, &grants).await.0
}

/// A server whose auth file is written from `grants`.
async fn server_with(redis: &TestRedis, grants: &[(&str, &str, &[&str])]) -> (TestServer, PathBuf) {
    let path = write_auth_file(&redis.dir.0.join("auth.toml"), grants);
    let file = path.clone();
    let server = TestServer::start_with(redis, move |config| {
        config.auth_file = Some(file.clone());
    })
    .await;
    (server, path)
}

#[tokio::test]
async fn without_a_known_token_every_rpc_is_unauthenticated_but_health_and_reflection_answer(
) -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let (server, _) = server_with(&redis, &[("good-token", "shop", ALL)]).await;
    for token in [None, Some("wrong-token"), Some("good-token ")] {
        let (mut locks, mut queues) = clients(server.channel().await, token);
        let mut others = other_clients(server.channel().await, token);
        for (rpc, _) in RPCS {
            let code = call(rpc, &mut locks, &mut queues, &mut others).await;
            let wanted = if token == Some("good-token ") {
                // Surrounding blanks are not part of the token.
                Code::Ok
            } else {
                Code::Unauthenticated
            };
            assert_eq!(code, wanted, "{rpc} with {token:?}");
        }
    }
    // A scheme other than Bearer is no token either.
    let mut locks = LockServiceClient::new(server.channel().await);
    let mut request = Request::new(pb::DescribeRequest {
        name: "x".into(),
        token: String::new(),
    });
    request
        .metadata_mut()
        .insert("authorization", "Basic good-token".parse()?);
    assert_eq!(
        locks.describe(request).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    // Every refusal is counted, by method, though no handler ran: two per RPC (no
    // token, a wrong one), and Describe's Basic scheme.
    for (rpc, _) in RPCS {
        let refused = server
            .metric(&format!(
                "turnstile_rpc_requests_total{{method=\"{rpc}\",code=\"UNAUTHENTICATED\"}}"
            ))
            .await;
        let wanted = if rpc == "Describe" { 3.0 } else { 2.0 };
        assert_eq!(refused, wanted, "{rpc}");
    }
    // Health and reflection need no token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
            server.channel().await,
        );
    let request = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut replies = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    assert!(replies.next().await.is_some_and(|reply| reply.is_ok()));
    Ok(())
}

#[tokio::test]
async fn each_permission_allows_exactly_its_rpcs() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let tokens: Vec<(String, &str)> = ALL.iter().map(|p| (format!("only-{p}"), *p)).collect();
    let grants: Vec<(&str, &str, &[&str])> = tokens
        .iter()
        .map(|(token, permission)| (token.as_str(), "shop", std::slice::from_ref(permission)))
        .collect();
    let (server, _) = server_with(&redis, &grants).await;
    for (token, permission) in &tokens {
        let (mut locks, mut queues) = clients(server.channel().await, Some(token));
        let mut others = other_clients(server.channel().await, Some(token));
        for (rpc, needs) in RPCS {
            let code = call(rpc, &mut locks, &mut queues, &mut others).await;
            if needs.split('|').any(|need| need == *permission) {
                assert_eq!(code, Code::Ok, "{rpc} with {permission}");
            } else {
                assert_eq!(code, Code::PermissionDenied, "{rpc} with {permission}");
            }
        }
    }
    // Each RPC was refused to the tokens without its permission, and counted.
    for (rpc, needs) in RPCS {
        let denied = server
            .metric(&format!(
                "turnstile_rpc_requests_total{{method=\"{rpc}\",code=\"PERMISSION_DENIED\"}}"
            ))
            .await;
        let allowed = needs.split('|').count() as f64;
        assert_eq!(denied, ALL.len() as f64 - allowed, "{rpc}");
    }
    Ok(())
}

/// What the victim tenant holds on one name: a lock and a queue with a task in
/// every state.
struct Victim {
    name: String,
    lock_token: String,
    fencing_token: u64,
    receipt: String,
}

const STATES: [pb::TaskState; 4] = [
    pb::TaskState::Ready,
    pb::TaskState::Delayed,
    pb::TaskState::InFlight,
    pb::TaskState::Dead,
];

fn task(id: &str, payload: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        id: id.into(),
        payload: payload.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

async fn enqueue(
    queues: &mut Queues,
    queue: &str,
    tasks: Vec<pb::TaskSpec>,
) -> Vec<pb::EnqueueResult> {
    queues
        .enqueue(pb::EnqueueRequest {
            queue: queue.into(),
            tasks,
            ..Default::default()
        })
        .await
        .expect("enqueue")
        .into_inner()
        .results
}

async fn lease_one(queues: &mut Queues, queue: &str) -> Vec<pb::Task> {
    queues
        .lease(pb::LeaseRequest {
            queue: queue.into(),
            max_tasks: 1,
            visibility: ms(600_000),
            ..Default::default()
        })
        .await
        .expect("lease")
        .into_inner()
        .tasks
}

async fn stats(queues: &mut Queues, queue: &str) -> [u64; 4] {
    let s = queues
        .stats(pb::StatsRequest {
            queue: queue.into(),
        })
        .await
        .expect("stats")
        .into_inner();
    [s.ready, s.delayed, s.in_flight, s.dead]
}

/// The victim's lock and queue on `name`: the lock held, and one task DEAD, one IN_FLIGHT,
/// one READY and one DELAYED (payload "victim").
async fn victim_state(locks: &mut Locks, queues: &mut Queues, name: &str) -> Victim {
    let won = locks
        .acquire(pb::AcquireRequest {
            name: name.into(),
            owner: "victim".into(),
            ttl: ms(600_000),
            ..Default::default()
        })
        .await
        .expect("acquire")
        .into_inner();
    assert!(won.acquired);
    let mut dead = task("a", "victim");
    dead.max_attempts = 1;
    enqueue(queues, name, vec![dead]).await;
    let leased = lease_one(queues, name).await;
    queues
        .nack(pb::NackRequest {
            queue: name.into(),
            receipt: leased[0].receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await
        .expect("nack");
    enqueue(queues, name, vec![task("b", "victim")]).await;
    let in_flight = lease_one(queues, name).await;
    let mut later = task("d", "victim");
    later.schedule = Some(pb::task_spec::Schedule::Delay(prost_types::Duration {
        seconds: 3600,
        nanos: 0,
    }));
    enqueue(queues, name, vec![task("c", "victim"), later]).await;
    assert_eq!(stats(queues, name).await, [1, 1, 1, 1], "{name}");
    Victim {
        name: name.into(),
        lock_token: won.token,
        fencing_token: won.fencing_token,
        receipt: in_flight[0].receipt.clone(),
    }
}

/// Every RPC of the attacker on `victim.name` in its own tenant: it sees nothing of
/// the victim's, changes nothing of it, and gets a lock and queue of its own.
async fn attack_every_rpc(locks: &mut Locks, queues: &mut Queues, victim: &Victim, who: &str) {
    let name = victim.name.clone();
    let at = format!("{who} on {name:?}");
    let seen = locks
        .describe(pb::DescribeRequest {
            name: name.clone(),
            token: victim.lock_token.clone(),
        })
        .await
        .expect("describe")
        .into_inner();
    assert!(!seen.held && !seen.held_by_token, "Describe, {at}");
    let released = locks
        .release(pb::ReleaseRequest {
            name: name.clone(),
            token: victim.lock_token.clone(),
        })
        .await
        .expect("release");
    assert!(!released.into_inner().released, "Release, {at}");
    let extended = locks
        .extend(pb::ExtendRequest {
            name: name.clone(),
            token: victim.lock_token.clone(),
            ttl: ms(1000),
        })
        .await
        .expect("extend");
    assert!(!extended.into_inner().extended, "Extend, {at}");
    let freed = locks
        .release_all(pb::ReleaseAllRequest {
            owner: "victim".into(),
        })
        .await
        .expect("release all");
    assert!(freed.into_inner().released.is_empty(), "ReleaseAll, {at}");
    // Its own lock of the same name: free, so taken at once.
    let own = locks
        .acquire(pb::AcquireRequest {
            name: name.clone(),
            owner: "victim".into(),
            ttl: ms(60_000),
            ..Default::default()
        })
        .await
        .expect("acquire")
        .into_inner();
    assert!(own.acquired, "Acquire, {at}");
    locks
        .release(pb::ReleaseRequest {
            name: name.clone(),
            token: own.token,
        })
        .await
        .expect("release own");
    let mut hold = locks
        .hold(pb::HoldRequest {
            name: name.clone(),
            owner: "victim".into(),
            ..Default::default()
        })
        .await
        .expect("hold")
        .into_inner();
    let first = hold.next().await.expect("a hold message").expect("hold");
    assert!(
        matches!(first.event, Some(hold_response::Event::Acquired(_))),
        "Hold, {at}: {first:?}"
    );
    drop(hold);

    assert_eq!(stats(queues, &name).await, [0, 0, 0, 0], "Stats, {at}");
    for state in STATES {
        let peeked = queues
            .peek(pb::PeekRequest {
                queue: name.clone(),
                state: state as i32,
                limit: 0,
                group: None,
            })
            .await
            .expect("peek");
        assert!(peeked.into_inner().tasks.is_empty(), "Peek {state:?}, {at}");
    }
    // The listings show none of the victim's: a queue of this name listed here is the
    // attacker's own from an earlier round, emptied.
    let listed = queues
        .list_queues(pb::ListQueuesRequest::default())
        .await
        .expect("list queues")
        .into_inner()
        .queues;
    assert!(
        listed.iter().filter(|q| q.queue == name).all(|q| q.ready
            + q.delayed
            + q.in_flight
            + q.dead
            == 0),
        "ListQueues, {at}: {listed:?}"
    );
    let groups = queues
        .list_groups(pb::ListGroupsRequest {
            queue: name.clone(),
            ..Default::default()
        })
        .await
        .expect("list groups")
        .into_inner()
        .groups;
    assert!(groups.is_empty(), "ListGroups, {at}: {groups:?}");
    assert!(lease_one(queues, &name).await.is_empty(), "Lease, {at}");
    let acked = queues
        .ack(pb::AckRequest {
            queue: name.clone(),
            receipts: vec![victim.receipt.clone()],
            ..Default::default()
        })
        .await
        .expect("ack");
    assert_eq!(acked.into_inner().acked, [false], "Ack, {at}");
    let nacked = queues
        .nack(pb::NackRequest {
            queue: name.clone(),
            receipt: victim.receipt.clone(),
            delay: None,
            ..Default::default()
        })
        .await
        .expect("nack")
        .into_inner();
    assert!(!nacked.requeued && !nacked.dead, "Nack, {at}");
    let extended = queues
        .extend_lease(pb::ExtendLeaseRequest {
            queue: name.clone(),
            receipt: victim.receipt.clone(),
            visibility: ms(1000),
            ..Default::default()
        })
        .await
        .expect("extend lease");
    assert!(!extended.into_inner().extended, "ExtendLease, {at}");
    let cancelled = queues
        .cancel(pb::CancelRequest {
            queue: name.clone(),
            ids: ["a", "b", "c", "d"].map(String::from).to_vec(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    assert!(cancelled.into_inner().cancelled.is_empty(), "Cancel, {at}");
    let redriven = queues
        .redrive(pb::RedriveRequest {
            queue: name.clone(),
            ids: vec![],
        })
        .await
        .expect("redrive");
    assert_eq!(redriven.into_inner().redriven, 0, "Redrive, {at}");
    // Its own queue of the same name: the victim's ids are new here, and a stream
    // delivers its own task, never one of the victim's (which are due earlier).
    let created = enqueue(queues, &name, vec![task("c", "attacker")]).await;
    assert!(created[0].created, "Enqueue, {at}");
    let mut feed = queues
        .subscribe(pb::SubscribeRequest {
            queue: name.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let delivered = tokio::time::timeout(WAIT, async {
        loop {
            let message = feed.next().await.expect("a message").expect("subscribe");
            if let Some(subscribe_response::Event::Task(task)) = message.event {
                break task;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("Subscribe, {at}: its own task never came"));
    assert_eq!(&delivered.payload[..], b"attacker", "Subscribe, {at}");
    drop(feed);
    // Leave nothing behind for the next attacker of the same tenant.
    queues
        .cancel(pb::CancelRequest {
            queue: name.clone(),
            ids: vec!["c".into()],
            ..Default::default()
        })
        .await
        .expect("cancel own");
}

/// Names that spell parts of the victim's keys, or encodings of its name.
const NAMES: [&str; 5] = ["x", "{x}", "%7Bx%7D", "t:shop:lock:{x}", ":"];
/// Tenants next to "shop": prefixes, key-layout spellings, and the default tenant.
const ATTACKERS: [&str; 6] = [
    "rival",
    "shop:lock",
    "{shop}",
    "shop%",
    "default",
    "shop:t:shop",
];

#[tokio::test]
async fn no_rpc_of_one_tenant_can_read_or_change_another_tenants_locks_or_queues() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let tokens: Vec<String> = ATTACKERS.iter().map(|t| format!("token-of-{t}")).collect();
    let mut grants: Vec<(&str, &str, &[&str])> = vec![("token-of-shop", "shop", ALL)];
    grants.extend(
        tokens
            .iter()
            .zip(ATTACKERS)
            .map(|(token, tenant)| (token.as_str(), tenant, ALL)),
    );
    let (server, _) = server_with(&redis, &grants).await;
    let (mut locks, mut queues) = clients(server.channel().await, Some("token-of-shop"));
    let mut victims = Vec::new();
    for name in NAMES {
        victims.push(victim_state(&mut locks, &mut queues, name).await);
    }
    for (token, tenant) in tokens.iter().zip(ATTACKERS) {
        let (mut their_locks, mut their_queues) = clients(server.channel().await, Some(token));
        for victim in &victims {
            attack_every_rpc(&mut their_locks, &mut their_queues, victim, tenant).await;
            // Every other name, with this victim's token and receipt.
            for probe in NAMES.iter().chain(&["shop:lock:{x}", "lock:{x}", "t:shop"]) {
                let seen = their_locks
                    .describe(pb::DescribeRequest {
                        name: probe.to_string(),
                        token: victim.lock_token.clone(),
                    })
                    .await?
                    .into_inner();
                assert!(!seen.held_by_token, "{tenant} probing {probe:?}");
                let acked = their_queues
                    .ack(pb::AckRequest {
                        queue: probe.to_string(),
                        receipts: vec![victim.receipt.clone()],
                        ..Default::default()
                    })
                    .await?;
                assert_eq!(
                    acked.into_inner().acked,
                    [false],
                    "{tenant} probing {probe:?}"
                );
            }
        }
    }
    // The victim's state is as it was, and still its own to use.
    for victim in &victims {
        let seen = locks
            .describe(pb::DescribeRequest {
                name: victim.name.clone(),
                token: victim.lock_token.clone(),
            })
            .await?
            .into_inner();
        assert!(seen.held_by_token, "{}", victim.name);
        assert_eq!(
            seen.info.map(|i| i.fencing_token),
            Some(victim.fencing_token)
        );
        assert_eq!(
            stats(&mut queues, &victim.name).await,
            [1, 1, 1, 1],
            "{}",
            victim.name
        );
        let acked = queues
            .ack(pb::AckRequest {
                queue: victim.name.clone(),
                receipts: vec![victim.receipt.clone()],
                ..Default::default()
            })
            .await?;
        assert_eq!(acked.into_inner().acked, [true], "{}", victim.name);
    }
    Ok(())
}

use std::time::Duration;

#[tokio::test]
async fn sighup_reloads_the_auth_file_ends_a_removed_tokens_streams_and_no_token_is_ever_logged(
) -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let (kept, removed, unknown) = ("kept-7c1d2e", "removed-4f5a6b", "unknown-9e8d7c");
    let path = redis.dir.0.join("auth.toml");
    write_auth_file(
        &path,
        &[(kept, "shop", ALL), (removed, "shop", &["lock", "consume"])],
    );
    let server = LoggedServer::start(&redis, &["--auth-file", path.to_str().unwrap()]);
    let (mut locks, _) = clients(server.channel().await, Some(kept));
    let (mut their_locks, mut their_queues) = clients(server.channel().await, Some(removed));

    let mut hold = their_locks
        .hold(pb::HoldRequest {
            name: "leader".into(),
            owner: "removed".into(),
            ttl: ms(600_000),
            ..Default::default()
        })
        .await?
        .into_inner();
    let first = hold.next().await.expect("a message")?;
    assert!(matches!(
        first.event,
        Some(hold_response::Event::Acquired(_))
    ));
    let mut feed = their_queues
        .subscribe(pb::SubscribeRequest {
            queue: "jobs".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let (mut strangers, _) = clients(server.channel().await, Some(unknown));
    let refused = strangers
        .describe(pb::DescribeRequest {
            name: "leader".into(),
            token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    // The token is removed: its open streams end, its next call fails, the lock its
    // Hold kept is released.
    write_auth_file(&path, &[(kept, "shop", ALL)]);
    server.hangup();
    server.wait_line("auth file reloaded");
    let ended = tokio::time::timeout(WAIT, hold.next()).await?;
    assert_eq!(
        ended.expect("an end").unwrap_err().code(),
        Code::Unauthenticated
    );
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match feed.next().await {
                Some(Ok(_heartbeat)) => continue,
                other => return other,
            }
        }
    })
    .await?;
    assert_eq!(
        ended.expect("an end").unwrap_err().code(),
        Code::Unauthenticated
    );
    let refused = their_locks
        .describe(pb::DescribeRequest {
            name: "leader".into(),
            token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    eventually("the revoked Hold's lock is released", WAIT, || {
        let mut locks = locks.clone();
        async move {
            let seen = locks
                .describe(pb::DescribeRequest {
                    name: "leader".into(),
                    token: String::new(),
                })
                .await
                .expect("describe");
            !seen.into_inner().held
        }
    })
    .await;

    // A broken file keeps the tokens in force and says why.
    std::fs::write(&path, "[[token]]\nsha256 = \"not hex\"\n")?;
    server.hangup();
    let why = server.wait_line("auth file not reloaded");
    assert!(why.contains("sha256") || why.contains("line"), "{why}");
    locks
        .describe(pb::DescribeRequest {
            name: "leader".into(),
            token: String::new(),
        })
        .await?;
    assert_eq!(server.count("auth file reloaded"), 1);

    for token in [kept, removed, unknown] {
        assert_eq!(server.count(token), 0, "{token} appears in the log");
    }
    // The log did record the refusals (it is not silent), just not the tokens.
    assert!(server.count("unknown bearer token") >= 1);
    Ok(())
}

/// `turnstile serve` on `listen`, with extra arguments: its exit status and stderr
/// if it stops, or `None` and stderr up to its ready line (then it is killed).
fn serve_on(listen: &str, extra: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            listen,
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(["--redis-url", "redis://127.0.0.1:1"])
        .env("TURNSTILE_DASHBOARD_LISTEN", "off")
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut text = String::new();
    // Ends with the ready line, or when stderr closes because the process exited.
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        text.push_str(&line);
        text.push('\n');
        if line.contains(" ready ") {
            let _ = child.kill();
            let _ = child.wait();
            return (None, text);
        }
    }
    (Some(child.wait().expect("wait")), text)
}

#[test]
fn without_an_auth_file_serve_refuses_a_non_loopback_address_unless_told_it_is_insecure() {
    let (status, stderr) = serve_on("0.0.0.0:0", &[]);
    let status = status.expect("it stops at once");
    assert!(!status.success());
    assert!(
        stderr.contains("--auth-file") && stderr.contains("--insecure-no-auth"),
        "{stderr}"
    );

    let (status, stderr) = serve_on("0.0.0.0:0", &["--insecure-no-auth"]);
    assert_eq!(status, None, "it serves: {stderr}");
    assert!(stderr.contains("serving without --auth-file"), "{stderr}");
    assert!(stderr.contains(" ready "), "{stderr}");
}

fn client_tls(ca_pem: &str, identity: Option<&Issued>) -> tonic::transport::ClientTlsConfig {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(&id.cert, &id.key));
    }
    tls
}

/// A call through `channel`, or the error that stopped it (at connect or at the call).
async fn round_trip(
    server: &TestServer,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> Result<(), String> {
    let channel = server
        .try_channel(tls)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let (mut locks, _) = clients(channel, None);
    let won = locks
        .acquire(pb::AcquireRequest {
            name: "over-tls".into(),
            owner: "o".into(),
            ..Default::default()
        })
        .await
        .map_err(|status| format!("{status:?}"))?
        .into_inner();
    locks
        .release(pb::ReleaseRequest {
            name: "over-tls".into(),
            token: won.token,
        })
        .await
        .map_err(|status| format!("{status:?}"))?;
    Ok(())
}

#[tokio::test]
async fn tls_serves_a_real_round_trip_and_refuses_a_plaintext_client() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let (pki, ca) = Pki::new();
    let server_id = Pki::issue(&ca, &["localhost", "127.0.0.1"]);
    let (cert, key) = (
        pki.write("server.pem", &server_id.cert),
        pki.write("server.key", &server_id.key),
    );
    let server = TestServer::start_tls(
        &redis,
        |config| {
            config.tls_cert = Some(cert.clone());
            config.tls_key = Some(key.clone());
        },
        Some(client_tls(&pki.ca_pem, None)),
    )
    .await;
    round_trip(&server, Some(client_tls(&pki.ca_pem, None))).await?;
    let plaintext = round_trip(&server, None).await;
    assert!(plaintext.is_err(), "a plaintext client was served");
    // A client that trusts another CA does not accept the server.
    let (other, _) = Pki::new();
    assert!(round_trip(&server, Some(client_tls(&other.ca_pem, None)))
        .await
        .is_err());
    Ok(())
}

#[tokio::test]
async fn mtls_serves_only_clients_with_a_certificate_signed_by_the_client_ca() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let (pki, ca) = Pki::new();
    let server_id = Pki::issue(&ca, &["localhost"]);
    let client_id = Pki::issue(&ca, &["worker-1"]);
    let (stranger_pki, stranger_ca) = Pki::new();
    let stranger_id = Pki::issue(&stranger_ca, &["worker-1"]);
    drop(stranger_pki);
    let (cert, key) = (
        pki.write("server.pem", &server_id.cert),
        pki.write("server.key", &server_id.key),
    );
    let client_ca = pki.write("clients-ca.pem", &pki.ca_pem);
    let server = TestServer::start_tls(
        &redis,
        |config| {
            config.tls_cert = Some(cert.clone());
            config.tls_key = Some(key.clone());
            config.tls_client_ca = Some(client_ca.clone());
        },
        Some(client_tls(&pki.ca_pem, Some(&client_id))),
    )
    .await;
    round_trip(&server, Some(client_tls(&pki.ca_pem, Some(&client_id)))).await?;
    let anonymous = round_trip(&server, Some(client_tls(&pki.ca_pem, None))).await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate was served"
    );
    let stranger = round_trip(&server, Some(client_tls(&pki.ca_pem, Some(&stranger_id)))).await;
    assert!(
        stranger.is_err(),
        "a client certificate of another CA was accepted"
    );
    Ok(())
}

/// A redis-server of its own speaking only TLS, whose only user is `app` with a
/// password (the default user is off); killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    _dir: TempDir,
}

impl TlsRedis {
    fn start(pki: &Pki, identity: &Issued, password: &str) -> Self {
        let dir = TempDir::new("tls-redis");
        let port = turnstile::embedded::free_port().expect("free port");
        let (cert, key, ca) = (
            pki.write("redis.pem", &identity.cert),
            pki.write("redis.key", &identity.key),
            pki.write("ca.pem", &pki.ca_pem),
        );
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-key-file")
            .arg(key)
            .arg("--tls-ca-cert-file")
            .arg(ca)
            .arg("--dir")
            .arg(&dir.0)
            .args(["--user", "default", "off"])
            .args([
                "--user",
                "app",
                "on",
                &format!(">{password}"),
                "~*",
                "&*",
                "+@all",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_rediss_url_with_an_acl_user_works_and_its_password_is_never_logged() -> TestResult {
    init_tracing();
    let (pki, ca) = Pki::new();
    let redis_id = Pki::issue(&ca, &["localhost"]);
    let password = "s3cret-redis-pw";
    let redis = TlsRedis::start(&pki, &redis_id, password);
    let ca_path = pki.write("redis-ca.pem", &pki.ca_pem);
    let url = format!("rediss://app:{password}@localhost:{}", redis.port);
    let server = LoggedServer::start_with(&url, &["--redis-ca", ca_path.to_str().unwrap()]);
    let channel = server.channel().await;
    // Ready only once Redis answered, over TLS, as `app`.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    eventually("the server reaches Redis over TLS", WAIT, || {
        let mut health = health.clone();
        async move {
            let request = tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            };
            health.check(request).await.is_ok_and(|reply| {
                reply.into_inner().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            })
        }
    })
    .await;
    let (mut locks, mut queues) = clients(channel, None);
    let won = locks
        .acquire(pb::AcquireRequest {
            name: "via-rediss".into(),
            owner: "o".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(won.acquired);
    enqueue(&mut queues, "via-rediss", vec![task("t", "p")]).await;
    assert_eq!(lease_one(&mut queues, "via-rediss").await.len(), 1);
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    assert_eq!(
        server.count(password),
        0,
        "the Redis password appears in the log"
    );
    Ok(())
}

/// Three `redis-server` primaries speaking only TLS, the cluster bus too, joined into a
/// cluster; killed on drop.
struct TlsCluster {
    nodes: Vec<std::process::Child>,
    ports: Vec<u16>,
    _dir: TempDir,
}

impl TlsCluster {
    async fn start(pki: &Pki, identity: &Issued) -> Self {
        let dir = TempDir::new("tls-cluster");
        let (cert, key, ca) = (
            pki.write("node.pem", &identity.cert),
            pki.write("node.key", &identity.key),
            pki.write("ca.pem", &pki.ca_pem),
        );
        let mut cluster = Self {
            nodes: Vec::new(),
            ports: Vec::new(),
            _dir: dir,
        };
        while cluster.nodes.len() < 3 {
            let port = common::cluster::free_node_port();
            let node_dir = cluster._dir.0.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let child = std::process::Command::new("redis-server")
                .args(["--port", "0", "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
                .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                .args(["--cluster-enabled", "yes"])
                .arg("--tls-cert-file")
                .arg(&cert)
                .arg("--tls-key-file")
                .arg(&key)
                .arg("--tls-ca-cert-file")
                .arg(&ca)
                .arg("--dir")
                .arg(&node_dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server");
            cluster.nodes.push(child);
            cluster.ports.push(port);
        }
        let cli = |args: &[&str]| {
            std::process::Command::new("redis-cli")
                .args(["--tls", "--cacert"])
                .arg(&ca)
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .ok()
        };
        for port in &cluster.ports {
            let port = port.to_string();
            eventually("a TLS node answers", WAIT, || {
                let pong = cli(&["-p", &port, "ping"])
                    .is_some_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "PONG");
                async move { pong }
            })
            .await;
        }
        let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
        create.extend(cluster.ports.iter().map(|port| format!("127.0.0.1:{port}")));
        create.push("--cluster-yes".into());
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        let created = cli(&create).expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stdout)
        );
        for port in &cluster.ports {
            let port = port.to_string();
            eventually("the TLS cluster is ok", Duration::from_secs(30), || {
                let ok = cli(&["-p", &port, "cluster", "info"]).is_some_and(|out| {
                    String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok")
                });
                async move { ok }
            })
            .await;
        }
        cluster
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
    }
}

/// `--redis-cluster` with `rediss://` seeds and `--redis-ca`: the cluster client
/// reaches every primary over TLS (the nodes it discovers as well as the seeds), so
/// locks and queues whose names are on every primary work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_over_tls_serves_names_on_every_primary() -> TestResult {
    init_tracing();
    let (pki, ca) = Pki::new();
    // The cluster reports its nodes by IP: the certificate names it.
    let node_id = Pki::issue(&ca, &["localhost", "127.0.0.1"]);
    let cluster = TlsCluster::start(&pki, &node_id).await;
    let ca_path = pki.write("redis-ca.pem", &pki.ca_pem);
    // One seed: the other primaries are found through it.
    let url = format!("rediss://127.0.0.1:{}", cluster.ports[0]);
    let server = LoggedServer::start_with(
        &url,
        &["--redis-cluster", "--redis-ca", ca_path.to_str().unwrap()],
    );
    let (mut locks, mut queues) = clients(server.channel().await, None);
    // Thirty names land on all three primaries (each holds a third of the slots).
    for n in 0..30 {
        let name = format!("tls-{n}");
        let won = retry_unavailable("acquire over TLS", || {
            let (mut locks, name) = (locks.clone(), name.clone());
            async move {
                locks
                    .acquire(pb::AcquireRequest {
                        name,
                        owner: "o".into(),
                        ..Default::default()
                    })
                    .await
            }
        })
        .await
        .into_inner();
        assert!(won.acquired, "{name}");
        enqueue(&mut queues, &name, vec![task("t", "p")]).await;
        assert_eq!(lease_one(&mut queues, &name).await.len(), 1, "{name}");
    }
    let released = locks
        .release_all(pb::ReleaseAllRequest { owner: "o".into() })
        .await?
        .into_inner()
        .released;
    assert_eq!(released.len(), 30);
    Ok(())
}

#[tokio::test]
async fn concurrent_acks_of_two_tenants_on_one_queue_name_each_reach_their_own_queue() -> TestResult
{
    init_tracing();
    let redis = TestRedis::start().await;
    let (server, _) = server_with(&redis, &[("token-a", "a", ALL), ("token-b", "b", ALL)]).await;
    let mut receipts = Vec::new();
    for token in ["token-a", "token-b"] {
        let (_, mut queues) = clients(server.channel().await, Some(token));
        let tasks = (0..50).map(|i| task(&format!("t{i}"), token)).collect();
        enqueue(&mut queues, "shared", tasks).await;
        let leased = queues
            .lease(pb::LeaseRequest {
                queue: "shared".into(),
                max_tasks: 50,
                visibility: ms(600_000),
                ..Default::default()
            })
            .await?
            .into_inner()
            .tasks;
        receipts.extend(leased.into_iter().map(|t| (queues.clone(), t.receipt)));
    }
    // Acks on one queue name share a script run when they overlap: they must share it
    // only within a tenant.
    let mut acks = tokio::task::JoinSet::new();
    for (mut queues, receipt) in receipts {
        acks.spawn(async move {
            queues
                .ack(pb::AckRequest {
                    queue: "shared".into(),
                    receipts: vec![receipt],
                    ..Default::default()
                })
                .await
                .map(|reply| reply.into_inner().acked)
        });
    }
    while let Some(acked) = acks.join_next().await {
        assert_eq!(acked??, [true]);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_queue_metrics_carry_the_tenant_and_never_a_token() -> TestResult {
    let redis = TestRedis::start().await;
    let (shop_token, rival_token) = ("shop-metrics-5d1e", "rival-metrics-8c2f");
    let (server, _) = server_with(
        &redis,
        &[(shop_token, "shop", ALL), (rival_token, "rival", ALL)],
    )
    .await;
    for token in [shop_token, rival_token] {
        let (_, mut queues) = clients(server.channel().await, Some(token));
        queues
            .enqueue(pb::EnqueueRequest {
                queue: "orders".into(),
                tasks: vec![pb::TaskSpec::default()],
                ..Default::default()
            })
            .await?;
        queues
            .lease(pb::LeaseRequest {
                queue: "orders".into(),
                ..Default::default()
            })
            .await?;
    }
    for tenant in ["shop", "rival"] {
        let labels = format!("{{tenant=\"{tenant}\",queue=\"orders\"}}");
        assert_eq!(
            server
                .metric(&format!("turnstile_deliveries_total{labels}"))
                .await,
            1.0
        );
        let in_flight = format!(
            "turnstile_queue_tasks{{tenant=\"{tenant}\",queue=\"orders\",state=\"in_flight\"}}"
        );
        assert_eq!(server.metric(&in_flight).await, 1.0);
    }
    let body = server.scrape().await;
    assert!(
        !body.contains(shop_token) && !body.contains(rival_token),
        "{body}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_lists_only_its_own_held_locks() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let server = shop_and_rival(&redis).await;
    let (mut shop, _) = clients(server.channel().await, Some("token-of-shop"));
    let (mut rival, _) = clients(server.channel().await, Some("token-of-rival"));
    for (locks, owner) in [(&mut shop, "shop-owner"), (&mut rival, "rival-owner")] {
        let won = locks
            .acquire(pb::AcquireRequest {
                name: "checkout".into(),
                owner: owner.into(),
                ttl: ms(60_000),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert!(won.acquired, "the same name is another lock in each tenant");
    }
    shop.acquire(pb::AcquireRequest {
        name: "shop-only".into(),
        owner: "shop-owner".into(),
        ttl: ms(60_000),
        ..Default::default()
    })
    .await?;
    let listed = |page: pb::ListLocksResponse| -> Vec<(String, String)> {
        page.locks
            .into_iter()
            .map(|lock| (lock.name, lock.owner))
            .collect()
    };
    let shop_sees = listed(
        shop.list_locks(pb::ListLocksRequest::default())
            .await?
            .into_inner(),
    );
    assert_eq!(
        shop_sees,
        [
            ("checkout".to_owned(), "shop-owner".to_owned()),
            ("shop-only".to_owned(), "shop-owner".to_owned())
        ]
    );
    let rival_sees = listed(
        rival
            .list_locks(pb::ListLocksRequest::default())
            .await?
            .into_inner(),
    );
    assert_eq!(
        rival_sees,
        [("checkout".to_owned(), "rival-owner".to_owned())]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_one_tenant_is_not_another_tenants() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let server = shop_and_rival(&redis).await;
    let (_, mut shop) = other_clients(server.channel().await, Some("token-of-shop"));
    let (_, mut rival) = other_clients(server.channel().await, Some("token-of-rival"));
    let take = |limit| pb::SemaphoreServiceAcquireRequest {
        name: "provider".into(),
        owner: "o".into(),
        limit,
        ttl: ms(60_000),
        ..Default::default()
    };
    assert!(shop.acquire(take(1)).await?.into_inner().acquired);
    // The rival's semaphore of the same name is empty, and its own limit applies.
    let rivals = rival.acquire(take(5)).await?.into_inner();
    assert!(rivals.acquired);
    assert_eq!((rivals.in_use, rivals.limit), (1, 5));
    let seen = shop
        .describe(pb::SemaphoreServiceDescribeRequest {
            name: "provider".into(),
        })
        .await?
        .into_inner();
    assert_eq!((seen.in_use, seen.limit, seen.holders.len()), (1, 1, 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_sees_and_fires_only_its_own_schedules() -> TestResult {
    init_tracing();
    let redis = TestRedis::start().await;
    let server = shop_and_rival(&redis).await;
    let mut shop = schedules_client(server.channel().await, Some("token-of-shop"));
    let mut rival = schedules_client(server.channel().await, Some("token-of-rival"));
    let (_, shop_queues) = clients(server.channel().await, Some("token-of-shop"));
    let (_, mut rival_queues) = clients(server.channel().await, Some("token-of-rival"));
    let schedule = |payload: &str| pb::Schedule {
        name: "nightly".into(),
        queue: "jobs".into(),
        spec: Some(pb::schedule::Spec::Every(ms(1000).unwrap())),
        task: Some(pb::ScheduledTask {
            payload: payload.as_bytes().to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    };
    shop.put_schedule(pb::PutScheduleRequest {
        schedule: Some(schedule("shop's")),
    })
    .await?;
    // The rival sees nothing of it, and can neither change nor trigger it.
    let listed = rival
        .list_schedules(pb::ListSchedulesRequest::default())
        .await?
        .into_inner()
        .schedules;
    assert!(listed.is_empty(), "{listed:?}");
    let missing = rival
        .get_schedule(pb::GetScheduleRequest {
            name: "nightly".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let triggered = rival
        .trigger_schedule(pb::TriggerScheduleRequest {
            name: "nightly".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(triggered.code(), Code::NotFound);
    let deleted = rival
        .delete_schedule(pb::DeleteScheduleRequest {
            name: "nightly".into(),
        })
        .await?
        .into_inner()
        .deleted;
    assert!(!deleted);
    // The shop's fires land in the shop's queue, never in the rival's of that name.
    common::eventually("a fire of the shop's", common::WAIT, || async {
        stats(&mut shop_queues.clone(), "jobs").await[0] > 0
    })
    .await;
    assert_eq!(stats(&mut rival_queues, "jobs").await, [0, 0, 0, 0]);
    // A schedule of the same name of the rival's is the rival's own.
    rival
        .put_schedule(pb::PutScheduleRequest {
            schedule: Some(schedule("rival's")),
        })
        .await?;
    let own = shop
        .get_schedule(pb::GetScheduleRequest {
            name: "nightly".into(),
        })
        .await?
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(own.task.unwrap().payload, b"shop's".to_vec());
    Ok(())
}

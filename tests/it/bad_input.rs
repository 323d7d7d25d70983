//! Bad input, table-driven: every RPC × every field × {empty, too long, control
//! characters, negative, zero, over the maximum, unknown enum value} answers
//! INVALID_ARGUMENT naming the field as the `.proto` spells it, in the message and in a
//! `google.rpc.BadRequest`, and never reaches Redis.

use crate::common;

use std::{future::Future, pin::Pin};

use common::{ms, TestRedis, TestResult, TestServer};
use prost::Message;
use tonic::{Code, Status};
use turnstile::{
    pb::{
        schedule, task_spec::Schedule as TaskSchedule, AckRequest, AcquireRequest, CancelRequest,
        CheckFenceRequest, ConfigureGroupRequest, ConfigureQueueRequest, DeleteScheduleRequest,
        DescribeRequest, EnqueueRequest, ExtendLeaseRequest, ExtendRequest, GetScheduleRequest,
        HoldRequest, LeaseRequest, ListGroupsRequest, ListLocksRequest, ListQueuesRequest,
        ListSchedulesRequest, NackRequest, PeekRequest, PutScheduleRequest, RateLimit,
        RedriveRequest, ReleaseAllRequest, ReleaseRequest, Schedule, ScheduledTask,
        SemaphoreServiceAcquireRequest, SemaphoreServiceDescribeRequest,
        SemaphoreServiceExtendRequest, SemaphoreServiceHoldRequest, SemaphoreServiceReleaseRequest,
        StatsRequest, SubscribeRequest, TaskSpec, TaskState, TriggerScheduleRequest, WatchRequest,
    },
    testing::rich::{BadRequest, RpcStatus, BAD_REQUEST_TYPE},
};

type Call = Pin<Box<dyn Future<Output = Result<(), Status>> + Send>>;

/// The field an INVALID_ARGUMENT names: its message starts with it, and its details
/// are a google.rpc.Status holding one BadRequest for the same field.
fn named_field(status: &Status) -> String {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let rpc = RpcStatus::decode(status.details()).expect("google.rpc.Status in the details");
    assert_eq!(rpc.code, Code::InvalidArgument as i32);
    let any = rpc.details.first().expect("one detail");
    assert_eq!(any.type_url, BAD_REQUEST_TYPE);
    let bad = BadRequest::decode(any.value.as_slice()).expect("a BadRequest");
    let field = bad.field_violations[0].field.clone();
    assert!(
        status.message().starts_with(&format!("{field}: ")),
        "message {:?} does not start with {field}",
        status.message()
    );
    field
}

fn neg() -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    })
}

fn zero() -> Option<prost_types::Duration> {
    ms(0)
}

fn hours(n: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: n * 3600,
        nanos: 0,
    })
}

fn text(n: usize) -> String {
    "x".repeat(n)
}

const CONTROL: &str = "a\u{7}b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_field_of_every_rpc_is_invalid_argument_naming_it_before_redis() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let locks = server.locks().await;
    let queues = server.queues().await;
    let schedules = server.schedules().await;
    let semaphores = server.semaphores().await;
    let mut cases: Vec<(String, &str, Call)> = Vec::new();
    macro_rules! case {
        ($client:ident . $method:ident, $field:expr, $request:expr) => {{
            let mut client = $client.clone();
            let request = $request;
            let label = format!("{} {:?}", stringify!($method), request);
            cases.push((
                label.chars().take(160).collect(),
                $field,
                Box::pin(async move { client.$method(request).await.map(|_| ()) }),
            ));
        }};
    }

    let acquire = || AcquireRequest {
        name: "n".into(),
        owner: "o".into(),
        ..Default::default()
    };
    for name in ["", &text(513)[..], CONTROL] {
        case!(
            locks.acquire,
            "name",
            AcquireRequest {
                name: name.into(),
                ..acquire()
            }
        );
    }
    for owner in ["", &text(257)[..], CONTROL] {
        case!(
            locks.acquire,
            "owner",
            AcquireRequest {
                owner: owner.into(),
                ..acquire()
            }
        );
    }
    for ttl in [neg(), zero(), hours(25)] {
        case!(locks.acquire, "ttl", AcquireRequest { ttl, ..acquire() });
    }
    for wait in [neg(), hours(2)] {
        case!(locks.acquire, "wait", AcquireRequest { wait, ..acquire() });
    }
    for request_id in [&text(257)[..], CONTROL] {
        case!(
            locks.acquire,
            "request_id",
            AcquireRequest {
                request_id: request_id.into(),
                ..acquire()
            }
        );
    }
    let release = || ReleaseRequest {
        name: "n".into(),
        token: "t".into(),
    };
    case!(
        locks.release,
        "name",
        ReleaseRequest {
            name: "".into(),
            ..release()
        }
    );
    for token in ["", &text(1025)[..]] {
        case!(
            locks.release,
            "token",
            ReleaseRequest {
                token: token.into(),
                ..release()
            }
        );
    }
    let extend = || ExtendRequest {
        name: "n".into(),
        token: "t".into(),
        ttl: None,
    };
    case!(
        locks.extend,
        "name",
        ExtendRequest {
            name: CONTROL.into(),
            ..extend()
        }
    );
    case!(
        locks.extend,
        "token",
        ExtendRequest {
            token: "".into(),
            ..extend()
        }
    );
    for ttl in [neg(), zero(), hours(25)] {
        case!(locks.extend, "ttl", ExtendRequest { ttl, ..extend() });
    }
    case!(
        locks.describe,
        "name",
        DescribeRequest {
            name: "".into(),
            token: "".into()
        }
    );
    case!(
        locks.describe,
        "token",
        DescribeRequest {
            name: "n".into(),
            token: text(1025)
        }
    );
    for name in ["", &text(513)[..], CONTROL] {
        case!(
            locks.check_fence,
            "name",
            CheckFenceRequest {
                name: name.into(),
                fencing_token: 1
            }
        );
    }
    case!(
        locks.check_fence,
        "fencing_token",
        CheckFenceRequest {
            name: "n".into(),
            fencing_token: 0
        }
    );
    for owner in ["", &text(257)[..], CONTROL] {
        case!(
            locks.release_all,
            "owner",
            ReleaseAllRequest {
                owner: owner.into()
            }
        );
    }
    let hold = || HoldRequest {
        name: "n".into(),
        owner: "o".into(),
        ttl: None,
        wait: None,
        token: String::new(),
    };
    case!(
        locks.hold,
        "name",
        HoldRequest {
            name: "".into(),
            ..hold()
        }
    );
    case!(
        locks.hold,
        "owner",
        HoldRequest {
            owner: CONTROL.into(),
            ..hold()
        }
    );
    case!(
        locks.hold,
        "ttl",
        HoldRequest {
            ttl: zero(),
            ..hold()
        }
    );
    case!(
        locks.hold,
        "wait",
        HoldRequest {
            wait: neg(),
            token: String::new(),
            ..hold()
        }
    );

    let task = || TaskSpec {
        id: "i".into(),
        ..Default::default()
    };
    let enqueue = |tasks: Vec<TaskSpec>| EnqueueRequest {
        queue: "q".into(),
        tasks,
        ..Default::default()
    };
    for queue in ["", &text(513)[..], CONTROL] {
        case!(
            queues.enqueue,
            "queue",
            EnqueueRequest {
                queue: queue.into(),
                ..enqueue(vec![task()])
            }
        );
    }
    case!(queues.enqueue, "tasks", enqueue(vec![]));
    case!(queues.enqueue, "tasks", enqueue(vec![task(); 1001]));
    for id in [&text(257)[..], CONTROL] {
        case!(
            queues.enqueue,
            "id",
            enqueue(vec![TaskSpec {
                id: id.into(),
                ..task()
            }])
        );
    }
    case!(
        queues.enqueue,
        "payload",
        enqueue(vec![TaskSpec {
            payload: vec![0; 1024 * 1024 + 1].into(),
            ..task()
        }])
    );
    case!(
        queues.enqueue,
        "delay",
        enqueue(vec![TaskSpec {
            schedule: Some(TaskSchedule::Delay(neg().unwrap())),
            ..task()
        }])
    );
    // Bad nanos, and instants outside years 1–9999 (which many clients cannot print).
    for (seconds, nanos) in [
        (0, 2_000_000_000),
        (253_402_300_800, 0),
        (-62_135_596_801, 0),
    ] {
        case!(
            queues.enqueue,
            "due_at",
            enqueue(vec![TaskSpec {
                schedule: Some(TaskSchedule::DueAt(prost_types::Timestamp {
                    seconds,
                    nanos
                })),
                ..task()
            }])
        );
    }
    case!(
        queues.enqueue,
        "on_duplicate",
        enqueue(vec![TaskSpec {
            on_duplicate: 99,
            ..task()
        }])
    );
    case!(
        queues.enqueue,
        "dedupe_window",
        enqueue(vec![TaskSpec {
            dedupe_window: neg(),
            ..task()
        }])
    );
    let lease = || LeaseRequest {
        queue: "q".into(),
        ..Default::default()
    };
    case!(
        queues.lease,
        "queue",
        LeaseRequest {
            queue: "".into(),
            ..lease()
        }
    );
    case!(
        queues.lease,
        "max_tasks",
        LeaseRequest {
            max_tasks: 1001,
            ..lease()
        }
    );
    for visibility in [neg(), zero()] {
        case!(
            queues.lease,
            "visibility",
            LeaseRequest {
                visibility,
                ..lease()
            }
        );
    }
    for wait in [neg(), hours(2)] {
        case!(queues.lease, "wait", LeaseRequest { wait, ..lease() });
    }
    let ack = |receipts: Vec<String>| AckRequest {
        queue: "q".into(),
        receipts,
        ..Default::default()
    };
    case!(
        queues.ack,
        "queue",
        AckRequest {
            queue: CONTROL.into(),
            ..ack(vec![])
        }
    );
    case!(queues.ack, "receipts", ack(vec!["".into()]));
    case!(queues.ack, "receipts", ack(vec![text(1025)]));
    case!(queues.ack, "receipts", ack(vec!["r".into(); 1001]));
    let nack = || NackRequest {
        queue: "q".into(),
        receipt: "r".into(),
        delay: None,
        ..Default::default()
    };
    case!(
        queues.nack,
        "queue",
        NackRequest {
            queue: "".into(),
            ..nack()
        }
    );
    case!(
        queues.nack,
        "receipt",
        NackRequest {
            receipt: "".into(),
            ..nack()
        }
    );
    case!(
        queues.nack,
        "delay",
        NackRequest {
            delay: neg(),
            ..nack()
        }
    );
    let extend_lease = || ExtendLeaseRequest {
        queue: "q".into(),
        receipt: "r".into(),
        visibility: None,
        ..Default::default()
    };
    case!(
        queues.extend_lease,
        "queue",
        ExtendLeaseRequest {
            queue: text(513),
            ..extend_lease()
        }
    );
    case!(
        queues.extend_lease,
        "receipt",
        ExtendLeaseRequest {
            receipt: "".into(),
            ..extend_lease()
        }
    );
    for visibility in [neg(), zero()] {
        case!(
            queues.extend_lease,
            "visibility",
            ExtendLeaseRequest {
                visibility,
                ..extend_lease()
            }
        );
    }
    let peek = || PeekRequest {
        queue: "q".into(),
        state: 0,
        limit: 0,
        group: None,
    };
    case!(
        queues.peek,
        "queue",
        PeekRequest {
            queue: "".into(),
            ..peek()
        }
    );
    case!(
        queues.peek,
        "state",
        PeekRequest {
            state: 99,
            ..peek()
        }
    );
    case!(
        queues.peek,
        "limit",
        PeekRequest {
            limit: 1001,
            ..peek()
        }
    );
    let cancel = |ids: Vec<String>| CancelRequest {
        queue: "q".into(),
        ids,
        ..Default::default()
    };
    case!(
        queues.cancel,
        "queue",
        CancelRequest {
            queue: "".into(),
            ..cancel(vec!["i".into()])
        }
    );
    case!(queues.cancel, "ids", cancel(vec![]));
    case!(queues.cancel, "ids", cancel(vec![CONTROL.into()]));
    case!(queues.cancel, "ids", cancel(vec![text(257)]));
    case!(queues.cancel, "ids", cancel(vec!["i".into(); 1001]));
    let redrive = |ids: Vec<String>| RedriveRequest {
        queue: "q".into(),
        ids,
    };
    case!(
        queues.redrive,
        "queue",
        RedriveRequest {
            queue: CONTROL.into(),
            ..redrive(vec![])
        }
    );
    case!(queues.redrive, "ids", redrive(vec![CONTROL.into()]));
    case!(queues.redrive, "ids", redrive(vec!["i".into(); 1001]));
    for queue in ["", &text(513)[..], CONTROL] {
        case!(
            queues.stats,
            "queue",
            StatsRequest {
                queue: queue.into()
            }
        );
    }
    let subscribe = || SubscribeRequest {
        queue: "q".into(),
        ..Default::default()
    };
    case!(
        queues.subscribe,
        "queue",
        SubscribeRequest {
            queue: "".into(),
            ..subscribe()
        }
    );
    case!(
        queues.subscribe,
        "max_in_flight",
        SubscribeRequest {
            max_in_flight: 1001,
            ..subscribe()
        }
    );
    for visibility in [neg(), zero()] {
        case!(
            queues.subscribe,
            "visibility",
            SubscribeRequest {
                visibility,
                ..subscribe()
            }
        );
    }
    for worker_id in [&text(257)[..], CONTROL] {
        case!(
            queues.subscribe,
            "worker_id",
            SubscribeRequest {
                worker_id: worker_id.into(),
                ..subscribe()
            }
        );
    }

    // Flow control: a task's group and priority, Peek's group, the config RPCs.
    for group in [&text(257)[..], CONTROL] {
        case!(
            queues.enqueue,
            "group",
            enqueue(vec![TaskSpec {
                group: group.into(),
                ..task()
            }])
        );
    }
    case!(
        queues.enqueue,
        "priority",
        enqueue(vec![TaskSpec {
            priority: 10,
            ..task()
        }])
    );
    case!(
        queues.peek,
        "group",
        PeekRequest {
            group: Some(CONTROL.into()),
            ..peek()
        }
    );
    case!(
        queues.peek,
        "group",
        PeekRequest {
            group: Some("g".into()),
            state: TaskState::Dead as i32,
            ..peek()
        }
    );
    let configure = || ConfigureQueueRequest {
        queue: "q".into(),
        ..Default::default()
    };
    let limit = |limit: u32, period: Option<prost_types::Duration>| {
        Some(RateLimit {
            limit,
            period,
            burst: 0,
        })
    };
    case!(
        queues.configure_queue,
        "queue",
        ConfigureQueueRequest {
            queue: CONTROL.into(),
            ..configure()
        }
    );
    for period in [zero(), neg(), hours(25)] {
        case!(
            queues.configure_queue,
            "rate_limit.period",
            ConfigureQueueRequest {
                rate_limit: limit(10, period),
                ..configure()
            }
        );
    }
    case!(
        queues.configure_queue,
        "rate_limit.limit",
        ConfigureQueueRequest {
            rate_limit: limit(1_000_001, None),
            ..configure()
        }
    );
    case!(
        queues.configure_queue,
        "group_rate_limit.period",
        ConfigureQueueRequest {
            group_rate_limit: limit(10, zero()),
            ..configure()
        }
    );
    let configure_group = || ConfigureGroupRequest {
        queue: "q".into(),
        group: "g".into(),
        ..Default::default()
    };
    case!(
        queues.configure_group,
        "weight",
        ConfigureGroupRequest {
            weight: Some(101),
            ..configure_group()
        }
    );
    case!(
        queues.configure_group,
        "group",
        ConfigureGroupRequest {
            group: CONTROL.into(),
            ..configure_group()
        }
    );

    for page_token in ["not-ours", "q1.zz", "g1.6c"] {
        case!(
            queues.list_queues,
            "page_token",
            ListQueuesRequest {
                page_token: page_token.into(),
                ..Default::default()
            }
        );
    }
    case!(
        queues.list_queues,
        "page_size",
        ListQueuesRequest {
            page_size: 1001,
            ..Default::default()
        }
    );
    case!(
        queues.list_queues,
        "prefix",
        ListQueuesRequest {
            prefix: CONTROL.into(),
            ..Default::default()
        }
    );
    case!(
        queues.list_groups,
        "page_token",
        ListGroupsRequest {
            queue: "q".into(),
            page_token: "q1.6c".into(),
            ..Default::default()
        }
    );
    case!(
        queues.list_groups,
        "queue",
        ListGroupsRequest {
            queue: "".into(),
            ..Default::default()
        }
    );

    let schedule = || Schedule {
        name: "nightly".into(),
        queue: "q".into(),
        spec: Some(schedule::Spec::Cron("0 3 * * *".into())),
        ..Default::default()
    };
    let put = |schedule: Schedule| PutScheduleRequest {
        schedule: Some(schedule),
    };
    case!(
        schedules.put_schedule,
        "schedule",
        PutScheduleRequest { schedule: None }
    );
    for (field, bad) in [
        (
            "name",
            Schedule {
                name: String::new(),
                ..schedule()
            },
        ),
        (
            "name",
            Schedule {
                name: text(513),
                ..schedule()
            },
        ),
        (
            "queue",
            Schedule {
                queue: CONTROL.into(),
                ..schedule()
            },
        ),
        (
            "cron",
            Schedule {
                spec: None,
                ..schedule()
            },
        ),
        (
            "cron",
            Schedule {
                spec: Some(schedule::Spec::Cron("61 * * * *".into())),
                ..schedule()
            },
        ),
        (
            "cron",
            Schedule {
                spec: Some(schedule::Spec::Cron("* * *".into())),
                ..schedule()
            },
        ),
        (
            "cron",
            Schedule {
                spec: Some(schedule::Spec::Cron("0 0 30 2 *".into())),
                ..schedule()
            },
        ),
        (
            "time_zone",
            Schedule {
                time_zone: "Mars/Olympus_Mons".into(),
                ..schedule()
            },
        ),
        (
            "time_zone",
            Schedule {
                spec: Some(schedule::Spec::Every(ms(60_000).unwrap())),
                time_zone: "Europe/Paris".into(),
                ..schedule()
            },
        ),
        (
            "every",
            Schedule {
                spec: Some(schedule::Spec::Every(ms(999).unwrap())),
                ..schedule()
            },
        ),
        (
            "every",
            Schedule {
                spec: Some(schedule::Spec::Every(neg().unwrap())),
                ..schedule()
            },
        ),
        (
            "catch_up_window",
            Schedule {
                catch_up_window: hours(24 * 8),
                ..schedule()
            },
        ),
        (
            "overlap",
            Schedule {
                overlap: 7,
                ..schedule()
            },
        ),
        (
            "priority",
            Schedule {
                task: Some(ScheduledTask {
                    priority: 10,
                    ..Default::default()
                }),
                ..schedule()
            },
        ),
        (
            "group",
            Schedule {
                task: Some(ScheduledTask {
                    group: CONTROL.into(),
                    ..Default::default()
                }),
                ..schedule()
            },
        ),
        (
            "payload",
            Schedule {
                task: Some(ScheduledTask {
                    payload: vec![0; 1024 * 1024 + 1],
                    ..Default::default()
                }),
                ..schedule()
            },
        ),
    ] {
        case!(schedules.put_schedule, field, put(bad));
    }
    case!(
        schedules.get_schedule,
        "name",
        GetScheduleRequest {
            name: String::new()
        }
    );
    case!(
        schedules.delete_schedule,
        "name",
        DeleteScheduleRequest {
            name: CONTROL.into()
        }
    );
    case!(
        schedules.trigger_schedule,
        "name",
        TriggerScheduleRequest { name: text(513) }
    );
    case!(
        schedules.list_schedules,
        "page_token",
        ListSchedulesRequest {
            page_token: "q1.6c".into(),
            ..Default::default()
        }
    );
    case!(
        schedules.list_schedules,
        "page_size",
        ListSchedulesRequest {
            page_size: 1001,
            ..Default::default()
        }
    );

    case!(
        locks.watch,
        "name",
        WatchRequest {
            name: String::new()
        }
    );

    case!(
        locks.list_locks,
        "page_token",
        ListLocksRequest {
            page_token: "q1.6c".into(),
            ..Default::default()
        }
    );
    case!(
        locks.list_locks,
        "page_size",
        ListLocksRequest {
            page_size: 1001,
            ..Default::default()
        }
    );
    case!(
        locks.list_locks,
        "prefix",
        ListLocksRequest {
            prefix: CONTROL.into(),
            ..Default::default()
        }
    );

    // Semaphores: `limit` has no default and a ceiling; `permits` never over it.
    let take = |limit: u32, permits: u32| SemaphoreServiceAcquireRequest {
        name: "s".into(),
        owner: "o".into(),
        limit,
        permits,
        ..Default::default()
    };
    case!(semaphores.acquire, "limit", take(0, 1));
    case!(semaphores.acquire, "limit", take(1_000_001, 1));
    case!(semaphores.acquire, "permits", take(3, 4));
    case!(semaphores.acquire, "permits", take(1_000_000, 1_000_001));
    for name in ["", &text(513)[..], CONTROL] {
        case!(
            semaphores.acquire,
            "name",
            SemaphoreServiceAcquireRequest {
                name: name.into(),
                ..take(1, 1)
            }
        );
    }
    case!(
        semaphores.acquire,
        "owner",
        SemaphoreServiceAcquireRequest {
            owner: CONTROL.into(),
            ..take(1, 1)
        }
    );
    case!(
        semaphores.acquire,
        "ttl",
        SemaphoreServiceAcquireRequest {
            ttl: zero(),
            ..take(1, 1)
        }
    );
    case!(
        semaphores.acquire,
        "wait",
        SemaphoreServiceAcquireRequest {
            wait: neg(),
            ..take(1, 1)
        }
    );
    case!(
        semaphores.acquire,
        "request_id",
        SemaphoreServiceAcquireRequest {
            request_id: text(257),
            ..take(1, 1)
        }
    );
    case!(
        semaphores.release,
        "token",
        SemaphoreServiceReleaseRequest {
            name: "s".into(),
            token: String::new()
        }
    );
    case!(
        semaphores.extend,
        "ttl",
        SemaphoreServiceExtendRequest {
            name: "s".into(),
            token: "t".into(),
            ttl: hours(25)
        }
    );
    case!(
        semaphores.describe,
        "name",
        SemaphoreServiceDescribeRequest { name: text(513) }
    );
    case!(
        semaphores.hold,
        "permits",
        SemaphoreServiceHoldRequest {
            name: "s".into(),
            owner: "o".into(),
            limit: 2,
            permits: 3,
            ..Default::default()
        }
    );
    case!(
        semaphores.hold,
        "limit",
        SemaphoreServiceHoldRequest {
            name: "s".into(),
            owner: "o".into(),
            ..Default::default()
        }
    );

    let scripts = redis.command_calls("evalsha").await;
    let total = cases.len();
    for (label, field, call) in cases {
        let status = call.await.expect_err(&label);
        assert_eq!(named_field(&status), field, "{label}");
    }
    assert_eq!(total, 147, "cases dropped from the table");
    assert_eq!(
        redis.command_calls("evalsha").await,
        scripts,
        "bad input reached Redis"
    );
    Ok(())
}

/// `AcquireRequest` and `EnqueueRequest` as a client in a language without string
/// checks could send them: the string fields as raw bytes (same field numbers).
#[derive(Clone, PartialEq, Message)]
struct RawAcquire {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    owner: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RawEnqueue {
    #[prost(bytes = "vec", tag = "1")]
    queue: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    tasks: Vec<RawSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct RawSpec {
    #[prost(bytes = "vec", tag = "1")]
    id: Vec<u8>,
}

/// Sends `request` to `path` as its raw bytes.
async fn send_raw<M: Message + Send + Sync + 'static>(
    server: &TestServer,
    path: &'static str,
    request: M,
) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<M, ()>::default();
    grpc.unary(
        tonic::Request::new(request),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_that_is_not_utf8_is_invalid_argument_naming_its_field() -> TestResult {
    let redis = TestRedis::start().await;
    let server = TestServer::start(&redis).await;
    let latin1 = b"caf\xe9".to_vec();
    let status = send_raw(
        &server,
        "/turnstile.v1.LockService/Acquire",
        RawAcquire {
            name: latin1.clone(),
            owner: b"o".to_vec(),
        },
    )
    .await
    .expect_err("a Latin-1 name");
    assert_eq!(named_field(&status), "name", "{status:?}");
    assert!(status.message().contains("UTF-8"), "{status:?}");
    // In a repeated message, the path from the request down.
    let status = send_raw(
        &server,
        "/turnstile.v1.QueueService/Enqueue",
        RawEnqueue {
            queue: b"q".to_vec(),
            tasks: vec![RawSpec { id: b"ok".to_vec() }, RawSpec { id: latin1 }],
        },
    )
    .await
    .expect_err("a Latin-1 task id");
    assert_eq!(named_field(&status), "tasks.id", "{status:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_message_size_limit_is_resource_exhausted_naming_the_setting(
) -> TestResult {
    let redis = TestRedis::start().await;
    // 5 tasks of 1 MiB: 5 MiB, over the 4 MiB default.
    let request = || EnqueueRequest {
        queue: "q".into(),
        tasks: (0..5)
            .map(|n| TaskSpec {
                id: format!("big{n}"),
                payload: vec![7u8; 1024 * 1024].into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let server = TestServer::start(&redis).await;
    let status = server
        .queues()
        .await
        .enqueue(request())
        .await
        .expect_err("5 MiB");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--max-message-size"),
        "{status:?}"
    );
    assert_eq!(redis.command_calls("evalsha").await, 0, "it reached Redis");
    // The limit is a setting.
    let roomy = TestServer::start_with(&redis, |config| {
        config.max_message_size = 8 * 1024 * 1024;
    })
    .await;
    let results = roomy.queues().await.enqueue(request()).await?.into_inner();
    assert!(results.results.iter().all(|r| r.created));
    Ok(())
}

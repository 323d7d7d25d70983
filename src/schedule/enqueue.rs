//! How schedules reach the queues, the layer below: a fire is `QueueStore::fire`
//! (`queue/lua/fire.lua`, which stores the task and records the fire time on the
//! queue's own slot in one run), a trigger a plain enqueue, and a schedule's last fire
//! is read where that record lives.

use crate::{
    error::Result,
    queue::{self, Fire, NewTask, QueueStore},
    redis::TenantScoped,
    tenant::Tenant,
};

use super::model::{FireCall, FireOutcome, FireReply, TaskTemplate};

/// Runs fires of schedules into `queue` of `tenant`, in one script run; one reply per
/// call, in order.
pub(super) async fn fire(
    queues: &QueueStore,
    tenant: &Tenant,
    queue: &str,
    calls: Vec<FireCall<'_>>,
) -> Result<Vec<FireReply>> {
    let fires: Vec<Fire> = calls
        .into_iter()
        .map(|call| Fire {
            schedule: call.schedule.to_owned(),
            at_ms: call.at_ms,
            skip_overlap: call.skip_overlap,
            task: scheduled_task(call.id, call.task, queue::Schedule::At(call.at_ms)),
        })
        .collect();
    let fired = queues.tenant(tenant).fire(queue, &fires).await?;
    Ok(fired
        .into_iter()
        .map(|fired| FireReply {
            outcome: match fired.outcome {
                queue::FireOutcome::Fired { .. } => FireOutcome::Fired,
                queue::FireOutcome::Overlap => FireOutcome::Overlap,
                queue::FireOutcome::Done => FireOutcome::Done,
                queue::FireOutcome::Early => FireOutcome::Early,
            },
            now_ms: fired.now_ms,
            handled_ms: fired.handled_ms,
            enqueued_ms: fired.enqueued_ms,
        })
        .collect())
}

/// The last fire time of `schedule` that enqueued a task into `queue` (0: none).
pub(super) async fn last_fire(
    queues: &QueueStore,
    tenant: &Tenant,
    queue: &str,
    schedule: &str,
) -> Result<i64> {
    queues.tenant(tenant).last_fire(queue, schedule).await
}

/// Enqueues `task` as `id`, due now, kept if that id is in the queue (a trigger).
pub(super) async fn enqueue_now(
    queues: &QueueStore,
    tenant: &Tenant,
    queue: &str,
    id: String,
    task: &TaskTemplate,
) -> Result<()> {
    let task = scheduled_task(id, task, queue::Schedule::Now);
    queues.tenant(tenant).enqueue(queue, vec![task]).await?;
    Ok(())
}

/// A schedule's task as the queue store takes it.
fn scheduled_task(id: String, task: &TaskTemplate, schedule: queue::Schedule) -> NewTask {
    NewTask {
        id,
        payload: task.payload.clone().into(),
        schedule,
        replace: false,
        max_attempts: task.max_attempts,
        dedupe_window: std::time::Duration::ZERO,
        fresh_id: false,
        group: task.group.clone(),
        priority: task.priority,
    }
}

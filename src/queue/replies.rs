//! The queue scripts' replies into model values, in one place. A task travels as a
//! row of 3 values, written by `push_row()`/`push_fields()` in
//! `lua/include/push_row.lua` and read by [`task_rows`] here; nothing else knows the
//! row's layout.

use bytes::Bytes;
use redis::Value;

use super::{
    model::{
        Attempt, Dispatched, Enqueued, FireOutcome, Fired, Leased, NewTask, Outcome, Stats, Task,
        TaskState,
    },
    Limit, QueueConfig,
};
use crate::{
    error::{Error, Result},
    redis::reply::{bytes, int, optional_int, string},
};

/// Values per task row: the packed head and texts (see [`task_row`]), the payload, the
/// progress.
const ROW: usize = 3;

/// Item `at` of `reply` as bytes, taken out of it (left empty): payloads, progress,
/// histories and results are moved into the task, not copied.
fn take_bytes(reply: &mut [Value], at: usize) -> Result<Vec<u8>> {
    match reply.get_mut(at) {
        Some(Value::BulkString(bytes)) => Ok(std::mem::take(bytes)),
        _ => bytes(reply, at),
    }
}

/// Rows of [`ROW`] values each. The payloads and progress are taken out of `values`,
/// not copied (a payload may be a MiB).
pub(super) fn task_rows(values: &mut [Value]) -> Result<Vec<Task>> {
    if !values.len().is_multiple_of(ROW) {
        return Err(Error::Internal(format!(
            "task rows of {} values",
            values.len()
        )));
    }
    values.chunks_mut(ROW).map(task_row).collect()
}

/// The numbers at the head of a packed row (f64), then the lengths of its texts (u32).
const ROW_NUMBERS: usize = 6;
const ROW_TEXTS: usize = 5;

/// A row (`push_fields()` in `lua/include/push_row.lua`): its due, enqueued_at,
/// attempt, max_attempts, lease end and priority as little-endian doubles, the lengths
/// of its id, state name, receipt, group and last error (u32), those texts; then the
/// payload and the progress (taken out of `r`).
fn task_row(r: &mut [Value]) -> Result<Task> {
    let bad = || Error::Internal("a task row does not parse".into());
    let (payload, progress) = (take_bytes(r, 1)?, take_bytes(r, 2)?);
    let Some(Value::BulkString(packed)) = r.first() else {
        return Err(bad());
    };
    let head = packed
        .get(..ROW_NUMBERS * 8 + ROW_TEXTS * 4)
        .ok_or_else(bad)?;
    let number =
        |n: usize| f64::from_le_bytes(head[n * 8..n * 8 + 8].try_into().expect("8 bytes")) as i64;
    let mut texts = Vec::with_capacity(ROW_TEXTS);
    let mut at = head.len();
    for n in 0..ROW_TEXTS {
        let from = ROW_NUMBERS * 8 + n * 4;
        let len = u32::from_le_bytes(head[from..from + 4].try_into().expect("4 bytes")) as usize;
        let text = packed.get(at..at + len).ok_or_else(bad)?;
        texts.push(String::from_utf8_lossy(text).into_owned());
        at += len;
    }
    if at != packed.len() {
        return Err(bad());
    }
    let [id, state, receipt, group, last_error]: [String; ROW_TEXTS] =
        texts.try_into().map_err(|_| bad())?;
    Ok(Task {
        id,
        payload: Bytes::from(payload),
        state: TaskState::from_script(state.as_bytes())?,
        due_at_ms: number(0),
        enqueued_at_ms: number(1),
        attempt: number(2) as u32,
        max_attempts: number(3) as u32,
        receipt,
        lease_expires_at_ms: number(4),
        group,
        priority: number(5) as u32,
        last_error,
        progress: Bytes::from(progress),
        history: Vec::new(),
        result: Bytes::new(),
    })
}

/// `peek.lua` for one task: its row, then its history and result (taken out of
/// `values`).
pub(super) fn task_with_story(values: &mut [Value]) -> Result<Option<Task>> {
    if values.is_empty() {
        return Ok(None);
    }
    if values.len() != ROW + 2 {
        return Err(Error::Internal(format!(
            "a task's story of {} values",
            values.len()
        )));
    }
    let mut task = task_row(&mut values[..ROW])?;
    task.history = attempts(&take_bytes(values, ROW)?)?;
    task.result = Bytes::from(take_bytes(values, ROW + 1)?);
    Ok(Some(task))
}

/// A packed history (`lua/include/attempts.lua`): per attempt, its number (u32),
/// leased_at and ended_at (f64 Unix ms), its outcome (one byte), the lengths of its
/// worker_id and error (u32), then those bytes; little-endian.
fn attempts(mut packed: &[u8]) -> Result<Vec<Attempt>> {
    const HEAD: usize = 4 + 8 + 8 + 1 + 4 + 4;
    let bad = || Error::Internal("a task's history does not parse".into());
    let mut out = Vec::new();
    while !packed.is_empty() {
        let head = packed.get(..HEAD).ok_or_else(bad)?;
        let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
        let f64_at = |at: usize| f64::from_le_bytes(head[at..at + 8].try_into().unwrap());
        let (worker_len, error_len) = (u32_at(21) as usize, u32_at(25) as usize);
        let body = packed
            .get(HEAD..HEAD + worker_len + error_len)
            .ok_or_else(bad)?;
        out.push(Attempt {
            number: u32_at(0),
            leased_at_ms: f64_at(4) as i64,
            ended_at_ms: f64_at(12) as i64,
            outcome: Outcome::from_script(head[20])?,
            worker_id: String::from_utf8_lossy(&body[..worker_len]).into_owned(),
            error: String::from_utf8_lossy(&body[worker_len..]).into_owned(),
        });
        packed = &packed[HEAD + worker_len + error_len..];
    }
    Ok(out)
}

/// `fire.lua`: now, then per fire its outcome, handled before, enqueued before and
/// created.
pub(super) fn fired(reply: &[Value], fires: usize) -> Result<Vec<Fired>> {
    if reply.len() != 1 + 4 * fires {
        return Err(Error::Internal(format!(
            "fire replied {} values for {fires} fires",
            reply.len()
        )));
    }
    let now_ms = int(reply, 0)?;
    reply[1..]
        .chunks(4)
        .map(|r| {
            let outcome = match string(r, 0)?.as_str() {
                "fired" => FireOutcome::Fired {
                    created: int(r, 3)? == 1,
                },
                "overlap" => FireOutcome::Overlap,
                "done" => FireOutcome::Done,
                "early" => FireOutcome::Early,
                other => return Err(Error::Internal(format!("fire replied {other:?}"))),
            };
            Ok(Fired {
                outcome,
                now_ms,
                handled_ms: int(r, 1)?,
                enqueued_ms: int(r, 2)?,
            })
        })
        .collect()
}

/// `enqueue.lua`: one value, per task in the batch's order created and replaced (a
/// byte each, 0/1) and due (a little-endian double: Unix ms), as
/// `lua/include/pack_added.lua` packs them.
pub(super) fn enqueued(tasks: &[NewTask], reply: &[u8]) -> Result<Vec<Enqueued>> {
    const PER_TASK: usize = 1 + 1 + 8;
    if reply.len() != tasks.len() * PER_TASK {
        return Err(Error::Internal(format!(
            "enqueue replied {} bytes for {} tasks",
            reply.len(),
            tasks.len()
        )));
    }
    Ok(tasks
        .iter()
        .zip(reply.chunks(PER_TASK))
        .map(|(task, r)| Enqueued {
            id: task.id.clone(),
            created: r[0] == 1,
            replaced: r[1] == 1,
            due_at_ms: f64::from_le_bytes(r[2..].try_into().expect("8 bytes")) as i64,
        })
        .collect())
}

/// `enqueue_and_dispatch.lua`: enqueue.lua's reply, then dispatch.lua's (left out
/// when the run left the leasing to the feeds).
pub(super) fn enqueued_and_dispatched(
    reply: &mut [Value],
) -> Result<(&[u8], Option<&mut [Value]>)> {
    let bad = |len: usize| Error::Internal(format!("enqueue_and_dispatch replied {len} values"));
    let len = reply.len();
    let Some((Value::BulkString(enqueued), rest)) = reply.split_first_mut() else {
        return Err(bad(len));
    };
    let dispatched = match rest {
        [] => None,
        [Value::Array(values)] => Some(values.as_mut_slice()),
        _ => return Err(bad(len)),
    };
    Ok((enqueued, dispatched))
}

/// `ack.lua`: a byte '1' (acked) or '0' (stale) per receipt.
pub(super) fn acked(flags: &[u8]) -> Vec<bool> {
    flags.iter().map(|&flag| flag == b'1').collect()
}

/// The streams an Ack's run leased to (0-based, among those it was given) and
/// dispatch.lua's reply for them.
pub(super) type Refilled<'a> = (Vec<usize>, &'a mut [Value]);

/// `ack_and_dispatch.lua`: ack.lua's reply, then what it leased, if it did: the
/// 1-based indices of the streams it leased to and dispatch.lua's reply.
pub(super) fn acked_and_dispatched(
    reply: &mut [Value],
) -> Result<(Vec<bool>, Option<Refilled<'_>>)> {
    let bad = |len: usize| Error::Internal(format!("ack_and_dispatch replied {len} values"));
    let len = reply.len();
    match reply {
        [Value::BulkString(flags)] => Ok((acked(flags), None)),
        [Value::BulkString(flags), Value::Array(chosen), Value::Array(dispatched)] => {
            let chosen = (0..chosen.len())
                .map(|at| int(chosen, at).map(|n| n as usize - 1))
                .collect::<Result<_>>()?;
            Ok((acked(flags), Some((chosen, dispatched.as_mut_slice()))))
        }
        _ => Err(bad(len)),
    }
}

/// `lease.lua`: the next due instant (-1: none), the limits that held tasks back,
/// then task rows.
pub(super) fn leased(reply: &mut [Value]) -> Result<Leased> {
    Ok(Leased {
        next_due_ms: optional_int(reply, 0)?,
        held_back: Limit::from_script(&string(reply, 1)?)?,
        tasks: task_rows(reply.get_mut(2..).unwrap_or_default())?,
    })
}

/// `dispatch.lua`: now (µs), next pending, next lease end, the limits that held tasks back,
/// each stream's held count, then per task the stream's 1-based index and its row.
pub(super) fn dispatched(reply: &mut [Value], streams: usize) -> Result<Dispatched> {
    let head = 4 + streams;
    if reply.len() < head || !(reply.len() - head).is_multiple_of(ROW + 1) {
        return Err(Error::Internal(format!(
            "dispatch replied {} values for {streams} streams",
            reply.len()
        )));
    }
    let mut tasks = Vec::with_capacity((reply.len() - head) / (ROW + 1));
    for chunk in reply[head..].chunks_mut(ROW + 1) {
        let stream = int(chunk, 0)? as usize;
        if stream == 0 || stream > streams {
            return Err(Error::Internal(format!("dispatch named stream {stream}")));
        }
        tasks.push((stream - 1, task_row(&mut chunk[1..])?));
    }
    Ok(Dispatched {
        now_us: int(reply, 0)?,
        next_pending_ms: optional_int(reply, 1)?,
        next_lease_end_ms: optional_int(reply, 2)?,
        held_back: Limit::from_script(&string(reply, 3)?)?,
        held: (4..head)
            .map(|at| int(reply, at).map(|n| n as u32))
            .collect::<Result<_>>()?,
        tasks,
    })
}

/// `stats.lua`: ready, delayed, in flight, dead, oldest ready (-1), next due (-1),
/// dead letters, then the config's five values.
pub(super) fn stats(r: &[Value]) -> Result<Stats> {
    if r.len() != 22 {
        return Err(Error::Internal(format!("stats replied {} values", r.len())));
    }
    let at = |n: usize| int(r, n).map(|ms| (ms >= 0).then_some(ms));
    Ok(Stats {
        ready: int(r, 0)? as u64,
        delayed: int(r, 1)? as u64,
        in_flight: int(r, 2)? as u64,
        dead: int(r, 3)? as u64,
        oldest_ready_at_ms: at(4)?,
        next_due_at_ms: at(5)?,
        dead_letters: int(r, 6)? as u64,
        config: QueueConfig::from_reply(&r[7..14])?,
        delivered_5m: int(r, 14)? as u64,
        outcomes: [
            int(r, 15)? as u64,
            int(r, 16)? as u64,
            int(r, 17)? as u64,
            int(r, 18)? as u64,
            int(r, 19)? as u64,
        ],
        completed: int(r, 20)? as u64,
        cancelled: int(r, 21)? as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row as `push_fields()` packs it: due 10, enqueued 5, attempt 1 of 25, receipt
    /// "r:1" until 99, group "g", priority 3.
    fn row(id: &str, state: &str) -> Vec<Value> {
        let mut packed = Vec::new();
        for number in [10.0_f64, 5.0, 1.0, 25.0, 99.0, 3.0] {
            packed.extend(number.to_le_bytes());
        }
        let texts = [id, state, "r:1", "g", "disk full"];
        for text in texts {
            packed.extend((text.len() as u32).to_le_bytes());
        }
        for text in texts {
            packed.extend(text.as_bytes());
        }
        vec![
            Value::BulkString(packed),
            Value::BulkString(b"payload".to_vec()),
            Value::BulkString(b"step 3".to_vec()),
        ]
    }

    #[test]
    fn a_dispatch_reply_names_each_task_s_stream_and_each_stream_s_count() {
        let mut reply = vec![
            Value::Int(7),
            Value::Int(-1),
            Value::Int(99),
            Value::BulkString(b"rate_limit".to_vec()),
        ];
        reply.extend([Value::Int(1), Value::Int(0)]);
        reply.push(Value::Int(1));
        reply.extend(row("a", "in_flight"));
        let got = dispatched(&mut reply.clone(), 2).unwrap();
        assert_eq!(got.now_us, 7);
        assert_eq!(got.next_pending_ms, None);
        assert_eq!(got.next_lease_end_ms, Some(99));
        assert_eq!(got.held, vec![1, 0]);
        assert_eq!(got.held_back, [Limit::Rate]);
        assert_eq!(got.tasks.len(), 1);
        assert_eq!(got.tasks[0].0, 0);
        assert_eq!(got.tasks[0].1.state, TaskState::InFlight);
        assert_eq!(got.tasks[0].1.lease_expires_at_ms, 99);
        reply[4 + 2] = Value::Int(3);
        assert!(dispatched(&mut reply, 2).is_err(), "stream 3 of 2");
    }

    #[test]
    fn a_row_s_payload_and_progress_are_moved_into_its_task_not_copied() {
        let mut values = row("a", "ready");
        let Value::BulkString(payload) = &values[1] else {
            unreachable!()
        };
        let at = payload.as_ptr();
        let task = task_rows(&mut values).unwrap().remove(0);
        assert_eq!(task.payload.as_ptr(), at);
        assert_eq!(values[1], Value::BulkString(Vec::new()));
        assert_eq!(task.progress.as_ref(), b"step 3");
    }

    #[test]
    fn rows_of_the_wrong_length_or_state_are_internal() {
        let mut values = row("a", "ready");
        let task = &task_rows(&mut values.clone()).unwrap()[0];
        assert_eq!(
            (task.id.as_str(), task.group.as_str(), task.priority),
            ("a", "g", 3)
        );
        assert_eq!(
            (task.last_error.as_str(), task.progress.as_ref()),
            ("disk full", &b"step 3"[..])
        );
        values.pop();
        assert!(task_rows(&mut values).is_err());
        assert!(task_rows(&mut row("a", "sleeping")).is_err());
    }
}

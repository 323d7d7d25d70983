//! `worker`: the Rust client library's no-op worker against a hand-written loop on the
//! raw stubs (one Subscribe, an Ack per task sent as soon as the task arrives), each
//! over 20,000 tasks at concurrency 8, in two alternating rounds (SDK.md's benchmark:
//! the library at least 0.9 of the raw loop).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{sync::Notify, task::JoinSet, time::Instant};
use tokio_stream::StreamExt;
use turnstile::{
    client::{Client, Enqueue, Options, Task},
    pb::{self, subscribe_response::Event},
};

use super::{
    failed,
    report::{Extra, Report},
    target::Target,
};

const TASKS: usize = 20_000;
const CONCURRENCY: u32 = 8;
const ROUNDS: usize = 2;

pub async fn worker(target: &Target) -> Result<Report, String> {
    let client = Client::new(Options {
        server: Some(target.servers[0].clone()),
        ..Options::default()
    })
    .map_err(|err| err.to_string())?;
    let (mut raw, mut library) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let run = turnstile::token::new_token();
        for library_first in [round % 2 == 0, round % 2 != 0] {
            let queue = format!("bench:worker:{run}:{library_first}");
            fill(&client, &queue).await?;
            if library_first {
                library.push(library_loop(&client, &queue).await?);
            } else {
                raw.push(raw_loop(&client, &queue).await?);
            }
        }
    }
    let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len() as f64;
    let (raw, library) = (mean(&raw), mean(&library));
    Ok(Report {
        scenario: "worker",
        ops_per_s: library,
        ..Report::default()
    }
    .extra("tasks", Extra::Count(TASKS as u64))
    .extra("raw_tasks_per_s", Extra::Number(raw))
    .extra("library_over_raw", Extra::Number(library / raw)))
}

/// Enqueues the round's tasks, a thousand a call.
async fn fill(client: &Client, queue: &str) -> Result<(), String> {
    let queue = client.queue(queue);
    for _ in 0..TASKS / 1_000 {
        queue
            .enqueue_many((0..1_000).map(|_| Enqueue::new("x")))
            .await
            .map_err(|err| err.to_string())?;
    }
    Ok(())
}

/// Waits until the queue holds nothing in flight: the last acks landed.
async fn settled(client: &Client, queue: &str) -> Result<(), String> {
    let queue = client.queue(queue);
    while queue
        .stats()
        .await
        .map_err(|err| err.to_string())?
        .in_flight
        > 0
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// The raw loop's tasks/s.
async fn raw_loop(client: &Client, queue: &str) -> Result<f64, String> {
    let started = Instant::now();
    let mut stream = client
        .raw_queues()
        .subscribe(pb::SubscribeRequest {
            queue: queue.to_owned(),
            max_in_flight: CONCURRENCY,
            ..Default::default()
        })
        .await
        .map_err(failed)?
        .into_inner();
    let mut acks = JoinSet::new();
    let mut delivered = 0;
    while delivered < TASKS {
        match stream.next().await {
            Some(Ok(pb::SubscribeResponse {
                event: Some(Event::Task(task)),
            })) => {
                delivered += 1;
                let mut queues = client.raw_queues();
                let request = pb::AckRequest {
                    queue: queue.to_owned(),
                    receipts: vec![task.receipt],
                    ..Default::default()
                };
                acks.spawn(async move { queues.ack(request).await.map(drop) });
            }
            Some(Ok(_)) => {}
            Some(Err(status)) => return Err(failed(status)),
            None => return Err("the raw loop's stream ended".into()),
        }
        while let Some(done) = acks.try_join_next() {
            done.map_err(|err| err.to_string())?.map_err(failed)?;
        }
    }
    while let Some(done) = acks.join_next().await {
        done.map_err(|err| err.to_string())?.map_err(failed)?;
    }
    drop(stream);
    Ok(TASKS as f64 / started.elapsed().as_secs_f64())
}

/// The library worker's tasks/s.
async fn library_loop(client: &Client, queue: &str) -> Result<f64, String> {
    let handled = Arc::new(AtomicUsize::new(0));
    let all_handled = Arc::new(Notify::new());
    let worker = client
        .worker(queue, {
            let (handled, all_handled) = (handled.clone(), all_handled.clone());
            move |_task: Task| {
                if handled.fetch_add(1, Ordering::Relaxed) + 1 == TASKS {
                    all_handled.notify_one();
                }
                async { Ok(()) }
            }
        })
        .concurrency(CONCURRENCY)
        .handle_signals(false);
    let stop = worker.stop_token();
    let started = Instant::now();
    let running = tokio::spawn(worker.run());
    all_handled.notified().await;
    settled(client, queue).await?;
    let rate = TASKS as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    running
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| err.to_string())?;
    Ok(rate)
}

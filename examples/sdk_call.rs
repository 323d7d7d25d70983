// cargo run --example sdk_call
use std::time::Duration;

use turnstile::client::{Client, Enqueue, Json, Task, TaskError};

#[derive(serde::Deserialize)]
struct Question {
    n: u64,
}

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let worker = client
        .worker("rs-squares", |task: Task| async move {
            let question: Question = task.json()?;
            Ok::<_, TaskError>(Json(
                serde_json::json!({ "square": question.n * question.n }),
            ))
        })
        .handle_signals(false);
    let stop = worker.stop_token();
    let running = tokio::spawn(worker.run());
    let answer = client
        .queue("rs-squares")
        .call(
            Enqueue::json(&serde_json::json!({ "n": 12 }))?,
            Duration::from_secs(30),
        )
        .await?;
    println!("the worker answered {}", String::from_utf8_lossy(&answer));
    stop.cancel();
    running.await.expect("the worker ran")?;
    Ok(())
}

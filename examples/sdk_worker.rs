// cargo run --example sdk_worker
use std::time::Duration;

use turnstile::client::{Client, Enqueue, Task, TaskError};

#[derive(serde::Deserialize)]
struct Email {
    to: String,
}

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let signups = client.queue("rs-signups");
    let payload = serde_json::json!({ "to": "ada@example.com" });
    let sent = signups
        .enqueue(Enqueue::json(&payload)?.id("welcome-ada").max_attempts(5))
        .await?;
    println!("enqueued {} created {}", sent.id, sent.created);
    signups
        .enqueue(Enqueue::new("{\"to\": \"bob@example.com\"}").delay(Duration::from_secs(3600)))
        .await?;

    let worker = client
        .worker("rs-signups", |task: Task| async move {
            let email: Email = task.json()?;
            if email.to.starts_with("bounce") {
                return Err(TaskError::retry(Duration::from_secs(30)));
            }
            println!(
                "sending {} to {}, attempt {}",
                task.id, email.to, task.attempt
            );
            Ok(())
        })
        .concurrency(8);
    worker.run().await // until SIGTERM or Ctrl-C (or its stop_token()), then drains
}

// cargo run --example sdk_drain
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use turnstile::client::{Client, Enqueue, Hooks, Task};

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let thumbnails = client.queue("rs-thumbnails");
    for n in 0..3 {
        thumbnails
            .enqueue(Enqueue::new(format!("{n}")).id(format!("thumb-{n}")))
            .await?;
    }
    let finished = Arc::new(Mutex::new(Vec::new()));
    let worker = client
        .worker("rs-thumbnails", {
            let finished = finished.clone();
            move |task: Task| {
                finished.lock().unwrap().push(task.id.clone());
                async { Ok(()) }
            }
        })
        .concurrency(2)
        .drain_timeout(Duration::from_secs(10));
    let stop = worker.stop_token();
    let done = finished.clone();
    let worker = worker.hooks(Hooks {
        on_success: Some(Arc::new(move |_, ()| {
            if done.lock().unwrap().len() == 3 {
                stop.cancel();
            }
        })),
        ..Hooks::default()
    });
    worker.run().await?;
    let mut finished = finished.lock().unwrap().clone();
    finished.sort();
    println!("drained after {finished:?}");
    Ok(())
}

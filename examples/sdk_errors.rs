// cargo run --example sdk_errors
use std::time::Duration;

use turnstile::{
    client::{Client, Error, Schedule},
    pb::schedule::Spec,
};

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let digest = client
        .schedules()
        .put(Schedule {
            name: "rs-daily-digest".into(),
            queue: "digests".into(),
            spec: Some(Spec::Cron("0 7 * * *".into())),
            time_zone: "Europe/Paris".into(),
            ..Schedule::default()
        })
        .await?;
    println!("next digest at {:?}", digest.next_fire_at);
    match client.queue("bad\nname").enqueue("x").await {
        Err(Error::InvalidArgument(message)) => println!("refused: {message}"), // names the field
        other => panic!("{other:?}"),
    }
    let ttl = Duration::from_secs(30);
    let holder = client.lock("rs-report", ttl).owner("a").await?;
    let second = client
        .lock("rs-report", ttl)
        .owner("b")
        .wait(Duration::from_millis(100))
        .await;
    if let Err(Error::NotAcquired { .. }) = second {
        println!("someone else is reporting");
    }
    holder.release().await?;
    Ok(())
}

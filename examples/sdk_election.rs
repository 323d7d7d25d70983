// cargo run --example sdk_election
use std::time::Duration;

use tokio_stream::StreamExt;
use turnstile::client::Client;

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let leadership = client
        .campaign("leader", "node-a", Duration::from_secs(6))
        .await?;
    println!("leading with fencing token {}", leadership.fencing_token());
    let mut states = Box::pin(client.watch("leader"));
    if let Some(state) = states.next().await {
        let state = state?;
        println!(
            "leader now: {} with fencing token {}",
            state.owner, state.fencing_token
        );
    }
    // Lead until the lease is gone (or the process ends).
    leadership.lost().cancelled().await;
    println!("lost the lead: {:?}", leadership.lost_reason());
    Ok(())
}

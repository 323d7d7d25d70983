// cargo run --example sdk_lock
use std::time::Duration;

use turnstile::client::Client;

#[tokio::main]
async fn main() -> turnstile::client::Result<()> {
    let client = Client::from_env()?;
    let ttl = Duration::from_secs(10);
    let lease = client
        .lock("stock:phone", ttl)
        .wait(Duration::from_secs(5))
        .await?;
    println!(
        "selling one phone under fencing token {}",
        lease.fencing_token()
    );
    lease.check()?; // Err(LeaseLost) if the lease is gone; lease.lost() is a CancellationToken
    lease.release().await?;
    let again = client.try_lock("stock:phone", ttl).await?;
    println!("free again: {}", again.is_some());
    Ok(())
}

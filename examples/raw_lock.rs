// cargo run --example raw_lock
use turnstile::pb::{lock_service_client::LockServiceClient, AcquireRequest, ReleaseRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("TURNSTILE_SERVER").unwrap_or("http://127.0.0.1:50051".into());
    let mut locks = LockServiceClient::connect(server).await?;
    let won = locks
        .acquire(AcquireRequest {
            name: "stock:phone".into(),
            owner: "buyer-17".into(),
            ttl: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            wait: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            request_id: "order-991".into(), // retrying this call gets the same lease back
        })
        .await?
        .into_inner();
    if won.acquired {
        // ... critical section, guarded by won.fencing_token ...
        println!("raw stub acquired fencing token {}", won.fencing_token);
        let name = "stock:phone".into();
        locks
            .release(ReleaseRequest {
                name,
                token: won.token,
            })
            .await?;
    }
    Ok(())
}

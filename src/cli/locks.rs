//! `turnstile locks [--prefix P]`: the tenant's held locks (`ListLocks`, every page), a
//! table or one JSON object per lock.

use clap::Args;
use serde_json::json;
use turnstile::pb;

use super::{
    client::{ClientArgs, Outcome},
    output::{rfc3339, table},
};

/// `turnstile locks`.
#[derive(Debug, Args)]
pub struct LocksArgs {
    /// Only locks whose names start with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn run(args: LocksArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let mut rows = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .locks
            .list_locks(pb::ListLocksRequest {
                prefix: args.prefix.clone(),
                page_size: 1000,
                page_token: token,
            })
            .await?
            .into_inner();
        for lock in page.locks {
            let expires_at = rfc3339(lock.expires_at.as_ref());
            if args.client.json {
                println!(
                    "{}",
                    json!({
                        "name": lock.name,
                        "owner": lock.owner,
                        "fencing_token": lock.fencing_token,
                        "expires_at": expires_at,
                    })
                );
            } else {
                rows.push(vec![
                    lock.name,
                    lock.owner,
                    lock.fencing_token.to_string(),
                    expires_at,
                ]);
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    if !args.client.json {
        print!(
            "{}",
            table(&["LOCK", "OWNER", "FENCING_TOKEN", "EXPIRES_AT"], &rows)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

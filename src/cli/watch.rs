//! `turnstile watch NAME`: a lock's holder now, then each change (a new holder, the end
//! of a lease), one line each, or one JSON object each with `--json`, until
//! SIGINT or SIGTERM, which end it with exit status 0. A stream the server ends (its shutdown, a connection's age) is opened
//! again, on whichever replica answers; the first message of the new stream is the
//! state then, so nothing is missed but intermediate holders.

use std::{process::ExitCode, time::Duration};

use clap::Args;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::Code;
use turnstile::pb::{self, watch_response::Event};

use super::{
    client::{ClientArgs, Outcome},
    output::rfc3339,
    run::StopSignals,
};

/// `turnstile watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The lock.
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// One event as a line (or a JSON object); heartbeats print nothing.
fn line(event: &Event, json: bool) -> Option<String> {
    Some(match (event, json) {
        (Event::Held(info), false) => format!(
            "held by {} with fencing token {} until {}",
            info.owner,
            info.fencing_token,
            rfc3339(info.expires_at.as_ref())
        ),
        (Event::Held(info), true) => json!({
            "event": "held",
            "owner": info.owner,
            "fencing_token": info.fencing_token,
            "expires_at": rfc3339(info.expires_at.as_ref()),
        })
        .to_string(),
        (Event::Free(_), false) => "free".to_owned(),
        (Event::Free(free), true) => {
            json!({"event": "free", "fencing_token": free.fencing_token}).to_string()
        }
        (Event::Heartbeat(_), _) => return None,
    })
}

/// Prints the lock's changes until SIGINT or SIGTERM (exit 0), or a call fails other
/// than by the server going away.
pub async fn run(args: WatchArgs) -> Outcome {
    let mut stops = StopSignals::install()?;
    tokio::select! {
        outcome = watch(args) => outcome,
        _ = stops.next() => Ok(ExitCode::SUCCESS),
    }
}

async fn watch(args: WatchArgs) -> Outcome {
    let mut client = args.client.connect()?;
    loop {
        let opened = client
            .locks
            .watch(pb::WatchRequest {
                name: args.name.clone(),
            })
            .await;
        let mut stream = match opened {
            Ok(stream) => stream.into_inner(),
            Err(status) if status.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(status) => return Err(status.into()),
        };
        loop {
            match stream.next().await {
                Some(Ok(pb::WatchResponse { event: Some(event) })) => {
                    if let Some(line) = line(&event, args.client.json) {
                        println!("{line}");
                    }
                }
                Some(Ok(_)) => {}
                // The server went away (shutdown, connection age): watch again.
                Some(Err(status)) if status.code() == Code::Unavailable => break,
                Some(Err(status)) => return Err(status.into()),
                None => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

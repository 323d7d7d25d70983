//! `turnstile watch NAME`: a lock's holder now, then each change (a new holder, the end
//! of a lease), one line each, or one JSON object each with `--json`, until SIGINT or
//! SIGTERM, which end it with exit status 0. Built on the client library's `watch`: a
//! stream the server ends (its shutdown, a connection's age) is opened again on
//! whichever replica answers, and a state never goes back to an older fencing token.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use tokio_stream::StreamExt;
use turnstile::client::LockState;

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

/// One state as a line (or a JSON object).
fn line(state: &LockState, json: bool) -> String {
    let expires_at = state.expires_at.map(prost_types::Timestamp::from);
    match (state.held, json) {
        (true, false) => format!(
            "held by {} with fencing token {} until {}",
            state.owner,
            state.fencing_token,
            rfc3339(expires_at.as_ref())
        ),
        (true, true) => json!({
            "event": "held",
            "owner": state.owner,
            "fencing_token": state.fencing_token,
            "expires_at": rfc3339(expires_at.as_ref()),
        })
        .to_string(),
        (false, false) => "free".to_owned(),
        (false, true) => json!({"event": "free", "fencing_token": state.fencing_token}).to_string(),
    }
}

/// Prints the lock's changes until SIGINT or SIGTERM (exit 0), or a call fails other
/// than by the server going away.
pub async fn run(args: WatchArgs) -> Outcome {
    let mut stops = StopSignals::install()?;
    let client = args.client.connect()?;
    let mut states = Box::pin(client.lib.watch(&args.name));
    loop {
        tokio::select! {
            state = states.next() => match state {
                Some(Ok(state)) => println!("{}", line(&state, args.client.json)),
                Some(Err(err)) => return Err(err.into()),
                None => return Ok(ExitCode::SUCCESS),
            },
            _ = stops.next() => return Ok(ExitCode::SUCCESS),
        }
    }
}

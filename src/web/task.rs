//! A task's page (`/task?queue=…&id=…&view=text|json|hex`): its state, group, priority,
//! attempts, due, enqueue and lease times, its last error, progress and result, its
//! delivery history (who had it, when, how each delivery ended and why), and its
//! payload as text, pretty JSON or a hex dump, at most [`PAYLOAD_SHOWN`] bytes of it,
//! always escaped. An admin also gets the task's actions (redrive when DEAD, cancel
//! when not in flight).

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    response::Response,
};
use serde::Deserialize;

use super::{
    forms,
    html::{Html, Url},
    wording::{instant, state_heading},
    Asking, Dashboard,
};
use crate::{
    auth::Viewer,
    error::{Error, Result},
    queue::{Attempt, Outcome},
    redis::TenantScoped,
    validate,
};

/// The most payload bytes a page shows (a task may carry 1 MiB).
pub const PAYLOAD_SHOWN: usize = 64 * 1024;

/// `?queue=…&id=…&view=…`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct TaskQuery {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    view: String,
}

/// The ways a payload is shown, as `view` names them.
const VIEWS: [(&str, &str); 3] = [("text", "Text"), ("json", "JSON"), ("hex", "Hex")];

pub(super) async fn task(
    State(dashboard): State<Arc<Dashboard>>,
    asking: Asking,
    Query(query): Query<TaskQuery>,
) -> Response {
    let main = render(&dashboard, &asking.viewer, &query).await;
    asking.page("Task", main)
}

async fn render(dashboard: &Dashboard, viewer: &Viewer, query: &TaskQuery) -> Result<Html> {
    let queue = validate::name("queue", &query.queue)?;
    let id = validate::owner("id", &query.id)?;
    let view = VIEWS
        .iter()
        .map(|(key, _)| *key)
        .find(|key| *key == query.view)
        .unwrap_or("text");
    let Some(task) = dashboard
        .queues
        .tenant(&viewer.tenant)
        .task(queue, id)
        .await?
    else {
        return Err(Error::NotFound(format!(
            "no task {id:?} in queue {queue:?}"
        )));
    };
    let mut main = Html::new();
    html!(main;
        "<p><a href=\"/queue?name=", Url(queue), "\">← queue ", queue,
        "</a></p>\n<h1>Task <span class=\"name\">", id, "</span></h1>\n\
         <dl class=\"facts\">\n<dt>State</dt><dd>", state_heading(task.state),
        "</dd>\n<dt>Group</dt><dd>",
        if task.group.is_empty() { "(ungrouped)" } else { task.group.as_str() },
        "</dd>\n<dt>Priority</dt><dd>", task.priority,
        "</dd>\n<dt>Attempts</dt><dd>", task.attempt, " of ", task.max_attempts,
        "</dd>\n<dt>Due</dt><dd>", instant(Some(task.due_at_ms)),
        "</dd>\n<dt>Enqueued</dt><dd>", instant(Some(task.enqueued_at_ms)),
        "</dd>\n<dt>Lease ends</dt><dd>",
        instant((task.lease_expires_at_ms > 0).then_some(task.lease_expires_at_ms)),
        "</dd>\n<dt>Payload</dt><dd>", task.payload.len(), " bytes</dd>\n</dl>\n"
    );
    if !task.last_error.is_empty() {
        // Why its last delivery failed, as the worker's Nack said (a stack trace keeps
        // its lines).
        html!(main; "<h2>Last error</h2>\n<pre class=\"error\">", &task.last_error, "</pre>\n");
    }
    for (heading, bytes) in [("Progress", &task.progress), ("Result", &task.result)] {
        if !bytes.is_empty() {
            let shown = &bytes[..bytes.len().min(PAYLOAD_SHOWN)];
            html!(main;
                "<h2>", heading, "</h2>\n<pre class=\"payload-full\">",
                String::from_utf8_lossy(shown), "</pre>\n"
            );
        }
    }
    if !task.history.is_empty() {
        html!(main; history_table(&task.history));
    }
    if viewer.admin {
        html!(main; forms::task_controls(queue, id, task.state));
    }
    main.raw("<h2>Payload</h2>\n<nav aria-label=\"payload views\" class=\"states\">");
    for (key, label) in VIEWS {
        html!(main;
            "<a href=\"/task?queue=", Url(queue), "&amp;id=", Url(id), "&amp;view=", Url(key), "\""
        );
        if key == view {
            main.raw(" aria-current=\"page\"");
        }
        html!(main; ">", label, "</a> ");
    }
    main.raw("</nav>\n");
    let shown = &task.payload[..task.payload.len().min(PAYLOAD_SHOWN)];
    if shown.len() < task.payload.len() {
        html!(main;
            "<p class=\"muted\">The first ", PAYLOAD_SHOWN, " bytes of ", task.payload.len(),
            ".</p>\n"
        );
    }
    let body = match view {
        "json" => pretty_json(shown).unwrap_or_else(|| {
            main.raw("<p class=\"muted\">Not JSON; shown as text.</p>\n");
            String::from_utf8_lossy(shown).into_owned()
        }),
        "hex" => hex_dump(shown),
        _ => String::from_utf8_lossy(shown).into_owned(),
    };
    html!(main; "<pre class=\"payload-full\">", body, "</pre>\n");
    Ok(main)
}

/// The deliveries that ended, oldest first: number, how it ended, the worker, when it
/// was leased and ended, and its error.
fn history_table(history: &[Attempt]) -> Html {
    let mut out = Html::new();
    out.raw(
        "<h2>History</h2>\n<table class=\"history\">\n<thead><tr><th>Attempt</th><th>Outcome</th>\
         <th>Worker</th><th>Leased</th><th>Ended</th><th>Error</th></tr></thead>\n<tbody>\n",
    );
    for attempt in history {
        let outcome = match attempt.outcome {
            Outcome::Acked => "Acked",
            Outcome::Nacked => "Nacked",
            Outcome::Expired => "Expired",
            Outcome::GaveUp => "Gave up",
            Outcome::Cancelled => "Cancelled",
        };
        html!(out;
            "<tr><td>", attempt.number, "</td><td>", outcome, "</td><td>", &attempt.worker_id,
            "</td><td>", instant((attempt.leased_at_ms > 0).then_some(attempt.leased_at_ms)),
            "</td><td>", instant(Some(attempt.ended_at_ms)),
            "</td><td><pre class=\"error\">", &attempt.error, "</pre></td></tr>\n"
        );
    }
    out.raw("</tbody>\n</table>\n");
    out
}

/// The payload as indented JSON, when it is JSON.
fn pretty_json(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    serde_json::to_string_pretty(&value).ok()
}

/// Sixteen bytes a line: the offset, the bytes in hex, and those that are printable
/// ASCII as themselves (others as `.`).
fn hex_dump(payload: &[u8]) -> String {
    let mut out = String::with_capacity(payload.len() * 4 + 16);
    for (line, chunk) in payload.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", line * 16);
        for n in 0..16 {
            match chunk.get(n) {
                Some(byte) => {
                    let _ = write!(out, "{byte:02x} ");
                }
                None => out.push_str("   "),
            }
        }
        out.push(' ');
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_show_as_pretty_json_or_a_hex_dump() {
        assert_eq!(
            pretty_json(b"{\"a\":[1]}").unwrap(),
            "{\n  \"a\": [\n    1\n  ]\n}"
        );
        assert!(pretty_json(b"{nope").is_none());
        assert_eq!(
            hex_dump(b"<a>\x00\xff"),
            "00000000  3c 61 3e 00 ff ".to_owned() + &" ".repeat(33) + " <a>..\n"
        );
        assert_eq!(hex_dump(&[7; 17]).lines().count(), 2);
    }
}

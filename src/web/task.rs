//! A task's page (`/task?queue=…&id=…&view=text|json|hex`): its state, group, priority,
//! attempts, due, enqueue and lease times, its last error, progress and result, its
//! delivery history (who had it, when, how each delivery ended and why), and its
//! payload as text, pretty JSON or a hex dump, at most [`PAYLOAD_SHOWN`] bytes of it,
//! always escaped. An admin also gets the task's actions (redrive when DEAD, cancel
//! when not in flight).

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
};
use serde::Deserialize;

use super::{
    actions,
    html::{esc, instant, UrlPart},
    queue::STATES,
    Dashboard,
};
use crate::{
    auth::Viewer,
    error::{Error, Result},
    queue::{Attempt, Outcome, TaskState},
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
    headers: HeaderMap,
    Query(query): Query<TaskQuery>,
) -> Response {
    dashboard
        .respond(&headers, "Task", |viewer| {
            render(&dashboard, viewer, &query)
        })
        .await
}

async fn render(dashboard: &Dashboard, viewer: Viewer, query: &TaskQuery) -> Result<String> {
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
    let state = STATES
        .iter()
        .find(|(_, state, _)| *state == task.state)
        .map_or(
            match task.state {
                TaskState::Completed => "Completed",
                TaskState::Cancelled => "Cancelled",
                _ => "",
            },
            |(_, _, heading)| heading,
        );
    let mut main = format!(
        "<p><a href=\"/queue?name={}\">← queue {}</a></p>\n<h1>Task <span class=\"name\">{}</span></h1>\n",
        UrlPart(queue),
        esc(queue),
        esc(id)
    );
    let _ = write!(
        main,
        "<dl class=\"facts\">\n<dt>State</dt><dd>{state}</dd>\n<dt>Group</dt><dd>{}</dd>\n\
         <dt>Priority</dt><dd>{}</dd>\n<dt>Attempts</dt><dd>{} of {}</dd>\n\
         <dt>Due</dt><dd>{}</dd>\n<dt>Enqueued</dt><dd>{}</dd>\n<dt>Lease ends</dt><dd>{}</dd>\n\
         <dt>Payload</dt><dd>{} bytes</dd>\n</dl>\n",
        if task.group.is_empty() {
            "(ungrouped)".to_owned()
        } else {
            esc(&task.group).to_string()
        },
        task.priority,
        task.attempt,
        task.max_attempts,
        instant(Some(task.due_at_ms)),
        instant(Some(task.enqueued_at_ms)),
        instant((task.lease_expires_at_ms > 0).then_some(task.lease_expires_at_ms)),
        task.payload.len(),
    );
    if !task.last_error.is_empty() {
        // Why its last delivery failed, as the worker's Nack said (a stack trace keeps
        // its lines).
        let _ = write!(
            main,
            "<h2>Last error</h2>\n<pre class=\"error\">{}</pre>\n",
            esc(&task.last_error)
        );
    }
    for (heading, bytes) in [("Progress", &task.progress), ("Result", &task.result)] {
        if !bytes.is_empty() {
            let shown = &bytes[..bytes.len().min(PAYLOAD_SHOWN)];
            let _ = write!(
                main,
                "<h2>{heading}</h2>\n<pre class=\"payload-full\">{}</pre>\n",
                esc(&String::from_utf8_lossy(shown))
            );
        }
    }
    if !task.history.is_empty() {
        main.push_str(&history_table(&task.history));
    }
    if viewer.admin {
        main.push_str(&actions::task_controls(queue, id, task.state));
    }
    main.push_str("<h2>Payload</h2>\n<nav aria-label=\"payload views\" class=\"states\">");
    for (key, label) in VIEWS {
        let current = if key == view {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(
            main,
            "<a href=\"/task?queue={}&amp;id={}&amp;view={key}\"{current}>{label}</a> ",
            UrlPart(queue),
            UrlPart(id)
        );
    }
    main.push_str("</nav>\n");
    let shown = &task.payload[..task.payload.len().min(PAYLOAD_SHOWN)];
    if shown.len() < task.payload.len() {
        let _ = writeln!(
            main,
            "<p class=\"muted\">The first {PAYLOAD_SHOWN} bytes of {}.</p>",
            task.payload.len()
        );
    }
    let body = match view {
        "json" => pretty_json(shown).unwrap_or_else(|| {
            main.push_str("<p class=\"muted\">Not JSON; shown as text.</p>\n");
            String::from_utf8_lossy(shown).into_owned()
        }),
        "hex" => hex_dump(shown),
        _ => String::from_utf8_lossy(shown).into_owned(),
    };
    let _ = writeln!(main, "<pre class=\"payload-full\">{}</pre>", esc(&body));
    Ok(main)
}

/// The deliveries that ended, oldest first: number, how it ended, the worker, when it
/// was leased and ended, and its error.
fn history_table(history: &[Attempt]) -> String {
    let mut out = String::from(
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
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{outcome}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td><pre class=\"error\">{}</pre></td></tr>",
            attempt.number,
            esc(&attempt.worker_id),
            instant((attempt.leased_at_ms > 0).then_some(attempt.leased_at_ms)),
            instant(Some(attempt.ended_at_ms)),
            esc(&attempt.error),
        );
    }
    out.push_str("</tbody>\n</table>\n");
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
            format!("00000000  3c 61 3e 00 ff {} <a>..\n", " ".repeat(33))
        );
        assert_eq!(hex_dump(&[7; 17]).lines().count(), 2);
    }
}

//! The queue page (`/queue?name=…&state=…`): one queue's depths by state, its config,
//! its groups with their counts, and its first tasks of one state (id, group, priority,
//! attempts, due time, a preview of the payload as escaped text). Deeper paging through
//! a state (a hundred thousand DEAD tasks) and a task's detail come next.

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
};
use serde::Deserialize;

use super::{
    html::{esc, UrlPart},
    overview::{age, limits},
    Dashboard,
};
use crate::{
    auth::Viewer, error::Result, queue::TaskState, redis::TenantScoped, time::now_ms, validate,
};

/// Tasks of the chosen state the page shows.
const TASKS_SHOWN: u32 = 100;
/// Groups the page lists.
const GROUPS_SHOWN: usize = 100;
/// Characters of a payload's preview.
const PREVIEW_CHARS: usize = 80;

/// `?name=…&state=…`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct QueueQuery {
    #[serde(default)]
    name: String,
    #[serde(default)]
    state: String,
}

const STATES: [(&str, TaskState, &str); 4] = [
    ("ready", TaskState::Ready, "Ready"),
    ("delayed", TaskState::Delayed, "Delayed"),
    ("in_flight", TaskState::InFlight, "In flight"),
    ("dead", TaskState::Dead, "Dead"),
];

pub(super) async fn queue(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Query(query): Query<QueueQuery>,
) -> Response {
    dashboard
        .respond(&headers, "Queue", |viewer| {
            render(&dashboard, viewer, &query)
        })
        .await
}

async fn render(dashboard: &Dashboard, viewer: Viewer, query: &QueueQuery) -> Result<String> {
    let name = validate::name("name", &query.name)?;
    let (state_key, state, state_heading) = STATES
        .iter()
        .copied()
        .find(|(key, _, _)| *key == query.state)
        .unwrap_or(STATES[0]);
    let queues = dashboard.queues.tenant(&viewer.tenant);
    let stats = queues.stats(name).await?;
    let groups = queues.list_groups(name, None, GROUPS_SHOWN).await?;
    let tasks = queues.peek(name, state, TASKS_SHOWN, None).await?;
    let now = now_ms();

    let mut main = format!("<h1>Queue <span class=\"name\">{}</span></h1>\n", esc(name));
    let _ = write!(
        main,
        "<dl class=\"headline\">\n\
         <div><dt>Ready</dt><dd>{}</dd></div>\n\
         <div><dt>Delayed</dt><dd>{}</dd></div>\n\
         <div><dt>In flight</dt><dd>{}</dd></div>\n\
         <div><dt>Dead</dt><dd>{}</dd></div>\n\
         <div><dt>Oldest ready</dt><dd>{}</dd></div>\n</dl>\n\
         <p>{}; limits: {}.</p>\n",
        stats.ready,
        stats.delayed,
        stats.in_flight,
        stats.dead,
        stats
            .oldest_ready_at_ms
            .map_or_else(|| "–".to_owned(), |at| age(now - at)),
        if stats.config.paused {
            "<span class=\"paused\">Paused</span>"
        } else {
            "Delivering"
        },
        esc(&limits(&stats.config)),
    );

    main.push_str("<nav aria-label=\"task states\" class=\"states\">");
    for (key, _, heading) in STATES {
        let current = if key == state_key {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(
            main,
            "<a href=\"/queue?name={}&amp;state={key}\"{current}>{heading}</a> ",
            UrlPart(name)
        );
    }
    main.push_str("</nav>\n");
    let _ = writeln!(main, "<h2>{state_heading} tasks</h2>");
    if tasks.is_empty() {
        main.push_str("<p class=\"muted\">None.</p>\n");
    } else {
        let _ = write!(
            main,
            "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">the first {} in delivery order</caption>\n\
             <thead><tr><th scope=\"col\">Task</th><th scope=\"col\">Group</th>\
             <th scope=\"col\">Priority</th><th scope=\"col\">Attempts</th>\
             <th scope=\"col\">Due</th><th scope=\"col\">Payload</th></tr></thead>\n<tbody>\n",
            tasks.len()
        );
        for task in &tasks {
            let due = if task.due_at_ms > now {
                format!("in {}", age(task.due_at_ms - now))
            } else {
                format!("{} ago", age(now - task.due_at_ms))
            };
            let _ = writeln!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{due}</td><td class=\"payload\">{}</td></tr>",
                esc(&task.id),
                esc(&task.group),
                task.priority,
                task.attempt,
                task.max_attempts,
                esc(&preview(&task.payload)),
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
    }

    main.push_str("<h2>Groups</h2>\n");
    if groups.items.is_empty() {
        main.push_str("<p class=\"muted\">No groups: every task is ungrouped.</p>\n");
    } else {
        main.push_str(
            "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Group</th>\
             <th scope=\"col\">Ready</th><th scope=\"col\">Delayed</th>\
             <th scope=\"col\">In flight</th><th scope=\"col\">Dead</th>\
             <th scope=\"col\">Paused</th><th scope=\"col\">Weight</th></tr></thead>\n<tbody>\n",
        );
        for group in &groups.items {
            let _ = writeln!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if group.group.is_empty() {
                    "(ungrouped)".to_owned()
                } else {
                    esc(&group.group).to_string()
                },
                group.ready,
                group.delayed,
                group.in_flight,
                group.dead,
                if group.config.paused { "paused" } else { "no" },
                group.config.weight,
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
    }
    Ok(main)
}

/// The first characters of a payload as text (invalid UTF-8 shown as U+FFFD), on one
/// line; the caller escapes it.
fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(PREVIEW_CHARS)
        .collect();
    if text.chars().count() > PREVIEW_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_one_capped_line_of_text() {
        assert_eq!(preview(b"{\"a\":\n1}"), "{\"a\": 1}");
        assert_eq!(preview(&[0xff, b'x']), "\u{fffd}x");
        let long = "y".repeat(200);
        assert_eq!(preview(long.as_bytes()).chars().count(), PREVIEW_CHARS + 1);
    }
}

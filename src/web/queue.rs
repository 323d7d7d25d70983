//! The queue page (`/queue?name=…&state=…&page=…`): one queue's depths by state, its
//! config, its groups with their counts, and its tasks of one state a page at a time
//! (id, group, priority, attempts, due time, a preview of the payload as escaped text),
//! each linking to its detail (`task.rs`); COMPLETED and CANCELLED tabs when the queue
//! keeps ended tasks. Pages follow `ListTasks`' cursor (`QueueStore::list_tasks`): a page
//! stays right while tasks come and go, and a page deep in a hundred thousand DEAD
//! tasks costs what the first does. An admin also gets the forms
//! of the actions (`actions.rs`): pause, limits, redrive, cancel (also of running
//! tasks).

use std::{fmt::Write, sync::Arc};

use axum::{
    extract::{Query, State},
    http::HeaderMap,
    response::Response,
};
use serde::Deserialize;

use super::{
    actions, chart,
    html::{esc, live_region, UrlPart},
    overview::{age, limits},
    Dashboard,
};
use crate::{
    auth::Viewer,
    error::Result,
    queue::{TaskCursor, TaskState},
    redis::TenantScoped,
    time::now_ms,
    validate,
};

/// Tasks per page.
const TASKS_PER_PAGE: u32 = 100;
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
    /// Where the page starts: a `ListTasks` page token ('' for the first page).
    #[serde(default)]
    after: String,
    /// The 1-based position of the page's first task (shown, not trusted).
    #[serde(default)]
    at: Option<u64>,
}

/// The tabs: the four states every queue has, then the two a queue that keeps ended
/// tasks has (shown when it keeps them or holds some).
pub(super) const STATES: [(&str, TaskState, &str); 6] = [
    ("ready", TaskState::Ready, "Ready"),
    ("delayed", TaskState::Delayed, "Delayed"),
    ("in_flight", TaskState::InFlight, "In flight"),
    ("dead", TaskState::Dead, "Dead"),
    ("completed", TaskState::Completed, "Completed"),
    ("cancelled", TaskState::Cancelled, "Cancelled"),
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

pub(super) async fn render(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &QueueQuery,
) -> Result<String> {
    let name = validate::name("name", &query.name)?;
    let (state_key, state, state_heading) = STATES
        .iter()
        .copied()
        .find(|(key, _, _)| *key == query.state)
        .unwrap_or(STATES[0]);
    let queues = dashboard.queues.tenant(&viewer.tenant);
    let stats = queues.stats(name).await?;
    let groups = queues.list_groups(name, None, GROUPS_SHOWN).await?;
    let history = queues.history(name).await?;
    let in_state = match state {
        TaskState::Ready => stats.ready,
        TaskState::Delayed => stats.delayed,
        TaskState::InFlight => stats.in_flight,
        TaskState::Dead => stats.dead,
        TaskState::Completed => stats.completed,
        TaskState::Cancelled => stats.cancelled,
    };
    let keeps = stats.config.keep_completed.is_some() || stats.completed + stats.cancelled > 0;
    let cursor = TaskCursor::from_token("after", state, &query.after)?;
    let (tasks, next) = queues
        .list_tasks(name, state, None, TASKS_PER_PAGE, cursor.as_ref())
        .await?;
    // Where this page starts, as the link to it said (the first page: 1).
    let first = if cursor.is_some() {
        query.at.unwrap_or(1).max(1)
    } else {
        1
    };
    let now = now_ms();

    let mut main = format!("<h1>Queue <span class=\"name\">{}</span></h1>\n", esc(name));
    let mut region = String::new();
    let _ = write!(
        region,
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
    region.push_str(&chart::charts(&history));
    main.push_str(&live_region(
        "queue",
        &format!("name={}", UrlPart(name)),
        &region,
    ));
    if viewer.admin {
        main.push_str(&actions::queue_controls(name, &stats.config));
    }
    let _ = writeln!(
        main,
        "<form method=\"get\" action=\"/task\" class=\"find\">\
         <input type=\"hidden\" name=\"queue\" value=\"{}\">\
         <label for=\"find-id\">Find a task by id</label> \
         <input id=\"find-id\" name=\"id\" required maxlength=\"512\"> \
         <button type=\"submit\">Open</button></form>",
        esc(name)
    );

    main.push_str("<nav aria-label=\"task states\" class=\"states\">");
    for (key, tab, heading) in STATES {
        let kept_only = matches!(tab, TaskState::Completed | TaskState::Cancelled);
        if kept_only && !keeps && key != state_key {
            continue;
        }
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
        let last = first + tasks.len() as u64 - 1;
        let pager = pager(
            name,
            state_key,
            cursor.is_some(),
            next.map(|next| (TaskCursor::token(state, Some(&next)), last + 1)),
        );
        // An admin selects tasks in the table: the form wraps it, and its buttons
        // (redrive for DEAD, cancel for waiting tasks, cancel while running for those
        // in flight, remove for kept ones) name the ones checked.
        let selectable = viewer.admin;
        let order = match state {
            TaskState::Ready | TaskState::Delayed => "in delivery order",
            TaskState::InFlight => "by lease end",
            _ => "by when they ended",
        };
        if selectable {
            main.push_str(&actions::selection_form_open(name));
        }
        let _ = write!(
            main,
            "{pager}<div class=\"table-wrap\"><table>\n<caption class=\"muted\">{first}–{last} of {in_state}, {order}</caption>\n<thead><tr>{}<th scope=\"col\" class=\"id\">Task</th><th scope=\"col\">Group</th>\
             <th scope=\"col\">Priority</th><th scope=\"col\">Attempts</th>\
             <th scope=\"col\">Due</th><th scope=\"col\">Payload</th><th scope=\"col\">Last error</th></tr></thead>\n<tbody>\n",
            if selectable { "<th scope=\"col\"><span class=\"visually-hidden\">Select</span></th>" } else { "" },
        );
        for task in &tasks {
            let due = if task.due_at_ms > now {
                format!("in {}", age(task.due_at_ms - now))
            } else {
                format!("{} ago", age(now - task.due_at_ms))
            };
            let select = if selectable {
                format!(
                    "<td><input type=\"checkbox\" name=\"id\" value=\"{}\" aria-label=\"select {}\"></td>",
                    esc(&task.id),
                    esc(&task.id)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                main,
                "<tr>{select}<td class=\"id\"><a href=\"/task?queue={}&amp;id={}\">{}</a></td><td>{}</td><td>{}</td><td>{} of {}</td><td>{due}</td><td class=\"payload\">{}</td><td class=\"error\">{}</td></tr>",
                UrlPart(name),
                UrlPart(&task.id),
                esc(&task.id),
                esc(&task.group),
                task.priority,
                task.attempt,
                task.max_attempts,
                esc(&preview(&task.payload)),
                esc(&preview(task.last_error.as_bytes())),
            );
        }
        main.push_str("</tbody>\n</table></div>\n");
        if selectable {
            main.push_str(&actions::selection_form_close(state));
        }
        main.push_str(&pager);
    }
    if viewer.admin && state == TaskState::Dead && stats.dead > 0 {
        main.push_str(&actions::redrive_all(name, stats.dead));
    }

    main.push_str("<h2>Groups</h2>\n");
    if groups.items.is_empty() {
        main.push_str("<p class=\"muted\">No groups: every task is ungrouped.</p>\n");
    } else {
        let _ = write!(
            main,
            "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Group</th>\
             <th scope=\"col\">Ready</th><th scope=\"col\">Delayed</th>\
             <th scope=\"col\">In flight</th><th scope=\"col\">Dead</th>\
             <th scope=\"col\">Paused</th><th scope=\"col\">Weight</th>{}</tr></thead>\n<tbody>\n",
            if viewer.admin {
                "<th scope=\"col\">Action</th>"
            } else {
                ""
            },
        );
        for group in &groups.items {
            let control = if viewer.admin {
                format!(
                    "<td>{}</td>",
                    actions::group_control(name, &group.group, group.config.paused)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{control}</tr>",
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

/// Links to the first page (from a later one) and to the next (with its token and the
/// position of its first task). Pages follow `ListTasks`' cursor, so a page stays right
/// while tasks come and go.
fn pager(name: &str, state: &str, later: bool, next: Option<(String, u64)>) -> String {
    if !later && next.is_none() {
        return String::new();
    }
    let first = if later {
        format!(
            "<a href=\"/queue?name={}&amp;state={state}\">« first</a>",
            UrlPart(name)
        )
    } else {
        "<span class=\"muted\">« first</span>".to_owned()
    };
    let next = match next {
        Some((token, at)) => format!(
            "<a href=\"/queue?name={}&amp;state={state}&amp;after={}&amp;at={at}\" rel=\"next\">next ›</a>",
            UrlPart(name),
            UrlPart(&token)
        ),
        None => "<span class=\"muted\">next ›</span>".to_owned(),
    };
    format!("<nav class=\"pager\" aria-label=\"pages of tasks\">{first} {next}</nav>\n")
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

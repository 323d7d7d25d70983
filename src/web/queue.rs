//! The queue page (`/queue?name=…&state=…&page=…`): one queue's depths by state, its
//! config, its groups with their counts, and its tasks of one state a page at a time
//! (id, group, priority, attempts, due time, a preview of the payload as escaped text),
//! each linking to its detail (`task.rs`); COMPLETED and CANCELLED tabs when the queue
//! keeps ended tasks. Pages follow `ListTasks`' cursor (`QueueStore::list_tasks`): a page
//! stays right while tasks come and go, and a page deep in a hundred thousand DEAD
//! tasks costs what the first does. An admin also gets the forms
//! of the actions (`actions.rs`): pause, limits, redrive, cancel (also of running
//! tasks).

use std::sync::Arc;

use axum::{
    extract::{Query, State},
    response::Response,
};
use serde::Deserialize;

use super::{
    chart, forms,
    html::{live_region, Html, Url},
    wording::{age, limits, STATES},
    Asking, Dashboard,
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

pub(super) async fn queue(
    State(dashboard): State<Arc<Dashboard>>,
    asking: Asking,
    Query(query): Query<QueueQuery>,
) -> Response {
    let main = render(&dashboard, asking.viewer.clone(), &query).await;
    asking.page("Queue", main)
}

pub(super) async fn render(
    dashboard: &Dashboard,
    viewer: Viewer,
    query: &QueueQuery,
) -> Result<Html> {
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

    let mut main = Html::new();
    html!(main; "<h1>Queue <span class=\"name\">", name, "</span></h1>\n");
    let mut region = Html::new();
    html!(region;
        "<dl class=\"headline\">\n<div><dt>Ready</dt><dd>", stats.ready,
        "</dd></div>\n<div><dt>Delayed</dt><dd>", stats.delayed,
        "</dd></div>\n<div><dt>In flight</dt><dd>", stats.in_flight,
        "</dd></div>\n<div><dt>Dead</dt><dd>", stats.dead,
        "</dd></div>\n<div><dt>Oldest ready</dt><dd>",
        stats
            .oldest_ready_at_ms
            .map_or_else(|| "–".to_owned(), |at| age(now - at)),
        "</dd></div>\n</dl>\n<p>"
    );
    if stats.config.paused {
        region.raw("<span class=\"paused\">Paused</span>");
    } else {
        region.raw("Delivering");
    }
    html!(region; "; limits: ", limits(&stats.config), ".</p>\n", chart::charts(&history));
    let mut query = Html::new();
    html!(query; "name=", Url(name));
    html!(main; live_region("queue", &query, &region));
    if viewer.admin {
        html!(main; forms::queue_controls(name, &stats.config));
    }
    html!(main;
        "<form method=\"get\" action=\"/task\" class=\"find\">\
         <input type=\"hidden\" name=\"queue\" value=\"", name, "\">\
         <label for=\"find-id\">Find a task by id</label> \
         <input id=\"find-id\" name=\"id\" required maxlength=\"512\"> \
         <button type=\"submit\">Open</button></form>\n\
         <nav aria-label=\"task states\" class=\"states\">"
    );
    for (key, tab, heading) in STATES {
        let kept_only = matches!(tab, TaskState::Completed | TaskState::Cancelled);
        if kept_only && !keeps && key != state_key {
            continue;
        }
        html!(main; "<a href=\"/queue?name=", Url(name), "&amp;state=", Url(key), "\"");
        if key == state_key {
            main.raw(" aria-current=\"page\"");
        }
        html!(main; ">", heading, "</a> ");
    }
    html!(main; "</nav>\n<h2>", state_heading, " tasks</h2>\n");
    if tasks.is_empty() {
        main.raw("<p class=\"muted\">None.</p>\n");
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
            html!(main; forms::selection_form_open(name));
        }
        html!(main;
            &pager, "<div class=\"table-wrap\"><table>\n<caption class=\"muted\">",
            first, "–", last, " of ", in_state, ", ", order, "</caption>\n<thead><tr>"
        );
        if selectable {
            main.raw("<th scope=\"col\"><span class=\"visually-hidden\">Select</span></th>");
        }
        main.raw(
            "<th scope=\"col\" class=\"id\">Task</th><th scope=\"col\">Group</th>\
             <th scope=\"col\">Priority</th><th scope=\"col\">Attempts</th>\
             <th scope=\"col\">Due</th><th scope=\"col\">Payload</th>\
             <th scope=\"col\">Last error</th></tr></thead>\n<tbody>\n",
        );
        for task in &tasks {
            let due = if task.due_at_ms > now {
                format!("in {}", age(task.due_at_ms - now))
            } else {
                format!("{} ago", age(now - task.due_at_ms))
            };
            main.raw("<tr>");
            if selectable {
                html!(main;
                    "<td><input type=\"checkbox\" name=\"id\" value=\"", &task.id,
                    "\" aria-label=\"select ", &task.id, "\"></td>"
                );
            }
            html!(main;
                "<td class=\"id\"><a href=\"/task?queue=", Url(name), "&amp;id=", Url(&task.id),
                "\">", &task.id, "</a></td><td>", &task.group, "</td><td>", task.priority,
                "</td><td>", task.attempt, " of ", task.max_attempts, "</td><td>", due,
                "</td><td class=\"payload\">", preview(&task.payload),
                "</td><td class=\"error\">", preview(task.last_error.as_bytes()),
                "</td></tr>\n"
            );
        }
        main.raw("</tbody>\n</table></div>\n");
        if selectable {
            html!(main; forms::selection_form_close(state));
        }
        html!(main; &pager);
    }
    if viewer.admin && state == TaskState::Dead && stats.dead > 0 {
        html!(main; forms::redrive_all(name, stats.dead));
    }

    main.raw("<h2>Groups</h2>\n");
    if groups.items.is_empty() {
        main.raw("<p class=\"muted\">No groups: every task is ungrouped.</p>\n");
    } else {
        main.raw(
            "<div class=\"table-wrap\"><table>\n<thead><tr><th scope=\"col\">Group</th>\
             <th scope=\"col\">Ready</th><th scope=\"col\">Delayed</th>\
             <th scope=\"col\">In flight</th><th scope=\"col\">Dead</th>\
             <th scope=\"col\">Paused</th><th scope=\"col\">Weight</th>",
        );
        if viewer.admin {
            main.raw("<th scope=\"col\">Action</th>");
        }
        main.raw("</tr></thead>\n<tbody>\n");
        for group in &groups.items {
            let shown = if group.group.is_empty() {
                "(ungrouped)"
            } else {
                group.group.as_str()
            };
            html!(main;
                "<tr><td>", shown, "</td><td>", group.ready, "</td><td>", group.delayed,
                "</td><td>", group.in_flight, "</td><td>", group.dead, "</td><td>",
                if group.config.paused { "paused" } else { "no" },
                "</td><td>", group.config.weight, "</td>"
            );
            if viewer.admin {
                html!(main; "<td>", forms::group_control(name, &group.group, group.config.paused), "</td>");
            }
            main.raw("</tr>\n");
        }
        main.raw("</tbody>\n</table></div>\n");
    }
    Ok(main)
}

/// Links to the first page (from a later one) and to the next (with its token and the
/// position of its first task). Pages follow `ListTasks`' cursor, so a page stays right
/// while tasks come and go.
fn pager(name: &str, state: &str, later: bool, next: Option<(String, u64)>) -> Html {
    let mut out = Html::new();
    if !later && next.is_none() {
        return out;
    }
    out.raw("<nav class=\"pager\" aria-label=\"pages of tasks\">");
    if later {
        html!(out; "<a href=\"/queue?name=", Url(name), "&amp;state=", Url(state), "\">« first</a>");
    } else {
        out.raw("<span class=\"muted\">« first</span>");
    }
    out.raw(" ");
    match next {
        Some((token, at)) => html!(out;
            "<a href=\"/queue?name=", Url(name), "&amp;state=", Url(state), "&amp;after=",
            Url(&token), "&amp;at=", at, "\" rel=\"next\">next ›</a>"
        ),
        None => {
            out.raw("<span class=\"muted\">next ›</span>");
        }
    }
    out.raw("</nav>\n");
    out
}

/// The first characters of a payload as text (invalid UTF-8 shown as U+FFFD), on one
/// line (escaped where it is shown, as any value).
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

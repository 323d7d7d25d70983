//! The dashboard's actions: pause and resume a queue or a group, change a queue's
//! limits, redrive DEAD tasks (chosen ones or all), cancel chosen tasks, and trigger,
//! pause or resume a schedule. Each is a POST to `/action` that must come from this
//! origin (`session::same_origin`) and from a viewer with `admin`; the first POST shows
//! what it will do and asks to confirm, the second (with `confirmed=yes`) does it and
//! shows what it did. The pages render the forms (`forms.rs`) only for an admin, so a
//! read-only viewer sees no buttons (and is refused if it posts anyway).

use std::{sync::Arc, time::Duration};

use axum::{extract::State, response::Response, Form};

use super::{
    html::{Html, Url},
    session::SameOrigin,
    wording::limits,
    Asking, Dashboard,
};
use crate::{
    auth::Viewer,
    error::{Error, Result},
    queue::{QueueConfigChange, RateLimit, MAX_RATE_LIMIT},
    redis::TenantScoped,
    validate,
};

/// The most tasks one action names (as a `Redrive` or `Cancel` call may).
const MAX_IDS: usize = 1000;

/// What a confirmed POST does.
#[derive(Debug, PartialEq)]
enum Action {
    PauseQueue(String),
    ResumeQueue(String),
    Limits(String, Limits),
    PauseGroup(String, String),
    ResumeGroup(String, String),
    Redrive(String, Vec<String>),
    RedriveAll(String),
    Cancel(String, Vec<String>),
    /// Cancel running tasks (`Cancel.running`): their workers are told.
    CancelRunning(String, Vec<String>),
    TriggerSchedule(String),
    PauseSchedule(String),
    ResumeSchedule(String),
}

/// A queue's limits as the form sets them (0 removes one).
#[derive(Debug, PartialEq)]
struct Limits {
    max_in_flight: u32,
    per_second: u32,
    group_max_in_flight: u32,
}

/// The posted fields, in order (`id` repeats).
type Fields = Vec<(String, String)>;

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map_or("", |(_, value)| value.as_str())
}

fn number(fields: &Fields, name: &'static str) -> Result<u32> {
    let text = field(fields, name).trim();
    if text.is_empty() {
        return Ok(0);
    }
    match text.parse::<u32>() {
        Ok(n) if n <= MAX_RATE_LIMIT => Ok(n),
        _ => Err(Error::invalid(
            name,
            format!("must be a whole number from 0 to {MAX_RATE_LIMIT}"),
        )),
    }
}

impl Action {
    /// The action the fields name, each field checked as the RPCs check it.
    fn from_fields(fields: &Fields) -> Result<Self> {
        let queue = || validate::name("queue", field(fields, "queue")).map(str::to_owned);
        let schedule = || validate::name("schedule", field(fields, "schedule")).map(str::to_owned);
        let group = || validate::optional_id("group", field(fields, "group")).map(str::to_owned);
        let ids = || -> Result<Vec<String>> {
            let ids: Vec<String> = fields
                .iter()
                .filter(|(key, _)| key == "id")
                .map(|(_, id)| validate::owner("id", id).map(str::to_owned))
                .collect::<Result<_>>()?;
            if ids.is_empty() {
                return Err(Error::invalid("id", "choose at least one task"));
            }
            if ids.len() > MAX_IDS {
                return Err(Error::invalid("id", format!("at most {MAX_IDS} tasks")));
            }
            Ok(ids)
        };
        Ok(match field(fields, "do") {
            "pause-queue" => Action::PauseQueue(queue()?),
            "resume-queue" => Action::ResumeQueue(queue()?),
            "limits" => Action::Limits(
                queue()?,
                Limits {
                    max_in_flight: number(fields, "max_in_flight")?,
                    per_second: number(fields, "per_second")?,
                    group_max_in_flight: number(fields, "group_max_in_flight")?,
                },
            ),
            "pause-group" => Action::PauseGroup(queue()?, group()?),
            "resume-group" => Action::ResumeGroup(queue()?, group()?),
            "redrive" => Action::Redrive(queue()?, ids()?),
            "redrive-all" => Action::RedriveAll(queue()?),
            "cancel" => Action::Cancel(queue()?, ids()?),
            "cancel-running" => Action::CancelRunning(queue()?, ids()?),
            "trigger-schedule" => Action::TriggerSchedule(schedule()?),
            "pause-schedule" => Action::PauseSchedule(schedule()?),
            "resume-schedule" => Action::ResumeSchedule(schedule()?),
            _ => return Err(Error::invalid("do", "names no action")),
        })
    }

    /// What it will do, as a sentence.
    fn describe(&self) -> Html {
        let mut out = Html::new();
        match self {
            Action::PauseQueue(q) => {
                html!(out; "Pause queue <b>", q, "</b>: nothing of it is delivered until it is resumed; it still takes tasks.")
            }
            Action::ResumeQueue(q) => html!(out; "Resume queue <b>", q, "</b>."),
            Action::Limits(q, l) => html!(out;
                "Set the limits of queue <b>", q, "</b>: ",
                limit_text(l.max_in_flight, "in flight"), "; ",
                limit_text(l.per_second, "deliveries a second"), "; ",
                limit_text(l.group_max_in_flight, "in flight per group"), "."
            ),
            Action::PauseGroup(q, g) => {
                html!(out; "Pause group <b>", group_name(g), "</b> of queue <b>", q, "</b>.")
            }
            Action::ResumeGroup(q, g) => {
                html!(out; "Resume group <b>", group_name(g), "</b> of queue <b>", q, "</b>.")
            }
            Action::Redrive(q, ids) => {
                html!(out; "Redrive ", tasks(ids), " of queue <b>", q, "</b> to READY.")
            }
            Action::RedriveAll(q) => {
                html!(out; "Redrive every DEAD task of queue <b>", q, "</b> to READY.")
            }
            Action::Cancel(q, ids) => {
                html!(out; "Cancel ", tasks(ids), " of queue <b>", q, "</b>: they are removed for good (tasks in flight are not cancelled).")
            }
            Action::CancelRunning(q, ids) => {
                html!(out; "Cancel ", tasks(ids), " of queue <b>", q, "</b> while running: their workers are told to stop, and they end as CANCELLED, never to run again.")
            }
            Action::TriggerSchedule(s) => {
                html!(out; "Trigger schedule <b>", s, "</b>: enqueue one task now, outside its fire times.")
            }
            Action::PauseSchedule(s) => {
                html!(out; "Pause schedule <b>", s, "</b>: no fires until it is resumed.")
            }
            Action::ResumeSchedule(s) => {
                html!(out; "Resume schedule <b>", s, "</b>: it fires from now on (the paused fire times are not made up).")
            }
        }
        out
    }

    /// Where a person goes after it.
    fn back(&self) -> Html {
        let mut out = Html::new();
        match self {
            Action::PauseQueue(q)
            | Action::ResumeQueue(q)
            | Action::Limits(q, _)
            | Action::PauseGroup(q, _)
            | Action::ResumeGroup(q, _)
            | Action::Cancel(q, _) => html!(out; "/queue?name=", Url(q)),
            Action::Redrive(q, _) | Action::RedriveAll(q) => {
                html!(out; "/queue?name=", Url(q), "&amp;state=dead")
            }
            Action::CancelRunning(q, _) => {
                html!(out; "/queue?name=", Url(q), "&amp;state=in_flight")
            }
            Action::TriggerSchedule(_) | Action::PauseSchedule(_) | Action::ResumeSchedule(_) => {
                out.raw("/schedules");
            }
        }
        out
    }

    /// Does it for `viewer`'s tenant; what it did.
    async fn run(&self, dashboard: &Dashboard, viewer: &Viewer) -> Result<Html> {
        let queues = dashboard.queues.tenant(&viewer.tenant);
        let schedules = dashboard.schedules.tenant(&viewer.tenant);
        let paused = |q: &str, paused: bool| {
            let queues = queues.clone();
            let q = q.to_owned();
            async move {
                let change = QueueConfigChange {
                    paused: Some(paused),
                    ..QueueConfigChange::default()
                };
                queues.configure_queue(&q, &change).await
            }
        };
        let mut out = Html::new();
        match self {
            Action::PauseQueue(q) => {
                paused(q, true).await?;
                html!(out; "Queue <b>", q, "</b> is paused.");
            }
            Action::ResumeQueue(q) => {
                paused(q, false).await?;
                html!(out; "Queue <b>", q, "</b> is delivering again.");
            }
            Action::Limits(q, l) => {
                let rate = (l.per_second > 0).then(|| RateLimit {
                    limit: l.per_second,
                    period: Duration::from_secs(1),
                    burst: l.per_second,
                });
                let change = QueueConfigChange {
                    max_in_flight: Some(l.max_in_flight),
                    rate_limit: Some(rate),
                    group_max_in_flight: Some(l.group_max_in_flight),
                    ..QueueConfigChange::default()
                };
                let config = queues.configure_queue(q, &change).await?;
                html!(out; "Queue <b>", q, "</b>'s limits are now: ", limits(&config), ".");
            }
            Action::PauseGroup(q, g) | Action::ResumeGroup(q, g) => {
                let pause = matches!(self, Action::PauseGroup(..));
                queues.configure_group(q, g, Some(pause), None).await?;
                html!(out;
                    "Group <b>", group_name(g), "</b> of queue <b>", q, "</b> is ",
                    if pause { "paused" } else { "delivering again" }, "."
                );
            }
            Action::Redrive(q, ids) => {
                let moved = queues.redrive(q, ids).await?;
                html!(out;
                    moved, " of ", ids.len(), " task", plural(ids.len()), " redriven to READY."
                );
            }
            Action::RedriveAll(q) => {
                let moved = queues.redrive(q, &[]).await?;
                html!(out;
                    moved, " task", plural(moved as usize), " of queue <b>", q,
                    "</b> redriven to READY."
                );
            }
            Action::Cancel(q, ids) => {
                let gone = queues.cancel(q, ids, false).await?;
                html!(out;
                    gone.len(), " of ", ids.len(), " task", plural(ids.len()), " cancelled",
                    if gone.len() < ids.len() {
                        " (the others were in flight or gone already)"
                    } else {
                        ""
                    },
                    "."
                );
            }
            Action::CancelRunning(q, ids) => {
                let told = queues.cancel(q, ids, true).await?;
                html!(out;
                    told.len(), " of ", ids.len(), " task", plural(ids.len()), " cancelled",
                    if told.len() < ids.len() {
                        " (the others were gone already)"
                    } else {
                        ""
                    },
                    "."
                );
            }
            Action::TriggerSchedule(s) => match schedules.trigger(s).await? {
                Some(id) => html!(out; "Schedule <b>", s, "</b> enqueued task <b>", &id, "</b>."),
                None => return Err(Error::NotFound(format!("no schedule {s:?}"))),
            },
            Action::PauseSchedule(s) | Action::ResumeSchedule(s) => {
                let pause = matches!(self, Action::PauseSchedule(_));
                let Some(view) = schedules.get(s).await? else {
                    return Err(Error::NotFound(format!("no schedule {s:?}")));
                };
                let mut schedule = view.schedule;
                schedule.paused = pause;
                schedules.put(&schedule).await?;
                html!(out;
                    "Schedule <b>", s, "</b> is ", if pause { "paused" } else { "firing again" }, "."
                );
            }
        }
        Ok(out)
    }
}

/// `n tasks (a, b, … and 3 more)`: the first ten ids named.
fn tasks(ids: &[String]) -> Html {
    let mut out = Html::new();
    html!(out; ids.len(), " task", plural(ids.len()), " (");
    for (n, id) in ids.iter().take(10).enumerate() {
        if n > 0 {
            out.raw(", ");
        }
        out.text(id);
    }
    if ids.len() > 10 {
        html!(out; " and ", ids.len() - 10, " more");
    }
    out.raw(")");
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn group_name(group: &str) -> &str {
    if group.is_empty() {
        "(ungrouped)"
    } else {
        group
    }
}

fn limit_text(n: u32, what: &str) -> String {
    if n == 0 {
        format!("no limit of {what}")
    } else {
        format!("{n} {what}")
    }
}

/// `POST /action` from this origin: asks to confirm, or (with `confirmed=yes`) does it.
pub(super) async fn action(
    State(dashboard): State<Arc<Dashboard>>,
    _: SameOrigin,
    asking: Asking,
    Form(fields): Form<Fields>,
) -> Response {
    let main = confirm_or_run(&dashboard, &asking.viewer, fields).await;
    asking.page("Action", main)
}

async fn confirm_or_run(dashboard: &Dashboard, viewer: &Viewer, fields: Fields) -> Result<Html> {
    if !viewer.admin {
        return Err(Error::PermissionDenied(
            "actions need a token with admin".to_owned(),
        ));
    }
    let action = Action::from_fields(&fields)?;
    let mut main = Html::new();
    if field(&fields, "confirmed") == "yes" {
        let done = action.run(dashboard, viewer).await?;
        html!(main;
            "<h1>Done</h1>\n<p role=\"status\" class=\"result\">", done,
            "</p>\n<p><a href=\"", action.back(), "\" autofocus>Back</a></p>\n"
        );
    } else {
        html!(main;
            "<h1>Confirm</h1>\n<p>", action.describe(),
            "</p>\n<form method=\"post\" action=\"/action\">\n"
        );
        for (key, value) in &fields {
            html!(main; "<input type=\"hidden\" name=\"", key, "\" value=\"", value, "\">\n");
        }
        html!(main;
            "<input type=\"hidden\" name=\"confirmed\" value=\"yes\">\n\
             <button type=\"submit\" autofocus>Confirm</button> <a href=\"", action.back(),
            "\">Cancel</a>\n</form>\n"
        );
    }
    Ok(main)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn posted_fields_name_one_action_and_bad_ones_name_the_field() {
        assert_eq!(
            Action::from_fields(&fields(&[
                ("do", "redrive"),
                ("queue", "q"),
                ("id", "a"),
                ("id", "b")
            ]))
            .unwrap(),
            Action::Redrive("q".into(), vec!["a".into(), "b".into()])
        );
        let refused = |pairs: &[(&str, &str)]| match Action::from_fields(&fields(pairs)) {
            Err(Error::InvalidArgument { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&[("do", "nope")]), "do");
        assert_eq!(refused(&[("do", "cancel"), ("queue", "q")]), "id");
        assert_eq!(refused(&[("do", "pause-queue"), ("queue", "")]), "queue");
        assert_eq!(
            refused(&[("do", "limits"), ("queue", "q"), ("per_second", "-1")]),
            "per_second"
        );
        assert_eq!(
            refused(&[("do", "trigger-schedule"), ("schedule", "a\u{7}")]),
            "schedule"
        );
    }
}

//! The dashboard's actions: pause and resume a queue or a group, change a queue's
//! limits, redrive DEAD tasks (chosen ones or all), cancel chosen tasks, and trigger,
//! pause or resume a schedule. Each is a POST to `/action` that must come from this
//! origin (`session::same_origin`) and from a viewer with `admin`; the first POST shows
//! what it will do and asks to confirm, the second (with `confirmed=yes`) does it and
//! shows what it did. The pages render the forms with the helpers here, and only for an
//! admin, so a read-only viewer sees no buttons (and is refused if it posts anyway).

use std::{fmt::Write, sync::Arc, time::Duration};

use axum::{extract::State, http::HeaderMap, response::Response, Form};

use super::{
    failure,
    html::{esc, UrlPart},
    session::same_origin,
    Dashboard,
};
use crate::{
    auth::Viewer,
    error::{Error, Result},
    queue::{QueueConfig, QueueConfigChange, RateLimit, TaskState, MAX_RATE_LIMIT},
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

    /// What it will do, as a sentence of escaped HTML.
    fn describe(&self) -> String {
        let tasks = |ids: &[String]| {
            let shown: Vec<String> = ids.iter().take(10).map(|id| esc(id).to_string()).collect();
            let more = if ids.len() > 10 {
                format!(" and {} more", ids.len() - 10)
            } else {
                String::new()
            };
            format!(
                "{} task{} ({}{more})",
                ids.len(),
                plural(ids.len()),
                shown.join(", ")
            )
        };
        match self {
            Action::PauseQueue(q) => format!("Pause queue <b>{}</b>: nothing of it is delivered until it is resumed; it still takes tasks.", esc(q)),
            Action::ResumeQueue(q) => format!("Resume queue <b>{}</b>.", esc(q)),
            Action::Limits(q, l) => format!(
                "Set the limits of queue <b>{}</b>: {}; {}; {}.",
                esc(q),
                limit_text(l.max_in_flight, "in flight"),
                limit_text(l.per_second, "deliveries a second"),
                limit_text(l.group_max_in_flight, "in flight per group"),
            ),
            Action::PauseGroup(q, g) => format!("Pause group <b>{}</b> of queue <b>{}</b>.", group_name(g), esc(q)),
            Action::ResumeGroup(q, g) => format!("Resume group <b>{}</b> of queue <b>{}</b>.", group_name(g), esc(q)),
            Action::Redrive(q, ids) => format!("Redrive {} of queue <b>{}</b> to READY.", tasks(ids), esc(q)),
            Action::RedriveAll(q) => format!("Redrive every DEAD task of queue <b>{}</b> to READY.", esc(q)),
            Action::Cancel(q, ids) => format!("Cancel {} of queue <b>{}</b>: they are removed for good (tasks in flight are not cancelled).", tasks(ids), esc(q)),
            Action::CancelRunning(q, ids) => format!("Cancel {} of queue <b>{}</b> while running: their workers are told to stop, and they end as CANCELLED, never to run again.", tasks(ids), esc(q)),
            Action::TriggerSchedule(s) => format!("Trigger schedule <b>{}</b>: enqueue one task now, outside its fire times.", esc(s)),
            Action::PauseSchedule(s) => format!("Pause schedule <b>{}</b>: no fires until it is resumed.", esc(s)),
            Action::ResumeSchedule(s) => format!("Resume schedule <b>{}</b>: it fires from now on (the paused fire times are not made up).", esc(s)),
        }
    }

    /// Where a person goes after it.
    fn back(&self) -> String {
        match self {
            Action::PauseQueue(q)
            | Action::ResumeQueue(q)
            | Action::Limits(q, _)
            | Action::PauseGroup(q, _)
            | Action::ResumeGroup(q, _) => format!("/queue?name={}", UrlPart(q)),
            Action::Redrive(q, _) | Action::RedriveAll(q) => {
                format!("/queue?name={}&amp;state=dead", UrlPart(q))
            }
            Action::Cancel(q, _) => format!("/queue?name={}", UrlPart(q)),
            Action::CancelRunning(q, _) => {
                format!("/queue?name={}&amp;state=in_flight", UrlPart(q))
            }
            Action::TriggerSchedule(_) | Action::PauseSchedule(_) | Action::ResumeSchedule(_) => {
                "/schedules".to_owned()
            }
        }
    }

    /// Does it for `viewer`'s tenant; what it did, as escaped HTML.
    async fn run(&self, dashboard: &Dashboard, viewer: &Viewer) -> Result<String> {
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
        Ok(match self {
            Action::PauseQueue(q) => {
                paused(q, true).await?;
                format!("Queue <b>{}</b> is paused.", esc(q))
            }
            Action::ResumeQueue(q) => {
                paused(q, false).await?;
                format!("Queue <b>{}</b> is delivering again.", esc(q))
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
                format!(
                    "Queue <b>{}</b>'s limits are now: {}.",
                    esc(q),
                    esc(&super::overview::limits(&config))
                )
            }
            Action::PauseGroup(q, g) | Action::ResumeGroup(q, g) => {
                let pause = matches!(self, Action::PauseGroup(..));
                queues.configure_group(q, g, Some(pause), None).await?;
                format!(
                    "Group <b>{}</b> of queue <b>{}</b> is {}.",
                    group_name(g),
                    esc(q),
                    if pause { "paused" } else { "delivering again" }
                )
            }
            Action::Redrive(q, ids) => {
                let moved = queues.redrive(q, ids).await?;
                format!(
                    "{moved} of {} task{} redriven to READY.",
                    ids.len(),
                    plural(ids.len())
                )
            }
            Action::RedriveAll(q) => {
                let moved = queues.redrive(q, &[]).await?;
                format!(
                    "{moved} task{} of queue <b>{}</b> redriven to READY.",
                    plural(moved as usize),
                    esc(q)
                )
            }
            Action::Cancel(q, ids) => {
                let gone = queues.cancel(q, ids, false).await?;
                format!(
                    "{} of {} task{} cancelled{}.",
                    gone.len(),
                    ids.len(),
                    plural(ids.len()),
                    if gone.len() < ids.len() {
                        " (the others were in flight or gone already)"
                    } else {
                        ""
                    }
                )
            }
            Action::CancelRunning(q, ids) => {
                let told = queues.cancel(q, ids, true).await?;
                format!(
                    "{} of {} task{} cancelled{}.",
                    told.len(),
                    ids.len(),
                    plural(ids.len()),
                    if told.len() < ids.len() {
                        " (the others were gone already)"
                    } else {
                        ""
                    }
                )
            }
            Action::TriggerSchedule(s) => match schedules.trigger(s).await? {
                Some(id) => format!(
                    "Schedule <b>{}</b> enqueued task <b>{}</b>.",
                    esc(s),
                    esc(&id)
                ),
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
                format!(
                    "Schedule <b>{}</b> is {}.",
                    esc(s),
                    if pause { "paused" } else { "firing again" }
                )
            }
        })
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn group_name(group: &str) -> String {
    if group.is_empty() {
        "(ungrouped)".to_owned()
    } else {
        esc(group).to_string()
    }
}

fn limit_text(n: u32, what: &str) -> String {
    if n == 0 {
        format!("no limit of {what}")
    } else {
        format!("{n} {what}")
    }
}

/// `POST /action`: asks to confirm, or (with `confirmed=yes`) does it.
pub(super) async fn action(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    if let Err(err) = same_origin(&headers) {
        return failure(&err);
    }
    dashboard
        .respond(&headers, "Action", |viewer| {
            confirm_or_run(&dashboard, viewer, fields)
        })
        .await
}

async fn confirm_or_run(dashboard: &Dashboard, viewer: Viewer, fields: Fields) -> Result<String> {
    if !viewer.admin {
        return Err(Error::PermissionDenied(
            "actions need a token with admin".to_owned(),
        ));
    }
    let action = Action::from_fields(&fields)?;
    if field(&fields, "confirmed") == "yes" {
        let done = action.run(dashboard, &viewer).await?;
        Ok(format!(
            "<h1>Done</h1>\n<p role=\"status\" class=\"result\">{done}</p>\n\
                     <p><a href=\"{}\" autofocus>Back</a></p>\n",
            action.back()
        ))
    } else {
        let mut main = format!(
            "<h1>Confirm</h1>\n<p>{}</p>\n<form method=\"post\" action=\"/action\">\n",
            action.describe()
        );
        for (key, value) in &fields {
            let _ = writeln!(
                main,
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                esc(key),
                esc(value)
            );
        }
        let _ = write!(
                    main,
                    "<input type=\"hidden\" name=\"confirmed\" value=\"yes\">\n\
                     <button type=\"submit\" autofocus>Confirm</button> <a href=\"{}\">Cancel</a>\n</form>\n",
                    action.back()
                );
        Ok(main)
    }
}

/// A form of one button that asks for `action` with `hidden` fields.
fn button(action: &str, hidden: &[(&str, &str)], label: &str) -> String {
    let mut form = String::from("<form method=\"post\" action=\"/action\" class=\"inline\">");
    for (key, value) in hidden {
        let _ = write!(
            form,
            "<input type=\"hidden\" name=\"{key}\" value=\"{}\">",
            esc(value)
        );
    }
    let _ = write!(
        form,
        "<button type=\"submit\" name=\"do\" value=\"{action}\">{label}</button></form>"
    );
    form
}

/// A queue's pause or resume button and its limits form.
pub(super) fn queue_controls(queue: &str, config: &QueueConfig) -> String {
    let toggle = if config.paused {
        button("resume-queue", &[("queue", queue)], "Resume queue")
    } else {
        button("pause-queue", &[("queue", queue)], "Pause queue")
    };
    let per_second = config
        .rate_limit
        .filter(|rate| rate.period == Duration::from_secs(1))
        .map_or(0, |rate| rate.limit);
    format!(
        "<div class=\"controls\">{toggle}\n\
         <form method=\"post\" action=\"/action\" class=\"limits\">\
         <input type=\"hidden\" name=\"queue\" value=\"{}\">\
         <label>In flight at most <input name=\"max_in_flight\" inputmode=\"numeric\" size=\"7\" value=\"{}\"></label> \
         <label>Deliveries a second <input name=\"per_second\" inputmode=\"numeric\" size=\"7\" value=\"{per_second}\"></label> \
         <label>In flight per group <input name=\"group_max_in_flight\" inputmode=\"numeric\" size=\"7\" value=\"{}\"></label> \
         <button type=\"submit\" name=\"do\" value=\"limits\">Set limits</button> \
         <span class=\"muted\">0 is no limit</span></form></div>\n",
        esc(queue),
        config.max_in_flight,
        config.group_max_in_flight,
    )
}

/// Opens the form around a table of tasks whose rows have checkboxes.
pub(super) fn selection_form_open(queue: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/action\" class=\"selection\">\
         <input type=\"hidden\" name=\"queue\" value=\"{}\">\n",
        esc(queue)
    )
}

/// The buttons for the checked tasks, and the form's end.
pub(super) fn selection_form_close(state: TaskState) -> String {
    let button = match state {
        TaskState::Dead => {
            "<button type=\"submit\" name=\"do\" value=\"redrive\">Redrive selected</button>"
        }
        TaskState::InFlight => {
            "<button type=\"submit\" name=\"do\" value=\"cancel-running\">Cancel selected while running</button>"
        }
        TaskState::Completed | TaskState::Cancelled => {
            "<button type=\"submit\" name=\"do\" value=\"cancel\">Remove selected</button>"
        }
        TaskState::Ready | TaskState::Delayed => {
            "<button type=\"submit\" name=\"do\" value=\"cancel\">Cancel selected</button>"
        }
    };
    format!("<p class=\"controls\">{button}</p></form>\n")
}

/// Redrive every DEAD task.
pub(super) fn redrive_all(queue: &str, dead: u64) -> String {
    format!(
        "<p class=\"controls\">{}</p>\n",
        button(
            "redrive-all",
            &[("queue", queue)],
            &format!("Redrive all {dead} DEAD"),
        )
    )
}

/// A group's pause or resume button.
pub(super) fn group_control(queue: &str, group: &str, paused: bool) -> String {
    if paused {
        button(
            "resume-group",
            &[("queue", queue), ("group", group)],
            "Resume",
        )
    } else {
        button(
            "pause-group",
            &[("queue", queue), ("group", group)],
            "Pause",
        )
    }
}

/// A task's redrive (DEAD), cancel (READY or DELAYED) or cancel-while-running
/// (IN_FLIGHT) button.
pub(super) fn task_controls(queue: &str, id: &str, state: TaskState) -> String {
    let fields = [("queue", queue), ("id", id)];
    match state {
        TaskState::Dead => format!(
            "<p class=\"controls\">{}</p>\n",
            button("redrive", &fields, "Redrive")
        ),
        TaskState::Ready | TaskState::Delayed => {
            format!(
                "<p class=\"controls\">{}</p>\n",
                button("cancel", &fields, "Cancel task")
            )
        }
        TaskState::InFlight => format!(
            "<p class=\"controls\">{}</p>\n",
            button("cancel-running", &fields, "Cancel running task")
        ),
        TaskState::Completed | TaskState::Cancelled => String::new(),
    }
}

/// A schedule's trigger and pause or resume buttons.
pub(super) fn schedule_controls(schedule: &str, paused: bool) -> String {
    let fields = [("schedule", schedule)];
    format!(
        "{} {}",
        button("trigger-schedule", &fields, "Trigger"),
        if paused {
            button("resume-schedule", &fields, "Resume")
        } else {
            button("pause-schedule", &fields, "Pause")
        }
    )
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

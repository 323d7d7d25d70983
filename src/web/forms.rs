//! The action forms the pages show an admin: one-button forms, a queue's limits, the
//! selection around a table of tasks. Each posts to `/action` (`actions.rs`), which asks
//! to confirm before it does anything. Shared here so that no page imports another.

use std::time::Duration;

use super::html::{Html, Part};
use crate::queue::{QueueConfig, TaskState};

/// A form of one button that asks for `action` with `hidden` fields.
fn button(action: &'static str, hidden: &[(&'static str, &str)], label: impl Part) -> Html {
    let mut form = Html::new();
    form.raw("<form method=\"post\" action=\"/action\" class=\"inline\">");
    for (key, value) in hidden {
        html!(form; "<input type=\"hidden\" name=\"", *key, "\" value=\"", *value, "\">");
    }
    html!(form;
        "<button type=\"submit\" name=\"do\" value=\"", action, "\">", label, "</button></form>"
    );
    form
}

/// `inner` in a paragraph of controls.
fn controls(inner: Html) -> Html {
    let mut out = Html::new();
    html!(out; "<p class=\"controls\">", inner, "</p>\n");
    out
}

/// A queue's pause or resume button and its limits form.
pub(super) fn queue_controls(queue: &str, config: &QueueConfig) -> Html {
    let toggle = if config.paused {
        button("resume-queue", &[("queue", queue)], "Resume queue")
    } else {
        button("pause-queue", &[("queue", queue)], "Pause queue")
    };
    let per_second = config
        .rate_limit
        .filter(|rate| rate.period == Duration::from_secs(1))
        .map_or(0, |rate| rate.limit);
    let mut out = Html::new();
    html!(out;
        "<div class=\"controls\">", toggle,
        "\n<form method=\"post\" action=\"/action\" class=\"limits\">\
         <input type=\"hidden\" name=\"queue\" value=\"", queue, "\">\
         <label>In flight at most <input name=\"max_in_flight\" inputmode=\"numeric\" size=\"7\" value=\"",
        config.max_in_flight,
        "\"></label> <label>Deliveries a second <input name=\"per_second\" inputmode=\"numeric\" size=\"7\" value=\"",
        per_second,
        "\"></label> <label>In flight per group <input name=\"group_max_in_flight\" inputmode=\"numeric\" size=\"7\" value=\"",
        config.group_max_in_flight,
        "\"></label> <button type=\"submit\" name=\"do\" value=\"limits\">Set limits</button> \
         <span class=\"muted\">0 is no limit</span></form></div>\n"
    );
    out
}

/// Opens the form around a table of tasks whose rows have checkboxes.
pub(super) fn selection_form_open(queue: &str) -> Html {
    let mut out = Html::new();
    html!(out;
        "<form method=\"post\" action=\"/action\" class=\"selection\">\
         <input type=\"hidden\" name=\"queue\" value=\"", queue, "\">\n"
    );
    out
}

/// The buttons for the checked tasks, and the form's end.
pub(super) fn selection_form_close(state: TaskState) -> Html {
    let mut out = Html::new();
    out.raw("<p class=\"controls\">");
    out.raw(match state {
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
    });
    out.raw("</p></form>\n");
    out
}

/// Redrive every DEAD task.
pub(super) fn redrive_all(queue: &str, dead: u64) -> Html {
    controls(button(
        "redrive-all",
        &[("queue", queue)],
        format_args!("Redrive all {dead} DEAD"),
    ))
}

/// A group's pause or resume button.
pub(super) fn group_control(queue: &str, group: &str, paused: bool) -> Html {
    let fields = [("queue", queue), ("group", group)];
    if paused {
        button("resume-group", &fields, "Resume")
    } else {
        button("pause-group", &fields, "Pause")
    }
}

/// A task's redrive (DEAD), cancel (READY or DELAYED) or cancel-while-running
/// (IN_FLIGHT) button.
pub(super) fn task_controls(queue: &str, id: &str, state: TaskState) -> Html {
    let fields = [("queue", queue), ("id", id)];
    match state {
        TaskState::Dead => controls(button("redrive", &fields, "Redrive")),
        TaskState::Ready | TaskState::Delayed => controls(button("cancel", &fields, "Cancel task")),
        TaskState::InFlight => controls(button("cancel-running", &fields, "Cancel running task")),
        TaskState::Completed | TaskState::Cancelled => Html::new(),
    }
}

/// A schedule's trigger and pause or resume buttons.
pub(super) fn schedule_controls(schedule: &str, paused: bool) -> Html {
    let fields = [("schedule", schedule)];
    let mut out = button("trigger-schedule", &fields, "Trigger");
    out.raw(" ");
    if paused {
        html!(out; button("resume-schedule", &fields, "Resume"));
    } else {
        html!(out; button("pause-schedule", &fields, "Pause"));
    }
    out
}

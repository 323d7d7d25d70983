//! `turnstile schedule put/ls/rm/pause/resume/trigger`: the tenant's schedules from
//! the command line, a table for people and one JSON object per line with `--json`.

use std::{process::ExitCode, time::Duration};

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use turnstile::{config::parse_duration, pb};

use super::{
    admin::read_payload,
    client::{Client, ClientArgs, Failure, Outcome},
    output::{rfc3339, table},
};

/// `turnstile schedule`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub action: ScheduleAction,
}

/// What `turnstile schedule` does.
#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Create or replace a schedule; prints its next fire time.
    Put(PutArgs),
    /// Every schedule of the tenant, with its next and last fire times.
    Ls(LsArgs),
    /// Delete a schedule (its tasks stay in their queue).
    Rm(NameArgs),
    /// Stop a schedule's fires.
    Pause(NameArgs),
    /// Fire a paused schedule again, from now on.
    Resume(NameArgs),
    /// Enqueue one task of a schedule now; prints its id.
    Trigger(NameArgs),
}

/// What a fire does while the last fire's task is still in the queue.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OverlapArg {
    /// Fire anyway.
    Allow,
    /// Skip the fire.
    Skip,
}

/// `turnstile schedule put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The schedule's name.
    pub name: String,
    /// The queue each fire enqueues into.
    pub queue: String,
    /// The task's payload; `-` or none reads it from stdin.
    pub payload: Option<String>,
    /// A cron expression: 5 fields, or 6 with seconds first, or @hourly, @daily, ...
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long = "tz", requires = "cron")]
    pub time_zone: Option<String>,
    /// Fire at every multiple of this since the Unix epoch (like 30s, 5m, 1h).
    #[arg(long, value_parser = parse_duration)]
    pub every: Option<Duration>,
    /// What a fire does while the last fire's task is still in the queue.
    #[arg(long, value_enum, default_value = "allow")]
    pub overlap: OverlapArg,
    /// Missed fire times at most this old are enqueued on recovery (default 1m).
    #[arg(long, value_parser = parse_duration)]
    pub catch_up: Option<Duration>,
    /// Deliveries of each task before it goes DEAD (0: the server's default, 25).
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u32,
    /// Each task's priority, 0-9.
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
    /// Each task's group.
    #[arg(long, default_value = "")]
    pub group: String,
    /// Store it paused.
    #[arg(long)]
    pub paused: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `turnstile schedule ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The commands that take a schedule's name.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The schedule's name.
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn duration(value: Duration) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(value).ok()
}

/// Runs one `turnstile schedule` command.
pub async fn run(args: ScheduleArgs) -> Outcome {
    match args.action {
        ScheduleAction::Put(args) => put(args).await,
        ScheduleAction::Ls(args) => ls(args).await,
        ScheduleAction::Rm(args) => rm(args).await,
        ScheduleAction::Pause(args) => set_paused(args, true).await,
        ScheduleAction::Resume(args) => set_paused(args, false).await,
        ScheduleAction::Trigger(args) => trigger(args).await,
    }
}

async fn put(args: PutArgs) -> Outcome {
    let spec = match (args.cron, args.every) {
        (Some(cron), _) => pb::schedule::Spec::Cron(cron),
        (None, Some(every)) => pb::schedule::Spec::Every(
            duration(every).ok_or_else(|| Failure::other("--every: too long"))?,
        ),
        (None, None) => return Err(Failure::other("give --cron or --every")),
    };
    let schedule = pb::Schedule {
        name: args.name,
        queue: args.queue,
        spec: Some(spec),
        time_zone: args.time_zone.unwrap_or_default(),
        task: Some(pb::ScheduledTask {
            payload: read_payload(args.payload.as_deref())?,
            max_attempts: args.max_attempts,
            priority: args.priority,
            group: args.group,
        }),
        paused: args.paused,
        overlap: match args.overlap {
            OverlapArg::Allow => pb::OverlapPolicy::Allow,
            OverlapArg::Skip => pb::OverlapPolicy::Skip,
        } as i32,
        catch_up_window: args.catch_up.and_then(duration),
        ..Default::default()
    };
    let mut client = args.client.connect()?;
    store(&mut client, schedule, args.client.json).await
}

/// Puts `schedule` and prints it as stored.
async fn store(client: &mut Client, schedule: pb::Schedule, json: bool) -> Outcome {
    let stored = client
        .schedules
        .put_schedule(pb::PutScheduleRequest {
            schedule: Some(schedule),
        })
        .await?
        .into_inner()
        .schedule
        .unwrap_or_default();
    print_one(&stored, json);
    Ok(ExitCode::SUCCESS)
}

/// A schedule's one line: `NAME next fire ...`, or its JSON object.
fn print_one(schedule: &pb::Schedule, json: bool) {
    if json {
        println!("{}", schedule_json(schedule));
    } else {
        println!(
            "{}: next fire {}{}",
            schedule.name,
            rfc3339(schedule.next_fire_at.as_ref()),
            if schedule.paused { " (paused)" } else { "" }
        );
    }
}

/// `cron 0 3 * * * Europe/Paris` or `every 30s`.
fn spec_text(schedule: &pb::Schedule) -> String {
    match &schedule.spec {
        Some(pb::schedule::Spec::Cron(cron)) if schedule.time_zone.is_empty() => {
            format!("cron {cron}")
        }
        Some(pb::schedule::Spec::Cron(cron)) => format!("cron {cron} {}", schedule.time_zone),
        Some(pb::schedule::Spec::Every(every)) => {
            let ms = every.seconds * 1000 + i64::from(every.nanos) / 1_000_000;
            if ms % 1000 == 0 {
                format!("every {}s", ms / 1000)
            } else {
                format!("every {ms}ms")
            }
        }
        None => "-".to_owned(),
    }
}

fn overlap_text(schedule: &pb::Schedule) -> &'static str {
    if schedule.overlap == pb::OverlapPolicy::Skip as i32 {
        "skip"
    } else {
        "allow"
    }
}

fn schedule_json(schedule: &pb::Schedule) -> serde_json::Value {
    json!({
        "name": schedule.name,
        "queue": schedule.queue,
        "spec": spec_text(schedule),
        "paused": schedule.paused,
        "overlap": overlap_text(schedule),
        "next_fire_at": schedule.next_fire_at.as_ref().map(|t| rfc3339(Some(t))),
        "last_fire_at": schedule.last_fire_at.as_ref().map(|t| rfc3339(Some(t))),
    })
}

async fn ls(args: LsArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let mut rows = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .schedules
            .list_schedules(pb::ListSchedulesRequest {
                page_size: 1000,
                page_token: token,
            })
            .await?
            .into_inner();
        for schedule in page.schedules {
            if args.client.json {
                println!("{}", schedule_json(&schedule));
                continue;
            }
            rows.push(vec![
                schedule.name.clone(),
                schedule.queue.clone(),
                spec_text(&schedule),
                rfc3339(schedule.next_fire_at.as_ref()),
                rfc3339(schedule.last_fire_at.as_ref()),
                if schedule.paused { "yes" } else { "no" }.to_owned(),
                overlap_text(&schedule).to_owned(),
            ]);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    if !args.client.json {
        print!(
            "{}",
            table(
                &[
                    "NAME",
                    "QUEUE",
                    "WHEN",
                    "NEXT_FIRE",
                    "LAST_FIRE",
                    "PAUSED",
                    "OVERLAP"
                ],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn rm(args: NameArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let deleted = client
        .schedules
        .delete_schedule(pb::DeleteScheduleRequest {
            name: args.name.clone(),
        })
        .await?
        .into_inner()
        .deleted;
    if args.client.json {
        println!("{}", json!({"name": args.name, "deleted": deleted}));
    } else if deleted {
        println!("{}: deleted", args.name);
    } else {
        println!("{}: no such schedule", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

/// Pause or resume: the stored schedule, put back with `paused` changed.
async fn set_paused(args: NameArgs, paused: bool) -> Outcome {
    let mut client = args.client.connect()?;
    let mut schedule = client
        .schedules
        .get_schedule(pb::GetScheduleRequest {
            name: args.name.clone(),
        })
        .await?
        .into_inner()
        .schedule
        .unwrap_or_default();
    schedule.paused = paused;
    schedule.next_fire_at = None;
    schedule.last_fire_at = None;
    store(&mut client, schedule, args.client.json).await
}

async fn trigger(args: NameArgs) -> Outcome {
    let mut client = args.client.connect()?;
    let id = client
        .schedules
        .trigger_schedule(pb::TriggerScheduleRequest {
            name: args.name.clone(),
        })
        .await?
        .into_inner()
        .id;
    if args.client.json {
        println!("{}", json!({"name": args.name, "id": id}));
    } else {
        println!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

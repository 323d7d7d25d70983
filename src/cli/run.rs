//! Running the user's command for `lock` and `work`: spawn it, wait for it, turn its
//! end into an exit status (a signal `n` is 128 + n, as shells report it), and pass on
//! the SIGTERM or SIGINT that asks `turnstile` itself to stop.

use std::process::{ExitCode, ExitStatus};

use tokio::{
    process::{Child, Command},
    signal::unix::{signal, Signal, SignalKind},
};

use super::client::Failure;

/// `command` (program and arguments) ready to spawn; an empty one is a usage error,
/// which clap already refuses.
pub fn command(argv: &[String]) -> Command {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    command
}

/// Spawns `command`; a program that cannot be started is 127 (not found) or 126 (not
/// executable), as a shell says.
pub fn spawn(command: &mut Command, program: &str) -> Result<Child, Failure> {
    command.spawn().map_err(|err| Failure {
        message: format!("cannot run {program}: {err}"),
        code: if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    })
}

/// The exit status that reports `status` (a signal `n` is 128 + n).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => 1,
    }
}

/// `code` as the process's exit status.
pub fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// Sends `signal` to `child` if it still runs.
pub fn signal_child(child: &Child, signal: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }
}

/// SIGTERM and SIGINT, the requests to stop.
pub struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    pub fn install() -> Result<Self, Failure> {
        let install = |kind| {
            signal(kind).map_err(|err| Failure::other(format!("cannot handle signals: {err}")))
        };
        Ok(Self {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
        })
    }

    /// The next stop request: the signal's number.
    pub async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.int.recv() => libc::SIGINT,
        }
    }
}

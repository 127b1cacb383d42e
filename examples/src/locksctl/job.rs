//! The supervision of the command that `locksctl lock` and `locksctl campaign` run: the
//! signals caught and forwarded to it ([`Signals`]), and the command itself ([`Job`]): spawned
//! in a process group of its own, sent the signals `locksctl` gets, stopped (SIGTERM) when the
//! lock or leadership is lost, sent SIGKILL `grace` after the first signal forwarded or the
//! loss, and reaped; then its exit code ([`JobEnd::code`]).
//!
//! Invariants:
//!
//! - [`Job::run`] returns only once the command has been reaped, so a caller that ends the
//!   session after it (releasing the lock or the leadership) does so only after the command
//!   has exited: a second `locksctl lock` of the lock cannot start its command while this
//!   one's still runs.
//! - A signal that `locksctl` was started with ignored (`nohup`, `&` in a script) is never
//!   caught: it stays ignored, for `locksctl` and for the command it runs.
//! - Signals go to the command's group (the negated pid of its leader), and only until it has
//!   been reaped, so the target is never a reused id. The command shares `locksctl`'s group
//!   only when `locksctl` is its terminal's foreground job; signals then go to the command's
//!   own pid, and SIGINT and SIGQUIT, which the terminal's keys send to both, are not passed
//!   on again.
//! - A signal caught before the command starts ends `locksctl` with 128 + its number
//!   ([`signalled_before`]); the command's exit code is its own, or 128 + the signal that
//!   ended it.

use super::fail;
use std::process::ExitCode;
use std::task::Poll;
use std::time::Duration;
use tokio::signal::unix::SignalKind;
use tokio::time::Instant;

/// The exit code after a signal that came before the command started: 128 + its number.
pub fn signalled_before(signal: Sig) -> ExitCode {
    eprintln!(
        "locksctl: {}: gave up before the command started",
        signal_name(signal)
    );
    ExitCode::from(u8::try_from(128 + signal).unwrap_or(1))
}

/// The signals `locksctl` passes on to its command.
const FORWARDED: [Sig; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// A signal number.
pub type Sig = libc::c_int;

/// The name of `signal` in messages (`a signal` for one not forwarded nor SIGKILL).
fn signal_name(signal: Sig) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// The forwarded signals as they reach `locksctl`, instead of their default action (which
/// would end it with its command still running). A signal `locksctl` was started with
/// ignored (`nohup`, `&` in a script) stays ignored, for the command too.
pub struct Signals(Vec<(Sig, tokio::signal::unix::Signal)>);

impl Signals {
    /// No signal caught: the commands that run nothing keep the default actions.
    pub fn none() -> Signals {
        Signals(Vec::new())
    }

    /// Catches the forwarded signals.
    pub fn catch() -> Result<Signals, String> {
        let mut caught = Vec::new();
        for signal in FORWARDED {
            if ignored(signal) {
                continue;
            }
            let stream = tokio::signal::unix::signal(SignalKind::from_raw(signal))
                .map_err(|e| format!("cannot catch {}: {e}", signal_name(signal)))?;
            caught.push((signal, stream));
        }
        Ok(Signals(caught))
    }

    /// The next signal caught (never, with none caught). Cancel-safe: one that arrived is
    /// kept until this returns it.
    pub async fn next(&mut self) -> Sig {
        std::future::poll_fn(|cx| {
            for (signal, stream) in &mut self.0 {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*signal);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Whether `signal`'s disposition is "ignore".
fn ignored(signal: Sig) -> bool {
    let mut action = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: sigaction(2) with no new action only writes the current one into `action`, which
    // is valid for writes (and zeroed, so initialized even if the call fails).
    unsafe {
        libc::sigaction(signal, std::ptr::null(), action.as_mut_ptr());
        action.assume_init().sa_sigaction == libc::SIG_IGN
    }
}

/// Whether `locksctl` is the foreground job of the terminal on its stdin.
fn terminal_foreground() -> bool {
    // SAFETY: isatty(3), tcgetpgrp(3) and getpgrp(2) only read the state of this process and
    // of its terminal.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// The command run under the lock (or leadership), and where its signals go.
///
/// It runs in a process group of its own, and signals go to the group: a shell's children get
/// them too, and SIGKILL leaves none of them behind. Only when `locksctl` is the foreground
/// job of its terminal does the command stay in `locksctl`'s group, so that it can read the
/// terminal (a background group reading it would be stopped); the terminal's keys then signal
/// it directly, and so SIGINT and SIGQUIT are not passed on again, and signals go to the
/// command's own pid.
pub struct Job {
    child: tokio::process::Child,
    /// kill(2)'s target: the group (the negated pid of its leader), or the command's pid.
    target: libc::pid_t,
    /// Run in `locksctl`'s group, as the terminal's foreground job.
    foreground: bool,
}

/// How a command run under a lock ended.
pub struct JobEnd {
    /// Its exit status, or why it could not be waited for.
    status: std::io::Result<std::process::ExitStatus>,
    /// The lock (or leadership) was lost while it ran.
    pub lost: bool,
}

impl JobEnd {
    /// The command's exit code (2 if it could not be waited for).
    pub fn code(self) -> ExitCode {
        match self.status {
            Ok(status) => ExitCode::from(exit_code(status)),
            Err(e) => fail(2, format_args!("cannot wait for the command: {e}")),
        }
    }
}

impl Job {
    /// Starts `command` with `env` added, or says why not (exit 2).
    pub fn spawn(command: &[String], env: &[(&str, &str)]) -> Result<Job, ExitCode> {
        let foreground = terminal_foreground();
        let mut cmd = tokio::process::Command::new(&command[0]);
        cmd.args(&command[1..]).envs(env.iter().copied());
        if !foreground {
            cmd.process_group(0);
        }
        let child = cmd
            .spawn()
            .map_err(|e| fail(2, format_args!("cannot run {}: {e}", command[0])))?;
        let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
        let Some(pid) = pid else {
            return Err(fail(2, format_args!("{} has no pid", command[0])));
        };
        Ok(Job {
            child,
            target: if foreground { pid } else { -pid },
            foreground,
        })
    }

    /// Sends `signal` to the command (its group).
    fn signal(&self, signal: Sig) {
        // SAFETY: kill(2) touches no memory of this process. The target is not reused: it is
        // signalled only until `run` has reaped the command, and a group's id is not reused
        // while its leader (reaped or not) has not been waited for.
        unsafe {
            libc::kill(self.target, signal);
        }
    }

    /// Waits for the command to exit, passing on the signals `locksctl` gets and stopping it
    /// (SIGTERM) when `lost` says the lock is lost; SIGKILL when it has not exited `grace`
    /// after the first signal passed on or the loss. Returns only once it has been reaped.
    pub async fn run(
        &mut self,
        signals: &mut Signals,
        grace: Duration,
        lost: impl Future<Output = String>,
    ) -> JobEnd {
        tokio::pin!(lost);
        let mut was_lost = false;
        let mut kill_at: Option<Instant> = None;
        let mut killed = false;
        loop {
            tokio::select! {
                status = self.child.wait() => return JobEnd { status, lost: was_lost },
                signal = signals.next() => {
                    if self.foreground && matches!(signal, libc::SIGINT | libc::SIGQUIT) {
                        // The terminal sent it to the command as well.
                        continue;
                    }
                    self.signal(signal);
                    if kill_at.is_none() && !killed {
                        eprintln!(
                            "locksctl: {}: passed to the command; holding on until it exits (SIGKILL in {grace:?})",
                            signal_name(signal),
                        );
                        kill_at = Some(Instant::now() + grace);
                    }
                }
                why = &mut lost, if !was_lost => {
                    eprintln!("locksctl: {why}; stopping the command");
                    was_lost = true;
                    self.signal(libc::SIGTERM);
                    if !killed {
                        kill_at.get_or_insert_with(|| Instant::now() + grace);
                    }
                }
                () = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    eprintln!("locksctl: the command has not exited {grace:?} after the signal: SIGKILL");
                    self.signal(libc::SIGKILL);
                    kill_at = None;
                    killed = true;
                }
            }
        }
    }
}

/// The exit code of a command: its own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

//! A child process's resources: the CPU time it used (`wait4`, or `/proc/<pid>/stat` while it
//! runs) and its memory (`/proc/<pid>/status`).
//!
//! The one place of the project that calls the kernel directly (`wait4`, `sysconf`, `kill`): the
//! workspace denies `unsafe_code`, and this module alone allows it.
#![allow(unsafe_code)]

use std::time::Duration;

/// Waits for our child `pid` to end and says the CPU time it used (user and system), from
/// `wait4`; with `kill`, ends it first. Its `Child` handle must not wait for it.
pub(crate) fn reap_child(pid: u32, kill: bool) -> Duration {
    let pid = i32::try_from(pid).expect("a pid");
    if kill {
        // SAFETY: `kill` has no memory preconditions; `pid` is our own child, not yet waited for.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    reap(pid)
}

/// [`reap_child`] without the kill.
pub(crate) fn reap(pid: i32) -> Duration {
    let mut status = 0;
    // SAFETY: `rusage` is plain data that `wait4` fills in; `pid` is our own child, which has
    // not been waited for (its `Child` handle is dropped without waiting).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let waited = libc::wait4(pid, &mut status, 0, &mut usage);
        assert_eq!(waited, pid, "wait4 failed");
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// A process's peak resident memory (`VmHWM`), in KiB.
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM")
}

/// A process's CPU time so far (user + system), in milliseconds, from `/proc/<pid>/stat`.
pub(crate) fn cpu_ms(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) * 1000.0 / ticks)
        })
        .unwrap_or(0.0)
}

/// A memory figure of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, ...), in KiB; 0 once it is gone.
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?
                .to_owned();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

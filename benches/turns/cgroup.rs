//! A Lambda function's CPU share on this machine: a cgroup whose CPU quota is what Lambda gives a
//! function of a memory size (one vCPU at 1,769 MB, in proportion below it), over short periods,
//! and the children the bench starts inside it.
//!
//! cgroup v1 (`cpu.cfs_quota_us`), as root. Where it cannot be made (no v1 CPU controller, no
//! permission, cgroup v2 alone), the part that wants it says so and is skipped.
//!
//! A child is started inside the group ([`CpuShare::spawn`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The memory size Lambda gives one whole vCPU at.
pub(crate) const ONE_VCPU_MB: u32 = 1_769;

/// The quota's period, in microseconds: short, so that a start-up of a few milliseconds of CPU
/// is not rounded to whole long periods (over 100 ms periods, cold starts come out bimodal).
const PERIOD_US: u64 = 20_000;

/// The v1 hierarchy of the CPU controller, or why there is none to use.
fn v1_root() -> Result<PathBuf, String> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.cfs_quota_us").is_file() {
        return Ok(v1.to_path_buf());
    }
    let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "cpu") {
        return Err(
            "cgroup v2 holds a process's threads in one group, and this part starts each \
                    child from a thread moved into the quota's group for the moment (cgroup v1)"
                .into(),
        );
    }
    Err("no cgroup CPU controller is mounted".into())
}

/// A cgroup with the CPU share of a Lambda function of `mb` megabytes; removed when dropped.
#[derive(Debug)]
pub(crate) struct CpuShare {
    mb: u32,
    dir: PathBuf,
    /// The group this process's threads are in, which a spawning thread goes back to.
    home: PathBuf,
}

impl CpuShare {
    /// The share of a function of `mb` megabytes (at most one vCPU), or why it cannot be made.
    pub(crate) fn of(mb: u32) -> Result<Self, String> {
        let root = v1_root()?;
        let home = root.join(own_group()?);
        let dir = root.join(format!("agent-worker-bench-{mb}mb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let share = Self { mb, dir, home };
        let quota = (PERIOD_US * u64::from(mb.min(ONE_VCPU_MB)) / u64::from(ONE_VCPU_MB)).max(1_000);
        let written = std::fs::write(share.dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())
            .and_then(|()| std::fs::write(share.dir.join("cpu.cfs_quota_us"), quota.to_string()));
        written.map_err(|e| format!("cannot set the CPU quota of {}: {e}", share.dir.display()))?;
        Ok(share)
    }

    /// The memory size it stands for.
    pub(crate) fn mb(&self) -> u32 {
        self.mb
    }

    /// Starts `command` inside this group: the calling thread moves into it, spawns (the child
    /// is born in the group, so nothing of its own runs outside the quota), and moves back. (A
    /// `pre_exec` hook would make the standard library fork the whole bench process instead of
    /// spawning, and the child's CPU time would count the teardown of that copy; moving the
    /// child after it started would let its first milliseconds run outside the quota, while the
    /// kernel migrates it.)
    pub(crate) fn spawn(&self, command: &mut Command) -> Child {
        // Writing 0 to a v1 group's `tasks` moves the writing thread alone.
        std::fs::write(self.dir.join("tasks"), "0").expect("this thread joins the quota's group");
        let child = command.spawn();
        std::fs::write(self.home.join("tasks"), "0").expect("this thread goes back to its group");
        child.expect("the child starts")
    }
}

/// The group of the v1 hierarchy's CPU controller this process is in, relative to its root.
fn own_group() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    cgroups
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|c| c == "cpu")
                .then(|| PathBuf::from(path.trim_start_matches('/')))
        })
        .next()
        .ok_or_else(|| "this process is in no group of the cpu controller".to_owned())
}

impl Drop for CpuShare {
    fn drop(&mut self) {
        // Empty once its children are gone; a group that still holds one stays behind, harmless.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

//! A Lambda function's CPU share on this machine: a cgroup whose CPU quota is what Lambda gives a
//! function of a memory size (one vCPU at 1,769 MB, in proportion below it), over short periods,
//! and the children the bench starts inside it.
//!
//! cgroup v1 (`cpu.cfs_quota_us`) or v2 (`cpu.max`), as root. Where neither can be made, the part
//! that wants it says so and is skipped.
//!
//! A child is moved into the group as soon as it is started ([`CpuShare::enter`]).

use std::path::{Path, PathBuf};

/// The memory size Lambda gives one whole vCPU at.
pub(crate) const ONE_VCPU_MB: u32 = 1_769;

/// The quota's period, in microseconds: short, so that a start-up of a few milliseconds of CPU
/// is not rounded to whole long periods (over 100 ms periods, cold starts come out bimodal).
const PERIOD_US: u64 = 20_000;

/// Which cgroup hierarchy holds the CPU controller.
#[derive(Debug, Clone)]
enum Hierarchy {
    /// v1: the `cpu` controller's own mount.
    V1(PathBuf),
    /// v2: the unified hierarchy, with `cpu` in its controllers.
    V2(PathBuf),
}

impl Hierarchy {
    /// The hierarchy this machine lets the bench write, or why none.
    fn find() -> Result<Self, String> {
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").is_file() {
            return Ok(Self::V1(v1.to_path_buf()));
        }
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "cpu") {
            // Children of the root have the controller only when the root hands it down.
            std::fs::write(v2.join("cgroup.subtree_control"), "+cpu")
                .map_err(|e| format!("cgroup v2 does not hand down the cpu controller: {e}"))?;
            return Ok(Self::V2(v2.to_path_buf()));
        }
        Err("no cgroup CPU controller is mounted (neither v1's cpu nor v2's)".into())
    }
}

/// A cgroup with the CPU share of a Lambda function of `mb` megabytes; removed when dropped.
#[derive(Debug)]
pub(crate) struct CpuShare {
    mb: u32,
    dir: PathBuf,
    /// `<dir>/cgroup.procs`.
    procs: PathBuf,
}

impl CpuShare {
    /// The share of a function of `mb` megabytes (at most one vCPU), or why it cannot be made.
    pub(crate) fn of(mb: u32) -> Result<Self, String> {
        let hierarchy = Hierarchy::find()?;
        let root = match &hierarchy {
            Hierarchy::V1(root) | Hierarchy::V2(root) => root,
        };
        let dir = root.join(format!("agent-worker-bench-{mb}mb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let share = Self {
            mb,
            procs: dir.join("cgroup.procs"),
            dir,
        };
        let quota = (PERIOD_US * u64::from(mb.min(ONE_VCPU_MB)) / u64::from(ONE_VCPU_MB)).max(1_000);
        let written = match hierarchy {
            Hierarchy::V1(_) => std::fs::write(share.dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())
                .and_then(|()| std::fs::write(share.dir.join("cpu.cfs_quota_us"), quota.to_string())),
            Hierarchy::V2(_) => std::fs::write(share.dir.join("cpu.max"), format!("{quota} {PERIOD_US}")),
        };
        written.map_err(|e| format!("cannot set the CPU quota of {}: {e}", share.dir.display()))?;
        Ok(share)
    }

    /// The memory size it stands for.
    pub(crate) fn mb(&self) -> u32 {
        self.mb
    }

    /// Moves the process `pid` (a child just started) into this group. It is moved as soon as
    /// it is started, not made to join between `fork` and `exec`: a `pre_exec` hook makes the
    /// standard library fork the whole bench process instead of spawning, and the child's CPU
    /// time would then count the teardown of that copy (several milliseconds). What the child
    /// runs before the move (microseconds after `exec`) is outside the quota.
    pub(crate) fn enter(&self, pid: u32) {
        std::fs::write(&self.procs, pid.to_string()).expect("the child joins the cgroup");
    }
}

impl Drop for CpuShare {
    fn drop(&mut self) {
        // Empty once its children are gone; a group that still holds one stays behind, harmless.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

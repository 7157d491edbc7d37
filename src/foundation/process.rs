//! Child processes that must not outlive the audit, and temporary directories left by audits that
//! did not get to clean up (killed with SIGKILL, or the machine lost power).
//!
//! Ctrl-C and SIGTERM are handled by [`crate::foundation::interrupt`]; SIGKILL cannot be. On Linux every child
//! (worker, pip) is started with a parent-death signal, so the kernel kills it when the audit
//! dies. The directories such an audit leaves carry an owner marker (its process id and start
//! time) and are swept by the next audit that finds their owner gone.

use std::path::Path;
use std::process::Command;

/// The file in a temporary directory naming the process that owns it.
pub const OWNER_MARKER: &str = ".npu-audit-owner";

/// Makes `cmd`'s process die with the thread that starts it (Linux: `PR_SET_PDEATHSIG`). The
/// caller keeps that thread alive while it waits for the child, as the pool and pip do.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the signal was armed.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd
}

/// This process's identity as the owner marker records it: process id and start time (so a
/// recycled id is not taken for the owner).
fn identity_of(pid: u32) -> Option<String> {
    let start = start_time(pid);
    if cfg!(target_os = "linux") && start.is_none() {
        return None;
    }
    Some(format!("{pid} {}", start.unwrap_or_default()))
}

/// The start time of a running process in clock ticks after boot (field 22 of
/// `/proc/PID/stat`); `None` for a process that is gone or a zombie (dead, not yet reaped).
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18).map(str::to_string)
}

/// Marks `dir` as owned by this process.
pub fn mark_owned(dir: &Path) -> std::io::Result<()> {
    let me = identity_of(std::process::id()).unwrap_or_else(|| std::process::id().to_string());
    std::fs::write(dir.join(OWNER_MARKER), me)
}

/// A fresh directory in the system's temporary directory, named `prefix` + random characters,
/// marked as owned by this process and registered for removal on an interrupt: a command that is
/// killed before it removes it leaves it for the next audit to sweep (every audit sweeps the
/// `npu-audit-` directories of owners that are gone). Removed when the value is dropped.
pub fn owned_tempdir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| crate::foundation::error::run_error(format!("cannot create a temporary directory: {e}")))?;
    mark_owned(dir.path()).map_err(|e| {
        crate::foundation::error::run_error(format!(
            "cannot write into the temporary directory {}: {e}",
            dir.path().display()
        ))
    })?;
    crate::foundation::interrupt::dir_created(dir.path());
    Ok(dir)
}

/// Whether the process named in `dir`'s owner marker is gone. A directory without a marker is
/// not ours to judge (kept with `--keep-work`, or another tool's).
fn owner_is_gone(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(OWNER_MARKER)) else {
        return false;
    };
    let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    if cfg!(target_os = "linux") {
        identity_of(pid).is_none_or(|now| now != text.trim())
    } else {
        false
    }
}

/// Removes the directories in `parent` whose names start with `prefix` and whose owner is gone.
/// Returns how many were removed. Errors are ignored: sweeping is a courtesy.
pub fn sweep_stale(parent: &Path, prefix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| owner_is_gone(&e.path()))
        .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        // The kernel delivers the parent-death signal when the starting thread exits.
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd).spawn().expect("spawn sleep")
        })
        .join()
        .expect("thread");
        let mut child = child;
        let status = child.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_directory_of_a_living_owner_is_kept_and_of_a_dead_one_swept() {
        let root = tempfile::tempdir().unwrap();
        let mine = root.path().join("x-mine");
        let dead = root.path().join("x-dead");
        let unmarked = root.path().join("x-unmarked");
        for d in [&mine, &dead, &unmarked] {
            std::fs::create_dir(d).unwrap();
        }
        mark_owned(&mine).unwrap();
        // A process id above the kernel's maximum never exists.
        std::fs::write(dead.join(OWNER_MARKER), "4194305 123").unwrap();
        assert_eq!(sweep_stale(root.path(), "x-"), 1);
        assert!(mine.exists() && unmarked.exists() && !dead.exists());
    }
}

//! Ctrl-C, SIGTERM and SIGHUP: an interrupted audit kills the worker processes it started and
//! removes its work directory before it exits, instead of leaving orphans and temporary files.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Worker processes alive right now. Spawning happens under this lock, so a process cannot
/// start between the handler's decision to stop and its killing of every child.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Work directories to remove if interrupted.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Exit code of an interrupted audit (128 + SIGINT, as shells report it).
pub const INTERRUPTED: i32 = 130;

/// Installs the handler once, at start-up. Failing to install it is not worth failing the run.
///
/// The handler stops new workers, kills running ones, and lets the audit unwind: the main thread
/// sees [`stopping`], returns an "interrupted" error, and the work directory is removed as the
/// stack unwinds. Should that take long, the handler removes what it can and exits on its own.
pub fn install() {
    let _ = ctrlc::set_handler(|| {
        if let Ok(children) = CHILDREN.lock() {
            STOPPING.store(true, Ordering::SeqCst);
            for &pid in children.iter() {
                kill(pid);
            }
        }
        eprintln!("npu-audit: interrupted; stopping the worker processes");
        std::thread::sleep(std::time::Duration::from_secs(5));
        for dir in DIRS.lock().map(|d| d.clone()).unwrap_or_default() {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::process::exit(INTERRUPTED);
    });
}

/// Whether an interruption is being handled.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

#[cfg(unix)]
fn kill(pid: u32) {
    // SAFETY: kill(2) with a PID this process spawned and has not yet reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

#[cfg(not(unix))]
fn kill(pid: u32) {
    let _ = std::process::Command::new("taskkill")
        .args(["/F", "/PID", &pid.to_string()])
        .status();
}

/// Starts a worker process and records it, unless the audit is being interrupted (`None`).
pub fn spawn(start: impl FnOnce() -> std::io::Result<Child>) -> Option<std::io::Result<Child>> {
    let mut children = CHILDREN.lock().ok()?;
    if STOPPING.load(Ordering::SeqCst) {
        return None;
    }
    let child = start();
    if let Ok(c) = &child {
        children.push(c.id());
    }
    Some(child)
}

/// Forgets a worker process once it has been waited for.
pub fn child_ended(pid: u32) {
    if let Ok(mut c) = CHILDREN.lock() {
        c.retain(|&p| p != pid);
    }
}

/// Records a directory to remove on interruption.
pub fn dir_created(dir: &Path) {
    if let Ok(mut d) = DIRS.lock() {
        d.push(dir.to_path_buf());
    }
}

/// Forgets a directory (removed normally, or kept on purpose).
pub fn dir_released(dir: &Path) {
    if let Ok(mut d) = DIRS.lock() {
        d.retain(|p| p != dir);
    }
}

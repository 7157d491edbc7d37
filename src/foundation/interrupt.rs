//! Ctrl-C, SIGTERM and SIGHUP: an interrupted audit stops its worker processes and removes its
//! work directory before it exits, instead of leaving orphans and temporary files.
//!
//! The handler only raises a flag. Each pool thread polls it while waiting for its worker and
//! kills that worker itself (so no process id is ever signalled after it was reaped), and the audit
//! checks it between phases and unwinds with an "interrupted" error, removing its work directory on
//! the way out. Should unwinding hang, the handler removes the registered directories itself and
//! exits after a grace period.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::foundation::error::ExitCode;

static STOPPING: AtomicBool = AtomicBool::new(false);
/// Work directories to remove if unwinding does not finish within the grace period.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// How long the audit gets to unwind after an interruption.
const GRACE: Duration = Duration::from_secs(10);

/// Installs the handler once, at start-up. Failing to install it is not worth failing the run.
pub fn install() {
    let _ = ctrlc::set_handler(|| {
        STOPPING.store(true, Ordering::SeqCst);
        std::thread::sleep(GRACE);
        for dir in DIRS.lock().map(|d| d.clone()).unwrap_or_default() {
            let _ = std::fs::remove_dir_all(dir);
        }
        crate::foundation::console::error(&format!(
            "interrupted, and the audit did not stop within {} s",
            GRACE.as_secs()
        ));
        std::process::exit(ExitCode::Interrupted as i32);
    });
}

/// Whether an interruption is being handled.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Fails with "interrupted" (exit code 130) if an interruption is being handled.
pub fn check() -> anyhow::Result<()> {
    if stopping() {
        Err(crate::foundation::error::interrupted())
    } else {
        Ok(())
    }
}

/// Records a directory to remove if the audit cannot unwind in time.
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

//! Device reports: what a user's phone or laptop sent in (its outputs, what it says it is, and
//! optionally its inputs and logs), in the three formats support staff receive. Every report is a
//! stranger's file: read with size limits, never followed through links, checked against the
//! model's signature before its arrays are used, and refused with one line saying why.
//!
//! - the tool's own report: a directory or `.zip` with `device.json`, `outputs.npz`, optional
//!   `inputs.npz` and `logs/` (`docs/device-reports.md`);
//! - a `qnn-net-run`/`snpe-net-run` output directory (`Result_N/<output>.raw`, the output's name
//!   spelled as any of the tools write it: [`spelling`]);
//! - Qualcomm AI Hub inference outputs saved as one `.npz` (output name -> samples).
//!
//! A report's logs are read by [`logs`]: QNN error codes, fallback, versions, contradictions.

mod aihub;
mod arrays;
mod info;
pub mod logs;
mod own;
mod qnn;
pub mod spelling;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

pub use arrays::{split_samples, Samples};
pub use info::{identify_device, DeviceInfo, Identity, IdentityStatus};
pub use logs::LogFindings;

use crate::data::model::Signature;
use crate::foundation::error::bad_input;

/// The most one file of a report may hold (uncompressed), and the most a whole report may.
pub const MAX_FILE_BYTES: u64 = 512 << 20;
/// See [`MAX_FILE_BYTES`].
pub const MAX_REPORT_BYTES: u64 = 1 << 30;
/// `device.json` and each log are text a person wrote or a phone printed: small.
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// Which format a report came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    /// The tool's own directory.
    Directory,
    /// The tool's own `.zip`.
    Zip,
    /// A `qnn-net-run`/`snpe-net-run` output directory.
    QnnNetRun,
    /// Qualcomm AI Hub outputs saved as `.npz`.
    AiHub,
}

/// One device report, parsed and checked against the model.
#[derive(Debug, Clone)]
pub struct DeviceReport {
    pub path: PathBuf,
    pub format: ReportFormat,
    /// SHA-256 of the report's files (names and bytes), so a report sent twice is one report.
    pub content_sha256: String,
    pub device: DeviceInfo,
    /// What the device produced, per sample, in the model's output order.
    pub outputs: Samples,
    /// What it was fed, per sample in the model's input order, when the report says.
    pub inputs: Option<Samples>,
    /// Logs that came along: (file name, text).
    pub logs: Vec<(String, String)>,
    /// For a `qnn-net-run`/`snpe-net-run` directory: the file of each output and how its name was
    /// spelled (empty for the other formats, whose arrays carry the output names).
    pub output_files: Vec<spelling::OutputFile>,
}

/// What the caller knows about reports that do not say it themselves (`--chipset`, `--inputs`).
#[derive(Debug, Clone, Default)]
pub struct ReportDefaults {
    /// A chipset spelling for reports without a `device.json` (AI Hub, `qnn-net-run`).
    pub chipset: Option<String>,
    /// The shape of each model input as the default inputs have it: what a raw input file of a
    /// model with dynamic dimensions is read as, when its size fits.
    pub input_shapes: std::collections::HashMap<String, Vec<usize>>,
}

/// Reads the report at `path` in whichever format it is, checking every array against `sig`.
pub fn read_report(path: &Path, sig: &Signature, defaults: &ReportDefaults) -> Result<DeviceReport> {
    let meta =
        std::fs::symlink_metadata(path).map_err(|e| bad_input(format!("device report {}: {e}", path.display())))?;
    if meta.file_type().is_symlink() {
        return Err(bad_input(format!(
            "device report {}: a symbolic link (reports are read only as they are)",
            path.display()
        )));
    }
    let report = if meta.is_dir() {
        // A qnn-net-run directory may carry device.json beside Result_0/; outputs.npz is ours.
        let qnn = path.join("Result_0").is_dir() && !path.join("outputs.npz").exists();
        if !qnn && (path.join("device.json").exists() || path.join("outputs.npz").exists()) {
            own::read_dir(path, sig)?
        } else {
            qnn::read_dir(path, sig, defaults)?
        }
    } else if meta.is_file() {
        read_file(path, sig, defaults)?
    } else {
        return Err(bad_input(format!(
            "device report {}: {}, not a directory or a file",
            path.display(),
            crate::foundation::userfile::kind_of(&meta)
        )));
    };
    Ok(report)
}

/// A `.zip` of the tool's own format, or an AI Hub `.npz` (a zip of `.npy` members only).
fn read_file(path: &Path, sig: &Signature, defaults: &ReportDefaults) -> Result<DeviceReport> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let bytes = read_member(path, &name, MAX_REPORT_BYTES)
        .map_err(|e| bad_input(format!("device report {}: {e:#}", path.display())))?;
    if own::is_zip_name(path) || own::is_own_zip(&bytes) {
        own::read_zip(path, bytes, sig)
    } else {
        aihub::read_npz(path, bytes, sig, defaults)
    }
}

/// The bytes of one file of a report (`shown` names it in messages), never through a link: a
/// symbolic link, or anything but a regular file, is refused, as is a file over `cap` bytes.
fn read_member(path: &Path, shown: &str, cap: u64) -> Result<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    refuse_link(&meta, shown)?;
    if !meta.is_file() {
        bail!(
            "{shown} is {}, not a regular file",
            crate::foundation::userfile::kind_of(&meta)
        );
    }
    if meta.len() > cap {
        bail!("{shown} is larger than {} MiB", cap >> 20);
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        // Whatever replaced the file since it was looked at: a link fails to open, a FIFO does not
        // block.
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        bail!("{shown} is not a regular file");
    }
    crate::foundation::userfile::read_limited(file, cap).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => anyhow::anyhow!("{shown} grew beyond {} MiB while read", cap >> 20),
        _ => anyhow::anyhow!("{shown}: {e}"),
    })
}

/// Whether a directory of a report (`shown` names it) is there: `false` when absent; a link, or
/// anything but a directory, is refused.
fn member_dir(path: &Path, shown: &str) -> Result<bool> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(false);
    };
    refuse_link(&meta, shown)?;
    if !meta.is_dir() {
        bail!(
            "{shown} is {}, not a directory",
            crate::foundation::userfile::kind_of(&meta)
        );
    }
    Ok(true)
}

/// A report is read only as it is: a link inside it could point anywhere on this machine.
fn refuse_link(meta: &std::fs::Metadata, shown: &str) -> Result<()> {
    if meta.file_type().is_symlink() {
        bail!("{shown} is a symbolic link (a report is read as it is, never through links)");
    }
    Ok(())
}

/// Lists the reports under `dir` for a fleet: each entry that is a report (a directory with
/// `device.json` or `Result_0/`, a `.zip`, a `.npz`), sorted by name; other entries are skipped.
pub fn fleet_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| bad_input(format!("{}: {e}", dir.display())))?;
    for e in entries {
        let p = e.map_err(|e| bad_input(format!("{}: {e}", dir.display())))?.path();
        let is_report_dir = p.is_dir() && (p.join("device.json").exists() || p.join("Result_0").is_dir());
        let is_archive = p.is_file() && p.extension().is_some_and(|x| x == "zip" || x == "npz");
        if is_report_dir || is_archive {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Whether `dir` is one report rather than a directory of reports.
pub fn is_single_report(dir: &Path) -> bool {
    dir.join("device.json").exists() || dir.join("outputs.npz").exists() || dir.join("Result_0").is_dir()
}

/// Files a report at `path` brings besides itself (an AI Hub `.npz`'s `.device.json` sidecar):
/// read with it, so no output may replace them.
pub fn companion_files(path: &Path) -> Vec<PathBuf> {
    aihub::sidecar_path(path).into_iter().collect()
}

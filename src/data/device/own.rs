//! The tool's own device report, as a directory or a `.zip` of the same files: `device.json`,
//! `outputs.npz`, optional `inputs.npz` and `logs/<file>`. Nothing else is read; links, devices,
//! paths that climb and members larger than the limits are refused.

use std::io::Cursor;
use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::arrays::read_npz_for;
use super::{
    member_dir, read_member, DeviceInfo, DeviceReport, ReportFormat, MAX_FILE_BYTES, MAX_REPORT_BYTES, MAX_TEXT_BYTES,
};
use crate::data::model::Signature;
use crate::foundation::error::bad_input;

/// The most logs one report may carry.
const MAX_LOGS: usize = 32;

/// A report's files by name, as read (from a directory or an archive).
#[derive(Default)]
struct Files {
    device: Option<Vec<u8>>,
    outputs: Option<Vec<u8>>,
    inputs: Option<Vec<u8>>,
    logs: Vec<(String, Vec<u8>)>,
    total: u64,
}

impl Files {
    /// Keeps one member under its name, refusing names the format does not have.
    fn put(&mut self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.total += bytes.len() as u64;
        if self.total > MAX_REPORT_BYTES {
            bail!("the report holds more than {} MiB", MAX_REPORT_BYTES >> 20);
        }
        match name {
            "device.json" => self.device = Some(bytes),
            "outputs.npz" => self.outputs = Some(bytes),
            "inputs.npz" => self.inputs = Some(bytes),
            _ => match log_name(name) {
                Some(log) if self.logs.len() < MAX_LOGS => self.logs.push((log.to_string(), bytes)),
                Some(_) => bail!("more than {MAX_LOGS} logs"),
                None => bail!("'{name}' is not part of a device report (device.json, outputs.npz, inputs.npz, logs/)"),
            },
        }
        Ok(())
    }

    /// SHA-256 over every member's name and bytes, in a fixed order.
    fn sha256(&self) -> String {
        let mut h = Sha256::new();
        let mut add = |name: &str, bytes: &[u8]| {
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        for (name, member) in [
            ("device.json", &self.device),
            ("outputs.npz", &self.outputs),
            ("inputs.npz", &self.inputs),
        ] {
            if let Some(b) = member {
                add(name, b);
            }
        }
        let mut logs: Vec<&(String, Vec<u8>)> = self.logs.iter().collect();
        logs.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, b) in logs {
            add(&format!("logs/{name}"), b);
        }
        crate::foundation::hash::hex(&h.finalize())
    }
}

/// `logs/<file>` with a plain file name, else `None`.
fn log_name(name: &str) -> Option<&str> {
    let file = name.strip_prefix("logs/")?;
    let plain = !file.is_empty() && !file.contains(['/', '\\']) && file != "." && file != "..";
    plain.then_some(file)
}

/// Whether `bytes` is a zip archive of the tool's own report (it has `outputs.npz` or
/// `device.json`), as opposed to an AI Hub `.npz` of arrays.
pub fn is_own_zip(bytes: &[u8]) -> bool {
    zip::ZipArchive::new(Cursor::new(bytes))
        .map(|a| a.file_names().any(|n| n == "outputs.npz" || n == "device.json"))
        .unwrap_or(false)
}

/// Whether `path` is named as the tool's own report archive (`.zip`): then it is read as one,
/// whatever it holds, and a damaged one is said to be a damaged `.zip`.
pub fn is_zip_name(path: &Path) -> bool {
    path.extension().is_some_and(|x| x.eq_ignore_ascii_case("zip"))
}

fn cap_of(name: &str) -> u64 {
    if name == "outputs.npz" || name == "inputs.npz" {
        MAX_FILE_BYTES
    } else {
        MAX_TEXT_BYTES
    }
}

fn files_of_dir(dir: &Path) -> Result<Files> {
    let mut files = Files::default();
    for name in ["device.json", "outputs.npz", "inputs.npz"] {
        let p = dir.join(name);
        if std::fs::symlink_metadata(&p).is_ok() {
            files.put(name, read_member(&p, name, cap_of(name))?)?;
        }
    }
    let logs = dir.join("logs");
    if member_dir(&logs, "logs")? {
        let mut entries: Vec<_> = std::fs::read_dir(&logs)?.collect::<std::io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = format!("logs/{}", e.file_name().to_string_lossy());
            files.put(&name, read_member(&e.path(), &name, MAX_TEXT_BYTES)?)?;
        }
    }
    Ok(files)
}

fn files_of_zip(bytes: Vec<u8>) -> Result<Files> {
    let mut archive = crate::data::tensor::open_zip(Cursor::new(bytes), ".zip")?;
    let mut files = Files::default();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).context("cannot read the archive")?;
        let name = entry.name().to_string();
        if entry.is_symlink() {
            bail!("'{name}' is a symbolic link (a report's members are files)");
        }
        if entry.is_dir() {
            if name == "logs/" {
                continue;
            }
            bail!("'{name}' is not part of a device report");
        }
        let cap = cap_of(&name);
        if entry.size() > cap {
            bail!("'{name}' unpacks to more than {} MiB", cap >> 20);
        }
        let member = crate::foundation::userfile::read_limited(&mut entry, cap).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => anyhow::anyhow!("'{name}' unpacks to more than {} MiB", cap >> 20),
            _ => anyhow::anyhow!("'{name}': the archive is damaged"),
        })?;
        files.put(&name, member)?;
    }
    Ok(files)
}

/// Builds the report from its files, every array checked against `sig`.
fn report_of(path: &Path, format: ReportFormat, files: Files, sig: &Signature) -> Result<DeviceReport> {
    let content_sha256 = files.sha256();
    let device = match &files.device {
        Some(b) => DeviceInfo::parse(b)?,
        None => bail!("no device.json (the chipset must be stated)"),
    };
    let Some(outputs) = files.outputs else {
        bail!("no outputs.npz");
    };
    let outputs = read_npz_for(outputs, &sig.outputs, "output").context("outputs.npz")?;
    let inputs = match files.inputs {
        Some(b) => Some(read_npz_for(b, &sig.inputs, "input").context("inputs.npz")?),
        None => None,
    };
    let logs = files
        .logs
        .into_iter()
        .map(|(n, b)| (n, String::from_utf8_lossy(&b).into_owned()))
        .collect();
    Ok(DeviceReport {
        path: path.to_path_buf(),
        format,
        content_sha256,
        device,
        outputs,
        inputs,
        logs,
        output_files: Vec::new(),
    })
}

/// Reads a report directory.
pub fn read_dir(dir: &Path, sig: &Signature) -> Result<DeviceReport> {
    files_of_dir(dir)
        .and_then(|f| report_of(dir, ReportFormat::Directory, f, sig))
        .map_err(|e| bad_input(format!("device report {}: {e:#}", dir.display())))
}

/// Reads a report `.zip` already in memory.
pub fn read_zip(path: &Path, bytes: Vec<u8>, sig: &Signature) -> Result<DeviceReport> {
    files_of_zip(bytes)
        .and_then(|f| report_of(path, ReportFormat::Zip, f, sig))
        .map_err(|e| bad_input(format!("device report {}: {e:#}", path.display())))
}

//! Files the user named: read (`-` is standard input), or written because the user asked for
//! them, checked before any work and written atomically (a temporary file in the same directory,
//! renamed into place) so a failed run never leaves a half-written file; `-` is standard output.

use crate::error::bad_output;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

/// Fails early, before any work, when the report cannot be written where asked.
pub fn check_writable(path: &Path) -> Result<()> {
    check_writable_as("--out", path)
}

/// [`check_writable`] for the file of another flag, named in the error.
pub fn check_writable_as(flag: &str, path: &Path) -> Result<()> {
    if is_stdio(path) {
        return Ok(());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if path.is_dir() {
        return Err(bad_output(format!("{flag} {} is a directory", path.display())));
    }
    if !parent.is_dir() {
        return Err(bad_output(format!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            parent.display()
        )));
    }
    tempfile::NamedTempFile::new_in(&parent).map(|_| ()).map_err(|e| {
        bad_output(format!(
            "{flag} {}: cannot write into {}: {e}",
            path.display(),
            parent.display()
        ))
    })
}

/// Writes bytes to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| bad_output(format!("cannot write {}: {e}", path.display())))?;
    tmp.write_all(bytes)
        .map_err(|e| bad_output(format!("cannot write {}: {e}", path.display())))?;
    tmp.persist(path)
        .map_err(|e| bad_output(format!("cannot write {}: {}", path.display(), e.error)))?;
    Ok(())
}

/// Whether a path names standard input or output (`-`).
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// The bytes of a file the user named, or of standard input for `-`.
pub fn read_user_file(path: &Path) -> std::io::Result<Vec<u8>> {
    if is_stdio(path) {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)?;
        return Ok(bytes);
    }
    std::fs::read(path)
}

/// How a path is named in messages: `standard input` for `-`.
pub fn shown(path: &Path) -> String {
    if is_stdio(path) {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

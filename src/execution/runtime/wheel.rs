//! Extracting only the shared libraries from an ONNX Runtime wheel (a zip archive), recording the
//! SHA-256 of each.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::catalog::is_shared_library;
use crate::foundation::hash::copy_and_hash;

/// One extracted file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LibFile {
    /// Path relative to the runtime directory, as inside the wheel.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// Extracts the shared libraries of `wheel` into `dest`, keeping the wheel's directory layout
/// (plugins find their bundled dependencies through relative rpaths).
pub fn extract_shared_libraries(wheel: &Path, dest: &Path) -> Result<Vec<LibFile>> {
    let file = File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
    let mut archive =
        crate::data::tensor::open_zip(BufReader::new(file), "wheel").with_context(|| format!("{}", wheel.display()))?;
    let mut files = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| anyhow::anyhow!("cannot read wheel entry: {e}"))?;
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let rel_text = rel.to_string_lossy().replace('\\', "/");
        if entry.is_dir() || !is_shared_library(&rel_text) {
            continue;
        }
        let out_path = dest.join(&rel);
        if let Some(parent) = out_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let out = File::create(&out_path).with_context(|| format!("cannot create {}", out_path.display()))?;
        let (size, sha256) =
            copy_and_hash(&mut entry, out).with_context(|| format!("cannot extract {}", out_path.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&out_path, std::fs::Permissions::from_mode(0o755))?;
        }
        files.push(LibFile {
            path: rel_text,
            size,
            sha256,
        });
    }
    Ok(files)
}

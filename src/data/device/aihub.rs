//! Qualcomm AI Hub inference outputs saved as one `.npz` (output name -> samples stacked on a
//! leading axis, as `np.savez(path, **{k: np.stack(v) for k, v in outputs.items()})` writes the
//! dictionary `download_output_data()` returns). The device is the AI Hub device name or chipset
//! attribute given with `--chipset`, or a `device.json` beside the archive (`<stem>.device.json`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::arrays::read_npz_for;
use super::{DeviceInfo, DeviceReport, ReportDefaults, ReportFormat, MAX_TEXT_BYTES};
use crate::data::model::Signature;
use crate::foundation::error::bad_input;
use crate::foundation::hash::sha256_hex;

/// AI Hub device names and the chipset each stands for, as AI Hub's device list names them (seen
/// in the `supported_devices` lists of Qualcomm's published AI Hub model cards: "Samsung Galaxy
/// S22 Ultra 5G", "Samsung Galaxy Tab S8", "Xiaomi 12 Pro", "Snapdragon 8 Gen 3 QRD", "Snapdragon X
/// Elite CRD", ...). Variants are folded before the lookup: a trailing "(Family)", "5G", "Ultra",
/// "Plus"/"+" and "Pro".
const DEVICES: &[(&str, &str)] = &[
    ("samsung galaxy s21", "sm8350"),
    ("samsung galaxy s22", "sm8450"),
    ("samsung galaxy tab s8", "sm8450"),
    ("xiaomi 12", "sm8450"),
    ("samsung galaxy s23", "sm8550"),
    ("samsung galaxy s24", "sm8650"),
    ("samsung galaxy s25", "sm8750"),
    ("snapdragon 8 gen 3 qrd", "sm8650"),
    ("snapdragon 8 elite qrd", "sm8750"),
    ("snapdragon x elite crd", "snapdragon x elite"),
    ("snapdragon x plus 8-core crd", "snapdragon x plus"),
];

/// A device name without the words that tell variants of one phone apart.
fn family(text: &str) -> String {
    let mut name = text.to_lowercase().trim().to_string();
    loop {
        let before = name.clone();
        for suffix in ["(family)", " 5g", " ultra", " plus", "+", " pro"] {
            if let Some(rest) = name.strip_suffix(suffix) {
                name = rest.trim_end().to_string();
            }
        }
        if name == before {
            return name;
        }
    }
}

/// The chipset an AI Hub device name stands for, else the text itself (a chipset attribute or
/// any other spelling, read by the chipset table).
pub fn chipset_of_device_name(text: &str) -> String {
    let name = family(text);
    DEVICES
        .iter()
        .find(|(d, _)| *d == name)
        .map_or_else(|| text.to_string(), |(_, sm)| sm.to_string())
}

/// Where the `device.json` of an AI Hub `.npz` is: `X.device.json` beside `X.npz`.
pub fn sidecar_path(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?;
    Some(path.with_file_name(format!("{}.device.json", stem.to_string_lossy())))
}

fn sidecar(path: &Path) -> Result<Option<DeviceInfo>> {
    let Some(side) = sidecar_path(path) else {
        return Ok(None);
    };
    if std::fs::symlink_metadata(&side).is_err() {
        return Ok(None);
    }
    let shown = side.display().to_string();
    let bytes = super::read_member(&side, &shown, MAX_TEXT_BYTES)?;
    Ok(Some(DeviceInfo::parse(&bytes).with_context(|| shown)?))
}

/// Reads an AI Hub `.npz` held in memory.
pub fn read_npz(path: &Path, bytes: Vec<u8>, sig: &Signature, defaults: &ReportDefaults) -> Result<DeviceReport> {
    // A file named otherwise says what it was taken for.
    let taken = if path.extension().is_some_and(|x| x.eq_ignore_ascii_case("npz")) {
        ""
    } else {
        "read as an AI Hub .npz (it is no .zip and holds no device.json or outputs.npz): "
    };
    let fail = |e: anyhow::Error| bad_input(format!("device report {}: {taken}{e:#}", path.display()));
    let content_sha256 = sha256_hex(&bytes);
    let outputs = read_npz_for(bytes, &sig.outputs, "output").map_err(fail)?;
    let mut device = sidecar(path).map_err(fail)?.unwrap_or_default();
    if device.chipset.is_none() && device.soc_model.is_none() && device.board_platform.is_none() {
        device.chipset = defaults.chipset.as_deref().map(chipset_of_device_name);
    }
    Ok(DeviceReport {
        path: path.to_path_buf(),
        format: ReportFormat::AiHub,
        content_sha256,
        device,
        outputs,
        inputs: None,
        logs: Vec::new(),
        output_files: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ai_hub_device_names_map_to_their_chipset() {
        assert_eq!(chipset_of_device_name("Samsung Galaxy S24 (Family)"), "sm8650");
        assert_eq!(chipset_of_device_name("Samsung Galaxy S23 Ultra"), "sm8550");
        assert_eq!(chipset_of_device_name("Samsung Galaxy S22 Ultra 5G"), "sm8450");
        assert_eq!(chipset_of_device_name("Samsung Galaxy S22+ 5G"), "sm8450");
        assert_eq!(chipset_of_device_name("Xiaomi 12 Pro"), "sm8450");
        assert_eq!(chipset_of_device_name("Samsung Galaxy Tab S8"), "sm8450");
        assert_eq!(chipset_of_device_name("Snapdragon 8 Gen 3 QRD"), "sm8650");
        for (name, part) in [
            ("Snapdragon X Elite CRD", "SC8380XP"),
            ("Snapdragon X Plus 8-Core CRD", "SC8340XP"),
        ] {
            let spelled = crate::data::target::Chipset::from_spelling(&chipset_of_device_name(name));
            assert!(
                matches!(spelled, crate::data::target::chipset::Spelling::NotSimulated(d) if d.contains(part)),
                "{name}: {spelled:?}"
            );
        }
        // A phone AI Hub lists whose chipset has no HTP here stays as it was said.
        assert_eq!(chipset_of_device_name("Google Pixel 3"), "Google Pixel 3");
        assert_eq!(
            chipset_of_device_name("chipset:qualcomm-snapdragon-8gen2"),
            "chipset:qualcomm-snapdragon-8gen2"
        );
    }
}

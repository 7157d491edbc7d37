//! `device.json`: what a device says it is, and which chipset that makes it. Every key is
//! optional; the chipset comes from whichever of `soc_model`, `board_platform` and `chipset` are
//! there, and when they disagree or name nothing known the report says so instead of guessing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::data::target::chipset::{Chipset, Spelling};

/// The longest value a `device.json` key may have.
const MAX_VALUE_CHARS: usize = 256;

/// What a device states about itself (`docs/device-reports.md`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model: Option<String>,
    /// The SoC as the device states it (`ro.soc.model`, e.g. `SM8650`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soc_model: Option<String>,
    /// `ro.board.platform` (`pineapple`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_platform: Option<String>,
    /// A marketing name or AI Hub chipset attribute, when that is all there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chipset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onnxruntime_version: Option<String>,
    /// The execution provider the app asked for (`QNNExecutionProvider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ep: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ep_options: BTreeMap<String, String>,
    /// The QNN plugin or SDK release on the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qnn_release: Option<String>,
    /// SHA-256 of the model file the device ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
    /// Keys of `device.json` outside this schema, as the device wrote them (an app's own
    /// `app_build` or `locale`): kept and listed in the report, never read. A value longer than
    /// 256 characters as JSON is kept as a string saying so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_keys: BTreeMap<String, serde_json::Value>,
}

/// The keys `device.json` defines (`docs/device-reports.md`).
const KNOWN_KEYS: &[&str] = &[
    "manufacturer",
    "device_model",
    "soc_model",
    "board_platform",
    "chipset",
    "os",
    "app_version",
    "onnxruntime_version",
    "ep",
    "ep_options",
    "qnn_release",
    "model_sha256",
];

/// The deepest nesting of an unknown key's value that is kept.
const MAX_DEPTH: usize = 8;

/// How deeply a JSON value nests arrays and objects.
fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A JSON document in which no object names a key twice (what it holds is read elsewhere).
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NoDuplicateKeys, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicateKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let shown: String = key.chars().take(64).collect();
                return Err(serde::de::Error::custom(format!(
                    "the key \"{}\" is given twice (which one the device meant is unknown)",
                    shown.escape_debug()
                )));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicateKeys, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_unit<E>(self) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
}

/// The most keys outside the schema one `device.json` may add.
const MAX_UNKNOWN_KEYS: usize = 64;

impl DeviceInfo {
    /// Parses `device.json`: the schema's keys checked (strings, at most 256 characters), other
    /// keys kept aside (at most 64, names at most 256 characters).
    pub fn parse(text: &[u8]) -> Result<DeviceInfo> {
        // A key named twice would silently keep its last value (a second `soc_model` overriding
        // the first): the file is refused, naming the key.
        serde_json::from_slice::<NoDuplicateKeys>(text).map_err(|e| anyhow::anyhow!("device.json: {e}"))?;
        let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| anyhow::anyhow!("device.json: {e}"))?;
        let serde_json::Value::Object(mut map) = value else {
            bail!("device.json: not a JSON object");
        };
        let unknown: Vec<String> = map
            .keys()
            .filter(|k| !KNOWN_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        if unknown.len() > MAX_UNKNOWN_KEYS {
            bail!("device.json: more than {MAX_UNKNOWN_KEYS} keys outside the schema");
        }
        let mut kept = BTreeMap::new();
        for key in unknown {
            if key.chars().count() > MAX_VALUE_CHARS {
                bail!("device.json: a key is longer than {MAX_VALUE_CHARS} characters");
            }
            let v = map.remove(&key).unwrap_or_default();
            let chars = v.to_string().chars().count();
            let v = if chars > MAX_VALUE_CHARS {
                serde_json::Value::String(format!("(not kept: {chars} characters)"))
            } else if depth(&v) > MAX_DEPTH {
                // Kept deeper, a report entry could no longer be read back from a triage store.
                serde_json::Value::String(format!("(not kept: nested deeper than {MAX_DEPTH})"))
            } else {
                v
            };
            kept.insert(key, v);
        }
        let mut info: DeviceInfo =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| anyhow::anyhow!("device.json: {e}"))?;
        info.unknown_keys = kept;
        let long = info
            .strings()
            .into_iter()
            .find(|(_, v)| v.chars().count() > MAX_VALUE_CHARS);
        if let Some((key, _)) = long {
            bail!("device.json: {key} is longer than {MAX_VALUE_CHARS} characters");
        }
        if info.ep_options.len() > 64 {
            bail!("device.json: more than 64 ep_options");
        }
        Ok(info)
    }

    fn strings(&self) -> Vec<(String, &str)> {
        let named = [
            ("manufacturer", &self.manufacturer),
            ("device_model", &self.device_model),
            ("soc_model", &self.soc_model),
            ("board_platform", &self.board_platform),
            ("chipset", &self.chipset),
            ("os", &self.os),
            ("app_version", &self.app_version),
            ("onnxruntime_version", &self.onnxruntime_version),
            ("ep", &self.ep),
            ("qnn_release", &self.qnn_release),
            ("model_sha256", &self.model_sha256),
        ];
        let mut out: Vec<(String, &str)> = named
            .into_iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k.to_string(), v)))
            .collect();
        for (k, v) in &self.ep_options {
            out.push((format!("ep_options key {k:?}"), k.as_str()));
            out.push((format!("ep_options.{k}"), v.as_str()));
        }
        out
    }
}

/// How sure the chipset of a report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdentityStatus {
    /// One chipset the audit can simulate.
    Identified,
    /// A known chipset without a simulation target.
    NotSimulated,
    /// A spelling shared by several chipsets, nothing else to decide.
    Ambiguous,
    /// The keys name different chipsets.
    Contradictory,
    /// No key names a chipset this tool knows.
    Unknown,
}

/// The chipset a report comes from, as far as it can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Identity {
    pub status: IdentityStatus,
    /// The part number (`sm8650`), when identified.
    pub chipset: Option<String>,
    /// What was read and what it means.
    pub sentence: String,
}

/// The chipset of a device from every key that can name one.
pub fn identify_device(info: &DeviceInfo) -> Identity {
    let said: Vec<(&str, &str)> = [
        ("soc_model", &info.soc_model),
        ("board_platform", &info.board_platform),
        ("chipset", &info.chipset),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
    .collect();
    let said_text = said
        .iter()
        .map(|(k, v)| format!("{k} {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut sets: Vec<BTreeSet<String>> = Vec::new();
    for (_, v) in &said {
        match Chipset::from_spelling(v) {
            Spelling::Chipset(c) => sets.push([c.sm.to_string()].into()),
            Spelling::OneOf(parts) => sets.push(parts.iter().map(|p| p.to_string()).collect()),
            Spelling::NotSimulated(d) => sets.push([d.to_string()].into()),
            Spelling::Unknown => {}
        }
    }
    let ident = |status, chipset: Option<String>, sentence: String| Identity {
        status,
        chipset,
        sentence,
    };
    let Some(first) = sets.first() else {
        let what = if said.is_empty() {
            "no chipset key".to_string()
        } else {
            said_text
        };
        return ident(
            IdentityStatus::Unknown,
            None,
            format!("{what}: no chipset this tool knows"),
        );
    };
    let common: BTreeSet<String> = sets.iter().fold(first.clone(), |acc, s| &acc & s);
    let names: Vec<&String> = common.iter().collect();
    match names.as_slice() {
        [] => ident(
            IdentityStatus::Contradictory,
            None,
            format!("{said_text}: these name different chipsets"),
        ),
        [one] if Chipset::find(one).is_some() => ident(
            IdentityStatus::Identified,
            Some(one.to_string()),
            format!(
                "{said_text}: {}",
                Chipset::find(one).map(|c| c.describe()).unwrap_or_default()
            ),
        ),
        [one] => ident(
            IdentityStatus::NotSimulated,
            None,
            format!("{said_text}: {one}, which has no HTP simulation here"),
        ),
        many => ident(
            IdentityStatus::Ambiguous,
            None,
            format!(
                "{said_text}: any of {}; soc_model would decide",
                many.iter().map(|s| s.to_uppercase()).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(soc: Option<&str>, board: Option<&str>, chipset: Option<&str>) -> Identity {
        identify_device(&DeviceInfo {
            soc_model: soc.map(str::to_string),
            board_platform: board.map(str::to_string),
            chipset: chipset.map(str::to_string),
            ..Default::default()
        })
    }

    #[test]
    fn agreeing_keys_identify_and_disagreeing_ones_are_said() {
        assert_eq!(
            with(Some("SM8650"), Some("pineapple"), None).chipset.as_deref(),
            Some("sm8650")
        );
        assert_eq!(with(None, Some("taro"), None).status, IdentityStatus::Ambiguous);
        assert_eq!(
            with(Some("SM8475"), Some("taro"), None).chipset.as_deref(),
            Some("sm8475")
        );
        assert_eq!(
            with(Some("SM8650"), Some("kalama"), None).status,
            IdentityStatus::Contradictory
        );
        assert_eq!(
            with(None, None, Some("Snapdragon X Elite")).status,
            IdentityStatus::NotSimulated
        );
        assert_eq!(with(Some("Exynos 2400"), None, None).status, IdentityStatus::Unknown);
        assert_eq!(with(None, None, None).status, IdentityStatus::Unknown);
    }

    #[test]
    fn device_json_checks_its_keys_and_keeps_the_others() {
        assert!(DeviceInfo::parse(br#"{"soc_model": "SM8650"}"#).is_ok());
        let info = DeviceInfo::parse(br#"{"soc_model": "SM8650", "rooted": true, "unknown_keys": 3}"#).unwrap();
        assert_eq!(info.soc_model.as_deref(), Some("SM8650"));
        assert_eq!(
            info.unknown_keys.keys().collect::<Vec<_>>(),
            vec!["rooted", "unknown_keys"]
        );
        assert_eq!(info.unknown_keys["rooted"], serde_json::json!(true));
        let big = format!(r#"{{"notes": "{}"}}"#, "a".repeat(300));
        let kept = DeviceInfo::parse(big.as_bytes()).unwrap();
        assert_eq!(
            kept.unknown_keys["notes"],
            serde_json::json!("(not kept: 302 characters)")
        );
        let long = format!(r#"{{"os": "{}"}}"#, "a".repeat(300));
        assert!(DeviceInfo::parse(long.as_bytes()).is_err());
        assert!(DeviceInfo::parse(br#"{"os": 7}"#).is_err());
        let deep = format!(r#"{{"deep": {}1{}}}"#, "[".repeat(20), "]".repeat(20));
        let kept = DeviceInfo::parse(deep.as_bytes()).unwrap();
        assert_eq!(
            kept.unknown_keys["deep"],
            serde_json::json!("(not kept: nested deeper than 8)")
        );
        assert!(DeviceInfo::parse(b"[]").is_err());
        // A key given twice (at any depth) is refused, named.
        let twice = DeviceInfo::parse(br#"{"soc_model": "SM8650", "soc_model": "SM8450"}"#)
            .unwrap_err()
            .to_string();
        assert!(twice.contains("the key \"soc_model\" is given twice"), "{twice}");
        assert!(DeviceInfo::parse(br#"{"soc_model": "SM8650", "app": {"v": 1, "v": 2}}"#).is_err());
        let many: Vec<String> = (0..65).map(|k| format!(r#""k{k}": 1"#)).collect();
        assert!(DeviceInfo::parse(format!("{{{}}}", many.join(",")).as_bytes()).is_err());
    }
}

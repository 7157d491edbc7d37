//! Each target's cost of one sample: `--costs` as given, measured off an earlier eval, or the
//! default of its backend; what `eval`'s units are cut by.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::data::target::{Backend, TargetSpec};
use crate::foundation::error::bad_flag;

/// `--costs RUN=WEIGHT,...`: each run's relative cost of one sample (the `plan` command measures
/// them or reads them off a previous eval's report, and hands the same to every shard, so every
/// shard cuts the work at the same places).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Costs(pub BTreeMap<String, u64>);

impl Costs {
    /// Parses `cpu=1,qnn:sm8650=700` (weights are positive integers); `;` separates the items
    /// instead when a target's id holds commas (`qnn:sm8650,htp_arch=75=700;cpu=1`).
    pub fn parse(text: &str) -> Result<Costs> {
        let mut map = BTreeMap::new();
        let separator = if text.contains(';') { ';' } else { ',' };
        for item in text.split(separator).map(str::trim).filter(|s| !s.is_empty()) {
            let (run, weight) = item
                .rsplit_once('=')
                .ok_or_else(|| bad_flag(format!("--costs '{item}' is not TARGET=WEIGHT")))?;
            let weight: u64 = weight
                .trim()
                .parse()
                .ok()
                .filter(|w| (1..=1_000_000_000).contains(w))
                .ok_or_else(|| {
                    bad_flag(format!(
                        "--costs '{item}': the weight is not a whole number from 1 to 10^9"
                    ))
                })?;
            if map.insert(run.trim().to_string(), weight).is_some() {
                return Err(bad_flag(format!("--costs names {} twice", run.trim())));
            }
        }
        Ok(Costs(map))
    }

    /// The flag's text for these costs (the form `parse` reads: `;`-separated when an id holds a
    /// comma).
    pub fn to_flag(&self) -> String {
        let separator = if self.0.keys().any(|r| r.contains(',')) {
            ";"
        } else {
            ","
        };
        self.0
            .iter()
            .map(|(r, w)| format!("{r}={w}"))
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// The weight of a target: as given, else the default of its backend.
    pub fn weight(&self, spec: &TargetSpec) -> u64 {
        self.0.get(&spec.id).copied().unwrap_or_else(|| default_cost(spec))
    }
}

/// A sample's cost on a backend relative to the CPU EP's when nothing better is known. Measured on
/// 2-core x86-64 machines (docs/scale.md): the QNN HTP simulator took 120 to 750 times the CPU
/// EP's time per sample of the PP-OCR classifier, depending on what shared the cores, the ARM64
/// CPU EP under qemu about 30 times. `plan --costs-from` measures them on the user's own eval.
pub fn default_cost(spec: &TargetSpec) -> u64 {
    match spec.backend {
        Backend::Cpu => 1,
        Backend::OpenVino { .. } => 2,
        Backend::Arm64 { .. } => 30,
        Backend::Qnn(_) => 700,
        Backend::DirectMl | Backend::Cuda | Backend::TensorRt => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_of_targets_whose_ids_hold_commas_read_back_as_written() {
        let mut map = BTreeMap::new();
        map.insert("qnn:sm8650,htp_arch=75,soc_model=57".to_string(), 700);
        map.insert("cpu".to_string(), 1);
        let costs = Costs(map);
        let flag = costs.to_flag();
        assert_eq!(flag, "cpu=1;qnn:sm8650,htp_arch=75,soc_model=57=700");
        assert_eq!(Costs::parse(&flag).unwrap(), costs);
        assert_eq!(Costs::parse("cpu=1,qnn:sm8650=700").unwrap().0.len(), 2);
    }

    #[test]
    fn costs_parse_and_print_back() {
        let c = Costs::parse("cpu=1, qnn:sm8650=700").unwrap();
        assert_eq!(c.to_flag(), "cpu=1,qnn:sm8650=700");
        assert!(Costs::parse("cpu=0").is_err() && Costs::parse("cpu").is_err() && Costs::parse("a=1,a=2").is_err());
    }
}

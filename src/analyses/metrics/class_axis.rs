//! Which outputs are score vectors, and along which axis their classes lie.

use std::collections::HashMap;

use anyhow::Result;

use crate::data::model::TensorInfo;
use crate::data::tensor::DType;
use crate::foundation::error::bad_flag;

/// `--class-axis` settings plus what the graph says.
#[derive(Debug, Clone, Default)]
pub struct ClassAxisPolicy {
    /// `--class-axis AXIS|none` for every output.
    pub default: Option<Option<i64>>,
    /// `--class-axis OUTPUT=AXIS|none`.
    pub per_output: HashMap<String, Option<i64>>,
    /// Softmax axes found in the model graph.
    pub softmax: HashMap<String, i64>,
}

fn parse_axis(text: &str) -> Option<Option<i64>> {
    if text.eq_ignore_ascii_case("none") {
        Some(None)
    } else {
        text.trim().parse::<i64>().ok().map(Some)
    }
}

/// One `--class-axis` value: for every output or one (`OUTPUT=`), an axis or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassAxisFlag {
    pub output: Option<String>,
    /// `None`: the output has no class axis (top-k does not apply).
    pub axis: Option<i64>,
}

impl ClassAxisFlag {
    /// Parses `AXIS`, `none`, `OUTPUT=AXIS` or `OUTPUT=none`.
    pub fn parse(text: &str) -> Result<ClassAxisFlag> {
        let bad = || {
            bad_flag(format!(
                "--class-axis '{text}' is not AXIS, none, OUTPUT=AXIS or OUTPUT=none"
            ))
        };
        let (output, axis) = match text.rsplit_once('=') {
            Some(("", _)) => return Err(bad()),
            Some((name, axis)) => (Some(name.to_string()), axis),
            None => (None, text),
        };
        Ok(ClassAxisFlag {
            output,
            axis: parse_axis(axis).ok_or_else(bad)?,
        })
    }
}

impl std::fmt::Display for ClassAxisFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(o) = &self.output {
            write!(f, "{o}=")?;
        }
        match self.axis {
            Some(a) => write!(f, "{a}"),
            None => f.write_str("none"),
        }
    }
}

impl ClassAxisPolicy {
    /// The `--class-axis` choices, checked against the model's outputs (names, and declared
    /// ranks where the model declares them).
    pub fn parse(
        flags: &[ClassAxisFlag],
        softmax: HashMap<String, i64>,
        outputs: &[TensorInfo],
    ) -> Result<ClassAxisPolicy> {
        let mut policy = ClassAxisPolicy {
            softmax,
            ..Default::default()
        };
        for f in flags {
            let flag = f.to_string();
            match &f.output {
                Some(name) => {
                    let Some(info) = outputs.iter().find(|o| &o.name == name) else {
                        let names: Vec<&str> = outputs.iter().map(|o| o.name.as_str()).collect();
                        return Err(bad_flag(format!(
                            "--class-axis '{flag}': the model has no output '{name}' (outputs: {})",
                            names.join(", ")
                        )));
                    };
                    check_rank(&flag, info, f.axis)?;
                    policy.per_output.insert(name.clone(), f.axis);
                }
                None => {
                    for info in outputs {
                        check_rank(&flag, info, f.axis)?;
                    }
                    policy.default = Some(f.axis);
                }
            }
        }
        Ok(policy)
    }

    /// The class axis of an output of this shape and type, if top-k applies to it.
    pub fn resolve(&self, output: &str, shape: &[usize], dtype: DType) -> Option<usize> {
        let rank = shape.len() as i64;
        let normalize = |axis: i64| -> Option<usize> {
            let a = if axis < 0 { axis + rank } else { axis };
            (0..rank).contains(&a).then_some(a as usize).filter(|&a| shape[a] >= 2)
        };
        if let Some(explicit) = self.per_output.get(output).copied().or(self.default) {
            return explicit.and_then(normalize);
        }
        if let Some(&axis) = self.softmax.get(output) {
            return normalize(axis);
        }
        // A plain score vector of floats: [C] or [N, C] (integer outputs such as ArgMax indices
        // are not scores).
        if !dtype.is_float() {
            return None;
        }
        match shape {
            [c] if *c >= 2 => Some(0),
            [_, c] if *c >= 2 => Some(1),
            _ => None,
        }
    }
}

/// An explicit axis must exist in an output whose rank the model declares.
fn check_rank(flag: &str, info: &TensorInfo, axis: Option<i64>) -> Result<()> {
    let (Some(axis), Some(dims)) = (axis, &info.dims) else {
        return Ok(());
    };
    let rank = dims.len() as i64;
    if axis >= rank || axis < -rank {
        return Err(bad_flag(format!(
            "--class-axis '{flag}': output '{}' has rank {rank}, so axis {axis} does not exist",
            info.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristics_and_overrides() {
        let softmax = HashMap::from([("probs".to_string(), -1)]);
        let f32 = DType::Float32;
        let outputs: Vec<TensorInfo> = ["logits", "probs", "map"]
            .iter()
            .map(|n| TensorInfo {
                name: n.to_string(),
                dtype: f32,
                dims: None,
            })
            .collect();
        let p = ClassAxisPolicy::parse(&[], softmax.clone(), &outputs).unwrap();
        assert_eq!(p.resolve("logits", &[1, 1000], f32), Some(1));
        assert_eq!(p.resolve("logits", &[1, 1000], DType::Int64), None);
        assert_eq!(p.resolve("probs", &[1, 16, 6625], f32), Some(2));
        assert_eq!(p.resolve("map", &[1, 1, 64, 64], f32), None);
        assert_eq!(p.resolve("scalar", &[1, 1], f32), None);
        let flags =
            |texts: &[&str]| -> Vec<ClassAxisFlag> { texts.iter().map(|t| ClassAxisFlag::parse(t).unwrap()).collect() };
        let q = ClassAxisPolicy::parse(&flags(&["map=1", "none"]), softmax, &outputs).unwrap();
        assert_eq!(q.resolve("map", &[1, 3, 8, 8], f32), Some(1));
        assert_eq!(q.resolve("logits", &[1, 1000], f32), None);
        assert!(ClassAxisFlag::parse("map=y").is_err());
        assert!(ClassAxisFlag::parse("=1").is_err());
        assert_eq!(ClassAxisFlag::parse("map=NONE").unwrap().to_string(), "map=none");
        assert!(ClassAxisPolicy::parse(&flags(&["nope=1"]), HashMap::new(), &outputs).is_err());
        let ranked = vec![TensorInfo {
            name: "y".into(),
            dtype: f32,
            dims: Some(vec![
                crate::data::model::Dim::Fixed(1),
                crate::data::model::Dim::Fixed(5),
            ]),
        }];
        assert!(ClassAxisPolicy::parse(&flags(&["2"]), HashMap::new(), &ranked).is_err());
        assert!(ClassAxisPolicy::parse(&flags(&["-2"]), HashMap::new(), &ranked).is_ok());
    }
}

//! Which outputs are score vectors, and along which axis their classes lie.

use std::collections::HashMap;

use anyhow::Result;

use crate::error::usage;

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

impl ClassAxisPolicy {
    /// Parses `--class-axis` values.
    pub fn parse(flags: &[String], softmax: HashMap<String, i64>) -> Result<ClassAxisPolicy> {
        let mut policy = ClassAxisPolicy {
            softmax,
            ..Default::default()
        };
        for f in flags {
            let bad = || {
                usage(format!(
                    "--class-axis '{f}' is not AXIS, none, OUTPUT=AXIS or OUTPUT=none"
                ))
            };
            match f.rsplit_once('=') {
                Some((name, axis)) => {
                    policy
                        .per_output
                        .insert(name.to_string(), parse_axis(axis).ok_or_else(bad)?);
                }
                None => policy.default = Some(parse_axis(f).ok_or_else(bad)?),
            }
        }
        Ok(policy)
    }

    /// The class axis of an output of this shape, if top-k applies to it.
    pub fn resolve(&self, output: &str, shape: &[usize]) -> Option<usize> {
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
        // A plain score vector: [C] or [N, C].
        match shape {
            [c] if *c >= 2 => Some(0),
            [_, c] if *c >= 2 => Some(1),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristics_and_overrides() {
        let softmax = HashMap::from([("probs".to_string(), -1)]);
        let p = ClassAxisPolicy::parse(&[], softmax.clone()).unwrap();
        assert_eq!(p.resolve("logits", &[1, 1000]), Some(1));
        assert_eq!(p.resolve("probs", &[1, 16, 6625]), Some(2));
        assert_eq!(p.resolve("map", &[1, 1, 64, 64]), None);
        assert_eq!(p.resolve("scalar", &[1, 1]), None);
        let q = ClassAxisPolicy::parse(&["map=1".into(), "none".into()], softmax).unwrap();
        assert_eq!(q.resolve("map", &[1, 3, 8, 8]), Some(1));
        assert_eq!(q.resolve("logits", &[1, 1000]), None);
        assert!(ClassAxisPolicy::parse(&["x=y".into()], HashMap::new()).is_err());
    }
}
